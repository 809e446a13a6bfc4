"""NM410's moves of a compiled model's inputs and outputs (codemods/xla/torch_neuronx.py): tensors move, containers
do not; numpy() takes CPU tensors only. The runtime facts, and the migrated code run on CPU."""

from __future__ import annotations

import textwrap

import pytest
import torch

from migrator.engine import RuleSelection, RuleSet
from tests.plugin_stub import plugin_in_process
from tests.test_fixtures import migrate


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def test_a_tuple_has_no_to_each_tensor_moves():
    example = (torch.ones(2), torch.zeros(3))
    with pytest.raises(AttributeError):
        example.to("meta")  # type: ignore[attr-defined]
    moved = tuple(t.to("meta") for t in example)
    assert isinstance(moved, tuple) and [t.device.type for t in moved] == ["meta", "meta"]
    assert [t.device.type for t in [t.to("meta") for t in list(example)]] == ["meta", "meta"]


def test_numpy_takes_cpu_tensors_only():
    """An output on another device than the CPU (the neuron device; here: meta) refuses numpy()."""
    with pytest.raises(TypeError, match="cpu"):
        torch.ones(2, device="meta").numpy()
    assert torch.ones(2).cpu().numpy().tolist() == [1.0, 1.0]


SOURCE = '''
    import torch
    import torch_neuronx


    def run(model, ids, mask):
        example = (ids, mask)
        pair = [ids, mask]
        traced = torch_neuronx.trace(model, example)
        first = traced(example)
        second = traced(pair)
        third = traced(*pair)
        logits = traced(ids, mask)[0].detach().numpy()
        return first, second, third, logits
'''


class _Model(torch.nn.Module):
    """Takes (ids, mask), or one container of both."""

    def forward(self, ids, mask=None):
        if mask is None:
            ids, mask = ids
        return (ids * mask,)


def test_migrated_container_calls_run(rules, monkeypatch):
    plugin_in_process(monkeypatch)  # the migration keeps `import torch_neuronx`
    out, findings = migrate(textwrap.dedent(SOURCE).encode(), "python", rules)
    text = out.decode()
    assert 'tuple(t.to("neuron") for t in example)' in text
    assert '[t.to("neuron") for t in pair]' in text
    assert ".detach().cpu().numpy()" in text
    # run it on CPU: the compile is the identity, the neuron device the CPU
    text = text.replace('"neuron"', '"cpu"')
    namespace: dict = {}
    saved = torch.compile
    torch.compile = lambda model, **kwargs: model  # type: ignore[assignment]
    try:
        exec(compile(text, "migrated", "exec"), namespace)
        ids, mask = torch.arange(4.0), torch.tensor([1.0, 0.0, 1.0, 0.0])
        first, second, third, logits = namespace["run"](_Model(), ids, mask)
    finally:
        torch.compile = saved
    assert first[0].tolist() == second[0].tolist() == third[0].tolist() == [0.0, 0.0, 2.0, 0.0]
    assert logits.tolist() == [0.0, 0.0, 2.0, 0.0]
    # the original code fails where the migrated one passes the container itself
    with pytest.raises(AttributeError):
        (ids, mask).to("cpu")  # type: ignore[attr-defined]
