"""NM515-NM516: command lines that launch the migrated Python scripts; NM523: `pip install` lines.

Built on the shell lexer/parser and the shared edit plan of :mod:`codemods.project.shell` (the same
command can be edited by NM511, NM512, NM513 and these rules at once).

A *launch* is a simple command that runs a Python script through ``torchrun``,
``python -m torch.distributed.run|launch``, ``python``/``python3`` or ``accelerate launch``,
possibly behind wrappers (``srun``, ``uv run``, ``neuron_parallel_compile``, ``nohup`` ...): the
script is the first word after the launcher that ends with ``.py`` (or the module after ``-m``).
Only the words after the script (its own arguments) are edited; the launcher's options are read
(``--nproc_per_node``, ``--nnodes``, also through a variable set once in the script, e.g.
``DISTRIBUTED_ARGS="--nproc_per_node 32 ..."``), never edited.
"""

from __future__ import annotations

import re
import shlex

from codemods.project.dependency_policy import (
    TARGET_PINS, TORCH_MARKER, TORCHNEURON_MARKER, USES_OLD_STACK, USES_PROBES, VLLM_MARKER, VLLM_TORCHNEURON_MARKER,
    UNPARSED_MARKER, long_forms,
)
from codemods.project.dockerfile import (
    PIP_INSTALL_MARKERS, PIP_TRIGGERS, PipInstall, apply_pip_installs, deps_host, pip_segments,
)
from codemods.project.shell_plans import (
    ShellPlan, ShellRule, ShellUnit, _shell_plan, assignments, command_name, for_another_device, launched_source, plan_for,
    word_value)
from codemods.project.serving import OLD_STACK_INSTALL, SERVER_INSTALL_MARKER, neuron_sdk_server
from codemods.project.shell_syntax import ASSIGN_RE, Simple
from codemods.project.xla_env import XLA_ONLY_PREFIXES, XLA_ONLY_VARS

#: flags -> environment variable the migrated script reads instead
_ENV_FLAGS = {
    "--tensor_parallel_size": "TP_SIZE",
    "--tensor-parallel-size": "TP_SIZE",
    "--pipeline_parallel_size": "PP_SIZE",
    "--pipeline-parallel-size": "PP_SIZE",
}
_ZERO_FLAGS = ("--zero_1", "--zero-1")
#: boolean flags of NeuronTrainingArguments with no equivalent: removed (value: why)
_DROP_FLAGS = {
    "--disable_sequence_parallel": "sequence parallelism is part of the model's tensor-parallel plan now",
    "--skip_cache_push": "there is no Hub compile cache with TorchNeuron",
    "--async_save": "optimum-neuron's asynchronous checkpointing does not exist in Transformers",
    "--use_autocast": "use --bf16 true (Trainer mixed precision) instead",
}
for _f in list(_DROP_FLAGS):
    _DROP_FLAGS[_f.replace("_", "-")] = _DROP_FLAGS[_f]
_TRUE = {"true", "1", "yes", "y", "t", "on"}
_FALSE = {"false", "0", "no", "n", "f", "off"}
_BOOL = _TRUE | _FALSE

_FLAG_TRIGGERS = tuple(sorted(set(_ENV_FLAGS) | set(_ZERO_FLAGS) | set(_DROP_FLAGS)))
#: the other old-stack shell triggers: a script that holds one of them is a Neuron launch script
_STACK_TRIGGERS = ("neuron_parallel_compile", "optimum-cli", "optimum.neuron", "NEURON_CC_FLAGS",
                   "NEURON_EXTRACT_GRAPHS_ONLY") + tuple(sorted(XLA_ONLY_VARS)) + XLA_ONLY_PREFIXES

_PYTHON_RE = re.compile(r"python[0-9.]*\Z")
#: tools with a --tensor-parallel-size of their own (never edited, never flagged)
_OTHER_TOOLS = frozenset({"vllm", "sglang", "lm_eval", "text-generation-launcher", "text_generation_server",
                          "deepspeed", "trtllm-serve", "tensorrt_llm"})
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.,:/+-]*\Z")
_VAR_RE = re.compile(r'"?\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))"?\Z')
_INT_RE = re.compile(r"[0-9]+\Z")
_NPROC = ("--nproc_per_node", "--nproc-per-node")
_NNODES = ("--nnodes",)


# ------------------------------------------------------------------------------------------------
# Reading the unit


def unit_variables(u: ShellUnit) -> dict[str, str | None]:
    """Variables assigned exactly once in the unit (``X=8``, ``export X="a b"``): name -> the value
    with one level of surrounding quotes removed; None when assigned more than once."""
    out: dict[str, str | None] = {}
    for s in u.simples:
        for a in assignments(u, s):
            if a.value is None or (a.form == "prefix" and s.words):
                continue
            raw = a.value
            if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
                raw = raw[1:-1]
            out[a.name] = None if a.name in out else raw
    return out


def _var_name(text: str) -> str | None:
    m = _VAR_RE.match(text)
    return (m.group(1) or m.group(2)) if m else None


def _int(text: str | None, env: dict[str, str | None]) -> int | None:
    """An integer, directly or through a variable assigned once to an integer."""
    if text is None:
        return None
    v = word_value(text)
    if v is not None and _INT_RE.match(v):
        return int(v)
    name = _var_name(text)
    if name and env.get(name) and _INT_RE.match(env[name] or ""):
        return int(env[name])  # type: ignore[arg-type]
    return None


def _expand(words: list[str], env: dict[str, str | None]) -> list[str]:
    """Launcher words with unquoted ``$VAR`` replaced by the words of its (single) value."""
    out: list[str] = []
    for w in words:
        name = _var_name(w)
        if name and not w.startswith('"') and env.get(name) is not None:
            out.extend(str(env[name]).split())
        else:
            out.append(w)
    return out


def _option(words: list[str], names: tuple[str, ...]) -> str | None:
    for k, w in enumerate(words):
        for n in names:
            if w == n and k + 1 < len(words):
                return words[k + 1]
            if w.startswith(n + "="):
                return w[len(n) + 1:]
    return None


class Launch:
    """A command that runs a Python script."""

    def __init__(self, u: ShellUnit, s: Simple, launcher: int, script: int, torchrun: bool, python: bool,
                 options: list[str] | None = None) -> None:
        self.s = s
        self.options = options or []  # launcher words held in a variable (`$LAUNCHER script.py`)
        self.launcher = launcher  # index in s.words
        self.script = script  # index in s.words
        self.torchrun = torchrun
        self.python = python  # plain `python script.py` (one process)
        self.script_name = u.text(s.words[script])
        self.args = s.words[script + 1:]


#: commands that run the command line after them (`srun torchrun ...`, `uv run python ...`)
_WRAPPERS = frozenset({"srun", "mpirun", "mpiexec", "nohup", "exec", "sudo", "uv", "poetry", "pipenv", "conda",
                       "timeout", "env", "neuron_parallel_compile", "stdbuf", "nice", "numactl", "taskset",
                       "time", "command"})


