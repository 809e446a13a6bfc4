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
in ``**kwargs`` and a non-literal ``auto_cast_type``. Reads of ``model.neuron_config`` /
``model.config.neuron`` are NM110's (codemods/inference/neuron_attributes.py).

NM108 (NeuronModelForImageTextToText) and NM109 (NeuronModelForEmbedding) are the same rule with
another target class; NM109 adds no static cache (the model does not generate).
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.inference.args import (
    drop_expanded_dicts,
    COMPILER_KNOBS,
    DTYPES,
    EQ,
    assigned_target,
    expand_literal_kwargs,
    literal_dicts,
    indent_of,
    insert_after,
    layout,
    literal,
    prefix_len,
    quote_style,
)
from codemods.common.statements import assigned_values
from codemods.common.export_only import inside_export_only, kept_names, mark_export_only, never_run
from codemods.common.renames import _is_reference
from codemods.common.type_names import rename_type_use
from migrator.imports import Binding
from migrator.model import fitted
from migrator.rules import NameClash, PythonContext, PythonRule
from migrator.scopes import named_params

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
#: a load sharded over tp > 1 NeuronCores in one process that torchrun never starts (a notebook kernel, a model
#: server), which goes on one NeuronCore there (NM101, NM411)
ONE_PROCESS_TP_MARKER = "Run this load in a script under torchrun for tp_size={tp}: {process} loads on one NeuronCore."
#: what runs a module in one process of its own: (its imports or definitions, what it is)
_SERVERS = (
    (re.compile(r"\bfrom ray import serve\b|\bimport ray\.serve\b|@serve\.deployment\b"), "a Ray Serve replica"),
    (re.compile(r"^[ \t]*(?:from|import)[ \t]+ts\.torch_handler\b", re.MULTILINE), "a TorchServe handler"),
    (re.compile(r"^[ \t]*(?:from|import)[ \t]+(?:fastapi|flask|gradio|streamlit|uvicorn)\b", re.MULTILINE),
     "a web server"),
    (re.compile(r"^def model_fn[ \t]*\(", re.MULTILINE), "a SageMaker inference handler"),
)


def single_process(ctx: PythonContext) -> str | None:
    """What runs this unit in a process torchrun does not start (where DistributedConfig(tp_size > 1) raises:
    "We tried to initialize torch.distributed for you"), or None: a notebook kernel, a Ray Serve replica, a
    TorchServe handler, a web server, a SageMaker inference handler."""
    if ctx.in_kernel:
        return "a notebook kernel"
    return next((what for pattern, what in _SERVERS if pattern.search(ctx.code)), None)

#: class attributes of the two-step (generation B/C) compile API; their uses keep the old class
TWO_STEP = ("get_neuron_config", "export", "_export")

#: the generation arguments of optimum-neuron's transformers-neuronx era (they went through to
#: transformers-neuronx's ``from_pretrained``: source-apis §"Adjacent legacy inference stacks") -> the
#: current name whose handling they share (``None``: dropped with a marker saying what it meant)
OLD_GENERATION_KWARGS = {"n_positions": "sequence_length", "amp": "auto_cast_type", "tp_degree": "num_cores",
                         "context_length_estimate": None}
SHAPE_KWARGS = ("batch_size", "sequence_length", "num_cores", "tensor_parallel_size", "auto_cast_type",
                *OLD_GENERATION_KWARGS)
TP_KWARGS = ("num_cores", "tensor_parallel_size", "tp_degree")
#: transformers-neuronx's amp values besides the optimum-neuron ones (DTYPES)
AMP_DTYPES = {**DTYPES, "f16": "float16", "f32": "float32"}
DTYPE_KWARGS = ("torch_dtype", "dtype")
#: native kwargs this rule adds; a call that already has one keeps it
PLACEMENT_KWARGS = ("device_map", "distributed_config")

