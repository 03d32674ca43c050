"""Statistics written by hand: normalization without an epsilon (NAN205), variance as
E[x^2] - E[x]^2 (NAN118), the log of a product (NAN117), atan of a ratio (NAN114), an
unbiased std over a mini-batch that can hold one sample (NAN123), and a sinc as
`sin(k x) / x` (NAN124)."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from .. import analysis
from ..core.context import FileContext, is_atom, node_code, same_code, strip_parens
from ..core.ops import Op, number_value
from ..analysis.ranges import guard
from ..analysis import batches, conditions, dtypes, guards
from .base import SAFE, UNSAFE, Rule

Env = Optional[dict]

_EPS = "1e-5"
_DEPTH = 5


def _resolve(ctx: FileContext, expr: cst.BaseExpression, env: Env) -> Tuple[cst.BaseExpression, Env, bool]:
    """Strip parentheses and follow a local name; also whether a name was followed."""
    expr = strip_parens(expr)
    if isinstance(expr, cst.Name):
        value, new_env = ctx.resolve(expr, env)
        if value is not expr:
            return strip_parens(value), new_env, True
    return expr, env, False


def _wrapped(ctx: FileContext, node: cst.BaseExpression) -> str:
    """The source of `node`, parenthesized unless it is an atom."""
    text = ctx.code(node)
    return text if is_atom(node) else f"({text})"


def _canon(ctx: FileContext, node: cst.BaseExpression, atom: bool = False) -> str:
    canonical = ctx.canonical(node)
    text = node_code(canonical)
    if atom and not is_atom(canonical):
        text = f"({text})"
    return text


def _squared(ctx: FileContext, expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """X for `X ** 2`, `X.pow(2)`, `torch.square(X)`, `X * X`, else None."""
    op = ctx.bare_op(expr)
    if op is None or op.kwargs:
        return None
    if op.name == "pow" and len(op.args) == 2 and number_value(strip_parens(op.args[1])) == 2.0:
        return op.args[0]
    if op.name == "square" and len(op.args) == 1:
        return op.args[0]
    if op.name == "mul" and len(op.args) == 2 and same_code(op.args[0], op.args[1]):
        return op.args[0]
    return None


# --------------------------------------------------------------------------- NAN205


def _spread(ctx: FileContext, expr: cst.BaseExpression, env: Env = None, depth: int = _DEPTH) -> Optional[str]:
    """"var" or "std" where `expr` is visibly a variance / standard deviation with nothing
    keeping it away from 0 (`x.var()`, `torch.std(x, 1)`, `torch.var_mean(x)[0]`,
    `((x - m) ** 2).mean(-1)`, `torch.sqrt(var)`, through local names), else None."""
    if depth <= 0:
        return None
    if guard(ctx, expr, env) is not None:
        return None
    expr, env, _ = _resolve(ctx, expr, env)
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1:
        index = expr.slice[0].slice
        inner = ctx.bare_op(expr.value)
        if (
            inner is not None
            and inner.name in ("var_mean", "std_mean")
            and isinstance(index, cst.Index)
            and number_value(index.value) == 0.0
        ):
            return inner.name[:3]
        return None
    op = ctx.bare_op(expr)
    if op is None:
        return None
    if op.name in ("var", "std"):
        return None if dtypes.numpy_array(ctx, op.args[0], env) else op.name
    if op.name == "mean" and op.args:
        squared, senv, _ = _resolve(ctx, op.args[0], env)
        base = _squared(ctx, squared)
        if base is not None:
            diff = ctx.bare_op(_resolve(ctx, base, senv)[0])
            if diff is not None and diff.name == "sub":
                return "var"
        return None
    if op.name == "sqrt" and len(op.args) == 1 and not op.kwargs:
        return "std" if _spread(ctx, op.args[0], env, depth - 1) == "var" else None
    if op.name == "pow" and len(op.args) == 2 and number_value(strip_parens(op.args[1])) == 0.5:
        return "std" if _spread(ctx, op.args[0], env, depth - 1) == "var" else None
    return None


def _normalizes(ctx: FileContext, numerator: cst.BaseExpression, denominator: cst.BaseExpression) -> bool:
    """Whether `numerator / std` normalizes data: a centered value (`x - mean`), the tensor
    whose spread is the denominator (`x / x.std()`), or a constant (`1 / std`). A stored
    target scale over a fresh std (`target_std / emb.std()`, diffusers' textual-inversion
    rescale) only matches one scale to another."""
    value = strip_parens(ctx.value_of(strip_parens(numerator)))
    if number_value(value) is not None:
        return True
    op = ctx.bare_op(value)
    if op is not None and op.name == "sub":
        return True
    return ctx.code(strip_parens(numerator)) in ctx.code(denominator) or (
        value is not numerator and ctx.code(value) in ctx.code(ctx.value_of(strip_parens(denominator)))
    )


class NormalizationWithoutEpsilon(Rule):
    code = "NAN205"
    kind = "value"
    default_enabled = False
    untuned_precision = (
        "Measured earlier by the same claim, on the untuned precision corpus (`benchmarks/precision/`: 86 PyPI packages never used to tune the rules, split by a hash of the package name; every finding read with its function and callers and judged by the project's standard), 0 of 5 on the test split (0 of 6 on the tune split), below the 90% bar. "
        "The false alarms: the std of random initial weights, of a linspace, of whole waveforms at inference, and a statistic that only feeds a comparison. Turn it on with `--extend-select NAN205` where such values are not in play."
    )
    fails_in = 'all; float16 even with eps = 1e-5'
    name = "normalization-without-epsilon"
    message = (
        "Division by a standard deviation (or `rsqrt` of a variance) with no epsilon: a constant "
        "input has variance 0, so the result is inf/NaN and so is its gradient; add an epsilon "
        "or use `F.layer_norm`"
    )
    fix_applicability = UNSAFE
    fix_title = "Add an epsilon (1e-5) to the variance / standard deviation"
    # Every spread it reports is a var/std call or a hand-written mean of squares.
    triggers = r"\b(?:var|std|var_mean|std_mean|mean)\s*\("
    summary = "`x / x.std()`, `rsqrt(x.var())` with no epsilon: inf/NaN on a constant input."
    why = """\
