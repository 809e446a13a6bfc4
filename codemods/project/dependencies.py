"""NM501-NM504: dependency declarations of the old Neuron stack.

Handled formats (all line-based: untouched lines keep their bytes):

* pip requirement files (``requirements*.txt``, ``constraints*.txt``), kind ``requirements``;
* ``setup.cfg`` (also kind ``requirements``; recognised by its ``[section]`` headers):
  ``[options] install_requires`` and every key of ``[options.extras_require]``;
* ``pyproject.toml`` (kind ``pyproject``): ``[project] dependencies``,
  ``[project.optional-dependencies]``, ``[dependency-groups]`` (PEP 735), and Poetry's
  ``[tool.poetry.dependencies]``, ``[tool.poetry.group.<g>.dependencies]``,
  ``[tool.poetry.dev-dependencies]`` and ``[tool.poetry.extras]``.

One analysis (:func:`_plan`) reads the whole unit and decides every change; each rule then
applies the operations that carry its id. The decisions:

* NM501 -- ``optimum-neuron`` (and ``optimum[neuron|neuronx]``, ``transformers-neuronx``) is
  replaced by the libraries the migrated code imports, at the versions that have the APIs the
  rules emit (only those its extras implied, only when not listed already); ``torch-xla``,
  ``libneuronxla``, ``neuronx-distributed(-training)`` are removed; an XLA-era ``torch-neuronx``
  pin is dropped (TorchNeuron is ``torch-neuronx`` too) with a marker; a ``neuronx-cc`` pin of the
  old SDK is dropped (TorchNeuron still installs the compiler);
* NM502 -- in a hash-checking requirements file, each of those changes becomes a marker;
* NM503 -- in a unit NM501 migrates, ``transformers``/``accelerate``/``trl``/``peft``/``diffusers``/
  ``sentence-transformers`` pinned below those versions are raised;
* NM504 -- in such a unit, a ``torch`` pin older than TorchNeuron's PyTorch gets a marker.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from codemods.project.dependency_policy import (
    is_old_stack_distribution,
    _below,
    _decide,
    _decide_all,
    _Decision,
    CONSTRAINTS_MARKER,
    _describe,
    _Entry,
    hashed_message,
    HASHED_MARKER,
    long_forms,
    _min_spec,
    MINIMUMS,
    _NEURON_HOST,
    NEURON_REPO,
    _Op,
    _parse_req,
    _Plan,
    _poetry_spec,
    project_uses,
    replacement_requirements,
    _replace_message,
    TORCH_MARKER,
    TORCHNEURON_MARKER,
    TARGET_PINS,
    unparsed_entry,
    UNPARSED_MARKER,
    VLLM_MARKER,
    VLLM_TORCHNEURON_MARKER,
    USES_PROBES,
    _with_extras,
)
from migrator.rules import TextContext, TextRule

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@lru_cache(maxsize=16)
def _plan(text: str, kind: str, included: frozenset[str] = frozenset(),
          facts: frozenset[str] = frozenset()) -> tuple[_Op, ...]:
    """Every change of the unit. ``included``: the packages that the files it includes with
    ``-r`` list once migrated (so that a replacement does not add them a second time); ``facts``:
    the project facts of the run (the libraries its code uses)."""
    with project_uses(facts):
        return _plan_unit(text, kind, included)


def _plan_unit(text: str, kind: str, included: frozenset[str]) -> tuple[_Op, ...]:
    lines = text.splitlines()
    plan = _Plan()
    if kind == "pyproject" and _old_stack_project(text):
        return ()  # the old stack's own packaging (optimum-neuron's pyproject): not a user's dependencies
    if kind == "pyproject":
        _PyProject(lines, plan).run()
        check = _toml_ok
    elif kind == "requirements" and any(_SECTION_RE.match(line) for line in lines):
        _SetupCfg(lines, plan).run()
        check = _cfg_ok
    elif kind == "requirements":
        _PipFile(lines, plan, text, included).run()
        check = None
    else:
        return ()
    if check is not None and any(op.kind == "edit" for op in plan.ops) and check(text):
        if not check(_simulate(lines, plan.ops)):  # pragma: no cover - a bug of ours: never write it
            return tuple(
                _Op(op.rule, "marker", op.start, message=f"{op.message}: could not be rewritten safely, do it by hand")
                if op.kind == "edit" else op
                for op in plan.ops
            )
    return tuple(plan.ops)


def _simulate(lines: list[str], ops: Iterable[_Op]) -> str:
    """The unit's text with every planned edit and marker applied (what the engine will write)."""
    edits = {op.start: op for op in ops if op.kind == "edit"}
    markers: dict[int, list[str]] = {}
    for op in ops:
        if op.kind == "marker":
            markers.setdefault(op.start, []).append("# " + op.message)
    out: list[str] = []
    i = 0
    while i < len(lines):
        out += markers.get(i, [])
        op = edits.get(i)
        if op is not None:
            out += op.new
            i = max(op.end, i + 1)
        else:
            out.append(lines[i])
            i += 1
    return "\n".join(out) + "\n"


