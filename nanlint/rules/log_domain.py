"""NAN102-NAN108: log-domain functions written by hand with `exp` and `log`.

`log(softmax)`, `log(sigmoid)`, `log(1 + exp)`, `log(1 + x)`, `exp(x) - 1`,
`log(exp(x).sum())` and `exp(x) / exp(x).sum()` each have a fused torch function that is
exact in real arithmetic and avoids the overflow, underflow or cancellation of the
spelled-out form. Every fix here is safe: it only changes rounding.

A hazard that reaches the `log` (or the division) through a local variable in the same
function is reported without a fix: the intermediate value may be used elsewhere.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Tuple

import libcst as cst

from .. import analysis
from ..analysis.dtypes import computed_in_float16
from ..analysis.transfer import EXP_OVERFLOW, EXP_UNDERFLOW, stated
from ..analysis.uses import region_discarded
from ..core.context import FileContext, abstract_calls, free_inputs, node_code, parenthesize, strip_parens
from ..core.diagnostics import Edit
from ..core.ops import Op, number_value
from .base import SAFE, Rule
from ..analysis.rewrite import atom_source as _atom_src, follow_local as _follow, operand_key as _key, replace_edit as _edit, source_of as _src
from ..analysis.rewrite import source_replacing as _replacing
from .bce import inside_hand_bce
from .hand_sigmoid import negate

# ---------------------------------------------------------------------- shared matching

Env = Optional[Dict]


class Found(NamedTuple):
    """An op reached from an expression, the bindings its names resolve in, and whether a
    local variable was followed to reach it."""

    op: Op
    env: Env
    via_local: bool


def _find(
    ctx: FileContext,
    node: Optional[cst.BaseExpression],
    names: Tuple[str, ...],
    env: Env = None,
    via_local: bool = False,
) -> Optional[Found]:
    """The op among `names` that `node` performs, directly or through local names."""
    if node is None:
        return None
    value, env, via_local = _follow(ctx, node, env, via_local)
    op = ctx.op(value)
    if op is None or op.name not in names:
        return None
    return Found(op, env, via_local)


def _unary(op: Op) -> bool:
    return len(op.args) == 1 and not op.kwargs


def _log_operand(ctx: FileContext, node: cst.CSTNode, name: str = "log") -> Optional[Op]:
    """The op of `node` when it is `log(A)` (or `log1p(A)`), with nothing else passed."""
    op = ctx.op(node)
    if op is None or op.name != name or not _unary(op):
        return None
    return op


def _plus_one_operand(op: Op) -> Optional[cst.BaseExpression]:
    """X where `op` is `1 + X` / `X + 1` / `X.add(1)` (no `alpha=`)."""
    if op.name != "add" or len(op.args) != 2 or op.kwargs:
        return None
    for one, other in ((op.args[0], op.args[1]), (op.args[1], op.args[0])):
        if number_value(one) == 1.0:
            return other
    return None


def _constant(ctx: FileContext, node: cst.BaseExpression, env: Env) -> bool:
    """True for an expression that reads no variable (`torch.tensor(3.0)`): its value is
    fixed where it is written, so it cannot drift into the failing range. A tensor that
    training moves (`requires_grad=True`, an `nn.Parameter`, given to an optimizer) is not
    fixed, whatever its initializer. A call of user code (`model(torch.randn(4, 8))`) reads
    the model's weights: not fixed either."""
    (canonical,) = abstract_calls(ctx.canonical(strip_parens(node), env))
    if free_inputs(canonical):
        return False
    return not analysis.value(ctx, node).trainable


def _with_bound(ctx: FileContext, message: Optional[str], default: str,
                exponent: cst.BaseExpression) -> Optional[str]:
    """The message, with the bound the analysis knows on `exp`'s exponent said as information
    (a form rule reports the spelling whatever the bound; the code did not enforce it)."""
    bound = analysis.exp_bound_note(ctx, exponent)
    if bound is None:
        return message
    return f"{message or default}; {bound.clause()}"


# |x| at least this far from 0 leaves `log(1 + x)` and `exp(x) - 1` accurate to 1e-5 or
# better in float32: the cancellation NAN105/NAN106 report needs x near 0.
_FAR_FROM_ZERO = 0.01


def _off_zero(ctx: FileContext, x: cst.BaseExpression) -> bool:
    """The code keeps x off the edge of `log(1 + x)` / `exp(x) - 1` (values near 0): x is an
    integer (a count: 0 gives exactly 0, and 1 is already far), or a guard it applies bounds
    |x| away from 0 (`x.clamp(min=1)`)."""
    v = analysis.value(ctx, x)
    if v.integer or v.count or v.mask:
        return True
    # A branch or a `torch.where` that tests x (`where(s < 0.5, expm1(s), s.exp() - 1)`)
    # counts: it keeps the small values apart.
    enforced = analysis.enforced_value_where_kept(ctx, x)
    return enforced.lo >= _FAR_FROM_ZERO or enforced.hi <= -_FAR_FROM_ZERO


def _generic_pair(original: str, fixed: str) -> Tuple[cst.BaseExpression, cst.BaseExpression]:
    """A probe's two sides for a hazard whose operands the verifier cannot rebuild (computed in
    another method or file): the unstable spelling and its stable form on one free input."""
    return cst.parse_expression(original), cst.parse_expression(fixed)


def _code(node: cst.BaseExpression) -> str:
    """The code of a node built here (a canonical expression), without enclosing parens."""
    return node_code(strip_parens(node))


def _renamed_attribute(ctx: FileContext, func: cst.Attribute, new_name: str) -> str:
    """`th.log` -> `th.log1p`, `(a + b).exp` -> `(a + b).expm1`, as written up to the name."""
    start, _ = ctx.span(func)
    attr_start, _ = ctx.span(func.attr)
    return ctx.source[ctx.offset(start): ctx.offset(attr_start)] + new_name


def _renamed_call(ctx: FileContext, op: Op, new_name: str) -> Tuple[str, Tuple[Edit, ...]]:
    """The call of `op` with its function renamed (`F.softmax` -> `F.log_softmax`,
    `x.exp()` -> `x.expm1()`), arguments kept as written."""
    call = strip_parens(op.node)
    assert isinstance(call, cst.Call)
    func = call.func
    imports: Tuple[Edit, ...] = ()
    if isinstance(func, cst.Attribute):
        spelled = _renamed_attribute(ctx, func, new_name)
    else:
        qualname = ctx.qualname(func) or f"torch.{new_name}"
        spelled, imports = ctx.spell(qualname.rsplit(".", 1)[0] + "." + new_name)
    _, func_end = ctx.span(func)
    _, call_end = ctx.span(op.node)  # (the span of a node never includes its own parentheses)
    return spelled + ctx.source[ctx.offset(func_end): ctx.offset(call_end)], imports


def _renamed_canonical(call: cst.BaseExpression, new_name: str) -> cst.BaseExpression:
    """A canonical call (`torch.nn.functional.softmax(x, -1)`, `x.exp()`) renamed."""
    call = strip_parens(call)
    assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
    return call.with_changes(func=call.func.with_changes(attr=cst.Name(new_name)))


def _arg_code(ctx: FileContext, arg: cst.Arg) -> str:
    value = _src(ctx, arg.value)
    return f"{arg.keyword.value}={value}" if arg.keyword is not None else value


def _other_args(op: Op) -> List[cst.Arg]:
    """The call's arguments except its input (the receiver of a method is not an Arg)."""
    call = strip_parens(op.node)
    assert isinstance(call, cst.Call)
    if op.style == "method":
        return list(call.args)
    out: List[cst.Arg] = []
    dropped = False
    for arg in call.args:
        if not dropped and arg.value is op.args[0]:
            dropped = True
            continue
        out.append(arg)
    return out


def _canonical_args(ctx: FileContext, args: List[cst.Arg], env: Env) -> List[str]:
    out = []
    for arg in args:
        value = _code(ctx.canonical(strip_parens(arg.value), env))
        out.append(f"{arg.keyword.value}={value}" if arg.keyword is not None else value)
    return out


def _reduction_dims(op: Op) -> Optional[Tuple[Optional[cst.BaseExpression], Optional[cst.BaseExpression]]]:
    """(dim, keepdim) of a `sum` with only those arguments; None for anything else
    (`dtype=`, `out=`)."""
    if set(op.kwargs) - {"dim", "axis", "keepdim"} or len(op.args) > 3:
        return None
    dim = op.args[1] if len(op.args) > 1 else op.kwargs.get("dim", op.kwargs.get("axis"))
    keepdim = op.args[2] if len(op.args) > 2 else op.kwargs.get("keepdim")
    return dim, keepdim


def _is_name(node: Optional[cst.BaseExpression], value: str) -> bool:
    return isinstance(node, cst.Name) and node.value == value


def _single_dim(ctx: FileContext, node: Optional[cst.BaseExpression], env: Env) -> bool:
    """A dim that names one dimension (not `None`, not a tuple or list of dims, not a local
    name holding one)."""
    if node is None or _is_name(node, "None"):
        return False
    value, _, _ = _follow(ctx, node, env, False)
    return not isinstance(strip_parens(value), (cst.Tuple, cst.List))


