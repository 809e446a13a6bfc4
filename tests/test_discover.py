from __future__ import annotations

import os
from pathlib import Path

import pytest

from migrator.discover import Candidate, discover, file_kind


def touch(root: Path, *rels: str, text: str = "x = 1\n") -> None:
    for rel in rels:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def shown(cands: list[Candidate]) -> list[str]:
    return [c.display for c in cands]


def run(tmp_path: Path, *paths, exclude=(), cwd=None):
    cands, errors = discover(list(paths) or ["."], exclude=exclude, cwd=cwd or tmp_path)
    return cands, errors


# --------------------------------------------------------------------------- kinds


@pytest.mark.parametrize(
    "rel, kind",
    [
        ("a.py", "python"),
        ("setup.py", "python"),
        ("nb.ipynb", "notebook"),
        ("run.sh", "shell"),
        ("run.bash", "shell"),
        ("job.slurm", "shell"),
        ("job.sbatch", "shell"),
        ("requirements.txt", "requirements"),
        ("requirements-dev.txt", "requirements"),
        ("requirements_neuron.txt", "requirements"),
        ("inference_requirements.txt", "requirements"),
        ("dev-requirements.txt", "requirements"),
        ("requirements/base.txt", "requirements"),
        ("constraints.txt", "requirements"),
        ("constraints-trn1.txt", "requirements"),
        ("setup.cfg", "requirements"),
        ("pyproject.toml", "pyproject"),
        ("Dockerfile", "dockerfile"),
        ("Dockerfile.neuron", "dockerfile"),
        ("gpu.Dockerfile", "dockerfile"),
        ("Containerfile", "dockerfile"),
        ("README.md", "markdown"),
        ("docs.mdx", "markdown"),
        ("notes.txt", None),
        ("other.toml", None),
        ("setup.cfg.bak", None),
        ("Dockerfile.dockerignore", None),
        ("image.png", None),
        ("data.json", None),
    ],
)
def test_file_kind_by_name(tmp_path: Path, rel: str, kind: str | None) -> None:
    touch(tmp_path, rel)
    assert file_kind(tmp_path / rel) == kind


def test_file_kind_needs_no_file_for_names(tmp_path: Path) -> None:
    # decided by the name alone: the file does not have to exist
    assert file_kind(tmp_path / "missing.py") == "python"
    assert file_kind(tmp_path / "requirements" / "x.txt") == "requirements"


@pytest.mark.parametrize(
    "first_line, kind",
    [
        ("#!/bin/bash", "shell"),
        ("#!/bin/sh -e", "shell"),
        ("#!/usr/bin/env bash", "shell"),
        ("#!/usr/bin/env -S bash -eu", "shell"),
        ("#! /bin/bash", "shell"),
        ("#!/usr/bin/env python3", None),
        ("#!/usr/bin/perl", None),
        ("echo hi", None),
    ],
)
def test_file_kind_shebang(tmp_path: Path, first_line: str, kind: str | None) -> None:
    (tmp_path / "launch").write_text(first_line + "\necho ok\n")
    assert file_kind(tmp_path / "launch") == kind


def test_shebang_only_checked_without_suffix(tmp_path: Path) -> None:
    (tmp_path / "launch.conf").write_text("#!/bin/bash\n")
    assert file_kind(tmp_path / "launch.conf") is None


def test_discover_reports_kinds(tmp_path: Path) -> None:
    touch(tmp_path, "a.py", "nb.ipynb", "s.sh", "requirements.txt", "pyproject.toml", "Dockerfile", "README.md", "x.txt")
    (tmp_path / "tool").write_text("#!/bin/bash\necho\n")
    (tmp_path / "blob").write_bytes(b"\x00\x01binary")
    cands, errors = run(tmp_path)
    assert errors == []
    assert {c.display: c.kind for c in cands} == {
        "Dockerfile": "dockerfile",
        "README.md": "markdown",
        "a.py": "python",
        "nb.ipynb": "notebook",
        "pyproject.toml": "pyproject",
        "requirements.txt": "requirements",
        "s.sh": "shell",
        "tool": "shell",
    }
    assert shown(cands) == sorted(shown(cands))
    for c in cands:
        assert c.path.is_absolute()
        assert c.path == (tmp_path / c.display).resolve()


# --------------------------------------------------------------------------- skips


