"""migrator.rules.TriggerScan: the one-pass trigger search decides exactly as the substring tests."""

from pathlib import Path

import pytest

from migrator.engine import RuleSelection
from migrator.rules import TriggerScan, trigger_scan

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def rules():
    return RuleSelection().load_all()


def test_same_decisions_as_substring_tests_on_every_fixture(rules):
    scan = TriggerScan(rules)
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(FIXTURES.rglob("*")) if p.is_file()]
    assert len(texts) > 200
    every = frozenset(r.id for r in rules)
    differ = []
    for text in texts:
        found = scan.found(text)
        assert found is not None
        for project in (frozenset(), every):
            for r in rules:
                if r.applies_to(text, project, found) != r.applies_to(text, project):
                    differ.append((r.id, text[:40]))
    assert not differ


def test_overlapping_and_empty_triggers():
    class A:
        id, triggers, project_triggers = "A", ("optimum.neuron", "neuron"), ()

    class B:
        id, triggers, project_triggers = "B", ("", "xla"), ("torch_xla",)

    found = TriggerScan([A, B]).found("import optimum.neuron, torch_xla")
    assert {"optimum.neuron", "neuron", "xla", "torch_xla", ""} <= found


def test_one_scan_per_set_of_triggers(rules):
    assert trigger_scan(rules) is trigger_scan(list(rules))
    assert trigger_scan(rules) is not trigger_scan(rules[:3])
