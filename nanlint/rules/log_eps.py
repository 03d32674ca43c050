"""NAN201: the log of a value that can be exactly 0 by construction."""

from __future__ import annotations

from typing import Optional, Tuple

import libcst as cst

from .. import analysis
from ..analysis import repairs
from ..core.context import FileContext, free_inputs, is_atom, node_code, parenthesize, strip_parens
from ..core.diagnostics import ProbeInput, Step
from ..core.ops import number_value
from ..analysis.ranges import can_be_zero, dtype_witness, is_guarded, positive_constant
from .base import UNSAFE, Rule
from .bce import abstract_calls, inside_hand_bce

_LOGS = {"log": "torch.log", "log2": "torch.log2", "log10": "torch.log10"}
# How a reason from ranges.can_be_zero reads inside the message's parentheses.
_PHRASES = {"clamp(min=0)": "a `clamp(min=0)` output"}


def clamped_at_tiny(function: str, arg: cst.BaseExpression) -> Tuple[cst.BaseExpression, cst.BaseExpression]:
    """`function(arg)` and `function(arg.clamp(min=torch.finfo(arg.dtype).tiny))`: a probe's
    original and the counterfactual defined where the argument is 0 or below."""
    text = node_code(parenthesize(strip_parens(arg)))
    return (cst.parse_expression(f"{function}({text})"),
            cst.parse_expression(f"{function}({text}.clamp(min=torch.finfo({text}.dtype).tiny))"))


def log_domain_case(ctx: FileContext, arg: cst.BaseExpression) -> bool:
    """`log(softmax(x))`, `log(sigmoid(x))`, `log(1 - sigmoid(x))`, directly, through local
    variables, selected or computed elsewhere (`analysis.stable_form`): the log-domain rules
    (NAN102, NAN103) report these as the unstable spellings of `log_softmax` / `logsigmoid`,
    which is better than a clamp; NAN201 leaves them alone."""
    if analysis.stable_form(ctx, arg) is not None:
        return True
    value, env = ctx.resolve(strip_parens(arg), None)
    op = ctx.op(strip_parens(value))
    if op is None:
        return analysis.softmax_module_call(ctx, arg) is not None  # `self.softmax(h)`: NAN102
    if op.name == "softmax" or (op.name == "sigmoid" and len(op.args) == 1):
        return True
    if op.name == "sub" and len(op.args) == 2 and not op.kwargs:
        if number_value(strip_parens(op.args[0])) == 1.0:
            inner, _ = ctx.resolve(strip_parens(op.args[1]), env)
            inner_op = ctx.op(strip_parens(inner))
            return inner_op is not None and inner_op.name == "sigmoid" and len(inner_op.args) == 1
    return False


