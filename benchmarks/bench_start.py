"""Start-time benchmark of the ``neuron-migrate`` command (everyday case: pre-commit on one file).

    python benchmarks/bench_start.py [--runs N] [--top K]

Median wall time over N runs (default 15) of, each a fresh ``python -m migrator`` process:

  (a) ``python -c pass``                                 the interpreter alone (the floor)
  (b) ``neuron-migrate clean.py``                        one file with no old-stack code
  (c) ``neuron-migrate old.py``                          one file with optimum.neuron code
  (d) ``neuron-migrate --check examples/optimum_neuron_project``
  (e) ``neuron-migrate --help``

then the ratios to (a) and the ``-X importtime`` breakdown of (b): the 10 imports with the largest
cumulative time. Targets (issue 12): (b) <= 0.15 s, (e) <= 0.15 s. The command runs as
``python -m migrator`` with this checkout first on ``sys.path`` (the console script is
``migrator.cli:entry``, the same code). Runs alternate between the cases, so that a change of the
machine's load hits them alike. Bytecode is cached as in an installed copy (``PYTHONPYCACHEPREFIX``
in the temporary directory, ``PYTHONDONTWRITEBYTECODE`` unset). Writes only a temporary directory,
removed at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 0.15

CLEAN = '''"""A module with no old-stack code."""
import os

import torch


def train(model, data):
    for batch in data:
        loss = model(batch).loss
        loss.backward()
    return os.path.join("out", "model.pt")
'''

OLD = '''from optimum.neuron import NeuronTrainer, NeuronTrainingArguments
import torch_xla.core.xla_model as xm

args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=2)
trainer = NeuronTrainer(model=None, args=args)
trainer.train()
xm.mark_step()
'''


def _env(pycache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("HF_HUB_OFFLINE", "1")
    # measure as installed (bytecode cached), even where PYTHONDONTWRITEBYTECODE is set: the warm-up
    # writes the .pyc files into the temporary directory, not into the checkout
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def _time(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def import_breakdown(cmd: list[str], env: dict[str, str], cwd: Path, top: int) -> list[tuple[float, float, str]]:
    """(cumulative s, self s, module) of the ``top`` slowest imports, by cumulative time."""
    out = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], env=env, cwd=cwd,
                         capture_output=True, text=True).stderr
    rows = []
    for line in out.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m:
            rows.append((int(m.group(2)) / 1e6, int(m.group(1)) / 1e6, m.group(3)[1:] + m.group(4)))
    rows.sort(key=lambda r: -r[0])
    return rows[:top]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15, help="runs per case; the median is kept (default 15)")
    ap.add_argument("--top", type=int, default=10, help="imports shown in the breakdown (default 10)")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="nm-bench-start-"))
    env = _env(tmp / "pycache")
    try:
        (tmp / "clean.py").write_text(CLEAN)
        (tmp / "old.py").write_text(OLD)
        nm = [sys.executable, "-m", "migrator"]
        cases = [
            ("(a) python -c pass", [sys.executable, "-c", "pass"]),
            ("(b) one clean file", [*nm, "--no-progress", str(tmp / "clean.py")]),
            ("(c) one old-stack file", [*nm, "--no-progress", str(tmp / "old.py")]),
            ("(d) --check example project", [*nm, "--no-progress", "--check", str(ROOT / "examples" / "optimum_neuron_project")]),
            ("(e) --help", [*nm, "--help"]),
        ]
        times: dict[str, list[float]] = {label: [] for label, _ in cases}
        for label, cmd in cases:  # warm-up (pyc files, page cache)
            _time(cmd, env, tmp)
        for _ in range(args.runs):
            for label, cmd in cases:
                times[label].append(_time(cmd, env, tmp))
        base = statistics.median(times[cases[0][0]])
        print(f"start times, median of {args.runs} runs (python {sys.version.split()[0]}, load {os.getloadavg()[0]:.2f})")
        for label, _ in cases:
            med = statistics.median(times[label])
            target = ""
            if label.startswith(("(b)", "(e)")):
                target = f"  target <= {TARGET_S:.2f} s: {'PASS' if med <= TARGET_S else 'FAIL'}"
            print(f"  {label:<30} {med * 1000:7.1f} ms  x{med / base:5.2f}{target}")
        print(f"\nimport-time breakdown of (b), top {args.top} by cumulative time (seconds):")
        print(f"  {'cumulative':>10} {'self':>8}  module")
        for cum, self_s, name in import_breakdown(cases[1][1], env, tmp, args.top):
            print(f"  {cum:10.4f} {self_s:8.4f}  {name}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
