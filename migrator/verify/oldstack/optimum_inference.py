"""``optimum.neuron`` inference, emulated on CPU: the causal LM of the three API generations, the traced
task classes, the diffusion pipelines and ``pipeline()``.

Each model is the transformers / diffusers model on CPU, wrapped in a proxy that keeps what the
compiled Neuron artifact fixed: the static shapes (checked and padded as the old runtime did), the
precision of the export (``auto_cast_type`` / ``auto_cast``), the generation settings of the export.
The proxies are not ``GenerationMixin``/``DiffusionPipeline`` subclasses: the wrapped model's own
``generate``/``__call__`` runs once per call, so verify observes each call once.
"""

from __future__ import annotations

import json
import logging
import os

from migrator.verify.oldstack.errors import NotEmulated
from migrator.verify.oldstack.report import observed

logger = logging.getLogger("optimum.neuron")

#: the marker file a "compiled" directory saved by the emulation carries (beside the HF files)
EXPORT_FILE = "neuron_export.json"

DTYPES = {"fp32": "float32", "float32": "float32", "tf32": "float32", "bf16": "bfloat16", "bfloat16": "bfloat16",
          "fp16": "float16", "float16": "float16", "f32": "float32", "f16": "float16"}
#: transformers-neuronx's names for the export settings, as older scripts pass them to optimum-neuron's
#: causal LM (and as the migration reads them: n_positions -> max_cache_len, amp -> dtype, tp_degree ->
#: tp_size); context_length_estimate (the prompt lengths a context graph was compiled for) changes no
#: computed value
NEURONX_NAMES = {"n_positions": "sequence_length", "amp": "auto_cast_type", "tp_degree": "num_cores",
                 "context_length_estimate": None}
#: compiler / cache knobs: no effect on what is computed
KNOBS = {"compiler_workdir", "disable_neuron_cache", "inline_weights_to_neff", "optlevel", "instance_type",
         "disable_fast_relayout", "disable_fallback", "compiler_args", "file_name", "subfolder", "library_name",
         "compiler_type", "compiler_version", "load_weights", "continuous_batching", "on_device_sampling",
         "data_parallel_mode", "device_ids", "use_auth_token"}


def _torch():
    import torch

    return torch


def _dtype(name):
    torch = _torch()
    if name is None:
        return None
    if isinstance(name, torch.dtype):
        return name
    key = str(name).replace("torch.", "")
    if key not in DTYPES:
        raise ValueError(f"unsupported auto_cast_type / dtype {name!r}")
    return getattr(torch, DTYPES[key])


def dtype_kwargs(dtype) -> dict:
    """``dtype=`` for transformers >= 4.56, ``torch_dtype=`` for the older ones (``--original-python``)."""
    import transformers

    major, minor = (int(p) for p in transformers.__version__.split(".")[:2])
    return {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": dtype}


def _dtype_name(dtype) -> str:
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}[str(dtype).replace("torch.", "")]


def _json_in(folder, name: str):
    """The JSON document ``folder/name``, None when it is absent or unreadable."""
    try:
        with open(os.path.join(str(folder), name), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _read_export(model_id) -> dict | None:
    return _json_in(model_id, EXPORT_FILE)


def _read_decoder_export(model_id) -> tuple[dict, str] | None:
    """The export settings of a pre-exported decoder directory and where its weights are: the
    emulation's own ``neuron_export.json``; optimum-neuron's layouts: generations A/B keep the settings
    in ``config.json`` under ``"neuron"``, generation C in ``neuron_config.json`` (``tp_degree``,
    ``torch_dtype``). Weights: the directory's ``checkpoint/`` folder when it has one (the old layout:
    the NEFFs beside it are not used), else the directory itself. None: not an exported directory."""
    saved = _read_export(model_id)
    folder = str(model_id)
    if saved is not None:
        return saved, folder
    config = _json_in(folder, "config.json")
    neuron = config.get("neuron") if isinstance(config, dict) else None
    settings = dict(neuron) if isinstance(neuron, dict) and "batch_size" in neuron else None
    if settings is None:
        nc = _json_in(folder, "neuron_config.json")
        if not isinstance(nc, dict):
            return None
        dtype = str(nc.get("torch_dtype") or nc.get("auto_cast_type") or "bfloat16").replace("torch.", "")
        settings = {"batch_size": nc.get("batch_size", 1), "sequence_length": nc.get("sequence_length", 128),
                    "num_cores": nc.get("tp_degree") or nc.get("tensor_parallel_size"),
                    "auto_cast_type": dtype, "checkpoint_id": nc.get("checkpoint_id")}
    settings.setdefault("task", "text-generation")
    settings["batch_size"] = int(settings.get("batch_size") or 1)
    settings["sequence_length"] = int(settings.get("sequence_length") or 2048)
    settings["auto_cast_type"] = _dtype_name(_dtype(settings.get("auto_cast_type") or "fp32"))
    checkpoint = os.path.join(folder, "checkpoint")
    return settings, checkpoint if os.path.isfile(os.path.join(checkpoint, "config.json")) else folder


def _config_dtype(model_id, default):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_id)
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(dtype, str):
        dtype = getattr(_torch(), dtype, None)
    return dtype if dtype is not None else default


