"""Calls the pinned targets reject or run differently, read from the generated upgrade data:

* NM609 ``tokenizer.encode_plus(...)`` / ``batch_encode_plus(...)`` (removed in v5) -> ``tokenizer(...)``;
* NM610 ``use_flash_attention_2=True`` / ``attn_implementation="flash_attention_2"`` -> ``"sdpa"``;
* NM611 training-argument fields the target removed (beyond NM602's two): renamed or dropped;
* NM615 ``from_pretrained(torchscript=...)`` (removed in v5): dropped, a marker for ``True``;
* NM618 ``tok.apply_chat_template(msgs, return_tensors="pt")`` used as a tensor (v4's return): ``return_dict=False``
  (v5 returns a BatchEncoding);
* NM619 ``with tok.as_target_tokenizer(): labels = tok(targets)`` (removed in v5) -> ``tok(text_target=targets)``;
* NM621 ``pipeline("summarization")`` and the other tasks v5 removed: a marker with what Transformers says instead;
* NM623 ``self.get_head_mask(...)``, ``model.invert_attention_mask(...)`` and the other model helpers v5 removed: a marker.
"""

from __future__ import annotations

import builtins
import re

import libcst as cst

from codemods.common.arg_plan import (
    MAX_LINE,
    NOT_LITERAL,
    ArgPlan,
    apply_plan,
    keywords,
    line_prefix,
    literal,
    quote_of,
    rewrite_call,
    statement_indent,
)
from codemods.upgrade.base import owned_elsewhere, rename_keyword, target_of
from codemods.upgrade.data import data
from migrator.model import fitted
from migrator.rules import PythonContext, PythonRule
from migrator.selfcheck.targetapi import api

TOKENIZER = "transformers.PreTrainedTokenizerBase"
ENCODE_PLUS = ("encode_plus", "batch_encode_plus")


