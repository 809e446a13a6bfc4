"""``neuron-migrate verify``: orchestration, device resolution and the report."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from migrator.verify.compare import (KIND_NAMES, OBSERVED_KINDS, REPORT_ORDER, Check, audit, compare,
                                     compile_lines, hint_for, observed_count)
from migrator.verify.golden import GoldenError, read_golden, write_golden
from migrator.verify.runner import RunResult, run_child
from migrator.verify import before, scratch

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
    against: str | None = None            # the original: a path, or a git revision
    original_python: str | None = None    # the interpreter the original runs under
    original_env: str | None = None       # "auto" (origenv.py builds it) or a prepared environment's path
    original_env_allow_all: bool = False  # auto: install the refused requirement lines too
    original_nproc: int | None = None     # processes of the original (default: --nproc)
    keep_scratch: bool = False            # keep the sides' scratch working directories
    original_cache: Path | None = None    # reuse the original's observations (cache.py)
    allow_dtype_change: bool = False      # a dtype difference between the sides is intended
    before: list[str] = field(default_factory=list)  # --before "SCRIPT [ARGS...]": steps run first (before.py)
    seed: int | None = 0                  # both sides seeded at start (None: --no-seed)
    dropout: str = "auto"                 # auto (off on a real device) | on | off
    child_env: dict = field(default_factory=dict)  # set by _run: what seed/dropout mean for the children


SELF_NOTE = ("note: no original given (--against): this compares the migrated script with a second run of "
             "itself on plain CPU. That catches what the device changes (a crash or another result on "
             "{device}, recompiles), not what the migration changed (another dtype, generation setting, "
             "learning rate, a dropped step or checkpoint): pass --against ORIGINAL (a path or a git "
             "revision such as HEAD)")
DEFAULT_HEAD_NOTE = ("note: no --against given: {script} differs from its committed version, so it is "
                     "compared with git HEAD's version (--against HEAD)")
SEED_NOTE = ("both sides start seeded with {seed} (Python random, NumPy, torch: as transformers.set_seed); "
             "--no-seed runs the script's own randomness")
DROPOUT_NOTE = ("dropout disabled on both sides (every torch.nn.functional dropout and SDPA's dropout_p are "
                "the identity): on {device} dropout draws from the device's own generator, which no CPU run "
                "reproduces; --dropout on keeps it")
DROPOUTS = ("auto", "on", "off")
NOTHING_COMPARED = ("nothing compared: no output of the script was compared with the reference (a compile "
                    "audit alone proves nothing about the results)")


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
                    "exit_code": 2, "reason": None, "checks": [], "recompiles": [], "notes": [],
                    "warnings": []}
    try:
        code = _run(opts, report, out, err)
    except VerifyError as exc:
        report["reason"] = str(exc)
        code = 2
    report["exit_code"] = code
    report["status"] = {0: "ok", 1: "mismatch"}.get(code, "error")
    _emit(opts, report, out, err)
    return code, report


def _validate(opts: Options) -> None:
    if opts.reference not in REFERENCES:
        raise VerifyError(f"--reference must be cpu or none, not {opts.reference!r}")
    if opts.fmt not in FORMATS:
        raise VerifyError(f"--format must be text or json, not {opts.fmt!r}")
    if opts.nproc < 1 or (opts.original_nproc is not None and opts.original_nproc < 1):
        raise VerifyError("--nproc and --original-nproc must be at least 1")
    if opts.timeout <= 0:
        raise VerifyError("--timeout must be positive")
    if opts.dropout not in DROPOUTS:
        raise VerifyError(f"--dropout must be one of {', '.join(DROPOUTS)}, not {opts.dropout!r}")
    if not opts.script.is_file():
        raise VerifyError(f"script not found: {opts.script}")
    if opts.against is not None and opts.baseline is not None:
        raise VerifyError("--against and --baseline are two references: give one")
    if opts.against is not None and opts.record is not None:
        raise VerifyError("--record writes the observations of one run: record the original with "
                          "`verify ORIGINAL --record FILE` where the old stack is installed, without --against")
    if opts.original_python is not None:
        exe = shutil.which(opts.original_python) if os.sep not in opts.original_python else opts.original_python
        if not exe or not os.path.isfile(exe) or not os.access(exe, os.X_OK):
            raise VerifyError(f"--original-python {opts.original_python}: no such interpreter (give the path of "
                              "the python executable of the original's environment)")
        opts.original_python = os.path.abspath(exe)
    if opts.original_env is not None:
        from migrator.verify import origenv

        if opts.original_python is not None:
            raise VerifyError("--original-env and --original-python both name the original's interpreter: give one")
        if opts.original_env != "auto":
            try:
                opts.original_python = origenv.prepared_python(opts.original_env)
            except origenv.EnvError as exc:
                raise VerifyError(str(exc)) from None
    elif opts.original_env_allow_all:
        raise VerifyError("--original-env-allow-all is an option of --original-env auto")


def _mode(opts: Options, report: dict) -> str:
    """against | baseline | record | self | audit; records the notes that say which."""
    if opts.against is not None:
        return "against"
    if opts.baseline is not None:
        return "baseline"
    if opts.record is not None and not opts.reference_explicit:
        return "record"
    if opts.reference == "none":
        return "audit"
    if not opts.reference_explicit and scratch.modified_in_work_tree(opts.script):
        opts.against = "HEAD"
        report["notes"].append(DEFAULT_HEAD_NOTE.format(script=opts.script))
        return "against"
    return "self"




def _run(opts: Options, report: dict, out, err) -> int:
    _validate(opts)
    golden = None
    if opts.baseline is not None:
        try:
            golden = read_golden(opts.baseline)
        except GoldenError as exc:
            raise VerifyError(str(exc)) from None
    device = resolve_device(opts.device)
    report["device"] = device
    mode = _mode(opts, report)
    report["mode"] = mode
    if opts.original_python is not None and mode != "against":
        raise VerifyError("--original-python runs the original: give it with --against")
    if opts.original_env is not None and mode != "against":
        raise VerifyError("--original-env runs the original: give it with --against")
    if opts.original_nproc is not None and mode != "against":
        raise VerifyError("--original-nproc runs the original: give it with --against")
    try:
        steps = before.parse(opts.before, opts.script, Path.cwd())
    except before.BeforeError as exc:
        raise VerifyError(str(exc)) from None
    _child_env(opts, report, device)  # after the mode's note: that one comes first
    # the script's stdout must not corrupt a JSON report printed on stdout
    child_out = err if (opts.fmt == "json" and opts.output is None) else out

    if mode == "against":
        return _run_against(opts, report, device, child_out, err, steps)
    if not steps:
        return _run_one(opts, report, device, mode, golden, child_out, err, [], None)
    # before-steps write files: each run gets its own scratch working directory, as the sides of --against
    root = Path(tempfile.mkdtemp(prefix="neuron-migrate-verify-"))
    try:
        return _run_one(opts, report, device, mode, golden, child_out, err, steps, root)
    except before.BeforeError as exc:
        raise VerifyError(str(exc)) from None
    finally:
        _drop_scratch(opts, report, root)


def _child_env(opts: Options, report: dict, device: str) -> None:
    """The seed and the dropout policy, the same for every run (both sides), said in the report."""
    from migrator.verify.child import DROPOUT_ENV, SEED_ENV

    env = {SEED_ENV: "off" if opts.seed is None else str(opts.seed)}
    report["seed"] = opts.seed
    said = []
    if opts.seed is not None:
        said.append(SEED_NOTE.format(seed=opts.seed))
    # on cpu/emulate both sides draw from the same (seeded) CPU generator: dropout compares as it is
    off = opts.dropout == "off" or (opts.dropout == "auto" and device in ("neuron", "cuda"))
    report["dropout"] = "off" if off else "on"
    if off:
        env[DROPOUT_ENV] = "off"
        said.append(DROPOUT_NOTE.format(device=device if device in ("neuron", "cuda") else "a device"))
    report["determinism"] = said
    opts.child_env = env


def _drop_scratch(opts: Options, report: dict, root: Path) -> None:
    if opts.keep_scratch:
        report["scratch"] = str(root)
    else:
        shutil.rmtree(root, ignore_errors=True)


def _own_place(opts: Options, root: Path | None, name: str) -> scratch.SidePlace | None:
    """A scratch working directory of its own for one run of the migrated script (None: no scratch)."""
    if root is None:
        return None
    project = opts.script.resolve().parent
    try:
        return scratch.place_side(root / name, project, lambda d: scratch.copy_project(project, d),
                                  opts.script.name, Path.cwd())
    except OSError as exc:
        raise VerifyError(f"cannot prepare the scratch working directories in {root}: {exc}") from None


def _run_one(opts: Options, report: dict, device: str, mode: str, golden, child_out, err,
             steps: list, root: Path | None) -> int:
    """Every mode but --against: the migrated script on ``device`` (and, in self mode, on plain CPU), each
    run preceded by the before-steps in its own scratch directory when there are any."""
    if golden is not None:
        report["reference"] = f"golden file {opts.baseline}"
    elif mode == "record":
        report["reference"] = "none (recording)"
    else:
        report["reference"] = "cpu run" if opts.reference == "cpu" else "none"
    if mode == "self":
        report["notes"].append(SELF_NOTE.format(device=device))

    place = _own_place(opts, root, "migrated")
    if place is not None:
        before.run_steps(steps, place.script.parent, side="migrated", side_label="migrated", device=device,
                         nproc=opts.nproc, timeout=opts.timeout, cwd=place.cwd, python=None, stdout=child_out,
                         stderr=err, report=report)
    main = run_child(place.script if place else opts.script, opts.script_args, device, nproc=opts.nproc,
                     timeout=opts.timeout, stdout=child_out, stderr=err, label=f"{device} run",
                     cwd=place.cwd if place else None, env_extra=opts.child_env)
    if not _take_main(opts, report, main):
        return 2
    obs = main.data.get("observations") or {}
    if opts.record is not None:
        try:
            write_golden(opts.record, str(opts.script), obs,
                         {"device": device, "script_args": list(opts.script_args),
                          "wall_time_s": main.data.get("wall_time_s")})
        except OSError as exc:
            raise VerifyError(f"cannot write golden file {opts.record}: {exc.strerror or exc}") from None
        report["recorded"] = str(opts.record)

    checks: list[Check] = neuron_check(main.data, _mentions_neuron(opts.script))
    if golden is not None:
        checks += compare(obs, golden["observations"], opts.atol, opts.rtol,
                          allow_dtype_change=opts.allow_dtype_change)
    elif mode == "self":
        place = _own_place(opts, root, "reference")
        if place is not None:
            before.run_steps(steps, place.script.parent, side="migrated", side_label="cpu reference",
                             device="cpu", nproc=opts.nproc, timeout=opts.timeout, cwd=place.cwd, python=None,
                             stdout=child_out, stderr=err, report=report)
        ref = run_child(place.script if place else opts.script, opts.script_args, "cpu", nproc=opts.nproc,
                        timeout=opts.timeout, stdout=child_out, stderr=err, label="cpu reference run",
                        cwd=place.cwd if place else None, env_extra=opts.child_env)
        report["reference_wall_time_s"] = ref.data.get("wall_time_s")
        if not ref.ok:
            report["reason"] = ref.reason
            return 2
        checks += compare(obs, (ref.data.get("observations") or {}), opts.atol, opts.rtol,
                          allow_dtype_change=opts.allow_dtype_change)
    return _verdict(opts, report, checks, obs, comparing=mode in ("baseline", "self"))


def _run_against(opts: Options, report: dict, device: str, child_out, err, steps: list) -> int:
    """Run the original (on CPU, the old stack emulated) and the migrated script, each in its own scratch
    working directory (scratch.py), and compare the migrated observations with the original's."""
    original = Path(opts.against)
    root = Path(tempfile.mkdtemp(prefix="neuron-migrate-verify-"))
    user_cwd = Path.cwd()
    try:
        try:
            if original.is_file():
                report["reference"] = f"original {opts.against}"
                orig_place = scratch.original_from_path(root, opts.script, original, user_cwd)
            elif original.exists():
                raise VerifyError(f"--against {opts.against}: a folder; give the original script's path")
            else:
                orig_place = scratch.original_from_revision(root, opts.script, opts.against, user_cwd)
                report["reference"] = f"original {orig_place.label}"
            mig_place = scratch.migrated_side(root, opts.script, user_cwd)
            where = (f"looked beside {opts.against}" if original.is_file()
                     else f"looked in {opts.against}'s version of the folder")
            before.check_counterparts(steps, orig_place.script.parent, where)
        except before.BeforeError as exc:
            raise VerifyError(str(exc)) from None
        except scratch.ScratchError as exc:
            raise VerifyError(str(exc)) from None
        except OSError as exc:
            raise VerifyError(f"cannot prepare the scratch working directories in {root}: {exc}") from None
        if opts.original_env == "auto":
            _build_original_env(opts, report, orig_place, err)
        if opts.original_python:
            report["original_python"] = opts.original_python
        _probe_original(opts, report)
        try:
            ref = _run_original(opts, report, orig_place, user_cwd, child_out, err, steps)
            if not ref.ok:
                report["libraries"] = {"original": ref.data.get("libraries") or {}}
                report["reason"] = ref.reason + original_hint(ref.data, opts.original_env is not None)
                return 2
            before.run_steps(steps, mig_place.script.parent, side="migrated", side_label="migrated",
                             device=device, nproc=opts.nproc, timeout=opts.timeout, cwd=mig_place.cwd,
                             python=None, stdout=child_out, stderr=err, report=report)
        except before.BeforeError as exc:
            raise VerifyError(str(exc)) from None
        main = run_child(mig_place.script, opts.script_args, device, nproc=opts.nproc, timeout=opts.timeout,
                         stdout=child_out, stderr=err, label=f"migrated run ({device})", side="migrated",
                         cwd=mig_place.cwd, env_extra=opts.child_env)
        if not _take_main(opts, report, main):
            return 2
        report["libraries"] = {"original": ref.data.get("libraries") or {},
                               "migrated": main.data.get("libraries") or {}}
        if ref.data.get("old_stack_used"):
            report["old_stack"] = dict(ref.data["old_stack_used"])
        obs = main.data.get("observations") or {}
        checks = compare(obs, ref.data.get("observations") or {}, opts.atol, opts.rtol,
                         allow_dtype_change=opts.allow_dtype_change)
        checks += neuron_check(main.data, bool(ref.data.get("old_stack")))
        return _verdict(opts, report, checks, obs, comparing=True)
    finally:
        _drop_scratch(opts, report, root)


