"""Project-wide context (``Rule.project_triggers``): a rule sees units that match only its project
triggers when some file of the same run matched its own triggers. NM105 uses it to report
``device_map="auto"`` in the plain-Transformers files of a project that is being migrated."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process, run
from migrator.python_engine import PythonContext
from migrator.rules import PythonRule
from migrator.text_engine import TextContext, run_text
from migrator.rules import TextRule

OLD = """\
import torch_xla.core.xla_model as xm
from transformers import AutoModel

device = xm.xla_device()
m = AutoModel.from_pretrained("x", device_map="auto")
"""

PLAIN = """\
from transformers import AutoModel, pipeline

m = AutoModel.from_pretrained("x", device_map="auto")
p = pipeline("text-classification", model="x", device_map='auto')
q = AutoModel.from_pretrained("x", device_map="auto")  # neuron-migrate: ignore[NM105]
"""


def files(tmp_path: Path, **named: str) -> list[Candidate]:
    out = []
    for name, text in named.items():
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(text))
        out.append(Candidate(path, path.name, "python"))
    return out


def by_name(results) -> dict:
    return {r.path: r for r in results}


NM105 = RuleSelection(select=("NM105",))


def test_plain_file_of_a_migrated_project_gets_markers(tmp_path):
    results = by_name(run(files(tmp_path, old=OLD, plain=PLAIN), NM105, jobs=1))
    old, plain = results["old.py"], results["plain.py"]
    # the old-stack unit is rewritten ...
    assert 'device_map="neuron"' in old.new_bytes.decode()
    assert [f.fix for f in old.findings] == ["applied"]
    # ... the plain one is left as written, with a marker above each call (not the ignored line)
    text = plain.new_bytes.decode()
    lines = text.splitlines()
    code = [line for line in lines if not line.startswith("# TODO(neuron-migrate")]
    assert code == PLAIN.splitlines()
    marked = [lines[i + 1] for i, line in enumerate(lines) if line.startswith("# TODO(neuron-migrate NM105)")]
    assert marked == [
        'm = AutoModel.from_pretrained("x", device_map="auto")',
        "p = pipeline(\"text-classification\", model=\"x\", device_map='auto')",
    ]
    assert 'use device="neuron"' in text  # the pipeline() advice names its own keyword
    assert [(f.rule, f.fix, f.line) for f in plain.findings] == [("NM105", "manual", 3), ("NM105", "manual", 4)]


def test_project_without_old_stack_code_is_not_reported(tmp_path):
    results = run(files(tmp_path, plain=PLAIN, other="import torch\n"), NM105, jobs=1)
    assert [r.status for r in results] == ["unchanged", "unchanged"]
    assert all(not r.findings for r in results)


def test_a_file_processed_on_its_own_has_no_project(tmp_path):
    (cand,) = files(tmp_path, plain=PLAIN)
    result = process(cand, RuleSet.from_selection(NM105))
    assert result.status == "unchanged" and not result.findings


def test_second_run_adds_nothing(tmp_path):
    cands = files(tmp_path, old=OLD, plain=PLAIN)
    first = by_name(run(cands, NM105, jobs=1))
    for cand in cands:
        cand.path.write_bytes(first[cand.display].new_bytes)
    second = run(cands, NM105, jobs=1)
    assert all(r.status == "unchanged" for r in second)


def test_project_context_reaches_worker_processes(tmp_path):
    # enough files for a process pool: the context found in the main process must travel with the work
    named = {"old": OLD, **{f"plain{i:02d}": PLAIN for i in range(20)}}
    results = run(files(tmp_path, **named), NM105, jobs=2)
    assert all(r.status == "changed" for r in results), [r.error for r in results]
    assert sum(1 for r in results for f in r.findings if f.fix == "manual") == 40


def test_cli_reports_it_in_json(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from migrator.cli import app

    monkeypatch.setenv("NEURON_MIGRATE_RULES", "codemods:all_rules")
    files(tmp_path, old=OLD, plain=PLAIN)
    res = CliRunner().invoke(app, [str(tmp_path), "--select", "NM105", "--format", "json", "--no-progress"])
    assert res.exit_code == 1, res.output
    report = json.loads(res.stdout)
    plain = next(f for f in report["files"] if f["path"].endswith("plain.py"))
    assert {f["fix"] for f in plain["findings"]} == {"manual"}
    assert all("does not detect Neuron" in f["message"] for f in plain["findings"])


# ---------------------------------------------------------------- the engine mechanism, rule-agnostic


class _Contextual(PythonRule):
    id = "NM998"
    title = "test rule"
    triggers = ("OLDSTACK",)
    project_triggers = ("WATCHED",)

    def handlers(self):
        return {cst.Module: self._on_module}

    def _on_module(self, node: cst.Module, ctx: PythonContext) -> None:
        # a marker, not an [applied] finding: the engine reports those only for an edit in the diff
        ctx.marker(node.body[0], f"in_project={ctx.in_project}")


class _ContextualText(TextRule):
    id = "NM997"
    title = "test rule"
    kinds = ("shell",)
    triggers = ("OLDSTACK",)
    project_triggers = ("WATCHED",)

    def apply(self, ctx: TextContext) -> None:
        ctx.finding(0, f"in_project={ctx.in_project}")


def rules_of_test():
    return [_Contextual(), _ContextualText()]


def test_engine_shows_project_units_only_in_a_project_with_the_rules_own_triggers(tmp_path, monkeypatch):
    sel = RuleSelection("tests.test_project_context:rules_of_test")
    cands = files(tmp_path, a="OLDSTACK = 1\n", b="WATCHED = 1\n", c="UNRELATED = 1\n")
    msgs = {r.path: [f.message for f in r.findings] for r in run(cands, sel, jobs=1)}
    assert msgs == {"a.py": ["in_project=True"], "b.py": ["in_project=True"], "c.py": []}
    msgs = {r.path: [f.message for f in r.findings] for r in run(cands[1:], sel, jobs=1)}
    assert msgs == {"b.py": [], "c.py": []}


@pytest.mark.parametrize("project, expected", [(frozenset(), []), (frozenset({"NM997"}), ["in_project=True"])])
def test_text_engine_honours_project_triggers(project, expected):
    _, findings = run_text("WATCHED=1\n", "shell", [_ContextualText()], project=project)
    assert [f.message for f in findings] == expected


# ------------------------------------------------------------------ project facts (Rule.project_probes)

def _project(tmp_path: Path, named: dict[str, tuple[str, str]]) -> list[Candidate]:
    out = []
    for name, (kind, text) in named.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        out.append(Candidate(path, name, kind))
    return out


@pytest.mark.parametrize("jobs", [1, 2])
def test_install_lines_get_the_libraries_the_project_code_uses(tmp_path, jobs):
    """optimum-neuron brought TRL/PEFT/diffusers to the code that used them: the install line that
    loses it lists them (found in any file of the run, also in worker processes); a file migrated on
    its own only gets what the requirement itself implied."""
    cands = _project(tmp_path, {
        "requirements.txt": ("requirements", "optimum-neuron==0.3.0\n"),
        "train.py": ("python", "from optimum.neuron import NeuronSFTTrainer\nimport peft\n"),
        "setup.sh": ("shell", "pip install optimum[neuronx]\n"),
        "Dockerfile": ("dockerfile", "FROM ubuntu:22.04\nRUN pip install optimum-neuron\n"),
    })
    sel = RuleSelection(select=("NM501", "NM522", "NM523"))
    new = {r.path: r.new_text for r in run(cands, sel, jobs=jobs)}
    assert "trl>=1.16\npeft>=0.21" in new["requirements.txt"]
    assert '"trl>=1.16" "peft>=0.21"' in new["setup.sh"] and '"trl>=1.16" "peft>=0.21"' in new["Dockerfile"]
    alone = {r.path: r.new_text for r in run(cands[:1], sel, jobs=1)}
    assert "trl" not in alone["requirements.txt"] and "accelerate>=1.15" in alone["requirements.txt"]


@pytest.mark.parametrize("code, kept", [
    ("from neuronx_distributed.parallel_layers import layers\n", {"neuronx_distributed==0.11.0"}),
    ("import neuronx_distributed as nxd\n", {"neuronx_distributed==0.11.0"}),
    # NxD Inference depends on NxD: both stay while code imports NxD Inference
    ("from neuronx_distributed_inference.models.config import NeuronConfig\n",
     {"neuronx_distributed==0.11.0", "neuronx-distributed-inference"}),
    ("import torch\n", set()),  # no code imports them: both go
])
def test_old_packages_the_code_still_imports_stay_installed(tmp_path, code, kept):
    """The migration leaves NxD layers and NxD Inference models to a person (markers): a requirement, install
    line or guide that removed their package while a file of the project imports it breaks that file's import."""
    cands = _project(tmp_path, {
        "requirements.txt": ("requirements", "neuronx_distributed==0.11.0\nneuronx-distributed-inference\n"),
        "model.py": ("python", code),
        "Dockerfile": ("dockerfile", "FROM ubuntu:22.04\nRUN pip install neuronx-distributed-inference\n"),
    })
    results = {r.path: r for r in run(cands, RuleSelection(select=("NM501", "NM522")), jobs=1)}
    lines = results["requirements.txt"].new_text.splitlines()
    assert {x for x in ("neuronx_distributed==0.11.0", "neuronx-distributed-inference") if x in lines} == kept
    for name in kept:
        package = name.split("=")[0].replace("_", "-")
        assert f"# TODO(neuron-migrate NM501): Remove {package} when no file of the project imports " \
               f"{package.replace('-', '_')} any more." in lines
    docker = results["Dockerfile"].new_text or (tmp_path / "Dockerfile").read_text()
    assert ("pip install neuronx-distributed-inference" in docker) == ("neuronx-distributed-inference" in kept)