def find_launch(u: ShellUnit, s: Simple, env: dict[str, str | None] | None = None) -> Launch | None:
    vals = [u.value(i) for i in s.words]
    base = [v.rsplit("/", 1)[-1] if v else None for v in vals]
    held: dict[int, list[str]] = {}  # `$LAUNCHER` whose value starts with torchrun / python
    for k, i in enumerate(s.words):
        name = _var_name(u.text(i)) if vals[k] is None and not u.text(i).startswith('"') else None
        words = (env or {}).get(name or "") or ""
        first = words.split()[0].rsplit("/", 1)[-1] if words.split() else ""
        if first == "torchrun" or _PYTHON_RE.match(first):
            held[k] = words.split()[1:]
            base[k] = first
    if not base or (base[0] not in _WRAPPERS and base[0] not in ("torchrun", "accelerate")
                    and not (base[0] and _PYTHON_RE.match(base[0]))):
        return None
    for k, name in enumerate(base):
        if name is None:
            continue
        if k in held:
            torchrun = name == "torchrun" or "torch.distributed.run" in held[k]
            j = k + 1
            while j < len(vals) and not (vals[j] and vals[j].endswith(".py") and not vals[j].startswith("-")):
                if vals[j] is None or not vals[j].startswith("-"):
                    return None
                j += 1
            if j == len(vals):
                return None
            return Launch(u, s, k, j, torchrun, not torchrun, held[k])
        torchrun = name == "torchrun"
        python = bool(_PYTHON_RE.match(name))
        accelerate = name == "accelerate" and k + 1 < len(vals) and vals[k + 1] == "launch"
        if not (torchrun or python or accelerate):
            continue
        j = k + (2 if accelerate else 1)
        while j < len(vals):
            v = vals[j]
            if v == "-m" and j + 1 < len(vals) and vals[j + 1]:
                mod = vals[j + 1]
                if mod.split(".", 1)[0] in _OTHER_TOOLS:
                    return None  # vLLM & co. have a --tensor-parallel-size of their own
                if python and mod in ("torch.distributed.run", "torch.distributed.launch"):
                    torchrun, python = True, False
                    j += 2
                    continue
                return Launch(u, s, k, j + 1, torchrun, python and not accelerate)
            if v and v.endswith(".py") and not v.startswith("-"):
                return Launch(u, s, k, j, torchrun, python and not accelerate)
            if python and v and not v.startswith("-"):
                return None  # `python something-else`: not a script we recognise
            j += 1
        return None
    return None


# ------------------------------------------------------------------------------------------------
# NM515


class _Flag:
    def __init__(self, name: str, toks: list[int], value: str | None, holder: "_Holder | None" = None) -> None:
        self.name = name
        self.toks = toks  # tokens to delete (words of ``holder`` when the flag is held in a variable)
        self.value = value  # raw text of the value (None: bare boolean flag)
        self.holder = holder


def _parse_flags(texts: list[str], values: list[str | None]) -> list[tuple[str, list[int], str | None]]:
    """(flag, positions, raw value) of the flags this rule edits in a list of words."""
    out: list[tuple[str, list[int], str | None]] = []
    k = 0
    while k < len(texts):
        text = values[k] or texts[k]
        name, eq, val = text.partition("=")
        if eq and not _PLAIN_VALUE.match(val):
            val = shlex.quote(val)
        nxt = texts[k + 1] if k + 1 < len(texts) else None
        shown = (values[k + 1] or nxt) if nxt is not None else None  # `"--lr"` is an option too
        # TP/PP sizes, and HfArgumentParser booleans: `--flag`, `--flag VALUE`, `--flag=VALUE`
        if name in _ENV_FLAGS or name in _ZERO_FLAGS or name in _DROP_FLAGS:
            if eq:
                out.append((name, [k], val))
            elif nxt is not None and shown is not None and not shown.startswith("-"):
                out.append((name, [k, k + 1], nxt))
                k += 1
            else:
                out.append((name, [k], None))
        k += 1
    return out


def _script_flags(u: ShellUnit, args: list[int]) -> list[_Flag]:
    found = _parse_flags([u.text(i) for i in args], [u.value(i) for i in args])
    return [_Flag(name, [args[k] for k in ks], value) for name, ks, value in found]


# -- flags held in a variable: `ARGS="--tensor_parallel_size 8 --zero_1 true"`, `args=(--zero_1 true)`

#: a word of a literal value that is re-written as it is (no quotes, escapes, backticks)
_HELD_WORD = re.compile(r"""[^\s"'\\`()#;&|<>][^\s"'\\`();&|<>]*""")
_DQ_ELEMENT = re.compile(r'"[^"\\`]*"')
_SQ_ELEMENT = re.compile(r"'[^']*'")
_CONT = re.compile(r"\\\n")


class _Holder:
    """A variable assigned once to a literal list of words, whose flags can be removed exactly."""

    def __init__(self, u: ShellUnit, s: Simple, tok: int, name: str, array: bool,
                 spans: list[tuple[int, int]]) -> None:
        self.s = s
        self.tok = tok
        self.name = name
        self.array = array
        self.text = u.text(tok)
        m = ASSIGN_RE.match(self.text)
        quoted = self.text[m.end():][:1] in ("(", '"', "'") if m else False
        #: (start, end) of the value inside ``text``, without its quotes or parentheses
        self.body = (m.end() + 1, len(self.text) - 1) if m and quoted else (m.end() if m else 0, len(self.text))
        self.spans = spans  # (start, end) of each word inside ``text``
        self.words = [self.text[a:b] for a, b in spans]
        self.dropped: set[int] = set()

    def values(self) -> list[str | None]:
        return [word_value(w) for w in self.words]

    def render(self) -> str:
        """The assignment without the dropped words: a dropped word goes with the blanks after it
        when another word follows on its line, else with the blanks before it."""
        text = self.text
        cuts: list[tuple[int, int]] = []
        runs: list[list[int]] = []
        for k in sorted(self.dropped):
            if runs and runs[-1][-1] == k - 1:
                runs[-1].append(k)
            else:
                runs.append([k])
        for run in runs:
            a, b = self.spans[run[0]][0], self.spans[run[-1]][1]
            if run[-1] + 1 < len(self.spans):  # up to the next word (blanks, newlines, continuations)
                cuts.append((a, self.spans[run[-1] + 1][0]))
            elif run[0] > 0:  # the last words: from the end of the word before
                cuts.append((self.spans[run[0] - 1][1], b))
            else:  # every word: the whole value
                cuts.append(self.body)
        out, pos = [], 0
        for a, b in sorted(cuts):
            a = max(a, pos)
            out.append(text[pos:a])
            pos = max(pos, b)
        out.append(text[pos:])
        return "".join(out)


def _held_spans(value: str, offset: int) -> list[tuple[int, int]] | None:
    """Word spans (offsets in the assignment word) of a literal value: ``"..."`` or ``'...'`` split
    at blanks, ``(...)`` elements, or one plain word; None when the words cannot be known exactly."""
    spans: list[tuple[int, int]] = []
    if re.search(r"\$\{[^}]*\s", value):
        return None  # `${X:-a b}`: the blanks do not separate words
    if value.startswith("(") and value.endswith(")"):
        body, base = value[1:-1], offset + 1
        i = 0
        while i < len(body):
            if body[i] in " \t\n":
                i += 1
                continue
            m = _CONT.match(body, i)
            if m:
                i = m.end()
                continue
            m = _DQ_ELEMENT.match(body, i) or _SQ_ELEMENT.match(body, i) or _HELD_WORD.match(body, i)
            if m is None or "$(" in m.group(0) or (m.end() < len(body) and body[m.end()] not in " \t\n\\"):
                return None  # a comment, an escape, a command substitution, glued quotes...
            spans.append((base + m.start(), base + m.end()))
            i = m.end()
        return spans
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        body, base = value[1:-1], offset + 1
        if value[0] == "'" and "'" in body:
            return None
        if value[0] == '"' and (any(c in _CONT.sub(" ", body) for c in '"`\\') or "$(" in body):
            return None
        for m in re.finditer(r"(?:[^\s\\]|\\(?!\n))+", body):
            spans.append((base + m.start(), base + m.end()))
        return spans
    if _HELD_WORD.fullmatch(value) and "$" not in value:
        return [(offset, offset + len(value))]
    return None


