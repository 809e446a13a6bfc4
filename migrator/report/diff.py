"""Unified diffs, as ``git diff`` / ``diff -u`` print them."""

from __future__ import annotations

import difflib

from migrator.report._common import display_path

NO_NEWLINE = "\\ No newline at end of file\n"


def split_lines(text: str) -> list[str]:
    """Split on ``\\n`` only, keeping each line's ending exactly (``\\r\\n`` stays ``\\r\\n``).

    Unlike ``str.splitlines`` this does not break lines at form feeds, ``\\x1c``-``\\x1e``,
    U+2028 and friends, which may legitimately appear inside a line of source code.
    """
    if not text:
        return []
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])  # last line without a final newline
    return lines


def unified_diff(path: str, old_text: str, new_text: str, *, context: int = 3) -> str:
    """The unified diff from ``old_text`` to ``new_text`` with ``a/path`` / ``b/path`` headers.

    Returns ``""`` when the texts are equal.  Lines are kept exactly as they are (a CRLF
    line shows its ``\\r``); a last line without newline is followed by the standard
    ``\\ No newline at end of file`` marker, so the result always ends with ``\\n``.
    """
    if old_text == new_text:
        return ""
    name = display_path(path)
    out: list[str] = []
    for line in difflib.unified_diff(
        split_lines(old_text),
        split_lines(new_text),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
        n=context,
        lineterm="\n",
    ):
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n")
            out.append(NO_NEWLINE)
    return "".join(out)