def _run_original(opts: Options, report: dict, place: scratch.SidePlace, user_cwd: Path, child_out,
                  err, steps: list) -> RunResult:
    from migrator.verify import cache

    nproc = opts.original_nproc or opts.nproc
    key = None
    if opts.original_cache is not None:
        # before the before-steps run: what they write into the copy is not part of the key
        key = cache.key(place.script.parent, place.script.name, opts.script_args, user_cwd,
                        opts.original_python or sys.executable, nproc,
                        before=before.cache_entries(steps, place.script.parent),
                        env={**opts.child_env, **original_env_extra(report)})
        data = cache.load(Path(opts.original_cache), key)
        if data is not None:
            report["reference"] += " (observations from the cache)"
            report["reference_wall_time_s"] = data.get("wall_time_s")
            if steps:
                report["before_steps_cached"] = True
            return RunResult(True, data=data)
    before.run_steps(steps, place.script.parent, side="original", side_label="original", device="cpu",
                     nproc=nproc, timeout=opts.timeout, cwd=place.cwd, python=opts.original_python,
                     stdout=child_out, stderr=err, report=report)
    ref = run_child(place.script, opts.script_args, "cpu", nproc=nproc, timeout=opts.timeout, stdout=child_out,
                    stderr=err, label="original run (cpu)", side="original", cwd=place.cwd,
                    python=opts.original_python, env_extra={**opts.child_env, **original_env_extra(report)})
    report["reference_wall_time_s"] = ref.data.get("wall_time_s")
    if ref.ok and key is not None:
        cache.store(Path(opts.original_cache), key, ref.data)
    return ref


