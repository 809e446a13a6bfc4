"""NM412-NM414 (codemods/xla/collectives.py, codemods/xla/neuronx_distributed.py): emitted code runs, names exist.

The fixtures (tests/fixtures/NM412..NM414) pin the exact output; these tests check that a
migrated collective script computes what hand-written torch.distributed code computes under
torchrun (on the CPU: device "neuron" -> "cpu", backend "neuron" -> "gloo"), that every torch
API the rules emit or name in a marker exists, and that `explain` shows real output.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from codemods.xla.neuronx_distributed import RULES as NXD_RULES
from codemods.xla.collectives import RULES as COLLECTIVE_RULES
from migrator.engine import RuleSelection, RuleSet
from tests.torchrun_util import torchrun
from tests.test_fixtures import FIXTURES, migrate

RULES = COLLECTIVE_RULES + NXD_RULES
AFTERS = sorted(p for rid in ("NM412", "NM413", "NM414") for p in (FIXTURES / rid).glob("*.after.py"))


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def _resolve(dotted: str):
    """Import the longest importable module prefix of ``dotted`` and walk the rest as attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(dotted)


# --------------------------------------------------------------------------- emitted names exist


def _emitted_torch_names(text: str) -> set[str]:
    """``dist.X`` / ``torch.X.Y`` attribute chains used in the migrated code (not in markers)."""
    tree = ast.parse(text)
    aliases = {"dist": "torch.distributed", "torch": "torch"}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, cur = [], node
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in aliases:
                found.add(".".join([aliases[cur.id], *reversed(chain)]))
    return found


