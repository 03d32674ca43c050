"""What the verifier concludes about one finding, and the witness a person can rerun.

Verdicts:
- `confirmed`: the original fails in at least one context (NaN/Inf in the output or a
  gradient where the float64 reference is finite and representable, or an error of at least
  half the significand bits where the fix is accurate), and the fix holds in every context
  (no NaN/Inf where a reference is finite and representable) and agrees with the reference
  to within the stated number of bits at 99% of the points where the reference is reliable.
  Every varying input of the witness is bounded by what the code does (the analysis's
  evidence, a kind such as probability/simplex/mask/count, a domain, a constant, or an
  operation's contract such as a class-index target): the failure can happen in that code.
- `possible`: the same, but the failure was found with an input the analysis could not
  bound (it proved nothing about it, so any value of the dtype was tried): the failure is
  real for such values, and whether the code produces them is not known.
- `not-reproduced`: the original held everywhere tried (the contexts and ranges are listed).
- `fix-failed`: the fix is NaN/Inf where it should not be, raises where the original ran,
  or disagrees with the reference (the witness says where).
- `not-verifiable`: the probe cannot be run safely or at all (the reason says why).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

CONFIRMED = "confirmed"
POSSIBLE = "possible"
NOT_REPRODUCED = "not-reproduced"
FIX_FAILED = "fix-failed"
NOT_VERIFIABLE = "not-verifiable"
VERDICTS = (CONFIRMED, POSSIBLE, NOT_REPRODUCED, FIX_FAILED, NOT_VERIFIABLE)

# How a point fails.
ROUNDING = "rounding"  # NaN/Inf where the float64 value of the original is finite
SINGULAR = "singular"  # NaN/Inf as the float64 original too, where the fix's value is finite
ACCURACY = "accuracy"  # finite, but at least half the significand bits wrong
KIND_ORDER = {ROUNDING: 0, SINGULAR: 1, ACCURACY: 2}


def bits_text(b: float) -> str:
    """`1 bit`, `15.5 bits`: an error in bits (log2 of the floats between value and reference)."""
    b = round(b, 1)
    return f"{fmt_number(b)} bit{'' if b == 1 else 's'}"


def fmt_number(v: Any) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if v == int(v) and abs(v) < 1e6:
            return str(int(v))
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(fmt_number(x) for x in v) + "]"
    return str(v)


def _shape(v: Any) -> tuple:
    shape = []
    while isinstance(v, list):
        shape.append(len(v))
        v = v[0] if v else None
    return tuple(shape)


def _float32(v: float) -> float:
    try:
        return struct.unpack("f", struct.pack("f", v))[0]
    except OverflowError:
        return v


def fmt_input(v: Any) -> str:
    """An input number that reruns the failure: six digits where they give the same number
    in float32, up to nine (enough for any float32) where they do not. `acos` fails at
    -1.0000001, and "-1" would send the reader to a point where it holds. The inputs are
    values of the run's dtype (float32 or narrower), so nine digits always suffice."""
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(fmt_input(x) for x in v) + "]"
    short = fmt_number(v)
    if not isinstance(v, float) or math.isnan(v) or math.isinf(v) or _float32(v) != v:
        return short
    for digits in range(6, 10):
        text = short if digits == 6 else f"{v:.{digits}g}"
        if _float32(float(text)) == v:
            return text
    return short


def fmt_value(v: Any) -> str:
    """An input as a person would type it: a number, a short list, or torch.full(...)."""
    if not isinstance(v, list):
        return fmt_input(v)
    flat = list(_flatten(v))
    shape = _shape(v)
    if flat and all(x == flat[0] for x in flat) and len(flat) > 1:
        dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
        return f"torch.full(({dims}), {fmt_input(flat[0])})"
    if len(flat) <= 8:
        return fmt_input(v)
    return fmt_input(v[0]) + f" (first row of {'x'.join(str(d) for d in shape)})"


