"""What the dependency rules (NM501-NM505, NM522, NM523) decide, whatever file a requirement sits in:
the facts about the old and new stacks (which packages go, what replaces them, the minimum
versions the migrated code needs), the version logic, the parsing of one requirement, the
decision for each entry and the plan of edits. The file formats (requirements files, setup.cfg,
pyproject.toml) are read and edited in :mod:`codemods.project.dependencies`, setup.py in
:mod:`codemods.project.setup_py`, Dockerfile and shell ``pip install`` lines in
:mod:`codemods.project.dockerfile`."""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterable, Iterator

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from migrator.model import fitted

# --------------------------------------------------------------------------- facts

#: Lowest versions with the APIs the migrated code uses (shared/reference/target-apis.md: the
#: target stack is transformers 5.23, accelerate 1.15, trl 1.16, peft 0.21, diffusers 0.42).
MINIMUMS: dict[str, str] = {
    "transformers": "5.23",
    "accelerate": "1.15",
    "trl": "1.16",
    "peft": "0.21",
    "diffusers": "0.42",
    "sentence-transformers": "5.0",
    # what the pinned Transformers 5.23 / Diffusers 0.42 require (their installed metadata)
    "huggingface-hub": "1.32",
    "tokenizers": "0.23.1",
    "safetensors": "0.8",
}
#: the target libraries a pin of which can be too low for the migrated code: units naming one are
#: shown to the dependency rules in a run that migrates old-stack code (``Rule.project_triggers``)
TARGET_PINS = ("transformers", "accelerate", "trl", "peft", "diffusers", "sentence-transformers",
               "sentence_transformers", "huggingface-hub", "huggingface_hub", "tokenizers", "safetensors")
#: Order in which added libraries are written.
_ADD_ORDER = ("torch-neuronx", "transformers", "accelerate", "trl", "peft", "diffusers", "sentence-transformers")

#: TorchNeuron is torch-neuronx 2.13 / 2.14 (Neuron 2.33+); torch-neuronx for PyTorch <= 2.9 is
#: the XLA-based package (the 2.9 one last shipped in Neuron 2.31).
TORCHNEURON_FIRST = Version("2.13")
#: TorchNeuron releases are built against PyTorch 2.13 or later.
TORCH_FIRST = Version("2.13")
NEURON_REPO = "https://pip.repos.neuron.amazonaws.com"
_NEURON_HOST = "pip.repos.neuron.amazonaws.com"

