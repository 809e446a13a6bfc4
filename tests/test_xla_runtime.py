"""Runtime claims of the NM4xx rewrites, checked by running the migrated code on CPU under
torchrun + gloo with 2 processes (codemods/xla/core.py NM405, codemods/xla/collectives.py NM412,
NM403 in core.py).

As in tests/test_xla_rules.py, the migrated source is run with the backend ``"neuron"`` mapped to
``"gloo"`` and the device ``"neuron"`` to ``"cpu"``; nothing else of the migrated text changes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from migrator.engine import RuleSelection, RuleSet
from tests.test_fixtures import migrate
from tests.torchrun_util import json_reports, torchrun


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def _on_cpu(source: str) -> str:
    return source.replace('backend="neuron"', 'backend="gloo"').replace('"neuron"', '"cpu"')


def _migrated(source: str, rules: RuleSet) -> str:
    out, findings = migrate(textwrap.dedent(source).encode(), "python", rules)
    text = out.decode()
    assert "torch_xla" not in text, text
    assert not [f for f in findings if f.fix == "manual"], [f.message for f in findings if f.fix == "manual"]
    return text


def _torchrun(tmp_path: Path, script: Path, *args: str) -> subprocess.CompletedProcess:
    command = torchrun(tmp_path, script, *args)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)


# --------------------------------------------------------------------------- xm.save (NM405)

SAVE = """
import json
import sys

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm


def main(path):
    dist.init_process_group("xla")
    rank = xm.get_ordinal()
    state = {"weight": torch.full((2, 2), float(rank + 1)), "nested": [torch.arange(3) * (rank + 1)], "step": 7}
    xm.save(state, path)
    seen = torch.load(path)
    print(json.dumps({"rank": rank, "seen": seen["weight"][0, 0].item()}))


main(sys.argv[1])
"""

#: runs the migrated script with torch.save and Tensor.cpu watched: which rank saves, and whether
#: every tensor it saves came out of .cpu() (on Trainium they would be `neuron` tensors otherwise)
WATCH = '''
import json
import os
import runpy
import sys

import torch

moved, saves = set(), []
_cpu, _save = torch.Tensor.cpu, torch.save


def cpu(self, *args, **kwargs):
    out = _cpu(self, *args, **kwargs).clone()
    moved.add(id(out))
    return out


def save(obj, f, *args, **kwargs):
    tensors = [t for t in torch.utils._pytree.tree_leaves(obj) if isinstance(t, torch.Tensor)]
    saves.append({"tensors": len(tensors), "all_moved": all(id(t) in moved for t in tensors)})
    return _save(obj, f, *args, **kwargs)


torch.Tensor.cpu, torch.save = cpu, save
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
print(json.dumps({"watch": int(os.environ["RANK"]), "saves": saves}))
'''


def test_xm_save_writes_once_from_rank_0_with_cpu_tensors_then_waits(tmp_path: Path, rules: RuleSet):
    text = _migrated(SAVE, rules)
    assert "dist.barrier()" in text  # the rendezvous of xm.save is kept
    script = tmp_path / "save.py"
    script.write_text(_on_cpu(text))
    watch = tmp_path / "watch.py"
    watch.write_text(WATCH)
    target = tmp_path / "ckpt.pt"
    proc = _torchrun(tmp_path, watch, str(script), str(target))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    watched = {r["watch"]: r["saves"] for r in json_reports(proc.stdout, "watch")}
    assert watched == {0: [{"tensors": 2, "all_moved": True}], 1: []}  # only rank 0 writes, CPU tensors only
    # after the barrier, the other rank reads the complete file rank 0 wrote
    assert sorted((r["rank"], r["seen"]) for r in json_reports(proc.stdout, "rank")) == [(0, 1.0), (1, 1.0)]
    loaded = torch.load(target)  # no map_location
    assert loaded["step"] == 7 and loaded["nested"][0].tolist() == [0, 1, 2]
    assert all(t.device.type == "cpu" for t in (loaded["weight"], *loaded["nested"]))


# --------------------------------------------------------------------------- optimizer_step -> DDP (NM403)

STEP = """
import json

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm


