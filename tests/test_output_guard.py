"""The output guard: nothing the engine hands back fails to parse when its input parsed.

The rules of tests/broken_rules.py emit code that libcst renders and Python (or the shell parser)
rejects; the engine must drop those edits (NM991 markers saying "produced code that does not
parse"), count them, fail --check, and never write such a unit.
"""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from codemods.project.shell_syntax import parses as shell_parses
from migrator.cli import app
from migrator.engine import RuleSelection, RuleSet, migrate_text
from migrator.model import UNPARSABLE
from migrator.selfcheck import policy
from migrator.selfcheck.check import SYNTAX, check_program, check_source

LOADER = "tests.broken_rules:rules"


@pytest.fixture(autouse=True)
def _broken_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_MIGRATE_RULES", LOADER)


def _src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def _rules(*ids: str) -> RuleSet:
    return RuleSet(RuleSelection(loader=LOADER, select=ids or None))


def cli(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


SCRIPT = _src("""
    import os

    BROKEN_TARGET = 1
    print(BROKEN_TARGET)
""")


def test_a_part_that_does_not_parse_is_a_violation():
    assert [(v.kind, v.part) for v in check_program(["x = 1\n", "y = (\n"])] == [(SYNTAX, 1)]
    assert [v.kind for v in check_source('"1" = "1"\n')] == [SYNTAX]
    # a notebook cell's top-level await parses
    assert check_source("await main()\n") == []


@pytest.mark.parametrize("ids", [(), ("NM997",)])  # NM991 selected or not: never handed back broken
def test_the_edit_that_produced_code_that_does_not_parse_is_dropped(ids):
    new, findings = migrate_text(SCRIPT, "python", _rules(*ids))
    ast.parse(new)
    assert new == _src("""
        import os

        # TODO(neuron-migrate NM991): Migrate this by hand: NM997's rewrite produced code that does not parse.
        BROKEN_TARGET = 1
        print("broken")
    """)
    assert sorted((f.rule, f.fix, f.line) for f in findings) == [("NM991", "manual", 3), ("NM997", "applied", 4)]
    # a second run keeps it as it is
    again, _ = migrate_text(new, "python", _rules(*ids))
    assert again == new


def test_two_rules_that_each_break_the_unit_are_both_dropped():
    source = _src("""
        BROKEN_TARGET = 1
        OTHER_TARGET = 2
        total = 3
    """)
    new, findings = migrate_text(source, "python", _rules())
    ast.parse(new)
    assert "BROKEN_TARGET = 1" in new and "OTHER_TARGET = 2" in new
    assert sorted(f.message.split("'")[0].rsplit(" ", 1)[-1] for f in findings if f.rule == "NM991") == ["NM997", "NM998"]


def test_the_last_resort_returns_the_unit_as_it_was(monkeypatch):
    # when dropping edits rule by rule cannot repair the output, nothing of the unit is handed back
    monkeypatch.setattr(policy, "_drop", lambda before, intro, edits, render, plan, syntax_only=False: render(plan))
    new, findings = migrate_text(SCRIPT, "python", _rules())
    assert new == SCRIPT
    assert [(f.rule, f.fix, f.line) for f in findings] == [("NM991", "manual", 3)]
    assert findings[0].message == f"NM997 {UNPARSABLE}: nothing in this unit was migrated; migrate it by hand"


def test_enforce_reports_an_output_it_cannot_repair():
    def render(plan: policy.Plan) -> policy.Rendered:
        return policy.Rendered('"1" = "1"\n')  # whatever is dropped

    text, plan = policy.enforce("x = 1\n", [policy.EditInfo("NM997", 0)], [], render)
    assert plan.broken
    text, plan = policy.enforce("x = 1\n", [policy.EditInfo("NM997", 0)], [], render, drop=False, old_imports=False)
    assert plan.broken


def _notebook(*cells: str) -> str:
    return json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                   "source": cell.splitlines(keepends=True)} for cell in cells],
        "metadata": {"kernelspec": {"language": "python", "name": "python3", "display_name": "Python 3"}},
        "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


