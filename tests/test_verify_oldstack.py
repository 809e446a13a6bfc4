"""The old Neuron stack emulated on CPU (migrator/verify/oldstack, issue 15).

Old-stack scripts in our own words run with ``oldstack.install()`` in a subprocess and check that the
emulation computes what the old stack computed; then the promise itself: an ORIGINAL old-stack script
under the emulation and its migration (``python -m migrator FILE --write`` on a copy) give the same
losses (a NeuronTrainer) and the same completions and labels (the example project); the same greedy
tokens of journey_generate.py: test_verify_against.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.torchrun_util import FINISH, json_reports

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "verify_fixtures"
LLAMA = FIXTURES / "tiny-llama"
CLASSIFIER = FIXTURES / "tiny-classifier"
EXAMPLE = ROOT / "examples" / "optimum_neuron_project"

#: ``python RUNNER SCRIPT ARGS``: the script as __main__ with the emulation installed (what the verify
#: child does on the original side)
RUNNER = '''\
import runpy
import sys

from migrator.verify import oldstack

oldstack.install()
sys.stdout.reconfigure(line_buffering=True)  # whole lines, one write each: the ranks share one pipe
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def _env(pythonpath: str = str(ROOT)) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", PYTHONPATH=pythonpath,
               TOKENIZERS_PARALLELISM="false")
    for var in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16", "NEURON_MIGRATE_VERIFY_SIDE"):
        env.pop(var, None)
    return env


def _run(cmd, cwd=None, timeout=600, env=None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env or _env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc.stdout


def _original(tmp_path: Path, script: Path, *args: str, cwd=None) -> str:
    runner = tmp_path / "_oldstack_runner.py"
    runner.write_text(RUNNER)
    return _run([sys.executable, str(runner), str(script), *args], cwd=cwd)


def _migrate(tmp_path: Path, script: Path) -> Path:
    copy = tmp_path / "migrated" / script.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(script, copy)
    proc = subprocess.run([sys.executable, "-m", "migrator", str(copy), "--write"], env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 1: manual actions were left (CONTRACT.md)
    assert copy.read_text() != script.read_text()
    return copy


def _lines(out: str, prefix: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(prefix)]


# ----------------------------------------------------------------------------------------------- unit
def test_an_installed_optimum_is_not_shadowed():
    """An ``optimum`` package on the path loads as usual; only ``optimum.neuron`` is the emulation."""
    installed = FIXTURES / "optimum_double"
    code = (
        "from migrator.verify import oldstack\n"
        "oldstack.install()\n"
        "import optimum, optimum.neuron\n"
        "print(optimum.__path__[0], optimum.neuron.__neuron_migrate_emulated__)\n"
    )
    out = _run([sys.executable, "-c", code], env=_env(f"{ROOT}{os.pathsep}{installed}"))
    assert out.split() == [str(installed / "optimum"), "True"]


def test_install_imports_nothing_heavy_and_not_emulated_message():
    code = (
        "import sys\n"
        "from migrator.verify import oldstack\n"
        "oldstack.install()\n"
        "import optimum.neuron, optimum.neuron.trainers, transformers_neuronx\n"
        "assert 'torch' not in sys.modules, 'torch imported too early'\n"
        "try:\n"
        "    from optimum.neuron import NeuronModelForNothing\n"
        "except oldstack.NotEmulated as exc:\n"
        "    print(exc.api, '|', exc)\n"
    )
    out = _run([sys.executable, "-c", code])
    assert out.strip() == ("optimum.neuron.NeuronModelForNothing | cannot run the original: "
                           "`optimum.neuron.NeuronModelForNothing` is not emulated")


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("oldstack")
    _run([sys.executable, str(FIXTURES / "make_tiny_sd.py"), str(tmp / "tiny-sd")])
    out = _original(tmp, FIXTURES / "oldstack_checks.py", str(LLAMA), str(CLASSIFIER), str(tmp), str(tmp / "tiny-sd"))
    return json_reports(out, "oldstack")[0]["oldstack"]


@pytest.mark.xdist_group("verify-oldstack-checks")
def test_unemulated_apis_raise_not_emulated(checks):
    assert checks["unknown_name"] == ("NotEmulated: cannot run the original: "
                                      "`optimum.neuron.NeuronModelForSpeech` is not emulated")
    assert checks["unknown_module"] == "NotEmulated: cannot run the original: `torch_xla.experimental` is not emulated"
    assert checks["use_spmd"] == "NotEmulated: cannot run the original: `torch_xla.runtime.use_spmd` is not emulated"
    assert checks["args_tp"] is None  # one process: the unsharded model stands for the tensor-parallel group
    assert checks["args_tp_world"].startswith("NotEmulated: ") and "--original-nproc 1" in checks["args_tp_world"]
    assert checks["trn_config_tp"] == [2, "NotEmulated: cannot run the original: `optimum.neuron.models.training."
                                          "NeuronModelForCausalLM.from_pretrained(tensor_parallel_size>1)` is not emulated"]
    assert checks["args_pp"] == ("NotEmulated: cannot run the original: "
                                 "`optimum.neuron.NeuronTrainingArguments(pipeline_parallel_size>1)` is not emulated")


@pytest.mark.xdist_group("verify-oldstack-checks")
def test_libraries_do_not_see_the_emulation(checks):
    assert checks["transformers_sees_xla"] is False


@pytest.mark.xdist_group("verify-oldstack-checks")
def test_xla_device_and_bf16_environment(checks):
    assert checks["device"] == ["xla:0", "xla"]
    assert checks["bf16_tensor"] == "torch.bfloat16" and checks["bf16_module"] == "torch.bfloat16"
    # the CPU copy xm.save writes is float32 again, as it was on the old stack
    assert checks["saved_dtype"] == "torch.float32" and checks["saved_device"] == "cpu"
    assert checks["plain_tensor"] == "torch.float32"


@pytest.mark.xdist_group("verify-oldstack-checks")
def test_trace_fixed_shapes_artifact_and_auto_cast(checks):
    # neuronx-cc's default --auto-cast matmult: bf16 operands, fp32 accumulation (also after save/load)
    assert checks["trace_default_matches_bf16_matmul"] is True
    assert checks["trace_none_matches_fp32"] is True
    for key in ("trace_other_shape", "trace_reloaded_other_shape"):
        assert "input shape does not match the shape the model was traced with" in checks[key]
    assert checks["trace_reloaded_same"] is True
    assert checks["dynamic_batch_shape"] == [5, 4]


@pytest.mark.xdist_group("verify-oldstack-checks")
def test_causal_lm_static_shapes_and_precision(checks):
    assert checks["lm_dtype"] == "torch.bfloat16"
    assert checks["lm_length_capped"] == 12  # max_new_tokens=20 capped at the compiled sequence_length
    assert checks["lm_same_tokens_as_bf16"] is True
    assert checks["lm_batch_too_large"].startswith("ValueError: The specified batch_size (2) exceeds")
    assert checks["lm_prompt_too_long"].startswith("ValueError: The input sequence length (13) exceeds")
    assert checks["lm_reloaded"] == [1, 12, "torch.bfloat16"]
    assert checks["lm_c_shapes"] == [1, 32]


@pytest.mark.xdist_group("verify-oldstack-checks")
def test_traced_classifier_pads_to_the_compiled_shape(checks):
    assert checks["clf_shape"] == [1, 2]
    assert checks["clf_matches_padded"] is True
    assert "exceeds the compiled static shape (16)" in checks["clf_too_long"]


@pytest.mark.xdist_group("verify-oldstack-checks")
def test_pipeline_tokenizes_to_the_compiled_length(checks):
    assert checks["pipeline_same_as_padded"] is True


@pytest.mark.xdist_group("verify-oldstack-checks")
def test_diffusion_pipeline_shapes_and_precision(checks):
    assert checks["sd_shape"] == [1, 64, 64, 3]
    # the export's default auto_cast="matmul", bf16: close to the float32 pipeline, not equal to it
    assert 0 < checks["sd_diff_from_fp32"] < 0.05
    assert checks["sd_other_height"] == "ValueError: the pipeline was compiled for height=64, got height=32"
    assert checks["sd_two_prompts"].startswith("ValueError: 2 images per call exceed the compiled batch")


@pytest.mark.xdist_group("verify-oldstack-checks")
def test_transformers_neuronx_top_k_1_is_greedy(checks):
    assert checks["sampler_greedy"] is True


@pytest.mark.xdist_group("verify-oldstack-checks")
def test_training_arguments_mapping(checks):
    strategy, warmup, bf16, bf16_model, mixed_precision = checks["args"]
    assert strategy.endswith("STEPS") and warmup == 0.1
    # the whole model in bf16 (the XLA downcast), no autocast; the script still reads bf16=True
    assert bf16 is True and bf16_model is True and mixed_precision == "no"
    assert checks["args_fp16"].startswith("ValueError: The fp16 data type is not supported in Neuron")
    assert checks["training_model"] == ["LlamaForCausalLM", "torch.bfloat16", "sdpa"]


@pytest.mark.parametrize("xla_backend", [True, False], ids=["init_process_group_xla", "no_process_group"])
def test_xla_optimizer_step_averages_like_ddp_under_torchrun(tmp_path, xla_backend):
    runner = tmp_path / "_run.py"
    runner.write_text(RUNNER + FINISH)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(runner),
                str(FIXTURES / "oldstack_xla_train.py"), str(out_dir), *(["--xla-backend"] if xla_backend else [])])
    reports = sorted(json_reports(out, "rank"), key=lambda r: r["rank"])
    assert [r["world"] for r in reports] == [2, 2]
    assert all(r["backend"] == "gloo" for r in reports)
    assert all(r["param_diff_vs_ddp"] < 1e-6 for r in reports)
    assert all(r["mesh_sum"] == 3 and r["payloads"] == ["0", "1"] for r in reports)
    assert sorted(p.name for p in out_dir.iterdir()) == ["written_by_rank0.pt"]  # master only
    assert out.count("master says hi") == 1


# ----------------------------------------------------------------------------------------------- the promise
# (journey_generate.py, greedy generation: its emulated original and its CLI migration give the same tokens
# in test_verify_against.py, the default run against HEAD, and in the fault catalogue's generation scenario)

def test_neuron_trainer_original_and_migration_give_the_same_losses(tmp_path):
    script = FIXTURES / "neuron_trainer_old.py"
    original = _original(tmp_path, script, str(LLAMA), str(tmp_path / "o1"))
    migrated_script = _migrate(tmp_path, script)
    migrated = _run([sys.executable, "-m", "migrator.verify.child", str(migrated_script), str(LLAMA),
                     str(tmp_path / "o2")])
    for prefix in ("losses", "lrs"):
        assert len(_lines(original, prefix)) == 1
        assert _lines(original, prefix) == _lines(migrated, prefix)
    # warmup_ratio=0.34 of 3 steps kept its meaning: the first step at lr 0, then the ramp
    assert _lines(original, "lrs") == ["lrs [0.0, 0.0005, 0.001]"]


def test_neuron_sft_pads_every_batch_to_max_seq_length(tmp_path):
    """TRL 0.x arguments (tokenizer=, max_seq_length, a batched formatting_func) on TRL 1.16; the Neuron
    collator's static shape: every batch exactly max_seq_length long."""
    out = _original(tmp_path, FIXTURES / "neuron_sft_old.py", str(LLAMA), str(tmp_path / "out"))
    assert _lines(out, "batch") == ["batch (2, 32)"] * 3
    losses = json.loads(_lines(out, "losses")[0].split(" ", 1)[1])
    assert len(losses) == 3 and all(0 < v < 20 for v in losses)