#: libraries implied by optimum-neuron itself and by its extras (optimum-neuron pyproject.toml)
_OPTIMUM_NEURON_BASE = ("transformers", "accelerate")
_OPTIMUM_NEURON_EXTRAS: dict[str, tuple[str, ...]] = {
    "training": ("trl", "peft"),
    "diffusers": ("diffusers", "peft"),
    "sentence-transformers": ("sentence-transformers",),
    "neuronx": ("torch-neuronx",),
    "neuron": ("torch-neuronx",),
}
#: extras of optimum 1.x that only installed a library (optimum setup.py); optimum 2.x dropped them
_OPTIMUM_LIBRARY_EXTRAS: dict[str, tuple[str, ...]] = {"diffusers": ("diffusers",)}
#: the ``uses:`` fact of a run with old-stack code in it (see USES_PROBES)
OLD_STACK_CODE = "old-stack-code"
#: the project fact (``Rule.project_probes``) of a run some file of which uses the old stack
USES_OLD_STACK = "uses:" + OLD_STACK_CODE
#: libraries the migrated code may import, as project facts (``Rule.project_probes``): found in any
#: file of the run, they are added to the install line that loses optimum-neuron (the code that
#: needed them got them through optimum-neuron's dependencies, or the migration makes it import them)
USES_PROBES: dict[str, tuple[str, ...]] = {
    "uses:trl": ("import trl", "from trl", "NeuronSFTTrainer", "NeuronSFTConfig", "NeuronORPOTrainer",
                 "NeuronORPOConfig"),
    "uses:peft": ("import peft", "from peft", "optimum.neuron.peft"),
    "uses:diffusers": ("import diffusers", "from diffusers", "NeuronStableDiffusion", "NeuronFlux", "NeuronPixArt",
                       "NeuronLatentConsistency"),
    "uses:sentence-transformers": ("import sentence_transformers", "from sentence_transformers",
                                   "NeuronSentenceTransformers", "NeuronModelForSentenceTransformers"),
    # not a library: some file of the run uses the old stack, so the run migrates code to the target
    # versions, and a pin of a target library below them (`transformers==4.32.0`) breaks the migrated code
    # even in a requirements file or install line that names no Neuron package
    # old-stack libraries whose uses the migration leaves to a person (markers): their package stays
    # installed while the migrated code still imports them (see _STILL_IMPORTED). `left:` facts are
    # probed on the migration's output (migrator.engine.OUTPUT_FACT). Probes end at a delimiter:
    # `neuronx_distributed_inference` is not a use of `neuronx_distributed`
    "left:neuronx-distributed": ("neuronx_distributed.", "neuronx_distributed import", "import neuronx_distributed\n",
                                 "import neuronx_distributed as", "import neuronx_distributed,",
                                 "import neuronx_distributed\r"),
    "left:neuronx-distributed-inference": ("neuronx_distributed_inference.", "neuronx_distributed_inference import",
                                           "import neuronx_distributed_inference"),
    USES_OLD_STACK: ("optimum.neuron", "torch_xla", "transformers_neuronx",
                               # torch_neuronx's XLA-era APIs (a bare `import torch_neuronx` is TorchNeuron's
                               # plugin too: a project already on the native stack keeps its pins)
                               "torch_neuronx.trace", "torch_neuronx.xla_impl", "torch_neuronx.DataParallel",
                               "torch_neuronx.dynamic_batch", "torch_neuronx.async_load", "torch_neuronx.lazy_load",
                               "torch_neuronx.move_trace_to_device", "torch_neuronx.analyze",
                               "torch_neuronx.experimental", "torch_neuronx.testing", "torch_neuronx.nki_jit",
                               "torch_neuronx.bucket_model", "from torch_neuronx import trace",
                               "neuronx_distributed", "libneuronxla",
                               # torch-neuron (Inf1): its code is ported to TorchNeuron too (NM900's markers)
                               "import torch_neuron\n", "import torch_neuron\r", "import torch_neuron as",
                               "import torch_neuron,", "torch_neuron.", "from torch_neuron ", "torch.neuron.trace",
                               # launches of the XLA stack (a notebook that only runs the libraries' example
                               # scripts): they are migrated too, to launches of the target versions
                               "neuron_parallel_compile", "XLA_USE_BF16", "XLA_DOWNCAST_BF16"),
}
#: ``Rule.project_probes`` of the rules that act only in a run moved to the target versions
MIGRATES_TO_TARGET = {USES_OLD_STACK: USES_PROBES[USES_OLD_STACK]}


def migrates_to_target(ctx) -> bool:
    """Whether the run migrates old-stack code, so that its pins go to the target versions (transformers 5.23,
    ...): a project without old-stack code keeps its pins, which an upgrade edit may not meet."""
    return USES_OLD_STACK in ctx.facts or any(p in ctx.whole_text for p in USES_PROBES[USES_OLD_STACK])


_USES: ContextVar[frozenset[str]] = ContextVar("neuron_migrate_uses", default=frozenset())
_LEFT: ContextVar[frozenset[str]] = ContextVar("neuron_migrate_left", default=frozenset())


@contextmanager
def project_uses(facts: Iterable[str]) -> Iterator[None]:
    """Decide, inside this block, with the libraries the project's code uses (the ``uses:`` facts) and those
    its migrated code still imports (the ``left:`` facts)."""
    facts = list(facts)
    token = _USES.set(frozenset(f[len("uses:"):] for f in facts if f.startswith("uses:")))
    left = _LEFT.set(frozenset(f[len("left:"):] for f in facts if f.startswith("left:")))
    try:
        yield
    finally:
        _LEFT.reset(left)
        _USES.reset(token)


#: removed packages of the XLA runtime; TorchNeuron (torch-neuronx) takes their place. NxD Inference
#: depends on neuronx-distributed (often installed with --no-deps next to it): both go, never one
_XLA_RUNTIME = frozenset({"torch-xla", "libneuronxla", "neuronx-distributed", "neuronx-distributed-training",
                          "neuronx-distributed-inference"})
#: names whose presence makes a list a Neuron one (torch-xla alone may be a TPU project)
_NEURON_NAMES = frozenset(
    {"optimum-neuron", "torch-neuronx", "neuronx-cc", "transformers-neuronx", "libneuronxla",
     "neuronx-distributed", "neuronx-distributed-training", "neuronx-distributed-inference"}
)

#: the distributions of the old stack: a project that is one of them (its own setup.py / pyproject names it)
#: is the old stack's own packaging, whose dependencies are not a user's to migrate
OLD_STACK_DISTRIBUTIONS = _NEURON_NAMES | _XLA_RUNTIME | {"optimum-neuron", "torch-neuron"}


