"""What NM410 knows about the traced artifacts of one unit: what each ``torch_neuronx.trace`` traced (a
Transformers model, a module whose construction can be written again, or another module), the path each
trace is saved at (``torch.jit.save(traced, path)`` / ``traced.save(path)``), and so what a
``torch.jit.load(path)`` of the unit reads once both sides are migrated. The save side and the load side
of a unit decide from this one table, whatever their order in the file: the save writes
``save_pretrained(path)`` exactly where the load then reads ``from_pretrained(path)``, and a state dict
where the load rebuilds the module and calls ``load_state_dict(torch.load(path))``."""

from __future__ import annotations

import re

from dataclasses import dataclass, field

import libcst as cst

from migrator.rules import PythonContext
from migrator.scopes import bound_names
from migrator.tree import child_nodes

#: what a trace saved: the Transformers model it wraps (``save_pretrained``), or another module's state dict
PRETRAINED = "pretrained"
MODULE = "module"
#: ... or a TorchScript module of torch.jit.trace / torch.jit.script, which its save still writes as before
TORCHSCRIPT = "torchscript"
JIT_TRACES = ("torch.jit.trace", "torch.jit.script")
#: torch_neuronx.trace and where torch-neuronx defines it (``from torch_neuronx.xla_impl.trace import trace``)
NEURON_TRACES = ("torch_neuronx.trace", "torch_neuronx.xla_impl.trace.trace")

#: methods that return the module they are called on (``model.eval()``, ``model.to(device)``)
CHAINED = ("eval", "to", "cpu", "float", "half", "requires_grad_")


@dataclass(frozen=True)
class Traced:
    """What one trace compiled: ``kind`` (PRETRAINED / MODULE), ``model`` (the traced expression as written)
    and, for a module, ``ctor``: the call that built it, when it can be written again elsewhere (a
    ``torch.nn`` class or a class of this module deriving from one, called with literal arguments only)."""

    kind: str
    model: str
    ctor: cst.Call | None = None
    #: for a Transformers model: the class it was loaded with (``DistilBertModel``, ``AutoModelForMaskedLM``), as
    #: written in the unit
    loader: str = ""


@dataclass
class Artifacts:
    #: (id of the scope, name assigned from a trace: torch_neuronx's or torch.jit's) -> what it traced
    traces: dict[tuple[int, str], Traced] = field(default_factory=dict)
    #: id of a save call (torch.jit.save / .save of a traced name) -> (its path, its scope, what it saves)
    saves: dict[int, tuple[cst.BaseExpression, cst.CSTNode, Traced]] = field(default_factory=dict)

    def saved_at(self, path: cst.BaseExpression, scope: cst.CSTNode, ctx: PythonContext) -> list[Traced]:
        """What the saves of this unit write at ``path`` as read in ``scope``: the same string, or the same
        expression of names that mean the same there (same scope, or names no function of the two binds)."""
        code = _code(path)
        found = []
        for saved, save_scope, traced in self.saves.values():
            if _code(saved) != code:
                continue
            if isinstance(path, cst.SimpleString) or save_scope is scope or not _local(path, (scope, save_scope), ctx):
                found.append(traced)
        return found


def unchain(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``X.from_pretrained(...)`` of ``X.from_pretrained(...).eval().to(...)``."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in CHAINED:
        expr = expr.func.value
    return expr


def from_transformers(expr: cst.BaseExpression, ctx: PythonContext) -> bool:
    """``<transformers class>.from_pretrained(...)`` (possibly followed by .eval() / .to(...))."""
    expr = unchain(expr)
    if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value == "from_pretrained"):
        return False
    qual = ctx.class_qualname(expr.func.value) or ""
    return qual.startswith("transformers.")


def plain(expr: cst.BaseExpression) -> bool:
    """An expression that can be written twice (a name, an attribute or subscript of names, a string)."""
    if isinstance(expr, (cst.Name, cst.SimpleString)):
        return True
    if isinstance(expr, cst.Attribute):
        return plain(expr.value)
    if isinstance(expr, cst.Subscript):
        return plain(expr.value) and all(
            isinstance(s.slice, cst.Index) and (plain(s.slice.value) or isinstance(s.slice.value, cst.Integer))
            for s in expr.slice)
    return False


def artifacts(ctx: PythonContext) -> Artifacts:
    """The traces and saves of the unit (computed once per unit)."""
    state = ctx.local_state()
    if "artifacts" not in state:
        state["artifacts"] = _scan(ctx)
    return state["artifacts"]


def rebuildable(ctor: cst.Call, ctx: PythonContext) -> bool:
    """The construction can be written where the node being handled is: its class is a module-level class
    of the unit or an import that has run there, and the name is not bound by a function around it."""
    root = ctor.func
    while isinstance(root, cst.Attribute):
        root = root.value
    if not isinstance(root, cst.Name) or ctx.bound_locally(root.value, ctx.stack):
        return False
    if any(isinstance(s, cst.ClassDef) and s.name.value == root.value for s in ctx.module.body):
        return True
    binding = ctx.imports.binding_of(root)
    return binding is not None and binding.reaches(ctx.enclosing())