A variance is exactly 0 whenever the values it is taken over are all equal: a padded
row, a blank image, a feature that is constant in a batch, a group of one. `rsqrt(0)` is
inf, `x - mean` is 0, and `0 * inf` (or `0 / 0` for `(x - mean) / std`) is NaN: the whole
normalized row is NaN in the forward pass, and so is every gradient flowing through it.
Nearly constant inputs are almost as bad: the gradient of `rsqrt(var)` grows as `var ** -1.5`.

The built-in layers (`F.layer_norm`, `nn.LayerNorm`, `nn.BatchNorm*`, `F.group_norm`,
`F.instance_norm`) add `eps` (1e-5 by default) inside the square root and compute their
statistics in float32 on half inputs. A hand-written normalization should do the same.
An epsilon of 1e-5 is not enough in float16 by itself, though: on a constant row the
gradient is about `1 / sqrt(1e-5) * n` (1107 for 8 values in float32), and in float16 the
intermediate `rsqrt(var + 1e-5) ** 3` term overflows: the measured gradient is NaN. Compute
the statistics in float32 (`x.float()`), or call `F.layer_norm`, which does so.

Not reported: a variance or std that has an epsilon added (`x.var() + eps`,
`torch.sqrt(var + 1e-6)`, `std + self.eps`), that is clamped (`std.clamp(min=1e-6)`,
`torch.maximum(std, eps)`), and values of unknown origin (`self.std`, a parameter): the rule
reports only a spread it can see being computed.
"""
    example = """\
```python
import torch

def standardize(x):
    return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)

def rms_scale(h):
    var = h.pow(2).mean(-1, keepdim=True)
    return h * torch.rsqrt(var)

def whiten(x):
    return (x - x.mean(0)) * torch.rsqrt(x.var(0))
```"""
    use_instead = """\
```python
import torch
import torch.nn.functional as F

def standardize(x):
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5)

def rms_scale(h):
    var = h.float().pow(2).mean(-1, keepdim=True)
    return h * torch.rsqrt(var + 1e-6).to(h.dtype)

def whiten(x):
    return F.layer_norm(x, x.shape[-1:])  # when normalizing over the last dimension
```"""
    measured = """\
A row of 8 equal values (3.0), torch 2.13 CPU. Gradient of `sum(y * arange(8))` w.r.t. x.

| expression | dtype | forward | gradient |
|---|---|---|---|
| `(x - x.mean()) * torch.rsqrt(x.var())` | float32, float16, bfloat16 | NaN | NaN |
| `(x - x.mean()) / x.std()` | float32, float16, bfloat16 | NaN | NaN |
| `(x - x.mean()) * torch.rsqrt(x.var(unbiased=False) + 1e-5)` | float32 | 0 | -1107, -791, -474, ... |
| same | bfloat16 | 0 | -1104, -788, -472, ... |
| same | **float16** | 0 | **NaN** |
| same, row 3.000 + 0.001 * arange(8) | **float16** | finite | **inf** |
| `(x - x.mean()) / (x.std() + 1e-5)` | float32 | 0 | -3.5e5, -2.5e5, ... |
| same | **float16** | 0 | **-inf, NaN** |
| `F.layer_norm(x, (8,))` | float16 | 0 | -1107, -790.5, -474.5, ... |
| the `rsqrt(var + 1e-5)` form computed on `x.float()`, cast back | float16 | 0 | -1107, -791, -474.5, ... |
"""
    fix_notes = """\
