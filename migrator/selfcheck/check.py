"""The checks: one program in, its violations out (see the package docstring)."""

from __future__ import annotations

import ast
import builtins
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Collection, Iterable, Sequence

from migrator.model import CELL_BOUNDARY, MARKER_RE, SKIPPED_CELL, UNPARSABLE, ignored_rules, is_old_stack

UNDEFINED = "undefined-name"
UNRESOLVED = "unresolved-import"
KEYWORD = "unaccepted-keyword"
OLD_STACK = "old-stack-import"
#: a part that does not parse: nothing else can be checked in it, and nothing that does not parse is handed back
SYNTAX = "syntax-error"

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
        if self.kind == SYNTAX:
            return f"it {UNPARSABLE}"
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


def check_source(source: str, names: Collection[str] | None = None) -> list[Violation]:
    """The violations of one Python module (``names``: see :func:`check_program`)."""
    return check_program([source], names=names)


def check_program(parts: Sequence[str], notebook: bool = False,
                  names: Collection[str] | None = None) -> list[Violation]:
    """The violations of a program made of ``parts`` run in order in one namespace (a notebook's
    code cells; a plain module is one part). A part that does not parse is one SYNTAX violation
    and is otherwise left out.

    ``names``: when the caller knows that only these names can have become undefined (those an edit
    used or unbound), the undefined-name analysis runs only if one of them is not plainly bound."""
    trees: list[tuple[int, ast.Module, list[str]]] = []
    broken: list[Violation] = []
    for i, part in enumerate(parts):
        tree = parse(part)
        if isinstance(tree, ast.Module):
            trees.append((i, tree, part.splitlines()))
        else:
            broken.append(Violation(SYNTAX, "", tree, i))
    if not trees:
        return broken
    scans = [_Scan(tree, index) for index, tree, _ in trees]
    merged = _Scan.program(scans) if len(scans) > 1 else scans[0]
    out: list[Violation] = []
    if names is None or not _safely_bound(names, merged):
        out += _undefined(trees, notebook)
        out += [v for v in _unreached(trees) if v not in out]  # pyflakes sees the uses above the import
    api = _target_api()
    for (index, _, lines), scan in zip(trees, scans):
        out += _old_stack(index, scan, lines)
        if api is not None:
            out += _unresolved(index, scan, api)
    if api is not None:
        for (index, _, _), scan in zip(trees, scans):
            out += _keywords(index, scan, merged, api)
    return broken + out


_AWAIT_FLAGS = ast.PyCF_ONLY_AST | getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)


