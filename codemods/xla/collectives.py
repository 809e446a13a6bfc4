"""NM412-NM413, NM417: torch-xla collectives and sharding wrappers -> ``torch.distributed``.

* NM412 ``xm.all_reduce`` / ``xm.all_gather`` / ``xm.mesh_reduce`` -> ``dist.all_reduce`` /
  ``dist.all_gather`` + ``torch.cat`` / ``dist.all_gather_object`` + the reduce function, as
  separate statements (the native collectives work in place; the torch-xla ones returned a new
  value for a single tensor). ``xm.reduce_gradients`` gets a marker naming DDP / FSDP2.
* NM413 ``XlaFullyShardedDataParallel`` and torch-xla's ``ZeroRedundancyOptimizer`` get a
  marker naming FSDP2 ``fully_shard`` / ``DistributedConfig(fsdp_size=...)`` /
  ``torch.distributed.optim.ZeroRedundancyOptimizer`` (owned, so NM900 does not flag them twice).
* NM417 ``torch.distributed`` collectives called with ``async_op=True`` whose handle is dropped: the
  XLA process group ran them in the lazy graph (the next read saw the result); eagerly the next read
  may not, so ``async_op=True`` goes.

Facts and signatures: torch-xla 2.8 ``torch_xla/core/xla_model.py`` (source-apis §4.1, §4.2).
Shared spelling helpers (``dist``, ranks, imports) come from :mod:`codemods.xla.core`.
"""

from __future__ import annotations

import keyword
import re

import libcst as cst

from codemods.common.accelerators import NeuronXlaOnly
from codemods.common.arg_plan import ArgPlan, keywords, literal, rewrite_call
from codemods.common.leftovers import old_stack
from codemods.common.patch_targets import in_mock_assertion
from codemods.xla.base import (
    XM,
    _XlaRule,
    _bind_args,
    _code,
    _dist,
    _expr,
    _expression_statement,
    _has_process_group,
    _index_in_stack,
    _remove_small_statement,
    _torch,
    _world_size,
    without_group,
)
from migrator.rules import PythonContext, PythonRule

#: torch-xla reduce types -> torch.distributed.ReduceOp members
REDUCE_OPS = {
    "REDUCE_SUM": "SUM",
    "REDUCE_MUL": "PRODUCT",
    "REDUCE_AND": "BAND",
    "REDUCE_OR": "BOR",
    "REDUCE_MIN": "MIN",
    "REDUCE_MAX": "MAX",
}
#: the values of those constants (torch_xla/core/xla_model.py: REDUCE_SUM = 'sum', ...), written as strings
REDUCE_STRINGS = {"sum": "REDUCE_SUM", "mul": "REDUCE_MUL", "and": "REDUCE_AND", "or": "REDUCE_OR",
                  "min": "REDUCE_MIN", "max": "REDUCE_MAX"}
REDUCE_GRADIENTS_MARKER = "Wrap the model in DistributedDataParallel or fully_shard, then delete this reduce_gradients call."
_NEEDS_GROUP = ("{what} needs a process group: make sure dist.init_process_group(backend=\"neuron\") runs first "
                "(torchrun)")


def _line_of(ctx: PythonContext, call: cst.Call):
    """(line, kind, target) when ``call`` is the whole statement ``call`` (kind "expr") or
    ``name = call`` (kind "assign", target the Name), alone on its line; else None."""
    i = _index_in_stack(ctx, call)
    if i < 2:
        return None
    small, line = ctx.stack[i - 1], ctx.stack[i - 2]
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return None
    if isinstance(small, cst.Expr) and small.value is call:
        return line, "expr", None
    if (isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)):
        return line, "assign", small.targets[0].target.value
    return None