def test_notebook_cells_and_markdown_blocks_are_guarded():
    nb = _notebook("!pip install torch\nBROKEN_TARGET = 1\n", "print(BROKEN_TARGET)\n%time x = 1\n")
    new, findings = migrate_text(nb, "notebook", _rules())
    cells = ["".join(c["source"]) for c in json.loads(new)["cells"]]
    assert cells[0] == ("!pip install torch\n# TODO(neuron-migrate NM991): Migrate this by hand: NM997's rewrite "
                        "produced code that does not parse.\n"
                        "BROKEN_TARGET = 1\n")
    assert cells[1] == 'print("broken")\n%time x = 1\n'
    assert [(f.rule, f.cell) for f in findings if f.rule == "NM991"] == [("NM991", 0)]

    md = "# Setup\n\n```python\nBROKEN_TARGET = 1\nprint(BROKEN_TARGET)\n```\n"
    new, findings = migrate_text(md, "markdown", _rules())
    block = new.split("```python\n")[1].split("```")[0]
    ast.parse(block)
    assert "BROKEN_TARGET = 1" in block and any(f.rule == "NM991" and UNPARSABLE in f.message for f in findings)


def test_shell_units_are_guarded():
    script = "#!/bin/bash\nset -e\nBROKEN_SHELL --x \\\n  --y\necho done\n"
    new, findings = migrate_text(script, "shell", _rules())
    assert shell_parses(new)
    assert new == ("#!/bin/bash\nset -e\n# TODO(neuron-migrate NM991): Migrate this command by hand: NM995's rewrite "
                   "produced code that does not parse.\n"
                   "BROKEN_SHELL --x \\\n  --y\necho done\n")
    assert [(f.rule, f.fix, f.line) for f in findings] == [("NM991", "manual", 3)]
    again, findings = migrate_text(new, "shell", _rules())
    assert again == new and [(f.rule, f.line) for f in findings] == [("NM991", 3)]
    # a notebook's `!` line is a shell unit too
    nb = _notebook("!BROKEN_SHELL now\n")
    new, findings = migrate_text(nb, "notebook", _rules())
    assert "".join(json.loads(new)["cells"][0]["source"]).endswith("!BROKEN_SHELL now\n")
    assert [f.rule for f in findings] == ["NM991"]


def test_check_fails_and_the_reports_show_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT)
    res = cli("--check", "--no-progress", "train.py")
    assert res.exit_code == 1
    assert "1 error" in res.stdout and "0 errors" not in res.stdout
    assert f"Self-check: 1 rewrite not applied because it {UNPARSABLE} (NM991)." in res.stdout

    res = cli("--check", "--no-progress", "--format", "json", "train.py")
    assert res.exit_code == 1
    report = json.loads(res.stdout)
    (entry,) = report["files"]
    assert [(f["rule"], f["fix"], f["line"]) for f in entry["findings"] if f["rule"] == "NM991"] == [
        ("NM991", "manual", 3)]
    assert UNPARSABLE in entry["findings"][0]["message"]
    assert report["summary"]["manual_actions"] == 1

    res = cli("--write", "--allow-dirty", "--no-progress", "train.py")
    ast.parse((tmp_path / "train.py").read_text())  # what is written parses
    assert "BROKEN_TARGET = 1" in (tmp_path / "train.py").read_text()


def test_a_cut_cell_that_does_not_parse_alone_is_not_handed_back():
    # the joined program parses (the boundary sits inside a string) but its cells apart do not: the
    # notebook engine migrates each cell on its own instead (each guarded by run_python)
    from migrator.filekinds.notebook import transform_notebook

    seen: list[str] = []

    def run_python(source: str):
        seen.append(source)
        if "__nm_cell__" in source:
            return 'x = """\n__nm_cell__(1)\n"""\n', []
        return source.replace("1", "10"), []

    nb = _notebook("x = 1\n", "y = 2\n")
    new, _ = transform_notebook(nb, run_python, lambda s: (s, []))
    cells = ["".join(c["source"]) for c in json.loads(new)["cells"]]
    assert cells == ["x = 10\n", "y = 2\n"]
    assert seen == ["x = 1\n__nm_cell__(1)\ny = 2\n", "x = 1\n", "y = 2\n"]
