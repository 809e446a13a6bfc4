"""Markdown report (``--format markdown``), to paste into a pull request or a job summary.

Sections: title and mode line, summary table, per-rule table, the manual actions grouped by rule
(one line per rule with its count, then one checklist line per distinct action with where it
applies: ``- [ ] message — path:line, path:line (+3 more)``), errors, per-file findings (long lists
and diffs collapsed in ``<details>``), skipped files. The report is meant to be a pull-request
comment: where it would be longer than :data:`BUDGET` characters, the diffs are left out, then the
per-file tables (each file one line), and the report says so.  Every piece of text that comes from a path, a
message or a rule title is escaped, so it renders literally (``|`` and backticks cannot
break a table, ``<x>`` is not swallowed as HTML, ``$`` does not start math and ``@name``
does not mention anyone).
"""

from __future__ import annotations

import re
from collections import Counter

from migrator.model import FileResult, Finding, RunResult
from migrator.report import RuleInfo
from migrator.report._common import (
    display_path, one_line, plural, scanned_sentence, sorted_files, sorted_findings, summary_sentence,
)
from migrator.report.diff import unified_diff

TITLE = "neuron-migrate report"
#: More findings than this in one file (or skipped files) are folded into <details>.
COLLAPSE_AFTER = 10
#: the places shown after a manual action (the rest is counted), and the distinct actions shown per rule
MAX_PLACES = 3
MAX_ACTIONS = 20
#: GitHub takes comments of up to 65,536 characters; the report stays under this, with room to spare
BUDGET = 60_000
TRIMMED = ("_{what} left out to fit a pull-request comment; `--format json` (or the text report) has every "
           "finding._")

_SPECIAL = re.compile(r"([\\`*_\[\]<|~#$&])")
_MENTION = re.compile(r"(?<![\w`])@[\w][\w.\-/]*")

MODE_LINE = {
    "dry-run": "Dry run: nothing was written.",
    "check": "Check mode: nothing was written.",
    "write": "Changes were written.",
}


def escape(text: str) -> str:
    """``text`` as literal Markdown (GitHub flavour), on one line; safe inside a table cell."""
    text = one_line(text)
    out: list[str] = []
    pos = 0
    for m in _MENTION.finditer(text):
        out.append(_SPECIAL.sub(r"\\\1", text[pos : m.start()]))
        out.append(f"`{m.group(0)}`")  # a code span: shown as is, never a @-mention
        pos = m.end()
    out.append(_SPECIAL.sub(r"\\\1", text[pos:]))
    return "".join(out)


def rule_ref(rule_id: str, rules: dict[str, RuleInfo]) -> str:
    """The rule id, escaped; a link to the rule's page where the docs site's URL is known (``--docs-url``)."""
    info = rules.get(rule_id)
    if info is not None and info.url:
        return f"[{escape(rule_id)}](<{info.url.replace('>', '%3E')}>)"
    return escape(rule_id)


def _pages_note(rules: dict[str, RuleInfo], rule_ids) -> list[str]:
    """Where the rules' pages are, when the ids cannot be links (no docs site URL)."""
    pages = [rules[r].page for r in rule_ids if r in rules and rules[r].page and not rules[r].url]
    if not pages:
        return []
    folder = pages[0].rsplit("/", 1)[0]
    return [f"_Each rule's page: `neuron-migrate explain RULE_ID` prints it; it is `{folder}/RULE_ID.md` in "
            "neuron-migrate's documentation (`--docs-url` makes the ids links to the published pages)._", ""]


def _where(finding: Finding) -> str:
    if finding.cell is not None:
        return f"cell {finding.cell}, line {finding.line}"
    return str(finding.line)


def _checklist_location(path: str, finding: Finding) -> str:
    if finding.cell is not None:
        return f"{path}:cell {finding.cell}:{finding.line}"
    return f"{path}:{finding.line}"


