"""The generated upgrade data (codemods/upgrade/upgrade_api.json.gz) against the installed targets.

Only the TARGET side can be checked here: the old side was probed from old releases installed from
the package registry into scratch venvs (``tools/gen_upgrade_api.py --make-venvs``), which a test
cannot do offline. So: the data's target facts are re-probed from the installed libraries, every
name the data calls removed is absent from the target API data, every replacement it names exists,
and the hand supplements (``codemods.upgrade.data``) hold.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codemods.upgrade.data import FIELD_RENAMES, FIELD_VALUES, MOVES, data
from migrator.selfcheck.targetapi import api

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
DISTS = {"huggingface_hub": "huggingface-hub"}


def _installed(lib: str) -> str | None:
    try:
        return importlib.metadata.version(DISTS.get(lib, lib))
    except importlib.metadata.PackageNotFoundError:
        return None


def test_provenance():
    d = data()
    raw = d.raw
    assert raw["generated_by"] == "tools/gen_upgrade_api.py" and raw["date"] and "gen_upgrade_api" in raw["command"]
    assert len(d.old) >= 4
    assert {v["transformers"][:4] for v in d.old.values()} >= {"4.36", "4.45", "4.51", "4.57"}
    assert d.target_versions["transformers"].startswith("5.")


def test_target_side_is_fresh():
    """Re-probe the installed targets: the tracked fields' defaults and override signatures match."""
    installed = {lib: _installed(lib) for lib in data().target_versions}
    if installed != data().target_versions:
        pytest.skip(f"installed {installed} differ from the data's targets {data().target_versions}")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_upgrade_api.py"), "--check-target"],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_removed_names_are_absent_and_replacements_exist():
    a = api()
    checked = 0
    for module, names in data().raw["removed_names"].items():
        for name, entry in names.items():
            assert a.name_exists(module, name) is not True, f"{module}.{name} exists in the target"
            if "moved_to" in entry:
                mod, _, new = entry["moved_to"].rpartition(".")
                if a.is_target(mod):
                    assert a.name_exists(mod, new) is True, entry["moved_to"]
                else:  # a module the target API data does not hold (huggingface_hub.utils): the installed one
                    assert hasattr(importlib.import_module(mod), new), entry["moved_to"]
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("old, new", sorted(MOVES.items()))
def test_hand_moves(old, new):
    mod, _, name = new.rpartition(".")
    assert getattr(importlib.import_module(mod), name) is not None
    old_mod, _, old_name = old.rpartition(".")
    if api().is_target(old_mod):
        assert api().name_exists(old_mod, old_name) is not True


@pytest.mark.parametrize("key, new", sorted(FIELD_RENAMES.items()))
def test_hand_field_renames(key, new):
    cls, old = key
    assert api().accepts(cls, old) is False and api().accepts(cls, new) is True


def test_hand_field_values():
    import dataclasses

    import transformers

    for (cls, old), (new, value) in FIELD_VALUES.items():
        assert api().accepts(cls, old) is False and api().accepts(cls, new) is True
        # the value is one the field accepts: the dataclass takes it
        args = transformers.TrainingArguments(output_dir="/tmp/nm611", **{new: value})
        assert getattr(args, new) in (value, type(getattr(args, new))(value))
        assert new in {f.name for f in dataclasses.fields(args)}


def test_sample_outputs_alias_the_generate_outputs():
    """The data says SampleDecoderOnlyOutput lives on as GenerateDecoderOnlyOutput (4.42+ aliased it)."""
    entry = data().removed_name("transformers.generation", "SampleDecoderOnlyOutput")
    assert entry["moved_to"] == "transformers.generation.GenerateDecoderOnlyOutput"
    assert data().removed_attr("transformers.PreTrainedTokenizerBase", "encode_plus")
    change = data().method_change("transformers.Trainer.compute_loss")
    assert ["num_items_in_batch", "POSITIONAL_OR_KEYWORD", None] in change["added"]


def test_the_removed_model_helpers_are_gone_from_v5_models():
    """NM623's table: every helper is listed removed by the data, and no v5 model class has it (an encoder, a
    decoder with generate(), the base class), so a call raises AttributeError there."""
    import transformers

    from codemods.upgrade.calls import MODEL, MODEL_HELPERS

    classes = (transformers.PreTrainedModel, transformers.BertModel, transformers.PerceiverModel,
               transformers.GPT2LMHeadModel, transformers.LlamaForCausalLM)
    for name in MODEL_HELPERS:
        assert data().removed_attr(MODEL, name), name
        assert not any(hasattr(cls, name) for cls in classes), name
    model = transformers.BertModel(transformers.BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                                           intermediate_size=8, vocab_size=16))
    with pytest.raises(AttributeError):
        model.invert_attention_mask(__import__("torch").ones(1, 4))
