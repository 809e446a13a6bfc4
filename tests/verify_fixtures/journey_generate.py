"""An ORIGINAL optimum-neuron inference script (the start of the verify journey in
``tests/test_verify_journey.py``): ``journey_generate.py MODEL_DIR``.

Greedy generation on two prompts of different lengths, given as token ids (the tiny model has no
tokenizer). The test records it on the "old stack" (a test double of optimum.neuron), migrates a
copy with the CLI and verifies the migrated copy against the record.
"""

import sys

import torch

from optimum.neuron import NeuronModelForCausalLM

model_dir = sys.argv[1]
model = NeuronModelForCausalLM.from_pretrained(
    model_dir,
    export=True,
    batch_size=1,
    sequence_length=64,
    num_cores=1,
    auto_cast_type="fp32",
)
prompts = [[1, 17, 33, 250, 7], [1, 400, 9, 12, 99, 101, 45, 3, 8, 8, 8]]
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
