"""NM101 (codemods/inference/causal_lm.py): what it emits exists in the pinned transformers, and the
migrated code really generates the same tokens as the original model, with a static cache."""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from codemods.inference.causal_lm import DISTRIBUTED_CONFIG, SOURCES, TARGET, CausalLMStaticCache
from codemods.common.renames import load_table
from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process

FIXTURES = Path(__file__).parent / "fixtures" / "NM101"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def migrate(source: str, rules: RuleSet) -> tuple[str, list]:
    result = process(Candidate(Path("script.py"), "script.py", "python"), rules, source.encode())
    assert result.status in ("changed", "unchanged"), result.error
    new = result.new_bytes.decode() if result.status == "changed" else source
    return new, result.findings


def _emitted_calls():
    """Every ``...AutoModelForCausalLM.from_pretrained(...)`` call in the NM101 .after fixtures."""
    for path in sorted(FIXTURES.glob("*.after.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "from_pretrained":
                if isinstance(node.func.value, ast.Name) and node.func.value.id.startswith("Neuron"):
                    continue  # an old load left as it is (an export-only script: neg_export_*)
                yield path.name, node


# --------------------------------------------------------------------------- the target API


def test_owned_names_are_the_rename_table_entry():
    """NM101 owns every import path of the inference class (so NM100/NM901/NM900 leave it alone)."""
    entry = load_table()["optimum.neuron.NeuronModelForCausalLM"]
    assert set(SOURCES) == set(entry.sources)
    assert entry.target == TARGET
    assert "optimum.neuron.models.training.NeuronModelForCausalLM" not in SOURCES


def test_emitted_keywords_exist_in_transformers():
    from transformers import GenerationConfig, PreTrainedModel
    from transformers.distributed import DistributedConfig

    import transformers

    source = inspect.getsource(PreTrainedModel.from_pretrained)
    accepted = set(inspect.signature(PreTrainedModel.from_pretrained).parameters)
    popped = {kw for kw in ("dtype", "device_map", "distributed_config") if f'kwargs.pop("{kw}"' in source}
    assert popped == {"dtype", "device_map", "distributed_config"}
    accepted |= popped

    seen: set[str] = set()
    gen_attrs: set[str] = set()
    for name, call in _emitted_calls():
        for kw in call.keywords:
            if kw.arg is not None:
                assert kw.arg in accepted, f"{name}: from_pretrained does not accept {kw.arg}="
                seen.add(kw.arg)
                if kw.arg == "distributed_config":
                    assert isinstance(kw.value, ast.Call)
                    fields = set(inspect.signature(DistributedConfig).parameters)
                    assert {k.arg for k in kw.value.keywords} <= fields
    for path in sorted(FIXTURES.glob("*.after.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute)
                    and isinstance(node.targets[0].value, ast.Attribute)
                    and node.targets[0].value.attr == "generation_config"):
                gen_attrs.add(node.targets[0].attr)
    assert {"dtype", "device_map", "distributed_config"} <= seen
    assert gen_attrs == {"cache_implementation", "max_cache_len"}
    config = GenerationConfig(cache_implementation="static", max_cache_len=64)
    assert (config.cache_implementation, config.max_cache_len) == ("static", 64)
    # the names the rule imports exist where it imports them from
    module, _, name = DISTRIBUTED_CONFIG.rpartition(".")
    assert getattr(__import__(module, fromlist=[name]), name) is DistributedConfig
    assert getattr(transformers, TARGET.rpartition(".")[2]) is transformers.AutoModelForCausalLM


def test_tensor_parallel_and_device_map_are_never_both_emitted():
    """Mutually exclusive in transformers when the size is > 1; a size read at run time gets both, device_map
    None exactly when the size is > 1 (a DistributedConfig of size 1 places nothing)."""
    for name, call in _emitted_calls():
        kws = {k.arg: k.value for k in call.keywords}
        if not {"device_map", "distributed_config"} <= set(kws):
            continue
        placed, config = kws["device_map"], kws["distributed_config"]
        size = next(k.value for k in config.keywords if k.arg == "tp_size")
        assert isinstance(placed, ast.IfExp) and isinstance(placed.body, ast.Constant) and placed.body.value is None, name
        assert ast.dump(placed.test) == ast.dump(ast.Compare(size, [ast.Gt()], [ast.Constant(1)])), name
        assert isinstance(placed.orelse, ast.Constant) and placed.orelse.value == "neuron", name


def test_explain_example_is_what_the_rule_does(rules):
    doc = CausalLMStaticCache.doc()
    new, findings = migrate(doc.before + "\n", rules)
    assert new == doc.after + "\n"
    assert {f.fix for f in findings if f.rule == "NM101"} == {"applied"}


# --------------------------------------------------------------------------- behaviour details


def test_ignored_call_is_left_alone(rules):
    src = textwrap.dedent("""\
        from optimum.neuron import NeuronModelForCausalLM


        def load(mid):
            a = NeuronModelForCausalLM.from_pretrained(mid, export=True, sequence_length=8)  # neuron-migrate: ignore[NM101]
            return a
        """)
    new, findings = migrate(src, rules)
    assert "NeuronModelForCausalLM.from_pretrained(mid, export=True, sequence_length=8)" in new
    assert "generation_config" not in new
    assert not [f for f in findings if f.rule == "NM101"]


def test_ignore_elsewhere_in_block_does_not_stop_the_insertion(rules):
    src = textwrap.dedent("""\
        from optimum.neuron import NeuronModelForCausalLM


        def load(mid):
            x = 1  # neuron-migrate: ignore[NM101]
            model = NeuronModelForCausalLM.from_pretrained(mid, export=True, sequence_length=8)
            return model
        """)
    new, findings = migrate(src, rules)
    assert 'model = AutoModelForCausalLM.from_pretrained(mid, device_map="neuron")\n' in new
    assert 'model.generation_config.cache_implementation = "static"\n' in new
    assert "TODO(neuron-migrate NM101)" not in new
    assert "x = 1  # neuron-migrate: ignore[NM101]" in new
    ast.parse(new)


def test_two_loads_in_one_block(rules):
    src = textwrap.dedent("""\
        from optimum.neuron import NeuronModelForCausalLM


        def load(a, b):
            m1 = NeuronModelForCausalLM.from_pretrained(a, export=True, sequence_length=128)
            m2 = NeuronModelForCausalLM.from_pretrained(b, export=True, sequence_length=256, auto_cast_type="fp16")
            return m1, m2
        """)
    new, _ = migrate(src, rules)
    assert new == textwrap.dedent("""\
        from transformers import AutoModelForCausalLM
        import torch


        def load(a, b):
            m1 = AutoModelForCausalLM.from_pretrained(a, device_map="neuron")
            m1.generation_config.cache_implementation = "static"
            m1.generation_config.max_cache_len = 128
            m2 = AutoModelForCausalLM.from_pretrained(b, dtype=torch.float16, device_map="neuron")
            m2.generation_config.cache_implementation = "static"
            m2.generation_config.max_cache_len = 256
            return m1, m2
        """)


def test_kwargs_variable_without_export_is_not_rewritten(rules):
    src = textwrap.dedent("""\
        from optimum.neuron import NeuronModelForCausalLM


        def load(mid, kw):
            model = NeuronModelForCausalLM.from_pretrained(mid, **kw)
            return model
        """)
    new, findings = migrate(src, rules)
    assert "model = AutoModelForCausalLM.from_pretrained(mid, **kw)" in new
    assert any(f.rule == "NM101" and f.fix == "manual" and "**kw" in f.message for f in findings)


def test_training_class_is_not_touched_by_nm101(rules):
    src = "from optimum.neuron.models.training import NeuronModelForCausalLM\n"
    src += "model = NeuronModelForCausalLM.from_pretrained('x', trn_config=cfg)\n"
    _, findings = migrate(src, rules)
    assert not [f for f in findings if f.rule == "NM101"]


# --------------------------------------------------------------------------- the output runs

SCRIPT = '''\
import json
import sys

import torch
from optimum.neuron import NeuronModelForCausalLM


def main(path):
    model = NeuronModelForCausalLM.from_pretrained(
        path, export=True, batch_size=1, sequence_length=64, num_cores=1, auto_cast_type="fp32"
    )
    input_ids = torch.tensor([[1, 17, 42, 256, 7, 99]])
    out = model.generate(input_ids, max_new_tokens=8, do_sample=False, return_dict_in_generate=True)
    print(json.dumps({
        "tokens": out.sequences[0].tolist(),
        "cache": type(out.past_key_values).__name__,
        "cache_implementation": model.generation_config.cache_implementation,
        "max_cache_len": model.generation_config.max_cache_len,
        "dtype": str(model.dtype),
    }))


if __name__ == "__main__":
    main(sys.argv[1])
'''


def test_migrated_script_generates_the_same_greedy_tokens(tmp_path, rules):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=512, max_position_embeddings=128,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path / "tiny")

    migrated, findings = migrate(SCRIPT, rules)
    assert "optimum" not in migrated
    assert 'from_pretrained(path, dtype=torch.float32, device_map="neuron")' in migrated
    assert 'model.generation_config.cache_implementation = "static"' in migrated
    assert "model.generation_config.max_cache_len = 64" in migrated
    assert not [f for f in findings if f.fix == "manual"], findings
    # No Neuron device here: load on CPU instead. The rest (static cache, generate) is exactly the
    # migrated code; the full emulation of the neuron device comes with `neuron-migrate verify`.
    script = tmp_path / "migrated.py"
    script.write_text(migrated.replace('"neuron"', '"cpu"'))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "tiny")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])

    reference = AutoModelForCausalLM.from_pretrained(tmp_path / "tiny", dtype=torch.float32)
    assert reference.generation_config.cache_implementation is None  # plain dynamic cache
    expected = reference.generate(torch.tensor([[1, 17, 42, 256, 7, 99]]), max_new_tokens=8, do_sample=False)

    assert got["cache"] == "StaticCache"
    assert (got["cache_implementation"], got["max_cache_len"], got["dtype"]) == ("static", 64, "torch.float32")
    assert len(got["tokens"]) == 6 + 8
    assert got["tokens"] == expected[0].tolist()
