"""Flags of removed TrainingArguments / SFTConfig fields on launch command lines (NM616): shell and
Slurm scripts, notebook ``!`` lines and ``%%bash`` cells, bash blocks of Markdown, Dockerfile
``RUN``/``CMD``/``ENTRYPOINT`` (shell form, exec form, ``RUN <<EOF`` scripts).

One owner per line: the shell family renders every command line through one edit plan per unit
(:class:`codemods.project.shell_plans.ShellPlan`, :class:`codemods.project.dockerfile.DockerPlan`);
this rule contributes its word edits to that same plan, so that a launch NM515 also edits
(``--tensor_parallel_size`` -> ``TP_SIZE``) stays one engine edit. What the flags become is
:mod:`codemods.upgrade.launch_args`' (read from the generated upgrade data)."""

from __future__ import annotations

import json
import re

from codemods.project.dependency_policy import USES_OLD_STACK
from codemods.project.dockerfile import DockerPlan, exec_form, docker_plan
from codemods.project.launch_flags import find_launch, unit_variables
from codemods.project.shell_plans import ShellPlan, _shell_plan, plan_for, word_value
from codemods.project.shell_syntax import ShellSyntaxError
from codemods.upgrade.launch_args import (
    ScriptKind, flag_edits, flag_table, forces_cpu, launch_in_words, rejected_names, script_kind, segment_end, trigger_flags)
from migrator.rules import TextRule


def _moves(flags: list[str], sft: bool = False) -> list[str]:
    """What each rejected flag becomes, in words."""
    table = flag_table(sft)
    moves = []
    for f in dict.fromkeys(flags):
        key = f[2:].replace("-", "_")
        neg = key.startswith("no_") and key not in table
        entry = table.get(key[3:] if neg else key, {})
        moves.append(f"{f} becomes --{entry['new']}" if entry.get("new") and not neg else f"remove {f}")
    return moves


def moves_text(moves: list[str], flags: list[str], width: int = 56) -> str:
    """What the rejected flags become, as one clause of a marker (only their names where that is long:
    the finding's detail has the whole list)."""
    text = moves[0] if len(moves) == 1 else ", ".join(moves[:-1]) + " and " + moves[-1]
    return text if len(text) <= width else "fix " + ", ".join(dict.fromkeys(flags))


def _them(flags: list[str]) -> str:
    return "it" if len(set(flags)) == 1 else "them"


def _unknown_message(kind: ScriptKind, flags: list[str]) -> str:
    return (f"If {_short(kind.name)} parses TrainingArguments, {moves_text(_moves(flags), flags)}: transformers 5.23 "
            f"rejects {_them(flags)}.")


def _short(name: str) -> str:
    return name if len(name) <= 24 else "…" + name[-23:]


USE_CPU_MARKER = "Drop --use_cpu from this launch to train on the neuron device: Transformers 5 trains on the CPU with it."
LAUNCHER_MARKERS = (
    (USE_CPU_MARKER,
     """The launched script parses TrainingArguments, and transformers 5.23 keeps a run with use_cpu on the CPU
     (PartialState(cpu=True)) whatever accelerator is there; the torch-xla launch this came from used the Neuron
     device. Drop the flag (or set it False) unless the run is meant for the CPU."""),
    ("If {script} parses TrainingArguments, {what}: transformers 5.23 rejects {them}.",
     """The launched script is not in the project, so the rule cannot tell whether it parses
     TrainingArguments (HfArgumentParser, TrlParser), whose transformers 5.23 parser rejects these
     flags; a script with its own argparse options keeps them. The detail lists what each flag becomes."""),
    ("Where {variables} is set, {what}: {script}'s argument parser rejects {them}.",
     """The flags are held in a shell variable set elsewhere (another file, the caller's environment), so
     the rule cannot edit them where they are written."""),
)


#: a file about Neuron (where a --use_cpu launch was a Neuron run)
_NEURON = re.compile(r"neuron|XLA_USE_BF16|PJRT_DEVICE", re.IGNORECASE)


def _delete_elements(plan: DockerPlan, rule: str, g: int, spans: list[tuple[int, int]], gone: list[int]) -> None:
    """Remove elements of an exec-form JSON array: each run of removed elements with the comma
    after it, or, for a run that ends the array, with the comma before it."""
    runs: list[list[int]] = []
    for k in sorted(set(gone)):
        if runs and runs[-1][-1] == k - 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    for run in runs:
        if run[-1] + 1 < len(spans):
            plan.span(rule, g, spans[run[0]][0], spans[run[-1] + 1][0], "")
        else:
            plan.span(rule, g, spans[run[0] - 1][1], spans[run[-1]][1], "")