_REF_RE = re.compile(r'"?\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(\[@\])?\}|([A-Za-z_][A-Za-z0-9_]*))"?\Z')


def _reference(text: str) -> tuple[str, bool] | None:
    """(name, array) of an argument that expands a variable into words: `$ARGS`, `${ARGS}`,
    `"${ARGS[@]}"`, `${ARGS[@]}` (a quoted scalar `"$ARGS"` stays one word: not handled)."""
    m = _REF_RE.match(text)
    if m is None:
        return None
    quoted = text.startswith('"')
    if quoted != (text.endswith('"') and len(text) > 1):
        return None
    if m.group(2):
        return m.group(1), True
    if quoted:
        return None
    return m.group(1) or m.group(3), False


_DECLARE = ("export", "declare", "local", "readonly", "typeset")


def find_holders(u: ShellUnit) -> dict[str, "_Holder | None"]:
    """Variables assigned in the unit: a holder for one assigned exactly once, alone on its command
    (``ARGS=...`` or ``export ARGS=...``), to a literal whose words are known; None otherwise."""
    out: dict[str, _Holder | None] = {}
    for s in u.simples:
        name_cmd = command_name(u, s)
        for i in s.assigns + s.words[1:]:
            m = ASSIGN_RE.match(u.text(i))
            if m is None or (i in s.words and name_cmd not in _DECLARE):
                continue
            name = m.group(1)
            if name in out:
                out[name] = None
                continue
            standalone = (i in s.assigns and not s.words) or (
                i in s.words and name_cmd == "export" and not any(u.text(w).startswith("-") for w in s.words))
            value = u.text(i)[m.end():]
            spans = _held_spans(value, m.end()) if standalone and not m.group(2) and not m.group(3) else None
            out[name] = _Holder(u, s, i, name, value.startswith("("), spans) if spans is not None else None
    return out


def _truth(value: str | None) -> bool | None:
    if value is None:
        return True
    v = word_value(value)
    if v is None:
        return None
    v = v.lower()
    return True if v in _TRUE else False if v in _FALSE else None


MOVE_FLAGS_MARKER = "Move {flags} to TP_SIZE/FSDP_SIZE in the launch environment: the migrated script rejects them."
SCRIPT_UNKNOWN_MARKER = "Keep the {flags} flags if {script} parses them itself, else move them to {vars}: it is not in this run."
PP_MARKER = "Fit the model with TP_SIZE/FSDP_SIZE instead of PP_SIZE: a migrated Trainer script has no pipeline stages."
#: NM515's markers and their long forms
XLA_VALUE_MARKER = "Pass neuron instead of xla to {flag} if the script takes it: TorchNeuron has no xla device or backend."
#: a script flag asking for torch-xla's serialization (Megatron-LM's Neuron fork: --save-xser, --load-xser)
_XSER_FLAG = re.compile(r"--(?:save|load|use)[-_]xser", re.I)
XSER_MARKER = "Drop {flag} if the script takes it: TorchNeuron saves with torch.save or DCP, not torch-xla's xser format."
#: a script flag that names a device or a backend (`--device xla`, `--distributed-backend xla`, `--accelerator=xla`)
_DEVICE_FLAG = re.compile(r"--[\w-]*(?:device|backend|accelerator|platform)[\w-]*", re.I)
#: the pre-filter of those flags (a bare "xla" would let every `xlabel` of a plotting library in)
_XLA_VALUE_TRIGGERS = tuple(f"{name}{sep}xla" for name in ("device", "backend", "accelerator", "platform")
                            for sep in (" ", "="))

SPAWNED_WORKERS_MARKER = "Keep the number of workers {script} starts a multiple of TP_SIZE={n}: it starts its processes itself."
#: what a script that starts its worker processes itself contains (a Ray trainer, torch.multiprocessing)
_SPAWNS_WORKERS = re.compile(r"\bTorchTrainer\b|\bScalingConfig\b|\bmp\.spawn\(|multiprocessing\.spawn\(|"
                             r"\bstart_processes\(|\belastic_launch\(")
LAUNCH_MARKERS = (
    (XLA_VALUE_MARKER,
     """The launched script is given "xla" as a device or backend (its own argparse option: Megatron's
     --distributed-backend, a --device flag): TorchNeuron's device is "neuron" and its process-group backend
     "neuron", and torch has no "xla" of either. Whether the script accepts "neuron" for that option is its
     own choice list, so the launch is marked, not edited."""),
    (XSER_MARKER,
     """torch-xla's xser checkpoints (torch_xla.utils.serialization) store each tensor in its own file; the
     migrated code has no torch_xla to write or read them. The flag is the launched script's own option, so
     the launch is marked, not edited."""),
    (MOVE_FLAGS_MARKER,
     """The migrated script reads its parallel layout from the environment (TP_SIZE, FSDP_SIZE: a
     DistributedConfig on the model load under torchrun), not from optimum-neuron's command-line flags,
     which its argument parser now rejects. The rule could not move them here (the launch is built at
     run time, or another rule edits it)."""),
    ("Set {var} in this launch's environment instead of {flag}, which the migrated script rejects.",
     """The flag is given without a value the rule can read, so it cannot be moved to the environment
     variable the migrated script reads."""),
    (SCRIPT_UNKNOWN_MARKER,
     """The launched script is not in this run, so the rule cannot tell whether it is an optimum-neuron
     Trainer script (whose migrated form reads TP_SIZE/PP_SIZE from the environment and rejects the
     flags) or a script that parses the flags in its own argparse (neuronx-distributed's examples),
     which still needs them."""),
    (PP_MARKER,
     """The Trainer of Transformers 5.23 cannot train a model loaded with pp_size > 1, so the migration
     loads it without pipeline stages: the processes that were pipeline stages are data-parallel ranks
     now. Fit the model with tensor parallelism (TP_SIZE) and FSDP sharding (FSDP_SIZE) instead."""),
    ("Set FSDP_SIZE=<processes / TP_SIZE> in this launch's environment to shard the optimizer as {flag} did.",
     """ZeRO-1 sharded the optimizer state over the data-parallel ranks. With TorchNeuron, FSDP (FSDP_SIZE)
     shards it; TP_SIZE x FSDP_SIZE must equal the number of processes, which the rule cannot compute
     here."""),
    ("Launch this script with torchrun --nproc_per_node={n}: TP_SIZE={n} needs {n} processes.",
     """A tensor-parallel group of TP_SIZE ranks needs at least that many processes (TP_SIZE x FSDP_SIZE
     in all); a plain `python` launch starts one."""),
    (SPAWNED_WORKERS_MARKER,
     """The launched script starts its worker processes itself (a Ray TorchTrainer with a ScalingConfig,
     torch.multiprocessing.spawn): the number of workers it starts must be a multiple of TP_SIZE (TP_SIZE x
     FSDP_SIZE), and launching it with torchrun would start several drivers."""),
    ("Make --nproc_per_node x --nnodes a multiple of {what}: torchrun starts {where}.",
     """The migrated script lays the processes out as dp_replicate x FSDP_SIZE x TP_SIZE; the number of
     processes torchrun starts must be a multiple of TP_SIZE x FSDP_SIZE or the mesh cannot be built."""),
    ("Set FSDP_SIZE={n} to shard the optimizer over the {n} data-parallel groups, as optimum-neuron's default zero_1 did.",
     """The processes beyond TP_SIZE become data-parallel replicas of the migrated script's layout
     (dp_replicate_size = WORLD_SIZE // (TP_SIZE x FSDP_SIZE)), which replicate the optimizer state;
     optimum-neuron 0.4 sharded it over them by default (zero_1). FSDP_SIZE shards it with FSDP instead
     (TP_SIZE x FSDP_SIZE = the number of processes); leave it unset to keep replicas."""),
)


