"""NM501-NM504 (codemods/project/dependencies.py): checks beyond the before/after fixtures."""

from __future__ import annotations

import configparser
import importlib.metadata
import re
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from codemods.project import dependencies as deps
from codemods.project import dependency_policy as policy
from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

RULE_IDS = ("NM501", "NM502", "NM503", "NM504")
FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def migrate(text: str | bytes, kind: str, rules: RuleSet):
    data = text.encode() if isinstance(text, str) else text
    result = process(Candidate(Path("fixture"), "fixture", kind), rules, data)
    assert result.status in ("changed", "unchanged"), result.error
    new = result.new_bytes if result.status == "changed" else data
    return (new.decode() if isinstance(text, str) else new), result.findings


def requirement_lines(text: str) -> list[str]:
    """The requirement strings of a pip requirements file (comments, options, hashes dropped)."""
    out = []
    for line in re.sub(r"\\\r?\n", "", text).splitlines():
        body = re.sub(r"(^|\s+)#.*$", "", line).strip()
        if body and not body.startswith("-"):
            out.append(re.split(r"\s--?[A-Za-z]", body)[0])
    return out


# --------------------------------------------------------------------------- target versions


@pytest.mark.parametrize("name", ["transformers", "trl", "diffusers", "peft", "accelerate"])
def test_minimum_is_the_installed_target_release(name):
    """The versions the rules emit are those of the pinned target stack the migrated code is tested with."""
    installed = Version(importlib.metadata.version(name))
    assert deps.MINIMUMS[name] == f"{installed.major}.{installed.minor}"


@pytest.mark.parametrize("library", ["transformers", "diffusers"])
def test_minimums_satisfy_what_the_target_libraries_require(library):
    """A pin the migration raises to its minimum (huggingface-hub, tokenizers, safetensors) installs beside the
    target library: the minimum is inside what the installed release of that library requires."""
    checked = 0
    for line in importlib.metadata.requires(library) or ():
        req = Requirement(line)
        if req.marker is not None and "extra" in str(req.marker):
            continue
        name = canonicalize_name(req.name)
        if name in ("huggingface-hub", "tokenizers", "safetensors"):
            assert name in deps.MINIMUMS, name
            assert req.specifier.contains(deps.MINIMUMS[name], prereleases=True), (library, str(req))
            checked += 1
    assert checked >= 2


@pytest.mark.parametrize("name", policy._ADD_ORDER)
def test_every_added_requirement_parses_and_admits_the_installed_release(name):
    req = Requirement(name + deps._min_spec(name))
    assert canonicalize_name(req.name) == name
    try:
        installed = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return  # torch-neuronx: not installable here
    assert req.specifier.contains(installed, prereleases=True)


def test_every_requirement_written_by_the_fixtures_parses(rules):
    for after in sorted(FIXTURES.glob("NM50*/*.after.txt")):
        # (a line kept as the project wrote it, `transformers==${VERSION}`, is the project's)
        kept = set(requirement_lines(after.with_name(after.name.replace(".after.", ".before.")).read_bytes().decode()))
        for req in requirement_lines(after.read_bytes().decode()):
            if req not in kept:
                Requirement(req)
    for after in sorted(FIXTURES.glob("NM50*/*.after.toml")):
        doc = tomllib.loads(after.read_text())
        project = doc.get("project", {})
        lists = [project.get("dependencies", [])] + list(project.get("optional-dependencies", {}).values())
        lists += list(doc.get("dependency-groups", {}).values())
        for items in lists:
            for item in items:
                if isinstance(item, str):
                    Requirement(item)
    for after in sorted(FIXTURES.glob("NM50*/*.after.cfg")):
        cfg = configparser.ConfigParser(interpolation=None)
        cfg.read_string(after.read_text())
        values = [cfg["options"].get("install_requires", "")] + list(cfg["options.extras_require"].values())
        for value in values:
            for line in value.splitlines():
                if line.strip() and not line.strip().startswith("#"):
                    Requirement(line.strip())


# --------------------------------------------------------------------------- version logic


