"""Report renderers: turn a :class:`~migrator.model.RunResult` into text for stdout or a file.

Usage::

    from migrator.report import FORMATS, RuleInfo, render

    text = render(run, "json", rules={r.id: r for r in infos}, show_diff=False, mode="check")
    sys.stdout.write(text)          # already ends with a newline; no markup processing

Every renderer returns the complete report as one ``str`` that ends with exactly one
newline (every format always has at least its summary).  Write it verbatim (``--output``
file or ``sys.stdout.write``): the text format contains ``[applied]`` / ``[manual]``,
which a markup-processing printer (rich) would eat.

One module per format (``text``, ``json_report``, ``markdown``, ``sarif``, ``github``), each
with ``render(run, *, rules, show_diff, mode) -> str``; ``diff.unified_diff`` builds the
unified diffs used by ``text`` and ``markdown``.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # pragma: no cover
    from migrator.model import RunResult

__all__ = ["FORMATS", "MODES", "FIX_KINDS", "RuleInfo", "render"]

#: ``--format`` choices, in the order shown in ``--help``.
FORMATS = ("text", "json", "markdown", "sarif", "github")
#: How the run was invoked: plain dry run, ``--write`` or ``--check``.
MODES = ("dry-run", "write", "check")
#: What a rule can do: fix everything itself, only ask for manual action, or both.
FIX_KINDS = ("auto", "manual", "mixed")

_MODULES = {
    "text": "text",
    "json": "json_report",
    "markdown": "markdown",
    "sarif": "sarif",
    "github": "github",
}


@dataclass(frozen=True)
class RuleInfo:
    """What the reports need to know about a rule (names it in SARIF, titles it in Markdown)."""

    id: str  # "NM101"
    title: str  # one line, e.g. "NeuronModelForCausalLM -> AutoModelForCausalLM"
    fix: Literal["auto", "manual", "mixed"]
    help_text: str  # a paragraph or more: what it does, caveats
    #: the rule's page, relative to the root of neuron-migrate's source tree (``docs/rules/NM101.md``)
    page: str = ""
    #: the rule's page on the published docs site (``--docs-url``), an absolute URL; None without one
    url: str | None = None


def render(
    run: RunResult,
    fmt: str,
    *,
    rules: dict[str, RuleInfo],
    show_diff: bool,
    mode: str,
) -> str:
    """Render ``run`` in format ``fmt`` (one of :data:`FORMATS`).

    ``rules`` maps rule ids to their :class:`RuleInfo` (ids missing from it are still
    reported, with the id as title); ``show_diff`` adds unified diffs where the format
    carries them (text, markdown); ``mode`` is one of :data:`MODES` and picks the
    wording ("would be changed" vs "changed").
    """
    try:
        module_name = _MODULES[fmt]
    except KeyError:
        raise ValueError(f"unknown report format {fmt!r}; expected one of: {', '.join(FORMATS)}") from None
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of: {', '.join(MODES)}")
    module = import_module(f"{__name__}.{module_name}")
    return module.render(run, rules=rules, show_diff=show_diff, mode=mode)
