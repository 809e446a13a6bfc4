"""Two ranks: init_process_group(backend="neuron") (gloo under verify), all_reduce, a compiled op."""

import torch, torch.distributed as dist
dist.init_process_group(backend="neuron")
r = dist.get_rank()
x = torch.ones(3, device="neuron") * (r + 1)
dist.all_reduce(x)
g = torch.compile(lambda t: t * 2, backend="neuron", dynamic=False)
print("rank", r, g(x).tolist())
dist.destroy_process_group()
