"""SARIF 2.1.0, as GitHub code scanning accepts it (`github/codeql-action/upload-sarif`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

from ..core.diagnostics import Diagnostic, Step
from ..core.install import version
from ..rules import all_rules
from ..rules.pages import render_page, rule_url

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _rule(rule) -> Dict[str, Any]:
    """A rule's metadata, each text once: its summary, its message, and as help the page
    without the message and the tables of figures (`nanlint rule CODE` and helpUri have the
    whole page)."""
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary or rule.message},
        "fullDescription": {"text": rule.message},
        "help": {"text": f"`nanlint rule {rule.code}` prints this rule's page.",
                 "markdown": render_page(rule, brief=True)},
        "helpUri": rule_url(rule.code),
        "defaultConfiguration": {"level": "error" if rule.default_enabled else "warning"},
        "properties": {"tags": ["numerics", "pytorch", rule.kind], "kind": rule.kind},
    }


def _region(start, end) -> Dict[str, int]:
    return {
        "startLine": start.row,
        "startColumn": start.column,
        "endLine": end.row,
        "endColumn": end.column,
    }


def _uri(path: str) -> str:
    """An absolute `file://` URI (as ruff writes them; code scanning maps it into the repo)."""
    return Path(path).resolve().as_uri()


def _fixes(d: Diagnostic, uri: str) -> List[Dict[str, Any]]:
    # A notebook's edits are relative to a cell, not to the file: no SARIF fix for them.
    if d.fix is None or d.cell is not None:
        return []
    return [
        {
            "description": {"text": f"{d.fix.message} ({d.fix.applicability} fix)"},
            "artifactChanges": [
                {
                    "artifactLocation": {"uri": uri},
                    "replacements": [
                        {"deletedRegion": _region(e.start, e.end), "insertedContent": {"text": e.content}}
                        for e in d.fix.edits
                    ],
                }
            ],
        }
    ]


def _step(i: int, step: Step, uri: str) -> Dict[str, Any]:
    """An evidence step as a related location: its line in the file (or the other project
    file it is in); in a notebook the cell is named in the message, the file alone located."""
    location: Dict[str, Any] = {"id": i, "message": {"text": str(step) if step.cell is not None else step.note}}
    physical: Dict[str, Any] = {"artifactLocation": {"uri": _uri(step.path) if step.path else uri}}
    if step.row and step.cell is None:
        physical["region"] = {"startLine": step.row}
    location["physicalLocation"] = physical
    return location


def render(diagnostics: List[Diagnostic], **_) -> str:
    # Only the rules that fired, each once: the log is as large as its findings need.
    fired = {d.code for d in diagnostics}
    rules = [r for r in all_rules() if r.code in fired]
    index = {r.code: i for i, r in enumerate(rules)}
    results = []
    for d in diagnostics:
        uri = _uri(d.path)
        message = d.message if d.cell is None else f"cell {d.cell}:{d.start.row}:{d.start.column}: {d.message}"
        result: Dict[str, Any] = {
            "ruleId": d.code,
            "level": "error",
            "message": {"text": message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": uri},
                        # In a notebook: the range in the .ipynb file itself.
                        "region": _region(d.file_start or d.start, d.file_end or d.end),
                    }
                }
            ],
        }
        if d.code in index:
            result["ruleIndex"] = index[d.code]
        fixes = _fixes(d, uri)
        if fixes:
            result["fixes"] = fixes
        if d.evidence:
            # The steps that show the value reaching the hazard, as SARIF's related locations.
            result["relatedLocations"] = [_step(i, s, uri) for i, s in enumerate(d.evidence)]
        if d.latent:
            result["properties"] = {"latent": True}
        results.append(result)
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "nanlint",
                        "version": version(),
                        "informationUri": "https://github.com/nanlint/nanlint",
                        "rules": [_rule(r) for r in rules],
                    }
                },
                "results": results,
            }
        ],
    }
    # Compact: indentation would be a fifth of the log for a few findings, most of it for many.
    return json.dumps(log, separators=(",", ":")) + "\n"
