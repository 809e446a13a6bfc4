"""NM414: neuronx-distributed (NxD) building blocks -> DeviceMesh / DTensor / FSDP2 / DCP.

NxD's parallel state, parallel layers, model/optimizer wrappers and checkpoints have native
equivalents whose shape differs (a ``DeviceMesh`` object instead of global state, a
``parallelize_module`` plan instead of layer classes, ``DistributedConfig`` for transformers
models, ``torch.distributed.checkpoint`` for sharded checkpoints), so each use gets one
actionable marker naming them; ``move_model_to_device(model, device)`` becomes
``model.to(device)``. Facts: source-apis §4.4 (neuronx-distributed 0.15).
"""

from __future__ import annotations

import re

import libcst as cst

from codemods.xla.base import _XlaRule, _bind_args, _code, _device, _expr, _is_reference, short_name
from migrator.model import fitted
from migrator.rules import NameClash, PythonContext
from migrator.tree import walk

NXD = "neuronx_distributed"
PS = f"{NXD}.parallel_layers.parallel_state"
LAYERS = f"{NXD}.parallel_layers.layers"
MOVE = f"{NXD}.utils.model_utils.move_model_to_device"
GET_DEVICE = f"{NXD}.utils.get_device"

_MESH = ('mesh = torch.distributed.device_mesh.init_device_mesh("neuron", (dp, tp), '
         'mesh_dim_names=("dp", "tp")) once, then')
_PS_NATIVE = {
    "initialize_model_parallel": (f"create the mesh: {_MESH} pass `mesh` (or mesh[\"tp\"]) where the parallel "
                                  "state was queried; for a transformers model: "
                                  "from_pretrained(..., distributed_config=DistributedConfig(tp_size=tp))"),
    "get_tensor_model_parallel_size": f'{_MESH} mesh["tp"].size()',
    "get_tensor_model_parallel_rank": f'{_MESH} mesh["tp"].get_local_rank()',
    "get_tensor_model_parallel_group": f'{_MESH} mesh["tp"].get_group()',
    "get_data_parallel_size": f'{_MESH} mesh["dp"].size()',
    "get_data_parallel_rank": f'{_MESH} mesh["dp"].get_local_rank()',
    "get_data_parallel_group": f'{_MESH} mesh["dp"].get_group()',
    "model_parallel_is_initialized": "`mesh is not None` (the DeviceMesh you created), or dist.is_initialized()",
    "destroy_model_parallel": "dist.destroy_process_group() at the end of the run",
}
_TP_PLAN = ('torch.distributed.tensor.parallel.parallelize_module(model, mesh["tp"], '
            '{"<name>": ColwiseParallel() | RowwiseParallel()}) (for a transformers model its built-in tp_plan: '
            "DistributedConfig(tp_size=N))")
