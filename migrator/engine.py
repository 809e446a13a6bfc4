"""Migrates files: pre-filter, read, split by kind, run the rules, reassemble.

The engine receives rules; it knows nothing about any particular one. Work is
spread over a process pool (spawn-safe: workers rebuild the rule set from a
picklable :class:`RuleSelection`).
"""

from __future__ import annotations

import codecs
import dataclasses
import heapq
import importlib
import os
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from migrator.discover import Candidate
from migrator.facts import LAUNCHER_KINDS
from migrator.model import FACT_PREFIX, MARKER_PREFIX, SELF_CHECKS, FileResult, Finding, LaunchFact

if TYPE_CHECKING:  # pragma: no cover
    from migrator.rules import Owners, PythonRule, Rule, TextRule

# The byte pre-filter needs only the trigger table (RuleSelection.index): the rule modules, the
# contracts, libcst and the per-kind engines are imported when a file passes it (fast start).

MAX_BYTES = 5 * 1024 * 1024
SKIPPED_RULE = "NM990"
PYTHON_KINDS = ("python", "notebook", "markdown")
#: kinds of the files a notebook may write (``%%writefile requirements.txt``): their rules see notebooks
WRITTEN_KINDS = frozenset({"requirements", "pyproject", "dockerfile"})


class SelectionError(ValueError):
    """An unknown rule id or prefix in --select/--ignore."""


@dataclass(frozen=True)
class RuleRow:
    """What the byte pre-filter and ``--select``/``--ignore`` need of a rule, without importing it:
    ``engine`` is "python" (a PythonRule), "text" (a TextRule) or "" (a rule no engine runs)."""

    id: str
    engine: str
    kinds: tuple[str, ...]
    triggers: tuple[str, ...]
    project_triggers: tuple[str, ...]
    #: ``Rule.project_probes`` as ((fact, substrings), ...)
    project_probes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: ``Rule.launch_probes``
    launch_probes: tuple[str, ...] = ()
    #: ``Rule.project_facts_in``
    project_facts_in: tuple[str, ...] = ()

    @classmethod
    def of(cls, rule: Rule) -> RuleRow:
        from migrator.rules import PythonRule, TextRule

        engine = "python" if isinstance(rule, PythonRule) else "text" if isinstance(rule, TextRule) else ""
        probes = tuple((fact, tuple(subs)) for fact, subs in sorted(rule.project_probes.items()))
        return cls(rule.id, engine, tuple(rule.kinds), tuple(rule.triggers), tuple(rule.project_triggers), probes,
                   tuple(rule.launch_probes), tuple(rule.project_facts_in))


@dataclass(frozen=True)
class RuleSelection:
    """Picklable description of the rules to run: where to load them, which to keep.

    A loader ``module:function`` may come with ``module:function_triggers``, a function returning
    the :class:`RuleRow` fields of every rule without importing the rules (``codemods`` has one, a
    generated table); the engine then imports the rules only when a file passes the pre-filter.
    """

    loader: str = "codemods:all_rules"
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()

    def load_all(self) -> tuple[Rule, ...]:
        module, _, attr = self.loader.partition(":")
        return tuple(getattr(importlib.import_module(module), attr)())

    def index(self) -> tuple[RuleRow, ...]:
        """Every rule's row: from the loader's trigger table when it has one, else from the rules."""
        return _index(self.loader)

    def parsers(self) -> dict[str, Callable[[str], bool]]:
        """The loader's parse checks per file kind (``module:function_parsers``, e.g. the shell parser of
        the shell rules): the text engine's output guard. Empty when the loader has none."""
        module, _, attr = self.loader.partition(":")
        table = getattr(importlib.import_module(module), f"{attr}_parsers", None)
        return dict(table()) if table is not None else {}

    def chosen_ids(self) -> frozenset[str]:
        """The ids this selection keeps; SelectionError on an unknown id or prefix."""
        ids = [r.id for r in self.index()]
        for pattern in (self.select or ()) + self.ignore:
            if not any(i.startswith(pattern) for i in ids):
                raise SelectionError(f"unknown rule or prefix: {pattern}")
        return frozenset(
            i
            for i in ids
            if (self.select is None or any(i.startswith(p) for p in self.select))
            and not any(i.startswith(p) for p in self.ignore)
        )

    def resolve(self) -> tuple[Rule, ...]:
        chosen = self.chosen_ids()
        return tuple(r for r in self.load_all() if r.id in chosen)


