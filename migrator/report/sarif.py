"""SARIF 2.1.0 report (``--format sarif``), e.g. for GitHub code scanning.

One run; ``tool.driver.rules`` lists the rules that occur in the results (sorted by id) and
each result's ``ruleIndex`` points into that list.  Applied fixes are ``note`` results,
manual actions ``warning`` results.  Locations are relative POSIX URIs against
``%SRCROOT%``.  Notebook findings keep the line within the cell as ``startLine`` and carry
the 0-based cell index in ``properties.cell`` (the location also gets
``properties.cell``).  Files that could not be processed become
``toolExecutionNotifications`` and make ``executionSuccessful`` false.  A rule descriptor links
the rule's page: ``helpUri`` (an absolute URL) when the docs site's URL is configured (``--docs-url``),
and ``properties.docs``, the page's path in neuron-migrate's documentation (``docs/rules/NM101.md``).
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import migrator
from migrator.model import Finding, RunResult
from migrator.report import RuleInfo
from migrator.report._common import display_path, one_line, sorted_files, sorted_findings

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
TOOL_NAME = "neuron-migrate"
#: Where users learn about the tool (the package page).
INFORMATION_URI = "https://pypi.org/project/neuron-migrate/"
SRCROOT = "%SRCROOT%"

RESULT_LEVEL = {"applied": "note", "manual": "warning"}
RULE_LEVEL = {"auto": "note", "manual": "warning", "mixed": "warning"}


def artifact_uri(path: str) -> str:
    """A relative URI reference for ``path`` (POSIX separators, RFC 3986 percent-encoding)."""
    return quote(display_path(path), safe="/-._~!$&'()*+,;=@")


def rule_name(info: RuleInfo | None, rule_id: str) -> str:
    """A PascalCase identifier from the rule's title (SARIF ``name``); the id when untitled."""
    if info is None or not info.title.strip():
        return rule_id
    words = re.findall(r"[A-Za-z0-9]+", info.title)
    name = "".join(w[:1].upper() + w[1:] for w in words)
    return name[:80] or rule_id


def rule_descriptor(rule_id: str, info: RuleInfo | None) -> dict:
    title = info.title.strip() if info is not None and info.title.strip() else rule_id
    help_text = info.help_text.strip() if info is not None and info.help_text.strip() else title
    descriptor = {
        "id": rule_id,
        "name": rule_name(info, rule_id),
        "shortDescription": {"text": title},
        "fullDescription": {"text": help_text},
        "help": {"text": help_text},
        "defaultConfiguration": {"level": RULE_LEVEL.get(info.fix, "warning") if info else "warning"},
    }
    if info is not None:
        # the rule's page: helpUri where the docs site's URL is known (--docs-url / docs-url; SARIF wants an
        # absolute URI there), and always its path in neuron-migrate's documentation
        if info.url:
            descriptor["helpUri"] = info.url
        descriptor["properties"] = {"fix": info.fix, **({"docs": info.page} if info.page else {})}
    return descriptor


def _location(path: str, finding: Finding | None = None) -> dict:
    physical: dict = {"artifactLocation": {"uri": artifact_uri(path), "uriBaseId": SRCROOT}}
    location: dict = {"physicalLocation": physical}
    if finding is not None:
        physical["region"] = {
            "startLine": max(1, finding.line),
            "startColumn": max(1, finding.column),
        }
        if finding.cell is not None:
            location["properties"] = {"cell": finding.cell}
    return location


def sarif_log(run: RunResult, rules: dict[str, RuleInfo]) -> dict:
    files = sorted_files(run)
    rule_ids = sorted({f.rule for fr in files for f in fr.findings})
    index = {rule_id: i for i, rule_id in enumerate(rule_ids)}

    results = []
    for fr in files:
        for finding in sorted_findings(run, fr):
            result = {
                "ruleId": finding.rule,
                "ruleIndex": index[finding.rule],
                "level": RESULT_LEVEL.get(finding.fix, "warning"),
                "message": {"text": one_line(finding.message) or finding.rule},
                "locations": [_location(fr.path, finding)],
                "properties": {"fix": finding.fix},
            }
            if finding.cell is not None:
                result["properties"]["cell"] = finding.cell
            results.append(result)

    notifications = [
        {
            "level": "error",
            "message": {"text": f"{display_path(fr.path)}: {one_line(fr.error or 'could not be processed')}"},
            "locations": [_location(fr.path)],
        }
        for fr in files
        if fr.status == "error"
    ]

    driver = {
        "name": TOOL_NAME,
        "version": migrator.__version__,
        "semanticVersion": migrator.__version__,
        "informationUri": INFORMATION_URI,
        "rules": [rule_descriptor(rule_id, rules.get(rule_id)) for rule_id in rule_ids],
    }
    return {
        "$schema": SCHEMA_URI,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {"driver": driver},
                "invocations": [
                    {
                        "executionSuccessful": not notifications,
                        "toolExecutionNotifications": notifications,
                    }
                ],
                "results": results,
            }
        ],
    }


def render(run: RunResult, *, rules: dict, show_diff: bool, mode: str) -> str:
    return json.dumps(sarif_log(run, rules), indent=2) + "\n"