_LAYER_NATIVE = {
    "ColumnParallelLinear": f"a plain nn.Linear sharded with ColwiseParallel(): {_TP_PLAN}",
    "RowParallelLinear": f"a plain nn.Linear sharded with RowwiseParallel(): {_TP_PLAN}",
    "ParallelEmbedding": f"a plain nn.Embedding sharded with RowwiseParallel(): {_TP_PLAN}",
}
_OTHER_NATIVE = {
    f"{NXD}.modules.qkv_linear.GQAQKVColumnParallelLinear":
        f"separate q/k/v nn.Linear layers, each sharded with ColwiseParallel(): {_TP_PLAN}",
    f"{NXD}.parallel_layers.loss_functions.parallel_cross_entropy":
        "F.cross_entropy inside `with torch.distributed.tensor.parallel.loss_parallel():` (sharded logits)",
    f"{NXD}.neuronx_distributed_config":
        "transformers.distributed.DistributedConfig(tp_size=..., fsdp_size=...) given to from_pretrained",
    f"{NXD}.initialize_parallel_model":
        "the model sharded with parallelize_module on a DeviceMesh and wrapped in DDP / FSDP2 fully_shard (a model "
        "built from its own layers or a config); from_pretrained(..., distributed_config=DistributedConfig(tp_size=..., "
        "fsdp_size=...)) only where it loads a Transformers checkpoint",
    f"{NXD}.initialize_parallel_optimizer":
        "the torch.optim optimizer over the same parameter groups, on a model wrapped in DDP or FSDP2 "
        "(NxDOptimizer all-reduced the data-parallel gradients and clipped them: clip_grad_norm_ yourself, "
        "its grad_norm is what that returns)",
    f"{NXD}.save_checkpoint": "torch.distributed.checkpoint.save({\"model\": ..., \"optim\": ...}, checkpoint_id=path) (DCP)",
    f"{NXD}.load_checkpoint": "torch.distributed.checkpoint.load(state_dict, checkpoint_id=path) (DCP)",
    f"{NXD}.has_checkpoint": "os.path.isdir(path) on the DCP checkpoint directory",
    f"{NXD}.optimizer.NeuronZero1Optimizer":
        "torch.distributed.optim.ZeroRedundancyOptimizer(params, optimizer_class=...) or FSDP2 fully_shard",
}
# Every path below was read in aws-neuron/neuronx-distributed @ VERIFIED_COMMIT (release 2.29;
# the same re-exports exist at tag v2.26.0 = NxD 0.15, the version optimum-neuron 0.4.5 pins).
# ctx.qualname follows only the user's own imports, so each re-export NxD defines is listed:
# ALIASES maps the re-exported path onto the defining one (tests/test_nxd_paths.py pins them).
VERIFIED_COMMIT = "fbac349b61a3adbb123c2983835af692840ff62f"
PL = f"{NXD}.parallel_layers"
MAPPINGS = f"{PL}.mappings"
ALIASES: dict[str, str] = {
    # neuronx_distributed/__init__.py: from .trainer.checkpoint / .trainer.trainer import ...
    **{f"{NXD}.trainer.{n}": f"{NXD}.{n}" for n in (
        "neuronx_distributed_config", "initialize_parallel_model", "initialize_parallel_optimizer",
        "save_checkpoint", "load_checkpoint")},  # trainer/__init__.py
    **{f"{NXD}.trainer.trainer.{n}": f"{NXD}.{n}" for n in (
        "neuronx_distributed_config", "initialize_parallel_model", "initialize_parallel_optimizer")},
    **{f"{NXD}.trainer.checkpoint.{n}": f"{NXD}.{n}" for n in (
        "save_checkpoint", "load_checkpoint", "has_checkpoint")},
    # parallel_layers/__init__.py re-exports
    f"{PL}.initialize_model_parallel": f"{PS}.initialize_model_parallel",
    f"{PL}.parallel_cross_entropy": f"{PL}.loss_functions.parallel_cross_entropy",
    **{f"{PL}.{n}": f"{LAYERS}.{n}" for n in ("ColumnParallelLinear", "RowParallelLinear", "ParallelEmbedding")},
    **{f"{PL}.{n}": f"{MAPPINGS}.{n}" for n in (
        "copy_to_tensor_model_parallel_region", "reduce_from_tensor_model_parallel_region",
        "scatter_to_tensor_model_parallel_region", "gather_from_tensor_model_parallel_region")},
    f"{PL}.move_model_to_device": MOVE,  # deprecated; calls utils.model_utils.move_model_to_device
    f"{PL}.utils.move_model_to_device": MOVE,
    f"{PL}.clip_grad_norm": f"{PL}.grads.clip_grad_norm",
    f"{PL}.save": f"{PL}.checkpointing.save",
    f"{PL}.load": f"{PL}.checkpointing.load",
    f"{PL}.model_parallel_xla_manual_seed": f"{PL}.random.model_parallel_xla_manual_seed",
    f"{PL}.get_xla_rng_tracker": f"{PL}.random.get_xla_rng_tracker",
    # optimizer/__init__.py
    f"{NXD}.optimizer.zero_redundancy_optimizer.NeuronZero1Optimizer": f"{NXD}.optimizer.NeuronZero1Optimizer",
    # trace/__init__.py: from .trace import parallel_model_load, parallel_model_save, parallel_model_trace
    **{f"{NXD}.trace.{n}": f"{NXD}.trace.trace.{n}" for n in (
        "parallel_model_trace", "parallel_model_save", "parallel_model_load")},
    # modules/moe/__init__.py
    f"{NXD}.modules.moe.MoE": f"{NXD}.modules.moe.model.MoE",
    f"{NXD}.modules.moe.ExpertMLPs": f"{NXD}.modules.moe.expert_mlps.ExpertMLPs",
    f"{NXD}.modules.moe.RouterTopK": f"{NXD}.modules.moe.routing.RouterTopK",
    f"{NXD}.modules.moe.RouterSinkhorn": f"{NXD}.modules.moe.routing.RouterSinkhorn",
    f"{NXD}.modules.moe.load_balancing_loss_func": f"{NXD}.modules.moe.loss_function.load_balancing_loss_func",
    # lightning/__init__.py
    **{f"{NXD}.lightning.{n}": f"{NXD}.lightning.{m}.{n}" for n, m in (
        ("NeuronXLAAccelerator", "accelerator"), ("NeuronCheckpointIO", "checkpoint_io"),
        ("NeuronTensorBoardLogger", "logger"), ("NeuronLTModule", "module"),
        ("NeuronXLAPrecisionPlugin", "precision_plugin"), ("NeuronTQDMProgressBar", "progress_bar"),
        ("NeuronXLAStrategy", "strategy"), ("NeuronHooksCallback", "neuron_hooks_callback"))},
    # pipeline/__init__.py
    f"{NXD}.pipeline.NxDPPModel": f"{NXD}.pipeline.model.NxDPPModel",
}
for _name in _LAYER_NATIVE:
    _OTHER_NATIVE[f"{LAYERS}.{_name}"] = _LAYER_NATIVE[_name]