class EncodePlus(PythonRule):
    id = "NM609"
    title = "tokenizer.encode_plus(...) / batch_encode_plus(...) (removed in v5) -> tokenizer(...)"
    fix = "mixed"
    triggers = ("encode_plus(",)
    why = """
        `encode_plus` and `batch_encode_plus` were the pre-`__call__` ways to tokenize one text or
        a batch; transformers v5 removed both from the tokenizers (the generated upgrade data
        lists them among PreTrainedTokenizerBase's removed attributes). Calling the tokenizer
        takes the same text and keywords and returns the same BatchEncoding.
    """
    before = """
        enc = tokenizer.encode_plus(text, max_length=128, padding="max_length", return_tensors="pt")
    """
    after = """
        enc = tokenizer(text, max_length=128, padding="max_length", return_tensors="pt")
    """
    caveats = """
        `pad_to_max_length=True` (ignored by v5: nothing would be padded) becomes
        `padding="max_length"`, with `truncation=True` where `max_length` is given without
        `truncation` (4.x truncated then). Any `.encode_plus(` call is taken for a tokenizer's. A call with more than two positional
        arguments (their order differs from `__call__`'s), `batch_text_or_text_pairs=`, or a batch
        of `(text, pair)` tuples written out gets a marker: `tokenizer(texts, pairs)` takes the
        pairs as a second list.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in ENCODE_PLUS):
            return
        if data().removed_attr(TOKENIZER, func.attr.value) is None:
            return
        positional = [a for a in node.args if a.keyword is None and not a.star]
        first = positional[0].value if positional else None
        pairs = isinstance(first, (cst.List, cst.Tuple)) and any(
            isinstance(e.value, cst.Tuple) for e in first.elements)
        if len(positional) > 2 or "batch_text_or_text_pairs" in keywords(node) or pairs:
            ctx.marker(node, f"Call the tokenizer instead of {func.attr.value}: tokenizer(texts, text_pair=pairs, ...).",
                       detail=f"{func.attr.value} is gone in transformers v5; the tokenizer's own call takes the "
                              "same inputs, with text, text_pair as its positional order")
            return
        plan = self._padding(node, ctx)
        indent = statement_indent(ctx) + " " * line_prefix(ctx, node)
        step = ctx.module.default_indent

        def rewrite(new: cst.Call) -> cst.Call:
            if isinstance(new.func, cst.Attribute):
                new = new.with_changes(func=new.func.value)
            return new if plan.empty() else apply_plan(new, plan, MAX_LINE, indent, step)

        ctx.replace(node, rewrite)
        ctx.finding(node, f"tokenizer.{func.attr.value}(...) -> tokenizer(...) (gone in transformers v5)")

    @staticmethod
    def _padding(node: cst.Call, ctx: PythonContext) -> ArgPlan:
        """``pad_to_max_length=`` (Transformers 3/4's spelling of ``padding="max_length"``): 4.x still honoured it,
        5.x ignores it silently (the inputs are no longer padded). With ``max_length`` and no ``truncation``, 4.x
        truncated too (its padding was still False when it chose the truncation): ``truncation=True`` keeps that."""
        kw = keywords(node)
        pad = kw.get("pad_to_max_length")
        plan = ArgPlan()
        if pad is None:
            return plan
        value = literal(pad.value)
        if value is True:
            plan.drop.add("pad_to_max_length")
            q = quote_of(node)
            if "padding" not in kw:
                plan.add.append(("padding", lambda: cst.SimpleString(f"{q}max_length{q}")))
            if "max_length" in kw and "truncation" not in kw:
                plan.add.append(("truncation", lambda: cst.Name("True")))
            ctx.finding(pad, "pad_to_max_length=True -> padding=\"max_length\" (transformers v5 ignores the old keyword)"
                        + (", truncation=True (4.x truncated to max_length with it)" if "max_length" in kw
                           and "truncation" not in kw else ""))
        elif value is False:
            plan.drop.add("pad_to_max_length")
            ctx.finding(pad, "pad_to_max_length=False dropped (the default: no padding)")
        else:
            ctx.marker(node, "Pass padding=\"max_length\" where pad_to_max_length is true: transformers v5 ignores "
                             "pad_to_max_length.")
        return plan


FLASH = ("flash_attention_2", "flash_attention_3")


class FlashAttention(PythonRule):
    id = "NM610"
    title = "use_flash_attention_2=True / attn_implementation=\"flash_attention_2\" -> attn_implementation=\"sdpa\""
    fix = "mixed"
    triggers = ("use_flash_attention_2", "flash_attention_2", "flash_attention_3")
    why = """
        flash-attn is a CUDA package: it does not exist on Neuron, so a model loaded with
        `attn_implementation="flash_attention_2"` fails to load there. The native equivalent is
        PyTorch's scaled-dot-product attention, `attn_implementation="sdpa"`. The old
        `use_flash_attention_2=True` keyword is gone from transformers v5 besides.
    """
    before = """
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_id, use_flash_attention_2=True)
    """
    after = """
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_id, attn_implementation="sdpa")
    """
    caveats = """
        `attn_implementation="flash_attention_2"` is rewritten in any call and in dict literals
        (`model_init_kwargs={...}`); `use_flash_attention_2=` only in calls of transformers
        callables. `use_flash_attention_2=False` (the default) is dropped; a value that is not a
        literal becomes `"sdpa" if <value> else None`.
    """

    def handlers(self):
        return {cst.Call: self._on_call, cst.Dict: self._on_dict}

    def _on_dict(self, node: cst.Dict, ctx: PythonContext) -> None:
        for el in node.elements:
            if (isinstance(el, cst.DictElement) and literal(el.key) == "attn_implementation"
                    and literal(el.value) in FLASH):
                q = el.value.value[0] if isinstance(el.value, cst.SimpleString) else '"'
                ctx.replace(el.value, cst.SimpleString(f"{q}sdpa{q}"))
                ctx.finding(el, f"attn_implementation={literal(el.value)!r} -> \"sdpa\" (no flash-attn on Neuron)")

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        kw = keywords(node)
        attn = kw.get("attn_implementation")
        if attn is not None and literal(attn.value) in FLASH:
            q = quote_of(node)
            ctx.replace(attn.value, cst.SimpleString(f"{q}sdpa{q}"))
            ctx.finding(attn, f"attn_implementation={literal(attn.value)!r} -> \"sdpa\" (no flash-attn on Neuron)")
        if "use_flash_attention_2" not in kw:
            return
        target = target_of(ctx, node.func)
        if target is None or not target.startswith("transformers.") or api().accepts(target, "use_flash_attention_2") is not False:
            return
        if api().accepts(target, "attn_implementation") is not True:
            return
        value = literal(kw["use_flash_attention_2"].value)
        plan = ArgPlan()
        q = quote_of(node)
        if "attn_implementation" in kw or value is False or value is None:
            plan.drop.add("use_flash_attention_2")
            ctx.finding(kw["use_flash_attention_2"], "use_flash_attention_2= dropped (gone in transformers v5)")
        else:
            plan.rename["use_flash_attention_2"] = "attn_implementation"
            if value is NOT_LITERAL:
                plan.revalue["use_flash_attention_2"] = lambda v: cst.IfExp(
                    test=v, body=cst.SimpleString(f"{q}sdpa{q}"), orelse=cst.Name("None"))
            else:
                plan.revalue["use_flash_attention_2"] = lambda v: cst.SimpleString(f"{q}sdpa{q}")
            ctx.finding(kw["use_flash_attention_2"], "use_flash_attention_2=True -> attn_implementation=\"sdpa\" "
                                                     "(no flash-attn on Neuron; gone in transformers v5)")
        rewrite_call(ctx, node, plan)


#: the fields NM602 handles
NM602_FIELDS = ("evaluation_strategy", "overwrite_output_dir")
ARGUMENT_CLASSES = ("transformers.TrainingArguments", "transformers.Seq2SeqTrainingArguments", "trl.SFTConfig",
                    "trl.DPOConfig", "trl.RewardConfig", "peft.LoraConfig")


def removed_fields_of(target: str) -> dict:
    """The removed fields that apply to ``target``: its own, and TrainingArguments' for every
    target class built on it (a TRL config, a subclass)."""
    out = dict(data().removed_fields("transformers.TrainingArguments")) if (
        target.startswith(("transformers.", "trl.")) and api().accepts(target, "eval_strategy") is True) else {}
    out.update(data().removed_fields(target))
    return out


class RemovedArgumentFields(PythonRule):
    id = "NM611"
    title = "TrainingArguments / TRL configs / LoraConfig: fields the target removed, renamed or dropped"
    fix = "mixed"
    # the removed fields as keywords, from the data
    triggers = tuple(sorted({f"{name}=" for cls in ARGUMENT_CLASSES for name in data().removed_fields(cls)
                             if not name.startswith("_")}))
    why = """
        Transformers v5 and TRL 1.x removed dataclass fields old scripts pass (the generated upgrade
        data lists them per class, with the last release that had each): the dataclass raises a
        TypeError on any of them. A field the old release itself documented as renamed
        (`no_cuda` -> `use_cpu`, `push_to_hub_token` -> `hub_token`, TRL's `max_seq_length` ->
        `max_length`) is renamed; any other is dropped, with a marker naming it.
    """
    before = """
        from transformers import TrainingArguments

        args = TrainingArguments(output_dir="out", no_cuda=True)
    """
    after = """
        from transformers import TrainingArguments

        args = TrainingArguments(output_dir="out", use_cpu=True)
    """
    caveats = """
        `evaluation_strategy=` and `overwrite_output_dir=` are NM602's. A dropped field's effect is
        gone: the marker says which; check whether the script relied on it. Only calls whose class
        is known through the imports (and the rename of optimum-neuron classes).
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        kw = keywords(node)
        if not kw:
            return
        target = target_of(ctx, node.func)
        if target is None:
            return
        removed = removed_fields_of(target)
        if not removed:
            return
        plan = ArgPlan()
        dropped = []
        for name, entry in removed.items():
            if name not in kw or name in NM602_FIELDS or api().accepts(target, name) is not False:
                continue
            new = entry.get("renamed_to")
            true_is = entry.get("true_is")
            if true_is and api().accepts(target, true_is[0]) is True and true_is[0] not in kw and (
                    literal(kw[name].value) in (True, False)):
                if literal(kw[name].value):
                    q = quote_of(node)
                    plan.rename[name] = true_is[0]
                    plan.revalue[name] = lambda v, q=q, val=true_is[1]: cst.SimpleString(f"{q}{val}{q}")
                    ctx.finding(kw[name], f"{name}=True -> {true_is[0]}={true_is[1]!r}")
                else:
                    plan.drop.add(name)
                    ctx.finding(kw[name], f"{name}=False dropped (the default)")
            elif new and api().accepts(target, new) is True and new not in kw:
                rename_keyword(ctx, kw[name], new)
                ctx.finding(kw[name], f"{name}= -> {new}= (renamed; the old name is gone in the target)")
            else:
                if owned_elsewhere(ctx, node.func, self.id):
                    continue
                plan.drop.add(name)
                dropped.append((f"{name}=", entry.get("last")))
        if dropped:
            cls = target.rsplit(".", 1)[-1]
            ctx.marker(node, f"Check what the script relied on from {', '.join(n for n, _ in dropped)}: {cls} no longer "
                             "takes them.",
                       detail="dropped: " + ", ".join(f"{n} (last in {last})" for n, last in dropped))
        rewrite_call(ctx, node, plan)


