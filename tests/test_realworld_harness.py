"""The real-world harness (benchmarks/realworld.py) and the programs it checks
(migrator/selfcheck/programs.py), on a tiny corpus and on (original, migrated) pairs written here."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import libcst as cst
import pytest

from migrator.engine import RuleSelection
from migrator.rules import PythonContext, PythonRule
from migrator.selfcheck.programs import programs, shell_units

ROOT = Path(__file__).resolve().parent.parent


def _load_harness():
    if "realworld" in sys.modules:
        return sys.modules["realworld"]
    spec = importlib.util.spec_from_file_location("realworld", ROOT / "benchmarks" / "realworld.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["realworld"] = module
    spec.loader.exec_module(module)
    return module


rw = _load_harness()


def _notebook(*cells: str, language: str = "python") -> str:
    return json.dumps(
        {
            "cells": [
                {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                 "source": c.splitlines(keepends=True)}
                for c in cells
            ],
            "metadata": {"kernelspec": {"language": language, "name": "k", "display_name": "k"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        },
        indent=1,
    )


# ----------------------------------------------------------------------------- programs


def test_programs_python_and_other_kinds():
    assert programs("python", "x = 1\n") == [(["x = 1\n"], False)]
    for kind in ("shell", "requirements", "pyproject", "dockerfile"):
        assert programs(kind, "echo hi\n") == []
    assert shell_units("shell", "echo hi\n") == ["echo hi\n"]


def test_programs_notebook_cells_magics_and_writefile():
    text = _notebook(
        "!pip install somepkg\n%matplotlib inline\nimport os\n",
        "%%time\nvalue = os.getcwd()\n",
        "%%html\n<b>not python</b>\n",
        "%%writefile tool.py\ndef run():\n    return 1\n",
        "%%writefile notes.txt\nplain text\n",
    )
    progs = programs("notebook", text)
    assert len(progs) == 2
    parts, notebook = progs[0]
    assert notebook is True
    # the migration sees the Python cells as one program, joined at `__nm_cell__(k)` boundaries; the
    # %%html and %%writefile cells are not part of it
    assert len(parts) == 1 and parts[0].count("__nm_cell__(") == 1
    # IPython lines are neutralised keeping the line count; the code stays as it was
    assert "import os" in parts[0] and "!pip" not in parts[0] and "%matplotlib" not in parts[0]
    assert "%%time" not in parts[0] and "value = os.getcwd()" in parts[0]
    assert progs[1] == (["def run():\n    return 1\n"], False)
    assert shell_units("notebook", text) == ["pip install somepkg\n"]
    assert programs("notebook", _notebook("x <- 1\n", language="R")) == []
    assert programs("notebook", "{not json") == []


def test_programs_markdown_blocks():
    text = (
        "# Title\n\n```python\nimport os\n```\n\ntext\n\n```py\n>>> 1 + 1\n2\n```\n\n"
        "```bash\npip install somepkg\n```\n\n```console\n$ echo hi\nhi\n```\n"
    )
    # the interpreter-session block is a program too: its examples, prompts stripped
    assert programs("markdown", text) == [(["import os\n"], False), (["1 + 1\n"], False)]
    assert shell_units("markdown", text) == ["pip install somepkg\n", "echo hi\n"]


# ----------------------------------------------------------------------------- references


def test_python_references_and_markers():
    source = (
        "import os\n"
        "import torch\n"
        "import torch_xla.core.xla_model as xm\n"
        "import torch_neuronx\n"
        '"""A docstring that says "xla"."""\n'
        "# a comment on torch_xla\n"
        "dev = xm.xla_device()\n"
        "# TODO(neuron-migrate NM900): do this by hand\n"
        "# more words of the same marker\n"
        "xm.mark_step()\n"
        't = torch.ones(1, device="xla")\n'
        "compiled = torch_neuronx.trace(t, t)\n"
        "plugin = torch_neuronx.some_native_api\n"
        "y = torch.neuron.trace(t)\n"
        'os.environ["XLA_USE_BF16"] = "1"\n'
        "if xm.is_master_ordinal():  # neuron-migrate: ignore\n"
        "    pass\n"
    )
    refs = rw.python_references(source)
    got = [(line, what, marked) for line, what, marked in refs]
    assert got == [
        (3, "import torch_xla.core.xla_model", False),
        (7, "torch_xla.core.xla_model.xla_device", False),
        (10, "torch_xla.core.xla_model.mark_step", True),
        (11, "'xla'", False),
        (12, "torch_neuronx.trace", False),
        (14, "torch.neuron.trace", False),
        (15, "'XLA_USE_BF16'", False),
        (16, "torch_xla.core.xla_model.is_master_ordinal", True),
    ]
    assert rw.python_references("def f(:\n") is None


def test_uses_of_a_marked_import_are_covered_and_a_marked_try_marks_its_imports():
    source = (
        "# TODO(neuron-migrate NM900): Replace `helper` by hand.\n"
        "from neuronx_distributed.utils import helper\n"
        "import torch_xla.core.xla_model as xm\n"
        "# TODO(neuron-migrate NM420): gate on torch.neuron.is_available() instead.\n"
        "try:\n"
        "    import torch_xla.runtime as xr\n"
        "except ImportError:\n"
        "    xr = None\n"
        "try:\n"
        "    import torch_xla.debug.metrics as met\n"
        "except ImportError:\n"
        "    met = None\n"
        "def f():\n"
        "    return helper(1), xm.xla_device()\n"
    )
    assert rw.python_references(source) == [
        (2, "from neuronx_distributed.utils import helper", True),
        (3, "import torch_xla.core.xla_model", False),
        (6, "import torch_xla.runtime", True),  # the gate's marker is on its ``try``
        (10, "import torch_xla.debug.metrics", False),  # an unmarked gate
        (14, "neuronx_distributed.utils.helper", rw.COVERED),
        (14, "torch_xla.core.xla_model.xla_device", False),  # its import has no marker
    ]
    m = rw.measure_file("python", source, source)
    assert (m["refs_marked"], m["refs_covered"], m["refs_silent"]) == (2, 1, 3)


def test_text_references():
    text = (
        "# install torch-xla first (a comment: not counted)\n"
        "pip install torch-xla optimum-neuron  # two names, one line\n"
        "pip install torch-neuronx\n"
        "# TODO(neuron-migrate NM512): set it by hand\n"
        "XLA_USE_BF16=1 \\\n"
        "  NEURON_RT_X=1 python train.py --flag XLA_DOWNCAST_BF16\n"
        "pip install 'optimum[neuronx]' neuronx-distributed\n"
    )
    assert rw.text_references(text) == [
        (2, "torch-xla", False),
        (5, "XLA_USE_BF16", True),
        (6, "XLA_DOWNCAST_BF16", True),  # continues the marked command
        (7, "optimum[neuronx]", False),
    ]


# ----------------------------------------------------------------------------- one file


def test_measure_file_introduced_undefined_name_and_silent_use():
    original = "import torch_xla.core.xla_model as xm\n\ndef f():\n    return xm.xla_device()\n"
    migrated = "def f():\n    return xm.xla_device()\n"  # the import went, its use stayed
    m = rw.measure_file("python", original, migrated)
    assert m["undefined_names"] == ["xm"] and m["undefined_introduced"] == 1
    assert m["refs_original"] == 2 and m["refs_marked"] == 0 and m["refs_silent"] == 1
    assert m["silent"] == ["line 2: torch_xla.core.xla_model.xla_device"]
    assert m["old_imports_original"] == 1 and m["old_imports_left"] == 0
    assert m["syntax_broken"] == 0


def test_measure_file_clean_marked_and_broken_syntax():
    original = "import torch_xla.core.xla_model as xm\nxm.mark_step()\n"
    marked = "# TODO(neuron-migrate NM900): by hand\nimport torch_xla.core.xla_model as xm\nxm.mark_step()\n"
    m = rw.measure_file("python", original, marked)
    assert m["refs_original"] == 2 and m["refs_marked"] == 1 and m["refs_silent"] == 0
    assert m["refs_covered"] == 1  # the use of the marked import
    assert m["old_imports_left"] == 0 and m["undefined_introduced"] == 0
    m = rw.measure_file("python", original, "import torch\n")
    assert (m["refs_silent"], m["refs_marked"], m["undefined_introduced"]) == (0, 0, 0)
    m = rw.measure_file("python", original, "xm.mark_step(\n")
    assert m["syntax_broken"] == 1 and m["refs_silent"] == 0


def test_markers_of_the_output_per_file_and_by_length():
    long = "x" * 130
    marked = f"# TODO(neuron-migrate NM900): by hand\nimport os\n# TODO(neuron-migrate NM410): {long}\nx = 1\n"
    m = rw.measure_file("python", "import os\nx = 1\n", marked)
    assert m["marker_texts"] == [("NM900", "by hand"), ("NM410", long)]
    files = [{"path": "a.py", **m}, {"path": "b.py", "marker_texts": [("NM900", "short")]}]
    text = rw.format_markers(files)
    assert "3 in 2 files; per file median 2, p90 2, max 2" in text
    assert "max 130; over 120: 1 (33.3%)" in text and "by rule: NM410 1" in text
    assert " 130  NM410  a.py: " + "x" * 100 in text
    assert rw.format_markers([{"path": "c.py", "marker_texts": []}]) == "markers in the output: none"
    notebook = _notebook("# TODO(neuron-migrate NM900): by hand\nimport os\n")
    assert rw.measure_file("notebook", notebook, notebook)["marker_texts"] == [("NM900", "by hand")]


def test_measure_file_notebook_cross_cell():
    original = _notebook("!pip install torch-xla\nimport torch_xla.core.xla_model as xm\n", "d = xm.xla_device()\n")
    migrated = _notebook("import torch\n", "d = xm.xla_device()\n")
    m = rw.measure_file("notebook", original, migrated)
    assert m["undefined_names"] == ["xm"]
    assert m["refs_original"] == 3  # the import, its use in the next cell, the `!pip` line
    assert m["refs_silent"] == 1 and m["silent"] == ["line 3: torch_xla.core.xla_model.xla_device"]  # of the joined program
    same = rw.measure_file("notebook", original, original)
    assert same["undefined_introduced"] == 0 and same["old_imports_left"] == 1 and same["refs_silent"] == 3


# ----------------------------------------------------------------------------- the whole harness


CLEAN = """\
import torch
import torch_xla.core.xla_model as xm