@dataclass
class Witness:
    """One failing evaluation, stated so that it can be rerun by hand."""

    which: str  # "original" | "fix"
    kind: str  # ROUNDING | SINGULAR | ACCURACY | "error"
    where: str  # "forward" | "gradient"
    inputs: Dict[str, Any]
    dtype: str
    device: str
    autocast: Optional[str] = None
    wrt: Optional[str] = None  # the input a gradient is taken with respect to
    result: Optional[Any] = None  # what came out (a number, a list, "nan")
    reference: Optional[Any] = None  # the float64 value
    bits: Optional[float] = None
    note: str = ""
    text: Optional[str] = None  # a harness states its witness in its own words
    element: Optional[tuple] = None  # which element of the output/gradient, per point

    def setting(self) -> str:
        s = f"in {self.dtype}"
        if self.autocast:
            s += f" under autocast({self.autocast})"
        return f"{s} on {self.device}"

    def at(self) -> str:
        return ", ".join(f"{k}={fmt_value(v)}" for k, v in self.inputs.items())

    def sentence(self) -> str:
        if self.text is not None:
            return self.text
        if self.kind == "error":
            return f"{self.note} {self.setting()}"
        if self.kind == ACCURACY:
            what = f"{fmt_number(self.bits)} bits of error"
            tail = f" ({fmt_number(self.result)} vs float64 {fmt_number(self.reference)})"
        else:
            value = _worst(self.result)
            index = f"[{', '.join(str(i) for i in self.element)}]" if self.element else ""
            if self.where == "gradient":
                what = f"{value} gradient w.r.t. {self.wrt}{index}"
            else:
                what = f"{value} output{index}"
            if self.kind == SINGULAR:
                tail = " (float64 gives it too as written; the fix's value is finite)"
            elif self.reference is not None:
                tail = f" (float64: {fmt_number(self.reference)})"
            else:
                tail = ""
        at = self.at()
        return f"{what} at {at} {self.setting()}{tail}" if at else f"{what} {self.setting()}{tail}"

    def to_json(self) -> Dict[str, Any]:
        return {
            "which": self.which,
            "kind": self.kind,
            "where": self.where,
            "wrt": self.wrt,
            "inputs": {k: _jsonable(v) for k, v in self.inputs.items()},
            "dtype": self.dtype,
            "device": self.device,
            "autocast": self.autocast,
            "result": _jsonable(self.result),
            "reference": _jsonable(self.reference),
            "bits": self.bits,
            "note": self.note,
            "element": list(self.element) if self.element else None,
            "sentence": self.sentence(),
        }


def _worst(v: Any) -> str:
    """The non-finite value to name: NaN before inf."""
    flat = v if isinstance(v, list) else [v]
    flat = [x for x in _flatten(flat)]
    if any(isinstance(x, float) and math.isnan(x) for x in flat):
        return "NaN"
    if any(isinstance(x, float) and x == math.inf for x in flat):
        return "inf"
    if any(isinstance(x, float) and x == -math.inf for x in flat):
        return "-inf"
    return "non-finite"


def _flatten(v):
    for x in v:
        if isinstance(x, list):
            yield from _flatten(x)
        else:
            yield x


def _jsonable(v: Any) -> Any:
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v


