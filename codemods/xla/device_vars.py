"""Where an ``"xla"`` device or backend string flows through a variable (NM401).

``device = "xla"`` followed by ``model.to(device)``, ``torch.device(device)``, ``torch.ones(2,
device=device)`` or ``init_process_group(backend)`` is the same device string as a literal in
those positions, one assignment away. The NM401 handler for names records, in the single pass,

* every *store* of a name whose module assigns an ``"xla"``/``"xla:N"`` literal somewhere (an
  assignment of a string literal, or anything else: a parameter, a loop target, ``+=``...), with
  the scope it binds in (function, lambda, class or module);
* every *load* of such a name, with the chain of scopes it can see and what it is used for: a
  device position, a process-group backend, a comparison with an ``"xla"`` literal, something
  harmless (printed, formatted), or anything else;

and :func:`finish` resolves each load to the scope that binds it and decides per variable:

* every store a string literal, some loads device/backend positions, none used otherwise: the
  ``"xla"`` literals become ``"neuron"`` (or the per-rank ``torch.device("neuron", LOCAL_RANK)`` in
  a multi-process module when the variable is only ever used as a device), and the ``"xla"``
  literals it is compared with become ``"neuron"`` too, so that every branch keeps its meaning;
* used as a device/backend AND in ways the rule cannot follow (passed to a function, returned):
  a marker on the assignment;
* never used as a device or backend (``mode = "xla"``, a name read only by other modules): left
  alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from codemods.xla.base import _device, _XLA_DEVICE_RE, _multi_process
from migrator.rules import PythonContext

_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
#: calls whose arguments are only shown to a person: a device variable printed there is harmless
_SHOWN = ("print", "info", "debug", "warning", "warn", "error", "write", "log", "master_print", "format")
_INIT_PG = ("torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group")
#: torch-xla calls whose positional argument at this index is a device: the rules rewrite such a call
#: away (NM407: the plain loader) or mark it (NM900), so the variable is used as a device there; an
#: "other" use would make this run mark the variable and the next one, no longer seeing the call,
#: rewrite it
_XLA_DEVICE_ARGS = {
    "torch_xla.distributed.parallel_loader.MpDeviceLoader": 1,
    "torch_xla.core.xla_model.send_cpu_data_to_device": 1,
}
#: torch-xla calls whose positional argument at this index is a list of devices (``[device]``)
_XLA_DEVICE_LISTS = {"torch_xla.distributed.parallel_loader.ParallelLoader": 1}


@dataclass
class _Var:
    literals: list[cst.SimpleString] = field(default_factory=list)  # the "xla" literals assigned
    statements: list[cst.CSTNode] = field(default_factory=list)  # their assignments
    other_store: bool = False  # bound by something else than a string literal
    uses: list[tuple[str, cst.CSTNode | None]] = field(default_factory=list)


def candidates(ctx: PythonContext) -> set[str]:
    """Names the module assigns an ``"xla"`` literal to (a cheap first look at the source)."""
    st = ctx.scratch.setdefault("xla", {})
    if "xla_vars" not in st:
        st["xla_vars"] = set(re.findall(r"\b([A-Za-z_]\w*)\s*(?::[^=\n]*)?=\s*[rRuU]?['\"]xla(?::\d+)?['\"]",
                                        ctx.source))
    return st["xla_vars"]


def _scope_chain(ctx: PythonContext, skip_last: int = 1) -> tuple[int, ...]:
    """Ids of the scopes around the node being handled, innermost first, module last (class
    bodies are not seen by the functions nested in them)."""
    chain: list[int] = []
    nodes = ctx.stack[:-skip_last] if skip_last else ctx.stack
    for node in reversed(nodes):
        if isinstance(node, _SCOPES):
            if isinstance(node, cst.ClassDef) and chain:
                continue
            chain.append(id(node))
    chain.append(id(ctx.module))
    return tuple(chain)


def _binding_scope(ctx: PythonContext, name: cst.Name) -> int:
    """The scope a store of ``name`` binds in (a function's name and parameters: see below)."""
    parent = ctx.parent
    if isinstance(parent, (cst.FunctionDef, cst.ClassDef)) and parent.name is name:
        return _scope_chain(ctx, 2)[0]  # `def device(...)` binds in the enclosing scope
    return _scope_chain(ctx)[0]


def track(node: cst.Name, ctx: PythonContext) -> None:
    """Record one occurrence of a candidate name (see the module docstring)."""
    if node.value not in candidates(ctx):
        return
    state = ctx.local_state().setdefault("xla_vars", {"stores": {}, "loads": [], "bad": set()})
    kind = _store_kind(ctx, node)
    if kind is None:
        use = _load_kind(ctx, node)
        if use is not None:
            state["loads"].append((node.value, _scope_chain(ctx), use))
        return
    key = (_binding_scope(ctx, node), node.value)
    var = state["stores"].setdefault(key, _Var())
    if kind == "global":
        state["bad"].add(node.value)
    elif isinstance(kind, tuple):
        literal, statement = kind
        if _xla(literal) is not None:
            var.literals.append(literal)
            var.statements.append(statement)
    else:
        var.other_store = True


def _store_kind(ctx: PythonContext, node: cst.Name):
    """None for a load; ``(literal, statement)`` for ``name = "..."``; "global"; else "other"."""
    parent = ctx.parent
    stack = ctx.stack
    if isinstance(parent, (cst.Global, cst.Nonlocal)) or (
            isinstance(parent, cst.NameItem) and isinstance(stack[-3], (cst.Global, cst.Nonlocal))):
        return "global"
    if isinstance(parent, cst.AssignTarget) and parent.target is node:
        assign = stack[-3]
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.value, cst.SimpleString):
            return assign.value, assign
        return "other"
    if isinstance(parent, cst.AnnAssign) and parent.target is node:
        if isinstance(parent.value, cst.SimpleString):
            return parent.value, parent
        return "other"
    if isinstance(parent, (cst.AugAssign,)) and parent.target is node:
        return "other"
    if isinstance(parent, (cst.Param, cst.AsName, cst.ImportAlias, cst.FunctionDef, cst.ClassDef)):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)) and parent.name is not node:
            return None
        return "other"
    if isinstance(parent, cst.NamedExpr) and parent.target is node:
        return "other"
    if isinstance(parent, (cst.For, cst.CompFor)) and parent.target is node:
        return "other"
    if isinstance(parent, cst.Del):
        return "other"
    # a name inside a tuple/list target: `device, n = ...`, `for device, x in ...`
    i = len(stack) - 2
    while i > 0 and isinstance(stack[i], (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        i -= 1
    if i < len(stack) - 2:
        holder, inner = stack[i], stack[i + 1]
        if isinstance(holder, cst.AssignTarget) and holder.target is inner:
            return "other"
        if isinstance(holder, (cst.For, cst.CompFor)) and holder.target is inner:
            return "other"
        if isinstance(holder, (cst.Del, cst.AsName)):
            return "other"
    return None


def _load_kind(ctx: PythonContext, node: cst.Name):
    """What a load of the name is used for: ("device"|"backend", None), ("compare", literal),
    ("shown", None), ("other", None); None when the name is not a variable reference at all."""
    parent = ctx.parent
    stack = ctx.stack
    if isinstance(parent, cst.Attribute) and parent.attr is node:
        return None
    if isinstance(parent, cst.Arg) and parent.keyword is node:
        return None
    if isinstance(parent, cst.Arg) and parent.value is node and len(stack) >= 3 and isinstance(stack[-3], cst.Call):
        call = stack[-3]
        return _arg_kind(ctx, call, parent)
    if isinstance(parent, cst.Element) and len(stack) >= 5 and isinstance(stack[-3], cst.List) \
            and isinstance(stack[-4], cst.Arg) and isinstance(stack[-5], cst.Call):
        call, arg = stack[-5], stack[-4]
        qual = ctx.qualname(call.func) if isinstance(call.func, (cst.Name, cst.Attribute)) else None
        index = _XLA_DEVICE_LISTS.get(qual or "")
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if index is not None and index < len(positional) and positional[index] is arg:
            return ("device", None)  # `pl.ParallelLoader(loader, [device])`
        return ("other", None)
    if isinstance(parent, cst.Comparison) and parent.left is node and len(parent.comparisons) == 1:
        return _compare_kind(parent.comparisons[0].operator, parent.comparisons[0].comparator)
    if isinstance(parent, cst.ComparisonTarget) and parent.comparator is node:
        comparison = stack[-3]
        if isinstance(comparison, cst.Comparison) and len(comparison.comparisons) == 1:
            return _compare_kind(parent.operator, comparison.left)
        return ("other", None)
    if isinstance(parent, cst.FormattedStringExpression):
        return ("shown", None)
    return ("other", None)


def _parallel_loader(ctx: PythonContext, func: cst.BaseExpression) -> bool:
    """``func`` is ``<ParallelLoader(...)>.per_device_loader``."""
    value = func.value if isinstance(func, cst.Attribute) else None
    return isinstance(value, cst.Call) and isinstance(value.func, (cst.Name, cst.Attribute)) \
        and ctx.qualname(value.func) in _XLA_DEVICE_LISTS


def _compare_kind(operator, other: cst.BaseExpression):
    if isinstance(operator, (cst.Equal, cst.NotEqual)) and _xla(other) is not None:
        return ("compare", other)
    if isinstance(operator, (cst.In, cst.NotIn)) and isinstance(other, (cst.Tuple, cst.List, cst.Set)):
        found = [el.value for el in other.elements if _xla(el.value) is not None]
        if found:
            return ("compare_in", other)
    return ("other", None)


def _arg_kind(ctx: PythonContext, call: cst.Call, arg: cst.Arg):
    func = call.func
    qual = ctx.qualname(func) if isinstance(func, (cst.Name, cst.Attribute)) else None
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    positional = [a for a in call.args if a.keyword is None and not a.star]
    first = bool(positional) and positional[0] is arg
    keyword = arg.keyword.value if arg.keyword is not None else None
    if keyword == "device":
        return ("device", None)
    if qual == "torch.device" and (first or keyword == "type"):
        return ("device", None)
    if isinstance(func, cst.Attribute) and name == "to" and first and qual != "torch.device":
        return ("device", None)
    index = _XLA_DEVICE_ARGS.get(qual or "")
    if index is not None and index < len(positional) and positional[index] is arg:
        return ("device", None)
    if name == "per_device_loader" and first and _parallel_loader(ctx, func):
        return ("device", None)  # `pl.ParallelLoader(loader, [device]).per_device_loader(device)`
    if qual in _INIT_PG and (first or keyword == "backend"):
        return ("backend", None)
    if name in _SHOWN:
        return ("shown", None)
    return ("other", None)


def _xla(node: cst.BaseExpression) -> str | None:
    """"" / "N" for the literal ``"xla"`` / ``"xla:N"``; None for anything else."""
    if not isinstance(node, cst.SimpleString) or "b" in node.prefix.lower() or "\\" in node.value:
        return None
    match = _XLA_DEVICE_RE.match(node.raw_value)
    if match is None:
        return None
    return match.group(1) or ""


def _renamed(string: cst.SimpleString) -> cst.SimpleString:
    index = _xla(string)
    new = f"neuron:{index}" if index else "neuron"
    return cst.SimpleString(f"{string.prefix}{string.quote}{new}{string.quote}")


def finish(ctx: PythonContext) -> None:
    """Decide per variable, once every store and load of the unit is known."""
    state = ctx.local_state().get("xla_vars")
    if not state:
        return
    stores: dict[tuple[int, str], _Var] = state["stores"]
    for name, chain, use in state["loads"]:
        if name in state["bad"]:
            continue
        scope = next((s for s in chain if (s, name) in stores), None)
        if scope is not None:
            stores[(scope, name)].uses.append(use)
    for (_scope, name), var in stores.items():
        if name in state["bad"] or not var.literals:
            continue
        kinds = {k for k, _ in var.uses}
        if not kinds & {"device", "backend"}:
            continue  # never a device or a backend here: a plain value, left alone
        if var.other_store or "other" in kinds:
            for stmt in var.statements:
                ctx.marker(stmt, (
                    f"Change `{name}` (the XLA device/backend \"xla\") and every test of it to \"neuron\" by hand."))
            continue
        per_rank = kinds == {"device"} and _multi_process(ctx)
        for literal in var.literals:
            if per_rank and _xla(literal) in ("", "0"):
                ctx.replace(literal, cst.parse_expression(_device(ctx, None)))
                ctx.finding(literal, f"`{name}` = {literal.value} (used as the device) -> per-rank torch.device(\"neuron\", "
                                     "LOCAL_RANK)")
            else:
                ctx.replace(literal, _renamed(literal))
                what = " and ".join(k for k in ("device", "process-group backend")
                                    if (k == "device" and "device" in kinds) or (k != "device" and "backend" in kinds))
                ctx.finding(literal, f"`{name}` = {literal.value} (used as the {what}) -> \"neuron\"")
        for kind, other in var.uses:
            if kind == "compare":
                ctx.replace(other, _renamed(other))
            elif kind == "compare_in":
                for el in other.elements:
                    if _xla(el.value) is not None:
                        ctx.replace(el.value, _renamed(el.value))
