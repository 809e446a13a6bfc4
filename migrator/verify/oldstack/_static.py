"""The scripted shape guard around a module traced by the emulated ``torch_neuronx.trace``: an input whose
shape is not the traced one raises, as the Neuron runtime did, also after ``torch.jit.save``/``load``.
TorchScript needs a fixed arity: one guard class per number of inputs (1 to 6)."""

from __future__ import annotations

from typing import List

import torch
from torch import Tensor

MESSAGE = "neuron runtime (emulated): input shape does not match the shape the model was traced with"


def _check(x: Tensor, shape: List[int]) -> None:
    if list(x.shape) != shape:
        raise RuntimeError("neuron runtime (emulated): input shape does not match the shape the model was traced with")


class Guard1(torch.nn.Module):
    def __init__(self, inner, shapes: List[List[int]]):
        super().__init__()
        self.inner = inner
        self.static_shapes = shapes

    def forward(self, x0: Tensor):
        _check(x0, self.static_shapes[0])
        return self.inner(x0)


class Guard2(Guard1):
    def forward(self, x0: Tensor, x1: Tensor):
        _check(x0, self.static_shapes[0])
        _check(x1, self.static_shapes[1])
        return self.inner(x0, x1)


class Guard3(Guard1):
    def forward(self, x0: Tensor, x1: Tensor, x2: Tensor):
        _check(x0, self.static_shapes[0])
        _check(x1, self.static_shapes[1])
        _check(x2, self.static_shapes[2])
        return self.inner(x0, x1, x2)


class Guard4(Guard1):
    def forward(self, x0: Tensor, x1: Tensor, x2: Tensor, x3: Tensor):
        _check(x0, self.static_shapes[0])
        _check(x1, self.static_shapes[1])
        _check(x2, self.static_shapes[2])
        _check(x3, self.static_shapes[3])
        return self.inner(x0, x1, x2, x3)


class Guard5(Guard1):
    def forward(self, x0: Tensor, x1: Tensor, x2: Tensor, x3: Tensor, x4: Tensor):
        _check(x0, self.static_shapes[0])
        _check(x1, self.static_shapes[1])
        _check(x2, self.static_shapes[2])
        _check(x3, self.static_shapes[3])
        _check(x4, self.static_shapes[4])
        return self.inner(x0, x1, x2, x3, x4)


class Guard6(Guard1):
    def forward(self, x0: Tensor, x1: Tensor, x2: Tensor, x3: Tensor, x4: Tensor, x5: Tensor):
        _check(x0, self.static_shapes[0])
        _check(x1, self.static_shapes[1])
        _check(x2, self.static_shapes[2])
        _check(x3, self.static_shapes[3])
        _check(x4, self.static_shapes[4])
        _check(x5, self.static_shapes[5])
        return self.inner(x0, x1, x2, x3, x4, x5)


GUARDS = {1: Guard1, 2: Guard2, 3: Guard3, 4: Guard4, 5: Guard5, 6: Guard6}


def guard(traced, shapes: List[List[int]]):
    cls = GUARDS.get(len(shapes))
    if cls is None:
        from migrator.verify.oldstack.errors import NotEmulated

        raise NotEmulated("torch_neuronx.trace(more than 6 example inputs)")
    return torch.jit.script(cls(traced, shapes))
