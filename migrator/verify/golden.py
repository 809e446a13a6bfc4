"""Golden files: ``{"format": "neuron-migrate-golden", "version": 1, ...}``.

Schema (version 1; later additions are optional keys, so older files stay readable and compare on
what they have):
  observations.generate[]  {"tokens": [[int]] per sequence,
                            "scores": [[float]] per sequence: the highest processed score at each of
                                      the first generated positions (added later; optional),
                            "dtype": "float32" ... the model's dtype (added later; optional)}
  observations.pipeline[]  {"task", "result"}    observations.losses[]  float
  observations.images[]    {"pipeline", "images": [{"shape", "pixels"}]}
  observations.compile     {"graphs", "compilations", "recompiles": [{"compile_id", "site", "reason",
                                                                      "call" (optional)}],
                            "warmup": [{"entry", "name", "site", "graphs", "shapes"}] (added later;
                                      optional)}   (informational: the audit uses the run's own)
  added by issue 15 (optional; see migrator/verify/observe.py; SUMMARY = a tensor summary {"shape",
  "dtype", "mean", "std", "min", "max", "norm", "sample"[, "top1"]}):
  observations.backward[]  float (or SUMMARY)      observations.grads / weights  {model: {param: SUMMARY}}
  observations.optimizers[] {"class", "steps", "lr": [[float] per param group] per step}
  observations.forward[]   {"model", "call", "output": SUMMARY}
  observations.trainer_steps[] float               observations.eval[]  {metric: value}
  observations.checkpoints[] {"api", "path", "tensors": {key: SUMMARY}}
  observations.stdout      {"lines": [str], "exit": int}
"""

from __future__ import annotations

import json
from pathlib import Path

from migrator import __version__

FORMAT = "neuron-migrate-golden"
VERSION = 1
KINDS = ("generate", "pipeline", "losses", "images", "compile")


class GoldenError(Exception):
    """A golden file that cannot be used (missing, malformed, other format or version)."""


def write_golden(path: Path, script: str, observations: dict, extra: dict | None = None) -> None:
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "tool_version": __version__,
        "script": script,
        "observations": observations,
    }
    if extra:
        payload.update(extra)
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_golden(path: Path) -> dict:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise GoldenError(f"cannot read golden file {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GoldenError(f"golden file {path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GoldenError(f"{path} is not a neuron-migrate golden file (expected \"format\": \"{FORMAT}\")")
    version = data.get("version")
    if version != VERSION:
        raise GoldenError(f"golden file {path} has version {version!r}; this neuron-migrate reads version "
                          f"{VERSION} (record it again with --record)")
    obs = data.get("observations")
    if not isinstance(obs, dict):
        raise GoldenError(f"golden file {path} has no \"observations\" object")
    for key, typ in (("generate", list), ("pipeline", list), ("losses", list), ("images", list),
                     ("compile", dict)):
        if key in obs and not isinstance(obs[key], typ):
            raise GoldenError(f"golden file {path}: observations.{key} must be a {typ.__name__}")
    for i, call in enumerate(obs.get("generate") or []):
        if not isinstance(call, dict):
            raise GoldenError(f"golden file {path}: observations.generate[{i}] must be an object")
        scores = call.get("scores")
        if scores is not None and not (isinstance(scores, list) and all(isinstance(r, list) for r in scores)):
            raise GoldenError(f"golden file {path}: observations.generate[{i}].scores must be a list of lists")
    return data