def _statements(line: cst.SimpleStatementLine, codes: list[str]) -> cst.FlattenSentinel:
    """``codes`` as statements taking the place of ``line`` (its comments go above the first,
    its end-of-line comment stays on the last)."""
    out = []
    comment = line.trailing_whitespace.comment
    for k, code in enumerate(codes):
        stmt = cst.parse_statement(code + "\n")
        if k == 0:
            leading = list(line.leading_lines)
            if comment is not None and not isinstance(cst.parse_statement(codes[-1] + "\n"), cst.SimpleStatementLine):
                leading.append(cst.EmptyLine(comment=comment))  # (a compound statement last: the comment goes above)
            stmt = stmt.with_changes(leading_lines=leading)
        if k == len(codes) - 1 and isinstance(stmt, cst.SimpleStatementLine):
            stmt = stmt.with_changes(trailing_whitespace=line.trailing_whitespace)
        out.append(stmt)
    return cst.FlattenSentinel(out)


def _if_group(d: str, codes: list[str]) -> str:
    """``codes`` under ``if dist.is_initialized():`` (a run without a process group skips them)."""
    return f"if {d}.is_initialized():\n" + "".join(f"    {c}\n" for c in codes)


def _updated_call(line: cst.SimpleStatementLine) -> cst.Call:
    small = line.body[0]
    call = small.value  # type: ignore[union-attr]
    assert isinstance(call, cst.Call)
    return call


