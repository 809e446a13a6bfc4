"""NM401-NM406 (codemods/xla/core.py): the migrated code runs and uses only torch APIs that exist.

The fixtures (tests/fixtures/NM40x) pin the exact output; these tests check what exact output
cannot: that a migrated training script still trains to the same numbers, that a migrated
torchrun script still runs as several processes, that every torch / os name the rules emit
exists, and that nothing the rules own is left behind without a marker.

There is no Trainium here, so the migrated scripts run on the CPU: the tests replace the device
string ``"neuron"`` by ``"cpu"`` (and the backend ``"neuron"`` by ``"gloo"``) in the migrated
source before running it, and make ``torch.accelerator.synchronize()`` a no-op when no
accelerator exists (it raises then). Nothing else of the migrated text is changed.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from codemods.common.accelerators import serves_other_accelerators
from codemods.common.leftovers import OTHER_XLA_MARKER
from codemods.xla.gates import SIDE_BY_SIDE_MARKER
from codemods.xla.core import RULES
from migrator.engine import RuleSelection, RuleSet
from tests.torchrun_util import torchrun
from tests.test_fixtures import FIXTURES, migrate

XLA_FIXTURES = sorted(FIXTURES.glob("NM40*/*.after.py"))
OWNED = {name: rule.id for rule in RULES for name in rule.owns}

# run a script as __main__ after making torch.accelerator.synchronize() harmless on a machine
# without an accelerator (on Trainium it waits for the NeuronCore)
BOOTSTRAP = textwrap.dedent(
    """
    import runpy, sys, torch
    if not torch.accelerator.is_available():
        torch.accelerator.synchronize = lambda *args, **kwargs: None
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
    """
)


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def _on_cpu(source: str) -> str:
    """The migrated source with the Neuron device and backend mapped to their CPU twins."""
    return source.replace('backend="neuron"', 'backend="gloo"').replace('"neuron"', '"cpu"')


def _run(script: Path, command: list[str], env: dict | None = None, timeout: int = 180) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, *command], capture_output=True, text=True, timeout=timeout, cwd=script.parent, env=full_env
    )


# --------------------------------------------------------------------------- the MLP still trains


def _reference_losses(steps: int = 20) -> list[float]:
    """The training loop of NM402/mlp_single_process written in plain PyTorch by hand."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()
    data = torch.randn(64, 16)
    target = torch.randint(0, 4, (64,))
    losses = []
    for step in range(steps):
        start = (step * 8) % 64
        optimizer.zero_grad()
        loss = loss_fn(model(data[start:start + 8]), target[start:start + 8])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_migrated_single_process_mlp_trains_like_plain_pytorch(tmp_path: Path, rules: RuleSet):
    before = FIXTURES / "NM402" / "mlp_single_process.before.py"
    migrated, findings = migrate(before.read_bytes(), "python", rules)
    text = migrated.decode()
    assert "torch_xla" not in text and not any(f.fix == "manual" for f in findings)
    script = tmp_path / "train.py"
    script.write_text(_on_cpu(text))
    proc = _run(script, ["-c", BOOTSTRAP, str(script)])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    losses = json.loads(lines[-1])
    assert losses == _reference_losses()
    # xm.master_print became a rank-0 print: a single process is rank 0 and prints
    assert [ln for ln in lines[:-1] if ln.startswith("step ")] == [
        f"step {s} loss {losses[s]:.4f}" for s in range(0, 20, 5)
    ]


# --------------------------------------------------------------------------- torchrun script runs


