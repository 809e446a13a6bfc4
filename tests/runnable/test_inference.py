"""Issue 17, "Inference and traced models": old-stack inference projects (``projects/<name>/``, written
for torch_neuronx / optimum-neuron in our own words) are migrated as a user would (``neuron-migrate DIR
--write``, one run per project: the project facts of one must not reach another) and the result runs
under ``neuron-migrate verify --device emulate --reference none`` (exit 0).

One shape per project:

* ``trace_serve``: trace + ``torch.jit.save`` in one script, ``torch.jit.load`` in another that does
  not import torch_neuronx (the project facts tie them);
* ``compile_only``: a plain module traced and ``.save()``d, never called: the migrated script must
  still compile (verify's compile audit observes the graph);
* ``torchscript``: ``from_pretrained(..., torchscript=True)`` before a trace;
* ``tuple_inputs``: example inputs held in a tuple and unpacked into the traced model;
* ``old_generation_args``: ``n_positions`` / ``context_length_estimate`` / ``amp`` / ``tp_degree`` on
  ``NeuronModelForCausalLM.from_pretrained``;
* ``pre_exported``: a load without ``export=True`` and a ``neuron_config.batch_size`` read.

Every script prints a line its test asserts; the migrated sources are asserted where the shape is
about what the migration writes (the artifact both sides of ``trace_serve`` agree on, the warm-up).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.runnable.util import PROJECTS, TINY_CLASSIFIER, TINY_LLAMA, migrate_copy, output, verify

pytest.importorskip("torch")
pytest.importorskip("transformers")

NAMES = ("trace_serve", "compile_only", "torchscript", "tuple_inputs", "old_generation_args", "pre_exported")
EMULATE = ("--device", "emulate", "--reference", "none")


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """Every project migrated once (each its own run), in parallel: name -> (folder, migration process)."""
    dest = tmp_path_factory.mktemp("runnable_inference")
    assert sorted(NAMES) == sorted(p.name for p in PROJECTS.iterdir() if p.is_dir() and p.name in NAMES)
    with ThreadPoolExecutor(3) as pool:
        done = dict(zip(NAMES, pool.map(lambda n: migrate_copy(n, dest), NAMES)))
    return done


def run_ok(script, *args):
    proc = verify(script, *args, options=EMULATE)
    assert proc.returncode == 0, output(proc)
    return output(proc)


def test_trace_then_serve(migrated):
    project, _ = migrated["trace_serve"]
    tracer, server = (project / "trace_classifier.py").read_text(), (project / "serve.py").read_text()
    assert "torch.jit" not in tracer and "torch.jit" not in server
    assert "save_pretrained" in tracer and "from_pretrained" in server
    out = run_ok(project / "trace_classifier.py", str(TINY_CLASSIFIER))
    assert "saved classifier_neuron.pt" in out
    out = run_ok(project / "serve.py", str(TINY_CLASSIFIER))
    assert out.count("label ") == 2, out
    assert "1 graph(s) compiled" in out, out


def test_compile_only(migrated):
    project, _ = migrated["compile_only"]
    out = run_ok(project / "compile_mlp.py")
    assert "compiled scorer_neuron.pt" in out
    # the point of the script: the graph is compiled (the trace did it; now the warm-up call does)
    assert "1 graph(s) compiled" in out, out
    assert (project / "scorer_neuron.pt").is_file()


def test_torchscript(migrated):
    project, _ = migrated["torchscript"]
    code = [line for line in (project / "classify.py").read_text().splitlines() if not line.lstrip().startswith("#")]
    assert not any("torchscript=" in line for line in code), code
    out = run_ok(project / "classify.py", str(TINY_CLASSIFIER))
    assert "labels [" in out and "1 graph(s) compiled" in out, out


def test_tuple_inputs(migrated):
    project, _ = migrated["tuple_inputs"]
    out = run_ok(project / "bench.py", str(TINY_CLASSIFIER))
    assert "labels [" in out and "seconds True" in out, out
    assert "0 recompile(s) after warm-up" in out, out


def test_old_generation_args(migrated):
    project, _ = migrated["old_generation_args"]
    source = (project / "generate.py").read_text()
    for old in ("n_positions", "context_length_estimate", "amp=", "tp_degree", "batch_size="):
        assert f"{old}" not in source.split("from_pretrained(")[1].split(")")[0], source
    assert "max_cache_len = 64" in source, source
    out = run_ok(project / "generate.py", str(TINY_LLAMA))
    assert "generated 2 4" in out, out


def test_pre_exported(migrated):
    project, _ = migrated["pre_exported"]
    source = (project / "chat.py").read_text()
    assert 'device_map="neuron"' in source and 'cache_implementation = "static"' in source, source
    assert "neuron_config" not in source.replace("neuron_config.json", ""), source
    out = run_ok(project / "chat.py", str(TINY_LLAMA))
    assert "completions 2" in out, out
