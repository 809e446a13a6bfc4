"""The whole ``neuron-migrate verify`` user journey (issue 7, "Proof"), as a user would run it.

1. Record the ORIGINAL optimum-neuron script (``verify_fixtures/journey_generate.py``) on the "old
   stack": ``verify --device cpu --reference none --record golden.json``, with the TEST DOUBLE of
   ``optimum.neuron`` (``verify_fixtures/optimum_double``, CPU on top of transformers) on PYTHONPATH.
2. Migrate a copy with the CLI (``neuron-migrate COPY --write --allow-dirty``).
3. Verify the migrated copy under ``--device emulate --baseline golden.json`` WITHOUT the double:
   exit 0, same tokens, and the static cache the migration set up auto-compiles exactly one decode
   graph (backend "neuron", dynamic=False) with no recompile across the two prompt lengths.
4. Negative journeys, each a variant of the migrated script: wrong dtype (caught by the scores:
   the tokens are the same), changed
   ``max_new_tokens``, sampling → exit 1 naming the first divergent token; an unpadded input through
   ``torch.compile(..., dynamic=False)`` and ``prefill_chunk_size`` → exit 1 from the compile audit;
   a crash (the unmigrated original without the old stack) → 2; a hang → 2 with ``--timeout``.

The model is the committed ``verify_fixtures/tiny-llama`` (built by ``make_tiny_llama.py``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "verify_fixtures"
MODEL = FIX / "tiny-llama"
DOUBLE = FIX / "optimum_double"
ORIGINAL = FIX / "journey_generate.py"


def verify(*args: str, double: bool = False, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m migrator verify ARGS`` in a subprocess, offline; the optimum double only if asked."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(DOUBLE), str(ROOT)] if double else [str(ROOT)]))
    return subprocess.run([sys.executable, "-m", "migrator", "verify", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=str(ROOT))


def out(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- fixtures

def test_committed_tiny_model_is_small():
    """It is the model ``make_tiny_llama.py`` builds; the journey below loads it offline
    (HF_HUB_OFFLINE=1) with ``AutoModelForCausalLM.from_pretrained``, through the double and directly."""
    files = sorted(p.name for p in MODEL.iterdir())
    assert files == ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                     "tokenizer_config.json"]
    assert sum(p.stat().st_size for p in MODEL.iterdir()) < 2 * 2**20
    config = json.loads((MODEL / "config.json").read_text())
    assert (config["model_type"], config["hidden_size"], config["vocab_size"]) == ("llama", 64, 512)


def test_optimum_double_is_marked_and_not_importable_without_the_test_path():
    text = (DOUBLE / "optimum" / "neuron" / "__init__.py").read_text()
    assert "THIS IS A TEST DOUBLE, NOT OPTIMUM-NEURON" in text
    proc = subprocess.run([sys.executable, "-c", "import optimum.neuron"], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, cwd=str(ROOT))
    assert proc.returncode != 0  # only the test puts the double on the path


@pytest.fixture(scope="module")
def journey(tmp_path_factory):
    """Record the original script with the double, then migrate a copy with the CLI."""
    tmp = tmp_path_factory.mktemp("journey")
    golden = tmp / "golden.json"
    rec = verify(str(ORIGINAL), "--device", "cpu", "--reference", "none", "--record", str(golden),
                 "--", str(MODEL), double=True)
    assert rec.returncode == 0, out(rec)
    migrated = tmp / "journey_generate.py"
    shutil.copy(ORIGINAL, migrated)
    mig = subprocess.run([sys.executable, "-m", "migrator", str(migrated), "--write", "--allow-dirty",
                          "--no-progress"], capture_output=True, text=True, cwd=str(tmp), timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert mig.returncode == 0, out(mig)
    return {"tmp": tmp, "golden": golden, "record": rec, "migrated": migrated, "migrate": mig}


def variant(journey, name: str, *edits: tuple[str, str]) -> Path:
    """A copy of the migrated script with edits (a deliberately wrong or broken migration)."""
    text = journey["migrated"].read_text()
    for old, new in edits:
        assert old in text, (old, text)
        text = text.replace(old, new, 1)
    path = journey["tmp"] / f"{name}.py"
    path.write_text(text)
    return path


# name -> edits of the migrated script, extra verify options; every run compares with the golden file
VARIANTS = {
    # most expensive first: the runs are independent and go 2 at a time
    "chunked": ([("model.generation_config.max_cache_len = 64",
                  "model.generation_config.max_cache_len = 64\n"
                  "model.generation_config.prefill_chunk_size = 4")], []),
    # a (wrong) hand-written compiled forward on unpadded prompts: every new length is a compile
    "unpadded": ([("for prompt in prompts:",
                   'compiled = torch.compile(model, backend="neuron", dynamic=False)\n'
                   "with torch.no_grad():\n"
                   "    for prompt in prompts:\n"
                   "        compiled(input_ids=torch.tensor([prompt], device=\"neuron\"))\n"
                   "for prompt in prompts:")], ["--max-recompiles", "0"]),
    "migrated": ([], []),
    # a dtype-only mistake: the tiny model's greedy tokens are the same in bfloat16, the scores are not
    "bfloat16": ([("dtype=torch.float32", "dtype=torch.bfloat16")], []),
    "dropped_max_new_tokens": ([("max_new_tokens=8", "max_new_tokens=6")], []),
    "sampling": ([("do_sample=False", "do_sample=True, top_k=50"),
                  ("for prompt in prompts:", "torch.manual_seed(3)\nfor prompt in prompts:")], []),
    "hang": ([("import sys\n", "import sys\nimport time\n\ntime.sleep(600)\n")], ["--timeout", "3"]),
}


@pytest.fixture(scope="module")
def runs(journey) -> dict[str, subprocess.CompletedProcess]:
    """``verify VARIANT --device emulate --baseline golden.json`` for every variant (without the double),
    plus the unmigrated original ("unmigrated"), two at a time."""
    jobs = {"unmigrated": [str(ORIGINAL)]}
    for name, (edits, options) in VARIANTS.items():
        script = journey["migrated"] if name == "migrated" else variant(journey, name, *edits)
        jobs[name] = [str(script), *options]
    golden = str(journey["golden"])
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(verify, args[0], "--device", "emulate", "--baseline", golden, *args[1:],
                                     "--", str(MODEL))
                   for name, args in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


# ----------------------------------------------------------------------------- the journey

@pytest.mark.xdist_group("verify-journey")
def test_record_original_script_on_the_old_stack(journey):
    proc = journey["record"]
    assert "reference: none" in proc.stdout and "golden file written" in proc.stdout
    data = json.loads(journey["golden"].read_text())
    assert data["format"] == "neuron-migrate-golden" and data["device"] == "cpu"
    gen = data["observations"]["generate"]
    # the double's generate() delegates to transformers': each call is recorded exactly once
    assert [len(call["tokens"][0]) for call in gen] == [5 + 8, 11 + 8]
    assert gen[0]["tokens"][0][:5] == [1, 17, 33, 250, 7]
    assert data["observations"]["compile"]["graphs"] == 0
    assert proc.stdout.count("generated [") == 2


@pytest.mark.xdist_group("verify-journey")
def test_cli_migration_of_the_original(journey):
    text = journey["migrated"].read_text()
    code = text.split('"""', 2)[2]  # the module docstring tells the story of the original
    assert "optimum" not in code.lower() and "Neuron" not in code
    assert "from transformers import AutoModelForCausalLM" in text
    assert re.search(r"AutoModelForCausalLM\.from_pretrained\(model_dir, dtype=torch\.float32, "
                     r"device_map=\"neuron\"\)", text)
    assert 'model.generation_config.cache_implementation = "static"' in text
    assert "model.generation_config.max_cache_len = 64" in text  # from sequence_length=64
    assert "NM101 [applied]" in journey["migrate"].stdout
    assert "0 manual actions" in journey["migrate"].stdout


