"""SARIF output: valid SARIF 2.1.0, and as small as its content needs.

The OASIS schema file (sarif-schema-2.1.0.json) is OASIS TC content under the OASIS IPR
policy, not an open-source licence, so it is not committed. STRUCTURE below states, in our
own words, the requirements of SARIF 2.1.0 (OASIS Standard, sections 3.13 to 3.56) for the
objects nanlint writes: the required properties, the allowed property names (the SARIF
schema forbids any other on these objects; extensions go in a `properties` bag), the value
types and ranges. With NANLINT_SARIF_SCHEMA naming a local copy of the OASIS schema, the
same logs are validated against it too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest

from nanlint.cli import main

ROOT = Path(__file__).resolve().parent.parent

_MESSAGE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"text": {"type": "string"}, "markdown": {"type": "string"}, "id": {"type": "string"},
                   "arguments": {"type": "array", "items": {"type": "string"}}},
    "anyOf": [{"required": ["text"]}, {"required": ["id"]}],
}
_MULTIFORMAT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["text"],
    "properties": {"text": {"type": "string"}, "markdown": {"type": "string"}},
}
_BAG = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True, "items": {"type": "string"}}}}
_REGION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {k: {"type": "integer", "minimum": 1} for k in ("startLine", "startColumn", "endLine", "endColumn")},
}
_ARTIFACT_LOCATION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"uri": {"type": "string", "format": "uri-reference"}, "uriBaseId": {"type": "string"},
                   "index": {"type": "integer", "minimum": -1}},
}
STRUCTURE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["version", "runs"],
    "properties": {
        "$schema": {"type": "string", "format": "uri"},
        "version": {"enum": ["2.1.0"]},
        "runs": {"type": "array", "items": {"$ref": "#/definitions/run"}},
    },
    "definitions": {
        "run": {
            "type": "object",
            "additionalProperties": False,
            "required": ["tool"],
            "properties": {
                "tool": {"type": "object", "additionalProperties": False, "required": ["driver"],
                         "properties": {"driver": {"$ref": "#/definitions/toolComponent"}}},
                "results": {"type": "array", "items": {"$ref": "#/definitions/result"}},
            },
        },
        "toolComponent": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "version": {"type": "string"},
                "informationUri": {"type": "string", "format": "uri"},
                "rules": {"type": "array", "uniqueItems": True, "items": {"$ref": "#/definitions/reportingDescriptor"}},
            },
        },
        "reportingDescriptor": {
            "type": "object",
            "additionalProperties": False,
            "required": ["id"],
            "properties": {
                "id": {"type": "string"},
                "name": {"type": "string"},
                "shortDescription": _MULTIFORMAT,
                "fullDescription": _MULTIFORMAT,
                "help": _MULTIFORMAT,
                "helpUri": {"type": "string", "format": "uri"},
                "defaultConfiguration": {
                    "type": "object", "additionalProperties": False,
                    "properties": {"level": {"enum": ["none", "note", "warning", "error"]},
                                   "enabled": {"type": "boolean"}, "rank": {"type": "number"}},
                },
                "properties": _BAG,
            },
        },
        "result": {
            "type": "object",
            "additionalProperties": False,
            "required": ["message"],
            "properties": {
                "ruleId": {"type": "string"},
                "ruleIndex": {"type": "integer", "minimum": -1},
                "level": {"enum": ["none", "note", "warning", "error"]},
                "message": _MESSAGE,
                "locations": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False,
                    "properties": {"physicalLocation": {
                        "type": "object", "additionalProperties": False,
                        "properties": {"artifactLocation": _ARTIFACT_LOCATION, "region": _REGION},
                    }},
                }},
                "fixes": {"type": "array", "items": {"$ref": "#/definitions/fix"}},
                # A value finding's evidence: related locations, each with an id and a message.
                "relatedLocations": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False,
                    "properties": {
                        "id": {"type": "integer", "minimum": -1},
                        "message": _MESSAGE,
                        "physicalLocation": {
                            "type": "object", "additionalProperties": False,
                            "properties": {"artifactLocation": _ARTIFACT_LOCATION, "region": _REGION},
                        },
                    },
                }},
                "properties": _BAG,
            },
        },
        "fix": {
            "type": "object",
            "additionalProperties": False,
            "required": ["artifactChanges"],
            "properties": {
                "description": _MESSAGE,
                "artifactChanges": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False,
                    "required": ["artifactLocation", "replacements"],
                    "properties": {
                        "artifactLocation": _ARTIFACT_LOCATION,
                        "replacements": {"type": "array", "minItems": 1, "items": {
                            "type": "object", "additionalProperties": False, "required": ["deletedRegion"],
                            "properties": {
                                "deletedRegion": _REGION,
                                "insertedContent": {"type": "object", "additionalProperties": False,
                                                    "properties": {"text": {"type": "string"}}},
                            },
                        }},
                    },
                }},
            },
        },
    },
}


def _sarif(capsys, monkeypatch, cwd: Path, *args: str) -> dict:
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["--output-format", "sarif", "--exit-zero", *args])
    return json.loads(capsys.readouterr().out)


def _valid(log: dict) -> None:
    checker = jsonschema.FormatChecker()
    jsonschema.Draft7Validator(STRUCTURE, format_checker=checker).validate(log)
    official = os.environ.get("NANLINT_SARIF_SCHEMA")
    if official:
        schema = json.loads(Path(official).read_text(encoding="utf-8"))
        jsonschema.Draft4Validator(schema, format_checker=checker).validate(log)
    # What a schema cannot say: each result's ruleIndex names the rule of its ruleId, each
    # rule is listed once, and only rules with a result are listed.
    for run in log["runs"]:
        rules = run["tool"]["driver"].get("rules", [])
        ids = [r["id"] for r in rules]
        assert len(ids) == len(set(ids))
        assert set(ids) == {r["ruleId"] for r in run["results"]}
        for result in run["results"]:
            assert ids[result["ruleIndex"]] == result["ruleId"]
            for loc in result["locations"]:
                region = loc["physicalLocation"]["region"]
                assert (region["endLine"], region["endColumn"]) >= (region["startLine"], region["startColumn"])


def test_the_structure_rejects_what_sarif_forbids():
    """The check can fail: a property SARIF does not define, a missing required one."""
    log = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": []}]}
    jsonschema.Draft7Validator(STRUCTURE).validate(log)
    bad = json.loads(json.dumps(log))
    bad["runs"][0]["tool"]["driver"]["claim"] = "not a SARIF property"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(STRUCTURE).validate(bad)
    bad = json.loads(json.dumps(log))
    bad["runs"][0]["results"] = [{"ruleId": "NAN101"}]  # a result needs its message
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(STRUCTURE).validate(bad)


def test_the_example_s_findings_make_a_small_valid_log(capsys, monkeypatch):
    """Every rule of the example, off-by-default ones too: 7 findings of 7 rules. The rule
    metadata is written once per rule that fired (it was every rule's whole page: 427 KB)."""
    log = _sarif(capsys, monkeypatch, ROOT, "--select", "ALL", "examples/train_step.py")
    _valid(log)
    run = log["runs"][0]
    assert len(run["results"]) >= 6
    size = len(json.dumps(log, separators=(",", ":")))
    assert size < 50_000, size
    # The label entropy's evidence (NAN201, manifest) is a related location on its line.
    (entropy,) = [r for r in run["results"] if r["ruleId"] == "NAN201"]
    (step,) = entropy["relatedLocations"]
    assert step["physicalLocation"]["region"]["startLine"] == 46 and "bincount" in step["message"]["text"]
    help_md = run["tool"]["driver"]["rules"][0]["help"]["markdown"]
    assert "## Why is this bad?" in help_md and "## Where it fails (verified)" not in help_md
    assert f"`nanlint rule {run['tool']['driver']['rules'][0]['id']}` prints the full page" in help_md


def test_a_log_stays_small_whichever_rules_fire():
    """The largest six rule descriptors together: six findings of six different rules."""
    from nanlint.output.sarif import _rule
    from nanlint.rules import all_rules

    sizes = sorted(len(json.dumps(_rule(r), separators=(",", ":"))) for r in all_rules())
    assert sum(sizes[-6:]) < 42_000, sizes[-6:]


def test_notebooks_syntax_errors_and_clean_files_give_valid_logs(capsys, monkeypatch, tmp_path):
    cells = [
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["import torch\n", "g = 1 / (1 + torch.exp(-z))\n"]},
    ]
    nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    (tmp_path / "bad.py").write_text("import torch\ndef (:\n", encoding="utf-8")
    (tmp_path / "clean.py").write_text("import torch\ny = torch.sigmoid(x)\n", encoding="utf-8")
    log = _sarif(capsys, monkeypatch, tmp_path, ".")
    _valid(log)
    assert sorted(r["ruleId"] for r in log["runs"][0]["results"]) == ["NAN001", "NAN101"]
    log = _sarif(capsys, monkeypatch, tmp_path, "clean.py")
    _valid(log)
    assert log["runs"][0]["results"] == [] and log["runs"][0]["tool"]["driver"]["rules"] == []


def test_every_rule_descriptor_is_valid():
    """Each rule's metadata as a one-result log: whichever rule fires, the log is valid."""
    from nanlint.output.sarif import _rule
    from nanlint.rules import all_rules

    for rule in all_rules():
        log = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "nanlint", "rules": [_rule(rule)]}},
                                             "results": [{"ruleId": rule.code, "ruleIndex": 0,
                                                          "message": {"text": rule.message}}]}]}
        jsonschema.Draft7Validator(STRUCTURE, format_checker=jsonschema.FormatChecker()).validate(log)
        assert log["runs"][0]["tool"]["driver"]["rules"][0]["help"]["markdown"].startswith(f"# {rule.code} ")
