"""Shell scripts: the shell rules, and the Python the script runs from a heredoc.

``python - <<'EOF' ... EOF`` (also ``python3``, ``python3.11``, a path to one, with arguments, and
``<<-``) feeds the interpreter a program written inside the script: that body is Python, migrated
by the Python rules as a unit of its own; the rest of the script goes to the shell rules. A body
the shell expands (an unquoted delimiter and a ``$`` or a backquote in the body) is left alone: what
Python would run is not the text written there: when it mentions the old stack, a marker above the
command says so. ``python -c "..."`` strings are not migrated: one that uses the old stack gets a marker
above its line; a string that only imports an old-stack module (an install check, also held in a
variable) gets one saying that the module is no longer installed.
"""

from __future__ import annotations

import dataclasses
import re

from migrator.filekinds import UnitSyntaxError
from migrator.filekinds.notebook import RunUnit, mentions_neuron, split_lines
from migrator.model import MARKER_PREFIX, Finding, is_old_stack, marker_text

EXPANDED_MESSAGE = "Migrate this heredoc's Python by hand, or quote its delimiter (<<'EOF'): the shell expands $ and ` in it."

HEREDOC_MESSAGE = "Migrate what this heredoc writes by hand: it holds old-stack code or settings, and heredoc text is not rewritten."
#: old-stack code or settings in a heredoc body that is no Python program the script runs (`cat > run.sh <<EOF`)
_OLD_STACK_TEXT = re.compile(r"\bXLA_[A-Z0-9_]+=|\bneuron_parallel_compile\b|\bNEURON_PARALLEL_COMPILE\b|\btorch_xla\b|"
                             r"\boptimum[-.]neuron\b|\boptimum-cli\b|\btorch-xla\b|\bNEURON_CC_FLAGS\b|\bneuronx_distributed\w*|"
                             r"\blibneuronxla\b|\btransformers_neuronx\b|\btorch_neuronx\.(?:trace|xla_impl|DataParallel)\b")
_ANY_HEREDOC_RE = re.compile(r"(?<![<$(])<<(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")  # (not <<< or $((a<<b)))

INLINE_MESSAGE = "Migrate the Python of this python -c command by hand: code inside shell strings is not rewritten."
_INLINE_RE = re.compile(r"(?:^|[\s;&|(])(?:\S*/)?python(?:3(?:\.\d+)?)?(?:\s+-[A-Za-z]+)*\s+-c\s*['\"]")

#: ``python -c 'import torch_xla'``: a test whether a package is installed, not code to migrate
_PROBE_RE = re.compile(r"\s*(?:import [\w.]+(?:\s*,\s*[\w.]+)*|from [\w.]+ import [\w, ]+)\s*;?\s*")

_HEREDOC_RE = re.compile(
    r"(?:^|[\s;&|(])(?:\S*/)?python(?:3(?:\.\d+)?)?(?:\s[^<\n]*)?<<(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2"
)


@dataclasses.dataclass
class _Heredoc:
    start: int  # first body line (0-based)
    end: int  # the delimiter line (exclusive end of the body)
    expanded: bool = False  # the shell substitutes in the body: not the Python that runs


def _delimiter_line(lines: list[str], start: int, tag: str, strip_tabs: bool) -> int:
    """The index of the line from ``start`` on that ends a heredoc delimited by ``tag`` (``<<-``: after leading
    tabs), ``len(lines)`` when none does."""
    for j in range(start, len(lines)):
        body = lines[j].rstrip("\r\n")
        if (body.lstrip("\t") if strip_tabs else body) == tag:
            return j
    return len(lines)


def _python_heredocs(lines: list[str]) -> list[_Heredoc]:
    out: list[_Heredoc] = []
    i = 0
    while i < len(lines):
        m = _HEREDOC_RE.search(lines[i])
        if m is None or lines[i].lstrip().startswith("#"):
            i += 1
            continue
        strip_tabs, quoted, tag = m.group(1) == "-", bool(m.group(2)), m.group(3)
        j = _delimiter_line(lines, i + 1, tag, strip_tabs)
        if j == len(lines):
            break  # no delimiter: not a heredoc we understand
        text = "".join(lines[i + 1: j])
        out.append(_Heredoc(i + 1, j, not quoted and ("$" in text or "`" in text)))
        i = j + 1
    return out


def transform_shell(text: str, run_python: RunUnit, run_shell: RunUnit,
                    skipped_rule: str = "NM990") -> tuple[str, list[Finding]]:
    """The shell rules over ``text``, and the Python rules over the bodies of its Python heredocs."""
    new_text, findings = run_shell(text)
    if "python" in text and "-c" in text:
        new_text = _mark_inline(new_text, findings, skipped_rule)
    if "import" in text:
        new_text = _mark_old_imports(new_text, findings, skipped_rule)
    if "<<" in text:
        new_text = _mark_other_heredocs(new_text, findings, skipped_rule)
    if "python" not in text or "<<" not in text:
        return new_text, findings
    old_lines, new_lines = split_lines(text), split_lines(new_text)
    before, after = _python_heredocs(old_lines), _python_heredocs(new_lines)
    if len(before) != len(after):
        return new_text, findings
    seen = {(f.line, f.rule, f.message) for f in findings}
    for old, new in reversed(list(zip(before, after))):
        body = "".join(old_lines[old.start: old.end])
        if "".join(new_lines[new.start: new.end]) != body:
            continue  # a shell rule edited the body: leave it as they made it
        if old.expanded:
            if mentions_neuron(body):
                command = new_lines[new.start - 1]
                above = new_lines[new.start - 2] if new.start >= 2 else ""
                if MARKER_PREFIX not in above:  # (a marker already there is reported by the shell run)
                    findings.append(Finding(line=old.start, column=1, rule=skipped_rule, message=EXPANDED_MESSAGE,
                                            fix="manual"))
                    new_lines.insert(new.start - 1, _marker_line(command, skipped_rule, EXPANDED_MESSAGE))
            continue
        try:
            migrated, py_findings = run_python(body)
        except UnitSyntaxError:
            continue
        if migrated != body:
            if not migrated.endswith("\n"):
                migrated += "\n"
            new_lines[new.start: new.end] = split_lines(migrated)
        for f in py_findings:
            f = dataclasses.replace(f, line=f.line + old.start)
            if (f.line, f.rule, f.message) not in seen:
                seen.add((f.line, f.rule, f.message))
                findings.append(f)
    findings.sort(key=lambda f: (f.line, f.column, f.rule))
    return "".join(new_lines), findings


