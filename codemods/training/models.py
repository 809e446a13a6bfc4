"""NM302 / NM303: optimum.neuron.models.training (0.2+) -> transformers with DistributedConfig.

* NM302 ``TrainingNeuronConfig(tensor_parallel_size=8, ...)`` -> ``DistributedConfig(tp_size=8)``
  (the rename table renames the class; this rule rewrites the fields).
* NM303 the training model classes (``NeuronModelForCausalLM``, ``LlamaForCausalLM``...) took the
  parallel layout as a positional ``trn_config``::

      model = NeuronModelForCausalLM.from_pretrained(model_id, trn_config, torch_dtype=torch.bfloat16)

  and the native classes take it as ``distributed_config=``::

      model = AutoModelForCausalLM.from_pretrained(model_id, dtype=torch.bfloat16, distributed_config=trn_config)

  ``training_args.trn_config`` (built by NeuronTrainingArguments from its parallel sizes, gone
  natively) becomes ``DistributedConfig(tp_size=int(os.environ.get("TP_SIZE", "1")))``;
  ``attn_implementation="flash_attention_2"`` (NKI flash attention) becomes ``"sdpa"``.
"""

from __future__ import annotations

import libcst as cst

from codemods.common.renames import load_table
from codemods.common.arg_plan import (
    MAX_LINE,
    NOT_LITERAL,
    SAVE_ONLY_MODEL,
    ArgPlan,
    apply_plan,
    explode,
    fsdp_size_code,
    keywords,
    line_prefix,
    literal,
    quote_of,
    save_only_model_code,
    statement_indent,
)
from codemods.training.lora import LORA_MARKERS, fsdp_instead, lora_advice, lora_blocks_tp, lora_marker, tensor_parallel
from codemods.training.sources import imports_a_trainer
from codemods.training.mesh import (
    LAYOUT_MARKERS,
    pipeline_marker,
    config_code,
    FROM_CONFIG_MARKER,
    describe,
    env_size,
    has_pipeline,
    launch_advice,
    launch_detail,
    model_factors,
    sentence,
    short_code as _short,
    whole_mesh,
)


def _code(expr: cst.BaseExpression) -> str:
    return cst.Module(body=[]).code_for_node(expr)
from migrator.model import IN_DOCUMENT, fitted
from migrator.rules import NameClash, PythonContext, PythonRule

CONFIG_SOURCES = tuple(sorted(s for s, r in load_table().items()
                              if r.target == "transformers.distributed.DistributedConfig"))
MODEL_SOURCES = tuple(sorted(s for s, r in load_table().items()
                             if s.startswith("optimum.neuron.models.training.") and r.rule == "NM300"
                             and r.target != "transformers.distributed.DistributedConfig"
                             and "trn_config" in r.neuron_kwargs))
DISTRIBUTED_CONFIG = "transformers.distributed.DistributedConfig"
ARGS_CLASSES = tuple(sorted(s for s, r in load_table().items()
                            if r.target in ("transformers.TrainingArguments", "transformers.Seq2SeqTrainingArguments",
                                            "trl.SFTConfig")))
#: the calls that build training arguments in a module, old (ARGS_CLASSES) or native
BUILT_ARGUMENTS = frozenset(ARGS_CLASSES) | {"transformers.TrainingArguments", "transformers.Seq2SeqTrainingArguments",
                                             "trl.SFTConfig"}
#: NeuronTrainingArguments field -> DistributedConfig field (what trn_config was built from)
SIZE_FIELDS = {"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size"}

#: TrainingNeuronConfig field -> DistributedConfig field
RENAMED = {"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size"}
#: dropped without a marker: checkpoint format, loading throttles, custom-modeling switches
PLUMBING = ("num_local_ranks_per_step", "use_xser", "fuse_qkv", "recompute_causal_mask", "transpose_nki_inputs")
_SP = ("sequence parallelism has no native equivalent yet (DistributedConfig.enable_sequence_parallel is not wired "
       "up): activations are no longer sharded along the sequence")
