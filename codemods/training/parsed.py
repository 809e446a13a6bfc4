"""NM207: Neuron training arguments used after they are built.

* ``dataclasses.replace(training_args, tensor_parallel_size=1, zero_1=False, ...)``: the keywords
  get NM201's field handling (Neuron-only fields dropped, v5 renames), without the static-shape
  additions (the copy keeps the original's);
* ``training_args.mp_plugin.tensor_parallel_size`` (optimum-neuron ≤ 0.1 built a
  ModelParallelismPlugin from the arguments) and ``training_args.trn_config.tensor_parallel_size``
  (0.2+, a TrainingNeuronConfig): the sizes the arguments no longer carry. They become the literal
  the arguments were built with in the same function, else the ``TP_SIZE`` / ``PP_SIZE``
  environment variables of the launch convention; ``should_parallelize`` becomes the test on
  those; other fields get a marker. The pipeline size is 1 now: the Trainer these arguments go to
  cannot train pipeline stages, so the layouts the training rules write have none.
* ``training_args.world_size``: optimum-neuron counted data-parallel ranks there (processes //
  (tp x pp) up to 0.0.22, ``trn_config.data_parallel_size`` in 0.4; 0.0.23-0.3 counted processes and
  had ``training_args.dp_size`` for the data-parallel size); natively it is the process count, so a
  script's metrics and step counts would double under TP 2. It becomes ``world_size // tp_size``
  (the data-parallel ranks of the migrated layout) where the tensor-parallel size is known (built in
  the same function, or the launch's TP_SIZE for parsed arguments); ``dp_size`` becomes the same;
  a file that reads ``dp_size`` or ``world_size_as_dp_size`` ran 0.0.23-0.3 and keeps its
  ``world_size``; other reads get a marker.
"""

from __future__ import annotations

import libcst as cst

from codemods.training.arguments import _plan_fields
from codemods.training.layouts import _code, _track_parsed
from codemods.training.lora import lora_blocks_tp
from codemods.training.sources import ARGS_SOURCES, SFT_CONFIG_SOURCES
from codemods.common.arg_plan import (
    MAX_LINE,
    ArgPlan,
    apply_plan,
    has_star_kwargs,
    keywords,
    line_prefix,
    literal,
    statement_indent,
)
from codemods.training.orpo import ORPO_CONFIG_SOURCES
from migrator.rules import NameClash, PythonContext, PythonRule

ARGS_CLASSES = ARGS_SOURCES + SFT_CONFIG_SOURCES + ORPO_CONFIG_SOURCES
#: containers of the layout that the old arguments built
CONTAINERS = ("mp_plugin", "trn_config")
#: their size fields -> (environment variable of the launch convention, arguments field)
SIZES = {"tensor_parallel_size": ("TP_SIZE", "tensor_parallel_size"),
         "pipeline_parallel_size": ("PP_SIZE", "pipeline_parallel_size")}
SHOULD_PARALLELIZE = "should_parallelize"
#: a name that holds training arguments (what dataclasses.replace is checked on)
_ARGS_WORDS = ("args", "arguments", "config")


_ARGS_NAMES = frozenset(q.rsplit(".", 1)[-1] for q in ARGS_CLASSES)


def _last(func: cst.BaseExpression) -> str | None:
    """The called name, cheaply (before resolving it through the imports)."""
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return None


#: reads of the data-parallel size on training arguments
DP_READS = ("world_size", "dp_size")


def _counted_processes(ctx: PythonContext) -> bool:
    """Whether the module was written for optimum-neuron 0.0.23-0.3, whose world_size counted processes: it reads
    ``.dp_size`` or uses ``world_size_as_dp_size``."""
    found = ctx.scratch.get("NM207 0.0.23-0.3")
    if found is None:
        hits = []

        class _Reads(cst.CSTVisitor):
            def visit_Attribute(self, node: cst.Attribute) -> None:
                if node.attr.value in ("dp_size", "world_size_as_dp_size", "world_size_should_behave_as_dp_size"):
                    hits.append(node)

        ctx.module.visit(_Reads())
        found = ctx.scratch["NM207 0.0.23-0.3"] = bool(hits)
    return found


def _old_arguments(ctx: PythonContext, owner: str) -> bool:
    """Whether ``owner`` names old-stack training arguments the rule could not follow: a parameter annotated with
    one of their classes, or a name that says it holds training arguments in a module that imports them."""
    for anc in reversed(ctx.stack):
        if isinstance(anc, cst.FunctionDef):
            for param in (*anc.params.params, *anc.params.kwonly_params):
                if param.name.value == owner and param.annotation is not None:
                    return ctx.qualname(param.annotation.annotation) in ARGS_CLASSES
    return "training_args" in owner and any(b.qualified in ARGS_CLASSES for b in ctx.imports.all_bindings())


