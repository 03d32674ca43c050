"""Transfer functions for torch ops, in one table: op name -> what the result is, given
what the operands are.

Op names are nanlint.core.ops' canonical names (so `torch.exp(x)`, `x.exp()`, `th.exp(x)` are one
entry), plus the creation, shape and cast ops the analysis needs (`rand`, `linspace`, `view`,
`half`...). A transfer function takes the operand values (receiver first for methods), the
keyword values, the keyword codes (for `dim=`) and the line, and returns a Value.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Dict, List, Optional

from .values import IMPLICIT_DIM, INF, RAND_ZERO, TOP, Evidence, Value, interval, join

Args = List[Value]
Kw = Dict[str, Value]
Codes = Dict[str, str]
Transfer = Callable[[Args, Kw, Codes, int], Value]

# Where each dtype runs out (NUMERICS.md; tests/test_dtype_edges.py measures them again).
# exp(x) overflows to inf above this (float32 for None). It is also where 1/p overflows for
# p = exp(-x): the gradient of log(p) at a probability below 1/max of the dtype.
EXP_OVERFLOW = {"float16": 11.09, "bfloat16": 89.0, "float32": 88.73, None: 88.73}
# exp(-x) rounds to exactly 0 above this (below half the dtype's smallest subnormal): a
# softmax or sigmoid output that is exactly 0, whose log is -inf.
EXP_UNDERFLOW = {"float16": 17.34, "bfloat16": 92.75, "float32": 103.98, None: 103.98}


def stated(edge: float) -> str:
    """An edge as a message states it, to three digits: `11.1`, `88.7`, `104`."""
    return f"{edge:.3g}"


def _safe(f, x: float, default: float) -> float:
    try:
        return f(x)
    except (OverflowError, ValueError):
        return default


def _exp(x: float) -> float:
    return _safe(math.exp, x, INF if x > 0 else 0.0)


def _keep(a: Value, **changes) -> Value:
    """Same values, new facts: the common part of every transfer."""
    return replace(a, module_out=None, instance_of=None, **changes)


def _arg(args: Args, i: int, kw: Kw, name: str) -> Optional[Value]:
    if i < len(args):
        return args[i]
    return kw.get(name)


def _scalar(v: Optional[Value]) -> Optional[float]:
    if v is not None and v.lo == v.hi:
        return v.lo
    return None


def _mul_bounds(a: Value, b: Value):
    products = []
    for x in (a.lo, a.hi):
        for y in (b.lo, b.hi):
            if (x == 0 and math.isinf(y)) or (y == 0 and math.isinf(x)):
                products.append(0.0)
            else:
                products.append(x * y)
    return min(products), max(products)


def add(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    if len(args) < 2:
        return TOP
    a, b = args[0], args[1]
    lo, hi = a.lo + b.lo if not (a.lo == -INF or b.lo == -INF) else -INF, (
        a.hi + b.hi if not (a.hi == INF or b.hi == INF) else INF
    )
    nonzero = lo > 0 or hi < 0 or (a.positive and b.lo >= 0) or (b.positive and a.lo >= 0)
    zero = None
    if not nonzero and (a.zero and _scalar(b) == 0 or b.zero and _scalar(a) == 0):
        zero = a.zero or b.zero
    return Value(lo=lo, hi=hi, nonzero=nonzero, zero=zero, dtype=a.dtype or b.dtype,
                 trainable=a.trainable or b.trainable, integer=a.integer and b.integer,
                 learned=a.learned and b.learned,  # a sum of learned features (not a difference)
                 evidence=(a.evidence + b.evidence)[-4:])


def neg(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    return Value(lo=-a.hi, hi=-a.lo, nonzero=a.nonzero, zero=a.zero, dtype=a.dtype,
                 trainable=a.trainable, integer=a.integer, evidence=a.evidence)


def sub(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    if len(args) < 2:
        return TOP
    a, b = args[0], args[1]  # extra positionals (out=, alpha) do not change the value
    out = add([a, neg([b], {}, {}, line)], kw, codes, line)
    if _scalar(a) == 1.0 and b.prob and not b.lo > 0:
        # 1 - p rounds to 0 where p rounds to 1; `1 - sigmoid(z)` is `sigmoid(-z)`.
        out = replace(out, zero="1 - a probability", nonzero=False, lo=max(out.lo, 0.0),
                      form="1 - sigmoid" if b.form == "sigmoid" else None)
    elif b.prob and _scalar(a) == 1.0:
        out = replace(out, lo=max(out.lo, 0.0))
    return out


def mul(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    if len(args) < 2:
        return TOP
    a, b = args[0], args[1]  # extra positionals (out=, alpha) do not change the value
    lo, hi = _mul_bounds(a, b)
    zero = a.zero or b.zero
    if a.unit and b.unit:
        return Value(lo=-1.0, hi=1.0, cosine=True, apart=_apart(a, b), dtype=a.dtype or b.dtype,
                     evidence=(a.evidence + b.evidence)[-4:])
    return Value(lo=lo, hi=hi, nonzero=a.excludes_zero and b.excludes_zero,
                 zero=zero if not (a.excludes_zero and b.excludes_zero) else None,
                 dtype=a.dtype or b.dtype, trainable=a.trainable or b.trainable,
                 integer=a.integer and b.integer, dot=_tensor(a) and _tensor(b),
                 evidence=(a.evidence + b.evidence)[-4:])


def _tensor(v: Value) -> bool:
    """Not a constant (a product with a constant scales; it is no dot product)."""
    return v.lo != v.hi


def div(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    if len(args) < 2:
        return TOP
    a, b = args[0], args[1]  # extra positionals (out=, alpha) do not change the value
    if b.excludes_zero and b.lo > 0:
        inv = interval(1 / b.hi if b.hi != INF else 0.0, 1 / b.lo)
        lo, hi = _mul_bounds(a, inv)
    else:
        # A divisor that may be 0 leaves the magnitude unbounded, not the sign: like signs
        # give a quotient >= 0 (`x.abs() / n`), unlike ones <= 0 (`-d ** 2 / (2 * s ** 2)`).
        lo, hi = -INF, INF
        if (a.lo >= 0 and b.lo >= 0) or (a.hi <= 0 and b.hi <= 0):
            lo = 0.0
        elif (a.hi <= 0 and b.lo >= 0) or (a.lo >= 0 and b.hi <= 0):
            hi = 0.0
    zero = a.zero
    if zero is None and a.count:
        zero = "a ratio of counts"
    return Value(lo=lo, hi=hi, nonzero=a.excludes_zero and b.hi < INF, zero=zero,
                 dtype=a.dtype or b.dtype, trainable=a.trainable or b.trainable,
                 evidence=(a.evidence + b.evidence)[-4:])


def exp(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    return Value(lo=_exp(a.lo), hi=_exp(a.hi), nonzero=True, dtype=a.dtype,
                 trainable=a.trainable, evidence=a.evidence)


def log(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    lo = _safe(math.log, a.lo, -INF) if a.lo > 0 else -INF
    hi = _safe(math.log, a.hi, INF) if a.hi > 0 else -INF
    return Value(lo=lo, hi=hi, dtype=a.dtype, trainable=a.trainable, evidence=a.evidence)


def sigmoid(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    return Value(lo=0.0, hi=1.0, prob="sigmoid", form="sigmoid", zero="a sigmoid output", dtype=a.dtype,
                 trainable=a.trainable,
                 evidence=(a.evidence + (_ev(line, "sigmoid"),))[-4:])


def softmax(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    dim = codes.get("dim") or codes.get("#1") or IMPLICIT_DIM
    return Value(lo=0.0, hi=1.0, prob="softmax", form="softmax", simplex_dim=dim, zero="a softmax output",
                 dtype=a.dtype, trainable=a.trainable,
                 evidence=(a.evidence + (_ev(line, "softmax"),))[-4:])


def relu(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    if a.lo > 0:
        return _keep(a)
    return Value(lo=0.0, hi=max(a.hi, 0.0), zero="a ReLU output", dtype=a.dtype,
                 trainable=a.trainable, evidence=a.evidence)


def clamp(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    low = _arg(args, 1, kw, "min")
    high = _arg(args, 2, kw, "max")
    lo, hi, nonzero, zero = a.lo, a.hi, a.nonzero, a.zero
    # max(x, low) lies in [max(x.lo, low.lo), max(x.hi, low.hi)]; min(x, high) likewise: a
    # bound past the whole range of x moves both ends (`zeros(()).clamp(min=1.0)` is 1, not
    # the empty [1, 0] that divided by zero downstream).
    if low is not None and low.lo > -INF:
        lo, hi = max(lo, low.lo), max(hi, low.hi)
        if low.positive:
            nonzero, zero = True, None
        elif _scalar(low) == 0 and not a.positive:
            zero = "clamp(min=0)"
    elif low is not None and low.positive:
        # An epsilon-like name of unknown value: positive.
        lo, hi, nonzero, zero = max(lo, 0.0), max(hi, low.hi), True, None
    if high is not None and high.hi < INF:
        lo, hi = min(lo, high.lo), min(hi, high.hi)
    return replace(a, lo=lo, hi=hi, nonzero=nonzero or lo > 0, zero=zero,
                   module_out=None, instance_of=None, cosine=False,
                   evidence=(a.evidence + (_ev(line, "clamp"),))[-4:])


def clamp_max(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    high = _arg(args, 1, kw, "max")
    return clamp(args[:1], {"max": high} if high is not None else {}, codes, line)


def abs_(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    lo = 0.0 if a.lo <= 0 <= a.hi else min(abs(a.lo), abs(a.hi))
    return Value(lo=lo, hi=max(abs(a.lo), abs(a.hi)), nonzero=a.excludes_zero, zero=a.zero,
                 dtype=a.dtype, trainable=a.trainable, evidence=a.evidence)


def square(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = abs_(args, kw, codes, line)
    return replace(a, lo=a.lo * a.lo, hi=a.hi * a.hi if a.hi < INF else INF)


def pow_(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    if len(args) < 2:
        return TOP
    a, e = args[0], args[1]
    k = _scalar(e)
    if k is not None and k == 2:
        return square([a], {}, {}, line)
    if k is not None and k > 0 and a.lo >= 0:
        return Value(lo=_safe(lambda x: x ** k, a.lo, 0.0), hi=_safe(lambda x: x ** k, a.hi, INF),
                     nonzero=a.excludes_zero, zero=a.zero, dtype=a.dtype, trainable=a.trainable)
    return Value(dtype=a.dtype, trainable=a.trainable)


def sqrt(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    return Value(lo=math.sqrt(max(a.lo, 0.0)), hi=math.sqrt(a.hi) if a.hi >= 0 else 0.0,
                 nonzero=a.positive, zero=a.zero, dtype=a.dtype, trainable=a.trainable)


def reduce_sum(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    if a.mask:
        # A mask's sum counts its True entries: 0 when the mask is empty.
        return Value(lo=1.0 if a.nonempty else 0.0, hi=INF, count=True, integer=True,
                     nonzero=a.nonempty, nonempty=a.nonempty,
                     zero=None if a.nonempty else "the count of an empty mask",
                     evidence=a.evidence)
    if a.prob == "softmax" and a.simplex_dim is not None and (codes.get("dim") or codes.get("#1")) == a.simplex_dim:
        return Value(lo=1.0, hi=1.0, nonzero=True, dtype=a.dtype, evidence=a.evidence)
    if a.cosine:
        return a
    lo = 0.0 if a.lo >= 0 else -INF
    return Value(lo=lo, hi=INF if a.hi > 0 else 0.0, nonzero=a.positive, zero=None,
                 count=a.count, integer=a.integer, dtype=a.dtype, trainable=a.trainable,
                 learned=a.learned, dot=a.dot, evidence=a.evidence)


def reduce_mean(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    return Value(lo=a.lo, hi=a.hi, nonzero=a.positive or a.hi < 0, dtype=a.dtype,
                 trainable=a.trainable, learned=a.learned, evidence=a.evidence)


def reduce_max(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    if len(args) >= 2 and not codes.get("dim") and args[1].lo == args[1].hi and not codes.get("#1", "").lstrip("-").isdigit():
        # torch.max(a, b): elementwise maximum.
        b = args[1]
        return Value(lo=max(a.lo, b.lo), hi=max(a.hi, b.hi), nonzero=max(a.lo, b.lo) > 0,
                     dtype=a.dtype, trainable=a.trainable)
    return Value(lo=a.lo, hi=a.hi, nonzero=a.positive, dtype=a.dtype, trainable=a.trainable,
                 evidence=a.evidence)


def norm(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    zero = a.zero or (None if a.learned else None)
    return Value(lo=0.0, hi=INF, nonzero=a.excludes_zero and a.lo > 0, zero=zero,
                 learned=a.learned, dtype=a.dtype, trainable=a.trainable, evidence=a.evidence)


def normalize(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    return Value(lo=-1.0, hi=1.0, unit=True, dtype=a.dtype, trainable=a.trainable, draw=a.draw,
                 evidence=(a.evidence + (_ev(line, "normalize"),))[-4:])


def cosine(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    apart = len(args) >= 2 and _apart(args[0], args[1])
    return Value(lo=-1.0, hi=1.0, cosine=True, apart=apart, evidence=(_ev(line, "cosine_similarity"),))


def _apart(a: Value, b: Value) -> bool:
    """Directions of two different Gaussian draws (`slerp(z0, z1)` of two latents)."""
    return a.draw is not None and b.draw is not None and a.draw != b.draw


def matmul(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    b = args[1] if len(args) > 1 else TOP
    unit = a.unit and b.unit
    if not unit and (a.learned or b.learned):
        # `x @ self.weight`: the output of a linear layer.
        return Value(learned=True, dtype=a.dtype or b.dtype, trainable=a.trainable or b.trainable,
                     dot=True, evidence=(a.evidence + b.evidence)[-4:])
    return Value(lo=-1.0 if unit else -INF, hi=1.0 if unit else INF, cosine=unit, dot=not unit,
                 apart=unit and _apart(a, b),
                 dtype=a.dtype or b.dtype, trainable=a.trainable or b.trainable,
                 evidence=(a.evidence + b.evidence)[-4:] if unit else ())


def tanh(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    """Also `sin`: values in [-1, 1]."""
    a = args[0] if args else TOP
    return Value(lo=-1.0, hi=1.0, dtype=a.dtype, trainable=a.trainable)


def softplus(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    a = args[0] if args else TOP
    return Value(lo=0.0, hi=INF, nonzero=True, dtype=a.dtype, trainable=a.trainable)


def passthrough(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    """Indexing, reshaping, selecting: the values survive, a simplex along a dim does not."""
    return _keep(args[0], simplex_dim=None) if args else TOP


def copy(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    return _keep(args[0]) if args else TOP


def cast(dtype: Optional[str]) -> Transfer:
    def transfer(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
        a = args[0] if args else TOP
        if a.mask or a.count:
            return _keep(a, dtype=dtype)
        return _keep(a, dtype=dtype, mask=False)
    return transfer


def count(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    return Value(lo=0.0, hi=INF, count=True, integer=True, zero="a count",
                 evidence=(_ev(line, "count"),))


def any_(args: Args, kw: Kw, codes: Codes, line: int) -> Value:
    return Value(lo=0.0, hi=1.0, mask=True, integer=True)


def _ev(line: int, reason: str):
    from .values import Evidence
    return Evidence(line, reason)


# Creation ops: (lo, hi, zero reason) of the values they produce.
CREATION = {
    "rand": (0.0, 1.0, RAND_ZERO),
    "rand_like": (0.0, 1.0, RAND_ZERO),
    "randn": (-INF, INF, None),
    "randn_like": (-INF, INF, None),
    "zeros": (0.0, 0.0, "zeros"),
    "zeros_like": (0.0, 0.0, "zeros"),
    "ones": (1.0, 1.0, None),
    "ones_like": (1.0, 1.0, None),
    "empty": (-INF, INF, None),
    "empty_like": (-INF, INF, None),
}

# Casts: the values survive, in another dtype.
_CASTS = {"half": "float16", "bfloat16": "bfloat16", "float": "float32", "double": "float64"}
# Ops that make a value exactly a stable function's output (`Value.form`).
_FORM_OPS = ("sigmoid", "softmax", "sub")

OPS: Dict[str, Transfer] = {
    "add": add, "sub": sub, "mul": mul, "div": div, "neg": neg, "pow": pow_,
    "exp": exp, "log": log, "log2": log, "log10": log,
    "log1p": lambda a, k, c, l: log([add([a[0] if a else TOP, interval(1.0, 1.0)], {}, {}, l)], {}, {}, l),
    "expm1": lambda a, k, c, l: replace(exp(a, k, c, l), lo=-1.0, nonzero=False),
    "sigmoid": sigmoid, "softmax": softmax, "log_softmax": lambda a, k, c, l: Value(hi=0.0),
    "logsigmoid": lambda a, k, c, l: Value(hi=0.0), "softplus": softplus,
    "relu": relu, "clamp": clamp, "clamp_min": clamp, "clamp_max": clamp_max, "abs": abs_, "square": square,
    "sqrt": sqrt, "rsqrt": lambda a, k, c, l: Value(lo=0.0, nonzero=True),
    "reciprocal": lambda a, k, c, l: div([interval(1.0, 1.0), a[0] if a else TOP], {}, {}, l),
    "sum": reduce_sum, "mean": reduce_mean, "max": reduce_max, "amax": reduce_max,
    "norm": norm, "linalg_norm": norm, "vector_norm": norm,
    "normalize": normalize, "cosine_similarity": cosine, "matmul": matmul,
    "tanh": tanh, "sin": tanh, "acos": lambda a, k, c, l: Value(lo=0.0, hi=math.pi),
    "asin": lambda a, k, c, l: Value(lo=-math.pi / 2, hi=math.pi / 2),
    "atan": lambda a, k, c, l: Value(lo=-math.pi / 2, hi=math.pi / 2),
    "var": lambda a, k, c, l: Value(lo=0.0, zero="a variance"),
    "std": lambda a, k, c, l: Value(lo=0.0, zero="a standard deviation"),
    "prod": lambda a, k, c, l: Value(lo=0.0 if a and a[0].lo >= 0 else -INF),
    # Shape, selection and copy ops: values pass through.
    **{name: passthrough for name in (
        "squeeze", "unsqueeze", "view", "view_as", "reshape", "reshape_as", "flatten",
        "transpose", "permute", "movedim", "swapaxes", "t", "expand",
        "expand_as", "gather", "index_select", "select", "narrow", "masked_select",
        "take_along_dim", "repeat", "flip", "roll", "chunk", "split", "unbind", "T", "mT",
    )},
    **{name: copy for name in ("clone", "detach", "detach_", "contiguous", "cuda", "cpu", "data")},
    **{name: cast(dtype) for name, dtype in _CASTS.items()},
    "bincount": count, "count_nonzero": count, "histc": count,
    "any": any_, "all": any_, "bool": lambda a, k, c, l: _keep(a[0], mask=True) if a else TOP,
    "long": lambda a, k, c, l: _keep(a[0], integer=True) if a else TOP,
    "int": lambda a, k, c, l: _keep(a[0], integer=True) if a else TOP,
}


# Ops whose result takes no gradient back to its operands: a detached copy, integer and
# boolean results, counts. (What the op is called on says why.)
GRADIENT_CUTS = {
    "detach": "`.detach()`", "detach_": "`.detach_()`", "data": "`.data`", "long": "an integer cast", "int": "an integer cast",
    "bool": "a boolean", "any": "a boolean", "all": "a boolean", "bincount": "a count",
    "count_nonzero": "a count", "histc": "a count",
}


# Where an op takes its integer indices (receiver or input first).
INDEX_OPERAND = {"gather": 2, "index_select": 2, "take_along_dim": 1}

# Methods that read a tensor out as Python numbers or an array: autograd does not follow.
NUMBER_METHODS = ("item", "tolist", "numpy")


def gradient(out: Value, name: Optional[str], args: Args, kw: Kw, line: int) -> Value:
    """`out` with the gradient fact an op's result has: none where the op cuts it or where
    no operand carries one (the first operand's reason is kept), else it may flow. Indices
    (`gather`'s, `index_select`'s) are integers: they carry none."""
    if name in GRADIENT_CUTS:
        return replace(out, nograd=Evidence(line, GRADIENT_CUTS[name]))
    if name in INDEX_OPERAND:
        at = INDEX_OPERAND[name]
        args = [a for i, a in enumerate(args) if i != at]
        kw = {k: v for k, v in kw.items() if k not in ("index", "indices")}
    operands = list(args) + list(kw.values())
    if operands and all(a.nograd is not None for a in operands):
        return out if out.nograd is not None else replace(out, nograd=operands[0].nograd)
    return out if out.nograd is None else replace(out, nograd=None)


def apply(name: str, args: Args, kw: Kw, codes: Codes, line: int) -> Optional[Value]:
    transfer = OPS.get(name)
    if transfer is None:
        return None
    out = transfer(args, kw, codes, line)
    if out.max_of is not None and transfer not in (passthrough, copy):
        out = replace(out, max_of=None)  # only indexing and copies keep "the maximum of x"
    if out.form is not None and not (transfer in (passthrough, copy) or name in _FORM_OPS or name in _CASTS):
        out = replace(out, form=None)  # `clamp`, `+ eps`...: no longer exactly the function's output
    norm_of = _norm_kept(name, transfer, args, kw)
    if out.norm_of != norm_of:
        out = replace(out, norm_of=norm_of)
    return gradient(out, name, args, kw, line)


def _norm_kept(name: str, transfer: Transfer, args: Args, kw: Kw) -> Optional[str]:
    """What is still a norm after this op (`Value.norm_of`): a view or copy of one, one plus
    something nonnegative or clamped from below (guarded against 0), a product of two."""
    if not args:
        return None
    a = args[0]
    if transfer in (passthrough, copy) or (name in ("clamp", "clamp_min") and "max" not in kw and len(args) < 3):
        return a.norm_of
    if name == "add" and len(args) == 2:
        norm, other = (a, args[1]) if a.norm_of is not None else (args[1], a)
        return norm.norm_of if other.lo >= 0 else None  # `+ eps`, a constant or a parameter
    if name == "mul" and len(args) == 2 and a.norm_of is not None and args[1].norm_of is not None:
        return "a product of norms"
    return None


def joined(values: List[Value]) -> Value:
    out: Optional[Value] = None
    for v in values:
        out = join(out, v)
    return out or TOP


__all__ = ["OPS", "CREATION", "GRADIENT_CUTS", "NUMBER_METHODS", "apply", "gradient", "EXP_OVERFLOW", "EXP_UNDERFLOW", "stated", "joined"]
