"""Import resolution (once per module, shared by every rule) and the import fix-up.

Resolution walks statements only (never expressions), so it costs little next to
the parse. It maps every name bound by an import to its qualified name:

    import optimum.neuron as on                 on       -> optimum.neuron
    from optimum import neuron                  neuron   -> optimum.neuron
    from optimum.neuron import NeuronTrainer as T   T    -> optimum.neuron.NeuronTrainer
    import optimum.neuron                       optimum  -> optimum

The fix-up runs once after every rule's edits were applied: it drops import
aliases that became dead (or that a rule asked to drop) and inserts the imports
rules asked for, in place of the import they replace when there is one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

import libcst as cst

from migrator.model import CELL_BOUNDARY, MARKER_PREFIX, SKIPPED_CELL, is_old_stack
from migrator.tree import one_branch, without_effects


def dotted(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def catches_import_error(handler: cst.ExceptHandler) -> bool:
    """Whether an ``except`` clause catches ImportError (bare, ImportError, ModuleNotFoundError, Exception)."""
    kinds = handler.type
    if kinds is None:
        return True
    names = [e.value for e in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
    return any((n.value if isinstance(n, cst.Name) else n.attr.value if isinstance(n, cst.Attribute) else "")
               in ("ImportError", "ModuleNotFoundError", "Exception") for n in names)


def import_gate(ancestors) -> cst.Try | None:
    """The ``try`` statement whose body holds a statement directly (``ancestors``: the statement's,
    root first) and one of whose handlers catches ImportError: an availability gate, whose imports
    decide which branch runs. None otherwise."""
    if len(ancestors) < 2 or not isinstance(ancestors[-1], cst.IndentedBlock):
        return None
    gate = ancestors[-2]
    if not isinstance(gate, cst.Try) or gate.body is not ancestors[-1]:
        return None
    return gate if any(catches_import_error(h) for h in gate.handlers) else None


def falls_back(gate: cst.Try) -> bool:
    """Whether a handler of the gate that catches ImportError does something other than ``pass``,
    re-raising or a bare expression (a log line), or importing the same old stack from another module path
    (:func:`old_stack_alternative`): the gate then chooses between two code paths (a device switch), rather
    than only tolerating a missing optional import."""
    for handler in gate.handlers:
        if not catches_import_error(handler):
            continue
        body = handler.body.body
        if all(isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, (cst.Pass, cst.Raise, cst.Expr))
                                                              for x in s.body) for s in body):
            continue
        if _old_stack_imports_only(body):
            continue
        return True
    return False


def old_stack_alternative(gate: cst.Try) -> bool:
    """Whether every ImportError handler of the ``try`` only imports old-stack modules: the same old-stack code
    from another module path (``try: from neuronxcc.nki._private_kernels import k`` / ``except ImportError:
    from neuronxcc.nki.kernels import k``), not a choice between the old stack and something else."""
    handlers = [h for h in gate.handlers if catches_import_error(h)]
    return bool(handlers) and all(_old_stack_imports_only(h.body.body) for h in handlers)


def _old_stack_imports_only(body) -> bool:
    modules = []
    for s in body:
        if not isinstance(s, cst.SimpleStatementLine):
            return False
        for x in s.body:
            if isinstance(x, cst.Import):
                modules += [dotted(a.name) or "" for a in x.names]
            elif isinstance(x, cst.ImportFrom) and x.module is not None and not x.relative:
                modules.append(dotted(x.module) or "")
            else:
                return False
    return bool(modules) and all(is_old_stack(m) or m.startswith("neuronxcc") for m in modules)


def build_dotted(path: str) -> cst.BaseExpression:
    parts = path.split(".")
    expr: cst.BaseExpression = cst.Name(parts[0])
    for p in parts[1:]:
        expr = cst.Attribute(value=expr, attr=cst.Name(p))
    return expr


@dataclass(eq=False)
class Binding:
    """One name bound by one import alias."""

    local: str
    qualified: str
    alias: cst.ImportAlias | None  # None for `from x import *`
    statement: cst.Import | cst.ImportFrom
    line: cst.SimpleStatementLine
    toplevel: bool
    is_from: bool
    #: id() of the nodes a use must be inside for this import to have run before it: the branch of an
    #: ``if``, the body of a loop, a handler, a function or class body around the import (``with``
    #: bodies, ``try`` bodies and ``finally`` always run). Empty for a module-level import.
    required: tuple[int, ...] = ()
    #: the index of the top-level statement that holds the import among the module's statements, and
    #: the index of every top-level statement (by id()): a module runs top to bottom (a notebook's
    #: cells too), so an import below the top-level statement of a use has not run there
    top: int | None = None
    order: dict[int, int] | None = None

    def reaches(self, enclosing: set[int]) -> bool:
        """Whether the import has run wherever a use inside the nodes ``enclosing`` (their id()s) runs:
        the use is inside every node around the import, and not in a top-level statement above it."""
        if not all(r in enclosing for r in self.required):
            return False
        if self.top is None or not self.order:
            return True
        use = next((self.order[i] for i in enclosing if i in self.order), None)
        return use is None or use >= self.top

    @property
    def module(self) -> str:
        """The module the binding was imported from (``from M import x`` / ``import M``)."""
        if self.is_from:
            return self.qualified.rsplit(".", 1)[0]
        return self.qualified


def reaching(bindings: Sequence[Binding], enclosing: set[int]) -> Binding:
    """Which of the imports of one name a use inside the nodes ``enclosing`` reads: the innermost one that
    has run there, of those at one level the last (a notebook cell importing again what an earlier cell
    did); the first one when none has (the use reads a name the original left undefined too)."""
    found = [b for b in bindings if b.reaches(enclosing)]
    return max(found, key=lambda b: (len(b.required), -1 if b.top is None else b.top)) if found else bindings[0]


@dataclass
class ImportIndex:
    bindings: dict[str, list[Binding]] = field(default_factory=dict)
    #: names defined at module level other than by imports (defs, classes, assignments)
    defined: set[str] = field(default_factory=set)
    star_imports: list[Binding] = field(default_factory=list)
    #: the last top-level statement of the module's leading import block (or docstring/__future__)
    header_end: cst.CSTNode | None = None
    #: id() of the compound statements with no import statement inside (the fix-up skips them)
    import_free: set[int] = field(default_factory=set)
    #: the first name of the first top-level import line after ``__future__`` ones: an anchor that puts
    #: a new (stdlib) import above the module's imports
    first_import: Binding | None = None
    #: id() of each top-level statement -> its index (see ``Binding.top``); the index of the one being indexed
    order: dict[int, int] = field(default_factory=dict)
    current: int | None = None
    #: the id()s of the nodes around the node being handled (set by the rule context): which of a name's
    #: imports a use reads (:meth:`binding_of`)
    around: Callable[[], set[int]] | None = None

    def resolve_name(self, name: str) -> str | None:
        found = self.bindings.get(name)
        if not found:
            return None
        return found[0].qualified

    def resolve(self, node: cst.BaseExpression) -> str | None:
        """Qualified name of a Name/Attribute chain whose root is an imported name."""
        if isinstance(node, cst.Name):
            return self.resolve_name(node.value)
        if isinstance(node, cst.Attribute):
            base = self.resolve(node.value)
            if base is not None:
                return f"{base}.{node.attr.value}"
        return None

    def binding_of(self, expr: cst.BaseExpression) -> Binding | None:
        """The import binding of the name a Name/Attribute chain starts with (``xm`` of
        ``xm.mark_step``): new imports replacing that reference go in place of its import line."""
        while isinstance(expr, cst.Attribute):
            expr = expr.value
        if isinstance(expr, cst.Name):
            found = self.bindings.get(expr.value)
            if found:
                return reaching(found, self.around()) if self.around is not None and len(found) > 1 else found[0]
        return None

    def local_for(self, qualified: str, enclosing: set[int] | None = None) -> str | None:
        """A local name already bound to ``qualified`` (from any import); with ``enclosing`` (the id()s
        of the nodes around a use), only by an import that has run wherever that use runs (not one in a
        sibling branch or another function)."""
        b = self.binding_for(qualified, enclosing)
        return b.local if b is not None else None

    def binding_for(self, qualified: str, enclosing: set[int] | None = None) -> Binding | None:
        """The import behind :meth:`local_for`'s answer."""
        for bs in self.bindings.values():
            for b in bs:
                if b.qualified == qualified and (enclosing is None or b.reaches(enclosing)):
                    return b
        return None

    def is_free(self, name: str, qualified: str | None = None) -> bool:
        """True when ``name`` can be bound at module level without clashing."""
        if name in self.defined:
            return False
        bs = self.bindings.get(name)
        if not bs:
            return True
        return qualified is not None and all(b.qualified == qualified for b in bs)

    def all_bindings(self):
        for bs in self.bindings.values():
            yield from bs


