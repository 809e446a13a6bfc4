"""Helpers of the upgrade rules (NM6xx): what a call's callee is in the pinned target stack, and
editing a call's keyword arguments so that the edits compose with the Neuron rules' edits of the
same call. No rules here."""

from __future__ import annotations

import libcst as cst

from codemods.common.renames import load_table
from migrator.rules import PythonContext
from migrator.selfcheck.targetapi import api


def target_of(ctx: PythonContext, func: cst.BaseExpression) -> str | None:
    """The qualified name of ``func`` in the target stack: through the module's imports, and
    through the rename table for an old-stack name the Neuron rules rename (so that the upgrade
    applies to the code they emit: ``NeuronTrainingArguments`` is ``transformers.TrainingArguments``).
    A method (``X.from_pretrained``) maps its class. None: not a target-library callable."""
    qual = ctx.qualname(func)
    if qual is None:
        return None
    table = load_table()
    if qual in table:
        qual = table[qual].target
    else:
        owner, _, attr = qual.rpartition(".")
        if owner in table:
            qual = f"{table[owner].target}.{attr}"
    return qual if api().is_target(qual) else None


def renamed_keyword(target: str, old: str, new: str) -> bool:
    """True when the target rejects ``old`` and accepts ``new`` (the installed libraries say so)."""
    return api().accepts(target, old) is False and api().accepts(target, new) is True


def rename_keyword(ctx: PythonContext, arg: cst.Arg, new: str) -> None:
    """Rename one keyword argument by editing its keyword only: the edit lies below the call, so it
    is applied before (and kept by) whatever another rule does to the call itself, and the call
    node another rule builds stays the one it built."""
    ctx.replace(arg.keyword, cst.Name(new))


def owned_elsewhere(ctx: PythonContext, func: cst.BaseExpression, rule_id: str) -> bool:
    """True when another rule owns the callee (an optimum-neuron class): it rewrites the call."""
    qual = ctx.qualname(func)
    if qual is None:
        return False
    owner = ctx.owner(qual)
    if owner is None and "." in qual:
        owner = ctx.owner(qual.rpartition(".")[0])  # Class.from_pretrained: the class's owner
    return owner not in (None, rule_id)
