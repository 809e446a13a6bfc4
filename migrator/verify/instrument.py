"""The observation layer installed in the verify child before the user script runs.

Nothing is imported eagerly: post-import hooks patch a library the moment the user script (or a
library it uses) finishes importing it, so a script that never imports transformers pays nothing.
Patches only *observe*: wrapped callables return exactly what the originals return.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
import threading
import time
import weakref
from typing import Callable

from migrator.verify import observe

# observations, filled while the script runs (observe.install adds the kinds of issue 15 §2)
OBS: dict = {"generate": [], "pipeline": [], "losses": [], "images": []}
_local = threading.local()
_HOOKS: dict[str, list[Callable[[object], None]]] = {}
_state = {"capturing": True}


def on_import(name: str, callback: Callable[[object], None]) -> None:
    """Run ``callback(module)`` once ``name`` is imported (now if it already is)."""
    if name in sys.modules and getattr(sys.modules[name], "__spec__", None) is not None:
        callback(sys.modules[name])
        return
    _HOOKS.setdefault(name, []).append(callback)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _HOOKS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original_exec = loader.exec_module

        def exec_module(module, _orig=original_exec, _name=fullname):
            _orig(module)
            for callback in _HOOKS.pop(_name, []):
                callback(module)

        # a per-spec loader proxy, so the shared loader object is not mutated
        spec.loader = _LoaderProxy(loader, exec_module)
        return spec


class _LoaderProxy(importlib.abc.Loader):
    def __init__(self, loader, exec_module):
        self._loader = loader
        self._exec = exec_module

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        # keep module.__loader__/__spec__.loader pointing at the real loader for introspection
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._exec(module)

    def __getattr__(self, item):
        return getattr(self._loader, item)


def install_finder() -> None:
    if not any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportFinder())


# ----------------------------------------------------------------------------- conversions

def _to_list(value):
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    return value


def _jsonable(value, depth: int = 0):
    """Labels, scores, generated text... Tensors become lists; unknown objects are dropped."""
    if depth > 6:
        return None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    if hasattr(value, "tolist") and callable(value.tolist):
        try:
            return value.tolist()
        except Exception:
            return None
    if value.__class__.__module__.startswith("PIL"):
        return _image_summary(value)
    return None


def _image_summary(image) -> dict | None:
    try:
        import numpy as np

        arr = np.asarray(image, dtype=np.float32)
        return {"shape": list(arr.shape), "pixels": arr.round(3).reshape(-1).tolist()}
    except Exception:
        return None


# ----------------------------------------------------------------------------- entry calls

# The compile audit defines warm-up by calls: every compile during the FIRST call of an observed entry
# point is warm-up, per object (each model's first generate(), each pipeline's first __call__, each
# trainer's first training step and first evaluation step, each compiled callable's first call from user
# code); a compile during any later call is a recompile. Only the outermost entry call of a thread is
# one (a generate() inside a pipeline call belongs to the pipeline call). CALLS keeps, in order, the
# calls that may have compiled something: every first call, and every later call during which dynamo
# recorded a compilation; compile_activity() places each compile in the call whose interval holds it.
CALLS: list[dict] = []
_counts: dict[int, int] = {}  # id(owner) -> calls so far (dropped when the owner is collected)
_immortal: list = []  # owners that take no weak reference: kept, so that their id is never reused


def _last_compilation():
    utils = sys.modules.get("torch._dynamo.utils")
    metrics = getattr(utils, "_compilation_metrics", None) if utils is not None else None
    try:
        return metrics[-1] if metrics else None
    except Exception:  # pragma: no cover - torch internals changed
        return None


def _enter(owner, label: str) -> dict | None:
    """Start an entry call (None when one is already running in this thread: it owns the compiles)."""
    if getattr(_local, "entry", False):
        return None
    _local.entry = True
    key = id(owner)
    n = _counts.get(key, 0) + 1
    if n == 1:
        try:
            weakref.finalize(owner, _counts.pop, key, None)
        except TypeError:
            _immortal.append(owner)
    _counts[key] = n
    return {"entry": label, "call": n, "start_us": time.time_ns() // 1000, "end_us": None,
            "_last": _last_compilation()}


def _leave(call: dict | None) -> None:
    if call is None:
        return
    call["end_us"] = time.time_ns() // 1000
    _local.entry = False
    last = call.pop("_last")
    if call["call"] == 1 or _last_compilation() is not last:
        CALLS.append(call)


#: how an entry is named in the report ("first call of StableDiffusionPipeline", "call 2 of ...")
_ENTRY_LABELS = {
    "generate": lambda self: f"{type(self).__name__}.generate()",
    "pipeline": lambda self: type(self).__name__,
    "diffusion": lambda self: type(self).__name__,
}


def _entry_wrapper(fn, label: Callable[[tuple], tuple[object, str]], compiled: bool = False,
                   model: Callable[[tuple], object] | None = None):
    """Wrap ``fn`` so that its outermost call is an entry call; ``label(args)`` -> (owner, label).
    ``compiled``: fn is a torch.compile'd callable, which may itself be reached while dynamo traces
    (then the wrapper must do nothing dynamo would have to trace). ``model(args)``: the module whose
    call this is (a compiled module): its output is observed when the call comes from user code."""
    is_compiling = None
    if compiled:
        import torch

        is_compiling = torch.compiler.is_compiling

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if (is_compiling is not None and is_compiling()) or getattr(_local, "entry", False):
            return fn(*args, **kwargs)
        owner, name = label(args)
        call = _enter(owner, name)
        try:
            if model is not None and _state["capturing"]:
                return observe.compiled_call(model(args), fn, args, kwargs)
            return fn(*args, **kwargs)
        finally:
            _leave(call)

    wrapper.__neuron_migrate_wrapped__ = fn
    return wrapper


def _compiled_label(original, compiled) -> Callable[[tuple], tuple[object, str]]:
    target = getattr(original, "__self__", None)  # Module.compile() compiles the bound _call_impl
    if target is not None and getattr(original, "__name__", "") in ("_call_impl", "__call__", "forward"):
        name = type(target).__name__
    else:
        name = getattr(original, "__name__", None) or type(original).__name__
    return lambda args: (compiled, f"{name} (compiled)")


def _patch_torch_compile(torch) -> None:
    """Calls of torch.compile'd callables from user code are entry calls (functions, bound methods and
    Module.compile(): the returned function is wrapped; torch.compile(module): OptimizedModule.__call__)."""
    original = torch.compile
    if hasattr(original, "__neuron_migrate_wrapped__"):
        return

    @functools.wraps(original)
    def compile(model=None, *args, **kwargs):
        if model is None:  # used as @torch.compile(...): the decorator compiles through this function
            return lambda fn: compile(fn, *args, **kwargs)
        result = original(model, *args, **kwargs)
        if isinstance(result, torch.nn.Module) or not callable(result) or result is model:
            return result
        try:
            target = getattr(model, "__self__", None)  # Module.compile(): the bound _call_impl
            owner = (lambda args: target) if isinstance(target, torch.nn.Module) else None
            return _entry_wrapper(result, _compiled_label(model, result), compiled=True, model=owner)
        except Exception:  # pragma: no cover - never break the user's script
            return result

    compile.__neuron_migrate_wrapped__ = original
    torch.compile = compile


def _patch_optimized_module(module) -> None:
    cls = getattr(module, "OptimizedModule", None)
    if cls is None or hasattr(cls.__call__, "__neuron_migrate_wrapped__"):
        return

    def label(args):
        self = args[0]
        return self, f"{type(getattr(self, '_orig_mod', self)).__name__} (compiled)"

    cls.__call__ = _entry_wrapper(cls.__call__, label, compiled=True,
                                  model=lambda args: getattr(args[0], "_orig_mod", args[0]))


def _raise_metrics_limit(module) -> None:
    """dynamo keeps the metrics of the last 64 compilations only; the audit needs them all."""
    try:
        from torch._dynamo.utils import set_compilation_metrics_limit

        set_compilation_metrics_limit(100_000)
    except Exception:  # pragma: no cover - torch internals changed
        pass


# ----------------------------------------------------------------------------- patchers

def _outermost(kind: str, fn):
    """Wrap ``fn`` so only the outermost call (per thread) is recorded."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        depth = getattr(_local, kind, 0)
        if depth == 0 and kind in _BEGIN:
            _BEGIN[kind]()
        setattr(_local, kind, depth + 1)
        call = _enter(args[0], _ENTRY_LABELS[kind](args[0])) if depth == 0 and args else None
        try:
            if depth == 0 and kind in _SUSPEND:
                with _SUSPEND[kind]():
                    result = fn(*args, **kwargs)
            else:
                result = fn(*args, **kwargs)
        finally:
            _leave(call)
            setattr(_local, kind, depth)
        if depth == 0 and _state["capturing"]:
            try:
                _RECORDERS[kind](args, kwargs, result)
            except Exception as exc:  # never break the user's script
                OBS.setdefault("errors", []).append(f"{kind}: {exc!r}")
        return result

    wrapper.__neuron_migrate_wrapped__ = fn
    return wrapper