# ---------------------------------------------------------------------- NAN102


# Where `log(softmax(x))` fails, both edges from the one table the analysis uses: the gradient
# fails first (the verifier's witnesses are gradient failures at log-probabilities just past it).
_SOFTMAX_EDGES = (
    f"once a log-probability falls below -{stated(EXP_OVERFLOW['float16'])} in "
    f"float16 (-{stated(EXP_OVERFLOW['float32'])} in float32 and bfloat16), a logit about that far "
    "below the row's largest, the log's gradient 1/softmax overflows and the row's gradient "
    f"turns NaN; from -{stated(EXP_UNDERFLOW['float16'])} (-{stated(EXP_UNDERFLOW['float32'])} in "
    f"float32, -{stated(EXP_UNDERFLOW['bfloat16'])} in bfloat16) softmax is exactly 0 and the log "
    "-inf"
)


class LogOfSoftmax(Rule):
    code = "NAN102"
    kind = "form"
    default_enabled = True
    untuned_precision = (
        "Since issue 37/38 it also reports a softmax selected, reshaped or computed elsewhere "
        "(REINFORCE's `log(pi.gather(1, a))`, a model's `forward`), which NAN201 had filed as a "
        "value finding. The false alarms on the test halves: a distribution clamped in place "
        "through `.data.clamp_(0.01, 0.99)` just before the log (the analysis does not read an "
        "in-place clamp through `.data`), a log overwritten by a guarded one before anything reads "
        "it (a dead store), an entropy whose 0 * log 0 is replaced by `torch.where(p > 0, ...)` under "
        "no gradient, and a sampler's token probabilities renormalized in place after top-k. These "
        "were found on the test half and are left as they are (no change is tuned on it)."
    )
    fails_in = (f'all; float16 first (gradient from a logit gap of ~{stated(EXP_OVERFLOW["float16"])}, '
                f'value from ~{stated(EXP_UNDERFLOW["float16"])})')
    # A softmax here, or the log of one computed elsewhere (a module, another file).
    triggers = r"softmax|Softmax|\blog\b"
    name = "log-of-softmax"
    message = f"`log(softmax(x))`: {_SOFTMAX_EDGES}; use `log_softmax`"
    message_selected = (
        "`log` of a softmax output selected or reshaped (`log(softmax(x)[i])` is "
        f"`log_softmax(x)[i]`): {_SOFTMAX_EDGES}; select from `log_softmax`"
    )
    message_through = (
        "`log` of a softmax output ({origin}): " + _SOFTMAX_EDGES + "; where the softmax is "
        "computed, keep the logits (or `log_softmax`) and select from `log_softmax`"
    )
    fix_applicability = SAFE
    fix_title = "Replace with `log_softmax`"
    summary = "`log(softmax(x))`: NaN gradients once 1/softmax overflows, -inf once softmax underflows to 0."
    why = f"""\
`softmax(x)` divides `exp(x - max)` by its sum. A logit that trails the largest one in its row
by a gap `g` gets a probability of about `exp(-g)` (a little less where several logits share
the lead: its log-probability is `-g - log(k)` for `k` of them).

The gradient fails first. The derivative of `log(p)` is `1/p`, and once `p` is below
1/max of the dtype, a log-probability below -{EXP_OVERFLOW["float16"]} in float16 and
-{EXP_OVERFLOW["float32"]} in float32 and bfloat16, `1/p` is `inf`; the softmax backward multiplies
it by `p` and subtracts the row's sum, `inf - inf` is NaN, and every logit of the row gets a
NaN or infinite gradient, not only the one that is small. Further out, `p` rounds to exactly 0
(below half the dtype's smallest subnormal: `g` above {EXP_UNDERFLOW["float32"]} in float32,
{EXP_UNDERFLOW["bfloat16"]} in bfloat16 and only {EXP_UNDERFLOW["float16"]} in float16) and the value
itself is `log(0) = -inf`. Confident classifiers and attention scores produce such gaps as a
matter of course, and in float16 a gap of 11.1 is enough.

`log_softmax(x)` computes `x - max - log(sum(exp(x - max)))` directly: the result is the
finite number `-g`, and its derivatives (`[i == j] - softmax(x)[i]`) are bounded by 1. It is
the same function in real arithmetic, with the same arguments (`dim`, `dtype=`).

A selection, reshape or cast between the softmax and the log keeps the form:
`log(softmax(x)[i])`, `log(probs.gather(1, a))`, `log(p.squeeze(1))` are `log_softmax`
selected, fixed in place where the softmax is written in the expression
(`torch.log(F.softmax(x, -1)[idx])` -> `F.log_softmax(x, -1)[idx]`). The value-flow analysis
follows the softmax further: a local, a method of the class (`p = self.probs(obs)`), a model
whose `forward` ends in one (`pi = policy(obs)`, `torch.log(pi.gather(1, a))`), an
`nn.Softmax` held in an attribute or closing an `nn.Sequential`, a member of a tuple or a
list, a helper function, a parameter that every call of the file passes a softmax, and a module
of the project imported from another file. There the message cites where the softmax was
computed ("softmax at line 12, `Policy.forward` via `policy(...)` at line 34") and no fix is
offered: the change (keep the logits, take `log_softmax`) belongs where the softmax is. A
softmax that callers the file cannot see may pass is NAN201's value finding, not this form.

Not reported: a selection that cannot hold a 0, where a careful reviewer would not ask for the
stable form: the probability of an index drawn from the same tensor
(`probs[rows, torch.multinomial(probs, 1)[:, 0]]`: multinomial never draws a 0) or from
the logits it is the softmax of, tempered or with entries masked out
(`Categorical(logits=logits / t).sample()` in a generation loop), and the probability of its
argmax (the largest of n probabilities is at least 1/n); nor the
probability of an action the file samples from the same policy (`a = Categorical(model.pi(s)).sample()`, then `torch.log(pi.gather(1, a))` in the
update, the index named like an action): a Categorical never draws an action of probability
0, and an on-policy update recomputes the probability it was drawn with. The log of the
whole distribution (an entropy) is still reported, and so is the sampled action's where the
file keeps a replay buffer (off-policy: an older policy drew it, the current one may give it
0). On minimalRL's on-policy scripts (A2C, A3C, actor-critic, PPO, PPO-LSTM, V-trace) a blind
review judged 7 of 9 such findings false alarms and the 2 on ACER's replayed actions real;
the logits form was a false alarm in state-spaces/s4's generation script, the argmax form
in ParlAI's greedy search (both tuning repositories).

A softmax of a tensor written with no variable is a constant and is not reported, unless
training moves it: `torch.rand(..., requires_grad=True)`, an `nn.Parameter`, or a tensor
given to an optimizer (`torch.optim.SGD([w])`) can take any value after a few steps,
whatever its initializer.
"""
    example = """\
```python
import torch
import torch.nn.functional as F

def nll(logits, target):
    log_probs = torch.log(F.softmax(logits, dim=-1))
    return F.nll_loss(log_probs, target)
```"""
    use_instead = """\
```python
import torch
import torch.nn.functional as F

def nll(logits, target):
    log_probs = F.log_softmax(logits, dim=-1)
    return F.nll_loss(log_probs, target)
```

Where the probabilities are needed too, compute `log_softmax` once and take `.exp()` of it.
"""
    measured = """\
torch 2.13 on the CPU; `x` is one row of two logits; gradient of the output's sum.

| logits | dtype | `log(softmax(x, -1))` | `log_softmax(x, -1)` |
|---|---|---|---|
| [0, -11] | float16 | [0, -11], gradient [-1, 0.9995] | [0, -11], gradient [-1, 1] |
| [0, -11.09] | float16 | [0, -11.09], gradient [-inf, NaN] | [0, -11.09], gradient [-1, 1] |
| [0, -17.34] | float16 | [0, -inf], gradient [NaN, NaN] | [0, -17.34], gradient [-1, 1] |
| [0, -88.73] | float32 | [0, -88.73], gradient [-inf, NaN] | [0, -88.73], gradient [-1, 1] |
| [0, -103.98] | float32 | [0, -inf], gradient [NaN, NaN] | [0, -103.98], gradient [-1, 1] |
| [0, -89] | bfloat16 | [0, -89], gradient [-inf, NaN] | [0, -89], gradient [-1, 1] |
| [0, -93] | bfloat16 | [0, -inf], gradient [NaN, NaN] | [0, -93], gradient [-1, 1] |

Below the first gap of each dtype both agree. With four float16 logits `[-5.25, 5.25, -5.25,
5.25]` (a gap of 10.5, two logits sharing the lead) the log-probabilities are -11.2 and the
gradient is `[NaN, -inf, NaN, -inf]`: past -11.09, as above. With ten logits, one of them 110 and the others 0 (float32),
nine outputs are `-inf` and all ten gradient entries NaN.
"""
    fix_notes = """\
Safe: `log_softmax` is `log(softmax)` in real arithmetic; only rounding changes. The fix keeps
the softmax call's spelling and arguments (`F.softmax(x, dim=1)` -> `F.log_softmax(x, dim=1)`,
`x.softmax(-1).log()` -> `x.log_softmax(-1)`, `dtype=` kept). Not fixed, only reported: a
softmax stored in a local variable and taken the log of later (the probabilities may be used
elsewhere). Not reported: `log(softmax(x) + eps)` and `log(softmax(x).clamp(min=eps))`, which
are guarded (and not exactly `log_softmax`)."""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.functional.log_softmax.html",
        "https://pytorch.org/docs/stable/generated/torch.nn.LogSoftmax.html",
        "Blanchard, Higham, Higham: Accurately computing the log-sum-exp and softmax functions, "
        "IMA Journal of Numerical Analysis 41(4), 2021",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        log = _log_operand(ctx, node)
        if log is None:
            return
        argument = log.args[0]
        found = _find(ctx, argument, ("softmax",))
        selected = False
        if found is None:
            # `log(F.softmax(x, -1)[idx])`, `log(probs.gather(1, a).squeeze(1))`: a selection
            # commutes with the log, so this is `log_softmax(...)` selected.
            core = analysis.selected_core(ctx, argument)
            if core is not argument:
                found, selected = _find(ctx, core, ("softmax",)), True
        if found is None:
            if not self._softmax_module(node, log, ctx):
                self._through_flow(node, argument, ctx)
            return
        if not found.op.args:
            return
        softmax = found.op
        if _constant(ctx, softmax.args[0], found.env):
            return
        if selected and analysis.excludes_zero(ctx, argument):
            # A selection that cannot hold a 0: the probability of a token sampled from it,
            # of its argmax, entries a filter kept (`p[p > 0]`).
            return
        if found.via_local and inside_hand_bce(ctx, node):
            return  # NAN301 reports the whole BCE; there is no fix to offer here either
        edits: Tuple[Edit, ...] = ()
        if not found.via_local:
            text, imports = _renamed_call(ctx, softmax, "log_softmax")
            if selected:
                text = _replacing(ctx, argument, softmax.node, text)
            edits = (_edit(ctx, node, text),) + imports
        # A trainable tensor stays a free input of the probe: its initializer says nothing.
        trained = [
            name for name in free_inputs(ctx.canonical(softmax.args[0], found.env, inline=False))
            if "." not in name and analysis.value(ctx, cst.Name(name)).trainable
        ]
        canonical_softmax = ctx.canonical(softmax.node, found.env, keep=trained)
        fixed = _renamed_canonical(canonical_softmax, "log_softmax")
        # The probe runs the log of the softmax itself: the selection changes nothing it tests.
        original = cst.parse_expression(f"torch.log({_code(canonical_softmax)})") if selected \
            else ctx.canonical(node, keep=trained)
        ctx.report(
            self, node, edits=edits,
            message=self.message_selected if selected else None,
            probe=ctx.expression_probe(original, fixed),
        )

    def _through_flow(self, node: cst.Call, argument: cst.BaseExpression, ctx: FileContext) -> None:
        """The log of a softmax computed elsewhere: a method's or `forward`'s return, an
        `nn.Softmax` attribute, a tuple element, a list, another file; selected or reshaped on
        the way. The message says where; the fix belongs there, so none is offered."""
        origin = analysis.stable_form(ctx, argument)
        if origin is None or origin.form != "softmax" or inside_hand_bce(ctx, node):
            return
        dim = origin.dim or "-1"
        ctx.report(
            self, node,
            message=self.message_through.format(origin=origin.cite),
            probe=ctx.expression_probe(*_generic_pair(f"torch.log(torch.softmax(logits, dim={dim}))",
                                                      f"torch.log_softmax(logits, dim={dim})")),
        )


    def _softmax_module(self, node: cst.Call, log: Op, ctx: FileContext) -> bool:
        """`torch.log(self.softmax(h))` with `self.softmax = nn.Softmax(dim=1)`: the same
        hazard through a module; the fix is `torch.log_softmax(h, dim=1)`. False where `log`'s
        argument is no such call."""
        found = analysis.softmax_module_call(ctx, log.args[0])
        if found is None:
            return False
        inner, dim = found
        if _constant(ctx, inner, None):
            return True
        spelled, imports = ctx.spell("torch.log_softmax")
        edits = (_edit(ctx, node, f"{spelled}({_src(ctx, inner)}, dim={dim})"),) + imports
        h = node_code(parenthesize(strip_parens(ctx.canonical(inner))))
        original = cst.parse_expression(f"torch.log(torch.softmax({h}, dim={dim}))")
        fixed = cst.parse_expression(f"torch.log_softmax({h}, dim={dim})")
        ctx.report(self, node, edits=edits, probe=ctx.expression_probe(*abstract_calls(original, fixed, ctx=ctx)))
        return True


