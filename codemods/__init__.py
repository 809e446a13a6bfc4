"""The rules. Each module defines its rules and lists them in ``RULES``; this registry
collects them. The engine receives rule instances and knows nothing about any of them."""

from __future__ import annotations

from functools import lru_cache

from migrator.rules import Rule

from codemods import leftovers, neuron_kwargs, renames, skipped

_MODULES = (renames, neuron_kwargs, leftovers, skipped)


@lru_cache(maxsize=None)
def all_rules() -> tuple[Rule, ...]:
    rules = [cls() for mod in _MODULES for cls in mod.RULES]
    rules.sort(key=lambda r: r.id)
    ids = [r.id for r in rules]
    if len(ids) != len(set(ids)):
        raise RuntimeError(f"duplicate rule ids: {ids}")
    return tuple(rules)
