"""``neuron-migrate verify`` on the example project (issue 7: "the README shows the verify command on the
example project with the committed tiny model, and what its report looks like").

As a user would, on a COPY of ``examples/optimum_neuron_project`` (never the committed folder):

1. Record the ORIGINAL ``inference.py`` on the "old stack": ``verify --device cpu --reference none
   --record golden.json``, with the TEST DOUBLE ``verify_fixtures/optimum_double_example`` (the journey's
   ``optimum.neuron`` double plus ``NeuronModelForSequenceClassification``) on PYTHONPATH.
2. Migrate the copy with the CLI (``neuron-migrate COPY --write``): exit 1, because one manual-action
   marker is left in ``inference.py``: "Launch with ``torchrun --nproc_per_node=2``" (num_cores=2 became
   ``DistributedConfig(tp_size=2)``).
3. Follow the marker: ``verify COPY/inference.py --against original/inference.py --device emulate
   --nproc 2`` (the README command: the original runs on CPU with the old stack EMULATED
   (``migrator.verify.oldstack``, no double: its num_cores=2 model sharded over the 2 ranks as the old
   runtime sharded it), the migrated copy with tp_size=2 on the emulated neuron device, both under
   torchrun with 2 processes, each side in its own scratch working directory), and against the golden
   file of step 1 (bf16 tolerances). Without ``--nproc 2`` the migrated script cannot start (exit 2).

Models: the committed ``verify_fixtures/tiny-llama`` (generation) and ``verify_fixtures/tiny-classifier``
(a DistilBERT classifier built byte-identically by ``make_tiny_classifier.py``, same tokenizer).
verify observes the generate() call, the classifier's forward call (on the original side, the call of the
emulated NeuronModelForSequenceClassification), the weights and the printed lines; the printed label is
also checked here from the output.
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

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "verify_fixtures"
EXAMPLE = ROOT / "examples" / "optimum_neuron_project"
LLAMA = FIX / "tiny-llama"
CLASSIFIER = FIX / "tiny-classifier"
DOUBLE = FIX / "optimum_double_example"
CLASSIFIER_FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
SCRIPT_ARGS = ["--", "--model_id", str(LLAMA), "--classifier_id", str(CLASSIFIER), "--max_new_tokens", "8"]
PROMPT = "What is AWS Trainium?"  # inference.py's default --prompt


def env(double: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(DOUBLE), str(ROOT)] if double else [str(ROOT)]))
    return env


def cli(cwd: Path, *args: str, double: bool = False, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m migrator ARGS`` in a subprocess, offline, from ``cwd``; the optimum double only if asked."""
    return subprocess.run([sys.executable, "-m", "migrator", *args], capture_output=True, text=True,
                          timeout=timeout, env=env(double), cwd=str(cwd))


