"""NAN306-NAN308: losses fed probabilities where they expect log-probabilities or logits.

`F.kl_div` and `F.nll_loss` take log-probabilities and `F.cross_entropy` takes logits. Fed a
softmax output, each computes a different, wrong quantity whose gradient all but vanishes:
no NaN, no warning, a model that trains badly. Loss calls and criteria bound to names
(`self.criterion = nn.CrossEntropyLoss()`) are matched in loss_calls.py.
"""

from __future__ import annotations

from typing import Optional, Tuple

import libcst as cst

from .. import analysis
from ..core.context import FileContext, node_code, strip_parens
from ..core.diagnostics import Edit, Probe
from ..analysis.loss_calls import Criteria, LossCall, loss_input, match_loss_call, record_criterion
from .base import UNSAFE, Rule

_KL_FUNCTION = "torch.nn.functional.kl_div"
_KL_MODULES = {"torch.nn.KLDivLoss", "torch.nn.modules.loss.KLDivLoss"}
_LOG_SOFTMAX = {
    "torch.softmax": "torch.log_softmax",
    "torch.nn.functional.softmax": "torch.nn.functional.log_softmax",
    "torch.special.softmax": "torch.special.log_softmax",
}


# --------------------------------------------------------------------------- matching


class _Probabilities:
    """Where a loss input evidently holds probabilities."""

    def __init__(self, node: cst.BaseExpression, kind: str, softmax: Optional[cst.Call],
                 evidence: str = "") -> None:
        self.node = node  # the loss input as written
        self.kind = kind  # "softmax" or "sigmoid"
        self.softmax = softmax  # the softmax call written in place (fixable), else None
        self.evidence = evidence  # where the analysis saw it made, for a value made elsewhere

    def described(self) -> str:
        """`a softmax output`, with where it came from when it is not written in place."""
        what = f"a {self.kind} output"
        return f"{what} ({self.evidence})" if self.evidence else what


def _probability_op(ctx: FileContext, expr: cst.BaseExpression):
    op = ctx.op(strip_parens(expr))
    if op is None:
        return None
    if op.name == "softmax" and op.args and "dtype" not in op.kwargs:
        return "softmax", op
    if op.name == "sigmoid" and len(op.args) == 1 and not op.kwargs:
        return "sigmoid", op
    return None


def probabilities(ctx: FileContext, expr: cst.BaseExpression, sigmoid: bool) -> Optional[_Probabilities]:
    """The loss input `expr` is a softmax output (or, with `sigmoid`, a sigmoid output):
    written in place (the fix can rewrite it), or made elsewhere as far as the value-flow
    analysis follows it (a local, a helper or method that returns one, a model whose
    `forward` or last `nn.Sequential` layer is a softmax, a module held in an attribute). A
    softmax that was indexed or reshaped since is no longer a whole distribution over the
    classes: not matched."""
    found = _probability_op(ctx, expr)
    if found is not None:
        kind, _ = found
        if kind == "sigmoid" and not sigmoid:
            return None
        return _Probabilities(expr, kind, strip_parens(expr) if kind == "softmax" else None)
    v = analysis.value(ctx, expr) if sigmoid else analysis.softmax_distribution(ctx, expr)
    if v is None:
        return None
    if (sigmoid and v.prob == "sigmoid") or (v.prob == "softmax" and v.simplex_dim is not None):
        return _Probabilities(expr, v.prob, None, analysis.cite(ctx, v))
    return None


def _kl_module(ctx: FileContext, node) -> Optional[cst.Call]:
    while isinstance(node, cst.Call):
        if ctx.qualname(node.func) in _KL_MODULES:
            return node
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("cuda", "to", "cpu"):
            node = node.func.value
            continue
        return None
    return None


