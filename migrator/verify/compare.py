"""Compare a run's observations with a reference (golden file or CPU run) and audit compiles."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field


#: the observation kinds that are outputs of the script, in report order (golden files may lack the later
#: ones: a kind is compared only when both sides have it)
OBSERVED_KINDS = ("generate", "pipeline", "losses", "images", "backward", "optimizers", "trainer_steps",
                  "eval", "forward", "checkpoints", "weights", "stdout")
#: how the "observed:" line of the report names each kind's count
KIND_NAMES = {"generate": "generate() call(s)", "pipeline": "pipeline() call(s)", "losses": "logged loss(es)",
              "images": "diffusion call(s)", "backward": "loss.backward() call(s)",
              "optimizers": "optimizer step(s)", "trainer_steps": "Trainer step loss(es)",
              "eval": "evaluate() result(s)", "forward": "model forward call(s)", "checkpoints": "checkpoint(s)",
              "weights": "model(s) whose final weights were read", "stdout": "printed line(s)",
              "compile": "compiled graph(s)"}
#: the order of the "observed:" line (the compiled graphs, always shown, after the kinds verify had first)
REPORT_ORDER = OBSERVED_KINDS[:4] + ("compile",) + OBSERVED_KINDS[4:]


def observed_count(obs: dict, kind: str) -> int:
    """How many observations of ``kind`` a run made (optimizers: steps; stdout: lines)."""
    value = obs.get(kind)
    if kind == "optimizers":
        return sum(int(o.get("steps", 0)) for o in value or [] if isinstance(o, dict))
    if kind == "stdout":
        return len((value or {}).get("lines") or []) if isinstance(value, dict) else 0
    return len(value or [])


@dataclass
class Check:
    name: str            # e.g. "generate[0]", "losses", "pipeline[1]", "compile audit"
    ok: bool
    detail: str = ""
    max_abs_diff: float | None = None
    compared: bool = True  # an output of the script was compared (False: the compile audit)

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Comparison:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def _close(a: float, b: float, atol: float, rtol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return abs(a - b) <= atol + rtol * abs(b)


def _first_divergence(a: list, b: list) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


#: dtypes whose scores differ by a rounding step between two correct runs (another cache, kernel, sharding)
LOW_PRECISION = {"bfloat16": 2 ** -8, "float16": 2 ** -11}


SAMPLED_NOTE = ("generate() samples (do_sample): the tokens are random draws, equal only when both sides draw "
                "the same numbers in the same order; likely causes: --no-seed, a seed the script sets elsewhere, "
                "another number of draws before generate() (dropout, shuffling), or another sampling setting "
                "(temperature, top_k, top_p)")


def _dtype_note(run: dict, ref: dict) -> str | None:
    a, b = run.get("dtype"), ref.get("dtype")
    if a and b and a != b:
        return (f"the model ran in {a}, the reference in {b}: a dtype change is the likely cause "
                f"(load the model with dtype=torch.{b} as the original did)")
    if a and a == b and a in LOW_PRECISION:
        return (f"both runs are {a}: scores of two correct {a} runs differ by rounding steps (relative "
                f"{LOW_PRECISION[a]:.0e}) when the cache, the kernels or the sharding differ; as the tokens are "
                "equal, compare with a looser --atol (e.g. 1e-2)")
    return None


def _compare_scores(run: dict, ref: dict, atol: float, rtol: float) -> tuple[bool | None, str, float | None]:
    """The score fingerprint (max processed score per sequence and generated position).
    None when either side has none (a golden file recorded before scores were recorded)."""
    rs, gs = run.get("scores"), ref.get("scores")
    if not isinstance(rs, list) or not isinstance(gs, list):
        return None, "", None
    if len(rs) != len(gs) or any(len(a) != len(b) for a, b in zip(rs, gs)):
        return False, "the scores cover other sequences or positions than the reference's", None
    max_diff = 0.0
    first = None
    for row, (a, b) in enumerate(zip(rs, gs)):
        for pos, (x, y) in enumerate(zip(a, b)):
            if x is None or y is None:
                continue
            x, y = float(x), float(y)
            if math.isnan(x) and math.isnan(y):
                continue
            d = abs(x - y)
            max_diff = d if math.isnan(d) else max(max_diff, d)
            if first is None and not _close(x, y, atol, rtol):
                first = (row, pos, x, y, d)
    if first is None:
        return True, "", max_diff
    row, pos, x, y, d = first
    return False, (f"sequence {row}, generated position {pos}: max score {x:.6g} vs reference {y:.6g} "
                   f"(abs diff {d:.3g} > atol {atol:g} + rtol {rtol:g} * |reference|)"), max_diff


def dtype_change(a, b, allow: bool) -> str | None:
    """The verdict on two dtypes: None when equal (or unknown) or allowed, else the difference."""
    if a and b and a != b and not allow:
        return (f"dtype {a}, reference {b} (a dtype change is a difference even within tolerance; "
                "pass --allow-dtype-change if it is intended)")
    return None


def compare_generate(run: list, ref: list, atol: float = 1e-5, rtol: float = 1e-4, *,
                     allow_dtype_change: bool = False) -> list[Check]:
    checks = []
    if len(run) != len(ref):
        checks.append(Check("generate", False, f"{len(run)} generate() calls, the reference made {len(ref)}"))
    for i, (r, g) in enumerate(zip(run, ref)):
        rt, gt = r.get("tokens") or [], g.get("tokens") or []
        name = f"generate[{i}]"
        note = _dtype_note(r, g)
        dtype = dtype_change(r.get("dtype"), g.get("dtype"), allow_dtype_change)
        if rt == gt:
            n = sum(len(s) for s in rt) if rt and isinstance(rt[0], list) else len(rt)
            ok, detail, diff = _compare_scores(r, g, atol, rtol)
            if ok is False:
                cause = note or ("likely causes: a dtype change (dtype=/torch_dtype=, autocast), another "
                                 "attention implementation, or a generation setting that rescales the "
                                 "logits (temperature, repetition_penalty)")
                checks.append(Check(name, False, f"{n} token ids equal, but the scores differ: {detail}; "
                                                 f"{cause}", diff))
            elif dtype:
                what = ", scores within tolerance" if ok else ""
                checks.append(Check(name, False, f"{n} token ids equal{what}, but the model ran in "
                                                 f"{r.get('dtype')}: {dtype}", diff))
            elif ok:
                checks.append(Check(name, True, f"{n} token ids equal, scores within tolerance", diff))
            else:
                checks.append(Check(name, True, f"{n} token ids equal"))
            continue
        if len(rt) != len(gt):
            checks.append(Check(name, False, f"batch size {len(rt)}, reference {len(gt)}"))
            continue
        if (r.get("sampled") or g.get("sampled")) and not (r.get("dtype") and g.get("dtype")
                                                            and r.get("dtype") != g.get("dtype")):
            note = SAMPLED_NOTE
        for row, (a, b) in enumerate(zip(rt, gt)):
            if a != b:
                pos = _first_divergence(a, b)
                if pos >= min(len(a), len(b)):
                    what = f"length {len(a)}, reference {len(b)} (equal up to position {pos})"
                else:
                    what = f"first divergent token at position {pos}: {a[pos]} vs reference {b[pos]}"
                checks.append(Check(name, False, f"call {i}, sequence {row}: {what}"
                                                 + (f"; {note}" if note else "")))
                break
    return checks


def _flatten(value, out: list, path: str = "") -> None:
    if isinstance(value, dict):
        for k in sorted(value):
            _flatten(value[k], out, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _flatten(v, out, f"{path}[{i}]")
    else:
        out.append((path, value))


def _compare_values(run, ref, atol, rtol) -> tuple[bool, str, float | None]:
    """Numbers within tolerance, everything else (labels, text) equal."""
    a, b = [], []
    _flatten(run, a)
    _flatten(ref, b)
    if [p for p, _ in a] != [p for p, _ in b]:
        return False, "different structure (keys, lengths or nesting) from the reference", None
    max_diff = None
    for (path, x), (_, y) in zip(a, b):
        if isinstance(x, bool) or isinstance(y, bool) or not (isinstance(x, (int, float)) and isinstance(y, (int, float))):
            if x != y:
                return False, f"{path or 'value'}: {x!r} vs reference {y!r}", max_diff
            continue
        d = abs(float(x) - float(y))
        max_diff = d if max_diff is None else max(max_diff, d)
        if not _close(float(x), float(y), atol, rtol):
            return False, f"{path or 'value'}: {x!r} vs reference {y!r} (abs diff {d:.3g})", max_diff
    return True, "", max_diff


def compare_losses(run: list, ref: list, atol: float, rtol: float) -> list[Check]:
    if not run and not ref:
        return []
    if len(run) != len(ref):
        return [Check("losses", False, f"{len(run)} logged losses, reference {len(ref)}")]
    diffs = [abs(a - b) for a, b in zip(run, ref)]
    max_diff = max(diffs) if diffs else 0.0
    for step, (a, b) in enumerate(zip(run, ref)):
        if not _close(a, b, atol, rtol):
            return [Check("losses", False, f"step {step}: loss {a:.6g} vs reference {b:.6g}", max_diff)]
    return [Check("losses", True, f"{len(run)} losses within tolerance", max_diff)]


def compare_pipeline(run: list, ref: list, atol: float, rtol: float) -> list[Check]:
    checks = []
    if len(run) != len(ref):
        checks.append(Check("pipeline", False, f"{len(run)} pipeline() calls, reference {len(ref)}"))
    for i, (r, g) in enumerate(zip(run, ref)):
        ok, detail, diff = _compare_values(r.get("result"), g.get("result"), atol, rtol)
        checks.append(Check(f"pipeline[{i}]", ok, detail or f"{r.get('task')}: labels equal, scores within tolerance", diff))
    return checks


def compare_images(run: list, ref: list, atol: float, rtol: float) -> list[Check]:
    checks = []
    if len(run) != len(ref):
        checks.append(Check("images", False, f"{len(run)} diffusion calls, reference {len(ref)}"))
    for i, (r, g) in enumerate(zip(run, ref)):
        ri, gi = r.get("images") or [], g.get("images") or []
        if len(ri) != len(gi):
            checks.append(Check(f"images[{i}]", False, f"{len(ri)} images, reference {len(gi)}"))
            continue
        for j, (a, b) in enumerate(zip(ri, gi)):
            if a.get("shape") != b.get("shape"):
                checks.append(Check(f"images[{i}][{j}]", False, f"shape {a.get('shape')}, reference {b.get('shape')}"))
                continue
            pa, pb = a.get("pixels") or [], b.get("pixels") or []
            diffs = [abs(x - y) for x, y in zip(pa, pb)]
            max_diff = max(diffs) if diffs else 0.0
            mse = sum(d * d for d in diffs) / len(diffs) if diffs else 0.0
            peak = 255.0 if max((abs(x) for x in pb), default=0.0) > 1.5 else 1.0
            psnr = float("inf") if mse == 0 else 10 * math.log10(peak * peak / mse)
            ok = all(_close(x, y, atol * peak, rtol) for x, y in zip(pa, pb))
            checks.append(Check(f"images[{i}][{j}]", ok, f"PSNR {psnr:.1f} dB", max_diff))
    return checks


# ----------------------------------------------------------------------------- tensors (issue 15 §2)

_STATS = ("mean", "std", "min", "max", "norm")


def _cosine(a: list, b: list) -> float | None:
    if not a or len(a) != len(b):
        return None
    dot = sum(x * y for x, y in zip(a, b))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return max(-1.0, min(1.0, dot / (na * nb)))


@dataclass
class TensorDiff:
    problem: str | None = None       # None: equal within tolerance
    max_abs: float = 0.0
    max_rel: float = 0.0
    cosine: float | None = None
    top1: tuple[int, int] | None = None  # (agreeing positions, positions)

    def figures(self) -> str:
        parts = [f"max abs diff {self.max_abs:.3g}", f"max rel diff {self.max_rel:.3g}"]
        if self.cosine is not None:
            parts.append(f"cosine {self.cosine:.6f}")
        if self.top1 is not None:
            parts.append(f"top-1 agreement {self.top1[0]}/{self.top1[1]}")
        return ", ".join(parts)


def compare_tensor(run: dict | None, ref: dict | None, atol: float, rtol: float,
                   allow_dtype_change: bool = False) -> TensorDiff:
    """Two tensor summaries (observe.summary): shape and dtype equal, statistics and sampled values
    within atol/rtol; the cosine similarity of the samples and the top-1 agreement are reported."""
    if not isinstance(run, dict) or not isinstance(ref, dict):
        return TensorDiff(None if run == ref else "not a tensor on one side")
    if run.get("shape") != ref.get("shape"):
        return TensorDiff(f"shape {run.get('shape')}, reference {ref.get('shape')}")
    diff = TensorDiff()
    sa, sb = run.get("sample") or [], ref.get("sample") or []
    pairs = [(run.get(k), ref.get(k)) for k in _STATS] + list(zip(sa, sb))
    first = None
    for i, (x, y) in enumerate(pairs):
        if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
            continue
        x, y = float(x), float(y)
        if math.isnan(x) and math.isnan(y):
            continue
        d = abs(x - y)
        diff.max_abs = d if math.isnan(d) else max(diff.max_abs, d)
        if y != 0 or d != 0:
            rel = d / abs(y) if y != 0 else math.inf
            diff.max_rel = rel if math.isnan(rel) else max(diff.max_rel, rel)
        if first is None and not _close(x, y, atol, rtol):
            what = _STATS[i] if i < len(_STATS) else f"sampled value {i - len(_STATS)}"
            first = f"{what} {x:.6g} vs reference {y:.6g}"
    diff.cosine = _cosine([float(x) for x in sa], [float(y) for y in sb]) if len(sa) == len(sb) else None
    ta, tb = run.get("top1"), ref.get("top1")
    if isinstance(ta, list) and isinstance(tb, list) and len(ta) == len(tb) and ta:
        diff.top1 = (sum(1 for x, y in zip(ta, tb) if x == y), len(ta))
    dtype = dtype_change(run.get("dtype"), ref.get("dtype"), allow_dtype_change)
    if dtype:
        diff.problem = dtype + (" (values within tolerance)" if first is None else f"; {first}")
    elif first is not None:
        diff.problem = first
    return diff


def _compare_tensor_dict(name: str, what: str, run: dict, ref: dict, atol: float, rtol: float,
                         allow_dtype_change: bool) -> Check:
    """One check over named tensors (a model's parameters, a checkpoint's entries)."""
    run, ref = run or {}, ref or {}
    missing = [k for k in ref if k not in run]
    extra = [k for k in run if k not in ref]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"{len(missing)} {what} missing from this run ({', '.join(missing[:3])}"
                         + (", ..." if len(missing) > 3 else "") + ")")
        if extra:
            parts.append(f"{len(extra)} {what} not in the reference ({', '.join(extra[:3])}"
                         + (", ..." if len(extra) > 3 else "") + ")")
        return Check(name, False, "; ".join(parts))
    worst_abs, worst_rel, min_cos, failed = 0.0, 0.0, None, []
    for key in ref:
        d = compare_tensor(run[key], ref[key], atol, rtol, allow_dtype_change)
        worst_abs, worst_rel = max(worst_abs, d.max_abs), max(worst_rel, d.max_rel)
        if d.cosine is not None:
            min_cos = d.cosine if min_cos is None else min(min_cos, d.cosine)
        if d.problem:
            failed.append((key, d))
    cos = f", min cosine {min_cos:.6f}" if min_cos is not None else ""
    figures = f"max rel diff {worst_rel:.3g}{cos}"  # the max abs diff: the check's own figure
    if failed:
        key, d = failed[0]
        return Check(name, False, f"{len(failed)} of {len(ref)} {what} differ; {key}: {d.problem} "
                                  f"({d.figures()})", worst_abs)
    return Check(name, True, f"{len(ref)} {what} within tolerance ({figures})", worst_abs)


def _scalar(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def compare_backward(run: list, ref: list, atol: float, rtol: float, allow: bool) -> list[Check]:
    if not run and not ref:
        return []
    if len(run) != len(ref):
        return [Check("loss.backward()", False,
                      f"{len(run)} loss.backward() calls from the script, reference {len(ref)}")]
    max_diff = 0.0
    for i, (a, b) in enumerate(zip(run, ref)):
        if isinstance(a, dict) or isinstance(b, dict):
            d = compare_tensor(a if isinstance(a, dict) else None, b if isinstance(b, dict) else None,
                               atol, rtol, allow)
            if d.problem:
                return [Check("loss.backward()", False, f"call {i}: {d.problem}")]
            continue
        if _scalar(a) is None or _scalar(b) is None:
            continue
        max_diff = max(max_diff, abs(a - b))
        if not _close(float(a), float(b), atol, rtol):
            return [Check("loss.backward()", False, f"call {i}: loss {a:.6g} vs reference {b:.6g}",
                          abs(a - b))]
    return [Check("loss.backward()", True, f"{len(run)} losses within tolerance", max_diff)]


def compare_optimizers(run: list, ref: list, atol: float, rtol: float) -> list[Check]:
    checks = []
    if len(run) != len(ref):
        checks.append(Check("optimizers", False, f"{len(run)} optimizer(s) stepped, reference {len(ref)}"))
    for i, (a, b) in enumerate(zip(run, ref)):
        name = f"optimizer[{i}]"
        if a.get("class") != b.get("class"):
            checks.append(Check(name, False, f"{a.get('class')}, reference {b.get('class')}"))
            continue
        if a.get("steps") != b.get("steps"):
            checks.append(Check(name, False, f"{a.get('steps')} optimizer step() calls, reference "
                                             f"{b.get('steps')}"))
            continue
        bad = None
        for step, (la, lb) in enumerate(zip(a.get("lr") or [], b.get("lr") or [])):
            if len(la) != len(lb):
                bad = f"step {step}: {len(la)} param groups, reference {len(lb)}"
                break
            for group, (x, y) in enumerate(zip(la, lb)):
                if not _close(float(x), float(y), atol, rtol):
                    bad = f"step {step}, param group {group}: lr {x:.6g} vs reference {y:.6g}"
                    break
            if bad:
                break
        checks.append(Check(name, bad is None, bad or f"{a.get('class')}: {a.get('steps')} step() calls, "
                                                      "learning rates equal at every step"))
    return checks


def _by_model(calls: list) -> dict[str, list]:
    out: dict[str, list] = {}
    for call in calls:
        out.setdefault(str(call.get("model")), []).append(call)
    return out


def compare_forward(run: list, ref: list, atol: float, rtol: float, allow: bool) -> list[Check]:
    """Per model (by class name, in the order of the reference's first call), its observed calls."""
    checks = []
    ra, rb = _by_model(run), _by_model(ref)
    for model, calls in rb.items():
        name = f"forward[{model}]"
        mine = ra.get(model, [])
        if len(mine) != len(calls):
            others = [f"{m} ({len(c)})" for m, c in ra.items() if m != model]
            checks.append(Check(name, False, f"{len(mine)} observed call(s) of the {model}, reference {len(calls)}"
                                + (f"; this run called {', '.join(others)}" if others and not mine else "")))
            continue
        worst, cos, top, bad = 0.0, None, [0, 0], None
        for a, b in zip(mine, calls):
            d = compare_tensor(a.get("output"), b.get("output"), atol, rtol, allow)
            worst = max(worst, d.max_abs)
            if d.cosine is not None:
                cos = d.cosine if cos is None else min(cos, d.cosine)
            if d.top1:
                top = [top[0] + d.top1[0], top[1] + d.top1[1]]
            if d.problem and bad is None:
                bad = f"call {b.get('call')}: {d.problem} ({d.figures()})"
        out = (mine[0].get("output") or {})
        if bad:
            checks.append(Check(name, False, bad, worst))
            continue
        figures = [f"output {out.get('shape')} {out.get('dtype')}"]
        if cos is not None:
            figures.append(f"min cosine {cos:.6f}")
        if top[1]:
            figures.append(f"top-1 agreement {top[0]}/{top[1]}")
        checks.append(Check(name, True, f"{len(calls)} call(s) within tolerance ({', '.join(figures)})", worst))
    for model, calls in ra.items():
        if model not in rb:
            checks.append(Check(f"forward[{model}]", False, f"{len(calls)} call(s) of a {model}: the reference "
                                                            "made none"))
    return checks


def compare_eval(run: list, ref: list, atol: float, rtol: float) -> list[Check]:
    checks = []
    if len(run) != len(ref):
        checks.append(Check("evaluate", False, f"{len(run)} evaluate() results, reference {len(ref)}"))
    for i, (a, b) in enumerate(zip(run, ref)):
        ok, detail, diff = _compare_values(a, b, atol, rtol)
        checks.append(Check(f"evaluate[{i}]", ok, detail or f"{len(b)} metrics within tolerance", diff))
    return checks


def _same_path(a: str, b: str) -> bool:
    """Paths relative to each run's working directory must be equal; absolute ones (outside it) are
    compared by their last two components (another temporary folder is not another place)."""
    if a == b:
        return True
    if a.startswith("/") and b.startswith("/"):
        return a.rstrip("/").split("/")[-2:] == b.rstrip("/").split("/")[-2:]
    return False


#: the files of a Trainer checkpoint that hold the training state, not the model
TRAINING_STATE = re.compile(r"(^|/)(optimizer\.pt|scheduler\.pt|rng_state(_\d+)?\.pth)$")


def _training_state_hint(path: str) -> str:
    if TRAINING_STATE.search(str(path)):
        return (" (the training state of a Trainer checkpoint, which save_only_model=True leaves out: the "
                "migration sets it where the model is sharded at load; such a checkpoint cannot resume training)")
    return ""


def compare_checkpoints(run: list, ref: list, atol: float, rtol: float, allow: bool) -> list[Check]:
    checks = []
    unmatched = list(range(len(run)))
    for b in ref:
        j = next((j for j in unmatched if _same_path(run[j].get("path", ""), b.get("path", ""))), None)
        name = f"checkpoint {b.get('path')}"
        if j is None:
            others = [run[j].get("path") for j in unmatched]
            where = f" (this run saved {', '.join(map(str, others[:3]))} instead)" if others else ""
            checks.append(Check(name, False, f"not saved by this run: the reference saved it with {b.get('api')}"
                                              f"{where}{_training_state_hint(b.get('path', ''))}"))
            continue
        unmatched.remove(j)
        checks.append(_compare_tensor_dict(name, "tensors", run[j].get("tensors"), b.get("tensors"),
                                           atol, rtol, allow))
    for j in unmatched:
        checks.append(Check(f"checkpoint {run[j].get('path')}", False,
                            f"saved by this run ({run[j].get('api')}), not by the reference"))
    return checks


def compare_models(kind: str, what: str, run: dict, ref: dict, atol: float, rtol: float, allow: bool) -> list[Check]:
    checks = []
    for model in ref:
        if model not in run:
            checks.append(Check(f"{kind}[{model}]", False, f"no {what} of a {model} in this run "
                                                           f"(it has: {', '.join(run) or 'none'})"))
            continue
        checks.append(_compare_tensor_dict(f"{kind}[{model}]", "parameters", run[model], ref[model],
                                           atol, rtol, allow))
    for model in run:
        if model not in ref:
            checks.append(Check(f"{kind}[{model}]", False, f"{what} of a {model}: the reference has none"))
    return checks


# printed output: timing and progress lines are left out, device names and addresses normalised
_TIMING = re.compile(r"it/s|s/it|\d%\||\bseconds?\b|\bsecs?\b|\btime\b|\belapsed\b|runtime|per_second|"
                     r"\btook\b|\b\d+:\d\d(?::\d\d)?\b|\d(?:\.\d+)?\s?(?:ms|s|sec|min)\b|"
                     r"latency|throughput|samples?/s(?:ec)?\b|tokens?/s(?:ec)?\b|\bQPS\b|"
                     r"(?<![A-Za-z])time_\w+|\w_time\b|_(?:ms|us|ns|secs?)\b", re.IGNORECASE)
_DEVICE = re.compile(r"\b(?:xla|neuron|cpu|cuda|privateuseone)(?::\d+)?\b")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_NUMBER = re.compile(r"(?<![A-Za-z_\d.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"
                     r"|(?<![A-Za-z_\d])(?:nan|inf)(?![A-Za-z_\d])")


def normalise_line(line: str) -> tuple[str, list[float]] | None:
    """(text with numbers as ``#``, the numbers), or None for a line that is ignored."""
    if "\r" in line or _TIMING.search(line) or not line.strip():
        return None
    text = _ADDRESS.sub("<address>", _DEVICE.sub("<device>", line))
    numbers = [float(m.group()) for m in _NUMBER.finditer(text)]
    return _NUMBER.sub("#", text), numbers


def _same_line(a, b, atol: float, rtol: float) -> bool:
    return a[0] == b[0] and len(a[1]) == len(b[1]) and all(_close(x, y, atol, rtol) for x, y in zip(a[1], b[1]))


_WORD = re.compile(r"[A-Za-z_][\w.]*|\S")
#: a class or module name of the old stack (NeuronTrainingArguments, NeuronModelForCausalLM, XlaFoo...)
_OLD_NAME = re.compile(r"Neuron|neuronx|optimum\.neuron|[Xx]la[A-Z_.]|torch_xla")


def renamed(a, b, atol: float, rtol: float) -> tuple[str, str] | None:
    """(old name, new name) when two normalised lines differ only where the reference names a class or
    module of the old stack and this run one identifier (a printed repr or config naming the migrated
    class): a rename, not another behaviour. None otherwise."""
    if len(a[1]) != len(b[1]) or not all(_close(x, y, atol, rtol) for x, y in zip(a[1], b[1])):
        return None
    ta, tb = _WORD.findall(a[0]), _WORD.findall(b[0])
    if len(ta) != len(tb):
        return None
    pair = None
    for x, y in zip(ta, tb):
        if x == y:
            continue
        if not (_OLD_NAME.search(y) and re.fullmatch(r"[A-Za-z_][\w.]*", x)):
            return None
        pair = pair or (y, x)
    return pair


def compare_stdout(run: dict, ref: dict, atol: float, rtol: float) -> list[Check]:
    """Every line the reference printed must be printed by this run, in order (numbers within the
    tolerances); lines this run adds (a debug print) are named in the detail, not a difference."""
    ra, rb = run.get("lines") or [], ref.get("lines") or []
    checks = []
    ea, eb = run.get("exit"), ref.get("exit")
    if ea != eb and ea is not None and eb is not None:
        checks.append(Check("exit status", False, f"{ea}, reference {eb}"))
    if not ra and not rb:
        return checks
    # a progress line of this run ("step 3/6" printed with end="\r") is ignored, but the text printed
    # after its carriage return is what a terminal shows: it may be a line of the reference
    na = [(line, normalise_line(line.rsplit("\r", 1)[-1]), "\r" in line) for line in ra]
    na = [(line, n, soft) for line, n, soft in na if n is not None]
    nb = [(line, n) for line, n in ((line, normalise_line(line)) for line in rb) if n is not None]
    ignored = len(ra) - len(na)
    j, extra, renames = 0, [], []
    for i, (lb, b) in enumerate(nb):
        k = next((k for k in range(j, len(na)) if _same_line(na[k][1], b, atol, rtol)), None)
        if k is None and j < len(na):
            # the next line of this run names the migrated class where the reference names the old one
            pair = renamed(na[j][1], b, atol, rtol)
            if pair is not None:
                k = j
                renames.append(pair)
        if k is None:
            if j < len(na):
                what = f"printed line {j + 1}: {na[j][0]!r}, reference {lb!r}"
            else:
                what = f"the reference printed {lb!r} (its line {i + 1}), this run printed nothing more"
            return checks + [Check("printed output", False, what)]
        extra += [line for line, _, soft in na[j:k] if not soft]
        ignored += sum(soft for _, _, soft in na[j:k])
        j = k + 1
    extra += [line for line, _, soft in na[j:] if not soft]
    ignored += sum(soft for _, _, soft in na[j:])
    note = f" ({ignored} timing/progress line(s) ignored)" if ignored else ""
    if renames:
        note += (f"; {len(renames)} line(s) name the migrated class where the reference names the old one "
                 f"(renamed, e.g. {renames[0][0]!r} -> {renames[0][1]!r})")
    if extra:
        note += f"; {len(extra)} more line(s) printed by this run (e.g. {extra[0]!r})"
    return checks + [Check("printed output", True, f"{len(nb)} printed lines equal{note}")]


def compare_outputs(run: dict, ref: dict, atol: float, rtol: float, allow: bool) -> list[Check]:
    """The kinds of issue 15 §2, each only when both sides observed it."""
    def both(kind):
        return kind in run and kind in ref

    checks: list[Check] = []
    if both("backward"):
        checks += compare_backward(run["backward"], ref["backward"], atol, rtol, allow)
    if both("grads"):
        checks += compare_models("gradients", "gradients (first backward)", run["grads"], ref["grads"],
                                 atol, rtol, allow)
    if both("optimizers"):
        checks += compare_optimizers(run["optimizers"], ref["optimizers"], atol, rtol)
    if both("trainer_steps"):
        steps = compare_losses(run["trainer_steps"], ref["trainer_steps"], atol, rtol)
        checks += [Check("Trainer step losses", c.ok, c.detail.replace("logged losses", "optimizer steps")
                         .replace("losses within", "step losses within"), c.max_abs_diff) for c in steps]
    if both("eval"):
        checks += compare_eval(run["eval"], ref["eval"], atol, rtol)
    if both("forward"):
        checks += compare_forward(run["forward"], ref["forward"], atol, rtol, allow)
    if both("checkpoints"):
        checks += compare_checkpoints(run["checkpoints"], ref["checkpoints"], atol, rtol, allow)
    if both("weights"):
        checks += compare_models("weights", "final weights", run["weights"], ref["weights"], atol, rtol, allow)
    if both("stdout"):
        checks += compare_stdout(run["stdout"], ref["stdout"], atol, rtol)
    return checks


def compare(run: dict, ref: dict, atol: float, rtol: float, *, allow_dtype_change: bool = False) -> list[Check]:
    """Every comparison of two runs' observations. A kind that one side lacks altogether (a golden file
    recorded before it was observed) is not compared; an empty one is."""
    checks: list[Check] = []
    checks += compare_generate(run.get("generate", []), ref.get("generate", []), atol, rtol,
                               allow_dtype_change=allow_dtype_change)
    checks += compare_pipeline(run.get("pipeline", []), ref.get("pipeline", []), atol, rtol)
    if not (run.get("trainer_steps") and ref.get("trainer_steps")):
        # the logged losses depend on logging_steps; the loss of every step (trainer_steps) supersedes
        # them where both sides have it (golden files recorded before it: the logged ones)
        checks += compare_losses(run.get("losses", []), ref.get("losses", []), atol, rtol)
    checks += compare_images(run.get("images", []), ref.get("images", []), atol, rtol)
    checks += compare_outputs(run, ref, atol, rtol, allow_dtype_change)
    return checks


# ----------------------------------------------------------------------------- compile audit

_HINTS = [
    (re.compile(r"position_ids'\] stride mismatch|position_ids.*stride mismatch"),
     "prefill_chunk_size: each distinct prompt length recompiles the chunked prefill (position_ids "
     "slicing keeps the full-length stride); drop prefill_chunk_size or pad prompts to one length"),
    (re.compile(r"len\(kwargs\) =="),
     "the compiled forward is called with different keyword arguments (with prefill_chunk_size, "
     "prefill chunks and decode steps share it); drop prefill_chunk_size"),
    (re.compile(r"input_ids.*size mismatch at index 1\. expected \d+, actual 1\b"),
     "prefill_chunk_size: prefill chunks and decode steps go through the same compiled forward"),
    (re.compile(r"past_key_values.*size mismatch at index 2"),
     "missing max_cache_len: the static cache is resized when max_new_tokens or the prompt grows; "
     "set GenerationConfig(max_cache_len=...)"),
    (re.compile(r"(input_ids|labels|attention_mask).*size mismatch at index 1"),
     "input length changed: pad inputs to a fixed length (training: pad_to_multiple_of=128 / "
     "padding='max_length'; generation: do not use prefill_chunk_size)"),
    (re.compile(r"size mismatch at index 0"),
     "the first dimension changed (often the batch size, e.g. a smaller last batch): keep it fixed "
     "(dataloader_drop_last=True, or pad the batch)"),
    (re.compile(r"'(hidden_states|sample|latents)'.*size mismatch at index [1-3]\b"),
     "the image size (height/width) or the sequence length changed after warm-up: each new size is a new "
     "compile of every compiled block; keep height and width (or the padded length) fixed"),
    (re.compile(r"size mismatch"),
     "an input shape changed; with dynamic=False (as on Neuron) every new shape is a new compile"),
    (re.compile(r"automatic dynamic|dynamic shape"),
     "automatic dynamic shapes: pass dynamic=False and keep shapes fixed"),
]


def hint_for(reason: str) -> str | None:
    for pattern, hint in _HINTS:
        if pattern.search(reason):
            return hint
    return None


def audit(compile_info: dict, max_recompiles: int) -> Check:
    recompiles = compile_info.get("recompiles") or []
    graphs = compile_info.get("graphs", 0)
    n = len(recompiles)
    detail = f"{graphs} graph(s) compiled, {n} recompile(s) after warm-up (limit {max_recompiles})"
    return Check("compile audit", n <= max_recompiles, detail, compared=False)


def short_reason(reason: str) -> str:
    """The first failing guard on one line (dynamo appends source comments and a user stack)."""
    first = (reason or "").strip().splitlines()[0] if (reason or "").strip() else ""
    first = re.sub(r"\s+#.*$", "", first)
    return re.sub(r"\s+", " ", first).strip()


def _shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]" if isinstance(shape, list) else str(shape)


