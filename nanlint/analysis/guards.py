"""Guards read from the code around a value, where the interval analysis keeps no fact.

Zeros removed by a selection or replaced before a log (`p[p > 0]`, `torch.where`,
`masked_fill`), a value clamped or softly clipped away from both 0 and 1, the upper clamp of
a log-variance (with whether it is float16), and the value an attribute such as
`self.logvar` was given earlier in the same function.
"""

from __future__ import annotations

from typing import Optional, Tuple

import libcst as cst

from ..context import FileContext, node_code, strip_parens
from ..ops import number_value
from ..ranges import is_guarded


def zeros_removed(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """`p[p > 0]`, `p[mask]` with `mask = p > 0`, `torch.where(...)`: the zeros were removed
    or replaced before the log (followed through local names)."""
    for _ in range(6):
        expr = strip_parens(expr)
        if isinstance(expr, cst.Name):
            value = ctx.value_of(expr)
            if value is expr:
                return False
            expr = value
            continue
        if isinstance(expr, cst.Subscript):
            for element in expr.slice:
                index = element.slice
                if isinstance(index, cst.Index):
                    value = strip_parens(index.value)
                    if isinstance(value, cst.Name):
                        value = strip_parens(ctx.value_of(value))
                    if isinstance(value, cst.Comparison) or _is_nonzero_call(ctx, value):
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


def _is_nonzero_call(ctx: FileContext, node: cst.BaseExpression) -> bool:
    if not isinstance(node, cst.Call):
        return False
    if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("nonzero", "bool"):
        return True
    return ctx.qualname(node.func) in ("torch.nonzero", "torch.where")


def kept_off_zero_and_one(ctx: FileContext, p: cst.BaseExpression) -> bool:
    """p (through local names) is clamped away from 0 and 1, or kept off them: `p.clamp(eps,
    1 - eps)`, `torch.clamp(p, min=eps, max=1 - eps)`, or `p * (1 - 2 * eps) + eps`."""
    for _ in range(5):
        p = strip_parens(p)
        op = ctx.op(p)
        if op is not None and op.name == "clamp" and op.args:
            low, high = op.arg(1, "min"), op.arg(2, "max")
            if low is not None and high is not None:
                return True
            return False
        if op is not None and op.name == "add" and is_guarded(ctx, p):
            return True
        if isinstance(p, cst.Name):
            value = ctx.value_of(p)
            if value is p:
                return False
            p = value
            continue
        return False
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
            value = ctx.value_of(expr)
            if value is expr:
                return None
            expr = value
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


__all__ = ["assigned_earlier", "clamp_upper_bound", "kept_off_zero_and_one", "zeros_removed"]