class _KLCriteria:
    def __init__(self) -> None:
        self.module_level = {}
        self.attributes = {}

    def record(self, ctx: FileContext, node: cst.Assign) -> None:
        if _kl_module(ctx, node.value) is None:
            return
        for target in node.targets:
            t = target.target
            if isinstance(t, cst.Name) and len(ctx.scopes) == 1:
                self.module_level[t.value] = node.value
            elif isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                cls = ctx.enclosing_class()
                if cls is not None:
                    self.attributes[(cls, t.attr.value)] = node.value

    def matches(self, ctx: FileContext, func: cst.BaseExpression) -> Optional[str]:
        """"functional", "module" or "criterion" where `func(...)` is a KL divergence."""
        if ctx.qualname(func) == _KL_FUNCTION:
            return "functional"
        if isinstance(func, cst.Call):
            return "module" if _kl_module(ctx, func) is not None else None
        if isinstance(func, cst.Name):
            if ctx.binding(func.value) is not None:
                return "criterion" if _kl_module(ctx, ctx.value_of(func)) is not None else None
            return "criterion" if func.value in self.module_level else None
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            return "criterion" if (ctx.enclosing_class() or "", func.attr.value) in self.attributes else None
        return None


def _to_log_softmax(ctx: FileContext, softmax: cst.Call) -> Tuple[Edit, ...]:
    """Edits that make `softmax(...)` `log_softmax(...)` in the same spelling."""
    func = softmax.func
    if isinstance(func, cst.Attribute):
        full = ctx.qualname(func)
        if full is None or full in _LOG_SOFTMAX:  # `x.softmax(d)`, `F.softmax(x, d)`
            return (ctx.replace(func.attr, "log_softmax"),)
        return ()
    full = ctx.qualname(func)
    if full not in _LOG_SOFTMAX:
        return ()
    name, imports = ctx.spell(_LOG_SOFTMAX[full])
    return (ctx.replace(func, name),) + imports


def _first_arg(call: cst.Call) -> Optional[cst.BaseExpression]:
    if any(a.star for a in call.args):
        return None
    return loss_input(call)


# --------------------------------------------------------------------------- rules


_WRONG_QUANTITY_NOTE = """\
The fix changes the loss value: the original computes a different (wrong) quantity, not the
same one less accurately, so it is offered as an unsafe fix (`--unsafe-fixes`). Loss curves,
learning rates tuned around the old values and early-stopping thresholds change with it.

Findings carry no verifier probe: `nanlint verify` judges an expression against its own
float64 value, and a wrong-but-finite loss agrees with itself in every precision."""


def _harness(loss: str) -> Probe:
    """The verifier's loss-on-probabilities harness: a confidently wrong batch, whose
    gradient under the misused loss all but vanishes (the value itself stays finite)."""
    return Probe(kind="harness", harness="loss-on-probabilities", params=(("loss", loss),))


# NAN306 and NAN307 share their account: neither has a finding of its own on the test halves.
_MISUSE_FAMILY = (
        'Judged by the misuse claim (the code gives the loss probabilities, on a path that runs), '
        'every such finding of this family so far was correct; these rules were off only because '
        'the earlier standard counted no wrong-but-finite loss as a hazard.'
)