def is_old_stack_distribution(name: str) -> bool:
    """Whether a project name (``name=`` of setup(), ``[project] name``) is an old-stack distribution."""
    return re.sub(r"[-_.]+", "-", name.strip().lower()) in OLD_STACK_DISTRIBUTIONS


#: old-stack packages the migration rewrites only in part (NxD layers, NxD Inference models get markers):
#: a requirement of one of them stays while the migrated code imports it (the ``left:`` fact of the
#: package, or of the other one: NxD Inference depends on NxD)
_STILL_IMPORTED = {"neuronx-distributed": ("neuronx-distributed", "neuronx-distributed-inference"),
                   "neuronx-distributed-inference": ("neuronx-distributed-inference",)}
STILL_IMPORTED_MARKER = "Remove {name} when no file of the project imports {module} any more."

TORCHNEURON_MARKER = "Pin the torch-neuronx 2.13+ (TorchNeuron) release of your Neuron SDK, from the Neuron pip repository."
#: the first-generation (Inf1) stack: torch-neuron and its compiler neuron-cc; TorchNeuron does not replace them
#: on an Inf1 host (it runs on Trn2/Trn3), so the line stays, marked
INF1_PACKAGES = frozenset({"torch-neuron", "neuron-cc"})
INF1_MARKER = ("This installs the Inf1 stack (torch-neuron, neuron-cc): port its code to TorchNeuron (torch-neuronx, "
               "Trn2/Trn3) first.")
TORCH_MARKER = "Remove this torch pin, or set it to the torch version that your torch-neuronx release pins."
VLLM_MARKER = "Install vLLM with the Neuron support of your Neuron SDK: optimum-neuron[vllm] no longer provides it."
HASHED_MARKER = "Hashed line: in its source file, {what}."
VLLM_TORCHNEURON_MARKER = "Install vLLM with Neuron support and the torch-neuronx 2.13+ (TorchNeuron) release of your Neuron SDK."


def hashed_message(what: str) -> str:
    """The marker of a hashed requirement line (pip-compile output) that needs ``what`` done to it."""
    return HASHED_MARKER.format(what=what)


UNPARSED_MARKER = "Edit this {name} requirement by hand, its version or URL cannot be rewritten: {what}."
UNPARSED_SHORT = "Edit this {name} requirement by hand: {what}."
CONSTRAINTS_MARKER = "Edit each constraint of this dependency by hand: {what}."
#: the long forms of the dependency rules' markers (see ``long_forms``)
_LONG = dict((
    (UNPARSED_MARKER,
     """A requirement whose version comes from a shell or template variable (`optimum-neuron==${VERSION}`),
     or that installs from a VCS or wheel URL (`git+https://github.com/huggingface/optimum-neuron.git`),
     is not PEP 508 text the rules can rewrite; the old-stack package it installs is named with what the
     migration does to it elsewhere (replace optimum-neuron by the Hugging Face libraries, drop torch-xla,
     pin the TorchNeuron release of torch-neuronx)."""),
    (TORCHNEURON_MARKER,
     f"""TorchNeuron is torch-neuronx 2.13 or later (Neuron SDK 2.33+), served by the Neuron repository
     {NEURON_REPO} (pip --extra-index-url); pin the release that matches the Neuron SDK (driver, runtime,
     compiler) of the host or image."""),
    (TORCH_MARKER,
     """TorchNeuron (torch-neuronx 2.13+) is built for PyTorch 2.13 or later and pins its own torch: an
     older pin makes the install fail or replaces the torch it needs."""),
    (VLLM_MARKER,
     """optimum-neuron[vllm] served models with vLLM through optimum-neuron; vLLM's Neuron support is
     installed on its own, from the release that matches your Neuron SDK."""),
    (VLLM_TORCHNEURON_MARKER,
     """optimum-neuron[vllm] served models with vLLM through optimum-neuron; vLLM's Neuron support is
     installed on its own, and TorchNeuron is torch-neuronx 2.13 or later from the Neuron repository."""),
    (HASHED_MARKER,
     """This requirement line carries --hash values (a pip-compile output): editing it here breaks the
     hash check. Make the change in the file it is generated from (requirements.in, pyproject) and
     regenerate the hashes (pip-compile --generate-hashes). The old Neuron stack (optimum-neuron,
     torch-xla, transformers-neuronx, neuronx-distributed) is not installed with TorchNeuron."""),
    (CONSTRAINTS_MARKER,
     """The dependency is listed with several constraints (a list of tables, or markers per platform),
     which the rule does not rewrite one by one."""),
))


