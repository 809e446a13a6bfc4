"""Real-world harness: migrate a copy of a corpus of real files and measure what the tool hands back.

    python benchmarks/realworld.py [--corpus DIR] [--only SUBSTR] [--list [WHAT]] [--json FILE] [--jobs N]

The corpus folder (default ``../corpus`` next to the repository, laid out as
``<owner>__<repo>/<path>``) is copied to a temporary directory -- the original is never touched --,
its files are found with the tool's own discovery (:func:`migrator.discover.discover`) and migrated
in memory with every rule (:func:`migrator.engine.run`, the process pool of the CLI): one run over the
whole copy, with project context, as ``neuron-migrate DIR --write`` does. The migrated files are then
written over a second copy, which is discovered afresh and migrated again as a whole, as a second
``neuron-migrate DIR --write`` would do: a file that this project second run changes again is *not
idempotent*. The harness measures; it never fails on a figure (exit status 0 unless the harness
itself breaks).

Per file kind and in total it prints:

* ``files``, ``files changed``; ``errors`` (status "error") and ``crashes`` (errors whose text says
  "internal error": an exception inside a rule); ``non-idempotent (project second run)``: files the
  second whole-project run changes again (or fails on);
* ``syntax broken``: how many more Python parts (a file, a notebook cell, a code block) fail to
  parse after the migration than before it (a block the migration emptied is no failure);
* the self-check of :mod:`migrator.selfcheck` on every Python program of the original and of the
  migrated file (:func:`migrator.selfcheck.programs.programs`: a ``.py`` file; a notebook's code
  cells in order plus its ``%%writefile x.py`` cells; each Python block of a Markdown document),
  compared by :func:`migrator.selfcheck.introduced`: *introduced* undefined names, unresolvable
  target-library imports and unaccepted keywords are those of the output the original did not
  have; *pre-existing* ones are those of the output the original had already. The two target-API
  kinds need ``migrator.selfcheck.targetapi``; without it their cells read ``n/a``. Old-stack
  imports without a marker (and not guarded by ``try/except ImportError``) are counted in the
  original and in the output;
* old-stack references in code, in the original and left in the output, marked or silent (below);
  ``rewritten or marked %`` = 1 - silent references left in the output / references in the
  original;
* ``fixes applied`` and ``markers`` (FileResult.applied / .manual), and ``reported, not in the file``:
  manual actions of the report whose sentence no line of the output holds (the report says what the
  file holds: 0 is the contract); below the table, the markers of
  the output per file, their length distribution (the contract: one sentence of at most 120
  characters after the prefix) and the longest ones.

Old-stack references in code
----------------------------
*Python* (every program above; parts that do not parse are not counted; comments and docstrings
never count, being no part of the syntax tree the count walks):

* each ``import`` / ``from ... import`` statement of an old-stack module: ``optimum.neuron``,
  ``torch_xla``, ``torch_neuron``, ``torch.neuron``, ``transformers_neuronx``, ``neuronx_distributed``
  (and its ``_training`` / ``_inference`` siblings), ``libneuronxla`` and their submodules
  (:data:`migrator.model.OLD_STACK_ROOTS`), or of one of the XLA-era APIs of
  ``torch_neuronx`` (:data:`OLD_NEURONX`: ``trace``, ``xla_impl``, ``DataParallel``,
  ``dynamic_batch``, ``async_load``, ``lazy_load``, ``move_trace_to_device``; ``torch_neuronx``
  itself is the TorchNeuron plugin and does not count), guarded by ``try/except ImportError`` or
  not: one reference per statement;
* each use of a name -- an ``ast.Name`` read, i.e. the root of an attribute chain, counted once per
  chain -- whose fully qualified chain resolves through the imports of the program to one of those
  modules or APIs (``xm.mark_step()`` with ``import torch_xla.core.xla_model as xm``;
  ``torch.neuron.trace(...)`` with ``import torch``; ``torch_neuronx.trace(...)``). The imports of
  the original program resolve names too, so that a use left behind after its import was removed
  still counts;
* each string literal (not a docstring) that is exactly ``"xla"`` or ``"xla:<n>"`` (a device or a
  backend), exactly an ``XLA_*`` environment variable name, or a space-free string naming an
  old-stack package (a requirement such as ``"optimum-neuron==0.0.3"`` in a ``setup.py``).

*Text* (shell scripts, requirements, ``pyproject.toml``, Dockerfiles, and the shell units of
notebooks -- ``!`` lines, ``%%bash`` cells -- and of Markdown -- shell and console code blocks --,
exactly as the migration hands them to the text rules; Markdown prose does not count): each line,
comments stripped (a line starting with ``#``, or the text after `` #``), that matches one of
:data:`TEXT_PATTERNS` -- the old-stack package names (``optimum-neuron`` / ``optimum_neuron`` /
``optimum.neuron``, ``optimum[neuron]`` / ``optimum[neuronx]``, ``torch-xla`` / ``torch_xla``,
``torch-neuron`` (Inf1, not ``torch-neuronx``), ``neuronx-distributed*``, ``transformers-neuronx``,
``libneuronxla``) or an ``XLA_*`` environment variable -- is one reference.

A reference is *marked* when a ``# TODO(neuron-migrate NMxxx): ...`` marker (or a
``# neuron-migrate: ignore`` comment) is on the lines of its statement (for a compound statement:
its header up to the reference; for a text line: the line and the backslash-continued lines of its
command) or in the contiguous comment lines right above them; an import in the body of a ``try``
(an availability gate) is also marked by a marker on its ``try``. A use of a name whose import
statement is marked is *covered by its import's marker* (one marker per cause: the import names what
to replace, and its uses go with it), counted on a row of its own; otherwise it is *silent*.

``--list`` prints, per file, what each figure counted: crashes, errors, non-idempotent files (with
the first lines of the project second run's diff), broken syntax, introduced violations and old-stack
imports left without a marker; ``--list silent`` also the silent references left; ``--list KIND``
(``python``, ``notebook``, ...) only the files of that kind. The pre-existing unresolvable imports
and unaccepted keywords are listed at the end, grouped by name, with counts.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from migrator.discover import discover  # noqa: E402
from migrator.engine import RuleSelection, _decode, default_jobs, run  # noqa: E402
from migrator.model import KINDS, MARKER_PREFIX, MARKER_RE, ignored_rules  # noqa: E402
from migrator.selfcheck.check import KEYWORD, OLD_STACK, UNDEFINED, UNRESOLVED, check_program, introduced  # noqa: E402
from migrator.model import OLD_STACK_ROOTS  # noqa: E402
from migrator.selfcheck.programs import programs, shell_units  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "corpus"

#: XLA-era APIs of torch_neuronx (the TorchNeuron plugin itself is no old-stack module)
OLD_NEURONX = (
    "torch_neuronx.trace",
    "torch_neuronx.xla_impl",
    "torch_neuronx.DataParallel",
    "torch_neuronx.dynamic_batch",
    "torch_neuronx.async_load",
    "torch_neuronx.lazy_load",
    "torch_neuronx.move_trace_to_device",
)
_OLD_PREFIXES = tuple(OLD_STACK_ROOTS) + OLD_NEURONX

_PACKAGES = (
    r"\boptimum[-_.]neuron",
    r"\boptimum\[neuronx?\]",
    r"\btorch[-_]xla\b",
    r"\btorch[-_]neuron\b",
    r"\bneuronx[-_]distributed",
    r"\btransformers[-_]neuronx\b",
    r"\blibneuronxla\b",
)
#: what makes a line of shell-like text an old-stack reference
TEXT_PATTERNS = _PACKAGES + (r"\bXLA_[A-Z0-9_]+",)
_TEXT_RE = re.compile("|".join(TEXT_PATTERNS))
_PACKAGE_RE = re.compile("|".join(_PACKAGES))
_XLA_DEVICE_RE = re.compile(r"xla(:\d+)?")
_XLA_ENV_RE = re.compile(r"XLA_[A-Z0-9_]+")
_TRAILING_COMMENT_RE = re.compile(r"\s#.*$")

#: the rows of the table: (key, label); keys of :func:`measure_file`'s counts
ROWS = (
    ("files", "files"),
    ("changed", "files changed"),
    ("errors", "errors"),
    ("crashes", "  crashes (internal error)"),
    ("non_idempotent", "non-idempotent (project second run)"),
    ("syntax_broken", "syntax broken (parts)"),
    ("undefined_introduced", "undefined names: introduced"),
    ("unresolved_introduced", "unresolvable target imports: introduced"),
    ("unresolved_preexisting", "unresolvable target imports: pre-existing"),
    ("keyword_introduced", "unaccepted keywords: introduced"),
    ("keyword_preexisting", "unaccepted keywords: pre-existing"),
    ("old_imports_original", "old-stack imports w/o marker: original"),
    ("old_imports_left", "old-stack imports w/o marker: left"),
    ("refs_original", "old-stack references: original"),
    ("refs_marked", "  left in output, marked"),
    ("refs_covered", "  left, covered by import marker"),
    ("refs_silent", "  left in output, silent"),
    ("refs_done_pct", "  rewritten or marked %"),
    ("applied", "fixes applied"),
    ("manual", "markers"),
    ("unwritten", "  reported, not in the file"),
)
API_ROWS = ("unresolved_introduced", "unresolved_preexisting", "keyword_introduced", "keyword_preexisting")
KIND_LABELS = {"requirements": "reqs", "dockerfile": "docker"}


def target_api_available() -> bool:
    try:
        import migrator.selfcheck.targetapi  # noqa: F401
    except ImportError:
        return False
    return True


# ----------------------------------------------------------------------------- references


def _old(qual: str) -> bool:
    return any(qual == p or qual.startswith(p + ".") for p in _OLD_PREFIXES)


#: the third state of a reference: a use of a name whose import statement carries a marker
COVERED = "covered"


def _marked(lines: list[str], first: int, last: int) -> bool:
    """A marker or an ignore comment on lines first..last (1-based) or in the comments right above."""
    for ln in range(first, last + 1):
        text = lines[ln - 1] if 0 < ln <= len(lines) else ""
        if "neuron-migrate" in text and (MARKER_RE.search(text) or ignored_rules(text) is not None):
            return True
    ln = first - 1
    while ln >= 1 and lines[ln - 1].lstrip().startswith("#"):
        if MARKER_RE.search(lines[ln - 1]) or ignored_rules(lines[ln - 1]) is not None:
            return True
        ln -= 1
    return False


def _constant_ref(value: object) -> bool:
    if not isinstance(value, str):
        return False
    if _XLA_DEVICE_RE.fullmatch(value) or _XLA_ENV_RE.fullmatch(value):
        return True
    return bool(value) and not any(c.isspace() for c in value) and _PACKAGE_RE.search(value) is not None


_DOC_OWNERS = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_BODIES = ("body", "orelse", "finalbody")


class _Part:
    """One parsed Python part, walked once: its nodes, their parents, the names its imports bind."""

    def __init__(self, tree: ast.Module, lines: list[str]) -> None:
        self.tree, self.lines = tree, lines
        self.parents: dict[int, ast.AST] = {}
        self.nodes: list[ast.AST] = []
        self.bindings: dict[str, str] = {}  # local name -> qualified name (the first binding wins)
        self.binders: dict[str, ast.stmt] = {}  # local name -> the import statement that binds it
        self.docstrings: set[int] = set()
        todo: list[ast.AST] = [tree]
        while todo:
            node = todo.pop()
            self.nodes.append(node)
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
                todo.append(child)
            if isinstance(node, ast.Import):
                for a in node.names:
                    local = a.asname or a.name.split(".")[0]
                    self.bindings.setdefault(local, a.name if a.asname else local)
                    self.binders.setdefault(local, node)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name != "*":
                        self.bindings.setdefault(a.asname or a.name, f"{node.module}.{a.name}")
                        self.binders.setdefault(a.asname or a.name, node)
            elif isinstance(node, _DOC_OWNERS) and node.body:
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                    self.docstrings.add(id(first.value))
        self.nodes.sort(key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))

    @classmethod
    def parse(cls, text: str) -> "_Part | None":
        try:
            return cls(ast.parse(text), text.splitlines())
        except (SyntaxError, ValueError, RecursionError):
            return None

    def _statement(self, node: ast.AST) -> ast.stmt:
        while not isinstance(node, ast.stmt):
            node = self.parents[id(node)]
        return node

    def _is_marked(self, node: ast.AST) -> bool:
        stmt = self._statement(node)
        first = min(stmt.lineno, getattr(node, "lineno", stmt.lineno))
        compound = any(
            isinstance(getattr(stmt, f, None), list) and getattr(stmt, f) and isinstance(getattr(stmt, f)[0], ast.stmt)
            for f in _BODIES
        ) or bool(getattr(stmt, "handlers", None))
        if compound:  # the header, up to the reference
            last = getattr(node, "end_lineno", None) or getattr(node, "lineno", stmt.lineno)
        else:
            last = stmt.end_lineno or stmt.lineno
        for d in getattr(stmt, "decorator_list", None) or ():
            first = min(first, d.lineno)
        if _marked(self.lines, first, last):
            return True
        # an import in the body of a ``try`` (an availability gate): the marker on the ``try`` is its
        if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
            return False
        child, up = stmt, self.parents.get(id(stmt))
        while up is not None and not isinstance(up, ast.Module):
            if isinstance(up, ast.Try) and any(child is s for s in up.body):
                return _marked(self.lines, up.lineno, up.lineno)
            child, up = up, self.parents.get(id(up))
        return False

    def references(self, extra: dict[str, str] | None = None) -> list[tuple[int, str, bool]]:
        """The old-stack references: (line, what, marked) each (see the module docstring).
        ``extra``: bindings of names the part's own imports do not bind (those of the original
        program, so that a use whose import was removed still counts)."""
        local = dict(extra or {})
        local.update(self.bindings)
        out: list[tuple[int, str, bool]] = []
        for node in self.nodes:
            what = None
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names if _old(a.name)]
                what = "import " + ", ".join(names) if names else None
            elif isinstance(node, ast.ImportFrom):
                if node.module and not node.level:
                    names = [a.name for a in node.names if _old(node.module) or _old(f"{node.module}.{a.name}")]
                    what = f"from {node.module} import {', '.join(names)}" if names else None
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in local:
                chain = [local[node.id]]
                up: ast.AST = node
                while True:
                    parent = self.parents.get(id(up))
                    if not (isinstance(parent, ast.Attribute) and parent.value is up):
                        break
                    chain.append(parent.attr)
                    up = parent
                qual = ".".join(chain)
                what = qual if _old(qual) else None
            elif isinstance(node, ast.Constant) and id(node) not in self.docstrings and _constant_ref(node.value):
                what = repr(node.value)
            if what is not None:
                marked: bool | str = self._is_marked(node)
                binder = self.binders.get(node.id) if isinstance(node, ast.Name) else None
                if not marked and binder is not None and self._is_marked(binder):
                    marked = COVERED  # one marker per cause: the import's marker covers its uses
                out.append((node.lineno, what, marked))  # type: ignore[attr-defined]
        return out


def python_references(source: str, extra: dict[str, str] | None = None) -> list[tuple[int, str, bool]] | None:
    """The old-stack references of one Python part (None when it does not parse)."""
    part = _Part.parse(source)
    return None if part is None else part.references(extra)


def text_references(text: str) -> list[tuple[int, str, bool]]:
    """The old-stack references of one unit of shell-like text: (line, matched text, marked)."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines, 1):
        if line.lstrip().startswith("#"):
            continue
        code = _TRAILING_COMMENT_RE.sub("", line)
        m = _TEXT_RE.search(code)
        if not m:
            continue
        first = i  # the command starts where the previous line does not continue into this one
        while first > 1 and lines[first - 2].rstrip().endswith("\\"):
            first -= 1
        out.append((i, m.group(0), _marked(lines, first, i)))
    return out


