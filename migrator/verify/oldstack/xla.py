"""``torch_xla`` (as the AWS Neuron stack used it), emulated on CPU.

The XLA device is the CPU: ``xm.xla_device()`` returns ``torch.device("xla", 0)`` -- ``str()`` and
``.type`` answer as on the old stack -- and a device mode (pushed when the script first imports
torch_xla) moves whatever is sent to an ``xla`` device (``.to``, ``device=``, ``Module.to``) to the CPU
instead. With ``XLA_USE_BF16=1`` (float32 and float64 -> bf16) or ``XLA_DOWNCAST_BF16=1`` (float32 ->
bf16, float64 -> float32) a floating tensor or module moved to the xla device becomes bfloat16
(the old stack kept it in bf16 but reported float32: here the dtype says bfloat16), and ``xm.save``
writes float32 again, as the old CPU copy did. Execution is eager: ``mark_step`` and friends do nothing.

Collectives (``optimizer_step``'s gradient all-reduce, ``all_reduce``, ``mesh_reduce``, ``rendezvous``)
use torch.distributed: under torchrun a gloo process group is created on first use when the script
did not create one (the XLA runtime needed none), ``init_process_group("xla")`` and the
``xla://``/``pjrt://`` init methods become gloo / ``env://``. Ordinals and world size come from the
process group or torchrun's environment.
"""

from __future__ import annotations

import contextlib
import os
import sys

from migrator.verify.oldstack.errors import NotEmulated, not_emulated

REDUCE_SUM, REDUCE_MUL, REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX = "sum", "mul", "and", "or", "min", "max"
_state = {"installed": False}


# --------------------------------------------------------------------------------------------- device
def _bf16_mode() -> str | None:
    if os.environ.get("XLA_USE_BF16", "0") == "1":
        return "use"
    if os.environ.get("XLA_DOWNCAST_BF16", "0") == "1":
        return "downcast"
    return None


def _is_xla(value) -> bool:
    if isinstance(value, str):
        return value == "xla" or value.startswith("xla:")
    return getattr(value, "type", None) == "xla" and value.__class__.__name__ == "device"


def _cast(tensor):
    """What the xla device stored for a floating tensor under XLA_USE_BF16 / XLA_DOWNCAST_BF16."""
    import torch

    mode = _bf16_mode()
    if mode is None or not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        return tensor
    if tensor.dtype == torch.float32 or (mode == "use" and tensor.dtype == torch.float64):
        return tensor.to(torch.bfloat16)
    if mode == "downcast" and tensor.dtype == torch.float64:
        return tensor.to(torch.float32)
    return tensor


