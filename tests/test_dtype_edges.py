"""The dtype edges rule messages state (nanlint.analysis.transfer) are what torch measures,
and a verifier witness fails where the message says the failure starts."""

from __future__ import annotations

import math

import pytest
import torch

from nanlint.analysis.transfer import EXP_OVERFLOW, EXP_UNDERFLOW
from nanlint.lint.engine import lint_source
from nanlint.rules import get_rule
from nanlint.verify.verifier import verify_one

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _first(fails, dtype: torch.dtype) -> float:
    """The smallest x in (1, 200) whose value in `dtype` fails (bisection over float64 x; every
    predicate here is monotone in x)."""
    lo, hi = 1.0, 200.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if fails(torch.tensor(mid, dtype=torch.float64).to(dtype)):
            hi = mid
        else:
            lo = mid
    return hi


def _spacing(x: float, dtype: torch.dtype) -> float:
    t = torch.tensor(x, dtype=dtype)
    return float(torch.nextafter(t, torch.tensor(math.inf, dtype=dtype)) - t)


@pytest.mark.parametrize("name", DTYPES)
def test_exp_overflow_edge_is_measured(name):
    dtype = DTYPES[name]
    measured = _first(lambda x: bool(torch.isinf(torch.exp(x))), dtype)
    assert abs(measured - EXP_OVERFLOW[name]) <= _spacing(measured, dtype) / 2 + 0.01, measured


@pytest.mark.parametrize("name", DTYPES)
def test_exp_underflow_edge_is_measured(name):
    dtype = DTYPES[name]
    measured = _first(lambda x: float(torch.exp(-x)) == 0.0, dtype)
    assert abs(measured - EXP_UNDERFLOW[name]) <= _spacing(measured, dtype) / 2 + 0.01, measured


@pytest.mark.parametrize("name", DTYPES)
def test_the_log_of_softmax_gradient_fails_from_the_overflow_edge(name):
    """NAN102's message: the gradient of log(softmax) fails once a log-probability is below
    -EXP_OVERFLOW (1/p overflows), the value once it is below -EXP_UNDERFLOW."""
    dtype = DTYPES[name]

    def grad_fails(gap: torch.Tensor) -> bool:
        x = torch.stack([torch.zeros((), dtype=dtype), -gap]).requires_grad_(True)
        torch.log(torch.softmax(x, -1)).sum().backward()
        return not bool(torch.isfinite(x.grad).all())

    def value_fails(gap: torch.Tensor) -> bool:
        x = torch.stack([torch.zeros((), dtype=dtype), -gap])
        return not bool(torch.isfinite(torch.log(torch.softmax(x, -1))).all())

    for fails, edge in ((grad_fails, EXP_OVERFLOW[name]), (value_fails, EXP_UNDERFLOW[name])):
        measured = _first(fails, dtype)
        assert abs(measured - edge) <= _spacing(measured, dtype) / 2 + 0.01, (measured, edge)


def test_nan102_message_states_the_edges_its_witness_shows():
    """The witness of a log of a softmax is a gradient failure; the message's first number is
    where that failure starts, and the witness's smallest log-probability lies past it."""
    source = "import torch\n\ndef nll(logits):\n    return torch.log(torch.softmax(logits, dim=-1))\n"
    (d,) = lint_source("m.py", source, [get_rule("NAN102")]).diagnostics
    assert f"below -{EXP_OVERFLOW['float16']:.3g} in float16" in d.message
    assert f"from -{EXP_UNDERFLOW['float16']:.3g}" in d.message
    v = verify_one(d, "cpu")
    assert v.verdict == "confirmed", v.line()
    w = v.witness
    assert w.dtype == "float16" and w.where == "gradient", w.sentence()
    logits = torch.tensor(w.inputs["logits"], dtype=torch.float16).double()
    smallest = float(torch.log_softmax(logits, -1).min())
    assert smallest < -EXP_OVERFLOW["float16"], (smallest, w.sentence())