@lru_cache(maxsize=8)
def _index(loader: str) -> tuple[RuleRow, ...]:
    module, _, attr = loader.partition(":")
    table = getattr(importlib.import_module(module), f"{attr}_triggers", None)
    if table is not None:
        return tuple(RuleRow(*row) for row in table())
    return tuple(RuleRow.of(r) for r in RuleSelection(loader).load_all())


def parse_ids(values: Iterable[str] | None) -> tuple[str, ...]:
    out: list[str] = []
    for value in values or ():
        out.extend(p.strip().upper() for p in value.split(",") if p.strip())
    return tuple(out)


class RuleSet:
    """Rules of one run, grouped for the engine. The pre-filter (``wanted``...) is built from the
    selection's rows; the rule instances (``python``, ``text``, ``owners``) are loaded on first use,
    i.e. only when some file passes the pre-filter."""

    def __init__(self, selection: RuleSelection, one_pass: bool | None = None) -> None:
        self.selection = selection
        #: find every pattern of the pre-filter in one pass over a file's bytes (``present``) where
        #: pyahocorasick is installed; otherwise (or False, or NEURON_MIGRATE_ONE_PASS=0) one substring
        #: search per trigger and gate
        self.one_pass = os.environ.get("NEURON_MIGRATE_ONE_PASS", "1") != "0" if one_pass is None else one_pass
        self._memo: tuple[bytes, frozenset[bytes]] | None = None
        self.ids = selection.chosen_ids()
        chosen = [r for r in selection.index() if r.id in self.ids and r.engine]
        #: the self-check's findings that are selected (see migrator.selfcheck.policy)
        self.checks = frozenset(self.ids & SELF_CHECKS)
        self.triggers: dict[str, tuple[bytes, ...]] = {}
        #: per kind, the triggers grouped by _gate (computed by ``wanted`` on first use)
        self._gated: dict[str, tuple[tuple[bytes, ...], tuple[tuple[bytes, tuple[bytes, ...]], ...]]] = {}
        #: per kind: (rule id, its own triggers, its project_triggers) of rules with project context
        self.contextual: dict[str, tuple[tuple[str, tuple[bytes, ...], tuple[bytes, ...]], ...]] = {}
        for kind in ("python", "notebook", "markdown", "shell", "requirements", "pyproject", "dockerfile"):
            trig: set[str] = {MARKER_PREFIX}
            contextual = []
            for r in chosen:
                if kind in r.kinds or (kind in ("notebook", "markdown") and "shell" in r.kinds) or (
                        kind == "notebook" and bool(set(r.kinds) & WRITTEN_KINDS)) or (  # %%writefile cells
                        kind == "shell" and "python" in r.kinds):  # Python heredocs
                    trig.update(r.triggers or ("",))
                    if r.project_triggers and r.triggers:
                        contextual.append((r.id, _encoded(r.triggers), _encoded(r.project_triggers)))
            self.triggers[kind] = _encoded(trig)
            self.contextual[kind] = tuple(contextual)
        self.contextual_ids = frozenset(rid for c in self.contextual.values() for rid, _, _ in c)
        #: (rule id, the project facts that put it in the run) of rules with ``project_facts_in``
        self.fact_contextual = tuple((r.id, frozenset(FACT_PREFIX + f for f in r.project_facts_in))
                                     for r in chosen if r.project_facts_in and r.id in self.contextual_ids)
        #: the project facts the chosen rules ask about: fact -> substrings (``Rule.project_probes``)
        probes: dict[str, set[str]] = {}
        for r in chosen:
            for fact, subs in r.project_probes:
                probes.setdefault(fact, set()).update(subs)
        self.probes = {FACT_PREFIX + fact: _encoded(subs) for fact, subs in probes.items()}
        #: the substrings that make a launcher worth reading for launch facts (``Rule.launch_probes``)
        self.launch_probes = _encoded({p for r in chosen for p in r.launch_probes})

    @cached_property
    def _loaded(self) -> tuple[list[PythonRule], list[TextRule], Owners]:
        from migrator.rules import Owners, PythonRule, TextRule

        everything = self.selection.load_all()
        chosen = [r for r in everything if r.id in self.ids]
        # ownership is global: ignoring the rule that owns a name does not hand it to another
        return ([r for r in chosen if isinstance(r, PythonRule)], [r for r in chosen if isinstance(r, TextRule)],
                Owners(everything))

    @cached_property
    def parsers(self) -> dict[str, Callable[[str], bool]]:
        """kind -> parse check of the text kinds whose parser comes with the rules (see RuleSelection)."""
        return self.selection.parsers()

    @cached_property
    def _by_id(self) -> dict[str, type]:
        return {type(r).id: type(r) for r in (*self.python, *self.text)}

    def described(self, findings: list[Finding]) -> list[Finding]:
        """``findings`` with each marker's long form attached where its rule has one (``Rule.markers``)."""
        if not any(f.fix == "manual" and f.detail is None for f in findings):
            return findings
        out = []
        for f in findings:
            rule = self._by_id.get(f.rule) if f.fix == "manual" and f.detail is None else None
            detail = rule.marker_detail(f.message) if rule is not None else None
            out.append(dataclasses.replace(f, detail=detail) if detail else f)
        return out

    @property
    def python(self) -> list[PythonRule]:
        return self._loaded[0]

    @property
    def text(self) -> list[TextRule]:
        return self._loaded[1]

    @property
    def owners(self) -> Owners:
        return self._loaded[2]

    @cached_property
    def _automaton(self):
        """One Aho-Corasick automaton (a DFA: ahocorasick-rs, Rust's aho-corasick) over every pattern the
        pre-filter asks about: the triggers of every kind, the rules' own and project triggers, the fact
        probes and the launch probes; (automaton, patterns by index), or None without ahocorasick-rs."""
        if not self.one_pass:
            return None
        try:
            import ahocorasick_rs
        except ImportError:
            return None
        patterns: set[bytes] = set(self.launch_probes)
        for trig in self.triggers.values():
            patterns.update(trig)
        for rows in self.contextual.values():
            for _rid, own, extra in rows:
                patterns.update(own)
                patterns.update(extra)
        for subs in self.probes.values():
            patterns.update(subs)
        patterns.discard(b"")
        if not patterns:
            return None
        ordered = sorted(patterns)
        return ahocorasick_rs.BytesAhoCorasick(ordered, implementation=ahocorasick_rs.Implementation.DFA), ordered

    @cached_property
    def _sets(self) -> dict[str, frozenset[bytes]]:
        return {kind: frozenset(trig) for kind, trig in self.triggers.items()}

    def present(self, data: bytes) -> frozenset[bytes] | None:
        """The pre-filter's patterns that occur in ``data``, found in one pass (the last file's answer is
        kept: the engine asks about one file several times in a row); None when the automaton is off."""
        memo = self._memo
        if memo is not None and memo[0] is data:
            return memo[1]
        built = self._automaton
        if built is None:
            return None
        automaton, patterns = built
        # every occurrence, overlapping ones too; b"" (a rule without triggers) is in every file, as for `b"" in data`
        found = frozenset(patterns[i] for i, _start, _end in automaton.find_matches_as_indexes(data, overlapping=True))
        found |= {b""}
        self._memo = (data, found)
        return found

    def wanted(self, kind: str, data: bytes, project: frozenset[str] = frozenset()) -> bool:
        """Whether a file with these bytes can interest a rule (the byte pre-filter)."""
        trig = self._sets.get(kind)
        present = self.present(data) if trig is not None else None
        if present is not None:
            if not present.isdisjoint(trig):
                return True
            return bool(project) and self.wanted_in_project(kind, data, project)
        gated = self._gated.get(kind)
        if gated is None:  # grouped on first use: a run on one .py file needs only the python gates
            trig = self.triggers.get(kind)
            gated = self._gated[kind] = _gate(trig) if trig is not None else ((), ())
        ungated, groups = gated
        if any(t in data for t in ungated) or any(g in data and any(t in data for t in ts) for g, ts in groups):
            return True
        return bool(project) and self.wanted_in_project(kind, data, project)

    def wanted_in_project(self, kind: str, data: bytes, project: frozenset[str]) -> bool:
        """Whether the data contains the ``project_triggers`` of a rule in ``project``."""
        present = self.present(data)
        if present is not None:
            return any(rid in project and not present.isdisjoint(extra) for rid, _, extra in self.contextual.get(kind, ()))
        return any(rid in project and any(t in data for t in extra) for rid, _, extra in self.contextual.get(kind, ()))

    def project_context(self, kind: str, data: bytes, found: set[str]) -> None:
        """Add to ``found`` the rules with ``project_triggers`` whose own triggers occur in ``data``
        (the run then shows them the units matching their project triggers too)."""
        present = self.present(data)
        for rid, own, _ in self.contextual.get(kind, ()):
            if rid not in found and (not present.isdisjoint(own) if present is not None else any(t in data for t in own)):
                found.add(rid)

    def project_facts(self, data: bytes, found: set[str]) -> None:
        """Add to ``found`` the project facts (``FACT_PREFIX`` + name) whose probes occur in ``data``."""
        present = self.present(data)
        for fact, subs in self.probes.items():
            if fact not in found and (not present.isdisjoint(subs) if present is not None else any(t in data for t in subs)):
                found.add(fact)

    def launch_facts(self, kind: str, data: bytes, text: str | None = None) -> list[LaunchFact]:
        """The launch facts a file states (``Rule.launch_facts``): only launchers (shell scripts,
        Dockerfiles, notebooks) whose bytes contain a ``launch_probes`` substring are read."""
        if not self.launch_probes or kind not in LAUNCHER_KINDS:
            return []
        present = self.present(data)
        if present.isdisjoint(self.launch_probes) if present is not None else not any(p in data for p in self.launch_probes):
            return []
        from migrator.facts import extract

        rules = [r for r in (*self.python, *self.text) if r.launch_probes]
        return extract(rules, kind, data.decode("utf-8", "replace") if text is None else text)

    @classmethod
    def from_selection(cls, selection: RuleSelection) -> RuleSet:
        return cls(selection)


