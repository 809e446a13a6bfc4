"""NM101: optimum.neuron.NeuronModelForCausalLM -> AutoModelForCausalLM on device "neuron" with a static cache.

Generations A and B of optimum-neuron compile a decoder on the fly::

    model = NeuronModelForCausalLM.from_pretrained(
        model_id, export=True, batch_size=1, sequence_length=512, num_cores=2, auto_cast_type="bf16"
    )

Under TorchNeuron the eager Transformers model runs on the ``neuron`` device and a static
KV cache keeps the decode graph stable, so this becomes::

    model = AutoModelForCausalLM.from_pretrained(model_id, dtype=torch.bfloat16, distributed_config=DistributedConfig(tp_size=2))
    model.generation_config.cache_implementation = "static"
    model.generation_config.max_cache_len = 512

(``device_map="neuron"`` instead of ``distributed_config`` on one NeuronCore). The rule owns the
class, so it also renames the import and every other use of the name (like NM100 would).

Left to a person, with a marker: generation C (``get_neuron_config`` + ``export``), loading a
pre-exported Neuron artifact (``from_pretrained(dir)`` without ``export=True``), arguments hidden
in ``**kwargs``, non-literal ``num_cores``/``auto_cast_type``, and reads of
``model.neuron_config`` / ``model.config.neuron``.
"""

from __future__ import annotations

import re
from typing import Callable

import libcst as cst

from codemods.renames import _is_reference
from migrator.imports import Binding, dotted
from migrator.python_engine import NameClash, PythonContext
from migrator.rules import PythonRule

#: every import path of the inference class (the NM100 entry of renames.toml)
SOURCES = (
    "optimum.neuron.NeuronModelForCausalLM",
    "optimum.neuron.modeling.NeuronModelForCausalLM",
    "optimum.neuron.modeling_decoder.NeuronModelForCausalLM",
    "optimum.neuron.models.inference.modeling_utils.NeuronModelForCausalLM",
)
CLASS_NAME = "NeuronModelForCausalLM"
TARGET = "transformers.AutoModelForCausalLM"
TARGET_NAME = "AutoModelForCausalLM"
DISTRIBUTED_CONFIG = "transformers.distributed.DistributedConfig"

#: class attributes of the two-step (generation B/C) compile API; their uses keep the old class
TWO_STEP = ("get_neuron_config", "export", "_export")

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "tf32": "float32"}
#: compiler, cache and serving knobs that have no meaning for an eager model
COMPILER_KNOBS = (
    "compiler_args", "optlevel", "compiler_workdir", "instance_type", "disable_neuron_cache",
    "inline_weights_to_neff", "disable_fast_relayout", "disable_fallback", "dynamic_batch_size",
    "auto_cast", "task", "file_name", "load_weights", "continuous_batching", "on_device_sampling",
    "compiler_type", "compiler_version",
)
SHAPE_KWARGS = ("batch_size", "sequence_length", "num_cores", "tensor_parallel_size", "auto_cast_type")
TP_KWARGS = ("num_cores", "tensor_parallel_size")
DTYPE_KWARGS = ("torch_dtype", "dtype")
#: native kwargs this rule adds; a call that already has one keeps it
PLACEMENT_KWARGS = ("device_map", "distributed_config")

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
}

MAX_LINE = 119  # the Hugging Face libraries' line length


