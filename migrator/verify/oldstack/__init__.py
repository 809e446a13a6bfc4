"""The old AWS Neuron stack, emulated on CPU (issue 15): what ``verify --against`` runs the ORIGINAL with.

``install()`` puts a ``sys.meta_path`` finder in front of the others. From then on the user's
``import optimum.neuron``, ``torch_xla``, ``torch_neuronx``, ``transformers_neuronx``,
``neuronx_distributed`` (and ``libneuronxla``), with their submodules, resolve to pure-Python
modules over torch/transformers/trl/diffusers that compute what the old stack computed (static
shapes, compiled precision, compiled generation settings: docs/VERIFY_EMULATION.md says per API what
is modelled). None of these packages needs to be installed.

* The real ``optimum`` namespace is not shadowed: when an ``optimum`` package is installed it loads
  as usual and only ``optimum.neuron`` comes from here; otherwise ``optimum`` is a namespace package
  whose ``__path__`` lists every ``optimum`` folder on ``sys.path``.
* The finder serves the user's code only: a probe from an installed library (transformers'
  ``is_torch_xla_available``, diffusers' ``_is_package_available("torch_neuronx")``...) is answered
  "not installed", so the libraries keep their CPU code paths; once the user's code imported a root
  (``optimum.neuron``), its submodules are served to libraries too (pickling an emulated class). ``USE_TORCH_XLA=0`` is set for the
  same reason (transformers and accelerate read it).
* An old API that is not emulated raises :class:`NotEmulated` (module attribute, submodule or a
  call argument the emulation does not model): the run stops, it never passes silently.

Nothing heavy is imported here: torch is imported when the script imports an emulated module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types

ROOTS = ("optimum.neuron", "torch_xla", "torch_neuronx", "transformers_neuronx", "neuronx_distributed",
         "libneuronxla")

from migrator.verify.oldstack.errors import RAISED, NotEmulated, not_emulated

# --------------------------------------------------------------------------------------------- table
#: the provider modules (under migrator.verify.oldstack); each has ``MODULES``: {emulated module: names}.
#: Providers import nothing heavy at import time; a name is resolved (and torch imported) on first use.
PROVIDERS = ("optimum_inference", "optimum_training", "xla", "neuronx_trace", "neuronx_models")
_TABLE: dict[str, dict[str, str]] = {}  # emulated module -> {name: provider module}


def _table() -> dict[str, dict[str, str]]:
    if not _TABLE:
        for provider in PROVIDERS:
            full = f"{__name__}.{provider}"
            for module, names in importlib.import_module(full).MODULES.items():
                entry = _TABLE.setdefault(module, {})
                for name in names:
                    entry.setdefault(name, full)
    return _TABLE


def _is_package(name: str) -> bool:
    prefix = name + "."
    return any(m.startswith(prefix) for m in _table())


def _root_of(name: str) -> str | None:
    for root in ROOTS:
        if name == root or name.startswith(root + "."):
            return root
    return None


class _EmulatedModule(types.ModuleType):
    """An emulated module: its names come from the providers; any other public name is NotEmulated."""

    def __getattr__(self, item):
        names = _table().get(self.__name__, {})
        if item in names:
            value = getattr(importlib.import_module(names[item]), item)
            setattr(self, item, value)
            return value
        if item.startswith("__"):
            raise AttributeError(item)
        # a submodule the script did not import yet (``import torch_xla; torch_xla.core.xla_model``)
        child = f"{self.__name__}.{item}"
        if child in _table():
            return importlib.import_module(child)
        raise NotEmulated(child)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(_table().get(self.__name__, {})))


class _Loader(importlib.abc.Loader):
    def __init__(self, emulated: bool):
        self._emulated = emulated

    def create_module(self, spec):
        if not self._emulated:
            raise NotEmulated(spec.name)
        return _EmulatedModule(spec.name)

    def exec_module(self, module):
        name = module.__name__
        module.__neuron_migrate_emulated__ = True
        module.__file__ = None
        module.__all__ = list(_table().get(name, {}))
        if _is_package(name):
            module.__path__ = []
        if "." not in name or name == "optimum.neuron":
            module.__version__ = "0.0.0+neuron-migrate-emulated"
        if _root_of(name) in ("torch_xla", "libneuronxla"):
            from migrator.verify.oldstack import xla  # the device handling of torch_xla

            xla.install_device()  # "xla" devices -> cpu, init_process_group("xla") -> gloo


class _NamespaceLoader(importlib.abc.Loader):
    """``optimum`` when it is not installed: a namespace over every ``optimum`` folder on sys.path."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        paths = [os.path.join(p or os.getcwd(), "optimum") for p in sys.path if isinstance(p, str)]
        module.__path__ = [p for p in paths if os.path.isdir(p)]