# ---- names NM900 used to flag: hand-written tensor-parallel regions, NxD utilities, Lightning,
# MoE, pipeline and inference tracing. Each becomes a marker naming the concrete native code.
_DT = "torch.distributed.tensor"
_MAPPING_NATIVE = {
    # semantics checked on CPU/gloo in tests/test_nxd_paths.py (forward and backward)
    "copy_to_tensor_model_parallel_region":
        f'{_DT}.DTensor.from_local(x, mesh["tp"], [Replicate()]).to_local(grad_placements=[Partial()]) '
        "(identity forward, all-reduced gradient); a layer sharded with ColwiseParallel() does this itself",
    "reduce_from_tensor_model_parallel_region":
        f'{_DT}.DTensor.from_local(x, mesh["tp"], [Partial()]).full_tensor() '
        "(all-reduce forward, identity gradient); a layer sharded with RowwiseParallel() does this itself",
    "reduce_from_context_model_parallel_region":
        f'{_DT}.DTensor.from_local(x, mesh["cp"], [Partial()]).full_tensor() (all-reduce forward, identity gradient)',
    "scatter_to_tensor_model_parallel_region":
        f'{_DT}.DTensor.from_local(x, mesh["tp"], [Replicate()]).redistribute(mesh["tp"], [Shard(-1)]).to_local() '
        "(this rank's slice of the last dim; gradient all-gathered)",
    "gather_from_tensor_model_parallel_region":
        f'{_DT}.DTensor.from_local(x, mesh["tp"], [Shard(-1)]).full_tensor() '
        "(all-gather along the last dim; gradient split); ColwiseParallel(use_local_output=True, "
        "output_layouts=Replicate()) does this itself",
    "scatter_to_sequence_parallel_region":
        f'{_DT}.DTensor.from_local(x, mesh["tp"], [Replicate()]).redistribute(mesh["tp"], [Shard(seq_dim)]).to_local() '
        "(or SequenceParallel() in the parallelize_module plan)",
    "gather_from_sequence_parallel_region":
        f'{_DT}.DTensor.from_local(x, mesh["tp"], [Shard(seq_dim)]).full_tensor() '
        "(or SequenceParallel() in the parallelize_module plan)",
    "reduce_scatter_to_sequence_parallel_region":
        f'{_DT}.DTensor.from_local(x, mesh["tp"], [Partial()]).redistribute(mesh["tp"], [Shard(seq_dim)]).to_local() '
        "(or RowwiseParallel(output_layouts=Shard(1)) + SequenceParallel() in the plan)",
}
_MAPPING_DEFAULT = (
    f'DTensor redistribution over the mesh ({_DT}.DTensor.from_local(x, mesh["tp"], [...]).redistribute(...) with '
    "Shard/Replicate/Partial placements), or the layer plan of parallelize_module that inserts it"
)
_UTIL_NATIVE = {
    f"{NXD}.utils.get_device": 'torch.device("neuron") (per rank: torch.device("neuron", LOCAL_RANK))',
    f"{NXD}.utils.mark_step": "no call at all (delete it: TorchNeuron runs eagerly, there is no graph to cut)",
    f"{NXD}.utils.master_print": "print(...) under `if dist.get_rank() == 0:`",
    f"{NXD}.utils.cpu_mode":
        "the branch that runs plain torch ops, on the neuron device (NXD_CPU_MODE chose between that path and the "
        "XLA device's custom calls, which TorchNeuron does not have)",
    f"{NXD}.utils.model_utils.init_on_device":
        '`with torch.device("meta"):` to build the model without memory, then model.to_empty(device=...)',
    f"{NXD}.utils.model_utils.get_platform_lnc": "no call (the logical NeuronCore config is not set from Python)",
    f"{PL}.utils.requires_init_pg_override":
        "False (it tested for torch 2.0; the native stack runs torch >= 2.9): drop the branch",
    f"{PL}.utils.is_pjrt_device": "False (it read PJRT_DEVICE, an XLA runtime setting): drop the branch",
    f"{PL}.utils.divide": "numerator // denominator (after checking numerator % denominator == 0)",
    f"{PL}.utils.split_tensor_along_last_dim": "torch.tensor_split(tensor, num_partitions, dim=-1)",
    f"{PL}.utils.get_local_world_size": 'int(os.environ["LOCAL_WORLD_SIZE"]) (set by torchrun)',
    f"{PL}.utils.move_all_tensor_to_cpu":
        "torch.utils._pytree.tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, data)",
    f"{PL}.grads.clip_grad_norm":
        "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) (it handles DTensor/FSDP2 parameters)",
    f"{PL}.checkpointing.save":
        "torch.distributed.checkpoint.save(<the same state dict>, checkpoint_id=path) (DCP)",
    f"{PL}.checkpointing.load": "torch.distributed.checkpoint.load(state_dict, checkpoint_id=path) (DCP)",
    f"{PL}.random.model_parallel_xla_manual_seed":
        "torch.manual_seed(seed) (DTensor random ops keep sharded dropout consistent across the mesh)",
    f"{PL}.random.get_xla_rng_tracker": "torch.manual_seed / torch.random.fork_rng: there is no XLA RNG tracker",
}
#: some helpers wrap a torch call, others reimplement one (NxD's cumsum is a float64 matmul loop): the marker
#: names both ways out, not "the call it wraps"
def _destroys_group(ctx: PythonContext) -> bool:
    """Whether the function around the node being handled (else the module) calls destroy_process_group itself."""
    scope = next((n for n in reversed(ctx.stack) if isinstance(n, cst.FunctionDef)), ctx.module)
    return any(isinstance(n, cst.Call) and (n.func.attr.value if isinstance(n.func, cst.Attribute) else
                                            getattr(n.func, "value", None)) == "destroy_process_group"
               for n in walk(scope))


