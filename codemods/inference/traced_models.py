"""NM103: traced optimum.neuron models (NeuronModelFor<Task>, NeuronBert*, NeuronCLIP*, ...) -> Transformers on "neuron".

optimum-neuron traced encoder, vision and audio models for static input shapes::

    tokenizer = AutoTokenizer.from_pretrained(model_id)
    model = NeuronModelForSequenceClassification.from_pretrained(model_id, export=True, batch_size=1, sequence_length=128)
    inputs = tokenizer(text, return_tensors="pt")
    logits = model(**inputs).logits

Under TorchNeuron the eager Transformers class runs on the ``neuron`` device. The static sequence
length becomes tokenizer padding (one shape, one compiled graph) and the inputs move to the model::

    tokenizer = AutoTokenizer.from_pretrained(model_id)
    model = AutoModelForSequenceClassification.from_pretrained(model_id, device_map="neuron")
    inputs = tokenizer(text, return_tensors="pt", padding="max_length", max_length=128, truncation=True).to(model.device)
    logits = model(**inputs).logits

The rename table (NM100) renames the classes; this rule owns their ``from_pretrained`` arguments
and rewrites the tokenizer calls that feed the model in the same scope. ``NeuronSentenceTransformers``
(``NeuronModelForSentenceTransformers``) becomes ``SentenceTransformer(model_id, device="neuron")``.
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.common.export_only import mark_export_only, never_run
from codemods.inference.args import (
    drop_expanded_dicts,
    COMPILER_KNOBS,
    DTYPES,
    EQ,
    NOT,
    expand_literal_kwargs,
    literal_dicts,
    hug_layout,
    indent_of,
    layout,
    line_context,
    literal,
    prefix_len,
    quote_style,
    torch_dtype,
)
from codemods.common.renames import load_table
from codemods.common.arg_plan import ArgPlan, apply_plan
from migrator.model import fitted
from migrator.rules import PythonContext, PythonRule

#: traced (NeuronTracedModel) classes whose calls this rule owns, by class name
TRACED_CLASSES = (
    "NeuronModelForFeatureExtraction", "NeuronModelForMaskedLM", "NeuronModelForMultipleChoice",
    "NeuronModelForQuestionAnswering", "NeuronModelForSequenceClassification", "NeuronModelForTokenClassification",
    "NeuronModelForImageClassification", "NeuronModelForObjectDetection", "NeuronModelForSemanticSegmentation",
    "NeuronModelForAudioClassification", "NeuronModelForAudioFrameClassification", "NeuronModelForCTC",
    "NeuronModelForXVector", "NeuronModelForSeq2SeqLM", "NeuronBertModel", "NeuronBertForMaskedLM",
    "NeuronBertForMultipleChoice", "NeuronBertForQuestionAnswering", "NeuronBertForSequenceClassification",
    "NeuronBertForTokenClassification", "NeuronCLIPModel", "NeuronCLIPForImageClassification",
    "NeuronYolosForObjectDetection", "NeuronWhisperForConditionalGeneration",
    "NeuronModelForSentenceTransformers", "NeuronSentenceTransformers",
)
SENTENCE_TRANSFORMERS = ("NeuronModelForSentenceTransformers", "NeuronSentenceTransformers")


def _sources() -> dict[str, str]:
    """qualified source name -> class name, for every import path the rename table knows."""
    out: dict[str, str] = {}
    for qual, rename in load_table().items():
        name = qual.rsplit(".", 1)[1]
        if rename.rule == "NM100" and name in TRACED_CLASSES:
            out[qual] = name
    return out


SOURCES = _sources()

#: optimum.exporters.neuron InputShapesArguments
SHAPE_KWARGS = (
    "batch_size", "text_batch_size", "image_batch_size", "sequence_length", "num_choices", "width", "height",
    "image_size", "num_images_per_prompt", "patch_size", "num_channels", "feature_size", "nb_max_frames",
    "audio_sequence_length", "visual_seq_length", "point_batch_size", "nb_points_per_image", "num_beams",
    "vae_scale_factor", "encoder_hidden_size", "image_encoder_shapes", "rotary_axes_dim",
)
KNOBS = tuple(dict.fromkeys((*COMPILER_KNOBS, "export", "auto_cast_type", "tensor_parallel_size")))
#: optimum-neuron's export defaults of (auto_cast, auto_cast_type) where a class's differ from NeuronTracedModel's
#: (None: no cast, the model ran in float32): the seq2seq models (NeuronModelForConditionalGeneration) cast
#: their matmuls to bf16 (modeling_seq2seq.py, 0.0.x to 0.4)
CAST_DEFAULTS = {"NeuronModelForSeq2SeqLM": ("matmul", "bf16"), "NeuronWhisperForConditionalGeneration": ("matmul", "bf16")}
DTYPE_KWARGS = ("torch_dtype", "dtype")
CALL_TIME = ("output_attentions", "output_hidden_states")
TOKENIZER_SUFFIXES = ("Tokenizer", "TokenizerFast")
PAD_KEYS = ("padding", "max_length", "truncation")



def _short(code: str, width: int = 30) -> str:
    """Code as a marker names it: one line, at most ``width`` characters."""
    code = " ".join(code.split())
    return code if len(code) <= width else code[: width - 3] + "..."


class TracedModelsOnNeuron(PythonRule):
    id = "NM103"
    title = "Traced NeuronModelFor*/NeuronBert*/NeuronCLIP*... -> Transformers from_pretrained(device_map='neuron') with padding"
    fix = "mixed"
    triggers = tuple(TRACED_CLASSES)
    owns = tuple(SOURCES)
    why = """
        optimum-neuron traced encoder, vision and audio models ahead of time for static input
        shapes (`export=True, batch_size=..., sequence_length=...` plus compiler options). Under
        TorchNeuron the Transformers class runs eagerly on the `neuron` device and compiles per input
        shape, so the load becomes `from_pretrained(id, device_map="neuron")` (with
        `dtype=` of `auto_cast_type` where `auto_cast="all"` cast the whole model; `"matmul"`, the
        seq2seq models' default, cast only the matmuls: a marker asks for `torch.autocast`; without
        `auto_cast` the model ran in float32 and `auto_cast_type` is dropped), the compiler options
        go, and the static sequence length becomes padding
        of the tokenizer call that feeds the model (`padding="max_length", max_length=N,
        truncation=True`), whose output is moved to the model (`.to(model.device)`).
    """
    before = """
        from optimum.neuron import NeuronModelForSequenceClassification
        from transformers import AutoTokenizer

        def classify(model_id, text):
            tokenizer = AutoTokenizer.from_pretrained(model_id)
            model = NeuronModelForSequenceClassification.from_pretrained(
                model_id, export=True, batch_size=1, sequence_length=128
            )
            inputs = tokenizer(text, return_tensors="pt")
            return model(**inputs).logits
    """
    after = """
        from transformers import AutoModelForSequenceClassification
        from transformers import AutoTokenizer

        def classify(model_id, text):
            tokenizer = AutoTokenizer.from_pretrained(model_id)
            model = AutoModelForSequenceClassification.from_pretrained(model_id, device_map="neuron")
            inputs = tokenizer(
                text, return_tensors="pt", padding="max_length", max_length=128, truncation=True
            ).to(model.device)
            return model(**inputs).logits
    """
    caveats = """
        The tokenizer call is rewritten when, in the same function (or module), a name assigned
        from `*Tokenizer*.from_pretrained(...)` is called and its result is passed to the model as
        `model(**inputs)` / `model(**tokenizer(...))` / `model.generate(**inputs)`; otherwise a
        marker asks to pad to the compiled shape, or, without one, to move the inputs of the model's
        calls where it is called elsewhere (`model(...)`: generate() moves its inputs itself). `batch_size` != 1 and the other static shapes
        (image/audio sizes, num_choices) become a marker (feed inputs of those shapes);
        `num_beams` is added to the model's generate() calls in the same scope that do not pass
        it (a marker when there is none: the model is used elsewhere). `output_attentions`/`output_hidden_states`
        are kept: from_pretrained sets them on the config. `tensor_parallel_size` > 1, arguments
        in `**kwargs` variables and loads of a pre-exported (compiled) model are left to a person
        with a marker (the placement is still added). SentenceTransformer takes sentences
        (`model.encode(...)`), not tokenizer outputs: where the model is called (`model(**inputs)`,
        written for the exported model's forward) a marker asks for `model.encode(sentences)`. An export-only load (`export=True`, then only saved, pushed or asserted on in
        a test) is left as it is with a marker: the step is obsolete, its consumer loads the original
        checkpoint (codemods/common/export_only.py). A model that nothing in its function (or module)
        calls, passes or returns (only its config is read) gets no advice on the shapes of its inputs:
        its static shapes are dropped with a note.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "from_pretrained":
            qual = ctx.class_qualname(func.value)
            if qual in SOURCES:
                self._load(node, SOURCES[qual], ctx)
                return
        if isinstance(func, cst.Name):
            info = _scope(ctx)
            if id(node) in info["feeds"]:
                self._tokenizer_call(node, info["feeds"][id(node)], ctx)

    # ------------------------------------------------------------------ the model load
    def _load(self, node: cst.Call, class_name: str, ctx: PythonContext) -> None:
        stmt = ctx.statement()
        if stmt is not None and ctx.is_ignored(stmt):
            return
        if mark_export_only(ctx, node):
            return  # compile-and-save: obsolete, not a native load and re-save
        code = ctx.module.code_for_node
        quote = quote_style(node)
        st = class_name in SENTENCE_TRANSFORMERS
        args = expand_literal_kwargs(node.args, literal_dicts(ctx))
        kw = {a.keyword.value: a for a in args if a.keyword is not None}
        star = [a for a in args if a.star == "**"]
        markers: list[str] = []
        applied: list[str] = []
        export = kw.get("export")
        export_value = literal(export.value) if export is not None else None
        shapes = {k: kw[k].value for k in SHAPE_KWARGS if k in kw}
        info = _scope(ctx)
        model_name = _assigned_name(ctx, node)
        fed = model_name is not None and model_name in info["fed"]

        for a in star:
            markers.append((f"Drop export, compiler options and static shapes from **{_short(code(a.value))}; pad the inputs "
                            "instead.", "the arguments in the unpacked mapping are not seen by the rule"))
        pre_exported = export_value is not True and not shapes
        if pre_exported and not star:
            markers.append((
                "Point this load at the original checkpoint: Transformers cannot load a pre-exported Neuron model.",
                "config.json \"neuron\" -> \"checkpoint_id\" names it; pad the inputs to the shapes it was compiled "
                "for (config.json \"neuron\" -> \"static_sequence_length\")"))
        elif export is not None and export_value not in (True, False):
            markers.append(f"Point this load at the original checkpoint where export={_short(code(export.value))} is false.")

        # ---- dtype: what the compiler cast (optimum-neuron's auto_cast / auto_cast_type, with the class's defaults)
        dtype_expr: cst.BaseExpression | None = None
        acast = kw.get("auto_cast_type")
        auto_cast = kw.get("auto_cast")
        default_cast, default_type = CAST_DEFAULTS.get(class_name, (None, "bf16"))  # the compiler's --auto-cast-type
        cast = literal(auto_cast.value) if auto_cast is not None else default_cast
        value = literal(acast.value) if acast is not None else default_type
        if cast is NOT:
            markers.append(f"Pass dtype=torch.bfloat16 where auto_cast={_short(code(auto_cast.value), 20)} is 'all', "
                           "or wrap the calls in torch.autocast for 'matmul'.")
        elif cast in (None, "none"):
            if acast is not None:  # optimum-neuron ignored it: the model ran in float32
                applied.append(f"auto_cast_type={code(acast.value)} dropped: without auto_cast the model ran in "
                               "float32, as it does now")
        elif not (isinstance(value, str) and value in DTYPES):
            markers.append(f"Pass dtype=torch.bfloat16 ('bf16') or torch.float16 ('fp16') for auto_cast_type="
                           f"{_short(code(acast.value) if acast is not None else 'None', 20)}.")
        elif DTYPES[value] == "float32":
            pass
        elif cast == "all":
            dtype_expr = torch_dtype(ctx, DTYPES[value], quote, ctx.imports.binding_of(node.func))
            applied.append(f"auto_cast=\"all\", auto_cast_type={value!r} becomes dtype=torch.{DTYPES[value]}")
        elif acast is not None or auto_cast is not None:
            # "matmul": the compiler ran the matrix multiplications in that dtype and the rest in float32; a bf16
            # model would run everything in it (other numbers): autocast is the same split
            markers.append(f"Wrap the model's calls in torch.autocast(\"neuron\", dtype=torch.{DTYPES[value]}): the "
                           "export cast its matmuls only.")
        explicit_dtype = next((kw[k] for k in DTYPE_KWARGS if k in kw), None)
        if dtype_expr is not None and "Whisper" in class_name:
            # generate() does not cast float32 audio features to a bf16/fp16 model's dtype (the conv raises)
            named = _short(model_name or "model", 20)
            markers.append(f"Move the audio features with .to({named}.device, {named}.dtype): generate() does not cast them.")

        # ---- tensor parallelism
        tp = kw.get("tensor_parallel_size")
        if tp is not None and literal(tp.value) != 1:
            markers.append(("Load with DistributedConfig(tp_size=N) under torchrun if the model does not fit one "
                            "NeuronCore.", f"tensor_parallel_size={code(tp.value)} was dropped"))

        # ---- shapes
        seq = shapes.get("sequence_length")
        if shapes and never_run(ctx, node):
            # nothing here calls the model: there are no inputs to pad, no batches to feed
            listed = ", ".join(f"{k}={code(v)}" for k, v in shapes.items())
            applied.append(f"static shapes dropped: {listed} (nothing here calls the model)")
            shapes = {}
            seq = None
        if seq is not None and "Whisper" in class_name:
            # Whisper's compiled sequence_length bounded the decoder's tokens: its inputs are audio features
            markers.append((f"Pass max_length={_short(code(seq), 16)} to generate() if needed; do not pad the audio "
                            "features to it.", f"sequence_length={code(seq)} was the decoder's compiled length; the "
                            "feature extractor's max_length counts audio samples"))
        elif seq is not None:
            if fed and _copyable(seq):
                applied.append(f"sequence_length={code(seq)} becomes tokenizer padding to max_length={code(seq)}")
            elif st:
                markers.append((f"Set `model.max_seq_length = {_short(code(seq), 16)}` and encode batches of similar length "
                                "to limit recompiles.", f"sequence_length={code(seq)} was dropped: SentenceTransformer "
                                "pads each batch to its longest sentence"))
            else:
                markers.append((
                    fitted(f"Pad this model's inputs to max_length={code(seq)} (padding=\"max_length\") and move them to "
                           f"{_short(model_name or 'model', 20)}.device.",
                           "Pad this model's inputs to the compiled length (padding=\"max_length\") and move them to "
                           "its device."),
                    f"sequence_length={code(seq)} is the compiled shape: tokenizer(..., padding=\"max_length\", "
                    f"max_length={code(seq)}, truncation=True), then .to({model_name or 'model'}.device)"))
        elif (not st and not fed and model_name is not None and not never_run(ctx, node)
              and re.search(rf"(?<![\w.]){re.escape(model_name)}\s*\(", ctx.code)):
            # the model's forward is called where the rule does not rewrite the tokenizer call (another function):
            # the traced model took CPU inputs, one placed on neuron does not move them (only generate() does)
            markers.append((f"Move the inputs of {_short(model_name, 20)}(...) calls to {_short(model_name, 20)}.device: "
                            "the traced model took CPU tensors.",
                            "a model loaded with device_map=\"neuron\" does not move the inputs of its forward calls "
                            "(only generate() does): tokenizer(...).to(model.device)"))
        batch = shapes.get("batch_size")
        if batch is not None:
            if literal(batch) == 1:
                applied.append("batch_size=1 dropped")
            else:
                markers.append(fitted(f"Feed batches of exactly {code(batch)} (pad the last one) to avoid a compile per "
                                      "batch size.",
                                      "Feed batches of the compiled size (pad the last one) to avoid a compile per batch size."))
        beams = shapes.get("num_beams")
        if beams is not None:
            gens = info["generates"].get(model_name) if model_name is not None else None
            if gens and _copyable(beams):
                for gen in gens:
                    ctx.replace(gen, lambda new, v=beams: apply_plan(new, ArgPlan(add=[("num_beams", lambda: v)])))
                applied.append(f"num_beams={code(beams)} moved to the generate() calls of {model_name} in this scope")
            elif model_name is not None and model_name in info["beams"]:
                applied.append(f"num_beams={code(beams)} dropped: generate() already gets num_beams")
            else:
                markers.append(f"num_beams={code(beams)} was dropped: pass num_beams={code(beams)} to generate()")
        other = [k for k in shapes if k not in ("sequence_length", "batch_size", "num_beams")]
        if other:
            listed = ", ".join(f"{k}={code(shapes[k])}" for k in other)
            markers.append((f"Feed inputs of the static shapes {_short(listed, 50)} to avoid a compile per shape.",
                            f"static input shapes {listed} were dropped"))
        knobs = [k for k in kw if k in KNOBS and k not in ("export", "auto_cast_type", "tensor_parallel_size")]
        if knobs:
            applied.append(f"compiler options dropped: {', '.join(knobs)}")
        kept = [k for k in CALL_TIME if k in kw]
        if kept and not st:
            applied.append(f"{', '.join(kept)} kept: from_pretrained sets them on the config for every call")

        # ---- placement
        placement = "device" if st else "device_map"
        device_map = kw.get("device_map")
        replace_value: dict[str, cst.BaseExpression] = {}
        neuron = cst.SimpleString(f"{quote}neuron{quote}")
        add_placement = not any(k in kw for k in ("device", "device_map", "distributed_config"))
        if device_map is not None and literal(device_map.value) == "auto":
            replace_value["device_map"] = neuron
            applied.append("device_map=\"auto\" -> \"neuron\" (Accelerate's \"auto\" does not detect Neuron)")

        drop = set(KNOBS) | set(SHAPE_KWARGS)
        if st:
            drop |= set(CALL_TIME)
            if kept:
                markers.append(f"{', '.join(kept)} dropped: SentenceTransformer returns embeddings; pass them through "
                               "model_kwargs if you need them")
        if dtype_expr is not None:
            drop |= set(DTYPE_KWARGS)
            if explicit_dtype is not None:
                applied.append(f"{explicit_dtype.keyword.value}= dropped: auto_cast_type gives the dtype")  # type: ignore[union-attr]
        if st and explicit_dtype is not None and dtype_expr is None:
            drop |= set(DTYPE_KWARGS)
            dtype_expr = explicit_dtype.value

        indent, prefix = indent_of(ctx), prefix_len(ctx, node)

        dicts = literal_dicts(ctx)  # computed now: the rewrite runs after the pass
        def rewrite(updated: cst.Call) -> cst.Call:
            new_args: list[cst.Arg] = []
            for a in expand_literal_kwargs(updated.args, dicts):
                name = a.keyword.value if a.keyword is not None else None
                if name in drop:
                    continue
                if name in replace_value:
                    a = a.with_changes(value=replace_value[name])
                if name == "torch_dtype" and not st:
                    a = a.with_changes(keyword=cst.Name("dtype"))
                new_args.append(a)
            added: list[cst.Arg] = []
            if dtype_expr is not None:
                if st:
                    added.append(cst.Arg(keyword=cst.Name("model_kwargs"), equal=EQ, value=cst.Dict([
                        cst.DictElement(cst.SimpleString(f"{quote}dtype{quote}"), dtype_expr)
                    ])))
                else:
                    added.append(cst.Arg(keyword=cst.Name("dtype"), value=dtype_expr, equal=EQ))
            if add_placement:
                added.append(cst.Arg(keyword=cst.Name(placement), value=neuron, equal=EQ))
            at = next((i for i, a in enumerate(new_args) if a.star == "**"), len(new_args))
            new_args[at:at] = added
            new = updated
            if st and isinstance(updated.func, cst.Attribute):
                new = updated.with_changes(func=updated.func.value)  # SentenceTransformer(id, ...)
            return layout(new, new_args, ctx.module, indent, prefix)

        ctx.replace(node, rewrite)
        for dead in drop_expanded_dicts(ctx, node, dicts):
            applied.append(f"{dead} removed: its items are arguments of the call now")
        target = "SentenceTransformer(..., device=\"neuron\")" if st else "from_pretrained(..., device_map=\"neuron\")"
        ctx.finding(node, f"{class_name}.from_pretrained" + ("(export=True)" if export_value is True else "")
                    + f" -> {target}")
        held = model_name or _assigned_attribute(ctx, node)  # (`self.model = ...`, called in another method)
        if st and held is not None and re.search(rf"(?<![\w.]){re.escape(held)}\s*\(", ctx.code):
            # the exported model's forward took tokenizer outputs and returned token_embeddings/sentence_embedding
            named = _short(held, 20)
            markers.append((f"Call {named}.encode(sentences) where {named}(...) gets tokenizer outputs: SentenceTransformer "
                            "takes sentences.",
                            f"{held}.encode(sentences, output_value=None, convert_to_tensor=True) returns, per "
                            "sentence, a dict with token_embeddings and sentence_embedding"))
        for message in applied:
            ctx.finding(node, message)
        for message in markers:  # a message, or (message, its long form)
            text, detail = message if isinstance(message, tuple) else (message, None)
            ctx.marker(node, text, detail=detail)

    # ------------------------------------------------------------------ the tokenizer call feeding it
    def _tokenizer_call(self, node: cst.Call, feed: dict, ctx: PythonContext) -> None:
        stmt = ctx.statement()
        if stmt is not None and ctx.is_ignored(stmt):
            return
        model_call: cst.Call = feed["model_call"]
        kw = {a.keyword.value: a for a in expand_literal_kwargs(model_call.args, literal_dicts(ctx))
              if a.keyword is not None}
        seq = kw["sequence_length"].value if "sequence_length" in kw else None
        if not _copyable(seq):
            seq = None
        move = feed["forward"] and not feed["moved"]
        if seq is None and not move:
            return
        quote = quote_style(node)
        model = feed["model"]
        device: cst.BaseExpression = (
            cst.Attribute(value=cst.Name(model), attr=cst.Name("device")) if feed["model_first"]
            else cst.SimpleString(f"{quote}neuron{quote}")
        )
        indent = indent_of(ctx)
        prefix, rest = line_context(ctx, node)
        suffix = rest + (len(".to()") + len(ctx.module.code_for_node(device)) if move else 0)

        def rewrite(updated: cst.Call) -> cst.BaseExpression:
            new = updated
            if seq is not None:
                args = [a for a in updated.args if not (a.keyword is not None and a.keyword.value == "padding")]
                have = {a.keyword.value for a in args if a.keyword is not None}
                extra = [cst.Arg(keyword=cst.Name("padding"), value=cst.SimpleString(f"{quote}max_length{quote}"),
                                 equal=EQ)]
                if "max_length" not in have:
                    extra.append(cst.Arg(keyword=cst.Name("max_length"), value=seq.deep_clone(), equal=EQ))
                if "truncation" not in have:
                    extra.append(cst.Arg(keyword=cst.Name("truncation"), value=cst.Name("True"), equal=EQ))
                at = next((i for i, a in enumerate(args) if a.star == "**"), len(args))
                args[at:at] = extra
                new = hug_layout(updated, args, ctx.module, indent, prefix, suffix)
            if move:
                new = cst.Call(func=cst.Attribute(value=new, attr=cst.Name("to")), args=[cst.Arg(device.deep_clone())])
            return new

        ctx.replace(node, rewrite)
        what = []
        if seq is not None:
            what.append(f"padded to max_length={ctx.module.code_for_node(seq)}")
        if move:
            what.append(f"moved to {ctx.module.code_for_node(device)}")
        ctx.finding(node, f"tokenizer call feeding {model}: " + " and ".join(what))


