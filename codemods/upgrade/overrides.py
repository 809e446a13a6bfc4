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
from migrator.scopes import named_params

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


#: the Trainer's class attribute (5.19+) that says whether compute_loss's loss is already scaled for gradient
#: accumulation; None (the default) counts it scaled when the model accepts loss kwargs and num_items_in_batch
#: is passed, which an override written before num_items_in_batch never used
SCALING_FLAG = "loss_is_scaled_for_ga"
SCALING_COMMENT = ("# this compute_loss does not use num_items_in_batch: the Trainer divides its loss by the "
                   "gradient accumulation steps")
#: bases whose own loss_is_scaled_for_ga is None (the Trainer's): a custom loss there was divided by the old Trainer
SCALING_BASES = ("transformers.Trainer", "transformers.Seq2SeqTrainer", "trl.SFTTrainer")


def _defines(cls: cst.ClassDef, name: str) -> bool:
    """Whether the class body assigns ``name`` itself."""
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else (
                    [small.target] if isinstance(small, cst.AnnAssign) else [])
                if any(isinstance(t, cst.Name) and t.value == name for t in targets):
                    return True
    return False


def _reads(fn: cst.FunctionDef, name: str) -> bool:
    """Whether the body of ``fn`` reads the name ``name`` (nested functions included)."""
    found = []

    class V(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                found.append(node)

    fn.body.visit(V())
    return bool(found)


def _with_flag(fn: cst.FunctionDef) -> cst.FlattenSentinel:
    """``loss_is_scaled_for_ga = False`` (with its comment) above the method ``fn``."""
    if any(line.comment is not None and line.comment.value == SCALING_COMMENT for line in fn.leading_lines):
        return cst.FlattenSentinel([fn])
    flag = cst.parse_statement(f"{SCALING_FLAG} = False\n").with_changes(
        leading_lines=[*fn.leading_lines, cst.EmptyLine(comment=cst.Comment(SCALING_COMMENT))])
    return cst.FlattenSentinel([flag, fn.with_changes(leading_lines=[cst.EmptyLine(indent=False)])])


def _keeps_old_scaling(ctx: PythonContext, cls: cst.ClassDef) -> bool:
    """An override of compute_loss written without num_items_in_batch returned a loss the old Trainer divided by
    the gradient accumulation steps; the 5.23 Trainer does not when the model accepts loss kwargs (most do) and
    loss_is_scaled_for_ga is None: the class gets loss_is_scaled_for_ga = False, unless it sets it already or
    derives from a trainer that decides it otherwise (a marker then)."""
    return trainer_base(ctx, cls) in SCALING_BASES and not _defines(cls, SCALING_FLAG)


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
        the body is unchanged, so the override computes what it did. An override of
        `compute_loss` that gets `num_items_in_batch` this way would not be divided by the
        gradient accumulation steps any more (the 5.23 Trainer takes a loss as already scaled
        when the model accepts loss kwargs and `num_items_in_batch` is passed): the class gets
        `loss_is_scaled_for_ga = False`, which keeps the old division.
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
            # this compute_loss does not use num_items_in_batch: the Trainer divides its loss by the gradient accumulation steps
            loss_is_scaled_for_ga = False

            def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
                outputs = model(**inputs)
                return (outputs.loss, outputs) if return_outputs else outputs.loss
    """
    caveats = """
        Only classes deriving directly from a Trainer-family class known through the imports. An
        override with `*args`/`**kwargs` already takes them and is left alone. The override does
        not use `num_items_in_batch`: with gradient accumulation the Trainer's own loss scales by
        it, a custom loss keeps its old per-batch mean, divided by the accumulation steps as before
        (`loss_is_scaled_for_ga = False`, for subclasses of Trainer, Seq2SeqTrainer and SFTTrainer;
        a subclass of another TRL trainer, which sets the flag itself, gets a marker; a class that
        sets it already is left as it is).
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
            if node.name.value == "compute_loss" and isinstance(params.star_kwarg, cst.Param) \
                    and not _reads(node, params.star_kwarg.name.value) and _keeps_old_scaling(ctx, cls) \
                    and not ctx.is_ignored(node):
                # `**kwargs` swallows num_items_in_batch unread: a loss of its own, that the old Trainer divided
                ctx.replace(node, _with_flag)
                ctx.finding(node, f"{cls.name.value}.{SCALING_FLAG} = False: the Trainer divides the loss of this "
                                  "compute_loss by the gradient accumulation steps, as the old Trainer did")
            return
        if trainer_base(ctx, cls) is None or ctx.is_ignored(node):
            return
        have = {p.name.value for p in named_params(node)}
        add = [(name, default) for name, kind, default in change.get("added", ())
               if name not in have and kind in ADDABLE and default != "<required>"]
        if not add:
            return
        new_params = [cst.Param(name=cst.Name(n), default=cst.parse_expression(_code(d)),
                                equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                      whitespace_after=cst.SimpleWhitespace("")))
                      for n, d in add]

        scaled = node.name.value == "compute_loss" and any(n == "num_items_in_batch" for n, _d in add)
        keep_scaling = scaled and _keeps_old_scaling(ctx, cls)

        def edit(updated: cst.FunctionDef) -> cst.FunctionDef | cst.FlattenSentinel:
            p = updated.params
            if p.kwonly_params:
                done = updated.with_changes(params=p.with_changes(kwonly_params=[*p.kwonly_params, *new_params]))
            else:
                listed = list(p.params)
                if listed and listed[-1].comma is not cst.MaybeSentinel.DEFAULT and not isinstance(
                        listed[-1].comma.whitespace_after, cst.ParenthesizedWhitespace):
                    listed[-1] = listed[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                done = updated.with_changes(params=p.with_changes(params=[*listed, *new_params]))
            return _with_flag(done) if keep_scaling else done

        ctx.replace(node, edit)
        ctx.finding(node, f"{node.name.value}: added {', '.join(f'{n}={_code(d)}' for n, d in add)} "
                          f"(the transformers {data().target_versions.get('transformers')} Trainer passes it)")
        if keep_scaling:
            ctx.finding(node, f"{cls.name.value}.{SCALING_FLAG} = False: the Trainer divides the loss of this "
                              "compute_loss by the gradient accumulation steps, as the old Trainer did")
        elif scaled and not _defines(cls, SCALING_FLAG):
            ctx.marker(node, f"set {SCALING_FLAG} = False on this class if compute_loss returns a per-batch mean (the "
                             "old Trainer divided it by gradient_accumulation_steps)")


RULES = (TrainerOverrides,)