@pytest.mark.parametrize("code", [
    "import neuronx_distributed as nxd\nimport torch_xla.core.xla_model as xm\n\nd = xm.xla_device()\n",  # unused
    "import neuronx_distributed as nxd\nimport torch_xla.core.xla_model as xm\n\nd = xm.xla_device()\n"
    "nxd.parallel_layers.parallel_state.initialize_model_parallel(2)\n",  # used: left to a person
])
def test_a_requirement_stays_exactly_while_the_migrated_code_imports_it(tmp_path, code):
    """The `left:` facts are those of the output: an import the migration removes (unused once the code is
    migrated) does not keep its package, and one run is enough (a second run over the output changes nothing)."""
    cands = _project(tmp_path, {"requirements.txt": ("requirements", "neuronx-distributed\ntorch-neuronx\n"),
                                "model.py": ("python", code)})
    sel = RuleSelection()
    first = {r.path: r for r in run(cands, sel, jobs=1)}
    model = first["model.py"].new_text or code
    requirements = first["requirements.txt"].new_text
    assert ("neuronx-distributed\n" in requirements) == ("import neuronx_distributed" in model)
    for c in cands:
        c.path.write_text(first[c.display].new_text or c.path.read_text())
    assert all(r.status == "unchanged" for r in run(cands, sel, jobs=1))


