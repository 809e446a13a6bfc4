"""A ``try: import X ... except ImportError:`` gate keeps the imports that decide it when the
migration removes the ones whose uses it rewrote (migrator/python_engine.py ``_gate_keepers``):
otherwise the gate always passes and the script takes its Neuron branch on every host."""

from __future__ import annotations

import textwrap

import pytest

from migrator.engine import RuleSelection, RuleSet
from tests.test_fixtures import migrate

GATE = """\
import torch

try:
    import torch_neuronx
    import torch_xla.core.xla_model as xm
    NEURON = True
except ImportError:
    NEURON = False


def device():
    return xm.xla_device() if NEURON else torch.device("cpu")
"""


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def _out(source: str, rules: RuleSet) -> str:
    out, _ = migrate(textwrap.dedent(source).encode(), "python", rules)
    return out.decode()


def test_the_gate_keeps_the_torchneuron_plugin_import(rules: RuleSet):
    text = _out(GATE, rules)
    assert "import torch_xla" not in text
    body = text.split("try:\n", 1)[1].split("except ImportError:", 1)[0]
    assert "import torch_neuronx" in body and "NEURON = True" in body
    assert "NM420" not in text  # the gate now tests for TorchNeuron: nothing to do there
    # runtime: on a host without the plugin (this one) the gate fails, as the original did without the old stack
    scope: dict = {}
    exec(compile(text, "migrated.py", "exec"), scope)
    assert scope["NEURON"] is False and scope["device"]() == __import__("torch").device("cpu")


def test_an_old_stack_only_gate_keeps_its_import_and_is_marked(rules: RuleSet):
    text = _out(GATE.replace("    import torch_neuronx\n", ""), rules)
    body = text.split("try:\n", 1)[1].split("except ImportError:", 1)[0]
    assert "import torch_xla.core.xla_model as xm" in body  # never an always-true gate
    assert "NM420" in text.split("try:\n", 1)[0]


def test_an_import_outside_a_gate_still_goes(rules: RuleSet):
    text = _out("import torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\n", rules)
    assert "torch_xla" not in text and 'torch.device("neuron")' in text
