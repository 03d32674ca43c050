"""Value-range facts rules can ask about an expression.

These read one expression and the local names it uses (the syntactic layer). Facts that cross
statements, branches, calls and classes (a guard in an earlier statement, a softmax returned
by a method, a tensor made half precision elsewhere) come from `nanlint.analysis`, which
rules ask as well.

Two questions, both answered from what the code visibly builds (never from guesses about
names of unknown values):

- `can_be_zero(ctx, expr)`: can this value be exactly 0 *by construction*? Returns a short
  reason ("a ReLU output", "1 - a probability", "a ratio of counts", "a softmax output",
  "a sigmoid output", "clamp(min=0)") or None. None means "no evidence", not "never 0": a
  function parameter, an attribute or a model output is None.
- `is_guarded(ctx, expr)` / `guard(ctx, expr)`: is this value kept away from 0 (a clamp with a
  positive minimum, `+ eps`, `exp`, `softplus`, a positive constant, `torch.ones`), or is a 0
  in it intentional (the `torch.tril(torch.ones(n, n))` 0/1 mask whose log is the additive
  -inf attention mask)? `guard` says how, and records the epsilon when one is written so
  that a later rule can ask whether that epsilon survives float16 (`Guard.vanishes_in_float16`).

Helpers used by several rules: `positive_constant` (a literal, an epsilon-like name,
`torch.finfo(...).eps`), `probability_source` (a softmax/sigmoid output, also after indexing
or reshaping), `pass_through` (the tensor an indexing/reshaping/cast expression reads), and
`dtype_witness` (a short expression with the same dtype, for fixes that need `.dtype`).

Every function takes the FileContext and follows local names to the value last assigned
(`ctx.resolve`), carrying the bindings in force at that assignment, so
`h = F.relu(x); p = h / 2; torch.log(p)` is seen as the log of a ReLU output.

Choice about small epsilons (documented here because several rules depend on it):
`x + 1e-8` counts as guarded. In float32 it is (log(1e-8) = -18.4), and precision matters
more than count: code written for float32 is not reported by log/division rules. But 1e-8
rounds to 0 in float16 (every literal at or below 2**-25 = 2.98e-8 does), so the guard does
nothing there; `Guard.vanishes_in_float16` is True for such an epsilon, for the rule that
reports weak epsilons in half precision. (Measured, torch 2.13 CPU: `torch.log(x + eps)` on a
float16 zero is -inf for eps = 1e-8 and 2.98e-8, finite from 3e-8 on; its gradient 1/eps
overflows float16 to inf for every eps below 1/65504 = 1.53e-5.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, NamedTuple, Optional, Tuple

import libcst as cst

from ..core.context import Binding, FileContext, dotted_name, node_code, same_code, strip_parens
from ..core.ops import FINFO_FUNCTIONS, number_value, split_args

# At or below this, a literal rounds to 0 in float16 (half the smallest subnormal, 2**-24;
# 2**-25 itself is a tie and rounds to even, 0). Measured: 2.98e-8 -> 0, 2.99e-8 -> 5.96e-8.
FP16_ROUNDS_TO_ZERO = 2.0 ** -25

# How many local-variable hops and nested sub-expressions a question may follow.
_DEPTH = 8

Env = Optional[Dict[str, Binding]]

# A name that holds an epsilon: eps, EPS, _eps, eps1, epsilon, tiny, norm_eps, eps_log,
# layer_norm_eps, smooth (the Dice-loss smoothing term). Not `smoothing` (label smoothing).
_EPS_NAME = re.compile(
    r"^_*(eps|epsilon|tiny|smooth)(_?\d+|_\w*)?$|^\w+_(eps|epsilon|tiny)\d*$", re.IGNORECASE
)

# Attributes of `torch.finfo(...)` / `numpy.finfo(...)` that are positive.
_FINFO_POSITIVE = {"eps", "tiny", "smallest_normal", "resolution", "max"}

# Methods that only index, reshape, copy or cast a tensor: values pass through unchanged
# (up to rounding for casts), so "can be 0" and "is a probability" survive them.
_SHAPE_METHODS = {
    "squeeze", "unsqueeze", "view", "view_as", "reshape", "reshape_as", "flatten",
    "transpose", "permute", "movedim", "swapaxes", "t", "contiguous", "expand", "expand_as",
    "gather", "index_select", "select", "narrow", "masked_select", "take_along_dim",
    "clone", "detach",
}
_CAST_METHODS = {"float", "double", "half", "bfloat16", "to", "type", "type_as"}
_PASS_METHODS = _SHAPE_METHODS | _CAST_METHODS
_PASS_FUNCTIONS = {f"torch.{name}" for name in (
    "squeeze", "unsqueeze", "reshape", "flatten", "transpose", "permute", "movedim",
    "swapaxes", "t", "gather", "index_select", "select", "narrow", "masked_select",
    "take_along_dim", "clone", "detach",
)}
_PASS_ATTRIBUTES = {"T", "mT", "data"}

_FLOAT_DTYPES = {
    "torch.float", "torch.float32", "torch.float64", "torch.double", "torch.float16",
    "torch.half", "torch.bfloat16", "torch.FloatTensor", "torch.DoubleTensor",
    "torch.cuda.FloatTensor", "torch.cuda.DoubleTensor",
}
_COUNT_FUNCTIONS = {"torch.bincount", "torch.histc", "torch.count_nonzero"}
_COUNT_METHODS = {"bincount", "histc", "count_nonzero"}
_ONES = {"torch.ones", "torch.ones_like"}
_FULL = {"torch.full", "torch.full_like"}
_TENSOR_OF = {"torch.tensor", "torch.as_tensor", "torch.scalar_tensor"}
_MAXIMUM = {"torch.maximum", "torch.fmax", "torch.max"}
_TRIANGLE = {"torch.tril", "torch.triu"}
_RELU_LIKE = {"torch.nn.functional.relu6", "torch.relu_", "torch.nn.functional.relu_"}
_SOFTMAX_LIKE = {"torch.nn.functional.softmin"}
_POSITIVE_MODULE_CONSTANTS = {"math.pi", "math.e", "math.tau", "numpy.pi", "numpy.e", "torch.pi"}


# --------------------------------------------------------------------------- small pieces


class Positive(NamedTuple):
    """A value known to be > 0: `value` when written as a number, else None (an epsilon-like
    name, `torch.finfo(x.dtype).eps`)."""

    value: Optional[float]
    node: cst.BaseExpression


@dataclass(frozen=True)
class Guard:
    """How an expression is kept away from 0.

    kind: "clamp" (clamp/clamp_min/clip/maximum with a positive minimum), "epsilon"
    (`... + c` with c > 0), "positive" (exp, softplus, torch.ones, sums/products of guarded
    values), "constant" (a positive literal or constant tensor), "mask" (a 0/1 mask such as
    `torch.tril(torch.ones(n, n))`: its zeros are intended; log of it is the -inf mask).
    eps: the lower bound or epsilon where it is written as a number (None when it is a name
    or `torch.finfo(...)`, which adapts to the dtype or is unknown)."""

    kind: str
    node: cst.BaseExpression
    eps: Optional[float] = None

    @property
    def vanishes_in_float16(self) -> bool:
        """True where the written epsilon/minimum is 0 once rounded to float16 (<= 2.98e-8):
        a guard in float32, none in half precision."""
        return self.kind in ("clamp", "epsilon") and self.eps is not None and self.eps <= FP16_ROUNDS_TO_ZERO


def _resolve(ctx: FileContext, expr: cst.BaseExpression, env: Env) -> Tuple[cst.BaseExpression, Env]:
    """Strip parentheses and follow local names to their last assigned value."""
    expr = strip_parens(expr)
    if isinstance(expr, cst.Name):
        expr, env = ctx.resolve(expr, env)
        expr = strip_parens(expr)
    return expr, env


def _method(ctx: FileContext, node: cst.BaseExpression):
    """(method name, receiver, positional args, keyword args) for `recv.m(...)` where `recv`
    is a value (not an imported module such as `torch`), else None."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return None
    if ctx.qualname(node.func.value) is not None:
        return None
    split = split_args(node.args)
    if split is None:
        return None
    return node.func.attr.value, node.func.value, split[0], split[1]


