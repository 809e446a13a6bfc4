"""Old stack: load a decoder that was exported for Neuron earlier (no export=True) and complete the
prompts in one batch of the size it was compiled for.

    python chat.py MODEL_DIR
"""

import sys

from optimum.neuron import NeuronModelForCausalLM
from transformers import AutoTokenizer

model_dir = sys.argv[1]
model = NeuronModelForCausalLM.from_pretrained(model_dir)
tokenizer = AutoTokenizer.from_pretrained(model_dir)
tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token

prompts = ["hello there", "what is the weather"]
batch_size = model.neuron_config.batch_size
inputs = tokenizer(prompts[:batch_size], return_tensors="pt", padding=True)
out = model.generate(**inputs, max_new_tokens=3, do_sample=False)
print("completions", out.shape[0])
