"""Pins of the target libraries that are too low for the migrated code (NM503/NM523,
codemods/project/dependency_policy.py): raised in a run that migrates old-stack code, also in a
requirements file or install line that names no Neuron package; left alone in a run without any."""

from __future__ import annotations

import json
from pathlib import Path

from migrator.discover import Candidate
from migrator.engine import RuleSelection, run

REQUIREMENTS = "transformers==4.40.0\nhuggingface_hub==0.33.4\nnumpy\n"
OLD_STACK = 'from optimum.neuron import NeuronModelForCausalLM\nm = NeuronModelForCausalLM.from_pretrained("x", export=True)\n'
PLAIN = 'from transformers import AutoModel\nm = AutoModel.from_pretrained("x")\n'
CELL = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
#: a notebook whose install cell names no Neuron package, before a cell of old-stack code
NOTEBOOK = {"cells": [{**CELL, "source": ["!pip install transformers==4.32.0 diffusers==0.20.2\n"]},
                      {**CELL, "source": ["import torch_neuronx\n", "traced = torch_neuronx.trace(model, example)\n"]}],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _run(tmp_path: Path, code: str, notebook: bool = True) -> dict:
    (tmp_path / "requirements.txt").write_text(REQUIREMENTS)
    (tmp_path / "infer.py").write_text(code)
    cands = [Candidate(tmp_path / "requirements.txt", "requirements.txt", "requirements"),
             Candidate(tmp_path / "infer.py", "infer.py", "python")]
    if notebook:
        (tmp_path / "setup.ipynb").write_text(json.dumps(NOTEBOOK))
        cands.append(Candidate(tmp_path / "setup.ipynb", "setup.ipynb", "notebook"))
    return {r.path: r for r in run(cands, RuleSelection(), jobs=1)}


def test_pins_too_low_for_the_migrated_code_are_raised(tmp_path: Path):
    results = _run(tmp_path, OLD_STACK)
    requirements = results["requirements.txt"].new_bytes.decode()
    assert requirements.splitlines() == ["transformers>=5.23", "huggingface_hub>=1.32", "numpy"]
    assert {f.rule for f in results["requirements.txt"].findings} == {"NM503"}
    notebook = json.loads(results["setup.ipynb"].new_bytes)
    assert notebook["cells"][0]["source"] == ['!pip install "transformers>=5.23" "diffusers>=0.42"\n']


def test_a_run_without_old_stack_code_keeps_its_pins(tmp_path: Path):
    results = _run(tmp_path, PLAIN, notebook=False)
    assert all(r.status == "unchanged" for r in results.values()), {p: r.status for p, r in results.items()}


#: a project already on TorchNeuron: `import torch_neuronx` is the native plugin there, not old-stack code
NATIVE = ('import torch\nimport torch_neuronx\n\n'
          'model = torch.compile(torch.nn.Linear(2, 2).to("neuron"), backend="neuron")\n'
          'other = AutoModel.from_pretrained("x", torch_dtype=torch.bfloat16)\n')


def test_a_project_on_torchneuron_keeps_its_pins_and_its_torch_dtype(tmp_path: Path):
    """A bare `import torch_neuronx` (the TorchNeuron plugin) is no old-stack code: the project keeps its
    Transformers pin (its vendored code may need exactly it) and `torch_dtype=`, which `dtype=` would break on
    releases before 4.56; a torch_neuronx.trace is old-stack code."""
    results = _run(tmp_path, NATIVE, notebook=False)
    assert all(r.status == "unchanged" for r in results.values()), {p: r.status for p, r in results.items()}
    results = _run(tmp_path, NATIVE + "traced = torch_neuronx.trace(model, torch.zeros(1, 2))\n", notebook=False)
    assert results["requirements.txt"].new_bytes.decode().splitlines()[0] == "transformers>=5.23"
    assert "dtype=torch.bfloat16" in results["infer.py"].new_bytes.decode()


def test_old_stack_code_of_another_project_raises_no_pin(tmp_path: Path):
    """A run over a folder of projects: what one project's code needs says nothing of another's pins."""
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "requirements.txt").write_text(REQUIREMENTS)
    (tmp_path / "demo" / "prepare.py").write_text(PLAIN)
    (tmp_path / "neuron").mkdir()
    (tmp_path / "neuron" / "infer.py").write_text(OLD_STACK)
    cands = [Candidate(tmp_path / "demo" / "requirements.txt", "demo/requirements.txt", "requirements"),
             Candidate(tmp_path / "demo" / "prepare.py", "demo/prepare.py", "python"),
             Candidate(tmp_path / "neuron" / "infer.py", "neuron/infer.py", "python")]
    results = {r.path: r for r in run(cands, RuleSelection(), jobs=1)}
    assert results["demo/requirements.txt"].status == "unchanged"
    assert results["neuron/infer.py"].status == "changed"
    # one project (a marker at its root): its old-stack code raises the pins of every folder in it
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\nversion = '0'\n")
    results = {r.path: r for r in run(cands, RuleSelection(), jobs=1)}
    assert results["demo/requirements.txt"].new_bytes.decode().splitlines()[0] == "transformers>=5.23"


