"""A fake rule runner shared by the notebook and markdown file-kind tests."""

from __future__ import annotations

import ast

from migrator.filekinds import UnitSyntaxError
from migrator.model import Finding, marker_text

SHELL_MARKER = marker_text("NM502", "neuron_parallel_compile is gone; remove this step")


class Recorder:
    """Fake run_python / run_shell that remember what they were given."""

    def __init__(self) -> None:
        self.python_calls: list[str] = []
        self.shell_calls: list[str] = []

    def run_python(self, source: str) -> tuple[str, list[Finding]]:
        self.python_calls.append(source)
        try:
            ast.parse(source)
        except SyntaxError as exc:
            raise UnitSyntaxError(str(exc)) from None
        findings = []
        out = []
        for n, line in enumerate(source.split("\n"), start=1):
            col = line.find("optimum.neuron")
            if col >= 0:
                findings.append(Finding(n, col + 1, "NM101", "optimum.neuron -> transformers"))
                line = line.replace("optimum.neuron", "transformers")
            out.append(line)
        if not findings:
            return source, []
        return "\n".join(out), findings

    def run_shell(self, source: str) -> tuple[str, list[Finding]]:
        self.shell_calls.append(source)
        findings = []
        out: list[str] = []
        lines = source.split("\n")
        for n, line in enumerate(lines, start=1):
            col = line.find("optimum-neuron")
            if col >= 0:
                findings.append(Finding(n, col + 1, "NM501", "optimum-neuron -> transformers"))
                line = line.replace("optimum-neuron", "transformers")
            if "neuron_parallel_compile" in line and not line.lstrip().startswith("#"):
                indent = line[: len(line) - len(line.lstrip())]
                if not (out and out[-1].strip() == SHELL_MARKER):
                    out.append(indent + SHELL_MARKER)
                findings.append(
                    Finding(n, line.find("neuron_parallel_compile") + 1, "NM502", "remove", "manual")
                )
            out.append(line)
        new = "\n".join(out)
        return (source if new == source else new), findings
