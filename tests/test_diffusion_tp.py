"""NM104, ``tensor_parallel_size`` of a Neuron Flux pipeline: what the rewrite emits exists in
diffusers 0.42.1, and the migrated script, run under torchrun with 2 processes on CPU (gloo), shards
the transformer and gives the images and transformer output of the unsharded pipeline.

diffusers' tensor parallelism refuses CPU meshes and divides by ``torch.accelerator.device_count()``
(0 on CPU); the runner below (test-only) lifts both, maps ``init_process_group(backend="neuron")`` to
gloo, ``.to("neuron")`` to cpu and the ``"neuron"`` dynamo backend to eager. The migrated text is run
unchanged.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process

FIXTURES = Path(__file__).parent / "fixtures" / "NM104"


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def _migrate(source: str, rules: RuleSet) -> tuple[str, list]:
    result = process(Candidate(Path("script.py"), "script.py", "python"), rules, source.encode())
    assert result.status == "changed", result.error
    return result.new_bytes.decode(), result.findings


def _code(text: str) -> str:
    """The migrated text without its comment lines (the markers)."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def _keywords(fn) -> set[str]:
    names = set(inspect.signature(fn).parameters)
    return names | set(re.findall(r'kwargs\.pop\(\s*"(\w+)"', inspect.getsource(fn)))


# ---------------------------------------------------------------------- emitted names
def test_emitted_names_and_keywords_exist_in_diffusers():
    import diffusers
    import torch.distributed

    from codemods.inference.diffusion import SOURCES, TP_NAME, TP_TRANSFORMERS, _family

    seen = set()
    for after in ("tensor_parallel.after.py", "markers.after.py"):
        tree = ast.parse((FIXTURES / after).read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "diffusers"
                    for a in n.names}
        assert {"TensorParallelConfig", "FluxTransformer2DModel"} <= imported
        assert all(hasattr(diffusers, name) for name in imported), imported
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            kws = {k.arg for k in call.keywords}
            func = ast.unparse(call.func)
            if func == "FluxTransformer2DModel.from_pretrained":
                assert kws <= _keywords(diffusers.ModelMixin.from_pretrained), kws
                assert [k.value.value for k in call.keywords if k.arg == "subfolder"] == [TP_NAME]
                seen.add(func)
            elif func == "TensorParallelConfig":
                fields = {f.name for f in dataclasses.fields(diffusers.TensorParallelConfig) if f.init}
                assert kws == {"tp_degree"} and kws <= fields
                seen.add(func)
            elif func == "dist.init_process_group":
                assert kws <= set(inspect.signature(torch.distributed.init_process_group).parameters)
                seen.add(func)
            elif func.endswith("Pipeline.from_pretrained") and TP_NAME in kws:
                pipe = getattr(diffusers, func.split(".")[0])
                assert TP_NAME in inspect.signature(pipe.__init__).parameters
                seen.add("transformer=")
    assert seen == {"FluxTransformer2DModel.from_pretrained", "TensorParallelConfig", "dist.init_process_group",
                    "transformer="}
    # from_pretrained takes a TensorParallelConfig itself (not only a ParallelConfig)
    assert "TensorParallelConfig" in str(inspect.signature(diffusers.ModelMixin.from_pretrained)) or \
        "isinstance(parallel_config, TensorParallelConfig)" in inspect.getsource(diffusers.ModelMixin.from_pretrained)
    # the pipeline -> transformer mapping is the real one, and only transformers with a _tp_plan are sharded
    from codemods.common.renames import load_table

    for qual, neuron_name in SOURCES.items():
        pipe = getattr(diffusers, load_table()[qual].target.rsplit(".", 1)[1])
        param = inspect.signature(pipe.__init__).parameters.get(TP_NAME)
        model = param.annotation if param is not None and isinstance(param.annotation, type) else None
        mapped = TP_TRANSFORMERS.get(_family(neuron_name))
        if mapped is not None:
            assert model is getattr(diffusers, mapped) and model._tp_plan, neuron_name
        else:
            assert model is None or not getattr(model, "_tp_plan", None), neuron_name


