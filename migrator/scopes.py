"""Names a function binds locally (parameters, assignments, loop, ``with`` and ``except``
targets, nested ``def``/``class`` names; not its imports, which the import index resolves), so that a local variable spelled like an import
(``grads = []`` in a module that imports ``grads``) is not taken for the import.
``nonlocal``/``global`` names are not local. Comprehension variables are left out (they live in
their own scope and rarely share a name with an import)."""

from __future__ import annotations

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


def local_names(function: cst.FunctionDef | cst.Lambda) -> frozenset[str]:
    """The names ``function`` binds in its own scope."""
    binder = _Binder()
    params = function.params
    for p in (*params.posonly_params, *params.params, *params.kwonly_params):
        binder.bound.add(p.name.value)
    for p in (params.star_arg, params.star_kwarg):
        if isinstance(p, cst.Param):
            binder.bound.add(p.name.value)
    body = function.body
    if isinstance(function, cst.Lambda):
        return frozenset(binder.bound)
    body.visit(binder)
    return frozenset(binder.bound - binder.declared)