def _module_name(node: cst.BaseExpression) -> str:
    return dotted(node) or ""


# a notebook's cell boundaries (CELL_BOUNDARY, SKIPPED_CELL, see migrator.model): like a bare
# ``pass`` (an IPython line kept out of the parser's way), they do not end the import header, so
# that new imports go after the imports of the notebook's first cells rather than above its first
# ``%pip install`` line


def _header_neutral(stmt: cst.CSTNode) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, cst.Pass):
            continue
        if (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
                and isinstance(small.value.func, cst.Name)
                and small.value.func.value in (CELL_BOUNDARY, SKIPPED_CELL)):
            continue
        return False
    return True


def _cell_boundary(stmt: cst.CSTNode) -> bool:
    """A notebook program's statement that starts a cell (``__nm_cell__(k)``)."""
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, cst.Call) and isinstance(stmt.body[0].value.func, cst.Name)
            and stmt.body[0].value.func.value == CELL_BOUNDARY)


def index_imports(module: cst.Module) -> ImportIndex:
    index = ImportIndex(order={id(stmt): pos for pos, stmt in enumerate(module.body)})
    leading = True
    neutral: cst.CSTNode | None = None  # the last header-neutral statement of the leading ones
    for pos, stmt in enumerate(module.body):
        is_header = False
        if leading and _header_neutral(stmt):
            neutral = stmt
            continue
        if isinstance(stmt, cst.SimpleStatementLine):
            small = stmt.body
            if all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in small):
                is_header = True
            elif pos == 0 and len(small) == 1 and isinstance(small[0], cst.Expr) and isinstance(
                small[0].value, (cst.SimpleString, cst.ConcatenatedString)
            ):
                is_header = True  # docstring
        if leading:
            if is_header:
                index.header_end = stmt
            else:
                leading = False
                if index.header_end is None and neutral is not None:
                    # no import before the first real statement: new imports go right above it
                    # (in a notebook: not above the `%pip install` line of its first cell)
                    index.header_end = neutral
        index.current = pos
        _index_statement(index, stmt, toplevel=True)
    return index


