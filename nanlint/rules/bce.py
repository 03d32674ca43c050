"""NAN301, NAN302: binary cross-entropy computed from probabilities instead of logits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from .. import analysis
from ..analysis import guards
from ..core.diagnostics import ProbeInput
from ..core.context import FileContext, abstract_calls, free_inputs, is_atom, node_code, parenthesize, same_code, strip_parens
from ..core.ops import number_value
from ..analysis.ranges import is_guarded, pass_through
from .base import SAFE, UNSAFE, Rule

_WITH_LOGITS = "torch.nn.functional.binary_cross_entropy_with_logits"
_BCE_FUNCTIONAL = {"torch.nn.functional.binary_cross_entropy"}
_BCE_MODULES = {"torch.nn.BCELoss", "torch.nn.modules.loss.BCELoss"}
# Where a leading minus needs no parentheses: the whole value of a statement or argument.
_LOOSE_PARENTS = (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Return, cst.Arg, cst.Expr)


# --------------------------------------------------------------------------- shared helpers


def _signed(ctx: FileContext, node: cst.BaseExpression) -> Tuple[int, cst.BaseExpression]:
    """(sign, inner) after removing negations: `-a`, `torch.neg(a)`, `a.neg()`, `-1 * a`,
    `a * -1`. Returns original child nodes (identity kept for positions)."""
    sign = 1
    for _ in range(8):
        op = ctx.op(node)
        if op is None:
            break
        if op.name == "neg" and len(op.args) == 1 and not op.kwargs:
            sign, node = -sign, op.args[0]
            continue
        if op.name == "mul" and len(op.args) == 2 and not op.kwargs:
            if number_value(strip_parens(op.args[0])) == -1.0:
                sign, node = -sign, op.args[1]
                continue
            if number_value(strip_parens(op.args[1])) == -1.0:
                sign, node = -sign, op.args[0]
                continue
        break
    return sign, node


def _flatten(ctx: FileContext, node, sign: int, out: List[Tuple[int, cst.BaseExpression]], depth: int = 8) -> None:
    """Signed terms of a chain of +, - and unary minus."""
    op = ctx.op(node)
    if depth > 0 and op is not None and not op.kwargs:
        if op.name == "add" and len(op.args) == 2:
            _flatten(ctx, op.args[0], sign, out, depth - 1)
            _flatten(ctx, op.args[1], sign, out, depth - 1)
            return
        if op.name == "sub" and len(op.args) == 2:
            _flatten(ctx, op.args[0], sign, out, depth - 1)
            _flatten(ctx, op.args[1], -sign, out, depth - 1)
            return
        if op.name == "neg" and len(op.args) == 1:
            _flatten(ctx, op.args[0], -sign, out, depth - 1)
            return
    out.append((sign, node))


def _one_minus(ctx: FileContext, node) -> Optional[Tuple[int, cst.BaseExpression]]:
    """(+1, X) for `1 - X`, (-1, X) for `X - 1`, else None."""
    op = ctx.op(node)
    if op is None or op.name != "sub" or len(op.args) != 2 or op.kwargs:
        return None
    if number_value(strip_parens(op.args[0])) == 1.0:
        return 1, op.args[1]
    if number_value(strip_parens(op.args[1])) == 1.0:
        return -1, op.args[0]
    return None


@dataclass
class HandBCE:
    """`y * log(p) + (1 - y) * log(1 - p)` (`sign` +1) or its negation (`sign` -1)."""

    core: cst.BaseExpression
    p: cst.BaseExpression
    y: cst.BaseExpression
    sign: int
    logs: Tuple[cst.BaseExpression, cst.BaseExpression]
    guarded_p: bool  # log(p) cannot see 0
    guarded_q: bool  # log(1 - p) cannot see 0
    absorbed: Optional[str] = None  # why a bound below 1 on p does not keep 1 - p off 0
    label_epsilon: bool = False  # `(1 - y + eps) * log(1 - p)`: the with-logits loss drops it
    weighted: bool = False  # `w * y * log(p)`: a factor besides the label the rewrite would drop


def _factors(ctx: FileContext, node, out: List[cst.BaseExpression], depth: int = 6) -> int:
    """Appends the factors of a product `a * b * c` to `out`, negations removed, and returns
    the sign they carried."""
    sign, node = _signed(ctx, node)
    op = ctx.op(node)
    if depth > 0 and op is not None and op.name == "mul" and len(op.args) == 2 and not op.kwargs:
        return sign * _factors(ctx, op.args[0], out, depth - 1) * _factors(ctx, op.args[1], out, depth - 1)
    out.append(node)
    return sign


def _term(ctx: FileContext, sign: int, node) -> List[Tuple[int, cst.BaseExpression, cst.BaseExpression, bool]]:
    """(sign, coefficient, log call, weighted) readings of a product `coef * log(..)`: one per
    factor beside the log that could be the label; `weighted` where other factors (a class
    weight, a mask) multiply the term too."""
    factors: List[cst.BaseExpression] = []
    sign *= _factors(ctx, node, factors)
    logs = []
    for factor in factors:
        op = ctx.op(factor)
        if op is not None and op.name in ("log", "log1p") and len(op.args) == 1 and not op.kwargs:
            logs.append(factor)
    if len(factors) < 2 or len(logs) != 1:
        return []
    others = [f for f in factors if f is not logs[0]]
    return [(sign, coef, logs[0], len(others) > 1) for coef in others]


def hand_bce(ctx: FileContext, node: cst.BaseExpression) -> Optional[HandBCE]:
    """The binary cross-entropy core at `node` (a sum of exactly two terms), or None."""
    if not isinstance(node, (cst.BinaryOperation, cst.Call, cst.UnaryOperation)):
        return None
    terms: List[Tuple[int, cst.BaseExpression]] = []
    _flatten(ctx, node, 1, terms)
    if len(terms) != 2:
        return None
    first, second = (_term(ctx, s, t) for s, t in terms)
    for y_readings, q_readings in ((first, second), (second, first)):
        for s1, y, log_p, weighted_p in y_readings:
            if number_value(strip_parens(y)) is not None:
                continue
            pop = ctx.op(log_p)
            if pop.name != "log":
                continue
            p, guard_p = guards.strip_epsilon(ctx, pop.args[0])
            for s2, coef, log_q, weighted_q in q_readings:
                # An epsilon on the label's factor (`(1 - y + eps) * log(1 - p)`) guards no log.
                coef, label_epsilon = guards.strip_epsilon(ctx, coef)
                minus = _one_minus(ctx, coef)
                if minus is None or not same_code(minus[1], y) or s1 != s2 * minus[0]:
                    continue
                qop = ctx.op(log_q)
                if qop.name == "log1p":
                    neg, p2 = _signed(ctx, qop.args[0])
                    if neg != -1:
                        continue
                    guard_q = False
                else:
                    q, guard_q = guards.strip_epsilon(ctx, qop.args[0])
                    one_minus = _one_minus(ctx, q)
                    if one_minus is None or one_minus[0] != 1:
                        continue
                    p2 = one_minus[1]
                if not same_code(p, p2):
                    continue
                # The flow's interval of p: `0.99 * sigmoid(z) + 0.005` lies in [0.005, 0.995];
                # an affine squeeze keeps any probability there (`0.9 * p + 0.05`).
                bounds = analysis.value(ctx, p)
                squeezed = guards.affine_squeezed(ctx, p)
                guard = analysis.upper_guard(ctx, p)
                # `p.clamp(1e-8, 1 - 1e-8)`: the bound is 1.0 in float32, p still reaches 1.
                absorbed = analysis.rounds_to_one(ctx, p, guard) if guard is not None and not guard_q else None
                return HandBCE(
                    core=node,
                    p=p,
                    y=y,
                    sign=s1,
                    logs=(log_p, log_q),
                    guarded_p=guard_p or bounds.lo > 0 or is_guarded(ctx, p) or squeezed,
                    guarded_q=guard_q or squeezed or (
                        (bounds.hi < 1 or guards.clamped_below_one(ctx, guard)) and absorbed is None),
                    absorbed=absorbed,
                    label_epsilon=label_epsilon,
                    weighted=weighted_p or weighted_q,
                )
    return None


def inside_hand_bce(ctx: FileContext, log_node: cst.BaseExpression) -> bool:
    """True where `log_node` is one of the two logs of a hand-written BCE among the nodes
    being visited (NAN301 reports the whole expression; the logs are not reported again)."""
    for ancestor in reversed(ctx.stack):
        if ancestor is log_node:
            continue
        match = hand_bce(ctx, ancestor)
        if match is not None and any(lg is log_node for lg in match.logs):
            return True
    return False


def _sigmoid_input(ctx: FileContext, p) -> Optional[Tuple[cst.BaseExpression, Optional[dict], bool]]:
    """(z, bindings z was written under, through a local) where p is `sigmoid(z)`."""
    bare = strip_parens(p)
    value, env = ctx.resolve(bare, None)
    through_local = value is not bare
    op = ctx.op(strip_parens(value))
    if op is not None and op.name == "sigmoid" and len(op.args) == 1 and not op.kwargs:
        return op.args[0], (env if through_local else None), through_local
    return None


def _reusable_here(ctx: FileContext, expr: cst.BaseExpression, env: Optional[dict]) -> bool:
    """`expr`, written under bindings `env`, means the same at the current node: it calls
    nothing (no second forward pass) and none of its names were rebound since."""
    current = ctx.scope.bindings
    ok = True

    class _Check(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> bool:
            nonlocal ok
            ok = False
            return False

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            node.value.visit(self)
            return False

        def visit_Name(self, node: cst.Name) -> bool:
            nonlocal ok
            if env is not None and current.get(node.value) is not env.get(node.value):
                ok = False
            return False

    expr.visit(_Check())
    return ok


def _arg_code(arg: cst.Arg) -> str:
    return node_code(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT))


# --------------------------------------------------------------------------- probes

class _ReplaceEvery(cst.CSTTransformer):
    """Every subexpression whose code is `code` replaced by `by`."""

    def __init__(self, code: str, by: cst.BaseExpression):
        super().__init__()
        self.code = code
        self.by = by

    def on_leave(self, original, updated):
        if isinstance(updated, cst.BaseExpression) and node_code(strip_parens(updated)) == self.code:
            return parenthesize(self.by)
        return updated


def clamped_probability(original: cst.BaseExpression, p: cst.BaseExpression) -> cst.BaseExpression:
    """`original` (canonical) with the probability `p` (canonical) kept inside
    [finfo.tiny, 1 - finfo.eps] of its dtype: the remedy NAN301 recommends where it has no
    fix, as a probe can run it."""
    text = node_code(parenthesize(strip_parens(p)))
    finfo = f"torch.finfo({text}.dtype)"
    clamped = cst.parse_expression(f"{text}.clamp(min={finfo}.tiny, max=1 - {finfo}.eps)")
    return original.visit(_ReplaceEvery(node_code(strip_parens(p)), clamped))


def _probe_domains(*exprs: cst.BaseExpression) -> Dict[str, Tuple[float, float]]:
    """Targets and probabilities lie in [0, 1] where they are plain names."""
    return {e.value: (0.0, 1.0) for e in exprs if isinstance(e, cst.Name)}


# --------------------------------------------------------------------------- NAN301


class HandWrittenBCE(Rule):
    code = "NAN301"
    kind = "form"
    default_enabled = True
    untuned_precision = (
        'On by default as one of the hazards the project exists for (seed 003: a model whose '
        '`forward` ends in a sigmoid, trained with this loss written out). The false alarm on the '
        'test halves clips the prediction into [1e-7, 1 - 1e-7] in a helper. A numeric affine '
        'squeeze (`0.9 * p + 0.05`) is read as a guard since the tune half showed it.'
    )
    fails_in = 'all (p rounds to 0 or 1)'
    name = "bce-by-hand"
    message = (
        "Binary cross-entropy written by hand: once p rounds to 0 or 1 (sigmoid(z) is 1.0 from "
        "z = 16.6 in float32, 8.3 in float16), a log is -inf and 0 * -inf makes the loss and its "
        "gradient NaN; use `F.binary_cross_entropy_with_logits` on the logits"
    )
    message_through = (
        "Binary cross-entropy written by hand on a sigmoid output p ({origin}): once p rounds to "
        "0 or 1 (sigmoid(z) is 1.0 from z = 16.6 in float32, 8.3 in float16), a log is -inf and "
        "0 * -inf makes the loss and its gradient NaN; where the sigmoid is computed, keep the "
        "logits z and use `F.binary_cross_entropy_with_logits(z, y)`"
    )
    message_softmax = (
        "Binary cross-entropy written by hand on a softmax output p ({origin}): once p rounds to "
        "0 or 1, a log is -inf and 0 * -inf makes the loss and its gradient NaN; compute it "
        "from the logits (`F.cross_entropy`, or `log_softmax` selected)"
    )
    # Exact in real arithmetic, but with-logits does not broadcast and wants a float
    # target: where the hand-written form relied on either, the fix raises. Review it.
    fix_applicability = UNSAFE
    fix_title = "Replace with `F.binary_cross_entropy_with_logits` on the logits"
    triggers = r"\blog(1p)?\s*\("
    summary = "`-(y*log(p) + (1-y)*log(1-p))` by hand: NaN loss once p rounds to 0 or 1."
    why = """\
