"""``python -m migrator.verify.child SCRIPT [ARGS...]``: run SCRIPT under the observation layer.

Environment:
  NEURON_MIGRATE_VERIFY_OUT     JSON file the observations are written to (rank 0 only)
  NEURON_MIGRATE_VERIFY_DEVICE  neuron | cpu | emulate | cuda | none
  NEURON_MIGRATE_VERIFY_SIDE    migrated | original (the original side runs with the old stack emulated)

A notebook (``.ipynb``) is executed cell by cell in a kernel instead (``notebook.py``).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time

OUT_ENV = "NEURON_MIGRATE_VERIFY_OUT"
DEVICE_ENV = "NEURON_MIGRATE_VERIFY_DEVICE"
INSTRUMENT_ENV = "NEURON_MIGRATE_VERIFY_INSTRUMENT"  # "0" = device layer only (benchmarks)
SEED_ENV = "NEURON_MIGRATE_VERIFY_SEED"        # an int: seed random/numpy/torch at start; "off": do not
DROPOUT_ENV = "NEURON_MIGRATE_VERIFY_DROPOUT"  # "off": every dropout (and SDPA's dropout_p) is the identity


def seed_everything(seed: int) -> None:
    """What ``transformers.set_seed(seed)`` does (random, NumPy, torch and with it every device
    generator), without importing anything: Python's generator now, NumPy's and torch's the moment each is
    first imported (a post-import hook: a script that sets its environment before ``import torch`` keeps
    that order). The same start on both sides, so an unseeded script compares by design, not by chance."""
    import random

    from migrator.verify import instrument

    random.seed(seed)
    instrument.on_import("numpy", lambda m: m.random.seed(seed))
    # torch.manual_seed also seeds the CUDA/XLA/neuron generators where they exist (lazily)
    instrument.on_import("torch", lambda m: m.manual_seed(seed))


def disable_dropout(torch) -> None:
    """Dropout draws from the device's generator, which differs by device by design (CPU, torch-xla,
    neuron): with NEURON_MIGRATE_VERIFY_DROPOUT=off both sides run every dropout as the identity
    (``nn.Dropout`` and the models call ``torch.nn.functional`` at call time), and SDPA with dropout_p=0."""
    F = torch.nn.functional

    def identity(input, p=0.5, training=True, inplace=False):
        return input

    for name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"):
        if hasattr(F, name):
            setattr(F, name, identity)
    sdpa = F.scaled_dot_product_attention

    def scaled_dot_product_attention(*args, **kwargs):
        if len(args) > 4:
            args = (*args[:4], 0.0, *args[5:])
        else:
            kwargs["dropout_p"] = 0.0
        return sdpa(*args, **kwargs)

    F.scaled_dot_product_attention = scaled_dot_product_attention


def _peak_rss_mb() -> float | None:
    try:
        import resource

        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)
    except Exception:  # pragma: no cover - not on Linux/macOS
        return None


def _write(path: str, payload: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(payload, fh)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m migrator.verify.child SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    script, args = argv[0], argv[1:]
    device = os.environ.get(DEVICE_ENV, "cpu")
    out = os.environ.get(OUT_ENV)
    rank = os.environ.get("RANK", "0")
    # whole lines, one write each: under torchrun several ranks share one pipe, and unbuffered
    # output (each print() argument its own write) would interleave mid-line
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True, write_through=False)
        except (AttributeError, ValueError):
            pass

    if script.endswith(".ipynb"):
        from migrator.verify import notebook

        return notebook.run(script, args, device, out)

    from migrator.verify import instrument, side

    if os.environ.get(INSTRUMENT_ENV, "1") == "0":
        instrument._state["capturing"] = False
    instrument.install(device)
    side.track_process_group()
    side.install_emulation()  # the original side: the old stack emulated on CPU (migrator.verify.oldstack)
    seed = os.environ.get(SEED_ENV, "off")
    if seed != "off":
        seed_everything(int(seed))
    if os.environ.get(DROPOUT_ENV) == "off":
        instrument.on_import("torch", disable_dropout)

    sys.argv = [script, *args]
    # as `python SCRIPT` does: the script's folder first (``-m`` put the cwd there instead)
    script_dir = os.path.dirname(os.path.abspath(script))
    if sys.path and sys.path[0] in ("", os.getcwd()):
        sys.path[0] = script_dir
    else:
        sys.path.insert(0, script_dir)
    status = {"exit": 0, "error": None}
    failure: BaseException | None = None
    start = time.perf_counter()
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        status["exit"] = code if isinstance(code, int) else (0 if code is None else 1)
        if isinstance(code, str):
            print(code, file=sys.stderr)
            status["error"] = f"SystemExit: {code}"  # sys.exit("message"): the message says why
    except BaseException as exc:
        import traceback

        traceback.print_exc()
        status["exit"] = 1
        status["error"] = f"{type(exc).__name__}: {exc}"
        failure = exc
    wall = time.perf_counter() - start
    if "migrator.verify.emulate" in sys.modules:
        sys.modules["migrator.verify.emulate"].uninstall()
    # every rank reads the final weights (tensor-parallel ones are gathered: a collective); rank 0 writes
    observations = instrument.snapshot(status["exit"])
    if out and rank == "0":
        payload = {
            "observations": observations,
            "wall_time_s": round(wall, 3),
            "peak_rss_mb": _peak_rss_mb(),
            "device": device,
            "exit": status["exit"],
            "error": status["error"],
        }
        payload.update(side.payload_fields(failure))
        try:
            _write(out, payload)
        except Exception as exc:  # pragma: no cover
            print(f"neuron-migrate verify: cannot write observations: {exc}", file=sys.stderr)
            return 2
    sys.stdout.flush()
    sys.stderr.flush()
    return int(status["exit"])


def _leave_process_group() -> None:
    """Ranks that finished leave the process group together: torn down at interpreter exit instead, a
    rank can die with SIGABRT after everything was recorded (seen with gloo under torchrun)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
    except Exception:  # pragma: no cover - best effort: the run itself is over
        pass


def end_rank(code: int) -> None:
    """End the process once the script is done. Under torchrun a rank that succeeded leaves the process
    group with the others, then the rank ends without the interpreter's final teardown, where the C++
    side of torch.distributed sometimes aborts on CPU ("terminate called without an active exception")
    after everything was recorded; the script's exit handlers still run. Elsewhere: a normal exit.
    (The tests' torchrun runner ends its ranks with this too: tests/torchrun_util.py.)"""
    if code == 0:
        _leave_process_group()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    end_rank(main(sys.argv[1:]))
