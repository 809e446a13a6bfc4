"""Fault catalogue, scenario "data_loading": an ORIGINAL torch-xla loop over a ``pl.ParallelLoader``
(a plain DataLoader, no DistributedSampler: batches in order, the last partial one dropped), two
epochs of a linear classifier with ``xm.optimizer_step``, the loss printed per epoch."""

import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

device = xm.xla_device()
torch.manual_seed(0)
features = torch.randn(30, 8)
targets = (features[:, 0] > 0).long() + (features[:, 1] > 0).long()
dataset = torch.utils.data.TensorDataset(features, targets)
loader = torch.utils.data.DataLoader(dataset, batch_size=8, shuffle=False, drop_last=True)

model = torch.nn.Linear(8, 3).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
for epoch in range(2):
    for x, y in pl.ParallelLoader(loader, [device]).per_device_loader(device):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
    xm.master_print(f"epoch {epoch}: loss {loss.item():.4f}")
