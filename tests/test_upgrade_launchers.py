"""NM616 on the launchers of a project: the launched script is read to tell whether it parses HF
arguments (HfArgumentParser / TrlParser), so that a script with its own argparse options is left
alone; the upgrade edits share the shell family's plan with NM515 (one edit per command line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrator.engine import RuleSelection, RuleSet, migrate_text

HF = """from dataclasses import dataclass, field
from transformers import HfArgumentParser, TrainingArguments

@dataclass
class ModelArguments:
    model_name_or_path: str = field(default="gpt2")
    logging_dir: str = field(default="mine")  # a field of the script's own: its flag stays

parser = HfArgumentParser((ModelArguments, TrainingArguments))
model_args, training_args = parser.parse_args_into_dataclasses()
"""
SFT = """from trl import SFTConfig, SFTTrainer, TrlParser

parser = TrlParser((SFTConfig,))
(args,) = parser.parse_args_and_config()
"""
PLAIN = """import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--output_dir")
parser.add_argument("--overwrite_output_dir", action="store_true")
parser.add_argument("--evaluation_strategy")
parser.add_argument("--max_seq_length", type=int)
args = parser.parse_args()
"""
LAUNCH = """#!/bin/bash
set -e
python src/hf_train.py --output_dir o1 --evaluation_strategy steps --overwrite_output_dir --logging_dir tb
python src/plain_train.py --output_dir o2 --evaluation_strategy steps --overwrite_output_dir --max_seq_length 64
torchrun --nproc_per_node 2 src/sft.py --output_dir o3 --max_seq_length 512 --overwrite_output_dir
python -m src.hf_train --output_dir o4 --max_seq_length 512 --per_gpu_eval_batch_size 2
python src/hf_train.py --output_dir o5 --tensor_parallel_size 2 --evaluation_strategy epoch
"""
EXPECTED = """#!/bin/bash
set -e
export HF_DEACTIVATE_ASYNC_LOAD=1
python src/hf_train.py --output_dir o1 --eval_strategy steps --logging_dir tb
python src/plain_train.py --output_dir o2 --evaluation_strategy steps --overwrite_output_dir --max_seq_length 64
torchrun --nproc_per_node 2 src/sft.py --output_dir o3 --max_length 512
python -m src.hf_train --output_dir o4 --max_seq_length 512 --per_device_eval_batch_size 2
# TODO(neuron-migrate NM515): Launch this script with torchrun --nproc_per_node=2: TP_SIZE=2 needs 2 processes.
TP_SIZE=2 python src/hf_train.py --output_dir o5 --eval_strategy epoch --torch_compile true
"""


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (root / "src").mkdir()
    (root / "src" / "hf_train.py").write_text(HF)
    (root / "src" / "sft.py").write_text(SFT)
    (root / "src" / "plain_train.py").write_text(PLAIN)
    (root / "scripts").mkdir()
    launcher = root / "scripts" / "train.sh"
    launcher.write_text(LAUNCH)
    rules = RuleSet.from_selection(RuleSelection())
    new, findings = migrate_text(LAUNCH, "shell", rules, launcher)
    again, _ = migrate_text(new, "shell", rules, launcher)
    return new, findings, again


def test_only_the_launches_of_hf_argument_scripts_are_edited(migrated):
    new, findings, again = migrated
    assert new == EXPECTED
    assert again == new  # idempotent
    messages = [f.message for f in findings if f.rule == "NM616"]
    assert any("--overwrite_output_dir" in m and "resume_from_checkpoint" in m for m in messages)
    # the plain argparse script: no finding, no marker
    assert not any(f.line == 4 for f in findings if f.rule == "NM616")


def test_one_engine_edit_per_line_with_nm515(migrated):
    """NM515 (TP_SIZE) and NM616 (--evaluation_strategy) edit the same command: one line results."""
    new, findings, _ = migrated
    rules_on_last = {f.rule for f in findings if f.line == 7}
    assert {"NM515", "NM616"} <= rules_on_last
    assert new.splitlines()[-1].startswith("TP_SIZE=2 python src/hf_train.py") and "--eval_strategy" in new.splitlines()[-1]