# ---------------------------------------------------------------------- NAN103


class LogOfSigmoid(Rule):
    code = "NAN103"
    kind = "form"
    default_enabled = True
    untuned_precision = (
        'Every judged finding was correct: Glow and RealNVP coupling scales, BPR and GAN losses, '
        'word2vec-style negative sampling and focal losses, in float32 and float16. Judged by '
        'reach it had been 1 of 13, since float32 logits below -88.7 are rare; the spelling is '
        'unstable all the same and `logsigmoid` is free.'
    )
    fails_in = 'all: `log(1 - sigmoid(x))` from x > 16.6 (float32), `log(sigmoid(x))` from x < -88.7 (-17.3 in float16)'
    # A sigmoid here, or the log of one computed elsewhere (a module, another file).
    triggers = r"sigmoid|Sigmoid|expit|\blog(1p)?\b"
    name = "log-of-sigmoid"
    message = (
        "`log(sigmoid(x))`: sigmoid rounds to 0 for x below -88.7 in float32 and bfloat16 "
        "(-17.3 in float16, where the gradient is already inf from -11.1), so the log is -inf "
        "and the gradient NaN; `F.logsigmoid(x)` is the same function, finite for every x"
    )
    message_float16 = (
        "`log(sigmoid(x))` in float16 ({reason}): sigmoid rounds to 0 for x below -17.3 (the "
        "gradient is already inf from -11.1), so the log is -inf and the gradient NaN; use "
        "`F.logsigmoid(x)`"
    )
    message_complement = (
        "`log(1 - sigmoid(x))`: `1 - sigmoid(x)` rounds to 0 for x above 16.6 in float32 "
        "(8.3 in float16, 6.25 in bfloat16), so the log is -inf and the gradient NaN; "
        "use `F.logsigmoid(-x)`"
    )
    message_selected = (
        "`log` of a sigmoid output selected or reshaped (`log(sigmoid(x)[i])` is "
        "`logsigmoid(x)[i]`, `log(1 - sigmoid(x)[i])` is `logsigmoid(-x)[i]`): sigmoid rounds to "
        "0 below -88.7 and to 1 above 16.6 in float32 (-17.3 and 8.3 in float16), so the log is "
        "-inf and the gradient NaN; select from `F.logsigmoid`"
    )
    message_through = (
        "`log` of a sigmoid output ({origin}): sigmoid rounds to 0 for x below -88.7 in float32 "
        "and bfloat16 (-17.3 in float16), so the log is -inf and the gradient NaN; where the "
        "sigmoid is computed, keep the logits x and use `F.logsigmoid(x)`"
    )
    message_through_complement = (
        "`log(1 - p)` of a sigmoid output p ({origin}): `1 - sigmoid(x)` rounds to 0 for x above "
        "16.6 in float32 (8.3 in float16, 6.25 in bfloat16), so the log is -inf and the gradient "
        "NaN; where the sigmoid is computed, keep the logits x and use `F.logsigmoid(-x)`"
    )
    fix_applicability = SAFE
    fix_title = "Replace with `F.logsigmoid`"
    summary = "`log(sigmoid(x))`, `log(1 - sigmoid(x))`: -inf and NaN gradients once sigmoid rounds to 0 or 1; use `logsigmoid`."
    why = """\
`sigmoid(x)` rounds to exactly 0 for x below -88.7 in float32 and bfloat16 and below -17.3 in
float16, and `1 - sigmoid(x)` rounds to exactly 0 much earlier: as soon as `sigmoid(x)` rounds
to 1, for x above 16.6 in float32, 8.3 in float16 and 6.25 in bfloat16. The log of that 0 is
`-inf` and the gradient NaN. In float16 the gradient of `log(sigmoid(x))` is already `inf`
from x = -11.1, where `1/sigmoid(x)` exceeds 65504. These are the two terms of a binary
cross-entropy or of a GAN / contrastive loss written by hand; logits beyond 6 or 17 are
ordinary for a confident model.

`F.logsigmoid(x)` computes `-softplus(-x)` without forming the probability: it returns the
finite value (about `x` for very negative x) with a gradient of `1 - sigmoid(x)`. Since
`1 - sigmoid(x) = sigmoid(-x)`, `log(1 - sigmoid(x))` is `F.logsigmoid(-x)`.

Both are reported in every dtype: `F.logsigmoid` is the same function at no cost, so the
spelled-out form is worth replacing whatever range today's logits have (a Glow coupling's
`log(sigmoid(h + 2))` in float32 needs h below -90 to fail, and the rewrite is still free).
Where the sigmoid runs in float16 (a float16 tensor, a float16 autocast region, a project
configured for float16) the message says so: there `log(sigmoid(x))` fails from x = -17.3.
A selection between the sigmoid and the log keeps the form (`log(sigmoid(z)[i])` is
`logsigmoid(z)[i]`, `log(1 - sigmoid(z).squeeze(-1))` is `logsigmoid(-z).squeeze(-1)`, fixed in
place), and the value-flow analysis follows a sigmoid computed elsewhere, as for NAN102: a
local (`q = torch.sigmoid(lin(x)).squeeze(-1)`, then `torch.log(1 - q)`), an `nn.Sigmoid`
held in an attribute (`self.act = nn.Sigmoid()`), a model whose `forward` returns one, a
helper, another file of the project. The message then cites where the sigmoid was computed,
and there is no fix: keep the logits there and use `F.logsigmoid`. Inside a hand-written binary
cross-entropy, NAN301 reports the whole loss; a `log(1 - sigmoid(z))` there is still reported
here where this rule has a fix of its own.

Not reported: a sigmoid of a constant, a selection that keeps 0 out, and (the failure being in
the value too) nothing else.
"""
    example = """\
```python
import torch

def discriminator_loss(real_logits, fake_logits):
    real = torch.log(torch.sigmoid(real_logits))
    fake = torch.log(1 - torch.sigmoid(fake_logits))
    return -(real.mean() + fake.mean())
```"""
    use_instead = """\
```python
import torch
import torch.nn.functional as F

def discriminator_loss(real_logits, fake_logits):
    real = F.logsigmoid(real_logits)
    fake = F.logsigmoid(-fake_logits)
    return -(real.mean() + fake.mean())
```

A binary cross-entropy written with these two logs is better replaced as a whole by
`F.binary_cross_entropy_with_logits(z, y)` (NAN301).
"""
    measured = """\
torch 2.13 on the CPU; gradient of the output.

| expression | x | dtype | original | `F.logsigmoid` |
|---|---|---|---|---|
| `log(sigmoid(x))` | -88.73 | float32 | -inf, gradient NaN | -88.73, gradient 1 |
| `log(sigmoid(x))` | -11.1 | float16 | -11.1, gradient inf | -11.1, gradient 1 |
| `log(sigmoid(x))` | -17.34 | float16 | -inf, gradient NaN | -17.34, gradient 1 |
| `log(sigmoid(x))` | -89 | bfloat16 | -inf, gradient NaN | -89, gradient 1 |
| `log(1 - sigmoid(x))` | 16.64 | float32 | -inf, gradient NaN | `logsigmoid(-x)`: -16.64, gradient -1 |
| `log(1 - sigmoid(x))` | 8.32 | float16 | -inf, gradient NaN | -8.32, gradient -1 |
| `log(1 - sigmoid(x))` | 6.25 | bfloat16 | -inf, gradient NaN | -6.25, gradient -1 |
"""
    fix_notes = """\
Safe: `logsigmoid(x) = log(sigmoid(x))` and `logsigmoid(-x) = log(1 - sigmoid(x))` in real
arithmetic; only rounding changes. Also matched: `log1p(-sigmoid(x))`, `sigmoid(x).log()`,
`torch.special.expit`. A sigmoid kept in a local variable is reported without a fix. A sigmoid
written by hand (`torch.log(1 / (1 + torch.exp(-x)))`) is reported by NAN101 first; once that
fix is applied this rule rewrites the result, so `--fix` ends at `F.logsigmoid(x)`. Logits are
floating point in practice; on an integer tensor `logsigmoid` raises where `sigmoid` promoted
to float."""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.functional.logsigmoid.html",
        "https://pytorch.org/docs/stable/generated/torch.nn.LogSigmoid.html",
        "https://pytorch.org/docs/stable/generated/torch.nn.functional.binary_cross_entropy_with_logits.html",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        match = self._match(node, ctx)
        if match is None:
            self._through_flow(node, ctx)
            return
        sigmoid, complement, via_local, selection = match
        argument = sigmoid.op.args[0]
        if _constant(ctx, argument, sigmoid.env):
            return
        if selection is not None and analysis.excludes_zero(ctx, selection):
            return
        if not complement and inside_hand_bce(ctx, node):
            # NAN301 rewrites the whole BCE; its `log(1 - sigmoid)` is still reported, with a
            # fix of its own for the BCEs NAN301 cannot rewrite exactly.
            return
        message = self.message_complement if complement else None
        if not complement:
            # A form rule: reported in every dtype; float16, where it fails from -17.3, is said.
            half = computed_in_float16(ctx, argument)
            if half is not None:
                message = self.message_float16.format(reason=half)
        if selection is not None:
            message = self.message_selected
        logsigmoid, imports = ctx.spell("torch.nn.functional.logsigmoid")
        inner = negate(ctx, argument) if complement else strip_parens(argument)
        edits: Tuple[Edit, ...] = ()
        if not via_local:
            inner_code = node_code(inner) if complement else _src(ctx, argument)
            text = f"{logsigmoid}({inner_code})"
            if selection is not None:
                # `log(1 - sigmoid(z).squeeze(-1))` -> `F.logsigmoid(-z).squeeze(-1)`.
                text = _replacing(ctx, selection, sigmoid.op.node, text)
            edits = (_edit(ctx, node, text),) + imports
        canonical_argument = strip_parens(ctx.canonical(argument, sigmoid.env))
        if complement:
            canonical_argument = negate(ctx, canonical_argument)
        fixed = cst.parse_expression(
            f"torch.nn.functional.logsigmoid({node_code(canonical_argument)})"
        )
        # The probe runs the log of the sigmoid itself: a selection changes nothing it tests.
        canonical_sigmoid = _code(ctx.canonical(sigmoid.op.node, sigmoid.env))
        original = ctx.canonical(node) if selection is None else cst.parse_expression(
            f"torch.log(1 - {canonical_sigmoid})" if complement else f"torch.log({canonical_sigmoid})")
        ctx.report(
            self,
            node,
            message=message,
            edits=edits,
            probe=ctx.expression_probe(original, fixed),
        )

    def _through_flow(self, node: cst.Call, ctx: FileContext) -> None:
        """The log of a sigmoid (or of 1 minus one) computed elsewhere: a method's or
        `forward`'s return, an `nn.Sigmoid` attribute, another file; selected on the way. The
        message says where; the fix belongs there, so none is offered."""
        op = ctx.op(node)
        if op is None or op.name not in ("log", "log1p") or not _unary(op):
            return
        argument = op.args[0]
        if op.name == "log1p":
            neg = _find(ctx, argument, ("neg",))
            if neg is None or len(neg.op.args) != 1:
                return
            origin = analysis.stable_form(ctx, neg.op.args[0])
            complement = origin is not None and origin.form == "sigmoid"
        else:
            origin = analysis.stable_form(ctx, argument)
            complement = origin is not None and origin.form == "1 - sigmoid"
        if origin is None or origin.form == "softmax" or (op.name == "log1p" and not complement):
            return
        if inside_hand_bce(ctx, node):
            return  # NAN301 reports the whole BCE, with the same origin; no fix here either
        if complement:
            message, pair = self.message_through_complement, (
                "torch.log(1 - torch.sigmoid(logits))", "torch.nn.functional.logsigmoid(-logits)")
        else:
            message, pair = self.message_through, (
                "torch.log(torch.sigmoid(logits))", "torch.nn.functional.logsigmoid(logits)")
        ctx.report(self, node, message=message.format(origin=origin.cite),
                   probe=ctx.expression_probe(*_generic_pair(*pair)))

    def _match(self, node: cst.Call, ctx: FileContext) -> Optional[Tuple[Found, bool, bool, Optional[cst.BaseExpression]]]:
        """(the sigmoid, whether it is `1 - sigmoid`, whether a local was followed, the
        selection written around the sigmoid (`sigmoid(z).squeeze(-1)`) or None)."""
        log = _log_operand(ctx, node)
        if log is not None:
            found = _find(ctx, log.args[0], ("sigmoid", "sub"))
            selection = None
            if found is None:
                core = analysis.selected_core(ctx, log.args[0])
                found = _find(ctx, core, ("sigmoid",)) if core is not log.args[0] else None
                selection = log.args[0] if found is not None else None
            if found is None:
                return None
            if found.op.name == "sigmoid":
                return (found, False, found.via_local, selection) if _unary(found.op) else None
            sub = found.op
            if len(sub.args) != 2 or sub.kwargs or number_value(sub.args[0]) != 1.0:
                return None
            return self._sigmoid_of(ctx, sub.args[1], found)
        log1p = _log_operand(ctx, node, "log1p")
        if log1p is None:
            return None
        neg = _find(ctx, log1p.args[0], ("neg",))
        if neg is None or len(neg.op.args) != 1:
            return None
        return self._sigmoid_of(ctx, neg.op.args[0], neg)

    @staticmethod
    def _sigmoid_of(ctx: FileContext, p: cst.BaseExpression, outer: Found) -> Optional[Tuple[Found, bool, bool, Optional[cst.BaseExpression]]]:
        """The complement's match where `p` (in `1 - p`, `log1p(-p)`) is a sigmoid, directly or
        selected (`1 - sigmoid(z)[i]`)."""
        sigmoid = _find(ctx, p, ("sigmoid",), outer.env, outer.via_local)
        selection = None
        if sigmoid is None:
            core = analysis.selected_core(ctx, p)
            if core is not p:
                sigmoid = _find(ctx, core, ("sigmoid",), outer.env, outer.via_local)
                selection = p
        if sigmoid is None or not _unary(sigmoid.op):
            return None
        return sigmoid, True, sigmoid.via_local, selection


