"""An ORIGINAL optimum-neuron fine-tune in our own words (tests/test_verify_oldstack.py):
``neuron_trainer_old.py MODEL_DIR OUT_DIR``. Three NeuronTrainer steps on the tiny Llama, with the
transformers 4.x arguments such scripts pass; the losses are printed."""

import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from optimum.neuron import NeuronTrainer, NeuronTrainingArguments

model_dir, out_dir = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
tokenizer = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir)


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        ids = torch.tensor([1] + [(i * 37 + k * 11) % 500 + 3 for k in range(15)])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


args = NeuronTrainingArguments(
    output_dir=out_dir, overwrite_output_dir=True, per_device_train_batch_size=2, max_steps=3, logging_steps=1,
    learning_rate=1e-3, warmup_ratio=0.34, evaluation_strategy="no", logging_dir=out_dir + "/logs",
    report_to=[], save_strategy="no", seed=0, dataloader_num_workers=0, disable_tqdm=True, zero_1=True,
)
trainer = NeuronTrainer(model=model, args=args, train_dataset=Data(), tokenizer=tokenizer)
trainer.train()
print("losses", [round(h["loss"], 5) for h in trainer.state.log_history if "loss" in h])
print("lrs", [h["learning_rate"] for h in trainer.state.log_history if "learning_rate" in h])
