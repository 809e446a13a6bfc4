"""What a launcher puts in the environment of the scripts it launches: the launch facts
(``Rule.launch_facts``, resolved and handed out by :mod:`migrator.facts`) of rules that care about an
environment variable (NM415: the XLA-era bf16 switches).

A shell unit (a shell or Slurm script, a notebook's ``!`` line or ``%%bash`` cell) is read command by
command: ``export X=1`` (and ``export X`` of a variable assigned before) holds for every later
command until ``unset X``; ``X=1 cmd`` and ``env X=1 cmd`` for that command only; a literal ``cd dir``
moves the directory the later launches name their scripts from (after a ``cd`` to a directory that
cannot be told, no launch states anything). An ``export``/``unset`` in a branch, a loop or a
subshell leaves the value unknown (:data:`UNKNOWN`) to every later launch. A launch is what
:func:`codemods.project.launch_flags.find_launch` recognises (``torchrun``, ``python``, ``python -m``,
``accelerate launch``, behind ``srun``/``nohup``/... wrappers); a ``python -``/``python -c`` command
and, in a script of its own (not a notebook's child process), the exports left at its end, are the
unit's own code (target ""). In a Dockerfile, the ``ENV`` settings of the stage (and of the stage
it is built ``FROM``) hold for its ``RUN``, ``CMD`` and ``ENTRYPOINT`` commands (exec form, or shell
form), ``ENTRYPOINT [...]`` followed by ``CMD [...]`` being one command. A string that merely holds
such text (a heredoc body, ``echo``, a Python string) launches nothing.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import Iterable

from migrator.model import LaunchFact

from codemods.project.dockerfile import DockerUnit, env_pairs, exec_form
from codemods.project.launch_flags import find_launch, unit_variables
from codemods.project.shell_plans import ShellUnit, assignments, command_name, word_value
from codemods.project.shell_syntax import ShellSyntaxError

_PYTHON_RE = re.compile(r"python[0-9.]*\Z")
#: the bodies whose commands always run when the unit runs (a function's body runs where it is called)
_CERTAIN = frozenset({"top", "brace"})
#: the value of a variable that a branch, loop or subshell may have set or unset
UNKNOWN = "?"
#: prefix of the facts: ``env:XLA_USE_BF16``
ENV_FACT = "env:"


def launch_env(kind: str, text: str, names: Iterable[str]) -> list[LaunchFact]:
    """The ``env:NAME`` facts (value: the value set) of the variables ``names`` that a launcher
    unit of ``kind`` ("shell", "notebook-shell", "dockerfile") sets for what it launches."""
    wanted = frozenset(names)
    try:
        if kind == "dockerfile":
            return _docker(text, wanted)
        return _shell(text, wanted, own=kind == "shell")
    except (ShellSyntaxError, RecursionError, ValueError):
        return []


def _unquoted(raw: str | None) -> str | None:
    if raw is None:
        return None
    value = word_value(raw) if raw else ""
    return raw if value is None else value  # an expansion: kept as written (not a literal value)


def _shell(text: str, wanted: frozenset[str], own: bool, inherited: dict[str, str] | None = None) -> list[LaunchFact]:
    u = ShellUnit(text.split("\n"))
    exported: dict[str, str] = dict(inherited or {})
    assigned: dict[str, str] = {}  # shell variables not (yet) exported
    cwd: str | None = ""  # relative to the launcher's directory; None: unknown
    variables = unit_variables(u)
    out: list[LaunchFact] = []
    for s in u.simples:
        name = command_name(u, s)
        local: dict[str, str] = {}
        certain = s.pipeline.andor.body.kind in _CERTAIN
        for a in assignments(u, s):
            value = _unquoted(a.value)
            if not certain and a.form in ("export", "unset"):  # `if ...; then export X=1; fi`: maybe
                exported[a.name] = UNKNOWN
            elif a.form == "export":
                if value is None:
                    if a.name in assigned:
                        exported[a.name] = assigned[a.name]
                else:
                    exported[a.name] = value
            elif a.form == "unset":
                exported.pop(a.name, None)
                assigned.pop(a.name, None)
            elif a.form == "prefix" and not s.words and value is not None:
                assigned[a.name] = value
            elif value is not None:  # `X=1 cmd`, `env X=1 cmd`
                local[a.name] = value
        if name == "cd":
            cwd = _cd(u, s, cwd) if certain else None
            continue
        env = {**exported, **local}
        if not wanted & env.keys():
            continue
        launch = find_launch(u, s, variables)
        if launch is not None:
            script = u.value(s.words[launch.script])
            if script is None or cwd is None:  # where it is cannot be told
                continue
            module = launch.script > 0 and u.value(s.words[launch.script - 1]) == "-m"
            target = script if module else posixpath.normpath(posixpath.join(cwd, script))
            out.extend(LaunchFact(ENV_FACT + n, env[n], target, module) for n in sorted(wanted & env.keys()))
        elif _runs_own_python(u, s):
            out.extend(LaunchFact(ENV_FACT + n, env[n]) for n in sorted(wanted & env.keys()))
    if own:
        out.extend(LaunchFact(ENV_FACT + n, exported[n]) for n in sorted(wanted & exported.keys()))
    return out


def _cd(u: ShellUnit, s, cwd: str | None) -> str | None:
    """The directory after ``cd``: literal paths are followed, ``cd "$(dirname "$0")"`` is the script's."""
    if len(s.words) != 2:
        return None
    raw = u.text(s.words[1])
    value = u.value(s.words[1])
    if value is None:
        return "" if "dirname" in raw and ("$0" in raw or "BASH_SOURCE" in raw) else None
    if value.startswith("/"):
        return value
    return None if cwd is None else posixpath.normpath(posixpath.join(cwd, value))


def _runs_own_python(u: ShellUnit, s) -> bool:
    """``python - <<EOF`` / ``python -c '...'``: Python that is part of the unit itself."""
    vals = [u.value(i) for i in s.words]
    if not vals or not vals[0] or not _PYTHON_RE.match(vals[0].rsplit("/", 1)[-1]):
        return False
    return s.heredoc or "-c" in vals[1:] or "-" in vals[1:]


def _docker(text: str, wanted: frozenset[str]) -> list[LaunchFact]:
    u = DockerUnit(text.split("\n"))
    stages: dict[str, dict[str, str]] = {}
    env: dict[str, str] = {}
    alias = ""
    entry: list[str] | None = None
    out: list[LaunchFact] = []
    for ins in u.instructions:
        if ins.keyword == "FROM":
            if alias:
                stages[alias] = env
            words = [w.text for w in u.words(ins) if not w.text.startswith("--")]
            env = dict(stages.get(words[0].lower(), {})) if words else {}
            alias = words[2].lower() if len(words) >= 3 and words[1].upper() == "AS" else ""
            entry = None
        elif ins.keyword == "ENV":
            found = env_pairs(u, ins)
            for p in found[0] if found else ():
                value = _unquoted(p.value)
                if value is not None:
                    env[p.name] = value
        elif ins.keyword in ("RUN", "CMD", "ENTRYPOINT"):
            array = exec_form(u.src, ins)
            if array is not None:
                words = list(array[1])
                if ins.keyword == "ENTRYPOINT":
                    entry = words
                elif ins.keyword == "CMD" and entry:
                    words = entry + words
                command = shlex.join(words)
            else:
                command = u.src[ins.args_start:ins.end]
                if ins.keyword == "ENTRYPOINT":
                    entry = None
            if wanted & env.keys():
                out.extend(_shell(command, wanted, own=False, inherited=env))
    return out
