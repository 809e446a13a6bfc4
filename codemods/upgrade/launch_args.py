"""What the flags of a launch command line become when the launched script parses its arguments
with the 5.23 HfArgumentParser / TRL 1.16 TrlParser (NM616, ``launchers``), and whether it does.

Stdlib plus the upgrade data; no rule here. A *launch* is read by the shell family
(:func:`codemods.project.launch_flags.find_launch`) or, for Dockerfile ``RUN``/``CMD`` words, by
:func:`launch_in_words`; :func:`flag_edits` turns its argument words into edits that the caller
applies through the edit plan of its file kind (one plan per unit: the NM51x rules edit the same
command lines).

Which scripts parse HF arguments (:func:`script_kind`): a script of the project (found next to the
launcher file or in the directories above it, up to the project root) is read: it parses them when
it uses ``HfArgumentParser``/``TrlParser``/``parse_args_into_dataclasses``; it is a TRL SFT script
when it also names ``SFTConfig``. A flag the script declares itself (a dataclass field of its own,
an ``add_argument("--name")``) is its own and never touched. A script that is not in the project
(a notebook's ``!python`` line, a Markdown block, a Dockerfile that copies it from elsewhere) is
known only by name: the Transformers example scripts (``run_clm.py``, ``run_glue.py`` ..., not the
``*_no_trainer.py`` ones, which use argparse).
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

from codemods.upgrade.calls import removed_fields_of
from migrator.selfcheck.targetapi import api

TRAINING_ARGUMENTS = "transformers.TrainingArguments"
SFT_CONFIG = "trl.SFTConfig"

#: the HfArgumentParser scripts of transformers' examples/pytorch (and optimum-neuron's copies)
EXAMPLE_SCRIPTS = frozenset({
    "run_clm.py", "run_mlm.py", "run_plm.py", "run_fim.py", "run_glue.py", "run_xnli.py", "run_classification.py",
    "run_ner.py", "run_qa.py", "run_seq2seq_qa.py", "run_summarization.py", "run_translation.py", "run_swag.py",
    "run_image_classification.py", "run_audio_classification.py", "run_speech_recognition_ctc.py",
    "run_speech_recognition_ctc_adapter.py", "run_speech_recognition_seq2seq.py", "run_mae.py", "run_mim.py",
    "run_semantic_segmentation.py", "run_object_detection.py", "run_instance_segmentation.py", "run_clip.py",
})
_HF_PARSERS = ("HfArgumentParser", "TrlParser", "parse_args_into_dataclasses")
_BOOL = {"true", "false", "1", "0", "yes", "no", "y", "n", "t", "f", "on", "off"}
_FALSE = {"false", "0", "no", "n", "f", "off"}

#: what a dropped flag did and what takes its place (the rest: "its field is gone")
DROP_NOTES = {
    "overwrite_output_dir": "the Trainer never read it (only the old example scripts' checkpoint check did); "
                            "an existing output_dir is written into: pass --resume_from_checkpoint to resume",
    "save_safetensors": "transformers v5 always saves safetensors",
    "no_save_safetensors": "transformers v5 always saves safetensors",
    "logging_dir": "TensorBoard logs go to TENSORBOARD_LOGGING_DIR (default: a runs/ folder under output_dir)",
    "per_gpu_train_batch_size": "use --per_device_train_batch_size",
    "tpu_num_cores": "the TPU launcher's option; torchrun sets the process count",
    "tpu_metrics_debug": "use --debug tpu_metrics_debug",
    "fp16_backend": "mixed precision is torch.amp's (--bf16 / --fp16)",
    "half_precision_backend": "mixed precision is torch.amp's (--bf16 / --fp16)",
    "fp16_opt_level": "apex AMP is gone: mixed precision is torch.amp's (--bf16 / --fp16)",
    "sharded_ddp": "use --fsdp",
    "use_ipex": "IPEX support is gone",
    "no_cuda": "use --use_cpu",
}
#: flags whose value moves to the environment of the launch (a one-to-one move)
ENV_MOVES = {"logging_dir": "TENSORBOARD_LOGGING_DIR"}


def _table(cls: str) -> dict[str, dict]:
    """Removed field -> {"new": field or None, "last": version, "true_is": [field, value]?} for the
    fields the target ``cls`` rejects."""
    out: dict[str, dict] = {}
    for name, entry in removed_fields_of(cls).items():
        if name.startswith("_") or api().accepts(cls, name) is not False:
            continue
        new = entry.get("renamed_to") or ("eval_strategy" if name == "evaluation_strategy" else None)
        out[name] = {"new": new if new and api().accepts(cls, new) is True else None,
                     "last": entry.get("last", ""), "true_is": entry.get("true_is")}
    return out


@lru_cache(maxsize=None)
def flag_table(sft: bool) -> dict[str, dict]:
    """The rejected flags of a TrainingArguments script (``sft``: of a TRL SFTConfig script)."""
    return _table(SFT_CONFIG if sft else TRAINING_ARGUMENTS)


def trigger_flags() -> tuple[str, ...]:
    names = set(flag_table(False)) | set(flag_table(True))
    return tuple(sorted(f"--{n}" for n in names)) + (CPU_FLAG,)


#: a TrainingArguments flag whose run changes device on TorchNeuron: Transformers 5 trains on the CPU with it
CPU_FLAG = "--use_cpu"


def forces_cpu(values: list[str | None]) -> bool:
    """Whether launch arguments pass ``--use_cpu`` on (``--use_cpu``, ``--use_cpu True``, ``--use_cpu=1``), or
    ``--no_cuda``, which NM616 renames to it."""
    for k, v in enumerate(values):
        name, eq, inline = (v or "").partition("=")
        if name.replace("-", "_") not in ("__use_cpu", "__no_cuda"):
            continue
        value = inline if eq else (values[k + 1] if k + 1 < len(values) else None)
        if value is None or value.startswith("-") or value.lower() not in _FALSE:
            return True
    return False


# ------------------------------------------------------------------------------------------------
# The launched script


@lru_cache(maxsize=256)
def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(400_000)
    except OSError:
        return None


def _project_dirs(start: Path) -> list[Path]:
    """``start`` and the directories above it up to the project root (a .git, pyproject.toml or
    setup.py), at most 4 levels."""
    out = []
    d = start
    for _ in range(5):
        out.append(d)
        if any((d / m).exists() for m in (".git", "pyproject.toml", "setup.py")) or d.parent == d:
            break
        d = d.parent
    return out


def find_script(script: str, launcher: Path | None) -> str | None:
    """The text of the launched script when it is a file of the project."""
    if not script or "$" in script or "`" in script:
        return None
    if script.startswith("~"):
        return None
    if os.path.isabs(script):
        return _read(script)
    if launcher is None or not launcher.is_file():
        return None
    for d in _project_dirs(launcher.resolve().parent):
        text = _read(str(d / script))
        if text is not None:
            return text
    return None


class ScriptKind:
    """How the launched script reads its arguments: ``hf`` (HfArgumentParser/TrlParser), ``sft``
    (a TRL SFTConfig script), ``own`` (the flags it declares itself), ``known`` (found or known by
    name), ``name``."""

    def __init__(self, name: str, hf: bool, sft: bool, known: bool, text: str | None) -> None:
        self.name = name
        self.hf = hf
        self.sft = sft
        self.known = known
        self._text = text

    def declares(self, field: str) -> bool:
        """The script defines ``field`` itself (a dataclass field, an argparse option, a dict key)."""
        if self._text is None:
            return False
        t = self._text
        return re.search(rf"(?m)^\s+{re.escape(field)}\s*:", t) is not None or re.search(
            rf"""["']--{re.escape(field)}["']""", t) is not None


def script_kind(script: str, launcher: Path | None, module: bool = False) -> ScriptKind:
    """What is known of the script a launch runs (``module``: ``python -m pkg.mod``)."""
    rel = script.replace(".", "/") + ".py" if module else script
    text = find_script(rel, launcher)
    base = rel.rsplit("/", 1)[-1]
    if text is not None:
        hf = any(p in text for p in _HF_PARSERS)
        return ScriptKind(base, hf, hf and "SFTConfig" in text, True, text)
    if base in EXAMPLE_SCRIPTS:
        return ScriptKind(base, True, False, True, None)
    return ScriptKind(base, False, False, False, None)


# ------------------------------------------------------------------------------------------------
# The edits of one launch's arguments


class FlagEdit:
    """``kind``: "replace" (word ``index`` becomes ``text``), "delete" (words ``indices``), "env"
    (the launch gets ``text`` = ``VAR=value`` in its environment; words ``indices`` go)."""

    def __init__(self, kind: str, indices: list[int], text: str | None, message: str, manual: str | None = None) -> None:
        self.manual = manual  # what the person has to do instead (a marker)
        self.kind = kind
        self.indices = indices
        self.text = text
        self.message = message


def _is_value(value: str | None, text: str) -> bool:
    """The word after a flag is its value (not another option)."""
    shown = value if value is not None else text
    return not shown.startswith("-") or re.fullmatch(r"-[0-9.]+(e-?[0-9]+)?", shown) is not None


def _flag_word(text: str, value: str | None) -> str | None:
    """The word as the parser sees it, enough to read a flag: its value, or for ``--name=$VALUE``
    (an expansion after a plain flag name) the text itself."""
    if value is not None:
        return value
    name, eq, _ = text.partition("=")
    return text if eq and re.fullmatch(r"--[A-Za-z0-9_-]+", name) else None


def flag_edits(texts: list[str], values: list[str | None], kind: ScriptKind, env_ok: bool = True) -> list[FlagEdit]:
    """Edits of the argument words (``texts``: as written, ``values``: without quotes, None when
    they expand something) of a script that parses HF arguments."""
    table = flag_table(kind.sft)
    out: list[FlagEdit] = []
    k = 0
    while k < len(texts):
        word = _flag_word(texts[k], values[k])
        if not word or not word.startswith("--"):
            k += 1
            continue
        name, eq, val = word[2:].partition("=")
        key = name.replace("-", "_")
        neg = key.startswith("no_") and key not in table and key[3:] in table
        entry = table.get(key[3:] if neg else key)
        if entry is None or kind.declares(key):
            k += 1
            continue
        has_next = not eq and k + 1 < len(texts) and _is_value(values[k + 1], texts[k + 1])
        value = val if eq else (values[k + 1] if has_next else None)
        raw_value = val if eq else (texts[k + 1] if has_next else None)
        span = [k, k + 1] if has_next else [k]
        shown = " ".join(texts[i] for i in span)
        dashed = "-" in name and "_" not in name
        if entry["new"] and not neg:
            new = entry["new"].replace("_", "-") if dashed else entry["new"]
            out.append(FlagEdit("replace", [k], texts[k].replace(f"--{name}", f"--{new}", 1),
                                f"--{name} -> --{new} ("
                                + ("TRL 0.20 renamed it" if kind.sft and key == "max_seq_length"
                                   else "the old flag is gone in transformers v5") + ")"))
        elif entry["true_is"] and not neg:
            field, tv = entry["true_is"]
            if value is not None and value.lower() in _FALSE:
                out.append(FlagEdit("delete", span, None, f"removed {shown}: it was off (the default)"))
            elif value is None or value.lower() in _BOOL:
                out.append(FlagEdit("replace", [k], f"--{field} {tv}", f"{shown} -> --{field} {tv} (the field "
                                    "became a value of --" + field + " in transformers v5)"))
                if len(span) == 2:
                    out.append(FlagEdit("delete", [k + 1], None, ""))
        elif key in ENV_MOVES and raw_value is not None and env_ok and not neg:
            out.append(FlagEdit("env", span, f"{ENV_MOVES[key]}={raw_value}",
                                f"{shown} -> {ENV_MOVES[key]}={raw_value} in the environment of the launch "
                                "(transformers v5 reads the TensorBoard directory from it)"))
        elif key in ENV_MOVES and raw_value is not None and not neg:
            var = ENV_MOVES[key]
            out.append(FlagEdit("delete", span, None, f"removed {shown}: transformers v5 rejects it",
                                f"Set {var}={raw_value} in this command's environment: transformers v5 rejects "
                                f"{shown.split()[0]}."))
        else:
            note = DROP_NOTES.get("no_" + key if neg else key) or DROP_NOTES.get(key) or (
                f"its TrainingArguments field is gone (last in {entry['last']})")
            out.append(FlagEdit("delete", span, None, f"removed {shown}: transformers v5 rejects it; {note}"))
        k += len(span)
    return out


def rejected_names(values: list[str | None], sft: bool, texts: list[str] | None = None) -> list[str]:
    """The flags among ``values`` that a TrainingArguments (SFTConfig) parser rejects."""
    if texts is not None:
        values = [_flag_word(t, v) for t, v in zip(texts, values)]
    table = flag_table(sft)
    out = []
    for v in values:
        if v and v.startswith("--"):
            key = v[2:].partition("=")[0].replace("-", "_")
            if key in table or (key.startswith("no_") and key[3:] in table):
                out.append(v.partition("=")[0])
    return out


# ------------------------------------------------------------------------------------------------
# Launches in a plain list of words (Dockerfile RUN/CMD/ENTRYPOINT)

_PYTHON_RE = re.compile(r"python[0-9.]*\Z")
_WRAPPERS = frozenset({"srun", "mpirun", "mpiexec", "nohup", "exec", "sudo", "uv", "poetry", "pipenv", "conda",
                       "timeout", "env", "neuron_parallel_compile", "stdbuf", "nice", "numactl", "taskset",
                       "time", "command", "run"})
_OPERATORS = frozenset({"&&", "||", ";", "|", "&"})
_REDIRECT = re.compile(r"[0-9]*[<>]")


def launch_in_words(values: list[str | None]) -> list[tuple[int, bool, int]]:
    """(script index, module form, index of the first word of its command) of each launch of a
    Python script among plain words (``cd /app && torchrun --nproc_per_node 2 train.py ...``)."""
    out = []
    start = 0
    segments = []
    for k, v in enumerate(values + [";"]):
        if v in _OPERATORS:
            segments.append((start, k))
            start = k + 1
    for a, b in segments:
        k = a
        while k < b and values[k] is not None and ("=" in values[k] and not values[k].startswith("-")
                                                  or values[k].rsplit("/", 1)[-1] in _WRAPPERS
                                                  or values[k].startswith("-")):
            k += 1
        if k >= b or values[k] is None:
            continue
        first = values[k].rsplit("/", 1)[-1]
        accelerate = first == "accelerate" and k + 1 < b and values[k + 1] == "launch"
        if not (first == "torchrun" or _PYTHON_RE.match(first) or accelerate):
            continue
        j = k + (2 if accelerate else 1)
        while j < b:
            v = values[j]
            if v is None:
                break
            if v == "-m" and j + 1 < b and values[j + 1]:
                if values[j + 1] in ("torch.distributed.run", "torch.distributed.launch"):
                    j += 2
                    continue
                out.append((j + 1, True, a))
                break
            if v.endswith(".py") and not v.startswith("-"):
                out.append((j, False, a))
                break
            if _PYTHON_RE.match(first) and not v.startswith("-"):
                break
            j += 1
    return out


def segment_end(values: list[str | None], script: int) -> int:
    """The index after the last argument word of the launch whose script is at ``script``."""
    k = script + 1
    while k < len(values) and values[k] not in _OPERATORS and not _REDIRECT.match(values[k] or ""):
        k += 1
    return k
