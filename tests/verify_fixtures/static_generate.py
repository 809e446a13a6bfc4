"""Static-cache generation compiled with the neuron backend (dynamic=False), prompts of 2 lengths.

``static_generate.py MODEL_DIR [--chunk N] [--pad N]``: with ``--chunk`` the GenerationConfig also
sets ``prefill_chunk_size``, which recompiles per prompt length (target-apis §3); ``--pad`` left-pads
every prompt to a multiple of N (attention mask 0 on the padding), as the TorchNeuron launch
article's chunked-prefill example does with ``pad_to_multiple_of=PREFILL_CHUNK_SIZE``.
"""

import argparse

import torch
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers.generation.configuration_utils import CompileConfig

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--chunk", type=int, default=None)
parser.add_argument("--pad", type=int, default=None)
args = parser.parse_args()

model = AutoModelForCausalLM.from_pretrained(args.model).to("neuron").eval()
compile_config = CompileConfig(backend="neuron", dynamic=False, mode="default")
compile_config._compile_all_devices = True  # parameters live on cpu under emulation (target-apis §7)
extra = {"prefill_chunk_size": args.chunk} if args.chunk else {}
config = GenerationConfig(max_new_tokens=3, do_sample=False, cache_implementation="static", max_cache_len=64,
                          compile_config=compile_config, pad_token_id=0, eos_token_id=None, **extra)
for prompt in ([1, 17, 33, 250, 7], [1, 400, 9, 12, 99, 101, 45, 3, 8, 8, 8]):
    pad = -len(prompt) % args.pad if args.pad else 0
    ids = torch.tensor([[0] * pad + prompt], device="neuron")
    mask = torch.tensor([[0] * pad + [1] * len(prompt)], device="neuron")
    out = model.generate(ids, attention_mask=mask, generation_config=config)
    print("generated", out[0, ids.shape[1]:].tolist())
