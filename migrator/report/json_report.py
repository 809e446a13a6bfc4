"""JSON report (``--format json``): exactly the shape fixed in CONTRACT.md.

``{"tool": "neuron-migrate", "version": ..., "files": [...], "summary": {...}}`` with the
files sorted by path (every status included) and no extra keys.
"""

from __future__ import annotations

import json

import migrator
from migrator.model import RunResult
from migrator.report._common import sorted_files

TOOL_NAME = "neuron-migrate"


def report_dict(run: RunResult) -> dict:
    return {
        "tool": TOOL_NAME,
        "version": migrator.__version__,
        "files": [f.to_json() for f in sorted_files(run)],
        "summary": run.summary,
    }


def render(run: RunResult, *, rules: dict, show_diff: bool, mode: str) -> str:
    return json.dumps(report_dict(run), indent=2) + "\n"