def long_forms(*markers: str) -> tuple[tuple[str, str], ...]:
    """``Rule.markers`` for a rule that writes these of the dependency markers."""
    return tuple((m, _LONG[m]) for m in markers)


_FLOORS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dependency_floors.json")


@lru_cache(maxsize=1)
def dependency_floors() -> dict:
    """``{"versions": {target library: its pinned release}, "floors": {target library: {dependency: the lowest
    version that release requires}}}`` (generated from the installed targets' metadata by
    ``tools/gen_dependency_floors.py``)."""
    with open(_FLOORS_PATH, encoding="utf-8") as f:
        return json.load(f)


def _floors(libraries: Iterable[str]) -> dict[str, tuple[str, str]]:
    """dependency -> (the highest floor the target ``libraries`` require of it, the library that requires it)."""
    out: dict[str, tuple[str, str]] = {}
    table = dependency_floors()["floors"]
    for lib in libraries:
        for dep, floor in table.get(lib, {}).items():
            if dep not in out or Version(floor) > Version(out[dep][0]):
                out[dep] = (floor, lib)
    return out


def _min_spec(name: str) -> str:
    return f">={MINIMUMS[name]}" if name in MINIMUMS else ""


# --------------------------------------------------------------------------- version logic


def _below(spec: SpecifierSet, minimum: Version) -> bool:
    """True when ``spec`` caps the version below ``minimum`` (a pin, ``<``, ``~=`` or ``==X.*``)."""
    for s in spec:
        op, raw = s.operator, s.version
        if op in (">", ">=", "!="):
            continue
        if op in ("<", "<="):
            try:
                v = Version(raw)
            except InvalidVersion:
                continue
            if v < minimum or (op == "<" and v == minimum):
                return True
            continue
        if op in ("==", "~=", "==="):
            text = raw[:-2] if raw.endswith(".*") else raw
            try:
                v = Version(text)
            except InvalidVersion:
                continue
            if v < minimum and not s.contains(minimum, prereleases=True):
                return True
    return False


def _xla_torch_neuronx(spec: SpecifierSet) -> bool:
    """An XLA-era torch-neuronx pin: below 2.13, or in the ``<torch>.<neuron>`` 6-part scheme."""
    if _below(spec, TORCHNEURON_FIRST):
        return True
    for s in spec:
        if s.operator in ("==", "===") and not s.version.endswith(".*"):
            try:
                if len(Version(s.version).release) >= 5:
                    return True
            except InvalidVersion:
                pass
    return False


def _low_floor(spec: SpecifierSet) -> bool:
    """Only lower bounds (``>=2.1``, ``>2.0``), below TorchNeuron's first release."""
    return len(spec) > 0 and all(s.operator in (">=", ">") and Version(s.version) < TORCHNEURON_FIRST for s in spec)


def _old_neuronx_cc_pin(spec: SpecifierSet) -> bool:
    """A neuronx-cc pin tied to one SDK release (``==2.*`` and lower bounds are kept)."""
    return len(spec) > 0 and not spec.contains(Version("2.9999"), prereleases=True)


_POETRY_TOKEN = re.compile(r"(\^|~(?!=)|~=|==|!=|<=|>=|<|>|=)?\s*([0-9A-Za-z.*+!-]+)")


def _poetry_spec(constraint: str) -> list[SpecifierSet] | None:
    """A Poetry constraint (``^4.51``, ``~1.2``, ``2.5.*``, ``>=1,<2``, ``a || b``) as PEP 440 sets."""
    out: list[SpecifierSet] = []
    for alt in constraint.split("||"):
        parts: list[str] = []
        for chunk in re.split(r"[,\s]+", alt.strip()):
            if not chunk or chunk == "*":
                continue
            m = _POETRY_TOKEN.fullmatch(chunk)
            if not m:
                return None
            op, ver = m.group(1) or "", m.group(2)
            if op in ("^", "~"):
                try:
                    release = list(Version(ver).release)
                except InvalidVersion:
                    return None
                if op == "^":
                    idx = next((i for i, n in enumerate(release) if n != 0), len(release) - 1)
                else:
                    idx = min(1, len(release) - 1) if len(release) > 1 else 0
                upper = release[: idx + 1]
                upper[-1] += 1
                parts += [f">={ver}", "<" + ".".join(map(str, upper))]
            elif op in ("", "="):
                parts.append(f"=={ver}")
            else:
                parts.append(f"{op}{ver}")
        try:
            out.append(SpecifierSet(",".join(parts)))
        except InvalidSpecifier:
            return None
    return out