def test_migrated_torchrun_script_runs_on_two_processes(tmp_path: Path, rules: RuleSet):
    before = FIXTURES / "NM405" / "torchrun_data_parallel.before.py"
    migrated, _ = migrate(before.read_bytes(), "python", rules)
    script = tmp_path / "train.py"
    script.write_text(_on_cpu(migrated.decode()))
    proc = _run(script, torchrun(tmp_path, script)[1:], env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # master_print -> printed by global rank 0 only; xm.save -> written by local rank 0
    assert proc.stdout.count("training on 2 workers") == 1
    assert proc.stdout.count("epoch 1 loss") == 1
    assert proc.stdout.count("saved by local rank 0") == 1
    state = torch.load(tmp_path / "model.pt")
    assert set(state) == {"0.weight", "0.bias", "2.weight", "2.bias"}


# --------------------------------------------------------------------------- emitted names exist


def _import_map(tree: ast.Module) -> dict[str, str]:
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    names[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _qualified(node: ast.expr, names: dict[str, str]) -> str:
    """The imported name a Name/Attribute chain resolves to, or ""."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([names[node.id], *reversed(parts)]) if isinstance(node, ast.Name) and node.id in names else ""


def _chains(tree: ast.Module, names: dict[str, str]):
    """(qualified name, line) of every outermost Name/Attribute chain rooted at an import."""
    inner: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            inner.add(id(node.value))
    for node in ast.walk(tree):
        if id(node) in inner or not isinstance(node, (ast.Attribute, ast.Name)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            continue  # `xb = None`: rebinds the name, no use of the module
        parts = []
        cur = node
        while isinstance(cur, ast.Attribute):
            parts.append(cur.attr)
            cur = cur.value
        if isinstance(cur, ast.Name) and cur.id in names:
            yield ".".join([names[cur.id], *reversed(parts)]), node.lineno


def _resolve(qualified: str):
    parts = qualified.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(qualified)


@pytest.mark.parametrize("after", XLA_FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_emitted_torch_and_os_name_exists(after: Path):
    text = after.read_text()
    tree = ast.parse(text)
    names = _import_map(tree)
    checked = 0
    for qualified, line in _chains(tree, names):
        if qualified.split(".")[0] in ("torch", "os"):
            try:
                _resolve(qualified)
            except (ImportError, AttributeError) as exc:
                pytest.fail(f"{after.name}:{line}: {qualified} does not exist ({exc})")
            checked += 1
    if {"torch", "os"} & {q.split(".")[0] for q in names.values()}:
        assert checked, "nothing checked"


def test_the_rules_emit_exactly_these_torch_apis():
    """The native names the rules write, spelled out, exist in the installed torch."""
    for name in (
        "torch.device",
        "torch.save",
        "torch.accelerator.synchronize",
        "torch.distributed.init_process_group",
        "torch.distributed.barrier",
        "torch.distributed.get_rank",
        "torch.distributed.get_world_size",
        "os.environ",
    ):
        assert _resolve(name) is not None
    assert torch.device("cpu", int(os.environ.get("LOCAL_RANK", 0))).type == "cpu"


@pytest.mark.parametrize("after", XLA_FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_owned_names_left_only_under_a_marker(after: Path):
    """A name an NM40x rule owns survives only where that rule left a marker above it, or in a module that
    serves other XLA devices (TPUs), which the rules leave alone under one marker on its import or gate, or as
    the argument of a torch-xla call no rule rewrites (`xm.xla_device_hw(xm.xla_device())`), under that call's
    NM900 marker."""
    text = after.read_text()
    if serves_other_accelerators(text):
        if re.search(r"^\s*(?:import|from)\s+torch_xla", text, re.M):  # (one that imports none has none to mark)
            assert OTHER_XLA_MARKER in text or SIDE_BY_SIDE_MARKER in text
        return
    lines = text.splitlines()
    tree = ast.parse(text)
    names = _import_map(tree)
    statements = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    kept = {n.args[0].lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and n.args
            and isinstance(n.args[0], ast.Call) and _qualified(n.func, names).startswith("torch_xla")
            and _qualified(n.func, names) not in OWNED}
    for qualified, line in _chains(tree, names):
        rule = OWNED.get(qualified)
        if rule is None:
            continue
        # the innermost statement around the use: markers go above it
        first = max(st.lineno for st in statements if st.lineno <= line <= st.end_lineno)
        above = []
        i = first - 2
        while i >= 0 and lines[i].lstrip().startswith("#"):
            above.append(lines[i])
            i -= 1
        allowed = (rule, "NM900") if line in kept else (rule,)
        assert any(f"TODO(neuron-migrate {r})" in ln for ln in above for r in allowed), f"{after.name}:{line}: {qualified}"


# --------------------------------------------------------------------------- interplay with NM900


def test_nm900_flags_what_no_nm4xx_rule_rewrites(rules: RuleSet):
    source = textwrap.dedent(
        """\
        import torch
        import torch_xla.core.xla_model as xm

        xm.mark_step()
        xm.set_rng_state(0)
        """
    )
    migrated, findings = migrate(source.encode(), "python", rules)
    text = migrated.decode()
    assert "mark_step" not in text
    assert "import torch_xla.core.xla_model as xm" in text  # still used by set_rng_state
    flagged = {f.detail.split(" ")[0] for f in findings if f.rule == "NM900"}
    assert flagged == {"torch_xla.core.xla_model.set_rng_state"}


def test_import_disappears_with_its_last_use(rules: RuleSet):
    source = "import torch_xla.core.xla_model as xm\n\nxm.mark_step()\nn = xm.xrt_world_size()\n"
    migrated, findings = migrate(source.encode(), "python", rules)
    assert migrated.decode() == 'import os\n\nn = int(os.environ.get("WORLD_SIZE", 1))\n'
    assert {f.rule for f in findings} == {"NM402", "NM404"}


def test_nested_quotes_follow_the_enclosing_f_string(rules: RuleSet):
    source = "import torch_xla.core.xla_model as xm\n\nprint(f\"rank {xm.get_ordinal()}\")\nr = xm.get_ordinal()\n"
    migrated, _ = migrate(source.encode(), "python", rules)
    text = migrated.decode()
    assert "print(f\"rank {int(os.environ.get('RANK', 0))}\")" in text
    assert 'r = int(os.environ.get("RANK", 0))' in text
    compile(text, "<migrated>", "exec")  # valid before Python 3.12 (no same-quote nesting)


def test_is_master_ordinal_defaults_to_the_local_master(rules: RuleSet):
    source = (
        "import torch.distributed as dist\nimport torch_xla.core.xla_model as xm\n\n"
        "dist.init_process_group('xla')\na = xm.is_master_ordinal()\nb = xm.is_master_ordinal(local=False)\n"
    )
    text = migrate(source.encode(), "python", rules)[0].decode()
    assert "a = int(os.environ.get('LOCAL_RANK', 0)) == 0" in text
    assert "b = dist.get_rank() == 0" in text
    assert "dist.init_process_group(backend='neuron')" in text


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_explain_examples_are_real_output(rule, rules: RuleSet):
    """`neuron-migrate explain NM40x` shows what the rule really does to its example."""
    doc = rule.doc()
    migrated, findings = migrate((doc.before + "\n").encode(), "python", rules)
    assert migrated.decode().strip("\n") == doc.after
    assert any(f.rule == rule.id for f in findings)


def test_a_rank_queried_before_init_runs_without_a_process_group(tmp_path):
    """NM404's rank_before_init fixture, run in one process (gloo for neuron): the migrated rank query before
    init_process_group reads the environment; dist.get_rank() there raised 'Default process group has not been
    initialized'."""
    import torch.distributed as dist

    text = (FIXTURES / "NM404" / "rank_before_init.after.py").read_text()
    assert 'rank = int(os.environ.get("RANK", 0))' in text
    env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29531"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        scope: dict = {}
        exec(compile(text.replace('backend="neuron"', 'backend="gloo"'), "migrated.py", "exec"), scope)
        assert scope["setup"](False) == 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