def test_example_project_inference_original_and_migration_agree(tmp_path):
    """examples/optimum_neuron_project/inference.py (num_cores=2, bf16) on the tiny models: the original
    under the emulation and its migration (DistributedConfig(tp_size=2)), both on 2 torchrun ranks,
    print the same completion and label. The emulated decoder is sharded over the 2 ranks as the old
    runtime sharded it over 2 NeuronCores: unsharded, its bf16 rounding flips a near-tie token of the
    random tiny model."""
    args = ["--model_id", str(LLAMA), "--classifier_id", str(CLASSIFIER), "--prompt", "Hello world",
            "--max_new_tokens", "8"]
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    runner = tmp_path / "_run.py"
    runner.write_text(RUNNER + FINISH)
    original = _run([*launch, str(runner), str(EXAMPLE / "inference.py"), *args])
    migrated_script = _migrate(tmp_path, EXAMPLE / "inference.py")
    migrated = _run([*launch, "-m", "migrator.verify.child", str(migrated_script), *args])

    def printed(out):
        # the ranks share one pipe, and under load a rank's text and its newline can reach it apart
        # ("Hello world...Hello world...\n\n" seen in CI despite line buffering): cut each completion at
        # the next one or at a newline, and find the labels anywhere
        completions = ["Hello world" + part.split("\n")[0] for part in out.split("Hello world")[1:]]
        return sorted(completions) + sorted(re.findall(r"NEGATIVE|POSITIVE", out))

    assert len(printed(original)) == 4  # two ranks: a completion and a label each
    assert printed(original) == printed(migrated)
