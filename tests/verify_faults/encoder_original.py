"""Fault catalogue, scenario "encoder": an ORIGINAL optimum-neuron text classification (``MODEL_DIR``):
a compiled NeuronModelForSequenceClassification behind optimum-neuron's pipeline()."""

import sys

from optimum.neuron import pipeline

classifier = pipeline(
    "text-classification",
    model=sys.argv[1],
    export=True,
    batch_size=1,
    sequence_length=128,
)
texts = ["the movie was wonderful", "a dull and tiresome evening", "it rained"]
for result in classifier(texts):
    print(result["label"], round(result["score"], 4))
