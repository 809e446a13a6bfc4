"""The checks: one program in, its violations out (see the package docstring)."""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from migrator.model import CELL_BOUNDARY, MARKER_RE, SKIPPED_CELL, ignored_rules

UNDEFINED = "undefined-name"
UNRESOLVED = "unresolved-import"
KEYWORD = "unaccepted-keyword"
OLD_STACK = "old-stack-import"

#: Packages of the old stack: none of them exists in a TorchNeuron environment. ``torch_neuronx``
#: is not among them: it is the TorchNeuron plugin itself (only its XLA-era APIs are old).
OLD_STACK_ROOTS = (
    "optimum.neuron",
    "torch_xla",
    "torch_neuron",
    "torch.neuron",
    "transformers_neuronx",
    "neuronx_distributed",
    "neuronx_distributed_training",
    "neuronx_distributed_inference",
    "libneuronxla",
)

#: names IPython defines in every notebook
NOTEBOOK_BUILTINS = ("display", "get_ipython", "In", "Out", "exit", "quit")
#: the statements the notebook engine joins a notebook's cells with (migrator.filekinds.notebook)
ENGINE_NAMES = (CELL_BOUNDARY, SKIPPED_CELL)


@dataclass(frozen=True)
class Violation:
    """One thing in a program that does not hold on the target stack.

    ``name``: the undefined name, the import (``module`` or ``module:name``), the call and keyword
    (``qualified.callable(keyword=)``) or the old-stack module. ``part``: index of the program part
    (a notebook's code cell among the parts checked); ``line``: 1-based within that part.
    """

    kind: str
    name: str
    line: int
    part: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.kind, self.name)

    def describe(self) -> str:
        if self.kind == UNDEFINED:
            return f"`{self.name}` would be undefined"
        if self.kind == UNRESOLVED:
            module, _, name = self.name.partition(":")
            what = f"`from {module} import {name}`" if name else f"`import {module}`"
            return f"{what} does not resolve in the pinned target versions"
        if self.kind == KEYWORD:
            return f"`{self.name}` is not accepted by the target library"
        return f"`import {self.name}` (old stack) would stay without a marker"


def introduced(before: Iterable[Violation], after: Iterable[Violation]) -> list[Violation]:
    """The violations of ``after`` that ``before`` did not have (counted per kind and name, so that
    lines moved by the edits do not matter). A name undefined before counts as undefined already,
    however often an edit uses it: the edit did not break it."""
    before = list(before)
    left = Counter(v.key for v in before)
    undefined = {v.name for v in before if v.kind == UNDEFINED}
    out = []
    for v in after:
        if v.kind == UNDEFINED and v.name in undefined:
            continue
        if left[v.key] > 0:
            left[v.key] -= 1
        else:
            out.append(v)
    return out


def check_source(source: str) -> list[Violation]:
    """The violations of one Python module."""
    return check_program([source])


def check_program(parts: Sequence[str], notebook: bool = False) -> list[Violation]:
    """The violations of a program made of ``parts`` run in order in one namespace (a notebook's
    code cells; a plain module is one part). A part that does not parse is left out."""
    trees: list[tuple[int, ast.Module, list[str]]] = []
    for i, part in enumerate(parts):
        try:
            trees.append((i, ast.parse(part), part.splitlines()))
        except (SyntaxError, ValueError, RecursionError):
            continue
    if not trees:
        return []
    out: list[Violation] = []
    out += _undefined(trees, notebook)
    api = _target_api()
    for index, tree, lines in trees:
        imports = _Imports(tree)
        out += _old_stack(index, tree, lines)
        if api is not None:
            out += _unresolved(index, imports, api)
    if api is not None:
        merged = _Imports.program([t for _, t, _ in trees])
        for index, tree, _ in trees:
            out += _keywords(index, tree, merged, api)
    return out


# ------------------------------------------------------------------ names


