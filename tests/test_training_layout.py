"""Parallel sizes of the training arguments move to the model load (NM201 / NM203, codemods/training/arguments.py):
``distributed_config=DistributedConfig(tp_size=..., pp_size=..., fsdp_size=...)`` on the from_pretrained
that builds the model handed to the trainer, followed through variables and module functions. What is
emitted exists in transformers 5.23, the cases the rule cannot follow keep a marker, and a migrated
Trainer script with tensor_parallel_size=2 trains under torchrun on CPU (2 processes, gloo)."""

from __future__ import annotations

import ast
import inspect
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process
from tests.torchrun_util import FINISH, json_reports

ROOT = Path(__file__).resolve().parent.parent
TINY_LLAMA = ROOT / "tests" / "verify_fixtures" / "tiny-llama"


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def migrate(source: str, rules: RuleSet) -> tuple[str, list]:
    result = process(Candidate(Path("script.py"), "script.py", "python"), rules, textwrap.dedent(source).encode())
    assert result.status in ("changed", "unchanged"), result.error
    new = result.new_bytes.decode() if result.status == "changed" else textwrap.dedent(source)
    return new, result.findings


def _calls(code: str, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)
            and (getattr(n.func, "id", None) == name or getattr(n.func, "attr", None) == name)]


HEADER = """\
from transformers import AutoModelForCausalLM
from optimum.neuron import NeuronTrainer, NeuronTrainingArguments
"""

ISSUE_EXAMPLE = HEADER + """
def load(model_id):
    return AutoModelForCausalLM.from_pretrained(model_id)

def main():
    args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=8, zero_1=True)
    model = load("m")
    trainer = NeuronTrainer(model=model, args=args)

def main2():
    args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=4)
    model = AutoModelForCausalLM.from_pretrained("m")
    trainer = NeuronTrainer(model=model, args=args)

def main3():
    args = NeuronTrainingArguments(output_dir="out", pipeline_parallel_size=2)
    model = AutoModelForCausalLM.from_pretrained("m")
    trainer = NeuronTrainer(model=model, args=args)
"""


# ------------------------------------------------------------------ what is emitted exists
def test_emitted_distributed_config_keywords_exist(rules, monkeypatch):
    from transformers import TrainingArguments
    from transformers.distributed import DistributedConfig

    out, findings = migrate(ISSUE_EXAMPLE, rules)
    assert "TODO(neuron-migrate NM201): the parallel sizes were removed" not in out
    configs = _calls(out, "DistributedConfig")
    # main3's pipeline stages are dropped (the Trainer cannot train them: tests/test_parallel_preconditions.py)
    assert len(configs) == 2
    params = set(inspect.signature(DistributedConfig).parameters)
    emitted = {k.arg for c in configs for k in c.keywords}
    assert emitted == {"tp_size", "fsdp_size", "dp_replicate_size"} and emitted <= params
    # each one constructs, with the values written: the sizes multiply to the world size (fsdp_size = WORLD_SIZE //
    # tp_size for zero_1, dp_replicate_size = WORLD_SIZE // tp_size otherwise; none beside pipeline stages)
    monkeypatch.setenv("WORLD_SIZE", "16")
    namespace = {"os": os, "DistributedConfig": DistributedConfig}
    built = [eval(compile(ast.Expression(c), "<emitted>", "eval"), namespace) for c in configs]
    assert (built[0].tp_size, built[0].fsdp_size, built[0].dp_replicate_size) == (8, 2, 1)
    assert (built[1].tp_size, built[1].fsdp_size, built[1].dp_replicate_size) == (4, 1, 4)
    assert "pipeline_parallel_size=2 was dropped, the Trainer trains no stages" in out
    # every load got it once, the arguments got save_only_model (the Trainer requires it for such a model)
    loads = _calls(out, "from_pretrained")
    assert [sum(k.arg == "distributed_config" for k in c.keywords) for c in loads] == [1, 1, 0]  # main3: unsharded
    assert "save_only_model" in inspect.signature(TrainingArguments).parameters
    assert out.count("save_only_model=True") == 2
    assert out.count("Launch with torchrun --nproc_per_node=<tp_size x fsdp_size>") == 1
    assert out.count("Launch with torchrun --nproc_per_node=<a multiple of tp_size>") == 1
    assert all(f.rule != "NM201" or "WORLD_SIZE (" not in f.message for f in findings)


def test_one_distributed_config_with_lazy_load_for_parallelism(rules):
    out, findings = migrate(HEADER + """
from optimum.neuron.distributed import lazy_load_for_parallelism

def main(model_id):
    args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=2)
    with lazy_load_for_parallelism(tensor_parallel_size=args.tensor_parallel_size):
        model = AutoModelForCausalLM.from_pretrained(model_id)
    NeuronTrainer(model=model, args=args).train()
""", rules)
    assert out.count("distributed_config=") == 1
    assert 'DistributedConfig(tp_size=2, dp_replicate_size=int(os.environ.get("WORLD_SIZE", "1")) // 2)' in out
    assert "save_only_model=True" in out
    assert any(f.rule == "NM201" and "(NM301)" in f.message for f in findings)


