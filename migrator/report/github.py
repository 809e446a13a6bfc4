"""GitHub Actions workflow commands (``--format github``): one annotation per finding.

::

    ::warning file=src/train.py,line=40,col=9,title=NM201::<message>     (manual action)
    ::notice file=src/infer.py,line=12,col=5,title=NM101::<message>      (applied / pending fix)
    ::error file=src/broken.py::<reason>                                 (file not processed)
    ::notice title=neuron-migrate::<summary sentence>

Notebook findings cannot point at a line of the ``.ipynb`` file (that is JSON), so they
are annotated on the file and the message starts with ``cell C, line L:``.
Escaping follows the runner's rules: in messages ``%`` -> ``%25``, ``\\r`` -> ``%0D``,
``\\n`` -> ``%0A``; in property values additionally ``:`` -> ``%3A`` and ``,`` -> ``%2C``.
"""

from __future__ import annotations

from migrator.model import RunResult
from migrator.report._common import display_path, scanned_sentence, sorted_files, sorted_findings, summary_sentence

TOOL_NAME = "neuron-migrate"
COMMAND = {"applied": "notice", "manual": "warning"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str, **properties: object) -> str:
    props = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items() if value is not None)
    return f"::{name}{' ' + props if props else ''}::{escape_data(message)}"


def render(run: RunResult, *, rules: dict, show_diff: bool, mode: str) -> str:
    lines: list[str] = []
    for fr in sorted_files(run):
        path = display_path(fr.path)
        for finding in sorted_findings(run, fr):
            name = COMMAND.get(finding.fix, "warning")
            if finding.cell is None:
                lines.append(
                    command(name, finding.message, file=path, line=finding.line, col=finding.column, title=finding.rule)
                )
            else:
                message = f"cell {finding.cell}, line {finding.line}: {finding.message}"
                lines.append(command(name, message, file=path, title=finding.rule))
        if fr.status == "error":
            lines.append(command("error", fr.error or "could not be processed", file=path))
    lines.append(command("notice", f"{scanned_sentence(run)}: {summary_sentence(run, mode)}", title=TOOL_NAME))
    return "\n".join(lines) + "\n"