class LaunchFlags(ShellRule):
    id = "NM515"
    markers = LAUNCH_MARKERS
    title = "Script flags of optimum-neuron's training arguments: TP_SIZE/FSDP_SIZE, removed, --torch_compile"
    fix = "mixed"
    triggers = _FLAG_TRIGGERS + _STACK_TRIGGERS + _XLA_VALUE_TRIGGERS + ("-xser", "_xser")
    why = """
        The migrated training scripts parse transformers' `TrainingArguments`, which do not have
        optimum-neuron's parallelism flags: with TorchNeuron the layout comes from a
        `DistributedConfig(tp_size=TP_SIZE, fsdp_size=FSDP_SIZE, dp_replicate_size=WORLD_SIZE //
        (TP_SIZE x FSDP_SIZE))` that the script reads from the environment: the processes torchrun
        starts beyond TP_SIZE x FSDP_SIZE are data-parallel replicas. On command lines that launch a Python script (`torchrun`, `python`,
        `python -m torch.distributed.run`, `accelerate launch`, also behind `srun`, `uv run`...):
        `--tensor_parallel_size N` becomes a `TP_SIZE=N` prefix of the command,
        `--pipeline_parallel_size N` a `PP_SIZE=N` prefix; `--zero_1` (optimizer-state sharding
        over the data-parallel ranks) becomes `FSDP_SIZE=<processes / TP_SIZE>` when it is on and
        more than one data-parallel rank is left, and is removed otherwise;
        `--disable_sequence_parallel`, `--skip_cache_push`, `--async_save` and `--use_autocast`
        are removed. A launch whose process count is not a multiple of TP_SIZE x FSDP_SIZE gets
        a marker, and so does one with data-parallel replicas whose zero_1 is not given (it was
        on by default in optimum-neuron 0.4: FSDP_SIZE would shard them). `--torch_compile true` is added to launches of a `.py` script that writes to
        `--output_dir` and is a Trainer script (it was given optimum-neuron's training flags, or it
        sits beside the launcher and parses TrainingArguments): on Trainium torch.compile picks the
        Neuron backend. A device or backend flag given `xla` (`--distributed-backend xla`, `--device
        xla`) in a Neuron launcher gets a marker: the value is the script's own choice.
    """
    before = """
        torchrun --nproc_per_node=32 train.py --tensor_parallel_size 8 --zero_1 true --async_save --output_dir out
    """
    after = """
        TP_SIZE=8 FSDP_SIZE=4 HF_DEACTIVATE_ASYNC_LOAD=1 torchrun --nproc_per_node=32 train.py --output_dir out --torch_compile true
    """
    caveats = """
        Flags held in a variable (`ARGS="--tensor_parallel_size 8 --zero_1 true"`,
        `args=(--zero_1 true)`) are edited where the variable is assigned, and TP_SIZE/FSDP_SIZE go
        to the launches that expand it, when it is assigned once to a literal (no command
        substitution, escape or nested quote) and expanded only into the arguments of Python
        launches (`$ARGS`, `${ARGS}`, `"${ARGS[@]}"`) or shown by `echo`; otherwise, and in
        launches of `.sh` scripts and `bash -c` strings, they are flagged. The number of processes is read from
        `--nproc_per_node` (directly or through a variable set once in the script) and
        `--nnodes`; with `--nnodes $VAR` FSDP_SIZE becomes `$((per-node ranks * VAR))`. The
        environment prefix reaches the script through `srun` (which exports the environment) but
        not through `mpirun` without `-x`. `--torch_compile true` needs a script that parses
        TrainingArguments (HfArgumentParser, TrlParser); a plain argparse script rejects it. A flag
        the launched script declares itself (its own argparse, read beside the launcher) is kept.
        Where the script is not in the run, TP/PP sizes move only on a launch that is evidently
        optimum-neuron's (another flag only its training arguments had, or the launcher, or the
        notebook or page around it, names optimum-neuron); otherwise a marker (neuronx-distributed's
        examples parse `--tensor_parallel_size` themselves). `--tensor-parallel-size` of vLLM,
        SGLang and similar tools is not touched, also behind wrappers. The flags are only edited after the script name; `--torch_compile true` is only added in a
        script where another NM51x rule changed something, or on a launch whose flags were edited.
    """

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        env = unit_variables(u)
        # a Neuron launch script: another rule of the family changed or flagged something in it
        neuron = any(f.rule in ("NM510", "NM511", "NM512", "NM513", "NM514") for f in ctx.findings)
        found: list[Launch] = []
        for s in u.simples:
            if plan.is_removed(s):
                continue
            launch = find_launch(u, s, env)
            if launch is not None:
                found.append(launch)
        holders = self._usable_holders(plan, found)
        for launch in found:
            self._launch(plan, ctx, launch, env, neuron, holders)
            self._xla_values(plan, ctx, launch, neuron)
        launches = {id(launch.s) for launch in found} | {id(h.s) for h in holders.values()}
        # flags this rule cannot edit: in variables it cannot follow, non-Python launches
        for s in u.simples:
            if id(s) in launches or plan.is_removed(s):
                continue
            hits = sorted({f for i in s.assigns + s.words for f in _FLAG_TRIGGERS
                           if re.search(re.escape(f) + r"(?![A-Za-z0-9_-])", u.text(i))})
            name = (u.value(s.words[0]) or "").rsplit("/", 1)[-1] if s.words else ""
            if hits and not _echo_like(u, s) and name != "optimum-cli" and not _runs_other_tool(u, s):
                plan.marker(ctx, s.group, MOVE_FLAGS_MARKER.format(flags=", ".join(hits)))

    def _xla_values(self, plan: ShellPlan, ctx, launch: Launch, neuron: bool) -> None:
        """`--distributed-backend xla` / `--device=xla` given to the launched script of a Neuron launcher: a
        marker (the script's own option: whether it takes "neuron" is its choice list)."""
        u = plan.unit
        if not (neuron or re.search(r"neuron", _document(ctx, u), re.I)):
            return  # a TPU launcher: its xla is right
        values = [u.value(i) for i in launch.args]
        for k, v in enumerate(values):
            if v is None:
                continue
            flag, _, inline = v.partition("=")
            value = inline if inline else (values[k + 1] if k + 1 < len(values) else None)
            if _DEVICE_FLAG.fullmatch(flag) and value is not None and re.fullmatch(r"xla(?::\d+)?", value):
                plan.marker(ctx, launch.s.group, XLA_VALUE_MARKER.format(flag=flag))
                break
        xser = next((v for v in values if v is not None and _XSER_FLAG.fullmatch(v.partition("=")[0])), None)
        if xser is not None:
            plan.marker(ctx, launch.s.group, XSER_MARKER.format(flag=xser.partition("=")[0]))

    def _usable_holders(self, plan: ShellPlan, launches: list[Launch]) -> dict[str, _Holder]:
        """Variables holding script flags that can be edited where they are assigned: assigned once
        to a literal, expanded (unquoted, or as "${A[@]}") only into the arguments of launches of
        Python scripts, and mentioned nowhere else but in echo-like commands."""
        u = plan.unit
        candidates = {name: h for name, h in find_holders(u).items()
                      if h is not None and _parse_flags(h.words, h.values())}
        if not candidates:
            return {}
        seen: dict[str, int] = {}
        bad: set[str] = set()
        in_launch = {id(launch.s): set(launch.args) for launch in launches}
        for s in u.simples:
            args = in_launch.get(id(s))
            for i in s.words:
                ref = _reference(u.text(i))
                if ref is None or ref[0] not in candidates:
                    continue
                name, array = ref
                if args is not None and i in args and array == candidates[name].array:
                    seen[name] = seen.get(name, 0) + 1
                elif not _echo_like(u, s):
                    bad.add(name)
            if _echo_like(u, s):  # `echo "running with $ARGS"`: shows the value, whatever it is
                for name in candidates:
                    pattern = r"\$\{?" + re.escape(name) + r"(?![A-Za-z0-9_])"
                    seen[name] = seen.get(name, 0) + sum(len(re.findall(pattern, u.text(i))) for i in s.words)
        out = {}
        for name, h in candidates.items():
            total = len(re.findall(r"\$\{?" + re.escape(name) + r"(?![A-Za-z0-9_])", u.src))
            if (name in bad or not seen.get(name) or seen[name] != total or plan.is_removed(h.s)
                    or not plan.editable(self.id, h.s)):
                continue
            out[name] = h
        return out

    def _drop(self, plan: ShellPlan, f: _Flag) -> None:
        if f.holder is not None:
            f.holder.dropped.update(f.toks)
            plan.rewrite(self.id, f.holder.tok, f.holder.render())
        else:
            for t in f.toks:
                plan.delete(self.id, t)

    @staticmethod
    def _at(f: _Flag) -> int:
        """The token a finding about the flag points at."""
        return f.holder.tok if f.holder is not None else f.toks[0]

    def _launch(self, plan: ShellPlan, ctx, launch: Launch, env: dict[str, str | None], neuron: bool,
                holders: dict[str, _Holder] | None = None) -> None:
        u = plan.unit
        s = launch.s
        flags = _script_flags(u, launch.args)
        held_words: list[str] = []
        for i in launch.args:
            ref = _reference(u.text(i))
            h = (holders or {}).get(ref[0]) if ref else None
            if h is None:
                continue
            held_words += h.words
            flags += [_Flag(name, ks, value, h) for name, ks, value in _parse_flags(h.words, h.values())]
        editable = plan.editable(self.id, s)
        if flags:
            flags, unknown = _accepted_by_script(ctx, launch.script_name, flags, u)
            if unknown:
                variables = list(dict.fromkeys(_ENV_FLAGS[f.name] for f in unknown))
                plan.marker(ctx, s.group, _fit(SCRIPT_UNKNOWN_MARKER,
                    flags="/".join(v.split("_")[0] for v in variables), vars="/".join(variables),
                    script=launch.script_name.rsplit("/", 1)[-1]))
                return
        if flags and not editable:
            plan.marker(ctx, s.group, MOVE_FLAGS_MARKER.format(flags=", ".join(dict.fromkeys(f.name for f in flags))))
            return
        launcher_words = launch.options + _expand([u.text(i) for i in s.words[launch.launcher + 1: launch.script]], env)
        nproc_raw = _option(launcher_words, _NPROC) if launch.torchrun else None
        nnodes_raw = _option(launcher_words, _NNODES) if launch.torchrun else None
        nproc = _int(nproc_raw, env)
        nodes: int | str | None = 1
        if nnodes_raw is not None:
            nodes = _int(nnodes_raw, env)
            if nodes is None:
                name = _var_name(nnodes_raw)
                nodes = name if name else None
        present = {}
        for i in s.assigns:
            m = ASSIGN_RE.match(u.text(i))
            if m:
                present[m.group(1)] = u.text(i)[m.end():]

        if launch.python:
            nproc, nodes = 1, 1
        tp_raw = present.get("TP_SIZE") or ("$TP_SIZE" if env.get("TP_SIZE") else None)
        fsdp_raw = present.get("FSDP_SIZE") or ("$FSDP_SIZE" if env.get("FSDP_SIZE") else None)
        zero: _Flag | None = None
        for f in flags:
            var = _ENV_FLAGS.get(f.name)
            first = self._at(f)
            if var is not None:
                if f.value is None:  # `--tensor_parallel_size` without a value: not ours to guess
                    plan.marker(ctx, s.group, f"Set {var} in this launch's environment instead of {f.name}, which the "
                                "migrated script rejects.")
                    continue
                self._drop(plan, f)
                if var not in present:
                    plan.prefix(self.id, s, f"{var}={f.value}")
                    present[var] = f.value
                if var == "TP_SIZE":
                    tp_raw = present[var]
                self.finding(ctx, plan, first, f"{f.name} {f.value} -> {var}={f.value} in the environment of the "
                             "launch (the migrated script reads it for its DistributedConfig)")
                if var == "PP_SIZE" and _int(f.value, env) != 1:
                    plan.marker(ctx, s.group, PP_MARKER)
            elif f.name in _ZERO_FLAGS:
                self._drop(plan, f)
                zero = f
            else:
                self._drop(plan, f)
                shown = f.name if f.value is None else f"{f.name} {f.value}"
                self.finding(ctx, plan, first, f"removed {shown}: {_DROP_FLAGS[f.name]}")

        tp = _int(tp_raw, env)
        if zero is not None:
            on = _truth(zero.value)
            shown = zero.name if zero.value is None else f"{zero.name} {zero.value}"
            if on is False:
                self.finding(ctx, plan, self._at(zero), f"removed {shown}: ZeRO-1 was off")
            elif fsdp_raw is not None:
                self.finding(ctx, plan, self._at(zero), f"removed {shown}: FSDP_SIZE is set already")
            elif on is None or tp is None and tp_raw is not None or nproc is None or nodes is None:
                self.finding(ctx, plan, self._at(zero), f"removed {shown}")
                plan.marker(ctx, s.group, f"Set FSDP_SIZE=<processes / TP_SIZE> in this launch's environment to shard "
                            f"the optimizer as {zero.name} did.")
            else:
                tp_n = tp or 1
                dp = nproc // tp_n if nproc % tp_n == 0 else None
                new_fsdp = None
                if dp is None:
                    self.finding(ctx, plan, self._at(zero), f"removed {shown}")
                elif isinstance(nodes, str):
                    new_fsdp = f"${nodes}" if dp == 1 else f"$(({dp} * {nodes}))"
                elif dp * nodes > 1:
                    new_fsdp = str(dp * nodes)
                if new_fsdp is not None and fsdp_raw is None:
                    plan.prefix(self.id, s, f"FSDP_SIZE={new_fsdp}")
                    present["FSDP_SIZE"] = fsdp_raw = new_fsdp
                    self.finding(ctx, plan, self._at(zero), f"{shown} -> FSDP_SIZE={new_fsdp}: the "
                                 "data-parallel ranks shard parameters, gradients and optimizer state with FSDP")
                elif dp is not None:
                    self.finding(ctx, plan, self._at(zero), f"removed {shown}: no data-parallel rank is left "
                                 f"beside TP_SIZE={tp_n}")

        # whether the old run may have sharded the optimizer state: only known from the flags this run moves
        # (a launch with TP_SIZE already set says nothing about it; a second run must not mark it)
        zero_on = _truth(zero.value) if zero is not None else None
        moved_tp = any(_ENV_FLAGS.get(f.name) == "TP_SIZE" for f in flags)
        self._check_layout(plan, ctx, launch, tp, present.get("FSDP_SIZE") or fsdp_raw, nproc, nodes, env,
                           moved_tp and (zero is None or zero_on is None))
        if flags:
            plan.edited_launches.add(id(s))

        if ((flags or (neuron and _parses_training_arguments(ctx, launch.script_name))) and editable
                and launch.script_name.endswith(".py")
                and any(w == "--output_dir" or w.startswith("--output_dir=")
                        for w in [u.text(i) for i in launch.args] + held_words)
                and not any(w.split("=", 1)[0] in ("--torch_compile", "--torch-compile")
                            for w in [u.text(i) for i in launch.args] + held_words)):
            self._add_torch_compile(plan, ctx, launch)

    def _check_layout(self, plan, ctx, launch: Launch, tp: int | None, fsdp_raw: str | None,
                      nproc: int | None, nodes, env, zero_unknown: bool = True) -> None:
        """The migrated scripts load the model with DistributedConfig(tp_size=TP_SIZE, fsdp_size=FSDP_SIZE,
        dp_replicate_size=WORLD_SIZE // (TP_SIZE x FSDP_SIZE)): a process count that TP_SIZE x FSDP_SIZE
        does not divide fails at load; the processes beyond it are data-parallel replicas, a decision only
        where the old run may have sharded their optimizer state (zero_1 not given: on by default in
        optimum-neuron 0.4)."""
        s = launch.s
        if tp is None:
            return
        if launch.python and tp > 1:
            if _SPAWNS_WORKERS.search(launched_source(ctx, launch.script_name) or ""):
                # (a Ray TorchTrainer, mp.spawn: the script starts the processes itself, torchrun would start drivers)
                plan.marker(ctx, s.group, _fit(SPAWNED_WORKERS_MARKER, launch.script_name.rsplit("/", 1)[-1], n=str(tp)))
            else:
                plan.marker(ctx, s.group, f"Launch this script with torchrun --nproc_per_node={tp}: TP_SIZE={tp} "
                            f"needs {tp} processes.")
            return
        if not launch.torchrun or nproc is None or not isinstance(nodes, int):
            return
        world = nproc * nodes
        fsdp = _int(fsdp_raw, env) if fsdp_raw is not None else None
        if fsdp_raw is not None and fsdp is None:
            return
        where = f"{nproc} processes" + (f" per node on {nodes} nodes" if nodes != 1 else "")
        replicas = ("data-parallel replicas of the migrated script's layout (dp_replicate_size = WORLD_SIZE // "
                    "(TP_SIZE x FSDP_SIZE))")
        if fsdp is not None:
            if world % (tp * fsdp):
                plan.marker(ctx, s.group, f"Make --nproc_per_node x --nnodes a multiple of TP_SIZE x FSDP_SIZE = "
                            f"{tp * fsdp}: torchrun starts {where}.")
            elif world > tp * fsdp:
                self.finding(ctx, plan, s.words[launch.script], f"the {world // (tp * fsdp)} groups of TP_SIZE x "
                             f"FSDP_SIZE = {tp * fsdp} processes are {replicas}")
            return
        if world % tp:
            plan.marker(ctx, s.group, f"Make --nproc_per_node x --nnodes a multiple of TP_SIZE={tp}: torchrun starts "
                        f"{where}.")
        elif world > tp and zero_unknown:
            dp = world // tp
            plan.marker(ctx, s.group, f"Set FSDP_SIZE={dp} to shard the optimizer over the {dp} data-parallel "
                        "groups, as optimum-neuron's default zero_1 did.")
        elif world > tp:
            self.finding(ctx, plan, s.words[launch.script], f"the {world // tp} processes beyond TP_SIZE={tp} are "
                         f"{replicas}, as the old run's data parallelism without zero_1")

    def _add_torch_compile(self, plan: ShellPlan, ctx, launch: Launch) -> None:
        u = plan.unit
        s = launch.s
        after = [s.words[launch.script]] + list(launch.args)
        cand = [i for i in after if i not in plan.deleted]
        last = cand[-1]
        first_line = u.line_of(u.toks[s.first].start)
        line = u.line_of(u.toks[last].start)
        if line != first_line:
            text = u.lines[line]
            indent = text[: len(text) - len(text.lstrip(" \t"))]
            sep = " \\\n" + indent
        else:
            sep = " "
        plan.append(self.id, s, sep + "--torch_compile true", after)
        plan.edited_launches.add(id(s))
        self.finding(ctx, plan, s.words[launch.script], f"added --torch_compile true to the launch of "
                     f"{launch.script_name}: on Trainium the Trainer compiles the model with the Neuron backend")