Unsafe: adding an epsilon changes every value (slightly where the variance is large,
completely where it is near 0, which is the point). The fix adds `1e-5` inside `rsqrt` /
`sqrt` (`torch.rsqrt(var)` -> `torch.rsqrt(var + 1e-5)`) and to a standard deviation used
as a divisor (`/ std` -> `/ (std + 1e-5)`), the epsilon `nn.LayerNorm` uses. It makes the
forward pass finite in every dtype and the float32/bfloat16 gradient finite; the float16
gradient on a (nearly) constant row still overflows (see the table): for half-precision
training compute the statistics in float32 or use `F.layer_norm` / `nn.LayerNorm`. Choose a
larger epsilon where the data's scale calls for it.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.LayerNorm.html",
        "https://pytorch.org/docs/stable/generated/torch.rsqrt.html",
        "https://pytorch.org/docs/stable/generated/torch.std.html",
    )

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        op = ctx.bare_op(node)
        if op is None or op.kwargs:
            return
        if op.name == "rsqrt" and len(op.args) == 1:
            if _spread(ctx, op.args[0]) != "var":
                return
            target = op.args[0]
            edit = self._add_eps(ctx, target, inside_call=op.style == "function")
            fixed = self._fixed_rsqrt(ctx, op)
        elif op.name == "div" and len(op.args) == 2:
            denominator = op.args[1]
            if _spread(ctx, denominator) != "std":
                return
            if _spread(ctx, op.args[0]) is not None:
                # `std_text / std_cfg`: matching one spread to another (diffusers'
                # guidance rescale), not normalizing data; both spreads of model outputs.
                return
            if not _normalizes(ctx, op.args[0], denominator):
                return
            edit, fixed = self._div_fix(ctx, op, denominator)
        else:
            return
        if conditions.guarded_by_condition(ctx, conditions.names_read(ctx, op.args[-1], follow=False)):
            return  # `if (var < eps).any(): return ...` earlier, or an enclosing test
        ctx.report(
            self,
            node,
            edits=(edit,) if edit is not None else (),
            probe=ctx.expression_probe(ctx.canonical(node), fixed),
        )

    def _add_eps(self, ctx: FileContext, target: cst.BaseExpression, inside_call: bool):
        text = ctx.code(target) + f" + {_EPS}"
        if not inside_call and not getattr(target, "lpar", None):
            text = f"({text})"
        return ctx.replace(target, text)

    def _fixed_rsqrt(self, ctx: FileContext, op: Op) -> cst.BaseExpression:
        return cst.parse_expression(f"torch.rsqrt({_canon(ctx, op.args[0])} + {_EPS})")

    def _div_fix(self, ctx: FileContext, op: Op, denominator: cst.BaseExpression):
        numerator = _canon(ctx, op.args[0], atom=True)
        bottom = strip_parens(denominator)
        inner = ctx.bare_op(bottom)
        if inner is not None and inner.name == "sqrt" and len(inner.args) == 1 and not inner.kwargs:
            edit = self._add_eps(ctx, inner.args[0], inside_call=inner.style == "function")
            fixed = f"{numerator} / torch.sqrt({_canon(ctx, inner.args[0])} + {_EPS})"
        else:
            text = ctx.code(denominator) + f" + {_EPS}"
            if op.style == "operator" and not getattr(denominator, "lpar", None):
                text = f"({text})"  # `a / std` -> `a / (std + 1e-5)`; `a.div(std + 1e-5)`
            edit = ctx.replace(denominator, text)
            fixed = f"{numerator} / ({_canon(ctx, denominator)} + {_EPS})"
        return edit, cst.parse_expression(fixed)


# --------------------------------------------------------------------------- NAN118

_MEAN_KEYWORDS = {"dim", "keepdim"}


def _mean_parts(ctx: FileContext, expr: cst.BaseExpression) -> Optional[Tuple[Op, cst.BaseExpression]]:
    """(the mean op, its operand) for `X.mean(...)`/`torch.mean(X, ...)` with only dim /
    keepdim arguments."""
    op = ctx.bare_op(expr)
    if op is None or op.name != "mean" or not op.args or set(op.kwargs) - _MEAN_KEYWORDS:
        return None
    if len(op.args) > 3:
        return None
    return op, op.args[0]


def _same_dims(a: Op, b: Op) -> bool:
    if len(a.args) != len(b.args) or set(a.kwargs) != set(b.kwargs):
        return False
    if any(not same_code(x, y) for x, y in zip(a.args[1:], b.args[1:])):
        return False
    return all(same_code(a.kwargs[k], b.kwargs[k]) for k in a.kwargs)


def _cancellation(ctx: FileContext, node: cst.BaseExpression):
    """(mean of the squares, mean of X, X, whether a local name was followed) for
    `E[X^2] - E[X]^2`, else None."""
    op = ctx.bare_op(node)
    if op is None or op.name != "sub" or len(op.args) != 2 or op.kwargs:
        return None
    left, _, left_local = _resolve(ctx, op.args[0], None)
    right, _, right_local = _resolve(ctx, op.args[1], None)
    first = _mean_parts(ctx, left)
    if first is None:
        return None
    mean_sq, squared = first
    base = _squared(ctx, strip_parens(squared))
    if base is None:
        return None
    mean_of = _squared(ctx, right)
    if mean_of is None:
        return None
    mean_of, _, local = _resolve(ctx, mean_of, None)
    second = _mean_parts(ctx, mean_of)
    if second is None:
        return None
    right_local = right_local or local
    mean_x, x = second
    if not same_code(x, base) or not _same_dims(mean_sq, mean_x):
        return None
    return mean_sq, base, left_local or right_local


