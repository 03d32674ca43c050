"""NAN115, NAN116, NAN119, NAN120, NAN121: probability formulas written out by hand.

Entropy, KL divergence, the logit, Gumbel noise and `exp(logvar)` each have a spelled-out
form that meets `0 * log(0)`, `log(0)` or an overflowing `exp` at values the code produces
by construction, and a torch function or a clamp that does not.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

import libcst as cst

from .. import analysis
from ..analysis import guards, repairs
from ..core.context import FileContext, free_inputs, is_atom, node_code, same_code, strip_parens
from ..core.ops import Op, number_value
from ..analysis.ranges import can_be_zero, dtype_witness, is_guarded, probability_source
from .base import SAFE, UNSAFE, Rule

# ---------------------------------------------------------------------- shared matching


def _unary_arg(ctx: FileContext, node: cst.BaseExpression, name: str) -> Optional[cst.BaseExpression]:
    """A where `node` is `name(A)` with nothing else passed (`torch.log(A)`, `A.log()`)."""
    op = ctx.op(strip_parens(node))
    if op is None or op.name != name or len(op.args) != 1 or op.kwargs:
        return None
    return op.args[0]


def _binary(ctx: FileContext, node: cst.BaseExpression, name: str) -> Optional[Op]:
    op = ctx.op(strip_parens(node))
    if op is None or op.name != name or len(op.args) != 2 or op.kwargs:
        return None
    return op


def _x_log_x(ctx: FileContext, node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """p where `node` is `p * log(p)` or `log(p) * p` (any spelling of both)."""
    op = _binary(ctx, node, "mul")
    if op is None:
        return None
    for x, other in ((op.args[0], op.args[1]), (op.args[1], op.args[0])):
        inner = _unary_arg(ctx, other, "log")
        if inner is not None and same_code(inner, x):
            return strip_parens(x)
    return None


def _entropy_term(ctx: FileContext, p: cst.BaseExpression) -> Optional[str]:
    """Whether `p * log(p)` is reported, and why p can be exactly 0 ("" where the code does
    not show it: a form rule reports the spelling whatever p's range). None where NAN102 /
    NAN103 own the case (a softmax or sigmoid output: their log-space rewrite makes
    `p * log p` finite) or where the code keeps p off 0 (a clamp, an epsilon, a selection or
    `where` that removes its zeros, a flow that excludes 0)."""
    if probability_source(ctx, p) is not None or repairs.repaired_around(ctx) \
            or repairs.repaired_after(ctx, repairs.NAN):
        # NAN102/NAN103's; or a NaN the code replaces on purpose, in the same statement
        # (`nansum`) or right after (`plogp[p == 0] = 0`).
        return None
    if is_guarded(ctx, p) or guards.zeros_removed(ctx, p) or analysis.value(ctx, p).excludes_zero:
        return None
    return can_be_zero(ctx, p) or ""


def _at_zero(reason: str) -> str:
    """How the message says where p meets 0."""
    return f"where p can be exactly 0 ({reason})" if reason else "at p = 0 (an empty bin, an underflowed probability)"


def _probe_text(ctx: FileContext, p: cst.BaseExpression, reason: str) -> Tuple[str, dict]:
    counts = reason == "a ratio of counts"
    canonical = ctx.canonical(p, inline=not counts)
    text = node_code(canonical)
    if not is_atom(canonical):
        text = "(" + text + ")"
    domains = analysis.count_ratio_inputs(ctx, p) if counts else {}
    return text, domains


def _parent(ctx: FileContext, node: cst.CSTNode, skip_arg: bool = False) -> Optional[cst.CSTNode]:
    """The node enclosing `node` in the traversal (through a call argument when asked)."""
    stack = ctx.stack
    try:
        i = len(stack) - 1 - stack[::-1].index(node)
    except ValueError:
        return None
    if i == 0:
        return None
    parent = stack[i - 1]
    if skip_arg and isinstance(parent, cst.Arg) and i >= 2:
        return stack[i - 2]
    return parent


_REDUCTIONS = ("sum", "mean")


# ---------------------------------------------------------------------- NAN116


class EntropyByHand(Rule):
    code = "NAN116"
    kind = "form"
    default_enabled = False
    untuned_precision = (
        'The false alarms: p kept off 0 in ways the analysis does not read (`1 - mean` of a mean '
        'clamped to [eps, 1 - eps], an epsilon added before normalising in another function, a '
        'sigmoid squeezed into [0.005, 0.995], zeros masked out after the product), and an '
        'entropy inside a custom backward that is never differentiated. A repair right after the '
        'product (`plogp[p == 0] = 0`) and `nansum` around it are read since the tune half showed '
        'them. Turn it on with `--extend-select NAN116`: the fix is exact.'
    )
    fails_in = 'all (p = 0)'
    name = "entropy-by-hand"
    message = (
        "Entropy written as `p * log(p)`: at p = 0, 0 * log(0) = 0 * -inf is NaN, in the value "
        "and in the gradient; `torch.special.entr(p)` (= -p log p) or `torch.xlogy(p, p)` take "
        "0 log 0 as 0"
    )
    fix_applicability = SAFE
    fix_title = "Use `torch.special.entr(p)` / `torch.xlogy(p, p)`"
    triggers = r"\blog\b"
    summary = "`p * log(p)`: 0 * -inf = NaN at p = 0 (an empty bin, a ReLU output); use `torch.special.entr`."
    why = """\
Entropy is `-sum(p * log p)` with the convention 0 log 0 = 0 (the limit of x log x as x goes
to 0). Floating point does not know the convention: `log(0)` is `-inf` and `0 * -inf` is NaN,
so one empty bin makes the whole sum NaN, and the backward pass of the product is NaN too.
Zeros are visible in the code: a ReLU or `clamp(min=0)` output, a ratio of counts such as
`torch.bincount(y) / n` (any class absent from the batch).

`torch.special.entr(p)` computes `-p * log(p)` and returns exactly 0 at p = 0;
`torch.xlogy(p, p)` computes `p * log(p)` with the same convention. Both equal the original
wherever p > 0.

`p * log(p)` is an unstable spelling of `-entr(p)`, so it is reported whatever p's origin:
a function parameter `probs` is reported like a ratio of counts, and the message names the
reason p reaches 0 where the analysis sees one. A softmax or sigmoid output written in view
is left to NAN102 / NAN103, which report `log(softmax(x))` / `log(sigmoid(x))`: their rewrite
(`log_softmax`, `logsigmoid`) keeps `p * log_p` finite (0 * -120, not 0 * -inf). Not reported
where the code keeps p off 0: a clamp or an epsilon, a selection that tests p itself
(`p[p > 0]`, `p[p.nonzero(as_tuple=True)]`, a local `keep = p != 0`), a `torch.where` /
`masked_fill` that replaces its zeros; a selection by anything else (`p[labels == c]`,
`p[valid.bool()]`) keeps p's zeros and is reported.
"""
    example = """\
```python
import torch

def label_entropy(labels, n_classes):
    counts = torch.bincount(labels, minlength=n_classes).float()
    p = counts / counts.sum()
    return -(p * torch.log(p)).sum()
```"""
    use_instead = """\
```python
import torch

def label_entropy(labels, n_classes):
    counts = torch.bincount(labels, minlength=n_classes).float()
    p = counts / counts.sum()
    return torch.special.entr(p).sum()
```"""
    measured = """\
torch 2.13 CPU, p = [0, 0.5, 0.5] (true entropy log 2 = 0.693).

| dtype | `-(p * torch.log(p)).sum()` | its gradient w.r.t. p | `torch.special.entr(p).sum()` | `-torch.xlogy(p, p).sum()` |
|---|---|---|---|---|
| float32 | NaN | [NaN, -0.307, -0.307] | 0.693 | 0.693 |
| float16 | NaN | [NaN, -0.307, -0.307] | 0.693 | 0.693 |
| bfloat16 | NaN | [NaN, -0.309, -0.309] | 0.691 | 0.691 |

For p = `F.relu(h)` at h = [-1, 0, 0.5] (float32): `p * torch.log(p)` is [NaN, NaN, -0.347];
`torch.xlogy(p, p)` is [0, 0, -0.347] and the gradient w.r.t. h is [0, 0, 0.307] (the ReLU's
backward masks the derivative of x log x at 0, which is -inf: entr's gradient there is inf,
xlogy's NaN, so a gradient flowing into p itself at exactly 0 stays non-finite).
"""
    fix_notes = """\
Safe: exact wherever p > 0, and the value at p = 0 is the limit the formula means.
`-(p * log p)` (also followed by `.sum(...)` / `.mean(...)` or inside `torch.sum(...)`) becomes
`torch.special.entr(p)` with the reduction kept; a bare `p * log p` becomes `torch.xlogy(p, p)`.
The derivative of p log p at p = 0 is -inf in real arithmetic: no rewrite makes a gradient
with respect to p finite there; what the fix removes is the NaN value and the NaN that
the ReLU/clamp backward would otherwise receive.
"""
    references = (
        "https://pytorch.org/docs/stable/special.html#torch.special.entr",
        "https://pytorch.org/docs/stable/generated/torch.xlogy.html",
    )

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        p = _x_log_x(ctx, node)
        if p is None:
            return
        reason = _entropy_term(ctx, p)
        if reason is None or _inside_kl(ctx, node):
            return
        text, domains = _probe_text(ctx, p, reason)
        probe = ctx.expression_probe(
            cst.parse_expression(f"{text} * torch.log({text})"),
            cst.parse_expression(f"torch.xlogy({text}, {text})"),
            domains,
        )
        message = (
            f"Entropy written as `p * log(p)`: {_at_zero(reason)}, "
            "0 * log(0) = 0 * -inf is NaN, in the value and in the gradient; "
            "`torch.special.entr(p)` (= -p log p) or `torch.xlogy(p, p)` take 0 log 0 as 0"
        )
        ctx.report(self, node, message=message, edits=self._edits(node, p, ctx), probe=probe)

    def _edits(self, node: cst.BaseExpression, p: cst.BaseExpression, ctx: FileContext):
        """The widest exact rewrite whose span holds no comment: `-(p log p)` -> `entr(p)`,
        `-(p log p).sum(d)` / `-torch.sum(p log p, d)` -> `entr(p).sum(d)`, `(p log p).sum()`
        -> `torch.xlogy(p, p).sum()`, else the product alone -> `torch.xlogy(p, p)`."""
        p_code = node_code(p)
        entr, entr_imports = ctx.spell("torch.special.entr")
        xlogy, xlogy_imports = ctx.spell("torch.xlogy")
        entr_expr = cst.parse_expression(f"{entr}({p_code})")
        xlogy_expr = cst.parse_expression(f"{xlogy}({p_code}, {p_code})")
        candidates = []
        parent = _parent(ctx, node, skip_arg=True)
        if _is_minus(parent):
            candidates.append((parent, node_code(entr_expr), entr_imports))
        call = parent
        if isinstance(parent, cst.Attribute) and parent.value is node:
            call = _parent(ctx, parent)
        reduction = ctx.op(call) if isinstance(call, cst.Call) else None
        if reduction is not None and reduction.name in _REDUCTIONS and reduction.args and reduction.args[0] is node:
            grand = _parent(ctx, call)
            if _is_minus(grand):
                replaced = _replace_first_operand(call, node, entr_expr)
                if replaced is not None:
                    candidates.append((grand, node_code(replaced), entr_imports))
            replaced = _replace_first_operand(call, node, xlogy_expr)
            if replaced is not None:
                candidates.append((call, node_code(replaced), xlogy_imports))
        candidates.append((node, node_code(xlogy_expr), xlogy_imports))
        for target, text, imports in candidates:
            if "#" not in node_code(target):
                return (ctx.replace(target, text),) + imports
        return ()


def _is_minus(node: Optional[cst.CSTNode]) -> bool:
    return isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus)


def _replace_first_operand(call: cst.Call, operand: cst.BaseExpression, new: cst.BaseExpression):
    """`call` with its receiver (method form) or first argument (function form) replaced."""
    if isinstance(call.func, cst.Attribute) and call.func.value is operand:
        return call.with_changes(func=call.func.with_changes(value=new))
    if call.args and call.args[0].value is operand:
        return call.with_changes(args=[call.args[0].with_changes(value=new)] + list(call.args[1:]))
    return None


def _inside_kl(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """`p * log p - p * log q`: NAN121 reports the whole KL term."""
    parent = _parent(ctx, node)
    op = _binary(ctx, parent, "sub") if isinstance(parent, cst.BaseExpression) else None
    return op is not None and op.args[0] is node and _kl_terms(ctx, parent) is not None


# ---------------------------------------------------------------------- NAN121


def _kl_terms(ctx: FileContext, node: cst.BaseExpression):
    """(p, q) where `node` is `p * (log p - log q)`, `p * log(p / q)` or
    `p * log p - p * log q` (factors in either order)."""
    op = _binary(ctx, node, "mul")
    if op is not None:
        for p, other in ((op.args[0], op.args[1]), (op.args[1], op.args[0])):
            diff = _binary(ctx, other, "sub")
            if diff is not None:
                lp = _unary_arg(ctx, diff.args[0], "log")
                lq = _unary_arg(ctx, diff.args[1], "log")
                if lp is not None and lq is not None and same_code(lp, p):
                    return strip_parens(p), strip_parens(lq)
            inner = _unary_arg(ctx, other, "log")
            ratio = _binary(ctx, inner, "div") if inner is not None else None
            if ratio is not None and same_code(ratio.args[0], p):
                return strip_parens(p), strip_parens(ratio.args[1])
        return None
    op = _binary(ctx, node, "sub")
    if op is not None:
        first = _x_log_x(ctx, op.args[0])
        second = _binary(ctx, op.args[1], "mul")
        if first is None or second is None:
            return None
        for x, other in ((second.args[0], second.args[1]), (second.args[1], second.args[0])):
            lq = _unary_arg(ctx, other, "log")
            if lq is not None and same_code(x, first) and not same_code(lq, first):
                return first, strip_parens(lq)
    return None


class KlByHand(Rule):
    code = "NAN121"
    kind = "form"
    default_enabled = False
    untuned_precision = (
        'The tune half showed three kinds of false alarm; the analysis now reads two: a '
        'conditional epsilon (`p + eps * (p <= eps)`, as PPLM writes it) and a uniform prior '
        '`torch.ones(C) / C` keep p off 0, and a `nansum` around the term is a repair. A kernel '
        'density estimate bounded below by construction is still reported.'
    )
    fails_in = 'all (p or q = 0)'
    name = "kl-by-hand"
    message = (
        "KL divergence written as `p * (log p - log q)`: at p = 0, 0 * -inf is NaN; "
        "`torch.xlogy(p, p) - torch.xlogy(p, q)` takes 0 log 0 as 0"
    )
    fix_applicability = SAFE
    fix_title = "Use `torch.xlogy(p, p) - torch.xlogy(p, q)`"
    triggers = r"\blog\b"
    summary = "`p * (log p - log q)` / `p * log(p / q)`: NaN at p = 0; use `torch.xlogy`."
    why = """\
The KL divergence sum p log(p / q) takes 0 log(0 / q) = 0: a class p never puts mass on adds
nothing. Written out, `log(0)` is -inf (or `log(0 / q)` is), and `0 * -inf` is NaN, which
poisons the sum and the gradient. `torch.xlogy(p, p) - torch.xlogy(p, q)` is the same formula
with xlogy(0, y) = 0 built in. (Where q is 0 and p is not, the true divergence is +inf; the
rewrite gives +inf there as well.)

Three spellings are matched: `p * (log p - log q)`, `p * log(p / q)` and
`p * log p - p * log q`, whatever p's origin (the message names the reason p reaches 0 where
the analysis sees one: a ReLU or `clamp(min=0)` output, a ratio of counts). A softmax p
written in view is NAN102's (`log_softmax` keeps the product finite); a p the code keeps off
0 (a clamp, an epsilon) is not reported.
"""
    example = """\
```python
import torch

def label_shift(train_labels, test_labels, k):
    p = torch.bincount(test_labels, minlength=k) / test_labels.numel()
    q = torch.bincount(train_labels, minlength=k).clamp(min=1) / train_labels.numel()
    return (p * (torch.log(p) - torch.log(q))).sum()
```"""
    use_instead = """\
```python
import torch

def label_shift(train_labels, test_labels, k):
    p = torch.bincount(test_labels, minlength=k) / test_labels.numel()
    q = torch.bincount(train_labels, minlength=k).clamp(min=1) / train_labels.numel()
    return (torch.xlogy(p, p) - torch.xlogy(p, q)).sum()
```"""
    measured = """\
torch 2.13 CPU, p = [0, 0.5, 0.5], q = [0.2, 0.4, 0.4] (true KL 0.223).

| dtype | `(p * (log p - log q)).sum()` | `(p * log(p / q)).sum()` | `(xlogy(p, p) - xlogy(p, q)).sum()` |
|---|---|---|---|
| float32 | NaN | NaN | 0.223 |
| float16 | NaN | NaN | 0.223 |
| bfloat16 | NaN | NaN | 0.223 (0.2227) |
"""
    fix_notes = """\
Safe: exact wherever p > 0, and 0 at p = 0, the value the formula means. The fix replaces the
product; a reduction around it stays. Reached through local names only as far as p's origin:
the product itself must be written in one expression.
"""
    references = ("https://pytorch.org/docs/stable/generated/torch.xlogy.html",)

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        terms = _kl_terms(ctx, node)
        if terms is None:
            return
        p, q = terms
        reason = _entropy_term(ctx, p)
        if reason is None:
            return
        text, domains = _probe_text(ctx, p, reason)
        q_canonical = ctx.canonical(q, inline=reason != "a ratio of counts")
        q_text = node_code(q_canonical)
        domains = dict(domains)
        for name in _names(q_canonical):
            domains.setdefault(name, (0.01, 1.0))
        original = ctx.canonical(node, inline=reason != "a ratio of counts")
        fixed = cst.parse_expression(f"torch.xlogy({text}, {text}) - torch.xlogy({text}, {q_text})")
        xlogy, imports = ctx.spell("torch.xlogy")
        p_code, q_code = node_code(p), node_code(q)
        edit = ctx.replace(node, f"{xlogy}({p_code}, {p_code}) - {xlogy}({p_code}, {q_code})")
        if isinstance(_parent(ctx, node), (cst.BinaryOperation, cst.UnaryOperation)) and not node.lpar:
            edit = ctx.replace(node, f"({xlogy}({p_code}, {p_code}) - {xlogy}({p_code}, {q_code}))")
        message = (
            f"KL divergence written as `p * (log p - log q)`: {_at_zero(reason)}, "
            "0 * -inf is NaN; `torch.xlogy(p, p) - torch.xlogy(p, q)` takes 0 log 0 as 0"
        )
        ctx.report(self, node, message=message, edits=(edit,) + imports,
                   probe=ctx.expression_probe(original, fixed, domains))


def _names(node: cst.BaseExpression) -> List[str]:
    return free_inputs(node)


# ---------------------------------------------------------------------- NAN115


def _logit_operand(ctx: FileContext, node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """p where `node` is `log(p / (1 - p))`, `log(p) - log(1 - p)` or `log(p) - log1p(-p)`."""
    inner = _unary_arg(ctx, node, "log")
    if inner is not None:
        ratio = _binary(ctx, inner, "div")
        if ratio is None:
            return None
        p = ratio.args[0]
        return strip_parens(p) if _is_one_minus(ctx, ratio.args[1], p) else None
    diff = _binary(ctx, node, "sub")
    if diff is None:
        return None
    p = _unary_arg(ctx, diff.args[0], "log")
    if p is None:
        return None
    q = _unary_arg(ctx, diff.args[1], "log")
    if q is not None and _is_one_minus(ctx, q, p):
        return strip_parens(p)
    q = _unary_arg(ctx, diff.args[1], "log1p")
    neg = _unary_arg(ctx, q, "neg") if q is not None else None
    if neg is not None and same_code(neg, p):
        return strip_parens(p)
    return None


def _is_one_minus(ctx: FileContext, node: cst.BaseExpression, p: cst.BaseExpression) -> bool:
    op = _binary(ctx, node, "sub")
    return op is not None and number_value(strip_parens(op.args[0])) == 1.0 and same_code(op.args[1], p)


class LogitByHand(Rule):
    code = "NAN115"
    kind = "value"
    default_enabled = False
    untuned_precision = (
        "Measured earlier by the same claim, on the untuned precision corpus (`benchmarks/precision/`: 86 PyPI packages never used to tune the rules, split by a hash of the package name; every finding read with its function and callers and judged by the project's standard), 0 of 2 on the test split (1 of 4 on the tune split; 1 of 5 before the analysis bounded a `uniform_(1e-6, 1 - 1e-6)` draw), below the 90% bar. "
        "The false alarms left: an affine map of `rand` with a symbolic bias, endpoints sliced off with `[1:-1]`, a weighted mean of sigmoids, and values bounded by their distribution. Turn it on with `--extend-select NAN115` where such values are not in play."
    )
    fails_in = 'all (p = 0 or 1)'
    name = "logit-by-hand"
    message = (
        "Logit written as `log(p / (1 - p))`: it is -inf at p = 0 and +inf at p = 1 (a "
        "float32 sigmoid is exactly 1.0 from 16.6 on) and its gradient is NaN there; use "
        "`torch.logit(p, eps=torch.finfo(p.dtype).eps)`"
    )
    fix_applicability = UNSAFE
    fix_title = "Use `torch.logit(p, eps=torch.finfo(p.dtype).eps)`"
    triggers = r"\blog"
    summary = "`log(p / (1 - p))`, `log(p) - log(1 - p)`: ±inf at p = 0 and 1; use `torch.logit(p, eps=...)`."
    why = """\
The logit `log(p / (1 - p))` is the inverse of the sigmoid. At p = 0 it is `log(0) = -inf`,
at p = 1 it is `log(1 / 0) = +inf`, and its gradient `1 / (p (1 - p))` is inf there (NaN once
multiplied by 0). Probabilities reach exactly 0 and 1 routinely: a float32 sigmoid rounds to
1.0 from z = 16.6, a float16 one from z = 7.6, and masks, targets and clipped scores hold
exact 0s and 1s.

`torch.logit(p, eps)` clamps p to [eps, 1 - eps] first. The epsilon has to fit the dtype:
1 - eps must be representable below 1, which needs eps >= 2^-11 in float16 and 2^-8 in
bfloat16, so `eps=1e-6` still gives +inf at p = 1 in both. `torch.finfo(p.dtype).eps` fits
every dtype (bounds ±15.9 in float32, ±6.93 in float16, ±4.84 in bfloat16).

Not reported: p clamped on both sides first (`p.clamp(eps, 1 - eps)`), p kept off the ends by
`p * (1 - 2 * eps) + eps`, and the DETR-style `log(x1 / x2)` with both parts clamped. A p that
is itself a softmax or sigmoid output is left to NAN103 / NAN201.
"""
    example = """\
```python
import torch

def to_logits(probs):
    return torch.log(probs / (1 - probs))
```"""
    use_instead = """\
```python
import torch

def to_logits(probs):
    return torch.logit(probs, eps=torch.finfo(probs.dtype).eps)
```"""
    measured = """\
torch 2.13 CPU, p = [0, 1, 0.5].

| dtype | `log(p / (1 - p))`, `log(p) - log(1 - p)`, `log(p) - log1p(-p)` | gradient | `torch.logit(p, eps=1e-6)` | `torch.logit(p, eps=torch.finfo(p.dtype).eps)` |
|---|---|---|---|---|
| float32 | [-inf, inf, 0] | [NaN, NaN, 4] | [-13.8, 13.8, 0] | [-15.9, 15.9, 0], gradient [0, 0, 4] |
| float16 | [-inf, inf, 0] | [NaN, NaN, 4] | [-13.8, **inf**, 0] | [-6.93, 6.93, 0] |
| bfloat16 | [-inf, inf, 0] | [NaN, NaN, 4] | [-13.8, **inf**, 0] | [-4.84, 4.84, 0] |

`torch.logit(p, eps=1e-3)` is still +inf at p = 1 in bfloat16 (1 - 1e-3 rounds to 1).
"""
    fix_notes = """\
Unsafe: values of p below eps or above 1 - eps are clamped (the logit saturates at ±15.9 in
float32, ±6.93 in float16, ±4.84 in bfloat16) and their gradient becomes 0. The fix needs a
short expression with p's dtype (`probs` for `probs[:, 0]`); otherwise the finding comes
without a fix.
"""
    references = ("https://pytorch.org/docs/stable/generated/torch.logit.html",)

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        p = _logit_operand(ctx, node)
        if p is None:
            return
        if probability_source(ctx, p) is not None or guards.kept_off_zero_and_one(ctx, p) \
                or guards.zeros_removed(ctx, p):
            return
        if analysis.inside_zero_one(ctx, p) is not None:
            return  # drawn or mapped strictly inside (0, 1): the logit is finite
        if repairs.repaired_after(ctx, repairs.OUT_OF_RANGE):
            return
        canonical = ctx.canonical(p)
        text = node_code(canonical)
        if not is_atom(canonical):
            text = "(" + text + ")"
        names = _names(canonical)
        domains = {names[0]: (0.0, 1.0)} if len(names) == 1 and text == names[0] else {}
        probe = ctx.expression_probe(
            ctx.canonical(node),
            cst.parse_expression(f"torch.logit({text}, eps=torch.finfo({text}.dtype).eps)"),
            domains,
        )
        edits = ()
        witness = dtype_witness(ctx, p)
        if witness is not None:
            logit, imports = ctx.spell("torch.logit")
            finfo, more = ctx.spell("torch.finfo")
            edits = (
                ctx.replace(
                    node,
                    f"{logit}({node_code(p)}, eps={finfo}({node_code(strip_parens(witness))}.dtype).eps)",
                ),
            ) + imports + more
        ctx.report(self, node, edits=edits, probe=probe)


# ---------------------------------------------------------------------- NAN119


def _negated_log(ctx: FileContext, node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """A where `node` is `-log(A)` (`-torch.log(A)`, `-A.log()`, `torch.neg(torch.log(A))`)."""
    inner = _unary_arg(ctx, node, "neg")
    if inner is None:
        return None
    return _unary_arg(ctx, inner, "log")


class GumbelByHand(Rule):
    code = "NAN119"
    kind = "value"
    default_enabled = False
    fails_in = 'float16, bfloat16 (rand returns 0)'
    name = "gumbel-by-hand"
    message = (
        "Gumbel noise written as `-log(-log(u))` with u from `torch.rand`: rand can return "
        "exactly 0, and then the noise is -inf (rand's probability of 0 is 2^-24 per float32 "
        "element, 2.4e-4 in float16, 2e-3 in bfloat16); clamp u to "
        "[finfo.tiny, 1 - finfo.eps]"
    )
    fix_applicability = UNSAFE
    fix_title = "Clamp u to `[torch.finfo(u.dtype).tiny, 1 - torch.finfo(u.dtype).eps]`"
    triggers = r"\blog\b"
    summary = "`-log(-log(torch.rand(...)))`: rand returns exactly 0 (2^-24 per float32 element), noise -inf."
    why = """\
`torch.rand` samples [0, 1): 0 is a possible value. Its probability is 2^-24 per float32
element, which a sampler drawing a vocabulary-sized tensor every step meets within hours, and
much larger in half precision (measured: 2.4e-4 of float16 samples, 2e-3 of bfloat16 samples
are exactly 0). At u = 0, `-log(u)` is +inf and `-log(-log(u))` is -inf. A -inf Gumbel value
added to logits, divided by a temperature and fed to `log_softmax` gives -inf
log-probabilities, and `0 * -inf = NaN` in any loss that multiplies them; it also makes the
noise itself non-finite for `isfinite` checks and anomaly detection.

Clamping u to [`torch.finfo(u.dtype).tiny`, `1 - torch.finfo(u.dtype).eps`] keeps both logs
finite (the noise stays within [-4.47, 15.9] in float32, [-2.27, 6.93] in float16) and changes
only the measure-zero ends. `F.gumbel_softmax` is the packaged alternative.

Not reported: u already clamped or offset by an epsilon (`torch.rand(n) + 1e-10`,
`u.clamp(min=eps)`, `-log(-log(u + eps) + eps)`), and `uniform_(a, b)` with other bounds.
"""
    example = """\
```python
import torch

def gumbel_noise(logits):
    u = torch.rand_like(logits)
    return -torch.log(-torch.log(u))
```"""
    use_instead = """\
```python
import torch

def gumbel_noise(logits):
    u = torch.rand_like(logits)
    return -torch.log(-torch.log(u.clamp(torch.finfo(u.dtype).tiny, 1 - torch.finfo(u.dtype).eps)))
```"""
    measured = """\
torch 2.13 CPU, 10^7 samples of `torch.rand` per dtype (seed 0).

| dtype | samples exactly 0 | `-log(-log(u))` at u = 0 | at u = tiny | at u = 1 - eps | clamped u at 0 |
|---|---|---|---|---|---|
| float32 | 0 of 10^7 (probability 2^-24 = 6e-8) | -inf | -4.47 | 15.9 | -4.47 |
| float16 | 2,423 (2.4e-4) | -inf | -2.27 | 6.93 | -2.27 |
| bfloat16 | 19,470 (1.9e-3) | -inf | -4.47 | 4.84 | -4.47 |
"""
    fix_notes = """\
Unsafe: the samples 0 (and values below `tiny`) become `tiny`; the distribution changes on a
set of probability at most 2^-24 in float32. The fix clamps a local name in place
(`-torch.log(-torch.log(u))` -> `... torch.log(u.clamp(...))`); an inline `torch.rand(...)`
gets the finding without a fix.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.rand.html",
        "https://pytorch.org/docs/stable/generated/torch.nn.functional.gumbel_softmax.html",
    )

    expression_kinds = ("UnaryOperation", "Call")

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        inner = _negated_log(ctx, node)
        u = _negated_log(ctx, inner) if inner is not None else None
        if u is None or analysis.uniform_sample(ctx, u) is None:
            return
        u = strip_parens(u)
        # The probe reads u as a free input over rand's range [0, 1) (a call to torch.rand
        # itself is no input the verifier can sweep).
        canonical = ctx.canonical(u, inline=False)
        text = node_code(canonical) if isinstance(canonical, cst.Name) else "u"
        domains = {text: (0.0, 0.99)}
        probe = ctx.expression_probe(
            cst.parse_expression(f"-torch.log(-torch.log({text}))"),
            cst.parse_expression(
                f"-torch.log(-torch.log({text}.clamp(torch.finfo({text}.dtype).tiny, "
                f"1 - torch.finfo({text}.dtype).eps)))"
            ),
            domains,
        )
        edits = ()
        if isinstance(u, cst.Name):
            finfo, imports = ctx.spell("torch.finfo")
            clamped = f"{u.value}.clamp({finfo}({u.value}.dtype).tiny, 1 - {finfo}({u.value}.dtype).eps)"
            edits = (ctx.replace(u, clamped),) + imports
        ctx.report(self, node, edits=edits, probe=probe)


