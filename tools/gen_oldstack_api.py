"""Generate ``codemods/common/oldstack_api.json.gz``: an inventory of the old Neuron stack.

Every public module, top-level public name, optimum-cli command, environment variable and
neuronx-cc option of the old stack, each with the releases that had it.  The hand-maintained
``codemods/common/oldstack_dispositions.toml`` says, for every entry (or a pattern covering it),
which rule rewrites or marks it; ``tests/test_oldstack_inventory.py`` checks that no entry is
left without one (it reads only the committed data, no network).

Sources (nothing is ever imported; wheels are read as zip files with ``ast``):

* optimum-neuron and torch-xla: released wheels from PyPI, one release per minor line, fetched
  with ``pip download --no-deps`` into ``~/.cache/neuron-migrate-oldstack`` (``--cache``).
* transformers-neuronx, neuronx-distributed, neuronx-distributed-inference (only on the Neuron
  pip repository): their public source repositories at a few release tags, and the Neuron SDK
  documentation repository (aws-neuron-sdk) for environment variables and neuronx-cc options.
  ``--mirrors DIR`` holds bare git mirrors named ``aws-neuron+<repo>/repo`` (the layout the
  session's fetch tool writes).

How to run::

    python tools/gen_oldstack_api.py --mirrors /work/.mirror            # (re)write the data file
    python tools/gen_oldstack_api.py --mirrors /work/.mirror --check    # exit 1 on a difference

Versions of an entry are stored as compact ranges over the release list of its source
(``"0.0.14-0.4.5"``, ``"2.1.0,2.5.1-2.9.0"``).
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import re
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "codemods", "common", "oldstack_api.json.gz")
CACHE = os.path.expanduser("~/.cache/neuron-migrate-oldstack")

#: last release of each minor line (``pip index versions``, December 2026); 0.0.x: a few lines
WHEELS = {
    "optimum-neuron": ["0.0.14", "0.0.21", "0.0.25", "0.0.28", "0.1.0", "0.2.2", "0.3.0", "0.4.5"],
    "torch-xla": ["2.1.0", "2.2.0", "2.3.0", "2.4.0", "2.5.1", "2.6.1", "2.7.0", "2.8.1", "2.9.0"],
}
#: roots read from each wheel (torch-xla also ships torch_neuronx? no: only torch_xla)
WHEEL_ROOTS = {"optimum-neuron": ("optimum/neuron", "optimum/commands"), "torch-xla": ("torch_xla",)}
#: source repositories: repo -> (package dir inside the tree, tags read)
REPOS = {
    "transformers-neuronx": ("src/transformers_neuronx", ["v0.13.0", "HEAD"]),
    "neuronx-distributed": ("src/neuronx_distributed", ["v2.26.0", "v2.28.0"]),
    "neuronx-distributed-inference": ("src/neuronx_distributed_inference", ["v0.1.0", "v0.4.7422", "v0.7.14366"]),
}
DOCS_REPO = "aws-neuron-sdk"
ENV_RE = re.compile(r"(?<![A-Za-z0-9_])((?:NEURON|NEURONCORE|XLA|TPU|PJRT|PT_XLA)_[A-Z0-9_]*[A-Z0-9])(?![A-Za-z0-9_])")
FLAG_RE = re.compile(r"(?<![\w-])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?![\w-])")


def _public_module(parts: list[str]) -> bool:
    return all(not p.startswith("_") for p in parts) and "test" not in parts and "tests" not in parts


def module_names(src: str) -> set[str]:
    """Public top-level names bound by a module (``__all__`` when it is a literal list)."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return set()
    names: set[str] = set()
    explicit: set[str] | None = None

    def visit(body):
        nonlocal explicit
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            if n.id == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                                explicit = {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                            names.add(n.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    if a.name != "*":
                        names.add((a.asname or a.name).split(".")[0])
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for h in getattr(node, "handlers", []):
                    visit(h.body)
                visit(getattr(node, "finalbody", []))

    visit(tree.body)
    if explicit is not None:
        return explicit
    return {n for n in names if not n.startswith("_")}


def _lazy_names(src: str) -> set[str]:
    """Names of a transformers-style ``_import_structure`` dict (optimum.neuron's lazy __init__)."""
    out: set[str] = set()
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_import_structure" for t in node.targets):
            if isinstance(node.value, ast.Dict):
                for v in node.value.values:
                    if isinstance(v, (ast.List, ast.Tuple)):
                        out |= {e.value for e in v.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "_import_structure":
            pass
    for node in ast.walk(tree):  # _import_structure["x"].extend([...]) / = [...]
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == "_import_structure" for t in node.targets
        ) and isinstance(node.value, (ast.List, ast.Tuple)):
            out |= {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return out


def cli_commands(src: str) -> set[str]:
    """``CommandInfo(name="...")`` literals of optimum's command modules."""
    out: set[str] = set()
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "CommandInfo":
            for kw in node.keywords:
                if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                    out.add(kw.value.value)
    return out


def env_literals(src: str) -> set[str]:
    out: set[str] = set()
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and ENV_RE.fullmatch(node.value):
            out.add(node.value)
    return out


class Inventory:
    def __init__(self):
        self.entries: dict[str, dict[str, set[str]]] = {}
        self.releases: dict[str, list[str]] = {}

    def add(self, kind: str, name: str, source: str, version: str):
        self.entries.setdefault(kind, {}).setdefault(name, set()).add(f"{source}=={version}")

    def add_python_files(self, files: dict[str, str], source: str, version: str, roots: tuple[str, ...]):
        for path, src in files.items():
            if not path.endswith(".py") or not path.startswith(roots):
                continue
            parts = path[:-3].split("/")
            if parts[-1] == "__init__":
                parts = parts[:-1]
            for var in env_literals(src):
                self.add("env", var, source, version)
            if path.startswith("optimum/commands"):
                for c in cli_commands(src):
                    self.add("cli", c, source, version)
            if not _public_module(parts):
                continue
            mod = ".".join(parts)
            self.add("module", mod, source, version)
            names = module_names(src) | (_lazy_names(src) if path.endswith("__init__.py") else set())
            for n in names:
                if not n.startswith("_"):
                    self.add("name", f"{mod}.{n}", source, version)

    def to_json(self) -> dict:
        out = {"releases": self.releases, "entries": {}}
        for kind, d in sorted(self.entries.items()):
            out["entries"][kind] = {name: compact(vs, self.releases) for name, vs in sorted(d.items())}
        return out


def compact(versions: set[str], releases: dict[str, list[str]]) -> str:
    by_src: dict[str, set[str]] = {}
    for v in versions:
        s, ver = v.split("==")
        by_src.setdefault(s, set()).add(ver)
    parts = []
    for s in sorted(by_src):
        order = releases[s]
        idx = sorted(order.index(v) for v in by_src[s])
        runs, start, prev = [], idx[0], idx[0]
        for i in idx[1:] + [None]:
            if i is not None and i == prev + 1:
                prev = i
                continue
            runs.append(order[start] if start == prev else f"{order[start]}-{order[prev]}")
            if i is not None:
                start = prev = i
        parts.append(f"{s}=={','.join(runs)}")
    return ";".join(parts)


def wheel_files(path: str) -> dict[str, str]:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n).decode("utf-8", "replace") for n in z.namelist() if n.endswith(".py")}


def download(dist: str, version: str, cache: str) -> str:
    d = os.path.join(cache, dist.replace("-", "_"))
    os.makedirs(d, exist_ok=True)
    stem = f"{dist.replace('-', '_')}-{version}-"
    for f in os.listdir(d):
        if f.startswith(stem) and f.endswith(".whl"):
            return os.path.join(d, f)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", d, f"{dist}=={version}"]
    if dist == "torch-xla":  # binary only; the cp310 manylinux wheel exists for every line 2.1 ... 2.9
        cmd[5:5] = ["--only-binary", ":all:", "--platform", "manylinux_2_28_x86_64", "--python-version", "310"]
    else:
        cmd[5:5] = ["--no-binary", ":none:"]
    subprocess.run(cmd, check=True)
    return download(dist, version, cache)


def git_files(gitdir: str, rev: str, prefix: str, exts=(".py",)) -> dict[str, str]:
    names = subprocess.run(["git", "--git-dir", gitdir, "ls-tree", "-r", "--name-only", rev] + ([prefix] if prefix else []),
                           capture_output=True, text=True, check=True).stdout.split("\n")
    names = [n for n in names if n.endswith(exts)]
    inp = "".join(f"{rev}:{n}\n" for n in names)
    raw = subprocess.run(["git", "--git-dir", gitdir, "cat-file", "--batch"], input=inp.encode(),
                         capture_output=True, check=True).stdout
    out, pos = {}, 0
    for n in names:
        nl = raw.index(b"\n", pos)
        size = int(raw[pos:nl].split()[2])
        out[n] = raw[nl + 1:nl + 1 + size].decode("utf-8", "replace")
        pos = nl + 1 + size + 1
    return out


def docs_scan(inv: Inventory, gitdir: str):
    rev = subprocess.run(["git", "--git-dir", gitdir, "describe", "--tags", "--always", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or "HEAD"
    inv.releases["aws-neuron-sdk-docs"] = [rev]
    files = git_files(gitdir, "HEAD", "", (".rst", ".md", ".txt"))
    for path, text in files.items():
        if "archive/" in path or "release-notes" in path and "neuronx-cc" not in path:
            pass
        for var in ENV_RE.findall(text):
            inv.add("env", var, "aws-neuron-sdk-docs", rev)
        if "neuronx-cc" in path or "neuron-cc" in path and "neuronx" in path:
            for line in text.split("\n"):
                if "neuronx-cc" in line or line.lstrip().startswith(("--", "``--", "* ``--", "- ``--", ".. option::")) or "NEURON_CC_FLAGS" in line:
                    for flag in FLAG_RE.findall(line):
                        inv.add("ccflag", flag, "aws-neuron-sdk-docs", rev)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mirrors", default="/work/.mirror", help="directory of the fetched bare git mirrors")
    ap.add_argument("--cache", default=CACHE, help="download cache for the wheels")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with the committed file; exit 1 on a difference")
    args = ap.parse_args(argv)
    inv = Inventory()
    for dist, versions in WHEELS.items():
        inv.releases[dist] = versions
        for v in versions:
            inv.add_python_files(wheel_files(download(dist, v, args.cache)), dist, v, WHEEL_ROOTS[dist])
    for repo, (prefix, tags) in REPOS.items():
        gitdir = os.path.join(args.mirrors, f"aws-neuron+{repo}", "repo")
        inv.releases[repo] = tags
        for tag in tags:
            files = {k[len("src/"):]: v for k, v in git_files(gitdir, tag, prefix).items()}
            inv.add_python_files(files, repo, tag, (prefix[len("src/"):],))
    docs_scan(inv, os.path.join(args.mirrors, f"aws-neuron+{DOCS_REPO}", "repo"))
    data = json.dumps(inv.to_json(), indent=0, sort_keys=True).encode()
    blob = gzip.compress(data, mtime=0)
    if args.check:
        with gzip.open(args.out) as f:
            same = f.read() == data
        print("up to date" if same else "differs")
        return 0 if same else 1
    with open(args.out, "wb") as f:
        f.write(blob)
    counts = {k: len(v) for k, v in inv.entries.items()}
    print(f"wrote {args.out} ({len(blob)} bytes): {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
