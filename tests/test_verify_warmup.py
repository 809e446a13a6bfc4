"""The compile audit's warm-up is defined by calls, not graphs (issue 18).

Every compile during the first call of an observed entry point (each model's first generate(), each
pipeline's first __call__, each trainer's first training/evaluation step, each compiled callable's
first call from user code) is warm-up; a compile during a later call is a recompile.

* Diffusion, end to end: the ORIGINAL optimum-neuron script ``verify_fixtures/sd_generate.py`` is
  migrated with the CLI (``StableDiffusionPipeline ... .to("neuron")`` and
  ``pipe.unet.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)``) and verified
  on a tiny pipeline built offline with random weights (``make_tiny_sd.py``). Its UNet has
  BasicTransformerBlocks at two resolutions, so the first UNet forward compiles the block twice
  (warm-up), the second call of the same size compiles nothing, and a third call at another
  height/width is reported as a recompile (exit 1). (The migration alone, two calls of one size,
  passes the audit at its default limit 0: the fault catalogue's diffusion scenario, correct variants.)
* Generation: the first generate() with a chunked prefill compiles the prefill and the decode graph
  (warm-up); the second, with a prompt padded to the same length, compiles nothing.
* In process: the classification itself, the report lines, and the entry points verify installs
  (torch.compile'd callables, Module.compile(), wrapped pipeline calls) on a toy block.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from migrator.verify import compare as cmp  # noqa: E402
from migrator.verify import instrument  # noqa: E402
from tests.verify_util import run_verify  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "verify_fixtures"
LLAMA = FIX / "tiny-llama"
verify = run_verify


def out(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- diffusion, end to end

def test_diffusion_regional_compilation_warms_up_and_a_new_size_recompiles(tmp_path):
    """Build the tiny pipeline, migrate the original script with the CLI, and verify a variant with a
    third call at another height/width (one test: under pytest-xdist a module fixture would build and run
    everything once per worker)."""
    pytest.importorskip("diffusers")
    model = tmp_path / "tiny-sd"
    build = subprocess.run([sys.executable, str(FIX / "make_tiny_sd.py"), str(model)], capture_output=True,
                           text=True, timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT)))
    assert build.returncode == 0, out(build)
    migrated = tmp_path / "sd_generate.py"
    shutil.copy(FIX / "sd_generate.py", migrated)
    mig = subprocess.run([sys.executable, "-m", "migrator", str(migrated), "--write", "--allow-dirty",
                          "--no-progress"], capture_output=True, text=True, cwd=str(tmp_path), timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    # exit 1: one manual action, the export's default bf16 matmuls (the migrated pipeline runs in
    # float32, which this test keeps)
    assert mig.returncode == 1 and mig.stdout.count("[manual]") == 1, out(mig)
    assert "Pass dtype=torch.bfloat16 to keep the Neuron export's bf16 matmuls: this load is float32." in mig.stdout
    text = migrated.read_text()
    assert "from diffusers import StableDiffusionPipeline" in text and "optimum" not in text.split('"""')[2]
    assert 'StableDiffusionPipeline.from_pretrained(model_dir).to("neuron")' in text
    assert 'pipe.unet.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)' in text
    assert "height=64, width=64" in text
    resized = tmp_path / "sd_resized.py"
    resized.write_text(text + '\nimage = pipe(prompts[0], num_inference_steps=2, output_type="np", '
                              'height=48, width=48).images[0]\nprint("image", image.shape)\n')
    proc = verify(str(resized), "--device", "emulate", "--reference", "none", "--max-recompiles", "0", "--",
                  str(model))

    # the first call: the block compiled at both resolutions of the first UNet forward is warm-up; the
    # second call (same size) compiles nothing: the recompiles are all in the third
    assert proc.stdout.count("image (64, 64, 3)") == 2
    assert ("warm-up: 2 graphs for 2 input shapes of BasicTransformerBlock in the first call of "
            "StableDiffusionPipeline (hidden_states [2, 1024, 16], [2, 256, 32])") in proc.stdout
    assert "observed: 3 diffusion call(s), 4 compiled graph(s)" in proc.stdout
    assert "in call 2 of" not in proc.stdout

    # a third call at 48x48: a recompile of the block at both of its new resolutions, exit 1
    assert proc.returncode == 1, out(proc)
    assert "image (48, 48, 3)" in proc.stdout  # the script itself ran to the end
    assert re.search(r"✗ compile audit\s+4 graph\(s\) compiled, 2 recompile\(s\) after warm-up \(limit 0\)",
                     proc.stdout), proc.stdout
    assert "warm-up: 2 graphs for 2 input shapes of BasicTransformerBlock" in proc.stdout
    assert re.search(r"2 recompile\(s\) at \S*diffusers/models/attention\.py:\d+ \(forward\):", proc.stdout)
    assert ("compile 0/2: tensor 'hidden_states' size mismatch at index 1. expected 1024, actual 576  "
            "(guard of 0/0 failed), in call 3 of StableDiffusionPipeline") in proc.stdout
    assert "likely cause: the image size (height/width) or the sequence length changed after warm-up" in proc.stdout
    assert "result: FAILED (1 check(s) failed)" in proc.stdout


