"""A ``try: import X ... except ImportError:`` gate keeps the imports that decide it when the
migration removes the ones whose uses it rewrote (migrator/python_engine.py ``_gate_keepers``):
otherwise the gate always passes and the script takes its Neuron branch on every host."""

from __future__ import annotations

import textwrap
from pathlib import Path

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


RENAMED_GATE = """\
try:
    from optimum.neuron import NeuronModelForCausalLM
except ImportError:
    NeuronModelForCausalLM = None


def load(path):
    return NeuronModelForCausalLM.from_pretrained(path)
"""


def test_a_gate_of_renamed_imports_tests_for_the_native_library(rules: RuleSet):
    """Every old-stack import of the gate is one the rename table replaces with a used native import:
    that import takes its place (the gate now tests for Transformers, which the migrated branch uses); the
    old one kept beside it would fail on TorchNeuron and its except branch would unbind the native name."""
    text = _out(RENAMED_GATE, rules)
    body = text.split("try:\n", 1)[1].split("except ImportError:", 1)[0]
    assert body.strip() == "from transformers import AutoModelForCausalLM"
    assert "optimum" not in text and "NM420" not in text
    scope: dict = {}
    exec(compile(text, "migrated.py", "exec"), scope)  # this host has Transformers, not optimum-neuron
    assert scope["AutoModelForCausalLM"] is __import__("transformers").AutoModelForCausalLM


def test_a_gate_of_renamed_imports_is_idempotent(rules: RuleSet):
    once = _out(RENAMED_GATE, rules)
    assert _out(once, rules) == once


def test_an_import_outside_a_gate_still_goes(rules: RuleSet):
    text = _out("import torch_xla.core.xla_model as xm\n\ndevice = xm.xla_device()\n", rules)
    assert "torch_xla" not in text and 'torch.device("neuron")' in text


# A module that uses torch_xla as one optional backend beside CUDA/MPS and names Neuron nowhere (a generic
# library: its XLA branch serves TPUs) keeps its torch_xla code; the same module in a Neuron project is migrated
OTHER_ACCELERATORS = (Path(__file__).parent / "fixtures" / "NM420" / "other_accelerators.before.py").read_text()


def test_a_module_serving_other_xla_devices_keeps_its_xla_branch(rules: RuleSet):
    out = _out(OTHER_ACCELERATORS, rules)
    assert "return xm.xla_device()" in out and "xm.mark_step()" in out
    assert 'Add a hasattr(torch, "neuron") and torch.neuron.is_available() branch beside this torch_xla one' in out
    assert out.count("TODO(neuron-migrate") == 1


@pytest.mark.parametrize("change", [
    ('"""A generic handler', '"""A Trainium handler'),  # it names Neuron: its XLA branch is the Neuron one
    ("import torch\n", "import torch\nimport torch_xla\n"),  # torch_xla imported outside the gate too
    ("torch.cuda.is_available() and gpu_id is not None", "gpu_id is not None"),  # no other accelerator...
])
def test_a_neuron_module_with_an_xla_gate_is_migrated(rules: RuleSet, change):
    source = OTHER_ACCELERATORS.replace(*change)
    if "cuda" in change[0]:
        source = source.replace('torch.device("cuda", gpu_id)', 'torch.device("cpu")').replace(
            'torch.backends.mps.is_available()', 'False').replace('torch.device("mps")', 'None')
    out = _out(source, rules)
    assert "xm.xla_device()" not in out and "xm.mark_step()" not in out


def test_a_module_serving_other_xla_devices_is_migrated_in_one_run(rules: RuleSet):
    out = _out(OTHER_ACCELERATORS, rules)
    assert _out(out, rules) == out  # the marker names Neuron: it is not the module's own mention


PROBE = (Path(__file__).parent / "fixtures" / "NM420" / "xla_version_probe.before.py").read_text()


@pytest.mark.parametrize("change", [
    ("import pytest\n", "import pytest\n\n# runs on trn1 instances\n"),  # it names Neuron hardware: Neuron code
    ("    XLA_AVAILABLE = packaging", "    DEVICE = torch_xla.device()\n    XLA_AVAILABLE = packaging"),  # runs XLA code
])
def test_a_version_probe_that_is_neuron_code_gets_the_gate_marker(rules: RuleSet, change):
    out = _out(PROBE.replace(*change), rules)
    assert "These old-stack imports fail on TorchNeuron" in out
    assert "serves other XLA devices" not in out


def test_stdlib_imports_leave_a_failing_gate_and_the_module_runs(rules: RuleSet):
    """On a host without the old stack (this one, as a TorchNeuron host) the migrated module's function runs: the
    standard-library names it uses are bound after the gate (the original's failed with a NameError)."""
    source = (Path(__file__).parent / "fixtures" / "NM420" / "stdlib_imports_in_gate.before.py").read_text()
    torch = pytest.importorskip("torch")
    original: dict = {}
    exec(compile(source, "original.py", "exec"), original)
    with pytest.raises(NameError):
        original["where"](torch.zeros(1))
    migrated: dict = {}
    exec(compile(_out(source, rules), "migrated.py", "exec"), migrated)
    device, line, json = migrated["where"](torch.zeros(1))
    assert device == torch.device("cpu") and line > 0 and json is None  # the fallback's binding kept
