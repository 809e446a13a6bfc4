"""LoRA supervised fine-tuning with gradient checkpointing (optimum-neuron 0.4).

Usage: python train_lora.py MODEL_DIR OUT_DIR
"""

import sys

from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer

from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer


def main():
    model_dir, out_dir = sys.argv[1], sys.argv[2]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    texts = ["Adapters train a few small matrices.", "The base weights stay frozen.",
             "Rank eight is a common choice.", "Alpha scales the update."] * 2
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    config = NeuronSFTConfig(
        output_dir=out_dir,
        per_device_train_batch_size=2,
        max_steps=3,
        logging_steps=1,
        learning_rate=1e-3,
        gradient_checkpointing=True,
        max_seq_length=32,
        report_to=[],
        save_strategy="no",
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = NeuronSFTTrainer(
        model=model,
        args=config,
        train_dataset=Dataset.from_dict({"text": texts}),
        processing_class=tokenizer,
        peft_config=lora,
    )
    trainer.train()


if __name__ == "__main__":
    main()
