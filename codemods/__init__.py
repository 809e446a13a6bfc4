"""The rules. Every module in this package that defines ``RULES`` (a tuple of rule
classes) is picked up here; the engine receives rule instances and knows nothing
about any of them. Adding a rule = adding a module (and its fixtures)."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from migrator.rules import RULE_ID_RE, Rule


@lru_cache(maxsize=None)
def all_rules() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        rules.extend(cls() for cls in getattr(module, "RULES", ()))
    rules.sort(key=lambda r: r.id)
    ids = [r.id for r in rules]
    if len(ids) != len(set(ids)):
        raise RuntimeError(f"duplicate rule ids: {sorted(i for i in ids if ids.count(i) > 1)}")
    bad = [i for i in ids if not RULE_ID_RE.match(i)]
    if bad:
        raise RuntimeError(f"malformed rule ids: {bad}")
    return tuple(rules)