class KLDivOnProbabilities(Rule):
    code = "NAN306"
    kind = "misuse"
    default_enabled = True
    untuned_precision = _MISUSE_FAMILY
    fails_in = 'all (wrong input: vanishing gradient)'
    name = "kl-div-on-probabilities"
    triggers = r"kl_div|KLDivLoss"
    message = (
        "`kl_div` takes log-probabilities as its input but is given probabilities (a softmax/"
        "sigmoid output): it computes sum(q * (log q - p)), which is not a divergence, can be "
        "negative, and has a gradient about 1e4 times too small on typical logits (vanishing on "
        "confidently wrong ones); pass `log_softmax` instead"
    )
    fix_applicability = UNSAFE
    fix_title = "Pass `log_softmax(x, dim)` instead of `softmax(x, dim)`"
    summary = "`F.kl_div`/`nn.KLDivLoss` given probabilities where it expects log-probabilities."
    why = """\
`F.kl_div(input, target)` computes `target * (log(target) - input)` element by element: its
`input` must be log-probabilities (and `target` probabilities, or log-probabilities with
`log_target=True`). Fed `softmax(x)` instead, the loss is `sum(q log q) - sum(q p)`: the first
term does not depend on the model, the second is bounded by 1. The value is negative (it is
not a divergence), barely moves as the prediction changes, and its gradient is tens of
thousands of times smaller than the true KL's: a distillation or VAE term that silently does
nothing. Nothing raises and nothing is NaN.

`F.kl_div(torch.log(F.softmax(x)), q)` has the right meaning but underflows to `-inf`: that is
NAN102 (log of softmax), which reports it; this rule does not.
"""
    example = """\
```python
import torch.nn.functional as F

loss = F.kl_div(F.softmax(student, -1), F.softmax(teacher, -1), reduction="batchmean")
```"""
    use_instead = """\
```python
import torch.nn.functional as F

loss = F.kl_div(F.log_softmax(student, -1), F.softmax(teacher, -1), reduction="batchmean")
```"""
    measured = """\
torch 2.13, CPU, float32. 4,096 rows of 10 classes, `q = softmax(2 * randn)`, student logits
`s * randn`; `reduction="batchmean"`; gradient norm with respect to the logits.

| logit scale s | KL with `log_softmax` (right) | with `softmax` (wrong) | gradient norm, right | gradient norm, wrong |
|---|---|---|---|---|
| 1 | 2.496 | -8.378 | 6.1e-4 | 3.2e-8 |
| 3 | 6.466 | -8.378 | 2.7e-3 | 2.8e-7 |
| 10 | 33.39 | -8.378 | 1.2e-2 | 1.2e-6 |
| student = target | 0.000 | -8.379 | 0 | - |
"""
    fix_notes = (
        "`softmax(x, d)` written in place becomes `log_softmax(x, d)` in the same spelling "
        "(`F.softmax` -> `F.log_softmax`, `x.softmax(d)` -> `x.log_softmax(d)`). A sigmoid "
        "input, or probabilities made elsewhere (a local name, a helper or method that returns "
        "them, a model whose `forward` or last layer is a softmax) are reported without a fix; "
        "the message says where they were made.\n\n"
        + _WRONG_QUANTITY_NOTE
    )
    references = ("https://pytorch.org/docs/stable/generated/torch.nn.functional.kl_div.html",)

    def __init__(self) -> None:
        self._criteria = _KLCriteria()

    def leave_Assign(self, node: cst.Assign, ctx: FileContext) -> None:
        self._criteria.record(ctx, node)

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        kind = self._criteria.matches(ctx, node.func)
        if kind is None:
            return
        first = _first_arg(node)
        if first is None:
            return
        probs = probabilities(ctx, first, sigmoid=True)
        if probs is None:
            return
        edits: Tuple[Edit, ...] = ()
        if probs.softmax is not None:
            edits = _to_log_softmax(ctx, probs.softmax)
        message = (
            f"`kl_div` takes log-probabilities as its input but is given {probs.described()}: it computes "
            "sum(q * (log q - p)), which is not a divergence, can be negative, and has a gradient "
            "about 1e4 times too small on typical logits (vanishing on confidently wrong ones); "
            f"pass {'`log_softmax`' if probs.kind == 'softmax' else 'log-probabilities'} instead"
        )
        ctx.report(self, node, message=message, edits=edits, probe=_harness("kl_div"))


class _OnSoftmax(Rule):
    """A cross_entropy / nll_loss call whose input is a softmax output."""

    loss_kind = ""

    def __init__(self) -> None:
        self._criteria = Criteria()

    def leave_Assign(self, node: cst.Assign, ctx: FileContext) -> None:
        record_criterion(ctx, node, self._criteria)

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        loss = match_loss_call(ctx, node, self._criteria)
        if loss is None or loss.kind != self.loss_kind or any(a.star for a in node.args):
            return
        probs = probabilities(ctx, loss.logits, sigmoid=False)
        if probs is None or probs.kind != "softmax":
            return
        self.check(loss, probs, ctx)

    def check(self, loss: LossCall, probs: _Probabilities, ctx: FileContext) -> None:  # pragma: no cover
        raise NotImplementedError


