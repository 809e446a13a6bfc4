from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from migrator import write
from migrator.write import atomic_write, dirty_files

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


# --------------------------------------------------------------------------- atomic_write


def test_atomic_write_replaces_content_and_keeps_mode(tmp_path: Path) -> None:
    p = tmp_path / "run.sh"
    p.write_text("#!/bin/bash\necho old\n")
    os.chmod(p, 0o755)
    atomic_write(p, b"#!/bin/bash\necho new\n")
    assert p.read_bytes() == b"#!/bin/bash\necho new\n"
    assert stat.S_IMODE(p.stat().st_mode) == 0o755
    assert sorted(os.listdir(tmp_path)) == ["run.sh"]


def test_atomic_write_keeps_restrictive_mode(tmp_path: Path) -> None:
    p = tmp_path / "secret.py"
    p.write_text("old")
    os.chmod(p, 0o640)
    atomic_write(p, b"new")
    assert stat.S_IMODE(p.stat().st_mode) == 0o640


def test_atomic_write_new_file_gets_umask_mode(tmp_path: Path) -> None:
    p = tmp_path / "new.py"
    atomic_write(p, b"x = 1\n")
    mask = os.umask(0)
    os.umask(mask)
    assert p.read_bytes() == b"x = 1\n"
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~mask


def test_atomic_write_failure_leaves_original(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "a.py"
    p.write_bytes(b"original\n")

    def boom(src, dst):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk on fire"):
        atomic_write(p, b"new content\n")
    assert p.read_bytes() == b"original\n"
    assert sorted(os.listdir(tmp_path)) == ["a.py"]


def test_atomic_write_failure_while_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "a.py"
    p.write_bytes(b"original\n")

    def boom(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(p, b"new content\n")
    assert p.read_bytes() == b"original\n"
    assert sorted(os.listdir(tmp_path)) == ["a.py"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_atomic_write_through_symlink_keeps_link(tmp_path: Path) -> None:
    real = tmp_path / "real.py"
    real.write_text("old")
    link = tmp_path / "link.py"
    link.symlink_to(real)
    atomic_write(link, b"new")
    assert link.is_symlink()
    assert real.read_bytes() == b"new"


# --------------------------------------------------------------------------- dirty_files


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=a@b", "-c", "user.name=t", "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    for name in ("clean.py", "modified.py", "staged.py", "old name.py", "with space.py", "sub/deep.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"# {name}\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


@needs_git
def test_dirty_files_kinds(repo: Path) -> None:
    (repo / "modified.py").write_text("changed\n")
    (repo / "staged.py").write_text("changed\n")
    git(repo, "add", "staged.py")
    (repo / "untracked.py").write_text("new\n")
    (repo / "newdir").mkdir()
    (repo / "newdir" / "inner.py").write_text("new\n")
    (repo / "with space.py").write_text("changed\n")
    git(repo, "mv", "old name.py", "new name.py")
    (repo / "sub" / "deep.py").write_text("changed\n")

    names = [
        "clean.py",
        "modified.py",
        "staged.py",
        "untracked.py",
        "newdir/inner.py",
        "with space.py",
        "new name.py",
        "sub/deep.py",
    ]
    dirty = dirty_files([repo / n for n in names])
    assert dirty == {(repo / n).resolve() for n in names if n != "clean.py"}


@needs_git
def test_dirty_files_clean_repo(repo: Path) -> None:
    assert dirty_files([repo / "clean.py", repo / "sub" / "deep.py"]) == set()


@needs_git
def test_dirty_files_renamed_with_spaces_and_unicode(repo: Path) -> None:
    (repo / "dir with space").mkdir()
    git(repo, "mv", "with space.py", "dir with space/ünï cödé.py")
    target = repo / "dir with space" / "ünï cödé.py"
    assert dirty_files([target, repo / "clean.py"]) == {target.resolve()}


@needs_git
def test_dirty_files_relative_paths(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "modified.py").write_text("changed\n")
    monkeypatch.chdir(repo / "sub")
    assert dirty_files([Path("../modified.py"), Path("deep.py")]) == {(repo / "modified.py").resolve()}


@needs_git
def test_dirty_files_one_git_call_per_repo(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    (other / "x.py").write_text("x\n")
    (repo / "modified.py").write_text("changed\n")
    calls = []
    real_run = subprocess.run

    def spy(args, **kw):
        calls.append((tuple(args), kw.get("cwd")))
        return real_run(args, **kw)

    monkeypatch.setattr(write.subprocess, "run", spy)
    dirty = dirty_files([repo / "modified.py", repo / "clean.py", repo / "sub" / "deep.py", other / "x.py"])
    assert dirty == {(repo / "modified.py").resolve(), (other / "x.py").resolve()}
    assert sorted(str(c[1]) for c in calls) == sorted([str(repo.resolve()), str(other.resolve())])
    assert all(c[0][:2] == ("git", "status") for c in calls)


def test_dirty_files_outside_repo_is_clean(tmp_path: Path) -> None:
    d = tmp_path / "plain"
    d.mkdir()
    (d / "a.py").write_text("x\n")
    if any((p / ".git").exists() for p in tmp_path.resolve().parents):
        pytest.skip("tmp dir lies inside a git repository")
    assert dirty_files([d / "a.py"]) == set()


@needs_git
def test_dirty_files_git_failure_is_clean(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "modified.py").write_text("changed\n")

    def missing(*a, **kw):
        raise FileNotFoundError("git")

    monkeypatch.setattr(write.subprocess, "run", missing)
    assert dirty_files([repo / "modified.py"]) == set()


def test_dirty_files_broken_repo_is_clean(tmp_path: Path) -> None:
    root = tmp_path / "broken"
    (root / ".git").mkdir(parents=True)  # not a real repository: git status fails
    (root / "a.py").write_text("x\n")
    assert dirty_files([root / "a.py"]) == set()


def test_dirty_files_empty() -> None:
    assert dirty_files([]) == set()