TORCHSCRIPT_MARKER = "Use out.to_tuple() where this model's outputs are unpacked: torchscript=True is gone."
RETURN_DICT_MARKER = ("Use out.to_tuple() where this model's outputs are unpacked: a config-wide return_dict=False "
                      "breaks v5 models.")


class TorchscriptFlag(PythonRule):
    id = "NM615"
    markers = ((TORCHSCRIPT_MARKER, """torchscript=True is gone in transformers v5 and was dropped: the model returns
        ModelOutput objects, where out[0] still works and unpacking a tuple does not (out.to_tuple() does)."""),
               (RETURN_DICT_MARKER, """from_pretrained(..., return_dict=False) set the config's return_dict, which in
        transformers 5.23 reaches the inner models of CLIP, GPT-2's LM head, T5 and others, whose wrappers then read
        attributes of a tuple (AttributeError: 'tuple' object has no attribute 'pooler_output'). It was dropped: the
        model returns ModelOutput objects, where out[0] still works and unpacking does not (out.to_tuple() does;
        return_dict=False on a call is fine)."""),)
    title = "Transformers from_pretrained(torchscript=... / return_dict=False) (removed or broken in v5): dropped"
    fix = "mixed"
    triggers = ("torchscript=", "return_dict=False")
    why = """
        `torchscript=True` set the config's `torchscript` attribute so that the model returned
        tuples (and untied shared weights) for `torch.jit.trace`; transformers v5 removed the
        attribute and `from_pretrained` rejects the keyword (a TypeError from the model's
        `__init__`). The native stack compiles with torch.compile, which needs neither. The model
        now returns ModelOutput objects: indexing (`model(x)[0]`) gives what the tuple gave, tuple
        unpacking does not (iterating a ModelOutput yields its keys): the marker says so, in a unit
        that unpacks anything as a tuple (`a, b = ...`, `*x`, `tuple(x)`); where the outputs can only be
        indexed, the keyword goes without one.
    """
    before = """
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained(name, torchscript=True)
        loss, logits = model(**batch)
    """
    after = """
        from transformers import AutoModelForSequenceClassification

        # TODO(neuron-migrate NM615): Use out.to_tuple() where this model's outputs are unpacked: torchscript=True is gone.
        model = AutoModelForSequenceClassification.from_pretrained(name)
        loss, logits = model(**batch)
    """
    caveats = """
        Not `return_dict=False` instead: in 5.23 a config-wide `return_dict=False` reaches the inner
        model of a causal LM, whose wrapper then fails on the tuple (`'tuple' object has no
        attribute 'last_hidden_state'`); for the same reason `from_pretrained(..., return_dict=False)`
        (traced models asked for tuples that way) is dropped too, with the same marker (checked on
        CPU: CLIP, GPT-2 LM head and T5 fail to run with it). `torchscript=False` (the default) is
        dropped silently. `return_dict=False` on a model's call is left alone: it works. So is a
        `return_dict=False` load in a unit that still traces with TorchScript (`torch.jit.trace`,
        torch-neuron's `torch.neuron.trace`, neuronperf's `neuronperf.torch.compile`, which calls it):
        the tracer needs the tuple outputs (a dict output stops
        it), and an encoder such as BERT loaded that way traces in 5.23. A configuration built with
        `torchscript=True` in such a unit gets `return_dict=False` beside it (4.x's torchscript turned it off, 5.x's
        does not).
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    @staticmethod
    def _config_for_trace(node: cst.Call, target: str, kw: dict, ctx: PythonContext) -> bool:
        """A model configuration built with ``torchscript=True`` in a unit that traces with TorchScript: in 4.x
        it also turned ``return_dict`` off, in 5.x it does not (the model returns a ModelOutput, which stops the
        tracer): ``return_dict=False`` is added. True when the call is a configuration's (handled here)."""
        if not (_is_config(target) and "torchscript" in kw and literal(kw["torchscript"].value) is True
                and "return_dict" not in kw and _torchscript_traced(ctx)):
            return False
        rewrite_call(ctx, node, ArgPlan(add=[("return_dict", lambda: cst.Name("False"))]))
        ctx.finding(kw["torchscript"], "return_dict=False added beside torchscript=True: transformers v5's "
                                       "torchscript no longer turns it off, and the TorchScript trace needs tuples")
        return True

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        kw = keywords(node)
        if "torchscript" not in kw and "return_dict" not in kw:
            return
        target = target_of(ctx, node.func)
        if target is None or not target.startswith("transformers."):
            return
        if self._config_for_trace(node, target, kw, ctx):
            return
        drop = set()
        if "torchscript" in kw and api().accepts(target, "torchscript") is False:
            drop.add("torchscript")
            value = literal(kw["torchscript"].value)
            if value is not False and value is not None and _unpacks(ctx):
                ctx.marker(node, TORCHSCRIPT_MARKER)
            elif value is not False and value is not None:
                ctx.finding(kw["torchscript"], "torchscript=True dropped (gone in transformers v5): the outputs, "
                                               "ModelOutput objects now, are only indexed here (out[0] works)")
            else:
                ctx.finding(kw["torchscript"], "torchscript= dropped (gone in transformers v5)")
        if ("return_dict" in kw and literal(kw["return_dict"].value) is False and target.endswith(".from_pretrained")
                and not _torchscript_traced(ctx)):
            drop.add("return_dict")
            if ("torchscript" not in drop or literal(kw["torchscript"].value) in (False, None)) and _unpacks(ctx):
                ctx.marker(node, RETURN_DICT_MARKER)
            elif "torchscript" not in drop or literal(kw["torchscript"].value) in (False, None):
                ctx.finding(kw["return_dict"], "return_dict=False dropped (it makes traced models fail in v5): the "
                                               "outputs are only indexed here (out[0] works on a ModelOutput)")
        if drop:
            rewrite_call(ctx, node, ArgPlan(drop=drop))


