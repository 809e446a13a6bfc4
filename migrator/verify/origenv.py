"""``verify --against ... --original-env auto|PATH``: the original runs with the libraries it was written for.

``auto`` builds, once, a virtual environment for the original under the user's cache directory
(``$NEURON_MIGRATE_CACHE``, else ``$XDG_CACHE_HOME/neuron-migrate``, else ``~/.cache/neuron-migrate``;
``envs/<key>``, the key a digest of the resolved requirements and of the base interpreter). The
environment sees the base site-packages (``--system-site-packages``): the current torch is reused and only
the Hugging Face libraries are installed, at

* the versions the original's project pins: requirements/constraints files, ``pyproject.toml``
  (PEP 621 and Poetry), ``setup.cfg``, ``setup.py`` (read with :mod:`ast`, never executed), and the
  ``pip install`` lines of Dockerfiles, shell scripts and notebooks, in the original's folder and the
  folders above it up to the repository's top;
* for the libraries it does not pin, the releases of the old era our upgrade data was generated from
  (``codemods/upgrade/upgrade_api.json.gz``, key ``old``): the era matching the project's own pins, else
  the last one (Transformers 4.57, TRL 0.24, huggingface_hub 0.36...).

Only the libraries of :data:`ALLOWED` are installed, by name and version, from the configured package
index: a line with a URL, a VCS reference, a local path, an index option, or a package outside that set
is refused and named in the report (``--original-env-allow-all`` installs them as written). The old
stack's own packages (optimum-neuron, torch-neuronx, torch-xla...) are emulated, torch is the current one.

pip installs (``python -m pip`` of the environment, which sees the base pip). uv is not used: it ignores
``--system-site-packages`` (astral-sh/uv#7358) and would download torch and its CUDA libraries again.

``PATH`` is a prepared environment instead: a virtual environment's folder, or an interpreter.
:func:`probe` tells which libraries an interpreter has and which old-stack packages import there for real
(those are then used, not emulated: ``side.REAL_ENV``).
"""

from __future__ import annotations

import ast
import configparser
import gzip
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

#: the libraries an ``auto`` environment installs (their own dependencies come with them)
ALLOWED = ("transformers", "trl", "huggingface-hub", "tokenizers", "accelerate", "peft", "diffusers",
           "datasets", "safetensors", "sentence-transformers", "evaluate")
#: the libraries of the old era in the upgrade data (``old`` key), in the order an era is chosen by
ERA_LIBS = ("transformers", "trl", "diffusers", "accelerate", "peft", "huggingface-hub", "datasets")
#: the old stack's packages: never installed, emulated (or used for real in a prepared environment)
OLD_STACK = frozenset({
    "optimum-neuron", "torch-neuronx", "torch-xla", "libneuronxla", "neuronx-cc", "neuronx-distributed",
    "neuronx-distributed-training", "neuronx-distributed-inference", "transformers-neuronx", "neuron-cc",
    "torch-neuron", "aws-neuronx-runtime-discovery", "neuronx-hwm", "optimum"})
#: the current ones are reused (the environment sees the base site-packages)
REUSED = frozenset({"torch", "torchvision", "torchaudio"})
#: the old-stack import roots a prepared environment may have for real
OLD_ROOTS = ("torch_xla", "libneuronxla", "optimum.neuron", "torch_neuronx", "transformers_neuronx",
             "neuronx_distributed")
#: the modules whose versions the report names, per distribution
LIBRARY_MODULES = {"transformers": "transformers", "trl": "trl", "huggingface-hub": "huggingface_hub",
                   "tokenizers": "tokenizers", "accelerate": "accelerate", "peft": "peft",
                   "diffusers": "diffusers", "datasets": "datasets", "safetensors": "safetensors",
                   "sentence-transformers": "sentence_transformers", "torch": "torch"}
