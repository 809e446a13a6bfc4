"""Removing a small statement from its line while keeping the layout around it (the blank line
above a deleted line, the ``;`` of ``a(); b()``). Shared by the XLA (NM4xx) and upgrade (NM6xx)
rules. No rules here."""

from __future__ import annotations

import re

import libcst as cst

from migrator.rules import PythonContext
from migrator.tree import child_nodes


def index_in_stack(ctx: PythonContext, node: cst.CSTNode) -> int:
    for i in range(len(ctx.stack) - 1, -1, -1):
        if ctx.stack[i] is node:
            return i
    raise LookupError("node is not on the stack")


def expression_statement(ctx: PythonContext, call: cst.Call):
    """(Expr, its line or suite) when ``call`` is a whole expression statement, else None."""
    i = index_in_stack(ctx, call)
    if i < 2:
        return None
    expr, container = ctx.stack[i - 1], ctx.stack[i - 2]
    if isinstance(expr, cst.Expr) and expr.value is call and isinstance(
        container, (cst.SimpleStatementLine, cst.SimpleStatementSuite)
    ):
        return expr, container
    return None


def called_statement(ctx: PythonContext, func: cst.BaseExpression):
    """(Expr, its line or suite) when the node being handled, ``func``, is called (``func(...)``) as a whole
    expression statement, else None."""
    call = ctx.parent
    if isinstance(call, cst.Call) and call.func is func:
        return expression_statement(ctx, call)
    return None


def remove_small_statement(ctx: PythonContext, expr: cst.Expr, container) -> None:
    """Remove ``expr`` from its line; ``pass`` stays where it was a block's only statement
    (libcst), and a statement left last on a ``a(); b()`` line loses its dangling ``;``."""
    ctx.remove_statement(expr)
    if len(container.body) == 1 and isinstance(container, cst.SimpleStatementLine):
        keep_blank_line(ctx, container)
    if len(container.body) > 1 and container.body[-1] is expr:

        def drop_semicolon(updated):
            if not updated.body:
                return updated
            body = list(updated.body)
            body[-1] = body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(body=body)

        ctx.replace(container, drop_semicolon)


def keep_blank_line(ctx: PythonContext, line: cst.SimpleStatementLine) -> None:
    """A deleted line that followed a blank line: the next statement gets the blank line, so
    that ``import ...`` / ``<blank>`` / ``xm.mark_step()`` / ``x = 1`` keeps its separation.
    Comments above the deleted line go with it (they are about the deleted call). Best effort:
    an edit another rule makes to that whole next statement wins."""
    if not any(el.comment is None for el in line.leading_lines):
        return
    i = index_in_stack(ctx, line)
    block = ctx.stack[i - 1] if i else None
    body = getattr(block, "body", None)
    if not isinstance(block, (cst.IndentedBlock, cst.Module)) or not isinstance(body, (list, tuple)):
        return
    index = next((k for k, stmt in enumerate(body) if stmt is line), None)
    if index is None or index + 1 >= len(body):
        return
    following = body[index + 1]
    if following.leading_lines and following.leading_lines[0].comment is None:
        return

    ctx.replace(following, with_blank_line)


def with_blank_line(updated: cst.BaseStatement) -> cst.BaseStatement:
    """``updated`` with a blank line above it (unless it has one already)."""
    lines = list(updated.leading_lines)
    if lines and lines[0].comment is None:
        return updated
    return updated.with_changes(leading_lines=[cst.EmptyLine(indent=False)] + lines)


#: a read of the wall clock or of a performance counter (``time.perf_counter()``, ``from time import monotonic``,
#: ``timeit.default_timer()``): what times the statements between two such reads
CLOCK_READ = re.compile(
    r"(?<![\w.])(?:time\.)?(?:perf_counter|monotonic)(?:_ns)?\s*\(|\btime\.(?:time|process_time)(?:_ns)?\s*\("
    r"|(?<![\w.])(?:timeit\.)?default_timer\s*\("
)


def block_of(ctx: PythonContext, statement: cst.CSTNode) -> tuple[list[cst.CSTNode], int] | None:
    """The statements of the block that holds ``statement`` (an IndentedBlock's or the Module's) and its index
    there; None where ``statement`` is not on the stack or not directly in a block."""
    try:
        i = index_in_stack(ctx, statement)
    except LookupError:
        return None
    parent = ctx.stack[i - 1] if i else None
    body = getattr(parent, "body", None)
    if not isinstance(parent, (cst.IndentedBlock, cst.Module)) or not isinstance(body, (list, tuple)):
        return None
    k = next((j for j, n in enumerate(body) if n is statement), None)
    return (list(body), k) if k is not None else None


def reads_clock(node: cst.CSTNode) -> bool:
    return bool(CLOCK_READ.search(cst.Module(body=[]).code_for_node(node)))


def clock_after(ctx: PythonContext, statement: cst.CSTNode) -> bool:
    """Whether a statement after ``statement`` reads a clock and one before it does, each in its block or in a
    block around it (up to the enclosing function): the statement sits in a timed region
    (``t0 = time.time()`` ... ``if backend == "xla": xm.mark_step()`` ... ``took = time.time() - t0``)."""
    before = after = False
    node, found = statement, block_of(ctx, statement)
    while found is not None:
        body, k = found
        before = before or any(reads_clock(s) for s in body[:k])
        after = after or any(reads_clock(s) for s in body[k + 1:])
        if before and after:
            return True
        i = index_in_stack(ctx, node)
        outer = next((n for n in reversed(ctx.stack[: i - 1]) if isinstance(n, cst.BaseCompoundStatement)), None)
        if outer is None or isinstance(outer, (cst.FunctionDef, cst.ClassDef)):
            return False
        node, found = outer, block_of(ctx, outer)
    return False


def assigned_values(ctx: PythonContext, name: str) -> list[cst.BaseExpression]:
    """The values of every ``name = ...`` in the function around the node being handled and at the module's own
    level (not in its other functions and classes): what a plain name read there may hold."""
    def own(scope: cst.CSTNode):
        todo = list(reversed(child_nodes(scope)))
        while todo:
            n = todo.pop()
            yield n
            if not isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                todo.extend(reversed(child_nodes(n)))

    scopes = {id(ctx.scope): ctx.scope, id(ctx.module): ctx.module}.values()
    return [n.value for scope in scopes for n in own(scope) if isinstance(n, cst.Assign)
            and any(isinstance(t.target, cst.Name) and t.target.value == name for t in n.targets)]
