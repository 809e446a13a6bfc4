"""Transformers 4.x -> 5.23 (and TRL 0.x -> 1.16) upgrades of calls and imports that an old-stack
project makes and that the pinned versions reject:

* NM601 ``transformers.AdamW`` (removed) -> ``torch.optim.AdamW``, with the old defaults pinned;
* NM602 training arguments: ``evaluation_strategy=`` -> ``eval_strategy=``, ``overwrite_output_dir=`` dropped;
* NM603 trainer calls: ``tokenizer=`` -> ``processing_class=``;
* NM605 ``from_pretrained``/``pipeline``: ``use_auth_token=`` -> ``token=``;
* NM606 ``send_example_telemetry`` (removed): the import and its calls go;
* NM607 ``from_pretrained``/``pipeline``: ``torch_dtype=`` -> ``dtype=`` (deprecated in v5).

Which call gets which edit is read from the installed target libraries (``targetapi``): a keyword
is renamed only where the target rejects the old one and accepts the new one.
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.common.arg_plan import (
    NOT_LITERAL,
    ArgPlan,
    has_star_kwargs,
    keywords,
    literal,
    rewrite_call,
    tokenizer_to_processing_class,
)
from codemods.common.statements import expression_statement, remove_small_statement
from codemods.project.dependency_policy import MIGRATES_TO_TARGET, migrates_to_target
from codemods.upgrade.base import owned_elsewhere, rename_keyword, renamed_keyword, target_of
from codemods.upgrade.overrides import trainer_base
from migrator.model import fitted
from migrator.rules import NameClash, PythonContext, PythonRule
from migrator.scopes import named_params
from migrator.selfcheck.targetapi import api

ADAMW_SOURCES = ("transformers.AdamW", "transformers.optimization.AdamW")
ADAMW_TARGET = "torch.optim.AdamW"
#: transformers.AdamW's defaults where torch.optim.AdamW's differ: (keyword, positional index, value)
ADAMW_PINNED = (("eps", 3, "1e-6"), ("weight_decay", 4, "0.0"))
ADAMW_VALUE_MARKER = "Pass eps=1e-6, weight_decay=0.0 where this AdamW is called to keep transformers' old defaults."
ADAMW_ARGS_MARKER = "Check this AdamW call's arguments: torch.optim.AdamW has other defaults and positional order."
ADAMW_MARKERS = (
    (ADAMW_VALUE_MARKER,
     """transformers' AdamW (removed in v5) defaulted to eps=1e-6, weight_decay=0.0; torch.optim.AdamW
     defaults to eps=1e-8, weight_decay=0.01. Where the class is passed as a value (an optimizer factory),
     the call that builds it must pass the old values to keep the training the same."""),
    (ADAMW_ARGS_MARKER,
     """transformers' AdamW defaulted to eps=1e-6, weight_decay=0.0 (torch's: 1e-8, 0.01), and its 6th
     positional argument was correct_bias where torch's is amsgrad; with **kwargs or many positional
     arguments the rule cannot pin the old defaults itself."""),
    ("Check the training without correct_bias=False: torch.optim.AdamW always corrects the bias.",
     """transformers' AdamW could skip the bias correction (correct_bias=False, as the original BERT
     optimizer did); torch.optim.AdamW has no such option."""),
)


class AdamWToTorch(PythonRule):
    id = "NM601"
    markers = ADAMW_MARKERS
    title = "transformers.AdamW (removed in v5) -> torch.optim.AdamW, with transformers' defaults pinned"
    fix = "mixed"
    # the ways `AdamW` is imported from transformers (not a bare "AdamW": every torch.optim user has it)
    triggers = ("import AdamW", "AdamW,", ", AdamW", "(AdamW", "transformers.AdamW", "optimization.AdamW", "adamw_hf")
    why = """
        transformers' own AdamW was deprecated in 4.x and is gone in v5: `from transformers import
        AdamW` fails at import. torch.optim.AdamW is the same algorithm, but its defaults differ
        (eps=1e-8 and weight_decay=0.01 where transformers had eps=1e-6 and weight_decay=0.0), so a
        call that relied on them gets them written out: the optimizer behaves as before.
    """
    before = """
        from transformers import AdamW, get_linear_schedule_with_warmup

        optimizer = AdamW(model.parameters(), lr=5e-5)
    """
    after = """
        from torch.optim import AdamW
        from transformers import get_linear_schedule_with_warmup

        optimizer = AdamW(model.parameters(), lr=5e-5, eps=1e-6, weight_decay=0.0)
    """
    caveats = """
        The local name is kept (`from torch.optim import AdamW`). `correct_bias=True` is dropped
        (torch always corrects the bias); `correct_bias=False` has no torch equivalent: it is
        dropped with a marker. Defaults are pinned on direct calls and in
        `functools.partial(AdamW, ...)` and in the dict literal of a trainer's
        `optimizer_cls_and_kwargs=(AdamW, {...})`; a call with `**kwargs`, or AdamW passed around as a value
        (`optimizer_cls=AdamW`, `opt = AdamW`, a base class) gets a marker naming the defaults that
        changed (the call that builds the optimizer is not in sight). Type checks
        (`isinstance(opt, AdamW)`) are left alone. The Trainer's name for the class,
        `optim="adamw_hf"` in a TrainingArguments-like call, becomes `"adamw_torch"` (the Trainer
        gives both the same eps and weight_decay); `--optim adamw_hf` on a command line is not rewritten.
    """

    def handlers(self):
        return {cst.Call: self._on_call, cst.Attribute: self._on_attribute, cst.Name: self._on_name}

    def _on_name(self, node: cst.Name, ctx: PythonContext) -> None:
        if isinstance(ctx.parent, cst.Attribute) or ctx.qualname(node) not in ADAMW_SOURCES:
            return
        self._as_value(node, ctx)

    def _as_value(self, node: cst.BaseExpression, ctx: PythonContext) -> None:
        """``AdamW`` used as a value, not called here: ``functools.partial(AdamW, ...)`` gets the old defaults in
        the partial; elsewhere (``optimizer_cls=AdamW``, ``opt = AdamW``) the call that builds the optimizer is
        not in sight: a marker says which defaults changed."""
        parent = ctx.parent
        if isinstance(parent, (cst.ImportAlias, cst.ImportFrom, cst.Import, cst.AsName, cst.AssignTarget, cst.Param,
                               cst.FunctionDef, cst.ClassDef)) or (isinstance(parent, cst.Arg) and parent.keyword is node):
            return
        if isinstance(parent, cst.Call) and parent.func is node:
            return  # a call: _on_call
        stack = ctx.stack
        call = stack[-3] if len(stack) >= 3 and isinstance(parent, cst.Arg) else None
        if isinstance(call, cst.Call):
            callee = ctx.qualname(call.func)
            if callee in ("builtins.isinstance", "builtins.issubclass") or (
                    isinstance(call.func, cst.Name) and call.func.value in ("isinstance", "issubclass")):
                return  # a type check: torch's AdamW is the class now, nothing to pin
            if callee == "functools.partial" and call.args and call.args[0] is parent:
                self._partial(call, ctx)
                return
        if self._class_and_kwargs(node, ctx):
            return
        ctx.marker(node, ADAMW_VALUE_MARKER)

    def _class_and_kwargs(self, node: cst.BaseExpression, ctx: PythonContext) -> bool:
        """``optimizer_cls_and_kwargs=(AdamW, {...})`` of a trainer: the Trainer calls ``AdamW(params, **kwargs)``,
        so the old defaults go into the dict literal (keys it has already are kept)."""
        stack = ctx.stack
        if len(stack) < 4 or not isinstance(stack[-2], cst.Element) or not isinstance(stack[-3], cst.Tuple):
            return False
        pair, arg = stack[-3], stack[-4]
        if not (isinstance(arg, cst.Arg) and arg.keyword is not None and arg.keyword.value == "optimizer_cls_and_kwargs"
                and len(pair.elements) == 2 and pair.elements[0].value is node
                and isinstance(pair.elements[1].value, cst.Dict)):
            return False
        kwargs = pair.elements[1].value
        if not all(isinstance(e, cst.DictElement) and isinstance(literal(e.key), str) for e in kwargs.elements):
            return False
        have = {literal(e.key) for e in kwargs.elements}
        add = [(name, value) for name, _index, value in ADAMW_PINNED if name not in have]
        if not add:
            return True
        keys = [e.key for e in kwargs.elements if isinstance(e.key, cst.SimpleString)]
        quote = "'" if keys and keys[0].quote.startswith("'") else '"'

        def edit(updated: cst.Dict) -> cst.Dict:
            elements = list(updated.elements)
            if elements and elements[-1].comma is cst.MaybeSentinel.DEFAULT:
                elements[-1] = elements[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            new = [cst.DictElement(cst.SimpleString(f"{quote}{name}{quote}"), cst.parse_expression(value),
                                   comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if i < len(add) - 1
                                   else cst.MaybeSentinel.DEFAULT) for i, (name, value) in enumerate(add)]
            return updated.with_changes(elements=[*elements, *new])

        ctx.replace(kwargs, edit)
        ctx.finding(kwargs, f"optimizer_cls_and_kwargs: transformers' AdamW defaults pinned "
                            f"({', '.join(f'{n}={v}' for n, v in add)})")
        return True

    def _partial(self, call: cst.Call, ctx: PythonContext) -> None:
        """``functools.partial(AdamW, params?, lr=...)``: the old defaults go into the partial (a later call can
        still override them, as it could the old defaults)."""
        if has_star_kwargs(call) or any(a.star == "*" for a in call.args):
            ctx.marker(call, ADAMW_VALUE_MARKER)
            return
        kw = keywords(call)
        positional = sum(1 for a in call.args if a.keyword is None and not a.star) - 1  # AdamW itself
        plan = ArgPlan()
        pinned = []
        for name, index, value in ADAMW_PINNED:
            if name not in kw and positional <= index:
                plan.add.append((name, lambda value=value: cst.parse_expression(value)))
                pinned.append(f"{name}={value}")
        if pinned:
            rewrite_call(ctx, call, plan)
            ctx.finding(call, f"functools.partial(torch.optim.AdamW, ...): transformers' defaults pinned "
                              f"({', '.join(pinned)})")

    def finish(self, ctx: PythonContext) -> None:
        for b in ctx.imports.all_bindings():
            if b.is_from and b.alias is not None and b.qualified in ADAMW_SOURCES and not ctx.is_ignored(b.line):
                ctx.remove_import(b)
                ctx.add_import("torch.optim", "AdamW", b.local if b.local != "AdamW" else None, anchor=b)
                ctx.finding(b.alias, f"{b.qualified} -> {ADAMW_TARGET}")

    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        if isinstance(ctx.parent, (cst.ImportFrom, cst.Import)) or ctx.qualname(node) not in ADAMW_SOURCES:
            return
        self._as_value(node, ctx)
        anchor = ctx.imports.binding_of(node)
        try:
            ctx.replace(node, ctx.name_for(ADAMW_TARGET, anchor=anchor, style="module"))
        except NameClash as exc:
            ctx.marker(node, f"use {ADAMW_TARGET} here by hand ({exc})")
            return
        ctx.finding(node, f"{ctx.qualname(node)} -> {ADAMW_TARGET}")

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        if ctx.qualname(node.func) not in ADAMW_SOURCES:
            self._optim_name(node, ctx)
            return
        kw = keywords(node)
        positional = sum(1 for a in node.args if a.keyword is None and not a.star)
        if has_star_kwargs(node) or any(a.star == "*" for a in node.args) or positional > 5:
            ctx.marker(node, ADAMW_ARGS_MARKER)
            return
        plan = ArgPlan()
        pinned = []
        for name, index, value in ADAMW_PINNED:
            if name not in kw and positional <= index:
                plan.add.append((name, lambda value=value: cst.parse_expression(value)))
                pinned.append(f"{name}={value}")
        if pinned:
            ctx.finding(node, f"torch.optim.AdamW: transformers' defaults pinned ({', '.join(pinned)})")
        if "no_deprecation_warning" in kw:
            plan.drop.add("no_deprecation_warning")
        if "correct_bias" in kw:
            plan.drop.add("correct_bias")
            if literal(kw["correct_bias"].value) is True:
                ctx.finding(kw["correct_bias"], "correct_bias=True dropped: torch.optim.AdamW always corrects the bias")
            else:
                ctx.marker(node, "Check the training without correct_bias=False: torch.optim.AdamW always corrects the bias.")
        rewrite_call(ctx, node, plan)


    def _optim_name(self, node: cst.Call, ctx: PythonContext) -> None:
        """``TrainingArguments(optim="adamw_hf")``: the Trainer's name for the removed class (v5 rejects it with
        a ValueError) -> "adamw_torch"; the Trainer passes both the same eps/weight_decay (adam_epsilon,
        weight_decay), so only the class changes."""
        arg = keywords(node).get("optim")
        if arg is None or literal(arg.value) != "adamw_hf":
            return
        target = target_of(ctx, node.func)
        if target is None or api().accepts(target, "optim") is not True:
            return
        old = arg.value
        assert isinstance(old, cst.SimpleString)
        ctx.replace(old, cst.SimpleString(old.prefix + old.quote + "adamw_torch" + old.quote))
        ctx.finding(arg, 'optim="adamw_hf" -> "adamw_torch" (transformers\' own AdamW is gone in v5)')


#: the names that build a Transformers/TRL arguments object in a script
_ARGUMENT_SOURCES = ("TrainingArguments", "HfArgumentParser", "TrlParser", "SFTConfig", "parse_args_into_dataclasses")
#: a read of a field removed in transformers v5 -> its marker
READ_MARKERS = {
    "overwrite_output_dir": "Remove this read of overwrite_output_dir: Transformers 5's TrainingArguments has no such field.",
    "evaluation_strategy": "Read eval_strategy here: Transformers 5's TrainingArguments has no evaluation_strategy.",
}


class TrainingArgumentsFields(PythonRule):
    id = "NM602"
    title = "TrainingArguments / TRL configs: evaluation_strategy= -> eval_strategy=, overwrite_output_dir= dropped"
    fix = "mixed"
    triggers = ("evaluation_strategy", "overwrite_output_dir")
    why = """
        Transformers v5 removed two TrainingArguments fields old scripts pass: `evaluation_strategy`
        (renamed `eval_strategy` in 4.41) and `overwrite_output_dir`. Both make the dataclass
        raise a TypeError. The rename applies to every class that inherits the fields
        (Seq2SeqTrainingArguments, TRL's SFTConfig/DPOConfig/...), also where a Neuron rule
        renamed the class (NeuronTrainingArguments).
    """
    before = """
        from transformers import TrainingArguments

        args = TrainingArguments(output_dir="out", evaluation_strategy="epoch", overwrite_output_dir=True)
    """
    after = """
        from transformers import TrainingArguments

        args = TrainingArguments(output_dir="out", eval_strategy="epoch")
    """
    caveats = """
        The Trainer itself never read `overwrite_output_dir`: only scripts did (the example
        scripts' `get_last_checkpoint` logic), and 5.23 writes its checkpoints into `output_dir`
        whether it exists or not. A script that reads `args.overwrite_output_dir` (or
        `args.evaluation_strategy`) gets a marker there (the attribute is gone), unless it declares a
        field or option of that name itself. A value that is not a literal gets a marker. The
        command-line flags (`--evaluation_strategy` parsed by HfArgumentParser) are not rewritten.
    """

    def handlers(self):
        return {cst.Call: self._on_call, cst.Attribute: self._on_attribute}

    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        """A read of a removed field (``training_args.overwrite_output_dir``) on the arguments a
        Transformers parser or constructor made: an AttributeError in 5.23, so a marker. The script's own
        field or option of that name (a dataclass field, an ``add_argument``) is its own business."""
        name = node.attr.value
        if name not in READ_MARKERS:
            return
        parent = ctx.parent
        if isinstance(parent, (cst.AssignTarget, cst.AugAssign)) or (
                isinstance(parent, cst.Attribute) and parent.value is not node):
            return
        code = ctx.code
        if not any(h in code for h in _ARGUMENT_SOURCES):
            return
        if re.search(rf"^\s*{name}\s*:|[\"']--{name}[\"']|\b{name}\s*=\s*field\(", code, re.M):
            return  # the script declares the field or option itself
        ctx.marker(node, READ_MARKERS[name])

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        kw = keywords(node)
        if "evaluation_strategy" not in kw and "overwrite_output_dir" not in kw:
            return
        target = target_of(ctx, node.func)
        if target is None or api().accepts(target, "eval_strategy") is not True:
            return
        plan = ArgPlan()
        if "evaluation_strategy" in kw and renamed_keyword(target, "evaluation_strategy", "eval_strategy"):
            if "eval_strategy" in kw and owned_elsewhere(ctx, node.func, self.id):
                ctx.marker(node, "both evaluation_strategy= and eval_strategy= are passed: remove evaluation_strategy=")
            elif "eval_strategy" in kw:
                plan.drop.add("evaluation_strategy")
                ctx.marker(node, "both evaluation_strategy= and eval_strategy= were passed: evaluation_strategy= "
                                 "was dropped")
            else:
                rename_keyword(ctx, kw["evaluation_strategy"], "eval_strategy")
                ctx.finding(kw["evaluation_strategy"], "evaluation_strategy= -> eval_strategy= (transformers v5)")
        # an optimum-neuron class drops it in its own rule (NM201's plumbing fields): one owner
        owned = owned_elsewhere(ctx, node.func, self.id)
        if "overwrite_output_dir" in kw and not owned and api().accepts(target, "overwrite_output_dir") is False:
            plan.drop.add("overwrite_output_dir")
            value = literal(kw["overwrite_output_dir"].value)
            if value is NOT_LITERAL:
                ctx.marker(node, "Where args.overwrite_output_dir was read, decide whether to resume from "
                                 "get_last_checkpoint(output_dir).",
                           detail="overwrite_output_dir= is gone in transformers v5 and was dropped here; the "
                                  "Trainer never read it, scripts did")
            else:
                ctx.finding(kw["overwrite_output_dir"], (
                    f"overwrite_output_dir={value} dropped (gone in transformers v5; the Trainer never read it and "
                    "writes its checkpoints into output_dir whether it exists or not)"))
        rewrite_call(ctx, node, plan)


#: the marker on `SomeTrainer(..., tokenizer=...)` whose class the module does not show (imported from the project)
UNSEEN_TRAINER_MARKER = "Pass processing_class= for tokenizer= if {name} is a Transformers/TRL trainer: v5 rejects tokenizer=."


class TrainerProcessingClass(PythonRule):
    id = "NM603"
    markers = ((UNSEEN_TRAINER_MARKER, """A class named like a trainer is given tokenizer=, and the module does not
        show what it derives from (it is imported from the project, or assigned from a variable): if it is a
        Transformers or TRL trainer, its __init__ in Transformers 5 / TRL 1.x takes processing_class= and raises a
        TypeError on tokenizer=; if it is a class of its own that takes tokenizer, nothing is to be done."""),)
    title = "Trainer / Seq2SeqTrainer / TRL trainers: tokenizer= -> processing_class="
    fix = "mixed"
    triggers = ("Trainer(",)
    why = """
        Transformers v5 and TRL 1.x take the tokenizer (or processor) of a trainer as
        `processing_class=`; `tokenizer=` was deprecated in 4.46 and now raises a TypeError.
        Every trainer class whose installed signature has `processing_class` and no `tokenizer`
        gets the rename (the optimum-neuron trainers are NM202's).
    """
    before = """
        from transformers import Trainer

        trainer = Trainer(model=model, args=args, train_dataset=ds, tokenizer=tokenizer)
    """
    after = """
        from transformers import Trainer

        trainer = Trainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer)
    """
    caveats = """
        A subclass of a trainer defined in the same module is renamed too when its `__init__`
        (if any) forwards `**kwargs` and names no `tokenizer` itself; subclasses imported from
        elsewhere and a `tokenizer=` inside a `**kwargs` dict are not rewritten. When both
        keywords are passed, `tokenizer=` is dropped with a marker.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        if not any(a.keyword is not None and a.keyword.value == "tokenizer" for a in node.args):
            return
        if owned_elsewhere(ctx, node.func, self.id):
            return  # an optimum-neuron trainer: its rule renames the keyword (one place)
        target = target_of(ctx, node.func)
        if target is None and isinstance(node.func, cst.Name):
            target = forwarding_subclass(ctx, node.func.value)
        if target is None:
            name = node.func.value if isinstance(node.func, cst.Name) else \
                node.func.attr.value if isinstance(node.func, cst.Attribute) else None
            if name is not None and name.endswith("Trainer") and not _defined_here(ctx, name) \
                    and re.search(r"\b(?:transformers|trl|optimum\.neuron)\b", ctx.source):
                ctx.marker(node, fitted(UNSEEN_TRAINER_MARKER.format(name=name),
                                        UNSEEN_TRAINER_MARKER.format(name="this class")))
            return
        if not renamed_keyword(target, "tokenizer", "processing_class"):
            return
        plan = ArgPlan()
        tokenizer_to_processing_class(node, ctx, plan, target.rsplit(".", 1)[-1])
        rewrite_call(ctx, node, plan)


def _defined_here(ctx: PythonContext, name: str) -> bool:
    """A class of this name is defined in the module (what it derives from is then seen, or it is no trainer)."""
    return any(isinstance(stmt, cst.ClassDef) and stmt.name.value == name for stmt in ctx.module.body)


def forwarding_subclass(ctx: PythonContext, name: str) -> str | None:
    """The trainer a class ``name`` of this module derives from, when its ``__init__`` (if any)
    passes every keyword it does not name on (``**kwargs``) and names no ``tokenizer`` itself."""
    for stmt in ctx.module.body:
        if not (isinstance(stmt, cst.ClassDef) and stmt.name.value == name):
            continue
        base = trainer_base(ctx, stmt)
        if base is None:
            return None
        body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else ()
        for item in body:
            if isinstance(item, cst.FunctionDef) and item.name.value == "__init__":
                p = item.params
                named = {x.name.value for x in named_params(item)}
                if p.star_kwarg is None or "tokenizer" in named or "processing_class" in named:
                    return None
        return base
    return None


class UseAuthToken(PythonRule):
    id = "NM605"
    title = "from_pretrained / pipeline: use_auth_token= -> token="
    fix = "mixed"
    triggers = ("use_auth_token",)
    why = """
        `use_auth_token=` was deprecated in transformers 4.34 / diffusers 0.2x for `token=` and is
        gone: models reject it, tokenizers and configs swallow it and download without the token
        (a gated or private repository then fails to load).
    """
    before = """
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_id, use_auth_token=hf_token)
    """
    after = """
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_id, token=hf_token)
    """
    caveats = """
        Only calls of transformers, diffusers and peft callables that accept `token=` (through the
        module's imports; a class held in a variable is not followed). When both are passed,
        `use_auth_token=` is dropped with a marker.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        kw = keywords(node)
        if "use_auth_token" not in kw:
            return
        target = target_of(ctx, node.func)
        if target is None or target.split(".", 1)[0] not in ("transformers", "diffusers", "peft"):
            return
        if api().accepts(target, "token") is not True:
            return
        if "token" not in kw:
            rename_keyword(ctx, kw["use_auth_token"], "token")
            ctx.finding(kw["use_auth_token"], "use_auth_token= -> token=")
        elif owned_elsewhere(ctx, node.func, self.id):
            ctx.marker(node, "both use_auth_token= and token= are passed: remove use_auth_token=")
        else:
            rewrite_call(ctx, node, ArgPlan(drop={"use_auth_token"}))
            ctx.marker(node, "both use_auth_token= and token= were passed: use_auth_token= was dropped")


class TorchDtype(PythonRule):
    id = "NM607"
    title = "Transformers from_pretrained / pipeline: torch_dtype= -> dtype="
    fix = "mixed"
    triggers = ("torch_dtype",)
    #: only in a run moved to Transformers 5.23: `dtype=` fails before 4.56, which a project that keeps its
    #: pins (no old-stack code) may still install
    project_probes = MIGRATES_TO_TARGET
    why = """
        Transformers v5 named the loading dtype `dtype=`; `torch_dtype=` still works in 5.23 but
        logs a deprecation warning on every load and is due to go. Diffusers keeps `torch_dtype`
        (its documented name in 0.42): its calls are left alone.
    """
    before = """
        import torch
        import torch_xla.core.xla_model as xm
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_id, torch_dtype=torch.bfloat16).to(xm.xla_device())
    """
    after = """
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_id, dtype=torch.bfloat16).to(torch.device("neuron"))
    """
    caveats = """
        Only transformers callables whose installed signature names `dtype` (model
        `from_pretrained`, `pipeline`), in a run that migrates old-stack code (its Transformers pin
        goes to 5.23; `dtype=` fails before 4.56, which a project keeping its pins may install); a
        class held in a variable is not followed. When both are
        passed, `torch_dtype=` is dropped with a marker (5.23 let `torch_dtype` win over the
        default `dtype="auto"` only).
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        kw = keywords(node)
        if "torch_dtype" not in kw or not migrates_to_target(ctx):
            return
        target = target_of(ctx, node.func)
        if target is None or not target.startswith("transformers."):
            return
        sig = api().signature(target)
        if sig is None or ("dtype" not in sig.params and "dtype" not in sig.extra):
            return
        if "dtype" in kw and owned_elsewhere(ctx, node.func, self.id):
            ctx.marker(node, "both torch_dtype= and dtype= are passed: remove torch_dtype=")
        elif "dtype" in kw:
            rewrite_call(ctx, node, ArgPlan(drop={"torch_dtype"}))
            ctx.marker(node, "both torch_dtype= and dtype= were passed: torch_dtype= was dropped")
        else:
            rename_keyword(ctx, kw["torch_dtype"], "dtype")
            ctx.finding(kw["torch_dtype"], "torch_dtype= -> dtype= (transformers v5)")


TELEMETRY = ("transformers.utils.send_example_telemetry", "transformers.send_example_telemetry")


class ExampleTelemetry(PythonRule):
    id = "NM606"
    title = "send_example_telemetry (removed in v5): the import and its calls are removed"
    fix = "mixed"
    triggers = ("send_example_telemetry",)
    why = """
        Scripts copied from the Transformers examples call `send_example_telemetry(...)`, a helper
        that only pinged the Hub with the example's name; transformers v5 removed it, so the
        import fails. The call has no effect on training: it goes, and so does its import.
    """
    before = """
        from transformers import HfArgumentParser
        from transformers.utils import send_example_telemetry

        model_args, data_args = HfArgumentParser((ModelArguments, DataArguments)).parse_args_into_dataclasses()
        send_example_telemetry("run_clm", model_args, data_args)
    """
    after = """
        from transformers import HfArgumentParser

        model_args, data_args = HfArgumentParser((ModelArguments, DataArguments)).parse_args_into_dataclasses()
    """
    caveats = """
        A use that is not a statement of its own (`x = send_example_telemetry(...)`) gets a marker.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        if ctx.qualname(node.func) not in TELEMETRY:
            return
        statement = expression_statement(ctx, node)
        if statement is not None:
            remove_small_statement(ctx, *statement)
            ctx.finding(node, "send_example_telemetry(...) removed (it only pinged the Hub; gone in transformers v5)")
        else:
            ctx.marker(node, "send_example_telemetry is gone in transformers v5 (it only pinged the Hub): remove this use")


REMOTE_CODE_MARKER = ("Check that this model's Hub code runs on Transformers 5.23 (it was written for 4.x), or load "
                      "its native class.")


class RemoteCodeOnV5(PythonRule):
    id = "NM625"
    markers = ((REMOTE_CODE_MARKER, """trust_remote_code=True runs the modelling code the model's Hub repository
        ships, written against the Transformers 4.x the old project pinned; the migration moves the project to
        Transformers 5.23, where many such files fail (names removed from 4.x: `_tie_or_clone_weights`, config
        attributes such as `forced_bos_token_id`) or behave differently. Run the load once on 5.23; where
        Transformers now has the architecture itself (Florence-2, Phi-3, Qwen2-VL and many others), drop
        trust_remote_code and load the native class."""),)
    title = "from_pretrained(..., trust_remote_code=True) in a project moved from Transformers 4: marker"
    fix = "manual"
    triggers = ("trust_remote_code",)
    #: the run migrates old-stack code (its Transformers pin is raised to 5.23)
    project_probes = MIGRATES_TO_TARGET
    why = """
        A model loaded with `trust_remote_code=True` runs the code of its Hub repository, which was
        written for the Transformers 4.x that the old project pinned. The migration raises the
        project to Transformers 5.23 (NM503), where much of that code no longer loads. In a run
        that migrates old-stack code, each Transformers load with `trust_remote_code=True` gets a
        marker: check it on 5.23, or load the native class where Transformers has the
        architecture now.
    """
    before = """
        import torch
        import torch_xla.core.xla_model as xm
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained("microsoft/Florence-2-base", trust_remote_code=True)
        model.to(xm.xla_device())
    """
    after = """
        import torch
        from transformers import AutoModelForCausalLM

        # TODO(neuron-migrate NM625): Check that this model's Hub code runs on Transformers 5.23 (it was written for 4.x), or load its native class.
        model = AutoModelForCausalLM.from_pretrained("microsoft/Florence-2-base", trust_remote_code=True)
        model.to(torch.device("neuron"))
    """
    caveats = """
        Only `trust_remote_code=True` written as a literal, on a Transformers class's `from_pretrained`
        or `transformers.pipeline`; a run without old-stack code keeps its Transformers pin and is left
        alone. Dataset loading scripts are NM617's.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        arg = keywords(node).get("trust_remote_code")
        if arg is None or literal(arg.value) is not True:
            return
        func = node.func
        qual = ctx.qualname(func) or ""
        if isinstance(func, cst.Attribute) and func.attr.value == "from_pretrained":
            qual = ctx.qualname(func.value) or ""
        elif qual != "transformers.pipeline" and not qual.startswith("transformers.pipelines"):
            return
        if not qual.startswith("transformers."):
            return
        if not migrates_to_target(ctx):
            return
        ctx.marker(node, REMOTE_CODE_MARKER)


RULES = (AdamWToTorch, TrainingArgumentsFields, TrainerProcessingClass, UseAuthToken, ExampleTelemetry, TorchDtype,
         RemoteCodeOnV5)
