"""Greedy generation with the tiny Llama, optionally tensor-parallel:
``tp_generate.py MODEL_DIR [--tp N]`` (run ``--tp 2`` under ``torchrun --nproc_per_node 2``).

What a migrated ``NeuronModelForCausalLM(..., tensor_parallel_size=2)`` script becomes:
``from_pretrained(..., distributed_config=DistributedConfig(tp_size=2))`` (no device_map: it is
exclusive with tensor parallelism), inputs on the neuron device. Every rank prints its tokens and
whether the weights are sharded.
"""

import argparse
import os
import sys

import torch
from transformers import AutoModelForCausalLM, DistributedConfig

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--tp", type=int, default=1)
args = parser.parse_args()

kwargs = {"distributed_config": DistributedConfig(tp_size=args.tp)} if args.tp > 1 else {}
model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, **kwargs).eval()
weight = model.model.layers[0].self_attn.q_proj.weight
local = getattr(weight, "to_local", lambda: weight)()
rank = os.environ.get("RANK", "0")
# how the weight is held differs between the layouts by design: a diagnostic on stderr, not a result
print(f"rank {rank} q_proj {type(weight).__name__} local {tuple(local.shape)}", file=sys.stderr, flush=True)
for prompt in ([1, 17, 33, 250, 7], [1, 400, 9, 12, 99, 101, 45, 3]):
    input_ids = torch.tensor([prompt], device="neuron")
    out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=8,
                         do_sample=False, pad_token_id=0)
    print(f"rank {rank} generated", out[0, len(prompt):].tolist(), flush=True)
