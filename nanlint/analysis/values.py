"""Abstract values: what the analysis knows about one tensor or number, and why.

A `Value` is plain, frozen, picklable data (no CST nodes), so function summaries built from
values can be stored by a project index and reused across files. Every fact that a rule may
cite carries `Evidence` (line and a short reason: "softmax at line 12").

Two facts about zero are kept apart on purpose:
- `zero`: a reason why exact 0 is reachable *by construction* ("a softmax output"). Rules
  report only with such evidence: an unknown value is not a hazard.
- `nonzero`: exact 0 is proven unreachable (a clamp, a branch that excluded 0, `+ eps`).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field, replace
from typing import Optional, Tuple

INF = math.inf


# A softmax written without `dim` (PyTorch picks one from the input's rank, a deprecated
# spelling): still a whole distribution, along a dim that matches no written one.
IMPLICIT_DIM = "implicit"


@dataclass(frozen=True)
class Evidence:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.reason} at line {self.line}" if self.line else self.reason


@dataclass(frozen=True)
class Value:
    # Interval of every element (closed; +-inf allowed).
    lo: float = -INF
    hi: float = INF
    # Reason exact 0 is reachable by construction, or None (no evidence).
    zero: Optional[str] = None
    # Exact 0 proven unreachable.
    nonzero: bool = False
    # "softmax" / "sigmoid" (a probability, underflows to 0 and rounds to 1), or None.
    prob: Optional[str] = None
    # The stable function this value is exactly the output of, only selected, reshaped, cast
    # or copied since ("softmax", "sigmoid", or "1 - sigmoid" for its complement): its log
    # has an exact stable spelling (`log_softmax`, `logsigmoid`). Any other op drops it.
    form: Optional[str] = None
    # The dim a softmax normalized over (as written), for a simplex; IMPLICIT_DIM without one.
    simplex_dim: Optional[str] = None
    # 0/1 values (a comparison, a boolean mask).
    mask: bool = False
    # A non-negative integer count (a mask's sum, bincount).
    count: bool = False
    integer: bool = False
    # A mask with at least one True / a count >= 1 (a branch said so).
    nonempty: bool = False
    # Unit norm along some dim (F.normalize).
    unit: bool = False
    # A dot product of unit vectors: in [-1, 1] in real arithmetic, a rounding step past it.
    cosine: bool = False
    # Not exactly the zero vector in practice: a learned embedding or weight (a linear layer's
    # output, a parameter) or a Gaussian draw; zero only by a coincidence of every coordinate.
    learned: bool = False
    # A Gaussian draw (`torch.randn`), or a piece or a direction of one: an identity for the
    # draw call within the file's analysis (pieces of a chunk or unpacked rows add their
    # position; summaries for other files drop it). Two different draws are independent.
    draw: Optional[str] = None
    # A cosine of two independent Gaussian directions: concentrated around 0 (its spread is
    # 1/sqrt(dim)), so it does not reach ±1 in practice, where two equal vectors would.
    apart: bool = False
    # "float16" / "bfloat16" / "float32", where evident.
    dtype: Optional[str] = None
    # The tensor (as written) this is the maximum or the logsumexp of, along some dim or
    # all of it: `x - <this>` is <= 0 (the max-shift before an `exp`).
    max_of: Optional[str] = None
    # The tensor (as written) this is positive wherever it is 0, and >= 0 elsewhere: a
    # positive constant times the mask `x <= t` (PPLM's `eps * (p <= eps).float()`), so
    # `x + <this>` with x >= 0 is never 0.
    positive_where_zero: Optional[str] = None
    # The tensor (as written) this is the Euclidean norm of, also plus something nonnegative or
    # clamped from below (`x.norm(dim=-1) + eps`), or "a product of norms": `x / <this>` is a
    # unit vector, and a dot product divided by it is a cosine.
    norm_of: Optional[str] = None
    # A product of two tensors, or its sum along a dim (`(a * b).sum(-1)`, `a @ b.T`,
    # `torch.einsum(...)`): divided by norms, a cosine.
    dot: bool = False
    # Moved by training (requires_grad, nn.Parameter, given to an optimizer).
    trainable: bool = False
    # Why no gradient flows back through this value, or None (it may): a constant, a
    # `.detach()`, a tensor made without `requires_grad`, a value computed under
    # `torch.no_grad()`. Gradient-only hazards (the inf derivative of sqrt at 0) need it None.
    nograd: Optional[Evidence] = None
    # A module object: what calling it returns (`nn.Softmax(dim=1)`, `Policy(...)`).
    module_out: Optional["Value"] = None
    # An instance of a class of this file (its name), for `model(x)` -> forward.
    instance_of: Optional[str] = None
    # The elements of a tuple or list by position ("0", "1"), or the modules an
    # `nn.ModuleList` / `nn.ModuleDict` holds, by index or key ("0", "policy").
    members: Optional[Tuple[Tuple[str, "Value"], ...]] = None
    # Where the facts came from, newest last.
    evidence: Tuple[Evidence, ...] = field(default=())

    # ------------------------------------------------------------------ derived facts
    @property
    def sign(self) -> Optional[str]:
        if self.lo >= 0:
            return "nonneg"
        if self.hi <= 0:
            return "nonpos"
        return None

    @property
    def positive(self) -> bool:
        return self.lo > 0 or (self.lo >= 0 and self.nonzero)

    @property
    def excludes_zero(self) -> bool:
        return self.nonzero or self.lo > 0 or self.hi < 0

    def cite(self) -> str:
        return "; ".join(str(e) for e in self.evidence[-2:])

    def with_evidence(self, line: int, reason: str, **changes) -> "Value":
        return replace(self, evidence=(self.evidence + (Evidence(line, reason),))[-4:], **changes)


TOP = Value()
CONSTANT = Evidence(0, "a constant")
# Zero reasons of a fresh uniform sample on [0, 1): exactly 0 with probability 2^-24 per
# float32 element (`torch.rand`, `rand_like`, `uniform_()`).
RAND_ZERO = "torch.rand (can return 0)"
UNIFORM_ZERO = "uniform_ from 0"


def stored_as(x: float, dtype: Optional[str]) -> float:
    """`x` as a tensor of `dtype` holds it (float32 where None), rounded to nearest: a Python
    number meets a tensor in the tensor's dtype, so `1 - 1e-8` is 1.0 next to a float32 one."""
    if math.isinf(x) or math.isnan(x) or dtype == "float64":
        return x
    try:
        if dtype == "float16":
            return struct.unpack("e", struct.pack("e", x))[0]
        single = struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return math.copysign(INF, x)
    if dtype != "bfloat16":
        return single
    bits = struct.unpack("I", struct.pack("f", single))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # to nearest, ties to even
    return struct.unpack("f", struct.pack("I", bits))[0]