def warmup_lines(compile_info: dict) -> list[str]:
    """One line per code object compiled more than once during one warm-up call (regional compilation
    meets its block at several resolutions in the first forward): what will be compiled on Neuron."""
    lines = []
    for group in compile_info.get("warmup") or []:
        graphs = group.get("graphs", 0)
        if graphs < 2:
            continue
        shapes = [s for s in group.get("shapes") or [] if isinstance(s, list)]
        what = (f"{graphs} graphs for {len(shapes)} input shapes" if len(shapes) == graphs
                else f"{graphs} graphs ({len(shapes)} input shapes)" if shapes else f"{graphs} graphs")
        line = f"warm-up: {what} of {group.get('name')} in the first call of {group.get('entry')}"
        # the inputs whose shape differs between the graphs, with their shapes
        varying = []
        if len(shapes) > 1:
            names = [n for n, _ in shapes[0]]
            for name in names:
                seen = []
                for sig in shapes:
                    value = dict((n, v) for n, v in sig).get(name)
                    if value not in seen:
                        seen.append(value)
                if len(seen) > 1:
                    varying.append(f"{name} " + ", ".join(_shape(v) for v in seen[:4])
                                   + (", ..." if len(seen) > 4 else ""))
        if varying:
            line += f" ({'; '.join(varying[:2])})"
        lines.append(line)
    return lines


def recompile_lines(compile_info: dict) -> list[str]:
    """Per call site: how many recompiles, then each reason (first line), the call it happened in
    and its likely cause."""
    by_site: dict[str, list[dict]] = {}
    for r in compile_info.get("recompiles") or []:
        by_site.setdefault(r.get("site", "?"), []).append(r)
    lines = []
    for site, items in by_site.items():
        lines.append(f"{len(items)} recompile(s) at {site}:")
        hints_seen = set()
        for r in items:
            reason = short_reason(r.get("reason", ""))
            m = re.match(r"(\d+/\d+): (.*)", reason)
            if m:
                reason = f"{m.group(2)}  (guard of {m.group(1)} failed)"
            where = f", in {r['call']}" if r.get("call") else ""
            lines.append(f"  compile {r.get('compile_id', '')}: {reason}{where}")
            hint = hint_for(r.get("reason", ""))
            if hint and hint not in hints_seen:
                hints_seen.add(hint)
                lines.append(f"    likely cause: {hint}")
    return lines


def compile_lines(compile_info: dict) -> list[str]:
    """The compile audit's lines under the report: the warm-up, then every recompile after it."""
    return warmup_lines(compile_info) + recompile_lines(compile_info)
