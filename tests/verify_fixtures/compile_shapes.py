"""torch.compile with the neuron backend on two input shapes (dynamic=False): one recompile."""

import torch


def f(x):
    return torch.sin(x) * 2 + 1


g = torch.compile(f, backend="neuron", dynamic=False)
for n in (4, 4, 6, 6):
    y = g(torch.ones(n, device="neuron"))
print("ok", float(y.sum()))