#: flags that only optimum-neuron's training arguments had (a launch that passes one runs an optimum-neuron script)
_OPTIMUM_ONLY = frozenset(_ZERO_FLAGS) | frozenset(_DROP_FLAGS)


def _fit(marker: str, script: str, **values: str) -> str:
    """The marker naming the script, or "the script" where its name makes the marker too long."""
    text = marker.format(script=script, **values)
    return text if len(text) <= 120 else marker.format(script="the script", **values)


#: a launcher (or the notebook or document around it) that names optimum-neuron or its training classes
_OPTIMUM_NAMED = re.compile(r"optimum[-_.\s]neuron|Neuron(?:Trainer|TrainingArguments|SFTTrainer|SFTConfig)\b", re.I)


def _document(ctx, u: ShellUnit) -> str:
    """The whole file the unit comes from (a notebook's other cells, a Markdown page's prose), else the unit."""
    path = getattr(ctx, "path", None)
    try:
        return path.read_text(encoding="utf-8", errors="replace") if path is not None and path.is_file() else u.src
    except OSError:
        return u.src


#: files whose shell units are parts of a document (a notebook's cells, a page's blocks), read with their prose
_DOCUMENT_SUFFIXES = (".ipynb", ".md", ".mdx", ".markdown", ".rst", ".txt", ".py")


