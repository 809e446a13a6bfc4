"""A function's own variable spelled like an import is not the import (migrator/scopes.py, used by
PythonContext.qualname and the engine's dead-import refs; migrator/selfcheck/policy.py _used_names,
used by NM992)."""

from __future__ import annotations

import libcst as cst

from migrator.scopes import local_names
from migrator.selfcheck.policy import _used_names

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


def test_used_names_skip_function_locals_but_keep_annotations_defaults_and_decorators():
    used = _used_names(SOURCE)
    assert {"Config", "default", "deco", "grads"} <= used  # `grads` through `global` in other()
    assert "grads" not in _used_names("from lib import grads\n\ndef f():\n    grads = []\n    return grads\n")
    assert "Config" in _used_names("from lib import Config\n\ndef f(c: Config):\n    Config = 1\n    return c\n")
