"""Verdicts on real probes: the originals fail where NUMERICS.md says, the fixes hold, guarded
look-alikes are never confirmed, and wrong fixes are caught."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from nanlint.core.diagnostics import Probe, ProbeInput
from nanlint.lint.engine import lint_source
from nanlint.rules import all_rules
from nanlint.verify.expression import verify_expression

ROOT = Path(__file__).resolve().parent.parent


# A bare name here is an input the analysis has evidence for (these tests are about the
# numerics; test_verify_domains.py covers what an unbounded input changes).
EVIDENCE = "an activation the analysis traced"


def probe(original, fixed, *inputs):
    return Probe("expression", original, fixed, tuple(
        i if isinstance(i, ProbeInput) else ProbeInput(i, evidence=EVIDENCE) for i in inputs))


def test_dbnet_step_function_is_confirmed_with_a_float16_nan_gradient():
    """Done means: Binarize.forward with self.k = 50, as the linter reports it."""
    path = ROOT / "fixtures" / "NAN101_sigmoid_by_hand.py"
    result = lint_source(str(path), path.read_text(), all_rules())
    binarize = [d for d in result.diagnostics if d.start.row == 15]
    assert len(binarize) == 1
    d = binarize[0]
    assert d.probe.inputs[0] == ProbeInput("self.k", 50.0, None)
    # The fixture's x and y are bare parameters: the failure is only "possible" there.
    assert verify_expression(d.probe, "cpu").verdict == "possible"
    # In DBNet they are the probability and threshold maps (sigmoid outputs), as the
    # analysis proves them where the file shows them (fixtures/NAN101_dbnet_head.py, verified
    # end to end in test_verify_cli.py): confirmed.
    maps = tuple(ProbeInput(n, kind="probability", evidence="sigmoid") for n in ("x", "y"))
    v = verify_expression(replace(d.probe, inputs=(d.probe.inputs[0],) + maps), "cpu")
    assert v.verdict == "confirmed", v.line()
    w = v.witness
    assert (w.dtype, w.where, w.autocast, w.device) == ("float16", "gradient", None, "cpu")
    assert w.inputs["self.k"] == 50.0
    assert "NaN gradient" in w.sentence() and "self.k=50" in w.sentence()
    # The witness reruns: the same inputs in float16 give a NaN gradient, sigmoid does not.
    x = torch.tensor(w.inputs["x"], dtype=torch.float16, requires_grad=True)
    y = torch.tensor(w.inputs["y"], dtype=torch.float16)
    torch.reciprocal(1 + torch.exp(-50.0 * (x - y))).backward()
    assert torch.isnan(x.grad)
    x2 = x.detach().clone().requires_grad_()
    torch.sigmoid(50.0 * (x2 - y)).backward()
    assert torch.isfinite(x2.grad)
    # In float32 with inputs in [0, 1] the original is safe: the witness is small and fp16.
    assert abs(w.inputs["x"]) <= 1 and abs(w.inputs["y"]) <= 1
    by_name = {c.name: c for c in v.contexts}
    assert by_name["float16"].original.gradient_failures > 0
    assert all(c.fix.gradient_failures == 0 and c.fix.forward_failures == 0 for c in v.contexts)


def test_logsumexp_by_hand_is_confirmed():
    v = verify_expression(probe("torch.log(torch.exp(x).sum(-1))", "torch.logsumexp(x, -1)", "x"), "cpu")
    assert v.verdict == "confirmed", v.line()
    assert v.witness.where == "forward" and v.witness.result in (float("inf"), float("-inf"))
    # Overflows in every dtype: float32 too (exp(89) is inf).
    assert {c.name for c in v.contexts if c.original.forward_failures} >= {"float32", "float16", "bfloat16"}


def test_logsumexp_rule_fixtures_if_present():
    """NAN107 (another helper's rule): every positive of its fixture is confirmed."""
    path = ROOT / "fixtures" / "NAN107_logsumexp_by_hand.py"
    if not path.exists():
        pytest.skip("NAN107 not written yet")
    diags = [d for d in lint_source(str(path), path.read_text(), all_rules()).diagnostics
             if d.code == "NAN107" and d.probe is not None]
    assert diags
    for d in diags:
        v = verify_expression(d.probe, "cpu")
        assert v.verdict in ("confirmed", "possible"), (d.start.row, v.line())


@pytest.mark.parametrize(
    "original, fixed, inputs",
    [
        # The guarded forms: nothing to confirm.
        ("torch.log(torch.exp(x - x.amax(-1, keepdim=True)).sum(-1)) + x.amax(-1)", "torch.logsumexp(x, -1)", ["x"]),
        ("torch.sigmoid(z)", "torch.sigmoid(z)", ["z"]),
        ("torch.log_softmax(x, -1)", "torch.log_softmax(x, -1)", ["x"]),
        ("torch.nn.functional.softplus(x)", "torch.nn.functional.softplus(x)", ["x"]),
        ("torch.exp(x - x.amax(-1, keepdim=True)) / torch.exp(x - x.amax(-1, keepdim=True)).sum(-1, keepdim=True)",
         "torch.softmax(x, -1)", ["x"]),
        ("torch.log1p(x)", "torch.log1p(x)", ["x"]),
        ("torch.log(p.clamp(min=1e-6))", "torch.log(p.clamp(min=1e-6))", [ProbeInput("p", domain=(0.0, 1.0))]),
        ("torch.where(z >= 0, 1 / (1 + torch.exp(-z.abs())), torch.exp(-z.abs()) / (1 + torch.exp(-z.abs())))",
         "torch.sigmoid(z)", ["z"]),
    ],
)
def test_guarded_look_alikes_are_not_confirmed(original, fixed, inputs):
    v = verify_expression(probe(original, fixed, *inputs), "cpu")
    assert v.verdict == "not-reproduced", v.line()
    assert v.witness is None


def test_a_wrong_fix_is_caught():
    v = verify_expression(probe("1 / (1 + torch.exp(-z))", "torch.sigmoid(-z)", "z"), "cpu")
    assert v.verdict == "fix-failed", v.line()
    assert v.fix_witness is not None and v.fix_witness.kind == "accuracy"
    assert "different function" in v.fix_witness.sentence()


def test_a_fix_that_fails_where_the_original_held_is_caught():
    # exp(x) - 1 -> an "upcast" through float16: overflows where the original did not.
    v = verify_expression(probe("torch.exp(x) - 1", "torch.expm1(x.half()).to(x.dtype)", "x"), "cpu")
    assert v.verdict == "fix-failed", v.line()
    assert v.fix_witness.result == float("inf")


def test_accuracy_rule_is_confirmed_with_bits():
    v = verify_expression(probe("torch.log(1 + x)", "torch.log1p(x)", "x"), "cpu")
    assert v.verdict == "confirmed", v.line()
    assert v.witness.kind == "accuracy" and v.witness.bits >= 4
    f32 = next(c for c in v.contexts if c.name == "float32")
    assert f32.original.accuracy_failures > 0 and f32.fix.bits_p99 <= 2


def test_singular_original_with_a_defining_fix():
    """log(p) at p = 0 is -inf in float64 too; a clamped fix defines it: confirmed, and the
    witness says the expression itself is undefined there."""
    v = verify_expression(
        probe("torch.log(p)", "torch.log(p.clamp(min=torch.finfo(p.dtype).tiny))",
              ProbeInput("p", domain=(0.0, 1.0))),
        "cpu",
    )
    assert v.verdict == "confirmed", v.line()
    assert v.witness.kind == "singular" and v.witness.inputs["p"] == 0.0
    assert "float64 gives it too" in v.witness.sentence()


def test_upcast_fix_confirms_a_float16_overflow():
    v = verify_expression(probe("x.exp()", "x.float().exp()", "x"), "cpu")
    assert v.verdict == "confirmed", v.line()
    assert v.witness.dtype == "float16" and v.witness.result == float("inf")


def test_domain_and_constants_from_the_probe_bound_the_search():
    # Inside [0, 1], 50 * (x - y) never reaches float32's edge (88.7): float32 holds.
    v = verify_expression(
        probe("torch.reciprocal(1 + torch.exp(-k * (x - y)))", "torch.sigmoid(k * (x - y))",
              ProbeInput("k", 50.0), ProbeInput("x", domain=(0.0, 1.0)), ProbeInput("y", domain=(0.0, 1.0))),
        "cpu",
    )
    assert v.verdict == "confirmed"
    by_name = {c.name: c for c in v.contexts}
    assert by_name["float32"].original.gradient_failures == 0
    assert by_name["float16"].original.gradient_failures > 0
    assert any("constant from the source" in r for r in v.ranges)


def test_no_fix_and_no_inputs():
    v = verify_expression(probe("torch.log(torch.exp(x).sum(-1))", None, "x"), "cpu")
    assert v.verdict == "confirmed" and "no fix" in v.reason
    v = verify_expression(probe("torch.exp(torch.tensor(1.0))", "torch.exp(torch.tensor(1.0))"), "cpu")
    assert v.verdict == "not-verifiable"


def test_original_that_does_not_run_is_not_verifiable():
    # No small shape makes a view of 3 elements (the shape search tries ranks 1 to 3).
    v = verify_expression(probe("x.view(3)", "x.view(3)", "x"), "cpu")
    assert v.verdict == "not-verifiable" and "does not run" in v.reason
    v = verify_expression(probe("torch.nn.functional.cross_entropy(x, t, bogus=1)", "x", "x", "t"), "cpu")
    assert v.verdict == "not-verifiable" and "does not run" in v.reason


def test_json_of_a_verification_is_complete():
    import json

    v = verify_expression(probe("1 / (1 + torch.exp(-z))", "torch.sigmoid(z)", "z"), "cpu")
    data = json.loads(json.dumps(v.to_json()))
    assert data["verdict"] == "confirmed"
    assert data["witness"]["dtype"] and data["witness"]["sentence"]
    assert len(data["contexts"]) == 7
    assert {"original", "fix", "points", "name"} <= set(data["contexts"][0])
    assert data["ranges"]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_dbnet_on_cuda():
    v = verify_expression(
        probe("torch.reciprocal(1 + torch.exp(-k * (x - y)))", "torch.sigmoid(k * (x - y))",
              ProbeInput("k", 50.0), "x", "y"),
        "cuda",
    )
    assert v.verdict == "confirmed", v.line()
    assert v.witness.device == "cuda"
    assert any(c.context["autocast"] == "float16" for c in v.contexts)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_probe_that_makes_a_mask_from_sizes_runs_on_cuda():
    """`torch.arange(4)` inside the probe is made on the GPU beside its inputs."""
    tail = "(torch.arange(4)[None, :] >= n[:, None])"
    v = verify_expression(
        probe(f"(x * {tail}).sum(-1) / {tail}.sum(-1)", f"(x * {tail}).sum(-1) / {tail}.sum(-1).clamp(min=1)",
              "x", "n"),
        "cuda",
    )
    assert v.verdict == "confirmed", v.line()
    assert v.witness.device == "cuda"
