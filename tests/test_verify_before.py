"""``verify SCRIPT --before "STEP [ARGS...]"`` (migrator/verify/before.py): the earlier steps of a
multi-step project run on each side, in that side's scratch directory, before the verified script.

Cost: one module fixture runs the trace_serve project once (trace then serve, on both sides, ~30 s of
CPU); every other test runs scripts that import neither torch nor transformers (a second each).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from migrator.verify import before, cache, core

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "tests" / "runnable" / "projects" / "trace_serve"
CLASSIFIER = ROOT / "tests" / "verify_fixtures" / "tiny-classifier"


def cli(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "migrator", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(cwd))


# ----------------------------------------------------------------------------- the trace_serve project

@pytest.fixture(scope="module")
def trace_serve(tmp_path_factory):
    """The trace_serve project (trace_classifier.py saves the artifact serve.py loads), its migration, and
    ``verify serve.py --against ORIG/serve.py --before "trace_classifier.py MODEL"`` on both sides."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    tmp = tmp_path_factory.mktemp("trace_serve")
    shutil.copytree(PROJECT, tmp / "orig")
    shutil.copytree(PROJECT, tmp / "mig")
    (tmp / "model").symlink_to(CLASSIFIER, target_is_directory=True)
    # the tracing script first (a run of its own): the serving script then loads what it saves
    # (tests/runnable/test_inference.py migrates the project the same way)
    for target in ("mig/trace_classifier.py", "mig"):
        migrate = cli(tmp, target, "--write", "--no-progress", timeout=120)
        assert migrate.returncode in (0, 1), migrate.stdout + migrate.stderr
    proc = cli(tmp, "verify", "mig/serve.py", "--device", "emulate", "--against", "orig/serve.py",
               "--before", "mig/trace_classifier.py model", "--original-cache", "cache", "--keep-scratch",
               "--atol", "1e-4", "--format", "json", "--output", "report.json", "--", "model")
    report = json.loads((tmp / "report.json").read_text())
    yield {"tmp": tmp, "proc": proc, "report": report}
    if report.get("scratch"):
        shutil.rmtree(report["scratch"], ignore_errors=True)


@pytest.mark.xdist_group("verify-before-trace-serve")
def test_trace_serve_the_step_runs_on_each_side_before_serve(trace_serve):
    report, proc = trace_serve["report"], trace_serve["proc"]
    assert report["reason"] is None or "before-step" not in report["reason"], proc.stderr[-3000:]
    steps = report["before_steps"]
    assert [(s["step"], s["args"], s["side"], s["device"], s["ok"]) for s in steps] == [
        ("trace_classifier.py", ["model"], "original", "cpu", True),
        ("trace_classifier.py", ["model"], "migrated", "emulate", True)]
    assert all(s["wall_time_s"] > 0 for s in steps)
    # each side served from its own artifact: a torch.jit.save'd trace, a save_pretrained folder
    scratch = Path(report["scratch"])
    orig_artifacts = list((scratch / "original").rglob("classifier_neuron.pt"))
    mig_artifacts = list((scratch / "migrated").rglob("classifier_neuron.pt"))
    assert len(orig_artifacts) == 1 and orig_artifacts[0].is_file()
    assert len(mig_artifacts) == 1 and (mig_artifacts[0] / "config.json").is_file()
    # neither artifact was written into the user's folders
    assert not list((trace_serve["tmp"] / "mig").glob("classifier_neuron.pt"))
    assert not list((trace_serve["tmp"] / "orig").glob("classifier_neuron.pt"))
    # the original (with its before-step) was cached
    assert len(list((trace_serve["tmp"] / "cache").glob("original-*.json"))) == 1


