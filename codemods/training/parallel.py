"""NM301: ``with lazy_load_for_parallelism(...)`` -> ``from_pretrained(..., distributed_config=DistributedConfig(...))``.

optimum-neuron ≤ 0.2 loaded a model for tensor/pipeline parallelism inside a context manager that
put the layers on the meta device and swapped ``from_pretrained`` for a sharded loader::

    with lazy_load_for_parallelism(tensor_parallel_size=training_args.tensor_parallel_size):
        model = AutoModelForCausalLM.from_pretrained(model_id)

Transformers shards at load time itself, so the ``with`` goes (its body is dedented into the
enclosing block) and each model load inside gets the layout::

    model = AutoModelForCausalLM.from_pretrained(
        model_id, distributed_config=DistributedConfig(tp_size=int(os.environ.get("TP_SIZE", "1")))
    )

Sizes read from parsed arguments (``training_args.tensor_parallel_size``) become the ``TP_SIZE`` /
``PP_SIZE`` environment variables of the TorchNeuron launch convention (the training arguments no
longer have those fields); literal sizes stay literal; other expressions are kept.
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.training.mesh import (
    LAYOUT_MARKERS,
    pipeline_marker,
    FROM_CONFIG_MARKER,
    describe,
    env_size,
    has_pipeline,
    launch_advice,
    launch_detail,
    model_factors,
    one_per_line,
    sentence,
    whole_mesh,
)
from codemods.training.sources import (
    ARGS_SOURCES,
    DISTRIBUTED_CONFIG,
    LAZY_LOAD,
    LOADERS,
    NOT_MODELS,
    SFT_CONFIG_SOURCES,
    imports_a_trainer,
)
from codemods.training.layouts import SHARDED_MARKERS, sharded_load_marker
from codemods.training.lora import LORA_MARKERS, fsdp_instead, lora_blocks_tp, lora_marker
from codemods.common.arg_plan import (
    MAX_LINE,
    NOT_LITERAL,
    SAVE_ONLY_MODEL,
    ArgPlan,
    apply_plan,
    has_star_kwargs,
    keywords,
    line_prefix,
    literal,
    quote_of,
    save_only_model_code,
    statement_indent,
)
from migrator.imports import dotted
from migrator.model import fitted
from migrator.rules import NameClash, PythonContext, PythonRule
from migrator.tree import walk

ARGS_CLASSES = ARGS_SOURCES + SFT_CONFIG_SOURCES
#: (lazy_load_for_parallelism parameter, DistributedConfig field, environment variable), in positional order
SIZES = (("tensor_parallel_size", "tp_size", "TP_SIZE"), ("pipeline_parallel_size", "pp_size", "PP_SIZE"))


def _mesh(sizes, environ: str, quote: str = '"', ctx: PythonContext | None = None) -> dict[str, cst.BaseExpression]:
    """The DistributedConfig sizes of a with's ``sizes``: those read from the launch environment as
    ``int(os.environ.get("TP_SIZE", "1"))`` (with FSDP_SIZE beside them, which the launch sets for
    zero_1, unless there are pipeline stages), and the data-parallel replicas that make the
    product the world size (:func:`codemods.training.mesh.whole_mesh`)."""
    if ctx is not None and any(field == "tp_size" for field, _x, _e in sizes) and lora_blocks_tp(ctx):
        return fsdp_instead(environ, quote)  # LoRA over tensor-parallel layers fails: FSDP over every process
    out: dict[str, cst.BaseExpression] = {}
    for field, expr, env in sizes:
        out[field] = cst.parse_expression(env_size(environ, env, quote)) if expr is None else expr
    if any(expr is None for _f, expr, _e in sizes) and not has_pipeline(out):
        out["fsdp_size"] = cst.parse_expression(env_size(environ, "FSDP_SIZE", quote))
    return whole_mesh(out, environ, quote)


class LazyLoadForParallelism(PythonRule):
    id = "NM301"
    markers = SHARDED_MARKERS + LORA_MARKERS + LAYOUT_MARKERS + ((FROM_CONFIG_MARKER, """from_config builds the model without loading weights and takes no distributed_config;
        from_pretrained(..., distributed_config=DistributedConfig(...)) loads it sharded."""),)
    title = "with lazy_load_for_parallelism(...) removed; the loads inside get distributed_config=DistributedConfig(...)"
    fix = "mixed"
    triggers = ("lazy_load_for_parallelism",)
    owns = LAZY_LOAD
    why = """
        `lazy_load_for_parallelism(tensor_parallel_size=..., pipeline_parallel_size=...)` put the
        layers on the meta device and made `from_pretrained` load only this rank's shard for
        neuronx-distributed. Transformers does both itself when the load receives
        `distributed_config=DistributedConfig(tp_size=..., pp_size=...)`, so the `with` statement
        is removed (its body dedented) and the model loads inside it get the distributed config.
        Sizes that came from the parsed training arguments (which no longer have these fields)
        are read from the TP_SIZE / PP_SIZE environment variables set by the launch command, and
        those arguments get `save_only_model = True` when the layout is distributed (the Trainer
        refuses a model sharded at load time otherwise); arguments built in the function get it
        in their constructor (NM201). The processes beyond tp_size (x pp_size, x FSDP_SIZE that
        the launch sets for zero_1) are data-parallel replicas, `dp_replicate_size`: transformers
        5.23 requires the sizes to multiply to the world size.
    """
    before = """
        from transformers import AutoModelForCausalLM
        from optimum.neuron.distributed import lazy_load_for_parallelism

        def load(model_id, training_args):
            with lazy_load_for_parallelism(tensor_parallel_size=training_args.tensor_parallel_size):
                model = AutoModelForCausalLM.from_pretrained(model_id)
            return model
    """
    after = """
        import os
        from transformers import AutoModelForCausalLM
        from transformers.distributed import DistributedConfig

        def load(model_id, training_args):
            # TODO(neuron-migrate NM301): Set TP_SIZE=<tp_size> in the launch environment: the training arguments no longer carry it.
            model = AutoModelForCausalLM.from_pretrained(
                model_id,
                distributed_config=DistributedConfig(
                    tp_size=int(os.environ.get("TP_SIZE", "1")),
                    fsdp_size=int(os.environ.get("FSDP_SIZE", "1")),
                    dp_replicate_size=int(os.environ.get("WORLD_SIZE", "1"))
                    // (int(os.environ.get("TP_SIZE", "1")) * int(os.environ.get("FSDP_SIZE", "1")))
                    if int(os.environ.get("TP_SIZE", "1")) * int(os.environ.get("FSDP_SIZE", "1")) > 1 else 1,
                ),
            )
            if int(os.environ.get("TP_SIZE", "1")) * int(os.environ.get("FSDP_SIZE", "1")) > 1:
                # the Trainer refuses to build otherwise: resuming a model sharded at load time is not supported
                training_args.save_only_model = True
            return model
    """
    caveats = """
        Only loads written inside the `with` block get the distributed config: a helper function
        called there gets a marker instead. `from_config` takes no distributed config (a
        marker). `device_map` is removed from those loads (it is mutually exclusive with tensor
        parallelism). Reads of `training_args.tensor_parallel_size` outside the block are not
        rewritten. A `with` that also enters other context managers keeps them. When the sizes are
        not read from training arguments (literals, other names), the marker asks to give the
        trainer's arguments save_only_model=True.
    """

    def handlers(self):
        return {cst.With: self._on_with, cst.Call: self._on_call, cst.Name: self._on_name,
                cst.Assign: self._on_assign, cst.Attribute: self._on_attribute}

    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        """``args = NeuronTrainingArguments(..., tensor_parallel_size=8)``: the sizes ``args.*`` had."""
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
            return
        name = node.targets[0].target.value
        known = ctx.local_state().setdefault("args_sizes", {})
        value = node.value
        if isinstance(value, cst.Call) and ctx.qualname(value.func) in ARGS_CLASSES:
            kw = keywords(value)
            found = {param: literal(kw[param].value) if param in kw else 1 for param, _f, _e in SIZES}
            if has_star_kwargs(value):
                found = {param: NOT_LITERAL for param, _f, _e in SIZES}
            known[name] = None if name in known else found  # assigned twice: unknown
        elif name in known:
            known[name] = None

    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        """Reads of ``args.tensor_parallel_size`` outside lazy_load_for_parallelism: gone from TrainingArguments."""
        attr = node.attr.value
        if attr not in [p for p, _f, _e in SIZES] or not isinstance(node.value, cst.Name):
            return
        owner = node.value.value
        if owner not in ctx.local_state().get("args_sizes", {}) and not owner.endswith("args"):
            return
        stack = ctx.stack
        if any(isinstance(a, cst.Call) and ctx.qualname(a.func) in LAZY_LOAD for a in stack):
            whole = len(stack) >= 3 and isinstance(stack[-2], cst.Arg) and stack[-2].value is node \
                and isinstance(stack[-3], cst.Call) and ctx.qualname(stack[-3].func) in LAZY_LOAD
            if whole:
                return  # the size itself: the launch environment's TP_SIZE / PP_SIZE now (_sizes)
            # inside a kept expression (`int(args.tensor_parallel_size)`): it moves into the
            # DistributedConfig of the load, where the next run would mark it
        env = next(e for p, _f, e in SIZES if p == attr)
        ctx.marker(node, f"Read int(os.environ.get(\"{env}\", \"1\")) or the model's tp_size: TrainingArguments has no "
                         f"{attr}.")

    def _on_name(self, node: cst.Name, ctx: PythonContext) -> None:
        """Count uses of the imported name (an import nothing uses is removed in finish)."""
        for b in ctx.imports.bindings.get(node.value, ()):
            if b.qualified in LAZY_LOAD:
                parent = ctx.parent
                if not (isinstance(parent, cst.Attribute) and parent.attr is node):
                    uses = ctx.local_state().setdefault("uses", {})
                    uses[node.value] = uses.get(node.value, 0) + 1

    # ------------------------------------------------------------------ the with statement
    def _on_with(self, node: cst.With, ctx: PythonContext) -> None:
        lazy = [i for i, item in enumerate(node.items)
                if isinstance(item.item, cst.Call) and ctx.qualname(item.item.func) in LAZY_LOAD]
        if not lazy:
            return
        index = lazy[0]
        item = node.items[index]
        call = item.item
        if item.asname is not None:
            ctx.marker(node, "Remove this lazy_load_for_parallelism(...) as ...: pass distributed_config= to the load.")
            return
        sizes, owners, built = self._sizes(call, ctx)
        state = ctx.local_state()
        state.setdefault("withs", {})[id(node)] = (sizes, call)
        state.setdefault("loads", {})[id(node)] = 0
        added: list[cst.BaseStatement] = []  # finish() may add the save_only_model statement
        state.setdefault("save", {})[id(node)] = (owners, built, added)
        if len(node.items) == 1:
            ctx.replace(node, lambda new: _unwrap(new, added))
        else:
            ctx.replace(node, lambda new, i=index: _drop_item(new, i, added))
        ctx.finding(call, "lazy_load_for_parallelism removed: transformers shards the model while loading it")
        state["pending"] = state.get("pending", []) + [node]

    def _sizes(self, call: cst.Call, ctx: PythonContext):
        """[(DistributedConfig field, expression or None for the environment variable, env name)], the
        code of the arguments objects the environment sizes were read from, and whether a size was read
        from arguments built in the function (NM201 then gives them save_only_model=True)."""
        kw = keywords(call)
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        out = []
        owners: set[str] = set()
        built = False
        for i, (param, field, env) in enumerate(SIZES):
            expr = kw[param].value if param in kw else (positional[i] if i < len(positional) else None)
            if expr is None:
                continue
            value = literal(expr)
            if value == 1:
                continue
            if field == "pp_size" and imports_a_trainer(ctx):  # the Trainer cannot train pipeline stages
                code = ctx.module.code_for_node(expr)
                # (the training arguments given the same size carry NM201's marker of it: one per cause)
                if not re.search(rf"\bpipeline_parallel_size\s*=\s*{re.escape(code)}\b", ctx.code):
                    ctx.marker(call, pipeline_marker(code, isinstance(value, int)))
                continue
            if value is NOT_LITERAL and isinstance(expr, cst.Attribute) and expr.attr.value == param \
                    and isinstance(expr.value, cst.Name):
                known = (ctx.local_state().get("args_sizes") or {}).get(expr.value.value)
                built = built or known is not None
                if known is not None and isinstance(known[param], int) and not isinstance(known[param], bool):
                    value = known[param]  # the literal the arguments were built with
                    if value == 1:
                        continue
                    out.append((field, cst.Integer(str(value)), env))
                    continue
            if value is NOT_LITERAL and isinstance(expr, cst.Attribute) and expr.attr.value == param:
                out.append((field, None, env))  # a parsed argument: the launch environment now
                owners.add(ctx.module.code_for_node(expr.value))
            else:
                out.append((field, expr, env))
        return out, owners, built

    def finish(self, ctx: PythonContext) -> None:
        state = ctx.local_state()
        uses = state.get("uses", {})
        for b in ctx.imports.all_bindings():
            if b.qualified in LAZY_LOAD and b.alias is not None and not uses.get(b.local) \
                    and not ctx.is_ignored(b.line):
                ctx.remove_import(b)
                ctx.finding(b.alias, "removed the unused import of lazy_load_for_parallelism")
        for node in state.get("pending", ()):
            sizes = state["withs"][id(node)][0]
            if not sizes:
                continue
            loads = state["loads"].get(id(node), 0)
            mesh = _mesh(sizes, "os.environ", ctx=ctx)
            what = describe(mesh)
            lora = lora_blocks_tp(ctx) if any(f == "tp_size" for f, _x, _e in sizes) else None
            if loads > 0 and lora:
                self._save_only_model(ctx, node, sizes)
                ctx.marker(node, lora_marker(lora), detail=lora)
            elif loads > 0:
                envs = [f"{env}=<{field}>" for field, expr, env in sizes if expr is None]
                saved = self._save_only_model(ctx, node, sizes)
                detail = (f"the model is sharded when it is loaded (DistributedConfig({what})): {launch_detail(mesh)}"
                          + ("" if saved else "; the Trainer refuses a model sharded at load time unless its arguments "
                             "say save_only_model=True or save_strategy=\"no\""))
                if envs:
                    message = f"Set {' '.join(envs)} in the launch environment: the training arguments no longer carry it."
                elif not saved:
                    message = f"{sentence(launch_advice(mesh))}, and give the trainer's arguments save_only_model=True."
                else:
                    message = sharded_load_marker(mesh)
                ctx.marker(node, fitted(message, sharded_load_marker(mesh)), detail=detail)
            elif not state.get("from_config", {}).get(id(node)):
                ctx.marker(node, "Pass distributed_config=DistributedConfig(...) to the from_pretrained that builds this "
                                 "model.",
                           detail=f"no from_pretrained call was found inside lazy_load_for_parallelism: pass "
                                  f"distributed_config=DistributedConfig({what}) to it and launch with torchrun")

    def _save_only_model(self, ctx: PythonContext, node: cst.With, sizes) -> bool:
        """The arguments of the trainer that gets the sharded model need save_only_model=True (the Trainer
        refuses a model sharded at load time otherwise): for sizes read from arguments built in the function
        NM201 adds it to their constructor; for sizes read from other arguments (parsed: the launch
        environment now) they get it where the with was, when the layout is distributed. False: neither."""
        owners, built, added = ctx.local_state()["save"][id(node)]
        if built or _arguments_with_sizes(ctx):
            return True
        if len(owners) != 1:
            return False
        quote = quote_of(ctx.local_state()["withs"][id(node)][1])
        try:
            environ = ctx.module.code_for_node(
                ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module"))
        except NameClash:
            return False
        mesh = _mesh(sizes, environ, quote, ctx)
        if any(isinstance(literal(v), int) and literal(v) > 1 for v in mesh.values()):
            factors = []  # always distributed
        else:  # the data-parallel replicas are > 1 only when these are (whole_mesh)
            factors = [ctx.module.code_for_node(v) for v in model_factors(mesh)]
        owner = next(iter(owners))
        added.append(cst.parse_statement(save_only_model_code(owner, factors, ctx.module.default_indent)))
        ctx.finding(node, f"{owner}.save_only_model = True when the layout is distributed: {SAVE_ONLY_MODEL}")
        return True

    # ------------------------------------------------------------------ the loads inside
    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        if ctx.qualname(node.func) in LAZY_LOAD:
            if not any(isinstance(a, cst.WithItem) for a in ctx.stack[-3:-1]):
                ctx.marker(node, "Pass distributed_config=DistributedConfig(...) to from_pretrained: lazy_load_for_parallelism "
                                 "is gone.")
            return
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in LOADERS:
            return
        state = ctx.local_state()
        withs = state.get("withs")
        if not withs:
            return
        stack = ctx.stack
        owner = None
        for i in range(len(stack) - 2, -1, -1):
            if isinstance(stack[i], cst.With) and id(stack[i]) in withs and stack[i + 1] is stack[i].body:
                owner = stack[i]
                break
        if owner is None:
            return
        cls = ctx.module.code_for_node(func.value)
        if any(word in cls.rsplit(".", 1)[-1] for word in NOT_MODELS):
            return
        sizes, lazy_call = withs[id(owner)]
        if not sizes:
            return
        if func.attr.value == "from_config":
            state.setdefault("from_config", {})[id(owner)] = True
            ctx.marker(node, FROM_CONFIG_MARKER)
            return
        kw = keywords(node)
        state["loads"][id(owner)] += 1
        if "distributed_config" in kw:
            return
        plan = ArgPlan()
        if "device_map" in kw:
            plan.drop.add("device_map")
            ctx.finding(kw["device_map"], "dropped device_map (mutually exclusive with distributed_config)")
        anchor = ctx.imports.binding_of(lazy_call.func)
        quote = quote_of(node)
        try:
            environ = None
            if _mesh(sizes, "os.environ", ctx=ctx) != {f: x for f, x, _e in sizes}:
                environ = ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module")
            dist = ctx.name_for(DISTRIBUTED_CONFIG, anchor=anchor)
        except NameClash as exc:
            ctx.marker(node, "Add distributed_config=DistributedConfig(...) to this load by hand.", detail=str(exc))
            return
        code = ctx.module.code_for_node
        indent = statement_indent(ctx)
        # the body is dedented by one level
        dedent = indent[: len(indent) - len(_block_indent(ctx, owner))]
        prefix = " " * line_prefix(ctx, node)
        step = ctx.module.default_indent

        def config() -> cst.Call:
            mesh = _mesh(sizes, code(environ) if environ is not None else "os.environ", quote, ctx)
            parts = [f"{field}={code(expr)}" for field, expr in mesh.items()]
            one_line = f"{code(dist)}({', '.join(parts)})"
            if len(dedent + step) + len("distributed_config=,") + len(one_line) <= MAX_LINE:
                return cst.parse_expression(one_line)
            # the sizes on a line of their own (the whitespace is relative to the block's indentation:
            # the argument sits one level below the statement, the sizes one more)
            together = f"{step}{step}{', '.join(parts)}"
            if len(dedent) + len(together) <= MAX_LINE:
                return cst.parse_expression(f"{code(dist)}(\n{together}\n{step})")
            return cst.parse_expression(f"{code(dist)}(\n{one_per_line(parts, step + step, len(dedent))}{step})")

        plan.add.append(("distributed_config", config))
        ctx.replace(node, lambda new: apply_plan(new, plan, MAX_LINE, dedent + prefix, step))
        ctx.finding(node, "distributed_config=DistributedConfig(...) added to the load (was lazy_load_for_parallelism)")


def _block_indent(ctx: PythonContext, with_node: cst.With) -> str:
    body = with_node.body
    if isinstance(body, cst.IndentedBlock):
        return body.indent if body.indent is not None else ctx.module.default_indent
    return ""


def _with_added(stmts: list, added: list) -> list:
    """The statements of a block with ``added`` after them (before them when the block ends by leaving)."""
    if not added:
        return stmts
    last = stmts[-1] if stmts else None
    if isinstance(last, cst.SimpleStatementLine) and any(isinstance(s, (cst.Return, cst.Raise)) for s in last.body):
        first = stmts[0]
        moved = [added[0].with_changes(leading_lines=[*first.leading_lines, *added[0].leading_lines]), *added[1:]]
        return [*moved, first.with_changes(leading_lines=()), *stmts[1:]]
    return [*stmts, *added]


def _unwrap(new: cst.With, added: list = ()):
    """The body statements of a ``with`` in its place (libcst indents them for the enclosing block)."""
    body = new.body
    if isinstance(body, cst.IndentedBlock):
        stmts = _with_added(list(body.body), list(added))
    else:  # `with x: a; b`
        stmts = _with_added([cst.SimpleStatementLine(body=list(body.body))], list(added))
    if not stmts:
        return cst.RemovalSentinel.REMOVE
    first = stmts[0]
    stmts[0] = first.with_changes(leading_lines=[*new.leading_lines, *first.leading_lines])
    return cst.FlattenSentinel(stmts)


def _drop_item(new: cst.With, index: int, added: list = ()) -> cst.With:
    items = list(new.items)
    last_comma = items[-1].comma
    del items[index]
    items[-1] = items[-1].with_changes(comma=last_comma)
    if added and isinstance(new.body, cst.IndentedBlock):
        new = new.with_changes(body=new.body.with_changes(body=_with_added(list(new.body.body), list(added))))
    return new.with_changes(items=items)


RULES = (LazyLoadForParallelism,)


#: the Neuron argument classes NM201/NM203 rewrite; given a parallel size, they get save_only_model from NM201
_SIZED_ARGUMENTS = ("NeuronTrainingArguments", "NeuronSFTConfig", "NeuronORPOConfig", "TrainiumTrainingArguments")


def _arguments_with_sizes(ctx: PythonContext) -> bool:
    """Whether the unit builds Neuron training arguments with a tensor or pipeline size (NM201 gives them
    save_only_model: the marker at the load does not ask for it again)."""
    state = ctx.local_state()
    if "sized arguments" not in state:
        found = False
        for n in walk(ctx.module):
            if isinstance(n, cst.Call) and (dotted(n.func) or "").rsplit(".", 1)[-1] in _SIZED_ARGUMENTS and any(
                    a.keyword is not None and a.keyword.value in ("tensor_parallel_size", "pipeline_parallel_size")
                    for a in n.args):
                found = True
                break
        state["sized arguments"] = found
    return state["sized arguments"]
