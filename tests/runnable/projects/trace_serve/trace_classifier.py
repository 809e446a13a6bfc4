"""Step 1 of 2 (old stack): compile the review classifier for Inferentia and keep the artifact.

    python trace_classifier.py MODEL_DIR
"""

import sys

import torch
import torch_neuronx
from transformers import AutoModelForSequenceClassification, AutoTokenizer

MAX_LEN = 16
ARTIFACT = "classifier_neuron.pt"

model_dir = sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForSequenceClassification.from_pretrained(model_dir, torchscript=True)
model.eval()

enc = tokenizer("the room was clean and quiet", padding="max_length", max_length=MAX_LEN, truncation=True,
                return_tensors="pt")
example = (enc["input_ids"], enc["attention_mask"])

neuron_model = torch_neuronx.trace(model, example)
torch.jit.save(neuron_model, ARTIFACT)
print("saved", ARTIFACT)
