"""Old stack (optimum-neuron on transformers-neuronx): compile a decoder with the older generation
arguments and complete two prompts.

    python generate.py MODEL_DIR
"""

import sys

from optimum.neuron import NeuronModelForCausalLM
from transformers import AutoTokenizer

model_dir = sys.argv[1]
model = NeuronModelForCausalLM.from_pretrained(
    model_dir, export=True, batch_size=2, n_positions=64, context_length_estimate=16, amp="f32", tp_degree=1
)
tokenizer = AutoTokenizer.from_pretrained(model_dir)
tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token

prompts = ["the cat", "a long road to"]
inputs = tokenizer(prompts, return_tensors="pt", padding=True)
out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
print("generated", out.shape[0], out.shape[1] - inputs["input_ids"].shape[1])