def test_default_skips(tmp_path: Path) -> None:
    touch(
        tmp_path,
        "keep.py",
        "pkg/mod.py",
        ".git/hooks/pre-commit.py",
        ".hg/x.py",
        "node_modules/lib/x.py",
        "__pycache__/x.py",
        ".venv/lib/x.py",
        "venv/lib/x.py",
        "myenv/lib/python3.11/site-packages/x.py",
        "env/lib/x.py",
        ".tox/py311/x.py",
        ".mypy_cache/x.py",
        ".pytest_cache/x.py",
        ".ruff_cache/x.py",
        "build/lib/x.py",
        "dist/x.py",
        "pkg.egg-info/x.py",
        "notebooks/.ipynb_checkpoints/nb-checkpoint.ipynb",
        "notebooks/nb.ipynb",
        "lib/site-packages/x.py",
    )
    (tmp_path / "myenv" / "pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    cands, _ = run(tmp_path)
    assert shown(cands) == ["keep.py", "notebooks/nb.ipynb", "pkg/mod.py"]


def test_env_without_pyvenv_cfg_is_walked(tmp_path: Path) -> None:
    touch(tmp_path, "env/config.py")
    cands, _ = run(tmp_path)
    assert shown(cands) == ["env/config.py"]


def test_gitignore_root_and_nested(tmp_path: Path) -> None:
    touch(tmp_path, "a.py", "gen.py", "out/x.py", "sub/b.py", "sub/local.py", "sub/deep/c.py", "sub/deep/keep_me.py", "other/local.py")
    (tmp_path / ".gitignore").write_text("# comment\ngen.py\nout/\n*_me.py\n")
    (tmp_path / "sub" / ".gitignore").write_text("/local.py\n!keep_me.py\n")
    cands, _ = run(tmp_path)
    assert shown(cands) == ["a.py", "other/local.py", "sub/b.py", "sub/deep/c.py", "sub/deep/keep_me.py"]


def test_gitignore_anchored_pattern_in_subdir(tmp_path: Path) -> None:
    touch(tmp_path, "sub/gen/x.py", "gen/y.py")
    (tmp_path / "sub" / ".gitignore").write_text("/gen\n")
    cands, _ = run(tmp_path)
    assert shown(cands) == ["gen/y.py"]


def test_parent_gitignore_up_to_repo_root(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "info").mkdir()
    (repo / ".git" / "info" / "exclude").write_text("secret.py\n")
    touch(repo, "proj/a.py", "proj/b.gen.py", "proj/local_x.py", "proj/skip/s.py", "proj/secret.py", "proj/sub/c.py")
    (repo / ".gitignore").write_text("*.gen.py\nproj/skip/\n")
    (repo / "proj" / ".gitignore").write_text("local_*.py\n")
    # a .gitignore ABOVE the repository root is not honoured
    (tmp_path / ".gitignore").write_text("a.py\n")
    cands, _ = discover(["proj"], cwd=repo)
    assert shown(cands) == ["proj/a.py", "proj/sub/c.py"]
    # same when walking from inside the folder itself
    cands, _ = discover(["."], cwd=repo / "proj")
    assert shown(cands) == ["a.py", "sub/c.py"]


def test_parent_gitignore_ignored_without_repo(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("*.py\n")
    touch(tmp_path, "proj/a.py")
    cands, _ = discover(["proj"], cwd=tmp_path)
    assert shown(cands) == ["proj/a.py"]


def test_explicitly_named_ignored_directory_is_walked(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("scratch/\n")
    touch(tmp_path, "scratch/a.py", "main.py")
    assert shown(run(tmp_path)[0]) == ["main.py"]
    assert shown(discover(["scratch"], cwd=tmp_path)[0]) == ["scratch/a.py"]


def test_explicit_file_taken_even_if_ignored(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("gen.py\nbuild/\n")
    touch(tmp_path, "gen.py", "build/x.py", "a.py", "notes.txt")
    assert shown(run(tmp_path)[0]) == ["a.py"]
    cands, errors = discover(["gen.py", "build/x.py", "notes.txt"], cwd=tmp_path)
    assert errors == []
    assert shown(cands) == ["build/x.py", "gen.py"]


def test_explicit_file_without_kind_is_dropped(tmp_path: Path) -> None:
    touch(tmp_path, "notes.txt")
    assert discover(["notes.txt"], cwd=tmp_path) == ([], [])


# --------------------------------------------------------------------------- --exclude


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    touch(
        tmp_path,
        "src/a.py",
        "src/nb.ipynb",
        "tests/test_a.py",
        "tests/fixtures/f.py",
        "legacy/old.py",
        "legacy/deep/older.py",
        "pkg/legacy/inner.py",
    )
    return tmp_path


def test_exclude_dir_path(tree: Path) -> None:
    cands, _ = run(tree, exclude=["tests/fixtures"])
    assert "tests/fixtures/f.py" not in shown(cands)
    assert "tests/test_a.py" in shown(cands)


def test_exclude_extension_glob(tree: Path) -> None:
    cands, _ = run(tree, exclude=["*.ipynb"])
    assert "src/nb.ipynb" not in shown(cands)
    assert "src/a.py" in shown(cands)


def test_exclude_double_star(tree: Path) -> None:
    cands, _ = run(tree, exclude=["legacy/**"])
    assert shown(cands) == ["pkg/legacy/inner.py", "src/a.py", "src/nb.ipynb", "tests/fixtures/f.py", "tests/test_a.py"]


def test_exclude_component_name(tree: Path) -> None:
    cands, _ = run(tree, exclude=["legacy"])
    assert shown(cands) == ["src/a.py", "src/nb.ipynb", "tests/fixtures/f.py", "tests/test_a.py"]


def test_exclude_fnmatch_on_display_path(tree: Path) -> None:
    cands, _ = run(tree, exclude=["tests/*"])
    assert shown(cands) == [
        "legacy/deep/older.py",
        "legacy/old.py",
        "pkg/legacy/inner.py",
        "src/a.py",
        "src/nb.ipynb",
    ]


def test_exclude_relative_to_walked_root(tree: Path) -> None:
    # run from the parent: the glob also matches paths relative to the walked folder
    cands, _ = discover([tree.name], exclude=["tests/fixtures", "./legacy/"], cwd=tree.parent)
    assert shown(cands) == [f"{tree.name}/{p}" for p in ("pkg/legacy/inner.py", "src/a.py", "src/nb.ipynb", "tests/test_a.py")]


def test_exclude_unanchored_dir_matches_at_any_depth(tree: Path) -> None:
    cands, _ = run(tree, exclude=["legacy/"])
    assert shown(cands) == ["src/a.py", "src/nb.ipynb", "tests/fixtures/f.py", "tests/test_a.py"]


def test_exclude_applies_to_explicit_files(tree: Path) -> None:
    cands, _ = discover(["src/nb.ipynb", "src/a.py"], exclude=["*.ipynb"], cwd=tree)
    assert shown(cands) == ["src/a.py"]


def test_exclude_does_not_match_above_cwd(tmp_path: Path) -> None:
    # a component of the cwd itself must not count
    proj = tmp_path / "build_area" / "legacy"
    touch(proj, "a.py")
    cands, _ = discover(["."], exclude=["legacy", "build_area"], cwd=proj)
    assert shown(cands) == ["a.py"]


# --------------------------------------------------------------------------- symlinks


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinked_dir_not_followed(tmp_path: Path) -> None:
    touch(tmp_path, "real/a.py")
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    cands, _ = run(tmp_path)
    assert shown(cands) == ["real/a.py"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinked_file_outside_root_skipped(tmp_path: Path) -> None:
    root = tmp_path / "root"
    touch(tmp_path, "outside/secret.py", "root/a.py", "root/sub/real.py")
    (root / "out.py").symlink_to(tmp_path / "outside" / "secret.py")
    (root / "in.py").symlink_to(root / "sub" / "real.py")
    (root / "dangling.py").symlink_to(root / "nope.py")
    cands, errors = discover(["."], cwd=root)
    assert errors == []
    # in.py and sub/real.py are one file: processed once, under the real file's name
    assert shown(cands) == ["a.py", "sub/real.py"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinked_file_inside_root_points_at_target(tmp_path: Path) -> None:
    touch(tmp_path, "data/real.py")
    (tmp_path / "data" / ".gitignore").write_text("real.py\n")
    (tmp_path / "alias.py").symlink_to(tmp_path / "data" / "real.py")
    cands, _ = run(tmp_path)
    assert [(c.display, c.path) for c in cands] == [("alias.py", (tmp_path / "data" / "real.py").resolve())]


# --------------------------------------------------------------------------- paths


def test_nonexistent_path_is_an_error(tmp_path: Path) -> None:
    touch(tmp_path, "a.py")
    cands, errors = discover(["a.py", "missing.ipynb", "gone"], cwd=tmp_path)
    assert shown(cands) == ["a.py"]
    assert [(e.path, e.kind, e.status, e.error) for e in errors] == [
        ("gone", "python", "error", "no such file or directory"),
        ("missing.ipynb", "notebook", "error", "no such file or directory"),
    ]


def test_overlapping_paths_deduplicated(tmp_path: Path) -> None:
    touch(tmp_path, "pkg/a.py", "pkg/sub/b.py")
    cands, _ = discover(["pkg", "pkg/sub", "pkg/sub/b.py", ".", str(tmp_path / "pkg" / "a.py")], cwd=tmp_path)
    assert shown(cands) == ["pkg/a.py", "pkg/sub/b.py"]


def test_display_outside_cwd_is_as_given(tmp_path: Path) -> None:
    touch(tmp_path, "proj/a.py", "here/.keep.py")
    cands, _ = discover(["../proj"], cwd=tmp_path / "here")
    assert shown(cands) == ["../proj/a.py"]
    cands, _ = discover([str(tmp_path / "proj")], cwd=tmp_path / "here")
    assert shown(cands) == [(tmp_path / "proj" / "a.py").as_posix()]


def test_display_relative_when_below_cwd(tmp_path: Path) -> None:
    touch(tmp_path, "proj/pkg/a.py")
    cands, _ = discover([str(tmp_path / "proj")], cwd=tmp_path)
    assert shown(cands) == ["proj/pkg/a.py"]
    cands, _ = discover(["./proj/pkg/../pkg"], cwd=tmp_path)
    assert shown(cands) == ["proj/pkg/a.py"]


def test_path_objects_and_default_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    touch(tmp_path, "a.py")
    monkeypatch.chdir(tmp_path)
    cands, _ = discover([Path(".")])
    assert shown(cands) == ["a.py"]


def test_many_files(tmp_path: Path) -> None:
    # (speed is measured by benchmarks/bench_migrate.py, not asserted here)
    for i in range(100):
        d = tmp_path / f"pkg{i}"
        d.mkdir()
        for j in range(60):
            (d / f"m{j}.py").write_text("")
        for j in range(40):
            (d / f"data{j}.json").write_text("")
    (tmp_path / ".gitignore").write_text("*.pyc\nbuild/\n/pkg1/m1.py\n")
    cands, _ = discover(["."], exclude=["*.ipynb", "tests/fixtures"], cwd=tmp_path)
    assert len(cands) == 100 * 60 - 1
    assert "pkg1/m1.py" not in {c.display for c in cands}


def test_only_extensionless_files_and_ignore_files_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    import migrator.discover as mod

    touch(tmp_path, "a.py", "nb.ipynb", "Dockerfile", "requirements.txt", "data.json", "LICENSE")
    (tmp_path / "tool").write_text("#!/bin/sh\n")
    (tmp_path / ".gitignore").write_text("*.log\n")
    opened: list[str] = []

    def spy(file, *a, **kw):
        opened.append(os.path.basename(file))
        return builtins.open(file, *a, **kw)

    monkeypatch.setattr(mod, "open", spy, raising=False)
    cands, _ = run(tmp_path)
    assert shown(cands) == ["Dockerfile", "a.py", "nb.ipynb", "requirements.txt", "tool"]
    assert sorted(opened) == [".gitignore", "LICENSE", "tool"]


def test_an_optimum_neuron_checkout_keeps_only_user_code(tmp_path: Path) -> None:
    """The source and tests of a checkout of optimum-neuron itself are the old stack's own code: left
    out (and named), while its examples/docs are migrated; a project that only has a folder called
    tests/ is walked as usual."""
    checkout = tmp_path / "optimum-neuron"
    for rel in ("optimum/neuron/__init__.py", "optimum/neuron/trainers.py", "tests/test_trainer.py",
                "examples/train.py", "pyproject.toml"):
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text("x = 1\n")
    user = tmp_path / "user"
    (user / "tests").mkdir(parents=True)
    (user / "tests" / "test_train.py").write_text("x = 1\n")
    (user / "pyproject.toml").write_text("")
    skipped: list[str] = []
    cands, _ = discover([str(checkout), str(user)], cwd=tmp_path, skipped=skipped)
    shown = sorted(c.display for c in cands)
    assert shown == ["optimum-neuron/examples/train.py", "optimum-neuron/pyproject.toml",
                     "user/pyproject.toml", "user/tests/test_train.py"]
    assert sorted(skipped) == ["optimum-neuron/optimum/", "optimum-neuron/tests/"]


def test_other_old_stack_checkouts_keep_their_source_and_tests(tmp_path: Path) -> None:
    """A checkout of neuronx-distributed (known by its setup.py's name alone, or by its src/ package) or of
    torch-xla keeps its source and tests (test/ too) as they are; its examples are migrated. A user project whose
    setup.py names itself otherwise, with a src/ and a test/, is walked as usual."""
    nxd = tmp_path / "nxd"
    for rel in ("test/unit_test/test_config.py", "examples/train.py"):
        (nxd / rel).parent.mkdir(parents=True, exist_ok=True)
        (nxd / rel).write_text("x = 1\n")
    (nxd / "setup.py").write_text('from setuptools import setup\nsetup(\n    name="neuronx-distributed",\n)\n')
    src = tmp_path / "src_layout"
    for rel in ("src/neuronx_distributed_inference/__init__.py", "test/test_x.py", "pyproject.toml"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("")
    xla = tmp_path / "xla"
    for rel in ("torch_xla/__init__.py", "test/test_ops.py", "setup.py"):
        (xla / rel).parent.mkdir(parents=True, exist_ok=True)
        (xla / rel).write_text("x = 1\n")
    user = tmp_path / "user"
    for rel in ("src/app/train.py", "test/test_train.py"):
        (user / rel).parent.mkdir(parents=True, exist_ok=True)
        (user / rel).write_text("x = 1\n")
    (user / "setup.py").write_text('setup(name="my-trainer", install_requires=["neuronx-distributed"])\n')
    skipped: list[str] = []
    cands, _ = discover([str(p) for p in (nxd, src, xla, user)], cwd=tmp_path, skipped=skipped)
    shown = sorted(c.display for c in cands)
    assert shown == ["nxd/examples/train.py", "nxd/setup.py", "src_layout/pyproject.toml", "user/setup.py",
                     "user/src/app/train.py", "user/test/test_train.py", "xla/setup.py"]
    assert sorted(skipped) == ["nxd/test/", "src_layout/src/", "src_layout/test/", "xla/test/", "xla/torch_xla/"]


def test_an_optimum_neuron_checkout_keeps_its_developer_guides_as_they_are(tmp_path: Path) -> None:
    """AGENTS.md / CONTRIBUTING.md at the root of a checkout of optimum-neuron describe developing the old-stack
    package itself: left out (and named), also where the checkout is known only by its pyproject's name (a
    partial copy without optimum/); its docs are migrated; a user project's AGENTS.md is migrated, and so is a
    developer guide in a subfolder of the checkout."""
    checkout = tmp_path / "optimum-neuron"
    for rel in ("AGENTS.md", "CONTRIBUTING.md", "docs/guide.md", "docs/AGENTS.md"):
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text("x\n")
    (checkout / "pyproject.toml").write_text('[project]\nname = "Optimum_Neuron"\n')
    user = tmp_path / "user"
    user.mkdir()
    (user / "AGENTS.md").write_text("x\n")
    (user / "pyproject.toml").write_text('[project]\nname = "my-neuron-app"\n')
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "AGENTS.md").write_text("x\n")
    (broken / "pyproject.toml").write_text("[project\n")
    skipped: list[str] = []
    cands, _ = discover([str(checkout), str(user), str(broken)], cwd=tmp_path, skipped=skipped)
    shown = sorted(c.display for c in cands)
    assert shown == ["broken/AGENTS.md", "broken/pyproject.toml", "optimum-neuron/docs/AGENTS.md",
                     "optimum-neuron/docs/guide.md", "optimum-neuron/pyproject.toml", "user/AGENTS.md",
                     "user/pyproject.toml"]
    assert sorted(skipped) == ["optimum-neuron/AGENTS.md", "optimum-neuron/CONTRIBUTING.md"]


def test_the_report_names_the_directories_left_out(tmp_path: Path) -> None:
    import subprocess
    import sys

    for rel in ("optimum/neuron/__init__.py", "tests/test_x.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("from optimum.neuron import NeuronTrainer\n")
    (tmp_path / "setup.py").write_text("from setuptools import setup\n")
    proc = subprocess.run([sys.executable, "-m", "migrator", ".", "--no-progress"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert "Not migrated: optimum/, tests/ (the source, tests and developer guides of an old-stack package's own checkout" in proc.stdout
    assert "1 file scanned" in proc.stdout and proc.returncode == 0, proc.stdout
