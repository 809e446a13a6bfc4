"""NM505: old Neuron stack packages in ``setup.py`` (``setup(install_requires=[...], extras_require={...})``).

The string literals of the lists get the decisions NM501/NM503/NM504 make in requirement files
(``codemods.project.dependencies._decide_all``); the list keeps its layout (one element per line stays
one per line, the quotes of the replaced string are reused).
"""

from __future__ import annotations

import libcst as cst
from packaging.utils import canonicalize_name

from codemods.project.dependency_policy import (
    is_old_stack_distribution,
    MINIMUMS,
    TORCH_MARKER,
    TORCHNEURON_MARKER,
    USES_PROBES,
    _decide_all,
    _Entry,
    _parse_req,
    _replace_message,
    long_forms,
    project_uses,
    replacement_requirements,
    VLLM_MARKER,
    VLLM_TORCHNEURON_MARKER,
)
from migrator.rules import PythonContext, PythonRule

SETUP = ("setuptools.setup", "distutils.core.setup")


def _quote(node: cst.SimpleString) -> str | None:
    """The quote of a plain (unprefixed, single-line) string literal, else None."""
    raw = node.value
    if raw[:1] not in ("'", '"') or raw[:3] in ('"""', "'''"):
        return None
    return raw[0]


def _literal_items(value: cst.BaseExpression) -> list[cst.Element] | None:
    if isinstance(value, (cst.List, cst.Tuple)):
        return list(value.elements)
    return None


UNSEEN_MARKER = "Replace the old Neuron stack packages in {what} by hand: they are not a literal list."


def _short(code: str) -> str:
    """A piece of code as a marker names it (one line, at most 40 characters)."""
    code = " ".join(code.split())
    return code if len(code) <= 40 else code[:37] + "..."


