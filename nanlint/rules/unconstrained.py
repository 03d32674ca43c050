"""NAN127: the log or square root of a layer's raw output, which is negative for many inputs."""

from __future__ import annotations

import libcst as cst

from .. import analysis
from ..core.context import FileContext, abstract_calls, free_inputs, node_code
from ..core.diagnostics import ProbeInput, Step
from .base import Rule
from .log_eps import clamped_at_tiny

# The ops whose domain stops at 0 (NaN below it).
_ROOT_OR_LOG = ("log", "log2", "log10", "sqrt", "rsqrt")


class LogOfUnconstrained(Rule):
    code = "NAN127"
    kind = "value"
    default_enabled = False
    name = "log-of-unconstrained"
    fails_in = "all (a negative output: about half the inputs of a freshly initialized layer)"
    message = (
        "`log` or `sqrt` of a layer's raw output (a `Linear` or convolution, nothing after it "
        "keeps it positive): the output is negative for many inputs and the result is NaN, "
        "forward and backward; predict the log of the quantity and take `exp`, or pass the "
        "output through `softplus`"
    )
    triggers = r"\blog|\bsqrt|\brsqrt"
    manifest = (
        "the argument is a linear layer's or a convolution's raw output (named, with its line), "
        "negative for ordinary inputs: every finding of this rule is (it reports only those)."
    )
    untuned_precision = (
        "Not yet measured on code it was not tuned on: written for issue 33's shape 'the log or "
        "sqrt of an unconstrained output' (a variance or scale taken straight from a linear "
        "layer). Turn it on with `--extend-select NAN127`."
    )
    summary = "`torch.log(self.var(x))` with `self.var = nn.Linear(...)`: NaN wherever the layer's output is negative."
    why = """\
A model that predicts a variance, a scale or a rate has to keep it positive. Taken straight
from a linear layer or a convolution it is not: a freshly initialized `nn.Linear(16, 1)`
gives a negative output for about 43% of standard normal inputs, and training does not
confine it. `log` and `sqrt` of a negative number are NaN, so the loss is NaN from the
first batch that has one, and every gradient with it.

The usual forms keep the value positive by construction: predict the log-variance and use
`exp(logvar)` (or `exp(0.5 * logvar)` for a standard deviation), or pass the output
through `softplus` (plus a small floor). A `clamp(min=eps)`, `abs`, a square, `exp`,
`softplus`, `sigmoid` or `relu` on the way, or a branch that tests the value first,
silences the rule.

The rule reports where the analysis sees the layer: an `nn.Linear`, `nn.LazyLinear`,
`nn.Bilinear` or a convolution held in an attribute (`self.var = nn.Linear(d, 1)` then
`torch.log(self.var(x))`, also through a local name), a member of an `nn.Sequential` that
ends with one. A tensor whose producer it cannot see (another file's model, a function
argument) is not reported.
"""
    example = """\
```python
import torch
import torch.nn as nn

class GaussianHead(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.mu = nn.Linear(d, 1)
        self.var = nn.Linear(d, 1)

    def forward(self, h, y):
        var = self.var(h)
        return 0.5 * torch.log(var) + (y - self.mu(h)) ** 2 / (2 * var)
```"""
    use_instead = """\
```python
import torch
import torch.nn as nn

class GaussianHead(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.mu = nn.Linear(d, 1)
        self.logvar = nn.Linear(d, 1)

    def forward(self, h, y):
        logvar = self.logvar(h)
        return 0.5 * logvar + (y - self.mu(h)) ** 2 / (2 * torch.exp(logvar))
```"""
    measured = """\
torch 2.13 CPU. `nn.Linear(16, 1)` at its default initialization (seed 0), 1,000 standard
normal inputs: 426 outputs are negative.

| x | dtype | `torch.log(x)` | gradient | `torch.sqrt(x)` | gradient |
|---|---|---|---|---|---|
| -0.5 | float32, float16, bfloat16 | NaN | -2 (then NaN through the NaN loss) | NaN | NaN |
| 0 | float32, float16, bfloat16 | -inf | inf | 0 | inf |
| 0.5 | float32 | -0.693 | 2 | 0.707 | 0.707 |
"""
    fix_notes = """\
No automatic fix: keeping the value positive changes the model's parameterization (`exp` of
a predicted log, or `softplus`), which its training and any saved weights depend on.
`nanlint verify` runs the argument clamped at `torch.finfo(dtype).tiny` beside the original
only to show the NaN comes from the negative values; a clamp is no fix for the model (it
turns every negative variance into the smallest positive one)."""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.GaussianNLLLoss.html",
        "https://pytorch.org/docs/stable/generated/torch.nn.functional.softplus.html",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        op = ctx.op(node)
        if op is None or op.name not in _ROOT_OR_LOG or len(op.args) != 1 or op.kwargs:
            return
        evidence = analysis.unconstrained_output(ctx, op.args[0])
        if evidence is None:
            return
        spelled = op.name if op.style == "method" else node_code(node.func)
        message = (
            f"`{spelled}` of a layer's raw output ({evidence}): nothing keeps it positive, so it is "
            f"negative for many inputs and `{op.name}` gives NaN there, forward and backward; predict "
            "the log of the quantity and take `exp`, or pass the output through `softplus`"
        )
        # `verify` needs a counterfactual defined where the original is NaN (float64 is NaN
        # there too): the argument clamped at tiny. It is the probe's, not a suggested edit.
        original, fixed = abstract_calls(*clamped_at_tiny(f"torch.{op.name}", ctx.canonical(op.args[0])), ctx=ctx)
        # The layer's output takes either sign, of the size a freshly initialized layer gives.
        varying = [name for name in free_inputs(original) if not name.endswith(".dtype")]
        domains = {varying[0]: ProbeInput(varying[0], domain=(-10.0, 10.0), evidence=evidence)} \
            if len(varying) == 1 else {}
        # The layer is the evidence: its raw output takes either sign for ordinary inputs.
        steps = analysis.evidence_steps(ctx, analysis.value(ctx, op.args[0])) or (
            Step(ctx.span(op.args[0])[0].row, evidence),)
        ctx.report(self, node, message=message, probe=ctx.expression_probe(original, fixed, domains),
                   evidence=steps)
