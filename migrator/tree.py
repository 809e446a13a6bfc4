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
