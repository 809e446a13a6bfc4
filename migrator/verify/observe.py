"""What a script produces, observed the same way on both sides (issue 15 §2).

Installed by ``instrument.install`` (post-import hooks: nothing here runs before the script imports
the library concerned). Every patch only *observes*: wrapped callables return what the originals
return, nothing is moved between devices or cast in place, and no random number is drawn.

Kinds (keys of ``instrument.OBS``; compared by ``compare.py``):
  backward     the value of every ``Tensor.backward()`` called from user code (a call from library
               code, e.g. Trainer/accelerate, is not one: decided by the calling frame's file)
  grads        the gradients after the first such backward, per model and parameter (tensor summary)
  optimizers   per optimizer (in the order of their first step): class, number of ``step()`` calls,
               each param group's learning rate at every step (first ``MAX_STEPS`` steps)
  weights      at exit: every parameter of the models the script built or loaded (tensor summary)
  forward      the outputs of the first ``FORWARD_CALLS`` calls from user code of each model the script
               loaded (``from_pretrained``) or built (an ``nn.Module`` constructed in its code), eager or
               compiled (``torch.compile``/``Module.compile``); a call from a module's own method (a
               submodule inside the script's ``forward``) is part of the outer call, not one of its own
  trainer_steps the training loss of every optimizer step of a ``Trainer`` (whatever logging_steps)
  eval         the metrics ``Trainer.evaluate()`` returned (timing metrics left out)
  checkpoints  every outermost ``torch.save``/``save_pretrained``/safetensors ``save_file``/
               ``Trainer.save_model``: the path (relative to the working directory when inside it)
               and every tensor saved (keys without ``_orig_mod.``/leading ``module.``)
  stdout       the lines the script's own code printed, and its exit status

A *tensor summary* is {"shape", "dtype", "mean", "std", "min", "max", "norm", "sample"}: the statistics
in float32 over the whole tensor, and ``sample`` the values at ``SAMPLE`` evenly spaced positions of the
flattened tensor (the fingerprint: compared element-wise and by cosine similarity with the other side;
O(1) whatever the size, unlike a random projection). Logits also keep ``top1``: the argmax over the last
dimension at the first ``TOP1`` positions.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import sysconfig
import threading
import weakref

SAMPLE = 64
TOP1 = 64
FORWARD_CALLS = 8
MAX_STEPS = 10_000
MAX_LINES = 5_000
MAX_MODELS = 8
MAX_TENSORS = 5_000

OBS: dict = {}            # instrument.OBS, bound by install()
_GATHER = {"ok": False}   # DTensors may be gathered (finish(), which every rank runs)
_STATE: dict = {"capturing": True}
_local = threading.local()

# ----------------------------------------------------------------------------- user code


def _library_roots() -> tuple[str, ...]:
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            roots.add(os.path.realpath(sysconfig.get_paths()[key]))
        except Exception:
            pass
    roots.add(os.path.dirname(os.path.realpath(os.path.dirname(__file__))))  # migrator/
    return tuple(sorted(r.rstrip(os.sep) + os.sep for r in roots if r))


_LIB = _library_roots()
_USER: dict[str, bool] = {}


def is_user_file(filename: str) -> bool:
    """The script's own code: not the standard library, an installed package, the migrator (its old
    stack emulation included) or generated code (``<frozen ...>``, fx, inductor)."""
    known = _USER.get(filename)
    if known is not None:
        return known
    if filename.startswith("<"):
        user = not filename.startswith(("<frozen", "<eval_with_key", "<torch", "<string>"))
    else:
        path = os.path.realpath(filename)
        user = not (path.startswith(_LIB) or f"{os.sep}site-packages{os.sep}" in path
                    or f"{os.sep}dist-packages{os.sep}" in path or "torchinductor" in path)
    _USER[filename] = user
    return user


_MODULE_PY: set[str] = set()


def _caller_is_user(depth: int, top_level: bool = False) -> bool:
    """Whether the frame ``depth`` levels above the caller of this function, once torch's
    ``nn.Module.__call__`` machinery is skipped, is user code. ``top_level``: and not a method of an
    ``nn.Module`` (a submodule called by the script's own ``forward`` is part of that call)."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return False
    while frame is not None and frame.f_code.co_filename in _MODULE_PY:
        frame = frame.f_back
    if frame is None or not is_user_file(frame.f_code.co_filename):
        return False
    if top_level and frame.f_code.co_argcount and frame.f_code.co_varnames[0] == "self":
        torch = sys.modules.get("torch")
        return torch is None or not isinstance(frame.f_locals.get("self"), torch.nn.Module)
    return True


# ----------------------------------------------------------------------------- tensors


def _key(name: str) -> str:
    """State-dict keys of a compiled or DDP-wrapped module name the same tensor as the plain one's."""
    parts = [p for p in str(name).split(".") if p != "_orig_mod"]
    while parts and parts[0] == "module":
        parts = parts[1:]
    return ".".join(parts)


def summary(t, *, logits: bool = False) -> dict | None:
    """A tensor summary (see the module docstring); None for something that is not a tensor."""
    import torch

    if not isinstance(t, torch.Tensor):
        return None
    try:
        with torch.no_grad():
            x = t.detach()
            out = {"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")}
            if hasattr(x, "full_tensor") and hasattr(x, "device_mesh"):  # a DTensor (tensor parallel)
                if not _GATHER["ok"]:
                    # gathering needs every rank: only at exit (finish runs on all ranks); elsewhere
                    # (a save or a call made on rank 0 only) its values are not read
                    out["sharded"] = True
                    return out
                try:
                    x = x.full_tensor()
                except Exception:  # the process group is gone already
                    out["sharded"] = True
                    return out
            if x.is_complex() or x.numel() == 0:
                return out
            f = x.to(torch.float32) if x.dtype != torch.float32 else x
            n = f.numel()
            flat = f.reshape(-1)
            stats = torch.stack([f.mean(), f.std() if n > 1 else f.new_zeros(()), f.min(), f.max(),
                                 torch.linalg.vector_norm(f)]).tolist()
            out.update(zip(("mean", "std", "min", "max", "norm"), stats))
            k = min(SAMPLE, n)
            idx = torch.linspace(0, n - 1, k, device=flat.device).round().long() if k > 1 else \
                torch.zeros(1, dtype=torch.long, device=flat.device)
            out["sample"] = flat[idx].tolist()
            if logits and x.dim() >= 2 and x.shape[-1] > 1:
                out["top1"] = x.reshape(-1, x.shape[-1])[:TOP1].argmax(dim=-1).tolist()
            return out
    except Exception as exc:  # never break the script
        _error("summary", exc)
        return None


