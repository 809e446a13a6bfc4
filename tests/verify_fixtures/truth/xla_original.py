"""An old-stack original: a tiny linear model on the XLA device."""
import torch
import torch_xla.core.xla_model as xm

device = xm.xla_device()
model = torch.nn.Linear(4, 2).to(device)
print("out", round(float(model(torch.ones(1, 4).to(device)).sum()), 5))
