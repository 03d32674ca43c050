"""Where cross-entropy and NLL losses are called, in every spelling.

`F.cross_entropy(logits, y)`, `nn.CrossEntropyLoss()(logits, y)`, and a criterion bound to a
name first (`crit = nn.NLLLoss(reduction="sum")` at module level, `self.criterion =
nn.CrossEntropyLoss(label_smoothing=0.1)` in a class), with the loss's input and its
options. The rules on float16 losses (NAN303-NAN305) and on losses fed probabilities
(NAN306-NAN308) share it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import libcst as cst

from ..core.context import FileContext, dotted_name
from ..core.ops import number_value, split_args

_FUNCTIONS = {
    "torch.nn.functional.cross_entropy": "cross_entropy",
    "torch.nn.functional.nll_loss": "nll_loss",
}
_MODULES = {
    "torch.nn.CrossEntropyLoss": "cross_entropy",
    "torch.nn.modules.loss.CrossEntropyLoss": "cross_entropy",
    "torch.nn.NLLLoss": "nll_loss",
    "torch.nn.modules.loss.NLLLoss": "nll_loss",
}
# Positional index of `reduction` / `label_smoothing` in each signature.
_FUNCTION_POSITIONS = {
    "cross_entropy": {"reduction": 6, "label_smoothing": 7, "size_average": 3, "reduce": 5},
    "nll_loss": {"reduction": 6, "size_average": 3, "reduce": 5},
}
_MODULE_POSITIONS = {
    "cross_entropy": {"reduction": 4, "label_smoothing": 5, "size_average": 1, "reduce": 3},
    "nll_loss": {"reduction": 4, "size_average": 1, "reduce": 3},
}
@dataclass
class LossCall:
    kind: str  # "cross_entropy" or "nll_loss"
    call: cst.Call
    logits: cst.BaseExpression
    reduction: str  # "mean", "sum" or "none" ("mean" when not evident)
    label_smoothing: Optional[float]  # the value, when evident
    smoothing: bool  # label smoothing is (or may be) on


class Criteria:
    """Loss modules bound to names: `crit = nn.CrossEntropyLoss()` at module level and
    `self.criterion = nn.CrossEntropyLoss()` in a class (keyed by the class)."""

    def __init__(self) -> None:
        self.module_level: Dict[str, cst.Call] = {}
        self.attributes: Dict[Tuple[str, str], cst.Call] = {}


def loss_module(ctx: FileContext, node: Optional[cst.BaseExpression]) -> Optional[Tuple[str, cst.Call]]:
    """(kind, constructor call) where `node` builds a cross-entropy/NLL module
    (`nn.CrossEntropyLoss(...)`, also followed by `.cuda()` / `.to(device)`)."""
    while isinstance(node, cst.Call):
        kind = _MODULES.get(ctx.qualname(node.func) or "")
        if kind is not None:
            return kind, node
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("cuda", "to", "cpu"):
            node = node.func.value
            continue
        return None
    return None


def _args(call: cst.Call):
    return split_args(call.args)


def _option(positional, keywords, positions, name) -> Optional[cst.BaseExpression]:
    if name in keywords:
        return keywords[name]
    index = positions.get(name)
    if index is not None and index < len(positional):
        return positional[index]
    return None


def _number(ctx: FileContext, expr: Optional[cst.BaseExpression]) -> Optional[float]:
    if expr is None:
        return None
    value = number_value(expr)
    if value is not None:
        return value
    chain = dotted_name(expr)
    if chain is not None and chain in ctx.constants:
        return ctx.constants[chain]
    resolved = ctx.value_of(expr) if isinstance(expr, cst.Name) else expr
    if resolved is not expr:
        return number_value(resolved)
    return None


def _is_false(expr: Optional[cst.BaseExpression]) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "False"


def _options(ctx: FileContext, options_call: cst.Call, positions) -> Tuple[str, Optional[float], bool]:
    """(reduction, label_smoothing value when evident, whether smoothing is on)."""
    split = _args(options_call)
    positional, keywords = split if split is not None else ([], {})
    reduction = "mean"
    red = _option(positional, keywords, positions, "reduction")
    if isinstance(red, cst.SimpleString) and red.evaluated_value in ("mean", "sum", "none"):
        reduction = red.evaluated_value
    elif red is None:
        if _is_false(_option(positional, keywords, positions, "reduce")):
            reduction = "none"
        elif _is_false(_option(positional, keywords, positions, "size_average")):
            reduction = "sum"
    smoothing_expr = _option(positional, keywords, positions, "label_smoothing")
    smoothing_value = _number(ctx, smoothing_expr)
    smoothing = smoothing_expr is not None and smoothing_value != 0.0
    return reduction, (smoothing_value if smoothing else None), smoothing


def loss_input(call: cst.Call) -> Optional[cst.BaseExpression]:
    split = _args(call)
    if split is None:
        return None
    positional, keywords = split
    if positional:
        return positional[0]
    return keywords.get("input")


def match_loss_call(ctx: FileContext, node: cst.Call, criteria: Criteria) -> Optional[LossCall]:
    """A cross_entropy / nll_loss call in any spelling, with its logits and options."""
    kind = _FUNCTIONS.get(ctx.qualname(node.func) or "")
    if kind is not None:
        logits = loss_input(node)
        if logits is None:
            return None
        reduction, value, smoothing = _options(ctx, node, _FUNCTION_POSITIONS[kind])
        return LossCall(kind, node, logits, reduction, value, smoothing)
    module = _criterion(ctx, node.func, criteria)
    if module is None:
        return None
    kind, ctor = module
    logits = loss_input(node)
    if logits is None:
        return None
    reduction, value, smoothing = _options(ctx, ctor, _MODULE_POSITIONS[kind])
    return LossCall(kind, node, logits, reduction, value, smoothing)


def _criterion(ctx: FileContext, func: cst.BaseExpression, criteria: Criteria):
    if isinstance(func, cst.Call):
        return loss_module(ctx, func)  # nn.CrossEntropyLoss()(logits, y)
    if isinstance(func, cst.Name):
        if ctx.binding(func.value) is not None:  # a local or a parameter of this function
            return loss_module(ctx, ctx.value_of(func))
        ctor = criteria.module_level.get(func.value)
        return loss_module(ctx, ctor) if ctor is not None else None
    if (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value == "self"
    ):
        cls = ctx.enclosing_class()
        ctor = criteria.attributes.get((cls or "", func.attr.value))
        return loss_module(ctx, ctor) if ctor is not None else None
    return None


def record_criterion(ctx: FileContext, node: cst.Assign, criteria: Criteria) -> None:
    if loss_module(ctx, node.value) is None:
        return
    for target in node.targets:
        t = target.target
        if isinstance(t, cst.Name) and len(ctx.scopes) == 1:
            criteria.module_level[t.value] = node.value  # type: ignore[assignment]
        elif isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
            cls = ctx.enclosing_class()
            if cls is not None:
                criteria.attributes[(cls, t.attr.value)] = node.value  # type: ignore[assignment]
