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


SIDES = ("migrated", "original")
SIDE_ENV = "NEURON_MIGRATE_VERIFY_SIDE"


def child_command(script: Path, script_args: list[str], nproc: int, python: str | None = None) -> list[str]:
    exe = python or sys.executable
    inner = ["-m", "migrator.verify.child", str(script), *script_args]
    if nproc > 1:
        return [exe, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *inner]
    return [exe, *inner]


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
              label: str = "run", side: str = "migrated", cwd: Path | str | None = None,
              python: str | None = None, env_extra: dict | None = None) -> RunResult:
    """Run SCRIPT in a child process with the observation layer; ``device`` is the child's mode.

    ``side``: ``migrated`` or ``original`` (the child installs the old-stack emulation on the original
    side: NEURON_MIGRATE_VERIFY_SIDE); ``cwd``: the child's working directory (default: ours);
    ``python``: the interpreter (default: this one; the migrator package goes on its PYTHONPATH);
    ``env_extra``: more environment variables (e.g. PYTHONPATH entries remapped to a scratch tree)."""
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, not {side!r}")
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    fd, out_path = tempfile.mkstemp(prefix="neuron-migrate-verify-", suffix=".json")
    os.close(fd)
    os.unlink(out_path)
    env = dict(os.environ)
    env["NEURON_MIGRATE_VERIFY_OUT"] = out_path
    env["NEURON_MIGRATE_VERIFY_DEVICE"] = device
    env["NEURON_MIGRATE_VERIFY_INSTRUMENT"] = "1" if instrument else "0"
    env[SIDE_ENV] = side
    env.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    env.setdefault("PYTHONHASHSEED", "0")  # the same set/dict-of-str order on both sides
    if env_extra:
        env.update(env_extra)
    # the child must import this very migrator package
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = child_command(script, script_args, nproc, python)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, start_new_session=True,
                                cwd=str(cwd) if cwd is not None else None)
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
    if data.get("not_emulated"):
        # never a silent pass: the original touched an old API that the emulation does not model
        return RunResult(False, f"{label}: {data.get('error') or data['not_emulated']}", rc, False, data, elapsed)
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