class VarianceByCancellation(Rule):
    code = "NAN118"
    kind = "form"
    default_enabled = False
    untuned_precision = (
        "The tune half's false alarm is a synchronized batch norm whose sums span processes, "
        'where the local `var` is not the same quantity.'
    )
    fails_in = 'float32, float16 (cancellation)'
    name = "variance-by-cancellation"
    message = (
        "Variance computed as `E[x^2] - E[x]^2`: the two terms cancel, so for data far from 0 "
        "the result has no correct digits and can be negative (sqrt/rsqrt of it is NaN); use "
        "`x.var(dim, correction=0)`"
    )
    fix_applicability = SAFE
    fix_title = "Use `var(..., correction=0)`"
    triggers = r"\bmean\s*\("
    summary = "`(x ** 2).mean() - x.mean() ** 2`: catastrophic cancellation, negative variance."
    why = """\
`E[x^2] - E[x]^2` is the variance in exact arithmetic, but in floating point both terms are
about `mean ** 2` and their difference is the small number wanted. With data at 1000 and a
spread of 0.01, float32 keeps about 7 digits of `1e6`, so the difference is rounding noise
of size 0.06 around a true variance of 1e-4: measured -0.125. A negative variance makes
`sqrt`, `rsqrt` and `std` NaN; a zero one divides by zero. In float16 `x ** 2` overflows at
|x| > 256 (inf - inf = NaN), and bfloat16 rounds both terms to the same number (0).

`torch.var(x, dim, correction=0)` is the same population variance computed from `x - mean`
(two passes / Welford), accurate to the last digits whatever the offset.
"""
    example = """\
```python
def batch_stats(x):
    mean = x.mean(0)
    var = (x ** 2).mean(0) - x.mean(0) ** 2
    return mean, var
```"""
    use_instead = """\
```python
def batch_stats(x):
    mean = x.mean(0)
    var = x.var(0, correction=0)
    return mean, var
```"""
    measured = """\
4096 values `c + 0.01 * randn` (true variance 1.0e-4), torch 2.13 CPU.

| c | dtype | `(x ** 2).mean() - x.mean() ** 2` | `x.var(correction=0)` |
|---|---|---|---|
| 10 | float32 | 1.14e-4 (14% off) | 1.04e-4 |
| 100 | float32 | **0** | 1.01e-4 |
| 1000 | float32 | **-0.125** (sqrt: NaN) | 9.93e-5 |
| 10 | float16 | **0** | 1.02e-4 |
| 1000 | float16 | **NaN** (`x ** 2` overflows) | 0 (below float16 resolution of the mean) |
| 10, 100, 1000 | bfloat16 | **0** | 4.8e-6, 0, 0 |
"""
    fix_notes = """\
Safe: `var(correction=0)` divides by n as `mean` does, so the value is the same in exact
arithmetic; the dimensions and `keepdim` are carried over (a positional `keepdim` is written
as a keyword, since `torch.var(x, 1, True)` would read `True` as `unbiased`). Reported only
where both means reduce over the same dimensions. Through local variables the finding has
no fix.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.var.html",
        "https://en.wikipedia.org/wiki/Algorithms_for_calculating_variance",
    )

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        found = _cancellation(ctx, node)
        if found is None or guards.clamped_nonneg_where_used(ctx, node):
            return
        mean, x, through_local = found
        source_args = self._args(mean, ctx.code)
        canon_args = self._args(mean, lambda n: node_code(ctx.canonical(n)))
        x_canon = _canon(ctx, x)
        fixed = cst.parse_expression(f"torch.var({', '.join([x_canon] + canon_args)})")
        edits: Tuple = ()
        if not through_local:
            if mean.style == "function":
                func, imports = ctx.spell("torch.var")
                text = f"{func}({', '.join([ctx.code(strip_parens(x))] + source_args)})"
                edits = (ctx.replace(node, text),) + imports
            else:
                text = f"{_wrapped(ctx, x)}.var({', '.join(source_args)})"
                edits = (ctx.replace(node, text),)
        ctx.report(self, node, edits=edits, probe=ctx.expression_probe(ctx.canonical(node), fixed))

    @staticmethod
    def _args(mean: Op, code) -> List[str]:
        out: List[str] = []
        if len(mean.args) > 1:
            out.append(code(mean.args[1]))
        elif "dim" in mean.kwargs:
            out.append("dim=" + code(mean.kwargs["dim"]))
        if len(mean.args) > 2:
            out.append("keepdim=" + code(mean.args[2]))
        elif "keepdim" in mean.kwargs:
            out.append("keepdim=" + code(mean.kwargs["keepdim"]))
        out.append("correction=0")
        return out


# --------------------------------------------------------------------------- NAN117


class LogOfProd(Rule):
    code = "NAN117"
    kind = "form"
    default_enabled = False
    untuned_precision = (
        'The one finding is a log of a product of probabilities; too few findings to measure.'
    )
    fails_in = 'all; float16 first (product underflow)'
    name = "log-of-prod"
    message = (
        "`log` of a product: the product of many factors below 1 underflows to 0 (log = -inf, "
        "gradient NaN) long before the log is small; sum the logs instead"
    )
    fix_applicability = SAFE
    fix_title = "Sum the logs: `log(p).sum(dim)`"
    triggers = r"\bprod\s*\("
    summary = "`torch.log(torch.prod(p, d))`: the product underflows to 0, log is -inf; use `log(p).sum(d)`."
    why = """\
A product of factors below 1 shrinks geometrically: 100 probabilities of 0.3 multiply to
5e-53, below float32's smallest subnormal (1.4e-45), so `prod` returns exactly 0 and `log`
of it is -inf where the true value is -120.4. Float16 underflows after only about 10 such
factors (0.3 ** 10 = 5.9e-6 is subnormal there, losing digits; the gradient is already
inf), and bfloat16 has float32's range. The gradient of the log through the underflowed
product is NaN (0 * inf). Products of factors above 1 overflow the same way.

`log(p).sum(d)` never forms the product: each log is moderate and the sum of 100 of them is
-120.4, exactly what was meant. The rewrite is exact for positive factors. For factors that
can be negative it is not: `log(prod(p))` of two negative factors is finite, while the sum
of their logs is NaN; the fix is then marked unsafe.
"""
    example = """\
```python
import torch

def sequence_log_likelihood(token_probs):
    return torch.log(torch.prod(token_probs, dim=-1))
```"""
    use_instead = """\
```python
import torch

def sequence_log_likelihood(token_probs):
    return torch.log(token_probs).sum(dim=-1)
```"""
    measured = """\
n equal factors 0.3, torch 2.13 CPU (true value n * log(0.3)).

| n | dtype | `torch.log(torch.prod(p))` | its gradient | `torch.log(p).sum()` | its gradient |
|---|---|---|---|---|---|
| 50 | float32 | -60.1986 | 3.333 | -60.1986 | 3.333 |
| 100 | float32 | **-inf** | **NaN** | -120.397 | 3.333 |
| 100 | bfloat16 | **-inf** | **NaN** | -120.5 | 3.33 |
| 10 | float16 | -12.04 | **inf** | -12.04 | 3.33 |
"""
    fix_notes = """\