def parse(source: str) -> ast.Module | int:
    """The tree of ``source``, or the line of its syntax error (a notebook cell's top-level
    ``await`` parses)."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        first = exc
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return compile(source, "<unit>", "exec", flags=_AWAIT_FLAGS, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return max(getattr(first, "lineno", None) or 1, 1)


def parses(source: str) -> bool:
    """Whether ``source`` parses as Python (see :func:`parse`)."""
    return isinstance(parse(source), ast.Module)


def _safely_bound(names: Collection[str], scan: _Scan) -> bool:
    """Whether none of ``names`` can be undefined: each is read nowhere, a builtin, or bound at module
    level and in no nested scope (where a use before a local binding would be an error), by a
    top-level statement above its first read (a notebook runs its cells top to bottom: a name
    imported only in a later cell is undefined where an earlier one reads it). Then pyflakes need
    not run: the edits that could have left a name undefined only use or unbind these ``names``."""
    return all(
        n not in scan.loaded or n in _BUILTINS
        or (n in scan.module_bound and n not in scan.nested_bound and n in scan.top_bound
            and scan.top_bound[n] < scan.loaded[n])
        for n in names
    )


_BUILTINS = frozenset(dir(builtins))


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


def _top_level_names(body: list[ast.stmt], part: int = 0) -> dict[str, tuple[int, int]]:
    """The names bound by a statement of the module's top level, each with (``part``, the line of
    the first such statement)."""
    out: dict[str, tuple[int, int]] = {}
    for stmt in body:
        where = (part, stmt.lineno)
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for a in stmt.names:
                out.setdefault(a.asname or a.name.split(".")[0], where)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.setdefault(stmt.name, where)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]):
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out.setdefault(n.id, where)
    return out


#: the parts of a compound statement that run whenever the statement does
_ALWAYS = {"With": ("body",), "AsyncWith": ("body",), "Try": ("body", "orelse", "finalbody"),
           "TryStar": ("body", "orelse", "finalbody")}
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _unreached(trees: list[tuple[int, ast.Module, list[str]]]) -> list[Violation]:
    """Names read where none of their imports has run: the only imports of the name sit in a sibling
    branch (``if a: from m import X`` / ``else: X(...)``), another function, a loop body or a handler
    that does not enclose the read. pyflakes counts a binding anywhere in the scope; this is the case it
    cannot see. Only names bound by imports alone are judged (assignments are left to pyflakes); an
    ``if`` whose every branch imports the name binds it.

    A notebook runs its cells top to bottom (its program has ``__nm_cell__(k)`` statements between
    them): a name read anywhere in a cell, in a function body too (the cell may call it), whose every
    import is in a later cell is undefined there."""
    imports: dict[str, list[tuple[tuple, int | None, int]]] = {}  # name -> (chain, function id, cell) per import
    reads: list[tuple[str, tuple, tuple[int, ...], int, int, int]] = []
    cell = 0  # the notebook cell being walked (counted by the boundary statements)
    other: set[str] = set()
    nodes: dict[int, ast.AST] = {}  # the compound statements of the chains, by id()

    def walk(node: ast.AST, chain: tuple, scopes: tuple[int, ...], part: int) -> None:
        t = type(node)
        if t is ast.Name:
            if isinstance(node.ctx, ast.Load):
                reads.append((node.id, chain, scopes, node.lineno, part, cell))
            else:
                other.add(node.id)
            return
        if t is ast.Import or t is ast.ImportFrom:
            for a in node.names:
                if a.name != "*":
                    local = a.asname or a.name.split(".")[0]
                    imports.setdefault(local, []).append((chain, scopes[-1] if scopes else None, cell))
            return
        if t in (ast.Global, ast.Nonlocal):
            other.update(node.names)
            return
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            if t is not ast.Lambda:
                other.add(node.name)
                for d in node.decorator_list:
                    walk(d, chain, scopes, part)
            if t is ast.ClassDef:
                for b in (*node.bases, *node.keywords):
                    walk(b, chain, scopes, part)
                for child in node.body:
                    walk(child, chain + ((id(node), "body"),), scopes, part)
                return
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
                if arg is not None:
                    other.add(arg.arg)
            for default in (*a.defaults, *a.kw_defaults):
                if default is not None:
                    walk(default, chain, scopes, part)
            inner = chain + ((id(node), "body"),)
            for child in (node.body if isinstance(node.body, list) else [node.body]):
                walk(child, inner, scopes + (id(node),), part)
            return
        if t is ast.ExceptHandler and node.name:
            other.add(node.name)
        if t is ast.arg or t is ast.Constant:
            return
        for field, value in ast.iter_fields(node):
            if field in ("annotation", "returns"):
                continue  # not evaluated under ``from __future__ import annotations``; left to pyflakes
            if isinstance(value, list):
                if value and isinstance(value[0], ast.stmt):
                    nodes[id(node)] = node
                    inner = chain + ((id(node), field),)
                    for child in value:
                        walk(child, inner, scopes, part)
                else:
                    for child in value:
                        if isinstance(child, ast.AST):
                            walk(child, chain, scopes, part)
            elif isinstance(value, ast.AST):
                walk(value, chain, scopes, part)

    for index, tree, _ in trees:
        for stmt in tree.body:
            if _is_boundary(stmt):
                cell += 1
            walk(stmt, (), (), index)
    judged = {n for n in imports if n not in other}
    if not judged:
        return []
    out = []
    seen: set[tuple[str, int, int]] = set()
    for name, chain, scopes, line, part, at in reads:
        if name not in judged:
            continue
        found = imports[name]
        if any(f[2] <= at for f in found):  # else every import is in a later cell
            # the innermost function around the read that imports the name itself; else the module
            scope = next((s for s in reversed(scopes) if any(f[1] == s for f in found)), None)
            candidates = [c for c, s, _ in found if s == scope]
            if not candidates or any(_reaches(c, chain, name, nodes) for c in candidates):
                continue
            if scope is None and scopes and any(_guarded(c, nodes) for c in candidates):
                continue  # the optional-import idiom: `if HAS_X: import X` at module level, X read in a function
        if (name, line, part) not in seen:
            seen.add((name, line, part))
            out.append(Violation(UNDEFINED, name, line, part))
    return out


def _is_boundary(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` is the statement a notebook's program has between two cells (``__nm_cell__(k)``)."""
    return (type(stmt) is ast.Expr and type(stmt.value) is ast.Call and type(stmt.value.func) is ast.Name
            and stmt.value.func.id == CELL_BOUNDARY)


