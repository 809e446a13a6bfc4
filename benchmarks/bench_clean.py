"""A clean tree at ruff-like speed: the CLI on N Python files with no old-stack code, start included.

    python benchmarks/bench_clean.py [--counts 10,100,1000,5000] [--repeat 3] [--no-one-pass]

Writes N files copied round-robin from the standard library (real code of all sizes, none of it
Neuron code) into a temporary directory and times ``python -m migrator DIR --no-progress`` as a
subprocess (start, discovery, the byte pre-filter, the report), best of ``--repeat``. Prints, per
count, the wall time, files/s and the cost per file above the smallest count (flat when the run
scales), then PASS/FAIL against the issue's targets: 1,000 files at >= 3,000 files/s, one file
<= 0.15 s. ``--no-one-pass`` sets NEURON_MIGRATE_ONE_PASS=0 (one search per trigger: the comparison).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_FILES_PER_S = 3000.0
TARGET_ONE_FILE_S = 0.15


def sources(limit: int) -> list[bytes]:
    """Standard-library files that interest no rule (no trigger of any rule: the clean case)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from migrator.engine import RuleSelection, RuleSet

    rules = RuleSet(RuleSelection(), one_pass=False)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for path in sorted(stdlib.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts:
            continue
        data = path.read_bytes()
        if not rules.wanted("python", data):
            out.append(data)
        if len(out) >= limit:
            break
    return out


def timed(directory: Path, repeat: int, env: dict) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "migrator", str(directory), "--no-progress"],
                              capture_output=True, env=env, cwd=ROOT)
        best = min(best, time.perf_counter() - start)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"neuron-migrate failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--counts", default="1,10,100,1000,5000", help="file counts of the sweep")
    ap.add_argument("--repeat", type=int, default=3, help="runs per count; the best is kept (default 3)")
    ap.add_argument("--no-one-pass", action="store_true", help="one substring search per trigger (comparison)")
    args = ap.parse_args(argv)
    counts = sorted({int(c) for c in args.counts.split(",")})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    if args.no_one_pass:
        env["NEURON_MIGRATE_ONE_PASS"] = "0"
    pool = sources(800)
    print(f"clean-tree sweep: {len(pool)} standard-library files copied round-robin; load {os.getloadavg()[0]:.2f}")
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="nm-clean-"))
    try:
        for n in counts:
            d = tmp / f"n{n}"
            d.mkdir()
            for i in range(n):
                sub = d / f"pkg{i // 500}"
                sub.mkdir(exist_ok=True)
                (sub / f"m{i}.py").write_bytes(pool[i % len(pool)])
            rows.append((n, timed(d, args.repeat, env)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base_n, base_t = rows[0]
    print(f"{'files':>6} {'wall s':>8} {'files/s':>9} {'ms/file above ' + str(base_n):>18}")
    for n, t in rows:
        per = (t - base_t) * 1000 / (n - base_n) if n > base_n else float("nan")
        print(f"{n:>6} {t:>8.3f} {n / t:>9.0f} {per:>18.3f}")
    by_n = dict(rows)
    if 1000 in by_n:
        rate = 1000 / by_n[1000]
        print(f"1,000 files: {rate:.0f} files/s (target >= {TARGET_FILES_PER_S:.0f}): "
              f"{'PASS' if rate >= TARGET_FILES_PER_S else 'FAIL'}")
    if 1 in by_n:
        print(f"one file: {by_n[1]:.3f} s (target <= {TARGET_ONE_FILE_S}): "
              f"{'PASS' if by_n[1] <= TARGET_ONE_FILE_S else 'FAIL'}")
    print(f"load at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