SCORE_STEPS = 8  # generated positions whose scores are fingerprinted, per generate() call


class _ScoreRecorder:
    """Appended last to generate()'s logits processors: keeps, for the first ``SCORE_STEPS``
    generated positions, each row's highest processed score (the logits after every other
    processor), and returns ``scores`` itself, untouched. A float32 and a bfloat16 model produce
    the same greedy tokens on small models but not the same scores: this is what catches a
    dtype-only change (a full logits dump would be vocab-sized per step)."""

    __slots__ = ("steps",)

    def __init__(self, steps: list):
        self.steps = steps

    def __call__(self, input_ids, scores):
        if len(self.steps) < SCORE_STEPS:
            try:
                self.steps.append(scores.detach().max(dim=-1).values.tolist())
            except Exception:  # never break generation
                pass
        return scores


def _begin_generate():
    # the first _get_logits_processor() of this outermost generate() call claims the list (an
    # assistant model's or a nested generate()'s processors are not fingerprinted twice)
    _local.score_steps = _local.score_unclaimed = []


def _record_generate(args, kwargs, result):
    sequences = getattr(result, "sequences", result)
    tokens = _to_list(sequences)
    if tokens and isinstance(tokens[0], int):
        tokens = [tokens]
    entry = {"tokens": tokens}
    steps = getattr(_local, "score_steps", None) or []
    _local.score_steps = _local.score_unclaimed = None
    if steps and all(len(row) == len(steps[0]) for row in steps):
        # per sequence (row), the max score at each recorded position
        entry["scores"] = [list(col) for col in zip(*steps)]
    dtype = getattr(args[0], "dtype", None) if args else None
    if dtype is not None:
        entry["dtype"] = str(dtype).replace("torch.", "")
    sample = kwargs.get("do_sample")
    if sample is None:
        config = kwargs.get("generation_config") or (getattr(args[0], "generation_config", None) if args else None)
        sample = getattr(config, "do_sample", None)
    if sample:
        entry["sampled"] = True
    OBS["generate"].append(entry)


