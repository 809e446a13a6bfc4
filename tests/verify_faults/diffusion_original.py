"""Fault catalogue, scenario "diffusion": an ORIGINAL optimum-neuron Stable Diffusion script
(``MODEL_DIR``: the tiny pipeline ``tests/verify_fixtures/make_tiny_sd.py`` builds): a pipeline
exported at 64x64, two prompts, two denoising steps each, seeded."""

import sys

import torch

from optimum.neuron import NeuronStableDiffusionPipeline

pipe = NeuronStableDiffusionPipeline.from_pretrained(sys.argv[1], export=True, batch_size=1, height=64, width=64)
prompts = ["a photo of an astronaut riding a horse on mars", "a watercolor of a lighthouse"]
for prompt in prompts:
    image = pipe(prompt, num_inference_steps=2, guidance_scale=7.5, output_type="np",
                 generator=torch.manual_seed(0)).images[0]
    print("image", image.shape)
