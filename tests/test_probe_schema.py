"""The probe's input domains survive the findings file: what the analysis proved reaches the verifier."""

from __future__ import annotations

import json

import pytest

from nanlint.diagnostics import Probe, ProbeInput
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
