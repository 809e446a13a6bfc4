"""The contract between the engines and the rules: what a rule is, and what it sees.

The engine knows rules only through these base classes: an id, a title, the file
kinds it applies to, the substrings that can trigger it, the qualified names it
owns, its documentation, and either node handlers (Python rules) or a function
over lines (text rules). A rule sees one unit through a context:
:class:`PythonContext` (the original libcst tree, shared analyses, edit requests)
or :class:`TextContext` (the original lines, line edits). Both contexts live here,
below both engines (``python_engine``, ``text_engine`` import from this module,
never the reverse), so that a rule module imports the contracts from this one
module only. Rule modules live in :mod:`codemods`.
"""

from __future__ import annotations

import functools
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Iterable, Sequence, Union

import libcst as cst

from migrator.imports import Binding, ImportIndex, ImportRequest, build_dotted, index_imports
from migrator.model import (
    ENCLOSING_TEXT, IN_KERNEL, MARKER_PREFIX, MARKER_RE, Finding, LaunchFact, fact_values, facts_of, ignored_rules, is_silenced,
    marker_text)
from migrator.scopes import FUNCTIONS, local_names

RULE_ID_RE = re.compile(r"^NM\d{3}$")
FIX_KINDS = ("auto", "manual", "mixed")


class Rule:
    """Metadata every rule declares. Subclass :class:`PythonRule` or :class:`TextRule`."""

    id: ClassVar[str]
    title: ClassVar[str]
    #: "auto" (always fixes), "manual" (only leaves markers) or "mixed".
    fix: ClassVar[str] = "auto"
    #: file kinds (see migrator.model.KINDS) the rule applies to.
    kinds: ClassVar[tuple[str, ...]] = ("python",)
    #: a unit whose text contains none of these substrings is never shown to the rule.
    triggers: ClassVar[tuple[str, ...]] = ()
    #: project-wide context: a unit containing one of these (and none of ``triggers``) is shown to
    #: the rule too, but only in a run where some file matched the rule's own ``triggers`` -- e.g.
    #: NM105 reports ``device_map="auto"`` in the plain-Transformers files of a project that is being
    #: migrated. The rule asks ``ctx.in_project`` (True in such runs) and decides what to do.
    project_triggers: ClassVar[tuple[str, ...]] = ()
    #: project facts: ``{fact: substrings}``; when any file of the run (of any kind, migrated or not)
    #: contains one of the substrings, ``fact`` is in ``ctx.facts`` for every unit of the run -- e.g.
    #: the dependency rules add ``trl`` to an install line when the project's code uses TRL.
    project_probes: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: launch facts: a launcher of the run (a shell or Slurm script, a Dockerfile, a notebook's shell
    #: lines and ``%env``) whose text contains one of these substrings is read by :meth:`launch_facts`;
    #: each fact it yields holds for the script it names only (``ctx.fact_values`` in that file's
    #: units), not for the whole run: ``XLA_USE_BF16=1 torchrun train.py`` says nothing of eval.py.
    launch_probes: ClassVar[tuple[str, ...]] = ()
    #: project facts (of ``project_probes``) that put the rule in the run as its own ``triggers`` in a file
    #: would: the units matching its ``project_triggers`` are shown to it -- e.g. NM523 raises a
    #: `pip install transformers==4.6.0` line of a run whose code uses the old stack.
    project_facts_in: ClassVar[tuple[str, ...]] = ()
    #: qualified names (``optimum.neuron.NeuronTrainer``) whose calls and arguments this rule
    #: alone rewrites. The rename table still renames the name itself (import and uses)
    #: unless ``renames_owned`` is True (then the rule renames it too).
    owns: ClassVar[tuple[str, ...]] = ()
    renames_owned: ClassVar[bool] = False
    #: documentation, shown by ``neuron-migrate explain``.
    why: ClassVar[str] = ""
    before: ClassVar[str] = ""
    after: ClassVar[str] = ""
    caveats: ClassVar[str] = ""
    #: the long forms of this rule's markers: ``(marker, explanation)`` pairs. ``marker`` is the
    #: one-sentence text the rule writes (``{...}`` stands for a part that varies, e.g. a name);
    #: ``explanation`` is the why, the background and the alternatives. ``explain`` lists them, and
    #: the report attaches the explanation to each finding whose message matches (``detail``).
    markers: ClassVar[tuple[tuple[str, str], ...]] = ()

    @classmethod
    def marker_detail(cls, message: str) -> str | None:
        """The long form of a marker this rule wrote with ``message`` (see ``markers``), or None."""
        for pattern, explanation in cls.markers:
            if _marker_pattern(pattern).fullmatch(" ".join(message.split())):
                return " ".join(textwrap.dedent(explanation).split())
        return None

    @classmethod
    def applies_to(cls, text: str, project: frozenset[str] = frozenset(),
                   found: frozenset[str] | None = None) -> bool:
        """Whether a unit with this text is shown to the rule (``project``: ids of the rules whose
        project-wide context is on in this run, see ``project_triggers``; ``found``: the triggers that
        occur in ``text``, where the caller found them in one pass: :class:`TriggerScan`)."""
        has = text.__contains__ if found is None else found.__contains__
        if not cls.triggers or any(has(t) for t in cls.triggers):
            return True
        return cls.id in project and any(has(t) for t in cls.project_triggers)

    @classmethod
    def launch_facts(cls, kind: str, text: str) -> Iterable[LaunchFact]:
        """The facts one launcher unit states about the scripts it launches (see ``launch_probes``).
        ``kind``: "shell" (a shell or Slurm script; a notebook's ``%env`` settings, as ``export``
        lines), "notebook-shell" (a notebook's ``!`` line or ``%%bash`` cell: a child process of the
        kernel, preceded by the kernel's ``%env`` settings as ``export`` lines) or "dockerfile"."""
        return ()

    @classmethod
    def doc(cls) -> RuleDoc:
        return RuleDoc(
            id=cls.id,
            title=cls.title,
            fix=cls.fix,
            kinds=cls.kinds,
            why=textwrap.dedent(cls.why).strip(),
            before=textwrap.dedent(cls.before).strip("\n"),
            after=textwrap.dedent(cls.after).strip("\n"),
            caveats=textwrap.dedent(cls.caveats).strip(),
            markers=tuple((" ".join(m.split()), " ".join(textwrap.dedent(e).split())) for m, e in cls.markers),
        )


@functools.lru_cache(maxsize=None)
def _marker_pattern(pattern: str) -> re.Pattern:
    """A marker text with ``{...}`` placeholders as a regular expression (each matches any text)."""
    parts = re.split(r"\{[^{}]*\}", " ".join(pattern.split()))
    return re.compile(".+?".join(re.escape(p) for p in parts), re.DOTALL)


@dataclass(frozen=True)
class RuleDoc:
    id: str
    title: str
    fix: str
    kinds: tuple[str, ...]
    why: str
    before: str
    after: str
    caveats: str
    #: (marker, explanation) pairs: the long forms of the rule's markers (see ``Rule.markers``)
    markers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[cst.CSTNode, "PythonContext"], None]


