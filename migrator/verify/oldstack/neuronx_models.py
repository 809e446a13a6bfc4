"""``transformers_neuronx`` samplers and ``neuronx_distributed`` at tensor/pipeline parallel size 1,
emulated on CPU.

``<Arch>ForSampling.from_pretrained(path, batch_size, tp_degree, amp, n_positions)`` loads the
transformers causal LM in the ``amp`` dtype (``f32`` by default); ``to_neuron()`` does nothing (tp_degree
does not change what is computed); ``sample(input_ids, sequence_length, top_k=50, ...)`` is
transformers-neuronx's sampling loop: per step the logits are divided by the temperature, cut to the
top-k (then top-p), softmaxed and one index drawn with ``torch.multinomial`` -- ``top_k=1`` is greedy --
until ``sequence_length`` tokens (prompt included) or every row produced ``eos_token_id``; a finished
row repeats eos. The batch must be the compiled ``batch_size`` and ``sequence_length`` at most
``n_positions``, as on the old runtime.
"""

from __future__ import annotations

import os

from migrator.verify.oldstack.errors import NotEmulated, not_emulated

_AMP = {"f32": "float32", "fp32": "float32", "bf16": "bfloat16", "f16": "float16", "fp16": "float16"}


class NeuronConfig:
    """``transformers_neuronx.config.NeuronConfig``: the options that change what is computed are not emulated."""

    def __init__(self, **kwargs):
        for key in ("quant", "continuous_batching", "on_device_embedding", "lhs_aligned"):
            if kwargs.get(key):
                raise NotEmulated(f"transformers_neuronx.config.NeuronConfig({key}=...)")
        self.__dict__.update(kwargs)


class GenerationConfig:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


def _top_k_top_p(scores, top_k, top_p):
    import torch

    k = scores.shape[-1] if not top_k or top_k <= 0 else min(int(top_k), scores.shape[-1])
    values, indices = torch.topk(scores, k)
    if top_p is not None and top_p < 1.0:
        probs = torch.softmax(values, dim=-1)
        cumulative = torch.cumsum(probs, dim=-1)
        remove = cumulative > top_p
        remove[..., 1:] = remove[..., :-1].clone()
        remove[..., 0] = False
        values = values.masked_fill(remove, float("-inf"))
    return values, indices


class _Sampler:
    """A transformers-neuronx ``*ForSampling`` model."""

    def __init__(self, model, batch_size, n_positions, tp_degree):
        self.model = model
        self.config = model.config
        self.batch_size = batch_size
        self.n_positions = n_positions
        self.tp_degree = tp_degree

    @classmethod
    def from_pretrained(cls, model_path, *args, batch_size=1, tp_degree=2, amp="f32", n_positions=2048,
                        neuron_config=None, context_length_estimate=None, unroll=None, **kwargs):
        import torch
        from transformers import AutoModelForCausalLM

        if amp not in _AMP:
            raise NotEmulated(f"transformers_neuronx.{cls.__name__}.from_pretrained(amp={amp!r})")
        from migrator.verify.oldstack.optimum_inference import dtype_kwargs

        model = AutoModelForCausalLM.from_pretrained(model_path, **dtype_kwargs(getattr(torch, _AMP[amp]))).eval()
        return cls(model, int(batch_size), int(n_positions), tp_degree)

    def to_neuron(self):
        return self

    def enable_speculative_decoder(self, *args, **kwargs):
        raise NotEmulated(f"transformers_neuronx.{type(self).__name__}.enable_speculative_decoder")

    def reset(self):
        return None

    def sample(self, input_ids, sequence_length, start_ids=None, top_k=50, top_p=1.0, eos_token_id=None,
               temperature=1.0, streamer=None, **kwargs):
        import torch

        if start_ids is not None:
            raise NotEmulated(f"transformers_neuronx.{type(self).__name__}.sample(start_ids=...)")
        batch, start = input_ids.shape
        if batch != self.batch_size:
            raise ValueError(f"input batch size ({batch}) does not match the compiled batch_size ({self.batch_size})")
        if sequence_length > self.n_positions:
            raise ValueError(f"sequence_length ({sequence_length}) exceeds n_positions ({self.n_positions})")
        tokens = [input_ids]
        done = torch.zeros(batch, 1, dtype=torch.bool)
        with torch.no_grad():
            out = self.model(input_ids=input_ids, use_cache=True)
            past = out.past_key_values
            scores = out.logits[:, -1, :].float()
            for cur_len in range(start, sequence_length):
                if temperature != 1.0:
                    scores = scores / temperature
                values, indices = _top_k_top_p(scores, top_k, top_p)
                probs = torch.softmax(values, dim=-1)
                picked = torch.multinomial(probs, num_samples=1, replacement=True)
                inputs = torch.gather(indices, 1, picked)
                if eos_token_id is not None:
                    done = torch.logical_or(done, inputs == eos_token_id)
                    token = torch.where(done, torch.full_like(inputs, eos_token_id), inputs)
                else:
                    token = inputs
                tokens.append(token)
                if streamer is not None:
                    streamer.put(token)
                if cur_len + 1 >= sequence_length or bool(done.all()):
                    break
                out = self.model(input_ids=inputs, past_key_values=past, use_cache=True)
                past = out.past_key_values
                scores = out.logits[:, -1, :].float()
        if streamer is not None:
            streamer.end()
        return torch.cat(tokens, dim=-1)

    def __call__(self, *args, **kwargs):
        raise NotEmulated(f"transformers_neuronx.{type(self).__name__}.forward")


