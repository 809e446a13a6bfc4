"""NM410 across the files of a project (issue 17) and within one (issue 24): the artifact one script
traces and saves and another (or the same one) loads with ``torch.jit.load``. A load becomes what the
migrated save of that path writes -- a Transformers model (save_pretrained) or a module's state dict --
only where the save can be seen (codemods/xla/artifacts.py: the same unit; the project facts: the
tracing scripts are migrated and save only Transformers models); a marker elsewhere. The run of both
sides of a project is tests/runnable/test_inference.py (trace_serve); the runs of the same-file pairs
(the fixtures) on CPU are at the end of this file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from codemods.xla.torch_neuronx import ELSEWHERE, LOAD_MARKED
from migrator.discover import Candidate
from migrator.engine import RuleSelection, run
from tests.plugin_stub import plugin_in_process, plugin_stub

FIXTURES = Path(__file__).parent / "fixtures" / "NM410"
CLASSIFIER = Path(__file__).parent / "verify_fixtures" / "tiny-classifier"

TRACE = '''import torch
import torch_neuronx
from transformers import AutoModelForSequenceClassification

model = AutoModelForSequenceClassification.from_pretrained("checkpoint")
example = (torch.zeros(1, 8, dtype=torch.long), torch.ones(1, 8, dtype=torch.long))
traced = torch_neuronx.trace(model, example)
torch.jit.save(traced, "model_neuron.pt")
'''

SERVE = '''import torch

model = torch.jit.load("model_neuron.pt")
print(model(torch.zeros(1, 8, dtype=torch.long), torch.ones(1, 8, dtype=torch.long))[0])
'''

NO_TRACE = '''import torch
import torch_neuronx

model = torch_neuronx.DataParallel(torch.nn.Linear(2, 2))
'''


def migrate(tmp_path: Path, files: dict[str, str]) -> dict[str, tuple[str, list]]:
    candidates = []
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        candidates.append(Candidate(tmp_path / name, name, "python"))
    out = {}
    for result in run(candidates, RuleSelection(), jobs=1):
        text = result.new_bytes.decode() if result.status == "changed" else files[result.path]
        out[result.path] = (text, [f for f in result.findings if f.rule == "NM410"])
    return out


def code(text: str) -> str:
    """The text without its comment lines (the markers name from_pretrained as well)."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def test_a_load_whose_save_is_in_another_file_is_marked(tmp_path):
    """The project facts say that some file traces, not what it traced: a Transformers load of what may be a
    state dict would fail at run time, so the loading side gets a marker and keeps its torch.jit.load."""
    out = migrate(tmp_path, {"trace.py": TRACE, "serve.py": SERVE})
    trace, trace_findings = out["trace.py"]
    serve, serve_findings = out["serve.py"]
    assert 'traced._orig_mod.save_pretrained("model_neuron.pt")' in trace
    assert "torch.jit" not in trace
    # the loading side is in the project: the saving side needs no marker about it
    assert not any("save_pretrained directory" in f.message for f in trace_findings)
    # the compile cache is filled where the trace compiled: one warm-up call with the example inputs
    assert 'traced(*(t.to("neuron") for t in example))' in trace
    assert 'torch.jit.load("model_neuron.pt")' in serve and "from_pretrained" not in code(serve)
    assert [f.fix for f in serve_findings] == ["manual"]
    assert f"{LOAD_MARKED}{ELSEWHERE}" in serve_findings[0].message


SAVE_AND_LOAD_HERE = '''import os

import torch
from neuronx_distributed.trace import ModelBuilder


def build(module_fn, example, save_dir):
    builder = ModelBuilder(router=None, tp_degree=1, checkpoint_loader=None)
    builder.add("main", module_fn, [example])
    torch.jit.save(builder.trace(), os.path.join(save_dir, "model.pt"))


def load(save_dir):
    return torch.jit.load(os.path.join(save_dir, "model.pt"))
'''


def test_a_load_whose_save_is_in_its_own_file_does_not_say_another_file(tmp_path):
    """A file that saves (a path the rule cannot follow) and loads its own compiled model, in a project where
    another file traces: the load is marked, but not as saved in another file."""
    out = migrate(tmp_path, {"trace.py": TRACE, "model.py": SAVE_AND_LOAD_HERE})
    text, findings = out["model.py"]
    loads = [f for f in findings if f.message.startswith(LOAD_MARKED)]
    assert loads and all(ELSEWHERE not in f.message for f in loads)
    assert 'torch.jit.load(os.path.join(save_dir, "model.pt"))' in text