class ParsedArgumentsIdioms(PythonRule):
    id = "NM207"
    title = ("Neuron training arguments after they are built: dataclasses.replace fields, mp_plugin/trn_config size "
             "reads, world_size / dp_size as the data-parallel size")
    fix = "mixed"
    triggers = ("mp_plugin", "trn_config", "NeuronTrainingArguments", "NeuronSFTConfig", "NeuronORPOConfig",
                "TrainiumTrainingArguments")
    why = """
        Scripts copy their training arguments with `dataclasses.replace(training_args, ...)` and
        read the layout optimum-neuron derived from them (`training_args.mp_plugin` up to 0.1,
        `training_args.trn_config` from 0.2). The native TrainingArguments / SFTConfig have neither
        the Neuron-only fields nor these containers: the replace keywords are handled as NM201
        handles the constructor's, and the size reads become the sizes the script was built
        with, or the TP_SIZE / PP_SIZE environment variables the launch command sets (the
        TorchNeuron convention the shell rules write).
    """
    before = """
        import dataclasses

        from optimum.neuron import NeuronTrainingArguments

        def eval_args(training_args: NeuronTrainingArguments):
            if training_args.mp_plugin.tensor_parallel_size > 1:
                print("sharded")
            return dataclasses.replace(training_args, per_device_eval_batch_size=1, zero_1=False)
    """
    after = """
        import os
        import dataclasses

        from transformers import TrainingArguments

        def eval_args(training_args: TrainingArguments):
            if int(os.environ.get("TP_SIZE", "1")) > 1:
                print("sharded")
            return dataclasses.replace(training_args, per_device_eval_batch_size=1)
    """
    caveats = """
        `dataclasses.replace` is rewritten when its first argument is a name or attribute that
        says it holds arguments or a config (`training_args`, `sft_config`...). Pipeline, sequence
        and KV settings read from mp_plugin / trn_config other than the two sizes get a marker.
        A size read from arguments built with a non-literal size keeps the environment variable.
        The pipeline size reads as 1 (the migrated layout has no pipeline stages). `world_size`
        was the data-parallel size in optimum-neuron 0.4 (and up to 0.0.22) and is the process
        count natively: it becomes `world_size // tp_size` where the tensor-parallel size is
        known (arguments built in the same function, or TP_SIZE for parsed ones; unchanged
        without tensor parallelism or under FSDP for LoRA), `dp_size` (0.0.23-0.3) the same; a
        file that reads dp_size keeps its world_size (0.0.23-0.3 counted processes there);
        arguments the rule cannot follow get a marker.
    """

    def handlers(self):
        return {cst.Call: self._on_call, cst.Attribute: self._on_attribute, cst.Assign: self._on_assign}

    # ------------------------------------------------------------------ args.world_size / args.dp_size
    def _on_size_read(self, node: cst.Attribute, ctx: PythonContext) -> None:
        """``training_args.world_size`` (the data-parallel size in optimum-neuron 0.4 and up to 0.0.22, the process
        count natively) and ``training_args.dp_size`` (0.0.23-0.3): the data-parallel size of the migrated layout."""
        parent = ctx.parent
        if isinstance(parent, cst.AssignTarget) or (isinstance(parent, (cst.AnnAssign, cst.AugAssign))
                                                     and parent.target is node):
            return
        if isinstance(parent, cst.Attribute) and parent.value is node:
            return
        owner, field = node.value.value, node.attr.value
        state = ctx.local_state()
        built = state.get("built", {}).get((ctx.scope_id, owner), "unknown")
        parsed = any(name == owner and scope in (ctx.scope_id, 0) for name, _s, scope, _c in state.get("parsed", ()))
        if built == "unknown" and not parsed:
            if field == "world_size" and _old_arguments(ctx, owner):
                ctx.marker(node, f"Divide {owner}.world_size by tp_size where it meant data-parallel ranks: it counts "
                                 "processes now.")
            return
        if field == "world_size" and _counted_processes(ctx):
            return  # 0.0.23-0.3: world_size was the process count there too (dp_size the data-parallel size)
        if lora_blocks_tp(ctx):
            tp = None  # the layout is FSDP over every process (LoRA over tensor parallelism fails)
        elif built not in ("unknown", None) and not parsed:
            tp = built.get("tp_expr")
        else:
            try:
                environ = _code(ctx, ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module"))
            except NameClash as exc:
                ctx.marker(node, f"Divide {_code(ctx, node)} by the tensor-parallel size by hand.", detail=str(exc))
                return
            tp = f'int({environ}.get("TP_SIZE", "1"))'
        if built is None:  # assigned more than once here: which arguments cannot be told
            ctx.marker(node, f"Use world_size // tp_size for {_code(ctx, node)}: that is the data-parallel size now.")
            return
        base = f"{owner}.world_size"
        if tp is None or literal(cst.parse_expression(tp)) == 1:
            if field == "world_size":
                return  # no tensor parallelism: every process is a data-parallel rank, as before
            text = base
        else:
            factor = tp if isinstance(cst.parse_expression(tp), (cst.Name, cst.Integer, cst.Attribute, cst.Call)) \
                else f"({tp})"
            text = f"{base} // {factor}"
        if isinstance(parent, (cst.BinaryOperation, cst.Attribute, cst.Subscript, cst.UnaryOperation)) and " // " in text:
            text = f"({text})"
        ctx.replace(node, cst.parse_expression(text))
        ctx.finding(node, f"{_code(ctx, node)} -> {text} (the data-parallel size: world_size counts processes natively)")

    # ------------------------------------------------------------------ what the arguments were built with
    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        _track_parsed(node, ctx, ARGS_CLASSES)
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
            return
        key = (ctx.scope_id, node.targets[0].target.value)
        known = ctx.local_state().setdefault("built", {})
        value = node.value
        if isinstance(value, cst.Call) and _last(value.func) in _ARGS_NAMES and ctx.qualname(value.func) in ARGS_CLASSES \
                and not has_star_kwargs(value):
            kw = keywords(value)
            sizes = {}
            for field in SIZES:
                v = literal(kw[field].value) if field in kw else 1
                sizes[field] = v if isinstance(v, int) and not isinstance(v, bool) else None
            sizes["tp_expr"] = _code(ctx, kw["tensor_parallel_size"].value) if "tensor_parallel_size" in kw else "1"
            known[key] = None if key in known else sizes
        elif key in known:
            known[key] = None

    # ------------------------------------------------------------------ dataclasses.replace
    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        if _last(node.func) != "replace" or ctx.qualname(node.func) != "dataclasses.replace" or not node.args \
                or node.args[0].keyword is not None:
            return
        first = node.args[0].value
        name = first.attr.value if isinstance(first, cst.Attribute) else getattr(first, "value", None)
        if not isinstance(name, str) or not any(w in name.lower() for w in _ARGS_WORDS):
            return
        plan = ArgPlan()
        sizes = _plan_fields(node, ctx, plan, static=False, cls="dataclasses.replace")
        if sizes:
            layout = ", ".join(f"{k}={_code(ctx, v)}" for k, v in sizes.items())
            ctx.marker(node, "Set this layout where the model is loaded (distributed_config=): the copy no longer changes it.",
                       detail=f"DistributedConfig({layout}): the layout is fixed when the model is loaded "
                              "(from_pretrained(..., distributed_config=...))")
        if plan.empty():
            return
        indent, prefix, step = statement_indent(ctx), line_prefix(ctx, node), ctx.module.default_indent
        ctx.replace(node, lambda new: apply_plan(new, plan, MAX_LINE, indent + " " * prefix, step))

    # ------------------------------------------------------------------ args.mp_plugin.<field>
    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        if node.attr.value in DP_READS and isinstance(node.value, cst.Name):
            self._on_size_read(node, ctx)
            return
        inner = node.value
        if not isinstance(inner, cst.Attribute) or inner.attr.value not in CONTAINERS \
                or not isinstance(inner.value, cst.Name) or ctx.qualname(inner) is not None:
            return
        parent = ctx.parent
        if isinstance(parent, cst.AssignTarget) or (isinstance(parent, (cst.AnnAssign, cst.AugAssign))
                                                     and parent.target is node):
            return
        container, field, owner = inner.attr.value, node.attr.value, inner.value.value
        read = _code(ctx, node)
        if field not in SIZES and field != SHOULD_PARALLELIZE:
            ctx.marker(node, f"Read {read} from the model load: the arguments have no {container} now.",
                       detail="the layout is the model's DistributedConfig now")
            return
        built = ctx.local_state().get("built", {}).get((ctx.scope_id, owner))
        try:
            environ = _code(ctx, ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module")) \
                if built is None or any(v is None for v in built.values()) else None
        except NameClash as exc:
            ctx.marker(node, f"Replace {read} by hand: it no longer exists.", detail=str(exc))
            return

        def size(name: str) -> str:
            if name == "pipeline_parallel_size":
                return "1"  # the migrated layout has no pipeline stages (the Trainer cannot train them)
            if built is not None and built[name] is not None:
                return str(built[name])
            return f'int({environ}.get("{SIZES[name][0]}", "1"))'

        if field in SIZES:
            text = size(field)
        else:
            text = f"{size('tensor_parallel_size')} > 1"
            if not (isinstance(parent, (cst.If, cst.While, cst.Assign, cst.Return))
                    or isinstance(parent, cst.Arg) and parent.value is node):
                text = f"({text})"
        if built is None or any(v is None for v in built.values()):
            ctx.finding(node, f"{read} -> {text} (the launch environment: the arguments no longer carry it)")
        else:
            ctx.finding(node, f"{read} -> {text} (what the arguments were built with)")
        ctx.replace(node, cst.parse_expression(text))


RULES = (ParsedArgumentsIdioms,)
