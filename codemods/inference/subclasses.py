"""NM111: a user class derived from an optimum-neuron model class whose native equivalent is a
Transformers ``Auto*`` class.

``NeuronModelFor<Task>`` classes were real model classes: a subclass's overrides ran. Their native
equivalents (``AutoModelForCausalLM``...) are factories: ``from_pretrained`` returns the concrete class
resolved from the checkpoint's config (``LlamaForCausalLM``), never the subclass, so after the rename
the subclass's methods are silently not called::

    class MyModel(NeuronModelForCausalLM):      # after NM101: class MyModel(AutoModelForCausalLM)
        def generate(self, *args, **kwargs): ...

The concrete class depends on the checkpoint, which a codemod cannot read: a marker names the fix."""

from __future__ import annotations

import re

import libcst as cst

from codemods.common.renames import load_table
from migrator.model import fitted
from migrator.rules import PythonContext, PythonRule


def _factory_sources() -> dict[str, str]:
    """old-stack class -> the Transformers Auto* class the rename table gives it"""
    return {s: r.target for s, r in load_table().items()
            if r.target.rpartition(".")[2].startswith("Auto") and s.startswith("optimum.neuron.")}


#: what a subclass that re-implements optimum-neuron's machinery reads: its generation helpers and compile settings
_INTERNALS = re.compile(r"\b(?:TokenSelector|generate_tokens|prepare_inputs_for_(?:prefill|decode)|neuron_config|"
                        r"on_device_sampling|seq_ids|sampling_params)\b|\bself\.(?:batch_size|max_length)\b")
DELETE_MARKER = "Delete {name} and load with {new}: its methods re-implement optimum-neuron internals."
DELETE_PLAIN = "Delete this subclass and load with the Auto class: it re-implements optimum-neuron internals."


class AutoFactorySubclass(PythonRule):
    id = "NM111"
    markers = (
        (DELETE_MARKER, """The subclass overrides methods with optimum-neuron's own machinery (its generation loop
        with TokenSelector, generate_tokens, the model's batch_size and neuron_config): the native model has none of
        it, and the native generate() takes what such overrides usually added (stopping_criteria, sampling
        options). Load with the Auto class and call generate() instead; keep a subclass only for behaviour of your
        own, derived from the checkpoint's concrete class."""),
        ("Derive {name} from the checkpoint's own class (e.g. {example}).", """The
        class derives from an optimum-neuron NeuronModelFor... class whose native equivalent (AutoModelFor...) is
        a factory: from_pretrained returns the concrete class of the checkpoint (e.g. LlamaForCausalLM), never
        the subclass, so its overrides would not be called. Derive it from that concrete class instead."""),
    )
    title = "class X(NeuronModelFor...) -> a marker: its Auto* equivalent is a factory that never returns X"
    fix = "manual"
    triggers = ("NeuronModel",)
    why = """
        optimum-neuron's `NeuronModelFor<Task>` classes were model classes, so a user subclass's
        overrides (`generate`, `forward`, ...) ran. The native equivalents are Transformers `Auto*`
        classes: factories whose `from_pretrained` returns the concrete class resolved from the
        checkpoint's config (`LlamaForCausalLM` for a Llama checkpoint), never the subclass. After the
        rename the overrides would silently not be called: the subclass must derive from the concrete
        class of its checkpoint.
    """
    before = """
        from optimum.neuron import NeuronModelForCausalLM

        class MyModel(NeuronModelForCausalLM):
            def generate(self, *args, **kwargs):
                return super().generate(*args, **kwargs)
    """
    after = """
        from transformers import AutoModelForCausalLM

        # TODO(neuron-migrate NM111): Derive MyModel from the checkpoint's own class (e.g. LlamaForCausalLM).
        class MyModel(AutoModelForCausalLM):
            def generate(self, *args, **kwargs):
                return super().generate(*args, **kwargs)
    """
    caveats = """
        The class's loads (`MyModel.from_pretrained(...)`) are migrated like the base class's by the
        inference rules; only the base class is left to a person. A subclass whose methods use
        optimum-neuron's internals (TokenSelector, generate_tokens, neuron_config, its batch_size)
        is marked for deletion instead: it re-implemented what the native generate() does.
    """

    def handlers(self):
        return {cst.ClassDef: self._on_class}

    def _on_class(self, node: cst.ClassDef, ctx: PythonContext) -> None:
        if not node.bases or node.bases[0].keyword is not None:
            return
        base = node.bases[0].value
        qual = ctx.qualname(base)  # the direct base (a chain through module classes is marked once)
        factories = ctx.scratch.setdefault(self.id, {}).get("factories")
        if factories is None:
            factories = ctx.scratch[self.id]["factories"] = _factory_sources()
        target = factories.get(qual or "")
        if target is None:
            return
        new = target.rpartition(".")[2]
        example = new.replace("AutoModel", "Llama") if new.startswith("AutoModelFor") else "LlamaModel"
        name = node.name.value
        if _INTERNALS.search(ctx.module.code_for_node(node.body)):
            # its overrides re-implement optimum-neuron's own machinery (its generation loop): on a concrete class
            # they would run again, on attributes the native model lacks
            ctx.marker(node, fitted(DELETE_MARKER.format(name=name, new=new), DELETE_PLAIN.format(name=name)))
            return
        ctx.marker(node, f"Derive {name} from the checkpoint's own class (e.g. {example}).")


RULES = (AutoFactorySubclass,)
