"""Throughput benchmark of neuron-migrate against plain libcst.

    python benchmarks/bench_migrate.py [--jobs N] [--limit N] [--files-b K] [--repeat R]

Corpus A: every file ``discover`` finds in the installed ``transformers`` package (no
Neuron code; >= 1,000 files). Times discover + run (the CLI pipeline, nothing written)
and plain libcst parse+codegen on a sample, to show the per-core libcst floor.

Corpus B: K medium-size transformers files with old-stack (optimum.neuron) usage
injected, written to a temp dir. Times (a) plain libcst parse+codegen, (b) the engine's
``migrate_text`` on the same texts (both in-process, single core, no I/O) and (c) the
full ``run`` with jobs=1 and jobs=N (I/O and process pool included).

Every timing is the best (min) of R repeats, measured with time.perf_counter. The run
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


def best_of(repeat: int, fn: Callable[[], object]) -> tuple[float, object]:
    """(min wall time over ``repeat`` calls, result of the last call)."""
    best = float("inf")
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def libcst_roundtrip(texts: list[str]) -> int:
    n = 0
    for text in texts:
        n += len(cst.parse_module(text).code)
    return n


def engine_texts(texts: list[str], rules: RuleSet) -> list[str]:
    return [migrate_text(text, "python", rules)[0] for text in texts]


def spread(items: list, k: int) -> list:
    """``k`` items evenly spread over ``items`` (deterministic)."""
    if k >= len(items):
        return list(items)
    step = len(items) / k
    return [items[int(i * step)] for i in range(k)]


def transformers_dir() -> Path:
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("transformers is not installed; this benchmark needs it as its corpus")
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


def bench_corpus_a(pkg: Path, jobs: int, repeat: int, limit: int | None, sample: int) -> None:
    print(f"== Corpus A: installed transformers, no Neuron code ({pkg})")
    selection = RuleSelection()
    rules = _ruleset_for(selection)

    # warm-up: imports, rule loading, page cache
    cands, errs = discover([pkg])
    if limit:
        cands = cands[:limit]
    run(cands, selection, jobs=jobs)

    t_disc, (cands_all, errs) = best_of(repeat, lambda: discover([pkg]))
    cands = cands_all[:limit] if limit else cands_all
    n = len(cands)
    kinds = Counter(c.kind for c in cands)
    n_py = kinds.get("python", 0)
    wanted = sum(1 for c in cands if rules.wanted(c.kind, c.path.read_bytes()))

    t_run, results = best_of(repeat, lambda: run(cands, selection, jobs=jobs))

    def both():
        c, _ = discover([pkg])
        if limit:
            c = c[:limit]
        return run(c, selection, jobs=jobs)

    t_total, _ = best_of(repeat, both)
    statuses = Counter(r.status for r in results)

    print(f"files discovered: {n}  ({', '.join(f'{k}: {v}' for k, v in sorted(kinds.items()))}); "
          f"discovery errors: {len(errs)}")
    print(f"files passing the byte pre-filter (parsed by the engine): {wanted}")
    print(f"results: {dict(sorted(statuses.items()))}")
    print(f"discover only          : {t_disc:8.3f} s  {rate(n, t_disc):10.0f} files/s")
    print(f"run only (jobs={jobs})      : {t_run:8.3f} s  {rate(n, t_run):10.0f} files/s")
    print(f"discover + run (jobs={jobs}): {t_total:8.3f} s  {rate(n, t_total):10.0f} files/s")

    # the per-core libcst floor, on a sample of the same files
    py_files = [c.path for c in cands if c.kind == "python"]
    sample_files = spread(py_files, sample)
    texts = [p.read_text(encoding="utf-8") for p in sample_files]
    libcst_roundtrip(texts[:5])  # warm-up
    t_cst, _ = best_of(repeat, lambda: libcst_roundtrip(texts))
    cst_rate = rate(len(texts), t_cst)
    est_cst_all = n_py / cst_rate
    total_rate = rate(n, t_total)
    print(f"plain libcst parse+codegen, {len(texts)}-file sample, 1 core: {t_cst:.3f} s  "
          f"{cst_rate:.0f} files/s/core  (=> {est_cst_all:.1f} s for the {n_py} .py files on 1 core, "
          f"{est_cst_all / jobs:.1f} s on {jobs})")
    print(f"ratio pipeline files/s / libcst files/s/core : {total_rate / cst_rate:8.1f}x")
    print(f"ratio pipeline files/s / libcst files/s on {jobs} cores: {total_rate / (cst_rate * jobs):8.1f}x")
    print(f"ratio pipeline files/s / bump-pydantic (2.7 files/s): {total_rate / BUMP_PYDANTIC_FILES_PER_S:8.0f}x")
    ok_size = n >= 1000 or bool(limit)
    print(f"TARGET A: >= {TARGET_A_FILES_PER_S:.0f} files/s (discover+run, {n} files): "
          f"{total_rate:.0f} files/s -> {verdict(total_rate >= TARGET_A_FILES_PER_S)}"
          + ("" if ok_size else "  (corpus has < 1,000 files)"))
    print()


# ----------------------------------------------------------------------------- corpus B


def pick_corpus_b(pkg: Path, k: int) -> list[Path]:
    models = sorted(pkg.glob("models/*/modeling_*.py"))
    fits = [p for p in models if 5_000 <= p.stat().st_size <= 60_000]
    if len(fits) < k:  # fall back to any medium-size file of the package
        seen = set(fits)
        fits += sorted(p for p in pkg.rglob("*.py") if p not in seen and 5_000 <= p.stat().st_size <= 60_000)
    return spread(fits, k)


def bench_corpus_b(pkg: Path, jobs: int, repeat: int, k: int, profile_files: int) -> None:
    print(f"== Corpus B: {k} transformers files (5-60 KB) with optimum.neuron usage injected")
    selection = RuleSelection()
    rules = RuleSet.from_selection(selection)
    sources = pick_corpus_b(pkg, k)
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
        print(f"files: {n}, {total_kb:.0f} KB in all ({total_kb / n:.1f} KB mean), in {tmp}")

        # warm-up
        libcst_roundtrip(texts[:5])
        engine_texts(texts[:5], rules)

        t_a, _ = best_of(repeat, lambda: libcst_roundtrip(texts))
        t_b, outs = best_of(repeat, lambda: engine_texts(texts, rules))
        changed_b = sum(1 for old, new in zip(texts, outs) if new != old)

        cands, errs = discover([tmp])
        run(cands[:20], selection, jobs=1)  # warm-up
        t_c1, res1 = best_of(repeat, lambda: run(cands, selection, jobs=1))
        t_cn, resn = best_of(repeat, lambda: run(cands, selection, jobs=jobs))
        st1 = Counter(r.status for r in res1)
        stn = Counter(r.status for r in resn)

        print(f"(a) plain libcst parse+codegen, 1 process, no I/O : {t_a:7.3f} s  {rate(n, t_a):7.1f} files/s")
        print(f"(b) engine migrate_text,        1 process, no I/O : {t_b:7.3f} s  {rate(n, t_b):7.1f} files/s"
              f"   changed {changed_b}/{n}")
        print(f"(c) run(jobs=1), with I/O                         : {t_c1:7.3f} s  {rate(n, t_c1):7.1f} files/s"
              f"   {dict(sorted(st1.items()))}")
        print(f"(c) run(jobs={jobs}), with I/O + process pool         : {t_cn:7.3f} s  {rate(n, t_cn):7.1f} files/s"
              f"   {dict(sorted(stn.items()))}")
        if changed_b != n:
            print(f"WARNING: (b) changed only {changed_b} of {n} files")
        print(f"ratio (b)/(a)          : {t_b / t_a:6.2f}")
        print(f"ratio (c, jobs=1)/(a)  : {t_c1 / t_a:6.2f}")
        print(f"ratio (c, jobs={jobs})/(a)  : {t_cn / t_a:6.2f}")
        print(f"TARGET B: (b)/(a) <= {TARGET_B_RATIO}: {t_b / t_a:.2f} -> {verdict(t_b / t_a <= TARGET_B_RATIO)}")
        print()

        profile(texts[:profile_files] if profile_files < n else texts, rules)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for func, (cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = _where(func)
        if where is not None:
            rows.append((where, func, nc, tt, ct))

    def table(title: str, chosen: list, key: int) -> None:
        print(title)
        print(f"  {'cum s':>7} {'cum %':>6} {'own s':>7} {'calls':>9}  function")
        for where, func, nc, tt, ct in sorted(chosen, key=lambda r: r[key], reverse=True)[:top]:
            print(f"  {ct:7.3f} {100 * ct / total:5.1f}% {tt:7.3f} {nc:9d}  {_label(func)}")

    print(f"total profiled time: {total:.3f} s")
    table(f"top {top} by cumulative time, inside migrator/codemods/libcst:", rows, 4)
    engine = [r for r in rows if r[0] in ("migrator", "codemods")]
    table(f"top {top} by cumulative time, inside migrator/codemods only:", engine, 4)
    table(f"top {top} by own time, inside migrator/codemods/libcst:", rows, 3)
    print()


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="worker processes for run() (default 2)")
    ap.add_argument("--limit", type=int, default=None, help="cap corpus A at the first N discovered files")
    ap.add_argument("--files-b", type=int, default=200, help="files in corpus B (default 200)")
    ap.add_argument("--repeat", type=int, default=3, help="repeats per timing; the best is kept (default 3)")
    ap.add_argument("--sample", type=int, default=100, help="corpus-A files timed with plain libcst (default 100)")
    ap.add_argument("--profile-files", type=int, default=50, help="corpus-B files profiled (default 50)")
    ap.add_argument("--skip-a", action="store_true", help="skip corpus A")
    ap.add_argument("--skip-b", action="store_true", help="skip corpus B")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    pkg = transformers_dir()

    print(f"python {sys.version.split()[0]}, libcst {_dist_version('libcst')}, "
          f"transformers {_dist_version('transformers')}, cores available: {default_jobs()}, jobs: {args.jobs}, "
          f"repeats: {args.repeat} (best kept)")
    print(f"libcst parser: {os.environ.get('LIBCST_PARSER_TYPE', 'native (default)')}")
    print()
    if not args.skip_a:
        bench_corpus_a(pkg, args.jobs, args.repeat, args.limit, args.sample)
    if not args.skip_b:
        bench_corpus_b(pkg, args.jobs, args.repeat, args.files_b, args.profile_files)
    print(f"benchmark wall time: {time.perf_counter() - t0:.1f} s")


def _dist_version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return "?"


if __name__ == "__main__":
    main()
