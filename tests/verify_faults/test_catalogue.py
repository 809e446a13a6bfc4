"""The fault catalogue (see catalogue.py), every scenario: every fault of the migration is reported
(exit 1, the report names what differed), every correct variant passes (exit 0). Each scenario is
prepared once (its migration, its models) and its original runs once: its observations are reused from
the scenario's --original-cache. Under pytest-xdist a scenario's variants are one group (xdist_group;
pyproject's --dist loadgroup), run by one worker: otherwise each worker would prepare the scenario and
run its original again."""

from __future__ import annotations

import pytest

from tests.verify_faults import catalogue as cat

CASES = [pytest.param(scenario, variant, id=f"{scenario.name}-{variant.name.replace(' ', '-')}",
                      marks=pytest.mark.xdist_group(f"faults-{scenario.name}"))
         for scenario in cat.SCENARIOS.values() for variant in scenario.variants]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """``workdir(scenario)``: the scenario's folder, prepared at its first use, and whether a variant of
    it ran before in this process (then the original's observations come from the cache)."""
    prepared: dict = {}

    def get(scenario: cat.Scenario):
        for library in scenario.libraries:
            pytest.importorskip(library)
        if scenario.name not in prepared:
            tmp = tmp_path_factory.mktemp(f"faults-{scenario.name.replace('_', '-')}")
            cat.prepare(scenario, tmp)
            prepared[scenario.name] = [tmp, 0]
        entry = prepared[scenario.name]
        entry[1] += 1
        return entry[0], entry[1] > 1

    return get


@pytest.mark.parametrize("scenario, variant", CASES)
def test_variant(workdir, scenario, variant):
    folder, ran_before = workdir(scenario)
    proc = cat.run_variant(scenario, variant, folder)
    out = proc.stdout + proc.stderr
    if variant.fault:
        assert proc.returncode == 1, out
        failed = [line for line in proc.stdout.splitlines() if line.lstrip().startswith("✗")]
        assert failed and any(variant.expect in line for line in failed), out
    else:
        assert proc.returncode == 0, out
        assert "result: OK" in proc.stdout
    # the original ran once for the scenario: the later variants took its observations from the cache
    assert ("(observations from the cache)" in proc.stdout) == ran_before, out
