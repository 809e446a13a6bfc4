"""NM513: ``NEURON_CC_FLAGS`` stripped of XLA-era compiler flags, in shell units and Dockerfile ``ENV``.

The one rule of the project family that edits two file kinds: it sits above both the shell plan
(:mod:`codemods.project.shell_plans`) and the Dockerfile plan (:mod:`codemods.project.dockerfile`).
"""

from __future__ import annotations

import re
from typing import Callable

from codemods.project.dockerfile import _env_instructions, docker_plan
from codemods.project.serving import neuron_sdk_server
from codemods.project.shell_plans import ShellPlan, ShellRule, appends, assignments
from migrator.model import fitted

#: neuronx-cc flags that only made sense for the XLA training pipeline (removed); value: takes an argument
CC_DROP_FLAGS = {
    "--distribution-strategy": True,
    "--cache_dir": True,
    "--retry_failed_compilation": False,
}
#: neuronx-cc flags of the XLA era that change numerics: kept, and flagged for a person to check
CC_CHECK_FLAGS = (
    "--model-type",  # selects the compiler's model-specific passes; its effect on TorchNeuron is not established
    "--auto-cast",
    "--auto-cast-type",
    "--enable-saturate-infinity",
    "--enable-mixed-precision-accumulation",
)


def _flag_name(flag: str) -> str:
    return flag.split("=", 1)[0]


def split_cc_flags(content: str) -> tuple[list[str], list[str]] | None:
    """(kept, dropped) flags of a NEURON_CC_FLAGS value; None if it is not plain words."""
    if any(c in content for c in "\"'\\`") or "$(" in content:
        return None
    words = content.split()
    kept: list[str] = []
    dropped: list[str] = []
    k = 0
    while k < len(words):
        w = words[k]
        name = _flag_name(w)
        if name in CC_DROP_FLAGS:
            if "=" not in w and CC_DROP_FLAGS[name] and k + 1 < len(words) and not words[k + 1].startswith(("-", "$")):
                dropped.append(f"{w} {words[k + 1]}")
                k += 2
                continue
            dropped.append(w)
        else:
            kept.append(w)
        k += 1
    return kept, dropped


def _self_ref(word: str) -> bool:
    return word in ("$NEURON_CC_FLAGS", "${NEURON_CC_FLAGS}")


def cc_flags_plan(raw: str, keep_for_cache: bool = True) -> tuple[str, str | None, str | None] | None:
    """What to do with `NEURON_CC_FLAGS=<raw>`.

    Returns (action, new raw value or None, marker message or None) with action "remove",
    "rewrite" or "mark"; None when there is nothing XLA-era in it."""
    quote = raw[:1] if raw[:1] in "\"'" else ""
    if quote and len(raw) >= 2 and raw.endswith(quote) and quote not in raw[1:-1]:
        content = raw[1:-1]
    elif not quote and re.fullmatch(r"[A-Za-z0-9_=./:,+@%{}$-]*", raw):
        content = raw
    else:
        content = None
    checks = [f for f in CC_CHECK_FLAGS if re.search(re.escape(f) + r"(?![A-Za-z0-9_-])", raw)]
    drops = [f for f in CC_DROP_FLAGS if re.search(re.escape(f) + r"(?![A-Za-z0-9_-])", raw)]
    if not checks and not drops:
        return None
    split = split_cc_flags(content) if content is not None else None
    if split is None:
        return ("mark", None, fitted(CC_MARK_MARKER.format(flags=" ".join(drops + checks)), CC_MARK_PLAIN))
    kept, dropped = split
    meaningful = [w for w in kept if not _self_ref(w)]
    if dropped and not meaningful and not (keep_for_cache and cache_dir_message(dropped)):
        return ("remove", None, None)  # (a dropped cache folder keeps the line, emptied, for its marker)
    message = cc_check_message(meaningful)
    if not dropped:
        return ("mark", None, message)
    new_content = " ".join(kept)
    q = quote or ('"' if " " in new_content else "")
    return ("rewrite", f"{q}{new_content}{q}", message)


