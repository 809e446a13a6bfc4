"""What the emulated neuron device tracks (run by the verify child with --device emulate): prints one
line per fact; the last op mixes devices and must raise as on hardware."""

import io

import torch

lin = torch.nn.Linear(4, 3).to("neuron")
x = torch.randn(2, 4)
y = lin(x.to("neuron"))
print("param", lin.weight.device.type, "input stays", x.device.type, "output", y.device.type)
print("cpu copy", y.cpu().device.type, y.to("cpu").device.type, "numpy", y.detach().cpu().numpy().shape)
(y * torch.tensor(2.0)).sum().backward()  # a cpu scalar is fine, as on an accelerator
print("grad", lin.weight.grad.device.type)
torch.optim.AdamW(lin.parameters()).step()
print("factory", torch.zeros(3, device="neuron").device.type, torch.ones_like(y).device.type)
buffer = io.BytesIO()
torch.save({"w": torch.ones(3)}, buffer)
buffer.seek(0)
print("load", torch.load(buffer, map_location="neuron")["w"].device.type)
print("moved back", lin.to("cpu").weight.device.type, lin(x).device.type)
lin.to("neuron")
try:
    lin(x)
except RuntimeError as exc:
    print("mixed:", exc)
