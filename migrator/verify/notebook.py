"""``verify NOTEBOOK.ipynb``: execute a notebook's code cells in order in a kernel (nbclient + ipykernel,
the ``verify`` extra) with the same observation layer as a script, and the old-stack emulation on the
original side.

The verify child (``child.py``) drives the kernel: it prepends a cell that installs the observation layer
in the kernel (``kernel_begin``) and appends one that writes the observations (``kernel_end``); a cell
that raises stops the run, and the kernel writes what it observed with the error. Each cell's printed
output is streamed to the child's stdout.

Shell escapes and shell cell magics are not run, on either side: a line that starts with ``!``, ``%pip``,
``%conda``, ``%sx`` or ``%system`` and cells that start with ``%%bash``, ``%%sh``, ``%%script`` or
``%%system`` (they install packages — the old stack, on the original side — or run commands outside the
kernel, which verify can neither observe nor undo). Every other magic (``%matplotlib``, ``%time``,
``%%writefile``, ``%load_ext``...) runs as IPython runs it. The report counts the lines left out.
"""

from __future__ import annotations

import os
import re
import sys
import time

SHELL_LINE = re.compile(r"^(\s*)(!|%(pip|conda|sx|system)\b)")
SHELL_CELL = re.compile(r"^\s*%%(bash|sh|script|system)\b")

_kernel = {"start": None, "failure": None, "written": False, "skipped": 0}


def strip_shell(source: str) -> tuple[str, int]:
    """``source`` with shell escapes replaced by ``pass`` (indentation kept); and how many lines."""
    if SHELL_CELL.match(source):
        n = len(source.splitlines())
        return "# neuron-migrate verify: shell cell not run\n", n
    lines, n = [], 0
    for line in source.splitlines():
        m = SHELL_LINE.match(line)
        if m:
            lines.append(f"{m.group(1)}pass  # neuron-migrate verify: not run: {line.strip()}")
            n += 1
        else:
            lines.append(line)
    return "\n".join(lines), n


# ----------------------------------------------------------------------------- in the kernel

def kernel_begin(script: str, args: list[str], skipped: int = 0) -> None:
    from migrator.verify import instrument, side

    device = os.environ.get("NEURON_MIGRATE_VERIFY_DEVICE", "cpu")
    instrument.install(device)
    side.track_process_group()
    side.install_emulation()
    sys.argv = [script, *args]
    _kernel.update(start=time.perf_counter(), skipped=skipped)
    try:
        ip = get_ipython()  # type: ignore[name-defined]  # noqa: F821 - defined in a kernel
    except NameError:  # pragma: no cover - not in IPython
        return

    def post_run_cell(result) -> None:
        exc = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
        if exc is not None and _kernel["failure"] is None:
            _kernel["failure"] = exc
            kernel_end()

    ip.events.register("post_run_cell", post_run_cell)


def kernel_end() -> None:
    """Write the observations (once; rank 0 only), as the script child does."""
    if _kernel["written"]:
        return
    _kernel["written"] = True
    from migrator.verify import instrument, side

    out = os.environ.get("NEURON_MIGRATE_VERIFY_OUT")
    if not out or os.environ.get("RANK", "0") != "0":
        return
    failure = _kernel["failure"]
    observations = dict(instrument.OBS)
    observations["compile"] = instrument.compile_activity()
    payload = {
        "observations": observations,
        "wall_time_s": round(time.perf_counter() - (_kernel["start"] or time.perf_counter()), 3),
        "peak_rss_mb": side.peak_rss_mb(),
        "device": os.environ.get("NEURON_MIGRATE_VERIFY_DEVICE", "cpu"),
        "exit": 1 if failure is not None else 0,
        "error": f"{type(failure).__name__}: {failure}" if failure is not None else None,
        "notebook": {"shell_lines_not_run": _kernel["skipped"]},
    }
    payload.update(side.payload_fields(failure))
    side.write_json(out, payload)


# ----------------------------------------------------------------------------- the driver (verify child)

def run(path: str, args: list[str], device: str, out: str | None) -> int:
    """Execute notebook ``path`` in a kernel started in the current directory; returns the exit status."""
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
    except ImportError as exc:
        print(f"neuron-migrate verify: notebooks need nbclient and ipykernel (pip install "
              f"'neuron-migrate[verify]'): {exc}", file=sys.stderr)
        return 2
    nb = nbformat.read(path, as_version=4)
    skipped = 0
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        source, n = strip_shell(cell.source)
        skipped += n
        cell.source = source
        cells.append(cell)
    begin = nbformat.v4.new_code_cell(
        "import migrator.verify.notebook as _neuron_migrate_verify\n"
        f"_neuron_migrate_verify.kernel_begin({path!r}, {list(args)!r}, {skipped})")
    end = nbformat.v4.new_code_cell("_neuron_migrate_verify.kernel_end()")
    nb.cells = [begin, *cells, end]

    def on_cell_executed(cell=None, **_):
        for output in (cell or {}).get("outputs", []):
            if output.get("output_type") == "stream":
                stream = sys.stdout if output.get("name") == "stdout" else sys.stderr
                stream.write(output.get("text", ""))
                stream.flush()
            elif output.get("output_type") == "error":
                sys.stderr.write("\n".join(output.get("traceback", [])) + "\n")

    client = NotebookClient(nb, timeout=None, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": os.getcwd()}},
                            on_cell_executed=on_cell_executed)
    try:
        client.execute()
    except CellExecutionError:
        return 1
    except Exception as exc:  # the kernel died, could not start...
        print(f"neuron-migrate verify: the notebook kernel failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0