def _first_tensor(value):
    """The logits of a ModelOutput/dict, else the first tensor of an output; (tensor, is_logits)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value, False
    getter = getattr(value, "get", None)
    if callable(getter) and not isinstance(value, (list, tuple)):
        try:
            logits = value.get("logits")
        except Exception:
            logits = None
        if isinstance(logits, torch.Tensor):
            return logits, True
        try:
            for v in value.values():
                if isinstance(v, torch.Tensor):
                    return v, False
        except Exception:
            pass
    if isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, torch.Tensor):
                return v, False
    return None, False


def tensors_of(obj, prefix: str = "", out: dict | None = None, depth: int = 0) -> dict:
    """Every tensor of a saved object, by dotted key (normalised); modules by their state dict."""
    import torch

    out = {} if out is None else out
    if depth > 8 or len(out) >= MAX_TENSORS:
        return out
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if isinstance(obj, torch.Tensor):
        out[prefix or "tensor"] = summary(obj)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            key = _key(k)
            tensors_of(v, f"{prefix}.{key}" if prefix else key, out, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            tensors_of(v, f"{prefix}.{i}" if prefix else str(i), out, depth + 1)
    return out


def _error(kind: str, exc: BaseException) -> None:
    OBS.setdefault("errors", []).append(f"{kind}: {exc!r}")


# ----------------------------------------------------------------------------- models

_order = itertools.count()
_tracked: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # module -> creation order
_kept: dict[int, object] = {}   # id -> module kept alive to read its final weights
_loaded: "weakref.WeakSet" = weakref.WeakSet()    # from_pretrained models: their forward calls observed
_forward_counts: dict[int, int] = {}


def _track(module, keep: bool = False) -> None:
    try:
        if module not in _tracked:
            _tracked[module] = next(_order)
        if keep and len(_kept) < MAX_MODELS:
            _kept[id(module)] = module
    except TypeError:
        pass


def _roots() -> list:
    """The tracked modules alive that are no other tracked module's submodule, in creation order."""
    alive = sorted(list(_tracked.items()), key=lambda kv: kv[1])
    inner: set[int] = set()
    for module, _ in alive:
        if id(module) in inner:
            continue
        for sub in module.modules():
            if sub is not module:
                inner.add(id(sub))
    return [m for m, _ in alive if id(m) not in inner and next(iter(m.parameters()), None) is not None]


