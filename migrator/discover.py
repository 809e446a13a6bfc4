"""Find the files a run should look at.

``discover(paths)`` walks the given paths and returns one :class:`Candidate` per file
the tool handles (CONTRACT.md, "Files it handles"), plus an error :class:`FileResult`
for every given path that does not exist.

What is skipped while walking a directory:

* directories that are never project code: ``.git``, virtual environments (any
  directory holding ``pyvenv.cfg``, and ``.venv``/``venv``), ``node_modules``, caches,
  ``build``/``dist``, ``site-packages``, ``*.egg-info``, ``.ipynb_checkpoints``...;
* whatever the ``.gitignore`` files say -- those found in the walked tree and, when
  the walked root lies inside a git repository, those of its parent directories up to
  the repository root, plus ``.git/info/exclude``;
* ``--exclude`` globs;
* in a checkout of an old-stack package itself (optimum-neuron, neuronx-distributed, torch-xla...), its
  source and test directories (``optimum/``, ``src/``, ``tests/``...) and its developer guides
  (``AGENTS.md``, ``CLAUDE.md``, ``CONTRIBUTING.md``): the old stack's own code and instructions for
  developing it; reported as left out;
* symlinked directories (never followed) and symlinked files whose target lies
  outside the walked root.

A file named explicitly is taken whenever it has a kind, even if it is gitignored or
lies in a skipped directory; ``--exclude`` globs still apply to it (so that a
``pre-commit`` hook passing file names honours the project's configured excludes).

Only names are looked at, never contents -- except for extension-less files, whose
first 128 bytes are read to spot a ``sh``/``bash`` shebang, and a ``pyproject.toml`` / ``setup.py``,
whose project name says whether the directory is a checkout of an old-stack package.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Sequence

import pathspec

from .model import OLD_STACK_ROOTS, FileResult

__all__ = ["Candidate", "file_kind", "kind_of_name", "discover", "SKIP_DIRS"]


@dataclass(frozen=True)
class Candidate:
    """One file to process."""

    path: Path  # absolute path (for a symlinked file: its resolved target)
    display: str  # as shown to the user: relative to the cwd when below it, else as given; posix
    kind: str  # one of model.KINDS


#: Directory names never descended into (besides ``*.egg-info`` and any dir holding ``pyvenv.cfg``).
SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        "build",
        "dist",
        "site-packages",
        ".ipynb_checkpoints",
    }
)

_SUFFIX_KINDS = {
    ".py": "python",
    ".ipynb": "notebook",
    ".sh": "shell",
    ".bash": "shell",
    ".slurm": "shell",
    ".sbatch": "shell",
    ".md": "markdown",
    ".mdx": "markdown",
}
_SHELLS = frozenset({b"sh", b"bash", b"dash"})
_SHEBANG_BYTES = 128


# --------------------------------------------------------------------------- kinds


#: `requirements.txt`, `requirements-dev.txt`, `inference_requirements.txt`, `dev.requirements.txt`,
#: `constraints-trn1.txt`: the word as a whole part of the name
_REQUIREMENTS_NAME = re.compile(r"(?:.*[-_.])?(?:requirements|constraints)(?:[-_.].*)?\.txt")


def _kind_by_name(name: str, parent: str) -> str | None:
    """The kind a file name implies, without touching the file system."""
    dot = name.rfind(".")
    suffix = name[dot:].lower() if dot > 0 else ""
    kind = _SUFFIX_KINDS.get(suffix)
    if kind is not None:
        return kind
    if suffix == ".txt":
        lower = name.lower()
        if _REQUIREMENTS_NAME.fullmatch(lower) or parent == "requirements":
            return "requirements"
        return None
    if name == "setup.cfg":
        return "requirements"
    if name == "pyproject.toml":
        return "pyproject"
    if name in ("Dockerfile", "dockerfile", "Containerfile"):
        return "dockerfile"
    if name.startswith(("Dockerfile.", "dockerfile.", "Containerfile.")) or suffix == ".dockerfile":
        # ``Dockerfile.dockerignore`` is BuildKit's per-Dockerfile ignore file, not a Dockerfile.
        return None if name.endswith(".dockerignore") else "dockerfile"
    return None


def _has_suffix(name: str) -> bool:
    """True unless ``name`` is a plain extension-less name such as ``train`` or ``launch``.

    Dotfiles (``.gitignore``, ``.envrc``...) count as having one: they are configuration,
    not scripts, and are never opened to look for a shebang.
    """
    return "." in name


def _shebang_is_shell(head: bytes) -> bool:
    if not head.startswith(b"#!"):
        return False
    line = head[2:].split(b"\n", 1)[0].strip()
    words = line.split()
    if not words:
        return False
    interp = words[0].rsplit(b"/", 1)[-1]
    if interp == b"env":
        rest = words[1:]
        i = 0
        while i < len(rest) and (rest[i].startswith(b"-") or b"=" in rest[i]):
            i += 1
        if i >= len(rest):
            return False
        interp = rest[i].rsplit(b"/", 1)[-1]
    return interp in _SHELLS


def _shebang_kind(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SHEBANG_BYTES)
    except OSError:
        return None
    return "shell" if _shebang_is_shell(head) else None


def kind_of_name(path: str) -> str | None:
    """The kind a path names, from its name alone (never touches the file system, so an
    extension-less script has none): for files a program writes, e.g. a notebook's
    ``%%writefile path`` cell."""
    pure = PurePosixPath(path.replace("\\", "/"))
    return _kind_by_name(pure.name, pure.parent.name)


def file_kind(path: Path) -> str | None:
    """The kind of ``path`` (CONTRACT.md), or None when the tool does not handle it.

    Decided by the name; only an extension-less file is opened (at most 128 bytes) to
    look for a ``sh``/``bash`` shebang.
    """
    path = Path(path)
    kind = _kind_by_name(path.name, path.parent.name)
    if kind is None and path.name and not _has_suffix(path.name) and path.is_file():
        kind = _shebang_kind(os.fspath(path))
    return kind


# --------------------------------------------------------------------------- ignore files


def _compile(lines: Sequence[str]) -> pathspec.PathSpec:
    try:
        return pathspec.PathSpec.from_lines("gitignore", lines)
    except (KeyError, LookupError):  # pathspec < 0.12 has no "gitignore" factory
        return pathspec.PathSpec.from_lines("gitwildmatch", lines)


def _read_ignore_file(path: str) -> pathspec.PathSpec | None:
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    lines = text.splitlines()
    if not any(ln.strip() and not ln.startswith("#") for ln in lines):
        return None
    try:
        return _compile(lines)
    except Exception:  # a malformed pattern must not stop the run
        return None


class _Rules:
    """One ignore file: ``path`` relative to it = ``prefix + path_from_root[strip:]``."""

    __slots__ = ("spec", "strip", "prefix")

    def __init__(self, spec: pathspec.PathSpec, strip: int, prefix: str):
        self.spec = spec
        self.strip = strip
        self.prefix = prefix


def _ignored(rules: tuple[_Rules, ...], rel: str, is_dir: bool) -> bool:
    """Git's verdict for root-relative ``rel``: the deepest ignore file with an opinion wins."""
    for r in reversed(rules):
        p = r.prefix + rel[r.strip :] if (r.strip or r.prefix) else rel
        if is_dir:
            p += "/"
        res = r.spec.check_file(p)
        if res.include is not None:
            return bool(res.include)
    return False


