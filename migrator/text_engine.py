"""Runs line-level rules over one unit of non-Python text (shell, requirements,
pyproject, Dockerfile, shell lines of notebooks and markdown fences).

A rule reads ``ctx.lines`` (the ORIGINAL lines, without line endings) and asks
for line replacements, markers and findings. Rules see the original text, never
each other's output; two rules editing the same line is a bug reported loudly.
Every line no rule touched is kept byte for byte, with its own line ending.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from migrator.model import Finding, find_markers, ignored_rules, is_silenced
from migrator.rules import TextContext, TextRule


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
