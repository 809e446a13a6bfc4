"""Plain data shared by the engine, the rules and the reports.

Nothing in here knows about a particular rule or a particular output format.
"""

from __future__ import annotations

import contextvars
import re
from dataclasses import dataclass, field
from typing import Iterable, Literal

Fix = Literal["applied", "manual"]
Status = Literal["changed", "unchanged", "error", "skipped"]

#: File kinds, as named in the JSON report (CONTRACT.md).
KINDS = ("python", "notebook", "shell", "requirements", "pyproject", "dockerfile", "markdown")

#: `# TODO(neuron-migrate NM123): message` -- the one marker format for every file kind.
MARKER_PREFIX = "TODO(neuron-migrate "
MARKER_RE = re.compile(r"#\s*TODO\(neuron-migrate (NM\d{3})\):\s*(.*?)\s*$")
#: how a marker that keeps old-stack code on purpose begins (a consolidation of the old run's shards, a TPU branch):
#: the import that code uses stays too, and NM992 says so instead of asking to remove it
KEEPS_OLD_STACK = "Keep this "
#: the self-check's findings (migrator.selfcheck.policy): NM991, an edit dropped because it would break
#: the code; NM992, an old-stack import left behind. On unless --select/--ignore leave them out.
SELF_CHECKS = frozenset({"NM991", "NM992"})
#: the self-check's finding of edits dropped because they would break the code
DROPPED_RULE = "NM991"
#: what an NM991 finding says when the edits it is about produced code that does not parse (the
#: reports count those findings as errors: nothing of them was written)
UNPARSABLE = "produced code that does not parse"


def is_unparsable(finding: Finding) -> bool:
    """Whether ``finding`` reports edits dropped because they produced code that does not parse."""
    return finding.rule == DROPPED_RULE and UNPARSABLE in finding.message


def unparsable_message(rules: Iterable[str]) -> str:
    """The NM991 finding of a unit left as it was because its rules produced code that does not parse."""
    return f"{', '.join(dict.fromkeys(rules))} {UNPARSABLE}: nothing in this unit was migrated; migrate it by hand"
#: the statements a notebook's program puts between two cells (``__nm_cell__(3)``) and in place of
#: a cell that does not parse (``__nm_skipped__(names...)``), see migrator.filekinds.notebook
CELL_BOUNDARY = "__nm_cell__"
SKIPPED_CELL = "__nm_skipped__"
#: `# neuron-migrate: ignore` or `# neuron-migrate: ignore[NM101, NM2]`
IGNORE_RE = re.compile(r"#\s*neuron-migrate:\s*ignore(?:\[([A-Za-z0-9_,\s]*)\])?")


#: a marker's message is one sentence of at most this many characters (CONTRACT.md)
MARKER_LIMIT = 120


def fitted(*candidates: str, limit: int = MARKER_LIMIT) -> str:
    """The first of these marker messages that fits in ``limit`` characters, else the last (the shortest form:
    a message that names code, a flag list or a path gives a form without it as its last candidate)."""
    return next((c for c in candidates if len(c) <= limit), candidates[-1])


def marker_text(rule: str, message: str) -> str:
    """The comment text of a manual-action marker (without indentation)."""
    message = " ".join(message.split())
    return f"# {MARKER_PREFIX}{rule}): {message}"


def ignored_rules(line: str) -> frozenset[str] | None:
    """Rules a `# neuron-migrate: ignore[...]` comment on ``line`` silences.

    Returns None when the line carries no ignore comment, an empty set when it
    silences every rule, otherwise the ids/prefixes listed.
    """
    if "neuron-migrate" not in line:
        return None
    m = IGNORE_RE.search(line)
    if not m:
        return None
    if m.group(1) is None:
        return frozenset()
    return frozenset(p.strip().upper() for p in m.group(1).split(",") if p.strip())


def find_markers(text: str) -> list["Finding"]:
    """Manual-action markers already present in ``text`` (reported as manual findings)."""
    if MARKER_PREFIX not in text:
        return []
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        m = MARKER_RE.search(line)
        if m:
            out.append(Finding(i, m.start() + 1, m.group(1), m.group(2), "manual"))
    return out


def is_silenced(ignore: frozenset[str] | None, rule: str) -> bool:
    if ignore is None:
        return False
    if not ignore:
        return True
    return any(rule.startswith(p) for p in ignore)


@dataclass(frozen=True, order=True)
class Finding:
    """One thing a rule did (``applied``) or asks a person to do (``manual``).

    ``line``/``column`` are 1-based and refer to the ORIGINAL file (for a notebook:
    to the line within the cell ``cell``, 0-based cell index).
    """

    line: int
    column: int
    rule: str
    message: str
    fix: Fix = "applied"
    cell: int | None = None
    #: a marker's long form (the why and the alternatives: ``Rule.markers``), for the reports
    detail: str | None = field(default=None, compare=False)

    def to_json(self) -> dict:
        out = {
            "rule": self.rule,
            "line": self.line,
            "column": self.column,
            "cell": self.cell,
            "message": self.message,
            "fix": self.fix,
        }
        if self.detail:
            out["detail"] = self.detail
        return out


