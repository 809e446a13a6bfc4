"""Launch facts: what a launcher of the run states about the scripts it launches.

A rule with ``launch_probes`` reads the launcher units of the files whose bytes contain one of them
(:meth:`migrator.rules.Rule.launch_facts`) and yields :class:`~migrator.model.LaunchFact` values:
(fact, value, target script). This module knows which files are launchers and what their units are
(a shell or Slurm script; a Dockerfile; a notebook's ``!`` lines, ``%%bash`` cells and ``%env``
settings), and where a target is among the files of the run; it knows nothing of any fact.

A target resolves, in this order, to the file it names relative to the launcher's directory, then
relative to each directory above it (a script launched from the repository root: ``scripts/run.sh``
running ``python train.py``), then to the one file of the run whose path ends with the target's
components (for an absolute path, the longest ending that some file has: a Dockerfile's
``CMD ["python", "/app/serve.py"]`` names the ``serve.py`` of the build context). A target that resolves to no file,
or to several by the last rule, gives its fact to no file: a fact is never guessed.
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Iterable, Sequence

from migrator.model import LaunchFact, fact_entry

if TYPE_CHECKING:  # pragma: no cover
    from migrator.discover import Candidate
    from migrator.rules import Rule

#: the kinds of the files that can launch scripts
LAUNCHER_KINDS = frozenset({"shell", "dockerfile", "notebook"})

_ENV_MAGIC = re.compile(r"\s*%env\s+([A-Za-z_][A-Za-z0-9_]*)(?:\s*=\s*|\s+)(\S.*?)\s*$")
_SHELL_CELL = re.compile(r"\s*%%(?:bash|sh|script\s+(?:ba)?sh)\b")


def launcher_units(kind: str, text: str) -> list[tuple[str, str]]:
    """The (unit kind, text) pairs of a launcher file that :meth:`Rule.launch_facts` reads."""
    if kind in ("shell", "dockerfile"):
        return [(kind, text)]
    if kind != "notebook":
        return []
    try:
        cells = json.loads(text).get("cells", [])
    except (ValueError, AttributeError):
        return []
    units: list[tuple[str, str]] = []
    kernel: list[str] = []  # the `%env` settings so far, as `export` lines (the kernel's environment)
    for cell in cells if isinstance(cells, list) else ():
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        if not isinstance(source, str):
            continue
        lines = source.splitlines()
        if lines and _SHELL_CELL.match(lines[0]):
            units.append(("notebook-shell", "\n".join([*kernel, *lines[1:]]) + "\n"))
            continue
        k = 0
        while k < len(lines):
            line = lines[k].lstrip()
            m = _ENV_MAGIC.match(lines[k])
            if m:
                kernel.append(f"export {m.group(1)}={m.group(2)}")
            elif line.startswith("!"):
                command = [line.lstrip("!")]
                while command[-1].endswith("\\") and k + 1 < len(lines):  # a continued `!` line
                    k += 1
                    command.append(lines[k])
                units.append(("notebook-shell", "\n".join([*kernel, *command]) + "\n"))
            k += 1
    if kernel:  # the notebook's own Python runs in that environment
        units.append(("shell", "\n".join(kernel) + "\n"))
    return units


def extract(rules: Sequence[Rule], kind: str, text: str) -> list[LaunchFact]:
    """The launch facts of one launcher file, from the rules that probe for them."""
    units = launcher_units(kind, text)
    out: list[LaunchFact] = []
    for rule in rules:
        for unit_kind, unit_text in units:
            if any(p in unit_text for p in rule.launch_probes):
                try:
                    out.extend(rule.launch_facts(unit_kind, unit_text))
                except Exception:  # a bug in a rule must not stop the run: that launcher states nothing
                    continue
    return out


def self_facts(facts: Iterable[LaunchFact]) -> frozenset[str]:
    """The facts a launcher states about its own code (target "")."""
    return frozenset(fact_entry(f.fact, f.value) for f in facts if not f.target)


class Targets:
    """The files of a run, indexed for resolving launch targets (built only when a launcher has facts)."""

    def __init__(self, candidates: Sequence[Candidate]) -> None:
        self.by_path: dict[str, int] = {}
        self.by_name: dict[str, list[int]] = {}
        self.parts: list[tuple[str, ...]] = []
        for i, cand in enumerate(candidates):
            path = os.path.normpath(os.path.abspath(cand.path))
            self.by_path[path] = i
            parts = tuple(p for p in path.split(os.sep) if p)
            self.parts.append(parts)
            if parts:
                self.by_name.setdefault(parts[-1], []).append(i)

    def resolve(self, launcher: int, fact: LaunchFact) -> int | None:
        """The index of the file ``fact`` targets, None when it is no file of the run or not one file."""
        if not fact.target:
            return launcher
        names = [fact.target]
        if fact.module:
            base = fact.target.replace(".", "/")
            names = [base + ".py", base + "/__main__.py"]
        home = self.parts[launcher][:-1]
        for name in names:
            if not name.startswith("/"):
                for depth in range(len(home), -1, -1):  # the launcher's directory, then those above it
                    path = os.path.normpath(os.path.join(os.sep, *home[:depth], name))
                    if path in self.by_path:
                        return self.by_path[path]
        for name in names:
            wanted = tuple(p for p in os.path.normpath(name).split("/") if p not in ("", "."))
            if not wanted or ".." in wanted:
                continue
            # an absolute path names a place in an image or on a host: its last components are the file's
            for n in range(len(wanted), 0 if name.startswith("/") else len(wanted) - 1, -1):
                found = [i for i in self.by_name.get(wanted[-1], ()) if self.parts[i][-n:] == wanted[-n:]]
                if found:
                    return found[0] if len(found) == 1 else None
        return None


def assign(candidates: Sequence[Candidate], launches: list[tuple[int, LaunchFact]]) -> dict[int, frozenset[str]]:
    """Per file index, the fact entries (``fact:NAME=VALUE``) that the run's launchers state about it."""
    if not launches:
        return {}
    targets = Targets(candidates)
    out: dict[int, set[str]] = {}
    for launcher, fact in launches:
        i = targets.resolve(launcher, fact)
        if i is not None:
            out.setdefault(i, set()).add(fact_entry(fact.fact, fact.value))
    return {i: frozenset(v) for i, v in out.items()}