Safe where every factor is evidently positive (a probability from `softmax`/`sigmoid`, an
`exp`, `softplus`, `abs`, a square, a clamped value): `log(a * b) = log(a) + log(b)` exactly
in real arithmetic. Elsewhere the fix is unsafe: for negative factors `log(prod)` can be
finite where the sum of logs is NaN. The dimension and `keepdim` arguments move to `sum`
unchanged; `log` keeps its spelling (`p.prod(-1).log()` -> `p.log().sum(-1)`). A `prod`
with `dtype=` and one reached through a local variable are reported without a fix.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.prod.html",
        "https://en.wikipedia.org/wiki/Log_probability",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        op = ctx.bare_op(node)
        if op is None or op.name != "log" or len(op.args) != 1 or op.kwargs:
            return
        arg, _, through_local = _resolve(ctx, op.args[0], None)
        prod = ctx.bare_op(arg)
        if prod is None or prod.name != "prod" or not prod.args:
            return
        p = prod.args[0]
        positive = guards.evidently_positive(ctx, p)
        edits: Tuple = ()
        rest_src = [ctx.code(a) for a in prod.args[1:]] + [
            f"{k}={ctx.code(v)}" for k, v in prod.kwargs.items()
        ]
        rest_canon = [node_code(ctx.canonical(a)) for a in prod.args[1:]] + [
            f"{k}={node_code(ctx.canonical(v))}" for k, v in prod.kwargs.items()
        ]
        if "dtype" in prod.kwargs:
            through_local = True  # no fix
        if not through_local:
            if op.style == "method":
                text = f"{_wrapped(ctx, strip_parens(p))}.log().sum({', '.join(rest_src)})"
            else:
                text = f"{ctx.code(node.func)}({ctx.code(strip_parens(p))}).sum({', '.join(rest_src)})"
            edits = (ctx.replace(node, text),)
        fixed = cst.parse_expression(f"torch.log({_canon(ctx, p)}).sum({', '.join(rest_canon)})")
        domains = {}
        canon_p = strip_parens(ctx.canonical(p))
        if not positive and isinstance(canon_p, cst.Name):
            domains[canon_p.value] = (0.0, 1.0)
        ctx.report(
            self,
            node,
            edits=edits,
            applicability=SAFE if positive else UNSAFE,
            probe=ctx.expression_probe(ctx.canonical(node), fixed, domains),
        )


# --------------------------------------------------------------------------- NAN114