MARKER = "neuron-migrate-env.json"
UPGRADE_DATA = Path(__file__).resolve().parents[2] / "codemods" / "upgrade" / "upgrade_api.json.gz"
#: the last old era, when the upgrade data is not beside this package (an installed wheel without codemods)
FALLBACK_ERAS = {"old4": {"accelerate": "1.10.1", "datasets": "4.0.0", "diffusers": "0.35.2",
                          "huggingface_hub": "0.36.2", "peft": "0.17.1", "transformers": "4.57.1",
                          "trl": "0.24.0"}}
PREPARED_HINT = ("pass a prepared environment instead: --original-env PATH (a virtual environment, or its "
                 "python, with the original's libraries installed)")


class EnvError(Exception):
    """The original's environment cannot be built or used (verify exits 2 with this text)."""


@dataclass
class Found:
    """What the project's files say: pins by library, and the lines that are not installed."""
    pins: dict = field(default_factory=dict)        # canonical name -> (specifier str, source, line)
    refused: list = field(default_factory=list)     # (line, source, reason)
    emulated: list = field(default_factory=list)    # old-stack packages named (never installed)
    sources: list = field(default_factory=list)     # the files read


@dataclass
class Plan:
    requirements: list          # what pip installs, "name==version" (sorted)
    origin: dict                # name -> where its version comes from
    era: str                    # the old era of the upgrade data used for what is not pinned
    found: Found
    notes: list = field(default_factory=list)

    def key(self, python: str) -> str:
        payload = {"requirements": self.requirements, "python": os.path.realpath(python),
                   "version": sys.version if python == sys.executable else python, "layout": 1}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


# ----------------------------------------------------------------------------- reading the project

FILE_PATTERNS = ("requirements*.txt", "requirements*.in", "constraints*.txt", "requirements/*.txt",
                 "pyproject.toml", "setup.cfg", "setup.py", "Dockerfile*", "*.dockerfile", "*.sh", "*.ipynb")
_INDEX_OPTS = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--trusted-host", "--no-index")
_PIP_FLAGS_WITH_VALUE = ("--target", "-t", "--prefix", "--root", "--python", "--cache-dir", "--timeout",
                         "--platform", "--python-version", "--implementation", "--abi", "--progress-bar",
                         "--log", "--src", "--upgrade-strategy", "--only-binary", "--no-binary", "--retries")
_PIP_LINE = re.compile(r"(?:\bpip3?|\bpython[\d.]*\s+-m\s+pip|\buv\s+pip)\s+install\s+(.*)")


def candidate_files(folder: Path) -> list[Path]:
    out: list[Path] = []
    for pattern in FILE_PATTERNS:
        out += sorted(p for p in folder.glob(pattern) if p.is_file())
    return out


def folders_to_read(script_dir: Path, levels: int = 3) -> list[Path]:
    """The original's folder and those above it, up to the repository's top (a ``.git``), at most ``levels``."""
    out = [script_dir]
    here = script_dir
    for _ in range(levels):
        if (here / ".git").exists() or here.parent == here or here == Path.home():
            break
        here = here.parent
        out.append(here)
    return out


def read_project(files: list[tuple[str, str]]) -> Found:
    """``files``: (label, text) in order of precedence (the original's folder first); the first pin of a
    library wins."""
    found = Found()
    texts = dict(files)
    for label, text in files:
        found.sources.append(label)
        name = label.rsplit("/", 1)[-1]
        try:
            if name == "pyproject.toml":
                lines = _pyproject_lines(text)
            elif name == "setup.py":
                lines = _setup_py_lines(text, label, found)
            elif name == "setup.cfg":
                lines = _setup_cfg_lines(text)
            elif name.endswith(".ipynb"):
                lines = _pip_lines(_notebook_text(text))
            elif name.endswith((".txt", ".in")):
                lines = _requirement_file_lines(text, label, texts, set())
            else:  # Dockerfile, shell script
                lines = _pip_lines(text)
        except (ValueError, SyntaxError) as exc:
            found.refused.append((label, label, f"not read: {exc}"))
            continue
        for line in lines:
            line, source = line if isinstance(line, tuple) else (line, label)
            _take(found, line, source)
    return found


