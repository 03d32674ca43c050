"""NAN101: a sigmoid (or its derivative) written by hand with `exp`."""

from __future__ import annotations

from typing import Optional, Tuple

import libcst as cst

from .. import analysis
from ..core.context import FileContext, node_code, parenthesize, same_code, strip_parens
from ..core.ops import number_value
from .base import SAFE, Rule


def negate(ctx: FileContext, node: cst.BaseExpression) -> cst.BaseExpression:
    """-node, simplifying `-(-z)`, `torch.neg(z)` and `-k * z` (that is `(-k) * z`)."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return strip_parens(node.expression)
    if (
        isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, (cst.Multiply, cst.Divide))
        and not node.lpar
    ):
        left = node.left
        if isinstance(left, cst.UnaryOperation) and isinstance(left.operator, cst.Minus) and not left.lpar:
            return node.with_changes(left=left.expression)
        if isinstance(left, cst.BinaryOperation) and not left.lpar:
            inner = negate(ctx, left)
            if not isinstance(inner, cst.UnaryOperation):
                return node.with_changes(left=inner)
    op = ctx.op(node)
    if op is not None and op.name == "neg" and op.style != "operator" and op.args:
        return strip_parens(op.args[0])
    return cst.UnaryOperation(operator=cst.Minus(), expression=parenthesize(strip_parens(node)))


def one_plus_exp(ctx: FileContext, node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """A where `node` is `1 + exp(A)` in any order or spelling (`exp(A).add(1)`)."""
    op = ctx.op(node)
    if op is None or op.name != "add" or len(op.args) != 2 or "alpha" in op.kwargs:
        return None
    for one, other in ((op.args[0], op.args[1]), (op.args[1], op.args[0])):
        if number_value(one) == 1.0:
            inner = ctx.op(other)
            if inner is not None and inner.name == "exp" and len(inner.args) == 1:
                return inner.args[0]
    return None


class HandWrittenSigmoid(Rule):
    code = "NAN101"
    kind = "form"
    default_enabled = True
    fails_in = 'all; float16 first (exponent > 11.1)'
    name = "sigmoid-by-hand"
    message = (
        "Sigmoid written with `exp`: once the exponent passes 11.09 in float16 (88.7 in "
        "float32 and bfloat16) `exp` is inf and the gradient NaN, though the value looks "
        "fine; use `torch.sigmoid`"
    )
    fix_applicability = SAFE
    fix_title = "Replace with `torch.sigmoid`"
    triggers = r"\bexp\b"
    summary = "Sigmoid spelled as `1 / (1 + exp(-z))`: NaN gradient once `exp` overflows."
    why = """\
`1 / (1 + exp(-z))` is the sigmoid in real arithmetic, but not in floating point. For
`z` below -88.7 (float32), -89 (bfloat16) or -11.09 (float16), `exp(-z)` is `inf`. The
forward value still comes out as 0, so nothing looks wrong, but the backward pass
multiplies `inf` by 0 and the gradient is NaN. One NaN gradient poisons every weight at the
next optimizer step.

`torch.sigmoid` evaluates the same function without forming `exp(-z)` for large `|z|`; its
gradient `s * (1 - s)` is finite everywhere.

The form `exp(z) / (1 + exp(z))` is worse: for large `z` it is `inf / inf`, NaN in the
forward pass too.

The sigmoid's derivative written the same way, `exp(a) / (1 + exp(a)) ** 2` (the surrogate
gradient of spiking networks, often inside a custom `backward`), is `inf / inf = NaN` once
`exp(a)` overflows; `torch.sigmoid(a) * torch.sigmoid(-a)` is the same value and finite for
every `a`. The fix is offered where the numerator is `exp(a)` alone; where it is a product
(`grad * k * exp(a) / (...)`) the finding comes without one.

The DBNet differentiable binarization step `torch.reciprocal(1 + torch.exp(-k * (x - y)))`
with `k = 50` and `x`, `y` in [0, 1] reaches `|z| = 50`. In float32 its gradient is 1.7% off
there, exactly 0 from z = -52 (the true value is 2.6e-23) and NaN past -88.7; in float16
`exp` already overflows past 11.09. DBNet trained in float32, saw NaN gradients and moved to
`torch.sigmoid`. Since `torch.sigmoid` is the same function at no cost, the spelling is
reported whatever range today's exponent has; where the analysis knows a bound (here `k`
is a constructor default and `x`, `y` the sigmoid maps `forward` passes), the message states
it as information, and says when `exp` runs in float16 past that bound (a head made
`.half()`; CPU float16 autocast). `nanlint verify` confirms the float16 failure with those
inputs (`fixtures/NAN101_dbnet_head.py`).

