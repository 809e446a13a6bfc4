"""The runtime facts behind the preconditions of the parallel layouts the training rules write (issue 24 §3),
checked under torchrun on CPU (gloo, 2 processes, the tiny Llama of tests/verify_fixtures, transformers 5.23,
PEFT 0.21):

* the Trainer cannot train a model loaded with ``DistributedConfig(pp_size=2)``: the ranks' collectives
  mismatch at the first step (gloo aborts), so a Trainer's layout never gets pp_size
  (codemods/training/mesh.py PIPELINE_DROPPED);
* LoRA over ``DistributedConfig(tp_size=2)`` trains on the column-wise projections (q/k/v/gate/up_proj: the
  unsharded model's loss and adapter gradients) and fails at the first forward on the row-wise ones
  (o_proj, down_proj, hence "all-linear"); over ``fsdp_size=2`` every target trains, and the migrated script
  (NM303's FSDP layout for LoRA) trains under the Trainer (codemods/training/lora.py);
* a migrated script whose training arguments are module globals built with ``tensor_parallel_size=args.tp``
  loads its model with tp_size=2 from ``--tp 2`` (NM303 uses the value in scope: the launch sets no TP_SIZE),
  and its ``training_args.world_size`` read (the data-parallel size in optimum-neuron 0.4) is 1, where the
  native world_size is the process count, 2 (NM207)."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process
from tests.test_training_layout import LAUNCHER, TINY_LLAMA, _env
from tests.torchrun_util import json_reports

pytest.importorskip("peft")
pytest.importorskip("datasets")


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def migrate(source: str, rules: RuleSet) -> str:
    result = process(Candidate(Path("script.py"), "script.py", "python"), rules, textwrap.dedent(source).encode())
    assert result.status == "changed", result.error
    return result.new_bytes.decode()


def _launch(tmp_path: Path, script: str, *args: str, timeout: int = 600) -> tuple[int, str, str]:
    (tmp_path / "_launch.py").write_text(LAUNCHER)
    (tmp_path / "_script.py").write_text(script)
    run = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(tmp_path / "_launch.py"), str(tmp_path / "_script.py"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path)
    try:
        out, err = run.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # a hang in the collectives is a failure to train too
        run.kill()
        out, err = run.communicate()
        return -9, out, err + "\n(timed out)"
    return run.returncode, out, err


# ------------------------------------------------------------------ the Trainer and pipeline stages
PIPELINE = '''
import json, os, sys
from datasets import Dataset
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
from transformers.distributed import DistributedConfig

model_dir, out = sys.argv[1], sys.argv[2]
rows = [[(7 * i + 3 * j) % 500 for j in range(12)] for i in range(8)]
model = AutoModelForCausalLM.from_pretrained(model_dir, distributed_config=DistributedConfig(pp_size=2))
args = TrainingArguments(output_dir=out, max_steps=1, per_device_train_batch_size=2, report_to="none", use_cpu=True,
                         save_only_model=True, disable_tqdm=True, logging_steps=1)
trainer = Trainer(model=model, args=args, train_dataset=Dataset.from_dict({"input_ids": rows, "labels": rows}))
try:
    trainer.train()
    report = {"trained": True, "losses": [l["loss"] for l in trainer.state.log_history if "loss" in l]}
except Exception as exc:  # noqa: BLE001 - reported to the test
    report = {"trained": False, "error": f"{type(exc).__name__}: {exc}"}
print(json.dumps({"rank": int(os.environ["RANK"]), **report}), flush=True)
'''


def test_the_trainer_cannot_train_a_pipeline_parallel_model(tmp_path):
    rc, out, err = _launch(tmp_path, PIPELINE, str(TINY_LLAMA), str(tmp_path / "out"), timeout=300)
    ranks = json_reports(out, "rank")
    # measured: gloo aborts both ranks at the first step ("Is there a distributed collective mismatch in your
    # code?"); should a later transformers train it, this fails and the pp_size rewrite may come back
    assert not any(r["trained"] for r in ranks), out[-2000:]
    assert rc != 0 or len(ranks) == 2, err[-3000:]
    if rc != 0 and not ranks:
        assert "collective mismatch" in err or "timed out" in err or "Error" in err, err[-3000:]


# ------------------------------------------------------------------ LoRA over tensor / FSDP parallelism; NM303, NM207
LORA_TP = '''
import json, os, runpy, sys
import torch
from accelerate.state import AcceleratorState
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, TrainingArguments, set_seed
from transformers.distributed import DistributedConfig

model_dir, work = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])
rows = [[(7 * i + 3 * j) % 500 for j in range(12)] for i in range(8)]


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def shard(full, shape):
    """This rank's part of a tensor the layout split (along the dimension whose size differs)."""
    for dim, (a, b) in enumerate(zip(full.shape, shape)):
        if a != b:
            return full.narrow(dim, rank * b, b)
    return full