def cache_dir_message(dropped: list[str]) -> str | None:
    """The marker for a dropped ``--cache_dir=<dir>``: the XLA stack kept its compile cache there (a SageMaker
    job's output folder, a shared file system); TorchNeuron's cache directory is set otherwise."""
    for flag in dropped:
        name, _, value = flag.replace(" ", "=", 1).partition("=")
        if name == "--cache_dir" and value and _URL_LIKE.search(value):
            return fitted(CACHE_URL_MARKER.format(dir=value), CACHE_URL_PLAIN)
        if name == "--cache_dir" and value:
            return fitted(CACHE_DIR_MARKER.format(dir=value), CACHE_DIR_SHORT.format(dir=value), CACHE_DIR_PLAIN)
    return None


#: a cache location that is (or may be) a URL: `s3://bucket/cache`, `$NEURON_COMPILE_CACHE_URI`, `${CACHE_URL}`
_URL_LIKE = re.compile(r"://|\$\{?\w*UR[IL]\b", re.I)


def _dropped_cache_message(value: str) -> str | None:
    """:func:`cache_dir_message` of the flags a NEURON_CC_FLAGS value (quoted or not) loses."""
    split = split_cc_flags(value.strip("\"'"))
    return cache_dir_message(split[1]) if split else None


def cc_check_message(flags: list[str]) -> str | None:
    """The marker naming the kept flags whose effect on TorchNeuron is not established (:data:`CC_CHECK_FLAGS`),
    None when none is left (the others are compiler options: nothing to check). The same text before and after
    the XLA-era flags are removed, so that a second run agrees."""
    checks: list[str] = []
    for i, flag in enumerate(flags):
        if _flag_name(flag) in CC_CHECK_FLAGS:
            value = flags[i + 1] if "=" not in flag and i + 1 < len(flags) and not flags[i + 1].startswith("-") else ""
            checks.append(f"{flag} {value}".strip())  # `--model-type transformer`: the value is its next word
    if not checks:
        return None
    names = ", ".join(dict.fromkeys(_flag_name(f) for f in checks))
    return fitted(CC_CHECK_MARKER.format(flags=" ".join(checks)), CC_CHECK_MARKER.format(flags=names), CC_CHECK_PLAIN)


CC_CHECK_MARKER = "Check that TorchNeuron's compiler still needs NEURON_CC_FLAGS {flags} (set for the XLA stack)."
CC_MARK_MARKER = "Remove the XLA-era flags {flags} from NEURON_CC_FLAGS, keeping only what TorchNeuron still needs."
CC_CHECK_PLAIN = "Check that TorchNeuron's compiler still needs the flags of NEURON_CC_FLAGS (set for the XLA stack)."
CC_MARK_PLAIN = "Remove the XLA-era flags from NEURON_CC_FLAGS, keeping only what TorchNeuron still needs."
CACHE_DIR_MARKER = "--cache_dir={dir} was dropped: set TORCH_NEURONX_NEFF_CACHE_DIR={dir} to keep the compile cache there."
CACHE_DIR_SHORT = "Set TORCH_NEURONX_NEFF_CACHE_DIR={dir} to keep the compile cache there (--cache_dir was dropped)."
CACHE_DIR_PLAIN = ("--cache_dir was dropped: set TORCH_NEURONX_NEFF_CACHE_DIR to it if the compile cache should stay "
                   "there.")
CACHE_URL_MARKER = ("--cache_dir={dir} was dropped: TORCH_NEURONX_NEFF_CACHE_DIR takes a local folder, so sync one "
                    "with that URL.")
CACHE_URL_PLAIN = ("--cache_dir (a URL) was dropped: TORCH_NEURONX_NEFF_CACHE_DIR takes a local folder, so sync one "
                   "with that URL.")
