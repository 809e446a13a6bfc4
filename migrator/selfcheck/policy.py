"""The engine's promise: nothing it hands back is broken by it.

After the rules of a unit ran, :func:`enforce` checks the output (:mod:`.check`) against the input:

* a name an edit left undefined is completed when an import elsewhere in the output binds it (the
  same import is added at the top of the module) and that really resolves it;
* any other violation an edit introduced (code that does not parse, an undefined name, a target
  import that does not exist, a keyword the target does not accept) drops the edits that caused it,
  each replaced by an NM991 marker that says why (code that does not parse is dropped even when
  NM991 is not selected: it is never handed back). Edits are dropped rule by rule first, then
  given back one by one where that keeps the output clean, so that one bad rewrite does not cost
  the unit its other edits;
* last, an old-stack import left in the output without a marker is removed when nothing uses it any
  more, and marked (NM992) when something still does (dropped edits may still need it).

The engine renders candidate outputs through a callback; this module knows nothing of libcst.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

from migrator.model import (
    DROPPED_RULE, IN_DOCUMENT, KEEPS_OLD_STACK, OLD_MEMBERS_OF_NATIVE, OUTSIDE_NAMES, UNPARSABLE, fitted,
)
from migrator.selfcheck.check import (
    KEYWORD, OLD_STACK, SYNTAX, UNDEFINED, UNRESOLVED, Violation, check_source, introduced, marked, markers_on,
    parses,
)

OLD_IMPORT_RULE = "NM992"
#: at most this many edits of a dropped rule are given back one by one (each costs a render)
MAX_REFINE = 40


@dataclass(frozen=True)
class Request:
    """An import to add at the top of the module (``name`` None: ``import module [as asname]``)."""

    module: str
    name: str | None
    asname: str | None


@dataclass
class Plan:
    """What the engine renders: edits left out, markers added, import aliases removed, imports added."""

    dropped: set[int] = field(default_factory=set)
    markers: dict[int, list[tuple[str, str]]] = field(default_factory=dict)  # statement index -> (rule, message)
    removals: set[int] = field(default_factory=set)  # binding indices
    requests: list[Request] = field(default_factory=list)
    #: set by :func:`enforce`: the output still does not parse although the input did (the caller
    #: must not hand it back)
    broken: bool = False


@dataclass(frozen=True)
class Rendered:
    """A candidate output, with the names its edits used or unbound (``None``: unknown). Only those
    can have become undefined, so the undefined-name analysis runs only when one is not plainly bound
    (see :func:`migrator.selfcheck.check.check_program`)."""

    text: str
    names: frozenset[str] | None = None


Render = Callable[[Plan], Rendered]


@dataclass(frozen=True)
class EditInfo:
    rule: str
    statement: int  # index of the statement a marker about this edit goes above


@dataclass(frozen=True)
class ImportInfo:
    local: str  # the name the import binds
    module: str  # the module imported (``from M import x``: M)
    statement: int  # index of the import's statement
    #: the names of the functions and classes the import statement sits in, outermost first (() at module level):
    #: only code in that scope can use what it binds
    scope: tuple[str, ...] = ()


def enforce(source: str, edits: Sequence[EditInfo], imports: Sequence[ImportInfo], render: Render,
            drop: bool = True, old_imports: bool = True) -> tuple[str, Plan]:
    """Render the unit, check it, and repair or drop what an edit broke (``drop``; edits whose output
    does not parse are dropped whatever ``drop`` says), remove or mark the old-stack imports left
    behind (``old_imports``). Returns the output and the plan that produced it (its markers are to be
    reported as manual findings; ``plan.broken``: the output still does not parse)."""
    plan = Plan()
    new = render(plan)
    if new.text == source and not old_imports:
        return new.text, plan
    if not (drop or old_imports):
        # only the parse is checked: the other violations are NM991's, which is not selected
        if parses(new.text) or not parses(source):
            return new.text, plan
        new = _drop([], [Violation(SYNTAX, "", 1)], edits, render, plan, syntax_only=True)
        plan.broken = not parses(new.text)
        return new.text, plan
    after = _check(new)
    if after is None:
        return new.text, plan
    if new.text != source and any(v.kind != OLD_STACK for v in after) and (drop or _broken(after)):
        before = _check(Rendered(source)) or []
        intro = _introduced(before, after, syntax_only=not drop)
        if intro and _complete(intro, new.text, plan):
            candidate = render(plan)
            found = _check(candidate) or []
            if _score(_introduced(before, found)) < _score(intro):
                new, after = candidate, found
                intro = _introduced(before, after, syntax_only=not drop)
            else:
                plan.requests.clear()
        if intro:
            new = _drop(before, intro, edits, render, plan, syntax_only=not drop)
            after = _check(new) or []
            plan.broken = _broken(_introduced(before, after))
    # last, so that it sees the imports that dropped edits still need
    if old_imports and _old_imports(after, imports, new.text, plan, source):
        new = render(plan)
        plan.broken = plan.broken or (not parses(new.text) and parses(source))
    return new.text, plan


def _broken(violations: list[Violation]) -> bool:
    return any(v.kind == SYNTAX for v in violations)


def _score(violations: list[Violation]) -> tuple[int, int]:
    """How bad a candidate output is: code that does not parse first (nothing else can be checked in
    a part that does not parse, so fewer other violations there mean nothing), then the count."""
    return sum(1 for v in violations if v.kind == SYNTAX), len(violations)


def _check(rendered: Rendered) -> list[Violation] | None:
    try:
        return check_source(rendered.text, rendered.names)
    except RecursionError:  # pragma: no cover - absurdly nested code: nothing to say about it
        return None


def _introduced(before: list[Violation], after: list[Violation], syntax_only: bool = False) -> list[Violation]:
    return [v for v in introduced(before, after)
            if v.kind != OLD_STACK and (not syntax_only or v.kind == SYNTAX)]


# ------------------------------------------------------------------ old-stack imports


def _old_imports(after: list[Violation], imports: Sequence[ImportInfo], new: str, plan: Plan, source: str = "") -> bool:
    """Remove the unmarked old-stack imports nothing uses any more; mark those still used (one marker
    per import statement, naming the names still used). In a document's code block (IN_DOCUMENT), an import
    its block never used (the page's imports section of a file it builds) is marked, not removed."""
    modules = {v.name for v in after if v.kind == OLD_STACK}
    if not modules:
        return False
    uses, imported = _uses(new)
    # used by the code after this unit (a Markdown page's later blocks), or by code the unit runs from a string
    # (`eval(f"optimum.neuron.NeuronModelFor{task}")`)
    outside = OUTSIDE_NAMES.get() | _evaluated_names(new)
    original = _uses(source) if IN_DOCUMENT.get() and source else None
    lines = new.splitlines()
    kept: list[tuple[int, str]] = []
    still: dict[tuple[int, str], list[str]] = {}
    seen: dict[tuple[int, str], list[tuple[ast.stmt, int]]] = {}  # (import statement, name) -> its uses
    for i, info in enumerate(imports):
        if info.module not in modules:
            continue
        # `import torch.neuron` binds `torch`, which `import torch` binds too: its uses are the reads of torch.neuron
        submodule = info.module != info.local and any(
            o.local == info.local and o.module == info.local and o.scope == info.scope for o in imports)
        own = _uses_of(info, uses, imported, submodule)
        if not own and submodule and info.module in OLD_MEMBERS_OF_NATIVE \
                and _uses_of(info, uses, imported, submodule, native=True):
            continue  # (`import torch.neuron` for `torch.neuron.is_available()`: the native device module's)
        if own or info.local in outside:
            still.setdefault((info.statement, info.module), []).append(info.module if submodule else info.local)
            seen.setdefault((info.statement, info.module if submodule else info.local), []).extend(own)
        elif original is not None and not _uses_of(info, *original, submodule):
            kept.append((info.statement, info.module if submodule else info.local))  # a page's import it never used
        else:
            plan.removals.add(i)  # silently, like every import the edits left unused
    for statement, name in kept:
        message = f"Remove `{name}` here unless the code this page builds uses it: TorchNeuron lacks its module."
        notes = plan.markers.setdefault(statement, [])
        if (OLD_IMPORT_RULE, message) not in notes:
            notes.append((OLD_IMPORT_RULE, message))
    for (statement, module), names in still.items():
        spans = [(stmt, line if hasattr(stmt, "body") else None)
                 for n in names for stmt, line in seen.get((statement, n), ())]
        every_use_marked = all(seen.get((statement, n)) for n in names) and all(marked(lines, *span) for span in spans)
        if every_use_marked and any(t.startswith(KEEPS_OLD_STACK) for span in spans for t in markers_on(lines, *span)):
            # a use is kept on the old stack on purpose (its marker says so): so is the import it needs
            message = f"Keep this import for the old-stack code kept below ({names_listed(names)})."
        elif every_use_marked:
            # each use says what to do already: the import only goes once they are done
            message = f"Remove this import once the TODOs on {names_listed(names)} below are done."
        else:
            message = f"Replace {names_listed(names)} below with native code, then remove this import."
        notes = plan.markers.setdefault(statement, [])
        if (OLD_IMPORT_RULE, message) not in notes:
            notes.append((OLD_IMPORT_RULE, message))
    return True


def dropped_message(rule: str, why: Sequence[Violation]) -> str:
    """The marker of a statement whose rewrite by ``rule`` was dropped, in one short sentence naming
    the first kind of problem found (NM991's ``explain`` holds the long form of each kind)."""
    first = why[0]
    same = [v for v in why if v.kind == first.kind]
    if first.kind == KEYWORD:
        callee = first.name.split("(", 1)[0]
        keywords = [v.name.split("(", 1)[1].rstrip(")") for v in same if v.name.split("(", 1)[0] == callee]
        callee = callee.rsplit(".", 1)[-1]
        return fitted(f"Migrate this by hand: `{callee}` does not take {names_listed(keywords, 32)}, so {rule}'s "
                      "rewrite was left out.",
                      f"Migrate this by hand: `{callee}` does not take {names_listed(keywords, 1)}, so {rule}'s rewrite "
                      "was left out.")
    if first.kind == UNDEFINED:
        return f"Migrate this by hand: {rule}'s rewrite would leave {names_listed([v.name for v in same], 40)} undefined."
    if first.kind == UNRESOLVED:
        names = names_listed([v.name.replace(":", ".") for v in same], 40)
        return f"Migrate this by hand: {rule}'s rewrite imports {names}, missing in the pinned target."
    if first.kind == SYNTAX:
        return f"Migrate this by hand: {rule}'s rewrite {UNPARSABLE}."
    return f"Migrate this by hand: {rule}'s rewrite would leave `import {first.name}` without a marker."


def names_listed(names: Sequence[str], width: int = 48) -> str:
    """``names`` (deduplicated) as `` `a`, `b` and 3 more ``, within about ``width`` characters."""
    names = list(dict.fromkeys(names))
    shown: list[str] = []
    for n in names:
        if shown and len(", ".join([*shown, f"`{n}`"])) > width:
            break
        shown.append(f"`{n}`")
    rest = len(names) - len(shown)
    if rest:
        return ", ".join(shown) + f" and {rest} more"
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


Scope = tuple[str, ...]


Use = tuple[ast.stmt, int, Scope, str]  # the innermost statement, the line, the scope, the dotted chain read


def _uses(text: str) -> tuple[dict[str, list[Use]], frozenset[tuple[Scope, str]]]:
    """Names the module reads as names bound outside the function reading them, each with its uses (the
    innermost statement, the line of the use and the scope: the functions and classes around it, outermost
    first), and the (scope, name) of every import inside a function or class. A function's own variable spelled
    like an import (`grads = []` in a function of a module that imports `grads`) is not a use of the import."""
    try:
        tree = _AnnotationStrings().visit(ast.parse(text))
    except (SyntaxError, ValueError, RecursionError):
        return {}, frozenset()
    used: dict[str, list[Use]] = {}
    imported: set[tuple[Scope, str]] = set()
    chains: dict[int, str] = {}  # id(Name) -> the longest attribute chain read from it (`torch.neuron.trace`)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name):
                chain = ".".join([inner.id, *reversed(parts)])
                if len(chain) > len(chains.get(id(inner), "")):
                    chains[id(inner)] = chain

    def walk(node: ast.AST, local: frozenset[str], stmt: ast.stmt | None, scope: Scope) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, ast.stmt) else stmt
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = child.args
                annotations = [x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
                               if x is not None and x.annotation is not None]
                for sub in (*a.defaults, *a.kw_defaults, *annotations,
                            *getattr(child, "decorator_list", ()), getattr(child, "returns", None)):
                    if sub is not None:
                        walk(ast.Expression(sub), local, inner, scope)  # evaluated in the enclosing scope
                named = scope + (child.name,) if hasattr(child, "name") else scope
                walk_body(child, local | _function_locals(child), inner, named)
            elif isinstance(child, ast.ClassDef):
                for sub in (*child.decorator_list, *child.bases, *child.keywords):
                    walk(ast.Expression(sub), local, inner, scope)
                walk_body(child, local, inner, scope + (child.name,))
            elif isinstance(child, ast.Name):
                if child.id not in local and stmt is not None:
                    used.setdefault(child.id, []).append((stmt, child.lineno, scope, chains.get(id(child), child.id)))
            else:
                if scope and isinstance(child, (ast.Import, ast.ImportFrom)):
                    imported.update((scope, a.asname or a.name.split(".")[0]) for a in child.names)
                walk(child, local, inner, scope)

    def walk_body(function: ast.AST, local: frozenset[str], stmt: ast.stmt | None, scope: Scope) -> None:
        body = function.body if isinstance(function.body, list) else [function.body]
        for sub in body:
            if isinstance(sub, ast.stmt):
                walk(ast.Module(body=[sub], type_ignores=[]), local, sub, scope)
            else:
                walk(ast.Expression(sub), local, stmt, scope)

    walk(tree, frozenset(), None, ())
    return used, frozenset(imported)


