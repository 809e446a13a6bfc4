"""``neuron-migrate verify MIGRATED --against ORIGINAL`` (issue 15 §1, §3): the original (a path or a git
revision, materialised without touching the work tree) and the migrated script run in their own scratch
working directories, the original with NEURON_MIGRATE_VERIFY_SIDE=original on CPU; ``--original-python``;
notebooks in a kernel; honest verdicts (nothing compared, nproc without a process group).

The original side imports ``optimum.neuron``: the TEST DOUBLE ``verify_fixtures/optimum_double`` on
PYTHONPATH stands in for the old-stack emulation (``migrator.verify.oldstack``) until that lands.
Cost: one module fixture runs the torch runs once (two scripts and one notebook, two sides each).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from migrator.verify import core, scratch
from migrator.verify.compare import Check
from migrator.verify.runner import RunResult, run_child

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "verify_fixtures"
LLAMA = FIX / "tiny-llama"
DOUBLE = FIX / "optimum_double"


def env(double: bool = True) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(DOUBLE), str(ROOT)] if double else [str(ROOT)]))
    return env


def cli(cwd: Path, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "migrator", *args], capture_output=True, text=True,
                          timeout=timeout, env=env(), cwd=str(cwd))


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=str(cwd),
                   check=True, capture_output=True)


NOTEBOOK_CELLS = [
    "!pip install optimum-neuron\nimport torch\nfrom optimum.neuron import NeuronModelForCausalLM",
    "%%bash\necho not run",
    f"model = NeuronModelForCausalLM.from_pretrained({str(LLAMA)!r}, export=True, batch_size=1, "
    "sequence_length=64, num_cores=1, auto_cast_type='fp32')",
    "input_ids = torch.tensor([[1, 17, 33, 250, 7]])\n"
    "out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=6, "
    "do_sample=False, pad_token_id=0)\nprint('generated', out[0].tolist())",
]


def write_notebook(path: Path, cells: list[str]) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# generation")]
                                  + [nbformat.v4.new_code_cell(c) for c in cells])
    nbformat.write(nb, str(path))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A git checkout with an old-stack script and notebook, committed, then migrated with ``--write``
    (the state after ``neuron-migrate . --write``); a faulty migration elsewhere; verify them."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    tmp = tmp_path_factory.mktemp("against")
    repo = tmp / "repo"
    (repo / "proj").mkdir(parents=True)
    shutil.copy(FIX / "journey_generate.py", repo / "proj" / "gen.py")
    runs: dict = {"tmp": tmp, "repo": repo}
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    write_notebook(repo / "proj" / "nb.ipynb", NOTEBOOK_CELLS)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "the old stack")
    runs["migrate"] = cli(repo, "proj", "--write", "--no-progress", timeout=120)
    runs["head_before"] = (repo / ".git" / "HEAD").read_text()
    # the default: the script differs from HEAD -> --against HEAD
    runs["default"] = cli(repo, "verify", "proj/gen.py", "--device", "cpu", "--", str(LLAMA))
    runs["notebook"] = cli(repo, "verify", "proj/nb.ipynb", "--against", "HEAD", "--device", "cpu")
    # a faulty migration (generates 6 tokens instead of 8) against the original as a path, run by an
    # interpreter given explicitly
    original = tmp / "original" / "gen.py"
    original.parent.mkdir()
    shutil.copy(FIX / "journey_generate.py", original)
    fault = tmp / "faulty" / "gen.py"
    fault.parent.mkdir()
    fault.write_text((repo / "proj" / "gen.py").read_text().replace("max_new_tokens=8", "max_new_tokens=6"))
    runs["fault"] = cli(tmp, "verify", "faulty/gen.py", "--against", "original/gen.py", "--original-python",
                        sys.executable, "--device", "cpu", "--format", "json", "--", str(LLAMA))
    return runs


@pytest.mark.xdist_group("verify-against")
def test_migration_left_the_work_tree_modified(runs):
    assert runs["migrate"].returncode in (0, 1), runs["migrate"].stderr
    text = (runs["repo"] / "proj" / "gen.py").read_text()
    assert "from optimum" not in text and "AutoModelForCausalLM" in text


@pytest.mark.xdist_group("verify-against")
def test_default_is_against_head_when_the_script_is_modified_in_git(runs):
    proc = runs["default"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    report = lines[lines.index(next(x for x in lines if x.startswith("note: no --against given"))):]
    assert "compared with git HEAD's version (--against HEAD)" in report[0]
    assert "reference: original HEAD:proj/gen.py (git)" in proc.stdout
    assert "✓ generate[0]" in proc.stdout and "✓ generate[1]" in proc.stdout and "result: OK" in proc.stdout
    # both sides printed their tokens; the work tree and the repository are untouched
    assert proc.stdout.count("generated [") == 4
    assert (runs["repo"] / ".git" / "HEAD").read_text() == runs["head_before"]
    status = subprocess.run(["git", "status", "--porcelain"], cwd=str(runs["repo"]), capture_output=True,
                            text=True).stdout
    assert sorted(status.split()) == ["M", "M", "proj/gen.py", "proj/nb.ipynb"]


@pytest.mark.xdist_group("verify-against")
def test_notebook_against_head_runs_both_versions_in_a_kernel(runs):
    proc = runs["notebook"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reference: original HEAD:proj/nb.ipynb (git)" in proc.stdout
    assert re.search(r"✓ generate\[0\] +11 token ids equal", proc.stdout) and "result: OK" in proc.stdout
    assert proc.stdout.count("generated [1, 17, 33, 250, 7") == 2
    assert "not run" not in proc.stdout.replace("were not run", "")  # %%bash and !pip were skipped
    assert "warning: 3 shell line(s) of the notebook" in proc.stdout


@pytest.mark.xdist_group("verify-against")
def test_faulty_migration_against_a_path_under_another_interpreter_fails(runs):
    proc = runs["fault"]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["mode"] == "against" and report["reference"] == "original original/gen.py"
    assert report["original_python"] == os.path.abspath(sys.executable)
    failed = [c for c in report["checks"] if not c["ok"]]
    # the shorter generation, and the tokens the script prints
    assert any(c["name"].startswith("generate[") for c in failed)
    assert all(c["name"].startswith("generate[") or c["name"] == "printed output" for c in failed)
    assert "generate[0]" in report["reason"]


# ----------------------------------------------------------------------------- cheap runs (no torch)

def test_missing_original_python_is_an_error(tmp_path):
    (tmp_path / "a.py").write_text("print(1)\n")
    proc = cli(tmp_path, "verify", "a.py", "--against", "a.py", "--original-python", str(tmp_path / "nopython"))
    assert proc.returncode == 2
    assert "--original-python" in proc.stderr and "no such interpreter" in proc.stderr


def test_original_python_needs_an_original(tmp_path):
    (tmp_path / "a.py").write_text("print(1)\n")
    proc = cli(tmp_path, "verify", "a.py", "--original-python", sys.executable, "--device", "cpu")
    assert proc.returncode == 2 and "give it with --against" in proc.stderr


def test_revision_errors(tmp_path):
    (tmp_path / "a.py").write_text("print(1)\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "a.py")
    git(tmp_path, "commit", "-qm", "one")
    (tmp_path / "b.py").write_text("print(2)\n")
    proc = cli(tmp_path, "verify", "a.py", "--against", "nosuchrev", "--device", "cpu")
    assert proc.returncode == 2 and "neither a file nor a git revision" in proc.stderr
    proc = cli(tmp_path, "verify", "b.py", "--against", "HEAD", "--device", "cpu")
    assert proc.returncode == 2 and "b.py does not exist at HEAD" in proc.stderr
    outside = tmp_path.parent / f"{tmp_path.name}-nogit"
    outside.mkdir()
    (outside / "c.py").write_text("print(3)\n")
    proc = cli(outside, "verify", "c.py", "--against", "HEAD", "--device", "cpu")
    assert proc.returncode == 2 and "not in a git work tree" in proc.stderr


def test_self_comparison_says_so_on_the_first_line(tmp_path):
    shutil.copy(FIX / "nothing.py", tmp_path / "nothing.py")
    proc = cli(tmp_path, "verify", "nothing.py", "--device", "cpu", "--output", "report.txt")
    first = (tmp_path / "report.txt").read_text().splitlines()[0]
    assert first.startswith("note: no original given (--against): this compares the migrated script with "
                            "a second run of itself on plain CPU")
    assert "not what the migration changed" in first
    assert proc.returncode == 2  # and nothing was observed


NOT_EMULATED = '''
class NotEmulated(Exception):
    def __init__(self, api):
        super().__init__(f"cannot run the original: `{api}` is not emulated")
        self.api = api

try:
    raise NotEmulated("optimum.neuron.NeuronFancyModel")
except NotEmulated as exc:
    raise ImportError("cannot import name 'NeuronFancyModel'") from exc
'''


def test_not_emulated_on_the_original_side_is_exit_2_naming_the_api(tmp_path):
    (tmp_path / "orig.py").write_text(NOT_EMULATED)
    (tmp_path / "new.py").write_text("print('migrated')\n")
    proc = cli(tmp_path, "verify", "new.py", "--against", "orig.py", "--device", "cpu")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert ("original run (cpu): cannot run the original: `optimum.neuron.NeuronFancyModel` is not emulated"
            in proc.stderr)
    assert "migrated" not in proc.stdout  # the migrated side never ran


def test_old_stack_import_error_on_the_original_side_is_not_emulated(tmp_path):
    (tmp_path / "orig.py").write_text("import torch_neuronx.xla_impl.nothing_here\n")
    proc = cli(tmp_path, "verify", "orig.py", "--against", "orig.py", "--device", "cpu")
    assert proc.returncode == 2
    assert "cannot run the original: `torch_neuronx" in proc.stderr


SIDES_SCRIPT = '''
import json, os, sys
# relative inputs resolve in each side's working directory, outputs stay in it
data = open(sys.argv[1]).read()
os.makedirs("out", exist_ok=True)
if os.path.exists("out/result.txt"):
    sys.exit("collision: the other side's output is visible")
open("out/result.txt", "w").write(data)
open(os.path.join(os.path.dirname(__file__), "beside.txt"), "w").write("x")
print("side", os.environ["NEURON_MIGRATE_VERIFY_SIDE"], os.path.basename(__file__), data.strip())
'''


def test_each_side_runs_in_its_own_scratch_working_directory(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.txt").write_text("payload\n")
    for side in ("orig", "proj"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "run.py").write_text(SIDES_SCRIPT)
    proc = cli(tmp_path, "verify", "proj/run.py", "--against", "orig/run.py", "--device", "cpu", "--",
               "data/in.txt")
    assert "side original run.py payload" in proc.stdout, proc.stdout + proc.stderr
    assert "side migrated run.py payload" in proc.stdout
    # no collision: both ran; what they printed differs by the side's name only
    assert proc.returncode == 1 and "✗ printed output" in proc.stdout, proc.stdout
    # the user's folders got nothing; the scratch directories are gone
    assert not (tmp_path / "out").exists() and not (tmp_path / "proj" / "beside.txt").exists()
    assert not (tmp_path / "orig" / "beside.txt").exists()


# ----------------------------------------------------------------------------- units

def test_scratch_layout_mirrors_the_working_directory(tmp_path):
    user = tmp_path / "user"
    (user / "models").mkdir(parents=True)
    (user / "a" / "proj" / "sub").mkdir(parents=True)
    (user / "a" / "other.txt").write_text("o")
    (user / "a" / "proj" / "t.py").write_text("t")
    (user / "a" / "proj" / "sub" / "d.json").write_text("{}")
    (user / "a" / "proj" / "__pycache__").mkdir()
    root = tmp_path / "scratch"
    place = scratch.migrated_side(root, user / "a" / "proj" / "t.py", user)
    assert place.cwd == root / "migrated" / "cwd"
    assert (place.cwd / "models").is_symlink() and (place.cwd / "a" / "other.txt").is_symlink()
    assert not (place.cwd / "a").is_symlink() and not (place.cwd / "a" / "proj").is_symlink()
    assert place.script == place.cwd / "a" / "proj" / "t.py" and place.script.read_text() == "t"
    assert (place.cwd / "a" / "proj" / "sub" / "d.json").is_file()
    assert not (place.cwd / "a" / "proj" / "__pycache__").exists()
    # started from inside the project: the working directory is that place in the copy
    inner = scratch.migrated_side(tmp_path / "s2", user / "a" / "proj" / "t.py", user / "a" / "proj" / "sub")
    assert inner.cwd == tmp_path / "s2" / "migrated" / "proj" / "sub"
    # elsewhere: the working directory is mirrored, the project lies beside it
    far = scratch.migrated_side(tmp_path / "s3", user / "a" / "proj" / "t.py", user / "models")
    assert far.script == tmp_path / "s3" / "migrated" / "project" / "proj" / "t.py"


def test_revision_copy_keeps_untracked_files_and_takes_tracked_ones_from_the_revision(tmp_path):
    repo = tmp_path / "repo"
    (repo / "p").mkdir(parents=True)
    (repo / "p" / "t.py").write_text("old\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    (repo / "p" / "t.py").write_text("new\n")
    (repo / "p" / "weights.bin").write_text("w")
    assert scratch.modified_in_work_tree(repo / "p" / "t.py")
    assert not scratch.modified_in_work_tree(repo / "p" / "weights.bin")
    place = scratch.original_from_revision(tmp_path / "s", repo / "p" / "t.py", "HEAD", repo)
    assert place.script.read_text() == "old\n" and (place.script.parent / "weights.bin").read_text() == "w"
    assert (repo / "p" / "t.py").read_text() == "new\n"


def _opts(**kw) -> core.Options:
    return core.Options(script=Path("s.py"), **kw)


def test_a_compile_audit_alone_is_not_ok():
    report = {"warnings": []}
    obs = {"compile": {"graphs": 1, "recompiles": []}}
    assert core._verdict(_opts(), report, [], obs, comparing=True) == 2
    assert report["reason"].startswith("nothing compared")
    # audit-only mode (--reference none, --record): the audit decides, the result line says so
    report = {"warnings": [], "status": "ok", "script": "s.py", "checks": []}
    assert core._verdict(_opts(), report, [], obs, comparing=False) == 0
    report["status"] = "ok"
    assert "result: OK (compile audit only: no output was compared)" in core.render_text(report)
    report = {"warnings": []}
    assert core._verdict(_opts(), report, [Check("generate[0]", True, "equal")], obs, comparing=True) == 0


def test_nproc_without_a_process_group_is_warned_about():
    report = {"warnings": []}
    data = {"observations": {"generate": [{}]}, "process_group": False}
    assert core._take_main(_opts(nproc=2), report, RunResult(True, data=data))
    assert report["warnings"] and "never started a process group" in report["warnings"][0]
    report = {"warnings": []}
    core._take_main(_opts(nproc=2), report, RunResult(True, data=dict(data, process_group=True)))
    assert report["warnings"] == []


def test_the_child_reports_whether_a_process_group_was_started(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "pg.py"
    script.write_text(
        "import sys, torch.distributed as dist\n"
        "if sys.argv[1] == 'yes':\n"
        "    dist.init_process_group('gloo', init_method='tcp://127.0.0.1:0', rank=0, world_size=1)\n"
        "    dist.destroy_process_group()\n")
    import io

    sink = io.StringIO()
    yes = run_child(script, ["yes"], "cpu", stdout=sink, stderr=sink, side="original", cwd=tmp_path)
    assert yes.data.get("process_group") is True and yes.data.get("side") == "original", sink.getvalue()
    no = run_child(script, ["no"], "cpu", stdout=sink, stderr=sink)
    assert no.data.get("process_group") is False and no.data.get("side") == "migrated"


def test_run_child_rejects_an_unknown_side(tmp_path):
    with pytest.raises(ValueError):
        run_child(tmp_path / "x.py", [], "cpu", side="both")


def test_original_cache_key_follows_the_original_its_arguments_and_interpreter(tmp_path):
    from migrator.verify import cache

    proj = tmp_path / "p"
    proj.mkdir()
    (proj / "t.py").write_text("a")
    (tmp_path / "data.txt").write_text("d")
    base = cache.key(proj, "t.py", ["--data", "data.txt"], tmp_path, sys.executable, 1)
    assert base == cache.key(proj, "t.py", ["--data", "data.txt"], tmp_path, sys.executable, 1)
    assert base != cache.key(proj, "t.py", ["--data", "data.txt"], tmp_path, sys.executable, 2)
    assert base != cache.key(proj, "t.py", ["--data=data.txt"], tmp_path, sys.executable, 1)
    (tmp_path / "data.txt").write_text("changed!")
    changed_arg = cache.key(proj, "t.py", ["--data", "data.txt"], tmp_path, sys.executable, 1)
    assert changed_arg != base
    (proj / "t.py").write_text("b")
    assert cache.key(proj, "t.py", ["--data", "data.txt"], tmp_path, sys.executable, 1) != changed_arg
    assert cache.load(tmp_path / "c", base) is None
    cache.store(tmp_path / "c", base, {"observations": {"generate": []}, "wall_time_s": 1.0})
    assert cache.load(tmp_path / "c", base)["wall_time_s"] == 1.0
