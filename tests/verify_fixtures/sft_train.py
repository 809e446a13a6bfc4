"""Three SFTTrainer (TRL) steps on the tiny Llama and its tokenizer, compiled:
``sft_train.py MODEL_DIR OUT_DIR [--pad-to-multiple-of N|none]``.

Texts of different lengths; ``pad_to_multiple_of`` is left at TRL's "auto" (128 on a neuron device,
no padding elsewhere) unless given. Every collated batch's input_ids shape is printed.
"""

import argparse

import torch
from datasets import Dataset
from trl import SFTConfig, SFTTrainer

parser = argparse.ArgumentParser()
parser.add_argument("model")
parser.add_argument("out")
parser.add_argument("--pad-to-multiple-of", default="auto")
args = parser.parse_args()
pad = args.pad_to_multiple_of
pad = int(pad) if pad.isdigit() else pad

torch.manual_seed(0)
texts = [
    "Hello, world!",
    "Training batches are padded to a multiple of 128 tokens on Trainium.",
    "The quick brown fox jumps over the lazy dog.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024, and then some more numbers.",
    "Once upon a time",
    "A static cache keeps the decode step at one shape.",
]
config = SFTConfig(
    output_dir=args.out, per_device_train_batch_size=2, max_steps=3, logging_steps=1, learning_rate=1e-3,
    report_to=[], save_strategy="no", seed=0, dataloader_num_workers=0, disable_tqdm=True,
    max_length=128, pad_to_multiple_of=pad, torch_compile=True,
)
trainer = SFTTrainer(model=args.model, args=config, train_dataset=Dataset.from_dict({"text": texts}))
collate = trainer.data_collator


def show_shapes(features):
    batch = collate(features)
    print("batch", tuple(batch["input_ids"].shape), flush=True)
    return batch


trainer.data_collator = show_shapes
print("device", config.device, "pad_to_multiple_of", config.pad_to_multiple_of,
      "compile backend", config.torch_compile_backend, flush=True)
trainer.train()