def test_a_load_after_the_tracing_script_was_migrated_reads_its_save_pretrained(tmp_path):
    """The two-file positive: the tracing script was migrated first (it says what it saves: save_pretrained,
    and nothing traces any more), then the serving script reads that Transformers model."""
    migrated_trace = migrate(tmp_path, {"trace.py": TRACE})["trace.py"][0]
    serve, findings = migrate(tmp_path, {"trace.py": migrated_trace, "serve.py": SERVE})["serve.py"]
    assert "torch.jit" not in serve
    assert 'from_pretrained("model_neuron.pt").to("neuron").eval()' in serve
    assert "architectures[0]" in serve and "import transformers" in serve
    # its calls get their inputs moved, as a trace's did
    assert 'dtype=torch.long).to("neuron")' in serve
    assert any(f.fix == "applied" and "save_pretrained" in f.message for f in findings)


def test_a_load_after_a_migrated_state_dict_save_is_not_a_transformers_load(tmp_path):
    """A tracing script migrated first that saves a state dict (a module that is not a Transformers model):
    the file that loads it must not read a save_pretrained directory there."""
    conv_trace = TRACE.replace('AutoModelForSequenceClassification.from_pretrained("checkpoint")',
                               "torch.nn.Conv2d(3, 8, 3)")
    migrated_trace = migrate(tmp_path, {"trace.py": conv_trace})["trace.py"][0]
    assert 'torch.save(traced._orig_mod.state_dict(), "model_neuron.pt")' in migrated_trace
    serve, findings = migrate(tmp_path, {"trace.py": migrated_trace, "serve.py": SERVE})["serve.py"]
    assert "from_pretrained" not in code(serve) and 'torch.jit.load("model_neuron.pt")' in serve
    assert [f.fix for f in findings] == ["manual"]


def test_a_project_migrated_twice_keeps_its_decisions(tmp_path):
    """The second run sees the migrated tracing script (save_pretrained, no trace); the serving script
    marked by the first run keeps its marker: each file's output is a fixed point."""
    first = migrate(tmp_path, {"trace.py": TRACE, "serve.py": SERVE})
    again = migrate(tmp_path, {name: text for name, (text, _) in first.items()})
    assert {name: text for name, (text, _) in again.items()} == {name: text for name, (text, _) in first.items()}


def test_saving_side_alone_is_marked(tmp_path):
    trace, findings = migrate(tmp_path, {"trace.py": TRACE})["trace.py"]
    assert "save_pretrained" in trace
    assert any(f.fix == "manual" and "save_pretrained directory" in f.message for f in findings)


def test_load_of_an_artifact_the_project_never_traced_is_left_alone(tmp_path):
    out = migrate(tmp_path, {"parallel.py": NO_TRACE, "serve.py": SERVE})
    assert out["serve.py"][0] == SERVE


@pytest.mark.parametrize("fixture", ["state_dict_wrapper", "state_dict_conv2d", "artifacts", "neg_load_of_unseen_save",
                                     "neg_torchscript_artifact"])
def test_no_transformers_load_where_no_transformers_model_was_saved(fixture):
    after = (FIXTURES / f"{fixture}.after.py").read_text()
    assert "from_pretrained" not in code(after) and "architectures[0]" not in after


def test_each_load_of_a_mixed_project_reads_what_its_path_holds():
    """A text encoder (Transformers), a conv (a torch.nn module built with literals) and a VAE block (a module
    the file does not build): from_pretrained, load_state_dict, a marker."""
    lines = code((FIXTURES / "mixed_artifacts.after.py").read_text()).splitlines()
    load = lines[lines.index("def load_all():"):]
    assert any("from_pretrained(TEXT)" in line for line in load)
    assert "    post_quant_conv.load_state_dict(torch.load(POST))" in load
    assert "    decoder = torch.jit.load(DECODER)" in load
    assert not any("from_pretrained(POST)" in line or "from_pretrained(DECODER)" in line for line in lines)


# ------------------------------------------------------------------------------------------ the pairs run on CPU
# The migrated same-file pairs (fixtures NM410/pretrained_load_before_save, state_dict_wrapper, state_dict_conv2d)
# run on the CPU. The only changes made to the migrated text: the device string "neuron" becomes "cpu" and
# torch.compile's backend "neuron" becomes "eager" (TorchDynamo capture without the Neuron compiler).

def on_cpu(source: str) -> str:
    return re.sub(r'(torch\.compile\([^\n]*backend=)"neuron"', r'\1"eager"', source).replace('"neuron"', '"cpu"')


