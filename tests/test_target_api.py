"""The target-API data (migrator/selfcheck/target_api.json.gz) and its query API."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from migrator.selfcheck.targetapi import TARGET_ROOTS, Signature, api

ROOT = Path(__file__).resolve().parent.parent
DISTS = {"sentence_transformers": "sentence-transformers"}
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}

AUTO_FP = "transformers.AutoModelForCausalLM.from_pretrained"
NEURON_KEYWORDS = ("export", "batch_size", "sequence_length", "num_cores", "auto_cast_type", "compiler_args", "use_flash_attention_2")
LEGIT_MODEL_KEYWORDS = (
    "num_labels", "torch_dtype", "dtype", "device_map", "attn_implementation", "trust_remote_code",
    "use_cache", "revision", "token", "low_cpu_mem_usage", "distributed_config",
)


def _installed_versions():
    out = {}
    for root in TARGET_ROOTS:
        try:
            out[root] = importlib.metadata.version(DISTS.get(root, root))
        except importlib.metadata.PackageNotFoundError:
            out[root] = None
    return out


def test_data_is_fresh():
    installed = _installed_versions()
    if installed != api().versions:
        pytest.skip(f"installed target versions {installed} differ from the data's {api().versions}")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_target_api.py"), "--check"],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_provenance():
    a = api()
    assert set(a.versions) == set(TARGET_ROOTS)
    assert "gen_target_api" in a.generated_by


def test_modules():
    a = api()
    assert a.is_target("torch.distributed") and not a.is_target("numpy")
    assert a.module_exists("torch.distributed") is True
    assert a.module_exists("transformers.models.llama.modeling_llama") is True
    assert a.module_exists("transformers.foo_bar") is False
    assert a.module_exists("numpy") is None


@pytest.mark.parametrize(
    "module,name",
    [("transformers", "AdamW"), ("transformers", "is_torch_tpu_available"), ("transformers", "SampleDecoderOnlyOutput"),
     ("transformers.generation", "SampleDecoderOnlyOutput"), ("transformers.foo_bar", "x")],
)
def test_removed_names(module, name):
    assert api().name_exists(module, name) is False


@pytest.mark.parametrize(
    "module,name",
    [("transformers", "AutoModelForCausalLM"), ("transformers", "pipeline"), ("trl", "SFTTrainer"), ("trl", "SFTConfig"),
     ("transformers.generation", "GenerateDecoderOnlyOutput"), ("torch", "nn"), ("torch", "float32"),
     ("torch.distributed", "init_process_group"), ("transformers.models.llama.modeling_llama", "LlamaDecoderLayer"),
     ("diffusers", "StableDiffusionXLPipeline"), ("peft", "LoraConfig"), ("accelerate", "Accelerator"),
     ("sentence_transformers", "SentenceTransformer"), ("transformers", "models")],
)
def test_present_names(module, name):
    assert api().name_exists(module, name) is True


def test_unknown_is_never_false():
    a = api()
    assert a.name_exists("numpy", "array") is None
    assert a.name_exists("torch", "_private_thing") is None


@pytest.mark.parametrize("kw", NEURON_KEYWORDS)
@pytest.mark.parametrize("qual", [AUTO_FP, "transformers.LlamaForCausalLM.from_pretrained",
                                  "transformers.models.llama.modeling_llama.LlamaForCausalLM.from_pretrained"])
def test_neuron_keywords_rejected(qual, kw):
    assert api().accepts(qual, kw) is False


@pytest.mark.parametrize("kw", LEGIT_MODEL_KEYWORDS)
@pytest.mark.parametrize("qual", [AUTO_FP, "transformers.AutoModel.from_pretrained",
                                  "transformers.AutoModelForSequenceClassification.from_pretrained",
                                  "transformers.LlamaForCausalLM.from_pretrained",
                                  "transformers.models.llama.modeling_llama.LlamaForCausalLM.from_pretrained"])
def test_legit_model_keywords_accepted(qual, kw):
    assert api().accepts(qual, kw) is True


@pytest.mark.parametrize(
    "qual,kw,expected",
    [
        ("sentence_transformers.SentenceTransformer", "subfolder", False),
        ("sentence_transformers.SentenceTransformer", "device", True),
        ("transformers.TrainingArguments", "evaluation_strategy", False),
        ("transformers.TrainingArguments", "eval_strategy", True),
        ("trl.SFTConfig", "max_seq_length", False),
        ("trl.SFTConfig", "max_length", True),
        ("transformers.AutoTokenizer.from_pretrained", "token", True),
        ("transformers.AutoTokenizer.from_pretrained", "padding_side", True),
        ("transformers.AutoConfig.from_pretrained", "rope_theta", True),
        ("transformers.pipeline", "model", True),
        ("torch.compile", "backend", True),
        ("torch.distributed.init_process_group", "backend", True),
        ("diffusers.StableDiffusionXLPipeline.from_pretrained", "torch_dtype", True),
        ("diffusers.StableDiffusionXLPipeline.from_pretrained", "unet", True),
        ("diffusers.StableDiffusionXLPipeline.from_pretrained", "export", False),
        ("diffusers.StableDiffusionXLPipeline.from_pretrained", "dtype", True),
        # the generic loader builds the class model_index.json names: any component is a keyword
        ("diffusers.DiffusionPipeline.from_pretrained", "vae", True),
        ("diffusers.DiffusionPipeline.from_pretrained", "text_encoder_2", True),
        ("peft.LoraConfig", "r", True),
        ("peft.get_peft_model", "adapter_name", True),
        ("accelerate.Accelerator", "mixed_precision", True),
        ("trl.SFTTrainer", "processing_class", True),
        ("transformers.Trainer", "processing_class", True),
        ("torch.utils.data.DataLoader", "batch_size", True),
        ("torch.optim.AdamW", "lr", True),
        ("torch.amp.autocast", "device_type", True),
    ],
)
def test_keywords(qual, kw, expected):
    assert api().accepts(qual, kw) is expected


def test_signatures_known():
    a = api()
    for q in ("transformers.DistributedConfig", "transformers.TrainingArguments", "trl.SFTConfig", "trl.SFTTrainer",
              "transformers.Trainer", "transformers.pipeline", "torch.compile", "peft.LoraConfig", "accelerate.Accelerator",
              "diffusers.StableDiffusionXLPipeline.from_pretrained", "sentence_transformers.SentenceTransformer"):
        assert isinstance(a.signature(q), Signature), q
    assert a.signature("transformers.NoSuchThing.from_pretrained") is None
    assert a.accepts("numpy.array", "dtype") is None
    same = a.signature(AUTO_FP)
    assert a.signature("transformers.LlamaForCausalLM.from_pretrained") == a.signature(
        "transformers.models.llama.modeling_llama.LlamaForCausalLM.from_pretrained"
    )
    assert not same.open


def test_no_heavy_imports():
    code = (
        "import sys; import migrator.selfcheck.targetapi as t; t.api().accepts('transformers.pipeline', 'x'); "
        "heavy = [m for m in ('torch', 'transformers', 'diffusers', 'trl', 'peft', 'accelerate', "
        "'sentence_transformers', 'numpy') if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_tp_plans_agree_with_the_installed_transformers():
    """The architectures the data says Transformers can shard for tensor parallelism are those whose
    installed config class carries a base_model_tp_plan (DistributedConfig(tp_size>1) needs one)."""
    installed = _installed_versions()
    if installed["transformers"] != api().versions["transformers"]:
        pytest.skip("installed transformers differs from the data's")
    from transformers import GPT2Config, LlamaConfig, OPTConfig

    for model_type, config in (("llama", LlamaConfig), ("gpt2", GPT2Config), ("opt", OPTConfig)):
        assert api().has_tp_plan(model_type) is bool(config.base_model_tp_plan), model_type
    assert api().has_tp_plan("llama") is True and api().has_tp_plan("gpt2") is False
