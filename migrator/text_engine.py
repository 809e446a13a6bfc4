"""Runs line-level rules over one unit of non-Python text (shell, requirements,
pyproject, Dockerfile, shell lines of notebooks and markdown fences).

A rule reads ``ctx.lines`` (the ORIGINAL lines, without line endings) and asks
for line replacements, markers and findings. Rules see the original text, never
each other's output; two rules editing the same line is a bug reported loudly.
Every line no rule touched is kept byte for byte, with its own line ending.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from migrator.model import (
    DROPPED_RULE,
    UNPARSABLE,
    Finding,
    find_markers,
    ignored_rules,
    is_silenced,
    marker_text,
    unparsable_message,
)
from migrator.rules import LineEdit, TextContext, TextRule, trigger_scan


def indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def run_text(
    text: str, kind: str, rules: Sequence[TextRule], path: Path | None = None,
    project: frozenset[str] = frozenset(), parses: Callable[[str], bool] | None = None,
) -> tuple[str, list[Finding]]:
    """The rules over one unit. ``parses``: the parse check of the kind (shell): an output it rejects
    while it accepted the input is never handed back; the rules whose edits made it so are dropped
    (NM991 markers say so), or, when that does not help, the unit is left as it was."""
    findings = find_markers(text)
    found = trigger_scan(rules).found(text)
    active = [r for r in rules if kind in r.kinds and r.applies_to(text, project, found)]
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
    out = _render(raw, edits, markers)
    if parses is not None and out != text and not parses(out) and parses(text):
        return _guard(text, raw, edits, markers, parses, findings, kept_findings)
    return out, findings + kept_findings


def _render(raw: list[str], edits: list[LineEdit], markers: dict[int, list[str]]) -> str:
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
    return "".join(out)


def _guard(text: str, raw: list[str], edits: list[LineEdit], markers: dict[int, list[str]],
           parses: Callable[[str], bool], findings: list[Finding], kept_findings: list[Finding]
           ) -> tuple[str, list[Finding]]:
    """The output does not parse: drop the edits of the rules that made it so (one rule whose removal
    is enough, else all of them given back one by one while the output parses), each dropped edit
    getting an NM991 marker above its command; the unit as it was when nothing helps."""
    rules = list(dict.fromkeys(e.rule for e in edits))

    def without(dropped: set[str]) -> list[LineEdit]:
        return [e for e in edits if e.rule not in dropped]

    dropped = next(({r} for r in rules if parses(_render(raw, without({r}), markers))), None)
    if dropped is None:
        dropped = set(rules)
        for r in rules:
            if parses(_render(raw, without(dropped - {r}), markers)):
                dropped.discard(r)
    noted = {line: list(ts) for line, ts in markers.items()}
    notes: list[Finding] = []
    for e in edits:
        if e.rule in dropped:
            message = f"Migrate this command by hand: {e.rule}'s rewrite {UNPARSABLE}."
            line, marker = _command_start(raw, e.start), marker_text(DROPPED_RULE, message)
            if marker in noted.get(line, ()) or _marked_above(raw, line, marker):
                continue  # (one already there is reported by the marker scan)
            noted.setdefault(line, []).append(marker)
            notes.append(Finding(line + 1, 1, DROPPED_RULE, message, "manual"))
    kept = without(dropped)
    out = _render(raw, kept, noted)
    if not parses(out):
        kept, out, notes = [], text, [Finding(1, 1, DROPPED_RULE, unparsable_message(rules), "manual")]
    # the applied findings of the dropped rules go (their markers stay: they are about the original)
    gone = {e.rule for e in edits} - {e.rule for e in kept}
    return out, findings + [f for f in kept_findings if f.fix != "applied" or f.rule not in gone] + notes


def _marked_above(raw: list[str], line: int, marker: str) -> bool:
    """Whether ``marker`` stands among the comment lines right above 0-based ``line``."""
    i = line - 1
    while i >= 0 and raw[i].lstrip().startswith("#"):
        if raw[i].strip() == marker:
            return True
        i -= 1
    return False


def _command_start(raw: list[str], line: int) -> int:
    """The first line of the command ``line`` belongs to (lines joined by a trailing backslash)."""
    while line > 0 and raw[line - 1].rstrip("\r\n").endswith("\\"):
        line -= 1
    return line


def _dominant_newline(raw: list[str]) -> str:
    crlf = sum(1 for line in raw if line.endswith("\r\n"))
    return "\r\n" if crlf * 2 > len(raw) else "\n"
