"""The README stays true: set-up commands, rule ids, links, its examples, pre-commit hooks; and the docs
pages that took over its long sections stay true with it: the rules table (docs/rules/index.md), the
set-up commands and the verify journey (docs/), rule ids."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

import codemods
from migrator.cli import rules_markdown
from migrator.ruledocs import INDEX_END, INDEX_START, rules_markdown as linked_rules_markdown

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
RULES_INDEX = DOCS / "rules" / "index.md"
GETTING_STARTED = DOCS / "getting-started.md"
VERIFY_GUIDE = DOCS / "verify" / "index.md"
#: the README is a landing page: the long explanations live in docs/
README_MAX_LINES = 250
CI_RUN = ROOT / ".ci" / "run"
HOOKS = ROOT / ".pre-commit-hooks.yaml"

START = INDEX_START  # "<!-- rules-table:start -->", in docs/rules/index.md
END = INDEX_END
FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
RULE_ID_RE = re.compile(r"\bNM\d{3}\b")


def readme() -> str:
    return README.read_text(encoding="utf-8")


def hand_written_docs() -> list[Path]:
    """The docs pages a person writes (the rule pages and the rules index are generated)."""
    return sorted(p for p in DOCS.rglob("*.md") if p.parent != DOCS / "rules")


def section(text: str, title: str) -> str:
    """The body of the level-2 section ``## title`` (up to the next level-1/2 heading)."""
    lines = text.splitlines()
    body: list[str] = []
    inside = False
    in_code = False
    for line in lines:
        if FENCE_RE.match(line):
            in_code = not in_code
        if not in_code and re.match(r"^#{1,2} ", line):
            if inside:
                break
            inside = line[2:].strip().lower() == title.lower() if line.startswith("## ") else False
            continue
        if inside:
            body.append(line)
    assert inside or body, f"no '## {title}' section"
    return "\n".join(body)


def code_blocks(text: str) -> list[list[str]]:
    blocks: list[list[str]] = []
    current: list[str] | None = None
    fence = ""
    for line in text.splitlines():
        m = FENCE_RE.match(line)
        if current is None:
            if m:
                fence = m.group(1)
                current = []
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip()[len(m.group(1)):].strip():
            blocks.append(current)
            current = None
        else:
            current.append(line)
    assert current is None, "README.md has an unclosed code fence"
    return blocks


def commands(lines: list[str]) -> list[str]:
    """Shell command lines of a code block: comments and blank lines dropped, ``\\`` continuations joined."""
    out: list[str] = []
    pending = ""
    for line in lines:
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        out.append((pending + stripped).strip())
        pending = ""
    if pending:
        out.append(pending.strip())
    return out


def setup_commands(text: str | None = None) -> list[str]:
    return [c for block in code_blocks(section(readme() if text is None else text, "Set up")) for c in commands(block)]


def ci_commands() -> list[str]:
    return commands(CI_RUN.read_text(encoding="utf-8").splitlines())


# --------------------------------------------------------------------------- (a) rules table


def test_rules_table_in_sync():
    """The rules table moved from the README to the rules index of the docs (generated there by
    tools/gen_rule_docs.py): `neuron-migrate rules --format markdown`, each id linked to its page."""
    text = RULES_INDEX.read_text(encoding="utf-8")
    assert text.count(START) == 1 and text.count(END) == 1, f"{RULES_INDEX} needs one {START} and one {END} line"
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == START)
    end = next(i for i, line in enumerate(lines) if line.strip() == END)
    assert start < end, f"{START} must come before {END}"
    table = "".join(lines[start + 1 : end])
    rules = codemods.all_rules()
    assert table == linked_rules_markdown(rules, link=True), (
        f"The rules table in {RULES_INDEX.relative_to(ROOT)} is out of date: run `python tools/gen_rule_docs.py`."
    )
    # the table is exactly what `neuron-migrate rules --format markdown` prints, once the links are taken off
    assert re.sub(r"\[(NM\d{3})\]\(NM\d{3}\.md\)", r"\1", table) == rules_markdown(rules)
    for rule in rules:
        assert f"[{rule.id}]({rule.id}.md)" in table and (RULES_INDEX.parent / f"{rule.id}.md").is_file()
    assert "rules-table" not in readme(), "the rules table lives in docs/rules/index.md, not in the README"


# --------------------------------------------------------------------------- (b) set up / CI