# --------------------------------------------------------------------------- requirement text

_REQ_RE = re.compile(
    r"^(?P<lead>\s*)(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)(?P<extras>\s*\[[^\]]*\])?"
    r"(?P<spec>[^;@]*?)(?P<url>\s*@[^;]*?)?(?P<marker>\s*;.*?)?(?P<trail>\s*)$",
    re.S,
)


@dataclass
class _Text:
    """A PEP 508 requirement as written, split so that one part can change and the rest stays."""

    req: Requirement
    m: re.Match

    @property
    def name(self) -> str:
        return canonicalize_name(self.req.name)

    @property
    def marker(self) -> str:
        return (self.m.group("marker") or "").rstrip()

    def with_spec(self, spec: str, extras: str | None = None) -> str:
        g = self.m.group
        ext = g("extras") or "" if extras is None else extras
        return g("lead") + g("name") + ext + spec + (g("url") or "") + (g("marker") or "") + g("trail")

    def unpinned(self) -> str:
        return self.with_spec("")


def _with_extras(text: _Text, extras: frozenset[str]) -> str:
    """The requirement as written, with only ``extras`` (optimum[onnxruntime] from optimum[neuronx,onnxruntime])."""
    return text.with_spec(text.m.group("spec"), "[" + ",".join(sorted(extras)) + "]").strip()


def _parse_req(text: str) -> _Text | None:
    try:
        req = Requirement(text.strip())
    except InvalidRequirement:
        return None
    m = _REQ_RE.match(text)
    if not m or canonicalize_name(m.group("name")) != canonicalize_name(req.name):
        return None
    return _Text(req, m)


#: a version given by a shell or template variable (`optimum-neuron==${VERSION}`, `torch-neuron==$V`)
_VARIABLE_SPEC = re.compile(r"\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[(?P<extras>[^\]]*)\])?\s*"
                            r"(?:===?|~=|!=|<=?|>=?)[^;]*?(?:\$|%[A-Za-z_]|\{\{)")
#: a GitHub repository URL (`git+https://github.com/huggingface/optimum-neuron.git@<sha>`)
_REPO_URL = re.compile(r"(?:git\+)?(?:https?|ssh|git)://(?:[^/\s]*@)?github\.com[/:](?P<owner>[^/\s]+)/"
                       r"(?P<repo>[A-Za-z0-9._-]+?)(?:\.git)?(?=[@#/?]|\s*$)")
#: the distribution a wheel file or `#egg=` fragment names (`torch_neuronx-1.13.1.1.13.0-py3-none-any.whl`)
_WHEEL = re.compile(r"(?:^|/)(?P<dist>[A-Za-z0-9_.]+?)-\d[^/\s]*\.whl\b")
_EGG = re.compile(r"#egg=(?P<dist>[A-Za-z0-9_.-]+)")
#: repositories whose name is not their distribution's
_REPO_DISTRIBUTIONS = {"pytorch/xla": "torch-xla"}


def unparsed_old_stack(text: str) -> tuple[str, frozenset[str], bool] | None:
    """The old-stack package that a requirement which is not PEP 508 installs (its canonical name, its
    extras, whether it is a URL): a version from a variable, a VCS or wheel URL; None for anything else.
    What it names is marked, never edited: its text cannot be rewritten safely."""
    m = _VARIABLE_SPEC.match(text)
    if m:
        name = canonicalize_name(m.group("name"))
        extras = frozenset(canonicalize_name(x) for x in (m.group("extras") or "").split(",") if x.strip())
        url = False
    else:
        name, extras, url = "", frozenset(), True
        egg, wheel, repo = _EGG.search(text), _WHEEL.search(text), _REPO_URL.search(text)
        if egg or wheel:
            name = canonicalize_name((egg or wheel).group("dist"))
        elif repo:
            key = f"{repo.group('owner')}/{repo.group('repo')}".lower()
            name = _REPO_DISTRIBUTIONS.get(key) or canonicalize_name(repo.group("repo"))
    old = name in OLD_STACK_DISTRIBUTIONS or name in INF1_PACKAGES or (name == "optimum" and extras & {"neuron", "neuronx"})
    return (name, extras, url) if old else None


