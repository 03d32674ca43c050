"""Whether a non-finite result is repaired right where it is made, or made on purpose.

`lp = torch.log(p)` followed by `torch.isfinite(lp)` or `lp = lp.masked_fill(p == 0, 0)`: the
author expects the -inf and handles it, so the standard in DEVELOPERS.md does not count it as
a hazard. The rules that report a -inf/NaN result (NAN201, NAN202, NAN110, NAN113, NAN115,
NAN204) ask here instead of each keeping its own list of repairs.

Every repair here fixes the value; where a gradient flows into the argument, the gradient at
the repaired entries is still 0 * inf = NaN. The rules accept them all the same, as the
standard does: the code says it expects the non-finite value (it tests for it, or replaces
it by name). A plain floor says nothing of the kind: `torch.log(p).clamp(min=-100)` is how
people think a log is made safe for training, and its gradient at p = 0 is NaN, so it is no
repair. One floor is: the dynamic-range floor of a log spectrogram or a decibel scale
(`torch.maximum(v, v.max() - 8.0)`, torchaudio's `top_db`), applied to features of the input
signal; it turns -inf into a number and counts for `NEG_INF` only (NaN stays NaN under a
floor).
"""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from ..core.context import FileContext, iter_calls, last_name, node_code

NEG_INF = "-inf"  # log(0), log of an underflowed probability
NAN = "nan"  # 0 / 0, the softmax of a fully masked row
# +-inf or NaN at the edges of a domain (`logit` at 0 and 1), where the code may also keep
# only the valid entries: `torch.where(valid, v, fill)`, `x.masked_fill(~valid, v)`
# (DETR-style anchor logits computed everywhere, then replaced).
OUT_OF_RANGE = "out of range"

# `{name}` is the name the statement assigns, escaped. Patterns are matched on the code of
# the next few statements of the same block.
_TESTED = (
    r"\b(?:isfinite|isinf|isneginf|isnan)\(\s*{name}\b",
    r"\b{name}\s*\.\s*(?:isfinite|isinf|isneginf|isnan)\(",
)
_REPAIRED = (
    r"\bnan_to_num_?\(\s*{name}\b",
    r"\b{name}\s*\.\s*(?:nan_to_num_?|masked_fill_)\(",
    r"\b{name}\s*=\s*{name}\s*\.\s*masked_fill\(",
    r"\b{name}\s*=\s*torch\.where\(",
    r"\b{name}\[[^\]\n]*\]\s*=",
)
_SELECTED = r"\b(?:where|masked_fill_?)\s*\([^\n]*\b{name}\b"
# The dynamic-range floor: at most `c` below the tensor's own maximum.
_FLOORED = (
    r"\bmaximum\(\s*{name}\s*,\s*(?:\(\s*)?{name}\s*\.\s*(?:max|amax)\(",
    r"\b{name}\s*\.\s*clamp_?\(\s*(?:min\s*=\s*)?{name}\s*\.\s*(?:max|amax)\(",
)


def _patterns(produces: str):
    extra = {NEG_INF: _FLOORED, OUT_OF_RANGE: (_SELECTED,)}.get(produces, ())
    return _TESTED + _REPAIRED + extra


def repaired_after(ctx: FileContext, produces: str, within: int = 3) -> Optional[str]:
    """How the name that the statement being visited assigns is tested or repaired in the
    next `within` statements of its block (a sentence for a message), or None. `produces` is
    what the flagged expression can give: NEG_INF, NAN or OUT_OF_RANGE."""
    names, following = ctx.statements_after(within)
    for name in names:
        for pattern in _patterns(produces):
            found = re.search(pattern.format(name=re.escape(name)), following)
            if found is not None:
                return f"`{name}` is repaired afterwards (`{found.group(0).strip()}`)"
    return None


# Calls that take a NaN/inf result in and give a finite one out: a replacement, or a
# reduction that skips NaN (`torch.nansum(p * torch.log(p / q))` in a metric).
_WRAPPERS = ("nan_to_num", "nan_to_num_", "masked_fill", "nansum", "nanmean")


def repaired_around(ctx: FileContext) -> Optional[str]:
    """The expression being visited sits inside a call of the same statement that repairs its
    result: `torch.nan_to_num(softmax(s))`, `s.softmax(-1).masked_fill(empty, 0)`,
    `torch.nansum(...)`. None otherwise. (`torch.log(p).clamp(min=-100)` is not a repair:
    the gradient at p = 0 is 0 * inf = NaN.)"""
    for outer in reversed(ctx.stack[:-1]):
        if isinstance(outer, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            break
        if not isinstance(outer, cst.Call):
            continue
        full = ctx.qualname(outer.func)  # an aliased import reads by its real name
        name = full.rsplit(".", 1)[-1] if full else last_name(outer.func)
        if name in _WRAPPERS:
            return f"repaired by `{name}`"
    return None


def repaired_in_function(ctx: FileContext, node: cst.CSTNode) -> Optional[str]:
    """`nan_to_num` or an `isnan` test anywhere after `node` in the same function, also
    `nan_to_num` passed as a function (`map(torch.nan_to_num, (a, b))`): the author repairs
    the NaN downstream (kornia's LightGlue zeroes fully masked rows after the matmul). Looser
    than `repaired_after`, for NaN that a later value carries whole."""
    function = ctx.enclosing_function()
    if function is None:
        return None
    start, _ = ctx.span(node)
    for call in iter_calls(function):
        at = ctx.span(call)[0]
        if at <= start:
            continue
        name = last_name(call.func)
        if name in ("nan_to_num", "nan_to_num_", "isnan"):
            return f"`{name}` at line {at.row}"
        if any(last_name(arg.value) == "nan_to_num" for arg in call.args):
            return f"`nan_to_num` at line {at.row}"
    return None


def repaired_downstream(ctx: FileContext, node: cst.CSTNode, produces: str, within: int = 3) -> Optional[str]:
    """`repaired_after` or `repaired_in_function`: the NaN is tested or replaced by name in
    the next statements, or removed later in the function."""
    return repaired_after(ctx, produces, within) or repaired_in_function(ctx, node)


# How code names a value made non-finite on purpose (a filler that marks entries invalid).
_NON_FINITE = re.compile(r"(\bnan\b|\binf\b|nan_|_nan|inf_|_inf|finfo\(.*\)\.(max|min)|float\(\s*[\"'][-+]?(nan|inf))",
                         re.IGNORECASE)


def non_finite_on_purpose(node: cst.BaseExpression) -> bool:
    """`nan_tensor`, `torch.inf`, `float("nan")`, `torch.finfo(dt).max`: a filler that marks
    entries invalid on purpose; a NaN or an infinite gradient at those entries is no surprise."""
    return _NON_FINITE.search(node_code(node)) is not None
