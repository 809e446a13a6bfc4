"""Text generation and text classification on Inferentia2 / Trainium with optimum-neuron.

The models are compiled on the fly (``export=True``) for static input shapes, so the
first run takes a few minutes. Use ``launch.sh`` to pre-compile with ``optimum-cli``.
"""
import argparse

from transformers import AutoTokenizer

from optimum.neuron import NeuronModelForCausalLM, NeuronModelForSequenceClassification


def generate(model_id, prompt, max_new_tokens=128):
    tokenizer = AutoTokenizer.from_pretrained(model_id)
    # Compile for 2 NeuronCores, one sequence of at most 512 tokens, weights cast to bf16.
    model = NeuronModelForCausalLM.from_pretrained(
        model_id,
        export=True,
        batch_size=1,
        sequence_length=512,
        num_cores=2,
        auto_cast_type="bf16",
    )
    inputs = tokenizer(prompt, return_tensors="pt")
    outputs = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(outputs[0], skip_special_tokens=True)


def classify(model_id, text):
    tokenizer = AutoTokenizer.from_pretrained(model_id)
    model = NeuronModelForSequenceClassification.from_pretrained(
        model_id, export=True, batch_size=1, sequence_length=128
    )
    inputs = tokenizer(text, return_tensors="pt")
    logits = model(**inputs).logits
    return model.config.id2label[logits.argmax(dim=-1).item()]


def main():
    parser = argparse.ArgumentParser(description="Neuron inference demo")
    parser.add_argument("--model_id", default="Qwen/Qwen2.5-0.5B-Instruct")
    parser.add_argument("--classifier_id", default="distilbert-base-uncased-finetuned-sst-2-english")
    parser.add_argument("--prompt", default="What is AWS Trainium?")
    parser.add_argument("--max_new_tokens", type=int, default=128)
    args = parser.parse_args()

    print(generate(args.model_id, args.prompt, args.max_new_tokens))
    print(classify(args.classifier_id, "Compiling once and serving fast is great."))


if __name__ == "__main__":
    main()