def _split_kwargs(kwargs: dict) -> dict:
    """Keyword arguments for transformers' from_pretrained: the compiler/cache knobs are dropped (they do
    not change what is computed), the others are passed on."""
    return {key: value for key, value in kwargs.items() if key not in KNOBS}


def _sharding(num_cores) -> dict:
    """The old runtime sharded the decoder over ``num_cores`` NeuronCores (Megatron-style: column-parallel
    q/k/v and up projections, row-parallel o/down with an all-reduce of the partial sums). When the
    original runs on that many torchrun ranks, the model is sharded the same way (transformers' TP
    plan over gloo): in bf16 the all-reduced partial sums round differently from the unsharded model.
    On one process the unsharded model computes the same values up to that rounding."""
    cores = int(num_cores or 1)
    if cores > 1 and int(os.environ.get("WORLD_SIZE", "1")) == cores:
        from migrator.verify.oldstack.transformers4 import installed_major

        if (installed_major("transformers") or 5) < 5:  # a real 4.x (--original-env): its own TP plan
            return {"tp_plan": "auto"}
        from transformers.distributed import DistributedConfig

        return {"distributed_config": DistributedConfig(tp_size=cores)}
    return {}


class _Proxy:
    """Attribute access falls through to the wrapped transformers/diffusers object. Its ``__call__`` /
    ``generate`` is what the user's code sees (inputs padded inside, outputs cut back): an observer
    should record these calls, not the wrapped model's (``__neuron_migrate_emulated__``)."""

    _inner_attr = "model"
    __neuron_migrate_emulated__ = True

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        return getattr(object.__getattribute__(self, self._inner_attr), item)


class _NeuronConfig(dict):
    """``model.neuron_config`` / ``get_neuron_config(...)``: a dict that also answers attributes."""

    def __getattr__(self, item):
        try:
            return self[item]
        except KeyError:
            raise AttributeError(item) from None

    def to_dict(self):
        return dict(self)