class NLLOnProbabilities(_OnSoftmax):
    code = "NAN307"
    kind = "misuse"
    default_enabled = True
    untuned_precision = _MISUSE_FAMILY
    fails_in = 'all (wrong input: vanishing gradient)'
    name = "nll-on-probabilities"
    triggers = r"nll_loss|NLLLoss"
    loss_kind = "nll_loss"
    message = (
        "`nll_loss` takes log-probabilities but is given softmax probabilities: it returns "
        "-p[target], a value in [-1, 0] whose gradient vanishes as predictions grow confident; "
        "pass `log_softmax` instead (or `cross_entropy` on the logits)"
    )
    fix_applicability = UNSAFE
    fix_title = "Pass `log_softmax(x, dim)` instead of `softmax(x, dim)`"
    summary = "`F.nll_loss`/`nn.NLLLoss` given softmax probabilities instead of log-probabilities."
    why = """\
`F.nll_loss(input, target)` only picks `-input[i, target[i]]` and averages: the log is
expected to be in `input` already (`log_softmax`). Fed `softmax(x)`, the loss is minus the
mean probability of the target, a value in [-1, 0] instead of a cross-entropy in
[0, inf). Its gradient is the cross-entropy's multiplied by `p[target]`: a confidently wrong
prediction, which has the largest cross-entropy gradient, gets almost none (6.4e-5 instead of
1.4 at a logit margin of 10). Training stalls on exactly the examples it gets wrong. Nothing
raises and nothing is NaN.

`F.nll_loss(torch.log(F.softmax(x)), y)` has the right meaning but underflows to `-inf`:
that is NAN102 (log of softmax), which reports it; this rule does not.
"""
    example = """\
```python
import torch.nn.functional as F

loss = F.nll_loss(F.softmax(logits, dim=1), target)
```"""
    use_instead = """\
```python
import torch.nn.functional as F

loss = F.nll_loss(F.log_softmax(logits, dim=1), target)   # or F.cross_entropy(logits, target)
```"""
    measured = """\
torch 2.13, CPU, float32, 10 classes. Random batches: 4,096 rows of logits `s * randn`.
Confidently wrong: one row with logit `m` on class 0, 0 elsewhere, target class 3.

| input | `nll_loss(log_softmax)` | `nll_loss(softmax)` | gradient norm, right | gradient norm, wrong |
|---|---|---|---|---|
| random, s = 1 | 2.71 | -0.101 | 1.6e-2 | 1.7e-3 |
| random, s = 10 | 15.5 | -0.105 | 2.0e-2 | 1.1e-3 |
| confidently wrong, m = 5 | 5.0 | -0.0045 | 1.37 | 8.7e-3 |
| confidently wrong, m = 10 | 10.0 | -4.5e-5 | 1.41 | 6.4e-5 |
| confidently wrong, m = 20 | 20.0 | -2.1e-9 | 1.41 | 2.9e-9 |
"""
    fix_notes = (
        "`softmax(x, d)` written in place becomes `log_softmax(x, d)` in the same spelling. "
        "Probabilities made elsewhere (a local name, a helper or method that returns them, a "
        "model whose `forward` or last layer is a softmax) are reported without a fix, with "
        "where they were made (they may be used elsewhere too; return log-probabilities there, "
        "or logits and use `cross_entropy`).\n\n"
        + _WRONG_QUANTITY_NOTE
    )
    references = ("https://pytorch.org/docs/stable/generated/torch.nn.functional.nll_loss.html",)

    def check(self, loss: LossCall, probs: _Probabilities, ctx: FileContext) -> None:
        edits: Tuple[Edit, ...] = ()
        if probs.softmax is not None:
            edits = _to_log_softmax(ctx, probs.softmax)
        message = None
        if probs.evidence:
            message = (
                f"`nll_loss` takes log-probabilities but is given {probs.described()}: it "
                "returns -p[target], a value in [-1, 0] whose gradient vanishes as predictions "
                "grow confident; return `log_softmax` there (or `nn.LogSoftmax` as a model's last "
                "layer), or return the logits and use `cross_entropy`"
            )
        ctx.report(self, loss.call, message=message, edits=edits, probe=_harness(self.loss_kind))


