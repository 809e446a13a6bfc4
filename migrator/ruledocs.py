"""Rule documentation as text: ``neuron-migrate explain`` and the rule pages of the docs site.

One source, two renderings. :func:`explain_text` is what ``neuron-migrate explain RULE_ID`` prints;
:func:`rule_page` is the same text as the Markdown page ``docs/rules/RULE_ID.md`` (written by
``tools/gen_rule_docs.py``, kept fresh by ``tests/test_rule_docs.py``); :func:`index_page` is the
rules index ``docs/rules/index.md``. Both are built from :class:`migrator.rules.RuleDoc` (the rule
class's ``title``, ``fix``, ``kinds``, ``why``, ``before``, ``after``, ``caveats`` and ``markers``),
so nothing here knows any particular rule.

Where a page is: :func:`page_path` (relative to the root of neuron-migrate's source tree) and
:func:`page_url` (under a published docs site: ``--docs-url`` / ``docs-url`` of the configuration).
"""

from __future__ import annotations

import re
import textwrap
from typing import Iterable

__all__ = [
    "DOCS_DIR", "RULES_DIR", "FAMILIES", "page_path", "page_url", "is_absolute_url", "explain_text",
    "rules_markdown", "rule_page", "index_page", "family_of", "markdown_text",
]

#: the docs site's sources (MkDocs ``docs_dir``), relative to the source tree's root
DOCS_DIR = "docs"
#: the rule pages, relative to the source tree's root
RULES_DIR = f"{DOCS_DIR}/rules"

#: rule families by the first digit of the id: (id range, title); the order of the index and the nav
FAMILIES = (
    ("NM1xx", "Inference: optimum-neuron models and pipelines"),
    ("NM2xx", "Training: Trainer, TRL, PEFT, accelerate"),
    ("NM3xx", "Parallelism and launch"),
    ("NM4xx", "torch-xla, torch-neuronx, transformers-neuronx, neuronx-distributed"),
    ("NM5xx", "Dependencies, shell scripts, Dockerfiles"),
    ("NM6xx", "Transformers / TRL / Accelerate / hub / datasets upgrades"),
    ("NM9xx", "Manual actions, unparsable units, the self-check"),
)

#: a code fence's language per file kind (the first kind of a rule picks it)
_FENCE_LANG = {
    "python": "python", "notebook": "python", "markdown": "python", "shell": "bash",
    "requirements": "text", "pyproject": "toml", "dockerfile": "dockerfile",
}
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


def page_path(rule_id: str) -> str:
    """``docs/rules/NM101.md``: the rule's page, relative to the root of neuron-migrate's source tree."""
    return f"{RULES_DIR}/{rule_id}.md"


def is_absolute_url(value: str) -> bool:
    """Whether ``value`` starts with a URI scheme (``https:``, ``file:``): what SARIF's ``helpUri`` needs."""
    return bool(_SCHEME.match(value)) and len(value.split(":", 1)[1]) > 0


def page_url(rule_id: str, base: str | None) -> str | None:
    """The rule's page on a published docs site, or None without ``base``.

    ``base`` is the URL the site (``mkdocs build``) is published at: the page is ``BASE/rules/NM101/``.
    A ``base`` containing ``{rule}`` is a template instead: ``{rule}`` is replaced by the id, e.g.
    ``https://github.com/OWNER/neuron-migrate/blob/main/docs/rules/{rule}.md``.
    """
    if not base:
        return None
    if "{rule}" in base:
        return base.replace("{rule}", rule_id)
    return f"{base.rstrip('/')}/rules/{rule_id}/"


def family_of(rule_id: str) -> tuple[str, str]:
    """The family (``("NM1xx", title)``) of a rule id; an id of no listed family is its own."""
    for family in FAMILIES:
        if family[0][:3] == rule_id[:3]:
            return family
    return (f"{rule_id[:3]}xx", f"{rule_id[:3]}xx rules")


# --------------------------------------------------------------------------- explain (plain text)


def explain_text(doc) -> str:
    """What ``neuron-migrate explain RULE_ID`` prints for a :class:`~migrator.rules.RuleDoc`."""
    parts = [f"{doc.id}: {doc.title}", f"fix: {doc.fix}; files: {', '.join(doc.kinds)}", "", doc.why]
    if doc.before:
        parts += ["", "Before:", "", _indent(doc.before)]
    if doc.after:
        parts += ["", "After:", "", _indent(doc.after)]
    if doc.caveats:
        parts += ["", "Caveats:", "", doc.caveats]
    if doc.markers:
        parts += ["", "Markers:"]
        for marker, explanation in doc.markers:
            parts += ["", f"  {marker}", textwrap.fill(explanation, 96, initial_indent="      ", subsequent_indent="      ")]
    return "\n".join(parts) + "\n"


def _indent(text: str) -> str:
    return "\n".join(("    " + line) if line else "" for line in text.splitlines())


