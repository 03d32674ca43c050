"""Guards read from the code around a value, where the interval analysis keeps no fact.

Zeros removed by a selection or replaced before a log (`p[p > 0]`, `torch.where`,
`masked_fill`), a value clamped or softly clipped away from both 0 and 1, the value under an
epsilon guard (`p + eps`, `p.clamp(min=eps)`), a clamp that keeps p below 1, a local changed
in place after its assignment (`n[n == 0] = 1`, `n.clamp_(min=1)`), factors evidently
positive (so the log of their product is the sum of their logs), the upper clamp of
a log-variance (with whether it is float16), the value an attribute such as `self.logvar`
was given earlier in the same function, vectors that cannot be 0 by construction, a division
inside a `where` that tests against 0, an epsilon added in a tuple assignment, an operand
kept off a singular point (clamped, plus an epsilon, a `where`), a count kept at 1 or
above, and a value cut off below 0 where it is used (a `relu` or a clamp at 0 around it).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, List, Optional, Tuple

import libcst as cst

from ..core.context import FileContext, node_code, strip_parens
from ..core.ops import number_value
from . import masks
from .ranges import guard, is_guarded, positive_constant, probability_source, selects_positive, sign

if TYPE_CHECKING:  # the package imports this module
    from . import UpperGuard


def _assigned(ctx: FileContext, name: cst.Name) -> Optional[cst.BaseExpression]:
    """What the local `name` was last assigned, or None where it is no local the file binds."""
    value = ctx.value_of(name)
    return None if value is name else value


def _followed(ctx: FileContext, expr: cst.BaseExpression, hops: int = 5) -> Optional[cst.BaseExpression]:
    """`expr` without parentheses, with local names followed to what they were last assigned
    (at most `hops` of them); None where a name is no local the file binds, or the chain is
    longer."""
    for _ in range(hops):
        expr = strip_parens(expr)
        if not isinstance(expr, cst.Name):
            return expr
        expr = _assigned(ctx, expr)
        if expr is None:
            return None
    return None


def zeros_removed(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """`p[p > 0]`, `p[mask]` with `mask = p != 0`, `p[p.nonzero(as_tuple=True)]`,
    `torch.where(...)`, `masked_fill`: the zeros were removed or replaced before the log
    (followed through local names). A selection by anything but p itself (`p[labels == c]`,
    `p[keep.bool()]`) keeps p's zeros."""
    for _ in range(6):
        expr = strip_parens(expr)
        if isinstance(expr, cst.Name):
            expr = _assigned(ctx, expr)
            if expr is None:
                return False
            continue
        if isinstance(expr, cst.Subscript):
            if selects_positive(ctx, expr):
                return True
            expr = expr.value
            continue
        if isinstance(expr, cst.Call):
            full = ctx.qualname(expr.func)
            if full in ("torch.where", "torch.masked_fill", "torch.nan_to_num"):
                return True
            if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in (
                "masked_fill", "masked_fill_", "nan_to_num", "nan_to_num_",
            ):
                return True
        return False
    return False


def kept_off_zero_and_one(ctx: FileContext, p: cst.BaseExpression) -> bool:
    """p (through local names) is clamped away from 0 and 1, or kept off them: `p.clamp(eps,
    1 - eps)`, `torch.clamp(p, min=eps, max=1 - eps)`, `p * (1 - 2 * eps) + eps`, or an
    affine squeeze with numbers (`0.9 * p + 0.05`)."""
    for _ in range(5):
        p = strip_parens(p)
        op = ctx.op(p)
        if op is not None and op.name == "clamp" and op.args:
            low, high = op.arg(1, "min"), op.arg(2, "max")
            if low is not None and high is not None:
                return True
            return False
        if op is not None and op.name == "add" and (is_guarded(ctx, p) or affine_squeezed(ctx, p)):
            return True
        if isinstance(p, cst.Name):
            p = _assigned(ctx, p)
            if p is None:
                return False
            continue
        return False
    return False


