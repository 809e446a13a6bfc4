"""Fault catalogue, scenario "data_loading" (see catalogue.py): every fault of the migration is reported
(exit 1, the report names what differed), every correct variant passes (exit 0). The original runs
once: its observations are reused from the module's --original-cache."""

from __future__ import annotations

import pytest

from tests.verify_faults import catalogue as cat

SCENARIO = cat.DATA_LOADING


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    pytest.importorskip("torch")
    tmp = tmp_path_factory.mktemp("faults-data-loading")
    cat.prepare(SCENARIO, tmp)
    return tmp


@pytest.mark.parametrize("variant", SCENARIO.variants, ids=lambda v: v.name.replace(" ", "-"))
def test_variant(workdir, variant):
    proc = cat.run_variant(SCENARIO, variant, workdir)
    out = proc.stdout + proc.stderr
    if variant.fault:
        assert proc.returncode == 1, out
        failed = [line for line in proc.stdout.splitlines() if line.lstrip().startswith("✗")]
        assert failed and any(variant.expect in line for line in failed), out
    else:
        assert proc.returncode == 0, out
        assert "result: OK" in proc.stdout
