"""Static-cache generation compiled with the neuron backend (dynamic=False), prompts of 2 lengths.

``static_generate.py MODEL_DIR [--chunk N]``: with ``--chunk`` the GenerationConfig also sets
``prefill_chunk_size``, which recompiles per prompt length (target-apis §3).
"""

import argparse

import torch
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers.generation.configuration_utils import CompileConfig

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--chunk", type=int, default=None)
args = parser.parse_args()

model = AutoModelForCausalLM.from_pretrained(args.model).to("neuron").eval()
compile_config = CompileConfig(backend="neuron", dynamic=False, mode="default")
compile_config._compile_all_devices = True  # parameters live on cpu under emulation (target-apis §7)
extra = {"prefill_chunk_size": args.chunk} if args.chunk else {}
config = GenerationConfig(max_new_tokens=3, do_sample=False, cache_implementation="static", max_cache_len=64,
                          compile_config=compile_config, pad_token_id=0, eos_token_id=None, **extra)
for prompt in ([1, 17, 33, 250, 7], [1, 400, 9, 12, 99, 101, 45, 3, 8, 8, 8]):
    ids = torch.tensor([prompt], device="neuron")
    out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
    print("generated", out[0, len(prompt):].tolist())