def test_model_id_string_path_of_sft_unchanged(rules):
    src = """
from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer

config = NeuronSFTConfig(output_dir="out", tensor_parallel_size=2)
trainer = NeuronSFTTrainer(model="Qwen/Qwen3-0.6B", args=config, train_dataset=ds)
"""
    out, _ = migrate(src, rules)
    assert '"distributed_config": DistributedConfig(\n' in out and '"device_map": None' in out
    assert 'dp_replicate_size=int(os.environ.get("WORLD_SIZE", "1")) // 2,' in out
    # the trainer loads the model sharded: the config needs save_only_model=True (tests/test_training_save.py)
    assert out.count("save_only_model=True") == 1 and len(_calls(out, "DistributedConfig")) == 1


@pytest.mark.parametrize("body, reason", [
    # the helper also loads a model nobody shards
    ("""
def load(model_id):
    return AutoModelForCausalLM.from_pretrained(model_id)

def main():
    args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=2)
    NeuronTrainer(model=load("m"), args=args).train()

def evaluate():
    return load("m")
""", "load() is called elsewhere too"),
    # a size that is a local of the caller cannot be written in the helper
    ("""
def load(model_id):
    return AutoModelForCausalLM.from_pretrained(model_id)

def main(tp):
    args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=tp)
    NeuronTrainer(model=load("m"), args=args).train()
""", "the sizes are not literals"),
    ("""
def main(config):
    args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=2)
    model = AutoModelForCausalLM.from_config(config)
    NeuronTrainer(model=model, args=args).train()
""", "from_config, which takes no distributed_config"),
    ("""
def main(kwargs):
    args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=2)
    model = AutoModelForCausalLM.from_pretrained("m", **kwargs)
    NeuronTrainer(model=model, args=args).train()
""", "**kwargs"),
    ("""
def main():
    args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=2)
    model = AutoModelForCausalLM.from_pretrained("m")
    model = AutoModelForCausalLM.from_pretrained("n")
    NeuronTrainer(model=model, args=args).train()
""", "model is assigned more than once"),
])
def test_marker_when_the_load_cannot_take_the_layout(rules, body, reason):
    out, findings = migrate(HEADER + body, rules)
    assert not _calls(out, "DistributedConfig")
    assert not any(k.arg == "save_only_model" for c in _calls(out, "TrainingArguments") for k in c.keywords)
    markers = [(f.message, f.detail or "") for f in findings if f.rule == "NM201" and f.fix == "manual"]
    assert any("Load the model with" in m and "the parallel sizes were removed from the training arguments" in d
               and reason in d for m, d in markers)


def test_same_function_keeps_non_literal_sizes(rules):
    out, _ = migrate(HEADER + """
def main(cli):
    args = NeuronTrainingArguments(output_dir="out", tensor_parallel_size=cli.tp)
    model = AutoModelForCausalLM.from_pretrained(cli.model)
    NeuronTrainer(model=model, args=args).train()
""", rules)
    assert ('distributed_config=DistributedConfig(\n            tp_size=cli.tp,\n            dp_replicate_size='
            'int(os.environ.get("WORLD_SIZE", "1")) // cli.tp if cli.tp > 1 else 1,\n        ),') in out


# ------------------------------------------------------------------ proof: tp_size=2 trains under torchrun on CPU
TRAIN_SCRIPT = '''\
import json
import os
import sys

from datasets import Dataset
from transformers import AutoModelForCausalLM, set_seed

from optimum.neuron import NeuronTrainer, NeuronTrainingArguments


def load_model(model_dir):
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return model


def main(model_dir, output_dir):
    set_seed(0)
    rows = [[(7 * i + 3 * j) % 500 for j in range(12)] for i in range(8)]
    dataset = Dataset.from_dict({"input_ids": rows, "labels": rows})
    args = NeuronTrainingArguments(
        output_dir=output_dir,
        max_steps=2,
        per_device_train_batch_size=2,
        logging_steps=1,
        learning_rate=1e-3,
        report_to="none",
        seed=0,
        disable_tqdm=True,
        tensor_parallel_size=2,
        skip_cache_push=True,
    )
    model = load_model(model_dir)
    trainer = NeuronTrainer(model=model, args=args, train_dataset=dataset)
    trainer.train()
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    print(json.dumps({"rank": int(os.environ.get("RANK", "0")), "tp": getattr(trainer.model, "tp_size", None),
                      "losses": losses}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
'''

