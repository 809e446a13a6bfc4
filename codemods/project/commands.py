"""NM517: shell commands that Python code runs (``subprocess``, ``os.system``) get the shell rules'
verdict.

A script that runs ``subprocess.run(["optimum-cli", "export", "neuron", ...])``,
``os.system("XLA_USE_BF16=1 torchrun train.py")`` or ``subprocess.check_call("neuron_parallel_compile
torchrun ...".split())`` launches the old stack as surely as a shell script does. The command is
rendered as the shell line it runs (literal words as they are, other expressions as ``{code}``) and
given to the shell rules of this family (NM510 optimum-cli, NM511 neuron_parallel_compile, NM512
XLA-only variables, NM513 NEURON_CC_FLAGS, NM515 launch flags, NM523 pip install, NM616 removed
TrainingArguments flags); what they would change becomes a marker on the Python statement (the words to
drop), followed by the markers they would leave on the command. Rewriting the Python expression itself
is left to a person (or to NM306 for the launch-flag lists it edits).
"""

from __future__ import annotations

import re
import shlex

import libcst as cst

from codemods.project.launch_flags import LaunchFlags, ShellPipInstall
from codemods.project.neuron_cc_flags import NeuronCcFlags
from codemods.project.shell import NeuronParallelCompile, OptimumCliCommands, XlaOnlyEnvironment
from codemods.upgrade.launchers import LauncherFlags
from migrator.model import MARKER_LIMIT, MARKER_RE
from migrator.rules import PythonContext, PythonRule
from migrator.text_engine import run_text

#: calls that run a command: qualified name -> whether a string argument is a shell line (else one program)
COMMAND_CALLS = {
    "subprocess.run": None, "subprocess.Popen": None, "subprocess.call": None, "subprocess.check_call": None,
    "subprocess.check_output": None, "subprocess.getoutput": True, "subprocess.getstatusoutput": True,
    "os.system": True, "os.popen": True, "asyncio.create_subprocess_shell": True,
}
SHELL_RULES = (OptimumCliCommands, NeuronParallelCompile, XlaOnlyEnvironment, NeuronCcFlags, LaunchFlags,
               ShellPipInstall, LauncherFlags)
#: NM306 and NM614 edit the launch-flag words of argument lists themselves
LIST_EXCLUDED = ("NM515", "NM616")
#: the longest rewritten command a marker quotes
QUOTED = 60


def _triggers() -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for rule in SHELL_RULES:
        for t in rule.triggers:
            seen.setdefault(t, None)
    return tuple(seen)


def _string(node: cst.BaseExpression) -> str | None:
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