def unparsed_entry(text: str, group: str, line: int, fmt: str, data: dict, hashed: bool = False) -> _Entry | None:
    """An entry for a requirement ``text`` that ``_parse_req`` cannot read but that installs an old-stack
    package (``unparsed_old_stack``): decided like the others, then marked instead of edited."""
    found = unparsed_old_stack(text)
    if found is None:
        return None
    name, extras, url = found
    return _Entry(name, extras, group, line, fmt, None, "", None, data=data, hashed=hashed, url=url, unparsed=True)


# --------------------------------------------------------------------------- entries and decisions


@dataclass
class _Entry:
    """One dependency declaration found in the unit."""

    name: str  # canonical
    extras: frozenset[str]
    group: str  # "" = the base list (requirements file, install_requires, project/poetry deps)
    line: int  # first physical line (0-based)
    fmt: str  # "pip" | "cfg" | "pep621" | "poetry" | "poetry-extra"
    spec: list[SpecifierSet] | None  # PEP 440 sets (Poetry: alternatives); None = unknown
    marker: str = ""  # environment marker suffix as written (``; python_version < "3.11"``)
    text: _Text | None = None
    data: dict = field(default_factory=dict)  # format-specific
    hashed: bool = False
    url: bool = False
    unparsed: bool = False  # not PEP 508 (a version from a variable, a VCS or wheel URL): marked, never edited


@dataclass
class _Decision:
    rule: str
    action: str  # "replace" (by other packages, maybe none) | "respec" | "marker"
    message: str
    new_spec: str | None = None  # respec: "" = unpinned
    keep_extras: frozenset[str] | None = None  # replace: keep the package itself with these extras
    implied: tuple[str, ...] = ()
    marker: str | None = None
    adds: list[str] = field(default_factory=list)  # canonical names added in its place
    describe: str = ""  # for NM502


def _decide(e: _Entry, neuron_group: bool, migrating: bool) -> _Decision | None:
    if e.unparsed:
        return _unparsed_decision(e, _decide_parsed(e, neuron_group, migrating))
    return _decide_parsed(e, neuron_group, migrating)


def _unparsed_decision(e: _Entry, d: _Decision | None) -> _Decision | None:
    """The marker that stands for ``d`` on a requirement that is not PEP 508 (``unparsed_entry``)."""
    if d is None:
        if e.name != "torch-neuronx":
            return None
        # its version is unknown: it may be an XLA-era release
        return _Decision("NM501", "marker", "torch-neuronx given by a variable or URL", marker=TORCHNEURON_MARKER)
    if d.action == "marker":
        return d
    if d.action == "replace":
        what = f"remove {e.name}" + (" and install " + ", ".join(d.implied) if d.implied else "")
    else:
        what = _describe(e, d)
    return _Decision(d.rule, "marker", d.message, implied=d.implied,
                     marker=fitted(UNPARSED_MARKER.format(name=e.name, what=what),
                                   UNPARSED_SHORT.format(name=e.name, what=what),
                                   UNPARSED_SHORT.format(name=e.name, what=f"remove {e.name}")))


