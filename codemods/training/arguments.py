"""NM201 / NM202 / NM203: the arguments of optimum-neuron's training classes.

The rename table (NM200) renames ``NeuronTrainingArguments`` -> ``TrainingArguments``,
``NeuronTrainer`` -> ``Trainer``, ``NeuronSFTConfig``/``NeuronSFTTrainer`` -> TRL's classes. These
rules own those names and rewrite their CALLS (source facts: shared/reference/source-apis.md §2):

* NM201 ``NeuronTrainingArguments(...)`` (and the Seq2Seq / Trainium spellings): every Neuron-only
  field is dropped (silently when it is compiler/cache plumbing, with a marker when behaviour
  changes), mapped (``use_autocast``/``half_precision_backend`` -> ``bf16``), or moved (parallel
  sizes go to the load of the model handed to the trainer as ``distributed_config=``, followed
  through variables and module functions, with ``save_only_model=True`` on the arguments; NM301
  does it inside lazy_load_for_parallelism); the transformers v5 renames (``warmup_ratio`` ->
  ``warmup_steps``, ``gradient_checkpointing`` -> ``activation_checkpointing``, no
  ``overwrite_output_dir`` / ``logging_dir``); and the static-shape settings Neuron wants
  (``torch_compile=True``, ``dataloader_drop_last=True``).
* NM202 trainer calls: ``tokenizer=`` -> ``processing_class=``; TRL-of-the-day SFT kwargs flagged.
* NM203 ``NeuronSFTConfig(...)``: NM201's field handling plus ``max_seq_length`` -> ``max_length``,
  ``packing_strategy="wrapped"`` with packing, ``model_init_kwargs["device_map"] = None`` when the
  trainer loads the model from a string, and the ``NeuronSFTConfig(**args.to_dict())`` idiom.
"""

from __future__ import annotations

import re
from typing import Callable

import libcst as cst

from codemods.common.arg_plan import (
    MAX_LINE,
    NOT_LITERAL,
    SAVE_ONLY_MODEL,
    ArgPlan,
    apply_plan,
    fsdp_size_code,
    has_star_kwargs,
    keywords,
    line_prefix,
    literal,
    quote_of,
    save_only_model_code,
    statement_indent,
    tokenizer_to_processing_class,
)
from codemods.training.layouts import (
    _code,
    _is_model_id,
    _is_to_dict,
    _Layout,
    _move_layouts,
    parsed_layout,
    passed_on,
    SHARDED_MARKERS,
    _save_only_model,
    _track,
    _track_assign,
    _track_call,
    _track_parsed,
    _tracking_handlers,
)
from codemods.training.lora import LORA_MARKERS, fsdp_instead, lora_advice, lora_blocks_tp, lora_marker, tensor_parallel
from codemods.training.spread import Spread, register, spread_of
from codemods.training.spread import dict_add as _dict_add
from codemods.training.mesh import (
    pipeline_marker,
    LAYOUT_MARKERS,
    config_code,
    describe,
    env_size,
    launch_advice,
    launch_detail,
    layout_text,
    model_factors,
    sentence,
    whole_mesh,
)
from codemods.training.sources import (
    ARGS_SOURCES,
    DISTRIBUTED_CONFIG,
    SFT_CONFIG_SOURCES,
    SFT_TRAINER_SOURCES,
    TRAINER_SOURCES,
)
from migrator.model import fitted
from migrator.rules import NameClash, PythonContext, PythonRule


# ---------------------------------------------------------------------------------------------
# Field policy (source-apis.md §2)
# ---------------------------------------------------------------------------------------------

#: compiler, cache, checkpoint-format and metrics plumbing: no native meaning, dropped without a marker
PLUMBING = (
    "skip_cache_push", "neuron_cc_optlevel", "neuron_cc_flags_model_type", "use_xser", "num_local_ranks_per_step",
    "num_ranks_per_loading_step", "fuse_qkv", "recompute_causal_mask", "optimizer_use_master_weights",
    "optimizer_use_fp32_grad_acc", "optimizer_save_master_weights_in_ckpt", "dataloader_prefetch_size",
    "enable_throughput_metrics", "enable_mfu_metrics", "enable_efficiency_metrics", "metrics_window_size",
    "overwrite_output_dir",
)

_SP = ("sequence parallelism (on by default with tensor_parallel_size > 1 in optimum-neuron) has no native "
       "equivalent yet (DistributedConfig.enable_sequence_parallel is not wired up): activations are no longer "
       "sharded along the sequence, expect more memory per core")

#: dropped with a marker, unless the value is one whose old behaviour is what native code does:
#: name -> (those values, what to do now (the marker, ``{value}``/``{flag}`` filled in), why (its detail))
BEHAVIOUR = {
    "async_save": ((False,), "Expect synchronous checkpoint saves", "the native Trainer has no async save"),
    "kv_size_multiplier": ((None,), "Use a tp_size that divides the model's num_key_value_heads",
                           "KV heads are no longer replicated over tensor-parallel ranks"),
    "disable_sequence_parallel": ((True,), "Expect more memory per core without sequence parallelism", _SP),
    "sequence_parallel_enabled": ((False,), "Expect more memory per core without sequence parallelism", _SP),
    "disable_embedding_parallelization": (
        (False,), "Pass DistributedConfig(tp_plan={{...}}) to keep the embeddings whole",
        "the embeddings and LM head are sharded as the model's tensor-parallel plan says"),
    "pipeline_parallel_num_microbatches": ((-1, 1), "Expect no pipeline micro-batches",
                                           "DistributedConfig has no pipeline micro-batch setting"),
    "stochastic_rounding_enabled": (
        (), "Set NEURON_RT_STOCHASTIC_ROUNDING_EN={flag} in the launch if the run needs it",
        "optimum-neuron set NEURON_RT_STOCHASTIC_ROUNDING_EN from it (default on); its effect under TorchNeuron is "
        "not verified"),
    "logging_dir": ((), "Export TENSORBOARD_LOGGING_DIR={value} instead",
                    "transformers v5 has no logging_dir; its TensorBoard callback reads the directory from the "
                    "environment"),
}

ZERO_1_DEFAULT = ("zero_1 defaulted to True in optimum-neuron 0.4 and to False before: a script that did not set it "
                  "sharded the optimizer state only under 0.4")
ZERO_1_MAPPED = (
    "zero_1=True became fsdp_size=WORLD_SIZE // tp_size in the model's DistributedConfig (1, no sharding, when every "
    "process is a tensor-parallel rank): FSDP2 shards parameters and gradients as well as the optimizer state that "
    "ZeRO-1 sharded (less memory per core, more communication per step)"
)
ZERO_1_UNKNOWN = ("If {name}={value} is true, load the model with DistributedConfig(fsdp_size=WORLD_SIZE // tp_size) "
                  "instead.")
