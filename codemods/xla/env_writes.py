"""Environment variables written through a mapping: the entries NM409 (bf16 switches) and NM416
(the other XLA-only variables, NEURON_CC_FLAGS) treat as they treat ``os.environ[K] = v``.

A program sets the old stack's variables in a mapping as often as through ``os.environ[...]``:

* ``os.environ.update({"NEURON_CC_FLAGS": "...", "XLA_USE_BF16": "1"})``, ``os.environ.update(K=v)``;
* a child's environment: ``subprocess.run(cmd, env={**os.environ, "XLA_USE_BF16": "1"})``,
  ``dict(os.environ, NEURON_CC_FLAGS=...)``, ``env = os.environ.copy(); env["K"] = v``, ``env = {...}``
  later passed as ``env=env``;
* Ray: ``runtime_env={"env_vars": {...}}``.

:func:`mapping_entries` finds the entries (the variable, its value, the node to remove) of the mapping
being handled and says whether the mapping is known to be an environment: the rules remove an entry
only there, and mark it elsewhere (a dict with such a key whose use is not seen).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from codemods.project.xla_env import BF16_VARS, xla_only_reason
from migrator.rules import PythonContext
from migrator.tree import walk_with_ancestors

#: keywords whose value is a process environment (subprocess/asyncio and SageMaker models' ``env=``, Ray's ``env_vars``,
#: SageMaker estimators' ``environment=``)
ENV_KEYWORDS = ("env", "env_vars", "environment")
_ENVIRON = "os.environ"


@dataclass(frozen=True)
class EnvEntry:
    """One variable a mapping sets: ``node`` is the DictElement or keyword Arg to remove."""

    name: str
    value: cst.BaseExpression
    node: cst.CSTNode


def _is_environ_copy(expr: cst.BaseExpression, ctx: PythonContext,
                     ancestors: Sequence[cst.CSTNode] | None = None) -> bool:
    """``os.environ``, ``os.environ.copy()``, ``dict(os.environ, ...)``, ``{**os.environ, ...}`` (``ancestors``:
    nodes around ``expr``, where it is not the node being handled: its names resolve there)."""
    where = ctx.stack if ancestors is None else ancestors

    def environ(e: cst.BaseExpression) -> bool:
        return ctx.qualname_at(e, where) == _ENVIRON

    if environ(expr):
        return True
    if isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "copy" and not expr.args:
            return environ(expr.func.value)
        if isinstance(expr.func, cst.Name) and expr.func.value == "dict" and expr.args \
                and expr.args[0].keyword is None and not expr.args[0].star:
            return environ(expr.args[0].value)
    if isinstance(expr, cst.Dict):
        return any(isinstance(el, cst.StarredDictElement) and environ(el.value) for el in expr.elements)
    return False


def environment_names(ctx: PythonContext) -> frozenset[str]:
    """Names of the unit that hold a process environment (computed once per unit, for every rule):
    assigned a copy of ``os.environ``, or passed as ``env=``/``env_vars=``, to ``os.environ.update``,
    or as the ``"env_vars"`` of a Ray runtime environment."""
    cache = ctx.scratch
    if "_environment_names" in cache:
        return cache["_environment_names"]
    found: set[str] = set()
    # every form names os.environ, env= or env_vars: a unit without "env" has none
    for node, ancestors in walk_with_ancestors(ctx.module) if "env" in ctx.source else ():
        t = type(node)
        if t is cst.Assign:
            if _is_environ_copy(node.value, ctx, ancestors):
                found.update(a.target.value for a in node.targets if isinstance(a.target, cst.Name))
        elif t is cst.Arg:
            if node.keyword is not None and node.keyword.value in ENV_KEYWORDS and isinstance(node.value, cst.Name):
                found.add(node.value.value)
        elif t is cst.DictElement:
            if _key(node.key) in ENV_KEYWORDS and isinstance(node.value, cst.Name):
                found.add(node.value.value)
        elif t is cst.Call:
            if isinstance(node.func, cst.Attribute) and node.func.attr.value == "update" and node.args \
                    and ctx.qualname_at(node.func.value, ancestors) == _ENVIRON and isinstance(node.args[0].value, cst.Name):
                found.add(node.args[0].value.value)
    cache["_environment_names"] = frozenset(found)
    return cache["_environment_names"]


def is_environment(expr: cst.BaseExpression, ctx: PythonContext) -> bool:
    """Whether ``expr`` is ``os.environ`` or a name of the unit holding a process environment."""
    if ctx.qualname(expr) == _ENVIRON:
        return True
    return isinstance(expr, cst.Name) and expr.value in environment_names(ctx)


def _key(node: cst.BaseExpression | None) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _dict_is_environment(node: cst.Dict, ctx: PythonContext) -> bool:
    """Whether the dict literal being handled (``ctx.stack[-1]``) is a process environment."""
    if _is_environ_copy(node, ctx):
        return True
    parent = ctx.parent
    if isinstance(parent, cst.Arg):
        if parent.keyword is not None:
            return parent.keyword.value in ENV_KEYWORDS
        call = ctx.stack[-3] if len(ctx.stack) > 2 else None
        return isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) \
            and call.func.attr.value == "update" and is_environment(call.func.value, ctx)
    if isinstance(parent, cst.DictElement) and parent.value is node:
        return _key(parent.key) in ENV_KEYWORDS
    if isinstance(parent, cst.Assign) and parent.value is node:
        return any(isinstance(t.target, cst.Name) and t.target.value in environment_names(ctx) for t in parent.targets)
    return False


def mapping_entries(node: cst.CSTNode, ctx: PythonContext) -> tuple[list[EnvEntry], bool] | None:
    """``(entries, known)`` for the node being handled when it is a mapping of environment variables:
    a dict literal (its string keys), ``os.environ.update(K=v)`` / ``env.update(K=v)`` and
    ``dict(os.environ, K=v)`` (their keywords). ``known``: the mapping is certainly a process
    environment (else the rules mark instead of removing). None for any other node."""
    if isinstance(node, cst.Dict):
        entries = [EnvEntry(k, el.value, el) for el in node.elements
                   if isinstance(el, cst.DictElement) and (k := _key(el.key)) is not None]
        return entries, _dict_is_environment(node, ctx)
    if isinstance(node, cst.Call):
        func = node.func
        env_call = (isinstance(func, cst.Attribute) and func.attr.value == "update" and is_environment(func.value, ctx)) \
            or _is_environ_copy(node, ctx) and isinstance(func, cst.Name)
        if not env_call:
            return None
        entries = [EnvEntry(a.keyword.value, a.value, a) for a in node.args if a.keyword is not None]
        return entries, True
    return None


def environment_subscript(target: cst.BaseExpression, ctx: PythonContext) -> str | None:
    """The variable of ``os.environ["K"]`` / ``env["K"]`` (``env`` holding a process environment)."""
    if not (isinstance(target, cst.Subscript) and len(target.slice) == 1
            and isinstance(target.slice[0].slice, cst.Index) and is_environment(target.value, ctx)):
        return None
    return _key(target.slice[0].slice.value)


def removable(entry: EnvEntry) -> bool:
    """Whether NM409/NM416 remove the entry outright (a bf16 switch or an XLA-only variable)."""
    return entry.name in BF16_VARS or (entry.name != "NEURON_CC_FLAGS" and xla_only_reason(entry.name) is not None)


def bf16_on(entry: EnvEntry) -> bool:
    """Whether the entry turned a bf16 switch on (any value but a literal "0"/"")."""
    if entry.name not in BF16_VARS:
        return False
    return not (isinstance(entry.value, cst.SimpleString) and entry.value.evaluated_value in ("0", "", "false", "False"))


_BF16_RE = re.compile(
    r"^\s*os\.environ(?:\[\s*['\"]XLA_(?:USE|DOWNCAST)_BF16['\"]\s*\]\s*=|\.setdefault\(\s*['\"]XLA_(?:USE|DOWNCAST)_BF16)"
)


def is_bf16_line(stmt: cst.CSTNode) -> bool:
    """Whether ``stmt`` is a line holding one ``os.environ["XLA_USE_BF16"] = v`` / ``setdefault`` setting."""
    return (
        isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
        and _BF16_RE.match(cst.Module(body=[]).code_for_node(stmt.with_changes(leading_lines=()))) is not None
    )


def value_on(value: cst.BaseExpression) -> bool:
    """Whether a bf16 switch set to ``value`` is on (anything but a literal "0" or "")."""
    return not (isinstance(value, cst.SimpleString) and value.evaluated_value in ("0", ""))


def after_settings(body: Sequence[cst.CSTNode], k: int) -> cst.CSTNode | None:
    """The first statement after ``body[k]`` in its block that is not another bf16 setting line."""
    return next((st for st in body[k + 1:] if not is_bf16_line(st)), None)


def setting_stays(body: Sequence[cst.CSTNode], k: int, on: bool) -> bool:
    """NM409's decision for the bf16 setting line ``body[k]``: it is deleted, except where it turns bf16 on
    and nothing but other settings follows it in its block (the marker carrying the bf16 intent then stays on
    it). The rules that read these variables ask it too: a read after a deleted setting reads it unset."""
    return on and after_settings(body, k) is None


def update_statement(node: cst.CSTNode, ctx: PythonContext) -> tuple[cst.SimpleStatementLine, tuple] | None:
    """The statement line ``os.environ.update(...)`` (alone on its line, not alone in its block) whose
    call is, or whose one argument is, the mapping being handled: removed when every entry goes."""
    stack = ctx.stack
    i = len(stack) - 1
    if isinstance(node, cst.Dict):
        if i < 2 or not isinstance(stack[i - 1], cst.Arg) or stack[i - 1].keyword is not None:
            return None
        i -= 2
    call = stack[i]
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "update"
            and len(call.args) == 1 and i >= 3):
        return None
    expr, line, block = stack[i - 1], stack[i - 2], stack[i - 3]
    body = getattr(block, "body", None)
    if isinstance(expr, cst.Expr) and isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 \
            and isinstance(body, (list, tuple)) and len(body) > 1:
        return line, tuple(body)
    return None


def _tidy_commas(original: cst.CSTNode):
    """A function of the updated mapping (a Dict or a Call) that gives its new last element the
    trailing comma the original last one had (none, mostly): ``{**os.environ, }`` -> ``{**os.environ}``."""
    field = "elements" if isinstance(original, cst.Dict) else "args"
    items = getattr(original, field)
    had = items[-1].comma if items else cst.MaybeSentinel.DEFAULT

    def tidy(updated: cst.CSTNode) -> cst.CSTNode:
        new = list(getattr(updated, field))
        if new and not isinstance(had, cst.Comma):
            new[-1] = new[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(**{field: new})

    return tidy


def drop_entry(entry: EnvEntry, mapping: cst.CSTNode, ctx: PythonContext) -> None:
    """Remove one entry of the mapping being handled (a dict element or a keyword argument)."""
    ctx.replace(entry.node, cst.RemovalSentinel.REMOVE)
    ctx.replace(mapping, _tidy_commas(mapping))
