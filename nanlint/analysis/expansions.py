"""Squared distances computed by expansion: `|a|^2 + |b|^2 - 2 a.b`.

In real arithmetic the sum is >= 0; in floating point the three terms are rounded apart, so
for equal or nearly equal points (the diagonal of a self-distance matrix, a query that is
also a key) it comes out exactly 0 or slightly negative. `sqrt` of it is then NaN, forward
and backward. The analysis recognizes the expansion from its terms: two squared norms (values
the flow proves nonnegative, or squares written as such) and a product of tensors (`@`,
`matmul`/`mm`/`bmm`, `einsum`, a sum of a product) taken with a negative coefficient.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

import libcst as cst

from ..core.context import FileContext, last_name, node_code
from ..core.ops import number_value
from .flow import bare as strip_parens

_PRODUCTS = {"matmul", "mm", "bmm", "einsum", "inner", "dot"}
# Calls that keep a squared norm a squared norm (einops' rearrange/reduce, shape methods, sums).
_KEEPS_SQUARES = {"rearrange", "reduce", "unsqueeze", "view", "reshape", "expand", "expand_as",
                  "t", "transpose", "permute", "sum", "squeeze", "flatten", "contiguous", "to"}
_SQUARE_TEXT = re.compile(r"\*\*\s*2\b|\.pow\(\s*2\s*\)|\bsquare\(|\.norm\(|\bnorm\(")


def squared_distance_by_expansion(ctx: FileContext, expr: cst.BaseExpression) -> Optional[str]:
    """Where `expr` (through its local name) is `|a|^2 + |b|^2 - 2 a.b`, the sum and its line
    for a message (`` `sq[:, None] + sq[None, :] - 2 * a @ a.T` at line 9 ``); None
    otherwise, and None where the flow proves it nonnegative (clamped, also in place)."""
    from . import value

    if value(ctx, expr).lo >= 0:
        return None
    resolved = _resolved(ctx, expr)
    terms: List[Tuple[int, cst.BaseExpression]] = []
    if not _flatten(resolved, 1, terms, 4) or len(terms) < 3:
        return None
    products = [t for sign, t in terms if _negative_product(ctx, sign, t)]
    squares = [t for sign, t in terms if sign > 0 and _squared_norm(ctx, t, 3)]
    if len(products) != 1 or len(squares) < 2:
        return None
    text = node_code(resolved).strip()
    line = _line(ctx, resolved) or _line(ctx, expr)
    where = f" at line {line}" if line else ""
    return f"`{text}`{where}" if len(text) <= 60 else f"the sum{where}"


def _line(ctx: FileContext, node: cst.CSTNode) -> Optional[int]:
    try:
        return ctx.span(node)[0].row
    except KeyError:  # a node made by stripping parentheses is not in the file's position map
        return None


def _resolved(ctx: FileContext, expr: cst.BaseExpression) -> cst.BaseExpression:
    expr = strip_parens(expr)
    if isinstance(expr, cst.Name):
        value, _ = ctx.resolve(expr, None)
        return strip_parens(value)
    return expr


def _flatten(expr, sign: int, out: List[Tuple[int, cst.BaseExpression]], depth: int) -> bool:
    """The signed terms of a sum (`a + b - c`), or False past `depth` nested sums."""
    expr = strip_parens(expr)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Subtract)):
        if depth <= 0:
            return False
        right_sign = sign if isinstance(expr.operator, cst.Add) else -sign
        return _flatten(expr.left, sign, out, depth - 1) and _flatten(expr.right, right_sign, out, depth - 1)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return _flatten(expr.expression, -sign, out, depth)
    out.append((sign, expr))
    return True


def _negative_product(ctx: FileContext, sign: int, term: cst.BaseExpression) -> bool:
    """`- 2 * a @ b.T`, `+ einsum(...) * -2`, `- ab` where `ab = 2 * a.mm(b.t())`."""
    term = _resolved(ctx, term)
    coefficient = sign
    if isinstance(term, cst.BinaryOperation) and isinstance(term.operator, cst.Multiply):
        for k, other in ((term.left, term.right), (term.right, term.left)):
            number = number_value(strip_parens(k))
            if number is not None:
                coefficient, term = sign * number, strip_parens(other)
                break
    return coefficient < 0 and _product_of_tensors(ctx, term)


def _product_of_tensors(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    from . import value

    expr = _resolved(ctx, expr)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.MatrixMultiply):
        return True
    if isinstance(expr, cst.Call) and last_name(expr.func) in _PRODUCTS:
        return True
    return value(ctx, expr).dot


def _squared_norm(ctx: FileContext, expr: cst.BaseExpression, depth: int) -> bool:
    """A squared norm: a value the flow proves nonnegative (not a constant), or a square
    written as one, through names and the calls that keep it (`rearrange(x2, ...)`)."""
    from . import value

    expr = strip_parens(expr)
    if number_value(expr) is not None:
        return False
    v = value(ctx, expr)
    if v.lo >= 0 and v.lo != v.hi:
        return True
    if _SQUARE_TEXT.search(ctx.code(expr)):
        return True
    if depth <= 0:
        return False
    if isinstance(expr, cst.Name):
        resolved = _resolved(ctx, expr)
        return resolved is not expr and _squared_norm(ctx, resolved, depth - 1)
    if isinstance(expr, cst.Subscript):
        return _squared_norm(ctx, expr.value, depth - 1)
    if not isinstance(expr, cst.Call):
        return False
    func, name = expr.func, last_name(expr.func)
    if isinstance(func, cst.Attribute) and name in _KEEPS_SQUARES:
        return _squared_norm(ctx, func.value, depth - 1)  # `x2.unsqueeze(1)`
    if not expr.args:
        return False
    if name in _KEEPS_SQUARES:
        return _squared_norm(ctx, expr.args[0].value, depth - 1)  # `rearrange(x2, ...)`
    if name in ("diag", "diagonal"):
        return _product_of_tensors(ctx, expr.args[0].value)  # the diagonal of a Gram matrix
    return False
