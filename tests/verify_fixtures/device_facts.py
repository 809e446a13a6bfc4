"""Prints what the libraries see of the neuron device, then loads with device_map="neuron" and generates."""

import sys

import torch
from transformers import AutoModelForCausalLM, TrainingArguments
from transformers.utils import is_torch_neuron_available

args = TrainingArguments(output_dir=sys.argv[2], report_to=[])
print(f"facts: neuron_available={is_torch_neuron_available()} torch_device={torch.device('neuron').type} "
      f"training_device={args.device} tensor_device={torch.zeros(1, device='neuron').device.type}")
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], device_map="neuron")
ids = torch.tensor([[1, 5, 9, 200]]).to("neuron")
print("generated", model.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0).tolist())
