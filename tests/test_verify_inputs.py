"""The verifier's inputs and measures: adversarial values, batching, bits of error."""

from __future__ import annotations

import math

import pytest
import torch

from nanlint.verify.contexts import contexts_for
from nanlint.verify.evaluate import bits_of_error, ordinal, representable, trusted
from nanlint.verify.inputs import (
    MAX_ELEMENTS,
    InputSpec,
    domain_values,
    full_range_values,
    make_points,
)


def _near(values, target, tol):
    return any(abs(v - target) <= tol for v in values)


def test_full_range_covers_the_edges():
    vals = full_range_values()
    assert 0.0 in vals
    for dt in (torch.float16, torch.bfloat16, torch.float32):
        fi = torch.finfo(dt)
        for edge in (fi.max, fi.tiny, fi.tiny * fi.eps, fi.eps):
            assert edge in vals and -edge in vals, (dt, edge)
    # exp overflow edges, with values just below and past them.
    for edge in (math.log(65504.0), math.log(torch.finfo(torch.float32).max)):
        assert _near(vals, edge - 0.01, 1e-9) and _near(vals, edge + 0.01, 1e-9)
        assert _near(vals, -edge - 0.01, 1e-9)
    assert _near(vals, 89.0, 0.6)  # bfloat16's exp edge
    assert 1.0 in vals and -1.0 in vals
    assert len(vals) == len(set(vals))


def test_domain_bounds_the_values_and_reaches_its_ends():
    vals = domain_values(0.0, 1.0)
    assert min(vals) == 0.0 and max(vals) == 1.0
    assert all(0.0 <= v <= 1.0 for v in vals)
    # Next to the ends: 1 - eps/2 rounds to 1 in float16, 1e-30 is 0 there.
    assert _near(vals, 1.0 - torch.finfo(torch.float16).eps / 2, 0.0)
    assert _near(vals, 1e-30, 1e-45)
    half_open = domain_values(0.0, math.inf)
    assert min(half_open) == 0.0 and max(half_open) > 1e38


def test_constants_are_fixed_and_inputs_are_combined():
    specs = [InputSpec("self.k", value=50.0), InputSpec("x"), InputSpec("y")]
    pts = make_points(specs, ())
    assert pts.constants == {"self.k": 50.0}
    assert set(pts.columns) == {"x", "y"}
    n = pts.size
    assert 1000 < n <= MAX_ELEMENTS + 1024
    x, y = pts.columns["x"], pts.columns["y"]
    # Small inputs far enough apart for 50 * (x - y) to overflow exp in float16.
    small = (x.abs() <= 0.25) & (y.abs() <= 0.25) & ((x - y).abs() >= 0.24)
    assert bool(small.any())
    assert bool((x == y).any())  # equal values are tried too
    again = make_points(specs, ())
    assert torch.equal(again.columns["x"], x)  # seeded: the same points every run


def test_vector_points_use_patterns_and_masks():
    specs = [InputSpec("x"), InputSpec("mask", role="bool")]
    pts = make_points(specs, (4,))
    x, m = pts.columns["x"], pts.columns["mask"]
    assert x.shape[1:] == (4,) and m.dtype == torch.bool and m.shape[1:] == (4,)
    rows = x.reshape(len(x), -1)
    # One element standing out (log_softmax underflow) and all equal (logsumexp overflow).
    assert bool(((rows[:, 1:] == 0).all(dim=1) & (rows[:, 0] < -200)).any())
    assert bool(((rows == rows[:, :1]).all(dim=1) & (rows[:, 0] > 89)).any())
    assert bool((~m).all(dim=1).any()) and bool(m.all(dim=1).any())


def test_domain_inputs_stay_in_their_domain():
    pts = make_points([InputSpec("p", domain=(0.0, 1.0)), InputSpec("z")], (4,))
    p = pts.columns["p"]
    assert float(p.min()) >= 0.0 and float(p.max()) <= 1.0


def test_contexts():
    names = [c.name for c in contexts_for("cpu")]
    assert names[:3] == ["float32", "float16", "bfloat16"]
    assert "float32 in autocast(float16)" in names and "float32 in autocast(bfloat16)" in names


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_bits_of_error_counts_floats_between(dtype):
    one = torch.tensor([1.0], dtype=dtype)
    nxt = torch.nextafter(one, torch.tensor([2.0], dtype=dtype))
    ref = torch.tensor([1.0], dtype=torch.float64)
    assert float(bits_of_error(one, ref)) == 0.0
    assert float(bits_of_error(nxt, ref)) == 1.0  # log2(1 + 1)
    # Across zero: -tiny and +tiny are separated by all the subnormals and both zeros.
    tiny = torch.finfo(dtype).tiny
    a = torch.tensor([-tiny], dtype=dtype)
    b = torch.tensor([tiny], dtype=torch.float64)
    n_sub = 2 * round(1 / torch.finfo(dtype).eps)  # subnormals on both sides, and 0
    # ... at most the significand: every bit wrong (never "30 bits" in float32).
    from nanlint.verify.contexts import PRECISION

    assert abs(float(bits_of_error(a, b)) - min(math.log2(1 + n_sub), PRECISION[dtype])) < 1e-6
    assert float(bits_of_error(torch.tensor([1.0], dtype=dtype), torch.tensor([-60000.0], dtype=torch.float64))) \
        == PRECISION[dtype]
    # The reference is rounded to the result's dtype first (Herbie's measure).
    assert float(bits_of_error(one, torch.tensor([1.0 + 1e-12], dtype=torch.float64))) == 0.0
    assert math.isnan(float(bits_of_error(torch.tensor([math.inf], dtype=dtype), ref)))


def test_ordinal_is_monotonic():
    x = torch.tensor([-65504.0, -1.0, -0.0, 0.0, 6e-8, 1.0, 65504.0], dtype=torch.float16)
    o = ordinal(x)
    assert o[2] == o[3]
    assert all(int(a) < int(b) for a, b in zip(o[3:], o[4:]))
    assert all(int(a) < int(b) for a, b in zip(o[:2], o[1:3]))


def test_representable_and_trusted():
    ref = torch.tensor([1e5, 100.0, math.nan, 1e-30], dtype=torch.float64)
    assert representable(ref, torch.float16).tolist() == [False, True, False, True]
    # Subnormal in float16 (1e-6) is not a reliable point for accuracy; 0 is.
    ref = torch.tensor([1e-6, 0.0, 1.0, 1.0], dtype=torch.float64)
    fix = torch.tensor([1e-6, 0.0, 1.0, 1.5], dtype=torch.float64)
    assert trusted(ref, fix, torch.float16).tolist() == [False, True, True, False]
