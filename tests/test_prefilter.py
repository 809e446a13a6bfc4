"""The byte pre-filter decides the same with one pass over a file (Aho-Corasick) as with one substring
search per trigger, probe and gate: on every fixture, and on a file holding each pattern alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrator.engine import RuleSelection, RuleSet
from migrator.model import KINDS

pytest.importorskip("ahocorasick_rs")

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def both() -> tuple[RuleSet, RuleSet]:
    one = RuleSet(RuleSelection())
    assert one.present(b"import torch_xla") is not None  # the automaton is on
    return one, RuleSet(RuleSelection(), one_pass=False)


def decisions(rules: RuleSet, kind: str, data: bytes) -> tuple:
    facts: set[str] = set()
    rules.project_facts(data, facts)
    context: set[str] = set()
    rules.project_context(kind, data, context)
    return (rules.wanted(kind, data), rules.wanted(kind, data, rules.contextual_ids),
            rules.wanted_in_project(kind, data, rules.contextual_ids), frozenset(facts), frozenset(context),
            tuple(map(repr, rules.launch_facts(kind, data))))


def _patterns(rules: RuleSet) -> set[bytes]:
    out = set(rules.launch_probes)
    for trig in rules.triggers.values():
        out.update(trig)
    for rows in rules.contextual.values():
        for _rid, own, extra in rows:
            out.update(own + extra)
    for subs in rules.probes.values():
        out.update(subs)
    return out - {b""}


def test_fixtures_decide_the_same(both):
    one, naive = both
    files = sorted(FIXTURES.rglob("*.*"))
    assert len(files) > 500
    for path in files:
        data = path.read_bytes()
        for kind in KINDS:
            got, expected = decisions(one, kind, data), decisions(naive, kind, data)
            assert got == expected, (path, kind)


def test_each_pattern_alone_is_found(both):
    one, naive = both
    for pattern in sorted(_patterns(one)):
        for data in (b"x = 1\n" + pattern + b"\n", pattern, "é ".encode() + pattern + "ü".encode()):
            assert one.present(data) >= {pattern}
            for kind in KINDS:
                assert decisions(one, kind, data) == decisions(naive, kind, data), (pattern, kind)


def test_a_clean_file_interests_no_rule(both):
    one, naive = both
    clean = b"import torch\n\nx = torch.ones(2)\nprint(x)\n"
    assert one.present(clean) == {b""}
    assert not one.wanted("python", clean) and not naive.wanted("python", clean)