class CrossEntropyOnSoftmax(_OnSoftmax):
    code = "NAN308"
    kind = "misuse"
    default_enabled = True
    untuned_precision = (
        "The tune half's findings are PyTorch-GAN's auxiliary classifiers, which end in "
        '`nn.Softmax` and train with `CrossEntropyLoss`. It was off only because the earlier '
        'standard counted no wrong-but-finite loss as a hazard.'
    )
    fails_in = 'all (double softmax: vanishing gradient)'
    name = "cross-entropy-on-softmax"
    triggers = r"cross_entropy|CrossEntropyLoss"
    loss_kind = "cross_entropy"
    message = (
        "`cross_entropy` applies log_softmax itself but is given softmax probabilities: the "
        "softmax is applied twice, the loss cannot go below log(C - 1 + e) - 1 and gradients "
        "shrink about 10x on typical logits and vanish on confidently wrong ones; pass the logits"
    )
    fix_applicability = UNSAFE
    fix_title = "Drop the softmax: pass the logits"
    summary = "`F.cross_entropy`/`nn.CrossEntropyLoss` given softmax probabilities (a double softmax)."
    why = """\
`F.cross_entropy(input, target)` expects raw logits and applies `log_softmax` itself. Given
`softmax(x)`, it computes the cross-entropy of `softmax(softmax(x))`: all inputs lie in
[0, 1], so the second softmax is nearly uniform. The loss cannot go below
`log(C - 1 + e) - 1` (1.46 for 10 classes, 9.37 for 32,000) even for a perfect prediction,
and the gradient is about 10 times smaller on typical logits and vanishes on confidently
wrong ones (2.5e-9 instead of 1.4 at a margin of 20). The same holds for a model whose last
layer is `nn.Softmax` trained with `nn.CrossEntropyLoss`. Nothing raises and nothing is NaN:
the model trains slowly and its loss curve plateaus high.
"""
    example = """\
```python
import torch.nn.functional as F

probs = F.softmax(logits, dim=1)
loss = F.cross_entropy(F.softmax(logits, dim=1), target)
```"""
    use_instead = """\
```python
import torch.nn.functional as F

loss = F.cross_entropy(logits, target)
```"""
    measured = """\
torch 2.13, CPU, float32. Random batches: 4,096 rows of 10 classes, logits `s * randn`.
Confidently wrong: one row with logit `m` on class 0, target class 3. Floor: the loss of a
one-hot probability vector on its own class.

| input | `cross_entropy(x)` | `cross_entropy(softmax(x))` | gradient norm | gradient norm, double softmax |
|---|---|---|---|---|
| random, s = 0.1 | 2.308 | 2.303 | 1.5e-2 | 1.5e-3 |
| random, s = 3 | 5.048 | 2.323 | 1.8e-2 | 1.7e-3 |
| random, s = 30 | 45.9 | 2.36 | 2.1e-2 | 6.4e-4 |
| confidently wrong, m = 5 | 5.0 | - | 1.37 | 1.5e-2 |
| confidently wrong, m = 10 | 10.0 | - | 1.41 | 1.2e-4 |
| confidently wrong, m = 20 | 20.0 | - | 1.41 | 2.5e-9 |
| floor, C = 10 / 1,000 / 32,000 | 0 | 1.461 / 5.909 / 9.374 | | |
"""
    fix_notes = (
        "`cross_entropy(softmax(x, d), y)` written in place becomes `cross_entropy(x, y)`. "
        "Probabilities made elsewhere (a local name, a helper or method that returns them, a "
        "model whose `forward` or last layer is a softmax) are reported without a fix, with "
        "where they were made (return the logits there, and apply softmax where probabilities "
        "are needed). A softmax that only runs outside training (`if not self.training:`) is "
        "not reported: the loss sees the logits.\n\n"
        + _WRONG_QUANTITY_NOTE
    )
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.functional.cross_entropy.html",
        "https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html",
    )

    def check(self, loss: LossCall, probs: _Probabilities, ctx: FileContext) -> None:
        edits: Tuple[Edit, ...] = ()
        if probs.softmax is not None:
            logits = ctx.op(probs.softmax).args[0]
            edits = (ctx.replace(probs.softmax, node_code(strip_parens(logits))),)
        message = None
        if probs.evidence:
            message = (
                f"`cross_entropy` applies log_softmax itself but is given {probs.described()}: "
                "the softmax is applied twice, the loss cannot go below log(C - 1 + e) - 1 and "
                "gradients shrink about 10x on typical logits and vanish on confidently wrong ones; pass the logits (drop the softmax where they are "
                "made, or a model's final `nn.Softmax`)"
            )
        ctx.report(self, loss.call, message=message, edits=edits, probe=_harness(self.loss_kind))