BF16_WHOLE = "Load the model with dtype=torch.bfloat16 to keep the old bf16 training: bf16=True is autocast now."
BF16_MAYBE = "If {value} is true, load the model with dtype=torch.bfloat16 to keep the old bf16 training."
BF16_MAYBE_SHORT = "If bf16 is true here, load the model with dtype=torch.bfloat16 to keep the old bf16 training."
BF16_PARSED = "If the launch or config sets bf16, load the model with dtype=torch.bfloat16: bf16 is autocast now."
#: the argument parsers whose dataclasses take their bf16 from the command line or a JSON/YAML file
PARSERS = ("transformers.HfArgumentParser", "transformers.hf_argparser.HfArgumentParser", "trl.TrlParser")
REPORT_TO_MARKER = "Set report_to=\"all\" unless **kwargs does: Transformers 5 no longer logs to TensorBoard/W&B by default."
#: the unit logs to an integration that Transformers 4.x's default report_to="all" fed
_LOGS_TO = re.compile(r"tensorboard|TENSORBOARD|SummaryWriter|\bwandb\b|WANDB_|mlflow|MLFLOW_")
STATIC_MARKER = "Set {fields} unless **kwargs does: Neuron needs static shapes."
#: NM201's markers and their long forms
ARGUMENT_MARKERS = (
    ("{what to do}: {name}={value} was dropped.",
     """optimum-neuron's training arguments had fields the native TrainingArguments does not: the field was
     dropped and the marker says what replaces its effect; the finding's detail says what it did."""),
    (ZERO_1_UNKNOWN,
     f"""ZeRO-1 sharded the optimizer state over the data-parallel ranks; natively that is FSDP2, which also
     shards parameters and gradients (less memory per core, more communication per step). Data-parallel
     replicas (dp_replicate_size) keep the whole optimizer state. {ZERO_1_DEFAULT}."""),
    (BF16_WHOLE,
     """bf16=True without use_autocast=True made optimum-neuron train the whole model in bf16; natively bf16=True
     is autocast mixed precision over fp32 weights (more memory, other numerics): a bf16 load keeps the old
     footprint."""),
    ("Set warmup_steps to the warmup you want: transformers v5 dropped warmup_ratio={value}.",
     """transformers v5 removed warmup_ratio; warmup_steps takes a ratio when it is < 1. Both were given, so
     the rule cannot tell which one the run should keep."""),
    (BF16_MAYBE,
     """bf16 comes from a value the rule cannot read: where it is true, optimum-neuron trained the whole model in
     bf16 (without use_autocast=True) and natively bf16=True is autocast over fp32 weights."""),
    (BF16_PARSED,
     """The training arguments are parsed from the command line or a JSON/YAML file (`--bf16 True`,
     `"bf16": true`): where bf16 is on, optimum-neuron trained the whole model in bf16 and natively it is
     autocast over fp32 weights."""),
    (STATIC_MARKER,
     """On Neuron the Trainer should compile the model (torch_compile=True) and keep every batch the same
     shape (dataloader_drop_last=True), or each new shape is a new compilation; the call passes **kwargs,
     which may set them already."""),
    ("Remove or move {key}, set on the dict after it is built: {cls} no longer takes it.",
     """The dict unpacked into the call gets the old field after the literal the rule edits; see
     `neuron-migrate explain NM201` for where each old field goes."""),
    ("Load the model with distributed_config=DistributedConfig({layout}): the arguments no longer carry the sizes.",
     """The parallel sizes were removed from the training arguments: the layout is set where the model is
     loaded (NM301 does it for loads inside lazy_load_for_parallelism), and the launch must start processes
     that fit it."""),
    ("If launched with parallel sizes, load the model with DistributedConfig({layout}) and set save_only_model=True.",
     """The parsed training arguments no longer carry tensor_parallel_size / pipeline_parallel_size: the load
     of the trained model takes the layout (TP_SIZE and FSDP_SIZE set in the launch environment), and the
     Trainer needs save_only_model=True for a model sharded at load time."""),
) + LORA_MARKERS + SHARDED_MARKERS + LAYOUT_MARKERS

PARALLEL_SIZES = {"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size"}
#: transformers v5 deprecations of fields the old classes used
V5_RENAMES = {
    "gradient_checkpointing": "activation_checkpointing",
    "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs",
}
#: static shapes on Neuron: every new shape is a new compilation
STATIC_SHAPES = (("torch_compile", "True"), ("dataloader_drop_last", "True"))
MIXED_PRECISION = ("use_autocast", "half_precision_backend")

#: ≤0.3 NeuronSFTTrainer keyword arguments that TRL 1.16 takes in SFTConfig
SFT_TRAINER_CONFIG_KWARGS = ("dataset_text_field", "max_seq_length", "packing", "dataset_kwargs", "dataset_num_proc",
                             "dataset_batch_size", "num_of_sequences", "chars_per_token", "neftune_noise_alpha")

#: a model argument that names a checkpoint rather than holding a model object




def _class_name(ctx: PythonContext, call: cst.Call) -> str:
    return (ctx.qualname(call.func) or "").rsplit(".", 1)[-1]


def parser_bf16(call: cst.Call, ctx: PythonContext, sources) -> None:
    """``HfArgumentParser((ModelArguments, NeuronTrainingArguments))``: bf16 comes from the launch line or a
    config file, where the old stack's bf16 trained the whole model in bf16: a marker."""
    if not call.args or call.args[0].keyword is not None or call.args[0].star:
        return
    first = call.args[0].value
    items = [e.value for e in first.elements] if isinstance(first, (cst.Tuple, cst.List)) else [first]
    if any(ctx.class_qualname(item) in sources for item in items if isinstance(item, (cst.Name, cst.Attribute))):
        ctx.marker(call, BF16_PARSED)


def _known_literal(expr: cst.BaseExpression, ctx: PythonContext):
    """The literal value of ``expr``, or of a name assigned once from a literal in this function (or at module level,
    when the function does not bind it); NOT_LITERAL otherwise."""
    value = literal(expr)
    if value is not NOT_LITERAL or not isinstance(expr, cst.Name):
        return value
    assigns = _track(ctx)["assigns"]
    scope = ctx.scope_id
    values = assigns.get((scope, expr.value))
    if values is None and scope != 0 and not ctx.bound_locally(expr.value, ctx.stack):
        values = assigns.get((0, expr.value))
    if values and len(values) == 1 and values[0] is not None:
        return literal(values[0])
    return NOT_LITERAL


