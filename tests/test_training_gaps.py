"""zero_1 -> fsdp_size (NM201/NM203/NM303), ORPO (NM206), parsed-arguments idioms (NM203 TrlParser,
NM207), tokenizer padding (NM208): what they emit exists in transformers 5.23 / TRL 1.16 and does
what the old code did; a migrated TrlParser script trains like hand-written TRL; a migrated
tensor-parallel script generates under torchrun (2 CPU processes, gloo) what one process does."""

from __future__ import annotations

import ast

import dataclasses
import inspect
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import libcst as cst
import pytest

from codemods.training import orpo as training_orpo, padding as training_padding, parsed as training_parsed
from codemods.common.arg_plan import fsdp_size_code
from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process
from tests.torchrun_util import json_reports, torchrun

ROOT = Path(__file__).resolve().parent.parent
TINY_LLAMA = ROOT / "tests" / "verify_fixtures" / "tiny-llama"


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def _todos(text: str) -> list[str]:
    """The markers of a migrated text, by their first words."""
    return [line.split("): ", 1)[1][:33] for line in text.splitlines() if "TODO(neuron-migrate" in line]


def migrate(source: str, rules: RuleSet) -> tuple[str, list]:
    result = process(Candidate(Path("script.py"), "script.py", "python"), rules, source.encode())
    assert result.status in ("changed", "unchanged"), result.error
    new = result.new_bytes.decode() if result.status == "changed" else source
    return new, result.findings