@pytest.mark.parametrize(
    "spec,xla",
    [
        ("==2.5.*", True),
        ("==1.13.*", True),
        ("==2.1.2.2.3.0", True),
        ("==1.13.1.1.15.0", True),
        ("==2.8.0.2.10.16998", True),
        ("==2.9.0.2.15.32035", True),  # the last XLA-based torch-neuronx (Neuron 2.31)
        ("<2.9", True),
        ("~=2.5.1", True),
        ("==2.9.*", True),
        ("", False),
        (">=2.1", False),
        ("==2.13.3.0", False),
        ("==2.14.*", False),
        ("~=2.14.3", False),
    ],
)
def test_xla_era_torch_neuronx_pins(spec, xla):
    assert policy._xla_torch_neuronx(SpecifierSet(spec)) is xla


@pytest.mark.parametrize(
    "spec,below",
    [
        ("==4.51.3", True),
        ("~=4.48.0", True),
        ("<5", True),
        ("<5.23", True),
        ("<=5.22.9", True),
        (">=4.40,<4.52", True),
        ("==4.*", True),
        ("", False),
        (">=4.40", False),
        ("==5.*", False),
        ("==5.23.0", False),
        ("<=5.23", False),
        (">=6,<7", False),
        ("!=4.51.0", False),
        ("~=5.0", False),
    ],
)
def test_below_minimum(spec, below):
    assert deps._below(SpecifierSet(spec), Version("5.23")) is below


@pytest.mark.parametrize(
    "constraint,expected",
    [
        ("^4.51", [">=4.51,<5"]),
        ("^0.13.2", [">=0.13.2,<0.14"]),
        ("~1.2.3", [">=1.2.3,<1.3"]),
        ("2.5.*", ["==2.5.*"]),
        ("2.1.2.2.3.0", ["==2.1.2.2.3.0"]),
        ("*", [""]),
        (">=1.0,<2.0", [">=1.0,<2.0"]),
        (">=1.0 <2.0", [">=1.0,<2.0"]),
        ("^1.0 || ^2.0", [">=1.0,<2", ">=2.0,<3"]),
    ],
)
def test_poetry_constraints(constraint, expected):
    assert deps._poetry_spec(constraint) == [SpecifierSet(e) for e in expected]


@pytest.mark.parametrize("spec,old", [("==2.15.128.0", True), ("==2.21.*", True), ("<2.16", True),
                                      ("", False), ("==2.*", False), (">=2.14", False)])
def test_neuronx_cc_pins(spec, old):
    assert policy._old_neuronx_cc_pin(SpecifierSet(spec)) is old


# --------------------------------------------------------------------------- nothing to do


UNRELATED = [
    ("requirements", "numpy==1.26.4\ntorch==2.1.2\ntransformers==4.40.0  # neuron? no\n"),
    # a TPU project: torch-xla alone is not the Neuron stack
    ("requirements", "torch==2.5.1\ntorch-xla[tpu]==2.5.1\n-f https://storage.googleapis.com/libtpu-releases/index.html\n"),
    # already on TorchNeuron: nothing of the old stack, so pins are the user's business
    ("requirements", "--extra-index-url https://pip.repos.neuron.amazonaws.com\ntorch-neuronx==2.14.*\n"
                     "neuronx-cc==2.*\ntorch==2.1.2\ntransformers==4.40\n"),
    ("requirements", "[metadata]\nname = neuron-tools\n\n[options]\ninstall_requires =\n    requests\n    torch-neuronx\n"),
    ("pyproject", '[project]\nname = "neuron-dashboard"\ndescription = "Monitors Neuron devices"\n'
                  'dependencies = ["rich", "transformers==4.40"]\n\n[tool.poetry.dependencies]\npython = "^3.10"\n'),
    ("pyproject", '[project]\nname = "x"\ndependencies = [\n  "torch-neuronx>=2.13",  # neuron\n]\n'),
]


@pytest.mark.parametrize("kind,text", UNRELATED)
def test_unrelated_files_are_byte_identical(kind, text, rules):
    for data in (text, text.replace("\n", "\r\n")):
        new, findings = migrate(data.encode(), kind, rules)
        assert new == data.encode()
        assert not [f for f in findings if f.rule in RULE_IDS]