def _plan_fields(call: cst.Call | cst.Dict, ctx: PythonContext, plan: ArgPlan, static: bool = True,
                 cls: str | None = None, kw: dict | None = None, present=()) -> dict[str, cst.BaseExpression]:
    """NM201's field handling (also used by NM203): fill ``plan``, report findings and markers.
    Returns the parallel sizes other than 1 (DistributedConfig field -> expression). ``call`` may be
    the dict literal unpacked into the call (spread.py: ``kw`` its entries, ``present`` the keys the
    call or later assignments give)."""
    kw = keywords(call) if kw is None else kw
    sizes: dict[str, cst.BaseExpression] = {}
    cls = cls or _class_name(ctx, call)
    val = {k: literal(a.value) for k, a in kw.items()}

    for name in PLUMBING:
        if name in kw:
            plan.drop.add(name)
            what = "removed in transformers v5" if name == "overwrite_output_dir" else "no native equivalent"
            ctx.finding(kw[name], f"{cls}: dropped {name} ({what})")

    for name, (same, *message) in BEHAVIOUR.items():
        if name not in kw:
            continue
        plan.drop.add(name)
        if val[name] is not NOT_LITERAL and val[name] in same:
            ctx.finding(kw[name], f"{cls}: dropped {name}={_code(ctx, kw[name].value)} (native behaviour is the same)")
            continue
        flag = "0" if val[name] is False else "1"
        action, why = message
        code = _code(ctx, kw[name].value)
        action = action.format(value=code, flag=flag)
        ctx.marker(call, fitted(f"{action}: {name}={code} was dropped.", f"{action}: {name} was dropped."), detail=why)

    # zero_1: ZeRO-1 over data-parallel ranks; closest native is FSDP2 on the model load (the layout of a
    # Trainer has no pipeline stages, see below: the processes they took are data-parallel ranks)
    zero_1 = False
    if "zero_1" in kw:
        plan.drop.add("zero_1")
        code = _code(ctx, kw["zero_1"].value)
        if val["zero_1"] is False:
            ctx.finding(kw["zero_1"], f"{cls}: dropped zero_1=False (data-parallel replicas natively: "
                                      "dp_replicate_size beside the model-parallel sizes)")
        elif val["zero_1"] is True:
            zero_1 = True
            ctx.finding(kw["zero_1"], f"{cls}: {ZERO_1_MAPPED}")
        else:
            ctx.marker(call, ZERO_1_UNKNOWN.format(name="zero_1", value=code))

    # tensor parallel sizes move to the model load; pipeline stages do not: the Trainer cannot train them
    for name, native in PARALLEL_SIZES.items():
        if name not in kw:
            continue
        plan.drop.add(name)
        if val[name] == 1:
            ctx.finding(kw[name], f"{cls}: dropped {name}=1 (no sharding)")
            continue
        if native == "pp_size":
            known = _known_literal(kw[name].value, ctx)
            if known == 1:
                ctx.finding(kw[name], f"{cls}: dropped {name}={_code(ctx, kw[name].value)} (1: no pipeline stages)")
            else:
                ctx.marker(call, pipeline_marker(_code(ctx, kw[name].value), isinstance(known, int)))
            continue
        sizes[native] = kw[name].value  # the caller says where they go (it knows more in finish())
    if zero_1:
        sizes["fsdp_size"] = cst.parse_expression(fsdp_size_code("os.environ", sizes.get("tp_size"), _quote(call)))

    # mixed precision: use_autocast / half_precision_backend
    amp = val.get("use_autocast") is True or val.get("half_precision_backend") == "amp"
    for name in MIXED_PRECISION:
        if name in kw:
            plan.drop.add(name)
            ctx.finding(kw[name], f"{cls}: dropped {name} (bf16=True is autocast mixed precision natively)")
    if val.get("bf16") is True and not amp:
        ctx.marker(call, BF16_WHOLE)
    elif "bf16" in kw and not amp and _known_literal(kw["bf16"].value, ctx) is NOT_LITERAL:
        # bf16=args.bf16: the old stack trained the whole model in bf16 whenever the value is true
        ctx.marker(call, fitted(BF16_MAYBE.format(value=_code(ctx, kw["bf16"].value)), BF16_MAYBE_SHORT))

    # transformers v5 renames
    if "warmup_ratio" in kw:
        if "warmup_steps" in kw:
            plan.drop.add("warmup_ratio")
            ctx.marker(call, f"Set warmup_steps to the warmup you want: transformers v5 dropped "
                             f"warmup_ratio={_code(ctx, kw['warmup_ratio'].value)}.")
        else:
            plan.rename["warmup_ratio"] = "warmup_steps"
            ctx.finding(kw["warmup_ratio"], f"{cls}: warmup_ratio -> warmup_steps (a value < 1 is a ratio in v5)")
    for old, new in V5_RENAMES.items():
        if old in kw:
            if new in kw:
                plan.drop.add(old)
            else:
                plan.rename[old] = new
            ctx.finding(kw[old], f"{cls}: {old} -> {new} (deprecated in transformers v5)")

    # report_to: "all" (every installed integration) by default in Transformers 4.x, "none" in 5.x
    if "report_to" not in kw and "report_to" not in present and _LOGS_TO.search(ctx.code):
        if isinstance(call, cst.Call) and has_star_kwargs(call):
            ctx.marker(call, REPORT_TO_MARKER)
        elif static:
            q = _quote(call)
            plan.add.append(("report_to", lambda: cst.SimpleString(f"{q}all{q}")))
            ctx.finding(call, f"{cls}: added report_to=\"all\" (the 4.x default; 5.x reports to nothing)")

    # static shapes
    missing = [(k, v) for k, v in STATIC_SHAPES if k not in kw and k not in present] if static else []
    if missing and isinstance(call, cst.Call) and has_star_kwargs(call):
        ctx.marker(call, STATIC_MARKER.format(fields=" and ".join(f"{k}={v}" for k, v in missing)))
    elif missing:
        for k, v in missing:
            plan.add.append((k, (lambda v=v: cst.Name(v))))
        ctx.finding(call, f"{cls}: added {', '.join(f'{k}={v}' for k, v in missing)} (static shapes on Neuron)")
    return sizes


def _quote(node: cst.Call | cst.Dict) -> str:
    if isinstance(node, cst.Dict):
        return "'" if any(isinstance(e.key, cst.SimpleString) and e.key.quote.startswith("'")
                          for e in node.elements if isinstance(e, cst.DictElement)) else '"'
    return quote_of(node)


#: fields the old classes took and the native ones reject (a later ``settings[key] = ...`` of one is flagged)
_OLD_FIELDS = frozenset((*PLUMBING, *BEHAVIOUR, *PARALLEL_SIZES, *MIXED_PRECISION, "zero_1", "max_seq_length",
                         "padding_free", *V5_RENAMES, "warmup_ratio"))


def _spread_fields(ctx: PythonContext, call: cst.Call, spread: Spread, cls: str,
                   extra: tuple = ()) -> dict:
    """The fields of the dict literal unpacked into ``call`` (``**settings``): edited in the literal.
    ``extra``: the class's own field handling before and after NM201's (``f(node, kw, plan, present)``)."""
    if spread.registered:
        return {}  # the same dict unpacked into another call: edited once
    present = (set(keywords(call)) | spread.keys()) - set(spread.kw)
    before, after = extra or (None, None)
    if before is not None:
        before(spread.node, spread.kw, spread.plan, present)
    sizes = _plan_fields(spread.node, ctx, spread.plan, cls=cls, kw=spread.kw, present=present)
    if after is not None:
        after(spread.node, spread.kw, spread.plan, present)
    for key in sorted(k for k in spread.later if k in _OLD_FIELDS):
        ctx.marker(call, f"Remove or move {spread.name}[{key!r}], set on the dict after it is built: {cls} no longer "
                         "takes it.")
    register(spread, ctx)
    if spread.plan.empty() and not sizes:
        return sizes
    ctx.finding(call, f"{cls}: the fields of {spread.name} (unpacked with **) are edited where the dict is built")
    return sizes


def _rewrite(ctx: PythonContext, call: cst.Call, plan: ArgPlan, always: bool = False) -> None:
    if plan.empty() and not always:
        return
    state = ctx.local_state().setdefault("rewritten", set())
    if id(call) in state:
        return
    state.add(id(call))
    indent = statement_indent(ctx)
    prefix = " " * line_prefix(ctx, call)
    step = ctx.module.default_indent
    ctx.replace(call, lambda new: new if plan.empty() else apply_plan(new, plan, MAX_LINE, indent + prefix, step))


