"""NAN303-NAN305, NAN206: cross-entropy, softmax math and full sums left in float16.

PyTorch's autocast computes `cross_entropy` and `nll_loss` in float32 (on CUDA and on the
CPU), so those calls only fail where the logits are evidently float16 and no autocast is in
force. Hand-written softmax math (`exp`, a full `.sum()` of log-probabilities) is not upcast
by CPU autocast and not at all outside autocast, and neither is a full `.sum()` of any
float16 tensor (NAN206, which leaves log-probabilities to NAN305).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from .. import analysis
from ..analysis import dtypes
from ..core.context import FileContext, contains, dotted_name, is_atom, iter_calls, node_code
from ..core.context import strip_parens as _strip_parens
from ..core.diagnostics import Edit, Position, Probe
from ..core.ops import number_value, split_args
from ..analysis.loss_calls import Criteria, LossCall, match_loss_call, record_criterion
from .base import SAFE, UNSAFE, Rule

_FLOAT32 = {"torch.float32", "torch.float", "torch.float64", "torch.double"}
# Methods that keep the receiver's dtype (`logits.view(-1, C)`): an upcast before them counts.
_SAME_DTYPE = {
    "view", "reshape", "flatten", "contiguous", "transpose", "permute", "squeeze",
    "unsqueeze", "clone", "detach", "t", "expand", "view_as", "reshape_as", "narrow",
    "select", "gather", "index_select", "masked_fill", "cuda", "cpu", "to",
}


def strip_parens(node: cst.BaseExpression) -> cst.BaseExpression:
    """Parentheses removed, except around an empty tuple (which needs them)."""
    if isinstance(node, cst.Tuple) and not node.elements:
        return node
    return _strip_parens(node)


def has_upcast(ctx: FileContext, expr: cst.BaseExpression, depth: int = 6) -> bool:
    """True where `expr` is evidently float32 or wider by an explicit upcast: `.float()`,
    `.double()`, `.to(torch.float32)`, `log_softmax(..., dtype=torch.float32)`, also through
    a local name and views (`logits.float().view(-1, C)`)."""
    env = None
    while depth > 0:
        depth -= 1
        expr = strip_parens(expr)
        if isinstance(expr, cst.Name):
            resolved, env = ctx.resolve(expr, env, 1)
            if resolved is expr:
                return False
            expr = resolved
            continue
        if isinstance(expr, cst.Subscript):
            expr = expr.value
            continue
        if not isinstance(expr, cst.Call):
            return False
        split = split_args(expr.args)
        if split is None:
            return False
        positional, keywords = split
        dtype = keywords.get("dtype")
        if dtype is not None and ctx.qualname(dtype) in _FLOAT32:
            return True
        op = ctx.op(expr)
        if op is not None and op.name in ("log_softmax", "softmax") and op.args:
            expr = op.args[0]  # `log_softmax(logits.float(), -1)`
            continue
        func = expr.func
        if not isinstance(func, cst.Attribute):
            return False
        method = func.attr.value
        if method in ("float", "double") and not positional:
            return True
        if method in ("to", "type"):
            if any(ctx.qualname(a) in _FLOAT32 for a in positional):
                return True
            if any(ctx.precision.dtype_of(a) for a in positional):
                return False  # `.to(torch.float16)`: a downcast after any upcast
        if method in _SAME_DTYPE and ctx.qualname(func.value) is None:
            expr = func.value
            continue
        return False
    return False


def _log_softmax_input(ctx: FileContext, expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """x where `expr` is `log_softmax(x, ...)` written in place (no `dtype=`)."""
    op = ctx.op(strip_parens(expr))
    if op is not None and op.name == "log_softmax" and op.args and "dtype" not in op.kwargs:
        return op.args[0]
    return None


def logits_dtype(ctx: FileContext, logits: cst.BaseExpression) -> Optional[str]:
    """The evident half dtype of a loss input, as the analysis follows it (through local
    names, selections, reshapes, elementwise ops and `log_softmax`, which keep a dtype)."""
    return dtypes.evident_half_dtype(ctx, logits)


def upcast_target(ctx: FileContext, logits: cst.BaseExpression) -> cst.BaseExpression:
    """Where `.float()` goes: on the logits, or inside `log_softmax(x)` written in place
    (`log_softmax(x.float())`: the log-probabilities are then computed in float32 too)."""
    inner = _log_softmax_input(ctx, logits)
    return inner if inner is not None else logits


def _written_half(node: cst.BaseExpression) -> Optional[cst.Name]:
    """The `half` of `x.half()` written in place (not parenthesized)."""
    if (
        isinstance(node, cst.Call)
        and not node.lpar
        and not node.args
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "half"
    ):
        return node.func.attr
    return None


def upcast_edits(ctx: FileContext, node: cst.BaseExpression) -> Tuple[Edit, ...]:
    """Edits that turn `node` into `node.float()` (`(a + b).float()` for a non-atom),
    leaving everything inside untouched (comments included); `x.half()` written in place
    becomes `x.float()` (the same value in real arithmetic, without the float16 rounding)."""
    half = _written_half(node)
    if half is not None:
        return (ctx.replace(half, "float"),)
    if node.lpar:
        _, end = ctx.span(node.rpar[-1])
        return (Edit(end, end, ".float()"),)
    start, end = ctx.span(node)
    if is_atom(node):
        return (Edit(end, end, ".float()"),)
    return (Edit(start, start, "("), Edit(end, end, ").float()"))


def with_float(node: cst.BaseExpression) -> cst.BaseExpression:
    """`node.float()` as a tree (for probes), `x.float()` for `x.half()`."""
    if _written_half(node) is not None:
        return node.with_deep_changes(node.func, attr=cst.Name("float"))  # type: ignore[union-attr]
    inner = node if is_atom(node) else node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(func=cst.Attribute(value=inner, attr=cst.Name("float")))


def _harness(loss: LossCall, dtype: str, in_autocast: bool) -> Probe:
    return Probe(
        kind="harness",
        harness="cross-entropy-half",
        params=(
            ("label_smoothing", loss.label_smoothing),
            ("reduction", loss.reduction),
            ("dtype", dtype),
            ("in_autocast", in_autocast),
        ),
    )


def _spelled(loss: LossCall) -> str:
    return "`nll_loss`" if loss.kind == "nll_loss" else "`cross_entropy`"


class _LossRule(Rule):
    """Shared matching for the rules about cross_entropy/nll_loss calls."""

    def __init__(self) -> None:
        self._criteria = Criteria()

    def leave_Assign(self, node: cst.Assign, ctx: FileContext) -> None:
        record_criterion(ctx, node, self._criteria)

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        loss = match_loss_call(ctx, node, self._criteria)
        if loss is not None:
            self.check(loss, ctx)

    def check(self, loss: LossCall, ctx: FileContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class CrossEntropyHalfLogits(_LossRule):
    code = "NAN303"
    kind = "misuse"
    default_enabled = True
    untuned_precision = (
        "The corpora's cross-entropy runs in float32 or under autocast."
    )
    fails_in = 'float16'
    triggers = r"cross_entropy|nll_loss|CrossEntropyLoss|NLLLoss"
    name = "cross-entropy-half-logits"
    message = (
        "Cross-entropy on float16 logits outside autocast is computed in float16: on the CPU "
        "the loss is inf once the batch's summed loss passes 65504 (about 6,600 targets at "
        "loss 10) and NaN with a zero gradient from 65,520 targets; on CUDA the mean stays "
        "finite but every loss carries float16 rounding; pass `logits.float()`"
    )
    fix_applicability = SAFE
    fix_title = "Upcast the logits with `.float()`"
    summary = (
        "`cross_entropy`/`nll_loss` on evidently float16 logits outside autocast: inf loss past "
        "65504, zero gradient past 65,519 targets."
    )
    why = """\
