"""NAN112: `torch.where` over a branch whose gradient is NaN where it is discarded.
NAN113: a mean over a mask that can select nothing (0 / 0)."""

from __future__ import annotations

from typing import List, Optional, Set, Tuple

import libcst as cst

from .. import analysis
from ..analysis import conditions, guards, masks, repairs
from ..core.context import FileContext, contains, descendants, dotted_name, is_atom, node_code, strip_parens
from ..core.ops import number_value, split_args as split_args_safe
from ..core.diagnostics import Step
from .base import SAFE, UNSAFE, Rule

# --------------------------------------------------------------------------- NAN112


def _unsafe_operand(ctx: FileContext, node: cst.CSTNode) -> Optional[Tuple[str, cst.BaseExpression]]:
    """(what, operand) where `node` has an infinite or NaN derivative at some finite input:
    sqrt, rsqrt, log, division by a variable, acos/asin, a fractional or negative power."""
    if not isinstance(node, (cst.Call, cst.BinaryOperation)):
        return None
    op = ctx.op(node)
    if op is not None:
        if (
            op.name in ("sqrt", "log", "log2", "log10", "reciprocal", "rsqrt", "acos", "asin")
            and len(op.args) == 1
            and not op.kwargs
        ):
            return op.name, op.args[0]
        if op.name == "div" and len(op.args) == 2:
            divisor = op.args[1]
            if number_value(strip_parens(divisor)) is None:
                return "division", divisor
            return None
        if op.name == "pow" and len(op.args) == 2 and not op.kwargs:
            exponent = number_value(strip_parens(op.args[1]))
            if exponent is not None and (exponent < 0 or exponent != int(exponent)):
                if exponent == -1 or exponent < 0:
                    return "division", op.args[0]
                return "fractional power", op.args[0]
        return None
    called = masks.torch_call(ctx, node, "rsqrt", "acos", "asin", "arccos", "arcsin")
    if called is None:
        return None
    style, short = called
    split = split_args_safe(node.args)
    if split is None:
        return None
    positional, keywords = split
    if style == "method":
        if positional or keywords:
            return None
        return short, node.func.value
    if len(positional) != 1 or keywords:
        return None
    return short, positional[0]


def _where_parts(ctx: FileContext, node: cst.Call):
    """(condition, branch taken where true, branch taken where false, style) of a where call."""
    split = split_args_safe(node.args)
    if split is None:
        return None
    positional, keywords = split
    q = ctx.qualname(node.func)
    if q in ("torch.where", "torch.Tensor.where"):
        args = positional + [keywords[k] for k in ("condition", "input", "other") if k in keywords]
        if q == "torch.Tensor.where":
            # torch.Tensor.where(x, cond, y)
            if len(args) != 3:
                return None
            return args[1], args[0], args[2], "function"
        if len(args) != 3:
            return None
        return args[0], args[1], args[2], "function"
    if q is None and isinstance(node.func, cst.Attribute) and node.func.attr.value == "where":
        if ctx.qualname(node.func.value) is not None:
            return None  # np.where, a module's function
        args = positional + [keywords[k] for k in ("condition", "other") if k in keywords]
        if len(args) != 2:
            return None
        return args[0], node.func.value, args[1], "method"
    return None


