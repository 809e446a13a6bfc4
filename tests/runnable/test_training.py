"""Issue 17, training: old-stack training projects (tests/runnable/projects/) migrated as a user would,
then run under ``neuron-migrate verify --device emulate --against projects/<name>/SCRIPT`` (the original
on the emulated old stack; ``--max-recompiles 0`` where the migration compiles the model, ``--nproc 2``
where it is distributed): losses per step, learning rates, checkpoints, final weights and printed lines
are compared. And a native script that forgets to move its inputs to the device fails under emulation
with the hardware's message.

Each project is migrated and run once (module-scoped fixtures); a few training steps on the tiny models.
Output folders are relative (``cls-out``): each side writes into its own scratch copy.
"""

from __future__ import annotations

import re

import subprocess
import sys

import pytest

from tests.runnable.util import FIX, TINY_CLASSIFIER, TINY_LLAMA, env, migrate_copy, output, verify, verify_against

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MISMATCH = "Expected all tensors to be on the same device, but found at least two devices, neuron:0 and cpu!"
COMPILED = ("--max-recompiles", "0")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("runnable-training")


def _run(work, name: str, script: str, *args: str, options=COMPILED):
    project, migration = migrate_copy(name, work)
    source = (project / script).read_text()
    return source, migration, verify_against(project, script, *args, options=options)


@pytest.fixture(scope="module")
def sft_dict_args(work):
    # tensor-parallel over 2 ranks; the original's one tensor-parallel group runs as one process on the
    # emulated old stack (--original-nproc 1). AdamW moves each weight by about +-lr per step whatever
    # the size of its gradient: where a gradient is near zero, the rounding of the sharded matmuls
    # flips that sign (a few elements in a thousand), hence --atol of 2 steps x 2 x lr
    return _run(work, "sft_dict_args", "train_sft.py", str(TINY_LLAMA), "sft-out",
                options=(*COMPILED, "--nproc", "2", "--original-nproc", "1", "--atol", "4e-3"))


@pytest.fixture(scope="module")
def classifier(work):
    return _run(work, "classifier_trainer", "train_classifier.py", str(TINY_CLASSIFIER), "cls-out")


@pytest.fixture(scope="module")
def peft_sft(work):
    return _run(work, "peft_sft", "train_lora.py", str(TINY_LLAMA), "lora-out")


def test_sharded_sft_with_dict_arguments_saves_model_only_and_runs(sft_dict_args):
    """The parallel size in the dict moves to the model load and save_only_model=True goes into the
    dict (the Trainer refuses a model sharded at load time otherwise); tensor-parallel over 2 ranks.
    Against the original: the same losses, learning rates, model checkpoint and final weights; the
    checkpoint's training state (optimizer, scheduler, RNG) is what save_only_model leaves out, and
    verify says so: those three checks, and only they, fail."""
    source, _migration, proc = sft_dict_args
    settings = source[source.index("settings = dict("):source.index("settings[")]
    assert "save_only_model=True" in settings and "tensor_parallel_size" not in settings
    assert "distributed_config=DistributedConfig(tp_size=2" in source
    out = output(proc)
    assert "0 recompile(s) after warm-up" in out, out[-5000:]
    for ok in ("✓ Trainer step losses", "✓ optimizer[0]", "✓ checkpoint sft-out/checkpoint-2 ",
               "✓ weights[LlamaForCausalLM]", "✓ printed output"):
        assert ok in out, out[-5000:]
    failed = [line.split()[2] for line in out.splitlines() if line.lstrip().startswith("✗")]
    assert failed == ["sft-out/checkpoint-2/optimizer.pt", "sft-out/checkpoint-2/scheduler.pt",
                      "sft-out/checkpoint-2/rng_state.pth"], out[-5000:]
    assert out.count("which save_only_model=True leaves out") == 3 and "result: FAILED (3 check(s)" in out


def test_classifier_trainer_compiles_once(classifier):
    """problem_type is set at load: no recompile on the guard `config.problem_type is None`."""
    source, _migration, proc = classifier
    assert 'problem_type="single_label_classification"' in source and "torch_compile=True" in source
    out = output(proc)
    assert proc.returncode == 0 and "✗" not in out, out[-5000:]
    assert "0 recompile(s) after warm-up" in out and "✓ Trainer step losses                           4 step" in out


def test_peft_sft_with_activation_checkpointing_compiles_once(peft_sft):
    """LoRA + activation checkpointing (enable_input_require_grads' hook) under torch_compile=True."""
    source, _migration, proc = peft_sft
    assert "activation_checkpointing=True" in source and "torch_compile=True" in source
    out = output(proc)
    assert proc.returncode == 0 and "✗" not in out, out[-5000:]
    assert "0 recompile(s) after warm-up" in out and "result: OK" in out
    assert "✓ Trainer step losses" in out and "✓ weights[LlamaForCausalLM]" in out


def test_xla_ddp_loop_runs_with_device_ids_on_two_ranks(work):
    """DDP(model, device_ids=[local rank]) on the (emulated) neuron device: the idiomatic form runs, and
    computes what the torch-xla loop computed (xm.optimizer_step's all-reduce = DDP's)."""
    source, _migration, proc = _run(work, "xla_ddp", "train_ddp.py", options=("--nproc", "2"))
    assert 'device_ids=[int(os.environ.get("LOCAL_RANK", 0))]' in source and "torch_xla" not in source
    out = output(proc)
    assert "step 4 loss" in out, out[-4000:]
    assert "device_ids and output_device" not in out and "exited with status" not in out
    assert proc.returncode == 0 and "result: OK" in out and "✗" not in out, out[-4000:]
    # losses, gradients and steps of the loop; xm.master_print's lines are the original's printed output
    # the DDP wrapper is matched as the model it wraps
    for ok in (r"✓ loss\.backward\(\)\s+5 losses", r"✓ gradients\[Regressor\]", r"✓ optimizer\[0\]\s+SGD: 5 step\(\) calls",
               r"✓ printed output\s+5 printed lines equal"):
        assert re.search(ok, out), out[-4000:]


def test_device_mixing_fails_as_on_hardware(work):
    """A model moved to neuron fed the tokenizer's cpu tensors: Trainium raises, so must emulation."""
    project, _migration = migrate_copy("device_mixing", work)  # a native script: nothing to compare with
    proc = verify(project / "classify.py", str(TINY_CLASSIFIER), options=("--device", "emulate", "--reference", "none"))
    out = output(proc)
    assert proc.returncode != 0
    assert f"RuntimeError: {MISMATCH}" in out
    assert "labels [" not in out  # the forward failed: nothing was printed after it


def test_emulated_device_tracking_semantics(tmp_path):
    """Moves, copies back, gradients, factories, torch.load(map_location="neuron"), Module.to("cpu"):
    each tensor is where it would be on Trainium, and only a real mix raises."""
    script = FIX / "device_tracking.py"
    proc = subprocess.run([sys.executable, "-m", "migrator.verify.child", str(script)], capture_output=True,
                          text=True, timeout=300, cwd=str(tmp_path), env=env(NEURON_MIGRATE_VERIFY_DEVICE="emulate"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "param neuron input stays cpu output neuron" in lines
    assert "cpu copy cpu cpu numpy (2, 3)" in lines
    assert "grad neuron" in lines and "factory neuron neuron" in lines and "load neuron" in lines
    assert "moved back cpu cpu" in lines
    assert f"mixed: {MISMATCH}" in lines