def _env(**extra) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "CI": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": "", "TRL_EXPERIMENTAL_SILENCE": "1",
           "OMP_NUM_THREADS": "1"}
    for name in ("TP_SIZE", "PP_SIZE", "FSDP_SIZE", "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env.update(extra)
    return env


@pytest.mark.parametrize("rule", [training_orpo.ORPOArguments, training_parsed.ParsedArgumentsIdioms,
                                  training_padding.TokenizerPadding])
def test_explain_example_is_what_the_rule_does(rule, rules):
    doc = rule.doc()
    assert doc.title and doc.why and doc.before and doc.after and doc.caveats
    new, findings = migrate(doc.before + "\n", rules)
    assert new == doc.after + "\n"
    assert any(f.rule == rule.id for f in findings)


# ------------------------------------------------------------------ zero_1 -> fsdp_size
def test_fsdp_size_expression_is_world_over_tp(monkeypatch):
    from transformers.distributed import DistributedConfig

    tp = cst.parse_expression("cli.tp * 2")
    assert fsdp_size_code("os.environ", tp) == 'int(os.environ.get("WORLD_SIZE", "1")) // (cli.tp * 2)'
    monkeypatch.setenv("WORLD_SIZE", "32")
    code = fsdp_size_code("os.environ", cst.Integer("8"))
    config = eval(f"DistributedConfig(tp_size=8, fsdp_size={code})", {"DistributedConfig": DistributedConfig, "os": os})
    assert (config.tp_size, config.fsdp_size) == (8, 4)
    monkeypatch.setenv("WORLD_SIZE", "8")  # every process a tensor-parallel rank: no sharding left
    assert eval(code, {"os": os}) == 1


def test_zero_1_only_when_literally_true_and_never_with_pipeline_advice(rules):
    out, findings = migrate(textwrap.dedent("""\
        from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer

        a = NeuronSFTConfig(output_dir="a", zero_1=flag)
        b = NeuronSFTConfig(output_dir="b", pipeline_parallel_size=2, zero_1=True)
        c = NeuronSFTConfig(output_dir="c", zero_1=False)
        trainer = NeuronSFTTrainer(model="org/model", args=a, train_dataset=ds)
    """), rules)
    assert "fsdp_size" not in out.split("a = ")[1].split("\n")[0]
    assert "If zero_1=flag is true, load the model with DistributedConfig(fsdp_size=" in out
    # the pipeline stages are dropped for the Trainer (it cannot train them): zero_1 maps to FSDP, no pipeline advice
    assert "pipeline_parallel_size=2 was dropped, the Trainer trains no stages" in out
    assert any("zero_1=True became fsdp_size=WORLD_SIZE // tp_size" in f.message for f in findings if f.fix == "applied")
    assert "combines pipeline parallelism" not in out and "tp_size x pp_size" not in out


def test_zero_1_fsdp_in_model_init_kwargs_constructs(rules):
    import trl

    out, _ = migrate(textwrap.dedent("""\
        from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer

        config = NeuronSFTConfig(output_dir="out", tensor_parallel_size=2, zero_1=True, use_cpu=True, report_to="none")
        trainer = NeuronSFTTrainer(model="org/model", args=config, train_dataset=ds)
    """), rules)
    assert '"distributed_config": DistributedConfig(tp_size=2, fsdp_size=int(os.environ.get("WORLD_SIZE", "1")) // 2)' \
        in out
    # the script sees a world of 8 (accelerate, inside SFTConfig, must not: it would set up distributed training)
    assert "\nimport os\n" in out
    namespace: dict = {"os": SimpleNamespace(environ={"WORLD_SIZE": "8"})}
    exec(out.split("trainer = ")[0].replace("\nimport os\n", "\n", 1), namespace)
    config = namespace["config"]
    assert isinstance(config, trl.SFTConfig)
    dist = config.model_init_kwargs["distributed_config"]
    assert (dist.tp_size, dist.fsdp_size) == (2, 4) and config.model_init_kwargs["device_map"] is None


# ------------------------------------------------------------------ ORPO
def test_orpo_targets_and_removed_fields():
    from transformers import TrainingArguments
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    fields = {f.name for f in dataclasses.fields(ORPOConfig)}
    assert not set(training_orpo.REMOVED) & fields  # really gone in TRL 1.16
    assert {"beta", "max_length", "model_init_kwargs", "torch_compile", "dataloader_drop_last",
            "activation_checkpointing"} <= fields
    assert "processing_class" in inspect.signature(ORPOTrainer).parameters
    assert "tokenizer" not in inspect.signature(ORPOTrainer).parameters
    assert issubclass(ORPOConfig, TrainingArguments)


def test_orpo_owns_the_table_entries():
    from codemods.common.renames import load_table

    table = load_table()
    owned = set(training_orpo.ORPO_CONFIG_SOURCES + training_orpo.ORPO_TRAINER_SOURCES)
    assert owned == {s for s, r in table.items() if r.target.startswith("trl.experimental.orpo.")}
    assert "optimum.neuron.NeuronORPOTrainer" in owned and "optimum.neuron.NeuronORPOConfig" in owned


def test_orpo_config_as_emitted_constructs(tmp_path):
    from trl.experimental.orpo import ORPOConfig

    config = ORPOConfig(output_dir=str(tmp_path), beta=0.1, max_length=512, torch_compile=True,
                        dataloader_drop_last=True, model_init_kwargs={"device_map": None}, use_cpu=True,
                        report_to="none")
    assert config.model_init_kwargs == {"device_map": None} and config.max_length == 512


# ------------------------------------------------------------------ parsed arguments
def test_parsed_sft_config_gets_device_map_and_launch_layout(tmp_path, rules, monkeypatch):
    """The statement inserted after TrlParser(...).parse_args_and_config() runs on the parsed config."""
    out, findings = migrate(textwrap.dedent("""\
        from trl import TrlParser

        from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer

        parser = TrlParser((NeuronSFTConfig,))
        (training_args,) = parser.parse_args_and_config(args=ARGV)
        trainer = NeuronSFTTrainer(model=model_id, args=training_args, train_dataset=ds)
    """), rules)
    # the only marker: the precision the parsed arguments may set (issue 25: bf16 from non-literal sources)
    assert _todos(out) == ["If the launch or config sets bf16"] and any("model_init_kwargs gets" in f.message
                                                                         for f in findings)
    namespace = {"ARGV": ["--output_dir", str(tmp_path), "--use_cpu", "true", "--model_init_kwargs",
                          '{"dtype": "float32"}']}
    exec(out.split("trainer = ")[0], namespace)
    kwargs = namespace["training_args"].model_init_kwargs
    assert kwargs["dtype"] == "float32" and kwargs["device_map"] is None  # what the command line said is kept
    config = kwargs["distributed_config"]
    assert (config.tp_size, config.fsdp_size, config.dp_replicate_size) == (1, 1, 1)  # no launch layout: unsharded
    # under `TP_SIZE=2 torchrun --nproc_per_node=4` (the parse itself would start the process group there: the
    # emitted expression alone): two data-parallel replicas of TP 2
    monkeypatch.setenv("TP_SIZE", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    call = next(n for n in ast.walk(ast.parse(out)) if isinstance(n, ast.Call)
                and getattr(n.func, "id", None) == "DistributedConfig")
    config = eval(compile(ast.Expression(call), "<emitted>", "eval"), namespace)
    assert (config.tp_size, config.fsdp_size, config.dp_replicate_size) == (2, 1, 2)


def test_replace_and_mp_plugin_reads(rules):
    out, _ = migrate(textwrap.dedent("""\
        import dataclasses

        from optimum.neuron import NeuronTrainingArguments


        def f(training_args, other):
            a = dataclasses.replace(training_args, async_save=True, use_xser=True, gradient_checkpointing=True)
            b = dataclasses.replace(other, tensor_parallel_size=2)  # not arguments by its name: left alone
            n = training_args.mp_plugin.tensor_parallel_size * training_args.trn_config.pipeline_parallel_size
            return a, b, n, [training_args.mp_plugin.should_parallelize]
    """), rules)
    assert "dataclasses.replace(training_args, activation_checkpointing=True)" in out
    assert "async_save=True was dropped" in out
    assert "dataclasses.replace(other, tensor_parallel_size=2)" in out
    # the migrated layouts have no pipeline stages (the Trainer cannot train them): the pipeline size is 1
    assert 'n = int(os.environ.get("TP_SIZE", "1")) * 1' in out
    assert '[(int(os.environ.get("TP_SIZE", "1")) > 1)]' in out
    compile(out, "out.py", "exec")


# ------------------------------------------------------------------ tokenizer padding
def test_padded_tokenization_has_one_shape(rules):
    from transformers import AutoTokenizer

    out, _ = migrate(textwrap.dedent("""\
        from optimum.neuron import NeuronSFTConfig


        def tokenize(texts, tokenizer):
            return tokenizer(texts, padding=True)


        config = NeuronSFTConfig(output_dir="out", max_seq_length=12)
    """), rules)
    assert 'tokenizer(texts, padding="max_length", max_length=12, truncation=True)' in out
    namespace: dict = {}
    exec(out.split("config = ")[0], namespace)
    tokenizer = AutoTokenizer.from_pretrained(TINY_LLAMA)
    texts = ["a b c", "a b c d e f g h i j k l m n o p q r s t u v w x y z " * 3, "z"]
    ids = namespace["tokenize"](texts, tokenizer)["input_ids"]
    assert {len(row) for row in ids} == {12}


# ------------------------------------------------------------------ proof: a TrlParser script trains like TRL
TRL_SCRIPT = '''\
import json
from dataclasses import dataclass, field

from datasets import Dataset
from trl import TrlParser

from optimum.neuron import NeuronSFTConfig, NeuronSFTTrainer


@dataclass
class ScriptArguments:
    model_dir: str = field(default="")


def main(script_args, training_args):
    rows = [[(7 * i + 3 * j) % 500 for j in range(12)] for i in range(16)]
    dataset = Dataset.from_dict({"input_ids": rows})
    trainer = NeuronSFTTrainer(model=script_args.model_dir, args=training_args, train_dataset=dataset)
    trainer.train()
    print(json.dumps([log["loss"] for log in trainer.state.log_history if "loss" in log]))


if __name__ == "__main__":
    parser = TrlParser((ScriptArguments, NeuronSFTConfig))
    script_args, training_args = parser.parse_args_and_config()
    main(script_args, training_args)
'''

TRL_FLAGS = ("--max_length", "32", "--max_steps", "3", "--per_device_train_batch_size", "2", "--logging_steps", "1",
             "--learning_rate", "1e-3", "--report_to", "none", "--seed", "0", "--bf16", "false", "--disable_tqdm",
             "true", "--use_cpu", "true", "--dataloader_drop_last", "true")


def _trl_reference_losses(model_dir: Path, output_dir: Path) -> list[float]:
    """The same run written by hand with TRL 1.16 (SFTConfig parsed by TrlParser from the same flags)."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer, TrlParser

    (config,) = TrlParser((SFTConfig,)).parse_args_and_config(args=["--output_dir", str(output_dir), *TRL_FLAGS])
    rows = [[(7 * i + 3 * j) % 500 for j in range(12)] for i in range(16)]
    trainer = SFTTrainer(model=str(model_dir), args=config, train_dataset=Dataset.from_dict({"input_ids": rows}))
    trainer.train()
    return [log["loss"] for log in trainer.state.log_history if "loss" in log]


def test_migrated_trl_parser_script_trains_like_plain_trl(tmp_path, rules):
    migrated, findings = migrate(TRL_SCRIPT, rules)
    assert "optimum" not in migrated and _todos(migrated) == ["If the launch or config sets bf16"]
    assert "parser = TrlParser((ScriptArguments, SFTConfig))" in migrated
    assert "training_args.model_init_kwargs = {" in migrated
    assert {"NM203", "NM304"} <= {f.rule for f in findings}
    model_dir = tmp_path / "tiny-llama"
    shutil.copytree(TINY_LLAMA, model_dir)
    (tmp_path / "migrated.py").write_text(migrated)
    running = subprocess.Popen(
        [sys.executable, str(tmp_path / "migrated.py"), "--model_dir", str(model_dir), "--output_dir",
         str(tmp_path / "out-migrated"), *TRL_FLAGS],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    want = _trl_reference_losses(model_dir, tmp_path / "out-reference")
    out, err = running.communicate(timeout=300)
    assert running.returncode == 0, err[-4000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert len(got) == 3
    assert got == want


# ------------------------------------------------------------------ proof: tp_size=2 under torchrun on CPU
TP_SCRIPT = '''\
import json
import sys

import torch
from transformers import AutoModelForCausalLM

from optimum.neuron import NeuronTrainingArguments
from optimum.neuron.distributed import lazy_load_for_parallelism


def main(model_dir, training_args):
    with lazy_load_for_parallelism(tensor_parallel_size=training_args.tensor_parallel_size):
        model = AutoModelForCausalLM.from_pretrained(model_dir)
    model.eval()
    input_ids = torch.tensor([[1, 17, 33, 250, 7], [1, 400, 9, 12, 99]])
    with torch.no_grad():
        logits = model(input_ids).logits
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=8,
                             do_sample=False, pad_token_id=0)
    print(json.dumps({"tp": getattr(model, "tp_size", None), "generated": out[:, 5:].tolist(),
                      "logits": logits[:, -1, :8].tolist()}))


if __name__ == "__main__":
    main(sys.argv[1], NeuronTrainingArguments(output_dir=sys.argv[2]))
'''


def test_migrated_tensor_parallel_script_generates_under_torchrun_like_one_process(tmp_path, rules):
    migrated, _ = migrate(TP_SCRIPT, rules)
    assert "lazy_load_for_parallelism" not in migrated
    assert 'tp_size=int(os.environ.get("TP_SIZE", "1")),' in migrated
    assert 'dp_replicate_size=int(os.environ.get("WORLD_SIZE", "1"))' in migrated  # 1 under TP 2 x 2 processes
    script = tmp_path / "migrated.py"
    script.write_text(migrated)
    single = subprocess.run([sys.executable, str(script), str(TINY_LLAMA), str(tmp_path / "o1")],
                            capture_output=True, text=True, timeout=300, env=_env())
    assert single.returncode == 0, single.stderr[-4000:]
    want = json.loads(single.stdout.strip().splitlines()[-1])
    sharded = subprocess.run(
        torchrun(tmp_path, script, str(TINY_LLAMA), str(tmp_path / "o2")),
        capture_output=True, text=True, timeout=300, env=_env(TP_SIZE="2"))
    assert sharded.returncode == 0, sharded.stderr[-4000:]
    ranks = json_reports(sharded.stdout, "tp")
    assert len(ranks) == 2
    for rank in ranks:
        assert rank["tp"] == 2 and want["tp"] in (None, 1)
        assert rank["generated"] == want["generated"]
        got = [x for row in rank["logits"] for x in row]
        assert got == pytest.approx([x for row in want["logits"] for x in row], abs=1e-5)
