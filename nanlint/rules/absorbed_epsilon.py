"""NAN126: a guard that keeps a probability below 1 with an epsilon the dtype cannot hold."""

from __future__ import annotations

import libcst as cst

from .. import analysis
from ..core.context import FileContext, node_code, strip_parens
from ..core.diagnostics import ProbeInput
from .base import Rule


class AbsorbedEpsilon(Rule):
    code = "NAN126"
    kind = "value"
    default_enabled = False
    name = "epsilon-absorbed-at-one"
    fails_in = 'float32 (eps < 2.98e-8); float16 (eps < 2.44e-4); bfloat16 (eps < 1.95e-3)'
    message = (
        "A probability is kept below 1 with an epsilon the dtype cannot hold: the bound is 1.0 "
        "as stored, so a saturated p is still exactly 1 and `log(1 - p)`, `atanh(p)` or "
        "`p / (1 - p)` downstream are inf/NaN; use an epsilon the dtype can hold "
        "(`torch.finfo(p.dtype).eps`)"
    )
    triggers = r"\bclamp|\bclip|\d[eE]-"
    untuned_precision = (
        "Measured earlier by the same claim: not yet measured on code it was not tuned on (built from a real bug, "
        "gnn_tracking's soft clip of a sigmoid with epsilon 1e-9, in the tune half of "
        "`benchmarks/realbugs`). Turn it on with `--extend-select NAN126`."
    )
    summary = "`p.clamp(1e-8, 1 - 1e-8)`, `eps + (1 - 2 * eps) * p` with eps too small: `1 - eps` is 1.0 in float32."
    why = """\
A sigmoid or softmax output is exactly 1.0 once it saturates (a logit past 16.6 in float32,
7.6 in float16), so code that later takes `log(1 - p)`, `atanh(p)` or `p / (1 - p)` keeps p
below 1 first: `p.clamp(eps, 1 - eps)`, or the soft clip `eps + (1 - 2 * eps) * p`. The
bound is a Python number, and it meets the tensor in the tensor's dtype, rounded to the
nearest value that dtype holds. Next to 1, float32 holds steps of 5.96e-8, float16 of
4.9e-4 and bfloat16 of 3.9e-3: an epsilon below half a step vanishes. `1 - 1e-8` is 1.0 in
float32, `1 - 1e-6` is 1.0 in float16, and the guard keeps nothing off 1.

The rule reports the guard itself, where the guarded value is a probability the analysis
sees (a sigmoid or softmax output, through names, helpers and models), in float32 unless
the tensor is evidently float16 or bfloat16. A file that may compute in float64 (`float64`,
`.double()`, `set_default_dtype` in it) is not reported: there `1 - 1e-8` keeps its value.
A hand-written binary cross-entropy on such a p is NAN301's, with the same reason.
"""
    example = """\
```python
import torch

def condensation_strength(logits):
    beta = torch.sigmoid(logits)
    eps = 1e-9
    beta = eps + (1 - 2 * eps) * beta  # 1 - 2e-9 is 1.0 in float32
    return torch.arctanh(beta)
```"""
    use_instead = """\
```python
import torch

def condensation_strength(logits):
    beta = torch.sigmoid(logits)
    eps = 1e-6
    beta = eps + (1 - 2 * eps) * beta
    return torch.arctanh(beta)
```"""
    measured = """\
torch 2.13 CPU, float32, logit 20 (sigmoid is exactly 1.0 there):

| guard | p as stored | downstream |
|---|---|---|
| `eps + (1 - 2 * eps) * p`, eps = 1e-9 | 1.0 | `arctanh(p)` = inf |
| `p.clamp(1e-8, 1 - 1e-8)` | 1.0 | BCE by hand: loss NaN, gradient NaN |
| `p.clamp(1e-7, 1 - 1e-7)` | 0.99999988 | finite |
| `eps + (1 - 2 * eps) * p`, eps = 1e-6 | 0.999999 | `arctanh(p)` = 7.25 |
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.finfo.html",
        "https://github.com/gnn-tracking/gnn_tracking/pull/422",
    )

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        guard = analysis.upper_guard(ctx, node)
        if guard is None or not analysis.value(ctx, guard.guarded).prob:
            return
        why = analysis.rounds_to_one(ctx, node, guard)
        if why is None:
            return
        p = guard.guarded
        ctx.report(
            self,
            node,
            message=(
                f"A probability is kept below 1 with an epsilon the dtype cannot hold: {why}, so a "
                "saturated p is still exactly 1 and `log(1 - p)`, `atanh(p)` or `p / (1 - p)` "
                "downstream are inf/NaN; use an epsilon the dtype can hold (`torch.finfo(p.dtype).eps`)"
            ),
            probe=self._probe(ctx, node, p),
        )

    @staticmethod
    def _probe(ctx: FileContext, node: cst.BaseExpression, p: cst.BaseExpression):
        """What the guard is for, checked: `log(1 - guard)` (no fix: which epsilon the code
        needs is the author's choice)."""
        guard = node_code(strip_parens(ctx.canonical(node)))
        original = cst.parse_expression(f"torch.log(1 - ({guard}))")
        name = strip_parens(p)
        domains = {name.value: ProbeInput(name=name.value, kind="probability", domain=(0.0, 1.0))} \
            if isinstance(name, cst.Name) else {}
        return ctx.expression_probe(original, None, domains)
