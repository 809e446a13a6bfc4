"""The README stays true: rules table in sync, set-up commands, rule ids, pre-commit hooks."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

import codemods
from migrator.cli import rules_markdown

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"
HOOKS = ROOT / ".pre-commit-hooks.yaml"

START = "<!-- rules-table:start -->"
END = "<!-- rules-table:end -->"
FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
RULE_ID_RE = re.compile(r"\bNM\d{3}\b")


def readme() -> str:
    return README.read_text(encoding="utf-8")


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
    assert inside or body, f"README.md has no '## {title}' section"
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


def setup_commands() -> list[str]:
    return [c for block in code_blocks(section(readme(), "Set up")) for c in commands(block)]


def ci_commands() -> list[str]:
    return commands(CI_RUN.read_text(encoding="utf-8").splitlines())


# --------------------------------------------------------------------------- (a) rules table


def test_rules_table_in_sync():
    text = readme()
    assert text.count(START) == 1 and text.count(END) == 1, f"README.md needs one {START} and one {END} line"
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == START)
    end = next(i for i, line in enumerate(lines) if line.strip() == END)
    assert start < end, f"{START} must come before {END}"
    table = "".join(lines[start + 1 : end])
    expected = rules_markdown(codemods.all_rules())
    assert table == expected, (
        "The rules table in README.md is out of date. Replace the lines between "
        f"'{START}' and '{END}' with the output of `neuron-migrate rules --format markdown`."
    )


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


# --------------------------------------------------------------------------- (c) rule ids


def test_every_rule_id_in_readme_exists():
    known = {r.id for r in codemods.all_rules()}
    mentioned = set(RULE_ID_RE.findall(readme()))
    unknown = sorted(mentioned - known)
    assert not unknown, f"README.md mentions rule ids that do not exist: {unknown} (known: {sorted(known)})"


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
