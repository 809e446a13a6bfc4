"""Text prompts through the committed tiny tokenizer: ``text_generate.py MODEL_DIR [--dtype D]``.

A left-padded batch of two prompts of different lengths through ``model.generate`` on the neuron
device, then the same model in a ``text-generation`` pipeline; the decoded texts are printed.
"""

import argparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--dtype", default="float32")
args = parser.parse_args()

tokenizer = AutoTokenizer.from_pretrained(args.model)
tokenizer.padding_side = "left"
model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype)).to("neuron").eval()
prompts = ["Hello, world!", "Training batches are padded to a multiple of"]
batch = tokenizer(prompts, padding=True, return_tensors="pt").to("neuron")
out = model.generate(**batch, max_new_tokens=6, do_sample=False)
for text in tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True):
    print("completion", repr(text))

generator = pipeline("text-generation", model=model, tokenizer=tokenizer, device="neuron")
result = generator("Once upon a time", max_new_tokens=5, do_sample=False)
print("pipeline", repr(result[0]["generated_text"]))
