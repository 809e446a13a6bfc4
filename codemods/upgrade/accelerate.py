"""Accelerate 0.x -> 1.15: ``Accelerator(fp16=...)`` (NM604)."""

from __future__ import annotations

import libcst as cst

from codemods.common.arg_plan import NOT_LITERAL, ArgPlan, keywords, literal, quote_of, rewrite_call
from codemods.upgrade.base import target_of
from migrator.rules import PythonContext, PythonRule
from migrator.selfcheck.targetapi import api


class AcceleratorFp16(PythonRule):
    id = "NM604"
    title = "accelerate.Accelerator(fp16=...) -> mixed_precision=\"fp16\""
    fix = "mixed"
    triggers = ("Accelerator(",)
    why = """
        Accelerate 0.x took `fp16=True` (deprecated since 0.11); 1.x has only
        `mixed_precision=`, so `Accelerator(fp16=True)` raises a TypeError. `fp16=True` was
        `mixed_precision="fp16"`; `fp16=False` did nothing.
    """
    before = """
        from accelerate import Accelerator

        accelerator = Accelerator(fp16=True)
    """
    after = """
        from accelerate import Accelerator

        accelerator = Accelerator(mixed_precision="fp16")
    """
    caveats = """
        A value that is not a literal becomes `mixed_precision="fp16" if <value> else None`. When
        `mixed_precision=` is passed too, `fp16=` is dropped with a marker. On Neuron, bf16 is the
        native half precision: consider `mixed_precision="bf16"`.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        kw = keywords(node)
        if "fp16" not in kw:
            return
        target = target_of(ctx, node.func)
        if target is None or api().accepts(target, "fp16") is not False or api().accepts(target, "mixed_precision") is not True:
            return
        plan = ArgPlan()
        plan.drop.add("fp16")
        value = literal(kw["fp16"].value)
        q = quote_of(node)
        if "mixed_precision" in kw:
            ctx.marker(node, "both fp16= and mixed_precision= were passed: fp16= was dropped (fp16=True used to win)")
        elif value is NOT_LITERAL:
            plan.drop.discard("fp16")
            plan.rename["fp16"] = "mixed_precision"
            plan.revalue["fp16"] = lambda v: cst.IfExp(
                test=v, body=cst.SimpleString(f"{q}fp16{q}"), orelse=cst.Name("None"))
            ctx.finding(kw["fp16"], "fp16=<value> -> mixed_precision=\"fp16\" if <value> else None (accelerate 1.x)")
        elif value:
            plan.drop.discard("fp16")
            plan.rename["fp16"] = "mixed_precision"
            plan.revalue["fp16"] = lambda v: cst.SimpleString(f"{q}fp16{q}")
            ctx.finding(kw["fp16"], "fp16=True -> mixed_precision=\"fp16\" (accelerate 1.x)")
        else:
            ctx.finding(kw["fp16"], f"fp16={value} dropped (it did nothing; gone in accelerate 1.x)")
        rewrite_call(ctx, node, plan)


RULES = (AcceleratorFp16,)