def not_a_module(expr: cst.BaseExpression, scope: cst.CSTNode, ctx: PythonContext) -> str | None:
    """Why the value a trace takes is known not to be an ``nn.Module`` (``torch.compile(x.to("neuron").eval())``
    needs one), or None: a name assigned from ``torch.jit.trace``/``torch.jit.script`` (a ScriptFunction of a
    function has no ``.to()``; a ScriptModule is not what dynamo compiles), a function the unit defines, a
    lambda, or a bound ``forward`` method."""
    expr = unchain(expr)
    if isinstance(expr, cst.Lambda):
        return "it traces a lambda, not an nn.Module"
    if isinstance(expr, cst.Attribute) and expr.attr.value == "forward":
        return "it traces a forward method, not its nn.Module"
    if not isinstance(expr, cst.Name):
        return None
    name = expr.value
    table = artifacts(ctx)
    for key in ((id(scope), name), (id(ctx.module), name)):
        traced = table.traces.get(key)
        if traced is not None and traced.kind == TORCHSCRIPT:
            return f"`{name}` is TorchScript (torch.jit), not an nn.Module"
        if scope is ctx.module:
            break
    local = scope is not ctx.module and ctx.bound_locally(name, [scope])
    bodies = [scope.body.body] if local and isinstance(scope.body, cst.IndentedBlock) else [ctx.module.body]
    if any(isinstance(s, cst.FunctionDef) and s.name.value == name for body in bodies for s in body):
        return f"`{name}` is a function, not an nn.Module"
    if not local and ctx.imports.bindings.get(name) and not any(
            isinstance(s, cst.SimpleStatementLine) and any(isinstance(b, (cst.Assign, cst.AnnAssign)) for b in s.body)
            and re.search(rf"^\s*{re.escape(name)}\s*(?::[^=]*)?=", ctx.module.code_for_node(s)) for s in ctx.module.body):
        # `from kernels import kron_matmul`: an imported name is a function or a class far more often than a
        # module instance (instances are made where they are traced); which one is not known here
        shown = f"`{name}`" if len(name) <= 24 else "the traced name"
        return f"{shown} may be an imported function: compile it as it is"
    if not local and not _MODULE_NAME.search(name) and name not in module_names(ctx) and not any(
            type(a) in (cst.FunctionDef, cst.Lambda) and ctx.bound_locally(name, [a]) for a in ctx.stack):
        # bound nowhere in the unit (a snippet of a document, a name another cell or module defines) and not
        # named as a module is: a function as often as a module, and only a module has .to()
        shown = f"`{name}`" if len(name) <= 14 else "the traced name"
        return f"{shown} comes from elsewhere: only a module takes .to(\"neuron\")"
    return None


#: how a name that holds an nn.Module is written (`model`, `neuron_model`, `net`, `unet`, `text_encoder`, `vae`)
_MODULE_NAME = re.compile(r"model|net|module|encoder|decoder|vae|transformer|layer|block|backbone|head|classifier",
                          re.IGNORECASE)


def module_names(ctx: PythonContext) -> frozenset[str]:
    """The names the unit's module scope binds (assignments, definitions, imports, loop targets...)."""
    found = ctx.scratch.get("artifacts.module_names")
    if found is None:
        found = ctx.scratch["artifacts.module_names"] = bound_names(ctx.module) | frozenset(ctx.imports.bindings)
    return found


# ------------------------------------------------------------------------------------------- the scan
def _scan(ctx: PythonContext) -> Artifacts:
    table = Artifacts()
    #: (scope id, name) -> what the latest assignment of the name holds, and how many assignments it had
    held: dict[tuple[int, str], tuple[Traced | None, int]] = {}

    def assigned(scope: cst.CSTNode, name: str, value: cst.BaseExpression) -> None:
        key = (id(scope), name)
        value = unchain(value)
        if isinstance(value, cst.Name) and value.value == name:
            return  # `model = model.eval()`: the same module
        count = held.get(key, (None, 0))[1]
        held[key] = (_classify(value, scope, held, ctx), count + 1)

    def walk(node: cst.CSTNode, scope: cst.CSTNode, parent: cst.CSTNode | None) -> None:
        if isinstance(node, (cst.FunctionDef, cst.Lambda)) and node is not scope:
            for child in child_nodes(node):
                walk(child, node, node)
            return
        if isinstance(node, cst.Call):
            qual = ctx.imports.resolve(node.func)
            if qual in NEURON_TRACES:
                _trace(node, scope, parent, held, table, ctx)
            elif qual in JIT_TRACES:
                _trace(node, scope, parent, held, table, ctx, torchscript=True)
            elif qual == "torch.jit.save" or (isinstance(node.func, cst.Attribute) and node.func.attr.value == "save"):
                _save(node, qual == "torch.jit.save", scope, table)
        for child in child_nodes(node):
            walk(child, scope, node)
        # an assignment is recorded after its value (the trace in `traced = trace(...)` is seen first)
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            if not (isinstance(node.value, cst.Call)
                    and ctx.imports.resolve(node.value.func) in (*NEURON_TRACES, *JIT_TRACES)):
                assigned(scope, node.targets[0].target.value, node.value)

    walk(ctx.module, ctx.module, None)
    return table