def test_facts_are_gathered_from_files_no_rule_migrates(tmp_path):
    rules = RuleSet.from_selection(RuleSelection())
    found: set[str] = set()
    rules.project_facts(b"import numpy\nfrom diffusers import DiffusionPipeline\n", found)
    assert found == {"fact:uses:diffusers"}


# ------------------------------------------------------------------ launch facts (Rule.launch_facts)

BF16_SCRIPT = """\
import os

import torch

model = torch.nn.Linear(2, 2)
if os.environ.get("XLA_USE_BF16"):
    model = model.to(torch.bfloat16)
"""


def _bf16(results) -> dict[str, str]:
    """Per Python file: "bf16" (the read became the launcher's value), "marker" (NM409) or "as is"."""
    out = {}
    for r in results:
        if r.kind != "python":
            continue
        text = r.new_text if r.new_text is not None else ""
        out[r.path] = ("bf16" if text and "XLA_USE_BF16" not in text and "model = model.to(torch.bfloat16)" in text
                       else "marker" if "NM409" in text else "as is")
    return out


def _notebook(*cells: str) -> str:
    return json.dumps({"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{k}", "metadata": {},
                                  "outputs": [], "source": src} for k, src in enumerate(cells)],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def test_a_string_that_holds_the_setting_launches_nothing(tmp_path):
    """`export XLA_USE_BF16=1` inside a Python string written to a user-data file is no launcher:
    the training script of the run is not treated as launched in bf16."""
    cands = _project(tmp_path, {
        "train.py": ("python", BF16_SCRIPT),
        "bootstrap.py": ("python", 'with open("user-data.sh", "w") as f:\n    f.write("export XLA_USE_BF16=1\\n")\n'),
    })
    assert _bf16(run(cands, RuleSelection(), jobs=1))["train.py"] == "marker"


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_launcher_sets_bf16_for_the_script_it_launches_only(tmp_path, jobs):
    cands = _project(tmp_path, {
        "run.sh": ("shell", "#!/bin/bash\nXLA_USE_BF16=1 torchrun --nproc_per_node=2 train.py\npython eval.py\n"),
        "train.py": ("python", BF16_SCRIPT),
        "eval.py": ("python", BF16_SCRIPT),
        **{f"pad{k}.py": ("python", "import torch_xla\n") for k in range(16 if jobs == 2 else 0)},  # a pool
    })
    assert {k: v for k, v in _bf16(run(cands, RuleSelection(), jobs=jobs)).items() if not k.startswith("pad")} \
        == {"train.py": "bf16", "eval.py": "marker"}


