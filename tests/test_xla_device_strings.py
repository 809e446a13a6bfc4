"""NM401 device/backend strings and NM410 traced-model calls (codemods/xla/core.py, codemods/xla/torch_neuronx.py).

The fixtures (NM401/devkind, NM401/strings_without_torch_xla_import, NM410/trace_calls) pin the
exact output; these tests pin what the fixtures cannot: the backend list matches torch, the
trigger lets a file without a torch_xla import through, and moved inputs are only moved once.
"""

from __future__ import annotations

import pytest

from codemods.xla import core as xla
from migrator.engine import RuleSelection, RuleSet
from tests.test_fixtures import migrate


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def test_every_xla_backend_torch_registers_is_rewritten():
    import torch._dynamo

    registered = {name for name in torch._dynamo.list_backends(exclude_tags=()) if "xla" in name}
    assert registered and registered <= set(xla._XLA_BACKENDS)


def _run(source: str, rules: RuleSet) -> tuple[str, list[str]]:
    out, findings = migrate(source.encode(), "python", rules)
    return out.decode(), [f.rule for f in findings]


def test_device_type_tests_become_neuron_without_a_torch_xla_import(rules: RuleSet):
    text, found = _run('ok = x.device.type == "xla" or "xla" == y.type\n', rules)
    assert text == 'ok = x.device.type == "neuron" or "neuron" == y.type\n'
    assert found.count("NM401") == 2


@pytest.mark.parametrize("source", [
    'mode = "xla"\n',                              # a plain value: not a device position
    'same = args.device_type == "xla"\n',          # a user variable, maybe read from a config
    'ok = x.device.type == "xla:0"\n',             # never a device type (indexes are not types)
    'm = torch.compile(model, backend="inductor")\n',
    'm = torch.compile(model, mode="openxla")\n',  # not the backend argument
])
def test_other_xla_strings_are_left_alone(source: str, rules: RuleSet):
    text, found = _run(source, rules)
    assert text == source and "NM401" not in found


@pytest.mark.parametrize("kind", ['"TPU"', '"NEURON"', "kind"])
def test_devkind_is_dropped_when_it_can_name_the_neuron_device(kind: str, rules: RuleSet):
    text, found = _run(f"import torch_xla.core.xla_model as xm\nd = xm.xla_device(2, devkind={kind})\n", rules)
    assert text == 'import torch\nd = torch.device("neuron", 2)\n'
    assert "TODO" not in text


def test_a_trace_call_site_is_moved_once_and_idempotently(rules: RuleSet):
    source = ("import torch_neuronx\n\n\ndef f(model, x):\n    m = torch_neuronx.trace(model, x)\n"
              "    return m(x), m(x.cpu()), m(x.to('neuron'))\n")
    text, _ = _run(source, rules)
    assert "return m(x.to('neuron')), m(x.to('neuron')), m(x.to('neuron'))\n" in text
    assert _run(text, rules)[0] == text


def test_the_compiled_module_facts_the_nm410_rewrites_rely_on():
    """torch.compile wraps the live module: its own state dict prefixes the keys with `_orig_mod.`
    (the rewrite saves `<compiled>._orig_mod.state_dict()`, the model's keys), a second compile no
    longer returns a module (the rewrite drops it), and the original module inside is the very object
    that was compiled."""
    import torch

    model = torch.nn.Linear(3, 2)
    compiled = torch.compile(model, backend="eager")
    assert set(compiled.state_dict()) == {"_orig_mod.weight", "_orig_mod.bias"}
    assert set(compiled._orig_mod.state_dict()) == set(model.state_dict()) == {"weight", "bias"}
    assert compiled._orig_mod is model
    twice = torch.compile(compiled, backend="eager")
    assert not isinstance(twice, torch.nn.Module)  # a function: .state_dict(), .to(), .eval() are gone
    # assigning the compiled module inside the module it wraps makes the module contain itself
    holder = torch.nn.Module()
    holder.inner = torch.nn.Linear(2, 2)
    wrapped = torch.compile(holder, backend="eager")
    holder.forward_neuron = wrapped
    with pytest.raises(RecursionError):
        list(holder.state_dict())


def test_a_device_with_an_index_never_equals_the_bare_device_but_its_type_does():
    """The premise of NM401's ``t.device == xm.xla_device()`` -> ``t.device.type == "neuron"``
    (fixture NM401/device_equality): tensors on an accelerator report their device with its index
    (``neuron:0``), and such a device differs from the bare ``torch.device("neuron")``."""
    import torch

    indexed, bare = torch.device("cpu", 0), torch.device("cpu")
    assert indexed != bare
    assert indexed.type == bare.type == "cpu"


def test_a_device_flag_given_to_a_callee_that_tests_it_in_another_file_is_marked_not_renamed(tmp_path):
    """NM401: device="xla" passed to the project's own class whose module tests `device == "xla"` (a mode flag picking
    a branch) gets a marker; the same call in a project that compares nothing with "xla" is renamed."""
    from migrator.discover import Candidate
    from migrator.engine import run

    caller = 'import torch_xla.core.xla_model as xm\nfrom wrapper import Wrapper\n\nw = Wrapper(device="xla")\n'
    callee = ('class Wrapper:\n    def __init__(self, device="cpu"):\n'
              '        self.cache = [] if device == "xla" else None\n')

    def migrated(files: dict[str, str]) -> str:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text)
        results = run([Candidate(folder / n, n, "python") for n in files], RuleSelection(), jobs=1)
        return next(r.new_bytes.decode() for r in results if r.path == "main.py")

    flagged = migrated({"main.py": caller, "wrapper.py": callee})
    assert 'device="xla"' in flagged and "NM401): Pass \"neuron\" here" in flagged
    plain = migrated({"main.py": caller, "wrapper.py": callee.replace('device == "xla"', "device is not None")})
    assert 'device="neuron"' in plain and "NM401" not in plain
