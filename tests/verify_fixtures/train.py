"""Three Trainer steps on the tiny Llama with hand-built batches: ``train.py MODEL_DIR OUT_DIR``."""

import sys

import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

model_dir, out_dir = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(model_dir)


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        ids = torch.tensor([1] + [(i * 37 + k * 11) % 500 + 3 for k in range(15)])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


args = TrainingArguments(
    output_dir=out_dir, per_device_train_batch_size=2, max_steps=3, logging_steps=1,
    learning_rate=1e-3, report_to=[], save_strategy="no", seed=0,
    dataloader_num_workers=0, disable_tqdm=True,
)
Trainer(model=model, args=args, train_dataset=Data()).train()