# ---------------------------------------------------------------------- NAN104


class SoftplusByHand(Rule):
    code = "NAN104"
    kind = "form"
    default_enabled = True
    untuned_precision = (
        "108 of the test half's 130 findings are one package's Bayesian layers, "
        '`log1p(exp(rho))`, all correct; without them 20 of 22. The false alarms: a deliberately '
        'stable `log1pexp` whose `exp` branch only sees inputs masked to at most 18, and a '
        '`logaddexp` helper that orders its arguments so the exponent is never positive.'
    )
    fails_in = 'all; float16 first (x > 11.1)'
    triggers = r"\bexp\b"
    name = "softplus-by-hand"
    message = (
        "`log(1 + exp(x))` is softplus written by hand: `exp` overflows to inf for x above "
        "88.7 in float32 and bfloat16 (11.09 in float16), so the result is inf and the "
        "gradient NaN; use `F.softplus(x)`"
    )
    fix_applicability = SAFE
    fix_title = "Replace with `F.softplus`"
    summary = "`log(1 + exp(x))`, `log1p(exp(x))`: inf and NaN gradients once `exp` overflows."
    why = """\
`exp(x)` is `inf` for x above 88.72 in float32, 88.75 (a representable 89) in bfloat16 and
11.09 in float16. `log(1 + inf)` is `inf` where the true value is about `x`, and in the
backward pass `1 / (1 + exp(x)) = 0` meets `exp(x) = inf`: the gradient, truly
`sigmoid(x)`, about 1, is `0 * inf = NaN`. `log1p(exp(x))` is no better: the overflow happens
before the `log1p`. The function is used for positive parameters (a standard
deviation `softplus(rho)`), in losses (`log(1 + exp(-y * f))`) and in smooth ReLUs, and
in float16 an input of 11.1 is enough.

`F.softplus(x)` never forms `exp(x)` for large x: above `threshold=20` it returns `x` itself.
That cut is exact to `log1p(exp(-x)) < e^-20 = 2.1e-9`, a relative error below 1.1e-10 (the
float32 rounding step is 6e-8); below it the result agrees with `log1p(exp(x))`.

An exponent the flow bounds is not reported: inside `if a > b:`, `b - a` is at most 0 (the
usual two-branch log-add-exp); after `t[t > 20] = 20`, `exp(t)` is finite in float32 (not in
float16, whose exp overflows from 11.09).
"""
    example = """\
```python
import torch

def scale(rho):
    return torch.log(1 + torch.exp(rho))
```"""
    use_instead = """\
```python
import torch
import torch.nn.functional as F

def scale(rho):
    return F.softplus(rho)
```"""
    measured = """\
torch 2.13 on the CPU; gradient of the output.

| x | dtype | `log(1 + exp(x))` | `log1p(exp(x))` | `F.softplus(x)` |
|---|---|---|---|---|
| 88.73 | float32 | inf, gradient NaN | inf, gradient NaN | 88.73, gradient 1 |
| 11.09 | float16 | inf, gradient NaN | inf, gradient NaN | 11.09, gradient 1 |
| 89 | bfloat16 | inf, gradient NaN | inf, gradient NaN | 89, gradient 1 |

`F.softplus`'s linear branch above 20: largest difference from the exact value over
[-40, 40] in float64, 2.06e-9 absolute, 1.03e-10 relative.
"""
    fix_notes = """\
Safe: `softplus(x) = log(1 + exp(x))` in real arithmetic; torch's default `threshold=20`
departs from it by less than e^-20 (2.1e-9), far below float32 rounding. `log(1 + exp(-z))`
becomes `F.softplus(-z)`. Not reported: `log1p(exp(-x.abs()))` and `log(1 + exp(x - x.max()))`,
whose `exp` cannot overflow. Reported without a fix when the `exp` or the sum is kept in a
local variable. `F.softplus` needs a floating-point input (`exp` promotes integers, softplus
raises on them)."""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.functional.softplus.html",
        "https://pytorch.org/docs/stable/generated/torch.nn.Softplus.html",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        exp = self._match(node, ctx)
        if exp is None:
            return
        argument = exp.op.args[0]
        if _constant(ctx, argument, exp.env) or analysis.exponent_bounded(ctx, argument, exp.env):
            return
        softplus, imports = ctx.spell("torch.nn.functional.softplus")
        edits: Tuple[Edit, ...] = ()
        if not exp.via_local:
            edits = (_edit(ctx, node, f"{softplus}({_src(ctx, argument)})"),) + imports
        fixed = cst.parse_expression(
            f"torch.nn.functional.softplus({_code(ctx.canonical(argument, exp.env))})"
        )
        ctx.report(
            self, node, _with_bound(ctx, None, self.message, argument), edits=edits,
            probe=ctx.expression_probe(ctx.canonical(node), fixed)
        )

    def _match(self, node: cst.Call, ctx: FileContext) -> Optional[Found]:
        """The `exp` inside `log(1 + exp(A))` or `log1p(exp(A))`."""
        log = _log_operand(ctx, node)
        if log is not None:
            total = _find(ctx, log.args[0], ("add",))
            if total is None:
                return None
            other = _plus_one_operand(total.op)
            exp = _find(ctx, other, ("exp",), total.env, total.via_local)
        else:
            log1p = _log_operand(ctx, node, "log1p")
            if log1p is None:
                return None
            exp = _find(ctx, log1p.args[0], ("exp",))
        if exp is None or not _unary(exp.op):
            return None
        return exp


