"""Causal-LM fine-tuning on Trainium with optimum-neuron (tensor parallel + ZeRO-1).

Launch with torchrun, see launch.sh.
"""
from dataclasses import dataclass, field

from datasets import load_dataset
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    HfArgumentParser,
    set_seed,
)

from optimum.neuron import NeuronTrainer as Trainer
from optimum.neuron import NeuronTrainingArguments
from optimum.neuron.distributed import lazy_load_for_parallelism


@dataclass
class ScriptArguments:
    model_id: str = field(
        default="meta-llama/Llama-3.2-1B",
        metadata={"help": "Model id on the Hugging Face hub or local path."},
    )
    dataset_path: str = field(
        default="data/train.jsonl",
        metadata={"help": "Local json/jsonl file with a `text` column."},
    )
    max_seq_length: int = field(
        default=512,
        metadata={"help": "Samples are padded/truncated to this length (static shapes for the Neuron compiler)."},
    )


def main():
    parser = HfArgumentParser((ScriptArguments, NeuronTrainingArguments))
    script_args, training_args = parser.parse_args_into_dataclasses()
    set_seed(training_args.seed)

    tokenizer = AutoTokenizer.from_pretrained(script_args.model_id)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    dataset = load_dataset("json", data_files=script_args.dataset_path, split="train")

    def tokenize(batch):
        return tokenizer(
            batch["text"],
            padding="max_length",
            truncation=True,
            max_length=script_args.max_seq_length,
        )

    train_dataset = dataset.map(tokenize, batched=True, remove_columns=dataset.column_names)

    # Weights are materialized shard by shard once the model is parallelized by the trainer.
    with lazy_load_for_parallelism(tensor_parallel_size=training_args.tensor_parallel_size):
        model = AutoModelForCausalLM.from_pretrained(
            script_args.model_id,
            torch_dtype="auto",
            low_cpu_mem_usage=True,
            use_cache=False if training_args.gradient_checkpointing else True,
        )

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        tokenizer=tokenizer,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
    )
    trainer.train()
    trainer.save_model()


if __name__ == "__main__":
    main()
