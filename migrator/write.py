"""Putting results on disk safely, and asking git which files hold unsaved work."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable

__all__ = ["atomic_write", "dirty_files"]


def _default_mode() -> int:
    # mkstemp creates 0o600; a brand-new file should get what open() would give it.
    # os.umask can only be read by setting it, which is why this is done only for new files.
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path: Path, data: bytes) -> None:
    """Replace the contents of ``path`` with ``data`` atomically.

    The bytes go to a temporary file in the same directory, which is flushed,
    fsynced, given the original file's permission bits and then renamed over
    ``path`` -- readers see either the old file or the new one, never a mix.
    A symlink is written through (its target is replaced; the link stays).
    On any failure the temporary file is removed and the exception re-raised.
    """
    target = os.path.realpath(os.fspath(path))
    directory = os.path.dirname(target)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = _default_mode()
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(target) + ".", suffix=".nm-tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)


def _fsync_dir(directory: str) -> None:
    """Make the rename itself durable (best effort; not possible everywhere)."""
    flags = getattr(os, "O_DIRECTORY", 0) | os.O_RDONLY
    try:
        dfd = os.open(directory, flags)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


# --------------------------------------------------------------------------- git


def _repo_root(directory: str, cache: dict[str, str | None]) -> str | None:
    seen = []
    d = directory
    while True:
        if d in cache:
            root = cache[d]
            break
        seen.append(d)
        if os.path.lexists(os.path.join(d, ".git")):
            root = d
            break
        parent = os.path.dirname(d)
        if parent == d:
            root = None
            break
        d = parent
    for s in seen:
        cache[s] = root
    return root


def _git_status(root: str) -> list[str] | None:
    """Repository-relative paths ``git status`` reports in ``root``; None on failure."""
    env = dict(os.environ)
    env["GIT_OPTIONAL_LOCKS"] = "0"  # a status must not take the index lock
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    env.pop("GIT_INDEX_FILE", None)
    try:
        proc = subprocess.run(
            ["git", "status", "--porcelain=v1", "-z", "--untracked-files=all"],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            check=False,
        )
    except (OSError, ValueError):
        return None
    if proc.returncode != 0:
        return None
    out: list[str] = []
    fields = proc.stdout.split(b"\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue  # the empty tail after the last NUL
        xy, rel = entry[:2], entry[3:]
        out.append(os.fsdecode(rel))
        if xy[:1] in (b"R", b"C") or xy[1:2] in (b"R", b"C"):
            # -z rename/copy: "XY new\0old\0" -- the next field is the source path
            if i < len(fields):
                out.append(os.fsdecode(fields[i]))
                i += 1
    return out


def dirty_files(paths: Iterable[Path]) -> set[Path]:
    """The files among ``paths`` that git reports as modified, staged or untracked.

    Returned as absolute resolved paths. A file outside any git repository is
    clean; so is every file of a repository where ``git status`` cannot run (git
    missing, unreadable repository...). One ``git status`` per repository.
    """
    by_root: dict[str, set[str]] = {}
    cache: dict[str, str | None] = {}
    for p in paths:
        real = os.path.realpath(os.fspath(p))
        root = _repo_root(os.path.dirname(real), cache)
        if root is not None:
            by_root.setdefault(root, set()).add(real)
    dirty: set[Path] = set()
    for root, wanted in by_root.items():
        reported = _git_status(root)
        if not reported:
            continue
        for rel in reported:
            full = os.path.normpath(os.path.join(root, rel))
            if full in wanted:
                dirty.add(Path(full))
            elif rel.endswith("/"):
                # a reported directory (an untracked nested repository) covers its files
                prefix = full + os.sep
                dirty.update(Path(w) for w in wanted if w.startswith(prefix))
    return dirty