def test_a_dockerfile_env_holds_for_its_cmd(tmp_path):
    cands = _project(tmp_path, {
        "Dockerfile": ("dockerfile", 'FROM python:3.11\nENV XLA_USE_BF16=1\nCMD ["python", "serve.py"]\n'),
        "serve.py": ("python", BF16_SCRIPT),
        "train.py": ("python", BF16_SCRIPT),
    })
    assert _bf16(run(cands, RuleSelection(), jobs=1)) == {"serve.py": "bf16", "train.py": "marker"}


def test_a_notebook_shell_line_launches_its_script(tmp_path):
    cands = _project(tmp_path, {
        "run.ipynb": ("notebook", _notebook("!XLA_USE_BF16=1 python train.py\n", "print('done')")),
        "train.py": ("python", BF16_SCRIPT),
        "eval.py": ("python", BF16_SCRIPT),
    })
    assert _bf16(run(cands, RuleSelection(), jobs=1)) == {"train.py": "bf16", "eval.py": "marker"}


@pytest.mark.parametrize("launcher, expected", [
    # an export holds for every later launch; `cd` moves where the script is found
    ("export XLA_USE_BF16=1\ncd src\npython train.py\n", {"src/train.py": "bf16", "train.py": "marker"}),
    # the directories above the launcher: scripts/run.sh run from the repository root
    ("export XLA_USE_BF16=1\npython src/train.py\n", {"src/train.py": "bf16", "train.py": "marker"}),
    # `python -m`: the module's file
    ("XLA_USE_BF16=1 python -m src.train\n", {"src/train.py": "bf16", "train.py": "marker"}),
    # launched once with bf16 and once without: not known to run in bf16
    ("XLA_USE_BF16=1 python train.py\nXLA_USE_BF16=0 python train.py\n", {"src/train.py": "marker", "train.py": "marker"}),
    # unset before the launch
    ("export XLA_USE_BF16=1\nunset XLA_USE_BF16\npython train.py\n", {"src/train.py": "marker", "train.py": "marker"}),
    # set in a branch: the launch may run either way
    ('if [ "$1" = BF16 ]; then\n  export XLA_USE_BF16=1\nfi\npython train.py\n', {"src/train.py": "marker", "train.py": "marker"}),
    # after a `cd` to a directory that cannot be told, the script cannot be found
    ("export XLA_USE_BF16=1\ncd $WORK\npython train.py\n", {"src/train.py": "marker", "train.py": "marker"}),
    ('cd "$(dirname "$0")"\nXLA_USE_BF16=1 python ../train.py\n', {"src/train.py": "marker", "train.py": "bf16"}),
    # a heredoc body writes a file, it launches nothing
    ("cat > env.sh <<EOF\nexport XLA_USE_BF16=1\nEOF\npython train.py\n", {"src/train.py": "marker", "train.py": "marker"}),
])
def test_what_a_shell_launcher_states(tmp_path, launcher, expected):
    cands = _project(tmp_path, {
        "scripts/run.sh": ("shell", launcher),
        "src/train.py": ("python", BF16_SCRIPT),
        "train.py": ("python", BF16_SCRIPT),
    })
    assert _bf16(run(cands, RuleSelection(), jobs=1)) == expected


