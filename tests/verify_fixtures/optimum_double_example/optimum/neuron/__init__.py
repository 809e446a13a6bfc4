"""THIS IS A TEST DOUBLE, NOT OPTIMUM-NEURON. IT RUNS ON CPU ON TOP OF TRANSFORMERS AND EXISTS ONLY
FOR THE NEURON-MIGRATE TESTS (tests/test_verify_example.py PUTS IT ON PYTHONPATH; NOTHING ELSE DOES).

The journey double (``verify_fixtures/optimum_double``: ``NeuronModelForCausalLM``) plus what the
example project's ``inference.py`` also imports: ``NeuronModelForSequenceClassification``, so the
ORIGINAL example script can be recorded on an "old stack" without Neuron hardware. The journey
double's code is executed here unchanged (it is not copied), then the classifier is added:

* ``NeuronModelForSequenceClassification.from_pretrained(model_id, export=True, batch_size=...,
  sequence_length=..., auto_cast_type=...)`` loads ``transformers.AutoModelForSequenceClassification``
  on CPU (fp32 unless ``auto_cast_type`` says otherwise); nothing is compiled or exported.
* Calling it checks the static shapes it was "compiled" for (batch size, length <= sequence_length),
  as optimum-neuron does, then returns the transformers model's output (``.logits``).
"""

from __future__ import annotations

from pathlib import Path as _Path

_JOURNEY_DOUBLE = _Path(__file__).resolve().parents[3] / "optimum_double" / "optimum" / "neuron" / "__init__.py"
exec(compile(_JOURNEY_DOUBLE.read_text(), str(_JOURNEY_DOUBLE), "exec"))  # NeuronModelForCausalLM, _DTYPES


class NeuronModelForSequenceClassification:
    """TEST DOUBLE of optimum.neuron.NeuronModelForSequenceClassification (CPU, transformers underneath)."""

    def __init__(self, model, batch_size: int, sequence_length: int):
        self.model = model
        self.config = model.config
        self.batch_size = batch_size
        self.sequence_length = sequence_length

    @classmethod
    def from_pretrained(cls, model_id, export: bool = False, batch_size: int = 1,
                        sequence_length: int | None = None, auto_cast_type: str | None = None, **kwargs):
        import torch
        from transformers import AutoModelForSequenceClassification

        dtype = getattr(torch, _DTYPES[auto_cast_type or "fp32"])
        model = AutoModelForSequenceClassification.from_pretrained(model_id, dtype=dtype, **kwargs).eval()
        if sequence_length is None:
            sequence_length = getattr(model.config, "max_position_embeddings", 512)
        return cls(model, batch_size, sequence_length)

    @property
    def device(self):
        return self.model.device

    def __call__(self, input_ids=None, attention_mask=None, **kwargs):
        if input_ids is not None:
            batch, length = input_ids.shape
            if batch != self.batch_size:
                raise ValueError(f"the model was compiled for batch_size={self.batch_size}, got {batch}")
            if length > self.sequence_length:
                raise ValueError(f"input ({length}) exceeds the compiled sequence_length={self.sequence_length}")
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)


__test_double__ = True
__all__ = ["NeuronModelForCausalLM", "NeuronModelForSequenceClassification"]
