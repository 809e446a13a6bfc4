"""Jupyter notebooks (``.ipynb``): migrate code cells, keep every other byte as it was.

The notebook is parsed with the :mod:`json` module only to find the code cells. The new text is
produced *surgically*: the JSON text of each changed cell's ``source`` value is replaced inside the
original text, so outputs, metadata, ids, key order, indentation and escapes of everything else stay
byte-identical. The new ``source`` value is written in the representation the original used (a list of
lines, formatted like its siblings, or a single string).

A notebook is one program: its Python cells, in order, are migrated as ONE module (a name imported in
one cell is resolved, rewritten or kept in every later cell), with a boundary statement
``__nm_cell__(k)`` between cells to cut the result back into cells. A cell that does not parse on
its own stays out of that module and is migrated alone (NM990 when it mentions the old stack); if the
boundaries do not come back intact, every cell is migrated alone.

Python cells keep IPython syntax out of the parser's way: line magics (``%matplotlib inline``), shell
escapes (``!pip install ...``, ``files = !ls``) are replaced by placeholder lines that keep the line
count, the cell is migrated, and the lines are put back -- shell escapes and ``%pip`` lines after their
command has been migrated by the shell rules. ``%%bash`` / ``%%sh`` / ``%%script bash`` cells go to the
shell rules; a ``%%writefile path`` cell is a file of the project, migrated as the kind its path names
(``.py`` as a module of its own, ``requirements*.txt``, ``.sh``, ``Dockerfile``).
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import functools
import json
import keyword
import re
import shlex
import warnings
from json.decoder import scanstring
from typing import Callable, Iterator

from migrator.discover import kind_of_name
from migrator.filekinds import UnitSyntaxError
from migrator.model import CELL_BOUNDARY, ENCLOSING_TEXT, IN_KERNEL, MARKER_RE, SKIPPED_CELL, Finding, marker_text

RunUnit = Callable[[str], "tuple[str, list[Finding]]"]
#: ``run_kind(text, kind=..., name=...)``: migrate a file of ``kind`` (see migrator.discover)
#: written by the notebook under the path ``name``
RunKind = Callable[..., "tuple[str, list[Finding]]"]

SKIP_CELL_MESSAGE = "Migrate this cell by hand: it does not parse as Python."

#: Cell magics whose body is shell text.
_SHELL_CELL_MAGICS = (("%%bash",), ("%%sh",), ("%%script", "bash"), ("%%script", "sh"))
#: Cell magics whose body is Python (the magic line is protected like a line magic).
_PYTHON_CELL_MAGICS = ("%%time", "%%timeit", "%%capture", "%%prun")

_MAGIC_TAG_RE = re.compile(r"#\s*__nm_magic_(\d+)(_cont)?__\s*$")
_ASSIGN_RE = re.compile(r"([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*\s*=\s*)(?=[!%])")
_PIP_MAGIC_RE = re.compile(r"%pip(?:\s|$)")


class NotebookError(Exception):
    """The text is not valid JSON or not an nbformat-4 notebook (the message says why)."""


# --------------------------------------------------------------------------------------------
# small text helpers


def split_lines(text: str) -> list[str]:
    """Split on "\\n" only, keeping the endings (unlike str.splitlines, which also splits on \\x0c,
    \\u2028, ...)."""
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def _strip_nl(line: str) -> tuple[str, str]:
    if line.endswith("\n"):
        return line[:-1], "\n"
    return line, ""


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def mentions_neuron(text: str) -> bool:
    low = text.lower()
    return "neuron" in low or "xla" in low


# --------------------------------------------------------------------------------------------
# Python units with IPython syntax


@dataclasses.dataclass
class _Magic:
    start: int  # 0-based index of the first line of the block (markers included)
    lines: list[str]  # original lines of the block, with endings
    indent: str
    shell: bool  # a `!cmd` / `var = !cmd` / `%pip ...` block (else: kept verbatim)
    prefix: str = ""  # text between the indentation and the command: "!", "!!", "files = !", "%"
    n_markers: int = 0  # leading marker comment lines that belong to the shell unit

    @property
    def count(self) -> int:
        return len(self.lines)


class _PyScan:
    """Just enough of a Python tokenizer to know whether a line starts a new statement."""

    def __init__(self) -> None:
        self.depth = 0
        self.delim: str | None = None
        self.continued = False

    @property
    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.delim is None and not self.continued

    def feed(self, line: str) -> None:
        body, _ = _strip_nl(line)
        i, n = 0, len(body)
        delim = self.delim
        escaped_eol = False
        in_comment = False
        while i < n:
            c = body[i]
            if delim is not None:
                if c == "\\":
                    if i + 1 >= n:
                        escaped_eol = True
                    i += 2
                    continue
                if body.startswith(delim, i):
                    i += len(delim)
                    delim = None
                    continue
                i += 1
                continue
            if c == "#":
                in_comment = True
                break
            if c in "\"'":
                if body.startswith(c * 3, i):
                    delim = c * 3
                    i += 3
                else:
                    delim = c
                    i += 1
                continue
            if c in "([{":
                self.depth += 1
            elif c in ")]}":
                self.depth = max(0, self.depth - 1)
            i += 1
        if delim in ('"', "'") and not escaped_eol:
            delim = None  # unterminated single-quoted string: the tokenizer would give up here
        self.delim = delim
        self.continued = delim is None and not in_comment and body.endswith("\\")


def _find_magics(lines: list[str]) -> list[_Magic]:
    magics: list[_Magic] = []
    scan = _PyScan()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not scan.at_statement_start:
            scan.feed(line)
            i += 1
            continue
        indent = _indent_of(line)
        rest = line[len(indent) :]
        m = _ASSIGN_RE.match(rest)
        head = rest[m.end() :] if m else rest
        if head.startswith(("!", "%")):
            j = i + 1  # backslash continuation lines belong to the same block
            while j < len(lines) and _strip_nl(lines[j - 1])[0].endswith("\\"):
                j += 1
            block = lines[i:j]
            if head.startswith("!") or _PIP_MAGIC_RE.match(head):
                # `%pip install ...` runs pip like `!pip install ...`: the shell rules migrate both
                bang = "!!" if head.startswith("!!") else head[0]
                prefix = (m.group(1) if m else "") + bang
                # marker comments just above belong to the shell unit (so that a second run sees
                # them and does not add the same marker again)
                start = i
                while (
                    start - 1 >= 0
                    and MARKER_RE.search(lines[start - 1].strip())
                    and lines[start - 1].lstrip().startswith("#")
                    and not (magics and magics[-1].start + magics[-1].count > start - 1)
                ):
                    start -= 1
                magics.append(
                    _Magic(start, lines[start:j], indent, True, prefix, n_markers=i - start)
                )
            else:
                magics.append(_Magic(i, block, indent, False))
            i = j
            continue
        scan.feed(line)
        i += 1
    return magics


def _protect(lines: list[str], magics: list[_Magic], base: int = 0) -> str:
    """The lines with each magic block replaced by placeholders numbered from ``base``."""
    out = list(lines)
    for n, mg in enumerate(magics, start=base):
        for k in range(mg.count):
            _, nl = _strip_nl(lines[mg.start + k])
            if k == mg.n_markers:
                out[mg.start + k] = f"{mg.indent}pass  # __nm_magic_{n}__{nl}"
            else:
                out[mg.start + k] = f"{mg.indent}# __nm_magic_{n}_cont__{nl}"
    return "".join(out)


def _run_shell_magic(
    mg: _Magic, run_shell: RunUnit
) -> tuple[list[str] | None, list[Finding]]:
    """Migrate one `!cmd` block. Returns (new body lines without indentation, or None when
    unchanged; findings with lines relative to the block)."""
    unit_lines: list[str] = []
    col_offsets: list[int] = []
    for k, line in enumerate(mg.lines):
        body, _ = _strip_nl(line)
        if k < mg.n_markers:
            unit_lines.append(body.lstrip(" \t"))
            col_offsets.append(len(_indent_of(body)))
        elif k == mg.n_markers:
            unit_lines.append(body[len(mg.indent) + len(mg.prefix) :])
            col_offsets.append(len(mg.indent) + len(mg.prefix))
        else:
            unit_lines.append(body)
            col_offsets.append(0)
    unit = "\n".join(unit_lines) + "\n"
    new, findings = run_shell(unit)
    out_findings = []
    for f in findings:
        k = min(max(f.line, 1), len(col_offsets)) - 1
        out_findings.append(dataclasses.replace(f, line=k + 1, column=f.column + col_offsets[k]))
    if new == unit:
        return None, out_findings
    return [_strip_nl(x)[0] for x in split_lines(new)], out_findings


def _render_shell_magic(mg: _Magic, new_lines: list[str], indent: str) -> list[str]:
    """Put `!`, the assignment and the indentation back in front of migrated shell lines."""
    out: list[str] = []
    seen_command = False
    prev = ""
    for line in new_lines:
        if prev.endswith("\\"):
            out.append(line)  # continuation of the previous command
        elif not line.strip():
            out.append("")
        elif line.lstrip().startswith("#"):
            out.append(indent + line.lstrip())
        else:
            prefix = mg.prefix if not seen_command else "!"
            if mg.prefix.endswith("%"):  # a `%pip` block: `%` before pip, `!` before anything else
                prefix = prefix[:-1] + ("%" if line.split()[0] == "pip" else "!")
            out.append(indent + prefix + line)
            seen_command = True
        prev = line
    if not seen_command:
        # the command went away; keep the block valid Python where a statement is needed
        out = [x for x in out if x.strip()]
        if indent:
            out.append(indent + "pass")
    return out


@dataclasses.dataclass
class UnitResult:
    text: str
    findings: list[Finding]
    python_failed: bool  # run_python raised UnitSyntaxError (the Python part was left alone)


def migrate_python_unit(source: str, run_python: RunUnit, run_shell: RunUnit) -> UnitResult:
    """Migrate Python source that may contain IPython line magics and `!` shell escapes.

    Findings' lines are 1-based within ``source``; the cell field is left as the callbacks set it.
    """
    lines = split_lines(source)
    magics = _find_magics(lines)
    protected = _protect(lines, magics) if magics else source

    failed = False
    try:
        new_py, py_findings = run_python(protected)
    except UnitSyntaxError:
        new_py, py_findings, failed = protected, [], True

    if not magics:
        return UnitResult(new_py, list(py_findings), failed)

    shell_results, shell_findings = _run_shell_magics(magics, run_shell)
    findings = list(py_findings) + shell_findings
    restored = _restore(new_py, magics, shell_results)
    if restored is None and new_py != protected:
        # a rule moved or dropped a placeholder: give up the Python changes of this unit
        findings = [f for f in findings if f not in py_findings]
        restored = _restore(protected, magics, shell_results)
    assert restored is not None
    return UnitResult(restored, findings, failed)


def _run_shell_magics(
    magics: list[_Magic], run_shell: RunUnit
) -> tuple[list[list[str] | None], list[Finding]]:
    """Migrate the shell blocks among ``magics``: (new lines or None per magic, findings with
    lines within the unit)."""
    findings: list[Finding] = []
    results: list[list[str] | None] = []
    for mg in magics:
        new_lines = None
        if mg.shell:
            new_lines, fs = _run_shell_magic(mg, run_shell)
            findings.extend(dataclasses.replace(f, line=f.line + mg.start) for f in fs)
        results.append(new_lines)
    return results, findings


def _restore(
    new_py: str, magics: list[_Magic], shell_results: list[list[str] | None], base: int = 0
) -> str | None:
    """Put the magic blocks (placeholders numbered from ``base``) back; None when a placeholder
    went missing, came back twice or came back from another unit."""
    new_lines = split_lines(new_py)
    heads: dict[int, int] = {}
    for idx, line in enumerate(new_lines):
        m = _MAGIC_TAG_RE.search(line)
        if m and not m.group(2):
            n = int(m.group(1)) - base
            if n in heads or not 0 <= n < len(magics):
                return None
            heads[n] = idx
    if len(heads) != len(magics):
        return None
    out: list[str] = []
    for idx, line in enumerate(new_lines):
        m = _MAGIC_TAG_RE.search(line)
        if m is None or not 0 <= int(m.group(1)) - base < len(magics):
            out.append(line)
            continue
        if m.group(2):
            continue  # continuation placeholder: the head line brings the whole block back
        n = int(m.group(1)) - base
        mg = magics[n]
        _, nl = _strip_nl(line)
        indent = _indent_of(line)
        if shell_results[n] is None and indent == mg.indent:
            block = list(mg.lines)
        elif shell_results[n] is None:
            block = [
                indent + ln[len(mg.indent) :] if k <= mg.n_markers else ln
                for k, ln in enumerate(mg.lines)
            ]
        else:
            rendered = _render_shell_magic(mg, shell_results[n], indent)
            block = [x + "\n" for x in rendered]
        if block:
            last, _ = _strip_nl(block[-1])
            block[-1] = last + nl
        out.extend(block)
    return "".join(out)


# --------------------------------------------------------------------------------------------
# cells


def _shell_cell(first_line: str) -> bool:
    words = tuple(first_line.split())
    return any(words[: len(m)] == m for m in _SHELL_CELL_MAGICS)


def writefile_path(first_line: str) -> str | None:
    """The path a ``%%writefile [-a] path`` line names (None for another line)."""
    try:
        words = shlex.split(first_line.strip())
    except ValueError:
        words = first_line.split()
    if not words or words[0] != "%%writefile":
        return None
    args = [w for w in words[1:] if not w.startswith("-")]
    return args[0] if args else None


def _is_python_cell(source: str) -> bool:
    """A cell whose body is Python: no cell magic, or a Python one (%%time, ...)."""
    if not source.strip():
        return False
    first = source.split("\n", 1)[0].strip()
    return not first.startswith("%%") or first.split()[0] in _PYTHON_CELL_MAGICS


def migrate_code_cell(
    source: str, index: int, run_python: RunUnit, run_shell: RunUnit, skipped_rule: str,
    run_kind: RunKind | None = None,
) -> tuple[str, list[Finding]]:
    """Migrate one code cell on its own; findings carry ``cell=index`` and lines within the cell.

    ``%%bash`` bodies go to ``run_shell``; a ``%%writefile path`` body is a file of the project
    and goes to ``run_kind`` as the kind its path names (the magic line is kept as it was).
    """
    lines = split_lines(source)
    if not lines:
        return source, []
    first = lines[0].strip()
    findings: list[Finding] = []
    if first.startswith("%%"):
        run_body: RunUnit | None = None
        body = "".join(lines[1:])
        if _shell_cell(first):
            run_body = run_shell
        elif first.split()[0] == "%%writefile":
            name = writefile_path(first)
            kind = kind_of_name(name) if name is not None else None
            if run_kind is None or kind is None or kind == "notebook":
                return source, []  # a file of a kind this tool does not migrate
            run_body = functools.partial(run_kind, kind=kind, name=name)
        elif first.split()[0] not in _PYTHON_CELL_MAGICS:
            return source, []  # another language (%%html, %%javascript, ...)
        if run_body is not None:
            if not body.strip():
                return source, []
            try:
                new_body, fs = run_body(body)
            except UnitSyntaxError:
                if not mentions_neuron(body):
                    return source, []
                marked, skip = _skipped(body, skipped_rule, index)  # below the magic line
                return lines[0] + ("" if lines[0].endswith("\n") else "\n") + marked, [dataclasses.replace(skip, line=2)]
            findings = [dataclasses.replace(f, line=f.line + 1, cell=index) for f in fs]
            if new_body == body:
                return source, findings
            if not lines[0].endswith("\n"):
                lines[0] += "\n"
            return lines[0] + new_body, findings
    if not source.strip():
        return source, []
    res = migrate_python_unit(source, run_python, run_shell)
    findings = [dataclasses.replace(f, cell=index) for f in res.findings]
    text = res.text
    if res.python_failed and mentions_neuron(source):
        text, skip = _skipped(text, skipped_rule, index)
        findings.append(skip)
    findings.sort(key=lambda f: (f.line, f.column, f.rule))
    return text, findings


def _skipped(text: str, rule: str, index: int) -> tuple[str, Finding]:
    """A cell (or a cell magic's body) that mentions the old stack and does not parse: a marker on its
    first line says so, once (the report holds only what the notebook does)."""
    marker = marker_text(rule, SKIP_CELL_MESSAGE)
    finding = Finding(line=1, column=1, rule=rule, message=SKIP_CELL_MESSAGE, fix="manual", cell=index)
    if marker in text:
        return text, finding
    return marker + "\n" + text, finding


# --------------------------------------------------------------------------------------------
# the notebook's program: its Python cells, in order, as one module


_BOUNDARY_RE = re.compile(rf"^{CELL_BOUNDARY}\((\d+)\)\n", re.M)


@dataclasses.dataclass
class _ProgramCell:
    index: int  # among all cells
    source: str
    magics: list[_Magic]
    base: int  # number of the first magic's placeholder
    protected: str  # placeholders instead of IPython lines; ends with "\n" unless last
    added_nl: bool  # "\n" added after a last line that had none (the next boundary needs it)
    first_line: int = 0  # 1-based line of the program where the cell starts
    #: the cell does not parse on its own: the program holds a stand-in that refers to every name
    #: the cell mentions (so that no import it may use goes away); the cell is migrated alone
    skipped: bool = False


def _parses(source: str) -> bool:
    """Whether ``source`` parses as a module on its own (a cell may ``await`` at top level)."""
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, "<cell>", "exec", flags=flags, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


_CHAIN_RE = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def _stand_in(source: str) -> str:
    """A statement that refers to every name (and ``name.attr`` chain, as rules look at those)
    ``source`` may use; its ignore comment keeps every rule from editing or flagging it."""
    chains: dict[str, None] = {}
    code = "".join(ln for ln in split_lines(source) if not ln.lstrip().startswith("#"))  # not its comment lines
    for chain in _CHAIN_RE.findall(code):
        parts = chain.split(".")
        cut = next((i for i, part in enumerate(parts) if keyword.iskeyword(part)), len(parts))
        if cut:
            chains[".".join(parts[:cut])] = None
    return f"{SKIPPED_CELL}({', '.join(chains)})  # neuron-migrate: ignore\n"


def _program_cells(cells: list[tuple[int, str]]) -> list[_ProgramCell]:
    """The Python cells, protected, with consecutive placeholder numbers; a stand-in for those
    that do not parse on their own."""
    out: list[_ProgramCell] = []
    base = 0
    for index, source in cells:
        lines = split_lines(source)
        magics = _find_magics(lines)
        protected = _protect(lines, magics, base) if magics else source
        if not _parses(protected):
            out.append(_ProgramCell(index, source, [], base, _stand_in(source), False, skipped=True))
            continue
        out.append(_ProgramCell(index, source, magics, base, protected, False))
        base += len(magics)
    for cell in out[:-1]:
        if cell.protected and not cell.protected.endswith("\n"):
            cell.protected += "\n"
            cell.added_nl = True
    return out


def _join(program: list[_ProgramCell]) -> str:
    """One module: the cells, with a boundary statement ``__nm_cell__(k)`` above the k-th cell
    (a statement, not a comment: a rule that removes a statement drops the comments above it,
    never a statement it does not touch)."""
    parts: list[str] = []
    line = 1
    for k, cell in enumerate(program):
        if k:
            parts.append(f"{CELL_BOUNDARY}({k})\n")
            line += 1
        cell.first_line = line
        parts.append(cell.protected)
        line += cell.protected.count("\n")
    return "".join(parts)


def _split(new_program: str, program: list[_ProgramCell]) -> list[str] | None:
    """The migrated text of each cell (placeholders still in), or None unless every boundary
    came back once, in order, at the start of a line."""
    found = list(_BOUNDARY_RE.finditer(new_program))
    if [int(m.group(1)) for m in found] != list(range(1, len(program))):
        return None
    if new_program.count(CELL_BOUNDARY) != len(found):
        return None
    texts, pos = [], 0
    for m in found:
        texts.append(new_program[pos : m.start()])
        pos = m.end()
    texts.append(new_program[pos:])
    for k, cell in enumerate(program):
        if cell.added_nl and texts[k].endswith("\n"):
            texts[k] = texts[k][:-1]
    return texts


def _code_mentions_neuron(source: str) -> bool:
    """Whether lines other than comments and IPython lines mention the old stack."""
    lines = split_lines(source)
    magic_lines = {mg.start + k for mg in _find_magics(lines) for k in range(mg.count)}
    return any(
        mentions_neuron(line) and not line.lstrip().startswith("#")
        for n, line in enumerate(lines) if n not in magic_lines
    )


def _unparsable(source: str) -> tuple[str, list[Finding]]:
    raise UnitSyntaxError("the cell does not parse on its own")


def _migrate_program(
    program: list[_ProgramCell], run_python: RunUnit, run_shell: RunUnit
) -> dict[int, tuple[str, list[Finding]]] | None:
    """Migrate the program's cells as one module: cell index -> (new source, findings with lines
    within the cell). None when the cells cannot be put back apart (the caller then migrates
    them one by one)."""
    try:
        new_program, py_findings = run_python(_join(program))
    except UnitSyntaxError:
        return None  # a cell ast accepts and libcst does not
    texts = _split(new_program, program)
    if texts is None or any(t != c.protected for c, t in zip(program, texts) if c.skipped):
        return None
    if any(t != c.protected and not _parses(t) for c, t in zip(program, texts)):
        return None  # a cut cell that does not parse on its own (each cell then migrates alone, guarded)
    if any(
        _restore(text, cell.magics, [None] * len(cell.magics), cell.base) is None
        for cell, text in zip(program, texts)
    ):
        return None  # a rule moved or dropped a placeholder
    starts = [cell.first_line for cell in program]
    out: dict[int, tuple[str, list[Finding]]] = {}
    by_cell: list[list[Finding]] = [[] for _ in program]
    for f in py_findings:
        k = max(bisect.bisect_right(starts, f.line) - 1, 0)
        by_cell[k].append(dataclasses.replace(f, line=f.line - starts[k] + 1, cell=program[k].index))
    for cell, text, findings in zip(program, texts, by_cell):
        if cell.skipped:
            continue  # migrated alone (its stand-in's findings are not its own)
        if cell.magics:
            shell_results, shell_findings = _run_shell_magics(cell.magics, run_shell)
            findings.extend(dataclasses.replace(f, cell=cell.index) for f in shell_findings)
            text = _restore(text, cell.magics, shell_results, cell.base)
            assert text is not None
        findings.sort(key=lambda f: (f.line, f.column, f.rule))
        out[cell.index] = (text, findings)
    return out


# --------------------------------------------------------------------------------------------
# JSON positions


_WS_RE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _ws(text: str, i: int) -> int:
    return _WS_RE.match(text, i).end()  # type: ignore[union-attr]


def _members(text: str, i: int) -> Iterator[tuple[str, int, int]]:
    """(key, value start, value end) of the object starting at ``text[i] == '{'``."""
    i = _ws(text, i + 1)
    if text[i] == "}":
        return
    while True:
        key, i = scanstring(text, i + 1)
        i = _ws(text, i)
        i = _ws(text, i + 1)  # ':'
        _, end = _DECODER.raw_decode(text, i)
        yield key, i, end
        i = _ws(text, end)
        if text[i] != ",":
            return
        i = _ws(text, i + 1)


def _elements(text: str, i: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each element of the array starting at ``text[i] == '['``."""
    i = _ws(text, i + 1)
    if text[i] == "]":
        return
    while True:
        _, end = _DECODER.raw_decode(text, i)
        yield i, end
        i = _ws(text, end)
        if text[i] != ",":
            return
        i = _ws(text, i + 1)