class CausalLMStaticCache(PythonRule):
    id = "NM101"
    title = "NeuronModelForCausalLM -> AutoModelForCausalLM on device_map='neuron' with a static cache"
    fix = "mixed"
    triggers = (CLASS_NAME,)
    owns = SOURCES
    renames_owned = True  # the two-step export API keeps its name until a person rewrites it
    why = """
        optimum-neuron's NeuronModelForCausalLM compiled a decoder for fixed shapes
        (`export=True, batch_size, sequence_length, num_cores, auto_cast_type`). Under TorchNeuron
        the plain Transformers model runs on the `neuron` device; a static KV cache of
        `max_cache_len` tokens keeps the compiled decode graph stable. So the load becomes
        `AutoModelForCausalLM.from_pretrained(..., dtype=..., device_map="neuron")` (or
        `distributed_config=DistributedConfig(tp_size=N)` under torchrun when the model was
        sharded over N NeuronCores) followed by the static-cache generation settings.
    """
    before = """
        from optimum.neuron import NeuronModelForCausalLM

        def load(model_id):
            model = NeuronModelForCausalLM.from_pretrained(
                model_id, export=True, batch_size=1, sequence_length=512, num_cores=1, auto_cast_type="bf16"
            )
            return model
    """
    after = """
        import torch
        from transformers import AutoModelForCausalLM

        def load(model_id):
            model = AutoModelForCausalLM.from_pretrained(model_id, dtype=torch.bfloat16, device_map="neuron")
            model.generation_config.cache_implementation = "static"
            model.generation_config.max_cache_len = 512
            return model
    """
    caveats = """
        `num_cores`/`tensor_parallel_size` > 1 become `distributed_config=DistributedConfig(tp_size=N)`
        (not `device_map`) and the script must be launched with `torchrun --nproc_per_node=N`
        (a marker says so). `batch_size` and compiler options are dropped (pad the prompts you
        pass to generate() instead). Left to a person with a marker: the two-step
        `get_neuron_config()` + `export()` API, loading a pre-exported Neuron model (it holds
        compiled NEFFs, not weights: point to the original checkpoint), arguments passed through
        `**kwargs` variables, non-literal `num_cores`/`auto_cast_type`, reads of
        `model.neuron_config` / `model.config.neuron`, and loads that are not assigned to a name
        or attribute (set the static cache yourself). The static-cache lines are only inserted
        after an assignment inside a function, class or compound statement; at module level a
        marker gives them (the engine cannot yet insert statements there).
    """

    def handlers(self):
        return {cst.Name: self._on_name, cst.Attribute: self._on_attribute, cst.Call: self._on_call}

    # ------------------------------------------------------------------ renaming
    def _plan(self, ctx: PythonContext) -> dict[str, tuple[Binding, str]]:
        """local name -> (binding, mode) for from-imports of the class; mode is "refs" (rename
        every use) or "rebind" (swap the import, keep the local name)."""
        state = ctx.local_state()
        if "plan" in state:
            return state["plan"]
        plan: dict[str, tuple[Binding, str]] = {}
        for b in ctx.imports.all_bindings():
            if not b.is_from or b.alias is None or b.qualified not in SOURCES:
                continue
            if ctx.is_ignored(b.line):
                continue
            if (b.local != CLASS_NAME or b.local == TARGET_NAME) and not _uses_two_step(ctx, b.local):
                plan[b.local] = (b, "rebind")  # the import is swapped in finish(), after torch & co
            else:
                plan[b.local] = (b, "refs")
        state["plan"] = plan
        state["renamed"] = set()
        state["quiet"] = set()  # ids of names whose rename is reported by the call rewrite
        state["clash"] = set()  # local names that could not be renamed
        return plan

    def finish(self, ctx: PythonContext) -> None:
        # swap the import of an aliased name, or of a name that is never used
        state = ctx.local_state()
        for local, (b, mode) in state.get("plan", {}).items():
            if local in state["clash"]:
                continue
            if mode == "rebind" or (local not in state["renamed"] and not _uses_two_step(ctx, local)):
                ctx.remove_import(b)
                ctx.add_import("transformers", TARGET_NAME, b.local if b.local != TARGET_NAME else None, anchor=b)
                ctx.finding(b.alias, f"{b.qualified} -> {TARGET}")

    def _on_name(self, node: cst.Name, ctx: PythonContext) -> None:
        plan = self._plan(ctx)
        if node.value not in plan:
            return
        binding, mode = plan[node.value]
        parent = ctx.parent
        if mode != "refs" or not _is_reference(node, parent):
            return
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in TWO_STEP:
            return  # the two-step compile API stays (with a marker) until a person rewrites it
        try:
            expr = ctx.name_for(TARGET, anchor=binding)
        except NameClash as exc:
            ctx.marker(node, f"rename {binding.qualified} to {TARGET} by hand ({exc})")
            ctx.local_state()["clash"].add(node.value)
            return
        ctx.replace(node, expr)
        state = ctx.local_state()
        state["renamed"].add(node.value)
        if id(node) not in state["quiet"]:
            ctx.finding(node, f"{binding.qualified} -> {TARGET}")

    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        self._plan(ctx)
        parent = ctx.parent
        attr = node.attr.value
        if attr in ("neuron_config", "neuron"):
            self._neuron_config_read(node, ctx)
            return
        if attr != CLASS_NAME:
            return
        qual = ctx.qualname(node)
        if qual not in SOURCES:
            return
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in TWO_STEP:
            return
        root = node
        while isinstance(root, cst.Attribute):
            root = root.value
        anchor = ctx.imports.bindings.get(root.value, [None])[0] if isinstance(root, cst.Name) else None
        try:
            expr = ctx.name_for(TARGET, anchor=anchor, style="module")
        except NameClash as exc:
            ctx.marker(node, f"rename {qual} to {TARGET} by hand ({exc})")
            return
        ctx.replace(node, expr)
        if id(node) not in ctx.local_state()["quiet"]:
            ctx.finding(node, f"{qual} -> {TARGET}")

    def _neuron_config_read(self, node: cst.Attribute, ctx: PythonContext) -> None:
        """``model.neuron_config[.field]`` and ``model.config.neuron[...]``: compile-time settings
        that a native model does not have."""
        if ctx.qualname(node) is not None:
            return  # an imported module's attribute, not a model's
        attr = node.attr.value
        if attr == "neuron":
            if not (isinstance(node.value, cst.Attribute) and node.value.attr.value == "config"):
                return
            model_expr = node.value.value
        else:
            model_expr = node.value
        model = ctx.module.code_for_node(model_expr)
        what = ctx.module.code_for_node(node)
        field = _field_read(node, ctx)
        if field is not None:
            what = ctx.module.code_for_node(ctx.parent)  # type: ignore[arg-type]
            instead = NEURON_CONFIG_FIELDS.get(field)
            hint = f": use {instead.format(m=model)}" if instead else ""
        else:
            hint = (
                f": read `{model}.generation_config.max_cache_len`, `{model}.dtype` or `{model}.tp_size`"
                " instead, and the batch size you pad to"
            )
        ctx.marker(node, f"`{what}` (optimum-neuron compile settings) does not exist on a native model{hint}")

    # ------------------------------------------------------------------ calls
    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute):
            return
        cls_qual = ctx.qualname(func.value)
        if cls_qual not in SOURCES:
            return
        self._plan(ctx)
        method = func.attr.value
        if method in TWO_STEP:
            self._two_step(node, method, ctx)
        elif method == "from_pretrained":
            self._from_pretrained(node, ctx)

    def _two_step(self, node: cst.Call, method: str, ctx: PythonContext) -> None:
        if method != "get_neuron_config" and "get_neuron_config" in ctx.source:
            ctx.marker(node, (
                f"NeuronModelForCausalLM.{method}() compiles a Neuron artifact that native Transformers cannot build "
                "or load: it goes away with get_neuron_config() (see the marker there)"
            ))
            return
        if method != "get_neuron_config":
            ctx.marker(node, (
                f"NeuronModelForCausalLM.{method}() compiles a Neuron artifact that native Transformers cannot build "
                "or load: load the original checkpoint with AutoModelForCausalLM.from_pretrained(model_id, dtype=..., "
                "device_map=\"neuron\") and set a static cache (model.generation_config.cache_implementation = "
                "\"static\", model.generation_config.max_cache_len = sequence_length)"
            ))
            return
        code = ctx.module.code_for_node
        kw = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        model_id = kw.get("model_name_or_path", positional[0] if positional else None)
        load = [code(model_id) if model_id is not None else "<original checkpoint>"]
        acast = _literal(kw["auto_cast_type"]) if "auto_cast_type" in kw else None
        if isinstance(acast, str) and acast in DTYPES:
            load.append(f"dtype=torch.{DTYPES[acast]}")
        tp = kw.get("tensor_parallel_size")
        tp_value = _literal(tp) if tp is not None else None
        launch = ""
        if tp is None or tp_value == 1:
            load.append('device_map="neuron"')
        elif isinstance(tp_value, int) and not isinstance(tp_value, bool):
            load.append(f"distributed_config=DistributedConfig(tp_size={tp_value})")
            launch = f" and launch with `torchrun --nproc_per_node={tp_value}`"
        else:
            load.append(f'device_map="neuron" (or distributed_config=DistributedConfig(tp_size={code(tp)}) '
                        "under torchrun when it is > 1)")
        steps = [f"model = AutoModelForCausalLM.from_pretrained({', '.join(load)})",
                 'model.generation_config.cache_implementation = "static"']
        if "sequence_length" in kw:
            steps.append(f"model.generation_config.max_cache_len = {code(kw['sequence_length'])}")
        pad = f"; batch_size={code(kw['batch_size'])} is the batch you pad the prompts to" if "batch_size" in kw else ""
        ctx.marker(node, (
            "get_neuron_config() + export() compile a Neuron artifact that native Transformers cannot build or load: "
            f"replace both by `{'; '.join(steps)}`{launch}{pad}"
        ))

    def _from_pretrained(self, node: cst.Call, ctx: PythonContext) -> None:
        stmt = ctx.statement()
        if stmt is not None and ctx.is_ignored(stmt):
            return
        # the class name is renamed by _on_name/_on_attribute; this rewrite reports it
        ctx.local_state()["quiet"].add(id(node.func.value))  # type: ignore[attr-defined]
        source_name = f"{ctx.qualname(node.func.value)}.from_pretrained"  # type: ignore[attr-defined]
        args = _expand_literal_kwargs(node.args)
        keywords = {a.keyword.value: a for a in args if a.keyword is not None}
        star_vars = [a for a in args if a.star == "**"]
        export = keywords.get("export")
        export_value = _literal(export.value) if export is not None else None
        has_shapes = any(k in keywords for k in SHAPE_KWARGS)

        if export_value is False or (export is None and not has_shapes):
            if star_vars:
                names = ", ".join(f"**{ctx.module.code_for_node(a.value)}" for a in star_vars)
                ctx.marker(node, f"the arguments in {names} are not seen: with export=True, {_KWARGS_ADVICE}; "
                           f"without it, {_pre_exported_advice()}")
            else:
                ctx.marker(node, _pre_exported_advice())
            return

        quote = _quote_style(node)
        extra_markers: list[str] = []
        applied: list[str] = []
        if export is not None and export_value is not True:
            extra_markers.append(
                f"export={ctx.module.code_for_node(export.value)}: when it is false this loads a pre-exported "
                f"Neuron model; {_pre_exported_advice()}"
            )
        for a in star_vars:
            extra_markers.append(
                f"the arguments in **{ctx.module.code_for_node(a.value)} are not seen: {_KWARGS_ADVICE}"
            )

        # ---- dtype
        dtype_expr: cst.BaseExpression | None = None
        dtype_from: str | None = None
        acast = keywords.get("auto_cast_type")
        if acast is not None:
            value = _literal(acast.value)
            if isinstance(value, str) and value in DTYPES:
                dtype_expr = _torch_dtype(ctx, DTYPES[value], quote)
                dtype_from = "auto_cast_type"
                if value == "tf32":
                    applied.append("auto_cast_type='tf32' becomes dtype=torch.float32")
            else:
                extra_markers.append(
                    f"auto_cast_type={ctx.module.code_for_node(acast.value)} was dropped: pass the matching "
                    "dtype= (torch.bfloat16 for 'bf16', torch.float16 for 'fp16', torch.float32 for 'fp32')"
                )
        explicit_dtype = next((keywords[k] for k in DTYPE_KWARGS if k in keywords), None)
        if explicit_dtype is not None and dtype_expr is not None:
            applied.append(f"{explicit_dtype.keyword.value}= dropped: auto_cast_type gives the dtype")  # type: ignore[union-attr]

        _request_target(ctx, node.func.value)  # type: ignore[attr-defined]  # keeps the imports in isort order

        # ---- tensor parallelism
        tp_size: int | None = None
        tp_kw = next((keywords[k] for k in TP_KWARGS if k in keywords), None)
        if tp_kw is not None:
            value = _literal(tp_kw.value)
            if isinstance(value, int) and not isinstance(value, bool):
                tp_size = value
            else:
                code = ctx.module.code_for_node(tp_kw.value)
                extra_markers.append(
                    f"{tp_kw.keyword.value}={code} was dropped: when it is > 1, load with "  # type: ignore[union-attr]
                    f"distributed_config=DistributedConfig(tp_size={code}) instead of device_map=\"neuron\" and "
                    "launch the script with torchrun --nproc_per_node=<that number>"
                )
        placement: tuple[str, cst.BaseExpression] | None = None
        if not any(k in keywords for k in PLACEMENT_KWARGS):
            if tp_size is not None and tp_size > 1:
                try:
                    dc = ctx.name_for(DISTRIBUTED_CONFIG, anchor=_anchor(ctx))
                except NameClash as exc:
                    extra_markers.append(f"pass distributed_config=DistributedConfig(tp_size={tp_size}) ({exc})")
                else:
                    placement = ("distributed_config", cst.Call(
                        func=dc,
                        args=[cst.Arg(keyword=cst.Name("tp_size"), value=cst.Integer(str(tp_size)),
                                      equal=_EQ)],
                    ))
                    extra_markers.append(
                        f"launch with `torchrun --nproc_per_node={tp_size}`: "
                        f"{tp_kw.keyword.value}={tp_size} became DistributedConfig(tp_size={tp_size}), "  # type: ignore[union-attr]
                        "one process per NeuronCore"
                    )
            else:
                placement = ("device_map", cst.SimpleString(f"{quote}neuron{quote}"))

        # ---- static cache
        seq = keywords.get("sequence_length")
        batch = keywords.get("batch_size")
        if batch is not None:
            applied.append(
                f"batch_size={ctx.module.code_for_node(batch.value)} dropped: it becomes the (padded) batch "
                "you pass to generate()"
            )
        knobs = [k for k in keywords if k in COMPILER_KNOBS]
        if knobs:
            applied.append(f"compiler options dropped: {', '.join(knobs)}")
        if "neuron_config" in keywords:
            extra_markers.append(
                "neuron_config= is an optimum-neuron compile configuration: remove it and map its values "
                "(sequence_length -> max_cache_len, tp_degree -> DistributedConfig(tp_size=N), dtype -> dtype=)"
            )

        drop = {"export", "batch_size", "sequence_length", "auto_cast_type", *TP_KWARGS, *COMPILER_KNOBS}
        if dtype_expr is not None:
            drop.update(DTYPE_KWARGS)

        indent, prefix = _indent(ctx), _prefix_len(ctx, node)
        holder: dict[str, cst.CSTNode] = {}

        def rewrite(updated: cst.Call) -> cst.Call:
            new_args: list[cst.Arg] = []
            for a in _expand_literal_kwargs(updated.args):
                if a.keyword is not None and a.keyword.value == "sequence_length":
                    holder["max_cache_len"] = a.value
                if a.keyword is not None and a.keyword.value in drop:
                    continue
                if a.keyword is not None and a.keyword.value == "torch_dtype":
                    a = a.with_changes(keyword=cst.Name("dtype"))
                new_args.append(a)
            added = []
            if dtype_expr is not None:
                added.append(cst.Arg(keyword=cst.Name("dtype"), value=dtype_expr, equal=_EQ))
            if placement is not None:
                added.append(cst.Arg(keyword=cst.Name(placement[0]), value=placement[1], equal=_EQ))
            at = next((i for i, a in enumerate(new_args) if a.star == "**"), len(new_args))
            new_args[at:at] = added
            new = _layout(updated, new_args, ctx.module, indent, prefix)
            holder["call"] = new
            return new

        ctx.replace(node, rewrite)

        # ---- where the static cache goes
        max_len_text = ctx.module.code_for_node(seq.value) if seq is not None else None
        inserted = False
        target = _assigned_target(ctx, node)
        if target is not None:
            inserted = _insert_after(ctx, holder, lambda line: _cache_lines(line, holder, quote))
        if not inserted:
            model = ctx.module.code_for_node(target) if target is not None else "<model>"
            lines = f"`{model}.generation_config.cache_implementation = {quote}static{quote}`"
            if max_len_text is not None:
                lines += f" and `{model}.generation_config.max_cache_len = {max_len_text}`"
            extra_markers.append(f"set a static cache on this model after loading it: {lines}")
        elif seq is None:
            applied.append(
                "no sequence_length: the static cache is sized by each generate() call; set "
                "generation_config.max_cache_len to the longest prompt + new tokens to avoid recompiles"
            )

        placement_text = (
            f"distributed_config=DistributedConfig(tp_size={tp_size})"
            if placement is not None and placement[0] == "distributed_config"
            else f"device_map={quote}neuron{quote}"
        )
        cache_text = f"static cache, max_cache_len={max_len_text}" if max_len_text else "static cache"
        ctx.finding(node, f"{source_name}(export=True) -> {TARGET}.from_pretrained(..., {placement_text}) "
                          f"with a {cache_text}" + (f", dtype from {dtype_from}" if dtype_from else ""))
        for message in applied:
            ctx.finding(node, message)
        for message in extra_markers:
            ctx.marker(node, message)


