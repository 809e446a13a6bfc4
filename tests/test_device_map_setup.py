"""NM105-NM107 (codemods/inference/device_map.py) and NM505 (codemods/project/setup_py.py) beyond their fixtures."""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

import pytest

from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process

MINE = ("NM105", "NM106", "NM107", "NM505")


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def run(source: str, rules: RuleSet) -> tuple[str, list]:
    data = textwrap.dedent(source).lstrip("\n").encode()
    result = process(Candidate(Path("unit.py"), "unit.py", "python"), rules, data)
    assert result.status in ("changed", "unchanged"), result.error
    new = result.new_bytes if result.status == "changed" else data
    return new.decode(), result.findings


def mine(findings) -> list[str]:
    return [f.rule for f in findings if f.rule in MINE]


def assert_idempotent(text: str, rules: RuleSet) -> None:
    again, _ = run(text, rules)
    assert again == text


# --------------------------------------------------------------------------- emitted keywords exist


def test_emitted_keywords_exist_in_installed_signatures():
    import diffusers
    import transformers

    # from_pretrained takes device_map through **kwargs in both libraries
    assert 'kwargs.pop("device_map"' in inspect.getsource(transformers.PreTrainedModel.from_pretrained)
    assert 'kwargs.pop("device_map"' in inspect.getsource(diffusers.ModelMixin.from_pretrained)
    params = inspect.signature(transformers.pipeline).parameters
    assert "device" in params and "device_map" in params
    push = inspect.signature(transformers.PreTrainedModel.push_to_hub).parameters
    assert list(push)[1] == "repo_id"
    for kept in ("private", "token", "revision"):
        assert kept in push


def test_accelerate_lists_no_neuron_device():
    """The claim NM105's `why` cites: get_max_memory has no Neuron branch."""
    from accelerate.utils import modeling

    source = inspect.getsource(modeling.get_max_memory)
    assert "npu" in source and "neuron" not in source


# --------------------------------------------------------------------------- NM105


def test_no_old_stack_leaves_device_map_auto_alone(rules):
    source = """
        from transformers import AutoModelForCausalLM, pipeline

        model = AutoModelForCausalLM.from_pretrained("gpt2", device_map="auto")
        pipe = pipeline("text-generation", model="gpt2", device_map="auto")
    """
    new, findings = run(source, rules)
    assert new == textwrap.dedent(source).lstrip("\n")
    assert mine(findings) == []


def test_device_map_auto_in_migrated_unit(rules):
    new, findings = run("""
        import torch_neuronx
        from transformers import AutoModelForCausalLM, pipeline as make_pipeline

        model = AutoModelForCausalLM.from_pretrained("gpt2", device_map="auto", dtype="auto")
        pipe = make_pipeline("text-generation", model="gpt2", device_map='auto')
        other = AutoModelForCausalLM.from_pretrained("gpt2", device_map="balanced")
        kwargs_only = AutoModelForCausalLM.from_pretrained("gpt2", **{"device_map": "auto"})
    """, rules)
    assert 'from_pretrained("gpt2", device_map="neuron", dtype="auto")' in new
    assert "make_pipeline(\"text-generation\", model=\"gpt2\", device='neuron')" in new
    assert 'device_map="balanced"' in new
    assert '**{"device_map": "auto"}' in new
    assert mine(findings).count("NM105") == 2
    assert_idempotent(new, rules)


def test_device_map_on_unrelated_from_pretrained_kept(rules):
    new, findings = run("""
        import torch_neuronx
        from mylib import Loader

        model = Loader.from_pretrained("x", device_map="auto")
    """, rules)
    assert 'device_map="auto"' in new
    assert "NM105" not in mine(findings)


# --------------------------------------------------------------------------- NM106

HEADER = """
from optimum.neuron import NeuronModelForCausalLM

model = NeuronModelForCausalLM.from_pretrained("m", export=True, batch_size=1, sequence_length=128)
"""


@pytest.mark.parametrize("body", [
    # used by a forward call too
    """
    def f(tok, p):
        inputs = tok(p, return_tensors="pt").to(model.device)
        model(**inputs)
        return model.generate(**inputs)
    """,
    # returned
    """
    def f(tok, p):
        inputs = tok(p, return_tensors="pt").to(model.device)
        model.generate(**inputs)
        return inputs
    """,
    # assigned twice
    """
    def f(tok, p):
        inputs = tok(p, return_tensors="pt").to(model.device)
        inputs = tok(p + p, return_tensors="pt").to(model.device)
        return model.generate(**inputs)
    """,
    # seen by a nested function
    """
    def f(tok, p):
        inputs = tok(p, return_tensors="pt").to(model.device)
        def g():
            return inputs
        return model.generate(**inputs), g
    """,
    # not a device move
    """
    def f(tok, p):
        inputs = tok(p, return_tensors="pt").to(torch.float16)
        return model.generate(**inputs)
    """,
    # never fed to generate
    """
    def f(tok, p):
        inputs = tok(p, return_tensors="pt").to(model.device)
        return inputs["input_ids"].shape
    """,
])
def test_generation_inputs_kept_when_not_provably_generate_only(body, rules):
    new, findings = run(HEADER + textwrap.dedent(body), rules)
    assert ".to(" in new
    assert "NM106" not in mine(findings)
    assert_idempotent(new, rules)