def install_device() -> None:
    """Called on the first import of an emulated torch_xla module."""
    if _state["installed"]:
        return
    _state["installed"] = True
    import torch
    from torch.overrides import TorchFunctionMode

    cpu = torch.device("cpu")
    to_funcs = {torch.Tensor.to, torch.Tensor.new_empty, torch.Tensor.new_zeros, torch.Tensor.new_ones,
                torch.Tensor.new_full, torch.Tensor.new_tensor}

    class XlaToCpu(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            moved = False
            dev = kwargs.get("device")
            if dev is not None and _is_xla(dev):
                kwargs = dict(kwargs)
                kwargs["device"] = cpu
                moved = True
            if func in to_funcs and len(args) > 1 and _is_xla(args[1]):
                args = (args[0], cpu, *args[2:])
                moved = True
            result = func(*args, **kwargs)
            if moved and _bf16_mode() is not None and "dtype" not in kwargs:
                result = _cast(result)
            return result

    mode = XlaToCpu()
    mode.__enter__()  # for the rest of the process (main thread)
    _state["mode"] = mode

    original_to = torch.nn.Module.to

    def module_to(self, *args, **kwargs):
        moved = False
        if args and _is_xla(args[0]):
            args = (cpu, *args[1:])
            moved = True
        if "device" in kwargs and _is_xla(kwargs["device"]):
            kwargs["device"] = cpu
            moved = True
        result = original_to(self, *args, **kwargs)
        if moved and _bf16_mode() is not None:
            result = result._apply(_cast)
        return result

    module_to.__wrapped__ = original_to
    torch.nn.Module.to = module_to

    cls = torch.amp.autocast_mode.autocast
    original_init = cls.__init__

    def autocast_init(self, device_type, *args, **kwargs):
        if isinstance(device_type, str) and device_type == "xla":
            device_type = "cpu"
            if kwargs.get("dtype") is None and not (len(args) > 1):
                kwargs["dtype"] = torch.bfloat16
        return original_init(self, device_type, *args, **kwargs)

    autocast_init.__wrapped__ = original_init
    cls.__init__ = autocast_init

    original_load = torch.load

    def load(f, map_location=None, *args, **kwargs):
        if map_location is not None and _is_xla(map_location):
            map_location = cpu
        return original_load(f, map_location, *args, **kwargs)

    load.__wrapped__ = original_load
    torch.load = load
    _patch_process_group(torch)


def _patch_process_group(torch) -> None:
    """``init_process_group("xla")``, ``init_method="xla://"|"pjrt://"`` -> gloo over torchrun's env."""
    import torch.distributed as dist

    original = dist.init_process_group
    if getattr(original, "__neuron_migrate_xla__", False):
        return

    def init_process_group(*args, **kwargs):
        backend = kwargs.get("backend", args[0] if args else None)
        if isinstance(backend, str) and backend.lower() in ("xla", "neuron"):
            if args:
                args = ("gloo", *args[1:])
            else:
                kwargs["backend"] = "gloo"
        method = kwargs.get("init_method")
        if isinstance(method, str) and method.startswith(("xla://", "pjrt://")):
            kwargs["init_method"] = "env://"
        _default_env()
        return original(*args, **kwargs)

    init_process_group.__wrapped__ = original
    init_process_group.__neuron_migrate_xla__ = True
    dist.init_process_group = init_process_group
    import torch.distributed.distributed_c10d as c10d

    c10d.init_process_group = init_process_group


def _default_env() -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")


def _dist():
    """The process group the collectives use (created under torchrun when the script made none), or None."""
    import torch.distributed as dist

    if not dist.is_available():
        return None
    if dist.is_initialized():
        return dist if dist.get_world_size() > 1 else None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and "MASTER_ADDR" in os.environ:
        dist.init_process_group("gloo")
        return dist
    return None


# --------------------------------------------------------------------------------------------- xla_model
def xla_device(n=None, devkind=None):
    import torch

    install_device()
    return torch.device("xla", 0 if n is None else int(n))


def device(index=None):
    return xla_device(index)


def get_xla_supported_devices(devkind=None, max_devices=None):
    return ["xla:0"]


def xla_device_hw(device) -> str:
    return "NEURON"


def xla_real_devices(devices=None):
    return ["NEURON:0"]


def is_xla_tensor(tensor) -> bool:
    return True


def mark_step(wait=False, reset_scope=True):
    return None


def sync(wait=False, reset_scope=True):
    return None


def wait_device_ops(devices=None):
    return None


@contextlib.contextmanager
def step():
    yield


def get_ordinal(defval=0):
    dist = _dist_initialized()
    if dist is not None:
        return dist.get_rank()
    return int(os.environ.get("RANK", defval))


def get_local_ordinal(defval=0):
    return int(os.environ.get("LOCAL_RANK", defval))


def xrt_world_size(defval=1):
    dist = _dist_initialized()
    if dist is not None:
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", defval))


world_size = xrt_world_size
global_ordinal = get_ordinal
local_ordinal = get_local_ordinal


def _dist_initialized():
    torch_dist = sys.modules.get("torch.distributed")
    if torch_dist is not None and torch_dist.is_available() and torch_dist.is_initialized():
        return torch_dist
    return None


def local_process_count():
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))


def device_count():
    return 1


