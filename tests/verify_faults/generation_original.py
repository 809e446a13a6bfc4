"""Fault catalogue, scenario "generation": an ORIGINAL optimum-neuron script (``MODEL_DIR``): greedy
generation with a compiled NeuronModelForCausalLM on two prompts given as token ids."""

import sys

import torch

from optimum.neuron import NeuronModelForCausalLM

model = NeuronModelForCausalLM.from_pretrained(
    sys.argv[1],
    export=True,
    batch_size=1,
    sequence_length=64,
    num_cores=1,
    auto_cast_type="fp32",
)
prompts = [[1, 17, 33, 250, 7], [1, 400, 9, 12, 99, 101, 45, 3]]
for prompt in prompts:
    input_ids = torch.tensor([prompt])
    outputs = model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=8,
        do_sample=False,
        pad_token_id=0,
    )
    print("generated", outputs[0, len(prompt):].tolist())