# --------------------------------------------------------------------------- tricky inputs

TRICKY = [
    ("requirements", "optimum-neuron==0.2.0"),  # no final newline
    ("requirements", "datasets\noptimum-neuron==0.2.0"),  # the last line goes
    ("requirements", "torch-neuronx==2.5.*\r\nneuronx-cc==2.15.1.0\n"),  # mixed endings
    ("requirements", "optimum-neuron==0.2.0 \\\n    --config-settings=foo=bar\ndatasets\n"),  # continued, no hash
    ("requirements", "torch-neuronx==2.5.* \\\n    --config-settings=foo=bar\n"),
    ("requirements", "optimum-neuron @ git+https://github.com/huggingface/optimum-neuron.git@v0.2.0\n"),
    ("requirements", "-e git+https://github.com/huggingface/optimum-neuron.git#egg=optimum-neuron\nlibneuronxla\n"),
    ("requirements", "optimum-neuron[neuronx]==0.2.0  # neuron-migrate: ignore\ntorch-neuronx==2.5.*\n"),
    ("requirements", "optimum-neuron[vllm]==0.4.5\n"),
    ("requirements", "optimum-neuron[training]\noptimum-neuron[training]\ntransformers-neuronx\n"),
    ("requirements", "OPTIMUM.NEURON==0.1.0; python_version < '3.11' and sys_platform == \"linux\"\n"),
    ("requirements", "not a requirement ===\noptimum-neuron>>0.2\nneuronx-cc==2.1.0\n"),
    ("requirements", "[options]\ninstall_requires = optimum-neuron[training]\n    datasets\n"),
    ("requirements", "[options]\ninstall_requires = libneuronxla\n"),
    ("requirements", "[options.extras_require]\nneuron =\n    optimum-neuron\n\n[options]\ninstall_requires = transformers==4.40\n"),
    ("pyproject", '[project]\ndependencies = ["optimum-neuron==0.2.0", "transformers==4.51.3", "torch==2.5.1"]\n'),
    ("pyproject", '[project]\ndependencies = ["optimum-neuron==0.2.0",\n  "datasets"]\n'),
    ("pyproject", '[project]\ndependencies = [\n  "datasets", "libneuronxla",\n  "neuronx-distributed"]\n'),
    ("pyproject", '[project]\ndependencies = [\n  "optimum-neuron; python_version < \\"3.11\\"",  # q\n]\n'),
    ("pyproject", "[project]\ndependencies = [\n  'torch-neuronx==2.5.* ; sys_platform == \"linux\"'  # pinned\n]\n"),
    ("pyproject", '[project.optional-dependencies]\nneuron = ["optimum-neuron[neuronx,training]"]\n'
                  '[project]\ndependencies = ["transformers>=4.30"]\n'),
    ("pyproject", '[tool.poetry.dependencies]\n"optimum-neuron" = { git = "https://github.com/huggingface/optimum-neuron.git" }\n'
                  'torch-neuronx = [\n  { version = "2.1.2.2.3.0", python = "<3.11" },\n  { version = "2.5.*", python = ">=3.11" },\n]\n'),
    ("pyproject", '[tool.poetry.dependencies]\noptimum-neuron = {version = "0.2.0", optional = true, extras = ["training"]}\n'
                  '[tool.poetry.extras]\nneuron = ["optimum-neuron"]\n'),
    ("pyproject", '[tool.poetry.group.neuron.dependencies]\ntransformers-neuronx = "*"  # inference\n'
                  'transformers = "4.36.2"\n'),
    ("requirements", "# regenerate with --hash later\n--require-hashes-not\noptimum-neuron==0.2.0\n"),
    ("requirements", "[options]\ninstall_requires =\n    datasets\n# a comment at column 0\n    torch-xla==2.1.0\n"
                     "    neuronx-cc==2.15.0.1\n"),
    ("pyproject", '[tool.poetry.dependencies]\noptimum = { version = "^1.23", extras = ["neuronx", "onnxruntime"] }  # x\n'),
    ("requirements", "optimum[neuronx,exporters]==1.23.0  # export\n"),
    # the marker names the Neuron repository: it must not make torch-xla of another list Neuron's on a rerun
    ("pyproject", '[project]\ndependencies = ["libneuronxla"]\n[dependency-groups]\ndev = ["torch-xla==2.1.0"]\n'),
    ("requirements", "[options]\ninstall_requires =\n    libneuronxla\n[options.extras_require]\ntpu = torch-xla==2.1.0\n"),
]