def _find_repo_root(start: str) -> str | None:
    d = start
    while True:
        if os.path.lexists(os.path.join(d, ".git")):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def _parent_rules(root: str) -> tuple[_Rules, ...]:
    """Ignore rules from above ``root`` (real path) up to its git repository root.

    Ordered shallowest first (``.git/info/exclude`` first of all: lowest precedence).
    If ``root`` itself is ignored by them -- the user named an ignored directory on
    purpose -- they are not applied to its contents at all.
    """
    repo = _find_repo_root(root)
    if repo is None:
        return ()
    # (dir relative to repo root with trailing "/", spec)
    found: list[tuple[str, pathspec.PathSpec]] = []
    git_dir = os.path.join(repo, ".git")
    if os.path.isdir(git_dir):
        spec = _read_ignore_file(os.path.join(git_dir, "info", "exclude"))
        if spec is not None:
            found.append(("", spec))
    root_rel = os.path.relpath(root, repo).replace(os.sep, "/")
    parts = [] if root_rel == "." else root_rel.split("/")
    # .gitignore files of the repo root and of every directory strictly above `root`
    for depth in range(len(parts)):
        base = "/".join(parts[:depth])
        spec = _read_ignore_file(os.path.join(repo, *parts[:depth], ".gitignore"))
        if spec is not None:
            found.append((base + "/" if base else "", spec))
    if not found:
        return ()
    # Is `root` (or a directory between it and the repo root) ignored?
    for depth in range(1, len(parts) + 1):
        d = "/".join(parts[:depth])
        for base, spec in reversed(found):
            if not d.startswith(base) or d == base.rstrip("/"):
                continue
            res = spec.check_file(d[len(base) :] + "/")
            if res.include is not None:
                if res.include:
                    return ()
                break
    root_slash = "" if not parts else root_rel + "/"
    return tuple(_Rules(spec, 0, root_slash[len(base) :]) for base, spec in found)