def _is_config(target: str) -> bool:
    """``transformers.AutoConfig.from_pretrained``, ``transformers.BertConfig(...)``: a model configuration."""
    parts = target.split(".")
    owner = parts[-2] if parts[-1] == "from_pretrained" and len(parts) > 2 else parts[-1]
    return owner.endswith("Config") and not owner.endswith(("TrainingConfig", "GenerationConfig", "QuantizationConfig"))


#: a TorchScript trace the migration leaves (torch.jit.trace, torch-neuron's torch.neuron.trace): it needs the tuple
#: outputs a return_dict=False load gives (a dict output stops the tracer)
_JIT_TRACE = re.compile(r"\b(?:jit|neuron|torch_neuron)\s*\.\s*trace\s*\(|\bneuronperf\s*\.\s*torch\s*\.\s*compile\s*\(")
#: the same functions imported by name (`from torch_neuron import trace`, in an Inf1/Inf2 if/else too);
#: neuronperf's compile traces with torch-neuron's (TorchScript) trace
_TORCHSCRIPT_TRACES = frozenset({"torch.jit.trace", "torch.neuron.trace", "torch_neuron.trace",
                                 "neuronperf.torch.compile"})


def _torchscript_traced(ctx: PythonContext) -> bool:
    """Whether the unit traces with TorchScript (a call of torch.jit.trace or torch-neuron's trace, by any name)."""
    if _JIT_TRACE.search(ctx.code):
        return True
    return any(b.qualified in _TORCHSCRIPT_TRACES and re.search(rf"(?<![\w.]){re.escape(b.local)}\s*\(", ctx.code)
               for b in ctx.imports.all_bindings())


