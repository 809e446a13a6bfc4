"""NM108 (NeuronModelForImageTextToText), NM109 (NeuronModelForEmbedding) and NM110 (reads of
``neuron_config`` / ``config.neuron``): what they emit exists in the pinned transformers, the
explain examples are what the rules do, and the reads are only rewritten where the load is known."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

from codemods.inference.causal_lm import EmbeddingModel, ImageTextToTextStaticCache
from codemods.inference.neuron_attributes import NeuronConfigReads
from codemods.common.renames import load_table
from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def migrate(source: str, rules: RuleSet) -> tuple[str, list]:
    result = process(Candidate(Path("script.py"), "script.py", "python"), rules, source.encode())
    assert result.status in ("changed", "unchanged"), result.error
    new = result.new_bytes.decode() if result.status == "changed" else source
    return new, result.findings


@pytest.mark.parametrize("rule", [ImageTextToTextStaticCache, EmbeddingModel])
def test_owned_names_are_the_rename_table_entry(rule):
    entry = load_table()[rule.sources[0]]
    assert set(rule.sources) == set(entry.sources) == set(rule.owns)
    assert entry.target == rule.target


@pytest.mark.parametrize("rule", [ImageTextToTextStaticCache, EmbeddingModel])
def test_emitted_names_and_keywords_exist_in_transformers(rule):
    import transformers
    from transformers import PreTrainedModel
    from transformers.distributed import DistributedConfig

    target_cls = getattr(transformers, rule.target_name)
    assert rule.target == f"transformers.{rule.target_name}"
    source = inspect.getsource(PreTrainedModel.from_pretrained)
    accepted = set(inspect.signature(PreTrainedModel.from_pretrained).parameters)
    accepted |= {kw for kw in ("dtype", "device_map", "distributed_config") if f'kwargs.pop("{kw}"' in source}
    seen = set()
    for path in sorted((FIXTURES / rule.id).glob("*.after.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "from_pretrained"):
                continue
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name != rule.target_name:
                continue
            for kw in node.keywords:
                if kw.arg is not None:
                    assert kw.arg in accepted, f"{path.name}: from_pretrained does not accept {kw.arg}="
                    seen.add(kw.arg)
                    if kw.arg == "distributed_config":
                        assert {k.arg for k in kw.value.keywords} <= set(inspect.signature(DistributedConfig).parameters)
    assert {"device_map", "distributed_config"} <= seen
    assert hasattr(target_cls, "from_pretrained")


def test_image_text_to_text_generation_config_fields_exist():
    from transformers import GenerationConfig

    config = GenerationConfig(cache_implementation="static", max_cache_len=4096)
    assert (config.cache_implementation, config.max_cache_len) == ("static", 4096)


def test_embedding_marker_names_a_real_sentence_transformers_keyword():
    sentence_transformers = pytest.importorskip("sentence_transformers")
    assert "device" in inspect.signature(sentence_transformers.SentenceTransformer).parameters


@pytest.mark.parametrize("rule", [ImageTextToTextStaticCache, EmbeddingModel, NeuronConfigReads])
def test_explain_example_is_what_the_rule_does(rule, rules):
    doc = rule.doc()
    new, findings = migrate(doc.before + "\n", rules)
    assert new == doc.after + "\n"
    assert any(f.rule == rule.id and f.fix == "applied" for f in findings)


def test_embedding_is_not_given_a_static_cache(rules):
    new, findings = migrate(textwrap.dedent("""\
        from optimum.neuron import NeuronModelForEmbedding

        model = NeuronModelForEmbedding.from_pretrained("Qwen/Qwen3-Embedding-0.6B", export=True, batch_size=1)
    """), rules)
    assert "generation_config" not in new
    assert 'model = AutoModel.from_pretrained("Qwen/Qwen3-Embedding-0.6B", device_map="neuron")' in new
    assert not [f for f in findings if f.rule == "NM901"]


# --------------------------------------------------------------------------- NM110


def test_reads_become_the_literal_only_for_known_loads(rules):
    new, findings = migrate(textwrap.dedent("""\
        from optimum.neuron import NeuronModelForCausalLM

        model = NeuronModelForCausalLM.from_pretrained("m", export=True, batch_size=2, sequence_length=256)
        a = model.neuron_config.sequence_length
        b = model.neuron_config.tp_degree
        c = other.neuron_config.sequence_length
    """), rules)
    assert "a = 256\n" in new
    assert "b = model.neuron_config.tp_degree" in new  # the load did not pass it
    assert "c = other.neuron_config.sequence_length" in new
    manual = [f.message for f in findings if f.rule == "NM110" and f.fix == "manual"]
    assert len(manual) == 2 and "model.tp_size" in manual[0] and "max_cache_len" in manual[1]


def test_read_before_a_variable_load_keeps_a_marker(rules):
    new, findings = migrate(textwrap.dedent("""\
        from optimum.neuron import NeuronModelForCausalLM

        seq = 512
        model = NeuronModelForCausalLM.from_pretrained("m", export=True, sequence_length=seq)
        print(model.neuron_config.sequence_length)
    """), rules)
    assert "print(model.neuron_config.sequence_length)" in new
    assert any(f.rule == "NM110" and f.fix == "manual" for f in findings)


def test_units_without_optimum_neuron_are_left_alone(rules):
    src = textwrap.dedent("""\
        from my_lib import load

        model = load()
        print(model.neuron_config.sequence_length, model.config.neuron["batch_size"])
    """)
    new, findings = migrate(src, rules)
    assert new == src
    assert not [f for f in findings if f.rule == "NM110"]


def test_ignored_read_is_left_alone(rules):
    new, findings = migrate(textwrap.dedent("""\
        from optimum.neuron import NeuronModelForCausalLM

        model = NeuronModelForCausalLM.from_pretrained("m", export=True, sequence_length=256)
        n = model.neuron_config.sequence_length  # neuron-migrate: ignore[NM110]
    """), rules)
    assert "n = model.neuron_config.sequence_length  # neuron-migrate: ignore[NM110]" in new
    assert not [f for f in findings if f.rule == "NM110"]