# ---------------------------------------------------------------------- scope analysis
def _scope(ctx: PythonContext) -> dict:
    """What the innermost function (or the module) around the current node holds: the traced models
    assigned to a name, the tokenizers, and which tokenizer calls feed which model."""
    scope: cst.CSTNode = ctx.module
    for n in reversed(ctx.stack[:-1]):
        if isinstance(n, (cst.FunctionDef, cst.Lambda)):
            scope = n
            break
    cache = ctx.local_state().setdefault("scopes", {})
    if id(scope) in cache:
        return cache[id(scope)]

    assigns: list[tuple[int, str, cst.BaseExpression]] = []
    calls: list[tuple[int, cst.Call]] = []
    order = [0]

    def walk(n: cst.CSTNode) -> None:
        order[0] += 1
        if isinstance(n, cst.Assign) and len(n.targets) == 1 and isinstance(n.targets[0].target, cst.Name):
            assigns.append((order[0], n.targets[0].target.value, n.value))
        if isinstance(n, cst.Call):
            calls.append((order[0], n))
        for child in n.children:
            if isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                continue
            walk(child)

    body = scope.body if isinstance(scope, (cst.FunctionDef, cst.Lambda)) else scope
    walk(body)

    models: dict[str, tuple[int, cst.Call]] = {}
    tokenizers: set[str] = set(_module_tokenizers(ctx)) if scope is not ctx.module else set()
    encodings: dict[str, tuple[cst.Call, bool]] = {}
    for pos, name, value in assigns:
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "from_pretrained":
            qual = ctx.qualname(value.func.value) or ""
            if qual in SOURCES and SOURCES[qual] not in SENTENCE_TRANSFORMERS:
                models[name] = (pos, value)
            elif qual.endswith(TOKENIZER_SUFFIXES):
                tokenizers.add(name)
    for pos, name, value in assigns:
        moved = False
        if (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "to"
                and isinstance(value.func.value, cst.Call)):
            value, moved = value.func.value, True
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in tokenizers:
            encodings[name] = (value, moved)

    feeds: dict[int, dict] = {}
    fed: set[str] = set()
    beams: set[str] = set()
    generates: dict[str, list[cst.Call]] = {}  # generate() calls of a model without num_beams
    for _pos, call in calls:
        func = call.func
        forward = isinstance(func, cst.Name)
        if forward:
            model = func.value
        elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.attr.value == "generate":
            model = func.value.value
        else:
            continue
        if model not in models:
            continue
        if not forward and any(a.keyword is not None and a.keyword.value == "num_beams" for a in call.args):
            beams.add(model)
        elif not forward:
            generates.setdefault(model, []).append(call)
        for a in call.args:
            if a.star != "**":
                continue
            tok_call, moved = None, False
            if isinstance(a.value, cst.Name) and a.value.value in encodings:
                tok_call, moved = encodings[a.value.value]
            elif isinstance(a.value, cst.Call) and isinstance(a.value.func, cst.Name) and a.value.func.value in tokenizers:
                tok_call = a.value
            if tok_call is None:
                continue
            tok_pos = next((p for p, c in calls if c is tok_call), 0)
            model_pos, model_call = models[model]
            feeds[id(tok_call)] = {
                "model": model, "model_call": model_call, "forward": forward, "moved": moved,
                "model_first": model_pos < tok_pos,
            }
            fed.add(model)
    found = {"feeds": feeds, "fed": fed, "beams": beams, "generates": generates}
    cache[id(scope)] = found
    return found