# ----------------------------------------------------------------------------- generation

def test_first_generate_compiles_prefill_and_decode_the_second_nothing():
    """The launch article's chunked prefill: prompts left-padded to a multiple of the chunk size. The
    first generate() compiles the prefill chunk [1, 16] and the decode step [1, 1] through the same
    compiled forward (warm-up); the second prompt, padded to the same 16, compiles nothing."""
    proc = verify(str(FIX / "static_generate.py"), "--device", "emulate", "--reference", "none",
                  "--max-recompiles", "0", "--", str(LLAMA), "--chunk", "16", "--pad", "16")
    assert proc.returncode == 0, out(proc)
    assert proc.stdout.count("generated [") == 2
    assert re.search(r"✓ compile audit\s+2 graph\(s\) compiled, 0 recompile\(s\) after warm-up", proc.stdout)
    assert re.search(r"warm-up: 2 graphs for 2 input shapes of \S+ in the first call of "
                     r"LlamaForCausalLM\.generate\(\) \(kwargs_input_ids \[1, 16\], \[1, 1\]", proc.stdout), proc.stdout
    assert "recompile(s) at" not in proc.stdout


# ----------------------------------------------------------------------------- units (no child)

def _compile(cid, start, reason=None, name="Block", inputs=None):
    return {"compile_id": cid, "site": "m.py:3 (forward)", "name": name, "reason": reason, "start_us": start,
            "inputs": inputs}


def test_classify_by_calls():
    calls = [{"entry": "Pipe", "call": 1, "start_us": 10, "end_us": 20},
             {"entry": "Pipe", "call": 3, "start_us": 40, "end_us": 50},
             {"entry": "f (compiled)", "call": 1, "start_us": 60, "end_us": None}]  # still running
    compiles = [
        _compile("0/0", 11, inputs=[["hidden_states", [2, 16]]]),
        _compile("0/1", 12, "0/0: tensor 'hidden_states' size mismatch at index 1. expected 16, actual 4",
                 inputs=[["hidden_states", [2, 4]]]),
        _compile("0/2", 41, "0/1: tensor 'hidden_states' size mismatch at index 1. expected 4, actual 9"),
        _compile("1/0", 45, name="helper"),  # a new code object in a later call: after warm-up too
        _compile("2/0", 30, name="outside"),  # outside every call, no guard failed: its own warm-up
        _compile("2/1", 31, "2/0: tensor 'x' size mismatch at index 0. expected 4, actual 6", name="outside"),
        _compile("3/0", 70, name="f"),
    ]
    recompiles, warmup = instrument.classify_compiles(compiles, calls)
    assert [r["compile_id"] for r in recompiles] == ["0/2", "1/0", "2/1"]
    assert recompiles[0]["call"] == "call 3 of Pipe" and "call" not in recompiles[2]
    assert recompiles[1]["reason"].startswith("1/0: first compile of helper after warm-up")
    assert [(g["entry"], g["name"], g["graphs"], len(g["shapes"])) for g in warmup] == [
        ("Pipe", "Block", 2, 2), ("f (compiled)", "f", 1, 0)]
    lines = cmp.compile_lines({"warmup": warmup, "recompiles": recompiles})
    assert lines[0] == ("warm-up: 2 graphs for 2 input shapes of Block in the first call of Pipe "
                        "(hidden_states [2, 16], [2, 4])")
    assert lines[1] == "3 recompile(s) at m.py:3 (forward):"
    assert lines[2].startswith("  compile 0/2: tensor 'hidden_states' size mismatch at index 1. expected 4, "
                               "actual 9  (guard of 0/1 failed), in call 3 of Pipe")
    assert not any(line.startswith("warm-up") and "of f " in line for line in lines)  # one graph: no line


def test_graph_inputs_and_code_names(tmp_path):
    shapes = str({"l_self_modules_l_parameters_weight_": [4, 4], "l_hidden_states_": [2, 8, 4],
                  "l_kwargs_input_ids_": [1, 16], "linear": [2, 8, 4]})
    assert instrument.graph_inputs(shapes, 3) == [["hidden_states", [2, 8, 4]], ["kwargs_input_ids", [1, 16]]]
    assert instrument.graph_inputs("", 3) is None and instrument.graph_inputs("not a dict", 1) is None
    src = tmp_path / "mod.py"
    src.write_text("import torch\n\n\nclass Block(torch.nn.Module):\n    @staticmethod\n    def helper(x):\n"
                   "        return x\n\n    def forward(self, x):\n        return x\n\n\ndef deco(fn):\n"
                   "    def wrapper(*a):\n        return fn(*a)\n    return wrapper\n")
    assert instrument.code_name(str(src), 9, "forward") == "Block"
    assert instrument.code_name(str(src), 5, "helper") == "Block.helper"  # the decorator's line
    assert instrument.code_name(str(src), 14, "wrapper") == "deco.<locals>.wrapper"
    assert instrument.code_name(str(tmp_path / "missing.py"), 1, "f") == "f"


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, hidden_states):
        return self.proj(hidden_states) * 2