def test_setup_has_exactly_two_commands():
    cmds = setup_commands()
    assert len(cmds) == 2, f"the 'Set up' section must give exactly two commands, found {len(cmds)}: {cmds}"
    example = [c for c in cmds if "neuron-migrate examples/optimum_neuron_project" in c]
    tests = [c for c in cmds if "pytest" in c]
    assert len(example) == 1 and len(tests) == 1, cmds
    for cmd in cmds:
        assert cmd.startswith("pip install torch==2.13.0 && "), f"torch must be installed first: {cmd}"
    assert 'pip install -e ".[test]"' in tests[0]
    assert "pip install -e . " in example[0]


def test_ci_runs_the_readme_test_command():
    readme_test = next(c for c in setup_commands() if "pytest" in c).split(" && ")[-1].strip()
    assert "-m pytest" in readme_test, readme_test
    cmds = ci_commands()
    pytest_lines = [c for c in cmds if "-m pytest" in c]
    assert len(pytest_lines) == 1, f".ci/run must run pytest exactly once: {pytest_lines}"
    ci_test = pytest_lines[0]
    if ci_test.startswith("exec "):
        ci_test = ci_test[len("exec ") :]
    assert shlex.split(ci_test) == shlex.split(readme_test), (
        f".ci/run runs {ci_test!r} but the README's set-up command runs {readme_test!r}"
    )
    # the test command is the last thing .ci/run does, so its status is the script's status
    assert pytest_lines[0] == cmds[-1], ".ci/run must end with the test command"


def test_ci_script_shape():
    text = CI_RUN.read_text(encoding="utf-8")
    assert text.startswith("#!"), ".ci/run needs a shebang"
    assert "set -euo pipefail" in text
    assert os.access(CI_RUN, os.X_OK), ".ci/run must be executable"
    cmds = ci_commands()
    torch_at = next(i for i, c in enumerate(cmds) if re.search(r"pip install .*torch==2\.13\.0\b", c) and "-e" not in c)
    extra_at = next(i for i, c in enumerate(cmds) if '-e ".[test]"' in c)
    assert torch_at < extra_at, "torch==2.13.0 must be installed before the test extra"
    assert not any(re.search(r"pip install .*(--upgrade|-U) pip\b", c) for c in cmds), "pip must not be upgraded"
    for var in ("HF_HUB_OFFLINE=1", "HF_HUB_DISABLE_TELEMETRY=1"):
        assert f"export {var}" in text
    # the docs site is built strictly (a broken link fails CI), after the docs extra, before the tests
    docs_at = next(i for i, c in enumerate(cmds) if re.search(r"pip install .*-e \"\.\[docs\]\"", c))
    build_at = next(i for i, c in enumerate(cmds) if re.search(r"-m mkdocs build --strict\b", c))
    test_at = next(i for i, c in enumerate(cmds) if "-m pytest" in c)
    assert extra_at < docs_at < build_at < test_at


# --------------------------------------------------------------------------- (c) rule ids


def test_every_rule_id_in_readme_exists():
    known = {r.id for r in codemods.all_rules()}
    for path in [README, *hand_written_docs()]:
        mentioned = set(RULE_ID_RE.findall(path.read_text(encoding="utf-8")))
        unknown = sorted(mentioned - known)
        assert not unknown, (f"{path.relative_to(ROOT)} mentions rule ids that do not exist: {unknown} "
                             f"(known: {sorted(known)})")


# --------------------------------------------------------------------------- (e) a landing page, linking into docs/

LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading."""
    text = re.sub(r"`|\*\*|\\", "", heading)
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    out = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE_RE.match(line):
            in_code = not in_code
        elif not in_code and (m := re.match(r"^#{1,6} (.+)$", line)):
            out.add(slug(m.group(1)))
    return out


def test_readme_is_a_landing_page():
    lines = readme().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines: it is a landing page (at most {README_MAX_LINES}); long explanations "
        "go to docs/ and the README links to them")
    headings = [line[3:].strip() for line in lines if line.startswith("## ")]
    assert headings[:4] == ["Set up", "Quickstart", "CI", "verify"], headings


def test_readme_links_resolve():
    """Every relative link of the README names a file of the repository, and an anchor of that page."""
    links = [m.group(1) for m in LINK_RE.finditer(readme())]
    relative = [link for link in links if not re.match(r"^[a-z]+:", link)]
    assert len(relative) >= 10, relative
    for link in relative:
        target, _, anchor = link.partition("#")
        path = (ROOT / target) if target else README
        assert path.is_file(), f"README.md links to {link!r}: no such file"
        if anchor:
            assert anchor in anchors(path), f"README.md links to {link!r}: {target} has no heading #{anchor}"
    # every page of the docs' nav is reachable from the README's documentation table
    for page in ("index.md", "getting-started.md", "configuration.md", "ci.md", "verify/index.md",
                 "rules/index.md", "performance.md", "ARCHITECTURE.md", "contributing.md"):
        assert f"docs/{page}" in relative, page


def test_docs_setup_is_the_readme_setup():
    """The getting-started page gives the README's two set-up commands, as written."""
    assert setup_commands(GETTING_STARTED.read_text(encoding="utf-8")) == setup_commands()