def _undefined(trees: list[tuple[int, ast.Module, list[str]]], notebook: bool) -> list[Violation]:
    from pyflakes import checker, messages

    offsets: list[tuple[int, int]] = []  # (first line in the joined program, part index)
    body: list[ast.stmt] = []
    line = 0
    for index, tree, lines in trees:
        if line:
            ast.increment_lineno(tree, line)
        offsets.append((line, index))
        body.extend(tree.body)
        line += max(len(lines), 1) + 1
    program = ast.Module(body=body, type_ignores=[])
    builtins = set(ENGINE_NAMES) | (set(NOTEBOOK_BUILTINS) if notebook else set())
    found = checker.Checker(program, filename="<unit>", builtins=builtins).messages
    out = []
    for msg in found:
        if isinstance(msg, (messages.UndefinedName, messages.UndefinedLocal)):
            start, index = max((o for o in offsets if o[0] < msg.lineno), default=(0, trees[0][0]))
            out.append(Violation(UNDEFINED, str(msg.message_args[0]), msg.lineno - start, index))
    # the trees were shifted in place: shift them back for the callers that read lines
    for (start, _), (_, tree, _) in zip(offsets, trees):
        if start:
            ast.increment_lineno(tree, -start)
    return out


# ------------------------------------------------------------------ imports


def is_old_stack(module: str) -> bool:
    """Whether ``module`` (or a name in it) belongs to a package of the old stack."""
    return any(module == r or module.startswith(r + ".") for r in OLD_STACK_ROOTS)


class _Imports:
    """Every import of a module, and the local names they bind to qualified names."""

    def __init__(self, tree: ast.Module) -> None:
        #: (statement, module, name or None, guarded by an ImportError handler)
        self.items: list[tuple[ast.stmt, str, str | None, bool]] = []
        self.local: dict[str, str] = {}
        self._walk(tree.body, False)
        #: names also bound otherwise (assigned, defined, parameters): calls through them are not resolved
        self.rebound: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                self.rebound.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.rebound.add(node.name)
            elif isinstance(node, ast.arg):
                self.rebound.add(node.arg)

    @classmethod
    def program(cls, trees: list[ast.Module]) -> "_Imports":
        merged = cls(ast.Module(body=[], type_ignores=[]))
        for tree in trees:
            part = cls(tree)
            merged.items += part.items
            merged.rebound |= part.rebound
            for k, v in part.local.items():
                merged.local.setdefault(k, v)
        return merged

    def _walk(self, body: list[ast.stmt], guarded: bool) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.items.append((node, a.name, None, guarded))
                    if a.asname:
                        self.local.setdefault(a.asname, a.name)
                    else:
                        root = a.name.split(".")[0]
                        self.local.setdefault(root, root)
            elif isinstance(node, ast.ImportFrom):
                if node.level or not node.module:
                    continue
                for a in node.names:
                    self.items.append((node, node.module, a.name, guarded))
                    if a.name != "*":
                        self.local.setdefault(a.asname or a.name, f"{node.module}.{a.name}")
            elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                catches = any(_catches_import_error(h) for h in node.handlers)
                self._walk(node.body, guarded or catches)
                for h in node.handlers:
                    self._walk(h.body, guarded)
                self._walk(node.orelse, guarded)
                self._walk(node.finalbody, guarded)
            else:
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                        self._walk(inner, guarded)
                for case in getattr(node, "cases", ()) or ():
                    self._walk(case.body, guarded)

    def resolve(self, expr: ast.expr) -> str | None:
        parts: list[str] = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name) or expr.id in self.rebound:
            return None
        root = self.local.get(expr.id)
        if root is None:
            return None
        return ".".join([root, *reversed(parts)])


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        isinstance(n, (ast.Name, ast.Attribute))
        and (n.id if isinstance(n, ast.Name) else n.attr) in ("ImportError", "ModuleNotFoundError", "Exception", "BaseException")
        for n in names
    )