# ----------------------------------------------------------------------------- one file


def _violations(progs: list[tuple[list[str], bool]]) -> list:
    out = []
    for parts, notebook in progs:
        out += check_program(parts, notebook)
    return out


class _Parts(dict):
    """Part text -> its :class:`_Part` (or None), so that parts the migration left alone are parsed
    and walked once for the original and the output; ``refs``: their references, likewise."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[str, list[tuple[int, str, bool]]] = {}

    def __missing__(self, text: str) -> _Part | None:
        self[text] = _Part.parse(text)
        return self[text]


def _file_references(kind: str, progs: list[tuple[list[str], bool]], text: str, extra: dict[str, str],
                     parsed: _Parts) -> tuple[list[tuple[str, str, bool]], int]:
    """(every reference of the file as (where, what, marked), how many Python parts do not parse)."""
    refs: list[tuple[str, str, bool]] = []
    failed = 0
    cache = parsed.refs  # the same ``extra`` for the original and the output
    for p, (parts, _) in enumerate(progs):
        for i, source in enumerate(parts):
            part = parsed[source]
            if part is None:
                failed += 1
                continue
            where = "line " if len(progs) == 1 and len(parts) == 1 else f"program {p} part {i} line "
            if source not in cache:
                cache[source] = part.references(extra)
            refs += [(where + str(ln), what, m) for ln, what, m in cache[source]]
    units = shell_units(kind, text)
    for u, unit in enumerate(units):
        where = "line " if kind not in ("notebook", "markdown") else f"shell unit {u} line "
        refs += [(where + str(ln), what, m) for ln, what, m in text_references(unit)]
    return refs, failed


def measure_file(kind: str, original: str, migrated: str) -> dict:
    """What the migration of one file did, as counts and the names behind them.

    Returns a dict with, for each key of :data:`ROWS` it can tell from the two texts, a number, and
    the lists behind the introduced violations (``*_names``) and the silent references left.
    """
    before_progs = programs(kind, original)
    after_progs = before_progs if migrated == original else programs(kind, migrated)
    before = _violations(before_progs)
    after = before if migrated == original else _violations(after_progs)
    new = introduced(before, after)
    new_keys = Counter(v.key for v in new)
    pre_keys = Counter(v.key for v in after) - new_keys

    parsed = _Parts()
    extra: dict[str, str] = {}
    for parts, _ in before_progs:
        for source in parts:
            part = parsed[source]
            for k, v in (part.bindings if part else {}).items():
                extra.setdefault(k, v)
    refs_before, failed_before = _file_references(kind, before_progs, original, extra, parsed)
    if migrated == original:
        refs_after, failed_after = refs_before, failed_before
    else:
        refs_after, failed_after = _file_references(kind, after_progs, migrated, extra, parsed)

    def names(keys: Counter, kind_: str) -> list[str]:
        return sorted(name for (k, name), n in keys.items() if k == kind_ for _ in range(n))

    out = {
        "syntax_broken": max(0, failed_after - failed_before),
        "undefined_names": names(new_keys, UNDEFINED),
        "unresolved_names": names(new_keys, UNRESOLVED),
        "unresolved_preexisting_names": names(pre_keys, UNRESOLVED),
        "keyword_names": names(new_keys, KEYWORD),
        "keyword_preexisting_names": names(pre_keys, KEYWORD),
        "old_imports_left_names": sorted(v.name for v in after if v.kind == OLD_STACK),
        "old_imports_original": sum(1 for v in before if v.kind == OLD_STACK),
        "refs_original": len(refs_before),
        "refs_marked": sum(1 for r in refs_after if r[2] is True),
        "refs_covered": sum(1 for r in refs_after if r[2] == COVERED),
        "silent": [f"{where}: {what}" for where, what, marked in refs_after if not marked],
        # the markers of the output (new and kept ones): (rule, text after the prefix)
        "marker_texts": [(m.group(1), m.group(2)) for line in _text_lines(kind, migrated)
                         if MARKER_PREFIX in line and (m := MARKER_RE.search(line))],
    }
    out["undefined_introduced"] = len(out["undefined_names"])
    out["unresolved_introduced"] = len(out["unresolved_names"])
    out["unresolved_preexisting"] = len(out["unresolved_preexisting_names"])
    out["keyword_introduced"] = len(out["keyword_names"])
    out["keyword_preexisting"] = len(out["keyword_preexisting_names"])
    out["old_imports_left"] = len(out["old_imports_left_names"])
    out["refs_silent"] = len(out["silent"])
    return out


def _text_lines(kind: str, text: str) -> list[str]:
    """The lines of a file as a person reads them (a notebook: its cells' lines)."""
    if kind == "notebook":
        try:
            cells = json.loads(text).get("cells", [])
        except (ValueError, AttributeError):
            return []
        return [line for c in cells for line in "".join(c.get("source", "")).splitlines()]
    return text.splitlines()


def _measure_job(args: tuple[str, str, str]) -> dict:
    return measure_file(*args)


# ----------------------------------------------------------------------------- the corpus


def _text(data: bytes, kind: str) -> str:
    try:
        return _decode(data, kind)[0]
    except (UnicodeError, LookupError):
        return data.decode("utf-8", "replace")


def _first_diff(a: str, b: str, n: int = 6) -> list[str]:
    lines = [ln.rstrip("\n") for ln in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)]
    return [ln for ln in lines[2:] if not ln.startswith("@@")][:n]


