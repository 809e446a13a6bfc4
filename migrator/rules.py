"""What a rule is, for the engine.

The engine knows rules only through these base classes: an id, a title, the file
kinds it applies to, the substrings that can trigger it, the qualified names it
owns, its documentation, and either node handlers (Python rules) or a function
over lines (text rules). Rule modules live in :mod:`codemods`.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar

if TYPE_CHECKING:  # pragma: no cover
    import libcst as cst

    from migrator.python_engine import PythonContext
    from migrator.text_engine import TextContext

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

    @classmethod
    def applies_to(cls, text: str, project: frozenset[str] = frozenset()) -> bool:
        """Whether a unit with this text is shown to the rule (``project``: ids of the rules whose
        project-wide context is on in this run, see ``project_triggers``)."""
        if not cls.triggers or any(t in text for t in cls.triggers):
            return True
        return cls.id in project and any(t in text for t in cls.project_triggers)

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
        )


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


Handler = Callable[["cst.CSTNode", "PythonContext"], None]


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
