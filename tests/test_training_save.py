"""A model sharded at load time (``from_pretrained(distributed_config=DistributedConfig(...))`` with a size
> 1) makes the transformers 5.23 Trainer refuse to build unless its arguments have ``save_only_model=True``
(or ``save_strategy="no"``): "Resuming is not supported for models sharded at load time". Every path of the
training rules that gives the trained model a layout also gives the arguments that setting:

* NM203: a NeuronSFTConfig with literal sizes whose SFTTrainer loads a model id -> ``save_only_model=True``;
* NM203 / NM207: a parsed SFTConfig -> ``if TP_SIZE * FSDP_SIZE > 1: training_args.save_only_model = True``
  right after the inserted ``model_init_kwargs``;
* NM301: lazy_load_for_parallelism with sizes from parsed arguments -> the same ``if`` on those arguments;
* NM303: ``training_args.trn_config`` of parsed arguments -> the same ``if``; arguments built in the function
  (NM201, where trn_config is read) -> ``save_only_model=True`` in their constructor.

The migrated scripts build their trainer under ``torch.distributed.run --nproc_per_node=2`` on CPU (gloo) with
a tiny model sharded with tp_size=2: each builds with the emitted arguments, and each raises the Trainer's
error once the emitted setting is turned off (so the setting is needed, not decoration)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process
from tests.test_training_layout import LAUNCHER, TINY_LLAMA, _env
from tests.torchrun_util import json_reports

pytest.importorskip("trl")

ERROR = "Resuming is not supported for models sharded at load time"

SFT_LITERAL = """
from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer


def build(model_dir, output_dir, dataset, argv):
    config = NeuronSFTConfig(output_dir=output_dir, tensor_parallel_size=2, report_to="none", use_cpu=True)
    return NeuronSFTTrainer(model=model_dir, args=config, train_dataset=dataset)
"""

SFT_PARSED = """
from dataclasses import dataclass

from transformers import HfArgumentParser
from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer


@dataclass
class ModelArguments:
    model_name_or_path: str


def build(model_dir, output_dir, dataset, argv):
    parser = HfArgumentParser((ModelArguments, NeuronSFTConfig))
    model_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    return NeuronSFTTrainer(model=model_args.model_name_or_path, args=training_args, train_dataset=dataset)
"""

LAZY_PARSED = """
from transformers import AutoModelForCausalLM, HfArgumentParser
from optimum.neuron import NeuronTrainer, NeuronTrainingArguments
from optimum.neuron.distributed import lazy_load_for_parallelism


def build(model_dir, output_dir, dataset, argv):
    (training_args,) = HfArgumentParser(NeuronTrainingArguments).parse_args_into_dataclasses(args=argv[2:])
    with lazy_load_for_parallelism(tensor_parallel_size=training_args.tensor_parallel_size):
        model = AutoModelForCausalLM.from_pretrained(model_dir)
    return NeuronTrainer(model=model, args=training_args, train_dataset=dataset)
"""

TRN_CONFIG_PARSED = """
from transformers import HfArgumentParser
from optimum.neuron import NeuronTrainer, NeuronTrainingArguments
from optimum.neuron.models.training import NeuronModelForCausalLM


def load(model_dir, training_args):
    return NeuronModelForCausalLM.from_pretrained(model_dir, training_args.trn_config)


def build(model_dir, output_dir, dataset, argv):
    (training_args,) = HfArgumentParser(NeuronTrainingArguments).parse_args_into_dataclasses(args=argv[2:])
    return NeuronTrainer(model=load(model_dir, training_args), args=training_args, train_dataset=dataset)
"""

TRN_CONFIG_BUILT = """
from optimum.neuron import NeuronTrainer, NeuronTrainingArguments
from optimum.neuron.models.training import NeuronModelForCausalLM


def build(model_dir, output_dir, dataset, argv):
    args = NeuronTrainingArguments(output_dir=output_dir, tensor_parallel_size=2, report_to="none", use_cpu=True)
    model = NeuronModelForCausalLM.from_pretrained(model_dir, args.trn_config)
    return NeuronTrainer(model=model, args=args, train_dataset=dataset)
