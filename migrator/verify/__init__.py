"""``neuron-migrate verify``: run a (migrated) script under an observation layer on Neuron, an emulated
Neuron device or CPU, compare what it produced with a golden file or a CPU reference run, and audit
torch.compile recompilations. See CONTRACT.md § verify.

The child-side modules (``child``, ``instrument``, ``emulate``) import nothing heavy at import time.
"""

from migrator.verify.core import Options, VerifyError, render_json, render_text, run_verify
from migrator.verify.golden import GoldenError, read_golden, write_golden

__all__ = ["Options", "VerifyError", "GoldenError", "run_verify", "read_golden", "write_golden",
           "render_text", "render_json"]