def _discover(root: Path, only: str | None) -> list:
    """The files of ``root`` as ``neuron-migrate DIR`` finds them (those whose path contains ``only``)."""
    cands, _errs = discover(["."], cwd=root)
    return [c for c in cands if not only or only in c.display]


def harness(corpus: Path, only: str | None = None, jobs: int | None = None,
            selection: RuleSelection | None = None) -> dict:
    """Migrate a copy of ``corpus`` twice, each time as one project run, and measure every file
    (``selection``: the rules, default every rule). Returns
    ``{"files": [per-file dict], "not_discovered": [paths], "timings": {...}, "target_api": bool,
    "corpus": str, "jobs": int}``; each file's
    dict holds ``path``, ``kind``, ``status``, ``error``, ``changed``, ``errors``, ``crashes``,
    ``non_idempotent`` (+ ``second_diff``), ``applied``, ``manual`` and :func:`measure_file`'s keys."""
    jobs = jobs or default_jobs()
    selection = selection or RuleSelection()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nm-realworld-") as tmp_s:
        tmp = Path(tmp_s).resolve()
        first_dir, second_dir = tmp / "first", tmp / "second"
        shutil.copytree(corpus, first_dir, symlinks=True)
        cands = _discover(first_dir, only)
        taken = {c.display for c in cands}
        skipped = sorted(
            p.relative_to(first_dir).as_posix() for p in first_dir.rglob("*")
            if p.is_file() and p.relative_to(first_dir).as_posix() not in taken
            and (not only or only in p.relative_to(first_dir).as_posix())
        )
        t1 = time.perf_counter()
        results = run(cands, selection, jobs=jobs)
        t2 = time.perf_counter()

        shutil.copytree(first_dir, second_dir, symlinks=True)
        originals: list[str] = []
        migrated: list[str] = []
        for cand, res in zip(cands, results):
            data = cand.path.read_bytes()
            text = res.old_text if res.old_text is not None else _text(data, cand.kind)
            originals.append(text)
            migrated.append(res.new_text if res.status == "changed" and res.new_text is not None else text)
            if res.status == "changed" and res.new_bytes is not None:
                (second_dir / cand.display).write_bytes(res.new_bytes)
        # the project second run: the written copy discovered and migrated again as a whole (a file
        # of one project may change another's migration: project_triggers, project facts)
        t3 = time.perf_counter()
        cands2 = _discover(second_dir, only)
        by_path = dict(zip((c.display for c in cands2), run(cands2, selection, jobs=jobs)))
        t4 = time.perf_counter()
        results2 = [by_path.get(c.display) for c in cands]

    work = [(c.kind, o, m) for c, o, m in zip(cands, originals, migrated)]
    if jobs > 1 and len(work) >= 16:
        import multiprocessing

        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        with ProcessPoolExecutor(min(jobs, 32), mp_context=ctx) as pool:
            measures = list(pool.map(_measure_job, work, chunksize=4))
    else:
        measures = [measure_file(*w) for w in work]
    t5 = time.perf_counter()

    files = []
    for cand, res, res2, m, mig in zip(cands, results, results2, measures, migrated):
        error = res.error if res.status == "error" else None
        entry = {
            "path": cand.display,
            "kind": cand.kind,
            "status": res.status,
            "error": error,
            "changed": int(res.status == "changed"),
            "errors": int(res.status == "error"),
            "crashes": int(bool(error) and "internal error" in error),
            "non_idempotent": int(res2 is None or res2.status == "changed"
                                  or (res2.status == "error" and res.status != "error")),
            "applied": res.applied,
            "manual": res.manual,
            **m,
        }
        # manual actions the report names that the file does not hold (the report says what the file holds)
        lines = _text_lines(cand.kind, mig)
        entry["unwritten_texts"] = [f.message for f in res.findings if f.fix == "manual"
                                    and not any(f.message in line for line in lines)]
        entry["unwritten"] = len(entry["unwritten_texts"])
        if entry["non_idempotent"]:
            entry["second_diff"] = (
                ["second run: not discovered"] if res2 is None
                else _first_diff(mig, res2.new_text) if res2.new_text is not None
                else [f"second run: {res2.error}"]
            )
        files.append(entry)
    return {
        "corpus": str(corpus),
        "target_api": target_api_available(),
        "jobs": jobs,
        "timings": {
            "copy_discover": t1 - t0,
            "migrate": t2 - t1,
            "second_run": t4 - t3,
            "checks": t5 - t4,
            "total": t5 - t0,
        },
        "files": files,
        "not_discovered": skipped,
    }


