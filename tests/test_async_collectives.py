"""NM417: a collective whose async handle is dropped becomes synchronous; the migrated code reads the
finished result on an eager backend (torchrun, 2 ranks, gloo on CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from migrator.engine import RuleSelection, RuleSet, migrate_text
from tests.torchrun_util import torchrun

pytest.importorskip("torch")

SCRIPT = textwrap.dedent("""
    import json
    import os
    import sys

    import torch
    import torch.distributed as dist
    import torch_xla.core.xla_model as xm


    def _reduce(input_):
        dist.all_reduce(input_, async_op=True)
        return input_


    def _gather(input_, world_size):
        parts = [torch.empty_like(input_) for _ in range(world_size)]
        dist.all_gather(parts, input_, async_op=True)
        return torch.cat(parts)


    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    big = torch.full((1 << 20,), float(rank + 1))  # large enough that an unfinished reduce would show
    total = _reduce(big.clone())
    gathered = _gather(torch.tensor([float(rank)]), world)
    with open(os.path.join(sys.argv[1], f"out{rank}.json"), "w") as f:
        json.dump({"min": total.min().item(), "max": total.max().item(), "gathered": gathered.tolist()}, f)
""")


def test_dropped_handles_become_synchronous_and_read_the_finished_result(tmp_path: Path):
    rules = RuleSet.from_selection(RuleSelection())
    migrated, findings = migrate_text(SCRIPT, "python", rules)
    assert "async_op" not in migrated and "torch_xla" not in migrated, migrated
    assert [f.rule for f in findings if f.fix == "applied"].count("NM417") == 2
    script = tmp_path / "migrated.py"
    script.write_text(migrated)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(torchrun(tmp_path, script, str(out)), capture_output=True, text=True, timeout=180,
                          cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in (0, 1):
        got = json.loads((out / f"out{rank}.json").read_text())
        assert got == {"min": 3.0, "max": 3.0, "gathered": [0.0, 1.0]}, (rank, got)


def test_a_kept_handle_or_a_module_without_torch_xla_is_left_alone():
    rules = RuleSet.from_selection(RuleSelection())
    kept = "import torch.distributed as dist\nimport torch_xla\n\nh = dist.all_reduce(t, async_op=True)\nh.wait()\n"
    plain = "import torch.distributed as dist\n\ndist.all_reduce(t, async_op=True)\n"
    assert "async_op=True" in migrate_text(kept, "python", rules)[0]
    assert migrate_text(plain, "python", rules)[0] == plain
