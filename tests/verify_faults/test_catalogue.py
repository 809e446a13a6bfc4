"""The fault catalogue (see catalogue.py), every scenario: every fault of the migration is reported
(exit 1, the report names what differed), every correct variant passes (exit 0). Each scenario is
prepared once (its migration, its models) and its original runs once: its observations are reused from
the scenario's --original-cache."""

from __future__ import annotations

import pytest

from tests.verify_faults import catalogue as cat

CASES = [(scenario, variant) for scenario in cat.SCENARIOS.values() for variant in scenario.variants]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """``workdir(scenario)``: the scenario's folder, prepared at its first use."""
    prepared: dict = {}

    def get(scenario: cat.Scenario):
        for library in scenario.libraries:
            pytest.importorskip(library)
        if scenario.name not in prepared:
            tmp = tmp_path_factory.mktemp(f"faults-{scenario.name.replace('_', '-')}")
            cat.prepare(scenario, tmp)
            prepared[scenario.name] = tmp
        return prepared[scenario.name]

    return get


@pytest.mark.parametrize("scenario, variant", CASES,
                         ids=[f"{s.name}-{v.name.replace(' ', '-')}" for s, v in CASES])
def test_variant(workdir, scenario, variant):
    proc = cat.run_variant(scenario, variant, workdir(scenario))
    out = proc.stdout + proc.stderr
    if variant.fault:
        assert proc.returncode == 1, out
        failed = [line for line in proc.stdout.splitlines() if line.lstrip().startswith("✗")]
        assert failed and any(variant.expect in line for line in failed), out
    else:
        assert proc.returncode == 0, out
        assert "result: OK" in proc.stdout