# --------------------------------------------------------------------------- --exclude


class _Exclude:
    """``--exclude`` globs: fnmatch on the path and on each path component, plus gitignore
    semantics (``tests/fixtures``, ``*.ipynb``, ``legacy/**``; ``./x`` anchors ``x``)."""

    def __init__(self, globs: Sequence[str]):
        full: list[re.Pattern] = []
        names: list[re.Pattern] = []
        lines: list[str] = []
        for g in globs:
            g = str(g).strip().replace("\\", "/")
            anchored = g.startswith("./")
            while g.startswith("./"):
                g = g[2:]
            bare = g.strip("/")
            if not bare:
                continue
            full.append(re.compile(fnmatch.translate(bare)))
            if "/" not in bare and not anchored:
                names.append(re.compile(fnmatch.translate(bare)))
            lines.append("/" + g if anchored else g)
        self.active = bool(lines)
        self.full = full
        self.names = names
        self.spec = _compile(lines) if lines else None

    def name(self, name: str) -> bool:
        return any(rx.match(name) for rx in self.names)

    def path(self, rel: str, is_dir: bool) -> bool:
        if any(rx.match(rel) for rx in self.full):
            return True
        assert self.spec is not None
        return self.spec.match_file(rel + "/" if is_dir else rel)


# --------------------------------------------------------------------------- discover


def _posix(p: str) -> str:
    return p.replace(os.sep, "/") if os.sep != "/" else p


def _below(path: str, base: str) -> str | None:
    """``path`` relative to ``base`` ("" when equal), or None when not below it."""
    if path == base:
        return ""
    prefix = base if base.endswith(os.sep) else base + os.sep
    if path.startswith(prefix):
        return _posix(path[len(prefix) :])
    return None


def _display_of(given: str, abs_path: str, cwd_abs: str, cwd_real: str) -> tuple[str, bool]:
    """(display, below_cwd) for a given path."""
    rel = _below(abs_path, cwd_abs)
    if rel is None:
        rel = _below(os.path.realpath(abs_path), cwd_real)
    if rel is not None:
        return rel, True
    return _posix(os.path.normpath(given)), False


def _join(a: str, b: str) -> str:
    return f"{a}/{b}" if a else b


