"""What the torch-xla era rules (NM401-NM414) share: the module facts they ask (is the module
multi-process, does it create a process group, which quote does it use), the native names they
emit (``torch``, ``os``, ``dist``, ranks, world size, the device, spelled as described in
:mod:`codemods.xla.core`), small libcst call helpers, and the base class ``_XlaRule``."""

from __future__ import annotations

import re
import sys

import libcst as cst

from codemods.common.accelerators import NeuronXlaOnly
from codemods.common.statements import (
    expression_statement as _expression_statement,
    index_in_stack as _index_in_stack,
    keep_blank_line as _keep_blank_line,
    remove_small_statement as _remove_small_statement,
)
from migrator.imports import Binding, dotted
from migrator.rules import NameClash, PythonContext, PythonRule
from migrator.tree import walk

XM = "torch_xla.core.xla_model"
XR = "torch_xla.runtime"
XLA_BACKEND = "torch_xla.distributed.xla_backend"

_MULTI_HINTS = (
    "init_process_group",
    "xla_multiprocessing",
    "xmp.spawn",
    "world_size",
    "get_ordinal",
    "global_ordinal",
    "local_ordinal",
    "LOCAL_RANK",
    "DistributedDataParallel",
    "DistributedSampler",
    "initialize_model_parallel",
)
_WRAPPED_HINTS = ("DistributedDataParallel", "fully_shard", "FSDP", "FullyShardedDataParallel")
_XLA_DEVICE_RE = re.compile(r"^xla(?::(\d+))?$")


# --------------------------------------------------------------------------- module facts


def _state(ctx: PythonContext) -> dict:
    """Per-unit facts shared by the NM4xx rules (scratch under a key no rule id uses)."""
    return ctx.scratch.setdefault("xla", {})


def _multi_process(ctx: PythonContext) -> bool:
    st = _state(ctx)
    if "multi" not in st:
        st["multi"] = any(h in ctx.code for h in _MULTI_HINTS)  # not the words of a marker
    return st["multi"]


#: code that creates the process group under torchrun: an explicit init, TrainingArguments / a Trainer (their
#: accelerate state initializes it) or a load with distributed_config=DistributedConfig(...)
_GROUP_MAKERS = ("init_process_group", "TrainingArguments(", "Trainer(", "DistributedConfig(", "NeuronTrainingArguments(")


#: the makers above that make a process group only under a distributed launcher (torchrun sets WORLD_SIZE):
#: run with plain `python`, a module whose only makers are these has none
_LAUNCH_MAKERS = ("TrainingArguments(", "Trainer(", "DistributedConfig(", "NeuronTrainingArguments(")


def group_by_launch_only(ctx: PythonContext) -> bool:
    """Whether the module's process group, if any, comes only from a Trainer / TrainingArguments /
    DistributedConfig (no ``init_process_group`` of its own): a plain ``python`` run has none, where the old
    rank queries and rendezvous worked (torch-xla ran one replica), so ``dist.get_rank()`` or ``dist.barrier()``
    would raise there."""
    return "init_process_group" not in ctx.code and any(h in ctx.code for h in _LAUNCH_MAKERS)


#: a module that asks whether a process group exists (`dist.is_initialized()`) runs without one too
_IS_INITIALIZED = re.compile(r"\bis_initialized\s*\(")


def without_group(ctx: PythonContext) -> bool:
    """Whether the module also runs without a process group: it tests for one (wherever it makes one), or
    only a Trainer makes it (a plain `python` run has none)."""
    return _IS_INITIALIZED.search(ctx.code) is not None or group_by_launch_only(ctx)


def _has_process_group(ctx: PythonContext) -> bool:
    """Whether the module makes a process group, and the node being handled does not run before its function
    (or the module) calls ``init_process_group``: a rank query in a statement above that call (`rank =
    xm.get_ordinal()` then `init_process_group(..., rank=rank)`) runs without one."""
    return any(h in ctx.code for h in _GROUP_MAKERS) and not _before_init(ctx)


def _before_init(ctx: PythonContext) -> bool:
    scope_index = next((i for i in range(len(ctx.stack) - 1, -1, -1)
                        if isinstance(ctx.stack[i], (cst.FunctionDef, cst.Module))), None)
    if scope_index is None or scope_index + 1 >= len(ctx.stack):
        return False
    scope = ctx.stack[scope_index]
    body = scope.body.body if isinstance(scope, cst.FunctionDef) and isinstance(scope.body, cst.IndentedBlock) \
        else scope.body if isinstance(scope, cst.Module) else ()
    inner = ctx.stack[scope_index + 1]
    if isinstance(scope, cst.FunctionDef):
        inner = ctx.stack[scope_index + 2] if scope_index + 2 < len(ctx.stack) else None  # (past the IndentedBlock)
    here = next((k for k, stmt in enumerate(body) if stmt is inner), None)
    if here is None:
        return False
    for stmt in body[here + 1:]:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        for node in walk(stmt):
            if isinstance(node, cst.Call) and ctx.qualname(node.func) in _INITS:
                return True
    return False