def test_a_target_that_names_several_files_gets_no_fact(tmp_path):
    """`/app/train.py` in a Dockerfile: one file of the run ends with that path, or nobody gets it."""
    files = {"docker/Dockerfile": ("dockerfile", 'FROM python:3.11\nENV XLA_USE_BF16=1\nCMD ["python", "/app/train.py"]\n'),
             "a/train.py": ("python", BF16_SCRIPT)}
    assert _bf16(run(_project(tmp_path / "one", files), RuleSelection(), jobs=1)) == {"a/train.py": "bf16"}
    files["b/train.py"] = ("python", BF16_SCRIPT)
    assert _bf16(run(_project(tmp_path / "two", files), RuleSelection(), jobs=1)) == {
        "a/train.py": "marker", "b/train.py": "marker"}


def test_launch_facts_keep_the_project_wide_facts(tmp_path):
    """`uses:*` facts still hold for every file, next to the launch facts."""
    cands = _project(tmp_path, {
        "requirements.txt": ("requirements", "optimum-neuron==0.3.0\n"),
        "run.sh": ("shell", "XLA_USE_BF16=1 torchrun --nproc_per_node=2 train.py\n"),
        "train.py": ("python", "import trl\n" + BF16_SCRIPT),
    })
    results = by_name(run(cands, RuleSelection(), jobs=1))
    assert "trl>=1.16" in results["requirements.txt"].new_text
    assert _bf16([results["train.py"]]) == {"train.py": "bf16"}


@pytest.mark.parametrize("name, kind, text", [
    ("job.slurm", "shell", "#!/bin/bash\n#SBATCH --nodes=2\nexport XLA_USE_BF16=1\nsrun torchrun --nproc_per_node=32 train.py\n"),
    ("run.sh", "shell", "XLA_DOWNCAST_BF16=1 accelerate launch --num_processes 2 train.py --bf16\n"),
    ("run.sh", "shell", "env XLA_USE_BF16=true python3 -m torch.distributed.run --nproc_per_node=2 train.py\n"),
    ("Dockerfile", "dockerfile", 'FROM python:3.11 AS base\nENV XLA_USE_BF16=1\nFROM base\n'
                                 'ENTRYPOINT ["torchrun", "--nproc_per_node=2"]\nCMD ["train.py"]\n'),
    ("run.ipynb", "notebook", _notebook("%env XLA_USE_BF16=1\n", "!python train.py --epochs 1\n")),
])
def test_launcher_forms(tmp_path, name, kind, text):
    cands = _project(tmp_path, {name: (kind, text), "train.py": ("python", BF16_SCRIPT),
                                "eval.py": ("python", BF16_SCRIPT)})
    assert _bf16(run(cands, RuleSelection(), jobs=1)) == {"train.py": "bf16", "eval.py": "marker"}


class _BrokenFacts(TextRule):
    id = "NM996"
    title = "test: a launch fact extractor that crashes"
    kinds = ("shell",)
    triggers = ("NEVER_SEEN",)
    launch_probes = ("XLA_USE_BF16",)

    @classmethod
    def launch_facts(cls, kind, text):
        raise RuntimeError("bug")

    def apply(self, ctx) -> None:
        pass


def broken_facts_rules():
    return [_BrokenFacts()]


def test_a_crashing_fact_extractor_does_not_stop_the_run(tmp_path):
    cands = _project(tmp_path, {"run.sh": ("shell", "XLA_USE_BF16=1 python train.py\n"),
                                "train.py": ("python", BF16_SCRIPT)})
    results = run(cands, RuleSelection("tests.test_project_context:broken_facts_rules"), jobs=1)
    assert [r.status for r in results] == ["unchanged", "unchanged"]


# --torch_compile true is added to a launch only where the launched script accepts it: a Trainer script
# (TrainingArguments from the command line); a plain argparse loop exits on the unknown flag
LAUNCHER = "export NEURON_CC_FLAGS=\"--cache_dir=/tmp/cc\"\ntorchrun --nproc_per_node=2 train.py --output_dir out\n"
TRAINER_SCRIPT = """\
from transformers import HfArgumentParser, TrainingArguments
args, = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
"""
ARGPARSE_SCRIPT = """\
import argparse
p = argparse.ArgumentParser()
p.add_argument("--output_dir")
args = p.parse_args()
"""