def _record_config_name(call: cst.Call, ctx: PythonContext) -> None:
    """``name = NeuronSFTConfig(...)``: remember which config call a name holds (None: several)."""
    parent = ctx.parent
    if isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1 \
            and isinstance(parent.targets[0].target, cst.Name):
        names = ctx.local_state().setdefault("config_names", {})
        name = parent.targets[0].target.value
        names[name] = None if name in names else call


def _parsed_entries(ctx: PythonContext, parsed, skip=(), fixed=()) -> list[_Layout]:
    """The arguments parsed from the command line (``name = parser.parse_...()``) as layouts whose
    sizes are the launch environment's (TP_SIZE, FSDP_SIZE): the trainers given them get their model
    loaded with that layout (NM515 turns the launch flags into those variables). ``skip``: (scope,
    name) whose trn_config is read (NM303 places the layout there); ``fixed``: names handled already.
    None in a file that places the layout itself (lazy_load_for_parallelism, trn_config)."""
    if "lazy_load_for_parallelism" in ctx.source or "trn_config" in ctx.source:
        return []  # the layout goes where the script placed it (NM301, NM303)
    out = []
    for name, statement, scope, call in parsed:
        if (scope, name) in skip or name in fixed:
            continue
        layout = describe(parsed_layout("os.environ"))
        out.append(_Layout(call, {}, (scope, name), statement, ArgPlan(), layout, parsed=True))
        # passed on to a module function under the same name (`training_function(script_args, training_args)`):
        # its trainer gets them there
        for function in passed_on(ctx, name, scope):
            out.append(_Layout(call, {}, (function, name), statement, ArgPlan(), layout, parsed=True, passed=True))
    return out


def _args_name(trainer: cst.Call) -> str | None:
    args = keywords(trainer).get("args")
    return args.value.value if args is not None and isinstance(args.value, cst.Name) else None


#: NeuronSFTConfig fields only TRL 0.11.4 (optimum-neuron <= 0.4.1) had: its packing cut fixed-length blocks
#: from the concatenated examples (ConstantLengthDataset), TRL 1.16's packing_strategy="wrapped"
TRL_011_FIELDS = frozenset({"max_seq_length", "dataset_batch_size", "num_of_sequences", "chars_per_token"})
#: fields only TRL 0.24 (optimum-neuron >= 0.4.2) had: it packed with "bfd", TRL 1.16's default
TRL_024_FIELDS = frozenset({"max_length", "completion_only_loss", "assistant_only_loss", "padding_free",
                            "activation_offloading"})
PACKING_UNDECIDED = ("Add packing_strategy=\"wrapped\" if this ran on optimum-neuron <= 0.4.1: TRL 1.16 packs with "
                     "\"bfd\".")
DEVICE_MAP_MARKER = "Set model_init_kwargs = {{..., \"device_map\": None}} on {config}: the trainer loads on device_map=\"auto\"."
#: NM203's markers and their long forms
CONFIG_MARKERS = (
    (PACKING_UNDECIDED,
     """optimum-neuron <= 0.4.1 shipped TRL 0.11, whose packing cut fixed-length blocks from the concatenated
     examples (TRL 1.16: packing_strategy="wrapped"); >= 0.4.2 shipped TRL 0.24, which packed with "bfd",
     TRL 1.16's default. The config's fields do not say which one the project ran."""),
    ("Set model_init_kwargs = {..., \"device_map\": None} on {config}: the trainer loads on device_map=\"auto\".",
     """Given a model id, the trainer loads the model itself with device_map="auto" unless model_init_kwargs
     says otherwise, and on neuron that spreads it over devices the run did not ask for; add
     "distributed_config": DistributedConfig(...) there to shard it."""),
    ("{launch}: model_init_kwargs shards the model now.",
     """The parallel sizes moved from the config to model_init_kwargs (a DistributedConfig): the trainer
     shards the model it loads, and the launch must start processes that fit the layout."""),
    ("Copy the fields {name}.to_dict() passes explicitly, or parse SFTConfig directly.",
     """training_args.to_dict() copies every TrainingArguments field into SFTConfig, including ones SFTConfig
     sets differently; parsing SFTConfig directly (HfArgumentParser((..., SFTConfig)) or trl.TrlParser) gives
     its own defaults."""),
    ("Add distributed_config=DistributedConfig(...) to model_init_kwargs by hand.",
     """The rule could not import DistributedConfig here without a name clash (the detail says which)."""),
) + ARGUMENT_MARKERS


def _parsed_marker(entry: _Layout, reason: str) -> str:
    del reason  # the finding's detail
    return fitted(f"If launched with parallel sizes, load the model with DistributedConfig({entry.layout}) and set "
                  "save_only_model=True.",
                  "If launched with parallel sizes, load the model with a DistributedConfig and set save_only_model=True.")


def _load_marker(layout: str) -> str:
    """The marker where the sizes left the arguments and the load of the model could not take them."""
    return fitted(f"Load the model with distributed_config=DistributedConfig({layout}): the arguments no longer carry "
                  "the sizes.",
                  "Load the model with a DistributedConfig (see the report): the arguments no longer carry the sizes.")


def _movable_config(trainer: cst.Call, moved: list[str], names: dict) -> cst.Call | None:
    """The config call that the ≤0.3 SFTTrainer options can move into: ``args=<name>`` where the
    name holds one NeuronSFTConfig(...) call without **kwargs nor any of those options."""
    args = keywords(trainer).get("args")
    if args is None or not isinstance(args.value, cst.Name):
        return None
    config = names.get(args.value.value)
    if config is None or has_star_kwargs(config):
        return None
    have = set(keywords(config))
    for k in moved:
        if k in have or (k == "max_seq_length" and "max_length" in have):
            return None
    return config