@dataclass
class SideStats:
    """Original or fix in one context."""

    error: Optional[str] = None
    forward_failures: int = 0  # points with NaN/Inf in the output where a reference is finite
    gradient_failures: int = 0
    singular: int = 0  # of those, where the float64 original is NaN/Inf too
    accuracy_failures: int = 0
    bits_median: Optional[float] = None
    bits_p99: Optional[float] = None
    bits_max: Optional[float] = None
    agree_fraction: Optional[float] = None  # fix: share of reliable points within the bound
    reliable_points: int = 0
    # Points whose output is 0 where float64 rounds to a nonzero value of the dtype (often a
    # subnormal, where accuracy is not measured) and the fix gives it: an underflow the plot
    # shows, so the table says it too. Not a failure by itself.
    zeroed: int = 0
    zeroed_max: Optional[float] = None  # the largest such float64 value

    @property
    def fails(self) -> bool:
        return self.forward_failures + self.gradient_failures + self.accuracy_failures > 0

    def cell(self, part: str) -> str:
        """Text for the report's table: `part` is "forward" or "gradient"."""
        if self.error:
            return "error"
        if part == "forward":
            bits = f", p99 {bits_text(self.bits_p99)}" if self.bits_p99 is not None else ""
            n = self.forward_failures
            acc = f", {self.accuracy_failures} inaccurate" if self.accuracy_failures else ""
            zero = (f", 0 at {self.zeroed} where float64 is up to {fmt_number(self.zeroed_max)}"
                    if self.zeroed else "")
            return (f"NaN/Inf at {n}{acc}{zero}{bits}" if n else
                    (f"{self.accuracy_failures} inaccurate{zero}{bits}" if self.accuracy_failures
                     else (f"{zero[2:]}{bits}" if zero else f"ok{bits}")))
        n = self.gradient_failures
        return f"NaN/Inf at {n}" if n else "ok"

    def to_json(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in (
            "error", "forward_failures", "gradient_failures", "singular", "accuracy_failures",
            "bits_median", "bits_p99", "bits_max", "agree_fraction", "reliable_points", "zeroed", "zeroed_max")}


@dataclass
class ContextOutcome:
    context: Dict[str, Any]  # device, dtype, autocast
    name: str
    points: int
    original: SideStats
    fix: Optional[SideStats]
    agreement_bits: float = 0.0
    shared: int = 0  # points where original and fix both fail (the fix does not address them)
    confirming: int = 0  # points where the original fails and the fix holds

    def to_json(self) -> Dict[str, Any]:
        return {
            "context": self.context,
            "name": self.name,
            "points": self.points,
            "original": self.original.to_json(),
            "fix": self.fix.to_json() if self.fix else None,
            "agreement_bits": self.agreement_bits,
            "shared_failures": self.shared,
            "confirming_points": self.confirming,
        }


@dataclass
class Verification:
    verdict: str
    reason: str
    device: str = "cpu"
    witness: Optional[Witness] = None  # where the original fails (confirmed)
    fix_witness: Optional[Witness] = None  # where the fix fails (fix-failed)
    contexts: List[ContextOutcome] = field(default_factory=list)
    ranges: List[str] = field(default_factory=list)
    points: int = 0
    seconds: float = 0.0
    harness: Optional[Dict[str, Any]] = None  # a harness's measurements
    sweep: Optional[Any] = None  # data for the report's plot (not in the JSON)
    notes: List[str] = field(default_factory=list)  # what else was seen (not the verdict)

    def line(self) -> str:
        """The verdict with its witness in one sentence."""
        if self.verdict in (CONFIRMED, POSSIBLE) and self.witness is not None:
            return f"{self.verdict}: {self.witness.sentence()}; {self.reason}"
        if self.verdict == FIX_FAILED and self.fix_witness is not None:
            return f"{self.verdict}: the fix gives {self.fix_witness.sentence()}; {self.reason}"
        return f"{self.verdict}: {self.reason}"

    def to_json(self) -> Dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "line": self.line(),
            "device": self.device,
            "witness": self.witness.to_json() if self.witness else None,
            "fix_witness": self.fix_witness.to_json() if self.fix_witness else None,
            "contexts": [c.to_json() for c in self.contexts],
            "ranges": self.ranges,
            "points": self.points,
            "seconds": round(self.seconds, 4),
            "notes": self.notes,
            "harness": self.harness,
        }


def not_verifiable(reason: str, device: str = "cpu") -> Verification:
    return Verification(NOT_VERIFIABLE, reason, device=device)
