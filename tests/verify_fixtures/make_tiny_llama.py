"""Build the tiny Llama used by the verify tests: ``python make_tiny_llama.py OUT_DIR``.

hidden 64, 2 layers, 4 heads, 2 kv heads, vocab 512, random weights (seed 0), saved with
``save_pretrained`` (about 0.5 MB in fp32), and a byte-level BPE tokenizer of the same 512 ids
trained here with ``tokenizers`` on the small built-in corpus below (<pad>=0, <s>=1, </s>=2, a
<s> prepended to every encoded text), saved next to it (``tokenizer.json``,
``tokenizer_config.json``). Nothing is downloaded; running it twice gives byte-identical files
(tests/test_verify_tokenizer.py rebuilds it and compares with the committed copy).
"""

import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB = 512
SPECIALS = ["<pad>", "<s>", "</s>"]  # ids 0, 1, 2: the model config's pad/bos/eos ids

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Neuron devices run PyTorch models compiled ahead of time for fixed input shapes.",
    "Every new input shape costs a compilation, so pad prompts and batches to a fixed length.",
    "A static cache keeps the decode step at one shape: set max_cache_len when you generate.",
    "Training batches are padded to a multiple of 128 tokens on Trainium.",
    "Hello, world! How are you today? I am fine, thank you.",
    "Once upon a time there was a little model that learned to count: one, two, three, four, five.",
    "The migration tool rewrites optimum-neuron code to plain transformers, TRL and diffusers.",
    "Verify runs the migrated script and compares tokens, scores and losses with a golden file.",
    "Tensors, devices, compilers, graphs, recompiles, guards, shapes and strides.",
    "def main():\n    print('hello')\n    return 0\n",
    "Question: what is the capital of France? Answer: Paris.",
    "Summarize the following text in one sentence, please.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024.",
]


def build_tokenizer():
    """A byte-level BPE tokenizer with exactly VOCAB ids, trained on CORPUS (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", model_max_length=256)


def save_tokenizer(out_dir: str) -> None:
    """Save the tokenizer loadable by Transformers 4.x too (``verify --original-env``): its config names
    ``PreTrainedTokenizerFast`` (in 5.x an alias of ``TokenizersBackend``, the name 5.x writes, which
    4.x does not know) and the model inputs 5.x gives (4.x's fast tokenizer adds ``token_type_ids``, which
    a causal LM's generate() refuses)."""
    import json
    import os

    build_tokenizer().save_pretrained(out_dir)
    path = os.path.join(out_dir, "tokenizer_config.json")
    with open(path, encoding="utf-8") as fh:
        config = json.load(fh)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["model_input_names"] = ["input_ids", "attention_mask"]  # 4.x's default adds token_type_ids
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(config, indent=2, sort_keys=True) + "\n")


def build(out_dir: str) -> str:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out_dir)
    save_tokenizer(out_dir)
    return out_dir


if __name__ == "__main__":
    build(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama")