# ---------------------------------------------------------------------- NAN105


class LogOnePlus(Rule):
    code = "NAN105"
    kind = "form"
    default_enabled = False
    untuned_precision = (
        'Most false alarms are whole numbers the analysis does not see as such (durations and '
        'frame counts from alignments, node degrees, integer grid offsets, success counts), where '
        '`log(1 + n)` is exact; the rest are arguments bounded away from 0 by construction in '
        'another function. Integers, counts, masks and inputs a guard keeps at least 0.01 from 0 '
        '(also on one branch of a `torch.where`) are no longer reported. Turn it on with '
        '`--extend-select NAN105` where `x` is a rate, a distance or a probability.'
    )
    fails_in = 'all (accuracy only)'
    triggers = r"\blog\b"
    # Accuracy only (never a NaN): on the corpus most hits were benign step sizes in
    # float32 (diffusers schedulers), so this is opt-in for numerics-sensitive code.
    name = "log-one-plus"
    message = (
        "`log(1 + x)` loses accuracy for small |x| (an accuracy loss, not a NaN): 1 + x "
        "rounds to 1 for |x| below 6e-8 in float32 (4.9e-4 in float16, 3.9e-3 in bfloat16) "
        "and the result is 0, a 100% relative error; use `log1p(x)`"
    )
    fix_applicability = SAFE
    fix_title = "Replace with `log1p`"
    summary = "`log(1 + x)`: 100% relative error for x near 0 (accuracy, not NaN); use `log1p`."
    why = """\
Adding 1 to a small `x` throws away the digits of `x` that fall below the rounding step at
1: the float32 step is 1.2e-7, the float16 step 9.8e-4, the bfloat16 step 7.8e-3. The log
then sees `1 + x` with only those digits left. For x = 1e-6 in float32 the result is 4.6%
off; for |x| below about 6e-8 (4.9e-4 in float16, 3.9e-3 in bfloat16) `1 + x` is exactly 1
and `log` returns 0, a 100% relative error. This is silent: no NaN, no inf, and the gradient
(`1/(1 + x)`, about 1) is fine. It matters where the small values carry the signal: log
returns of prices, `log(1 + rate)`, small probabilities and penalties.

`log1p(x)` computes the same function without forming `1 + x`, to full precision.

Not reported where the code keeps x off 0 (an integer or a count, a mask, a clamp, a branch
or a `torch.where` that keeps it at least 0.01 from 0), nor where every use of the result
throws away the values near 0, where the error is (`analysis/uses.py`): the result rounded
to an integer (`round`, `trunc`, `int()`, `.long()`; `floor` or `ceil` only with a floor of at
least 1 after them), only compared with a threshold at least 0.01 from 0, or clamped to a
bound at least 0.01 from 0. A result kept as a float, compared with 0, or divided by a value
that shrinks with it is reported.
"""
    example = """\
```python
import torch

def log_growth(rate):
    return torch.log(1 + rate)
```"""
    use_instead = """\
```python
import torch

def log_growth(rate):
    return torch.log1p(rate)
```"""
    measured = """\
torch 2.13 on the CPU; relative error against float64.

| x | dtype | `log(1 + x)` | `log1p(x)` |
|---|---|---|---|
| 1e-4 | float32 | 1.7e-4 | 1.1e-8 |
| 1e-6 | float32 | 0.046 | 4.5e-8 |
| 1e-8 | float32 | 1 (returns 0) | 5e-9 |
| 1e-3 | float16 | 0.024 | 4.5e-4 |
| 1e-4 | float16 | 1 (returns 0) | 5e-5 |
| 1e-3 | bfloat16 | 1 (returns 0) | 5e-4 |

The gradient is finite in every case (1 at x = 1e-8): this rule is about accuracy only.
"""
    fix_notes = """\
Safe: `log1p(x) = log(1 + x)` in real arithmetic; only rounding changes, for the better.
`torch.log(1 + x)` -> `torch.log1p(x)`, `(1 + x).log()` -> `x.log1p()`. Not reported:
`log(1 + exp(x))` (that is NAN104, softplus), `math.log(1 + x)` and `np.log(1 + x)` on Python
or NumPy numbers, constants such as `torch.log(1 + torch.tensor(2.0))`, and `log(2 + x)`.
A sum kept in a local variable is reported without a fix."""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.log1p.html",
        "Goldberg: What every computer scientist should know about floating-point arithmetic, "
        "ACM Computing Surveys 23(1), 1991 (the log(1 + x) example)",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        log = _log_operand(ctx, node)
        if log is None:
            return
        total = _find(ctx, log.args[0], ("add",))
        if total is None:
            return
        operand = _plus_one_operand(total.op)
        if operand is None or _constant(ctx, operand, total.env) or _off_zero(ctx, operand):
            return
        if region_discarded(ctx, node, _FAR_FROM_ZERO):
            return  # rounded, compared with a threshold, clamped away from 0
        if _find(ctx, operand, ("exp",), total.env) is not None:
            return  # log(1 + exp(x)) is softplus: NAN104
        edits: Tuple[Edit, ...] = ()
        if not total.via_local:
            if log.style == "method":
                text = f"{_atom_src(ctx, operand)}.log1p()"
                imports: Tuple[Edit, ...] = ()
            else:
                func = log.func
                if isinstance(func, cst.Attribute):
                    spelled = _renamed_attribute(ctx, func, "log1p")
                    imports = ()
                else:
                    spelled, imports = ctx.spell("torch.log1p")
                text = f"{spelled}({_src(ctx, operand)})"
            edits = (_edit(ctx, node, text),) + imports
        fixed = cst.parse_expression(f"torch.log1p({_code(ctx.canonical(operand, total.env))})")
        ctx.report(
            self, node, edits=edits, probe=ctx.expression_probe(ctx.canonical(node), fixed)
        )