def _record_pipeline(args, kwargs, result):
    self = args[0] if args else None
    OBS["pipeline"].append({"task": getattr(self, "task", None) or type(self).__name__,
                            "result": _jsonable(result)})


def _record_diffusion(args, kwargs, result):
    images = getattr(result, "images", None)
    if images is None and isinstance(result, tuple) and result:
        images = result[0]
    arrays = []
    for image in images if isinstance(images, (list, tuple)) else [images]:
        if image is None:
            continue
        if hasattr(image, "detach"):
            arrays.append({"shape": list(image.shape),
                           "pixels": image.detach().float().cpu().reshape(-1).tolist()})
        elif hasattr(image, "shape") and hasattr(image, "reshape"):
            arrays.append({"shape": list(image.shape), "pixels": image.reshape(-1).tolist()})
        else:
            summary = _image_summary(image)
            if summary:
                arrays.append(summary)
    OBS["images"].append({"pipeline": type(args[0]).__name__ if args else None, "images": arrays})


_RECORDERS = {"generate": _record_generate, "pipeline": _record_pipeline, "diffusion": _record_diffusion}
_BEGIN = {"generate": _begin_generate}
# kind -> context manager factory run around the outermost call (set by install(): the device
# mode is suspended inside generate(), see emulate.suspended)
_SUSPEND: dict = {}


def _patch_generation(module) -> None:
    cls = getattr(module, "GenerationMixin", None)
    if cls is None:
        return
    if not hasattr(cls.generate, "__neuron_migrate_wrapped__"):
        cls.generate = _outermost("generate", cls.generate)
    original = getattr(cls, "_get_logits_processor", None)
    if original is not None and not hasattr(original, "__neuron_migrate_wrapped__"):

        @functools.wraps(original)
        def _get_logits_processor(self, *args, **kwargs):
            processors = original(self, *args, **kwargs)
            steps = getattr(_local, "score_unclaimed", None)
            if steps is not None and _state["capturing"] and isinstance(processors, list):
                _local.score_unclaimed = None
                processors.append(_ScoreRecorder(steps))
            return processors

        _get_logits_processor.__neuron_migrate_wrapped__ = original
        cls._get_logits_processor = _get_logits_processor


def _patch_pipeline(module) -> None:
    cls = getattr(module, "Pipeline", None)
    if cls is not None and not hasattr(cls.__call__, "__neuron_migrate_wrapped__"):
        cls.__call__ = _outermost("pipeline", cls.__call__)