def _names(models: list) -> list[tuple[str, object]]:
    seen: dict[str, int] = {}
    out = []
    for m in models:
        name = _model_name(m)
        seen[name] = seen.get(name, 0) + 1
        out.append((name if seen[name] == 1 else f"{name}#{seen[name]}", m))
    return out


def _keep_roots_of(params) -> None:
    """Keep alive the root models that own these parameters (an optimizer's, a backward's)."""
    ids = {id(p) for p in params}
    for root in _roots():
        if len(_kept) >= MAX_MODELS:
            return
        if any(id(p) in ids for p in root.parameters()):
            _kept[id(root)] = root


def _per_parameter(models: list, grad: bool) -> dict:
    out = {}
    for name, model in _names(models):
        params = {}
        prefix = _script_prefix(model)
        for pname, p in model.named_parameters():
            t = p.grad if grad else p
            if prefix and pname.startswith(prefix):
                pname = pname[len(prefix):]
            if t is not None:
                params[_key(pname)] = summary(t)
        if params:
            out[name] = params
    return out


def _patch_module_init(torch) -> None:
    """nn.Modules built by user code (the constructor called from a user frame) are tracked."""
    cls = torch.nn.Module
    original = cls.__init__
    if hasattr(original, "__neuron_migrate_observed__"):
        return
    _MODULE_PY.add(sys.modules[cls.__module__].__file__)
    is_compiling = torch.compiler.is_compiling

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if not _STATE["capturing"] or is_compiling():  # (a module built while dynamo traces)
            return
        try:
            frame = sys._getframe(1)
            # skip the subclasses' __init__ chain (super().__init__()) up to the constructor's caller
            while frame is not None and frame.f_code.co_name == "__init__" and \
                    frame.f_locals.get(frame.f_code.co_varnames[0] if frame.f_code.co_argcount else "") is self:
                frame = frame.f_back
            if frame is not None and is_user_file(frame.f_code.co_filename):
                _track(self)
                self.register_forward_hook(_forward_hook)  # its calls from the script are observed
        except Exception as exc:
            _error("module", exc)

    __init__.__neuron_migrate_observed__ = original
    cls.__init__ = __init__


# ----------------------------------------------------------------------------- backward, optimizers

_losses: list = []        # detached loss tensors (converted at exit: no device sync per step)
_grads_done = {"v": False}


def _patch_backward(torch) -> None:
    original = torch.Tensor.backward
    if hasattr(original, "__neuron_migrate_observed__"):
        return
    is_compiling = torch.compiler.is_compiling

    @functools.wraps(original)
    def backward(self, *args, **kwargs):
        if is_compiling() or not _STATE["capturing"] or getattr(_local, "backward", False):
            return original(self, *args, **kwargs)
        user = _caller_is_user(1)
        _local.backward = True
        try:
            result = original(self, *args, **kwargs)
        finally:
            _local.backward = False
        if user:
            try:
                _losses.append(self.detach() if self.numel() == 1 else summary(self))
                if not _grads_done["v"]:
                    _grads_done["v"] = True
                    roots = _roots()
                    for root in roots:
                        if len(_kept) < MAX_MODELS:
                            _kept.setdefault(id(root), root)
                    OBS["grads"] = _per_parameter(roots, grad=True)
            except Exception as exc:
                _error("backward", exc)
        return result

    backward.__neuron_migrate_observed__ = original
    torch.Tensor.backward = backward