def _index_statement(index: ImportIndex, stmt: cst.CSTNode, toplevel: bool, required: tuple[int, ...] = ()) -> bool:
    """Index the imports of ``stmt`` (``required``: see ``Binding.required``); True when it is or
    contains an import statement."""
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    full = _module_name(alias.name)
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        local, qual = alias.asname.name.value, full
                    else:
                        local = full.split(".")[0]
                        qual = local
                    _bind(index, Binding(local, qual, alias, small, stmt, toplevel, False, required))
            elif isinstance(small, cst.ImportFrom):
                if small.relative or small.module is None:
                    continue
                mod = _module_name(small.module)
                if isinstance(small.names, cst.ImportStar):
                    index.star_imports.append(Binding("*", mod + ".*", None, small, stmt, toplevel, True, required))
                    continue
                for alias in small.names:
                    name = _module_name(alias.name)
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        local = alias.asname.name.value
                    else:
                        local = name
                    _bind(index, Binding(local, f"{mod}.{name}", alias, small, stmt, toplevel, True, required))
            elif toplevel and isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
                targets = (
                    [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                )
                for t in targets:
                    if isinstance(t, cst.Name):
                        index.defined.add(t.value)
        return any(isinstance(small, (cst.Import, cst.ImportFrom)) for small in stmt.body)
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and toplevel:
        index.defined.add(stmt.name.value)
    found = False
    for inside, block in _blocks(stmt):
        inner_required = required if inside is None else required + (id(inside),)
        for inner in block:
            found = _index_statement(index, inner, False, inner_required) or found
    if not found:
        index.import_free.add(id(stmt))
    return found


def _blocks(stmt: cst.CSTNode):
    """Statement sequences directly inside a compound statement, each with the node a later use must
    be inside for the sequence to have run (None: it runs whenever the statement does: ``with`` and
    ``try`` bodies, ``finally``, a ``try``'s ``else``)."""
    if isinstance(stmt, cst.If):
        if isinstance(stmt.body, cst.IndentedBlock):
            yield stmt.body, stmt.body.body
        if stmt.orelse is not None:
            if isinstance(stmt.orelse, cst.If):
                yield stmt.orelse, (stmt.orelse,)
            elif isinstance(stmt.orelse.body, cst.IndentedBlock):
                yield stmt.orelse, stmt.orelse.body.body
        return
    always = isinstance(stmt, (cst.With, cst.Try, cst.TryStar))
    body = getattr(stmt, "body", None)
    if isinstance(body, cst.IndentedBlock):
        yield (None if always else body), body.body
    for name in ("orelse", "finalbody"):
        part = getattr(stmt, name, None)
        if part is not None and isinstance(getattr(part, "body", None), cst.IndentedBlock):
            yield (None if always else part), part.body.body
    for handler in getattr(stmt, "handlers", ()) or ():
        if isinstance(handler.body, cst.IndentedBlock):
            yield handler, handler.body.body
    for case in getattr(stmt, "cases", ()) or ():
        if isinstance(case.body, cst.IndentedBlock):
            yield case, case.body.body


def _bind(index: ImportIndex, b: Binding) -> None:
    b.top, b.order = index.current, index.order
    index.bindings.setdefault(b.local, []).append(b)
    if index.first_import is None and b.toplevel and b.alias is not None and not (
            b.is_from and b.module == "__future__"):
        index.first_import = b


# --------------------------------------------------------------------------- fix-up


@dataclass(frozen=True)
class ImportRequest:
    module: str
    name: str | None  # None: `import module [as asname]`
    asname: str | None
    anchor: cst.SimpleStatementLine | None  # original line the new import replaces/precedes
    order: int = 0  # position of the replaced alias in the anchor line (keeps the file's order)


def _new_import_lines(requests: list[ImportRequest]) -> list[cst.SimpleStatementLine]:
    """Group requests into statements: one `from M import a, b` per module, in order."""
    lines: list[cst.SimpleStatementLine] = []
    from_groups: dict[str, list[ImportRequest]] = {}
    order: list[tuple[str, str]] = []
    for r in sorted(requests, key=lambda r: r.order):
        if r.name is None:
            key = ("import", f"{r.module} {r.asname}")
            if key not in order:
                order.append(key)
                from_groups[key[1]] = [r]
        else:
            key = ("from", r.module)
            if key not in order:
                order.append(key)
                from_groups[r.module] = []
            group = from_groups[r.module]
            if all((g.name, g.asname) != (r.name, r.asname) for g in group):
                group.append(r)
    for kind, key in order:
        if kind == "import":
            r = from_groups[key][0]
            alias = cst.ImportAlias(
                name=build_dotted(r.module),  # type: ignore[arg-type]
                asname=cst.AsName(name=cst.Name(r.asname)) if r.asname else None,
            )
            lines.append(cst.SimpleStatementLine(body=[cst.Import(names=[alias])]))
        else:
            group = from_groups[key]
            aliases = [
                cst.ImportAlias(
                    name=cst.Name(g.name),  # type: ignore[arg-type]
                    asname=cst.AsName(name=cst.Name(g.asname)) if g.asname and g.asname != g.name else None,
                )
                for g in group
            ]
            lines.append(
                cst.SimpleStatementLine(
                    body=[cst.ImportFrom(module=build_dotted(key), names=aliases)]  # type: ignore[arg-type]
                )
            )
    return lines


def _without_aliases(small: cst.BaseSmallStatement, drop: set[int]) -> cst.BaseSmallStatement | None:
    """The import statement without the aliases whose id() is in ``drop`` (None if empty)."""
    if not isinstance(small, (cst.Import, cst.ImportFrom)) or isinstance(small.names, cst.ImportStar):
        return small
    keep = [a for a in small.names if id(a) not in drop]
    if len(keep) == len(small.names):
        return small
    if not keep:
        return None
    parenthesized = isinstance(small, cst.ImportFrom) and small.lpar is not None
    if not parenthesized:
        keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return small.with_changes(names=keep)


#: a comment that names the old stack (what a comment heading its imports says)
_NAMES_OLD_STACK = re.compile(r"xla|neuron|\bxmp?\b|parallel[ _]loader", re.IGNORECASE)
#: a merged single-line `from M import ...` longer than this gets its own line instead
MERGE_MAX_LINE = 99
#: key of the requests placed after the module's import header (they have no anchor line)
TOP = -1


def _merge_target(stmt: cst.CSTNode, removals: set[int]) -> str | None:
    """The module of a `from M import a, b` line new names of M may join (one statement on the line,
    absolute, no star, not every alias being removed)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if not isinstance(small, cst.ImportFrom) or small.relative or small.module is None:
        return None
    if isinstance(small.names, cst.ImportStar) or all(id(a) in removals for a in small.names):
        return None
    return dotted(small.module)


def _merged(stmt: cst.SimpleStatementLine, requests: list[ImportRequest]) -> cst.SimpleStatementLine | None:
    """``stmt`` (`from M import ...`) with the requested names appended in the line's own style, or None
    when the line would grow past MERGE_MAX_LINE (an unparenthesized import is not re-wrapped)."""
    small = stmt.body[0]
    assert isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar)
    names = list(small.names)
    have = {(dotted(a.name), a.asname.name.value if a.asname else None) for a in names}  # type: ignore[union-attr]
    new = []
    for r in sorted(requests, key=lambda r: r.order):
        asname = r.asname if r.asname and r.asname != r.name else None
        if (r.name, asname) not in have:
            have.add((r.name, asname))
            new.append(cst.ImportAlias(name=cst.Name(r.name), asname=cst.AsName(name=cst.Name(asname)) if asname else None))  # type: ignore[arg-type]
    if not new:
        return stmt
    # separators as the line writes them: between names, and after the last one (a trailing comma)
    sep = names[-2].comma if len(names) > 1 and isinstance(names[-2].comma, cst.Comma) else cst.Comma(
        whitespace_after=cst.SimpleWhitespace(" "))
    last_comma = names[-1].comma
    keys = [_isort_key(a) for a in names]
    if small.lpar is None and keys == sorted(keys):
        # a one-line import in isort's order stays in it (`from transformers import AutoModelForCausalLM, AutoTokenizer`)
        every = sorted(names + new, key=_isort_key)
        every = [a.with_changes(comma=sep) for a in every[:-1]] + [every[-1].with_changes(comma=last_comma)]
        return _short_enough(stmt.with_changes(body=[small.with_changes(names=every)]), small)
    names[-1] = names[-1].with_changes(comma=sep)
    new = [a.with_changes(comma=sep) for a in new[:-1]] + [new[-1].with_changes(comma=last_comma)]
    return _short_enough(stmt.with_changes(body=[small.with_changes(names=names + new)]), small)


def _isort_key(alias: cst.ImportAlias) -> tuple[int, str]:
    """isort's default order of imported names: CONSTANTS, then Classes, then functions, each case-insensitively."""
    name = dotted(alias.name) or ""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name.lower())


