"""Trainer methods users override whose call the target changed (NM612): the generated upgrade
data says which parameters ``transformers.Trainer`` now passes (``compute_loss(...,
num_items_in_batch=)``, ``training_step(model, inputs, num_items_in_batch)``, ``log(logs,
start_time)``, ``create_optimizer(model)``); an override in a user subclass without them raises a
TypeError at the first step. Also the helpers that tell a user class built on a trainer."""

from __future__ import annotations

import json

import libcst as cst

from codemods.upgrade.base import target_of
from codemods.upgrade.data import data
from migrator.rules import PythonContext, PythonRule

TRAINER = "transformers.Trainer"
#: parameter kinds an override can take as an added trailing parameter
ADDABLE = ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY")


def is_trainer_class(target: str | None) -> bool:
    """A target class that is (or derives from) transformers.Trainer: the Trainer family and TRL's trainers."""
    if target is None:
        return False
    return target in (TRAINER, "transformers.Seq2SeqTrainer") or (target.startswith("trl.") and target.endswith("Trainer"))


def trainer_base(ctx: PythonContext, cls: cst.ClassDef) -> str | None:
    """The target trainer class ``cls`` derives from directly (through the imports and the rename
    of optimum-neuron trainers), else None."""
    for base in cls.bases:
        if base.keyword is None:
            target = target_of(ctx, base.value)
            if is_trainer_class(target):
                return target
    return None


def _code(value) -> str:
    return "None" if value is None else json.dumps(value) if isinstance(value, str) else repr(value)


class TrainerOverrides(PythonRule):
    id = "NM612"
    title = "Trainer subclasses: overrides get the parameters the v5 Trainer passes (compute_loss num_items_in_batch, ...)"
    fix = "auto"
    triggers = ("Trainer",)
    why = """
        Transformers 4.46 started passing `num_items_in_batch` to `compute_loss` and
        `training_step` (and v5 passes `start_time` to `log`, `model` to `create_optimizer`). An
        override written for the old signature fails with "got an unexpected keyword argument" at
        the first step. The parameters the target added (read from the generated upgrade data:
        old and new signatures of the methods users override) are appended with their defaults;
        the body is unchanged, so the override computes what it did.
    """
    before = """
        from transformers import Trainer

        class MyTrainer(Trainer):
            def compute_loss(self, model, inputs, return_outputs=False):
                outputs = model(**inputs)
                return (outputs.loss, outputs) if return_outputs else outputs.loss
    """
    after = """
        from transformers import Trainer

        class MyTrainer(Trainer):
            def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
                outputs = model(**inputs)
                return (outputs.loss, outputs) if return_outputs else outputs.loss
    """
    caveats = """
        Only classes deriving directly from a Trainer-family class known through the imports. An
        override with `*args`/`**kwargs` already takes them and is left alone. The override does
        not use `num_items_in_batch`: with gradient accumulation the Trainer's own loss scales by
        it, a custom loss keeps its old per-batch mean.
    """

    def handlers(self):
        return {cst.FunctionDef: self._on_def}

    def _on_def(self, node: cst.FunctionDef, ctx: PythonContext) -> None:
        stack = ctx.stack
        if len(stack) < 3 or not isinstance(stack[-2], cst.ClassDef) and not (
                isinstance(stack[-2], cst.IndentedBlock) and isinstance(stack[-3], cst.ClassDef)):
            return
        cls = stack[-3] if isinstance(stack[-2], cst.IndentedBlock) else stack[-2]
        change = data().method_change(f"{TRAINER}.{node.name.value}")
        if change is None or node.name.value.startswith("__"):
            return
        params = node.params
        if params.star_kwarg is not None or isinstance(params.star_arg, cst.Param):
            return
        if trainer_base(ctx, cls) is None or ctx.is_ignored(node):
            return
        have = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
        add = [(name, default) for name, kind, default in change.get("added", ())
               if name not in have and kind in ADDABLE and default != "<required>"]
        if not add:
            return
        new_params = [cst.Param(name=cst.Name(n), default=cst.parse_expression(_code(d)),
                                equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                      whitespace_after=cst.SimpleWhitespace("")))
                      for n, d in add]

        def edit(updated: cst.FunctionDef) -> cst.FunctionDef:
            p = updated.params
            if p.kwonly_params:
                return updated.with_changes(params=p.with_changes(kwonly_params=[*p.kwonly_params, *new_params]))
            listed = list(p.params)
            if listed and listed[-1].comma is not cst.MaybeSentinel.DEFAULT and not isinstance(
                    listed[-1].comma.whitespace_after, cst.ParenthesizedWhitespace):
                listed[-1] = listed[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(params=p.with_changes(params=[*listed, *new_params]))

        ctx.replace(node, edit)
        ctx.finding(node, f"{node.name.value}: added {', '.join(f'{n}={_code(d)}' for n, d in add)} "
                          f"(the transformers {data().target_versions.get('transformers')} Trainer passes it)")


RULES = (TrainerOverrides,)
