"""NM520-NM521: Dockerfiles of the XLA-era Neuron stack.

A Dockerfile is read instruction by instruction (``\\`` continuations, comment and blank lines
inside them, BuildKit heredocs). ``ENV`` instructions follow the environment rules of the shell
scripts (NM512's list of XLA-only variables, NM513 for ``NEURON_CC_FLAGS``); ``FROM`` lines on an
XLA-era Neuron Deep Learning Container get a marker. ``apt-get install`` of the Neuron driver,
runtime and tools is left as it is (TorchNeuron still needs them).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Callable

from codemods.project import dependency_policy as deps
from codemods.project.dependency_policy import _NEURON_HOST
from codemods.project.shell_plans import Lines, Plan, ShellPlan, ShellUnit, _merge, assignments, deletion_span, plan_for, render
from codemods.project.serving import SERVING_MARKER, neuron_sdk_server
from codemods.project.shell_syntax import ShellSyntaxError
from codemods.project.xla_env import (
    BF16_VARS, ENV_MARKERS, MARKED_VARS, XLA_ONLY_PREFIXES, XLA_ONLY_VARS, switched_on, ignored_by_torchneuron,
    mark_bf16_launch, xla_only_reason)
from migrator.model import fitted
from migrator.rules import TextRule

_DIRECTIVE_RE = re.compile(r"#\s*([A-Za-z][A-Za-z0-9]*)\s*=\s*(.*?)\s*$")
_HEREDOC_RE = re.compile(r"<<(-?)\s*([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")
_CONT_RE = re.compile(r"(?<!\\)(?:\\\\)*\\[ \t]*$")
_PAIR_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_.-]*)=")
_XLA_DLC_RE = re.compile(r"pytorch-(training|inference)-neuronx")
_SDK_RE = re.compile(r"sdk(\d+)\.(\d+)")
#: `RUN [--mount=... ...] <<EOF`, `RUN bash <<-'EOF'`: a heredoc that is the shell script itself
_RUN_FLAGS_RE = re.compile(r"\s*(?:--[a-z-]+=\S+\s+)*")
_SHELL_HEREDOC_RE = re.compile(r"(?:(?:/bin/|/usr/bin/)?(?:ba)?sh\s+(?:-[a-z]+\s+)*)?<<-?\s*([\"']?)[A-Za-z_][A-Za-z0-9_]*\1\s*\Z")
#: first Neuron SDK with TorchNeuron (public beta); DLC tags of earlier SDKs are the XLA stack
TORCHNEURON_SDK = (2, 33)
#: the PyTorch release a DLC tag starts with (`2.14.0-neuronx-...`): TorchNeuron is built for 2.13+
TORCHNEURON_TORCH = (2, 13)
_TAG_TORCH_RE = re.compile(r"(\d+)\.(\d+)(?:\.\d+)?-neuronx\b")


def _image_tag(image: str) -> str:
    """The tag of an image reference (``repo/name:tag``), or "" where it has none."""
    return image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""


def _torchneuron_sdk(tag: str) -> bool:
    """Whether an image tag names a Neuron SDK of TorchNeuron (``...-sdk2.33.0-...`` and later)."""
    sdk = _SDK_RE.search(tag)
    return bool(sdk) and (int(sdk.group(1)), int(sdk.group(2))) >= TORCHNEURON_SDK


def xla_era_image(image: str) -> bool:
    """Whether a container image reference is an XLA-era Neuron Deep Learning Container
    (`pytorch-training-neuronx` / `pytorch-inference-neuronx`, also the Hugging Face ones, whose tag
    names a Neuron SDK before TorchNeuron or no SDK and PyTorch release at all)."""
    if not _XLA_DLC_RE.search(image):
        return False
    tag = _image_tag(image)
    if _torchneuron_sdk(tag):
        return False
    torch = _TAG_TORCH_RE.match(tag)
    return not (torch and (int(torch.group(1)), int(torch.group(2))) >= TORCHNEURON_TORCH)


def xla_era_server_image(image: str) -> bool:
    """Whether an image is one of the Neuron SDK's model servers (codemods.project.serving) from an SDK before
    TorchNeuron (its tag names an older SDK, or none)."""
    return neuron_sdk_server(image) and not _torchneuron_sdk(_image_tag(image))


@dataclass
class Word:
    text: str
    start: int
    end: int


@dataclass
class Instruction:
    keyword: str  # upper case
    first: int  # first line (0-based)
    last: int  # last line
    args_start: int  # offset of the text after the keyword
    end: int  # offset of the end of the last line
    inner_comments: bool = False
    words: list[Word] = field(default_factory=list)
    #: lines [first, end) of the BuildKit heredoc body a shell runs (``RUN <<EOF``), if any
    body: tuple[int, int] | None = None


class DockerUnit(Lines):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines)
        self.instructions: list[Instruction] = []
        self._parse()

    def _parse(self) -> None:
        lines = self.lines
        i = 0
        directives = True
        while i < len(lines):
            line = lines[i]
            stripped = line.strip()
            if directives:
                m = _DIRECTIVE_RE.match(stripped)
                if m and m.group(1).lower() == "escape" and m.group(2) != "\\":
                    raise ShellSyntaxError("non-default escape character")
                if not m:
                    directives = False
            if not stripped or stripped.startswith("#"):
                i += 1
                continue
            first = i
            keyword = stripped.split(None, 1)[0].upper()
            inner = False
            while _CONT_RE.search(lines[i]) and i + 1 < len(lines):
                i += 1
                while i < len(lines) and (not lines[i].strip() or lines[i].lstrip().startswith("#")):
                    if lines[i].strip():
                        inner = True
                    if i + 1 >= len(lines):
                        break
                    i += 1
            start = self.line_starts[first] + (len(line) - len(line.lstrip())) + len(stripped.split(None, 1)[0])
            end = self.line_starts[i] + len(lines[i])
            self.instructions.append(Instruction(keyword, first, i, start, end, inner))
            i += 1
            if keyword in ("RUN", "COPY", "ADD"):
                text = self.src[start:end]
                script = keyword == "RUN" and _SHELL_HEREDOC_RE.match(text[_RUN_FLAGS_RE.match(text).end():]) is not None
                for strip, _, delim in _HEREDOC_RE.findall(text):
                    body_first = i
                    while i < len(lines) and (lines[i].lstrip("\t") if strip else lines[i]) != delim:
                        i += 1
                    if script and i < len(lines):
                        self.instructions[-1].body = (body_first, i)
                    script = False
                    i += 1

    def words(self, ins: Instruction) -> list[Word]:
        """Whitespace-separated words of the arguments, with Dockerfile quoting."""
        if ins.words:
            return ins.words
        src, i, end = self.src, ins.args_start, ins.end
        out: list[Word] = []
        while i < end:
            c = src[i]
            if c in " \t\n":
                i += 1
                continue
            m = re.compile(r"\\[ \t]*\n").match(src, i)
            if m and m.end() <= end + 1:
                i = m.end()
                continue
            start = i
            while i < end and src[i] not in " \t\n":
                c = src[i]
                if c == "\\":
                    i += 2
                elif c in "\"'":
                    j = i + 1
                    while j < end and src[j] != c:
                        j += 2 if (c == '"' and src[j] == "\\") else 1
                    if j >= end:
                        raise ShellSyntaxError("unterminated quote")
                    i = j + 1
                else:
                    i += 1
            out.append(Word(src[start:min(i, end)], start, min(i, end)))
        ins.words = out
        return out


@dataclass
class EnvPair:
    word: int  # index in the instruction's words
    name: str
    value: str  # raw text after "=" (legacy form: the rest of the instruction)


def env_pairs(unit: DockerUnit, ins: Instruction) -> tuple[list[EnvPair], bool] | None:
    """(pairs, legacy form) of an ENV instruction; None when it is not plain."""
    words = unit.words(ins)
    if not words or ins.inner_comments:
        return None
    m = _PAIR_RE.match(words[0].text)
    if m is None:  # legacy `ENV NAME value ...`
        if len(words) < 2:
            return None
        return [EnvPair(0, words[0].text, unit.src[words[1].start: words[-1].end])], True
    pairs = []
    for k, w in enumerate(words):
        m = _PAIR_RE.match(w.text)
        if m is None:
            return None
        pairs.append(EnvPair(k, m.group(1), w.text[m.end():]))
    return pairs, False


class DockerPlan(Plan):
    def __init__(self, unit: DockerUnit) -> None:
        super().__init__(unit.lines)
        self.unit = unit
        self.deleted: dict[tuple[int, int], str] = {}
        self.replaced: dict[tuple[int, int], tuple[str, str]] = {}
        #: character edits (start, end, text) per instruction (exec-form RUN arrays)
        self.spans: dict[int, list[tuple[int, int, str]]] = {}
        self._bodies: dict[int, ShellPlan | None] = {}

    def span(self, rule: str, group: int, start: int, end: int, text: str) -> None:
        self.spans.setdefault(group, []).append((start, end, text))
        self.dirty.add(group)

    def body(self, group: int) -> ShellPlan | None:
        """The shell plan of the heredoc script of a `RUN <<EOF` instruction (shared by the rules)."""
        if group not in self._bodies:
            ins = self.unit.instructions[group]
            plan = None
            if ins.body is not None:
                a, b = ins.body
                try:
                    plan = ShellPlan(ShellUnit(self.lines[a:b]))
                    plan.offset = a
                except (ShellSyntaxError, RecursionError, ValueError):
                    plan = None
            self._bodies[group] = plan
        return self._bodies[group]

    def bodies(self):
        for g, ins in enumerate(self.unit.instructions):
            if ins.body is not None:
                body = self.body(g)
                if body is not None:
                    yield g, body

    def flush(self, ctx) -> None:
        super().flush(ctx)
        for body in self._bodies.values():
            if body is not None:
                body.flush(ctx)

    def group_range(self, group: int) -> tuple[int, int]:
        ins = self.unit.instructions[group]
        return ins.first, ins.last

    def delete(self, rule: str, key: tuple[int, int]) -> None:
        self.deleted.setdefault(key, rule)
        self.dirty.add(key[0])

    def replace(self, rule: str, key: tuple[int, int], text: str) -> None:
        self.replaced.setdefault(key, (rule, text))
        self.dirty.add(key[0])

    def touched_groups(self):
        out, self.dirty = self.dirty, set()
        return out

    def render_group(self, group: int) -> list[str] | None:
        u = self.unit
        ins = u.instructions[group]
        words = u.words(ins)
        found = env_pairs(u, ins) if ins.keyword == "ENV" else None
        gone = {k for g, k in self.deleted if g == group}
        if found is not None and (found[1] and 0 in gone or all(p.word in gone for p in found[0])):
            return []
        edits: list[tuple[int, int, str]] = []
        for (g, k), (_, text) in self.replaced.items():
            if g == group and k not in gone:
                edits.append((words[k].start, words[k].end, text))
        edits += self.spans.get(group, [])
        run: list[int] = []
        for k in sorted(gone) + [None]:  # type: ignore[list-item]
            if run and (k is None or k != run[-1] + 1):
                edits.append((*deletion_span(u.src, words[run[0]].start, words[run[-1]].end), ""))
                run = []
            if k is not None:
                run.append(k)
        if not edits:
            return None
        return render(u.src, u.line_starts[ins.first], ins.end, _merge(edits), [])


def _docker_plan(lines: list[str]) -> DockerPlan:
    return DockerPlan(DockerUnit(lines))


def docker_plan(ctx) -> DockerPlan | None:
    plan = plan_for(ctx, _docker_plan)
    return plan if isinstance(plan, DockerPlan) else None


class DockerRule(TextRule):
    kinds = ("dockerfile",)

    def apply(self, ctx) -> None:
        plan = docker_plan(ctx)
        if plan is None:
            return
        self.contribute(plan, ctx)
        plan.flush(ctx)

    def contribute(self, plan: DockerPlan, ctx) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


def _env_instructions(plan: DockerPlan, rule: str):
    u = plan.unit
    for g, ins in enumerate(u.instructions):
        if ins.keyword != "ENV":
            continue
        try:
            found = env_pairs(u, ins)
        except ShellSyntaxError:
            continue
        if found is None:
            continue
        yield g, ins, found[0], found[1], not plan.silenced(rule, g)


class XlaDlcBaseImage(DockerRule):
    id = "NM520"
    title = "XLA-era Neuron Deep Learning Container base image"
    fix = "manual"
    triggers = ("-neuronx",)
    why = """
        The `pytorch-training-neuronx` / `pytorch-inference-neuronx` Deep Learning Containers of
        Neuron SDKs before TorchNeuron ship torch-xla and torch-neuronx's XLA backend, and
        optimum-neuron in their Hugging Face variants. Migrated code needs TorchNeuron (the native
        `neuron` device), so the base image has to change: the `FROM` line (or the `ARG` that
        names the image) is flagged.
    """
    before = """
        FROM 763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training-neuronx:2.1.2-neuronx-py310-sdk2.20.0-ubuntu20.04
    """
    after = """
        # TODO(neuron-migrate NM520): Switch to a TorchNeuron image (Neuron SDK 2.33+), or install torch-neuronx 2.13+ on a plain base.
        FROM 763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training-neuronx:2.1.2-neuronx-py310-sdk2.20.0-ubuntu20.04
    """
    caveats = """
        Images whose tag names Neuron SDK 2.33 or later (`...-sdk2.33.0-ubuntu26.04`), or starts
        with PyTorch 2.13 or later (`2.14.0-neuronx-...`), are taken for TorchNeuron images and are
        not flagged: AWS tags DLC images with the Neuron SDK release, torch-neuronx for PyTorch
        2.13/2.14 is TorchNeuron from Neuron 2.33.0 on (the 2.33 DLC list has a "PyTorch Training
        (TorchNeuron)" image with torch-neuronx 2.14), the XLA-based torch-neuronx last shipped in
        Neuron 2.31, and the 2.32 images ship no torch-neuronx at all (so they are flagged too).
        A tag without either (`latest`, a digest) is flagged. An image named through a build
        argument is flagged where the argument's default names it.
    """

    message = "Switch to a TorchNeuron image (Neuron SDK 2.33+), or install torch-neuronx 2.13+ on a plain base."
    markers = ((message, """This is an XLA-era Neuron Deep Learning Container: it ships torch-xla and torch-neuronx's
        XLA backend (and optimum-neuron in the Hugging Face variants), which the migrated code does not use;
        it needs TorchNeuron, the native `neuron` device of torch-neuronx 2.13+ (Neuron SDK 2.33+)."""),
               (SERVING_MARKER, """The image builds or starts one of the Neuron SDK's model servers (vLLM on NxD
        Inference, DJL LMI, TGI's Neuron backend), which needs its own XLA-era torch-neuronx, compiler flags and
        cache settings: the migration leaves its installs and environment as they are (codemods.project.serving),
        and moving the server is one step, to a TorchNeuron serving image. The marker goes on the first FROM
        (an ARG naming the image before it is left alone), unless that image is a server of a TorchNeuron SDK."""),)

    def contribute(self, plan: DockerPlan, ctx) -> None:
        u = plan.unit
        serving = neuron_sdk_server(u.src)
        for g, ins in enumerate(u.instructions):
            if ins.keyword not in ("FROM", "ARG"):
                continue
            try:
                words = u.words(ins)
            except ShellSyntaxError:
                continue
            if serving and ins.keyword == "ARG":
                continue
            if serving and ins.keyword == "FROM":
                # the server is built in this image (on a plain base too): one marker on its first FROM, unless the
                # base is a server image of TorchNeuron's SDK already
                if not any(neuron_sdk_server(w.text) and not xla_era_server_image(w.text) for w in words):
                    plan.marker(ctx, g, SERVING_MARKER)
                return
            for w in words:
                image = w.text.split("=", 1)[1] if ins.keyword == "ARG" and "=" in w.text else w.text
                if not xla_era_image(image):
                    continue
                plan.marker(ctx, g, self.message)
                break


#: the lowest Python the migrated stack installs on (Requires-Python of transformers 5.23, diffusers 0.42, trl 1.x;
#: tests/test_project_context.py checks it against the installed metadata)
TARGET_PYTHON = (3, 11)
#: the Python a base image ships: (image name, tag pattern) -> version
_IMAGE_PYTHON = (
    (("ubuntu",), re.compile(r"(?:18\.04|bionic)(?![\d.])"), (3, 6)),
    (("ubuntu",), re.compile(r"(?:20\.04|focal)(?![\d.])"), (3, 8)),
    (("ubuntu",), re.compile(r"(?:22\.04|jammy)(?![\d.])"), (3, 10)),
    (("debian",), re.compile(r"buster(?!\w)"), (3, 7)),
    (("debian",), re.compile(r"bullseye(?!\w)"), (3, 9)),
    (("amazonlinux",), re.compile(r"2(?![\d.])"), (3, 7)),
    (("amazonlinux",), re.compile(r"2023(?![\d.])"), (3, 9)),
)
_PYTHON_TAG = re.compile(r"(\d)\.(\d+)")
#: a Dockerfile that installs its own Python (the base image's is then not the one that runs)
_OWN_PYTHON = re.compile(r"python3\.1[1-9]|conda|mamba|pyenv|uv python install|deadsnakes")
#: a Dockerfile that installs the migrated stack
_INSTALLS_TARGET = re.compile(r"pip3?\s+install(?:[^\n]|\\\n)*?(?:transformers|diffusers|trl|optimum|torch-neuronx|accelerate|peft)")


def image_python(image: str) -> tuple[int, int] | None:
    """The Python version a base image (``ubuntu:20.04``, ``python:3.9-slim``, a registry path) ships, if known."""
    name, _, tag = image.rsplit("/", 1)[-1].partition(":")
    if name == "python":
        m = _PYTHON_TAG.match(tag)
        return (int(m.group(1)), int(m.group(2))) if m else None
    for names, pattern, version in _IMAGE_PYTHON:
        if name in names and pattern.match(tag):
            return version
    return None


#: `python3.9 -m venv`, `virtualenv -p python3.8`, `conda create ... python=3.10`, `uv venv --python 3.9`: the Python
#: version an environment is made with
_VENV_PYTHON = re.compile(r"^(?:\S*/)?python(3)\.(\d+)$")
_VERSION = re.compile(r"^(3)\.(\d+)(?:\.[\d*]+)*$")
VENV_PYTHON_MARKER = "Make this environment with Python 3.11+ (transformers 5.23 needs it): it uses Python {version}."


def environment_python(values: list[str | None]) -> tuple[int, int] | None:
    """The Python version an environment-making command names (`python3.9 -m venv e`, `virtualenv -p python3.8 e`,
    `conda create -n e python=3.10`, `conda install python=3.8.10`, `uv venv --python 3.9`), or None."""
    words = [v for v in values if v is not None]
    if not words:
        return None
    name = words[0].rsplit("/", 1)[-1]
    m = _VENV_PYTHON.match(words[0])
    if m and words[1:3] in (["-m", "venv"], ["-m", "virtualenv"]):
        return int(m.group(1)), int(m.group(2))
    if not (name == "virtualenv" or (name == "uv" and words[1:2] == ["venv"])
            or (name in ("conda", "mamba", "micromamba") and words[1:2] in (["create"], ["install"]))):
        return None
    for k, w in enumerate(words[1:], 1):
        key, eq, value = w.partition("=")
        if not eq and w in ("-p", "--python") and k + 1 < len(words):
            value = words[k + 1]
        value = value.lstrip("=")  # (`python==3.8`)
        if key in ("python", "-p", "--python") and (m := _VENV_PYTHON.match(value) or _VERSION.match(value)):
            return int(m.group(1)), int(m.group(2))
    return None


OLD_PYTHON_MARKER = "Use a base image with Python 3.11+ (transformers 5.23 needs it): {image} has Python {version}."


class OldPythonBaseImage(DockerRule):
    id = "NM527"
    title = "Base image whose Python is older than the migrated stack needs (3.11 for transformers 5.23)"
    fix = "manual"
    triggers = ("ubuntu:", "debian:", "python:", "amazonlinux:")
    why = """
        transformers 5.23 and diffusers 0.42 require Python 3.11 or later (torch 2.13: 3.10): on
        Ubuntu 20.04 (Python 3.8) or 22.04 (3.10), Debian bullseye (3.9) or a `python:3.9` image,
        `pip install "transformers>=5.23"` finds no matching distribution, so the migrated
        requirements cannot be installed there. A `FROM` of such an image, in a Dockerfile that
        installs the Hugging Face libraries or the Neuron stack, is flagged.
    """
    before = """
        FROM ubuntu:20.04
        RUN apt-get update && apt-get install -y python3-pip
        RUN pip3 install "transformers>=5.23"
    """
    after = """
        # TODO(neuron-migrate NM527): Use a base image with Python 3.11+ (transformers 5.23 needs it): ubuntu:20.04 has Python 3.8.
        FROM ubuntu:20.04
        RUN apt-get update && apt-get install -y python3-pip
        RUN pip3 install "transformers>=5.23"
    """
    caveats = """
        Known images: ubuntu 18.04/20.04/22.04, debian buster/bullseye, amazonlinux 2/2023 and
        `python:3.X` images. A Dockerfile that installs its own Python (python3.11+, conda, pyenv,
        uv, deadsnakes) has no `FROM` marker; a `RUN` that makes the environment with an older
        Python (`python3.10 -m venv`, `conda install python=$PYTHON_VERSION` with the ARG's default
        3.8.10) gets one. A Dockerfile that installs none of the migrated libraries is left alone.
    """
    markers = ((OLD_PYTHON_MARKER,
                """The migrated requirements (transformers 5.23, diffusers 0.42, TRL 1.x) declare Requires-Python
                >= 3.11, so pip cannot install them on this image's Python; use an image with Python 3.11+
                (Ubuntu 24.04, Debian bookworm, python:3.11+, a TorchNeuron DLC) or install a newer Python in it."""),
               (VENV_PYTHON_MARKER,
                """The image makes the environment the project installs into with an older Python (`python3.10 -m
                venv`, `conda install python=3.8`): the migrated requirements need Python 3.11+ there too."""))

    def contribute(self, plan: DockerPlan, ctx) -> None:
        if neuron_sdk_server(plan.unit.src):
            return  # a model server of the Neuron SDK keeps its environment and installs (codemods.project.serving)
        if not _INSTALLS_TARGET.search(ctx.text):
            return
        u = plan.unit
        made = self._environments(plan, ctx)
        if made or _OWN_PYTHON.search(ctx.text):
            return  # (the image's own Python is not the one that runs)
        for g, ins in enumerate(u.instructions):
            if ins.keyword != "FROM":
                continue
            try:
                words = [w.text for w in u.words(ins) if not w.text.startswith("--")]
            except ShellSyntaxError:
                continue
            if not words:
                continue
            version = image_python(words[0])
            if version is not None and version < TARGET_PYTHON:
                shown = words[0].rsplit("/", 1)[-1]
                plan.marker(ctx, g, OLD_PYTHON_MARKER.format(image=shown, version=f"{version[0]}.{version[1]}"))

    @staticmethod
    def _environments(plan: DockerPlan, ctx) -> bool:
        """Marks each RUN that makes the environment with a Python older than 3.11 (`python3.10 -m venv`, `conda
        install python=$PYTHON_VERSION` with the ARG's default); whether any RUN makes one (of whatever version)."""
        u = plan.unit
        defaults: dict[str, str] = {}
        made = False
        for g, ins in enumerate(u.instructions):
            if ins.keyword in ("ARG", "ENV"):
                for m in re.finditer(r"\b([A-Za-z_]\w*)=(\"[^\"]*\"|'[^']*'|\S+)", u.src[ins.args_start:ins.end]):
                    defaults.setdefault(m.group(1), m.group(2).strip("\"'"))
                continue
            if ins.keyword != "RUN" or ins.inner_comments:
                continue
            try:
                words = [w.text.strip("\"'") for w in u.words(ins)]
            except ShellSyntaxError:
                continue
            words = [re.sub(r"\$\{?([A-Za-z_]\w*)\}?", lambda m: defaults.get(m.group(1), m.group(0)), w) for w in words]
            commands: list[list[str]] = [[]]
            for w in words:
                if w in ("&&", "||", ";", "|"):
                    commands.append([])
                else:
                    commands[-1].append(w)
            versions = [v for c in commands if (v := environment_python(c)) is not None]
            made = made or bool(versions)
            old = [v for v in versions if v < TARGET_PYTHON]
            if old:
                plan.marker(ctx, g, VENV_PYTHON_MARKER.format(version=f"{old[0][0]}.{old[0][1]}"))
        return made


class DockerfileEnv(DockerRule):
    id = "NM521"
    markers = ENV_MARKERS
    title = "Dockerfile ENV: XLA-only and optimum-neuron variables removed"
    fix = "mixed"
    triggers = tuple(sorted(XLA_ONLY_VARS)) + XLA_ONLY_PREFIXES + tuple(MARKED_VARS)
    why = """
        The environment rules of NM512 applied to `ENV` instructions: variables read only by the
        XLA stack (`XLA_USE_BF16`, `XLA_DOWNCAST_BF16`, `NEURON_FUSE_SOFTMAX`,
        `NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS`, `PJRT_DEVICE`, ...) or by optimum-neuron are
        removed; the other variables of the same instruction are kept. An `ENV` left empty is
        removed. `NEURON_COMPILE_CACHE_URL` (TorchNeuron's NEFF cache is
        `TORCH_NEURONX_NEFF_CACHE_DIR`), `NEURON_PLATFORM_TARGET_OVERRIDE` and Transformers 4's
        `TRANSFORMERS_CACHE` (Transformers 5 ignores it: `HF_HUB_CACHE`) are kept with a marker.
    """
    before = """
        ENV XLA_USE_BF16=1 NEURON_RT_NUM_CORES=2
    """
    after = """
        ENV NEURON_RT_NUM_CORES=2
    """
    caveats = """
        `ENV` instructions with comment lines inside their continuation, and `RUN export ...`
        commands, are not edited. The script of a BuildKit heredoc run by the shell (`RUN <<EOF`,
        `RUN bash <<-'EOF'`) is: `export X=...`, `X=... cmd`, `env X=... cmd` and `unset X` of
        these variables are removed there as in shell scripts (NM512); heredocs that are files
        (`COPY <<EOF`) or another language (`RUN python3 <<EOF`) are left alone.
    """

    def contribute(self, plan: DockerPlan, ctx) -> None:
        if neuron_sdk_server(plan.unit.src):
            return  # a model server of the Neuron SDK keeps its environment and installs (codemods.project.serving)
        u = plan.unit
        for g, ins in enumerate(u.instructions):
            if ins.keyword != "ENV":
                continue
            try:
                plain = env_pairs(u, ins) is not None
            except ShellSyntaxError:
                plain = False
            if plain:
                continue
            text = u.src[ins.args_start: ins.end]
            names = sorted({m for m in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text) if xla_only_reason(m)})
            if names:
                plan.marker(ctx, g, f"Remove {', '.join(names)} from this ENV: {ignored_by_torchneuron(names)}.",
                            detail="; ".join(f"{n}: {xla_only_reason(n)}" for n in names))
        for g, ins, pairs, legacy, editable in _env_instructions(plan, self.id):
            for p in pairs:
                if p.name in MARKED_VARS:
                    plan.marker(ctx, g, MARKED_VARS[p.name])
                reason = xla_only_reason(p.name)
                if reason is None or not editable:
                    continue
                plan.delete(self.id, (g, p.word))
                w = u.words(ins)[p.word]
                ctx.finding(u.line_of(w.start), f"removed ENV {p.name}: {reason}", "applied", u.col_of(w.start) + 1)
                if p.name in BF16_VARS and switched_on(p.value):
                    mark_bf16_launch(plan, ctx, self.id, g, p.name)
        for _g, body in plan.bodies():  # `RUN <<EOF` scripts: `export X=1`, `X=1 cmd`, `env X=1 cmd`, `unset X`
            bu = body.unit
            for s in bu.simples:
                for a in assignments(bu, s):
                    reason = xla_only_reason(a.name)
                    if reason is None or not body.editable(self.id, s):
                        continue
                    body.delete(self.id, a.tok)
                    start = bu.toks[a.tok].start
                    ctx.finding(body.offset + bu.line_of(start), f"removed {a.name} from the RUN script: {reason}",
                                "applied", bu.col_of(start) + 1)


# ------------------------------------------------------------------------------------------------
# NM522 (and NM523 for shell units): pip install command lines

#: pip options followed by a value (when not written `--opt=value`)
_PIP_VALUE_OPTS = frozenset({
    "-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url", "-f", "--find-links",
    "-e", "--editable", "-t", "--target", "--prefix", "--root", "--platform", "--python-version",
    "--implementation", "--abi", "--src", "--upgrade-strategy", "--progress-bar", "--cache-dir", "--trusted-host",
    "--proxy", "--retries", "--timeout", "--exists-action", "--log", "--config-settings", "-C", "--only-binary",
    "--no-binary", "--hash", "--python", "-p", "--index", "--default-index",
})
_SHELL_META = re.compile(r"[;&|`<>()]|\$\(")
#: a requirement written without quotes only when it has no shell-special character
_PLAIN_WORD = re.compile(r"[A-Za-z0-9._\-,=]+\Z")
_NAME_START = re.compile(r"[A-Za-z0-9]")
#: words after which `pip` is a command (`sudo pip install`, `cd x && pip install`)
_PIP_BEFORE = frozenset({"&&", "||", ";", "|", "sudo", "exec", "command", "nohup", "time", "then", "do", "else"})
PIP_TRIGGERS = ("optimum-neuron", "optimum_neuron", "optimum[", "transformers-neuronx", "torch-xla", "torch_xla",
                "libneuronxla", "neuronx-distributed", "neuronx_distributed", "neuronx-cc", "neuronx_cc",
                "torch-neuronx", "torch_neuronx", "torch-neuron", "neuron-cc")


@dataclass
class PipInstall:
    key: object  # where the command is (a Dockerfile instruction index, a shell simple command)
    line: int  # first line of its statement (markers go above it)
    refs: list  # per requirement operand: what the caller edits (a word key, a token index)
    texts: list[str]  # the requirement operands as written
    lines: list[int]  # their lines
    hashed: bool
    other_operands: bool  # -r / -e / paths / URLs / variables: the command keeps something to install
    sealed: bool = False  # cannot be edited in place (comment lines inside its continuation): marked instead


def _unquote(text: str) -> tuple[str, str] | None:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'" and text[0] not in text[1:-1]:
        return text[1:-1], text[0]
    if any(c in text for c in "\"'\\"):
        return None
    return text, ""


_INSTALLER_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def pip_segments(words: list[str]) -> list[tuple[int, list[int], bool, bool]]:
    """`pip install` commands in a list of shell words: (start, requirement operand indices, hashed,
    other operands) for each, from `pip`/`pip3`, `python -m pip`, `uv pip` up to an operator."""
    out = []
    k = 0
    while k < len(words):
        w = words[k].strip("\"'")
        base = w.rsplit("/", 1)[-1]
        # `$PIP install` / `${PYTHON} -m pip install`: a variable named for the installer it holds
        var = _INSTALLER_VAR.fullmatch(w)
        if var is not None:
            base = "pip" if "PIP" in var.group(1).upper() else "python" if "PYTHON" in var.group(1).upper() else w
        start = None
        if re.fullmatch(r"pip[0-9.]*", base) and k + 1 < len(words) and words[k + 1] == "install":
            start = k + 2
        elif re.fullmatch(r"python[0-9.]*", base) and words[k + 1: k + 4] == ["-m", "pip", "install"]:
            start = k + 4
        elif base == "uv" and words[k + 1: k + 3] == ["pip", "install"]:
            start = k + 3
        prev = words[k - 1] if k else ""
        if start is None or not (k == 0 or prev in _PIP_BEFORE or prev.endswith((";", "&&", "||"))):
            k += 1
            continue
        reqs: list[int] = []
        hashed = other = False
        j = start
        while j < len(words):
            t = words[j]
            uq = _unquote(t)
            if t in ("&&", "||", ";", "|") or ((uq is None or not uq[1]) and _SHELL_META.search(t)):
                break
            if t.startswith("-"):
                name = t.split("=", 1)[0]
                if name in ("--require-hashes", "--hash"):
                    hashed = True
                if name in ("-r", "--requirement", "-e", "--editable"):
                    other = True
                if "=" not in t and name in _PIP_VALUE_OPTS:
                    j += 1
                j += 1
                continue
            if uq is None or "$" in t or "/" in uq[0] or uq[0].startswith(".") or not _NAME_START.match(uq[0]):
                other = True
                if uq is not None and deps.unparsed_old_stack(uq[0]):
                    reqs.append(j)  # an old-stack package by a variable version or a URL: marked, never edited
            else:
                reqs.append(j)
            j += 1
        out.append((k, reqs, hashed, other))
        k = j
    return out


def _quoted(req: str, quote: str) -> str:
    if not quote and _PLAIN_WORD.match(req):
        return req
    if not quote or quote in req:
        quote = "'" if '"' in req else '"'
    return f"{quote}{req}{quote}"


HASHED_INSTALL_MARKER = "This pip install checks hashes: {what}, then update them."
SEALED_INSTALL_MARKER = "Edit this pip install by hand, comment lines inside it stop the rewrite: {what}."
SEALED_INSTALL_SHORT = "Edit this pip install by hand: {what}."
OLD_ONLY_INSTALL_MARKER = "Replace this pip install of old Neuron stack packages ({names}) with {needs}."
#: the long forms of the pip-install markers (``Rule.markers`` of the rules that apply them)
PIP_INSTALL_MARKERS = (
    (HASHED_INSTALL_MARKER,
     """The command installs with --require-hashes (or hashes in its requirement file): editing the
     requirement here breaks the hash check, so it is left as it was for a person to change together
     with its hashes. The old Neuron stack is not installed with TorchNeuron."""),
    (SEALED_INSTALL_MARKER,
     """A Dockerfile instruction with comment lines inside its line continuation (a `RUN pip install`
     continued over lines, with `# ...` lines among its requirements) is not rewritten: Docker drops those lines before it
     joins the rest, and an edit that keeps them is not checked. What its pip install needs is said
     instead."""),
    (OLD_ONLY_INSTALL_MARKER,
     """Every package this pip install names belongs to the old Neuron stack (optimum-neuron, torch-xla,
     neuronx-distributed, transformers-neuronx, libneuronxla): removing them all would leave an empty
     command, so the command is marked instead; install what the migrated code needs (torch-neuronx from
     the Neuron repository, the Hugging Face libraries) or delete it."""),
)


def _uncommented_words(u: DockerUnit, ins: Instruction) -> list[str]:
    """The words of a shell-form instruction that has comment lines inside its continuation, read as Docker
    reads it (the comment lines dropped, the rest joined); [] where that is not plain shell words."""
    kept = [line for line in u.src[ins.args_start: ins.end].split("\n") if not line.lstrip().startswith("#")]
    text = re.sub(r"\\[ \t]*(?:\n|$)", " ", "\n".join(kept))
    if text.lstrip().startswith("[") or "<<" in text:
        return []
    try:
        return shlex.split(text, posix=False)
    except ValueError:
        return []


def _stable_describe(e, d) -> str:
    """What to do by hand, in words that do not depend on the rest of the unit (a marker must read the
    same on every run)."""
    if d.action == "replace":
        return f"remove {e.name}" + (f" and install {', '.join(d.implied)}" if d.implied else "")
    return d.message[:1].lower() + d.message[1:]


def apply_pip_installs(rule: str, ctx, installs: list[PipInstall], neuron_hint: bool,
                       replace: Callable, delete: Callable, silenced: Callable[[object], bool],
                       render: Callable[[object, list[str], list[str]], str] | None = None,
                       environment: Callable[[PipInstall], str] | None = None, shared: str | None = None) -> None:
    """The dependency decisions of NM501-NM504 (codemods.project.dependencies) on the requirements named by
    `pip install` commands; the commands of one environment (``environment(install)``: a Dockerfile's
    build stage, a branch of a shell ``if``; default: the whole unit) form one list. ``shared``: the
    environment whose installs every other one has too (a shell script's top level); default: none when
    environments are given (build stages stand alone)."""
    entries = []
    for inst in installs:
        group = environment(inst) if environment is not None else ""
        for n, text in enumerate(inst.texts):
            plain, quote = _unquote(text)  # type: ignore[misc]
            parsed = deps._parse_req(plain)
            if parsed is None:  # (a version from a variable, a URL: marked where it is the old stack)
                e = deps.unparsed_entry(plain, group, inst.lines[n], "pip", {"inst": inst, "n": n, "quote": quote},
                                        hashed=inst.hashed)
                if e is not None:
                    entries.append(e)
                continue
            entries.append(deps._Entry(
                parsed.name, frozenset(deps.canonicalize_name(x) for x in parsed.req.extras), group,
                inst.lines[n], "pip", [parsed.req.specifier], parsed.marker, parsed,
                data={"inst": inst, "n": n, "quote": quote}, hashed=inst.hashed, url=parsed.req.url is not None,
            ))
    if not entries:
        return
    # each environment stands alone: what one build stage installs is not in the next one's image
    with deps.project_uses(ctx.facts):
        decisions = deps._decide_all(entries, neuron_hint,
                                     base=shared if shared is not None else "" if environment is None else "\0")
        deps.floor_unpinned(entries, decisions, lambda e: id(e.data["inst"]))
    markers: dict[int, list[str]] = {}
    edits: dict[int, list[tuple]] = {}
    sealed: dict[int, list[str]] = {}  # what the commands that cannot be edited need, per command
    for i, e in enumerate(entries):
        d = decisions.get(i)
        if d is None:
            continue
        inst, n, quote = e.data["inst"], e.data["n"], e.data["quote"]
        if silenced(inst.key):
            continue
        if d.action == "marker":
            markers.setdefault(inst.line, []).append(d.marker or d.message)
            continue
        if e.hashed:
            markers.setdefault(inst.line, []).append(HASHED_INSTALL_MARKER.format(what=_stable_describe(e, d)))
            continue
        if inst.sealed:  # said in one marker per command (below)
            what = _stable_describe(e, d) if d.action == "replace" else deps._describe(e, d)
            sealed.setdefault(inst.line, []).append(what)
            continue
        new = deps.replacement_requirements(e, d)
        message = d.message if d.action == "respec" else deps._replace_message(d)
        edits.setdefault(id(inst), []).append((inst, n, new, message, d, e, quote))
    for items in edits.values():
        inst = items[0][0]
        left = len(inst.texts) - len(items) + sum(len(it[2]) for it in items)
        if left == 0 and not inst.other_operands:
            needs = [n for it in items for n in it[4].implied]
            names = ", ".join(dict.fromkeys(it[5].name for it in items))
            needs_text = ", ".join(dict.fromkeys(needs)) or "the packages the migrated code needs"
            markers.setdefault(inst.line, []).append(fitted(
                OLD_ONLY_INSTALL_MARKER.format(names=names, needs=needs_text),
                OLD_ONLY_INSTALL_MARKER.replace(" ({names})", "").format(needs=needs_text)))
            continue
        for _, n, new, message, d, e, quote in items:
            if new:
                if render is not None:
                    replace(inst.refs[n], render(inst.refs[n], new, [quote] * len(new)))
                else:
                    replace(inst.refs[n], " ".join(_quoted(r, quote) for r in new))
            else:
                delete(inst.refs[n])
            ctx.finding(inst.lines[n], message)
            if d.marker:
                markers.setdefault(inst.line, []).append(d.marker)
    for line, whats in sealed.items():
        what = "; ".join(dict.fromkeys(whats))
        markers.setdefault(line, []).append(fitted(SEALED_INSTALL_MARKER.format(what=what),
                                                   SEALED_INSTALL_SHORT.format(what=what),
                                                   SEALED_INSTALL_SHORT.format(what=whats[0])))
    for line, texts in markers.items():
        for text in dict.fromkeys(texts):
            ctx.marker(line, text)  # one marker per message: each reads the same on every run


class DockerPipInstall(DockerRule):
    id = "NM522"
    markers = PIP_INSTALL_MARKERS + deps.long_forms(deps.UNPARSED_MARKER, deps.TORCHNEURON_MARKER, deps.TORCH_MARKER, deps.VLLM_MARKER,
                                                   deps.VLLM_TORCHNEURON_MARKER)
    title = "Dockerfile RUN pip install: old Neuron stack packages replaced"
    fix = "mixed"
    triggers = PIP_TRIGGERS
    project_triggers = deps.TARGET_PINS
    project_probes = deps.USES_PROBES
    why = """
        The dependency decisions of NM501-NM504 applied to the requirements named on
        `RUN pip install` (`pip3`, `python -m pip`, `uv pip`) command lines of a Dockerfile
        (shell form, exec form and `RUN <<EOF` heredoc scripts):
        `optimum-neuron` (and `optimum[neuronx]`, `transformers-neuronx`) is replaced by the
        libraries the migrated code imports at the versions it needs, `torch-xla`, `libneuronxla`
        and `neuronx-distributed(-training)` go (TorchNeuron, `torch-neuronx`, takes their place),
        XLA-era `torch-neuronx` and `neuronx-cc` pins are dropped, and `transformers` & co. pinned
        too low are raised, with the pins beside them that those libraries' releases reject
        (`regex==2023.12.25` next to `transformers>=5.23`). All the `pip install` commands of the Dockerfile count as one list (a
        library installed by another `RUN` is not added again). Options (`--extra-index-url`,
        `-U`...), other packages and line continuations are kept; specs with shell-special
        characters are written quoted.
    """
    before = """
        RUN pip install --extra-index-url https://pip.repos.neuron.amazonaws.com optimum-neuron[training]==0.4.5 torch-xla==2.1.*
    """
    after = """
        # TODO(neuron-migrate NM522): Pin the torch-neuronx 2.13+ (TorchNeuron) release of your Neuron SDK, from the Neuron pip repository.
        RUN pip install --extra-index-url https://pip.repos.neuron.amazonaws.com "transformers>=5.23" "accelerate>=1.15" "trl>=1.16" "peft>=0.21" torch-neuronx
    """
    caveats = """
        Requirements given through variables, files (`-r`), paths or URLs are not edited (the
        requirement files themselves are migrated by NM501; an old-stack package given by a variable
        version or a VCS/wheel URL gets a marker saying what to do with it). A `pip install` that checks hashes
        (`--require-hashes`, `--hash`) gets a marker instead of an edit, and so does one that
        would be left with nothing to install. Instructions with comment lines inside their
        continuation are not edited: one marker says what their pip install needs. Exec-form instructions (`RUN ["pip", "install", ...]`, a
        JSON array of strings) are edited element by element, and the scripts of BuildKit
        heredocs run by the shell (`RUN <<EOF`) like shell scripts; a shell string inside an
        exec form (`RUN ["sh", "-c", "pip install ..."]`) and heredocs that are files or
        another language are not. torch-xla alone counts as old Neuron stack only in an image that names Neuron
        somewhere (the Neuron repository, a `-neuronx` image or package).
    """

    def contribute(self, plan: DockerPlan, ctx) -> None:
        if neuron_sdk_server(plan.unit.src):
            return  # a model server of the Neuron SDK keeps its environment and installs (codemods.project.serving)
        u = plan.unit
        installs: list[PipInstall] = []
        exec_items: dict[tuple, list[tuple[int, int]]] = {}  # ("exec", g): element spans
        for g, ins in enumerate(u.instructions):
            if ins.keyword != "RUN":
                continue
            if ins.inner_comments:  # read without its comment lines, as Docker does; marked, not edited
                words = _uncommented_words(u, ins)
                for _k, reqs, hashed, other in pip_segments(words):
                    installs.append(PipInstall(("sealed", g), ins.first, [None] * len(reqs), [words[k] for k in reqs],
                                               [ins.first] * len(reqs), hashed, other, sealed=True))
                continue
            text = u.src[ins.args_start: ins.end]
            array = exec_form(u.src, ins)
            if array is not None:
                spans, values = array
                exec_items[("exec", g)] = spans
                shown = [v if not _SHELL_META.search(v) and " " not in v else _quoted(v, "") for v in values]
                for _k, reqs, hashed, other in pip_segments(shown):
                    installs.append(PipInstall(
                        ("exec", g), ins.first, [("exec", g, k) for k in reqs], [shown[k] for k in reqs],
                        [u.line_of(spans[k][0]) for k in reqs], hashed, other))
                continue
            if text.lstrip().startswith("[") or "<<" in text:
                continue
            try:
                words = u.words(ins)
            except ShellSyntaxError:
                continue
            for _k, reqs, hashed, other in pip_segments([w.text for w in words]):
                installs.append(PipInstall(
                    ("word", g), ins.first, [("word", g, k) for k in reqs], [words[k].text for k in reqs],
                    [u.line_of(words[k].start) for k in reqs], hashed, other))
        for g, body in plan.bodies():
            bu = body.unit
            for s in bu.simples:
                if body.is_removed(s) or not s.words:
                    continue
                texts = [bu.text(i) for i in s.words]
                for _k, reqs, hashed, other in pip_segments(texts):
                    installs.append(PipInstall(
                        ("body", g, id(s)), body.offset + (bu.groups[s.group][0] if s.group >= 0 else 0),
                        [("body", g, s.words[k]) for k in reqs], [texts[k] for k in reqs],
                        [body.offset + bu.line_of(bu.toks[s.words[k]].start) for k in reqs], hashed, other))
        hint = deps_host() in u.src or re.search(r"neuronx|aws-neuron", u.src) is not None
        stages, stage = [], 0  # the build stage of each instruction (a FROM starts one)
        for ins in u.instructions:
            stage += ins.keyword == "FROM"
            stages.append(stage)

        def edit(ref: tuple, items: list[str] | None) -> None:
            """Write ``items`` (requirements, unquoted) in place of the operand ``ref``; None deletes it."""
            if ref[0] == "word":
                if items is None:
                    plan.delete(self.id, ref[1:])
                else:
                    plan.replace(self.id, ref[1:], " ".join(items))
            elif ref[0] == "body":
                body = plan.body(ref[1])
                assert body is not None
                if items is None:
                    body.delete(self.id, ref[2])
                else:
                    body.replace(self.id, ref[2], " ".join(items))
            else:
                spans = exec_items[("exec", ref[1])]
                k = ref[2]
                a, b = spans[k]
                if items is not None:
                    plan.span(self.id, ref[1], a, b, items[0])
                elif k + 1 < len(spans):
                    plan.span(self.id, ref[1], a, spans[k + 1][0], "")
                else:
                    plan.span(self.id, ref[1], spans[k - 1][1], b, "")

        def silenced(key: tuple) -> bool:
            if key[0] == "body":
                body = plan.body(key[1])
                s = next((x for x in body.unit.simples if id(x) == key[2]), None) if body else None
                return s is None or not body.editable(self.id, s)
            return plan.silenced(self.id, key[1])

        apply_pip_installs(
            self.id, ctx, installs, hint,
            replace=lambda ref, text: edit(ref, [text]),
            delete=lambda ref: edit(ref, None),
            silenced=silenced,
            render=lambda ref, reqs, quotes: (
                ", ".join(json.dumps(r) for r in reqs) if ref[0] == "exec"
                else " ".join(_quoted(r, q) for r, q in zip(reqs, quotes))),
            environment=lambda inst: str(stages[inst.key[1]]),
        )


def exec_form(src: str, ins: Instruction) -> tuple[list[tuple[int, int]], list[str]] | None:
    """(element spans, values) of an exec-form `RUN ["pip", "install", ...]` (JSON array of strings)."""
    i, end = ins.args_start, ins.end
    flags = _RUN_FLAGS_RE.match(src, i)
    i = flags.end() if flags else i
    ws = re.compile(r"(?:[ \t\n]|\\[ \t]*\n)*")
    i = ws.match(src, i).end()
    if i >= end or src[i] != "[":
        return None
    i += 1
    spans: list[tuple[int, int]] = []
    values: list[str] = []
    string = re.compile(r'"(?:[^"\\\n]|\\.)*"')
    while True:
        i = ws.match(src, i).end()
        m = string.match(src, i)
        if m is None:
            if src.startswith("]", i) and not spans:
                break
            return None
        try:
            value = json.loads(m.group(0))
        except ValueError:
            return None
        spans.append((m.start(), m.end()))
        values.append(value)
        i = ws.match(src, m.end()).end()
        if src.startswith(",", i):
            i += 1
            continue
        if src.startswith("]", i):
            break
        return None
    if src[i + 1: end].strip(" \t"):
        return None
    return spans, values


def deps_host() -> str:
    return _NEURON_HOST


RULES = (XlaDlcBaseImage, OldPythonBaseImage, DockerfileEnv, DockerPipInstall)
