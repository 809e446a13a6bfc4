"""Three Trainer steps, an evaluation and save_model for tests/test_verify_observe.py:
``observe_trainer.py MODEL_DIR [--lr X] [--logging-steps N] [--save DIR]``."""

import argparse

import torch
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--logging-steps", type=int, default=1)  # correct: another logging frequency
parser.add_argument("--save", default="out/final")
args = parser.parse_args()

torch.manual_seed(0)
model = AutoModelForCausalLM.from_pretrained(args.model)


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        ids = torch.tensor([1] + [(i * 37 + k * 11) % 500 + 3 for k in range(15)])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


targs = TrainingArguments(
    output_dir="out", per_device_train_batch_size=2, per_device_eval_batch_size=2, max_steps=3,
    logging_steps=args.logging_steps, learning_rate=args.lr, report_to=[], save_strategy="no", seed=0,
    dataloader_num_workers=0, disable_tqdm=True,
)
trainer = Trainer(model=model, args=targs, train_dataset=Data(), eval_dataset=Data())
trainer.train()
print("eval loss", round(trainer.evaluate()["eval_loss"], 4))
trainer.save_model(args.save)