def affine_squeezed(ctx: FileContext, p: cst.BaseExpression) -> bool:
    """p (through local names) is `a * q + b` with numbers a > 0, b > 0 and a + b < 1: a
    probability q mapped into [b, a + b], off 0 and 1 (`0.9 * q + 0.05` before a BCE)."""
    p = _followed(ctx, p)
    add = None if p is None else ctx.op(p)
    if add is None or add.name != "add" or len(add.args) != 2 or add.kwargs:
        return False
    for scaled, offset in ((add.args[0], add.args[1]), (add.args[1], add.args[0])):
        b = number_value(strip_parens(offset))
        mul = ctx.op(strip_parens(scaled))
        if b is None or b <= 0 or mul is None or mul.name != "mul" or len(mul.args) != 2:
            continue
        if any((a := number_value(strip_parens(f))) is not None and a > 0 and a + b < 1 for f in mul.args):
            return True
    return False


def assigned_earlier(ctx: FileContext, attr: cst.Attribute) -> Optional[cst.BaseExpression]:
    """The value last assigned to the attribute chain `attr` (`self.logvar = ...`) by a
    top-level statement of the enclosing function before the current one, else None."""
    chain = node_code(attr)
    function = ctx.enclosing_function()
    if function is None or not isinstance(function.body, cst.IndentedBlock):
        return None
    current = next((n for n in ctx.stack if n in function.body.body), None)
    found = None
    for stmt in function.body.body:
        if stmt is current:
            break
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    if node_code(target.target) == chain:
                        found = small.value
    return found


def clamp_upper_bound(ctx: FileContext, expr: cst.BaseExpression) -> Optional[Tuple[float, bool]]:
    """(the upper clamp bound of `expr`, whether the clamped value is evidently float16),
    through local names: the bound is inf when it is not a number or the value is squashed
    (`torch.tanh`, `sigmoid`); None when nothing bounds it."""
    for _ in range(5):
        expr = strip_parens(expr)
        op = ctx.op(expr)
        if op is not None and op.name == "clamp" and op.args:
            high = op.arg(2, "max")
            if high is None:
                return None
            value = number_value(strip_parens(high))
            half = value is not None and ctx.precision.half_context(op.args[0]) == "float16"
            return (value if value is not None else float("inf")), half
        if op is not None and op.name in ("sigmoid", "log_softmax", "logsigmoid"):
            return float("inf"), False  # bounded above by construction
        if isinstance(expr, cst.Name):
            expr = _assigned(ctx, expr)
            if expr is None:
                return None
            continue
        if isinstance(expr, cst.Attribute):
            value = assigned_earlier(ctx, expr)
            if value is None:
                return None
            expr = value
            continue
        if isinstance(expr, cst.Call) and ctx.qualname(expr.func) == "torch.tanh":
            return float("inf"), False
        return None
    return None


_NONZERO_TEST = re.compile(r"(!=|>)\s*0(\.0*)?\b|\.(any|all)\(|\bnonzero\b")


def inside_zero_test(ctx: FileContext, node: cst.BaseExpression, denominator: cst.BaseExpression) -> bool:
    """`torch.where(n != 0, x / n, 0)`: the division sits in a `where` whose condition tests
    the norm (or anything) against 0; its NaN entries are not selected."""
    for parent in reversed(ctx.stack):
        if isinstance(parent, cst.Call):
            name = ctx.qualname(parent.func) or ""
            if name.endswith(".where") or (isinstance(parent.func, cst.Name) and parent.func.value == "where"):
                if parent.args and _NONZERO_TEST.search(node_code(parent.args[0].value)):
                    return True
        if isinstance(parent, (cst.FunctionDef, cst.SimpleStatementLine)):
            return False
    return False


_STACKS = {"torch.stack", "torch.cat", "torch.concat", "torch.concatenate"}
_ONES = {"torch.ones_like", "torch.ones", "torch.full_like"}


