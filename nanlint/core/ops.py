"""What a call or operator means, whatever its spelling.

`torch.exp(x)`, `th.exp(x)`, `exp(x)` after `from torch import exp`, `x.exp()` and
`torch.Tensor.exp(x)` are all the op "exp" with operand x. Rules match ops, never spellings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import libcst as cst

# Full torch name -> canonical op name.
_FUNCTION_OPS: Dict[str, str] = {}


def _register(op: str, *qualnames: str) -> None:
    for q in qualnames:
        _FUNCTION_OPS[q] = op


_register("exp", "torch.exp", "torch.special.exp")
_register("log", "torch.log")
_register("log2", "torch.log2")
_register("log10", "torch.log10")
_register("log1p", "torch.log1p", "torch.special.log1p")
_register("expm1", "torch.expm1", "torch.special.expm1")
_register("sigmoid", "torch.sigmoid", "torch.special.expit", "torch.nn.functional.sigmoid")
_register("softmax", "torch.softmax", "torch.special.softmax", "torch.nn.functional.softmax")
_register(
    "log_softmax",
    "torch.log_softmax",
    "torch.special.log_softmax",
    "torch.nn.functional.log_softmax",
)
_register("logsigmoid", "torch.nn.functional.logsigmoid")
_register("softplus", "torch.nn.functional.softplus")
_register("logsumexp", "torch.logsumexp", "torch.special.logsumexp")
_register("reciprocal", "torch.reciprocal")
_register("add", "torch.add")
_register("sub", "torch.sub", "torch.subtract")
_register("mul", "torch.mul", "torch.multiply")
_register("div", "torch.div", "torch.divide", "torch.true_divide")
_register("neg", "torch.neg", "torch.negative")
_register("pow", "torch.pow")
_register("sum", "torch.sum")
_register("mean", "torch.mean")
_register("max", "torch.max")
_register("amax", "torch.amax")
_register("relu", "torch.relu", "torch.nn.functional.relu")
_register("clamp", "torch.clamp", "torch.clip")
_register("clamp_min", "torch.clamp_min")
_register("clamp_max", "torch.clamp_max")
_register("sqrt", "torch.sqrt")
_register("abs", "torch.abs", "torch.absolute")
_register("square", "torch.square")
_register("norm", "torch.norm")
_register("linalg_norm", "torch.linalg.norm")
_register("vector_norm", "torch.linalg.vector_norm")
_register("acos", "torch.acos", "torch.arccos")
_register("sin", "torch.sin")
_register("asin", "torch.asin", "torch.arcsin")
_register("atan", "torch.atan", "torch.arctan")
_register("cosine_similarity", "torch.nn.functional.cosine_similarity", "torch.cosine_similarity")
_register("normalize", "torch.nn.functional.normalize")
_register("matmul", "torch.matmul", "torch.mm", "torch.bmm")
_register("rsqrt", "torch.rsqrt")
_register("var", "torch.var")
_register("std", "torch.std")
_register("var_mean", "torch.var_mean")
_register("std_mean", "torch.std_mean")
_register("prod", "torch.prod")
_register("cross_entropy", "torch.nn.functional.cross_entropy")
_register("nll_loss", "torch.nn.functional.nll_loss")
_register("binary_cross_entropy", "torch.nn.functional.binary_cross_entropy")
_register(
    "binary_cross_entropy_with_logits",
    "torch.nn.functional.binary_cross_entropy_with_logits",
)

# Tensor methods -> (op, how many positional arguments the method form may take).
# A method spelled like an op but called with other arities is someone else's method
# (`logger.log("msg")`, `s.add(x)` on a set is filtered by the ops around it).
_METHOD_OPS: Dict[str, Tuple[str, Tuple[int, ...]]] = {
    "exp": ("exp", (0,)),
    "log": ("log", (0,)),
    "log2": ("log2", (0,)),
    "log10": ("log10", (0,)),
    "log1p": ("log1p", (0,)),
    "expm1": ("expm1", (0,)),
    "sigmoid": ("sigmoid", (0,)),
    "softmax": ("softmax", (0, 1)),
    "log_softmax": ("log_softmax", (0, 1)),
    "logsumexp": ("logsumexp", (0, 1)),
    "reciprocal": ("reciprocal", (0,)),
    "add": ("add", (1,)),
    "sub": ("sub", (1,)),
    "mul": ("mul", (1,)),
    "div": ("div", (1,)),
    "neg": ("neg", (0,)),
    "pow": ("pow", (1,)),
    "sum": ("sum", (0, 1, 2)),  # x.sum(dim, keepdim)
    "mean": ("mean", (0, 1, 2)),
    "norm": ("norm", (0, 1, 2, 3)),
    "acos": ("acos", (0,)),
    "sin": ("sin", (0,)),
    "arccos": ("acos", (0,)),
    "asin": ("asin", (0,)),
    "arcsin": ("asin", (0,)),
    "atan": ("atan", (0,)),
    "arctan": ("atan", (0,)),
    "matmul": ("matmul", (1,)),
    "mm": ("matmul", (1,)),
    "bmm": ("matmul", (1,)),
    "rsqrt": ("rsqrt", (0,)),
    "var": ("var", (0, 1, 2, 3)),
    "std": ("std", (0, 1, 2, 3)),
    "prod": ("prod", (0, 1, 2)),
    "max": ("max", (0, 1, 2)),
    "amax": ("amax", (0, 1, 2)),
    "relu": ("relu", (0,)),
    "clamp": ("clamp", (0, 1, 2)),
    "clip": ("clamp", (0, 1, 2)),
    "clamp_min": ("clamp_min", (1,)),
    "clamp_max": ("clamp_max", (1,)),
    "sqrt": ("sqrt", (0,)),
    "abs": ("abs", (0,)),
    "square": ("square", (0,)),
}

# The method name a canonical op has on tensors (for fixes that keep the method style).
TENSOR_METHOD = {op: name for name, (op, _) in _METHOD_OPS.items() if name != "clip"}

# What `torch.finfo(x.dtype).eps` / `.tiny` / `.max` are read from (NumPy's too).
FINFO_FUNCTIONS = frozenset({"torch.finfo", "numpy.finfo"})

_BINARY_OPS = {
    cst.Add: "add",
    cst.Subtract: "sub",
    cst.Multiply: "mul",
    cst.Divide: "div",
    cst.Power: "pow",
    cst.MatrixMultiply: "matmul",
}


@dataclass
class Op:
    """An operation and its operands, receiver first for a method call."""

    name: str
    args: List[cst.BaseExpression]
    kwargs: Dict[str, cst.BaseExpression]
    node: cst.BaseExpression
    # "function" (torch.exp(x)), "method" (x.exp()) or "operator" (a + b, -a).
    style: str
    # For "function": the spelled function expression (`th.exp`, `F.softmax`).
    func: Optional[cst.BaseExpression] = field(default=None, repr=False)

    def arg(self, index: int, keyword: Optional[str] = None) -> Optional[cst.BaseExpression]:
        if index < len(self.args):
            return self.args[index]
        if keyword is not None:
            return self.kwargs.get(keyword)
        return None


def number_value(node: cst.BaseExpression) -> Optional[float]:
    """The value of a numeric literal (`1`, `1.0`, `-1`, `1e-8`), else None."""
    if isinstance(node, (cst.Integer, cst.Float)):
        try:
            return float(node.evaluated_value)
        except (ValueError, OverflowError):
            return None
    if isinstance(node, cst.UnaryOperation):
        inner = number_value(node.expression)
        if inner is None:
            return None
        if isinstance(node.operator, cst.Minus):
            return -inner
        if isinstance(node.operator, cst.Plus):
            return inner
    return None


def split_args(
    args: Sequence[cst.Arg],
) -> Optional[Tuple[List[cst.BaseExpression], Dict[str, cst.BaseExpression]]]:
    """Positional and keyword arguments; None where `*args`/`**kw` make them unknowable."""
    positional: List[cst.BaseExpression] = []
    keywords: Dict[str, cst.BaseExpression] = {}
    for a in args:
        if a.star:
            return None
        if a.keyword is not None:
            keywords[a.keyword.value] = a.value
        else:
            positional.append(a.value)
    return positional, keywords


def called_on_self(func: cst.BaseExpression) -> bool:
    """`self.var(x)`, `self.norm(h)`: a submodule held in an attribute, called (never a
    tensor method: a module is no tensor)."""
    return isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self"


def match_op(node: cst.CSTNode, qualname_of) -> Optional[Op]:
    """The op `node` performs, or None. `qualname_of(expr)` resolves imports."""
    if isinstance(node, cst.BinaryOperation):
        name = _BINARY_OPS.get(type(node.operator))
        if name is None:
            return None
        return Op(name, [node.left, node.right], {}, node, "operator")
    if isinstance(node, cst.UnaryOperation):
        if isinstance(node.operator, cst.Minus) and number_value(node) is None:
            return Op("neg", [node.expression], {}, node, "operator")
        return None
    if not isinstance(node, cst.Call):
        return None
    split = split_args(node.args)
    if split is None:
        return None
    positional, keywords = split
    func = node.func
    qualname = qualname_of(func)
    if qualname is not None:
        if qualname.startswith("torch.Tensor."):
            method = _METHOD_OPS.get(qualname[len("torch.Tensor."):])
            if method is None or not positional:
                return None
            return Op(method[0], positional, keywords, node, "function", func)
        op = _FUNCTION_OPS.get(qualname)
        if op is None:
            return None
        # `x` as keyword `input=` is allowed by torch functions.
        if not positional and "input" in keywords:
            positional = [keywords.pop("input")]
        return Op(op, positional, keywords, node, "function", func)
    if isinstance(func, cst.Attribute):
        method = _METHOD_OPS.get(func.attr.value)
        if method is None or len(positional) not in method[1]:
            return None
        # `np.exp`, `math.log`, a module's function: not a tensor method. Nor `self.var(x)`
        # or `self.norm(h)`: a submodule held in an attribute, called (a module is no tensor).
        if qualname_of(func.value) is not None or called_on_self(func):
            return None
        return Op(method[0], [func.value] + positional, keywords, node, "method", func)
    return None
