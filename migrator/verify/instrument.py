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
from typing import Callable

# observations, filled while the script runs
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


# ----------------------------------------------------------------------------- patchers

def _outermost(kind: str, fn):
    """Wrap ``fn`` so only the outermost call (per thread) is recorded."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        depth = getattr(_local, kind, 0)
        if depth == 0 and kind in _BEGIN:
            _BEGIN[kind]()
        setattr(_local, kind, depth + 1)
        try:
            if depth == 0 and kind in _SUSPEND:
                with _SUSPEND[kind]():
                    result = fn(*args, **kwargs)
            else:
                result = fn(*args, **kwargs)
        finally:
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


def _patch_diffusers(module) -> None:
    cls = getattr(module, "DiffusionPipeline", None)
    if cls is None:
        return
    original_init_subclass = cls.__dict__.get("__init_subclass__")

    # concrete pipelines define their own __call__: wrap each subclass as it is created, and the
    # ones that exist already
    def wrap(sub):
        call = sub.__dict__.get("__call__")
        if call is not None and not hasattr(call, "__neuron_migrate_wrapped__"):
            sub.__call__ = _outermost("diffusion", call)

    @classmethod
    def __init_subclass__(sub, **kw):
        if original_init_subclass is not None:
            original_init_subclass.__func__(sub, **kw)
        else:
            super(cls, sub).__init_subclass__(**kw)
        wrap(sub)

    cls.__init_subclass__ = __init_subclass__
    stack = list(cls.__subclasses__())
    while stack:
        sub = stack.pop()
        wrap(sub)
        stack.extend(sub.__subclasses__())


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


def install(device_mode: str) -> None:
    """Install every hook. ``device_mode``: neuron, cpu, emulate, cuda or none."""
    from migrator.verify import emulate

    install_finder()
    on_import("torch", lambda m: emulate.install_device_mode(device_mode))
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


# ----------------------------------------------------------------------------- compile audit

def compile_activity() -> dict:
    """Graphs compiled and recompiles (with their first failing guard) from dynamo's metrics."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is None:
        return {"graphs": 0, "compilations": 0, "recompiles": []}
    try:
        from torch._dynamo.utils import counters, get_compilation_metrics

        metrics = list(get_compilation_metrics())
        graphs = int(counters["stats"].get("unique_graphs", 0))
    except Exception as exc:  # pragma: no cover - torch internals changed
        return {"graphs": 0, "compilations": 0, "recompiles": [], "error": repr(exc)}
    recompiles = []
    for m in metrics:
        reason = getattr(m, "recompile_reason", None)
        if reason:
            recompiles.append({
                "compile_id": str(getattr(m, "compile_id", "")),
                "site": f"{getattr(m, 'co_filename', '?')}:{getattr(m, 'co_firstlineno', '?')}"
                        f" ({getattr(m, 'co_name', '?')})",
                "reason": reason,
            })
    return {"graphs": graphs, "compilations": len(metrics), "recompiles": recompiles}