def _trace(call: cst.Call, scope: cst.CSTNode, parent: cst.CSTNode | None,
           held: dict[tuple[int, str], tuple[Traced | None, int]], table: Artifacts, ctx: PythonContext,
           torchscript: bool = False) -> None:
    model = call.args[0].value if call.args and call.args[0].keyword is None and not call.args[0].star else next(
        (a.value for a in call.args if a.keyword is not None and a.keyword.value == "func"), None)
    if not (isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1
            and isinstance(parent.targets[0].target, cst.Name)):
        return
    if torchscript:
        traced: Traced | None = Traced(TORCHSCRIPT, _code(model) if model is not None else "")
    else:
        traced = _classify(model, scope, held, ctx) if model is not None else None
    table.traces[(id(scope), parent.targets[0].target.value)] = traced or Traced(MODULE, "")


def _save(call: cst.Call, jit: bool, scope: cst.CSTNode, table: Artifacts) -> None:
    if jit:
        if len(call.args) != 2 or any(a.keyword is not None or a.star for a in call.args):
            return
        name, path = call.args[0].value, call.args[1].value
    else:
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return
        name, path = call.func.value, call.args[0].value  # type: ignore[attr-defined]
    if isinstance(name, cst.Name) and (id(scope), name.value) in table.traces:
        table.saves[id(call)] = (path, scope, table.traces[(id(scope), name.value)])


def _classify(value: cst.BaseExpression, scope: cst.CSTNode, held: dict[tuple[int, str], tuple[Traced | None, int]],
              ctx: PythonContext) -> Traced:
    value = unchain(value)
    if from_transformers(value, ctx):
        return Traced(PRETRAINED, _code(value), loader=_code(value.func.value))  # type: ignore[attr-defined]
    if isinstance(value, cst.Name):
        known, count = held.get((id(scope), value.value), (None, 0))
        if known is None and not (scope is not ctx.module and ctx.bound_locally(value.value, [scope])):
            known, count = held.get((id(ctx.module), value.value), (None, 0))  # a module-level name
        if known is not None:
            if known.kind == MODULE and count > 1:
                return Traced(MODULE, value.value)  # built more than once here: which one is not known
            return Traced(known.kind, value.value, known.ctor, known.loader)
        return Traced(MODULE, value.value)
    if isinstance(value, cst.Call) and _module_class(value.func, ctx) and all(_literal_arg(a) for a in value.args):
        return Traced(MODULE, _code(value), value)
    return Traced(MODULE, _code(value))


def _module_class(func: cst.BaseExpression, ctx: PythonContext) -> bool:
    """A ``torch.nn`` module class, or a class of this module deriving from one."""
    qual = ctx.imports.resolve(func)
    if qual is None and isinstance(func, cst.Name) and any(
            isinstance(s, cst.ClassDef) and s.name.value == func.value for s in ctx.module.body):
        qual = ctx.class_qualname(func)
    if qual is None or not qual.startswith("torch.nn."):
        return False
    last = qual.rsplit(".", 1)[1]
    return last[:1].isupper()


def _literal_arg(arg: cst.Arg) -> bool:
    return not arg.star and _literal(arg.value)


def _literal(value: cst.BaseExpression) -> bool:
    if isinstance(value, (cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(value, cst.Name):
        return value.value in ("True", "False", "None")
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
        return isinstance(value.expression, (cst.Integer, cst.Float))
    if isinstance(value, (cst.Tuple, cst.List)):
        return all(not isinstance(e, cst.StarredElement) and _literal(e.value) for e in value.elements)
    return False


def _local(path: cst.BaseExpression, scopes: tuple[cst.CSTNode, ...], ctx: PythonContext) -> bool:
    """The name ``path`` starts with is bound by one of the functions ``scopes`` (a parameter, an assignment)."""
    root = path
    while isinstance(root, (cst.Attribute, cst.Subscript)):
        root = root.value
    if not isinstance(root, cst.Name):
        return True
    return any(isinstance(s, (cst.FunctionDef, cst.Lambda)) and ctx.bound_locally(root.value, [s]) for s in scopes)


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)