def _on_subclasses(cls, wrap: Callable[[type], None]) -> None:
    """Run ``wrap`` on ``cls``, on its subclasses and on every subclass created later (concrete
    pipelines and trainers define their own ``__call__``/steps)."""
    original_init_subclass = cls.__dict__.get("__init_subclass__")

    @classmethod
    def __init_subclass__(sub, **kw):
        if original_init_subclass is not None:
            original_init_subclass.__func__(sub, **kw)
        else:
            super(cls, sub).__init_subclass__(**kw)
        wrap(sub)

    cls.__init_subclass__ = __init_subclass__
    stack = [cls]
    while stack:
        sub = stack.pop()
        wrap(sub)
        stack.extend(sub.__subclasses__())


def _patch_diffusers(module) -> None:
    cls = getattr(module, "DiffusionPipeline", None)
    if cls is None:
        return

    def wrap(sub):
        call = sub.__dict__.get("__call__")
        if call is not None and not hasattr(call, "__neuron_migrate_wrapped__"):
            sub.__call__ = _outermost("diffusion", call)

    _on_subclasses(cls, wrap)


def _patch_trainer(module) -> None:
    cls = getattr(module, "Trainer", None)
    if cls is None or hasattr(cls.log, "__neuron_migrate_wrapped__"):
        return
    original = cls.log

    @functools.wraps(original)
    def log(self, logs, *args, **kwargs):
        try:
            if isinstance(logs, dict) and "loss" in logs and _state["capturing"]:
                OBS["losses"].append(float(logs["loss"]))
        except Exception as exc:
            OBS.setdefault("errors", []).append(f"trainer: {exc!r}")
        return original(self, logs, *args, **kwargs)

    log.__neuron_migrate_wrapped__ = original
    cls.log = log

    def wrap(sub):  # each trainer's first training step and first evaluation step are entry calls
        for name in ("training_step", "prediction_step"):
            step = sub.__dict__.get(name)
            if step is not None and not hasattr(step, "__neuron_migrate_wrapped__"):
                setattr(sub, name, _entry_wrapper(step, lambda a, n=name: (a[0], f"{type(a[0]).__name__}.{n}")))

    _on_subclasses(cls, wrap)


def install(device_mode: str) -> None:
    """Install every hook. ``device_mode``: neuron, cpu, emulate, cuda or none."""
    from migrator.verify import emulate

    install_finder()
    on_import("torch", lambda m: emulate.install_device_mode(device_mode))
    on_import("torch", _patch_torch_compile)
    on_import("torch._dynamo.eval_frame", _patch_optimized_module)
    on_import("torch._dynamo.utils", _raise_metrics_limit)
    if device_mode in ("cpu", "emulate", "cuda"):
        _SUSPEND["generate"] = emulate.suspended
    if device_mode != "neuron":
        on_import("torch._dynamo", lambda m: emulate.register_compile_backend())
        # init_process_group(backend="neuron") → gloo needs torch.distributed, imported by torch
    if device_mode == "emulate":
        on_import("transformers.modeling_utils", emulate.patch_transformers_modeling)
        on_import("transformers.generation.utils", emulate.patch_transformers_generation)
    on_import("transformers.generation.utils", _patch_generation)
    on_import("transformers.pipelines.base", _patch_pipeline)
    on_import("transformers.trainer", _patch_trainer)
    on_import("diffusers.pipelines.pipeline_utils", _patch_diffusers)
    observe.install(OBS, _state, on_import, _on_subclasses)


def snapshot(exit_status: int) -> dict:
    """The observations once the script is done (what the child writes)."""
    observe.finish(exit_status)
    observations = dict(OBS)
    observations["compile"] = compile_activity()
    return observations


# ----------------------------------------------------------------------------- compile audit

