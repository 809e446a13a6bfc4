"""Classes used as types (codemods/common/type_names.py): the runtime facts the rename relies on, on CPU."""

from __future__ import annotations

import pytest

from codemods.common.renames import load_table
from codemods.common.type_names import DIFFUSION_PIPELINE, PRETRAINED, base_class


def _resolve(qualified: str):
    import importlib

    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_auto_factories_make_no_instances_of_themselves():
    """isinstance(m, AutoModelForCausalLM) is False for the model it loads; PreTrainedModel (and
    GenerationMixin) is True: the type-position rename must go to the base class."""
    import torch
    from transformers import AutoModel, AutoModelForCausalLM, BertConfig, GenerationMixin, LlamaConfig, PreTrainedModel

    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_config(LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2))
    assert not isinstance(lm, AutoModelForCausalLM)
    assert isinstance(lm, PreTrainedModel) and isinstance(lm, GenerationMixin)
    enc = AutoModel.from_config(BertConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                           num_attention_heads=2))
    assert not isinstance(enc, AutoModel)
    assert isinstance(enc, PreTrainedModel)
    assert _resolve(PRETRAINED) is PreTrainedModel


def test_diffusers_pipelines_derive_from_diffusion_pipeline():
    from diffusers import AutoPipelineForText2Image, DiffusionPipeline, StableDiffusionPipeline

    assert issubclass(StableDiffusionPipeline, DiffusionPipeline)
    assert not issubclass(StableDiffusionPipeline, AutoPipelineForText2Image)
    assert _resolve(DIFFUSION_PIPELINE) is DiffusionPipeline
    assert base_class("diffusers.AutoPipelineForText2Image") == DIFFUSION_PIPELINE


@pytest.mark.parametrize("target", sorted({r.target for r in load_table().values()
                                            if r.target.startswith(("transformers.Auto", "diffusers."))}))
def test_table_targets_are_types_or_factories_of_the_base(target):
    """A table target that base_class() leaves alone is a real class (its instances are its own); one it maps
    is a factory whose classes derive from the base it names."""
    import inspect

    cls = _resolve(target)
    base = base_class(target)
    if base is None:
        assert inspect.isclass(cls) and issubclass(cls, _resolve(DIFFUSION_PIPELINE if target.startswith("diffusers.")
                                                               else PRETRAINED))
    else:
        assert not hasattr(cls, "__mro__") or _resolve(base) not in cls.__mro__  # a factory, not a model class
        # every class the factory makes derives from the base
        import transformers

        names = getattr(getattr(cls, "_model_mapping", None), "_model_mapping", {})  # model_type -> class name
        found = [getattr(transformers, n) for n in list(names.values())[:30]
                 if isinstance(n, str) and hasattr(transformers, n)]
        assert found
        for model_cls in found:
            assert issubclass(model_cls, _resolve(base)), model_cls
