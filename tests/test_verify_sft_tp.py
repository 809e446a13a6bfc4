"""``neuron-migrate verify`` on training and tensor-parallel scripts (issue 7, "Proof").

* A TRL 1.16 ``SFTTrainer`` script (compiled, ``pad_to_multiple_of`` left at "auto") under emulate:
  TRL sees a neuron device, pads every batch to 128 and compiles with backend "neuron" and
  dynamic=False; the audit finds 0 recompiles after warm-up. The same script with padding turned
  off recompiles at every new batch length and the audit fails, naming the cause.
* A ``DistributedConfig(tp_size=2)`` inference script under ``--nproc 2`` (torchrun, the neuron
  process group on gloo) matches a golden file recorded by the single-process, unsharded run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("trl")
pytest.importorskip("datasets")

from tests.verify_util import run_verify  # noqa: E402

FIX = Path(__file__).parent / "verify_fixtures"
MODEL = FIX / "tiny-llama"
verify = run_verify


def test_sft_under_emulate_pads_batches_to_128_and_does_not_recompile(tmp_path):
    proc = verify(str(FIX / "sft_train.py"), "--device", "emulate", "--reference", "none",
                  "--max-recompiles", "0", "--", str(MODEL), str(tmp_path / "out"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # TRL's neuron branches were taken: device neuron:0, "auto" padding = 128, backend "neuron"
    assert "device neuron:0 pad_to_multiple_of 128 compile backend neuron" in out
    shapes = re.findall(r"^batch \((\d+), (\d+)\)$", proc.stdout, re.M)
    assert len(shapes) == 3 and all(s == ("2", "128") for s in shapes), shapes  # texts are 5-30 tokens
    assert re.search(r"✓ compile audit\s+[1-9]\d* graph\(s\) compiled, 0 recompile\(s\) after warm-up",
                     proc.stdout)
    assert "observed: 3 logged loss(es)" in proc.stdout
    assert "result: OK" in proc.stdout


def test_sft_without_padding_recompiles_and_the_audit_names_the_cause(tmp_path):
    proc = verify(str(FIX / "sft_train.py"), "--device", "emulate", "--reference", "none",
                  "--", str(MODEL), str(tmp_path / "out"), "--pad-to-multiple-of", "none")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    lengths = {int(m) for m in re.findall(r"^batch \(2, (\d+)\)$", proc.stdout, re.M)}
    assert len(lengths) == 3 and all(n < 128 for n in lengths), lengths
    assert re.search(r"✗ compile audit\s+\d+ graph\(s\) compiled, [1-9]\d* recompile\(s\)", proc.stdout)
    assert re.search(r"tensor 'kwargs\['input_ids'\]' size mismatch at index 1\. expected \d+, actual \d+",
                     proc.stdout)
    assert "likely cause: input length changed: pad inputs to a fixed length (training: pad_to_multiple_of=128" \
        in proc.stdout


def test_tensor_parallel_under_nproc_2_matches_the_single_process_golden(tmp_path):
    golden = tmp_path / "single.json"
    single = verify(str(FIX / "tp_generate.py"), "--device", "emulate", "--record", str(golden),
                    "--", str(MODEL))
    assert single.returncode == 0, single.stdout + single.stderr
    assert "rank 0 q_proj Parameter local (64, 64)" in single.stderr  # unsharded (a diagnostic on stderr)

    proc = verify(str(FIX / "tp_generate.py"), "--device", "emulate", "--nproc", "2", "--baseline",
                  str(golden), "--", str(MODEL), "--tp", "2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # both ranks hold half of each sharded weight (a DTensor) and generate the same tokens
    assert "rank 0 q_proj DTensor local (32, 64)" in proc.stderr
    assert "rank 1 q_proj DTensor local (32, 64)" in proc.stderr
    expected = re.findall(r"^rank 0 generated (\[.*\])$", single.stdout, re.M)
    assert len(expected) == 2
    for rank in (0, 1):
        assert re.findall(rf"^rank {rank} generated (\[.*\])$", proc.stdout, re.M) == expected
    assert "reference: golden file" in proc.stdout
    # exact tokens, and the logits of the sharded model within the default tolerances (~1e-7 apart)
    assert re.search(r"✓ generate\[0\]\s+13 token ids equal, scores within tolerance", proc.stdout)
    assert re.search(r"✓ generate\[1\]\s+16 token ids equal, scores within tolerance", proc.stdout)
    # the sharded weights, gathered at exit, are the single process's; rank 0's printed tokens too
    assert re.search(r"✓ weights\[LlamaForCausalLM\]\s+21 parameters within tolerance", proc.stdout)
    assert re.search(r"✓ printed output\s+2 printed lines equal", proc.stdout)
    assert "result: OK" in proc.stdout
