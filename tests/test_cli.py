"""End-to-end tests of the ``neuron-migrate`` command line (CONTRACT.md).

Every test builds a small project in ``tmp_path``, runs the CLI in-process with
``typer.testing.CliRunner`` from inside that directory (so report paths are relative),
and asserts on behaviour: exit codes, the bytes of the files, the parsed reports.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import json  # noqa: E402
import shutil  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import migrator  # noqa: E402
import migrator.cli  # noqa: E402
from migrator.cli import app  # noqa: E402
from migrator.discover import Candidate, discover  # noqa: E402

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")

# --------------------------------------------------------------------------- sources

# The tests run on the fixed rule set of tests/cli_rules.py (the rename table, NM900, NM901,
# NM990), so that argument-level rules added for these names do not change their expectations.
TRAIN_OLD = (
    "from optimum.neuron import NeuronTrainer, NeuronHfArgumentParser\n"
    "args = NeuronHfArgumentParser((Args,)).parse_args_into_dataclasses()\n"
    "trainer = NeuronTrainer(model=model, args=args)\n"
)
TRAIN_NEW = (
    "from transformers import Trainer, HfArgumentParser\n"
    "args = HfArgumentParser((Args,)).parse_args_into_dataclasses()\n"
    "trainer = Trainer(model=model, args=args)\n"
)
# NM200 renames it, NM901 leaves a marker for zero_1
ZERO1_OLD = (
    "from optimum.neuron import NeuronAccelerator\n"
    'args = NeuronAccelerator(mixed_precision="bf16", zero_1=True)\n'
)
# NM900 only (a marker, nothing renamed)
CACHE_OLD = "from optimum.neuron.cache import synchronize_hub_cache\nsynchronize_hub_cache()\n"
# already migrated, a marker left in it
MIGRATED_WITH_MARKER = (
    "from accelerate import Accelerator\n"
    "# TODO(neuron-migrate NM901): remove or move the Neuron-only arguments zero_1\n"
    'args = Accelerator(mixed_precision="bf16", zero_1=True)\n'
)
CLEAN = "import torch\n\nx = torch.ones(2)\n"
MARKER = "TODO(neuron-migrate "

from tests import cli_rules  # noqa: E402

RULE_IDS = tuple(r.id for r in cli_rules.rules())
CORE_RULE_IDS = cli_rules.CORE
KINDS = {"python", "notebook", "shell", "requirements", "pyproject", "dockerfile", "markdown"}
STATUSES = {"changed", "unchanged", "error", "skipped"}


# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def _fixed_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the CLI on the fixed rule set of tests/cli_rules.py (also in spawned workers)."""
    monkeypatch.setenv("NEURON_MIGRATE_RULES", "tests.cli_rules:rules")


