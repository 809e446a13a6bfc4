"""THIS IS A TEST DOUBLE, NOT OPTIMUM-NEURON. IT RUNS ON CPU ON TOP OF TRANSFORMERS AND EXISTS ONLY
FOR THE NEURON-MIGRATE TESTS (tests/test_verify_journey.py PUTS IT ON PYTHONPATH; NOTHING ELSE DOES).

It stands in for the parts of ``optimum.neuron`` that a typical inference script uses, so the
verify journey can record an ORIGINAL optimum-neuron script on an "old stack" without Neuron
hardware:

* ``NeuronModelForCausalLM.from_pretrained(model_id, export=True, batch_size=..., sequence_length=...,
  num_cores=..., auto_cast_type=...)`` loads ``transformers.AutoModelForCausalLM`` on CPU with the dtype
  that ``auto_cast_type`` names ("fp32", "bf16", "fp16"); nothing is compiled or exported.
* ``generate(...)`` checks the static shapes the "compiled" model was built for (batch size, prompt +
  new tokens <= sequence_length), as optimum-neuron does, then delegates to the transformers model's
  ``generate``. The wrapper is not a ``GenerationMixin``, so ``neuron-migrate verify`` (which wraps
  ``GenerationMixin.generate``) records each call exactly once.
"""

from __future__ import annotations

__test_double__ = True

_DTYPES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16",
           "fp16": "float16", "float16": "float16"}


class NeuronModelForCausalLM:
    """TEST DOUBLE of optimum.neuron.NeuronModelForCausalLM (CPU, transformers underneath)."""

    def __init__(self, model, batch_size: int, sequence_length: int, num_cores: int | None):
        self.model = model
        self.config = model.config
        self.generation_config = model.generation_config
        self.batch_size = batch_size
        self.sequence_length = sequence_length
        self.num_cores = num_cores

    @classmethod
    def from_pretrained(cls, model_id, export: bool = False, batch_size: int = 1,
                        sequence_length: int | None = None, num_cores: int | None = None,
                        auto_cast_type: str | None = None, **kwargs):
        import torch
        from transformers import AutoModelForCausalLM

        dtype = getattr(torch, _DTYPES[auto_cast_type or "fp32"])
        model = AutoModelForCausalLM.from_pretrained(model_id, dtype=dtype, **kwargs).eval()
        if sequence_length is None:
            sequence_length = getattr(model.config, "max_position_embeddings", 2048)
        return cls(model, batch_size, sequence_length, num_cores)

    @property
    def device(self):
        return self.model.device

    def generate(self, input_ids=None, attention_mask=None, **kwargs):
        if input_ids is not None:
            batch, length = input_ids.shape
            if batch != self.batch_size:
                raise ValueError(f"the model was compiled for batch_size={self.batch_size}, got {batch}")
            new = kwargs.get("max_new_tokens", 0) or 0
            if length + new > self.sequence_length:
                raise ValueError(f"prompt ({length}) + max_new_tokens ({new}) exceeds the compiled "
                                 f"sequence_length={self.sequence_length}")
        return self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    def __call__(self, *args, **kwargs):
        return self.model(*args, **kwargs)


__all__ = ["NeuronModelForCausalLM"]