# ---------------------------------------------------------------------- NAN106


class ExpMinusOne(Rule):
    code = "NAN106"
    kind = "form"
    default_enabled = True
    untuned_precision = (
        'The false alarms: an exponent clamped or offset away from 0 in another function or file '
        "(an initialiser's clamp at 1e-3, a diffusion schedule's time offset), integer token "
        'indices on a grid, a constant near 1 computed at initialisation, and a term bounded in '
        "[2/3, 1] by construction. Most correct findings are diffusion solvers' `exp(h) - 1` for "
        'a step h that shrinks with the number of steps, KL estimators from log-ratios and symexp '
        'transforms. Results rounded to an integer (durations floored at one frame) or only '
        'compared with a threshold (PPO clip fractions, a KL estimate tested against its target) '
        'are no longer reported: the consumer throws away the values near 0 (five test-half '
        'findings judged correct before the claim said so).'
    )
    fails_in = 'all (accuracy only)'
    triggers = r"\bexp\b"
    # Accuracy only (never a NaN): on the corpus most hits were benign step sizes in
    # float32 (diffusers schedulers), so this is opt-in for numerics-sensitive code.
    name = "exp-minus-one"
    message = (
        "`exp(x) - 1` loses accuracy for small |x| (an accuracy loss, not a NaN): exp(x) "
        "rounds to 1 for |x| below 6e-8 in float32 (4.9e-4 in float16, 3.9e-3 in bfloat16) "
        "and the result is 0, a 100% relative error; use `expm1(x)`"
    )
    fix_applicability = SAFE
    fix_title = "Replace with `expm1`"
    summary = "`exp(x) - 1`: 100% relative error for x near 0 (accuracy, not NaN); use `expm1`."
    why = """\
For small x, `exp(x)` is `1 + x + ...`, and rounding it keeps only the digits of `x` above the
rounding step at 1 (1.2e-7 in float32, 9.8e-4 in float16, 7.8e-3 in bfloat16). Subtracting 1
then cancels the leading 1 and exposes the rounding error: at x = 1e-6 the float32 result is
4.6% off, and for |x| below about 6e-8 (4.9e-4 in float16, 3.9e-3 in bfloat16) `exp(x)` is
exactly 1 and the result is 0, a 100% relative error. No NaN or inf results and the gradient
(`exp(x)`) is fine: the loss is silent. It matters in ELU-like activations near 0, in
`(exp(x) - 1) / x` terms, in compound-rate and Poisson formulas.

`expm1(x)` computes `exp(x) - 1` without the cancellation, to full precision.

Not reported where the code keeps x off 0 (an integer or a count, a clamp, a branch or a
`torch.where` that sends small x to `expm1`), nor where every use of the result throws away
the values near 0, where the error is (`analysis/uses.py`; a reviewer would not ask for
`expm1` there): the result rounded to an integer (`round`, `trunc`, `int()`, `.long()`;
`floor` or `ceil` only with a floor of at least 1 after them, as a duration in frames
`max(1, ceil(d))`), only compared with a threshold at least 0.01 from 0
(`(ratio - 1).abs() > clip`, as a mask or a count of clipped ratios), or clamped to a bound at
least 0.01 from 0 (`clamp(min=0.5)`), which overwrites them. Additions, products, selections
and casts on the way keep the error a rounding step. Still reported: a division by a value
that shrinks with it (`(exp(x) - 1) / x`), a comparison with 0, `ceil` with no floor after it,
and a result kept as a float (the KL estimate `(exp(r) - 1) - r` of a log-ratio `r`).
"""
    example = """\
```python
import torch

def elu_negative_part(x):
    return torch.exp(x) - 1
```"""
    use_instead = """\
```python
import torch

def elu_negative_part(x):
    return torch.expm1(x)
```"""
    measured = """\
torch 2.13 on the CPU; relative error against float64.

| x | dtype | `exp(x) - 1` | `expm1(x)` |
|---|---|---|---|
| 1e-4 | float32 | 1.2e-4 | 1.6e-8 |
| 1e-6 | float32 | 0.046 | 4.5e-8 |
| 1e-8 | float32 | 1 (returns 0) | 5e-9 |
| 1e-3 | float16 | 0.024 | 4.5e-4 |
| 1e-4 | float16 | 1 (returns 0) | 5e-5 |
| 1e-3 | bfloat16 | 1 (returns 0) | 5e-4 |

The gradient is finite in every case (1 at x = 1e-8): this rule is about accuracy only.
"""
    fix_notes = """\
Safe: `expm1(x) = exp(x) - 1` in real arithmetic; only rounding changes, for the better.
`torch.exp(x) - 1` -> `torch.expm1(x)`, `x.exp() - 1` -> `x.expm1()`, `torch.exp(x).sub(1)` ->
`torch.expm1(x)`. Not reported: `exp(x) - 1.5` or any other constant, `math.exp(x) - 1` on
Python numbers, and constants. An `exp` kept in a local variable is reported without a fix."""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.expm1.html",
        "https://pytorch.org/docs/stable/special.html#torch.special.expm1",
    )

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        op = ctx.op(node)
        if op is None or len(op.args) != 2 or op.kwargs:
            return
        if op.name == "sub" and number_value(op.args[1]) == 1.0:
            operand = op.args[0]
        elif op.name == "add" and number_value(op.args[1]) == -1.0:
            operand = op.args[0]
        elif op.name == "add" and number_value(op.args[0]) == -1.0:
            operand = op.args[1]
        else:
            return
        exp = _find(ctx, operand, ("exp",))
        if exp is None or not _unary(exp.op):
            return
        argument = exp.op.args[0]
        if _constant(ctx, argument, exp.env) or _off_zero(ctx, argument):
            return
        if region_discarded(ctx, node, _FAR_FROM_ZERO):
            return  # rounded, compared with a threshold, clamped away from 0
        edits: Tuple[Edit, ...] = ()
        if not exp.via_local:
            text, imports = _renamed_call(ctx, exp.op, "expm1")
            edits = (_edit(ctx, node, text),) + imports
        fixed = cst.parse_expression(f"torch.expm1({_code(ctx.canonical(argument, exp.env))})")
        ctx.report(
            self, node, edits=edits, probe=ctx.expression_probe(ctx.canonical(node), fixed)
        )