_optimizers: dict[int, dict] = {}


def _patch_optimizers(torch) -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    def pre(opt, args, kwargs):
        _local.opt_depth = getattr(_local, "opt_depth", 0) + 1

    def post(opt, args, kwargs):
        depth = getattr(_local, "opt_depth", 1) - 1
        _local.opt_depth = depth
        if depth > 0 or not _STATE["capturing"]:
            return  # an optimizer stepped by a wrapper (accelerate's): the wrapper's step counts
        try:
            inner = getattr(opt, "optimizer", None)
            inner = inner if isinstance(inner, torch.optim.Optimizer) else opt
            entry = _optimizers.get(id(inner))
            if entry is None:
                entry = _optimizers[id(inner)] = {"class": type(inner).__name__, "steps": 0, "lr": [],
                                                  "_ref": inner}
                OBS["optimizers"].append(entry)
                _keep_roots_of(p for g in inner.param_groups for p in g["params"])
            entry["steps"] += 1
            if len(entry["lr"]) < MAX_STEPS:
                entry["lr"].append([float(g.get("lr", 0.0)) for g in opt.param_groups])
        except Exception as exc:
            _error("optimizer", exc)

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)


# ----------------------------------------------------------------------------- forward calls


def capturing() -> bool:
    return bool(_STATE["capturing"])


#: wrappers that are the same model as the module they wrap: (class name, attribute of the wrapped one)
WRAPPERS = {"DistributedDataParallel": "module", "DataParallel": "module", "FullyShardedDataParallel": "module",
            "OptimizedModule": "_orig_mod"}


def unwrap(model):
    """The model a DDP/FSDP/``torch.compile``/PEFT wrapper wraps (the model itself when it is none)."""
    for _ in range(6):
        cls = type(model).__name__
        attr = WRAPPERS.get(cls)
        inner = None
        try:
            if attr is not None:
                inner = getattr(model, attr, None)
            elif cls.startswith("PeftModel"):
                inner = getattr(getattr(model, "base_model", None), "model", None)
        except Exception:
            inner = None
        if inner is None or inner is model:
            return model
        model = inner
    return model


def _model_name(model) -> str:
    """A model's class name (of the model a DDP/FSDP/compile/PEFT wrapper wraps: the same model on both
    sides); a module traced by the emulated old stack (also once saved and reloaded) carries the class
    name of the model it traced (``neuron_migrate_model``)."""
    model = unwrap(model)
    try:
        name = getattr(model, "neuron_migrate_model", None)
    except Exception:
        name = None
    return name if isinstance(name, str) and name else type(model).__name__


def record_forward(model, output) -> dict | None:
    """Record one call of ``model`` from user code (the first ``FORWARD_CALLS`` per model); returns
    the entry recorded."""
    key = id(model)
    n = _forward_counts.get(key, 0)
    if n >= FORWARD_CALLS or not _STATE["capturing"]:
        return None
    _forward_counts[key] = n + 1
    try:
        tensor, logits = _first_tensor(output)
        entry = {"model": _model_name(model), "call": n, "output": summary(tensor, logits=logits)}
        OBS["forward"].append(entry)
        return entry
    except Exception as exc:
        _error("forward", exc)
        return None


#: id(traced module) -> the forward entry of the trace's own run of the model on the example inputs
_trace_runs: dict[int, dict] = {}


def emulated_trace(model, traced, output) -> None:
    """An emulated ``torch_neuronx.trace(model, example)`` called from user code ran the model on the
    example inputs: recorded as a call of the model (a script that only traces and saves, and its
    migration whose warm-up call compiles, both ran the model once), until the script calls the
    traced module: from then on those calls are the model's calls (the migration calls the compiled
    model there and adds no warm-up), and this one is taken back."""
    if not _caller_is_user(3, top_level=True):  # above: oldstack.report.traced, then trace()
        return
    entry = record_forward(model, output)
    if entry is not None:
        _trace_runs[id(traced)] = entry


def _called(module, output) -> None:
    """The script called ``module`` (a TorchScript module, or an emulated wrapper of one): record the
    call, taking back the trace's own run of the model when ``module`` is what the trace returned."""
    entry = _trace_runs.pop(id(module), None)
    if entry is not None and entry in OBS["forward"]:
        OBS["forward"].remove(entry)
    record_forward(module, output)


