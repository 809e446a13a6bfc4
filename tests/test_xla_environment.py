"""NM415/NM416 (codemods/xla/environment.py) and the bf16 marker of NM512/NM521: what the
single-file fixtures cannot show, the project context of a run. A script that reads XLA_USE_BF16
keeps the precision its launcher set when the launcher is part of the run, and gets a marker
otherwise; the launcher that loses the variable says so itself."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from codemods.project.xla_env import BF16_LAUNCH_MARKER
from migrator.discover import Candidate
from migrator.engine import RuleSelection, run

SCRIPT = """\
import os

import torch

model = torch.nn.Linear(2, 2)
if os.environ.get("XLA_USE_BF16"):
    model = model.to(torch.bfloat16)
print(model.weight.dtype)
"""


def _run(tmp_path: Path, **files: str) -> dict[str, str]:
    kinds = {".py": "python", ".sh": "shell", "Dockerfile": "dockerfile"}
    cands = []
    for name, text in files.items():
        name = name.replace("_", ".") if not name.startswith("Dockerfile") else name
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        kind = next(k for suffix, k in kinds.items() if name.endswith(suffix))
        cands.append(Candidate(path, name, kind))
    results = run(cands, RuleSelection(), jobs=1)
    return {r.path: (r.new_bytes.decode() if r.new_bytes else (tmp_path / r.path).read_text()) for r in results}


@pytest.mark.parametrize("launcher", [
    {"run_sh": "#!/bin/bash\nexport XLA_USE_BF16=1\ntorchrun --nproc_per_node=2 train.py\n"},
    {"Dockerfile": "FROM python:3.11\nENV XLA_USE_BF16=1\nCMD [\"python\", \"train.py\"]\n"},
])
def test_a_launcher_of_the_run_that_set_bf16_keeps_the_script_in_bf16(tmp_path: Path, launcher: dict, capfd):
    out = _run(tmp_path, train_py=SCRIPT, **launcher)
    script = out["train.py"]
    assert "XLA_USE_BF16" not in script and "TODO" not in script
    assert "model = torch.nn.Linear(2, 2)\nmodel = model.to(torch.bfloat16)\n" in script
    namespace: dict = {}
    exec(compile(script, "train.py", "exec"), namespace)
    assert "torch.bfloat16" in capfd.readouterr().out  # the migrated script runs in bf16 with no variable set
    launcher_out = out["run.sh" if "run_sh" in launcher else "Dockerfile"]
    marker = BF16_LAUNCH_MARKER
    assert marker in launcher_out  # the marker is in the launcher itself
    assert "XLA_USE_BF16" not in launcher_out.replace(marker, "")


def test_without_a_launcher_that_sets_it_the_read_gets_a_marker(tmp_path: Path):
    out = _run(tmp_path, train_py=SCRIPT, run_sh="#!/bin/bash\ntorchrun --nproc_per_node=2 train.py\n")
    script = out["train.py"]
    assert 'if os.environ.get("XLA_USE_BF16"):' in script
    assert "TODO(neuron-migrate NM409): Replace this code's XLA_USE_BF16/XLA_DOWNCAST_BF16 tests by the precision you want" in script


OWN_WRITE = """\
import os


def configure(args):
    if args.bf16:
        os.environ["XLA_DOWNCAST_BF16"] = "1"


def model_dtype():
    return "bf16" if os.environ.get("XLA_DOWNCAST_BF16") == "1" else "fp32"
