"""Tests of ``neuron-migrate verify`` (CONTRACT.md § verify).

The scripts under ``tests/verify_fixtures/`` run in real child processes (the verifier always uses
one); a tiny Llama (hidden 64, 2 layers, vocab 512) is built once per session from a config.
A few tests go through ``typer.testing.CliRunner`` to cover the CLI wiring; the rest run the
``neuron-migrate`` command as a subprocess, like a user would.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import json  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from migrator.cli import app  # noqa: E402
from migrator.verify import GoldenError, read_golden, write_golden  # noqa: E402
from migrator.verify import compare as cmp  # noqa: E402
from migrator.verify import emulate, instrument  # noqa: E402

FIX = Path(__file__).parent / "verify_fixtures"
ROOT = Path(__file__).resolve().parents[1]

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def verify(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``neuron-migrate verify ARGS`` as a subprocess (text capture)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")  # tiny models: no thread contention
    return subprocess.run([sys.executable, "-m", "migrator", "verify", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=str(ROOT))


@pytest.fixture(scope="session")
def tiny_llama() -> Path:
    """The committed tiny model (test_verify_tokenizer.py checks that make_tiny_llama.py rebuilds it byte for
    byte); the scripts only read it."""
    return FIX / "tiny-llama"


@pytest.fixture(scope="session")
def golden(tiny_llama, tmp_path_factory) -> Path:
    """A golden file recorded from the greedy generation script (under emulate)."""
    path = tmp_path_factory.mktemp("golden") / "generate.golden.json"
    proc = verify(str(FIX / "generate.py"), "--device", "emulate", "--record", str(path), "--", str(tiny_llama))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reference: none (recording)" in proc.stdout  # --record alone runs the script once
    return path


# ----------------------------------------------------------------------------- end to end

def test_auto_emulates_neuron_for_the_libraries_and_reference_maps_it_to_cpu(tiny_llama, tmp_path):
    """--device auto without torch-neuronx = emulate: transformers sees a neuron device."""
    result = CliRunner().invoke(app, ["verify", str(FIX / "device_facts.py"), "--",
                                      str(tiny_llama), str(tmp_path / "out")])
    out = result.output
    # the facts printed differ between the two runs (that is what the script shows): the printed-output
    # check says so, and it is the only failing check (device names alone are normalised)
    assert result.exit_code == 1, out
    assert re.search(r"✗ printed output\s+printed line 1: 'facts: neuron_available=True", out), out
    assert "result: FAILED (1 check(s) failed)" in out
    assert "device: emulate" in out
    # emulate run: the libraries take their neuron branches; tensors live on cpu but one created on
    # neuron reports it (the emulation tracks it, to fail ops that mix neuron and cpu tensors)
    assert ("facts: neuron_available=True torch_device=neuron training_device=neuron:0 "
            "tensor_device=neuron") in out
    # plain-cpu reference run: "neuron" is just mapped to cpu
    assert "facts: neuron_available=False torch_device=cpu training_device=cpu tensor_device=cpu" in out
    assert re.search(r"✓ generate\[0\]\s+9 token ids equal", out)
    assert "✓ compile audit" in out and re.search(r"✓ weights\[LlamaForCausalLM\]", out)
    assert out.count("generated [[") == 2  # the script's output, streamed through from both runs


@pytest.mark.xdist_group("verify-golden")
def test_record_writes_versioned_golden_and_baseline_passes(golden, tiny_llama):
    data = json.loads(golden.read_text())
    assert data["format"] == "neuron-migrate-golden" and data["version"] == 1
    assert data["tool_version"] and data["script"].endswith("generate.py")
    gen = data["observations"]["generate"]
    assert [len(call["tokens"][0]) for call in gen] == [13, 16]
    assert gen[0]["tokens"][0][:5] == [1, 17, 33, 250, 7]
    # the score fingerprint: one row per sequence, one max score per generated position (8 new tokens)
    assert [len(call["scores"]) for call in gen] == [1, 1]
    assert [len(call["scores"][0]) for call in gen] == [instrument.SCORE_STEPS] * 2
    assert all(isinstance(x, float) for call in gen for x in call["scores"][0])
    assert gen[0]["scores"] != gen[1]["scores"] and gen[0]["dtype"] == "float32"
    assert data["observations"]["compile"]["recompiles"] == []

    proc = verify(str(FIX / "generate.py"), "--device", "cpu", "--baseline", str(golden),
                  "--format", "json", "--", str(tiny_llama))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # the script's prints went to stderr: stdout is pure JSON
    assert report["status"] == "ok" and report["exit_code"] == 0
    assert report["reference"].startswith("golden file")
    assert [c["name"] for c in report["checks"]] == ["generate[0]", "generate[1]", "weights[LlamaForCausalLM]",
                                                     "printed output", "compile audit"]
    # every check says whether it compared an output of the script: the compile audit does not
    assert [c["compared"] for c in report["checks"]] == [True, True, True, True, False]
    assert "generated [" in proc.stderr


@pytest.mark.xdist_group("verify-golden")
def test_baseline_mismatch_names_first_divergent_token(golden, tiny_llama):
    # sampling with another seed instead of greedy: a "wrong generation setting" after migration
    proc = verify(str(FIX / "generate.py"), "--device", "emulate", "--baseline", str(golden),
                  "--", str(tiny_llama), "--sample", "3")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "✗ generate[0]" in proc.stdout
    assert re.search(r"call 0, sequence 0: first divergent token at position \d+: \d+ vs reference \d+",
                     proc.stdout)
    assert "result: FAILED" in proc.stdout


@pytest.mark.xdist_group("verify-golden")
def test_dtype_only_change_is_caught_by_the_scores(golden, tiny_llama):
    """A wrong migration that loads in bfloat16 where the original used float32: the tiny model's
    greedy tokens are the same, its scores are not."""
    proc = verify(str(FIX / "generate.py"), "--device", "emulate", "--baseline", str(golden),
                  "--", str(tiny_llama), "--dtype", "bfloat16")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"✗ generate\[0\]\s+13 token ids equal, but the scores differ: sequence 0, generated "
                     r"position \d+: max score \S+ vs reference \S+", proc.stdout), proc.stdout
    assert ("the model ran in bfloat16, the reference in float32: a dtype change is the likely cause"
            in proc.stdout)
    # the final weights too: their dtype is the difference
    assert re.search(r"✗ weights\[LlamaForCausalLM\]\s+\d+ of \d+ parameters differ; \S+: dtype bfloat16, "
                     r"reference float32", proc.stdout), proc.stdout
    assert "result: FAILED (3 check(s) failed)" in proc.stdout
    # with tolerances a bfloat16 model meets, the dtype change alone is still a difference (issue 15 §3)...
    loose = verify(str(FIX / "generate.py"), "--device", "emulate", "--baseline", str(golden),
                   "--atol", "0.05", "--", str(tiny_llama), "--dtype", "bfloat16")
    assert loose.returncode == 1, loose.stdout + loose.stderr
    assert re.search(r"✗ generate\[0\]\s+13 token ids equal, scores within tolerance, but the model ran in "
                     r"bfloat16: dtype bfloat16, reference float32 \(a dtype change is a difference even within "
                     r"tolerance; pass --allow-dtype-change if it is intended\)", loose.stdout), loose.stdout
    assert "(values within tolerance)" in loose.stdout
    # ... unless --allow-dtype-change says it is intended
    allowed = verify(str(FIX / "generate.py"), "--device", "emulate", "--baseline", str(golden),
                     "--atol", "0.05", "--allow-dtype-change", "--", str(tiny_llama), "--dtype", "bfloat16")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr


def test_crashing_script_exits_2_with_reason():
    proc = verify(str(FIX / "crash.py"), "--device", "cpu")
    assert proc.returncode == 2
    assert "about to fail" in proc.stdout  # streamed through
    assert "deliberate failure in the user script" in proc.stderr
    assert "exited with status 1" in proc.stderr


def test_hanging_script_times_out_and_process_tree_is_killed():
    start = time.monotonic()
    proc = verify(str(FIX / "hang.py"), "--device", "cpu", "--timeout", "3", timeout=60)
    assert proc.returncode == 2
    assert time.monotonic() - start < 30
    assert "timed out after 3 s" in proc.stderr
    match = re.search(r"grandchild (\d+)", proc.stdout)
    assert match, proc.stdout
    pid = int(match.group(1))
    for _ in range(50):
        if not _alive(pid):
            break
        time.sleep(0.1)
    assert not _alive(pid), "the script's own child survived the timeout"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state not in ("Z", "X")


def test_script_that_observes_nothing_exits_2():
    proc = verify(str(FIX / "nothing.py"), "--device", "cpu", "--reference", "none")
    assert proc.returncode == 2
    assert "nothing was observed" in proc.stderr


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        ('{"format": "something-else", "version": 1, "observations": {}}', "not a neuron-migrate golden"),
        ('{"format": "neuron-migrate-golden", "version": 99, "observations": {}}', "version 99"),
        ('{"format": "neuron-migrate-golden", "version": 1}', "no \"observations\""),
        ('{"format": "neuron-migrate-golden", "version": 1, "observations": {"generate": 3}}', "must be a list"),
        ('{"format": "neuron-migrate-golden", "version": 1, "observations": {"generate": [{"tokens": [[1]], '
         '"scores": 0.5}]}}', "scores must be a list of lists"),
    ],
)
def test_malformed_golden_exits_2_before_running(tmp_path, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    runner = CliRunner()
    # crash.py would print "about to fail" if it ran: the golden is checked first
    result = runner.invoke(app, ["verify", str(FIX / "crash.py"), "--baseline", str(bad)])
    assert result.exit_code == 2
    assert message in result.output
    assert "about to fail" not in result.output
    with pytest.raises(GoldenError):
        read_golden(bad)


def test_missing_golden_and_bad_options_exit_2(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["verify", str(FIX / "crash.py"), "--baseline", str(tmp_path / "nope.json")])
    assert result.exit_code == 2 and "cannot read golden file" in result.output
    result = runner.invoke(app, ["verify", str(FIX / "crash.py"), "--device", "tpu"])
    assert result.exit_code == 2 and "--device must be one of" in result.output
    result = runner.invoke(app, ["verify", str(tmp_path / "missing.py")])
    assert result.exit_code == 2 and "script not found" in result.output
    # no torch-neuronx / no GPU here: an explicit real device is refused with the reason
    result = runner.invoke(app, ["verify", str(FIX / "crash.py"), "--device", "neuron"])
    assert result.exit_code == 2 and "no Neuron device found" in result.output
    if not torch.cuda.is_available():
        result = runner.invoke(app, ["verify", str(FIX / "crash.py"), "--device", "cuda"])
        assert result.exit_code == 2 and "torch.cuda.is_available() is False" in result.output
    result = runner.invoke(app, ["verify", str(FIX / "crash.py"), "--format", "xml"])
    assert result.exit_code == 2


def test_trainer_loss_history_recorded(tiny_llama, tmp_path):
    golden_path = tmp_path / "train.golden.json"
    # record under emulate (TrainingArguments.device is neuron:0) AND compare with the plain-cpu run
    proc = verify(str(FIX / "train.py"), "--device", "emulate", "--record", str(golden_path),
                  "--reference", "cpu", "--", str(tiny_llama), str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    obs = read_golden(golden_path)["observations"]
    assert len(obs["losses"]) == 3
    assert all(5.0 < loss < 7.5 for loss in obs["losses"])  # ~ln(512) for a random tiny model
    assert "golden file written" in proc.stdout
    # the loss of every optimizer step (the logged losses are not compared where both sides have it)
    assert re.search(r"✓ Trainer step losses\s+3 step losses within tolerance", proc.stdout), proc.stdout
    assert "✓ losses" not in proc.stdout
    assert "observed: 3 logged loss(es), 0 compiled graph(s)" in proc.stdout


def test_compile_audit_counts_recompiles(tmp_path):
    script = str(FIX / "compile_shapes.py")
    proc = verify(script, "--device", "emulate", "--reference", "none", "--max-recompiles", "0")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"✗ compile audit\s+2 graph\(s\) compiled, 1 recompile\(s\) after warm-up \(limit 0\)",
                     proc.stdout)
    assert "compile 0/1: tensor 'x' size mismatch at index 0. expected 4, actual 6  (guard of 0/0 failed)" in proc.stdout
    assert "1 recompile(s) at " in proc.stdout and "compile_shapes.py:6 (f)" in proc.stdout

    out = tmp_path / "report.json"
    runner = CliRunner()
    result = runner.invoke(app, ["verify", script, "--device", "emulate", "--reference", "none",
                                 "--max-recompiles", "1", "--format", "json", "--output", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["status"] == "ok"
    assert report["compile"] == {"graphs": 2, "compilations": 2, "recompiles": 1}
    assert report["recompiles"][0]["reason"].endswith("expected 4, actual 6")


# static-cache generation compiling one decode graph for two prompt lengths, and prefill_chunk_size
# flagged (target-apis §3): test_verify_journey.py (the "migrated" and "chunked" runs)


def test_nproc_runs_under_torchrun_with_neuron_process_group_and_rank0_records(tmp_path):
    out = tmp_path / "report.json"
    proc = verify(str(FIX / "dist_compile.py"), "--device", "emulate", "--nproc", "2", "--reference", "none",
                  "--format", "json", "--output", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rank 0 [6.0, 6.0, 6.0]" in proc.stdout and "rank 1 [6.0, 6.0, 6.0]" in proc.stdout
    report = json.loads(out.read_text())
    assert report["compile"]["graphs"] == 1 and report["compile"]["recompiles"] == 0


def test_device_mode_is_off_inside_generate_and_back_after_it(tiny_llama):
    """The overhead fix: the device mode is popped for generate() (library code, devices from the
    model) and pushed back afterwards, also when generate() raises; "neuron" works again after it."""
    proc = verify(str(FIX / "mode_suspend.py"), "--device", "emulate", "--reference", "none", "--", str(tiny_llama))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "outside 1" in lines and "inside [0]" in lines and "after 1" in lines
    assert "raised probe failure" in lines and "after failure 1" in lines
    assert "neuron tensor on neuron" in lines  # created on the (emulated) device: the mode is back


# ----------------------------------------------------------------------------- units (no child)

def test_suspended_pops_only_its_own_mode(monkeypatch):
    from torch.overrides import TorchFunctionMode

    class Ours(TorchFunctionMode):
        pass

    class Users(TorchFunctionMode):
        pass

    depth = torch._C._len_torch_function_stack
    monkeypatch.setattr(emulate, "_mode_cls", Ours)
    base = depth()
    with Ours():
        with emulate.suspended():
            assert depth() == base
        assert depth() == base + 1
        with pytest.raises(ValueError):
            with emulate.suspended():
                raise ValueError("x")
        assert depth() == base + 1 and isinstance(torch._C._get_function_stack_at(base), Ours)
        with Users():  # a mode the user entered above ours stays, and so does ours under it
            with emulate.suspended():
                assert depth() == base + 2
    assert depth() == base


def test_compare_generate_reports_call_and_position():
    run = [{"tokens": [[1, 2, 3]]}, {"tokens": [[1, 2, 9, 4]]}]
    ref = [{"tokens": [[1, 2, 3]]}, {"tokens": [[1, 2, 3, 4]]}]
    checks = cmp.compare_generate(run, ref)
    assert [c.ok for c in checks] == [True, False]
    assert "call 1, sequence 0: first divergent token at position 2: 9 vs reference 3" in checks[1].detail
    assert not cmp.compare_generate(run[:1], ref)[0].ok  # a missing call is a mismatch


def test_compare_generate_scores_and_old_goldens_without_them():
    tokens = [[1, 5, 6]]
    run = [{"tokens": tokens, "scores": [[0.5, 0.25]], "dtype": "float32"}]
    close = [{"tokens": tokens, "scores": [[0.5 + 1e-7, 0.25]], "dtype": "float32"}]
    check = cmp.compare_generate(run, close, atol=1e-5, rtol=1e-4)[0]
    assert check.ok and "scores within tolerance" in check.detail
    assert check.max_abs_diff == pytest.approx(1e-7)
    # a golden file recorded before scores were: tokens only, still a pass
    old = [{"tokens": tokens}]
    check = cmp.compare_generate(run, old)[0]
    assert check.ok and check.detail == "3 token ids equal"
    # scores apart, same dtype: the generic causes, a dtype change among them
    far = [{"tokens": tokens, "scores": [[0.5, 0.2]], "dtype": "float32"}]
    check = cmp.compare_generate(run, far, atol=1e-5, rtol=1e-4)[0]
    assert not check.ok
    assert "but the scores differ: sequence 0, generated position 1: max score 0.25 vs reference 0.2" in check.detail
    assert "likely causes: a dtype change" in check.detail
    assert check.max_abs_diff == pytest.approx(0.05)
    # other dtype: named as the likely cause, also when the tokens themselves diverge
    bf16 = [{"tokens": [[1, 5, 7]], "scores": [[0.5, 0.2]], "dtype": "bfloat16"}]
    check = cmp.compare_generate(bf16, run)[0]
    assert not check.ok and "first divergent token at position 2: 7 vs reference 6" in check.detail
    assert "the model ran in bfloat16, the reference in float32: a dtype change is the likely cause" in check.detail
    shape = [{"tokens": tokens, "scores": [[0.5]]}]
    assert not cmp.compare_generate(shape, run)[0].ok
    # both bfloat16, one rounding step apart: a mismatch at the default tolerance, explained as rounding
    a = [{"tokens": tokens, "scores": [[0.5, 0.25]], "dtype": "bfloat16"}]
    b = [{"tokens": tokens, "scores": [[0.5, 0.25390625]], "dtype": "bfloat16"}]
    check = cmp.compare_generate(a, b, atol=1e-5, rtol=1e-4)[0]
    assert not check.ok and "both runs are bfloat16" in check.detail and "--atol" in check.detail
    assert "dtype change" not in check.detail
    assert cmp.compare_generate(a, b, atol=1e-2, rtol=1e-4)[0].ok


def test_score_recorder_returns_the_scores_untouched_and_keeps_the_first_steps():
    steps: list = []
    recorder = instrument._ScoreRecorder(steps)
    for i in range(instrument.SCORE_STEPS + 3):
        scores = torch.tensor([[0.0, float(i)], [float(-i), -100.0]])
        assert recorder(None, scores) is scores
        assert scores.tolist() == [[0.0, float(i)], [float(-i), -100.0]]
    assert len(steps) == instrument.SCORE_STEPS
    assert steps[:2] == [[0.0, 0.0], [1.0, -1.0]]


def test_compare_losses_and_pipeline_tolerances():
    ok = cmp.compare_losses([1.0, 2.0], [1.0 + 1e-7, 2.0], atol=1e-5, rtol=1e-4)[0]
    assert ok.ok and ok.max_abs_diff == pytest.approx(1e-7)
    bad = cmp.compare_losses([1.0, 2.1], [1.0, 2.0], atol=1e-5, rtol=1e-4)[0]
    assert not bad.ok and "step 1" in bad.detail and bad.max_abs_diff == pytest.approx(0.1)
    run = [{"task": "text-classification", "result": [{"label": "POS", "score": 0.9000001}]}]
    ref = [{"task": "text-classification", "result": [{"label": "POS", "score": 0.9}]}]
    assert all(c.ok for c in cmp.compare_pipeline(run, ref, 1e-5, 1e-4))
    ref_label = [{"task": "text-classification", "result": [{"label": "NEG", "score": 0.9}]}]
    check = cmp.compare_pipeline(run, ref_label, 1e-5, 1e-4)[0]
    assert not check.ok and "'POS' vs reference 'NEG'" in check.detail


def test_recompile_hints():
    assert "prefill_chunk_size" in cmp.hint_for(
        "0/2: tensor 'kwargs['position_ids']' stride mismatch at index 0. expected 8, actual 24")
    assert "max_cache_len" in cmp.hint_for(
        "0/1: tensor 'past_key_values.layers[0].keys' size mismatch at index 2. expected 12, actual 20")
    assert "pad" in cmp.hint_for("0/0: tensor 'input_ids' size mismatch at index 1. expected 7, actual 15")


def test_golden_roundtrip(tmp_path):
    path = tmp_path / "sub" / "g.json"
    write_golden(path, "s.py", {"generate": [], "losses": [1.5], "compile": {"graphs": 0}})
    data = read_golden(path)
    assert data["observations"]["losses"] == [1.5] and data["script"] == "s.py"


def test_pipeline_and_generate_wrappers_observe_without_changing_results(monkeypatch):
    monkeypatch.setattr(instrument, "OBS", {"generate": [], "pipeline": [], "losses": [], "images": []})

    class Pipeline:
        task = "text-classification"

        def __call__(self, text):
            return [{"label": "POS", "score": torch.tensor(0.75).item()}]

    class GenerationMixin:
        def generate(self, ids, inner=False):
            if not inner:  # nested generate() calls are recorded once
                self.generate(ids, inner=True)
            return torch.tensor([[1, 2, 3]])

    fake = type("M", (), {"Pipeline": Pipeline, "GenerationMixin": GenerationMixin})
    instrument._patch_pipeline(fake)
    instrument._patch_generation(fake)
    assert Pipeline()("hi") == [{"label": "POS", "score": 0.75}]
    assert GenerationMixin().generate(None).tolist() == [[1, 2, 3]]
    assert instrument.OBS["pipeline"] == [{"task": "text-classification",
                                           "result": [{"label": "POS", "score": 0.75}]}]
    assert instrument.OBS["generate"] == [{"tokens": [[1, 2, 3]]}]


def test_score_recorder_is_attached_once_per_outermost_generate(monkeypatch):
    """generate() asks for its logits processors; the recorder goes last, once per outermost call
    (not again for a nested generate), and the scores end in that call's observation."""
    monkeypatch.setattr(instrument, "OBS", {"generate": [], "pipeline": [], "losses": [], "images": []})
    built = []

    class GenerationMixin:
        dtype = torch.bfloat16

        def _get_logits_processor(self, config):
            processors = [lambda ids, scores: scores * 2]
            built.append(processors)
            return processors

        def generate(self, nested=False):
            processors = self._get_logits_processor(None)
            if not nested:
                self.generate(nested=True)
            for step in range(2):
                scores = torch.tensor([[1.0, 2.0 + step]])
                for p in processors:
                    scores = p(None, scores)
            return torch.tensor([[7, 8]])

    instrument._patch_generation(type("M", (), {"GenerationMixin": GenerationMixin}))
    GenerationMixin().generate()
    assert [len(p) for p in built] == [2, 1]  # the outer call's list got the recorder, the nested one not
    assert isinstance(built[0][-1], instrument._ScoreRecorder)
    assert instrument.OBS["generate"] == [{"tokens": [[7, 8]], "scores": [[4.0, 6.0]], "dtype": "bfloat16"}]
