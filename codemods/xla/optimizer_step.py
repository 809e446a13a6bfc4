"""NM403: ``xm.optimizer_step(optimizer)`` -> ``optimizer.step()``, and the gradient averaging it did.

torch-xla's ``optimizer_step`` all-reduced (averaged) the gradients over every process before
stepping. Natively that is ``DistributedDataParallel``'s job: in a multi-process module with a
process group, where the model whose parameters the optimizer was built from is created in the
same function, the model is wrapped in DDP right after its creation; elsewhere a marker says that
the averaging is missing. Facts: torch-xla 2.8 ``torch_xla/core/xla_model.py``.
"""

from __future__ import annotations

import keyword

import libcst as cst

from codemods.xla.base import (
    _WRAPPED_HINTS,
    _atomic,
    _bind_args,
    _call_args,
    drop_old_comment,
    _GROUP_MAKERS,
    _has_process_group,
    _keyword,
    _multi_process,
    _torch,
    _XlaRule,
    XM,
)
from migrator.rules import NameClash, PythonContext


# --------------------------------------------------------------------------- NM403


WRAP_MARKER = "Wrap the model in DistributedDataParallel or fully_shard: xm.optimizer_step averaged the gradients."
#: the same in a module that makes no process group (torch-xla's runtime reduced without one; DDP needs one)
NO_GROUP_MARKER = ("Call dist.init_process_group(\"neuron\") and wrap the model in DDP: xm.optimizer_step averaged the "
                   "gradients.")


