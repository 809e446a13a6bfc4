"""Command-line flags of removed TrainingArguments fields in Python argument lists (NM614):
``subprocess.run(["python", "train.py", "--evaluation_strategy", "epoch", ...])``,
``sys.argv += ["--overwrite_output_dir"]``. The 5.23 HfArgumentParser exits with "the following
arguments are not recognized" on any flag whose field the target removed (the generated upgrade
data lists them): a renamed field's flag is renamed, any other is dropped with its value."""

from __future__ import annotations

import libcst as cst

from codemods.upgrade.calls import removed_fields_of
from codemods.upgrade.data import data
from migrator.rules import PythonContext, PythonRule
from migrator.selfcheck.targetapi import api

TRAINING_ARGUMENTS = "transformers.TrainingArguments"
BOOL_WORDS = {"true", "false", "1", "0", "yes", "no", "True", "False"}
#: the fields whose flag an argument list may carry, with NM602's rename and drop
EXTRA_RENAMES = {"evaluation_strategy": "eval_strategy"}


def _text(el: cst.BaseElement) -> str | None:
    v = el.value
    if isinstance(v, cst.SimpleString) and v.prefix.lower() in ("", "r", "u"):
        return v.evaluated_value if isinstance(v.evaluated_value, str) else None
    return None


def _is_argument_list(ctx: PythonContext, node: cst.List | cst.Tuple) -> bool:
    """A list of command words: it names a .py script or ``-m``, or it is passed to subprocess /
    added to sys.argv."""
    words = [_text(e) for e in node.elements]
    if any(w and (w.endswith(".py") or w == "-m") for w in words):
        return True
    for anc in reversed(ctx.stack[:-1]):
        if isinstance(anc, cst.Call):
            q = ctx.qualname(anc.func) or ""
            return q.startswith(("subprocess.", "os.exec")) or q in ("sys.argv.extend", "sys.argv.append")
        if isinstance(anc, (cst.AugAssign, cst.Assign)):
            targets = [anc.target] if isinstance(anc, cst.AugAssign) else [t.target for t in anc.targets]
            return any(ctx.qualname(t) == "sys.argv" for t in targets)
        if isinstance(anc, cst.BaseStatement):
            return False
    return False


def rejected_flags() -> dict[str, str | None]:
    """Flag name (without dashes) -> the new field's name, or None (dropped)."""
    out: dict[str, str | None] = {}
    for name, entry in removed_fields_of(TRAINING_ARGUMENTS).items():
        if api().accepts(TRAINING_ARGUMENTS, name) is not False:
            continue
        new = entry.get("renamed_to") or EXTRA_RENAMES.get(name)
        out[name] = new if new and api().accepts(TRAINING_ARGUMENTS, new) is True else None
    return out


class CliFlagLists(PythonRule):
    id = "NM614"
    title = "argument lists (subprocess, sys.argv): flags of removed TrainingArguments fields renamed or dropped"
    fix = "mixed"
    # the flags of the removed fields, from the data (a loose '"--' matches every argparse user)
    triggers = tuple(sorted(f"--{name}" for name in data().removed_fields(TRAINING_ARGUMENTS)
                            if not name.startswith("_")))
    why = """
        A script that builds its trainer's command line in Python (a subprocess list, `sys.argv`
        edits in a notebook) passes flags like `--evaluation_strategy` or
        `--overwrite_output_dir`; the 5.23 HfArgumentParser rejects every flag whose
        TrainingArguments field is gone (the generated upgrade data lists them) and the script
        exits before training. A renamed field's flag is renamed; any other is dropped with its
        value.
    """
    before = """
        import subprocess

        subprocess.run(["python", "run_clm.py", "--evaluation_strategy", "epoch", "--overwrite_output_dir"])
    """
    after = """
        import subprocess

        subprocess.run(["python", "run_clm.py", "--eval_strategy", "epoch"])
    """
    caveats = """
        Only string literals that are whole elements of a list or tuple literal of command words
        (one naming a `.py` script or `-m`, or passed to `subprocess`/`sys.argv`). A boolean flag's
        literal value (`true`/`false`) is dropped with it; a non-literal value next to a dropped
        flag gets a marker. Shell and Slurm launchers are not covered by this rule.
    """

    def handlers(self):
        return {cst.List: self._on_list, cst.Tuple: self._on_list}

    def _on_list(self, node: cst.List | cst.Tuple, ctx: PythonContext) -> None:
        words = [_text(e) for e in node.elements]
        if not any(w and w.startswith("--") for w in words) or not _is_argument_list(ctx, node):
            return
        flags = rejected_flags()
        drop: set[int] = set()
        for i, w in enumerate(words):
            if not w or not w.startswith("--"):
                continue
            name, eq, value = w[2:].partition("=")
            key = name.replace("-", "_")
            if key not in flags:
                continue
            new = flags[key]
            el = node.elements[i]
            if removed_fields_of(TRAINING_ARGUMENTS)[key].get("true_is"):
                ctx.marker(node, f"{w} is gone in transformers v5: pass --{removed_fields_of(TRAINING_ARGUMENTS)[key]['true_is'][0]} "
                                 f"{removed_fields_of(TRAINING_ARGUMENTS)[key]['true_is'][1]} instead")
                continue
            if new is not None:
                q = el.value.quote if isinstance(el.value, cst.SimpleString) else '"'
                text = f"--{new}{eq}{value}"
                ctx.replace(el.value, cst.SimpleString(f"{q}{text}{q}"))
                ctx.finding(el, f"{w} -> --{new} (renamed in transformers v5)")
                continue
            drop.add(i)
            nxt = words[i + 1] if i + 1 < len(words) else None
            if not eq and i + 1 < len(words):
                if nxt is not None and (nxt in BOOL_WORDS or not nxt.startswith("-")):
                    drop.add(i + 1)
                elif nxt is None and not isinstance(node.elements[i + 1].value, cst.SimpleString):
                    ctx.marker(node, f"{w} was dropped (gone from TrainingArguments in transformers v5): "
                                     "check the value after it")
            ctx.finding(el, f"{w} dropped (its TrainingArguments field is gone in transformers v5)")
        if drop:
            def edit(updated):
                kept = [e for i, e in enumerate(updated.elements) if i not in drop]
                if kept and len(kept) < len(updated.elements):
                    last = updated.elements[-1]
                    kept[-1] = kept[-1].with_changes(comma=last.comma)
                return updated.with_changes(elements=kept)

            ctx.replace(node, edit)


RULES = (CliFlagLists,)