class _AnnotationStrings(ast.NodeTransformer):
    """Replaces each string annotation (`x: "torch.nn.Module | Model"`, `List["Model"]`) by the expression
    it spells, at the string's line: a type checker reads the names in it, as pyflakes does."""

    def _annotation(self, node: ast.expr | None) -> ast.expr | None:
        if node is None:
            return None
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                return _Quoted().visit(node)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = self._annotation(node.annotation)
        return node

    def visit_FunctionDef(self, node):
        node.returns = self._annotation(node.returns)
        return self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AnnAssign:
        node.annotation = self._annotation(node.annotation)
        return self.generic_visit(node)


class _Quoted(ast.NodeTransformer):
    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if not isinstance(node.value, str):
            return node
        try:
            expr = ast.parse(node.value.strip(), mode="eval").body
        except SyntaxError:
            return node
        for sub in ast.walk(expr):
            if hasattr(sub, "lineno"):
                sub.lineno, sub.col_offset = node.lineno, node.col_offset
        return self.visit(expr)


def _evaluated_names(text: str) -> frozenset[str]:
    """The names in the string code the unit passes to ``eval``/``exec`` (literal parts of an f-string too)."""
    if "eval(" not in text and "exec(" not in text:
        return frozenset()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return frozenset()
    found: set[str] = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("eval", "exec")
                and node.args):
            arg = node.args[0]
            parts = arg.values if isinstance(arg, ast.JoinedStr) else [arg]
            for part in parts:
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    found.update(re.findall(r"(?<![\w.])[A-Za-z_]\w*", part.value))
    return frozenset(found)


