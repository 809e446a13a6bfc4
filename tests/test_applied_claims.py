"""An [applied] finding names an edit that is in the output: the pipeline load does not claim the shapes
passed to a call in another method; the call reports them where the edit lands, or marks that it cannot."""

from __future__ import annotations

from migrator.engine import RuleSelection, RuleSet, migrate_text

LOAD = '''from optimum.neuron import NeuronStableDiffusionPipeline


class Painter:
    def __init__(self, model_dir, side):
        self.pipe = NeuronStableDiffusionPipeline.from_pretrained(
            model_dir, export=True, batch_size=1, height={h}, width={w})

    def paint(self, prompt):
        return self.pipe(prompt).images[0]
'''


def _run(source: str):
    return migrate_text(source, "python", RuleSet.from_selection(RuleSelection()))


def _call_line(text: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if "self.pipe(prompt" in line)


def test_shapes_not_copyable_to_another_method_are_marked_not_claimed():
    source = LOAD.format(h="side", w="side")
    out, findings = _run(source)
    assert "self.pipe(prompt).images" in out  # the call is unchanged
    applied = [f for f in findings if f.fix == "applied" and f.rule == "NM104"]
    assert not any("height" in f.message for f in applied)
    marked = [f for f in findings if f.fix == "manual" and "height=" in f.message]
    assert [f.line for f in marked] == [_call_line(source)]  # finding lines are those of the input


def test_literal_shapes_are_reported_on_the_call_that_gets_them():
    source = LOAD.format(h="512", w="512")
    out, findings = _run(source)
    assert "self.pipe(prompt, height=512, width=512)" in out
    applied = [f for f in findings if f.fix == "applied" and "height=512" in f.message]
    assert [f.line for f in applied] == [_call_line(source)]  # finding lines are those of the input