def _journey(text: str) -> list[str]:
    """The ``$ ...`` command lines of the verify example (the text block that starts with ``$ cp -r``)."""
    block = next(b for b in code_blocks(text) if b and b[0].startswith("$ cp -r examples/optimum_neuron_project"))
    return commands([line[2:] if line.startswith("$ ") else line for line in block
                     if line.startswith(("$ ", "    "))])


def test_readme_verify_example_is_the_tested_one():
    """The README's verify example is the journey tests/test_verify_example.py runs (same arguments, same
    models), and the verify guide shows the same commands."""
    from tests import test_verify_example as tve

    cmds = _journey(readme())
    assert cmds == _journey(VERIFY_GUIDE.read_text(encoding="utf-8"))
    assert cmds[0] == ("cp -r examples/optimum_neuron_project original && "
                       "cp -r examples/optimum_neuron_project my_project")
    assert shlex.split(cmds[1]) == ["neuron-migrate", "my_project", "--write"]
    script_args = [a.replace(str(ROOT) + os.sep, "") for a in tve.SCRIPT_ARGS]
    assert shlex.split(cmds[2]) == ["neuron-migrate", "verify", "my_project/inference.py", "--against",
                                    "original/inference.py", "--device", "emulate", "--nproc", "2",
                                    "--atol", "1e-2", *script_args]
    for fixture in ("tests/verify_fixtures/tiny-llama", "tests/verify_fixtures/tiny-classifier"):
        assert (ROOT / fixture).is_dir()


def test_readme_quickstart_excerpt_is_real_output():
    """The diff excerpt and the marker line of the Quickstart are lines the example's dry run prints."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "migrator", "examples/optimum_neuron_project", "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 1, proc.stderr
    quick = section(readme(), "Quickstart")
    diff, text = [b for b in code_blocks(quick)][1:3]
    out = proc.stdout.splitlines()
    start = out.index(diff[0])
    assert out[start:start + len(diff)] == diff
    assert text[0] in out
    # the counts follow the rules (they change as rules are added): the summary's shape, and its file counts
    shape = re.compile(r"^6 files scanned: 6 files would be changed, \d+ fixes, \d+ manual actions, 0 errors \([\d.]+ s\)$")
    assert shape.match(next(line for line in text if "files scanned" in line))
    assert shape.match(next(line for line in out if "files scanned" in line))


# --------------------------------------------------------------------------- (d) pre-commit hooks


def _parse_hooks_minimal(text: str) -> list[dict]:
    """Just enough YAML for a flat list of mappings with scalar / flow-list values."""
    hooks: list[dict] = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        if line.startswith("- "):
            hooks.append({})
            line = line[2:]
        key, sep, value = line.strip().partition(":")
        assert sep and hooks, f"cannot parse {raw!r}"
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            hooks[-1][key] = [v.strip() for v in value[1:-1].split(",") if v.strip()]
        elif value in ("true", "false"):
            hooks[-1][key] = value == "true"
        else:
            hooks[-1][key] = value.strip("\"'")
    return hooks


def load_hooks() -> list[dict]:
    text = HOOKS.read_text(encoding="utf-8")
    try:
        import yaml
    except ImportError:
        return _parse_hooks_minimal(text)
    return yaml.safe_load(text)


def test_pre_commit_hooks():
    hooks = load_hooks()
    assert isinstance(hooks, list) and hooks, ".pre-commit-hooks.yaml must be a list of hooks"
    by_id = {h["id"]: h for h in hooks}
    assert set(by_id) == {"neuron-migrate", "neuron-migrate-fix"}
    for hook in hooks:
        assert hook["entry"].split()[0] == "neuron-migrate", hook
        assert hook["language"] == "python"
        assert hook.get("pass_filenames", True) is True
        assert {"python", "jupyter", "shell", "markdown"} <= set(hook["types_or"])
    assert "--check" in by_id["neuron-migrate"]["entry"].split()
    assert "--write" in by_id["neuron-migrate-fix"]["entry"].split()


def test_minimal_hook_parser_agrees_with_yaml():
    yaml = pytest.importorskip("yaml")
    text = HOOKS.read_text(encoding="utf-8")
    assert _parse_hooks_minimal(text) == yaml.safe_load(text)
