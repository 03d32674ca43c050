"""NAN404: an Adam-family optimizer whose epsilon vanishes in float16 parameters' state."""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from ..core.context import FileContext, dotted_name, iter_calls
from ..core.diagnostics import Probe
from ..core.ops import number_value, split_args
from .base import Rule

# Class -> (positional index of eps, default eps, torch.optim submodule).
_OPTIMIZERS: Dict[str, Tuple[int, float, str]] = {
    "Adam": (3, 1e-8, "adam"),
    "AdamW": (3, 1e-8, "adamw"),
    "Adamax": (3, 1e-8, "adamax"),
    "NAdam": (3, 1e-8, "nadam"),
    "RAdam": (3, 1e-8, "radam"),
    "Adagrad": (5, 1e-10, "adagrad"),
    "RMSprop": (3, 1e-8, "rmsprop"),
}
_QUALNAMES: Dict[str, str] = {}
for _cls, (_, _, _module) in _OPTIMIZERS.items():
    _QUALNAMES[f"torch.optim.{_cls}"] = _cls
    _QUALNAMES[f"torch.optim.{_module}.{_cls}"] = _cls

# Where the denominator's state underflows to 0 in float16 (default hyperparameters).
_UNDERFLOW = {
    "Adam": "v = 0.001 * g² underflows to 0 for |g| < 5.5e-3",
    "AdamW": "v = 0.001 * g² underflows to 0 for |g| < 5.5e-3",
    "NAdam": "v = 0.001 * g² underflows to 0 for |g| < 5.5e-3",
    "RAdam": "v = 0.001 * g² underflows to 0 for |g| < 5.5e-3",
    "RMSprop": "the mean of g² underflows to 0 for |g| < 1.7e-3",
    "Adagrad": "the sum of g² underflows to 0 for |g| < 1.7e-4",
    "Adamax": "max(|g|) is 0 for a zero gradient",
}
SAFE_EPS = 1e-4  # about sqrt(5.96e-8), the square root of float16's smallest subnormal
FP16_ZERO_BELOW = 2.98e-8  # half of the smallest subnormal: smaller values round to 0


def _conversion(call: cst.Call, ctx: FileContext) -> Tuple[Optional[str], Optional[cst.BaseExpression]]:
    """For `X.half()`, `Net().cuda().half()`, `m.to(device, torch.float16)`: the dtype the
    chain of method calls converts to ("float16"/"bfloat16", or None when it ends in float32
    or converts nothing) and the root the chain starts from."""
    node: cst.BaseExpression = call
    dtype: Optional[str] = None
    decided = False
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        if not decided:
            method = node.func.attr.value
            if method in ("half", "bfloat16") and not node.args:
                dtype, decided = ("float16" if method == "half" else "bfloat16"), True
            elif method in ("float", "double") and not node.args:
                dtype, decided = None, True
            elif method in ("to", "type"):
                for arg in node.args:
                    found = ctx.precision.dtype_of(arg.value)
                    full = ctx.qualname(arg.value)
                    if found is not None:
                        dtype, decided = found, True
                        break
                    if full in ("torch.float32", "torch.float", "torch.float64", "torch.double"):
                        dtype, decided = None, True
                        break
        node = node.func.value
    return dtype, node


# Wrappers that keep float32 master copies of float16 parameters and give those to the
# optimizer they wrap: apex's (and fairseq's) `FP16_Optimizer`, apex `amp.initialize`.
_MASTER_WEIGHTS = ("FP16_Optimizer", "amp.initialize")

