"""NM900: old-stack imports and names that no rule migrates automatically."""

from __future__ import annotations

import libcst as cst

from codemods.renames import load_table
from migrator.python_engine import PythonContext
from migrator.rules import PythonRule

#: top-level packages of the old stack; none of them exists under TorchNeuron
OLD_STACK = (
    "optimum.neuron",
    "torch_xla",
    "torch_neuronx",
    "torch_neuron",
    "transformers_neuronx",
    "neuronx_distributed",
    "neuronx_distributed_training",
    "libneuronxla",
)


def old_stack(qualified: str) -> bool:
    return any(qualified == p or qualified.startswith(p + ".") for p in OLD_STACK)


class OldStackLeftovers(PythonRule):
    id = "NM900"
    title = "Old-stack import or name with no automatic native replacement"
    fix = "manual"
    triggers = ("optimum", "torch_xla", "torch_neuron", "transformers_neuronx", "neuronx_distributed",
                "libneuronxla")
    why = """
        optimum-neuron, torch-xla, torch-neuronx (XLA), transformers-neuronx and
        neuronx-distributed are not part of the TorchNeuron stack. Every import of them that no
        rule rewrites is flagged, so that nothing of the old stack is left behind silently and
        `--check` keeps failing until it is gone.
    """
    before = """
        from optimum.neuron.cache import synchronize_hub_cache
    """
    after = """
        # TODO(neuron-migrate NM900): optimum.neuron.cache.synchronize_hub_cache has no automatic native replacement: ...
        from optimum.neuron.cache import synchronize_hub_cache
    """
    caveats = """
        Names owned by a specific rule, and names of the rename table, are not flagged here.
    """

    def handlers(self):
        return {cst.ImportAlias: self._on_alias, cst.ImportStar: self._on_star, cst.Attribute: self._on_attribute}

    def _covered(self, ctx: PythonContext, qualified: str) -> bool:
        return qualified in load_table() or ctx.owner(qualified) is not None

    def _on_alias(self, node: cst.ImportAlias, ctx: PythonContext) -> None:
        stmt = ctx.parent
        if isinstance(stmt, cst.ImportFrom):
            if stmt.relative or stmt.module is None:
                return
            module = _dotted(stmt.module)
            qual = f"{module}.{_dotted(node.name)}"
            if qual == "optimum.neuron":  # `from optimum import neuron`: uses are checked one by one
                return
        else:
            qual = _dotted(node.name)
            if qual == "optimum.neuron" or qual == "optimum":  # module style: uses checked one by one
                return
        if old_stack(qual) and not self._covered(ctx, qual):
            ctx.marker(node, f"{qual} has no automatic native replacement: {_advice(qual)}")

    def _on_star(self, node: cst.ImportStar, ctx: PythonContext) -> None:
        stmt = ctx.parent
        if isinstance(stmt, cst.ImportFrom) and stmt.module is not None and old_stack(_dotted(stmt.module)):
            ctx.marker(node, f"replace `from {_dotted(stmt.module)} import *` with explicit imports of the native names")

    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        parent = ctx.parent
        if isinstance(parent, cst.Attribute) and parent.value is node:
            return  # only the whole chain
        root = node
        while isinstance(root, cst.Attribute):
            root = root.value
        if not isinstance(root, cst.Name):
            return
        base = ctx.imports.resolve_name(root.value)
        if base not in ("optimum", "optimum.neuron"):
            return
        qual = ctx.qualname(node)
        if qual is None or not old_stack(qual):
            return
        parts = qual.split(".")
        for i in range(3, len(parts) + 1):
            if self._covered(ctx, ".".join(parts[:i])):
                return
        ctx.marker(node, f"{qual} has no automatic native replacement: {_advice(qual)}")


def _dotted(node) -> str:
    from migrator.imports import dotted

    return dotted(node) or ""


def _advice(qual: str) -> str:
    if qual.startswith("optimum.neuron"):
        return "remove it or use the Transformers/TRL/Diffusers equivalent (see `neuron-migrate explain NM900`)"
    if qual.startswith(("torch_xla", "torch_neuronx", "torch_neuron")):
        return "TorchNeuron runs eagerly on the `neuron` device with plain torch.distributed; use the native PyTorch equivalent"
    if qual.startswith("transformers_neuronx"):
        return "load the model with transformers.AutoModelForCausalLM on device_map=\"neuron\" with a static cache"
    return "use DTensor/DistributedConfig or torch.distributed equivalents"


RULES = (OldStackLeftovers,)