def _encoded(strings: Iterable[str]) -> tuple[bytes, ...]:
    return tuple(t.encode() for t in sorted(strings))


@lru_cache(maxsize=32)
def _gate(triggers: tuple[bytes, ...], min_group: int = 3):
    """Group triggers behind shared substrings ("gates"): a file without ``euron`` is not searched for
    the 60 class names that contain it. Greedy cover by substrings of 3-8 bytes that occur in at
    least ``min_group`` triggers; returns (triggers searched directly, ((gate, its triggers), ...)).
    On pandas (1,440 files, no match) this makes the pre-filter 3x faster than one search per trigger."""
    if b"" in triggers:
        return (b"",), ()
    subs: dict[bytes, set[bytes]] = {}
    for t in triggers:
        for n in range(3, 9):
            for i in range(len(t) - n + 1):
                subs.setdefault(t[i : i + n], set()).add(t)
    # Greedy: take the substring covering the most triggers not yet covered (ties: the longer, then
    # the greater). Lazily: a substring's count only falls as triggers get covered, so the counts in
    # the heap are upper bounds; the top entry, once recounted and still on top, is the maximum.
    left, groups = set(triggers), []
    order = sorted(subs, reverse=True)  # rank 0 = the greatest substring (the last tie-break)
    heap = [(-len(subs[g]), -len(g), rank) for rank, g in enumerate(order)]
    heapq.heapify(heap)
    while heap:
        count, size, rank = heap[0]
        covered = subs[order[rank]] & left
        if -len(covered) != count:
            heapq.heapreplace(heap, (-len(covered), size, rank))
            continue
        if len(covered) < min_group:
            break
        heapq.heappop(heap)
        groups.append((order[rank], tuple(sorted(covered))))
        left -= covered
    return tuple(sorted(left)), tuple(groups)


