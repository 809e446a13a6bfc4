"""Fast walks over libcst trees.

libcst's ``node.children`` collects a node's children by visiting it (every field, whitespace and
punctuation included) each time it is read; a walk of a whole module through it costs as much as a
parse. The walks of the engine and the rules only look for code (names, calls, statements), so they
read the dataclass fields that can hold code, found once per node type.

The children come in field order, which is the text's order except within a few nodes (an argument's
keyword comes after its value, a function's decorators after its body): a walk that needs the text's
order uses ``node.children``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

import libcst as cst

#: prefixes of the dataclass fields that hold no code (whitespace, punctuation, operator tokens)
_SKIP_FIELD_PREFIXES = ("whitespace", "lpar", "rpar", "comma", "semicolon", "leading_lines", "trailing_whitespace",
                       "lines_after", "header", "footer", "equal", "colon", "arrow", "dot", "lbracket", "rbracket",
                       "lbrace", "rbrace", "operator", "asynchronous", "star", "first_line", "empty_lines", "indent",
                       "last_line", "newline", "prefix", "quote", "between")
#: fields that match a prefix above but hold code (``*args`` / ``**kwargs`` of a function's parameters)
_CODE_FIELDS = frozenset({"star_arg", "star_kwarg"})
_FIELDS: dict[type, tuple[str, ...]] = {}


def code_fields(t: type) -> tuple[str, ...]:
    """The names of the fields of node type ``t`` that can hold code, in field order (computed once per type)."""
    found = _FIELDS.get(t)
    if found is None:
        found = _FIELDS[t] = tuple(f.name for f in dataclasses.fields(t)
                                   if f.name in _CODE_FIELDS or not f.name.startswith(_SKIP_FIELD_PREFIXES))
    return found


def child_nodes(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The children of ``node`` that can hold code (whitespace, punctuation and operator tokens left out)."""
    out: list[cst.CSTNode] = []
    for name in _FIELDS.get(type(node)) or code_fields(type(node)):
        value = getattr(node, name)
        if type(value) is tuple or type(value) is list:
            out.extend(v for v in value if isinstance(v, cst.CSTNode))
        elif isinstance(value, cst.CSTNode):
            out.append(value)
    return out


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``node`` and every node below it that can hold code, in pre-order."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        todo.extend(reversed(child_nodes(n)))


def walk_with_ancestors(node: cst.CSTNode) -> Iterator[tuple[cst.CSTNode, list[cst.CSTNode]]]:
    """``(n, ancestors)`` for ``node`` and every node below it that can hold code, in pre-order;
    ``ancestors`` (outermost first, ``node`` included for the nodes below it) is one list the walk
    changes as it goes: read it at once, copy it to keep it."""
    ancestors: list[cst.CSTNode] = []
    todo: list[tuple[cst.CSTNode, int]] = [(node, 0)]
    while todo:
        n, depth = todo.pop()
        del ancestors[depth:]
        yield n, ancestors
        ancestors.append(n)
        todo.extend((child, depth + 1) for child in reversed(child_nodes(n)))


#: expressions an ``if`` test may hold and still be dropped unevaluated: no call, no assignment, no await
_IMPURE = (cst.Call, cst.NamedExpr, cst.Await, cst.Yield, cst.Lambda)


#: a call that reads a value by its name: `get_world_size()`, `mpu.is_pipeline_last_stage()`, `has_cuda()`
_GETTER = re.compile(r"(?:get|is|has)_\w+|(?:is|has)[A-Z]\w*")


def without_effects(expr: cst.CSTNode, getters: bool = False) -> bool:
    """Whether evaluating ``expr`` does nothing but compute a value (no call, assignment, await or yield in it;
    with ``getters``, calls of functions named as queries, ``get_world_size()``, ``is_last_stage()``, are taken
    for reads): an ``if`` with that test and nothing left to do can go unevaluated."""
    todo: list[cst.CSTNode] = [expr]
    while todo:
        n = todo.pop()
        if getters and isinstance(n, cst.Call):
            func = n.func.attr if isinstance(n.func, cst.Attribute) else n.func
            if isinstance(func, cst.Name) and _GETTER.fullmatch(func.value):
                todo.extend(a.value for a in n.args)
                if isinstance(n.func, cst.Attribute):
                    todo.append(n.func.value)
                continue
        if isinstance(n, _IMPURE):
            return False
        todo.extend(n.children)
    return True


