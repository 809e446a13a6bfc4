"""``verify --original-env auto|PATH`` (issue 26 §1, §2): the original runs with its own libraries, and a
real old-stack package of its environment wins over the emulation.

Default suite: the requirement resolution (pins from every kind of file, refusals, setup.py never
executed, the old era chosen), the cache key and a cache hit, the error without a package index, the PATH
mode with a prepared environment holding stand-in packages (a tiny ``torch_xla`` with ``__version__``, a
tiny Transformers "4.x"), the report's header. A real Transformers 4.57 environment (network, ~1-2 min):
``NEURON_MIGRATE_TEST_REAL_ENV=1`` runs ``test_real_old_environment``.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from migrator.verify import core, origenv
from migrator.verify.runner import run_child

ROOT = Path(__file__).resolve().parents[1]


def _found(files: dict[str, str]) -> origenv.Found:
    return origenv.read_project(list(files.items()))


# ----------------------------------------------------------------------------- reading the project

def test_pins_from_each_kind_of_file():
    nb = {"cells": [{"cell_type": "code", "source": ["%pip install -q peft==0.10.0\n", "import peft"]}]}
    found = _found({
        "requirements.txt": "# old stack\n-r base.txt\noptimum-neuron[neuronx]==0.0.25\ntorch==2.1.2\n",
        "base.txt": "transformers==4.36.2  # pinned\n",
        "pyproject.toml": '[project]\ndependencies = ["trl>=0.7,<0.9"]\n'
                          '[tool.poetry.dependencies]\npython = "^3.10"\ndiffusers = "^0.25.0"\n',
        "setup.cfg": "[options]\ninstall_requires =\n    accelerate==0.29.2\n",
        "setup.py": "from setuptools import setup\nDEPS = ['datasets==2.19.2']\n"
                    "setup(name='x', install_requires=DEPS + ['safetensors==0.4.2'])\n",
        "Dockerfile": "FROM python:3.10\nRUN pip install --no-cache-dir \\\n    huggingface_hub==0.20.3 "
                      "&& echo done\n",
        "notebook.ipynb": json.dumps(nb),
    })
    pins = {name: spec for name, (spec, _, _) in found.pins.items()}
    assert pins == {"transformers": "==4.36.2", "trl": "<0.9,>=0.7", "diffusers": "<0.26,>=0.25.0",
                    "accelerate": "==0.29.2", "datasets": "==2.19.2", "safetensors": "==0.4.2",
                    "huggingface-hub": "==0.20.3", "peft": "==0.10.0"}
    assert found.pins["transformers"][1] == "base.txt"
    assert found.emulated == ["optimum-neuron"] and found.refused == []  # torch: the current one, reused


def test_lines_outside_the_allow_list_are_refused_and_named():
    found = _found({
        "requirements.txt": "--extra-index-url https://pip.repos.neuron.amazonaws.com\n"
                            "git+https://github.com/huggingface/transformers.git@v4.40.0\n"
                            "peft @ https://example.com/peft-0.10.0.whl\n-e ./mylib\n./local_pkg\n"
                            "numpy==1.26.4\ntransformers==4.40.0\n",
        "Dockerfile": "RUN pip install --index-url http://mirror/simple evaluate==0.4.1 requests\n",
    })
    reasons = {line: reason for line, _, reason in found.refused}
    assert reasons == {
        "--extra-index-url https://pip.repos.neuron.amazonaws.com": "package index option",
        "git+https://github.com/huggingface/transformers.git@v4.40.0": "a URL, VCS reference or local path",
        "peft @ https://example.com/peft-0.10.0.whl": "a URL, VCS reference or local path",
        "-e ./mylib": "editable install (a local path or a VCS reference)",
        "./local_pkg": "a URL, VCS reference or local path",
        "numpy==1.26.4": "not one of the Hugging Face libraries verify installs",
        "--index-url http://mirror/simple": "package index option",
        "requests": "not one of the Hugging Face libraries verify installs",
    }
    assert set(found.pins) == {"transformers", "evaluate"}
    plan = origenv.resolve(found)
    assert not any("git+" in r or "numpy" in r or "index-url" in r for r in plan.requirements)
    assert "numpy==1.26.4" in origenv.resolve(found, allow_all=True).requirements


def test_setup_py_is_read_not_executed(tmp_path):
    witness = tmp_path / "executed"
    text = (f"import pathlib\npathlib.Path({str(witness)!r}).write_text('ran')\nfrom setuptools import setup\n"
            "setup(install_requires=['transformers==4.45.2'], extras_require={'train': ['trl==0.11.4']})\n")
    (tmp_path / "setup.py").write_text(text)
    (tmp_path / "train.py").write_text("print(1)\n")
    found = origenv.read_project(origenv.project_files(tmp_path, tmp_path))
    assert {k: v[0] for k, v in found.pins.items()} == {"transformers": "==4.45.2", "trl": "==0.11.4"}
    assert not witness.exists()
    computed = _found({"setup.py": "from setuptools import setup\nsetup(install_requires=open('r').read().split())\n"})
    assert computed.refused and "never executed" in computed.refused[0][2]


def test_the_nearest_project_folder_is_the_project(tmp_path):
    """A folder above the original's with its own pyproject (a monorepo's tooling) is not read once the
    original's folder has a requirements file; without one, the folder above is the project."""
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = ["transformers==5.23.0"]\n')
    sub = tmp_path / "app"
    sub.mkdir()
    (sub / "run.py").write_text("print(1)\n")
    assert origenv.read_project(origenv.project_files(sub, sub)).pins["transformers"][0] == "==5.23.0"
    (sub / "requirements.txt").write_text("transformers==4.31.0\n")
    found = origenv.read_project(origenv.project_files(sub, sub))
    assert found.sources == ["requirements.txt"] and found.pins["transformers"][0] == "==4.31.0"