class AdamEpsHalf(Rule):
    code = "NAN404"
    kind = "misuse"
    default_enabled = True
    untuned_precision = (
        'The one finding is a float16 fine-tuning script that gives Adam a tiny eps.'
    )
    fails_in = 'float16 parameters'
    name = "adam-eps-half"
    message = (
        "Adam-family optimizer with eps below 1e-4 on float16 parameters: eps rounds to 0 in "
        "float16 (below 2.98e-8) and g² underflows, so the update m/(sqrt(v)+eps) divides by "
        "0 and weights become inf/NaN; keep fp32 master weights (autocast + GradScaler) or use "
        "eps >= 1e-4 for fp16 optimizer state"
    )
    summary = "Adam/AdamW/RMSprop/Adagrad with a tiny eps on `.half()` parameters: inf/NaN weights."
    triggers = r"Adam|Adagrad|RMSprop"
    why = """\
Adam keeps `v`, a running mean of `g²`, in the parameters' dtype and updates by
`m / (sqrt(v) + eps)`. With float16 parameters:

- `(1 - beta2) * g²` rounds to 0 in float16 (below 2.98e-8, half the smallest subnormal)
  for every gradient element with |g| < 5.5e-3, so `v` is exactly 0 for small gradients;
- the default `eps=1e-8` (Adagrad: 1e-10) rounds to 0 in float16 as well.

The denominator is then 0: `m / 0` is ±inf for a small nonzero gradient and `0 / 0` is NaN
for a zero one (a dead ReLU unit, an unused embedding row). The weights become inf/NaN at
the first step (RAdam: at step 6, when it starts using `v`). Adagrad and RMSprop divide by
`sqrt(sum of g²) + eps` the same way; Adamax divides by `max(|g|) + eps`, which is 0 only
for zero gradients. A larger eps that does not round to 0 but is below 1e-4 still lets the
update reach `m / eps`: with eps=1e-6 single steps of 5.4 at lr 1e-3.

The standard remedy is to keep fp32 master weights: leave the model in float32 and run the
forward pass under `torch.autocast` with a `GradScaler`; the optimizer state is then
float32. If the parameters must be float16, an eps of at least 1e-4 (about the square root
of the smallest subnormal) keeps the denominator away from 0.

bfloat16 has float32's exponent range: eps=1e-8 and `g²` do not underflow, and Adam on
bfloat16 parameters with the default eps trained without inf/NaN in the same test (its
problem is the 8-bit mantissa, not this one). Only float16 parameters are reported.

Reported where the optimizer is built on the parameters of a module made float16 in the
same function (or, for `self.model`, the same class): `model.half()`, `Net().half()`,
`model.to(torch.float16)`, `model.to(device, dtype=torch.float16)`, directly or through a
list or parameter groups built from `model.parameters()`. Not reported when the function or
class that builds the optimizer also uses autocast or a GradScaler, or wraps the optimizer in
apex's `FP16_Optimizer` or `amp.initialize` (the fp32-master-weights setups: Transformer-XL's
`model.half()` then `FP16_Optimizer(optim.Adam(...))`, a tuning repository), or when eps is
not evident.
"""
    example = """\
```python
model = Net().cuda().half()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
```"""
    use_instead = """\
```python
model = Net().cuda()  # float32 master weights
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda")
with torch.autocast("cuda", dtype=torch.float16):
    loss = criterion(model(x), y)
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()

# or, if the weights must stay float16:
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-4)
```"""
    measured = """\
MLP 16-32-1 (577 weights) trained on random data, lr 1e-3, 300 steps, CPU:

| optimizer | dtype | eps | result |
|---|---|---|---|
| Adam, AdamW, NAdam | float16 | default (1e-8) | 289 weights `inf` after step 1 |
| RAdam | float16 | default (1e-8) | 287 `inf`, 2 NaN at step 6 |
| RMSprop | float16 | default (1e-8) | 153 weights `inf` after step 1 |
| Adagrad | float16 | default (1e-10) | 12 weights `inf` after step 1 |
| Adam | float16 | 3e-8 | 14 NaN at step 2 |
| Adam | float16 | 1e-7 | weights finite, loss `inf` (single updates of 45.8) |
| Adam | float16 | 1e-6 | loss 7.59 (single updates of 5.4) |
| Adam | float16 | 1e-5 | loss 0.091 (single updates of 0.55) |
| Adam | float16 | 1e-4 | loss 0.073 (single updates of 0.055) |
| Adam | float16 | 1e-8, `fused=True` | finite, but single updates of 23.3 |
| Adam | bfloat16 | 1e-8 | loss 0.297, finite after 3000 steps |
| Adam | float32 | 1e-8 | loss 0.238 |

One float16 parameter per gradient value, one step, default eps: Adam/AdamW/NAdam give NaN
at g = 0 and -inf at g = 1e-4, 1e-3, 5e-3, finite from 6e-3; Adagrad NaN at 0, -inf at
1e-4; RMSprop NaN at 0, -inf at 1e-4 and 1e-3; Adamax NaN at g = 0 only. With eps=1e-4
every case stays finite; in bfloat16 every case stays finite with the default eps.
CUDA (foreach/fused kernels) was not measured.
"""
    fix_notes = """\
No automatic fix: the right change (fp32 master weights with autocast, or a larger eps) is
a decision about the training setup.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.optim.Adam.html",
        "https://pytorch.org/docs/stable/notes/amp_examples.html",
        "https://github.com/pytorch/pytorch/issues/147437 (default eps ineffective in float16)",
        "https://github.com/pytorch/pytorch/issues/8860 (NaN loss in half precision; eps=1e-4)",
        "https://discuss.pytorch.org/t/adam-half-precision-nans/1765",
    )

    def __init__(self) -> None:
        # (scope key, chain) -> dtype of a module conversion.
        self._conversions: Dict[Tuple[object, str], Optional[str]] = {}
        self._constructors: List[Tuple[cst.Call, str, float, List[Tuple[object, str]], Set[object]]] = []
        # Enclosing functions/classes (or "module") where autocast or a GradScaler is used.
        self._mixed_precision: Set[object] = set()

    # ------------------------------------------------------------------ collecting
    def _scope_key(self, ctx: FileContext, chain: str) -> object:
        want = cst.ClassDef if chain.startswith("self.") else cst.FunctionDef
        for node in reversed(ctx.stack):
            if isinstance(node, want):
                return id(node)
        return "module"

    def visit_Expr(self, node: cst.Expr, ctx: FileContext) -> None:
        if isinstance(node.value, cst.Call) and isinstance(node.value.func, cst.Attribute):
            dtype, root = _conversion(node.value, ctx)
            chain = dotted_name(root) if root is not None and root is not node.value else None
            if dtype is not None and chain:
                self._conversions[(self._scope_key(ctx, chain), chain)] = dtype

    def visit_Assign(self, node: cst.Assign, ctx: FileContext) -> None:
        if not isinstance(node.value, cst.Call):
            return
        dtype, _ = _conversion(node.value, ctx)
        if dtype is None:
            return
        for target in node.targets:
            chain = dotted_name(target.target)
            if chain:
                self._conversions[(self._scope_key(ctx, chain), chain)] = dtype

    @staticmethod
    def _enclosing(ctx: FileContext) -> Set[object]:
        found: Set[object] = {
            id(n) for n in ctx.stack if isinstance(n, (cst.FunctionDef, cst.ClassDef))
        }
        return found or {"module"}

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        full = ctx.qualname(node.func)
        if full is None:
            func = node.func
            if isinstance(func, cst.Attribute) and (
                func.attr.value == "autocast"
                or (func.attr.value == "scale" and "scaler" in (dotted_name(func.value) or "").lower())
            ):
                # `accelerator.autocast()`, `scaler.scale(loss)`: fp32 master weights.
                self._mixed_precision |= self._enclosing(ctx)
            return
        if ctx.precision.autocast_region(node) is not None or full.endswith("GradScaler") \
                or full.endswith(_MASTER_WEIGHTS):
            self._mixed_precision |= self._enclosing(ctx)
            return
        cls = _QUALNAMES.get(full)
        if cls is None:
            return
        split = split_args(node.args)
        if split is None:
            return
        positional, keywords = split
        params = keywords.get("params", positional[0] if positional else None)
        if params is None:
            return
        index, default, _ = _OPTIMIZERS[cls]
        eps_expr = keywords.get("eps", positional[index] if len(positional) > index else None)
        if eps_expr is None:
            eps: Optional[float] = default
        else:
            eps = self._number(eps_expr, ctx)
        if eps is None or eps >= SAFE_EPS:
            return
        modules = self._modules(params, ctx, 3)
        if not modules:
            return
        keys = []
        for chain in modules:
            keys.append((self._scope_key(ctx, chain), chain))
            keys.append(("module", chain))
        self._constructors.append((node, cls, eps, keys, self._enclosing(ctx)))

    def _number(self, expr: cst.BaseExpression, ctx: FileContext) -> Optional[float]:
        value = number_value(expr)
        if value is not None:
            return value
        resolved = ctx.value_of(expr)
        if resolved is not expr:
            value = number_value(resolved)
            if value is not None:
                return value
        chain = dotted_name(expr)
        return ctx.constant(chain) if chain else None

    def _modules(self, expr: cst.BaseExpression, ctx: FileContext, depth: int) -> Set[str]:
        """Chains `X` of `X.parameters()` calls that `expr` is built from."""
        found: Set[str] = set()
        for call in iter_calls(expr):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in ("parameters", "named_parameters"):
                chain = dotted_name(func.value)
                if chain:
                    found.add(chain)
        if depth > 0:
            for name in _names(expr):
                value = ctx.value_of(name, 1)
                if value is not name:
                    found |= self._modules(value, ctx, depth - 1)
        return found

    # ------------------------------------------------------------------ reporting
    def leave_Module(self, node: cst.Module, ctx: FileContext) -> None:
        for call, cls, eps, keys, enclosing in self._constructors:
            if enclosing & self._mixed_precision:
                continue  # autocast / GradScaler next to it: the fp32-master-weights setup
            if not any(self._half(key) == "float16" for key in keys):
                continue
            ctx.report(
                self,
                call,
                message=self._message(cls, eps),
                probe=Probe(
                    kind="harness",
                    harness="adam-eps-half",
                    params=(("optimizer", cls), ("eps", eps), ("dtype", "float16")),
                ),
            )

    def _half(self, key: Tuple[object, str]) -> Optional[str]:
        scope, chain = key
        for (conv_scope, conv_chain), dtype in self._conversions.items():
            if conv_scope == scope and (chain == conv_chain or chain.startswith(conv_chain + ".")):
                return dtype
        return None

    @staticmethod
    def _message(cls: str, eps: float) -> str:
        underflow = _UNDERFLOW[cls]
        shown = ("%g" % eps).replace("e-0", "e-")
        advice = (
            "keep fp32 master weights (autocast + GradScaler) or use eps >= 1e-4 for fp16 "
            "optimizer state"
        )
        if eps < FP16_ZERO_BELOW:
            return (
                f"`{cls}` with eps={shown} on float16 parameters: eps rounds to 0 in float16 and "
                f"{underflow}, so the update divides by 0 and weights become inf/NaN; {advice}"
            )
        return (
            f"`{cls}` with eps={shown} on float16 parameters: {underflow}, so the update grows "
            f"to the gradient's moment divided by {shown} and the weights jump; {advice}"
        )


def _names(expr: cst.CSTNode) -> List[cst.Name]:
    """Bare names read in `expr` (not attribute names, not keywords)."""
    out: List[cst.Name] = []

    def walk(n: cst.CSTNode) -> None:
        if isinstance(n, cst.Name):
            out.append(n)
            return
        if isinstance(n, cst.Attribute):
            walk(n.value)
            return
        if isinstance(n, cst.Arg):
            walk(n.value)
            return
        for child in n.children:
            walk(child)

    walk(expr)
    return out
