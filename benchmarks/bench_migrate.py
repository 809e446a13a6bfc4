"""Throughput benchmark of neuron-migrate against plain libcst.

    python benchmarks/bench_migrate.py [--jobs N] [--limit N] [--files-b K] [--repeat R] [--budget S]

Corpus A: every file ``discover`` finds in an installed package with no Neuron code
(default ``pandas``, 1,400+ files, none of which mentions optimum.neuron / torch_xla;
``--corpus-a transformers`` measures a package that does use torch_xla in ~20 files). Times discover + run (the CLI pipeline, nothing written)
and plain libcst parse+codegen on a sample, to show the per-core libcst floor.

Corpus B: K medium-size transformers files with old-stack (optimum.neuron) usage
injected, written to a temp dir. Times (a) plain libcst parse+codegen, (b) the engine's
``migrate_text`` on the same texts (both in-process, single core, no I/O; timed file by
file in alternation, each file's best over the repeats, summed), (b0) the same with the
self-check deselected (what checking every changed unit costs), (b2) the same with the engine's
bounded second pass on (``python_engine.SECOND_PASS``: what that safety net would cost) and (c) the full ``run``
with jobs=1 and jobs=N (I/O and process pool included).

Every timing is the best (min) of R repeats (default 3), measured with time.perf_counter;
a timing whose repeats have used --budget seconds is not repeated again, so that a slow
engine cannot push the run past a few minutes (the printed "best of n" says how many). The run
never fails on a missed target; it prints PASS/FAIL against the two targets of the issue:

* corpus A: >= 2,000 files/s for the full pipeline;
* corpus B: (b)/(a) <= 1.5.

A cProfile summary of (b) over a few corpus-B files ends the output.
"""

from __future__ import annotations

import argparse
import ast
import cProfile
import importlib.util
import io
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import libcst as cst

from migrator.discover import discover
from migrator.engine import RuleSelection, RuleSet, _ruleset_for, default_jobs, migrate_text, run

TARGET_A_FILES_PER_S = 2000.0
TARGET_B_RATIO = 1.5
BUMP_PYDANTIC_FILES_PER_S = 2.7

INJECT_IMPORTS = (
    "from optimum.neuron import NeuronTrainer, NeuronTrainingArguments, NeuronModelForCausalLM\n"
    "import optimum.neuron as on\n"
)
INJECT_FUNCTION = '''

def _neuron_migrate_bench_train(m):
    a = NeuronTrainingArguments(output_dir="o")
    t = NeuronTrainer(model=m, args=a)
    model = NeuronModelForCausalLM.from_pretrained("x")
    cfg = on.NeuronSFTConfig(output_dir="o")
    return t, model, cfg
'''


# ----------------------------------------------------------------------------- helpers


class Measure:
    """One timed quantity; ``times`` holds every repeat, the best (min) is reported."""

    def __init__(self, name: str, fn: Callable[[], object]) -> None:
        self.name = name
        self.fn = fn
        self.times: list[float] = []
        self.result: object = None
        self.repeats: int | None = None  # set when ``times`` holds one figure built from several repeats

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def note(self) -> str:
        if self.repeats == 0:
            return "derived: discover+run minus discover"
        if self.repeats is not None:
            return f"sum of per-file bests of {self.repeats}"
        return f"best of {len(self.times)}"


def measure(measures: list[Measure], repeat: int, budget_s: float) -> None:
    """Time every measure ``repeat`` times, round-robin (so that a change in the load
    of the machine hits all of them alike). A measure whose repeats have already used
    ``budget_s`` seconds is not repeated again (at least one run each)."""
    for r in range(repeat):
        for m in measures:
            if r > 0 and sum(m.times) >= budget_s:
                continue
            t0 = time.perf_counter()
            m.result = m.fn()
            m.times.append(time.perf_counter() - t0)


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def print_measure(label: str, m: Measure, n: int, extra: str = "") -> None:
    """One timing line: the label, the best time, the rate over ``n`` files, how it was measured."""
    print(f"{label:52}: {m.best:7.3f} s  {rate(n, m.best):7.1f} files/s  ({m.note}){extra}")