#: dropped with a marker unless the value is one whose old behaviour native code has
BEHAVIOUR = {
    "sequence_parallel_enabled": ((False,), ("Expect more memory per core without sequence parallelism", _SP)),
    "kv_size_multiplier": ((None,), ("Use a tp_size that divides the model's num_key_value_heads",
                                     "KV heads are no longer replicated over tensor-parallel ranks")),
    "parallelize_embeddings": ((True,), ("Pass tp_plan={{...}} to keep the embeddings whole",
                                         "the embeddings are sharded as the model's tensor-parallel plan says")),
    "virtual_pipeline_parallel_size": ((1,), ("Expect no virtual pipeline stages",
                                              "DistributedConfig has no virtual pipeline stages")),
    "pipeline_parallel_num_microbatches": ((1, -1), ("Expect no pipeline micro-batches",
                                                     "DistributedConfig has no pipeline micro-batch setting")),
    "pipeline_parallel_use_zero1_optimizer": ((False,), (
        "Expect each rank to keep its stage's whole optimizer state",
        "no ZeRO-1 natively, and transformers 5.23 combines pipeline parallelism with no FSDP (fsdp_size)")),
    "gradient_checkpointing": ((False,), (
        "Pass activation_checkpointing=True to TrainingArguments to keep it",
        "or call model.gradient_checkpointing_enable(); the model config no longer takes it")),
    "checkpoint_dir": ((None,), ("Consolidate the checkpoint with optimum-cli neuron consolidate, then load it",
                                 "NxD sharded checkpoints are not loaded natively: load the consolidated result "
                                 "with from_pretrained")),
    "async_save": ((False,), ("Expect synchronous checkpoint saves", "checkpoints are saved synchronously natively")),
}