class TriggerScan:
    """Which of some rules' ``triggers`` and ``project_triggers`` occur in a text, found in one pass (an
    Aho-Corasick automaton, ahocorasick-rs) instead of one substring search per trigger and rule:
    :meth:`Rule.applies_to` takes the answer. :meth:`found` is None without ahocorasick-rs."""

    def __init__(self, rules: Iterable[type[Rule] | Rule]) -> None:
        self._patterns = sorted({t for r in rules for t in (*r.triggers, *r.project_triggers)} - {""})
        self._automaton = None
        try:
            import ahocorasick_rs
        except ImportError:  # pragma: no cover - a dependency; the substring tests answer the same
            return
        if self._patterns:
            self._automaton = ahocorasick_rs.AhoCorasick(self._patterns,
                                                         implementation=ahocorasick_rs.Implementation.DFA)

    def found(self, text: str) -> frozenset[str] | None:
        """The triggers occurring in ``text`` (overlapping ones too; ``""``, in every text, included)."""
        if self._automaton is None:
            return None
        return frozenset([self._patterns[i] for i, _start, _end in
                          self._automaton.find_matches_as_indexes(text, overlapping=True)] + [""])


_SCANS: dict[tuple, TriggerScan] = {}


def trigger_scan(rules: Sequence[Rule]) -> TriggerScan:
    """The :class:`TriggerScan` of these rules (built once per set of triggers)."""
    key = tuple((r.triggers, r.project_triggers) for r in rules)
    scan = _SCANS.get(key)
    if scan is None:
        scan = _SCANS[key] = TriggerScan(rules)
    return scan