def unknown(v: Value) -> bool:
    """Nothing is known of `v`'s values: its evidence and its gradient fact aside, it is TOP."""
    return replace(v, evidence=(), nograd=None) == TOP


def point(v: float) -> Value:
    return Value(lo=v, hi=v, nonzero=v != 0, zero=None, integer=float(v).is_integer(),
                 nograd=CONSTANT)


def interval(lo: float, hi: float, **kw) -> Value:
    return Value(lo=lo, hi=hi, nonzero=lo > 0 or hi < 0, **kw)


def join(a: Optional[Value], b: Optional[Value]) -> Optional[Value]:
    """What holds on either path (None: the path is unreachable)."""
    if a is None:
        return b
    if b is None or a == b:
        return a
    return Value(
        lo=min(a.lo, b.lo),
        hi=max(a.hi, b.hi),
        zero=a.zero or b.zero,
        nonzero=a.nonzero and b.nonzero,
        prob=a.prob if a.prob == b.prob else None,
        form=a.form if a.form == b.form else None,
        simplex_dim=a.simplex_dim if a.simplex_dim == b.simplex_dim else None,
        mask=a.mask and b.mask,
        count=a.count and b.count,
        integer=a.integer and b.integer,
        nonempty=a.nonempty and b.nonempty,
        unit=a.unit and b.unit,
        cosine=a.cosine and b.cosine,
        learned=a.learned and b.learned,
        draw=a.draw if a.draw == b.draw else None,
        apart=a.apart and b.apart,
        dtype=a.dtype if a.dtype == b.dtype else (a.dtype or b.dtype if "float16" in (a.dtype, b.dtype) else None),
        max_of=a.max_of if a.max_of == b.max_of else None,
        norm_of=a.norm_of if a.norm_of == b.norm_of else None,
        dot=a.dot and b.dot,
        trainable=a.trainable or b.trainable,
        nograd=a.nograd if a.nograd and b.nograd else None,
        module_out=_joined_module(a, b),
        instance_of=a.instance_of if a.instance_of == b.instance_of else None,
        members=_joined_members(a, b),
        evidence=_joined_evidence(a, b),
    )