class TrainingArgumentsFields(PythonRule):
    id = "NM201"
    markers = ARGUMENT_MARKERS
    title = (
        "NeuronTrainingArguments fields -> TrainingArguments (Neuron-only fields dropped, mapped or moved; v5 renames; "
        "static shapes)"
    )
    fix = "mixed"
    triggers = ("NeuronTrainingArguments", "TrainiumTrainingArguments")
    owns = ARGS_SOURCES
    why = """
        NeuronTrainingArguments carried Neuron-only fields (parallel sizes, ZeRO-1, compiler and
        cache plumbing, metrics, XLA mixed precision) that transformers.TrainingArguments rejects.
        Compiler/cache plumbing (skip_cache_push, neuron_cc_optlevel, use_xser, fuse_qkv, the
        metrics switches...) is dropped; fields whose behaviour has no native equal (async_save,
        kv_size_multiplier, sequence parallelism, stochastic rounding, logging_dir) are dropped
        with a marker; zero_1=True becomes fsdp_size=WORLD_SIZE // tp_size next to the tensor
        parallel size (FSDP2, which shards more than ZeRO-1: a marker says so and explains the
        default flip of zero_1 between optimum-neuron versions); use_autocast /
        half_precision_backend map onto bf16;
        tensor/pipeline parallel sizes move to the load of the model the trainer gets
        (from_pretrained(distributed_config=DistributedConfig(tp_size=..., pp_size=...)), in the
        same function or in a module function that returns the load), and the arguments get
        save_only_model=True (the Trainer refuses a model sharded at load time without it), or
        `save_only_model=<tp * pp * fsdp> > 1` when a size is not a literal (with every size 1
        the model is not sharded and its checkpoints still resume). In
        transformers 5.23 the sizes must multiply to the world size: the processes optimum-neuron
        made data-parallel ranks become `dp_replicate_size=WORLD_SIZE // tp_size` (replicas, as
        before) unless zero_1 made them `fsdp_size`; pipeline stages combine with neither, so
        their marker says to launch exactly tp_size x pp_size processes. Arguments parsed from
        the command line (HfArgumentParser) no longer carry the sizes: the model they train is
        loaded with the launch layout, TP_SIZE and FSDP_SIZE from the environment (what NM515
        writes in the launch scripts), also where the parsed arguments are passed to the module
        function that trains (`training_function(script_args, training_args)`, same name). The
        transformers v5 renames are applied (warmup_ratio -> warmup_steps, gradient_checkpointing
        -> activation_checkpointing, overwrite_output_dir removed) and, since every new shape is
        a new compilation on Neuron, torch_compile=True and dataloader_drop_last=True are added.
    """
    before = """
        from optimum.neuron import NeuronTrainingArguments

        args = NeuronTrainingArguments(output_dir="out", bf16=True, use_autocast=True, zero_1=False, skip_cache_push=True)
    """
    after = """
        from transformers import TrainingArguments

        args = TrainingArguments(output_dir="out", bf16=True, torch_compile=True, dataloader_drop_last=True)
    """
    caveats = """
        `report_to` defaulted to "all" (every installed integration) in Transformers 4.x and is "none" in 5.x:
        where the unit logs to TensorBoard/W&B/MLflow and the call does not set it, `report_to="all"` is
        added (a marker when `**kwargs` may set it). `bf16` from a value the rule cannot read
        (`bf16=args.bf16`) or from a parser (`HfArgumentParser`, `--bf16 True`, a JSON/YAML config) gets
        the bf16 marker as a literal `bf16=True` does.
        Constructor calls are rewritten here; for arguments parsed from the command line the
        flags are the shell rules' business (NM515), the model load gets the launch layout
        (NM203 does the same for a parsed SFT config; NM207 handles `dataclasses.replace` and
        `mp_plugin`/`trn_config` reads). A parsed layout whose sizes are all 1 builds no mesh
        (the Trainer's own data parallelism, resumable), so its data-parallel replicas are
        written `... if TP_SIZE * FSDP_SIZE > 1 else 1`; in a file that uses
        lazy_load_for_parallelism or trn_config the layout goes there (NM301, NM303).
        `WORLD_SIZE // tp_size` is 0 in a run without torchrun and DistributedConfig then
        refuses the size: a tensor-parallel script needs torchrun anyway. zero_1 maps onto
        fsdp_size only when it is literally True and there is no pipeline parallelism (FSDP
        and PP do not combine natively). The layout is added to a load only when the arguments
        (the call, or a name bound once to it) are passed as args= to a trainer of the same
        function whose model is the load itself or a
        name assigned once there from `<transformers class>.from_pretrained(...)`, or from a call
        of a module-level function that returns such a load (directly or through one local name)
        and is called nowhere else; sizes other than literals only in the same function. A load
        with device_map, distributed_config or **kwargs, a from_config, a helper shared by
        callers with different layouts, or a model the rule cannot follow keeps the marker (with
        the reason); loads inside lazy_load_for_parallelism are NM301's, and trn_config reads
        NM303's. An absent zero_1 is not flagged (its default was True in 0.4 and False before).
        Arguments unpacked from a dict (`TrainingArguments(**settings)`) are handled in the dict
        literal when it is visible: a name bound once in the same function, before the call, to
        `dict(key=...)` or `{"key": ...}`; keys set on it afterwards (`settings["key"] = ...`,
        `settings.update(key=...)`) count as given, and an old field set that way gets a marker.
        Other **kwargs are not seen (a marker asks for torch_compile and save_only_model).
    """

    def handlers(self):
        return {cst.Call: self._on_call, cst.Attribute: self._on_attribute, **_tracking_handlers(),
                cst.Assign: self._on_assign}

    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        _track_assign(node, ctx)
        _track_parsed(node, ctx, ARGS_SOURCES)

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        qual = ctx.qualname(node.func)
        _track_call(node, qual, ctx)
        if qual in PARSERS:
            parser_bf16(node, ctx, ARGS_SOURCES)
        if qual not in ARGS_SOURCES:
            return
        plan = ArgPlan()
        spread = spread_of(node, ctx)
        sizes = _plan_fields(node, ctx, plan, static=spread is None)
        if spread is not None:
            sizes = {**_spread_fields(ctx, node, spread, _class_name(ctx, node)), **sizes}
        _rewrite(ctx, node, plan, always=bool(sizes))  # finish() may add save_only_model=True
        if sizes:
            target = None
            parent = ctx.parent
            if isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name):
                target = (ctx.scope_id, parent.targets[0].target.value)
            ctx.local_state().setdefault("sizes", []).append((node, sizes, target, ctx.statement(), plan, spread))

    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        if node.attr.value == "trn_config" and isinstance(node.value, cst.Name):
            reads = ctx.local_state().setdefault("trn_reads", set())
            reads.add((ctx.scope_id, node.value.value))
            if not ctx.bound_locally(node.value.value, ctx.stack):  # module-level arguments read in a function
                reads.add((0, node.value.value))

    def finish(self, ctx: PythonContext) -> None:
        state = ctx.local_state()
        pending = []
        for call, sizes, target, statement, plan, spread in state.get("sizes", ()):
            layout = describe(whole_mesh(sizes, "os.environ", quote_of(call)))
            if target is not None and target in state.get("trn_reads", ()):
                ctx.finding(statement, f"the parallel sizes move to the model load: DistributedConfig({layout}) "
                                       "(NM303, where trn_config is read)")
                _save_only_model(ctx, _Layout(call, sizes, target, statement, plan, layout, spread=spread))
                continue
            pending.append(_Layout(call, sizes, target, statement, plan, layout, spread=spread))
        parsed = _parsed_entries(ctx, state.get("parsed", ()), state.get("trn_reads", ()))
        for entry, reason in _move_layouts(ctx, pending + parsed, "training arguments"):
            if entry.parsed:
                if reason is not None:
                    ctx.marker(entry.statement, _parsed_marker(entry, reason), detail=reason)
                continue
            lora = lora_blocks_tp(ctx) if tensor_parallel(entry.sizes) else None
            if lora:
                ctx.marker(entry.statement, lora_advice(lora), detail=lora)
                continue
            mesh = whole_mesh(entry.sizes, "os.environ")
            ctx.marker(entry.statement, _load_marker(entry.layout), detail=(
                f"the parallel sizes were removed from the training arguments: shard the model where it is loaded "
                f"with from_pretrained(..., distributed_config=DistributedConfig({entry.layout})) (NM301 does it for "
                f"loads inside lazy_load_for_parallelism) and {launch_advice(mesh)}: {launch_detail(mesh)}"
                + (f" ({reason})" if reason else "")))