#: CPU stand-in for the neuron backend. accelerate 1.15 accepts a ParallelismConfig (which the Trainer
#: builds for a model loaded with tp_size > 1) only for FSDP2, DeepSpeed or a multi-accelerator run
#: (MULTI_GPU ... MULTI_NEURON), not for MULTI_CPU; on Trainium the run is MULTI_NEURON. This launcher
#: lets that one check see MULTI_NEURON on a gloo CPU run and then runs the migrated script unchanged.
LAUNCHER = '''\
import runpy
import sys

from accelerate import parallelism_config
from accelerate.utils import DistributedType

_validate = parallelism_config.ParallelismConfig._validate_accelerator


def validate(self, accelerator):
    state = accelerator.state
    if state.distributed_type != DistributedType.MULTI_CPU:
        return _validate(self, accelerator)
    state.__dict__["distributed_type"] = DistributedType.MULTI_NEURON
    try:
        return _validate(self, accelerator)
    finally:
        state.__dict__["distributed_type"] = DistributedType.MULTI_CPU


parallelism_config.ParallelismConfig._validate_accelerator = validate
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
''' + FINISH


def _env(**extra) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "CI": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": "", "OMP_NUM_THREADS": "1"}
    for name in ("TP_SIZE", "PP_SIZE", "FSDP_SIZE", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update(extra)
    return env


def _reference_losses(model_dir: Path, output_dir: Path) -> list[float]:
    """The same two steps in one process, plain transformers, unsharded model."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments, set_seed

    set_seed(0)
    rows = [[(7 * i + 3 * j) % 500 for j in range(12)] for i in range(8)]
    dataset = Dataset.from_dict({"input_ids": rows, "labels": rows})
    args = TrainingArguments(output_dir=str(output_dir), max_steps=2, per_device_train_batch_size=2, logging_steps=1,
                             learning_rate=1e-3, report_to="none", seed=0, disable_tqdm=True, use_cpu=True,
                             dataloader_drop_last=True)
    trainer = Trainer(model=AutoModelForCausalLM.from_pretrained(model_dir), args=args, train_dataset=dataset)
    trainer.train()
    return [log["loss"] for log in trainer.state.log_history if "loss" in log]


def test_migrated_tensor_parallel_trainer_trains_under_torchrun(tmp_path, rules):
    migrated, findings = migrate(TRAIN_SCRIPT, rules)
    assert "optimum" not in migrated and "tensor_parallel_size" not in migrated
    assert ("AutoModelForCausalLM.from_pretrained(\n        model_dir,\n        distributed_config=DistributedConfig("
            "tp_size=2, dp_replicate_size=int(os.environ.get(\"WORLD_SIZE\", \"1\")) // 2),\n    )") in migrated
    assert "save_only_model=True" in migrated and "Launch with torchrun --nproc_per_node" in migrated
    # CPU stand-in for the neuron device: force CPU, compile with the eager backend (inductor: minutes)
    runnable = migrated.replace("torch_compile=True", 'torch_compile=True, torch_compile_backend="eager", use_cpu=True')
    assert runnable != migrated
    script, launcher = tmp_path / "migrated.py", tmp_path / "launch_cpu.py"
    script.write_text(runnable)
    launcher.write_text(LAUNCHER)
    running = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(launcher),
         str(script), str(TINY_LLAMA), str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path)
    want = _reference_losses(TINY_LLAMA, tmp_path / "out-reference")
    out, err = running.communicate(timeout=300)
    assert running.returncode == 0, err[-4000:]
    ranks = json_reports(out, "rank")
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    for rank in ranks:
        assert rank["tp"] == 2
        assert len(rank["losses"]) == 2 and all(math.isfinite(x) for x in rank["losses"])
        # the same two steps as one unsharded process (tensor parallelism changes the summation order only)
        assert rank["losses"] == pytest.approx(want, rel=1e-4)


def test_one_load_two_argument_rules_gets_one_layout(rules):
    out, findings = migrate("""
from transformers import AutoModelForCausalLM
from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer, NeuronTrainer, NeuronTrainingArguments

def main(ds):
    args = NeuronTrainingArguments(output_dir="a", tensor_parallel_size=2)
    config = NeuronSFTConfig(output_dir="b", tensor_parallel_size=2)
    model = AutoModelForCausalLM.from_pretrained("m")
    NeuronTrainer(model=model, args=args, train_dataset=ds).train()
    NeuronSFTTrainer(model=model, args=config, train_dataset=ds).train()
""", rules)
    loads = _calls(out, "from_pretrained")
    assert [sum(k.arg == "distributed_config" for k in c.keywords) for c in loads] == [1]
    assert any("the load already gets a layout from other arguments" in (f.detail or "") for f in findings)