def _reaches(binding: tuple, use: tuple, name: str, nodes: dict[int, ast.AST]) -> bool:
    """Whether an import at ``binding`` (its chain of (compound statement, part) pairs) has run before a
    read at ``use``: every part around the import encloses the read, always runs, or is a branch of an
    ``if`` whose every branch imports the name."""
    inside = set(use)
    for step in binding:
        if step in inside:
            continue
        node = nodes.get(step[0])
        if node is None:
            return False
        if step[1] in _ALWAYS.get(type(node).__name__, ()):
            continue
        if isinstance(node, ast.If) and _every_branch_imports(node, name):
            continue
        return False
    return True


def _guarded(binding: tuple, nodes: dict[int, ast.AST]) -> bool:
    """Whether an import's chain is only the bodies of ``if`` statements without an ``else`` (an availability
    guard): a function that reads the name runs later, when the code that calls it has checked the guard."""
    return bool(binding) and all(
        isinstance(node := nodes.get(step[0]), ast.If) and step[1] == "body" and not node.orelse for step in binding)


def _every_branch_imports(node: ast.If, name: str) -> bool:
    def imports(body: list[ast.stmt]) -> bool:
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)) and any(
                    (a.asname or a.name.split(".")[0]) == name for a in stmt.names):
                return True
            if isinstance(stmt, ast.If) and _every_branch_imports(stmt, name):
                return True
        return False

    return bool(node.orelse) and imports(node.body) and imports(node.orelse)


