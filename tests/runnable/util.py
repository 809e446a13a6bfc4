"""What the runnable tests share: migrate a copy of an old-stack project as a user would, then run the
migrated script under ``neuron-migrate verify --device emulate --against ORIGINAL`` (issue 17: migrated
real-shaped scripts must run, and compute what the originals computed on the emulated old stack).

A test keeps its old-stack project under ``tests/runnable/projects/<name>/`` (scripts written for the
old stack, in our own words) and calls :func:`migrate_copy` then :func:`verify_against` (the original is
the project's committed script: verify runs each side in its own scratch copy, nothing is written there).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = Path(__file__).parent / "projects"
FIX = ROOT / "tests" / "verify_fixtures"
TINY_LLAMA = FIX / "tiny-llama"
TINY_CLASSIFIER = FIX / "tiny-classifier"


def env(**extra: str) -> dict:
    e = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    e.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    e.update(extra)
    return e


def cli(cwd: Path, *args: str, timeout: float = 600, **extra_env: str) -> subprocess.CompletedProcess:
    """``python -m migrator ARGS`` in a subprocess from ``cwd``, offline."""
    return subprocess.run([sys.executable, "-m", "migrator", *args], capture_output=True, text=True,
                          timeout=timeout, env=env(**extra_env), cwd=str(cwd))


def migrate_copy(name: str, dest: Path, first: tuple[str, ...] = ()) -> tuple[Path, subprocess.CompletedProcess]:
    """Copy ``projects/<name>`` to ``dest/<name>`` and migrate it in place (``neuron-migrate DIR --write``),
    the files ``first`` (relative to the project) in a run of their own before.
    Returns the migrated folder and the migration's process (exit 0 or 1: 1 = markers left)."""
    project = dest / name
    shutil.copytree(PROJECTS / name, project)
    if first:
        proc = cli(dest, *(str(project / f) for f in first), "--write")
        assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    proc = cli(dest, str(project), "--write")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return project, proc


def verify(script: Path, *args: str, options: tuple[str, ...] = ("--device", "emulate"),
           timeout: float = 600) -> subprocess.CompletedProcess:
    """``neuron-migrate verify SCRIPT OPTIONS -- ARGS`` run from the script's folder."""
    return cli(script.parent, "verify", str(script), *options, "--", *args, timeout=timeout)


def verify_against(project: Path, script: str, *args: str, options: tuple[str, ...] = (),
                   timeout: float = 600) -> subprocess.CompletedProcess:
    """``verify project/script --device emulate --against projects/<name>/script OPTIONS -- ARGS``."""
    original = PROJECTS / project.name / script
    return verify(project / script, *args, options=("--device", "emulate", "--against", str(original), *options),
                  timeout=timeout)


def exported_llama(dest: Path, batch_size: int) -> Path:
    """A decoder directory as optimum-neuron (generations A/B) left it after an export: config.json with
    the export settings under ``"neuron"`` (here beside the tiny Llama's weights, so that the migrated
    script, which loads it with plain Transformers, finds them too)."""
    folder = dest / f"tiny-llama-exported-b{batch_size}"
    shutil.copytree(TINY_LLAMA, folder)
    config = json.loads((folder / "config.json").read_text())
    config["neuron"] = {"task": "text-generation", "batch_size": batch_size, "sequence_length": 64,
                        "num_cores": 1, "auto_cast_type": "fp32", "checkpoint_id": "tiny-llama",
                        "compiler_type": "neuronx-cc", "compiler_version": "2.15.128.0"}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def output(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr
