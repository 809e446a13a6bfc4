"""Accelerate 0.x -> 1.15: ``Accelerator(fp16=...)`` (NM604); ``save_pretrained(save_function=accelerator.save)``,
the Accelerate idiom Transformers 5 no longer honours (NM622)."""

from __future__ import annotations

import re

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


SAVE_FUNCTION_MARKER = "Pass is_main_process= instead of save_function=: Transformers 5 ignores save_function."


class SaveFunction(PythonRule):
    id = "NM622"
    title = "save_pretrained(save_function=accelerator.save) (ignored in v5) -> is_main_process=accelerator.is_main_process"
    fix = "mixed"
    triggers = ("save_function=",)
    markers = ((SAVE_FUNCTION_MARKER, """Transformers 5's save_pretrained has no save_function parameter: the keyword
        falls into **kwargs, which only a push to the Hub reads, so it is silently ignored and every process
        writes the checkpoint. is_main_process= says which process writes it."""),)
    why = """
        The Accelerate examples saved with `model.save_pretrained(out, save_function=accelerator.save)`,
        which wrote the checkpoint from the main process only. Transformers 5's `save_pretrained`
        has no `save_function` parameter: the keyword lands in `**kwargs` and is ignored, so every
        process writes the same files. `is_main_process=accelerator.is_main_process` is the
        Accelerate idiom for the same thing (its documentation's `save_pretrained` example).
    """
    before = """
        accelerator = Accelerator()
        unwrapped_model.save_pretrained(output_dir, save_function=accelerator.save)
    """
    after = """
        accelerator = Accelerator()
        unwrapped_model.save_pretrained(output_dir, is_main_process=accelerator.is_main_process)
    """
    caveats = """
        Rewritten where the value is `<name>.save` of a name the module assigns an
        `Accelerator(...)`, and the call passes no `is_main_process=` itself; another
        save_function gets a marker.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value == "save_pretrained"):
            return
        kw = keywords(node)
        if "save_function" not in kw:
            return
        value = kw["save_function"].value
        owner = value.value.value if (isinstance(value, cst.Attribute) and value.attr.value == "save"
                                      and isinstance(value.value, cst.Name)) else None
        if owner is None or "is_main_process" in kw or not re.search(
                rf"^\s*{re.escape(owner)}\s*=\s*(?:accelerate\.)?Accelerator\(", ctx.source, re.M):
            ctx.marker(node, SAVE_FUNCTION_MARKER)
            return
        plan = ArgPlan()
        plan.rename["save_function"] = "is_main_process"
        plan.revalue["save_function"] = lambda v: cst.Attribute(value=v.value, attr=cst.Name("is_main_process"))
        ctx.finding(kw["save_function"], f"save_function={owner}.save -> is_main_process={owner}.is_main_process "
                                         "(Transformers 5 ignores save_function)")
        rewrite_call(ctx, node, plan)


RULES = (AcceleratorFp16, SaveFunction)
