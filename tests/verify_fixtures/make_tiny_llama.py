"""Build the tiny Llama used by the verify tests: ``python make_tiny_llama.py OUT_DIR``.

hidden 64, 2 layers, 4 heads, 2 kv heads, vocab 512, random weights (seed 0), saved with
``save_pretrained`` (about 0.5 MB in fp32). No tokenizer: the scripts feed token ids directly.
"""

import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def build(out_dir: str) -> str:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out_dir)
    return out_dir


if __name__ == "__main__":
    build(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama")