_EQ = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))

_KWARGS_ADVICE = (
    "move num_cores/tensor_parallel_size > 1 to distributed_config=DistributedConfig(tp_size=N) "
    "(instead of device_map, under torchrun), auto_cast_type to dtype=, sequence_length to "
    "model.generation_config.max_cache_len, and drop export, batch_size and the compiler options"
)


def _pre_exported_advice() -> str:
    return (
        "this loads a pre-exported Neuron model (compiled NEFFs + neuron_config.json), which native Transformers "
        "cannot load: point it to the original checkpoint (config.json \"neuron\" -> \"checkpoint_id\" or "
        "neuron_config.json \"checkpoint_id\"), add dtype= and device_map=\"neuron\", then set "
        "model.generation_config.cache_implementation = \"static\" and max_cache_len = the exported sequence_length"
    )


def _request_target(ctx: PythonContext, class_expr: cst.BaseExpression) -> None:
    """Ask for the target import now, the way _on_name/_on_attribute will refer to it."""
    plan = ctx.local_state().get("plan", {})
    try:
        if isinstance(class_expr, cst.Name):
            if class_expr.value in plan and plan[class_expr.value][1] == "refs":
                ctx.name_for(TARGET, anchor=plan[class_expr.value][0])
        else:
            ctx.name_for(TARGET, anchor=_anchor(ctx), style="module")
    except NameClash:
        pass  # reported where the name is renamed