@pytest.mark.parametrize("after", AFTERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_emitted_torch_name_exists(after: Path):
    for name in _emitted_torch_names(after.read_text()):
        _resolve(name)


MARKER_APIS = (
    "torch.distributed.all_reduce", "torch.distributed.all_gather", "torch.distributed.all_gather_into_tensor",
    "torch.distributed.all_gather_object", "torch.distributed.ReduceOp.SUM", "torch.distributed.ReduceOp.PRODUCT",
    "torch.distributed.ReduceOp.BAND", "torch.distributed.ReduceOp.BOR", "torch.distributed.ReduceOp.MIN",
    "torch.distributed.ReduceOp.MAX", "torch.distributed.new_group", "torch.distributed.barrier",
    "torch.distributed.fsdp.fully_shard", "torch.distributed.fsdp.MixedPrecisionPolicy",
    "torch.distributed.optim.ZeroRedundancyOptimizer", "torch.distributed.device_mesh.init_device_mesh",
    "torch.distributed.tensor.parallel.parallelize_module", "torch.distributed.tensor.parallel.ColwiseParallel",
    "torch.distributed.tensor.parallel.RowwiseParallel", "torch.distributed.tensor.parallel.loss_parallel",
    "torch.distributed.checkpoint.save", "torch.distributed.checkpoint.load",
    "torch.distributed.is_initialized", "torch.distributed.destroy_process_group",
    "torch.nn.parallel.DistributedDataParallel", "torch.distributed.device_mesh.DeviceMesh.get_local_rank",
    "torch.distributed.device_mesh.DeviceMesh.get_group", "torch.distributed.device_mesh.DeviceMesh.size",
    "transformers.distributed.DistributedConfig",
)


@pytest.mark.parametrize("name", MARKER_APIS)
def test_every_api_named_in_messages_exists(name: str):
    _resolve(name)


def test_messages_name_only_listed_apis():
    """The native APIs the rules' messages name are among MARKER_APIS (checked above)."""
    import codemods.xla.neuronx_distributed as nxd
    import codemods.xla.collectives as xc

    text = json.dumps([nxd.NATIVES, nxd._PS_NATIVE, xc.XlaCollectives.natives, xc.XlaShardingWrappers.natives])
    for short in ("ColwiseParallel", "RowwiseParallel", "parallelize_module", "loss_parallel", "init_device_mesh",
                  "fully_shard", "ZeroRedundancyOptimizer", "all_gather_object", "DistributedConfig",
                  "get_local_rank", "get_group", "torch.distributed.checkpoint.save"):
        assert short in text
    assert all(any(name.endswith(short) or short in name for name in MARKER_APIS) for short in (
        "ColwiseParallel", "RowwiseParallel", "parallelize_module", "loss_parallel", "init_device_mesh"))


# --------------------------------------------------------------------------- explain


def _same(expected: str, actual: str) -> None:
    """Equal line by line; an expected line with ``...`` only pins the text before it."""
    exp, act = expected.splitlines(), actual.splitlines()
    assert len(exp) == len(act), actual
    for e, a in zip(exp, act):
        if "..." in e and e.lstrip().startswith("# TODO"):
            assert a.startswith(e.split("...")[0].rstrip("(").rstrip()), (e, a)
        else:
            assert e == a, actual


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_explain_examples_are_real_output(rule, rules: RuleSet):
    doc = rule.doc()
    migrated, findings = migrate((doc.before + "\n").encode(), "python", rules)
    _same(doc.after, migrated.decode().strip("\n"))
    assert any(f.rule == rule.id for f in findings)


# --------------------------------------------------------------------------- ownership


def test_nm900_does_not_flag_owned_names(rules: RuleSet):
    for before in sorted(FIXTURES.glob("NM41[234]/*.before.py")):
        _, findings = migrate(before.read_bytes(), "python", rules)
        assert not [f for f in findings if f.rule == "NM900"], before


# --------------------------------------------------------------------------- runs under torchrun

SCRIPT = textwrap.dedent(
    """
    import json
    import os
    import sys
    import torch
    import torch.distributed as dist
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.xla_backend

    dist.init_process_group("xla")
    device = xm.xla_device()
    rank = dist.get_rank()
    x = torch.arange(4, dtype=torch.float32, device=device) + rank
    total = xm.all_reduce(xm.REDUCE_SUM, x, scale=0.5)
    a = torch.full((2,), float(rank), device=device)
    b = torch.full((3,), float(rank + 1), device=device)
    xm.all_reduce(xm.REDUCE_MAX, [a, b])
    gathered = xm.all_gather(x, dim=0)
    mean = xm.mesh_reduce("mean", float(rank), max)
    m = x.view(2, 2)
    m = xm.all_gather(m, dim=1)
    r = float(rank)
    r = xm.mesh_reduce("r", r, sum)
    result = {"m": m.tolist(), "r": r, "x": x.tolist(), "total": total.tolist(), "a": a.tolist(), "b": b.tolist(),
              "gathered": gathered.tolist(), "mean": mean}
    with open(os.path.join(sys.argv[1], f"out{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()
    """
)

REFERENCE = textwrap.dedent(
    """
    import json
    import os
    import sys
    import torch
    import torch.distributed as dist

    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    world = dist.get_world_size()
    x = torch.arange(4, dtype=torch.float32) + rank
    total = x.clone()
    dist.all_reduce(total)
    total = total * 0.5
    a = torch.full((2,), float(rank))
    b = torch.full((3,), float(rank + 1))
    dist.all_reduce(a, op=dist.ReduceOp.MAX)
    dist.all_reduce(b, op=dist.ReduceOp.MAX)
    parts = [torch.zeros(4) for _ in range(world)]
    dist.all_gather(parts, x)
    values = [None] * world
    dist.all_gather_object(values, float(rank))
    m_parts = [torch.zeros(2, 2) for _ in range(world)]
    dist.all_gather(m_parts, x.view(2, 2))
    result = {"m": torch.cat(m_parts, dim=1).tolist(), "r": sum(values), "x": x.tolist(), "total": total.tolist(), "a": a.tolist(), "b": b.tolist(),
              "gathered": torch.cat(parts).tolist(), "mean": max(values)}
    with open(os.path.join(sys.argv[1], f"out{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()
    """
)


def _torchrun(script: Path, out: Path) -> None:
    out.mkdir()
    proc = subprocess.run(
        torchrun(script.parent, script, str(out)),
        capture_output=True, text=True, timeout=120, cwd=script.parent, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_migrated_collectives_match_hand_written_torch_distributed(tmp_path: Path, rules: RuleSet):
    migrated, findings = migrate(SCRIPT.encode(), "python", rules)
    text = migrated.decode()
    assert "xm." not in text and "torch_xla" not in text and "TODO" not in text, text
    assert [f.rule for f in findings].count("NM412") == 6
    script = tmp_path / "migrated.py"
    script.write_text(text.replace('backend="neuron"', 'backend="gloo"').replace('"neuron"', '"cpu"'))
    reference = tmp_path / "reference.py"
    reference.write_text(REFERENCE)
    _torchrun(script, tmp_path / "migrated")
    _torchrun(reference, tmp_path / "reference")
    for rank in (0, 1):
        got = json.loads((tmp_path / "migrated" / f"out{rank}.json").read_text())
        want = json.loads((tmp_path / "reference" / f"out{rank}.json").read_text())
        assert got == want
    # the input of the single-tensor all_reduce is unchanged (xm.all_reduce returned a new tensor)
    assert json.loads((tmp_path / "migrated" / "out1.json").read_text())["x"] == [1.0, 2.0, 3.0, 4.0]


def test_a_second_destroy_process_group_raises_so_nm414_says_delete(tmp_path):
    """NM414: where the code destroys the process group itself, destroy_model_parallel() is to be deleted, not replaced
    by dist.destroy_process_group() (fixture NM414/destroy_then_destroy): a second destroy raises."""
    import torch.distributed as dist

    after = (Path(__file__).parent / "fixtures" / "NM414" / "destroy_then_destroy.after.py").read_text()
    assert "Delete this call: the code destroys the process group itself." in after
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    dist.destroy_process_group()
    with pytest.raises((AssertionError, ValueError, RuntimeError)):
        dist.destroy_process_group()