_INITS = ("torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group")


def _quote(ctx: PythonContext) -> str:
    """The quote character for new strings: the one the module mostly uses, or the other one
    inside an f-string delimited by it (nested same quotes need Python 3.12)."""
    st = _state(ctx)
    if "quote" not in st:
        singles = len(re.findall(r"(?<![\w'\"])'", ctx.source))
        doubles = len(re.findall(r"(?<![\w'\"])\"", ctx.source))
        st["quote"] = "'" if singles > doubles else '"'
    quote = st["quote"]
    for node in reversed(ctx.stack):
        if isinstance(node, cst.FormattedString):
            if node.start[-1] == quote:
                quote = "'" if quote == '"' else '"'
            break
    return quote


# --------------------------------------------------------------------------- native names


def _module_local(ctx: PythonContext, module: str, anchor: Binding | None, asname: str | None = None) -> str:
    """A local name for ``module`` (``os``, ``torch``), importing it when needed."""
    st = _state(ctx).setdefault("locals", {})
    if module in st:
        return st[module]
    local, everywhere = _reaching(ctx, module)
    if local is None:
        want = asname or module
        if not ctx.imports.is_free(want, module):
            raise NameClash(f"cannot import {module}: the name {want!r} is already used")
        ctx.add_import(module, None, asname, anchor)
        local, everywhere = want, True
    if everywhere:
        st[module] = local
    return local


def _reaching(ctx: PythonContext, qualified: str) -> tuple[str | None, bool]:
    """The local name of an import of ``qualified`` that has run where the node being handled runs (an import
    inside another function does not count), and whether it is a module-level one (good for every use)."""
    b = ctx.imports.binding_for(qualified, ctx.enclosing())
    return (b.local, b.toplevel) if b is not None else (None, False)


def _torch(ctx: PythonContext, anchor: Binding | None) -> str:
    return _module_local(ctx, "torch", anchor)


def _os(ctx: PythonContext, anchor: Binding | None) -> str:
    # a standard-library import: with the module's standard-library imports, not at the anchor
    return _module_local(ctx, "os", _stdlib_anchor(ctx, "os") or anchor)


def _stdlib_anchor(ctx: PythonContext, module: str) -> Binding | None:
    """Where ``import <module>`` (standard library) goes: before the first top-level
    standard-library import that sorts after it, else before the first standard-library
    import, else before the module's first import (new imports go BEFORE their anchor)."""
    first = first_std = None
    for stmt in ctx.module.body:
        if not isinstance(stmt, cst.SimpleStatementLine) or not stmt.body:
            continue
        small = stmt.body[0]
        if not isinstance(small, (cst.Import, cst.ImportFrom)):
            continue
        if isinstance(small, cst.ImportFrom):
            name = dotted(small.module) if small.module is not None and not small.relative else None
        else:
            name = dotted(small.names[0].name)
        if name is None or name == "__future__":
            continue
        binding = next((b for b in ctx.imports.all_bindings() if b.line is stmt and b.alias is not None), None)
        if binding is None:
            continue
        first = first or binding
        if name.split(".")[0] in sys.stdlib_module_names:
            first_std = first_std or binding
            if name > module:
                return binding
    return first_std or first


def _dist(ctx: PythonContext, anchor: Binding | None) -> str:
    """``dist`` (``import torch.distributed as dist``), or the module's own spelling of it."""
    st = _state(ctx).setdefault("locals", {})
    if "torch.distributed" in st:
        return st["torch.distributed"]
    local, everywhere = _reaching(ctx, "torch.distributed")
    if local is not None and not everywhere:
        return local  # an import in this function: not for the others
    if local is None:
        torch_local = ctx.imports.local_for("torch")
        if torch_local is not None and re.search(rf"\b{re.escape(torch_local)}\.distributed\.", ctx.source):
            local = f"{torch_local}.distributed"  # the module already writes torch.distributed.X
        elif ctx.imports.is_free("dist", "torch.distributed"):
            ctx.add_import("torch.distributed", None, "dist", anchor)
            local = "dist"
        else:
            local = f"{_torch(ctx, anchor)}.distributed"
    st["torch.distributed"] = local
    return local


def _local_rank(ctx: PythonContext, anchor: Binding | None) -> str:
    q = _quote(ctx)
    return f"int({_os(ctx, anchor)}.environ.get({q}LOCAL_RANK{q}, 0))"


