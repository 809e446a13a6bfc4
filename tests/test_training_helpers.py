"""NM204 / NM205 / NM304 (codemods/training/helpers.py): emitted APIs exist, docs are real output,
tricky inputs are handled and idempotent."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from codemods.training.helpers import (
    ACCELERATOR,
    CONSOLIDATE_TARGET,
    AcceleratorArguments,
    StaticShapes,
    TrainingHelpers,
)
from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process

RULES = (TrainingHelpers, AcceleratorArguments, StaticShapes)


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def run(text: str, rules: RuleSet) -> tuple[str, list]:
    result = process(Candidate(Path("t.py"), "t.py", "python"), rules, text.encode())
    assert result.status in ("changed", "unchanged"), result.error
    new = result.new_bytes.decode() if result.status == "changed" else text
    again = process(Candidate(Path("t.py"), "t.py", "python"), rules, new.encode())
    assert again.status == "unchanged" or again.new_bytes.decode() == new, "not idempotent"
    compile(new, "t.py", "exec")
    return new, result.findings


# ------------------------------------------------------------------ emitted APIs exist
def test_consolidate_target_signature():
    import importlib

    module, _, name = CONSOLIDATE_TARGET.rpartition(".")
    fn = getattr(importlib.import_module(module), name)
    params = list(inspect.signature(fn).parameters)
    assert params[:2] == ["checkpoint_dir", "output_dir"]


def test_accelerate_names_in_markers_exist():
    import accelerate
    from transformers.distributed import DistributedConfig

    assert "mixed_precision" in inspect.signature(accelerate.Accelerator).parameters
    assert "parallelism_config" in inspect.signature(accelerate.Accelerator).parameters
    fields = inspect.signature(accelerate.ParallelismConfig).parameters
    assert {"tp_size", "dp_shard_size"} <= set(fields)
    dc = inspect.signature(DistributedConfig).parameters
    assert {"tp_size", "pp_size", "fsdp_size"} <= set(dc)
    accelerate.Accelerator.__init__  # noqa: B018 - the rename target
    assert "bf16" in [p.value for p in accelerate.utils.PrecisionType]


def test_dynamo_setting_exists():
    torch = pytest.importorskip("torch")
    import torch._dynamo.config  # noqa: F401

    assert isinstance(torch._dynamo.config.automatic_dynamic_shapes, bool)


def test_accelerator_ownership_covers_the_table_entries():
    from codemods.common.renames import load_table

    table = load_table()
    assert all(table[name].target == "accelerate.Accelerator" for name in ACCELERATOR)


# ------------------------------------------------------------------ docs are real output
@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_explain_example_is_what_the_rule_does(rule, rules):
    doc = rule.doc()
    new, findings = run(doc.before + "\n", rules)
    assert new == doc.after + "\n"
    assert any(f.rule == rule.id for f in findings)


# ------------------------------------------------------------------ NM204
def test_no_leftover_flag_on_owned_names(rules):
    src = (
        "from optimum.neuron.cache import get_hub_cached_models\n"
        "from optimum.neuron.utils import is_main_worker\n\n"
        "models = get_hub_cached_models()\n"
        "callback = is_main_worker\n"
    )
    new, findings = run(src, rules)
    assert not [f for f in findings if f.rule == "NM900"]
    assert "TODO(neuron-migrate NM204): Remove this use of `get_hub_cached_models`" in new
    assert "TODO(neuron-migrate NM204): Replace `is_main_worker` by hand" in new


def test_unused_import_is_removed(rules):
    src = "import os\nfrom optimum.neuron.utils import is_precompilation, is_main_worker\n\nprint(os.sep)\n"
    new, _ = run(src, rules)
    assert new == "import os\n\nprint(os.sep)\n"


def test_main_worker_precedence(rules):
    src = (
        "from optimum.neuron.utils import is_main_worker\n\n"
        "a = not is_main_worker()\n"
        "b = is_main_worker() and True\n"
        "c = x == is_main_worker()\n"
        "d = is_main_worker(global_main=flag)\n"
    )
    new, _ = run(src, rules)
    assert new == (
        "import os\n\n"
        "a = not int(os.environ.get(\"RANK\", \"0\")) == 0\n"
        "b = int(os.environ.get(\"RANK\", \"0\")) == 0 and True\n"
        "c = x == (int(os.environ.get(\"RANK\", \"0\")) == 0)\n"
        "d = int(os.environ.get(\"RANK\" if flag else \"LOCAL_RANK\", \"0\")) == 0\n"
    )


def test_existing_os_import_is_reused(rules):
    src = "import os as _os\nfrom optimum.neuron.utils import is_main_worker\n\nok = is_main_worker()\n"
    new, _ = run(src, rules)
    assert new == "import os as _os\n\nok = int(_os.environ.get(\"RANK\", \"0\")) == 0\n"


def test_precompilation_inside_a_compound_test_becomes_false(rules):
    src = "from optimum.neuron.utils import is_precompilation\n\nif is_precompilation() or debug:\n    run()\n"
    new, _ = run(src, rules)
    assert new == "if False or debug:\n    run()\n"


def test_module_style_helpers(rules):
    src = (
        "from optimum.neuron import cache, utils\n\n"
        "if utils.is_main_worker():\n"
        "    cache.synchronize_hub_cache()\n"
    )
    new, _ = run(src, rules)
    assert new == "import os\n\nif int(os.environ.get(\"RANK\", \"0\")) == 0:\n    pass\n"


def test_ignored_line_is_kept(rules):
    src = (
        "from optimum.neuron.cache import synchronize_hub_cache\n\n"
        "synchronize_hub_cache()  # neuron-migrate: ignore[NM204]\n"
    )
    new, _ = run(src, rules)
    assert "synchronize_hub_cache()  # neuron-migrate: ignore[NM204]" in new


def test_consolidate_save_format_pytorch_is_explained(rules):
    # A unit that saves rank-local files (distributed_checkpoint=True) is consolidated natively.
    src = (
        "from optimum.neuron import NeuronTrainer\n"
        "from optimum.neuron.distributed import consolidate_model_parallel_checkpoints_to_unified_checkpoint as c\n\n"
        "model.save_pretrained(\"ckpt\", distributed_checkpoint=True)\n"
        "c(\"ckpt\", \"out\", save_format=\"pytorch\")\n"
    )
    new, findings = run(src, rules)
    assert "consolidate_distributed_checkpoint(\"ckpt\", \"out\")" in new
    assert any("always writes safetensors" in (f.detail or "") for f in findings if f.rule == "NM204")
    assert "optimum" not in new


def test_consolidate_after_the_trainer_is_marked_not_rewritten(rules):
    """The migrated Trainer's checkpoints are whole: the native consolidation would raise on them (next test)."""
    src = (
        "from optimum.neuron import NeuronTrainer\n"
        "from optimum.neuron.distributed import consolidate_model_parallel_checkpoints_to_unified_checkpoint as c\n\n"
        "c(\"ckpt\", \"out\")\n"
    )
    new, findings = run(src, rules)
    assert "consolidate_distributed_checkpoint" not in new and "c(\"ckpt\", \"out\")" in new
    assert any(f.rule == "NM204" and "saves whole weights" in f.message for f in findings)


