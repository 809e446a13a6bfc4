"""Where verify's device mode is active: ``mode_suspend.py MODEL_DIR``.

Prints the torch-function-mode stack depth outside generate(), inside it (from a logits
processor), after it, and after a generate() that raised; then uses the "neuron" device again.
"""

import sys

import torch
from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList

depth = torch._C._len_torch_function_stack


class Probe(LogitsProcessor):
    seen = []

    def __init__(self, fail=False):
        self.fail = fail

    def __call__(self, input_ids, scores):
        Probe.seen.append(depth())
        if self.fail:
            raise RuntimeError("probe failure")
        return scores


model = AutoModelForCausalLM.from_pretrained(sys.argv[1]).to("neuron").eval()
ids = torch.tensor([[1, 17, 33, 250, 7]], device="neuron")
print("outside", depth())
model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False, pad_token_id=0,
               logits_processor=LogitsProcessorList([Probe()]))
print("inside", sorted(set(Probe.seen)))
print("after", depth())
try:
    model.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=0,
                   logits_processor=LogitsProcessorList([Probe(fail=True)]))
except RuntimeError as exc:
    print("raised", exc)
print("after failure", depth())
print("neuron tensor on", torch.zeros(2, device="neuron").device.type)