UTIL_MARKER = "Replace the neuronx_distributed helpers used here with torch code, or copy their source into the project."
_SENTENCE_BREAK = re.compile(r"[.!?;]\s+[A-Z`\"'(]")
_UTIL_DEFAULT = ("torch / torch.distributed code doing the same (DeviceMesh, DTensor, nn.Module methods), or a copy "
                 "of its source where it is plain torch")
_MOE_DEFAULT = (
    "the model's own MoE block from transformers (e.g. MixtralSparseMoeBlock), with expert parallelism from "
    "from_pretrained(..., distributed_config=DistributedConfig(ep_size=N))"
)
_MOE_NATIVE = {
    f"{NXD}.modules.moe.loss_function.load_balancing_loss_func":
        "transformers.models.mixtral.modeling_mixtral.load_balancing_loss_func(router_logits, num_experts, top_k) "
        "(or output_router_logits=True: the model adds the aux loss itself)",
}
_LIGHTNING_NATIVE = {
    f"{NXD}.lightning.module.NeuronLTModule": "lightning.pytorch.LightningModule",
    f"{NXD}.lightning.logger.NeuronTensorBoardLogger": "lightning.pytorch.loggers.TensorBoardLogger",
    f"{NXD}.lightning.progress_bar.NeuronTQDMProgressBar": "lightning.pytorch.callbacks.TQDMProgressBar",
    f"{NXD}.lightning.checkpoint_io.NeuronCheckpointIO": "Lightning's default checkpoint IO (drop the argument)",
    f"{NXD}.lightning.precision_plugin.NeuronXLAPrecisionPlugin":
        'nothing (fp32, its default), or Trainer(precision="bf16-mixed") where it had mixed_precision_enabled=True',
    f"{NXD}.lightning.neuron_hooks_callback.NeuronHooksCallback": "no callback (drop it)",
}
_LIGHTNING_DEFAULT = (
    "a standard Lightning Trainer strategy (DDP / FSDP / ModelParallelStrategy with parallelize_module); "
    "Lightning support for the neuron device is unverified"
)
_TRACE_NATIVE = (
    "the model itself, sharded with parallelize_module over init_device_mesh(\"neuron\", (tp,)) under torchrun "
    "--nproc_per_node=tp (or from_pretrained(..., distributed_config=DistributedConfig(tp_size=tp))) and compiled "
    "with torch.compile(model, backend=\"neuron\"); no traced artifact is saved or loaded: save the weights "
    "(save_pretrained / DCP) and compile again"
)
_PIPELINE_NATIVE = (
    "torch.distributed.pipelining (pipeline(), PipelineStage, ScheduleGPipe / Schedule1F1B), or "
    "from_pretrained(..., distributed_config=DistributedConfig(pp_size=N))"
)
_OTHER_NATIVE.update(_UTIL_NATIVE)
_OTHER_NATIVE.update(_MOE_NATIVE)
_OTHER_NATIVE.update(_LIGHTNING_NATIVE)
_OTHER_NATIVE.update({f"{MAPPINGS}.{n}": v for n, v in _MAPPING_NATIVE.items()})
_OTHER_NATIVE.update({
    f"{NXD}.kernels.flash_attn.nki_flash_attn_func":
        "torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=...) (attn_implementation=\"sdpa\")",
    f"{NXD}.trace.mock_torchdist.mock_distributed":
        'a fake process group: torch.distributed.init_process_group("fake", store=FakeStore(), rank=r, world_size=n) '
        "with FakeStore from torch.testing._internal.distributed.fake_pg (it records no collective)",
    # it rewrote a Hugging Face state dict's keys for NxD's parallel layers (fused or GQA q/k/v, MoE experts) before
    # sharding: it goes with the NxD model, whose Transformers twin loads the checkpoint as it is
    f"{PL}.checkpointing._invoke_preshard_hook":
        "nothing once the NxD model it prepares is a Transformers model loaded with from_pretrained (the hook "
        "converted a Hugging Face state dict for NxD's parallel layers; deleting it alone leaves their weights unloaded)",
    # saving the traced artifact: nothing is traced ahead of time (the model compiles at its first call)
    **{f"{NXD}.trace{sub}.parallel_model_save":
       "nothing (no traced model is kept: the model compiles at its first call; save its weights if needed)"
       for sub in ("", ".trace")},
    f"{NXD}.ModelBuilder": _TRACE_NATIVE,
    f"{NXD}.shard_checkpoint": _TRACE_NATIVE,
    f"{NXD}.NxDModel": _TRACE_NATIVE,
})
#: owned subtrees (NM900 leaves them to this rule) and the advice for a name no entry above covers
FAMILIES = (
    (f"{MAPPINGS}.", _MAPPING_DEFAULT),
    (f"{PL}.utils.", _UTIL_DEFAULT),
    (f"{PL}.grads.", _UTIL_DEFAULT),
    (f"{PL}.random.", _UTIL_DEFAULT),
    (f"{PL}.checkpointing.", "torch.distributed.checkpoint.save/load (DCP)"),
    (f"{NXD}.utils.", _UTIL_DEFAULT),
    (f"{NXD}.modules.moe.", _MOE_DEFAULT),
    (f"{NXD}.lightning.", _LIGHTNING_DEFAULT),
    (f"{NXD}.trace.", _TRACE_NATIVE),
    (f"{NXD}.pipeline.", _PIPELINE_NATIVE),
)

