"""NM204 / NM205 / NM304: optimum-neuron's training helpers, NeuronAccelerator's arguments, static shapes.

* NM204 helper functions (source-apis.md §1.3.8, §1.3.9, §1.4):
  ``is_main_worker()`` -> ``int(os.environ.get("RANK", "0")) == 0`` (``LOCAL_RANK`` for
  ``global_main=False``); ``is_precompilation()`` -> ``False`` (an ``if is_precompilation():`` keeps
  only its else branch); ``patch_transformers_for_neuron_sdk()`` and ``synchronize_hub_cache(...)``
  statements are removed; other ``optimum.neuron.cache`` calls get a marker;
  ``consolidate_model_parallel_checkpoints_to_unified_checkpoint(ckpt, out)`` is kept with a marker: a unit
  that trains with the migrated Trainer saves whole checkpoints (nothing to consolidate), one that does not
  consolidates old NxD checkpoints (which need optimum-neuron); in a unit that saves with
  ``distributed_checkpoint=True`` it becomes ``transformers.distributed.consolidate_distributed_checkpoint``.
* NM205 ``NeuronAccelerator(...)`` (renamed to ``accelerate.Accelerator`` by the table): the
  Neuron-only arguments are dropped or mapped (``mixed_precision_config="AUTOCAST_BF16"`` ->
  ``mixed_precision="bf16"``); ``ModelParallelismPlugin(...)`` gets a marker.
* NM304 static shapes: a training script's ``main()`` starts with
  ``torch._dynamo.config.automatic_dynamic_shapes = False``.

Why the rank expression rather than ``accelerate.PartialState().is_main_process``: it has the
meaning ``is_main_worker`` had (True when not launched distributed, the global rank 0 under
torchrun) at any point of the script, including before the process group or an accelerate state
exists, and needs no new dependency; ``PartialState()`` would initialise the process group as a
side effect of what was a pure query.
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.training.sources import (
    ARGS_SOURCES, SFT_CONFIG_SOURCES, SFT_TRAINER_SOURCES, TRAINER_SOURCES, imports_a_trainer)
from codemods.common.arg_plan import (
    MAX_LINE,
    ArgPlan,
    apply_plan,
    keywords,
    line_prefix,
    literal,
    statement_indent,
)
from migrator.model import KEEPS_OLD_STACK, fitted
from migrator.rules import NameClash, PythonContext, PythonRule

ON = "optimum.neuron"


def _at(name: str, *modules: str) -> tuple[str, ...]:
    return tuple(f"{ON}.{m}.{name}" if m else f"{ON}.{name}" for m in modules)


IS_MAIN_WORKER = _at("is_main_worker", "utils", "utils.misc")
IS_PRECOMPILATION = _at("is_precompilation", "utils", "utils.misc")
PATCH_TRANSFORMERS = _at("patch_transformers_for_neuron_sdk", "utils", "utils.training_utils", "models.training",
                         "models.training.training_utils")
_CACHE_NAMES = ("synchronize_hub_cache", "get_hub_cached_entries", "get_hub_cached_models", "hub_neuronx_cache",
                "ModelCacheEntry")
CACHE_TREE = f"{ON}.cache.*"
CACHE_UTILS = tuple(n for name in _CACHE_NAMES for n in _at(name, "utils", "utils.hub_cache_utils",
                                                            "utils.cache_utils"))
CONSOLIDATE = _at("consolidate_model_parallel_checkpoints_to_unified_checkpoint", "models.training",
                  "models.training.checkpointing", "distributed", "distributed.checkpointing")
CONSOLIDATE_TARGET = "transformers.distributed.consolidate_distributed_checkpoint"
#: optimum-neuron's other consolidation helpers (a state dict returned, tensor-parallel only): marked the same way
CONSOLIDATE_OTHERS = tuple(n for name in ("consolidate_model_parallel_checkpoints", "consolidate_tensor_parallel_checkpoints",
                                          "consolidate_tensor_parallel_checkpoints_to_unified_checkpoint")
                           for n in _at(name, "distributed", "distributed.checkpointing", "models.training.checkpointing"))

ACCELERATOR = _at("NeuronAccelerator", "", "accelerate", "accelerate.accelerator")
MP_PLUGIN = _at("ModelParallelismPlugin", "accelerate", "accelerate.utils", "accelerate.utils.dataclasses")
MP_CONFIG = _at("MixedPrecisionConfig", "accelerate.utils", "accelerate.utils.dataclasses")
TRAINING_SCRIPT = TRAINER_SOURCES + SFT_TRAINER_SOURCES + ARGS_SOURCES + SFT_CONFIG_SOURCES
DYNAMIC_SHAPES = "automatic_dynamic_shapes"


def _is_sync(qual: str) -> bool:
    return qual.rsplit(".", 1)[-1] == "synchronize_hub_cache"


def _is_cache(qual: str | None) -> bool:
    return qual is not None and (qual.startswith(f"{ON}.cache.") or qual in CACHE_UTILS)


def _expression_statement(ctx: PythonContext, call: cst.Call) -> cst.SimpleStatementLine | None:
    """The statement line when ``call`` is a whole expression statement (alone on its line)."""
    parent = ctx.parent
    if isinstance(parent, cst.Expr) and parent.value is call and len(ctx.stack) > 2:
        line = ctx.stack[-3]
        if isinstance(line, cst.SimpleStatementLine):
            return parent if len(line.body) > 1 else line
    return None


#: parents under which a comparison needs no parentheses
_SAFE_PARENTS = (cst.If, cst.While, cst.Assign, cst.AnnAssign, cst.Return, cst.Arg, cst.BooleanOperation, cst.Expr,
                 cst.Assert, cst.Element, cst.DictElement, cst.IfExp, cst.Lambda, cst.AugAssign)


def _needs_parens(ctx: PythonContext, call: cst.Call) -> bool:
    parent = ctx.parent
    if isinstance(parent, cst.UnaryOperation):
        return not isinstance(parent.operator, cst.Not)
    return not isinstance(parent, _SAFE_PARENTS)


def _constant_branch(new: cst.If, keep_body: bool, alone: bool = False):
    """The statements of the branch that runs when the test is constant, in the if's place
    (``pass`` when nothing runs and the if is alone in its block)."""
    nothing = cst.SimpleStatementLine([cst.Pass()], leading_lines=new.leading_lines) if alone \
        else cst.FlattenSentinel([])
    if keep_body:
        block = new.body
    elif isinstance(new.orelse, cst.If):  # elif: becomes an if
        return new.orelse.with_changes(leading_lines=new.leading_lines)
    elif isinstance(new.orelse, cst.Else):
        block = new.orelse.body
    else:
        return nothing
    if isinstance(block, cst.IndentedBlock):
        stmts = list(block.body)
    else:
        stmts = [cst.SimpleStatementLine(body=list(block.body))]
    if not stmts:
        return nothing
    stmts[0] = stmts[0].with_changes(leading_lines=[*new.leading_lines, *stmts[0].leading_lines])
    return cst.FlattenSentinel(stmts)


#: zero_1 in a run that also pipelines (pp_size > 1): no native ZeRO-1 to go with it
ZERO_1_WITH_PP = "zero_1 was dropped: FSDP does not combine with pipeline parallelism, so the optimizer state stays whole."

_PARALLEL = "Set the parallel layout where the model is loaded (DistributedConfig): {name} was dropped."
MIXED_BY_HAND = "Pass mixed_precision=\"bf16\" (AUTOCAST_BF16) or load in bf16 (FULL_BF16): {name}."
CONSOLIDATE_BY_HAND = "Consolidate with transformers.distributed.consolidate_distributed_checkpoint(checkpoint_dir, out_dir)."
#: a unit that trains with the migrated Trainer: it saves whole checkpoints (save_pretrained gathers a model sharded at
#: load time), which consolidate_distributed_checkpoint cannot read (it reads save_pretrained(distributed_checkpoint=True))
CONSOLIDATE_UNNEEDED = "Drop this consolidation and load from the checkpoint folder: the migrated Trainer saves whole weights."
CONSOLIDATE_KEPT = (f"{KEEPS_OLD_STACK}for old NxD checkpoints (it needs optimum-neuron): the migrated training saves "
                    "whole checkpoints.")
CONSOLIDATE_KEPT_DETAIL = (
    "this unit does not train, so the checkpoints it consolidates are most likely the old run's NxD shards, which "
    f"{CONSOLIDATE_TARGET} cannot read: keep this call in an environment with optimum-neuron for those; checkpoints "
    "saved by the migrated training are whole already")
CONSOLIDATE_SAFETENSORS = "Expect safetensors files here: consolidate_distributed_checkpoint writes no other format."
#: NM205's markers and their long forms
ACCELERATOR_MARKERS = (
    (_PARALLEL,
     """Tensor and pipeline parallelism are set when the model is loaded (from_pretrained(...,
     distributed_config=transformers.distributed.DistributedConfig(tp_size=...))), or with
     accelerate.Accelerator(parallelism_config=accelerate.ParallelismConfig(tp_size=..., dp_shard_size=...))
     for a model you shard yourself."""),
    ("Pass distributed_config=DistributedConfig(...) to the model load: ModelParallelismPlugin is gone.",
     """ModelParallelismPlugin configured optimum-neuron's model parallelism; natively pass
     distributed_config=DistributedConfig(tp_size=..., pp_size=...) to from_pretrained
     (transformers.distributed), or parallelism_config=accelerate.ParallelismConfig(tp_size=...) to
     accelerate.Accelerator."""),
    (MIXED_BY_HAND,
     """optimum-neuron's MixedPrecisionConfig had two modes: AUTOCAST_BF16 (autocast over fp32 weights: natively
     mixed_precision="bf16" on accelerate.Accelerator) and FULL_BF16 (the whole model in bf16: load it with
     dtype=torch.bfloat16)."""),
    ("Load the model with dtype=torch.bfloat16: mixed_precision_config={value} trained it in bf16.",
     """FULL_BF16 trained the whole model in bf16; mixed_precision="bf16" would be autocast over fp32 weights,
     another memory footprint and other numerics."""),
    (ZERO_1_WITH_PP,
     """ZeRO-1 sharded the optimizer state over the data-parallel ranks. Natively that is FSDP (DistributedConfig
     fsdp_size), which Transformers 5.23 does not combine with pipeline parallelism (DistributedConfig raises
     "Combining FSDP with pipeline parallelism is not supported yet"): with pp_size > 1 the optimizer state stays
     whole on each rank, which takes more memory."""),
    ("Load the model with DistributedConfig(fsdp_size=WORLD_SIZE // tp_size) to shard what zero_1=True sharded.",
     """ZeRO-1 sharded the optimizer state over the data-parallel ranks; natively FSDP2 shards parameters,
     gradients and optimizer state over them: load the model with DistributedConfig(fsdp_size=WORLD_SIZE //
     tp_size) (under torchrun) for the same memory saving."""),
    ("If {name}={value} is true, load the model with DistributedConfig(fsdp_size=WORLD_SIZE // tp_size) instead.",
     """ZeRO-1 sharded the optimizer state over data-parallel ranks; natively the closest is FSDP2
     (accelerate.ParallelismConfig(dp_shard_size=...) or DistributedConfig(fsdp_size=...) on the model
     load), which also shards parameters and gradients."""),
)


class TrainingHelpers(PythonRule):
    id = "NM204"
    markers = (
        ("Replace `{name}` by hand: {what}.", """An optimum-neuron utility (optimum.neuron.utils) the rule does not
        rewrite at this use: is_main_worker is a RANK test, is_precompilation is always False now (TorchNeuron
        has no precompilation run), the consolidation helpers are not needed for the migrated training's whole
        checkpoints."""),
        (CONSOLIDATE_BY_HAND, """The rule could not rewrite this call (arguments it cannot map, or a name clash):
        checkpoints saved with save_pretrained(..., distributed_checkpoint=True) are merged by
        transformers.distributed.consolidate_distributed_checkpoint(checkpoint_dir, output_dir)."""),
        (CONSOLIDATE_UNNEEDED, """The migrated Trainer saves whole checkpoints: save_pretrained gathers a model
        sharded at load time (DistributedConfig) before writing, so nothing is left to consolidate, and
        transformers.distributed.consolidate_distributed_checkpoint, which reads only the rank-local files of
        save_pretrained(distributed_checkpoint=True), raises on them. The call is kept (it needs optimum-neuron)
        until the code that reads its output folder reads the checkpoint folder instead."""),
        (CONSOLIDATE_KEPT, """A unit that does not train consolidates checkpoints made elsewhere, most likely the
        old run's NxD shards, which transformers.distributed.consolidate_distributed_checkpoint cannot read: the
        call is kept, to run where optimum-neuron is installed (or `optimum-cli neuron consolidate`); checkpoints
        saved by the migrated training are whole already."""),
        (CONSOLIDATE_SAFETENSORS, """save_format other than safetensors was dropped: the native consolidation
        always writes safetensors."""),
    )
    title = ("optimum-neuron helpers: is_main_worker -> rank check, is_precompilation -> False, cache sync and SDK "
             "patching removed, checkpoint consolidation flagged")
    fix = "mixed"
    triggers = ("is_main_worker", "is_precompilation", "patch_transformers_for_neuron_sdk", "hub_cache",
                "hub_cached", "hub_neuronx_cache", "optimum.neuron.cache", "ModelCacheEntry",
                "consolidate_model_parallel_checkpoints")
    owns = (*IS_MAIN_WORKER, *IS_PRECOMPILATION, *PATCH_TRANSFORMERS, CACHE_TREE, *CACHE_UTILS, *CONSOLIDATE,
            *CONSOLIDATE_OTHERS)
    why = """
        These optimum-neuron helpers only make sense on the XLA stack. `is_main_worker()` asked
        torch-xla for the global ordinal: the launch environment's RANK says the same
        (LOCAL_RANK for global_main=False), before and after the process group exists.
        `is_precompilation()` was true during a `neuron_parallel_compile` graph-extraction run,
        which TorchNeuron does not have: it becomes False, and an `if is_precompilation():`
        keeps only its else branch. `patch_transformers_for_neuron_sdk()` patched transformers
        for neuronx-distributed and `synchronize_hub_cache()` pushed compiled NEFFs to the Hub
        cache (TorchNeuron keeps its own local compile cache): both statements are removed.
        Checkpoint consolidation is kept with a marker: the migrated Trainer saves whole
        checkpoints (save_pretrained gathers a model sharded at load time), so a unit that trains
        has nothing to consolidate, and one that does not consolidates the old run's NxD shards,
        which need optimum-neuron. Only in a unit that saves rank-local files
        (`save_pretrained(..., distributed_checkpoint=True)`) does it become
        `transformers.distributed.consolidate_distributed_checkpoint(checkpoint_dir, output_dir)`.
    """
    before = """
        from optimum.neuron.cache import synchronize_hub_cache
        from optimum.neuron.utils import is_main_worker, is_precompilation

        if is_precompilation():
            max_steps = 10
        else:
            max_steps = 1000
        if is_main_worker():
            print(max_steps)
        synchronize_hub_cache()
    """
    after = """
        import os

        max_steps = 1000
        if int(os.environ.get("RANK", "0")) == 0:
            print(max_steps)
    """
    caveats = """
        `is_main_worker` passed around as a function (not called) and calls of other
        optimum.neuron.cache functions get a marker. Only an `if` whose whole test is
        `is_precompilation()` (or `not is_precompilation()`) is simplified; elsewhere the call
        becomes `False`. Whether a unit trains is read from its imports (a `...Trainer` class of
        optimum-neuron, Transformers or TRL); a custom training loop's consolidation is kept.
        `trainer.synchronize_hub_cache()` (a NeuronTrainer method) is not detected.
    """

    def handlers(self):
        return {cst.Call: self._on_call, cst.Name: self._on_name, cst.Attribute: self._on_attribute}

    # ------------------------------------------------------------------ references
    def _count(self, ctx: PythonContext, local: str) -> None:
        uses = ctx.local_state().setdefault("uses", {})
        uses[local] = uses.get(local, 0) + 1

    def _on_name(self, node: cst.Name, ctx: PythonContext) -> None:
        bindings = ctx.imports.bindings.get(node.value)
        if not bindings or not any(ctx.owner(b.qualified) == self.id for b in bindings):
            return
        parent = ctx.parent
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            return
        if isinstance(parent, (cst.ImportAlias, cst.AsName)):
            return
        if isinstance(parent, cst.Arg) and parent.keyword is node:
            return
        self._count(ctx, node.value)
        if isinstance(parent, cst.Call) and parent.func is node:
            return
        if isinstance(parent, cst.Attribute):
            return  # the attribute handler looks at it
        qual = bindings[0].qualified
        ctx.marker(node, _gone(qual))

    def _on_attribute(self, node: cst.Attribute, ctx: PythonContext) -> None:
        parent = ctx.parent
        if (isinstance(parent, cst.Attribute) and parent.value is node) or (isinstance(parent, cst.Call)
                                                                              and parent.func is node):
            return
        if isinstance(parent, (cst.ImportFrom, cst.Import)):
            return
        qual = ctx.qualname(node)
        if qual is None or ctx.owner(qual) != self.id:
            return
        ctx.marker(node, _gone(qual))

    def finish(self, ctx: PythonContext) -> None:
        uses = ctx.local_state().get("uses", {})
        for b in ctx.imports.all_bindings():
            if b.alias is None or ctx.owner(b.qualified) != self.id or uses.get(b.local):
                continue
            if ctx.is_ignored(b.line):
                continue
            ctx.remove_import(b)
            ctx.finding(b.alias, f"removed the unused import of {b.qualified}")

    # ------------------------------------------------------------------ calls
    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        qual = ctx.qualname(node.func)
        if qual is None or ctx.owner(qual) != self.id:
            return
        if (qual in IS_MAIN_WORKER or qual in IS_PRECOMPILATION) and _expression_statement(ctx, node) is not None:
            ctx.remove_statement(_expression_statement(ctx, node))
            ctx.finding(node, f"removed a call of {qual.rsplit('.', 1)[-1]}() whose result was not used")
        elif qual in IS_MAIN_WORKER:
            self._main_worker(node, ctx)
        elif qual in IS_PRECOMPILATION:
            self._precompilation(node, ctx)
        elif qual in PATCH_TRANSFORMERS:
            self._drop_statement(node, ctx, qual, "transformers needs no patching for the neuron device")
        elif _is_cache(qual) and _is_sync(qual):
            self._drop_statement(node, ctx, qual, "the Hugging Face Hub compile cache is optimum-neuron's; "
                                                  "TorchNeuron keeps compiled graphs in its own local cache")
        elif _is_cache(qual):
            ctx.marker(node, f"Remove this use of `{qual.rsplit('.', 1)[-1]}`: TorchNeuron has no Hub compile cache.")
        elif qual in CONSOLIDATE:
            self._consolidate(node, ctx)
        elif qual in CONSOLIDATE_OTHERS:
            trains = imports_a_trainer(ctx)
            ctx.marker(node, CONSOLIDATE_UNNEEDED if trains else CONSOLIDATE_KEPT,
                       detail=None if trains else CONSOLIDATE_KEPT_DETAIL)

    def _main_worker(self, node: cst.Call, ctx: PythonContext) -> None:
        args = [a for a in node.args if a.star == ""]
        if len(args) != len(node.args) or len(args) > 1 or (args and args[0].keyword is not None
                                                            and args[0].keyword.value != "global_main"):
            ctx.marker(node, "Test int(os.environ.get(\"RANK\", \"0\")) == 0 instead of is_main_worker(...), which is gone.")
            return
        value = literal(args[0].value) if args else True
        try:
            environ = ctx.name_for("os.environ", anchor=ctx.imports.first_import, style="module")
        except NameClash as exc:
            ctx.marker(node, "Test the RANK environment variable instead of is_main_worker(), which is gone.",
                       detail=str(exc))
            return
        env = ctx.module.code_for_node(environ)
        if value is True:
            var = '"RANK"'
        elif value is False:
            var = '"LOCAL_RANK"'
        else:
            var = None
        parens = _needs_parens(ctx, node)

        def build(new: cst.Call) -> cst.BaseExpression:
            name = var
            if name is None:
                name = f'"RANK" if {ctx.module.code_for_node(new.args[0].value)} else "LOCAL_RANK"'
            expr = cst.parse_expression(f'int({env}.get({name}, "0")) == 0')
            if parens:
                expr = expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            return expr

        ctx.replace(node, build)
        what = "LOCAL_RANK" if value is False else "RANK"
        ctx.finding(node, f"is_main_worker() -> int(os.environ.get(\"{what}\", \"0\")) == 0 (the torchrun rank)")

    def _precompilation(self, node: cst.Call, ctx: PythonContext) -> None:
        reason = "no neuron_parallel_compile graph-extraction run exists under TorchNeuron"
        parent, grand = ctx.parent, ctx.stack[-3] if len(ctx.stack) > 2 else None
        if isinstance(parent, cst.If) and parent.test is node:
            alone = _alone(ctx, parent)
            ctx.replace(parent, lambda new: _constant_branch(new, keep_body=False, alone=alone))
            ctx.finding(node, f"if is_precompilation(): removed, its else branch kept ({reason})")
            return
        if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not) \
                and isinstance(grand, cst.If) and grand.test is parent:
            ctx.replace(grand, lambda new: _constant_branch(new, keep_body=True))
            ctx.finding(node, f"if not is_precompilation(): its body kept, its else branch removed ({reason})")
            return
        ctx.replace(node, cst.Name("False"))
        ctx.finding(node, f"is_precompilation() -> False ({reason})")

    def _drop_statement(self, node: cst.Call, ctx: PythonContext, qual: str, reason: str) -> None:
        name = qual.rsplit(".", 1)[-1]
        stmt = _expression_statement(ctx, node)
        if stmt is None:
            ctx.marker(node, f"Remove this use of {name}(): it is gone under TorchNeuron.", detail=reason)
            return
        ctx.remove_statement(stmt)
        ctx.finding(node, f"removed {name}(...) ({reason})")

    def _consolidate(self, node: cst.Call, ctx: PythonContext) -> None:
        if not imports_a_trainer(ctx):
            # the checkpoints come from elsewhere: most likely the old run's NxD shards, which
            # consolidate_distributed_checkpoint cannot read
            ctx.marker(node, CONSOLIDATE_KEPT, detail=CONSOLIDATE_KEPT_DETAIL)
            return
        if not _DISTRIBUTED_SAVE.search(ctx.source):
            # the migrated Trainer writes whole checkpoints: nothing to consolidate, and the native function
            # (which reads distributed_checkpoint=True saves only) would raise on them
            ctx.marker(node, CONSOLIDATE_UNNEEDED)
            return
        kw = keywords(node)
        if any(a.star for a in node.args):
            ctx.marker(node, CONSOLIDATE_BY_HAND)
            return
        try:
            func = ctx.name_for(CONSOLIDATE_TARGET, anchor=ctx.imports.binding_of(node.func))
        except NameClash as exc:
            ctx.marker(node, CONSOLIDATE_BY_HAND, detail=str(exc))
            return
        plan = ArgPlan()
        note = ""
        if "save_format" in kw:
            plan.drop.add("save_format")
            if literal(kw["save_format"].value) != "safetensors":
                note = " It always writes safetensors (save_format was dropped)."
        indent, prefix, step = statement_indent(ctx), " " * line_prefix(ctx, node), ctx.module.default_indent
        ctx.replace(node, lambda new: (apply_plan(new, plan, MAX_LINE, indent + prefix, step) if not plan.empty()
                                       else new).with_changes(func=func))
        ctx.finding(node, f"{CONSOLIDATE[0].rsplit('.', 1)[-1]} -> {CONSOLIDATE_TARGET}: this unit trains, so the "
                          "checkpoints are the migrated DistributedConfig run's")
        if note:
            ctx.marker(node, CONSOLIDATE_SAFETENSORS)


#: a unit that saves rank-local checkpoint files (what consolidate_distributed_checkpoint reads)
_DISTRIBUTED_SAVE = re.compile(r"\bdistributed_checkpoint\s*=\s*True\b")


def _alone(ctx: PythonContext, stmt: cst.CSTNode) -> bool:
    """True when ``stmt`` (an ancestor of the node being handled) is the only statement of its block."""
    for i in range(len(ctx.stack) - 1, 0, -1):
        if ctx.stack[i] is stmt:
            block = ctx.stack[i - 1]
            return isinstance(block, cst.IndentedBlock) and len(block.body) == 1
    return False


def _gone(qual: str) -> str:
    """The marker of an optimum-neuron helper left in the code."""
    name = qual.rsplit(".", 1)[-1]
    return f"Replace `{name}` by hand: {_advice(qual)}."


def _advice(qual: str) -> str:
    name = qual.rsplit(".", 1)[-1]
    if name == "is_main_worker":
        return "use int(os.environ.get(\"RANK\", \"0\")) == 0"
    if name == "is_precompilation":
        return "it is always False now"
    if name.startswith("consolidate"):
        return "the migrated training saves whole checkpoints, which need no consolidating"
    return "it is gone under TorchNeuron, remove it"


# ------------------------------------------------------------------------------------------------
# NM205: NeuronAccelerator's arguments
# ------------------------------------------------------------------------------------------------



def _mp_mode(expr: cst.BaseExpression, ctx: PythonContext):
    """The MixedPrecisionMode a mixed_precision_config value names ("NO", "FULL_BF16", "AUTOCAST_BF16"), or None."""
    value = literal(expr)
    if isinstance(value, str):
        return value.upper()
    if value is None:
        return "NO"
    if isinstance(expr, cst.Call) and ctx.qualname(expr.func) in MP_CONFIG and len(expr.args) == 1:
        arg = expr.args[0]
        if arg.keyword is None or arg.keyword.value == "mode":
            return _mp_mode(arg.value, ctx)
    if isinstance(expr, cst.Attribute) and (ctx.qualname(expr.value) or "").endswith("MixedPrecisionMode"):
        return expr.attr.value
    return None


class AcceleratorArguments(PythonRule):
    id = "NM205"
    markers = ACCELERATOR_MARKERS
    title = "NeuronAccelerator(...) arguments -> accelerate.Accelerator (mixed precision mapped, parallelism flagged)"
    fix = "mixed"
    triggers = ("NeuronAccelerator", "ModelParallelismPlugin", "MixedPrecisionConfig")
    owns = (*ACCELERATOR, *MP_PLUGIN, *MP_CONFIG)
    why = """
        NeuronAccelerator took Neuron-only arguments that accelerate.Accelerator rejects:
        `mixed_precision_config` ("AUTOCAST_BF16" is mixed_precision="bf16", "FULL_BF16" trained
        the whole model in bf16), `autocast_backend` (XLA or AMP autocast), `trn_config` /
        `mp_plugin` (neuronx-distributed tensor/pipeline parallelism) and `zero_1` (optimizer
        state sharding). The precision maps onto `mixed_precision=`, the others are dropped, with a
        marker when the behaviour changes: parallelism is set at model load
        (DistributedConfig) or with accelerate.ParallelismConfig.
    """
    before = """
        from optimum.neuron import NeuronAccelerator

        acc = NeuronAccelerator(mixed_precision_config="AUTOCAST_BF16", zero_1=False, gradient_accumulation_steps=4)
    """
    after = """
        from accelerate import Accelerator

        acc = Accelerator(gradient_accumulation_steps=4, mixed_precision="bf16")
    """
    caveats = """
        A mixed_precision_config that is not a literal mode (a variable) gets a marker.
        `ModelParallelismPlugin(...)` and `MixedPrecisionConfig(...)` built outside the call are
        flagged, not rewritten.
    """

    def handlers(self):
        return {cst.Call: self._on_call}

    def _on_call(self, node: cst.Call, ctx: PythonContext) -> None:
        qual = ctx.qualname(node.func)
        if qual in MP_PLUGIN:
            ctx.marker(node, "Pass distributed_config=DistributedConfig(...) to the model load: ModelParallelismPlugin is "
                             "gone.")
            return
        if qual in MP_CONFIG:
            parent = ctx.parent
            if isinstance(parent, cst.Arg) and parent.keyword is not None \
                    and parent.keyword.value == "mixed_precision_config":
                return  # rewritten with the accelerator call
            ctx.marker(node, MIXED_BY_HAND.format(name="MixedPrecisionConfig is gone"))
            return
        if qual not in ACCELERATOR:
            return
        kw = keywords(node)
        plan = ArgPlan()
        cls = "NeuronAccelerator"
        if "mixed_precision_config" in kw:
            plan.drop.add("mixed_precision_config")
            arg = kw["mixed_precision_config"]
            mode = _mp_mode(arg.value, ctx)
            code = ctx.module.code_for_node(arg.value)
            if mode == "AUTOCAST_BF16":
                if "mixed_precision" not in kw:
                    plan.add.append(("mixed_precision", lambda: cst.SimpleString('"bf16"')))
                ctx.finding(arg, f"{cls}: mixed_precision_config={code} -> mixed_precision=\"bf16\" (autocast)")
            elif mode == "NO":
                ctx.finding(arg, f"{cls}: dropped mixed_precision_config={code} (no mixed precision)")
            elif mode == "FULL_BF16":
                ctx.marker(node, f"Load the model with dtype=torch.bfloat16: mixed_precision_config={code} trained it "
                                 "in bf16.")
            else:
                ctx.marker(node, fitted(MIXED_BY_HAND.format(name=f"mixed_precision_config={code} was dropped"),
                                        MIXED_BY_HAND.format(name="mixed_precision_config was dropped")))
        if "autocast_backend" in kw:
            plan.drop.add("autocast_backend")
            ctx.finding(kw["autocast_backend"],
                        f"{cls}: dropped autocast_backend (accelerate autocasts with torch.autocast)")
        for name in ("trn_config", "mp_plugin"):
            if name in kw:
                plan.drop.add(name)
                if literal(kw[name].value) is None:
                    ctx.finding(kw[name], f"{cls}: dropped {name}=None")
                else:
                    ctx.marker(node, _PARALLEL.format(name=name))
        if "zero_1" in kw:
            plan.drop.add("zero_1")
            if literal(kw["zero_1"].value) is False:
                ctx.finding(kw["zero_1"], f"{cls}: dropped zero_1=False (plain data parallelism natively)")
            elif re.search(r"\b(?:pipeline_parallel_size|pp_size)\s*=\s*(?!1\b)[\w(]", ctx.code):
                # DistributedConfig rejects fsdp_size with pp_size > 1 ("Combining FSDP with pipeline parallelism is
                # not supported yet", 5.23): the advice below would raise
                ctx.marker(node, ZERO_1_WITH_PP)
            elif literal(kw["zero_1"].value) is True:
                ctx.marker(node, "Load the model with DistributedConfig(fsdp_size=WORLD_SIZE // tp_size) to shard what "
                                 "zero_1=True sharded.")
            else:
                ctx.marker(node, "If zero_1={value} is true, load the model with DistributedConfig(fsdp_size=WORLD_SIZE // "
                                 "tp_size) instead.".format(value=ctx.module.code_for_node(kw['zero_1'].value)))
        if plan.empty():
            return
        indent, prefix, step = statement_indent(ctx), " " * line_prefix(ctx, node), ctx.module.default_indent
        ctx.replace(node, lambda new: apply_plan(new, plan, MAX_LINE, indent + prefix, step))


# ------------------------------------------------------------------------------------------------
# NM304: static shapes in training scripts
# ------------------------------------------------------------------------------------------------

_STATIC_COMMENT = "# static shapes: on Neuron every new input shape is a compilation of minutes"


class StaticShapes(PythonRule):
    id = "NM304"
    title = "Training scripts: torch._dynamo.config.automatic_dynamic_shapes = False at the top of main()"
    fix = "auto"
    triggers = ("NeuronTrainer", "NeuronSFTTrainer", "NeuronTrainingArguments", "NeuronSFTConfig", "TrainiumTrainer",
                "TrainiumTrainingArguments", "Seq2SeqNeuronTrainer", "Seq2SeqNeuronTrainingArguments")
    why = """
        The migrated Trainer runs with torch_compile=True on Neuron, and every new input shape is
        a new compilation that takes minutes. By default torch.compile, after seeing a second
        shape, recompiles the graph with dynamic dimensions, which the Neuron compiler handles
        poorly; turning automatic dynamic shapes off keeps one static graph per shape (with the
        padding and drop_last settings, one graph in all). The setting goes first in `main()`,
        before any model is compiled.
    """
    before = """
        from optimum.neuron import NeuronTrainer

        def main():
            trainer = NeuronTrainer(model=model)
            trainer.train()
    """
    after = """
        import torch
        from transformers import Trainer

        def main():
            # static shapes: on Neuron every new input shape is a compilation of minutes
            torch._dynamo.config.automatic_dynamic_shapes = False
            trainer = Trainer(model=model)
            trainer.train()
    """
    caveats = """
        Only a module-level `def main()` is edited; scripts that train at module level or in
        another function get nothing (set it yourself before the trainer is built). Nothing is
        done when the module already mentions automatic_dynamic_shapes.
    """

    def handlers(self):
        # the module is seen first: `import torch` then goes above the imports other rules rewrite
        return {cst.Module: self._on_module}

    def _on_module(self, module: cst.Module, ctx: PythonContext) -> None:
        if DYNAMIC_SHAPES in ctx.source:
            return
        if not any(b.qualified in TRAINING_SCRIPT for b in ctx.imports.all_bindings()):
            return
        node = next((s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == "main"), None)
        if node is None or not isinstance(node.body, cst.IndentedBlock) or node.asynchronous is not None:
            return
        torch = ctx.imports.local_for("torch")
        local_import = False
        if torch is None:
            if not ctx.imports.is_free("torch", "torch"):
                return
            # where the optimum-neuron import was (third-party block), at module level
            anchor = next((b for b in ctx.imports.all_bindings()
                           if b.qualified in TRAINING_SCRIPT and b.toplevel and b.alias is not None), None)
            anchor = anchor or ctx.imports.first_import
            torch = "torch"
            if anchor is None:
                local_import = True  # the script imports inside main(): so does this
            else:
                ctx.add_import("torch", anchor=anchor)

        def build(new: cst.FunctionDef) -> cst.FunctionDef:
            stmt = cst.parse_statement(f"{torch}._dynamo.config.{DYNAMIC_SHAPES} = False\n")
            comment = [cst.EmptyLine(indent=True, comment=cst.Comment(_STATIC_COMMENT))]
            added = [stmt.with_changes(leading_lines=comment)]
            if local_import:
                added.insert(0, cst.parse_statement("import torch\n"))
            body = list(new.body.body)
            at = 1 if body and _is_docstring(body[0]) else 0
            return new.with_changes(body=new.body.with_changes(body=[*body[:at], *added, *body[at:]]))

        ctx.replace(node, build)
        ctx.finding(node, "main() starts with torch._dynamo.config.automatic_dynamic_shapes = False (each new "
                          "shape is a Neuron compilation of minutes)")


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


RULES = (TrainingHelpers, AcceleratorArguments, StaticShapes)
