"""The probe's input domains survive the findings file: what the analysis proved reaches the verifier."""

from __future__ import annotations

import json

import pytest

from nanlint.core.diagnostics import Probe, ProbeInput
from nanlint.rules.base import LatentFindings
from nanlint.verify.findings import MALFORMED, parse_findings


def test_domains_kinds_and_relations_round_trip():
    probe = Probe(
        kind="expression",
        original="torch.log(p[idx]) - torch.log(hi - lo)",
        fixed=None,
        inputs=(
            ProbeInput("p", domain=(0.0, 1.0), kind="simplex", dim=-1, evidence="softmax at line 12"),
            ProbeInput("idx", kind="integer"),
            ProbeInput("hi"), ProbeInput("lo"),
        ),
        relations=(("hi", ">=", "lo"),),
    )
    text = json.dumps([{"filename": "m.py", "code": "NAN201", "message": "msg",
                        "location": {"row": 3, "column": 5}, "end_location": {"row": 3, "column": 20},
                        "probe": probe.to_json()}])
    (back,) = parse_findings(text)
    assert back.probe == probe


@pytest.mark.parametrize("bad, message", [
    ({"kind": "banana"}, "`kind` must be one of"),
    ({"dim": "1"}, "`dim` must be an integer"),
    ({"evidence": 3}, "`evidence` must be a string"),
])
def test_malformed_input_domains_are_refused(bad, message):
    raw = {"name": "p", "value": None, "domain": None} | bad
    text = json.dumps([{"filename": "m.py", "code": "NAN201", "message": "m",
                        "location": {"row": 1, "column": 1}, "end_location": {"row": 1, "column": 2},
                        "probe": {"kind": "expression", "original": "torch.log(p)", "inputs": [raw]}}])
    # A malformed probe refuses its finding only (issue 11): the reason says what is wrong.
    (back,) = parse_findings(text)
    assert back.probe.kind == MALFORMED and message in dict(back.probe.params)["reason"]


def test_malformed_relation_is_refused():
    text = json.dumps([{"filename": "m.py", "code": "NAN201", "message": "m",
                        "location": {"row": 1, "column": 1}, "end_location": {"row": 1, "column": 2},
                        "probe": {"kind": "expression", "original": "torch.log(p)", "inputs": [],
                                  "relations": [["a", "=>", "b"]]}}])
    (back,) = parse_findings(text)
    assert back.probe.kind == MALFORMED and "relation" in dict(back.probe.params)["reason"]


ARMS = '''import torch


def reduce(loss, mask, reduction):
    out = loss * mask
    if reduction == "mean":
        out = out.sum() / torch.sum(mask)
    elif reduction == "batchmean":
        out = out.sum() / loss.size(0)
    elif reduction == "batch":
        out = out.sum(1) / mask.sum(1)
    return out
'''


def test_a_probe_in_an_elif_arm_does_not_inline_an_earlier_arms_assignment():
    # Only one arm of a chain runs: the `batch` arm's probe reads `loss` and `mask`, not
    # the `mean` arm's value of `out`.
    from nanlint.lint.engine import lint_source
    from nanlint.rules import all_rules

    result = lint_source("m.py", ARMS, [r for r in all_rules() if r.code in ("NAN113", "NAN201")] + [LatentFindings])
    probes = {d.start.row: d.probe.original for d in result.diagnostics if d.probe is not None}
    assert probes[7] == "(loss * mask).sum() / torch.sum(mask)"
    assert probes[11] == "(loss * mask).sum(1) / mask.sum(1)"


def test_a_list_filled_by_append_is_an_input_not_the_empty_literal():
    from nanlint.lint.engine import lint_source
    from nanlint.rules import all_rules

    source = (
        "import torch\n\n\ndef average(batches):\n    results = []\n    for b in batches:\n"
        "        results.append(b)\n    results = torch.stack(results, dim=0)\n"
        "    is_nan = torch.isnan(results)\n    return results.sum(-1) / (~is_nan).float().sum(-1)\n"
    )
    result = lint_source("m.py", source, [r for r in all_rules() if r.code == "NAN113"] + [LatentFindings])
    (probe,) = [d.probe for d in result.diagnostics]
    assert probe.original == "torch.stack(results, dim=0).sum(-1) / (~torch.isnan(torch.stack(results, dim=0))).float().sum(-1)"
    assert [i.name for i in probe.inputs] == ["results"]