def nonzero_by_construction(ctx: FileContext, numerator: cst.BaseExpression) -> bool:
    """The vectors cannot be 0: rows selected by a test against 0 (`f[f.sum(1) != 0]`), or
    stacked with a component of ones (`torch.stack([u, torch.ones_like(u)])`)."""
    value, env = ctx.resolve(strip_parens(numerator), None)
    value = strip_parens(value)
    if isinstance(value, cst.Subscript) and _NONZERO_TEST.search(node_code(value.slice[0]) if value.slice else ""):
        return True
    if isinstance(value, cst.Call) and ctx.qualname(value.func) in _STACKS and value.args:
        parts = strip_parens(value.args[0].value)
        if isinstance(parts, (cst.List, cst.Tuple)):
            for element in parts.elements:
                inner = strip_parens(element.value)
                if isinstance(inner, cst.Call) and ctx.qualname(inner.func) in _ONES:
                    return True
    return False


def tuple_guarded(ctx: FileContext, x: cst.BaseExpression) -> bool:
    """`w1, h1 = x2 - x1, y2 - y1 + eps` somewhere in the enclosing function (the engine does
    not follow tuple assignments): the divisor `h1` got its epsilon there."""
    x = strip_parens(x)
    if not isinstance(x, cst.Name):
        return False
    function = ctx.enclosing_function()
    if function is None:
        return False
    found: List[bool] = []

    class Finder(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            value = strip_parens(node.value)
            for target in node.targets:
                t = strip_parens(target.target)
                if (
                    isinstance(t, cst.Tuple)
                    and isinstance(value, cst.Tuple)
                    and len(t.elements) == len(value.elements)
                ):
                    for te, ve in zip(t.elements, value.elements):
                        if isinstance(te.value, cst.Name) and te.value.value == x.value:
                            found.append(guard(ctx, ve.value) is not None)

    function.body.visit(Finder())
    return any(found)


def strip_epsilon(ctx: FileContext, node: cst.BaseExpression) -> Tuple[cst.BaseExpression, bool]:
    """The value under an epsilon guard and whether there was one: `A + eps` and
    `A.clamp(min=eps)` / `A.clamp_min(eps)` (no upper bound) give (A, True); anything
    else (node, False). eps is a positive constant or an epsilon-like name."""
    op = ctx.op(node)
    if op is None:
        return node, False
    if op.name == "add" and len(op.args) == 2 and not op.kwargs:
        for i in (0, 1):
            if positive_constant(ctx, op.args[i]) is not None and positive_constant(ctx, op.args[1 - i]) is None:
                return op.args[1 - i], True
    if op.name == "clamp" and op.args and op.arg(2, "max") is None:
        low = op.arg(1, "min")
        if low is not None and positive_constant(ctx, low) is not None:
            return op.args[0], True
    if op.name == "clamp_min" and len(op.args) == 2:
        if positive_constant(ctx, op.args[1]) is not None:
            return op.args[0], True
    return node, False


def clamped_below_one(ctx: FileContext, upper: Optional[UpperGuard]) -> bool:
    """The guard `analysis.upper_guard` found is a clamp whose bound is a constant below 1:
    `p.clamp(eps, 1 - eps)`, `torch.clamp(p, max=0.999)`, `p.clamp_max(1 - eps)`, eps of any
    value (whether the bound survives rounding is `analysis.rounds_to_one`'s question)."""
    if upper is None or not upper.clamp:
        return False
    bound = strip_parens(upper.bound)
    number = number_value(bound)
    if number is not None:
        return number < 1.0
    op = ctx.op(bound)
    return (
        op is not None and op.name == "sub" and len(op.args) == 2 and not op.kwargs
        and number_value(strip_parens(op.args[0])) == 1.0
        and positive_constant(ctx, op.args[1]) is not None
    )


def changed_in_place(ctx: FileContext, name: str) -> bool:
    """The enclosing function changes the local `name` in place or reassigns it through a
    guard (`n[n == 0] = 1`, `n.clamp_(min=eps)`, `n += eps`, `n = n.clamp(min=1)`): a guard
    that following the name's last assignment does not see."""
    function = ctx.enclosing_function()
    if function is None:
        return False
    text = node_code(function)
    n = re.escape(name)
    patterns = (
        rf"\b{n}\s*\[[^\n]*\]\s*=(?!=)",
        rf"\b{n}\.\w+_\(",
        rf"\b{n}\s*(\+|-|\*|/|\|)=",
        rf"\b{n}\s*=\s*[^\n]*\b(clamp|clip|maximum|where|max)\b",
    )
    return any(re.search(p, text) for p in patterns)


def evidently_positive(ctx: FileContext, p: cst.BaseExpression) -> bool:
    """Probabilities, exp/softplus outputs, abs/squares/sqrt, clamped or positive values:
    the log of each factor is defined, so `log(prod(p)) == sum(log(p))` exactly."""
    if probability_source(ctx, p) is not None:
        return True
    if sign(ctx, p) == "nonneg":
        return True
    found = guard(ctx, p)
    return found is not None and found.kind in ("clamp", "positive", "constant")


def _guarded_beyond_a_mask(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """`ranges.guard` finds an epsilon, clamp or positive constant (a mask alone is no guard)."""
    g = guard(ctx, expr)
    return g is not None and g.kind != "mask"


def kept_in_domain(ctx: FileContext, operand: cst.BaseExpression) -> bool:
    """The operand of an op with a singular point (sqrt, log, a division) is kept in the op's
    domain anyway: clamped, plus an epsilon, a `where`, an absolute value or an `exp`, here
    or where the local was assigned."""
    if _guarded_beyond_a_mask(ctx, operand):
        return True
    value = ctx.value_of(strip_parens(operand))
    for n in (strip_parens(operand), strip_parens(value)):
        if masks.torch_call(ctx, n, "where", "clamp", "clip", "clamp_min", "clamp_max",
                             "nan_to_num", "maximum", "abs", "exp", "softplus", "masked_fill") is not None:
            return True
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value in (
            "clamp", "clip", "clamp_min", "abs", "exp", "masked_fill", "where",
        ):
            return True
    return False


def count_kept_positive(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """A count kept at 1 or above, or off 0: `m.sum() + eps`, `m.sum().clamp(min=1)`,
    `max(m.sum(), 1)`, also through a local."""
    if _guarded_beyond_a_mask(ctx, node):
        return True
    bare = strip_parens(node)
    resolved = ctx.value_of(bare)
    value = strip_parens(resolved)
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "max":
        return True
    if masks.torch_call(ctx, value, "clamp", "clip", "clamp_min", "maximum", "where") is not None:
        return True
    return resolved is not bare and _guarded_beyond_a_mask(ctx, value)


def clamped_nonneg_where_used(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """The node being visited is cut off below 0 where it is used: the first argument of a
    `relu` or of a `clamp(min=c)` with c >= 0 (`(E[x^2] - E[x]^2).clamp(0)`: the author chose
    the one-pass variance, as timm does for speed on TPU, and removed its negative values)."""
    for parent in reversed(ctx.stack[-4:-1]):
        op = ctx.bare_op(parent) if isinstance(parent, cst.Call) else None
        if op is None or not op.args or op.args[0] is not node:
            continue
        if op.name == "relu":
            return True
        if op.name in ("clamp", "clamp_min"):
            low = op.arg(1, "min")
            value = number_value(strip_parens(low)) if low is not None else None
            return value is not None and value >= 0
    return False


__all__ = [
    "clamped_nonneg_where_used",
    "kept_in_domain",
    "count_kept_positive",
    "assigned_earlier", "changed_in_place", "clamp_upper_bound", "clamped_below_one",
    "affine_squeezed", "evidently_positive", "inside_zero_test", "kept_off_zero_and_one", "nonzero_by_construction",
    "strip_epsilon", "tuple_guarded", "zeros_removed",
]
