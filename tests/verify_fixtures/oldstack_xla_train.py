"""A torch-xla training step in our own words, run under the emulation on torchrun ranks (gloo):
``oldstack_xla_train.py OUT_DIR [--xla-backend]``. With ``--xla-backend`` the script starts the process
group as torch-xla scripts did (``init_process_group("xla", init_method="xla://")``); without it, it
never starts one (the XLA runtime needed none). Each rank prints one JSON object
(tests/test_verify_oldstack.py)."""

import json
import os
import sys

import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl

out_dir = sys.argv[1]
if "--xla-backend" in sys.argv:
    import torch.distributed as dist
    import torch_xla.distributed.xla_backend  # noqa: F401 - registers the "xla" backend

    dist.init_process_group("xla", init_method="xla://")
device = xm.xla_device()
rank, world = xm.get_ordinal(), xm.xrt_world_size()


def batch_of(r):
    g = torch.Generator().manual_seed(100 + r)
    return torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)


torch.manual_seed(0)
model = torch.nn.Linear(3, 1).to(device)
start = {k: v.clone() for k, v in model.state_dict().items()}
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
loader = pl.MpDeviceLoader([batch_of(rank)], device)
for x, y in loader:
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    xm.optimizer_step(optimizer)

# what DDP would have done: the gradient averaged over every rank's batch
reference = torch.nn.Linear(3, 1)
reference.load_state_dict(start)
grads = []
for r in range(world):
    reference.zero_grad()
    x, y = batch_of(r)
    torch.nn.functional.mse_loss(reference(x), y).backward()
    grads.append([p.grad.clone() for p in reference.parameters()])
with torch.no_grad():
    for i, p in enumerate(reference.parameters()):
        p -= 0.5 * sum(g[i] for g in grads) / world
diff = max(float((a - b).abs().max()) for a, b in zip(model.parameters(), reference.parameters()))

xm.save(model.state_dict(), os.path.join(out_dir, f"written_by_rank{rank}.pt"))
total = xm.mesh_reduce("ranks", rank + 1, sum)
payloads = xm.rendezvous("done", payload=str(rank).encode())
xm.master_print("master says hi")
print(json.dumps({"rank": rank, "world": world, "param_diff_vs_ddp": diff, "mesh_sum": total,
                  "payloads": [p.decode() for p in payloads], "device": str(device),
                  "backend": torch.distributed.get_backend() if torch.distributed.is_initialized() else None}), flush=True)