Inside `torch.autocast` the loss is a float32 value whatever the dtype of the logits (on
CUDA its log-softmax still runs in float16: see NAN304). Outside autocast `cross_entropy`
and `nll_loss` run in the dtype of their input, and on float16 logits the loss and its
reduction are float16 values, whose largest finite value is 65504:

- on the CPU the mean is formed from the float16 sum of the per-target losses: once that
  sum passes 65504 the loss is `inf`, although the mean itself is small. A language model
  at initialization has a loss near ln(32000) = 10.4, so about 6,300 tokens already give
  `inf` (a batch of 8 x 1024 has 8,192);
- the count of targets is a float16 too: from 65,520 targets on it is `inf`, the mean is
  0 or NaN, and the gradient of every logit is exactly 0: the model silently stops
  learning;
- on CUDA (measured on an H100, torch 2.11) the mean is accumulated in float32: the
  `7,000 targets`, `8,192 x 4,096` and `65,520 targets` cases below give finite losses
  there, off by float16 rounding (relative error 2e-4); the cases that follow fail on
  CUDA as on the CPU;
- `reduction="sum"` is `inf` as soon as the summed loss passes 65504;
- `label_smoothing` adds the mean of `-log p` over every class, computed from a float16 sum
  over the classes: with a 32,000-word vocabulary and logits of spread 3 that sum is
  about 4.8e5, so every loss is `inf`, even with `reduction="none"`;
- a single target is `inf` only when its logit is 65520 or more below the largest one.

The gradient of the `inf` losses stays finite (it does not depend on the loss value), so
the failure shows in the logged loss, in every `isfinite(loss)` guard that then skips the
step, and in anything computed from the loss value. Upcasting the logits with `.float()`
makes the whole loss float32; the values are the same up to rounding.

bfloat16 logits are not reported: bfloat16 has float32's range, none of these overflow
(65,520 targets, 1e6 targets, 32,000 classes with smoothing, logits of ±32768 all give finite
losses), and the loss differs from the float32 value by 0.2% to 1% in the measured cases
(bfloat16 keeps 8 significant bits), the gradient by at most 0.6%: the accuracy of any
bfloat16 value, not a failure of the loss.

`reduction="none"` without label smoothing is not reported either: each element only
overflows at a logit margin of 65520, which float16 logits can barely represent.