"""


@pytest.mark.parametrize("exported", [True, False])
def test_a_read_of_what_the_program_sets_itself_gets_one_marker_in_one_run(tmp_path: Path, exported: bool):
    """The program writes the variable and reads it: its reads hold the program's choice, whether a launcher
    of the run sets it or not, so the marker is the same; the second run (its launcher no longer sets it)
    changes nothing."""
    launcher = "#!/bin/bash\n" + ("export XLA_DOWNCAST_BF16=1\n" if exported else "") + "torchrun train.py --bf16\n"
    first = _run(tmp_path, train_py=OWN_WRITE, run_sh=launcher)
    script = first["train.py"]
    lines = script.splitlines()
    read = lines.index('    return "bf16" if os.environ.get("XLA_DOWNCAST_BF16") == "1" else "fp32"')
    assert lines[read - 1] == ("    # TODO(neuron-migrate NM415): XLA_DOWNCAST_BF16 is set by this program and read "
                               "here, but TorchNeuron ignores it: choose the precision explicitly.")
    assert "they now read as unset" not in script
    again = _run(tmp_path, train_py=script, run_sh=first["run.sh"])
    assert again == first


def test_a_launcher_that_turns_bf16_off_gets_no_precision_marker(tmp_path: Path):
    out = _run(tmp_path, run_sh="#!/bin/bash\nexport XLA_USE_BF16=0\ntorchrun --nproc_per_node=2 train.py\n")
    assert "XLA_USE_BF16" not in out["run.sh"]


@pytest.mark.parametrize("rule_id", ["NM415", "NM416"])
def test_explain_example_is_what_the_rule_does(rule_id: str, tmp_path: Path):
    from codemods.xla.environment import RULES
    from migrator.engine import RuleSet
    from tests.test_fixtures import migrate

    rule = next(r for r in RULES if r.id == rule_id)
    before, after = (textwrap.dedent(x).strip("\n") + "\n" for x in (rule.before, rule.after))
    if rule_id == "NM415":  # the example's launcher (its first line) is part of the run
        out = _run(tmp_path, train_py=before, run_sh="XLA_USE_BF16=1 torchrun --nproc_per_node=2 train.py\n")
        assert out["train.py"] == after
        return
    out, _ = migrate(before.encode(), "python", RuleSet.from_selection(RuleSelection()))
    assert out.decode() == after


@pytest.mark.parametrize("name, text", [
    ("cache_sh", "#!/bin/bash\nexport TRANSFORMERS_CACHE=/data/cache\npython serve.py\n"),
    ("Dockerfile", "FROM python:3.11\nENV TRANSFORMERS_CACHE=/data/cache\n"),
    ("setup_py", "import os\nos.environ['TRANSFORMERS_CACHE'] = '/data/cache'\n"),
])
def test_transformers_4_cache_setting_is_kept_and_marked(tmp_path: Path, name: str, text: str):
    # Transformers 5 reads no TRANSFORMERS_CACHE: downloads would silently go to the default hub cache
    import inspect

    import transformers.utils.hub as hub
    assert "TRANSFORMERS_CACHE" not in inspect.getsource(hub)  # the pinned target ignores it (what the marker says)
    out = _run(tmp_path, **{name: text})
    migrated = next(iter(out.values()))
    assert "TODO(neuron-migrate NM5" in migrated or "TODO(neuron-migrate NM416)" in migrated
    assert "Rename TRANSFORMERS_CACHE to HF_HUB_CACHE" in migrated
    assert migrated.count("/data/cache") == 1  # the setting is kept, for a person to rename



SHADOWED_OS = """\
import os


def launch():
    child = os.environ.copy()
    child["XLA_USE_BF16"] = "1"
    return child


def fake(os):
    mine = os.environ.copy()
    mine["XLA_USE_BF16"] = "1"
    return mine
"""


def test_an_environment_copy_is_told_from_a_parameter_named_os():
    """``mine = os.environ.copy()`` where ``os`` is a parameter is not a process environment: its entries
    stay, whichever function the rules visit first; the real copy loses its bf16 switch."""
    from migrator.engine import RuleSet, migrate_text

    out, _ = migrate_text(SHADOWED_OS, "python", RuleSet.from_selection(RuleSelection()))
    assert 'child["XLA_USE_BF16"]' not in out
    assert 'mine["XLA_USE_BF16"] = "1"' in out
