"""Forward calls of a loaded classifier for tests/test_verify_observe.py:
``observe_forward.py MODEL_DIR [--bf16] [--compile] [--pad N]``."""

import argparse

import torch
from transformers import AutoModelForSequenceClassification

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--bf16", action="store_true")     # a dtype change
parser.add_argument("--compile", action="store_true")  # correct: torch.compile(backend="neuron")
parser.add_argument("--pad", type=int, default=8)      # padding length of the inputs
args = parser.parse_args()

model = AutoModelForSequenceClassification.from_pretrained(
    args.model, dtype=torch.bfloat16 if args.bf16 else torch.float32).eval()
run = torch.compile(model, backend="neuron") if args.compile else model
for ids in ([1, 17, 33, 250, 7], [1, 400, 9, 12, 99, 101]):
    ids = ids + [0] * (args.pad - len(ids))
    mask = [1 if t else 0 for t in ids]
    with torch.no_grad():
        out = run(input_ids=torch.tensor([ids]), attention_mask=torch.tensor([mask]))
    print("label", model.config.id2label[int(out.logits.argmax(-1))])
