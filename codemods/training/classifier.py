"""NM210: sequence classifiers of migrated training scripts get ``problem_type`` at load.

The migration trains with ``torch_compile=True``. A ``*ForSequenceClassification`` model whose
``config.problem_type`` is None sets it on its first forward with labels (transformers 5.23,
e.g. ``modeling_distilbert.py``: ``if self.config.problem_type is None: if self.num_labels == 1:
"regression" elif self.num_labels > 1 and labels.dtype in (torch.long, torch.int):
"single_label_classification" else "multi_label_classification"``). The compiled forward guards on
``config.problem_type is None``, so the second step recompiles (on Neuron: minutes). Setting it at
load, where the migration can tell it from ``num_labels``, keeps one graph.
"""

from __future__ import annotations

import libcst as cst

from codemods.common.arg_plan import MAX_LINE, ArgPlan, apply_plan, has_star_kwargs, keywords, line_prefix, literal, \
    quote_of, statement_indent
from codemods.training.sources import LOADERS
from migrator.rules import PythonContext, PythonRule

#: the training entry points whose migration adds torch_compile=True (NM201, NM203, NM206)
TRAINING = ("NeuronTrainer", "NeuronSFTTrainer", "NeuronTrainingArguments", "NeuronSFTConfig", "TrainiumTrainer",
            "TrainiumTrainingArguments", "Seq2SeqNeuronTrainer", "NeuronORPOConfig")
#: signs that the labels are multi-hot float vectors (multi_label_classification)
MULTI_LABEL = ("multi_label", "BCEWithLogits", "multilabel", "multi-label")
RECOMPILE = ("transformers sets config.problem_type on the first forward with labels, and the compiled model "
             "(torch_compile=True) recompiles on the next step (guard: config.problem_type is None)")


class ClassifierProblemType(PythonRule):
    id = "NM210"
    markers = tuple((m, f"""{RECOMPILE}: "regression" for one label, "single_label_classification" for integer
        class labels, "multi_label_classification" for multi-hot float labels.""") for m in (
        "Set config.problem_type before this call, or the compiled model recompiles at step 2.",
        "Pass problem_type= to this load unless **kwargs does, or the compiled model recompiles.",
        "Pass problem_type= to this load (regression, single_label_ or multi_label_classification).",
        "Pass problem_type= to this load: single_label_ or multi_label_classification."))
    title = "Sequence classifiers trained compiled: problem_type set at load (no recompile after the first step)"
    fix = "mixed"
    triggers = TRAINING
    why = f"""
        The migrated Trainer runs with torch_compile=True. A sequence classifier loaded without
        problem_type has config.problem_type None until its first forward with labels, where
        transformers sets it ("regression" when num_labels == 1, "single_label_classification"
        when num_labels > 1 and the labels are integers, else "multi_label_classification"):
        {RECOMPILE}, a Neuron compilation of minutes. The load gets the problem type the first
        forward would set, where num_labels says it.
    """
    before = """
        from transformers import AutoModelForSequenceClassification
        from optimum.neuron import NeuronTrainer

        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased", num_labels=3)
        trainer = NeuronTrainer(model=model, args=args, train_dataset=ds)
    """
    after = """
        from transformers import AutoModelForSequenceClassification
        from transformers import Trainer

        model = AutoModelForSequenceClassification.from_pretrained(
            "bert-base-uncased", num_labels=3, problem_type="single_label_classification"
        )
        trainer = Trainer(model=model, args=args, train_dataset=ds)
    """
    caveats = """
        Only `<...>ForSequenceClassification.from_pretrained(...)` calls in a file that uses the
        optimum-neuron trainer or its arguments (the migration compiles their model). A literal
        num_labels=1 gives "regression"; a literal num_labels > 1 gives
        "single_label_classification" (integer class labels: the usual fine-tuning datasets); a
        file that mentions multi-label training (multi_label, BCEWithLogits) or a num_labels that
        is absent or not a literal gets a marker instead. With float multi-hot labels,
        "single_label_classification" fails at the first loss (CrossEntropyLoss shapes), it does
        not train silently wrong: set "multi_label_classification" then.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in LOADERS \
                or "ForSequenceClassification" not in ctx.source:
            return
        cls = ctx.class_qualname(func.value) or ""
        if not cls.endswith("ForSequenceClassification") or not cls.startswith("transformers."):
            return
        kw = keywords(node)
        if "problem_type" in kw:
            return
        if func.attr.value == "from_config":
            ctx.marker(node, "Set config.problem_type before this call, or the compiled model recompiles at step 2.")
            return
        if has_star_kwargs(node):
            ctx.marker(node, "Pass problem_type= to this load unless **kwargs does, or the compiled model recompiles.")
            return
        labels = literal(kw["num_labels"].value) if "num_labels" in kw else None
        if not isinstance(labels, int) or isinstance(labels, bool) or labels < 1:
            ctx.marker(node, "Pass problem_type= to this load (regression, single_label_ or multi_label_classification).")
            return
        if labels > 1 and any(sign in ctx.source for sign in MULTI_LABEL):
            ctx.marker(node, "Pass problem_type= to this load: single_label_ or multi_label_classification.")
            return
        kind = "regression" if labels == 1 else "single_label_classification"
        quote = quote_of(node)
        plan = ArgPlan(add=[("problem_type", lambda: cst.SimpleString(f"{quote}{kind}{quote}"))])
        indent, prefix, step = statement_indent(ctx), " " * line_prefix(ctx, node), ctx.module.default_indent
        ctx.replace(node, lambda new: apply_plan(new, plan, MAX_LINE, indent + prefix, step))
        ctx.finding(node, f"problem_type=\"{kind}\" (num_labels={labels}) set at load: {RECOMPILE}")


RULES = (ClassifierProblemType,)