def _sampler(name):
    return type(name, (_Sampler,), {"__doc__": f"transformers_neuronx {name}, emulated"})


LlamaForSampling = _sampler("LlamaForSampling")
GPT2ForSampling = _sampler("GPT2ForSampling")
MistralForSampling = _sampler("MistralForSampling")
MixtralForSampling = _sampler("MixtralForSampling")
OPTForSampling = _sampler("OPTForSampling")
GPTJForSampling = _sampler("GPTJForSampling")
GPTNeoXForSampling = _sampler("GPTNeoXForSampling")
BloomForSampling = _sampler("BloomForSampling")
Qwen2ForSampling = _sampler("Qwen2ForSampling")


class HuggingFaceGenerationModelAdapter:
    """``HuggingFaceGenerationModelAdapter(config, neuron_model)``: the transformers generate() API over
    the sampler's model."""

    def __init__(self, config, model):
        self.config = config
        self.neuron_model = model
        self.model = model.model
        self.generation_config = model.model.generation_config

    def generate(self, *args, **kwargs):
        return self.model.generate(*args, **kwargs)

    def reset_generation(self):
        return None

    def __getattr__(self, item):
        if item.startswith("__"):
            raise AttributeError(item)
        return getattr(self.__dict__["model"], item)


def save_pretrained_split(model, save_directory):
    model.save_pretrained(save_directory, safe_serialization=True)


# ============================================================================ neuronx_distributed
_ps = {"initialized": False}


def _world():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))


def initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1, *args, **kwargs):
    if (tensor_model_parallel_size or 1) > 1 or (pipeline_model_parallel_size or 1) > 1:
        raise NotEmulated("neuronx_distributed.parallel_layers.parallel_state.initialize_model_parallel"
                          "(tensor_model_parallel_size>1)")
    _ps["initialized"] = True


def model_parallel_is_initialized():
    return _ps["initialized"]


def destroy_model_parallel():
    _ps["initialized"] = False


def get_tensor_model_parallel_size():
    return 1


def get_tensor_model_parallel_rank():
    return 0


def get_pipeline_model_parallel_size():
    return 1


def get_pipeline_model_parallel_rank():
    return 0


def get_data_parallel_size():
    return _world()[0]


def get_data_parallel_rank():
    return _world()[1]


def get_data_parallel_group(*args, **kwargs):
    import torch.distributed as dist

    return dist.group.WORLD


def move_model_to_device(model, device):
    model.to(device)


parallel_model_trace = not_emulated("neuronx_distributed.trace.parallel_model_trace")
get_tensor_model_parallel_group = not_emulated(
    "neuronx_distributed.parallel_layers.parallel_state.get_tensor_model_parallel_group")

_SAMPLERS = ("LlamaForSampling", "GPT2ForSampling", "MistralForSampling", "MixtralForSampling", "OPTForSampling",
             "GPTJForSampling", "GPTNeoXForSampling", "BloomForSampling", "Qwen2ForSampling")
_ARCH = {"llama": "LlamaForSampling", "gpt2": "GPT2ForSampling", "mistral": "MistralForSampling",
         "mixtral": "MixtralForSampling", "opt": "OPTForSampling", "gptj": "GPTJForSampling",
         "gpt_neox": "GPTNeoXForSampling", "bloom": "BloomForSampling", "qwen2": "Qwen2ForSampling"}
_PS = ("initialize_model_parallel", "model_parallel_is_initialized", "destroy_model_parallel",
       "get_tensor_model_parallel_size", "get_tensor_model_parallel_rank", "get_pipeline_model_parallel_size",
       "get_pipeline_model_parallel_rank", "get_data_parallel_size", "get_data_parallel_rank",
       "get_data_parallel_group", "get_tensor_model_parallel_group")

MODULES: dict[str, tuple[str, ...]] = {
    "transformers_neuronx": (*_SAMPLERS, "NeuronConfig", "GenerationConfig", "HuggingFaceGenerationModelAdapter"),
    "transformers_neuronx.config": ("NeuronConfig", "GenerationConfig"),
    "transformers_neuronx.module": ("save_pretrained_split",),
    "transformers_neuronx.generation_utils": ("HuggingFaceGenerationModelAdapter",),
    **{f"transformers_neuronx.{arch}": () for arch in _ARCH},
    **{f"transformers_neuronx.{arch}.model": (cls,) for arch, cls in _ARCH.items()},
    "neuronx_distributed": ("parallel_layers",),
    "neuronx_distributed.parallel_layers": ("parallel_state",),
    "neuronx_distributed.parallel_layers.parallel_state": _PS,
    "neuronx_distributed.trace": ("parallel_model_trace",),
    "neuronx_distributed.utils": (),
    "neuronx_distributed.utils.model_utils": ("move_model_to_device",),
}


def __getattr__(name):
    if name in ("parallel_layers", "parallel_state"):
        import importlib

        return importlib.import_module("neuronx_distributed.parallel_layers" + (
            ".parallel_state" if name == "parallel_state" else ""))
    raise AttributeError(name)
