"""A model on neuron compiled with the neuron backend, called with a neuron batch, then with a cpu one."""
import sys, torch
m = torch.nn.Linear(4, 4).to("neuron")
c = torch.compile(m, backend="neuron")
print(c(torch.ones(2, 4, device="neuron")).sum().item() != 0)
try:
    c(torch.ones(2, 4))
    print("no error")
except RuntimeError as e:
    print("error:", str(e)[:80])