def libcst_roundtrip(texts: list[str]) -> int:
    n = 0
    for text in texts:
        n += len(cst.parse_module(text).code)
    return n


def paired(texts: list[str], rules: RuleSet, repeat: int, budget_s: float) -> tuple[Measure, Measure]:
    """(a) libcst parse+codegen and (b) migrate_text, timed file by file in alternation.

    Each file's time is its best over the repeats; a measure's time is the sum over the
    files. Repeats stop once ``budget_s`` seconds have been spent (at least one)."""
    best_a = [float("inf")] * len(texts)
    best_b = [float("inf")] * len(texts)
    outs: list[str] = list(texts)
    clock = time.perf_counter
    spent = 0.0
    done = 0
    for r in range(repeat):
        if r > 0 and spent >= budget_s:
            break
        t_start = clock()
        for i, text in enumerate(texts):
            for side in ((0, 1) if (r + i) % 2 == 0 else (1, 0)):
                t0 = clock()
                if side == 0:
                    cst.parse_module(text).code
                    dt = clock() - t0
                    best_a[i] = min(best_a[i], dt)
                else:
                    outs[i] = migrate_text(text, "python", rules)[0]
                    dt = clock() - t0
                    best_b[i] = min(best_b[i], dt)
        spent += clock() - t_start
        done += 1
    m_a = Measure("a", lambda: None)
    m_b = Measure("b", lambda: None)
    m_a.times, m_b.times = [sum(best_a)], [sum(best_b)]
    m_b.result = outs
    for m in (m_a, m_b):
        m.repeats = done
    return m_a, m_b


def engine_texts(texts: list[str], rules: RuleSet) -> list[str]:
    return [migrate_text(text, "python", rules)[0] for text in texts]


def spread(items: list, k: int) -> list:
    """``k`` items evenly spread over ``items`` (deterministic)."""
    if k >= len(items):
        return list(items)
    step = len(items) / k
    return [items[int(i * step)] for i in range(k)]


def package_dir(name: str = "transformers") -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"{name} is not installed; this benchmark needs it as a corpus")
    return Path(list(spec.submodule_search_locations)[0])


def inject(text: str) -> str:
    """Old-stack imports before the first ordinary top-level import, a function using them at the end."""
    tree = ast.parse(text)
    line = None
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            continue
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            line = stmt.lineno
            break
    lines = text.splitlines(keepends=True)
    if line is None:  # no import: after the docstring / __future__ imports
        line = 1
        for stmt in tree.body:
            is_doc = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
            is_future = isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"
            if not (is_doc or is_future):
                break
            line = (stmt.end_lineno or stmt.lineno) + 1
    lines.insert(line - 1, INJECT_IMPORTS)
    body = "".join(lines)
    if not body.endswith("\n"):
        body += "\n"
    return body + INJECT_FUNCTION


# ----------------------------------------------------------------------------- corpus A


def trigger_report(rules: RuleSet, blobs: list[tuple[str, bytes]], top: int = 8) -> None:
    """Which pre-filter triggers let the files through (and which rules declare them)."""
    owners: dict[str, set[str]] = {}
    for r in list(rules.python) + list(rules.text):
        for t in r.triggers or ():
            owners.setdefault(t, set()).add(r.id)
    hits: Counter[bytes] = Counter()
    only: Counter[bytes] = Counter()
    for kind, data in blobs:
        found = [t for t in rules.triggers.get(kind, ()) if t in data]
        hits.update(found)
        if len(found) == 1:
            only.update(found)
    if not hits:
        return
    print(f"pre-filter triggers found in the most files (top {top}; 'alone' = the only trigger in the file):")
    for trig, count in hits.most_common(top):
        text = trig.decode()
        ids = ",".join(sorted(owners.get(text, ()))) or "marker"
        print(f"  {text!r:28} {count:5d} files  ({only[trig]:4d} alone)  rules: {ids}")


