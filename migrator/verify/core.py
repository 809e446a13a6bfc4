"""``neuron-migrate verify``: orchestration, device resolution and the report."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from migrator.verify.compare import (KIND_NAMES, OBSERVED_KINDS, REPORT_ORDER, Check, audit, compare,
                                     compile_lines, hint_for, observed_count)
from migrator.verify.golden import GoldenError, read_golden, write_golden
from migrator.verify.runner import run_child

DEVICES = ("auto", "neuron", "cpu", "emulate", "cuda")
REFERENCES = ("cpu", "none")
FORMATS = ("text", "json")


class VerifyError(Exception):
    """Bad usage or an unusable environment: exit 2 before anything runs."""


@dataclass
class Options:
    script: Path
    script_args: list[str] = field(default_factory=list)
    device: str = "auto"
    reference: str = "cpu"
    reference_explicit: bool = False
    baseline: Path | None = None
    record: Path | None = None
    nproc: int = 1
    atol: float = 1e-5
    rtol: float = 1e-4
    max_recompiles: int = 0
    timeout: float = 1800.0
    fmt: str = "text"
    output: Path | None = None
    allow_dtype_change: bool = False


def real_neuron_available() -> bool:
    """The libraries' own check (target-apis §7): torch_neuronx importable and torch.neuron available."""
    if importlib.util.find_spec("torch_neuronx") is None:
        return False
    try:
        import torch

        importlib.import_module("torch_neuronx")  # importing it registers the neuron device
    except Exception:
        return False
    mod = getattr(torch, "neuron", None)
    try:
        return bool(mod is not None and mod.is_available())
    except Exception:
        return False


def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def resolve_device(device: str) -> str:
    if device not in DEVICES:
        raise VerifyError(f"--device must be one of {', '.join(DEVICES)}, not {device!r}")
    if device == "auto":
        return "neuron" if real_neuron_available() else "emulate"
    if device == "neuron" and not real_neuron_available():
        raise VerifyError("--device neuron: no Neuron device found (torch-neuronx is not installed or "
                          "torch.neuron.is_available() is False); use --device emulate to run on CPU")
    if device == "cuda" and not cuda_available():
        raise VerifyError("--device cuda: torch.cuda.is_available() is False on this machine")
    return device


def observed_anything(obs: dict) -> bool:
    if any(observed_count(obs, k) for k in OBSERVED_KINDS):
        return True
    return bool((obs.get("compile") or {}).get("graphs"))


def run_verify(opts: Options, out=None, err=None) -> tuple[int, dict]:
    """Run the whole verification; returns (exit code, report dict). Writes the report."""
    out = out or sys.stdout
    err = err or sys.stderr
    report: dict = {"script": str(opts.script), "script_args": list(opts.script_args), "status": "error",
                    "exit_code": 2, "reason": None, "checks": [], "recompiles": []}
    try:
        code = _run(opts, report, out, err)
    except VerifyError as exc:
        report["reason"] = str(exc)
        code = 2
    report["exit_code"] = code
    report["status"] = {0: "ok", 1: "mismatch"}.get(code, "error")
    _emit(opts, report, out, err)
    return code, report