def run_pair(tmp_path: Path, fixture: str, driver: str) -> str:
    """The migrated fixture followed by ``driver``, run as a script in ``tmp_path``; its stdout."""
    script = tmp_path / f"{fixture}.py"
    script.write_text(on_cpu((FIXTURES / f"{fixture}.after.py").read_text()) + "\n\n" + textwrap.dedent(driver))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    plugin_stub(tmp_path)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def test_migrated_transformers_pair_loads_what_it_saved(tmp_path: Path):
    from transformers import AutoModelForSequenceClassification

    ids = [[1, 17, 23, 42, 5, 2, 0, 0]]
    out = run_pair(tmp_path, "pretrained_load_before_save", f"""
        import json
        ids = torch.tensor({ids})
        mask = (ids != 0).long()
        export({str(CLASSIFIER)!r}, ids, mask)
        with torch.no_grad():
            print(json.dumps(classify(ids, mask).tolist()))
        """)
    # the artifact is the save_pretrained directory the load reads
    assert (tmp_path / "classifier_neuron.pt" / "config.json").is_file()
    got = torch.tensor(json.loads(out.splitlines()[-1]))
    ids_t = torch.tensor(ids)
    with torch.no_grad():
        model = AutoModelForSequenceClassification.from_pretrained(CLASSIFIER).eval()
        expected = model(input_ids=ids_t, attention_mask=(ids_t != 0).long()).logits
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=1e-5), (got, expected)


def test_migrated_module_pair_rebuilds_the_module_and_loads_its_state_dict(tmp_path: Path):
    out = run_pair(tmp_path, "state_dict_wrapper", """
        import json
        torch.manual_seed(0)
        images = torch.rand(2, 3, 16, 16)
        rng = torch.random.get_rng_state()
        export(images)
        torch.random.set_rng_state(rng)
        reference = Head(8, 4).eval()  # the module export() built and traced, built again from the same seed
        torch.manual_seed(1)  # serve() builds Head(8, 4) from other weights: only its load_state_dict makes them equal
        with torch.no_grad():
            got = serve(images)
            expected = reference(images)
            fresh = Head(8, 4).eval()(images)
        print(json.dumps({"got": got.tolist(), "expected": expected.tolist(), "fresh": fresh.tolist()}))
        """)
    values = {k: torch.tensor(v) for k, v in json.loads(out.splitlines()[-1]).items()}
    assert set(torch.load(tmp_path / "head_neuron.pt")) == {"conv.weight", "conv.bias", "fc.weight", "fc.bias"}
    assert torch.allclose(values["got"], values["expected"], atol=1e-6)
    assert not torch.allclose(values["fresh"], values["expected"], atol=1e-3)  # the check can fail


def test_migrated_script_that_reuses_its_artifact_runs_twice(tmp_path: Path):
    """First run: compile, save the state dict, load it; second run (the artifact on disk): load it only."""
    driver = """
        import json
        conv = torch.nn.Conv2d(3, 8, kernel_size=3, padding=1)
        conv.load_state_dict(torch.load(ARTIFACT))
        x = torch.rand(1, 3, 32, 32)
        with torch.no_grad():
            print(json.dumps(torch.equal(model(x), conv(x))))
        """
    first = run_pair(tmp_path, "state_dict_conv2d", driver)
    artifact = tmp_path / "model_neuron.pt"
    saved = artifact.stat().st_mtime_ns
    second = run_pair(tmp_path, "state_dict_conv2d", driver)
    assert artifact.stat().st_mtime_ns == saved  # the second run did not compile and save again
    for out in (first, second):
        assert out.splitlines()[-2:] == ["torch.Size([1, 8, 32, 32])", "true"], out


def test_a_compiled_model_shares_its_module_unless_built_from_a_copy():
    """Why NM410 compiles a copy where the code changes the module after the trace
    (fixture NM410/trace_then_moved): torch.compile wraps the module itself."""
    import copy

    import torch

    model = torch.nn.Linear(2, 2)
    shared = torch.compile(model, backend="eager")
    own = torch.compile(copy.deepcopy(model), backend="eager")
    model.to(torch.float64)  # what `model.cpu()` / `.half()` after the trace does to the compiled model
    assert shared._orig_mod.weight.dtype == torch.float64
    assert own._orig_mod.weight.dtype == torch.float32


def test_a_wrapper_traced_around_a_module_used_elsewhere_leaves_that_module_where_it_was(monkeypatch):
    """NM410/wrapper_of_shared_module: `trace(Wrapper(self.base_model), ...)` where another method runs
    `self.base_model` on the CPU. `.to(device)` of the wrapper would move the shared module in place (the trace left
    it on the CPU): the migration compiles a copy. Run with "meta" standing for the neuron device."""
    import types

    from migrator.engine import RuleSelection, RuleSet, migrate_text

    source = (FIXTURES / "wrapper_of_shared_module.before.py").read_text()
    migrated, _ = migrate_text(source, "python", RuleSet.from_selection(RuleSelection()))
    assert "copy.deepcopy(_Prefill(self.base_model))" in migrated
    runnable = migrated.replace('backend="neuron"', 'backend="eager"').replace('"neuron"', '"meta"')
    plugin_in_process(monkeypatch)
    scope: dict = {}
    exec(compile(runnable, "migrated.py", "exec"), scope)

    class Base(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, input_ids, use_cache=False):
            return types.SimpleNamespace(logits=self.lin(input_ids))

    base = Base()
    backend = scope["Backend"](base, torch.ones(1, 4))
    assert base.lin.weight.device.type == "cpu"
    assert backend.decode(torch.ones(1, 4)).logits.shape == (1, 4)  # the CPU path still runs
    shared = Base()
    scope["_Prefill"](shared).to("meta")
    assert shared.lin.weight.device.type == "meta"  # what compiling the wrapper itself would have done


