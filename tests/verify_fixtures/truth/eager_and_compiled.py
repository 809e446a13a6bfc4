"""An eager model called between calls of a compiled one: both observed."""
import torch
torch.manual_seed(0)
a = torch.nn.Linear(4, 3)
b = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
cb = torch.compile(b, backend="eager")
x = torch.ones(2, 4)
print(float(a(x).sum()))
cb(x)
print(float(a(x).sum()))
cb(x)