def test_only_simple_loads_are_rewritten(rules):
    src = textwrap.dedent('''
        from optimum.neuron import NeuronFluxPipeline

        pipes = [NeuronFluxPipeline.from_pretrained("f", export=True, tensor_parallel_size=2)]
        a = NeuronFluxPipeline.from_pretrained(get_id(), export=True, tensor_parallel_size=2)
        b = NeuronFluxPipeline.from_pretrained("f", tensor_parallel_size=2)
        c = NeuronFluxPipeline.from_pretrained("f", export=True, tensor_parallel_size=2, **extra)
        d = NeuronFluxPipeline.from_pretrained("f", export=True, tensor_parallel_size=2, device_map="balanced")
    ''')
    new, findings = _migrate(src, rules)
    assert "TensorParallelConfig" not in _code(new) and "init_process_group" not in _code(new)
    assert sum("tensor_parallel_size=2 was dropped" in (f.detail or "") for f in findings) == 5


def test_existing_process_group_is_not_initialized_twice(rules):
    src = textwrap.dedent('''
        import torch.distributed as dist
        from optimum.neuron import NeuronFluxPipeline

        dist.init_process_group("xla")
        pipe = NeuronFluxPipeline.from_pretrained("f", export=True, tensor_parallel_size=2)
    ''')
    new, findings = _migrate(src, rules)
    assert _code(new).count("init_process_group") == 1
    assert "parallel_config=TensorParallelConfig(tp_degree=2)" in new
    assert any("Initialize the process group" in f.message for f in findings if f.rule == "NM104")


# ---------------------------------------------------------------------- runtime, 2 ranks on CPU
SCRIPT = '''
import os
import sys

import numpy as np
import torch

from optimum.neuron import NeuronFluxPipeline

model_id = sys.argv[1]
pipe = NeuronFluxPipeline.from_pretrained(
    model_id, export=True, tensor_parallel_size=2, batch_size=1, height=32, width=32,
    text_encoder=None, tokenizer=None, text_encoder_2=None, tokenizer_2=None,
)
generator = torch.Generator("cpu").manual_seed(0)
emb, pooled = torch.randn(1, 8, 32, generator=generator), torch.randn(1, 32, generator=generator)
images = pipe(prompt_embeds=emb, pooled_prompt_embeds=pooled, num_inference_steps=2, generator=generator,
              output_type="np").images
if int(os.environ.get("RANK", "0")) == 0:
    np.save(sys.argv[2], images)
'''

#: test-only stand-ins for what TorchNeuron provides (see the module docstring)
RUNNER = '''
import json, os, runpy, sys
import torch, torch.distributed as dist
import diffusers.hooks.tensor_parallel as tp
from diffusers import DiffusionPipeline
from torch._dynamo import register_backend
from torch.distributed.tensor import DTensor

tp._SUPPORTED_TP_DEVICES = (*tp._SUPPORTED_TP_DEVICES, "cpu")
torch.accelerator.device_count = lambda: 1
_init = dist.init_process_group
dist.init_process_group = lambda *a, backend=None, **k: _init(*a, backend="gloo" if backend == "neuron" else backend, **k)
_to = DiffusionPipeline.to
DiffusionPipeline.to = lambda self, *a, **k: _to(self, *("cpu" if x == "neuron" else x for x in a), **k)
register_backend(name="neuron")(lambda gm, example_inputs: gm.forward)

script, out = sys.argv[1], sys.argv[-1]
sys.argv = [script, *sys.argv[2:-1]]
pipe = runpy.run_path(script, run_name="__main__")["pipe"]
transformer = pipe.transformer
weight = transformer.transformer_blocks[0].attn.to_q.weight
g = torch.Generator().manual_seed(1)
with torch.no_grad():
    sample = transformer(hidden_states=torch.randn(1, 16, 4, generator=g), encoder_hidden_states=torch.randn(1, 8, 32, generator=g),
                         pooled_projections=torch.randn(1, 32, generator=g), timestep=torch.tensor([0.5]),
                         img_ids=torch.zeros(16, 3), txt_ids=torch.zeros(8, 3), return_dict=False)[0]
if dist.get_rank() == 0:
    json.dump({"world": dist.get_world_size(), "dtensor": isinstance(weight, DTensor),
               "local": list(weight.to_local().shape) if isinstance(weight, DTensor) else None,
               "full": list(weight.shape), "sample": sample.tolist()}, open(out, "w"))
dist.barrier()
dist.destroy_process_group()
'''