def main():
    dist.init_process_group("xla")
    rank = xm.get_ordinal()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    torch.manual_seed(100 + rank)  # every rank sees other data
    x = torch.randn(8, 4)
    optimizer.zero_grad()
    model(x).pow(2).sum().backward()
    xm.optimizer_step(optimizer)  # applies grads + all-reduces across cores
    grads = [p.grad.flatten().tolist() for p in model.parameters()]
    weights = [p.detach().flatten().tolist() for p in model.parameters()]
    print(json.dumps({"rank": rank, "grads": grads, "weights": weights, "x": x.tolist()}))


main()
"""


def test_optimizer_step_becomes_ddp_and_the_ranks_step_with_the_averaged_gradient(tmp_path: Path, rules: RuleSet):
    text = _migrated(STEP, rules)
    assert "model = torch.nn.parallel.DistributedDataParallel(model, forward_sync_buffers=False)" in text
    assert "all-reduces across cores" not in text and "optimizer.step()" in text
    script = tmp_path / "step.py"
    script.write_text(_on_cpu(text))
    proc = _torchrun(tmp_path, script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reports = sorted(json_reports(proc.stdout, "rank"), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == [0, 1]
    assert reports[0]["grads"] == reports[1]["grads"] and reports[0]["weights"] == reports[1]["weights"]
    # the gradient is the mean of the two ranks' gradients, as xm.optimizer_step made it
    torch.manual_seed(0)
    reference = torch.nn.Linear(4, 2)
    per_rank = []
    for r in reports:
        reference.zero_grad()
        reference(torch.tensor(r["x"])).pow(2).sum().backward()
        per_rank.append([p.grad.flatten().clone() for p in reference.parameters()])
    mean = [(a + b) / 2 for a, b in zip(*per_rank)]
    for got, want in zip(reports[0]["grads"], mean):
        assert torch.allclose(torch.tensor(got), want, atol=1e-5)


GUARDED_STEP = """
import json
import sys

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--distributed":
        dist.init_process_group("xla")
    rank = dist.get_rank() if dist.is_initialized() else 0
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(rank + 1)
    optimizer.zero_grad()
    model(torch.randn(8, 4)).pow(2).sum().backward()
    xm.optimizer_step(optimizer)
    print(json.dumps({"rank": rank, "grads": [p.grad.flatten().tolist() for p in model.parameters()]}))


main()
"""


def test_ddp_wrap_under_a_conditional_process_group_runs_single_process_too(tmp_path: Path, rules: RuleSet):
    text = _migrated(GUARDED_STEP, rules)
    assert ("if torch.distributed.is_initialized():\n        model = torch.nn.parallel.DistributedDataParallel(model, "
            "forward_sync_buffers=False)") in text
    script = tmp_path / "step.py"
    script.write_text(_on_cpu(text))
    # one process, no process group: the DDP wrap is skipped and the script steps as before
    single = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert single.returncode == 0, single.stdout + single.stderr
    # two processes with the group: DDP averages the gradients, as xm.optimizer_step did
    proc = _torchrun(tmp_path, script, "--distributed")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reports = sorted(json_reports(proc.stdout, "rank"), key=lambda r: r["rank"])
    assert [r["rank"] for r in reports] == [0, 1] and reports[0]["grads"] == reports[1]["grads"]


# --------------------------------------------------------------------------- xm.all_reduce('sum', t) (NM412)

REDUCE = """
import json

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm


def main():
    dist.init_process_group("xla")
    rank = xm.get_ordinal()
    value = torch.tensor([float(rank + 1), 10.0 * (rank + 1)])
    total = xm.all_reduce('sum', value)
    biggest = xm.all_reduce("max", value, scale=0.5)
    print(json.dumps({"rank": rank, "total": total.tolist(), "biggest": biggest.tolist(), "value": value.tolist()}))


main()
"""


def test_string_reduce_types_reduce_like_the_constants(tmp_path: Path, rules: RuleSet):
    text = _migrated(REDUCE, rules)
    assert "dist.ReduceOp.SUM" in text and "dist.ReduceOp.MAX" in text
    script = tmp_path / "reduce.py"
    script.write_text(_on_cpu(text))
    proc = _torchrun(tmp_path, script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reports = sorted(json_reports(proc.stdout, "rank"), key=lambda r: r["rank"])
    assert [r["total"] for r in reports] == [[3.0, 30.0], [3.0, 30.0]]
    assert [r["biggest"] for r in reports] == [[1.0, 10.0], [1.0, 10.0]]
    assert [r["value"] for r in reports] == [[1.0, 10.0], [2.0, 20.0]]  # the input is left as it was


# --------------------------------------------------------------------------- xm.mesh_reduce inline (NM412)

MESH_REDUCE = """
import json

