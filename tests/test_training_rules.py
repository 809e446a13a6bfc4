"""NM201/NM202/NM203/NM301 (codemods/training/arguments.py, codemods/training/parallel.py): what they emit
exists in the pinned transformers / TRL, what they drop does not, and a migrated Trainer
fine-tune really trains like a hand-written plain-transformers script."""

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

from codemods.training import arguments as training, models as training_models, parallel as training_parallel
from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent
IDS = ("NM201", "NM202", "NM203", "NM206", "NM207", "NM208", "NM301", "NM302", "NM303")


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def migrate(source: str, rules: RuleSet) -> tuple[str, list]:
    result = process(Candidate(Path("script.py"), "script.py", "python"), rules, source.encode())
    assert result.status in ("changed", "unchanged"), result.error
    new = result.new_bytes.decode() if result.status == "changed" else source
    return new, result.findings


def _params(cls) -> set[str]:
    return set(inspect.signature(cls).parameters)


# ------------------------------------------------------------------ emitted names exist
def _targets():
    import transformers
    import trl
    from transformers.distributed import DistributedConfig
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    return {
        "TrainingArguments": _params(transformers.TrainingArguments),
        "Seq2SeqTrainingArguments": _params(transformers.Seq2SeqTrainingArguments),
        "Trainer": _params(transformers.Trainer),
        "Seq2SeqTrainer": _params(transformers.Seq2SeqTrainer),
        "SFTConfig": _params(trl.SFTConfig),
        "SFTTrainer": _params(trl.SFTTrainer),
        "DistributedConfig": _params(DistributedConfig),
        "ORPOConfig": _params(ORPOConfig),
        "ORPOTrainer": _params(ORPOTrainer),
    }


def test_every_keyword_in_the_after_fixtures_exists():
    """Every keyword passed to a target class in the .after fixtures of these rules is a
    parameter of the installed class, unless a marker above the statement asks to move it."""
    targets = _targets()
    checked = 0
    for rule in IDS:
        for path in sorted((FIXTURES / rule).glob("*.after.py")):
            text = path.read_text()
            lines = text.splitlines()
            tree = ast.parse(text)
            starts = {}
            for stmt in ast.walk(tree):
                if isinstance(stmt, ast.stmt):
                    for sub in ast.walk(stmt):
                        starts[id(sub)] = stmt.lineno  # BFS: the innermost statement wins
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if name not in targets:
                    continue
                for kw in node.keywords:
                    if kw.arg is None:
                        continue
                    if kw.arg not in targets[name]:
                        line = starts[id(node)] - 1
                        above = []
                        while line > 0 and lines[line - 1].strip().startswith("# TODO(neuron-migrate"):
                            above.append(lines[line - 1])
                            line -= 1
                        assert any(kw.arg in m for m in above), f"{path.name}: {name}({kw.arg}=...) does not exist"
                    checked += 1
    assert checked > 40


def test_added_and_renamed_fields_exist():
    targets = _targets()
    args = targets["TrainingArguments"]
    for name in dict(training.STATIC_SHAPES):
        assert name in args and name in targets["SFTConfig"]
    for new in training.V5_RENAMES.values():
        assert new in args
    assert "warmup_steps" in args
    for trainer in ("Trainer", "Seq2SeqTrainer", "SFTTrainer"):
        assert "processing_class" in targets[trainer] and "tokenizer" not in targets[trainer]
    for name in ("max_length", "packing_strategy", "model_init_kwargs"):
        assert name in targets["SFTConfig"]
    assert "max_seq_length" not in targets["SFTConfig"]
    for _param, field, _env in training_parallel.SIZES:
        assert field in targets["DistributedConfig"]
    assert set(training.PARALLEL_SIZES.values()) <= targets["DistributedConfig"]
    assert set(training_models.RENAMED.values()) <= targets["DistributedConfig"]
    dropped = set(training_models.PLUMBING) | set(training_models.BEHAVIOUR) | set(training_models.RENAMED)
    assert not dropped & targets["DistributedConfig"]


