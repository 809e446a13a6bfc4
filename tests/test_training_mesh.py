"""The whole mesh of the layouts the training rules write (codemods/training/mesh.py, issue 13).

transformers 5.23 builds one device mesh ``(pp, dp_replicate, fsdp, tp)`` for a model loaded with
``distributed_config=`` and refuses to load unless its product is the world size ("The parallel mesh
requires 2 processes, but world_size is 4"). optimum-neuron made every process beyond the model-parallel
ones a data-parallel rank, so the migrated layout keeps that dimension: ``dp_replicate_size = WORLD_SIZE //
tp_size`` (replicas), ``fsdp_size`` for zero_1, the launch layout (TP_SIZE / FSDP_SIZE) for parsed arguments.

Proof on CPU (gloo): migrated Trainer scripts with tensor_parallel_size=2 train under torchrun with 4
processes (two data-parallel replicas of TP 2), with the losses of one unsharded process that sees the
batches of both replicas; the layout without the data-parallel dimension (what the rules wrote before)
fails to load in the same launch."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from codemods.training.mesh import launch_advice, whole_mesh
from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process
from tests.test_training_layout import LAUNCHER, TINY_LLAMA, _env
from tests.torchrun_util import json_reports, torchrun

pytest.importorskip("datasets")

MESH_ERROR = "The parallel mesh requires 2 processes, but world_size is 4"


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def migrate(source: str, rules: RuleSet) -> str:
    result = process(Candidate(Path("script.py"), "script.py", "python"), rules, textwrap.dedent(source).encode())
    assert result.status == "changed", result.error
    return result.new_bytes.decode()


# ------------------------------------------------------------------ the sizes written
def _sizes(**kw) -> dict:
    return {k: cst.parse_expression(v) for k, v in kw.items()}


def _code(sizes: dict) -> dict:
    return {k: cst.Module(body=[]).code_for_node(v) for k, v in sizes.items()}


def test_whole_mesh_adds_the_data_parallel_replicas_the_other_sizes_leave():
    env = "os.environ"
    assert _code(whole_mesh(_sizes(tp_size="8"), env))["dp_replicate_size"] == \
        'int(os.environ.get("WORLD_SIZE", "1")) // 8'
    # zero_1: fsdp_size is the rest of the world already
    zero = _sizes(tp_size="8", fsdp_size='int(os.environ.get("WORLD_SIZE", "1")) // 8')
    assert "dp_replicate_size" not in whole_mesh(zero, env)
    # pipeline stages combine with no data-parallel dimension: nothing added, the marker says why
    assert "dp_replicate_size" not in whole_mesh(_sizes(tp_size="8", pp_size="4"), env)
    assert "launch exactly tp_size x pp_size processes" in launch_advice(_sizes(tp_size="8", pp_size="4"))
    # sizes known at run time: no mesh when they are all 1 (the Trainer's own data parallelism)
    assert _code(whole_mesh(_sizes(tp_size="args.tp", fsdp_size="f"), env))["dp_replicate_size"] == \
        'int(os.environ.get("WORLD_SIZE", "1")) // (args.tp * f) if args.tp * f > 1 else 1'
    # nothing to complete without model parallelism
    assert whole_mesh({}, env) == {}


# ------------------------------------------------------------------ proof under torchrun: 4 processes, TP 2
BODY = '''
import json
import os
import sys

from datasets import Dataset
from transformers import AutoModelForCausalLM, HfArgumentParser

from optimum.neuron import NeuronTrainer, NeuronTrainingArguments


def main(model_dir, output_dir, argv):
{build}
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    rows = [[(7 * i + 3 * j) % 500 for j in range(12)] for i in range(16)]
    trainer = NeuronTrainer(model=model, args=args, train_dataset=Dataset.from_dict({{"input_ids": rows, "labels": rows}}))
    trainer.train()
    return [log["loss"] for log in trainer.state.log_history if "loss" in log], trainer.model.config.distributed_config
'''
COMMON = ('output_dir=output_dir, max_steps=2, per_device_train_batch_size=2, logging_steps=1, learning_rate=1e-3, '
          'report_to="none", seed=0, disable_tqdm=True, use_cpu=True, torch_compile_backend="eager"')
SCRIPTS = {
    # plain data parallelism beside TP: dp_replicate_size = WORLD_SIZE // 2
    "replicas": BODY.format(build=f"    args = NeuronTrainingArguments({COMMON}, tensor_parallel_size=2)"),
    # ZeRO-1: fsdp_size = WORLD_SIZE // 2
    "zero_1": BODY.format(build=f"    args = NeuronTrainingArguments({COMMON}, tensor_parallel_size=2, zero_1=True)"),
    # parsed from the command line: the launch layout, TP_SIZE=2 in the environment
    "parsed": BODY.format(build="    (args,) = HfArgumentParser(NeuronTrainingArguments).parse_args_into_dataclasses("
                                "args=argv)"),
}
PARSED_ARGV = ["--output_dir", "{out}", "--max_steps", "2", "--per_device_train_batch_size", "2", "--logging_steps",
               "1", "--learning_rate", "1e-3", "--report_to", "none", "--seed", "0", "--disable_tqdm", "true",
               "--use_cpu", "true", "--torch_compile", "true", "--torch_compile_backend", "eager",
               "--dataloader_drop_last", "true"]

DRIVER = '''\
import json
import os
import runpy
import sys

from accelerate.state import AcceleratorState, PartialState
from transformers import set_seed

model_dir, work, argv = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
rank = int(os.environ["RANK"])
results = {}
for name in ("old", "replicas", "zero_1", "parsed"):
    set_seed(0)
    out = os.path.join(work, "out-" + name)
    try:
        main = runpy.run_path(os.path.join(work, name + ".py"))["main"]
        losses, config = main(model_dir, out, [a.replace("{out}", out) for a in argv])
        results[name] = {"ok": True, "losses": losses, "mesh": [config.pp_size, config.dp_replicate_size,
                                                                config.fsdp_size, config.tp_size]}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        results[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    AcceleratorState._reset_state(reset_partial_state=False)
print(json.dumps({"rank": rank, "results": results}))
'''


def _reference_losses(output_dir: Path) -> list[float]:
    """One unsharded process that sees the batches of both data-parallel replicas (2 x 2 rows a step)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments, set_seed

    set_seed(0)
    rows = [[(7 * i + 3 * j) % 500 for j in range(12)] for i in range(16)]
    args = TrainingArguments(output_dir=str(output_dir), max_steps=2, per_device_train_batch_size=4, logging_steps=1,
                             learning_rate=1e-3, report_to="none", seed=0, disable_tqdm=True, use_cpu=True,
                             dataloader_drop_last=True)
    trainer = Trainer(model=AutoModelForCausalLM.from_pretrained(TINY_LLAMA), args=args,
                      train_dataset=Dataset.from_dict({"input_ids": rows, "labels": rows}))
    trainer.train()
    return [log["loss"] for log in trainer.state.log_history if "loss" in log]