@pytest.fixture
def proj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project directory that is also the current directory."""
    root = tmp_path / "proj"
    root.mkdir()
    monkeypatch.chdir(root)
    return root


def cli(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def put(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_bytes(content.encode("utf-8"))


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def report(*args: str) -> tuple[int, dict]:
    res = cli(*args, "--format", "json")
    return res.exit_code, json.loads(res.stdout)


def by_path(rep: dict) -> dict[str, dict]:
    return {f["path"]: f for f in rep["files"]}


def notebook(*sources: str, outputs: bool = True) -> str:
    cells = []
    for i, src in enumerate(sources):
        lines = src.splitlines(keepends=True)
        cells.append(
            {
                "cell_type": "code",
                "execution_count": i + 1,
                "id": f"cell-{i}",
                "metadata": {"tags": ["keep-me"], "scrolled": True},
                "outputs": (
                    [{"name": "stdout", "output_type": "stream", "text": ["hello [1, 2]\n"]}] if outputs else []
                ),
                "source": lines,
            }
        )
    cells.append({"cell_type": "markdown", "id": "md", "metadata": {}, "source": ["# Title\n", "text"]})
    nb = {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python", "version": "3.11.4"},
            "custom": {"a": [1, 2, 3]},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


# =========================================================================== 1. exit codes


def test_dry_run_pending_change_exits_1_and_writes_nothing(proj: Path) -> None:
    put(proj, {"train.py": TRAIN_OLD, "clean.py": CLEAN})
    before = snapshot(proj)
    res = cli(".")
    assert res.exit_code == 1
    assert snapshot(proj) == before


def test_clean_project_exits_0(proj: Path) -> None:
    put(proj, {"pkg/__init__.py": "", "pkg/mod.py": CLEAN, "README.md": "# hi\n\n```python\nimport torch\n```\n"})
    before = snapshot(proj)
    res = cli(".")
    assert res.exit_code == 0, res.output
    assert snapshot(proj) == before
    code, rep = report(".")
    assert code == 0
    assert {f["status"] for f in rep["files"]} == {"unchanged"}
    assert "pkg/__init__.py" in by_path(rep)


def test_write_without_markers_exits_0_and_rewrites(proj: Path) -> None:
    put(proj, {"train.py": TRAIN_OLD, "clean.py": CLEAN})
    res = cli(".", "--write")
    assert res.exit_code == 0, res.output
    assert (proj / "train.py").read_text() == TRAIN_NEW
    assert (proj / "clean.py").read_text() == CLEAN
    assert MARKER not in (proj / "train.py").read_text()


def test_write_with_markers_left_exits_1(proj: Path) -> None:
    put(proj, {"args.py": ZERO1_OLD})
    res = cli(".", "--write")
    assert res.exit_code == 1
    text = (proj / "args.py").read_text()
    assert "from accelerate import Accelerator" in text
    assert "# TODO(neuron-migrate NM901):" in text
    assert "optimum" not in text.split("TODO")[0]


def test_check_pending_exits_1_and_writes_nothing(proj: Path) -> None:
    put(proj, {"train.py": TRAIN_OLD})
    res = cli(".", "--check")
    assert res.exit_code == 1
    assert (proj / "train.py").read_text() == TRAIN_OLD
    assert "NM200" in res.stdout


def test_check_after_write_without_markers_exits_0(proj: Path) -> None:
    put(proj, {"train.py": TRAIN_OLD})
    assert cli(".", "--write").exit_code == 0
    res = cli(".", "--check")
    assert res.exit_code == 0, res.output
    assert (proj / "train.py").read_text() == TRAIN_NEW


def test_check_counts_a_remaining_marker(proj: Path) -> None:
    put(proj, {"args.py": MIGRATED_WITH_MARKER})
    res = cli(".", "--check")
    assert res.exit_code == 1
    assert (proj / "args.py").read_text() == MIGRATED_WITH_MARKER
    code, rep = report(".", "--check")
    assert code == 1
    f = by_path(rep)["args.py"]
    assert f["status"] == "unchanged"
    assert [(x["rule"], x["line"], x["fix"]) for x in f["findings"]] == [("NM901", 2, "manual")]
    assert rep["summary"]["manual_actions"] == 1


def test_syntax_error_exits_2_others_still_written(proj: Path) -> None:
    broken = "from optimum.neuron import NeuronTrainer\ndef f(:\n    pass\n"
    put(proj, {"a_broken.py": broken, "z_train.py": TRAIN_OLD})
    res = cli(".", "--write")
    assert res.exit_code == 2
    assert (proj / "a_broken.py").read_text() == broken
    assert (proj / "z_train.py").read_text() == TRAIN_NEW
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("a_broken.py: error: syntax error")]
    assert len(lines) == 1


def test_unknown_select_exits_2(proj: Path) -> None:
    put(proj, {"train.py": TRAIN_OLD})
    res = cli(".", "--select", "NOPE", "--write")
    assert res.exit_code == 2
    assert "NOPE" in res.stderr
    assert (proj / "train.py").read_text() == TRAIN_OLD


def test_write_and_check_together_exit_2(proj: Path) -> None:
    put(proj, {"train.py": TRAIN_OLD})
    res = cli(".", "--write", "--check")
    assert res.exit_code == 2
    assert "--write" in res.stderr and "--check" in res.stderr
    assert (proj / "train.py").read_text() == TRAIN_OLD


def test_no_arguments_prints_usage_and_exits_2() -> None:
    res = cli()
    assert res.exit_code == 2
    assert "Usage" in res.output


def test_missing_path_is_an_error(proj: Path) -> None:
    put(proj, {"train.py": TRAIN_OLD})
    code, rep = report("train.py", "nope.py")
    assert code == 2
    assert by_path(rep)["nope.py"]["status"] == "error"
    assert by_path(rep)["train.py"]["status"] == "changed"


# =========================================================================== 2. formats

JSON_SOURCE = (
    "from optimum.neuron.cache import synchronize_hub_cache\n"
    "from optimum.neuron import NeuronTrainer\n"
    "x: list[int] = []\n"
    "t = NeuronTrainer(model=m)\n"
)


def test_json_report_matches_contract_shape(proj: Path) -> None:
    put(
        proj,
        {
            "mixed.py": JSON_SOURCE,
            "args.py": ZERO1_OLD,
            "clean.py": CLEAN,
            "broken.py": "from optimum.neuron import NeuronTrainer\ndef f(:\n",
            "nb.ipynb": notebook("import torch", "from optimum.neuron import NeuronTrainer\nt = NeuronTrainer(model=m)"),
        },
    )
    res = cli(".", "--format", "json")
    assert res.exit_code == 2
    rep = json.loads(res.stdout)
    assert list(rep) == ["tool", "version", "files", "summary"]
    assert rep["tool"] == "neuron-migrate"
    assert rep["version"] == migrator.__version__
    assert [f["path"] for f in rep["files"]] == sorted(f["path"] for f in rep["files"])
    for f in rep["files"]:
        assert list(f) == ["path", "kind", "status", "error", "findings"]
        assert f["kind"] in KINDS
        assert f["status"] in STATUSES
        assert (f["error"] is None) == (f["status"] not in ("error", "skipped"))
        assert isinstance(f["error"], (str, type(None)))
        for x in f["findings"]:
            # the contract's fields, in order; an added field: a marker's long form (Rule.markers)
            assert list(x) in (["rule", "line", "column", "cell", "message", "fix"],
                               ["rule", "line", "column", "cell", "message", "fix", "detail"])
            if "detail" in x:
                assert x["fix"] == "manual" and isinstance(x["detail"], str) and x["detail"]
            assert x["rule"] in RULE_IDS
            assert isinstance(x["line"], int) and x["line"] >= 1
            assert isinstance(x["column"], int) and x["column"] >= 1
            assert x["cell"] is None or (isinstance(x["cell"], int) and x["cell"] >= 0)
            assert isinstance(x["message"], str) and x["message"]
            assert x["fix"] in ("applied", "manual")
    s = rep["summary"]
    assert list(s) == ["files_scanned", "files_changed", "files_error", "fixes_applied", "manual_actions", "seconds"]
    for key in list(s)[:-1]:
        assert type(s[key]) is int
    assert isinstance(s["seconds"], float) and s["seconds"] >= 0

    files = by_path(rep)
    assert set(files) == {"mixed.py", "args.py", "clean.py", "broken.py", "nb.ipynb"}
    assert s["files_scanned"] == 5
    assert s["files_changed"] == 3
    assert s["files_error"] == 1
    assert s["fixes_applied"] == sum(x["fix"] == "applied" for f in rep["files"] for x in f["findings"])
    assert s["manual_actions"] == sum(x["fix"] == "manual" for f in rep["files"] for x in f["findings"])
    assert files["clean.py"]["status"] == "unchanged" and files["clean.py"]["findings"] == []
    assert files["broken.py"]["status"] == "error" and "syntax error" in files["broken.py"]["error"]
    assert files["broken.py"]["findings"] == []
    assert files["nb.ipynb"]["kind"] == "notebook"

    # line/column are 1-based and point into the ORIGINAL file even though a marker line
    # was inserted above them in the new text
    orig = JSON_SOURCE.splitlines()
    mixed = files["mixed.py"]["findings"]
    rules = {x["rule"] for x in mixed}
    assert rules == {"NM200", "NM900"}
    nm200 = [x for x in mixed if x["rule"] == "NM200"]
    assert [(x["line"], x["column"], x["cell"], x["fix"]) for x in nm200] == [(4, 5, None, "applied")]
    assert orig[3][4:].startswith("NeuronTrainer")
    nm900 = [x for x in mixed if x["rule"] == "NM900"]
    assert len(nm900) == 1 and nm900[0]["fix"] == "manual" and nm900[0]["line"] == 1
    assert orig[0][nm900[0]["column"] - 1 :].startswith("synchronize_hub_cache")
    args = files["args.py"]["findings"]
    assert {(x["rule"], x["line"], x["fix"]) for x in args} == {("NM200", 2, "applied"), ("NM901", 2, "manual")}

    # notebook: 0-based cell index, line within the cell
    nb = files["nb.ipynb"]["findings"]
    assert [(x["rule"], x["cell"], x["line"], x["column"]) for x in nb] == [("NM200", 1, 2, 5)]


def test_sarif_report(proj: Path) -> None:
    put(proj, {"args.py": ZERO1_OLD, "train.py": TRAIN_OLD})
    res = cli(".", "--format", "sarif")
    assert res.exit_code == 1
    log = json.loads(res.stdout)
    assert log["version"] == "2.1.0"
    results = log["runs"][0]["results"]
    assert len(results) == 4
    for r in results:
        assert r["ruleId"] in RULE_IDS
        loc = r["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uri"] in ("args.py", "train.py")
        assert loc["region"]["startLine"] >= 1
    assert {(r["ruleId"], r["level"]) for r in results} == {("NM200", "note"), ("NM901", "warning")}
    driver_ids = [d["id"] for d in log["runs"][0]["tool"]["driver"]["rules"]]
    assert driver_ids == ["NM200", "NM901"]


def test_markdown_report(proj: Path) -> None:
    put(proj, {"args.py": ZERO1_OLD, "train.py": TRAIN_OLD})
    res = cli(".", "--format", "markdown")
    assert res.exit_code == 1
    md = res.stdout
    assert "| Files scanned | Files changed | Errors | Fixes applied | Manual actions |" in md
    assert "| 2 | 2 | 0 | 3 | 1 |" in md
    checklist = [ln for ln in md.splitlines() if ln.startswith("  - [ ] ")]
    assert len(checklist) == 1
    assert "args.py:2" in checklist[0] and "- **NM901**" in md.split(checklist[0])[0].splitlines()[-1]


def test_github_annotations(proj: Path) -> None:
    put(proj, {"args.py": ZERO1_OLD, "broken.py": "import optimum.neuron\ndef f(:\n"})
    res = cli(".", "--format", "github")
    assert res.exit_code == 2
    lines = res.stdout.splitlines()
    assert any(ln.startswith("::warning file=args.py,line=2,") and "title=NM901::" in ln for ln in lines)
    assert any(ln.startswith("::notice file=args.py,line=2,") and "title=NM200::" in ln for ln in lines)
    assert any(ln.startswith("::error file=broken.py::") for ln in lines)
    assert lines[-1].startswith("::notice title=neuron-migrate::")
    assert all(ln.startswith("::") for ln in lines)


def test_output_file_gets_the_report_not_stdout(proj: Path) -> None:
    put(proj, {"args.py": ZERO1_OLD})
    res = cli(".", "--format", "json", "--output", "report.json")
    assert res.exit_code == 1
    assert res.stdout == ""
    rep = json.loads((proj / "report.json").read_text())
    assert rep["summary"]["manual_actions"] == 1
    assert (proj / "args.py").read_text() == ZERO1_OLD
    res = cli("args.py", "--output", "report.txt")
    assert res.stdout == ""
    assert "NM901 [manual]" in (proj / "report.txt").read_text()


def test_text_diff_keeps_square_brackets(proj: Path) -> None:
    put(proj, {"mixed.py": JSON_SOURCE})
    res = cli(".")
    assert res.exit_code == 1
    out = res.stdout
    assert "--- a/mixed.py\n+++ b/mixed.py\n" in out
    assert "\n x: list[int] = []\n" in out  # context line, brackets intact
    marker_lines = [ln for ln in out.splitlines() if ln.startswith("+# TODO(neuron-migrate NM900): ")]
    assert len(marker_lines) == 1
    assert "-from optimum.neuron import NeuronTrainer\n" in out
    assert "NM200 [applied]" in out and "NM900 [manual]" in out


# =========================================================================== 3. --diff/--no-diff


def test_diff_defaults(proj: Path) -> None:
    put(proj, {"train.py": TRAIN_OLD})
    header = "--- a/train.py"
    assert header in cli(".").stdout
    assert header not in cli(".", "--no-diff").stdout
    assert header in cli(".", "--check", "--diff").stdout
    res = cli(".", "--write")
    assert res.exit_code == 0 and header not in res.stdout and "NM200" in res.stdout
    put(proj, {"train.py": TRAIN_OLD})
    res = cli(".", "--write", "--diff")
    assert res.exit_code == 0 and header in res.stdout
    assert (proj / "train.py").read_text() == TRAIN_NEW


# =========================================================================== 4. selection and config


def test_select_and_ignore_prefixes(proj: Path) -> None:
    files = {"args.py": ZERO1_OLD, "cache.py": CACHE_OLD}
    for opts in (["--select", "NM2"], ["--ignore", "NM9"], ["--select", "nm2,NM1"]):
        put(proj, files)
        res = cli(".", "--write", *opts)
        assert res.exit_code == 0, (opts, res.output)
        args = (proj / "args.py").read_text()
        assert args == ZERO1_OLD.replace("from optimum.neuron import", "from accelerate import").replace(
            "NeuronAccelerator", "Accelerator"
        )
        assert (proj / "cache.py").read_text() == CACHE_OLD
    # only the manual-action family: markers, no renames
    put(proj, files)
    res = cli(".", "--write", "--select", "NM9")
    assert res.exit_code == 1
    args = (proj / "args.py").read_text()
    assert "# TODO(neuron-migrate NM901):" in args and "NeuronAccelerator(" in args
    assert "from accelerate" not in args
    assert "# TODO(neuron-migrate NM900):" in (proj / "cache.py").read_text()
    # no NM1xx code here: nothing to do
    put(proj, files)
    assert cli(".", "--select", "NM1").exit_code == 0


def test_pyproject_config_honoured_and_cli_wins(proj: Path) -> None:
    put(
        proj,
        {
            "pyproject.toml": '[project]\nname = "x"\n\n[tool.neuron-migrate]\nselect = ["NM2", "NM9"]\n'
            'ignore = "NM901"\nexclude = ["legacy/**"]\n',
            "args.py": ZERO1_OLD,
            "cache.py": CACHE_OLD,
            "legacy/old.py": TRAIN_OLD,
        },
    )
    code, rep = report(".")
    files = by_path(rep)
    assert "legacy/old.py" not in files
    assert [x["rule"] for x in files["args.py"]["findings"]] == ["NM200"]  # NM901 ignored
    assert [x["rule"] for x in files["cache.py"]["findings"]] == ["NM900"]
    assert code == 1
    # command line wins: --select replaces the configured select, --ignore the configured ignore
    code, rep = report(".", "--select", "NM901", "--ignore", "NM900")
    files = by_path(rep)
    assert [x["rule"] for x in files["args.py"]["findings"]] == ["NM901"]
    assert files["cache.py"]["findings"] == []
    assert "legacy/old.py" not in files
    # --write with the config: args.py renamed without a marker, legacy untouched
    res = cli(".", "--write")
    assert res.exit_code == 1  # the NM900 marker in cache.py
    assert MARKER not in (proj / "args.py").read_text()
    assert "from accelerate import Accelerator" in (proj / "args.py").read_text()
    assert (proj / "legacy/old.py").read_text() == TRAIN_OLD


def test_exclude_option_and_default_skips(proj: Path) -> None:
    put(
        proj,
        {
            "a.py": TRAIN_OLD,
            "legacy/b.py": TRAIN_OLD,
            ".venv/lib/c.py": TRAIN_OLD,
            "node_modules/d.py": TRAIN_OLD,
            "gen/e.py": TRAIN_OLD,
            ".gitignore": "gen/\n",
        },
    )
    code, rep = report(".", "--exclude", "legacy")
    assert code == 1
    assert list(by_path(rep)) == ["a.py"]


def test_invalid_pyproject_config_exits_2(proj: Path) -> None:
    put(proj, {"pyproject.toml": "[tool.neuron-migrate]\nselect = 3\n", "train.py": TRAIN_OLD})
    res = cli(".", "--write")
    assert res.exit_code == 2
    assert "pyproject.toml" in res.stderr and "select" in res.stderr
    assert (proj / "train.py").read_text() == TRAIN_OLD


# =========================================================================== 5. safe writes


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=a@b", "-c", "user.name=t", "-c", "commit.gpgsign=false", *args],
        cwd=root,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@needs_git
def test_write_refuses_dirty_tracked_file(proj: Path) -> None:
    put(proj, {"dirty.py": TRAIN_OLD, "clean.py": TRAIN_OLD})
    git(proj, "init", "-q")
    git(proj, "add", ".")
    git(proj, "commit", "-qm", "init")
    edited = TRAIN_OLD + "# local edit\n"
    put(proj, {"dirty.py": edited})

    res = cli(".", "--write")
    assert res.exit_code == 2
    assert (proj / "dirty.py").read_text() == edited
    assert (proj / "clean.py").read_text() == TRAIN_NEW
    refusal = [ln for ln in res.stdout.splitlines() if ln.startswith("dirty.py: error:")]
    assert len(refusal) == 1 and "uncommitted changes" in refusal[0]

    put(proj, {"clean.py": TRAIN_OLD})
    git(proj, "commit", "-qam", "again")  # both committed again, dirty.py with the edit
    put(proj, {"dirty.py": edited + "# more\n"})
    code, rep = report(".", "--write")
    assert code == 2
    files = by_path(rep)
    assert files["dirty.py"]["status"] == "error"
    assert files["clean.py"]["status"] == "changed"
    # what was reported as applied is what was written
    assert rep["summary"]["files_changed"] == 1
    assert rep["summary"]["fixes_applied"] == len(files["clean.py"]["findings"]) == 2

    res = cli(".", "--write", "--allow-dirty")
    assert res.exit_code == 0, res.output
    assert (proj / "dirty.py").read_text() == TRAIN_NEW + "# local edit\n# more\n"


def test_write_failure_is_reported(proj: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    put(proj, {"a.py": TRAIN_OLD, "b.py": TRAIN_OLD})
    real = migrator.cli.atomic_write

    def flaky(path, data):
        if Path(path).name == "a.py":
            raise OSError(28, "No space left on device")
        real(path, data)

    monkeypatch.setattr(migrator.cli, "atomic_write", flaky)
    code, rep = report(".", "--write")
    assert code == 2
    files = by_path(rep)
    assert files["a.py"]["status"] == "error" and "No space left" in files["a.py"]["error"]
    assert files["a.py"]["findings"] == []
    assert rep["summary"]["files_changed"] == 1 and rep["summary"]["fixes_applied"] == 2
    assert (proj / "a.py").read_text() == TRAIN_OLD
    assert (proj / "b.py").read_text() == TRAIN_NEW


@needs_git
def test_write_refuses_untracked_file_in_repo(proj: Path) -> None:
    put(proj, {"README.md": "hi\n"})
    git(proj, "init", "-q")
    git(proj, "add", ".")
    git(proj, "commit", "-qm", "init")
    put(proj, {"new.py": TRAIN_OLD})
    assert cli(".", "--write").exit_code == 2
    assert (proj / "new.py").read_text() == TRAIN_OLD


def test_write_outside_git_counts_as_clean_and_keeps_mode(proj: Path) -> None:
    put(proj, {"run.py": "#!/usr/bin/env python\n" + TRAIN_OLD})
    os.chmod(proj / "run.py", 0o755)
    res = cli("run.py", "--write")
    assert res.exit_code == 0, res.output
    assert (proj / "run.py").read_text() == "#!/usr/bin/env python\n" + TRAIN_NEW
    assert stat.S_IMODE((proj / "run.py").stat().st_mode) == 0o755
    assert sorted(os.listdir(proj)) == ["run.py"]  # no temporary file left


# =========================================================================== 6. bad input


def _one_error_line(res, name: str) -> str:
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(f"{name}: ")]
    assert len(lines) == 1, res.stdout
    return lines[0]


@pytest.mark.parametrize(
    "name, content, reason",
    [
        ("py2.py", b'from optimum.neuron import NeuronTrainer\nprint "hi"\n', "Python 2"),
        ("latin.py", b"from optimum.neuron import NeuronTrainer\n# caf\xe9\n", "cannot decode"),
        ("x.py", b"\x7fELF\x00\x00\x01optimum.neuron\x00\xff\xfe", "binary"),
        ("bad.ipynb", b'{"cells": [ optimum.neuron ', "invalid notebook"),
        ("syntax.py", b"from optimum.neuron import NeuronTrainer\nclass :\n", "syntax error"),
    ],
)
def test_bad_file_is_reported_and_others_processed(proj: Path, name: str, content: bytes, reason: str) -> None:
    put(proj, {name: content, "train.py": TRAIN_OLD})
    res = cli(".", "--write")
    assert res.exit_code == 2
    assert (proj / name).read_bytes() == content
    assert (proj / "train.py").read_text() == TRAIN_NEW
    line = _one_error_line(res, name)
    assert line.startswith(f"{name}: error: ") and reason in line
    code, rep = report(".", "--check")
    assert code == 2
    assert by_path(rep)[name]["status"] == "error" and reason in by_path(rep)[name]["error"]


def test_unreadable_file(proj: Path) -> None:
    put(proj, {"secret.py": TRAIN_OLD, "train.py": TRAIN_OLD})
    os.chmod(proj / "secret.py", 0)
    try:
        if os.access(proj / "secret.py", os.R_OK):
            pytest.skip("running as root: chmod 000 does not make the file unreadable")
        res = cli(".", "--write")
        assert res.exit_code == 2
        assert "permission denied" in _one_error_line(res, "secret.py")
        assert (proj / "train.py").read_text() == TRAIN_NEW
    finally:
        os.chmod(proj / "secret.py", 0o644)
    assert (proj / "secret.py").read_text() == TRAIN_OLD


def test_unreadable_file_simulated(proj: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same as above, also when running as root: reading the file raises PermissionError."""
    put(proj, {"secret.py": TRAIN_OLD, "train.py": TRAIN_OLD})
    real_read = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.name == "secret.py":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    res = cli(".", "--write")
    assert res.exit_code == 2
    assert "permission denied" in _one_error_line(res, "secret.py")
    monkeypatch.undo()
    assert (proj / "secret.py").read_text() == TRAIN_OLD
    assert (proj / "train.py").read_text() == TRAIN_NEW