def _uses_of(info: ImportInfo, uses: dict[str, list[Use]], imported: frozenset[tuple[Scope, str]],
             submodule: bool = False, native: bool = False) -> list[tuple[ast.stmt, int]]:
    """The uses (statement, line) of what ``info`` binds: those in its scope and the scopes nested in it, less
    those in a nested scope that imports the name again itself. With ``submodule`` (``import torch.neuron``
    beside ``import torch``: both bind ``torch``), only the reads through the submodule (``torch.neuron.x``), and
    of a module that is native too (``OLD_MEMBERS_OF_NATIVE``) only its old members' unless ``native``."""
    s = info.scope
    old = OLD_MEMBERS_OF_NATIVE.get(info.module) if submodule and not native else None
    return [(stmt, line) for stmt, line, scope, chain in uses.get(info.local, ())
            if scope[:len(s)] == s
            and not any((scope[:k], info.local) in imported for k in range(len(s) + 1, len(scope) + 1))
            and (not submodule or chain == info.module or chain.startswith(info.module + "."))
            # (`torch.neuron.is_available()`: the native device module's, not an old-stack use)
            and (old is None or chain == info.module or chain[len(info.module) + 1:].split(".")[0] in old)]


def _function_locals(function: ast.AST) -> frozenset[str]:
    """The names a function binds itself (arguments, stores in its body outside nested functions),
    minus those it declares global/nonlocal; its imports are not counted (they are imports)."""
    args = function.args
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    names.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    declared: set[str] = set()
    todo = list(function.body) if isinstance(function.body, list) else [function.body]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Lambda, ast.Import, ast.ImportFrom, ast.comprehension)):
            continue
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        todo.extend(ast.iter_child_nodes(node))
    return frozenset(names - declared)