def _joined_evidence(a: Value, b: Value) -> Tuple[Evidence, ...]:
    """Both sides' evidence, the side whose zero reason the join keeps last: messages cite
    the last entries next to that reason ("a softmax output: softmax at line 3")."""
    first, last = (b, a) if a.zero else (a, b)
    return tuple(dict.fromkeys(first.evidence + last.evidence))[-4:]


def cited(value: Value, line: int, reason: str) -> Value:
    """A probability returned by a call, with the call as evidence (messages cite it), also
    as an element of a returned tuple."""
    if value.prob:
        return value.with_evidence(line, reason)
    if value.members is not None and any(v.prob for _, v in value.members):
        return replace(value, members=tuple((k, v.with_evidence(line, reason) if v.prob else v)
                                            for k, v in value.members))
    return value


def _joined_members(a: Value, b: Value):
    """Element by element where both sides hold the same positions or keys (two `return p, q`
    paths); two bags (a list filled by `append`, empty or not) hold the join of both; else
    unknown."""
    if a.members is None or b.members is None:
        return None
    if is_bag(a.members) and is_bag(b.members) and (a.members or b.members):
        return bag(*(v for _, v in a.members + b.members))
    if [k for k, _ in a.members] != [k for k, _ in b.members]:
        return None
    return tuple((k, join(x, y) or TOP) for (k, x), (_, y) in zip(a.members, b.members))


# A container whose elements are known only together (a list filled by `append`, a
# ModuleList of one block built n times) holds one member under this key: any index.
ANY_INDEX = "*"


def is_bag(members) -> bool:
    return members is not None and all(k == ANY_INDEX for k, _ in members)


def bag(*elements: Value):
    """Members of a container holding each of `elements` at some index."""
    out: Optional[Value] = None
    for v in elements:
        out = join(out, v)
    return ((ANY_INDEX, out),) if out is not None else ()


def _joined_module(a: Value, b: Value) -> Optional[Value]:
    """Two different modules on two paths (`self.visual = ViT(...)` or `ResNet(...)`): calling
    the result gives learned features, whatever else either gives."""
    if a.module_out == b.module_out and a.instance_of == b.instance_of:
        return a.module_out
    if (a.instance_of or a.module_out is not None) and (b.instance_of or b.module_out is not None):
        if a.module_out is not None and b.module_out is not None:
            joined = join(a.module_out, b.module_out)
            if joined is not None and (joined.prob or joined.learned):
                return joined
        return Value(learned=True, evidence=(Evidence(0, "output of a submodule"),))
    return None


def widen(old: Value, new: Value) -> Value:
    """Loop widening: a bound that moved goes to infinity (the fixed point is reached in one
    more pass)."""
    joined = join(old, new)
    assert joined is not None
    lo = joined.lo if joined.lo >= old.lo else -INF
    hi = joined.hi if joined.hi <= old.hi else INF
    members = joined.members
    if members is not None and old.members is not None and new.members is not None \
            and len(old.members) == len(new.members) == len(members):
        # A tuple carried around a loop (`state = (h, c)`): each element widens.
        members = tuple((k, widen(o, n)) for (k, o), (_, n) in zip(old.members, new.members))
    return replace(joined, lo=lo, hi=hi, nonzero=joined.nonzero and (lo > 0 or hi < 0 or old.nonzero),
                   members=members)


__all__ = ["Evidence", "Value", "TOP", "INF", "ANY_INDEX", "bag", "is_bag", "point", "interval", "join", "widen",
           "unknown"]