def test_native_consolidation_rejects_a_whole_checkpoint(tmp_path):
    """What save_pretrained writes (the Trainer's save, a model sharded at load time gathered) is not what
    consolidate_distributed_checkpoint reads: it raises, so NM204 does not rewrite the old call into it."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.distributed import consolidate_distributed_checkpoint

    config = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, vocab_size=50)
    LlamaForCausalLM(config).save_pretrained(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="DCP"):
        consolidate_distributed_checkpoint(tmp_path / "ckpt", tmp_path / "out")


# ------------------------------------------------------------------ NM205
def test_accelerator_keeps_explicit_mixed_precision(rules):
    src = (
        "from optimum.neuron import NeuronAccelerator\n\n"
        "acc = NeuronAccelerator(mixed_precision=\"bf16\", mixed_precision_config=\"AUTOCAST_BF16\","
        " trn_config=None)\n"
    )
    new, findings = run(src, rules)
    assert new == "from accelerate import Accelerator\n\nacc = Accelerator(mixed_precision=\"bf16\")\n"
    assert not [f for f in findings if f.rule == "NM901"]


def test_mixed_precision_mode_enum(rules):
    src = (
        "from optimum.neuron import NeuronAccelerator\n"
        "from optimum.neuron.accelerate.utils import MixedPrecisionConfig\n"
        "from optimum.neuron.accelerate.utils.dataclasses import MixedPrecisionMode\n\n"
        "acc = NeuronAccelerator(mixed_precision_config=MixedPrecisionConfig(MixedPrecisionMode.NO))\n"
    )
    new, _ = run(src, rules)
    assert "acc = Accelerator()\n" in new
    assert "MixedPrecisionConfig" not in new


def test_standalone_mixed_precision_config_is_flagged(rules):
    src = (
        "from optimum.neuron.accelerate.utils import MixedPrecisionConfig\n\n"
        "cfg = MixedPrecisionConfig(\"FULL_BF16\")\n"
    )
    new, findings = run(src, rules)
    assert "TODO(neuron-migrate NM205): Pass mixed_precision=\"bf16\" (AUTOCAST_BF16) or load in bf16 (FULL_BF16): " \
           "MixedPrecisionConfig is gone." in new
    assert not [f for f in findings if f.rule == "NM900"]


# ------------------------------------------------------------------ NM304
def test_static_shapes_once(rules):
    src = (
        "import torch\n"
        "from optimum.neuron import NeuronTrainer\n\n"
        "def main():\n"
        "    torch._dynamo.config.automatic_dynamic_shapes = False\n"
        "    NeuronTrainer(model=m).train()\n"
    )
    new, findings = run(src, rules)
    assert new.count("automatic_dynamic_shapes") == 1
    assert not [f for f in findings if f.rule == "NM304"]


def test_static_shapes_needs_a_main_and_a_trainer(rules):
    no_main = "from optimum.neuron import NeuronTrainer\n\nNeuronTrainer(model=m).train()\n"
    new, _ = run(no_main, rules)
    assert "automatic_dynamic_shapes" not in new
    no_trainer = "from transformers import Trainer\n\ndef main():\n    Trainer(model=m).train()\n"
    new, _ = run(no_trainer, rules)
    assert new == no_trainer
    nested = ("from optimum.neuron import NeuronTrainer\n\nclass A:\n    def main(self):\n"
              "        NeuronTrainer(model=m).train()\n")
    new, _ = run(nested, rules)
    assert "automatic_dynamic_shapes" not in new


def test_static_shapes_composes_with_edits_inside_main(rules):
    src = (
        "from optimum.neuron import NeuronTrainer\n"
        "from optimum.neuron.utils import is_precompilation\n\n"
        "def main():\n"
        "    if is_precompilation():\n"
        "        steps = 10\n"
        "    else:\n"
        "        steps = 100\n"
        "    NeuronTrainer(model=m).train()\n"
    )
    new, _ = run(src, rules)
    assert new == (
        "import torch\n"
        "from transformers import Trainer\n\n"
        "def main():\n"
        "    # static shapes: on Neuron every new input shape is a compilation of minutes\n"
        "    torch._dynamo.config.automatic_dynamic_shapes = False\n"
        "    steps = 100\n"
        "    Trainer(model=m).train()\n"
    )


def test_unused_query_statement_is_removed(rules):
    src = "import optimum.neuron as on\n\non.utils.is_main_worker()\nx = 1\n"
    new, _ = run(src, rules)
    assert new == "x = 1\n"


def test_script_without_module_imports_imports_torch_in_main(rules):
    src = (
        "def main():\n"
        "    from optimum.neuron import NeuronTrainer\n\n"
        "    NeuronTrainer(model=m).train()\n"
    )
    new, _ = run(src, rules)
    assert new == (
        "def main():\n"
        "    import torch\n"
        "    # static shapes: on Neuron every new input shape is a compilation of minutes\n"
        "    torch._dynamo.config.automatic_dynamic_shapes = False\n"
        "    from transformers import Trainer\n\n"
        "    Trainer(model=m).train()\n"
    )
    src = "import sys\n" + src.replace("    from optimum.neuron import NeuronTrainer\n\n", "") \
        .replace("def main", "from optimum.neuron import NeuronTrainer\n\n\ndef main")
    new, _ = run(src, rules)
    assert new.startswith("import sys\nimport torch\nfrom transformers import Trainer\n")


def test_peft_and_state_renames_need_no_argument_rule():
    """optimum.neuron.peft.get_peft_model (0.4.5) and NeuronPartialState take exactly the native
    parameters (source-apis.md §1.3.6, §1.3.7), so the rename table alone migrates them."""
    import peft
    from accelerate import PartialState

    neuron_get_peft_model = ["model", "peft_config", "adapter_name", "mixed", "autocast_adapter_dtype", "revision",
                             "low_cpu_mem_usage"]
    assert list(inspect.signature(peft.get_peft_model).parameters) == neuron_get_peft_model
    assert list(inspect.signature(PartialState.__init__).parameters) == ["self", "cpu", "kwargs"]