def _source_spans(text: str, start: int) -> dict[int, tuple[int, int]]:
    """Cell index -> (start, end) of its "source" value in ``text``."""
    spans: dict[int, tuple[int, int]] = {}
    top = _ws(text, start)
    for key, vs, _ in _members(text, top):
        if key != "cells" or text[vs] != "[":
            continue
        spans = {}
        for idx, (es, _) in enumerate(_elements(text, vs)):
            if text[es] != "{":
                continue
            for k2, s2, e2 in _members(text, es):
                if k2 == "source":
                    spans[idx] = (s2, e2)
    return spans


def _detect_ensure_ascii(text: str) -> bool:
    if not text.isascii():
        return False
    for m in re.finditer(r"(?<!\\)(?:\\\\)*\\u([0-9a-fA-F]{4})", text):
        if int(m.group(1), 16) > 127:
            return True
    return False  # nothing to tell: Jupyter's own choice


def _indent_unit(text: str, start: int) -> str | None:
    """Whitespace one nesting level adds, or None for single-line (compact) JSON."""
    top = _ws(text, start)
    gap = text[top + 1 : _ws(text, top + 1)]
    if "\n" not in gap:
        return None
    return gap.rsplit("\n", 1)[1]


def _line_indent(text: str, pos: int) -> str:
    bol = text.rfind("\n", 0, pos) + 1
    return _indent_of(text[bol:pos])


