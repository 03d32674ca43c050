"""Verify an expression probe: original and fix on adversarial inputs in every context.

Per context and point (forward output and each input's gradient separately):
- the original fails where it is NaN/Inf although a float64 reference is finite and
  representable: its own float64 value ("rounding"), or else, where its own float64 value
  is NaN/Inf too, the fix's ("singular": the expression as written is undefined there, the
  fix defines it). A true value that merely overflows the dtype is no failure.
  Representable means in the wider of the two output dtypes: a fix that upcasts to float32
  claims the value is needed there;
- the fix fails where it is NaN/Inf although its own float64 value is representable in its
  output dtype, or the original's is while the fix's float64 value is NaN/Inf. A fix failure
  counts against the fix only at points where the original was entirely finite and no input
  exceeds EXTREME in magnitude (elsewhere both are broken, or the inputs are beyond what a
  model produces; such points are reported, not held against the fix);
- accuracy: error in bits (Herbie's measure) where the reference is reliable (see
  evaluate.trusted) and no input is subnormal. The original fails on accuracy where it loses
  at least half the significand and the fix is accurate at the same point. The fix must
  agree with float64 in plain float32 (no autocast) at 95% of the reliable points: within
  half the significand (12 bits), or no more than 1 bit worse than the original (below 99%,
  a note names where it is less accurate: a wrong formula disagrees almost everywhere,
  a kernel's cancellation in a corner does not). Half
  precision is not held to a bit count: there every formula's rounding differs by several
  bits on ill-conditioned outputs, and NaN/Inf is what matters. A fix that changes values on
  purpose (an unsafe fix, such as a clamp) is judged only where the original was accurate.

Verdict: fix-failed if the fix fails anywhere it counts (or raises where the original ran, or
disagrees); confirmed if the original fails somewhere the fix holds; fix-failed if the
original fails only where the fix fails too; otherwise not-reproduced.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Tuple

import torch

from ..core.diagnostics import Probe
from . import contexts as C
from .evaluate import (
    FALLBACK_POINTS,
    Run,
    bits_of_error,
    expand_points,
    per_point,
    representable,
    rows as point_rows,
    run_program,
    single_threaded,
    subnormal,
    trusted,
)
from .budget import MAX_INPUTS, Budget, BudgetExceeded
from .evaluate import RUNTIME_ROLES
from .inputs import SIDE, InputSpec, PointSet, index_shape, make_points, point_shape, trial_points
from .sandbox import CheckedExpression, Interpreter, Refused, check_expression
from .verdict import (
    ACCURACY,
    CONFIRMED,
    FIX_FAILED,
    KIND_ORDER,
    NOT_REPRODUCED,
    NOT_VERIFIABLE,
    POSSIBLE,
    ROUNDING,
    SINGULAR,
    ContextOutcome,
    SideStats,
    Verification,
    Witness,
    bits_text,
    fmt_number,
    fmt_value,
    not_verifiable,
)

AGREE_SHARE = 0.95  # the fix must be within the bound at this share of reliable points
NOTE_SHARE = 0.99  # below this share, a note says where the fix is less accurate
EXTREME = 1e4  # fix failures at inputs larger than this are reported, not held against it


@dataclass
class Batch:
    """The points as one input dtype sees them (rounded; rows that overflow it dropped)."""

    dtype: torch.dtype
    columns: Dict[str, torch.Tensor]
    columns64: Dict[str, torch.Tensor]
    magnitude: torch.Tensor  # (N,) largest |value| of the varying float inputs, per point
    subnormal: torch.Tensor  # (N,) some float input is subnormal in this dtype
    degenerate: torch.Tensor  # (N,) some float input element is 0 or subnormal


@dataclass
class Candidate:
    key: Tuple
    witness: Witness


@dataclass
class Prepared:
    """A probe checked and ready to run (shared with the report's sweep)."""

    original: CheckedExpression
    fixed: Optional[CheckedExpression]
    program_o: Interpreter
    program_f: Optional[Interpreter]
    specs: List[InputSpec]
    shape: Tuple[int, ...]
    mode: str
    grad_inputs: List[str] = field(default_factory=list)
    exact: bool = True  # the fix is exact in real arithmetic (a safe fix)
    relations: Tuple[Tuple[str, str, str], ...] = ()  # proven relations between inputs
    # A form rule's finding: "confirmed" means the original fails at inputs of its dtype where
    # the stable function is finite; whether the code's inputs reach there is said beside it.
    form: bool = False


def prepare_probe(probe: Probe, exact: bool = True) -> Prepared:
    """Check both expressions (raises Refused) and describe their inputs."""
    if probe.original is None:
        raise Refused("the probe has no original expression")
    declared = [i.name for i in probe.inputs]
    original = check_expression(probe.original, declared)
    fixed = check_expression(probe.fixed, declared) if probe.fixed else None
    names = list(original.inputs)
    roles = dict(original.roles)
    implied = dict(original.implied_domains)
    if fixed is not None:
        for n in fixed.inputs:
            if n not in names:
                names.append(n)
            if fixed.roles.get(n, "float") != "float":
                roles[n] = fixed.roles[n]
        for n, d in fixed.implied_domains.items():
            implied.setdefault(n, d)
    info = {i.name: i for i in probe.inputs}
    nonzero = {r[0] for r in probe.relations if r[1] in (">", "!=") and _is_zero(r[2])}
    specs: List[InputSpec] = []
    for n in names:
        pi = info.get(n)
        role = roles.get(n, "float")
        value = pi.value if pi is not None else None
        given = _domain(pi.domain if pi is not None else None, n)
        domain = given or implied.get(n)
        kind = pi.kind if pi is not None else "real"
        if kind == "probability":
            domain = _intersect(domain, (0.0, 1.0), n)
        if value is not None:
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(float(value)):
                raise Refused(f"constant for {n} is not a finite number")
            if role != "float" and role not in STRUCTURAL_DEFAULTS:
                value = None  # a mask or an index is generated, whatever the source said
        if role in RUNTIME_ROLES:
            continue  # each run supplies it (evaluate.run_program)
        if role in STRUCTURAL_DEFAULTS:
            specs.append(InputSpec(n, role, _structural(role, value), None, proven=True))
            continue
        proven = (value is not None or given is not None or n in implied or role in ("index", "spd")
                  or kind != "real" or bool(pi is not None and pi.evidence))
        specs.append(InputSpec(n, role, float(value) if value is not None else None, domain, kind=kind,
                               dim=pi.dim if pi is not None else None, proven=proven, nonzero=n in nonzero))
    varying = [s for s in specs if s.value is None]
    if len(varying) > MAX_INPUTS:
        raise Refused(f"{len(varying)} varying inputs (at most {MAX_INPUTS} are combined)")
    elementwise = original.elementwise and (fixed is None or fixed.elementwise)
    rank = max(original.rank, fixed.rank if fixed is not None else 1)
    if any(s.role == "index" for s in specs):
        rank = max(rank, 2)  # class indices: a batch of rows, one target per row
    for spec in varying:
        if spec.kind == "simplex":  # a distribution needs the axis it sums along
            elementwise = False
            d = spec.dim if spec.dim is not None else -1
            if abs(d) > 3:
                raise Refused(f"simplex dim {d} of {spec.name} is beyond the ranks tried")
            rank = max(rank, d + 1 if d >= 0 else -d)
    budget = Budget()
    return Prepared(
        original=original,
        fixed=fixed,
        program_o=Interpreter(original, budget=budget),
        program_f=Interpreter(fixed, budget=budget) if fixed is not None else None,
        specs=specs,
        shape=point_shape(elementwise, rank),
        mode="flat" if elementwise else "vmap",
        grad_inputs=[s.name for s in specs if s.differentiable],
        exact=exact,
        relations=tuple(probe.relations),
    )


# Inputs in structural positions get one plausible value: an integer size (one side of the
# generated tensors), the last dim, the first branch of a conditional, a loss's default mode.
STRUCTURAL_DEFAULTS = {"size": SIDE, "dim": -1, "flag": True, "string:reduction": "mean",
                       "string:mode": "constant"}


def _structural(role: str, value: Optional[float]) -> Any:
    if value is not None and role == "size" and float(value).is_integer() and 1 <= value <= 64:
        return int(value)
    if value is not None and role == "dim" and float(value).is_integer() and -3 <= value <= 2:
        return int(value)
    if value is not None and role == "flag":
        return bool(value)
    return STRUCTURAL_DEFAULTS[role]


def _is_zero(text: str) -> bool:
    try:
        return float(text) == 0.0
    except (TypeError, ValueError):
        return False


def _intersect(domain, unit, name) -> Tuple[float, float]:
    if domain is None:
        return unit
    lo, hi = max(domain[0], unit[0]), min(domain[1], unit[1])
    if lo > hi:
        raise Refused(f"domain of {name} does not meet [0, 1] although it is a probability")
    return (lo, hi)


def _domain(raw, name) -> Optional[Tuple[float, float]]:
    if raw is None:
        return None
    try:
        lo, hi = float(raw[0]), float(raw[1])
    except (TypeError, ValueError, IndexError):
        raise Refused(f"domain of {name} is not a pair of numbers") from None
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise Refused(f"domain of {name} is not an interval")
    return (lo, hi)


def make_batch(points: PointSet, dtype: torch.dtype, device: str, grad_inputs) -> Batch:
    n = points.size
    keep = torch.ones(n, dtype=torch.bool)
    cast = {}
    for name, col in points.columns.items():
        if col.is_floating_point():
            c = col.to(dtype)
            keep &= ~per_point(~torch.isfinite(c))
            cast[name] = c
        else:
            cast[name] = col
    rows = keep.nonzero().flatten()
    columns = {k: v[rows].to(device) for k, v in cast.items()}
    columns64 = {k: (v.to(torch.float64) if v.is_floating_point() else v) for k, v in columns.items()}
    mags = [columns64[k].abs().reshape(len(rows), -1).amax(dim=1) for k in grad_inputs
            if k in columns64 and len(rows)]
    magnitude = (torch.stack(mags).amax(dim=0) if mags
                 else torch.zeros(len(rows), dtype=torch.float64, device=device))
    sub = torch.zeros(len(rows), dtype=torch.bool, device=device)
    zero = torch.zeros(len(rows), dtype=torch.bool, device=device)
    for k, v in columns.items():
        if v.is_floating_point():
            sub |= per_point(subnormal(v))
            if k in grad_inputs:
                zero |= per_point(v == 0)
    return Batch(dtype, columns, columns64, magnitude, sub, sub | zero)


def _value(t: torch.Tensor) -> Any:
    if t.dim() == 0:
        v = t.item()
        return float(v) if t.is_floating_point() else v
    return [_value(x) for x in t]


def verify_expression(probe: Probe, device: str, want_sweep: bool = False,
                      exact: bool = True, form: bool = False) -> Verification:
    """`exact`: the fix is exact in real arithmetic (the rule's fix is safe). `form`: a form
    rule's finding, confirmed by a failure at any input of its dtype; where the inputs the
    analysis proved (a domain, a kind) show none, they are widened to the whole dtype once,
    and the verdict says that the code's inputs were not shown to reach the failure."""
    result = _verify_expression(probe, device, want_sweep, exact, form)
    if form and result.verdict == NOT_REPRODUCED and _restricted(probe):
        widened = _verify_expression(_widened(probe), device, want_sweep, exact, form)
        if widened.verdict == CONFIRMED:
            widened.reason = (f"{widened.reason}; with the inputs the code produces "
                              f"({'; '.join(result.ranges)}) it held: reach not shown")
            widened.notes = result.notes + widened.notes
            return widened
    return result


def _restricted(probe: Probe) -> bool:
    """Some input of the probe is drawn from a proven domain or kind, not the whole dtype."""
    return any(i.domain is not None or i.kind != "real" for i in probe.inputs) or bool(probe.relations)


def _widened(probe: Probe) -> Probe:
    """The probe with every input free over its dtype (constants kept)."""
    return replace(probe, relations=(), inputs=tuple(
        replace(i, domain=None, kind="real", dim=None, evidence="") for i in probe.inputs))


def _verify_expression(probe: Probe, device: str, want_sweep: bool, exact: bool,
                       form: bool) -> Verification:
    start = time.perf_counter()
    try:
        prepared = prepare_probe(probe, exact)
    except Refused as exc:
        return not_verifiable(f"refused without running it: {exc}", device)
    prepared.form = form
    if not any(s.value is None for s in prepared.specs):
        return not_verifiable("the expression has no input to vary", device)
    prepared.program_o.budget.arm()
    try:
        with single_threaded(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's UserWarnings on adversarial inputs (std of one)
            _choose_shape(prepared, device)
            points = make_points(prepared.specs, prepared.shape, index_shape(prepared.shape),
                                 prepared.relations)
            if points.columns and points.size == 0:
                return not_verifiable("refused: no input point satisfies the probe's relations and domains",
                                      device)
            result = _verify_points(prepared, points, device)
    except BudgetExceeded as exc:
        return not_verifiable(f"refused: {exc}", device)
    except MemoryError:
        return not_verifiable("refused: ran out of memory", device)
    with single_threaded(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if result.verdict != NOT_VERIFIABLE and want_sweep:
            from .sweep import build_sweep

            try:
                result.sweep = build_sweep(prepared, result, device)
            except Exception as exc:  # noqa: BLE001 - a plot must never cost the verdict
                result.sweep = {"error": f"{type(exc).__name__}: {exc}"}
    result.seconds = time.perf_counter() - start
    return result


SHAPE_TRIAL_POINTS = 4


def _trial(p: Prepared, shape: Tuple[int, ...], mode: str, device: str) -> Optional[str]:
    """Whether original and fix run (float64, a few ordinary points) on inputs of this
    per-point shape: vectorized, or else one point at a time (a boolean mask's selection
    has a shape that depends on the values)."""
    points = trial_points(p.specs, shape, index_shape(shape), SHAPE_TRIAL_POINTS)
    batch = make_batch(points, torch.float32, device, p.grad_inputs)
    error = None
    for how in ((mode, "loop") if mode == "vmap" else (mode,)):
        error = None
        for program in (p.program_o, p.program_f):
            if program is None:
                continue
            r = run_program(program.for_reference(torch.float32), how, batch.columns64, points.constants, None,
                            p.grad_inputs)
            if r.error is not None:
                error = r.error
                break
        if error is None:
            return None
    return error


def _choose_shape(p: Prepared, device: str) -> None:
    """Ranks come from how the probe uses its inputs (dims, indexing, permute, .shape[k]); when
    they are not enough to run it (`x[0].shape[-1]`, a reshape to two sizes), search the small
    shapes: each rank up to 3, `SIDE` elements per dimension."""
    if _trial(p, p.shape, p.mode, device) is None:
        return
    for rank in (1, 2, 3):
        shape = point_shape(False, rank)
        if shape == p.shape:
            continue
        if _trial(p, shape, "vmap", device) is None:
            p.shape, p.mode = shape, "vmap"
            return
    # One input a rank lower than the others (`m.unsqueeze(-1).expand_as(x)` with m a max of x).
    varying = [s for s in p.specs if s.value is None and s.role in ("float", "bool", "index")]
    if len(varying) < 2:
        return
    for rank in (2, 3):
        shape = point_shape(False, rank)
        for spec in varying:
            lower = len(index_shape(shape)) if spec.role == "index" else rank
            for k in range(lower - 1, -1, -1):
                spec.shape = shape[:k]
                if _trial(p, shape, "vmap", device) is None:
                    p.shape, p.mode = shape, "vmap"
                    return
            spec.shape = None


def _verify_points(p: Prepared, points: PointSet, device: str) -> Verification:
    contexts = C.contexts_for(device)
    batches: Dict[torch.dtype, Batch] = {dt: make_batch(points, dt, device, p.grad_inputs) for dt in C.DTYPES}

    def run(program, batch: Batch, ctx, reference: bool) -> Run:
        if reference:
            return run_program(program.for_reference(batch.dtype), p.mode, batch.columns64,
                               points.constants, None, p.grad_inputs)
        return run_program(program, p.mode, batch.columns, points.constants, ctx, p.grad_inputs)

    empty = {dt for dt, b in batches.items() if b.magnitude.shape[0] == 0}
    if torch.float32 in empty:
        return not_verifiable("refused: no point of the inputs' domains is finite in float32", device)
    # Float64 references (no autocast) per input dtype; vmap trouble -> loop on a subsample.
    probe_run = run(p.program_o, batches[torch.float32], None, True)
    if probe_run.error and p.mode == "vmap":
        p.mode = "loop"
        points = _subsample(points, FALLBACK_POINTS)
        batches = {dt: make_batch(points, dt, device, p.grad_inputs) for dt in C.DTYPES}
        probe_run = run(p.program_o, batches[torch.float32], None, True)
    if probe_run.error:
        return not_verifiable(f"the original does not run: {probe_run.error}", device)
    refs: Dict[torch.dtype, Tuple[Run, Optional[Run]]] = {}
    for dtype in C.DTYPES:
        if dtype in empty:
            continue
        ref_o = probe_run if dtype == torch.float32 else run(p.program_o, batches[dtype], None, True)
        ref_f = run(p.program_f, batches[dtype], None, True) if p.program_f is not None else None
        refs[dtype] = (ref_o, ref_f)
    ref_f32 = refs[torch.float32][1]
    if ref_f32 is not None and ref_f32.error:
        return not_verifiable(f"the fix does not run: {ref_f32.error}", device)
    if ref_f32 is not None and ref_f32.out.shape != probe_run.out.shape:
        return not_verifiable(
            f"original and fix give different shapes ({tuple(probe_run.out.shape[1:])} vs "
            f"{tuple(ref_f32.out.shape[1:])} per point)", device)

    outcomes: List[ContextOutcome] = []
    found = _Found()
    if p.exact and p.program_f is not None:
        _same_function(p, batches[torch.float32], probe_run, ref_f32, found)
    for index, ctx in enumerate(contexts):
        batch = batches[ctx.dtype]
        if ctx.dtype in empty:
            why = f"no point of the inputs' domains is finite in {C.dtype_name(ctx.dtype)}"
            outcomes.append(ContextOutcome(ctx.to_json(), ctx.name, 0, SideStats(error=why),
                                           SideStats(error=why) if p.program_f is not None else None))
            continue
        ref_o, ref_f = refs[ctx.dtype]
        ro = run(p.program_o, batch, ctx, False)
        rf = run(p.program_f, batch, ctx, False) if p.program_f is not None else None
        outcomes.append(_context(p, ctx, index, batch, ro, rf, ref_o, ref_f, found))
    return _decide(p, points, outcomes, found, device)


@dataclass
class _Found:
    """Witness candidates gathered over the contexts."""

    confirming: List[Candidate] = field(default_factory=list)  # original fails, fix holds
    introduced: List[Candidate] = field(default_factory=list)  # fix fails, original was finite
    shared: List[Candidate] = field(default_factory=list)  # both fail at the point (fix side)
    shared_original: List[Candidate] = field(default_factory=list)
    extreme: List[Candidate] = field(default_factory=list)  # fix fails only at huge inputs
    less_accurate: List[Candidate] = field(default_factory=list)  # fix worse at a few points
    less_accurate_share: float = 1.0
    # Finite but much less accurate than the original (a value or gradient flushed to 0 where
    # the original tracks float64), per context name: candidates and the inputs' span.
    fix_worse: Dict[str, List[Candidate]] = field(default_factory=dict)
    fix_worse_span: Dict[str, "_Worse"] = field(default_factory=dict)


@dataclass
class _Worse:
    """Where, in one context, the fix is finite but less accurate than the original: the
    inputs' magnitudes, the largest |float64 value| there, and the dtype the bits count in."""

    lo: float
    hi: float
    reference: float
    dtype: torch.dtype


@dataclass
class _Fail:
    where: str
    wrt: Optional[str]
    kind: str
    rows: torch.Tensor  # (N,)
    values: torch.Tensor
    reference: torch.Tensor


SAME_SHARE = 0.95  # an exact fix equals the original in float64 at this share of ordinary points
# Input magnitudes where float64 evaluates these formulas to ~1e-12 (beyond, `1 - sigmoid(z)`
# cancels in float64 too, and `binary_cross_entropy` clamps its log at -100 by design).
ORDINARY = (1e-3, 10.0)


def _same_function(p: Prepared, batch: Batch, ref_o: Run, ref_f: Run, found: "_Found") -> None:
    """An exact fix computes the same function as the original: in float64, at points whose
    inputs are 0 or of ordinary magnitude, their values (and gradients) agree closely. A fix
    that disagrees at most of them computes something else (a sign, a dimension, a factor)."""
    n = batch.magnitude.shape[0]
    ordinary = torch.ones(n, dtype=torch.bool, device=batch.magnitude.device)
    for k in p.grad_inputs:
        col = batch.columns64.get(k)
        if col is None:
            continue
        a = point_rows(col.abs())
        ok = (a == 0) | ((a >= ORDINARY[0]) & (a <= ORDINARY[1]))
        ordinary &= ok.all(dim=1)
    pairs = [("forward", None, ref_o.out, ref_f.out)]
    pairs += [("gradient", k, ref_o.grads[k], ref_f.grads[k]) for k in ref_o.grads if k in ref_f.grads]
    for where, wrt, a, b in pairs:
        if a.shape != b.shape:
            continue
        both = torch.isfinite(a) & torch.isfinite(b) & expand_points(ordinary, a)
        both &= (a.abs() < 1e30) & (b.abs() < 1e30)
        close = (a - b).abs() <= 1e-6 * torch.maximum(a.abs(), b.abs()) + 1e-12
        rows_both = per_point(both)
        if int(rows_both.sum()) < 8:
            continue
        differs = per_point(both & ~close)
        share = 1.0 - float(differs[rows_both].double().mean())
        if share < SAME_SHARE:
            mags = torch.where(differs, batch.magnitude, torch.full_like(batch.magnitude, math.inf))
            row = int(torch.argmin(mags))
            flat_a, flat_b = a[row].reshape(-1), b[row].reshape(-1)
            bad = (both[row].reshape(-1) & ~close[row].reshape(-1)).nonzero().flatten()
            j = int(bad[0]) if len(bad) else 0
            inputs = {s.name: (s.value if s.value is not None else _value(batch.columns[s.name][row].cpu()))
                      for s in p.specs}
            what = "value" if where == "forward" else f"gradient w.r.t. {wrt}"
            text = (f"a different function: at {', '.join(f'{k}={fmt_value(v)}' for k, v in inputs.items())} "
                    f"float64 gives the original's {what} {fmt_number(float(flat_a[j]))} and the fix's "
                    f"{fmt_number(float(flat_b[j]))} (they differ at {fmt_number(round(100 * (1 - share), 1))}% "
                    f"of ordinary points)")
            w = Witness("fix", ACCURACY, where, inputs, "float64", batch.magnitude.device.type, wrt=wrt,
                        result=float(flat_b[j]), reference=float(flat_a[j]), text=text)
            found.introduced.append(Candidate((-2, False, 0.0, -1, 0), w))
            return


def _wider(a: torch.dtype, b: Optional[torch.dtype]) -> torch.dtype:
    if b is None or not b.is_floating_point:
        return a
    return b if torch.finfo(b).max > torch.finfo(a).max else a


def _failures(r: Run, ref_o: Run, ref_f: Optional[Run], fix: bool,
              other_dtype: Optional[torch.dtype] = None) -> List[_Fail]:
    fails: List[_Fail] = []
    usable_f = ref_f is not None and ref_f.error is None

    def classify(values, ref_o_t, ref_f_t, where, wrt, wide):
        dtype = values.dtype
        bad = ~torch.isfinite(values)
        if fix:
            ok_f = representable(ref_f_t, dtype) if ref_f_t is not None else representable(ref_o_t, dtype)
            undefined_f = ~torch.isfinite(ref_f_t) if ref_f_t is not None else torch.zeros_like(bad)
            ok_o = representable(ref_o_t, dtype)
            fails.append(_Fail(where, wrt, ROUNDING, per_point(bad & (ok_f | (ok_o & undefined_f))),
                               values, ref_o_t))
        else:
            ok_o = representable(ref_o_t, wide)
            ok_f = representable(ref_f_t, wide) if ref_f_t is not None else torch.zeros_like(ok_o)
            undefined_o = ~torch.isfinite(ref_o_t)  # NaN/Inf as written, not just too large
            fails.append(_Fail(where, wrt, ROUNDING, per_point(bad & ok_o), values, ref_o_t))
            fails.append(_Fail(where, wrt, SINGULAR, per_point(bad & undefined_o & ok_f), values, ref_o_t))

    if ref_o.out.shape == r.out.shape:
        f_out = ref_f.out if usable_f and ref_f.out.shape == r.out.shape else None
        classify(r.out, ref_o.out, f_out, "forward", None, _wider(r.out.dtype, other_dtype))
    for k, g in r.grads.items():
        gref_o = ref_o.grads.get(k)
        if gref_o is None or gref_o.shape != g.shape:
            continue
        gref_f = ref_f.grads.get(k) if usable_f else None
        classify(g, gref_o, gref_f if gref_f is not None and gref_f.shape == g.shape else None,
                 "gradient", k, g.dtype)
    return fails


def _union(fails: List[_Fail], where: str, n: int, device) -> torch.Tensor:
    out = torch.zeros(n, dtype=torch.bool, device=device)
    for f in fails:
        if f.where == where:
            out |= f.rows
    return out


def _context(p: Prepared, ctx, index: int, batch: Batch, ro: Run, rf: Optional[Run], ref_o: Run,
             ref_f: Optional[Run], found: _Found) -> ContextOutcome:
    n = batch.magnitude.shape[0]
    device = batch.magnitude.device
    o_stats = SideStats(error=ro.error)
    f_stats = SideStats(error=rf.error) if rf is not None else None
    outcome = ContextOutcome(ctx.to_json(), ctx.name, n, o_stats, f_stats)
    setting = dict(batch=batch, ctx=ctx, index=index, p=p)
    if ref_o.error is not None:
        o_stats.error = o_stats.error or f"float64 reference: {ref_o.error}"
        return outcome
    if rf is not None and rf.error is not None and ro.error is None:
        found.introduced.append(Candidate((-1, False, 0.0, index, 0), Witness(
            "fix", "error", "forward", {}, C.dtype_name(ctx.dtype), ctx.device,
            C.dtype_name(ctx.autocast) if ctx.autocast else None, note=f"raises {rf.error}")))
    if ro.error is not None:
        return outcome
    fixed_ok = rf is not None and rf.error is None
    o_fails = _failures(ro, ref_o, ref_f, fix=False, other_dtype=rf.out.dtype if fixed_ok else None)
    f_fails = _failures(rf, ref_o, ref_f, fix=True) if fixed_ok else []
    # Points where the original is already non-finite somewhere (output or a gradient).
    poisoned = per_point(~torch.isfinite(ro.out))
    for g in ro.grads.values():
        poisoned |= per_point(~torch.isfinite(g))
    extreme = batch.magnitude > EXTREME
    shared_total = torch.zeros(n, dtype=torch.bool, device=device)
    confirming = torch.zeros(n, dtype=torch.bool, device=device)
    for where in ("forward", "gradient"):
        o_rows = _union(o_fails, where, n, device)
        f_rows = _union(f_fails, where, n, device)
        shared_total |= o_rows & f_rows
        confirming |= o_rows & ~f_rows
        for f in o_fails:
            if f.where == where:
                _add(found.confirming, f.rows & ~f_rows, f, which="original", **setting)
                _add(found.shared_original, f.rows & f_rows, f, which="original", **setting)
        for f in f_fails:
            if f.where == where:
                _add(found.introduced, f.rows & ~poisoned & ~extreme, f, which="fix", **setting)
                _add(found.extreme, f.rows & ~poisoned & extreme, f, which="fix", **setting)
                _add(found.shared, f.rows & o_rows, f, which="fix", **setting)
        if where == "forward":
            o_stats.forward_failures = int(o_rows.sum())
            o_stats.singular = int(_union([f for f in o_fails if f.kind == SINGULAR], where, n, device).sum())
            if f_stats is not None:
                f_stats.forward_failures = int(f_rows.sum())
        else:
            o_stats.gradient_failures = int(o_rows.sum())
            if f_stats is not None:
                f_stats.gradient_failures = int(f_rows.sum())
    outcome.shared = int(shared_total.sum())
    outcome.confirming = int(confirming.sum())

    # Accuracy, where the float64 reference is reliable and no input is subnormal.
    plain = ~batch.subnormal
    out_o = ro.out
    usable_f = ref_f is not None and ref_f.error is None
    # Accuracy is measured in the context's dtype (never more bits than its significand).
    dt_o = C.measure_dtype(ctx.dtype, ctx.autocast, out_o.dtype)
    bits_o = bits_of_error(out_o, ref_o.out, dt_o)
    rel_o = trusted(ref_o.out, ref_f.out if usable_f else None, dt_o)
    measured_o = rel_o & torch.isfinite(bits_o) & expand_points(plain, out_o)
    _fill_bits(o_stats, bits_o, measured_o)
    if not (fixed_ok and rf.out.shape == out_o.shape):
        return outcome
    out_f = rf.out
    dt_f = C.measure_dtype(ctx.dtype, ctx.autocast, out_f.dtype)
    bits_f = bits_of_error(out_f, ref_o.out, dt_f)
    rel_f = trusted(ref_o.out, ref_f.out if usable_f else None, dt_f)
    measured_f = rel_f & torch.isfinite(bits_f) & expand_points(plain, out_f)
    _fill_bits(f_stats, bits_f, measured_f)
    bound = C.agreement_bits(dt_f)
    outcome.agreement_bits = bound
    judged = measured_f
    if not p.exact:
        # A fix that changes values on purpose is judged where the original was accurate.
        judged = judged & torch.isfinite(bits_o) & (bits_o < C.accuracy_failure_bits(dt_o))
    if judged.any():
        slack = torch.where(torch.isfinite(bits_o), bits_o + 1.0, torch.zeros_like(bits_o))
        agree = (bits_f <= bound) | (bits_f <= slack)
        f_stats.agree_fraction = round(float(agree[judged].double().mean()), 5)
        decides = ctx.dtype == torch.float32 and ctx.autocast is None
        if decides and f_stats.agree_fraction < NOTE_SHARE:
            worst = torch.where(judged & ~agree, bits_f, torch.full_like(bits_f, -1.0))
            worst_rows = point_rows(worst).amax(dim=1) > 0
            fail = _Fail("forward", None, ACCURACY, worst_rows, out_f, ref_o.out)
            target = found.introduced if f_stats.agree_fraction < AGREE_SHARE else found.less_accurate
            _add(target, worst_rows, fail, which="fix", bits=worst, **setting)
            found.less_accurate_share = f_stats.agree_fraction
    if p.exact:
        _fix_less_accurate(p, ctx, index, batch, ro, rf, ref_o, ref_f if usable_f else None, plain, found)
    acc = (measured_o & (bits_o >= C.accuracy_failure_bits(dt_o))
           & (bits_f <= C.accurate_bits(dt_f)) & torch.isfinite(bits_f))
    acc_rows = per_point(acc)
    o_stats.accuracy_failures = int(acc_rows.sum())
    # An output flushed to 0 where float64 is a nonzero value of the dtype (a subnormal, say,
    # where accuracy is not judged) and the fix gives it: the symptom of an overflow before it.
    ref_in = ref_o.out.to(dt_o)
    zeroed = ((out_o == 0) & (ref_in != 0) & torch.isfinite(ref_in) & torch.isfinite(out_f) & (out_f != 0)
              & expand_points(plain, out_o) & ~acc)
    if bool(zeroed.any()):
        o_stats.zeroed = int(per_point(zeroed).sum())
        o_stats.zeroed_max = float(f"{float(ref_o.out[zeroed].abs().max()):.3g}")
    outcome.confirming += int((acc_rows & ~confirming).sum())
    fail = _Fail("forward", None, ACCURACY, acc_rows, out_o, ref_o.out)
    _add(found.confirming, acc_rows, fail, which="original",
         bits=torch.where(acc, bits_o, torch.zeros_like(bits_o)), **setting)
    return outcome


def _fix_less_accurate(p: Prepared, ctx, index: int, batch: Batch, ro: Run, rf: Run, ref_o: Run,
                       ref_f: Optional[Run], plain: torch.Tensor, found: _Found) -> None:
    """Points where the fix's value or gradient is finite but has lost most of its bits while
    the original's is accurate (torch.sigmoid's float16 gradient is 0 from z ~ 8, where
    exp(-z) / (1 + exp(-z))**2 by hand still tracks float64). Not a failure of the fix (no
    NaN/Inf): the report says so in words and in the plot."""
    # The float64 original must agree with the float64 fix where it judges: past |x| ~ 37,
    # float64's own 1 + exp(x) is 1, and log(1 + exp(x)) "is" 0 where softplus is right.
    refs_f = {} if ref_f is None else {None: ref_f.out, **{k: ref_f.grads.get(k) for k in ref_o.grads}}
    pairs = [("forward", None, ro.out, rf.out, ref_o.out)]
    pairs += [("gradient", k, ro.grads[k], rf.grads[k], ref_o.grads[k])
              for k in ro.grads if k in rf.grads and k in ref_o.grads]
    for where, wrt, a_o, a_f, ref in pairs:
        if not (a_o.shape == a_f.shape == ref.shape) or a_f.numel() == 0:
            continue
        dt = C.measure_dtype(ctx.dtype, ctx.autocast, a_f.dtype)
        b_o = bits_of_error(a_o, ref, dt)
        b_f = bits_of_error(a_f, ref, dt)
        worse = (trusted(ref, refs_f.get(wrt), dt) & expand_points(plain, ref) & torch.isfinite(b_f) & torch.isfinite(b_o)
                 & (b_f >= C.accuracy_failure_bits(dt)) & (b_o <= C.accurate_bits(dt)))
        rows = per_point(worse)
        if not bool(rows.any()):
            continue
        fail = _Fail(where, wrt, ACCURACY, rows, a_f, ref)
        cands = found.fix_worse.setdefault(ctx.name, [])
        _add(cands, rows, fail, which="fix", bits=torch.where(worse, b_f, torch.zeros_like(b_f)),
             batch=batch, ctx=ctx, index=index, p=p)
        mags = batch.magnitude[rows]
        seen = _Worse(float(mags.min()), float(mags.max()), float(ref.double()[worse].abs().max()), dt)
        old = found.fix_worse_span.get(ctx.name)
        if old is not None:
            seen = _Worse(min(seen.lo, old.lo), max(seen.hi, old.hi), max(seen.reference, old.reference), dt)
        found.fix_worse_span[ctx.name] = seen


def _fix_worse_note(found: _Found) -> Optional[str]:
    """The note with its measure: against what (float64), by how many bits of which dtype,
    where (the inputs' magnitudes) and how large the true value is there. It is a fact about
    the fix (torch.sigmoid's gradient is 0 once sigmoid rounds to 1), not a verdict: the true
    values there are small, and the fix holds."""
    if not found.fix_worse:
        return None
    best = _best([c for cs in found.fix_worse.values() for c in cs])
    where = "; ".join(
        f"in {name}, ≥{fmt_number(C.accuracy_failure_bits(w.dtype))} of "
        f"{'' if name.startswith(C.dtype_name(w.dtype)) else C.dtype_name(w.dtype) + chr(39) + 's '}"
        f"{C.PRECISION[w.dtype]} bits wrong at inputs of magnitude {_span_text(w.lo, w.hi)} (float64 at "
        f"most {fmt_number(float(f'{w.reference:.3g}'))})"
        for name, w in found.fix_worse_span.items())
    what = "value" if best.where == "forward" else f"gradient w.r.t. {best.wrt}"
    return (f"the fix is finite but less accurate than the original where the true {what} is small: "
            f"measured against float64, the fix's {what} loses three quarters or more of its significand "
            f"bits (often it is exactly 0) where the original's error is at most a quarter of them: {where}; "
            f"e.g. {best.sentence()}")


def _span_text(lo: float, hi: float) -> str:
    """`7.62 to 9.5`, or `7.62` where both ends print the same."""
    a, b = fmt_number(float(f"{lo:.3g}")), fmt_number(float(f"{hi:.3g}"))
    return a if a == b else f"{a} to {b}"


def _fill_bits(stats: SideStats, bits: torch.Tensor, measured: torch.Tensor) -> None:
    stats.reliable_points = int(per_point(measured).sum())
    if not measured.any():
        return
    vals = bits[measured]
    stats.bits_median = round(float(vals.median()), 2)
    stats.bits_p99 = round(float(torch.quantile(vals, 0.99)) if vals.numel() > 1 else float(vals.max()), 2)
    stats.bits_max = round(float(vals.max()), 2)


def _subsample(points: PointSet, k: int) -> PointSet:
    n = points.size
    if n <= k:
        return points
    rows = torch.linspace(0, n - 1, k).round().long().unique()
    return PointSet({name: c[rows] for name, c in points.columns.items()}, points.constants,
                    points.shape, points.specs)


def _add(candidates: List[Candidate], rows: torch.Tensor, fail: _Fail, which: str, batch: Batch,
         ctx, index: int, p: Prepared, bits: Optional[torch.Tensor] = None) -> None:
    if not bool(rows.any()):
        return
    # The most ordinary failing point: no input element 0 or subnormal if possible (a
    # division by an all-zero temperature is a poor witness), then inputs closest to 1 in
    # magnitude (a hazard that needs |z| > 11.09 shows at the edge; one that shows at
    # h = -1 is not reported at h = -1e-38).
    plain = rows & ~batch.degenerate
    pick = plain if bool(plain.any()) else rows
    mags = torch.where(pick, _ordinariness(batch.magnitude), torch.full_like(batch.magnitude, math.inf))
    row = int(torch.argmin(mags))
    inputs: Dict[str, Any] = {}
    for s in p.specs:
        inputs[s.name] = s.value if s.value is not None else _value(batch.columns[s.name][row].cpu())
    values, reference = fail.values, fail.reference
    flat_v = values[row].reshape(-1)
    flat_r = reference[row].reshape(-1) if reference.shape == values.shape else None
    if fail.kind == ACCURACY and bits is not None:
        flat = bits[row].reshape(-1)
        j = int(torch.argmax(torch.nan_to_num(flat, nan=-1.0)))
        b = round(float(flat[j]), 1)
    else:
        bad = (~torch.isfinite(flat_v)).nonzero().flatten()
        j = int(bad[0]) if len(bad) else 0
        b = None
    shape = tuple(values.shape[1:])
    element = tuple(int(i) for i in torch.unravel_index(torch.tensor(j), shape)) if shape else None
    w = Witness(
        which=which, kind=fail.kind, where=fail.where, inputs=inputs, dtype=C.dtype_name(ctx.dtype),
        device=ctx.device, autocast=C.dtype_name(ctx.autocast) if ctx.autocast else None,
        wrt=fail.wrt, result=_value(flat_v[j].cpu()),
        reference=_value(flat_r[j].cpu()) if flat_r is not None else None, bits=b, element=element,
    )
    key = (KIND_ORDER[fail.kind], bool(batch.degenerate[row]), round(float(mags[row]), 6), index,
           0 if fail.where == "forward" else 1)
    candidates.append(Candidate(key, w))


def _ordinariness(magnitude: torch.Tensor) -> torch.Tensor:
    """0 for inputs between 1/8 and 1, growing (in binades) for smaller and larger ones; ties
    go to the smaller input (0 itself comes last)."""
    m = magnitude.clamp(min=1e-300)
    score = torch.where(m > 1, m.log2(), torch.where(m < 0.125, (0.125 / m).log2(), torch.zeros_like(m)))
    score = score + 1e-3 * torch.minimum(m, torch.ones_like(m))
    return torch.where(magnitude > 0, score, torch.full_like(score, 1e4))


def _accuracy_text(worst: ContextOutcome) -> str:
    """The fix's p99 error in words a reader can weigh: bits of the context's significand and
    the relative error they mean (`1 bit of float32's 24, about 1e-07 relative`)."""
    dtype = C.dtype_from_name(worst.context["dtype"])
    auto = worst.context.get("autocast")
    if auto:
        dtype = C.measure_dtype(dtype, C.dtype_from_name(auto), dtype)
    width = C.PRECISION[dtype]

    def said(b: float) -> str:
        relative = 2.0 ** (round(b, 1) - width)
        return f"{bits_text(b)} of {C.dtype_name(dtype)}'s {width}, about {fmt_number(float(f'{relative:.1g}'))} relative"

    orig = worst.original.bits_p99
    return (f" (the fix's 99th-percentile error vs float64 in {worst.name}: {said(worst.fix.bits_p99)}"
            + (f"; the original's: {bits_text(orig)}" if orig is not None else "") + ")")


def _best(cands: List[Candidate]) -> Optional[Witness]:
    return min(cands, key=lambda c: c.key).witness if cands else None


def _overflow_witness(skipped: List[ContextOutcome], device: str, need_fix: bool) -> Optional[Witness]:
    """An original that raises an overflow error (`masked_fill(mask, -1e9)` on float16: "value
    cannot be converted to type at::Half without overflow") fails in that context, where the
    fix (if there is one) runs. Other errors (an op a dtype lacks) stay skipped contexts."""
    for o in skipped:
        if "overflow" not in (o.original.error or ""):
            continue
        if need_fix and (o.fix is None or o.fix.error is not None):
            continue
        return Witness(which="original", kind="error", where="forward", inputs={},
                       dtype=str(o.context.get("dtype")), device=device,
                       autocast=o.context.get("autocast"),
                       text=f"the original raises ({o.original.error}) in {o.name} on {device}"
                            + ("; the fix runs there" if need_fix else ""))
    return None


def _fix_holds(ran: List[ContextOutcome], found: _Found) -> str:
    """"the fix holds in all" only where no context's cells show the fix failing; otherwise
    where it holds and where it does not (points the original fails at too, huge inputs)."""
    failing = [o.name for o in ran if o.fix is not None and (o.fix.forward_failures or o.fix.gradient_failures)]
    if not failing:
        return "the fix holds in all"
    why = []
    if any(o.shared for o in ran):
        why.append("where the original fails too")
    if found.extreme:
        why.append(f"at inputs beyond ±{fmt_number(EXTREME)}")
    because = f" ({' and '.join(why)})" if why else ""
    return (f"the fix holds wherever the original was finite, but is still NaN/Inf at some points in "
            f"{', '.join(failing)}{because}")


def _decide(p: Prepared, points: PointSet, outcomes: List[ContextOutcome], found: _Found,
            device: str) -> Verification:
    v = _decide_unqualified(p, points, outcomes, found, device)
    unbounded = [s.name for s in p.specs if s.value is None and not s.proven]
    if v.verdict == CONFIRMED and p.form:
        # A form rule's claim is about the spelling: confirmed at any input of the dtype.
        # Whether the code's own inputs get there is a separate fact, said beside it.
        where = f" in {v.witness.dtype}" if v.witness is not None and v.witness.dtype else ""
        v.reason += (f"; reach not shown: the analysis bounds nothing about {', '.join(unbounded)} "
                     "(any value tried)" if unbounded else
                     f"; reach shown{where}: every varying input is one the analysis proved the "
                     "code produces")
    elif v.verdict == CONFIRMED and unbounded:
        # The failure was found with inputs the analysis proved nothing about.
        v.verdict = POSSIBLE
        v.reason = (f"found only with inputs the analysis could not bound ({', '.join(unbounded)}: any "
                    f"value tried); {v.reason}")
    return v


def _decide_unqualified(p: Prepared, points: PointSet, outcomes: List[ContextOutcome], found: _Found,
                        device: str) -> Verification:
    ranges = points.describe()
    n_points = max((o.points for o in outcomes), default=0)
    ran = [o for o in outcomes if o.original.error is None]
    base = dict(device=device, contexts=outcomes, ranges=ranges, points=n_points)
    if not ran:
        first = outcomes[0].original.error if outcomes else "no context"
        return Verification(NOT_VERIFIABLE, f"the original raised in every context: {first}", **base)
    names = ", ".join(o.name for o in ran)
    ctx_text = f"{len(ran)} contexts on {device}"
    skipped = [o for o in outcomes if o.original.error is not None]
    skip_text = (f"; skipped {', '.join(o.name for o in skipped)} ({skipped[0].original.error})"
                 if skipped else "")
    witness = _best(found.confirming)
    failing = [o.name for o in outcomes if o.confirming]
    notes = []
    ex = _best(found.extreme)
    if ex is not None:
        notes.append(f"the fix fails only at inputs beyond ±{fmt_number(EXTREME)}, e.g. {ex.sentence()}")
    la = _best(found.less_accurate)
    if la is not None:
        notes.append(f"in float32 the fix is less accurate than the original (by more than 1 bit, "
                     f"beyond {fmt_number(C.agreement_bits(torch.float32))} bits) at "
                     f"{fmt_number(round(100 * (1 - found.less_accurate_share), 2))}% of the points, "
                     f"e.g. {la.sentence()}")
    worse = _fix_worse_note(found)
    if worse is not None:
        notes.append(worse)
    zeroed = [o for o in ran if o.original.zeroed]
    if zeroed:
        top = max(zeroed, key=lambda o: o.original.zeroed_max)
        notes.append(f"the original's output is 0 where float64 is not (as large as "
                     f"{fmt_number(top.original.zeroed_max)} in {top.name}) at "
                     + ", ".join(f"{o.original.zeroed} points in {o.name}" for o in zeroed)
                     + "; the fix gives these small values")
    shared = sum(o.shared for o in outcomes)
    if p.fixed is None:
        raised = _overflow_witness(skipped, device, need_fix=False)
        if witness is None and raised is not None:
            return Verification(CONFIRMED, "no fix to check; the original raises an overflow error "
                                f"in {raised.dtype} on {device}", witness=raised, notes=notes, **base)
        if witness is not None:
            return Verification(CONFIRMED, f"no fix to check; the original fails in {len(failing)} of "
                                f"{ctx_text}", witness=witness, notes=notes, **base)
        return Verification(NOT_REPRODUCED, f"no fix to compare with; the original held in {ctx_text} "
                            f"({names}) over {n_points} points, except where float64 fails too"
                            f"{skip_text}", notes=notes, **base)
    introduced = _best(found.introduced)
    if introduced is not None:
        bad = sorted({c.witness.dtype + (f" under autocast({c.witness.autocast})" if c.witness.autocast else "")
                      for c in found.introduced})
        also = f"; the original fails too ({witness.sentence()})" if witness is not None else ""
        if introduced.text is not None:
            return Verification(FIX_FAILED, f"the fix is not the same function as the original{also}",
                                witness=witness, fix_witness=introduced, notes=notes, **base)
        return Verification(FIX_FAILED, f"where the original was finite, the fix fails in {', '.join(bad)}{also}",
                            witness=witness, fix_witness=introduced, notes=notes, **base)
    if shared:
        ex = _best(found.shared)
        if ex is not None:
            notes.append(f"both still fail at {shared} point(s) across contexts, e.g. {ex.sentence()}")
    if witness is None and found.shared:
        return Verification(FIX_FAILED, "the fix fails wherever the original does",
                            witness=_best(found.shared_original), fix_witness=_best(found.shared),
                            notes=notes, **base)
    measured = [o for o in ran if o.fix is not None and o.fix.bits_p99 is not None]
    accuracy = ""
    if measured:
        accuracy = _accuracy_text(max(measured, key=lambda o: o.fix.bits_p99))
    holds = _fix_holds(ran, found)
    if witness is not None:
        return Verification(CONFIRMED, f"the original fails in {len(failing)} of {ctx_text}; "
                            f"{holds}{accuracy}{skip_text}", witness=witness, notes=notes, **base)
    raised = _overflow_witness(skipped, device, need_fix=True)
    if raised is not None:
        return Verification(CONFIRMED, f"the original raises an overflow error in {raised.dtype} on "
                            f"{device}, where the fix runs; {holds}{accuracy}",
                            witness=raised, notes=notes, **base)
    return Verification(NOT_REPRODUCED, f"the original held in {ctx_text} ({names}) over "
                        f"{n_points} points ({'; '.join(ranges)}){skip_text}", notes=notes, **base)