class AtanOfRatio(Rule):
    code = "NAN114"
    kind = "value"
    default_enabled = False
    untuned_precision = (
        "Measured earlier by the same claim, on the untuned precision corpus (`benchmarks/precision/`: 86 PyPI packages never used to tune the rules, split by a hash of the package name; every finding read with its function and callers and judged by the project's standard), 0 of 3 on the test split (0 of 3 on the tune split), below the 90% bar. "
        "The false alarms: ratios under `no_grad`, an atan2 written by hand with its own guards, and `(x / const).arctan()`. Turn it on with `--extend-select NAN114` where such values are not in play."
    )
    fails_in = 'all (x = 0, wrong quadrant)'
    name = "atan-of-ratio"
    message = (
        "`atan(y / x)`: at x = 0 the ratio is inf or NaN (0/0) and the gradient is NaN, and for "
        "x < 0 the angle is in the wrong quadrant; use `torch.atan2(y, x)`"
    )
    fix_applicability = UNSAFE
    fix_title = "Use `torch.atan2(y, x)`"
    triggers = r"\b(?:atan|arctan)\b"
    summary = "`torch.atan(y / x)`: NaN at x = 0 (value at 0/0, gradient always), wrong quadrant for x < 0."
    why = """\
`atan(y / x)` first divides: at x = 0 the ratio is ±inf (atan gives ±pi/2, but the gradient
w.r.t. both y and x is NaN: `1/x * 1/(1 + inf^2)` is `inf * 0`), and at x = y = 0 it is
0/0 = NaN in the forward pass too. It also folds the plane in half: `atan(1 / -1)` is
-pi/4 where the angle of (x, y) = (-1, 1) is 3pi/4.

`torch.atan2(y, x)` takes both coordinates: it is finite everywhere (0 at the origin by
convention), returns the angle in (-pi, pi], and its gradient `(-y, x) / (x^2 + y^2)` is
finite away from the origin (0 at it, in PyTorch).

Reported inside `torch.no_grad()` too: the wrong quadrant and the 0/0 are errors of the
value, not only of the gradient. Not reported where the divisor is kept away from 0 (an
epsilon, a clamp, a positive constant), also when that happened in a tuple assignment
(`w1, h1 = x2 - x1, y2 - y1 + eps`).
"""
    example = """\
```python
import torch

def heading(dx, dy):
    return torch.atan(dy / dx)
```"""
    use_instead = """\
```python
import torch

def heading(dx, dy):
    return torch.atan2(dy, dx)
```"""
    measured = """\
torch 2.13 CPU, the same in float32, float16 and bfloat16 (values rounded to the dtype).

| (y, x) | `torch.atan(y / x)` | gradient (y, x) | `torch.atan2(y, x)` | gradient (y, x) |
|---|---|---|---|---|
| (1, 0) | 1.5708 | **NaN, NaN** | 1.5708 | 0, -1 |
| (0, 0) | **NaN** | **NaN, NaN** | 0 | 0, 0 |
| (1, -1) | **-0.785** | -0.5, -0.5 | 2.356 | -0.5, -0.5 |
| (-1, -1) | **0.785** | -0.5, 0.5 | -2.356 | -0.5, 0.5 |

The fix has a limit of its own: the backward pass of `atan2` computes `1 / (x^2 + y^2)`,
which overflows near the origin. Gradient w.r.t. y at y = x = s:

| s | dtype | `atan(y / x)` | `atan2(y, x)` |
|---|---|---|---|
| 4e-3 | float16 | 124.9 | 124.8 |
| 1e-3 | float16 | 499.75 | **inf** |
| 1e-19 | float16 (both subnormal or 0) | **NaN** | 0 |
| 1e-20 | float32, bfloat16 | 5.0e19 | **inf** |
"""
    fix_notes = """\
Unsafe: `atan2` is not the same function. For x > 0 it equals `atan(y / x)`; for x < 0 it
differs by ±pi (the true angle rather than the folded one), and at x = 0 it is finite
(±pi/2, or 0 at the origin) with a finite gradient. Code that relies on the folded range
(-pi/2, pi/2), for example an aspect-ratio term such as `atan(w / h)` with positive sizes,
gets the same values for x > 0. Near the origin `atan2`'s own gradient overflows (see the
second table: below |x|, |y| of about 1e-3 in float16, 1e-20 in float32): for half-precision
inputs that small, compute the angle in float32. The verifier reports this as the fix
failing there, which is accurate. Not reported where the divisor is kept away from 0 (`h + eps`,
`h.clamp(min=eps)`, a positive constant). Through a local variable
(`r = y / x; torch.atan(r)`) the finding has no fix.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.atan2.html",
        "https://en.wikipedia.org/wiki/Atan2",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        op = ctx.bare_op(node)
        if op is None or op.name != "atan" or len(op.args) != 1 or op.kwargs:
            return
        arg, _, through_local = _resolve(ctx, op.args[0], None)
        div = ctx.bare_op(arg)
        if div is None or div.name != "div" or len(div.args) != 2 or div.kwargs:
            return
        y, x = div.args
        if guard(ctx, x) is not None or guards.tuple_guarded(ctx, x):
            return
        edits: Tuple = ()
        if not through_local:
            func, imports = ctx.spell("torch.atan2")
            text = f"{func}({ctx.code(strip_parens(y))}, {ctx.code(strip_parens(x))})"
            edits = (ctx.replace(node, text),) + imports
        fixed = cst.parse_expression(f"torch.atan2({_canon(ctx, y)}, {_canon(ctx, x)})")
        # The fix is meant to agree with the original where x > 0; x < 0 is the quadrant
        # the original gets wrong on purpose-blind code, so the probe sweeps x >= 0.
        domains: Dict[str, Tuple[float, float]] = {}
        canon_x = strip_parens(ctx.canonical(x))
        if isinstance(canon_x, cst.Name):
            domains[canon_x.value] = (0.0, 1000.0)
        ctx.report(
            self, node, edits=edits, probe=ctx.expression_probe(ctx.canonical(node), fixed, domains)
        )


# --------------------------------------------------------------------------- NAN123

# Statistics with Bessel's correction by default (divide by n - 1).
_CORRECTED = ("std", "var", "std_mean", "var_mean")
# One value per sample: a 1-D batch whose `std()` over every element is over the batch.
def _explicit_correction(op: Op) -> bool:
    """`correction=`/`unbiased=` given (by keyword, or as the old positional bool): the author
    chose the estimator, e.g. `unbiased=n > 1`."""
    if "correction" in op.kwargs or "unbiased" in op.kwargs:
        return True
    return len(op.args) > 1 and isinstance(strip_parens(op.args[1]), cst.Name) \
        and strip_parens(op.args[1]).value in ("True", "False")


def _batch_axis_only(op: Op) -> Optional[bool]:
    """True: reduces over dim 0 only; False: over every element; None: another dim."""
    dim = op.kwargs.get("dim", op.args[1] if len(op.args) > 1 else None)
    if dim is None or (isinstance(strip_parens(dim), cst.Name) and strip_parens(dim).value == "None"):
        return False
    dim = strip_parens(dim)
    if isinstance(dim, (cst.Tuple, cst.List)) and len(dim.elements) == 1:
        dim = strip_parens(dim.elements[0].value)
    return True if number_value(dim) == 0 else None




class StdOfOneSample(Rule):
    code = "NAN123"
    kind = "value"
    default_enabled = False
    untuned_precision = (
        "Measured earlier by the same claim, on the untuned precision corpus (`benchmarks/precision/`: 86 PyPI packages never used to tune the rules, split by a hash of the package name) it reports nothing on either split (`run.py --select ALL`), so there is no measured precision to put it on by default. "
        "On the tuning half of `benchmarks/realbugs` it finds the one single-sample batch (stable-baselines3's PPO advantage normalization) and none of the three safe look-alikes (the fixed line, whole-rollout normalization in A2C and in another PPO). Turn it on with `--extend-select NAN123` in training code."
    )
    fails_in = "all (one sample)"
    name = "std-of-one-sample"
    message = (
        "Standard deviation (or variance) with Bessel's correction over a mini-batch or a "
        "per-class subset that can hold one sample: n - 1 = 0, so it is NaN (0/0), and so is "
        "everything normalized by it, epsilon or not; guard the size, pass `correction=0`, or "
        "drop the last batch"
    )
    triggers = r"\b(?:std|var)(?:_mean)?\s*\("
    summary = "`x.std()` / `x.var(0)` over a mini-batch or class subset that can hold one sample: NaN."
    why = """\