class SetupPyDependencies(PythonRule):
    id = "NM505"
    markers = ((UNSEEN_MARKER, """The requirements there are built at run time (a variable, a function call,
        **kwargs), so the rule cannot see them: remove optimum-neuron, torch-xla, transformers-neuronx and
        neuronx-distributed from them and add what the migrated code needs (see `neuron-migrate explain NM501`)."""),
               *long_forms(TORCHNEURON_MARKER, TORCH_MARKER, VLLM_MARKER, VLLM_TORCHNEURON_MARKER))
    title = "Old Neuron stack packages in setup.py install_requires / extras_require"
    fix = "mixed"
    kinds = ("python",)
    triggers = ("install_requires", "extras_require")
    project_probes = USES_PROBES
    why = f"""
        `setup.py` declares the same dependencies as a requirements file, in Python: the string literals of
        `setup(install_requires=[...])` and of each list of `extras_require={{...}}` (calls of
        `setuptools.setup` / `distutils.core.setup`) get NM501's decisions: `optimum-neuron` (and
        `optimum[neuron|neuronx]`, `transformers-neuronx`) is replaced by the libraries the migrated code
        imports (`transformers>={MINIMUMS['transformers']}`, `accelerate>={MINIMUMS['accelerate']}`, plus those of
        its extras) when the list does not name them already; `torch-xla`, `libneuronxla`,
        `neuronx-distributed(-training)` are removed; XLA-era `torch-neuronx` and old `neuronx-cc` pins are
        unpinned; in such a call, libraries pinned below the versions the migrated code needs are raised
        (NM503) and old `torch` pins get a marker (NM504).
    """
    before = """
        from setuptools import setup

        setup(
            name="my-project",
            install_requires=[
                "optimum-neuron[neuronx]==0.2.0",
                "torch-xla==2.5.1",
                "datasets",
            ],
        )
    """
    after = f"""
        from setuptools import setup

        # TODO(neuron-migrate NM505): {TORCHNEURON_MARKER}
        setup(
            name="my-project",
            install_requires=[
                "torch-neuronx",
                "transformers>={MINIMUMS['transformers']}",
                "accelerate>={MINIMUMS['accelerate']}",
                "datasets",
            ],
        )
    """
    caveats = """
        The setup.py of an old-stack distribution itself (`setup(name="neuronx-distributed")`) is left
        alone: its dependencies are the old stack's own. Lists that are not literals (`install_requires=REQUIRES`, a comprehension, a function call) get a
        marker when the file names the old stack; a module-level `NAME = [...]` list passed by name is
        migrated in place. Prefixed or triple-quoted strings are not rewritten. Markers go above the
        `setup(...)` statement (a comment cannot be placed inside the call safely).
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _module_lists(self, ctx: PythonContext) -> dict[str, cst.BaseExpression]:
        state = ctx.local_state()
        if "lists" not in state:
            found: dict[str, list[cst.BaseExpression]] = {}
            for stmt in ctx.module.body:
                if not isinstance(stmt, cst.SimpleStatementLine):
                    continue
                for small in stmt.body:
                    if isinstance(small, cst.Assign):
                        for t in small.targets:
                            if isinstance(t.target, cst.Name):
                                found.setdefault(t.target.value, []).append(small.value)
                            elif (isinstance(t.target, cst.Subscript) and isinstance(t.target.value, cst.Name)
                                  and len(t.target.slice) == 1 and isinstance(t.target.slice[0].slice, cst.Index)
                                  and isinstance(t.target.slice[0].slice.value, cst.SimpleString)
                                  and _literal_items(small.value) is not None):
                                # `extras["inf2"] = ["optimum-neuron"]`: a group added to a dict after it is made
                                key = str(t.target.slice[0].slice.value.evaluated_value)
                                state.setdefault("items", {}).setdefault(t.target.value.value, []).append((key, small.value))
                    elif isinstance(small, (cst.AugAssign, cst.AnnAssign)) and isinstance(small.target, cst.Name):
                        found.setdefault(small.target.value, []).extend([small.value, small.value])  # ambiguous
            state["lists"] = {k: v[0] for k, v in found.items() if len(v) == 1 and v[0] is not None}
        return state["lists"]

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        state = ctx.local_state()
        if "on" not in state:  # once per unit, not once per call
            state["on"] = any(t in ctx.source for t in ("euron", "torch-xla", "torch_xla"))
        if not state["on"]:
            return
        if ctx.qualname(node.func) not in SETUP:
            return
        own = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "name"), None)
        if isinstance(own, cst.SimpleString) and is_old_stack_distribution(str(own.evaluated_value)):
            return  # the old stack's own packaging (setup(name="neuronx-distributed")): not a user's dependencies
        code = ctx.module.code_for_node
        # (group, the list node, its elements)
        lists: list[tuple[str, cst.BaseExpression]] = []
        for arg in node.args:
            if arg.star:
                ctx.marker(node, UNSEEN_MARKER.format(what=f"{arg.star}{_short(code(arg.value))}"))
                continue
            if arg.keyword is None:
                continue
            key = arg.keyword.value
            if key == "install_requires":
                lists.append(("", self._resolve(arg.value, ctx)))
            elif key == "extras_require":
                value = self._resolve(arg.value, ctx)
                if not isinstance(value, cst.Dict):
                    self._not_literal(node, key, value, ctx)
                    continue
                if isinstance(arg.value, cst.Name):
                    lists.extend(state.get("items", {}).get(arg.value.value, ()))
                for el in value.elements:
                    if isinstance(el, cst.DictElement) and isinstance(el.key, cst.SimpleString):
                        lists.append((str(el.key.evaluated_value), self._resolve(el.value, ctx)))
                    else:
                        self._not_literal(node, key, el.value if isinstance(el, cst.DictElement) else value, ctx)
        entries: list[_Entry] = []
        where: list[tuple[cst.BaseExpression, cst.Element]] = []
        for group, value in lists:
            items = _literal_items(value)
            if items is None:
                self._not_literal(node, "install_requires" if not group else f"extras_require[{group!r}]", value, ctx)
                continue
            for el in items:
                if not isinstance(el.value, cst.SimpleString) or _quote(el.value) is None:
                    continue
                text = el.value.evaluated_value
                parsed = _parse_req(text) if isinstance(text, str) else None
                if parsed is None:
                    continue
                entries.append(_Entry(
                    parsed.name, frozenset(canonicalize_name(x) for x in parsed.req.extras), group, len(entries),
                    "pip", [parsed.req.specifier], parsed.marker, parsed, url=parsed.req.url is not None,
                ))
                where.append((value, el))
        with project_uses(ctx.facts):
            decisions = _decide_all(entries, False)
        if not decisions:
            return
        per_list: dict[int, tuple[cst.BaseExpression, dict[int, list[str] | None]]] = {}
        for i, e in enumerate(entries):
            d = decisions.get(i)
            if d is None:
                continue
            lst, el = where[i]
            assert e.text is not None
            q = _quote(el.value)  # type: ignore[arg-type]
            if d.action == "marker":
                ctx.marker(node, d.marker or d.message)
                continue
            new = replacement_requirements(e, d)
            message = d.message if d.action == "respec" else _replace_message(d)
            per_list.setdefault(id(lst), (lst, {}))[1][id(el)] = [f"{q}{s}{q}" for s in new]
            ctx.finding(el, f"{e.name}: {message}")
            if d.marker:
                ctx.marker(node, d.marker)
        for lst, changes in per_list.values():
            ctx.replace(lst, lambda new, changes=changes, lst=lst: self._rewrite(lst, new, changes))

    @staticmethod
    def _rewrite(original: cst.BaseExpression, updated: cst.BaseExpression, changes: dict) -> cst.BaseExpression:
        old = list(original.elements)  # type: ignore[attr-defined]
        cur = list(updated.elements)  # type: ignore[attr-defined]
        between = next((u.comma for u in cur[:-1] if isinstance(u.comma, cst.Comma)), None)
        if between is None:
            ws = getattr(getattr(updated, "lbracket", None), "whitespace_after", None)
            between = cst.Comma(whitespace_after=ws if isinstance(ws, cst.ParenthesizedWhitespace)
                                else cst.SimpleWhitespace(" "))
        out: list[cst.Element] = []
        for i, (o, u) in enumerate(zip(old, cur)):
            if id(o) not in changes:
                out.append(u)
                continue
            items = changes[id(o)]
            for j, s in enumerate(items):
                comma = u.comma if j == len(items) - 1 else between
                out.append(u.with_changes(value=cst.SimpleString(s), comma=comma))
            if not items and i == len(cur) - 1 and out:
                out[-1] = out[-1].with_changes(comma=u.comma)  # the list's ending is the removed last element's
        for i, el in enumerate(out[:-1]):
            if isinstance(el.comma, cst.MaybeSentinel):
                out[i] = el.with_changes(comma=between)
        if (isinstance(updated, cst.Tuple) and len(cur) == 1 and len(out) > 1 and isinstance(out[-1].comma, cst.Comma)
                and not isinstance(out[-1].comma.whitespace_after, cst.ParenthesizedWhitespace)):
            out[-1] = out[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)  # ("a",) -> ("b", "c")
        if isinstance(updated, cst.Tuple) and len(out) == 1 and isinstance(out[0].comma, cst.MaybeSentinel):
            out[0] = out[0].with_changes(comma=cst.Comma())
        return updated.with_changes(elements=out)  # type: ignore[attr-defined]

    def _resolve(self, value: cst.BaseExpression, ctx: PythonContext) -> cst.BaseExpression:
        if isinstance(value, cst.Name):
            return self._module_lists(ctx).get(value.value, value)
        return value

    def _not_literal(self, node: cst.Call, key: str, value: cst.BaseExpression, ctx: PythonContext) -> None:
        if "euron" not in ctx.module.code_for_node(value) and "euron" not in ctx.source:
            return
        ctx.marker(node, UNSEEN_MARKER.format(what=f"{key}={_short(ctx.module.code_for_node(value))}"))


RULES = (SetupPyDependencies,)