OLD_LIBRARIES_HINT = ("; the original may use an API of the libraries it was written for that today's lack "
                      "(Transformers 4.x, TRL 0.x, huggingface_hub 0.x){api}: run it with --original-env auto (an "
                      "environment with the versions its project pins, built once) or --original-env PATH")
OLD_ENV_HINT = ("; the original's environment lacks that API{api}: check the versions the original's project "
                "pins (the report's libraries line), or pass a prepared environment with --original-env PATH")


def original_hint(data: dict, own_env: bool = False) -> str:
    """What to do when the original failed on an ImportError/AttributeError (not an old-stack API: those
    are "not emulated"); ``own_env``: it already ran in an environment of its own (--original-env)."""
    from migrator.verify import origenv

    error = str(data.get("error") or "")
    if not data.get("not_emulated") and error.startswith(("ImportError", "AttributeError", "ModuleNotFoundError")):
        api = origenv.removed_api(error)
        api = f": {api} is one" if api else ""
        return (OLD_ENV_HINT if own_env else OLD_LIBRARIES_HINT).format(api=api)
    return ""


def _build_original_env(opts: Options, report: dict, place: scratch.SidePlace, err) -> None:
    """--original-env auto: the versions the original's project pins (origenv.py), its environment built once."""
    from migrator.verify import origenv

    original = Path(opts.against)
    revision = None if original.is_file() else opts.against
    real_dir = original.resolve().parent if original.is_file() else opts.script.resolve().parent
    found = origenv.read_project(origenv.project_files(place.script.parent, real_dir, revision))
    plan = origenv.resolve(found, allow_all=opts.original_env_allow_all)
    try:
        python, built = origenv.build(plan, log=err, timeout=max(opts.timeout, 600.0))
    except origenv.EnvError as exc:
        raise VerifyError(str(exc)) from None
    opts.original_python = str(python)
    report["original_env"] = {"mode": "auto", "path": str(Path(python).parent.parent), "era": plan.era,
                              "requirements": plan.requirements, "origin": plan.origin,
                              "emulated": found.emulated, "refused": origenv.describe_refused(found),
                              "read": found.sources, "built_now": bool(built.get("built_now")),
                              "built_s": built.get("built_s"), "size_mb": built.get("size_mb")}
    if not opts.original_env_allow_all:
        for line in origenv.describe_refused(found):
            report["warnings"].append(f"not installed in the original's environment: {line} "
                                      "(--original-env-allow-all installs it)")
    report["notes"] += plan.notes