def _requirement_file_lines(text: str, label: str, texts: dict, seen: set) -> list:
    """(line, file) of a requirements file, its ``-r``/``-c`` includes of the project followed."""
    seen.add(label)
    out = []
    for raw in _joined(text).splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        m = re.match(r"^(-r|--requirement|-c|--constraint)\s*=?\s*(\S+)$", line)
        if m:
            include = _sibling(label, m.group(2))
            if include in texts and include not in seen:
                out += _requirement_file_lines(texts[include], include, texts, seen)
            elif include not in texts:
                out.append((line, label))  # refused below: a file the project copy does not hold
            continue
        out.append((line, label))
    return out


def _sibling(label: str, rel: str) -> str:
    base = label.rsplit("/", 1)[0] + "/" if "/" in label else ""
    return os.path.normpath(base + rel).replace(os.sep, "/")


def _joined(text: str) -> str:
    return re.sub(r"\\\r?\n", " ", text)


def _pip_lines(text: str) -> list[str]:
    """The requirements of every ``pip install`` command in a Dockerfile, shell script or notebook cell."""
    out = []
    for m in _PIP_LINE.finditer(_joined(text)):
        command = re.split(r"&&|\|\||;|\||\n", m.group(1))[0]
        try:
            tokens = shlex.split(command, comments=True)
        except ValueError:
            tokens = command.split()
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if tok in _INDEX_OPTS or tok in ("-e", "--editable", "-r", "--requirement", "-c", "--constraint"):
                value = tokens[i + 1] if i + 1 < len(tokens) and tok != "--no-index" else ""
                out.append(f"{tok} {value}".strip())
                i += 2 if value else 1
                continue
            if tok.startswith("--") and "=" in tok:
                if tok.split("=", 1)[0] in _INDEX_OPTS:
                    out.append(tok)
            elif tok in _PIP_FLAGS_WITH_VALUE:
                i += 1
            elif not tok.startswith("-") and not tok.startswith("$"):
                out.append(tok)
            i += 1
    return out


def _notebook_text(text: str) -> str:
    """The code cells' lines, a leading ``!``/``%`` dropped (``!pip install``, ``%pip install``)."""
    lines = []
    for cell in json.loads(text).get("cells", []):
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        lines += [line.strip().lstrip("!%") for line in source.splitlines()]
    return "\n".join(lines)


