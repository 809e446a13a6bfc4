"""A custom training loop (no Transformers) for tests/test_verify_observe.py; each option changes one
behaviour: ``observe_loop.py [--lr X] [--skip-step N] [--ckpt PATH] [--print-scale K] [--bf16]
[--compile] [--chatty] [--library-backward]``."""

import argparse
import logging
import sys
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--skip-step", type=int, default=-1)      # a forgotten optimizer.step()
parser.add_argument("--ckpt", default="ckpt/model.pt")        # where the weights are saved
parser.add_argument("--print-scale", type=float, default=1.0)  # post-processing of a printed result
parser.add_argument("--bf16", action="store_true")             # a dtype change
parser.add_argument("--compile", action="store_true")          # correct: torch.compile(backend="neuron")
parser.add_argument("--chatty", action="store_true")           # correct: progress, timings, logging
parser.add_argument("--library-backward", action="store_true")  # correct: a backward made by library code
args = parser.parse_args()

if args.library_backward:
    # a function whose code lives in an installed package: its backward() is not the script's
    namespace: dict = {}
    exec(compile("def helper(torch):\n    w = torch.ones(3, requires_grad=True)\n    (w * 2).sum().backward()\n",
                 "/opt/lib/python3/site-packages/somelib/helper.py", "exec"), namespace)
    namespace["helper"](torch)
    logging.basicConfig(level=logging.INFO)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def main():
    torch.manual_seed(0)
    model = Net()
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    model = model.to(dtype)
    step_model = torch.compile(model, backend="neuron") if args.compile else model
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2, 0.5)
    x, y = torch.randn(16, 4).to(dtype), torch.randn(16, 1).to(dtype)
    start = time.time()
    for step in range(4):
        loss = torch.nn.functional.mse_loss(step_model(x), y)
        loss.backward()
        if step != args.skip_step:
            opt.step()
        sched.step()
        opt.zero_grad()
        if args.chatty:
            print(f"\rstep {step}/4", end="", flush=True)
            logging.info("step %d done", step)
    if args.chatty:
        print()
        print(f"training took {time.time() - start:.3f} s")
    with torch.no_grad():
        print(f"final loss {float(torch.nn.functional.mse_loss(model(x), y)) * args.print_scale:.5f}")
    torch.save(model.state_dict(), args.ckpt)


if __name__ == "__main__":
    import os

    os.makedirs(os.path.dirname(args.ckpt) or ".", exist_ok=True)
    main()
    sys.exit(0)