class LauncherFlags(TextRule):
    id = "NM616"
    markers = LAUNCHER_MARKERS
    title = "launch command lines (shell, Slurm, notebook !, Dockerfile): flags of removed TrainingArguments/SFTConfig fields"
    fix = "mixed"
    kinds = ("shell", "dockerfile")
    triggers = trigger_flags()
    why = """
        The 5.23 HfArgumentParser (and TRL 1.16's TrlParser) exits with "the following arguments
        are not recognized" on a flag whose TrainingArguments / SFTConfig field is gone (the
        generated upgrade data lists them). On the command lines that launch a script which parses
        its arguments that way (`python`, `torchrun`, `python -m torch.distributed.run`,
        `accelerate launch`, behind `srun`, `uv run`...; in shell and Slurm scripts, notebook `!`
        lines, Markdown bash blocks and Dockerfile `RUN`/`CMD`/`ENTRYPOINT`): a renamed field's
        flag is renamed (`--evaluation_strategy` -> `--eval_strategy`, `--per_gpu_train_batch_size`
        -> `--per_device_train_batch_size`, and for a TRL SFT script `--max_seq_length` ->
        `--max_length`), `--group_by_length` becomes `--train_sampling_strategy group_by_length`,
        `--logging_dir DIR` becomes `TENSORBOARD_LOGGING_DIR=DIR` in the launch's environment, and
        any other (`--overwrite_output_dir`, `--save_safetensors`...) is removed with its value,
        the finding saying what replaces it.
    """
    before = """
        torchrun --nproc_per_node 2 run_clm.py --output_dir out --evaluation_strategy steps --overwrite_output_dir --logging_dir logs
    """
    after = """
        TENSORBOARD_LOGGING_DIR=logs torchrun --nproc_per_node 2 run_clm.py --output_dir out --eval_strategy steps
    """
    caveats = """
        A script of the project is read to tell whether it parses HF arguments (HfArgumentParser,
        TrlParser, `parse_args_into_dataclasses`; SFTConfig for the TRL flags): one that does not
        (its own argparse) is left alone, and so is a flag the script declares itself. A script
        not in the project (notebook and Markdown lines, which carry no location; an absent path)
        is edited only when it is one of Transformers' example scripts (`run_clm.py`,
        `run_glue.py`...); otherwise a launch that passes `--output_dir` gets a marker naming the
        flags. Flags held in a variable the launch expands (`ARGS="--overwrite_output_dir"`) are
        not edited: the launch gets a marker saying what each becomes. In a file about Neuron (or a run
        that migrates old-stack code), a launch of such a script with `--use_cpu` on (or `--no_cuda`,
        renamed to it) gets a marker: Transformers 5 trains on the CPU with it, the torch-xla run did not.
    """

    def apply(self, ctx) -> None:
        if ctx.kind == "dockerfile":
            plan = docker_plan(ctx)
            if plan is None:
                return
            self._docker(plan, ctx)
            for _g, body in plan.bodies():
                self._shell(body, ctx)
            plan.flush(ctx)
            return
        plan = plan_for(ctx, _shell_plan)
        if not isinstance(plan, ShellPlan):
            return
        self._shell(plan, ctx)
        plan.flush(ctx)

    # -- shell units ------------------------------------------------------------------------------
    def _shell(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        env = unit_variables(u)
        for s in u.simples:
            if plan.is_removed(s):
                continue
            launch = find_launch(u, s, env)
            if launch is None:
                continue
            args = [i for i in launch.args if i not in plan.deleted]
            texts = [u.text(i) for i in args]
            values = [u.value(i) for i in args]
            flags = rejected_names(values, True, texts)
            held = self._held_flags(texts, env)
            cpu = forces_cpu(values)
            if not flags and not held and not cpu:
                continue
            module = launch.script > 0 and u.value(s.words[launch.script - 1]) == "-m"
            kind = script_kind(u.value(s.words[launch.script]) or "", ctx.path, module)
            if not plan.editable(self.id, s):
                continue
            if cpu and kind.hf and not kind.declares("use_cpu") and (
                    USES_OLD_STACK in ctx.facts or _NEURON.search(ctx.whole_text)):
                plan.marker(ctx, s.group, USE_CPU_MARKER)  # (a launch of a Neuron project: CPU runs elsewhere stay)
            held = [(var, [f for f in fs if f in rejected_names(fs, kind.sft)]) for var, fs in held]
            held = [(var, fs) for var, fs in held if fs]
            if held and kind.hf:
                names = ", ".join(f"${var}" for var, _ in held)
                moves = _moves([f for _, fs in held for f in fs], kind.sft)
                held_flags = [f for _, fs in held for f in fs]
                plan.marker(ctx, s.group, f"Where {names} is set, {moves_text(moves, held_flags)}: "
                           f"{_short(kind.name)}'s argument parser rejects {_them(held_flags)}.",
                           detail="; ".join(moves))
            if not flags:
                continue
            if not kind.hf:
                if not kind.known and "--output_dir" in {(v or "").partition("=")[0] for v in values}:
                    only = rejected_names(values, False, texts)
                    if only:
                        plan.marker(ctx, s.group, _unknown_message(kind, only), detail="; ".join(_moves(only)))
                continue
            for e in flag_edits(texts, values, kind):
                if e.kind == "replace":
                    plan.replace(self.id, args[e.indices[0]], e.text)
                else:
                    for k in e.indices:
                        plan.delete(self.id, args[k])
                    if e.kind == "env":
                        plan.prefix(self.id, s, e.text)
                if e.message:
                    tok = args[e.indices[0]]
                    ctx.finding(plan.offset + u.line_of(u.toks[tok].start), e.message, "applied",
                                u.col_of(u.toks[tok].start) + 1)

    @staticmethod
    def _held_flags(texts: list[str], env: dict) -> list[tuple[str, list[str]]]:
        """Rejected flags in the value of a variable the launch expands (``$ARGS``, ``${ARGS[@]}``),
        assigned once in the unit: (variable, flags)."""
        out = []
        for text in texts:
            m = re.fullmatch(r'"?\$\{?([A-Za-z_][A-Za-z0-9_]*)(?:\[@\])?\}?"?', text)
            value = env.get(m.group(1)) if m else None
            if value:
                words = value.strip("()").split()
                found = rejected_names(list(words), True)
                if found:
                    out.append((m.group(1), found))
        return out

    # -- Dockerfiles ------------------------------------------------------------------------------
    def _docker(self, plan: DockerPlan, ctx) -> None:
        u = plan.unit
        for g, ins in enumerate(u.instructions):
            if ins.keyword not in ("RUN", "CMD", "ENTRYPOINT") or ins.inner_comments or plan.silenced(self.id, g):
                continue
            array = exec_form(u.src, ins)
            if array is not None:
                spans, values = array
                texts = [u.src[a:b] for a, b in spans]
                self._docker_words(plan, ctx, g, ins, texts, list(values), spans)
                continue
            text = u.src[ins.args_start: ins.end]
            if text.lstrip().startswith("[") or "<<" in text:
                continue
            try:
                words = u.words(ins)
            except ShellSyntaxError:
                continue
            self._docker_words(plan, ctx, g, ins, [w.text for w in words], [word_value(w.text) for w in words], None)

    def _docker_words(self, plan: DockerPlan, ctx, g: int, ins, texts: list[str], values: list[str | None],
                      spans: list[tuple[int, int]] | None) -> None:
        for script, module, first in launch_in_words(values):
            end = segment_end(values, script)
            a_texts, a_values = texts[script + 1: end], values[script + 1: end]
            flags = rejected_names(a_values, True, a_texts)
            if not flags:
                continue
            kind = script_kind(values[script] or "", ctx.path, module)
            if not kind.hf:
                if not kind.known and "--output_dir" in {(v or "").partition("=")[0] for v in a_values}:
                    only = rejected_names(a_values, False, a_texts)
                    if only:
                        plan.marker(ctx, g, _unknown_message(kind, only), detail="; ".join(_moves(only)))
                continue
            if spans is not None:  # JSON strings: edit their values, write JSON
                a_texts = [v or "" for v in a_values]
            gone: list[int] = []
            for e in flag_edits(a_texts, a_values, kind, env_ok=spans is None):
                idx = [script + 1 + k for k in e.indices]
                if spans is not None:
                    if e.kind == "replace":
                        a, b = spans[idx[0]]
                        plan.span(self.id, g, a, b, ", ".join(json.dumps(w) for w in e.text.split(" ")))
                    else:
                        gone += idx
                else:
                    if e.kind == "replace":
                        plan.replace(self.id, (g, idx[0]), e.text)
                    else:
                        for k in idx:
                            plan.delete(self.id, (g, k))
                        if e.kind == "env":
                            plan.replace(self.id, (g, first), f"{e.text} {texts[first]}")
                if e.message:
                    ctx.finding(ins.first, e.message)
                if e.manual:
                    plan.marker(ctx, g, e.manual)
            if spans is not None:
                _delete_elements(plan, self.id, g, spans, gone)


RULES = (LauncherFlags,)