def _pyproject_lines(text: str) -> list[str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    data = tomllib.loads(text)
    project = data.get("project") or {}
    out = list(project.get("dependencies") or [])
    for extra in (project.get("optional-dependencies") or {}).values():
        out += list(extra or [])
    poetry = ((data.get("tool") or {}).get("poetry") or {})
    for table in [poetry.get("dependencies") or {}] + [
            (g or {}).get("dependencies") or {} for g in (poetry.get("group") or {}).values()]:
        for name, spec in table.items():
            if name.lower() == "python":
                continue
            if isinstance(spec, dict):
                if any(k in spec for k in ("git", "path", "url")):
                    out.append(f"{name} @ {spec.get('git') or spec.get('path') or spec.get('url')}")
                    continue
                spec = spec.get("version", "*")
            out.append(name + _poetry_spec(str(spec)))
    return out


def _poetry_spec(spec: str) -> str:
    spec = spec.strip()
    if spec in ("", "*"):
        return ""
    m = re.match(r"^([\^~])\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?", spec)
    if m:
        major, minor = int(m.group(2)), int(m.group(3) or 0)
        low = spec[1:].strip()
        if m.group(1) == "~":
            return f">={low},<{major}.{minor + 1}" if m.group(3) else f">={low},<{major + 1}"
        upper = f"{major + 1}" if major else (f"0.{minor + 1}" if minor or m.group(3) else "1")
        return f">={low},<{upper}"
    return f"=={spec}" if re.match(r"^\d", spec) else spec


def _setup_cfg_lines(text: str) -> list[str]:
    parser = configparser.ConfigParser()
    parser.read_string(text)
    out = []
    if parser.has_option("options", "install_requires"):
        out += parser.get("options", "install_requires").splitlines()
    if parser.has_section("options.extras_require"):
        for _, value in parser.items("options.extras_require"):
            out += value.splitlines()
    return [ln.strip() for ln in out if ln.strip()]


def _setup_py_lines(text: str, label: str, found: Found) -> list[str]:
    """``install_requires``/``extras_require`` of the ``setup()`` call, read from the syntax tree (list and
    dict literals, module-level names bound to them); the file is never executed."""
    tree = ast.parse(text, label)
    names: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            names[node.targets[0].id] = node.value

    def strings(node, depth=0) -> list[str] | None:
        if isinstance(node, ast.Name) and node.id in names and depth < 5:
            return strings(names[node.id], depth + 1)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out = []
            for elt in node.elts:
                got = strings(elt, depth + 1)
                if got is None:
                    return None
                out += got
            return out
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = strings(node.left, depth + 1), strings(node.right, depth + 1)
            return None if left is None or right is None else left + right
        return None

    out: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg == "install_requires":
                got = strings(kw.value)
                if got is None:
                    found.refused.append((ast.unparse(kw.value)[:80], label, "install_requires is computed: "
                                          "not read (setup.py is never executed)"))
                else:
                    out += got
            elif kw.arg == "extras_require":
                value = names.get(kw.value.id) if isinstance(kw.value, ast.Name) else kw.value
                if isinstance(value, ast.Dict):
                    for v in value.values:
                        out += strings(v) or []
    return out


def _take(found: Found, line: str, source: str) -> None:
    line = line.strip()
    if not line:
        return
    if line.startswith("-"):
        opt = line.split()[0].split("=")[0]
        if opt in _INDEX_OPTS:
            found.refused.append((line, source, "package index option"))
        elif opt in ("-e", "--editable"):
            found.refused.append((line, source, "editable install (a local path or a VCS reference)"))
        elif opt in ("-r", "--requirement", "-c", "--constraint"):
            found.refused.append((line, source, "a requirements file outside the project"))
        return  # other pip options (--upgrade, --no-cache-dir...) change nothing of what is installed
    if re.match(r"^(git\+|hg\+|svn\+|bzr\+|https?:|file:|\.|/|~)", line) or "://" in line:
        found.refused.append((line, source, "a URL, VCS reference or local path"))
        return
    try:
        req = Requirement(line)
    except InvalidRequirement:
        if re.match(r"^[\w.\-\[\],]+$", line):
            found.refused.append((line, source, "not a requirement"))
        return  # a shell word of a Dockerfile line (a variable, an option value): not a package
    if req.url:
        found.refused.append((line, source, "a URL, VCS reference or local path"))
        return
    if req.marker is not None:
        try:
            if not req.marker.evaluate():
                return
        except Exception:
            pass
    name = canonicalize_name(req.name)
    if name in OLD_STACK:
        if name not in found.emulated:
            found.emulated.append(name)
        return
    if name in REUSED:
        return
    if name not in ALLOWED:
        found.refused.append((line, source, "not one of the Hugging Face libraries verify installs"))
        return
    if name not in found.pins or (not found.pins[name][0] and str(req.specifier)):
        found.pins[name] = (str(req.specifier), source, line)


# ----------------------------------------------------------------------------- resolving versions

def load_eras(path: Path = UPGRADE_DATA) -> dict[str, dict[str, str]]:
    """The old eras of the upgrade data: era -> {canonical library: version}, oldest first."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            eras = json.load(fh)["old"]
    except (OSError, ValueError, KeyError):
        eras = FALLBACK_ERAS
    out = {era: {canonicalize_name(k): v for k, v in libs.items()} for era, libs in eras.items()}
    return dict(sorted(out.items(), key=lambda kv: Version(kv[1].get("transformers", "0"))))


def _exact(spec: SpecifierSet) -> str | None:
    specs = list(spec)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


def _choose_era(pins: dict, eras: dict) -> str:
    """The era that agrees with the project's first pinned era library (transformers first)."""
    names = list(eras)
    for lib in ERA_LIBS:
        spec_text = (pins.get(lib) or ("",))[0]
        if not spec_text:
            continue
        spec = SpecifierSet(spec_text)
        ok = [e for e in names if lib in eras[e] and spec.contains(eras[e][lib], prereleases=True)]
        if ok:
            return ok[-1]
        exact = _exact(spec)
        if exact:
            try:
                later = [e for e in names if lib in eras[e] and Version(eras[e][lib]) >= Version(exact)]
            except InvalidVersion:
                later = []
            if later:
                return later[0]
        break
    return names[-1]


def resolve(found: Found, eras: dict | None = None, allow_all: bool = False) -> Plan:
    """The exact requirements of the original's environment."""
    eras = eras or load_eras()
    try:
        era = _choose_era(found.pins, eras)
    except InvalidSpecifier:
        era = list(eras)[-1]
    reqs, origin, notes = {}, {}, []
    for lib in ERA_LIBS:
        if lib in eras[era] and lib not in found.pins:
            reqs[lib] = f"{lib}=={eras[era][lib]}"
            origin[lib] = f"old-era default ({era} of the upgrade data)"
    for lib, (spec_text, source, line) in found.pins.items():
        spec = SpecifierSet(spec_text)
        exact = _exact(spec)
        candidates = sorted({Version(e[lib]) for e in eras.values() if lib in e
                             and spec.contains(e[lib], prereleases=True)})
        if exact:
            reqs[lib] = f"{lib}=={exact}"
        elif lib in eras[era] and spec.contains(eras[era][lib], prereleases=True):
            reqs[lib] = f"{lib}=={eras[era][lib]}"
        elif candidates:
            reqs[lib] = f"{lib}=={candidates[-1]}"
        else:
            reqs[lib] = f"{lib}{spec_text}"
            if spec_text:
                notes.append(f"{line} ({source}): no old-era release of the upgrade data satisfies it; pip chooses")
        origin[lib] = f"{source}: {line}"
    extra = []
    if allow_all:
        extra = sorted({line for line, _, reason in found.refused if not reason.startswith(("not read",
                        "install_requires is computed"))})
    return Plan(sorted(reqs.values()) + extra, origin, era, found, notes)


# ----------------------------------------------------------------------------- building

def cache_root() -> Path:
    base = os.environ.get("NEURON_MIGRATE_CACHE")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg or Path.home() / ".cache") / "neuron-migrate"