The binary cross-entropy `-(y * log(p) + (1 - y) * log(1 - p))` is fine in real arithmetic,
but `p` is rounded. A sigmoid output is exactly 1.0 from z = 16.6 in float32, 8.3 in
float16 and 6.25 in bfloat16, and exactly 0 below z = -88.7 in float32 (where `exp(-z)`
overflows) and -17.3 in float16. Then `log(1 - p)` (or `log(p)`) is -inf, and the term that
should vanish, `(1 - y) * log(1 - p)` with y = 1, is `0 * -inf = NaN`. The loss is NaN, its
gradient is NaN, and the next optimizer step writes NaN into every weight. A well-trained
classifier reaches such logits on easy examples, so this happens late in training.

`F.binary_cross_entropy_with_logits(z, y)` takes the logits and computes
`max(z, 0) - z * y + log1p(exp(-|z|))`, which is finite for every finite z, with gradient
`sigmoid(z) - y`.
"""
    example = """\
```python
import torch

def loss_fn(logits, y):
    p = torch.sigmoid(logits)
    return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()
```"""
    use_instead = """\
```python
import torch
import torch.nn.functional as F

def loss_fn(logits, y):
    return F.binary_cross_entropy_with_logits(logits, y, reduction="mean")
```

When only the probability is available, keep it away from 0 and 1 before the logs:
`p = p.clamp(eps, 1 - eps)` with an `eps` that exists in your dtype (`1 - 1e-7` is 1.0 in
float16; `torch.finfo(p.dtype).eps` is not).
"""
    measured = """\