def rules_markdown(rules, link: bool = False) -> str:
    """The rules table (``neuron-migrate rules --format markdown``; the titles escaped so that they render
    literally); ``link``: each id links to its page (a path relative to ``docs/rules/``: the table of the
    rules index page)."""
    lines = ["| id | title | fix | files |", "|---|---|---|---|"]
    for r in rules:
        title = markdown_text(r.title).replace("|", "\\|")  # rendered literally, even in a table cell
        rid = f"[{r.id}]({r.id}.md)" if link else r.id
        lines.append(f"| {rid} | {title} | {r.fix} | {', '.join(r.kinds)} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the pages (Markdown)

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
#: characters Markdown could read as markup in prose (outside code spans)
_MARKUP = re.compile(r"([\\*_\[\]`])")


def markdown_text(text: str) -> str:
    """Prose of a rule's docs as Markdown that renders it literally: code spans kept, every other
    character that Markdown reads as markup escaped; each paragraph on one line."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    return "\n\n".join(_escape_paragraph(p) for p in paragraphs)


def _escape_paragraph(text: str) -> str:
    out: list[str] = []
    pos = 0
    for m in _CODE_SPAN.finditer(text):
        out.append(_escape_plain(text[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_escape_plain(text[pos:]))
    line = "".join(out)
    # a paragraph that starts like a list, a heading or a quote is still a paragraph
    if re.match(r"(\d+[.)]|[-+>#=]) ", line):
        line = "\\" + line
    return line


def _escape_plain(text: str) -> str:
    # ``<`` would open an HTML tag and ``&name;`` is an entity; ``>`` is markup only at the start of a line
    text = re.sub(r"&(?=#?\w+;)", "&amp;", text).replace("<", "&lt;")
    return _MARKUP.sub(r"\\\1", text)


def _fence(code: str, lang: str) -> list[str]:
    longest = max((len(m) for m in re.findall(r"`+", code)), default=0)
    ticks = "`" * max(3, longest + 1)
    return [f"{ticks}{lang}", code, ticks]


def _inline_code(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


GENERATED = "<!-- generated by tools/gen_rule_docs.py from the rule class: do not edit -->"


def rule_page(doc) -> str:
    """The page ``docs/rules/<id>.md``: the text ``explain`` prints, as Markdown."""
    lang = _FENCE_LANG.get(doc.kinds[0] if doc.kinds else "python", "text")
    family, family_title = family_of(doc.id)
    lines = [
        GENERATED, "",
        f"# {doc.id}: {markdown_text(doc.title)}", "",
        "| | |", "|---|---|",
        f"| fix | `{doc.fix}` ({_FIX_MEANING.get(doc.fix, doc.fix)}) |",
        f"| files | {', '.join(f'`{k}`' for k in doc.kinds)} |",
        f"| family | [{family}](index.md#{family.lower()}): {family_title} |",
        "", "## Why", "", markdown_text(doc.why) if doc.why else "_(not documented)_",
    ]
    if doc.before or doc.after:
        lines += ["", "## Example"]
        if doc.before:
            lines += ["", "Before:", "", *_fence(doc.before, lang)]
        if doc.after:
            lines += ["", "After:", "", *_fence(doc.after, lang)]
    if doc.caveats:
        lines += ["", "## Caveats", "", markdown_text(doc.caveats)]
    if doc.markers:
        lines += ["", "## Markers", "",
                  "The one-sentence markers this rule leaves for a person (`{...}` stands for a part that "
                  "varies), each with its long form (the reports carry it as the finding's `detail`):"]
        for marker, explanation in doc.markers:
            lines += ["", f"- {_inline_code(marker)}", "", f"    {markdown_text(explanation)}"]
    lines += ["", "## See also", "",
              f"- `neuron-migrate explain {doc.id}` prints this page in a terminal.",
              "- [All rules](index.md), [markers and ignores](../getting-started.md#markers)."]
    return "\n".join(lines) + "\n"


_FIX_MEANING = {
    "auto": "rewrites the code",
    "manual": "only leaves markers",
    "mixed": "rewrites where it is safe, leaves a marker elsewhere",
}

INDEX_START = "<!-- rules-table:start -->"
INDEX_END = "<!-- rules-table:end -->"


def index_page(rules: Iterable) -> str:
    """``docs/rules/index.md``: every rule, by family, each id linking to its page."""
    rules = list(rules)
    lines = [
        GENERATED, "",
        "# Rules", "",
        "Every rule has an id (`NM` + three digits, by family), a page generated from the rule's own "
        "documentation, and the same text in a terminal: `neuron-migrate explain RULE_ID`. "
        "`neuron-migrate rules` lists them; `--select` / `--ignore` take ids or prefixes (`NM1` = every NM1xx "
        "rule). An id never changes meaning once released.", "",
        "`fix`: `auto` rules rewrite the code, `manual` rules only insert markers, `mixed` rules rewrite "
        "where the preconditions hold and mark the rest.", "",
        "The table is `neuron-migrate rules --format markdown` with each id linked to its page.", "",
        INDEX_START,
        rules_markdown(rules, link=True).rstrip("\n"),
        INDEX_END,
    ]
    seen = []
    for rule in rules:
        family = family_of(rule.id)
        if family not in seen:
            seen.append(family)
    lines += ["", "## By family"]
    for family, title in seen:
        lines += ["", f"### {family}", "", title + ":", ""]
        lines += [f"- [{r.id}]({r.id}.md): {markdown_text(r.title)}" for r in rules if family_of(r.id)[0] == family]
    return "\n".join(lines) + "\n"