def _module_tokenizers(ctx: PythonContext) -> set[str]:
    """Names assigned ``*Tokenizer*.from_pretrained(...)`` by module-level statements."""
    state = ctx.local_state()
    if "module_tokenizers" not in state:
        names: set[str] = set()
        for stmt in ctx.module.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if (isinstance(small, cst.Assign) and len(small.targets) == 1
                        and isinstance(small.targets[0].target, cst.Name) and isinstance(small.value, cst.Call)
                        and isinstance(small.value.func, cst.Attribute)
                        and small.value.func.attr.value == "from_pretrained"
                        and (ctx.qualname(small.value.func.value) or "").endswith(TOKENIZER_SUFFIXES)):
                    names.add(small.targets[0].target.value)
        state["module_tokenizers"] = names
    return state["module_tokenizers"]


def _copyable(expr: cst.BaseExpression | None) -> bool:
    """A shape value that can be repeated in the tokenizer call of the same scope."""
    return isinstance(expr, (cst.Integer, cst.Name, cst.Attribute))


def _single_target(ctx: PythonContext, call: cst.Call) -> cst.BaseAssignTargetExpression | None:
    """The one target of ``<target> = <call>`` (None when the call is not assigned that way)."""
    parent = ctx.parent
    if isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1:
        return parent.targets[0].target
    return None


def _assigned_attribute(ctx: PythonContext, call: cst.Call) -> str | None:
    """``self.model`` of ``self.model = <call>``: the code of an attribute the call's result is assigned to."""
    target = _single_target(ctx, call)
    return ctx.module.code_for_node(target) if isinstance(target, cst.Attribute) else None


def _assigned_name(ctx: PythonContext, call: cst.Call) -> str | None:
    target = _single_target(ctx, call)
    return target.value if isinstance(target, cst.Name) else None


RULES = (TracedModelsOnNeuron,)