def test_project_roots():
    from migrator.engine import project_roots

    root = Path("/nonexistent-root-for-test")
    cands = [Candidate(root / "a" / "x.py", "a/x.py", "python"), Candidate(root / "a" / "s" / "y.py", "a/s/y.py", "python"),
             Candidate(root / "b" / "z.py", "b/z.py", "python")]
    assert project_roots(cands) == [root / "a", root / "a", root / "b"]  # a folder of projects
    cands.append(Candidate(root / "run.sh", "run.sh", "shell"))  # a file at the root: one project
    assert set(project_roots(cands)) == {root}


def test_an_install_line_is_raised_when_only_the_code_of_the_run_names_the_old_stack(tmp_path: Path):
    """NM523 is in the run through its project fact (``project_facts_in``): no file installs a Neuron package,
    the launcher's `pip install transformers==4.6.0` is raised because the script it sits beside uses torch-xla;
    an Inf1 notebook's own code (``import torch_neuron``) does the same for its install cell."""
    (tmp_path / "run.sh").write_text('#!/bin/bash\npip install "transformers==4.6.0"\npython train.py\n')
    (tmp_path / "train.py").write_text("import torch_xla.core.xla_model as xm\ndevice = xm.xla_device()\n")
    (tmp_path / "inf1.ipynb").write_text(json.dumps({**NOTEBOOK, "cells": [
        {**CELL, "source": ['!pip install --upgrade "transformers==4.6.0"\n']},
        {**CELL, "source": ["import torch\n", "import torch_neuron\n", "traced = torch.neuron.trace(model, example)\n"]}]}))
    cands = [Candidate(tmp_path / "run.sh", "run.sh", "shell"), Candidate(tmp_path / "train.py", "train.py", "python")]
    results = {r.path: r for r in run(cands, RuleSelection(), jobs=1)}
    assert results["run.sh"].new_bytes.decode().splitlines()[1] == 'pip install "transformers>=5.23"'
    assert {f.rule for f in results["run.sh"].findings} == {"NM523"}
    results = {r.path: r for r in run([Candidate(tmp_path / "inf1.ipynb", "inf1.ipynb", "notebook")], RuleSelection(), jobs=1)}
    assert json.loads(results["inf1.ipynb"].new_bytes)["cells"][0]["source"] == ['!pip install --upgrade "transformers>=5.23"\n']
    # the same launcher beside plain Transformers code keeps its pin
    (tmp_path / "train.py").write_text(PLAIN)
    results = {r.path: r for r in run(cands, RuleSelection(), jobs=1)}
    assert results["run.sh"].status == "unchanged"


def test_a_clone_of_the_old_release_tag_is_marked_where_the_pin_is_raised(tmp_path: Path):
    """NM624: a notebook that pins transformers 4.52.3 and clones its tag to run the example scripts; the run
    migrates old-stack code, so the pin is raised and the clone (whose scripts pass flags 5.23 rejects) is marked.
    A clone of the current tag and one of another repository stay unmarked."""
    cells = [{**CELL, "source": ["!pip install transformers==4.52.3\n",
                                 "!git clone https://github.com/huggingface/transformers --branch v4.52.3\n",
                                 "!git clone -b v5.23.0 https://github.com/huggingface/transformers.git\n",
                                 "!git clone https://github.com/pytorch/examples --branch v2.0\n"]},
             {**CELL, "source": ["from optimum.neuron import NeuronTrainer\n"]}]
    (tmp_path / "train.ipynb").write_text(json.dumps({**NOTEBOOK, "cells": cells}))
    result = run([Candidate(tmp_path / "train.ipynb", "train.ipynb", "notebook")], RuleSelection(), jobs=1)[0]
    source = json.loads(result.new_bytes)["cells"][0]["source"]
    assert source == [
        '!pip install "transformers>=5.23"\n',
        "# TODO(neuron-migrate NM624): Clone transformers at v5.23.0 (the release installed now): the scripts of "
        "v4.52.3 pass arguments it rejects.\n",
        "!git clone https://github.com/huggingface/transformers --branch v4.52.3\n",
        "!git clone -b v5.23.0 https://github.com/huggingface/transformers.git\n",
        "!git clone https://github.com/pytorch/examples --branch v2.0\n",
    ]
    assert [f.rule for f in result.findings if f.rule == "NM624"] == ["NM624"]