def emulated_forward(model, output) -> None:
    """A call of an emulated old-stack model (migrator.verify.oldstack: inputs padded inside, outputs cut
    back) made from user code: recorded as a call of the model it wraps, with the output the user got
    (the wrapped model's own call comes from the emulation's code, so it is not a user call)."""
    if getattr(_local, "forward", False) or _forward_counts.get(id(model), 0) >= FORWARD_CALLS:
        return
    if _caller_is_user(3, top_level=True):  # above: oldstack.report.observed, then the wrapper's method
        _called(model, output)


def _forward_hook(module, args, output):
    import torch

    if torch.compiler.is_compiling():
        return None
    if getattr(_local, "forward", False) or _forward_counts.get(id(module), 0) >= FORWARD_CALLS:
        return None
    if _caller_is_user(1, top_level=True):
        record_forward(module, output)
    return None


def watch_model(model) -> None:
    """Observe ``model``'s forward calls from user code and read its weights at exit (an emulation
    of an old-stack model class may call this for the module it runs)."""
    _track(model, keep=True)
    if model in _loaded:
        return
    _loaded.add(model)
    try:
        model.register_forward_hook(_forward_hook)
    except Exception as exc:
        _error("forward", exc)


def compiled_call(owner, fn, args, kwargs):
    """Call a compiled module (OptimizedModule / Module.compile()) and record the call when it is
    made from user code (the eager hooks of the module do not run outside the graph)."""
    user = owner is not None and not getattr(_local, "forward", False) and _caller_is_user(2, top_level=True)
    if not user:
        return fn(*args, **kwargs)
    _local.forward = True
    try:
        result = fn(*args, **kwargs)
    finally:
        _local.forward = False
    record_forward(owner, result)
    return result


class _without_hooks:
    """Take this module's forward hook off the modules in ``obj`` for the duration (pickling a whole
    model with torch.save, torch.jit.script): what the script saves or scripts is what it built."""

    def __init__(self, obj):
        self._removed: list = []
        self._obj = obj

    def _modules(self, obj, depth=0):
        import torch

        if isinstance(obj, torch.nn.Module):
            yield from obj.modules()
        elif isinstance(obj, dict) and depth < 3:
            for v in obj.values():
                yield from self._modules(v, depth + 1)
        elif isinstance(obj, (list, tuple)) and depth < 3:
            for v in obj:
                yield from self._modules(v, depth + 1)

    def __enter__(self):
        if "torch" not in sys.modules:
            return self
        for m in self._modules(self._obj):
            hooks = getattr(m, "_forward_hooks", None)
            for key, hook in list((hooks or {}).items()):
                if hook is _forward_hook:
                    self._removed.append((hooks, key, hook))
                    del hooks[key]
        return self

    def __exit__(self, *exc):
        for hooks, key, hook in self._removed:
            hooks[key] = hook
        return False


def _patch_script_modules(jit) -> None:
    """Calls of TorchScript modules from user code (``_called``) and their saves (checkpoints)."""
    cls = getattr(getattr(jit, "_script", None), "RecursiveScriptModule", None)
    if cls is None or hasattr(cls.__dict__.get("__call__"), "__neuron_migrate_observed__"):
        return
    base = cls.__call__

    @functools.wraps(base)
    def call(self, *args, **kwargs):
        import torch

        if torch.compiler.is_compiling() or getattr(_local, "forward", False):
            return base(self, *args, **kwargs)
        user = _caller_is_user(1, top_level=True) and _forward_counts.get(id(self), 0) < FORWARD_CALLS
        if not user:
            return base(self, *args, **kwargs)
        _local.forward = True
        try:
            result = base(self, *args, **kwargs)
        finally:
            _local.forward = False
        _called(self, result)  # no forward hooks on a ScriptModule
        return result

    call.__neuron_migrate_observed__ = base
    cls.__call__ = call
    save = cls.__dict__.get("save")
    if save is not None and not hasattr(save, "__neuron_migrate_observed__"):
        cls.save = _saver("ScriptModule.save", save, _script_save_target)
    if not hasattr(jit.save, "__neuron_migrate_observed__"):
        jit.save = _saver("torch.jit.save", jit.save, _script_save_target)
    if not hasattr(jit.load, "__neuron_migrate_observed__"):
        load = jit.load

        @functools.wraps(load)
        def jit_load(*args, **kwargs):
            module = load(*args, **kwargs)
            if _STATE["capturing"] and _caller_is_user(1):  # a model the script loads: its final weights
                _track(module, keep=True)
            return module

        jit_load.__neuron_migrate_observed__ = load
        jit.load = jit_load