def _render_source(
    text: str, span: tuple[int, int], new_source: str, ensure_ascii: bool, unit: str | None
) -> str:
    s, e = span
    old = text[s:e]
    if old.startswith('"'):
        return json.dumps(new_source, ensure_ascii=ensure_ascii)
    elems = list(_elements(text, s))
    raw_by_value: dict[str, str] = {}
    for es, ee in elems:
        raw_by_value.setdefault(json.loads(text[es:ee]), text[es:ee])
    if elems:
        open_ws = text[s + 1 : elems[0][0]]
        close_ws = text[elems[-1][1] : e - 1]
        sep = text[elems[0][1] : elems[1][0]] if len(elems) > 1 else "," + open_ws
    elif unit is None:
        open_ws, close_ws, sep = "", "", ", "
    else:
        base = _line_indent(text, s)
        open_ws, close_ws = "\n" + base + unit, "\n" + base
        sep = "," + open_ws
    raws = [
        raw_by_value.get(x) or json.dumps(x, ensure_ascii=ensure_ascii)
        for x in split_lines(new_source)
    ]
    if not raws:
        return "[]"
    return "[" + open_ws + sep.join(raws) + close_ws + "]"


# --------------------------------------------------------------------------------------------
# entry point


def _is_python_notebook(nb: dict) -> bool:
    meta = nb.get("metadata")
    if not isinstance(meta, dict):
        return True
    langs = []
    ks = meta.get("kernelspec")
    if isinstance(ks, dict) and isinstance(ks.get("language"), str):
        langs.append(ks["language"])
    li = meta.get("language_info")
    if isinstance(li, dict) and isinstance(li.get("name"), str):
        langs.append(li["name"])
    return all(x.strip().lower() in ("python", "python3", "ipython", "ipython3") for x in langs)


