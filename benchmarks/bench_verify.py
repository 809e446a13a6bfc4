"""Overhead of the ``neuron-migrate verify`` instrumentation (issue 7: at most +10% wall time).

    python benchmarks/bench_verify.py [--repeats 5] [--workload generate|loop|forward|train|all]
                                      [--new-tokens 32] [--steps 30] [--script SCRIPT -- ARGS...]

By default it builds the tiny Llama of tests/verify_fixtures/ in a temporary folder and runs a
script that uses plain ``cpu`` devices, so it runs unmodified without verify. Workloads (issue 15):
  generate  greedy generate() calls (the default)
  loop      a custom training loop: forward, loss.backward(), AdamW step(), zero_grad (every
            backward and step observed, the first forward calls and gradients fingerprinted)
  forward   forward calls of the loaded model from the script (the first 8 observed)
  train     training steps of a model moved to BENCH_DEVICE (``neuron`` in the cpu/emulate runs, so
            emulate's device tracking is exercised; one more variant, ``untracked``, runs emulate with
            NEURON_MIGRATE_VERIFY_TRACK=0: the ratio of the two is the tracking's cost)
Each repeat runs, in alternating order:
  plain     python SCRIPT                                     (no instrumentation)
  observe   verify child, device layer off, observation layer on  (device "neuron")
  cpu       verify child, --device cpu   (observation + neuron->cpu mapping mode)
  emulate   verify child, --device emulate (observation + fake neuron device)
and prints the median wall time of each and its ratio to ``plain``, for the whole process and for the
generate() loop alone (wall and process cpu time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "verify_fixtures"

SCRIPT = textwrap.dedent("""
    import sys, time, torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()
    new = int(sys.argv[2])
    start, cpu = time.perf_counter(), time.process_time()
    for prompt in ([1, 17, 33, 250, 7], [1, 400, 9, 12, 99, 101, 45, 3]):
        ids = torch.tensor([prompt])
        for _ in range(3):
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                           do_sample=False, pad_token_id=0)
    print(f"LOOP_S {time.perf_counter() - start:.4f} {time.process_time() - cpu:.4f}", flush=True)
""")

LOOP = textwrap.dedent("""
    import sys, time, torch
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(3, 500, (4, 32))
    start, cpu = time.perf_counter(), time.process_time()
    for step in range(int(sys.argv[2])):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    print(f"LOOP_S {time.perf_counter() - start:.4f} {time.process_time() - cpu:.4f}", flush=True)
    print(f"final loss {loss.item():.4f}")
""")

FORWARD = textwrap.dedent("""
    import sys, time, torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()
    ids = torch.randint(3, 500, (4, 32), generator=torch.Generator().manual_seed(0))
    start, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        for step in range(int(sys.argv[2]) * 4):
            logits = model(input_ids=ids).logits
    print(f"LOOP_S {time.perf_counter() - start:.4f} {time.process_time() - cpu:.4f}", flush=True)
    print("argmax", logits[0, -1].argmax().item())
""")


TRAIN_SCRIPT = textwrap.dedent("""
    import os, sys, time, torch
    from transformers import AutoModelForCausalLM
    device = os.environ.get("BENCH_DEVICE", "cpu")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1]).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [torch.randint(3, 500, (2, 32)) for _ in range(int(sys.argv[2]))]
    start, cpu = time.perf_counter(), time.process_time()
    for ids in batches:
        ids = ids.to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    print(f"LOOP_S {time.perf_counter() - start:.4f} {time.process_time() - cpu:.4f}", flush=True)
