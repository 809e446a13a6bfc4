"""Score two sentences with a classifier placed on the Neuron device (native PyTorch on Trainium).

The model is moved to "neuron", but the tokenizer's tensors are fed as they come, on the CPU: on a
Trainium instance the forward fails with a device mismatch. Usage: python classify.py MODEL_DIR
"""

import sys

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

model_dir = sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForSequenceClassification.from_pretrained(model_dir).to("neuron").eval()
batch = tokenizer(["a fine day", "a gloomy day"], padding="max_length", truncation=True, max_length=8,
                  return_tensors="pt")
with torch.no_grad():
    logits = model(**batch).logits
print("labels", logits.argmax(dim=-1).tolist())
