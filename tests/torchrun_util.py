"""What the tests that run scripts under ``torchrun`` on CPU (gloo) share.

Two things made those tests flaky on a loaded 2-core machine, and both are handled here:

* a rank could die with SIGABRT ("terminate called without an active exception") in the
  interpreter's final teardown, after every result was printed: scripts run through
  :data:`RUN_TO_THE_END`, which leaves the group together (barrier, destroy), runs the exit handlers
  and ends the process once the script is done;
* the ranks share one stdout, so one rank's newline can come after the other rank's text:
  :func:`json_reports` reads the JSON objects wherever they are.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: what a rank does after the script: what the verify child does (migrator.verify.child.end_rank) --
#: leave the process group together with the other ranks, run the exit handlers, and end without the
#: interpreter's final teardown (where the C++ side of torch.distributed sometimes aborts on CPU:
#: "terminate called without an active exception", even after destroy)
FINISH = '''
from migrator.verify.child import end_rank as _end_rank

_end_rank(0)
'''

#: ``python RUN_TO_THE_END script.py ARGS``: runs the script as __main__, then FINISH
RUN_TO_THE_END = '''\
import runpy
import sys

sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
''' + FINISH


def torchrun(tmp_path: Path, script: Path, *args: str, nproc: int = 2) -> list[str]:
    """The command line that runs ``script`` (unchanged) on ``nproc`` ranks, then FINISH."""
    runner = tmp_path / "_run_to_the_end.py"
    runner.write_text(RUN_TO_THE_END)
    # --standalone: torchrun binds a free port itself (no race with other tests' launches)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            str(runner), str(script), *args]


def json_reports(out: str, first_key: str) -> list[dict]:
    """The ``{"<first_key>": ...}`` JSON objects printed by the ranks of a torchrun run."""
    decoder, found, i = json.JSONDecoder(), [], 0
    while (i := out.find('{"%s"' % first_key, i)) >= 0:
        obj, i = decoder.raw_decode(out, i)
        found.append(obj)
    return found
