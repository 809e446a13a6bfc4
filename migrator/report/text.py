"""Plain-text report: diffs, one line per finding, a summary.

The output is plain text (no markup): print it verbatim so that ``[applied]`` survives.

Layout::

    --- a/src/infer.py            (one unified diff per changed file, when show_diff)
    +++ b/src/infer.py
    @@ ... @@
    ...
    src/infer.py:12:5: NM101 [applied] NeuronModelForCausalLM -> AutoModelForCausalLM
    nb.ipynb:cell 3:1:1: NM901 [manual] ...
    broken.py: error: cannot parse: ...
    data.py: skipped: not a supported file kind

    4 files scanned: 3 files would be changed, 12 fixes, 2 manual actions, 1 error (0.41 s)
    Run again with --write to apply the changes.
"""

from __future__ import annotations

from migrator.model import RunResult
from migrator.report._common import (
    display_path,
    location,
    one_line,
    scanned_sentence,
    selfcheck_sentence,
    skipped_dirs_sentence,
    sorted_files,
    sorted_findings,
    summary_sentence,
)
from migrator.report.diff import unified_diff


def render(run: RunResult, *, rules: dict, show_diff: bool, mode: str) -> str:
    files = sorted_files(run)
    blocks: list[str] = []

    if show_diff:
        diffs = [
            unified_diff(f.path, f.old_text, f.new_text)
            for f in files
            if f.status == "changed" and f.old_text is not None and f.new_text is not None
        ]
        diffs = [d for d in diffs if d]
        if diffs:
            blocks.append("".join(diffs))

    lines: list[str] = []
    for f in files:
        path = display_path(f.path)
        for finding in sorted_findings(run, f):
            lines.append(
                f"{location(finding, path)}: {finding.rule} [{finding.fix}] {one_line(finding.message)}"
            )
    for f in files:
        path = display_path(f.path)
        if f.status == "error":
            lines.append(f"{path}: error: {one_line(f.error or 'unknown error')}")
        elif f.status == "skipped":
            lines.append(f"{path}: skipped: {one_line(f.error or 'not processed')}")
    if lines:
        blocks.append("\n".join(lines) + "\n")

    summary = [f"{scanned_sentence(run)}: {summary_sentence(run, mode)}"]
    checked = selfcheck_sentence(run)
    if checked:
        summary.append(checked)
    left_out = skipped_dirs_sentence(run)
    if left_out:
        summary.append(left_out)
    s = run.summary
    if mode == "dry-run" and s["files_changed"]:
        summary.append("Run again with --write to apply the changes.")
    elif mode == "check" and s["files_changed"]:
        summary.append("Run with --write to apply the changes.")
    if s["manual_actions"] and mode == "write":
        summary.append("Search the code for 'TODO(neuron-migrate' to find the manual actions.")
    blocks.append("\n".join(summary) + "\n")
    return "\n".join(blocks)