def _marked(lines: list[str], stmt: ast.stmt) -> bool:
    """A marker (or an ignore comment) on the statement's lines or in the comments right above it."""
    end = getattr(stmt, "end_lineno", None) or stmt.lineno
    for ln in range(stmt.lineno, end + 1):
        text = lines[ln - 1] if ln - 1 < len(lines) else ""
        if MARKER_RE.search(text) or ignored_rules(text) is not None:
            return True
    ln = stmt.lineno - 1
    while ln >= 1 and lines[ln - 1].lstrip().startswith("#"):
        if MARKER_RE.search(lines[ln - 1]):
            return True
        ln -= 1
    return False


def _old_stack(index: int, tree: ast.Module, lines: list[str]) -> list[Violation]:
    out = []
    for stmt, module, name, guarded in _Imports(tree).items:
        full = module if name is None or name == "*" else f"{module}.{name}"
        if guarded or not (is_old_stack(module) or is_old_stack(full)):
            continue
        if _marked(lines, stmt):
            continue
        out.append(Violation(OLD_STACK, module, stmt.lineno, index))
    return out


def _target_api():
    try:
        from migrator.selfcheck.targetapi import api
    except ImportError:  # pragma: no cover - the data module is part of the package
        return None
    return api()


def _unresolved(index: int, imports: _Imports, api) -> list[Violation]:
    out = []
    for stmt, module, name, guarded in imports.items:
        if guarded or not api.is_target(module):
            continue
        if name is None:
            if api.module_exists(module) is False:
                out.append(Violation(UNRESOLVED, module, stmt.lineno, index))
        elif name != "*" and api.name_exists(module, name) is False:
            out.append(Violation(UNRESOLVED, f"{module}:{name}", stmt.lineno, index))
    return out


# ------------------------------------------------------------------ keywords


def _keywords(index: int, tree: ast.Module, imports: _Imports, api) -> list[Violation]:
    out = []
    for scope in _scopes(tree):
        dicts = _literal_dicts(scope)
        for node in _walk_scope(scope):
            if not isinstance(node, ast.Call):
                continue
            qual = imports.resolve(node.func)
            if qual is None or not api.is_target(qual):
                continue
            for kw in node.keywords:
                if kw.arg is not None:
                    names = [kw.arg]
                elif isinstance(kw.value, ast.Name) and kw.value.id in dicts:
                    names = dicts[kw.value.id]
                elif isinstance(kw.value, ast.Dict):
                    names = _dict_keys(kw.value) or []
                else:
                    names = []
                for name in names:
                    if api.accepts(qual, name) is False:
                        out.append(Violation(KEYWORD, f"{qual}({name}=)", node.lineno, index))
    return out


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _scopes(tree: ast.Module) -> list[ast.AST]:
    return [tree, *(n for n in ast.walk(tree) if isinstance(n, _SCOPES))]


def _walk_scope(scope: ast.AST):
    """The nodes of one scope, not those of the scopes nested in it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, _SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def _dict_keys(node: ast.expr) -> list[str] | None:
    if isinstance(node, ast.Dict):
        if all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys):
            return [k.value for k in node.keys]  # type: ignore[union-attr]
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        if all(k.arg is not None for k in node.keywords):
            return [k.arg for k in node.keywords]  # type: ignore[misc]
    return None


def _literal_dicts(scope: ast.AST) -> dict[str, list[str]]:
    """Names assigned exactly once in the scope, to a dict literal with string keys."""
    seen: dict[str, list[str] | None] = {}
    for node in _walk_scope(scope):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            seen[name] = None if name in seen else _dict_keys(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
            seen[node.target.id] = None
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name):
            seen[node.value.id] = None  # d["k"] = v: keys beyond the literal
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
                and isinstance(node.func.value, ast.Name):
            seen[node.func.value.id] = None
    return {k: v for k, v in seen.items() if v is not None}
