"""What the tests that run ``neuron-migrate verify`` as a user would (a subprocess, offline) share."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_verify(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    """``python -m migrator verify ARGS`` in a subprocess from the repository root, offline, one thread
    per process (tiny models: no thread contention)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "migrator", "verify", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=str(ROOT))
