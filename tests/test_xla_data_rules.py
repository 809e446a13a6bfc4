"""NM407-NM410 (codemods/xla/data.py, codemods/xla/torch_neuronx.py): the migrated code runs.

The fixtures (tests/fixtures/NM407..NM410) pin the exact output; these tests check that the
torch APIs the rules emit exist, that nothing they own is left without a marker, and that
migrated scripts compute what a plain-PyTorch program written by hand computes:

* a torchrun data-parallel loop with ``pl.MpDeviceLoader``, ``xm.optimizer_step`` and
  ``DistributedSampler(num_replicas=xr.world_size(), rank=xr.global_ordinal())``, run as two
  processes;
* a ``torch_neuronx.trace`` inference script.

There is no Trainium here, so the migrated scripts run on the CPU. The ONLY changes made to the
migrated text before running it: the device string ``"neuron"`` becomes ``"cpu"``, the process
group backend ``"neuron"`` becomes ``"gloo"``, and ``torch.compile(..., backend="neuron")``
becomes ``backend="eager"`` (TorchDynamo capture without the Neuron compiler).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from codemods.xla.torch_neuronx import RULES as NX_RULES
from codemods.xla.transformers_neuronx import RULES as TNX_RULES
from codemods.xla.data import RULES as DATA_RULES
from migrator.engine import RuleSelection, RuleSet
from tests.plugin_stub import plugin_stub
from tests.torchrun_util import torchrun
from tests.test_fixtures import FIXTURES, migrate
from tests.test_xla_rules import _chains, _import_map, _resolve

RULES = DATA_RULES + NX_RULES + TNX_RULES
AFTERS = sorted(p for rid in ("NM407", "NM408", "NM409", "NM410", "NM411") for p in (FIXTURES / rid).glob("*.after.py"))
OWNED = {name: rule.id for rule in RULES for name in rule.owns}


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def _on_cpu(source: str) -> str:
    """The migrated source with the Neuron device, backend and compiler mapped to CPU twins."""
    source = re.sub(r'(torch\.compile\([^\n]*backend=)"neuron"', r'\1"eager"', source)
    return source.replace('backend="neuron"', 'backend="gloo"').replace('"neuron"', '"cpu"')


def _run(cwd: Path, args: list[str], timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    plugin_stub(cwd)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


# --------------------------------------------------------------------------- emitted APIs


def test_the_rules_emit_exactly_these_torch_apis():
    for name in (
        "torch.Tensor.to",
        "torch.autocast",
        "torch.bfloat16",
        "torch.optim.AdamW",
        "torch.optim.Adam",
        "torch.optim.SGD",
        "torch.compile",
        "torch.nn.Module.to",
        "torch.nn.Module.eval",
        "os.environ",
    ):
        assert _resolve(name) is not None
    # the emitted spellings are accepted by torch (device_type first, dtype keyword)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pass
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=False):
        pass
    compiled = torch.compile(torch.nn.Linear(2, 2).to("cpu").eval(), backend="eager", fullgraph=True, dynamic=False)
    assert compiled(torch.ones(1, 2)).shape == (1, 2)


@pytest.mark.parametrize("after", AFTERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_emitted_torch_and_os_name_exists(after: Path):
    tree = ast.parse(after.read_text())
    names = _import_map(tree)
    for qualified, line in _chains(tree, names):
        if qualified.split(".")[0] in ("torch", "os"):
            try:
                _resolve(qualified)
            except (ImportError, AttributeError) as exc:
                pytest.fail(f"{after.name}:{line}: {qualified} does not exist ({exc})")


@pytest.mark.parametrize("after", AFTERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_owned_names_left_only_under_a_marker(after: Path):
    text = after.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)
    statements = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    for qualified, line in _chains(tree, _import_map(tree)):
        rule = OWNED.get(qualified)
        if rule is None:
            continue
        first = max(st.lineno for st in statements if st.lineno <= line <= st.end_lineno)
        above, i = [], first - 2
        while i >= 0 and lines[i].lstrip().startswith("#"):
            above.append(lines[i])
            i -= 1
        assert any(f"TODO(neuron-migrate {rule})" in ln for ln in above), f"{after.name}:{line}: {qualified}"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_explain_examples_are_real_output(rule, rules: RuleSet):
    doc = rule.doc()
    migrated, findings = migrate((doc.before + "\n").encode(), "python", rules)
    assert migrated.decode().strip("\n") == doc.after
    assert any(f.rule == rule.id for f in findings)


def test_nm900_leaves_owned_names_to_their_rules(rules: RuleSet):
    source = textwrap.dedent(
        """\
        import torch_xla.debug.metrics as met
        import torch_xla.distributed.parallel_loader as pl

        def run(loader, device):
            for x in pl.MpDeviceLoader(loader, device):
                print(x)
            print(met.metrics_report())
            print(met.counter_names())
        """
    )
    migrated, findings = migrate(source.encode(), "python", rules)
    assert "x = x.to(device)" in migrated.decode()
    flagged = {f.detail.split(" ")[0] for f in findings if f.rule == "NM900"}
    assert flagged == {"torch_xla.debug.metrics.counter_names"}


@pytest.mark.parametrize(
    "body,expected",
    [
        ("out = model(**batch)", "batch = {k: v.to(device) for k, v in batch.items()}"),
        ("out = model(batch['input_ids'])", "batch = {k: v.to(device) for k, v in batch.items()}"),
        ("out = model(batch[0], batch[1])", "batch = [t.to(device) for t in batch]"),
        ("images, labels = batch", "batch = [t.to(device) for t in batch]"),
        ("out = model(batch)", "batch = batch.to(device)"),
    ],
)
def test_batch_kind_follows_its_use(body: str, expected: str, rules: RuleSet):
    source = (
        "import torch_xla.distributed.parallel_loader as pl\n\n\n"
        "def run(model, loader, device):\n"
        "    device_loader = pl.MpDeviceLoader(loader, device)\n"
        "    for batch in device_loader:\n"
        f"        {body}\n"
    )
    text = migrate(source.encode(), "python", rules)[0].decode()
    assert text == (
        "def run(model, loader, device):\n"
        "    for batch in loader:\n"
        f"        {expected}\n"
        f"        {body}\n"
    )


# --------------------------------------------------------------------------- the torchrun loop


def _reference_losses() -> dict[int, list[float]]:
    """NM407/torchrun_data_parallel written by hand in plain PyTorch: two ranks' batches, the
    gradients averaged as DistributedDataParallel does."""
    torch.manual_seed(0)
    dataset = torch.utils.data.TensorDataset(torch.randn(128, 16), torch.randint(0, 4, (128,)))
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()
    samplers = [torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=r) for r in (0, 1)]
    losses: dict[int, list[float]] = {0: [], 1: []}
    for epoch in range(2):
        for s in samplers:
            s.set_epoch(epoch)
        loaders = [torch.utils.data.DataLoader(dataset, batch_size=16, sampler=s) for s in samplers]
        for (x0, y0), (x1, y1) in zip(*loaders):
            optimizer.zero_grad()
            per_rank = [loss_fn(model(x0), y0), loss_fn(model(x1), y1)]
            ((per_rank[0] + per_rank[1]) / 2).backward()
            optimizer.step()
            for r in (0, 1):
                losses[r].append(per_rank[r].item())
    return losses


def test_migrated_device_loader_loop_trains_like_plain_ddp(tmp_path: Path, rules: RuleSet):
    before = FIXTURES / "NM407" / "torchrun_data_parallel.before.py"
    migrated, findings = migrate(before.read_bytes(), "python", rules)
    text = migrated.decode()
    assert "torch_xla" not in text and not any(f.fix == "manual" for f in findings)
    script = tmp_path / "train.py"
    script.write_text(_on_cpu(text))
    proc = _run(tmp_path, torchrun(tmp_path, script)[1:], timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the two ranks share stdout and their lines may interleave: match each report, not each line
    got = {int(r): ast.literal_eval(values) for r, values in re.findall(r"rank (\d) losses (\[[^\]]*\])", proc.stdout)}
    expected = _reference_losses()
    assert set(got) == {0, 1}
    for r in (0, 1):
        assert len(got[r]) == len(expected[r]) == 8
        assert torch.allclose(torch.tensor(got[r]), torch.tensor(expected[r]), rtol=1e-5, atol=1e-6), r


# --------------------------------------------------------------------------- torch_neuronx.trace


def test_migrated_trace_script_computes_the_reference_outputs(tmp_path: Path, rules: RuleSet):
    before = FIXTURES / "NM410" / "trace_inference.before.py"
    migrated, _ = migrate(before.read_bytes(), "python", rules)
    text = migrated.decode()
    assert "torch_neuronx." not in text and 'torch.compile(model.to("neuron").eval(), backend="neuron"' in text
    script = tmp_path / "infer.py"
    script.write_text(_on_cpu(text))
    proc = _run(tmp_path, [str(script)])
    assert proc.returncode == 0, proc.stderr
    printed = [ast.literal_eval(line) for line in proc.stdout.splitlines()]

    # the same computation written by hand in plain PyTorch
    torch.manual_seed(0)
    body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()
    torch.rand(8, 16)  # the example input, drawn before the batches
    expected = []
    with torch.no_grad():
        for _ in range(3):
            probs = body(torch.rand(8, 16)).softmax(-1)
            expected += [probs.sum(-1).tolist(), probs.argmax(-1).tolist()]
    assert len(printed) == len(expected) == 6
    for got, want in zip(printed, expected):
        assert torch.allclose(torch.tensor(got, dtype=torch.float64), torch.tensor(want, dtype=torch.float64))
    assert printed[1::2] == expected[1::2]  # the predicted classes, exactly


# --------------------------------------------------------------------------- transformers-neuronx


def test_migrated_sampling_script_generates_like_plain_transformers(tmp_path: Path, rules: RuleSet):
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         bos_token_id=1, eos_token_id=None, pad_token_id=0)
    checkpoint = tmp_path / "tiny-llama"
    LlamaForCausalLM(config).save_pretrained(checkpoint)

    before = FIXTURES / "NM411" / "runnable_llama.before.py"
    migrated, findings = migrate(before.read_bytes(), "python", rules)
    text = migrated.decode()
    assert "transformers_neuronx" not in text and not any(f.fix == "manual" for f in findings)
    script = tmp_path / "sample.py"
    script.write_text(_on_cpu(text))
    proc = _run(tmp_path, [str(script), str(checkpoint)])
    assert proc.returncode == 0, proc.stderr
    tokens = ast.literal_eval(proc.stdout.strip().splitlines()[-1])

    # plain Transformers, written by hand: what LlamaForSampling(...).sample(ids, 20, top_k=5) did
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    model.generation_config.cache_implementation = "static"
    model.generation_config.max_cache_len = 64
    torch.manual_seed(0)
    with torch.inference_mode():
        expected = model.generate(torch.tensor([[1, 5, 9, 3]]), max_length=20, do_sample=True, top_k=5,
                                  top_p=1.0, temperature=1.0)
    assert tokens == expected.tolist()
    assert len(tokens[0]) == 20
