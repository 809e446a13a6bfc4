"""Helpers shared by the report renderers (not part of the public API)."""

from __future__ import annotations

import os

from migrator.model import UNPARSABLE, FileResult, Finding, RunResult, is_unparsable


def display_path(path: str) -> str:
    """``path`` with forward slashes and without a leading ``./`` (as shown in every report)."""
    if os.sep != "/":
        path = path.replace(os.sep, "/")
    if os.altsep and os.altsep != "/":
        path = path.replace(os.altsep, "/")
    while path.startswith("./"):
        path = path[2:]
    return path


def sorted_files(run: RunResult) -> list[FileResult]:
    return sorted(run.files, key=lambda f: display_path(f.path))


def sorted_findings(run: RunResult, result: FileResult) -> list[Finding]:
    return run.sorted_findings(result)


def one_line(text: str) -> str:
    """Collapse line breaks so that one finding is one line of output."""
    return " ".join(text.splitlines()) if ("\n" in text or "\r" in text) else text


def plural(n: int, singular: str, plural_form: str | None = None) -> str:
    return f"{n} {singular if n == 1 else (plural_form or singular + 's')}"


def summary_sentence(run: RunResult, mode: str, *, seconds: bool = True) -> str:
    """E.g. ``3 files would be changed, 12 fixes, 2 manual actions, 1 error (0.41 s)``."""
    s = run.summary
    changed = s["files_changed"]
    verb = "changed" if mode == "write" else "would be changed"
    parts = [f"{plural(changed, 'file')} {verb}"]
    parts.append(plural(s["fixes_applied"], "fix", "fixes"))
    parts.append(plural(s["manual_actions"], "manual action"))
    # a file whose edits were dropped because they produced code that does not parse is an error of
    # the tool's (its findings say what was left out), never a clean run
    unparsable = sum(1 for f in run.files if f.status != "error" and any(map(is_unparsable, f.findings)))
    parts.append(plural(s["files_error"] + unparsable, "error"))
    skipped = sum(1 for f in run.files if f.status == "skipped")
    if skipped:
        parts.append(f"{skipped} skipped")
    text = ", ".join(parts)
    if seconds:
        text += f" ({s['seconds']:.2f} s)"
    return text


def selfcheck_sentence(run: RunResult) -> str | None:
    """What the self-check did, when it did something: e.g. ``Self-check: 2 rewrites not applied
    because they would have broken the code (NM991), 1 old-stack import still used (NM992).``"""
    from migrator.selfcheck.policy import DROPPED_RULE, OLD_IMPORT_RULE

    counts = {DROPPED_RULE: 0, OLD_IMPORT_RULE: 0}
    unparsable = 0
    for f in run.files:
        for finding in f.findings:
            if is_unparsable(finding):
                unparsable += 1
            elif finding.rule in counts and finding.fix == "manual":  # not NM992's removals of unused imports
                counts[finding.rule] += 1
    parts = []
    if unparsable:
        parts.append(f"{plural(unparsable, 'rewrite')} not applied because {'it' if unparsable == 1 else 'they'} "
                     f"{UNPARSABLE} ({DROPPED_RULE})")
    if counts[DROPPED_RULE]:
        parts.append(f"{plural(counts[DROPPED_RULE], 'rewrite')} not applied because "
                     f"{'it' if counts[DROPPED_RULE] == 1 else 'they'} would have broken the code ({DROPPED_RULE})")
    if counts[OLD_IMPORT_RULE]:
        parts.append(f"{plural(counts[OLD_IMPORT_RULE], 'old-stack import')} still used ({OLD_IMPORT_RULE})")
    return f"Self-check: {', '.join(parts)}." if parts else None


def skipped_dirs_sentence(run: RunResult) -> str | None:
    """What discovery left out as the old stack's own code, when there is some."""
    if not run.skipped_dirs:
        return None
    shown = ", ".join(run.skipped_dirs)
    return (f"Not migrated: {shown} (the source, tests and developer guides of an old-stack package's own "
            "checkout, not user code).")


def scanned_sentence(run: RunResult) -> str:
    return f"{plural(len(run.files), 'file')} scanned"


def location(finding: Finding, path: str) -> str:
    """``path:line:col`` or, in a notebook, ``path:cell 3:line:col``."""
    if finding.cell is not None:
        return f"{path}:cell {finding.cell}:{finding.line}:{finding.column}"
    return f"{path}:{finding.line}:{finding.column}"