def _uses_two_step(ctx: PythonContext, local: str) -> bool:
    return re.search(rf"\b{re.escape(local)}\s*\.\s*(?:{'|'.join(TWO_STEP)})\b", ctx.source) is not None


def _field_read(node: cst.Attribute, ctx: PythonContext) -> str | None:
    """``.field`` after ``x.neuron_config`` / ``["field"]`` after ``x.config.neuron``."""
    parent = ctx.parent
    if node.attr.value == "neuron_config":
        if isinstance(parent, cst.Attribute) and parent.value is node:
            return parent.attr.value
        return None
    if isinstance(parent, cst.Subscript) and parent.value is node and len(parent.slice) == 1:
        index = parent.slice[0].slice
        if isinstance(index, cst.Index):
            value = _literal(index.value)
            if isinstance(value, str):
                return value
    return None


def _literal(expr: cst.BaseExpression):
    """The Python value of a simple literal (str, int, True/False/None), else ``_NOT``."""
    if isinstance(expr, cst.SimpleString):
        return expr.evaluated_value
    if isinstance(expr, cst.Integer):
        return expr.evaluated_value
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value]
    return _NOT


_NOT = object()


def _expand_literal_kwargs(args) -> list[cst.Arg]:
    """``**{"k": v}`` with string keys that are identifiers -> ``k=v`` arguments."""
    out: list[cst.Arg] = []
    for a in args:
        if a.star == "**" and isinstance(a.value, cst.Dict) and a.value.elements and all(
            isinstance(e, cst.DictElement) and isinstance(_literal(e.key), str) and _literal(e.key).isidentifier()
            for e in a.value.elements
        ):
            for e in a.value.elements:
                out.append(cst.Arg(keyword=cst.Name(_literal(e.key)), value=e.value, equal=_EQ))
        else:
            out.append(a)
    return out