class PythonRule(Rule):
    """A rule over Python code (``.py`` files, notebook cells, markdown fences).

    ``handlers()`` maps libcst node types to functions called once for every node
    of that type, in one shared pass over the ORIGINAL tree. Handlers never
    modify nodes; they ask the context for edits, imports and findings.
    """

    kinds = ("python", "notebook", "markdown")

    def handlers(self) -> dict[type, Handler]:  # pragma: no cover - abstract
        raise NotImplementedError

    def finish(self, ctx: PythonContext) -> None:
        """Called once after the pass, before edits are applied (optional)."""


class TextRule(Rule):
    """A rule over lines of a non-Python unit (shell, requirements, Dockerfile...)."""

    kinds = ("shell",)

    def apply(self, ctx: TextContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class Owners:
    """Which rule owns a qualified name. ``owns`` entries ending in ``.*`` own a subtree."""

    def __init__(self, rules: list[Rule] | tuple[Rule, ...] = ()) -> None:
        self.exact: dict[str, str] = {}
        self.prefixes: list[tuple[str, str]] = []
        self.self_renaming: set[str] = {r.id for r in rules if r.renames_owned}
        for rule in rules:
            for name in rule.owns:
                if name.endswith(".*"):
                    self.prefixes.append((name[:-1], rule.id))
                else:
                    other = self.exact.setdefault(name, rule.id)
                    if other != rule.id:
                        raise ValueError(f"{name} is owned by both {other} and {rule.id}")
        self.prefixes.sort(key=lambda p: -len(p[0]))

    def renames(self, qualified: str) -> bool:
        """True when the owner of ``qualified`` renames it itself (the table must not)."""
        owner = self.get(qualified)
        return owner is not None and owner in self.self_renaming

    def get(self, qualified: str) -> str | None:
        found = self.exact.get(qualified)
        if found is not None:
            return found
        for prefix, rule_id in self.prefixes:
            if qualified.startswith(prefix):
                return rule_id
        return None


# ------------------------------------------------------------------ what a Python rule sees

Replacement = Union[cst.CSTNode, cst.RemovalSentinel, Callable[[cst.CSTNode], cst.CSTNode]]
STATEMENT_TYPES = (cst.SimpleStatementLine, cst.BaseCompoundStatement)


@dataclass
class _Edit:
    rule: str
    node: cst.CSTNode
    new: Replacement
    ancestors: tuple[cst.CSTNode, ...]
    deep: bool = False  # ancestors end above the node at an unknown depth


@dataclass
class _Note:
    rule: str
    node: cst.CSTNode
    message: str
    fix: str
    statement: cst.CSTNode | None  # where a marker goes (manual findings only)
    ancestors: tuple[cst.CSTNode, ...] = ()
    deep: bool = False
    detail: str | None = None  # a marker's long form (manual findings only)
    #: other wordings of the same marker: one of them already above the statement counts as this one
    same_as: tuple[str, ...] = ()


@dataclass
class _ImportAsk:
    rule: str
    request: ImportRequest
    node: cst.CSTNode | None
    ancestors: tuple[cst.CSTNode, ...] = ()
    replaces: Binding | None = None  # the import this one is placed at (and may stand in for)

    @property
    def bound(self) -> str:
        """The local name the requested import binds."""
        r = self.request
        if r.asname:
            return r.asname
        return r.name if r.name is not None else r.module.split(".")[0]


#: a line holding only a comment
_COMMENT_LINE = re.compile(r"(?m)^[ \t]*#.*$")


class NameClash(Exception):
    """A rule cannot refer to its target without clashing with a name of the module."""


class PythonContext:
    """What a rule handler sees: the original tree, shared analyses, and edit requests."""

    def __init__(self, module: cst.Module, source: str, owners: Owners) -> None:
        self.module = module
        self.source = source
        self.imports: ImportIndex = index_imports(module)
        self.imports.around = self.enclosing
        #: which rule owns a qualified name (across every known rule, selected or not)
        self.owners = owners
        #: ancestors of the node being handled, root first; the node itself is last
        self.stack: list[cst.CSTNode] = []
        self.rule_id = ""
        self.project: frozenset[str] = frozenset()
        #: the self-check's findings selected for this run (``migrator.model.SELF_CHECKS``): with NM992,
        #: old-stack imports that nothing uses after the edits are removed by the engine
        self.checks: frozenset[str] = frozenset()
        #: per-rule scratch space for one unit (rules are stateless across units)
        self.scratch: dict[str, dict] = {}
        self._edits: list[_Edit] = []
        self._notes: list[_Note] = []
        self._asks: list[_ImportAsk] = []
        self._removals: list[tuple[str, Binding]] = []
        #: per (target, style): the expressions handed out, with the import each relies on
        self._names_for: dict[tuple[str, str], list[tuple[str, Binding | None]]] = {}
        #: Name nodes referring to import bindings, with their ancestors (for dead-import detection)
        self._refs: list[tuple[cst.Name, tuple[cst.CSTNode, ...]]] = []
        #: ancestors of every statement and import alias, recorded by the pass
        self._known: dict[int, tuple[cst.CSTNode, ...]] = {}
        #: names each function binds itself (see qualname)
        self._locals: dict[int, frozenset[str]] = {}
        self._code: str | None = None

    # ---------------------------------------------------------------- queries
    def qualname(self, node: cst.BaseExpression) -> str | None:
        """The qualified name ``node`` refers to through the module's imports; None as well where a
        function around the node being handled binds the root name itself (``grads = []`` in a
        module that imports ``grads``: ``grads.append`` is the list's)."""
        return self.qualname_at(node, self.stack)

    def qualname_at(self, node: cst.BaseExpression, ancestors: Sequence[cst.CSTNode]) -> str | None:
        """:meth:`qualname` of a node whose ancestors are ``ancestors`` (a walk of the rule's own)."""
        qualified = self.imports.resolve(node)
        if qualified is None:
            return None
        root = node
        while type(root) is cst.Attribute:
            root = root.value
        return None if type(root) is cst.Name and self.bound_locally(root.value, ancestors) else qualified

    def bound_locally(self, name: str, ancestors: Sequence[cst.CSTNode]) -> bool:
        """Whether a function among ``ancestors`` binds ``name`` itself (see :mod:`migrator.scopes`)."""
        for anc in ancestors:
            if type(anc) in FUNCTIONS:  # (libcst's node classes are final: a type test is exact, and fast)
                names = self._locals.get(id(anc))
                if names is None:
                    names = self._locals[id(anc)] = local_names(anc, ":=" in self.source)
                if name in names:
                    return True
        return False

    def class_qualname(self, node: cst.BaseExpression) -> str | None:
        """Like :meth:`qualname`, and for a class the module defines at its top level (``class
        MyModel(NeuronModelForCausalLM)``), the qualified name of the imported class it derives from
        (its first base, followed through the module's own classes): ``MyModel.from_pretrained(...)``
        is then a load of that class; likewise for a module-level alias assigned once
        (``Model = NeuronModelForCausalLM``)."""
        qual = self.qualname(node)
        if qual is not None or not isinstance(node, cst.Name):
            return qual
        bases = self.scratch.get("_class_bases")
        if bases is None:
            bases = {}
            assigned: dict[str, int] = {}
            for stmt in self.module.body:
                if isinstance(stmt, cst.ClassDef) and stmt.bases and stmt.bases[0].keyword is None:
                    bases[stmt.name.value] = stmt.bases[0].value
                elif isinstance(stmt, cst.SimpleStatementLine):
                    for small in stmt.body:
                        if isinstance(small, cst.Assign):
                            for t in small.targets:
                                if isinstance(t.target, cst.Name):
                                    assigned[t.target.value] = assigned.get(t.target.value, 0) + 1
                                    if len(small.targets) == 1 and isinstance(small.value, (cst.Name, cst.Attribute)):
                                        bases.setdefault(t.target.value, small.value)
            # an alias assigned more than once may hold anything
            bases = {k: v for k, v in bases.items() if assigned.get(k, 0) <= 1}
            self.scratch["_class_bases"] = bases
        seen: set[str] = set()
        while isinstance(node, cst.Name) and node.value in bases and node.value not in seen:
            seen.add(node.value)
            node = bases[node.value]
            qual = self.imports.resolve(node)
            if qual is not None:
                return qual
        return None

    def owner(self, qualified: str) -> str | None:
        """The rule that owns the calls/arguments of ``qualified`` (None: no rule)."""
        return self.owners.get(qualified)

    def owner_renames(self, qualified: str) -> bool:
        """True when the owner of ``qualified`` also renames it (the rename table must not)."""
        return self.owners.renames(qualified)

    @property
    def code(self) -> str:
        """The source with its comment lines blanked (same length and lines): what a rule searching the
        text for a hint should read, so that the words of a marker an earlier run wrote
        (``LOCAL_RANK``, ``init_process_group``...) do not change its decision on the next run."""
        if self._code is None:
            self._code = _COMMENT_LINE.sub(lambda m: " " * len(m.group(0)), self.source)
        return self._code

    def references(self, local: str) -> list[tuple[cst.Name, tuple[cst.CSTNode, ...]]]:
        """The ``Name`` nodes spelling the import-bound name ``local`` outside import statements
        (loads and stores, not attribute names nor keywords), each with its ancestors, root first.
        Complete only once the pass is over: call it from ``finish()``."""
        return [(n, anc) for n, anc in self._refs if n.value == local and not self.bound_locally(local, anc)]

    @property
    def whole_text(self) -> str:
        """The whole text of the notebook or Markdown page this unit is a piece of; the unit's source otherwise."""
        return ENCLOSING_TEXT.get() or self.source

    @property
    def in_kernel(self) -> bool:
        """True when the unit is a notebook's kernel program: one process, which torchrun never starts."""
        return IN_KERNEL.get()

    @property
    def in_project(self) -> bool:
        """True when the run includes a file matching the current rule's own ``triggers`` (the
        project-wide context of ``Rule.project_triggers``); False for a lone unit."""
        return self.rule_id in self.project

    @property
    def facts(self) -> frozenset[str]:
        """The names of the project facts this unit has: those found anywhere in the run
        (``Rule.project_probes``) and those the run's launchers state about this file
        (``Rule.launch_facts``)."""
        return facts_of(self.project)

    def fact_values(self, fact: str) -> frozenset[str]:
        """The values of the launch fact ``fact`` for this file (empty: no launcher of the run states it)."""
        return fact_values(self.project, fact)

    @property
    def parent(self) -> cst.CSTNode | None:
        return self.stack[-2] if len(self.stack) > 1 else None

    def statement(self) -> cst.CSTNode | None:
        """The innermost statement around the node being handled."""
        for node in reversed(self.stack):
            if isinstance(node, STATEMENT_TYPES):
                return node
        return None

    def is_ignored(self, node: cst.CSTNode, rule: str | None = None) -> bool:
        """True when a ``# neuron-migrate: ignore`` comment on the simple statement
        ``node`` (or around it) silences ``rule`` (default: the current rule)."""
        if "neuron-migrate" not in self.source:
            return False
        stmt = node
        if not isinstance(stmt, cst.SimpleStatementLine):
            stmt = next((a for a in reversed(self._ancestors_of(node)[0]) if isinstance(a, cst.SimpleStatementLine)), None)
            if stmt is None:
                return False
        code = self.module.code_for_node(stmt.with_changes(leading_lines=()))
        rule = rule or self.rule_id
        return any(is_silenced(ignored_rules(line), rule) for line in code.splitlines())

    def local_state(self) -> dict:
        return self.scratch.setdefault(self.rule_id, {})

    # ---------------------------------------------------------------- edits
    def edited(self, node: cst.CSTNode, ancestors: Sequence[cst.CSTNode] = ()) -> bool:
        """Whether some rule's edit so far replaces ``node`` or one of its ``ancestors`` (the stack it was
        seen with): a rule finishing late asks what the others left."""
        ids = {id(node), *(id(a) for a in ancestors)}
        return any(id(e.node) in ids for e in self._edits)

    def marked(self, node: cst.CSTNode, ancestors: Sequence[cst.CSTNode] = ()) -> bool:
        """Whether some rule so far asked a person to act (a marker) at ``node`` or at one of its ``ancestors`` (the
        stack it was seen with) within its statement: a rule finishing late does not mark again what another one
        marked there."""
        start = max((i for i, a in enumerate(ancestors) if isinstance(a, STATEMENT_TYPES)), default=0)
        ids = {id(node), *(id(a) for a in ancestors[start:])}
        return any(n.fix == "manual" and id(n.node) in ids for n in self._notes)

    def replace(self, node: cst.CSTNode, new: Replacement) -> None:
        """Replace ``node`` (an original node) by a node, a function of its updated
        form (so that edits inside it are kept), or ``cst.RemovalSentinel.REMOVE``."""
        anc, deep = self._ancestors_of(node)
        self._edits.append(_Edit(self.rule_id, node, new, anc, deep))

    def insert_after(
        self,
        statement: cst.BaseStatement,
        new: Sequence[cst.BaseStatement] | Callable[[cst.BaseStatement], Sequence[cst.BaseStatement]],
    ) -> None:
        """Insert statements right after ``statement`` (an original statement), in its block.

        ``new`` may be a function of the updated statement (to follow its quoting, say).
        """

        def apply(updated: cst.BaseStatement) -> cst.FlattenSentinel:
            extra = list(new(updated) if callable(new) else new)
            return cst.FlattenSentinel([updated, *extra])

        self.replace(statement, apply)

    def remove_statement(self, small: cst.BaseSmallStatement | cst.BaseStatement) -> None:
        """Remove a statement (a small statement on a line of several removes just that)."""
        self.replace(small, cst.RemovalSentinel.REMOVE)

    def _ancestors_of(self, node: cst.CSTNode) -> tuple[tuple[cst.CSTNode, ...], bool]:
        """(ancestors root first, deep): deep means the node lies somewhere below them."""
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i] is node:
                return tuple(self.stack[:i]), False
        known = self._known.get(id(node))
        if known is not None:
            return known, False
        return tuple(self.stack), True  # a descendant of the current node (or not yet visited)

    def finding(self, node: cst.CSTNode, message: str, fix: str = "applied") -> None:
        """Report what was done (``applied``) at ``node``."""
        anc, deep = self._ancestors_of(node)
        self._notes.append(_Note(self.rule_id, node, message, fix, None, anc, deep))

    def marker(self, node: cst.CSTNode, message: str, rule: str | None = None, detail: str | None = None,
               same_as: Sequence[str] = ()) -> None:
        """Ask a person to act: a ``# TODO(neuron-migrate NMxxx)`` comment above the
        statement around ``node`` plus a manual finding. ``message``: one sentence of at most
        120 characters saying what to do here; ``detail``: its long form for the report (default:
        the matching entry of the rule's ``markers``); ``same_as``: the other wordings of this marker,
        where the wording depends on code other rules rewrite (an earlier run's wording, already above
        the statement, stands: the next run does not add the other one)."""
        anc, deep = self._ancestors_of(node)
        self._notes.append(_Note(rule or self.rule_id, node, message, "manual", None, anc, deep, detail,
                                 tuple(same_as)))

    # ---------------------------------------------------------------- imports
    def add_import(self, module: str, name: str | None = None, asname: str | None = None,
                   anchor: Binding | None = None) -> None:
        """Ask for ``from module import name [as asname]`` (or ``import module``).

        With ``anchor``, the new import goes where that binding's import line is. An import
        is only added if the migrated code uses the name it binds (in a replacement), or if it
        stands in for the ``anchor`` import that goes away.
        """
        if anchor is not None:
            order = 0
            for small_index, small in enumerate(anchor.line.body):
                names = getattr(small, "names", ())
                if small is anchor.statement and not isinstance(names, cst.ImportStar):
                    order = small_index * 1000 + next((i for i, a in enumerate(names) if a is anchor.alias), 0)
            req = ImportRequest(module, name, asname, anchor.line, order)
        else:
            req = ImportRequest(module, name, asname, None, 10**9)
        enclosing = self.enclosing()
        for a in self._asks:
            if (a.request.module, a.request.name, a.request.asname) == (module, name, asname) and (
                    a.replaces is None or a.replaces.reaches(enclosing)) and not (
                    anchor is not None and a.replaces is not None and anchor.line is not a.replaces.line
                    and anchor.local == a.replaces.local):
                # one import serves every use it reaches (a second one goes where it is asked); an import
                # statement that bound the same name again (a notebook cell importing what an earlier cell
                # did) gets its own replacement: the cell stays runnable on its own
                return
        node = self.stack[-1] if self.stack else None
        self._asks.append(_ImportAsk(self.rule_id, req, node, tuple(self.stack[:-1]), anchor))

    @property
    def scope(self) -> cst.CSTNode:
        """The innermost function (or lambda) around the node being handled, or the module."""
        return next((n for n in reversed(self.stack) if isinstance(n, (cst.FunctionDef, cst.Lambda))), self.module)

    @property
    def scope_id(self) -> int:
        """id() of :attr:`scope`, 0 at module level: a key of what a rule tracks per function."""
        scope = self.scope
        return 0 if scope is self.module else id(scope)

    def enclosing(self) -> set[int]:
        """id() of the nodes around the node being handled (where a name emitted now is used)."""
        return {id(n) for n in self.stack}

    def remove_import(self, binding: Binding) -> None:
        """Drop an import alias even if names still refer to it (e.g. side-effect imports)."""
        self._removals.append((self.rule_id, binding))

    def name_for(self, target: str, anchor: Binding | None = None, style: str = "from") -> cst.BaseExpression:
        """An expression referring to ``target`` (``pkg.mod.Name``), importing it if needed.

        ``style="from"`` prefers ``from pkg.mod import Name`` (when ``Name`` is free),
        ``style="module"`` prefers ``import pkg.mod`` + ``pkg.mod.Name``.
        """
        enclosing = self.enclosing()
        for expr, reach in self._names_for.get((target, style), ()):
            if (reach is None or reach.reaches(enclosing)) and not (
                    anchor is not None and reach is not None and anchor.line is not reach.line
                    and anchor.local == reach.local):
                # (an import that binds the old name again, a later notebook cell's, gets its own replacement)
                return build_dotted(expr)
        module, _, name = target.rpartition(".")
        reach: Binding | None = None  # the import the name comes from (None: a module-level one)
        existing = self.imports.binding_for(target, enclosing)
        if existing is not None and not self._is_removed(existing.local, target):
            expr, reach = existing.local, existing
        elif style == "from" and self.imports.is_free(name, target) and self._free_of_requests(name, target):
            self.add_import(module, name, None, anchor)
            expr, reach = name, anchor
        else:
            mod = self.imports.binding_for(module, enclosing)
            if mod is not None and not self._is_removed(mod.local, module):
                expr, reach = f"{mod.local}.{name}", mod
            else:
                root = module.split(".")[0]
                if not self.imports.is_free(root, root):
                    raise NameClash(f"cannot import {module}: the name {root!r} is already used")
                self.add_import(module, None, None, anchor)
                expr, reach = target, anchor
        self._names_for.setdefault((target, style), []).append((expr, reach))
        return build_dotted(expr)

    def _is_removed(self, local: str, qualified: str) -> bool:
        return any(b.local == local and b.qualified == qualified for _, b in self._removals)

    def _free_of_requests(self, name: str, target: str) -> bool:
        for ask in self._asks:
            r = ask.request
            bound = r.asname or r.name
            if bound == name and f"{r.module}.{r.name}" != target:
                return False
        return True


