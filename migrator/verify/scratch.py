"""``verify --against``: where each side runs. The original (a path, or a git revision materialised with
``git archive``, never touching the user's work tree) and the migrated script each get their own scratch
working directory, built the same way, so that relative paths in the arguments resolve in each and what
one side writes is never seen by the other.

Layout of one side (``SCRATCH/<side>/``), with C the directory verify was started from and P the folder
of the migrated script (its "project"):

* P is copied (every file except version-control and cache folders; files of 32 MB or more are linked,
  not copied: model weights are read, not written). The original side's copy is built from the
  original's folder instead: ``--against PATH``: PATH's folder; ``--against REV``: the files git tracks
  in P at REV, plus the files of P that git does not track (data, models, outputs of earlier runs) as
  they are in the work tree.
* When C is P or inside it, the side's working directory is the same place in the copy.
* When P is inside C, the side's working directory mirrors C: a symbolic link to every entry of C,
  except the folders on the way to P, which are real folders holding the copy of P. A relative input
  (``--model_id models/tiny``) resolves through the links; a new output (``--output_dir out``) is
  created in the scratch directory. Outputs written *into an existing folder outside P* go through a link
  into that folder, so both sides write there: point outputs to a new path or inside the project.
* Otherwise C is mirrored as above and P's copy lies beside it (``SCRATCH/<side>/project/``).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", ".ipynb_checkpoints", ".venv", "venv", "node_modules",
             ".tox", ".nox", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
LINK_SIZE = 32 * 1024 * 1024


class ScratchError(Exception):
    """The original cannot be materialised (unknown revision, file absent at that revision, ...)."""


@dataclass
class SidePlace:
    script: Path      # the script to run (inside the side's copy of the project)
    cwd: Path         # the side's working directory
    label: str = ""   # what it is, for the report


# ----------------------------------------------------------------------------- git

def _git(cwd: Path, *args: str, binary: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=not binary, timeout=120)


def git_root(path: Path) -> Path | None:
    """The top of the git work tree that holds ``path`` (a file or folder), or None."""
    folder = path if path.is_dir() else path.parent
    try:
        proc = _git(folder, "rev-parse", "--show-toplevel")
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    return Path(proc.stdout.strip()).resolve()


def is_revision(repo: Path, rev: str) -> bool:
    proc = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    return proc.returncode == 0


def modified_in_work_tree(script: Path) -> bool:
    """True when ``script`` is tracked by git and differs from HEAD (the state after ``neuron-migrate
    . --write`` in a checkout)."""
    repo = git_root(script)
    if repo is None:
        return False
    rel = script.resolve().relative_to(repo).as_posix()
    if _git(repo, "cat-file", "-e", f"HEAD:{rel}").returncode != 0:
        return False
    return _git(repo, "diff", "--quiet", "HEAD", "--", rel).returncode == 1


def _extract_revision(repo: Path, rev: str, rel: str, dest: Path) -> None:
    """The files git tracks under ``rel`` (a folder relative to the repository) at ``rev``, into ``dest``."""
    spec = f"{rev}:{rel}" if rel not in ("", ".") else rev
    proc = _git(repo, "archive", "--format=tar", spec, binary=True)
    if proc.returncode != 0:
        msg = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ScratchError(f"git archive {spec}: {msg[-1] if msg else 'failed'}")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        members = [m for m in tar.getmembers() if not (m.issym() or m.islnk()) or _safe_link(m)]
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, members=members, filter="data")
        else:  # pragma: no cover - Python < 3.11.4
            tar.extractall(dest, members=members)


def _safe_link(member: tarfile.TarInfo) -> bool:
    target = member.linkname
    return not os.path.isabs(target) and ".." not in Path(target).parts


def _tracked(folder: Path) -> set[str]:
    proc = _git(folder, "ls-files", "-z", "--", ".")
    if proc.returncode != 0:
        return set()
    return {p for p in proc.stdout.split("\0") if p}


# ----------------------------------------------------------------------------- copies

def copy_project(src: Path, dest: Path, skip: set[str] | None = None) -> None:
    """Copy folder ``src`` to ``dest`` (see the module doc); ``skip``: relative paths not to copy."""
    skip = skip or set()
    dest.mkdir(parents=True, exist_ok=True)
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        here = Path(dirpath)
        rel_dir = here.relative_to(src)
        (dest / rel_dir).mkdir(parents=True, exist_ok=True)
        for name in filenames:
            rel = (rel_dir / name).as_posix()
            if rel in skip:
                continue
            source, target = here / name, dest / rel_dir / name
            try:
                if source.is_symlink() or source.stat().st_size >= LINK_SIZE:
                    os.symlink(source.resolve(), target)
                else:
                    shutil.copy2(source, target)
            except OSError:
                continue  # a socket, a dangling link: nothing a script reads


def _mirror(src: Path, dest: Path, chain: list[str]) -> Path:
    """Mirror folder ``src`` into ``dest`` by links, except the folders named by ``chain`` (each inside
    the previous), which are real folders; returns the folder where the last of the chain goes."""
    dest.mkdir(parents=True, exist_ok=True)
    if not chain:
        for entry in src.iterdir():
            os.symlink(entry, dest / entry.name)
        return dest
    for entry in src.iterdir():
        if entry.name == chain[0]:
            continue
        os.symlink(entry, dest / entry.name)
    if len(chain) == 1:
        return dest / chain[0]
    return _mirror(src / chain[0], dest / chain[0], chain[1:])


def place_side(root: Path, project: Path, fill, script_name: str, user_cwd: Path) -> SidePlace:
    """Build one side under ``root``: ``fill(folder)`` writes that side's project files into the folder
    that stands for ``project`` (the migrated script's folder); the side runs ``script_name`` in it."""
    project, user_cwd = project.resolve(), user_cwd.resolve()
    if user_cwd == project or project in user_cwd.parents:
        copy = root / project.name
        fill(copy)
        cwd = copy / user_cwd.relative_to(project)
        cwd.mkdir(parents=True, exist_ok=True)
        return SidePlace(copy / script_name, cwd)
    cwd = root / "cwd"
    if user_cwd in project.parents:
        copy = _mirror(user_cwd, cwd, list(project.relative_to(user_cwd).parts))
    else:
        _mirror(user_cwd, cwd, [])
        copy = root / "project" / project.name
    fill(copy)
    return SidePlace(copy / script_name, cwd)


def migrated_side(root: Path, script: Path, user_cwd: Path) -> SidePlace:
    project = script.resolve().parent
    return place_side(root / "migrated", project, lambda d: copy_project(project, d), script.name, user_cwd)


def original_from_path(root: Path, script: Path, original: Path, user_cwd: Path) -> SidePlace:
    source = original.resolve().parent
    return place_side(root / "original", script.resolve().parent, lambda d: copy_project(source, d),
                      original.name, user_cwd)


def original_from_revision(root: Path, script: Path, rev: str, user_cwd: Path) -> SidePlace:
    """The original = ``rev``'s version of the script's folder (tracked files) + the work tree's untracked
    files of that folder; raises ScratchError when the script does not exist at ``rev``."""
    project = script.resolve().parent
    repo = git_root(project)
    if repo is None:
        raise ScratchError(f"{script} is not in a git work tree: --against {rev} needs one "
                           "(or give the original as a path)")
    if not is_revision(repo, rev):
        raise ScratchError(f"--against {rev}: neither a file nor a git revision of {repo}")
    rel_script = script.resolve().relative_to(repo).as_posix()
    if _git(repo, "cat-file", "-e", f"{rev}:{rel_script}").returncode != 0:
        raise ScratchError(f"--against {rev}: {rel_script} does not exist at {rev}")
    rel_project = project.relative_to(repo).as_posix()

    def fill(dest: Path) -> None:
        copy_project(project, dest, skip=_tracked(project))   # untracked: data, models
        _extract_revision(repo, rev, rel_project, dest)        # tracked: as at REV

    place = place_side(root / "original", project, fill, script.name, user_cwd)
    place.label = f"{rev}:{rel_script} (git)"
    return place
