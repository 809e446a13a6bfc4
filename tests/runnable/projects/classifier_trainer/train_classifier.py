"""Fine-tune a sentence classifier with the Neuron trainer (optimum-neuron).

Usage: python train_classifier.py MODEL_DIR OUT_DIR
"""

import sys

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from optimum.neuron import NeuronTrainer, NeuronTrainingArguments

REVIEWS = [
    ("what a lovely film", 1),
    ("dull and far too long", 0),
    ("the cast was wonderful", 1),
    ("i left before the end", 0),
    ("great music and a clever plot", 1),
    ("not worth the ticket", 0),
    ("a joy from start to finish", 1),
    ("boring", 0),
]


class Reviews(torch.utils.data.Dataset):
    def __init__(self, tokenizer):
        texts = [text for text, _ in REVIEWS]
        self.encodings = tokenizer(texts, truncation=True, max_length=16, padding="max_length")
        self.labels = [label for _, label in REVIEWS]

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        item = {k: torch.tensor(v[i]) for k, v in self.encodings.items()}
        item["labels"] = torch.tensor(self.labels[i])
        return item


def main():
    model_dir, out_dir = sys.argv[1], sys.argv[2]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    args = NeuronTrainingArguments(
        output_dir=out_dir,
        per_device_train_batch_size=2,
        max_steps=4,
        logging_steps=1,
        learning_rate=5e-4,
        report_to=[],
        save_strategy="no",
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = NeuronTrainer(model=model, args=args, train_dataset=Reviews(tokenizer))
    trainer.train()


if __name__ == "__main__":
    main()
