"""Generate the rule pages of the docs site from the rule classes.

    python tools/gen_rule_docs.py          # write docs/rules/NMxxx.md, docs/rules/index.md, the Rules nav
    python tools/gen_rule_docs.py --check  # exit 1 (naming the files) when any of them is stale

What is written, all from ``codemods.all_rules()`` through :mod:`migrator.ruledocs`:

* ``docs/rules/<id>.md`` per rule: the text ``neuron-migrate explain <id>`` prints (title, fix kind,
  file kinds, why, before/after, caveats, the markers with their long forms), as Markdown;
* ``docs/rules/index.md``: the rules table (``neuron-migrate rules --format markdown``, each id linked to
  its page) and the rules by family;
* the Rules section of ``mkdocs.yml``'s ``nav``, between the ``# rules-nav:start`` / ``# rules-nav:end``
  lines;

and a page of a rule that no longer exists is removed. Run it after changing a rule's title, fix, kinds
or documentation (``why``/``before``/``after``/``caveats``/``markers``); ``tests/test_rule_docs.py``
fails until you do.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from migrator.ruledocs import RULES_DIR, family_of, index_page, page_path, rule_page  # noqa: E402

MKDOCS = "mkdocs.yml"
NAV_START = "# rules-nav:start"
NAV_END = "# rules-nav:end"
PAGE_NAME = re.compile(r"^NM\d{3}\.md$")


def load_rules() -> list:
    import codemods

    return list(codemods.all_rules())


def nav_block(rules, indent: str) -> str:
    """The nav entries of the rule pages, one section per family (``indent``: that of the start line)."""
    lines: list[str] = []
    family = None
    for rule in rules:
        fam = family_of(rule.id)
        if fam != family:
            family = fam
            lines.append(f"{indent}- {fam[0]}:")
        lines.append(f"{indent}  - {rule.id}: {page_path(rule.id).split('/', 1)[1]}")
    return "\n".join(lines) + "\n"


def with_nav(text: str, rules) -> str:
    """``mkdocs.yml``'s text with the lines between the nav markers replaced."""
    lines = text.splitlines(keepends=True)
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == NAV_START)
        end = next(i for i, line in enumerate(lines) if line.strip() == NAV_END)
    except StopIteration:
        raise SystemExit(f"{MKDOCS} needs a '{NAV_START}' and a '{NAV_END}' line in its nav") from None
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    return "".join(lines[: start + 1]) + nav_block(rules, indent) + "".join(lines[end:])


def expected(root: Path = ROOT, rules=None) -> dict[Path, str | None]:
    """Every file the generator owns and its text (None: the file must not exist)."""
    rules = load_rules() if rules is None else rules
    out: dict[Path, str | None] = {root / page_path(r.id): rule_page(r.doc()) for r in rules}
    out[root / RULES_DIR / "index.md"] = index_page(rules)
    folder = root / RULES_DIR
    if folder.is_dir():
        for page in folder.iterdir():
            if PAGE_NAME.match(page.name) and page not in out:
                out[page] = None
    mkdocs = root / MKDOCS
    out[mkdocs] = with_nav(mkdocs.read_text(encoding="utf-8"), rules)
    return out


def stale(root: Path = ROOT, rules=None) -> list[str]:
    """The files that differ from what the generator writes (relative paths), sorted."""
    bad = []
    for path, text in expected(root, rules).items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            bad.append(path.relative_to(root).as_posix())
    return sorted(bad)


def write(root: Path = ROOT, rules=None) -> list[str]:
    changed = []
    for path, text in expected(root, rules).items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        changed.append(path.relative_to(root).as_posix())
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return sorted(changed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file is stale")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale()
        if bad:
            print(f"{len(bad)} stale file(s) (run `python tools/gen_rule_docs.py`):", *bad, sep="\n  ")
            return 1
        print("rule docs are up to date")
        return 0
    changed = write()
    print(f"{len(changed)} file(s) written" + (":\n  " + "\n  ".join(changed) if changed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