# ------------------------------------------------------------------ imports


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
#: per node type, the fields that may hold nodes (``ast.iter_child_nodes`` is the walk's main cost)
_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(t: type) -> tuple[str, ...]:
    found = _FIELDS[t] = tuple(f for f in t._fields if f not in ("ctx", "type_comment", "kind"))
    return found


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class _Scan:
    """One walk over a module: its imports (and the qualified names they bind), the calls (with the
    scope each is in), and where names are bound (module level, or in a nested scope)."""

    def __init__(self, tree: ast.Module, part: int = 0) -> None:
        self.part = part
        #: (statement, module, name or None, guarded by an ImportError handler)
        self.items: list[tuple[ast.stmt, str, str | None, bool]] = []
        self.local: dict[str, str] = {}
        #: names bound other than by an import (assigned, defined, parameters): calls through them are
        #: not resolved
        self.rebound: set[str] = set()
        #: names bound at module level / inside functions, classes, lambdas and comprehensions
        self.module_bound: set[str] = set()
        self.nested_bound: set[str] = set()
        #: names read somewhere, each with (part, line) of its first read
        self.loaded: dict[str, tuple[int, int]] = {}
        self.calls: list[tuple[ast.Call, ast.AST]] = []
        #: names bound by a statement of the module's top level (not inside an ``if``, loop, ...), each
        #: with (part, line) of the first such statement
        self.top_bound: dict[str, tuple[int, int]] = _top_level_names(tree.body, part)
        self._visit(tree, tree, False)

    @classmethod
    def program(cls, scans: list[_Scan]) -> _Scan:
        merged = cls(ast.Module(body=[], type_ignores=[]))
        for part in scans:
            merged.items += part.items
            merged.rebound |= part.rebound
            merged.module_bound |= part.module_bound
            merged.nested_bound |= part.nested_bound
            for name, where in part.loaded.items():
                merged.loaded.setdefault(name, where)  # the parts come in order
            for name, where in part.top_bound.items():
                merged.top_bound.setdefault(name, where)
            for k, v in part.local.items():
                merged.local.setdefault(k, v)
        return merged

    def _bind(self, name: str, scope: ast.AST, imported: bool = False, comp: bool = False) -> None:
        (self.module_bound if isinstance(scope, ast.Module) and not comp else self.nested_bound).add(name)
        if not imported:
            self.rebound.add(name)

    def _visit(self, node: ast.AST, scope: ast.AST, guarded: bool, comp: bool = False) -> None:
        """``scope``: the module, function, class or lambda around ``node``; ``comp``: inside a comprehension."""
        t = type(node)
        if t is ast.Name:
            if isinstance(node.ctx, ast.Load):
                where, first = (self.part, node.lineno), self.loaded.get(node.id)
                if first is None or where < first:
                    self.loaded[node.id] = where
            else:
                self._bind(node.id, scope, comp=comp)
            return
        if t is ast.Import:
            for a in node.names:
                self.items.append((node, a.name, None, guarded))
                local = a.asname or a.name.split(".")[0]
                self.local.setdefault(local, a.name if a.asname else local)
                self._bind(local, scope, imported=True)
            return
        if t is ast.ImportFrom:
            for a in node.names:
                if a.name == "*":
                    if node.module and not node.level:
                        self.items.append((node, node.module, a.name, guarded))
                    continue
                local = a.asname or a.name
                self._bind(local, scope, imported=True)
                if node.module and not node.level:
                    self.items.append((node, node.module, a.name, guarded))
                    self.local.setdefault(local, f"{node.module}.{a.name}")
            return
        if t is ast.Call:
            self.calls.append((node, scope))
        elif t in (ast.Global, ast.Nonlocal):
            self.nested_bound.update(node.names)
        elif isinstance(node, _SCOPES):
            if t is not ast.Lambda:
                self._bind(node.name, scope)
                for d in node.decorator_list:
                    self._visit(d, scope, guarded)
            if t is not ast.ClassDef:
                a = node.args
                for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
                    if arg is not None:
                        self._bind(arg.arg, node)
                for default in (*a.defaults, *a.kw_defaults):
                    if default is not None:
                        self._visit(default, scope, guarded)  # evaluated in the enclosing scope
                body = node.body if isinstance(node.body, list) else [node.body]
            else:
                for b in (*node.bases, *node.keywords):
                    self._visit(b, scope, guarded)
                body = node.body
            for child in body:
                self._visit(child, node, guarded)
            return
        elif t in _COMPREHENSIONS:
            comp = True  # its targets are its own
        elif t is ast.Try or t.__name__ == "TryStar":
            catches = any(_catches_import_error(h) for h in node.handlers)
            for child in node.body:
                self._visit(child, scope, guarded or catches)
            for child in (*node.handlers, *node.orelse, *node.finalbody):
                self._visit(child, scope, guarded)
            return
        elif t is ast.ExceptHandler and node.name:
            self._bind(node.name, scope)
        elif t is ast.Constant:
            return
        for field in _FIELDS.get(t) or _fields(t):
            value = getattr(node, field)
            if type(value) is list:
                for child in value:
                    if isinstance(child, ast.AST):
                        self._visit(child, scope, guarded, comp)
            elif isinstance(value, ast.AST):
                self._visit(value, scope, guarded, comp)

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


