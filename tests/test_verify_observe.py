"""What ``neuron-migrate verify`` observes of a script (issue 15 §2) and the dtype verdict (§3).

For each kind: a tiny script of ``tests/verify_fixtures/observe_*.py`` is recorded once (``--record``),
then variants that differ in exactly one behaviour are compared with it (``--baseline``): a fault gives
exit 1 and names the difference; a correct variant (compiled, other logging, progress/timing output, a
backward made by library code) gives exit 0. Each verify runs in a scratch working directory, so that
the checkpoints' relative paths are compared as the runs saw them. The rest are units (no child).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from migrator.verify import compare as cmp
from migrator.verify import observe

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "verify_fixtures"


def verify(cwd: Path, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "migrator", "verify", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(cwd))


def runs(tmp: Path, script: str, model: list[str], variants: dict[str, list[str]]) -> dict:
    """Record the script as it is, then compare every variant with that golden file (device cpu)."""
    golden = tmp / "golden.json"
    out = {"record": verify(tmp, str(FIX / script), "--device", "cpu", "--record", str(golden), "--", *model)}
    out["golden"] = json.loads(golden.read_text()) if golden.exists() else None
    for name, extra in variants.items():  # verify's own options before a "--", the script's after it
        flags, rest = (extra[:extra.index("--")], extra[extra.index("--") + 1:]) if "--" in extra else ([], extra)
        out[name] = verify(tmp, str(FIX / script), "--device", "cpu", "--baseline", str(golden), *flags,
                           "--", *model, *rest)
    return out


def text(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


def failed(proc: subprocess.CompletedProcess) -> list[str]:
    return re.findall(r"^  ✗ (\S+)", proc.stdout, re.M)


# ----------------------------------------------------------------------------- a custom training loop

@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    return runs(tmp_path_factory.mktemp("loop"), "observe_loop.py", [], {
        "correct": ["--compile", "--chatty", "--library-backward"],
        "lr": ["--lr", "0.2"],
        "skipped_step": ["--skip-step", "2"],
        "elsewhere": ["--ckpt", "other/model.pt"],
        "printed": ["--print-scale", "2"],
        "bf16": ["--bf16"],
    })


@pytest.mark.xdist_group("verify-observe-loop")
def test_custom_loop_observations_are_recorded(loop):
    assert loop["record"].returncode == 0, text(loop["record"])
    obs = loop["golden"]["observations"]
    assert len(obs["backward"]) == 4 and all(isinstance(v, float) for v in obs["backward"])
    assert obs["optimizers"] == [{"class": "SGD", "steps": 4, "lr": [[0.1], [0.1], [0.05], [0.05]]}]
    assert sorted(obs["grads"]["Net"]) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    weight = obs["weights"]["Net"]["fc1.weight"]
    assert weight["shape"] == [8, 4] and weight["dtype"] == "float32" and len(weight["sample"]) == 32
    assert [c["path"] for c in obs["checkpoints"]] == ["ckpt/model.pt"]  # relative to the working dir
    assert sorted(obs["checkpoints"][0]["tensors"]) == sorted(obs["weights"]["Net"])
    # the user's model is called 5 times by the script (4 steps, the final loss): a submodule called by
    # its forward is part of that call
    assert [(f["model"], f["call"]) for f in obs["forward"]] == [("Net", i) for i in range(5)]
    assert obs["stdout"] == {"lines": [obs["stdout"]["lines"][0]], "exit": 0}
    assert obs["stdout"]["lines"][0].startswith("final loss ")


@pytest.mark.xdist_group("verify-observe-loop")
def test_custom_loop_correct_variant_passes(loop):
    """Compiled, with a progress line, a timing line, logging on stderr and a backward made by library
    code: the same behaviour."""
    proc = loop["correct"]
    assert proc.returncode == 0, text(proc)
    assert re.search(r"✓ loss\.backward\(\)\s+4 losses within tolerance", proc.stdout)
    assert re.search(r"✓ printed output\s+1 printed lines equal \(2 timing/progress line\(s\) ignored\)", proc.stdout)
    assert re.search(r"✓ forward\[Net\]\s+5 call\(s\) within tolerance \(output \[16, 1\] float32, min cosine "
                     r"1\.000000\)", proc.stdout), proc.stdout
    assert re.search(r"✓ gradients\[Net\]\s+4 parameters within tolerance", proc.stdout)
    assert "1 graph(s) compiled" in proc.stdout


@pytest.mark.parametrize("variant, names, message", [
    ("lr", {"optimizer[0]"}, r"✗ optimizer\[0\]\s+step 0, param group 0: lr 0\.2 vs reference 0\.1"),
    ("skipped_step", {"optimizer[0]"}, r"✗ optimizer\[0\]\s+3 optimizer step\(\) calls, reference 4"),
    ("elsewhere", {"checkpoint"}, r"✗ checkpoint ckpt/model\.pt\s+not saved by this run: the reference saved it "
                                  r"with torch\.save \(this run saved other/model\.pt instead\)"),
    ("printed", {"printed"},
     r"✗ printed output\s+printed line 1: 'final loss [\d.]+', reference 'final loss [\d.]+'"),
    ("bf16", {"weights[Net]", "checkpoint"}, r"✗ weights\[Net\]\s+4 of 4 parameters differ; \S+: dtype bfloat16, "
                                             r"reference float32 \(a dtype change is a difference"),
])
@pytest.mark.xdist_group("verify-observe-loop")
def test_custom_loop_fault_is_named(loop, variant, names, message):
    proc = loop[variant]
    assert proc.returncode == 1, text(proc)
    assert re.search(message, proc.stdout), proc.stdout
    assert "result: FAILED" in proc.stdout
    shown = failed(proc)
    for name in names:
        assert any(f.startswith(name) for f in shown), shown
    if variant == "printed":  # only the printed value differs: nothing else is flagged
        assert shown == ["printed"]
    if variant == "elsewhere":
        assert shown == ["checkpoint", "checkpoint"]  # the missing one, and the one saved elsewhere


# ----------------------------------------------------------------------------- forward calls

@pytest.fixture(scope="module")
def forward(tmp_path_factory):
    return runs(tmp_path_factory.mktemp("forward"), "observe_forward.py", [str(FIX / "tiny-classifier")], {
        "compiled": ["--compile"],
        "bf16": ["--bf16"],
        "bf16_allowed": ["--allow-dtype-change", "--atol", "1e-2", "--", "--bf16"],
    })


@pytest.mark.xdist_group("verify-observe-forward")
def test_forward_calls_of_a_loaded_model(forward):
    assert forward["record"].returncode == 0, text(forward["record"])
    calls = forward["golden"]["observations"]["forward"]
    assert [(c["model"], c["call"]) for c in calls] == [("DistilBertForSequenceClassification", 0),
                                                         ("DistilBertForSequenceClassification", 1)]
    logits = calls[0]["output"]
    assert logits["shape"] == [1, 2] and logits["dtype"] == "float32" and len(logits["top1"]) == 1
    assert set(logits) >= {"mean", "std", "min", "max", "norm", "sample"}
    # the model's inner modules are called by Transformers, not by the script: not observed
    proc = forward["compiled"]
    assert proc.returncode == 0, text(proc)
    assert re.search(r"✓ forward\[DistilBertForSequenceClassification\]\s+2 call\(s\) within tolerance \(output "
                     r"\[1, 2\] float32, min cosine 1\.000000, top-1 agreement 2/2\)", proc.stdout), proc.stdout


@pytest.mark.xdist_group("verify-observe-forward")
def test_dtype_change_is_a_difference_unless_allowed(forward):
    proc = forward["bf16"]
    assert proc.returncode == 1, text(proc)
    assert re.search(r"✗ forward\[DistilBertForSequenceClassification\]\s+call 0: dtype bfloat16, reference "
                     r"float32 .*cosine 0\.99\d+, top-1 agreement 1/1", proc.stdout), proc.stdout
    assert re.search(r"✗ weights\[DistilBertForSequenceClassification\]\s+40 of 40 parameters differ; \S+: dtype "
                     r"bfloat16, reference float32", proc.stdout)
    # --allow-dtype-change says it is intended: the values are compared (here with a bf16 tolerance)
    allowed = forward["bf16_allowed"]
    assert allowed.returncode == 0, text(allowed)
    assert re.search(r"✓ forward\[DistilBertForSequenceClassification\]\s+2 call\(s\) within tolerance \(output "
                     r"\[1, 2\] bfloat16, min cosine 0\.99\d+, top-1 agreement 2/2\)", allowed.stdout), allowed.stdout


# ----------------------------------------------------------------------------- Trainer

@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    return runs(tmp_path_factory.mktemp("trainer"), "observe_trainer.py", [str(FIX / "tiny-llama")], {
        "logging": ["--logging-steps", "2"],
        "lr": ["--lr", "2e-3"],
    })


@pytest.mark.xdist_group("verify-observe-trainer")
def test_trainer_steps_eval_and_save_model_recorded(trainer):
    assert trainer["record"].returncode == 0, text(trainer["record"])
    obs = trainer["golden"]["observations"]
    assert len(obs["trainer_steps"]) == 3 and all(5.0 < x < 7.5 for x in obs["trainer_steps"])
    assert obs["trainer_steps"] == pytest.approx(obs["losses"], abs=1e-3)  # logging_steps=1: the same
    assert set(obs["eval"][0]) == {"eval_loss", "epoch"}  # timing metrics left out
    saved = [c for c in obs["checkpoints"] if c["api"] == "Trainer.save_model"]
    assert [c["path"] for c in saved] == ["out/final"] and len(saved[0]["tensors"]) == 21
    assert obs["optimizers"][0]["class"] == "AdamW" and obs["optimizers"][0]["steps"] == 3


@pytest.mark.xdist_group("verify-observe-trainer")
def test_trainer_other_logging_steps_is_the_same_run(trainer):
    proc = trainer["logging"]
    assert proc.returncode == 0, text(proc)
    assert re.search(r"✓ Trainer step losses\s+3 step losses within tolerance", proc.stdout), proc.stdout
    assert re.search(r"✓ evaluate\[0\]\s+2 metrics within tolerance", proc.stdout)
    assert re.search(r"✓ checkpoint out/final\s+21 tensors within tolerance", proc.stdout)


@pytest.mark.xdist_group("verify-observe-trainer")
def test_trainer_learning_rate_fault_is_named(trainer):
    proc = trainer["lr"]
    assert proc.returncode == 1, text(proc)
    assert re.search(r"✗ optimizer\[0\]\s+step 0, param group 0: lr 0\.002 vs reference 0\.001", proc.stdout)
    assert re.search(r"✗ Trainer step losses\s+step 1: loss \S+ vs reference \S+", proc.stdout)
    assert re.search(r"✗ evaluate\[0\]\s+eval_loss: ", proc.stdout)


# ----------------------------------------------------------------------------- units (no child)

def test_tensor_comparison_gives_abs_rel_cosine_and_top1():
    a = {"shape": [2, 3], "dtype": "float32", "mean": 0.5, "std": 1.0, "min": -1.0, "max": 2.0, "norm": 3.0,
         "sample": [1.0, 2.0, -1.0], "top1": [1, 2]}
    same = cmp.compare_tensor(a, dict(a), 1e-5, 1e-4)
    assert same.problem is None and same.cosine == pytest.approx(1.0) and same.top1 == (2, 2)
    off = dict(a, sample=[1.0, 2.0, -0.5], top1=[1, 0])
    d = cmp.compare_tensor(off, a, 1e-5, 1e-4)
    assert d.problem == "sampled value 2 -0.5 vs reference -1" and d.max_abs == pytest.approx(0.5)
    assert d.max_rel == pytest.approx(0.5) and d.top1 == (1, 2) and 0.9 < d.cosine < 1.0
    assert "cosine 0.9" in d.figures() and "top-1 agreement 1/2" in d.figures()
    assert cmp.compare_tensor(dict(a, shape=[3, 2]), a, 1, 1).problem == "shape [3, 2], reference [2, 3]"
    bf16 = cmp.compare_tensor(dict(a, dtype="bfloat16"), a, 1e-5, 1e-4)
    assert bf16.problem.startswith("dtype bfloat16, reference float32") and "values within tolerance" in bf16.problem
    assert cmp.compare_tensor(dict(a, dtype="bfloat16"), a, 1e-5, 1e-4, allow_dtype_change=True).problem is None


def test_checkpoint_keys_and_paths_are_normalised():
    assert observe._key("module._orig_mod.fc1.weight") == "fc1.weight"
    assert observe._key("encoder.module.weight") == "encoder.module.weight"  # only a leading module.
    t = {"shape": [1], "dtype": "float32", "sample": [1.0]}
    run = [{"api": "torch.save", "path": "/tmp/a1/ckpt/model.pt", "tensors": {"w": t}}]
    ref = [{"api": "xm.save", "path": "/tmp/b2/ckpt/model.pt", "tensors": {"w": t}}]
    assert [c.ok for c in cmp.compare_checkpoints(run, ref, 1e-5, 1e-4, False)] == [True]
    moved = [dict(run[0], path="/tmp/a1/other/model.pt")]
    checks = cmp.compare_checkpoints(moved, ref, 1e-5, 1e-4, False)
    assert [c.ok for c in checks] == [False, False]
    missing = cmp.compare_checkpoints([dict(run[0], tensors={})], ref, 1e-5, 1e-4, False)
    assert not missing[0].ok and "1 tensors missing from this run (w)" in missing[0].detail


def test_printed_output_normalisation():
    assert cmp.normalise_line("epoch 3 took 1.52 s") is None
    assert cmp.normalise_line(" 45%|####      | 9/20 [00:01<00:02, 5.1it/s]") is None
    assert cmp.normalise_line("\rstep 3/10") is None
    assert cmp.normalise_line("loss 0.25 on xla:0 at 0x7f00aa") == ("loss # on <device> at <address>", [0.25])
    assert cmp.normalise_line("bf16 checkpoint-3") == ("bf16 checkpoint-#", [3.0])
    ok = cmp.compare_stdout({"lines": ["acc 0.5000001", "done"], "exit": 0},
                            {"lines": ["acc 0.5", "done", "took 3 s"], "exit": 0}, 1e-5, 1e-4)
    assert [c.ok for c in ok] == [True] and "1 timing/progress line(s) ignored" not in ok[0].detail
    bad = cmp.compare_stdout({"lines": ["acc 0.6"], "exit": 3}, {"lines": ["acc 0.5"], "exit": 0}, 1e-5, 1e-4)
    assert [(c.name, c.ok) for c in bad] == [("exit status", False), ("printed output", False)]
    assert bad[0].detail == "3, reference 0"
    # a line the run adds (a debug print) is named, not a difference; a line it leaves out is one
    more = cmp.compare_stdout({"lines": ["x", "a", "b"]}, {"lines": ["a"]}, 1e-5, 1e-4)[0]
    assert more.ok and more.detail == "1 printed lines equal; 2 more line(s) printed by this run (e.g. 'x')"
    less = cmp.compare_stdout({"lines": ["a"]}, {"lines": ["a", "b"]}, 1e-5, 1e-4)[0]
    assert not less.ok and less.detail == "the reference printed 'b' (its line 2), this run printed nothing more"
    # a progress line printed with end="\r" is ignored, the line printed after it on the same terminal
    # line is the reference's line; a reference line the run only shows inside its progress is missing
    shown = cmp.compare_stdout({"lines": ["progress 1/6\rstep 0: loss 1.25", "\rprogress 2/6"]},
                               {"lines": ["step 0: loss 1.25"]}, 1e-5, 1e-4)[0]
    assert shown.ok and shown.detail == "1 printed lines equal (1 timing/progress line(s) ignored)"
    hidden = cmp.compare_stdout({"lines": ["step 0: loss 1.25\rprogress 1/6"]}, {"lines": ["step 0: loss 1.25"]},
                                1e-5, 1e-4)[0]
    assert not hidden.ok


def test_kinds_absent_from_an_old_golden_are_not_compared():
    run = {"generate": [], "stdout": {"lines": ["x"], "exit": 0}, "weights": {"M": {}}}
    assert cmp.compare(run, {"generate": []}, 1e-5, 1e-4) == []
    assert [c.name for c in cmp.compare(run, {"generate": [], "stdout": {"lines": []}}, 1e-5, 1e-4)] == \
        ["printed output"]
    assert cmp.observed_count({"optimizers": [{"steps": 3}, {"steps": 2}]}, "optimizers") == 5
    assert cmp.audit({"graphs": 0}, 0).compared is False
    assert cmp.Check("x", True).to_dict()["compared"] is True