NATIVES = {**_OTHER_NATIVE, MOVE: "model.to(device)"}


#: the few words a marker names the twin with, where the full form (``native_for``) is long
_SHORT_NATIVE = {
    "parallel_model_save": "nothing: the model compiles at its first call (save its weights if needed)",
    "neuronx_distributed_config": "DistributedConfig(tp_size=..., fsdp_size=...) given to from_pretrained",
    "initialize_parallel_model": "parallelize_module, or from_pretrained(distributed_config=...) for a checkpoint",
    "initialize_parallel_optimizer": "the optimizer over the same groups on a DDP/FSDP model, with clip_grad_norm_",
    "parallel_cross_entropy": "F.cross_entropy inside `with loss_parallel():`",
    "ColumnParallelLinear": "an nn.Linear sharded with ColwiseParallel() by parallelize_module",
    "RowParallelLinear": "an nn.Linear sharded with RowwiseParallel() by parallelize_module",
    "ParallelEmbedding": "an nn.Embedding sharded with RowwiseParallel() by parallelize_module",
    "GQAQKVColumnParallelLinear": "q/k/v nn.Linear layers, each sharded with ColwiseParallel()",
    "requires_init_pg_override": "False and drop the branch",
    "MoE": "the model's own transformers MoE block (e.g. MixtralSparseMoeBlock)",
    "load_balancing_loss_func": "transformers' mixtral load_balancing_loss_func",
    "cpu_mode": "the branch running plain torch ops, on the neuron device (the other one was NxD's XLA path)",
    "mock_distributed": 'init_process_group("fake", store=FakeStore(), ...) (a fake process group)',
    "NeuronXLAPrecisionPlugin": 'nothing (fp32), or precision="bf16-mixed" if it had mixed_precision_enabled=True',
    "NeuronXLAStrategy": "a standard Lightning strategy (DDP / FSDP / ModelParallelStrategy)",
    "mark_step": "nothing (delete it: TorchNeuron runs eagerly)",
    "_invoke_preshard_hook": "nothing once the NxD model is a Transformers one (from_pretrained loads it)",
    "<mapping>": 'a DTensor redistribution over mesh["tp"] (or the parallelize_module plan)',
    "<trace>": "the model sharded with parallelize_module and compiled with torch.compile",
}