def is_master_ordinal(local=True):
    return (get_local_ordinal() if local else get_ordinal()) == 0


def master_print(*args, fd=None, local=False, flush=False):
    if is_master_ordinal(local=local):
        observe = sys.modules.get("migrator.verify.observe")
        show = observe.print_for_user if observe is not None else print  # the script's own output
        show(*args, file=fd if fd is not None else sys.stdout, flush=flush)


def rendezvous(tag, payload=b"", replicas=None):
    dist = _dist()
    if dist is None:
        return [payload]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, payload)
    return gathered


def mesh_reduce(tag, data, reduce_fn):
    dist = _dist()
    if dist is None:
        return reduce_fn([data])
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, data)
    return reduce_fn(gathered)


def _reduce_op(dist, reduce_type):
    ops = {"sum": dist.ReduceOp.SUM, "mul": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
           "max": dist.ReduceOp.MAX, "and": dist.ReduceOp.BAND, "or": dist.ReduceOp.BOR}
    if reduce_type not in ops:
        raise ValueError(f"invalid reduce type {reduce_type!r}")
    return ops[reduce_type]


def all_reduce(reduce_type, inputs, scale=1.0, groups=None, pin_layout=True):
    """A tensor: a new reduced tensor; a list: reduced in place (as torch_xla)."""
    import torch

    if groups:
        raise NotEmulated("torch_xla.core.xla_model.all_reduce(groups=...)")
    dist = _dist()
    single = isinstance(inputs, torch.Tensor)
    tensors = [inputs.clone()] if single else list(inputs)
    for t in tensors:
        if dist is not None:
            dist.all_reduce(t.data, op=_reduce_op(dist, reduce_type))
        if scale != 1.0:
            t.data.mul_(scale)
    return tensors[0] if single else inputs


def all_gather(value, dim=0, groups=None, output=None, pin_layout=True):
    import torch

    if groups:
        raise NotEmulated("torch_xla.core.xla_model.all_gather(groups=...)")
    dist = _dist()
    if dist is None:
        result = value.clone()
    else:
        parts = [torch.empty_like(value) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, value.contiguous())
        result = torch.cat(parts, dim=dim)
    if output is not None:
        output.copy_(result)
        return output
    return result


def reduce_gradients(optimizer, groups=None, pin_layout=True):
    """Average every gradient over the world (torch_xla: all_reduce SUM with scale 1/world_size)."""
    dist = _dist()
    if dist is None:
        return
    world = dist.get_world_size()
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                dist.all_reduce(p.grad.data, op=dist.ReduceOp.SUM)
                p.grad.data.mul_(1.0 / world)


def optimizer_step(optimizer, barrier=False, optimizer_args=None, groups=None, pin_layout=True):
    reduce_gradients(optimizer, groups=groups, pin_layout=pin_layout)
    return optimizer.step(**(optimizer_args or {}))


def _to_cpu(data):
    """The CPU copy xm.save writes: tensors detached on CPU (float32 again under the bf16 variables)."""
    import torch

    if isinstance(data, torch.Tensor):
        out = data.detach().to("cpu")
        if _bf16_mode() is not None and out.dtype == torch.bfloat16:
            out = out.float()
        return out.clone() if out is data else out
    if isinstance(data, dict):
        return type(data)((k, _to_cpu(v)) for k, v in data.items()) if not hasattr(data, "_metadata") else \
            _keep_meta(data, {k: _to_cpu(v) for k, v in data.items()})
    if isinstance(data, (list, tuple)):
        items = [_to_cpu(v) for v in data]
        return type(data)(items) if not hasattr(data, "_fields") else type(data)(*items)
    return data


def _keep_meta(original, converted):
    from collections import OrderedDict

    out = OrderedDict(converted)
    out._metadata = getattr(original, "_metadata", None)
    return out


