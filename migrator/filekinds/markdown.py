"""Markdown / MDX: migrate the code inside fenced code blocks, keep every other byte as it was.

Fences follow CommonMark (``` or ~~~, three or more, closing fence of the same character and at least
the same length, an unclosed fence runs to the end of the document). The language comes from the
first word of the info string. Python blocks go through the same IPython-aware path as notebook cells
(``!pip install ...`` lines are migrated by the shell rules); shell blocks go to the shell rules;
console transcripts (``$ cmd`` / ``# cmd`` prompts followed by output) have only their commands
migrated. Python blocks written as interpreter sessions (``>>> `` / ``... `` prompts, output lines
between the examples) are one program whose examples are migrated like a notebook's cells: prompts
stripped, examples joined, migrated, split back and prompted again, each example's output kept after
it. A Python block that cannot be migrated gets a visible marker as its first line, and so does one
whose every statement the rules removed. Dockerfile blocks (``dockerfile``, or untagged and starting
with ``FROM``) are migrated as Dockerfiles; a shell command written over several lines without
backslashes (flag lines that start with a dash) is shown to the shell rules as one command.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from difflib import SequenceMatcher

import ast

from migrator.filekinds.notebook import (
    RunKind,
    RunUnit,
    _migrate_program,
    _program_cells,
    mentions_neuron,
    migrate_python_unit,
    split_lines,
)
from migrator.model import ENCLOSING_TEXT, IN_DOCUMENT, MARKER_RE, OUTSIDE_NAMES, Finding, fitted, marker_text

SKIP_BLOCK_MESSAGE = "code block does not parse as Python on its own; migrate it by hand"
#: a block of a language the migration does not rewrite (``diff``, ``text``, untagged) that shows old-stack code
OTHER_BLOCK_MESSAGE = "Update the old-stack code of this {lang} block by hand: only Python and shell blocks are rewritten."
#: block languages without `#` comments (a marker line would break a copied example)
_NO_COMMENTS = frozenset({"json", "jsonc", "json5", "jsonl"})
#: what marks old-stack code in such a block (imports, the export CLI, the pre-compile wrapper, the old classes)
_OLD_STACK_CODE = re.compile(
    r"^[ \t+-]*(?:from|import)[ \t]+(?:optimum\.neuron|torch_xla|transformers_neuronx|neuronx_distributed\w*|"
    r"torch_neuron\b|torch_neuronx\.xla_impl)|optimum-cli\b[^\n]*\bexport[ \t]+neuron|\bneuron_parallel_compile\b|"
    r"\btorch_neuronx\.trace\(|\bNeuronModelFor[A-Z]\w*|\bNeuron(?:SFT|ORPO|DPO)?Trainer\b", re.MULTILINE)
EMPTIED_BLOCK_MESSAGE = "Every line of this example was old-stack only and is gone: rewrite it for TorchNeuron or drop it."

PYTHON_LANGS = frozenset({"python", "py", "python3", "ipython", "ipython3", "pycon"})
SHELL_LANGS = frozenset({"bash", "sh", "shell", "zsh"})
CONSOLE_LANGS = frozenset({"console", "shell-session", "shellsession"})
#: fenced blocks that hold a file of another kind, migrated as that file (``run_kind``): a Dockerfile shown in a
#: page (also an untagged block whose first instruction is FROM)
FILE_LANGS = {"dockerfile": ("dockerfile", "Dockerfile"), "docker": ("dockerfile", "Dockerfile"),
              "containerfile": ("dockerfile", "Dockerfile")}
_DOCKERFILE_START = re.compile(r"^FROM\s+\S+", re.I)

_OPEN_RE = re.compile(r"^( *)(`{3,}|~{3,})(.*)$")
_PROMPTS = ("$ ", "# ")


@dataclasses.dataclass
class _Block:
    fence_line: int  # 0-based index of the opening fence line
    start: int  # first content line (0-based)
    end: int  # one past the last content line
    indent: int  # spaces before the opening fence
    lang: str


def _body(line: str) -> tuple[str, str]:
    if line.endswith("\r\n"):
        return line[:-2], "\r\n"
    if line.endswith("\n"):
        return line[:-1], "\n"
    return line, ""


def _language(info: str) -> str:
    info = info.strip()
    if info.startswith("{"):
        info = info[1:].split("}", 1)[0]
    word = info.split()[0] if info.split() else ""
    word = word.split("{", 1)[0].lstrip(".")
    return word.lower()


def _find_blocks(lines: list[str]) -> list[_Block]:
    blocks: list[_Block] = []
    i = 0
    while i < len(lines):
        body, _ = _body(lines[i])
        m = _OPEN_RE.match(body)
        if not m or (m.group(2)[0] == "`" and "`" in m.group(3)):
            i += 1
            continue
        indent, fence = len(m.group(1)), m.group(2)
        max_indent = 3 if indent <= 3 else indent + 3
        close_re = re.compile(
            r"^ {0,%d}%s{%d,}[ \t]*$" % (max_indent, re.escape(fence[0]), len(fence))
        )
        j = i + 1
        while j < len(lines) and not close_re.match(_body(lines[j])[0]):
            j += 1
        blocks.append(_Block(i, i + 1, j, indent, _language(m.group(3))))
        i = j + 1
    return blocks


def _console(
    bodies: list[str], run_shell: RunUnit
) -> tuple[list[str], list[tuple[Finding, int, int]]]:
    """Migrate the prompted commands of a console transcript.

    Returns the new lines and findings as (finding, 0-based line index in ``bodies``, column offset).
    """
    out: list[str] = []
    findings: list[tuple[Finding, int, int]] = []
    pending: list[int] = []  # prompt lines holding a marker comment, waiting for their command
    i = 0
    while i < len(bodies):
        line = bodies[i]
        prompt = line[:2] if line.startswith(_PROMPTS) else None
        if prompt is None:
            out.extend(bodies[k] for k in pending)
            pending = []
            out.append(line)
            i += 1
            continue
        if MARKER_RE.search(line[2:]) and line[2:].lstrip().startswith("#"):
            pending.append(i)
            i += 1
            continue
        j = i + 1
        while j < len(bodies) and bodies[j - 1].endswith("\\"):
            j += 1
        idx = pending + list(range(i, j))
        offsets = [2 if k <= i else 0 for k in idx]
        unit_lines = [bodies[k][off:] for k, off in zip(idx, offsets)]
        unit = "\n".join(unit_lines) + "\n"
        new, fs = run_shell(unit)
        for f in fs:
            n = min(max(f.line, 1), len(idx)) - 1
            findings.append((f, idx[n], offsets[n]))
        if new == unit:
            out.extend(bodies[k] for k in idx)
        else:
            prev = ""
            for ln in (_body(x)[0] for x in split_lines(new)):
                out.append(ln if prev.endswith("\\") else (prompt + ln if ln.strip() else ln))
                prev = ln
        pending = []
        i = j
    out.extend(bodies[k] for k in pending)
    return out, findings


def _prompt(line: str) -> str | None:
    """The code of a ``>>> ``/``... `` line (None for an output line)."""
    for p in (">>>", "..."):
        if line == p:
            return ""
        if line.startswith(p + " "):
            return line[4:]
    return None


def _doctest(bodies: list[str], run_python: RunUnit, run_shell: RunUnit
             ) -> tuple[list[str], list[tuple[Finding, int]]] | None:
    """Migrate an interpreter-session block: new lines and findings as (finding, 0-based line index in
    ``bodies``), or None when it cannot be migrated (an example that does not parse, text before the
    first prompt, or the examples not coming back apart)."""
    examples: list[tuple[list[int], list[str]]] = []  # (line indexes of its code, its output lines)
    for i, line in enumerate(bodies):
        code = _prompt(line.rstrip())
        if code is not None and line.startswith(">>>") and examples and not examples[-1][1] and all(
                (_prompt(bodies[j].rstrip()) or "").lstrip().startswith("#") for j in examples[-1][0]):
            # `>>> # comment` lines (a marker) go with the example below them: the comment is that
            # statement's own, as in a .py file (a second run finds the marker there and adds none)
            examples[-1][0].append(i)
        elif code is not None and (line.startswith(">>>") or not examples):
            examples.append(([i], []))
        elif code is not None and not examples[-1][1]:
            examples[-1][0].append(i)
        elif examples:
            examples[-1][1].append(line)
        else:
            return None
    sources = ["\n".join(_prompt(bodies[i].rstrip()) or "" for i in idx) + "\n" for idx, _ in examples]
    program = _program_cells(list(enumerate(sources)))
    if any(cell.skipped for cell in program):
        return None
    migrated = _migrate_program(program, run_python, run_shell)
    if migrated is None:
        return None
    out: list[str] = []
    findings: list[tuple[Finding, int]] = []
    for k, (idx, output) in enumerate(examples):
        text, fs = migrated[k]
        for f in fs:
            findings.append((dataclasses.replace(f, cell=None), idx[min(max(f.line, 1), len(idx)) - 1]))
        if text == sources[k]:
            out.extend(bodies[i] for i in idx)
            out.extend(output)
            continue
        if not text.strip():
            continue  # the example was removed (an import nothing needs): its output goes with it
        out.extend(_prompted(text))
        out.extend(output)
    return out, findings


def _prompted(text: str) -> list[str]:
    """Source lines with ``>>> `` before each top-level statement (and top-level comment) and ``... ``
    before the lines that continue one."""
    lines = text.rstrip("\n").split("\n")
    starts, inside = {0}, set()
    try:
        body = ast.parse(text).body
    except SyntaxError:
        body = []
    for node in body:
        starts.add(node.lineno - 1)
        inside.update(range(node.lineno, node.end_lineno or node.lineno))
    out = []
    for n, line in enumerate(lines):
        top = n in starts or (body and n not in inside and line.lstrip().startswith("#")
                              and not line.startswith((" ", "\t")))
        prefix = ">>>" if top else "..."
        out.append(f"{prefix} {line}" if line else prefix)
    return out


def _is_console(lang: str, bodies: list[str]) -> bool:
    if lang in CONSOLE_LANGS:
        return True
    first = next((b for b in bodies if b.strip()), "")
    return first.startswith("$ ")


_NAME = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")


def _read_names(text: str) -> frozenset[str]:
    """The names a block reads that it does not import itself (an earlier block's import serves them); every
    word of the block when it does not parse (fenced blocks are often fragments)."""
    body = textwrap.dedent(text)
    if any(ln.lstrip().startswith(">>>") for ln in body.splitlines()):  # an interpreter session: its statements
        codes = (_prompt(ln.lstrip().rstrip()) for ln in body.splitlines())
        body = "\n".join(code for code in codes if code is not None)
    try:
        tree = ast.parse(body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset(_NAME.findall(text))
    imported: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            read.add(node.id)
    return frozenset(read - imported)


#: a class of the old stack by its name (optimum-neuron's Neuron* classes): an example that uses one it does not
#: import (a page's snippet) is not migrated by the rules, which know a name by its import
_OLD_CLASS_NAME = re.compile(r"Neuron(?:ModelFor[A-Z]\w*|(?:SFT|ORPO|DPO|GRPO|KTO)?(?:Trainer|Config)|TrainingArguments|"
                             r"Accelerator|\w*Pipeline(?:Base)?|Model)")
UNIMPORTED_MESSAGE = "Migrate {names} by hand: this example uses them without importing them."
UNIMPORTED_SHORT = "Migrate {name} and the other old-stack classes here by hand: this example does not import them."
UNIMPORTED_PLAIN = "Migrate the old-stack classes of this example by hand: it uses them without importing them."


def _bound_names(text: str) -> frozenset[str]:
    """The names a block binds: imports, assignments, functions and classes (nothing when it does not parse)."""
    try:
        tree = ast.parse(textwrap.dedent(text))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
    return frozenset(bound)


def _unimported_old_classes(text: str, page_bound: frozenset[str]) -> list[str]:
    """The old stack's classes (by name) that a Python block reads and no block of its page binds."""
    return sorted(n for n in _read_names(text) - page_bound if _OLD_CLASS_NAME.fullmatch(n))


_FLAG_LINE = re.compile(r"\s*--?[A-Za-z]")


def _continued(lines: list[str]) -> list[str]:
    """``lines`` with a backslash ending each line that a line of flags (``--name value``: no command starts with
    a dash) directly follows, when it has none: the command a page wrote over several lines."""
    out = list(lines)
    for i in range(1, len(out)):
        prev = out[i - 1].rstrip()
        if _FLAG_LINE.match(out[i]) and prev and not prev.endswith("\\") and " #" not in f" {prev}":
            out[i - 1] = prev + " \\"
    return out


def _statements(text: str) -> int | None:
    try:
        return len(ast.parse(text).body)
    except (SyntaxError, ValueError, RecursionError):
        return None


def _emptied(before: str, after: str, findings: list[Finding]) -> str | None:
    """The rule whose edits left a Python block that had statements with none (every line removed), else None."""
    if not _statements(before) or _statements(after) != 0:
        return None
    return next((f.rule for f in findings if f.fix == "applied"), None)


def _file_kind(lang: str, stripped: list[str]) -> tuple[str, str] | None:
    """(kind, name) of a block holding a file of another kind (:data:`FILE_LANGS`), else None."""
    if lang in FILE_LANGS:
        return FILE_LANGS[lang]
    first = next((b for b in stripped if b.strip() and not b.lstrip().startswith("#")), "")
    if not lang and _DOCKERFILE_START.match(first):
        return FILE_LANGS["dockerfile"]
    return None


def transform_markdown(
    text: str, run_python: RunUnit, run_shell: RunUnit, *, skipped_rule: str = "NM990",
    run_kind: RunKind | None = None,
) -> tuple[str, list[Finding]]:
    """:func:`_transform_markdown`, the blocks' rules reading the whole page (PythonContext/TextContext.whole_text)."""
    token, document = ENCLOSING_TEXT.set(text), IN_DOCUMENT.set(True)
    try:
        return _transform_markdown(text, run_python, run_shell, skipped_rule=skipped_rule, run_kind=run_kind)
    finally:
        IN_DOCUMENT.reset(document)
        ENCLOSING_TEXT.reset(token)


def _transform_markdown(
    text: str, run_python: RunUnit, run_shell: RunUnit, *, skipped_rule: str = "NM990",
    run_kind: RunKind | None = None,
) -> tuple[str, list[Finding]]:
    """Migrate the fenced Python and shell code blocks of a Markdown (or MDX) document, and the blocks that
    hold a file of another kind (a Dockerfile) through ``run_kind(text, kind=..., name=...)`` when given.

    Returns ``text`` itself when nothing changed; otherwise only lines inside code blocks differ.
    Findings' lines are 1-based lines of the whole document.
    """
    lines = split_lines(text)
    findings: list[Finding] = []
    replacements: list[tuple[int, int, list[str]]] = []
    blocks = _find_blocks(lines)
    # the names each Python block uses: a page's blocks are one program read in order, so an import in one
    # block that only later blocks use is not unused (OUTSIDE_NAMES, read by the self-check)
    names = [_read_names("".join(lines[b.start:b.end])) if b.lang in PYTHON_LANGS else frozenset() for b in blocks]
    page_bound = frozenset().union(*(_bound_names("".join(lines[b.start:b.end])) for b in blocks
                                     if b.lang in PYTHON_LANGS))
    for k, block in enumerate(blocks):
        lang = block.lang
        other_lang = lang not in PYTHON_LANGS and lang not in SHELL_LANGS and lang not in CONSOLE_LANGS and (
            run_kind is None or bool(lang and lang not in FILE_LANGS))
        raw = lines[block.start : block.end]
        if not raw:
            continue
        stripped = []
        removed = []
        for line in raw:
            body, _ = _body(line)
            k = min(block.indent, len(body) - len(body.lstrip(" ")))
            stripped.append(body[k:])
            removed.append(k)
        content = "\n".join(stripped) + "\n"
        if not content.strip():
            continue

        new_bodies: list[str] | None = None
        block_findings: list[tuple[Finding, int, int]] = []  # (finding, 0-based content line, col)

        def local(fs: list[Finding]) -> list[tuple[Finding, int, int]]:
            res = []
            for f in fs:
                n = min(max(f.line, 1), len(raw)) - 1
                res.append((f, n, removed[n]))
            return res

        other = None if other_lang else (
            _file_kind(lang, stripped) if run_kind is not None and lang not in PYTHON_LANGS | SHELL_LANGS else None)
        if other_lang or (other is None and lang not in PYTHON_LANGS | SHELL_LANGS | CONSOLE_LANGS):
            # a block of another language, or untagged and no file of a known kind: not rewritten, so where it
            # shows old-stack code its first line says so
            if lang not in _NO_COMMENTS and _OLD_STACK_CODE.search(re.sub(r"\\\n", " ", content)) and not any(
                    MARKER_RE.search(x) for x in stripped[:1]):
                message = OTHER_BLOCK_MESSAGE.format(lang=f"`{lang}`" if lang else "untagged")
                findings.append(Finding(line=block.start + 1, column=block.indent + 1, rule=skipped_rule,
                                        message=message, fix="manual"))
                replacements.append((block.start, block.end, _reassemble(
                    raw, stripped, [marker_text(skipped_rule, message)] + stripped, block, lines)))
            continue
        if other is not None:
            kind, name = other
            new, fs = run_kind(content, kind=kind, name=name)
            block_findings = local(fs)
            if new != content:
                new_bodies = [_body(x)[0] for x in split_lines(new)]
        elif lang in PYTHON_LANGS:
            doctest = any(s.lstrip().startswith(">>>") for s in stripped)
            if doctest:
                done = _doctest(stripped, run_python, run_shell)
                failed = done is None
                if done is not None:
                    new_bodies, fs = done
                    block_findings = [(f, n, removed[n] + 4) for f, n in fs]
            else:
                token = OUTSIDE_NAMES.set(frozenset().union(*names[k + 1:]))
                try:
                    res = migrate_python_unit(content, run_python, run_shell)
                finally:
                    OUTSIDE_NAMES.reset(token)
                failed = res.python_failed
                block_findings = local(res.findings)
                if res.text != content:
                    new_bodies = [_body(x)[0] for x in split_lines(res.text)]
                    emptied = _emptied(content, res.text, res.findings)
                    if emptied is not None:
                        # an example whose every statement the rules removed shows nothing: the page's reader
                        # is told, on the block's first line, instead of finding an empty block
                        message = EMPTIED_BLOCK_MESSAGE
                        block_findings.append((Finding(line=1, column=1, rule=emptied, message=message, fix="manual"),
                                               0, removed[0]))
                        new_bodies = [marker_text(emptied, message)] + [b for b in new_bodies if b.strip()]
                unimported = [] if failed else _unimported_old_classes(res.text, page_bound)
                if unimported and not any(MARKER_RE.search(x) for x in stripped[:1]):
                    # the rules know an old class by its import: one the example never imports is not migrated
                    message = fitted(UNIMPORTED_MESSAGE.format(names=", ".join(unimported)),
                                     UNIMPORTED_SHORT.format(name=unimported[0]), UNIMPORTED_PLAIN)
                    block_findings.append((Finding(line=1, column=1, rule=skipped_rule, message=message,
                                                   fix="manual"), 0, removed[0]))
                    new_bodies = [marker_text(skipped_rule, message)] + (
                        new_bodies if new_bodies is not None else list(stripped))
            if failed and mentions_neuron(content):
                findings.append(
                    Finding(
                        line=block.fence_line + 1, column=block.indent + 1, rule=skipped_rule,
                        message=SKIP_BLOCK_MESSAGE, fix="manual",
                    )
                )
                # visible in the document too, as the block's first line
                comment = marker_text(skipped_rule, SKIP_BLOCK_MESSAGE)
                if not any(MARKER_RE.search(x) for x in stripped[:1]):
                    new_bodies = [(">>> " if doctest else "") + comment] + stripped
        elif _is_console(lang, stripped):
            out, fs = _console(stripped, run_shell)
            block_findings = [(f, n, off + removed[n]) for f, n, off in fs]
            if out != stripped:
                new_bodies = out
        else:
            # a page's command written over several lines without backslashes (`optimum-cli export neuron --model m`,
            # then a line `--batch_size 1`) is one command to its reader: the rules see it continued, and where
            # they change nothing the block keeps its bytes
            joined = _continued(stripped)
            shown = "\n".join(joined) + "\n"
            new, fs = run_shell(shown)
            block_findings = local(fs)
            if new != shown:
                new_bodies = [_body(x)[0] for x in split_lines(new)]

        for f, n, col in block_findings:
            findings.append(
                dataclasses.replace(f, line=block.start + n + 1, column=f.column + col, cell=None)
            )
        if new_bodies is not None and new_bodies != stripped:
            new_raw = _reassemble(raw, stripped, new_bodies, block, lines)
            replacements.append((block.start, block.end, new_raw))

    if not replacements:
        return text, findings
    out_lines = list(lines)
    for start, end, new_lines in reversed(replacements):
        out_lines[start:end] = new_lines
    new_text = "".join(out_lines)
    return (text if new_text == text else new_text), findings


def _reassemble(
    raw: list[str], old: list[str], new: list[str], block: _Block, lines: list[str]
) -> list[str]:
    """New raw lines of a block: unchanged lines keep their exact bytes (indentation, line
    ending); new lines get the fence indentation and the block's line ending."""
    ending = _body(lines[block.fence_line])[1] or "\n"
    pad = " " * block.indent
    out: list[str] = []
    sm = SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            out.extend(raw[i1:i2])
        else:
            out.extend((pad + b if b.strip() else b) + ending for b in new[j1:j2])
    at_eof = block.end == len(lines)
    if out and at_eof and not _body(raw[-1])[1]:
        out[-1] = _body(out[-1])[0]  # the document ended without a newline: keep it that way
    elif out and not _body(out[-1])[1]:
        out[-1] += ending
    return out