ERAS = {"old0": {"transformers": "4.31.0", "trl": "0.4.7", "huggingface-hub": "0.16.4"},
        "old2": {"transformers": "4.45.2", "trl": "0.11.4", "huggingface-hub": "0.26.5"},
        "old4": {"transformers": "4.57.1", "trl": "0.24.0", "huggingface-hub": "0.36.2"}}


@pytest.mark.parametrize("requirements,expected,era", [
    ("", ["huggingface-hub==0.36.2", "transformers==4.57.1", "trl==0.24.0"], "old4"),
    ("transformers==4.31.0", ["huggingface-hub==0.16.4", "transformers==4.31.0", "trl==0.4.7"], "old0"),
    # an exact pin between two eras: kept, the next era's other libraries
    ("transformers==4.40.0", ["huggingface-hub==0.26.5", "transformers==4.40.0", "trl==0.11.4"], "old2"),
    # a range: the newest era release inside it
    ("transformers>=4.30,<4.50\ntrl", ["huggingface-hub==0.26.5", "transformers==4.45.2", "trl==0.11.4"], "old2"),
])
def test_versions_resolved_from_pins_and_the_old_eras(requirements, expected, era):
    plan = origenv.resolve(_found({"requirements.txt": requirements}), ERAS)
    assert plan.requirements == expected and plan.era == era


def test_the_upgrade_data_gives_the_old_eras():
    eras = origenv.load_eras()
    last = list(eras.values())[-1]
    assert last["transformers"].startswith("4.") and last["trl"].startswith("0.")
    assert last["huggingface-hub"].startswith("0.")


def test_cache_key_follows_the_resolved_requirements():
    a = origenv.resolve(_found({"requirements.txt": "transformers==4.45.2"}), ERAS)
    b = origenv.resolve(_found({"pyproject.toml": '[project]\ndependencies=["transformers==4.45.2"]'}), ERAS)
    c = origenv.resolve(_found({"requirements.txt": "transformers==4.31.0"}), ERAS)
    assert a.key(sys.executable) == b.key(sys.executable) != c.key(sys.executable)


def test_a_built_environment_is_reused(tmp_path):
    plan = origenv.resolve(origenv.Found(), ERAS)
    env = tmp_path / "envs" / plan.key(sys.executable)
    env.mkdir(parents=True)
    (env / origenv.MARKER).write_text(json.dumps({"requirements": plan.requirements, "built_s": 1.0}))
    python, data = origenv.build(plan, root=tmp_path)
    assert python == origenv.env_python(env) and not data.get("built_now")


def test_without_a_package_index_the_error_says_how_to_pass_an_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    plan = origenv.resolve(origenv.Found(), {"old": {"transformers": "4.57.1"}})
    with pytest.raises(origenv.EnvError) as err:
        origenv.build(plan, root=tmp_path, timeout=120)
    assert "no network or no package index" in str(err.value) and "--original-env PATH" in str(err.value)
    assert not (tmp_path / "envs" / plan.key(sys.executable)).exists()  # no half-built environment kept


# ----------------------------------------------------------------------------- a prepared environment

