"""An old-stack original: a GPT-2 (its forward returns the cache) traced from a list of example inputs."""
import torch
import torch_neuronx
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
config = GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=32)
model = GPT2LMHeadModel(config).eval()
ids = torch.arange(8).reshape(1, 8)
traced = torch_neuronx.trace(model, [ids])
out = traced(ids)
print("logits", tuple(out[0].shape), "cache layers", len(out[1]))