def totals(files: list[dict]) -> dict[str, dict[str, float]]:
    """Per kind (and ``total``): the sum of every row of :data:`ROWS` over the files."""
    out: dict[str, dict[str, float]] = {}
    for group in (*KINDS, "total"):
        chosen = [f for f in files if group == "total" or f["kind"] == group]
        row: dict[str, float] = {"files": len(chosen)}
        for key, _ in ROWS:
            if key not in ("files", "refs_done_pct"):
                row[key] = sum(f[key] for f in chosen)
        orig = row["refs_original"]
        row["refs_done_pct"] = 100.0 * (1 - row["refs_silent"] / orig) if orig else float("nan")
        out[group] = row
    return out


# ----------------------------------------------------------------------------- printing


def format_table(files: list[dict], target_api: bool) -> str:
    sums = totals(files)
    groups = [k for k in KINDS if sums[k]["files"]] + ["total"]
    width = max(len(label) for _, label in ROWS) + 2
    head = f"{'':{width}}" + "".join(f"{KIND_LABELS.get(g, g):>10}" for g in groups)
    lines = [head, "-" * len(head)]
    for key, label in ROWS:
        cells = []
        for g in groups:
            v = sums[g][key]
            if key in API_ROWS and not target_api:
                cells.append("n/a")
            elif key == "refs_done_pct":
                cells.append("-" if v != v else f"{v:.1f}")
            else:
                cells.append(str(int(v)))
        lines.append(f"{label:{width}}" + "".join(f"{c:>10}" for c in cells))
    return "\n".join(lines)