@pytest.fixture(scope="module")
def tiny_flux(tmp_path_factory) -> Path:
    """A random Flux pipeline without text encoders (the script passes prompt embeddings)."""
    import torch
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    d = tmp_path_factory.mktemp("tiny-flux") / "pipe"
    torch.manual_seed(0)
    transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
        joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=(4, 4, 8),
    )
    vae = AutoencoderKL(
        sample_size=32, in_channels=3, out_channels=3, block_out_channels=(4,), layers_per_block=1, latent_channels=1,
        norm_num_groups=1, use_quant_conv=False, use_post_quant_conv=False, shift_factor=0.0609, scaling_factor=1.5035,
    )
    FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=None, tokenizer=None,
                 text_encoder_2=None, tokenizer_2=None, transformer=transformer).save_pretrained(d)
    return d


def test_migrated_tensor_parallel_flux_matches_unsharded(tiny_flux, tmp_path, rules):
    import numpy as np
    import torch
    from diffusers import FluxPipeline

    migrated, findings = _migrate(textwrap.dedent(SCRIPT), rules)
    assert "optimum" not in migrated and "tensor_parallel_size" not in migrated
    assert 'dist.init_process_group(backend="neuron")' in migrated
    assert "parallel_config=TensorParallelConfig(tp_degree=2)" in migrated
    assert "model_id, transformer=transformer," in migrated
    assert 'pipe.transformer.compile_repeated_blocks(backend="neuron", fullgraph=True, dynamic=False)' in migrated
    assert any("torchrun --nproc_per_node=2" in f.message for f in findings if f.fix == "manual")
    (tmp_path / "script.py").write_text(migrated)
    (tmp_path / "runner.py").write_text(RUNNER)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(tmp_path / "runner.py"),
         str(tmp_path / "script.py"), str(tiny_flux), str(tmp_path / "images.npy"), str(tmp_path / "out.json")],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["world"] == 2 and out["dtensor"] and out["local"] == [16, 32] and out["full"] == [32, 32]

    ref = FluxPipeline.from_pretrained(tiny_flux, text_encoder=None, tokenizer=None, text_encoder_2=None,
                                       tokenizer_2=None)
    generator = torch.Generator("cpu").manual_seed(0)
    emb, pooled = torch.randn(1, 8, 32, generator=generator), torch.randn(1, 32, generator=generator)
    images = ref(prompt_embeds=emb, pooled_prompt_embeds=pooled, num_inference_steps=2, generator=generator,
                 height=32, width=32, output_type="np").images
    np.testing.assert_allclose(np.load(tmp_path / "images.npy"), images, atol=1e-5)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        sample = ref.transformer(
            hidden_states=torch.randn(1, 16, 4, generator=g), encoder_hidden_states=torch.randn(1, 8, 32, generator=g),
            pooled_projections=torch.randn(1, 32, generator=g), timestep=torch.tensor([0.5]),
            img_ids=torch.zeros(16, 3), txt_ids=torch.zeros(8, 3), return_dict=False,
        )[0]
    np.testing.assert_allclose(np.array(out["sample"]), sample.numpy(), atol=1e-5)
