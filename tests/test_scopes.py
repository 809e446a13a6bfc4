"""A function's own variable spelled like an import is not the import (migrator/scopes.py, used by
PythonContext.qualname and the engine's dead-import refs; migrator/selfcheck/policy.py _uses,
used by NM992)."""

from __future__ import annotations

import libcst as cst

from migrator.scopes import local_names
from migrator.selfcheck.policy import ImportInfo, _uses, _uses_of

SOURCE = '''
from lib import grads, Config, helper, deco, default


def collect(model, config: Config = default) -> Config:
    grads = []
    for p, (a, b) in model:
        grads.append(p)
    with open("f") as fh:
        pass
    try:
        pass
    except ValueError as err:
        pass
    import helper
    return grads


@deco
def other():
    global grads
    grads = 1
'''


def test_local_names_of_a_function():
    module = cst.parse_module(SOURCE)
    collect, other = [s for s in module.body if isinstance(s, cst.FunctionDef)]
    assert local_names(collect) == {"model", "config", "grads", "p", "a", "b", "fh", "err"}
    assert local_names(other) == frozenset()  # `global grads`: the module's


STATEMENTS = '''
def every_statement(x, *rest, key=1, **extra):
    a = b = 1
    c: int = 2
    d += 3
    [e, (f, *g)] = x
    if x:
        h = 1
    elif rest:
        i = 1
    else:
        j = 1
    while x:
        k = 1
    else:
        l = 1
    for m in x:
        pass
    with open(x) as n, open(x) as (o, p):
        q = 1
    try:
        r = 1
    except ValueError as s:
        t = 1
    else:
        u = 1
    finally:
        v = 1
    match x:
        case 1:
            w = 1
    def inner():
        hidden = 1
    class Kind:
        member = 1
    nonlocal_ = [y for y in x]
    lambda z: z
    import os as alias
    global g
    if x: one = 1
'''


def test_the_statement_walk_finds_what_the_visitor_finds():
    function = cst.parse_module(STATEMENTS).body[0]
    expected = {"x", "rest", "key", "extra", "a", "b", "c", "d", "e", "f", "h", "i", "j", "k", "l", "m", "n",
                "o", "p", "q", "r", "s", "t", "u", "v", "w", "inner", "Kind", "nonlocal_", "one"}
    assert local_names(function, walrus=True) == expected
    assert local_names(function, walrus=False) == expected
    # a walrus binds in an expression: only the full walk sees it
    walrus = cst.parse_module("def f(x):\n    print(y := x)\n").body[0]
    assert local_names(walrus) == {"x", "y"}


def test_uses_skip_function_locals_but_keep_annotations_defaults_and_decorators():
    used, _ = _uses(SOURCE)
    assert {"Config", "default", "deco", "grads"} <= set(used)  # `grads` through `global` in other()
    assert "grads" not in _uses("from lib import grads\n\ndef f():\n    grads = []\n    return grads\n")[0]
    assert "Config" in _uses("from lib import Config\n\ndef f(c: Config):\n    Config = 1\n    return c\n")[0]


def test_an_import_in_a_function_is_used_only_by_that_function():
    """What an import inside a function binds is used only in that function (and the functions nested in it that
    do not import it again); a module-level import is not used by a function that imports the name itself."""
    source = ("import lib as m\n\n"
              "def f():\n    import lib as m\n    return 1\n\n"
              "def g():\n    import lib as m\n    def inner():\n        return m.x\n    return inner\n\n"
              "class C:\n    def h(self):\n        import lib as m\n        return m.y\n")
    uses, imported = _uses(source)
    assert imported == {(("f",), "m"), (("g",), "m"), (("C", "h"), "m")}
    scoped = lambda *scope: [line for _, line in _uses_of(ImportInfo("m", "lib", 0, scope), uses, imported)]
    assert scoped("f") == []
    assert scoped("g") == [10]
    assert scoped("C", "h") == [16]
    assert scoped() == []  # every use is under a local import of its own