@pytest.mark.xdist_group("verify-before-trace-serve")
def test_trace_serve_serve_outputs_are_compared(trace_serve):
    report, proc = trace_serve["report"], trace_serve["proc"]
    checks = {c["name"]: c for c in report["checks"]}
    assert "printed output" in checks, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert checks["printed output"]["ok"] and checks["printed output"]["compared"]
    assert checks["printed output"]["detail"] == "2 printed lines equal"
    # serve.py's two calls of the model each side loads (the jit.load'ed trace, the compiled from_pretrained
    # model) and its weights; the trace ran its matmuls with bf16 operands: --atol 1e-4 (in the fixture)
    assert checks["forward[DistilBertForSequenceClassification]"]["ok"], checks
    assert checks["weights[DistilBertForSequenceClassification]"]["ok"], checks
    assert [c for c in report["checks"] if not c["ok"]] == [] and report["exit_code"] == 0, report["reason"]
    assert report["observations"]["forward"] == 2 and report["observations"]["stdout"] == 2


# ----------------------------------------------------------------------------- cheap projects (no torch)

STEP = 'import sys\nopen("artifact.txt", "w").write("made by {who} " + " ".join(sys.argv[1:]))\n'
MAIN = 'print(open("artifact.txt").read())\n'


def project(folder: Path, who: str = "the step", step: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "step.py").write_text(step if step is not None else STEP.format(who=who))
    (folder / "main.py").write_text(MAIN)
    return folder


def verify(cwd: Path, monkeypatch, **kw) -> tuple[int, dict, str]:
    monkeypatch.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    kw.setdefault("device", "emulate")
    code, report = core.run_verify(core.Options(**kw), out=out, err=err)
    return code, report, out.getvalue() + err.getvalue()


def sides(report: dict) -> list[tuple[str, str, bool]]:
    return [(s["side"], s["device"], s["ok"]) for s in report.get("before_steps") or []]


def test_against_a_path_runs_each_sides_step_and_caches_the_original(tmp_path, monkeypatch):
    project(tmp_path / "orig")
    project(tmp_path / "mig", step='import sys\nwith open("artifact.txt", "w") as fh:\n'
                                   '    fh.write("made by the step " + " ".join(sys.argv[1:]))\n')
    opts = dict(script=Path("mig/main.py"), against="orig/main.py", before=["mig/step.py x y"],
                original_cache=tmp_path / "cache")
    code, report, text = verify(tmp_path, monkeypatch, **opts)
    assert code == 0, text
    assert sides(report) == [("original", "cpu", True), ("migrated", "emulate", True)]
    assert text.count("made by the step x y") == 2
    assert "before-step step.py x y: ran on original (cpu) " in text and "(not compared)" in text
    assert not (tmp_path / "mig" / "artifact.txt").exists() and not (tmp_path / "orig" / "artifact.txt").exists()
    # the same steps: the original's observations (and its steps) come from the cache
    code, report, text = verify(tmp_path, monkeypatch, **opts)
    assert code == 0, text
    assert report["reference"].endswith("(observations from the cache)")
    assert sides(report) == [("migrated", "emulate", True)] and report["before_steps_cached"]
    assert "before-steps of the original: not run" in text
    # other arguments of a step: the original runs again
    code, report, text = verify(tmp_path, monkeypatch, **dict(opts, before=["mig/step.py x z"]))
    assert code == 0, text
    assert sides(report) == [("original", "cpu", True), ("migrated", "emulate", True)]
    assert "(observations from the cache)" not in report["reference"]


def test_a_failing_step_stops_verify_naming_the_step_and_the_side(tmp_path, monkeypatch):
    project(tmp_path / "orig", step='raise SystemExit("no model here")\n')
    project(tmp_path / "mig")
    code, report, text = verify(tmp_path, monkeypatch, script=Path("mig/main.py"), against="orig/main.py",
                                before=["mig/step.py"])
    assert code == 2
    assert report["reason"] == ("before-step step.py failed on the original side: the script exited with "
                                "status 1 (SystemExit: no model here)")
    assert sides(report) == [("original", "cpu", False)]  # the migrated side never ran
    assert "before-step step.py: ran on original (cpu) " in text and " FAILED" in text

    project(tmp_path / "mig2", step="import no_such_module_here\n")
    code, report, _ = verify(tmp_path, monkeypatch, script=Path("mig2/main.py"), against="mig/main.py",
                             before=["mig2/step.py"])
    assert code == 2
    assert report["reason"].startswith("before-step step.py failed on the migrated side: the script exited")
    assert "ModuleNotFoundError" in report["reason"]
    assert sides(report) == [("original", "cpu", True), ("migrated", "emulate", False)]


