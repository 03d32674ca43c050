"""Facts about boolean masks and the conditions built from them.

What a `torch.where` condition or a patch index says about the operand it protects (NAN112),
whether a selection is a mask (NAN113), and whether a mask leaves every row of a softmax
something to attend to (NAN204): a causal triangle keeps the diagonal, a threshold below the
row's own maximum or top-k keeps that entry; and masks whose emptiness is expected (a
nanmean's `~isnan(v)`, `labels == c` for a `c` drawn from the labels).
"""

from __future__ import annotations

import re
from typing import Iterable, Optional, Tuple

import libcst as cst

from ..core.context import FileContext, descendants, dotted_name, node_code, strip_parens
from ..core.ops import number_value, split_args


def torch_call(ctx: FileContext, node: cst.CSTNode, *short: str) -> Optional[Tuple[str, str]]:
    """("function"|"method", short name) when `node` calls `torch.<short>` or `t.<short>()`."""
    if not isinstance(node, cst.Call):
        return None
    q = ctx.qualname(node.func)
    if q is not None:
        for s in short:
            if q in (f"torch.{s}", f"torch.Tensor.{s}", f"torch.special.{s}"):
                return "function", s
        return None
    if isinstance(node.func, cst.Attribute) and node.func.attr.value in short:
        if ctx.qualname(node.func.value) is None:
            return "method", node.func.attr.value
    return None


# Ops defined on [-1, 1]: their derivative is infinite at ±1 (NAN112's fix fills them with 0).
UNIT_DOMAIN_OPS = {"acos", "asin", "arccos", "arcsin", "atanh", "arctanh"}


def _bare(ctx: FileContext, node: cst.BaseExpression) -> str:
    """Code of `node` without parentheses, casts and `abs()`: what a comparison tests."""
    node = strip_casts(ctx, node)
    while True:
        called = torch_call(ctx, node, "abs")
        if called is None:
            break
        style, _ = called
        node = strip_casts(ctx, node.func.value if style == "method" else node.args[0].value)
    return node_code(node)


_THRESHOLD = re.compile(r"(eps|tiny|thresh|thr|min|tol)", re.IGNORECASE)


def _threshold(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """A number, an epsilon-like name, `torch.finfo(...).eps`, `1 - eps`: a domain bound."""
    node = strip_parens(node)
    if number_value(node) is not None:
        return True
    name = dotted_name(node)
    if name is not None:
        return _THRESHOLD.search(name.split(".")[-1]) is not None
    if isinstance(node, cst.Attribute) and node.attr.value in ("eps", "tiny", "smallest_normal"):
        return True
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract)):
        return _threshold(ctx, node.left) and _threshold(ctx, node.right)
    return False


def comparisons(ctx: FileContext, cond: cst.BaseExpression, depth: int = 4) -> Iterable[cst.Comparison]:
    """The comparisons a condition is made of (through `&`, `|`, `~`, `*`, logical ops,
    `.all()`/`.any()`, casts and local names)."""
    if depth <= 0:
        return
    cond = strip_casts(ctx, cond)
    if isinstance(cond, cst.Name):
        value = ctx.value_of(cond, 1)
        if value is not cond:
            yield from comparisons(ctx, value, depth - 1)
        return
    if isinstance(cond, cst.Comparison):
        yield cond
        return
    if isinstance(cond, cst.UnaryOperation):
        yield from comparisons(ctx, cond.expression, depth - 1)
        return
    if isinstance(cond, cst.BinaryOperation) and isinstance(
        cond.operator, (cst.BitAnd, cst.BitOr, cst.Multiply)
    ):
        yield from comparisons(ctx, cond.left, depth - 1)
        yield from comparisons(ctx, cond.right, depth - 1)
        return
    if isinstance(cond, cst.Call):
        if torch_call(ctx, cond, "logical_and", "logical_or", "logical_not") is not None:
            for a in cond.args:
                yield from comparisons(ctx, a.value, depth - 1)
        elif isinstance(cond.func, cst.Attribute) and cond.func.attr.value in ("all", "any"):
            yield from comparisons(ctx, cond.func.value, depth - 1)
        elif torch_call(ctx, cond, "gt", "ge", "lt", "le", "ne", "eq") is not None:
            style, _ = torch_call(ctx, cond, "gt", "ge", "lt", "le", "ne", "eq")
            sides = ([cond.func.value] if style == "method" else []) + [a.value for a in cond.args]
            if len(sides) == 2:
                yield cst.Comparison(left=sides[0], comparisons=[
                    cst.ComparisonTarget(operator=cst.GreaterThan(), comparator=sides[1])])