# ------------------------------------------------------------------ one file


def _decode(data: bytes, kind: str) -> tuple[str, str, bool]:
    """(text, encoding, had_bom). Python honours a PEP 263 cookie."""
    import io
    import tokenize

    bom = data.startswith(codecs.BOM_UTF8)
    body = data[3:] if bom else data
    encoding = "utf-8"
    if kind == "python":
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as exc:
            raise UnicodeError(str(exc)) from exc
        if encoding == "utf-8-sig":
            encoding = "utf-8"
    return body.decode(encoding), encoding, bom


def _encode(text: str, encoding: str, bom: bool) -> bytes:
    data = text.encode(encoding)
    return codecs.BOM_UTF8 + data if bom else data


def migrate_text(
    text: str, kind: str, rules: RuleSet, path: Path | None = None, project: frozenset[str] = frozenset()
) -> tuple[str, list[Finding]]:
    """Run the rules over the decoded text of one file. ``path``: where it lives, for rules that read
    the files it includes; ``project``: ids of the rules whose project-wide context is on in this run
    (see :meth:`RuleSet.project_context`). Raises UnitSyntaxError/NotebookError."""
    from migrator.filekinds.markdown import transform_markdown
    from migrator.filekinds.notebook import transform_notebook
    from migrator.filekinds.shell import transform_shell
    from migrator.python_engine import run_python
    from migrator.text_engine import run_text

    def py(source: str) -> tuple[str, list[Finding]]:
        return run_python(source, rules.python, rules.owners, project, rules.checks)

    def sh(source: str) -> tuple[str, list[Finding]]:
        # the shell units of a notebook or a Markdown page: rules read the files beside it (a launched script)
        return transform_shell(source, py, lambda text: run_text(text, "shell", rules.text, path, project,
                                                                 rules.parsers.get("shell")),
                               SKIPPED_RULE)

    def written(source: str, kind: str, name: str) -> tuple[str, list[Finding]]:
        # a file the notebook writes (`%%writefile name`), a Dockerfile a page shows: migrated as a file of its
        # own kind
        where = path.parent / name if path is not None else None
        return migrate_text(source, kind, rules, where, project)

    if kind == "python":
        return py(text)
    if kind == "notebook":
        return transform_notebook(text, py, sh, skipped_rule=SKIPPED_RULE, run_kind=written)
    if kind == "markdown":
        return transform_markdown(text, py, sh, skipped_rule=SKIPPED_RULE, run_kind=written)
    if kind == "shell":  # the Python its heredocs feed the interpreter is Python
        return transform_shell(text, py, lambda source: run_text(source, kind, rules.text, path, project,
                                                                 rules.parsers.get(kind)),
                               SKIPPED_RULE)
    return run_text(text, kind, rules.text, path, project, rules.parsers.get(kind))