class PythonShellCommands(PythonRule):
    id = "NM517"
    title = "Shell commands run from Python (subprocess, os.system): the shell rules' changes flagged"
    fix = "manual"
    triggers = _triggers()
    why = """
        Python code launches the old stack too: `subprocess.run(["optimum-cli", "export", "neuron",
        ...])` compiles a model TorchNeuron does not need compiled, `os.system("XLA_USE_BF16=1 torchrun
        train.py")` sets a switch TorchNeuron ignores, `neuron_parallel_compile` wraps a launch that
        now runs as it is. The command (a list or tuple literal, a string, an f-string, a
        `"...".split()`, or a name assigned one of these in the module) is rendered as the shell line
        it runs and checked by the shell rules (NM510, NM511, NM512, NM513, NM515, NM523, NM616); what
        they would change becomes a marker above the statement (the words to drop, or the migrated
        command when it is short), followed by the markers they would leave on the command (choose bf16
        in the script, where the compile cache now lives). `neuron-migrate explain` of the rule a marker
        names says what changes and why.
    """
    before = """
        import subprocess

        subprocess.run(["optimum-cli", "neuron", "cache", "synchronize"], check=True)
    """
    after = """
        import subprocess

        # TODO(neuron-migrate NM517): this runs `optimum-cli neuron cache`, which TorchNeuron does not need: remove it (NM510)
        subprocess.run(["optimum-cli", "neuron", "cache", "synchronize"], check=True)
    """
    caveats = """
        A placeholder of an f-string naming a string assigned once in the function or module (`env =
        "XLA_USE_BF16=1 ..."`; `f"{env} torchrun ..."`) stands for its words; other placeholders that
        begin a command string are left out when the command after them is judged. Only commands whose
        words are visible in the module are judged: a list built up with
        `append` or read from a file is not. Non-literal words are shown as `{code}`. Launch-flag
        words of argument lists (`--tensor_parallel_size`, removed TrainingArguments flags) are NM306's
        and NM614's, which edit the list;
        `optimum-cli export neuron` commands are NM112's (what their consumer loads instead).
    """

    def handlers(self):
        return {cst.Call: self._on_call, cst.Assign: self._on_assign, cst.AugAssign: self._on_extend}

    def _on_extend(self, node: cst.AugAssign, ctx: PythonContext) -> None:
        """``cmd += [...]`` extends a command list: its first words (the program) stay known."""
        if isinstance(node.target, cst.Name) and isinstance(node.operator, cst.AddAssign):
            extended = ctx.local_state().setdefault("extended", set())
            extended.add(node.target.value)

    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            names = ctx.local_state().setdefault("assigned", {})
            name = (ctx.scope_id, node.targets[0].target.value)  # (a `cmd` of each function is its own)
            if name in names and _splits(node.value, name[1], ctx):
                return  # `c = shlex.split(c)` / `c = c.split()`: the same command, as words
            names[name] = None if name in names else node.value  # assigned twice: not known

    def _command(self, node: cst.BaseExpression, ctx: PythonContext, depth: int = 0) -> tuple[str, bool] | None:
        """(the shell line, whether it came from an argument list) of a command expression."""
        code = ctx.module.code_for_node
        if isinstance(node, (cst.List, cst.Tuple)):
            words = []
            for e in node.elements:
                if not isinstance(e, cst.Element):
                    return None
                text = _string(e.value)
                words.append(shlex.quote(text) if text is not None else "{" + code(e.value) + "}")
            return " ".join(words), True
        text = _string(node)
        if text is not None:
            return text, False
        if isinstance(node, cst.FormattedString):
            # a placeholder naming a string assigned once (`env = "XLA_USE_BF16=1 ..."`, `f"{env} torchrun ..."`)
            # stands for its words; other expressions are shown as {code}
            parts = [p.value if isinstance(p, cst.FormattedStringText) else (
                         p.conversion is None and p.format_spec is None and self._literal(p.expression, ctx))
                     or "{" + code(p.expression) + "}" for p in node.parts]
            return "".join(parts), False
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "split" \
                and not node.args:
            found = self._command(node.func.value, ctx, depth)
            return (found[0], False) if found is not None and not found[1] else None
        if isinstance(node, cst.Call) and ctx.qualname(node.func) == "shlex.split" and len(node.args) == 1:
            found = self._command(node.args[0].value, ctx, depth)
            return (found[0], False) if found is not None and not found[1] else None
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
            # "neuron_parallel_compile ... " + cmd: the literal words, then the rest as {code}
            left = self._command(node.left, ctx, depth)
            if left is not None and not left[1]:
                right = self._command(node.right, ctx, depth)
                tail = right[0] if right is not None and not right[1] else "{" + code(node.right) + "}"
                return left[0] + tail, False
            return None
        if isinstance(node, cst.Name) and depth == 0:
            value = _assigned(node.value, ctx)
            found = self._command(value, ctx, 1) if value is not None else None
            if found is not None and found[1] and node.value in ctx.local_state().get("extended", ()):
                return found[0] + " {" + node.value + " extended}", True  # `cmd += [...]` added words after these
            return found
        return None

    @staticmethod
    def _literal(expr: cst.BaseExpression, ctx: PythonContext) -> str | None:
        """The string a placeholder's name was assigned once (in this function, else at module level), plainly
        (no conversion or format spec)."""
        value = _assigned(expr.value, ctx) if isinstance(expr, cst.Name) else None
        return _string(value) if value is not None else None

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        qual = ctx.qualname(node.func)
        if qual not in COMMAND_CALLS:
            return
        arg = next((a for a in node.args if a.keyword is None and not a.star), None)
        if arg is None:
            arg = next((a for a in node.args if a.keyword is not None and a.keyword.value == "args"), None)
        if arg is None:
            return
        found = self._command(arg.value, ctx)
        if found is None:
            return
        line, from_list = found
        words = line.split()
        if len(words) >= 3 and words[0].rsplit("/", 1)[-1] == "optimum-cli" and words[1] == "export":
            if isinstance(arg.value, cst.Name):  # a command built in a variable, which NM112 does not follow
                ctx.marker(node, "Delete this Neuron export (optimum-cli export neuron) and load the original "
                                 "checkpoint where its output was loaded.")
            return  # NM112's (codemods/inference/export_cli.py): it says what the export's consumer loads instead
        rules = [r() for r in SHELL_RULES if not (from_list and r.id in LIST_EXCLUDED)]
        new, findings = run_text(line + "\n", "shell", rules)
        acted = sorted({f.rule for f in findings})
        lead = re.match(r"(?:\{[^{}]*\}\s+)+", line)
        if not acted and lead:
            # `f"{env} neuron_parallel_compile torchrun ..."`: the words the placeholders stand for (settings, a
            # prefix) hide the command; judged without them
            line = line[lead.end():]
            new, findings = run_text(line + "\n", "shell", rules)
            acted = sorted({f.rule for f in findings})
        if not acted:
            return
        for message in _messages(line, new, acted, [f.message for f in findings if f.fix == "manual"]):
            ctx.marker(node, message)