def _quote_style(call: cst.Call) -> str:
    for a in call.args:
        if isinstance(a.value, cst.SimpleString):
            return "'" if a.value.quote.startswith("'") else '"'
    return '"'


def _torch_dtype(ctx: PythonContext, name: str, quote: str) -> cst.BaseExpression:
    try:
        return ctx.name_for(f"torch.{name}", anchor=_anchor(ctx), style="module")
    except NameClash:
        return cst.SimpleString(f"{quote}{name}{quote}")


def _anchor(ctx: PythonContext) -> Binding | None:
    """The import line of the class: new imports (torch, DistributedConfig) go there."""
    plan = ctx.local_state().get("plan", {})
    for b, _mode in plan.values():
        return b
    for b in ctx.imports.all_bindings():
        if b.qualified in SOURCES or any(s.startswith(b.qualified + ".") for s in SOURCES):
            return b
    return None


def _assigned_target(ctx: PythonContext, call: cst.Call) -> cst.BaseExpression | None:
    """``name`` / ``obj.attr`` when the call is the whole value of a one-target assignment."""
    parent = ctx.parent
    if isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1:
        target = parent.targets[0].target
    elif isinstance(parent, cst.AnnAssign) and parent.value is call:
        target = parent.target
    else:
        return None
    if isinstance(target, cst.Name) or (isinstance(target, cst.Attribute) and dotted(target) is not None):
        return target
    return None