def _venv(path: Path, packages: dict[str, str], dists: dict[str, str] | None = None) -> Path:
    """A virtual environment over this interpreter's site-packages with stand-in packages (relative path
    -> source) and their distribution metadata (name -> version)."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
                   check=True)
    python = origenv.env_python(path)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    for rel, text in packages.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    for name, version in (dists or {}).items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return python


STAND_IN_XLA = {"torch_xla/__init__.py": "__version__ = '9.9.1'\n",
                "torch_xla/core/__init__.py": "",
                "torch_xla/core/xla_model.py": "import torch\nREAL = True\n"
                                               "def xla_device():\n    return torch.device('cpu')\n"}


@pytest.fixture(scope="module")
def xla_env(tmp_path_factory):
    return _venv(tmp_path_factory.mktemp("env") / "venv", STAND_IN_XLA, {"torch_xla": "9.9.1"})


def test_a_real_old_stack_package_is_detected_and_used(tmp_path, xla_env):
    """The probe finds the stand-in torch_xla; the original uses it, and the emulation serves only what is
    missing (torch_neuronx); the report names which is which and the library versions of each side."""
    probed = origenv.probe(str(xla_env))
    assert origenv.real_roots(probed) == ["torch_xla"] and probed["libraries"]["torch"]
    (tmp_path / "orig.py").write_text(
        "import torch, torch_xla, torch_neuronx\nimport torch_xla.core.xla_model as xm\n"
        "print('xla', torch_xla.__version__, getattr(xm, 'REAL', False), os.environ['PJRT_DEVICE'])\n"
        "print('sum', float((torch.ones(3, device=xm.xla_device()) * 2).sum()))\n".replace(
            "import torch,", "import os, torch,"))
    (tmp_path / "mig.py").write_text("import torch\nprint('xla 9.9.1 True CPU')\n"
                                     "print('sum', float((torch.ones(3, device='neuron') * 2).sum()))\n")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        code, report = core.run_verify(core.Options(script=tmp_path / "mig.py", against=str(tmp_path / "orig.py"),
                                                    original_env=str(xla_env.parent.parent), device="emulate"),
                                       out=io.StringIO(), err=io.StringIO())
    finally:
        os.chdir(cwd)
    assert code == 0, report["reason"]
    assert report["old_stack"] == {"torch_xla": "real 9.9.1", "torch_neuronx": "emulated"}
    assert report["libraries"]["original"]["torch"] == report["libraries"]["migrated"]["torch"]
    text = core.render_text(report)
    assert "old stack (original): torch_neuronx emulated, torch_xla real 9.9.1" in text
    assert "libraries (original): torch " in text and "libraries (migrated): torch " in text


def test_an_installed_package_that_does_not_import_is_emulated(tmp_path):
    python = _venv(tmp_path / "venv", {"torch_xla/__init__.py": "raise ImportError('built for torch 2.1')\n"})
    probed = origenv.probe(str(python))
    assert origenv.real_roots(probed) == [] and probed["real"]["torch_xla"].startswith("error: ImportError")


def test_real_transformers_4_gets_no_transformers4_shims(tmp_path):
    """With a Transformers 4.x installed (a stand-in), the original side restores nothing: encode_plus
    stays what the library has (here: absent); on today's Transformers the shim adds it."""
    python = _venv(tmp_path / "venv", {
        "transformers/__init__.py": "__version__ = '4.57.1'\n",
        "transformers/tokenization_utils_base.py": "class PreTrainedTokenizerBase:\n    pass\n"},
        {"transformers": "4.57.1"})
    script = tmp_path / "tok.py"
    script.write_text("import transformers, transformers.tokenization_utils_base as t\n"
                      "print('encode_plus', hasattr(t.PreTrainedTokenizerBase, 'encode_plus'), "
                      "transformers.__version__)\n")
    lines = []
    for py in (str(python), None):
        out = io.StringIO()
        result = run_child(script, [], "cpu", side="original", python=py, stdout=out, stderr=io.StringIO())
        assert result.ok, result.reason
        lines.append([ln for ln in out.getvalue().splitlines() if ln.startswith("encode_plus")][0])
        if py:
            assert result.data["libraries"]["transformers"] == "4.57.1"
    assert lines[0] == "encode_plus False 4.57.1"
    assert lines[1].startswith("encode_plus True 5.")


def test_original_env_options_are_checked(tmp_path):
    (tmp_path / "a.py").write_text("print(1)\n")
    opts = core.Options(script=tmp_path / "a.py", against=str(tmp_path / "a.py"), original_env=str(tmp_path / "no"))
    code, report = core.run_verify(opts, out=io.StringIO(), err=io.StringIO())
    assert code == 2 and "no such environment or interpreter" in report["reason"]
    opts = core.Options(script=tmp_path / "a.py", against=str(tmp_path / "a.py"), original_env="auto",
                        original_python=sys.executable)
    code, report = core.run_verify(opts, out=io.StringIO(), err=io.StringIO())
    assert code == 2 and "give one" in report["reason"]