def discover(
    paths: Sequence[str | Path],
    exclude: Sequence[str] = (),
    cwd: Path | None = None,
    skipped: list[str] | None = None,
) -> tuple[list[Candidate], list[FileResult]]:
    """Every handled file under ``paths``, sorted by display path, each once.

    Returns ``(candidates, errors)``; ``errors`` holds a ``status="error"``
    FileResult for each given path that does not exist (or cannot be listed).
    ``skipped`` (when given) receives the display paths of what is left out because it is the source,
    tests or developer guides of a checkout of an old-stack package itself (see :data:`LIBRARY_DIRS`,
    :data:`DEVELOPER_GUIDES`): directories end in ``/``.
    """
    cwd_abs = os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd())
    cwd_real = os.path.realpath(cwd_abs)
    excl = _Exclude(exclude)
    found: dict[str, tuple[bool, Candidate]] = {}  # real path -> (via symlink, candidate)
    errors: dict[str, FileResult] = {}

    def add(path: str, display: str, kind: str, via_link: bool) -> None:
        old = found.get(path)
        if old is None or (old[0] and not via_link):
            found[path] = (via_link, Candidate(Path(path), display, kind))

    for given in paths:
        given_s = os.fspath(given)
        abs_path = os.path.normpath(os.path.join(cwd_abs, given_s))
        display, below_cwd = _display_of(given_s, abs_path, cwd_abs, cwd_real)
        if display == "" and not below_cwd:
            display = "."
        if not os.path.exists(abs_path):
            name = os.path.basename(abs_path)
            if os.path.lexists(abs_path):
                msg = "broken symbolic link"
            else:
                msg = "no such file or directory"
            kind = _kind_by_name(name, os.path.basename(os.path.dirname(abs_path))) or "python"
            shown = display or "."
            errors.setdefault(shown, FileResult(path=shown, kind=kind, status="error", error=msg))
            continue
        if os.path.isdir(abs_path):
            _walk(abs_path, display, below_cwd, excl, add, errors, skipped)
        elif os.path.isfile(abs_path):
            name = os.path.basename(abs_path)
            kind = file_kind(Path(abs_path))
            if kind is None:
                continue
            if excl.active:
                match_path = display if below_cwd else name
                comps = match_path.split("/")
                if excl.path(match_path, False) or any(excl.name(c) for c in comps):
                    continue
            add(os.path.realpath(abs_path), display, kind, os.path.islink(abs_path))

    cands = sorted((c for _, c in found.values()), key=lambda c: c.display)
    return cands, sorted(errors.values(), key=lambda r: r.path)


#: the old stack's own packages (not torch.neuron nor torch_neuronx.xla_impl: parts of other packages) and the names
#: of their distributions (optimum.neuron: optimum-neuron)
_PACKAGES = tuple(r for r in OLD_STACK_ROOTS if not r.startswith(("torch.", "torch_neuronx")))
_DISTRIBUTIONS = frozenset(re.sub(r"[._]", "-", r) for r in _PACKAGES)
#: a checkout of an old-stack package itself (optimum-neuron, neuronx-distributed, torch-xla...: a project file
#: next to the package's source, ``optimum/neuron/__init__.py`` or ``src/neuronx_distributed/__init__.py``, or a
#: pyproject.toml / setup.py naming the distribution): its library source and its tests are the old stack's own
#: code, not user code to migrate (its examples and docs are migrated)
LIBRARY_DIRS = frozenset({r.split(".")[0] for r in _PACKAGES} | {"src", "tests", "test"})
#: ...and its developer guides at the checkout's root describe developing the old-stack package itself
#: (its build, its tests, its internals): migrating them would describe a package that does not exist
DEVELOPER_GUIDES = frozenset({"AGENTS.md", "CLAUDE.md", "CONTRIBUTING.md"})
_SETUP_NAME = re.compile(r"""\bname\s*=\s*["']([A-Za-z0-9_.-]+)["']""")


def _library_checkout(d: str, names: set[str]) -> bool:
    if not names & {"pyproject.toml", "setup.py"}:
        return False
    for package in _PACKAGES:
        path = package.replace(".", os.sep)
        if any(os.path.isfile(os.path.join(d, *base, path, "__init__.py")) for base in ((), ("src",))):
            return True
    return _project_name(d, names) in _DISTRIBUTIONS


