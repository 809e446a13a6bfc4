"""Issue 17, "Inference and traced models": old-stack inference projects (``projects/<name>/``, written
for torch_neuronx / optimum-neuron in our own words) are migrated as a user would (``neuron-migrate DIR
--write``, one run per project: the project facts of one must not reach another), and the result runs
under ``neuron-migrate verify --device emulate --against projects/<name>/SCRIPT``: the original runs on
the emulated old stack, the migration on the emulated neuron device, and what they compute, print and
save is compared (exit 0 = every check passed).

One shape per project:

* ``trace_serve``: trace + ``torch.jit.save`` in one script, ``torch.jit.load`` in another that does
  not import torch_neuronx. The tracing script is migrated first (a run of its own): the serving script
  then sees what it saves (the project facts: save_pretrained, and no trace left), where a run of both at
  once leaves it a marker (what another file traced is not seen; tests/test_traced_artifacts.py). The
  tracing script is verified here; the
  serving script, with the tracing script as a ``--before`` step on each side, in
  tests/test_verify_before.py (the same migration and comparison: one run for both);
* ``compile_only``: a plain module traced and ``.save()``d, never called: the migrated script must
  still compile (its warm-up call is the trace's run of the example inputs);
* ``torchscript``: ``from_pretrained(..., torchscript=True)`` before a trace;
* ``tuple_inputs``: example inputs held in a tuple and unpacked into the traced model;
* ``old_generation_args``: ``n_positions`` / ``context_length_estimate`` / ``amp`` / ``tp_degree`` on
  ``NeuronModelForCausalLM.from_pretrained``;
* ``pre_exported``: a load without ``export=True`` and a ``neuron_config.batch_size`` read.

The traced originals ran their float32 matmuls with bf16 operands (neuronx-cc's default auto-cast, which
the NM410 marker states); the migrated models compute in float32: their outputs are compared with
``--atol 1e-4`` (the logits of the tiny models differ by ~5e-5), everything else at the defaults.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.runnable.util import (PROJECTS, TINY_CLASSIFIER, TINY_LLAMA, exported_llama, migrate_copy, output,
                                 verify_against)

pytest.importorskip("torch")
pytest.importorskip("transformers")

NAMES = ("trace_serve", "compile_only", "torchscript", "tuple_inputs", "old_generation_args", "pre_exported")
TRACED = ("--atol", "1e-4")
#: files migrated in a run of their own before the project (the tracing script before the serving one)
FIRST = {"trace_serve": ("trace_classifier.py",)}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """Every project migrated once (each its own run), in parallel: name -> (folder, migration process)."""
    dest = tmp_path_factory.mktemp("runnable_inference")
    assert sorted(NAMES) == sorted(p.name for p in PROJECTS.iterdir() if p.is_dir() and p.name in NAMES)
    with ThreadPoolExecutor(3) as pool:
        done = dict(zip(NAMES, pool.map(lambda n: migrate_copy(n, dest, FIRST.get(n, ())), NAMES)))
    return done


def run_ok(project, script, *args, options=()):
    proc = verify_against(project, script, *args, options=options)
    out = output(proc)
    assert proc.returncode == 0 and "result: OK" in out, out[-5000:]
    assert "✗" not in out, out[-5000:]
    return out


def test_trace_then_serve(migrated):
    project, _ = migrated["trace_serve"]
    tracer, server = (project / "trace_classifier.py").read_text(), (project / "serve.py").read_text()
    assert "torch.jit" not in tracer and "torch.jit" not in server
    assert "save_pretrained" in tracer and "from_pretrained" in server
    out = run_ok(project, "trace_classifier.py", str(TINY_CLASSIFIER), options=TRACED)
    # the trace's run of the example vs the warm-up call; the jit.save'd artifact vs save_pretrained
    assert "✓ forward[DistilBertForSequenceClassification]  1 call(s)" in out, out
    assert "✓ checkpoint classifier_neuron.pt               40 tensors" in out, out


def test_compile_only(migrated):
    project, _ = migrated["compile_only"]
    out = run_ok(project, "compile_mlp.py")
    assert "compiled scorer_neuron.pt" in out
    # the point of the script: the graph is compiled (the trace did it; now the warm-up call does)
    assert "1 graph(s) compiled" in out and "✓ forward[Scorer]              1 call(s)" in out, out
    assert "✓ checkpoint scorer_neuron.pt  4 tensors" in out, out


def test_torchscript(migrated):
    project, _ = migrated["torchscript"]
    code = [line for line in (project / "classify.py").read_text().splitlines() if not line.lstrip().startswith("#")]
    assert not any("torchscript=" in line for line in code), code
    out = run_ok(project, "classify.py", str(TINY_CLASSIFIER), options=TRACED)
    assert "labels [" in out and "1 graph(s) compiled" in out and "1 printed lines equal" in out, out


def test_tuple_inputs(migrated):
    project, _ = migrated["tuple_inputs"]
    out = run_ok(project, "bench.py", str(TINY_CLASSIFIER), options=TRACED)
    assert "labels [" in out and "seconds True" in out, out
    # three calls of the traced module on each side (the trace's own run is not one of them)
    assert "forward[DistilBertForSequenceClassification]  3 call(s)" in out, out
    assert "0 recompile(s) after warm-up" in out, out


def test_old_generation_args(migrated):
    project, _ = migrated["old_generation_args"]
    source = (project / "generate.py").read_text()
    for old in ("n_positions", "context_length_estimate", "amp=", "tp_degree", "batch_size="):
        assert f"{old}" not in source.split("from_pretrained(")[1].split(")")[0], source
    assert "max_cache_len = 64" in source, source
    out = run_ok(project, "generate.py", str(TINY_LLAMA))
    assert "generated 2 4" in out and "token ids equal" in out, out


def test_pre_exported(migrated, tmp_path):
    project, _ = migrated["pre_exported"]
    source = (project / "chat.py").read_text()
    assert 'device_map="neuron"' in source and 'cache_implementation = "static"' in source, source
    assert "neuron_config" not in source.replace("neuron_config.json", ""), source
    out = run_ok(project, "chat.py", str(exported_llama(tmp_path, batch_size=2)))
    assert "completions 2" in out and "token ids equal" in out, out