def _fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _table(header: list[str], rows: list[list[str]], align: list[str]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _details(summary: str, body: list[str]) -> list[str]:
    return ["<details>", f"<summary>{summary}</summary>", "", *body, "", "</details>"]


def _summary_table(run: RunResult) -> list[str]:
    s = run.summary
    return _table(
        ["Files scanned", "Files changed", "Errors", "Fixes applied", "Manual actions"],
        [[str(s["files_scanned"]), str(s["files_changed"]), str(s["files_error"]),
          str(s["fixes_applied"]), str(s["manual_actions"])]],
        ["---:"] * 5,
    )


def _rules_table(files: list[FileResult], rules: dict[str, RuleInfo]) -> list[str]:
    applied: Counter[str] = Counter()
    manual: Counter[str] = Counter()
    for fr in files:
        for f in fr.findings:
            (manual if f.fix == "manual" else applied)[f.rule] += 1
    rows = []
    for rule_id in sorted(set(applied) | set(manual)):
        info = rules.get(rule_id)
        rows.append([rule_ref(rule_id, rules), escape(info.title) if info else "", str(applied[rule_id]), str(manual[rule_id])])
    return _table(["Rule", "Title", "Applied", "Manual"], rows, ["---", "---", "---:", "---:"])


def _manual_section(run: RunResult, files: list[FileResult], rules: dict[str, RuleInfo],
                    max_actions: int = MAX_ACTIONS) -> list[str]:
    """The manual actions grouped by rule: the rule with its count, then each distinct action once."""
    by_rule: dict[str, dict[str, list[str]]] = {}
    in_files: dict[str, set[str]] = {}
    for fr in files:
        path = display_path(fr.path)
        for f in sorted_findings(run, fr):
            if f.fix == "manual":
                by_rule.setdefault(f.rule, {}).setdefault(f.message, []).append(_checklist_location(path, f))
                in_files.setdefault(f.rule, set()).add(path)
    if not by_rule:
        return []
    lines = ["### Manual actions", ""]
    count = {rule: sum(len(p) for p in actions.values()) for rule, actions in by_rule.items()}
    for rule in sorted(by_rule, key=lambda r: (-count[r], r)):
        info = rules.get(rule)
        title = f" {escape(info.title)}" if info else ""
        lines.append(f"- **{rule_ref(rule, rules)}**{title}: {plural(count[rule], 'action')} in "
                     f"{plural(len(in_files[rule]), 'file')}")
        actions = sorted(by_rule[rule].items(), key=lambda kv: (-len(kv[1]), kv[0]))
        for message, places in actions[:max_actions]:
            shown = ", ".join(escape(p) for p in places[:MAX_PLACES])
            more = f" (+{len(places) - MAX_PLACES} more)" if len(places) > MAX_PLACES else ""
            lines.append(f"  - [ ] {escape(message)} — {shown}{more}")
        if len(actions) > max_actions:
            lines.append(f"  - … and {plural(len(actions) - max_actions, 'other action')} of {escape(rule)}")
    lines.append("")
    return lines


def _file_line(run: RunResult, fr: FileResult) -> str:
    """One file in one line: its status and the counts of its findings."""
    findings = sorted_findings(run, fr)
    manual = sum(f.fix == "manual" for f in findings)
    status = fr.status if fr.status != "error" else f"error: {escape(fr.error or 'could not be processed')}"
    return (f"- {escape(display_path(fr.path))}: {status}; {plural(len(findings) - manual, 'fix', 'fixes')}, "
            f"{plural(manual, 'manual action')}")


def _file_section(run: RunResult, fr: FileResult, show_diff: bool, rules: dict[str, RuleInfo]) -> list[str]:
    path = display_path(fr.path)
    findings = sorted_findings(run, fr)
    lines = [f"#### {escape(path)}", ""]
    status = fr.status if fr.status != "error" else f"error: {escape(fr.error or 'could not be processed')}"
    lines.append(f"{escape(fr.kind)}, {status}; {len(findings)} finding{'s' if len(findings) != 1 else ''}")
    if findings:
        table = _table(
            ["Line", "Rule", "Fix", "Message"],
            [[escape(_where(f)), rule_ref(f.rule, rules), f.fix, escape(f.message)] for f in findings],
            ["---:", "---", "---", "---"],
        )
        lines.append("")
        if len(findings) > COLLAPSE_AFTER:
            lines += _details(f"{len(findings)} findings", table)
        else:
            lines += table
    if show_diff and fr.status == "changed" and fr.old_text is not None and fr.new_text is not None:
        diff = unified_diff(fr.path, fr.old_text, fr.new_text)
        if diff:
            fence = _fence(diff)
            lines.append("")
            lines += _details("Diff", [f"{fence}diff", diff.rstrip("\n"), fence])
    lines.append("")
    return lines


def render(run: RunResult, *, rules: dict, show_diff: bool, mode: str) -> str:
    """The report; within :data:`BUDGET` characters where leaving out diffs, then per-file tables, can make it."""
    out = _render(run, rules, show_diff, mode)
    for show, files, actions, what in _SHORTER:
        if len(out) <= BUDGET:
            break
        out = _render(run, rules, show_diff and show, mode, files=files, max_actions=actions, trimmed=what)
    return out


#: ever shorter forms of the report: (diffs, per-file section, actions shown per rule, what the note says)
_SHORTER = (
    (False, "tables", MAX_ACTIONS, "The diffs are"),
    (False, "lines", MAX_ACTIONS, "The diffs and the per-file tables are"),
    (False, "lines", 3, "The diffs, the per-file tables and the less frequent actions are"),
    (False, "none", 3, "The diffs, the per-file sections and the less frequent actions are"),
    (False, "none", 0, "The diffs, the per-file sections and the actions (but their rules) are"),
)


def _render(run: RunResult, rules: dict, show_diff: bool, mode: str, *, files: str = "tables",
            max_actions: int = MAX_ACTIONS, trimmed: str | None = None) -> str:
    shown = files
    files = sorted_files(run)
    out: list[str] = [f"## {TITLE}", "", f"_{MODE_LINE.get(mode, mode)}_ "
                      f"{escape(scanned_sentence(run))}: {escape(summary_sentence(run, mode))}.", ""]
    if trimmed:
        out += [TRIMMED.format(what=trimmed), ""]
    out += _summary_table(run)
    out.append("")

    if any(fr.findings for fr in files):
        out += ["### Rules", ""]
        out += _rules_table(files, rules)
        out.append("")
        out += _pages_note(rules, sorted({f.rule for fr in files for f in fr.findings}))

    out += _manual_section(run, files, rules, max_actions)

    errors = [fr for fr in files if fr.status == "error"]
    if errors:
        out += ["### Errors", ""]
        out += [f"- {escape(display_path(fr.path))}: {escape(fr.error or 'could not be processed')}" for fr in errors]
        out.append("")

    sections = [fr for fr in files if fr.findings or fr.status == "changed"]
    if sections and shown != "none":
        out += ["### Files", ""]
        if shown == "tables":
            for fr in sections:
                out += _file_section(run, fr, show_diff, rules)
        else:
            out += [_file_line(run, fr) for fr in sections] + [""]

    skipped = [fr for fr in files if fr.status == "skipped"]
    if skipped:
        items = [f"- {escape(display_path(fr.path))}" + (f": {escape(fr.error)}" if fr.error else "") for fr in skipped]
        out += ["### Skipped", ""]
        out += _details(f"{len(skipped)} skipped file{'s' if len(skipped) != 1 else ''}", items) \
            if len(skipped) > COLLAPSE_AFTER else items
        out.append("")

    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"