"""

#: case -> (source, the emitted setting, the same setting turned off)
CASES = {
    "sft_literal": (SFT_LITERAL, "save_only_model=True", "save_only_model=False"),
    "sft_parsed": (SFT_PARSED, "training_args.save_only_model = True", "training_args.save_only_model = False"),
    "lazy_parsed": (LAZY_PARSED, "training_args.save_only_model = True", "training_args.save_only_model = False"),
    "trn_config_parsed": (TRN_CONFIG_PARSED, "training_args.save_only_model = True",
                          "training_args.save_only_model = False"),
    "trn_config_built": (TRN_CONFIG_BUILT, "save_only_model=True", "save_only_model=False"),
}

DRIVER = '''\
import json
import os
import runpy
import sys

from datasets import Dataset

model_dir, work = sys.argv[1], sys.argv[2]
rank = int(os.environ.get("RANK", "0"))
texts = ["the quick brown fox jumps over the lazy dog"] * 4
results = {}
for name in sorted(os.listdir(work)):
    if not name.endswith(".py"):
        continue
    out = os.path.join(work, "out-" + name[:-3])
    argv = ["--model_name_or_path", model_dir, "--output_dir", out, "--report_to", "none", "--use_cpu"]
    try:
        build = runpy.run_path(os.path.join(work, name))["build"]
        trainer = build(model_dir, out, Dataset.from_dict({"text": texts}), argv)
        results[name[:-3]] = {"ok": True, "tp": getattr(trainer.model, "tp_size", None)}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        results[name[:-3]] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
print(json.dumps({"rank": rank, "results": results}))
'''


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def migrate(source: str, rules: RuleSet) -> str:
    result = process(Candidate(Path("script.py"), "script.py", "python"), rules, textwrap.dedent(source).encode())
    assert result.status == "changed", result.error
    return result.new_bytes.decode()


@pytest.fixture(scope="module")
def migrated(rules) -> dict[str, str]:
    return {name: migrate(source, rules) for name, (source, _on, _off) in CASES.items()}


def test_each_path_emits_the_setting_once(migrated):
    for name, (_source, on, _off) in CASES.items():
        out = migrated[name]
        assert "optimum" not in out, name
        assert out.count("save_only_model") == 1 and on in out, (name, out)
    # the parsed paths: only when the launch layout is distributed, with the reason next to it
    # (the data-parallel replicas are > 1 only when these are: the layout is distributed exactly then)
    for name in ("sft_parsed", "lazy_parsed", "trn_config_parsed"):
        assert 'if int(os.environ.get("TP_SIZE", "1")) * int(os.environ.get("FSDP_SIZE", "1")) > 1:' \
            in migrated[name], name
    for name in ("sft_parsed", "lazy_parsed", "trn_config_parsed"):
        assert "# the Trainer refuses to build otherwise: resuming a model sharded at load time is not supported" \
            in migrated[name], name


@pytest.fixture(scope="module")
def built(migrated, tmp_path_factory) -> dict:
    """Every migrated script, and its copy with the setting turned off, builds its trainer under torchrun
    (2 processes, TP_SIZE=2 for the parsed ones): {rank: {case: result}}."""
    work = tmp_path_factory.mktemp("save_only_model")
    for name, (_source, on, off) in CASES.items():
        (work / f"{name}.py").write_text(migrated[name])
        (work / f"{name}__off.py").write_text(migrated[name].replace(on, off))
    driver, launcher = work.parent / f"{work.name}-driver.py", work.parent / f"{work.name}-launch.py"
    driver.write_text(DRIVER)
    launcher.write_text(LAUNCHER)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(launcher),
         str(driver), str(TINY_LLAMA), str(work)],
        capture_output=True, text=True, env=_env(TP_SIZE="2"), cwd=work, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = json_reports(proc.stdout, "rank")
    assert sorted(r["rank"] for r in ranks) == [0, 1], proc.stdout[-2000:] + proc.stderr[-2000:]
    return {r["rank"]: r["results"] for r in ranks}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.xdist_group("training-save-built")
def test_trainer_builds_with_the_emitted_arguments_and_not_without(built, case):
    for rank, results in built.items():
        assert results[case] == {"ok": True, "tp": 2}, (rank, results[case])
        off = results[f"{case}__off"]
        assert not off["ok"] and ERROR in off["error"], (rank, off)
