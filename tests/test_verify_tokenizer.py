"""The committed tiny model fixture (``verify_fixtures/tiny-llama``) and its locally trained tokenizer.

``make_tiny_llama.py`` rebuilds every committed file byte for byte (weights from a seed, a byte-level
BPE tokenizer trained with ``tokenizers`` on a built-in corpus), and verify runs a script that feeds
text prompts through that tokenizer (a padded batch through ``generate`` and a ``text-generation``
pipeline) under emulate, against the plain-cpu reference.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "verify_fixtures"
MODEL = FIX / "tiny-llama"
FILES = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


def env() -> dict:
    return dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1",
                PYTHONPATH=str(ROOT))


def test_make_tiny_llama_rebuilds_the_committed_files_byte_for_byte(tmp_path):
    out = tmp_path / "tiny-llama"
    proc = subprocess.run([sys.executable, str(FIX / "make_tiny_llama.py"), str(out)], capture_output=True,
                          text=True, env=env(), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == FILES
    assert sorted(p.name for p in MODEL.iterdir()) == FILES
    for name in FILES:
        assert (out / name).read_bytes() == (MODEL / name).read_bytes(), f"{name} differs from the committed copy"


def test_committed_tokenizer_matches_the_model():
    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(MODEL))
    config = AutoConfig.from_pretrained(str(MODEL))
    assert len(tok) == config.vocab_size == 512
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (
        config.pad_token_id, config.bos_token_id, config.eos_token_id) == (0, 1, 2)
    text = "Hello, world! Pad your batches to 128."
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id and max(ids) < 512
    assert len(ids) < len(text) // 2  # BPE merges were learned, not just bytes
    assert tok.decode(ids, skip_special_tokens=True) == text  # byte-level: lossless


def test_verify_text_prompts_through_the_committed_tokenizer():
    proc = subprocess.run([sys.executable, "-m", "migrator", "verify", str(FIX / "text_generate.py"),
                           "--device", "emulate", "--", str(MODEL)], capture_output=True, text=True,
                          env=env(), cwd=str(ROOT), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    # the batch of two text prompts, left-padded to the longer one (14 tokens) + 6 new tokens, 2 rows
    assert re.search(r"✓ generate\[0\]\s+40 token ids equal, scores within tolerance", out), out
    assert re.search(r"✓ pipeline\[0\]\s+text-generation: labels equal", out), out
    assert "observed: 2 generate() call(s), 1 pipeline() call(s)" in out
    assert out.count("completion '") == 4 and out.count("pipeline 'Once upon a time") == 2  # both runs
    assert "result: OK" in out