def process(
    candidate: Candidate, rules: RuleSet, data: bytes | None = None, project: frozenset[str] = frozenset()
) -> FileResult:
    """Migrate one file in memory. Never raises for a problem with the file itself. ``project``: ids
    of the rules whose project-wide context is on in this run (:meth:`RuleSet.project_context`)."""
    result = FileResult(candidate.display, candidate.kind, "unchanged")
    try:
        if data is None:
            data = candidate.path.read_bytes()
    except FileNotFoundError:
        return _error(result, "file vanished before it could be read")
    except PermissionError:
        return _error(result, "permission denied")
    except IsADirectoryError:
        return _error(result, "is a directory")
    except OSError as exc:
        return _error(result, f"cannot read: {exc.strerror or exc}")
    if not rules.wanted(candidate.kind, data, project):
        return result
    if len(data) > MAX_BYTES:
        result.status = "skipped"
        result.error = f"file is larger than {MAX_BYTES // (1024 * 1024)} MB; not migrated"
        return result
    if b"\x00" in data[:8192]:
        return _error(result, "binary file (contains NUL bytes)")
    from migrator.filekinds import UnitSyntaxError
    from migrator.filekinds.notebook import NotebookError

    try:
        text, encoding, bom = _decode(data, candidate.kind)
    except (UnicodeError, LookupError) as exc:
        return _error(result, f"cannot decode: {exc}")
    if rules.launch_probes and candidate.kind in LAUNCHER_KINDS:  # what the file states about its own code
        from migrator.facts import self_facts

        project = project | self_facts(rules.launch_facts(candidate.kind, data, text))
    try:
        new_text, findings = migrate_text(text, candidate.kind, rules, candidate.path, project)
    except UnitSyntaxError as exc:
        hint = " (Python 2 code is not supported)" if _looks_like_python2(text) else ""
        return _error(result, f"syntax error: {exc}{hint}")
    except NotebookError as exc:
        return _error(result, f"invalid notebook: {exc}")
    except RecursionError:
        return _error(result, "too deeply nested to parse")
    result.findings = rules.described(findings)
    if new_text != text:
        # texts are kept (and sent back from workers) only where a diff will need them
        result.old_text, result.new_text = text, new_text
        try:
            result.new_bytes = _encode(new_text, encoding, bom)
        except UnicodeError as exc:
            return _error(result, f"the migrated text cannot be encoded as {encoding}: {exc}")
        result.status = "changed"
    return result


