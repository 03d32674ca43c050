"""Whether a tensor is float16 where it is used, and the evidence a message cites.

`float16_reason(ctx, tensor)` answers for the rules that care about float16's range
(NAN202's vanishing epsilon, NAN203's fill value): a tensor made half (`.half()`, a float16
dtype, a module made half), a matmul output inside a float16 autocast region (autocast runs
the matmul family in float16 and most other ops in float32), or a matmul output in a project
that trains in float16. The dtype follows a value through the ops that keep it (`h.abs()`,
`h * 2`, reshapes, a move to a device); a visible float32 cast ends the question.
`numpy_array(ctx, expr)` says the value is a NumPy array, which no torch rule concerns.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Tuple

import libcst as cst

from ..core.context import FileContext, node_code, strip_parens
from ..core.ops import number_value
from .ranges import pass_through
from .flow import FileAnalysis, file_analysis

# Ops whose output is float16 under CUDA autocast (the matmul family); most other ops there
# either run in float32 (exp, log, softmax, sum, norm...) or keep their input's dtype.
_LOWP_FUNCTIONS = {
    "torch.matmul", "torch.mm", "torch.bmm", "torch.einsum", "torch.baddbmm", "torch.addmm",
    "torch.addbmm", "torch.nn.functional.linear", "torch.nn.functional.conv1d",
    "torch.nn.functional.conv2d", "torch.nn.functional.conv3d",
}
_LOWP_METHODS = {"matmul", "mm", "bmm", "baddbmm", "addmm"}
_ARITH = (cst.Multiply, cst.Divide, cst.Add, cst.Subtract)


def _lowp_output(ctx: FileContext, expr: cst.BaseExpression, depth: int = 6) -> bool:
    """`expr` is (through local names, scaling and reshapes) the output of a matmul-family op:
    float16 under CUDA autocast."""
    if depth <= 0:
        return False
    expr, _ = ctx.resolve(strip_parens(expr), None)
    expr = strip_parens(expr)
    if isinstance(expr, cst.BinaryOperation):
        if isinstance(expr.operator, cst.MatrixMultiply):
            return True
        if isinstance(expr.operator, _ARITH):
            return _lowp_output(ctx, expr.left, depth - 1) or _lowp_output(ctx, expr.right, depth - 1)
        return False
    if isinstance(expr, cst.Call):
        full = ctx.qualname(expr.func)
        if full in _LOWP_FUNCTIONS:
            return True
        if isinstance(expr.func, cst.Attribute) and full is None:
            if expr.func.attr.value in _LOWP_METHODS:
                return True
    inner = pass_through(ctx, expr)
    if inner is not None and not _is_upcast(expr):
        return _lowp_output(ctx, inner, depth - 1)
    return False


def _is_upcast(expr: cst.BaseExpression) -> bool:
    return (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in ("float", "double", "to", "type", "type_as")
    )


# Ops CUDA autocast runs in float32 (NUMERICS.md): their output is float32 there.
_AUTOCAST_TO_FP32 = {
    "exp", "expm1", "log", "log1p", "log2", "log10", "pow", "reciprocal", "rsqrt", "softmax",
    "log_softmax", "softmin", "softplus", "sum", "prod", "cumsum", "cumprod", "norm", "normalize",
    "cosine_similarity", "layer_norm", "group_norm", "acos", "asin", "tan", "sinh", "cosh",
    "erfinv", "cdist", "pdist", "dist", "mean", "var", "std",
}
_CASTS = {"float", "double", "to", "type", "type_as", "half", "bfloat16"}


def _dtype_sources(ctx: FileContext, expr: cst.BaseExpression, autocast: bool, depth: int = 6):
    """`expr` and the tensors whose dtype it has: `h.abs()`, `v.norm(dim=-1)`, `h * 2`,
    `torch.relu(h)` keep `h`'s dtype (outside autocast; inside it, ops autocast runs in
    float32 end the chain). Casts end it too (`half_dtype` reads them)."""
    out = []
    frontier = [strip_parens(expr)]
    while frontier and depth > 0:
        depth -= 1
        nxt = []
        for e in frontier:
            out.append(e)
            if isinstance(e, cst.Name):
                value = ctx.value_of(e)
                if value is not e and value is not None:
                    nxt.append(strip_parens(value))
                continue
            if isinstance(e, cst.BinaryOperation) and isinstance(e.operator, _ARITH + (cst.Power, cst.MatrixMultiply)):
                for side in (e.left, e.right):
                    if number_value(strip_parens(side)) is None:
                        nxt.append(strip_parens(side))
                continue
            if isinstance(e, cst.UnaryOperation):
                nxt.append(strip_parens(e.expression))
                continue
            if isinstance(e, cst.Call):
                full = ctx.qualname(e.func)
                if isinstance(e.func, cst.Attribute) and full is None:
                    name = e.func.attr.value
                    source = e.func.value
                elif full and full.startswith("torch.") and e.args and e.args[0].keyword is None:
                    name = full.rsplit(".", 1)[-1]
                    source = e.args[0].value
                else:
                    continue
                if name == "to" and not _fp32_cast(ctx, e) and ctx.precision.half_dtype(e) is None:
                    # `.to(device)`: a move keeps the dtype.
                    nxt.append(strip_parens(source))
                    continue
                if name in _CASTS or "dtype" in {a.keyword.value for a in e.args if a.keyword}:
                    continue
                if autocast and name in _AUTOCAST_TO_FP32:
                    continue
                nxt.append(strip_parens(source))
            elif isinstance(e, cst.Subscript):
                nxt.append(strip_parens(e.value))
            elif isinstance(e, cst.Attribute) and e.attr.value in ("T", "mT", "data"):
                nxt.append(strip_parens(e.value))
        frontier = nxt
    return out


def _fp32_cast(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """`x.float()`, `x.double()`, `x.to(torch.float32)`, `dtype=torch.float32`: float32 on purpose."""
    if not isinstance(expr, cst.Call):
        return False
    if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ("float", "double") and not expr.args:
        return True
    return any(
        ctx.qualname(a.value) in ("torch.float32", "torch.float", "torch.float64", "torch.double")
        for a in expr.args
    )


# How a file spells float16 or bfloat16 evidence: `.half()`, `torch.half`, `torch.float16`,
# `torch.bfloat16`, `HalfTensor`.
_HALF_TEXT = re.compile(r"half|float16|Half")


def evident_half_dtype(ctx: FileContext, expr: cst.BaseExpression) -> Optional[str]:
    """"float16" or "bfloat16" where `expr` has that dtype by what the code shows, followed
    through the ops that keep a dtype outside autocast (`x.clamp(max=c)`, `x - m`, `-x`,
    `x[i]`, reshapes, `log_softmax`, local names): a `.half()` or `.bfloat16()`, a half
    dtype, a module made half. A float32 cast on the way ends the question (None)."""
    if not _HALF_TEXT.search(ctx.source):
        return None  # every piece of such evidence is spelled with one of these words
    for source in _dtype_sources(ctx, expr, False):
        if _fp32_cast(ctx, source):
            return None
        dtype = ctx.precision.half_dtype(source)
        if dtype is not None:
            return dtype
    return None


def evidently_float16(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """`expr` is float16 by what the code shows (`evident_half_dtype`)."""
    return evident_half_dtype(ctx, expr) == "float16"


# A file that never says these cannot make a module half or enter autocast.
_MAY_BE_HALF = re.compile(r"\.half\(|float16|bfloat16|autocast|HalfTensor")


class HalfEvidence(NamedTuple):
    source: str  # "module": its class's instance is made half; "autocast": called under autocast
    dtype: str
    reason: str


def _visited_function(ctx: FileContext) -> Tuple[Optional[cst.FunctionDef], Optional[str]]:
    """The innermost function being visited, and the name of the class holding it."""
    fn = cls = None
    for node in reversed(ctx.stack):
        if isinstance(node, cst.FunctionDef) and fn is None:
            fn = node
        elif isinstance(node, cst.ClassDef):
            cls = node.name.value
            break
    return fn, cls


def _autocast_call(fa: FileAnalysis, fn: cst.FunctionDef, cls: Optional[str]) -> Optional[str]:
    """Where the file calls `fn` (or its class's `forward`) inside a float16 autocast region."""
    names = [f"{cls}.{fn.name.value}", f"{cls}.forward"] if cls else [fn.name.value]
    for name in names:
        ev = fa.autocast_callees.get(name)
        if ev is not None:
            return f"{ev.reason} at line {fa.line(ev.line)}"
    return None


def half_evidence(ctx: FileContext) -> Optional[HalfEvidence]:
    """Where the function being visited runs in float16 because of code elsewhere in the
    file: its class's instance is made `.half()` ("module"), or it (or its class's
    `forward`) is called inside a float16 autocast region ("autocast")."""
    fn, cls = _visited_function(ctx)
    if fn is None or not _MAY_BE_HALF.search(ctx.source):
        return None
    fa = file_analysis(ctx)
    fa.ensure_all()
    if cls is not None and cls in fa.half_owners:
        ev = fa.half_owners[cls]
        return HalfEvidence("module", "float16", f"{ev.reason} at line {fa.line(ev.line)}")
    reason = _autocast_call(fa, fn, cls)
    return HalfEvidence("autocast", "float16", reason) if reason is not None else None


def called_under_autocast(ctx: FileContext) -> Optional[str]:
    """Why the function being visited runs inside a float16 autocast region although none
    is written around it: the file calls it (or its class's `forward`) inside one (a
    sentence with the line), else None. Ops autocast runs in float32 there
    (`cross_entropy`, `log_softmax`) see float32 whatever their input's dtype."""
    fn, cls = _visited_function(ctx)
    if fn is None or not _MAY_BE_HALF.search(ctx.source):
        return None
    fa = file_analysis(ctx)
    fa.ensure_all()
    return _autocast_call(fa, fn, cls)


def float16_reason(ctx: FileContext, tensor: cst.BaseExpression, autocast_fp32_op: bool = False) -> Optional[str]:
    """Why `tensor` is float16 here, or None: evidently float16 (`.half()`, a float16 dtype,
    a module made half); inside a float16 autocast region, a matmul output (autocast keeps
    other values float32, and runs `normalize`-like ops in float32 on CUDA); in a project
    that trains in float16 (configured, or shown by another file), a matmul output too (model activations: schedulers,
    metrics, optimizer state and preprocessing stay float32 even in half-precision projects).
    A visible float32 cast ends the question."""
    region = ctx.precision.in_autocast
    lowp = False
    function = ctx.enclosing_function()
    function_code = node_code(function) if function is not None else ""
    # Mixed precision in the project (a GradScaler, autocast in the trainer) is autocast
    # where this code runs: `sum`, `softmax`, `norm`... return float32 there too.
    mixed = region is not None or (ctx.precision.configured == "float16"
                                   and ctx.precision.configured_everywhere is None)
    for source in _dtype_sources(ctx, tensor, mixed):
        if region is not None and region.effective_dtype == "float16" and _lowp_output(ctx, source, 1):
            # Autocast computes a matmul in float16 whatever its inputs (casts below it
            # do not matter); a cast above it was met first.
            if autocast_fp32_op and region.device != "cpu":
                return None
            return "the tensor is a matmul output, float16 under autocast"
        if _fp32_cast(ctx, source):
            return None
        if isinstance(source, cst.Name) and re.search(
            rf"\b{re.escape(source.value)}(?:\s*=[^\n]*)?\.(?:float\(\)|double\(\)|(?:to|type)\(torch\.float32\))",
            function_code,
        ):
            # `q, k = q.float(), k.float()` (a tuple assignment names cannot follow).
            return None
        dtype = ctx.precision.half_dtype(source)
        if dtype == "float16":
            return "the tensor is float16"
        if dtype == "bfloat16":
            return None
        if not lowp and _lowp_output(ctx, source):
            lowp = True
    elsewhere = half_evidence(ctx) if region is None else None
    if elsewhere is not None and elsewhere.source == "module":
        return f"the tensor is float16: {elsewhere.reason}"
    if not lowp:
        return None
    if elsewhere is not None and elsewhere.source == "autocast" and not autocast_fp32_op:
        return f"the tensor is a matmul output, float16 under autocast: {elsewhere.reason}"
    if region is not None:
        if autocast_fp32_op and region.device != "cpu":
            return None
        if region.effective_dtype == "float16":
            return "the tensor is a matmul output, float16 under autocast"
        return None
    if ctx.precision.configured == "float16":
        return f"the tensor is a matmul output and the project runs in float16 ({ctx.precision.configured_reason})"
    return None


def computed_in_float16(ctx: FileContext, expr: cst.BaseExpression) -> Optional[str]:
    """Why an elementwise op on `expr` (a sigmoid, an exp) runs in float16 here, or None:
    `expr` is float16 (`float16_reason`), or the op sits in a float16 autocast region (which
    leaves such ops in their input's dtype: a layer's output, float16 there), or the project
    is configured to run in float16 everywhere."""
    reason = float16_reason(ctx, expr)
    if reason is not None:
        return reason
    region = ctx.precision.in_autocast
    if region is not None and region.effective_dtype == "float16":
        return "it runs under float16 autocast"
    if ctx.precision.configured_everywhere == "float16":
        return "the project is configured to run in float16"
    return None


def numpy_array(ctx: FileContext, expr: cst.BaseExpression, env: Optional[dict] = None, depth: int = 4) -> bool:
    """`expr` is visibly a NumPy array (`np.array(...)`, `a.astype(...)`, `t.numpy()`, indexed
    or through local names): NumPy statistics are not this linter's business."""
    if depth <= 0:
        return False
    expr = strip_parens(expr)
    if isinstance(expr, cst.Name):
        value, env = ctx.resolve(expr, env)
        expr = strip_parens(value)
    if isinstance(expr, cst.Subscript):
        return numpy_array(ctx, expr.value, env, depth - 1)
    if isinstance(expr, cst.Call):
        full = ctx.qualname(expr.func)
        if full is not None:
            return full.split(".")[0] == "numpy"
        if isinstance(expr.func, cst.Attribute):
            if expr.func.attr.value in ("astype", "numpy"):
                return True
            return numpy_array(ctx, expr.func.value, env, depth - 1)
    return False


__all__ = ["float16_reason", "computed_in_float16", "evidently_float16", "numpy_array"]