def _named_in(ctx, u: ShellUnit) -> str:
    """What may name optimum-neuron around a launch: the notebook or document around the unit (its prose says
    what the page runs), or, for a script that is the whole file, its code without its comments (`# needs the
    older optimum-neuron, which we do not install` says nothing of the launched script)."""
    path = getattr(ctx, "path", None)
    if path is None or path.suffix.lower() in _DOCUMENT_SUFFIXES:
        return _document(ctx, u)
    code, at = [], 0
    for start, end in sorted(u.comments):
        code.append(u.src[at:start])
        at = end
    return "".join(code) + u.src[at:]


def _accepted_by_script(ctx, script: str, flags: list[_Flag], u: ShellUnit) -> tuple[list[_Flag], list[_Flag]]:
    """(the flags this rule may edit, the TP/PP flags it must not guess about). A flag the launched script
    declares itself (its own argparse: `"--tensor_parallel_size"` in its source) is the script's and is
    kept, before and after its migration. Where the script cannot be read, TP/PP sizes move to
    TP_SIZE/PP_SIZE only on a launch that is evidently optimum-neuron's (it passes a flag only
    optimum-neuron's training arguments had, or the launcher, the notebook or the document around it names
    optimum-neuron): neuronx-distributed's examples take --tensor_parallel_size in their own argparse too."""
    text = launched_source(ctx, script)
    if text is not None:
        own = [f for f in flags if re.search(r"""['"]""" + re.escape(f.name) + r"""['"]""", text)]
        return [f for f in flags if f not in own], []
    sizes = [f for f in flags if f.name in _ENV_FLAGS]
    if not sizes or any(f.name in _OPTIMUM_ONLY for f in flags) or _OPTIMUM_NAMED.search(_named_in(ctx, u)):
        return flags, []
    return [f for f in flags if f not in sizes], sizes


