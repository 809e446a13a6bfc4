"""Child side: which side of a comparison this process runs, the old-stack emulation hook, turning an old
API that is not emulated into a clear reason, and whether the script started a process group.

Imported by the verify child (``child.py``) and by the notebook kernel (``notebook.py``); imports
nothing heavy at import time.
"""

from __future__ import annotations

import os
import re
import sys

SIDE_ENV = "NEURON_MIGRATE_VERIFY_SIDE"
#: the old-stack packages that import for real in the original's environment (comma-separated roots,
#: ``origenv.probe``): the emulation leaves them to the real package
REAL_ENV = "NEURON_MIGRATE_VERIFY_REAL_OLDSTACK"
#: distribution -> module: the libraries whose versions the report names (those the run imported)
LIBRARIES = {"transformers": "transformers", "trl": "trl", "huggingface-hub": "huggingface_hub",
             "tokenizers": "tokenizers", "accelerate": "accelerate", "peft": "peft", "diffusers": "diffusers",
             "datasets": "datasets", "sentence-transformers": "sentence_transformers", "torch": "torch"}
#: the old stack's import roots: an ImportError for one of them on the original side means "not emulated"
OLD_ROOTS = ("optimum.neuron", "torch_xla", "torch_neuronx", "transformers_neuronx", "neuronx_distributed")

_state = {"process_group": False, "emulation": None}


def current() -> str:
    return os.environ.get(SIDE_ENV, "migrated")


def install_emulation() -> str | None:
    """On the original side, install the old-stack emulation (``migrator.verify.oldstack``) so that
    ``import optimum.neuron`` & co resolve on CPU. Returns what was installed (None: nothing, e.g. the
    package is absent from an older migrator, or this is the migrated side)."""
    if current() != "original":
        return None
    import importlib
    import importlib.util

    if importlib.util.find_spec("migrator.verify.oldstack") is None:
        return None
    importlib.import_module("migrator.verify.oldstack").install()
    _state["emulation"] = "migrator.verify.oldstack"
    return _state["emulation"]


def real_old_stack() -> frozenset[str]:
    return frozenset(r for r in os.environ.get(REAL_ENV, "").split(",") if r)


def libraries_used() -> dict[str, str]:
    """The versions of the libraries this run imported."""
    import importlib.metadata

    out = {}
    for dist, module in LIBRARIES.items():
        if module in sys.modules:
            try:
                out[dist] = importlib.metadata.version(dist)
            except Exception:
                out[dist] = str(getattr(sys.modules[module], "__version__", "?"))
    return out


def old_stack_used() -> dict[str, str]:
    """Per old-stack package the run imported: "real X.Y" or "emulated"."""
    out = {}
    for root in OLD_ROOTS + ("libneuronxla",):
        mod = sys.modules.get(root)
        if mod is None:
            continue
        if getattr(mod, "__neuron_migrate_emulated__", False):
            out[root] = "emulated"
        else:
            out[root] = f"real {getattr(mod, '__version__', '?')}"
    return out


def _old_module(name: str | None) -> bool:
    return bool(name) and any((name == r or name.startswith(r + ".")) and r not in real_old_stack()
                              for r in OLD_ROOTS)


def not_emulated(exc: BaseException | None) -> str | None:
    """The dotted name of the old API behind ``exc``: a ``NotEmulated`` anywhere in its chain (cause or
    context), or, on the original side, an ImportError for a module of the old stack. None otherwise."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__name__ == "NotEmulated" and getattr(exc, "api", None):
            return str(exc.api)
        if isinstance(exc, ImportError) and current() == "original" and _old_module(exc.name):
            # ``from optimum.neuron import X`` where X does not exist: name is the module, the text names X
            m = re.match(r"cannot import name '([\w.]+)'", str(exc))
            return f"{exc.name}.{m.group(1)}" if m else exc.name
        exc = exc.__cause__ or exc.__context__
    return None


def not_emulated_message(api: str) -> str:
    return f"cannot run the original: `{api}` is not emulated"


def track_process_group() -> None:
    """Record whether the script ever starts a torch.distributed process group (a script that destroys it
    at its end still counts): ``--nproc N`` on a script that never does is warned about."""
    from migrator.verify import instrument

    def patch(dist) -> None:
        if not getattr(dist, "is_available", lambda: False)():
            return
        for mod in (dist, sys.modules.get("torch.distributed.distributed_c10d")):
            if mod is None or getattr(mod.init_process_group, "_nm_tracked", False):
                continue
            original = mod.init_process_group

            def init_process_group(*args, _original=original, **kwargs):
                result = _original(*args, **kwargs)
                _state["process_group"] = True
                return result

            init_process_group._nm_tracked = True
            init_process_group.__wrapped__ = original
            mod.init_process_group = init_process_group

    instrument.on_import("torch.distributed", patch)


def process_group_started() -> bool:
    if _state["process_group"]:
        return True
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:  # pragma: no cover
        return False


def peak_rss_mb() -> float | None:
    try:
        import resource

        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)
    except Exception:  # pragma: no cover - not on Linux/macOS
        return None


def write_json(path: str, payload: dict) -> None:
    """Write atomically (the parent reads the file once the child is gone)."""
    import json

    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(payload, fh)
    os.replace(tmp, path)


def payload_fields(error_exc: BaseException | None) -> dict:
    """The side's fields of the child's payload."""
    fields = {"side": current(), "emulation": _state["emulation"], "process_group": process_group_started(),
              "libraries": libraries_used()}
    emulate = sys.modules.get("migrator.verify.emulate")
    reached = emulate.reached_neuron() if emulate is not None else None
    if reached is not None:
        fields["reached_neuron"] = reached
    if current() == "original":
        # the old stack's device APIs the original imported (it was meant to run on Neuron)
        fields["old_stack"] = sorted(r for r in OLD_ROOTS if r in sys.modules)
        fields["old_stack_used"] = old_stack_used()
    api = not_emulated(error_exc)
    raised = getattr(sys.modules.get("migrator.verify.oldstack"), "RAISED", None)
    if not api and raised and current() == "original":
        api = raised[0]  # the script caught it and went on: another path than on the old stack
    if api:
        fields["not_emulated"] = api
        fields["error"] = not_emulated_message(api)
    return fields