""")


def timed(cmd: list[str], env: dict) -> tuple[float, float | None, float | None]:
    """(process wall time, the script's own LOOP_S wall and cpu figures when it prints them)."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"benchmark run failed: {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    loop = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("LOOP_S ")]
    wall = float(loop[0][0]) if loop else None
    cpu = float(loop[0][1]) if loop and len(loop[0]) > 1 else None
    return elapsed, wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--workload", default="generate", choices=("generate", "loop", "forward", "train", "all"))
    parser.add_argument("--steps", type=int, default=30, help="training steps (loop); forward: 4x as many calls")
    parser.add_argument("--threads", default="1", help="OMP_NUM_THREADS for every run (1 = least noise)")
    parser.add_argument("--script", default=None, help="a script that runs without verify (cpu devices)")
    parser.add_argument("script_args", nargs="*")
    args = parser.parse_args()

    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", PYTHONPATH=str(ROOT),
               OMP_NUM_THREADS=args.threads)
    workloads = ["generate", "loop", "forward", "train"] if args.workload == "all" else [args.workload]
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "tiny-llama"
        if not args.script:
            subprocess.run([sys.executable, str(FIX / "make_tiny_llama.py"), str(model)], check=True,
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for workload in workloads:
            if args.script:
                script, script_args = args.script, args.script_args
            else:
                source, count = {"generate": (SCRIPT, args.new_tokens), "loop": (LOOP, args.steps),
                                 "forward": (FORWARD, args.steps), "train": (TRAIN_SCRIPT, args.steps)}[workload]
                script = str(Path(tmp) / f"bench_{workload}.py")
                Path(script).write_text(source)
                script_args = [str(model), str(count)]
            measure(workload, script, script_args, env, args.repeats, Path(tmp))
            if args.script:
                break


def measure(workload: str, script: str, script_args: list[str], env: dict, repeats: int, tmp: Path) -> None:
    child = [sys.executable, "-m", "migrator.verify.child", script, *script_args]
    on = {"BENCH_DEVICE": "neuron"} if workload == "train" else {}
    variants = {
        "plain": ([sys.executable, script, *script_args], {}),
        "observe": (child, {"NEURON_MIGRATE_VERIFY_DEVICE": "neuron"}),
        "cpu": (child, {"NEURON_MIGRATE_VERIFY_DEVICE": "cpu", **on}),
        "emulate": (child, {"NEURON_MIGRATE_VERIFY_DEVICE": "emulate", **on}),
    }
    if on:
        variants["untracked"] = (child, {"NEURON_MIGRATE_VERIFY_DEVICE": "emulate", "NEURON_MIGRATE_VERIFY_TRACK": "0",
                                         **on})
    times: dict[str, list[float]] = {k: [] for k in variants}
    loops: dict[str, list[float]] = {k: [] for k in variants}
    cpus: dict[str, list[float]] = {k: [] for k in variants}
    out = tmp / "obs.json"
    timed(variants["plain"][0], env)  # warm the page cache
    for i in range(repeats):
        order = list(variants) if i % 2 == 0 else list(reversed(variants))
        for name in order:
            cmd, extra = variants[name]
            wall, loop, cpu = timed(cmd, dict(env, NEURON_MIGRATE_VERIFY_OUT=str(out), **extra))
            times[name].append(wall)
            if loop is not None:
                loops[name].append(loop)
            if cpu is not None:
                cpus[name].append(cpu)
    print(f"[{workload}] script: {script} {' '.join(script_args)}  repeats: {repeats}")
    print("whole process (imports + model load + work):")
    base = statistics.median(times["plain"])
    for name, values in times.items():
        med = statistics.median(values)
        print(f"  {name:8s} median {med:7.3f} s  ratio {med / base:5.3f}  (min {min(values):.3f} s)")
    for title, figures in ((f"{workload} loop only, wall (timed inside the script):", loops),
                           (f"{workload} loop only, process cpu time (less sensitive to a busy machine):", cpus)):
        if not all(figures.values()):
            continue
        print(title)
        base = statistics.median(figures["plain"])
        for name, values in figures.items():
            med = statistics.median(values)
            print(f"  {name:8s} median {med:7.3f} s  ratio {med / base:5.3f}  (min {min(values):.3f} s)")

if __name__ == "__main__":
    main()
