"""Names a function binds locally (parameters, assignments, loop, ``with`` and ``except``
targets, nested ``def``/``class`` names; not its imports, which the import index resolves), so that a local variable spelled like an import
(``grads = []`` in a module that imports ``grads``) is not taken for the import.
``nonlocal``/``global`` names are not local. Comprehension variables are left out (they live in
their own scope and rarely share a name with an import)."""

from __future__ import annotations

import dataclasses

import libcst as cst

FUNCTIONS = (cst.FunctionDef, cst.Lambda)


class _Binder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.bound: set[str] = set()
        self.declared: set[str] = set()

    def _target(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Name):
            self.bound.add(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for el in node.elements:
                self._target(el.value)
        elif isinstance(node, cst.StarredElement):
            self._target(node.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._target(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._target(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._target(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._target(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._target(node.name)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> bool:
        return False  # an import inside the function is an import: the module's import index has it

    def visit_Global(self, node: cst.Global) -> None:
        self.declared.update(n.name.value for n in node.names)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.declared.update(n.name.value for n in node.names)

    # nested scopes: their name is bound here, their body is theirs
    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.bound.add(node.name.value)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.bound.add(node.name.value)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_CompFor(self, node: cst.CompFor) -> bool:
        return False


def bound_names(module: cst.Module) -> frozenset[str]:
    """The names a module's own scope binds other than by import (assignments, definitions, loop and
    ``with`` targets, ``:=``); the import index (:mod:`migrator.imports`) has the imported ones."""
    binder = _Binder()
    module.visit(binder)
    return frozenset(binder.bound)


def named_params(function: cst.FunctionDef | cst.Lambda) -> tuple[cst.Param, ...]:
    """``function``'s parameters that have a name of their own (positional-only, ordinary, keyword-only; not
    ``*args``/``**kwargs``), in order."""
    params = function.params
    return (*params.posonly_params, *params.params, *params.kwonly_params)


def local_names(function: cst.FunctionDef | cst.Lambda, walrus: bool = True) -> frozenset[str]:
    """The names ``function`` binds in its own scope. ``walrus=False`` (the module has no ``:=``) walks
    the statements only, not the expressions: the same names, several times faster."""
    bound = {p.name.value for p in named_params(function)}
    params = function.params
    for p in (params.star_arg, params.star_kwarg):
        if isinstance(p, cst.Param):
            bound.add(p.name.value)
    if isinstance(function, cst.Lambda):
        return frozenset(bound)
    if walrus:
        binder = _Binder()
        function.body.visit(binder)
        return frozenset((bound | binder.bound) - binder.declared)
    declared: set[str] = set()
    _statements(function.body, bound, declared)
    return frozenset(bound - declared)


def _target(node: cst.CSTNode, bound: set[str]) -> None:
    if isinstance(node, cst.Name):
        bound.add(node.value)
    elif isinstance(node, (cst.Tuple, cst.List)):
        for el in node.elements:
            _target(el.value, bound)
    elif isinstance(node, cst.StarredElement):
        _target(node.value, bound)


def _statements(block: cst.CSTNode, bound: set[str], declared: set[str]) -> None:
    """What :class:`_Binder` collects from a block without ``:=``: the targets of its statements."""
    stack: list[cst.CSTNode] = [block]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.IndentedBlock, cst.SimpleStatementSuite, cst.SimpleStatementLine, cst.Else,
                             cst.Finally)):
            stack.extend(node.body if not isinstance(node, (cst.Else, cst.Finally)) else (node.body,))
        elif isinstance(node, (cst.Assign,)):
            for t in node.targets:
                _target(t.target, bound)
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            _target(node.target, bound)
        elif isinstance(node, (cst.Global, cst.Nonlocal)):
            declared.update(n.name.value for n in node.names)
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            bound.add(node.name.value)
        elif isinstance(node, cst.If):
            stack.append(node.body)
            if node.orelse is not None:
                stack.append(node.orelse)
        elif isinstance(node, (cst.For, cst.While)):
            if isinstance(node, cst.For):
                _target(node.target, bound)
            stack.append(node.body)
            if node.orelse is not None:
                stack.append(node.orelse)
        elif isinstance(node, cst.With):
            for item in node.items:
                if item.asname is not None:
                    _target(item.asname.name, bound)
            stack.append(node.body)
        elif isinstance(node, (cst.Try, cst.TryStar)):
            stack.append(node.body)
            for handler in node.handlers:
                if handler.name is not None:
                    _target(handler.name.name, bound)
                stack.append(handler.body)
            stack.extend(x for x in (node.orelse, node.finalbody) if x is not None)
        elif isinstance(node, cst.Match):
            stack.extend(case.body for case in node.cases)