Not reported where the code itself keeps `exp` finite for every input: an exponent clamped
in an earlier statement (`exponent = torch.clamp(exponent, -50, 50)`: exp(50) = 5.2e21 is
finite in float32, though not in float16), `-abs(d)`, a branch that bounds it, or a clamp
every caller of a private helper applies (a public function of a package may be called from
elsewhere with anything). A default such as `k=50` is not such a guard: someone may pass
another value. Inside `torch.no_grad()` / `torch.inference_mode()`, where the result is only
compared, used as an index or read as a number, the reciprocal forms are not reported (only
their gradient fails), nor where every call the file makes to a private or nested helper that
computes one passes a value no gradient reaches (a buffer of statistics accumulated from
detached scores), also through `functools.partial(helper, ...)` bound to an attribute;
`exp(z) / (1 + exp(z))`, NaN in the value too, still is.
"""
    example = """\
```python
import torch

def step(x, y, k=50):
    return torch.reciprocal(1 + torch.exp(-k * (x - y)))
```"""
    use_instead = """\
```python
import torch

def step(x, y, k=50):
    return torch.sigmoid(k * (x - y))
```"""
    measured = """\
Forward value and gradient of `torch.reciprocal(1 + torch.exp(-z))` against `torch.sigmoid(z)`
(torch 2.13, CPU):

| z | dtype | original: value, gradient | `torch.sigmoid`: value, gradient |
|---|---|---|---|
| -11 | float16 | 1.67e-05, **0** (true 1.67e-05) | 1.67e-05, 1.67e-05 |
| -12 | float16 | 0, **NaN** | 6.14e-06, 6.14e-06 |
| -88 | float32 | 6.05e-39, **0** | 6.05e-39, 6.05e-39 |
| -89 | float32 | 0, **NaN** | 0, 0 |
| -89 | bfloat16 | 0, **NaN** | 0, 0 |
"""
    fix_notes = """\
Safe: the rewrite is exact in real arithmetic; only rounding changes.