def transform_notebook(
    text: str, run_python: RunUnit, run_shell: RunUnit, *, skipped_rule: str = "NM990",
    run_kind: RunKind | None = None,
) -> tuple[str, list[Finding]]:
    """Migrate the code cells of an nbformat-4 notebook.

    The Python cells that parse are ONE module for ``run_python`` (their order kept, boundary
    statements between them); ``%%bash`` cells go to ``run_shell``; ``%%writefile path`` cells to
    ``run_kind(body, kind=..., name=path)`` (a file of its own: a ``.py`` one is not part of the
    notebook's program). Without ``run_kind``, ``%%writefile`` cells are left alone.

    Returns ``text`` itself when nothing changed; otherwise a text in which only the "source"
    values of changed cells differ. Findings carry the 0-based cell index (among all cells) and
    1-based lines within the cell.
    """
    start = 1 if text.startswith("\ufeff") else 0
    try:
        nb = json.loads(text[start:])
    except (json.JSONDecodeError, RecursionError) as exc:
        raise NotebookError(f"invalid JSON: {exc}".splitlines()[0]) from None
    if not isinstance(nb, dict):
        raise NotebookError("not a notebook: the top-level JSON value is not an object")
    cells = nb.get("cells")
    if not isinstance(cells, list):
        if "worksheets" in nb:
            raise NotebookError(
                "not a notebook this tool reads: nbformat 3 (convert it to nbformat 4)"
            )
        raise NotebookError("not a notebook: no \"cells\" list")
    if not _is_python_notebook(nb):
        return text, []

    sources: list[tuple[int, str, bool]] = []  # (cell index, its source, a code cell)
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict):
            continue
        src = cell.get("source")
        if isinstance(src, list) and all(isinstance(x, str) for x in src):
            sources.append((index, "".join(src), cell.get("cell_type") == "code"))
        elif isinstance(src, str):
            sources.append((index, src, cell.get("cell_type") == "code"))
    code_cells = [(index, src) for index, src, code in sources if code]
    # the units' rules may read the whole notebook (PythonContext/TextContext.whole_text)
    token = ENCLOSING_TEXT.set("\n".join(src for _, src, _ in sources))
    try:
        return _migrate_cells(text, start, code_cells, run_python, run_shell, skipped_rule, run_kind)
    finally:
        ENCLOSING_TEXT.reset(token)