`std` and `var` divide by n - 1 by default (Bessel's correction, `correction=1`). Over a
single sample that is 0 / 0: NaN in the forward pass, NaN in the gradient, and `+ eps` in
the denominator does not help (NaN + eps is NaN). Advantage normalization in policy-gradient
code, `(adv - adv.mean()) / (adv.std() + 1e-8)`, and batch statistics computed by hand are
the usual places.

A single sample is normal input there: a loop over mini-batches ends with a batch of what is
left, `len(dataset) % batch_size` samples, which is 1 for one dataset size in every
`batch_size`. The rule reports a corrected statistic over the batch axis (`dim=0`, or every
element of a per-sample vector) of a value taken from the variable of such a loop:

- `DataLoader(...)` without `drop_last=True` (its default batch size is 1);
- a call given a batch size (`buffer.get(self.batch_size)`, `iterate(batch_size=bs)`);
  `batch_size=None`, one batch of everything, is not one;
- `torch.split(x, n)` / `x.split(n)`;
- and, in a loop or comprehension over classes, the rows of one class (`x[labels == c]`,
  also through a local mask): a class with a single member gives a single row.

Not reported: an explicit `correction=`/`unbiased=` (the author chose, as in
`std(unbiased=n > 1)`), a statistic over another dim (features, time), `std()` over every
element of a multi-dimensional batch (an image batch of one still has many pixels), a
condition or early exit in scope that tests a size (`if len(x) > 1:`, `if mask.sum() > 1:`), a loader built
elsewhere (a parameter or attribute: its `drop_last` is unknown), whole-rollout
statistics outside such a loop, and NumPy arrays (NumPy's `std` divides by n: one row gives 0).
"""
    example = """\
```python
import torch

def update(policy, buffer, batch_size):
    for batch in buffer.get(batch_size):
        adv = batch.advantages
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        policy.step(adv)
```"""
    use_instead = """\
```python
import torch

def update(policy, buffer, batch_size):
    for batch in buffer.get(batch_size):
        adv = batch.advantages
        if len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        policy.step(adv)
```"""
    measured = """\
torch 2.13 CPU, the same in float32, float16 and bfloat16.

| expression | input | value | gradient |
|---|---|---|---|
| `x.std()`, `x.var()` | one element | **NaN** | **NaN** |
| `(x - x.mean()) / (x.std() + 1e-8)` | one element | **NaN** | **NaN** |
| `x.std(0)` | shape (1, 4) | **[NaN, NaN, NaN, NaN]** | |
| `x.std(correction=0)` | one element | 0 | |
| `x.std()` | two elements | finite | finite |

The verifier draws inputs of fixed shapes and cannot shrink a batch to one sample, so this
rule has no probe: the table above is its evidence.
"""
    fix_notes = """\
No automatic fix: the remedy depends on the code. A size guard (`if len(x) > 1`) keeps the
unbiased estimate and skips normalization for a single sample; `correction=0` (or the
`unbiased=n > 1` that stable-baselines3 chose) gives 0 there and changes the estimate by a
factor sqrt((n - 1) / n) elsewhere; `drop_last=True` on the loader drops the sample.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.std.html",
        "https://github.com/DLR-RM/stable-baselines3/commit/7efe2db2bec460ea1a5a3c9ea65e7b921bc3c4d1",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        op = ctx.bare_op(node)
        if op is None or op.name not in _CORRECTED or not op.args or _explicit_correction(op):
            return
        batch_axis = _batch_axis_only(op)
        if batch_axis is None:
            return
        x = op.args[0]
        if not batch_axis and not batches.per_sample_values(ctx, x):
            return
        if op.style == "method" and dtypes.numpy_array(ctx, x):
            return  # NumPy's std/var default to ddof=0: one row gives 0, not NaN
        reason = analysis.single_sample_batch(ctx, x)
        if reason is None or analysis.has_many(ctx, x):
            return
        what = "variance" if op.name.startswith("var") else "standard deviation"
        ctx.report(self, node, message=(
            f"Unbiased {what} of `{_short_code(x)}`, which can hold a single sample ({reason}): "
            f"n - 1 = 0 gives NaN, epsilon or not; guard the batch size, pass `correction=0`, "
            f"or use `drop_last=True`"
        ))


def _short_code(node: cst.BaseExpression, limit: int = 40) -> str:
    code = " ".join(node_code(strip_parens(node)).split())
    return code if len(code) <= limit else code[: limit - 3] + "..."


# --------------------------------------------------------------------------- NAN124


def _factors(ctx: FileContext, node: cst.BaseExpression, depth: int = 6) -> List[cst.BaseExpression]:
    """The factors of a product, and of a quotient's numerator: `a * b / c` -> [a, b]."""
    node = strip_parens(node)
    op = ctx.bare_op(node)
    if depth > 0 and op is not None and not op.kwargs and len(op.args) == 2:
        if op.name == "mul":
            return _factors(ctx, op.args[0], depth - 1) + _factors(ctx, op.args[1], depth - 1)
        if op.name == "div":
            return _factors(ctx, op.args[0], depth - 1)
    return [node]


class SincByHand(Rule):
    code = "NAN124"
    kind = "form"
    default_enabled = False
    untuned_precision = (
        'The false alarms are divisors kept off 0 by a mask or an epsilon the analysis did not '
        'follow. A positive constant inside the sine is no longer taken for the divisor '
        '(`sin(pi * x) / pi / x` of a windowed-sinc filter, a Fourier term `sin(k * t) / k`).'
    )
    fails_in = "all (x = 0); float16 and bfloat16 near 0 (gradient)"
    name = "sinc-by-hand"
    message = (
        "`sin(k * x) / x` is 0 / 0 = NaN at x = 0, where its limit is k (and its gradient is NaN "
        "there, and wrong near 0 in half precision); use `k * torch.sinc(k * x / torch.pi)`"
    )
    fix_applicability = SAFE
    fix_title = "Use `torch.sinc`"
    triggers = r"\bsin\b"
    summary = "`torch.sin(x) / x` (a sinc or a Bessel basis by hand): NaN at x = 0; use `torch.sinc(x / torch.pi)`."
    why = """\
`sin(k x) / x` tends to k as x goes to 0, but at x = 0 itself it is 0 / 0 = NaN, in the
forward pass and in the gradient. The inputs where this happens are common: a distance of
an atom to itself or to the start of a radial grid, a rotation angle of the identity, a
filter tap at the centre of a sinc kernel. A mask applied afterwards (`* (x > 0)`) does not
help, since NaN * 0 is NaN. Near 0 the quotient also loses its gradient in float16 and
bfloat16: both sin(3x) and x are tiny there and their ratio's derivative comes out as 32 or
-128 where the true value is about -0.001.

`torch.sinc(t)` is sin(pi t) / (pi t) with the limit 1 at t = 0, and a gradient of 0 there,
so `sin(k x) / x = k * torch.sinc(k x / pi)` holds everywhere, 0 included.

Not reported where the divisor is kept away from 0 (an epsilon, a clamp, `arange(1, n)`; a
positive constant or loop index, such as the frequency `k` of a Fourier series' term
`sin(k * w * t) / k` with `for k in range(1, n)`, `2 * i + 1` or `2 * math.pi`: a
coefficient, not the variable of a sinc), or
where a condition tests it: an enclosing `if`, an earlier `assert` or early return, or a
`torch.where` around the quotient (its forward value is repaired there; what is left in the
gradient is NAN112's finding).
"""
    example = """\
```python
import torch

def bessel_basis(r, n_basis, cutoff):
    k = torch.arange(1, n_basis + 1) * torch.pi / cutoff
    return torch.sin(k * r[..., None]) / r[..., None]
```"""
    use_instead = """\
```python
import torch

def bessel_basis(r, n_basis, cutoff):
    k = torch.arange(1, n_basis + 1) * torch.pi / cutoff
    return k * torch.sinc(k * r[..., None] / torch.pi)
```"""
    measured = """\
torch 2.13 CPU, `sin(3 x) / x` against `3 * torch.sinc(3 x / torch.pi)` (true value at 0: 3,
true gradient at 0: 0, at 1e-4: -0.0009).

| x | dtype | `sin(3x) / x` | its gradient | `3 * sinc(3x / pi)` | its gradient |
|---|---|---|---|---|---|
| 0 | float32, float16, bfloat16 | **NaN** | **NaN** | 3 | 0 |
| 1e-4 | float32 | 3.0 | -0.0039 | 3.0 | -0.0029 |
| 1e-4 | float16 | 2.998 | **32** | 3.0 | 0 |
| 1e-4 | bfloat16 | 3.016 | **-128** | 3.0 | 0 |
| 1 | float32 | 0.14112 | -3.1111 | 0.14112 | -3.1111 |
"""
    fix_notes = """\
Safe: `k * torch.sinc(k * x / torch.pi)` equals `sin(k * x) / x` wherever x is not 0 (up to
rounding of `k * x / pi`, a few units in the last place) and is its limit k at 0. The fix is
offered for `sin(x) / x` and `sin(k * x) / x` (also `x.sin() / x`, `torch.div`) with `x` and
`k` written as names, attributes or numbers; other spellings (a factor in front of the sine,
`sin(k * x / c) / x`, a local variable) are reported without a fix.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.sinc.html",
        "https://en.wikipedia.org/wiki/Sinc_function",
    )

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        op = ctx.bare_op(node)
        if op is None or op.name != "div" or len(op.args) != 2 or op.kwargs:
            return
        numerator, x = (strip_parens(a) for a in op.args)
        sine = argument = None
        for factor in _factors(ctx, numerator):
            argument = _sine_of(ctx, factor, x)
            if argument is not None:
                sine = factor
                break
        if sine is None or analysis.value(ctx, x).excludes_zero:
            return
        if conditions.guarded_by_condition(ctx, conditions.names_read(ctx, x)):
            # A branch, an assert or an enclosing `torch.where` tests the divisor (what a
            # `where` leaves in the gradient is NAN112's).
            return
        plain = ctx.code(argument) == ctx.code(x)  # `sin(x) / x`, no scale
        k = None if plain else _scale_of(ctx, argument, x)
        edits: Tuple = ()
        fixed = None
        if sine is numerator and is_atom(x) and (plain or (k is not None and is_atom(k))):
            sinc, imports = ctx.spell("torch.sinc")
            pi, more = ctx.spell("torch.pi")
            text = f"{sinc}({ctx.code(argument)} / {pi})"
            edits = (ctx.replace(node, text if plain else f"{ctx.code(k)} * {text}"),) + imports + more
            scale = "" if plain else f"{_canon(ctx, k, atom=True)} * "
            fixed = cst.parse_expression(f"{scale}torch.sinc({_canon(ctx, argument)} / torch.pi)")
        message = None
        if plain:
            message = ("`sin(x) / x` is 0 / 0 = NaN at x = 0, where its limit is 1 (the gradient is NaN "
                       "there, and wrong near 0 in half precision); use `torch.sinc(x / torch.pi)`")
        ctx.report(self, node, message=message, edits=edits,
                   probe=ctx.expression_probe(ctx.canonical(node), fixed))


def _sine_of(ctx: FileContext, factor: cst.BaseExpression, x: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The argument of `factor` where it is `sin(...)` of something with `x` as a factor."""
    op = ctx.bare_op(factor)
    if op is None or op.name != "sin" or len(op.args) != 1 or op.kwargs:
        return None
    argument = strip_parens(op.args[0])
    key = ctx.code(x)
    return argument if any(ctx.code(f) == key for f in _factors(ctx, argument)) else None


def _scale_of(ctx: FileContext, argument: cst.BaseExpression, x: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """k where `argument` is `k * x` or `x * k`, else None."""
    op = ctx.bare_op(argument)
    if op is None or op.name != "mul" or len(op.args) != 2 or op.kwargs:
        return None
    a, b = (strip_parens(v) for v in op.args)
    if ctx.code(b) == ctx.code(x):
        return a
    if ctx.code(a) == ctx.code(x):
        return b
    return None