_OPS = {
    cst.GreaterThan: lambda a, b: a > b,
    cst.GreaterThanEqual: lambda a, b: a >= b,
    cst.LessThan: lambda a, b: a < b,
    cst.LessThanEqual: lambda a, b: a <= b,
    cst.Equal: lambda a, b: a == b,
    cst.NotEqual: lambda a, b: a != b,
}


def _bound_value(node: cst.BaseExpression) -> float:
    value = number_value(strip_parens(node))
    if value is not None:
        return value
    code = node_code(node)
    return 1.0 - 1e-6 if code.lstrip("( ").startswith("1") else 1e-6  # `eps`, `1 - eps`


def singular_points_discarded(ctx: FileContext, cond: cst.BaseExpression, operand: cst.BaseExpression,
                        what: str, taken_when_true: bool) -> bool:
    """False where a single comparison shows the op's singular points lie in the branch
    that is taken (`torch.where(c < 50, 5000 / c, ...)`: c = 0 is kept, so its inf is in the
    value, not hidden in the gradient). True otherwise."""
    bare = strip_casts(ctx, cond)
    if isinstance(bare, cst.Name):
        bare = strip_casts(ctx, ctx.value_of(bare, 1))
    if not isinstance(bare, cst.Comparison) or len(bare.comparisons) != 1:
        return True
    target = bare.comparisons[0]
    test = _OPS.get(type(target.operator))
    if test is None:
        return True
    wanted = _bare(ctx, operand)
    if _bare(ctx, bare.left) == wanted:
        bound = _bound_value(target.comparator)
        holds = lambda x: test(x, bound)  # noqa: E731
    elif _bare(ctx, target.comparator) == wanted:
        bound = _bound_value(bare.left)
        holds = lambda x: test(bound, x)  # noqa: E731
    else:
        return True
    singular = (1.0, 2.0) if what in UNIT_DOMAIN_OPS else (0.0, -1.0) if what != "division" else (0.0,)
    # Where the branch is discarded: cond false for the first branch, true for the second.
    return any(holds(x) != taken_when_true for x in singular)


def bounds_operand(ctx: FileContext, cond: cst.BaseExpression, operand: cst.BaseExpression) -> bool:
    """`cond` bounds `operand` itself: `x > 0`, `x != 0`, `x.abs() < 1`, `x >= eps`, also as
    part of a combined mask held in a local variable."""
    wanted = {_bare(ctx, operand)}
    bare = strip_parens(operand)
    if isinstance(bare, cst.Name):
        value = ctx.value_of(bare, 1)
        if value is not bare:
            wanted.add(_bare(ctx, value))
    for comparison in comparisons(ctx, cond):
        if len(comparison.comparisons) != 1:
            continue
        left, right = comparison.left, comparison.comparisons[0].comparator
        for side, other in ((left, right), (right, left)):
            if _bare(ctx, side) in wanted and _threshold(ctx, other):
                return True
    return False


_MASK_WORDS = re.compile(
    r"mask|(^|_)(valid|keep|pos|neg|fg|bg|sel|selected|ignore|visible|active|inside|good|flags?|is|has)(_|$|\d)",
    re.IGNORECASE,
)
_CASTS = ("float", "double", "half", "bfloat16", "long", "int", "bool", "type_as", "to", "detach")