def _script_prefix(module) -> str:
    """The prefix of a traced model's own names inside the guard of the emulated old stack ("" otherwise)."""
    try:
        prefix = getattr(module, "neuron_migrate_prefix", "")
    except Exception:
        return ""
    return prefix if isinstance(prefix, str) else ""


def _script_tensors(module) -> dict:
    """A TorchScript module's state dict; when the emulated old stack traced it, named and chosen as the
    traced model's own (without the ``neuron_migrate_prefix`` of its guard, only ``neuron_migrate_keys``:
    a trace also keeps the model's non-persistent buffers)."""
    state = module.state_dict()
    prefix = _script_prefix(module)
    try:
        keys = set(getattr(module, "neuron_migrate_keys", []) or [])
    except Exception:
        keys = set()
    if prefix:
        state = {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in state.items()}
    if keys:
        state = {k: v for k, v in state.items() if k in keys}
    return state


def _patch_jit_script(jit) -> None:
    _patch_script_modules(jit)
    original = getattr(jit, "script", None)
    if original is None:
        return
    if hasattr(original, "__neuron_migrate_observed__"):
        return

    @functools.wraps(original)
    def script(obj, *args, **kwargs):  # noqa: D401
        with _without_hooks(obj):
            return original(obj, *args, **kwargs)

    script.__neuron_migrate_observed__ = original
    jit.script = script


def _patch_from_pretrained(module) -> None:
    cls = getattr(module, "PreTrainedModel", None)
    if cls is None:
        return
    for name in ("from_pretrained", "_from_config"):
        original = cls.__dict__.get(name)
        if original is None or hasattr(original.__func__, "__neuron_migrate_observed__"):
            continue
        func = original.__func__

        def make(func=func, name=name):
            @functools.wraps(func)
            def loader(klass, *args, **kwargs):
                depth = getattr(_local, "loading", 0)
                _local.loading = depth + 1
                try:
                    model = func(klass, *args, **kwargs)
                finally:
                    _local.loading = depth
                if depth == 0 and _STATE["capturing"]:
                    watch_model(model)
                return model

            loader.__neuron_migrate_observed__ = func
            return classmethod(loader)

        setattr(cls, name, make())


# ----------------------------------------------------------------------------- checkpoints


def _rel(path) -> str:
    try:
        p = os.path.abspath(os.fspath(path))
    except TypeError:
        return "<stream>"
    cwd = os.getcwd()
    if p == cwd or p.startswith(cwd.rstrip(os.sep) + os.sep):
        return os.path.relpath(p, cwd)
    return p