def _function(ctx: FileContext, node: cst.BaseExpression):
    """(full name, positional args, keyword args) for a call of an imported function."""
    if not isinstance(node, cst.Call):
        return None
    full = ctx.qualname(node.func)
    if full is None:
        return None
    split = split_args(node.args)
    if split is None:
        return None
    return full, split[0], split[1]


def pass_through(ctx: FileContext, expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The tensor whose values `expr` merely indexes, reshapes, copies or casts
    (`p[:, 0]`, `p.gather(1, y)`, `p.squeeze(-1)`, `p.float()`, `torch.gather(p, 1, y)`,
    `p.T`), else None. Zeros and probabilities survive these operations."""
    expr = strip_parens(expr)
    if isinstance(expr, cst.Subscript):
        return expr.value
    if isinstance(expr, cst.Attribute) and expr.attr.value in _PASS_ATTRIBUTES:
        if ctx.qualname(expr.value) is None:
            return expr.value
        return None
    m = _method(ctx, expr)
    if m is not None:
        name, receiver, _, _ = m
        return receiver if name in _PASS_METHODS else None
    f = _function(ctx, expr)
    if f is not None and f[0] in _PASS_FUNCTIONS and f[1]:
        return f[1][0]
    return None


def looks_like_epsilon(name: str) -> bool:
    """`eps`, `self.eps`, `config.layer_norm_eps`, `EPSILON`, `tiny`, `smooth`: the last
    component of a name or attribute chain says it holds an epsilon."""
    return bool(_EPS_NAME.match(name.split(".")[-1]))


def _param_default(ctx: FileContext, name: str) -> Optional[cst.BaseExpression]:
    """The default value of parameter `name` of the innermost enclosing function."""
    for node in reversed(ctx.stack):
        if isinstance(node, cst.FunctionDef):
            p = node.params
            for param in list(p.params) + list(p.posonly_params) + list(p.kwonly_params):
                if param.name.value == name:
                    return param.default
            return None
    return None


def positive_constant(
    ctx: FileContext, expr: cst.BaseExpression, env: Env = None, depth: int = _DEPTH
) -> Optional[Positive]:
    """`expr` is a constant > 0: a positive literal (`1e-6`), a local or module constant that
    holds one (`eps = 1e-6`, `EPS = 1e-8`, `self.eps = 1e-5` in the class), a parameter whose
    default is one, an epsilon-like name we cannot see the value of (`eps`, `self.epsilon`),
    `torch.finfo(...).eps/.tiny`, `torch.tensor(2.0)`, `math.pi`, or a product/quotient/power
    of those. None otherwise (including 0 and negative constants)."""
    if depth <= 0:
        return None
    expr = strip_parens(expr)
    value = number_value(expr)
    if value is not None:
        return Positive(value, expr) if value > 0 else None
    if isinstance(expr, cst.Name):
        resolved, renv = ctx.resolve(expr, env)
        if resolved is not expr:
            return positive_constant(ctx, resolved, renv, depth - 1)
        bindings = env if env is not None else ctx.scope.bindings
        binding = bindings.get(expr.value)
        if binding is not None and not isinstance(binding, Binding):
            # A parameter: its default value, if it has one, tells its usual value.
            default = _param_default(ctx, expr.value)
            if default is not None:
                found = positive_constant(ctx, default, None, depth - 1)
                if found is not None:
                    return Positive(found.value, expr)
                if number_value(strip_parens(default)) is not None:
                    return None  # `eps=0.0`
        elif binding is None:
            constant = ctx.constant(expr.value)
            if constant is not None:
                return Positive(constant, expr) if constant > 0 else None
        # Unknown value (a parameter without a default, a loop target, `eps, k = ...`):
        # only its name can say it is an epsilon.
        return Positive(None, expr) if looks_like_epsilon(expr.value) else None
    if isinstance(expr, cst.Attribute):
        full = ctx.qualname(expr)
        if full in _POSITIVE_MODULE_CONSTANTS:
            return Positive(None, expr)
        if expr.attr.value in _FINFO_POSITIVE:
            f = _function(ctx, strip_parens(expr.value))
            if f is not None and f[0] in FINFO_FUNCTIONS:
                return Positive(None, expr)
        chain = dotted_name(expr)
        if chain is not None and full is None:
            constant = ctx.constant(chain)
            if constant is not None:
                return Positive(constant, expr) if constant > 0 else None
            if looks_like_epsilon(chain):
                return Positive(None, expr)
        return None
    f = _function(ctx, expr)
    if f is not None:
        full, positional, keywords = f
        if full in _TENSOR_OF:
            data = positional[0] if positional else keywords.get("data")
            if data is not None:
                return positive_constant(ctx, data, env, depth - 1)
        return None
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "float":
        if len(expr.args) == 1 and expr.args[0].keyword is None:
            arg = expr.args[0].value
            if isinstance(arg, cst.SimpleString) and arg.evaluated_value in ("inf", "+inf"):
                return None
            return positive_constant(ctx, arg, env, depth - 1)
        return None
    op = ctx.op(expr)
    if op is not None and op.name in ("mul", "div", "pow") and len(op.args) == 2 and not op.kwargs:
        left = positive_constant(ctx, op.args[0], env, depth - 1)
        if left is None:
            return None
        if op.name == "pow":
            exponent = number_value(strip_parens(op.args[1]))
            if left.value is not None and exponent is not None:
                try:
                    return Positive(left.value ** exponent, expr)
                except (OverflowError, ZeroDivisionError):
                    return None
            return Positive(None, expr)
        right = positive_constant(ctx, op.args[1], env, depth - 1)
        if right is None:
            return None
        if left.value is not None and right.value is not None:
            v = left.value * right.value if op.name == "mul" else left.value / right.value
            return Positive(v, expr)
        return Positive(None, expr)
    return None


def _sum_terms(ctx: FileContext, expr: cst.BaseExpression, out: List[cst.BaseExpression], depth: int) -> None:
    """The terms of a chain of additions (`a + b + eps`, `a.add(eps)`, `torch.add(a, b)`)."""
    expr = strip_parens(expr)
    op = ctx.op(expr)
    if depth > 0 and op is not None and op.name == "add" and len(op.args) == 2 and not op.kwargs:
        _sum_terms(ctx, op.args[0], out, depth - 1)
        _sum_terms(ctx, op.args[1], out, depth - 1)
    else:
        out.append(expr)


def _is_ones(ctx: FileContext, expr: cst.BaseExpression, env: Env, depth: int) -> bool:
    expr, env = _resolve(ctx, expr, env)
    f = _function(ctx, expr)
    if f is not None and f[0] in _ONES:
        return True
    m = _method(ctx, expr)
    if m is not None:
        if m[0] == "new_ones":
            return True
        if m[0] in _PASS_METHODS and depth > 0:
            return _is_ones(ctx, m[1], env, depth - 1)
    return False


def _is_mask(ctx: FileContext, expr: cst.BaseExpression, env: Env, depth: int) -> bool:
    """`torch.tril(torch.ones(n, n))`, `torch.ones(n, n).triu(1)`, `(a > b).float()`: a 0/1
    mask (possibly cast); its zeros are intended."""
    if depth <= 0:
        return False
    expr, env = _resolve(ctx, expr, env)
    if isinstance(expr, cst.Comparison):
        return True
    f = _function(ctx, expr)
    if f is not None and f[0] in _TRIANGLE and f[1]:
        return _is_ones(ctx, f[1][0], env, depth - 1)
    m = _method(ctx, expr)
    if m is not None:
        name, receiver = m[0], m[1]
        if name in ("tril", "triu"):
            return _is_ones(ctx, receiver, env, depth - 1)
        if name in _CAST_METHODS or name in ("bool", "long", "int"):
            return _is_mask(ctx, receiver, env, depth - 1)
    return False


# --------------------------------------------------------------------------- guards


def guard(ctx: FileContext, expr: cst.BaseExpression, env: Env = None, depth: int = _DEPTH) -> Optional[Guard]:
    """How `expr` is kept away from 0 (see Guard), or None.

    Recognized: `x.clamp(min=c)`, `torch.clamp(x, c, hi)`, `x.clip(c)`, `x.clamp_min(c)`,
    `torch.maximum(x, c)` with c a positive constant; `x + c` (any term of a sum) with c a
    positive constant or epsilon-like name (so `x.abs() + c`, `x ** 2 + c`, `x + 1`);
    `exp`, `softplus`, `torch.ones`, `torch.full(.., c)`; positive constants and constant
    tensors; the 0/1 mask idiom `torch.tril(torch.ones(n, n))`; products, quotients, powers,
    square roots, sums and means of guarded values; indexing, reshaping and casts of them; and
    all of these through local variables."""
    if depth <= 0:
        return None
    expr, env = _resolve(ctx, expr, env)
    constant = positive_constant(ctx, expr, env, depth)
    if constant is not None:
        return Guard("constant", expr, constant.value)
    if isinstance(expr, cst.Name):
        return None
    if _is_mask(ctx, expr, env, depth):
        return Guard("mask", expr)
    op = ctx.op(expr)
    if op is not None:
        name = op.name
        if name == "clamp" and op.args:
            low = op.arg(1, "min")
            found = positive_constant(ctx, low, env, depth - 1) if low is not None else None
            if found is not None:
                return Guard("clamp", expr, found.value)
            return None
        if name == "clamp_min" and op.args:
            low = op.arg(1, "min")
            found = positive_constant(ctx, low, env, depth - 1) if low is not None else None
            return Guard("clamp", expr, found.value) if found is not None else None
        if name == "add" and not op.kwargs:
            terms: List[cst.BaseExpression] = []
            _sum_terms(ctx, expr, terms, depth)
            for term in terms:
                found = positive_constant(ctx, term, env, depth - 1)
                if found is not None:
                    return Guard("epsilon", expr, found.value)
            inner = [guard(ctx, t, env, depth - 1) for t in terms]
            if inner and all(g is not None and g.kind != "mask" for g in inner):
                return Guard("positive", expr)
            return None
        if name in ("exp", "softplus"):
            return Guard("positive", expr)
        if name in ("mul", "div") and len(op.args) == 2 and not op.kwargs:
            left = guard(ctx, op.args[0], env, depth - 1)
            right = guard(ctx, op.args[1], env, depth - 1) if left is not None else None
            if left is not None and right is not None and "mask" not in (left.kind, right.kind):
                main = right if left.kind == "constant" else left
                return Guard(main.kind if main.kind != "constant" else "positive", expr, main.eps)
            return None
        if name in ("pow", "sqrt", "sum", "mean") and op.args:
            inner_guard = guard(ctx, op.args[0], env, depth - 1)
            if inner_guard is not None and inner_guard.kind != "mask":
                return Guard(inner_guard.kind if inner_guard.kind != "constant" else "positive",
                             expr, inner_guard.eps)
            return None
        return None
    f = _function(ctx, expr)
    if f is not None:
        full, positional, keywords = f
        if full in _ONES:
            return Guard("positive", expr)
        if full in _FULL:
            fill = positional[1] if len(positional) > 1 else keywords.get("fill_value")
            if fill is not None and positive_constant(ctx, fill, env, depth - 1) is not None:
                return Guard("positive", expr)
            return None
        if full in _MAXIMUM and len(positional) == 2:
            for side in positional:
                found = guard(ctx, side, env, depth - 1)
                if found is not None and found.kind != "mask":
                    return Guard("clamp", expr, found.eps)
            return None
    m = _method(ctx, expr)
    if m is not None and m[0] in ("new_ones",):
        return Guard("positive", expr)
    inner = pass_through(ctx, expr)
    if inner is not None:
        found = guard(ctx, inner, env, depth - 1)
        if found is not None:
            return Guard(found.kind, expr, found.eps)
    return None


def is_guarded(ctx: FileContext, expr: cst.BaseExpression, env: Env = None) -> bool:
    """True where `expr` is kept away from 0, or is a mask whose zeros are intended
    (see `guard`). An epsilon that vanishes in float16 still counts: ask
    `guard(...).vanishes_in_float16` to report that separately."""
    return guard(ctx, expr, env) is not None


# --------------------------------------------------------------------------- zeros


def probability_source(
    ctx: FileContext, expr: cst.BaseExpression, env: Env = None, depth: int = _DEPTH
) -> Optional[str]:
    """"softmax" or "sigmoid" where `expr` is such an output (also indexed, gathered,
    reshaped or cast, and through local variables), else None."""
    if depth <= 0:
        return None
    expr, env = _resolve(ctx, expr, env)
    op = ctx.op(expr)
    if op is not None:
        if op.name == "softmax":
            return "softmax"
        if op.name == "sigmoid" and len(op.args) == 1:
            return "sigmoid"
    f = _function(ctx, expr)
    if f is not None and f[0] in _SOFTMAX_LIKE:
        return "softmax"
    inner = pass_through(ctx, expr)
    if inner is not None:
        return probability_source(ctx, inner, env, depth - 1)
    return None


def _count_like(ctx: FileContext, expr: cst.BaseExpression, env: Env, depth: int) -> bool:
    """Counts, visibly: `torch.bincount(...)`, `torch.histc(...)`, `x.count_nonzero()`, a
    comparison (0/1), a sum of those, and these cast to float (`.float()`, `.double()`,
    `.to(torch.float32)`) or reshaped.

    A cast alone is not evidence: `relative_position.float() / max_exact` in T5-style
    relative-position buckets is 0 at distance 0, but its log is discarded by a
    `torch.where(is_small, ...)` and cast to an integer bucket (no gradient). All 17 NAN201
    candidates of that kind in transformers 4.46 were this idiom, so a cast of a value with
    no visible origin does not count."""
    if depth <= 0:
        return False
    expr, env = _resolve(ctx, expr, env)
    if isinstance(expr, cst.Comparison):
        return True
    f = _function(ctx, expr)
    if f is not None:
        if f[0] in _COUNT_FUNCTIONS:
            return True
        if f[0] == "torch.sum" and f[1]:
            return _count_like(ctx, f[1][0], env, depth - 1)
        return False
    m = _method(ctx, expr)
    if m is None:
        return False
    name, receiver, positional, keywords = m
    if name in _COUNT_METHODS:
        return True
    if name in ("sum", "long", "int", "bool") or name in _SHAPE_METHODS:
        return _count_like(ctx, receiver, env, depth - 1)
    if name in ("float", "double") and not positional:
        return _count_like(ctx, receiver, env, depth - 1)
    if name in ("to", "type"):
        for candidate in positional + [keywords.get("dtype")]:
            if candidate is not None and ctx.qualname(candidate) in _FLOAT_DTYPES:
                return _count_like(ctx, receiver, env, depth - 1)
        return False
    return False


def can_be_zero(
    ctx: FileContext, expr: cst.BaseExpression, env: Env = None, depth: int = _DEPTH
) -> Optional[str]:
    """A short reason why `expr` can be exactly 0 by construction, or None.

    - "a ReLU output": `F.relu(x)`, `x.relu()`, `torch.relu(x)`, `F.relu6(x)`;
    - "clamp(min=0)": `x.clamp(min=0)`, `x.clamp(0, 1)`, `x.clip(0)`, `torch.clamp_min(x, 0)`;
    - "a softmax output" / "a sigmoid output": softmax (softmin) and sigmoid underflow to 0;
    - "1 - a probability": `1 - p` with p a softmax/sigmoid output (it rounds to 1);
    - "a ratio of counts": `torch.bincount(x) / n`, `correct.float() / n` with
      `correct = (pred == y).sum()`, `(a == b).float().mean()`;
    and these again through indexing, reshaping, casts, products (`relu(x) * w`), the
    numerator of a division, and local variables. Values with no visible origin (function
    parameters, attributes, module outputs) give None."""
    if depth <= 0:
        return None
    expr, env = _resolve(ctx, expr, env)
    if isinstance(expr, cst.Name):
        return None
    op = ctx.op(expr)
    if op is not None:
        name = op.name
        if name == "relu":
            return "a ReLU output"
        if name in ("clamp", "clamp_min") and op.args:
            low = op.arg(1, "min")
            if low is not None and number_value(strip_parens(low)) == 0:
                return "clamp(min=0)"
            return None
        if name == "softmax":
            return "a softmax output"
        if name == "sigmoid" and len(op.args) == 1:
            return "a sigmoid output"
        if name == "sub" and len(op.args) == 2 and not op.kwargs:
            if number_value(strip_parens(op.args[0])) == 1.0 and probability_source(
                ctx, op.args[1], env, depth - 1
            ):
                return "1 - a probability"
            return None
        if name == "mul" and len(op.args) == 2 and not op.kwargs:
            for factor in op.args:
                reason = can_be_zero(ctx, factor, env, depth - 1)
                if reason is not None:
                    return reason
            return None
        if name == "div" and len(op.args) == 2 and not op.kwargs:
            numerator, denominator = op.args
            reason = can_be_zero(ctx, numerator, env, depth - 1)
            if reason is not None:
                return reason
            if _count_like(ctx, numerator, env, depth - 1):
                return "a ratio of counts"
            # `c / c.sum()` alone is no evidence: yolov5's class-frequency prior
            # `torch.log(cf / cf.sum())` takes `cf` as a parameter (smoothed by +1 upstream).
            return None
        if name == "mean" and len(op.args) == 1 and not op.kwargs:
            if _count_like(ctx, op.args[0], env, depth - 1) and _is_mask(ctx, op.args[0], env, depth - 1):
                return "a ratio of counts"
            return None
        return None
    f = _function(ctx, expr)
    if f is not None:
        if f[0] in _RELU_LIKE:
            return "a ReLU output"
        if f[0] in _SOFTMAX_LIKE:
            return "a softmax output"
    m = _method(ctx, expr)
    if m is not None and m[0] == "relu_":
        return "a ReLU output"
    if isinstance(expr, cst.Subscript) and selects_positive(ctx, expr, env):
        return None
    inner = pass_through(ctx, expr)
    if inner is not None:
        return can_be_zero(ctx, inner, env, depth - 1)
    return None


def selects_positive(ctx: FileContext, expr: cst.Subscript, env: Env = None) -> bool:
    """`p[p > 0]`, `p[mask]` with `mask = p > 0` (also `!= 0`, `> eps`, `>= c` with c > 0, and
    such a test joined to another with `&`), `p[p.nonzero(as_tuple=True)]`, `p[p.bool()]`,
    `p[torch.nonzero(p, as_tuple=True)]`: the index keeps only nonzero entries of p, so the
    result has no zeros. A test of anything but p (`p[q > 0]`, `p[labels == c]`) says
    nothing about p's zeros."""
    return any(
        isinstance(element.slice, cst.Index) and _keeps_nonzero(ctx, element.slice.value, expr.value, env)
        for element in expr.slice
    )


def _keeps_nonzero(ctx: FileContext, index: cst.BaseExpression, indexed: cst.BaseExpression,
                   env: Env, depth: int = 3) -> bool:
    if depth <= 0:
        return False
    value, env = _resolve(ctx, index, env)
    value = strip_parens(value)
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.BitAnd):
        return any(_keeps_nonzero(ctx, side, indexed, env, depth - 1) for side in (value.left, value.right))
    if isinstance(value, cst.Call):
        func = value.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("nonzero", "bool") \
                and ctx.qualname(func) is None:
            return same_code(func.value, indexed)
        if ctx.qualname(func) == "torch.nonzero" and value.args:
            return same_code(value.args[0].value, indexed)
        return False
    if not isinstance(value, cst.Comparison) or len(value.comparisons) != 1:
        return False
    if not same_code(value.left, indexed):
        return False
    target = value.comparisons[0]
    bound = strip_parens(target.comparator)
    number = number_value(bound)
    if isinstance(target.operator, cst.NotEqual) and number == 0:
        return True
    if isinstance(target.operator, cst.GreaterThan) and (
        number == 0 or positive_constant(ctx, bound, env) is not None
    ):
        return True
    return isinstance(target.operator, cst.GreaterThanEqual) and positive_constant(ctx, bound, env) is not None