def bench_corpus_a(pkg: Path, jobs: int, repeat: int, budget: float, limit: int | None, sample: int) -> None:
    print(f"== Corpus A: installed package {pkg.name} ({pkg})")
    selection = RuleSelection()
    rules = _ruleset_for(selection)  # the same cached RuleSet run() uses: loading rules is not timed

    cands, errs = discover([pkg])  # warm-up (and page cache, below)
    if limit:
        cands = cands[:limit]
    n = len(cands)
    kinds = Counter(c.kind for c in cands)
    n_py = kinds.get("python", 0)
    blobs = [(c.kind, c.path.read_bytes()) for c in cands]
    wanted = sum(1 for kind, data in blobs if rules.wanted(kind, data))
    run(cands[:50], selection, jobs=1)

    def disc():
        c, _ = discover([pkg])
        return c[:limit] if limit else c

    def both():
        return run(disc(), selection, jobs=jobs)

    m_disc = Measure("discover", disc)
    m_run = Measure("run", lambda: run(cands, selection, jobs=jobs))
    m_both = Measure("discover+run", both)
    measure([m_disc, m_both], repeat, budget)
    if m_both.best < budget:
        measure([m_run], repeat, budget)
    else:  # too slow to time twice within a few minutes: run = (discover+run) - discover
        m_run.times = [max(0.0, m_both.best - m_disc.best)]
        m_run.repeats = 0
    results = m_both.result
    statuses = Counter(r.status for r in results)  # type: ignore[union-attr]

    print(f"files discovered: {n}  ({', '.join(f'{k}: {v}' for k, v in sorted(kinds.items()))}); "
          f"discovery errors: {len(errs)}")
    print(f"files passing the byte pre-filter (decoded and parsed by the engine): {wanted} "
          f"({sum(len(d) for k, d in blobs if rules.wanted(k, d)) / 1024:.0f} KB of "
          f"{sum(len(d) for _, d in blobs) / 1024:.0f} KB)")
    trigger_report(rules, blobs)
    print(f"results: {dict(sorted(statuses.items()))}")
    changed = [r.path for r in results if r.status == "changed"]  # type: ignore[union-attr]
    if changed:
        shown = ", ".join(Path(p).name for p in changed[:10]) + (", ..." if len(changed) > 10 else "")
        print(f"changed by the tool (old-stack code the package does contain): {shown}")
    for m in (m_disc, m_run, m_both):
        label = m.name if m is m_disc else f"{m.name} (jobs={jobs})"
        print(f"{label:24}: {m.best:8.3f} s  {rate(n, m.best):10.0f} files/s   ({m.note})")

    # the per-core libcst floor, on a sample of the same files
    py_files = [c.path for c in cands if c.kind == "python"]
    texts = [p.read_text(encoding="utf-8") for p in spread(py_files, sample)]
    libcst_roundtrip(texts[:5])  # warm-up
    m_cst = Measure("libcst", lambda: libcst_roundtrip(texts))
    measure([m_cst], repeat, budget)
    cst_rate = rate(len(texts), m_cst.best)
    est_cst_all = n_py / cst_rate
    total_rate = rate(n, m_both.best)
    print(f"plain libcst parse+codegen, {len(texts)}-file sample, 1 core: {m_cst.best:.3f} s  "
          f"{cst_rate:.1f} files/s/core  ({m_cst.note}; => {est_cst_all:.1f} s for the {n_py} .py files "
          f"on 1 core, {est_cst_all / jobs:.1f} s on {jobs})")
    print(f"ratio pipeline files/s / libcst files/s/core           : {total_rate / cst_rate:8.1f}x")
    print(f"ratio pipeline files/s / libcst files/s on {jobs} cores      : {total_rate / (cst_rate * jobs):8.1f}x")
    print(f"ratio pipeline files/s / bump-pydantic ({BUMP_PYDANTIC_FILES_PER_S} files/s)  : "
          f"{total_rate / BUMP_PYDANTIC_FILES_PER_S:8.0f}x")
    small = "" if n >= 1000 else "  (corpus has < 1,000 files)"
    print(f"TARGET A: >= {TARGET_A_FILES_PER_S:.0f} files/s (discover+run, {n} files): "
          f"{total_rate:.0f} files/s -> {verdict(total_rate >= TARGET_A_FILES_PER_S)}{small}")
    print()