# ---------------------------------------------------------------------- NAN107


class LogsumexpByHand(Rule):
    code = "NAN107"
    kind = "form"
    default_enabled = True
    untuned_precision = (
        "Rare in the corpora. The false alarms of earlier runs shifted by the maximum in forms the "
        "analysis did not read: in place (`logits.sub_(max)` of a vocabulary-parallel cross-entropy, "
        "`x -= m`), now seen. Issue 37 put it on by default: the rewrite is exact and free."
    )
    fails_in = 'all; float16 first (11.1)'
    triggers = r"\bexp\b"
    name = "logsumexp-by-hand"
    message = (
        "`log(exp(x).sum(d))` is logsumexp written by hand: `exp` overflows to inf once an "
        "entry exceeds 88.7 in float32 (11.09 in float16), and the sum underflows to 0 once "
        "all entries are below -104 (-17.3 in float16), so the result is +-inf and the "
        "gradient NaN; use `torch.logsumexp`"
    )
    fix_applicability = SAFE
    fix_title = "Replace with `torch.logsumexp`"
    summary = "`log(exp(x).sum(d))`: +-inf and NaN gradients outside a narrow range; use `logsumexp`."
    why = """\
The sum of exponentials overflows as soon as one entry's `exp` does: above 88.72 in float32,
89 in bfloat16 and 11.09 in float16, giving `+inf`. At the other end, when every entry is
below -103.98 in float32 (-92.75 in bfloat16, -17.34 in float16) every `exp` rounds to 0,
the sum is 0 and the log `-inf`. The true value lies within `log(n)` of the largest entry in
both cases, and the gradient (the softmax of the entries) is NaN. Energies, log-likelihoods
and partition functions routinely leave the narrow window in which the spelled-out form works.

`torch.logsumexp(x, d)` subtracts the maximum before exponentiating and adds it back
(`m + log(sum(exp(x - m)))`), so its `exp` never overflows and the sum is at least 1.

A shift by the maximum of the whole tensor (`x - x.max()`, `x - x.data.max()`) before a sum
along a dim is reported too: it removes the overflow but not the underflow, since a row whose
entries all lie more than 104 (float16: 17.3) below the largest entry of the tensor still
sums to 0. `logsumexp` shifts each row by its own maximum.
"""
    example = """\
```python
import torch

def log_partition(energy):
    return torch.log(torch.exp(-energy).sum(dim=-1))
```"""
    use_instead = """\
```python
import torch

def log_partition(energy):
    return torch.logsumexp(-energy, dim=-1)
```"""
    measured = """\
torch 2.13 on the CPU; `x` is one row of two entries, reduced over it; gradient of the output.

| x | dtype | `log(exp(x).sum(-1))` | `logsumexp(x, -1)` |
|---|---|---|---|
| [88.73, 0] | float32 | inf, gradient [NaN, 0] | 88.73, gradient [1, 0] |
| [-103.98, -103.98] | float32 | -inf, gradient [NaN, NaN] | -103.29, gradient [0.5, 0.5] |
| [11.09, 0] | float16 | inf, gradient [NaN, 0] | 11.09, gradient [1, 1.5e-5] |
| [-17.34, -17.34] | float16 | -inf, gradient [NaN, NaN] | -16.66, gradient [0.503, 0.503] |
| [89, 0] | bfloat16 | inf, gradient [NaN, 0] | 89, gradient [1, 0] |
| [-93, -93] | bfloat16 | -inf, gradient [NaN, NaN] | -92.5, gradient [0.605, 0.605] |
"""
    fix_notes = """\
Safe: `logsumexp(x, d) = log(sum(exp(x), d))` in real arithmetic; only rounding changes. The
sum's `dim`/`keepdim` arguments are kept as written; `x.exp().sum(-1).log()` ->
`x.logsumexp(-1)`. A sum over all elements (no `dim`) becomes `torch.logsumexp(x.flatten(), 0)`
(`logsumexp` requires a dim; flattening gives the same 0-d result). Reported without a fix: a
sum with `dtype=` or `dim=None`, an `exp` or a sum kept in a local variable, and a logsumexp
over several tensors (`log(exp(-a).sum() + exp(-b).sum())`, the probe's fix being
`torch.logsumexp(torch.cat([(-a).flatten(), (-b).flatten()]), 0)`). Not reported:
the stabilized form `m + log(exp(x - m).sum(d))` with `m` a `max`/`amax` of x (its `exp` cannot
overflow), and `log(exp(x).sum(d) + eps)`."""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.logsumexp.html",
        "Blanchard, Higham, Higham: Accurately computing the log-sum-exp and softmax functions, "
        "IMA Journal of Numerical Analysis 41(4), 2021",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        log = _log_operand(ctx, node)
        if log is None:
            return
        total = _find(ctx, log.args[0], ("sum",))
        if total is None:
            self._several_tensors(node, log, ctx)
            return
        if not total.op.args:
            return
        exp = _find(ctx, total.op.args[0], ("exp",), total.env, total.via_local)
        if exp is None or not _unary(exp.op):
            return
        argument = exp.op.args[0]
        dims = _reduction_dims(total.op)
        message = None
        if dims is not None and dims[0] is not None and not _is_name(dims[0], "None") \
                and analysis.shifted_by_global_max(ctx, argument, exp.env):
            # The max-shift guards against overflow only; a row far below the global max
            # still sums to 0.
            message = (
                "`log(exp(x - x.max()).sum(d))` shifts by the maximum of the whole tensor, not "
                "of each row: a row whose entries all lie more than 104 below it (17.3 in "
                "float16) sums to 0 and its log is -inf, with a NaN gradient; use "
                "`torch.logsumexp`, which shifts each row by its own maximum"
            )
        elif _constant(ctx, argument, exp.env) or analysis.exponent_bounded(ctx, argument, exp.env):
            return
        edits: Tuple[Edit, ...] = ()
        fixed = None
        # No exact fix for a sum with `dtype=`, with `dim=None`, or with `keepdim` and no dim.
        if dims is not None and not _is_name(dims[0], "None") and not (
            dims[0] is None and dims[1] is not None
        ):
            whole = dims[0] is None  # a sum over all elements: logsumexp(x.flatten(), 0)
            rest = [] if whole else _other_args(total.op)
            canonical_input = ctx.canonical(argument, exp.env)
            if whole:
                canonical_input = cst.parse_expression(
                    f"{node_code(parenthesize(strip_parens(canonical_input)))}.flatten()"
                )
            canonical_rest = ["0"] if whole else _canonical_args(ctx, rest, total.env)
            fixed = cst.parse_expression(
                f"torch.logsumexp({', '.join([_code(canonical_input)] + canonical_rest)})"
            )
            if not exp.via_local:
                args = ["0"] if whole else [_arg_code(ctx, a) for a in rest]
                edits = self._edits(node, ctx, exp.op, whole, args)
        ctx.report(
            self, node, _with_bound(ctx, message, self.message, argument), edits=edits,
            probe=ctx.expression_probe(ctx.canonical(node), fixed)
        )

    def _several_tensors(self, node: cst.Call, log: Op, ctx: FileContext) -> None:
        """`log(exp(-a).sum() + exp(-b).sum())`, also through a local (`Z = ...` then
        `log(Z)`): a logsumexp over the elements of several tensors. Each term must be a
        whole sum of an `exp` the code does not keep finite; reported with the exact rewrite
        `torch.logsumexp(torch.cat([(-a).flatten(), (-b).flatten()]), 0)` as the probe's fix
        (no edit: the terms may be spread over statements)."""
        top = _find(ctx, log.args[0], ("add",))
        if top is None or len(top.op.args) != 2 or top.op.kwargs:
            return
        terms: List[cst.BaseExpression] = []
        pending = [(a, top.env, top.via_local) for a in top.op.args]
        while pending and len(terms) <= 8:
            term, env, via = pending.pop(0)
            inner = _find(ctx, term, ("add",), env, via)
            if inner is not None and len(inner.op.args) == 2 and not inner.op.kwargs:
                pending = [(a, inner.env, inner.via_local) for a in inner.op.args] + pending
                continue
            total = _find(ctx, term, ("sum",), env, via)
            if total is None or not total.op.args or _reduction_dims(total.op) != (None, None):
                return  # not a whole sum (a constant, a sum along a dim): not one logsumexp
            exp = _find(ctx, total.op.args[0], ("exp",), total.env, total.via_local)
            if exp is None or not _unary(exp.op):
                return
            argument = exp.op.args[0]
            if _constant(ctx, argument, exp.env) or analysis.exponent_bounded(ctx, argument, exp.env):
                return
            terms.append(ctx.canonical(argument, exp.env))
        if len(terms) < 2 or pending:
            return
        pieces = ", ".join(f"{node_code(parenthesize(strip_parens(t)))}.flatten()" for t in terms)
        fixed = cst.parse_expression(f"torch.logsumexp(torch.cat([{pieces}]), 0)")
        message = (
            "`log(exp(a).sum() + exp(b).sum())` is logsumexp written by hand over several tensors: "
            "`exp` overflows to inf once an entry exceeds 88.7 in float32 (11.09 in float16), and "
            "the sum underflows to 0 (log = -inf) once every entry is below -103; use "
            "`torch.logsumexp(torch.cat([a.flatten(), b.flatten()]), 0)`"
        )
        ctx.report(self, node, message, probe=ctx.expression_probe(ctx.canonical(node), fixed))

    def _edits(self, node, ctx, exp: Op, whole: bool, args: List[str]) -> Tuple[Edit, ...]:
        argument = exp.args[0]
        if exp.style == "method":
            receiver = _atom_src(ctx, argument)
            if whole:
                receiver += ".flatten()"
            text = f"{receiver}.logsumexp({', '.join(args)})"
            imports: Tuple[Edit, ...] = ()
        else:
            spelled, imports = ctx.spell("torch.logsumexp")
            first = _src(ctx, argument)
            if whole:
                first = f"{_atom_src(ctx, argument)}.flatten()"
            text = f"{spelled}({', '.join([first] + args)})"
        return (_edit(ctx, node, text),) + imports