# ------------------------------------------------------------------ what a text rule sees

@dataclass
class LineEdit:
    """One pending line replacement; ``TextContext.replace_lines`` returns it so that a rule can
    update it later in the same unit (``TextContext.update_lines``)."""

    rule: str
    start: int  # 0-based, inclusive
    end: int  # 0-based, exclusive
    new: list[str]


class TextContext:
    def __init__(self, text: str, kind: str, path: Path | None = None) -> None:
        self.text = text
        self.kind = kind
        #: the file the unit comes from, when the caller knows it (None for notebook/markdown
        #: pieces and in-memory text): rules may read files it refers to (``-r base.txt``)
        self.path = path
        self.lines = text.splitlines()
        self.rule_id = ""
        #: ids of the rules whose project-wide context is on (``Rule.project_triggers``)
        self.project: frozenset[str] = frozenset()
        self._edits: list[LineEdit] = []
        self._markers: dict[int, list[tuple[str, str]]] = {}
        self.findings: list[Finding] = []

    @property
    def in_project(self) -> bool:
        """True when the run includes a file matching the current rule's own ``triggers``."""
        return self.rule_id in self.project

    @property
    def whole_text(self) -> str:
        """The whole text of the notebook or Markdown page this unit is a piece of; the unit's text otherwise."""
        return ENCLOSING_TEXT.get() or self.text

    @property
    def facts(self) -> frozenset[str]:
        """The names of the project facts this unit has: those found anywhere in the run
        (``Rule.project_probes``) and those the run's launchers state about this file
        (``Rule.launch_facts``)."""
        return facts_of(self.project)

    def fact_values(self, fact: str) -> frozenset[str]:
        """The values of the launch fact ``fact`` for this file (empty: no launcher of the run states it)."""
        return fact_values(self.project, fact)

    def replace_lines(self, start: int, end: int, new: Sequence[str], message: str | None = None) -> LineEdit:
        """Replace original lines [start, end) (0-based) with ``new`` (without endings)."""
        edit = LineEdit(self.rule_id, start, end, list(new))
        self._edits.append(edit)
        if message:
            self.finding(start, message)
        return edit

    def update_lines(self, edit: LineEdit, start: int, end: int, new: Sequence[str]) -> None:
        """Change an edit made earlier in this unit (by any rule) in place: a family of rules that
        renders one statement together keeps a single edit for it. The edit keeps its rule."""
        if not any(e is edit for e in self._edits):
            raise ValueError("not an edit of this unit")
        edit.start, edit.end, edit.new = start, end, list(new)

    def edit_covering(self, line: int) -> LineEdit | None:
        """The edit made so far in this unit that covers (or inserts at) 0-based ``line``."""
        return next((e for e in self._edits if e.start == line or e.start <= line < e.end), None)

    def is_edited(self, line: int) -> bool:
        return self.edit_covering(line) is not None

    def finding(self, line: int, message: str, fix: str = "applied", column: int = 1,
                detail: str | None = None) -> None:
        """A finding at 0-based ``line``."""
        self.findings.append(Finding(line + 1, column, self.rule_id, message, fix, detail=detail))  # type: ignore[arg-type]

    def markers_above(self, line: int) -> set[str]:
        """The markers already stacked right above 0-based ``line`` (from earlier runs, any rule), stripped."""
        above = set()
        i = line - 1
        while 0 <= i < len(self.lines) and MARKER_PREFIX in self.lines[i] and MARKER_RE.search(self.lines[i]):
            above.add(self.lines[i].strip())
            i -= 1
        return above

    def marker(self, line: int, message: str, detail: str | None = None) -> None:
        """A ``# TODO(neuron-migrate ...)`` line above 0-based ``line`` and a manual finding
        (``message``: one sentence of at most 120 characters; ``detail``: its long form, see
        ``PythonContext.marker``)."""
        text = marker_text(self.rule_id, message)
        if text not in self.markers_above(line) and (self.rule_id, text) not in self._markers.get(line, []):
            self._markers.setdefault(line, []).append((self.rule_id, text))
            self.finding(line, message, "manual", detail=detail)