def test_against_a_revision_runs_the_steps_version_at_that_revision(tmp_path, monkeypatch):
    repo = project(tmp_path / "repo", who="the old step")

    def git(*args):
        subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=str(repo),
                       check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "old")
    (repo / "step.py").write_text(STEP.format(who="the new step"))
    code, report, text = verify(repo, monkeypatch, script=Path("main.py"), against="HEAD",
                                before=["step.py"])
    assert code == 1, text
    assert sides(report) == [("original", "cpu", True), ("migrated", "emulate", True)]
    assert "made by the old step" in text and "made by the new step" in text
    assert [c["name"] for c in report["checks"] if not c["ok"]] == ["printed output"]
    # the work tree is untouched: no artifact, step.py still modified
    assert not (repo / "artifact.txt").exists()


def test_without_an_original_the_step_precedes_each_run(tmp_path, monkeypatch):
    project(tmp_path / "p")
    code, report, text = verify(tmp_path / "p", monkeypatch, script=Path("main.py"), before=["step.py a"])
    assert code == 0, text
    assert report["mode"] == "self"
    assert sides(report) == [("migrated", "emulate", True), ("cpu reference", "cpu", True)]
    assert text.count("made by the step a") == 2
    assert not (tmp_path / "p" / "artifact.txt").exists()  # each run wrote in its own scratch directory
    code, report, _ = verify(tmp_path / "p", monkeypatch, script=Path("main.py"), before=["step.py a"],
                             reference="none", reference_explicit=True)
    assert code == 0 and sides(report) == [("migrated", "emulate", True)]


@pytest.mark.parametrize("spec, message", [
    ("", "--before needs a script"),
    ("mig/step.py 'a", "No closing quotation"),
    ("mig/nb.ipynb", "a notebook cannot be a before-step"),
    ("mig/absent.py", "--before mig/absent.py: script not found"),
    ("elsewhere.py", "not in "),
    ("mig/extra.py", "--before extra.py: the original has no extra.py (looked beside orig/main.py)"),
])
def test_unusable_steps_are_refused_before_anything_runs(tmp_path, monkeypatch, spec, message):
    project(tmp_path / "orig")
    project(tmp_path / "mig")
    for name in ("mig/nb.ipynb", "mig/extra.py", "elsewhere.py"):
        (tmp_path / name).write_text("{}\n")
    code, report, text = verify(tmp_path, monkeypatch, script=Path("mig/main.py"), against="orig/main.py",
                                before=[spec])
    assert code == 2 and message in report["reason"], report["reason"]
    assert not report.get("before_steps")


def test_cache_key_covers_the_steps(tmp_path):
    folder = project(tmp_path / "orig")

    def key(steps):
        return cache.key(folder, "main.py", [], tmp_path, sys.executable, 1,
                         before=before.cache_entries(steps, folder))

    one = [before.Step("step.py x", "step.py", ["x"])]
    base = key(one)
    assert key(one) == base
    assert key([]) != base
    assert key([before.Step("step.py y", "step.py", ["y"])]) != base
    assert key(one + one) != base
    (folder / "data").mkdir()
    (folder / "data" / "f.txt").write_text("1")
    with_data = key(one)
    # a file a step's argument names (outside the project) is part of the key
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "w.bin").write_text("1")
    arg = [before.Step("step.py model", "step.py", ["model"])]
    k1 = key(arg)
    (tmp_path / "model" / "w.bin").write_text("22")
    assert key(arg) != k1
    # the step's content, by its digest (the project walk covers it too)
    entries = before.cache_entries(one, folder)
    (folder / "step.py").write_text("print('changed')\n")
    assert before.cache_entries(one, folder) != entries and key(one) != with_data