def test_generation_inputs_module_level_and_chained(rules):
    new, findings = run(HEADER + textwrap.dedent("""
        input_ids = tokenizer(
            "hello", return_tensors="pt"
        ).input_ids.to("neuron")
        out = model.generate(input_ids, max_new_tokens=8)
        print(out[0, input_ids.shape[1]:])
    """), rules)
    assert ".to(" not in new
    assert 'input_ids = tokenizer(\n    "hello", return_tensors="pt"\n).input_ids\n' in new
    assert mine(findings).count("NM106") == 1
    assert_idempotent(new, rules)


def test_generation_inputs_without_old_stack_untouched(rules):
    source = """
        def f(model, tok, p):
            inputs = tok(p, return_tensors="pt").to(model.device)
            return model.generate(**inputs)
    """
    new, findings = run(source, rules)
    assert new == textwrap.dedent(source).lstrip("\n")
    assert mine(findings) == []


# --------------------------------------------------------------------------- NM107


def test_push_to_hub_positional_and_untracked(rules):
    new, findings = run("""
        from optimum.neuron import NeuronModelForSequenceClassification
        from transformers import AutoModel

        model = NeuronModelForSequenceClassification.from_pretrained("m", export=True, batch_size=1, sequence_length=8)
        model.push_to_hub("out", "me/repo", token="t")
        plain = AutoModel.from_pretrained("m")
        plain.push_to_hub("me/plain", private=True)
        model.push_to_hub("out", repository_id="me/repo", endpoint="https://hub.example")
    """, rules)
    assert 'model.push_to_hub("me/repo", token="t")' in new
    assert 'plain.push_to_hub("me/plain", private=True)' in new
    assert "TODO(neuron-migrate NM107): Remove endpoint from push_to_hub() and pass the repository id first." in new
    assert_idempotent(new, rules)


# --------------------------------------------------------------------------- NM505


def test_setup_py_inline_list_and_tuple(rules):
    new, findings = run("""
        from setuptools import setup

        setup(name="x", install_requires=["datasets", "torch-xla==2.1.0", "torch-neuronx==2.1.2.2.3.0"],
              extras_require={"neuron": ("optimum-neuron",)})
    """, rules)
    assert 'install_requires=["datasets", "torch-neuronx"]' in new
    assert '"neuron": ("transformers>=5.23", "accelerate>=1.15")' in new
    assert "NM505" in mine(findings)
    assert_idempotent(new, rules)


def test_setup_py_single_quotes_and_one_per_line(rules):
    new, _ = run("""
        from distutils.core import setup

        setup(
            name='x',
            install_requires=[
                'optimum-neuron',
            ],
        )
    """, rules)
    assert "    install_requires=[\n        'transformers>=5.23',\n        'accelerate>=1.15',\n    ],\n" in new
    assert_idempotent(new, rules)


@pytest.mark.parametrize("source", [
    # not setuptools' setup
    """
    from mypkg import setup

    setup(install_requires=["optimum-neuron"])
    """,
    # a project without the old stack
    """
    from setuptools import setup

    setup(install_requires=["transformers==4.40", "torch==2.1"])
    """,
    # torch-xla alone may be a TPU project
    """
    from setuptools import setup

    setup(install_requires=["torch-xla[tpu]==2.5.1"])
    """,
])
def test_setup_py_left_alone(source, rules):
    new, findings = run(source, rules)
    assert new == textwrap.dedent(source).lstrip("\n")
    assert "NM505" not in mine(findings)


def test_xla_device_move_removed(rules):
    new, findings = run("""
        import torch_xla.core.xla_model as xm

        def f(model, tok, p):
            inputs = tok(p, return_tensors="pt").to(xm.xla_device())
            return model.generate(**inputs)
    """, rules)
    assert 'inputs = tok(p, return_tensors="pt")\n' in new
    assert mine(findings) == ["NM106"]
    assert_idempotent(new, rules)


@pytest.mark.parametrize("rule_id", MINE)
def test_explain_examples_migrate_exactly(rule_id, rules):
    from codemods import all_rules

    doc = next(r for r in all_rules() if r.id == rule_id).doc()
    new, findings = run(doc.before + "\n", rules)
    assert new == doc.after + "\n"
    assert rule_id in mine(findings)
