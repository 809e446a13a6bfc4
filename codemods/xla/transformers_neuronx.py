"""NM411: transformers-neuronx samplers -> AutoModelForCausalLM on the ``neuron`` device.

transformers-neuronx compiled a decoder for fixed shapes and sampled from it::

    model = LlamaForSampling.from_pretrained(path, batch_size=1, tp_degree=2, amp="bf16", n_positions=1024)
    model.to_neuron()
    tokens = model.sample(input_ids, sequence_length=256, top_k=20)

Under TorchNeuron the Transformers model runs eagerly on ``neuron`` with a static KV cache::

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, distributed_config=DistributedConfig(tp_size=2))
    model.generation_config.cache_implementation = "static"
    model.generation_config.max_cache_len = 1024
    tokens = model.generate(input_ids, max_length=256, do_sample=True, top_k=20, top_p=1.0, temperature=1.0)

Defaults made explicit (transformers-neuronx ``LlamaForSampling.__init__(config, *,
n_positions=2048, batch_size=1, amp='f32', tp_degree=2, ...)`` and ``sample(self, input_ids,
sequence_length, start_ids=None, top_k=50, top_p=1.0, eos_token_override=None, temperature=1.0,
streamer=None, ...)``): a model's own ``generation_config`` (Llama ships temperature=0.6,
top_p=0.9) would otherwise change what ``.sample`` did.
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.inference.causal_lm import (
    _EQ,
    DISTRIBUTED_CONFIG,
    ONE_PROCESS_TP_MARKER,
    TARGET,
    _assigned_target,
    _cache_lines,
    _indent,
    _insert_after,
    _layout,
    _literal,
    _prefix_len,
    _quote_style,
    single_process,
)
from codemods.common.arg_plan import string_value
from codemods.common.statements import assigned_values
from codemods.xla.base import _atomic, _expression_statement, _is_reference
from migrator.model import fitted
from migrator.rules import NameClash, PythonContext, PythonRule

NX = "transformers_neuronx"
MODELS = {
    "llama": "LlamaForSampling",
    "mistral": "MistralForSampling",
    "mixtral": "MixtralForSampling",
    "gpt2": "GPT2ForSampling",
    "gptj": "GPTJForSampling",
    "gptneox": "GPTNeoXForSampling",
    "opt": "OPTForSampling",
    "bloom": "BloomForSampling",
    "qwen2": "Qwen2ForSampling",
}
#: the Transformers model type of each transformers-neuronx model (its config's ``model_type``)
MODEL_TYPES = {f"{NX}.{cls}": module.replace("gptneox", "gpt_neox") for module, cls in MODELS.items()}
MODEL_TYPES.update({f"{NX}.{module}.model.{cls}": t for (module, cls), t in zip(MODELS.items(), MODEL_TYPES.values())})
#: the project fact of a run that calls save_pretrained_split (the migration makes it save_pretrained)
SPLIT_WRITER = "writes:split-checkpoints"
#: a folder named like a save_pretrained_split output (`./Llama-2-13b-split`, `llama_split/`)
_SPLIT_FOLDER = re.compile(r"(?i)[-_]split/?$")
SPLIT_LOAD_MARKER = ("Load the original checkpoint: {path} looks like a save_pretrained_split folder, which "
                     "Transformers cannot read.")


#: transformers-neuronx's writer of the split checkpoint its from_pretrained read
SPLIT_SAVES = (f"{NX}.module.save_pretrained_split", f"{NX}.save_pretrained_split")
CLASSES = tuple(
    name for module, cls in MODELS.items() for name in (f"{NX}.{cls}", f"{NX}.{module}.model.{cls}")
) + (f"{NX}.NeuronAutoModelForCausalLM",)  # dispatches to the classes above (same arguments)
#: transformers-neuronx's speculative decoding (a draft model beside the target): natively generate(assistant_model=),
#: which raises on a static cache ("assisted generate is not supported with Static cache classes")
_SPECULATIVE = re.compile(r"\benable_speculative_decoder\b|\bSpeculativeGenerator\b|transformers_neuronx\.speculation")
def _speculative_scope(ctx: PythonContext) -> bool:
    """Whether the scope of the load being handled (its function, or the module's own statements) decodes
    speculatively: its models are the target and the draft of assisted generation."""
    scope = next((n for n in reversed(ctx.stack) if isinstance(n, cst.FunctionDef)), None)
    if scope is not None:
        return _SPECULATIVE.search(ctx.module.code_for_node(scope)) is not None
    key = "NM411.speculative_module"
    if key not in ctx.scratch:
        ctx.scratch[key] = any(_SPECULATIVE.search(ctx.module.code_for_node(stmt)) for stmt in ctx.module.body
                               if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)))
    return ctx.scratch[key]


#: the models whose .sample was transformers-neuronx's simple_sample (sampling.py: the EOS score is set to -inf
#: before every draw, so the output always has sequence_length tokens)
NEVER_EOS = ("gpt2", "gptj", "gptneox", "opt", "bloom")
AMP = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}
DEFAULTS = {"n_positions": 2048, "amp": "f32", "tp_degree": 2}
#: sample(input_ids, sequence_length, start_ids=None, top_k=50, top_p=1.0, eos_token_override=None,
#:        temperature=1.0, streamer=None, stopping_criteria_list=None, no_repeat_ngram_size=None)
SAMPLE_PARAMS = ("input_ids", "sequence_length", "start_ids", "top_k", "top_p", "eos_token_override",
                 "temperature", "streamer", "stopping_criteria_list", "no_repeat_ngram_size")
SAMPLE_DEFAULTS = (("top_k", "50"), ("top_p", "1.0"), ("temperature", "1.0"))


def _module_of(cls: str) -> str | None:
    """The transformers-neuronx model module (``gptj``) of a class's qualified name, or None (the auto class)."""
    name = cls.rsplit(".", 1)[-1]
    return next((module for module, c in MODELS.items() if c == name), None)


def _shardable(cls: str) -> bool | None:
    """Whether Transformers can shard the architecture of the transformers-neuronx class ``cls`` for
    tensor parallelism (the target API data, generated from the installed Transformers); None: unknown."""
    model_type = MODEL_TYPES.get(cls)
    if model_type is None:
        return None
    from migrator.selfcheck.targetapi import api

    return api().has_tp_plan(model_type)


#: transformers-neuronx's compiled-artifact calls (a directory of NEFFs): a Transformers model has
#: ``save``/``load`` of neither kind (AttributeError), and TorchNeuron compiles at the first call
#: the key/value heads of most grouped-query-attention models (Llama 2 70B, Llama 3, Mistral): a larger tp_degree
#: was transformers-neuronx's to replicate them, which Transformers' tensor-parallel plans do not
MAX_KV_HEADS = 8
ARTIFACT_CALLS = {
    "save": "`{m}.save(...)` wrote transformers-neuronx compiled artifacts: drop it, or use `{m}.save_pretrained(dir)`.",
    "load": "`{m}.load(...)` read transformers-neuronx compiled artifacts: drop it (TorchNeuron compiles at first call).",
    "enable_speculative_decoder": "Drop `{m}.enable_speculative_decoder(...)`: pass the draft model to generate() as "
                                  "assistant_model=.",
}


def _is_sequence(value: cst.BaseExpression, ctx: PythonContext) -> bool:
    """A list or tuple literal, or a name every assignment of this scope and the module gives one."""
    if isinstance(value, (cst.List, cst.Tuple)):
        return True
    if not isinstance(value, cst.Name):
        return False
    found = assigned_values(ctx, value.value)
    return bool(found) and all(isinstance(v, (cst.List, cst.Tuple)) for v in found)


class TransformersNeuronxSampling(PythonRule):
    id = "NM411"
    markers = (
        (SPLIT_LOAD_MARKER, """transformers-neuronx read a checkpoint that save_pretrained_split wrote (one file per
        tensor, in a folder usually named *-split); Transformers' from_pretrained reads a regular checkpoint only
        (OSError on the split folder). Load the original checkpoint the split was made from (the code often loads
        its tokenizer from there already)."""),
        ("Launch with `torchrun --nproc_per_node={n}`: {origin}={n} became DistributedConfig(tp_size={n}).",
         """transformers-neuronx sharded the model over tp_degree NeuronCores inside one process; natively
         DistributedConfig(tp_size=N) runs one process per NeuronCore, started by torchrun."""),
        ("Map what the dropped neuron_config= set (quantization, GQA, batching) to Transformers options.",
         """neuron_config= took a transformers-neuronx NeuronConfig (quantization, grouped-query attention layout,
         continuous batching); Transformers has its own options for these (quantization_config, the
         model's attention settings, generation/serving options)."""),
        ("Pass attention_mask= for the left-padded prompts: generate() has no start_ids=.",
         """start_ids= gave the offsets of left-padded prompts to transformers-neuronx's sample();
         Transformers' generate() reads the padding from attention_mask."""),
        ("Replace {name} with transformers.AutoModelForCausalLM (device_map=\"neuron\").",
         """transformers-neuronx model classes do not exist on TorchNeuron: load the model with
         transformers.AutoModelForCausalLM.from_pretrained(path, dtype=..., device_map="neuron")."""),
    )
    title = "transformers-neuronx *ForSampling -> AutoModelForCausalLM on 'neuron' with a static cache; sample -> generate"
    fix = "mixed"
    triggers = ("transformers_neuronx",)
    # a helper module of such a project, given the model: its sample(..., sequence_length=N) calls
    project_triggers = ("sequence_length=",)
    #: a run that writes split checkpoints itself: migrated to save_pretrained, its folders become regular ones
    project_probes = {SPLIT_WRITER: ("save_pretrained_split",)}
    owns = CLASSES + SPLIT_SAVES
    why = """
        transformers-neuronx's `LlamaForSampling` / `MistralForSampling` / `GPT2ForSampling` / ...
        `.from_pretrained(path, batch_size=1, tp_degree=2, amp="f32", n_positions=2048)` +
        `.to_neuron()` compiled a decoder for fixed shapes, sharded over `tp_degree` NeuronCores.
        On TorchNeuron the Transformers model runs on the `neuron` device:
        `AutoModelForCausalLM.from_pretrained(path, dtype=<amp>, device_map="neuron")` (or
        `distributed_config=DistributedConfig(tp_size=tp_degree)` under torchrun when
        `tp_degree` > 1, which is the default), a static KV cache of `n_positions` tokens, no
        `.to_neuron()`, and `.sample(ids, sequence_length=N, top_k=K)` becomes
        `.generate(ids, max_length=N, do_sample=True, top_k=K, top_p=1.0, temperature=1.0)` (the ids
        stay on the CPU, where `.sample` took them and where generate() on Neuron wants them;
        `min_length=N` too for GPT-2, GPT-J, GPT-NeoX, OPT and BLOOM, whose sampler never sampled EOS) -
        transformers-neuronx's own defaults, written out so that the checkpoint's
        generation_config does not change them.
    """
    before = """
        import torch
        from transformers_neuronx import LlamaForSampling

        def load(path):
            model = LlamaForSampling.from_pretrained(path, batch_size=1, tp_degree=1, amp="bf16", n_positions=1024)
            model.to_neuron()
            return model

        def complete(model, input_ids):
            with torch.inference_mode():
                return model.sample(input_ids, sequence_length=256, top_k=20)
    """
    after = """
        import torch
        from transformers import AutoModelForCausalLM

        def load(path):
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device_map="neuron")
            model.generation_config.cache_implementation = "static"
            model.generation_config.max_cache_len = 1024
            return model

        def complete(model, input_ids):
            with torch.inference_mode():
                return model.generate(input_ids, max_length=256, do_sample=True, top_k=20, top_p=1.0, temperature=1.0)
    """
    caveats = """
        `path` must be a regular Hugging Face checkpoint (a `save_pretrained_split` directory is
        not one: `save_pretrained_split(model, path)` becomes `model.save_pretrained(path)`; a load
        of a folder named `*-split` gets a marker unless the run writes its split checkpoints itself). `batch_size`, `context_length_estimate`, `unroll` and the other compile options
        are dropped (pad prompts to the batch size you used); `neuron_config=`, an `amp` that is
        not "bf16"/"f16"/"f32", a `tp_degree` held in a variable and `start_ids=` of `.sample`
        get a marker, as does a `.sample(..., sequence_length=N)` on a model the unit does not load
        (a helper module given the model, in a project that uses transformers-neuronx). A `tp_degree` > 1 becomes `DistributedConfig(tp_size=...)` only for the
        architectures Transformers can shard (their config has a `base_model_tp_plan`: Llama,
        Mistral, Mixtral, GPT-NeoX, Qwen2; read from the installed Transformers by
        `tools/gen_target_api.py`); GPT-2, GPT-J, OPT and BLOOM have none (the load would raise), so
        they load with `device_map="neuron"` and a marker. `.sample` and `.to_neuron()` are rewritten (removed) only on a name (or attribute) that a rewritten
        `from_pretrained` was assigned to in the same module (a `model` parameter counts when
        the module rewrote a load into `model`); the `.to_neuron()` of another model (its class chosen at
        run time) gets a marker: it is still a transformers-neuronx model. The static-cache lines are inserted after the
        assignment; a load that is not assigned gets a marker instead. A load in a scope that decodes
        speculatively (`enable_speculative_decoder`, `SpeculativeGenerator`: a target and a draft
        model) gets no static cache: `generate(assistant_model=...)` rejects one on either model.
    """

    def handlers(self):
        return {cst.Call: self._on_call, cst.Name: self._on_name, cst.Attribute: self._on_name}

    # ---------------------------------------------------------------- other uses of the classes
    def _on_name(self, node, ctx: PythonContext) -> None:
        parent = ctx.parent
        if isinstance(node, cst.Name) and not _is_reference(node, parent):
            return
        if isinstance(parent, cst.Attribute) and parent.value is node:
            if parent.attr.value == "from_pretrained":
                return  # the call handler rewrites it
        if isinstance(node, cst.Attribute) and isinstance(parent, cst.Attribute) and parent.value is node:
            return
        qual = ctx.qualname(node)
        if qual in CLASSES:
            ctx.marker(node, f"Replace {qual.rsplit('.', 1)[-1]} with transformers.AutoModelForCausalLM "
                             "(device_map=\"neuron\").")

    # ---------------------------------------------------------------- calls
    def _on_call(self, call: cst.Call, ctx: PythonContext) -> None:
        func = call.func
        if ctx.qualname(func) in SPLIT_SAVES:
            self._split_save(call, ctx)
            return
        if not isinstance(func, cst.Attribute):
            return
        method = func.attr.value
        if method == "from_pretrained" and ctx.qualname(func.value) in CLASSES:
            try:
                self._from_pretrained(call, ctx)
            except NameClash as exc:
                ctx.marker(call, f"rewrite this load by hand ({exc})")
            return
        receiver = ctx.module.code_for_node(func.value)
        if method == "to_neuron" and not call.args:
            stmt = _expression_statement(ctx, call)
            if receiver not in ctx.local_state().get("models", set()):
                # a model this unit did not load with a migrated call (a class chosen at run time, a load
                # elsewhere): it is still a transformers-neuronx model until a person migrates its load
                ctx.marker(call, fitted(f"Load {receiver} with AutoModelForCausalLM (device_map=\"neuron\"), then "
                                        f"remove {receiver}.to_neuron().",
                                        "Load this model with AutoModelForCausalLM (device_map=\"neuron\"), then "
                                        "remove .to_neuron()."))
            elif stmt is not None:
                expr, container = stmt
                if isinstance(container, cst.SimpleStatementLine) and len(container.body) == 1:
                    ctx.remove_statement(container)
                else:
                    ctx.remove_statement(expr)
                ctx.finding(call, f"{receiver}.to_neuron() removed (the model is already on the neuron device)")
            else:
                ctx.marker(call, f"{receiver}.to_neuron() does not exist on a Transformers model: remove it")
            return
        if method == "reset" and not call.args and receiver in ctx.local_state().get("models", set()):
            # transformers-neuronx's reset() cleared the compiled model's KV cache between requests; a
            # Transformers model has no reset (AttributeError) and generate() starts a new cache each call
            stmt = _expression_statement(ctx, call)
            if stmt is None:
                ctx.marker(call, f"{receiver}.reset() does not exist on a Transformers model: remove it")
                return
            expr, container = stmt
            ctx.remove_statement(container if isinstance(container, cst.SimpleStatementLine)
                                 and len(container.body) == 1 else expr)
            ctx.finding(call, f"{receiver}.reset() removed (generate() starts a new KV cache on every call)")
            return
        if method == "sample" and receiver in ctx.local_state().get("models", set()):
            self._sample(call, receiver, ctx)
            return
        if method == "sample" and any(a.keyword is not None and a.keyword.value == "sequence_length"
                                      for a in call.args):
            # transformers-neuronx's sample(input_ids, sequence_length=N) on a model this unit does not load (a
            # helper given the model, in a project that uses transformers-neuronx): a Transformers model has none
            ctx.marker(call, "If this is a transformers-neuronx model, call generate(input_ids, do_sample=True, "
                             "max_length=N): sample() is gone.")
            return
        if method in ARTIFACT_CALLS and call.args and receiver in ctx.local_state().get("models", set()):
            ctx.marker(call, fitted(ARTIFACT_CALLS[method].format(m=receiver), ARTIFACT_CALLS[method].format(m="model")))

    def _split_save(self, call: cst.Call, ctx: PythonContext) -> None:
        """``save_pretrained_split(model, path)`` wrote a Transformers model's weights as one file per
        tensor for transformers-neuronx to read; the migrated load reads a regular checkpoint."""
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if len(positional) != 2 or len(call.args) != 2:
            ctx.marker(call, "save_pretrained_split does not exist on TorchNeuron: call model.save_pretrained(path)")
            return
        model, path = positional
        ctx.replace(call, cst.Call(func=cst.Attribute(value=_atomic(model.value), attr=cst.Name("save_pretrained")),
                                   args=[path.with_changes(comma=cst.MaybeSentinel.DEFAULT)]))
        ctx.finding(call, "save_pretrained_split(model, path) -> model.save_pretrained(path) (a regular checkpoint, "
                          "which the migrated from_pretrained(path) reads)")

    def _from_pretrained(self, call: cst.Call, ctx: PythonContext) -> None:
        cls = ctx.qualname(call.func.value)  # type: ignore[attr-defined]
        kw = {a.keyword.value: a for a in call.args if a.keyword is not None}
        positional = [a for a in call.args if a.keyword is None]
        if any(a.star for a in call.args) or len(positional) != 1:
            ctx.marker(call, f"rewrite this {cls}.from_pretrained by hand: AutoModelForCausalLM.from_pretrained(path, "
                             "dtype=<amp>, device_map=\"neuron\") with a static cache of n_positions tokens")
            return
        quote = _quote_style(call)
        binding = ctx.imports.binding_of(call.func.value)  # type: ignore[attr-defined]
        markers: list[str] = []
        applied: list[str] = []
        path = string_value(positional[0].value, ctx)
        if path is not None and _SPLIT_FOLDER.search(path) and SPLIT_WRITER not in ctx.facts \
                and "save_pretrained_split" not in ctx.code:
            # save_pretrained_split wrote one file per tensor: Transformers' from_pretrained cannot read that folder
            markers.append(fitted(SPLIT_LOAD_MARKER.format(path=path), SPLIT_LOAD_MARKER.format(path="this path")))

        target_expr = _target(ctx, binding)  # first: its import goes first
        # dtype from amp (transformers-neuronx default "f32")
        amp = _literal(kw["amp"].value) if "amp" in kw else DEFAULTS["amp"]
        dtype: cst.BaseExpression | None = None
        if isinstance(amp, str) and amp in AMP:
            dtype = ctx.name_for(f"torch.{AMP[amp]}", anchor=binding, style="module")
        else:
            markers.append(f"amp={ctx.module.code_for_node(kw['amp'].value)} was dropped: pass dtype= "
                           "(torch.bfloat16 for 'bf16', torch.float16 for 'f16', torch.float32 for 'f32')")

        # placement from tp_degree (default 2)
        tp = _literal(kw["tp_degree"].value) if "tp_degree" in kw else DEFAULTS["tp_degree"]
        placement: tuple[str, cst.BaseExpression]
        shardable = _shardable(cls)
        if isinstance(tp, int) and not isinstance(tp, bool) and tp > 1 and shardable is False:
            # Transformers has no tensor-parallel plan for this architecture: DistributedConfig(tp_size>1)
            # raises "has no tp_plan" at load
            placement = ("device_map", cst.SimpleString(f"{quote}neuron{quote}"))
            origin = "tp_degree" if "tp_degree" in kw else "the default tp_degree"
            markers.append(f"{origin}={tp} dropped ({MODEL_TYPES[cls]} has no tensor-parallel plan in Transformers): "
                           "check that the model fits one NeuronCore")
        elif isinstance(tp, int) and not isinstance(tp, bool) and tp > 1 and (tp & (tp - 1) or tp > MAX_KV_HEADS):
            # not a power of two, or more ranks than the key/value heads of most GQA models (8: Llama 2 70B,
            # Llama 3, Mistral): transformers-neuronx padded or replicated the heads, Transformers' tensor-parallel
            # plan shards them evenly (get_kv_heads_per_rank: None where tp_size does not divide them)
            placement = ("device_map", cst.SimpleString(f"{quote}neuron{quote}"))
            markers.append(fitted(f"Load with DistributedConfig(tp_size=N), not device_map, N dividing the KV heads, under "
                                  f"torchrun: tp_degree={tp} may not.",
                                  "Load with DistributedConfig(tp_size=N), not device_map, N dividing the KV heads, under "
                                  "torchrun."))
        elif isinstance(tp, int) and not isinstance(tp, bool) and tp > 1 and (process := single_process(ctx)):
            # one process, never started by torchrun (a notebook kernel, a model server): DistributedConfig(tp_size > 1)
            # raises there
            placement = ("device_map", cst.SimpleString(f"{quote}neuron{quote}"))
            markers.append(ONE_PROCESS_TP_MARKER.format(tp=tp, process=process))
        elif isinstance(tp, int) and not isinstance(tp, bool) and tp > 1:
            dc = ctx.name_for(DISTRIBUTED_CONFIG, anchor=binding)
            placement = ("distributed_config", cst.Call(func=dc, args=[
                cst.Arg(keyword=cst.Name("tp_size"), value=cst.Integer(str(tp)), equal=_EQ)]))
            origin = "tp_degree" if "tp_degree" in kw else "the default tp_degree"
            markers.append(f"Launch with `torchrun --nproc_per_node={tp}`: {origin}={tp} became DistributedConfig(tp_size={tp}).")
        else:
            placement = ("device_map", cst.SimpleString(f"{quote}neuron{quote}"))
            if not (isinstance(tp, int) and not isinstance(tp, bool)) and shardable is False:
                # a size held in a variable, for an architecture Transformers cannot shard at all
                code = ctx.module.code_for_node(kw["tp_degree"].value)
                markers.append(fitted(f"tp_degree={code} dropped ({MODEL_TYPES[cls]} has no tensor-parallel plan in "
                                      "Transformers): check that the model fits one NeuronCore",
                                      f"tp_degree dropped ({MODEL_TYPES[cls]} has no tensor-parallel plan in "
                                      "Transformers): check that the model fits one NeuronCore"))
            elif not (isinstance(tp, int) and not isinstance(tp, bool)):
                code = ctx.module.code_for_node(kw["tp_degree"].value)
                markers.append(fitted(f"If {code} > 1, load with DistributedConfig(tp_size={code}) instead of device_map, "
                                      "under torchrun.",
                                      "If tp_degree > 1, load with DistributedConfig(tp_size=...) instead of device_map, "
                                      "under torchrun."))

        if "neuron_config" in kw:
            markers.append("Map what the dropped neuron_config= set (quantization, GQA, batching) to Transformers options.")
        dropped = [k for k in kw if k not in ("amp", "tp_degree", "n_positions", "neuron_config")]
        if dropped:
            applied.append(f"compile options dropped: {', '.join(dropped)}")

        holder: dict[str, cst.CSTNode] = {}
        buckets = "n_positions" in kw and _is_sequence(kw["n_positions"].value, ctx)
        if "n_positions" in kw:
            max_len_code = None
        else:
            holder["max_cache_len"] = cst.Integer(str(DEFAULTS["n_positions"]))
            max_len_code = str(DEFAULTS["n_positions"])
        indent, prefix = _indent(ctx), _prefix_len(ctx, call)

        def rewrite(updated: cst.Call) -> cst.Call:
            path = next(a for a in updated.args if a.keyword is None)
            for a in updated.args:
                if a.keyword is not None and a.keyword.value == "n_positions":
                    # a list of buckets (`n_positions=[2048, 4096, 8192]`): the cache holds the longest one
                    holder["max_cache_len"] = cst.Call(func=cst.Name("max"), args=[cst.Arg(a.value)]) \
                        if buckets else a.value
            args = [path]
            if dtype is not None:
                args.append(cst.Arg(keyword=cst.Name("dtype"), value=dtype, equal=_EQ))
            args.append(cst.Arg(keyword=cst.Name(placement[0]), value=placement[1], equal=_EQ))
            new = updated.with_changes(func=cst.Attribute(value=target_expr, attr=cst.Name("from_pretrained")))
            new = _layout(new, args, ctx.module, indent, prefix)
            holder["call"] = new
            return new

        ctx.replace(call, rewrite)
        target = _assigned_target(ctx, call)
        speculative = _speculative_scope(ctx)
        inserted = speculative or (
            target is not None and _insert_after(ctx, holder, lambda line: _cache_lines(line, holder, quote)))
        if speculative:
            applied.append("no static cache: the unit decodes speculatively, and assisted generation "
                           "(generate(assistant_model=...)) rejects a static cache on either model")
        if target is not None:
            code = ctx.module.code_for_node(target)
            ctx.local_state().setdefault("models", set()).add(code)
            ctx.local_state().setdefault("classes", {}).setdefault(code, set()).add(cls)
        if not inserted:
            n = max_len_code or ctx.module.code_for_node(kw["n_positions"].value)
            markers.append(f"set a static cache on this model: `model.generation_config.cache_implementation = "
                           f"{quote}static{quote}` and `model.generation_config.max_cache_len = {n}`")
        ctx.finding(call, f"{cls}.from_pretrained -> {TARGET}.from_pretrained(..., {placement[0]}=...)" + (
            "" if speculative else " with a static cache" + ("" if "n_positions" in kw else
                                                            " of the default n_positions=2048")))
        for message in applied:
            ctx.finding(call, message)
        for message in markers:
            ctx.marker(call, message)

    def _sample(self, call: cst.Call, receiver: str, ctx: PythonContext) -> None:
        bound: dict[str, cst.Arg] = {}
        for i, a in enumerate(call.args):
            if a.star:
                ctx.marker(call, f"rewrite {receiver}.sample(...) by hand as generate(input_ids, max_length=..., "
                                 "do_sample=True, top_k=50, top_p=1.0, temperature=1.0)")
                return
            name = SAMPLE_PARAMS[i] if a.keyword is None and i < len(SAMPLE_PARAMS) else (
                a.keyword.value if a.keyword is not None else None)
            if name is None or name not in SAMPLE_PARAMS:
                ctx.marker(call, f"rewrite {receiver}.sample(...) by hand (unknown argument {name!r})")
                return
            bound[name] = a
        if "input_ids" not in bound or "sequence_length" not in bound:
            return
        if "start_ids" in bound and _literal(bound["start_ids"].value) is not None:
            ctx.marker(call, "Pass attention_mask= for the left-padded prompts: generate() has no start_ids=.")
        if "stopping_criteria_list" in bound:
            ctx.marker(call, "stopping_criteria_list= becomes generate(stopping_criteria=StoppingCriteriaList([...])) "
                             "with transformers stopping criteria")
        names = {"sequence_length": "max_length", "eos_token_override": "eos_token_id"}
        classes = ctx.local_state().get("classes", {}).get(receiver, set())
        # GPT-2, GPT-J, GPT-NeoX, OPT and BLOOM sampled with transformers-neuronx's simple_sample, which never
        # samples EOS (its score is -inf at every step): always sequence_length tokens; generate() stops at EOS
        # unless min_length is the same length. The Llama family's sampler stops at EOS as generate() does
        never_eos = bool(classes) and all(_module_of(c) in NEVER_EOS for c in classes)
        if not never_eos and not (classes and all(_module_of(c) in MODELS and _module_of(c) not in NEVER_EOS
                                                  for c in classes)):
            ctx.marker(call, "Pass min_length= equal to max_length if this is GPT-2/GPT-J/GPT-NeoX/OPT/BLOOM: "
                             "its .sample never stopped at EOS.")

        def build(updated: cst.Call) -> cst.Call:
            ub = {}
            for i, a in enumerate(updated.args):
                ub[SAMPLE_PARAMS[i] if a.keyword is None else a.keyword.value] = a
            # .sample took token ids on the CPU, as generate() on Neuron wants them (it moves what forward
            # consumes, keeps the growing tensors on the CPU, and returns the output where the inputs were)
            args = [cst.Arg(value=ub["input_ids"].value)]
            args.append(cst.Arg(keyword=cst.Name("max_length"), value=ub["sequence_length"].value, equal=_EQ))
            if never_eos:
                args.append(cst.Arg(keyword=cst.Name("min_length"), value=ub["sequence_length"].value, equal=_EQ))
            args.append(cst.Arg(keyword=cst.Name("do_sample"), value=cst.Name("True"), equal=_EQ))
            for key, default in SAMPLE_DEFAULTS:
                value = ub[key].value if key in ub else cst.parse_expression(default)
                args.append(cst.Arg(keyword=cst.Name(key), value=value, equal=_EQ))
            for key in ("eos_token_override", "streamer", "no_repeat_ngram_size"):
                if key in ub:
                    args.append(cst.Arg(keyword=cst.Name(names.get(key, key)), value=ub[key].value, equal=_EQ))
            func = updated.func.with_changes(attr=cst.Name("generate"))  # type: ignore[union-attr]
            return _layout(updated.with_changes(func=func), args, ctx.module, indent, prefix)

        indent, prefix = _indent(ctx), _prefix_len(ctx, call)

        ctx.replace(call, build)
        explicit = [k for k, _ in SAMPLE_DEFAULTS if k not in bound]
        ctx.finding(call, f"{receiver}.sample(...) -> {receiver}.generate(..., do_sample=True)"
                          + (f" with transformers-neuronx's defaults made explicit ({', '.join(explicit)})"
                             if explicit else "")
                          + (", min_length=max_length (its sampler never sampled EOS)" if never_eos else ""))


def _target(ctx: PythonContext, binding) -> cst.BaseExpression:
    """``AutoModelForCausalLM``, imported in place of the old class's import (the engine joins it to a
    ``from transformers import ...`` line above it in the same cell, if any)."""
    return ctx.name_for(TARGET, anchor=binding)


RULES = (TransformersNeuronxSampling,)