def _looks_like_python2(text: str) -> bool:
    import re

    return bool(re.search(r"^\s*print\s+[^\s(=]", text, re.M) or re.search(r"^\s*except\s+\w+\s*,\s*\w+\s*:", text, re.M))


def _error(result: FileResult, reason: str) -> FileResult:
    return result.fail(reason)


# ------------------------------------------------------------------ many files


def __getattr__(name: str):
    """``ProcessPoolExecutor`` on first use: concurrent.futures.process imports multiprocessing, which
    a run that needs no pool (one file, or nothing past the pre-filter) should not pay for."""
    if name == "ProcessPoolExecutor":
        from concurrent.futures import ProcessPoolExecutor

        globals()[name] = ProcessPoolExecutor
        return ProcessPoolExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_WORKER_RULES: RuleSet | None = None


@lru_cache(maxsize=8)
def _ruleset_for(selection: RuleSelection) -> RuleSet:
    return RuleSet.from_selection(selection)


def _worker_init(selection: RuleSelection) -> None:
    global _WORKER_RULES
    _WORKER_RULES = _ruleset_for(selection)


def _worker_process(candidate: Candidate, data: bytes, project: frozenset[str]) -> FileResult:
    assert _WORKER_RULES is not None
    return safe_process(candidate, _WORKER_RULES, data, project)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


MIN_FILES_PER_WORKER = 8
#: a directory holding one of these is the root of a project: what its files state (project facts, rules
#: whose triggers matched) holds for the files below it, not for other projects migrated in the same run
PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")