class XlaCollectives(_XlaRule):
    id = "NM412"
    markers = (
        ("Wrap the model in DistributedDataParallel or fully_shard, then delete this reduce_gradients call.",
         """xm.reduce_gradients all-reduced the gradients; DistributedDataParallel(model) or FSDP2
         fully_shard(model) all-reduce them in backward(). By hand instead: dist.all_reduce(p.grad) then
         p.grad /= world size for each parameter."""),
    )
    title = "xm.all_reduce / all_gather / mesh_reduce -> torch.distributed collectives; reduce_gradients -> DDP/FSDP2"
    fix = "mixed"
    triggers = ("torch_xla",)
    owns = (f"{XM}.all_reduce", f"{XM}.all_gather", f"{XM}.mesh_reduce", f"{XM}.reduce_gradients",
            *(f"{XM}.{name}" for name in REDUCE_OPS))
    natives = {
        f"{XM}.all_reduce": "dist.all_reduce(t, op=dist.ReduceOp.SUM) (in place; clone first to keep the input)",
        f"{XM}.all_gather": "dist.all_gather(parts, t) + torch.cat(parts, dim=...) (or dist.all_gather_into_tensor)",
        f"{XM}.mesh_reduce": "dist.all_gather_object(values, data) + reduce_fn(values)",
        f"{XM}.reduce_gradients": "DDP(model) or FSDP2 fully_shard(model), which all-reduce the gradients",
        **{f"{XM}.{name}": f"dist.ReduceOp.{op}" for name, op in REDUCE_OPS.items()},
    }
    why = """
        torch-xla's collectives become their `torch.distributed` twins (backend `neuron`). The
        native ones work IN PLACE, while `xm.all_reduce` on a single tensor, `xm.all_gather` and
        `xm.mesh_reduce` RETURN a new value, so `y = xm.all_reduce(xm.REDUCE_SUM, x, scale=s)`
        becomes `y = x.clone()`, `dist.all_reduce(y, op=dist.ReduceOp.SUM)`, `y.mul_(s)`;
        `xm.all_reduce(op, [a, b])` (in place on a list) becomes one `dist.all_reduce` per tensor;
        `y = xm.all_gather(x, dim=d)` becomes a list filled by `dist.all_gather` then
        `torch.cat(y, dim=d)`; `y = xm.mesh_reduce(tag, data, fn)` becomes
        `dist.all_gather_object` then `fn(y)`; inside a larger statement (`print(xm.mesh_reduce(...))`,
        `return ...`, `self.best = ...`, an `if` test, a statement of its own) the gather goes in two
        statements above it and the call becomes `fn(values)` where it was, when the call runs once
        each time the statement does (not under a lambda, comprehension, and/or, `x if c else y`,
        a `while` test) and its data has no calls beyond `.item()`-like ones. `xm.REDUCE_*` become `dist.ReduceOp.*`
        (`REDUCE_MUL` -> `PRODUCT`, `REDUCE_AND`/`REDUCE_OR` -> `BAND`/`BOR`); not inside a mock assertion
        (`m.assert_called_with(xm.REDUCE_SUM, ...)`, `call(...)`), where it is what the old code under test passes.
        `xm.reduce_gradients(optimizer)` gets a marker: wrap the model in DDP or FSDP2.
        In a module that also runs without a process group (only a Trainer or TrainingArguments
        makes it, under torchrun; or it tests `dist.is_initialized()`), the collectives go under
        `if dist.is_initialized():` and a plain `python` run keeps its own values, as torch-xla's one
        replica did (the gathered data is then evaluated once more inside the test: only data
        without calls; otherwise a marker says a process group is needed).
    """
    before = """
        import torch.distributed as dist
        import torch_xla.core.xla_model as xm

        dist.init_process_group("xla")
        total = xm.all_reduce(xm.REDUCE_SUM, loss, scale=1.0 / world)
        xm.all_reduce(xm.REDUCE_MAX, [a, b])
        preds = xm.all_gather(logits, dim=0)
        mean = xm.mesh_reduce("loss", loss.item(), np.mean)
    """
    after = """
        import torch
        import torch.distributed as dist

        dist.init_process_group(backend="neuron")
        total = loss.clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        total.mul_(1.0 / world)
        dist.all_reduce(a, op=dist.ReduceOp.MAX)
        dist.all_reduce(b, op=dist.ReduceOp.MAX)
        preds = [torch.empty_like(logits) for _ in range(dist.get_world_size())]
        dist.all_gather(preds, logits)
        preds = torch.cat(preds, dim=0)
        mean = [None] * dist.get_world_size()
        dist.all_gather_object(mean, loss.item())
        mean = np.mean(mean)
    """
    caveats = """
        Rewritten only as a statement alone on its line (`name = call` or, for a list literal
        of tensors, the bare call), with a literal reduce type (`xm.REDUCE_SUM` or its value `"sum"`) and no `groups=` / `pin_layout=`
        / `output=`; anything else gets a marker. A bare `xm.all_reduce(op, x)` whose `x` is not
        a list literal gets a marker: it was in place for a list and without effect for a tensor.
        In `y = xm.all_reduce(op, x)` the input must be a tensor (`.clone()` fails on a list).
        `all_gather` needs its input as a plain name (it is used twice). Without
        `init_process_group` in the module the collectives get a marker about the process group.
    """

    def _on_reference(self, node, ctx):
        qual = ctx.qualname(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
        if qual is not None and qual.startswith(f"{XM}.REDUCE_") and qual.rsplit(".", 1)[1] in REDUCE_OPS:
            parent = ctx.parent
            if isinstance(parent, cst.Attribute) and parent.value is node:
                return
            # the reduce type of an all_reduce we rewrite is handled with its call
            if isinstance(parent, cst.Arg) and len(ctx.stack) > 2:
                call = ctx.stack[-3]
                if (isinstance(call, cst.Call) and isinstance(call.func, (cst.Name, cst.Attribute))
                        and ctx.qualname(call.func) == f"{XM}.all_reduce" and call.args and call.args[0] is parent):
                    return
            if in_mock_assertion(ctx):
                return  # what the old code under test passes ('sum'), not a value of the migrated code
            if isinstance(parent, cst.Arg) and len(ctx.stack) > 2 and isinstance(ctx.stack[-3], cst.Call):
                callee = ctx.qualname(ctx.stack[-3].func) or ""
                if old_stack(callee) and not callee.startswith(f"{XM}."):
                    return  # an argument of an old-stack call that stays (NxD's reduce_scatter takes xm's op)
            op = REDUCE_OPS[qual.rsplit(".", 1)[1]]
            ctx.replace(node, _expr(f"{_dist(ctx, ctx.imports.binding_of(node))}.ReduceOp.{op}"))
            ctx.finding(node, f"{qual} -> dist.ReduceOp.{op}")
            return
        super()._on_reference(node, ctx)

    def rewrite(self, qual, call, func, ctx):
        name = qual.rsplit(".", 1)[1]
        return getattr(self, f"_{name}")(qual, call, func, ctx)

    def _group_note(self, call, ctx, what):
        if not _has_process_group(ctx):
            ctx.marker(call, _NEEDS_GROUP.format(what=what))

    def _all_reduce(self, qual, call, func, ctx):
        bound = _bind_args(call, ("reduce_type", "inputs", "scale", "groups", "pin_layout"))
        if bound is None or "reduce_type" not in bound or "inputs" not in bound:
            return "unsupported arguments"
        if "groups" in bound:
            return "`groups=` names replica groups; use dist.new_group(ranks) and group="
        rtype = bound["reduce_type"].value
        rqual = ctx.qualname(rtype) if isinstance(rtype, (cst.Name, cst.Attribute)) else None
        if isinstance(rtype, cst.SimpleString) and rtype.evaluated_value in REDUCE_STRINGS:
            rqual = f"{XM}.{REDUCE_STRINGS[rtype.evaluated_value]}"  # xm.REDUCE_SUM is the string "sum"
        if rqual is None or not rqual.startswith(f"{XM}.REDUCE_") or rqual.rsplit(".", 1)[1] not in REDUCE_OPS:
            return "the reduce type is not an xm.REDUCE_* constant"
        where = _line_of(ctx, call)
        if where is None:
            return "its result is used; all-reduce in place in a statement of its own"
        line, kind, target = where
        inputs = bound["inputs"].value
        if kind == "expr" and not isinstance(inputs, (cst.List, cst.Tuple)):
            return "call dist.all_reduce(t, op=...) on each tensor of this list"
        if kind == "expr" and any(not isinstance(e, cst.Element) or isinstance(e, cst.StarredElement)
                                  for e in inputs.elements):
            return "unsupported list"
        if kind == "assign" and isinstance(inputs, (cst.List, cst.Tuple)):
            return "the list result is assigned; all-reduce each tensor in place instead"
        if kind == "assign" and "scale" in bound and _mentions(bound["scale"].value, target):
            return "`scale=` refers to the assigned name"
        anchor = ctx.imports.binding_of(func)
        d = _dist(ctx, anchor)
        op = f"{d}.ReduceOp.{REDUCE_OPS[rqual.rsplit('.', 1)[1]]}"
        params = ("reduce_type", "inputs", "scale", "groups", "pin_layout")
        guarded = without_group(ctx)

        def build(updated_line):
            b = _bind_args(_updated_call(updated_line), params)
            scale = _code(b["scale"].value) if "scale" in b else None
            value = b["inputs"].value
            codes = []
            if kind == "assign":
                tensors = [target]
                codes.append(f"{target} = {_code(_paren(value))}.clone()")
            else:
                tensors = [_code(_paren(e.value)) for e in value.elements]
            reduces = [f"{d}.all_reduce({t}, op={op})" for t in tensors]
            # one process, no group (a plain run of a Trainer script): the sum over one rank is the tensor itself
            codes.extend([_if_group(d, reduces)] if guarded else reduces)
            if scale is not None and scale not in ("1", "1.0"):
                codes.extend(f"{t}.mul_({scale})" for t in tensors)
            return _statements(updated_line, codes)

        ctx.replace(line, build)
        ctx.finding(call, f"{qual} -> dist.all_reduce (in place)")
        if not guarded:
            self._group_note(call, ctx, "dist.all_reduce")
        return None

    def _all_gather(self, qual, call, func, ctx):
        bound = _bind_args(call, ("value", "dim", "groups", "output", "pin_layout", "channel_id",
                                  "use_global_device_ids"))
        if bound is None or "value" not in bound or set(bound) - {"value", "dim", "pin_layout"}:
            return "unsupported arguments (`groups=` / `output=`)"
        dim = bound.get("dim")
        if dim is not None and not (isinstance(dim.value, cst.Integer)
                                    or (isinstance(dim.value, cst.UnaryOperation)
                                        and isinstance(dim.value.expression, cst.Integer))):
            return "`dim=` is not an integer literal"
        where = _line_of(ctx, call)
        if where is None or where[1] != "assign":
            return "write it as `name = xm.all_gather(t, dim=...)` on a line of its own"
        value = bound["value"].value
        if not isinstance(value, cst.Name):
            return "the gathered tensor is not a plain name (it would be evaluated twice)"
        line, _, target = where
        parts = _list_name(ctx, target) if value.value == target else target
        anchor = ctx.imports.binding_of(func)
        d = _dist(ctx, anchor)
        # `import torch` goes before `import torch.distributed as dist` when the module has one
        dist_local = ctx.imports.local_for("torch.distributed")
        near = ctx.imports.bindings.get(dist_local or "") if dist_local and "." not in dist_local else None
        torch = _torch(ctx, near[0] if near else anchor)
        world = _world_size(ctx, anchor)
        dim_code = _code(dim.value) if dim is not None else "0"
        x = value.value

        guarded = without_group(ctx)

        def build(updated_line):
            gather = [f"{parts} = [{torch}.empty_like({x}) for _ in range({world})]", f"{d}.all_gather({parts}, {x})"]
            if guarded:  # one process, no group: what it gathers is its own tensor
                world_now = f"{d}.get_world_size()"
                gather = [f"{parts} = [{x}]", _if_group(d, [gather[0].replace(world, world_now), gather[1]])]
            return _statements(updated_line, [*gather, f"{target} = {torch}.cat({parts}, dim={dim_code})"])

        ctx.replace(line, build)
        ctx.finding(call, f"{qual} -> dist.all_gather + torch.cat")
        if not guarded:
            self._group_note(call, ctx, "dist.all_gather")
        return None

    def _mesh_reduce(self, qual, call, func, ctx):
        bound = _bind_args(call, ("tag", "data", "reduce_fn"))
        if bound is None or len(bound) != 3:
            return "unsupported arguments"
        where = _line_of(ctx, call)
        if where is None or where[1] != "assign":
            return self._mesh_reduce_inline(qual, call, func, bound, ctx)
        line, kind, target = where
        if _mentions(bound["reduce_fn"].value, target):
            return "`reduce_fn` refers to the assigned name"
        values = _list_name(ctx, target) if _mentions(bound["data"].value, target) else target
        anchor = ctx.imports.binding_of(func)
        d = _dist(ctx, anchor)
        world = _world_size(ctx, anchor)
        params = ("tag", "data", "reduce_fn")

        # one process, no group (a plain run of a Trainer script): what it gathers is its own value (the data is
        # evaluated once more in the gather: only for data without calls)
        guarded = without_group(ctx) and _pure(bound["data"].value)

        def build(updated_line):
            b = _bind_args(_updated_call(updated_line), params)
            return _statements(updated_line, [
                *_gather_objects(d, values, _code(b["data"].value), world, guarded),
                f"{target} = {_code(_paren(b['reduce_fn'].value))}({values})",
            ])

        ctx.replace(line, build)
        ctx.finding(call, f"{qual} -> dist.all_gather_object + reduce_fn")
        if not guarded:
            self._group_note(call, ctx, "dist.all_gather_object")
        return None

    def _mesh_reduce_inline(self, qual, call, func, bound, ctx):
        """``print(xm.mesh_reduce(tag, data, fn))``, ``return ...``, ``self.x = ...``, ``if ... > best:``: the
        gather goes in statements above the statement, the call becomes ``fn(values)`` where it was."""
        statement = _hoist_point(ctx, call)
        if statement is None:
            return "it may not run exactly once here (a lambda, loop test, and/or)"
        if not _pure(bound["data"].value):
            return "its data has calls that must run in place"
        if _code(statement).count("mesh_reduce") != 1:
            return "rewrite one mesh_reduce per statement"
        tag = bound["tag"].value
        base = tag.evaluated_value if isinstance(tag, cst.SimpleString) and isinstance(tag.evaluated_value, str) else ""
        base = re.sub(r"\W+", "_", base).strip("_")
        values = _list_name(ctx, base if base.isidentifier() and not keyword.iskeyword(base) else "values")
        anchor = ctx.imports.binding_of(func)
        d = _dist(ctx, anchor)
        world = _world_size(ctx, anchor)
        params = ("tag", "data", "reduce_fn")
        data_code = _code(bound["data"].value)

        def reduced(updated: cst.Call) -> cst.BaseExpression:
            b = _bind_args(updated, params)
            return cst.parse_expression(f"{_code(_paren(b['reduce_fn'].value))}({values})")

        guarded = without_group(ctx)  # (the data has no calls here)

        def hoist(updated):
            first = [cst.parse_statement(c + "\n") for c in _gather_objects(d, values, data_code, world, guarded)]
            first[0] = first[0].with_changes(leading_lines=updated.leading_lines)
            return cst.FlattenSentinel([*first, updated.with_changes(leading_lines=())])

        ctx.replace(call, reduced)
        ctx.replace(statement, hoist)
        ctx.finding(call, f"{qual} -> dist.all_gather_object + reduce_fn")
        if not guarded:
            self._group_note(call, ctx, "dist.all_gather_object")
        return None

    def _reduce_gradients(self, qual, call, func, ctx):
        statement = _expression_statement(ctx, call)
        code = re.sub(r"#.*", "", ctx.source)  # not the words of a marker
        if statement is not None and any(h in code for h in ("DistributedDataParallel", "fully_shard")):
            _remove_small_statement(ctx, *statement)
            ctx.finding(call, f"{qual}() removed: DDP / FSDP2 all-reduce the gradients in backward()")
            return None
        ctx.marker(call, REDUCE_GRADIENTS_MARKER)
        return None


def _gather_objects(d: str, values: str, data: str, world: str, guarded: bool) -> list[str]:
    """The statements that gather ``data`` of every rank into the list ``values``; ``guarded``: under
    ``if dist.is_initialized():``, a run without a process group keeping its own value."""
    if not guarded:
        return [f"{values} = [None] * {world}", f"{d}.all_gather_object({values}, {data})"]
    return [f"{values} = [{data}]",
            _if_group(d, [f"{values} = [None] * {d}.get_world_size()", f"{d}.all_gather_object({values}, {data})"])]


def _mentions(expr: cst.CSTNode, name: str) -> bool:
    """True when ``expr`` refers to the variable ``name`` (attribute names do not count)."""

    class Finder(cst.CSTVisitor):
        found = False

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)
            return False

        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                self.found = True

    finder = Finder()
    expr.visit(finder)
    return finder.found


