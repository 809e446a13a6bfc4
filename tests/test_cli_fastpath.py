"""The fast path of ``neuron-migrate`` (issue 12, fast start) against the typer app.

``migrator.cli.main`` runs an everyday migrate command line (well-formed migrate options and
paths) without importing typer, click or pydantic; anything else goes to the typer app. Here every
command line of a matrix runs both ways on a fresh copy of the same small project, and the two must
give the same stdout, stderr, exit code and files. ``NEURON_MIGRATE_NO_FASTPATH=1`` forces the
typer path. The last tests check, in a fresh interpreter, that ``python -m migrator FILE`` imports
none of typer, click and pydantic (and that ``--help`` does, so that the check is not vacuous).
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from migrator import cli  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

PROJECT = {
    "old.py": (
        "from optimum.neuron import NeuronTrainer, NeuronHfArgumentParser\n"
        "args = NeuronHfArgumentParser((Args,)).parse_args_into_dataclasses()\n"
        "trainer = NeuronTrainer(model=model, args=args)\n"
    ),
    "cache.py": "from optimum.neuron.cache import synchronize_hub_cache\nsynchronize_hub_cache()\n",
    "clean.py": "import torch\n\nx = torch.ones(2)\n",
    "sub/acc.py": (
        "from optimum.neuron import NeuronAccelerator\n"
        'args = NeuronAccelerator(mixed_precision="bf16", zero_1=True)\n'
    ),
    "requirements.txt": "optimum-neuron==0.0.28\ntorch\n",
    "-dash.py": "from optimum.neuron import NeuronTrainer\n",
    "verify": "not a subcommand here\n",
}

FORMATS = ("text", "json", "markdown", "sarif", "github")

# command lines the fast parser takes (each one also runs through typer)
FAST = [
    ["."],
    ["old.py"],
    ["old.py", "clean.py"],
    ["clean.py"],
    ["-"],  # a path named "-" (missing): an error file, exit 2
    ["missing.py"],
    [".", "--write"],
    ["--write", "."],
    ["old.py", "--write", "clean.py"],
    [".", "--check"],
    ["--check", "--no-diff", "."],
    [".", "--diff"],
    [".", "--no-diff"],
    [".", "--diff", "--no-diff"],
    [".", "--no-diff", "--diff", "--check"],
    [".", "--write", "--diff"],
    [".", "--write", "--write"],
    *[[".", "--format", f] for f in FORMATS],
    *[[".", f"--format={f}"] for f in FORMATS],
    [".", "--format", "json", "--format", "text"],
    [".", "--output", "report.txt"],
    [".", "--output=report.json", "--format", "json"],
    [".", "--output", "a.txt", "--output", "b.txt"],
    [".", "--select", "NM900"],
    [".", "--select=NM2,NM900"],
    [".", "--select", "NM2", "--select", "NM900"],
    [".", "--select", "nm2"],
    [".", "--ignore", "NM900"],
    [".", "--ignore=NM1,NM2"],
    [".", "--ignore", "NM1", "--ignore=NM900"],
    [".", "--select", "NM2,NM9", "--ignore", "NM901"],
    [".", "--jobs", "1"],
    [".", "--jobs=2"],
    [".", "--jobs", "1", "--jobs", "2"],
    [".", "--allow-dirty", "--write"],
    [".", "--no-progress"],
    [".", "--exclude", "sub"],
    [".", "--exclude=sub/*", "--exclude", "cache.py"],
    ["--", "old.py"],
    ["--write", "--", "old.py", "clean.py"],
    ["--", "-dash.py"],
    ["--", "--write"],  # a path named --write (missing)
    ["--", "verify"],
    ["--check", "--", "verify", "old.py"],
    ["migrate"],  # a path named migrate (missing)
    ["rulez"],  # not a subcommand: a path (missing)
    # usage errors of the migrate body: "neuron-migrate: error: ...", exit 2
    [".", "--write", "--check"],
    [".", "--select", "NOPE"],
    [".", "--ignore=NM9999"],
    [".", "--output", "no/such/dir/report.txt"],
    [".", "--output", "sub"],
]

# command lines the fast parser leaves to typer (help, errors, subcommands...)
TYPER = [
    [],
    ["--help"],
    ["-h"],
    [".", "--help"],
    ["--write", "-h"],
    ["--version", "."],
    [".", "--version"],
    ["rules"],
    ["explain", "NM900"],
    ["explain", "NOPE"],
    ["verify", "--help"],
    ["--write"],
    ["--check", "--"],
    [".", "--jobs", "0"],
    [".", "--jobs", "x"],
    [".", "--jobs=-1"],
    [".", "--jobs", " 2"],
    [".", "--jobs", "1.5"],
    [".", "--jobs"],
    [".", "--format", "xml"],
    [".", "--format", "JSON"],
    [".", "--format"],
    [".", "--format="],
    [".", "--bogus"],
    [".", "--writ"],
    [".", "-w"],
    [".", "--write=1"],
    [".", "--no-progress=yes"],
    [".", "--output", ""],
    [".", "--select", ""],
    [".", "--select", "--write"],
    [".", "--exclude"],
    [""],
    ["--", ""],
]


@pytest.fixture(autouse=True)
def _fixed_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_MIGRATE_RULES", "tests.cli_rules:rules")
    monkeypatch.delenv(cli.NO_FASTPATH_ENV, raising=False)


def _project(root: Path, files: dict[str, str] = PROJECT) -> Path:
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(text.encode("utf-8"))
    return root


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): _steady(p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()}


def _steady(data):
    """The report without its run time (the only part that may differ between two runs)."""
    if isinstance(data, bytes):
        return _steady(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    data = re.sub(r"\(\d+\.\d+ s\)", "(T s)", data)
    return re.sub(r'"seconds": [0-9.e+-]+', '"seconds": T', data)


def _run(root: Path, argv: list[str], typer_path: bool, capsys, monkeypatch) -> tuple[int, str, str, dict]:
    monkeypatch.chdir(root)
    if typer_path:
        monkeypatch.setenv(cli.NO_FASTPATH_ENV, "1")
    else:
        monkeypatch.delenv(cli.NO_FASTPATH_ENV, raising=False)
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    monkeypatch.delenv(cli.NO_FASTPATH_ENV, raising=False)
    here = str(root)  # a message may name an absolute path: the two runs have two roots
    return code, _steady(out).replace(here, "ROOT"), _steady(err).replace(here, "ROOT"), _files(root)


def _both(tmp_path: Path, argv: list[str], capsys, monkeypatch, files: dict[str, str] = PROJECT):
    fast = _run(_project(tmp_path / "fast", files), argv, False, capsys, monkeypatch)
    slow = _run(_project(tmp_path / "typer", files), argv, True, capsys, monkeypatch)
    return fast, slow


@pytest.mark.parametrize("argv", FAST, ids=lambda a: " ".join(a) or "(none)")
def test_fast_path_matches_typer(argv: list[str], tmp_path: Path, capsys, monkeypatch) -> None:
    assert cli.parse_migrate_argv(argv) is not None, "the fast parser should take this command line"
    fast, slow = _both(tmp_path, argv, capsys, monkeypatch)
    assert fast == slow


@pytest.mark.parametrize("argv", TYPER, ids=lambda a: " ".join(a) or "(none)")
def test_other_command_lines_go_to_typer(argv: list[str], tmp_path: Path, capsys, monkeypatch) -> None:
    assert cli.parse_migrate_argv(argv) is None, "the fast parser should leave this command line to typer"
    fast, slow = _both(tmp_path, argv, capsys, monkeypatch)
    assert fast == slow


def test_version_fast_path(tmp_path: Path, capsys, monkeypatch) -> None:
    fast, slow = _both(tmp_path, ["--version"], capsys, monkeypatch)
    assert fast == slow
    assert fast[0] == 0 and fast[1].startswith("neuron-migrate ")


def test_bad_config_error_matches(tmp_path: Path, capsys, monkeypatch) -> None:
    files = {**PROJECT, "pyproject.toml": '[tool.neuron-migrate]\nselect = 3\n'}
    fast, slow = _both(tmp_path, ["."], capsys, monkeypatch, files)
    assert fast == slow
    assert fast[0] == 2 and fast[2].startswith("neuron-migrate: error: ")


def test_parsed_keywords() -> None:
    kw = cli.parse_migrate_argv(
        ["a", "--write", "--no-diff", "--format=json", "--output", "r.json", "--select", "NM1",
         "--select=NM2", "--ignore", "NM3", "--jobs", "3", "--allow-dirty", "--no-progress",
         "--exclude", "x/*", "--docs-url", "https://d.example/nm", "b", "--", "-c", "--d"]
    )
    assert kw == {
        "paths": [Path("a"), Path("b"), Path("-c"), Path("--d")], "write": True, "diff": False,
        "fmt": "json", "output": Path("r.json"), "select": ["NM1", "NM2"], "ignore": ["NM3"],
        "jobs": 3, "allow_dirty": True, "no_progress": True, "exclude": ["x/*"], "docs_url": "https://d.example/nm",
    }


def test_fast_parser_knows_exactly_the_typer_migrate_options() -> None:
    """Every option of the typer ``migrate`` command, and no other, is known to the fast parser."""
    import typer.main

    from migrator.cli import Format, app

    command = typer.main.get_command(app).commands["migrate"]
    names = {opt for p in command.params if not p.__class__.__name__.endswith("Argument")
             for opt in (*p.opts, *p.secondary_opts)}
    assert names == set(cli._FLAGS) | set(cli._VALUED) | set(cli._REPEATED)
    assert tuple(f.value for f in Format) == cli.FORMATS


def _imported(args: list[str], cwd: Path) -> tuple[int, set[str]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop(cli.NO_FASTPATH_ENV, None)
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "migrator", *args], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=120)
    mods = {m.group(1).split(".")[0] for m in re.finditer(r"^import time:.*\|\s*([\w.]+)\s*$", res.stderr, re.M)}
    assert "migrator" in mods, res.stderr[-2000:]
    return res.returncode, mods


HEAVY = {"typer", "click", "pydantic", "pydantic_core"}


def test_one_clean_file_imports_no_typer_click_pydantic(tmp_path: Path) -> None:
    (tmp_path / "clean.py").write_text("import os\n\nprint(os.getcwd())\n")
    code, mods = _imported(["--no-progress", "clean.py"], tmp_path)
    assert code == 0
    assert not mods & HEAVY, sorted(mods & HEAVY)


def test_help_still_goes_through_typer(tmp_path: Path) -> None:
    code, mods = _imported(["--help"], tmp_path)
    assert code == 0
    assert "typer" in mods


@pytest.mark.parametrize("module", ["migrator", "migrator.cli"])
def test_both_module_entry_points_run_the_cli(tmp_path: Path, module: str) -> None:
    """``python -m migrator.cli`` is what a user types after reading ``migrator/cli.py``: it must run
    the CLI (a module without the ``__main__`` guard imports and exits 0 having done nothing)."""
    (tmp_path / "old.py").write_text("from optimum.neuron import NeuronTrainer\n\nNeuronTrainer(model=m)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-m", module, "--no-progress", "--check", "old.py"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, (res.stdout[-2000:], res.stderr[-2000:])
    assert "NeuronTrainer" in res.stdout
