"""Greedy generation with the tiny Llama on the neuron device: ``generate.py MODEL_DIR [--new N] [--dtype D] [--sample SEED]``."""

import argparse

import torch
from transformers import AutoModelForCausalLM

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--new", type=int, default=8)
parser.add_argument("--dtype", default="float32")
parser.add_argument("--sample", type=int, default=None)
args = parser.parse_args()

model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype))
model = model.to("neuron")
model.eval()
prompts = [[1, 17, 33, 250, 7], [1, 400, 9, 12, 99, 101, 45, 3]]
for prompt in prompts:
    input_ids = torch.tensor([prompt], device="neuron")
    kwargs = {"do_sample": False}
    if args.sample is not None:
        torch.manual_seed(args.sample)
        kwargs = {"do_sample": True, "top_k": 50}
    out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                         max_new_tokens=args.new, pad_token_id=0, **kwargs)
    print("generated", out[0, len(prompt):].tolist())
