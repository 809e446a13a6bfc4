"""Generate ``codemods/project/dependency_floors.json``: the lowest versions the pinned target libraries
require of their dependencies.

When the migration raises a project's ``transformers==4.31.0`` to ``transformers>=5.23``, a pin next to it that
Transformers 5.23 does not accept (``regex==2023.12.25``: it requires ``regex>=2025.10.22``) makes the install
line unresolvable. The dependency rules (``codemods.project.dependency_policy``) raise such pins to these floors,
read here from the installed targets' own metadata (``importlib.metadata.requires``; the requirements of their
extras and the target libraries among themselves are left out: ``MINIMUMS`` has those).

    python tools/gen_dependency_floors.py            # (re)write the data file
    python tools/gen_dependency_floors.py --check    # compare with the committed file, exit 1 on a difference

When: on every version bump of a target library (``tests/test_dependencies.py`` compares the file with the
installed metadata and skips when the installed versions differ from the recorded ones).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "codemods" / "project" / "dependency_floors.json"
#: the target libraries whose requirements are read (the distributions the migration installs or raises)
TARGETS = ("transformers", "accelerate", "trl", "peft", "diffusers", "sentence-transformers")
#: dependencies other rules decide (torch: NM504) or that are target libraries themselves (MINIMUMS)
SKIP = frozenset({"torch", *TARGETS})


def floors_of(library: str) -> dict[str, str]:
    """dependency -> the lowest version ``library``'s installed release accepts (its ``>=``/``~=``/``==``)."""
    out: dict[str, str] = {}
    for line in importlib.metadata.requires(library) or ():
        req = Requirement(line)
        if req.marker is not None and "extra" in str(req.marker):
            continue
        name = canonicalize_name(req.name)
        if name in SKIP:
            continue
        lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "~=", "==")
                and not s.version.endswith(".*")]
        if lows:
            out[name] = str(max(lows))
    return dict(sorted(out.items()))


def generate() -> dict:
    return {
        "generated_by": "tools/gen_dependency_floors.py",
        "versions": {lib: importlib.metadata.version(lib) for lib in TARGETS},
        "floors": {lib: floors_of(lib) for lib in TARGETS},
    }


def render(data: dict) -> str:
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed file differs")
    args = parser.parse_args(argv)
    text = render(generate())
    if args.check:
        same = DATA.exists() and DATA.read_text() == text
        print(f"{DATA}: {'up to date' if same else 'differs from the installed targets'}")
        return 0 if same else 1
    DATA.write_text(text)
    print(f"{DATA}: written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