def test_dropped_fields_do_not_exist_natively():
    """Everything the rules drop or move is rejected by the native classes (so it must go)."""
    targets = _targets()
    dropped = (set(training.PLUMBING) | set(training.BEHAVIOUR) | set(training.PARALLEL_SIZES)
               | set(training.MIXED_PRECISION) | {"zero_1", "warmup_ratio"})
    for cls in ("TrainingArguments", "Seq2SeqTrainingArguments", "SFTConfig"):
        assert not dropped & targets[cls], (cls, dropped & targets[cls])


def test_owned_names_are_the_table_entries():
    from codemods.common.renames import load_table

    table = load_table()
    for name in training.ARGS_SOURCES + training.TRAINER_SOURCES + training.SFT_TRAINER_SOURCES + \
            training.SFT_CONFIG_SOURCES:
        assert name in table
    assert "optimum.neuron.NeuronTrainingArguments" in training.ARGS_SOURCES
    assert "optimum.neuron.Seq2SeqNeuronTrainingArguments" in training.ARGS_SOURCES
    assert "optimum.neuron.TrainiumTrainingArguments" in training.ARGS_SOURCES
    assert "optimum.neuron.NeuronTrainer" in training.TRAINER_SOURCES


def test_emitted_configs_construct(tmp_path):
    """The values the rules write are accepted: wrapped packing, device_map None, the to_dict idiom."""
    import transformers
    import trl
    from transformers.distributed import DistributedConfig

    assert DistributedConfig(tp_size=int(os.environ.get("TP_SIZE", "1"))).tp_size == 1
    cfg = trl.SFTConfig(output_dir=str(tmp_path), max_length=64, packing=True, packing_strategy="wrapped",
                        model_init_kwargs={"device_map": None}, torch_compile=True, dataloader_drop_last=True,
                        use_cpu=True, report_to="none")
    assert cfg.packing_strategy == "wrapped" and cfg.model_init_kwargs == {"device_map": None}
    args = transformers.TrainingArguments(output_dir=str(tmp_path), warmup_steps=0.1, activation_checkpointing=True,
                                          use_cpu=True, report_to="none")
    sft = trl.SFTConfig(max_length=64, packing=False, model_init_kwargs={"dtype": "bfloat16", "device_map": None},
                        **args.to_dict())
    assert sft.max_length == 64 and sft.warmup_steps == 0.1


# ------------------------------------------------------------------ behaviour of the rules
def test_positional_and_module_style(rules):
    out, findings = migrate(textwrap.dedent("""\
        import optimum.neuron as on
        import optimum.neuron.distributed as dist

        args = on.NeuronTrainingArguments("out", zero_1=False, torch_compile=True, dataloader_drop_last=True)
        with dist.lazy_load_for_parallelism(2):
            model = M.from_pretrained("x")
        """), rules)
    compile(out, "<out>", "exec")
    assert 'args = transformers.TrainingArguments("out", torch_compile=True, dataloader_drop_last=True)' in out
    assert ("model = M.from_pretrained(\n    \"x\",\n    distributed_config=DistributedConfig(tp_size=2, dp_replicate_size="
            "int(os.environ.get(\"WORLD_SIZE\", \"1\")) // 2),\n)") in out
    assert "lazy_load_for_parallelism" not in out
    assert {f.rule for f in findings} >= {"NM201", "NM301"}


def test_ignore_comment_silences_the_field_rewrite(rules):
    src = 'from optimum.neuron import NeuronTrainingArguments\nargs = NeuronTrainingArguments(output_dir="o", zero_1=True)  # neuron-migrate: ignore[NM201]\n'
    out, findings = migrate(src, rules)
    assert 'TrainingArguments(output_dir="o", zero_1=True)  # neuron-migrate: ignore[NM201]' in out
    assert not [f for f in findings if f.rule == "NM201"]


