"""Old stack: time a traced classifier on a fixed example batch given as a tuple.

    python bench.py MODEL_DIR
"""

import sys
import time

import torch
import torch_neuronx
from transformers import AutoModelForSequenceClassification, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], torchscript=True)
model.eval()

enc = tokenizer(["a short one", "a slightly longer example"], padding="max_length", max_length=12,
                truncation=True, return_tensors="pt")
inputs = (enc["input_ids"], enc["attention_mask"])
traced = torch_neuronx.trace(model, inputs)

start = time.time()
for _ in range(3):
    outputs = traced(*inputs)
print("labels", outputs[0].argmax(-1).tolist(), "seconds", round(time.time() - start, 3) >= 0)