#: the layers whose keyword, set to True, makes their output whole (gathered) on every rank: (keyword, NxD's
#: default for it; neuronx_distributed/parallel_layers/layers.py: ColumnParallelLinear gathers unless told not to)
_GATHERED = {"ColumnParallelLinear": ("gather_output", True), "ParallelEmbedding": ("shard_across_embedding", False)}


#: the name of a fused query/key/value projection (`self.Wqkv`, `qkv_proj`, `query_key_value`)
_FUSED_QKV = re.compile(r"qkv|query_key_value", re.IGNORECASE)


def _assigned_to(ctx: PythonContext) -> str:
    """The code of the target the node being handled is assigned to (``self.Wqkv = ColumnParallelLinear(...)``),
    or ""."""
    for node in reversed(ctx.stack):
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            return ctx.module.code_for_node(node.targets[0].target)
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return ""
    return ""


MOVE_MARKER = "Re-tie shared weights after this move if the model has any (model.tie_weights()): .to() may copy them."


#: initialize_model_parallel's arguments that add a mesh dimension beside dp and tp (NxD parallel_state.py;
#: tensor_model_parallel_size comes first, the others after it)
_OTHER_SIZES = frozenset({"pipeline_model_parallel_size", "context_parallel_size", "expert_model_parallel_size"})


def _only_tp(call: cst.CSTNode | None) -> bool:
    """Whether an ``initialize_model_parallel(...)`` call sets no size but the tensor-parallel one (a mesh of dp
    and tp is then the whole layout): any other argument, a positional second one, or ``*args``/``**kw`` is
    another dimension, or may be."""
    if not isinstance(call, cst.Call):
        return False
    for i, arg in enumerate(call.args):
        if arg.star or (arg.keyword is None and i > 0):
            return False
        if arg.keyword is not None and arg.keyword.value in _OTHER_SIZES and not (
                isinstance(arg.value, cst.Integer) and arg.value.value == "1"):
            return False
    return True


_MESH_ANY = ('Replace this with one init_device_mesh("neuron", ...) call, one dimension per parallel size, '
             'and pass the mesh on.')
_MESH_DP_TP = 'Replace this with one init_device_mesh("neuron", (dp, tp)) call and pass the mesh where needed.'


def _ps_marker(short: str, native: str, call: cst.CSTNode | None = None) -> str:
    """The one-line marker for a parallel-state query ``short`` (``native``: its long form; ``call``: the call
    of it, where it is called)."""
    if short == "initialize_model_parallel":
        return _MESH_DP_TP if _only_tp(call) else _MESH_ANY
    if native.startswith(_MESH):
        return fitted(f"Replace {short} with {native[len(_MESH):].strip()} of a DeviceMesh made once by init_device_mesh.",
                      f"Replace {short} with a query of a DeviceMesh (init_device_mesh).",
                      "Replace this with a query of a DeviceMesh (init_device_mesh).")
    message = f"Replace {short} with {native}."
    return fitted(message, f"Replace {short} with a query of a DeviceMesh (init_device_mesh).",
                  "Replace this with a query of a DeviceMesh (init_device_mesh).")


def canonical(qual: str) -> str:
    """The defining NxD path of ``qual`` (a re-export resolves to where NxD defines the name)."""
    return ALIASES.get(qual, qual)


def native_for(qual: str) -> str | None:
    """What a (canonical) NxD name becomes, or None when no entry or family covers it."""
    if qual in NATIVES:
        return NATIVES[qual]
    for prefix, advice in FAMILIES:
        if qual.startswith(prefix):
            return advice
    return None