Loss and gradient d(loss)/dz for `p = torch.sigmoid(z)`, torch 2.13 CPU:

| z | y | dtype | by hand | `binary_cross_entropy_with_logits` |
|---|---|---|---|---|
| 16 | 1 | float32 | 1.19e-7, gradient -1.19e-7 | 1.13e-7, gradient -1.19e-7 |
| 17 | 1 | float32 | NaN, gradient NaN | 4.1e-8, gradient 0 |
| 20 | 0 | float32 | inf, gradient NaN | 20, gradient 1 |
| -89 | 0 | float32 | NaN, gradient NaN | 0, gradient 0 |
| -89 | 1 | float32 | inf, gradient NaN | 89, gradient -1 |
| 9 | 1 | float16 | NaN, gradient NaN | 1.2e-4, gradient 0 |
| 12 | 0 | float16 | inf, gradient NaN | 12, gradient 1 |
| -12 | 1 | float16 | 12, gradient -inf | 12, gradient -1 |
| -18 | 0 | float16 | NaN, gradient NaN | 0, gradient 0 |
| 7 | 1 | bfloat16 | NaN, gradient NaN | 9.1e-4, gradient 0 |
| -100 | 1 | bfloat16 | inf, gradient NaN | 100, gradient -1 |

Over 80001 logits evenly spaced in [-40, 40], against a float64 reference: by hand, 29% of
the points (y = 0 or y = 1) are inf or NaN in float32, 42% in bfloat16, 68% in float16, and
the finite ones are off by up to 0.69; `binary_cross_entropy_with_logits` is finite
everywhere, with a largest error of 4.8e-7 in float32, 0.0155 in bfloat16 and 0.002 in
float16 (about half a unit in the last place of the loss).
"""
    fix_notes = """\
