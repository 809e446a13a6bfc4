"""Runs every selected Python rule over one unit of Python source.

One libcst parse, one import resolution, ONE pass over the original tree that
dispatches each node to the handlers of every rule that asked for its type, then
one transform that only descends into the ancestors of edited nodes, then one
import fix-up, then codegen. Positions (line/column) are computed only when a
finding or an ignore comment needs them.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import libcst as cst

from migrator.filekinds import UnitSyntaxError
from migrator.imports import Binding, ImportFixer, ImportRequest, dotted, falls_back, import_gate
from migrator.model import (
    SELF_CHECKS,
    Finding,
    find_markers,
    ignored_rules,
    is_silenced,
    marker_text,
    unparsable_message,
)
from migrator.positions import Positions
from migrator.rules import (  # the contexts live with the rule contracts; re-exported for callers
    STATEMENT_TYPES,
    Owners,
    PythonContext,
    PythonRule,
    Replacement,
    _Edit,
    _ImportAsk,
    _Note,
    trigger_scan,
)
from migrator.model import NATIVE_PLUGIN, OUTSIDE_NAMES, is_old_stack
from migrator.tree import child_nodes, code_fields, guards_joined, one_branch, without_effects

_SHAPES: dict[type, tuple[tuple[str, ...], bool]] = {}
_IS_NODE: dict[type, bool] = {}


def _shape(t: type) -> tuple[tuple[str, ...], bool]:
    """(fields worth walking, is a statement) for a node type, computed once per type."""
    fields = code_fields(t)
    if t is cst.ImportAlias:
        fields = ()  # names inside `import a.b as c` are not references
    found = _SHAPES[t] = (fields, issubclass(t, STATEMENT_TYPES))
    return found


def _is_node(t: type) -> bool:
    found = _IS_NODE[t] = issubclass(t, cst.CSTNode)
    return found


def _dispatch(module: cst.Module, ctx: PythonContext, table: dict[type, list[tuple[str, Callable]]],
              track: set[str]) -> list[cst.CSTNode]:
    """One pre-order pass over the original tree: call the handlers registered for each
    node type, record references to imported names and every statement node, in order.

    A plain recursive walk over dataclass fields (skipping whitespace and punctuation)
    costs a fraction of libcst's visitor, which rebuilds every node it visits.
    """
    stack = ctx.stack
    refs = ctx._refs
    statements: list[cst.CSTNode] = []
    Name, Attribute, Arg, ImportAlias = cst.Name, cst.Attribute, cst.Arg, cst.ImportAlias
    known = ctx._known
    shapes, is_node = _SHAPES, _IS_NODE

    def visit(node: cst.CSTNode) -> None:
        t = type(node)
        stack.append(node)
        handlers = table.get(t)
        if handlers:
            for rule_id, fn in handlers:
                ctx.rule_id = rule_id
                fn(node, ctx)
        if t is Name:
            if node.value in track:
                parent = stack[-2] if len(stack) > 1 else None
                if not ((type(parent) is Attribute and parent.attr is node)
                        or (type(parent) is Arg and parent.keyword is node)):
                    refs.append((node, tuple(stack[:-1])))
        else:
            shape = shapes.get(t) or _shape(t)
            if shape[1]:
                statements.append(node)
                known[id(node)] = tuple(stack[:-1])
            elif t is ImportAlias:
                known[id(node)] = tuple(stack[:-1])
            for name in shape[0]:
                value = getattr(node, name)
                vt = type(value)
                if vt is tuple or vt is list:
                    for item in value:
                        it = type(item)
                        if is_node[it] if it in is_node else _is_node(it):
                            visit(item)
                elif is_node[vt] if vt in is_node else _is_node(vt):
                    visit(value)
        stack.pop()

    visit(module)
    return statements


class _Applier(cst.CSTTransformer):
    """Applies replacements and markers; descends only into ancestors of edits."""

    def __init__(self, edits: dict[int, Replacement], markers: dict[int, list[str]],
                 path: set[int], watch: set[str], seen_names: set[str], deep: set[int] = frozenset()):
        super().__init__()
        self.deep = deep
        self.inside = 0
        self.edits = edits
        self.markers = markers
        self.path = path
        self.watch = watch
        self.seen_names = seen_names
        #: id(new SimpleStatementLine) -> id(original) so the import fixer can find anchors
        self.line_map: dict[int, int] = {}
        #: ids of the original nodes whose edit was applied
        self.applied: set[int] = set()
        #: edited nodes being visited (names are collected from the outermost edit's result only,
        #: so that what an enclosing edit dropped does not count as used)
        self.open_edits = 0
        #: id(original statement) -> how many statements it became (0: removed, 2+: a FlattenSentinel)
        self.became: dict[int, int] = {}
        #: the ``if`` statements that edits of other statements made, by id (guards_joined may join them)
        self.made_ifs: dict[int, cst.If] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) in self.edits:
            self.open_edits += 1
        if id(node) in self.deep:
            self.inside += 1
            return True
        return self.inside > 0 or id(node) in self.path

    def on_leave(self, original_node, updated_node):
        key = id(original_node)
        if key in self.deep:
            self.inside -= 1
        new = updated_node
        if key in self.edits:
            self.applied.add(key)
            self.open_edits -= 1
            rep = self.edits[key]
            if isinstance(rep, cst.RemovalSentinel):
                self.became[key] = 0
                return rep
            new = rep(updated_node) if callable(rep) and not isinstance(rep, cst.CSTNode) else rep
        elif type(original_node) is cst.If and key not in self.markers:
            new = _without_emptied(original_node, updated_node)
            if new is None:
                self.became[key] = 0
                return cst.RemovalSentinel.REMOVE
            new = one_branch(original_node, new)
        elif type(original_node) in (cst.Module, cst.IndentedBlock):
            new = _spacing_kept(original_node, updated_node, self.became)
            if self.made_ifs:
                body = guards_joined(list(new.body), self.made_ifs)
                if len(body) != len(new.body):
                    new = new.with_changes(body=body)
        # a statement may become several (cst.FlattenSentinel): markers go above the first
        parts = list(new.nodes) if isinstance(new, cst.FlattenSentinel) else [new]
        self.became[key] = len(parts)
        if key in self.edits and not isinstance(original_node, cst.If):
            self.made_ifs.update((id(p), p) for p in parts if isinstance(p, cst.If))
        if key in self.edits and self.open_edits == 0:
            for part in parts:
                _names_in(part, self.seen_names)
        first = parts[0] if parts else None
        if key in self.markers and isinstance(first, STATEMENT_TYPES):
            lines = list(first.leading_lines)
            for text in self.markers[key]:
                lines.append(cst.EmptyLine(indent=True, comment=cst.Comment(text)))
            parts[0] = first = first.with_changes(leading_lines=lines)
            new = cst.FlattenSentinel(parts) if isinstance(new, cst.FlattenSentinel) else first
        if first is not None and first is not original_node and isinstance(original_node, cst.SimpleStatementLine):
            self.line_map[id(first)] = key
        return new


def _spacing_kept(original: cst.Module | cst.IndentedBlock, updated, became: dict[int, int]):
    """The blank lines above a statement the edits removed stay above the statement that follows it
    (``x = 1``, a blank line, ``compiler_args = {...}`` removed, ``model = ...``: the blank line stays
    above ``model``), unless that statement has blank lines of its own."""
    body = list(updated.body)
    at = 0
    carry: list[cst.EmptyLine] = []
    for i, stmt in enumerate(original.body):
        n = became.get(id(stmt), 1)
        if n == 0:
            lines = list(getattr(stmt, "leading_lines", ()))
            if i > 0 and lines and all(line.comment is None for line in lines):
                carry = carry or lines
            continue
        if carry and at < len(body):
            first = body[at]
            if not any(line.comment is None for line in first.leading_lines[:1]):
                body[at] = first.with_changes(leading_lines=[*carry, *first.leading_lines])
        carry = []
        at += n
    return updated.with_changes(body=body) if body != list(updated.body) else updated


def _emptied(original: cst.BaseSuite, updated: cst.BaseSuite) -> bool:
    """Whether edits removed every statement of a block (libcst would render it as ``pass``) and no
    comment is left in it."""
    return (isinstance(original, cst.IndentedBlock) and isinstance(updated, cst.IndentedBlock)
            and bool(original.body) and not updated.body
            and not any(el.comment is not None for el in updated.footer))


def _without_emptied(original: cst.If, updated: cst.If) -> cst.If | None:
    """An ``if`` whose blocks the edits emptied (``if step % 10 == 0: xm.mark_step()`` once the call
    is removed): an emptied ``else`` goes; an ``if`` left with nothing to do goes whole (None) when its
    test has no effect (queries such as ``get_world_size()`` aside) and no comment stands above it; else it is
    kept as it is."""
    orelse = updated.orelse
    if isinstance(orelse, cst.Else) and isinstance(original.orelse, cst.Else) \
            and _emptied(original.orelse.body, orelse.body) and not any(
                el.comment is not None for el in orelse.leading_lines):
        updated = updated.with_changes(orelse=None)
    if updated.orelse is not None or not _emptied(original.body, updated.body) \
            or any(el.comment is not None for el in updated.leading_lines):
        return updated
    return None if without_effects(updated.test, getters=True) else updated


def _children(n: cst.CSTNode) -> list[cst.CSTNode]:
    """The child nodes the walks care about (names inside ``import a.b as c`` are not references)."""
    return [] if type(n) is cst.ImportAlias else child_nodes(n)


def _names_in(node: cst.CSTNode, seen: set[str]) -> None:
    """Add to ``seen`` the names ``node`` refers to (not attribute names nor keywords)."""
    todo = [node]
    while todo:
        n = todo.pop()
        t = type(n)
        if t is cst.Name:
            seen.add(n.value)
            continue
        if t is cst.Attribute:
            todo.append(n.value)
            continue
        if t is cst.Arg:
            todo.append(n.value)
            continue
        todo.extend(_children(n))


def _compose(first: Replacement, second: Replacement) -> Replacement:
    """Two edits of one node: a removal wins; otherwise apply both, in order (a function
    given several statements by the first edit applies to the first of them)."""
    if isinstance(first, cst.RemovalSentinel) or isinstance(second, cst.RemovalSentinel):
        return cst.RemovalSentinel.REMOVE

    def both(updated):
        mid = first(updated) if callable(first) and not isinstance(first, cst.CSTNode) else first
        if not (callable(second) and not isinstance(second, cst.CSTNode)):
            return second
        if isinstance(mid, cst.FlattenSentinel):
            parts = list(mid.nodes)
            out = second(parts[0])
            head = list(out.nodes) if isinstance(out, cst.FlattenSentinel) else [out]
            return cst.FlattenSentinel(head + parts[1:])
        return second(mid)

    return both


def _walk_below(ancestors: tuple) -> Iterable[cst.CSTNode]:
    """Nodes below the last of ``ancestors`` (empty when there is none)."""
    if not ancestors:
        return ()
    todo = [ancestors[-1]]
    out = []
    while todo:
        n = todo.pop()
        out.append(n)
        todo.extend(_children(n))
    return out


def _path_to(root: cst.CSTNode, target: cst.CSTNode) -> tuple[cst.CSTNode, ...] | None:
    """The ancestors of ``target`` below ``root`` (root first), or None."""
    stack: list[tuple[cst.CSTNode, tuple]] = [(root, ())]
    while stack:
        n, anc = stack.pop()
        if n is target:
            return anc
        below = anc + (n,)
        stack.extend((child, below) for child in _children(n))
    return None


def _settle_ancestors(ctx: PythonContext) -> None:
    """Give records made before their node was visited its real ancestors, and give
    every marker the statement it goes above."""
    for rec in list(ctx._edits) + list(ctx._notes):
        if rec.deep and id(rec.node) in ctx._known:
            rec.ancestors, rec.deep = ctx._known[id(rec.node)], False
        elif rec.deep and not any(a is rec.node for a in _walk_below(rec.ancestors)):
            # a node elsewhere in the module (recorded from another node's handler or
            # from finish()): find where it is
            found = _path_to(ctx.module, rec.node)
            if found is not None:
                rec.ancestors, rec.deep = found, False
    for note in ctx._notes:
        if note.fix == "manual":
            if isinstance(note.node, STATEMENT_TYPES):
                note.statement = note.node
            else:
                note.statement = next((a for a in reversed(note.ancestors) if isinstance(a, STATEMENT_TYPES)), None)


#: run the rules once more on a unit they changed (see :func:`run_python`); off: one pass only
SECOND_PASS = False


def run_python(
    source: str, rules: Sequence[PythonRule], owners: Owners, project: frozenset[str] = frozenset(),
    checks: frozenset[str] = SELF_CHECKS, second_pass: bool | None = None,
) -> tuple[str, list[Finding]]:
    """Run ``rules`` over ``source``; returns (new source, findings). ``project``: ids of the rules
    whose project-wide context is on (``Rule.project_triggers``); ``checks``: the self-check's findings
    that are selected (``NM991``: edits that would break the code are dropped; ``NM992``: old-stack
    imports left behind are removed or marked; see :mod:`migrator.selfcheck.policy`).

    One run is meant to be enough: a rule decides from the original unit, and what the other rules'
    edits unmask (a use they rewrote away, a name only the migrated form reveals) would otherwise be
    seen by the next run only. So a unit the rules changed, whose output still holds a trigger of some
    rule, is run once more (``second_pass``, default :data:`SECOND_PASS`; never a third time); that
    output is kept only when it parses (the second pass's own self-check has checked it against the
    first output). Its new findings join the first pass's (their lines are those of the first
    output, which differs from the final one only where the second pass edited).

    Raises :class:`UnitSyntaxError` when the source does not parse.
    """
    new, findings = _run_once(source, rules, owners, project, checks)
    if new == source or not (SECOND_PASS if second_pass is None else second_pass):
        return new, findings
    found = trigger_scan(rules).found(new)
    if not any(r.applies_to(new, project, found) for r in rules):
        return new, findings
    try:
        again, more = _run_once(new, rules, owners, project, checks)
    except UnitSyntaxError:  # pragma: no cover - the first pass's output always parses
        return new, findings
    if again == new:
        return new, findings
    try:
        compile(again, "<second pass>", "exec", flags=0x400, dont_inherit=True)  # ast.PyCF_ONLY_AST
    except (SyntaxError, ValueError, RecursionError):
        return new, findings
    known = set(find_markers(new))
    return again, findings + [f for f in more if f not in known]


def _run_once(
    source: str, rules: Sequence[PythonRule], owners: Owners, project: frozenset[str], checks: frozenset[str],
) -> tuple[str, list[Finding]]:
    """One pass of the rules over ``source`` (see :func:`run_python`)."""
    found = trigger_scan(rules).found(source)
    active = [r for r in rules if r.applies_to(source, project, found)]
    existing = find_markers(source)
    if not active:
        return source, existing
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise UnitSyntaxError(f"line {exc.raw_line}: {exc.message}") from exc
    except (RecursionError, ValueError) as exc:  # pragma: no cover - libcst internal failures
        raise UnitSyntaxError(str(exc)) from exc

    ctx = PythonContext(module, source, owners)
    ctx.project = project
    ctx.checks = checks
    table: dict[type, list[tuple[str, Callable]]] = {}
    for rule in active:
        for node_type, fn in rule.handlers().items():
            table.setdefault(node_type, []).append((rule.id, fn))
    track = set(ctx.imports.bindings)
    statements = _dispatch(module, ctx, table, track)
    for rule in active:
        ctx.rule_id = rule.id
        rule.finish(ctx)
    _settle_ancestors(ctx)

    # an old-stack import left in the unit is the self-check's business even when no rule edited it
    # (`import optimum.neuron` binds `optimum`: the module it imports is what counts)
    leftovers = "NM992" in checks and any(
        is_old_stack(b.qualified) or (b.alias is not None and not b.is_from and is_old_stack(dotted(b.alias.name) or ""))
        for b in ctx.imports.all_bindings())
    if not (ctx._edits or ctx._notes or ctx._asks or ctx._removals or leftovers):
        return source, existing

    lines = source.splitlines()
    positions = None
    ignores = None
    if "neuron-migrate" in source and "ignore" in source:
        ignores = {i + 1: ig for i, line in enumerate(lines) if (ig := ignored_rules(line)) is not None}
        ignores = ignores or None
    if ctx._notes or ignores:
        positions = Positions(module, source, statements)

    def silenced(rule: str, node: cst.CSTNode, ancestors: tuple = ()) -> bool:
        if ignores is None or positions is None:
            return False
        rng = positions.get(node, ancestors)
        if rng is None:
            return False
        return any(is_silenced(ignores.get(ln), rule) for ln in range(rng.start.line, rng.end.line + 1))

    edits = [e for e in ctx._edits if not silenced(e.rule, e.node, e.ancestors)]
    notes = [n for n in ctx._notes if not silenced(n.rule, n.node, n.ancestors)]
    asks = [a for a in ctx._asks if a.node is None or not silenced(a.rule, a.node, a.ancestors)]
    removals = [(rule, b) for rule, b in ctx._removals if not silenced(rule, b.line, ctx._known.get(id(b.line), ()))]

    refs_by_name: dict[str, list[tuple[cst.Name, tuple]]] = {}
    for name_node, anc in ctx._refs:
        if ctx.bound_locally(name_node.value, anc):
            continue  # a function's own variable spelled like the import (`grads = []`): not a use of it
        refs_by_name.setdefault(name_node.value, []).append((name_node, anc))

    # ---- markers (de-duplicated against markers already above the statement)
    markers: dict[int, list[str]] = {}
    marker_anc: dict[int, tuple] = {}
    findings: list[Finding] = list(existing)
    finding_notes: list[_Note | None] = [None] * len(findings)  # the note behind each finding
    seen_markers: set[tuple[int, str]] = set()
    for n in notes:
        pos = positions.get(n.node, n.ancestors) if positions is not None else None
        line, col = (pos.start.line, pos.start.column + 1) if pos is not None else (1, 1)
        if n.fix == "manual" and n.statement is not None:
            text = marker_text(n.rule, n.message)
            key = (id(n.statement), text)
            if key in seen_markers:
                continue
            seen_markers.add(key)
            around = ctx._known.get(id(n.statement), _ancestors_until(n.ancestors, n.statement))
            if any(_marked_above(module, n.statement, t, around)
                   for t in (text, *(marker_text(n.rule, m) for m in n.same_as))):
                continue  # already there: reported by the existing-marker scan
            markers.setdefault(id(n.statement), []).append(text)
            marker_anc[id(n.statement)] = ctx._known.get(id(n.statement), _ancestors_until(n.ancestors, n.statement))
        findings.append(Finding(line, col, n.rule, n.message, n.fix, detail=n.detail))  # type: ignore[arg-type]
        finding_notes.append(n)

    if not edits and not markers and not asks and not removals and not leftovers:
        backing = _Backing([], frozenset())
        return source, [f for f, n in zip(findings, finding_notes) if n is None or n.fix != "applied" or backing.backs(n)]

    # ---- rendering a plan: the rules' edits less those the self-check dropped, plus its markers,
    # removals and imports (see migrator.selfcheck.policy)
    from migrator.selfcheck import policy

    statements_of: list[cst.CSTNode] = []  # statements the self-check may put a marker above
    statement_index: dict[int, int] = {}

    def statement_id(node: cst.CSTNode, ancestors: tuple) -> int:
        stmt = node if isinstance(node, STATEMENT_TYPES) else next(
            (a for a in reversed(ancestors) if isinstance(a, STATEMENT_TYPES)), None)
        if stmt is None:
            stmt = module.body[0] if module.body else module
        if id(stmt) not in statement_index:
            statement_index[id(stmt)] = len(statements_of)
            statements_of.append(stmt)
        return statement_index[id(stmt)]

    edit_infos = [policy.EditInfo(e.rule, statement_id(e.node, e.ancestors)) for e in edits]
    bindings = [b for b in ctx.imports.all_bindings() if b.alias is not None]
    import_infos = [
        policy.ImportInfo(b.local, b.module if b.is_from else (dotted(b.alias.name) or b.module),
                          statement_id(b.line, ctx._known.get(id(b.line), ())),
                          tuple(a.name.value for a in ctx._known.get(id(b.line), ())
                                if isinstance(a, (cst.FunctionDef, cst.ClassDef))))
        for b in bindings
    ]

    # names an edit may have unbound: those in the nodes it replaced, and those of imports inside them
    edited = {id(e.node) for e in edits}
    touched: set[str] = set()
    for e in edits:
        _names_in(e.node, touched)
    touched |= {b.local for b in ctx.imports.all_bindings()
                if id(b.line) in edited or any(id(a) in edited for a in ctx._known.get(id(b.line), ()))}

    def render(plan: policy.Plan) -> policy.Rendered:
        kept = [e for i, e in enumerate(edits) if i not in plan.dropped]
        all_markers = {k: list(v) for k, v in markers.items()}
        all_anc = dict(marker_anc)
        for index, notes_ in plan.markers.items():
            stmt = statements_of[index]
            for rule, message in notes_:
                text = marker_text(rule, message)
                if text not in all_markers.get(id(stmt), ()) and not _marked_above(module, stmt, text,
                                                                                    ctx._known.get(id(stmt), ())):
                    all_markers.setdefault(id(stmt), []).append(text)
                    all_anc[id(stmt)] = ctx._known.get(id(stmt), ())
        dropped_asks = {e.rule for i, e in enumerate(edits) if i in plan.dropped} - {e.rule for e in kept}
        extra = [ImportRequest(r.module, r.name, r.asname, None, 10**9) for r in plan.requests]
        code, names = _render(ctx, module, kept, all_markers, all_anc, [a for a in asks if a.rule not in dropped_asks],
                              [b for rule, b in removals if rule not in dropped_asks],
                              {id(bindings[i].alias) for i in plan.removals}, extra, refs_by_name)
        return policy.Rendered(code, names | touched)

    new_source, plan = policy.enforce(source, edit_infos, import_infos, render,
                                      policy.DROPPED_RULE in checks, policy.OLD_IMPORT_RULE in checks)
    if plan.broken:
        # the last resort: dropping edits rule by rule did not give code that parses: nothing of
        # this unit is handed back (whatever --select says: code that does not parse is never written)
        kept = [e for i, e in enumerate(edits) if i not in plan.dropped] or edits
        if positions is None:
            positions = Positions(module, source, statements)
        pos = positions.get(kept[0].node, kept[0].ancestors)
        line, col = (pos.start.line, pos.start.column + 1) if pos is not None else (1, 1)
        return source, existing + [Finding(line, col, policy.DROPPED_RULE, unparsable_message(e.rule for e in kept),
                                           "manual")]
    # an [applied] finding stands only for an edit in the diff (see _Backing); none when the unit comes back unchanged
    backing = _Backing([] if new_source == source else [e for i, e in enumerate(edits) if i not in plan.dropped],
                       frozenset() if new_source == source else {a.rule for a in asks} | {r for r, _ in removals},
                       ctx.scratch.get("engine: gate-kept imports", frozenset()))
    # a marker stands only where the output holds it (one above a statement another rule removed is gone)
    keep = [n is None or (backing.backs(n) if n.fix == "applied" else
                          n.fix != "manual" or n.statement is None or marker_text(n.rule, n.message) in new_source)
            for n in finding_notes]
    findings = [f for f, k in zip(findings, keep) if k]
    finding_notes = [n for n, k in zip(finding_notes, keep) if k]
    def where(index: int) -> tuple[int, int]:
        """Line and column (1-based) of statement ``index`` in the source."""
        nonlocal positions
        if positions is None:
            positions = Positions(module, source, statements)
        stmt = statements_of[index]
        pos = positions.get(stmt, ctx._known.get(id(stmt), ()))
        return (pos.start.line, pos.start.column + 1) if pos is not None else (1, 1)

    if plan.removals and new_source != source:
        # the old-stack imports the self-check removed (nothing uses them any more): in the diff, so reported
        for i in sorted(plan.removals):
            info = import_infos[i]
            findings.append(Finding(*where(info.statement), policy.OLD_IMPORT_RULE,
                                    f"removed the import of {info.module}: nothing uses it after the migration",
                                    "applied"))
    if plan.dropped or plan.markers:
        dropped_nodes = {id(edits[i].node) for i in plan.dropped}
        findings = [
            f for f, n in zip(findings, finding_notes)
            if n is None or n.fix != "applied" or not _inside(n, dropped_nodes)
        ]
        for index, notes_ in plan.markers.items():
            stmt = statements_of[index]
            line, col = where(index)
            for rule, message in notes_:
                if not _marked_above(module, stmt, marker_text(rule, message), ctx._known.get(id(stmt), ())):
                    # else found by the marker scan
                    findings.append(Finding(line, col, rule, message, "manual"))
    return new_source, findings


class _Backing:
    """Which ``[applied]`` findings the output backs: the report says what the diff holds, not what a
    rule meant to do. A finding stands for its rule's kept edit that changes the code and lies where the
    finding points (on the finding's node, around it, inside it, or in the same statement), or for an
    import its rule requested or removed (``imports``: those rules; import work has no node to point at)."""

    def __init__(self, edits: list[_Edit], imports: frozenset[str], kept: frozenset[int] | set[int] = frozenset()):
        self.imports = imports
        self.kept = kept  # import aliases a rule asked to remove that stayed (an availability gate needs them)
        self.nodes: dict[str, set[int]] = {}
        self.around: dict[str, set[int]] = {}
        self.statements: dict[str, set[int]] = {}
        for e in edits:
            if isinstance(e.new, cst.CSTNode) and e.new.deep_equals(e.node):
                continue  # a rule re-emitting what is there: nothing in the diff
            self.nodes.setdefault(e.rule, set()).add(id(e.node))
            self.around.setdefault(e.rule, set()).update(id(a) for a in e.ancestors)
            self.statements.setdefault(e.rule, set()).add(_statement_of(e.node, e.ancestors))

    def backs(self, note: _Note) -> bool:
        rule = note.rule
        if id(note.node) in self.kept:
            return False  # "import ... removed", of an import the gate keeps
        if rule in self.imports:
            return True
        nodes = self.nodes.get(rule)
        if not nodes:
            return False
        return (id(note.node) in nodes or any(id(a) in nodes for a in note.ancestors)
                or id(note.node) in self.around[rule]
                or _statement_of(note.node, note.ancestors) in self.statements[rule])


def _statement_of(node: cst.CSTNode, ancestors: tuple) -> int:
    """The id of the innermost statement holding ``node`` (the node itself when it is one)."""
    if isinstance(node, STATEMENT_TYPES):
        return id(node)
    return next((id(a) for a in reversed(ancestors) if isinstance(a, STATEMENT_TYPES)), 0)


def _inside(note: _Note, nodes: set[int]) -> bool:
    """Whether a finding's node is (or lies inside) one of ``nodes``."""
    return id(note.node) in nodes or any(id(a) in nodes for a in note.ancestors)


def _render(ctx: PythonContext, module: cst.Module, edits: list[_Edit], markers: dict[int, list[str]],
            marker_anc: dict[int, tuple], asks: list[_ImportAsk], removals: list[Binding], extra_removals: set[int],
            extra_requests: list[ImportRequest], refs_by_name: dict[str, list[tuple[cst.Name, tuple]]]
            ) -> tuple[str, frozenset[str]]:
    """The unit's new source: ``edits`` applied, ``markers`` inserted, dead imports removed, imports added;
    and the names the edits' results use or whose import was removed."""
    # ---- dead imports: bindings all of whose references sit inside replaced nodes
    replaced_ids = {id(e.node) for e in edits}
    candidates: set[str] = set()
    for name, refs in refs_by_name.items():
        if all(id(n) in replaced_ids or any(id(a) in replaced_ids for a in anc) for n, anc in refs):
            candidates.add(name)

    path: set[int] = set()
    deep: set[int] = set()
    for e in edits:
        path.update(id(a) for a in e.ancestors)
        path.add(id(e.node))
        if e.deep and e.ancestors:
            deep.add(id(e.ancestors[-1]))
    for key, anc in marker_anc.items():
        path.update(id(a) for a in anc)
        path.add(key)
    seen_names: set[str] = set()
    replacements: dict[int, Replacement] = {}
    for e in edits:
        replacements[id(e.node)] = _compose(replacements[id(e.node)], e.new) if id(e.node) in replacements else e.new
    applier = _Applier(replacements, markers, path, candidates, seen_names, deep)
    new_module = module.visit(applier) if path else module
    line_map = applier.line_map
    missed = {k: v for k, v in replacements.items() if k not in applier.applied}
    if missed:
        # edits of nodes whose ancestors were not known (a rule edited a node elsewhere in the
        # module while handling another one): those nodes are untouched by the first pass,
        # so a full pass finds them
        again = _Applier(missed, {}, set(), candidates, seen_names, {id(new_module)})
        new_module = new_module.visit(again)
        line_map = {new: line_map.get(mid, mid) for new, mid in again.line_map.items()} | line_map
    dead = candidates - seen_names - OUTSIDE_NAMES.get()  # (an import a later block of the page still reads stays)

    removal_ids = {id(b.alias) for b in removals if b.alias is not None} | extra_removals
    for b in ctx.imports.all_bindings():
        if b.local in dead and b.alias is not None and b.qualified != NATIVE_PLUGIN:
            removal_ids.add(id(b.alias))
    # an import is added only where the migrated code uses it, or where it stands in for an
    # import that goes away: same local name (an alias kept), or an import that was never used
    used_locals = {name for name, refs in refs_by_name.items() if refs}
    replaced = {id(a.replaces.alias) for a in asks
                if a.replaces is not None and a.replaces.alias is not None and a.bound in seen_names}
    gate_kept = _gate_keepers(ctx, removal_ids, replaced)
    removal_ids -= gate_kept
    ctx.scratch["engine: gate-kept imports"] = gate_kept  # (their removal findings are not in the diff: _Backing)

    def stands_in(a: _ImportAsk) -> bool:
        b = a.replaces
        return (
            b is not None and b.alias is not None and id(b.alias) in removal_ids
            and (a.bound == b.local or b.local not in used_locals)
        )

    requests = [a.request for a in asks if a.bound in seen_names or stands_in(a)] + extra_requests
    if removal_ids or requests:
        fixer = ImportFixer(removal_ids, requests, ctx.imports.header_end, line_map, ctx.imports.import_free)
        new_module = new_module.visit(fixer)
    unbound = {b.local for b in ctx.imports.all_bindings() if b.alias is not None and id(b.alias) in removal_ids}
    return new_module.code, frozenset(seen_names | unbound)


def _gate_keepers(ctx: PythonContext, removal_ids: set[int], replaced: set[int]) -> set[int]:
    """The import aliases about to be removed that a ``try: import X ... except ImportError:`` gate
    needs: the gate's imports decide which branch runs, so removing all of them (their uses were
    migrated) would make the gate always pass. A gate keeps its imports that are not of the old
    stack (``import torch_neuronx``: the TorchNeuron plugin, there on a TorchNeuron host); when all
    its imports are of the old stack and all would go, they all stay (the gate then fails on
    TorchNeuron as it would on any host without the old stack, which a rule may mark) -- unless
    each of them is ``replaced`` (aliases a used native import takes the place of, in the gate:
    ``from optimum.neuron import NeuronModelForCausalLM`` -> ``from transformers import
    AutoModelForCausalLM``): the gate then tests for the native library its branch uses, and
    keeping the old import would make it fail on TorchNeuron (its except branch unbinding the
    native name)."""
    gates: dict[int, list[Binding]] = {}
    for b in ctx.imports.all_bindings():
        if b.alias is None:
            continue
        gate = import_gate(ctx._known.get(id(b.line), ()))
        if gate is not None and falls_back(gate):  # (a `try` that only tolerates or re-raises chooses nothing)
            gates.setdefault(id(gate), []).append(b)
    keep: set[int] = set()
    for bindings in gates.values():
        going = [b for b in bindings if id(b.alias) in removal_ids]
        if not going or len(going) < len(bindings) or all(id(b.alias) in replaced for b in going):
            continue  # an import of the gate stays (it still tests for that), or native ones take their place
        native = [b for b in going if not is_old_stack(b.qualified)]
        keep.update(id(b.alias) for b in (native or going))
    return keep


#: compound statements whose header a marker above may stand for their body's first statement
_WRAPPERS = (cst.If, cst.With, cst.For, cst.While, cst.Try, cst.TryStar)


def _marked_above(module: cst.Module, statement: cst.CSTNode, text: str, ancestors: Sequence[cst.CSTNode] = ()
                  ) -> bool:
    """Whether the comment ``text`` already stands right above ``statement`` -- or above the ``if`` /
    ``with`` / ``for`` / ``while`` / ``try`` whose body ``statement`` begins (``ancestors``: the
    statement's, root first). An edit that wraps a marked statement (``if rank == 0: torch.save(...)``)
    leaves the marker above the new header; the next run, finding the node in the body, must see it."""
    if _comment_above(module, statement, text):
        return True
    inner = statement
    for i in range(len(ancestors) - 1, 0, -1):
        block, outer = ancestors[i], ancestors[i - 1]
        if not (isinstance(block, cst.IndentedBlock) and block.body and block.body[0] is inner
                and isinstance(outer, _WRAPPERS) and outer.body is block):
            return False
        if _comment_above(module, outer, text):
            return True
        inner = outer
    return False


def _comment_above(module: cst.Module, statement: cst.CSTNode, text: str) -> bool:
    above = list(getattr(statement, "leading_lines", ()))
    if module.body and statement is module.body[0]:
        above = list(module.header) + above  # comments at the top of a module live in its header
    return any(el.comment is not None and el.comment.value.strip() == text for el in above)


def _ancestors_until(ancestors: tuple, stmt: cst.CSTNode) -> tuple:
    for i, a in enumerate(ancestors):
        if a is stmt:
            return tuple(ancestors[:i])
    return ancestors


def iter_call_keywords(call: cst.Call) -> Iterable[tuple[str, cst.Arg]]:
    for arg in call.args:
        if arg.keyword is not None:
            yield arg.keyword.value, arg