def _assigned(name: str, ctx: PythonContext) -> cst.BaseExpression | None:
    """The value ``name`` was assigned once in this function, else at module level (None: not known)."""
    assigned = ctx.local_state().get("assigned", {})
    key = (ctx.scope_id, name)
    return assigned[key] if key in assigned else assigned.get((0, name))


def _splits(value: cst.BaseExpression, name: str, ctx: PythonContext) -> bool:
    """Whether ``value`` is ``shlex.split(name)`` or ``name.split()``: the words of the command ``name`` held."""
    if not isinstance(value, cst.Call):
        return False
    if isinstance(value.func, cst.Attribute) and value.func.attr.value == "split" and not value.args:
        return isinstance(value.func.value, cst.Name) and value.func.value.value == name
    return (ctx.qualname(value.func) == "shlex.split" and len(value.args) == 1
            and isinstance(value.args[0].value, cst.Name) and value.args[0].value.value == name)


def _words(line: str) -> list[str]:
    line = re.sub(r"\\\n", " ", line)  # continued lines: one command
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


def _dropped(line: str, command: str) -> list[str] | None:
    """The words the shell rules took out of ``line`` to give ``command`` (a word of a setting whose value lost
    words: those words, `--cache_dir=c` of `NEURON_CC_FLAGS="... --cache_dir=c"`); None when they also added or
    changed words (`TP_SIZE=2` in front of the launch)."""
    old, new = _words(line), _words(command)
    settings = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in new if re.match(r"[A-Za-z_]\w*=", w)}
    left = list(new)
    dropped: list[str] = []
    for w in old:
        if w in left:
            left.remove(w)
            continue
        name, eq, value = w.partition("=")
        if eq and name in settings and re.fullmatch(r"[A-Za-z_]\w*", name):
            kept = settings[name].split()
            gone = [v for v in value.split() if v not in kept]
            if all(v in value.split() for v in kept):
                left.remove(f"{name}={settings[name]}")
                dropped += gone
                continue
        dropped.append(w)
    return dropped if dropped and not left else None


def _messages(line: str, new: str, rules: list[str], manual: list[str]) -> list[str]:
    """One sentence each: what the shell rules would do to ``line`` (the words they take out, or the command to
    run), then the markers they leave on it (``manual``)."""
    ids = "/".join(rules)
    kept = [ln.strip() for ln in new.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
            and not MARKER_RE.search(ln)]
    if not kept:
        words = line.split()
        head = " ".join(words[:3]) if words and words[0].endswith("optimum-cli") else (words[0] if words else line)
        return [f"this runs `{head}`, which TorchNeuron does not need: remove it ({ids})"]
    command = " ".join(ln[:-1].rstrip() if ln.endswith("\\") else ln for ln in kept)
    out: list[str] = []
    if " ".join(line.split()) != " ".join(command.split()):
        dropped = _dropped(line, command)
        listed = ", ".join(f"`{w}`" for w in dict.fromkeys(dropped or ()))
        if dropped and len(listed) <= QUOTED + 20:
            out.append(f"Drop {listed} from this command ({ids}).")
        elif len(command) <= QUOTED:
            out.append(f"run `{command}` instead ({ids})")
        else:
            out.append(f"migrate this command as {ids} would in a shell script (see `neuron-migrate explain {rules[0]}`)")
    out += [m for m in dict.fromkeys(manual) if len(m) <= MARKER_LIMIT]
    return out or [f"this command needs the launch changes of {ids} (see `neuron-migrate explain {rules[0]}`)"]