def _migrated_launcher(tmp_path, launcher_text: str, script_name: str, script: str | None) -> str:
    """The migrated text of a launcher ``run.sh`` written in ``tmp_path``, beside the script it launches
    (``script``: its source; None: not there)."""
    launcher = tmp_path / "run.sh"
    launcher.write_text(launcher_text)
    if script is not None:
        (tmp_path / script_name).write_text(script)
    result = process(Candidate(launcher, "run.sh", "shell"), RuleSet.from_selection(RuleSelection()),
                     launcher.read_bytes())
    return (result.new_bytes or launcher.read_bytes()).decode()


@pytest.mark.parametrize("script,added", [(TRAINER_SCRIPT, True), (ARGPARSE_SCRIPT, False), (None, False)])
def test_torch_compile_only_for_a_script_that_parses_training_arguments(tmp_path, script, added):
    out = _migrated_launcher(tmp_path, LAUNCHER, "train.py", script)
    assert ("--torch_compile true" in out) is added
    assert "torchrun --nproc_per_node=2 train.py --output_dir out" in out


# NM515 moves --tensor_parallel_size/--pipeline_parallel_size to TP_SIZE/PP_SIZE only where the launched script
# is the kind that reads them from there once migrated: a script that parses the flags in its own argparse
# (neuronx-distributed's examples) keeps them; one that is not in the run gets a marker unless the launch is
# evidently optimum-neuron's
NXD_LAUNCHER = ("#!/bin/bash\nexport XLA_DOWNCAST_BF16=1\n"
                "torchrun --nproc_per_node 32 run_nxd.py --tensor_parallel_size 8 --pipeline_parallel_size 4\n")
NXD_SCRIPT = """\
import argparse
import torch_xla.core.xla_model as xm
p = argparse.ArgumentParser()
p.add_argument("--tensor_parallel_size", type=int, default=8)
p.add_argument("--pipeline_parallel_size", type=int, default=1)
args = p.parse_args()
"""
OPTIMUM_SCRIPT = """\
from optimum.neuron import NeuronTrainingArguments
from transformers import HfArgumentParser
args, = HfArgumentParser(NeuronTrainingArguments).parse_args_into_dataclasses()
"""


def _launch_out(tmp_path, script: str | None) -> str:
    out = _migrated_launcher(tmp_path, NXD_LAUNCHER, "run_nxd.py", script)
    launcher = tmp_path / "run.sh"
    again = process(Candidate(launcher, "run.sh", "shell"), RuleSet.from_selection(RuleSelection()), out.encode())
    assert again.new_bytes in (None, out.encode())  # one run is enough
    return out


def test_sizes_a_script_parses_itself_are_kept(tmp_path):
    out = _launch_out(tmp_path, NXD_SCRIPT)
    assert "run_nxd.py --tensor_parallel_size 8 --pipeline_parallel_size 4" in out
    assert "TP_SIZE" not in out and "NM515" not in out
    # the launched script uses no HF library: no HF_DEACTIVATE_ASYNC_LOAD for it (NM516)
    assert "HF_DEACTIVATE_ASYNC_LOAD" not in out
    assert "XLA_DOWNCAST_BF16" not in out  # the XLA-only variable still goes (NM512)


def test_sizes_of_a_script_not_in_the_run_are_marked(tmp_path):
    out = _launch_out(tmp_path, None)
    assert "run_nxd.py --tensor_parallel_size 8 --pipeline_parallel_size 4" in out and "TP_SIZE=" not in out
    assert ("TODO(neuron-migrate NM515): Keep the TP/PP flags if run_nxd.py parses them itself, else move them to "
            "TP_SIZE/PP_SIZE: it is not in this run.") in out


def test_sizes_of_an_optimum_neuron_script_move_to_the_environment(tmp_path):
    out = _launch_out(tmp_path, OPTIMUM_SCRIPT)
    assert "PP_SIZE=4 TP_SIZE=8" in out or "TP_SIZE=8 PP_SIZE=4" in out
    assert "--tensor_parallel_size" not in out.split("torchrun", 1)[1]
    assert "HF_DEACTIVATE_ASYNC_LOAD=1" in out


