"""The catch table of ``neuron-migrate verify --against`` over the fault catalogue (issue 15 §4).

For every scenario of ``tests/verify_faults/catalogue.py``: migrate the original with the CLI, then
verify every variant of the migration against the original (the original runs once per scenario: its
observations are cached) and print, per variant, whether verify caught the fault (exit 1, the report
naming what differed) or passed the correct variant (exit 0).

    python benchmarks/verify_faults.py                 # every scenario
    python benchmarks/verify_faults.py generation      # one
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.verify_faults import catalogue as cat  # noqa: E402


def main(argv: list[str]) -> int:
    names = argv or list(cat.SCENARIOS)
    rows = []
    for name in names:
        scenario = cat.SCENARIOS[name]
        with tempfile.TemporaryDirectory(prefix=f"verify-faults-{name}-") as tmp:
            cat.prepare(scenario, Path(tmp))
            for variant in scenario.variants:
                start = time.perf_counter()
                proc = cat.run_variant(scenario, variant, Path(tmp), fmt="json")
                try:
                    report = json.loads(proc.stdout)
                except ValueError:
                    report = {"reason": (proc.stdout + proc.stderr).strip().splitlines()[-1:]}
                failed = [c["name"] + ": " + c.get("detail", "") for c in report.get("checks", []) if not c["ok"]]
                if variant.fault:
                    good = proc.returncode == 1 and any(variant.expect in f for f in failed)
                    verdict = "caught" if good else "MISSED"
                else:
                    good = proc.returncode == 0
                    verdict = "passed" if good else "FALSE ALARM"
                # the failing check that names the expected difference (else the first one)
                named = [f for f in failed if variant.fault and variant.expect in f]
                what = (named or failed or [report.get("reason") or ""])[0]
                rows.append((name, variant.name, "fault" if variant.fault else "correct", proc.returncode,
                             verdict, good, time.perf_counter() - start, str(what)[:120]))
    width = max(len(r[1]) for r in rows)
    print(f"{'scenario':<11} {'variant':<{width}}  {'kind':<7} exit  {'verdict':<11} time   what differed")
    for scen, var, kind, code, verdict, _good, secs, what in rows:
        print(f"{scen:<11} {var:<{width}}  {kind:<7} {code:>4}  {verdict:<11} {secs:5.1f}s {what}")
    faults = [r for r in rows if r[2] == "fault"]
    correct = [r for r in rows if r[2] == "correct"]
    print(f"\nfaults caught: {sum(r[5] for r in faults)}/{len(faults)}; "
          f"correct variants passed: {sum(r[5] for r in correct)}/{len(correct)}")
    return 0 if all(r[5] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