class TrainerArguments(PythonRule):
    id = "NM202"
    markers = (("Move {fields} to the SFTConfig: SFTTrainer no longer takes them.", """TRL 1.x takes these options from the
        SFTConfig given as args=, not from SFTTrainer; the rule could not find that config here."""),)
    title = (
        "NeuronTrainer / NeuronSFTTrainer calls: tokenizer= -> processing_class=; SFT dataset options moved to "
        "SFTConfig"
    )
    fix = "mixed"
    triggers = ("NeuronTrainer", "TrainiumTrainer", "NeuronSFTTrainer")
    owns = TRAINER_SOURCES + SFT_TRAINER_SOURCES
    why = """
        The native Trainer and TRL's SFTTrainer take the tokenizer as `processing_class=`; the
        `tokenizer=` keyword the optimum-neuron trainers accepted is gone in transformers v5.
        optimum-neuron ≤ 0.3's NeuronSFTTrainer also took the TRL-of-the-day dataset options
        (`max_seq_length`, `packing`, `dataset_text_field`...), which TRL 1.16 reads from SFTConfig.
    """
    before = """
        from optimum.neuron import NeuronTrainer

        trainer = NeuronTrainer(model=model, args=args, train_dataset=ds, tokenizer=tokenizer)
    """
    after = """
        from transformers import Trainer

        trainer = Trainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer)
    """
    caveats = """
        SFT dataset options passed to the trainer are moved into the config (with NM203:
        max_seq_length becomes max_length, packing gets packing_strategy="wrapped": TRL 0.11's
        fixed-length blocks, the only TRL whose SFTTrainer took them) only when
        `args=` is a name assigned once in the file from a NeuronSFTConfig(...) call that has no
        **kwargs and none of those options; otherwise a marker asks to move them. `model_init`
        is not accepted by SFTTrainer (a marker).
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        qual = ctx.qualname(node.func)
        if qual in SFT_CONFIG_SOURCES:
            _record_config_name(node, ctx)
            return
        if qual not in TRAINER_SOURCES and qual not in SFT_TRAINER_SOURCES:
            return
        cls = qual.rsplit(".", 1)[-1]
        kw = keywords(node)
        plan = ArgPlan()
        tokenizer_to_processing_class(node, ctx, plan, cls)
        if qual in SFT_TRAINER_SOURCES:
            moved = [k for k in SFT_TRAINER_CONFIG_KWARGS if k in kw]
            if moved:
                ctx.local_state().setdefault("sft", []).append((node, plan, moved, ctx.statement()))
                _rewrite(ctx, node, plan, always=True)  # finish() may drop the options it moves
            if "model_init" in kw:
                ctx.marker(node, "SFTTrainer has no model_init: build the model first, or pass a model id string")
        _rewrite(ctx, node, plan)

    def finish(self, ctx: PythonContext) -> None:
        state = ctx.local_state()
        for node, plan, moved, statement in state.get("sft", ()):
            config = _movable_config(node, moved, state.get("config_names", {}))
            if config is not None:
                plan.drop.update(moved)
                ctx.finding(statement, f"SFTTrainer: {', '.join(moved)} moved to the SFTConfig")
                continue
            hint = "max_seq_length is max_length there" if "max_seq_length" in moved else None
            ctx.marker(statement, f"Move {', '.join(moved)} to the SFTConfig: SFTTrainer no longer takes them.",
                       detail=hint)


class SFTConfigFields(PythonRule):
    id = "NM203"
    markers = CONFIG_MARKERS
    title = "NeuronSFTConfig -> trl.SFTConfig: max_length, wrapped packing, model_init_kwargs device_map, Neuron fields"
    fix = "mixed"
    triggers = ("NeuronSFTConfig",)
    owns = SFT_CONFIG_SOURCES
    why = """
        NeuronSFTConfig = NeuronTrainingArguments + trl.SFTConfig. Besides the Neuron-only fields
        (handled as NM201 does), TRL 1.16 renamed `max_seq_length` to `max_length`; packing keeps
        the examples the old trainer built: optimum-neuron <= 0.4.1 ran TRL 0.11, whose packing
        cut fixed-length blocks from the concatenated examples (TRL 1.16's
        `packing_strategy="wrapped"`, added where the config says TRL 0.11: `max_seq_length`, or
        packing moved from the trainer call), >= 0.4.2 ran TRL 0.24, which packed "bfd" as TRL
        1.16 does by default (`max_length`: `packing_strategy="bfd"` written out; padding-free
        batches, padded to a multiple of 128 on neuron); a config that says neither gets a marker; and when SFTTrainer loads the model from a
        string it sets `device_map="auto"` on every non-CPU device, neuron included, which loads
        the model off the NeuronCores and conflicts with `distributed_config`: `model_init_kwargs`
        gets `"device_map": None`. `pad_to_multiple_of` stays at its default "auto" (128 on neuron).
    """
    before = """
        from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer

        config = NeuronSFTConfig(output_dir="out", max_seq_length=1024, packing=True)
        trainer = NeuronSFTTrainer(model="Qwen/Qwen3-0.6B", args=config, train_dataset=ds)
    """
    after = """
        from trl import SFTConfig, SFTTrainer

        # activation_checkpointing=False, bf16=False: TRL 0.x defaults kept (TRL 1.16.0 turns them on)
        config = SFTConfig(
            output_dir="out",
            max_length=1024,
            packing=True,
            torch_compile=True,
            dataloader_drop_last=True,
            packing_strategy="wrapped",
            model_init_kwargs={"device_map": None},
            activation_checkpointing=False,
            bf16=False,
        )
        trainer = SFTTrainer(model="Qwen/Qwen3-0.6B", args=config, train_dataset=ds)
    """
    caveats = """
        `NeuronSFTConfig(**training_args.to_dict())` is kept (it works: every TrainingArguments
        field is an SFTConfig field) with a marker suggesting to parse SFTConfig directly.
        A model "passed as a string" is a string literal or a name/attribute called like a model
        id (`model_id`, `model_name_or_path`...) in an SFTTrainer call of the same file. A config
        parsed in the file (`a, cfg = TrlParser((A, NeuronSFTConfig)).parse_args_and_config()`,
        HfArgumentParser alike) gets, right after the parse, `cfg.model_init_kwargs` with
        `"device_map": None` and `DistributedConfig(tp_size=TP_SIZE, fsdp_size=FSDP_SIZE)` from
        the launch environment (1 when unset: no sharding), then `cfg.save_only_model = True` when
        TP_SIZE x FSDP_SIZE > 1 (the Trainer refuses a model sharded at load time otherwise; a
        config with literal sizes gets save_only_model=True); a config that comes from elsewhere
        gets a marker. A `model_init_kwargs` that is not a dict literal gets a marker. When the
        trainer gets a model object, the parallel sizes go to the load that builds it as NM201
        does for TrainingArguments (else a marker).
    """

    def handlers(self):
        return {**_tracking_handlers(), cst.Call: self._on_call, cst.Assign: self._on_assign}

    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        _track_assign(node, ctx)
        _track_parsed(node, ctx, SFT_CONFIG_SOURCES)

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        qual = ctx.qualname(node.func)
        _track_call(node, qual, ctx)
        if qual in PARSERS:
            parser_bf16(node, ctx, SFT_CONFIG_SOURCES)
        if qual in SFT_TRAINER_SOURCES:
            kw = keywords(node)
            moved = [k for k in SFT_TRAINER_CONFIG_KWARGS if k in kw]
            if moved:
                ctx.local_state().setdefault("sft", []).append((node, moved))
            model = keywords(node).get("model")
            expr = model.value if model is not None else (node.args[0].value if node.args and node.args[0].keyword
                                                          is None and not node.args[0].star else None)
            if expr is not None and _is_model_id(expr):
                ctx.local_state()["model_id"] = True
                ctx.local_state().setdefault("id_trainers", []).append((node, ctx.statement()))
            return
        if qual not in SFT_CONFIG_SOURCES:
            return
        _record_config_name(node, ctx)
        plan, sizes, spread = self._config(node, ctx)
        ctx.local_state().setdefault("configs", []).append((node, plan, sizes, ctx.statement(), spread))
        parent = ctx.parent
        if sizes and isinstance(parent, cst.Assign) and len(parent.targets) == 1 \
                and isinstance(parent.targets[0].target, cst.Name):
            ctx.local_state().setdefault("config_targets", {})[id(node)] = (ctx.scope_id, parent.targets[0].target.value)

    def finish(self, ctx: PythonContext) -> None:
        # the trainer call that says whether the model is loaded from a string may come after the config
        state = ctx.local_state()
        plans = {id(node): (plan, statement) for node, plan, _sizes, statement, _spread in state.get("configs", ())}
        for trainer, moved in state.get("sft", ()):
            config = _movable_config(trainer, moved, state.get("config_names", {}))
            if config is None or id(config) not in plans:
                continue
            plan, statement = plans[id(config)]
            kw = keywords(trainer)
            for k in moved:
                value = kw[k].value
                plan.add.append(("max_length" if k == "max_seq_length" else k, lambda v=value: v.deep_clone()))
            if "packing" in moved and literal(kw["packing"].value) is not False \
                    and "packing_strategy" not in keywords(config):
                quote = quote_of(config)
                plan.add.append(("packing_strategy", lambda: cst.SimpleString(f"{quote}wrapped{quote}")))
            ctx.finding(statement, f"SFTConfig: {', '.join(moved)} moved here from the SFTTrainer call")
        names = state.get("config_names", {})
        parsed = {name: statement for name, statement, _scope_, _call in state.get("parsed", ())}
        fixed: set = set()
        for trainer, statement in state.get("id_trainers", ()):
            args = keywords(trainer).get("args")
            value = args.value if args is not None else None
            if isinstance(value, cst.Name) and names.get(value.value) is not None:
                continue  # its config is built here and gets "device_map": None below
            if isinstance(value, cst.Call) and ctx.qualname(value.func) in SFT_CONFIG_SOURCES:
                continue
            if isinstance(value, cst.Name) and value.value in parsed:
                if value.value not in fixed:
                    fixed.add(value.value)
                    self._parsed_device_map(ctx, value.value, parsed[value.value], trainer)
                continue
            ctx.marker(statement, DEVICE_MAP_MARKER.format(config="the SFTConfig passed as args"))
        loaded = []
        for node, plan, sizes, statement, spread in state.get("configs", ()):
            layout = describe(whole_mesh(sizes, "os.environ", quote_of(node)))
            if sizes and not state.get("model_id"):
                target = state.get("config_targets", {}).get(id(node))
                loaded.append(_Layout(node, sizes, target, statement, plan, layout, spread=spread))
                continue
            if state.get("model_id"):
                self._device_map(node, ctx, keywords(node), plan, quote_of(node), statement, sizes)
                if sizes and not (tensor_parallel(sizes) and lora_blocks_tp(ctx)):  # else: the LoRA marker
                    mesh = whole_mesh(sizes, "os.environ")
                    ctx.marker(statement, f"{sentence(launch_advice(mesh))}: model_init_kwargs shards the model now.",
                               detail=f"the parallel sizes moved from the config to model_init_kwargs "
                                      f"(DistributedConfig({layout})): {launch_detail(mesh)}")
        parsed_entries = _parsed_entries(ctx, state.get("parsed", ()), fixed=fixed | set(
            n for t, _s in state.get("id_trainers", ()) for n in [_args_name(t)] if n is not None))
        for entry, reason in _move_layouts(ctx, loaded + parsed_entries, "config"):
            if entry.parsed:
                if reason is not None:
                    ctx.marker(entry.statement, _parsed_marker(entry, reason), detail=reason)
                continue
            mesh = whole_mesh(entry.sizes, "os.environ")
            ctx.marker(entry.statement, _load_marker(entry.layout), detail=(
                f"the parallel sizes were removed from the config: load the model with from_pretrained(..., "
                f"distributed_config=DistributedConfig({entry.layout})) (or put it in model_init_kwargs with "
                f"\"device_map\": None when SFTTrainer gets a model id) and {launch_advice(mesh)}: "
                f"{launch_detail(mesh)}" + (f" ({reason})" if reason else "")))

    def _parsed_device_map(self, ctx: PythonContext, name: str, statement: cst.CSTNode, trainer: cst.Call) -> None:
        """After ``..., name, ... = parser.parse_args_and_config()``: the parsed SFTConfig gets
        ``"device_map": None`` and the launch layout (TP_SIZE / FSDP_SIZE) in model_init_kwargs."""
        try:
            environ = _code(ctx, ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module"))
            dist = _code(ctx, ctx.name_for(DISTRIBUTED_CONFIG, anchor=ctx.imports.binding_of(trainer.func)))
        except NameClash as exc:
            ctx.marker(statement, f"Set {name}.model_init_kwargs[\"device_map\"] = None by hand.", detail=str(exc))
            return
        step = ctx.module.default_indent
        mesh = whole_mesh({"tp_size": cst.parse_expression(env_size(environ, "TP_SIZE")),
                           "fsdp_size": cst.parse_expression(env_size(environ, "FSDP_SIZE"))}, environ)
        lora = lora_blocks_tp(ctx)
        if lora:  # LoRA over tensor-parallel layers fails: FSDP over every process trains any target
            mesh = fsdp_instead(environ)
            ctx.marker(statement, lora_marker(lora), detail=lora)
        config = config_code(dist, mesh, len(statement_indent(ctx)) + len(step), step)
        code = (
            f"{name}.model_init_kwargs = {{\n"
            f"{step}**({name}.model_init_kwargs or {{}}),\n"
            f"{step}\"device_map\": None,\n"
            f"{step}\"distributed_config\": {config},\n"
            "}\n"
        )
        sizes = [_code(ctx, f) for f in model_factors(mesh)]
        ctx.insert_after(statement, [cst.parse_statement(code),
                                     cst.parse_statement(save_only_model_code(name, sizes, step))])
        ctx.finding(statement, (
            f"SFTConfig: {name}.model_init_kwargs gets \"device_map\": None (SFTTrainer loads a model id with "
            "device_map=\"auto\" on neuron otherwise) and DistributedConfig(tp_size=TP_SIZE, fsdp_size=FSDP_SIZE, "
            "dp_replicate_size=WORLD_SIZE // (TP_SIZE x FSDP_SIZE)) from the launch environment (the parsed config no "
            "longer has the parallel sizes; the processes beyond TP_SIZE x FSDP_SIZE are data-parallel replicas)"
        ))
        ctx.finding(statement, f"{name}.save_only_model = True when TP_SIZE x FSDP_SIZE > 1: {SAVE_ONLY_MODEL}")

    def _config(self, call: cst.Call, ctx: PythonContext):
        kw = keywords(call)
        plan = ArgPlan()
        spread = spread_of(call, ctx)

        def sft_fields(node, kw, plan, present):
            if "max_seq_length" in kw:
                if "max_length" in kw or "max_length" in present:
                    plan.drop.add("max_length")  # NeuronSFTConfig copied max_seq_length over max_length
                plan.rename["max_seq_length"] = "max_length"
                ctx.finding(kw["max_seq_length"], "SFTConfig: max_seq_length -> max_length")
            if "padding_free" in kw:
                plan.drop.add("padding_free")
                ctx.finding(kw["padding_free"], "SFTConfig: dropped padding_free (NeuronSFTConfig forced it off)")

        def packing(node, kw, plan, present):
            quote = _quote(node)
            if "packing" not in kw or literal(kw["packing"].value) is False or "packing_strategy" in kw \
                    or "packing_strategy" in present:
                return
            given = set(kw) | set(present)
            if given & TRL_011_FIELDS:  # optimum-neuron <= 0.4.1 (TRL 0.11.4): ConstantLengthDataset blocks
                plan.add.append(("packing_strategy", lambda: cst.SimpleString(f"{quote}wrapped{quote}")))
                ctx.finding(kw["packing"], "SFTConfig: packing_strategy=\"wrapped\" (TRL 0.11, which max_seq_length "
                                           "says this config was written for, packed fixed-length blocks)")
            elif given & TRL_024_FIELDS:  # optimum-neuron >= 0.4.2 (TRL 0.24): "bfd", written out (TRL 1.16's default)
                plan.add.append(("packing_strategy", lambda: cst.SimpleString(f"{quote}bfd{quote}")))
                ctx.finding(kw["packing"], "SFTConfig: packing_strategy=\"bfd\" (TRL 0.24, which max_length says this "
                                           "config was written for, packed bfd: TRL 1.16's default, written out)")
            else:  # which TRL the config was written for is not in sight
                ctx.marker(kw["packing"], PACKING_UNDECIDED)

        outer = set(spread.keys()) if spread is not None else set()
        sft_fields(call, kw, plan, outer)
        sizes = _plan_fields(call, ctx, plan, static=spread is None)
        packing(call, kw, plan, outer)
        if spread is not None:
            sizes = {**_spread_fields(ctx, call, spread, _class_name(ctx, call), (sft_fields, packing)), **sizes}
        for a in call.args:
            if a.star == "**" and _is_to_dict(a.value):
                ctx.marker(call, f"Copy the fields {_code(ctx, a.value.func.value)}.to_dict() passes explicitly, or parse "
                                 "SFTConfig directly.")
        # registered now (while the call's ancestors are known); finish() may still add to the plan
        indent, prefix, step = statement_indent(ctx), line_prefix(ctx, call), ctx.module.default_indent
        ctx.replace(call, lambda new: new if plan.empty()
                    else apply_plan(new, plan, MAX_LINE, indent + " " * prefix, step))
        return plan, sizes, spread

    def _device_map(self, call, ctx, kw, plan: ArgPlan, quote: str, where: cst.CSTNode, sizes,
                    trainer: str = "SFTTrainer") -> None:
        reason = f"{trainer} loads a model id with device_map=\"auto\" on neuron unless told otherwise"
        entries: list[tuple[str, Callable[[], cst.BaseExpression]]] = []
        mik = kw.get("model_init_kwargs")
        value = mik.value if mik is not None else None
        present: set = set()
        if isinstance(value, cst.Dict) and all(isinstance(e, cst.DictElement) for e in value.elements):
            present = {literal(e.key) for e in value.elements}
        elif isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict" \
                and all(a.keyword is not None for a in value.args):
            present = set(keywords(value))
        elif value is not None:
            ctx.marker(where, DEVICE_MAP_MARKER.format(config="this config"), detail=reason)
            return
        sharded = None  # the trainer loads the model sharded: the config needs save_only_model=True
        if sizes and "distributed_config" not in present:
            try:
                dist = _code(ctx, ctx.name_for(DISTRIBUTED_CONFIG, anchor=ctx.imports.binding_of(call.func)))
                if "fsdp_size" in sizes or whole_mesh(sizes, "os.environ") != sizes:
                    environ = _code(ctx, ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module"))
                    if "fsdp_size" in sizes:
                        sizes = {**sizes, "fsdp_size": cst.parse_expression(
                            fsdp_size_code(environ, sizes.get("tp_size"), quote))}
                    sizes = whole_mesh(sizes, environ, quote)
                lora = lora_blocks_tp(ctx) if tensor_parallel(sizes) else None
                if lora:  # LoRA over tensor-parallel layers fails: FSDP over every process trains any target
                    sizes = fsdp_instead(_code(ctx, ctx.name_for("os.environ", anchor=ctx.imports.first_import,
                                                                 style="module")), quote)
                    ctx.marker(where, lora_marker(lora), detail=lora)
            except NameClash as exc:
                ctx.marker(where, "Add distributed_config=DistributedConfig(...) to model_init_kwargs by hand.",
                           detail=str(exc))
            else:
                layout = layout_text(sizes)
                text = config_code(dist, sizes, len(statement_indent(ctx)), ctx.module.default_indent, depth=2,
                                   key=f"{quote}distributed_config{quote}: ")
                entries.append(("distributed_config", lambda text=text: cst.parse_expression(text)))
                sharded = _Layout(call, sizes, None, where, plan, layout)
        if "device_map" not in present:
            entries.append(("device_map", lambda: cst.Name("None")))
        if not entries:
            return
        if value is None:
            if has_star_kwargs(call):
                ctx.marker(where, DEVICE_MAP_MARKER.format(config="this config"),
                           detail=f"{reason}; **kwargs may set it already")
                if sharded is not None:
                    _save_only_model(ctx, sharded)
                return
            step = ctx.module.default_indent
            width = MAX_LINE - len(statement_indent(ctx)) - len(step) - len("model_init_kwargs=,")
            plan.add.append(("model_init_kwargs", lambda: _spread(_dict_add(cst.Dict([]), entries, quote), width, step)))
        elif isinstance(value, cst.Call):  # dict(dtype=...)
            plan.revalue["model_init_kwargs"] = lambda d: apply_plan(d, ArgPlan(add=entries))
        else:
            plan.revalue["model_init_kwargs"] = lambda d: _dict_add(d, entries, quote)
        what = ", ".join(f"\"{k}\"" for k, _ in entries)
        config = "SFTConfig" if trainer == "SFTTrainer" else trainer.replace("Trainer", "Config")
        ctx.finding(where, f"{config}: model_init_kwargs gets {what} ({reason})")
        if sharded is not None:
            _save_only_model(ctx, sharded)


def _spread(d: cst.Dict, width: int, step: str) -> cst.Dict:
    """A new dict argument wider than ``width``: one entry per line (the call is one argument per line then)."""
    if len(cst.Module(body=[]).code_for_node(d)) <= width or not d.elements:
        return d
    def ws(last: str) -> cst.ParenthesizedWhitespace:
        return cst.ParenthesizedWhitespace(first_line=cst.TrailingWhitespace(), indent=True,
                                           last_line=cst.SimpleWhitespace(last))
    elements = [e.with_changes(comma=cst.Comma(whitespace_after=ws(step if i == len(d.elements) - 1 else step * 2)))
                for i, e in enumerate(d.elements)]
    return d.with_changes(elements=elements, lbrace=cst.LeftCurlyBrace(whitespace_after=ws(step * 2)))


RULES = (TrainingArgumentsFields, TrainerArguments, SFTConfigFields)
