"""Device layers installed in the verify child (see target-apis §7).

``cpu``     : "neuron" device strings/objects are mapped to cpu (a TorchFunctionMode that rewrites
              ``device=`` arguments, ``Tensor.to``/``Module.to`` targets and the ``torch.device``
              constructor); a ``neuron`` torch.compile backend (eager underneath) is registered and a
              ``neuron`` process-group backend is mapped to gloo.
``emulate`` : as ``cpu``, but the ``neuron`` device also *exists* as far as the libraries can tell:
              PrivateUse1 is renamed to ``neuron``, a ``torch.neuron`` device module and a
              ``torch_neuronx`` stub module are registered, and ``torch.device("neuron")`` keeps
              reporting ``neuron`` (only the tensors land on cpu).
``cuda``    : "neuron" mapped to cuda.
``neuron``  : nothing is installed (real hardware).

In ``cpu``/``emulate``/``cuda`` the mode is also entered in every new thread (transformers loads
weights in a thread pool), ``torch.autocast("neuron")`` runs on the real device, and
``Module.to("neuron")`` is remapped (its arguments are parsed in C++, out of the mode's reach).
In ``emulate`` the accelerator queries that the renamed-but-hookless PrivateUse1 backend breaks
(``torch.accelerator.*``, ``torch._C._get_accelerator``) answer as on a cpu-only build.

Cost: a TorchFunctionMode sees every torch op (a Python call each: +60-75% process cpu time on a
tiny model's generate() loop). The mode is therefore popped for the duration of the outermost
``GenerationMixin.generate`` call (``suspended``; instrument wraps generate), where every device
comes from the model and its inputs: benchmarks/bench_verify.py measured the loop's cpu-time ratio
go from 1.61 (emulate) / 1.74 (cpu) to 1.04 / 1.08. Training steps still pay the per-op cost.
Wrapping the ~30 device-taking entry points instead costs nothing but was tried and dropped: with
``torch.arange``/``torch.empty``... wrapped, transformers 5.23 leaves Llama's
``rotary_emb.inv_freq`` buffer uninitialised (garbage values, run-to-run different losses) — do not
reintroduce it without a test on the buffers.

In ``emulate`` the mode also keeps track of the tensors on ``neuron`` and raises the hardware's
"Expected all tensors to be on the same device" for an op that mixes them with cpu tensors (see
"device tracking" below); ``DistributedDataParallel(model, device_ids=[rank])`` of a model on the
emulated device drops device_ids (torch refuses them for cpu parameters) and moves the inputs as DDP
does. Tracking cost (``bench_verify.py --workload train --steps 40``, the tiny Llama's training loop,
process cpu time): 1.36x plain with it, 1.28x without (NEURON_MIGRATE_VERIFY_TRACK=0), +4-6%.

Everything here is imported lazily: it runs when the user script imports torch.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import types

_installed: set[str] = set()
_active: list = []


def uninstall() -> None:
    """Pop the main thread's device mode (called when the script is done, before shutdown)."""
    while _active:
        mode = _active.pop()
        try:
            mode.__exit__(None, None, None)
        except Exception:
            pass


_mode_cls = None  # the device-remapping TorchFunctionMode class, once installed


class suspended:
    """Leave the device mode off while library code that takes every device from the model and
    its inputs runs: ``GenerationMixin.generate`` (instrument wraps the outermost call in this).

    In emulate the parameters and inputs already live on cpu, so nothing inside generate() names
    the ``neuron`` device, while the mode's per-op Python dispatch cost +45-60% of a tiny model's
    decode loop. It also means that torch.compile traces generate()'s decode step without the mode,
    as on Neuron (no extra guard on the torch-function-mode stack). The mode is popped only when it
    is the top of this thread's stack (a user mode entered above it stays as it is) and is pushed
    back when the call returns or raises."""

    __slots__ = ("_mode",)

    def __enter__(self):
        self._mode = None
        cls = _mode_cls
        if cls is None:
            return self
        import torch

        if torch._C._len_torch_function_stack() > 0:
            top = torch._C._get_function_stack_at(torch._C._len_torch_function_stack() - 1)
            if isinstance(top, cls):
                self._mode = torch._C._pop_torch_function_stack()
        return self

    def __exit__(self, *exc):
        if self._mode is not None:
            import torch

            torch._C._push_on_torch_function_stack(self._mode)
            self._mode = None
        return False