def _insert_after(ctx: PythonContext, holder: dict, make: Callable[[cst.SimpleStatementLine], list]) -> bool:
    """Insert statements after the line holding the rewritten call."""
    stack = ctx.stack
    line = next((stack[i] for i in range(len(stack) - 1, -1, -1) if isinstance(stack[i], cst.SimpleStatementLine)), None)
    if line is None:
        return False
    ctx.insert_after(line, make)
    return True


def _cache_lines(line: cst.SimpleStatementLine, holder: dict, quote: str):
    small = next(s for s in line.body if isinstance(s, (cst.Assign, cst.AnnAssign)) and s.value is holder["call"])
    target = small.targets[0].target if isinstance(small, cst.Assign) else small.target
    gen = cst.Attribute(value=target.deep_clone(), attr=cst.Name("generation_config"))

    def assign(attr: str, value: cst.BaseExpression) -> cst.SimpleStatementLine:
        return cst.SimpleStatementLine(body=[cst.Assign(
            targets=[cst.AssignTarget(target=cst.Attribute(value=gen.deep_clone(), attr=cst.Name(attr)))],
            value=value,
        )])

    lines = [assign("cache_implementation", cst.SimpleString(f"{quote}static{quote}"))]
    if "max_cache_len" in holder:
        lines.append(assign("max_cache_len", holder["max_cache_len"].deep_clone()))
    return lines