def compile_activity() -> dict:
    """Graphs compiled, the warm-up (compiles during the first call of each entry, grouped by code
    object) and the recompiles after it (with their first failing guard), from dynamo's metrics."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None:
        return {"graphs": 0, "compilations": 0, "recompiles": [], "warmup": []}
    try:
        from torch._dynamo.utils import counters, get_compilation_metrics

        metrics = list(get_compilation_metrics())
        graphs = int(counters["stats"].get("unique_graphs", 0))
    except Exception as exc:  # pragma: no cover - torch internals changed
        return {"graphs": 0, "compilations": 0, "recompiles": [], "warmup": [], "error": repr(exc)}
    compiles = []
    for m in metrics:
        # runtime events and backward graphs (compiled with their forward) are not compiles of a frame
        if getattr(m, "is_runtime", False) or getattr(m, "is_forward", True) is False:
            continue
        filename, line, co_name = (getattr(m, "co_filename", None) or "?", getattr(m, "co_firstlineno", None) or "?",
                                   getattr(m, "co_name", None) or "?")
        compiles.append({
            "compile_id": str(getattr(m, "compile_id", "")),
            "site": f"{filename}:{line} ({co_name})",
            "name": code_name(filename, line, co_name),
            "reason": getattr(m, "recompile_reason", None),
            "start_us": getattr(m, "start_time_us", None),
            "inputs": graph_inputs(getattr(m, "graph_node_shapes", None), getattr(m, "graph_input_count", None)),
        })
    recompiles, warmup = classify_compiles(compiles, CALLS)
    return {"graphs": graphs, "compilations": len(metrics), "recompiles": recompiles, "warmup": warmup}


def classify_compiles(compiles: list[dict], calls: list[dict]) -> tuple[list[dict], list[dict]]:
    """Split the compiles into warm-up and recompiles by the entry call each one happened in.

    ``compiles``: {"compile_id", "site", "name", "reason", "start_us", "inputs"} in order;
    ``calls``: the entry calls ({"entry", "call", "start_us", "end_us"}; end None = still running).
    A compile during a first call is warm-up; one during a later call is a recompile (a first compile
    of a new code object then too: the steady state compiles nothing); one outside every entry call
    (a compiled region that none of them reaches) is a recompile when dynamo says it is one.
    Returns (recompiles, warm-up groups: one per entry call and code object)."""
    spans = sorted(calls, key=lambda c: c["start_us"])
    recompiles: list[dict] = []
    groups: dict[tuple, dict] = {}
    for c in compiles:
        t = c.get("start_us")
        call = None
        if t is not None:
            for span in spans:
                if span["start_us"] <= t and (span["end_us"] is None or t <= span["end_us"]):
                    call = span
                    break
        if call is not None and call["call"] == 1:
            key = (id(call), c.get("site"))
            group = groups.get(key)
            if group is None:
                group = groups[key] = {"entry": call["entry"], "name": c.get("name"), "site": c.get("site"),
                                       "graphs": 0, "shapes": []}
            group["graphs"] += 1
            if c.get("inputs") and c["inputs"] not in group["shapes"]:
                group["shapes"].append(c["inputs"])
            continue
        reason = c.get("reason")
        if call is None and not reason:
            continue  # the first compile of a code object outside any entry call: its warm-up
        entry = {"compile_id": c.get("compile_id", ""), "site": c.get("site", "?"),
                 "reason": reason or (f"{c.get('compile_id', '')}: first compile of {c.get('name')} after "
                                      "warm-up (a code path the first call did not take)")}
        if call is not None:
            entry["call"] = f"call {call['call']} of {call['entry']}"
        recompiles.append(entry)
    return recompiles, list(groups.values())


def graph_inputs(node_shapes, input_count) -> list | None:
    """[[name, shape], ...] of the graph's inputs other than parameters and buffers (the first
    ``input_count`` nodes of dynamo's ``graph_node_shapes``: the placeholders come first)."""
    if not node_shapes:
        return None
    try:
        import ast

        shapes = ast.literal_eval(node_shapes) if isinstance(node_shapes, str) else dict(node_shapes)
        items = list(shapes.items())[: int(input_count)] if input_count else list(shapes.items())
    except Exception:
        return None
    out = []
    for name, shape in items:
        if "_parameters_" in name or "_buffers_" in name:
            continue
        clean = name[2:] if name[:2] in ("l_", "L_") else name
        out.append([clean.rstrip("_") or name, list(shape) if isinstance(shape, (list, tuple)) else shape])
    return out


_QUALNAMES: dict[str, dict] = {}


def code_name(filename: str, firstlineno, co_name: str) -> str:
    """What a compiled code object is, for a person: the class for a ``forward``/``__call__`` method
    (``BasicTransformerBlock``), else the function's qualified name; ``co_name`` when unknown."""
    table = _QUALNAMES.get(filename)
    if table is None:
        table = _QUALNAMES[filename] = {}
        try:
            import ast

            with open(filename, encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
        except Exception:
            tree = None

        def walk(node, prefix, cls):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    qual = f"{prefix}{child.name}"
                    shown = cls if cls and child.name in ("forward", "__call__") else qual
                    for line in [child.lineno, *(d.lineno for d in child.decorator_list)]:
                        table.setdefault((line, child.name), shown)
                    walk(child, f"{qual}.<locals>.", None)
                elif isinstance(child, ast.ClassDef):
                    walk(child, f"{prefix}{child.name}.", child.name)
                else:
                    walk(child, prefix, cls)

        if tree is not None:
            walk(tree, "", None)
    try:
        return table.get((int(firstlineno), co_name), co_name)
    except (TypeError, ValueError):
        return co_name