#: expressions on the way from a call up to its statement under which it may run zero or many times
_NOT_ONCE = (cst.Lambda, cst.BooleanOperation, cst.IfExp, cst.ListComp, cst.SetComp, cst.DictComp,
             cst.GeneratorExp, cst.NamedExpr)
#: calls a gathered value may make and still be evaluated a statement earlier (no side effects)
_PURE_METHODS = ("item", "detach", "cpu", "tolist", "clone", "numpy")
_PURE_FUNCS = ("float", "int", "len", "round", "abs")


def _hoist_point(ctx: PythonContext, call: cst.Call) -> cst.CSTNode | None:
    """The statement line (or ``if``, not an ``elif``) above which ``call`` can be evaluated: it runs
    exactly once each time the statement runs (not in a lambda, comprehension, and/or, ``x if c else y``)."""
    i = _index_in_stack(ctx, call)
    for j in range(i - 1, -1, -1):
        node = ctx.stack[j]
        if isinstance(node, _NOT_ONCE):
            return None
        if isinstance(node, cst.SimpleStatementLine):
            ok = len(node.body) == 1 and isinstance(node.body[0], (cst.Expr, cst.Assign, cst.AugAssign,
                                                                      cst.AnnAssign, cst.Return))
            return node if ok else None
        if isinstance(node, cst.If):
            parent = ctx.stack[j - 1] if j else None
            test_holds = j + 1 < len(ctx.stack) and ctx.stack[j + 1] is node.test
            return node if test_holds and not isinstance(parent, cst.If) else None
        if isinstance(node, (cst.BaseCompoundStatement, cst.BaseSuite)):
            return None
    return None


