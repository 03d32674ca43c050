"""Adversarial inputs: every probe input's candidate values, combined into one batch.

A float input with no known domain gets zeros, ±subnormal and ±tiny of each dtype, ±eps,
±1 and small integers, the exp overflow/underflow edges of each dtype (11.09 in float16,
88.72 in float32, 89 in bfloat16) with values just below and past them, the sigmoid
saturation edges, ±sqrt(max), ±max, every power of ten, and seeded random sweeps across
scales. A known domain (a probability in [0, 1]) bounds the values and adds the points next
to its ends; a constant (`self.k = 50`) is fixed. Inputs that an expression reduces over
(`x.sum(-1)`) are small tensors built from each value in a few patterns (all equal, one
standing out, a decaying ramp, alternating signs, a distribution when the domain is [0, 1]).

Several inputs are combined by a full product when it is small, otherwise by sweeping each
input across its values while the others take a few typical values, a coarse product, equal
values, and seeded random combinations. Everything is float64 here; a context casts it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from .contexts import DTYPES

# Elements in a per-point tensor along each dimension the expression reduces over.
SIDE = 4
MAX_ELEMENTS = 24000  # per input column, all points together
SEED = 20240601


# Roles whose values are floats (generated and differentiated): any tensor, a number per point
# (`linspace`'s start), a symmetric positive definite matrix (what `cholesky` takes).
FLOAT_ROLES = ("float", "scalar", "spd")


def _shape_of(spec: "InputSpec", shape: Tuple[int, ...], index_shape: Tuple[int, ...]) -> Tuple[int, ...]:
    if spec.shape is not None:
        return spec.shape
    if spec.role == "index":
        return index_shape
    if spec.role == "scalar":
        return ()
    return shape


def _spd_matrices(shape: Tuple[int, ...], coarse: bool) -> torch.Tensor:
    """(K, *shape) symmetric positive definite matrices (the last two dims): scaled identities,
    ill-conditioned diagonals and seeded A Aᵀ + δI, at magnitudes from 1e-12 to 1e12."""
    n = shape[-1] if shape else 1
    batch = shape[:-2]
    gen = torch.Generator().manual_seed(SEED)
    scales = [1e-12, 1e-6, 1e-3, 1.0, 10.0, 100.0, 1e4, 1e6, 1e9, 1e12] if not coarse else [1e-6, 1.0, 1e4, 1e9]
    mats = []
    for sc in scales:
        mats.append(torch.eye(n, dtype=torch.float64) * sc)
        mats.append(torch.diag(torch.logspace(0, 6, n, dtype=torch.float64)) * sc / 1e3)
        a = torch.randn(n, n, generator=gen, dtype=torch.float64)
        mats.append((a @ a.T / n + 1e-3 * torch.eye(n, dtype=torch.float64)) * sc)
    out = torch.stack(mats)
    if len(shape) < 2:
        return out[:, 0, 0].reshape((-1,) + tuple(shape)) if shape == () else out[:, 0]
    return out.reshape((out.shape[0],) + (1,) * len(batch) + (n, n)).expand((out.shape[0],) + tuple(batch) + (n, n)).clone()


@dataclass
class InputSpec:
    name: str
    role: str = "float"  # "float" | "bool" | "index"
    value: Optional[float] = None  # a constant from the source
    domain: Optional[Tuple[float, float]] = None
    # What the analysis proved (diagnostics.INPUT_KINDS): "real", "probability", "simplex"
    # (sums to 1 along `dim`), "mask" (0/1), "count" (integer >= 0), "integer".
    kind: str = "real"
    dim: Optional[int] = None
    # The values are bounded by something the code does (the analysis's evidence, a kind, a
    # domain, an operation's contract such as a loss target); otherwise any value is tried
    # and a failure that needs it is only "possible".
    proven: bool = False
    # A mask or count proven never all-zero (a relation `m > 0`): no all-false rows.
    nonzero: bool = False
    # This input's per-point shape when it differs from the others' (found by the shape search).
    shape: Optional[Tuple[int, ...]] = None

    @property
    def differentiable(self) -> bool:
        return self.value is None and self.role in FLOAT_ROLES and self.kind not in ("mask", "count", "integer")

    def describe(self) -> str:
        if self.value is not None and self.role != "float":
            return f"{self.name} = {self.value!r} (where it is used, a {self.role.split(':')[0]})"
        if self.value is not None:
            return f"{self.name} = {_fmt(self.value)} (constant from the source)"
        if self.role == "bool":
            empty = "" if self.nonzero else ", all false"
            return f"{self.name}: masks (all true{empty}, mixed)"
        if self.role == "index":
            return f"{self.name}: class indices"
        if self.role == "spd":
            return (f"{self.name}: symmetric positive definite matrices (what the operation takes), "
                    "scaled identities, ill-conditioned diagonals, A Aᵀ + δI, magnitudes 1e-12 to 1e12")
        if self.kind == "simplex":
            axis = self.dim if self.dim is not None else -1
            return (f"{self.name}: probability rows summing to 1 along dim {axis} (uniform, one-hot, "
                    "peaked with tiny entries, decaying)")
        if self.kind == "mask":
            empty = "" if self.nonzero else ", all 0"
            return f"{self.name}: 0/1 masks (all 1{empty}, mixed, a single 1)"
        if self.kind in ("count", "integer"):
            lo = 1 if self.nonzero else (0 if self.kind == "count" else None)
            where = f">= {lo}" if lo is not None else "of either sign"
            return f"{self.name}: integers {where} (0, 1, small, large)"
        if self.domain is not None:
            lo, hi = self.domain
            return f"{self.name} in [{_fmt(lo)}, {_fmt(hi)}] (its known domain, ends and the points next to them)"
        return (f"{self.name}: full range (0, ±subnormal, ±tiny, ±1, exp overflow/underflow "
                "and sigmoid saturation edges per dtype, ±sqrt(max), ±max, powers of ten, random sweeps)")


@dataclass
class PointSet:
    """N points: for each varying input a float64/bool/int64 tensor of shape (N, *shape)."""

    columns: Dict[str, torch.Tensor]
    constants: Dict[str, float]
    shape: Tuple[int, ...]
    specs: List[InputSpec] = field(default_factory=list)

    @property
    def size(self) -> int:
        for c in self.columns.values():
            return int(c.shape[0])
        return 1

    def describe(self) -> List[str]:
        return [s.describe() for s in self.specs]


def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return str(v)
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.6g}"


def _finfo_facts() -> List[Tuple[float, float, float, float]]:
    out = []
    for dt in DTYPES:
        fi = torch.finfo(dt)
        out.append((float(fi.max), float(fi.tiny), float(fi.eps), float(fi.tiny) * float(fi.eps)))
    return out


def full_range_values() -> List[float]:
    """Magnitudes worth trying when nothing is known about an input (both signs, and 0)."""
    mags = {0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 10.0, 12.0, 15.0, 20.0, 30.0,
            50.0, 100.0, 200.0, 500.0, 1000.0, 1e4, 6e4, 65504.0, 7e4, 1e5}
    mags.update(10.0 ** k for k in range(-45, 39))
    for mx, tiny, eps, sub in _finfo_facts():
        lmax, ltiny, lsub = math.log(mx), math.log(tiny), math.log(sub)
        mags.update([sub, 2 * sub, tiny, tiny * 1.5, eps, eps / 2, eps / 4, 1 + eps, 1 - eps / 2,
                     math.sqrt(tiny), math.sqrt(mx), math.sqrt(mx) * 1.01, mx, mx / 2, mx * (1 - eps)])
        for edge in (lmax, -ltiny, -lsub):
            mags.update(edge + d for d in (-1.0, -0.5, -0.1, -0.01, 0.0, 0.01, 0.1, 0.5, 1.0, 2.0))
        # Where sigmoid rounds to 1 (and its complement to 0): exp(-z) below eps/2.
        sat = math.log(2 / eps)
        mags.update(sat + d for d in (-1.0, -0.25, 0.0, 0.25, 1.0))
    rng = random.Random(SEED)
    mags.update(10.0 ** rng.uniform(-40, 38) for _ in range(96))
    mags.update(rng.uniform(0, 100) for _ in range(32))
    out = {0.0}
    for m in mags:
        if m > 0 and math.isfinite(m):
            out.add(m)
            out.add(-m)
    lin = [i / 4 for i in range(-80, 81)] + [float(i) for i in range(-120, 121, 2)]
    out.update(lin)
    return sorted(out)


def coarse_values() -> List[float]:
    mags = [1e-30, 1e-6, 0.125, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 12.0, 20.0, 50.0, 90.0, 100.0,
            1e4, 7e4, 1e20, 1e38]
    return [0.0] + [m for m in mags] + [-m for m in mags]


def domain_values(lo: float, hi: float) -> List[float]:
    """Values inside [lo, hi]: its ends, the floats next to them in each dtype, a sweep."""
    if math.isinf(lo) or math.isinf(hi):
        base = [v for v in full_range_values() if lo <= v <= hi]
        finite_end = lo if not math.isinf(lo) else (hi if not math.isinf(hi) else None)
        if finite_end is not None:
            sign = 1.0 if not math.isinf(lo) else -1.0
            base += [finite_end + sign * 10.0 ** -k for k in range(1, 46)]
            base += [finite_end + sign * 10.0 ** k for k in range(0, 39)]
        return sorted({v for v in base if lo <= v <= hi})
    vals = {lo, hi, (lo + hi) / 2}
    width = hi - lo
    vals.update(lo + width * i / 64 for i in range(65))
    for k in range(1, 46):
        vals.add(lo + width * 10.0 ** -k)
        vals.add(hi - width * 10.0 ** -k)
    for mx, tiny, eps, sub in _finfo_facts():
        for d in (sub, tiny, eps / 4, eps / 2, eps, 2 * eps):
            vals.add(lo + d)
            vals.add(hi - d)
    rng = random.Random(SEED)
    vals.update(rng.uniform(lo, hi) for _ in range(64))
    return sorted(v for v in vals if lo <= v <= hi and math.isfinite(v))


def coarse_domain_values(lo: float, hi: float) -> List[float]:
    vals = [v for v in domain_values(lo, hi)]
    if len(vals) <= 24:
        return vals
    step = len(vals) / 22
    picked = {vals[0], vals[-1]}
    picked.update(vals[int(i * step)] for i in range(22))
    return sorted(picked)


def _clip(v: float, domain: Optional[Tuple[float, float]]) -> float:
    if domain is None:
        return v
    return min(max(v, domain[0]), domain[1])


def _base(domain: Optional[Tuple[float, float]]) -> float:
    if domain is None or domain[0] <= 0.0 <= domain[1]:
        return 0.0
    return domain[0] if math.isfinite(domain[0]) else domain[1]


def _patterns(v: float, shape: Tuple[int, ...], domain) -> List[List[float]]:
    n = 1
    for s in shape:
        n *= s
    base = _base(domain)
    rows = [
        [v] * n,
        [v] + [base] * (n - 1),
        [_clip(v / (2.0 ** i), domain) for i in range(n)],
        [_clip(v if i % 2 == 0 else -v, domain) for i in range(n)],
    ]
    if domain == (0.0, 1.0):
        rest = (1.0 - v) / (n - 1) if n > 1 else 0.0
        rows.append([v] + [rest] * (n - 1))
    return rows


def _simplex_rows(shape: Tuple[int, ...], dim: int, coarse: bool) -> torch.Tensor:
    """(K, *shape) tensors, non-negative, summing to 1 along `dim`."""
    if not shape:
        return torch.ones(1, dtype=torch.float64)  # a distribution over one class
    if not -len(shape) <= dim < len(shape):
        dim = -1  # the shape search gave this input fewer dims than its axis: the last one
    size = shape[dim]
    tiny = [0.0, 1e-45, 1e-38, 1e-30, 1e-12, 1e-8, 6e-8, 1e-6, 1e-4, 1e-3, 0.01, 0.1]
    if coarse:
        tiny = [0.0, 1e-30, 1e-8, 1e-3, 0.1]
    rows = [[1.0 / size] * size]
    for t in tiny:  # one class takes almost everything, the others `t` each
        rows.append([1.0 - t * (size - 1)] + [t] * (size - 1))
        rows.append([t] * (size - 1) + [1.0 - t * (size - 1)])
    rows.append([2.0 ** -(i + 1) for i in range(size)])
    rows[-1][-1] += 1.0 - sum(rows[-1])
    rows.append([0.5, 0.5] + [0.0] * (size - 2) if size >= 2 else [1.0])
    rows = [r for r in rows if min(r) >= 0.0]
    vec = torch.tensor(rows, dtype=torch.float64)  # (K, size)
    vec = vec / vec.sum(dim=1, keepdim=True)
    if not shape:
        return vec.reshape(-1)
    # Place each row along `dim`, the same row in every other position (and a rolled copy).
    axis = dim % len(shape)
    view = [1] * len(shape)
    view[axis] = size
    out = []
    for r in vec:
        base = r.reshape(view).expand(shape)
        out.append(base)
        out.append(torch.roll(base, shifts=1, dims=axis))
    return torch.stack(out)


def _integer_values(spec: InputSpec, coarse: bool) -> List[float]:
    vals = [0.0, 1.0, 2.0, 3.0, 4.0, 7.0, 10.0, 100.0, 1000.0, 65504.0, 70000.0, 1e6, 2.0 ** 24 + 1]
    if coarse:
        vals = [0.0, 1.0, 2.0, 10.0, 1000.0, 70000.0]
    if spec.kind == "integer":
        vals = sorted({-v for v in vals} | set(vals))
    if spec.nonzero:
        vals = [v for v in vals if v != 0.0]
    if spec.domain is not None:
        lo, hi = spec.domain
        inside = [v for v in vals if lo <= v <= hi]
        if not inside and math.isfinite(lo) and math.ceil(lo) <= hi:
            inside = [float(math.ceil(lo))]
        vals = inside or [lo if math.isfinite(lo) else hi]  # no integer inside: the relations/domains drop it
    return vals


def _candidates(spec: InputSpec, shape: Tuple[int, ...], coarse: bool) -> torch.Tensor:
    """(K, *shape) candidate values for one input."""
    n = 1
    for s in shape:
        n *= s
    if spec.role == "spd":
        return _spd_matrices(shape, coarse)
    if spec.role == "bool" or (spec.kind == "mask" and spec.role == "float"):
        pats = [[True] * n] + ([] if spec.nonzero else [[False] * n])
        if n > 1:
            pats += [[True] + [False] * (n - 1), [False] + [True] * (n - 1),
                     [i % 2 == 0 for i in range(n)]]
        masks = torch.tensor(pats, dtype=torch.bool).reshape(-1, *shape)
        return masks if spec.role == "bool" else masks.to(torch.float64)
    if spec.role == "index":
        classes = SIDE
        pats = [[0] * n, [classes - 1] * n, [i % classes for i in range(n)]]
        return torch.tensor(pats, dtype=torch.int64).reshape(-1, *shape)
    if spec.kind == "simplex":
        return _simplex_rows(shape, spec.dim if spec.dim is not None else -1, coarse)
    if spec.kind in ("count", "integer"):
        ints = _integer_values(spec, coarse)
        if not shape:
            return torch.tensor(ints, dtype=torch.float64)
        rows = []
        for v in ints:
            rows.append([v] * n)
            rows.append([v] + [float(spec.nonzero or spec.kind == "integer")] * (n - 1))
        return torch.tensor(rows, dtype=torch.float64).reshape(-1, *shape)
    if spec.domain is not None:
        lo, hi = float(spec.domain[0]), float(spec.domain[1])
        values = coarse_domain_values(lo, hi) if coarse else domain_values(lo, hi)
    else:
        values = coarse_values() if coarse else full_range_values()
    if not values:
        values = [float(spec.domain[0])] if spec.domain is not None else [0.0]
    if not shape:
        return torch.tensor(values, dtype=torch.float64)
    rows = []
    for v in values:
        rows.extend(_patterns(v, shape, spec.domain))
    return torch.tensor(rows, dtype=torch.float64).reshape(-1, *shape)


def _typical(spec: InputSpec, cand: torch.Tensor, shape) -> torch.Tensor:
    """A few indices into `cand` of ordinary values, for the other inputs of a sweep."""
    if spec.role not in ("float", "scalar") or spec.kind in ("simplex", "mask"):
        return torch.arange(cand.shape[0])
    flat = cand.reshape(cand.shape[0], -1)
    want = [0.0, 1.0, -1.0, 0.5, 2.0]
    if spec.domain is not None:
        lo, hi = spec.domain
        want = [v for v in want if lo <= v <= hi] or [_base(spec.domain)]
        if math.isfinite(lo) and math.isfinite(hi):
            want.append((lo + hi) / 2)
    picks: List[int] = []
    for w in want:
        hits = (flat[:, 0] == w).nonzero().flatten()
        if len(hits):
            picks.append(int(hits[0]))
    return torch.tensor(sorted(set(picks)) or [0])


def make_points(specs: Sequence[InputSpec], shape: Tuple[int, ...], index_shape=(),
                relations: Sequence[Tuple[str, str, str]] = ()) -> PointSet:
    """Combine the inputs' candidates into one batch of points, then enforce the proven
    relations between inputs (`hi >= lo`) by construction."""
    points = _combine(specs, shape, index_shape)
    if relations:
        points = apply_relations(points, relations)
    return points


def _number(text: str) -> Optional[float]:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


_FLIP = {">=": "<=", ">": "<", "<=": ">=", "<": ">", "==": "==", "!=": "!="}


def apply_relations(points: PointSet, relations: Sequence[Tuple[str, str, str]]) -> PointSet:
    """`("hi", ">=", "lo")`: each pair of values is ordered (the larger goes to `hi`);
    `==` copies, `!=` and strict orders drop the points where they fail. A number on the
    right (`("n", ">", "0")`) bounds each element, except for a mask, where it says the mask
    is never all false (each point has a true element). Domains are re-checked after."""
    cols = dict(points.columns)
    specs = {s.name: s for s in points.specs}
    if not cols:
        return points
    n = points.size
    keep = torch.ones(n, dtype=torch.bool)
    for left, op, right in relations:
        a = cols.get(left)
        if a is None:
            continue
        bound = _number(right)
        if bound is not None:
            spec = specs.get(left)
            flat = _rows(a)
            if spec is not None and (spec.role == "bool" or spec.kind == "mask") and op in (">", "!=", ">=") \
                    and bound == 0:
                if op != ">=":
                    keep &= flat.to(torch.float64).abs().sum(dim=1) > 0
                continue
            keep &= _compare(flat.to(torch.float64), op, bound).all(dim=1)
            continue
        b = cols.get(right)
        if b is None or a.shape != b.shape or not (a.is_floating_point() and b.is_floating_point()):
            continue
        if op in ("<=", "<"):
            left, right, a, b, op = right, left, b, a, _FLIP[op]
        if op in (">=", ">"):
            cols[left], cols[right] = torch.maximum(a, b), torch.minimum(a, b)
            if op == ">":
                keep &= _rows(cols[left] > cols[right]).all(dim=1)
        elif op == "==":
            cols[right] = a.clone()
        elif op == "!=":
            keep &= _rows(a != b).all(dim=1)
    for name, col in cols.items():
        spec = specs.get(name)
        if spec is not None and spec.domain is not None and col.is_floating_point():
            lo, hi = spec.domain
            keep &= _rows((col >= lo) & (col <= hi)).all(dim=1)
    rows = keep.nonzero().flatten()
    return PointSet({k: v[rows] for k, v in cols.items()}, points.constants, points.shape, points.specs)


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], math.prod(t.shape[1:]))


def _compare(t: torch.Tensor, op: str, bound: float) -> torch.Tensor:
    return {">=": t >= bound, ">": t > bound, "<=": t <= bound, "<": t < bound,
            "==": t == bound, "!=": t != bound}[op]


def _combine(specs: Sequence[InputSpec], shape: Tuple[int, ...], index_shape=()) -> PointSet:
    """Combine the inputs' candidates into one batch of points."""
    constants = {s.name: (float(s.value) if s.role == "float" else s.value) for s in specs if s.value is not None}
    varying = [s for s in specs if s.value is None]
    shapes = {s.name: _shape_of(s, shape, index_shape) for s in varying}
    if not varying:
        return PointSet({}, constants, shape, list(specs))
    per_point = max(1, math.prod(shape) if shape else 1)
    budget = max(256, MAX_ELEMENTS // per_point)
    full = {s.name: _candidates(s, shapes[s.name], coarse=False) for s in varying}
    sizes = [full[s.name].shape[0] for s in varying]
    if math.prod(sizes) <= budget:
        grids = torch.meshgrid(*[torch.arange(k) for k in sizes], indexing="ij")
        idx = {s.name: g.reshape(-1) for s, g in zip(varying, grids)}
        cols = {s.name: full[s.name][idx[s.name]] for s in varying}
        return PointSet(cols, constants, shape, list(specs))

    gen = torch.Generator().manual_seed(SEED)
    parts: Dict[str, List[torch.Tensor]] = {s.name: [] for s in varying}

    def add(values: Dict[str, torch.Tensor]) -> None:
        for s in varying:
            parts[s.name].append(values[s.name])

    # (a) each input across all its values, the others at typical values.
    typical = {s.name: _typical(s, full[s.name], shapes[s.name]) for s in varying}
    share = max(64, budget // (2 * len(varying)))
    for s in varying:
        others = [o for o in varying if o is not s]
        per_value = math.prod(len(typical[o.name]) for o in others)
        held = {o.name: typical[o.name] for o in others}
        if 2 * per_value > share:  # many inputs: the others each hold one typical value
            held = {o.name: typical[o.name][:1] for o in others}
            per_value = 1
        own = torch.arange(full[s.name].shape[0])
        if len(own) * per_value > share:
            keep = max(2, share // per_value)
            own = torch.linspace(0, len(own) - 1, keep).round().long().unique()
        combos = torch.meshgrid(own, *[held[o.name] for o in others], indexing="ij")
        vals = {s.name: full[s.name][combos[0].reshape(-1)]}
        for o, c in zip(others, combos[1:]):
            vals[o.name] = full[o.name][c.reshape(-1)]
        add(vals)
    # (b) a coarse product.
    coarse = {s.name: _candidates(s, shapes[s.name], coarse=True) for s in varying}
    limit = int((budget // 3) ** (1.0 / len(varying)))
    if limit >= 2:  # with many inputs even two values each would be too many points
        picked = {}
        for s in varying:
            c = coarse[s.name]
            if c.shape[0] > limit:
                sel = torch.linspace(0, c.shape[0] - 1, limit).round().long()
                c = c[sel]
            picked[s.name] = c
        grids = torch.meshgrid(*[torch.arange(picked[s.name].shape[0]) for s in varying], indexing="ij")
        add({s.name: picked[s.name][g.reshape(-1)] for s, g in zip(varying, grids)})
    # (c) the same value for every input of the same candidates (x == y).
    float_inputs = [s for s in varying if s.role in FLOAT_ROLES]
    if len(float_inputs) > 1 and len({(s.domain, s.kind, shapes[s.name]) for s in float_inputs}) == 1:
        k = full[float_inputs[0].name].shape[0]
        vals = {s.name: full[s.name] for s in float_inputs}
        for s in varying:
            if s.role not in FLOAT_ROLES:
                vals[s.name] = full[s.name][torch.zeros(k, dtype=torch.long)]
        add(vals)
    # (d) seeded random combinations.
    used = sum(p.shape[0] for p in parts[varying[0].name])
    n_random = max(512, budget - used)
    add({s.name: full[s.name][torch.randint(full[s.name].shape[0], (n_random,), generator=gen)]
         for s in varying})
    cols = {name: torch.cat(ps) for name, ps in parts.items()}
    return PointSet(cols, constants, shape, list(specs))


def point_shape(elementwise: bool, rank: int) -> Tuple[int, ...]:
    return () if elementwise else (SIDE,) * rank


def index_shape(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """Class indices for points of `shape`: one per row (the last dimension is the classes)."""
    return tuple(shape[:-1])


def trial_points(specs: Sequence[InputSpec], shape: Tuple[int, ...], index_shape: Tuple[int, ...],
                 n: int) -> PointSet:
    """A few ordinary points (the coarse candidates' first rows, side by side) to learn
    whether an expression runs at all on inputs of this shape: cheap, unlike make_points."""
    constants = {s.name: (float(s.value) if s.role == "float" else s.value) for s in specs if s.value is not None}
    cols = {}
    for s in specs:
        if s.value is not None:
            continue
        cand = _candidates(s, _shape_of(s, shape, index_shape), coarse=True)
        picks = torch.linspace(0, cand.shape[0] - 1, min(n, cand.shape[0])).round().long()
        rows = cand[picks]
        if rows.shape[0] < n:
            rows = rows[torch.arange(n) % rows.shape[0]]
        cols[s.name] = rows
    return PointSet(cols, constants, shape, list(specs))
