"""The rules, one package per family: ``inference`` (NM1xx), ``training`` (NM2xx, NM3xx), ``xla``
(NM4xx), ``project`` (NM5xx), ``upgrade`` (NM6xx) and ``common`` (the rename table NM100/NM200/NM300,
the leftovers NM9xx and helpers shared by several families). Every family package exposes
``RULES`` (a tuple of rule classes) in its ``__init__``; :func:`all_rules` collects them, so the
engine receives rule instances and knows nothing about any family or rule.

Importing this package is cheap on purpose (no rule module, no libcst): the engine's byte
pre-filter reads :func:`all_rules_triggers` (the generated table of ``_triggers.py``) and imports
the rules only when a file passes it.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache


def families() -> list[str]:
    """The family packages, in name order (``codemods.common``, ``codemods.inference``...)."""
    return [f"{__name__}.{i.name}" for i in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name) if i.ispkg]


@lru_cache(maxsize=None)
def all_rules() -> tuple:
    """One instance of every rule of every family, sorted by id."""
    from migrator.rules import RULE_ID_RE  # the contracts import libcst: only when rules are wanted

    rules = []
    for family in families():
        rules.extend(cls() for cls in importlib.import_module(family).RULES)
    rules.sort(key=lambda r: r.id)
    ids = [r.id for r in rules]
    if len(ids) != len(set(ids)):
        raise RuntimeError(f"duplicate rule ids: {sorted(i for i in ids if ids.count(i) > 1)}")
    bad = [i for i in ids if not RULE_ID_RE.match(i)]
    if bad:
        raise RuntimeError(f"malformed rule ids: {bad}")
    return tuple(rules)