@pytest.mark.parametrize("body,added", [
    ("config = LlamaConfig.from_pretrained(args.model)\nmodel = build_nxd_model(config)\n", False),
    ("tok = AutoTokenizer.from_pretrained(args.model)\nmodel = GPTNeoX(GPTNeoXConfig())\n", False),
    ("model = LlamaForCausalLM.from_pretrained(args.model)\n", True),
    ("model = transformers.AutoModel.from_pretrained(args.model)\n", True),
    # a Lightning Trainer is not the HF libraries': the script builds its model from a config
    ("from lightning import Trainer\ntrainer = Trainer(max_epochs=1)\nconfig = LlamaConfig.from_pretrained(p)\n", False),
    ("from transformers import (\n    Trainer,\n)\ntrainer = Trainer(model=build(args))\n", True),
])
def test_async_load_only_for_a_launched_script_that_loads_weights(tmp_path, body, added):
    """NM516: a launched script that uses Transformers only for its configs or tokenizer loads no weights."""
    script = ("import argparse, transformers\nimport torch_xla.core.xla_model as xm\n"
              "from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, GPTNeoXConfig\n") + body
    out = _migrated_launcher(tmp_path, NXD_LAUNCHER, "run_nxd.py", script)
    assert ("export HF_DEACTIVATE_ASYNC_LOAD=1" in out) is added


RAY_SCRIPT = """\
from optimum.neuron import NeuronTrainingArguments
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer
trainer = TorchTrainer(train_loop, scaling_config=ScalingConfig(num_workers=64))
"""


@pytest.mark.parametrize("script,torchrun", [(RAY_SCRIPT, False), (OPTIMUM_SCRIPT, True)])
def test_tp_launch_of_a_script_that_starts_its_workers_gets_no_torchrun_advice(tmp_path, script, torchrun):
    """NM515: a plain `python` launch with a TP size needs torchrun, unless the script starts its workers itself."""
    out = _migrated_launcher(tmp_path, "#!/bin/bash\npython run.py --tensor_parallel_size 8\n", "run.py", script)
    assert "TP_SIZE=8 python run.py" in out
    assert ("Launch this script with torchrun --nproc_per_node=8" in out) is torchrun
    assert ("Keep the number of workers run.py starts a multiple of TP_SIZE=8: it starts its processes itself."
            in out) is not torchrun


def test_nm527_target_python_is_the_installed_libraries_requires_python():
    """NM527's Python floor is the highest Requires-Python of the target libraries the migrated code installs."""
    import importlib.metadata as metadata

    from packaging.specifiers import SpecifierSet

    from codemods.project.dockerfile import TARGET_PYTHON

    floor = ".".join(map(str, TARGET_PYTHON))
    below = f"{TARGET_PYTHON[0]}.{TARGET_PYTHON[1] - 1}"
    specs = {d: SpecifierSet(metadata.metadata(d)["Requires-Python"]) for d in ("transformers", "diffusers", "trl")}
    assert all(floor in s for s in specs.values())  # every target library installs on it
    assert any(below not in s for s in specs.values())  # and one of them needs it


def test_a_helper_given_a_transformers_neuronx_model_gets_a_marker_on_its_sample_call(tmp_path):
    """transformers-neuronx's sample(input_ids, sequence_length=N), in a helper module of a project whose other file
    loads the model: a Transformers model has no sample(); a file outside such a project is left alone."""
    main = """
        from transformers_neuronx.llama.model import LlamaForSampling

        from helpers import run

        model = LlamaForSampling.from_pretrained("llama-split", batch_size=1, tp_degree=2, amp="bf16")
        model.to_neuron()
        run(model)
    """
    helper = """
        import torch


        def run(model):
            with torch.inference_mode():
                return model.sample(torch.tensor([[1, 2]]), sequence_length=64)
    """
    results = by_name(run(files(tmp_path, main=main, helpers=helper), RuleSelection(), jobs=1))
    text = results["helpers.py"].new_bytes.decode()
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "model.sample(" in line)
    assert lines[at - 1].strip() == ("# TODO(neuron-migrate NM411): If this is a transformers-neuronx model, call "
                                     "generate(input_ids, do_sample=True, max_length=N): sample() is gone.")
    (tmp_path / "alone").mkdir()
    alone = by_name(run(files(tmp_path / "alone", helpers=helper), RuleSelection(), jobs=1))
    assert alone["helpers.py"].status == "unchanged"
