"""Which environment variables only the old stack reads (torch-xla, torch-neuronx's XLA path,
libneuronxla, optimum-neuron): NM512 removes them from scripts, NM521 from Dockerfile ``ENV``
lines, NM515 from launch command prefixes."""

from __future__ import annotations

from codemods.common.inventory import env_vars

#: Environment variables that only the XLA stack (torch-xla, torch-neuronx XLA, libneuronxla) or
#: optimum-neuron itself reads. Value: why it can go (shown in findings).
XLA_ONLY_VARS: dict[str, str] = {
    "XLA_USE_BF16": "XLA-only bf16 switch (phased out since Neuron 2.23); load the model with "
    "dtype=torch.bfloat16 or train with bf16=True instead",
    "XLA_DOWNCAST_BF16": "XLA-only bf16 switch (phased out since Neuron 2.23); load the model with "
    "dtype=torch.bfloat16 or train with bf16=True instead",
    "XLA_USE_32BIT_LONG": "torch-xla setting",
    "XLA_IR_DEBUG": "torch-xla debugging",
    "XLA_HLO_DEBUG": "torch-xla debugging",
    "XLA_FLAGS": "XLA compiler flags",
    "XLA_SAVE_TENSORS_FILE": "torch-xla debugging",
    "XLA_SAVE_TENSORS_FMT": "torch-xla debugging",
    "XLA_SAVE_HLO_FILE": "torch-xla debugging",
    "XLA_METRICS_FILE": "torch-xla debugging",
    "XLA_DUMP_FATAL_STACK": "torch-xla debugging",
    "XLA_SYNC_TENSORS_OPBYOP": "torch-xla debugging",
    "XLA_GET_TENSORS_OPBYOP": "torch-xla debugging",
    "XLA_DISABLE_FUNCTIONALIZATION": "torch-xla setting",
    "XLA_NO_SPECIAL_SCALARS": "torch-xla setting",
    "XLA_IR_SHAPE_CACHE_SIZE": "torch-xla setting",
    "XLA_TRIM_GRAPH_SIZE": "torch-xla setting",
    "XLA_THREAD_POOL_SIZE": "thread pool size of the XLA runtime (torch-xla)",
    "XLA_IO_THREAD_POOL_SIZE": "I/O thread pool size of the XLA runtime (torch-xla)",
    "PT_XLA_DEBUG": "torch-xla debugging",
    "PT_XLA_DEBUG_LEVEL": "torch-xla debugging",
    "PT_XLA_DEBUG_FILE": "torch-xla debugging",
    "PJRT_DEVICE": "torch-xla device selection (the device is now `neuron`)",
    "NEURON_FUSE_SOFTMAX": "XLA lowering option of torch-neuronx",
    "NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS": "legacy async mode of the XLA stack (AWS: remove it)",
    "NEURON_NUM_RECENT_MODELS_TO_KEEP": "graph cache setting of the XLA stack",
    "NEURON_CUSTOM_SILU": "XLA lowering option of torch-neuronx",
    "NEURONCORE_NUM_DEVICES": "torch-xla device count on Neuron (torchrun --nproc-per-node sets it now)",
    "TPU_NUM_DEVICES": "torch-xla device count (torchrun --nproc-per-node sets it now)",
    "TPU_CHIPS_PER_HOST_BOUNDS": "torch-xla PJRT topology setting",
    "OPTIMUM_DISABLE_ARGUMENT_PATCH": "optimum-neuron setting",
    "OPTIMUM_DISABLE_STRICT_MODE": "optimum-neuron setting",
    "DISABLE_TRANSFORMERS_PATCHING": "optimum-neuron setting",
    "CUSTOM_CACHE_REPO": "optimum-neuron compile cache setting",
    "ACCELERATE_USE_AMP": "optimum-neuron setting (set bf16=True in the training arguments instead)",
    "NEURON_PARALLEL_COMPILE_MAX_RETRIES": "neuron_parallel_compile setting (the XLA stack's ahead-of-time compile)",
    "NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE": "neuron_parallel_compile setting (the XLA stack's "
    "ahead-of-time compile)",
}
#: variables of the XLA stack that have a TorchNeuron counterpart a person must choose: kept, with a
#: marker (value: the marker). NEURON_COMPILE_CACHE_URL was the persistent NEFF cache of the XLA stack
#: (a local path or an S3 URL); TorchNeuron keeps its NEFF cache under TORCH_NEURONX_NEFF_CACHE_DIR.
MARKED_VARS: dict[str, str] = {
    "NEURON_COMPILE_CACHE_URL": "Set TORCH_NEURONX_NEFF_CACHE_DIR to keep this NEFF cache: "
                                "NEURON_COMPILE_CACHE_URL was the XLA stack's.",
    "NEURON_PLATFORM_TARGET_OVERRIDE": "Check that TorchNeuron's compiler reads NEURON_PLATFORM_TARGET_OVERRIDE "
                                       "before relying on it to pick the target.",
    # transformers-neuronx's compile cache (NEURONX_CACHE=on: reuse the NEFFs in the NEURONX_DUMP_TO folder)
    **{name: f"Set TORCH_NEURONX_NEFF_CACHE_DIR to keep a compile cache: {name} was transformers-neuronx's."
       for name in ("NEURONX_CACHE", "NEURONX_DUMP_TO")},
    # the optimum-neuron serving container's compile settings (TGI / the SageMaker LLM image on Neuron)
    **dict.fromkeys(("HF_NUM_CORES", "HF_BATCH_SIZE", "HF_SEQUENCE_LENGTH", "HF_AUTO_CAST_TYPE"),
                    "Give these HF_* compile settings to the new server as its options: only optimum-neuron's "
                    "container read them."),
    # Transformers 4's cache settings: Transformers 5 reads none of them (the hub's own settings decide)
    **{name: f"Rename {name} to HF_HUB_CACHE: Transformers 5 ignores it and downloads to the default hub cache."
       for name in ("TRANSFORMERS_CACHE", "PYTORCH_TRANSFORMERS_CACHE", "PYTORCH_PRETRAINED_BERT_CACHE")},
}
#: the long forms of the MARKED_VARS markers (``explain``)
_MARKED_WHY = {
    "NEURON_COMPILE_CACHE_URL": """The XLA stack's persistent NEFF cache (a path or an S3 URL); TorchNeuron's NEFF
     cache directory is TORCH_NEURONX_NEFF_CACHE_DIR, a local directory: the setting is kept for a person to
     choose.""",
    "NEURON_PLATFORM_TARGET_OVERRIDE": """Made the XLA stack (and optimum-neuron's export) compile for another
     instance type (trn1, trn2, inf2) than the host's; whether TorchNeuron's compile path reads it is not
     established, so it is kept.""",
    **dict.fromkeys(("NEURONX_CACHE", "NEURONX_DUMP_TO"), """transformers-neuronx compiled into the
     NEURONX_DUMP_TO folder and, with NEURONX_CACHE=on, reused the NEFFs it found there; TorchNeuron reads
     neither: its compile cache directory is TORCH_NEURONX_NEFF_CACHE_DIR. The setting is kept for a person to
     move or delete."""),
    **dict.fromkeys(("HF_NUM_CORES", "HF_BATCH_SIZE", "HF_SEQUENCE_LENGTH", "HF_AUTO_CAST_TYPE"), """The
     optimum-neuron serving container (Text Generation Inference on Neuron, the SageMaker Hugging Face LLM image
     for Inferentia/Trainium) compiled or loaded the model with these (cores, static batch, sequence length,
     dtype); another server (vLLM on Neuron, a TorchNeuron image) takes them as its own options (tensor
     parallel size, max batch, max model length, dtype) or ignores them."""),
    **dict.fromkeys(("TRANSFORMERS_CACHE", "PYTORCH_TRANSFORMERS_CACHE", "PYTORCH_PRETRAINED_BERT_CACHE"),
                    """Transformers 4 took its download directory from TRANSFORMERS_CACHE (and the older
     PYTORCH_TRANSFORMERS_CACHE / PYTORCH_PRETRAINED_BERT_CACHE); Transformers 5 reads none of them, so the
     models go to the hub's default cache (~/.cache/huggingface/hub), often a small root disk. HF_HUB_CACHE
     names the same directory for huggingface_hub (HF_HOME its parent)."""),
}
#: the XLA-era precision switches: removing them from a launcher changes the precision of the run
BF16_VARS = ("XLA_USE_BF16", "XLA_DOWNCAST_BF16")
#: fp16 switches: the same cause as the bf16 ones, left as they are (no rule carries fp16 to the model yet)
_FP16_VARS = ("XLA_USE_FP16", "XLA_DOWNCAST_FP16")
#: every torch-xla / PJRT variable the old stack's releases and documentation read (the inventory):
#: TorchNeuron does not run torch-xla, so none of them has an effect
for _name in sorted(env_vars("XLA_*", "PT_XLA_*", "PJRT_*", "TPU_*", "NEURON_PJRT_*")):
    if _name not in XLA_ONLY_VARS and _name not in _FP16_VARS:
        XLA_ONLY_VARS[_name] = "torch-xla PJRT setting" if "PJRT" in _name or _name.startswith("TPU_") else \
            "torch-xla setting"


