"""Every entry of the old-stack inventory (codemods/common/oldstack_api.json.gz) has a disposition in
codemods/common/oldstack_dispositions.toml, every rule a disposition names exists, and a rule named for
a sample of entries does fire on a minimal use of that entry."""

from __future__ import annotations

import fnmatch
import gzip
import json
import re
import tomllib
from pathlib import Path

import pytest

from codemods import all_rules
from codemods.common.leftovers import old_stack
from codemods.project.xla_env import MARKED_VARS, xla_only_reason

ROOT = Path(__file__).resolve().parent.parent
INVENTORY = json.loads(gzip.decompress((ROOT / "codemods/common/oldstack_api.json.gz").read_bytes()))["entries"]
DISPOSITIONS = tomllib.loads((ROOT / "codemods/common/oldstack_dispositions.toml").read_text())
TABLE_OF = {"module": "python", "name": "python", "cli": "cli", "env": "env", "ccflag": "ccflag"}
RULE_RE = re.compile(r"NM\d{3}")


def disposition(table: str, entry: str) -> str | None:
    """The most specific disposition of ``entry``: an exact key, else the longest matching pattern."""
    patterns = DISPOSITIONS.get(table, {})
    if entry in patterns:
        return patterns[entry]
    matches = [p for p in patterns if fnmatch.fnmatchcase(entry, p)]
    return patterns[max(matches, key=len)] if matches else None


def test_every_inventory_entry_has_a_disposition():
    missing = [(kind, e) for kind, entries in INVENTORY.items() for e in entries
               if disposition(TABLE_OF[kind], e) is None]
    assert not missing, f"{len(missing)} inventory entries without a disposition, e.g. {missing[:10]}"


def test_dispositions_are_well_formed_and_name_existing_rules():
    ids = {r.id for r in all_rules()}
    bad = []
    for table, patterns in DISPOSITIONS.items():
        for key, value in patterns.items():
            if RULE_RE.fullmatch(value):
                if value not in ids:
                    bad.append((table, key, value))
            elif not re.match(r"(removed|kept|todo): \S", value):
                bad.append((table, key, value))
    assert not bad, bad


def test_python_entries_given_to_nm900_are_old_stack_for_it():
    wrong = [e for kind in ("module", "name") for e in INVENTORY[kind]
             if disposition("python", e) == "NM900" and not old_stack(e)]
    assert not wrong, wrong[:10]


def test_env_entries_given_to_nm416_are_removed_or_marked_by_it():
    wrong = [e for e in INVENTORY["env"] if disposition("env", e) == "NM416" and xla_only_reason(e) is None
             and e not in MARKED_VARS]
    assert not wrong, wrong


def _sample(kind: str, prefix: str, n: int = 2) -> list[str]:
    entries = sorted(e for e in INVENTORY[kind] if e.startswith(prefix) and "._" not in e)
    return entries[:: max(1, len(entries) // n)][:n]


_NAME_SAMPLES = [e for p in ("optimum.neuron.", "torch_xla.", "transformers_neuronx.", "neuronx_distributed.",
                             "neuronx_distributed_inference.") for e in _sample("name", p)]
_ENV_SAMPLES = ["NEURONCORE_NUM_DEVICES", "TPU_NUM_DEVICES", "TPU_CHIPS_PER_HOST_BOUNDS", "NEURON_CUSTOM_SILU",
                "NEURON_FUSE_SOFTMAX", "PJRT_DEVICE", "NEURON_COMPILE_CACHE_URL"]


class _Once:
    value = None

    def get(self):
        return self.value

    def set(self, value):
        self.value = value
        return value


_RULES = _Once()


def _findings(source: str):
    from migrator.discover import Candidate
    from migrator.engine import RuleSelection, RuleSet, process
    return process(Candidate(Path("use.py"), "use.py", "python"), _RULES.get() or _RULES.set(
        RuleSet.from_selection(RuleSelection())), source.encode())


@pytest.mark.parametrize("entry", _NAME_SAMPLES)
def test_rule_fires_on_a_sampled_name(entry):
    module, name = entry.rsplit(".", 1)
    result = _findings(f"from {module} import {name}\n\nx = {name}\n")
    rule = disposition("python", entry)
    assert any(f.rule == rule or f.rule == "NM992" for f in result.findings), (entry, result.findings)


@pytest.mark.parametrize("var", _ENV_SAMPLES)
def test_rule_fires_on_a_sampled_env_write(var):
    result = _findings(f'import os\n\nos.environ["{var}"] = "1"\nprint(1)\n')
    rule = disposition("env", var)
    assert rule == "NM416"
    assert any(f.rule == rule for f in result.findings), (var, result.findings)