CC_MARKERS = (
    (CACHE_URL_MARKER,
     """The XLA stack's compiler could keep its cache at an S3 URL given as --cache_dir. TorchNeuron ignores the
     flag; its cache folder, TORCH_NEURONX_NEFF_CACHE_DIR, is a path on a local or shared file system: point it
     at one and copy that folder to and from the URL (aws s3 sync) to share the cache between jobs."""),
    (CACHE_URL_PLAIN,
     """The XLA stack's compiler could keep its cache at an S3 URL given as --cache_dir; TorchNeuron's cache
     folder, TORCH_NEURONX_NEFF_CACHE_DIR, is a path on a local or shared file system."""),
    (CACHE_DIR_MARKER,
     """The XLA stack's compiler kept its cache (the compiled NEFFs) in the --cache_dir folder: a SageMaker job's
     output folder to upload it, a shared file system for the other nodes, a pre-built cache unpacked there.
     TorchNeuron ignores the flag; its cache folder is TORCH_NEURONX_NEFF_CACHE_DIR. An old cache's files are not
     TorchNeuron's: it compiles again."""),
    (CACHE_DIR_SHORT,
     """The XLA stack's compiler kept its cache in the --cache_dir folder; TorchNeuron's cache folder is
     TORCH_NEURONX_NEFF_CACHE_DIR."""),
    (CACHE_DIR_PLAIN,
     """The XLA stack's compiler kept its cache in the --cache_dir folder; TorchNeuron's cache folder is
     TORCH_NEURONX_NEFF_CACHE_DIR."""),
    (CC_CHECK_MARKER,
     """These compiler flags were chosen for the XLA stack's neuronx-cc graphs (optimisation level,
     saturation, auto-cast). TorchNeuron compiles through torch.compile(backend="neuron") and may not
     need them, or treat them differently: keep a flag only where the compiled model still needs it."""),
    (CC_MARK_MARKER,
     """The value holds flags only the XLA-era compiler path used (for instance --model-type), and the
     rule cannot edit it safely here (a value built at run time, or an edit another rule made on the
     line). Whether TorchNeuron still needs the other flags is to be checked by hand."""),
    (CC_CHECK_PLAIN,
     """These compiler flags were chosen for the XLA stack's neuronx-cc graphs (optimisation level,
     saturation, auto-cast, instruction limits). TorchNeuron compiles through torch.compile(backend="neuron")
     and may not need them, or treat them differently: keep a flag only where the compiled model still needs
     it."""),
    (CC_MARK_PLAIN,
     """The value holds flags only the XLA-era compiler path used, and the rule cannot edit it safely here
     (a value built at run time, or an edit another rule made on the line)."""),
)


class NeuronCcFlags(ShellRule):
    id = "NM513"
    markers = CC_MARKERS
    title = "NEURON_CC_FLAGS stripped of XLA-era compiler flags"
    fix = "mixed"
    triggers = ("NEURON_CC_FLAGS",)
    why = """
        `NEURON_CC_FLAGS` passed neuronx-cc options to the XLA stack's compiler.
        `--distribution-strategy`, `--cache_dir` and `--retry_failed_compilation` belonged to that
        pipeline (optimum-neuron and neuron_parallel_compile set them) and are removed; an
        assignment left empty is removed (one that held a `--cache_dir=<dir>` stays, emptied, with a
        marker naming the folder for TorchNeuron's cache setting, `TORCH_NEURONX_NEFF_CACHE_DIR`). `--model-type` (the compiler's model-specific passes),
        flags that change numerics (`--auto-cast`, `--auto-cast-type`, `--enable-saturate-infinity`,
        `--enable-mixed-precision-accumulation`) and any other flag are kept and flagged: whether
        TorchNeuron's `torch.compile` path honours them is not established.
    """
    before = """
        export NEURON_CC_FLAGS="--distribution-strategy=llm-training --retry_failed_compilation"
        export NEURON_CC_FLAGS="--distribution-strategy llm-training --model-type transformer -O1"
    """
    after = """
        # TODO(neuron-migrate NM513): Check that TorchNeuron's compiler still needs NEURON_CC_FLAGS --model-type transformer (set for the XLA stack).
        export NEURON_CC_FLAGS="--model-type transformer -O1"
    """
    kinds = ("shell", "dockerfile")
    caveats = """
        Values built with quotes inside, escapes or `$(...)` are only flagged. Also applies to
        `ENV NEURON_CC_FLAGS=...` in Dockerfiles. An append (`NEURON_CC_FLAGS+=" --flag"`) that adds
        only XLA-era flags is removed; one that adds other flags too is flagged, not rewritten.
    """

    def apply(self, ctx) -> None:
        if ctx.kind == "dockerfile":
            dockerfile_cc_flags(self.id, ctx)
            return
        super().apply(ctx)

    def contribute(self, plan: ShellPlan, ctx) -> None:
        u = plan.unit
        if neuron_sdk_server(u.src):
            return  # a model server of the Neuron SDK keeps its compiler flags (codemods.project.serving)
        for s in u.simples:
            for a in plan.assignments(s):
                if a.name != "NEURON_CC_FLAGS" or a.value is None:
                    continue
                start = u.toks[a.tok].start
                edit_cc_flags(
                    ctx, u.text(a.tok), a.value, plan.editable(self.id, s), u.line_of(start), u.col_of(start) + 1,
                    delete=lambda tok=a.tok: plan.delete(self.id, tok),
                    replace=lambda text, tok=a.tok: plan.replace(self.id, tok, text),
                    mark=lambda message, g=s.group: plan.marker(ctx, g, message),
                )
            for a in appends(u, s):
                if a.name == "NEURON_CC_FLAGS" and a.value is not None:
                    self._append(plan, ctx, s, a)

    def _append(self, plan: ShellPlan, ctx, s, a) -> None:
        """``NEURON_CC_FLAGS+=" --flag"``: the flags it adds are judged as an assignment's; an append of
        XLA-era flags only goes, one that mixes them with others gets a marker (its text is a fragment of
        the value: it is not rewritten)."""
        decided = cc_flags_plan(a.value, keep_for_cache=False)
        if decided is None:
            return
        action, _new, message = decided
        u = plan.unit
        if action == "remove" and plan.editable(self.id, s):
            plan.delete(self.id, a.tok)
            start = u.toks[a.tok].start
            ctx.finding(u.line_of(start), "removed an append to NEURON_CC_FLAGS: it only added XLA-era compiler flags",
                        "applied", u.col_of(start) + 1)
            cache = _dropped_cache_message(a.value)
            if cache:
                plan.marker(ctx, s.group, cache)
            return
        plan.marker(ctx, s.group, message or CC_MARK_PLAIN)