def project_roots(candidates: Sequence[Candidate]) -> list[Path]:
    """The project each candidate belongs to: the nearest directory above it (up to the common root of the
    run) that holds a :data:`PROJECT_MARKERS` entry; a file below none belongs to the common root, or,
    where the common root is no project itself but a folder of them, to its first-level directory
    (`repos/<owner>__<name>/...`)."""
    if not candidates:
        return []
    parents = [c.path.parent for c in candidates]
    try:
        common = Path(os.path.commonpath([str(p) for p in parents]))
    except ValueError:  # paths on different drives
        return parents
    marked: dict[Path, bool] = {}

    def is_root(d: Path) -> bool:
        if d not in marked:
            marked[d] = any((d / m).exists() for m in PROJECT_MARKERS)
        return marked[d]

    folder_of_projects = not is_root(common) and sum(1 for p in set(parents) if p == common) == 0
    out = []
    for parent in parents:
        d, found = parent, None
        while True:
            if is_root(d):
                found = d
                break
            if d == common or common not in d.parents:
                break
            d = d.parent
        if found is None:
            found = common
            if folder_of_projects and parent != common:
                found = common / parent.relative_to(common).parts[0]
        out.append(found)
    return out


def run(
    candidates: Sequence[Candidate],
    selection: RuleSelection,
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[FileResult]:
    """Migrate every candidate in memory (nothing is written here)."""
    rules = _ruleset_for(selection)
    results: dict[int, FileResult] = {}
    work: list[tuple[int, Candidate, bytes]] = []
    maybe: list[tuple[int, Candidate, bytes]] = []  # interesting only to rules with project context
    roots = project_roots(candidates)
    by_project: dict[Path, set[str]] = {}  # what the files of each project state (see project_roots)
    launches: list[tuple[int, LaunchFact]] = []  # (launcher index, what it states)
    total = len(candidates)
    done = 0
    for i, cand in enumerate(candidates):
        try:
            data = cand.path.read_bytes()
        except OSError:
            results[i] = process(cand, rules)  # reports the read error
            done += 1
            continue
        found = by_project.setdefault(roots[i], set())
        if rules.probes:
            rules.project_facts(data, found)
        if rules.launch_probes and cand.kind in LAUNCHER_KINDS:
            launches.extend((i, fact) for fact in rules.launch_facts(cand.kind, data))
        if rules.wanted(cand.kind, data):
            rules.project_context(cand.kind, data, found)
            work.append((i, cand, data))
        elif rules.wanted_in_project(cand.kind, data, rules.contextual_ids):
            maybe.append((i, cand, data))
        else:
            results[i] = FileResult(cand.display, cand.kind, "unchanged")
            done += 1
    for found in by_project.values():  # a project fact puts a rule in the run as its own triggers would
        found.update(rid for rid, facts in rules.fact_contextual if not found.isdisjoint(facts))
    projects = {root: frozenset(found) for root, found in by_project.items()}
    empty: frozenset[str] = frozenset()
    # the facts each launcher states hold for the files they launch only
    if launches:
        from migrator.facts import assign

        targeted = assign(candidates, launches)
    else:
        targeted = {}
    for i, cand, data in maybe:
        if rules.wanted(cand.kind, data, projects.get(roots[i], empty) | targeted.get(i, frozenset())):
            work.append((i, cand, data))
        else:
            results[i] = FileResult(cand.display, cand.kind, "unchanged")
            done += 1
    if progress:
        progress(done, total)
    jobs = max(1, min(jobs or default_jobs(), 32, len(work) // MIN_FILES_PER_WORKER))
    if jobs == 1:
        for i, cand, data in work:
            results[i] = safe_process(cand, rules, data, projects.get(roots[i], empty) | targeted.get(i, frozenset()))
            done += 1
            if progress:
                progress(done, total)
    else:
        import multiprocessing
        import sys
        from concurrent.futures import as_completed

        ctx = multiprocessing.get_context("spawn")
        pool_class = sys.modules[__name__].ProcessPoolExecutor  # see __getattr__ (tests replace it)
        with pool_class(jobs, mp_context=ctx, initializer=_worker_init, initargs=(selection,)) as pool:
            futures = {pool.submit(_worker_process, cand, data,
                                   projects.get(roots[i], empty) | targeted.get(i, frozenset())): i
                       for i, cand, data in work}
            for fut in as_completed(futures):
                i = futures[fut]
                try:
                    results[i] = fut.result()
                except Exception as exc:  # a crash inside a rule: report, keep going
                    cand = candidates[i]
                    results[i] = _error(FileResult(cand.display, cand.kind, "unchanged"), f"internal error: {exc!r}")
                done += 1
                if progress:
                    progress(done, total)
    _settle_output_facts(rules, candidates, work, results, roots, projects, targeted)
    return [results[i] for i in range(total)]


#: project facts about the migration's output (``Rule.project_probes`` named ``left:...``): what the
#: migrated files still contain, e.g. an import of an old library the rules left to a person
OUTPUT_FACT = FACT_PREFIX + "left:"


def _settle_output_facts(rules: RuleSet, candidates: Sequence[Candidate], work: list[tuple[int, Candidate, bytes]],
                         results: dict[int, FileResult], roots: list[Path], projects: dict[Path, frozenset[str]],
                         targeted: dict[int, frozenset[str]]) -> None:
    """The ``left:`` facts are probed on the original files with the others (a first estimate), then
    again on what the run hands back (a migrated file's new bytes, any other file's own); in a project
    where they differ, the files whose rules read such a fact are migrated again, from their original,
    with the facts of the output. So one run decides as its second run would (idempotence), and a
    requirement stays only while some migrated file still imports its package."""
    output_probes = {fact: subs for fact, subs in rules.probes.items() if fact.startswith(OUTPUT_FACT)}
    if not output_probes:
        return
    before = {root: {f for f in found if f.startswith(OUTPUT_FACT)} for root, found in projects.items()}
    if not any(before.values()):
        return  # no file had them: none of the output has them
    processed = {i: data for i, _cand, data in work}
    left: dict[Path, set[str]] = {}
    for i, cand in enumerate(candidates):
        if not before.get(roots[i]):
            continue
        r = results[i]
        if i in processed:
            out = r.new_bytes if r.status == "changed" and r.new_bytes is not None else processed[i]
        else:
            try:
                out = cand.path.read_bytes()  # a file no rule took: as it was
            except OSError:
                continue
        found = left.setdefault(roots[i], set())
        found.update(fact for fact, subs in output_probes.items() if fact not in found and any(t in out for t in subs))
    readers = [r for r in rules.selection.index()
               if r.id in rules.ids and any(FACT_PREFIX + fact in output_probes for fact, _ in r.project_probes)]
    kinds = {k for r in readers for k in r.kinds}
    if "shell" in kinds:
        kinds |= {"notebook", "markdown"}  # their shell lines and blocks
    for i, cand, data in work:
        root = roots[i]
        was, now = before.get(root, set()), left.get(root, set())
        if was == now or cand.kind not in kinds:
            continue
        project = (projects.get(root, frozenset()) - was) | now | targeted.get(i, frozenset())
        results[i] = safe_process(cand, rules, data, frozenset(project))


def safe_process(
    candidate: Candidate, rules: RuleSet, data: bytes | None = None, project: frozenset[str] = frozenset()
) -> FileResult:
    """:func:`process`, turning a crash inside a rule into an error result."""
    try:
        return process(candidate, rules, data, project)
    except Exception as exc:  # a bug in a rule must not stop the run
        return _error(FileResult(candidate.display, candidate.kind, "unchanged"), f"internal error: {exc!r}")