@pytest.mark.xdist_group("verify-journey")
def test_migrated_script_matches_golden_and_compiles_one_decode_graph(runs):
    """Without the double: the migrated script needs only transformers. Under emulate the model is
    on "neuron", so generate() auto-compiles the static-cache decode step (backend "neuron",
    dynamic=False) as on Trainium: 1 graph, no recompile for the second prompt length."""
    proc = runs["migrated"]
    assert proc.returncode == 0, out(proc)
    assert "device: emulate    reference: golden file" in proc.stdout
    # static cache + compiled decode step vs the original's dynamic-cache eager run: same tokens,
    # scores within the default tolerances
    assert re.search(r"✓ generate\[0\]\s+13 token ids equal, scores within tolerance", proc.stdout)
    assert re.search(r"✓ generate\[1\]\s+19 token ids equal, scores within tolerance", proc.stdout)
    assert re.search(r"✓ compile audit\s+1 graph\(s\) compiled, 0 recompile\(s\) after warm-up", proc.stdout)
    assert "observed: 2 generate() call(s), 1 compiled graph(s)" in proc.stdout
    assert "result: OK" in proc.stdout


@pytest.mark.xdist_group("verify-journey")
def test_unmigrated_script_crashes_on_the_new_stack_exit_2(runs):
    """A crash: the ORIGINAL script without the double (the old stack is gone) fails at its import,
    so the record really came from the old stack and a script that crashes exits 2 with the reason."""
    proc = runs["unmigrated"]
    assert proc.returncode == 2, out(proc)
    assert "No module named 'optimum'" in proc.stderr
    assert "neuron-migrate: error: emulate run: the script exited with status 1" in proc.stderr


