"""``optimum.neuron`` training, emulated on CPU: ``NeuronTrainingArguments``/``NeuronTrainer`` over
transformers' ``TrainingArguments``/``Trainer``, ``NeuronSFTConfig``/``NeuronSFTTrainer`` over TRL's,
``NeuronORPO*`` over TRL's experimental ORPO, and the small helpers scripts import.

What the old stack computed and the emulation keeps:

* ``bf16=True`` with the default ``half_precision_backend="xla"`` (optimum-neuron <= 0.3; 0.4 without
  ``use_autocast``), or ``XLA_USE_BF16``/``XLA_DOWNCAST_BF16`` in the environment: the whole model ran
  in bf16 on the XLA device (no autocast, no fp32 master weights): the trainer casts the model to
  bfloat16 and trains it without autocast. ``half_precision_backend="amp"`` / ``use_autocast=True``:
  torch autocast in bf16 over fp32 weights (transformers' ``bf16=True``).
* ``fp16=True`` raised (optimum-neuron <= 0.3: "The fp16 data type is not supported in Neuron").
* transformers 4.x fields removed in 5.x keep their meaning: ``evaluation_strategy`` -> ``eval_strategy``,
  ``warmup_ratio`` -> ``warmup_steps`` as a ratio, ``per_gpu_*`` -> ``per_device_*``, ``no_cuda`` ->
  ``use_cpu``; ``overwrite_output_dir``, ``logging_dir`` and the other removed fields are accepted.
* Neuron-only fields that do not change what is computed (``zero_1``, ``use_xser``, ``async_save``,
  compile-cache and metrics fields...) are accepted.
* ``tensor_parallel_size`` N > 1: on hardware the trainer sharded the model over N NeuronCores, one
  tensor-parallel group that sees one batch (``torchrun --nproc_per_node N``: data-parallel size 1).
  One process emulates that group with the unsharded model: the same batches and the same values up to
  the rounding of the all-reduced partial sums (``verify --against ... --original-nproc 1``). On more
  than one process, and ``pipeline_parallel_size`` above 1: NotEmulated; ``args.trn_config`` reads N,
  which the NxD training models (``optimum.neuron.models.training``) refuse (NotEmulated).
* NeuronSFT: ``max_seq_length`` -> ``max_length``, batches padded to exactly ``max_length`` (the Neuron
  collator's static shape), ``padding_free`` off; TRL 0.x trainer arguments (``tokenizer``,
  ``dataset_text_field``, ``max_seq_length``, ``packing``, ``dataset_kwargs``, a batched
  ``formatting_func``) are mapped onto TRL 1.16.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Optional

from migrator.verify.oldstack.errors import NotEmulated, not_emulated

_built: dict = {}

#: Neuron-only fields: name -> (type, default). None of them changes what one process computes.
NEURON_FIELDS = {
    "tensor_parallel_size": (int, 1), "pipeline_parallel_size": (int, 1),
    "pipeline_parallel_num_microbatches": (int, -1), "zero_1": (bool, False),
    "disable_sequence_parallel": (bool, False), "sequence_parallel_enabled": (bool, False),
    "disable_embedding_parallelization": (bool, False), "kv_size_multiplier": (Optional[int], None),
    "fuse_qkv": (bool, False), "recompute_causal_mask": (bool, True), "num_local_ranks_per_step": (int, 8),
    "use_xser": (bool, True), "async_save": (bool, False), "skip_cache_push": (bool, False),
    "neuron_cc_optlevel": (Optional[str], None), "use_autocast": (bool, False),
    "stochastic_rounding_enabled": (bool, True), "optimizer_use_master_weights": (bool, True),
    "optimizer_use_fp32_grad_acc": (bool, True), "optimizer_save_master_weights_in_ckpt": (bool, False),
    "dataloader_prefetch_size": (Optional[int], None), "enable_throughput_metrics": (bool, True),
    "enable_mfu_metrics": (bool, True), "enable_efficiency_metrics": (bool, True), "metrics_window_size": (int, 50),
}
#: transformers 4.x fields removed in 5.x (the old scripts pass them)
REMOVED_FIELDS = {
    "overwrite_output_dir": (bool, False), "evaluation_strategy": (Optional[str], None),
    "per_gpu_train_batch_size": (Optional[int], None), "per_gpu_eval_batch_size": (Optional[int], None),
    "warmup_ratio": (float, 0.0), "logging_dir": (Optional[str], None), "save_safetensors": (bool, True),
    "no_cuda": (bool, False), "use_mps_device": (bool, False), "half_precision_backend": (str, "xla"),
    "fp16_backend": (str, "auto"), "tpu_num_cores": (Optional[int], None), "group_by_length": (bool, False),
    "include_inputs_for_metrics": (bool, False), "include_tokens_per_second": (bool, False),
    "use_legacy_prediction_loop": (bool, False), "push_to_hub_model_id": (Optional[str], None),
    "push_to_hub_organization": (Optional[str], None), "push_to_hub_token": (Optional[str], None),
    "dispatch_batches": (Optional[bool], None), "split_batches": (Optional[bool], None), "adafactor": (bool, False),
    "ray_scope": (str, "last"), "torchdynamo": (Optional[str], None), "fp16_opt_level": (str, "O1"),
}


def _field_list(base) -> list:
    have = {f.name for f in dataclasses.fields(base)}
    out = []
    for name, (typ, default) in {**NEURON_FIELDS, **REMOVED_FIELDS}.items():
        if name not in have:
            out.append((name, typ, dataclasses.field(default=default)))
    return out


def _full_bf16(args) -> bool:
    """Whether the old stack ran the whole model in bf16 (XLA downcast) rather than under autocast."""
    env = any(os.environ.get(v, "0") == "1" for v in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16"))
    return env or (bool(getattr(args, "_neuron_bf16", False)) and not getattr(args, "_neuron_amp", False))


def _post_init(self, parent):
    """The mapping of the Neuron and removed fields, then the parent's __post_init__."""
    if self.fp16:
        raise ValueError("The fp16 data type is not supported in Neuron, please use bf16 instead.")
    if (getattr(self, "pipeline_parallel_size", 1) or 1) > 1:
        raise NotEmulated("optimum.neuron.NeuronTrainingArguments(pipeline_parallel_size>1)")
    tp, world = getattr(self, "tensor_parallel_size", 1) or 1, int(os.environ.get("WORLD_SIZE", "1"))
    if tp > 1 and world > 1:  # one process stands for one tensor-parallel group of the hardware
        raise NotEmulated(f"optimum.neuron.NeuronTrainingArguments(tensor_parallel_size={tp}) on {world} "
                          "processes (one unsharded process emulates one tensor-parallel group: run the "
                          "original with --original-nproc 1)")
    # a field the installed TrainingArguments still has (a real Transformers 4.x: --original-env) keeps
    # its own meaning there; only the ones added here are mapped
    native = {f.name for f in dataclasses.fields(parent)}
    if "evaluation_strategy" not in native and self.evaluation_strategy is not None:
        self.eval_strategy = self.evaluation_strategy
    if "warmup_ratio" not in native and self.warmup_ratio and not self.warmup_steps:
        self.warmup_steps = float(self.warmup_ratio)  # transformers 5: a float in [0, 1) is a ratio
    if "per_gpu_train_batch_size" not in native and self.per_gpu_train_batch_size:
        self.per_device_train_batch_size = self.per_gpu_train_batch_size
    if "per_gpu_eval_batch_size" not in native and self.per_gpu_eval_batch_size:
        self.per_device_eval_batch_size = self.per_gpu_eval_batch_size
    if "no_cuda" not in native and self.no_cuda:
        self.use_cpu = True
    if any(os.environ.get(v, "0") == "1" for v in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")):
        self.bf16 = True  # optimum-neuron forced bf16 under these variables
    self._neuron_amp = self.half_precision_backend == "amp" or bool(self.use_autocast)
    self._neuron_bf16 = bool(self.bf16)
    if self._neuron_bf16 and not self._neuron_amp:
        self.bf16 = False  # the model itself is bf16 (the trainer casts it): no autocast on top
    elif self.bf16:
        self.use_cpu = True  # autocast bf16 on the CPU the emulation runs on (transformers asks for use_cpu)
    parent.__post_init__(self)
    if self._neuron_bf16:
        self.bf16 = True  # what the script reads back; the trainers keep autocast off (_no_autocast)


@contextlib.contextmanager
def _no_autocast(args):
    """While a trainer is built (its accelerator reads the mixed precision), bf16 reads False when the
    old stack ran the whole model in bf16 instead of autocasting."""
    flip = args is not None and _full_bf16(args) and getattr(args, "bf16", False)
    if flip:
        args.bf16 = False
    try:
        yield
    finally:
        if flip:
            args.bf16 = True


def _build():
    if _built:
        return _built
    import transformers
    from transformers import Trainer, TrainingArguments

    fields = _field_list(TrainingArguments)

    def __post_init__(self):
        _post_init(self, TrainingArguments)

    NeuronTrainingArguments = dataclasses.make_dataclass(
        "NeuronTrainingArguments", fields, bases=(TrainingArguments,), namespace={"__post_init__": __post_init__})
    NeuronTrainingArguments.__module__ = "optimum.neuron.training_args"
    NeuronTrainingArguments.__doc__ = "optimum.neuron.NeuronTrainingArguments, emulated (see optimum_training.py)"
    NeuronTrainingArguments.trn_config = property(lambda self: _TrnConfig(self))
    NeuronTrainingArguments.mp_plugin = property(lambda self: _TrnConfig(self))

    class NeuronTrainer(Trainer):
        """optimum.neuron.NeuronTrainer, emulated: transformers' Trainer on CPU; a model the old stack
        ran entirely in bf16 is cast to bf16 first; ``tokenizer=`` is the processing class."""

        def __init__(self, model=None, args=None, *pos, tokenizer=None, **kwargs):
            if tokenizer is not None and kwargs.get("processing_class") is None:
                kwargs["processing_class"] = tokenizer
            if args is not None and _full_bf16(args) and model is not None:
                import torch

                model = model.to(torch.bfloat16)
            with _no_autocast(args):
                super().__init__(model, args, *pos, **kwargs)

    Seq2SeqNeuronTrainingArguments = dataclasses.make_dataclass(
        "Seq2SeqNeuronTrainingArguments", _field_list(transformers.Seq2SeqTrainingArguments),
        bases=(transformers.Seq2SeqTrainingArguments,),
        namespace={"__post_init__": lambda self: _post_init(self, transformers.Seq2SeqTrainingArguments)})

    class Seq2SeqNeuronTrainer(transformers.Seq2SeqTrainer):
        __init__ = NeuronTrainer.__init__

    class NeuronHfArgumentParser(transformers.HfArgumentParser):
        """optimum.neuron's parser: HfArgumentParser (its pad_to_max_length/max_seq_length checks only
        patched script arguments, which the emulated run keeps as given)."""

    _built.update(NeuronTrainingArguments=NeuronTrainingArguments, NeuronTrainer=NeuronTrainer,
                  TrainiumTrainingArguments=NeuronTrainingArguments, TrainiumTrainer=NeuronTrainer,
                  Seq2SeqNeuronTrainingArguments=Seq2SeqNeuronTrainingArguments,
                  Seq2SeqTrainiumTrainingArguments=Seq2SeqNeuronTrainingArguments,
                  Seq2SeqNeuronTrainer=Seq2SeqNeuronTrainer, Seq2SeqTrainiumTrainer=Seq2SeqNeuronTrainer,
                  NeuronHfArgumentParser=NeuronHfArgumentParser, TrainiumHfArgumentParser=NeuronHfArgumentParser)
    return _built


class _TrnConfig:
    """``args.trn_config`` / ``args.mp_plugin``: the arguments' tensor-parallel size (a process emulates
    one tensor-parallel group: the NxD training models refuse it above 1), pipeline size 1, one
    data-parallel replica per process."""

    def __init__(self, args):
        self.tensor_parallel_size = int(getattr(args, "tensor_parallel_size", 1) or 1)
        self.pipeline_parallel_size = 1
        self.sequence_parallel_enabled = False
        self.kv_size_multiplier = None
        self.gradient_checkpointing = bool(getattr(args, "gradient_checkpointing", False))
        world = int(os.environ.get("WORLD_SIZE", "1"))
        self.data_parallel_size = world


# ---------------------------------------------------------------------------------------------- SFT
def _batched_to_single(func):
    """TRL 0.x called formatting_func on a batch (dict of lists -> list of texts); TRL 1.x calls it on
    one example. A function that returns a list for a one-example batch is treated as batched."""
    state = {}

    def single(example):
        if "batched" not in state:
            try:
                probe = func({k: [v] for k, v in example.items()})
                state["batched"] = isinstance(probe, (list, tuple)) and len(probe) == 1
            except Exception:
                state["batched"] = False
        if state["batched"]:
            return func({k: [v] for k, v in example.items()})[0]
        return func(example)

    return single


def _build_sft():
    if "NeuronSFTConfig" in _built:
        return _built
    _build()
    from trl import SFTConfig, SFTTrainer

    base = _built["NeuronTrainingArguments"]
    have = {f.name for f in dataclasses.fields(base)} | {f.name for f in dataclasses.fields(SFTConfig)}
    extra = [("max_seq_length", Optional[int], dataclasses.field(default=None))]
    extra += [(n, t, f) for n, t, f in _field_list(SFTConfig) if n not in have]

    def __post_init__(self):
        if self.max_seq_length is not None:
            self.max_length = self.max_seq_length
        self.padding_free = False
        if self.max_length and not self.packing:
            self.pad_to_multiple_of = self.max_length  # the Neuron collator: every batch exactly max_length
        _post_init(self, SFTConfig)

    NeuronSFTConfig = dataclasses.make_dataclass("NeuronSFTConfig", extra, bases=(base, SFTConfig),
                                                 namespace={"__post_init__": __post_init__})
    NeuronSFTConfig.__module__ = "optimum.neuron.trainers"

    trl_kwargs = ("dataset_text_field", "max_seq_length", "packing", "dataset_num_proc", "dataset_kwargs",
                  "neftune_noise_alpha", "dataset_batch_size", "eval_packing", "model_init_kwargs")

    class NeuronSFTTrainer(SFTTrainer):
        """optimum.neuron.NeuronSFTTrainer, emulated over TRL 1.16's SFTTrainer (TRL 0.x arguments mapped)."""

        def __init__(self, model=None, args=None, *pos, tokenizer=None, formatting_func=None, **kwargs):
            moved = {k: kwargs.pop(k) for k in list(kwargs) if k in trl_kwargs}
            if tokenizer is not None and kwargs.get("processing_class") is None:
                kwargs["processing_class"] = tokenizer
            if args is None or not isinstance(args, SFTConfig):
                values = {} if args is None else {f.name: getattr(args, f.name) for f in dataclasses.fields(args)
                                                  if f.init and f.name in {g.name for g in dataclasses.fields(NeuronSFTConfig)}}
                values.setdefault("output_dir", "tmp_trainer")
                args = NeuronSFTConfig(**values, **({"max_seq_length": moved.pop("max_seq_length")}
                                                    if "max_seq_length" in moved else {}))
            for key, value in moved.items():
                if key == "max_seq_length":
                    args.max_length = value
                    if not args.packing:
                        args.pad_to_multiple_of = value
                elif key == "dataset_batch_size":
                    continue
                elif key == "dataset_kwargs" and value and value.get("skip_prepare_dataset"):
                    args.dataset_kwargs = dict(value)
                else:
                    setattr(args, key, value)
            if formatting_func is not None:
                formatting_func = _batched_to_single(formatting_func)
            if _full_bf16(args) and model is not None and not isinstance(model, str):
                import torch

                model = model.to(torch.bfloat16)
            elif _full_bf16(args) and isinstance(model, str):
                import torch

                init = dict(args.model_init_kwargs or {})
                init["dtype"] = torch.bfloat16
                args.model_init_kwargs = init
            with _no_autocast(args):
                super().__init__(model, args, *pos, formatting_func=formatting_func, **kwargs)

    _built.update(NeuronSFTConfig=NeuronSFTConfig, NeuronSFTTrainer=NeuronSFTTrainer)
    return _built


def _build_orpo():
    if "NeuronORPOConfig" in _built:
        return _built
    _build()
    try:
        from trl.experimental.orpo import ORPOConfig, ORPOTrainer
    except ImportError:  # pragma: no cover - an older TRL
        from trl import ORPOConfig, ORPOTrainer
    base = _built["NeuronTrainingArguments"]
    have = {f.name for f in dataclasses.fields(base)} | {f.name for f in dataclasses.fields(ORPOConfig)}
    NeuronORPOConfig = dataclasses.make_dataclass(
        "NeuronORPOConfig", [(n, t, f) for n, t, f in _field_list(ORPOConfig) if n not in have],
        bases=(base, ORPOConfig), namespace={"__post_init__": lambda self: _post_init(self, ORPOConfig)})

    class NeuronORPOTrainer(ORPOTrainer):
        def __init__(self, model=None, ref_model=None, args=None, *pos, tokenizer=None, **kwargs):
            if tokenizer is not None and kwargs.get("processing_class") is None:
                kwargs["processing_class"] = tokenizer
            if ref_model is not None:
                raise NotEmulated("optimum.neuron.NeuronORPOTrainer(ref_model=...)")
            super().__init__(model, args, *pos, **kwargs)

    _built.update(NeuronORPOConfig=NeuronORPOConfig, NeuronORPOTrainer=NeuronORPOTrainer)
    return _built


# ---------------------------------------------------------------------------------------------- training models
class TrainingNeuronConfig:
    """``optimum.neuron.models.training.TrainingNeuronConfig`` at tensor/pipeline parallel size 1."""

    def __init__(self, tensor_parallel_size=1, sequence_parallel_enabled=False, kv_size_multiplier=None,
                 pipeline_parallel_size=1, virtual_pipeline_parallel_size=1, pipeline_parallel_num_microbatches=1,
                 pipeline_parallel_use_zero1_optimizer=False, gradient_checkpointing=False, checkpoint_dir=None,
                 num_local_ranks_per_step=8, use_xser=True, async_save=False, fuse_qkv=False,
                 recompute_causal_mask=True, transpose_nki_inputs=True):
        if (tensor_parallel_size or 1) > 1 or (pipeline_parallel_size or 1) > 1:
            raise NotEmulated("optimum.neuron.models.training.TrainingNeuronConfig(tensor_parallel_size>1)")
        self.tensor_parallel_size = 1
        self.pipeline_parallel_size = 1
        self.sequence_parallel_enabled = False
        self.gradient_checkpointing = gradient_checkpointing
        self.data_parallel_size = int(os.environ.get("WORLD_SIZE", "1"))


def _training_kwargs(kwargs: dict) -> dict:
    """The NKI flash attention computed exact attention: sdpa on CPU."""
    if kwargs.get("attn_implementation") == "flash_attention_2":
        kwargs["attn_implementation"] = "sdpa"
    if "torch_dtype" in kwargs and "dtype" not in kwargs:
        kwargs["dtype"] = kwargs.pop("torch_dtype")
    return kwargs


class _TrainingModel:
    """``from_pretrained(model_id, trn_config, ...)`` / ``from_config(config, trn_config)`` of the NxD
    training models: the transformers model (trn_config at size 1 changes nothing)."""

    auto_class = "AutoModelForCausalLM"

    @classmethod
    def _auto(cls):
        import transformers

        return getattr(transformers, cls.auto_class)

    @classmethod
    def from_pretrained(cls, model_id, trn_config=None, *args, **kwargs):
        if trn_config is not None and getattr(trn_config, "tensor_parallel_size", 1) > 1:
            raise NotEmulated(f"optimum.neuron.models.training.{cls.__name__}.from_pretrained(tensor_parallel_size>1)")
        return cls._auto().from_pretrained(model_id, *args, **_training_kwargs(kwargs))

    @classmethod
    def from_config(cls, config, trn_config=None, **kwargs):
        return cls._auto().from_config(config, **_training_kwargs(kwargs))


def _training_class(name):
    return type(name, (_TrainingModel,), {"__doc__": f"optimum.neuron.models.training.{name}, emulated"})


# ---------------------------------------------------------------------------------------------- helpers
@contextlib.contextmanager
def lazy_load_for_parallelism(tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1):
    """A no-op at tensor/pipeline parallel size 1 (what it was on the old stack too)."""
    if (tensor_parallel_size or 1) > 1 or (pipeline_parallel_size or 1) > 1:
        raise NotEmulated("optimum.neuron.distributed.lazy_load_for_parallelism(tensor_parallel_size>1)")
    yield


def make_optimizer_constructor_lazy(optimizer_cls):
    return optimizer_cls


def is_main_worker(global_main: bool = True) -> bool:
    var = "RANK" if global_main else "LOCAL_RANK"
    return int(os.environ.get(var, "0")) == 0


def is_precompilation() -> bool:
    return os.environ.get("NEURON_EXTRACT_GRAPHS_ONLY", "0") == "1"


def patch_transformers_for_neuron_sdk() -> None:
    return None


def is_neuronx_available() -> bool:
    return True


def is_torch_xla_available() -> bool:
    return True


def is_neuronx_distributed_available() -> bool:
    return True


def is_trl_available() -> bool:
    return True


def is_accelerate_available() -> bool:
    return True


def get_peft_model(model, peft_config, *args, **kwargs):
    import peft

    return peft.get_peft_model(model, peft_config, *args, **kwargs)


__version__ = "0.0.28+neuron-migrate-emulated"
__sdk_version__ = "2.20.0"

_LAZY = {"NeuronTrainingArguments": _build, "NeuronTrainer": _build, "TrainiumTrainingArguments": _build,
         "TrainiumTrainer": _build, "Seq2SeqNeuronTrainingArguments": _build, "Seq2SeqNeuronTrainer": _build,
         "Seq2SeqTrainiumTrainingArguments": _build, "Seq2SeqTrainiumTrainer": _build,
         "NeuronHfArgumentParser": _build, "TrainiumHfArgumentParser": _build,
         "NeuronSFTConfig": _build_sft, "NeuronSFTTrainer": _build_sft,
         "NeuronORPOConfig": _build_orpo, "NeuronORPOTrainer": _build_orpo}

NeuronModelForCausalLM = _training_class("NeuronModelForCausalLM")
LlamaForCausalLM = _training_class("LlamaForCausalLM")
Qwen3ForCausalLM = _training_class("Qwen3ForCausalLM")
GraniteForCausalLM = _training_class("GraniteForCausalLM")


def synchronize_hub_cache(*args, **kwargs):
    return None


def get_hub_cached_entries(*args, **kwargs):
    return []


def get_hub_cached_models(*args, **kwargs):
    return []


NeuronAccelerator = not_emulated("optimum.neuron.NeuronAccelerator")
NeuronAcceleratorState = not_emulated("optimum.neuron.NeuronAcceleratorState")
NeuronPartialState = not_emulated("optimum.neuron.NeuronPartialState")
ModelParallelismPlugin = not_emulated("optimum.neuron.ModelParallelismPlugin")


def __getattr__(name):
    if name in _LAZY:
        return _LAZY[name]()[name]
    raise AttributeError(name)


TOP_LEVEL = (*_LAZY, "lazy_load_for_parallelism", "is_main_worker", "is_precompilation",
             "patch_transformers_for_neuron_sdk", "get_peft_model", "__version__", "NeuronAccelerator",
             "NeuronAcceleratorState", "NeuronPartialState", "ModelParallelismPlugin")

MODULES: dict[str, tuple[str, ...]] = {
    "optimum.neuron": TOP_LEVEL,
    "optimum.neuron.trainers": (*_LAZY,),
    "optimum.neuron.training_args": ("NeuronTrainingArguments", "Seq2SeqNeuronTrainingArguments",
                                     "TrainiumTrainingArguments"),
    "optimum.neuron.hf_argparser": ("NeuronHfArgumentParser", "TrainiumHfArgumentParser"),
    "optimum.neuron.distributed": ("lazy_load_for_parallelism", "make_optimizer_constructor_lazy"),
    "optimum.neuron.accelerate": ("NeuronAccelerator", "NeuronAcceleratorState", "NeuronPartialState",
                                  "ModelParallelismPlugin"),
    "optimum.neuron.utils": ("is_main_worker", "is_precompilation", "patch_transformers_for_neuron_sdk",
                             "is_neuronx_available", "is_torch_xla_available", "is_neuronx_distributed_available",
                             "is_trl_available", "is_accelerate_available", "get_peft_model", "NeuronSFTConfig",
                             "NeuronORPOConfig"),
    "optimum.neuron.utils.training_utils": ("patch_transformers_for_neuron_sdk", "is_main_worker"),
    "optimum.neuron.utils.trl_utils": ("NeuronSFTConfig", "NeuronORPOConfig"),
    "optimum.neuron.version": ("__version__", "__sdk_version__"),
    "optimum.neuron.models.training": ("NeuronModelForCausalLM", "LlamaForCausalLM", "Qwen3ForCausalLM",
                                       "GraniteForCausalLM", "TrainingNeuronConfig"),
    "optimum.neuron.models.training.config": ("TrainingNeuronConfig",),
    "optimum.neuron.cache": ("synchronize_hub_cache", "get_hub_cached_entries", "get_hub_cached_models"),
    "optimum.neuron.peft": ("get_peft_model",),
}