_reached = [False]  # whether anything of the run was put on the (emulated) neuron device


def reached_neuron() -> bool | None:
    """Whether a tensor or a model of this run was placed on ``neuron`` (None: no emulated device here)."""
    return _reached[0] if "device" in _installed else None


def _target_device(mode: str) -> str:
    return "cuda" if mode == "cuda" else "cpu"


def _is_neuron(value) -> bool:
    if isinstance(value, str):
        return value == "neuron" or value.startswith("neuron:")
    t = getattr(value, "type", None)
    return t == "neuron" and value.__class__.__name__ == "device"


def install_device_mode(mode: str) -> None:
    """Called right after ``import torch`` finished in the child."""
    if mode in ("neuron", "none") or "device" in _installed:
        return
    _installed.add("device")
    import torch
    from torch.overrides import TorchFunctionMode

    target = _target_device(mode)
    keep_device_objects = mode == "emulate"
    if mode == "emulate":
        _install_fake_neuron_module(torch)

    def remap(value):
        if _is_neuron(value):
            _reached[0] = True
            index = None
            if isinstance(value, str):
                _, _, idx = value.partition(":")
                index = int(idx) if idx else None
            else:
                index = value.index
            if target == "cpu":
                return torch.device("cpu")
            return torch.device(target, index) if index is not None else torch.device(target)
        return value

    device_ctor = torch.device
    to_funcs = {torch.Tensor.to, torch.Tensor.new_empty, torch.Tensor.new_zeros, torch.Tensor.new_ones,
                torch.Tensor.new_full, torch.Tensor.new_tensor}
    pin_memory = torch.Tensor.pin_memory
    is_compiling = torch.compiler.is_compiling

    # NEURON_MIGRATE_VERIFY_TRACK=0: no device tracking (benchmarks/bench_verify.py measures its cost)
    tracking = os.environ.get("NEURON_MIGRATE_VERIFY_TRACK", "1") != "0"
    track = _tracker(torch, remap) if mode == "emulate" and tracking else None

    class NeuronToDevice(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is device_ctor:
                if not keep_device_objects and args and _is_neuron(args[0]):
                    args = (remap(args[0]) if len(args) == 1 else target, *args[1:])
                return func(*args, **kwargs)
            if func is pin_memory:
                return args[0]
            if track is not None and not is_compiling():
                return track(func, args, kwargs)
            dev = kwargs.get("device")
            if dev is not None and _is_neuron(dev):
                kwargs = dict(kwargs)
                kwargs["device"] = remap(dev)
            if func in to_funcs and len(args) > 1 and _is_neuron(args[1]):
                args = (args[0], remap(args[1]), *args[2:])
            return func(*args, **kwargs)

    if track is not None:
        _tracking["codes"].append(NeuronToDevice.__torch_function__.__code__)
    global _mode_cls
    _mode_cls = NeuronToDevice
    mode_obj = NeuronToDevice()
    mode_obj.__enter__()  # stays active until uninstall() (main thread)
    _active.append(mode_obj)
    _enter_in_new_threads(NeuronToDevice)
    _patch_module_to(torch, remap)
    _patch_autocast(torch, target)
    _patch_process_group(torch)
    _patch_ddp(torch)
    if mode == "emulate":
        _patch_load(torch, remap)


# ----------------------------------------------------------------------------- device tracking (emulate)
# On emulated ``neuron`` every tensor lives on cpu, so a model on ``neuron`` fed cpu tensors would run,
# where Trainium fails. The mode therefore keeps track of which tensors are on ``neuron``: an attribute
# set on the tensor (class default False, so the test is one attribute read) by ``.to("neuron")``, by a
# factory call with ``device="neuron"``, by ``Module.to("neuron")`` / ``from_pretrained(device_map=
# "neuron")`` (every parameter and buffer) and on the outputs of any op that had a ``neuron`` input. An op
# that mixes a ``neuron`` tensor with a cpu tensor of one dimension or more raises the hardware's error
# (cpu scalars are allowed, as on an accelerator). Inside generate() the mode is suspended: its outputs
# are on ``neuron`` when its input_ids were (the generation loop keeps its bookkeeping where the inputs
# are). Ops that cross devices (``to``/``cpu``/``copy_``/indexing) and the backward pass of autograd
# functions (their gradients are created in C++, out of the mode's sight) never raise.

ON_NEURON = "_neuron_migrate_on_neuron"
DEVICE_MISMATCH = ("Expected all tensors to be on the same device, but found at least two devices, {} and cpu!")
_tracking: dict = {}


def on_neuron(tensor) -> bool:
    """Whether the emulation holds ``tensor`` to be on the ``neuron`` device."""
    return getattr(tensor, ON_NEURON, False) is True


def _mark_tensor(t) -> None:
    try:
        setattr(t, ON_NEURON, True)
    except Exception:  # pragma: no cover - a tensor type without a __dict__
        pass


def mark_tree(value, depth: int = 0) -> None:
    """Mark every tensor in ``value`` (a tensor, or lists/tuples/dicts/objects with tensor fields)."""
    cls = _tracking.get("tensor")
    if cls is None or depth > 4:
        return
    if isinstance(value, cls):
        _mark_tensor(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            mark_tree(v, depth + 1)
    elif isinstance(value, dict):
        for v in value.values():
            mark_tree(v, depth + 1)
    elif hasattr(value, "__dataclass_fields__"):  # ModelOutput / GenerateOutput
        for name in value.__dataclass_fields__:
            mark_tree(getattr(value, name, None), depth + 1)


def _mark_module_tensors(module, on: bool = True) -> None:
    """Every parameter (and its gradient) and buffer of ``module`` is on ``neuron`` (``on``) or not."""
    if not _tracking:
        return
    try:
        for t in (*module.parameters(), *module.buffers()):
            if on:
                setattr(t, ON_NEURON, True)
            elif ON_NEURON in t.__dict__:
                delattr(t, ON_NEURON)
            grad = t.grad
            if grad is not None:
                if on:
                    setattr(grad, ON_NEURON, True)
                elif ON_NEURON in grad.__dict__:
                    delattr(grad, ON_NEURON)
    except Exception:  # pragma: no cover - never break the user's script
        pass


def _moves_off_neuron(torch, args, kwargs) -> bool:
    """``Module.to(...)`` arguments that name a device other than ``neuron``."""
    try:
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
    except Exception:
        return False
    return device is not None and device.type != "neuron"


def _tracker(torch, remap):
    """The emulate mode's op handler: ``track(func, args, kwargs)`` runs the op and keeps the device."""
    import threading

    Tensor = torch.Tensor
    setattr(Tensor, ON_NEURON, False)  # the default every tensor answers
    _tracking["tensor"] = Tensor
    local = _tracking["local"] = threading.local()
    to = Tensor.to
    to_funcs = {to, Tensor.new_empty, Tensor.new_zeros, Tensor.new_ones, Tensor.new_full, Tensor.new_tensor}
    to_cpu = {Tensor.cpu}
    device_descriptor = Tensor.device  # the getter reaches the mode as this descriptor's bound __get__
    wrapper_type = type(device_descriptor.__get__)
    # ops that take tensors of several devices on an accelerator too (copies, indexing, moves, autograd)
    crossing = {Tensor.copy_, Tensor.__getitem__, Tensor.__setitem__, Tensor.cpu, Tensor.numpy, Tensor.tolist,
                Tensor.item, Tensor.backward, torch.autograd.backward, torch.autograd.grad, Tensor.index_put_,
                Tensor.index_put, Tensor.__repr__, Tensor.__format__, Tensor.__reduce_ex__, Tensor.__deepcopy__,
                Tensor.__array__, torch.save, Tensor.register_hook, Tensor.set_}
    current_node = getattr(torch._C, "_current_autograd_node", lambda: None)
    device_index = [0]

    def neuron_device():
        module = sys.modules.get("torch.neuron")
        index = module.current_device() if module is not None else device_index[0]
        return torch.device("neuron", index or 0)

    def alias(t):
        """A new tensor object over the same storage (what a device copy is, to the tracking)."""
        return t.view_as(t) if t.requires_grad else t.detach()

    def scan(args, kwargs):
        """(a neuron tensor among the inputs, the first cpu tensor of one dimension or more)."""
        on, off = False, None
        for group in (args, kwargs.values()):
            for a in group:
                if isinstance(a, Tensor):
                    if a._neuron_migrate_on_neuron:
                        on = True
                    elif off is None:
                        off = a
                elif type(a) in (list, tuple) and a and isinstance(a[0], Tensor):
                    for b in a:
                        if isinstance(b, Tensor):
                            if b._neuron_migrate_on_neuron:
                                on = True
                            elif off is None:
                                off = b
        if off is not None and on and (off.dim() == 0 or off.device.type != "cpu"):
            off = _first_cpu(args, kwargs)
        return on, off

    def _first_cpu(args, kwargs):
        for group in (args, kwargs.values()):
            for a in group:
                for b in (a if type(a) in (list, tuple) else (a,)):
                    if isinstance(b, Tensor) and not b._neuron_migrate_on_neuron and b.dim() > 0 \
                            and b.device.type == "cpu":
                        return b
        return None

    def mark(result):
        if isinstance(result, Tensor):
            result._neuron_migrate_on_neuron = True
        elif isinstance(result, (tuple, list)):
            for r in result:
                if isinstance(r, Tensor):
                    r._neuron_migrate_on_neuron = True

    def plain(func, args, kwargs):
        dev = kwargs.get("device")
        if dev is not None and _is_neuron(dev):
            kwargs = dict(kwargs)
            kwargs["device"] = remap(dev)
        if func in to_funcs and len(args) > 1 and _is_neuron(args[1]):
            args = (args[0], remap(args[1]), *args[2:])
        return func(*args, **kwargs)

    def track(func, args, kwargs):
        if local.__dict__.get("paused"):
            return plain(func, args, kwargs)
        if type(func) is wrapper_type and func.__self__ is device_descriptor:
            if args and args[0]._neuron_migrate_on_neuron:
                return neuron_device()
            return func(*args, **kwargs)
        placed = None  # True: the result is on neuron; False: on another device; None: where the inputs are
        dev = kwargs.get("device")
        if dev is not None:
            if _is_neuron(dev):
                kwargs = dict(kwargs)
                kwargs["device"] = remap(dev)
                placed = True
            else:
                placed = False
        if func in to_funcs and len(args) > 1:
            first = args[1]
            if _is_neuron(first):
                args = (args[0], remap(first), *args[2:])
                placed = True
            elif isinstance(first, (str, torch.device)):
                placed = False
            elif isinstance(first, Tensor):
                placed = first._neuron_migrate_on_neuron
        elif func in to_cpu:
            placed = False
        if placed is not None:
            result = func(*args, **kwargs)
            if func is to or func in to_cpu:
                self_ = args[0]
                if result is self_ and placed != self_._neuron_migrate_on_neuron \
                        and not getattr(local, "module_to", False):
                    result = alias(self_)  # a real move makes a new tensor; the input stays where it was
            if placed and isinstance(result, Tensor):
                result._neuron_migrate_on_neuron = True
            return result
        on, off = scan(args, kwargs)
        if on and off is not None and func not in crossing and current_node() is None:
            raise RuntimeError(DEVICE_MISMATCH.format(neuron_device()))
        result = func(*args, **kwargs)
        if on:
            mark(result)
        return result

    # never compiled as frames of their own (register_compile_backend tells dynamo): run inside a
    # compiled graph, the mode's handler was compiled as a frame whose guard on ``func`` (a getter's
    # short-lived method-wrapper) passed for another getter: ``.device`` answered ``.shape``
    _tracking["codes"] = [f.__code__ for f in (track, plain, scan, _first_cpu, mark, alias, neuron_device)]
    return track


def _enter_in_new_threads(mode_cls) -> None:
    """Torch function modes are thread-local; transformers loads weights in a thread pool."""
    import threading

    original = threading.Thread._bootstrap_inner

    def _bootstrap_inner(self):
        mode = mode_cls()
        try:
            mode.__enter__()
        except Exception:  # pragma: no cover
            return original(self)
        try:
            return original(self)
        finally:
            # leave the torch-function-mode stack empty before the thread's C++ state is torn down
            try:
                mode.__exit__(None, None, None)
            except Exception:
                pass

    threading.Thread._bootstrap_inner = _bootstrap_inner


def _patch_module_to(torch, remap) -> None:
    """``nn.Module.to("neuron")`` parses its arguments in C++ (``torch._C._nn._parse_to``)."""
    original = torch.nn.Module.to

    def to(self, *args, **kwargs):
        placed = False
        if args and _is_neuron(args[0]):
            args = (remap(args[0]), *args[1:])
            placed = True
        if "device" in kwargs and _is_neuron(kwargs["device"]):
            kwargs["device"] = remap(kwargs["device"])
            placed = True
        local = _tracking.get("local")
        if local is not None:
            local.module_to = True
        try:
            result = original(self, *args, **kwargs)
        finally:
            if local is not None:
                local.module_to = False
        if placed:
            _mark_neuron(self)
        elif local is not None and _moves_off_neuron(torch, args, kwargs):
            _mark_module_tensors(self, False)
        return result

    to.__wrapped__ = original
    torch.nn.Module.to = to


def _patch_autocast(torch, target: str) -> None:
    """``torch.autocast("neuron", ...)`` → autocast on the device the tensors really live on."""
    cls = torch.amp.autocast_mode.autocast
    original = cls.__init__

    def __init__(self, device_type, *args, **kwargs):
        if isinstance(device_type, str) and device_type == "neuron":
            device_type = target
        return original(self, device_type, *args, **kwargs)

    __init__.__wrapped__ = original
    cls.__init__ = __init__


def _patch_process_group(torch) -> None:
    """``init_process_group(backend="neuron")`` → gloo (the neuron backend does not exist on cpu)."""
    try:
        import torch.distributed as dist
    except Exception:  # pragma: no cover
        return
    if not dist.is_available():
        return
    original = dist.init_process_group

    def init_process_group(*args, **kwargs):
        backend = kwargs.get("backend", args[0] if args else None)
        if isinstance(backend, str) and "neuron" in backend:
            new = "gloo"
            if args:
                args = (new, *args[1:])
            else:
                kwargs["backend"] = new
        return original(*args, **kwargs)

    init_process_group.__wrapped__ = original
    dist.init_process_group = init_process_group
    try:
        import torch.distributed.distributed_c10d as c10d
        c10d.init_process_group = init_process_group
    except Exception:  # pragma: no cover
        pass


def _patch_ddp(torch) -> None:
    """``DistributedDataParallel(model, device_ids=[local_rank])``: the idiomatic form on an accelerator;
    torch rejects device_ids for a module whose parameters are on cpu, where the emulated ``neuron``
    tensors live. For such a module device_ids/output_device are dropped, and the inputs of its
    forward are moved to ``neuron`` as DDP does with device_ids on a device."""
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP
    except Exception:  # pragma: no cover
        return
    original = DDP.__init__
    if hasattr(original, "__neuron_migrate_wrapped__"):
        return

    def __init__(self, module, *args, **kwargs):
        move = False
        ids = kwargs.get("device_ids", args[0] if args else None)
        if ids is not None and _on_cpu(module):
            if args:  # device_ids, then output_device, positionally
                args = (None, None, *args[2:]) if len(args) > 1 else (None,)
            kwargs.pop("device_ids", None)
            kwargs.pop("output_device", None)
            move = bool(_tracking) and _is_marked_module(module)
        original(self, module, *args, **kwargs)
        object.__setattr__(self, "_neuron_migrate_move_inputs", move)

    __init__.__neuron_migrate_wrapped__ = original
    DDP.__init__ = __init__
    forward = DDP.forward

    def ddp_forward(self, *inputs, **kwargs):
        if self.__dict__.get("_neuron_migrate_move_inputs"):
            inputs, kwargs = _to_neuron(torch, inputs), {k: _to_neuron(torch, v) for k, v in kwargs.items()}
        return forward(self, *inputs, **kwargs)

    ddp_forward.__wrapped__ = forward
    DDP.forward = ddp_forward


def _on_cpu(module) -> bool:
    try:
        devices = {p.device.type for p in module.parameters()}
    except Exception:  # pragma: no cover
        return False
    return devices <= {"cpu", "neuron"} and bool(devices)


def _is_marked_module(module) -> bool:
    return getattr(module, _MARK, False) or any(on_neuron(p) for p in module.parameters())


def _to_neuron(torch, value, depth: int = 0):
    if isinstance(value, torch.Tensor):
        return value.to("neuron")
    if depth < 3 and isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_to_neuron(torch, v, depth + 1) for v in value)
    if depth < 3 and type(value) is dict:
        return {k: _to_neuron(torch, v, depth + 1) for k, v in value.items()}
    return value


def _patch_load(torch, remap) -> None:
    """``torch.load(..., map_location="neuron")``: loaded on cpu, held to be on ``neuron``."""
    original = torch.load

    def load(*args, **kwargs):
        where = kwargs.get("map_location", args[1] if len(args) > 1 else None)
        if not _is_neuron(where):
            return original(*args, **kwargs)
        if "map_location" in kwargs:
            kwargs["map_location"] = remap(where)
        else:
            args = (args[0], remap(where), *args[2:])
        result = original(*args, **kwargs)
        mark_tree(result)
        return result

    load.__wrapped__ = original
    torch.load = load


def _install_fake_neuron_module(torch) -> None:
    """Make ``neuron`` exist: PrivateUse1 renamed, ``torch.neuron`` and a ``torch_neuronx`` stub."""
    try:
        torch.utils.rename_privateuse1_backend("neuron")
    except RuntimeError:
        pass  # already renamed in this process

    fake = types.ModuleType("torch.neuron")
    fake.__doc__ = "neuron-migrate verify emulation: a CPU stand-in for the neuron device module"
    state = {"device": 0}
    fake.is_available = lambda: True
    fake.device_count = lambda: 1
    fake.current_device = lambda: state["device"]
    fake.set_device = lambda d: state.__setitem__("device", getattr(d, "index", d) or 0)
    fake.is_bf16_supported = lambda *a, **k: True
    fake.is_initialized = lambda: True
    fake.synchronize = lambda *a, **k: None
    fake.empty_cache = lambda: None
    # tensors live on cpu, so the cpu generator is the device generator; torch.manual_seed()
    # already seeds it (and calls these hooks: they must not call back into it)
    fake.manual_seed = lambda seed: None
    fake.manual_seed_all = lambda seed: None
    fake.seed = lambda: None
    fake.seed_all = lambda: None
    fake.initial_seed = lambda: torch.initial_seed()
    fake.get_rng_state = lambda *a, **k: torch.get_rng_state()
    fake.set_rng_state = lambda s, *a, **k: torch.set_rng_state(s)
    fake.get_rng_state_all = lambda: [torch.get_rng_state()]
    fake.set_rng_state_all = lambda states: torch.set_rng_state(states[0])
    fake.memory_allocated = lambda *a, **k: 0
    fake.max_memory_allocated = lambda *a, **k: 0
    fake.reset_peak_memory_stats = lambda *a, **k: None
    fake.get_device_name = lambda *a, **k: "neuron (emulated by neuron-migrate verify)"
    fake.get_device_properties = lambda *a, **k: types.SimpleNamespace(
        name="neuron (emulated)", total_memory=32 * 2**30, major=0, minor=0)
    fake._is_in_bad_fork = lambda: False
    fake.__neuron_migrate_emulated__ = True
    torch._register_device_module("neuron", fake)
    sys.modules["torch.neuron"] = fake

    if "torch_neuronx" not in sys.modules:
        stub = types.ModuleType("torch_neuronx")
        stub.__spec__ = importlib.machinery.ModuleSpec("torch_neuronx", None)
        stub.__version__ = "0.0.0+neuron-migrate-emulated"
        stub.__neuron_migrate_emulated__ = True
        sys.modules["torch_neuronx"] = stub
    # dynamo's stream tracking calls torch.accelerator.current_stream() when an accelerator is
    # available, which fails for the fake device (target-apis §7, point 5)
    torch.accelerator.is_available = lambda: False
    # with PrivateUse1 renamed but no C++ hooks registered, these raise "Please register
    # PrivateUse1HooksInterface"; the tensors are on cpu, so answer what a cpu-only build answers
    torch.accelerator.current_accelerator = lambda check_available=False: None
    torch._C._get_accelerator = lambda check=False: torch.device("cpu")


def _mode_on_stack() -> bool:
    """Whether this thread's device mode is active (not suspended, e.g. inside generate())."""
    import torch

    cls = _mode_cls
    n = torch._C._len_torch_function_stack()
    return cls is not None and any(isinstance(torch._C._get_function_stack_at(i), cls) for i in range(n))


def register_compile_backend() -> None:
    """Register a ``neuron`` torch.compile backend that runs the captured graph eagerly."""
    if "backend" in _installed:
        return
    _installed.add("backend")
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if _tracking.get("codes"):
        try:
            from torch._dynamo.eval_frame import skip_code

            for code in _tracking["codes"]:
                skip_code(code)
        except Exception:  # pragma: no cover - torch internals changed
            pass
    if "neuron" in _BACKENDS:
        return

    def neuron(gm, example_inputs, **kwargs):  # the same as the "eager" backend
        forward = gm.forward
        if not _tracking:
            return forward

        # the graph was traced with the neuron device mapped to cpu (its device constants are cpu):
        # it runs untracked, and its outputs are on neuron when one of its inputs was
        local = _tracking["local"]
        tensor = _tracking["tensor"]

        def run(*args):
            if not local.__dict__.get("paused") and _mode_on_stack():
                # as on Trainium: a graph whose inputs are on neuron (the parameters) and on cpu (a batch
                # the script forgot to move) fails; inside generate() (mode suspended) nothing is checked
                on = off = False
                for a in args:
                    if isinstance(a, tensor):
                        if a._neuron_migrate_on_neuron:
                            on = True
                        elif a.dim() > 0 and a.device.type == "cpu":
                            off = True
                if on and off:
                    module = sys.modules.get("torch.neuron")
                    index = module.current_device() if module is not None else 0
                    raise RuntimeError(DEVICE_MISMATCH.format(f"neuron:{index or 0}"))
            paused = local.__dict__.get("paused")
            local.paused = True
            try:
                out = forward(*args)
            finally:
                local.paused = paused
            if any(on_neuron(a) for a in args):
                mark_tree(out)
            return out

        return run

    register_backend(name="neuron")(neuron)


# ----------------------------------------------------------------------------- transformers (emulate)
# Parameters really live on cpu, so ``model.device.type`` is "cpu" and generate()'s neuron branches
# (``_valid_auto_compile_criteria``: static-cache auto-compile; ``_default_compile_config``:
# backend "neuron", dynamic=False) would not be taken. A model placed on "neuron" (``.to("neuron")``
# or ``from_pretrained(device_map="neuron")``) is marked, and for marked models these two answer as
# on Neuron (target-apis §2, §3, §7).

_MARK = "__neuron_migrate_on_neuron__"


def _mark_neuron(module) -> None:
    _reached[0] = True
    try:
        object.__setattr__(module, _MARK, True)
    except Exception:  # pragma: no cover
        pass
    _mark_module_tensors(module)


def _neuron_compile_config():
    from transformers.generation.configuration_utils import CompileConfig

    return CompileConfig(backend="neuron", dynamic=False, mode="default")  # modeling_utils:4807-4808


def patch_transformers_modeling(module) -> None:
    """``from_pretrained(device_map="neuron")`` marks the model; ``_default_compile_config`` as on Neuron."""
    cls = getattr(module, "PreTrainedModel", None)
    descriptor = getattr(cls, "__dict__", {}).get("from_pretrained")
    if (cls is None or not isinstance(descriptor, classmethod) or not hasattr(cls, "_default_compile_config")
            or hasattr(cls.from_pretrained, "__neuron_migrate_wrapped__")):
        return  # another transformers layout: leave it alone (no auto-compile emulation)
    original = descriptor.__func__

    def from_pretrained(klass, *args, **kwargs):
        model = original(klass, *args, **kwargs)
        device_map = kwargs.get("device_map")
        if _is_neuron(device_map) or (isinstance(device_map, dict) and device_map
                                      and all(_is_neuron(v) for v in device_map.values())):
            _mark_neuron(model)
        elif kwargs.get("distributed_config") is not None and getattr(
                model, "is_distributed_loading_by_transformers", False):
            # sharded at load time: on Trainium its DTensors live on the neuron mesh of the run
            _mark_neuron(model)
        return model

    from_pretrained.__neuron_migrate_wrapped__ = original
    cls.from_pretrained = classmethod(from_pretrained)

    default = cls._default_compile_config

    def _default_compile_config(self):
        if getattr(self, _MARK, False):
            return _neuron_compile_config()
        return default(self)

    cls._default_compile_config = _default_compile_config


def patch_transformers_generation(module) -> None:
    """For a model on the emulated neuron device, static-cache auto-compile as on Neuron."""
    cls = getattr(module, "GenerationMixin", None)
    original = getattr(cls, "_valid_auto_compile_criteria", None)
    if original is None or hasattr(original, "__neuron_migrate_wrapped__"):
        return

    def _valid_auto_compile_criteria(self, model_kwargs, generation_config):
        if getattr(self, _MARK, False) and not generation_config.disable_compile:
            # generation_config is generate()'s private copy: the user's object is not touched
            config = generation_config.compile_config
            if config is None:
                config = self._default_compile_config()
            if not config._compile_all_devices:
                import copy

                config = copy.copy(config)
                config._compile_all_devices = True  # valid_hardware: device.type would be "neuron"
            generation_config.compile_config = config
        return original(self, model_kwargs, generation_config)

    _valid_auto_compile_criteria.__neuron_migrate_wrapped__ = original
    cls._valid_auto_compile_criteria = _valid_auto_compile_criteria

    generate = getattr(cls, "generate", None)
    if generate is None or hasattr(generate, "__neuron_migrate_tracked__"):
        return

    def tracked_generate(self, *args, **kwargs):
        # the device mode is suspended inside (instrument wraps this call): the outputs are on
        # ``neuron`` when the prompt was, as the generation loop keeps its tensors where the inputs are
        result = generate(self, *args, **kwargs)
        prompt = args[0] if args else kwargs.get("input_ids", kwargs.get("inputs"))
        if _tracking and on_neuron(prompt):
            mark_tree(result)
        return result

    tracked_generate.__neuron_migrate_tracked__ = generate
    tracked_generate.__wrapped__ = generate
    tracked_generate.__name__ = "generate"
    tracked_generate.__doc__ = generate.__doc__
    cls.generate = tracked_generate