#: keywords whose string is shown to a person as the script's usage (argparse, click, typer)
HELP_KEYWORDS = ("help", "description", "epilog", "usage")
#: words that start a command line a docstring or a --help text shows
_COMMAND_HEADS = ("torchrun", "python", "python3", "optimum-cli", "neuron_parallel_compile", "accelerate", "export",
                  "srun", "mpirun", "bash", "pip")


def _is_docstring(ctx: PythonContext) -> bool:
    """Whether the string being handled is the docstring of the module, a class or a function."""
    stack = ctx.stack
    if len(stack) < 3 or not isinstance(stack[-2], cst.Expr):
        return False
    line, block = stack[-3], stack[-4] if len(stack) > 3 else None
    body = getattr(block, "body", None)
    if isinstance(block, cst.IndentedBlock):
        owner = stack[-5] if len(stack) > 4 else None
        if not isinstance(owner, (cst.FunctionDef, cst.ClassDef)):
            return False
    return isinstance(line, cst.SimpleStatementLine) and isinstance(body, (list, tuple)) and bool(body) and body[0] is line


class LaunchLinesInText(PythonRule):
    id = "NM525"
    title = "Docstrings and --help texts that show old-stack launch lines: a marker on the text"
    fix = "manual"
    triggers = _triggers()
    why = """
        A script's docstring or its argparse `help=`/`description=`/`epilog=` text often shows how to
        launch it (`XLA_USE_BF16=1 torchrun --nproc_per_node=2 train.py`, `neuron_parallel_compile
        torchrun ...`, `optimum-cli export neuron ...`). After the migration those lines launch the
        old stack: each command line of the text is checked by the shell rules (as NM517 does for
        commands Python runs) and the text gets ONE marker naming the rules that would change it.
    """
    before = """
        \"\"\"Fine-tune on Trainium.

        Usage: XLA_USE_BF16=1 torchrun --nproc_per_node=2 train.py
        \"\"\"
    """
    after = """
        # TODO(neuron-migrate NM525): Update the launch lines this text shows as NM512 would migrate them.
        \"\"\"Fine-tune on Trainium.

        Usage: XLA_USE_BF16=1 torchrun --nproc_per_node=2 train.py
        \"\"\"
    """
    caveats = """
        Only docstrings and the usage keywords of a call are read; a command line is a line (after an
        optional `Usage:`/`$ ` prefix) that starts with a launcher word. The text itself is left as it is.
    """

    def handlers(self):
        return {cst.SimpleString: self._on_string, cst.ConcatenatedString: self._on_string}

    def _on_string(self, node: cst.BaseExpression, ctx: PythonContext) -> None:
        if isinstance(ctx.parent, cst.ConcatenatedString):
            return  # the whole concatenation is handled
        parent = ctx.parent
        shown = _is_docstring(ctx) or (isinstance(parent, cst.Arg) and parent.keyword is not None
                                       and parent.keyword.value in HELP_KEYWORDS)
        if not shown:
            return
        text = _string(node)
        if text is None:
            return
        acted: set[str] = set()
        for raw in text.splitlines():
            line = re.sub(r"^\s*(?:usage:|example:|\$|>|e\.g\.,?)\s*", "", raw.strip(), flags=re.IGNORECASE)
            words = line.split()
            if not words or not any(w.rsplit("/", 1)[-1] in _COMMAND_HEADS for w in words[:4]):
                continue
            _, findings = run_text(line + "\n", "shell", [r() for r in SHELL_RULES])
            acted.update(f.rule for f in findings)
        if acted:
            ids = "/".join(sorted(acted))
            ctx.marker(node, f"Update the launch lines this text shows as {ids} would migrate them.")


RULES = (PythonShellCommands, LaunchLinesInText)
