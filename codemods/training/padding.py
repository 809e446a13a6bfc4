"""NM208: tokenizer calls of training scripts pad to a fixed length.

optimum-neuron's trainers trained on fixed shapes (its argument parser insisted on
``pad_to_max_length``, its SFT collator padded every batch to ``max_length``). Natively every new
batch shape is a new Neuron compilation, so where a training script tokenizes its dataset itself
the call pads to a fixed length::

    tokenizer(batch["text"], truncation=True, max_length=512, padding=True)
    -> tokenizer(batch["text"], truncation=True, max_length=512, padding="max_length")

Without a ``max_length`` in the call, the length comes from the SFT config of the same file when
it has exactly one literal ``max_seq_length`` / ``max_length``; otherwise a marker asks for one.
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.training.sources import SFT_CONFIG_SOURCES
from codemods.common.arg_plan import (
    MAX_LINE,
    NOT_LITERAL,
    ArgPlan,
    apply_plan,
    has_star_kwargs,
    keywords,
    line_prefix,
    literal,
    quote_of,
    statement_indent,
)
from migrator.rules import PythonContext, PythonRule

#: the callee of a tokenization call: the tokenizer object itself (not one of its methods)
_TOKENIZER_RE = re.compile(r"(?:^|_)(?:tokenizer|tok|processing_class)$")
_ENDINGS = ("tokenizer", "tok", "processing_class")
_CONFIG_NAMES = frozenset(q.rsplit(".", 1)[-1] for q in SFT_CONFIG_SOURCES)
#: padding values that pad to the batch's longest sequence (a new shape per batch)
DYNAMIC = (True, "longest")


TRUNCATION_MARKER = "Add truncation=True if examples can be longer than max_length: each is a new shape."
FIXED_LENGTH_MARKER = "Pad to a fixed length (padding=\"max_length\", max_length=...): each batch shape is a compilation."


class TokenizerPadding(PythonRule):
    id = "NM208"
    markers = (
        (TRUNCATION_MARKER, """padding="max_length" without truncation keeps the examples longer than max_length,
        and each of them is a new input shape: on Neuron a new compilation of the model."""),
        (FIXED_LENGTH_MARKER, """This tokenization pads each batch to its longest sequence, a new shape (a Neuron
        compilation) per batch: pad to a fixed length with padding="max_length", max_length=<the training max
        length>."""),
    )
    title = "Training scripts: tokenizer(...) calls pad to a fixed length (padding=\"max_length\")"
    fix = "mixed"
    triggers = ("NeuronTrainer", "NeuronSFTTrainer", "NeuronSFTConfig", "NeuronTrainingArguments", "TrainiumTrainer",
                "NeuronORPOTrainer")
    why = """
        optimum-neuron trained on fixed shapes: its argument parser required pad_to_max_length
        and its SFT collator padded every batch to max_length. Natively each new batch shape is
        a new Neuron compilation (minutes), so a tokenization call in a training script that
        pads to the longest sequence of the batch (padding=True / "longest") or truncates to
        max_length without padding pads to max_length instead. Without max_length in the call,
        the SFT config's max_seq_length / max_length of the same file is used when there is one.
    """
    before = """
        from optimum.neuron import NeuronTrainer

        def tokenize(batch, tokenizer):
            return tokenizer(batch["text"], truncation=True, max_length=512, padding=True)

        trainer = NeuronTrainer(model=model, args=args, train_dataset=ds.map(tokenize, fn_kwargs={"tokenizer": tok}))
    """
    after = """
        from transformers import Trainer

        def tokenize(batch, tokenizer):
            return tokenizer(batch["text"], truncation=True, max_length=512, padding="max_length")

        trainer = Trainer(model=model, args=args, train_dataset=ds.map(tokenize, fn_kwargs={"tokenizer": tok}))
    """
    caveats = """
        Only calls of the tokenizer object itself are seen (`tokenizer(...)`, `self.tokenizer(...)`,
        `tok(...)`, `processing_class(...)`), not `tokenizer.encode`, collators or
        `apply_chat_template`. Calls with `return_tensors=` (prompts tokenized for generation)
        and an explicit `padding=False` are left alone. Padding every example to max_length
        costs compute on short examples: packing (SFTConfig packing=True,
        packing_strategy="wrapped") avoids it.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        callee = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
        if not isinstance(callee, str):
            return
        if callee in _CONFIG_NAMES and ctx.qualname(func) in SFT_CONFIG_SOURCES:
            kw = keywords(node)
            for name in ("max_seq_length", "max_length"):
                if name in kw:
                    value = literal(kw[name].value)
                    lengths = ctx.local_state().setdefault("lengths", set())
                    lengths.add(value if isinstance(value, int) and not isinstance(value, bool) else NOT_LITERAL)
                    break
            return
        if not callee.endswith(_ENDINGS) or not _TOKENIZER_RE.search(callee) or ctx.qualname(func) is not None:
            return
        if not node.args or node.args[0].keyword is not None or has_star_kwargs(node):
            return
        kw = keywords(node)
        if "return_tensors" in kw:
            return
        padding = literal(kw["padding"].value) if "padding" in kw else None
        if "padding" in kw and padding not in DYNAMIC:
            return  # "max_length" already, False / "do_not_pad" on purpose, or not a literal
        truncation = literal(kw["truncation"].value) if "truncation" in kw else None
        if "max_length" in kw:
            if padding is None and truncation in (None, False):
                return  # neither pads nor (explicitly) truncates: left as written
            self._pad(node, ctx, kw, None)
            return
        if padding is None:
            return  # no padding asked for: the collator's business
        ctx.local_state().setdefault("pending", []).append((node, ctx.statement(), statement_indent(ctx),
                                                            line_prefix(ctx, node)))

    def _pad(self, node: cst.Call, ctx: PythonContext, kw, length: int | None, where=None) -> None:
        plan = ArgPlan()
        quote = quote_of(node)
        fixed = lambda: cst.SimpleString(f"{quote}max_length{quote}")  # noqa: E731
        if "padding" in kw:
            plan.revalue["padding"] = lambda _v: fixed()
        else:
            plan.add.append(("padding", fixed))
        truncation = literal(kw["truncation"].value) if "truncation" in kw else None
        if length is not None:
            plan.add.append(("max_length", lambda: cst.Integer(str(length))))
            if truncation is None:  # SFTTrainer truncated at max_length too
                plan.add.append(("truncation", lambda: cst.Name("True")))
        elif truncation is None:
            ctx.marker(node if where is None else where[2], TRUNCATION_MARKER)
        if where is None:
            indent, prefix = statement_indent(ctx), line_prefix(ctx, node)
        else:
            indent, prefix, _statement = where
        step = ctx.module.default_indent
        ctx.replace(node, lambda new: apply_plan(new, plan, MAX_LINE, indent + " " * prefix, step))
        what = 'padding="max_length"' + (f", max_length={length} (the SFT config's)" if length is not None else "")
        ctx.finding(node, f"tokenizer call pads to a fixed length: {what} (static shapes on Neuron)")

    def finish(self, ctx: PythonContext) -> None:
        state = ctx.local_state()
        lengths = state.get("lengths", set())
        length = next(iter(lengths)) if len(lengths) == 1 and NOT_LITERAL not in lengths else None
        for node, statement, indent, prefix in state.get("pending", ()):
            if length is not None:
                self._pad(node, ctx, keywords(node), length, (indent, prefix, statement))
            else:
                ctx.marker(statement, FIXED_LENGTH_MARKER)


RULES = (TokenizerPadding,)