def switched_on(value: str | None) -> bool:
    """Whether a launcher's value of a switch (XLA_USE_BF16, NEURON_EXTRACT_GRAPHS_ONLY) turned it on (set and not 0)."""
    if value is None:
        return False
    value = value.strip("\"'")
    return value not in ("", "0", "false", "False", "no")


def bf16_launcher_message(name: str) -> str:
    """The marker left in a launcher that no longer sets a bf16 switch."""
    del name  # one text for both variables: a launch that set both gets one marker
    return BF16_LAUNCH_MARKER


BF16_LAUNCH_MARKER = "Make the launched script choose bf16 itself (dtype=torch.bfloat16 or bf16=True): the XLA bf16 switches are gone."


def ignored_by_torchneuron(names: list[str]) -> str:
    """``Remove A, B from {where}``'s reason, as the end of the sentence."""
    return f"TorchNeuron ignores {'it' if len(names) == 1 else 'them'}"


#: the long forms of the environment markers (``Rule.markers`` of NM512, NM521)
ENV_MARKERS = (
    (BF16_LAUNCH_MARKER,
     """XLA_USE_BF16/XLA_DOWNCAST_BF16=1 ran this launch in bfloat16 under torch-xla; TorchNeuron ignores them,
     so they were removed. The launched script must choose bf16 itself: dtype=torch.bfloat16 on the model
     load, bf16=True in the training arguments, or torch.autocast("neuron", dtype=torch.bfloat16). Reads of
     the variables in the launched script, where this run migrated it, were set to that value."""),
    ("Remove {names} from {where}: TorchNeuron ignores {it}.",
     """These environment variables are read only by the old stack (torch-xla, torch-neuronx's XLA path,
     libneuronxla, optimum-neuron); TorchNeuron ignores them. The report's detail says what each one did;
     the line is not edited automatically (a value built at run time, or an edit another rule made there)."""),
    *((message, _MARKED_WHY[name]) for name, message in MARKED_VARS.items()),
)
#: every variable with this prefix belongs to optimum-neuron
XLA_ONLY_PREFIXES = ("OPTIMUM_NEURON_",)


def xla_only_reason(name: str) -> str | None:
    if name in XLA_ONLY_VARS:
        return XLA_ONLY_VARS[name]
    if name.startswith(XLA_ONLY_PREFIXES):
        return "optimum-neuron setting"
    return None


def mark_bf16_launch(plan, ctx, rule: str, group: int, name: str) -> None:
    """The marker of :func:`bf16_launcher_message` above ``group`` of a shell or Dockerfile plan.
    Written next to the other rules' markers of that line, not instead of them (the plans keep one
    marker per line: this one must not hide what another rule asks there)."""
    if plan.silenced(rule, group):
        return
    ctx.marker(plan.group_range(group)[0] + plan.offset, bf16_launcher_message(name))