device = xm.xla_device()
model = torch.nn.Linear(2, 2).to(device)
model(torch.ones(1, 2, device=device)).sum().backward()
xm.mark_step()
"""

SHELL = """\
#!/bin/bash
pip install torch-xla
XLA_USE_BF16=1 python train.py
"""


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus" / "someone__project"
    root.mkdir(parents=True)
    (root / "train.py").write_text(CLEAN)
    (root / "bad.py").write_text("def f(:\n    import torch_xla\n")
    (root / "plain.py").write_text("print('nothing to migrate')\n")
    (root / "launch.sh").write_text(SHELL)
    (root / "demo.ipynb").write_text(
        _notebook("%matplotlib inline\nimport torch_xla.core.xla_model as xm\ndevice = xm.xla_device()\n")
    )
    return tmp_path / "corpus"


def test_harness_counts(corpus: Path):
    before = {p: p.read_bytes() for p in corpus.rglob("*") if p.is_file()}
    result = rw.harness(corpus, jobs=1)
    assert {p: p.read_bytes() for p in corpus.rglob("*") if p.is_file()} == before  # never touched
    files = {f["path"]: f for f in result["files"]}
    assert sorted(files) == [
        "someone__project/bad.py", "someone__project/demo.ipynb", "someone__project/launch.sh",
        "someone__project/plain.py", "someone__project/train.py",
    ]
    train = files["someone__project/train.py"]
    assert train["changed"] == 1 and train["applied"] >= 1
    assert train["refs_original"] == 3 and train["refs_silent"] == 0
    assert train["undefined_introduced"] == 0 and train["old_imports_left"] == 0
    bad = files["someone__project/bad.py"]
    assert bad["errors"] == 1 and bad["crashes"] == 0 and "syntax error" in bad["error"]
    assert files["someone__project/plain.py"]["changed"] == 0
    assert files["someone__project/launch.sh"]["refs_original"] == 2
    assert files["someone__project/demo.ipynb"]["refs_original"] == 2

    sums = rw.totals(result["files"])
    total = sums["total"]
    assert total["files"] == 5 and sums["python"]["files"] == 3
    assert total["errors"] == 1 and total["crashes"] == 0
    assert total["non_idempotent"] == 0 and total["syntax_broken"] == 0
    assert total["undefined_introduced"] == 0
    assert total["refs_original"] == 3 + 2 + 2
    assert total["refs_done_pct"] == pytest.approx(100 * (1 - total["refs_silent"] / 7))


def test_main_prints_table_and_list(corpus: Path, tmp_path: Path, capsys):
    out_json = tmp_path / "out.json"
    assert rw.main(["--corpus", str(corpus), "--list", "--json", str(out_json), "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "files" in out and "old-stack references: original" in out and "run time:" in out
    assert "someone__project/bad.py  [python]" in out and "error: syntax error" in out
    api = rw.target_api_available()
    assert ("n/a" in out) is (not api)
    data = json.loads(out_json.read_text())
    assert len(data["files"]) == 5
    assert rw.main(["--corpus", str(corpus), "--only", "launch", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "(1 files," in out


# ----------------------------------------------------------------------------- the project second run


class _Recount(PythonRule):
    """Not idempotent, and only with project context: in a run where some file holds OLDSTACK, the
    string "count-N" of a file holding WATCHED becomes "count-N+1" (every run again)."""

    id = "NM996"
    title = "test rule"
    triggers = ("OLDSTACK",)
    project_triggers = ("WATCHED",)

    def handlers(self):
        return {cst.SimpleString: self._on_string}

    def _on_string(self, node: cst.SimpleString, ctx: PythonContext) -> None:
        value = node.evaluated_value
        if ctx.in_project and isinstance(value, str) and value.startswith("count-"):
            ctx.replace(node, cst.SimpleString(f'"count-{int(value[6:]) + 1}"'))


def recount_rules():
    return [_Recount()]


def test_project_second_run_counts_files_that_change_again(tmp_path: Path, capsys):
    root = tmp_path / "corpus" / "someone__project"
    root.mkdir(parents=True)
    (root / "old.py").write_text("OLDSTACK = 1\n")  # the file that turns the project context on
    (root / "watched.py").write_text('WATCHED = "count-1"\n')
    (root / "other.py").write_text('OTHER = "count-1"\n')  # never shown to the rule: no trigger
    selection = RuleSelection("tests.test_realworld_harness:recount_rules")
    result = rw.harness(tmp_path / "corpus", jobs=1, selection=selection)
    files = {f["path"]: f for f in result["files"]}
    watched = files["someone__project/watched.py"]
    # the first run rewrote it with project context, and the second whole-project run, which sees
    # old.py again, rewrote it again (a run of watched.py alone would not have: no OLDSTACK there)
    assert watched["changed"] == 1 and watched["non_idempotent"] == 1
    assert watched["second_diff"] == ['-WATCHED = "count-2"', '+WATCHED = "count-3"']
    assert files["someone__project/old.py"]["non_idempotent"] == 0
    assert files["someone__project/other.py"]["changed"] == 0
    assert rw.totals(result["files"])["total"]["non_idempotent"] == 1
    assert "non-idempotent (project second run): 1" in rw.report(result, {"idempotence"})
    assert "the project second run changes:" in rw.report(result, {"idempotence"})