# ----------------------------------------------------------------------------- corpus B


def pick_corpus_b(pkg: Path, k: int, lo: int, hi: int) -> list[Path]:
    """``k`` files of ``lo``..``hi`` bytes: models/*/modeling_*.py first, then any other."""
    models = sorted(pkg.glob("models/*/modeling_*.py"))
    fits = [p for p in models if lo <= p.stat().st_size <= hi]
    if len(fits) < k:
        seen = set(fits)
        others = sorted(p for p in pkg.rglob("*.py") if p not in seen and lo <= p.stat().st_size <= hi)
        fits += spread(others, k - len(fits))
    return spread(fits, k)


def bench_corpus_b(pkg: Path, jobs: int, repeat: int, budget: float, k: int, size_kb: tuple[int, int],
                   profile_files: int) -> None:
    lo, hi = size_kb
    print(f"== Corpus B: {k} transformers files ({lo}-{hi} KB) with optimum.neuron usage injected")
    selection = RuleSelection()
    rules = RuleSet.from_selection(selection)
    sources = pick_corpus_b(pkg, k, lo * 1024, hi * 1024)
    tmp = Path(tempfile.mkdtemp(prefix="nm-bench-"))
    try:
        texts: list[str] = []
        for i, src in enumerate(sources):
            text = inject(src.read_text(encoding="utf-8"))
            dest = tmp / f"{i:04d}_{src.parent.name}_{src.name}"
            dest.write_text(text, encoding="utf-8")
            texts.append(text)
        n = len(texts)
        total_kb = sum(len(t.encode()) for t in texts) / 1024
        n_models = sum(1 for p in sources if p.name.startswith("modeling_"))
        print(f"files: {n} ({n_models} models/*/modeling_*.py), {total_kb:.0f} KB in all "
              f"({total_kb / n:.1f} KB mean), in {tmp}")

        cands, errs = discover([tmp])
        # warm-up (imports, caches)
        libcst_roundtrip(texts[:5])
        engine_texts(texts[:5], rules)
        run(cands[:5], selection, jobs=1)

        # (a) and (b): file by file, the two alternating, keeping each file's best over the
        # repeats, so that a change in the machine's load hits both sides of the ratio alike
        m_a, m_b = paired(texts, rules, repeat, 2 * budget)
        # the same without the self-check (NM991/NM992 deselected): what checking every changed unit costs
        unchecked = RuleSet.from_selection(RuleSelection(ignore=("NM991", "NM992")))
        engine_texts(texts[:5], unchecked)
        m_a0, m_b0 = paired(texts, unchecked, repeat, 2 * budget)
        # (b2) with the engine's bounded second pass on (python_engine.SECOND_PASS, off by default):
        # what the safety net for idempotence would cost
        import migrator.python_engine as python_engine

        saved = python_engine.SECOND_PASS
        python_engine.SECOND_PASS = True
        try:
            m_a2, m_b2 = paired(texts, rules, repeat, 2 * budget)
        finally:
            python_engine.SECOND_PASS = saved
        m_c1 = Measure("c1", lambda: run(cands, selection, jobs=1))
        m_cn = Measure("cn", lambda: run(cands, selection, jobs=jobs))
        measure([m_c1, m_cn], repeat, budget)
        outs = m_b.result
        changed_b = sum(1 for old, new in zip(texts, outs) if new != old)  # type: ignore[arg-type]
        st1 = Counter(r.status for r in m_c1.result)  # type: ignore[union-attr]
        stn = Counter(r.status for r in m_cn.result)  # type: ignore[union-attr]
        t_a = m_a.best

        def line(label: str, m: Measure, extra: str = "") -> None:
            print_measure(label, m, n, extra)

        line("(a) plain libcst parse+codegen, 1 process, no I/O", m_a)
        line("(b) engine migrate_text,        1 process, no I/O", m_b, f"  changed {changed_b}/{n}")
        line("(c) run(jobs=1), with I/O", m_c1, f"  {dict(sorted(st1.items()))}")
        line(f"(c) run(jobs={jobs}), with I/O and process start-up", m_cn, f"  {dict(sorted(stn.items()))}")
        if changed_b != n:
            print(f"WARNING: (b) changed only {changed_b} of {n} files")
        line("(b0) engine without the self-check (NM991/NM992 off)", m_b0)
        print(f"ratio (b)/(a)          : {m_b.best / t_a:6.2f}")
        print(f"ratio (b0)/(a)         : {m_b0.best / m_a0.best:6.2f}   (self-check cost: (b)/(b0) = "
              f"{(m_b.best / t_a) / (m_b0.best / m_a0.best):.2f})")
        again = sum(1 for one, two in zip(outs, m_b2.result) if one != two)  # type: ignore[arg-type]
        line("(b2) engine with the bounded second pass", m_b2, f"  changed again by it {again}/{n}")
        print(f"ratio (b2)/(a)         : {m_b2.best / m_a2.best:6.2f}   (second-pass cost: (b2)/(b) = "
              f"{(m_b2.best / m_a2.best) / (m_b.best / t_a):.2f})")
        print(f"ratio (c, jobs=1)/(a)  : {m_c1.best / t_a:6.2f}")
        print(f"ratio (c, jobs={jobs})/(a)  : {m_cn.best / t_a:6.2f}")
        print(f"TARGET B: (b)/(a) <= {TARGET_B_RATIO}: {m_b.best / t_a:.2f} -> "
              f"{verdict(m_b.best / t_a <= TARGET_B_RATIO)}")
        print()

        if profile_files > 0:
            profile(texts[:profile_files], rules)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ----------------------------------------------------------------------------- corpus C