def _probe_original(opts: Options, report: dict) -> None:
    """Which old-stack packages import for real in the original's interpreter: those are used, not emulated."""
    from migrator.verify import origenv

    probed = origenv.probe(opts.original_python or sys.executable)
    real = origenv.real_roots(probed)
    report["_real_old_stack"] = real
    broken = {r: v for r, v in (probed.get("real") or {}).items() if r not in real}
    for root, why in sorted(broken.items()):
        report["warnings"].append(f"{root} is installed in the original's environment but does not import "
                                  f"({why[len('error: '):]}): emulated instead")


def original_env_extra(report: dict) -> dict:
    """The original's environment variables that say which old-stack packages are real."""
    from migrator.verify.side import REAL_ENV

    real = report.get("_real_old_stack") or []
    extra = {REAL_ENV: ",".join(real)}
    if "torch_xla" in real and "PJRT_DEVICE" not in os.environ:
        extra["PJRT_DEVICE"] = "CPU"  # the real torch-xla on this CPU
    return extra


NOTHING_ON_NEURON = ("nothing ran on neuron: no model and no tensor of the migrated run was placed on the neuron "
                     "device, so it ran on CPU (a device_map=\"auto\" load, a device variable left at \"cpu\", a "
                     "fallback branch now always taken); place the model and its inputs on \"neuron\"")