LIST_CATEGORIES = (
    "crash", "error", "idempotence", "syntax", "undefined", "unresolved", "keyword", "old-import", "unwritten",
    "silent",
)
DEFAULT_LIST = tuple(c for c in LIST_CATEGORIES if c != "silent")


def format_list(files: list[dict], what: set[str]) -> str:
    """Per file, the things behind the counts (see the module docstring for ``what``)."""
    kinds = what & set(KINDS)
    cats = (what & set(LIST_CATEGORIES)) or set(DEFAULT_LIST)
    if "all" in what:
        cats |= set(DEFAULT_LIST)
    out = []
    for f in files:
        if kinds and f["kind"] not in kinds:
            continue
        items: list[str] = []
        if "crash" in cats and f["crashes"]:
            items.append(f"crash: {f['error']}")
        elif "error" in cats and f["errors"]:
            items.append(f"error: {f['error']}")
        if "idempotence" in cats and f["non_idempotent"]:
            items.append("non-idempotent; the project second run changes:")
            items += ["    " + d for d in f.get("second_diff", [])]
        if "syntax" in cats and f["syntax_broken"]:
            items.append(f"syntax broken in {f['syntax_broken']} part(s)")
        for cat, key, label in (
            ("undefined", "undefined_names", "introduced undefined name"),
            ("unresolved", "unresolved_names", "introduced unresolvable import"),
            ("keyword", "keyword_names", "introduced unaccepted keyword"),
            ("old-import", "old_imports_left_names", "old-stack import left without a marker"),
            ("unwritten", "unwritten_texts", "manual action reported, not in the file"),
        ):
            if cat in cats:
                items += [f"{label}: {n}" for n in f[key]]
        if "silent" in cats:
            items += [f"silent old-stack reference, {s}" for s in f["silent"]]
        if items:
            out.append(f"{f['path']}  [{f['kind']}]")
            seen = Counter(items)
            for item in dict.fromkeys(items):  # the same line n times: once, with "(xn)"
                out.append("  " + item + (f"  (x{seen[item]})" if seen[item] > 1 and not item.startswith("    ") else ""))
    return "\n".join(out) if out else "(nothing)"