def _short_enough(merged: cst.SimpleStatementLine, small: cst.ImportFrom) -> cst.SimpleStatementLine | None:
    """``merged``, or None where an unparenthesized import grew past MERGE_MAX_LINE."""
    line = cst.Module(body=[]).code_for_node(merged.with_changes(leading_lines=[])).split("\n", 1)[0]
    if small.lpar is None and len(line) > MERGE_MAX_LINE:
        return None
    return merged


def _joined_leading(pending: list[cst.EmptyLine], own) -> list[cst.EmptyLine]:
    """Lines above a statement after the statement before it was removed: the removed one's comments
    are kept, its blank lines only where the statement has none of its own (no blank runs grow)."""
    if own and all(el.comment is None for el in pending):
        return list(own)
    return list(pending) + list(own)


class ImportFixer(cst.CSTTransformer):
    """Applies alias removals and import insertions, visiting statements only. A new `from M import x`
    joins an earlier `from M import ...` line of the same block when there is one (as isort would
    write it), else it takes the place of the import it replaces."""

    def __init__(
        self,
        removals: set[int],
        requests: list[ImportRequest],
        header_end: cst.CSTNode | None,
        original_lines: dict[int, cst.SimpleStatementLine],
        import_free: set[int] = frozenset(),  # type: ignore[assignment]
    ) -> None:
        super().__init__()
        self.import_free = import_free
        self.removals = removals
        self.by_anchor: dict[int, list[ImportRequest]] = {}
        self.top: list[ImportRequest] = []
        for r in requests:
            if r.anchor is not None:
                self.by_anchor.setdefault(id(r.anchor), []).append(r)
            else:
                self.top.append(r)
        self.header_end = header_end
        # maps id(new line node) -> id(original line node) for lines the main pass rebuilt
        self.original_lines = original_lines
        #: the blocks this pass left with nothing but `pass`, by id(); the nodes are held so that their ids are
        #: never reused by a later node (a new node with a freed block's id would read as emptied)
        self.emptied: dict[int, cst.CSTNode] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.BaseCompoundStatement):
            # unchanged compound statements without imports (rebuilt ones have new ids: visited)
            return id(node) not in self.import_free
        return isinstance(node, (cst.Module, cst.IndentedBlock, cst.Else,
                                 cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.MatchCase))

    def _plan_merges(self, body, is_module: bool):
        """Which requests join an earlier `from M import` line of this block. Returns the requests
        left at each statement index (key TOP: after the import header), and per target index the
        requests merged into it with the key they came from."""
        at: dict[int, list[ImportRequest]] = {}
        merges: dict[int, list[tuple[ImportRequest, int]]] = {}
        targets: dict[str, int] = {}
        for idx, stmt in enumerate(body):
            orig_id = self.original_lines.get(id(stmt), id(stmt))
            if is_module and _cell_boundary(stmt):
                # a notebook's next cell: a new import joins no line of an earlier cell, which a reader may
                # skip (an optional login cell) or run after this one
                targets = {}
            module = _merge_target(stmt, self.removals)
            groups = []
            if self.by_anchor.get(orig_id):  # they replace this line: earlier lines, or this one (same module)
                groups.append((idx, self.by_anchor[orig_id]))
            if module is not None and module not in targets:
                targets[module] = idx
            if is_module and self.top and orig_id == id(self.header_end):  # after it: this line too
                groups.append((TOP, self.top))
            for key, requests in groups:
                for r in requests:
                    target = targets.get(r.module) if r.name is not None else None
                    if target is not None and (target <= idx or key == TOP):
                        merges.setdefault(target, []).append((r, key))
                    else:
                        at.setdefault(key, []).append(r)
        return at, merges

    def _fix_body(self, body, is_module: bool):
        out = []
        pending_leading: list[cst.EmptyLine] = []
        changed = False
        at, merges = self._plan_merges(body, is_module)
        for idx, stmt in enumerate(body):
            orig_id = self.original_lines.get(id(stmt), id(stmt))
            new_stmts = []
            anchored = at.get(idx)
            if anchored:
                new_stmts.extend(_new_import_lines(anchored))
            kept_stmt = stmt
            if isinstance(stmt, cst.SimpleStatementLine) and self.removals:
                smalls = []
                for small in stmt.body:
                    s = _without_aliases(small, self.removals)
                    if s is not None:
                        smalls.append(s)
                if len(smalls) != len(stmt.body) or any(a is not b for a, b in zip(smalls, stmt.body)):
                    if smalls:
                        smalls[-1] = smalls[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
                        kept_stmt = stmt.with_changes(body=smalls)
                    else:
                        kept_stmt = None
            if idx in merges and kept_stmt is not None:
                joined = _merged(kept_stmt, [r for r, _ in merges[idx]])
                if joined is None:  # too long for one line: they get their own line where they were asked
                    for r, key in merges[idx]:
                        at.setdefault(key, []).append(r)
                else:
                    kept_stmt = joined
            if anchored or kept_stmt is not stmt:
                changed = True
                leading = _joined_leading(pending_leading, stmt.leading_lines)
                pending_leading = []
                if new_stmts:
                    stay: list[cst.EmptyLine] = []
                    if kept_stmt is not None:
                        # markers right above the kept import stay with it: they are about it (and a
                        # second run looks for them there)
                        k = len(leading)
                        while k and leading[k - 1].comment is not None and MARKER_PREFIX in leading[k - 1].comment.value:
                            k -= 1
                        leading, stay = leading[:k], leading[k:]
                    new_stmts[0] = new_stmts[0].with_changes(leading_lines=leading)
                    if kept_stmt is not None:
                        kept_stmt = kept_stmt.with_changes(leading_lines=stay)
                    elif isinstance(stmt, cst.SimpleStatementLine):
                        # the replaced line's trailing comment (`# noqa`, ...) stays on its line
                        new_stmts[-1] = new_stmts[-1].with_changes(trailing_whitespace=stmt.trailing_whitespace)
                    leading = []
                if kept_stmt is not None:
                    if leading:
                        kept_stmt = kept_stmt.with_changes(leading_lines=leading)
                    new_stmts.append(kept_stmt)
                elif leading:
                    # keep comments above a removed import, except markers about that import and a comment block
                    # right above it that names the old stack (`# XLA imports`: it headed what is gone)
                    k = len(leading)
                    while k and leading[k - 1].comment is not None:
                        k -= 1
                    block = [el.comment.value for el in leading[k:] if el.comment is not None]
                    if isinstance(stmt, cst.SimpleStatementLine) and any(_NAMES_OLD_STACK.search(c) for c in block):
                        leading = leading[:k]
                    pending_leading = [
                        el for el in leading if el.comment is None or MARKER_PREFIX not in el.comment.value
                    ]
                out.extend(new_stmts)
            else:
                leading = _joined_leading(pending_leading, stmt.leading_lines)
                if is_module and not out and changed:
                    # the first statements were removed: no blank lines at the top of the file
                    while leading and leading[0].comment is None:
                        leading.pop(0)
                if leading != list(stmt.leading_lines):
                    stmt = stmt.with_changes(leading_lines=leading)
                pending_leading = []
                out.append(stmt)
            if is_module and self.top and orig_id == id(self.header_end):
                if at.get(TOP):
                    out.extend(_new_import_lines(at[TOP]))
                    changed = True
                self.top = []
        if is_module and self.top:
            # no import header: insert at the top (after a docstring if the header is one)
            out[0:0] = _new_import_lines(self.top)
            self.top = []
            changed = True
        return out, changed

    def leave_Module(self, original_node, updated_node):
        body, changed = self._fix_body(updated_node.body, True)
        if not body and updated_node.body:
            body = []
        return updated_node.with_changes(body=body) if changed else updated_node

    def leave_IndentedBlock(self, original_node, updated_node):
        body, changed = self._fix_body(updated_node.body, False)
        if not changed and body:
            return updated_node
        if not body:  # its imports removed (or an `if` in it that they emptied)
            new = updated_node.with_changes(body=[cst.SimpleStatementLine(body=[cst.Pass()])])
            if not any(el.comment is not None for el in updated_node.footer):
                self.emptied[id(new)] = new
            return new
        return updated_node.with_changes(body=body)

    def leave_Try(self, original_node, updated_node):
        """A ``try`` whose body the import removals emptied (``try: import torch_xla.distributed.xla_backend`` /
        ``except ImportError: pass``): nothing in it can raise any more, so its handlers never run: it goes."""
        if (id(updated_node.body) in self.emptied and updated_node.orelse is None and updated_node.finalbody is None
                and not any(el.comment is not None for el in updated_node.leading_lines)):
            return cst.RemovalSentinel.REMOVE
        return updated_node

    def leave_If(self, original_node, updated_node):
        """An ``if`` the import removals left with nothing to do (``if backend == "xla": import torch_xla...`` once
        the other edits removed the rest): an emptied ``else`` goes, and an ``if`` whose test has no effect
        goes whole, as the main pass does with the blocks its edits empty."""
        orelse = updated_node.orelse
        if isinstance(orelse, cst.Else) and id(orelse.body) in self.emptied and not any(
                el.comment is not None for el in orelse.leading_lines):
            updated_node = updated_node.with_changes(orelse=None)
        if (updated_node.orelse is None and id(updated_node.body) in self.emptied
                and not any(el.comment is not None for el in updated_node.leading_lines)
                and without_effects(updated_node.test)):
            return cst.RemovalSentinel.REMOVE
        return one_branch(original_node, updated_node)  # (`else: x = loader` and the branch the imports left)
