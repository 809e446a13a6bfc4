"""Compare a run's observations with a reference (golden file or CPU run) and audit compiles."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field


@dataclass
class Check:
    name: str            # e.g. "generate[0]", "losses", "pipeline[1]", "compile audit"
    ok: bool
    detail: str = ""
    max_abs_diff: float | None = None

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


def compare_generate(run: list, ref: list, atol: float = 1e-5, rtol: float = 1e-4) -> list[Check]:
    checks = []
    if len(run) != len(ref):
        checks.append(Check("generate", False, f"{len(run)} generate() calls, the reference made {len(ref)}"))
    for i, (r, g) in enumerate(zip(run, ref)):
        rt, gt = r.get("tokens") or [], g.get("tokens") or []
        name = f"generate[{i}]"
        note = _dtype_note(r, g)
        if rt == gt:
            n = sum(len(s) for s in rt) if rt and isinstance(rt[0], list) else len(rt)
            ok, detail, diff = _compare_scores(r, g, atol, rtol)
            if ok is False:
                cause = note or ("likely causes: a dtype change (dtype=/torch_dtype=, autocast), another "
                                 "attention implementation, or a generation setting that rescales the "
                                 "logits (temperature, repetition_penalty)")
                checks.append(Check(name, False, f"{n} token ids equal, but the scores differ: {detail}; "
                                                 f"{cause}", diff))
            elif ok:
                checks.append(Check(name, True, f"{n} token ids equal, scores within tolerance", diff))
            else:
                checks.append(Check(name, True, f"{n} token ids equal"))
            continue
        if len(rt) != len(gt):
            checks.append(Check(name, False, f"batch size {len(rt)}, reference {len(gt)}"))
            continue
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


def compare(run: dict, ref: dict, atol: float, rtol: float) -> list[Check]:
    checks: list[Check] = []
    checks += compare_generate(run.get("generate", []), ref.get("generate", []), atol, rtol)
    checks += compare_pipeline(run.get("pipeline", []), ref.get("pipeline", []), atol, rtol)
    checks += compare_losses(run.get("losses", []), ref.get("losses", []), atol, rtol)
    checks += compare_images(run.get("images", []), ref.get("images", []), atol, rtol)
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
    return Check("compile audit", n <= max_recompiles, detail)


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