#: what a script that parses TrainingArguments from its command line contains
_TRAINER_PARSERS = ("HfArgumentParser", "TrlParser", "TrainingArguments", "parse_args_into_dataclasses")


def _parses_training_arguments(ctx, script: str) -> bool:
    """Whether the launched script, read beside the launcher, parses TrainingArguments (so it accepts
    ``--torch_compile``): a plain argparse loop exits on an unknown flag. False when it cannot be read."""
    text = launched_source(ctx, script)
    return text is not None and any(name in text for name in _TRAINER_PARSERS)


def _runs_other_tool(u: ShellUnit, s: Simple) -> bool:
    """Whether the command runs a tool with a --tensor-parallel-size of its own (vLLM & co.), directly or behind
    wrappers (``nohup python -m vllm.entrypoints.openai.api_server ...``)."""
    values = [u.value(i) or "" for i in s.words]
    env: dict[str, str | None] | None = None
    for k, v in enumerate(values):
        var = _VAR_RE.fullmatch(u.text(s.words[k])) if not v else None
        if var is not None:  # `"$VLLM_BIN" serve ...`: the program a variable holds (or names)
            name = var.group(1) or var.group(2)
            env = unit_variables(u) if env is None else env
            v = env.get(name) or ""
            if any(tool in name.lower() for tool in ("vllm", "sglang")):
                return True
        if v.rsplit("/", 1)[-1] in _OTHER_TOOLS:
            return True
        if v == "-m" and k + 1 < len(values) and values[k + 1].split(".", 1)[0] in _OTHER_TOOLS:
            return True
    return False


def _echo_like(u: ShellUnit, s: Simple) -> bool:
    v = u.value(s.words[0]) if s.words else None
    return v in ("echo", "printf", "cat", "grep", ":")


# ------------------------------------------------------------------------------------------------
# NM516


HF_ASYNC = "HF_DEACTIVATE_ASYNC_LOAD"
#: what a script that uses Transformers (or one of the HF libraries on top of it) contains
_USES_TRANSFORMERS = re.compile(r"\b(?:transformers|optimum|trl|peft|diffusers|sentence_transformers)\b")
#: what a script that loads weights with them contains: a `from_pretrained` of a model (not of a config, a
#: tokenizer or a processor), a pipeline, a trainer of theirs or its arguments, a SentenceTransformer
_LOADS_WEIGHTS = re.compile(
    r"\b(?!\w*(?i:config|tokenizer|tokenizerfast|processor|featureextractor)\.from_pretrained)\w+\.from_pretrained\s*\("
    r"|\bpipeline\s*\(|TrainingArguments\b|\b\w*(?:SFT|DPO|GRPO|ORPO|KTO|Reward|Seq2Seq|Neuron)\w*Trainer\s*\("
    r"|\bSentenceTransformer\s*\(|\btransformers\.Trainer\s*\(")
#: a plain ``Trainer(`` is the HF libraries' only where they import it (Lightning has one too)
_HF_TRAINER = re.compile(r"from\s+(?:transformers|trl|optimum\.neuron)\S*\s+import\s*(?:\([^)]*|[^\n]*)\bTrainer\b")


def _loads_weights(text: str) -> bool:
    """Whether a script's source loads model weights with the HF libraries (where async loading applies)."""
    return bool(_USES_TRANSFORMERS.search(text) and (
        _LOADS_WEIGHTS.search(text) or (_HF_TRAINER.search(text) and re.search(r"\bTrainer\s*\(", text))))
#: a header line: `set -e`, `set -o pipefail`, `shopt -s extglob` and nothing else on the line
_HEADER_CMD_RE = re.compile(r"(set|shopt)(\s+[-+]?[A-Za-z0-9_]+)*\s*(#.*)?\Z")


class DeactivateAsyncLoad(ShellRule):
    id = "NM516"
    title = "HF_DEACTIVATE_ASYNC_LOAD=1 for launches of migrated Transformers scripts"
    fix = "auto"
    triggers = _FLAG_TRIGGERS + _STACK_TRIGGERS
    why = """
        Transformers' asynchronous weight loading is not supported on Neuron yet; TorchNeuron's
        launch examples set `HF_DEACTIVATE_ASYNC_LOAD=1`. In a script that neuron-migrate changes
        (or flags) and that launches Python scripts (torchrun, python, accelerate launch), the
        variable is exported once, after the shebang and the leading `#SBATCH`/comment/`set` lines.
        In a unit without a shebang (notebook `!` lines, Markdown code blocks, where an `export`
        line would not reach the next command), each launch whose flags NM515 migrated gets a
        `HF_DEACTIVATE_ASYNC_LOAD=1` prefix instead (`TP_SIZE=8 HF_DEACTIVATE_ASYNC_LOAD=1 torchrun ...`).
    """
    before = """
        #!/bin/bash
        set -e
        export XLA_USE_BF16=1
        torchrun --nproc_per_node=2 train.py
    """
    after = """
        #!/bin/bash
        set -e
        export HF_DEACTIVATE_ASYNC_LOAD=1
        torchrun --nproc_per_node=2 train.py
    """
    caveats = """
        Scripts that set or mention HF_DEACTIVATE_ASYNC_LOAD already, scripts no other rule
        changes, and scripts whose launched scripts are all read beside them and load no weights with
        the HF libraries (a neuronx-distributed example that builds its model from a config: no
        model `from_pretrained`, pipeline or trainer) are left alone. A launch that runs inside a
        function or a `$(...)` still sees the exported variable; one under `env -i` does not.
    """

    def apply(self, ctx) -> None:
        plan = plan_for(ctx, _shell_plan)
        if not isinstance(plan, ShellPlan) or HF_ASYNC in ctx.text:
            return
        # changed or flagged by another rule of this family (they all ran before this one)
        if not any(f.rule.startswith("NM51") and f.rule != self.id for f in ctx.findings):
            return
        u = plan.unit
        env = unit_variables(u)
        found = [(s, find_launch(u, s, env)) for s in u.simples if not plan.is_removed(s)]
        launches = [s for s, launch in found if launch is not None]
        # every launched script read beside the launcher and none loads weights with Transformers: nothing to set
        texts = [launched_source(ctx, launch.script_name) for _s, launch in found if launch is not None]
        if not launches or all(t is not None and not _loads_weights(t) for t in texts):
            return
        lines = ctx.lines
        if lines and lines[0].startswith("#!") and not lines[0].startswith("#!/usr/bin/env python"):
            last = 0
            for i in range(1, len(lines)):
                text = lines[i].strip()
                if not text:
                    continue
                if text.startswith(("#SBATCH", "#PBS", "#$ ", "#BSUB", "#FLUX")) or (
                        _HEADER_CMD_RE.match(text) and not text.endswith("\\")):
                    last = i
                    continue
                if text.startswith("#"):
                    continue
                break
            edit = ctx.edit_covering(last)
            if edit is None:
                ctx.replace_lines(last, last + 1, [lines[last], f"export {HF_ASYNC}=1"])
            elif edit.start == last and edit.end == last + 1:  # `#SBATCH --export=...` that NM512 edited
                ctx.update_lines(edit, last, last + 1, [*edit.new, f"export {HF_ASYNC}=1"])
            else:
                return  # pragma: no cover - header lines are single lines
            ctx.finding(last + 1, f"exported {HF_ASYNC}=1: Transformers' asynchronous weight loading is not "
                        "supported on Neuron")
            return
        # a fragment (notebook `!` lines, a Markdown block): the launches NM515 migrated get a prefix
        edited = False
        for s in launches:
            if id(s) in plan.edited_launches and plan.editable(self.id, s):
                plan.prefix(self.id, s, f"{HF_ASYNC}=1")
                self.finding(ctx, plan, s.first, f"added {HF_ASYNC}=1 to the launch: Transformers' asynchronous "
                             "weight loading is not supported on Neuron")
                edited = True
        if edited:
            plan.flush(ctx)

    def contribute(self, plan: ShellPlan, ctx) -> None:  # pragma: no cover - apply does the work
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------
# NM523


