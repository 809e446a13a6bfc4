"""Training arguments that flow through a dict (NM201 / NM203): ``settings = dict(...)`` or
``settings = {...}`` (maybe completed by ``settings["key"] = ...`` / ``settings.update(key=...)``)
then ``NeuronSFTConfig(**settings)``. Where the dict literal is visible (a name bound once, in the
same function, before the call), its entries are fields of the call: they are dropped, renamed or
added in the literal itself, and ``save_only_model=True`` goes there too."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from codemods.common.arg_plan import MAX_LINE, ArgPlan, apply_plan, literal, statement_indent
from codemods.training.layouts import UNKNOWN, _track
from migrator.rules import PythonContext

@dataclass
class Spread:
    """The dict literal unpacked into a call: ``node`` (a ``dict(...)`` call or a ``{...}``), its
    entries by key (``kw``: objects with ``.value``), the edit of its entries (``plan``), the keys
    set on the name between the literal and the call (``later``: UNKNOWN for a key that cannot be
    read), the statement that binds it and the name."""

    node: cst.Call | cst.Dict
    kw: dict
    plan: ArgPlan
    later: dict
    statement: cst.CSTNode
    name: str
    registered: bool = False

    def keys(self) -> set:
        return set(self.kw) | {k for k in self.later if k is not UNKNOWN}

    def value_of(self, key: str):
        """The value the key has when the call runs: a literal, NOT_LITERAL, or None when it is not set."""
        if key in self.later:
            return self.later[key]
        entry = self.kw.get(key)
        return literal(entry.value) if entry is not None else None


def spread_of(call: cst.Call, ctx: PythonContext) -> Spread | None:
    """The visible dict literal of the call's only ``**name`` argument, else None."""
    stars = [a for a in call.args if a.star == "**"]
    if len(stars) != 1 or not isinstance(stars[0].value, cst.Name):
        return None
    name = stars[0].value.value
    track = _track(ctx)
    scope = ctx.scope_id
    cache = ctx.local_state().setdefault("spreads", {})
    values = track["assigns"].get((scope, name), [])
    if len(values) != 1:
        return None
    value = values[0]
    if id(value) in cache:
        return cache[id(value)]
    kw = _entries(value, ctx)
    if kw is None:
        return None
    statement = track.setdefault("assign_statements", {}).get(id(value))
    if statement is None:
        return None
    later = dict(track.get("dict_sets", {}).get((scope, name), {}))
    spread = cache[id(value)] = Spread(value, kw, ArgPlan(), later, statement, name)
    return spread


def _entries(value, ctx: PythonContext) -> dict | None:
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict" \
            and ctx.qualname(value.func) in (None, "builtins.dict") and value.args \
            and all(a.keyword is not None and not a.star for a in value.args):
        return {a.keyword.value: a for a in value.args}
    if isinstance(value, cst.Dict) and value.elements and all(
            isinstance(e, cst.DictElement) and isinstance(literal(e.key), str) for e in value.elements):
        out = {literal(e.key): e for e in value.elements}
        return out if all(k.isidentifier() for k in out) else None
    return None


def register(spread: Spread, ctx: PythonContext) -> None:
    """Apply ``spread.plan`` to the dict literal when the edits are made (once)."""
    if spread.registered:
        return
    spread.registered = True
    plan, node = spread.plan, spread.node
    indent = statement_indent(ctx)  # of the call's statement: the dict is built in the same block
    prefix = " " * (len(spread.name) + 3)
    step = ctx.module.default_indent
    if isinstance(node, cst.Call):
        ctx.replace(node, lambda new: new if plan.empty() else apply_plan(new, plan, MAX_LINE, indent + prefix, step))
    else:
        quote = "'" if any(isinstance(e.key, cst.SimpleString) and e.key.quote.startswith("'")
                           for e in node.elements) else '"'
        ctx.replace(node, lambda new: new if plan.empty() else apply_dict_plan(new, plan, quote))


def apply_dict_plan(d: cst.Dict, plan: ArgPlan, quote: str) -> cst.Dict:
    """ArgPlan on a ``{"key": value, ...}`` literal: drop / rename / re-value / add entries."""
    elements = list(d.elements)
    closing = elements[-1].comma if elements else cst.MaybeSentinel.DEFAULT
    out = []
    for e in elements:
        key = literal(e.key) if isinstance(e, cst.DictElement) else None
        if key in plan.drop:
            continue
        if key in plan.revalue:
            e = e.with_changes(value=plan.revalue[key](e.value))
        if key in plan.rename:
            e = e.with_changes(key=cst.SimpleString(f"{quote}{plan.rename[key]}{quote}"))
        out.append(e)
    if out and len(out) < len(elements):
        out[-1] = out[-1].with_changes(comma=closing)
    new = d.with_changes(elements=out)
    if plan.add:
        new = dict_add(new, plan.add, quote)
    return new


def dict_add(d: cst.Dict, entries, quote: str) -> cst.Dict:
    elements = list(d.elements)
    new = [cst.DictElement(cst.SimpleString(f"{quote}{k}{quote}"), make(),
                           whitespace_before_colon=cst.SimpleWhitespace(""),
                           whitespace_after_colon=cst.SimpleWhitespace(" ")) for k, make in entries]
    closing = elements[-1].comma if elements else cst.MaybeSentinel.DEFAULT
    middle = next((e.comma for e in elements[:-1] if isinstance(e.comma, cst.Comma)), None)
    if middle is None:
        middle = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        if isinstance(closing, cst.Comma) and isinstance(closing.whitespace_after, cst.ParenthesizedWhitespace) \
                and isinstance(d.whitespace_before_elements, cst.ParenthesizedWhitespace):
            middle = closing.with_changes(whitespace_after=closing.whitespace_after.with_changes(
                last_line=d.whitespace_before_elements.last_line))
    out = elements + new
    out = [e.with_changes(comma=middle) for e in out[:-1]] + [out[-1].with_changes(comma=closing)]
    return d.with_changes(elements=out)