class WhereUnsafeBranch(Rule):
    code = "NAN112"
    kind = "value"
    default_enabled = False
    fails_in = 'all (gradient)'
    name = "where-unsafe-branch"
    message = (
        "`torch.where` picks a branch, but the backward pass differentiates both: where the "
        "condition discards this `sqrt`/`log`/division its derivative is inf or NaN, and inf * 0 "
        "is NaN in the gradient; guard the argument with the same condition (a \"double where\")"
    )
    fix_applicability = SAFE
    fix_title = "Apply the condition to the argument too (double where)"
    # Off by default: on the corpora most findings are in metric code (counts, per-class
    # scores) through which no gradient ever flows; see `why`.
    triggers = r"\bwhere\b|\]\s*=[^=]"
    summary = (
        "`torch.where(x > 0, sqrt(x), 0)`: right values, NaN gradient from the discarded branch."
    )

    untuned_precision = (
        "Measured earlier by the same claim, on the untuned precision corpus (`benchmarks/precision/`, `run.py --select ALL`; 86 PyPI packages never used to tune the rules, split by a hash of the package name; every finding read with its function and callers and judged by the project's standard) 3 of 9 findings are real on the test split and 2 of 6 on the tune split (both forms, `torch.where` and the patch `y[r >= 1] = 0`), below the 90% bar. "
        "The real ones: a log of image densities with zero pixels, an eigenvalue angle whose `acos` sits at ±1 when eigenvalues coincide, a correlation loss whose denominator is 0 when a batch predicts one class, and an activation whose documented parameter value 0 divides by 0. The false alarms: a discarded branch that no gradient reaches in normal use (sampling, evaluation metrics, optimizer arithmetic, constructors, data targets), helpers called only from a `no_grad` caller or a custom `autograd.Function` in another file, and NaN gradients that land on slots no loss reads. Turn it on with `--extend-select NAN112` in differentiable code."
    )

    def __init__(self) -> None:
        self._patched: Set[int] = set()
    why = """\
`torch.where(cond, a, b)` selects values, but autograd computes the gradient of both `a` and
`b` everywhere and multiplies the branch not taken by 0. Where the discarded branch is
`sqrt(x)`, `log(x)`, `1 / x`, `x ** 0.5`, `rsqrt(x)` or `acos(x)` at a point outside its domain
(x <= 0, |x| >= 1), its local derivative is inf or NaN, and `0 * inf` is NaN: the gradient of
`x` is NaN at exactly the points the condition was written to protect, although every forward
value is correct. One NaN gradient poisons every weight at the next optimizer step.

`torch.where(x > 0, torch.sqrt(x), 0)` has gradient NaN at x = 0 and at every x < 0, in
float32, float16 and bfloat16 alike.

The fix is the "double where": apply the condition to the argument as well, so that the
unsafe op only ever sees safe values: `torch.where(x > 0, torch.sqrt(torch.where(x > 0, x, 1)),
0)`. Where the condition holds the argument is unchanged, so every selected value is exactly
the same; where it does not, the op sees a harmless filler (1 for `sqrt`, `log`, `rsqrt`,
division and powers; 0 for `acos`/`asin`) whose finite derivative is then multiplied by 0.

The same hazard is written as a patch: `phi = torch.acos(r); phi[r >= 1] = 0` or
`out = hits / counts; out[counts == 0] = 0` replaces the values where the argument left the
domain, but the assignment only cuts the gradient of the replaced entries to 0, and the op's
backward still multiplies that 0 by its inf: NaN. That finding is reported at the op and
names the patch line; it has no automatic fix (guard the argument where it is computed).

Reported only where the condition reads the same variable as the unsafe op's argument (the
condition is evidently the guard); not where the argument is kept in the domain anyway
(`sqrt(x.clamp(min=eps))`, `log(x + eps)`, an inner `where`), nor where no gradient reaches
the op: autograd off (`torch.no_grad()`, `torch.inference_mode()`, a custom
`torch.autograd.Function`, an optimizer's `step`), or an argument that carries none (detached,
a `.grad` tensor, a tensor made without `requires_grad`). Also silent: a condition that
keeps the singular point in the selected branch (`torch.where(c < 50, 5000 / c, ...)`: the inf
at c = 0 is in the value, not hidden in the gradient), a discarded branch filled with NaN or inf
on purpose (`torch.where(p > 0, tp / p, nan)`), operands that are counts of comparisons (no
gradient flows into them), and `torch.where(torch.isfinite(v), v, c)`, which repairs a value
rather than guarding an argument.

**Off by default** (`--select NAN112` or `extend-select` to enable). The pattern is exact, but
whether a gradient flows through it is not visible in the code: on the corpora (transformers,
timm, diffusers, kornia, torchmetrics, ultralytics, accelerate, monai and research repos) 4 of
12 findings were on differentiable paths (a sinc filter, chunked attention accumulation,
torchmetrics' `_safe_divide`), and the other 8 divide metric counts that are never
differentiated. Enable it for model and loss code.
"""
    example = """\
```python
import torch

def safe_norm(v):
    sq = (v * v).sum(-1)
    return torch.where(sq > 0, torch.sqrt(sq), 0.0)
```"""
    use_instead = """\
```python
import torch

def safe_norm(v):
    sq = (v * v).sum(-1)
    return torch.where(sq > 0, torch.sqrt(torch.where(sq > 0, sq, 1)), 0.0)
```"""
    measured = """\
Value and gradient with respect to x, torch 2.13 CPU; the same in float32, float16 and
bfloat16. "fixed" applies the condition to the argument too (filler 1, or 0 for `acos`).

| expression | x | value | gradient | fixed: value, gradient |
|---|---|---|---|---|
| `torch.where(x > 0, torch.sqrt(x), 0)` | -1, 0, 4 | 0, 0, 2 | **NaN, NaN**, 0.25 | 0, 0, 2; 0, 0, 0.25 |
| `torch.where(x > 0, torch.log(x), 0)` | -1, 0, 4 | 0, 0, 1.386 | -0, **NaN**, 0.25 | 0, 0, 1.386; 0, 0, 0.25 |
| `torch.where(x != 0, 1 / x, 0)` | 0, 2 | 0, 0.5 | **NaN**, -0.25 | 0, 0.5; 0, -0.25 |
| `torch.where(x.abs() < 1, torch.acos(x), 0)` | 1, 2, 0.5 | 0, 0, 1.047 | **NaN, NaN**, -1.155 | 0, 0, 1.047; 0, 0, -1.155 |
| `torch.where(x > 0, x ** 0.5, 0)` | -1, 0, 4 | 0, 0, 2 | **NaN, NaN**, 0.25 | 0, 0, 2; 0, 0, 0.25 |
| `torch.where(x > 0, torch.rsqrt(x), 0)` | -1, 0, 4 | 0, 0, 0.5 | **NaN, NaN**, -0.0625 | 0, 0, 0.5; 0, 0, -0.0625 |
| `phi = torch.acos(r) / 3; phi[r <= -1] = pi / 3; phi[r >= 1] = 0` | r = 1, 1.0000001, 0.5, -1 | 0, 0, 0.349, 1.047 | **NaN, NaN**, -0.385, **NaN** | (patch form: no fix) |
| `out = h / c; out[c == 0] = 0` | h = 1, 2; c = 0, 4 | 0, 0.5 | h: **NaN**, 0.25; c: **NaN**, -0.125 | (patch form: no fix) |
"""
    fix_notes = """\
Safe: where the condition selects the branch, the inner `where` passes the argument through
unchanged, so every value `torch.where` returns is bit-for-bit the same; only the gradient at
the discarded points changes, from NaN to 0. The condition is written twice (it is evaluated
twice; hoist it into a variable if it is expensive). The fix is offered where the unsafe op
and the `where` are one expression; where the branch reaches the `where` through a local
variable, the finding comes without a fix.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.where.html",
        "https://github.com/pytorch/pytorch/issues/52248 (NaN gradients through torch.where)",
        "https://jax.readthedocs.io/en/latest/faq.html#gradients-contain-nan-where-using-where",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        parts = _where_parts(ctx, node)
        if parts is None or analysis.no_gradient(ctx, node):
            return
        cond, when_true, when_false, style = parts
        # `torch.where(torch.isfinite(v), v, c)` repairs a value already computed: out of
        # this rule's scope (the condition tests the result, not the op's argument).
        if any(
            masks.torch_call(ctx, n, "isfinite", "isnan", "isinf", "isneginf", "isposinf") is not None
            for n in descendants(cond)
        ):
            return
        cond_names = conditions.names_read(ctx, cond)
        if not cond_names:
            return
        hits: List[Tuple[cst.BaseExpression, str, cst.BaseExpression, bool]] = []
        through_local = False
        for branch, taken_when_true in ((when_true, True), (when_false, False)):
            if repairs.non_finite_on_purpose(when_false if taken_when_true else when_true):
                continue
            candidates = list(analysis.differentiated_nodes(ctx, branch))
            bare = strip_parens(branch)
            value = ctx.value_of(bare)
            if value is not bare:
                candidates += list(analysis.differentiated_nodes(ctx, value))
            for sub in candidates:
                found = _unsafe_operand(ctx, sub)
                if found is None:
                    continue
                what, operand = found
                if guards.kept_in_domain(ctx, operand) or not analysis.backward_reaches(ctx, sub, operand):
                    continue
                if not masks.bounds_operand(ctx, cond, operand):
                    continue
                if not masks.singular_points_discarded(ctx, cond, operand, what, taken_when_true):
                    continue
                local = not contains(branch, sub)
                through_local = through_local or local
                hits.append((operand, what, sub, taken_when_true))
        if not hits:
            return
        what = hits[0][1]
        spelled = {"division": "division", "fractional power": "fractional power"}.get(what, f"`{what}`")
        message = (
            f"`torch.where` picks a branch, but the backward pass differentiates both: where the "
            f"condition discards this {spelled} its derivative is inf or NaN, and 0 * inf is NaN in "
            "the gradient; guard the argument with the same condition (a \"double where\")"
        )
        edits, fixed = self._fix(node, cond, hits, ctx, style)
        if through_local:
            edits = ()
        ctx.report(
            self,
            node,
            message=message,
            edits=edits,
            probe=ctx.expression_probe(ctx.canonical(node), fixed),
        )

    def visit_Assign(self, node: cst.Assign, ctx: FileContext) -> None:
        """The same hazard spelled as a patch: `phi = torch.acos(r); phi[r >= 1] = 0` fixes
        the values where `r` left the domain, but autograd still differentiates `acos` there
        (0 * inf = NaN), as for the discarded branch of a `where`. Reported at the op, once."""
        if len(node.targets) != 1:
            return
        target = strip_parens(node.targets[0].target)
        if not isinstance(target, cst.Subscript) or not isinstance(strip_parens(target.value), cst.Name) \
                or len(target.slice) != 1 or not isinstance(target.slice[0].slice, cst.Index):
            return
        if repairs.non_finite_on_purpose(node.value):  # after the cheap tests: it generates code
            return
        cond = target.slice[0].slice.value
        if not conditions.names_read(ctx, cond):
            return
        patched = strip_parens(target.value)
        computed = ctx.value_of(patched, 1)
        if computed is patched or not any(_unsafe_operand(ctx, sub) for sub in descendants(computed)):
            return  # nothing with a singular derivative: no need to ask the flow about gradients
        if analysis.no_gradient(ctx, patched):
            return
        for sub in analysis.differentiated_nodes(ctx, computed):
            found = _unsafe_operand(ctx, sub)
            if found is None:
                continue
            what, operand = found
            if guards.kept_in_domain(ctx, operand) or not analysis.backward_reaches(ctx, sub, operand):
                continue
            # The patched points are the ones the op's value is discarded at.
            if not masks.bounds_operand(ctx, cond, operand) or not masks.singular_points_discarded(ctx, cond, operand, what, False):
                continue
            if id(sub) in self._patched:
                return
            self._patched.add(id(sub))
            spelled = {"division": "division", "fractional power": "fractional power"}.get(what, f"`{what}`")
            line = ctx.span(node)[0].row
            ctx.report(self, sub, message=(
                f"`{node_code(target)} = ...` (line {line}) replaces this {spelled} where "
                f"`{node_code(strip_parens(cond))}` holds, but the backward pass still differentiates it "
                "there: its derivative is inf or NaN and 0 * inf is NaN in the gradient; guard the "
                "argument itself (clamp it, or a `torch.where` on the argument)"
            ))
            return

    def _fix(self, node, cond, hits, ctx: FileContext, style: str):
        operands = []
        for operand, what, sub, taken_when_true in hits:
            if any(operand is o[0] for o in operands):
                continue
            operands.append((operand, what, taken_when_true))
        # Nested unsafe ops (sqrt(log(x))) would need overlapping edits: no fix there.
        spans = [ctx.span(o[0]) for o in operands if contains(node, o[0])]
        if len(spans) != len(operands):
            return (), None
        for i, a in enumerate(spans):
            for b in spans[i + 1:]:
                if a[0] < b[1] and b[0] < a[1]:
                    return (), None
        if style == "function" and ctx.qualname(node.func) == "torch.where":
            where_text, imports = node_code(node.func), ()
        else:
            where_text, imports = ctx.spell("torch.where")
        cond_text = node_code(strip_parens(cond))
        edits = []
        replacements = {}
        for operand, what, taken_when_true in operands:
            fill = "0" if what in masks.UNIT_DOMAIN_OPS else "1"
            inner = node_code(strip_parens(operand))
            if taken_when_true:
                guarded = f"{where_text}({cond_text}, {inner}, {fill})"
            else:
                guarded = f"{where_text}({cond_text}, {fill}, {inner})"
            edits.append(ctx.replace(operand, guarded))
            replacements[id(operand)] = (cond, operand, fill, taken_when_true)
        fixed_tree = node.visit(_ReplaceOperands(replacements))
        fixed = ctx.canonical(fixed_tree)
        return tuple(edits) + tuple(imports), fixed


class _ReplaceOperands(cst.CSTTransformer):
    """The where call with each unsafe operand wrapped in `torch.where(cond, operand, fill)`."""

    def __init__(self, replacements):
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original, updated):
        found = self.replacements.get(id(original))
        if found is None:
            return updated
        cond, operand, fill, taken_when_true = found
        fill_node = cst.Integer(fill)
        args = [cond, updated, fill_node] if taken_when_true else [cond, fill_node, updated]
        return cst.Call(
            func=cst.Attribute(value=cst.Name("torch"), attr=cst.Name("where")),
            args=[cst.Arg(strip_parens(a)) for a in args],
        )


# --------------------------------------------------------------------------- NAN113


def _selection(ctx: FileContext, node: cst.BaseExpression) -> Optional[Tuple[cst.Subscript, cst.BaseExpression]]:
    """(`x[m]`, m) where `node` is `x[m]` (possibly cast) with a mask index."""
    node = masks.strip_casts(ctx, node)
    if not isinstance(node, cst.Subscript) or len(node.slice) != 1:
        return None
    index = node.slice[0].slice
    if not isinstance(index, cst.Index):
        return None
    if masks.mask_like(ctx, index.value):
        return node, index.value
    return None


def _count_of(ctx: FileContext, node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """m where `node` is `m.sum(...)`, `torch.sum(m, ...)`, `m.float().sum()`, `m.count_nonzero()`."""
    node = strip_parens(node)
    op = ctx.op(node)
    if op is not None and op.name == "sum" and op.args:
        return masks.strip_casts(ctx, op.args[0])
    if masks.torch_call(ctx, node, "count_nonzero") is not None:
        if isinstance(node.func, cst.Attribute) and ctx.qualname(node.func) is None:
            return masks.strip_casts(ctx, node.func.value)
        if node.args:
            return masks.strip_casts(ctx, node.args[0].value)
    return None


def _emptiable(ctx: FileContext, mask: cst.BaseExpression) -> Tuple[str, Tuple[Step, ...]]:
    """(a clause for the message, the evidence) where the mask is a comparison of data made
    here, whose emptiness is a property of the batch; ("", ()) where it comes from elsewhere
    (a latent finding: whether it can be empty is up to the callers)."""
    cond = masks.data_condition(ctx, mask)
    if cond is None:
        return "", ()
    row = ctx.span(cond)[0].row
    tested = " ".join(node_code(cond).split())
    note = f"the mask tests `{tested}`: all False in a batch where nothing satisfies it"
    return f" ({note}, line {row})", (Step(row, note),)


class MaskedMeanEmpty(Rule):
    code = "NAN113"
    kind = "value"
    default_enabled = False
    manifest = (
        "the mask is a comparison of the batch's own data made in the function (`pos = labels > 0`, `valid = target != ignore`): whether it selects anything is up to the batch. A mask that comes in from elsewhere (a parameter, an attribute, a dict lookup) may be non-empty by construction (sequence lengths, attention masks): latent."
    )
    untuned_precision = (
        "Measured earlier by the same claim, on the untuned precision corpus (`benchmarks/precision/`: 86 PyPI packages never used to tune the rules, split by a hash of the package name; every finding read with its function and callers and judged by the project's standard), 3 of 20 on the test split (0 of 6 on the tune split, 0 of 12 before the analysis saw that a validity mask a helper asserts non-empty and a mask of sequence positions built from lengths cannot be empty, and a NaN removed by `nan_to_num` later in the function), below the 90% bar. "
        "The false alarms: masks built from positive lengths in another function or file, tokenizer attention masks, a helper asserting one valid entry, classes from `torch.unique`, an early return when nothing is selected, masks built in `__init__`, and NaN dropped afterwards by `nanmax` or in another function. Turn it on with `--extend-select NAN113` where such values are not in play."
    )
    fails_in = 'all (empty mask)'
    name = "masked-mean-empty"
    message = (
        "Mean over a masked selection that can be empty: when the mask is all False this is "
        "0 / 0 = NaN; divide by the count clamped at 1, or guard with `if mask.any()`"
    )
    fix_applicability = UNSAFE
    fix_title = "Divide by the count clamped at 1"
    triggers = r"\b(mean|sum|count_nonzero)\b"
    summary = "`x[mask].mean()`, `(x * m).sum() / m.sum()`: 0 / 0 = NaN when the mask selects nothing."
    why = """\