@pytest.fixture(scope="module")
def launched(rules, tmp_path_factory):
    work = tmp_path_factory.mktemp("mesh")
    migrated = {name: migrate(source, rules) for name, source in SCRIPTS.items()}
    for name, text in migrated.items():
        assert "from optimum" not in text and "tensor_parallel_size=" not in text, name
        (work / f"{name}.py").write_text(text)
    # what the rules wrote before: the tensor-parallel size alone
    replicas = migrated["replicas"]
    old = replicas.replace('dp_replicate_size=int(os.environ.get("WORLD_SIZE", "1")) // 2', "")
    assert old != replicas and "DistributedConfig(tp_size=2, )" in old
    (work / "old.py").write_text(old)
    driver, launcher = work / "_driver.py", work / "_launch.py"
    driver.write_text(DRIVER)
    launcher.write_text(LAUNCHER)
    running = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4", str(launcher),
         str(driver), str(TINY_LLAMA), str(work), __import__("json").dumps(PARSED_ARGV)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(TP_SIZE="2"), cwd=work)
    want = _reference_losses(work / "out-reference")
    out, err = running.communicate(timeout=600)
    assert running.returncode == 0, err[-4000:]
    ranks = json_reports(out, "rank")
    assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3], out[-2000:] + err[-2000:]
    return migrated, {r["rank"]: r["results"] for r in ranks}, want


@pytest.mark.xdist_group("training-mesh-launched")
def test_the_layout_without_data_parallelism_fails_to_load(launched):
    _migrated, results, _want = launched
    for rank, got in results.items():
        assert not got["old"]["ok"] and MESH_ERROR in got["old"]["error"], (rank, got["old"])


@pytest.mark.parametrize("case, mesh", [("replicas", [1, 2, 1, 2]), ("zero_1", [1, 1, 2, 2]),
                                        ("parsed", [1, 2, 1, 2])])
