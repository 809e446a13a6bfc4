"""NM410 across the files of a project (issue 17): the artifact one script traces and saves and another
loads with ``torch.jit.load``. The project facts (``Rule.project_probes``) tie the two sides; the run
of both is tests/runnable/test_inference.py (trace_serve)."""

from __future__ import annotations

from pathlib import Path

from migrator.discover import Candidate
from migrator.engine import RuleSelection, run

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


def test_both_sides_are_rewritten(tmp_path):
    out = migrate(tmp_path, {"trace.py": TRACE, "serve.py": SERVE})
    trace, trace_findings = out["trace.py"]
    serve, _ = out["serve.py"]
    assert 'traced._orig_mod.save_pretrained("model_neuron.pt")' in trace
    assert "torch.jit" not in trace and "torch.jit" not in serve
    # the loading side is in the project: the saving side needs no marker about it
    assert not any("save_pretrained directory" in f.message for f in trace_findings)
    # the compile cache is filled where the trace compiled: one warm-up call with the example inputs
    assert 'traced(*(t.to("neuron") for t in example))' in trace
    assert 'from_pretrained("model_neuron.pt").to("neuron").eval()' in serve
    assert "architectures[0]" in serve and "import transformers" in serve
    # its calls get their inputs moved, as a trace's did
    assert 'dtype=torch.long).to("neuron")' in serve


def test_saving_side_alone_is_marked(tmp_path):
    trace, findings = migrate(tmp_path, {"trace.py": TRACE})["trace.py"]
    assert "save_pretrained" in trace
    assert any(f.fix == "manual" and "save_pretrained directory" in f.message for f in findings)


def test_load_of_an_artifact_the_project_never_traced_is_left_alone(tmp_path):
    out = migrate(tmp_path, {"parallel.py": NO_TRACE, "serve.py": SERVE})
    assert out["serve.py"][0] == SERVE
