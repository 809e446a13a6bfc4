"""The upgrade rules (NM6xx): their explain examples are their exact output, and every target
they rewrite to exists / accepts the keyword in the installed (pinned) libraries, while the
source they rewrite from is gone there (``migrator.selfcheck.targetapi``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import codemods.upgrade as upgrade
from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process
from migrator.selfcheck.targetapi import api

RULE_IDS = [r.id for r in upgrade.RULES]


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def migrate(text: str, rules: RuleSet, kind: str = "python"):
    name = "example.py" if kind == "python" else "example.sh"
    result = process(Candidate(Path(name), name, kind), rules, text.encode())
    assert result.status in ("changed", "unchanged"), result.error
    new = result.new_bytes.decode() if result.status == "changed" else text
    return new, result.findings


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_explain_example_is_what_the_rule_does(rule_id, rules):
    rule = next(r for r in upgrade.RULES if r.id == rule_id)
    doc = rule.doc()
    kind = "python" if "python" in rule.kinds else rule.kinds[0]
    assert doc.title and doc.why and doc.before and doc.after and doc.caveats
    new, findings = migrate(doc.before + "\n", rules, kind)
    assert new == doc.after + "\n"
    assert rule_id in {f.rule for f in findings}
    again, _ = migrate(new, rules, kind)
    assert again == new


def test_ids_are_nm6xx():
    assert all(i.startswith("NM6") for i in RULE_IDS)


@pytest.mark.parametrize(
    "module, gone, target_module, name",
    [
        ("transformers", "AdamW", "torch.optim", "AdamW"),
        ("transformers.optimization", "AdamW", "torch.optim", "AdamW"),
    ],
)
def test_moved_names(module, gone, target_module, name):
    assert api().name_exists(module, gone) is False
    assert api().name_exists(target_module, name) is True


@pytest.mark.parametrize(
    "callable_, old, new",
    [
        ("transformers.TrainingArguments", "evaluation_strategy", "eval_strategy"),
        ("transformers.Seq2SeqTrainingArguments", "evaluation_strategy", "eval_strategy"),
        ("trl.SFTConfig", "evaluation_strategy", "eval_strategy"),
        ("transformers.TrainingArguments", "overwrite_output_dir", None),
        ("transformers.Trainer", "tokenizer", "processing_class"),
        ("transformers.Seq2SeqTrainer", "tokenizer", "processing_class"),
        ("trl.SFTTrainer", "tokenizer", "processing_class"),
        ("trl.DPOTrainer", "tokenizer", "processing_class"),
        ("accelerate.Accelerator", "fp16", "mixed_precision"),
        ("transformers.AutoModelForCausalLM.from_pretrained", "use_auth_token", "token"),
        ("diffusers.StableDiffusionPipeline.from_pretrained", "use_auth_token", "token"),
        ("torch.optim.AdamW", "correct_bias", "weight_decay"),
        ("torch.optim.AdamW", "no_deprecation_warning", "eps"),
    ],
)
def test_renamed_keywords(callable_, old, new):
    assert api().accepts(callable_, old) is False
    if new is not None:
        assert api().accepts(callable_, new) is True


def test_send_example_telemetry_is_gone():
    import transformers.utils

    assert not hasattr(transformers.utils, "send_example_telemetry")


def test_trainer_optimizer_name_adamw_hf_is_gone_and_adamw_torch_builds_the_same_kwargs(tmp_path):
    """NM601 renames optim="adamw_hf" to "adamw_torch": 5.23 rejects the old name, and the Trainer gives the
    torch class the eps and weight decay of the arguments."""
    import torch
    from transformers import Trainer, TrainingArguments

    with pytest.raises(ValueError):
        TrainingArguments(output_dir=str(tmp_path), optim="adamw_hf", report_to=[])
    args = TrainingArguments(output_dir=str(tmp_path), optim="adamw_torch", adam_epsilon=1e-7, weight_decay=0.1,
                             report_to=[], use_cpu=True)
    cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    assert cls is torch.optim.AdamW and kwargs["eps"] == 1e-7


def test_torch_adamw_defaults_differ_from_the_pinned_ones():
    """NM601 pins transformers.AdamW's eps=1e-6 and weight_decay=0.0: torch's defaults differ."""
    import inspect

    import torch

    params = inspect.signature(torch.optim.AdamW).parameters
    assert params["eps"].default == 1e-8 and params["weight_decay"].default == 1e-2


def test_user_names_are_left_alone(rules):
    src = (
        "def AdamW(p, lr):\n    return p\n\n\n"
        "class TrainingArguments:\n    def __init__(self, **kw):\n        pass\n\n\n"
        "opt = AdamW(params, lr=1e-3)\n"
        "args = TrainingArguments(evaluation_strategy=\"epoch\", overwrite_output_dir=True)\n"
        "trainer = MyTrainer(tokenizer=tok)\n"
    )
    new, findings = migrate(src, rules)
    assert new == src
    assert not [f for f in findings if f.rule.startswith("NM6")]


def test_local_look_alikes_are_left_alone(rules):
    """Names defined in the module and classes that are no trainer are not the removed APIs."""
    src = (
        "class SampleDecoderOnlyOutput:\n    pass\n\n\n"
        "class Model:\n    def compute_loss(self, model, inputs, return_outputs=False):\n        return 0\n\n\n"
        "out = SampleDecoderOnlyOutput()\n"
        "cmd = [\"ls\", \"--overwrite_output_dir\"]\n"
        "cfg = make_config(packing=True)\n"
    )
    new, findings = migrate(src, rules)
    assert new == src
    assert not [f for f in findings if f.rule.startswith("NM6")]


def test_a_subclass_that_names_tokenizer_keeps_it(rules):
    """NM603 renames tokenizer= on a same-module subclass only when its __init__ forwards it unnamed."""
    src = (
        "from transformers import Trainer\n\n\n"
        "class TokTrainer(Trainer):\n    def __init__(self, *args, tokenizer=None, **kwargs):\n"
        "        self.tok = tokenizer\n        super().__init__(*args, **kwargs)\n\n\n"
        "trainer = TokTrainer(model=model, tokenizer=tok)\n"
    )
    new, _ = migrate(src, rules)
    assert new == src


def test_removed_helpers_get_a_marker_naming_the_replacement(rules):
    new, findings = migrate("from datasets import load_metric\n\nmetric = load_metric(\"accuracy\")\n", rules)
    assert "# TODO(neuron-migrate NM608): `load_metric` is gone in datasets: use evaluate.load" in new
    assert any(f.rule == "NM608" for f in findings)