@pytest.mark.xdist_group("training-mesh-launched")
def test_migrated_layout_trains_with_two_replicas_of_tp_2(launched, case, mesh):
    migrated, results, want = launched
    if case == "parsed":
        assert 'int(os.environ.get("TP_SIZE", "1"))' in migrated[case]
    for rank, got in results.items():
        assert got[case]["ok"], (rank, got[case])
        assert got[case]["mesh"] == mesh  # (pp, dp_replicate, fsdp, tp): 4 processes
        losses = got[case]["losses"]
        assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
        # the data-parallel ranks see different batches: the losses of one process that sees both
        assert losses == pytest.approx(want, rel=1e-4), (rank, case)


# ------------------------------------------------------------------ launchers and scripts agree (NM305 / NM515)
FLAGS_SCRIPT = """
import argparse
from dataclasses import dataclass

from transformers import HfArgumentParser

from optimum.neuron import NeuronTrainingArguments


@dataclass
class LayoutArguments:
    tensor_parallel_size: int = 2


def parse(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensor-parallel-size", type=int, default=8)
    parser.add_argument("--pipeline_parallel_size", type=int, required=True)
    args = parser.parse_args(argv)
    (layout,) = HfArgumentParser(LayoutArguments).parse_args_into_dataclasses(args=[])
    return args.tensor_parallel_size, args.pipeline_parallel_size, layout.tensor_parallel_size
"""


def test_script_flags_the_launches_no_longer_pass_read_the_launch_environment(rules, monkeypatch):
    """NM515 turns `--tensor_parallel_size 8` on a launch into TP_SIZE=8: a script that declares the flag
    itself reads it from there (argparse and HfArgumentParser dataclass fields), the flag still wins."""
    out = migrate(FLAGS_SCRIPT, rules)
    namespace: dict = {}
    exec(compile(out, "migrated.py", "exec"), namespace)
    parse = namespace["parse"]
    for name in ("TP_SIZE", "PP_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert parse([]) == (8, None, 2)  # the old defaults (the required flag is no longer required)
    monkeypatch.setenv("TP_SIZE", "4")
    monkeypatch.setenv("PP_SIZE", "2")
    assert parse([]) == (4, 2, 4)  # ints, as the flags gave
    assert parse(["--tensor-parallel-size", "16"]) == (16, 2, 4)


def test_flags_of_other_tools_are_left_alone(rules):
    src = ("import argparse\n\nfrom vllm import LLM\n\nparser = argparse.ArgumentParser()\n"
           "parser.add_argument(\"--tensor-parallel-size\", type=int, default=8)\n")
    result = process(Candidate(Path("serve.py"), "serve.py", "python"), rules, src.encode())
    assert result.status == "unchanged" and not result.findings


# ------------------------------------------------------------------ NM101: a tensor-parallel size read at run time
INFERENCE_SCRIPT = """
import json
import os
import sys

from optimum.neuron import NeuronModelForCausalLM


def main(model_dir, tp):
    model = NeuronModelForCausalLM.from_pretrained(model_dir, export=True, batch_size=1, sequence_length=32,
                                                   tensor_parallel_size=tp)
    weight = model.model.layers[0].self_attn.q_proj.weight
    print(json.dumps({"rank": int(os.environ.get("RANK", "0")), "tp": getattr(model, "tp_size", None),
                      "sharded": type(weight).__name__ == "DTensor", "device": str(weight.device.type)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
"""


def test_inference_size_from_the_arguments_is_placed_both_ways(rules, tmp_path):
    """`tensor_parallel_size=tp` (a variable): one NeuronCore when it is 1, sharded under torchrun when it is more
    (a DistributedConfig of size 1 places nothing, so device_map stays for that case)."""
    out = migrate(INFERENCE_SCRIPT, rules)
    assert 'device_map=None if tp > 1 else "neuron"' in out and "DistributedConfig(tp_size=tp)" in out
    script = tmp_path / "infer.py"
    script.write_text(out.replace('"neuron"', '"cpu"'))  # CPU stand-in for the NeuronCore
    single = subprocess.run([sys.executable, str(script), str(TINY_LLAMA), "1"], capture_output=True, text=True,
                            env=_env(), timeout=300)
    assert single.returncode == 0, single.stderr[-3000:]
    assert json_reports(single.stdout, "rank") == [{"rank": 0, "tp": None, "sharded": False, "device": "cpu"}]
    sharded = subprocess.run(torchrun(tmp_path, script, str(TINY_LLAMA), "2"), capture_output=True, text=True,
                             env=_env(), timeout=300)
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    ranks = sorted(json_reports(sharded.stdout, "rank"), key=lambda r: r["rank"])
    assert [(r["rank"], r["tp"], r["sharded"]) for r in ranks] == [(0, 2, True), (1, 2, True)]
