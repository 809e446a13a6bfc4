"""NM102: optimum.neuron.pipeline(..., export=True, input_shapes={...}) -> transformers.pipeline(..., device="neuron").

optimum-neuron's ``pipeline()`` compiled the model for static shapes::

    classifier = pipeline("text-classification", model=model_id, export=True,
                          input_shapes={"batch_size": 1, "sequence_length": 128})

Under TorchNeuron the Transformers pipeline runs the eager model on the ``neuron`` device; the static
sequence length becomes tokenizer padding so that every call has the same shape::

    classifier = pipeline("text-classification", model=model_id, device="neuron",
                          padding="max_length", max_length=128, truncation=True)

The rename table (NM100) renames ``pipeline`` itself; this rule owns its arguments.
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.inference.args import (
    drop_expanded_dicts,
    COMPILER_KNOBS,
    DTYPES,
    EQ,
    expand_literal_kwargs,
    literal_dicts,
    indent_of,
    layout,
    literal,
    prefix_len,
    quote_style,
    torch_dtype,
)
from migrator.rules import PythonContext, PythonRule

SOURCES = (
    "optimum.neuron.pipeline",
    "optimum.neuron.pipelines.pipeline",
    "optimum.neuron.pipelines.transformers.pipeline",
    "optimum.neuron.pipelines.transformers.base.pipeline",
)
#: optimum.neuron.pipeline's positional parameters (transformers.pipeline's third one is config, not tokenizer)
POSITIONAL = (
    "task", "model", "tokenizer", "feature_extractor", "image_processor", "use_fast", "export", "input_shapes",
    "compiler_args", "token", "revision", "trust_remote_code",
)
#: how a task's pipeline takes tokenizer arguments (transformers 5.23):
#: "call" = as pipeline keyword arguments; otherwise the name of a dict keyword argument
TOKENIZER_KWARGS = {
    "text-classification": "call",
    "sentiment-analysis": "call",
    "fill-mask": "tokenizer_kwargs",
    "feature-extraction": "tokenize_kwargs",
}
GENERATION_TASKS = ("text-generation",)
#: compiler options text-generation took as keywords (``task`` is pipeline()'s own first parameter)
KNOBS = tuple(k for k in COMPILER_KNOBS if k not in ("task", "compiler_args"))
DROPPED = ("export", "input_shapes", "compiler_args", *KNOBS, "auto_cast_type")
TP_KWARGS = ("num_cores", "tensor_parallel_size")
SHAPE_KWARGS = ("batch_size", "sequence_length")



def _short(code: str, width: int = 30) -> str:
    """Code as a marker names it: one line, at most ``width`` characters."""
    code = " ".join(code.split())
    return code if len(code) <= width else code[: width - 3] + "..."


class PipelineStaticShapes(PythonRule):
    id = "NM102"
    title = "optimum.neuron pipeline(export=True, input_shapes=...) -> transformers.pipeline(device='neuron') with padding"
    fix = "mixed"
    triggers = ("optimum.neuron", "optimum import")
    owns = SOURCES
    why = """
        optimum-neuron's `pipeline()` compiled the model for the static shapes of `input_shapes`
        (`export=True`) or loaded a compiled artifact. Transformers' own `pipeline()` runs the eager
        model on the `neuron` device: `export`, `input_shapes` and `compiler_args` go, `device="neuron"`
        is added (`device_map="auto"` does not detect Neuron and would load on CPU), and the static
        sequence length becomes tokenizer padding (`padding="max_length", max_length=N,
        truncation=True`) so that every call has the compiled shape. For text generation the sequence
        length becomes a static cache (`cache_implementation="static", max_cache_len=N`).
    """
    before = """
        from optimum.neuron import pipeline

        classifier = pipeline(
            "text-classification",
            model="distilbert-base-uncased-finetuned-sst-2-english",
            export=True,
            input_shapes={"batch_size": 1, "sequence_length": 128},
        )
    """
    after = """
        from transformers import pipeline

        classifier = pipeline(
            "text-classification",
            model="distilbert-base-uncased-finetuned-sst-2-english",
            device="neuron",
            padding="max_length",
            max_length=128,
            truncation=True,
        )
    """
    caveats = """
        Padding is emitted for text-classification/sentiment-analysis (pipeline keywords), fill-mask
        (`tokenizer_kwargs=`) and feature-extraction (`tokenize_kwargs=`); for other tasks a marker
        asks to pad to the shape. `batch_size` > 1 becomes the pipeline's `batch_size=`. Left to a
        person with a marker: a pipeline without `export=True` on a model id or path (it loaded a
        compiled artifact: point to the original checkpoint), `input_shapes`/`**kwargs` that are not
        literals, a task that is not a literal, `num_cores`/`tensor_parallel_size` > 1 and the
        question-answering task (transformers 5.23 has no such pipeline). `device="neuron"` is added
        where the pipeline loads the model itself (a model id, or `export=` given); a model held in a
        variable the unit does not load a model into (a path, or a model loaded elsewhere) gets a
        marker: without `device=` the pipeline runs on the CPU.
    """

    def handlers(self):
        return {cst.Module: self._on_module, cst.Call: self._on_call}

    def _on_module(self, node: cst.Module, ctx: PythonContext) -> None:
        """Ask for ``torch`` before the rename table asks for ``transformers.pipeline`` on the same
        import line (it does so on the first name it sees), so that ``import torch`` comes first."""
        if "auto_cast_type" not in ctx.source:
            return
        rule = self

        class Find(cst.CSTVisitor):
            def visit_Call(self, call: cst.Call) -> None:
                if ctx.qualname(call.func) in SOURCES:
                    dtype = rule._dtype_of(call, ctx)
                    if dtype is not None:
                        torch_dtype(ctx, dtype, '"', ctx.imports.binding_of(call.func))

        node.visit(Find())

    @staticmethod
    def _dtype_of(call: cst.Call, ctx: PythonContext) -> str | None:
        kw = {a.keyword.value: a for a in expand_literal_kwargs(call.args, literal_dicts(ctx)) if a.keyword is not None}
        if "auto_cast_type" not in kw or "dtype" in kw or "torch_dtype" in kw:
            return None
        value = literal(kw["auto_cast_type"].value)
        return DTYPES.get(value) if isinstance(value, str) else None

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        if ctx.qualname(node.func) not in SOURCES or not node.args:
            return
        stmt = ctx.statement()
        if stmt is not None and ctx.is_ignored(stmt):
            return
        code = ctx.module.code_for_node
        quote = quote_style(node)
        args = _keywordize(expand_literal_kwargs(node.args, literal_dicts(ctx)))
        kw = {a.keyword.value: a for a in args if a.keyword is not None}
        star = [a for a in args if a.star]
        for i, a in enumerate(args[:2]):
            if a.keyword is None and not a.star:
                kw.setdefault(POSITIONAL[i], a)  # read only: task and model stay positional
        markers: list[str] = []
        applied: list[str] = []

        task_arg = kw.get("task")
        task = literal(task_arg.value) if task_arg is not None else None
        if not isinstance(task, str):
            task = None
        model_arg = kw.get("model")
        model_is_id = model_arg is not None and isinstance(model_arg.value, (cst.SimpleString, cst.ConcatenatedString,
                                                                             cst.FormattedString))
        export = kw.get("export")
        export_value = literal(export.value) if export is not None else None
        for a in star:
            markers.append((f"Drop export, input_shapes and compiler_args from {a.star}{_short(code(a.value))}, and pad the "
                            "inputs instead.", "the arguments in the unpacked mapping are not seen by the rule"))
        if export is not None and export_value is not True and export_value is not False:
            markers.append(f"Point model= at the original checkpoint where export={_short(code(export.value))} is false.")

        added: list[tuple[str, cst.BaseExpression]] = []
        # ---- shapes: input_shapes={...} and the text-generation keywords
        shapes: dict[str, cst.BaseExpression] = {}
        if "input_shapes" in kw:
            value = kw["input_shapes"].value
            if isinstance(value, cst.Dict) and all(
                isinstance(e, cst.DictElement) and isinstance(literal(e.key), str) for e in value.elements
            ):
                for e in value.elements:
                    shapes[literal(e.key)] = e.value  # type: ignore[index]
            else:
                markers.append((f"Pad the inputs to the sequence_length of input_shapes={_short(code(value), 20)} (padding="
                                "\"max_length\").", "input_shapes was dropped: tokenizer(..., padding=\"max_length\", "
                                "max_length=N, truncation=True) keeps one compiled shape"))
        for name in SHAPE_KWARGS:
            if name in kw:
                shapes.setdefault(name, kw[name].value)
        if "compiler_args" in kw:
            applied.append("compiler_args dropped (no ahead-of-time compilation)")

        # ---- dtype (text-generation passed the export options as keywords)
        acast = kw.get("auto_cast_type")
        if acast is not None and not any(k in kw for k in ("dtype", "torch_dtype")):
            value = literal(acast.value)
            if isinstance(value, str) and value in DTYPES:
                added.append(("dtype", torch_dtype(ctx, DTYPES[value], quote, ctx.imports.binding_of(node.func))))
                applied.append(f"auto_cast_type={code(acast.value)} becomes dtype=torch.{DTYPES[value]}")
            else:
                markers.append(f"Pass dtype=torch.bfloat16 ('bf16') or torch.float16 ('fp16') for auto_cast_type="
                               f"{_short(code(acast.value), 20)}.")
        knobs = [k for k in kw if k in KNOBS]
        if knobs:
            applied.append(f"compiler options dropped: {', '.join(knobs)}")

        # ---- tensor parallelism
        tp_kw = next((kw[k] for k in TP_KWARGS if k in kw), None)
        if tp_kw is not None and literal(tp_kw.value) != 1:
            markers.append((
                f"Load the model with distributed_config=DistributedConfig(tp_size={_short(code(tp_kw.value), 12)}) and "
                "pass it as model= to shard it.",
                f"{tp_kw.keyword.value}={code(tp_kw.value)} was dropped: to shard the model over "  # type: ignore[union-attr]
                f"{code(tp_kw.value)} NeuronCores, load it with "
                f"{'AutoModelForCausalLM' if task in GENERATION_TASKS else 'AutoModelFor<Task>'}.from_pretrained(..., "
                f"distributed_config=DistributedConfig(tp_size={code(tp_kw.value)})), pass it as model= and launch with "
                f"torchrun --nproc_per_node={code(tp_kw.value)}"))

        # ---- what the call gets
        replace_kw: dict[str, tuple[str, cst.BaseExpression]] = {}
        drop = set(DROPPED) | set(TP_KWARGS) | set(SHAPE_KWARGS)
        device_map = kw.get("device_map")
        neuron = cst.SimpleString(f"{quote}neuron{quote}")
        if device_map is not None and literal(device_map.value) == "auto":
            replace_kw["device_map"] = ("device", neuron)
            applied.append("device_map=\"auto\" -> device=\"neuron\" (Accelerate's \"auto\" does not detect Neuron)")
        elif device_map is None and "device" not in kw and (export is not None or model_is_id or model_arg is None):
            # export= (a literal or not) is given with a checkpoint path only, or no model at all (the task's default
            # model, which optimum-neuron exported): the pipeline loads the model itself
            added.append(("device", neuron))
        placed = device_map is not None or "device" in kw or any(k == "device" for k, _ in added)
        if not placed and model_arg is not None and not _loaded_model(model_arg.value, ctx):
            # the model is a variable (a path, or a model object loaded elsewhere): without device= the pipeline
            # runs on the CPU (Transformers' device chain has no neuron), and a model already placed must not be moved
            markers.append((f"Pass device=\"neuron\" if {_short(code(model_arg.value), 20)} is a path, or place the "
                            "model on neuron where it is loaded.",
                            "transformers.pipeline picks cuda, npu, xpu, mps... or the CPU when device= is not given: "
                            "the neuron device is never chosen by itself"))

        if export_value is not True and model_is_id and not star:
            markers.append((
                "Point model= at the original checkpoint: without export=True this loaded a compiled Neuron model.",
                "config.json \"neuron\" -> \"checkpoint_id\" names it; pad the inputs to the shapes it was compiled for"))

        seq = shapes.get("sequence_length")
        batch = shapes.get("batch_size")
        if batch is not None and literal(batch) != 1 and "batch_size" not in kw:
            added.append(("batch_size", batch))
            applied.append(f"batch_size={code(batch)} becomes the pipeline's batch size")
        elif batch is not None and "batch_size" in kw and literal(batch) != 1:
            drop.discard("batch_size")
        if seq is not None:
            if task in GENERATION_TASKS:
                added.append(("cache_implementation", cst.SimpleString(f"{quote}static{quote}")))
                added.append(("max_cache_len", seq))
                applied.append(f"sequence_length={code(seq)} becomes a static cache of max_cache_len={code(seq)}")
            elif task in TOKENIZER_KWARGS and TOKENIZER_KWARGS[task] not in kw:
                padding = [
                    ("padding", cst.SimpleString(f"{quote}max_length{quote}")),
                    ("max_length", seq),
                    ("truncation", cst.Name("True")),
                ]
                where = TOKENIZER_KWARGS[task]
                if where == "call":
                    added.extend(padding)
                else:
                    added.append((where, cst.Dict([
                        cst.DictElement(cst.SimpleString(f"{quote}{k}{quote}"), v) for k, v in padding
                    ])))
                applied.append(f"sequence_length={code(seq)} becomes tokenizer padding to max_length={code(seq)}")
            else:
                markers.append((
                    f"Run the model yourself on inputs padded to {_short(code(seq), 16)} to keep one compiled shape.",
                    f"sequence_length={code(seq)} was dropped: this pipeline takes no padding arguments, so each new "
                    f"input length compiles a new graph; tokenizer(..., padding=\"max_length\", max_length="
                    f"{code(seq)}, truncation=True)"))
        other = [k for k in shapes if k not in SHAPE_KWARGS]
        if other:
            listed = ", ".join(f"{k}={code(shapes[k])}" for k in other)
            markers.append((f"Feed inputs of the static shapes {_short(listed, 50)} to avoid recompiles.",
                            f"static input shapes {listed} were dropped"))

        indent, prefix = indent_of(ctx), prefix_len(ctx, node)

        dicts = literal_dicts(ctx)  # computed now: the rewrite runs after the pass
        def rewrite(updated: cst.Call) -> cst.Call:
            new_args: list[cst.Arg] = []
            for a in _keywordize(expand_literal_kwargs(updated.args, dicts)):
                name = a.keyword.value if a.keyword is not None else None
                if name in drop:
                    continue
                if name in replace_kw:
                    new_name, value = replace_kw[name]
                    a = a.with_changes(keyword=cst.Name(new_name), value=value)
                new_args.append(a)
            extra = [cst.Arg(keyword=cst.Name(k), value=v, equal=EQ) for k, v in added]
            at = next((i for i, a in enumerate(new_args) if a.star == "**"), len(new_args))
            new_args[at:at] = extra
            return layout(updated, new_args, ctx.module, indent, prefix)

        if added or replace_kw or any(k in drop for k in kw):
            ctx.replace(node, rewrite)
            for dead in drop_expanded_dicts(ctx, node, dicts):
                applied.append(f"{dead} removed: its items are arguments of the call now")
            ctx.finding(node, "optimum.neuron.pipeline -> transformers.pipeline"
                        + (" on device \"neuron\"" if placed else "")
                        + (", export/input_shapes dropped" if export is not None or "input_shapes" in kw else ""))
        for message in applied:
            ctx.finding(node, message)
        for message in markers:  # a message, or (message, its long form)
            text, detail = message if isinstance(message, tuple) else (message, None)
            ctx.marker(node, text, detail=detail)


def _loaded_model(value: cst.BaseExpression, ctx: PythonContext) -> bool:
    """Whether ``value`` is a name the unit assigns a loaded model (``model = X.from_pretrained(...)``): a model
    object, placed where it is loaded."""
    if not isinstance(value, cst.Name):
        return False
    return re.search(rf"^[ \t]*{re.escape(value.value)}[ \t]*=[ \t]*[\w.]+\.from_pretrained\(", ctx.code, re.M) is not None


def _keywordize(args: list[cst.Arg]) -> list[cst.Arg]:
    """Positional arguments after ``task, model`` become keywords (optimum's third parameter is
    tokenizer, transformers' is config)."""
    out: list[cst.Arg] = []
    starred = False
    for i, a in enumerate(args):
        starred = starred or a.star == "*"
        if a.keyword is None and not a.star and not starred and 2 <= i < len(POSITIONAL):
            a = a.with_changes(keyword=cst.Name(POSITIONAL[i]), equal=EQ)
        out.append(a)
    return out


RULES = (PipelineStaticShapes,)