import numpy as np
import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm


class Tracker:
    def update(self, value):
        self.best = xm.mesh_reduce("best", value, max)
        xm.mesh_reduce("sync", 0, lambda xs: xs)
        return xm.mesh_reduce("values", value, lambda xs: sorted(xs))


dist.init_process_group("xla")
rank = xm.get_ordinal()
loss = torch.tensor(float(rank + 1))
tracker = Tracker()
gathered = tracker.update(10 * (rank + 1))
if xm.mesh_reduce("loss", loss.item(), np.mean) > 1.0:
    mean = "above"
print(json.dumps({"rank": rank, "best": tracker.best, "gathered": gathered, "mean": mean,
                  "printed": float(xm.mesh_reduce("loss2", loss.item(), np.mean))}))
"""


def test_mesh_reduce_inside_expressions_reduces_the_values_of_every_rank(tmp_path: Path, rules: RuleSet):
    # torch-xla: mesh_reduce(tag, data, reduce_fn) returns reduce_fn([data of rank 0, rank 1, ...]) on every rank
    text = _migrated(MESH_REDUCE, rules)
    assert text.count("all_gather_object") == 5, text
    script = tmp_path / "mesh_reduce.py"
    script.write_text(_on_cpu(text))
    proc = _torchrun(tmp_path, script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reports = sorted(json_reports(proc.stdout, "rank"), key=lambda r: r["rank"])
    assert [r["best"] for r in reports] == [20, 20]
    assert [r["gathered"] for r in reports] == [[10, 20], [10, 20]]
    assert [r["mean"] for r in reports] == ["above", "above"]
    assert [r["printed"] for r in reports] == [1.5, 1.5]


# --------------------------------------------------------------------------- collectives where only a Trainer makes the group (NM412)

TRAINER_GROUP = """
import json
import os

import torch
import torch_xla.core.xla_model as xm
from transformers import TrainingArguments

args = TrainingArguments(output_dir=os.environ["OUT"], report_to=[], use_cpu=True)
rank = int(os.environ.get("RANK", 0))
value = torch.tensor([float(rank + 1)])
xm.all_reduce(xm.REDUCE_SUM, [value])
mine = torch.tensor([float(rank)])
everyone = xm.all_gather(mine, dim=0)
best = xm.mesh_reduce("best", rank + 1, max)
print(json.dumps({"rank": rank, "total": value.item(), "everyone": everyone.tolist(), "best": best,
                  "printed": xm.mesh_reduce("mine", mine.item(), sorted)}))
"""


def test_collectives_run_with_and_without_the_group_a_trainer_makes(tmp_path: Path, rules: RuleSet):
    # TrainingArguments makes the process group only under torchrun: a plain `python` run has none, where
    # torch-xla's collectives over its one replica returned the replica's own values
    text = _migrated(TRAINER_GROUP, rules)
    assert text.count("is_initialized()") == 4, text
    script = tmp_path / "trainer_group.py"
    script.write_text(_on_cpu(text))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OUT": str(tmp_path / "out")}
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                           cwd=tmp_path, env=env)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert json_reports(plain.stdout, "rank") == [
        {"rank": 0, "total": 1.0, "everyone": [0.0], "best": 1, "printed": [0.0]}]
    proc = subprocess.run(torchrun(tmp_path, script), capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reports = sorted(json_reports(proc.stdout, "rank"), key=lambda r: r["rank"])
    assert reports == [{"rank": r, "total": 3.0, "everyone": [0.0, 1.0], "best": 2, "printed": [0.0, 1.0]}
                       for r in (0, 1)]


# --------------------------------------------------------------------------- xm.rendezvous without a group (NM405)

INDEX = """
import json
import os
import sys
import time

import torch.distributed as dist
import torch_xla.core.xla_model as xm


def build_index(path):
    distributed = dist.is_available() and dist.is_initialized()
    if not distributed or dist.get_rank() == 0:
        time.sleep(0.5)
        with open(path, "w") as f:
            f.write("built")
    xm.rendezvous("index built")
    with open(path) as f:
        return f.read()


