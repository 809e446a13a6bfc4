"""``verify SCRIPT --before "STEP [ARGS...]"``: the earlier steps of a multi-step project.

A project is often several scripts: ``trace_classifier.py`` traces a model and saves an artifact,
``serve.py`` loads it. The artifact is made by the first step, differs between the original and the
migration (a ``torch.jit.save``d trace vs a ``save_pretrained`` folder) and is in neither side's scratch
working directory. Each ``--before`` step (repeatable, run in order, the string shlex-split into the
step's script and its arguments) runs on each side before the verified script, in that side's scratch
working directory, under that side's device mode, emulation, interpreter and process count, so that
what it writes is there for the verified script of the same side.

A step's script is a file of the migrated project (its path is relative to the directory verify was
started from, like the verified script's, and lies in the verified script's folder or below); the
original's counterpart is the file at the same place in the original's folder (``--against PATH``:
beside PATH; ``--against REV``: at REV). A step's observations are not compared (it runs with the device
layer only); the report lists the steps that ran, on which side, with their wall time. A step that fails
stops verify (exit 2) with a message naming the step and the side. Notebooks are refused as steps.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from migrator.verify.runner import run_child


class BeforeError(Exception):
    """A ``--before`` step that cannot be used or that failed (exit 2)."""


@dataclass
class Step:
    spec: str                     # as given on the command line
    rel: str                      # the step's script, relative to the project folder (posix)
    args: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.rel


def parse(specs: list[str], main_script: Path, user_cwd: Path) -> list[Step]:
    """The steps of ``--before`` (in order); raises BeforeError for a step that cannot run."""
    project = main_script.resolve().parent
    steps = []
    for spec in specs:
        try:
            words = shlex.split(spec)
        except ValueError as exc:
            raise BeforeError(f"--before {spec!r}: {exc}") from None
        if not words:
            raise BeforeError("--before needs a script: --before \"SCRIPT [ARGS...]\"")
        path = Path(words[0])
        path = path if path.is_absolute() else user_cwd / path
        if words[0].endswith(".ipynb"):
            raise BeforeError(f"--before {words[0]}: a notebook cannot be a before-step (give a script; "
                              "`jupyter nbconvert --to script` makes one)")
        if not path.is_file():
            raise BeforeError(f"--before {words[0]}: script not found")
        try:
            rel = path.resolve().relative_to(project).as_posix()
        except ValueError:
            raise BeforeError(f"--before {words[0]}: not in {project}, the folder of {main_script.name} "
                              "(a before-step is a script of the same project: its original is the file at "
                              "the same place in the original's folder)") from None
        steps.append(Step(spec, rel, words[1:]))
    return steps


def check_counterparts(steps: list[Step], project_copy: Path, where: str) -> None:
    """Every step has its file in the original side's copy (``project_copy``); ``where`` names the
    original's folder for the message."""
    for step in steps:
        if not (project_copy / step.rel).is_file():
            raise BeforeError(f"--before {step.rel}: the original has no {step.rel} ({where})")


def cache_entries(steps: list[Step], project_copy: Path) -> list[list]:
    """What the original's cache key takes from the steps: each script's path, arguments and content."""
    import hashlib

    entries = []
    for step in steps:
        try:
            digest = hashlib.sha256((project_copy / step.rel).read_bytes()).hexdigest()
        except OSError:
            digest = "missing"
        entries.append([step.rel, list(step.args), digest])
    return entries


def run_steps(steps: list[Step], project_copy: Path, *, side: str, side_label: str, device: str, nproc: int,
              timeout: float, cwd: Path | None, python: str | None, stdout, stderr, report: dict) -> None:
    """Run the steps in order on one side (its project copy and working directory); each one ran is
    added to ``report["before_steps"]``; raises BeforeError when one fails."""
    for step in steps:
        label = f"before-step {step.name} failed on the {side_label} side"
        result = run_child(project_copy / step.rel, step.args, device, nproc=nproc, timeout=timeout,
                           stdout=stdout, stderr=stderr, instrument=False, label=label, side=side, cwd=cwd,
                           python=python)
        wall = result.data.get("wall_time_s")
        report.setdefault("before_steps", []).append(
            {"step": step.rel, "args": list(step.args), "side": side_label, "device": device,
             "wall_time_s": wall if wall is not None else round(result.elapsed_s, 3), "ok": result.ok})
        if not result.ok:
            raise BeforeError(result.reason)


def render(report: dict) -> list[str]:
    """The report's lines about the steps: one per step, each side's wall time."""
    lines: list[str] = []
    by_step: dict[tuple, list[dict]] = {}
    for entry in report.get("before_steps") or []:
        by_step.setdefault((entry["step"], tuple(entry.get("args") or ())), []).append(entry)
    for (step, args), entries in by_step.items():
        runs = ", ".join(f"{e['side']} ({e['device']}) {e['wall_time_s']:.2f} s" + ("" if e.get("ok") else " FAILED")
                         for e in entries)
        lines.append(f"before-step {shlex.join([step, *args])}: ran on {runs} (not compared)")
    if report.get("before_steps_cached"):
        lines.append("before-steps of the original: not run (its observations came from the cache)")
    return lines
