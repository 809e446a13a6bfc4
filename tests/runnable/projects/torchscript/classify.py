"""Old stack: a Transformers classifier prepared for tracing in TorchScript mode, traced and run.

    python classify.py MODEL_DIR
"""

import sys

import torch
import torch_neuronx
from transformers import AutoModelForSequenceClassification, AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], torchscript=True)

enc = tokenizer(["fast check-in", "noisy street"], padding="max_length", max_length=12, truncation=True,
                return_tensors="pt")
ids, mask = enc["input_ids"], enc["attention_mask"]
neuron_model = torch_neuronx.trace(model, (ids, mask))

with torch.no_grad():
    scores = neuron_model(ids, mask)[0]
print("labels", scores.argmax(-1).tolist())
