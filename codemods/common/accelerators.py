"""Which torch_xla code is Neuron code: a module that uses torch_xla for other XLA devices (Google TPUs, or as one
optional backend of a generic library) is not the old Neuron stack, and the migration leaves it alone."""

from __future__ import annotations

import ast
import functools
import re

#: what names Neuron in a module (a comment or string counts: "xla" (Trainium), a trn1 instance...)
_NEURON_NAMED = re.compile(r"neuron|trainium|inferentia|\btrn[12]\b|\binf[12]\b", re.I)
#: what only code for Google TPUs contains (a comment saying "TPU" does not count: Neuron forks of TPU code keep them)
_TPU_CODE = re.compile(r"""cloud-tpu|tpu-pytorch|==?\s*["']tpu["']|xla_device_hw\([^)]*\)\s*==\s*["']TPU|"""
                       r"""PJRT_DEVICE["'\]]*\s*[:=]+\s*["']?TPU|XRT_TPU_CONFIG|COLAB_TPU_ADDR|\bTPU_NAME\b""")
#: another accelerator the module dispatches on
_OTHER_ACCELERATOR = re.compile(r"\bcuda\b|\bmps\b")
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception"})
_OWN_COMMENTS = re.compile(r"#[^\n]*neuron-migrate[^\n]*")


@functools.lru_cache(maxsize=64)
def serves_other_accelerators(source: str) -> bool:
    """Whether a module uses torch_xla for other XLA devices: nothing in it names Neuron, and it is Cloud TPU code
    (TPU wheels or runtime settings, a device named "tpu"), or it uses torch_xla as one optional backend among
    others: every torch_xla import is in the body of a ``try`` whose ImportError handler falls back to something
    (a flag, a None), or the module imports no torch_xla at all (it asks `"torch_xla" in sys.modules`, passes
    "xla://"), and the module dispatches on another accelerator too (``cuda``, ``mps``): a generic library's
    handler -- or it reads nothing of torch_xla but its version (a probe: a test suite's skip condition). Its
    torch_xla code is not known to be Neuron code: the torch-xla rules leave it alone, NM420 asks for a neuron
    branch beside a gate, NM900 marks the import."""
    own = _OWN_COMMENTS.sub("", source)  # this tool's markers name Neuron: they are not the module's
    if "torch_xla" not in source or _NEURON_NAMED.search(own):
        return False
    if _TPU_CODE.search(own):
        return True  # Cloud TPU code: its wheels, its runtime settings, a device named "tpu"
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return False
    if not _OTHER_ACCELERATOR.search(own) and not _probes_only(tree):
        return False
    gated: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_falls_back(h) for h in node.handlers):
            gated.update(id(s) for s in node.body)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(n == "torch_xla" or n.startswith("torch_xla.") for n in names) and id(node) not in gated:
                return False
    return True  # every torch_xla import falls back, or there is none (`"torch_xla" in sys.modules`, "xla://")


def _probes_only(tree: ast.Module) -> bool:
    """Whether the module's torch_xla imports are only an availability probe: nothing reads the names they bind
    but their ``__version__`` (``try: import torch_xla; OK = version(torch_xla.__version__) >= ...``), so the
    module runs no XLA code itself: what it tests for (a test suite's skip condition) is PyTorch/XLA."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                module = a.name if isinstance(node, ast.Import) else f"{node.module or ''}.{a.name}"
                if module == "torch_xla" or module.startswith("torch_xla."):
                    bound.add(a.asname or a.name.split(".")[0])
    if not bound:
        return False
    versions = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "__version__"}
    return not any(isinstance(n, ast.Name) and n.id in bound and id(n) not in versions for n in ast.walk(tree))


def _falls_back(handler: ast.ExceptHandler) -> bool:
    """An ``except ImportError:`` (or bare / Exception) whose body does something but pass or raise."""
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    if handler.type is not None and not any(isinstance(t, ast.Name) and t.id in _IMPORT_ERRORS for t in types):
        return False
    return any(not isinstance(s, (ast.Pass, ast.Raise)) for s in handler.body)


class NeuronXlaOnly:
    """Mixin of the rules that rewrite torch-xla code (put it before the rule's base class): a module that
    serves other XLA devices (:func:`serves_other_accelerators`) is not shown to them."""

    @classmethod
    def applies_to(cls, text: str, project: frozenset[str] = frozenset(),
                   found: frozenset[str] | None = None) -> bool:
        return super().applies_to(text, project, found) and not serves_other_accelerators(text)  # type: ignore[misc]