def test_file_vanishing_after_discovery(proj: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    put(proj, {"gone.py": TRAIN_OLD, "train.py": TRAIN_OLD})
    real_discover = discover

    def discover_then_delete(paths, excludes, **kw):
        cands, errors = real_discover(paths, excludes, **kw)
        assert any(c.display == "gone.py" for c in cands)
        (proj / "gone.py").unlink()
        return cands, errors

    monkeypatch.setattr(migrator.cli, "discover", discover_then_delete)
    res = cli(".", "--write")
    assert res.exit_code == 2
    assert "vanished" in _one_error_line(res, "gone.py")
    assert not (proj / "gone.py").exists()
    assert (proj / "train.py").read_text() == TRAIN_NEW


def test_vanished_candidate(proj: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    put(proj, {"train.py": TRAIN_OLD})
    ghost = Candidate(path=proj / "ghost.py", display="ghost.py", kind="python")
    real_discover = discover
    monkeypatch.setattr(
        migrator.cli, "discover", lambda paths, excludes, **kw: ([ghost, *real_discover(paths, excludes, **kw)[0]], [])
    )
    code, rep = report(".", "--write")
    assert code == 2
    assert by_path(rep)["ghost.py"]["status"] == "error"
    assert "vanished" in by_path(rep)["ghost.py"]["error"]
    assert (proj / "train.py").read_text() == TRAIN_NEW


def test_huge_file_is_skipped(proj: Path) -> None:
    huge = b"from optimum.neuron import NeuronTrainer\n" + b"# padding padding padding\n" * 210_000
    assert len(huge) > 5 * 1024 * 1024
    put(proj, {"huge.py": huge, "train.py": TRAIN_OLD})
    res = cli(".", "--write")
    assert res.exit_code == 2
    line = _one_error_line(res, "huge.py")
    assert line.startswith("huge.py: skipped: ") and "5 MB" in line
    assert (proj / "huge.py").read_bytes() == huge
    assert (proj / "train.py").read_text() == TRAIN_NEW
    code, rep = report("huge.py")
    assert code == 2
    assert by_path(rep)["huge.py"]["status"] == "skipped"
    assert "5 MB" in by_path(rep)["huge.py"]["error"]


def test_empty_init_is_fine(proj: Path) -> None:
    put(proj, {"pkg/__init__.py": "", "pkg/empty.py": b"", "pkg/m.py": CLEAN})
    assert cli(".").exit_code == 0
    assert cli(".", "--write").exit_code == 0
    assert (proj / "pkg/__init__.py").read_bytes() == b""


def test_pep263_latin1_file_round_trips(proj: Path) -> None:
    src = (
        "# -*- coding: latin-1 -*-\n"
        "# café crème\n"
        "from optimum.neuron import NeuronTrainer\n"
        "t = NeuronTrainer(model=m)  # naïve\n"
    ).encode("latin-1")
    put(proj, {"lat.py": src})
    res = cli(".", "--write")
    assert res.exit_code == 0, res.output
    data = (proj / "lat.py").read_bytes()
    expected = (
        "# -*- coding: latin-1 -*-\n"
        "# café crème\n"
        "from transformers import Trainer\n"
        "t = Trainer(model=m)  # naïve\n"
    ).encode("latin-1")
    assert data == expected
    assert b"\xc3" not in data  # not re-encoded as UTF-8


def test_notebook_cell_with_coding_cookie(proj: Path) -> None:
    src = notebook("# -*- coding: latin-1 -*-\n# café\nfrom optimum.neuron import NeuronTrainer\nt = NeuronTrainer(model=m)")
    put(proj, {"nb.ipynb": src})
    res = cli(".", "--write")
    assert res.exit_code == 0, res.output
    nb = json.loads((proj / "nb.ipynb").read_text(encoding="utf-8"))
    assert "".join(nb["cells"][0]["source"]) == (
        "# -*- coding: latin-1 -*-\n# café\nfrom transformers import Trainer\nt = Trainer(model=m)"
    )


# =========================================================================== 7. round trip


def test_unchanged_notebook_is_byte_identical(proj: Path) -> None:
    # mentions the old stack (so it is parsed) but nothing to change
    src = notebook('print("optimum.neuron is gone")\nx = [1, 2]', "import torch")
    raw = src.replace("\n", "\r\n").encode()  # odd formatting is kept too
    put(proj, {"nb.ipynb": raw})
    code, rep = report(".", "--write")
    assert code == 0
    assert by_path(rep)["nb.ipynb"]["status"] == "unchanged"
    assert (proj / "nb.ipynb").read_bytes() == raw


def test_changed_notebook_keeps_outputs_and_metadata(proj: Path) -> None:
    src = notebook("import torch", "from optimum.neuron import NeuronTrainer\nt = NeuronTrainer(model=m)")
    put(proj, {"nb.ipynb": src})
    assert cli(".", "--write").exit_code == 0
    old, new = json.loads(src), json.loads((proj / "nb.ipynb").read_text())
    assert new["metadata"] == old["metadata"]
    assert new["nbformat"] == old["nbformat"] and new["nbformat_minor"] == old["nbformat_minor"]
    assert len(new["cells"]) == len(old["cells"])
    for a, b in zip(old["cells"], new["cells"]):
        assert {k: v for k, v in a.items() if k != "source"} == {k: v for k, v in b.items() if k != "source"}
    assert new["cells"][0]["source"] == old["cells"][0]["source"]
    assert "".join(new["cells"][1]["source"]) == "from transformers import Trainer\nt = Trainer(model=m)"
    # the file keeps its JSON layout: only the changed source lines differ
    old_lines, new_lines = src.splitlines(), (proj / "nb.ipynb").read_text().splitlines()
    assert len(old_lines) == len(new_lines)
    assert sum(a != b for a, b in zip(old_lines, new_lines)) == 2


def test_crlf_and_bom_are_kept(proj: Path) -> None:
    src = (
        b"\xef\xbb\xbf# header\r\n"
        b"from optimum.neuron.cache import synchronize_hub_cache\r\n"
        b"from optimum.neuron import NeuronTrainer\r\n"
        b"x = 1\r\n"
        b"t = NeuronTrainer(model=m)\r\n"
    )
    put(proj, {"w.py": src})
    res = cli(".", "--write")
    assert res.exit_code == 1  # NM900 marker
    data = (proj / "w.py").read_bytes()
    assert data.startswith(b"\xef\xbb\xbf# header\r\n")
    assert data.count(b"\xef\xbb\xbf") == 1
    assert b"\n" not in data.replace(b"\r\n", b"")  # every line ending is CRLF
    lines = data[3:].split(b"\r\n")
    assert b"from transformers import Trainer" in lines
    assert b"t = Trainer(model=m)" in lines
    assert b"x = 1" in lines
    assert sum(ln.startswith(b"# TODO(neuron-migrate NM900): ") for ln in lines) == 1
    assert data.endswith(b"\r\n")


def test_no_final_newline_stays_without(proj: Path) -> None:
    put(proj, {"n.py": "from optimum.neuron import NeuronTrainer\nt = NeuronTrainer(model=m)"})
    assert cli(".", "--write").exit_code == 0
    assert (proj / "n.py").read_bytes() == b"from transformers import Trainer\nt = Trainer(model=m)"


# =========================================================================== 8. markers


def test_second_write_is_idempotent_and_reports_markers(proj: Path) -> None:
    put(proj, {"args.py": ZERO1_OLD, "cache.py": CACHE_OLD, "train.py": TRAIN_OLD})
    assert cli(".", "--write").exit_code == 1
    first = snapshot(proj)
    assert first["args.py"].count(b"TODO(neuron-migrate") == 1
    assert first["cache.py"].count(b"TODO(neuron-migrate") == 1
    code, rep = report(".", "--write")
    assert code == 1
    assert snapshot(proj) == first
    assert rep["summary"]["files_changed"] == 0
    assert rep["summary"]["manual_actions"] == 2
    manual = sorted((f["path"], x["rule"]) for f in rep["files"] for x in f["findings"] if x["fix"] == "manual")
    assert manual == [("args.py", "NM901"), ("cache.py", "NM900")]
    # a third run with --check agrees
    assert cli(".", "--check").exit_code == 1


def test_marker_from_a_partial_run_is_not_duplicated(proj: Path) -> None:
    put(proj, {"args.py": ZERO1_OLD})
    assert cli(".", "--write", "--select", "NM9").exit_code == 1
    assert (proj / "args.py").read_text().count(MARKER) == 1
    code, rep = report(".", "--write")
    assert code == 1
    text = (proj / "args.py").read_text()
    assert text.count(MARKER) == 1
    assert text.startswith("from accelerate import Accelerator\n# TODO(neuron-migrate NM901): ")
    assert sorted((x["rule"], x["fix"]) for x in by_path(rep)["args.py"]["findings"]) == [
        ("NM200", "applied"),
        ("NM901", "manual"),
    ]


def test_notebook_and_markdown_markers_are_idempotent(proj: Path) -> None:
    put(
        proj,
        {
            "nb.ipynb": notebook(ZERO1_OLD.rstrip("\n")),
            "doc.md": "# Doc\n\n```python\n" + ZERO1_OLD + "```\n",
        },
    )
    code, rep = report(".", "--write")
    assert code == 1 and rep["summary"]["files_changed"] == 2
    first = snapshot(proj)
    assert first["doc.md"].count(b"TODO(neuron-migrate NM901)") == 1
    assert first["nb.ipynb"].count(b"TODO(neuron-migrate NM901)") == 1
    code, rep = report(".", "--write")
    assert code == 1
    assert rep["summary"]["files_changed"] == 0 and rep["summary"]["manual_actions"] == 2
    assert snapshot(proj) == first


def test_ignore_comment_leaves_line_alone(proj: Path) -> None:
    src = (
        "from optimum.neuron import NeuronTrainer  # neuron-migrate: ignore\n"
        "t = NeuronTrainer(model=m)  # neuron-migrate: ignore\n"
    )
    put(proj, {"ig.py": src})
    code, rep = report(".", "--write")
    assert code == 0
    assert (proj / "ig.py").read_text() == src
    assert by_path(rep)["ig.py"]["findings"] == []


def test_ignore_comment_for_one_rule(proj: Path) -> None:
    src = (
        "from optimum.neuron import NeuronAccelerator  # neuron-migrate: ignore[NM200]\n"
        'args = NeuronAccelerator(mixed_precision="bf16", zero_1=True)  # neuron-migrate: ignore[NM200]\n'
    )
    put(proj, {"ig.py": src})
    code, rep = report(".", "--write")
    assert code == 1
    text = (proj / "ig.py").read_text()
    assert text.splitlines()[0] == src.splitlines()[0]
    assert text.splitlines()[-1] == src.splitlines()[-1]  # not renamed
    assert "# TODO(neuron-migrate NM901):" in text  # the other rule still acts
    assert [x["rule"] for x in by_path(rep)["ig.py"]["findings"]] == ["NM901"]

    # and the other way round: NM901 silenced, NM200 renames
    src2 = (
        "from optimum.neuron import NeuronAccelerator\n"
        'args = NeuronAccelerator(mixed_precision="bf16", zero_1=True)  # neuron-migrate: ignore[NM901]\n'
    )
    put(proj, {"ig.py": src2})
    assert cli(".", "--write").exit_code == 0
    assert (proj / "ig.py").read_text() == (
        "from accelerate import Accelerator\n"
        'args = Accelerator(mixed_precision="bf16", zero_1=True)  # neuron-migrate: ignore[NM901]\n'
    )


# =========================================================================== 9. subcommands


def test_rules_lists_every_rule() -> None:
    res = cli("rules")
    assert res.exit_code == 0
    ids = [ln.split()[0] for ln in res.stdout.splitlines() if ln.strip()]
    assert ids == list(RULE_IDS) == sorted(RULE_IDS)
    assert set(CORE_RULE_IDS) <= set(ids)
    md = cli("rules", "--format", "markdown")
    assert md.exit_code == 0
    lines = md.stdout.splitlines()
    assert lines[0].startswith("| id |") and lines[1].startswith("|---")
    assert [ln.split("|")[1].strip() for ln in lines[2:]] == list(RULE_IDS)
    assert all(ln.startswith("|") and ln.endswith("|") and ln.count("|") - ln.count("\\|") == 5 for ln in lines)
    js = json.loads(cli("rules", "--format", "json").stdout)
    assert [r["id"] for r in js] == list(RULE_IDS)


def test_explain() -> None:
    res = cli("explain", "NM200")
    assert res.exit_code == 0
    from codemods import all_rules

    title = next(r.title for r in all_rules() if r.id == "NM200")
    assert res.stdout.startswith(f"NM200: {title}\n")
    assert "\nBefore:\n" in res.stdout and "\nAfter:\n" in res.stdout
    assert res.stdout.index("Before:") < res.stdout.index("After:")
    assert cli("explain", "nm200").stdout == res.stdout
    bad = cli("explain", "NM999")
    assert bad.exit_code == 2
    assert "NM999" in bad.stderr


def test_verify_parses_its_options_and_script_arguments(proj: Path) -> None:
    # a script that observes nothing (stderr is not observed): verify runs it (with its own arguments), exits 2
    put(proj, {"some_script.py": "import sys\nprint('args', sys.argv[1:], file=sys.stderr)\n"})
    res = cli("verify", "some_script.py", "--device", "cpu", "--reference", "none", "--", "--foo", "1")
    assert res.exit_code == 2
    assert "No such option" not in res.output
    assert "args ['--foo', '1']" in res.output
    assert "nothing" in res.output.lower()


def test_directory_named_verify_is_migrated(proj: Path) -> None:
    put(proj, {"verify/train.py": TRAIN_OLD})
    res = cli("--write", "--", "verify")
    assert res.exit_code == 0, res.output
    assert (proj / "verify/train.py").read_text() == TRAIN_NEW
    put(proj, {"rules/train.py": TRAIN_OLD})
    res = cli("--format", "json", "--", "rules")
    code, rep = res.exit_code, json.loads(res.stdout)
    assert code == 1 and list(by_path(rep)) == ["rules/train.py"]


def test_directory_named_migrate_is_a_path(proj: Path) -> None:
    put(proj, {"migrate/train.py": TRAIN_OLD})
    res = cli("migrate", "--write")
    assert res.exit_code == 0, res.output
    assert (proj / "migrate/train.py").read_text() == TRAIN_NEW


def test_help_of_migrate_options() -> None:
    res = cli(".", "--help")
    assert res.exit_code == 0
    for opt in ("--write", "--check", "--format", "--select", "--allow-dirty", "--jobs", "--exclude"):
        assert opt in res.stdout


def test_version() -> None:
    res = cli("--version")
    assert res.exit_code == 0
    assert res.stdout.strip() == f"neuron-migrate {migrator.__version__}"


def test_python_m_migrator_help(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "migrator", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "verify" in proc.stdout and "rules" in proc.stdout


def test_python_m_migrator_migrates(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN_OLD)
    proc = subprocess.run(
        [sys.executable, "-m", "migrator", "train.py", "--write", "--format", "json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["summary"]["files_changed"] == 1
    assert (tmp_path / "train.py").read_text() == TRAIN_NEW


# =========================================================================== 10. --jobs


def test_jobs_2_matches_jobs_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files: dict[str, str] = {}
    for i in range(24):
        files[f"pkg/train_{i:02d}.py"] = TRAIN_OLD if i % 3 else ZERO1_OLD
    files["pkg/cache.py"] = CACHE_OLD
    files["pkg/broken.py"] = "from optimum.neuron import NeuronTrainer\ndef f(:\n"
    files["pkg/nb.ipynb"] = notebook("from optimum.neuron import NeuronTrainer\nt = NeuronTrainer(model=m)")
    import migrator.engine

    pools: list[int] = []

    class SpyPool(migrator.engine.ProcessPoolExecutor):
        def __init__(self, max_workers, *args, **kwargs):
            pools.append((max_workers, kwargs["mp_context"].get_start_method()))
            super().__init__(max_workers, *args, **kwargs)

    monkeypatch.setattr(migrator.engine, "ProcessPoolExecutor", SpyPool)
    results = []
    for jobs in ("1", "2"):
        root = tmp_path / f"jobs{jobs}"
        root.mkdir()
        put(root, files)
        monkeypatch.chdir(root)
        res = cli(".", "--write", "--jobs", jobs, "--format", "json")
        rep = json.loads(res.stdout)
        results.append((res.exit_code, rep["files"], snapshot(root)))
    (c1, f1, s1), (c2, f2, s2) = results
    assert pools == [(2, "spawn")]  # --jobs 1 ran in-process, --jobs 2 used the spawn pool
    assert c1 == c2 == 2
    assert f1 == f2
    assert s1 == s2
    assert sum(f["status"] == "changed" for f in f1) == 26
    assert s1["pkg/train_01.py"] == TRAIN_NEW.encode()


def test_migrate_needs_none_of_the_ml_libraries(tmp_path: Path) -> None:
    """`neuron-migrate PATH` runs on the light runtime dependencies: importing the CLI and every rule,
    and migrating a project, loads neither torch nor the Hugging Face libraries (they are only
    needed by `verify` and the tests)."""
    (tmp_path / "train.py").write_text(TRAIN_OLD)
    code = (
        "import sys\n"
        "from migrator.cli import main\n"
        "rc = main([sys.argv[1], '--no-progress', '--format', 'json'])\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'diffusers', 'trl', 'peft', 'accelerate') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NEURON_MIGRATE_RULES"}  # every real rule
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert '"files_changed": 1' in proc.stdout
    assert "HEAVY []" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