def marked(lines: list[str], stmt: ast.stmt, end: int | None = None) -> bool:
    """A marker (or an ignore comment) on the statement's lines (up to line ``end``: the header of a
    compound statement) or in the comments right above it."""
    end = end or getattr(stmt, "end_lineno", None) or stmt.lineno
    if any(ignored_rules(lines[ln - 1] if ln - 1 < len(lines) else "") is not None for ln in range(stmt.lineno, end + 1)):
        return True
    return bool(markers_on(lines, stmt, end))


def markers_on(lines: list[str], stmt: ast.stmt, end: int | None = None) -> list[str]:
    """The texts of the markers on the statement's lines (up to line ``end``) and in the comments right above it."""
    end = end or getattr(stmt, "end_lineno", None) or stmt.lineno
    found = []
    for ln in range(stmt.lineno, end + 1):
        m = MARKER_RE.search(lines[ln - 1] if ln - 1 < len(lines) else "")
        if m:
            found.append(m.group(2))
    ln = stmt.lineno - 1
    while ln >= 1 and lines[ln - 1].lstrip().startswith("#"):
        m = MARKER_RE.search(lines[ln - 1])
        if m:
            found.append(m.group(2))
        ln -= 1
    return found


def _old_stack(index: int, scan: _Scan, lines: list[str]) -> list[Violation]:
    out = []
    for stmt, module, name, guarded in scan.items:
        full = module if name is None or name == "*" else f"{module}.{name}"
        if guarded or not (is_old_stack(module) or is_old_stack(full)):
            continue
        if marked(lines, stmt):
            continue
        out.append(Violation(OLD_STACK, module, stmt.lineno, index))
    return out


def _target_api():
    try:
        from migrator.selfcheck.targetapi import api
    except ImportError:  # pragma: no cover - the data module is part of the package
        return None
    return api()


def _unresolved(index: int, scan: _Scan, api) -> list[Violation]:
    out = []
    for stmt, module, name, guarded in scan.items:
        if guarded or not api.is_target(module):
            continue
        if name is None:
            if api.module_exists(module) is False:
                out.append(Violation(UNRESOLVED, module, stmt.lineno, index))
        elif name != "*" and api.name_exists(module, name) is False:
            out.append(Violation(UNRESOLVED, f"{module}:{name}", stmt.lineno, index))
    return out


# ------------------------------------------------------------------ keywords


def _keywords(index: int, scan: _Scan, program: _Scan, api) -> list[Violation]:
    """Literal keywords (and the keys of ``**name`` whose dict literal is in the same scope) of the calls
    of ``scan`` whose callee resolves, through the imports of the ``program``, to a target callable."""
    out = []
    dicts: dict[int, dict[str, list[str]]] = {}
    for node, scope in scan.calls:
        if not node.keywords:
            continue
        qual = program.resolve(node.func)
        if qual is None or not api.is_target(qual):
            continue
        for kw in node.keywords:
            if kw.arg is not None:
                names = [kw.arg]
            elif isinstance(kw.value, ast.Name):
                if id(scope) not in dicts:
                    dicts[id(scope)] = _literal_dicts(scope)
                names = dicts[id(scope)].get(kw.value.id, [])
            elif isinstance(kw.value, ast.Dict):
                names = _dict_keys(kw.value) or []
            else:
                names = []
            for name in names:
                if api.accepts(qual, name) is False:
                    out.append(Violation(KEYWORD, f"{qual}({name}=)", node.lineno, index))
    return out


def _walk_scope(scope: ast.AST):
    """The nodes of one scope, not those of the scopes nested in it (comprehensions included)."""
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
