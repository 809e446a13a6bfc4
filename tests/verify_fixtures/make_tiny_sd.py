"""Build the tiny Stable Diffusion pipeline used by the verify tests: ``python make_tiny_sd.py OUT_DIR``.

Random weights (seed 0) from tiny configs, saved with ``save_pretrained`` (about 1 MB): nothing is
downloaded. The UNet has cross-attention transformer blocks (``BasicTransformerBlock``, the UNet's
``_repeated_blocks``) in both of its down blocks, so regional compilation
(``compile_repeated_blocks``) meets the block at two resolutions in one UNet forward: with a VAE
scale factor of 2, a 64x64 image has 32x32 latents, i.e. 1024 tokens in the first down block and
256 after the downsample. The tokenizer is a CLIP byte-level BPE written here: the 512 byte symbols
(with and without the end-of-word mark), the two special tokens and no merges.
"""

import sys

import torch


def _bytes_to_unicode() -> list[str]:
    """The 256 printable characters CLIP's byte-level BPE maps the bytes to."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def build_tokenizer():
    """A CLIPTokenizer over the 512 byte symbols and the two special tokens (no merges: one id per byte)."""
    from transformers import CLIPTokenizer

    symbols = _bytes_to_unicode()
    vocab = {s: i for i, s in enumerate(symbols + [s + "</w>" for s in symbols])}
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=16), len(vocab)


def build(out_dir: str) -> str:
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    tokenizer, vocab_size = build_tokenizer()
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=32, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(16, 32),
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16, attention_head_dim=8, norm_num_groups=8,
    )
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, block_out_channels=(16, 16), layers_per_block=1, latent_channels=4,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"), norm_num_groups=8, sample_size=64,
    )
    text_encoder = CLIPTextModel(CLIPTextConfig(
        vocab_size=vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=16, projection_dim=16,
        bos_token_id=vocab_size - 2, eos_token_id=vocab_size - 1, pad_token_id=vocab_size - 1,
    ))
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                              clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                   scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)
    pipe.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


if __name__ == "__main__":
    print(build(sys.argv[1]))
