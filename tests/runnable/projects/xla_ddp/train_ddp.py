"""A small regression model trained data-parallel on XLA devices (torch-xla + DDP).

Usage: torchrun --nproc_per_node 2 train_ddp.py
"""

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401  (registers the "xla" backend)
from torch.nn.parallel import DistributedDataParallel as DDP


class Regressor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def forward(self, x):
        return self.body(x)


def batches(rank, steps):
    gen = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        x = torch.randn(4, 8, generator=gen)
        yield x, x.sum(dim=1, keepdim=True)


def main():
    dist.init_process_group("xla")
    device = xm.xla_device()
    rank = xm.get_ordinal()
    torch.manual_seed(0)
    model = Regressor().to(device)
    ddp_model = DDP(model, device_ids=[xm.get_local_ordinal()], gradient_as_bucket_view=True)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.05)
    loss_fn = torch.nn.MSELoss()
    for step, (x, y) in enumerate(batches(rank, 5)):
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = loss_fn(ddp_model(x), y)
        loss.backward()
        optimizer.step()
        xm.mark_step()
        xm.master_print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
