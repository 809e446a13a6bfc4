"""migrator.tree: the fast walk finds every node that holds code, as libcst's own traversal does."""

import libcst as cst
import pytest

from migrator.tree import child_nodes, guards_joined, walk

SOURCE = '''
import a.b as c
from .d import (e as f, g)

@deco(h)
async def fn(p: int = q, /, r=s, *args: t, k: u = v, **kwargs: w) -> x:
    global y
    z = [i async for i in aiter() if i] or {k2: v2 for k2, v2 in items}
    lam = lambda *la, **lk: la[1:2, ::3]
    with open(path) as fh, other() as (o1, o2):
        print(f"{fh!r:>{width}}", sep=sep, *rest, **extra)
    match cmd:
        case {"a": 1, **rest_m}:
            pass
        case Point(x=px, y=[first, *others]) | None as whole:
            pass
    try:
        yield from gen
    except* ValueError as err:
        raise Other() from err
    return (yield) if cond else not neg
'''


def _all_names(node: cst.CSTNode) -> list[str]:
    """Every Name below ``node``, found with libcst's own ``children`` (the slow, complete traversal)."""
    out = []
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, cst.Name):
            out.append(n.value)
        todo.extend(n.children)
    return sorted(out)


def test_walk_finds_every_name_libcst_finds():
    module = cst.parse_module(SOURCE)
    found = sorted(n.value for n in walk(module) if isinstance(n, cst.Name))
    assert found == _all_names(module)
    assert {"args", "kwargs", "t", "w", "la", "lk", "rest_m", "others"} <= set(found)


def test_star_parameters_are_children():
    params = cst.parse_expression("lambda a, *args, **kwargs: 0").params
    names = [c.name.value for c in child_nodes(params) if isinstance(c, cst.Param)]
    assert names == ["a", "args", "kwargs"]


@pytest.mark.parametrize("code", ["f(a, b)", "x + y", "[a, b]"])
def test_whitespace_and_punctuation_are_left_out(code):
    expr = cst.parse_expression(code)
    kinds = {type(n) for n in walk(expr)}
    assert not kinds & {cst.SimpleWhitespace, cst.Comma, cst.Add, cst.LeftSquareBracket, cst.LeftParen}


def test_walk_is_pre_order():
    module = cst.parse_module("a = b\nc = d\n")
    order = [n.value for n in walk(module) if isinstance(n, cst.Name)]
    assert order == ["a", "b", "c", "d"]


def _joined(code: str, made_all: bool = True) -> str:
    module = cst.parse_module(code)
    made = {id(s): s for s in module.body} if made_all else {id(module.body[0]): module.body[0]}
    return module.with_changes(body=guards_joined(list(module.body), made)).code


def test_guards_joined_joins_consecutive_made_tests():
    code = "if rank() == 0:\n    print(1)\nif rank() == 0:\n    print(2)  # two\nif rank() == 0:\n    print(3)\n"
    assert _joined(code) == "if rank() == 0:\n    print(1)\n    print(2)  # two\n    print(3)\n"


@pytest.mark.parametrize("code", [
    "if rank() == 0:\n    print(1)\nif rank() == 1:\n    print(2)\n",  # another test
    "if rank() == 0:\n    print(1)\n\nif rank() == 0:\n    print(2)\n",  # a blank line between
    "if rank() == 0:\n    print(1)\n# c\nif rank() == 0:\n    print(2)\n",  # a comment (a marker) between
    "if ok():\n    close(ok)\nif ok():\n    print(2)\n",  # the first body names what the test reads
    "if ok():\n    x = 1\nif ok():\n    print(2)\n",  # an assignment
    "if ok():\n    print(1)\nelse:\n    pass\nif ok():\n    print(2)\n",  # an else
])
def test_guards_joined_keeps_tests_that_may_differ(code):
    assert _joined(code) == code


def test_guards_joined_only_joins_what_edits_made():
    code = "if rank() == 0:\n    print(1)\nif rank() == 0:\n    print(2)\n"
    assert _joined(code, made_all=False) == code