def edit_cc_flags(
    ctx,
    word: str,
    value: str,
    editable: bool,
    line: int,
    column: int,
    delete: Callable[[], None],
    replace: Callable[[str], None],
    mark: Callable[[str], None],
) -> None:
    """NM513 on one `NEURON_CC_FLAGS=<value>` word (a shell assignment or a Dockerfile ENV pair)."""
    decided = cc_flags_plan(value)
    if decided is None:
        return
    action, new, message = decided
    if action != "mark" and not editable:
        action, message = "mark", CC_MARK_PLAIN
    if action == "remove":
        delete()
        ctx.finding(line, "removed NEURON_CC_FLAGS: it only held XLA-era compiler flags", "applied", column)
    elif action == "rewrite":
        replace(word[: len(word) - len(value)] + str(new))
        gone = split_cc_flags(value.strip("\"'"))
        ctx.finding(line, "removed XLA-era flags from NEURON_CC_FLAGS: " + " ".join(gone[1] if gone else ()),
                    "applied", column)
    if message:
        mark(message)
    if action in ("remove", "rewrite"):
        # (after the check marker: a shell line carries one marker, and the check's is there on a second run too)
        cache = _dropped_cache_message(value)
        if cache:
            mark(cache)


def dockerfile_cc_flags(rule: str, ctx) -> None:
    """NM513 on `ENV NEURON_CC_FLAGS=...` (called by the NM513 rule for Dockerfiles)."""
    plan = docker_plan(ctx)
    if plan is None or neuron_sdk_server(plan.unit.src):
        return
    u = plan.unit
    for g, ins, pairs, legacy, editable in _env_instructions(plan, rule):
        for p in pairs:
            if p.name != "NEURON_CC_FLAGS":
                continue
            w = u.words(ins)[p.word]
            edit_cc_flags(
                ctx, w.text, p.value, editable and not legacy, u.line_of(w.start), u.col_of(w.start) + 1,
                delete=lambda key=(g, p.word): plan.delete(rule, key),
                replace=lambda text, key=(g, p.word): plan.replace(rule, key, text),
                mark=lambda message, g=g: plan.marker(ctx, g, message),
            )
    plan.flush(ctx)

RULES = (NeuronCcFlags,)
