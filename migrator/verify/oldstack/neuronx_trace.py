"""``torch_neuronx`` (the XLA-era tracing API), emulated on CPU.

``torch_neuronx.trace(model, example_inputs, compiler_args=..., compiler_workdir=...)`` returns a
TorchScript module made by ``torch.jit.trace`` on CPU -- the artifact the old API returned was a
TorchScript module too, so ``.save()``, ``torch.jit.save`` and ``torch.jit.load`` work -- wrapped in a
scripted guard that rejects an input whose shape differs from the example's (the compiled NEFF ran
only at its traced shapes; the guard is saved with the module, so a reloaded artifact rejects them
too). Precision follows neuronx-cc: ``--auto-cast matmult`` with ``--auto-cast-type bf16`` is the
compiler's default (the float32 inputs of matmuls and convolutions rounded to bf16, the products
accumulated in float32: ``_static.MatmulCast``, recorded into the trace),
``--auto-cast none`` keeps float32, ``--auto-cast all`` runs the whole model in the cast type.
"""

from __future__ import annotations

import copy
import shlex

from migrator.verify.oldstack.errors import NotEmulated, not_emulated
from migrator.verify.oldstack.report import observed
from migrator.verify.oldstack.report import traced as traced_run

_CAST_TYPES = {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32", "fp32": "float32"}


def _compiler_cast(compiler_args) -> tuple[str, str]:
    """(auto-cast, auto-cast-type) from neuronx-cc arguments (a string or a list)."""
    if compiler_args is None:
        words = []
    elif isinstance(compiler_args, str):
        words = shlex.split(compiler_args)
    else:
        words = [str(w) for w in compiler_args]
    flat = []
    for w in words:
        flat.extend(w.split("=", 1) if w.startswith("--") and "=" in w else [w])
    cast, cast_type = "matmult", "bf16"
    for i, w in enumerate(flat[:-1]):
        if w == "--auto-cast":
            cast = flat[i + 1]
        elif w == "--auto-cast-type":
            cast_type = flat[i + 1]
    if cast not in ("none", "matmult", "all"):
        raise NotEmulated(f"torch_neuronx.trace(compiler_args='--auto-cast {cast}')")
    if cast_type not in _CAST_TYPES:
        raise NotEmulated(f"torch_neuronx.trace(compiler_args='--auto-cast-type {cast_type}')")
    return cast, cast_type


def _inputs_tuple(example_inputs):
    import torch

    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in example_inputs):
        return tuple(example_inputs)
    raise NotEmulated("torch_neuronx.trace(example_inputs other than tensors)")


def _cast_module(cast: str, cast_type: str):
    import torch

    from migrator.verify.oldstack import _static  # noqa: I001 - imports torch

    dtype = getattr(torch, _CAST_TYPES[cast_type])

    def to_fp32(out):
        if isinstance(out, torch.Tensor):
            return out.float() if out.is_floating_point() else out
        if isinstance(out, (list, tuple)):
            return type(out)(to_fp32(o) for o in out)
        if isinstance(out, dict):
            return {k: to_fp32(v) for k, v in out.items()}
        return out

    class AutoCast(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *xs):
            if cast == "all":
                xs = tuple(x.to(dtype) if x.is_floating_point() else x for x in xs)
                return to_fp32(self.inner(*xs))
            with _static.MatmulCast(dtype):  # recorded by the trace: the saved artifact rounds too
                return self.inner(*xs)

    return AutoCast


def legacy_outputs(out):
    """What a traced Transformers 4.x model returned: tuples (``torchscript=True``), the KV cache as a tuple
    of (key, value) per layer. Transformers 5 returns a ``ModelOutput`` holding a ``DynamicCache``, which
    ``torch.jit.trace`` cannot return."""
    if isinstance(out, (list, tuple)):
        return type(out)(legacy_outputs(o) for o in out) if type(out) in (list, tuple) else tuple(
            legacy_outputs(o) for o in out)
    layers = getattr(out, "layers", None)
    if isinstance(layers, list) and hasattr(out, "get_seq_length"):  # a transformers Cache
        return tuple((layer.keys, layer.values) for layer in layers)
    if isinstance(out, dict) and hasattr(out, "to_tuple"):  # a ModelOutput
        return tuple(legacy_outputs(v) for v in out.to_tuple())
    return out