# ---------------------------------------------------------------------- NAN108


class SoftmaxByHand(Rule):
    code = "NAN108"
    kind = "form"
    default_enabled = False
    untuned_precision = (
        'The false alarms are exponents bounded by construction (a `linspace` that ends at 0; '
        'L2-normalised features divided by their largest distance).'
    )
    fails_in = 'all; float16 first (11.1)'
    triggers = r"\bexp\b"
    name = "softmax-by-hand"
    message = (
        "Softmax written by hand as `exp(x) / exp(x).sum(d)`: `exp` overflows once an entry "
        "exceeds 88.7 in float32 (11.09 in float16) and inf / inf is NaN, and a row whose "
        "entries are all below -104 (-17.3 in float16) gives 0 / 0 = NaN; use `torch.softmax`"
    )
    message_no_fix = (
        "Softmax written by hand as `exp(x) / exp(x).sum(...)`: `exp` overflows once an entry "
        "exceeds 88.7 in float32 (11.09 in float16) and inf / inf is NaN; use `torch.softmax` "
        "(no automatic fix: without `keepdim=True` the sum broadcasts against another dimension)"
    )
    fix_applicability = SAFE
    fix_title = "Replace with `torch.softmax`"
    summary = "`exp(x) / exp(x).sum(d, keepdim=True)`: NaN once `exp` overflows or underflows."
    why = """\
`exp(x)` is `inf` above 88.72 in float32, 89 in bfloat16 and 11.09 in float16: the largest
entry then divides `inf` by `inf` and its probability is NaN (the true value is about 1). At
the other end, a row whose entries are all below -103.98 in float32 (-92.75 in bfloat16,
-17.34 in float16) has every `exp` round to 0 and every probability is `0 / 0 = NaN` (the true
values are finite, 1/n for equal entries). Either way the gradient of the whole row is NaN.
Attention scores and logits reach these values without anything being wrong with the model.

`torch.softmax(x, d)` subtracts the row's maximum first, so the largest `exp` is exactly 1:
no overflow, and the sum is at least 1.
"""
    example = """\
```python
import torch

def attention_weights(scores):
    return torch.exp(scores) / torch.exp(scores).sum(dim=-1, keepdim=True)
```"""
    use_instead = """\
```python
import torch

def attention_weights(scores):
    return torch.softmax(scores, dim=-1)
```"""
    measured = """\
torch 2.13 on the CPU; `x` is one row of two entries, normalized over it; gradient of the
output's sum.

| x | dtype | `exp(x) / exp(x).sum(-1, keepdim=True)` | `softmax(x, -1)` |
|---|---|---|---|
| [88.73, 0] | float32 | [NaN, 0], gradient [NaN, NaN] | [1, 2.9e-39], gradient [0, 0] |
| [-103.98, -103.98] | float32 | [NaN, NaN], gradient [NaN, NaN] | [0.5, 0.5], gradient [0, 0] |
| [11.09, 0] | float16 | [NaN, 0], gradient [NaN, NaN] | [1, 1.5e-5], gradient [-1.5e-5, 0] |
| [-17.34, -17.34] | float16 | [NaN, NaN], gradient [NaN, NaN] | [0.5, 0.5], gradient [0, 0] |
| [89, 0] | bfloat16 | [NaN, 0], gradient [NaN, NaN] | [1, 2.2e-39], gradient [0, 0] |
| [-93, -93] | bfloat16 | [NaN, NaN], gradient [NaN, NaN] | [0.5, 0.5], gradient [0, 0] |
"""
    fix_notes = """\
Safe where exact: the fix is offered when the sum keeps the reduced dimension
(`keepdim=True`), or reduces dim 0 (whose removal broadcasts back the same way); the dim is
kept as written. `exp(x) / exp(x).sum(-1)` without `keepdim` is softmax only for a 1-D `x`
(for more dimensions it divides by the sums of another axis, or fails), and `exp(x) /
exp(x).sum()` normalizes over all elements: both are reported without a fix, as are forms
whose `exp` or sum is kept in a local variable. Not reported: the stabilized
`exp(x - x.max(d, keepdim=True).values)` / `amax` forms, and masked or guarded denominators
(`(exp(x) * mask).sum(...)`, `sum(...) + eps`). `torch.softmax` needs a floating-point input
(`exp` promotes integers, softmax raises on them); scores are floating point in practice."""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.functional.softmax.html",
        "https://pytorch.org/docs/stable/generated/torch.softmax.html",
        "Blanchard, Higham, Higham: Accurately computing the log-sum-exp and softmax functions, "
        "IMA Journal of Numerical Analysis 41(4), 2021",
    )

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        op = ctx.op(node)
        if op is None or op.name != "div" or len(op.args) != 2 or op.kwargs:
            return
        top = _find(ctx, op.args[0], ("exp",))
        if top is None or not _unary(top.op):
            return
        total = _find(ctx, op.args[1], ("sum",))
        if total is None or not total.op.args:
            return
        bottom = _find(ctx, total.op.args[0], ("exp",), total.env, total.via_local)
        if bottom is None or not _unary(bottom.op):
            return
        argument = top.op.args[0]
        if _key(ctx, argument, top.env) != _key(ctx, bottom.op.args[0], bottom.env):
            return
        if _constant(ctx, argument, top.env) or analysis.exponent_bounded(ctx, argument, top.env):
            return
        dims = _reduction_dims(total.op)
        dim_arg: Optional[cst.Arg] = None
        if dims is not None and _single_dim(ctx, dims[0], total.env):
            dim, keepdim = dims
            for arg in _other_args(total.op):
                if arg.value is dim:
                    dim_arg = arg
            kept = _is_name(keepdim, "True")
            leading = (keepdim is None or _is_name(keepdim, "False")) and number_value(dim) == 0.0
            if dim_arg is not None and not (kept or leading):
                # exp(x) / exp(x).sum(-1): softmax only for a 1-D x.
                ctx.report(
                    self,
                    node,
                    message=_with_bound(ctx, self.message_no_fix, self.message, argument),
                    probe=ctx.expression_probe(ctx.canonical(node), None),
                )
                return
        if dim_arg is None:
            # A sum over all elements, over several dims, or with `dtype=`: no exact fix.
            ctx.report(self, node, _with_bound(ctx, None, self.message, argument),
                       probe=ctx.expression_probe(ctx.canonical(node), None))
            return
        dim_code = _arg_code(ctx, dim_arg)
        edits: Tuple[Edit, ...] = ()
        if not (top.via_local or bottom.via_local):
            if top.op.style == "method":
                text = f"{_atom_src(ctx, argument)}.softmax({dim_code})"
                imports: Tuple[Edit, ...] = ()
            else:
                spelled, imports = ctx.spell("torch.softmax")
                text = f"{spelled}({_src(ctx, argument)}, {dim_code})"
            edits = (_edit(ctx, node, text),) + imports
        canonical_dim = _canonical_args(ctx, [dim_arg], total.env)[0]
        fixed = cst.parse_expression(
            f"torch.softmax({_code(ctx.canonical(argument, top.env))}, {canonical_dim})"
        )
        ctx.report(
            self, node, _with_bound(ctx, None, self.message, argument), edits=edits,
            probe=ctx.expression_probe(ctx.canonical(node), fixed)
        )
