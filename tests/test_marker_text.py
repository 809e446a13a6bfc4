"""Markers a person can act on: one sentence of at most 120 characters after the prefix.

Every marker written into a fixture's expected output, every marker of an ``explain`` example and every
short form a rule lists in ``markers`` is checked, grouped by the rule that writes it (``-k NM410``).
The long forms (why, background, alternatives) live in the rule's ``markers`` and reach ``explain``
and the report's ``detail`` field.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import libcst as cst
import pytest
from typer.testing import CliRunner

from codemods import all_rules
from migrator.cli import app, explain_text
from migrator.model import MARKER_RE, Finding
from migrator.rules import PythonContext, PythonRule

FIXTURES = Path(__file__).parent / "fixtures"
LIMIT = 120
#: a second sentence (or clause) starting after a full stop, question mark, exclamation or semicolon
SECOND_SENTENCE = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\betc)[.!?;]\s+[A-Z`\"'(]")
RULES = {r.id: type(r) for r in all_rules()}


def _fixture_markers() -> dict[str, list[tuple[str, str]]]:
    """rule id -> [(where, marker text)] over every fixture output and every explain example."""
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for path in sorted(FIXTURES.rglob("*.after.*")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".ipynb":  # the cells' text, not its JSON escaping
            text = "\n".join("".join(c.get("source", ())) for c in json.loads(text).get("cells", ()))
        for number, line in enumerate(text.splitlines(), 1):
            m = MARKER_RE.search(line)
            if m:
                out[m.group(1)].append((f"{path.relative_to(FIXTURES)}:{number}", m.group(2)))
    for rule in RULES.values():
        for line in rule.doc().after.splitlines():
            m = MARKER_RE.search(line)
            if m:
                out[m.group(1)].append((f"explain {rule.id}", m.group(2)))
        for short, _ in rule.doc().markers:
            out[rule.id].append((f"{rule.id}.markers", short))
    return out


MARKERS = _fixture_markers()


def problems(text: str) -> list[str]:
    """What is wrong with one marker's text (empty when it is one sentence within the limit)."""
    found = []
    if len(text) > LIMIT:
        found.append(f"{len(text)} characters")
    if SECOND_SENTENCE.search(text.rstrip(".")):
        found.append("more than one sentence")
    return found


def test_problems_catches_long_and_double_sentences():
    assert problems("Pass dtype=torch.bfloat16 to keep the precision of the old run.") == []
    assert problems("Use torchrun, e.g. torchrun --nproc-per-node 2 train.py.") == []
    assert problems("x" * (LIMIT + 1)) == [f"{LIMIT + 1} characters"]
    assert problems("Remove the trace. It is not needed any more.") == ["more than one sentence"]
    assert problems("Remove the trace; Diffusers loads it.") == ["more than one sentence"]


@pytest.mark.parametrize("rule", sorted(MARKERS))
def test_markers_are_one_short_sentence(rule):
    bad = [f"{where}: {', '.join(p)}: {text}" for where, text in MARKERS[rule] if (p := problems(text))]
    assert not bad, f"{len(bad)} marker(s) of {rule} are not one sentence of <= {LIMIT} characters:\n" + "\n".join(bad)


@pytest.mark.parametrize("rule", sorted(r for r, cls in RULES.items() if cls.markers))
def test_long_forms_reach_explain_and_the_report(rule):
    cls = RULES[rule]
    text = explain_text(cls.doc())
    for short, explanation in cls.doc().markers:
        assert short in text and explanation.split()[0] in text
        example = re.sub(r"\{[^{}]*\}", "x", short)
        assert cls.marker_detail(example) == explanation, short
        assert Finding(1, 1, rule, example, "manual", detail=explanation).to_json()["detail"] == explanation


# ------------------------------------------------------------------ the long form reaches the report


class _Explained(PythonRule):
    """A test rule whose marker has a long form in ``markers``."""

    id = "NM996"
    fix = "manual"
    triggers = ("EXPLAINED",)
    title = "test rule: a marker with a long form"
    markers = (("Replace {name} by hand.", "The old stack's {name} has no native equivalent; see the seeds."),)

    def handlers(self):
        return {cst.Name: self._on_name}

    def _on_name(self, node: cst.Name, ctx: PythonContext) -> None:
        if node.value.startswith("EXPLAINED"):
            ctx.marker(node, f"Replace {node.value} by hand.")


def rules():
    return tuple(r for r in all_rules() if r.id in ("NM900", "NM990")) + (_Explained(),)


def test_the_json_report_carries_the_long_form(tmp_path, monkeypatch):
    monkeypatch.setenv("NEURON_MIGRATE_RULES", "tests.test_marker_text:rules")
    script = tmp_path / "a.py"
    script.write_text("EXPLAINED_X = 1\nprint(EXPLAINED_X)\n")
    result = CliRunner().invoke(app, [str(script), "--format", "json", "--no-progress"], catch_exceptions=False)
    findings = [f for file in json.loads(result.stdout)["files"] for f in file["findings"]]
    details = {f["message"]: f.get("detail") for f in findings if f["rule"] == "NM996"}
    assert details == {"Replace EXPLAINED_X by hand.": "The old stack's {name} has no native equivalent; see the seeds."}
    assert "NM996" in explain_text(_Explained.doc()) and "no native equivalent" in explain_text(_Explained.doc())


def test_every_nm900_advice_has_its_own_long_form():
    """NM900's markers pair each advice of ADVICE with its explanation by position: one missing shifts the rest."""
    from codemods.common.leftovers import ADVICE, OldStackLeftovers

    long_forms = dict(OldStackLeftovers.markers)
    assert all(text in long_forms for _, text in ADVICE)
    firsts = {text: long_forms[text].split()[0] for _, text in ADVICE}
    assert firsts[ADVICE[0][1]] == "optimum.neuron.utils.ecr.image_uri" and firsts[ADVICE[1][1]] == "optimum-neuron" and firsts[ADVICE[-1][1]] == "neuronx-distributed"
