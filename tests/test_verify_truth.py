"""verify tells the truth on real scripts (issue 26): deterministic comparisons (seeding, the dropout
policy, hints that name the likely cause), the neuron device that must be reached, printed output."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from migrator.verify import compare as cmp  # noqa: E402
from migrator.verify import core  # noqa: E402
from migrator.verify.child import DROPOUT_ENV, SEED_ENV  # noqa: E402
from migrator.verify.runner import run_child  # noqa: E402
from tests.verify_util import run_verify  # noqa: E402

FIX = Path(__file__).parent / "verify_fixtures" / "truth"


def _lines(result) -> list[str]:
    assert result.ok, result.reason
    return result.data["observations"]["stdout"]["lines"]


# ----------------------------------------------------------------------------- §3 seeds

def test_seeded_children_draw_the_same_numbers_unseeded_ones_do_not(tmp_path):
    import io

    sink = io.StringIO()
    runs = [run_child(FIX / "unseeded.py", [], "cpu", stdout=sink, env_extra={SEED_ENV: "0"}) for _ in range(2)]
    assert _lines(runs[0]) == _lines(runs[1])
    free = [run_child(FIX / "unseeded.py", [], "cpu", stdout=sink, env_extra={SEED_ENV: "off"}) for _ in range(2)]
    assert _lines(free[0]) != _lines(free[1])


def test_against_seeds_both_sides_and_says_so(tmp_path):
    script = tmp_path / "mig.py"
    script.write_text((FIX / "unseeded.py").read_text())
    proc = run_verify(str(script), "--against", str(FIX / "unseeded.py"), "--device", "emulate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "both sides start seeded with 0" in proc.stdout
    proc = run_verify(str(script), "--against", str(FIX / "unseeded.py"), "--device", "emulate", "--no-seed")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "start seeded" not in proc.stdout


def test_dropout_off_makes_every_dropout_the_identity():
    import io

    kept = _lines(run_child(FIX / "dropout.py", [], "cpu", stdout=io.StringIO(),
                            env_extra={SEED_ENV: "0", DROPOUT_ENV: "off"}))
    assert kept == ["dropout kept 1000", "sdpa mean 1.0"]
    dropped = _lines(run_child(FIX / "dropout.py", [], "cpu", stdout=io.StringIO(), env_extra={SEED_ENV: "0"}))
    assert dropped[0] != "dropout kept 1000"


@pytest.mark.parametrize("device,dropout,off", [("emulate", "auto", False), ("cpu", "auto", False),
                                                ("neuron", "auto", True), ("emulate", "off", True),
                                                ("neuron", "on", False)])
def test_dropout_policy_is_off_on_a_real_device_and_said_in_the_report(tmp_path, device, dropout, off):
    opts = core.Options(script=tmp_path / "x.py", dropout=dropout)
    report = {"notes": []}
    core._child_env(opts, report, device)
    assert report["dropout"] == ("off" if off else "on")
    assert (opts.child_env.get(DROPOUT_ENV) == "off") is off
    assert any("dropout disabled on both sides" in n for n in report["determinism"]) is off
    assert opts.child_env[SEED_ENV] == "0"


def test_divergent_sampled_generation_names_sampling_not_the_dtype():
    run = [{"tokens": [[1, 2, 3]], "dtype": "bfloat16", "sampled": True}]
    ref = [{"tokens": [[1, 2, 4]], "dtype": "bfloat16", "sampled": True}]
    detail = cmp.compare_generate(run, ref)[0].detail
    assert "do_sample" in detail and "dtype" not in detail.split("do_sample")[0]
    assert "rounding" not in detail
    # a real dtype change still says so
    run[0]["dtype"] = "float32"
    assert "dtype change is the likely cause" in cmp.compare_generate(run, ref)[0].detail


# ----------------------------------------------------------------------------- §6 the neuron device

def test_migrated_run_that_never_reached_neuron_fails():
    orig = str(FIX / "xla_original.py")
    proc = run_verify(str(FIX / "xla_migrated_cpu.py"), "--against", orig, "--device", "emulate")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "nothing ran on neuron" in proc.stdout
    proc = run_verify(str(FIX / "xla_migrated.py"), "--against", orig, "--device", "emulate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nothing ran on neuron" not in proc.stdout


def test_neuron_check_only_where_the_run_was_meant_for_neuron(tmp_path):
    assert core.neuron_check({"reached_neuron": False}, True)[0].ok is False
    assert core.neuron_check({"reached_neuron": True}, True) == []
    assert core.neuron_check({"reached_neuron": False}, False) == []
    assert core.neuron_check({}, True) == []  # real neuron: no emulated device to ask
    script = tmp_path / "s.py"
    script.write_text("# neuron-migrate: a marker\nx = 1\n")
    assert not core._mentions_neuron(script)
    script.write_text('model.to("neuron")\n')
    assert core._mentions_neuron(script)


def test_cpu_batch_into_a_neuron_compiled_model_is_device_mixing():
    import io

    lines = _lines(run_child(FIX / "compile_mix.py", [], "emulate", stdout=io.StringIO()))
    assert lines[0] == "True"
    assert lines[1].startswith("error: Expected all tensors to be on the same device")


# ----------------------------------------------------------------------------- §5 printed output

def test_inf2_is_a_word_and_inf_a_number():
    assert cmp.normalise_line("instance inf2.xlarge, 2 cores") == ("instance inf2.xlarge, # cores", [2.0])
    assert cmp.normalise_line("loss inf")[1] == [float("inf")]


@pytest.mark.parametrize("line", ["time_avg_ms 12.3", "latency: 4.5", "throughput 100", "12.5 samples/s",
                                  "p50_ms=3", "generation_time 0.4", "tokens/s: 88"])
def test_latency_and_timing_lines_are_ignored(line):
    assert cmp.normalise_line(line) is None
    check = cmp.compare_stdout({"lines": ["done", line]}, {"lines": ["done", line.replace("1", "9")]}, 1e-5, 1e-4)
    assert check[-1].ok


def test_printed_old_class_vs_new_one_is_renamed_not_a_difference():
    ref = {"lines": ["NeuronTrainingArguments(output_dir=out, lr=0.001)", "NeuronModelForCausalLM(", "  x: 4"]}
    run = {"lines": ["TrainingArguments(output_dir=out, lr=0.001)", "LlamaForCausalLM(", "  x: 4"]}
    check = cmp.compare_stdout(run, ref, 1e-5, 1e-4)[-1]
    assert check.ok and "renamed" in check.detail and "'NeuronTrainingArguments' -> 'TrainingArguments'" in check.detail
    # another value, or two new classes, are still differences
    run["lines"][0] = "TrainingArguments(output_dir=out, lr=0.002)"
    assert not cmp.compare_stdout(run, ref, 1e-5, 1e-4)[-1].ok
    assert not cmp.compare_stdout({"lines": ["GPT2ForCausalLM("]}, {"lines": ["LlamaForCausalLM("]}, 1e-5, 1e-4)[-1].ok


# ----------------------------------------------------------------------------- §4 the same model on both sides

def test_wrapped_model_is_named_as_the_model_it_wraps():
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from migrator.verify import observe

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.q(x)

    class FullyShardedDataParallel(torch.nn.Module):  # the wrapper's shape: .module
        def __init__(self, module):
            super().__init__()
            self.module = module

    m = Tiny()
    assert observe._model_name(torch.compile(m)) == "Tiny"
    assert observe._model_name(torch.nn.DataParallel(m)) == "Tiny"
    assert observe._model_name(FullyShardedDataParallel(torch.compile(m))) == "Tiny"
    assert observe._model_name(peft.get_peft_model(Tiny(), peft.LoraConfig(target_modules=["q"]))) == "Tiny"


def test_eager_modules_are_observed_beside_a_compiled_one():
    import io

    result = run_child(FIX / "eager_and_compiled.py", [], "cpu", stdout=io.StringIO())
    assert result.ok, result.reason
    calls = [(f["model"], f["call"]) for f in result.data["observations"]["forward"]]
    assert calls == [("Linear", 0), ("Sequential", 0), ("Linear", 1), ("Sequential", 1)]


# ----------------------------------------------------------------------------- §7 originals that must run

@pytest.mark.parametrize("script,args,expected", [
    ("old_apis.py", [str(FIX.parent / "tiny-llama")], ["token set False", "ids True 2"]),
    ("trace_gpt2.py", [], ["logits (1, 8, 64) cache layers 1"]),
])
def test_originals_of_the_old_era_run(script, args, expected):
    import io

    result = run_child(FIX / script, args, "cpu", side="original", stdout=io.StringIO(), stderr=io.StringIO(),
                       env_extra={"HF_TOKEN": "", "HF_HOME": str(FIX / "no-hf-home")})
    assert _lines(result) == expected


def test_original_failing_on_a_missing_api_says_to_use_the_old_libraries():
    assert "--original-env auto" in core.original_hint({"error": "ImportError: cannot import name 'X' from 'trl'"})
    assert "--original-env auto" in core.original_hint({"error": "AttributeError: 'Tok' object has no attribute 'y'"})
    assert core.original_hint({"error": "ImportError: x", "not_emulated": "torch_xla.x"}) == ""
    assert core.original_hint({"error": "RuntimeError: boom"}) == ""
