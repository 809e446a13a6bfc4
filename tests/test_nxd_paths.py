"""NM414 (codemods/xla/neuronx_distributed.py): every neuronx-distributed path the rule matches exists in NxD.

The table below was produced by reading aws-neuron/neuronx-distributed at the commit named in
``codemods.xla.neuronx_distributed.VERIFIED_COMMIT`` (``git show <commit>:src/<module>.py``): "defined" = a ``def``
/ ``class`` in that file, "re-export" = imported into that package ``__init__``. Two paths the
rule used to match (``neuronx_distributed.trainer.trainer.save_checkpoint`` / ``load_checkpoint``)
do not exist there and are gone. The DTensor code that the markers give for NxD's
tensor-parallel regions is checked against NxD's forward/backward semantics under torchrun.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

import codemods.xla.neuronx_distributed as nxd
from migrator.engine import RuleSelection, RuleSet
from tests.torchrun_util import torchrun
from tests.test_fixtures import migrate
from tests.test_nxd_rules import _resolve

COMMIT = "fbac349b61a3adbb123c2983835af692840ff62f"  # aws-neuron/neuronx-distributed, "Release 2.29"

VERIFIED = (
    ("neuronx_distributed.ModelBuilder", "re-export", "neuronx_distributed/__init__.py"),
    ("neuronx_distributed.NxDModel", "re-export", "neuronx_distributed/__init__.py"),
    ("neuronx_distributed.has_checkpoint", "re-export", "neuronx_distributed/__init__.py"),
    ("neuronx_distributed.initialize_parallel_model", "re-export", "neuronx_distributed/__init__.py"),
    ("neuronx_distributed.initialize_parallel_optimizer", "re-export", "neuronx_distributed/__init__.py"),
    ("neuronx_distributed.kernels.flash_attn.nki_flash_attn_func", "defined", "neuronx_distributed/kernels/flash_attn.py"),
    ("neuronx_distributed.lightning.NeuronCheckpointIO", "re-export", "neuronx_distributed/lightning/__init__.py"),
    ("neuronx_distributed.lightning.NeuronHooksCallback", "re-export", "neuronx_distributed/lightning/__init__.py"),
    ("neuronx_distributed.lightning.NeuronLTModule", "re-export", "neuronx_distributed/lightning/__init__.py"),
    ("neuronx_distributed.lightning.NeuronTQDMProgressBar", "re-export", "neuronx_distributed/lightning/__init__.py"),
    ("neuronx_distributed.lightning.NeuronTensorBoardLogger", "re-export", "neuronx_distributed/lightning/__init__.py"),
    ("neuronx_distributed.lightning.NeuronXLAAccelerator", "re-export", "neuronx_distributed/lightning/__init__.py"),
    ("neuronx_distributed.lightning.NeuronXLAPrecisionPlugin", "re-export", "neuronx_distributed/lightning/__init__.py"),
    ("neuronx_distributed.lightning.NeuronXLAStrategy", "re-export", "neuronx_distributed/lightning/__init__.py"),
    ("neuronx_distributed.lightning.accelerator.NeuronXLAAccelerator", "defined", "neuronx_distributed/lightning/accelerator.py"),
    ("neuronx_distributed.lightning.checkpoint_io.NeuronCheckpointIO", "defined", "neuronx_distributed/lightning/checkpoint_io.py"),
    ("neuronx_distributed.lightning.logger.NeuronTensorBoardLogger", "defined", "neuronx_distributed/lightning/logger.py"),
    ("neuronx_distributed.lightning.module.NeuronLTModule", "defined", "neuronx_distributed/lightning/module.py"),
    ("neuronx_distributed.lightning.neuron_hooks_callback.NeuronHooksCallback", "defined", "neuronx_distributed/lightning/neuron_hooks_callback.py"),
    ("neuronx_distributed.lightning.precision_plugin.NeuronXLAPrecisionPlugin", "defined", "neuronx_distributed/lightning/precision_plugin.py"),
    ("neuronx_distributed.lightning.progress_bar.NeuronTQDMProgressBar", "defined", "neuronx_distributed/lightning/progress_bar.py"),
    ("neuronx_distributed.lightning.strategy.NeuronXLAStrategy", "defined", "neuronx_distributed/lightning/strategy.py"),
    ("neuronx_distributed.load_checkpoint", "re-export", "neuronx_distributed/__init__.py"),
    ("neuronx_distributed.modules.moe.ExpertMLPs", "re-export", "neuronx_distributed/modules/moe/__init__.py"),
    ("neuronx_distributed.modules.moe.MoE", "re-export", "neuronx_distributed/modules/moe/__init__.py"),
    ("neuronx_distributed.modules.moe.RouterSinkhorn", "re-export", "neuronx_distributed/modules/moe/__init__.py"),
    ("neuronx_distributed.modules.moe.RouterTopK", "re-export", "neuronx_distributed/modules/moe/__init__.py"),
    ("neuronx_distributed.modules.moe.expert_mlps.ExpertMLPs", "defined", "neuronx_distributed/modules/moe/expert_mlps.py"),
    ("neuronx_distributed.modules.moe.load_balancing_loss_func", "re-export", "neuronx_distributed/modules/moe/__init__.py"),
    ("neuronx_distributed.modules.moe.loss_function.load_balancing_loss_func", "defined", "neuronx_distributed/modules/moe/loss_function.py"),
    ("neuronx_distributed.modules.moe.model.MoE", "defined", "neuronx_distributed/modules/moe/model.py"),
    ("neuronx_distributed.modules.moe.routing.RouterSinkhorn", "defined", "neuronx_distributed/modules/moe/routing.py"),
    ("neuronx_distributed.modules.moe.routing.RouterTopK", "defined", "neuronx_distributed/modules/moe/routing.py"),
    ("neuronx_distributed.modules.qkv_linear.GQAQKVColumnParallelLinear", "defined", "neuronx_distributed/modules/qkv_linear.py"),
    ("neuronx_distributed.neuronx_distributed_config", "re-export", "neuronx_distributed/__init__.py"),
    ("neuronx_distributed.optimizer.NeuronZero1Optimizer", "re-export", "neuronx_distributed/optimizer/__init__.py"),
    ("neuronx_distributed.optimizer.zero_redundancy_optimizer.NeuronZero1Optimizer", "defined", "neuronx_distributed/optimizer/zero_redundancy_optimizer.py"),
    ("neuronx_distributed.parallel_layers.ColumnParallelLinear", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.ParallelEmbedding", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.RowParallelLinear", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.checkpointing._invoke_preshard_hook", "defined", "neuronx_distributed/parallel_layers/checkpointing.py"),
    ("neuronx_distributed.parallel_layers.checkpointing.load", "defined", "neuronx_distributed/parallel_layers/checkpointing.py"),
    ("neuronx_distributed.parallel_layers.checkpointing.save", "defined", "neuronx_distributed/parallel_layers/checkpointing.py"),
    ("neuronx_distributed.parallel_layers.clip_grad_norm", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.copy_to_tensor_model_parallel_region", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.gather_from_tensor_model_parallel_region", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.get_xla_rng_tracker", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.grads.clip_grad_norm", "defined", "neuronx_distributed/parallel_layers/grads.py"),
    ("neuronx_distributed.parallel_layers.initialize_model_parallel", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.layers.ColumnParallelLinear", "defined", "neuronx_distributed/parallel_layers/layers.py"),
    ("neuronx_distributed.parallel_layers.layers.ParallelEmbedding", "defined", "neuronx_distributed/parallel_layers/layers.py"),
    ("neuronx_distributed.parallel_layers.layers.RowParallelLinear", "defined", "neuronx_distributed/parallel_layers/layers.py"),
    ("neuronx_distributed.parallel_layers.load", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.loss_functions.parallel_cross_entropy", "defined", "neuronx_distributed/parallel_layers/loss_functions.py"),
    ("neuronx_distributed.parallel_layers.mappings.copy_to_tensor_model_parallel_region", "defined", "neuronx_distributed/parallel_layers/mappings.py"),
    ("neuronx_distributed.parallel_layers.mappings.gather_from_sequence_parallel_region", "defined", "neuronx_distributed/parallel_layers/mappings.py"),
    ("neuronx_distributed.parallel_layers.mappings.gather_from_tensor_model_parallel_region", "defined", "neuronx_distributed/parallel_layers/mappings.py"),
    ("neuronx_distributed.parallel_layers.mappings.reduce_from_context_model_parallel_region", "defined", "neuronx_distributed/parallel_layers/mappings.py"),
    ("neuronx_distributed.parallel_layers.mappings.reduce_from_tensor_model_parallel_region", "defined", "neuronx_distributed/parallel_layers/mappings.py"),
    ("neuronx_distributed.parallel_layers.mappings.reduce_scatter_to_sequence_parallel_region", "defined", "neuronx_distributed/parallel_layers/mappings.py"),
    ("neuronx_distributed.parallel_layers.mappings.scatter_to_sequence_parallel_region", "defined", "neuronx_distributed/parallel_layers/mappings.py"),
    ("neuronx_distributed.parallel_layers.mappings.scatter_to_tensor_model_parallel_region", "defined", "neuronx_distributed/parallel_layers/mappings.py"),
    ("neuronx_distributed.parallel_layers.model_parallel_xla_manual_seed", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.move_model_to_device", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.parallel_cross_entropy", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.parallel_state.destroy_model_parallel", "defined", "neuronx_distributed/parallel_layers/parallel_state.py"),
    ("neuronx_distributed.parallel_layers.parallel_state.get_data_parallel_group", "defined", "neuronx_distributed/parallel_layers/parallel_state.py"),
    ("neuronx_distributed.parallel_layers.parallel_state.get_data_parallel_rank", "defined", "neuronx_distributed/parallel_layers/parallel_state.py"),
    ("neuronx_distributed.parallel_layers.parallel_state.get_data_parallel_size", "defined", "neuronx_distributed/parallel_layers/parallel_state.py"),
    ("neuronx_distributed.parallel_layers.parallel_state.get_tensor_model_parallel_group", "defined", "neuronx_distributed/parallel_layers/parallel_state.py"),
    ("neuronx_distributed.parallel_layers.parallel_state.get_tensor_model_parallel_rank", "defined", "neuronx_distributed/parallel_layers/parallel_state.py"),
    ("neuronx_distributed.parallel_layers.parallel_state.get_tensor_model_parallel_size", "defined", "neuronx_distributed/parallel_layers/parallel_state.py"),
    ("neuronx_distributed.parallel_layers.parallel_state.initialize_model_parallel", "defined", "neuronx_distributed/parallel_layers/parallel_state.py"),
    ("neuronx_distributed.parallel_layers.parallel_state.model_parallel_is_initialized", "defined", "neuronx_distributed/parallel_layers/parallel_state.py"),
    ("neuronx_distributed.parallel_layers.random.get_xla_rng_tracker", "defined", "neuronx_distributed/parallel_layers/random.py"),
    ("neuronx_distributed.parallel_layers.random.model_parallel_xla_manual_seed", "defined", "neuronx_distributed/parallel_layers/random.py"),
    ("neuronx_distributed.parallel_layers.reduce_from_tensor_model_parallel_region", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.save", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.scatter_to_tensor_model_parallel_region", "re-export", "neuronx_distributed/parallel_layers/__init__.py"),
    ("neuronx_distributed.parallel_layers.utils.divide", "defined", "neuronx_distributed/parallel_layers/utils.py"),
    ("neuronx_distributed.parallel_layers.utils.get_local_world_size", "defined", "neuronx_distributed/parallel_layers/utils.py"),
    ("neuronx_distributed.parallel_layers.utils.is_pjrt_device", "defined", "neuronx_distributed/parallel_layers/utils.py"),
    ("neuronx_distributed.parallel_layers.utils.move_all_tensor_to_cpu", "defined", "neuronx_distributed/parallel_layers/utils.py"),
    ("neuronx_distributed.parallel_layers.utils.move_model_to_device", "defined", "neuronx_distributed/parallel_layers/utils.py"),
    ("neuronx_distributed.parallel_layers.utils.requires_init_pg_override", "defined", "neuronx_distributed/parallel_layers/utils.py"),
    ("neuronx_distributed.parallel_layers.utils.split_tensor_along_last_dim", "defined", "neuronx_distributed/parallel_layers/utils.py"),
    ("neuronx_distributed.pipeline.NxDPPModel", "re-export", "neuronx_distributed/pipeline/__init__.py"),
    ("neuronx_distributed.pipeline.model.NxDPPModel", "defined", "neuronx_distributed/pipeline/model.py"),
    ("neuronx_distributed.save_checkpoint", "re-export", "neuronx_distributed/__init__.py"),
    ("neuronx_distributed.shard_checkpoint", "re-export", "neuronx_distributed/__init__.py"),
    ("neuronx_distributed.trace.mock_torchdist.mock_distributed", "defined", "neuronx_distributed/trace/mock_torchdist.py"),
    ("neuronx_distributed.trace.parallel_model_load", "re-export", "neuronx_distributed/trace/__init__.py"),
    ("neuronx_distributed.trace.parallel_model_save", "re-export", "neuronx_distributed/trace/__init__.py"),
    ("neuronx_distributed.trace.parallel_model_trace", "re-export", "neuronx_distributed/trace/__init__.py"),
    ("neuronx_distributed.trace.trace.parallel_model_load", "defined", "neuronx_distributed/trace/trace.py"),
    ("neuronx_distributed.trace.trace.parallel_model_save", "defined", "neuronx_distributed/trace/trace.py"),
    ("neuronx_distributed.trace.trace.parallel_model_trace", "defined", "neuronx_distributed/trace/trace.py"),
    ("neuronx_distributed.trainer.checkpoint.has_checkpoint", "defined", "neuronx_distributed/trainer/checkpoint.py"),
    ("neuronx_distributed.trainer.checkpoint.load_checkpoint", "defined", "neuronx_distributed/trainer/checkpoint.py"),
    ("neuronx_distributed.trainer.checkpoint.save_checkpoint", "defined", "neuronx_distributed/trainer/checkpoint.py"),
    ("neuronx_distributed.trainer.initialize_parallel_model", "re-export", "neuronx_distributed/trainer/__init__.py"),
    ("neuronx_distributed.trainer.initialize_parallel_optimizer", "re-export", "neuronx_distributed/trainer/__init__.py"),
    ("neuronx_distributed.trainer.load_checkpoint", "re-export", "neuronx_distributed/trainer/__init__.py"),
    ("neuronx_distributed.trainer.neuronx_distributed_config", "re-export", "neuronx_distributed/trainer/__init__.py"),
    ("neuronx_distributed.trainer.save_checkpoint", "re-export", "neuronx_distributed/trainer/__init__.py"),
    ("neuronx_distributed.trainer.trainer.initialize_parallel_model", "defined", "neuronx_distributed/trainer/trainer.py"),
    ("neuronx_distributed.trainer.trainer.initialize_parallel_optimizer", "defined", "neuronx_distributed/trainer/trainer.py"),
    ("neuronx_distributed.trainer.trainer.neuronx_distributed_config", "defined", "neuronx_distributed/trainer/trainer.py"),
    ("neuronx_distributed.utils.cpu_mode", "defined", "neuronx_distributed/utils/__init__.py"),
    ("neuronx_distributed.utils.get_device", "defined", "neuronx_distributed/utils/__init__.py"),
    ("neuronx_distributed.utils.mark_step", "defined", "neuronx_distributed/utils/__init__.py"),
    ("neuronx_distributed.utils.master_print", "defined", "neuronx_distributed/utils/__init__.py"),
    ("neuronx_distributed.utils.model_utils.get_platform_lnc", "defined", "neuronx_distributed/utils/model_utils.py"),
    ("neuronx_distributed.utils.model_utils.init_on_device", "defined", "neuronx_distributed/utils/model_utils.py"),
    ("neuronx_distributed.utils.model_utils.move_model_to_device", "defined", "neuronx_distributed/utils/model_utils.py"),
)
_KIND = {path: kind for path, kind, _ in VERIFIED}


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def _matched_paths() -> set[str]:
    return (set(nxd.NATIVES) | set(nxd.ALIASES) | set(nxd.ALIASES.values())
            | {f"{nxd.PS}.{name}" for name in nxd._PS_NATIVE})


def test_table_is_for_the_commit_the_rule_names():
    assert nxd.VERIFIED_COMMIT == COMMIT
    assert len(_KIND) == len(VERIFIED)


def test_every_path_the_rule_matches_was_read_in_nxd_source():
    assert sorted(_matched_paths() - set(_KIND)) == []


def test_aliases_point_at_a_name_the_rule_handles():
    for alias, target in nxd.ALIASES.items():
        assert alias != target and target not in nxd.ALIASES, alias
        assert target.startswith(nxd.PS + ".") or nxd.native_for(target) is not None, (alias, target)


@pytest.mark.parametrize("wrong", ["neuronx_distributed.trainer.trainer.save_checkpoint",
                                   "neuronx_distributed.trainer.trainer.load_checkpoint"])
def test_paths_nxd_does_not_have_are_not_matched(wrong: str, rules: RuleSet):
    assert wrong not in _KIND and nxd.native_for(nxd.canonical(wrong)) is None
    module, name = wrong.rsplit(".", 1)
    _, findings = migrate(f"from {module} import {name}\n{name}(path)\n".encode(), "python", rules)
    assert [f.rule for f in findings] == ["NM900"]


def _use(path: str) -> bytes:
    module, name = path.rsplit(".", 1)
    return f"from {module} import {name}\n\nresult = {name}(model, device)\n".encode()


@pytest.mark.parametrize("alias", sorted(nxd.ALIASES))
def test_a_reexport_is_migrated_like_the_name_it_reexports(alias: str, rules: RuleSet):
    target = nxd.ALIASES[alias]
    got, got_findings = migrate(_use(alias), "python", rules)
    want, want_findings = migrate(_use(target), "python", rules)
    assert "NM414" in {f.rule for f in got_findings} and "NM900" not in {f.rule for f in got_findings}
    a_mod, a_name = alias.rsplit(".", 1)
    t_mod, t_name = target.rsplit(".", 1)
    expected = want.decode().replace(target, alias).replace(f"from {t_mod} import {t_name}", f"from {a_mod} import {a_name}")
    expected = expected.replace(f"`{t_mod}`", f"`{a_mod}`")  # the module an NM992 marker names
    if a_name != t_name:  # (no alias renames the name today; keep the check honest if one does)
        expected = expected.replace(t_name, a_name)
    assert got.decode() == expected
    assert len(got_findings) == len(want_findings)


# --------------------------------------------------------------------------- names in messages exist

NEW_MARKER_APIS = (
    "torch.distributed.tensor.DTensor.from_local", "torch.distributed.tensor.DTensor.to_local",
    "torch.distributed.tensor.DTensor.full_tensor", "torch.distributed.tensor.DTensor.redistribute",
    "torch.distributed.tensor.Shard", "torch.distributed.tensor.Replicate", "torch.distributed.tensor.Partial",
    "torch.distributed.tensor.parallel.SequenceParallel", "torch.distributed.pipelining.pipeline",
    "torch.distributed.pipelining.PipelineStage", "torch.distributed.pipelining.ScheduleGPipe",
    "torch.distributed.pipelining.Schedule1F1B", "torch.nn.utils.clip_grad_norm_", "torch.tensor_split",
    "torch.utils._pytree.tree_map", "torch.random.fork_rng", "torch.nn.Module.to_empty",
    "torch.nn.functional.scaled_dot_product_attention",
    "transformers.models.mixtral.modeling_mixtral.load_balancing_loss_func",
    "transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock",
)


@pytest.mark.parametrize("name", NEW_MARKER_APIS)
def test_api_named_in_new_messages_exists(name: str):
    _resolve(name)


def test_distributed_config_fields_named_in_messages_exist():
    import dataclasses

    from transformers.distributed import DistributedConfig

    fields = {f.name for f in dataclasses.fields(DistributedConfig)}
    text = json.dumps(nxd.NATIVES) + json.dumps([advice for _, advice in nxd.FAMILIES])
    for field in ("tp_size", "pp_size", "ep_size", "fsdp_size"):
        if f"{field}=" in text:
            assert field in fields


# --------------------------------------------------------------------------- region semantics

REGIONS = ("copy_to_tensor_model_parallel_region", "reduce_from_tensor_model_parallel_region",
           "scatter_to_tensor_model_parallel_region", "gather_from_tensor_model_parallel_region")

# Runs each marker's DTensor expression and a hand-written version of NxD's autograd function
# (parallel_layers/mappings.py: forward / backward) on the same tensors, 2 ranks, gloo.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    EXPRS = json.loads(sys.argv[2])

    def all_reduce(t):
        t = t.clone(); dist.all_reduce(t); return t

    def split(t):
        return t.chunk(world, dim=-1)[rank].contiguous()

    def gather(t):
        parts = [torch.empty_like(t) for _ in range(world)]; dist.all_gather(parts, t.contiguous())
        return torch.cat(parts, dim=-1)

    NXD = {  # (forward, backward) of NxD's _CopyTo / _ReduceFrom / _ScatterTo / _GatherFrom
        "copy_to_tensor_model_parallel_region": (lambda t: t, all_reduce),
        "reduce_from_tensor_model_parallel_region": (all_reduce, lambda g: g),
        "scatter_to_tensor_model_parallel_region": (split, gather),
        "gather_from_tensor_model_parallel_region": (gather, split),
    }
    out = {}
    for name, expr in EXPRS.items():
        x = (torch.arange(8, dtype=torch.float32).view(2, 4) + 10 * rank).requires_grad_(True)
        y = eval(expr, {"torch": torch, "DTensor": DTensor, "Partial": Partial, "Replicate": Replicate,
                        "Shard": Shard, "mesh": mesh, "x": x})
        g = torch.arange(y.numel(), dtype=torch.float32).view(y.shape) + 100 * rank
        y.backward(g)
        fwd, bwd = NXD[name]
        out[name] = {"y": y.tolist(), "grad": x.grad.tolist(),
                     "want_y": fwd(x.detach()).tolist(), "want_grad": bwd(g).tolist()}
    with open(f"{sys.argv[1]}/out{rank}.json", "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()
    """
)


def _expression(message: str) -> str:
    """The code a region marker gives: its text before the first ' (' explanation."""
    code = message.split(" (")[0]
    return code.replace("torch.distributed.tensor.DTensor", "DTensor")


def test_region_markers_give_dtensor_code_with_nxd_semantics(tmp_path: Path):
    exprs = {name: _expression(nxd.NATIVES[f"{nxd.MAPPINGS}.{name}"]) for name in REGIONS}
    script = tmp_path / "regions.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        torchrun(tmp_path, script, str(tmp_path), json.dumps(exprs)),
        capture_output=True, text=True, timeout=180, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    outs = [tmp_path / f"out{rank}.json" for rank in (0, 1)]
    assert all(p.exists() for p in outs), proc.stdout + proc.stderr
    for path in outs:
        for name, got in json.loads(path.read_text()).items():
            assert got["y"] == got["want_y"], (name, got)
            assert got["grad"] == got["want_grad"], (name, got)
