"""NM110: reads of optimum-neuron compile settings on models this tool migrates.

A model loaded through any optimum.neuron class (``NeuronModelForCausalLM``, the traced
``NeuronModelFor<Task>`` classes, ``NeuronModelForEmbedding``, ...) carried the shapes it was
compiled for::

    model = NeuronModelForCausalLM.from_pretrained(model_id, export=True, batch_size=1, sequence_length=512)
    max_length = model.neuron_config.sequence_length
    padded = model.config.neuron["static_sequence_length"]

A native Transformers model has neither ``neuron_config`` nor ``config.neuron``. When the load in
the same unit passed the value as a literal, the read becomes that literal (the shape the
inputs are padded to / the static cache length); otherwise a marker says what to read instead::

    model = AutoModelForCausalLM.from_pretrained(model_id, device_map="neuron")
    max_length = 512
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.common.export_only import inside_export_only
from codemods.common.statements import called_statement, remove_small_statement
from codemods.inference.args import literal
from migrator.model import fitted
from migrator.rules import PythonContext, PythonRule

#: what to read instead of model.neuron_config.<field> / model.config.neuron[<field>]
NEURON_CONFIG_FIELDS = {
    "sequence_length": "`{m}.generation_config.max_cache_len`",
    "max_context_length": "`{m}.generation_config.max_cache_len`",
    "batch_size": "the batch size you pad the prompts to",
    "max_batch_size": "the batch size you pad the prompts to",
    "tp_degree": "`{m}.tp_size` (None when the model is not sharded)",
    "tensor_parallel_size": "`{m}.tp_size` (None when the model is not sharded)",
    "num_cores": "`{m}.tp_size` (None when the model is not sharded)",
    "auto_cast_type": "`{m}.dtype`",
    "torch_dtype": "`{m}.dtype`",
    "checkpoint_id": "the original checkpoint id you now load",
    "on_device_sampling": "`{m}.generate(do_sample=True, ...)` (sampling runs in generate)",
}
#: methods of a config object (`model.neuron_config.to_dict()`): the whole compile settings are read
_CONFIG_METHODS = ("to_dict", "to_json_string", "to_json_file", "save_pretrained", "__dict__")
#: the sequence-length fields, and what stands for them on a model that does not generate (an encoder)
_LENGTHS = ("sequence_length", "max_context_length")
PAD_HINT = "the max_length you pad the inputs to (padding=\"max_length\")"
EITHER_HINT = "the max_length you pad inputs to (or generation_config.max_cache_len)"
#: the optimum.neuron classes whose models generate (a generation config, a cache)
_GENERATIVE = re.compile(r"CausalLM|Seq2SeqLM|ConditionalGeneration|ImageTextToText|SpeechSeq2Seq|Whisper|Decoder")
#: keywords of the optimum-neuron (NxD) decoders' forward that a native model's forward does not accept
FORWARD_ONLY = ("seq_ids", "sampling_params")
FORWARD_MARKER = "Drop `{kw}=` (optimum-neuron forward arguments): a native model samples in `{m}.generate(...)`."
#: field read -> the load keywords that gave it (first found wins)
LOAD_KEYWORDS = {
    "sequence_length": ("sequence_length", "n_positions"),
    "max_context_length": ("sequence_length", "n_positions"),
    "batch_size": ("batch_size",),
    "max_batch_size": ("batch_size",),
    "tp_degree": ("tensor_parallel_size", "num_cores", "tp_degree"),
    "tensor_parallel_size": ("tensor_parallel_size", "num_cores", "tp_degree"),
    "num_cores": ("num_cores", "tensor_parallel_size", "tp_degree"),
}
#: fields (and runtime attributes) that were the compiled batch size: with no literal from the load, the
#: number of prompts the script passes, where that is one list of prompts it holds
BATCH_FIELDS = ("batch_size", "max_batch_size")
#: methods of optimum.neuron classes that return a model
LOADS = ("from_pretrained", "export")
#: runtime attributes of optimum-neuron models that native models do not have: the load keywords
#: that gave their value (None: a method), and what to use instead
RUNTIME = {
    # (generation_config.max_cache_len is None unless the code sets it: the length lives in the code)
    "max_length": (("sequence_length",), "the sequence length you load it for, kept in your code"),
    "batch_size": (("batch_size",), "the batch size you pad the prompts to"),
    # (a forward gives every position's logits, what scoring code read; generate gives tokens)
    "prepare_inputs_for_prefill": (None, "`{m}(input_ids, ...)` for logits or `{m}.generate(...)`"),
    "prepare_inputs_for_decode": (None, "`{m}(input_ids, ...)` for logits or `{m}.generate(...)`"),
    "reset_generation": (None, None),  # a static cache is reset by each generate() call: the call goes
}


def _field(node: cst.Attribute, parent: cst.CSTNode | None) -> str | None:
    """``.field`` after ``x.neuron_config`` / ``["field"]`` after ``x.config.neuron``."""
    if node.attr.value == "neuron_config":
        if isinstance(parent, cst.Attribute) and parent.value is node:
            return parent.attr.value
        return None
    if isinstance(parent, cst.Subscript) and parent.value is node and len(parent.slice) == 1:
        index = parent.slice[0].slice
        if isinstance(index, cst.Index):
            value = literal(index.value)
            if isinstance(value, str):
                return value
    return None


class NeuronConfigReads(PythonRule):
    id = "NM110"
    markers = (
        ("Replace `{read}` by {instead}.", """Models loaded through optimum.neuron classes carried their compile
        settings (`model.neuron_config`, `model.config.neuron`); a native Transformers model has neither. The
        marker names the native value that says the same: generation_config.max_cache_len for the sequence
        length, model.dtype for auto_cast_type, model.tp_size (None when not sharded) for the core count, and
        the batch size you pad the prompts to for the batch size."""),
        ("Remove `{read}`: a native model has no optimum-neuron compile settings.", """This optimum-neuron
        compile setting has no native counterpart; the code reading it has to go or read a value of its own."""),
    )
    title = ("model.neuron_config.* / model.config.neuron[...] / model.max_length... -> the literal the load "
             "passed, else a marker")
    fix = "mixed"
    triggers = ("neuron_config", "config.neuron", "optimum.neuron", "optimum import")
    why = """
        Models loaded through optimum.neuron classes carried their compile settings:
        `model.neuron_config` (batch_size, sequence_length, tp_degree, checkpoint_id, ... on the
        NxD decoders) and `model.config.neuron` (a dict: `sequence_length`, `num_cores`,
        `auto_cast_type`, `checkpoint_id` on the old decoders; `static_sequence_length`,
        `static_batch_size`, ... on traced models). A native Transformers model has neither. When
        the load in the same unit passed the value as an integer literal, the read becomes that
        literal (it is the shape the migrated code pads to, or the static cache length); other
        reads get a marker naming what to read instead (`generation_config.max_cache_len`,
        `model.tp_size`, `model.dtype`). A batch-size read with no literal from the load (a
        pre-exported model) becomes `len(prompts)` where the scope holds one list of strings that it
        passes to a call (`tokenizer(prompts, ...)`): the batch the script feeds the model.
    """
    before = """
        from optimum.neuron import NeuronModelForCausalLM

        def load(model_id):
            model = NeuronModelForCausalLM.from_pretrained(model_id, export=True, batch_size=1, sequence_length=512)
            return model, model.neuron_config.sequence_length
    """
    after = """
        from transformers import AutoModelForCausalLM

        def load(model_id):
            model = AutoModelForCausalLM.from_pretrained(model_id, device_map="neuron")
            model.generation_config.cache_implementation = "static"
            model.generation_config.max_cache_len = 512
            return model, 512
    """
    caveats = """
        Only in units that import optimum.neuron. The model must be a name or attribute assigned
        from `<optimum.neuron class>.from_pretrained(...)` (or `.export(..., neuron_config=cfg)` with
        `cfg = <class>.get_neuron_config(...)`) earlier in the unit, with the value as an integer
        literal; a write to the attribute, a whole-object read (`model.neuron_config`), a field the
        load did not pass, or a model the rule did not see loaded gets a marker instead.
        `input_static_shapes` reads are NM107's. The runtime attributes of the optimum-neuron model
        classes (`max_length`, `batch_size`, `prepare_inputs_for_prefill`, `prepare_inputs_for_decode`,
        `reset_generation`) on such a model: the literal the load passed (`sequence_length`,
        `batch_size`), else a marker. A call of such a model (or its `forward`) with the NxD decoders'
        `seq_ids=` / `sampling_params=` keywords gets a marker (the native forward rejects them).
    """

    def handlers(self):
        return {cst.Assign: self._on_assign, cst.Attribute: self._on_attribute, cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        """``model(ids, seq_ids=..., sampling_params=...)`` / ``model.forward(...)`` on a model the unit
        loaded through optimum.neuron: the native forward raises TypeError on these keywords."""
        kws = [a.keyword.value for a in node.args if a.keyword is not None and a.keyword.value in FORWARD_ONLY]
        if not kws or not self._active(ctx):
            return
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "forward":
            func = func.value
        model = ctx.module.code_for_node(func)
        if model not in ctx.local_state()["models"]:
            return  # not a model this unit loaded through optimum.neuron
        ctx.marker(node, fitted(FORWARD_MARKER.format(kw="=`, `".join(kws), m=model),
                                FORWARD_MARKER.format(kw="=`, `".join(kws), m="model")))

    def _active(self, ctx: PythonContext) -> bool:
        state = ctx.local_state()
        if "on" not in state:
            state["on"] = any(b.qualified == "optimum.neuron" or b.qualified.startswith("optimum.neuron.")
                              for b in ctx.imports.all_bindings())
            state["models"], state["configs"] = {}, {}
        return state["on"]

    # ------------------------------------------------------------------ what the loads passed
    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        value = node.value
        if isinstance(value, cst.List) and value.elements and len(node.targets) == 1 \
                and isinstance(node.targets[0].target, cst.Name) \
                and all(isinstance(e, cst.Element) and isinstance(e.value, (cst.SimpleString, cst.ConcatenatedString))
                        for e in value.elements):
            ctx.local_state().setdefault("prompt_lists", set()).add((ctx.scope_id, node.targets[0].target.value))
            return
        if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                and value.func.attr.value in (*LOADS, "get_neuron_config")) or len(node.targets) != 1:
            return
        if not self._active(ctx):
            return
        qual = ctx.class_qualname(value.func.value) or ""
        if not qual.startswith("optimum.neuron."):
            return
        target = node.targets[0].target
        if not isinstance(target, (cst.Name, cst.Attribute)):
            return
        state = ctx.local_state()
        code = ctx.module.code_for_node
        kw = {a.keyword.value: a.value for a in value.args if a.keyword is not None}
        known = {k: v for k, v in kw.items() if isinstance(v, cst.Integer)}
        method = value.func.attr.value
        if method == "get_neuron_config":
            if isinstance(target, cst.Name):
                state["configs"][target.value] = known
            return
        if method == "export":
            cfg = kw.get("neuron_config")
            if cfg is None and len(value.args) > 1 and value.args[1].keyword is None:
                cfg = value.args[1].value
            known = dict(state["configs"].get(cfg.value, {})) if isinstance(cfg, cst.Name) else {}
        state["models"][code(target)] = known
        state.setdefault("generative", {})[code(target)] = _GENERATIVE.search(qual) is not None

    # ------------------------------------------------------------------ the reads
    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        attr = node.attr.value
        if attr in ("neuron_config", "neuron", *RUNTIME) and inside_export_only(ctx):
            return  # a statement of an export-only load: left as it is with the load (and its marker)
        if attr in RUNTIME:
            self._runtime(node, ctx)
            return
        if attr not in ("neuron_config", "neuron"):
            return
        if attr == "neuron" and not (isinstance(node.value, cst.Attribute) and node.value.attr.value == "config"):
            return
        if not self._active(ctx) or ctx.qualname(node) is not None:
            return  # an imported module's attribute (optimum.neuron itself), not a model's
        stack = ctx.stack
        parent = stack[-2] if len(stack) > 1 else None
        model_expr = node.value.value if attr == "neuron" else node.value  # type: ignore[attr-defined]
        model = ctx.module.code_for_node(model_expr)
        models = ctx.local_state()["models"]
        field = _field(node, parent)
        read = parent if field is not None else node
        above = stack[-3] if field is not None and len(stack) > 2 else parent
        written = isinstance(above, (cst.AssignTarget, cst.AugAssign, cst.Del)) or (
            isinstance(above, cst.AnnAssign) and above.target is read)
        if field is not None and not written and model in models:
            key = field[len("static_"):] if field.startswith("static_") else field
            for name in LOAD_KEYWORDS.get(key, (key,)):
                value = models[model].get(name)
                if value is not None:
                    what = ctx.module.code_for_node(read)  # type: ignore[arg-type]
                    ctx.replace(read, value.deep_clone())  # type: ignore[arg-type]
                    ctx.finding(read, f"{what} -> {value.value}: the value the optimum-neuron load passed "  # type: ignore[arg-type]
                                      "(a native model has no compile settings)")
                    return
            if key in BATCH_FIELDS and self._prompt_count(read, ctx):  # type: ignore[arg-type]
                return
        what = ctx.module.code_for_node(read)  # type: ignore[arg-type]
        if field is not None:
            key = field[len("static_"):] if field.startswith("static_") and field[7:] in LOAD_KEYWORDS else field
            instead = NEURON_CONFIG_FIELDS.get(key)
            if instead is None and model not in models and not (attr == "neuron_config" and key in _CONFIG_METHODS):
                return  # an unknown field on an unknown object: maybe not optimum-neuron's
            if key in _LENGTHS and not ctx.local_state().get("generative", {}).get(model, False):
                # an encoder's (a traced model's static_sequence_length, a feature extractor's): no generation
                # config, no cache; the length is the one the inputs are padded to
                instead = PAD_HINT if field.startswith("static_") or model in models else EITHER_HINT
            hint = instead.format(m=model) if instead else ""
            short = instead.format(m="model") if instead else ""
        else:
            hint = short = "generation_config.max_cache_len, dtype, tp_size or your padded batch size"
        if hint:
            ctx.marker(node, fitted(f"Replace `{what}` by {hint}.", f"Replace this optimum-neuron setting by {short}."))
        else:
            ctx.marker(node, f"Remove `{what}`: a native model has no optimum-neuron compile settings.")

    def _runtime(self, node: cst.Attribute, ctx: PythonContext) -> None:
        """``model.max_length``, ``model.prepare_inputs_for_prefill(...)``...: attributes of the
        optimum-neuron model classes, on a model the unit loaded through one of them."""
        if not self._active(ctx):
            return
        model = ctx.module.code_for_node(node.value)
        models = ctx.local_state()["models"]
        if model not in models:
            return  # not a model this unit loaded through optimum.neuron: may be anything
        keywords, instead = RUNTIME[node.attr.value]
        parent = ctx.parent
        written = isinstance(parent, (cst.AssignTarget, cst.AugAssign, cst.Del)) or (
            isinstance(parent, cst.AnnAssign) and parent.target is node)
        what = ctx.module.code_for_node(node)
        if instead is None:
            statement = called_statement(ctx, node)
            if statement is not None:
                remove_small_statement(ctx, *statement)
                ctx.finding(node, f"{what}() removed: a static cache is reset by each generate() call")
                return
            instead = "nothing: a static cache is reset by each `generate()` call"
        for name in keywords or ():
            value = models[model].get(name)
            if value is not None and not written:
                ctx.replace(node, value.deep_clone())
                ctx.finding(node, f"{what} -> {value.value}: the value the optimum-neuron load passed "
                                  "(a native model has no such attribute)")
                return
        if node.attr.value in BATCH_FIELDS and not written and self._prompt_count(node, ctx):
            return
        advice = instead.format(m=model)
        ctx.marker(node, fitted(f"Use {advice.split(' (')[0]} instead of `{what}`: a native model has no such attribute.",
                                f"Replace `{what}` by {advice.split(' (')[0]}.",
                                f"Replace this optimum-neuron attribute by {advice.split(' (')[0]}.",
                                f"Replace this optimum-neuron attribute by {instead.format(m='model').split(' (')[0]}."),
                   detail=f"`{what}` (an optimum-neuron model attribute) does not exist on a native model: use {advice}")

    def _prompt_count(self, read: cst.BaseExpression, ctx: PythonContext) -> bool:
        """A batch-size read where the load passed no literal: ``len(prompts)`` when this scope holds
        exactly one list of strings that it passes to a call (``tokenizer(prompts, ...)``,
        ``tokenizer(prompts[:n])``): the batch the script feeds the model."""
        lists = {name for scope, name in ctx.local_state().get("prompt_lists", ()) if scope == ctx.scope_id}
        passed = [name for name in sorted(lists)
                  if re.search(rf"\(\s*{re.escape(name)}\s*[\[,)]", ctx.source)]
        if len(passed) != 1:
            return False
        what = ctx.module.code_for_node(read)
        ctx.replace(read, cst.parse_expression(f"len({passed[0]})"))
        ctx.finding(read, f"{what} -> len({passed[0]}): the prompts the script passes are its batch (a native model "
                          "has no compiled batch size)")
        return True


RULES = (NeuronConfigReads,)