def one_branch(original: cst.If, updated: cst.If) -> cst.If | cst.FlattenSentinel:
    """An ``if``/``else`` whose two branches the edits made the same (``if xla: loader = pl.MpDeviceLoader(loader,
    device)`` / ``else: loader = loader`` once the wrapper is removed): the branch's statements, in place of the
    test, when the test has no effect and no comment stands on its ``else`` or ends a branch (a comment above the
    ``if`` stays above the branch's statements)."""
    orelse = updated.orelse
    if not (isinstance(orelse, cst.Else) and isinstance(original.orelse, cst.Else)
            and isinstance(updated.body, cst.IndentedBlock) and isinstance(orelse.body, cst.IndentedBlock)):
        return updated
    if _block_code(updated.body) != _block_code(orelse.body) or not without_effects(updated.test) or (
            _block_code(original.body) == _block_code(original.orelse.body)):
        return updated
    if any(el.comment is not None for el in orelse.leading_lines) or any(
            el.comment is not None for el in (*updated.body.footer, *orelse.body.footer)):
        return updated
    body = list(updated.body.body)
    own = [el for el in body[0].leading_lines if el.comment is not None]  # (its blank lines were the branch's)
    body[0] = body[0].with_changes(leading_lines=[*updated.leading_lines, *own])
    return cst.FlattenSentinel(body)


def _block_code(block: cst.BaseSuite) -> str:
    """The code of a block's statements, blank lines between them left out."""
    code = cst.Module(body=[]).code_for_node
    return "".join(code(st.with_changes(leading_lines=[el for el in st.leading_lines if el.comment is not None]))
                   if hasattr(st, "leading_lines") else code(st) for st in getattr(block, "body", ()))


def guards_joined(body: list[cst.BaseStatement], made: dict[int, cst.If]) -> list[cst.BaseStatement]:
    """Consecutive ``if`` statements of one block that edits made (``made``: id -> the node, held so that its id
    is not reused) with the same test and no ``else``, the second with no comment or blank line above it, as one
    ``if`` (``xm.master_print`` on two lines becomes one rank test over two prints, not two): only where the first
    one's statements are calls that name nothing its test reads (so they cannot change the test's value). The
    joined ``if`` is added to ``made``."""
    out: list[cst.BaseStatement] = []
    for stmt in body:
        prev = out[-1] if out else None
        if (isinstance(prev, cst.If) and isinstance(stmt, cst.If) and made.get(id(prev)) is prev
                and made.get(id(stmt)) is stmt
                and prev.orelse is None and stmt.orelse is None and not stmt.leading_lines
                and isinstance(prev.body, cst.IndentedBlock) and isinstance(stmt.body, cst.IndentedBlock)
                and not prev.body.footer and _code(prev.test) == _code(stmt.test)
                and _calls_apart(prev.body, _names(prev.test))):
            joined = prev.with_changes(body=prev.body.with_changes(body=[*prev.body.body, *stmt.body.body],
                                                                   footer=stmt.body.footer))
            made[id(joined)] = joined
            out[-1] = joined
            continue
        out.append(stmt)
    return out


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _names(node: cst.CSTNode) -> set[str]:
    return {n.value for n in walk(node) if isinstance(n, cst.Name)}


def _calls_apart(block: cst.IndentedBlock, names: set[str]) -> bool:
    """Whether every statement of ``block`` is a line of calls (no assignment) naming none of ``names``."""
    for st in block.body:
        if not (isinstance(st, cst.SimpleStatementLine)
                and all(isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) for small in st.body)):
            return False
        if _names(st) & names:
            return False
    return True