#: an assignment that unpacks its value as a tuple (`a, b = <value>`, `(a, b) = ...`, `first, *rest = ...`) and a
#: conversion of one (`tuple(out)`, `list(out)`; a call's `*args` unpacks its inputs, not outputs)
_UNPACK_ASSIGN = re.compile(r"^[ \t]*\(?[ \t]*\*?[A-Za-z_][\w.\[\]]*[ \t]*,[^=\n]*=(?!=)[ \t]*(.+)$", re.MULTILINE)
_AS_TUPLE = re.compile(r"\b(?:tuple|list)\(\s*(.+)")
#: the value an unpacking reads: a call (its callee) or a name, perhaps subscripted
_VALUE = re.compile(r"(?:await\s+)?([A-Za-z_][\w.]*)\s*(\()?")
#: `name = <a load, trace or compile>`: a model
_LOADED = re.compile(r"^[ \t]*([A-Za-z_][\w.]*)[ \t]*=[^=\n]*\b(?:from_pretrained|trace|compile|load)\s*\(", re.MULTILINE)


def _model_like(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last == "model" or last.endswith("_model") or last.startswith("model_")


def _unpacks(ctx: PythonContext) -> bool:
    """Whether the unit unpacks what a model returns as a tuple: a ModelOutput is indexed like the tuple was
    (out[0]), and only unpacking needs out.to_tuple() (a ModelOutput unpacks into its keys). What is unpacked is
    a model's output when it is a call of a model (a name loaded, traced or compiled in the unit, or named like
    one: `model`, `*_model`), a name assigned from such a call, or a call of a name the unit neither defines nor
    imports (a model handed in: in doubt); a function the unit defines, an imported API (`torch.max`) and another
    object's method (`parser.parse_known_args()`) return no model output."""
    key = "NM615.unpacks"
    if key in ctx.scratch:
        return ctx.scratch[key]
    code = ctx.code
    models = {m.group(1) for m in _LOADED.finditer(code)}
    defined = set(re.findall(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_]\w*)", code, re.MULTILINE))

    def model_call(callee: str) -> bool:
        if callee in models or _model_like(callee) or callee.endswith(".forward"):
            return True
        if "." in callee or callee in defined or callee in dir(builtins):
            return False
        return ctx.imports.resolve_name(callee) is None  # a model handed in (a parameter, a variable): in doubt

    outputs = {m.group(1) for m in re.finditer(r"^[ \t]*([A-Za-z_][\w.]*)[ \t]*=[ \t]*([A-Za-z_][\w.]*)\s*\(",
                                              code, re.MULTILINE) if model_call(m.group(2))}

    def reads_output(value: str) -> bool:
        m = _VALUE.match(value)
        if m is None:
            return False
        return model_call(m.group(1)) if m.group(2) else m.group(1) in outputs

    found = any(reads_output(m.group(1)) for m in _UNPACK_ASSIGN.finditer(code)) or any(
        reads_output(m.group(1)) for m in _AS_TUPLE.finditer(code))
    ctx.scratch[key] = found
    return found


CHAT_TEMPLATE_MARKER = "apply_chat_template returns a BatchEncoding in transformers 5: pass return_dict=False or read [\"input_ids\"]."
#: reads of a name that take the v4 return (a tensor of token ids) / the v5 one (a BatchEncoding)
_TENSOR_USE = r"\b{n}\.(shape|to|size|cuda|cpu|tolist|dim|numel|long)\b|\b{n}\s*\[\s*[:\d-]|generate\(\s*{n}\s*[,)]|input_ids\s*=\s*{n}\b"
_DICT_USE = r"\b{n}\s*\[\s*['\"]|\*\*\s*{n}\b|\b{n}\.(input_ids|attention_mask|keys|items|data|get)\b"


class ChatTemplateTensors(PythonRule):
    id = "NM618"
    title = "apply_chat_template(..., return_tensors=...) read as a tensor -> return_dict=False (v5 returns a BatchEncoding)"
    fix = "mixed"
    triggers = ("apply_chat_template(",)
    markers = ((CHAT_TEMPLATE_MARKER,
                """Transformers 4.x returned the token ids (a tensor with return_tensors=) unless return_dict=True;
                5.x defaults to return_dict=True and returns a BatchEncoding, so `ids.shape` and
                `model.generate(ids)` fail. The rule could not see how the result is read here."""),)
    why = """
        Transformers 4.x's `apply_chat_template(messages, tokenize=True, return_tensors="pt")`
        returned the token ids as a tensor (return_dict defaulted to False); 5.x defaults to
        `return_dict=True` and returns a BatchEncoding, so `ids.shape`, `ids.to(device)`,
        `ids[:, n:]` and `model.generate(ids)` fail. Where the result is read as a tensor (passed
        positionally to `generate`, or held in a name read that way in the unit), `return_dict=False`
        restores the old return; where it is already read as a mapping (`ids["input_ids"]`,
        `**ids`) nothing changes; elsewhere a marker.
    """
    before = """
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
        out = model.generate(ids, max_new_tokens=20)
    """
    after = """
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=False)
        out = model.generate(ids, max_new_tokens=20)
    """
    caveats = """
        The uses are found by name in the same unit; a name read both ways is left alone. Calls with
        `tokenize=False`, an explicit `return_dict=` or `**kwargs` are left alone.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value == "apply_chat_template"):
            return
        kw = keywords(node)
        if "return_tensors" not in kw or "return_dict" in kw or any(a.star for a in node.args):
            return
        if "tokenize" in kw and literal(kw["tokenize"].value) is not True:
            return
        verdict = self._read_as(node, ctx)
        if verdict == "mapping":
            return
        if verdict != "tensor":
            ctx.marker(node, CHAT_TEMPLATE_MARKER)
            return

        def add(updated: cst.Call) -> cst.Call:
            args = list(updated.args)
            last = args[-1]
            if not isinstance(last.comma, cst.Comma):
                args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(cst.Arg(keyword=cst.Name("return_dict"), value=cst.Name("False"),
                                equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                      whitespace_after=cst.SimpleWhitespace("")),
                                comma=last.comma if isinstance(last.comma, cst.Comma) else cst.MaybeSentinel.DEFAULT))
            return updated.with_changes(args=args)

        ctx.replace(node, add)
        ctx.finding(node, "apply_chat_template(..., return_tensors=...) -> return_dict=False (v5 returns a BatchEncoding)")

    @staticmethod
    def _read_as(node: cst.Call, ctx: PythonContext) -> str | None:
        """"tensor" / "mapping" as the unit reads the result; None when it cannot tell."""
        parent, outer = ctx.parent, (ctx.stack[-3] if len(ctx.stack) > 2 else None)
        if isinstance(parent, cst.Arg) and isinstance(outer, cst.Call) and isinstance(outer.func, cst.Attribute) \
                and outer.func.attr.value == "generate" and (parent.keyword is None and outer.args[0] is parent
                                                             or parent.keyword is not None and parent.keyword.value == "input_ids"):
            return "tensor"
        if isinstance(parent, cst.Attribute) and parent.attr.value in ("to", "shape", "size"):
            return "tensor"
        if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name)):
            return None
        name = re.escape(parent.targets[0].target.value)
        tensor = re.search(_TENSOR_USE.format(n=name), ctx.code)
        mapping = re.search(_DICT_USE.format(n=name), ctx.code)
        if mapping:
            return "mapping" if not tensor else None
        return "tensor" if tensor else None


TARGET_MARKER = "Tokenize the targets with {tok}(text_target=...) instead: {method}() is gone in Transformers 5."


class TargetTokenizer(PythonRule):
    id = "NM619"
    title = "with tok.as_target_tokenizer(): tok(targets) (removed in v5) -> tok(text_target=targets)"
    fix = "mixed"
    triggers = ("as_target_tokenizer", "prepare_seq2seq_batch")
    markers = ((TARGET_MARKER, """Transformers 5 removed as_target_tokenizer() and prepare_seq2seq_batch() from the
                tokenizers: the targets of a sequence-to-sequence model are tokenized by the tokenizer's own call with
                text_target= (and text_pair_target=), which returns them as the labels' input_ids. The rule
                could not see every use of the tokenizer inside the block as one call with the text first."""),)
    why = """
        Sequence-to-sequence scripts of the Transformers 4.x era tokenized their targets inside
        `with tokenizer.as_target_tokenizer():` (the target-language vocabulary of Marian, mBART,
        M2M100 ...). Transformers 5 removed the context manager (the generated upgrade data lists it
        among PreTrainedTokenizerBase's removed attributes); the tokenizer's call takes the targets
        as `text_target=`, with the same keywords, and tokenizes them the same way. Where every use
        of the tokenizer inside the block is a call with the text first, the block goes and each
        call passes its text as `text_target=`; elsewhere, and for `prepare_seq2seq_batch()`, a marker.
    """
    before = """
        with tokenizer.as_target_tokenizer():
            labels = tokenizer(targets, max_length=128, truncation=True)
    """
    after = """
        labels = tokenizer(text_target=targets, max_length=128, truncation=True)
    """
    caveats = """
        Any `.as_target_tokenizer()` is taken for a tokenizer's. A block with another use of the
        tokenizer (`tokenizer.decode(...)`, the tokenizer passed on), a call with `*args`, a second
        positional argument or `text_target=` already, or a `with` of several items gets a marker.
    """

    def handlers(self):
        return {cst.With: self._on_with, cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in ("as_target_tokenizer", "prepare_seq2seq_batch")):
            return
        if data().removed_attr(TOKENIZER, func.attr.value) is None:
            return
        if func.attr.value == "as_target_tokenizer" and isinstance(ctx.parent, cst.WithItem) \
                and self._plan(ctx.stack[-3], ctx) is not None:
            return  # the with statement is rewritten whole
        tok = ctx.module.code_for_node(func.value)
        ctx.marker(node, fitted(TARGET_MARKER.format(tok=tok, method=func.attr.value),
                                TARGET_MARKER.format(tok="tokenizer", method=func.attr.value)))

    def _on_with(self, node: cst.With, ctx: PythonContext) -> None:
        calls = self._plan(node, ctx)
        if calls is None:
            return

        class Targets(cst.CSTTransformer):
            def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
                if not any(original.deep_equals(c) for c in calls):
                    return updated
                first, *rest = updated.args
                return updated.with_changes(args=[first.with_changes(
                    keyword=cst.Name("text_target"), equal=cst.AssignEqual(
                        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))),
                    *rest])

        def rewrite(updated: cst.With) -> cst.FlattenSentinel:
            body = [st.visit(Targets()) for st in updated.body.body]  # type: ignore[union-attr]
            body[0] = body[0].with_changes(leading_lines=[*updated.leading_lines, *body[0].leading_lines])
            return cst.FlattenSentinel(body)

        ctx.replace(node, rewrite)
        ctx.finding(node, "with tok.as_target_tokenizer(): tok(x) -> tok(text_target=x) (gone in transformers v5)")

    @staticmethod
    def _plan(node: cst.With, ctx: PythonContext) -> list[cst.Call] | None:
        """The tokenizer calls of ``with tok.as_target_tokenizer():`` to pass their text as text_target=, or None
        when the block cannot go (another use of ``tok`` in it, an unfit call, several items)."""
        if len(node.items) != 1 or node.items[0].asname is not None or not isinstance(node.body, cst.IndentedBlock):
            return None
        item = node.items[0].item
        if not (isinstance(item, cst.Call) and not item.args and isinstance(item.func, cst.Attribute)
                and item.func.attr.value == "as_target_tokenizer"):
            return None
        if data().removed_attr(TOKENIZER, "as_target_tokenizer") is None:
            return None
        tok = item.func.value
        if not isinstance(tok, (cst.Name, cst.Attribute)):
            return None
        code = ctx.module.code_for_node(tok)
        calls: list[cst.Call] = []
        uses = 0
        ok = True

        class Uses(cst.CSTVisitor):
            def visit_Call(self, call: cst.Call) -> None:
                nonlocal ok
                if ctx.module.code_for_node(call.func) != code:
                    return
                args = call.args
                if not args or args[0].keyword is not None or args[0].star or any(
                        a.keyword is None for a in args[1:]) or any(
                        a.keyword is not None and a.keyword.value == "text_target" for a in args):
                    ok = False
                calls.append(call)

            def on_visit(self, n: cst.CSTNode) -> bool:
                nonlocal uses
                if isinstance(n, (cst.Name, cst.Attribute)) and ctx.module.code_for_node(n) == code:
                    uses += 1
                    return False
                return super().on_visit(n)

        for st in node.body.body:
            st.visit(Uses())
        if not ok or not calls or uses != len(calls):
            return None
        return calls


#: removed tasks whose model class does the same job directly (better than the chat-model advice for them)
_INSTEAD = {"question-answering": "Load AutoModelForQuestionAnswering and run it directly."}
#: the removed seq2seq tasks: their models (T5, BART, Marian) do not load in the text-generation pipeline that
#: Transformers suggests; the model class and generate() keep what the pipeline computed
_SEQ2SEQ = "Load AutoModelForSeq2SeqLM and call its generate()."


def _instead(task: str) -> str | None:
    if task in ("text2text-generation", "summarization", "translation") or task.startswith("translation_"):
        return _SEQ2SEQ if api().removed_task(task) is not None else None
    return _INSTEAD.get(task) or api().removed_task(task)


class RemovedPipelineTasks(PythonRule):
    id = "NM621"
    title = "transformers.pipeline() tasks removed in v5 (summarization, translation, question-answering...)"
    fix = "manual"
    triggers = ("pipeline(",)
    why = """
        Transformers 5 removed the `text2text-generation`, `summarization`, `translation`
        (`translation_xx_to_yy`), `question-answering`, `visual-question-answering` and
        `image-to-image` pipelines: `pipeline("summarization", ...)` raises a KeyError. What
        Transformers says to use instead (the text-generation pipeline with a chat model, the
        image-text-to-text one, Diffusers) is read from the installed library
        (`transformers.pipelines.REMOVED_TASKS`, through the target data) and given in the
        marker, except for the seq2seq tasks (text2text-generation, summarization, translation):
        their models (T5, BART, Marian) do not load in the text-generation pipeline, and still run
        with `AutoModelForSeq2SeqLM` and `generate()`, which the marker says.
    """
    before = """
        from transformers import pipeline

        summarizer = pipeline("summarization", model="t5-small")
    """
    after = """
        from transformers import pipeline

        # TODO(neuron-migrate NM621): The `summarization` pipeline is gone in Transformers 5: load AutoModelForSeq2SeqLM and call its generate().
        summarizer = pipeline("summarization", model="t5-small")
    """
    caveats = """
        Only a task written as a literal (first argument or `task=`) is checked; a task held in a
        variable is not followed.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        qual = target_of(ctx, node.func)  # optimum-neuron's pipeline() is transformers' after its migration
        if qual not in ("transformers.pipeline", "transformers.pipelines.pipeline"):
            return
        arg = keywords(node).get("task") or next((a for a in node.args if a.keyword is None and not a.star), None)
        task = literal(arg.value) if arg is not None else None
        if not isinstance(task, str):
            return
        instead = _instead(task)
        if instead is None:
            return
        advice = instead[0].lower() + instead[1:]
        ctx.marker(node, fitted(f"The `{task}` pipeline is gone in Transformers 5: {advice}",
                                f"This pipeline task is gone in Transformers 5: {advice}",
                                "This pipeline task is gone in Transformers 5: run its model class directly instead."),
                   detail=f"transformers 5 removed the {task!r} pipeline task: {instead}")


MODEL = "transformers.PreTrainedModel"
_COPY = "copy its 4.x code into the project (v5 models build their own masks)"
#: the model helpers (4.x ``ModuleUtilsMixin`` / ``PreTrainedModel`` methods) v5 removed, with what to do instead; a
#: name counts only while the generated upgrade data lists it among PreTrainedModel's removed attributes
MODEL_HELPERS = {
    "get_head_mask": "drop head_mask (v5 layers take none) or copy its 4.x code into the project",
    "invert_attention_mask": _COPY,
    "get_extended_attention_mask": _COPY,
    "create_extended_attention_mask_for_decoder": _COPY,
    "floating_point_ops": "copy its 4.x code into the project",
    "estimate_tokens": "copy its 4.x code into the project",
    "prune_heads": "drop the call or prune the layers by hand",
    "to_bettertransformer": "drop the call: v5 models run SDPA attention by default",
    "reverse_bettertransformer": "drop the call: v5 models run SDPA attention by default",
}


class RemovedModelHelpers(PythonRule):
    id = "NM623"
    title = "Model helper methods removed in v5 (get_head_mask, invert_attention_mask, get_extended_attention_mask...)"
    fix = "manual"
    triggers = tuple(f".{name}(" for name in MODEL_HELPERS)
    why = """
        Transformers 5 removed the mask and bookkeeping helpers 4.x models inherited from
        `ModuleUtilsMixin` (`get_head_mask`, `invert_attention_mask`, `get_extended_attention_mask`,
        `create_extended_attention_mask_for_decoder`, `floating_point_ops`, `estimate_tokens`), head
        pruning (`prune_heads`) and the BetterTransformer conversion: calling one raises an
        AttributeError. Code that drives a model's submodules itself (a wrapper that traces the
        encoder of a Perceiver, a hand-written forward) called them; v5 models build their masks in
        `transformers.masking_utils` and their layers take no head mask. The list is checked against
        the generated upgrade data (PreTrainedModel's removed attributes).
    """
    before = """
        from transformers import PerceiverModel

        model = PerceiverModel.from_pretrained("deepmind/multimodal-perceiver")
        mask = model.invert_attention_mask(attention_mask)
    """
    after = """
        from transformers import PerceiverModel

        model = PerceiverModel.from_pretrained("deepmind/multimodal-perceiver")
        # TODO(neuron-migrate NM623): `invert_attention_mask` is gone in Transformers 5: copy its 4.x code into the project (v5 models build their own masks).
        mask = model.invert_attention_mask(attention_mask)
    """
    caveats = """
        The receiver's type is not followed: a call counts in a unit that imports Transformers (or
        optimum, whose models the migration makes Transformers ones) and defines no function of that
        name (a project's own model class may provide it).
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute):
            return
        name = func.attr.value
        advice = MODEL_HELPERS.get(name)
        last = data().removed_attr(MODEL, name) if advice is not None else None
        if last is None:
            return
        if not _imports_transformers(ctx) or re.search(rf"\bdef\s+{name}\b", ctx.source):
            return
        ctx.marker(node, fitted(f"`{name}` is gone in Transformers 5: {advice}.",
                                f"This model helper is gone in Transformers 5: {advice}."),
                   detail=f"transformers 5 removed PreTrainedModel.{name} (last in {last})")


def _imports_transformers(ctx: PythonContext) -> bool:
    key = "NM623.imports_transformers"
    if key not in ctx.scratch:
        ctx.scratch[key] = any(b.qualified.split(".", 1)[0] in ("transformers", "optimum")
                               for b in ctx.imports.all_bindings())
    return ctx.scratch[key]


RULES = (EncodePlus, FlashAttention, RemovedArgumentFields, TorchscriptFlag, ChatTemplateTensors, TargetTokenizer,
         RemovedPipelineTasks, RemovedModelHelpers)