Unsafe (applied with `--fix --unsafe-fixes`), offered where `p` is visibly `sigmoid(z)` (in
the expression, or a local variable assigned in the same function whose logits are not
recomputed and not rebound in between): the rewrite is exact in real arithmetic, but see the
shape and dtype caveat below. A `.mean()` or `.sum()` over all elements around the expression
becomes `reduction="mean"` / `"sum"`; reductions over a dimension stay as they are
(`F.binary_cross_entropy_with_logits(z, y, reduction="none").sum(1)`). The un-negated
log-likelihood `y*log(p) + (1-y)*log(1-p)` becomes `-F.binary_cross_entropy_with_logits(...)`.

Unlike the hand-written form, `binary_cross_entropy_with_logits` does not broadcast and
wants a floating-point target: `z` and `y` must have the same shape, and an integer target
must be cast (`y.float()`); it raises otherwise, it never returns a different value. That
is why the fix is marked unsafe: review that `z` and `y` agree in shape and dtype.

Without a visible sigmoid there is no fix: clamp `p` into `[eps, 1 - eps]`, or better, keep
the logits and use the with-logits loss. Where the value-flow analysis finds that p is a sigmoid
computed elsewhere (a model whose `forward` ends in `torch.sigmoid`, an `nn.Sigmoid` attribute, a
selection of one), the message says where: the logits are there. When both logs are guarded (`p.clamp(eps, 1 - eps)`,
`log(p + eps)` and `log(1 - p + eps)`, or an affine map the analysis bounds inside (0, 1) such
as `0.98 * torch.sigmoid(z) + 0.01`) nothing is reported; a log of `p` found inside this
pattern is left to this rule (NAN201 does not report it again).
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.functional.binary_cross_entropy_with_logits.html",
        "https://pytorch.org/docs/stable/generated/torch.nn.BCEWithLogitsLoss.html",
    )

    expression_kinds = ("BinaryOperation", "UnaryOperation", "Call")

    def __init__(self) -> None:
        self._covered: Set[int] = set()

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        if id(node) in self._covered:
            return
        # Peel negations and reductions around the core, outermost first.
        sign = 1
        chain: List[cst.BaseExpression] = []
        reductions: List[Tuple[cst.BaseExpression, str]] = []  # outer -> inner
        current: cst.BaseExpression = node
        for _ in range(8):
            op = ctx.op(current)
            if op is None:
                break
            s, inner = _signed(ctx, current)
            if s == -1:
                chain.append(current)
                sign, current = -sign, inner
                continue
            if op.name in ("mean", "sum") and op.args:
                chain.append(current)
                reductions.append((current, op.name))
                current = op.args[0]
                continue
            break
        match = hand_bce(ctx, current)
        if match is None:
            return
        for n in chain + [current]:
            self._covered.add(id(n))
        if match.guarded_p and match.guarded_q:
            return
        self._report(node, ctx, match, sign * match.sign, reductions)

    def _report(self, node, ctx: FileContext, match: HandBCE, sign: int, reductions) -> None:
        sigmoid = _sigmoid_input(ctx, match.p)
        original = ctx.canonical(node)
        domains = _probe_domains(match.y, match.p)
        if match.absorbed is not None:
            ctx.report(
                self,
                node,
                message=(
                    f"Binary cross-entropy written by hand: p is kept below 1, but {match.absorbed}, "
                    "so a saturated p is exactly 1, log(1 - p) is -inf and the loss and its "
                    "gradient are inf/NaN; keep p below 1 with a bound the dtype can hold "
                    "(`1 - torch.finfo(p.dtype).eps`), or compute the loss from logits with "
                    "`F.binary_cross_entropy_with_logits`"
                ),
                probe=self._clamp_probe(ctx, node, match, domains),
            )
            return
        if match.label_epsilon and not match.guarded_q:
            ctx.report(
                self,
                node,
                message=(
                    "Binary cross-entropy written by hand: the epsilon is added to the label's "
                    "factor `(1 - y)`, not inside `log(1 - p)`, so where p is exactly 1 that log "
                    "is -inf and the loss and its gradient are inf/NaN; move the epsilon inside "
                    "the log (clamp p into [eps, 1 - eps]), or compute the loss from logits with "
                    "`F.binary_cross_entropy_with_logits`"
                ),
                probe=self._clamp_probe(ctx, node, match, domains),
            )
            return
        origin = analysis.stable_form(ctx, match.p) if sigmoid is None else None
        if origin is not None and origin.form in ("sigmoid", "softmax"):
            # The probability is computed elsewhere (`forward`, a module attribute, a selection
            # of one): the stable loss needs its logits, so the change belongs there.
            message = self.message_through if origin.form == "sigmoid" else self.message_softmax
            ctx.report(
                self,
                node,
                message=message.format(origin=origin.cite),
                probe=self._clamp_probe(ctx, node, match, domains),
            )
            return
        if sigmoid is None:
            ctx.report(
                self,
                node,
                message=(
                    "Binary cross-entropy written by hand: where p is exactly 0 or 1, a log is "
                    "-inf and 0 * -inf makes the loss and its gradient NaN; clamp p into "
                    "[eps, 1 - eps], or compute the loss from logits with "
                    "`F.binary_cross_entropy_with_logits`"
                ),
                probe=self._clamp_probe(ctx, node, match, domains),
            )
            return
        z, zenv, through_local = sigmoid
        # Fold the innermost reduction when it covers every element; keep the others.
        reduction = "none"
        suffixes: List[Tuple[str, str]] = []  # (method, argument text), inner -> outer
        canonical_suffixes: List[Tuple[str, str]] = []
        for i, (red_node, name) in enumerate(reversed(reductions)):
            op = ctx.op(red_node)
            rest = op.args[1:]
            if i == 0 and not rest and not op.kwargs:
                reduction = name
                continue
            args = _reduction_args(red_node, op.style)
            suffixes.append((name, ", ".join(_arg_code(a) for a in args)))
            canonical_suffixes.append(
                (name, ", ".join(_arg_code(a.with_changes(value=ctx.canonical(a.value))) for a in args))
            )
        fixable = not (match.guarded_p or match.guarded_q or match.label_epsilon or match.weighted) and (
            not through_local or _reusable_here(ctx, z, zenv)
        )
        if not fixable:
            ctx.report(self, node, probe=self._clamp_probe(ctx, node, match, domains))
            return
        bce, imports = ctx.spell(_WITH_LOGITS)
        text = _render(bce, node_code(strip_parens(z)), node_code(strip_parens(match.y)), reduction, suffixes, sign)
        if sign > 0 and not node.lpar and not self._loose(ctx, node):
            text = "(" + text + ")"
        z_canonical = ctx.canonical(z, zenv) if zenv is not None else ctx.canonical(z)
        fixed = cst.parse_expression(
            _render(
                _WITH_LOGITS,
                node_code(strip_parens(z_canonical)),
                node_code(strip_parens(ctx.canonical(match.y))),
                reduction,
                canonical_suffixes,
                sign,
            )
        )
        original, fixed = abstract_calls(original, fixed, ctx=ctx)
        ctx.report(
            self,
            node,
            edits=(ctx.replace(node, text),) + imports,
            probe=ctx.expression_probe(original, fixed, domains),
        )

    @staticmethod
    def _clamp_probe(ctx: FileContext, node, match: HandBCE, domains):
        """Where no fix is offered, the probe's fixed side is the remedy the message gives:
        p clamped into [tiny, 1 - eps] of its dtype."""
        original = ctx.canonical(node)
        p = ctx.canonical(match.p)
        fixed = clamped_probability(original, p)
        original, fixed, p, y = abstract_calls(original, fixed, p, ctx.canonical(match.y), ctx=ctx)
        domains = dict(domains)
        domains.update(_probe_domains(strip_parens(p), strip_parens(y)))
        return ctx.expression_probe(original, fixed, domains)

    @staticmethod
    def _loose(ctx: FileContext, node) -> bool:
        parent = ctx.stack[-2] if len(ctx.stack) > 1 and ctx.stack[-1] is node else None
        return isinstance(parent, _LOOSE_PARENTS)


