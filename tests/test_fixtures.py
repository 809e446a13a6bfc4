"""Every rule's before/after fixtures, run exactly.

Layout: ``tests/fixtures/<RULE_ID>/<case>.before.<ext>`` and ``<case>.after.<ext>``.
The extension gives the file kind (``py``, ``ipynb``, ``md``, ``sh``, ``txt`` =
requirements, ``toml`` = pyproject, ``dockerfile``, ``cfg`` = setup.cfg). Each case
is migrated with every rule enabled (what a user gets) and must:

* produce exactly the ``.after`` text;
* report at least one finding of the rule named by its directory (the rule fired);
* be idempotent: migrating the ``.after`` text changes nothing;
* report as manual actions only the markers the output holds;
* still parse (Python / JSON / TOML / ``bash -n``).

Negative fixtures: a case whose name starts with ``neg_`` is a context where the rule named by its
directory must NOT rewrite (other hardware's branch, a class used as a type, ...). It is run exactly
and checked like the others, but the rule must report no applied finding on it (it may leave a
marker, or nothing at all).
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from migrator.discover import Candidate
from migrator.engine import RuleSelection, RuleSet, process

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FIXTURES = Path(__file__).parent / "fixtures"
KIND_BY_EXT = {
    "py": "python",
    "ipynb": "notebook",
    "md": "markdown",
    "mdx": "markdown",
    "sh": "shell",
    "slurm": "shell",
    "txt": "requirements",
    "cfg": "requirements",
    "toml": "pyproject",
    "dockerfile": "dockerfile",
}


def _cases():
    for before in sorted(FIXTURES.glob("NM*/*.before.*")):
        ext = before.name.rsplit(".before.", 1)[1]
        after = before.with_name(before.name.replace(".before.", ".after."))
        yield pytest.param(before, after, KIND_BY_EXT[ext], id=f"{before.parent.name}/{before.name}")


CASES = list(_cases())


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return RuleSet.from_selection(RuleSelection())


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8-sig")


def migrate(data: bytes, kind: str, rules: RuleSet):
    """Bytes in, bytes out, through the same per-file path as the CLI (encodings, BOM...)."""
    result = process(Candidate(Path("fixture"), "fixture", kind), rules, data)
    assert result.status in ("changed", "unchanged"), result.error
    return (result.new_bytes if result.status == "changed" else data), result.findings


def _parses(text: str, kind: str) -> None:
    if kind == "python":
        ast.parse(text)
    elif kind == "notebook":
        nb = json.loads(text)
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            if src.lstrip().startswith("%%"):
                continue  # a cell magic (%%bash ...): not Python
            lines, continued = [], False
            for ln in src.splitlines():
                shell = continued or ln.lstrip().startswith(("!", "%")) or re.match(r"\s*\w+\s*=\s*!", ln)
                continued = bool(shell) and ln.rstrip().endswith("\\")
                lines.append("" if shell else ln)
            ast.parse("\n".join(lines))
    elif kind == "pyproject":
        tomllib.loads(text)
    elif kind == "shell" and shutil.which("bash"):
        proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def test_fixtures_exist_for_every_rule():
    from codemods import all_rules

    have = {p.parent.name for p in FIXTURES.glob("NM*/*.before.*")}
    missing = [r.id for r in all_rules() if r.id not in have]
    assert not missing, f"rules without fixtures: {missing}"
    for before in FIXTURES.glob("NM*/*.before.*"):
        after = before.with_name(before.name.replace(".before.", ".after."))
        assert after.exists(), f"{before} has no .after twin"


@pytest.mark.parametrize("before,after,kind", CASES)
def test_fixture_exact(before: Path, after: Path, kind: str, rules: RuleSet):
    rule_id = before.parent.name
    new, findings = migrate(before.read_bytes(), kind, rules)
    assert new == after.read_bytes()
    if before.name.startswith("neg_"):
        applied = [f for f in findings if f.rule == rule_id and f.fix == "applied"]
        assert not applied, f"{rule_id} rewrote a context where it must not: {[f.message for f in applied]}"
    else:
        assert any(f.rule == rule_id for f in findings), f"{rule_id} reported nothing on {before.name}"


@pytest.mark.parametrize("before,after,kind", CASES)
def test_fixture_idempotent(before: Path, after: Path, kind: str, rules: RuleSet):
    expected = after.read_bytes()
    again, _ = migrate(expected, kind, rules)
    assert again == expected


def _cell_sources(text: str) -> str:
    return "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                     for c in json.loads(text)["cells"])


@pytest.mark.parametrize("before,after,kind", CASES)
def test_fixture_reports_only_the_markers_it_wrote(before: Path, after: Path, kind: str, rules: RuleSet):
    """Every manual action reported is a marker in the output (the report says what the file holds)."""
    new, findings = migrate(before.read_bytes(), kind, rules)
    text = new.decode("utf-8-sig")
    text = _cell_sources(text) if kind == "notebook" else text
    missing = [(f.rule, f.line, f.message) for f in findings if f.fix == "manual" and f.message not in text]
    assert not missing, f"reported but not written: {missing}"


@pytest.mark.parametrize("before,after,kind", CASES)
def test_fixture_output_parses(before: Path, after: Path, kind: str):
    if before.parent.name == "NM990":
        pytest.skip("NM990 fixtures are units that do not parse, by design")
    _parses(_read(after), kind)


def _violations(text: str, kind: str):
    from migrator.selfcheck.check import check_program
    from migrator.selfcheck.programs import programs

    return [v for parts, notebook in programs(kind, text) for v in check_program(parts, notebook)]


@pytest.mark.parametrize("before,after,kind", CASES)
def test_fixture_passes_the_self_check(before: Path, after: Path, kind: str):
    """No fixture output has a violation its input did not have: an undefined name, a target import
    that does not resolve, a keyword the target rejects, an old-stack import left without a marker."""
    from migrator.selfcheck.check import introduced

    new = introduced(_violations(_read(before), kind), _violations(_read(after), kind))
    assert not new, f"the migration introduced: {[(v.kind, v.name, v.line) for v in new]}"


def test_rule_examples_pass_the_self_check():
    """The before/after example each rule shows in `explain` is held to the same standard (examples
    that are fragments, with `...`, are checked when they parse)."""
    from codemods import all_rules
    from migrator.selfcheck.check import check_source, introduced

    bad = {}
    for rule in all_rules():
        doc = rule.doc()
        if "python" not in doc.kinds or not doc.after.strip():
            continue
        try:
            ast.parse(doc.before), ast.parse(doc.after)
        except SyntaxError:
            continue
        new = introduced(check_source(doc.before), check_source(doc.after))
        if new:
            bad[rule.id] = [(v.kind, v.name) for v in new]
    assert not bad