def _decide_parsed(e: _Entry, neuron_group: bool, migrating: bool) -> _Decision | None:
    spec = e.spec
    name = e.name
    if name == "optimum-neuron":
        implied = list(_OPTIMUM_NEURON_BASE)
        for extra in sorted(e.extras):
            implied += _OPTIMUM_NEURON_EXTRAS.get(extra, ())
        implied += sorted(_USES.get() & set(MINIMUMS))
        shown = name + (f"[{','.join(sorted(e.extras))}]" if e.extras else "")
        return _Decision("NM501", "replace", shown,
                         implied=tuple(dict.fromkeys(implied)), marker=VLLM_MARKER if "vllm" in e.extras else None)
    if name == "optimum" and e.extras & {"neuron", "neuronx"}:
        # an extra that only installs a library (`optimum[diffusers]`) becomes that library: optimum 2.x has no
        # such extra, and the 1.x that has it requires transformers 4
        libs = [lib for x in sorted(e.extras) for lib in _OPTIMUM_LIBRARY_EXTRAS.get(x, ())]
        keep = frozenset(e.extras - {"neuron", "neuronx"} - set(_OPTIMUM_LIBRARY_EXTRAS))
        return _Decision("NM501", "replace", f"the Neuron extra of optimum[{','.join(sorted(e.extras))}]",
                         keep_extras=keep or None,
                         implied=tuple(dict.fromkeys(("torch-neuronx", *_OPTIMUM_NEURON_BASE, *libs,
                                                      *sorted(_USES.get() & set(MINIMUMS))))))
    if name == "transformers-neuronx":
        return _Decision("NM501", "replace", name,
                         implied=("torch-neuronx", "transformers"))
    if name in _STILL_IMPORTED and _LEFT.get() & set(_STILL_IMPORTED[name]):
        return _Decision("NM501", "marker", f"{name} kept: the project's code still imports it",
                         marker=STILL_IMPORTED_MARKER.format(name=name, module=name.replace("-", "_")))
    if name in INF1_PACKAGES:
        return _Decision("NM501", "marker", f"{name} kept: the Inf1 stack, which TorchNeuron does not replace",
                         marker=INF1_MARKER)
    if name in _XLA_RUNTIME and (name != "torch-xla" or (neuron_group and "tpu" not in e.extras)):
        return _Decision("NM501", "replace", name,
                         implied=("torch-neuronx",))
    if e.url or spec is None:
        return None
    if name == "torch-neuronx" and any(_xla_torch_neuronx(s) for s in spec):
        return _Decision("NM501", "respec", "XLA-era torch-neuronx pin removed: the package is now TorchNeuron",
                         new_spec="", marker=TORCHNEURON_MARKER)
    if name == "torch-neuronx" and spec and all(_low_floor(s) for s in spec):
        # `torch-neuronx>=2.1`: a floor that admits the XLA-era releases (2.1-2.9) as well as TorchNeuron
        return _Decision("NM501", "respec", f"torch-neuronx floor raised to >={TORCHNEURON_FIRST} (TorchNeuron): a "
                         "lower one admits the XLA-era releases", new_spec=f">={TORCHNEURON_FIRST}")
    if name == "neuronx-cc" and all(_old_neuronx_cc_pin(s) for s in spec):
        return _Decision("NM501", "respec",
                         "neuronx-cc pin of the old Neuron SDK removed: install the compiler release of your TorchNeuron",
                         new_spec="")
    if not migrating:
        return None
    if name in MINIMUMS and all(_below(s, Version(MINIMUMS[name])) for s in spec):
        return _Decision("NM503", "respec", f"{name} raised to {_min_spec(name)}, the version the migrated code needs",
                         new_spec=_min_spec(name))
    if name == "torch" and all(_below(s, TORCH_FIRST) for s in spec):
        return _Decision("NM504", "marker", "torch pin older than TorchNeuron's PyTorch",
                         marker=TORCH_MARKER)
    return None


def floor_unpinned(entries: list[_Entry], decisions: dict[int, _Decision], command: Callable[[_Entry], object]) -> None:
    """In a ``pip install`` command the migration edits (one of its requirements has a decision), an unpinned
    target library gets the floor the migrated code needs: pip leaves an installed older release in place
    (`pip install transformers` on an image with 4.x keeps 4.x). ``command``: which command an entry is in."""
    edited = {command(entries[i]) for i in decisions}
    for i, e in enumerate(entries):
        if i in decisions or e.url or e.spec is None or e.name not in MINIMUMS or command(e) not in edited:
            continue
        if all(str(s) == "" for s in e.spec):
            decisions[i] = _Decision("NM503", "respec", f"{e.name} given the floor the migrated code needs "
                                     f"({_min_spec(e.name)}): pip keeps an installed older release",
                                     new_spec=_min_spec(e.name))


def _allocate(entries: list[_Entry], decisions: dict[int, _Decision], base: str = "",
              included: frozenset[str] = frozenset()) -> None:
    """Choose the libraries each replacement adds: implied, not listed in its list or the base list
    (nor in the files the base list includes with ``-r``)."""
    listed: dict[str, set[str]] = {base: set(included)}
    for i, e in enumerate(entries):
        d = decisions.get(i)
        if d is None or d.action != "replace" or d.keep_extras is not None:
            listed.setdefault(e.group, set()).add(e.name)
    added: dict[str, set[str]] = {}
    # the base list first: what it gains is not added again to the optional lists
    for i in sorted(range(len(entries)), key=lambda i: (entries[i].group != base, i)):
        e = entries[i]
        d = decisions.get(i)
        if d is None or d.action != "replace":
            continue
        have = listed.get(e.group, set()) | listed.get(base, set()) | added.get(base, set())
        have |= added.setdefault(e.group, set())
        d.adds = [n for n in _ADD_ORDER if n in d.implied and n not in have]
        added[e.group].update(d.adds)
        if "torch-neuronx" in d.adds:
            d.marker = VLLM_TORCHNEURON_MARKER if d.marker == VLLM_MARKER else d.marker or TORCHNEURON_MARKER


