"""NM902: test doubles aimed at the old stack (``mock.patch("torch_xla.core.xla_model.xla_device")``).

A patch target is a dotted path in a string: no import names it, so neither the renames nor NM900
see it, and after the migration the patch raises ``ModuleNotFoundError`` (the module is gone) or
patches something the migrated code no longer calls.
"""

from __future__ import annotations

import libcst as cst

from codemods.common.leftovers import OldStackLeftovers, old_stack
from migrator.model import fitted
from migrator.rules import PythonContext, PythonRule

#: callables whose first argument is a dotted path to replace
PATCHERS = ("unittest.mock.patch", "mock.patch", "pytest_mock.MockerFixture.patch")
#: method names that take such a path on objects whose type the module does not show
#: (``mocker.patch``, ``monkeypatch.setattr``)
PATCH_METHODS = ("patch", "setattr", "delattr")


#: the methods of a mock that compare the arguments the code under test passed (``m.assert_called_with(...)``)
MOCK_ASSERTIONS = frozenset({"assert_called_with", "assert_called_once_with", "assert_any_call", "assert_has_calls"})


def in_mock_assertion(ctx: PythonContext) -> bool:
    """Whether the node being visited is inside the arguments of a mock assertion or a ``mock.call(...)``:
    there an old-stack value stands for what the (unmigrated) code under test passes, so rewriting it to
    its native twin makes the assertion fail (``'sum' == ReduceOp.SUM`` is False)."""
    for node in reversed(ctx.stack):
        if not isinstance(node, cst.Call):
            continue
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in MOCK_ASSERTIONS:
            return True
        if isinstance(func, (cst.Name, cst.Attribute)) and ctx.qualname(func) in ("unittest.mock.call", "mock.call"):
            return True
    return False


class OldStackPatchTargets(PythonRule):
    id = "NM902"
    title = "mock.patch / monkeypatch targets that name the old stack"
    fix = "manual"
    triggers = OldStackLeftovers.triggers
    why = """
        Tests replace old-stack functions by their dotted path:
        `@patch("torch_xla.core.xla_model.xla_device")`, `mocker.patch("torch_neuronx.trace")`,
        `monkeypatch.setattr("optimum.neuron.NeuronModelForCausalLM.from_pretrained", fake)`. The
        path is a string, so no rename reaches it; on TorchNeuron the module does not exist
        (`ModuleNotFoundError` when the patch starts) or the migrated code calls something else.
        Each such patch gets a marker: patch what the migrated code calls, or drop the patch.
    """
    before = """
        from unittest.mock import patch


        @patch("torch_xla.core.xla_model.xla_device")
        def test_device(fake_device):
            ...
    """
    after = """
        from unittest.mock import patch


        # TODO(neuron-migrate NM902): Patch what the migrated code calls instead of `torch_xla.core.xla_model.xla_device`, or drop the patch.
        @patch("torch_xla.core.xla_model.xla_device")
        def test_device(fake_device):
            ...
    """
    markers = (
        ("Patch what the migrated code calls instead of `{target}`, or drop the patch.",
         """The patch names an old-stack function by its dotted path, a string no rename reaches: on
         TorchNeuron the module does not exist (ModuleNotFoundError when the patch starts) or the
         migrated code calls something else (torch.device("neuron"), a Transformers class), so the
         patch replaces nothing. Point it at what the migrated code calls, or drop it."""),
    )

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        qual = ctx.qualname(func)
        if not (qual in PATCHERS or (qual is None and isinstance(func, cst.Attribute)
                                     and func.attr.value in PATCH_METHODS)):
            return
        first = node.args[0] if node.args and node.args[0].keyword is None else None
        if first is None or not isinstance(first.value, (cst.SimpleString, cst.ConcatenatedString)):
            return
        target = first.value.evaluated_value
        if not isinstance(target, str) or not old_stack(target):
            return
        short = ".".join(target.rsplit(".", 2)[-2:])
        ctx.marker(node, fitted(*(f"Patch what the migrated code calls instead of `{t}`, or drop the patch."
                                  for t in (target, short, target.rsplit(".", 1)[-1]))))


RULES = (OldStackPatchTargets,)