def _saver(api: str, fn, what):
    """Wrap a save function: the outermost save of a thread records ``what(args, kwargs)`` ->
    (path, object holding the tensors)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        depth = getattr(_local, "saving", 0)
        _local.saving = depth + 1
        try:
            with _without_hooks(args[0] if api == "torch.save" and args else None):
                result = fn(*args, **kwargs)
        finally:
            _local.saving = depth
        if depth == 0 and _STATE["capturing"]:
            try:
                path, obj = what(args, kwargs)
                if path is not None:
                    OBS["checkpoints"].append({"api": api, "path": _rel(path), "tensors": tensors_of(obj)})
            except Exception as exc:
                _error("checkpoint", exc)
        return result

    wrapper.__neuron_migrate_observed__ = fn
    return wrapper


def _arg(args, kwargs, i, name):
    return args[i] if len(args) > i else kwargs.get(name)


def _file_of(f):
    """The path a save writes to: a path, or the name of an open file (None: a buffer)."""
    if isinstance(f, (str, os.PathLike)):
        return f
    name = getattr(f, "name", None)
    return name if isinstance(name, str) else None


def _torch_save_target(args, kwargs):
    path = _file_of(_arg(args, kwargs, 1, "f"))
    return (path, _arg(args, kwargs, 0, "obj")) if path is not None else (None, None)


def _script_save_target(args, kwargs):
    path = _file_of(_arg(args, kwargs, 1, "f"))
    return (path, _script_tensors(args[0])) if path is not None else (None, None)


def _patch_torch_save(torch) -> None:
    if not hasattr(torch.save, "__neuron_migrate_observed__"):
        torch.save = _saver("torch.save", torch.save, _torch_save_target)


def _patch_safetensors(module) -> None:
    fn = getattr(module, "save_file", None)
    if fn is not None and not hasattr(fn, "__neuron_migrate_observed__"):
        module.save_file = _saver("save_file", fn, lambda a, k: (_arg(a, k, 1, "filename"), _arg(a, k, 0, "tensors")))


def _patch_save_pretrained(module) -> None:
    cls = getattr(module, "PreTrainedModel", None)
    fn = getattr(cls, "save_pretrained", None) if cls is not None else None
    if fn is not None and not hasattr(fn, "__neuron_migrate_observed__"):
        cls.save_pretrained = _saver("save_pretrained", fn,
                                     lambda a, k: (_arg(a, k, 1, "save_directory"), a[0]))


# ----------------------------------------------------------------------------- Trainer


def _patch_trainer(module, on_subclasses) -> None:
    cls = getattr(module, "Trainer", None)
    if cls is None or hasattr(cls.__dict__.get("evaluate"), "__neuron_migrate_observed__"):
        return

    def evaluate_wrap(fn):
        @functools.wraps(fn)
        def evaluate(self, *args, **kwargs):
            depth = getattr(_local, "evaluating", 0)
            _local.evaluating = depth + 1
            try:
                metrics = fn(self, *args, **kwargs)
            finally:
                _local.evaluating = depth
            if depth == 0 and _STATE["capturing"] and isinstance(metrics, dict):
                OBS["eval"].append({k: v for k, v in metrics.items() if isinstance(v, (int, float, str))
                                    and not k.endswith(("_runtime", "_per_second"))})
            return metrics

        evaluate.__neuron_migrate_observed__ = fn
        return evaluate

    def step_wrap(fn):
        @functools.wraps(fn)
        def training_step(self, *args, **kwargs):
            depth = getattr(_local, "training_step", 0)
            _local.training_step = depth + 1
            try:
                loss = fn(self, *args, **kwargs)
            finally:
                _local.training_step = depth
            if depth == 0 and _STATE["capturing"]:
                pending = getattr(_local, "step_losses", None)
                if pending is None:
                    pending = _local.step_losses = []
                try:
                    pending.append(loss.detach() if hasattr(loss, "detach") else float(loss))
                except Exception as exc:
                    _error("trainer", exc)
            return loss

        training_step.__neuron_migrate_observed__ = fn
        return training_step

    def wrap(sub):
        for name, factory in (("evaluate", evaluate_wrap), ("training_step", step_wrap)):
            fn = sub.__dict__.get(name)
            if fn is not None and not hasattr(fn, "__neuron_migrate_observed__"):
                setattr(sub, name, factory(fn))

    on_subclasses(cls, wrap)
    fn = cls.__dict__.get("save_model")
    if fn is not None and not hasattr(fn, "__neuron_migrate_observed__"):
        cls.save_model = _saver("Trainer.save_model", fn, lambda a, k: (
            _arg(a, k, 1, "output_dir") or a[0].args.output_dir, a[0].model))


def _patch_callback_handler(module) -> None:
    """After every optimizer step of a Trainer: the sum of that step's micro-batch losses (what the
    Trainer adds to the loss it logs, whatever ``logging_steps`` is)."""
    cls = getattr(module, "CallbackHandler", None)
    fn = getattr(cls, "on_step_end", None) if cls is not None else None
    if fn is None or hasattr(fn, "__neuron_migrate_observed__"):
        return

    @functools.wraps(fn)
    def on_step_end(self, *args, **kwargs):
        pending = getattr(_local, "step_losses", None)
        if pending and _STATE["capturing"]:
            OBS["trainer_steps"].append(list(pending))
        _local.step_losses = []
        return fn(self, *args, **kwargs)

    on_step_end.__neuron_migrate_observed__ = fn
    cls.on_step_end = on_step_end


# ----------------------------------------------------------------------------- printed output


def print_for_user(*args, **kwargs) -> None:
    """``print`` on behalf of the user's code (an emulated ``xm.master_print``): the line is observed as
    the script's own printed output."""
    _local.printing_for_user = True
    try:
        print(*args, **kwargs)
    finally:
        _local.printing_for_user = False