def _replace_message(d: _Decision) -> str:
    """The finding of a replacement (``d.message`` names what goes)."""
    if d.adds:
        return f"{d.message} (old Neuron stack) replaced by " + ", ".join(n + _min_spec(n) for n in d.adds)
    return f"{d.message} (old Neuron stack) removed" + (
        "; what it stood for is listed already" if d.implied else "")


def replacement_requirements(e: _Entry, d: _Decision) -> list[str]:
    """The requirements an entry becomes under ``d`` (a respec or a replacement): itself with the new
    spec; or the package kept with its other extras (``keep_extras``), then what the replacement adds."""
    assert e.text is not None
    if d.action == "respec":
        return [e.text.with_spec(d.new_spec or "").strip()]
    out = [_with_extras(e.text, d.keep_extras)] if d.keep_extras is not None else []
    return out + [name + _min_spec(name) + e.marker for name in d.adds]


def _describe(e: _Entry, d: _Decision) -> str:
    """What to do with one requirement by hand, as a lower-case clause (no full stop)."""
    if d.action == "replace":
        return f"remove {e.name}" + (" and add " + ", ".join(n + _min_spec(n) for n in d.adds) if d.adds else "")
    if d.rule == "NM503":
        return f"raise {e.name} to {d.new_spec}"
    if e.name == "torch-neuronx":
        return "make this XLA-era torch-neuronx the TorchNeuron release (2.13+) of your Neuron SDK"
    return f"drop this {e.name} pin of the old Neuron SDK"


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class _Op:
    rule: str
    kind: str  # "edit" | "marker" | "finding"
    start: int
    end: int = 0
    new: tuple[str, ...] = ()
    message: str = ""


class _Plan:
    def __init__(self) -> None:
        self.ops: list[_Op] = []

    def edit(self, rule: str, start: int, end: int, new: Iterable[str], message: str) -> None:
        self.ops.append(_Op(rule, "edit", start, end, tuple(new), message))

    def marker(self, rule: str, line: int, message: str) -> None:
        """A marker above ``line``; each distinct message once (each marker is one sentence)."""
        if any(op.kind == "marker" and op.rule == rule and op.start == line and op.message == message
               for op in self.ops):
            return
        self.ops.append(_Op(rule, "marker", line, message=message))


def _neuron_groups(entries: list[_Entry]) -> set[str]:
    groups = set()
    for e in entries:
        if e.name in _NEURON_NAMES or (e.name == "optimum" and e.extras & {"neuron", "neuronx"}):
            groups.add(e.group)
    return groups


def _decide_all(entries: list[_Entry], repo_hint: bool, base: str = "",
                included: frozenset[str] = frozenset()) -> dict[int, _Decision]:
    neuron = _neuron_groups(entries)
    first: dict[int, _Decision] = {}
    for i, e in enumerate(entries):
        d = _decide(e, e.group in neuron or repo_hint, migrating=False)
        if d is not None:
            first[i] = d
    if not first and OLD_STACK_CODE not in _USES.get():
        return {}  # nothing of the old stack here, and no code of the run is migrated to the target versions
    decisions: dict[int, _Decision] = {}
    for i, e in enumerate(entries):
        d = first.get(i) or _decide(e, e.group in neuron or repo_hint, migrating=True)
        if d is not None:
            decisions[i] = d
    _allocate(entries, decisions, base, included)
    # the target libraries each list installs after the migration (kept, raised or added): a pin beside them
    # below what their pinned release requires (`regex==2023.12.25` next to transformers>=5.23) makes the
    # install unresolvable, so it is raised to that floor
    installs: dict[str, set[str]] = {}
    for i, e in enumerate(entries):
        d = decisions.get(i)
        names = installs.setdefault(e.group, set())
        if d is None or d.action != "replace":
            names.add(e.name)
        if d is not None:
            names.update(d.adds)
    for i, e in enumerate(entries):
        if i in decisions or e.url or e.spec is None or e.name in MINIMUMS:
            continue
        floor = _floors(installs.get(e.group, set()) | installs.get(base, set())).get(e.name)
        if floor is not None and all(_below(s, Version(floor[0])) for s in e.spec):
            lib = floor[1]
            version = dependency_floors()["versions"].get(lib, "")
            decisions[i] = _Decision("NM503", "respec", f"{e.name} raised to >={floor[0]}, which {lib} {version} "
                                     "requires", new_spec=f">={floor[0]}")
    return decisions