def out(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


def printed(proc: subprocess.CompletedProcess) -> tuple[list[str], list[str]]:
    """The lines inference.py printed (streamed through by verify): generated texts, labels."""
    texts = [line for line in proc.stdout.splitlines() if line.startswith(PROMPT)]
    labels = re.findall(r"^(NEGATIVE|POSITIVE)$", proc.stdout, re.M)
    return texts, labels


# ----------------------------------------------------------------------------- fixtures

def test_make_tiny_classifier_rebuilds_the_committed_files_byte_for_byte(tmp_path):
    out_dir = tmp_path / "tiny-classifier"
    proc = subprocess.run([sys.executable, str(FIX / "make_tiny_classifier.py"), str(out_dir)],
                          capture_output=True, text=True, env=env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in CLASSIFIER.iterdir()) == CLASSIFIER_FILES
    assert sorted(p.name for p in out_dir.iterdir()) == CLASSIFIER_FILES
    for name in CLASSIFIER_FILES:
        assert (out_dir / name).read_bytes() == (CLASSIFIER / name).read_bytes(), f"{name} differs"
    assert sum(p.stat().st_size for p in CLASSIFIER.iterdir()) < 300_000
    config = json.loads((CLASSIFIER / "config.json").read_text())
    assert config["model_type"] == "distilbert" and config["id2label"] == {"0": "NEGATIVE", "1": "POSITIVE"}
    assert config["max_position_embeddings"] >= 128  # the migrated script pads to max_length=128


def test_example_double_is_marked():
    text = (DOUBLE / "optimum" / "neuron" / "__init__.py").read_text()
    assert "THIS IS A TEST DOUBLE, NOT OPTIMUM-NEURON" in text


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """Record the original example, migrate a copy with the CLI, verify the copy (3 ways)."""
    tmp = tmp_path_factory.mktemp("example")
    original = tmp / "original"
    shutil.copytree(EXAMPLE, original)
    golden = tmp / "golden.json"
    runs = {"record": cli(tmp, "verify", "original/inference.py", "--device", "cpu", "--reference", "none",
                          "--record", str(golden), *SCRIPT_ARGS, double=True)}

    project = tmp / "my_project"
    shutil.copytree(EXAMPLE, project)
    runs["migrate"] = cli(tmp, "my_project", "--write", "--no-progress", timeout=120)  # not a git repo: clean

    script = "my_project/inference.py"
    # bf16 on both sides (auto_cast_type="bf16" became dtype=torch.bfloat16): scores within a bf16 step
    runs["verify"] = cli(tmp, "verify", script, "--against", "original/inference.py", "--device", "emulate",
                         "--nproc", "2", "--atol", "1e-2", *SCRIPT_ARGS)
    # bf16 on both sides: a score may differ by one bf16 step (2**-8 at 0.5) -> tolerance 1e-2
    runs["baseline"] = cli(tmp, "verify", script, "--device", "emulate", "--nproc", "2", "--baseline",
                           str(golden), "--atol", "1e-2", *SCRIPT_ARGS)
    runs["no_nproc"] = cli(tmp, "verify", script, "--device", "emulate", "--reference", "none", *SCRIPT_ARGS)
    return {"tmp": tmp, "golden": golden, "project": project, **runs}


# ----------------------------------------------------------------------------- the example

@pytest.mark.xdist_group("verify-example")
def test_original_example_recorded_on_the_old_stack(example):
    proc = example["record"]
    assert proc.returncode == 0, out(proc)
    assert "device: cpu    reference: none" in proc.stdout and "golden file written" in proc.stdout
    data = json.loads(example["golden"].read_text())
    gen = data["observations"]["generate"]
    assert len(gen) == 1 and gen[0]["dtype"] == "bfloat16"  # auto_cast_type="bf16"
    tokens = gen[0]["tokens"][0]
    assert tokens[0] == 1 and len(tokens) == 11 + 8  # <s> + 10 prompt tokens, 8 new tokens
    texts, labels = printed(proc)
    assert len(texts) == 1 and labels == ["NEGATIVE"]


@pytest.mark.xdist_group("verify-example")
def test_cli_migrates_the_copy_and_leaves_the_torchrun_marker(example):
    proc = example["migrate"]
    assert proc.returncode == 1, out(proc)  # contract: --write succeeded, manual markers remain
    assert re.search(r"6 files scanned: 6 files changed, \d+ fixes, \d+ manual actions, 0 errors", proc.stdout)
    text = (example["project"] / "inference.py").read_text()
    assert "optimum" not in text.split('"""', 2)[2]
    assert "# TODO(neuron-migrate NM101): Launch with `torchrun --nproc_per_node=2`: one process per NeuronCore." in text
    assert "dtype=torch.bfloat16,\n        distributed_config=DistributedConfig(tp_size=2)," in text
    assert 'model.generation_config.cache_implementation = "static"' in text
    assert "model.generation_config.max_cache_len = 512" in text
    assert 'AutoModelForSequenceClassification.from_pretrained(model_id, device_map="neuron")' in text
    assert 'padding="max_length", max_length=128, truncation=True\n    ).to(model.device)' in text
    assert text.count("TODO(neuron-migrate") == 1
    # the committed example is untouched
    assert (EXAMPLE / "inference.py").read_text() != text


@pytest.mark.xdist_group("verify-example")
def test_verify_migrated_example_under_nproc_2_against_the_original(example):
    """The README command: the marker says torchrun with 2 processes, so --nproc 2; the original, run with
    the old stack emulated (no test double on PYTHONPATH), is the reference."""
    proc = example["verify"]
    assert proc.returncode == 0, out(proc)
    assert "neuron-migrate verify my_project/inference.py" in proc.stdout
    assert "device: emulate    reference: original original/inference.py" in proc.stdout
    assert re.search(r"✓ generate\[0\]\s+19 token ids equal, scores within tolerance", proc.stdout), proc.stdout
    assert re.search(r"✓ compile audit\s+\d+ graph\(s\) compiled, 0 recompile\(s\) after warm-up \(limit 0\)",
                     proc.stdout)
    assert "observed: 1 generate() call(s)" in proc.stdout
    assert "result: OK" in proc.stdout
    assert "warning:" not in proc.stdout  # the migrated script starts a process group
    # both ranks of each side printed the text and label the ORIGINAL printed on the "old stack" (the double)
    texts, labels = printed(proc)
    orig_texts, orig_labels = printed(example["record"])
    assert texts == orig_texts * 4 and labels == orig_labels * 4


@pytest.mark.xdist_group("verify-example")
def test_verify_migrated_example_against_the_golden_of_the_original(example):
    """Original (single process, dynamic cache) vs migrated (tp_size=2, static cache), both bf16: the same
    19 token ids; the scores within a bf16 tolerance (at the default 1e-5 they differ by one bf16 step)."""
    proc = example["baseline"]
    assert proc.returncode == 0, out(proc)
    assert "device: emulate    reference: golden file" in proc.stdout
    assert re.search(r"✓ generate\[0\]\s+19 token ids equal, scores within tolerance", proc.stdout), proc.stdout
    assert "result: OK" in proc.stdout
    texts, labels = printed(proc)
    orig_texts, orig_labels = printed(example["record"])
    assert texts == orig_texts * 2 and labels == orig_labels * 2


@pytest.mark.xdist_group("verify-example")
def test_migrated_example_without_nproc_2_cannot_start(example):
    """Ignoring the marker: DistributedConfig(tp_size=2) in one plain process fails at load -> exit 2."""
    proc = example["no_nproc"]
    assert proc.returncode == 2, out(proc)
    assert "result: ERROR: emulate run: the script exited with status 1" in proc.stdout
    assert "torch.distributed" in proc.stdout


@pytest.mark.xdist_group("verify-example")
def test_tensor_parallel_example_compiles_its_decode_step_under_emulate(example):
    # a model sharded at load time (DistributedConfig(tp_size=2)) counts as on the neuron device, as its
    # DTensors are on Trainium: generate()'s static-cache auto-compile gives one decode graph
    assert re.search(r"✓ compile audit\s+1 graph\(s\) compiled", example["verify"].stdout)