def env_python(env: Path) -> Path:
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def build(plan: Plan, root: Path | None = None, log=None, timeout: float = 1800.0,
          base_python: str | None = None) -> tuple[Path, dict]:
    """The environment of ``plan`` (built now unless the cache has it): (its python, its marker data)."""
    base_python = base_python or sys.executable
    root = root or cache_root()
    env = root / "envs" / plan.key(base_python)
    marker = env / MARKER
    try:
        return env_python(env), json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    env.parent.mkdir(parents=True, exist_ok=True)
    with _lock(env.parent / f"{env.name}.lock"):
        if marker.is_file():  # another verify built it while we waited
            return env_python(env), json.loads(marker.read_text(encoding="utf-8"))
        if env.exists():
            shutil.rmtree(env, ignore_errors=True)  # a build that was interrupted
        start = time.monotonic()
        _run([base_python, "-m", "venv", "--system-site-packages", "--without-pip", str(env)], timeout,
             "cannot create the original's environment", log)
        cmd = [str(env_python(env)), "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
               "--progress-bar", "off", *plan.requirements]
        try:
            _run(cmd, timeout, "cannot install the original's libraries", log, network=True)
        except EnvError:
            shutil.rmtree(env, ignore_errors=True)
            raise
        data = {"requirements": plan.requirements, "era": plan.era, "built_s": round(time.monotonic() - start, 1),
                "size_mb": round(_size(env) / 1e6, 1), "base_python": base_python,
                "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        marker.write_text(json.dumps(data, indent=1), encoding="utf-8")
        data["built_now"] = True
        return env_python(env), data


class _lock:
    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.fh = open(self.path, "w")
        try:
            import fcntl

            fcntl.flock(self.fh, fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover - Windows: no lock
            pass
        return self

    def __exit__(self, *exc):
        self.fh.close()


def _size(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:
            pass
    return total


_OFFLINE = re.compile(r"NewConnectionError|Network is unreachable|Temporary failure in name resolution|"
                      r"Name or service not known|No matching distribution found|Could not find a version|"
                      r"ConnectTimeout|Connection refused|ProxyError|ReadTimeout|offline", re.I)


def _run(cmd: list[str], timeout: float, what: str, log, network: bool = False) -> None:
    if log is not None:
        log.write(f"neuron-migrate verify: {' '.join(cmd)}\n")
        log.flush()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EnvError(f"{what}: timed out after {timeout:g} s; {PREPARED_HINT}") from None
    except OSError as exc:
        raise EnvError(f"{what}: {exc}; {PREPARED_HINT}") from None
    if proc.returncode != 0:
        tail = " | ".join(ln.strip() for ln in (proc.stderr or proc.stdout).strip().splitlines()[-3:])
        why = ("no network or no package index reachable? " if network and _OFFLINE.search(
            proc.stderr + proc.stdout) else "")
        raise EnvError(f"{what} ({why}{tail}); {PREPARED_HINT}")


# ----------------------------------------------------------------------------- a prepared environment

def prepared_python(path: str) -> str:
    """``--original-env PATH``: the python of a virtual environment's folder, or an interpreter."""
    p = Path(path).expanduser()
    if p.is_dir():
        for cand in (env_python(p), p / "bin" / "python3"):
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand.absolute())
        raise EnvError(f"--original-env {path}: a folder without bin/python (give a virtual environment, or "
                       "the python of the original's environment)")
    if p.is_file() and os.access(p, os.X_OK):
        return str(p.absolute())
    exe = shutil.which(path) if os.sep not in path else None
    if exe:
        return exe
    raise EnvError(f"--original-env {path}: no such environment or interpreter")


_PROBE = r"""
import importlib.machinery, importlib.metadata, importlib.util, json, sys
libs = {}
for dist in %(dists)r:
    try:
        libs[dist] = importlib.metadata.version(dist)
    except Exception:
        pass
real = {}
for root in %(roots)r:
    head, _, tail = root.partition(".")
    spec = importlib.machinery.PathFinder.find_spec(head)
    if spec is not None and tail:
        spec = importlib.machinery.PathFinder.find_spec(root, spec.submodule_search_locations or [])
    if spec is None:
        continue
    try:
        mod = importlib.import_module(root)
        real[root] = str(getattr(mod, "__version__", "") or "?")
    except BaseException as exc:
        real[root] = "error: %%s: %%s" %% (type(exc).__name__, str(exc).splitlines()[0][:160] if str(exc) else "")
print(json.dumps({"libraries": libs, "real": real, "python": sys.version.split()[0]}))
"""


def probe(python: str, timeout: float = 300.0) -> dict:
    """What ``python`` has: {"libraries": {dist: version}, "real": {old root: version | "error: ..."}}.
    An old-stack package is tried (imported, ``PJRT_DEVICE=CPU`` unless set) only where it is installed."""
    code = _PROBE % {"dists": list(LIBRARY_MODULES), "roots": list(OLD_ROOTS)}
    env = dict(os.environ)
    env.setdefault("PJRT_DEVICE", "CPU")
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout, env=env,
                              stdin=subprocess.DEVNULL)
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {"libraries": {}, "real": {}}


def real_roots(probed: dict) -> list[str]:
    """The old-stack packages that import for real (used instead of the emulation)."""
    return sorted(r for r, v in (probed.get("real") or {}).items() if not str(v).startswith("error:"))


def describe_refused(found: Found) -> list[str]:
    return [f"{line} ({source}): {reason}" for line, source, reason in found.refused]


# ----------------------------------------------------------------------------- gathering the files

MAX_TEXT = 2 * 1024 * 1024


def _matches(rel: str) -> bool:
    import fnmatch

    return any(fnmatch.fnmatch(rel, pattern) for pattern in FILE_PATTERNS)


PROJECT_FILES = ("requirements*.txt", "requirements*.in", "constraints*.txt", "requirements/*.txt",
                 "pyproject.toml", "setup.cfg", "setup.py")


def _is_project_file(rel: str) -> bool:
    import fnmatch

    return any(fnmatch.fnmatch(rel, pattern) for pattern in PROJECT_FILES)


def project_files(copy_dir: Path, real_dir: Path, revision: str | None = None) -> list[tuple[str, str]]:
    """(label, text) of the files that may pin the original's libraries: its folder's copy, then, while no
    requirements file, pyproject or setup file was found, the folders above the original's folder
    (``real_dir``) up to the repository's top, at ``revision`` when the original is one (``git show``);
    labelled relative to the original's folder (``../requirements.txt``). The nearest folder with such a
    file is the original's project: the folders above it (a monorepo's own tooling) are not read."""
    out: list[tuple[str, str]] = []
    for p in candidate_files(copy_dir):
        if p.stat().st_size <= MAX_TEXT:
            out.append((p.relative_to(copy_dir).as_posix(), p.read_text(encoding="utf-8", errors="replace")))
    for level, folder in enumerate(folders_to_read(real_dir)[1:], 1):
        if any(_is_project_file(label.rsplit("../", 1)[-1]) for label, _ in out):
            break
        prefix = "../" * level
        if revision is None:
            for p in candidate_files(folder):
                if p.stat().st_size <= MAX_TEXT:
                    out.append((prefix + p.relative_to(folder).as_posix(),
                                p.read_text(encoding="utf-8", errors="replace")))
            continue
        for rel, text in _files_at(folder, revision):
            out.append((prefix + rel, text))
    return out


def _files_at(folder: Path, revision: str) -> list[tuple[str, str]]:
    def git(*args):
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=60)

    try:
        listing = git("ls-tree", "-r", "--name-only", revision, "--", ".")
    except (OSError, subprocess.TimeoutExpired):
        return []
    out = []
    for rel in listing.stdout.splitlines():
        if _matches(rel) and (rel.count("/") == 0 or rel.startswith("requirements/")):
            try:
                shown = git("show", f"{revision}:./{rel}")
            except (OSError, subprocess.TimeoutExpired):
                continue
            if shown.returncode == 0 and len(shown.stdout) <= MAX_TEXT:
                out.append((rel, shown.stdout))
    return out


def removed_api(error: str) -> str | None:
    """``module.name`` when ``error`` (an ImportError/AttributeError text) names an API the upgrade data
    knows from the old releases, with the last release that had it."""
    m = re.search(r"cannot import name '(\w+)' from '([\w.]+)'", error)
    if not m:
        return None
    name, module = m.group(1), m.group(2)
    try:
        with gzip.open(UPGRADE_DATA, "rt", encoding="utf-8") as fh:
            removed = json.load(fh).get("removed_names", {})
    except (OSError, ValueError):
        return None
    entry = (removed.get(module) or {}).get(name)
    if entry is None:
        return None
    return f"{module}.{name} (last in {module.split('.')[0]} {entry.get('last')})" if entry.get("last") \
        else f"{module}.{name}"
