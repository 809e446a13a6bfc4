"""Runs line-level rules over one unit of non-Python text (shell, requirements,
pyproject, Dockerfile, shell lines of notebooks and markdown fences).

A rule reads ``ctx.lines`` (the ORIGINAL lines, without line endings) and asks
for line replacements, markers and findings. Rules see the original text, never
each other's output; two rules editing the same line is a bug reported loudly.
Every line no rule touched is kept byte for byte, with its own line ending.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from migrator.model import MARKER_PREFIX, MARKER_RE, Finding, find_markers, ignored_rules, is_silenced, marker_text
from migrator.rules import TextRule


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

    def finding(self, line: int, message: str, fix: str = "applied", column: int = 1) -> None:
        """A finding at 0-based ``line``."""
        self.findings.append(Finding(line + 1, column, self.rule_id, message, fix))  # type: ignore[arg-type]

    def marker(self, line: int, message: str) -> None:
        """A ``# TODO(neuron-migrate ...)`` line above 0-based ``line`` and a manual finding."""
        text = marker_text(self.rule_id, message)
        # the markers already stacked above the line (from earlier runs, any rule)
        above = set()
        i = line - 1
        while i >= 0 and MARKER_PREFIX in self.lines[i] and MARKER_RE.search(self.lines[i]):
            above.add(self.lines[i].strip())
            i -= 1
        if text not in above and (self.rule_id, text) not in self._markers.get(line, []):
            self._markers.setdefault(line, []).append((self.rule_id, text))
            self.finding(line, message, "manual")


def indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def run_text(
    text: str, kind: str, rules: Sequence[TextRule], path: Path | None = None,
    project: frozenset[str] = frozenset(),
) -> tuple[str, list[Finding]]:
    findings = find_markers(text)
    active = [r for r in rules if kind in r.kinds and r.applies_to(text, project)]
    if not active:
        return text, findings
    ctx = TextContext(text, kind, path)
    ctx.project = project
    for rule in active:
        ctx.rule_id = rule.id
        rule.apply(ctx)
    ignores = None
    if "neuron-migrate" in text:
        ignores = {i: ig for i, line in enumerate(ctx.lines) if (ig := ignored_rules(line)) is not None} or None

    def silenced(rule: str, start: int, end: int) -> bool:
        return ignores is not None and any(is_silenced(ignores.get(i), rule) for i in range(start, max(end, start + 1)))

    edits = sorted((e for e in ctx._edits if not silenced(e.rule, e.start, e.end)), key=lambda e: (e.start, e.end))
    for a, b in zip(edits, edits[1:]):
        if b.start < a.end:
            raise RuntimeError(f"rules {a.rule} and {b.rule} edit the same lines ({a.start + 1}-{a.end})")
    kept_findings = [
        f for f in ctx.findings if not silenced(f.rule, f.line - 1, f.line)
    ]
    markers = {
        line: [t for rule, t in items if not silenced(rule, line, line + 1)] for line, items in ctx._markers.items()
    }
    if not edits and not any(markers.values()):
        return text, findings + kept_findings

    raw = text.splitlines(keepends=True)
    default_nl = _dominant_newline(raw)
    out: list[str] = []
    i = 0
    edit_at = {e.start: e for e in edits}
    while i < len(raw):
        line = raw[i]
        ending = line[len(line.rstrip("\r\n")):] if line.endswith(("\n", "\r")) else ""
        for t in markers.get(i, []):
            out.append(indentation(line) + t + (ending or default_nl))
        e = edit_at.get(i)
        if e is not None:
            last = raw[e.end - 1] if e.end > e.start else line
            last_ending = last[len(last.rstrip("\r\n")):] if last.endswith(("\n", "\r")) else ""
            for j, new_line in enumerate(e.new):
                final = j == len(e.new) - 1
                out.append(new_line + (last_ending if final else (ending or default_nl)))
            i = max(e.end, i + 1) if e.end > e.start else i + 1
            if e.end == e.start:
                out.append(line)
            continue
        out.append(line)
        i += 1
    return "".join(out), findings + kept_findings


def _dominant_newline(raw: list[str]) -> str:
    crlf = sum(1 for line in raw if line.endswith("\r\n"))
    return "\r\n" if crlf * 2 > len(raw) else "\n"