class XlaOptimizerStep(_XlaRule):
    id = "NM403"
    markers = (
        (WRAP_MARKER,
         """xm.optimizer_step all-reduced (averaged) the gradients over all processes before the step, and nothing
         does that after the rewrite to optimizer.step(): wrap the model in
         torch.nn.parallel.DistributedDataParallel (or FSDP2 fully_shard), or all-reduce the gradients before
         the step by hand."""),
        (NO_GROUP_MARKER,
         """xm.optimizer_step all-reduced (averaged) the gradients over all processes through torch-xla's own
         runtime, which needed no torch.distributed process group (xmp.spawn scripts make none). Natively DDP (or
         FSDP2) averages them, over a process group: call torch.distributed.init_process_group("neuron") once per
         process (torchrun sets RANK, LOCAL_RANK and WORLD_SIZE), then wrap the model in
         DistributedDataParallel."""),
    )
    title = "xm.optimizer_step(opt) -> opt.step() (marker where the gradient all-reduce it did is now missing)"
    fix = "mixed"
    triggers = ("torch_xla",)
    owns = (f"{XM}.optimizer_step",)
    natives = {f"{XM}.optimizer_step": "optimizer.step(**optimizer_args) after DDP/FSDP averaged the gradients"}
    why = """
        `xm.optimizer_step(optimizer, barrier=False, optimizer_args={}, groups=None,
        pin_layout=True)` all-reduced (averaged) the gradients over every process, called
        `optimizer.step(**optimizer_args)` and, with `barrier=True`, cut the graph. On
        TorchNeuron the step is the plain `optimizer.step(...)`; `barrier` and `pin_layout` have
        no meaning in eager mode and are dropped. The gradient averaging is DDP's or FSDP2's job:
        in a multi-process script with a process group whose module wraps no model yet, the model
        the optimizer was built from (`optimizer = Opt(model.parameters(), ...)`, with `model`
        assigned earlier in the same function) is wrapped in `DistributedDataParallel(model,
        forward_sync_buffers=False)` just before the optimizer is built (the old step averaged the
        gradients only, each replica kept its own buffers; DDP's default broadcasts rank 0's
        buffers in every forward, a collective a rank-0-only evaluation waits on forever) (under `if torch.distributed.is_initialized():` unless an
        `init_process_group(...)` statement runs before it on every path: a script that makes its
        group only `if args.distributed:` still runs as one process); where that cannot be seen,
        a marker says that the averaging is missing. An end-of-line comment describing the old step (`# all-reduces across cores`)
        is removed.
    """
    before = """
        import torch_xla.core.xla_model as xm

        xm.optimizer_step(optimizer, optimizer_args={"closure": closure})
    """
    after = """
        optimizer.step(closure=closure)
    """
    caveats = """
        The DDP/FSDP check reads the module only: a model wrapped in another module still gets
        the marker (delete it once checked). After the DDP wrap, `model.state_dict()` /
        `model.load_state_dict()` later in the same function become `model.module.state_dict()` /
        `...load_state_dict()`, so that checkpoints keep the keys of the unwrapped model, and so do the
        Transformers model's own methods and attributes DDP does not forward (`save_pretrained`,
        `push_to_hub`, `generate`, `config`, ...: AttributeError on the wrapper); uses in
        other functions (`save(model)`) see the DDP module. `groups=` (all-reduce within replica groups) and
        `**kwargs` spread into the call get a marker instead of a rewrite.
    """

    PARAMS = ("optimizer", "barrier", "optimizer_args", "groups", "pin_layout")

    def handlers(self):
        table = super().handlers()
        table[cst.Call] = self._on_call
        table[cst.Attribute] = self._on_attribute_or_reference
        return table

    def _on_attribute_or_reference(self, node: cst.Attribute, ctx: PythonContext) -> None:
        self._on_reference(node, ctx)
        self._on_attribute(node, ctx)

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        """Record, in order, the `<name>.parameters()` / `.state_dict()` / `.load_state_dict()` calls of each
        function: once a model is wrapped in DDP, its state-dict calls after the wrap go through `.module`."""
        func = node.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.attr.value in _MODEL_CALLS:
            _record(ctx, node, func)

    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        """`<name>.config` / `.generation_config` read (not called): DistributedDataParallel does not forward them
        either (AttributeError), so after the wrap they go through `.module` too."""
        if isinstance(node.value, cst.Name) and node.attr.value in _MODEL_ATTRS and not (
                isinstance(ctx.parent, cst.Call) and ctx.parent.func is node):
            _record(ctx, node, node)

    def finish(self, ctx: PythonContext) -> None:
        state = ctx.local_state()
        for scope, model, parameters in state.get("wraps", ()):
            after = False
            for s_id, name, attr, node, value in state.get("calls", ()):
                if node is parameters:
                    after = True
                elif after and s_id == scope and name == model and attr != "parameters":
                    ctx.replace(value, cst.Attribute(value=value, attr=cst.Name("module")))
                    why = ("whose own state dict prefixes every key with `module.`" if "state_dict" in attr else
                           f"which does not forward {attr}")
                    called = "()" if attr in _MODEL_CALLS else ""
                    ctx.finding(node, f"{model}.{attr}{called} -> {model}.module.{attr}{called}: {model} is wrapped in "
                                      f"DistributedDataParallel, {why}")

    def rewrite(self, qual, call, func, ctx):
        bound = _bind_args(call, self.PARAMS)
        if bound is None or "optimizer" not in bound:
            return "unsupported arguments"
        groups = bound.get("groups")
        if groups is not None and not (isinstance(groups.value, cst.Name) and groups.value.value == "None"):
            return "use DDP with a process_group for the replica groups of `groups=`"
        params = self.PARAMS

        def build(updated: cst.Call) -> cst.BaseExpression:
            b = _bind_args(updated, params)
            assert b is not None
            opt = _atomic(b["optimizer"].value)
            args: list[cst.Arg] = []
            if "optimizer_args" in b:
                value = b["optimizer_args"].value
                keywords = _dict_keywords(value)
                args = keywords if keywords is not None else [cst.Arg(value=value, star="**")]
            step = cst.Attribute(value=opt, attr=cst.Name("step"))
            return cst.Call(func=step, args=_call_args(args))

        ctx.replace(call, build)
        ctx.finding(call, f"{qual}(optimizer) -> optimizer.step()")
        if _multi_process(ctx) and not any(h in ctx.source for h in _WRAPPED_HINTS) and not _wrap_model(
                bound["optimizer"].value, call, ctx):
            ctx.marker(call, WRAP_MARKER if any(h in ctx.code for h in _GROUP_MAKERS) else NO_GROUP_MARKER)
        drop_old_comment(call, ctx, "torch-xla's optimizer_step")
        return None


def _record(ctx: PythonContext, node: cst.CSTNode, attribute: cst.Attribute) -> None:
    """Note, in order, a use ``<name>.<attr>`` (``node``: the call or the attribute read) of the function around it."""
    scope = next((n for n in reversed(ctx.stack) if isinstance(n, cst.FunctionDef)), ctx.module)
    ctx.local_state().setdefault("calls", []).append(
        (id(scope), attribute.value.value, attribute.attr.value, node, attribute.value))  # type: ignore[attr-defined]