# ---------------------------------------------------------------------- NAN120

_LOGVAR_NAME = re.compile(
    r"^_*(log_?var|log_?variance|log_?sigma2?|log_?std|log_?sigma_?sq)(_\w+)?$|^\w+_(log_?var|log_?std|log_?sigma)$",
    re.IGNORECASE,
)
# exp(x) is inf in float16 from x = 11.09 (exp(11.09) > 65504).
_FP16_EXP_LIMIT = 11.09


def _logvar_exponent(ctx: FileContext, arg: cst.BaseExpression) -> Optional[Tuple[cst.BaseExpression, float]]:
    """(the log-variance, the factor multiplying it) where `arg` is `logvar`, `0.5 * logvar`,
    `logvar * 0.5` or `logvar / 2`, with a log-variance name (a local, an attribute)."""
    arg = strip_parens(arg)
    factor = 1.0
    op = ctx.op(arg)
    if op is not None and op.name in ("mul", "div") and len(op.args) == 2 and not op.kwargs:
        left, right = (strip_parens(a) for a in op.args)
        if op.name == "mul" and number_value(left) is not None:
            factor, arg = number_value(left), right
        elif number_value(right) is not None and number_value(right) != 0:
            value = number_value(right)
            factor, arg = (value if op.name == "mul" else 1.0 / value), left
        else:
            return None
    if factor <= 0:
        return None
    if isinstance(arg, cst.Name):
        name = arg.value
    elif isinstance(arg, cst.Attribute) and guards.assigned_earlier(ctx, arg) is not None:
        # `self.logvar` set in this function (diffusers' DiagonalGaussianDistribution); an
        # attribute set elsewhere is often a learned parameter (flows' `self.log_scale`).
        name = arg.attr.value
    else:
        return None
    if not _LOGVAR_NAME.match(name):
        return None
    return arg, factor