def _reduction_args(red_node: cst.Call, style: str) -> List[cst.Arg]:
    args = list(red_node.args)
    if style == "function":
        # torch.mean(x, 1): the first positional (or input=) is the tensor.
        for i, a in enumerate(args):
            if a.keyword is None or a.keyword.value == "input":
                return args[:i] + args[i + 1:]
    return args


def _render(bce: str, z: str, y: str, reduction: str, suffixes, sign: int) -> str:
    text = f'{bce}({z}, {y}, reduction="{reduction}")'
    for name, args in suffixes:
        text += f".{name}({args})"
    return ("-" + text) if sign > 0 else text


# --------------------------------------------------------------------------- NAN302


class _Assignments:
    """Every value assigned to a module-level name or to `self.<attr>` / a class attribute,
    so that `crit = nn.BCELoss()` and `self.net = nn.Sequential(..., nn.Sigmoid())` are known
    where they are used. Walks statements only (assignments are statements)."""

    def __init__(self) -> None:
        self.values: Dict[Tuple[str, str], List[Optional[cst.BaseExpression]]] = {}

    def collect(self, node: cst.CSTNode, cls: str = "", in_function: bool = False) -> None:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                if isinstance(small, cst.Assign):
                    for t in small.targets:
                        if isinstance(t.target, (cst.Tuple, cst.List)):
                            for el in t.target.elements:
                                self._record(el.value, None, cls, in_function)
                        else:
                            self._record(t.target, small.value, cls, in_function)
                elif isinstance(small, cst.AnnAssign):
                    self._record(small.target, small.value, cls, in_function)
                elif isinstance(small, cst.AugAssign):
                    self._record(small.target, None, cls, in_function)
            return
        if isinstance(node, cst.BaseExpression):
            return
        if isinstance(node, cst.ClassDef):
            cls, in_function = node.name.value, False
        elif isinstance(node, cst.FunctionDef):
            in_function = True
        for child in node.children:
            self.collect(child, cls, in_function)

    def _record(self, target, value, cls: str, in_function: bool) -> None:
        if isinstance(target, cst.Name) and not in_function:
            key = (cls, target.value)
        elif (
            isinstance(target, cst.Attribute)
            and isinstance(target.value, cst.Name)
            and target.value.value == "self"
            and cls
        ):
            key = (cls, target.attr.value)
        else:
            return
        self.values.setdefault(key, []).append(value)