class _Net(torch.nn.Module):
    """One block instance per resolution, as in a UNet: each is called once per forward."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([_Block(), _Block()])

    def forward(self, x):
        x = self.blocks[0](x)
        return self.blocks[1](x[:, ::2])


@pytest.fixture
def fresh_audit(monkeypatch):
    """The entry-point patches of the verify child, installed in this process and undone afterwards."""
    import torch._dynamo
    import torch._dynamo.eval_frame
    from torch._dynamo.utils import clear_compilation_metrics

    monkeypatch.setattr(instrument, "CALLS", [])
    monkeypatch.setattr(instrument, "_counts", {})
    monkeypatch.setattr(torch, "compile", torch.compile)
    monkeypatch.setattr(torch._dynamo.eval_frame.OptimizedModule, "__call__",
                        torch._dynamo.eval_frame.OptimizedModule.__call__)
    instrument._patch_torch_compile(torch)
    instrument._patch_optimized_module(torch._dynamo.eval_frame)
    torch._dynamo.reset()
    clear_compilation_metrics()
    yield
    torch._dynamo.reset()
    clear_compilation_metrics()


def test_module_compile_blocks_called_from_user_code(fresh_audit):
    """Regional compilation without a pipeline (a user's own loop over the model): each compiled block's
    first call is warm-up; the same size again compiles nothing; a new size is two recompiles."""
    torch.manual_seed(0)
    net = _Net()
    for block in net.blocks:
        block.compile(backend="eager", fullgraph=True, dynamic=False)
    with torch.no_grad():
        for _ in range(2):
            net(torch.ones(2, 8, 4))
        assert instrument.compile_activity()["recompiles"] == []
        net(torch.ones(2, 6, 4))
    info = instrument.compile_activity()
    assert [g["name"] for g in info["warmup"]] == ["_Block", "_Block"]
    assert [g["entry"] for g in info["warmup"]] == ["_Block (compiled)"] * 2
    assert [r["call"] for r in info["recompiles"]] == ["call 3 of _Block (compiled)"] * 2
    assert "size mismatch at index 1. expected 4, actual 6" in info["recompiles"][0]["reason"]


def test_compiled_blocks_inside_a_pipeline_call_and_torch_compile_forms(fresh_audit):
    """Inside a wrapped pipeline call the pipeline call is the entry: both resolutions of the shared
    block compile in its first call (one group, 2 graphs for 2 input shapes); torch.compile(module) and
    @torch.compile(...) are entries when called from user code."""
    torch.manual_seed(0)
    block = _Block()
    block.compile(backend="eager", fullgraph=True, dynamic=False)

    class Pipe:
        def __call__(self, size):
            x = torch.ones(2, size, 4)
            return block(block(x)[:, ::2])

    Pipe.__call__ = instrument._outermost("diffusion", Pipe.__call__)
    monkey_obs = {"generate": [], "pipeline": [], "losses": [], "images": []}
    instrument.OBS, saved = monkey_obs, instrument.OBS
    try:
        pipe = Pipe()
        with torch.no_grad():
            pipe(8)
            pipe(8)
            info = instrument.compile_activity()
            assert info["recompiles"] == [] and len(info["warmup"]) == 1
            assert cmp.warmup_lines(info) == [
                "warm-up: 2 graphs for 2 input shapes of _Block in the first call of Pipe "
                "(hidden_states [2, 8, 4], [2, 4, 4])"]
            pipe(6)
    finally:
        instrument.OBS = saved
    info = instrument.compile_activity()
    assert [r["call"] for r in info["recompiles"]] == ["call 3 of Pipe"] * 2

    from torch._dynamo.utils import clear_compilation_metrics

    torch._dynamo.reset()
    clear_compilation_metrics()
    whole = torch.compile(_Block(), backend="eager", dynamic=False)

    @torch.compile(backend="eager", dynamic=False)
    def double(x):
        return x * 2

    assert hasattr(double, "__neuron_migrate_wrapped__")
    with torch.no_grad():
        for n in (3, 3, 5):
            whole(torch.ones(n, 4))
            double(torch.ones(n))
    recompiles = instrument.compile_activity()["recompiles"]
    assert sorted(r["call"] for r in recompiles) == ["call 3 of _Block (compiled)", "call 3 of double (compiled)"]
