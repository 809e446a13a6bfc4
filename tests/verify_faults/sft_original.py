"""Fault catalogue, scenario "sft": an ORIGINAL optimum-neuron SFT fine-tune (``MODEL_DIR``) with the
TRL 0.x arguments such scripts pass (``tokenizer=``, ``max_seq_length``, a batched ``formatting_func``):
three NeuronSFTTrainer steps on the tiny Llama, the losses printed at the end."""

import sys

import torch
from datasets import Dataset
from transformers import AutoTokenizer

from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer

model_dir = sys.argv[1]
torch.manual_seed(0)
tokenizer = AutoTokenizer.from_pretrained(model_dir)
rows = {"question": ["Hello?", "What pads a batch?", "Why static shapes?", "Count to five.", "Once?", "Cache?"],
        "answer": ["Hi.", "The collator does.", "Each new shape compiles again.", "1 2 3 4 5", "upon a time",
                   "It keeps the decode step at one shape."]}


def formatting(batch):
    return [f"Q: {q}\nA: {a}" for q, a in zip(batch["question"], batch["answer"])]


config = NeuronSFTConfig(
    output_dir="out",
    per_device_train_batch_size=2,
    max_steps=3,
    logging_steps=1,
    learning_rate=1e-3,
    report_to=[],
    save_strategy="no",
    seed=0,
    dataloader_num_workers=0,
    disable_tqdm=True,
    max_seq_length=32,
)
trainer = NeuronSFTTrainer(model=model_dir, args=config, train_dataset=Dataset.from_dict(rows),
                           tokenizer=tokenizer, formatting_func=formatting)
trainer.train()
print("losses", [round(h["loss"], 4) for h in trainer.state.log_history if "loss" in h])