class CausalLMStaticCache(PythonRule):
    id = "NM101"
    title = "NeuronModelForCausalLM -> AutoModelForCausalLM on device_map='neuron' with a static cache"
    fix = "mixed"
    triggers = (CLASS_NAME,)
    owns = SOURCES
    renames_owned = True  # the two-step export API keeps its name until a person rewrites it
    #: what this rule migrates (subclasses for the other NxD inference classes change these)
    sources: tuple[str, ...] = SOURCES
    class_name = CLASS_NAME
    target = TARGET
    target_name = TARGET_NAME
    #: generation models get the static-cache lines after the load
    static_cache = True
    why = """
        optimum-neuron's NeuronModelForCausalLM compiled a decoder for fixed shapes
        (`export=True, batch_size, sequence_length, num_cores, auto_cast_type`). Under TorchNeuron
        the plain Transformers model runs on the `neuron` device; a static KV cache of
        `max_cache_len` tokens keeps the compiled decode graph stable. So the load becomes
        `AutoModelForCausalLM.from_pretrained(..., dtype=..., device_map="neuron")` (or
        `distributed_config=DistributedConfig(tp_size=N)` under torchrun when the model was
        sharded over N NeuronCores) followed by the static-cache generation settings. The older
        generation arguments (optimum-neuron on transformers-neuronx) mean the same things:
        `n_positions` is `sequence_length` (the static cache length), `amp` ("bf16"/"f16"/"f32") is
        the `dtype`, `tp_degree` is `num_cores`; `context_length_estimate` (the prompt lengths the
        context encoding was compiled for) is dropped with a marker asking to pad the prompts to
        one length. None of them reaches `from_pretrained`. A load of a pre-exported model (no
        `export=True`, no shapes) is still placed with `device_map="neuron"` and a static cache: it
        would run on the CPU otherwise; a marker asks for the original checkpoint.
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
        (a marker says so); in a notebook, whose kernel torchrun never starts (the load would raise),
        and in a model server's process (Ray Serve, TorchServe, FastAPI/Flask, a SageMaker `model_fn`),
        the model goes on one NeuronCore (`device_map="neuron"`) with a marker to shard it from a
        script (NM411 does the same with `tp_degree`); a size read at run time (`num_cores=args.cores`) gets both
        `device_map=None if N > 1 else "neuron"` and `distributed_config=DistributedConfig(tp_size=N)`
        (a DistributedConfig of size 1 places nothing). `batch_size` and compiler options are dropped (pad the prompts you
        pass to generate() instead). Left to a person with a marker: the two-step
        `get_neuron_config()` + `export()` API, the checkpoint of a pre-exported Neuron model (it
        holds compiled NEFFs, not weights: point to the original checkpoint; the load is placed and
        gets its static cache, of unknown length), arguments passed through
        `**kwargs` variables, a non-literal `auto_cast_type`, and loads that are not
        assigned to a name or attribute (set the static cache yourself). Reads of
        `model.neuron_config` / `model.config.neuron` are handled by NM110. An export-only load
        (`from_pretrained(..., export=True)` whose result is only saved or pushed, or asserted on in a
        test) is obsolete on TorchNeuron: it is left as it is with a marker naming what its consumer loads
        instead (the original checkpoint), not rewritten into a native load and re-save. The static-cache lines are only inserted
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
            if not b.is_from or b.alias is None or b.qualified not in self.sources:
                continue
            if ctx.is_ignored(b.line):
                continue
            kept = b.local in kept_names(ctx)  # an export-only load keeps its class (and the import)
            if kept and (b.local != self.class_name or b.local == self.target_name):
                continue
            if (b.local != self.class_name or b.local == self.target_name) and not _uses_two_step(ctx, b.local):
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
            if local in state["clash"] or local in kept_names(ctx):
                continue
            if mode == "rebind" or (local not in state["renamed"] and not _uses_two_step(ctx, local)):
                ctx.remove_import(b)
                ctx.add_import("transformers", self.target_name, b.local if b.local != self.target_name else None,
                               anchor=b)
                ctx.finding(b.alias, f"{b.qualified} -> {self.target}")

    def _on_name(self, node: cst.Name, ctx: PythonContext) -> None:
        plan = self._plan(ctx)
        if node.value not in plan:
            return
        binding, mode = plan[node.value]
        parent = ctx.parent
        if not _is_reference(node, parent) or inside_export_only(ctx):
            return
        if rename_type_use(ctx, node, binding.qualified, self.target, anchor=binding):
            ctx.local_state()["renamed"].add(node.value)
            return  # `isinstance(m, NeuronModelForCausalLM)`: PreTrainedModel, not the Auto factory
        if mode != "refs":
            return
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in TWO_STEP:
            return  # the two-step compile API stays (with a marker) until a person rewrites it
        try:
            expr = ctx.name_for(self.target, anchor=binding)
        except NameClash as exc:
            ctx.marker(node, f"rename {binding.qualified} to {self.target} by hand ({exc})")
            ctx.local_state()["clash"].add(node.value)
            return
        ctx.replace(node, expr)
        state = ctx.local_state()
        state["renamed"].add(node.value)
        if id(node) not in state["quiet"]:
            ctx.finding(node, f"{binding.qualified} -> {self.target}")

    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        self._plan(ctx)
        parent = ctx.parent
        attr = node.attr.value
        if attr != self.class_name:
            return
        qual = ctx.qualname(node)
        if qual not in self.sources:
            return
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in TWO_STEP:
            return
        if inside_export_only(ctx):
            return
        anchor = ctx.imports.binding_of(node)
        if rename_type_use(ctx, node, qual, self.target, anchor=anchor, style="module"):
            return
        try:
            expr = ctx.name_for(self.target, anchor=anchor, style="module")
        except NameClash as exc:
            ctx.marker(node, f"rename {qual} to {self.target} by hand ({exc})")
            return
        ctx.replace(node, expr)
        if id(node) not in ctx.local_state()["quiet"]:
            ctx.finding(node, f"{qual} -> {self.target}")

    # ------------------------------------------------------------------ calls
    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute):
            return
        cls_qual = ctx.class_qualname(func.value)
        if cls_qual not in self.sources:
            return
        self._plan(ctx)
        method = func.attr.value
        if method in TWO_STEP:
            self._two_step(node, method, ctx)
        elif method == "from_pretrained":
            self._from_pretrained(node, ctx)

    def _two_step(self, node: cst.Call, method: str, ctx: PythonContext) -> None:
        if method != "get_neuron_config" and "get_neuron_config" in ctx.source:
            ctx.marker(node, f"Delete this {method}() call with the get_neuron_config() above (see its marker).",
                       detail=f"{self.class_name}.{method}() compiles a Neuron artifact that native Transformers cannot "
                              "build or load")
            return
        if method != "get_neuron_config":
            ctx.marker(node, fitted(f"Replace this {method}() by {self.target_name}.from_pretrained(model_id, "
                                    "device_map=\"neuron\") of the original checkpoint.",
                                    f"Replace this {method}() by a from_pretrained(..., device_map=\"neuron\") of the "
                                    "original checkpoint."),
                       detail=f"{self.class_name}.{method}() compiles a Neuron artifact that native Transformers cannot "
                              f"build or load: load the original checkpoint with {self.target_name}.from_pretrained("
                              f"model_id, dtype=..., device_map=\"neuron\") and {self._after_load_advice('sequence_length')}")
            return
        code = ctx.module.code_for_node
        kw = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        model_id = kw.get("model_name_or_path", positional[0] if positional else None)
        load = [code(model_id) if model_id is not None else "<original checkpoint>"]
        acast = literal(kw["auto_cast_type"]) if "auto_cast_type" in kw else None
        if isinstance(acast, str) and acast in DTYPES:
            load.append(f"dtype=torch.{DTYPES[acast]}")
        tp = kw.get("tensor_parallel_size")
        tp_value = literal(tp) if tp is not None else None
        launch = ""
        if tp is None or tp_value == 1:
            load.append('device_map="neuron"')
        elif isinstance(tp_value, int) and not isinstance(tp_value, bool):
            load.append(f"distributed_config=DistributedConfig(tp_size={tp_value})")
            launch = f" and launch with `torchrun --nproc_per_node={tp_value}`"
        else:
            load.append(f'device_map="neuron" (or distributed_config=DistributedConfig(tp_size={code(tp)}) '
                        "under torchrun when it is > 1)")
        steps = [f"model = {self.target_name}.from_pretrained({', '.join(load)})"]
        seq_text = code(kw["sequence_length"]) if "sequence_length" in kw else None
        if self.static_cache:
            steps.append('model.generation_config.cache_implementation = "static"')
            if seq_text is not None:
                steps.append(f"model.generation_config.max_cache_len = {seq_text}")
        pad = f"; batch_size={code(kw['batch_size'])} is the batch you pad the prompts to" if "batch_size" in kw else ""
        if not self.static_cache and seq_text is not None:
            pad += f"; pad the inputs to sequence_length={seq_text} (tokenizer padding=\"max_length\")"
        ctx.marker(node, fitted(f"Replace get_neuron_config() + export() by `{steps[0]}`{launch}.",
                                "Replace get_neuron_config() + export() by a from_pretrained of the original checkpoint."),
                   detail="get_neuron_config() + export() compile a Neuron artifact that native Transformers cannot "
                          f"build or load: replace both by `{'; '.join(steps)}`{launch}{pad}")

    def _after_load_advice(self, seq: str) -> str:
        """What follows a native load, for a person (the load's own marker texts)."""
        return ("set a static cache (model.generation_config.cache_implementation = \"static\", "
                f"model.generation_config.max_cache_len = {seq})")

    def _from_pretrained(self, node: cst.Call, ctx: PythonContext) -> None:
        stmt = ctx.statement()
        if stmt is not None and ctx.is_ignored(stmt):
            return
        if mark_export_only(ctx, node):
            return  # compile-and-save: obsolete, not a native load and re-save
        # the class name is renamed by _on_name/_on_attribute; this rewrite reports it
        ctx.local_state()["quiet"].add(id(node.func.value))  # type: ignore[attr-defined]
        source_name = f"{ctx.class_qualname(node.func.value)}.from_pretrained"  # type: ignore[attr-defined]
        args = expand_literal_kwargs(node.args, literal_dicts(ctx))
        keywords = {a.keyword.value: a for a in args if a.keyword is not None}
        star_vars = [a for a in args if a.star == "**"]
        export = keywords.get("export")
        export_value = literal(export.value) if export is not None else None
        has_shapes = any(k in keywords for k in SHAPE_KWARGS)

        pre_exported = export_value is False or (export is None and not has_shapes)
        if pre_exported and star_vars:
            names = ", ".join(f"**{ctx.module.code_for_node(a.value)}" for a in star_vars)
            ctx.marker(node, f"Check the arguments in {_short(names)}: export, shapes and compiler options do not carry over.",
                       detail=f"the arguments in {names} are not seen: with export=True, {self._kwargs_advice()}; "
                              f"without it, {self._pre_exported_advice()}")
            return

        quote = quote_style(node)
        extra_markers: list = []  # messages, or (message, long form)
        applied: list[str] = []
        if pre_exported:
            # still placed on the device with its static cache: only the checkpoint is left to a person
            extra_markers.append((PRE_EXPORTED_MARKER, self._pre_exported_placed_advice()))
        elif export is not None and export_value is not True:
            extra_markers.append((
                f"Point this load at the original checkpoint where export={_short(ctx.module.code_for_node(export.value))} "
                "is false.",
                f"when it is false this loads a pre-exported Neuron model; {self._pre_exported_advice()}"))
        for a in star_vars:
            extra_markers.append((
                f"Check the arguments in **{_short(ctx.module.code_for_node(a.value))}: export, shapes and compiler "
                "options do not carry over.",
                f"the arguments are not seen: {self._kwargs_advice()}"))

        # ---- dtype
        dtype_expr: cst.BaseExpression | None = None
        dtype_from: str | None = None
        acast_name = "auto_cast_type" if "auto_cast_type" in keywords else "amp"
        acast = keywords.get(acast_name)
        if acast is not None:
            value = literal(acast.value)
            table = DTYPES if acast_name == "auto_cast_type" else AMP_DTYPES
            if isinstance(value, str) and value in table:
                dtype_expr = _torch_dtype(ctx, table[value], quote)
                dtype_from = acast_name
                if value == "tf32" or acast_name == "amp":
                    applied.append(f"{acast_name}={value!r} becomes dtype=torch.{table[value]}")
            else:
                advice = "pass the matching dtype= (torch.bfloat16 for 'bf16', torch.float16 for 'fp16')"
                extra_markers.append(fitted(f"{acast_name}={ctx.module.code_for_node(acast.value)} was dropped: {advice}",
                                            f"{acast_name} was dropped: {advice}"))
        explicit_dtype = next((keywords[k] for k in DTYPE_KWARGS if k in keywords), None)
        if explicit_dtype is not None and dtype_expr is not None:
            applied.append(f"{explicit_dtype.keyword.value}= dropped: {acast_name} gives the dtype")  # type: ignore[union-attr]

        _request_target(ctx, node.func.value, self.target)  # type: ignore[attr-defined]  # keeps the imports in isort order

        # ---- tensor parallelism
        tp_size: int | None = None
        tp_expr: cst.BaseExpression | None = None  # a size known at run time (args.tp_size, a variable)
        tp_kw = next((keywords[k] for k in TP_KWARGS if k in keywords), None)
        if tp_kw is not None:
            value = literal(tp_kw.value)
            if isinstance(value, int) and not isinstance(value, bool):
                tp_size = value
            else:
                tp_expr = tp_kw.value
        placement: tuple[str, cst.BaseExpression] | None = None
        placed_too: list[tuple[str, cst.BaseExpression]] = []
        if tp_expr is not None:
            code = ctx.module.code_for_node(tp_expr)
            if any(k in keywords for k in PLACEMENT_KWARGS):
                extra_markers.append(
                    f"{tp_kw.keyword.value}={code} was dropped: when it is > 1, load with "  # type: ignore[union-attr]
                    f"distributed_config=DistributedConfig(tp_size={code}) instead of device_map=\"neuron\" and "
                    "launch the script with torchrun --nproc_per_node=<that number>"
                )
            else:
                try:
                    dc = ctx.name_for(DISTRIBUTED_CONFIG, anchor=_anchor(ctx))
                except NameClash as exc:
                    extra_markers.append((f"Pass distributed_config=DistributedConfig(tp_size={_short(code)}) by hand.",
                                          str(exc)))
                    placement = ("device_map", cst.SimpleString(f"{quote}neuron{quote}"))
                else:
                    # one NeuronCore when the size is 1 (a DistributedConfig of size 1 places nothing), sharded else;
                    # a size that may be None (`tp=None`: the old default, one core) counts as 1
                    size = f"({code} or 1)" if _may_be_none(tp_expr, ctx) else code
                    placement = ("device_map", cst.parse_expression(f"None if {size} > 1 else {quote}neuron{quote}"))
                    placed_too.append(("distributed_config", cst.Call(func=dc, args=[
                        cst.Arg(keyword=cst.Name("tp_size"), equal=EQ, value=cst.parse_expression(f"{code} or 1")
                                if size != code else tp_expr.deep_clone())])))
                    extra_markers.append((
                        fitted(f"Launch with torchrun --nproc_per_node={code} when {code} > 1: one process per NeuronCore.",
                               "Launch with torchrun, one process per NeuronCore, when the tensor-parallel size is > 1."),
                        f"{tp_kw.keyword.value}={code} became DistributedConfig(tp_size={code}); device_map=\"neuron\" "  # type: ignore[union-attr]
                        "places the model on one NeuronCore when it is 1"))
        if placement is None and not any(k in keywords for k in PLACEMENT_KWARGS):
            process = single_process(ctx) if tp_size is not None and tp_size > 1 else None
            if process is not None:
                # one process, never started by torchrun: DistributedConfig(tp_size > 1) raises there ("We tried to
                # initialize torch.distributed for you")
                placement = ("device_map", cst.SimpleString(f"{quote}neuron{quote}"))
                extra_markers.append((
                    ONE_PROCESS_TP_MARKER.format(tp=tp_size, process=process),
                    f"{tp_kw.keyword.value}={tp_size} sharded the model over {tp_size} NeuronCores; "  # type: ignore[union-attr]
                    f"DistributedConfig(tp_size={tp_size}) needs {tp_size} processes started by torchrun, which "
                    f"{process} is not: the load raises there"))
            elif tp_size is not None and tp_size > 1:
                try:
                    dc = ctx.name_for(DISTRIBUTED_CONFIG, anchor=_anchor(ctx))
                except NameClash as exc:
                    extra_markers.append((f"Pass distributed_config=DistributedConfig(tp_size={tp_size}) by hand.", str(exc)))
                else:
                    placement = ("distributed_config", cst.Call(
                        func=dc,
                        args=[cst.Arg(keyword=cst.Name("tp_size"), value=cst.Integer(str(tp_size)),
                                      equal=EQ)],
                    ))
                    extra_markers.append((
                        f"Launch with `torchrun --nproc_per_node={tp_size}`: one process per NeuronCore.",
                        f"{tp_kw.keyword.value}={tp_size} became DistributedConfig(tp_size={tp_size})"))  # type: ignore[union-attr]
            else:
                placement = ("device_map", cst.SimpleString(f"{quote}neuron{quote}"))

        # ---- static cache
        seq_name = "sequence_length" if "sequence_length" in keywords else "n_positions"
        seq = keywords.get(seq_name)
        if seq is not None and seq_name == "n_positions":
            applied.append(f"n_positions={ctx.module.code_for_node(seq.value)} becomes "
                           "generation_config.max_cache_len (the tokens, prompt + generated, it compiled for)")
        estimate = keywords.get("context_length_estimate")
        # nothing here calls the model: no inputs to pad or pool (asked only where the answer is used)
        idle = (estimate is not None or not self.static_cache) and never_run(ctx, node)
        if estimate is not None and not idle:
            extra_markers.append((
                f"Pad the prompts to one fixed length (padding={quote}max_length{quote}) so one prefill graph compiles.",
                f"context_length_estimate={ctx.module.code_for_node(estimate.value)} was dropped: it was the prompt "
                "length(s) the old stack compiled the context encoding for"))
        batch = keywords.get("batch_size")
        if batch is not None:
            applied.append(
                f"batch_size={ctx.module.code_for_node(batch.value)} dropped: it becomes the (padded) batch "
                + ("you pass to generate()" if self.static_cache else "you pass to the model")
            )
        knobs = [k for k in keywords if k in COMPILER_KNOBS]
        if knobs:
            applied.append(f"compiler options dropped: {', '.join(knobs)}")
        if "neuron_config" in keywords:
            extra_markers.append(
                "Remove neuron_config=: map sequence_length to max_cache_len, tp_degree to "
                "DistributedConfig(tp_size=), dtype to dtype="
            )

        drop = {"export", "batch_size", "sequence_length", "auto_cast_type", *OLD_GENERATION_KWARGS, *TP_KWARGS,
                *COMPILER_KNOBS}
        if dtype_expr is not None:
            drop.update(DTYPE_KWARGS)

        indent, prefix = indent_of(ctx), prefix_len(ctx, node)
        holder: dict[str, cst.CSTNode] = {}

        dicts = literal_dicts(ctx)  # computed now: the rewrite runs after the pass
        def rewrite(updated: cst.Call) -> cst.Call:
            new_args: list[cst.Arg] = []
            for a in expand_literal_kwargs(updated.args, dicts):
                if a.keyword is not None and a.keyword.value == seq_name:
                    holder["max_cache_len"] = a.value
                if a.keyword is not None and a.keyword.value in drop:
                    continue
                if a.keyword is not None and a.keyword.value == "torch_dtype":
                    a = a.with_changes(keyword=cst.Name("dtype"))
                new_args.append(a)
            added = []
            if dtype_expr is not None:
                added.append(cst.Arg(keyword=cst.Name("dtype"), value=dtype_expr, equal=EQ))
            if placement is not None:
                added.append(cst.Arg(keyword=cst.Name(placement[0]), value=placement[1], equal=EQ))
            added.extend(cst.Arg(keyword=cst.Name(k), value=v, equal=EQ) for k, v in placed_too)
            at = next((i for i, a in enumerate(new_args) if a.star == "**"), len(new_args))
            new_args[at:at] = added
            new = layout(updated, new_args, ctx.module, indent, prefix)
            holder["call"] = new
            return new

        ctx.replace(node, rewrite)
        for dead in drop_expanded_dicts(ctx, node, dicts):
            applied.append(f"{dead} removed: its items are arguments of the call now")

        # ---- where the static cache goes
        max_len_text = ctx.module.code_for_node(seq.value) if seq is not None else None
        inserted = False
        target = assigned_target(ctx, node)
        if not self.static_cache:
            if not idle:
                extra_markers.extend(self._no_cache_markers(target, max_len_text, ctx, quote))
        elif target is not None:
            inserted = insert_after(ctx, holder, lambda line: _cache_lines(line, holder, quote))
        if not inserted and self.static_cache:
            model = ctx.module.code_for_node(target) if target is not None else "<model>"
            lines = f"`{model}.generation_config.cache_implementation = {quote}static{quote}`"
            if max_len_text is not None:
                lines += f" and `{model}.generation_config.max_cache_len = {max_len_text}`"
            extra_markers.append((f"Set a static cache on `{_short(model)}` after loading it (generation_config).",
                                  f"set a static cache on this model after loading it: {lines}"))
        elif seq is None and self.static_cache:
            applied.append(
                "no sequence_length: the static cache is sized by each generate() call; set "
                "generation_config.max_cache_len to the longest prompt + new tokens to avoid recompiles"
            )

        placement_text = (
            f"distributed_config=DistributedConfig(tp_size={tp_size})"
            if placement is not None and placement[0] == "distributed_config"
            else f"device_map={quote}neuron{quote}" if not placed_too
            else f"distributed_config=DistributedConfig(tp_size={ctx.module.code_for_node(tp_expr)})"
        )
        cache_text = f"static cache, max_cache_len={max_len_text}" if max_len_text else "static cache"
        ctx.finding(node, f"{source_name}({'a pre-exported model' if pre_exported else 'export=True'}) -> "
                          f"{self.target}.from_pretrained(..., {placement_text})"
                          + (f" with a {cache_text}" if self.static_cache else "")
                          + (f", dtype from {dtype_from}" if dtype_from else ""))
        for message in applied:
            ctx.finding(node, message)
        for message in extra_markers:  # a message, or (message, its long form)
            text, detail = message if isinstance(message, tuple) else (message, None)
            ctx.marker(node, text, detail=detail)

    # ---------------------------------------------------------- texts subclasses change
    def _kwargs_advice(self) -> str:
        return _KWARGS_ADVICE

    def _pre_exported_advice(self) -> str:
        return _pre_exported_advice()

    def _pre_exported_placed_advice(self) -> str:
        """The marker of a pre-exported load the rule placed on the device (with its static cache)."""
        then = ("device_map=\"neuron\" and a static cache are set: set model.generation_config.max_cache_len to the "
                "exported sequence_length" if self.static_cache else
                "device_map=\"neuron\" is set: " + self._after_load_advice("the exported sequence_length"))
        return ("this loads a pre-exported Neuron model (compiled NEFFs + neuron_config.json), which native "
                "Transformers cannot load: point it to the original checkpoint (config.json \"neuron\" -> "
                "\"checkpoint_id\" or neuron_config.json \"checkpoint_id\") and add its dtype=; " + then)

    def _no_cache_markers(self, target, max_len_text, ctx, quote) -> list:
        """Markers for a model without a static cache (subclasses that do not generate)."""
        return []


PRE_EXPORTED_MARKER = "Point this load at the original checkpoint: Transformers cannot load a pre-exported Neuron model."


def _short(code: str, width: int = 30) -> str:
    """Code as a marker names it: one line, at most ``width`` characters."""
    code = " ".join(code.split())
    return code if len(code) <= width else code[: width - 3] + "..."


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


def _request_target(ctx: PythonContext, class_expr: cst.BaseExpression, target: str = TARGET) -> None:
    """Ask for the target import now, the way _on_name/_on_attribute will refer to it."""
    plan = ctx.local_state().get("plan", {})
    try:
        if isinstance(class_expr, cst.Name):
            if class_expr.value in plan and plan[class_expr.value][1] == "refs":
                ctx.name_for(target, anchor=plan[class_expr.value][0])
        else:
            ctx.name_for(target, anchor=_anchor(ctx), style="module")
    except NameClash:
        pass  # reported where the name is renamed


def _uses_two_step(ctx: PythonContext, local: str) -> bool:
    return re.search(rf"\b{re.escape(local)}\s*\.\s*(?:{'|'.join(TWO_STEP)})\b", ctx.source) is not None


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


# the names codemods/xla/transformers_neuronx.py imports from here (they live in _inference_args now)
_EQ, _literal, _quote_style, _indent, _prefix_len, _layout = EQ, literal, quote_style, indent_of, prefix_len, layout
_assigned_target, _insert_after = assigned_target, insert_after


# ---------------------------------------------------------------------- the other NxD inference classes
IMAGE_TEXT_SOURCES = (
    "optimum.neuron.NeuronModelForImageTextToText",
    "optimum.neuron.models.inference.modeling_utils.NeuronModelForImageTextToText",
)
EMBEDDING_SOURCES = (
    "optimum.neuron.NeuronModelForEmbedding",
    "optimum.neuron.models.inference.modeling_utils.NeuronModelForEmbedding",
)


class ImageTextToTextStaticCache(CausalLMStaticCache):
    id = "NM108"
    title = ("NeuronModelForImageTextToText -> AutoModelForImageTextToText on device_map='neuron' "
             "with a static cache")
    triggers = ("NeuronModelForImageTextToText",)
    owns = IMAGE_TEXT_SOURCES
    sources = IMAGE_TEXT_SOURCES
    class_name = "NeuronModelForImageTextToText"
    target = "transformers.AutoModelForImageTextToText"
    target_name = "AutoModelForImageTextToText"
    why = """
        optimum-neuron's NeuronModelForImageTextToText (NxD backend, after 0.4.5) compiled a
        vision-language decoder for fixed shapes, exactly like NeuronModelForCausalLM
        (`export=True, batch_size, sequence_length, tensor_parallel_size`, or
        `get_neuron_config()` + `export()`). Under TorchNeuron the Transformers model runs on the
        `neuron` device: `AutoModelForImageTextToText.from_pretrained(..., dtype=...,
        device_map="neuron")` (or `distributed_config=DistributedConfig(tp_size=N)` under torchrun),
        then a static KV cache of `max_cache_len = sequence_length` tokens for generate().
    """
    before = """
        from optimum.neuron import NeuronModelForImageTextToText

        def load(model_id):
            model = NeuronModelForImageTextToText.from_pretrained(
                model_id, export=True, batch_size=1, sequence_length=4096, tensor_parallel_size=1
            )
            return model
    """
    after = """
        from transformers import AutoModelForImageTextToText

        def load(model_id):
            model = AutoModelForImageTextToText.from_pretrained(model_id, device_map="neuron")
            model.generation_config.cache_implementation = "static"
            model.generation_config.max_cache_len = 4096
            return model
    """
    caveats = """
        As for NM101: `tensor_parallel_size` > 1 becomes `distributed_config=DistributedConfig(tp_size=N)`
        with a marker to launch under `torchrun --nproc_per_node=N`; the two-step
        `get_neuron_config()` + `export()` API, pre-exported (compiled) repositories, `**kwargs`
        variables and loads that are not assigned get a marker. The processor call that builds
        the inputs is not changed: keep the number of images and the prompt length fixed to
        limit recompiles.
    """


class EmbeddingModel(CausalLMStaticCache):
    id = "NM109"
    title = "NeuronModelForEmbedding -> AutoModel on device_map='neuron' (last-token pooling left to you)"
    triggers = ("NeuronModelForEmbedding",)
    owns = EMBEDDING_SOURCES
    sources = EMBEDDING_SOURCES
    class_name = "NeuronModelForEmbedding"
    target = "transformers.AutoModel"
    target_name = "AutoModel"
    static_cache = False
    why = """
        optimum-neuron's NeuronModelForEmbedding (0.4.5, NxD backend, e.g. Qwen3-Embedding) compiled
        a decoder for fixed shapes (`export=True, batch_size, sequence_length, tensor_parallel_size`,
        or `get_neuron_config()` + `export()`) and returned the hidden state of the last position.
        Under TorchNeuron the plain Transformers base model runs on the `neuron` device:
        `AutoModel.from_pretrained(..., dtype=..., device_map="neuron")` (or
        `distributed_config=DistributedConfig(tp_size=N)` under torchrun). It returns the hidden
        states of every position, so the pooling is left to a person (a marker says how).
    """
    before = """
        from optimum.neuron import NeuronModelForEmbedding

        def load(model_id):
            model = NeuronModelForEmbedding.from_pretrained(
                model_id, export=True, batch_size=1, sequence_length=512, tensor_parallel_size=1
            )
            return model
    """
    after = """
        from transformers import AutoModel

        def load(model_id):
            # TODO(neuron-migrate NM109): Pad the inputs to max_length=512 (padding="max_length", truncation=True).
            # TODO(neuron-migrate NM109): Move the inputs to model.device and pool the last non-padding token of last_hidden_state, unless the code does.
            model = AutoModel.from_pretrained(model_id, device_map="neuron")
            return model
    """
    caveats = """
        No static cache (the model does not generate). `sequence_length` becomes a marker asking to
        pad the tokenizer call to it; the pooling NeuronModelForEmbedding did (the last position's
        hidden state) becomes a marker. As for NM101: `tensor_parallel_size` > 1 becomes
        `distributed_config=DistributedConfig(tp_size=N)` under torchrun, and the two-step
        `get_neuron_config()` + `export()` API, pre-exported repositories and `**kwargs` variables get a
        marker.
    """

    def _after_load_advice(self, seq: str) -> str:
        return f"pad the inputs to {seq} (tokenizer padding=\"max_length\")"

    def _kwargs_advice(self) -> str:
        return ("move tensor_parallel_size > 1 to distributed_config=DistributedConfig(tp_size=N) (instead of "
                "device_map, under torchrun), drop export, batch_size and the compiler options, and pad the inputs "
                "to sequence_length")

    def _pre_exported_advice(self) -> str:
        return (
            "this loads a pre-exported Neuron model (compiled NEFFs + neuron_config.json), which native Transformers "
            "cannot load: point it to the original checkpoint (neuron_config.json \"checkpoint_id\"), add dtype= and "
            "device_map=\"neuron\", pad the inputs to the exported sequence_length and pool the last position's "
            "hidden state yourself"
        )

    def _no_cache_markers(self, target, max_len_text, ctx, quote) -> list:
        markers = []
        if max_len_text is not None:
            markers.append((
                fitted(f"Pad the inputs to max_length={max_len_text} (padding={quote}max_length{quote}, truncation=True).",
                       "Pad the inputs to the compiled sequence length (padding=\"max_length\", truncation=True)."),
                "each new input length compiles a new graph"))
        markers.append((
            "Move the inputs to model.device and pool the last non-padding token of last_hidden_state, unless the "
            "code does.",
            "NeuronModelForEmbedding took CPU inputs; a model loaded with device_map=\"neuron\" does not move the "
            "inputs of its forward calls (only generate() does): move them with .to(model.device). AutoModel returns "
            "the hidden states of every position, NeuronModelForEmbedding returned the last position's: pool them "
            "(then normalize if your model expects it) or load the model with "
            f"sentence_transformers.SentenceTransformer(model_id, device={quote}neuron{quote})"))
        return markers


RULES = (CausalLMStaticCache, ImageTextToTextStaticCache, EmbeddingModel)


def _may_be_none(expr: cst.BaseExpression, ctx: PythonContext) -> bool:
    """Whether a size given as a plain name may hold None: a parameter of the function around the load whose default
    is None (or not an int), or a name assigned None. Attributes (`args.tp_degree`) are taken as set."""
    if not isinstance(expr, cst.Name):
        return False
    scope = ctx.scope
    if isinstance(scope, cst.FunctionDef):
        for p in named_params(scope):
            if p.name.value == expr.value:
                default = literal(p.default) if p.default is not None else None
                return p.default is not None and not (isinstance(default, int) and not isinstance(default, bool))
    return any(isinstance(v, cst.Name) and v.value == "None" for v in assigned_values(ctx, expr.value))
