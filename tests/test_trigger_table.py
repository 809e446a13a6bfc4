"""The generated trigger table (``codemods/_triggers.py``, read by the engine's byte pre-filter so
that a run over files with no old-stack code imports no rule module) says what the rule classes
say. Regenerate it with ``python -m codemods`` after changing a rule's id, kinds or triggers."""

from __future__ import annotations

from pathlib import Path

import codemods
from migrator.engine import RuleRow, RuleSelection, _index


def test_trigger_table_is_up_to_date():
    path = Path(codemods.__file__).with_name("_triggers.py")
    assert path.read_text() == codemods.trigger_table_source(), (
        "codemods/_triggers.py is out of date: run `python -m codemods`")


def test_the_engine_reads_the_table_for_codemods():
    rows = RuleSelection().index()
    assert rows == tuple(RuleRow.of(r) for r in codemods.all_rules())
    assert _index("codemods:all_rules") == tuple(RuleRow(*row) for row in codemods.all_rules_triggers())


def test_a_loader_without_table_is_read_from_its_rules():
    rows = RuleSelection("tests.cli_rules:rules").index()
    assert rows and all(isinstance(r, RuleRow) for r in rows)
