"""codemods/common/hardware.py: which hardware the branch around a node runs on."""

from __future__ import annotations

import libcst as cst
import pytest

from codemods.common.hardware import MIXED, NEURON, OTHER, branch_hardware
from migrator.imports import dotted


class _Ctx:
    """What branch_hardware reads of a PythonContext: the module, the stack and qualified names
    (here: the dotted source, as if every name were imported under its own name)."""

    def __init__(self, module: cst.Module, stack: list[cst.CSTNode]):
        self.module, self.stack = module, stack

    def qualname(self, expr):
        return dotted(expr)


def _stack_to_mark(module: cst.Module) -> list[cst.CSTNode]:
    """The ancestors (module first) of the call ``mark()``."""
    def walk(node, path):
        path = path + [node]
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "mark":
            return path
        for child in node.children:
            found = walk(child, path)
            if found:
                return found
        return None
    return walk(module, [])


CASES = [
    ("if torch.cuda.is_available():\n    mark()\n", OTHER),
    ("if torch.cuda.is_available():\n    pass\nelse:\n    mark()\n", None),
    ('if device == "neuron":\n    mark()\n', NEURON),
    ('if device == "neuron":\n    pass\nelif device == "cuda":\n    mark()\n', OTHER),
    ('if device == "neuron":\n    pass\nelse:\n    mark()\n', OTHER),
    ('if device == "neuron":\n    pass\nelif device == "cuda":\n    pass\nelse:\n    mark()\n', OTHER),
    ('if args.device != "cpu":\n    mark()\n', None),
    ('if args.device != "cpu":\n    pass\nelse:\n    mark()\n', OTHER),
    ('if dev.type in ("cuda", "mps"):\n    mark()\n', OTHER),
    ('if dev.type in ("cuda", "neuron"):\n    mark()\n', MIXED),
    ('if device.startswith("cuda"):\n    mark()\n', OTHER),
    ("if use_gpu:\n    mark()\n", OTHER),
    ("if not args.cuda:\n    mark()\n", None),
    ("if x.is_cuda and big:\n    mark()\n", OTHER),
    ("if torch.cuda.is_available() or big:\n    mark()\n", None),
    ("if torch.cuda.device_count() > 1:\n    mark()\n", OTHER),
    ('if device == torch.device("cuda"):\n    mark()\n', OTHER),
    ("if is_torch_xla_available():\n    mark()\n", NEURON),
    ("if not is_torch_xla_available():\n    mark()\n", OTHER),
    ("y = mark() if torch.cuda.is_available() else 0\n", OTHER),
    ("y = 0 if torch.cuda.is_available() else mark()\n", None),
    ('if device == "cuda":\n    if big:\n        mark()\n', OTHER),
    ('if device == "cuda":\n    if device2 == "neuron":\n        mark()\n', NEURON),  # the innermost test decides
    ("if big:\n    mark()\n", None),
    ("mark()\n", None),
]


@pytest.mark.parametrize("source,kind", CASES)
def test_branch_hardware(source, kind):
    module = cst.parse_module(source)
    found = branch_hardware(_Ctx(module, _stack_to_mark(module)))
    assert (found.kind if found is not None else None) == kind


def test_branch_names_its_test():
    module = cst.parse_module('if device == "neuron":\n    pass\nelif device == "cuda":\n    mark()\n')
    assert branch_hardware(_Ctx(module, _stack_to_mark(module))).test == 'device == "cuda"'