def save(data, file_or_path, master_only=True, global_master=False):
    import torch

    cpu_data = _to_cpu(data)
    if not master_only or is_master_ordinal(local=not global_master):
        torch.save(cpu_data, file_or_path)
    rendezvous("torch_xla.core.xla_model.save")


def reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count, groups=None, output=None, pin_layout=True):
    """All-reduce (gloo has no reduce-scatter), then this ordinal's shard along scatter_dim."""
    if groups:
        raise NotEmulated("torch_xla.core.xla_model.reduce_scatter(groups=...)")
    reduced = all_reduce(reduce_type, input, scale=scale)
    shard = reduced.chunk(shard_count, dim=scatter_dim)[get_ordinal() % shard_count].contiguous()
    if output is not None:
        output.copy_(shard)
        return output
    return shard


def add_step_closure(closure, args=(), run_async=False):
    closure(*args)


def set_rng_state(seed, device=None):
    import torch

    torch.manual_seed(seed)


def get_rng_state(device=None):
    import torch

    return int(torch.initial_seed())


def get_memory_info(device=None):
    return {"bytes_used": 0, "bytes_limit": 0}


def unlazy(tensors):
    return None


# --------------------------------------------------------------------------------------------- runtime
def use_spmd(*args, **kwargs):
    raise NotEmulated("torch_xla.runtime.use_spmd")


def is_spmd():
    return False


def device_type():
    return "NEURON"


def global_device_count():
    return xrt_world_size()


def addressable_device_count():
    return 1


def local_device_count():
    return 1


def host_index():
    return 0


def process_index():
    return get_ordinal()


def process_count():
    return xrt_world_size()


# --------------------------------------------------------------------------------------------- data loading
class PerDeviceLoader:
    """Iterates the wrapped loader, each batch moved to the (emulated) device."""

    def __init__(self, loader, device):
        self._loader = loader
        self._device = device

    def __iter__(self):
        for batch in self._loader:
            yield _move(batch, self._device)

    def __len__(self):
        return len(self._loader)

    def next(self):
        return next(iter(self))