# ---------------------------------------------------------------------- layout
def _indent(ctx: PythonContext) -> str:
    default = ctx.module.default_indent
    return "".join((n.indent if n.indent is not None else default) for n in ctx.stack
                   if isinstance(n, cst.IndentedBlock))


def _prefix_len(ctx: PythonContext, call: cst.Call) -> int:
    """Columns taken on the call's first line before the call (``model = ``), roughly."""
    parent = ctx.parent
    code = ctx.module.code_for_node
    if isinstance(parent, cst.Assign) and parent.value is call:
        return sum(len(code(t.target)) + 3 for t in parent.targets)  # "target = "
    if isinstance(parent, cst.AnnAssign) and parent.value is call:
        return len(code(parent.target)) + len(code(parent.annotation.annotation)) + 5  # "target: annotation = "
    return 12


def _comments(arg: cst.Arg) -> list[cst.Comment]:
    found = []
    for ws in (arg.whitespace_after_arg, getattr(arg.comma, "whitespace_after", None),
               getattr(arg.comma, "whitespace_before", None)):
        if isinstance(ws, cst.ParenthesizedWhitespace):
            if ws.first_line.comment is not None:
                found.append(ws.first_line.comment)
            found.extend(el.comment for el in ws.empty_lines if el.comment is not None)
    return found