def _pure(expr: cst.CSTNode) -> bool:
    """Whether evaluating ``expr`` one statement earlier changes nothing: names, attributes,
    subscripts, literals, operators and the calls of ``_PURE_METHODS``/``_PURE_FUNCS``."""
    if isinstance(expr, cst.Call):
        func = expr.func
        ok = (isinstance(func, cst.Attribute) and func.attr.value in _PURE_METHODS and _pure(func.value)) or \
             (isinstance(func, cst.Name) and func.value in _PURE_FUNCS)
        return ok and all(not a.star and _pure(a.value) for a in expr.args)
    if isinstance(expr, (cst.Name, cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(expr, cst.Attribute):
        return _pure(expr.value)
    if isinstance(expr, cst.Subscript):
        return _pure(expr.value) and all(isinstance(e.slice, cst.Index) and _pure(e.slice.value) for e in expr.slice)
    if isinstance(expr, cst.BinaryOperation):
        return _pure(expr.left) and _pure(expr.right)
    if isinstance(expr, cst.UnaryOperation):
        return _pure(expr.expression)
    if isinstance(expr, (cst.Tuple, cst.List)):
        return all(isinstance(e, cst.Element) and _pure(e.value) for e in expr.elements)
    return False


def _list_name(ctx: PythonContext, target: str) -> str:
    """A new name for the per-rank list when the gathered value is the target itself."""
    base = f"{target}_per_rank"
    name, n = base, 1
    while re.search(rf"\b{re.escape(name)}\b", ctx.source):
        n += 1
        name = f"{base}{n}"
    return name


def _paren(expr: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(expr, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) or expr.lpar:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


# --------------------------------------------------------------------------- NM413

FSDP_MOD = "torch_xla.distributed.fsdp"
ZERO = "torch_xla.distributed.zero_redundancy_optimizer.ZeroRedundancyOptimizer"
_FSDP_NATIVE = ("FSDP2 `torch.distributed.fsdp.fully_shard(module)` on each block then on the model "
                "(for a transformers model: `from_pretrained(..., distributed_config="
                "DistributedConfig(fsdp_size=N))`)")


class XlaShardingWrappers(_XlaRule):
    id = "NM413"
    title = "torch-xla FSDP / ZeroRedundancyOptimizer -> FSDP2 fully_shard / DistributedConfig (marker)"
    fix = "manual"
    triggers = ("torch_xla",)
    owns = (
        f"{FSDP_MOD}.XlaFullyShardedDataParallel",
        f"{FSDP_MOD}.xla_fully_sharded_data_parallel.XlaFullyShardedDataParallel",
        ZERO,
    )
    natives = {
        f"{FSDP_MOD}.XlaFullyShardedDataParallel": _FSDP_NATIVE,
        f"{FSDP_MOD}.xla_fully_sharded_data_parallel.XlaFullyShardedDataParallel": _FSDP_NATIVE,
        ZERO: ("`torch.distributed.optim.ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, ...)` "
               "or FSDP2 `fully_shard` (sharded parameters and optimizer state)"),
    }
    why = """
        torch-xla's `XlaFullyShardedDataParallel` and `ZeroRedundancyOptimizer` do not exist on
        TorchNeuron. Sharded data parallelism is FSDP2: `torch.distributed.fsdp.fully_shard` on
        each transformer block and then on the model (or, for a transformers model,
        `from_pretrained(..., distributed_config=DistributedConfig(fsdp_size=N))`); ZeRO-1 is
        `torch.distributed.optim.ZeroRedundancyOptimizer`. Their arguments do not map one to one,
        so each use gets a marker (and NM900 does not flag the import a second time).
    """
    before = """
        import torch
        from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP

        model = FSDP(model, compute_dtype=torch.bfloat16)
    """
    after = """
        import torch
        # TODO(neuron-migrate NM992): Remove this import once the TODOs on `FSDP` below are done.
        from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP

        # TODO(neuron-migrate NM413): Rewrite this XlaFullyShardedDataParallel call by hand: use FSDP2 fully_shard on each block, then on the model.
        model = FSDP(model, compute_dtype=torch.bfloat16)
    """
    caveats = """
        Nothing is rewritten. torch-xla's ZeroRedundancyOptimizer reduce-scattered the gradients in
        its `step()`; the native one expects DDP to all-reduce them, so where the unit wraps nothing
        in DDP the marker says to. `compute_dtype=` becomes `fully_shard(..., mp_policy=MixedPrecisionPolicy(param_dtype=...))`;
        `flatten_parameters`, `shard_param_on_dim_0`, `pin_layout` have no equivalent; checkpoints
        saved by `consolidate_sharded_model_checkpoints` become `torch.distributed.checkpoint`.
    """

    def rewrite(self, qual, call, func, ctx):
        if qual == ZERO:
            if re.search(r"\b(?:DistributedDataParallel|DDP|FullyShardedDataParallel|FSDP|fully_shard)\s*\(", ctx.code):
                return "use the one of torch.distributed.optim, or FSDP2 fully_shard"
            # torch-xla's ZeRO reduce-scattered the gradients itself: the native one only shards the optimizer
            # state and leaves the gradient all-reduce to DDP (without it each rank steps on its own gradients)
            return "add DDP around the model (XLA's ZeRO synced the gradients itself)"
        return "use FSDP2 fully_shard on each block, then on the model"


#: the torch.distributed collectives that take async_op=
ASYNC_COLLECTIVES = frozenset(f"torch.distributed.{name}" for name in (
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "broadcast",
    "reduce", "all_to_all", "all_to_all_single", "gather", "scatter", "barrier"))


class DroppedCollectiveHandles(NeuronXlaOnly, PythonRule):
    id = "NM417"
    title = "torch.distributed collectives with async_op=True whose handle is dropped -> synchronous"
    fix = "applied"
    triggers = ("async_op",)
    why = """
        Code written for torch-xla often calls `torch.distributed.all_reduce(t, group=g,
        async_op=True)` as a statement of its own and reads `t` next. On the XLA process group
        the collective was recorded in the lazy graph like any other op, so the next read saw
        the reduced value whatever `async_op` said. On an eager backend (TorchNeuron, gloo, nccl)
        the call returns a work handle at once and the tensor is complete only after
        `handle.wait()`: dropping the handle reads the tensor before the collective finished
        (checked with torchrun and gloo: the stale value). In a module that imports torch_xla, such
        a call whose handle is dropped loses `async_op=True` and runs synchronously, as it did.
    """
    before = """
        import torch
        import torch_xla.core.xla_model as xm

        def _reduce(input_, group):
            torch.distributed.all_reduce(input_, group=group, async_op=True)
            return input_
    """
    after = """
        import torch

        def _reduce(input_, group):
            torch.distributed.all_reduce(input_, group=group)
            return input_
    """
    caveats = """
        Only a call whose value is dropped (a statement of its own) is changed: a kept handle is
        the code's own (it waits on it). `async_op=` given a value other than the literal `True`
        is left alone.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        if ctx.qualname(node.func) not in ASYNC_COLLECTIVES or not _imports_torch_xla(ctx):
            return
        arg = keywords(node).get("async_op")
        if arg is None or literal(arg.value) is not True or _expression_statement(ctx, node) is None:
            return
        rewrite_call(ctx, node, ArgPlan(drop={"async_op"}))
        ctx.finding(arg, f"async_op=True dropped from {ctx.qualname(node.func).rsplit('.', 1)[1]}(...): its handle "
                         "was never waited on (the XLA process group ran it in the graph, in order)")


def _imports_torch_xla(ctx: PythonContext) -> bool:
    """Whether the unit imports torch_xla (its collectives ran on the XLA process group)."""
    return any(b.qualified == "torch_xla" or b.qualified.startswith("torch_xla.") for b in ctx.imports.all_bindings())


RULES = (XlaCollectives, XlaShardingWrappers, DroppedCollectiveHandles)