def data_condition(ctx: FileContext, mask: cst.BaseExpression) -> Optional[cst.Comparison]:
    """The comparison of data a mask is built from, here or a statement earlier (`labels > 0`,
    `iou >= thr`, `target != ignore`): whether it selects anything is up to the batch, so an
    empty selection is a fact of the data, not an assumption about callers. None for a mask
    that comes in from elsewhere (a parameter, an attribute, a dict lookup)."""
    for cmp in comparisons(ctx, mask):
        sides = [cmp.left] + [t.comparator for t in cmp.comparisons]
        if any(number_value(strip_parens(side)) is None for side in sides) and cmp.comparisons:
            # A comparison rebuilt from `t.gt(x)` has no position: only one written here counts.
            try:
                ctx.span(cmp)
            except KeyError:  # a node made by `comparisons`, not in the file
                continue
            return cmp
    return None


def strip_casts(ctx: FileContext, node: cst.BaseExpression) -> cst.BaseExpression:
    """`node` without parentheses and dtype casts (`m.float()`, `m.to(x)`, `x.detach()`)."""
    node = strip_parens(node)
    while (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in _CASTS
        and ctx.qualname(node.func.value) is None
    ):
        node = strip_parens(node.func.value)
    return node


def mask_like(ctx: FileContext, node: cst.BaseExpression, depth: int = 3) -> bool:
    """Evidently a boolean (or 0/1) selection: a comparison, `~m`, `a & b`, `m.bool()`, or a
    name that says so (`mask`, `valid`, `pos_inds`), through local assignments."""
    node = strip_parens(node)
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "bool":
        return True
    node = strip_casts(ctx, node)
    if isinstance(node, cst.Comparison):
        return True
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.BitInvert):
        return True
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.BitAnd, cst.BitOr)):
        return True
    if torch_call(ctx, node, "logical_and", "logical_or", "logical_not", "isfinite", "eq", "ne",
                  "gt", "lt", "ge", "le", "isin") is not None:
        return True
    name = dotted_name(node)
    if name is not None:
        if _MASK_WORDS.search(name.split(".")[-1]):
            return True
        if depth > 0 and isinstance(node, cst.Name):
            value = ctx.value_of(node, 1)
            if value is not node:
                return mask_like(ctx, value, depth - 1)
    return False


_TRIL_BUFFER = r"(?:register_buffer\(\s*['\"]{a}['\"]\s*,|self\.{a}\s*=)\s*(?:torch\.)?tril\("


def _causal_triangle(ctx: FileContext, mask: cst.BaseExpression, depth: int = 6) -> bool:
    """The mask is a causal triangle alone: `torch.triu(ones, diagonal=1)`, `tril(...) == 0`,
    `~tril(...)`, `self.bias[..] == 0` with `bias` a registered `tril` buffer."""
    expr = strip_parens(mask)
    for _ in range(depth):
        if isinstance(expr, cst.Name):
            resolved = ctx.value_of(expr)
            if resolved is expr or resolved is None:
                return False
            expr = strip_parens(resolved)
            continue
        if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
            if number_value(strip_parens(expr.comparisons[0].comparator)) == 0:
                expr = strip_parens(expr.left)
                continue
            return False
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.BitInvert, cst.Not)):
            expr = strip_parens(expr.expression)
            continue
        if isinstance(expr, cst.Subscript):
            expr = strip_parens(expr.value)
            continue
        if isinstance(expr, cst.Attribute):
            chain = dotted_name(expr)
            if chain and chain.startswith("self."):
                attr = re.escape(chain.split(".", 1)[1])
                return re.search(_TRIL_BUFFER.format(a=attr), ctx.source) is not None
            return False
        if isinstance(expr, cst.Call):
            full = ctx.qualname(expr.func)
            if full == "torch.tril":
                return True
            if full == "torch.triu":
                split = split_args(expr.args)
                if split is None:
                    return False
                positional, keywords = split
                diagonal = positional[1] if len(positional) > 1 else keywords.get("diagonal")
                d = number_value(strip_parens(diagonal)) if diagonal is not None else 0
                return d is not None and d >= 1
            if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in (
                "bool", "to", "logical_not", "type_as", "cuda", "unsqueeze", "view", "expand",
                "expand_as", "triu", "tril",
            ):
                if expr.func.attr.value == "tril":
                    return True
                if expr.func.attr.value == "triu":
                    split = split_args(expr.args)
                    positional, keywords = split if split else ([], {})
                    diagonal = positional[0] if positional else keywords.get("diagonal")
                    d = number_value(strip_parens(diagonal)) if diagonal is not None else 0
                    return d is not None and d >= 1
                expr = strip_parens(expr.func.value)
                continue
            if full == "torch.logical_not" and expr.args:
                expr = strip_parens(expr.args[0].value)
                continue
        return False
    return False