def _layout(call: cst.Call, args: list[cst.Arg], module: cst.Module, indent: str, prefix: int) -> cst.Call:
    """One line when it fits (and no comment is attached to a kept argument), else one argument
    per line, indented one level deeper than the statement, with a trailing comma."""
    multiline_before = "\n" in module.code_for_node(call)
    flat = [
        a.with_changes(
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if i < len(args) - 1 else cst.MaybeSentinel.DEFAULT,
            whitespace_after_arg=cst.SimpleWhitespace(""),
        )
        for i, a in enumerate(args)
    ]
    one_line = call.with_changes(args=flat, whitespace_before_args=cst.SimpleWhitespace(""))
    width = len(indent) + prefix + len(module.code_for_node(one_line))
    has_comments = any(_comments(a) for a in args)
    if not has_comments and "\n" not in module.code_for_node(one_line) and (
        width <= MAX_LINE or not multiline_before and width <= len(indent) + prefix + len(module.code_for_node(call))
    ):
        return one_line
    step = module.default_indent
    spread = []
    for i, a in enumerate(args):
        last = i == len(args) - 1
        comments = _comments(a)
        first = cst.TrailingWhitespace(
            whitespace=cst.SimpleWhitespace("  " if comments else ""), comment=comments[0] if comments else None
        )
        spread.append(a.with_changes(
            comma=cst.Comma(whitespace_after=cst.ParenthesizedWhitespace(
                first_line=first, indent=True, last_line=cst.SimpleWhitespace("" if last else step),
            )),
            whitespace_after_arg=cst.SimpleWhitespace(""),
        ))
    return call.with_changes(
        args=spread,
        whitespace_before_args=cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(), indent=True, last_line=cst.SimpleWhitespace(step)
        ),
    )


RULES = (CausalLMStaticCache,)