# --------------------------------------------------------------------------- for fixes


_DTYPE_KEEPING_OPS = {"relu", "clamp", "clamp_min", "sigmoid"}


def dtype_witness(ctx: FileContext, expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """A name or attribute chain with the same (floating) dtype as `expr`, read where `expr`
    is written (no local-variable following), so that a fix can say
    `torch.finfo(<witness>.dtype)` without repeating a computation: `p` for `p`, `probs` for
    `probs[:, 0]`, `x` for `F.relu(x)` and `x.clamp(min=0)`, `logits` for
    `1 - torch.softmax(logits, -1)`. None where the dtype is not evident (casts, divisions by
    tensors, a softmax with `dtype=`)."""
    expr = strip_parens(expr)
    if isinstance(expr, cst.Name):
        return expr
    if isinstance(expr, cst.Attribute):
        if dotted_name(expr) is not None and ctx.qualname(expr) is None:
            return expr
        return None
    if isinstance(expr, cst.Subscript):
        return dtype_witness(ctx, expr.value)
    op = ctx.op(expr)
    if op is not None:
        if op.name in _DTYPE_KEEPING_OPS and op.args:
            return dtype_witness(ctx, op.args[0])
        if op.name == "softmax" and op.args and "dtype" not in op.kwargs:
            return dtype_witness(ctx, op.args[0])
        if op.name in ("sub", "mul", "div") and len(op.args) == 2 and not op.kwargs:
            left, right = (strip_parens(a) for a in op.args)
            if number_value(left) is not None and op.name != "div":
                return dtype_witness(ctx, right)
            if number_value(right) is not None:
                return dtype_witness(ctx, left)
        return None
    f = _function(ctx, expr)
    if f is not None and f[0] in _RELU_LIKE and f[1]:
        return dtype_witness(ctx, f[1][0])
    m = _method(ctx, expr)
    if m is not None and m[0] in _SHAPE_METHODS:
        return dtype_witness(ctx, m[1])
    return None


__all__ = [
    "FP16_ROUNDS_TO_ZERO",
    "Guard",
    "Positive",
    "can_be_zero",
    "dtype_witness",
    "guard",
    "is_guarded",
    "looks_like_epsilon",
    "pass_through",
    "positive_constant",
    "probability_source",
]


# Ops whose output is never negative.
_NONNEGATIVE_OUTPUT = {"abs", "relu", "square", "exp", "sigmoid", "softmax", "softplus", "sqrt"}


def sign(ctx: FileContext, expr: cst.BaseExpression, env: Env = None, depth: int = _DEPTH) -> Optional[str]:
    """"nonneg" or "nonpos" where the sign of `expr` is evident from how it is built
    (`-x.pow(2) / (2 * sigma ** 2)` is "nonpos"), else None. Used to see that an `exp`
    cannot overflow: the Gaussian `exp(-d**2 / s)` is at most 1."""
    if depth <= 0:
        return None
    expr, env = _resolve(ctx, expr, env)
    value = number_value(expr)
    if value is not None:
        return "nonneg" if value >= 0 else "nonpos"
    if positive_constant(ctx, expr, env, depth - 1) is not None:
        return "nonneg"
    op = ctx.op(expr)
    if op is None:
        return None
    flip = {"nonneg": "nonpos", "nonpos": "nonneg"}
    if op.name in _NONNEGATIVE_OUTPUT:
        return "nonneg"
    if op.name == "neg" and len(op.args) == 1:
        inner = sign(ctx, op.args[0], env, depth - 1)
        return flip.get(inner) if inner else None
    if len(op.args) != 2 or op.kwargs:
        return None
    left, right = op.args
    if op.name == "pow":
        exponent = number_value(strip_parens(right))
        if exponent is not None and exponent == int(exponent) and int(exponent) % 2 == 0:
            return "nonneg"
        return "nonneg" if sign(ctx, left, env, depth - 1) == "nonneg" else None
    if op.name in ("mul", "div"):
        if op.name == "mul" and ctx.code(strip_parens(left)) == ctx.code(strip_parens(right)):
            return "nonneg"  # x * x
        a, b = sign(ctx, left, env, depth - 1), sign(ctx, right, env, depth - 1)
        if a is None or b is None:
            return None
        return "nonneg" if a == b else "nonpos"
    if op.name == "add":
        a, b = sign(ctx, left, env, depth - 1), sign(ctx, right, env, depth - 1)
        return a if a is not None and a == b else None
    if op.name == "sub":
        a, b = sign(ctx, left, env, depth - 1), sign(ctx, right, env, depth - 1)
        return a if a is not None and b == flip[a] else None
    return None