A masked mean divides by the number of selected elements. When the mask selects nothing (a
batch with no positive anchors, no valid pixels, no foreground), the sum is 0 and so is the
count: `x[mask].mean()` is the mean of an empty tensor, NaN, and `(x * m).sum() / m.sum()` is
0 / 0, NaN, in every dtype. In the sum-over-count form the gradient is NaN as well (the
division's gradient with respect to the numerator is 1 / 0), and one optimizer step later
every weight is NaN. `x[mask].mean()` of an empty selection has a zero gradient for `x`, but
its NaN value is the loss that gets logged, compared and early-stopped on, and anything it is
multiplied by (a learned loss weight, an uncertainty term) gets a NaN gradient. Empty masks
are rare per batch and near certain over a long training run.

Dividing by the count clamped at 1, `(x * m).sum() / m.sum().clamp(min=1)`, changes nothing
when at least one element is selected (a count of 0/1 values is 0 or at least 1) and gives 0
(with zero gradient) when none is.

Not reported where the code already guards: a count plus an epsilon or clamped
(`m.sum() + eps`, `.clamp(min=1)`, `max(m.sum(), 1)`, `torch.clamp(n, min=1)`), an enclosing
`if mask.any():` / `if num_pos > 0:` / ternary / `torch.where` on the mask or the count, or an
earlier `if not mask.any(): return` (or `continue`, `raise`, `assert`) in the same function; nor
where the mask is evidently all ones. The value-flow analysis adds guards it can prove through
the statements: a count tested against 0 with an early exit (`if n == 0: continue`), a mask
compared with a class taken from `torch.unique(labels)` (every such class occurs), and a mean
over a feature axis of the selected rows (`loss[mask].mean(-1).sum()`: an empty selection
gives an empty result whose sum is 0, not 0 / 0), and a mask of the valid positions of
sequences built from their lengths (`torch.arange(T)[None, :] < lengths[:, None]`,
`length_to_mask(lengths)`, `sequence_mask(lengths)`): a real sequence has at least one
element, so every row keeps its first position (a padding mask, True at the pads, is still
reported). Nor where the function removes the NaN on purpose after the division: the result
is tested or replaced in the next statements, or `nan_to_num` runs later in the function
(also passed as a function, `map(torch.nan_to_num, (a, b))`).
"""
    example = """\
```python
import torch

def masked_l1(pred, target, valid):
    return (pred - target).abs()[valid].mean()

def masked_mse(pred, target, mask):
    return ((pred - target) ** 2 * mask).sum() / mask.sum()
```"""
    use_instead = """\
```python
import torch

def masked_l1(pred, target, valid):
    selected = (pred - target).abs()[valid]
    return selected.sum() / max(selected.numel(), 1)

def masked_mse(pred, target, mask):
    return ((pred - target) ** 2 * mask).sum() / mask.sum().clamp(min=1)
```"""
    measured = """\
torch 2.13 CPU, x = [1, 2, 3] with `requires_grad`; the same in float32, float16 and bfloat16.
"fixed" divides by the count clamped at 1.

| expression | mask | value | gradient of x | fixed: value, gradient |
|---|---|---|---|---|
| `x[m].mean()` | all False | **NaN** | 0, 0, 0 (a weight multiplying it: NaN) | 0; 0, 0, 0 |
| `x[m].mean()` | [1, 0, 1] | 2 | 0.5, 0, 0.5 | 2; 0.5, 0, 0.5 |
| `(x * m).sum() / m.sum()` | all 0 | **NaN** | **NaN, NaN, NaN** | 0; 0, 0, 0 |
| `(x * m).sum() / m.sum()` | [1, 0, 1] | 2 | 0.5, 0, 0.5 | 2; 0.5, 0, 0.5 |
| `(x * m).sum(1) / m.sum(1)`, x of shape (2, 3) | row 0 empty | **[NaN, 2]** | **NaN** in row 0 | [0, 2]; finite |
"""
    fix_notes = """\
Unsafe: the result for an empty mask changes from NaN to 0, which is the point, but it is a
change, and a loss that is 0 for such a batch may call for a different choice (skip the batch,
or return `x.sum() * 0` to keep the graph). For a sum divided by a count, the count is
clamped where it is written (`m.sum()` -> `m.sum().clamp(min=1)`, also where the count is a
local variable holding `m.sum()`). For `x[m].mean()` without a `dim`, the fix divides the sum of
the selection by its own element count, `x[m].sum() / max(x[m].numel(), 1)`: exact for any
shapes of x and m (a mask over the first dimension of a 2-D x selects whole rows), at the cost
of indexing twice. A mean over a `dim` or inside `torch.mean(..., dim)` gets no fix. In
float16 a sum of many large values can overflow where the mean would not; compute in float32
there.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.mean.html",
        "https://pytorch.org/docs/stable/generated/torch.clamp.html",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        op = ctx.op(node)
        if op is None:
            return
        if op.name == "mean" and op.args:
            self._mean(node, op, ctx)
        elif op.name == "div" and len(op.args) == 2 and not op.kwargs:
            self._division(node, op.args[0], op.args[1], ctx)

    def visit_BinaryOperation(self, node: cst.BinaryOperation, ctx: FileContext) -> None:
        if isinstance(node.operator, cst.Divide):
            self._division(node, node.left, node.right, ctx)

    # x[m].mean()
    def _mean(self, node: cst.Call, op, ctx: FileContext) -> None:
        found = _selection(ctx, op.args[0])
        if found is None:
            return
        subscript, mask = found
        if masks.emptiness_expected(ctx, mask) or analysis.nonempty(ctx, mask):
            return
        dim = op.arg(1, "dim")
        if dim is not None and number_value(strip_parens(dim)) not in (None, 0):
            # `loss[mask].mean(-1)`: a mean over the feature axis of each selected row; an
            # empty selection gives an empty result (its sum is 0), not 0 / 0.
            return
        names = conditions.names_read(ctx, mask) | conditions.names_read(ctx, subscript.value, follow=False)
        if conditions.guarded_by_condition(ctx, names) or repairs.repaired_downstream(ctx, node, repairs.NAN):
            return
        edits = ()
        fixed = None
        receiver = op.args[0]
        simple = (
            strip_parens(receiver) is receiver
            and receiver is subscript
            and dotted_name(subscript.value) is not None
            and is_atom(mask)
            and not isinstance(strip_parens(mask), cst.Call)
        )
        if simple and len(op.args) == 1 and not op.kwargs:
            sel = node_code(receiver) if is_atom(receiver) else f"({node_code(receiver)})"
            text = f"{sel}.sum() / max({sel}.numel(), 1)"
            if self._needs_parens(ctx, node):
                text = f"({text})"
            edits = (ctx.replace(node, text),)
        if len(op.args) == 1 and not op.kwargs:
            # The probe checks the same repair even where no edit is offered.
            canon = node_code(ctx.canonical(receiver))
            canon = canon if is_atom(ctx.canonical(receiver)) else f"({canon})"
            fixed = cst.parse_expression(f"{canon}.sum() / max({canon}.numel(), 1)")
        elif len(op.args) + len(op.kwargs) == 2 and number_value(strip_parens(op.arg(1, "dim") or cst.Name("_"))) == 0:
            canon = node_code(ctx.canonical(receiver))
            canon = canon if is_atom(ctx.canonical(receiver)) else f"({canon})"
            fixed = cst.parse_expression(f"{canon}.sum(0) / max({canon}.shape[0], 1)")
        why, evidence = _emptiable(ctx, mask)
        ctx.report(
            self,
            node,
            message=(
                f"Mean over a masked selection that can be empty{why}: when the mask is all False "
                "this is the mean of nothing, NaN; divide the sum by the count clamped at 1, or "
                "guard with `if mask.any()`"
            ),
            edits=edits,
            probe=ctx.expression_probe(ctx.canonical(node), fixed, analysis.mask_inputs(ctx, mask)),
            evidence=evidence,
        )

    # (x * m).sum() / m.sum()
    def _division(self, node, numerator, denominator, ctx: FileContext) -> None:
        count_node = strip_parens(denominator)
        mask = _count_of(ctx, count_node)
        if mask is None and isinstance(count_node, cst.Name):
            value = strip_parens(ctx.value_of(count_node))
            if value is not count_node:
                mask = _count_of(ctx, value)
        if mask is None:
            return
        mask_text = node_code(strip_parens(mask))
        in_numerator = any(
            node_code(masks.strip_casts(ctx, n)) == mask_text
            for n in descendants(numerator)
            if isinstance(n, cst.BaseExpression)
        ) and mask_text != node_code(strip_parens(numerator))
        # A weighted mean (`(x * w).sum() / w.sum()`, a Gaussian kernel) is no masked mean:
        # the mask must be evidently boolean.
        if not masks.mask_like(ctx, mask) or masks.emptiness_expected(ctx, mask):
            return
        numer_value = strip_parens(numerator)
        if isinstance(numer_value, cst.Name):
            numer_value = strip_parens(ctx.value_of(numer_value))
            if not in_numerator:
                in_numerator = any(
                    node_code(masks.strip_casts(ctx, n)) == mask_text
                    for n in descendants(numer_value)
                    if isinstance(n, cst.BaseExpression)
                )
        numer_op = ctx.op(numer_value)
        if not in_numerator and (numer_op is None or numer_op.name not in ("sum", "mul")):
            return
        # `m / m.sum()` normalizes weights; it is no masked mean.
        if node_code(masks.strip_casts(ctx, numerator)) == mask_text:
            return
        if guards.count_kept_positive(ctx, count_node):
            return
        if analysis.nonempty(ctx, mask) or analysis.excludes_zero(ctx, count_node):
            return
        names = conditions.names_read(ctx, mask) | ({count_node.value} if isinstance(count_node, cst.Name) else set())
        if conditions.guarded_by_condition(ctx, names) or repairs.repaired_downstream(ctx, node, repairs.NAN):
            return
        if repairs.repaired_around(ctx):
            return
        clamped = f"{node_code(count_node)}.clamp(min=1)" if is_atom(count_node) else f"({node_code(count_node)}).clamp(min=1)"
        edits = (ctx.replace(denominator, clamped),)
        num_c = node_code(ctx.canonical(numerator))
        den_c = ctx.canonical(denominator)
        den_text = node_code(strip_parens(den_c))
        fixed = cst.parse_expression(f"({num_c}) / ({den_text}).clamp(min=1)")
        why, evidence = _emptiable(ctx, mask)
        ctx.report(
            self,
            node,
            message=(
                f"Masked mean divided by the mask's count{why}: when the mask is all False this is "
                "0 / 0 = NaN (and the gradient NaN); clamp the count at 1, or guard with "
                "`if mask.any()`"
            ),
            edits=edits,
            probe=ctx.expression_probe(ctx.canonical(node), fixed, analysis.mask_inputs(ctx, mask)),
            evidence=evidence,
        )

    @staticmethod
    def _needs_parens(ctx: FileContext, node: cst.CSTNode) -> bool:
        if getattr(node, "lpar", None):
            return False
        parent = ctx.stack[-2] if len(ctx.stack) >= 2 else None
        return isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation, cst.Attribute,
                                   cst.Subscript, cst.Comparison))