def _migrate_cells(
    text: str, start: int, code_cells: list[tuple[int, str]], run_python: RunUnit, run_shell: RunUnit,
    skipped_rule: str, run_kind: RunKind | None,
) -> tuple[str, list[Finding]]:
    """transform_notebook's work on the notebook's code cells (``(index, source)``)."""
    # the Python cells are one program: a name imported in one cell is used in the next ones
    python = [
        (i, src) for i, src in code_cells if _is_python_cell(src) and CELL_BOUNDARY not in src
    ]
    program = _program_cells(python)
    migrated = None
    if any(not cell.skipped for cell in program):
        kernel = IN_KERNEL.set(True)
        try:
            migrated = _migrate_program(program, run_python, run_shell)
        finally:
            IN_KERNEL.reset(kernel)
    if migrated is None:
        # the cells could not be put back apart: each is migrated on its own (as before
        # notebooks were migrated as one program), which is never worse than leaving them
        migrated = {}
    # a cell that does not parse on its own: its shell lines are migrated, its Python is not (and
    # is reported when its code, not only its comments or shell lines, mentions the old stack)
    unparsable = {cell.index: _code_mentions_neuron(cell.source) for cell in program if cell.skipped}

    findings: list[Finding] = []
    changed: dict[int, str] = {}
    for index, source in code_cells:
        if index in migrated:
            new_source, cell_findings = migrated[index]
        else:
            new_source, cell_findings = migrate_code_cell(
                source, index, _unparsable if index in unparsable else run_python, run_shell,
                skipped_rule, run_kind,
            )
        if index in unparsable and not unparsable[index]:
            cell_findings = [f for f in cell_findings if f.rule != skipped_rule]
        findings.extend(cell_findings)
        if new_source != source:
            changed[index] = new_source

    if not changed:
        return text, findings

    spans = _source_spans(text, start)
    ensure_ascii = _detect_ensure_ascii(text)
    unit = _indent_unit(text, start)
    out = text
    for index in sorted(changed, reverse=True):
        s, e = spans[index]
        out = out[:s] + _render_source(text, (s, e), changed[index], ensure_ascii, unit) + out[e:]
    return out, findings