_THRESHOLD_OPS = (cst.LessThan, cst.GreaterThan, cst.LessThanEqual, cst.GreaterThanEqual)


def _keeps_row_max(ctx: FileContext, mask: cst.BaseExpression) -> bool:
    """A threshold mask in a function that takes the row's max or top-k (top-k/top-p
    filtering, sparse routing): `scores < topk_values[..., -1:]` never masks the row maximum."""
    expr, _ = ctx.resolve(strip_parens(mask), None)
    expr = strip_parens(expr)
    if not (isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1
            and isinstance(expr.comparisons[0].operator, _THRESHOLD_OPS)):
        return False
    function = ctx.enclosing_function()
    if function is None:
        return False
    return re.search(r"\.(?:max|topk|kthvalue|sort)\(|torch\.(?:max|topk|kthvalue|sort)\(",
                     node_code(function)) is not None


def keeps_a_key_per_row(ctx: FileContext, mask: cst.BaseExpression) -> bool:
    """A mask that cannot mask a whole row: a causal triangle alone, or a threshold below
    the row's own maximum or top-k."""
    return _causal_triangle(ctx, mask) or _keeps_row_max(ctx, mask)


def emptiness_expected(ctx: FileContext, mask: cst.BaseExpression) -> bool:
    """A mask whose emptiness is no surprise or impossible: `~torch.isnan(v)` (a nanmean:
    NaN when every value is NaN already), `labels == c` inside `for c in ...` (c is drawn
    from the values), and a mean that is only formatted into a message or asserted on (the
    node being visited)."""
    if any(isinstance(n, (cst.FormattedStringExpression, cst.Assert)) for n in ctx.stack):
        return True
    bare = strip_parens(mask)
    value = ctx.value_of(bare, 2) if isinstance(bare, cst.Name) else bare
    for n in descendants(value):
        if torch_call(ctx, n, "isnan", "isfinite", "isinf") is not None:
            return True
    loop_targets = set()
    for n in ctx.stack:
        fors = []
        if isinstance(n, cst.For):
            fors.append(n)
        elif isinstance(n, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            comp = n.for_in
            while comp is not None:
                fors.append(comp)
                comp = comp.inner_for_in
        for f in fors:
            loop_targets |= {dotted_name(t) for t in descendants(f.target)
                             if isinstance(t, (cst.Name, cst.Attribute))}
    loop_targets.discard(None)
    if loop_targets:
        for n in descendants(strip_casts(ctx, value)):
            if isinstance(n, cst.Comparison) and any(
                isinstance(c.operator, cst.Equal) for c in n.comparisons
            ):
                sides = [n.left] + [c.comparator for c in n.comparisons]
                if any(dotted_name(strip_parens(x)) in loop_targets for x in sides):
                    return True
    return False


__all__ = [
    "emptiness_expected",
    "UNIT_DOMAIN_OPS", "bounds_operand", "comparisons", "keeps_a_key_per_row", "mask_like",
    "singular_points_discarded", "strip_casts", "torch_call",
]
