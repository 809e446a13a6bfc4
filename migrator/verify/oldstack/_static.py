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
    """``neuron_migrate_model``: the class name of the traced model, ``neuron_migrate_prefix``: the state-dict
    prefix of its weights inside the guard, ``neuron_migrate_keys``: the model's own state-dict keys (a
    trace also keeps the non-persistent buffers); saved with the module, so verify's observation layer
    names the calls and the saved tensors of a traced (or reloaded) artifact as those of the model."""

    def __init__(self, inner, shapes: List[List[int]], model: str = "", prefix: str = "",
                 keys: List[str] = []):  # noqa: B006 - TorchScript needs the annotation; never mutated
        super().__init__()
        self.inner = inner
        self.static_shapes = shapes
        self.neuron_migrate_model = model
        self.neuron_migrate_prefix = prefix
        self.neuron_migrate_keys = list(keys)

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


def guard(traced, shapes: List[List[int]], model: str = "", prefix: str = "inner.", keys: List[str] = []):  # noqa: B006
    cls = GUARDS.get(len(shapes))
    if cls is None:
        from migrator.verify.oldstack.errors import NotEmulated

        raise NotEmulated("torch_neuronx.trace(more than 6 example inputs)")
    return torch.jit.script(cls(traced, shapes, model, prefix, keys))


# ------------------------------------------------------------------------------------------ auto-cast
#: the operations neuronx-cc's ``--auto-cast matmult`` casts: matrix multiplications and convolutions
_MATMULS = None


def _matmuls():
    """{operation: the positions of its multiplied operands (None: every tensor argument)}; a bias is
    added in float32, not rounded."""
    global _MATMULS
    if _MATMULS is None:
        F = torch.nn.functional
        _MATMULS = {torch.matmul: None, torch.mm: None, torch.bmm: None, torch.einsum: None,
                    torch.Tensor.matmul: None, torch.Tensor.__matmul__: None, torch.Tensor.mm: None,
                    torch.Tensor.bmm: None, torch.addmm: (1, 2), torch.baddbmm: (1, 2), torch.addbmm: (1, 2),
                    F.linear: (0, 1), F.conv1d: (0, 1), F.conv2d: (0, 1), F.conv3d: (0, 1),
                    F.conv_transpose1d: (0, 1), F.conv_transpose2d: (0, 1), F.scaled_dot_product_attention: (0, 1, 2)}
    return _MATMULS


_OPERAND_KWARGS = ("input", "weight", "mat1", "mat2", "batch1", "batch2", "query", "key", "value", "other")


def _round(value, dtype):
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return value.to(dtype).to(torch.float32)
    if isinstance(value, (list, tuple)):
        return type(value)(_round(v, dtype) for v in value)
    return value


class MatmulCast(torch.overrides.TorchFunctionMode):
    """neuronx-cc's ``--auto-cast matmult``: the float32 inputs of every matrix multiplication and
    convolution rounded to the cast type, the product accumulated and returned in float32 (the PE
    array accumulates in fp32); the other operations stay in the model's dtype."""

    def __init__(self, dtype=torch.bfloat16):
        super().__init__()
        self.dtype = dtype

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        table = _matmuls()
        if func in table:
            positions = table[func]
            args = tuple(_round(a, self.dtype) if positions is None or i in positions else a
                         for i, a in enumerate(args))
            kwargs = {k: _round(v, self.dtype) if k in _OPERAND_KWARGS else v for k, v in kwargs.items()}
        return func(*args, **kwargs)
