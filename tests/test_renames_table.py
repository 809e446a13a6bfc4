"""Checks for the data-driven symbol rename table ``codemods/common/renames.toml``.

1. Shape: every entry has rule/from/to/neuron_kwargs/note with the right types, the rule id is
   NM100/NM200/NM300, every source path is under ``optimum.neuron.`` and is claimed by one entry.
2. Targets: every ``to`` imports in the installed (pinned) target libraries.
3. Neuron-only kwargs: none of them is a named parameter of the target's ``__init__`` /
   ``from_pretrained`` (or of the target function), and none of the Neuron-only argument fields
   is a field of the target dataclass.
4. Coverage: a spot-check of important optimum.neuron names and where they must go.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # trl.experimental warns on import
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import dataclasses
import importlib
import inspect
import re
import tomllib
from collections import Counter
from pathlib import Path

import pytest

TABLE_PATH = Path(__file__).resolve().parent.parent / "codemods" / "common" / "renames.toml"
FIELDS = {"rule": str, "from": list, "to": str, "neuron_kwargs": list, "note": str}
RULE_RE = re.compile(r"NM[123]00")
DOTTED_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
TARGET_LIBRARIES = {"transformers", "trl", "diffusers", "peft", "accelerate", "sentence_transformers"}

# Neuron kwargs that may share a name with a parameter of the target's __init__/from_pretrained
# because the Neuron meaning differs (so the user still has to look at the call).  Keyed by the
# target; keep it small and justify every item.  Currently empty: no collision exists in the
# pinned versions, so a new collision fails the test until someone decides and documents it here.
ALLOWED_COLLISIONS: dict[str, dict[str, str]] = {
    # "target.Name": {"kwarg": "why the Neuron meaning differs"},
}


def _load_table():
    with TABLE_PATH.open("rb") as f:
        return tomllib.load(f)


TABLE = _load_table()
ENTRIES = TABLE.get("rename", [])


def _entry_id(entry):
    frm = entry.get("from") or ["?"]
    return str(frm[0]).removeprefix("optimum.neuron.")


def _resolve(target: str):
    """Import the module part of ``target`` and return the attribute (skips if lib missing)."""
    module_name, _, attr = target.rpartition(".")
    pytest.importorskip(module_name.split(".")[0])
    module = importlib.import_module(module_name)
    assert hasattr(module, attr), f"{module_name} has no attribute {attr!r}"
    return getattr(module, attr)


def _named_parameters(func) -> set[str]:
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return set()
    return {
        name
        for name, p in sig.parameters.items()
        if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    }


# --------------------------------------------------------------------------------------------
# 1. shape of the table
# --------------------------------------------------------------------------------------------


def test_table_has_entries():
    assert set(TABLE) == {"rename"}, f"unexpected top-level keys: {sorted(TABLE)}"
    assert len(ENTRIES) >= 60


@pytest.mark.parametrize("entry", ENTRIES, ids=_entry_id)
def test_entry_fields(entry):
    assert set(entry) == set(FIELDS), f"fields: {sorted(entry)}"
    for key, typ in FIELDS.items():
        assert isinstance(entry[key], typ), f"{key} should be {typ.__name__}"
    assert RULE_RE.fullmatch(entry["rule"]), entry["rule"]
    assert entry["from"], "from must not be empty"
    for path in entry["from"]:
        assert isinstance(path, str)
        assert path.startswith("optimum.neuron."), path
        assert DOTTED_RE.fullmatch(path), path
    assert len(set(entry["from"])) == len(entry["from"]), "duplicate path inside one entry"
    # one source symbol per entry: every path ends with the same name
    assert len({p.rpartition(".")[2] for p in entry["from"]}) == 1, entry["from"]
    assert DOTTED_RE.fullmatch(entry["to"]), entry["to"]
    assert entry["to"].split(".")[0] in TARGET_LIBRARIES, entry["to"]
    assert all(isinstance(k, str) and k.isidentifier() for k in entry["neuron_kwargs"])
    assert len(set(entry["neuron_kwargs"])) == len(entry["neuron_kwargs"]), "duplicate kwarg"
    note = entry["note"].strip()
    assert note and "\n" not in note and len(note) <= 300


def test_source_paths_unique_across_table():
    counts = Counter(p for e in ENTRIES for p in e["from"])
    dupes = sorted(p for p, n in counts.items() if n > 1)
    assert not dupes, f"source paths claimed by more than one entry: {dupes}"


# --------------------------------------------------------------------------------------------
# 2. every target exists in the pinned versions
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ENTRIES, ids=_entry_id)
def test_target_importable(entry):
    obj = _resolve(entry["to"])
    assert callable(obj), f"{entry['to']} is not a class or callable"


# --------------------------------------------------------------------------------------------
# 3. Neuron-only kwargs are really absent from the target
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ENTRIES, ids=_entry_id)
def test_neuron_kwargs_not_accepted_by_target(entry):
    obj = _resolve(entry["to"])
    if inspect.isclass(obj):
        params = _named_parameters(obj.__init__)
        if hasattr(obj, "from_pretrained"):
            params |= _named_parameters(obj.from_pretrained)
        if dataclasses.is_dataclass(obj):
            params |= {f.name for f in dataclasses.fields(obj)}
    else:
        params = _named_parameters(obj)
    allowed = ALLOWED_COLLISIONS.get(entry["to"], {})
    clashes = sorted(k for k in entry["neuron_kwargs"] if k in params and k not in allowed)
    assert not clashes, f"{entry['to']} accepts {clashes}: not Neuron-only, remove from neuron_kwargs"


ARGUMENT_TARGETS = {
    "transformers.TrainingArguments",
    "transformers.Seq2SeqTrainingArguments",
    "trl.SFTConfig",
    "trl.experimental.orpo.ORPOConfig",
    "transformers.distributed.DistributedConfig",
}

# Neuron-only fields of NeuronTrainingArguments (source-apis.md §2); each must be listed for the
# NeuronTrainingArguments entry and must not be a field of transformers.TrainingArguments.
NEURON_TRAINING_FIELDS = {
    "tensor_parallel_size", "pipeline_parallel_size", "pipeline_parallel_num_microbatches",
    "zero_1", "disable_sequence_parallel", "disable_embedding_parallelization",
    "kv_size_multiplier", "fuse_qkv", "recompute_causal_mask", "num_local_ranks_per_step",
    "use_xser", "async_save", "skip_cache_push", "neuron_cc_optlevel", "half_precision_backend",
    "use_autocast", "stochastic_rounding_enabled", "optimizer_use_master_weights",
    "optimizer_use_fp32_grad_acc", "optimizer_save_master_weights_in_ckpt",
    "dataloader_prefetch_size", "enable_throughput_metrics", "enable_mfu_metrics",
    "enable_efficiency_metrics", "metrics_window_size",
}  # fmt: skip


def _entry_for(path):
    matches = [e for e in ENTRIES if path in e["from"]]
    assert len(matches) == 1, f"{path}: {len(matches)} entries"
    return matches[0]


def test_argument_dataclass_fields():
    import transformers

    ta_fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    assert not NEURON_TRAINING_FIELDS & ta_fields
    assert "torch_compile" in ta_fields  # sanity: the comparison really sees TrainingArguments
    entry = _entry_for("optimum.neuron.NeuronTrainingArguments")
    missing = NEURON_TRAINING_FIELDS - set(entry["neuron_kwargs"])
    assert not missing, f"Neuron-only fields missing from NeuronTrainingArguments: {sorted(missing)}"
    for e in ENTRIES:
        if e["to"] in ARGUMENT_TARGETS:
            target = _resolve(e["to"])
            assert dataclasses.is_dataclass(target)
            fields = {f.name for f in dataclasses.fields(target)}
            assert not set(e["neuron_kwargs"]) & fields, (e["to"], set(e["neuron_kwargs"]) & fields)


# --------------------------------------------------------------------------------------------
# 4. coverage spot-check
# --------------------------------------------------------------------------------------------

EXPECTED = {
    "optimum.neuron.NeuronModelForCausalLM": "transformers.AutoModelForCausalLM",
    "optimum.neuron.models.training.NeuronModelForCausalLM": "transformers.AutoModelForCausalLM",
    "optimum.neuron.NeuronModelForSequenceClassification": "transformers.AutoModelForSequenceClassification",
    "optimum.neuron.modeling.NeuronModelForSequenceClassification": "transformers.AutoModelForSequenceClassification",
    "optimum.neuron.NeuronModelForXVector": "transformers.AutoModelForAudioXVector",
    "optimum.neuron.NeuronModelForEmbedding": "transformers.AutoModel",
    "optimum.neuron.NeuronModelForSeq2SeqLM": "transformers.AutoModelForSeq2SeqLM",
    "optimum.neuron.NeuronSentenceTransformers": "sentence_transformers.SentenceTransformer",
    "optimum.neuron.NeuronModelForSentenceTransformers": "sentence_transformers.SentenceTransformer",
    "optimum.neuron.NeuronBertModel": "transformers.BertModel",
    "optimum.neuron.models.inference.bert.NeuronBertModel": "transformers.BertModel",
    "optimum.neuron.models.bert.NeuronBertModel": "transformers.BertModel",
    "optimum.neuron.NeuronWhisperForConditionalGeneration": "transformers.WhisperForConditionalGeneration",
    "optimum.neuron.NeuronStableDiffusionPipeline": "diffusers.StableDiffusionPipeline",
    "optimum.neuron.modeling_diffusion.NeuronStableDiffusionPipeline": "diffusers.StableDiffusionPipeline",
    "optimum.neuron.NeuronStableDiffusionXLControlNetPipeline": "diffusers.StableDiffusionXLControlNetPipeline",
    "optimum.neuron.NeuronLatentConsistencyModelPipeline": "diffusers.LatentConsistencyModelPipeline",
    "optimum.neuron.NeuronPixArtAlphaPipeline": "diffusers.PixArtAlphaPipeline",
    "optimum.neuron.NeuronFluxKontextPipeline": "diffusers.FluxKontextPipeline",
    "optimum.neuron.pipeline": "transformers.pipeline",
    "optimum.neuron.pipelines.pipeline": "transformers.pipeline",
    "optimum.neuron.NeuronTrainer": "transformers.Trainer",
    "optimum.neuron.trainers.NeuronTrainer": "transformers.Trainer",
    "optimum.neuron.TrainiumTrainer": "transformers.Trainer",
    "optimum.neuron.Seq2SeqNeuronTrainer": "transformers.Seq2SeqTrainer",
    "optimum.neuron.NeuronTrainingArguments": "transformers.TrainingArguments",
    "optimum.neuron.training_args.NeuronTrainingArguments": "transformers.TrainingArguments",
    "optimum.neuron.Seq2SeqNeuronTrainingArguments": "transformers.Seq2SeqTrainingArguments",
    "optimum.neuron.NeuronSFTTrainer": "trl.SFTTrainer",
    "optimum.neuron.NeuronSFTConfig": "trl.SFTConfig",
    "optimum.neuron.utils.NeuronSFTConfig": "trl.SFTConfig",
    "optimum.neuron.NeuronORPOTrainer": "trl.experimental.orpo.ORPOTrainer",
    "optimum.neuron.NeuronORPOConfig": "trl.experimental.orpo.ORPOConfig",
    "optimum.neuron.NeuronHfArgumentParser": "transformers.HfArgumentParser",
    "optimum.neuron.hf_argparser.NeuronHfArgumentParser": "transformers.HfArgumentParser",
    "optimum.neuron.NeuronAccelerator": "accelerate.Accelerator",
    "optimum.neuron.accelerate.NeuronAccelerator": "accelerate.Accelerator",
    "optimum.neuron.NeuronAcceleratorState": "accelerate.state.AcceleratorState",
    "optimum.neuron.NeuronPartialState": "accelerate.PartialState",
    "optimum.neuron.get_peft_model": "peft.get_peft_model",
    "optimum.neuron.peft.get_peft_model": "peft.get_peft_model",
    "optimum.neuron.utils.get_peft_model": "peft.get_peft_model",
    "optimum.neuron.peft.NeuronPeftModel": "peft.PeftModel",
    "optimum.neuron.peft.NeuronPeftModelForCausalLM": "peft.PeftModelForCausalLM",
    "optimum.neuron.models.training.TrainingNeuronConfig": "transformers.distributed.DistributedConfig",
    "optimum.neuron.models.training.config.TrainingNeuronConfig": "transformers.distributed.DistributedConfig",
    "optimum.neuron.models.training.LlamaForCausalLM": "transformers.LlamaForCausalLM",
    "optimum.neuron.models.training.Qwen3ForCausalLM": "transformers.Qwen3ForCausalLM",
    "optimum.neuron.models.training.GraniteForCausalLM": "transformers.GraniteForCausalLM",
    "optimum.neuron.is_neuronx_available": "transformers.utils.import_utils.is_torch_neuron_available",
    "optimum.neuron.utils.is_torch_neuronx_available": "transformers.utils.import_utils.is_torch_neuron_available",
}


@pytest.mark.parametrize("source,target", sorted(EXPECTED.items()))
def test_spot_check(source, target):
    assert _entry_for(source)["to"] == target


def test_inference_and_training_causal_lm_are_separate():
    inference = _entry_for("optimum.neuron.NeuronModelForCausalLM")
    training = _entry_for("optimum.neuron.models.training.NeuronModelForCausalLM")
    assert inference is not training
    assert not any(".models.training." in p for p in inference["from"])
    assert all(p.startswith("optimum.neuron.models.training.") for p in training["from"])
    assert inference["rule"] == "NM100" and training["rule"] == "NM300"
    assert "trn_config" in training["neuron_kwargs"]
    assert "export" in inference["neuron_kwargs"]


# Names that have no one-to-one home: they must stay out of the table (see its header).
ABSENT = [
    "lazy_load_for_parallelism", "is_main_worker", "is_precompilation",
    "patch_transformers_for_neuron_sdk", "ModelParallelismPlugin", "NeuronTracedModel",
    "is_neuron_available", "synchronize_hub_cache", "get_hub_cached_entries", "__version__",
]  # fmt: skip


@pytest.mark.parametrize("name", ABSENT)
def test_deliberately_absent(name):
    assert not [p for e in ENTRIES for p in e["from"] if p.rpartition(".")[2] == name]
    header = re.split(r"^\[\[rename\]\]", TABLE_PATH.read_text(), maxsplit=1, flags=re.M)[0]
    assert "Deliberately absent" in header
    assert name in header, f"{name} should be explained in the 'Deliberately absent' header"