def format_preexisting(files: list[dict], target_api: bool) -> str:
    if not target_api:
        return "pre-existing unresolvable imports / unaccepted keywords: n/a (no migrator.selfcheck.targetapi)"
    out = []
    for key, title in (("unresolved_preexisting_names", "pre-existing unresolvable target imports"),
                       ("keyword_preexisting_names", "pre-existing unaccepted keywords")):
        counts: Counter = Counter()
        where: dict[str, set[str]] = defaultdict(set)
        for f in files:
            for n in f[key]:
                counts[n] += 1
                where[n].add(f["path"])
        out.append(f"{title}: {sum(counts.values())} ({len(counts)} distinct)")
        for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            paths = sorted(where[name])
            shown = ", ".join(paths[:3]) + (f", ... (+{len(paths) - 3})" if len(paths) > 3 else "")
            out.append(f"  {n:4d}  {name}   [{len(paths)} file(s): {shown}]")
    return "\n".join(out)


MARKER_LIMIT = 120  # characters after the prefix (CONTRACT.md: one sentence)


def format_markers(files: list[dict], longest: int = 10) -> str:
    """The markers of the output: per file and their length distribution, and the longest ones."""
    texts = [(f["path"], rule, text) for f in files for rule, text in f.get("marker_texts", ())]
    if not texts:
        return "markers in the output: none"
    lengths = sorted(len(t) for _, _, t in texts)
    per_file = sorted(len(f.get("marker_texts", ())) for f in files if f.get("marker_texts"))

    def q(values: list[int], p: float) -> int:
        return values[min(len(values) - 1, int(p * len(values)))]

    over = sum(1 for n in lengths if n > MARKER_LIMIT)
    out = [
        f"markers in the output: {len(texts)} in {len(per_file)} files; per file median {q(per_file, .5)}, "
        f"p90 {q(per_file, .9)}, max {per_file[-1]}",
        f"marker length (after the prefix): median {q(lengths, .5)}, p90 {q(lengths, .9)}, max {lengths[-1]}; "
        f"over {MARKER_LIMIT}: {over} ({100.0 * over / len(lengths):.1f}%)",
    ]
    by_rule = Counter(rule for _, rule, t in texts if len(t) > MARKER_LIMIT)
    if by_rule:
        out.append("  over the limit, by rule: " + ", ".join(f"{r} {n}" for r, n in by_rule.most_common()))
    for path, rule, text in sorted(texts, key=lambda x: -len(x[2]))[:longest]:
        if len(text) <= MARKER_LIMIT:
            break
        out.append(f"  {len(text):4d}  {rule}  {path}: {text[:100]}...")
    return "\n".join(out)