def _mark_other_heredocs(text: str, findings: list[Finding], rule: str) -> str:
    """A marker above each command whose heredoc is no Python program the script runs (a script or config it
    writes, `cat > run.sh <<EOF`) and holds old-stack code or settings: the rules do not edit heredoc text."""
    lines = split_lines(text)
    python = {h.start - 1 for h in _python_heredocs(lines)}
    out: list[str] = []
    added, i = 0, 0
    while i < len(lines):
        line = lines[i]
        m = _ANY_HEREDOC_RE.search(line) if i not in python and not line.lstrip().startswith("#") else None
        if m is None:
            out.append(line)
            i += 1
            continue
        j = _delimiter_line(lines, i + 1, m.group(3), m.group(1) == "-")
        if j == len(lines):  # no delimiter line: not a heredoc (`x << y` in arithmetic, a here-string)
            out.append(line)
            i += 1
            continue
        if _OLD_STACK_TEXT.search("".join(lines[i + 1: j])) and not (out and MARKER_PREFIX in out[-1]):
            _mark_above(out, findings, lines, i, rule, HEREDOC_MESSAGE)
            added += 1
        out.extend(lines[i: j + 1])
        i = j + 1
    return "".join(out) if added else text


def _mark_above(out: list[str], findings: list[Finding], lines: list[str], i: int, rule: str, message: str) -> None:
    """Append to ``out`` the marker line for line ``i`` of ``lines`` (0-based), and its finding."""
    out.append(_marker_line(lines[i], rule, message))
    findings.append(Finding(line=i + 1, column=1, rule=rule, message=message, fix="manual"))


def _marker_line(line: str, rule: str, message: str) -> str:
    """The marker line to put above ``line``: its indentation and its line ending."""
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    return indent + marker_text(rule, message) + ("\r\n" if line.endswith("\r\n") else "\n")


PROBE_MESSAGE = "Check for the native stack here (transformers, torch_neuronx): {module} is no longer installed."
#: a Python import statement written in a shell string (`CHECK="import optimum.neuron"`, `python -c "..."`)
_IMPORT_RE = re.compile(r"(?:^|[\s;\"'(])(?:import\s+([\w.]+)|from\s+([\w.]+)\s+import\b)")


def _mark_old_imports(text: str, findings: list[Finding], rule: str) -> str:
    """A marker above each command line (outside Python heredocs) whose strings import an old-stack module that
    the migrated project no longer installs: an install check (`python -c "import optimum.neuron"`, a variable
    holding that code) would now fail every time. A line marked already (``python -c`` code) is left."""
    lines = split_lines(text)
    inside = {k for h in _python_heredocs(lines) for k in range(h.start, h.end)}
    out: list[str] = []
    added = 0
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if i not in inside and stripped and not stripped.startswith("#") and ('"' in line or "'" in line):
            old = [m.group(1) or m.group(2) for m in _IMPORT_RE.finditer(line)]
            old = [name for name in old if is_old_stack(name)]
            if old and not (out and MARKER_PREFIX in out[-1]):
                _mark_above(out, findings, lines, i, rule, PROBE_MESSAGE.format(module=old[0]))
                added += 1
        out.append(line)
    return "".join(out) if added else text


#: the TorchNeuron plugin module itself (its XLA-era implementation is old stack): code that only uses it is native
_PLUGIN_RE = re.compile(r"\btorch_neuronx\b(?!\.xla_impl)")


def _mark_inline(text: str, findings: list[Finding], rule: str) -> str:
    """A marker above each ``python -c "<code>"`` line whose code mentions the old stack (the line
    and the ones it continues onto with ``\\``); a finding has the line of the command in ``text``."""
    lines = split_lines(text)
    out: list[str] = []
    added = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        j = i
        while lines[j].rstrip("\r\n").endswith("\\") and j + 1 < len(lines):
            j += 1  # a command continued onto the next lines
        command = "".join(lines[i: j + 1])
        m = _INLINE_RE.search(command)
        code = command[m.end():].split(command[m.end() - 1], 1)[0] if m is not None else ""
        if m is not None and not line.lstrip().startswith("#") and mentions_neuron(_PLUGIN_RE.sub("", code)) \
                and not _PROBE_RE.fullmatch(code) and not (out and MARKER_PREFIX in out[-1]):
            _mark_above(out, findings, lines, i, rule, INLINE_MESSAGE)
            added += 1
        out.extend(lines[i: j + 1])
        i = j + 1
    return "".join(out) if added else text