def _rank(ctx: PythonContext, anchor: Binding | None) -> str:
    """The global rank: from the process group the module makes, else from the launcher's environment (also
    where only a Trainer makes one: a plain run has no group, and torchrun sets RANK)."""
    if _has_process_group(ctx) and not group_by_launch_only(ctx):
        return f"{_dist(ctx, anchor)}.get_rank()"
    q = _quote(ctx)
    return f"int({_os(ctx, anchor)}.environ.get({q}RANK{q}, 0))"


def _world_size(ctx: PythonContext, anchor: Binding | None) -> str:
    if _has_process_group(ctx) and not group_by_launch_only(ctx):
        return f"{_dist(ctx, anchor)}.get_world_size()"
    q = _quote(ctx)
    return f"int({_os(ctx, anchor)}.environ.get({q}WORLD_SIZE{q}, 1))"


def _is_master(ctx: PythonContext, anchor: Binding | None, local: bool) -> str:
    return f"{_local_rank(ctx, anchor) if local else _rank(ctx, anchor)} == 0"


def _device(ctx: PythonContext, anchor: Binding | None, index: str | None = None) -> str:
    """``torch.device("neuron"[, index])``; per rank in a multi-process module."""
    q = _quote(ctx)
    if index is None and _multi_process(ctx):
        index = _local_rank(ctx, anchor)
    if index is None:
        return f"{_torch(ctx, anchor)}.device({q}neuron{q})"
    return f"{_torch(ctx, anchor)}.device({q}neuron{q}, {index})"


# --------------------------------------------------------------------------- call helpers


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def _bind_args(call: cst.Call, params: tuple[str, ...]) -> dict[str, cst.Arg] | None:
    """Map the arguments of ``call`` onto ``params`` (positional then keyword); None when a
    ``*``/``**`` argument or an unknown keyword makes that impossible."""
    bound: dict[str, cst.Arg] = {}
    for i, arg in enumerate(call.args):
        if arg.star:
            return None
        if arg.keyword is None:
            if i >= len(params):
                return None
            bound[params[i]] = arg
        else:
            name = arg.keyword.value
            if name not in params or name in bound:
                return None
            bound[name] = arg
    return bound


def _literal_bool(arg: cst.Arg | None, default: bool) -> bool | None:
    """The value of a True/False literal argument (``default`` when absent, None otherwise)."""
    if arg is None:
        return default
    if isinstance(arg.value, cst.Name) and arg.value.value in ("True", "False"):
        return arg.value.value == "True"
    return None


def _atomic(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``expr`` usable before ``.attr`` (parenthesised unless it is a name, call, subscript...)."""
    if isinstance(expr, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) or expr.lpar:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _call_args(args: list[cst.Arg]) -> list[cst.Arg]:
    out = []
    for i, arg in enumerate(args):
        last = i == len(args) - 1
        comma = cst.MaybeSentinel.DEFAULT if last else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        out.append(arg.with_changes(comma=comma))
    return out


def _keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )


def _needs_parens(parent: cst.CSTNode | None, node: cst.CSTNode) -> bool:
    """Whether a comparison replacing ``node`` under ``parent`` needs parentheses."""
    if isinstance(parent, (cst.Comparison, cst.ComparisonTarget, cst.BinaryOperation, cst.Await)):
        return True
    if isinstance(parent, cst.UnaryOperation):
        return not isinstance(parent.operator, cst.Not)
    if isinstance(parent, cst.Attribute) and parent.value is node:
        return True
    if isinstance(parent, cst.Subscript) and parent.value is node:
        return True
    return False


def _is_reference(node: cst.Name, parent: cst.CSTNode | None) -> bool:
    if isinstance(parent, cst.Attribute) and parent.attr is node:
        return False
    if isinstance(parent, cst.Arg) and parent.keyword is node:
        return False
    if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Param, cst.ImportAlias, cst.AsName)):
        return False
    if isinstance(parent, (cst.AssignTarget, cst.AnnAssign)) and parent.target is node:
        return False  # `xb = None` (the fallback of an import gate) binds the name, it does not use its value
    return True


def _already_master_only(ctx: PythonContext, node: cst.CSTNode, local: bool) -> bool:
    """True when ``node`` sits in the body of ``if xm.is_master_ordinal(...)`` (or an
    ``ordinal() == 0`` test) of the same locality, so no second rank check is needed."""
    stack = ctx.stack
    i = _index_in_stack(ctx, node)
    for j in range(i - 1, -1, -1):
        anc = stack[j]
        if isinstance(anc, cst.If) and j + 1 < len(stack) and stack[j + 1] is anc.body:
            if _master_test(anc.test, ctx) == local:
                return True
    return False


def _master_test(test: cst.BaseExpression, ctx: PythonContext) -> bool | None:
    """True/False when ``test`` is a local/global master check written with torch-xla (also as one operand of an
    ``and``: the block runs on that master only)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        left, right = _master_test(test.left, ctx), _master_test(test.right, ctx)
        return left if left is not None else right
    if isinstance(test, cst.Call):
        qual = ctx.qualname(test.func)
        if qual == f"{XM}.is_master_ordinal":
            bound = _bind_args(test, ("local",))
            return None if bound is None else _literal_bool(bound.get("local"), True)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if (
            isinstance(target.operator, cst.Equal)
            and isinstance(target.comparator, cst.Integer)
            and target.comparator.value == "0"
            and isinstance(test.left, cst.Call)
            and not test.left.args
        ):
            qual = ctx.qualname(test.left.func)
            if qual in (f"{XM}.get_ordinal", f"{XR}.global_ordinal"):
                return False
            if qual in (f"{XM}.get_local_ordinal", f"{XR}.local_ordinal"):
                return True
    return None


def _if_statement(line: cst.SimpleStatementLine, test: str, inner: cst.BaseSmallStatement) -> cst.If:
    """``if <test>:`` + ``inner`` on its own line, taking the place (and comments) of ``line``."""
    body_line = cst.SimpleStatementLine(
        body=[inner.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)],
        trailing_whitespace=line.trailing_whitespace,
    )
    return cst.If(test=_expr(test), body=cst.IndentedBlock(body=[body_line]), leading_lines=line.leading_lines)