def neuron_check(data: dict, expected: bool) -> list[Check]:
    """A failed "neuron device" check when the run was meant for Neuron (``expected``: the original used the
    old stack, or the script names the device) and the emulated device saw nothing (real Neuron, cpu: no
    check)."""
    if expected and data.get("reached_neuron") is False:
        return [Check("neuron device", False, NOTHING_ON_NEURON, compared=False)]
    return []


_NEURON_LITERAL = re.compile(r"""(?<!backend=)["']neuron(?::\d+)?["']""")


def _mentions_neuron(script: Path) -> bool:
    """The script names the device in a string ("neuron", 'neuron:0'; not the compile backend
    `backend="neuron"`, and a marker comment does not count)."""
    try:
        return bool(_NEURON_LITERAL.search(script.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


def _take_main(opts: Options, report: dict, main: RunResult) -> bool:
    """Record the (migrated) run's figures and compile activity; False when it failed or observed nothing."""
    report["wall_time_s"] = main.data.get("wall_time_s")
    report["peak_rss_mb"] = main.data.get("peak_rss_mb")
    if not main.ok:
        report["reason"] = main.reason
        return False
    obs = main.data.get("observations") or {}
    report["observations"] = {k: observed_count(obs, k) for k in OBSERVED_KINDS}
    compile_info = obs.get("compile") or {}
    report["compile"] = {"graphs": compile_info.get("graphs", 0),
                         "compilations": compile_info.get("compilations", 0),
                         "recompiles": len(compile_info.get("recompiles") or [])}
    report["recompiles"] = [dict(r, hint=hint_for(r.get("reason", ""))) for r in compile_info.get("recompiles") or []]
    report["warmup"] = compile_info.get("warmup") or []
    report["_compile_lines"] = compile_lines(compile_info)
    if opts.nproc > 1 and main.data.get("process_group") is False:
        report["warnings"].append(
            f"--nproc {opts.nproc}: the script never started a process group (torch.distributed."
            f"init_process_group), so {opts.nproc} copies of it ran side by side, each alone; run it without "
            "--nproc, or check that it initialises torch.distributed under torchrun")
    skipped = (main.data.get("notebook") or {}).get("shell_lines_not_run")
    if skipped:
        report["warnings"].append(f"{skipped} shell line(s) of the notebook (!, %pip, %conda, %%bash...) were "
                                  "not run, on either side")
    if not observed_anything(obs):
        report["reason"] = ("nothing was observed: the script printed nothing, made no generate(), pipeline(), "
                            "Trainer, diffusion, model forward, loss.backward() or optimizer call, saved no "
                            "checkpoint, loaded or built no model and compiled no graph")
        return False
    return True


def _verdict(opts: Options, report: dict, checks: list[Check], obs: dict, comparing: bool) -> int:
    """Exit 1 on a failed check; in a comparison mode, exit 2 when no output was compared (OK means that
    at least one output was compared and matched); in audit/record mode the audit decides."""
    checks = list(checks)
    report["compared"] = sum(1 for c in checks if c.compared)
    checks.append(audit(obs.get("compile") or {}, opts.max_recompiles))
    report["checks"] = [c.to_dict() for c in checks]
    failed = [c for c in checks if not c.ok]
    if failed:
        report["reason"] = "; ".join(f"{c.name}: {c.detail}" for c in failed)
        return 1
    if comparing and not report["compared"]:
        report["reason"] = NOTHING_COMPARED
        return 2
    return 0


# ----------------------------------------------------------------------------- output

def render_text(report: dict) -> str:
    lines = list(report.get("notes") or [])
    lines.append(f"neuron-migrate verify {report['script']}")
    if report.get("device"):
        lines.append(f"device: {report['device']}    reference: {report.get('reference', '-')}")
    lines += library_lines(report)
    for line in report.get("determinism") or []:
        lines.append(f"{line}")
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
    lines += before.render(report)
    for line in report.get("_compile_lines") or []:
        lines.append(f"    {line}")
    stats = []
    if report.get("wall_time_s") is not None:
        t = f"wall time {report['wall_time_s']:.2f} s"
        if report.get("reference_wall_time_s") is not None:
            ref = "original" if report.get("mode") == "against" else "cpu reference"
            t += f" ({ref} {report['reference_wall_time_s']:.2f} s)"
        stats.append(t)
    if report.get("peak_rss_mb") is not None:
        stats.append(f"peak memory {report['peak_rss_mb']:.0f} MB")
    if stats:
        lines.append(", ".join(stats))
    for warning in report.get("warnings") or []:
        lines.append(f"warning: {warning}")
    if report.get("scratch"):
        lines.append(f"scratch working directories kept in {report['scratch']}")
    if report.get("recorded"):
        lines.append(f"golden file written: {report['recorded']}")
    status = report["status"]
    if status == "ok" and report.get("compared") == 0:
        lines.append("result: OK (compile audit only: no output was compared)")
    elif status == "ok":
        lines.append("result: OK")
    elif status == "mismatch":
        lines.append(f"result: FAILED ({sum(1 for c in checks if not c['ok'])} check(s) failed)")
    else:
        lines.append(f"result: ERROR: {report.get('reason')}")
    return "\n".join(lines) + "\n"


_LIBRARY_ORDER = ("transformers", "trl", "huggingface-hub", "tokenizers", "accelerate", "peft", "diffusers",
                  "datasets", "sentence-transformers", "torch")


def library_lines(report: dict) -> list[str]:
    """The header's lines: the library versions each side ran with, and the old stack real or emulated."""
    lines = []
    libs = report.get("libraries") or {}
    for side in ("original", "migrated"):
        got = libs.get(side)
        if got:
            names = sorted(got, key=lambda d: (_LIBRARY_ORDER.index(d) if d in _LIBRARY_ORDER else 99, d))
            lines.append(f"libraries ({side}): " + ", ".join(f"{d} {got[d]}" for d in names))
    env = report.get("original_env")
    if env:
        how = f"built in {env['built_s']} s, {env['size_mb']} MB" if env.get("built_now") else "cached"
        lines.append(f"original environment: {env['path']} ({how})")
    old = report.get("old_stack")
    if old:
        lines.append("old stack (original): " + ", ".join(f"{root} {how}" for root, how in sorted(old.items())))
    return lines


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
