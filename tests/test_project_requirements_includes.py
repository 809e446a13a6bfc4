"""NM501: `-r` includes of requirements files are read when deciding what a replacement adds."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from codemods.project import dependencies as deps
from migrator import engine
from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process
from migrator.text_engine import run_text


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def migrate(path: Path, rules: RuleSet) -> str:
    return run_text(path.read_text(), "requirements", rules.text, path=path)[0]


TOP = "-r base.txt\noptimum-neuron[training]==0.2.0\ndatasets\n"


def test_included_base_file_is_not_duplicated(tmp_path, rules):
    write(tmp_path / "base.txt", "transformers>=5.23  # shared\naccelerate\n")
    top = write(tmp_path / "requirements.txt", TOP)
    assert migrate(top, rules) == "-r base.txt\ntrl>=1.16\npeft>=0.21\ndatasets\n"


def test_without_the_include_everything_is_added(tmp_path, rules):
    top = write(tmp_path / "requirements.txt", TOP)  # base.txt does not exist
    assert migrate(top, rules) == (
        "-r base.txt\ntransformers>=5.23\naccelerate>=1.15\ntrl>=1.16\npeft>=0.21\ndatasets\n"
    )
    # no path known (a notebook cell, in-memory text): the same as a missing include
    assert run_text(TOP, "requirements", rules.text)[0] == migrate(top, rules)


def test_nested_includes_are_relative_to_the_including_file(tmp_path, rules):
    write(tmp_path / "reqs" / "common.txt", "--requirement=deep/ml.txt\n")
    write(tmp_path / "reqs" / "deep" / "ml.txt", "trl\npeft==0.21.2\n")
    top = write(tmp_path / "requirements.txt", "-rreqs/common.txt\noptimum-neuron[training]\n")
    assert migrate(top, rules) == "-rreqs/common.txt\ntransformers>=5.23\naccelerate>=1.15\n"


def test_an_included_old_stack_file_counts_with_what_it_migrates_to(tmp_path, rules):
    # base.txt lists optimum-neuron itself: its own migration adds transformers and accelerate
    write(tmp_path / "base.txt", "optimum-neuron==0.2.0\ntorch-xla==2.1.0\n")
    top = write(tmp_path / "train.txt", "-r base.txt\noptimum-neuron[training,neuronx]==0.2.0\n")
    assert migrate(top, rules) == "-r base.txt\ntrl>=1.16\npeft>=0.21\n"


def test_a_library_pinned_too_low_in_an_unmigrated_include_does_not_count(tmp_path, rules):
    write(tmp_path / "base.txt", "transformers==4.51.3\naccelerate\n")
    top = write(tmp_path / "requirements.txt", "-r base.txt\noptimum-neuron\n")
    # transformers is added, so that pip reports the conflict with base.txt instead of installing 4.51.3
    assert migrate(top, rules) == "-r base.txt\ntransformers>=5.23\n"


def test_constraint_files_urls_and_cycles(tmp_path, rules):
    # -c files install nothing; a cycle of includes ends; URLs and absolute paths are not read
    write(tmp_path / "constraints.txt", "transformers==5.23.0\naccelerate==1.15.0\n")
    write(tmp_path / "a.txt", "-r b.txt\ntrl\n")
    write(tmp_path / "b.txt", "-r a.txt\n-r requirements.txt\npeft\n")
    absolute = write(tmp_path / "abs.txt", "transformers\n")
    top = write(tmp_path / "requirements.txt", (
        f"-c constraints.txt\n-r a.txt\n-r https://example.com/r.txt\n-r {absolute}\n"
        "optimum-neuron[training]\n"
    ))
    assert migrate(top, rules).endswith("-r a.txt\n-r https://example.com/r.txt\n"
                                         f"-r {absolute}\ntransformers>=5.23\naccelerate>=1.15\n")


def test_unreadable_or_odd_includes_are_skipped(tmp_path, rules):
    (tmp_path / "dir.txt").mkdir()
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00bad")
    write(tmp_path / "setup.cfg", "[options]\ninstall_requires =\n    transformers\n")
    top = write(tmp_path / "requirements.txt", "-r dir.txt\n-r bin.txt\n-r setup.cfg\n-r $HOME/x.txt\noptimum-neuron\n")
    assert migrate(top, rules).endswith("optimum-neuron\n") is False
    assert migrate(top, rules).endswith("transformers>=5.23\naccelerate>=1.15\n")


def test_included_packages_reads_nothing_without_includes(tmp_path):
    assert deps.included_packages(tmp_path / "requirements.txt", "optimum-neuron\n") == frozenset()
    assert deps.included_packages(None, "-r base.txt\n") == frozenset()


def test_idempotent_with_includes(tmp_path, rules):
    write(tmp_path / "base.txt", "transformers\n")
    top = write(tmp_path / "requirements.txt", "-r base.txt\noptimum-neuron[training]==0.2.0\n")
    once = migrate(top, rules)
    top.write_text(once)
    assert migrate(top, rules) == once


@pytest.mark.skipif("path" not in inspect.signature(engine.migrate_text).parameters,
                    reason="the engine does not hand the file path to text rules yet")
def test_process_passes_the_file_path(tmp_path, rules):
    write(tmp_path / "base.txt", "transformers\naccelerate\n")
    top = write(tmp_path / "requirements.txt", "-r base.txt\noptimum-neuron\n")
    result = process(Candidate(top, "requirements.txt", "requirements"), rules)
    assert result.status == "changed", result.error
    assert result.new_text == "-r base.txt\n"
