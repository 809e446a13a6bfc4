"""A migration that left the device at cpu: the same numbers, but nothing ran on neuron."""
import torch

device = "cpu"
model = torch.nn.Linear(4, 2).to(device)
print("out", round(float(model(torch.ones(1, 4).to(device)).sum()), 5))