# ----------------------------------------------------------------------------- wrong migrations

@pytest.mark.parametrize("name", ["dropped_max_new_tokens", "sampling"])
@pytest.mark.xdist_group("verify-journey")
def test_wrong_migration_fails_with_first_divergent_token(runs, name):
    proc = runs[name]
    assert proc.returncode == 1, out(proc)
    assert "✗ generate[" in proc.stdout and "result: FAILED" in proc.stdout
    if name == "dropped_max_new_tokens":
        assert re.search(r"call 0, sequence 0: length 11, reference 13 \(equal up to position 11\)", proc.stdout)
    else:
        assert re.search(r"call \d, sequence 0: first divergent token at position (\d+): \d+ vs reference \d+",
                         proc.stdout), proc.stdout
        pos = int(re.search(r"first divergent token at position (\d+)", proc.stdout).group(1))
        assert pos >= 5  # the prompt itself is equal; generation diverges


@pytest.mark.xdist_group("verify-journey")
def test_dtype_only_wrong_migration_fails_on_the_scores(runs):
    """The migrated script loads the model in bfloat16 where the original used float32 (fp32 auto_cast):
    every token is the same, the recorded scores differ, and verify says a dtype change is the cause."""
    proc = runs["bfloat16"]
    assert proc.returncode == 1, out(proc)
    assert re.search(r"✗ generate\[0\]\s+13 token ids equal, but the scores differ", proc.stdout), proc.stdout
    assert re.search(r"✗ generate\[1\]\s+19 token ids equal, but the scores differ", proc.stdout)
    assert "the model ran in bfloat16, the reference in float32: a dtype change is the likely cause" in proc.stdout
    # and the final weights say it without the scores: dtype bfloat16, reference float32 (issue 15 §3)
    assert re.search(r"✗ weights\[LlamaForCausalLM\]\s+\d+ of \d+ parameters differ; \S+: dtype bfloat16, "
                     r"reference float32", proc.stdout), proc.stdout
    assert "✓ compile audit" in proc.stdout and "result: FAILED (3 check(s) failed)" in proc.stdout


# ----------------------------------------------------------------------------- compile audit

@pytest.mark.xdist_group("verify-journey")
def test_unpadded_inputs_through_compiled_forward_recompile(runs):
    """A (wrong) hand-written compiled forward on unpadded prompts: every new length is a compile."""
    proc = runs["unpadded"]
    assert proc.returncode == 1, out(proc)
    assert re.search(r"✓ generate\[1\]\s+19 token ids equal", proc.stdout)  # the outputs are still right
    assert re.search(r"✗ compile audit\s+\d+ graph\(s\) compiled, [1-9]\d* recompile\(s\)", proc.stdout)
    assert "compile 0/1: tensor 'kwargs['input_ids']' size mismatch at index 1. expected 5, actual 11" in proc.stdout
    assert "likely cause: input length changed: pad inputs to a fixed length" in proc.stdout


@pytest.mark.xdist_group("verify-journey")
def test_prefill_chunk_size_added_to_migrated_script_is_flagged(runs):
    proc = runs["chunked"]
    assert proc.returncode == 1, out(proc)
    assert re.search(r"✓ generate\[0\]\s+13 token ids equal", proc.stdout)
    assert "✗ compile audit" in proc.stdout
    # the first generate()'s prefill chunks and decode step are its warm-up; the second prompt length's
    # new chunk shapes are the recompiles, and prefill_chunk_size is named as their cause
    assert re.search(r"compile 0/\d+: .*, in call 2 of LlamaForCausalLM\.generate\(\)", proc.stdout), proc.stdout
    assert "in call 1 of" not in proc.stdout
    assert "likely cause: the compiled forward is called with different keyword arguments (with " \
           "prefill_chunk_size" in proc.stdout


# ----------------------------------------------------------------------------- broken runs

@pytest.mark.xdist_group("verify-journey")
def test_migrated_script_that_hangs_exits_2_on_timeout(runs):
    proc = runs["hang"]
    assert proc.returncode == 2
    assert "timed out after 3 s" in proc.stderr