# --------------------------------------------------------------------------- base class


def short_name(qual: str) -> str:
    """``qual`` as a marker names it: its last two components (``xla_model.optimizer_step``), or the
    last one where those are long."""
    two = ".".join(qual.split(".")[-2:])
    return two if len(two) <= 30 else qual.rsplit(".", 1)[-1]


class _XlaRule(NeuronXlaOnly, PythonRule):
    """Dispatches every reference to an owned name: calls go to ``rewrite``; any other use
    (the function passed around as a value) gets a marker. A module that serves other XLA devices
    (codemods.common.accelerators) is not shown to these rules."""

    fix = "auto"
    #: owned qualified name -> what it becomes (for messages)
    natives: dict[str, str] = {}

    def handlers(self):
        return {cst.Attribute: self._on_reference, cst.Name: self._on_reference}

    def _on_reference(self, node: cst.CSTNode, ctx: PythonContext) -> None:
        if ctx.imports.resolve(node) not in self.owns:  # type: ignore[arg-type]
            return  # (most names and attributes: the cheap test first, qualname is this or None)
        parent = ctx.parent
        if isinstance(node, cst.Name) and not _is_reference(node, parent):
            return
        qual = ctx.qualname(node)  # type: ignore[arg-type]
        if qual is None or qual not in self.owns:
            return
        native = self.natives.get(qual, "its native equivalent")
        if not (isinstance(parent, cst.Call) and parent.func is node):
            ctx.marker(node, f"Replace this use of {short_name(qual)} as a value by hand.",
                       detail=f"{qual} is used as a value here; native: {native}.")
            return
        try:
            problem = self.rewrite(qual, parent, node, ctx)
        except NameClash as exc:
            problem = str(exc)
        if problem:
            ctx.marker(parent, f"Rewrite this {short_name(qual)} call by hand: {problem}.",
                       detail=f"{qual} could not be rewritten here ({problem}); native: {native}.")

    def rewrite(self, qual: str, call: cst.Call, func: cst.CSTNode, ctx: PythonContext) -> str | None:
        """Ask for the edit of one call; returns why it could not, or None."""
        raise NotImplementedError  # pragma: no cover


#: an end-of-line comment about what torch-xla did there (`# applies grads + all-reduces across cores`, `# XLA: collect
#: ops and run them`)
_OLD_COMMENT = re.compile(r"(?i)\bxla\b|all[-_ ]?reduc|mark_step|\bgraph\b|\bcores\b|\bbarrier\b")


def drop_old_comment(call: cst.Call, ctx: PythonContext, what: str) -> None:
    """Remove the end-of-line comment of the statement around ``call`` (rewritten by the rule) when it describes
    the old behaviour (``what`` names it in the finding)."""
    line = next((n for n in reversed(ctx.stack) if isinstance(n, cst.SimpleStatementLine)), None)
    comment = line.trailing_whitespace.comment if line is not None else None
    if comment is None or not _OLD_COMMENT.search(comment.value):
        return
    ctx.replace(line, lambda updated: updated.with_changes(
        trailing_whitespace=updated.trailing_whitespace.with_changes(comment=None, whitespace=cst.SimpleWhitespace(""))))
    ctx.finding(call, f"comment `{comment.value}` removed: it described {what}")