def _project_name(d: str, names: set[str]) -> str | None:
    """The normalized project name of ``d``: its pyproject.toml's ``[project] name``, else the first literal
    ``name="..."`` of its setup.py; None where neither says (unreadable, not TOML, no literal name)."""
    name = None
    if "pyproject.toml" in names:
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib
        try:
            with open(os.path.join(d, "pyproject.toml"), "rb") as f:
                name = tomllib.load(f).get("project", {}).get("name")
        except (OSError, ValueError):
            pass
    if not isinstance(name, str) and "setup.py" in names:
        try:
            with open(os.path.join(d, "setup.py"), encoding="utf-8", errors="replace") as f:
                m = _SETUP_NAME.search(f.read(200_000))
        except OSError:
            m = None
        name = m.group(1) if m else None
    return re.sub(r"[-_.]+", "-", name.strip().lower()) if isinstance(name, str) else None


def _walk(abs_root: str, root_display: str, below_cwd: bool, excl: _Exclude, add, errors,
          skipped: list[str] | None = None) -> None:
    root = os.path.realpath(abs_root)
    root_prefix = root if root.endswith(os.sep) else root + os.sep
    # the display path of an entry is `disp_prefix + rel`
    disp_base = root_display if below_cwd else (root_display or ".")
    disp_prefix = disp_base + "/" if disp_base and not disp_base.endswith("/") else disp_base

    if excl.active and below_cwd and root_display:
        comps = root_display.split("/")
        if any(excl.name(c) for c in comps) or excl.path(root_display, True):
            return

    # (directory real path, root-relative posix path with trailing "/" or "", inherited rules)
    stack: list[tuple[str, str, tuple[_Rules, ...]]] = [(root, "", _parent_rules(root))]
    while stack:
        d, rel, rules = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError as e:
            if not rel:
                shown = root_display or "."
                msg = (e.strerror or str(e)).lower()
                errors.setdefault(shown, FileResult(path=shown, kind="python", status="error", error=msg))
            continue
        if rel:
            # a virtual environment (any kind: venv, conda-style copies, `env/`...)
            if any(e.name == "pyvenv.cfg" for e in entries):
                continue
        for e in entries:
            if e.name == ".gitignore":
                try:
                    is_file = e.is_file()
                except OSError:
                    is_file = False
                if is_file:
                    spec = _read_ignore_file(e.path)
                    if spec is not None:
                        rules = rules + (_Rules(spec, len(rel), ""),)
                break
        parent_name = os.path.basename(d)
        library = _library_checkout(d, {e.name for e in entries})
        for e in entries:
            name = e.name
            try:
                if e.is_dir(follow_symlinks=False):
                    if name in SKIP_DIRS or name.endswith(".egg-info"):
                        continue
                    erel = rel + name
                    if library and name in LIBRARY_DIRS:
                        if skipped is not None:
                            skipped.append(disp_prefix + erel + "/")
                        continue
                    if rules and _ignored(rules, erel, True):
                        continue
                    if excl.active and _excluded(excl, name, erel, disp_prefix, below_cwd, True):
                        continue
                    stack.append((e.path, erel + "/", rules))
                    continue
                link = e.is_symlink()
                if not link and not e.is_file(follow_symlinks=False):
                    continue  # fifo, socket, device...
            except OSError:
                continue
            kind = _kind_by_name(name, parent_name)
            if kind is None and _has_suffix(name):
                continue
            erel = rel + name
            if library and name in DEVELOPER_GUIDES:
                if skipped is not None:
                    skipped.append(disp_prefix + erel)
                continue
            if rules and _ignored(rules, erel, False):
                continue
            if excl.active and _excluded(excl, name, erel, disp_prefix, below_cwd, False):
                continue
            path = e.path
            if link:
                target = os.path.realpath(path)
                if not target.startswith(root_prefix) or not os.path.isfile(target):
                    continue  # outside the walked root, dangling, or a directory
                path = target
            if kind is None:
                kind = _shebang_kind(path)
                if kind is None:
                    continue
            add(path, disp_prefix + erel, kind, link)


def _excluded(excl: _Exclude, name: str, rel: str, disp_prefix: str, below_cwd: bool, is_dir: bool) -> bool:
    if excl.name(name):
        return True
    if excl.path(rel, is_dir):
        return True
    if below_cwd and disp_prefix:
        return excl.path(disp_prefix + rel, is_dir)
    return False