One place where `torch.sigmoid` is less accurate than the hand-written form, measured
against float64 (torch 2.13, CPU): its backward computes `s * (1 - s)` from the rounded
`s = sigmoid(z)`, so for large positive `z` the gradient cancels. It is exactly 0 once
`sigmoid(z)` rounds to 1 (from z = 16.64 in float32, 8.32 in float16, 6.25 in bfloat16),
where the true derivative is 5.9e-8, 2.4e-4 and 1.9e-3 (its largest value, at z = 0, is
0.25), and it keeps fewer than a quarter of its bits a little before that (from z = 13.5 in
float32). The hand-written form's gradient, `exp(-z) / (1 + exp(-z))**2`, tracks float64
there (5.934e-8 at z = 16.64). `nanlint verify` notes this per context, with the bits lost
and the largest float64 value there, and does not count it against the fix.
"""
    untuned_precision = (
        'Judged by the form claim, the false alarms were an exponent clamped to ±50 by a helper '
        'the analysis did not follow (test half), a reciprocal form whose result only feeds a '
        'buffer of detached scores (no gradient reaches it), a training loop that never calls '
        '`backward` and a dispersion term whose exponent is at most 16 because a ratio of '
        'distances is positive (tune half). Judged by reach it had been 0 of 6: bounded gains '
        "such as DBNet's `k = 50`, float32 code; by the form claim those are correct, and DBNet "
        'trained in float32 saw NaN gradients there.'
    )
    references = (
        "https://pytorch.org/docs/stable/generated/torch.sigmoid.html",
        "https://github.com/MhLiao/DB (the DBNet step function)",
    )

    def _match(
        self, node: cst.BaseExpression, ctx: FileContext
    ) -> Optional[Tuple[cst.BaseExpression, bool]]:
        """(the sigmoid's argument, whether the match went through a local variable)."""
        op = ctx.op(node)
        if op is None or len(op.args) < 1:
            return None
        denominator = None
        if op.name == "reciprocal" and len(op.args) == 1:
            denominator = op.args[0]
        elif op.name == "div" and len(op.args) == 2 and not op.kwargs:
            numerator, denominator = op.args
            if number_value(numerator) != 1.0:
                # exp(A) / (1 + exp(A)) is sigmoid(A).
                top = ctx.op(numerator)
                if top is None or top.name != "exp" or len(top.args) != 1:
                    return None
                bottom, through_local = self._denominator(denominator, ctx)
                if bottom is None or node_code(bottom) != node_code(top.args[0]):
                    return None
                return top.args[0], through_local
        elif op.name == "pow" and len(op.args) == 2 and number_value(op.args[1]) == -1.0:
            denominator = op.args[0]
        if denominator is None:
            return None
        argument, through_local = self._denominator(denominator, ctx)
        if argument is None:
            return None
        return negate(ctx, argument), through_local

    def _forward_hazard(self, node: cst.BaseExpression, ctx: FileContext) -> bool:
        """`exp(z) / (1 + exp(z))` is inf / inf = NaN in the forward pass too; the
        reciprocal forms only poison the gradient (their value rounds to 0 correctly)."""
        op = ctx.op(node)
        if op is None or op.name != "div":
            return False
        top = ctx.op(op.args[0])
        return top is not None and top.name == "exp"

    def _denominator(self, node, ctx):
        argument = one_plus_exp(ctx, node)
        if argument is not None:
            return argument, False
        value = ctx.value_of(node)
        if value is not node:
            argument = one_plus_exp(ctx, value)
            if argument is not None:
                return argument, True
        return None, False

    def _derivative(self, node: cst.BaseExpression, ctx: FileContext):
        """(A, exact) where `node` is the sigmoid's derivative `exp(A) / (1 + exp(A)) ** 2`
        (a surrogate gradient); exact: the numerator is `exp(A)` alone, not a product with it."""
        op = ctx.op(node)
        if op is None or op.name != "div" or len(op.args) != 2 or op.kwargs:
            return None
        numerator, denominator = op.args
        square = ctx.op(strip_parens(denominator))
        if square is not None and square.name == "pow" and len(square.args) == 2 \
                and number_value(strip_parens(square.args[1])) == 2.0:
            base = strip_parens(square.args[0])
        elif square is not None and square.name == "square" and len(square.args) == 1:
            base = strip_parens(square.args[0])
        else:
            return None
        argument, _ = self._denominator(base, ctx)
        if argument is None:
            return None
        factors = [strip_parens(numerator)]
        exact = True
        while factors:
            factor = factors.pop()
            inner = ctx.op(factor)
            if inner is not None and inner.name == "exp" and len(inner.args) == 1 \
                    and same_code(inner.args[0], argument):
                return argument, exact and factor is strip_parens(numerator)
            if inner is not None and inner.name == "mul" and len(inner.args) == 2 and not inner.kwargs:
                factors.extend(strip_parens(a) for a in inner.args)
                exact = False
        return None

    def _check_derivative(self, node: cst.BaseExpression, ctx: FileContext) -> bool:
        found = self._derivative(node, ctx)
        if found is None:
            return False
        argument, exact = found
        if analysis.exp_kept_finite(ctx, argument):
            return True
        a = node_code(strip_parens(argument))
        minus_a = node_code(negate(ctx, strip_parens(argument)))
        message = (
            "derivative of the sigmoid written with `exp`: `exp(a) / (1 + exp(a)) ** 2` is "
            "inf / inf = NaN once `a` passes 88.7 in float32 and bfloat16 (11.09 in float16); "
            "use `torch.sigmoid(a) * torch.sigmoid(-a)`, the same value, finite for every `a`"
        )
        edits = ()
        fixed = None
        if exact:
            sigmoid, imports = ctx.spell("torch.sigmoid")
            edits = (ctx.replace(node, f"{sigmoid}({a}) * {sigmoid}({minus_a})"),) + imports
            canon = strip_parens(ctx.canonical(argument))
            fixed = cst.parse_expression(
                f"torch.sigmoid({node_code(canon)}) * torch.sigmoid({node_code(negate(ctx, canon))})"
            )
        ctx.report(self, node, message, edits=edits,
                   probe=ctx.expression_probe(ctx.canonical(node), fixed))
        return True

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        if self._check_derivative(node, ctx):
            return
        match = self._match(node, ctx)
        if match is None:
            return
        argument, through_local = match
        exponent = negate(ctx, argument)
        if analysis.exp_kept_finite(ctx, exponent):
            return  # `exponent = exponent.clamp(-50, 50)` before: the code keeps exp finite
        forward_hazard = self._forward_hazard(node, ctx)
        if not forward_hazard and analysis.no_gradient(ctx, node):
            return  # only the gradient turns NaN, and none flows here
        sigmoid, imports = ctx.spell("torch.sigmoid")
        # The node's span excludes its own parentheses: they stay in the file.
        replacement = f"{sigmoid}({node_code(strip_parens(argument))})"
        original = ctx.canonical(node)
        fixed = cst.parse_expression(
            f"torch.sigmoid({node_code(strip_parens(ctx.canonical(argument)))})"
        )
        edits = () if through_local else (ctx.replace(node, replacement),) + imports
        # A bound the code does not enforce (a gain, what callers pass) is said, not obeyed.
        bounded = analysis.exp_bound_note(ctx, exponent)
        ctx.report(
            self,
            node,
            message=(f"Sigmoid written with `exp`: `exp` is inf and the gradient NaN once the exponent "
                     f"passes 88.7 in float32 and bfloat16 (11.09 in float16); {bounded.clause()}; "
                     "`torch.sigmoid` is the same function, exact for every input") if bounded else None,
            edits=edits,
            probe=ctx.expression_probe(original, fixed, analysis.input_domains(ctx, node)),
        )