@pytest.mark.parametrize("kind,text", TRICKY, ids=range(len(TRICKY)))
def test_tricky_inputs_are_idempotent_and_valid(kind, text, rules):
    once, findings = migrate(text, kind, rules)
    twice, findings2 = migrate(once, kind, rules)
    assert twice == once
    assert not [f for f in findings2 if f.rule in RULE_IDS and f.fix == "applied"]
    if kind == "pyproject":
        tomllib.loads(once)
    elif text.startswith("["):
        configparser.ConfigParser(interpolation=None).read_string(once)
    else:
        for req in requirement_lines(once):
            if not req.startswith("-") and "not a requirement" not in req and ">>" not in req:
                Requirement(req)


def test_hash_mode_comes_from_options_not_comments(rules):
    new, findings = migrate("# pip-compile --generate-hashes was not used\noptimum-neuron==0.2.0\n", "requirements", rules)
    assert new == "# pip-compile --generate-hashes was not used\ntransformers>=5.23\naccelerate>=1.15\n"
    new, findings = migrate("--require-hashes\noptimum-neuron==0.2.0\n", "requirements", rules)
    assert new.splitlines()[1].startswith("# TODO(neuron-migrate NM502): Hashed line: in its source file, remove optimum-neuron")


def test_setup_cfg_comment_at_column_0_does_not_end_the_value(rules):
    src = "[options]\ninstall_requires =\n    datasets\n# a comment\n    libneuronxla\n    torch-neuronx\n"
    new, _ = migrate(src, "requirements", rules)
    assert new == "[options]\ninstall_requires =\n    datasets\n# a comment\n    torch-neuronx\n"


def test_untouched_lines_keep_their_bytes(rules):
    text = "a==1 \t# x\r\n\r\n-r other.txt\noptimum-neuron==0.2.0\r\nb ;python_version<'3.9'\n"
    new, _ = migrate(text.encode(), "requirements", rules)
    assert new == b"a==1 \t# x\r\n\r\n-r other.txt\ntransformers>=5.23\r\naccelerate>=1.15\r\nb ;python_version<'3.9'\n"


def test_markers_are_kept_on_replacements(rules):
    new, _ = migrate('optimum-neuron[training]==0.2.0 ; python_version >= "3.10"  # trainer\n', "requirements", rules)
    assert new == ('transformers>=5.23 ; python_version >= "3.10"\naccelerate>=1.15 ; python_version >= "3.10"\n'
                   'trl>=1.16 ; python_version >= "3.10"\npeft>=0.21 ; python_version >= "3.10"\n')


def test_names_are_normalised(rules):
    new, _ = migrate("Optimum_Neuron==0.2.0\nNeuronX_CC==2.15.0.1\nTorch.NeuronX==2.5.1.2.4.0\n", "requirements", rules)
    assert requirement_lines(new) == ["transformers>=5.23", "accelerate>=1.15", "NeuronX_CC", "Torch.NeuronX"]


def test_torch_neuronx_unpinned_stays_and_is_not_added_twice(rules):
    new, findings = migrate("torch-neuronx\nlibneuronxla==2.0.1\ntorch-xla==2.1.2\n", "requirements", rules)
    assert new == "torch-neuronx\n"
    assert [f.rule for f in findings] == ["NM501", "NM501"]


def test_torch_neuronx_is_added_when_the_xla_runtime_goes(rules):
    new, findings = migrate("torch-xla==2.1.2\nlibneuronxla==2.0.1\n", "requirements", rules)
    assert new == f"# TODO(neuron-migrate NM501): {deps.TORCHNEURON_MARKER}\ntorch-neuronx\n"
    assert {f.fix for f in findings} == {"applied", "manual"}


