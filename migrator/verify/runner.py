"""Launch the verify child (optionally under torchrun), stream its output, enforce the timeout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class RunResult:
    ok: bool
    reason: str = ""                 # why it failed (crash, timeout, nothing written...)
    returncode: int | None = None
    timed_out: bool = False
    data: dict = field(default_factory=dict)   # what the child wrote
    elapsed_s: float = 0.0


def child_command(script: Path, script_args: list[str], nproc: int) -> list[str]:
    inner = ["-m", "migrator.verify.child", str(script), *script_args]
    if nproc > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={nproc}", *inner]
    return [sys.executable, *inner]


def _pump(src, dst) -> None:
    try:
        for chunk in iter(lambda: src.readline(), b""):
            try:
                dst.write(chunk.decode("utf-8", "replace"))
                dst.flush()
            except Exception:
                pass
    finally:
        src.close()


def _kill_group(proc: subprocess.Popen, grace: float = 2.0) -> None:
    pgid = proc.pid  # start_new_session=True: the child leads its own process group
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; make sure no member of its group survives
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


def run_child(script: Path, script_args: list[str], device: str, *, nproc: int = 1,
              timeout: float = 1800.0, stdout=None, stderr=None, instrument: bool = True,
              label: str = "run") -> RunResult:
    """Run SCRIPT in a child process with the observation layer; ``device`` is the child's mode."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    fd, out_path = tempfile.mkstemp(prefix="neuron-migrate-verify-", suffix=".json")
    os.close(fd)
    os.unlink(out_path)
    env = dict(os.environ)
    env["NEURON_MIGRATE_VERIFY_OUT"] = out_path
    env["NEURON_MIGRATE_VERIFY_DEVICE"] = device
    env["NEURON_MIGRATE_VERIFY_INSTRUMENT"] = "1" if instrument else "0"
    env.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    # the child must import this very migrator package
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = child_command(script, script_args, nproc)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, start_new_session=True)
    except OSError as exc:
        return RunResult(False, f"{label}: cannot start {cmd[0]}: {exc}")
    pumps = [threading.Thread(target=_pump, args=(proc.stdout, stdout), daemon=True),
             threading.Thread(target=_pump, args=(proc.stderr, stderr), daemon=True)]
    for t in pumps:
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    except KeyboardInterrupt:
        _kill_group(proc)
        raise
    finally:
        # kill the whole process group: on timeout, and also any helper left behind by the script
        _kill_group(proc)
    for t in pumps:
        t.join(timeout=5)
    elapsed = time.monotonic() - start
    data: dict = {}
    try:
        with open(out_path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        data = {}
    finally:
        try:
            os.unlink(out_path)
        except OSError:
            pass
    rc = proc.returncode
    if timed_out:
        return RunResult(False, f"{label}: timed out after {timeout:g} s (process tree killed)", rc, True,
                         data, elapsed)
    if rc != 0:
        why = f"{label}: the script exited with status {rc}"
        if rc is not None and rc < 0:
            why = f"{label}: the script was killed by signal {-rc}"
        if data.get("error"):
            why += f" ({data['error']})"
        return RunResult(False, why, rc, False, data, elapsed)
    if not data:
        return RunResult(False, f"{label}: the child wrote no observations", rc, False, data, elapsed)
    return RunResult(True, "", rc, False, data, elapsed)
