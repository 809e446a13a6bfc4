"""In-process checks of pieces of the old-stack emulation and of the comparison that the runnable
projects (tests/runnable) exercise end to end: the exported-directory layouts of optimum-neuron's
causal LM, the Transformers 4.x ``torchscript=True`` shim, the hint on a checkpoint's missing training
state. No subprocess: cheap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from migrator.verify.compare import compare_checkpoints

ROOT = Path(__file__).resolve().parents[1]
TINY_CLASSIFIER = ROOT / "tests" / "verify_fixtures" / "tiny-classifier"


def test_exported_decoder_layouts(tmp_path):
    pytest.importorskip("torch")
    from migrator.verify.oldstack.optimum_inference import EXPORT_FILE, _read_decoder_export

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert _read_decoder_export(plain) is None  # a checkpoint, not an export

    # generations A/B: config.json "neuron", the weights in checkpoint/
    old = tmp_path / "old"
    (old / "checkpoint").mkdir(parents=True)
    (old / "checkpoint" / "config.json").write_text("{}")
    (old / "config.json").write_text(json.dumps({"neuron": {"batch_size": 4, "sequence_length": 256,
                                                            "num_cores": 2, "auto_cast_type": "bf16"}}))
    settings, weights = _read_decoder_export(old)
    assert (settings["batch_size"], settings["sequence_length"], settings["num_cores"],
            settings["auto_cast_type"]) == (4, 256, 2, "bf16")
    assert weights == str(old / "checkpoint")

    # generation C: neuron_config.json (tp_degree, torch_dtype), the weights beside it
    new = tmp_path / "new"
    new.mkdir()
    (new / "neuron_config.json").write_text(json.dumps({"batch_size": 2, "sequence_length": 128, "tp_degree": 1,
                                                        "torch_dtype": "float32", "checkpoint_id": "org/m"}))
    settings, weights = _read_decoder_export(new)
    assert (settings["batch_size"], settings["num_cores"], settings["auto_cast_type"],
            settings["checkpoint_id"]) == (2, 1, "fp32", "org/m")
    assert weights == str(new)

    # the emulation's own file wins
    (new / EXPORT_FILE).write_text(json.dumps({"batch_size": 8, "sequence_length": 32, "auto_cast_type": "fp32"}))
    assert _read_decoder_export(new)[0]["batch_size"] == 8


def test_torchscript_true_loads_a_tuple_returning_model(monkeypatch, tmp_path):
    """Transformers 5 rejects torchscript=True; on the original side it means return_dict=False (4.x), by
    the concrete class (kwargs read into the config it loads) and by the Auto class (a config object)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers import modeling_utils

    from migrator.verify.oldstack import transformers4

    cls = modeling_utils.PreTrainedModel
    monkeypatch.setattr(cls, "from_pretrained", cls.__dict__["from_pretrained"])  # restored after the test
    with pytest.raises(TypeError):
        transformers.AutoModelForSequenceClassification.from_pretrained(TINY_CLASSIFIER, torchscript=True)
    transformers4.patch(modeling_utils)
    transformers4.patch(modeling_utils)  # idempotent
    ids = torch.tensor([[5, 6, 7]])
    auto = transformers.AutoModelForSequenceClassification.from_pretrained(TINY_CLASSIFIER, torchscript=True)
    concrete = transformers.DistilBertForSequenceClassification.from_pretrained(TINY_CLASSIFIER, torchscript=True)
    config = transformers.AutoConfig.from_pretrained(TINY_CLASSIFIER)
    given = transformers.DistilBertForSequenceClassification.from_pretrained(TINY_CLASSIFIER, config=config,
                                                                             torchscript=True)
    for model in (auto, concrete, given):
        assert isinstance(model(ids), tuple)
    assert config.return_dict is True  # the caller's config object is not changed
    plain = transformers.AutoModelForSequenceClassification.from_pretrained(TINY_CLASSIFIER)
    assert not isinstance(plain(ids), tuple)


def test_missing_training_state_is_explained():
    ref = [{"api": "save_pretrained", "path": "out/checkpoint-2", "tensors": {}},
           {"api": "torch.save", "path": "out/checkpoint-2/optimizer.pt", "tensors": {}},
           {"api": "torch.save", "path": "out/checkpoint-2/rng_state_1.pth", "tensors": {}},
           {"api": "torch.save", "path": "out/extra.pt", "tensors": {}}]
    run = [{"api": "save_pretrained", "path": "out/checkpoint-2", "tensors": {}}]
    checks = {c.name: c for c in compare_checkpoints(run, ref, 1e-5, 1e-4, False)}
    assert checks["checkpoint out/checkpoint-2"].ok
    for name in ("checkpoint out/checkpoint-2/optimizer.pt", "checkpoint out/checkpoint-2/rng_state_1.pth"):
        assert not checks[name].ok and "save_only_model=True leaves out" in checks[name].detail
    assert not checks["checkpoint out/extra.pt"].ok
    assert "save_only_model" not in checks["checkpoint out/extra.pt"].detail