class LogWithoutEpsilon(Rule):
    code = "NAN201"
    kind = "value"
    default_enabled = True
    manifest = (
        "it names why the value is 0 by construction and where: a ratio of counts (`bincount(y) / len(y)`: a class missing from the batch), a ReLU or `clamp(min=0)` output, `1 - p` of a probability, a softmax a caller passes. Every finding of this rule does (it reports only such values)."
    )
    untuned_precision = (
        "On by default as one of the hazards the project exists for (seed 002: the log of a "
        "probability without an epsilon); every finding of it names why the value is 0 (manifest). "
        "Since issue 37 the log of a softmax or sigmoid is NAN102's and NAN103's form, so what is "
        "left here is a ratio of counts, a ReLU, `1 - p`, and a softmax a caller the file cannot see "
        "may pass. The false alarms: a branch that never runs (`if flag:` with the flag set to False "
        "or never passed), a pseudo-count that keeps `1 - p` off 0, and float32 probabilities the "
        "loss pushes up."
    )
    fails_in = 'all (argument = 0)'
    name = "log-without-epsilon"
    message = (
        "`log` of a value that can be exactly 0 (a ReLU output, `1 - p`, a ratio of counts): "
        "log(0) = -inf and its gradient is inf, NaN once multiplied by 0; clamp the argument at "
        "`torch.finfo(dtype).tiny`"
    )
    fix_applicability = UNSAFE
    fix_title = "Clamp the argument at `torch.finfo(dtype).tiny`"
    triggers = r"\blog(2|10)?\s*\("
    summary = "`log(p)` where p can be exactly 0 (ReLU output, `1 - p`, counts ratio): -inf and NaN gradients."
    why = """\
`torch.log(0)` is `-inf` and its derivative `1/0` is `inf`. Some values are 0 by
construction, visible in the code: a ReLU or `clamp(min=0)` output (every negative input),
`1 - p` for a probability p (a sigmoid is exactly 1.0 from z = 16.6 in float32; a softmax puts
all its mass on one class), a ratio of counts (`hist / hist.sum()`, `correct.float() / n`: an
empty bin), and a softmax or sigmoid output that has underflowed. The -inf then spreads: a
mean containing it is -inf, `0 * -inf` is NaN, and in the backward pass the inf gradient
becomes NaN at the first multiplication by 0. (A ReLU's own backward zeroes the gradient of
its masked inputs, so there the damage is the -inf forward value and the -inf gradient of
everything multiplied by the log.)

Clamping the argument at the smallest normal number of its dtype, `torch.finfo(p.dtype).tiny`
(1.2e-38 in float32 and bfloat16, 6.1e-5 in float16), keeps `log` finite (-87.3, -87.5 and
-9.70) and its gradient bounded, and changes nothing where p is a normal positive number. An
epsilon written as a literal is weaker than it looks in half precision: `1e-8` is 0 in float16
(every literal at or below 2.98e-8 is), and even `x + 1e-6` has gradient 1/1e-6, which
overflows float16 to inf.

A softmax or sigmoid output is not this rule's: its log is the unstable spelling of
`log_softmax` / `logsigmoid`, which NAN102 and NAN103 report wherever the probability comes
from (the expression, a local, a selection such as `probs.gather(1, a)`, a method, `forward`,
a module attribute, another file), with a better fix than a clamp. A hand-written binary
cross-entropy is NAN301's, which reports the whole expression once. What stays here is the log
of a value that is 0 by construction for other reasons, and the log of a softmax that a caller
the file cannot see may pass (a public function of a package: the file's own call passes a
softmax, others may pass anything); the message cites where the 0 comes from ("a softmax at
line 11, passed as `p` at line 12"), and every output format carries it as located steps (the
evidence: `--output-format full` prints them, JSON and SARIF list them). Guards in other
statements count: `x.clamp_(min=eps)`, `y[y == 0] = eps`, `q.masked_fill_(q <= 0, eps)`, a
branch or assert that bounds the value, `0.98 * torch.sigmoid(z) + 0.01`.

An epsilon with the wrong sign is reported too: `log(1 - p - eps)` (or `log(x - eps)` of a
value that reaches 0) moves the argument below 0 wherever `1 - p` is below eps, as it is
once p rounds to 1, and log of a negative number is NaN. The unsafe fix adds the epsilon
instead (`log(1 - p + eps)`), which is what the guard meant.

Not reported: values with no visible origin (a function parameter that the file's calls say
nothing about, an attribute, a model output whose `forward` the file does not show: the rule
does not guess), guarded values (`clamp(min=eps)`, `+ eps`, `exp`,
`softplus`, positive constants), the mask idiom `torch.log(torch.tril(torch.ones(n, n)))`,
whose -inf entries are the point.
"""
    example = """\
```python
import torch
import torch.nn.functional as F

def log_features(h):
    return torch.log(F.relu(h))

def entropy(labels, n_classes):
    counts = torch.bincount(labels, minlength=n_classes).float()
    p = counts / counts.sum()
    return -(p * torch.log(p)).sum()
```"""
    use_instead = """\
```python
import torch
import torch.nn.functional as F

def log_features(h):
    return torch.log(F.relu(h).clamp(min=torch.finfo(h.dtype).tiny))

def entropy(labels, n_classes):
    counts = torch.bincount(labels, minlength=n_classes).float()
    p = counts / counts.sum()
    return torch.special.entr(p).sum()  # 0 * log(0) taken as 0
```"""
    measured = """\
Forward value and gradient of `torch.log(p)`, torch 2.13 CPU. "fixed" is
`torch.log(p.clamp(min=torch.finfo(p.dtype).tiny))`.

| p | at | dtype | `torch.log(p)` | gradient | fixed |
|---|---|---|---|---|---|
| `F.relu(x)` | x = -1, 0 | float32 | -inf | inf w.r.t. p; -inf for a weight multiplying the log | -87.3, gradients finite |
| `F.relu(x)` | x = -1, 0 | float16 | -inf | inf w.r.t. p; -inf for a weight | -9.70, finite |
| `F.relu(x)` | x = -1, 0 | bfloat16 | -inf | inf w.r.t. p; -inf for a weight | -87.5, finite |
| `F.relu(x)`, then `* 0` | x = 0 | all three | NaN | | 0 |
| `1 - torch.softmax(x, -1)` | x = [0, 30] | float32, bfloat16 | [0, -inf] | [inf, NaN] | [0, -87.3], finite |
| `1 - torch.softmax(x, -1)` | x = [0, 30] | float16 | [0, -inf] | [NaN, NaN] | [0, -9.70], finite |
| `c / c.sum()` | c = [0, 3] | all three | [-inf, 0] | [NaN, NaN] | [-87.3, 0] (float32), gradient [-0.333, 0] |
| `torch.softmax(x, -1)[..., 0]` | x = [0, 120] | all three | -inf | [NaN, NaN] | (`log_softmax`: -120, gradient [1, -1]) |
| `x + 1e-8`, `x + 2.98e-8` | x = 0 | float16 | -inf | inf | |
| `x + 1e-6` | x = 0 | float16 | -13.8 | inf | |
| `x + 1.6e-5` | x = 0 | float16 | -11.0 | 62592 | |
"""
    fix_notes = """\
Unsafe: the clamp changes the value where p is below `finfo.tiny` (0 and subnormals), which
is the point, but it is a change. The fix clamps in place and reads the dtype from a short
expression with the same dtype (`torch.log(F.relu(h))` ->
`torch.log(F.relu(h).clamp(min=torch.finfo(h.dtype).tiny))`, `torch.log(1 - p)` ->
`torch.log((1 - p).clamp(min=torch.finfo(p.dtype).tiny))`). Where no such expression exists
(a division, a cast), the finding comes without a fix rather than repeating the computation
inside `.dtype`. `torch.finfo` needs a floating dtype: clamp after the cast, not before, for
integer tensors.

The clamp stops the -inf and the inf/NaN gradient; it does not recover a value that rounding
already lost. Where `1 - p` rounded to 0 although its true value is not tiny, the result is
`log(tiny)`: for bfloat16 logits [7.375, 0, 0, 0], `softmax` gives exactly 1.0 for the first
class, so `log(1 - p)` is -inf, and clamped -87.5, where the true value is -6.28. When
those values matter, compute the probability in float32 or stay in log space.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.log.html",
        "https://pytorch.org/docs/stable/type_info.html#torch.finfo",
        "https://pytorch.org/docs/stable/special.html#torch.special.entr",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        op = ctx.op(node)
        if op is None or op.name not in _LOGS or len(op.args) != 1 or op.kwargs:
            return
        arg = op.args[0]
        if self._epsilon_subtracted(node, op, arg, ctx):
            return
        if op.name == "log" and log_domain_case(ctx, arg):
            return
        if is_guarded(ctx, arg) or analysis.excludes_zero(ctx, arg):
            return
        reason = can_be_zero(ctx, arg)
        through = None
        if reason is None:
            # Beyond the expression: a softmax returned by a method, a model's forward...
            found = analysis.zero_reason(ctx, arg)
            if found is None:
                return
            reason, through = found
        if inside_hand_bce(ctx, node) or repairs.repaired_after(ctx, repairs.NEG_INF):
            return
        spelled = op.name if op.style == "method" else node_code(node.func)
        origin = _PHRASES.get(reason, reason)
        if through:
            origin = f"{origin}: {through}"
        message = (
            f"`{spelled}` of a value that can be exactly 0 ({origin}): {op.name}(0) = -inf and its "
            "gradient is inf, NaN once multiplied by 0; clamp the argument at "
            "`torch.finfo(dtype).tiny`"
        )
        if reason in ("a softmax output", "a sigmoid output") and through:
            message += ", or better, return logits and use `log_softmax` / `logsigmoid`"
        elif reason in ("a softmax output", "a sigmoid output"):
            message += ", or better, stay in log space (`log_softmax`, `logsigmoid`)"
        # The value's producers, as located steps; at least the reason itself, where it is
        # written (a ReLU, a ratio of counts): a 0 by construction is evidence enough.
        steps = analysis.evidence_steps(ctx, analysis.value(ctx, arg)) or (
            Step(ctx.span(arg)[0].row, origin),)
        ctx.report(
            self,
            node,
            message=message,
            edits=self._edits(node, op, arg, ctx),
            probe=self._probe(node, op, arg, ctx, reason, through),
            evidence=steps,
        )

    def _epsilon_subtracted(self, node: cst.Call, op, arg: cst.BaseExpression, ctx: FileContext) -> bool:
        """`log(1 - p - eps)`: the epsilon meant to keep the argument off 0 is subtracted, so
        it pushes the argument below 0 (NaN) wherever `1 - p` is below eps."""
        bare = strip_parens(arg)
        sub = ctx.op(bare)
        if sub is None or sub.name != "sub" or sub.style != "operator" or len(sub.args) != 2:
            return False
        left, eps = sub.args
        small = positive_constant(ctx, eps)  # `1e-7`, `EPS`, `torch.finfo(x.dtype).eps`
        if small is None or (small.value is not None and small.value > 1e-3):
            return False
        eps_value = analysis.value(ctx, eps)
        inner = ctx.op(strip_parens(left))
        complement = inner is not None and inner.name == "sub" and len(inner.args) == 2 \
            and number_value(strip_parens(inner.args[0])) == 1.0
        left_value = analysis.value(ctx, left)
        if not complement and not (left_value.zero is not None and left_value.lo >= 0):
            return False
        if left_value.lo > 0 and left_value.lo > (small.value or eps_value.hi):
            return False
        spelled = op.name if op.style == "method" else node_code(node.func)
        message = (
            f"`{spelled}({node_code(bare)})` subtracts the epsilon: where `{node_code(strip_parens(left))}` "
            f"is below the epsilon (it can reach 0), the argument is negative and {op.name} is "
            "NaN; add the epsilon instead"
        )
        flipped = f"{node_code(left)} + {node_code(eps)}"
        fixed_arg = cst.parse_expression(f"({node_code(ctx.canonical(left))}) + ({node_code(ctx.canonical(eps))})")
        original = ctx.canonical(node)
        fixed = cst.parse_expression(f"{_LOGS[op.name]}({node_code(fixed_arg)})")
        # (a span leaves out the node's own parentheses: they stay in the file)
        # The epsilon is small and positive (the verifier must not try eps = -0.5).
        domains = {name: ProbeInput("", domain=(1e-8, 1e-3), kind="real", evidence="an epsilon")
                   for name in free_inputs(ctx.canonical(eps))}
        ctx.report(self, node, message=message, edits=(ctx.replace(arg, flipped),),
                   probe=ctx.expression_probe(original, fixed, domains))
        return True

    def _edits(self, node: cst.Call, op, arg: cst.BaseExpression, ctx: FileContext):
        witness = dtype_witness(ctx, arg)
        if witness is None:
            return ()
        finfo, imports = ctx.spell("torch.finfo")
        tiny = f"{finfo}({node_code(strip_parens(witness))}.dtype).tiny"
        clamp = ctx.op(strip_parens(arg))
        if clamp is not None and clamp.name in ("clamp", "clamp_min") and clamp.args:
            # `x.clamp(min=0)` already clamps: raise its minimum instead of clamping twice.
            low = clamp.arg(1, "min")
            if low is not None and number_value(strip_parens(low)) == 0:
                return (ctx.replace(low, tiny),) + imports
        argument = node_code(arg) if is_atom(arg) else "(" + node_code(arg) + ")"
        clamped = f"{argument}.clamp(min={tiny})"
        if op.style == "method":
            replacement = f"{clamped}.{node.func.attr.value}()"
        else:
            replacement = f"{node_code(node.func)}({clamped})"
        return (ctx.replace(node, replacement),) + imports

    def _probe(self, node: cst.Call, op, arg: cst.BaseExpression, ctx: FileContext, reason: str,
               through: Optional[str] = None):
        # Counts come from integer ops (bincount, comparisons) a probe cannot sweep over
        # floats: a ratio of counts is probed over its local names, with count domains.
        counts = reason == "a ratio of counts"
        if through:
            # The probability came through a call the verifier cannot run: probe the log of
            # one input with the domain the analysis proved (a simplex or a probability).
            known = analysis.probe_input(ctx, arg)
            original, fixed = clamped_at_tiny(_LOGS[op.name], cst.Name("p"))
            return ctx.expression_probe(original, fixed, {"p": known} if known is not None else {})
        original, fixed = abstract_calls(*clamped_at_tiny(_LOGS[op.name], ctx.canonical(arg, inline=not counts)), ctx=ctx)
        domains = analysis.count_ratio_inputs(ctx, arg) if counts else analysis.input_domains(ctx, arg)
        return ctx.expression_probe(original, fixed, domains)
