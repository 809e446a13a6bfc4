"""NM901: a renamed optimum.neuron class or function is still called with Neuron-only arguments."""

from __future__ import annotations

import libcst as cst

from codemods.common.renames import load_table
from migrator.rules import PythonContext, PythonRule


class NeuronOnlyArguments(PythonRule):
    id = "NM901"
    title = "Neuron-only arguments on a call that the renames move to a native class"
    fix = "manual"
    triggers = ("optimum.neuron", "optimum import")
    why = """
        The native class that replaces an optimum.neuron name does not accept (or gives another
        meaning to) Neuron-only arguments such as `export=True`, `input_shapes`, `compiler_args`,
        `tensor_parallel_size` or `zero_1`. Where no specific rule rewrites them, the renamed
        call would fail or silently change behaviour, so a marker asks for the arguments to be
        removed or moved (shapes become padding targets, parallel sizes become
        DistributedConfig on the model load, dtypes become `dtype=`).
    """
    before = """
        from optimum.neuron import NeuronAcceleratorState

        state = NeuronAcceleratorState(cpu=False, autocast_backend="bf16")
    """
    after = """
        from accelerate.state import AcceleratorState

        # TODO(neuron-migrate NM901): Remove or move the Neuron-only arguments `autocast_backend=` of `NeuronAcceleratorState`.
        state = AcceleratorState(cpu=False, autocast_backend="bf16")
    """
    caveats = """
        Arguments passed through `**kwargs` are not seen. Calls whose class is owned by a
        specific rule are left to that rule. Where the native callable rejects such an argument
        (a TypeError at the call), the self-check leaves the call unrenamed with an NM991 marker
        beside this one.
    """
    markers = (
        ("Remove or move the Neuron-only arguments {arguments} of `{name}`.",
         """The native class that replaces this optimum.neuron name does not accept these arguments (or
         gives them another meaning): input shapes become padding targets, parallel sizes become a
         DistributedConfig on the model load (under torchrun), dtypes become `dtype=`; export and
         compiler options have no equivalent and go. The report's detail names where each one lives
         now when the rename table knows it."""),
    )

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        qual = ctx.qualname(func)
        if qual is None or not qual.startswith("optimum."):
            return
        table = load_table()
        entry, source = table.get(qual), qual
        if entry is None and isinstance(func, cst.Attribute):
            source = ctx.qualname(func.value) or ""
            entry = table.get(source)
        if entry is None or not entry.neuron_kwargs or ctx.owner(source) is not None:
            return
        found = sorted(
            a.keyword.value for a in node.args if a.keyword is not None and a.keyword.value in entry.neuron_kwargs
        )
        if found:
            what = ", ".join(f"`{k}=`" for k in found)
            message = f"Remove or move the Neuron-only arguments {what} of `{qual.rsplit('.', 1)[-1]}`."
            ctx.marker(node, message, detail=" ".join(filter(None, (self.marker_detail(message), entry.note))))


RULES = (NeuronOnlyArguments,)
