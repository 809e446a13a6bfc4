"""Rewrite fixture outputs (``tests/fixtures/<RULE>/<case>.after.<ext>``) where only markers changed.

When a rule's marker text changes, every fixture whose output carries that marker needs its
``.after`` file updated. This tool migrates each ``.before`` file exactly as ``tests/test_fixtures.py``
does and writes the new output, but only where the old and the new output differ in marker lines
(``# TODO(neuron-migrate ...)``) alone: a change to any other line is an applied edit that changed,
which is reported and left for a person to look at (``--force`` writes it anyway).

    python tools/update_fixtures.py [--check] [--force] [RULE_OR_CASE_SUBSTRING ...]
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from migrator.discover import Candidate  # noqa: E402
from migrator.engine import RuleSelection, RuleSet, process  # noqa: E402
from migrator.model import MARKER_PREFIX  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
KIND_BY_EXT = {"py": "python", "ipynb": "notebook", "md": "markdown", "mdx": "markdown", "sh": "shell",
               "slurm": "shell", "txt": "requirements", "cfg": "requirements", "toml": "pyproject",
               "dockerfile": "dockerfile"}


def only_markers_differ(old: str, new: str) -> bool:
    """Whether the two texts differ in marker lines only (added, removed or reworded)."""
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(),
                                                       autojunk=False).get_opcodes():
        if tag != "equal" and not all(MARKER_PREFIX in line for line in
                                      old.splitlines()[i1:i2] + new.splitlines()[j1:j2]):
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("only", nargs="*", help="only the cases whose path (RULE/case) contains one of these")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when some output would change")
    ap.add_argument("--force", action="store_true", help="also write outputs whose applied edits changed")
    args = ap.parse_args(argv)
    rules = RuleSet.from_selection(RuleSelection())
    written, refused = [], []
    for before in sorted(FIXTURES.glob("NM*/*.before.*")):
        case = f"{before.parent.name}/{before.name}"
        if args.only and not any(o in case for o in args.only):
            continue
        ext = before.name.rsplit(".before.", 1)[1]
        after = before.with_name(before.name.replace(".before.", ".after."))
        result = process(Candidate(Path("fixture"), "fixture", KIND_BY_EXT[ext]), rules, before.read_bytes())
        if result.status not in ("changed", "unchanged"):
            print(f"error: {case}: {result.error}", file=sys.stderr)
            continue
        new = result.new_bytes if result.status == "changed" else before.read_bytes()
        old = after.read_bytes() if after.exists() else b""
        if new == old:
            continue
        if not args.force and not only_markers_differ(old.decode("utf-8-sig"), new.decode("utf-8-sig")):
            refused.append(case)
            continue
        written.append(case)
        if not args.check:
            after.write_bytes(new)
    verb = "would change" if args.check else "updated"
    for case in written:
        print(f"{verb}: {case}")
    for case in refused:
        print(f"not updated (an applied edit changed; look, or --force): {case}")
    return 1 if (args.check and written) or refused else 0


if __name__ == "__main__":
    sys.exit(main())
