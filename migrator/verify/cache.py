"""``verify --against ... --original-cache DIR``: reuse the original side's observations.

The original does not change while a migration is being fixed; its run (often the slower side) can be
reused. The key is a SHA-256 of everything the original's run depends on that verify can see:

* the files of the original's project copy (content of files under 1 MB; path, size and modification
  time of bigger ones, which are model weights in practice),
* the arguments, and every file under a path an argument names (relative to the directory verify was
  started from, or absolute), by path, size and modification time,
* the ``--before`` steps (before.py): each step's script (its path in the project and its content), its
  arguments in order, and the files its arguments name (as for the script's arguments),
* the interpreter (path and version), the process count, and the source of ``migrator/verify``
  (the emulation and the observation layer).

What it cannot see: files the original reads that no argument names and that lie outside its folder
(a model path written in the code, the Hugging Face cache), environment variables. Leave the cache out
(no ``--original-cache``) when those change.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

SMALL = 1024 * 1024
MAX_FILES = 20000


def _walk(path: Path, h, label: str, pattern: str = "*") -> None:
    count = 0
    paths = [path] if path.is_file() else sorted(p for p in path.rglob(pattern) if p.is_file() or p.is_symlink())
    for p in paths:
        count += 1
        if count > MAX_FILES:
            h.update(b"...")
            return
        rel = p.relative_to(path).as_posix() if p != path else p.name
        try:
            st = p.stat()
        except OSError:
            h.update(f"{label}:{rel}:missing\n".encode())
            continue
        if st.st_size < SMALL and not p.is_symlink():
            h.update(f"{label}:{rel}:".encode() + hashlib.sha256(p.read_bytes()).digest() + b"\n")
        else:
            h.update(f"{label}:{rel}:{st.st_size}:{st.st_mtime_ns}\n".encode())


def _arg_paths(args: list[str], cwd: Path) -> list[Path]:
    found = []
    for arg in args:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if not value or value.startswith("-") or len(value) > 4096:
            continue
        p = Path(value) if os.path.isabs(value) else cwd / value
        try:
            if p.exists():
                found.append(p)
        except OSError:
            continue
    return found


def _python_version(python: str) -> str:
    if python == sys.executable:
        return sys.version
    try:
        return subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True,
                              timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def key(project_copy: Path, script_name: str, args: list[str], user_cwd: Path, python: str, nproc: int,
        before: list[list] | None = None, env: dict | None = None) -> str:
    """``before``: the ``--before`` steps, each [script path in the project, its arguments, content digest];
    ``env``: the child's environment settings of verify (seed, dropout policy)."""
    h = hashlib.sha256()
    h.update(json.dumps({"script": script_name, "args": args, "python": python, "nproc": nproc,
                         "version": _python_version(python), "before": before or [],
                         "env": env or {}}, sort_keys=True).encode())
    _walk(project_copy, h, "project")
    for i, p in enumerate(_arg_paths(args, user_cwd)):
        _walk(p, h, f"arg{i}")
    for n, step in enumerate(before or []):
        for i, p in enumerate(_arg_paths(step[1], user_cwd)):
            _walk(p, h, f"before{n}arg{i}")
    _walk(Path(__file__).resolve().parent, h, "verify", "*.py")
    return h.hexdigest()


def load(cache_dir: Path, k: str) -> dict | None:
    try:
        with open(cache_dir / f"original-{k}.json", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("observations") is not None else None


def store(cache_dir: Path, k: str, data: dict) -> None:
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = cache_dir / f".original-{k}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, cache_dir / f"original-{k}.json")
    except OSError:
        pass  # a cache that cannot be written is only slower