# ============================================================================ causal LM (generations A/B/C)
class NeuronModelForCausalLM(_Proxy):
    """The compiled decoder: the transformers causal LM in the export dtype, with the export's static
    batch size and sequence length and its generation config."""

    def __init__(self, model, export: dict):
        self.model = model
        self.export_settings = export
        self.batch_size = export["batch_size"]
        self.sequence_length = export["sequence_length"]
        self.max_length = export["sequence_length"]
        self.num_cores = export.get("num_cores")
        self.config = model.config
        self.config.neuron = dict(export)
        self.generation_config = model.generation_config
        self.neuron_config = _NeuronConfig(
            batch_size=export["batch_size"], sequence_length=export["sequence_length"],
            tp_degree=export.get("num_cores") or 1, tensor_parallel_size=export.get("num_cores") or 1,
            auto_cast_type=export["auto_cast_type"], torch_dtype=_dtype(export["auto_cast_type"]),
            checkpoint_id=export.get("checkpoint_id"), max_batch_size=export["batch_size"],
            continuous_batching=False)

    # ---- loading / exporting
    @classmethod
    def _export(cls, model_id, batch_size=None, sequence_length=None, num_cores=None, auto_cast_type=None,
                default_dtype=None, **kwargs):
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(model_id)
        if sequence_length is None:  # get_export_config: n_positions / max_position_embeddings / 2048
            sequence_length = (getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
                               or 2048)
        if auto_cast_type is None:
            dtype = default_dtype if default_dtype is not None else _config_dtype(model_id, _torch().float32)
        else:
            dtype = _dtype(auto_cast_type)
        passed = _split_kwargs(kwargs)
        passed.pop("torch_dtype", None)
        passed.pop("dtype", None)
        passed.update(_sharding(num_cores))
        model = AutoModelForCausalLM.from_pretrained(model_id, **dtype_kwargs(dtype), **passed).eval()
        export = {"task": "text-generation", "batch_size": int(batch_size or 1),
                  "sequence_length": int(sequence_length), "num_cores": num_cores,
                  "auto_cast_type": _dtype_name(dtype), "checkpoint_id": str(model_id)}
        return cls(model, export)

    @classmethod
    def from_pretrained(cls, model_id, *args, export: bool = False, batch_size=None, sequence_length=None,
                        num_cores=None, auto_cast_type=None, tensor_parallel_size=None, **kwargs):
        exported = _read_decoder_export(model_id)
        if exported is not None and not export:
            from transformers import AutoModelForCausalLM

            saved, weights = exported
            model = AutoModelForCausalLM.from_pretrained(
                weights, **dtype_kwargs(_dtype(saved["auto_cast_type"])), **_sharding(saved.get("num_cores"))).eval()
            return cls(model, saved)
        if args:
            raise NotEmulated("optimum.neuron.NeuronModelForCausalLM.from_pretrained(positional config)")
        given = {"sequence_length": sequence_length, "auto_cast_type": auto_cast_type, "num_cores": num_cores}
        for old_name, name in NEURONX_NAMES.items():
            value = kwargs.pop(old_name, None)
            if name is not None and value is not None and given[name] is None:
                given[name] = value
        sequence_length, auto_cast_type, num_cores = (given["sequence_length"], given["auto_cast_type"],
                                                      given["num_cores"])
        # export=True (generations A/B); a plain checkpoint without export is compiled with the defaults
        return cls._export(model_id, batch_size=batch_size, sequence_length=sequence_length,
                           num_cores=num_cores if num_cores is not None else tensor_parallel_size,
                           auto_cast_type=auto_cast_type, **kwargs)

    @classmethod
    def get_neuron_config(cls, model_name_or_path, config=None, token=None, revision=None, instance_type=None,
                          batch_size=None, sequence_length=None, tensor_parallel_size=None, auto_cast_type=None,
                          **kwargs):
        """Generations B/C: the export settings (sequence_length defaults to min(positions, 4096), the
        dtype to the checkpoint's, bf16 when it has none)."""
        from transformers import AutoConfig

        cfg = config or AutoConfig.from_pretrained(model_name_or_path)
        if sequence_length is None:
            positions = getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None) or 1024
            sequence_length = min(positions, 4096)
        dtype = _dtype(auto_cast_type) if auto_cast_type else _config_dtype(model_name_or_path, _torch().bfloat16)
        return _NeuronConfig(batch_size=int(batch_size or 1), sequence_length=int(sequence_length),
                             tp_degree=tensor_parallel_size or 1, tensor_parallel_size=tensor_parallel_size or 1,
                             torch_dtype=dtype, auto_cast_type=_dtype_name(dtype),
                             checkpoint_id=str(model_name_or_path))

    @classmethod
    def export(cls, model_id, neuron_config=None, config=None, token=None, revision=None, load_weights=True,
               **kwargs):
        if neuron_config is None:
            neuron_config = cls.get_neuron_config(model_id, **{k: kwargs.pop(k) for k in list(kwargs)
                                                               if k in ("batch_size", "sequence_length",
                                                                        "tensor_parallel_size", "auto_cast_type")})
        return cls._export(model_id, batch_size=neuron_config["batch_size"],
                           sequence_length=neuron_config["sequence_length"],
                           num_cores=neuron_config.get("tensor_parallel_size"),
                           auto_cast_type=neuron_config["auto_cast_type"], **kwargs)

    def save_pretrained(self, save_directory, **kwargs):
        os.makedirs(save_directory, exist_ok=True)
        self.model.save_pretrained(save_directory)
        with open(os.path.join(save_directory, EXPORT_FILE), "w", encoding="utf-8") as fh:
            json.dump(self.export_settings, fh, indent=2)

    def push_to_hub(self, *args, **kwargs):
        raise NotEmulated("optimum.neuron.NeuronModelForCausalLM.push_to_hub")

    # ---- running
    @property
    def device(self):
        return self.model.device

    def reset_generation(self):
        return None

    def generate(self, input_ids=None, attention_mask=None, generation_config=None, stopping_criteria=None,
                 **kwargs):
        """As optimum-neuron's decoder: greedy or sampling only; a batch larger than the compiled one or
        a prompt longer than sequence_length raises; a smaller batch is padded to the compiled one (the
        padding rows cannot change the real rows: they are not computed here); the generation length
        is capped at sequence_length (TokenSelector)."""
        import copy

        if input_ids is None:
            input_ids = kwargs.pop("inputs", None)
        if input_ids is None:
            raise ValueError("generate() needs input_ids")
        batch, length = input_ids.shape
        if length > self.max_length:
            raise ValueError(f"The input sequence length ({length}) exceeds the model static sequence length "
                             f"({self.max_length})")
        if batch > self.batch_size:
            raise ValueError(f"The specified batch_size ({batch}) exceeds the model static batch size "
                             f"({self.batch_size})")
        config = copy.deepcopy(generation_config if generation_config is not None else self.generation_config)
        unknown = config.update(**kwargs)
        if config.num_beams and config.num_beams > 1:
            raise ValueError("Unsupported generation mode: optimum-neuron generates by greedy search or sampling")
        max_length = config.max_length
        if config.max_new_tokens is not None:
            max_length = length + config.max_new_tokens
        if config.min_length and config.min_length > self.max_length:
            raise ValueError(f"The minimum generation length ({config.min_length}) exceeds the model maximum "
                             f"sequence length ({self.max_length})")
        if max_length > self.max_length:
            logger.warning("Adjusting the maximum generation length (%d) to the model maximum sequence length (%d)",
                           max_length, self.max_length)
            max_length = self.max_length
        config.max_new_tokens = None
        config.max_length = max_length
        if config.pad_token_id is None:
            eos = config.eos_token_id
            config.pad_token_id = eos[0] if isinstance(eos, list) else eos
        if attention_mask is None:
            attention_mask = input_ids.new_ones(input_ids.shape)
        return self.model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config,
                                   stopping_criteria=stopping_criteria, **unknown)

    def __call__(self, *args, **kwargs):
        out = self.model(*args, **kwargs)
        observed(self.model, out)
        return out

    forward = __call__