def test_vllm_extra_gets_a_marker(rules):
    new, findings = migrate("optimum-neuron[vllm]==0.4.5\n", "requirements", rules)
    assert new.startswith(f"# TODO(neuron-migrate NM501): {policy.VLLM_MARKER}\ntransformers>=5.23\n")


def test_hashed_file_gets_markers_and_no_unhashed_lines(rules):
    before = (FIXTURES / "NM502" / "pip_compile.before.txt").read_text()
    after, findings = migrate(before, "requirements", rules)
    assert requirement_lines(after) == requirement_lines(before)
    assert [ln for ln in after.splitlines() if "TODO" not in ln] == before.splitlines()
    assert all(f.fix == "manual" for f in findings if f.rule in RULE_IDS)
    assert {f.rule for f in findings} == {"NM502", "NM504"}


def test_one_line_array_with_several_rules(rules):
    src = '[project]\ndependencies = ["optimum-neuron==0.2.0", "transformers==4.51.3", "torch==2.5.1"]\n'
    new, findings = migrate(src, "pyproject", rules)
    assert new == (f"[project]\n# TODO(neuron-migrate NM504): {deps.TORCH_MARKER}\n"
                   'dependencies = ["accelerate>=1.15", "transformers>=5.23", "torch==2.5.1"]\n')
    assert {f.rule for f in findings} == {"NM501", "NM504"}


def test_rule_can_be_ignored_on_its_line(rules):
    src = "optimum-neuron==0.2.0\ntransformers==4.40  # neuron-migrate: ignore[NM503]\n"
    new, findings = migrate(src, "requirements", rules)
    assert new == "accelerate>=1.15\ntransformers==4.40  # neuron-migrate: ignore[NM503]\n"
    assert "NM503" not in {f.rule for f in findings}


def test_selection_runs_one_rule_alone():
    only = RuleSet.from_selection(RuleSelection(select=("NM503",)))
    new, findings = migrate("optimum-neuron==0.2.0\ntransformers==4.40\n", "requirements", only)
    assert new == "optimum-neuron==0.2.0\ntransformers>=5.23\n"
    assert {f.rule for f in findings} == {"NM503"}


# --------------------------------------------------------------------------- docs


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_explain_example_is_what_the_rule_does(rule_id, rules):
    rule = next(r for r in deps.RULES if r.id == rule_id)
    doc = rule.doc()
    assert doc.title and doc.why and doc.before and doc.after
    new, findings = migrate(doc.before + "\n", "requirements", rules)
    assert new == doc.after + "\n"
    assert rule_id in {f.rule for f in findings}


def test_rules_are_registered():
    from codemods import all_rules

    ids = {r.id: r for r in all_rules()}
    for rule_id in RULE_IDS:
        assert rule_id in ids
    assert ids["NM502"].kinds == ("requirements",)
    assert set(ids["NM501"].kinds) == {"requirements", "pyproject"}
    assert textwrap.dedent(ids["NM501"].why)


def test_dependency_floors_are_those_of_the_installed_targets():
    """codemods/project/dependency_floors.json is what tools/gen_dependency_floors.py reads from the installed
    targets' metadata (skipped where another release of a target is installed than the file records)."""
    import subprocess
    import sys

    data = policy.dependency_floors()
    for lib, version in data["versions"].items():
        try:
            installed = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{lib} is not installed")
        if installed != version:
            pytest.skip(f"installed {lib} {installed}, the data records {version}")
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run([sys.executable, str(root / "tools" / "gen_dependency_floors.py"), "--check"],
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert data["floors"]["transformers"]["regex"]  # the pin a real Dockerfile kept below it


@pytest.mark.parametrize("library", ["transformers", "trl"])
def test_a_raised_neighbour_pin_admits_what_the_target_requires(library):
    """Each floor the rules raise a pin to is inside the installed target's own requirement of that package."""
    floors = policy.dependency_floors()["floors"][library]
    for line in importlib.metadata.requires(library) or ():
        req = Requirement(line)
        name = canonicalize_name(req.name)
        if name in floors and not (req.marker is not None and "extra" in str(req.marker)):
            assert req.specifier.contains(floors[name], prereleases=True), (library, str(req))
