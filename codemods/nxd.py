"""NM414: neuronx-distributed (NxD) building blocks -> DeviceMesh / DTensor / FSDP2 / DCP.

NxD's parallel state, parallel layers, model/optimizer wrappers and checkpoints have native
equivalents whose shape differs (a ``DeviceMesh`` object instead of global state, a
``parallelize_module`` plan instead of layer classes, ``DistributedConfig`` for transformers
models, ``torch.distributed.checkpoint`` for sharded checkpoints), so each use gets one
actionable marker naming them; ``move_model_to_device(model, device)`` becomes
``model.to(device)``. Facts: source-apis §4.4 (neuronx-distributed 0.15).
"""

from __future__ import annotations

import libcst as cst

from codemods.xla import _XlaRule, _bind_args, _code, _is_reference
from migrator.python_engine import NameClash, PythonContext

NXD = "neuronx_distributed"
PS = f"{NXD}.parallel_layers.parallel_state"
LAYERS = f"{NXD}.parallel_layers.layers"
MOVE = f"{NXD}.utils.model_utils.move_model_to_device"

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
    f"{NXD}.parallel_layers.parallel_cross_entropy":
        "F.cross_entropy inside `with torch.distributed.tensor.parallel.loss_parallel():` (sharded logits)",
    f"{NXD}.neuronx_distributed_config":
        "transformers.distributed.DistributedConfig(tp_size=..., fsdp_size=...) given to from_pretrained",
    f"{NXD}.initialize_parallel_model":
        "from_pretrained(..., distributed_config=DistributedConfig(tp_size=..., fsdp_size=...)) "
        "(a plain nn.Module: parallelize_module / FSDP2 fully_shard)",
    f"{NXD}.initialize_parallel_optimizer":
        "a plain torch.optim optimizer over model.parameters() (FSDP2 shards its state)",
    f"{NXD}.save_checkpoint": "torch.distributed.checkpoint.save({\"model\": ..., \"optim\": ...}, checkpoint_id=path) (DCP)",
    f"{NXD}.load_checkpoint": "torch.distributed.checkpoint.load(state_dict, checkpoint_id=path) (DCP)",
    f"{NXD}.has_checkpoint": "os.path.isdir(path) on the DCP checkpoint directory",
    f"{NXD}.optimizer.NeuronZero1Optimizer":
        "torch.distributed.optim.ZeroRedundancyOptimizer(params, optimizer_class=...) or FSDP2 fully_shard",
}
# `nxd.X` is also reachable through the submodules NxD defines it in
for _name, _mod in (("neuronx_distributed_config", "trainer"), ("initialize_parallel_model", "trainer"),
                    ("initialize_parallel_optimizer", "trainer"), ("save_checkpoint", "trainer"),
                    ("load_checkpoint", "trainer")):
    _OTHER_NATIVE[f"{NXD}.{_mod}.{_name}"] = _OTHER_NATIVE[f"{NXD}.{_name}"]
    _OTHER_NATIVE[f"{NXD}.{_mod}.trainer.{_name}"] = _OTHER_NATIVE[f"{NXD}.{_name}"]
for _name, _native in _LAYER_NATIVE.items():
    _OTHER_NATIVE[f"{LAYERS}.{_name}"] = _native
    _OTHER_NATIVE[f"{NXD}.parallel_layers.{_name}"] = _native

NATIVES = {**_OTHER_NATIVE, MOVE: "model.to(device)"}


class NxdBuildingBlocks(_XlaRule):
    id = "NM414"
    title = "neuronx-distributed parallel state / layers / wrappers / checkpoints -> DeviceMesh, DTensor, DCP"
    fix = "mixed"
    triggers = ("neuronx_distributed",)
    owns = (PS, f"{PS}.*", *NATIVES)
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
        becomes `model.to(device)`.
    """
    before = """
        from neuronx_distributed.parallel_layers import parallel_state
        from neuronx_distributed.utils.model_utils import move_model_to_device

        move_model_to_device(model, device)
        tp = parallel_state.get_tensor_model_parallel_size()
    """
    after = """
        from neuronx_distributed.parallel_layers import parallel_state

        model.to(device)
        # TODO(neuron-migrate NM414): ...
        tp = parallel_state.get_tensor_model_parallel_size()
    """
    caveats = """
        Only `move_model_to_device(model, device)` is rewritten. The parallel-state queries are
        not derived from the world size: with tensor parallelism the data-parallel size is
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
        if qual is None:
            return
        if qual.startswith(PS + "."):
            name = qual[len(PS) + 1:]
            native = _PS_NATIVE.get(name, f"{_MESH} the matching mesh[...] query")
            ctx.marker(node, f"{qual} (NxD global parallel state): {native}")
            return
        if qual not in NATIVES:
            return
        if qual == MOVE and isinstance(parent, cst.Call) and parent.func is node:
            try:
                problem = self._move(parent, ctx)
            except NameClash as exc:
                problem = str(exc)
            if problem:
                ctx.marker(parent, f"rewrite this {qual} call by hand ({problem}); native: model.to(device)")
            return
        ctx.marker(node, f"{qual} has no native twin: use {NATIVES[qual]}")

    def _move(self, call: cst.Call, ctx: PythonContext) -> str | None:
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
        ctx.finding(call, f"{MOVE}(model, device) -> model.to(device)")
        return None


RULES = (NxdBuildingBlocks,)