def bench_corpus_c(folder: Path, repeat: int, budget: float) -> None:
    """(a) and (b) on real old-stack files: every parsable ``.py`` file under ``folder`` (the development
    corpus built by ../shared/corpus/build.py), timed as corpus B's."""
    print(f"== Corpus C: the real old-stack .py files under {folder}")
    rules = RuleSet.from_selection(RuleSelection())
    texts = []
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            cst.parse_module(text)
        except Exception:  # not Python 3 (the corpus has some): neither side can run it
            continue
        texts.append(text)
    if not texts:
        print("no parsable .py file there")
        print()
        return
    engine_texts(texts[:5], rules)
    m_a, m_b = paired(texts, rules, repeat, 2 * budget)
    n = len(texts)
    changed = sum(1 for old, new in zip(texts, m_b.result) if new != old)  # type: ignore[arg-type]
    print(f"files: {n}, {sum(len(t.encode()) for t in texts) / 1024:.0f} KB in all")
    print_measure("(a) plain libcst parse+codegen, 1 process, no I/O", m_a, n)
    print_measure("(b) engine migrate_text,        1 process, no I/O", m_b, n, f"  changed {changed}/{n}")
    print(f"TARGET C: (b)/(a) <= {TARGET_B_RATIO}: {m_b.best / m_a.best:.2f} -> {verdict(m_b.best / m_a.best <= TARGET_B_RATIO)}")
    print()


def _where(func: tuple[str, int, str]) -> str | None:
    """'migrator', 'codemods', 'libcst' or None for a pstats function key."""
    filename, _, name = func
    norm = filename.replace(os.sep, "/")
    for part in ("migrator", "codemods", "libcst"):
        if f"/{part}/" in norm:
            return part
    if filename == "~" and "libcst" in name:
        return "libcst"
    return None