class ExpLogvar(Rule):
    code = "NAN120"
    kind = "value"
    default_enabled = False
    fails_in = 'float16 from 11.1; float32 from 88.7'
    name = "exp-logvar"
    message = (
        "`exp` of an unclamped log-variance: exp(x) overflows float16 from x = 11.09 "
        "(exp(0.5 x) from 22.2) and float32 from 88.7, and an inf variance makes the KL term "
        "and the sample NaN; clamp the log-variance first"
    )
    fix_applicability = None
    triggers = r"(?i)log_?(var|std|sigma|scale)"
    summary = "`exp(logvar)` with no clamp: inf variance (float16 from 11.09, float32 from 88.7). Off by default."
    why = """\
A VAE encoder or a Gaussian policy outputs a log-variance `logvar` and turns it into a
variance or standard deviation with `exp(logvar)` / `exp(0.5 * logvar)`. Nothing bounds
`logvar`: early in training or on an outlier input it can be large, and `exp` overflows: in
float16 from 11.09 (65504 is the largest float16), for `exp(0.5 * logvar)` from 22.2; in
float32 and bfloat16 from 88.7. An inf variance turns the KL term `logvar.exp() - logvar - 1`
and the reparameterized sample `mu + eps * std` into inf and NaN.

Clamping the log-variance first bounds the damage: diffusers' `DiagonalGaussianDistribution`
clamps to [-30, 20], which is safe in float32 and bfloat16. In float16 a bound of 20 does not
help (`exp(20)` is inf there); a float16 model needs a bound at or below 11 (or computes the
`exp` in float32; under `torch.autocast`, `exp` already runs in float32 on CUDA).

Off by default: most log-variances are in float32 models where overflow needs
logvar > 88.7, a training divergence that has already happened. Enable it for half-precision
VAEs and policies. The rule recognizes a log-variance by its name (`logvar`, `log_var`,
`log_std`, `log_sigma`, `*_logvar`): a local name or parameter, or an attribute assigned in
the same function (`self.logvar = ...`); an attribute set elsewhere is often a learned
parameter (a flow's `self.log_scale`, a policy's `self.log_std`) and is not reported. A clamp
with an upper bound on the way (`logvar.clamp(-30, 20)`, `torch.clamp(log_std, LOG_STD_MIN,
LOG_STD_MAX)`) or a bounded squashing (`torch.tanh`, `sigmoid`) silences it, except a numeric
bound above 11.09 (22.2 for `exp(0.5 * logvar)`) in code that is evidently float16.

Corpus (transformers, diffusers, timm, kornia, monai, PyTorch-VAE, pytorch/examples, ...):
the findings are VAE reparameterizations and KL terms in float32 models (PyTorch-VAE's
`torch.exp(0.5 * log_var)`, pytorch/examples' `vae/main.py`, monai's `VarAutoEncoder`): real
in the sense that nothing bounds the exponent, but failing only once training has diverged.
That is why the rule is off by default.
"""
    example = """\
```python
import torch

def reparameterize(mu, logvar):
    std = torch.exp(0.5 * logvar)
    return mu + torch.randn_like(std) * std
```"""
    use_instead = """\
```python
import torch

def reparameterize(mu, logvar):
    std = torch.exp(0.5 * logvar.clamp(-30.0, 20.0))  # float32; <= 11 for float16 models
    return mu + torch.randn_like(std) * std
```"""
    measured = """\
torch 2.13 CPU.

| x | dtype | `exp(x)` | `exp(0.5 * x)` |
|---|---|---|---|
| 11.0 | float16 | 59872 | 244.75 |
| 11.1 | float16 | inf | 257.5 |
| 20.0 (diffusers' clamp) | float16 | inf | 22032 |
| 22.2 | float16 | inf | inf |
| 20.0 | bfloat16 | 4.84e8 | 22016 |
| 88.7 | float32 | 3.33e38 | 1.82e19 |
| 89.0 | float32, bfloat16 | inf | 2.12e19 |
"""
    fix_notes = """\
No automatic fix: the right bound depends on the model's dtype and on what the variance is
for (a clamp at 20 suits float32, not float16; `softplus` is a different parameterization).
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.exp.html",
        "https://pytorch.org/docs/stable/amp.html#cuda-ops-that-can-autocast-to-float32",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        op = ctx.op(node)
        if op is None or op.name != "exp" or len(op.args) != 1 or op.kwargs:
            return
        found = _logvar_exponent(ctx, op.args[0])
        if found is None:
            return
        logvar, factor = found
        found_bound = guards.clamp_upper_bound(ctx, logvar)
        limit = _FP16_EXP_LIMIT / factor
        if found_bound is not None:
            bound, half = found_bound
            if bound == float("inf") or bound <= limit:
                return
            # A bound that holds in float32 (diffusers' 20) but not in float16: reported
            # only where the value is evidently float16.
            if not half and ctx.precision.half_context(logvar) != "float16":
                return
        message = None
        if found_bound is not None:
            message = (
                f"`exp` of a log-variance clamped at {found_bound[0]:g} in float16: exp(x) is inf "
                f"in float16 from x = 11.09 (exp(0.5 x) from 22.2), so the clamp does not stop the "
                "overflow; clamp at or below 11 or compute the `exp` in float32"
            )
        canonical = ctx.canonical(node, inline=False)
        ctx.report(self, node, message=message, probe=ctx.expression_probe(canonical, None))