TPU_INSTALL_MARKER = "This installs the Cloud TPU runtime: keep it for TPUs, or install torch-neuronx for a neuron path."
#: what only an install for Google Cloud TPUs names
_TPU_INSTALL = re.compile(r"cloud-tpu|tpu-pytorch|torch[-_]xla\[tpu\]|libtpu")


class ShellPipInstall(ShellRule):
    id = "NM523"
    markers = PIP_INSTALL_MARKERS + long_forms(UNPARSED_MARKER, TORCHNEURON_MARKER, TORCH_MARKER, VLLM_MARKER, VLLM_TORCHNEURON_MARKER) + (
        (SERVER_INSTALL_MARKER, """The script, notebook or page starts one of the Neuron SDK's model servers (vLLM on NxD
         Inference, optimum-neuron's vLLM, DJL, TGI), which needs the SDK's own XLA-era packages: the install is
         kept as it is. Moving the server to TorchNeuron means its TorchNeuron release and configuration as a
         whole, not replacing this package."""),
        (TPU_INSTALL_MARKER, """A pip install of Google Cloud TPU's runtime (cloud-tpu-client, the tpu-pytorch torch_xla
         wheels, libtpu): it is not the Neuron stack, so nothing in it is replaced. On Trainium the native path
         installs torch-neuronx (TorchNeuron) instead."""),)
    title = "pip install command lines in scripts, notebooks and docs: old Neuron stack packages replaced"
    fix = "mixed"
    triggers = PIP_TRIGGERS
    project_triggers = TARGET_PINS
    project_probes = USES_PROBES
    project_facts_in = (USES_OLD_STACK,)
    why = """
        NM522's treatment of `RUN pip install` for the `pip install` commands of shell scripts,
        notebook `!pip install` lines and `%%bash` cells, and shell blocks of Markdown documents
        (`pip`/`pip3`, `python -m pip`, `uv pip`): `optimum-neuron` is replaced by the libraries the
        migrated code imports, the XLA runtime packages go, XLA-era `torch-neuronx`/`neuronx-cc`
        pins are dropped and libraries pinned too low are raised, with the decisions of
        NM501-NM504. Options such as `--extra-index-url` are kept.
    """
    before = """
        pip install optimum-neuron[training]==0.4.5 datasets
    """
    after = """
        pip install "transformers>=5.23" "accelerate>=1.15" "trl>=1.16" "peft>=0.21" datasets
    """
    caveats = """
        Requirements in variables, files (`-r`), paths or URLs, commands inside `$(...)` or
        heredocs, and `%pip` magics are not edited (an old-stack package given by a variable version
        or a VCS/wheel URL gets a marker saying what to do with it); a `pip install` left with nothing to install,
        or one that checks hashes, gets a marker instead. torch-xla alone counts as old Neuron
        stack only when the unit names Neuron (the Neuron repository, a `-neuronx` package). A
        script, or a notebook, that starts one of the Neuron SDK's model servers (vLLM on NxD
        Inference, optimum-neuron's vLLM, DJL, TGI) keeps its installs: the server needs its SDK's
        compiler and packages (codemods.project.serving).
    """

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        if neuron_sdk_server(u.src) or neuron_sdk_server(ctx.whole_text):
            # a model server of the Neuron SDK keeps its installs (codemods.project.serving), said once per install
            for s in u.simples:
                texts = [u.text(i) for i in s.words]
                if not plan.is_removed(s) and pip_segments(texts) and any(OLD_STACK_INSTALL.search(t) for t in texts) \
                        and plan.editable(self.id, s):
                    plan.marker(ctx, s.group, SERVER_INSTALL_MARKER)
            return
        installs: list[PipInstall] = []
        for s in u.simples:
            if plan.is_removed(s) or not s.words or for_another_device(u, s):
                continue  # (a branch for another device keeps its installs)
            texts = [u.text(i) for i in s.words]
            if any(_TPU_INSTALL.search(t) for t in texts):
                # a Cloud TPU install (its client, its torch_xla wheels): not the Neuron stack, left as it is
                if pip_segments(texts) and plan.editable(self.id, s):
                    plan.marker(ctx, s.group, TPU_INSTALL_MARKER)
                continue
            for _k, reqs, hashed, other in pip_segments(texts):
                installs.append(PipInstall(
                    s, u.groups[s.group][0] if s.group >= 0 else 0, [s.words[k] for k in reqs],
                    [texts[k] for k in reqs], [u.line_of(u.toks[s.words[k]].start) for k in reqs], hashed, other))
        hint = deps_host() in u.src or re.search(r"neuronx|aws-neuron", u.src) is not None
        apply_pip_installs(
            self.id, ctx, installs, hint,
            replace=lambda tok, text: plan.replace(self.id, tok, text),
            delete=lambda tok: plan.delete(self.id, tok),
            silenced=lambda s: not plan.editable(self.id, s),
            environment=_branch, shared="",
        )


def _branch(install: PipInstall) -> str:
    """The environment of an install in a shell script: the branch of an ``if``/``case`` it runs in (another
    branch's installs are not there: `if neuron; then pip install optimum[neuronx]; else pip install
    transformers; fi`), else the script's top level ("")."""
    body = install.key.pipeline.andor.body  # type: ignore[attr-defined]
    return f"branch {id(body)}" if body.kind in ("then", "else", "case") else ""


RULES = (LaunchFlags, DeactivateAsyncLoad, ShellPipInstall)
