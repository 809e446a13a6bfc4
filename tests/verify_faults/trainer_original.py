"""Fault catalogue, scenario "trainer": an ORIGINAL optimum-neuron fine-tune (``MODEL_DIR``): four
NeuronTrainer steps on the tiny Llama with hand-built batches, the loss logged at every step."""

import sys

import torch
from transformers import AutoModelForCausalLM

from optimum.neuron import NeuronTrainer, NeuronTrainingArguments

torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        ids = torch.tensor([1] + [(i * 37 + k * 11) % 500 + 3 for k in range(15)])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


args = NeuronTrainingArguments(
    output_dir="out",
    per_device_train_batch_size=2,
    max_steps=4,
    logging_steps=1,
    learning_rate=1e-3,
    report_to=[],
    save_strategy="no",
    seed=0,
    dataloader_num_workers=0,
    disable_tqdm=True,
)
NeuronTrainer(model=model, args=args, train_dataset=Data()).train()