class _StdoutTee:
    """sys.stdout as it was, plus the lines written from user code (print() or write() called in a
    frame of the script's own files)."""

    def __init__(self, stream):
        self._stream = stream
        self._partial = ""

    def write(self, s):
        n = self._stream.write(s)
        if _STATE["capturing"] and isinstance(s, str) and len(OBS["stdout"]["lines"]) < MAX_LINES:
            try:
                if getattr(_local, "printing_for_user", False) or is_user_file(sys._getframe(1).f_code.co_filename):
                    text = self._partial + s
                    *lines, self._partial = text.split("\n")
                    OBS["stdout"]["lines"].extend(line.rstrip() for line in lines)
            except Exception:
                pass
        return n

    def finish(self) -> None:
        if self._partial:
            OBS["stdout"]["lines"].append(self._partial.rstrip())
            self._partial = ""

    def __getattr__(self, item):
        return getattr(self._stream, item)


# ----------------------------------------------------------------------------- install / snapshot


def install(obs: dict, state: dict, on_import, on_subclasses) -> None:
    global OBS, _STATE
    OBS = obs
    _STATE = state
    for kind, empty in (("backward", list), ("grads", dict), ("optimizers", list), ("weights", dict),
                        ("forward", list), ("trainer_steps", list), ("eval", list), ("checkpoints", list)):
        OBS.setdefault(kind, empty())
    OBS.setdefault("stdout", {"lines": [], "exit": 0})
    if not isinstance(sys.stdout, _StdoutTee):
        sys.stdout = _StdoutTee(sys.stdout)
    on_import("torch", _patch_module_init)
    on_import("torch", _patch_backward)
    on_import("torch", _patch_optimizers)
    on_import("torch", _patch_torch_save)
    on_import("torch.jit", _patch_jit_script)
    on_import("safetensors.torch", _patch_safetensors)
    on_import("transformers.modeling_utils", _patch_from_pretrained)
    on_import("transformers.modeling_utils", _patch_save_pretrained)
    on_import("transformers.trainer", lambda m: _patch_trainer(m, on_subclasses))
    on_import("transformers.trainer_callback", _patch_callback_handler)


def _number(value):
    try:
        return float(value)
    except Exception:
        return value


def finish(exit_status: int) -> None:
    """Called once the script is done, on every rank (tensor-parallel weights are gathered, a collective:
    only when the script succeeded): the final weights, and the lazily kept values converted."""
    if isinstance(sys.stdout, _StdoutTee):
        sys.stdout.finish()
    OBS["stdout"]["exit"] = exit_status
    if "torch" not in sys.modules or not _STATE["capturing"]:
        return
    try:
        OBS["backward"] = [_number(v) if not isinstance(v, dict) else v for v in _losses]
        OBS["trainer_steps"] = [sum(_number(v) for v in step) for step in OBS["trainer_steps"]]
        for entry in OBS["optimizers"]:
            entry.pop("_ref", None)
        models = list(_kept.values())
        for root in _roots():
            if id(root) not in _kept and len(models) < MAX_MODELS:
                models.append(root)
        inner = {id(sub) for m in models for sub in m.modules() if sub is not m}
        models = sorted((m for m in models if id(m) not in inner), key=lambda m: _tracked.get(m, 0))
        _GATHER["ok"] = exit_status == 0
        OBS["weights"] = _per_parameter(models, grad=False)
    except Exception as exc:
        _error("finish", exc)
    finally:
        _GATHER["ok"] = False