NeuronDecoderModel = NeuronModelForCausalLM


# ============================================================================ traced task classes
class NeuronTracedModel(_Proxy):
    """A traced encoder: the transformers model, its inputs padded to the compiled static shapes (an
    input larger than them raises), the outputs cut back to the caller's batch (and sequence, for
    per-token outputs); ``auto_cast`` "matmul" rounds the inputs of every matmul to ``auto_cast_type``
    (float32 accumulation, ``_static.MatmulCast``), "all" casts the model."""

    auto_model_class = "AutoModel"
    #: output fields cut on the batch dim only; the others are cut on batch and sequence
    batch_only_fields = ("logits", "pooler_output", "sentence_embedding")
    per_token = False
    SHAPE_KEYS = ("batch_size", "sequence_length", "num_choices")

    def __init__(self, model, export: dict, tokenizer_pad_id: int = 0):
        self.model = model
        self.export_settings = export
        self.config = model.config
        self.config.neuron = dict(export)
        self.input_static_shapes = {"batch_size": export["batch_size"], "sequence_length": export["sequence_length"]}
        self.neuron_config = _NeuronConfig(input_shapes=dict(self.input_static_shapes), **export)
        self._pad_id = tokenizer_pad_id

    @classmethod
    def from_pretrained(cls, model_id, *args, export: bool = False, batch_size=None, sequence_length=None,
                        auto_cast=None, auto_cast_type=None, dynamic_batch_size=False, num_choices=None,
                        output_attentions=False, output_hidden_states=False, tensor_parallel_size=1, **kwargs):
        import transformers

        saved = _read_export(model_id)
        auto = getattr(transformers, cls.auto_model_class)
        if saved is not None and not export:
            export_settings = saved
        else:
            if batch_size is None or sequence_length is None:
                if export:
                    raise ValueError("batch_size and sequence_length are required to export a traced model")
            export_settings = {"task": cls.auto_model_class, "batch_size": int(batch_size or 1),
                               "sequence_length": int(sequence_length or 128), "num_choices": num_choices,
                               "auto_cast": auto_cast, "auto_cast_type": auto_cast_type or ("bf16" if auto_cast else None),
                               "dynamic_batch_size": bool(dynamic_batch_size),
                               "torch_dtype": str(kwargs.get("torch_dtype") or kwargs.get("dtype") or "float32"),
                               "output_attentions": output_attentions, "output_hidden_states": output_hidden_states,
                               "checkpoint_id": str(model_id)}
        passed = _split_kwargs(kwargs)
        passed.pop("torch_dtype", None)
        passed.pop("dtype", None)
        dtype = _dtype(export_settings.get("torch_dtype") or "float32")
        if export_settings.get("auto_cast") == "all":
            dtype = _dtype(export_settings.get("auto_cast_type") or "bf16")
        model = auto.from_pretrained(model_id, **dtype_kwargs(dtype), **passed).eval()
        pad = getattr(model.config, "pad_token_id", None)
        return cls(model, export_settings, tokenizer_pad_id=pad if isinstance(pad, int) else 0)

    def save_pretrained(self, save_directory, **kwargs):
        os.makedirs(save_directory, exist_ok=True)
        self.model.save_pretrained(save_directory)
        with open(os.path.join(save_directory, EXPORT_FILE), "w", encoding="utf-8") as fh:
            json.dump(self.export_settings, fh, indent=2)

    @property
    def device(self):
        return self.model.device

    def _pad(self, name, tensor):
        torch = _torch()
        export = self.export_settings
        target = [export["batch_size"], export["sequence_length"]]
        if export.get("num_choices") and tensor.dim() == 3:
            target = [export["batch_size"], export["num_choices"], export["sequence_length"]]
        if tensor.dim() != len(target):
            raise ValueError(f"{name}: expected {len(target)} dimensions (compiled shape {target}), got "
                             f"{tuple(tensor.shape)}")
        if export.get("dynamic_batch_size") and tensor.shape[0] > target[0]:
            target[0] = -(-tensor.shape[0] // target[0]) * target[0]  # a multiple of the compiled batch
        padding = []
        for dim in reversed(range(tensor.dim())):
            extra = target[dim] - tensor.shape[dim]
            if extra < 0:
                raise ValueError(f"Size of {name} dimension {dim} ({tensor.shape[dim]}) exceeds the compiled "
                                 f"static shape ({target[dim]})")
            padding += [0, extra]
        value = self._pad_id if name == "input_ids" else 0
        return torch.nn.functional.pad(tensor, padding, mode="constant", value=value)

    def forward(self, *args, **kwargs):
        torch = _torch()
        names = ("input_ids", "attention_mask", "token_type_ids")
        for name, value in zip(names, args):
            kwargs[name] = value
        inputs = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
        if "input_ids" not in inputs:
            raise ValueError("the traced model takes input_ids")
        batch, length = inputs["input_ids"].shape[0], inputs["input_ids"].shape[-1]
        padded = {k: self._pad(k, v) for k, v in inputs.items()}
        if "attention_mask" not in padded:  # the traced graph took a mask: ones on the real tokens
            mask = torch.ones_like(inputs["input_ids"])
            padded["attention_mask"] = self._pad("attention_mask", mask)
        export = self.export_settings
        if export.get("output_attentions"):
            padded["output_attentions"] = True
        if export.get("output_hidden_states"):
            padded["output_hidden_states"] = True
        autocast = (export.get("auto_cast") == "matmul"
                    and _dtype(export.get("auto_cast_type") or "bf16") != torch.float32)
        with torch.no_grad():
            if autocast:
                from migrator.verify.oldstack import _static  # noqa: I001 - imports torch

                with _static.MatmulCast(_dtype(export.get("auto_cast_type") or "bf16")):
                    out = self.model(**padded)
            else:
                out = self.model(**padded)
        for key in list(out.keys()):
            value = out[key]
            if not isinstance(value, torch.Tensor):
                continue
            if self.per_token and key not in self.batch_only_fields:
                value = value[:batch, ..., :length, :] if value.dim() >= 3 else value[:batch, :length]
            else:
                value = value[:batch]
            out[key] = value
        observed(self.model, out)
        return out

    __call__ = forward


class NeuronModelForSequenceClassification(NeuronTracedModel):
    auto_model_class = "AutoModelForSequenceClassification"


class NeuronModelForTokenClassification(NeuronTracedModel):
    auto_model_class = "AutoModelForTokenClassification"
    per_token = True


class NeuronModelForQuestionAnswering(NeuronTracedModel):
    auto_model_class = "AutoModelForQuestionAnswering"
    per_token = True
    batch_only_fields = ()

    def forward(self, *args, **kwargs):
        torch = _torch()
        ids = kwargs.get("input_ids", args[0] if args else None)
        batch, length = ids.shape
        out = super().forward(*args, **kwargs)
        for key in ("start_logits", "end_logits"):
            if isinstance(out.get(key), torch.Tensor):
                out[key] = out[key][:batch, :length]
        return out

    __call__ = forward


class NeuronModelForMaskedLM(NeuronTracedModel):
    auto_model_class = "AutoModelForMaskedLM"
    per_token = True


class NeuronModelForFeatureExtraction(NeuronTracedModel):
    auto_model_class = "AutoModel"
    per_token = True


class NeuronModelForMultipleChoice(NeuronTracedModel):
    auto_model_class = "AutoModelForMultipleChoice"


# ============================================================================ diffusion
class NeuronDiffusionPipelineBase(_Proxy):
    """The diffusers pipeline on CPU with the export's static shapes (height, width, batch) as the call
    defaults (another size raises) and its precision: ``auto_cast="matmul"`` (the export's default,
    with ``auto_cast_type="bf16"``) rounds the inputs of every matmul/convolution to that dtype
    (float32 accumulation), as neuronx-cc did."""

    _inner_attr = "pipeline"
    diffusers_class = "DiffusionPipeline"

    def __init__(self, pipeline, export: dict):
        self.pipeline = pipeline
        self.export_settings = export

    @classmethod
    def from_pretrained(cls, model_id, *args, export: bool = False, batch_size=None, height=None, width=None,
                        num_images_per_prompt=None, auto_cast="matmul", auto_cast_type="bf16",
                        dynamic_batch_size=False, **kwargs):
        import diffusers

        for key in ("lora_model_ids", "lora_weight_names", "lora_adapter_names", "lora_scales", "ip_adapter_id",
                    "controlnet_ids", "unet_id"):
            if kwargs.get(key):
                raise NotEmulated(f"optimum.neuron.{cls.__name__}.from_pretrained({key}=...)")
        saved = _read_export(model_id)
        if saved is not None and not export:
            settings = saved
        else:
            settings = {"batch_size": int(batch_size or 1), "height": height, "width": width,
                        "num_images_per_prompt": int(num_images_per_prompt or 1), "auto_cast": auto_cast,
                        "auto_cast_type": auto_cast_type, "dynamic_batch_size": bool(dynamic_batch_size),
                        "torch_dtype": str(kwargs.get("torch_dtype") or kwargs.get("dtype") or "float32")}
        dtype = _dtype(settings.get("torch_dtype") or "float32")
        passed = {k: v for k, v in kwargs.items() if k not in KNOBS and k not in ("torch_dtype", "dtype")}
        pipe_cls = getattr(diffusers, cls.diffusers_class)
        pipeline = pipe_cls.from_pretrained(model_id, torch_dtype=dtype, **passed)
        return cls(pipeline, settings)

    def save_pretrained(self, save_directory, **kwargs):
        os.makedirs(save_directory, exist_ok=True)
        self.pipeline.save_pretrained(save_directory)
        with open(os.path.join(save_directory, EXPORT_FILE), "w", encoding="utf-8") as fh:
            json.dump(self.export_settings, fh, indent=2)

    def __call__(self, *args, **kwargs):
        torch = _torch()
        settings = self.export_settings
        for key in ("height", "width"):
            compiled = settings.get(key)
            if compiled is None:
                continue
            given = kwargs.get(key)
            if given is not None and given != compiled:
                raise ValueError(f"the pipeline was compiled for {key}={compiled}, got {key}={given}")
            kwargs[key] = compiled
        prompt = kwargs.get("prompt", args[0] if args else None)
        n_prompts = len(prompt) if isinstance(prompt, (list, tuple)) else 1
        per_prompt = kwargs.get("num_images_per_prompt") or 1
        compiled_images = settings["batch_size"] * settings.get("num_images_per_prompt", 1)
        if n_prompts * per_prompt > compiled_images and not settings.get("dynamic_batch_size"):
            raise ValueError(f"{n_prompts * per_prompt} images per call exceed the compiled batch "
                             f"({settings['batch_size']} x {settings.get('num_images_per_prompt', 1)})")
        cast = settings.get("auto_cast")
        cast_dtype = _dtype(settings.get("auto_cast_type") or "bf16")
        if cast in ("matmul", "all") and cast_dtype != torch.float32:
            from migrator.verify.oldstack import _static  # noqa: I001 - imports torch

            with _static.MatmulCast(cast_dtype):
                return self.pipeline(*args, **kwargs)
        return self.pipeline(*args, **kwargs)


def _pipeline_class(name: str, diffusers_name: str):
    return type(name, (NeuronDiffusionPipelineBase,), {"diffusers_class": diffusers_name,
                                                       "__doc__": f"{name}: diffusers.{diffusers_name}, emulated"})


NeuronStableDiffusionPipeline = _pipeline_class("NeuronStableDiffusionPipeline", "StableDiffusionPipeline")
NeuronStableDiffusionImg2ImgPipeline = _pipeline_class("NeuronStableDiffusionImg2ImgPipeline",
                                                       "StableDiffusionImg2ImgPipeline")
NeuronStableDiffusionInpaintPipeline = _pipeline_class("NeuronStableDiffusionInpaintPipeline",
                                                       "StableDiffusionInpaintPipeline")
NeuronStableDiffusionXLPipeline = _pipeline_class("NeuronStableDiffusionXLPipeline", "StableDiffusionXLPipeline")
NeuronStableDiffusionXLImg2ImgPipeline = _pipeline_class("NeuronStableDiffusionXLImg2ImgPipeline",
                                                         "StableDiffusionXLImg2ImgPipeline")
NeuronLatentConsistencyModelPipeline = _pipeline_class("NeuronLatentConsistencyModelPipeline",
                                                       "LatentConsistencyModelPipeline")
NeuronPixArtAlphaPipeline = _pipeline_class("NeuronPixArtAlphaPipeline", "PixArtAlphaPipeline")
NeuronPixArtSigmaPipeline = _pipeline_class("NeuronPixArtSigmaPipeline", "PixArtSigmaPipeline")
NeuronFluxPipeline = _pipeline_class("NeuronFluxPipeline", "FluxPipeline")


# ============================================================================ pipeline()
_TASK_CLASSES = {"text-classification": NeuronModelForSequenceClassification,
                 "sentiment-analysis": NeuronModelForSequenceClassification,
                 "fill-mask": NeuronModelForMaskedLM, "feature-extraction": NeuronModelForFeatureExtraction}


def pipeline(task=None, model=None, tokenizer=None, feature_extractor=None, image_processor=None, use_fast=True,
             export=False, input_shapes=None, compiler_args=None, token=None, revision=None,
             trust_remote_code=None, **kwargs):
    """``optimum.neuron.pipeline``: a transformers pipeline over the emulated model. Non-generation tasks
    tokenize to the compiled shape (``input_shapes``, default batch 1 x 128 with export=True);
    text-generation runs the causal LM in its export dtype with its static length."""
    import transformers

    if task == "text-generation":
        shape_keys = ("batch_size", "sequence_length", "num_cores", "tensor_parallel_size", "auto_cast_type")
        shapes = {k: kwargs.pop(k) for k in list(kwargs) if k in shape_keys}
        lm = model if isinstance(model, NeuronModelForCausalLM) else NeuronModelForCausalLM.from_pretrained(
            model, export=export, **shapes)
        tok = tokenizer or transformers.AutoTokenizer.from_pretrained(lm.export_settings["checkpoint_id"])
        pipe = transformers.pipeline("text-generation", model=lm.model, tokenizer=tok, **kwargs)
        pipe.generation_config.max_length = min(pipe.generation_config.max_length or lm.max_length, lm.max_length)
        return pipe
    if task not in _TASK_CLASSES:
        raise NotEmulated(f"optimum.neuron.pipeline(task={task!r})")
    shapes = dict(input_shapes or {})
    if export and not shapes:
        shapes = {"batch_size": 1, "sequence_length": 128}
    traced = model if isinstance(model, NeuronTracedModel) else _TASK_CLASSES[task].from_pretrained(
        model, export=export, **shapes)
    tok = tokenizer or transformers.AutoTokenizer.from_pretrained(traced.export_settings.get("checkpoint_id", model))
    pipe = transformers.pipeline(task, model=traced.model, tokenizer=tok, **kwargs)
    length = traced.export_settings["sequence_length"]
    pipe._preprocess_params = {**getattr(pipe, "_preprocess_params", {}), "padding": "max_length",
                               "max_length": length, "truncation": True}
    return pipe


def is_neuronx_available() -> bool:
    return True


def is_neuron_available() -> bool:
    return False


def is_torch_neuronx_available() -> bool:
    return True


NOT_MODELLED = ("NeuronModelForSeq2SeqLM", "NeuronSentenceTransformers", "NeuronModelForSentenceTransformers",
                "NeuronModelForEmbedding", "NeuronModelForImageClassification", "NeuronModelForSemanticSegmentation",
                "NeuronModelForObjectDetection", "NeuronModelForAudioClassification", "NeuronModelForCTC",
                "NeuronModelForAudioFrameClassification", "NeuronModelForXVector",
                "NeuronWhisperForConditionalGeneration", "NeuronStableDiffusionControlNetPipeline")

__all__ = [
    "NeuronModelForCausalLM", "NeuronDecoderModel", "NeuronTracedModel", "NeuronModelForSequenceClassification",
    "NeuronModelForTokenClassification", "NeuronModelForQuestionAnswering", "NeuronModelForMaskedLM",
    "NeuronModelForFeatureExtraction", "NeuronModelForMultipleChoice", "NeuronDiffusionPipelineBase",
    "NeuronStableDiffusionPipeline", "NeuronStableDiffusionImg2ImgPipeline", "NeuronStableDiffusionInpaintPipeline",
    "NeuronStableDiffusionXLPipeline", "NeuronStableDiffusionXLImg2ImgPipeline",
    "NeuronLatentConsistencyModelPipeline", "NeuronPixArtAlphaPipeline", "NeuronPixArtSigmaPipeline",
    "NeuronFluxPipeline", "pipeline", "is_neuronx_available", "is_neuron_available", "is_torch_neuronx_available",
]


MODULES: dict[str, tuple[str, ...]] = {
    "optimum.neuron": tuple(__all__),
    "optimum.neuron.modeling": ("NeuronModelForCausalLM", "NeuronDecoderModel", "NeuronTracedModel",
                                "NeuronModelForSequenceClassification", "NeuronModelForTokenClassification",
                                "NeuronModelForQuestionAnswering", "NeuronModelForMaskedLM",
                                "NeuronModelForFeatureExtraction", "NeuronModelForMultipleChoice"),
    "optimum.neuron.modeling_decoder": ("NeuronModelForCausalLM", "NeuronDecoderModel"),
    "optimum.neuron.modeling_traced": ("NeuronTracedModel",),
    "optimum.neuron.modeling_diffusion": tuple(n for n in __all__ if "Pipeline" in n),
    "optimum.neuron.pipelines": ("pipeline",),
    "optimum.neuron.models": (),
    "optimum.neuron.models.inference": (),
}