def test_sft_trainer_with_model_object_keeps_model_init_kwargs_alone(rules):
    out, _ = migrate(textwrap.dedent("""\
        from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer

        config = NeuronSFTConfig(output_dir="o", max_seq_length=128)
        trainer = NeuronSFTTrainer(model=model, args=config, tokenizer=tok)
        """), rules)
    assert "model_init_kwargs" not in out
    # (activation_checkpointing=False, bf16=False: NM613 pins the defaults TRL 1.16 flipped)
    assert ('SFTConfig(\n    output_dir="o",\n    max_length=128,\n    torch_compile=True,\n    dataloader_drop_last=True,\n'
            '    activation_checkpointing=False,\n    bf16=False,\n)') in out
    assert "SFTTrainer(model=model, args=config, processing_class=tok)" in out


# ------------------------------------------------------------------ the migrated script trains
SCRIPT = '''\
import argparse
import json

from datasets import Dataset
from transformers import AutoModelForCausalLM, set_seed

from optimum.neuron import NeuronTrainer as Trainer
from optimum.neuron import NeuronTrainingArguments
from optimum.neuron.distributed import lazy_load_for_parallelism


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("output_dir")
    parser.add_argument("--tensor_parallel_size", type=int, default=1)
    cli = parser.parse_args()
    set_seed(0)
    rows = [[(7 * i + 3 * j) % 512 for j in range(16)] for i in range(16)]
    dataset = Dataset.from_dict({"input_ids": rows, "labels": rows})
    training_args = NeuronTrainingArguments(
        output_dir=cli.output_dir,
        max_steps=3,
        per_device_train_batch_size=2,
        logging_steps=1,
        learning_rate=1e-3,
        warmup_ratio=0.1,
        overwrite_output_dir=True,
        report_to="none",
        seed=0,
        tensor_parallel_size=1,
        zero_1=False,
        skip_cache_push=True,
        use_xser=True,
        async_save=False,
    )
    with lazy_load_for_parallelism(tensor_parallel_size=cli.tensor_parallel_size):
        model = AutoModelForCausalLM.from_pretrained(cli.model_dir)
    trainer = Trainer(model=model, args=training_args, train_dataset=dataset, tokenizer=None)
    trainer.train()
    print(json.dumps([log["loss"] for log in trainer.state.log_history if "loss" in log]))


if __name__ == "__main__":
    main()
'''