def _wrap_model(optimizer: cst.BaseExpression, call: cst.Call, ctx: PythonContext) -> bool:
    """Wrap the model in DistributedDataParallel just before ``optimizer = Opt(model.parameters(), ...)``
    when that statement and the model's creation are statements of the function (or module) that
    steps; True when done (or already asked by another step of the same optimizer)."""
    if not isinstance(optimizer, cst.Name) or not _has_process_group(ctx):
        return False
    scope = next((n for n in reversed(ctx.stack) if isinstance(n, cst.FunctionDef)), ctx.module)
    body = scope.body.body if isinstance(scope, cst.FunctionDef) else scope.body
    if not isinstance(body, (list, tuple)):
        return False
    found = None
    for k, stmt in enumerate(body):
        target, value = _assignment(stmt)
        if target != optimizer.value or not isinstance(value, cst.Call) or not value.args:
            continue
        first = value.args[0].value
        if (value.args[0].keyword is None and isinstance(first, cst.Call) and not first.args
                and isinstance(first.func, cst.Attribute) and first.func.attr.value == "parameters"
                and isinstance(first.func.value, cst.Name)):
            found = (k, first.func.value.value, first)
    if found is None:
        return False
    k, model, parameters = found
    if not any(_assignment(stmt)[0] == model for stmt in body[:k]):
        return False  # the model comes from elsewhere (an argument, a global): wrap it where it is made
    opt_stmt = body[k]
    wrapped = ctx.local_state().setdefault("wrapped", set())
    if id(opt_stmt) in wrapped:
        return True
    wrapped.add(id(opt_stmt))
    try:
        torch = _torch(ctx, ctx.imports.binding_of(call.func) if isinstance(call.func, (cst.Name, cst.Attribute)) else None)
    except NameClash:
        return False
    # xm.optimizer_step averaged the gradients only: each replica kept its own buffers (BatchNorm statistics).
    # DDP's default broadcasts rank 0's buffers at every forward, a collective that a forward on some ranks
    # only (a rank-0 evaluation) waits on forever
    ddp = cst.parse_statement(
        f"{model} = {torch}.nn.parallel.DistributedDataParallel({model}, forward_sync_buffers=False)\n")
    if not _group_made_before(body[:k], ctx):
        # the process group is made under a condition (`if args.distributed:`), elsewhere, or by a Trainer: a run
        # without one (a single process) must not build a DDP module, which needs it
        ddp = cst.parse_statement(f"if {torch}.distributed.is_initialized():\n    {cst.Module(body=[]).code_for_node(ddp)}")

    def wrap(updated: cst.BaseStatement) -> cst.FlattenSentinel:
        return cst.FlattenSentinel([ddp.with_changes(leading_lines=updated.leading_lines),
                                    updated.with_changes(leading_lines=())])

    ctx.replace(opt_stmt, wrap)
    ctx.finding(call, f"{model} wrapped in DistributedDataParallel before its optimizer is built: DDP averages the "
                      "gradients in backward(), as xm.optimizer_step did before the step")
    ctx.local_state().setdefault("wraps", []).append((id(scope), model, parameters))
    return True


def _group_made_before(statements, ctx: PythonContext) -> bool:
    """Whether an ``init_process_group(...)`` statement runs on every path before the wrap: a statement of its own
    earlier in the wrapping function (or module), or one at the module's top level."""
    def inits(stmt: cst.CSTNode) -> bool:
        return isinstance(stmt, cst.SimpleStatementLine) and "init_process_group(" in cst.Module(body=[]).code_for_node(stmt)

    return any(inits(stmt) for stmt in statements) or any(inits(stmt) for stmt in ctx.module.body)


_MODEL_CALLS = ("parameters", "state_dict", "load_state_dict",
                # the Transformers model's own methods, which DistributedDataParallel does not forward
                "save_pretrained", "push_to_hub", "generate", "resize_token_embeddings", "gradient_checkpointing_enable",
                "get_input_embeddings", "get_output_embeddings", "tie_weights", "num_parameters")
#: attributes read on the model that DistributedDataParallel does not forward either
_MODEL_ATTRS = ("config", "generation_config")


def _assignment(stmt: cst.CSTNode) -> tuple[str | None, cst.BaseExpression | None]:
    """(name, value) for a line ``name = value``."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
            return small.targets[0].target.value, small.value
        if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) and small.value is not None:
            return small.target.value, small.value
    return None, None


def _dict_keywords(value: cst.BaseExpression) -> list[cst.Arg] | None:
    """``{"closure": c}`` -> ``[closure=c]`` when every key is an identifier string."""
    if not isinstance(value, cst.Dict):
        return None
    out = []
    for el in value.elements:
        if not isinstance(el, cst.DictElement) or not isinstance(el.key, cst.SimpleString):
            return None
        key = el.key.evaluated_value
        if not isinstance(key, str) or not key.isidentifier() or keyword.iskeyword(key):
            return None
        out.append(_keyword(key, el.value))
    return out
