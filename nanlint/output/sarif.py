"""SARIF 2.1.0, as GitHub code scanning accepts it (`github/codeql-action/upload-sarif`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

from .. import RULES_URL, __version__
from ..diagnostics import Diagnostic
from ..rules import all_rules
from ..pages import render_page

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _rule(rule) -> Dict[str, Any]:
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary or rule.message},
        "fullDescription": {"text": rule.message},
        "help": {"text": rule.message, "markdown": render_page(rule)},
        "helpUri": RULES_URL.format(code=rule.code),
        "defaultConfiguration": {"level": "error" if rule.default_enabled else "warning"},
        "properties": {"tags": ["numerics", "pytorch"]},
    }


def render(diagnostics: List[Diagnostic], **_) -> str:
    rules = all_rules()
    index = {r.code: i for i, r in enumerate(rules)}
    results = []
    for d in diagnostics:
        result: Dict[str, Any] = {
            "ruleId": d.code,
            "level": "error",
            "message": {"text": d.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": Path(d.path).as_posix()},
                        "region": {
                            "startLine": d.start.row,
                            "startColumn": d.start.column,
                            "endLine": d.end.row,
                            "endColumn": d.end.column,
                        },
                    }
                }
            ],
        }
        if d.code in index:
            result["ruleIndex"] = index[d.code]
        results.append(result)
    log = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "nanlint",
                        "version": __version__,
                        "informationUri": "https://github.com/nanlint/nanlint",
                        "rules": [_rule(r) for r in rules],
                    }
                },
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"