def _reference_losses(model_dir: Path, output_dir: Path) -> list[float]:
    """The same fine-tune written by hand with plain transformers (in this process: one import less)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments, set_seed

    set_seed(0)
    rows = [[(7 * i + 3 * j) % 512 for j in range(16)] for i in range(16)]
    dataset = Dataset.from_dict({"input_ids": rows, "labels": rows})
    args = TrainingArguments(
        output_dir=str(output_dir), max_steps=3, per_device_train_batch_size=2, logging_steps=1, learning_rate=1e-3,
        warmup_steps=0.1, report_to="none", seed=0, use_cpu=True, dataloader_drop_last=True, disable_tqdm=True,
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    trainer = Trainer(model=model, args=args, train_dataset=dataset)
    trainer.train()
    return [log["loss"] for log in trainer.state.log_history if "loss" in log]


def _tiny_llama(path: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=512, max_position_embeddings=64)
    LlamaForCausalLM(config).save_pretrained(path)


def _start(script: Path, *argv: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "CI": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": ""}
    env.pop("TP_SIZE", None)
    return subprocess.Popen([sys.executable, str(script), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _losses(proc: subprocess.Popen) -> list[float]:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def test_migrated_trainer_script_trains_like_plain_transformers(tmp_path, rules):
    migrated, findings = migrate(SCRIPT, rules)
    assert "optimum" not in migrated and "tensor_parallel_size=" not in migrated
    assert "processing_class=None" in migrated and "warmup_steps=0.1" in migrated
    assert "torch_compile=True" in migrated and "dataloader_drop_last=True" in migrated
    assert 'tp_size=int(os.environ.get("TP_SIZE", "1")),\n' in migrated
    assert 'dp_replicate_size=int(os.environ.get("WORLD_SIZE", "1"))\n' in migrated
    assert {"NM201", "NM202", "NM301"} <= {f.rule for f in findings}
    # CPU stand-in for the neuron device: force CPU, and compile with the eager backend (the same
    # numerics as no compile; inductor would take a minute)
    runnable = migrated.replace('"neuron"', '"cpu"').replace(
        "torch_compile=True", 'torch_compile=True, torch_compile_backend="eager", use_cpu=True'
    )
    assert runnable != migrated
    model_dir = tmp_path / "tiny-llama"
    _tiny_llama(model_dir)
    (tmp_path / "migrated.py").write_text(runnable)
    running = _start(tmp_path / "migrated.py", str(model_dir), str(tmp_path / "out-migrated"))
    want = _reference_losses(model_dir, tmp_path / "out-reference")
    got = _losses(running)
    assert len(got) == 3
    assert got == want


@pytest.mark.parametrize("rule", [training.TrainingArgumentsFields, training.TrainerArguments,
                                  training.SFTConfigFields, training_parallel.LazyLoadForParallelism,
                                  training_models.TrainingNeuronConfigFields, training_models.TrainingModelTrnConfig])
def test_explain_example_is_what_the_rule_does(rule, rules):
    doc = rule.doc()
    assert doc.title and doc.why and doc.before and doc.after and doc.caveats
    new, findings = migrate(doc.before + "\n", rules)
    assert new == doc.after + "\n"
    assert any(f.rule == rule.id for f in findings)


SFT_SCRIPT = '''\
import json
import sys

from datasets import Dataset

from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer


def main(model_dir, output_dir):
    rows = [[(7 * i + 3 * j) % 500 for j in range(12)] for i in range(16)]
    dataset = Dataset.from_dict({"input_ids": rows})
    config = NeuronSFTConfig(
        output_dir=output_dir,
        max_seq_length=32,
        packing=True,
        max_steps=3,
        per_device_train_batch_size=2,
        logging_steps=1,
        learning_rate=1e-3,
        report_to="none",
        seed=0,
        bf16=False,
        disable_tqdm=True,
        zero_1=False,
        tensor_parallel_size=1,
        skip_cache_push=True,
    )
    trainer = NeuronSFTTrainer(model=model_dir, args=config, train_dataset=dataset)
    trainer.train()
    print(json.dumps([log["loss"] for log in trainer.state.log_history if "loss" in log]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
'''


def _tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(510)}
    vocab.update({"<pad>": 510, "<eos>": 511})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>").save_pretrained(path)


def _sft_reference_losses(model_dir: Path, output_dir: Path) -> list[float]:
    """The same SFT run written by hand with TRL 1.16 (model loaded from its path by the trainer)."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    rows = [[(7 * i + 3 * j) % 500 for j in range(12)] for i in range(16)]
    config = SFTConfig(
        output_dir=str(output_dir), max_length=32, packing=True, packing_strategy="wrapped", max_steps=3,
        per_device_train_batch_size=2, logging_steps=1, learning_rate=1e-3, report_to="none", seed=0, bf16=False,
        disable_tqdm=True, use_cpu=True, dataloader_drop_last=True, model_init_kwargs={"device_map": None},
    )
    trainer = SFTTrainer(model=str(model_dir), args=config, train_dataset=Dataset.from_dict({"input_ids": rows}))
    trainer.train()
    return [log["loss"] for log in trainer.state.log_history if "loss" in log]


def test_migrated_sft_script_trains_like_plain_trl(tmp_path, rules):
    migrated, findings = migrate(SFT_SCRIPT, rules)
    assert "optimum" not in migrated and "max_seq_length" not in migrated and "zero_1" not in migrated
    assert 'packing_strategy="wrapped"' in migrated and 'model_init_kwargs={"device_map": None}' in migrated
    assert {"NM203"} <= {f.rule for f in findings}
    runnable = migrated.replace('"neuron"', '"cpu"').replace(
        "torch_compile=True", 'torch_compile=True, torch_compile_backend="eager", use_cpu=True'
    )
    assert runnable != migrated
    model_dir = tmp_path / "tiny-llama"
    _tiny_llama(model_dir)
    _tokenizer(model_dir)
    (tmp_path / "migrated.py").write_text(runnable)
    running = _start(tmp_path / "migrated.py", str(model_dir), str(tmp_path / "out-migrated"))
    want = _sft_reference_losses(model_dir, tmp_path / "out-reference")
    got = _losses(running)
    assert len(got) == 3
    assert got == want