if __name__ == "__main__":
    if "RANK" in os.environ:
        dist.init_process_group("xla")
    print(json.dumps({"rank": int(os.environ.get("RANK", -1)), "seen": build_index(sys.argv[1])}))
"""


def test_rendezvous_in_code_that_runs_without_a_group_waits_only_where_one_exists(tmp_path: Path, rules: RuleSet):
    # xm.rendezvous was a no-op in one process; the module tests for a group, so the barrier is guarded by it
    text = _on_cpu(_migrated(INDEX, rules))
    script = tmp_path / "index.py"
    script.write_text(text)
    alone = subprocess.run([sys.executable, str(script), str(tmp_path / "one.txt")], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr  # an unguarded dist.barrier() raises: no default process group
    assert json_reports(alone.stdout, "rank") == [{"rank": -1, "seen": "built"}]
    proc = _torchrun(tmp_path, script, str(tmp_path / "two.txt"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # rank 1 reads only after rank 0 wrote: the barrier still runs under the group
    assert sorted((r["rank"], r["seen"]) for r in json_reports(proc.stdout, "rank")) == [(0, "built"), (1, "built")]



BN_EVAL = """
import json

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm


def main():
    dist.init_process_group("xla")
    rank = xm.get_ordinal()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(10 + rank)
    optimizer.zero_grad()
    model(torch.randn(16, 4) * (rank + 1)).pow(2).sum().backward()
    xm.optimizer_step(optimizer)
    stats = model[1].running_var.tolist() if hasattr(model, "__getitem__") else model.module[1].running_var.tolist()
    print(json.dumps({"rank": rank, "running_var": stats}))
    if rank != 0:
        return
    model.eval()
    with torch.no_grad():
        out = model(torch.ones(2, 4))
    print(json.dumps({"evaluated": rank, "shape": list(out.shape)}))


main()
"""


def test_the_ddp_wrap_keeps_buffers_per_replica_so_a_rank_0_evaluation_runs(tmp_path: Path, rules: RuleSet):
    # xm.optimizer_step averaged the gradients only: a forward on rank 0 alone (BatchNorm buffers) must not wait
    # for the other ranks in a buffer broadcast, and each replica keeps its own statistics, as under torch-xla
    text = _migrated(BN_EVAL, rules)
    assert "DistributedDataParallel(model, forward_sync_buffers=False)" in text
    script = tmp_path / "bn.py"
    script.write_text(_on_cpu(text))
    proc = _torchrun(tmp_path, script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json_reports(proc.stdout, "evaluated") == [{"evaluated": 0, "shape": [2, 4]}]
    stats = {r["rank"]: r["running_var"] for r in json_reports(proc.stdout, "rank")}
    assert sorted(stats) == [0, 1] and stats[0] != stats[1]  # each replica's own running statistics

# --------------------------------------------------------------------------- a group only a Trainer makes (NM404/NM405)

TRAINER_ONLY = """
import json
import sys

import torch
import torch_xla.core.xla_model as xm
from transformers import TrainingArguments


def main(out):
    args = TrainingArguments(output_dir=out, use_cpu=True, report_to=[])
    xm.master_print("configured", args.output_dir == out)
    xm.save({"w": torch.ones(2)}, out + "/w.pt")
    xm.rendezvous("saved")
    print(json.dumps({"rank": xm.get_ordinal(), "world": xm.xrt_world_size()}))


if __name__ == "__main__":
    main(sys.argv[1])
"""


def test_rank_queries_and_barriers_of_a_trainer_module_run_without_a_launcher(tmp_path: Path, rules: RuleSet):
    # the module's only process-group maker is TrainingArguments: a plain `python` run has no group (torch-xla ran
    # one replica there), so the rank comes from the launcher's environment and the barriers wait where one exists
    text = _migrated(TRAINER_ONLY, rules)
    assert "dist.get_rank()" not in text and "if dist.is_initialized():\n        dist.barrier()" in text
    script = tmp_path / "train.py"
    script.write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**env, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr  # dist.get_rank() / dist.barrier() raise: no default process group
    assert "configured True" in proc.stdout
    assert json_reports(proc.stdout, "rank") == [{"rank": 0, "world": 1}]
    assert torch.load(tmp_path / "w.pt")["w"].tolist() == [1.0, 1.0]