class NxdBuildingBlocks(_XlaRule):
    id = "NM414"
    title = "neuronx-distributed parallel state / layers / wrappers / checkpoints -> DeviceMesh, DTensor, DCP"
    fix = "mixed"
    triggers = ("neuronx_distributed",)
    owns = (PS, f"{PS}.*", *NATIVES, *ALIASES, *(prefix + "*" for prefix, _ in FAMILIES))
    natives = NATIVES
    why = """
        neuronx-distributed does not exist on TorchNeuron. Its global parallel state becomes a
        `DeviceMesh` (`init_device_mesh("neuron", (dp, tp), mesh_dim_names=("dp", "tp"))`, then
        `mesh["tp"].size()`, `.get_local_rank()`, `.get_group()`); its parallel layers become
        plain `nn.Linear` / `nn.Embedding` sharded by `parallelize_module` with
        `ColwiseParallel` / `RowwiseParallel` (a transformers model has a built-in plan:
        `DistributedConfig(tp_size=N)`); `initialize_parallel_model/optimizer` become
        `from_pretrained(..., distributed_config=DistributedConfig(...))` and a plain optimizer;
        `save_checkpoint/load_checkpoint` become `torch.distributed.checkpoint` (DCP);
        `parallel_cross_entropy` becomes `F.cross_entropy` under `loss_parallel()`. These change
        the program's structure, so each use gets a marker; `move_model_to_device(model, device)`
        becomes `model.to(device)` and `neuronx_distributed.utils.get_device()` the `neuron` device.
        The hand-written tensor-parallel regions of `parallel_layers.mappings`
        (`copy_to_` / `reduce_from_` / `scatter_to_` / `gather_from_tensor_model_parallel_region`)
        get the DTensor code with the same forward and backward (`DTensor.from_local(x,
        mesh["tp"], [...])` with `Replicate` / `Partial` / `Shard(-1)` placements); NxD
        utilities, Lightning classes, MoE modules, pipeline and inference tracing
        (`parallel_model_trace/load`, `ModelBuilder`) get the native replacement by name.
        Re-exports (`neuronx_distributed.parallel_layers.X`, `neuronx_distributed.trainer.X`, ...)
        are matched like the names they re-export.
    """
    before = """
        from neuronx_distributed.parallel_layers import parallel_state
        from neuronx_distributed.utils.model_utils import move_model_to_device

        move_model_to_device(model, device)
        tp = parallel_state.get_tensor_model_parallel_size()
    """
    after = """
        # TODO(neuron-migrate NM992): Remove this import once the TODOs on `parallel_state` below are done.
        from neuronx_distributed.parallel_layers import parallel_state

        # TODO(neuron-migrate NM414): Re-tie shared weights after this move if the model has any (model.tie_weights()): .to() may copy them.
        model.to(device)
        # TODO(neuron-migrate NM414): Replace get_tensor_model_parallel_size with mesh["tp"].size() of a DeviceMesh made once by init_device_mesh.
        tp = parallel_state.get_tensor_model_parallel_size()
    """
    caveats = """
        Only `move_model_to_device(model, device)` and `utils.get_device()` are rewritten; the move gets a
        marker: the helper kept shared parameters shared through it, and a plain `.to()` onto a device whose
        tensors cannot take a CPU tensor's storage in place makes new Parameter objects. The
        parallel-state queries are not derived from the world size: with tensor parallelism the data-parallel size is
        `world // tp`, which only a mesh knows. Uses of `neuronx_distributed` names no entry
        covers are flagged by NM900.
    """

    def _on_reference(self, node, ctx: PythonContext) -> None:
        parent = ctx.parent
        if isinstance(node, cst.Name) and not _is_reference(node, parent):
            return
        if isinstance(parent, cst.Attribute) and parent.value is node:
            return  # the outer attribute is handled
        qual = ctx.qualname(node)  # type: ignore[arg-type]
        if qual is None or not qual.startswith(NXD + "."):
            return
        name = canonical(qual)
        if name.startswith(PS + "."):
            short = name[len(PS) + 1:]
            native = _PS_NATIVE.get(short, f"{_MESH} the matching mesh[...] query")
            call = parent if isinstance(parent, cst.Call) and parent.func is node else None
            if short == "destroy_model_parallel" and _destroys_group(ctx):
                # the code destroys the process group itself: replacing this call with another destroy raises
                ctx.marker(node, "Delete this call: the code destroys the process group itself.",
                           detail=f"{qual} (NxD global parallel state): nothing to replace, the process group "
                                  "is destroyed by the code's own dist.destroy_process_group()")
                return
            message = _ps_marker(short, native, call)
            # the sizes' values decide the wording, and other rules rewrite them (NM207 reads a trn_config's
            # pipeline size as 1): the wording an earlier run wrote stands
            ctx.marker(node, message, detail=f"{qual} (NxD global parallel state): {native}",
                       same_as=[m for m in (_MESH_ANY, _MESH_DP_TP) if m != message])
            return
        native = native_for(name)
        if native is None:
            return
        call = parent if isinstance(parent, cst.Call) and parent.func is node else None
        if name in (MOVE, GET_DEVICE) and call is not None:
            try:
                problem = self._move(call, ctx, qual) if name == MOVE else self._get_device(call, node, ctx, qual)
            except NameClash as exc:
                problem = str(exc)
            if problem:
                ctx.marker(call, fitted(f"Rewrite this {short_name(qual)} call by hand: {problem}.",
                                        f"Rewrite this {short_name(qual)} call by hand (see the report for why)."),
                           detail=f"{qual} could not be rewritten here ({problem}); native: {native}.")
            return
        detail = f"{qual} has no native twin: use {native}"
        if native == _UTIL_DEFAULT:
            # one marker per function for the helpers without a specific twin (not one per line)
            scope = next((n for n in reversed(ctx.stack) if isinstance(n, (cst.FunctionDef, cst.ClassDef))), None)
            seen = ctx.local_state().setdefault("util_scopes", set())
            if id(scope) in seen:
                return
            seen.add(id(scope))
            ctx.marker(node, UTIL_MARKER, detail=detail)
            return
        last = qual.rsplit(".", 1)[-1]
        keyword, default = _GATHERED.get(last, (None, False))
        given = None if call is None else next(
            (a.value for a in call.args if a.keyword is not None and a.keyword.value == keyword), None)
        if keyword is not None and call is not None and given is not None and not (
                isinstance(given, cst.Name) and given.value in ("True", "False")):
            # whether the output is whole is decided at run time: the plan's layout depends on it
            layer = "nn.Linear" if "Linear" in last else "nn.Embedding"
            ctx.marker(node, f"Replace {last} with an {layer} sharded by ColwiseParallel(), "
                             "output_layouts=Replicate() if it gathers.", detail=detail)
            return
        if keyword is not None and call is not None and (
                (isinstance(given, cst.Name) and given.value == "True") or (given is None and default)):
            # the layer's output is whole on every rank: the plan must replicate it too
            ctx.marker(node, f"Replace {last} with an nn.{'Linear' if 'Linear' in last else 'Embedding'} sharded by "
                             "ColwiseParallel(output_layouts=Replicate()).", detail=detail)
            return
        if last == "ColumnParallelLinear" and call is not None and _FUSED_QKV.search(_assigned_to(ctx)):
            # one weight holding q, k and v, whose output stays sharded: ColwiseParallel() would give each rank a
            # contiguous block of it (all q on the first ranks), where NxD sharded each of the three (a gathered
            # output, above, is whole whatever the blocks: replicated)
            ctx.marker(node, "Split this fused qkv layer into q, k and v nn.Linear layers, each sharded by "
                             "ColwiseParallel().", detail=detail)
            return
        if last == "RowParallelLinear" and call is not None:
            # input_is_parallel defaults to False: the layer takes the whole input and slices it itself, where
            # RowwiseParallel() expects it sharded (input_layouts=Shard(-1)): the matmul fails on shape
            given = next((a.value for a in call.args if a.keyword is not None
                          and a.keyword.value == "input_is_parallel"), None)
            if not (isinstance(given, cst.Name) and given.value == "True"):
                layouts = ("" if given is None or isinstance(given, cst.Name) and given.value == "False"
                           else " unless input_is_parallel")
                ctx.marker(node, f"Replace RowParallelLinear with {'nn.Linear' if layouts else 'an nn.Linear'} sharded by "
                                 f"RowwiseParallel(input_layouts=Replicate()){layouts}.", detail=detail)
                return
        short = _SHORT_NATIVE.get(last) or (_SHORT_NATIVE["<mapping>"] if name.startswith(MAPPINGS + ".") else None)
        short = short or (_SHORT_NATIVE["<trace>"] if native == _TRACE_NATIVE else native)
        message = f"Replace {last} with {short}."
        if len(message) > 120 or _SENTENCE_BREAK.search(message.rstrip(".")):
            message = fitted(f"Replace {last} by hand: it has no native twin (see `neuron-migrate explain NM414`).",
                             "Replace this by hand: it has no native twin (see `neuron-migrate explain NM414`).")
        ctx.marker(node, message, detail=detail)

    def _get_device(self, call: cst.Call, func: cst.CSTNode, ctx: PythonContext, qual: str) -> str | None:
        if call.args:
            return "unsupported arguments"
        ctx.replace(call, _expr(_device(ctx, ctx.imports.binding_of(func))))
        ctx.finding(call, f"{qual}() -> torch.device(\"neuron\")")
        return None

    def _move(self, call: cst.Call, ctx: PythonContext, qual: str = MOVE) -> str | None:
        bound = _bind_args(call, ("model", "device"))
        if bound is None or set(bound) != {"model", "device"}:
            return "unsupported arguments"

        def build(updated: cst.Call) -> cst.BaseExpression:
            b = _bind_args(updated, ("model", "device"))
            model = b["model"].value
            if not isinstance(model, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) and not model.lpar:
                model = model.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            return cst.parse_expression(f"{_code(model)}.to({_code(b['device'].value)})")

        ctx.replace(call, build)
        ctx.finding(call, f"{qual}(model, device) -> model.to(device)")
        # the helper kept shared parameters shared (and NxD's parameter attributes) through the move; a
        # device whose tensors cannot take a CPU tensor's storage in place gets new Parameter objects
        ctx.marker(call, MOVE_MARKER)
        return None


RULES = (NxdBuildingBlocks,)