def report(result: dict, listing: set[str] | None) -> str:
    files = result["files"]
    t = result["timings"]
    n = len(files)
    api = result["target_api"]
    out = [
        f"neuron-migrate real-world harness: {result['corpus']} ({n} files, migrated in a temporary copy, "
        f"all rules, jobs={result['jobs']})",
        f"files in the corpus folder that discovery does not take: {len(result['not_discovered'])}"
        + (f" ({', '.join(result['not_discovered'][:5])}{', ...' if len(result['not_discovered']) > 5 else ''})"
           if result["not_discovered"] else ""),
        "target API data (migrator.selfcheck.targetapi): "
        + ("available" if api else "not available: import and keyword columns read n/a"),
        "",
        format_table(files, api),
        "",
        f"non-idempotent (project second run): {sum(f['non_idempotent'] for f in files)}",
        f"run time: {t['total']:.1f} s ({n / t['total']:.1f} files/s): copy+discover {t['copy_discover']:.1f} s, "
        f"migrate {t['migrate']:.1f} s ({n / max(t['migrate'], 1e-9):.1f} files/s), "
        f"second run {t['second_run']:.1f} s, checks {t['checks']:.1f} s",
        "",
        format_markers(files),
    ]
    if listing is not None:
        out += ["", "== files behind the counts", format_list(files, listing), "", format_preexisting(files, api)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help=f"corpus folder (default {DEFAULT_CORPUS})")
    ap.add_argument("--only", default=None, help="only the files whose path contains SUBSTR")
    ap.add_argument("--list", nargs="?", const="all", default=None, metavar="WHAT",
                    help="list the files behind the counts; WHAT: comma-separated file kinds and/or "
                         f"categories ({', '.join(LIST_CATEGORIES)}); default: every category but silent")
    ap.add_argument("--json", type=Path, default=None, help="write every per-file measure to FILE")
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: the cores available)")
    args = ap.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"error: no corpus folder at {args.corpus}", file=sys.stderr)
        return 2
    result = harness(args.corpus, args.only, args.jobs)
    listing = None if args.list is None else {w.strip().lower() for w in args.list.split(",") if w.strip()}
    print(report(result, listing))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
