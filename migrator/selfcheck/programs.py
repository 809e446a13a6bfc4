"""The Python programs (and the shell units) in a file, exactly as the migration sees them.

A ``.py`` file is one program of one part. A notebook is one program: its Python code cells in
order, with IPython line magics and ``!`` lines neutralised (placeholder lines that keep the line
count), plus one program of its own per ``%%writefile x.py`` cell. A Markdown document holds one
program per Python code block (a block written as an interpreter session with ``>>>`` prompts is
its examples, prompts stripped, joined as the migration joins them). Other kinds hold no Python.

Nothing here parses a notebook or a Markdown document again: the migration's own
:func:`~migrator.filekinds.notebook.transform_notebook` and
:func:`~migrator.filekinds.markdown.transform_markdown` are run with callbacks that record the
units they are handed instead of migrating them, so the cells and blocks taken (and the way their
IPython syntax is neutralised) are by construction those the rules see.
"""

from __future__ import annotations

import json

from migrator.filekinds.markdown import transform_markdown
from migrator.filekinds.notebook import NotebookError, split_lines, transform_notebook

Program = tuple[list[str], bool]  # (parts run in order in one namespace, is a notebook)


def _units(kind: str, text: str) -> tuple[list[str], list[str]]:
    """(the Python units, the shell units) the migration hands to the rules, in order."""
    python: list[str] = []
    shell: list[str] = []

    def py(source: str):
        python.append(source)
        return source, []

    def sh(source: str):
        shell.append(source)
        return source, []

    if kind == "notebook":
        try:
            transform_notebook(text, py, sh)
        except NotebookError:
            return [], []
    elif kind == "markdown":
        transform_markdown(text, py, sh)
    elif kind == "python":
        python.append(text)
    else:
        shell.append(text)
    return python, shell


def _writefile_bodies(text: str) -> list[str]:
    """The bodies of the ``%%writefile <path>.py`` cells of a notebook (the magic line left out)."""
    try:
        nb = json.loads(text[1:] if text.startswith("\ufeff") else text)
    except (ValueError, RecursionError):
        return []
    cells = nb.get("cells") if isinstance(nb, dict) else None
    out = []
    for cell in cells if isinstance(cells, list) else ():
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        src = cell.get("source")
        source = "".join(src) if isinstance(src, list) and all(isinstance(x, str) for x in src) else src
        if not isinstance(source, str):
            continue
        lines = split_lines(source)
        words = lines[0].split() if lines else []
        if words and words[0] == "%%writefile" and len(words) > 1 and words[-1].endswith(".py"):
            out.append("".join(lines[1:]))
    return out


def programs(kind: str, text: str) -> list[Program]:
    """The Python programs in a file of ``kind`` (:data:`migrator.model.KINDS`), each as
    (parts, is_notebook), ready for :func:`migrator.selfcheck.check_program`."""
    if kind not in ("python", "notebook", "markdown"):
        return []
    python, _ = _units(kind, text)
    if kind == "python":
        return [(python, False)]
    if kind == "markdown":
        return [([unit], False) for unit in python]
    out: list[Program] = [(python, True)] if python else []
    out += [([body], False) for body in _writefile_bodies(text)]
    return out


def shell_units(kind: str, text: str) -> list[str]:
    """The shell-like text units of a file as the migration hands them to the text rules: the whole
    text of a shell script, requirements file, ``pyproject.toml`` or Dockerfile; a notebook's ``!``
    commands and ``%%bash`` cells; a Markdown document's shell and console blocks (commands only)."""
    return _units(kind, text)[1]
