"""Build the tiny text classifier used by tests/test_verify_example.py:
``python make_tiny_classifier.py OUT_DIR``.

A DistilBERT sequence classifier (dim 32, 2 layers, 2 heads, vocab 512, 128 positions, labels
NEGATIVE/POSITIVE like the SST-2 model the example project names), random weights (seed 0), saved
with ``save_pretrained`` (about 0.2 MB in fp32), next to the same locally trained byte-level BPE
tokenizer as the tiny Llama (``make_tiny_llama.build_tokenizer``). Nothing is downloaded; running it
twice gives byte-identical files (tests/test_verify_example.py rebuilds it and compares with the
committed copy). The weights are in the checkpoint, so a run and its reference load the same model.
"""

import os
import sys

import torch
from transformers import DistilBertConfig, DistilBertForSequenceClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_llama import VOCAB, save_tokenizer  # noqa: E402


def build(out_dir: str) -> str:
    torch.manual_seed(0)
    config = DistilBertConfig(
        vocab_size=VOCAB, dim=32, hidden_dim=64, n_layers=2, n_heads=2, max_position_embeddings=128,
        pad_token_id=0, id2label={0: "NEGATIVE", 1: "POSITIVE"}, label2id={"NEGATIVE": 0, "POSITIVE": 1},
    )
    model = DistilBertForSequenceClassification(config)
    model.save_pretrained(out_dir)
    save_tokenizer(out_dir)
    return out_dir


if __name__ == "__main__":
    build(sys.argv[1] if len(sys.argv) > 1 else "tiny-classifier")