_HERE = os.path.dirname(os.path.abspath(__file__))
_VERIFY = os.path.dirname(_HERE)


def _asked_by_a_library() -> bool:
    """Whether the import (or ``importlib.util.find_spec``) comes from an installed library rather than
    from the user's code: the first frame outside importlib and outside migrator.verify decides."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if (filename.startswith("<frozen importlib") or filename.startswith(_VERIFY)
                or os.path.basename(os.path.dirname(filename)) == "importlib"
                or filename.endswith(os.sep + "pkgutil.py")):
            frame = frame.f_back
            continue
        return ("site-packages" in filename or "dist-packages" in filename)
    return False


class OldStackFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "optimum":
            if importlib.machinery.PathFinder.find_spec("optimum") is not None or _asked_by_a_library():
                return None  # a real optimum loads as usual (optimum.neuron still comes from here)
            return importlib.machinery.ModuleSpec("optimum", _NamespaceLoader(), is_package=True)
        root = _root_of(fullname)
        if root is None or root in _real():
            return None  # not the old stack, or installed for real in the original's environment
        # a library probing for the old stack is told it is not installed, unless the user's code
        # imported it already (then the library sees what the user sees: e.g. torch.save pickling an
        # emulated NeuronSFTConfig imports the module its class names)
        if root not in sys.modules and _asked_by_a_library():
            return None
        emulated = fullname in _table()
        return importlib.machinery.ModuleSpec(fullname, _Loader(emulated),
                                              is_package=emulated and _is_package(fullname))


def _real() -> frozenset[str]:
    """The old-stack roots that import for real in this environment (``side.REAL_ENV``, set by verify from
    its probe of the original's interpreter): the emulation serves only the others."""
    roots = frozenset(r for r in os.environ.get("NEURON_MIGRATE_VERIFY_REAL_OLDSTACK", "").split(",") if r)
    return roots | {"libneuronxla"} if "torch_xla" in roots else roots


def install() -> None:
    """From now on the old-stack modules resolve to the emulation (idempotent); a real torch_xla keeps the
    libraries' XLA code paths, as on the old stack."""
    if "torch_xla" not in _real():
        os.environ["USE_TORCH_XLA"] = "0"  # transformers/accelerate: no XLA code paths in the libraries
    iu = sys.modules.get("transformers.utils.import_utils")
    if iu is not None and "torch_xla" not in _real():  # transformers already imported: flag read at import
        iu.USE_TORCH_XLA = "0"
        cached = getattr(iu, "is_torch_xla_available", None)
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()
    if not any(isinstance(f, OldStackFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, OldStackFinder())
    from migrator.verify.oldstack import transformers4

    transformers4.install()  # the 4.x behaviours old scripts rely on (torchscript=True)


def uninstall() -> None:
    """Remove the finder and the emulated modules (tests)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, OldStackFinder)]
    for name in list(sys.modules):
        if _root_of(name) is not None:
            del sys.modules[name]


__all__ = ["install", "uninstall", "NotEmulated", "not_emulated", "RAISED", "ROOTS"]