def _label(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    norm = filename.replace(os.sep, "/")
    for part in ("migrator/", "codemods/", "libcst/"):
        i = norm.rfind("/" + part)
        if i >= 0:
            return f"{norm[i + 1:]}:{line}({name})"
    return name if filename == "~" else f"{os.path.basename(filename)}:{line}({name})"


def profile(texts: list[str], rules: RuleSet, top: int = 15) -> None:
    print(f"== Profile of (b) over {len(texts)} corpus-B files (cProfile; times are inflated by profiling)")
    prof = cProfile.Profile()
    prof.enable()
    engine_texts(texts, rules)
    prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for func, (cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = _where(func)
        if where is not None:
            rows.append((where, func, nc, tt, ct))

    total = max((ct for _w, func, _n, _t, ct in rows if func[2] == "migrate_text"), default=0.0) or 1.0

    def table(title: str, chosen: list, key: int) -> None:
        print(title)
        print(f"  {'cum s':>7} {'cum %':>6} {'own s':>7} {'calls':>9}  function")
        for where, func, nc, tt, ct in sorted(chosen, key=lambda r: r[key], reverse=True)[:top]:
            print(f"  {ct:7.3f} {100 * ct / total:5.1f}% {tt:7.3f} {nc:9d}  {_label(func)}")

    print(f"migrate_text under the profiler: {total:.3f} s (cum % is a share of that)")
    table(f"top {top} by cumulative time, inside migrator/codemods/libcst:", rows, 4)
    # the entry points (migrate_text -> run_python) hold ~100% and hide nothing: left out here
    engine = [r for r in rows if r[0] in ("migrator", "codemods") and r[4] < 0.97 * total]
    table(f"top {top} by cumulative time, inside migrator/codemods only (entry points left out):", engine, 4)
    table(f"top {top} by own time, inside migrator/codemods/libcst:", rows, 3)
    print()


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="worker processes for run() (default 2)")
    ap.add_argument("--limit", type=int, default=None, help="cap corpus A at the first N discovered files")
    ap.add_argument("--files-b", type=int, default=200, help="files in corpus B (default 200)")
    ap.add_argument("--size-b", default="5-20", help="size range of corpus-B source files in KB (default 5-20)")
    ap.add_argument("--repeat", type=int, default=3, help="repeats per timing; the best is kept (default 3)")
    ap.add_argument("--budget", type=float, default=15.0,
                    help="seconds after which a timing is not repeated again (default 15; keeps the run short)")
    ap.add_argument("--sample", type=int, default=100, help="corpus-A files timed with plain libcst (default 100)")
    ap.add_argument("--profile-files", type=int, default=50, help="corpus-B files profiled; 0: no profile (default 50)")
    ap.add_argument("--corpus-a", default="pandas", help="installed package used as corpus A (default pandas)")
    ap.add_argument("--skip-a", action="store_true", help="skip corpus A")
    ap.add_argument("--skip-b", action="store_true", help="skip corpus B")
    ap.add_argument("--corpus-c", type=Path, default=None,
                    help="folder of real old-stack files (the development corpus, e.g. ../corpus): time (a) and (b) on "
                         "its .py files too")
    args = ap.parse_args(argv)
    lo, _, hi = args.size_b.partition("-")
    size_kb = (int(lo), int(hi or lo))

    t0 = time.perf_counter()
    pkg = package_dir("transformers")
    print(f"python {sys.version.split()[0]}, libcst {_dist_version('libcst')}, "
          f"transformers {_dist_version('transformers')}, cores available: {default_jobs()}, jobs: {args.jobs}, "
          f"repeats: {args.repeat} (best kept; not repeated past {args.budget:g} s)")
    print(f"libcst parser: {os.environ.get('LIBCST_PARSER_TYPE', 'native (default)')}; "
          f"load average at start: {_load()}")
    print()
    if not args.skip_a:
        bench_corpus_a(package_dir(args.corpus_a), args.jobs, args.repeat, args.budget, args.limit, args.sample)
    if not args.skip_b:
        bench_corpus_b(pkg, args.jobs, args.repeat, args.budget, args.files_b, size_kb, args.profile_files)
    if args.corpus_c is not None:
        bench_corpus_c(args.corpus_c, args.repeat, args.budget)
    print(f"benchmark wall time: {time.perf_counter() - t0:.1f} s; load average at end: {_load()} "
          f"(other processes on the machine skew the figures)")


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        return "?"


def _dist_version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return "?"


if __name__ == "__main__":
    main()
