"""migrator.positions gives the same line/column as libcst's whole-module PositionProvider."""

from __future__ import annotations

import random
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from migrator.positions import STATEMENT_TYPES, Positions

TRICKY = '''\
import os
x = 1
if x:
    x = 1
elif x == 2:
    y = 2  # same text as below
else:
    y = 2  # same text as below

@decorator(
    arg=1,
)
def f(a,
      b):
    """x = 1
    """
    return (a +
            b)


class C:
\tdef g(self):
\t\treturn 1; z = 3
'''


def _nodes_with_ancestors(module: cst.Module):
    """Every node with its ancestors (root first), and the statements in pre-order."""
    out, statements = [], []

    def walk(node, anc):
        if isinstance(node, STATEMENT_TYPES):
            statements.append(node)
        out.append((node, anc))
        for child in node.children:
            walk(child, anc + (node,))

    walk(module, ())
    return out, statements


def _check(source: str, sample: int, seed: int = 0) -> int:
    module = cst.parse_module(source)
    exact = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes, statements = _nodes_with_ancestors(module)
    # what findings are about: statements and the code inside them (not whitespace, comments, blank lines)
    layout = (cst.BaseParenthesizableWhitespace, cst.EmptyLine, cst.Comment, cst.Newline, cst.TrailingWhitespace)
    nodes = [(n, a) for n, a in nodes
             if a and not isinstance(n, layout) and not any(isinstance(x, layout) for x in a)]
    random.Random(seed).shuffle(nodes)
    positions = Positions(module, source, statements)
    checked = 0
    for node, anc in nodes[:sample]:
        if node not in exact:
            continue
        assert positions.get(node, anc) == exact[node], (type(node).__name__, cst.Module([]).code_for_node(node)[:60])
        checked += 1
    assert positions._exact is None  # the fast path answered every time (no whole-module fallback)
    return checked


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_tricky_source(newline):
    source = TRICKY.replace("\n", newline)
    assert _check(source, sample=10_000) > 60


def test_no_trailing_newline():
    assert _check("a = 1\nb = 2", sample=1000) > 3


def test_real_modules():
    import json
    import libcst

    files = [Path(json.__file__), Path(libcst.__file__).parent / "_nodes" / "statement.py",
             Path(__file__).parent / "fixtures" / "NM301" / "example_train.before.py"]
    for i, path in enumerate(files):
        assert _check(path.read_text(encoding="utf-8"), sample=400, seed=i) > 100


HEADERS = '''\
if cond(a):
    x = 1
    y = 2
elif other(b):
    z = 3
else:
    w = 4
while flag(c): pass
for i in items(d):  # comment
    pass
else:
    pass
with open(e) as fh, ctx(f):
    pass

@deco(g)
@other
async def fn(h: int = dflt(i), *args: j, **kwargs) -> ret(k):
    return h


class K(Base(l), metaclass=meta(m)):
    def method(self, n=o):
        if p: q()
'''


def test_header_nodes_come_from_the_header_alone():
    """A node in a compound statement's header (an if test, a signature, a decorator, a base class) gets
    the position the whole-module provider gives, from the code of the header only."""
    module = cst.parse_module(HEADERS)
    exact = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes, statements = _nodes_with_ancestors(module)
    positions = Positions(module, HEADERS, statements)
    headed = (cst.If, cst.While, cst.For, cst.With, cst.FunctionDef, cst.ClassDef)
    checked = set()
    for node, anc in nodes:
        if isinstance(node, cst.Name) and node in exact:
            assert positions.get(node, anc) == exact[node], node.value
            stmt = next(a for a in reversed(anc) if isinstance(a, STATEMENT_TYPES))
            if isinstance(stmt, headed) and stmt.body not in anc:
                checked.add(node.value)
    assert positions._exact is None
    assert set("abcdefghijklmo") <= checked  # every header above was answered from its header
    assert any(header for _, header in positions._per_statement)
