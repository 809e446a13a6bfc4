"""An ORIGINAL optimum-neuron Stable Diffusion script (issue 18): ``sd_generate.py MODEL_DIR``.

It cannot run on the new stack as it is (there is no optimum.neuron): ``tests/test_verify_warmup.py``
migrates a copy with the CLI (NM100/NM104: ``StableDiffusionPipeline ... .to("neuron")``,
``pipe.unet.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)``, the export's
height and width passed to every call) and verifies the migrated copy on the tiny pipeline that
``make_tiny_sd.py`` builds. Two prompts, one image each, 2 steps, seeded (the CPU reference run draws the same latents).
"""

import sys

import numpy as np
import torch

from optimum.neuron import NeuronStableDiffusionPipeline

model_dir = sys.argv[1]
pipe = NeuronStableDiffusionPipeline.from_pretrained(model_dir, export=True, batch_size=1, height=64, width=64)
prompts = ["a photo of an astronaut riding a horse on mars", "a watercolor of a lighthouse"]
for prompt in prompts:
    image = pipe(prompt, num_inference_steps=2, output_type="np", generator=torch.manual_seed(0)).images[0]
    print("image", image.shape, round(float(np.abs(image).mean()), 4))