def test_a_missing_old_api_suggests_the_original_env():
    hint = core.original_hint({"error": "ImportError: cannot import name 'HfFolder' from 'huggingface_hub' (x)"})
    assert "--original-env auto" in hint and "huggingface_hub.HfFolder" in hint
    assert "--original-env auto" in core.original_hint({"error": "AttributeError: 'Tok' object has no attribute 'y'"})
    assert "--original-env auto" not in core.original_hint({"error": "ImportError: x"}, own_env=True)


# ----------------------------------------------------------------------------- a real old environment

@pytest.mark.skipif(os.environ.get("NEURON_MIGRATE_TEST_REAL_ENV") != "1",
                    reason="builds a Transformers 4.57 environment from the package index: "
                           "NEURON_MIGRATE_TEST_REAL_ENV=1")
def test_real_old_environment(tmp_path):
    """``--original-env auto`` without pins: the last old era (Transformers 4.57, TRL 0.24, hub 0.36) on
    the current torch; an original using encode_plus and HfFolder runs there with the real libraries."""
    root = Path(os.environ.get("NEURON_MIGRATE_TEST_ENV_CACHE") or tmp_path / "cache")
    os.environ["NEURON_MIGRATE_CACHE"] = str(root)
    (tmp_path / "orig.py").write_text(
        "import torch, transformers\nfrom huggingface_hub import HfFolder\n"
        "from transformers import BertConfig, BertModel\n"
        "print('transformers', transformers.__version__.split('.')[0])\n"
        "m = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,"
        " intermediate_size=32)).eval()\n"
        "print('out', m(torch.tensor([[1, 2, 3]])).last_hidden_state.sum().item() != 0)\n")
    (tmp_path / "mig.py").write_text(
        "import torch, transformers\nfrom transformers import BertConfig, BertModel\n"
        "print('transformers', 4)\n"
        "m = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,"
        " intermediate_size=32)).eval()\n"
        "print('out', m(torch.tensor([[1, 2, 3]])).last_hidden_state.sum().item() != 0)\n")
    err = io.StringIO()
    code, report = core.run_verify(core.Options(script=tmp_path / "mig.py", against=str(tmp_path / "orig.py"),
                                                original_env="auto", device="cpu"), out=io.StringIO(), err=err)
    assert report["libraries"]["original"]["transformers"].startswith("4.57"), report["reason"]
    assert report["libraries"]["migrated"]["transformers"].startswith("5.")
    assert report["original_env"]["requirements"][-2].startswith("transformers==4.57")


def test_auto_reuses_its_cached_environment_and_the_header_names_each_side(tmp_path, monkeypatch):
    """--original-env auto end to end without a network: the environment its pins resolve to is already in
    the cache (a stand-in Transformers 4.57.1), so nothing is installed; the report names the library
    versions of each side, the environment, and the requirement lines that were not installed."""
    import transformers

    orig, mig = tmp_path / "orig", tmp_path / "mig"
    orig.mkdir()
    mig.mkdir()
    (orig / "requirements.txt").write_text("transformers==4.57.1\ngit+https://example.com/lib.git\nnumpy==1.26.4\n")
    (orig / "run.py").write_text("import transformers\nprint('major', transformers.__version__.split('.')[0])\n")
    (mig / "run.py").write_text("import transformers\nprint('major', 4)\n")
    monkeypatch.setenv("NEURON_MIGRATE_CACHE", str(tmp_path / "cache"))
    plan = origenv.resolve(origenv.read_project(origenv.project_files(orig, orig)))
    assert "transformers==4.57.1" in plan.requirements
    env = tmp_path / "cache" / "envs" / plan.key(sys.executable)
    _venv(env, {"transformers/__init__.py": "__version__ = '4.57.1'\n"}, {"transformers": "4.57.1"})
    (env / origenv.MARKER).write_text(json.dumps({"requirements": plan.requirements, "built_s": 1.0}))
    monkeypatch.chdir(tmp_path)
    code, report = core.run_verify(core.Options(script=mig / "run.py", against=str(orig / "run.py"),
                                                original_env="auto", device="cpu"),
                                   out=io.StringIO(), err=io.StringIO())
    assert code == 0, report["reason"]
    assert report["libraries"]["original"]["transformers"] == "4.57.1"
    assert report["libraries"]["migrated"]["transformers"] == transformers.__version__
    assert not report["original_env"]["built_now"]
    refused = " ".join(report["original_env"]["refused"])
    assert "git+https://example.com/lib.git" in refused and "numpy==1.26.4" in refused
    text = core.render_text(report)
    assert "libraries (original): transformers 4.57.1" in text
    assert f"libraries (migrated): transformers {transformers.__version__}" in text
    assert f"original environment: {env}" in text
    assert "not installed in the original's environment: numpy==1.26.4" in text
