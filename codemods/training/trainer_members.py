"""NM209: members of optimum-neuron's trainers that the native Trainer does not have, used by a
user's subclass of one of them.

A subclass of ``NeuronTrainer`` (``NeuronSFTTrainer``, ``NeuronORPOTrainer``...) becomes a subclass of
``transformers.Trainer`` (``trl.SFTTrainer``...) through the rename table; calls it made to the
optimum-neuron additions would fail with ``AttributeError`` at the first step::

    class MyTrainer(NeuronTrainer):
        def compute_loss(self, model, inputs, return_outputs=False):
            self.trigger_on_step_middle_for_neuron_cache_callback(model)
            ...

The calls that only fed optimum-neuron's compile cache or its precompilation run are removed; other
uses of those members get a marker."""

from __future__ import annotations

import libcst as cst

from codemods.common.statements import called_statement, remove_small_statement
from codemods.training.sources import SFT_TRAINER_SOURCES, TRAINER_SOURCES, sources
from migrator.rules import PythonContext, PythonRule

#: optimum-neuron-only trainer members -> None (a call statement is removed: what it did has no
#: equivalent to keep) or what to use instead
MEMBERS: dict[str, str | None] = {
    "trigger_on_step_middle_for_neuron_cache_callback": None,  # fed the Neuron compile cache
    "prepare_args_for_precompilation": None,  # neuron_parallel_compile runs do not exist natively
    "validate_args": "nothing: the native Trainer validates its arguments itself",
    "mp_enabled": "`self.model.tp_size is not None` (model parallelism comes from the model's DistributedConfig)",
    "create_accelerator_and_postprocess": "the native Trainer's own method (it builds an accelerate.Accelerator)",
}
TRAINERS = frozenset((*TRAINER_SOURCES, *SFT_TRAINER_SOURCES,
                      *sources("trl.ORPOTrainer", "trl.DPOTrainer")))


class NeuronTrainerMembers(PythonRule):
    id = "NM209"
    title = "optimum-neuron-only members used by a NeuronTrainer subclass -> removed or marked"
    fix = "mixed"
    triggers = ("NeuronTrainer", "NeuronSFTTrainer", "NeuronORPOTrainer", "TrainiumTrainer")
    why = """
        optimum-neuron's trainers added members of their own to the Trainer they derive from
        (`trigger_on_step_middle_for_neuron_cache_callback`, `prepare_args_for_precompilation`,
        `validate_args`, `mp_enabled`). A user's subclass that calls them fails with AttributeError
        once its base is the native `Trainer`/`SFTTrainer`. The calls that fed the Neuron compile cache
        or the precompilation run have nothing to keep: they are removed; other uses are marked.
    """
    before = """
        from optimum.neuron import NeuronTrainer

        class MyTrainer(NeuronTrainer):
            def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
                self.trigger_on_step_middle_for_neuron_cache_callback(model)
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
    """
    after = """
        from transformers import Trainer

        class MyTrainer(Trainer):
            def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
    """
    caveats = """
        Only `self.<member>` inside a class whose first base is an optimum-neuron trainer (directly or
        through another class of the module). A removed call that was a block's only statement leaves
        `pass`.
    """

    def handlers(self):
        return {cst.Attribute: self._on_attribute}

    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        name = node.attr.value
        if name not in MEMBERS or not (isinstance(node.value, cst.Name) and node.value.value == "self"):
            return
        cls = next((n for n in reversed(ctx.stack) if isinstance(n, cst.ClassDef)), None)
        if cls is None or not cls.bases or cls.bases[0].keyword is not None:
            return
        base = ctx.class_qualname(cls.bases[0].value)
        if base not in TRAINERS:
            return
        instead = MEMBERS[name]
        statement = called_statement(ctx, node) if instead is None else None
        if statement is not None:
            remove_small_statement(ctx, *statement)
            ctx.finding(node, f"self.{name}() removed: an optimum-neuron trainer member (it fed the Neuron "
                              "compile cache / precompilation run) that the native trainer does not have")
            return
        ctx.marker(node, f"Use {instead.split(' (')[0]} instead of `self.{name}`: the native trainer does not have it." if instead
                   else f"Remove this use of `self.{name}`: the native trainer does not have it.",
                   detail="a member of optimum-neuron's trainer (model parallelism comes from the model's "
                          "DistributedConfig natively)")


RULES = (NeuronTrainerMembers,)