Logits that are already `inf` (a float16 final layer that overflowed) give NaN in every
context, autocast or not: there the upcast belongs before the overflow (compute the final
linear layer in float32), not at the loss. With every target equal to `ignore_index` the
mean is NaN (0/0) in every dtype, by design (pytorch/pytorch#70348).
"""
    measured = """\
torch 2.13, CPU, `F.cross_entropy` outside autocast (the same kernels serve `nll_loss` and
`nn.CrossEntropyLoss`). The last column is `.float()` on the float16 logits; autocast
(`torch.autocast("cpu", dtype=torch.float16)`) gives the same value in every row, and so
does float64 on the same inputs.

| input | float16 logits | bfloat16 logits | `.float()` or autocast |
|---|---|---|---|
| 2 classes, logits ±32752 (loss 65504) | 65504 | 65536 | 65504 |
| 2 classes, logits ±32768 (loss 65536) | inf | 65536 | 65536 |
| mean, 6,551 targets at loss 10 (sum 65,510) | 10 | 10 | 10 |
| mean, 7,000 targets at loss 10 (sum 70,000) | inf | 10 | 10 |
| mean, 8,192 targets x 4,096 classes, logits N(0, 3²) | inf | 12.75 | 12.659 |
| mean, 65,520 targets at loss 0.698 | 0, gradient 0 | 0.691 | 0.698 |
| mean, 65,520 targets x 8 classes, logits N(0, 1) | NaN, gradient 0 | 2.5 | 2.483 |
| mean, 1e6 targets x 8 classes, logits N(0, 3²) | NaN, gradient 0 | 4.6875 | 4.698 |
| `reduction="sum"`, 8,192 x 1,000 classes, N(0, 3²) | inf | 91,136 | 91,880 |
| `label_smoothing=0.1`, 64 x 32,000 classes, N(0, 3²) | inf | 14.125 | 14.155 |
| the same with `reduction="none"` | inf in every row | finite | finite |
| `label_smoothing=0.1`, 10 classes, one logit 7,000 | 630 | 628 | 630 |
| `label_smoothing=0.1`, 10 classes, one logit 7,300 | inf | 656 | 657 |
| `label_smoothing=0.1`, 1,000 classes, one logit 66 | inf | 6.594 | 6.593 |

The smoothing term overflows once (classes - 1) x the logit margin passes 65504. In every
`inf` row the gradient stays finite and correct; in the `65,520 targets` rows it is exactly
0 (the float16 count of targets is `inf`).

torch 2.11 on an NVIDIA H100, the same constructions on CUDA (`benchmarks/verify_devices.md`
says how; the logits are drawn anew, so the N(0, 3²) rows differ slightly from the CPU's):

| input | float16 logits | `.float()` |
|---|---|---|
| 2 classes, logits ±32768 (loss 65536) | inf | 65536 |
| mean, 7,000 targets at loss 10 | 10 | 10 |
| mean, 8,192 targets x 4,096 classes, N(0, 3²) | 12.6562 | 12.6591 |
| mean, 65,520 targets x 8 classes, N(0, 1) | 2.48242 | 2.48294 |
| `reduction="sum"`, 8,192 x 1,000 classes, N(0, 3²) | inf | 91,447.8 |
| `label_smoothing=0.1`, 64 x 32,000 classes, N(0, 3²) | inf | 15.1233 |
| the same with `reduction="none"` | inf | finite |

The gradient stayed finite in every row.
"""
    example = """\
```python
import torch.nn.functional as F

model = model.half()
logits = model(tokens)                      # float16
loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
```"""
    use_instead = """\
```python
import torch.nn.functional as F

model = model.half()
logits = model(tokens)
loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))
```

or run the forward pass under `torch.autocast(device_type="cuda", dtype=torch.float16)`
with a float32 model, which returns a float32 loss by itself (on CUDA `.float()` on the
logits is still the more accurate of the two: see NAN304)."""
    fix_notes = """\
Safe: `.float()` is added to the logits argument (`logits` -> `logits.float()`, `a + b` ->
`(a + b).float()`); float16 values convert to float32 exactly, so only the rounding of the
loss changes (the result is float32 instead of float16). It costs one float32 copy of the
logits. Only evidently float16 logits are reported: `.half()`, `.to(torch.float16)`, a
float16 factory, a local name holding one, or the output of a module made `.half()` in the
file, also after ops that keep the dtype (`logits / temperature`, `logits.clamp(...)`,
selections and reshapes; a `.float()` on the way ends it). A function the file calls inside
a float16 autocast region is left alone (autocast computes the loss in float32 there), as are
calls inside any `torch.autocast` / `torch.cuda.amp.autocast` / `torch.cpu.amp.autocast`
region (or a function decorated with one) are left alone."""
    references = (
        "https://pytorch.org/docs/stable/amp.html#autocast-op-reference",
        "https://pytorch.org/docs/stable/generated/torch.nn.functional.cross_entropy.html",
        "https://github.com/pytorch/pytorch/issues/70348 (all targets ignored: NaN mean)",
    )

    def check(self, loss: LossCall, ctx: FileContext) -> None:
        if ctx.precision.in_autocast is not None:
            return
        if logits_dtype(ctx, loss.logits) != "float16":
            return
        if loss.reduction == "none" and not loss.smoothing:
            return
        if analysis.called_under_autocast(ctx) is not None:
            return  # autocast computes the loss in float32 where the file calls this
        name = _spelled(loss)
        if loss.smoothing:
            message = (
                f"{name} with `label_smoothing` on float16 logits outside autocast: the "
                "smoothing term sums -log p over every class in float16, which passes 65504 "
                "(inf loss) for a 32,000-class vocabulary at ordinary logits, or for 10 classes "
                "once a logit leads by 7,300; pass `logits.float()`"
            )
        elif loss.reduction == "sum":
            message = (
                f"{name} with `reduction=\"sum\"` on float16 logits outside autocast: the "
                "float16 sum is inf as soon as the summed loss passes 65504, which 6,600 "
                "targets at loss 10 already do; pass `logits.float()`"
            )
        else:
            message = None
        ctx.report(
            self,
            loss.call,
            message=message,
            edits=upcast_edits(ctx, upcast_target(ctx, loss.logits)),
            probe=_harness(loss, "float16", False),
        )


class CrossEntropyNoUpcast(_LossRule):
    code = "NAN304"
    kind = "misuse"
    default_enabled = True
    untuned_precision = (
        'On by default as one of the hazards the project exists for (seed 001: a segmentation '
        'model trained with AMP on CUDA). Inside an autocast region that is evidently on the CPU '
        '(`torch.autocast("cpu")`, `torch.cpu.amp.autocast()`) nothing is reported: there the '
        'loss is computed in float32.'
    )
    fails_in = 'CUDA float16 autocast: the log-softmax runs in float16 (inf from logit gaps near 65504, 2e-4 relative error per target)'
    triggers = r"cross_entropy|nll_loss|CrossEntropyLoss|NLLLoss"
    name = "cross-entropy-no-upcast"
    message = (
        "cross-entropy under autocast without `.float()` on the logits: on CUDA its "
        "log-softmax runs in the logits' float16 (measured on an H100: `inf` for logits of "
        "±32768 where `.float()` gives 65536, and up to 2.2e-4 relative error per target); "
        "CPU autocast computes it in float32; write `logits.float()`"
    )
    fix_applicability = SAFE
    fix_title = "Upcast the logits with `.float()`"
    summary = (
        "`cross_entropy`/`nll_loss` under CUDA autocast without an explicit `.float()` on the "
        "logits: the log-softmax runs in float16."
    )
    why = """\
Inside `torch.autocast` on CUDA, `F.cross_entropy` returns a float32 loss, but its
log-softmax is computed in the dtype of the logits (measured on an H100, torch 2.11). With
float16 logits each target's loss is off by up to 2.2e-4 relative (9.8e-4 for bfloat16 logits
under `autocast(bfloat16)`), against 1e-8 with `.float()`, and logits of ±32768 (65536 apart)
give `inf` where `.float()` gives 65536. The autocast op reference lists `cross_entropy` among
the ops that run in float32, and the result is float32, which is why this looks safe; the
computation inside it is not. This is the shape of the segmentation model of seed 001:
`F.cross_entropy(model(images), masks, ignore_index=255)` under AMP, whose logits for pixels
that are never trained grow without bound.

On the CPU, autocast computes the loss in float32 (float16 logits of ±32768, 65,520 targets
and label smoothing over 32,000 classes all give the float32 value there), so a region that is
evidently a CPU one is not reported.

`logits.float()` (or `.to(torch.float32)`, or `log_softmax(..., dtype=torch.float32)` before
`nll_loss`) makes the whole loss float32 on every device, and keeps it so when the call moves
out of the autocast region (see NAN303 for what fails then). The copy costs one float32 tensor
of the logits' size.

The rule reports every `cross_entropy` / `nll_loss` / `nn.CrossEntropyLoss` / `nn.NLLLoss`
call inside an autocast region that may run on CUDA (a `with torch.autocast("cuda")`,
`torch.cuda.amp.autocast()`, `torch.autocast(device_type=device)` block or a function decorated
with one) whose input is not explicitly upcast (`.float()`, `.double()`, `.to(torch.float32)`,
or `log_softmax(..., dtype=torch.float32)` for `nll_loss`), also through a local name.
"""
    measured = """\
torch 2.13, CPU, `F.cross_entropy` on float16 logits.

| input | no autocast | `torch.autocast("cpu", dtype=torch.float16)` | `.float()` |
|---|---|---|---|
| 2 classes, logits ±32768 | inf | 65536 (float32) | 65536 |
| mean, 8,192 targets x 4,096 classes | inf | 12.6591 | 12.6591 |
| mean, 65,520 targets x 8 classes | NaN, gradient 0 | 2.48294 | 2.48294 |
| `label_smoothing=0.1`, 64 x 32,000 classes | inf | 14.1547 | 14.1547 |
| `reduction="sum"`, 8,192 x 1,000 classes | inf | 91,879.9 | 91,879.9 |

On the CPU, under autocast the explicit upcast changes nothing measurable: both are float32.

torch 2.11 on an NVIDIA H100, `F.cross_entropy` on float16 logits (bfloat16 logits under
`autocast(bfloat16)` in the last column); relative error against float64 in brackets.

| input | `torch.autocast("cuda", dtype=torch.float16)` | `.float()` | bfloat16 under autocast |
|---|---|---|---|
| 2 classes, logits ±32768 | inf (float32) | 65536 | 65536 |
| mean, 8,192 targets x 4,096 classes | 12.659 (2.9e-6) | 12.6591 (1e-8) | 12.659 (2.7e-6) |
| mean, 65,520 targets x 8 classes | 2.48294 (1.9e-7) | 2.48294 (9e-8) | 2.48293 (3.7e-6) |
| `label_smoothing=0.1`, 64 x 32,000 classes | 15.1236 (1.9e-5) | 15.1233 (4e-8) | 15.1276 (2.8e-4) |
| the same, `reduction="none"`, worst row | 19.8154 (2.2e-4) | 19.8198 (1e-8) | 19.8004 (9.8e-4) |
| `reduction="sum"`, 8,192 x 1,000 classes | 91,448 (2e-6) | 91,447.8 (1.5e-8) | 91,448.5 (7.6e-6) |
"""
    example = """\
```python
import torch
import torch.nn.functional as F

with torch.autocast(device_type="cuda", dtype=torch.float16):
    logits = model(x)
    loss = F.cross_entropy(logits, y)
```"""
    use_instead = """\
```python
import torch
import torch.nn.functional as F

with torch.autocast(device_type="cuda", dtype=torch.float16):
    logits = model(x)
    loss = F.cross_entropy(logits.float(), y)
```"""
    fix_notes = """\
Safe: `.float()` is added to the logits argument. On the CPU autocast already computed
the loss in float32, so the value does not change; on CUDA the loss becomes more accurate
(the log-softmax now runs in float32 too). The cost is one float32 copy of the logits."""
    references = (
        "https://pytorch.org/docs/stable/amp.html#autocast-op-reference",
        "https://pytorch.org/docs/stable/notes/amp_examples.html",
    )

    def check(self, loss: LossCall, ctx: FileContext) -> None:
        region = ctx.precision.in_autocast
        if region is None or region.device == "cpu":
            return  # CPU autocast computes the loss in float32
        if has_upcast(ctx, loss.logits):
            return
        name = _spelled(loss)
        ctx.report(
            self,
            loss.call,
            message=self.message.replace("cross-entropy", name, 1),
            edits=upcast_edits(ctx, upcast_target(ctx, loss.logits)),
            probe=_harness(loss, region.effective_dtype or "float16", True),
        )


# ---------------------------------------------------------------------------- NAN305


def _negated(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """`-x`, `torch.neg(x)`, `-k * x`, `x * -k`: an exponent written as a decay."""
    expr = strip_parens(expr)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        return True
    op = ctx.op(expr)
    if op is None:
        return False
    if op.name == "neg":
        return True
    if op.name in ("mul", "div") and len(op.args) == 2:
        for side in op.args:
            value = number_value(side)
            if value is not None and value < 0:
                return True
            if _negated(ctx, side) and op.name == "mul":
                return True
    return False


def _half_root_is_factory(ctx: FileContext, expr: cst.BaseExpression, depth: int = 6) -> bool:
    """True where the float16 tensor is made by a torch factory (`torch.randn(...,
    dtype=torch.float16)`, `torch.arange(5).half()`): its values are bounded by the call."""
    env = None
    while depth > 0:
        depth -= 1
        expr = strip_parens(expr)
        if isinstance(expr, cst.Name):
            resolved, env = ctx.resolve(expr, env, 1)
            if resolved is expr:
                return False
            expr = resolved
            continue
        if isinstance(expr, cst.Subscript):
            expr = expr.value
            continue
        if not isinstance(expr, cst.Call):
            return False
        full = ctx.qualname(expr.func)
        if full is not None and full.startswith("torch.") and "." not in full[len("torch."):]:
            return True
        if isinstance(expr.func, cst.Attribute) and full is None:
            expr = expr.func.value
            continue
        return False
    return False


def _has_exp(ctx: FileContext, tree: cst.CSTNode, names=()) -> bool:
    """`tree` contains an `exp` call (or one of `names`, locals holding an `exp`)."""
    stack = [tree]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Name) and n.value in names:
            return True
        op = ctx.op(n) if isinstance(n, cst.Call) else None
        if op is not None and op.name == "exp":
            return True
        stack.extend(n.children)
    return False


def _owned_by_other_rules(ctx: FileContext, node: cst.BaseExpression, names=()) -> bool:
    """An `exp` (or a local `names` holding one) that is part of a hand-written log-sum-exp,
    softplus, softmax or sigmoid (`log(exp(x).sum())`, `log(1 + exp(x))`, `exp(x) /
    exp(x).sum()`, `1 / (1 + exp(z))`): those rules (NAN107, NAN104, NAN108, NAN101) report
    the whole expression, with its fix."""
    for ancestor in reversed(ctx.stack[:-1]):
        if isinstance(ancestor, (cst.BaseSmallStatement, cst.BaseCompoundStatement, cst.Lambda)):
            return False
        op = ctx.op(ancestor)
        if op is None:
            continue
        if op.name in ("log", "log1p", "log2", "log10", "reciprocal"):
            return True
        if op.name == "pow" and len(op.args) == 2 and (number_value(op.args[1]) or 0) < 0:
            return True
        if op.name == "div" and len(op.args) == 2:
            numerator, denominator = op.args
            if contains(denominator, node):
                return True
            if contains(numerator, node) and _has_exp(ctx, denominator, names):
                return True
    return False


def _probe_inline(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """Inline local names into the probe unless that would pull in a call the verifier
    cannot run (`model(x)`, `self.net(x)`)."""
    for call in iter_calls(ctx.canonical(node)):
        chain = dotted_name(call.func)
        if chain is None or chain.split(".")[0] in ("torch", "math"):
            continue
        if isinstance(call.func, cst.Name) and chain not in ("float", "int", "range", "len"):
            return False
        if chain in ctx.precision.half_modules:
            return False
        if chain.startswith("self.") and chain.rsplit(".", 1)[1] not in _KNOWN_METHODS:
            return False
    return True


_KNOWN_METHODS = {
    "exp", "log", "sum", "mean", "float", "half", "to", "view", "reshape", "gather",
    "squeeze", "unsqueeze", "log_softmax", "softmax", "max", "amax",
}


def _expression_probe(ctx: FileContext, node, target, replacement) -> Probe:
    inline = _probe_inline(ctx, node)
    original = ctx.canonical(node, inline=inline)
    fixed = ctx.canonical(node.deep_replace(target, replacement), inline=inline)
    return ctx.expression_probe(original, fixed)


class HalfSoftmaxMath(Rule):
    code = "NAN305"
    kind = "misuse"
    default_enabled = True
    untuned_precision = (
        "The tune half's false alarm: float16 features minus float32 centroids promote to float32 "
        "before the `exp`, and the centroids' dtype came from the caller."
    )
    fails_in = 'float16'
    triggers = r"half|float16|HalfTensor|autocast"
    name = "half-softmax-math"
    message = (
        "Softmax math in float16 where PyTorch does not upcast: `exp` is inf from 11.09 on and "
        "a full `.sum()` of log-probabilities is inf past 65504; compute it in float32 with "
        "`.float()`"
    )
    fix_applicability = SAFE
    fix_title = "Compute in float32 with `.float()`"
    summary = (
        "`exp` of float16 logits (inf from 11.09) or a full `.sum()` of float16 log-probabilities "
        "(inf past 65504) outside CUDA autocast."
    )
    why = """\
Outside autocast, and inside CPU autocast (which keeps `exp`, `log`, `softmax`,
`log_softmax` and `sum` in the lower precision), hand-written softmax math on float16
tensors runs in float16, whose largest finite value is 65504:

- `exp(x)` is `inf` from x = 11.09 on, and its gradient with it. Trained classifiers and
  language models produce logits above 11 routinely; float32 holds until 88.7. The rule
  reports `exp` of a float16 tensor (a `.half()` conversion, a float16 module's output, a
  view of one, or one of these scaled, clamped or shifted: `out.clamp(max=20)`,
  `out / temperature`) that is not shifted by its maximum, negated, or bounded below 11
  first (`out.clamp(max=10).exp()` is at most 22026);
- a full `.sum()` of float16 log-probabilities (`-(one_hot * log_softmax(x)).sum()`,
  `-log_probs.gather(1, y[:, None]).sum()`, or the `reduction="none"` output of a float16
  cross-entropy) is `inf` once the summed loss passes 65504: 6,600 tokens at a loss of 10.
  `.mean()` is not affected (measured on the CPU, it returns the right mean of 1e6
  float16 values of 10), nor is a sum over the class dimension of a one-hot product (one
  term per row).

Not reported, because they do not fail by themselves in float16 (measured on the CPU):
`softmax` and `log_softmax` of float16 logits (computed internally in float32; the largest
error of the probabilities is 2.4e-4, and log-probabilities are finite up to a margin of
65504), and `.mean()`. `log(exp(x).sum())` and `exp(x) / exp(x).sum()` are reported by
NAN107 and NAN108, whose fixes (`logsumexp`, `softmax`) are right in every dtype. Inside
CUDA autocast all of these ops run in float32 and nothing is reported; bfloat16 has
float32's range (exp overflows at 89) and is not reported.
"""
    measured = """\
torch 2.13, CPU, float16 tensors outside autocast (and the same inside
`torch.autocast("cpu", dtype=torch.float16 or torch.bfloat16)`, where `exp`, `log_softmax`
and `sum` of float16 tensors still return float16). `logp = F.log_softmax(logits.half(),
-1)` with logits N(0, 3²) over 4,096 classes.

| expression | input | float16 | `.float()` first |
|---|---|---|---|
| `torch.exp(x)` | x = 11.08 (11.078 in float16) | 64736 | 64739 |
| `torch.exp(x)` | x = 11.09 (11.094 in float16) | inf | 65759 |
| gradient of `torch.exp(x)` | x = 11.5 | inf | 98716 |
| `-logp.gather(1, y[:, None]).sum()` | 1,024 targets | 13,056 | 13,057 |
| `-logp.gather(1, y[:, None]).sum()` | 8,192 targets | inf | 104,362 |
| `-(F.one_hot(y, C) * logp).sum()` | 8,192 targets | inf | 104,362 |
| `-(F.one_hot(y, C) * logp).sum(-1).mean()` | 8,192 targets | 12.742 | 12.740 |
| `x.mean()` | 1e6 values of 10 | 10 | 10 |
| `x.sum()` | 1e6 values of 10 | inf | 1e7 |

The gradient of an overflowed sum stays finite: the failure is the `inf` loss value
(logging, `isfinite` guards, anything computed from it). `F.softmax` of float16 logits
(scales 3, 10, 30) is within 2.4e-4 of the float64 result and `F.log_softmax` is finite.
"""
    example = """\
```python
import torch.nn.functional as F

model = model.half()
logits = model(tokens)
probs = logits.exp()                                  # inf from 11.09
logp = F.log_softmax(logits, -1)
loss = -logp.gather(1, targets[:, None]).sum()        # inf past 65504
```"""
    use_instead = """\
```python
import torch.nn.functional as F

model = model.half()
logits = model(tokens)
probs = logits.float().exp()
logp = F.log_softmax(logits, -1)
loss = -logp.gather(1, targets[:, None]).float().sum()
```

or, better, `F.cross_entropy(logits.float(), targets)` / `logits.float().softmax(-1)`."""
    fix_notes = """\
For a full `.sum()` the fix adds `.float()` before it (`t.sum()` -> `t.float().sum()`,
`torch.sum(t)` -> `torch.sum(t.float())`): safe, the float16 values convert exactly and
the sum is accumulated and returned in float32, a scalar loss that every later use
accepts.

For `exp` the fix adds `.float()` to the argument (`x.exp()` -> `x.float().exp()`): exact
in real arithmetic, but the result is then a float32 tensor where a float16 one was, and a
later `matmul` or `index_put` with float16 operands raises a dtype error. It is therefore
offered as an unsafe fix (`--unsafe-fixes`). Where the exponentials are normalized,
subtracting the row maximum (or `softmax`) is the better change."""
    references = (
        "https://pytorch.org/docs/stable/amp.html#autocast-op-reference",
        "https://pytorch.org/docs/stable/generated/torch.exp.html",
    )

    def __init__(self) -> None:
        self._criteria = Criteria()
        # Per function: `e = x.exp()` findings held back until the function ends, dropped
        # if `e` turns out to feed a hand-written softmax/logsumexp (reported by NAN107/108).
        self._pending: List[Dict[str, dict]] = [{}]

    def visit_FunctionDef(self, node: cst.FunctionDef, ctx: FileContext) -> None:
        self._pending.append({})

    def leave_FunctionDef(self, node: cst.FunctionDef, ctx: FileContext) -> None:
        self._flush(self._pending.pop(), ctx)

    def leave_Module(self, node: cst.Module, ctx: FileContext) -> None:
        self._flush(self._pending[0], ctx)

    def _flush(self, pending: Dict[str, dict], ctx: FileContext) -> None:
        done = set()
        for finding in pending.values():
            if id(finding) in done or finding.get("dropped"):
                continue
            done.add(id(finding))
            ctx.report(self, finding["node"], **finding["report"])

    def visit_Name(self, node: cst.Name, ctx: FileContext) -> None:
        pending = self._pending[-1]
        if node.value not in pending or len(ctx.stack) < 2:
            return
        parent = ctx.stack[-2]
        if isinstance(parent, cst.AssignTarget):
            return
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            return  # `obj.e` is not the local `e`
        if isinstance(parent, cst.Arg) and parent.keyword is node:
            return
        if _owned_by_other_rules(ctx, node, tuple(pending)):
            pending[node.value]["dropped"] = True

    def leave_Assign(self, node: cst.Assign, ctx: FileContext) -> None:
        record_criterion(ctx, node, self._criteria)
        pending = self._pending[-1]
        for target in node.targets:
            t = target.target
            if not isinstance(t, cst.Name):
                continue
            # `s = e.sum(-1)`: s carries e's exponentials into a later `log(s)` / `e / s`.
            op = ctx.op(strip_parens(node.value))
            source = op.args[0] if op is not None and op.name == "sum" and op.args else None
            if isinstance(source, cst.Name) and source.value in pending:
                pending[t.value] = pending[source.value]
            elif t.value in pending and pending[t.value]["node"] is not strip_parens(node.value):
                finding = pending.pop(t.value)  # rebound: report what it held
                if finding not in pending.values() and not finding.get("dropped"):
                    ctx.report(self, finding["node"], **finding["report"])

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        op = ctx.op(node)
        if op is None or ctx.precision.upcasts_softmax_math:
            return
        if op.name == "exp":
            self._check_exp(node, op, ctx)
        elif op.name == "sum":
            self._check_sum(node, op, ctx)

    # -- exp of float16 logits
    def _check_exp(self, node: cst.Call, op, ctx: FileContext) -> None:
        if len(op.args) != 1 or op.kwargs:
            return
        argument = op.args[0]
        if _negated(ctx, argument) or analysis.value(ctx, argument).hi <= analysis.FLOAT16_EXP_LIMIT:
            # A decay, log-probabilities (at most 0), a clamp or branch that keeps the
            # exponent below float16's overflow edge.
            return
        if not dtypes.evidently_float16(ctx, argument):
            return
        if _half_root_is_factory(ctx, argument):
            return
        if _owned_by_other_rules(ctx, node):
            return
        region = ctx.precision.in_autocast
        where = "inside CPU autocast (which leaves `exp` in float16)" if region else "outside autocast"
        report = dict(
            message=(
                f"`exp` of float16 logits {where}: it is inf from 11.09 on, and so is its "
                "gradient (float32 holds until 88.7); compute it in float32 with `.float()`"
            ),
            edits=upcast_edits(ctx, argument),
            applicability=UNSAFE,
            fix_message="Compute `exp` in float32 with `.float()` (the result becomes float32)",
            probe=_expression_probe(ctx, node, argument, with_float(argument)),
        )
        parent = ctx.stack[-2] if len(ctx.stack) >= 2 else None
        if (
            isinstance(parent, cst.Assign)
            and parent.value is node
            and len(parent.targets) == 1
            and isinstance(parent.targets[0].target, cst.Name)
        ):
            self._pending[-1][parent.targets[0].target.value] = {"node": node, "report": report}
            return
        ctx.report(self, node, **report)

    # -- a full sum of float16 log-probabilities / losses
    def _check_sum(self, node: cst.Call, op, ctx: FileContext) -> None:
        if len(op.args) != 1 or op.kwargs:
            return  # a sum over a dimension, or with `dtype=`
        operand = op.args[0]
        if not self._half_terms(ctx, operand, 6):
            return
        region = ctx.precision.in_autocast
        where = "inside CPU autocast (which leaves `sum` in float16)" if region else "outside autocast"
        ctx.report(
            self,
            node,
            message=(
                f"Full `.sum()` of float16 log-probabilities {where}: the float16 total is inf "
                "once the summed loss passes 65504 (6,600 targets at loss 10); sum in float32 "
                "with `.float()`"
            ),
            edits=upcast_edits(ctx, operand),
            probe=_expression_probe(ctx, node, operand, with_float(operand)),
        )

    def _half_terms(self, ctx: FileContext, expr: cst.BaseExpression, depth: int) -> bool:
        """float16 log-probabilities or per-target losses: `log_softmax` of float16 logits,
        a float16 `cross_entropy(..., reduction="none")`, and negations, selections
        (`gather`, indexing) and products with integer/float16 factors of those."""
        if depth <= 0:
            return False
        expr = strip_parens(expr)
        if isinstance(expr, cst.Name):
            value = ctx.value_of(expr, 1)
            return value is not expr and self._half_terms(ctx, value, depth - 1)
        if isinstance(expr, cst.Subscript):
            return self._half_terms(ctx, expr.value, depth - 1)
        if isinstance(expr, cst.Call):
            loss = match_loss_call(ctx, expr, self._criteria)
            if loss is not None:
                return (
                    loss.reduction == "none"
                    and logits_dtype(ctx, loss.logits) == "float16"
                    and ctx.precision.in_autocast is None
                )
        op = ctx.op(expr)
        if op is not None:
            if op.name == "neg" and op.args:
                return self._half_terms(ctx, op.args[0], depth - 1)
            if op.name == "mul" and len(op.args) == 2 and not op.kwargs:
                for terms, other in ((op.args[0], op.args[1]), (op.args[1], op.args[0])):
                    if self._half_terms(ctx, terms, depth - 1) and self._keeps_half(ctx, other):
                        return True
                return False
            if op.name == "sum" and "dtype" not in op.kwargs and len(op.args) >= 2:
                return self._half_terms(ctx, op.args[0], depth - 1)  # row sums, then all
            if op.name == "log_softmax" and op.args and "dtype" not in op.kwargs:
                return ctx.precision.half_dtype(op.args[0]) == "float16"
            return False
        if isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value in _SAME_DTYPE and func.attr.value != "to":
                if ctx.qualname(func.value) is None:
                    return self._half_terms(ctx, func.value, depth - 1)
        return False

    @staticmethod
    def _keeps_half(ctx: FileContext, other: cst.BaseExpression) -> bool:
        """A factor whose product with a float16 tensor stays float16: a number, an integer
        one-hot, or a float16 tensor. An unknown tensor may be float32 (no overflow)."""
        if number_value(other) is not None:
            return True
        value = ctx.value_of(other) if isinstance(other, cst.Name) else other
        if isinstance(value, cst.Call) and ctx.qualname(value.func) == "torch.nn.functional.one_hot":
            return True
        return ctx.precision.half_dtype(other) == "float16"


# --------------------------------------------------------------------------- NAN206


_ELEMENTWISE = {"mul", "add", "sub", "pow", "abs", "neg", "square", "relu"}


def _half_values(ctx: FileContext, expr: cst.BaseExpression, depth: int) -> bool:
    """`expr` is evidently a float16 tensor: by itself, or an elementwise product, power,
    sum or absolute value of float16 tensors and numbers (`h * h`, `(h ** 2)`, `h.abs()`)."""
    if ctx.precision.half_dtype(expr) == "float16":
        return True
    if depth <= 0:
        return False
    op = ctx.op(strip_parens(expr))
    if op is None or op.name not in _ELEMENTWISE or not op.args or op.kwargs:
        return False
    tensors = [a for a in op.args if number_value(a) is None]
    return bool(tensors) and all(_half_values(ctx, a, depth - 1) for a in tensors)


class _DropHalfCasts(cst.CSTTransformer):
    """`x.half()` / `x.to(torch.float16)` -> `x` (in canonical probe expressions)."""

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = updated.func
        if not isinstance(func, cst.Attribute):
            return updated
        method = func.attr.value
        if method == "half" and not updated.args:
            return func.value
        if method in ("to", "type") and len(updated.args) == 1 and node_code(updated.args[0].value) in (
            "torch.float16", "torch.half"
        ):
            return func.value
        return updated


class HalfReduction(Rule):
    code = "NAN206"
    kind = "misuse"
    default_enabled = False
    fails_in = 'float16'
    name = "half-reduction"
    triggers = r"half|float16|HalfTensor"
    # Off by default: in the corpora every candidate was a test summing a few outputs of a
    # float16 toy model into a loss (fairseq tests/test_ema.py:232), nowhere near 65504.
    message = (
        "Full `.sum()` of a float16 tensor: the total is inf once it passes 65504 (6,560 "
        "values of 10); accumulate and return it in float32 with `dtype=torch.float32`"
    )
    fix_applicability = SAFE
    fix_title = "Sum with `dtype=torch.float32`"
    summary = "`.sum()` over a whole evidently float16 tensor outside CUDA autocast: inf past 65504."
    why = """\
The largest finite float16 value is 65504. A full `.sum()` of a float16 tensor returns a
float16 total, so it is `inf` as soon as the total passes 65504: 6,560 values of 10, or
1,000 squared values of 10, or a million probabilities. Everything computed from it (a
norm, a mean written as `sum / n`, a logged metric, the loss) is `inf` or NaN.

`.mean()` is not affected: measured on the CPU, the mean of a million float16 values of 10
is 10 (PyTorch accumulates it in float32 and divides before converting back). Inside CUDA
autocast `sum` runs in float32 and nothing is reported; CPU autocast keeps float16 sums in
float16. bfloat16 has float32's range and is not reported.

Off by default: whether a sum passes 65504 depends on how many values it adds and how
large they are, which the source rarely shows. On about 8,500 files of libraries and
research code, all 4 candidates were unit tests summing a handful of float16 outputs into a
dummy loss (fairseq `tests/test_ema.py`), none a real overflow. Enable it
(`--extend-select NAN206`) in code that trains or evaluates in pure float16.

Sums of float16 log-probabilities and per-token losses are NAN305's (half-softmax-math);
this rule reports the other full sums of evidently float16 tensors: a `.half()` conversion, a
factory with `dtype=torch.float16`, a float16 module's output.
"""
    example = """\
```python
x = features.half()
total = (x * x).sum()
```"""
    use_instead = """\
```python
x = features.half()
total = (x * x).sum(dtype=torch.float32)
```"""
    measured = """\
torch 2.13, CPU, float16 tensors (outside autocast, and the same inside
`torch.autocast("cpu", dtype=torch.float16)`).

| expression | input | float16 | `dtype=torch.float32` |
|---|---|---|---|
| `x.sum()` | 1,000 values of 10 | 10,000 | 10,000 |
| `x.sum()` | 6,550 values of 10 | 65,504 | 65,500 |
| `x.sum()` | 6,560 values of 10 | inf | 65,600 |
| `x.sum()` | 1,000 values of 100 | inf | 100,000 |
| `(x ** 2).sum()` | 1,000 values of 10 | inf | 100,000 |
| `x.sum()` | 1e6 uniform values in [0, 1) | inf | 500,015 |
| `x.mean()` | 1e6 values of 10 | 10 | - |

The gradient of an overflowed sum stays finite (ones): the failure is the `inf` value and
what is computed from it.
"""
    fix_notes = """\
`x.sum()` becomes `x.sum(dtype=torch.float32)` and `torch.sum(x)` becomes
`torch.sum(x, dtype=torch.float32)`: safe, the float16 values convert to float32 exactly and
the sum is accumulated in float32. The result is a float32 scalar where a float16 one was;
arithmetic with float16 tensors promotes to float32 from then on (a 0-dimensional float32
tensor does not change the dtype of a float16 tensor it is combined with)."""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.sum.html",
        "https://pytorch.org/docs/stable/amp.html#autocast-op-reference",
    )

    def __init__(self) -> None:
        self._nan305 = HalfSoftmaxMath()

    def leave_Assign(self, node: cst.Assign, ctx: FileContext) -> None:
        record_criterion(ctx, node, self._nan305._criteria)

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        op = ctx.op(node)
        if op is None or op.name != "sum" or len(op.args) != 1 or op.kwargs:
            return
        if ctx.precision.upcasts_softmax_math:
            return
        operand = op.args[0]
        if not _half_values(ctx, operand, 4):
            return
        if self._nan305._half_terms(ctx, operand, 6):
            return  # NAN305 reports sums of float16 log-probabilities
        split = split_args(node.args)
        if split is None:
            return
        dtype, imports = ctx.spell("torch.float32")
        _, end = ctx.span(node)
        close = Position(end.row, end.column - 1)  # before `)`
        if node.args:
            last = node.args[-1]
            _, after = ctx.span(last.value)
            edit = Edit(after, after, f", dtype={dtype}")
        else:
            edit = Edit(close, close, f"dtype={dtype}")
        # The probe leaves the conversion to float16 to the verifier's float16 context: kept,
        # its rounding of a float32 input would count against the fix as well.
        original = ctx.canonical(node, inline=False).visit(_DropHalfCasts())
        terms = ctx.canonical(operand, inline=False).visit(_DropHalfCasts())
        fixed = cst.parse_expression(f"torch.sum({node_code(strip_parens(terms))}, dtype=torch.float32)")
        ctx.report(self, node, edits=(edit,) + imports, probe=ctx.expression_probe(original, fixed))