def _old_stack_project(text: str) -> bool:
    """A pyproject.toml whose ``[project] name`` (or ``[tool.poetry] name``) is an old-stack distribution."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    names = [doc.get("project", {}).get("name"), doc.get("tool", {}).get("poetry", {}).get("name")]
    return any(isinstance(n, str) and is_old_stack_distribution(n) for n in names)


def _toml_ok(text: str) -> bool:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    return True


def _cfg_ok(text: str) -> bool:
    import configparser

    try:
        configparser.ConfigParser(interpolation=None).read_string(text)
    except configparser.Error:
        return False
    return True


# --------------------------------------------------------------------------- pip requirement files

_COMMENT_RE = re.compile(r"(^|\s+)#.*$")
_OPTION_RE = re.compile(r"(^|\s)--?[A-Za-z]")


def _logical_lines(lines: list[str]) -> list[tuple[int, int, str]]:
    """(start, end, joined text) of every logical line, joining backslash continuations as pip does."""
    out = []
    i = 0
    while i < len(lines):
        start = i
        parts = []
        while lines[i].endswith("\\") and not re.match(r"\s*#", lines[i]) and i + 1 < len(lines):
            parts.append(lines[i].strip("\\"))
            i += 1
        parts.append(lines[i])
        i += 1
        out.append((start, i, "".join(parts)))
    return out


#: an editable install line of a requirements file (`-e git+https://...`, `--editable=...`)
_EDITABLE_RE = re.compile(r"\s*(?:-e|--editable)(?:\s*=\s*|\s+)(\S+)")


def _split_comment(line: str) -> tuple[str, str]:
    m = _COMMENT_RE.search(line)
    return (line[: m.start()], line[m.start():]) if m else (line, "")


class _PipFile:
    def __init__(self, lines: list[str], plan: _Plan, text: str, included: frozenset[str] = frozenset()) -> None:
        self.lines = lines
        self.plan = plan
        self.included = included
        # the index options, not comments (our own markers name the repository too)
        self.repo_hint = any(_NEURON_HOST in _split_comment(line)[0] for line in lines)
        bodies = [_split_comment(joined)[0] for _s, _e, joined in _logical_lines(lines)]
        self.hash_mode = any("--hash" in b or "--require-hashes" in b for b in bodies)

    def entries(self) -> list[_Entry]:
        entries: list[_Entry] = []
        for start, end, joined in _logical_lines(self.lines):
            body, _comment = _split_comment(joined)
            editable = _EDITABLE_RE.match(body)
            if editable:  # `-e git+https://...optimum-neuron.git`: an install of a URL, marked where it is old stack
                e = unparsed_entry(editable.group(1), "", start, "pip", data={"end": end, "options": ""})
                if e is not None:
                    entries.append(e)
                continue
            if not body.strip() or body.lstrip().startswith("-"):
                continue
            m = _OPTION_RE.search(body)
            req_text = body[: m.start()] if m else body
            options = body[m.start():] if m else ""
            parsed = _parse_req(req_text)
            if parsed is None:
                e = unparsed_entry(req_text.strip(), "", start, "pip", data={"end": end, "options": options})
                if e is not None:
                    entries.append(e)
                continue
            entries.append(_Entry(
                parsed.name, frozenset(canonicalize_name(x) for x in parsed.req.extras), "", start, "pip",
                [parsed.req.specifier], parsed.marker, parsed,
                data={"end": end, "options": options},
                hashed="--hash" in options or self.hash_mode, url=parsed.req.url is not None,
            ))
        return entries

    def listed_after_migration(self) -> set[str]:
        """The packages this file lists once migrated: what stays, and what replacements stand for."""
        entries = self.entries()
        decisions = _decide_all(entries, self.repo_hint)
        out: set[str] = set()
        for i, e in enumerate(entries):
            d = decisions.get(i)
            if d is None and e.name in MINIMUMS and e.spec and all(_below(x, Version(MINIMUMS[e.name])) for x in e.spec):
                continue  # pinned too low in a file that is not migrated: it does not count
            if d is None or d.action != "replace":
                out.add(e.name)
            else:
                out.update(d.implied)
                if d.keep_extras is not None:
                    out.add(e.name)
        return out

    def run(self) -> None:
        entries = self.entries()
        decisions = _decide_all(entries, self.repo_hint, included=self.included)
        for i, e in enumerate(entries):
            d = decisions.get(i)
            if d is not None:
                self._apply(e, d)

    def _apply(self, e: _Entry, d: _Decision) -> None:
        plan, start, end = self.plan, e.line, e.data["end"]
        if d.action == "marker":
            plan.marker(d.rule, start, d.marker or d.message)
            return
        if e.hashed:
            message = hashed_message(_describe(e, d))
            plan.marker("NM502", start, message)
            return
        lead = re.match(r"\s*", self.lines[start]).group(0)
        if d.action == "respec":
            # the requirement itself is on the first physical line: rewrite that line only
            first = self.lines[start]
            body, _comment = _split_comment(first)
            m = _OPTION_RE.search(body)
            req_src = body[: m.start()] if m else body
            if req_src.rstrip().endswith("\\"):
                req_src = req_src.rstrip()[:-1]
            parsed = _parse_req(req_src)
            if parsed is None or parsed.name != e.name:
                return
            plan.edit(d.rule, start, start + 1, [parsed.with_spec(d.new_spec or "") + first[len(req_src):]], d.message)
            if d.marker:
                plan.marker(d.rule, start, d.marker)
            return
        # replace by other packages
        new_lines = []
        if d.keep_extras is not None:
            assert e.text is not None
            comment = _split_comment(self.lines[start])[1] if end - start == 1 else ""
            new_lines.append(lead + _with_extras(e.text, d.keep_extras) + comment)  # the package stays
        for name in d.adds:
            new_lines.append(lead + name + _min_spec(name) + e.marker)
        plan.edit(d.rule, start, end, new_lines, _replace_message(d))
        if d.marker:
            plan.marker(d.rule, start, d.marker)


_INCLUDE_RE = re.compile(r"^\s*(?:-r|--requirement)(?:\s*=\s*|\s+|(?=[^\s=-]))(\S+)")
#: how deep ``-r`` chains are followed, and how large an included file may be
_INCLUDE_DEPTH = 8
_INCLUDE_MAX_BYTES = 1_000_000


def _includes(lines: list[str]) -> list[str]:
    """The targets of the ``-r``/``--requirement`` lines (``-c`` constraint files install nothing)."""
    out = []
    for _s, _e, joined in _logical_lines(lines):
        body = _split_comment(joined)[0]
        m = _INCLUDE_RE.match(body)
        if m:
            out.append(m.group(1))
    return out


def included_packages(path, text: str) -> frozenset[str]:
    """Canonical names of the packages that the requirement files ``text`` (read from ``path``)
    includes with ``-r`` list once migrated, following their own ``-r`` lines. Targets are read
    relative to the including file, as pip does; URLs, absolute paths, environment variables,
    missing or unreadable files are skipped."""
    from pathlib import Path

    if path is None or "-r" not in text and "--requirement" not in text:
        return frozenset()
    out: set[str] = set()
    seen: set[Path] = set()
    try:
        root = Path(path).resolve()
    except OSError:
        return frozenset()
    seen.add(root)
    todo = [(root, text, 0)]
    while todo:
        where, body, depth = todo.pop()
        if depth >= _INCLUDE_DEPTH:
            continue
        for target in _includes(body.splitlines()):
            if "://" in target or "$" in target or target.startswith(("/", "~")) or re.match(r"[A-Za-z]:[\\/]", target):
                continue
            try:
                child = (where.parent / target).resolve()
                if child in seen or not child.is_file() or child.stat().st_size > _INCLUDE_MAX_BYTES:
                    continue
                seen.add(child)
                child_text = child.read_bytes().decode("utf-8-sig")
            except (OSError, UnicodeError):
                continue
            child_lines = child_text.splitlines()
            if any(_SECTION_RE.match(line) for line in child_lines):
                continue  # not a requirements file
            out |= _PipFile(child_lines, _Plan(), child_text).listed_after_migration()
            todo.append((child, child_text, depth + 1))
    return frozenset(out)


# --------------------------------------------------------------------------- setup.cfg

_SECTION_RE = re.compile(r"^\[([^\]]+)\]\s*([#;].*)?$")
_CFG_KEY_RE = re.compile(r"^([A-Za-z0-9_.-][^=:]*?)\s*[=:]\s*(.*)$")


class _SetupCfg:
    def __init__(self, lines: list[str], plan: _Plan) -> None:
        self.lines = lines
        self.plan = plan

    def run(self) -> None:
        entries: list[_Entry] = []
        section = ""
        key: str | None = None
        for i, line in enumerate(self.lines):
            m = _SECTION_RE.match(line)
            if m:
                section, key = m.group(1).strip(), None
                continue
            if not line.strip() or line.lstrip().startswith(("#", ";")):
                continue  # comments do not end a value
            if not line[0].isspace():
                key = None
                km = _CFG_KEY_RE.match(line)
                if not km:
                    continue
                name = km.group(1).strip()
                if section == "options" and name == "install_requires":
                    key = ""
                elif section == "options.extras_require":
                    key = name
                else:
                    continue
                value = km.group(2)
                if value.strip():
                    self._entry(entries, i, value, key, keyline=line[: len(line) - len(value)])
                continue
            if key is not None:
                self._entry(entries, i, line, key)
        decisions = _decide_all(entries, False)
        for idx, e in enumerate(entries):
            d = decisions.get(idx)
            if d is not None:
                self._apply(e, d)

    def _entry(self, entries: list[_Entry], i: int, text: str, group: str, keyline: str = "") -> None:
        body, comment = _split_comment(text)
        parsed = _parse_req(body)
        if parsed is None:
            e = unparsed_entry(body.strip(), group, i, "cfg", data={"comment": comment, "keyline": keyline})
            if e is not None:
                entries.append(e)
            return
        entries.append(_Entry(
            parsed.name, frozenset(canonicalize_name(x) for x in parsed.req.extras), group, i, "cfg",
            [parsed.req.specifier], parsed.marker, parsed, data={"comment": comment, "keyline": keyline},
            url=parsed.req.url is not None,
        ))

    def _continuation_indent(self, line: int) -> str:
        for other in self.lines[line + 1:]:
            if other.strip():
                return re.match(r"\s*", other).group(0) or "    " if other[0].isspace() else "    "
        return "    "

    def _apply(self, e: _Entry, d: _Decision) -> None:
        assert e.text is not None
        keyline = e.data["keyline"]
        plan = self.plan
        if d.action == "marker":
            plan.marker(d.rule, e.line, d.marker or d.message)
            return
        if d.action == "respec":
            plan.edit(d.rule, e.line, e.line + 1, [keyline + e.text.with_spec(d.new_spec or "") + e.data["comment"]],
                      d.message)
            if d.marker:
                plan.marker(d.rule, e.line, d.marker)
            return
        items = replacement_requirements(e, d)
        lead = e.text.m.group("lead")
        if keyline:
            indent = self._continuation_indent(e.line)
            new = [keyline.rstrip() + (" " + items[0] if items else "")] + [indent + it for it in items[1:]]
        else:
            new = [lead + it for it in items]
        plan.edit(d.rule, e.line, e.line + 1, new, _replace_message(d))
        if d.marker:
            plan.marker(d.rule, e.line, d.marker)


# --------------------------------------------------------------------------- pyproject.toml

_KEY_RE = re.compile(
    r"""^\s*((?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*'))*)\s*=\s*"""
)
_HEADER_RE = re.compile(r"^\s*\[\[?\s*(.+?)\s*\]\]?\s*(#.*)?$")


def _key_parts(text: str) -> list[str] | None:
    try:
        doc = tomllib.loads(f"{text} = 0")
    except tomllib.TOMLDecodeError:
        return None
    parts = []
    while isinstance(doc, dict) and len(doc) == 1:
        k, doc = next(iter(doc.items()))
        parts.append(k)
    return parts


def _string_end(line: str, c: int) -> int | None:
    """Index after the single-line string starting at ``line[c]``."""
    q = line[c]
    i = c + 1
    while i < len(line):
        if q == '"' and line[i] == "\\":
            i += 2
            continue
        if line[i] == q:
            return i + 1
        i += 1
    return None


@dataclass
class _Item:
    line: int
    start: int
    end: int
    value: str
    quote: str


def _scan_value(lines: list[str], li: int, ci: int) -> tuple[int, int, list[_Item]] | None:
    """Scan the TOML value at ``lines[li][ci:]``: (last line, column after it, depth-1 string items)."""
    depth = 0
    items: list[_Item] = []
    i, c = li, ci
    while i < len(lines):
        line = lines[i]
        while c < len(line):
            ch = line[c]
            if ch == "#":
                break
            if ch in "\"'":
                if line.startswith(ch * 3, c):
                    close = line.find(ch * 3, c + 3)
                    while close < 0:
                        i += 1
                        if i >= len(lines):
                            return None
                        line = lines[i]
                        close = line.find(ch * 3)
                    # a multi-line string is never a dependency: not an item
                    c = close + 3
                    while c < len(line) and line[c] == ch:
                        c += 1
                    if depth == 0:
                        return i, c, items
                    continue
                end = _string_end(line, c)
                if end is None:
                    return None
                if depth == 1:
                    try:
                        value = tomllib.loads("v = " + line[c:end])["v"]
                    except tomllib.TOMLDecodeError:
                        return None
                    items.append(_Item(i, c, end, value, ch))
                c = end
                if depth == 0:
                    return i, c, items
                continue
            if ch in "[{":
                depth += 1
            elif ch in "]}":
                depth -= 1
                if depth <= 0:
                    return i, c + 1, items
            elif depth == 0 and not ch.isspace():
                # a bare scalar (number, boolean, date): ends with the line
                return i, len(_split_toml_comment(line)[0].rstrip()), items
            c += 1
        i += 1
        c = 0
    return None


def _split_toml_comment(line: str) -> tuple[str, str]:
    """(code, comment) of one TOML line; '#' inside single-line strings is not a comment."""
    c = 0
    while c < len(line):
        ch = line[c]
        if ch in "\"'":
            end = _string_end(line, c)
            if end is None:
                return line, ""
            c = end
            continue
        if ch == "#":
            k = c
            while k > 0 and line[k - 1] in " \t":
                k -= 1
            return line[:k], line[k:]
        c += 1
    return line, ""


def _toml_str(value: str, quote: str = '"') -> str:
    if quote == "'" and "'" not in value and "\n" not in value:
        return f"'{value}'"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


@dataclass
class _Array:
    key_line: int
    last_line: int
    items: list[_Item]
    kind: str  # "pep508" | "names"
    group: str


class _PyProject:
    _POETRY_KEEP = ("optional", "markers", "python", "platform")

    def __init__(self, lines: list[str], plan: _Plan) -> None:
        self.lines = lines
        self.plan = plan

    # ---- collection
    def run(self) -> None:
        arrays: list[_Array] = []
        poetry: list[tuple[int, int, str, str, object, str]] = []  # line, last, group, key text, value, name
        table: list[str] | None = []
        i = 0
        lines = self.lines
        while i < len(lines):
            line = lines[i]
            code = _split_toml_comment(line)[0]
            hm = _HEADER_RE.match(code) if code.lstrip().startswith("[") else None
            if hm:
                table = _key_parts(hm.group(1))
                i += 1
                continue
            km = _KEY_RE.match(line)
            if not km:
                i += 1
                continue
            parts = _key_parts(km.group(1))
            scanned = _scan_value(lines, i, km.end())
            if scanned is None:
                i += 1
                continue
            last, _end, items = scanned
            path = (table or []) + (parts or []) if table is not None and parts is not None else None
            if path is not None:
                is_array = line[km.end():].lstrip().startswith("[")
                target = self._array_target(path) if is_array else None
                if target is not None:
                    arrays.append(_Array(i, last, items, target[0], target[1]))
                elif len(path) >= 2 and self._poetry_group(path[:-1]) is not None and path[-1].lower() != "python":
                    value = self._line_value("\n".join(lines[i: last + 1]), parts or [])
                    poetry.append((i, last, self._poetry_group(path[:-1]), km.group(1), value, path[-1]))
            i = last + 1
        self._decide(arrays, poetry)

    @staticmethod
    def _array_target(path: list[str]) -> tuple[str, str] | None:
        if path == ["project", "dependencies"]:
            return "pep508", ""
        if len(path) == 3 and path[:2] == ["project", "optional-dependencies"]:
            return "pep508", "opt:" + path[2]
        if len(path) == 2 and path[0] == "dependency-groups":
            return "pep508", "group:" + path[1]
        if len(path) == 4 and path[:3] == ["tool", "poetry", "extras"]:
            return "names", "poetry-extras"
        return None

    @staticmethod
    def _poetry_group(path: list[str]) -> str | None:
        if path == ["tool", "poetry", "dependencies"]:
            return "poetry"
        if path == ["tool", "poetry", "dev-dependencies"]:
            return "poetry:dev"
        if len(path) == 5 and path[:3] == ["tool", "poetry", "group"] and path[4] == "dependencies":
            return "poetry:" + path[3]
        return None

    @staticmethod
    def _line_value(text: str, parts: list[str]):
        try:
            value = tomllib.loads(text.strip())
            for p in parts:
                value = value[p]
        except (tomllib.TOMLDecodeError, KeyError, TypeError):
            return None
        return value

    # ---- decisions
    def _decide(self, arrays: list[_Array], poetry: list) -> None:
        pep: list[_Entry] = []
        for arr in arrays:
            if arr.kind != "pep508":
                continue
            for it in arr.items:
                parsed = _parse_req(it.value)
                if parsed is None:
                    continue
                pep.append(_Entry(parsed.name, frozenset(canonicalize_name(x) for x in parsed.req.extras), arr.group,
                                  it.line, "pep621", [parsed.req.specifier], parsed.marker, parsed,
                                  data={"item": it, "array": arr}, url=parsed.req.url is not None))
        poe: list[_Entry] = []
        for line, last, group, key_text, value, raw_name in poetry:
            name = canonicalize_name(raw_name)
            spec: list[SpecifierSet] | None = None
            extras: frozenset[str] = frozenset()
            url = False
            if isinstance(value, str):
                spec = _poetry_spec(value)
            elif isinstance(value, dict):
                extras = frozenset(canonicalize_name(x) for x in value.get("extras", []) if isinstance(x, str))
                if "version" in value and isinstance(value["version"], str):
                    spec = _poetry_spec(value["version"])
                elif not value.get("version"):
                    url = True
            elif isinstance(value, list):  # multiple constraints: every alternative counts
                alts = [_poetry_spec(v["version"]) if isinstance(v, dict) and isinstance(v.get("version"), str)
                        else None for v in value]
                if alts and all(a is not None for a in alts):
                    spec = [s for a in alts for s in a]  # type: ignore[union-attr]
            poe.append(_Entry(name, extras, group, line, "poetry", spec, "", None,
                              data={"last": last, "key": key_text, "value": value}, url=url))
        hint = any(_NEURON_HOST in _split_toml_comment(line)[0] for line in self.lines)
        decisions_pep = _decide_all(pep, hint)
        decisions_poe = _decide_all(poe, hint, base="poetry")
        migrating = bool(decisions_pep) or bool(decisions_poe)
        if migrating and not decisions_pep:  # bumps in PEP 621 lists of a Poetry-migrated file
            decisions_pep = {i: d for i, e in enumerate(pep)
                             if (d := _decide(e, False, migrating=True)) is not None and d.rule != "NM501"}
        if migrating and not decisions_poe:
            decisions_poe = {i: d for i, e in enumerate(poe)
                             if (d := _decide(e, False, migrating=True)) is not None and d.rule != "NM501"}
        # ---- PEP 508 arrays
        per_line: dict[int, list[tuple[_Entry, _Decision]]] = {}
        for i, e in enumerate(pep):
            d = decisions_pep.get(i)
            if d is None:
                continue
            if d.action == "marker" or d.marker:
                self.plan.marker(d.rule, e.line, d.marker or d.message)
            if d.action != "marker":
                per_line.setdefault(e.line, []).append((e, d))
        # ---- Poetry tables
        replaced_optional: dict[str, list[str]] = {}
        for i, e in enumerate(poe):
            d = decisions_poe.get(i)
            if d is None:
                continue
            self._apply_poetry(e, d, replaced_optional)
        for arr in arrays:
            if arr.kind == "names":
                for it in arr.items:
                    name = canonicalize_name(it.value)
                    if name in replaced_optional:
                        per_line.setdefault(it.line, []).append((
                            _Entry(name, frozenset(), "poetry-extras", it.line, "poetry-extra", None,
                                   data={"item": it, "array": arr, "names": replaced_optional[name]}),
                            _Decision("NM501", "replace", (
                                f"{name} replaced in this extra by " + ", ".join(replaced_optional[name])
                                if replaced_optional[name] else f"{name} removed from this extra")),
                        ))
        self._apply_array_lines(per_line)

    # ---- array rendering
    def _new_items(self, e: _Entry, d: _Decision) -> list[str] | None:
        """New string values for one item (None = unchanged)."""
        if e.fmt == "poetry-extra":
            return list(e.data["names"])
        return replacement_requirements(e, d)

    def _apply_array_lines(self, per_line: dict[int, list[tuple[_Entry, _Decision]]]) -> None:
        for li, changes in sorted(per_line.items()):
            line = self.lines[li]
            arr: _Array = changes[0][0].data["array"]
            line_items = [it for it in arr.items if it.line == li]
            by_item = {id(e.data["item"]): (e, d) for e, d in changes}
            rule = min(d.rule for _e, d in changes)
            messages = []
            new_values: list[tuple[_Item, list[str] | None]] = []
            for it in line_items:
                ed = by_item.get(id(it))
                if ed is None:
                    new_values.append((it, None))
                    continue
                e, d = ed
                new_values.append((it, self._new_items(e, d)))
                if e.fmt == "poetry-extra":
                    messages.append(d.message)
                else:
                    messages.append(_replace_message(d) if d.action == "replace" else d.message)
            first, last = line_items[0], line_items[-1]
            prefix, suffix = line[: first.start], line[last.end:]
            code_suffix, comment = _split_toml_comment(suffix)
            pure = li != arr.key_line and not prefix.strip() and not code_suffix.replace(",", "").strip()
            # the comment stays with a package that stays
            keep_comment = all(d.action == "respec" or d.keep_extras is not None for _e, d in changes)
            if pure and len(line_items) == 1:
                # one item per line: one line per new item, the last one keeps the line's ending
                it, values = new_values[0]
                assert values is not None
                new_lines = [prefix + _toml_str(v, it.quote) + "," for v in values]
                if new_lines:
                    new_lines[-1] = new_lines[-1][:-1] + code_suffix + (comment if keep_comment else "")
            else:
                sep = line[line_items[0].end: line_items[1].start] if len(line_items) > 1 else ", "
                flat: list[str] = []
                for it, values in new_values:
                    if values is None:
                        flat.append(line[it.start: it.end])
                    else:
                        flat += [_toml_str(v, it.quote) for v in values]
                if flat:
                    new_lines = [prefix + sep.join(flat) + suffix]
                elif pure:
                    new_lines = []
                else:
                    new_lines = [prefix + re.sub(r"^\s*,", "", suffix)]
            self.plan.edit(rule, li, li + 1, new_lines, "; ".join(messages))

    # ---- Poetry rendering
    def _apply_poetry(self, e: _Entry, d: _Decision, replaced_optional: dict[str, list[str]]) -> None:
        line = self.lines[e.line]
        last = e.data["last"]
        value = e.data["value"]
        if d.action == "marker":
            self.plan.marker(d.rule, e.line, d.marker or d.message)
            return
        lead = re.match(r"\s*", line).group(0)
        code, comment = _split_toml_comment(line)
        if d.action == "respec":
            new_constraint = d.new_spec or "*"
            if isinstance(value, list) or last != e.line:
                self.plan.marker(d.rule, e.line, CONSTRAINTS_MARKER.format(what=_describe(e, d)))
                return
            if isinstance(value, str):
                km = _KEY_RE.match(code)
                assert km is not None
                new = code[: km.end()] + _toml_str(new_constraint, code[km.end():].lstrip()[:1] or '"') + comment
            elif isinstance(value, dict) and isinstance(value.get("version"), str):
                vm = re.search(r"""(\bversion\s*=\s*)("(?:[^"\\]|\\.)*"|'[^']*')""", code)
                if vm is None:
                    return
                new = code[: vm.start(2)] + _toml_str(new_constraint, vm.group(2)[0]) + code[vm.end(2):] + comment
            else:
                return
            self.plan.edit(d.rule, e.line, e.line + 1, [new], d.message)
            if d.marker:
                self.plan.marker(d.rule, e.line, d.marker)
            return
        keep = {}
        if isinstance(value, dict):
            keep = {k: value[k] for k in self._POETRY_KEEP if k in value}
        if d.keep_extras is not None:  # optimum with other extras: keep it, without the Neuron ones
            if isinstance(value, dict) and last == e.line:
                em = re.search(r"\bextras\s*=\s*\[[^\]]*\]", code)
                if em is None:
                    return
                new_self = (code[: em.start()] + "extras = " + _toml_value(sorted(d.keep_extras)) + code[em.end():]
                            + comment)
            else:
                return
        else:
            new_self = None
        new_lines = [new_self] if new_self is not None else []
        for name in d.adds:
            constraint = _min_spec(name) or "*"
            if keep:
                body = ", ".join([f"version = {_toml_str(constraint)}"]
                                 + [f"{k} = {_toml_value(v)}" for k, v in keep.items()])
                new_lines.append(f"{lead}{name} = {{ {body} }}")
            else:
                new_lines.append(f"{lead}{name} = {_toml_str(constraint)}")
        if keep.get("optional"):
            replaced_optional[e.name] = list(d.adds) + ([e.name] if new_self is not None else [])
        elif e.name not in replaced_optional:
            replaced_optional[e.name] = [e.name] if new_self is not None else []
        self.plan.edit(d.rule, e.line, last + 1, new_lines, _replace_message(d))
        if d.marker:
            self.plan.marker(d.rule, e.line, d.marker)


# --------------------------------------------------------------------------- rules


class _DependencyRule(TextRule):
    kinds = ("requirements", "pyproject")
    # a target library's pin can be too low for the migrated code even where no Neuron package is named
    # (the decisions then need the run's `uses:old-stack-code` fact): requirements files are few and cheap
    triggers = ("euron", "EURON") + TARGET_PINS
    project_probes = USES_PROBES

    def apply(self, ctx: TextContext) -> None:
        included = included_packages(getattr(ctx, "path", None), ctx.text) if ctx.kind == "requirements" else frozenset()
        for op in _plan(ctx.text, ctx.kind, included, ctx.facts):
            if op.rule != self.id:
                continue
            if op.kind == "edit":
                ctx.replace_lines(op.start, op.end, list(op.new), op.message)
            elif op.kind == "marker":
                ctx.marker(op.start, op.message)
            else:
                ctx.finding(op.start, op.message)


class OldStackDependencies(_DependencyRule):
    id = "NM501"
    markers = long_forms(TORCHNEURON_MARKER, VLLM_MARKER, VLLM_TORCHNEURON_MARKER, CONSTRAINTS_MARKER, UNPARSED_MARKER)
    title = "Old Neuron stack packages in dependency declarations"
    fix = "auto"
    why = f"""
        TorchNeuron runs the Hugging Face libraries natively, so the packages of the XLA-based Neuron
        stack go: `optimum-neuron` (and `optimum[neuron]`, `optimum[neuronx]`) is replaced by the
        libraries the migrated code imports -- `transformers>={MINIMUMS['transformers']}` and
        `accelerate>={MINIMUMS['accelerate']}`, plus `trl`/`peft` for its `[training]` extra,
        `diffusers`/`peft` for `[diffusers]`, `sentence-transformers` for `[sentence-transformers]`
        and `torch-neuronx` for `[neuronx]` -- each only when the list does not name it already;
        `transformers-neuronx` is replaced by `transformers`; `torch-xla`, `libneuronxla`,
        `neuronx-distributed` and `neuronx-distributed-training` are removed (`torch-neuronx` is
        added in their place when the list has none), except that `neuronx-distributed` and
        `neuronx-distributed-inference` stay, with a marker, while code of the project still imports
        `neuronx_distributed` / `neuronx_distributed_inference` (the migration leaves their layers and
        models to a person: removing the package would break that import). `torch-neuronx` itself stays: TorchNeuron is
        distributed under the same name (2.13 or later), so an XLA-era pin (`==2.5.*`,
        `==2.1.2.2.3.0`, anything below 2.13 or in the 6-part `<torch>.<neuron>` scheme) is dropped
        and a marker asks for the release that matches your Neuron SDK. A `neuronx-cc` pin of the
        old SDK is dropped; the compiler itself stays, TorchNeuron uses it.

        Handled: `requirements*.txt`/`constraints*.txt`, `setup.cfg` (`install_requires`,
        `extras_require`), `pyproject.toml` (`[project] dependencies`, optional dependencies,
        `[dependency-groups]`, Poetry dependency tables and extras). Comments, `-r`/`-c` includes,
        index options (the Neuron repository {NEURON_REPO} still serves torch-neuronx),
        environment markers (kept on the replacements), extras and line endings are kept; a removed
        line disappears with its comment.
    """
    before = """
        --extra-index-url https://pip.repos.neuron.amazonaws.com
        optimum-neuron[neuronx]==0.2.0
        neuronx-cc==2.*
        torch-neuronx==2.5.*
        neuronx_distributed==0.11.0
        datasets
    """
    after = f"""
        --extra-index-url https://pip.repos.neuron.amazonaws.com
        transformers>={MINIMUMS['transformers']}
        accelerate>={MINIMUMS['accelerate']}
        neuronx-cc==2.*
        # TODO(neuron-migrate NM501): {TORCHNEURON_MARKER}
        torch-neuronx
        datasets
    """
    caveats = """
        `-e`/URL-only lines and versions from variables (`optimum-neuron==${V}`) are not edited: one
        that installs an old-stack package gets a marker saying what to do with it. An addition is skipped when the library is named in
        the same file (in pyproject, the same list or the base dependencies) or in a file it
        includes with `-r`/`--requirement` (read relative to the including file, following their
        own `-r` lines, as they will read once migrated; a library pinned below the needed version
        there does not count, so that pip reports the conflict). `-c` constraint files install
        nothing and are not read; includes through URLs, absolute paths or variables, and missing
        files, are skipped. `torch-neuron` (Inf1) and its compiler `neuron-cc` stay, with a marker (TorchNeuron
        does not replace them on an Inf1 host: the code is ported first); the companion pins of `torch`
        (`torchvision`...) are left alone. Added libraries carry the
        environment marker of the package they replace.

        `neuronx-cc` is kept and only unpinned: the TorchNeuron install and update pages of Neuron
        2.33 still install the compiler next to it (`pip install "torch-neuronx==2.14.*"
        "neuronx-cc==2.*" nki`), so `neuronx-cc==2.*` and lower bounds stay and an exact pin of an
        old SDK release goes. An XLA-era `torch-neuronx` is any pin that cannot reach 2.13
        (Neuron 2.33 made torch-neuronx for PyTorch 2.13/2.14 TorchNeuron; the XLA-based one for
        PyTorch 2.9 last shipped in Neuron 2.31) or a 6-part `<torch>.<neuron>` release such as
        `2.1.2.2.3.0` (TorchNeuron releases are `2.13.3.0`, `2.14.3.0`); a floor below 2.13
        (`torch-neuronx>=2.1`, which admits both) is raised to `>=2.13`.
    """


class HashedRequirement(_DependencyRule):
    id = "NM502"
    markers = long_forms(HASHED_MARKER)
    title = "Hashed requirement of the old Neuron stack needs regenerating"
    fix = "manual"
    kinds = ("requirements",)
    why = """
        In a hash-checking requirements file (`--hash=...`, `--require-hashes`) every requirement must
        be pinned with `==` and carry the hashes of that exact release: an edited line would carry a
        wrong hash, and an added unhashed line breaks installation. Such files are generated (pip-compile,
        uv, poetry export); the change NM501 or NM503 would make is described in a marker instead, to
        be made in the file it is generated from before regenerating the hashes.
    """
    before = """
        optimum-neuron==0.2.0 \\
            --hash=sha256:0e3d...
    """
    after = f"""
        # TODO(neuron-migrate NM502): {hashed_message(f"remove optimum-neuron and add transformers>={MINIMUMS['transformers']}, accelerate>={MINIMUMS['accelerate']}")}
        optimum-neuron==0.2.0 \\
            --hash=sha256:0e3d...
    """
    caveats = """
        In a file that uses hashes anywhere, every requirement line is treated as hashed.
    """


class LibraryTooOld(_DependencyRule):
    id = "NM503"
    markers = long_forms(CONSTRAINTS_MARKER)
    title = "Library pinned below the version the migrated code needs"
    fix = "auto"
    why = f"""
        The migrated code uses APIs of the current Hugging Face libraries (`DistributedConfig`,
        `device_map="neuron"`, the `neuron` compile backend...). In a file that NM501 migrates, a pin
        that caps one of them below that version is replaced by a lower bound:
        {", ".join(f"`{n}>={v}`" for n, v in MINIMUMS.items())}. A pin of another package that a
        target library the list installs requires at a higher version (`regex==2023.12.25` beside
        `transformers>=5.23`, which requires `regex>=2025.10.22`; `datasets==2.16.1` beside TRL 1.16)
        would make the install unresolvable: it is raised to that floor, read from the installed
        targets' metadata (`tools/gen_dependency_floors.py`). Extras, environment markers and
        comments of the line are kept. In a `pip install` command that the migration edits (shell,
        Dockerfile, notebook), an unpinned target library gets that lower bound too: pip leaves an
        installed older release in place (`pip install transformers` on an image with 4.x keeps 4.x).
    """
    before = """
        optimum-neuron==0.2.0
        transformers==4.51.3  # for the NxD backend
    """
    after = f"""
        accelerate>={MINIMUMS['accelerate']}
        transformers>={MINIMUMS['transformers']}  # for the NxD backend
    """
    caveats = """
        Only files that also declare old-stack packages are touched, so that a project unrelated to
        Neuron keeps its pins; a lower bound in another file (`-r base.txt`) is not seen.
    """


class TorchTooOld(_DependencyRule):
    id = "NM504"
    markers = long_forms(TORCH_MARKER, CONSTRAINTS_MARKER)
    title = "torch pinned below the PyTorch release TorchNeuron is built for"
    fix = "manual"
    why = """
        Each torch-neuronx release pins the torch release it is built for (TorchNeuron: PyTorch 2.13
        or later). A `torch` pin from the XLA era (`torch==2.5.1`, `torch~=2.1.0`) makes the
        environment unsolvable, and which torch is right depends on the torch-neuronx release of your
        Neuron SDK, so the pin gets a marker in files that NM501 migrates.
    """
    before = """
        optimum-neuron==0.2.0
        torch==2.5.1
    """
    after = f"""
        transformers>={MINIMUMS['transformers']}
        accelerate>={MINIMUMS['accelerate']}
        # TODO(neuron-migrate NM504): {TORCH_MARKER}
        torch==2.5.1
    """


RULES = (OldStackDependencies, HashedRequirement, LibraryTooOld, TorchTooOld)