def _needs_legacy(out) -> bool:
    if isinstance(out, (list, tuple)):
        return any(_needs_legacy(o) for o in out)
    return hasattr(out, "get_seq_length") or (isinstance(out, dict) and hasattr(out, "to_tuple"))


def _legacy_module(func):
    import torch

    class LegacyOutputs(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *xs):
            return legacy_outputs(self.inner(*xs))

    return LegacyOutputs(func)


def trace(func, example_inputs, *_, input_output_aliases=None, compiler_workdir=None, compiler_args=None,
          partitioner_config=None, inline_weights_to_neff=True, **kwargs):
    import torch

    from migrator.verify.oldstack import _static  # noqa: I001 - the scripted guard (imports torch)

    if partitioner_config is not None:
        raise NotEmulated("torch_neuronx.trace(partitioner_config=...)")
    inputs = _inputs_tuple(example_inputs)
    cast, cast_type = _compiler_cast(compiler_args)
    module = func
    if cast != "none" and _CAST_TYPES[cast_type] != "float32":
        inner = func
        if cast == "all" and isinstance(func, torch.nn.Module):
            inner = copy.deepcopy(func).to(getattr(torch, _CAST_TYPES[cast_type]))
        module = _cast_module(cast, cast_type)(inner)
    prefix = "inner.inner." if module is not func else "inner."
    with torch.no_grad():
        if isinstance(func, torch.nn.Module) and _needs_legacy(func(*inputs)):
            module = _legacy_module(module)  # a ModelOutput / DynamicCache: what 4.x's traced model returned
            prefix = "inner." + prefix
        traced = torch.jit.trace(module, inputs, strict=False, check_trace=False)
    name = type(func).__name__ if isinstance(func, torch.nn.Module) else getattr(func, "__name__", "function")
    keys = list(func.state_dict()) if isinstance(func, torch.nn.Module) else []
    guarded = _static.guard(traced, [list(t.shape) for t in inputs], name, prefix, keys)
    traced_run(func, guarded, inputs)
    return guarded


class _DynamicBatch:
    """``dynamic_batch(model)``: a batch of any size runs in chunks of the traced batch size, the last one
    padded, the outputs concatenated and cut back (what torch_neuronx did)."""

    def __init__(self, model):
        self.model = model

    def __call__(self, *inputs):
        import torch

        shapes = getattr(self.model, "static_shapes", None)
        if not shapes:
            result = self.model(*inputs)
            observed(self.model, result)
            return result
        compiled = shapes[0][0]
        total = inputs[0].shape[0]
        outs = []
        for start in range(0, total, compiled):
            chunk = [x[start:start + compiled] for x in inputs]
            n = chunk[0].shape[0]
            if n < compiled:
                chunk = [torch.cat([x, x[-1:].expand(compiled - n, *x.shape[1:])]) for x in chunk]
            out = self.model(*chunk)
            outs.append((out, n))
        result = _concat(outs)
        observed(self.model, result)  # the user's call (its chunks are the emulation's calls)
        return result

    def __getattr__(self, item):
        return getattr(self.model, item)


def _concat(outs):
    import torch

    first = outs[0][0]
    if isinstance(first, torch.Tensor):
        return torch.cat([o[:n] for o, n in outs])
    if isinstance(first, (list, tuple)):
        return type(first)(_concat([(o[i], n) for o, n in outs]) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: _concat([(o[k], n) for o, n in outs]) for k in first}
    return first


def dynamic_batch(model):
    return _DynamicBatch(model)


def DataParallel(module, device_ids=None, dim=0, set_dynamic_batching=True):
    """One CPU runs what the NeuronCores ran side by side: with dynamic batching (the default) a batch of
    any size runs in chunks of the traced batch size."""
    if dim != 0:
        raise NotEmulated("torch_neuronx.DataParallel(dim!=0)")
    return _DynamicBatch(module) if set_dynamic_batching else module


def async_load(model):
    return None


def lazy_load(model):
    return None


def move_trace_to_device(model, device_id):
    return None


MODULES: dict[str, tuple[str, ...]] = {
    "torch_neuronx": ("trace", "dynamic_batch", "DataParallel", "async_load", "lazy_load", "move_trace_to_device"),
    "torch_neuronx.xla_impl": (),
}

analyze = not_emulated("torch_neuronx.analyze")