@dataclass
class FileResult:
    """What happened to one file."""

    path: str  # as shown to the user (relative to the invocation root when possible)
    kind: str
    status: Status
    error: str | None = None
    findings: list[Finding] = field(default_factory=list)
    old_text: str | None = None  # decoded original text (for diffs); None when not read
    new_text: str | None = None  # decoded new text; equals old_text when unchanged
    new_bytes: bytes | None = None  # what --write puts on disk when status == "changed"

    def fail(self, reason: str) -> "FileResult":
        """Turn into an error result: nothing applied, so nothing to report or write."""
        self.status = "error"
        self.error = reason
        self.findings = []
        self.new_text = None
        self.new_bytes = None
        return self

    @property
    def manual(self) -> int:
        return sum(1 for f in self.findings if f.fix == "manual")

    @property
    def applied(self) -> int:
        return sum(1 for f in self.findings if f.fix == "applied")

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "kind": self.kind,
            "status": self.status,
            "error": self.error,
            "findings": [f.to_json() for f in sorted(self.findings, key=_finding_order)],
        }


def _finding_order(f: Finding):
    return (f.cell if f.cell is not None else -1, f.line, f.column, f.rule)


@dataclass
class RunResult:
    """What happened to every file of one invocation."""

    files: list[FileResult]
    seconds: float = 0.0
    wrote: bool = False
    #: what discovery left out with a reason the report states (optimum-neuron's own source, tests and
    #: developer guides; directories end in "/")
    skipped_dirs: list[str] = field(default_factory=list)

    @property
    def summary(self) -> dict:
        return {
            "files_scanned": len(self.files),
            "files_changed": sum(1 for f in self.files if f.status == "changed"),
            "files_error": sum(1 for f in self.files if f.status == "error"),
            "fixes_applied": sum(f.applied for f in self.files),
            "manual_actions": sum(f.manual for f in self.files),
            "seconds": round(self.seconds, 3),
        }

    def sorted_findings(self, result: FileResult) -> list[Finding]:
        return sorted(result.findings, key=_finding_order)

#: prefix of the project facts (``Rule.project_probes``) among the run's project context strings
FACT_PREFIX = "fact:"


def facts_of(project: frozenset[str]) -> frozenset[str]:
    """The names of the project facts in ``project`` (a fact with a value counts by its name)."""
    return frozenset(p[len(FACT_PREFIX):].split("=", 1)[0] for p in project if p.startswith(FACT_PREFIX))


def fact_entry(fact: str, value: str | None = None) -> str:
    """How a fact travels among the run's project context strings: ``fact:NAME`` or ``fact:NAME=VALUE``."""
    return FACT_PREFIX + fact if value is None else f"{FACT_PREFIX}{fact}={value}"


def fact_values(project: frozenset[str], fact: str) -> frozenset[str]:
    """The values that the facts named ``fact`` carry in ``project`` (several launchers of one script
    may set different ones)."""
    head = f"{FACT_PREFIX}{fact}="
    return frozenset(p[len(head):] for p in project if p.startswith(head))


@dataclass(frozen=True)
class LaunchFact:
    """A fact a launcher states about what it launches (``Rule.launch_facts``): ``XLA_USE_BF16=1
    torchrun train.py`` is ``LaunchFact("env:XLA_USE_BF16", "1", "train.py")``.

    ``target``: the launched script as the launcher names it, relative to the launcher's directory
    (the extractor joins a literal ``cd``); "" is the launcher's own code (a shell script's Python
    heredocs, the Python cells of a notebook whose kernel environment is set); ``module``: the target
    is a module name (``python -m pkg.train``). The engine resolves the target among the files of the
    run (:mod:`migrator.facts`) and gives the fact to that file alone."""

    fact: str
    value: str
    target: str = ""
    module: bool = False


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
    "torch_neuronx.xla_impl",  # the XLA-era implementation (custom ops, ops, hints): not in the plugin
    "optimum.exporters.neuron",  # optimum-neuron's exporter (its package registers this namespace)
)


#: old-stack roots that are also native modules on TorchNeuron (``torch.neuron`` is its device module, like
#: ``torch.cuda``): only these members are the old stack's (torch-neuron's Inf1 API); the rest are native uses
OLD_MEMBERS_OF_NATIVE = {"torch.neuron": frozenset({"trace", "DataParallel", "analyze_model"})}


#: the TorchNeuron plugin: PyTorch autoloads it, and an ``import torch_neuronx`` the migration left unused stays
#: (the seeds keep it: it documents the device the script runs on)
NATIVE_PLUGIN = "torch_neuronx"


def is_old_stack(module: str) -> bool:
    """Whether ``module`` (or a name in it) belongs to a package of the old stack."""
    return any(module == r or module.startswith(r + ".") for r in OLD_STACK_ROOTS)


#: whether the unit being migrated is a notebook's kernel program (its Python cells, run by one process that
#: torchrun never starts; a %%writefile cell is a script of its own, not part of it)
IN_KERNEL: contextvars.ContextVar[bool] = contextvars.ContextVar("in_kernel", default=False)
#: the whole text of the notebook or Markdown page the unit being migrated is a piece of ("" for a file that is
#: its own unit): what a shell line of a notebook runs beside (a model server the notebook starts)
ENCLOSING_TEXT: contextvars.ContextVar[str] = contextvars.ContextVar("enclosing_text", default="")
#: names the code around the unit being migrated uses (the later Python blocks of a Markdown page, which the
#: page's reader runs after this one): an old-stack import they use is not "unused" (the self-check keeps it
#: with a marker instead of removing it)
OUTSIDE_NAMES: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("outside_names", default=frozenset())
#: whether the unit being migrated is a code block of a document (Markdown): its imports may serve code the page
#: only describes, so one its block never used is marked, not removed
IN_DOCUMENT: contextvars.ContextVar[bool] = contextvars.ContextVar("in_document", default=False)
