"""Step 2 of 2 (old stack): load the artifact trace_classifier.py wrote and label reviews.

    python serve.py MODEL_DIR
"""

import sys

import torch
from transformers import AutoTokenizer

MAX_LEN = 16

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
classifier = torch.jit.load("classifier_neuron.pt")

reviews = ["great breakfast", "the lift was broken all week"]
for text in reviews:
    enc = tokenizer(text, padding="max_length", max_length=MAX_LEN, truncation=True,
                return_tensors="pt")
    with torch.no_grad():
        logits = classifier(enc["input_ids"], enc["attention_mask"])[0]
    print("label", text, int(logits.argmax(-1)))
