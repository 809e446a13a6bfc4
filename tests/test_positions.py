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