def test_migrated_trace_compiles_a_model_with_a_graph_break(tmp_path, monkeypatch):
    """NM410 writes torch.compile without fullgraph=True: a traced model with a data-dependent step (a
    graph break for dynamo; the trace had recorded it as a constant) runs, where fullgraph=True fails."""
    torch = pytest.importorskip("torch")
    from migrator.engine import RuleSelection, RuleSet, migrate_text

    source = (
        "import torch\nimport torch_neuronx\n\n\n"
        "class Scale(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        y = x * 2\n"
        "        torch._dynamo.graph_break()  # what dynamo cannot capture (a data-dependent shape, say)\n"
        "        return y\n\n\n"
        "example = torch.ones(2, 3)\n"
        "traced = torch_neuronx.trace(Scale(), example)\n"
        "out = traced(example)\n"
    )
    migrated, _ = migrate_text(source, "python", RuleSet.from_selection(RuleSelection()))
    assert "fullgraph" not in migrated and "torch.compile(" in migrated
    runnable = migrated.replace('"neuron"', '"cpu"').replace('backend="cpu"', 'backend="eager"')
    scope: dict = {}
    plugin_in_process(monkeypatch)  # the plugin import it keeps
    exec(compile(runnable, "migrated.py", "exec"), scope)
    assert torch.equal(scope["out"].cpu(), torch.full((2, 3), 2.0))
    torch._dynamo.reset()  # the frame compiled above (with its break) is not reused
    strict = torch.compile(scope["Scale"](), backend="eager", fullgraph=True, dynamic=False)
    with pytest.raises(Exception, match="(?i)graph.break"):
        strict(torch.ones(2, 3))


def test_a_compiled_module_has_none_of_the_torchscript_attributes_nm410_marks():
    """NM410's TORCHSCRIPT_ATTRIBUTES: the trace (TorchScript) had them, the torch.compile'd module raises."""
    import torch

    from codemods.xla.torch_neuronx import TORCHSCRIPT_ATTRIBUTES

    model = torch.nn.Linear(2, 2).eval()
    scripted = torch.jit.trace(model, torch.ones(1, 2))
    compiled = torch.compile(model)
    for attr in TORCHSCRIPT_ATTRIBUTES:
        assert hasattr(scripted, attr), attr
        with pytest.raises(AttributeError):
            getattr(compiled, attr)


def test_compiled_model_called_outside_no_grad_gives_outputs_without_autograd(tmp_path: Path):
    # the traced model recorded no autograd: the migrated check() compares with numpy outside no_grad, and the
    # module it compiled from a copy still runs on the CPU inputs it is given after the trace
    out = run_pair(tmp_path, "grad_free_outputs", """
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        example = torch.rand(3, 4)
        got = check(model, example)
        assert all(p.requires_grad for p in model.parameters())  # the user's module is left as it was
        print(got.shape, score(model, example).shape, score_in_block(model, example).shape)
        compiled, fresh = compare_with_fresh(model, example, lambda: torch.nn.Linear(4, 2))
        print(compiled.shape, fresh.shape)
        """)
    assert out.split() == ["(3,", "2)"] * 5


def test_a_traced_model_trained_then_traced_again_trains_and_saves_its_weights(tmp_path: Path):
    """NM410/traced_then_trained: the compiled module keeps autograd (a frozen one would not train: "element 0 of
    tensors does not require grad"), and the second trace is the compiled model itself, whose state dict is
    saved (torch.compile of a compiled module is a plain function, without _orig_mod)."""
    out = run_pair(tmp_path, "traced_then_trained", """
        import json

        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        before = model.weight.detach().clone()
        run(model, torch.ones(1, 4), [(torch.randn(3, 4), None)])
        saved = torch.load("model.pt")
        print(json.dumps({"changed": not torch.equal(before, model.weight.detach()),
                          "keys": sorted(saved), "same": torch.equal(saved["weight"], model.weight.detach())}))
    """)
    assert json.loads(out.splitlines()[-1]) == {"changed": True, "keys": ["bias", "weight"], "same": True}