def _run(opts: Options, report: dict, out, err) -> int:
    if opts.reference not in REFERENCES:
        raise VerifyError(f"--reference must be cpu or none, not {opts.reference!r}")
    if opts.fmt not in FORMATS:
        raise VerifyError(f"--format must be text or json, not {opts.fmt!r}")
    if opts.nproc < 1:
        raise VerifyError("--nproc must be at least 1")
    if opts.timeout <= 0:
        raise VerifyError("--timeout must be positive")
    if not opts.script.is_file():
        raise VerifyError(f"script not found: {opts.script}")
    golden = None
    if opts.baseline is not None:
        try:
            golden = read_golden(opts.baseline)
        except GoldenError as exc:
            raise VerifyError(str(exc)) from None
    device = resolve_device(opts.device)
    report["device"] = device
    # the script's stdout must not corrupt a JSON report printed on stdout
    child_out = err if (opts.fmt == "json" and opts.output is None) else out

    if golden is not None:
        report["reference"] = f"golden file {opts.baseline}"
    elif opts.record is not None and not opts.reference_explicit:
        report["reference"] = "none (recording)"
    else:
        report["reference"] = "cpu run" if opts.reference == "cpu" else "none"

    main = run_child(opts.script, opts.script_args, device, nproc=opts.nproc, timeout=opts.timeout,
                     stdout=child_out, stderr=err, label=f"{device} run")
    report["wall_time_s"] = main.data.get("wall_time_s")
    report["peak_rss_mb"] = main.data.get("peak_rss_mb")
    if not main.ok:
        report["reason"] = main.reason
        return 2
    obs = main.data.get("observations") or {}
    report["observations"] = {k: observed_count(obs, k) for k in OBSERVED_KINDS}
    compile_info = obs.get("compile") or {}
    report["compile"] = {"graphs": compile_info.get("graphs", 0),
                         "compilations": compile_info.get("compilations", 0),
                         "recompiles": len(compile_info.get("recompiles") or [])}
    report["recompiles"] = [dict(r, hint=hint_for(r.get("reason", ""))) for r in compile_info.get("recompiles") or []]
    report["warmup"] = compile_info.get("warmup") or []
    report["_compile_lines"] = compile_lines(compile_info)
    if not observed_anything(obs):
        report["reason"] = ("nothing was observed: the script printed nothing, made no generate(), pipeline(), "
                            "Trainer, diffusion, model forward, loss.backward() or optimizer call, saved no "
                            "checkpoint, loaded or built no model and compiled no graph")
        return 2

    if opts.record is not None:
        try:
            write_golden(opts.record, str(opts.script), obs,
                         {"device": device, "script_args": list(opts.script_args),
                          "wall_time_s": main.data.get("wall_time_s")})
        except OSError as exc:
            raise VerifyError(f"cannot write golden file {opts.record}: {exc.strerror or exc}") from None
        report["recorded"] = str(opts.record)

    checks: list[Check] = []
    if golden is not None:
        checks += compare(obs, golden["observations"], opts.atol, opts.rtol,
                          allow_dtype_change=opts.allow_dtype_change)
    elif opts.reference == "cpu" and not (opts.record is not None and not opts.reference_explicit):
        ref = run_child(opts.script, opts.script_args, "cpu", nproc=opts.nproc, timeout=opts.timeout,
                        stdout=child_out, stderr=err, label="cpu reference run")
        report["reference_wall_time_s"] = ref.data.get("wall_time_s")
        if not ref.ok:
            report["reason"] = ref.reason
            return 2
        checks += compare(obs, (ref.data.get("observations") or {}), opts.atol, opts.rtol,
                          allow_dtype_change=opts.allow_dtype_change)
    checks.append(audit(compile_info, opts.max_recompiles))
    report["checks"] = [c.to_dict() for c in checks]
    failed = [c for c in checks if not c.ok]
    if failed:
        report["reason"] = "; ".join(f"{c.name}: {c.detail}" for c in failed)
        return 1
    return 0


# ----------------------------------------------------------------------------- output

def render_text(report: dict) -> str:
    lines = [f"neuron-migrate verify {report['script']}"]
    if report.get("device"):
        lines.append(f"device: {report['device']}    reference: {report.get('reference', '-')}")
    checks = report.get("checks") or []
    if checks:
        width = max(len(c["name"]) for c in checks)
        for c in checks:
            mark = "✓" if c["ok"] else "✗"
            diff = f"  (max abs diff {c['max_abs_diff']:.3g})" if c.get("max_abs_diff") is not None else ""
            lines.append(f"  {mark} {c['name'].ljust(width)}  {c.get('detail', '')}{diff}")
    observed = report.get("observations")
    if observed:
        counts = dict(observed, compile=(report.get("compile") or {}).get("graphs", 0))
        parts = [f"{counts.get(k, 0)} {KIND_NAMES[k]}" for k in REPORT_ORDER if counts.get(k) or k == "compile"]
        lines.append("observed: " + ", ".join(parts))
    for line in report.get("_compile_lines") or []:
        lines.append(f"    {line}")
    stats = []
    if report.get("wall_time_s") is not None:
        t = f"wall time {report['wall_time_s']:.2f} s"
        if report.get("reference_wall_time_s") is not None:
            t += f" (cpu reference {report['reference_wall_time_s']:.2f} s)"
        stats.append(t)
    if report.get("peak_rss_mb") is not None:
        stats.append(f"peak memory {report['peak_rss_mb']:.0f} MB")
    if stats:
        lines.append(", ".join(stats))
    if report.get("recorded"):
        lines.append(f"golden file written: {report['recorded']}")
    status = report["status"]
    if status == "ok":
        lines.append("result: OK")
    elif status == "mismatch":
        lines.append(f"result: FAILED ({sum(1 for c in checks if not c['ok'])} check(s) failed)")
    else:
        lines.append(f"result: ERROR: {report.get('reason')}")
    return "\n".join(lines) + "\n"


def render_json(report: dict) -> str:
    return json.dumps({k: v for k, v in report.items() if not k.startswith("_")}, indent=2) + "\n"


def _emit(opts: Options, report: dict, out, err) -> None:
    text = render_json(report) if opts.fmt == "json" else render_text(report)
    if report["status"] == "error" and report.get("reason"):
        err.write(f"neuron-migrate: error: {report['reason']}\n")
        err.flush()
    if opts.output is not None:
        try:
            Path(opts.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            err.write(f"neuron-migrate: error: cannot write {opts.output}: {exc}\n")
        return
    out.write(text)
    out.flush()