class TrainingNeuronConfigFields(PythonRule):
    id = "NM302"
    markers = LORA_MARKERS + LAYOUT_MARKERS + ((FROM_CONFIG_MARKER, """from_config builds the model without loading weights and takes no distributed_config;
        from_pretrained(..., distributed_config=DistributedConfig(...)) loads it sharded."""),)
    title = "TrainingNeuronConfig(...) fields -> DistributedConfig(tp_size=..., pp_size=...)"
    fix = "mixed"
    triggers = ("TrainingNeuronConfig",)
    owns = CONFIG_SOURCES
    why = """
        TrainingNeuronConfig described the neuronx-distributed layout of optimum-neuron's training
        models. transformers.distributed.DistributedConfig describes the native one:
        tensor_parallel_size becomes tp_size, pipeline_parallel_size becomes pp_size, and the
        processes optimum-neuron made data-parallel ranks become `dp_replicate_size = WORLD_SIZE //
        tp_size` (transformers 5.23 requires the sizes to multiply to the world size; with a
        literal pipeline size there is no data-parallel dimension, a marker says so); checkpoint
        and custom-modeling switches are dropped; settings with no native equal (sequence
        parallelism, KV replication, virtual pipeline stages, ZeRO-1 with PP, gradient
        checkpointing, checkpoint_dir, async_save) are dropped with a marker.
    """
    before = """
        from optimum.neuron.models.training import TrainingNeuronConfig

        trn_config = TrainingNeuronConfig(tensor_parallel_size=8, sequence_parallel_enabled=False, use_xser=True)
    """
    after = """
        import os
        from transformers.distributed import DistributedConfig

        trn_config = DistributedConfig(tp_size=8, dp_replicate_size=int(os.environ.get("WORLD_SIZE", "1")) // 8)
    """
    caveats = """
        Positional arguments are mapped by their order in TrainingNeuronConfig
        (tensor_parallel_size first); the rest is left with a marker. The launch must now be
        torchrun with tp_size x pp_size x data-parallel processes.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        if ctx.qualname(node.func) not in CONFIG_SOURCES:
            return
        kw = keywords(node)
        plan = ArgPlan()
        positional = [a for a in node.args if a.keyword is None]
        if positional:
            ctx.marker(node, "Pass tp_size=/pp_size= by keyword: TrainingNeuronConfig's positional arguments are not mapped.")
        trainer = imports_a_trainer(ctx)
        tp = kw.get("tensor_parallel_size") or (node.args[0] if positional else None)
        lora = lora_blocks_tp(ctx) if tp is not None and literal(tp.value) != 1 else None
        if lora:  # LoRA over tensor-parallel layers fails: FSDP over every process trains any target
            try:
                environ = ctx.module.code_for_node(
                    ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module"))
            except NameClash as exc:
                ctx.marker(node, lora_advice(lora), detail=f"{lora}; {exc}")
            else:
                ctx.marker(node, lora_marker(lora), detail=lora)
                fsdp = fsdp_instead(environ, quote_of(node))["fsdp_size"]
                ctx.replace(node, lambda new: new.with_changes(args=[cst.Arg(fsdp, keyword=cst.Name("fsdp_size"),
                                                                            equal=cst.AssignEqual(
                                                                                cst.SimpleWhitespace(""),
                                                                                cst.SimpleWhitespace("")))]))
                return
        for old, new in RENAMED.items():
            if old in kw:
                value = literal(kw[old].value)
                if value == 1:
                    plan.drop.add(old)
                elif new == "pp_size" and trainer:  # the Trainer cannot train pipeline stages
                    plan.drop.add(old)
                    ctx.marker(node, pipeline_marker(ctx.module.code_for_node(kw[old].value), isinstance(value, int)))
                    continue
                else:
                    plan.rename[old] = new
                ctx.finding(kw[old], f"TrainingNeuronConfig: {old} -> DistributedConfig {new}")
        sizes = {new: kw[old].value for old, new in RENAMED.items() if old in kw and literal(kw[old].value) != 1
                 and not (new == "pp_size" and trainer)}
        mesh = whole_mesh(sizes, "os.environ")
        if "dp_replicate_size" in mesh and "dp_replicate_size" not in kw and not any(a.star for a in node.args):
            try:
                environ = ctx.module.code_for_node(
                    ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module"))
            except NameClash as exc:
                ctx.marker(node, f"Add dp_replicate_size=WORLD_SIZE // tp_size by hand, and {launch_advice(mesh)}.",
                           detail=str(exc))
            else:
                replicas = whole_mesh(sizes, environ, quote_of(node))["dp_replicate_size"]
                plan.add.append(("dp_replicate_size", lambda: replicas))
                ctx.finding(node, f"TrainingNeuronConfig: dp_replicate_size={describe({'': replicas})[1:]} added "
                                  "(optimum-neuron made the other processes data-parallel ranks; transformers needs "
                                  "the sizes to multiply to the world size)")
        elif has_pipeline(mesh):
            ctx.marker(node, f"{sentence(launch_advice(mesh))}: the layout has pipeline stages.", detail=launch_detail(mesh))
        for name in PLUMBING:
            if name in kw:
                plan.drop.add(name)
                ctx.finding(kw[name], f"TrainingNeuronConfig: dropped {name} (no native equivalent)")
        for name, (same, message) in BEHAVIOUR.items():
            if name not in kw:
                continue
            plan.drop.add(name)
            value = literal(kw[name].value)
            if value is not NOT_LITERAL and value in same:
                ctx.finding(kw[name], f"TrainingNeuronConfig: dropped {name} (native behaviour is the same)")
            else:
                action, why = message
                code = ctx.module.code_for_node(kw[name].value)
                action = action.format(value=code)
                ctx.marker(node, fitted(f"{action}: {name}={code} was dropped.", f"{action}: {name} was dropped."),
                           detail=why)
        if plan.empty():
            return
        indent, prefix, step = statement_indent(ctx), line_prefix(ctx, node), ctx.module.default_indent
        ctx.replace(node, lambda new: apply_plan(new, plan, MAX_LINE, indent + " " * prefix, step))


class TrainingModelTrnConfig(PythonRule):
    id = "NM303"
    markers = LORA_MARKERS + LAYOUT_MARKERS + ((FROM_CONFIG_MARKER, """from_config builds the model without loading weights and takes no distributed_config;
        from_pretrained(..., distributed_config=DistributedConfig(...)) loads it sharded."""),)
    title = (
        "optimum.neuron.models.training loads: positional trn_config -> distributed_config=, "
        "flash_attention_2 -> sdpa"
    )
    fix = "mixed"
    triggers = ("optimum.neuron.models.training", "trn_config")
    owns = MODEL_SOURCES
    why = """
        optimum-neuron's training model classes (`NeuronModelForCausalLM`, `LlamaForCausalLM`,
        `Qwen3ForCausalLM`, `GraniteForCausalLM` from optimum.neuron.models.training) took the
        parallel layout as a positional `trn_config` (usually `training_args.trn_config`). The
        Transformers classes take it as `distributed_config=DistributedConfig(...)` and shard
        the model while loading it. `attn_implementation="flash_attention_2"` selected an NKI
        kernel; flash-attention 2 is CUDA-only natively, so it becomes "sdpa".
    """
    before = """
        import torch
        from optimum.neuron.models.training import NeuronModelForCausalLM

        def load(model_id, training_args):
            return NeuronModelForCausalLM.from_pretrained(model_id, training_args.trn_config, dtype=torch.bfloat16)
    """
    after = """
        import os
        import torch
        from transformers import AutoModelForCausalLM
        from transformers.distributed import DistributedConfig

        def load(model_id, training_args):
            # TODO(neuron-migrate NM303): Set TP_SIZE (and FSDP_SIZE for zero_1) in the launch environment: the layout comes from there now.
            if int(os.environ.get("TP_SIZE", "1")) * int(os.environ.get("FSDP_SIZE", "1")) > 1:
                # the Trainer refuses to build otherwise: resuming a model sharded at load time is not supported
                training_args.save_only_model = True
            return AutoModelForCausalLM.from_pretrained(
                model_id,
                dtype=torch.bfloat16,
                distributed_config=DistributedConfig(
                    tp_size=int(os.environ.get("TP_SIZE", "1")),
                    fsdp_size=int(os.environ.get("FSDP_SIZE", "1")),
                    dp_replicate_size=int(os.environ.get("WORLD_SIZE", "1"))
                    // (int(os.environ.get("TP_SIZE", "1")) * int(os.environ.get("FSDP_SIZE", "1")))
                    if int(os.environ.get("TP_SIZE", "1")) * int(os.environ.get("FSDP_SIZE", "1")) > 1 else 1,
                ),
            )
    """
    caveats = """
        Every read of `<name>.trn_config` in a file that mentions trn_config is replaced by the
        launch layout, `DistributedConfig(tp_size=TP_SIZE, fsdp_size=FSDP_SIZE, dp_replicate_size=
        WORLD_SIZE // (TP_SIZE x FSDP_SIZE))` read from the environment, with a marker (pipeline
        parallel sizes are not carried over: the Trainer cannot train them); arguments built in the
        same function, or at module level and read in a function that does not rebind their names,
        give their sizes instead (`tp_size=args.tp`); a read of a name the file assigns training
        arguments to elsewhere (a helper given them as a parameter) gets a marker, not the launch
        layout (a launcher passing `--tp` sets no TP_SIZE). In a file whose LoRA config targets
        more than the column-wise projections (q/k/v/gate/up_proj), or cannot be read, the layout is
        `DistributedConfig(fsdp_size=WORLD_SIZE)`: LoRA over row-wise tensor-parallel layers fails
        in transformers 5.23 / PEFT 0.21. Arguments built in the same function give their
        sizes instead (with fsdp_size=WORLD_SIZE // tp_size for zero_1=True, else the
        data-parallel replicas), and reads of one
        field (`args.trn_config.tensor_parallel_size`) are NM207's. `from_config(config, trn_config)` loses trn_config
        with a marker: from_config takes no distributed config (load with from_pretrained to
        shard). Any other trn_config expression (a TrainingNeuronConfig variable, renamed to
        DistributedConfig by NM300/NM302) is passed on as distributed_config unchanged, with a
        marker about save_only_model. The Trainer refuses a model sharded at load time unless its
        arguments have save_only_model=True: arguments whose trn_config is read get it (in their
        constructor when built in the same function, NM201; else `if TP_SIZE > 1:
        <args>.save_only_model = True` next to the load, before it when the load is returned).
    """

    def handlers(self):
        return {cst.Call: self._on_call, cst.Attribute: self._on_attribute, cst.Assign: self._on_assign}

    def _on_assign(self, node: cst.Assign, ctx: PythonContext) -> None:
        """``args = NeuronTrainingArguments(..., tensor_parallel_size=tp)``: what ``args.trn_config`` held."""
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
            return
        key = (ctx.scope_id, node.targets[0].target.value)
        known = ctx.local_state().setdefault("args", {})
        sizes = _args_sizes(node.value, ctx.qualname)
        if sizes is not None:
            known[key] = None if key in known else sizes
        elif key in known:
            known[key] = None

    def _sizes_of(self, name: str, ctx: PythonContext) -> tuple[dict | None, bool]:
        """What ``<name>.trn_config`` held: (the sizes the arguments were built with, or None; whether
        module builds training arguments under this name that this read cannot be tied to, so that the
        launch environment would be a guess: the arguments are not parsed from the launch's flags)."""
        known = ctx.local_state().get("args", {})
        scope = ctx.scope_id
        if (scope, name) in known:
            return known[(scope, name)], known[(scope, name)] is None
        built = _module_arguments(ctx)
        if scope != 0 and not ctx.bound_locally(name, ctx.stack):
            sizes = built["module"].get(name)
            if sizes is not None and not any(ctx.bound_locally(root, ctx.stack)
                                             for v in sizes.values() if v is not None for root in _roots(v)):
                return sizes, False
        return None, name in built["built"]

    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        """``training_args.trn_config`` (built by NeuronTrainingArguments, gone natively) -> a
        DistributedConfig read from the launch environment."""
        if node.attr.value != "trn_config" or ctx.qualname(node) is not None:
            return
        parent = ctx.parent
        if isinstance(parent, cst.AssignTarget) or (isinstance(parent, (cst.AnnAssign, cst.AugAssign))
                                                     and parent.target is node):
            return
        if isinstance(parent, cst.Attribute) and parent.value is node and isinstance(node.value, cst.Name):
            return  # args.trn_config.tensor_parallel_size: NM207 resolves the field read
        if not isinstance(node.value, (cst.Name, cst.Attribute)):
            return
        if IN_DOCUMENT.get() and not any(b.qualified.startswith("optimum.neuron") for b in ctx.imports.all_bindings()):
            # a page's example that imports nothing of optimum-neuron: the arguments (and the load given the layout)
            # are not known to be optimum-neuron's, so neither is rewritten
            ctx.marker(node, f"Replace {_short(ctx.module.code_for_node(node))} by DistributedConfig(...) by hand.")
            return
        quote = '"'
        lora = None
        sizes, elsewhere = self._sizes_of(node.value.value, ctx) if isinstance(node.value, cst.Name) else (None, False)
        if sizes is None and elsewhere:  # built here with sizes this read cannot see: TP_SIZE would be a guess
            ctx.marker(node, f"Replace {_short(ctx.module.code_for_node(node))} by the DistributedConfig of the sizes this "
                             "file builds the arguments with.")
            return
        if sizes is not None:
            try:
                dist = ctx.module.code_for_node(ctx.name_for(DISTRIBUTED_CONFIG, anchor=_optimum_binding(ctx)))
                if "fsdp_size" in sizes or whole_mesh(sizes, "os.environ") != sizes:
                    environ = ctx.module.code_for_node(
                        ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module"))
                    if "fsdp_size" in sizes:
                        sizes = {**sizes, "fsdp_size": cst.parse_expression(
                            fsdp_size_code(environ, sizes.get("tp_size")))}
                    sizes = whole_mesh(sizes, environ)
                lora = lora_blocks_tp(ctx) if tensor_parallel(sizes) else None
                if lora:  # LoRA over tensor-parallel layers fails: FSDP over every process trains any target
                    sizes = fsdp_instead(ctx.module.code_for_node(
                        ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module")))
            except NameClash as exc:
                ctx.marker(node, f"Replace {_short(ctx.module.code_for_node(node))} by DistributedConfig(...) by hand.",
                           detail=str(exc))
                return
            code = ctx.module.code_for_node
            layout = describe(sizes)
            ctx.replace(node, cst.parse_expression(config_code(dist, sizes, len(statement_indent(ctx)),
                                                               ctx.module.default_indent)))
            if lora:
                ctx.marker(node, lora_marker(lora), detail=f"{code(node)} is gone; {lora}")
            elif sizes:
                ctx.marker(node, f"{sentence(launch_advice(sizes))}: {_short(code(node))} became a DistributedConfig.",
                           detail=f"{code(node)} no longer exists: the layout it held is DistributedConfig({layout}) now; "
                                  f"{launch_detail(sizes)}")
            else:
                ctx.finding(node, f"{code(node)} -> DistributedConfig() (no model parallelism)")
            return
        try:
            environ = ctx.module.code_for_node(
                ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module"))
            dist = ctx.module.code_for_node(ctx.name_for(DISTRIBUTED_CONFIG, anchor=_optimum_binding(ctx)))
        except NameClash as exc:
            ctx.marker(node, f"Replace {_short(ctx.module.code_for_node(node))} by DistributedConfig(...) by hand.",
                       detail=str(exc))
            return
        mesh = whole_mesh({"tp_size": cst.parse_expression(env_size(environ, "TP_SIZE", quote)),
                           "fsdp_size": cst.parse_expression(env_size(environ, "FSDP_SIZE", quote))}, environ, quote)
        lora = lora_blocks_tp(ctx)
        if lora:  # LoRA over tensor-parallel layers fails: FSDP over every process trains any target
            mesh = fsdp_instead(environ, quote)
        ctx.replace(node, cst.parse_expression(config_code(dist, mesh, len(statement_indent(ctx)),
                                                           ctx.module.default_indent)))
        self._save_only_model(node, ctx, [_code(f) for f in model_factors(mesh)])
        if lora:
            ctx.marker(node, lora_marker(lora), detail=f"{ctx.module.code_for_node(node)} is gone; {lora}")
            return
        ctx.marker(node, "Set TP_SIZE (and FSDP_SIZE for zero_1) in the launch environment: the layout comes from there now.",
                   detail=f"{ctx.module.code_for_node(node)} no longer exists: the layout comes from the launch environment "
                          f"(DistributedConfig({describe(mesh)})); {launch_advice(mesh)}: {launch_detail(mesh)}; pipeline "
                          "stages are not carried over: the Trainer of transformers 5.23 cannot train a model loaded with "
                          "pp_size > 1")

    def _save_only_model(self, node: cst.Attribute, ctx: PythonContext, factors: list[str]) -> None:
        """``<args>.trn_config`` (arguments built elsewhere: parsed) given to a model load: the Trainer refuses a
        model sharded at load time unless its arguments have save_only_model=True, so they get it when WORLD_SIZE
        > 1 (the layout then shards or replicates the model; next to the load, before it when the load is returned)."""
        stack = ctx.stack
        load = stack[-3] if len(stack) >= 3 and isinstance(stack[-2], cst.Arg) else None
        if not (isinstance(load, cst.Call) and isinstance(load.func, cst.Attribute)
                and load.func.attr.value == "from_pretrained" and ctx.qualname(load.func.value) in MODEL_SOURCES):
            return
        statement = ctx.statement()
        done = ctx.local_state().setdefault("save_only_model", set())
        if not isinstance(statement, cst.SimpleStatementLine) or id(statement) in done:
            return
        done.add(id(statement))
        owner = ctx.module.code_for_node(node.value)
        added = cst.parse_statement(save_only_model_code(owner, factors, ctx.module.default_indent))
        if any(isinstance(s, cst.Return) for s in statement.body):
            ctx.replace(statement, lambda new: cst.FlattenSentinel([
                added.with_changes(leading_lines=[*new.leading_lines, *added.leading_lines]),
                new.with_changes(leading_lines=())]))
        else:
            ctx.insert_after(statement, [added])
        ctx.finding(node, f"{owner}.save_only_model = True when TP_SIZE x FSDP_SIZE > 1: {SAVE_ONLY_MODEL}")

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in ("from_pretrained", "from_config"):
            return
        if ctx.qualname(func.value) not in MODEL_SOURCES:
            return
        kw = keywords(node)
        plan = ArgPlan()
        quote = quote_of(node)
        positional = [i for i, a in enumerate(node.args) if a.keyword is None and not a.star]
        from_config = func.attr.value == "from_config"
        has_trn = True
        trn_value = kw["trn_config"].value if "trn_config" in kw else (
            node.args[positional[1]].value if len(positional) >= 2 else None)
        no_layout = False
        if isinstance(trn_value, cst.Attribute) and trn_value.attr.value == "trn_config" \
                and isinstance(trn_value.value, cst.Name):
            no_layout = self._sizes_of(trn_value.value.value, ctx)[0] == {}
        if no_layout:  # the arguments had no model parallelism: nothing to pass
            if "trn_config" in kw:
                plan.drop.add("trn_config")
            else:
                plan.move_positional[positional[1]] = "trn_config"
                plan.drop.add("trn_config")
        elif "trn_config" in kw:
            if from_config or "distributed_config" in kw:
                plan.drop.add("trn_config")
            else:
                plan.rename["trn_config"] = "distributed_config"
        elif len(positional) >= 2:
            if from_config or "distributed_config" in kw:
                plan.move_positional[positional[1]] = "trn_config"
                plan.drop.add("trn_config")
            else:
                plan.move_positional[positional[1]] = "distributed_config"
        else:
            has_trn = False
        if "attn_implementation" in kw and literal(kw["attn_implementation"].value) == "flash_attention_2":
            plan.revalue["attn_implementation"] = lambda v: cst.SimpleString(f"{quote}sdpa{quote}")
            ctx.marker(node, "Check which attention kernels TorchNeuron provides: \"sdpa\" replaces the NKI flash attention.",
                       detail="attn_implementation=\"flash_attention_2\" was the NKI flash-attention kernel of "
                              "optimum-neuron; flash-attention 2 is CUDA-only natively")
        if has_trn:
            if from_config:
                ctx.marker(node, FROM_CONFIG_MARKER)
            ctx.finding(node, "trn_config -> distributed_config=")
            if not from_config and not (isinstance(trn_value, cst.Attribute) and trn_value.attr.value == "trn_config"):
                ctx.marker(node, "Give the Trainer of this model save_only_model=True when the config shards it.",
                           detail="the Trainer refuses a model sharded at load time unless save_only_model=True or "
                                  "save_strategy=\"no\"")
        if plan.empty():
            return
        indent, prefix, step = statement_indent(ctx), line_prefix(ctx, node), ctx.module.default_indent
        ctx.replace(node, lambda new: _spread_config(apply_plan(new, plan, MAX_LINE, indent + " " * prefix, step),
                                                     indent + " " * prefix, step))


def _args_sizes(value: cst.BaseExpression, qualname) -> dict | None:
    """``NeuronTrainingArguments(..., tensor_parallel_size=tp)``: the DistributedConfig sizes its trn_config held
    (None: not such a call, or one whose arguments cannot be read)."""
    if not (isinstance(value, cst.Call) and qualname(value.func) in ARGS_CLASSES and not any(
            a.star for a in value.args) and not any(a.keyword is None for a in value.args[1:])):
        return None
    kw = keywords(value)
    sizes = {}
    for param, field in SIZE_FIELDS.items():  # no pipeline stages: the Trainer cannot train them (NM201 marks it)
        if param in kw and literal(kw[param].value) != 1 and field != "pp_size":
            sizes[field] = kw[param].value
    if "zero_1" in kw and literal(kw["zero_1"].value) is True:
        sizes["fsdp_size"] = None  # WORLD_SIZE // tp_size, written where it is used (NM201 explains)
    return sizes


def _roots(expr: cst.BaseExpression) -> set[str]:
    """The names an expression reads (``args.tp`` -> {"args"})."""
    found: set[str] = set()

    class _Names(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)
            return False

        def visit_Name(self, node: cst.Name) -> None:
            found.add(node.value)

    expr.visit(_Names())
    return found


def _module_arguments(ctx: PythonContext) -> dict:
    """The training arguments the module builds, once per unit: ``module`` (name -> sizes of the arguments
    assigned once at module level, top-level ``if`` blocks included) and ``built`` (the names assigned training
    arguments anywhere, old or native: a migrated file keeps the native ones, and the same read must get the
    same answer again)."""
    done = ctx.local_state().get("module arguments")
    if done is not None:
        return done
    qualname = ctx.imports.resolve
    module: dict[str, list] = {}

    def top(body):
        for stmt in body:
            if isinstance(stmt, cst.If):
                top(stmt.body.body)
                if isinstance(stmt.orelse, cst.Else):
                    top(stmt.orelse.body.body)
            elif isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, (cst.Assign, cst.AnnAssign)):
                        targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                        for t in targets:
                            if isinstance(t, cst.Name):
                                module.setdefault(t.value, []).append(
                                    _args_sizes(small.value, qualname) if len(targets) == 1 and small.value else None)

    top(ctx.module.body)
    built: set[str] = set()

    class _Builds(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            if isinstance(node.value, cst.Call) and qualname(node.value.func) in BUILT_ARGUMENTS:
                built.update(t.target.value for t in node.targets if isinstance(t.target, cst.Name))

    ctx.module.visit(_Builds())
    done = {"module": {k: v[0] for k, v in module.items() if len(v) == 1 and v[0] is not None}, "built": built}
    ctx.local_state()["module arguments"] = done
    return done


def _spread_config(call: cst.Call, indent: str, step: str) -> cst.Call:
    """A call written on one line whose distributed_config became a DistributedConfig of several lines
    (:func:`codemods.training.mesh.config_code`): one argument per line."""
    code = cst.Module(body=[]).code_for_node
    first = call.args[0] if call.args else None
    if first is None or isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace) \
            or isinstance(getattr(first.comma, "whitespace_after", None), cst.ParenthesizedWhitespace):
        return call
    config = keywords(call).get("distributed_config")
    if config is None or "\n" not in code(config.value):
        return call
    return explode(call, indent, step)


def _optimum_binding(ctx: PythonContext):
    """An import of optimum.neuron (new transformers imports go in its place)."""
    for b in ctx.imports.all_bindings():
        if b.qualified.startswith("optimum.neuron") and b.alias is not None:
            return b
    return None


RULES = (TrainingNeuronConfigFields, TrainingModelTrnConfig)