# ------------------------------------------------------------------ completion


def _complete(intro: list[Violation], new: str, plan: Plan) -> bool:
    """For each name left undefined that an import elsewhere in the output binds, ask for that import
    at the top of the module."""
    names = {v.name for v in intro if v.kind == UNDEFINED}
    if not names:
        return False
    try:
        tree = ast.parse(new)
    except (SyntaxError, ValueError, RecursionError):
        return False
    found: dict[str, Request] = {}
    for node in _outside_functions(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                local = a.asname or a.name.split(".")[0]
                if local in names:
                    found.setdefault(local, Request(a.name if a.asname else a.name.split(".")[0], None, a.asname))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                local = a.asname or a.name
                if local in names and a.name != "*":
                    found.setdefault(local, Request(node.module, a.name, a.asname))
    plan.requests.extend(found.values())
    return bool(found)


def _outside_functions(tree: ast.AST):
    """The nodes of ``tree`` outside function bodies: an import a function makes stays local to it (hoisting
    it to the top of the module would make the module import what only the function needed)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(n for n in ast.iter_child_nodes(node)
                    if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))


# ------------------------------------------------------------------ dropping edits


def _drop(before: list[Violation], intro: list[Violation], edits: Sequence[EditInfo], render: Render,
          plan: Plan, syntax_only: bool = False) -> Rendered:
    def left_after(trial: Plan) -> list[Violation]:
        return _introduced(before, _check(render(trial)) or [], syntax_only)

    by_rule: dict[str, list[int]] = {}
    for i, e in enumerate(edits):
        by_rule.setdefault(e.rule, []).append(i)
    score = _score(intro)
    reasons: dict[str, list[Violation]] = {}
    # 1. whole rules, greedily, while the output gets better (code that parses first)
    while intro:
        best = None
        for rule, idx in by_rule.items():
            if rule in reasons:
                continue
            left = left_after(Plan(plan.dropped | set(idx), plan.markers, plan.removals, plan.requests))
            if _score(left) < score and (best is None or _score(left) < best[1]):
                best = (rule, _score(left), left)
        if best is None:
            break
        rule, score, left = best
        reasons[rule] = [v for v in intro if v.key not in {x.key for x in left}] or intro
        plan.dropped |= set(by_rule[rule])
        intro = left
    if _broken(intro):
        # several rules each produced code that does not parse (dropping one alone did not help):
        # drop them all, then give them back one by one while the output stays as clean
        rest = [rule for rule in by_rule if rule not in reasons]
        left = left_after(Plan(plan.dropped | {i for r in rest for i in by_rule[r]}, plan.markers, plan.removals,
                               plan.requests))
        if _score(left) < score:
            why = [v for v in intro if v.kind == SYNTAX]
            plan.dropped |= {i for r in rest for i in by_rule[r]}
            score, intro = _score(left), left
            for rule in rest:
                back = Plan(plan.dropped - set(by_rule[rule]), plan.markers, plan.removals, plan.requests)
                trial = left_after(back)
                if _score(trial) <= score:
                    plan.dropped -= set(by_rule[rule])
                    score, intro = _score(trial), trial
                else:
                    reasons[rule] = why
    # 2. give back the edits of a dropped rule one by one where the output stays as clean
    for rule in reasons:
        idx = by_rule[rule]
        if len(idx) > MAX_REFINE:
            continue
        for i in idx:
            if _score(left_after(Plan(plan.dropped - {i}, plan.markers, plan.removals, plan.requests))) <= score:
                plan.dropped.discard(i)
    # 3. a statement is migrated whole or not at all: the other rules' edits of a statement whose
    # rewrite was dropped go too (a half-migrated statement is worse than the original)
    statements = {edits[i].statement for i in plan.dropped}
    whole = {i for i, e in enumerate(edits) if e.statement in statements} - plan.dropped
    plan.dropped |= whole
    if whole and _score(left := left_after(plan)) > score:
        # an edit dropped with its statement was what the same rule's edits elsewhere relied on (a dict
        # spread into the call, removed above it): those go too, rule by rule while that helps
        # (all of them, then back one by one where that is no worse: its edits that did not need it stay)
        for rule in dict.fromkeys(edits[i].rule for i in sorted(whole)):
            dropped = plan.dropped | set(by_rule[rule])
            fewer = left_after(Plan(dropped, plan.markers, plan.removals, plan.requests))
            for i in sorted(set(by_rule[rule]) - plan.dropped)[:MAX_REFINE]:
                again = left_after(Plan(dropped - {i}, plan.markers, plan.removals, plan.requests))
                if _score(again) <= _score(fewer):
                    dropped, fewer = dropped - {i}, again
            if _score(fewer) < _score(left):
                plan.dropped, left = dropped, fewer
    # 4. an import asked for a name that only dropped edits used goes with them
    if plan.requests:
        now = _score(left_after(plan))
        for request in list(plan.requests):
            trial = Plan(plan.dropped, plan.markers, plan.removals, [r for r in plan.requests if r is not request])
            if (fewer := _score(left_after(trial))) <= now:
                plan.requests.remove(request)
                now = fewer
    # 5. a marker above each statement whose edits were dropped
    for rule, why in reasons.items():
        message = dropped_message(rule, why)
        for i in by_rule[rule]:
            if i in plan.dropped:
                notes = plan.markers.setdefault(edits[i].statement, [])
                if (DROPPED_RULE, message) not in notes:
                    notes.append((DROPPED_RULE, message))
    return render(plan)