def lora(targets, layout):
    """One forward and backward of the LoRA model under ``layout`` against an unsharded copy with the same
    (random, B not zero) adapter weights: the loss and the largest relative error of an adapter gradient."""
    config = LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False)
    set_seed(0)
    ref = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), config)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, distributed_config=layout), config)
    want = dict(ref.named_parameters())
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                local(p).copy_(shard(want[name], local(p).shape))
    ids = torch.tensor(rows[:2])
    expected = ref(input_ids=ids, labels=ids)
    expected.loss.backward()
    got = model(input_ids=ids, labels=ids)
    got.loss.backward()
    worst = 0.0
    for name, p in model.named_parameters():
        if "lora_" in name:
            g = local(p.grad)
            full = shard(want[name].grad, g.shape)
            worst = max(worst, (g - full).abs().max().item() / (full.abs().max().item() + 1e-12))
    return {"loss": local(got.loss).item(), "ref_loss": expected.loss.item(), "grad_err": worst}


COLUMNS = ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"]
CASES = {
    "tp_columns": lambda: lora(COLUMNS, DistributedConfig(tp_size=2)),
    "tp_o_proj": lambda: lora(["o_proj"], DistributedConfig(tp_size=2)),
    "tp_down_proj": lambda: lora(["down_proj"], DistributedConfig(tp_size=2)),
    "tp_all_linear": lambda: lora("all-linear", DistributedConfig(tp_size=2)),
    "fsdp_all_linear": lambda: lora("all-linear", DistributedConfig(fsdp_size=2)),
}
results = {}
for name, case in CASES.items():
    try:
        results[name] = {"ok": True, **case()}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}


def trainer_args(name):
    return TrainingArguments(output_dir=os.path.join(work, name), max_steps=2, per_device_train_batch_size=2,
                             logging_steps=1, learning_rate=1e-3, report_to="none", seed=0, disable_tqdm=True,
                             use_cpu=True, dataloader_drop_last=True)


# the migrated LoRA script (NM303: FSDP over every process for LoRA on all-linear) trains under the Trainer
try:
    from datasets import Dataset
    set_seed(0)
    main = runpy.run_path(os.path.join(work, "lora.py"))["main"]
    losses, layout = main(model_dir, trainer_args("lora"), Dataset.from_dict({"input_ids": rows, "labels": rows}))
    results["migrated_lora"] = {"ok": True, "losses": losses, "layout": [layout.tp_size, layout.fsdp_size]}
