"""Supervised fine-tuning of a causal LM sharded over two NeuronCores (optimum-neuron 0.4).

The run settings are gathered in a dict first (a team habit: the same dict drives several runs),
then unpacked into the config. Usage: torchrun --nproc_per_node 2 train_sft.py MODEL_DIR OUT_DIR
"""

import sys

from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer


def build_dataset():
    lines = [
        "Trainium chips have two NeuronCores each.",
        "A tensor-parallel layer splits its weight across ranks.",
        "Short line.",
        "Gradient accumulation trades memory for time.",
    ]
    return Dataset.from_dict({"text": lines * 2})


def main():
    model_dir, out_dir = sys.argv[1], sys.argv[2]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    settings = dict(
        output_dir=out_dir,
        tensor_parallel_size=2,
        per_device_train_batch_size=2,
        max_steps=2,
        logging_steps=1,
        learning_rate=1e-3,
        report_to=[],
        seed=0,
        disable_tqdm=True,
    )
    settings["dataloader_num_workers"] = 0
    print("steps", settings["max_steps"], "lr", settings["learning_rate"])
    config = NeuronSFTConfig(max_seq_length=32, **settings)
    trainer = NeuronSFTTrainer(model=model, args=config, train_dataset=build_dataset(), processing_class=tokenizer)
    trainer.train()


if __name__ == "__main__":
    main()
