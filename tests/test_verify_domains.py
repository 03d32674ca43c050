"""Reachable inputs (issue 9, item 1): the verifier draws inputs only from what the probe says
the code produces (kinds, simplex axis, masks, counts, relations), and the verdict says
whether the failure was found on such inputs ("confirmed") or only with inputs the analysis
could not bound ("possible")."""

from __future__ import annotations

import json

import pytest
import torch

from nanlint.cli import main
from nanlint.core.diagnostics import Probe, ProbeInput
from nanlint.verify.expression import prepare_probe, verify_expression
from nanlint.verify.inputs import index_shape, make_points

SIGMOID = "sigmoid at line 12"


def verdict(original, fixed, inputs, relations=()):
    return verify_expression(Probe("expression", original, fixed, tuple(inputs), relations=tuple(relations)), "cpu")


def points(original, inputs, relations=()):
    p = prepare_probe(Probe("expression", original, None, tuple(inputs), relations=tuple(relations)))
    return make_points(p.specs, p.shape, index_shape(p.shape), p.relations)


def test_seed_dbnet_step_is_confirmed_on_sigmoid_maps_with_a_float16_nan_gradient():
    inputs = [ProbeInput("self.k", 50.0), ProbeInput("x", kind="probability", evidence=SIGMOID),
              ProbeInput("y", kind="probability", evidence=SIGMOID)]
    v = verdict("torch.reciprocal(1 + torch.exp(-self.k * (x - y)))", "torch.sigmoid(self.k * (x - y))", inputs)
    assert v.verdict == "confirmed", v.line()
    w = v.witness
    assert w.where == "gradient" and w.dtype == "float16" and w.result in ("nan", float("nan")) or \
        (w.where == "gradient" and w.dtype == "float16" and "NaN" in w.sentence())
    assert 0.0 <= w.inputs["x"] <= 1.0 and 0.0 <= w.inputs["y"] <= 1.0


def test_the_same_step_on_unbounded_inputs_is_only_possible():
    inputs = [ProbeInput("self.k", 50.0), ProbeInput("x"), ProbeInput("y")]
    v = verdict("torch.reciprocal(1 + torch.exp(-self.k * (x - y)))", "torch.sigmoid(self.k * (x - y))", inputs)
    assert v.verdict == "possible"
    assert "could not bound (x, y" in v.reason and v.witness is not None


def test_relation_hi_ge_lo_is_enforced_by_construction():
    inputs = [ProbeInput("hi"), ProbeInput("lo")]
    pts = points("torch.log1p(hi - lo)", inputs, [("hi", ">=", "lo")])
    assert pts.size > 100
    assert bool((pts.columns["hi"] >= pts.columns["lo"]).all())


def test_a_failure_that_needs_hi_below_lo_is_not_reported_when_hi_ge_lo_is_proven():
    inputs = [ProbeInput("hi", domain=(-100.0, 100.0), evidence="max at line 3"),
              ProbeInput("lo", domain=(-100.0, 100.0), evidence="min at line 3")]
    # A sigmoid by hand of hi - lo: its float16 gradient is NaN only where lo - hi > 11.
    expr, fix = "1 / (1 + torch.exp(lo - hi))", "torch.sigmoid(hi - lo)"
    assert verdict(expr, fix, inputs).verdict == "confirmed"
    assert verdict(expr, fix, inputs, [("hi", ">=", "lo")]).verdict == "not-reproduced"


def test_simplex_rows_sum_to_one_along_their_dim_and_are_non_negative():
    for dim in (-1, 0, 1):
        pts = points("(p * torch.log(p)).sum(-1)", [ProbeInput("p", kind="simplex", dim=dim, evidence="softmax")])
        p = pts.columns["p"]
        assert p.dim() >= (3 if dim == 1 else 2)  # points x a tensor with that axis
        assert bool((p >= 0).all())
        axis = dim + 1 if dim >= 0 else dim
        assert torch.allclose(p.sum(dim=axis), torch.ones(()).double(), atol=1e-12)