def _move(batch, device):
    import collections.abc

    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if type(batch) is dict:
        return {k: _move(v, device) for k, v in batch.items()}
    if isinstance(batch, collections.abc.Mapping):
        if callable(getattr(batch, "to", None)):  # transformers' BatchEncoding / BatchFeature
            return batch.to(device)
        return {k: _move(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        items = [_move(v, device) for v in batch]
        return type(batch)(*items) if hasattr(batch, "_fields") else type(batch)(items)
    return batch


class ParallelLoader:
    def __init__(self, cpu_loader, devices, batchdim=0, batches_per_execution=1, loader_prefetch_size=16,
                 device_prefetch_size=8, host_to_device_transfer_threads=1, input_sharding=None, **kwargs):
        if input_sharding is not None:
            raise NotEmulated("torch_xla.distributed.parallel_loader.ParallelLoader(input_sharding=...)")
        self._loader = cpu_loader
        self._devices = list(devices)

    def per_device_loader(self, device):
        return PerDeviceLoader(self._loader, device)

    def per_device_samples(self):
        return len(self._loader) // max(1, len(self._devices))


class MpDeviceLoader(PerDeviceLoader):
    def __init__(self, loader, device, **kwargs):
        if kwargs.get("input_sharding") is not None:
            raise NotEmulated("torch_xla.distributed.parallel_loader.MpDeviceLoader(input_sharding=...)")
        super().__init__(loader, device)


# --------------------------------------------------------------------------------------------- launch
def spawn(fn, args=(), nprocs=None, join=True, daemon=False, start_method="spawn"):
    """One process (nprocs None or 1): ``fn(0, *args)`` here. More processes are not emulated: launch
    with torchrun instead."""
    if nprocs not in (None, 1):
        raise NotEmulated("torch_xla.distributed.xla_multiprocessing.spawn(nprocs>1)")
    return fn(get_local_ordinal(), *args)


def launch(fn, args=(), start_method="spawn", debug_single_process=False):
    return spawn(fn, args)


# --------------------------------------------------------------------------------------------- amp
def autocast(device=None, enabled=True, dtype=None, cache_enabled=True):
    import torch

    return torch.autocast("cpu", enabled=enabled, dtype=dtype or torch.bfloat16, cache_enabled=cache_enabled)


def _optim(name):
    import torch

    return getattr(torch.optim, name)


def __getattr__(name):
    if name in ("Adam", "AdamW", "SGD"):
        return _optim(name)
    if name == "GradScaler":
        import torch

        return lambda *a, **k: torch.amp.GradScaler("cpu", *a[1:], **k)
    raise AttributeError(name)


# --------------------------------------------------------------------------------------------- metrics
def metrics_report():
    return ""


def short_metrics_report(*args, **kwargs):
    return ""


def counter_names():
    return []


def metric_names():
    return []


def metric_data(name):
    return None


def counter_value(name):
    return None


def clear_all():
    return None


def clear_counters():
    return None


def clear_metrics():
    return None


def load(path, **kwargs):
    import torch

    return torch.load(path, **kwargs)


def checkpoint(function, *args, **kwargs):
    """torch_xla.utils.checkpoint.checkpoint: activation checkpointing, the same gradients."""
    import torch.utils.checkpoint

    kwargs.setdefault("use_reentrant", True)
    return torch.utils.checkpoint.checkpoint(function, *args, **kwargs)


def start_server(port, only_on_master=True):
    return None


@contextlib.contextmanager
def _no_op(*args, **kwargs):
    yield


def trace(*args, **kwargs):
    return None


StepTrace = _no_op
Trace = _no_op


def trace_detached(*args, **kwargs):
    return None


XlaFullyShardedDataParallel = not_emulated("torch_xla.distributed.fsdp.XlaFullyShardedDataParallel")

XM = ("xla_device", "mark_step", "wait_device_ops", "optimizer_step", "reduce_gradients", "save", "get_ordinal",
      "get_local_ordinal", "xrt_world_size", "world_size", "is_master_ordinal", "master_print", "rendezvous",
      "mesh_reduce", "all_reduce", "all_gather", "add_step_closure", "set_rng_state", "get_rng_state",
      "get_xla_supported_devices", "xla_device_hw", "xla_real_devices", "is_xla_tensor", "get_memory_info",
      "unlazy", "reduce_scatter", "REDUCE_SUM", "REDUCE_MUL", "REDUCE_AND", "REDUCE_OR", "REDUCE_MIN", "REDUCE_MAX")

MODULES: dict[str, tuple[str, ...]] = {
    "torch_xla": ("device", "sync", "step", "device_count", "launch"),
    "torch_xla.core": (),
    "torch_xla.core.xla_model": XM,
    "torch_xla.runtime": ("world_size", "global_ordinal", "local_ordinal", "local_process_count", "use_spmd",
                          "is_spmd", "device_type", "global_device_count", "addressable_device_count",
                          "local_device_count", "host_index", "process_index", "process_count"),
    "torch_xla.distributed": (),
    "torch_xla.distributed.parallel_loader": ("MpDeviceLoader", "ParallelLoader", "PerDeviceLoader"),
    "torch_xla.distributed.xla_multiprocessing": ("spawn",),
    "torch_xla.distributed.xla_backend": (),
    "torch_xla.amp": ("autocast",),
    "torch_xla.amp.syncfree": ("Adam", "AdamW", "SGD"),
    "torch_xla.debug": (),
    "torch_xla.debug.metrics": ("metrics_report", "short_metrics_report", "counter_names", "metric_names",
                                "metric_data", "counter_value", "clear_all", "clear_counters", "clear_metrics"),
    "torch_xla.utils": (),
    "torch_xla.utils.serialization": ("save", "load"),
    "torch_xla.utils.checkpoint": ("checkpoint",),
    "torch_xla.debug.profiler": ("start_server", "trace", "StepTrace", "Trace", "trace_detached"),
    "libneuronxla": (),
}