def _is_bce_module(ctx: FileContext, value) -> bool:
    return isinstance(value, cst.Call) and ctx.qualname(value.func) in _BCE_MODULES


class BCEOnSigmoid(Rule):
    code = "NAN302"
    kind = "form"
    default_enabled = False
    untuned_precision = (
        'The correct findings are GAN discriminators ending in `nn.Sigmoid`, VAE decoders and '
        'detectors trained with `BCELoss`. The false alarms: a BCE that only builds an assignment '
        'cost under `no_grad`, and sigmoids of a difference of two sigmoid outputs, whose logits '
        'stay within (-1, 1).'
    )
    fails_in = 'all (gradient saturates); float16 NaN'
    name = "bce-on-sigmoid"
    message = (
        "`binary_cross_entropy` on a sigmoid output: log(p) is clamped at -100, so confidently "
        "wrong logits get a vanishing gradient (float32) or a NaN one (float16), and it raises "
        "inside CUDA autocast; use `binary_cross_entropy_with_logits` on the logits"
    )
    fix_applicability = SAFE
    fix_title = "Use the with-logits loss on the logits"
    triggers = r"binary_cross_entropy|BCELoss"
    summary = "`binary_cross_entropy(sigmoid(z), y)` / `nn.Sigmoid` + `nn.BCELoss`: vanishing or NaN gradients; use the with-logits loss."
    why = """\
`F.binary_cross_entropy(torch.sigmoid(z), y)` (and `nn.BCELoss` after a model that ends in
`nn.Sigmoid()`) feeds the loss a probability that has already been rounded. PyTorch clamps
`log(p)` at -100 so the loss stays finite, but that hides the problem rather than fixing it:

- once sigmoid(z) underflows or rounds to 1, the loss is stuck at 100 and the gradient is 0
  (the backward divides by `max(p * (1 - p), 1e-12)`); already at z = -30 with y = 1 the
  float32 gradient is -0.094 instead of -1, at z = -50 it is -1.9e-10: the example the model
  gets most wrong stops contributing to training;
- in float16 the sigmoid saturates early and the backward pass gives NaN gradients from
  |z| = 9 (-inf at z = -12);
- inside `torch.autocast("cuda")` `binary_cross_entropy` raises an error on purpose
  (PyTorch's autocast documentation: it is unsafe to autocast).

`binary_cross_entropy_with_logits(z, y)` (`nn.BCEWithLogitsLoss`) works from the logits with
the log-sum-exp trick: finite loss, gradient `sigmoid(z) - y`, safe under autocast (run in
float32). It also takes `pos_weight`, which `binary_cross_entropy` does not have.

The sigmoid may be made out of sight: in a helper or a method that returns it, or at the
end of a model class's `forward` (a GAN discriminator whose `nn.Sequential` closes with
`nn.Sigmoid()`, trained with a module-level `nn.BCELoss()`); the message then cites where.
Such findings carry no fix (the sigmoid is not on the reported line).

Inside `torch.no_grad()` / `torch.inference_mode()` (validation losses), or where the
probabilities carry no gradient (`.detach()`), it is not reported: the hazards are the
gradient's.
"""
    example = """\
```python
import torch
import torch.nn.functional as F

def loss_fn(logits, y):
    return F.binary_cross_entropy(torch.sigmoid(logits), y, reduction="sum")
```"""
    use_instead = """\
```python
import torch
import torch.nn.functional as F

def loss_fn(logits, y):
    return F.binary_cross_entropy_with_logits(logits, y, reduction="sum")
```

With modules: drop the final `nn.Sigmoid()` from the model, use `nn.BCEWithLogitsLoss()`, and
apply `torch.sigmoid` only where probabilities are needed (metrics, inference).
"""
    measured = """\
Loss and gradient d(loss)/dz, torch 2.13 CPU:

| z | y | dtype | `binary_cross_entropy(sigmoid(z), y)` | `binary_cross_entropy_with_logits(z, y)` |
|---|---|---|---|---|
| -30 | 1 | float32 | 30, gradient -0.094 | 30, gradient -1 |
| -50 | 1 | float32 | 50, gradient -1.9e-10 | 50, gradient -1 |
| -89 | 1 | float32 | 100 (clamped), gradient 0 | 89, gradient -1 |
| 17 | 0 | float32 | 100 (clamped), gradient 0 | 17, gradient 1 |
| 9 | 0 | float16 | 100, gradient NaN | 9, gradient 1 |
| -12 | 1 | float16 | 12, gradient -inf | 12, gradient -1 |
| -18 | 1 | float16 | 100, gradient NaN | 18, gradient -1 |
| -50 | 1 | bfloat16 | 50, gradient -1.9e-10 | 50, gradient -1 |
| 7 | 0 | bfloat16 | 100, gradient 0 | 7, gradient 1 |

Under CUDA autocast `binary_cross_entropy` raises (PyTorch documentation; not measured here:
no GPU was available).
"""
    fix_notes = """\
Safe where the sigmoid is visible at the call: `F.binary_cross_entropy(torch.sigmoid(z), y,
...)` becomes `F.binary_cross_entropy_with_logits(z, y, ...)` and
`nn.BCELoss(...)(torch.sigmoid(z), y)` becomes `nn.BCEWithLogitsLoss(...)(z, y)`, keeping every
other argument (`weight`, `reduction`: the two functions take the same arguments in the same
order, and accept the same targets: a float tensor of the input's shape). Reshaping and
indexing after the sigmoid move onto the logits
(`torch.sigmoid(z).squeeze(1)` -> `z.squeeze(1)`). A sigmoid assigned to a local variable
is followed when its logits can be reused at the call (no call inside them, nothing rebound).

No fix where a criterion object is built elsewhere (`self.crit = nn.BCELoss()` then
`self.crit(torch.sigmoid(z), y)`), or where the probability is made out of sight (a model
whose `forward` or last layer is a sigmoid, a helper that returns one; the message cites where):
the model, the criterion and every other use of them must change together.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.BCELoss.html",
        "https://pytorch.org/docs/stable/amp.html#ops-that-can-autocast-to-float32",
        "https://pytorch.org/docs/stable/generated/torch.nn.BCEWithLogitsLoss.html",
    )

    def __init__(self) -> None:
        self._assigned: Optional[Dict[Tuple[str, str], List[Optional[cst.BaseExpression]]]] = None

    def visit_Module(self, node: cst.Module, ctx: FileContext) -> None:
        if "BCELoss" in ctx.source or "Sigmoid" in ctx.source:
            collector = _Assignments()
            collector.collect(node)
            self._assigned = collector.values
        else:
            self._assigned = {}

    # ----------------------------------------------------------------- what a name holds
    def _class_name(self, ctx: FileContext) -> str:
        for n in reversed(ctx.stack):
            if isinstance(n, cst.ClassDef):
                return n.name.value
        return ""

    def _held(self, ctx: FileContext, expr: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        """The value a name or `self.attr` evidently holds (one kind of value everywhere)."""
        expr = strip_parens(expr)
        if isinstance(expr, cst.Name):
            if expr.value in ctx.scope.bindings:
                value, _ = ctx.resolve(expr, None)
                return None if value is expr else strip_parens(value)
            values = (self._assigned or {}).get(("", expr.value))
        elif (
            isinstance(expr, cst.Attribute)
            and isinstance(expr.value, cst.Name)
            and expr.value.value == "self"
        ):
            values = (self._assigned or {}).get((self._class_name(ctx), expr.attr.value))
        else:
            return None
        if not values or any(v is None for v in values):
            return None
        kinds = {_is_bce_module(ctx, v) for v in values}
        return values[0] if len(kinds) == 1 else None

    # ----------------------------------------------------------------- matching
    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        kind = None
        ctor: Optional[cst.Call] = None
        if ctx.qualname(node.func) in _BCE_FUNCTIONAL:
            kind = "functional"
        elif isinstance(node.func, cst.Call) and _is_bce_module(ctx, node.func):
            kind, ctor = "module", node.func
        elif isinstance(node.func, (cst.Name, cst.Attribute)) and ctx.qualname(node.func) is None:
            held = self._held(ctx, node.func)
            if held is not None and _is_bce_module(ctx, held):
                kind, ctor = "criterion", held
        if kind is None or any(a.star for a in node.args):
            return
        if analysis.no_gradient(ctx, node):
            return  # the hazards are the gradient's: saturation, NaN in float16
        input_index = next((i for i, a in enumerate(node.args) if a.keyword is None), None)
        if input_index is None:
            input_index = next(
                (i for i, a in enumerate(node.args) if a.keyword is not None and a.keyword.value == "input"),
                None,
            )
        if input_index is None:
            return
        x = node.args[input_index].value
        leaf = self._sigmoid_leaf(ctx, x)
        made_elsewhere = None
        if leaf is None:
            # A sigmoid made out of sight: a model whose forward or last layer is one, a helper.
            flow = analysis.value(ctx, x)
            if flow.prob != "sigmoid" or flow.nograd is not None or flow.excludes_zero:
                return  # not a sigmoid, no gradient, or clamped off 0 and 1 on purpose
            made_elsewhere = analysis.cite(ctx, flow)
        raises = "it raises inside CUDA autocast"
        region = ctx.precision.in_autocast if ctx.precision is not None else None
        if region is not None and region.device == "cuda":
            raises = "it raises here, inside CUDA autocast"
        other_args = [a for i, a in enumerate(node.args) if i != input_index]
        probe = self._probe(ctx, x, leaf, other_args, ctor)
        if made_elsewhere is not None:
            loss = "nn.BCELoss" if kind != "functional" else "binary_cross_entropy"
            what = f"a sigmoid output ({made_elsewhere})"
            # Where the sigmoid is a model's last layer, dropping it gives the logits.
            remedy = "drop the final Sigmoid" if "forward" in made_elsewhere or "module" in made_elsewhere \
                else "pass the logits instead (without the sigmoid)"
            ctx.report(
                self,
                node,
                message=(
                    f"`{loss}` on {what}: log(p) "
                    "is clamped at -100, so confidently wrong outputs get a vanishing gradient "
                    f"(float32) or a NaN one (float16), and {raises}; {remedy} and "
                    "use `nn.BCEWithLogitsLoss` (`F.binary_cross_entropy_with_logits`)"
                ),
                probe=probe,
            )
            return
        leaf_node, z, zenv, through_local = leaf
        if kind == "criterion":
            ctx.report(
                self,
                node,
                message=(
                    f"`{node_code(node.func)}` is an `nn.BCELoss` applied to a sigmoid output: "
                    "log(p) is clamped at -100, so confidently wrong logits get a vanishing "
                    f"gradient (float32) or a NaN one (float16), and {raises}; construct it as "
                    "`nn.BCEWithLogitsLoss` and pass the logits"
                ),
                probe=probe,
            )
            return
        edits = ()
        if not through_local or _reusable_here(ctx, z, zenv):
            func = node.func if kind == "functional" else ctor.func
            new_name = "binary_cross_entropy_with_logits" if kind == "functional" else "BCEWithLogitsLoss"
            if isinstance(func, cst.Attribute):
                # `F.binary_cross_entropy`, `torch.nn.BCELoss`: keep the spelling, rename.
                func_edit, imports = ctx.replace(func.attr, new_name), ()
            else:
                full = _WITH_LOGITS if kind == "functional" else "torch.nn.BCEWithLogitsLoss"
                name, imports = ctx.spell(full)
                func_edit = ctx.replace(func, name)
            z_text = node_code(strip_parens(z))
            if leaf_node is not x and not leaf_node.lpar and not is_atom(strip_parens(z)):
                z_text = "(" + z_text + ")"
            edits = (func_edit, ctx.replace(leaf_node, z_text)) + imports
        message = None
        if region is not None and region.device == "cuda":
            message = self.message.replace("it raises inside CUDA autocast", raises)
        ctx.report(self, node, message=message, edits=edits, probe=probe)

    def _sigmoid_leaf(self, ctx: FileContext, x):
        """(the node to replace, z, its bindings, through a local) where `x` is `sigmoid(z)`,
        possibly indexed, reshaped or cast afterwards (`torch.sigmoid(z).squeeze(1)`)."""
        current = x
        for _ in range(8):
            op = ctx.op(current)
            if op is not None and op.name == "sigmoid" and len(op.args) == 1 and not op.kwargs:
                return current, op.args[0], None, False
            if isinstance(strip_parens(current), cst.Name):
                found = _sigmoid_input(ctx, current)
                if found is not None:
                    return current, found[0], found[1], True
                return None
            inner = pass_through(ctx, current)
            if inner is None:
                return None
            m = strip_parens(current)
            if isinstance(m, cst.Call) and isinstance(m.func, cst.Attribute) and m.func.attr.value == "detach":
                return None
            current = inner
        return None

    def _probe(self, ctx: FileContext, x, leaf, other_args: List[cst.Arg], ctor: Optional[cst.Call]):
        """Both losses in functional form with full torch names. For a model ending in
        Sigmoid, `logits` stands for the model's output before the Sigmoid."""
        # Targets and weights stay free inputs (a local name is not inlined): what they were
        # built from (`torch.ones(imgs.size(0), 1)`) says nothing about the hazard, and its
        # shape need not match the probe's.
        rest = [_arg_code(a.with_changes(value=ctx.canonical(a.value, inline=False))) for a in other_args]
        if ctor is not None:
            rest += [_arg_code(a.with_changes(value=ctx.canonical(a.value))) for a in ctor.args]
        target = next((a.value for a in other_args if a.keyword is None or a.keyword.value == "target"), None)
        if leaf is None:
            prob, logits = "torch.sigmoid(logits)", "logits"
        else:
            canonical_x = ctx.canonical(x)
            prob = node_code(strip_parens(canonical_x))
            stripped = _strip_sigmoid(ctx, canonical_x)
            logits = node_code(strip_parens(stripped)) if stripped is not None else None
        original = cst.parse_expression(
            f"torch.nn.functional.binary_cross_entropy({', '.join([prob] + rest)})"
        )
        fixed = None
        if logits is not None:
            fixed = cst.parse_expression(f"{_WITH_LOGITS}({', '.join([logits] + rest)})")
        original, fixed = abstract_calls(original, fixed, ctx=ctx)
        # The target is data (labels in [0, 1], GANs' all-ones `valid`): swept as 0/1 values and
        # not differentiated, so a witness is about the probabilities, never the labels.
        labels = free_inputs(ctx.canonical(target, inline=False)) if target is not None else []
        domains = {name: ProbeInput(name, domain=(0.0, 1.0), kind="mask") for name in labels}
        return ctx.expression_probe(original, fixed, domains)


def _strip_sigmoid(ctx: FileContext, x: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """`x` (canonical) with its sigmoid removed: `torch.sigmoid(z).squeeze(1)` -> `z.squeeze(1)`."""
    op = ctx.op(x)
    if op is not None and op.name == "sigmoid" and len(op.args) == 1:
        return op.args[0]
    inner = pass_through(ctx, x)
    if inner is None:
        return None
    logits = _strip_sigmoid(ctx, inner)
    if logits is None:
        return None
    return x.deep_replace(inner, parenthesize(strip_parens(logits)))