def test_entropy_of_a_proven_softmax_is_confirmed_at_a_one_hot_row():
    p = ProbeInput("p", kind="simplex", dim=-1, evidence="softmax at line 4")
    v = verdict("-(p * torch.log(p)).sum(-1)", "torch.special.entr(p).sum(-1)", [p])
    assert v.verdict == "confirmed", v.line()
    assert v.witness is not None and "possible" not in v.line()
    row = v.witness.inputs["p"]
    flat = [x for r in (row if isinstance(row[0], list) else [row]) for x in r]
    assert 0.0 in flat and all(x >= 0 for x in flat)


def test_masks_are_zero_one_and_all_false_only_when_not_proven_non_empty():
    x = ProbeInput("x", domain=(-1.0, 1.0), evidence="tanh at line 2")
    m = ProbeInput("m", kind="mask", evidence="== comparison at line 3")
    expr, fix = "(x * m).sum(-1) / m.sum(-1)", "(x * m).sum(-1) / m.sum(-1).clamp(min=1)"
    pts = points(expr, [x, m])
    vals = pts.columns["m"].unique().tolist()
    assert set(vals) <= {0.0, 1.0}
    assert verdict(expr, fix, [x, m]).verdict == "confirmed"  # an all-0 row gives 0/0
    non_empty = points(expr, [x, m], [("m", ">", "0")])
    assert bool((non_empty.columns["m"].reshape(non_empty.size, -1).sum(1) > 0).all())
    assert verdict(expr, fix, [x, m], [("m", ">", "0")]).verdict == "not-reproduced"


def test_counts_are_non_negative_integers():
    x = ProbeInput("x", domain=(-1.0, 1.0), evidence="tanh at line 2")
    n = ProbeInput("n", kind="count", evidence="sum of a mask at line 5")
    pts = points("x / n", [x, n])
    c = pts.columns["n"]
    assert bool((c >= 0).all()) and bool((c == c.round()).all())
    assert verdict("x / n", "x / n.clamp(min=1)", [x, n]).verdict == "confirmed"
    assert verdict("x / n", "x / n.clamp(min=1)", [x, n], [("n", ">", "0")]).verdict == "not-reproduced"


def _finding(original, fixed, inputs, row, code="NAN101"):
    return {"code": code, "message": "m", "filename": "m.py", "location": {"row": row, "column": 1},
            "end_location": {"row": row, "column": 2},
            "probe": {"kind": "expression", "original": original, "fixed": fixed, "inputs": inputs}}


def test_possible_is_shown_in_text_json_and_html_and_does_not_set_the_exit_code(tmp_path, capsys):
    # A value rule (the log of a value that can be 0): found only with an input the analysis
    # proved nothing about, the failure is "possible".
    path = tmp_path / "f.json"
    log = ("torch.log(z)", "torch.log(z.clamp(min=torch.finfo(z.dtype).tiny))")
    path.write_text(json.dumps([_finding(*log, [{"name": "z"}], 1, code="NAN201")]))
    with pytest.raises(SystemExit) as exc:
        main(["verify", "--from", str(path), "--report", str(tmp_path / "r.html")])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert "m.py:1:1: NAN201 possible: " in out and "could not bound (z" in out
    assert "1 possible (found only with inputs the analysis could not bound)" in out
    page = (tmp_path / "r.html").read_text()
    assert ">possible</span>" in page
    with pytest.raises(SystemExit):
        main(["verify", "--from", str(path), "--output-format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["possible"] == 1 and data["findings"][0]["verification"]["verdict"] == "possible"
    path.write_text(json.dumps([_finding(*log, [{"name": "z", "evidence": "a ReLU output, line 9",
                                                 "kind": "real"}], 1, code="NAN201")]))
    with pytest.raises(SystemExit) as exc:
        main(["verify", "--from", str(path)])
    assert exc.value.code == 1 and " confirmed: " in capsys.readouterr().out
    # A form rule's claim is about the spelling: the same bare input confirms it, and the
    # verdict says that reach was not shown.
    path.write_text(json.dumps([_finding("1 / (1 + torch.exp(-z))", "torch.sigmoid(z)", [{"name": "z"}], 1)]))
    with pytest.raises(SystemExit) as exc:
        main(["verify", "--from", str(path)])
    out = capsys.readouterr().out
    assert exc.value.code == 1 and "NAN101 confirmed: " in out and "reach not shown" in out