except Exception as exc:  # noqa: BLE001
    results["migrated_lora"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
AcceleratorState._reset_state(reset_partial_state=False)

# the migrated script with module-level arguments built from --tp (NM303 / NM207)
try:
    sys.argv = ["sizes.py", "--tp", "2", "--model", model_dir, "--out", os.path.join(work, "sizes")]
    script = runpy.run_path(os.path.join(work, "sizes.py"))
    model = script["load"]()
    results["sizes"] = {"ok": True, "tp_size": model.config.distributed_config.tp_size,
                        "replicas": script["replicas"], "world_size": script["training_args"].world_size}
except Exception as exc:  # noqa: BLE001
    results["sizes"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
print(json.dumps({"rank": rank, "results": results}), flush=True)
'''

LORA_SCRIPT = '''
from peft import LoraConfig, get_peft_model
from optimum.neuron import NeuronTrainer
from optimum.neuron.models.training import NeuronModelForCausalLM


def main(model_dir, training_args, dataset):
    model = NeuronModelForCausalLM.from_pretrained(model_dir, training_args.trn_config)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    trainer = NeuronTrainer(model=model, args=training_args, train_dataset=dataset)
    trainer.train()
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    return losses, model.base_model.model.config.distributed_config
'''

SIZES_SCRIPT = '''
import argparse

from optimum.neuron import NeuronTrainingArguments
from optimum.neuron.models.training import NeuronModelForCausalLM

parser = argparse.ArgumentParser()
parser.add_argument("--tp", type=int, default=1)
parser.add_argument("--model")
parser.add_argument("--out")
args = parser.parse_args()
training_args = NeuronTrainingArguments(output_dir=args.out, tensor_parallel_size=args.tp, use_cpu=True,
                                        report_to="none")
replicas = training_args.world_size


def load():
    return NeuronModelForCausalLM.from_pretrained(args.model, training_args.trn_config)
'''


@pytest.fixture(scope="module")
def launched(rules, tmp_path_factory):
    work = tmp_path_factory.mktemp("lora-tp")
    lora, sizes = migrate(LORA_SCRIPT, rules), migrate(SIZES_SCRIPT, rules)
    assert "fsdp_size=int(os.environ.get(\"WORLD_SIZE\", \"1\"))" in lora and "tp_size=" not in lora, lora
    assert "tp_size=args.tp" in sizes and "TP_SIZE" not in sizes, sizes
    assert "replicas = training_args.world_size // args.tp" in sizes, sizes
    (work / "lora.py").write_text(lora)
    (work / "sizes.py").write_text(sizes)
    rc, out, err = _launch(work, LORA_TP, str(TINY_LLAMA), str(work))
    assert rc == 0, err[-4000:]
    ranks = json_reports(out, "rank")
    assert sorted(r["rank"] for r in ranks) == [0, 1], out[-2000:] + err[-2000:]
    return {r["rank"]: r["results"] for r in ranks}


@pytest.mark.xdist_group("parallel-preconditions-lora")
def test_lora_on_column_wise_projections_trains_over_tensor_parallelism(launched):
    for results in launched.values():
        got = results["tp_columns"]
        assert got["ok"], got
        assert got["loss"] == pytest.approx(got["ref_loss"], rel=1e-5)
        assert got["grad_err"] < 1e-4, got


@pytest.mark.xdist_group("parallel-preconditions-lora")
@pytest.mark.parametrize("case", ["tp_o_proj", "tp_down_proj", "tp_all_linear"])
def test_lora_on_row_wise_projections_fails_over_tensor_parallelism(launched, case):
    for results in launched.values():
        got = results[case]
        assert not got["ok"], got
        assert "is invalid for input of size" in got["error"], got


@pytest.mark.xdist_group("parallel-preconditions-lora")
def test_lora_on_every_linear_layer_trains_over_fsdp(launched):
    for results in launched.values():
        got = results["fsdp_all_linear"]
        assert got["ok"], got
        assert got["loss"] == pytest.approx(got["ref_loss"], rel=1e-5)
        assert got["grad_err"] < 1e-4, got
        migrated = results["migrated_lora"]
        assert migrated["ok"], migrated
        assert migrated["layout"] == [1, 2]  # no tensor parallelism, FSDP over both processes
        assert len(migrated["losses"]) == 2 and all(math.isfinite(x) for x in migrated["losses"])


@pytest.mark.xdist_group("parallel-preconditions-lora")
def test_module_level_arguments_give_their_tensor_parallel_size_and_data_parallel_size(launched):
    for results in launched.values():
        got = results["sizes"]
        assert got["ok"], got
        assert got["tp_size"] == 2  # from --tp 2: the launch sets no TP_SIZE, which would have meant TP 1
        assert got["world_size"] == 2  # natively the process count
        assert got["replicas"] == 1  # the data-parallel size optimum-neuron 0.4's world_size was


def test_world_size_reads_mean_the_data_parallel_size(rules):
    out = migrate('''
        from optimum.neuron import NeuronTrainingArguments

        def tokens(args):
            training_args = NeuronTrainingArguments(output_dir="o", tensor_parallel_size=args.tp)
            return 8 * training_args.world_size
    ''', rules)
    assert "8 * (training_args.world_size // args.tp)" in out
