"""NAN109-NAN111, NAN122: norms, normalization and angles written by hand.

`sqrt(sum(x ** 2))` has an infinite derivative where the vector is 0, `x / x.norm(...)` is
0/0 at the zero vector, and `acos` of a cosine similarity is NaN once rounding pushes the
cosine past 1 (and has an infinite derivative at exactly ±1).
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple

import libcst as cst

from .. import analysis
from ..analysis import expansions, guards, repairs
from ..core.context import FileContext, free_inputs, is_atom, node_code, strip_parens
from ..core.ops import Op, number_value
from ..core.diagnostics import Step
from ..analysis.ranges import is_guarded
from .base import SAFE, UNSAFE, Rule
from ..analysis.rewrite import atom_source as _atom_src, follow_local as _follow, operand_key as _key, replace_edit as _edit, source_of as _src

Env = Optional[Dict]


class Found(NamedTuple):
    op: Op
    env: Env
    via_local: bool


def _find(ctx: FileContext, node, names, env: Env = None, via_local: bool = False) -> Optional[Found]:
    if node is None:
        return None
    value, env, via_local = _follow(ctx, strip_parens(node), env, via_local)
    op = ctx.bare_op(value)
    if op is None or op.name not in names:
        return None
    return Found(op, env, via_local)


def _is_true(node: Optional[cst.BaseExpression]) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def _canon(ctx: FileContext, node: cst.BaseExpression, env: Env = None) -> str:
    text = node_code(ctx.canonical(strip_parens(node), env))
    if isinstance(strip_parens(node), cst.Tuple) and not text.startswith("("):
        text = f"({text})"
    return text


# ---------------------------------------------------------------------- NAN109


def _squared(ctx: FileContext, node: cst.BaseExpression, env: Env) -> Optional[Tuple[cst.BaseExpression, Env]]:
    """X where `node` is `X ** 2`, `X.pow(2)`, `torch.square(X)` or `X * X`."""
    node, env, _ = _follow(ctx, strip_parens(node), env, False)
    op = ctx.op(node)
    if op is None:
        return None
    if op.name == "pow" and len(op.args) == 2 and not op.kwargs and number_value(strip_parens(op.args[1])) == 2.0:
        return op.args[0], env
    if op.name == "square" and len(op.args) == 1 and not op.kwargs:
        return op.args[0], env
    if op.name == "mul" and len(op.args) == 2 and not op.kwargs:
        if _key(ctx, op.args[0], env) == _key(ctx, op.args[1], env):
            return op.args[0], env
    return None


def _sum_dims(op: Op) -> Optional[Tuple[Optional[cst.BaseExpression], Optional[cst.BaseExpression]]]:
    if set(op.kwargs) - {"dim", "axis", "keepdim"} or len(op.args) > 3:
        return None
    dim = op.args[1] if len(op.args) > 1 else op.kwargs.get("dim", op.kwargs.get("axis"))
    keepdim = op.args[2] if len(op.args) > 2 else op.kwargs.get("keepdim")
    return dim, keepdim


def _has_free_input(ctx: FileContext, node: cst.BaseExpression, env: Env) -> bool:
    return bool(free_inputs(ctx.canonical(strip_parens(node), env)))


class SqrtOfSumOfSquares(Rule):
    code = "NAN109"
    kind = "form"
    default_enabled = False
    untuned_precision = (
        'Most false alarms are norms no gradient reaches through code the analysis does not '
        'follow: target assignment and anchor matching under a `no_grad` caller in another '
        'module, dataset statistics, metrics and optimizer internals; a few apply to tensors the '
        'rewrite cannot take (KeOps LazyTensors, sparse tensors). Values that are only compared, '
        'used as an index, read as a number or returned `.detach()`ed (also through stacked lists '
        'and a chain of local names: rotation frames built from edge vectors), and values derived '
        'from detached ones by any torch function, are recognised (`analysis/uses.py`, the '
        'flow\'s gradient fact). Turn it on with `--extend-select NAN109` for loss code.'
    )
    fails_in = 'all (gradient at 0)'
    name = "sqrt-of-sum-of-squares"
    message = (
        "Euclidean norm written as `sqrt(sum(x ** 2))`: the derivative of sqrt at 0 is inf, so "
        "the gradient is NaN wherever the vector (or the difference, for a distance) is exactly "
        "0; use `torch.linalg.vector_norm`, whose gradient there is 0"
    )
    fix_applicability = SAFE
    fix_title = "Replace with `torch.linalg.vector_norm`"
    triggers = r"sqrt|\*\*\s*0?\.5|pow\(\s*0?\.5"
    summary = "`sqrt((x ** 2).sum(d))`: NaN gradient at the zero vector (a point's distance to itself)."
    why = """\
`sqrt(s)` has the derivative `1 / (2 * sqrt(s))`, which is `inf` at `s = 0`. For the norm
`sqrt(sum(x ** 2))` the chain rule multiplies that `inf` by the derivative of the sum of
squares, `2 * x`, which is 0 at the zero vector: `inf * 0 = NaN`, and the NaN reaches every
parameter upstream. The zero vector is not exotic: a pairwise distance matrix
`sqrt(((a[:, None] - a[None]) ** 2).sum(-1))` has an exact 0 on its diagonal (each point's
distance to itself), duplicated points, zero padding and dead (all-zero) features give it
too. The forward value is a correct 0, so nothing looks wrong until the weights are NaN.
In float16 the spelled-out form has a second failure: the squares overflow once an entry
exceeds 255.9 (`200 ** 2 * 4` is past 65504), so four entries of 200 give `inf` where the
norm is 400.

`torch.linalg.vector_norm(x, dim=d)` computes the same value and defines its gradient at the
zero vector as 0 (the subgradient), so the NaN never appears. It is the same function in real
arithmetic, with the same `dim` and `keepdim`.

A clamp after the square root does not help: `(x ** 2).sum(-1).sqrt().clamp_min(eps)` still
has a NaN gradient at the zero vector (the clamp passes a gradient of 0, and sqrt's backward
computes 0 / 0). The clamp or epsilon has to go inside the root.

Not reported: guarded forms (`sqrt(s + eps)`, `sqrt(s.clamp(min=eps))`, `(a - b + eps) ** 2`,
whose gradient is finite), and, since the hazard is in the gradient only, norms that no
gradient reaches: code where autograd is off (`torch.no_grad()` / `torch.inference_mode()`
blocks and decorators, a custom `torch.autograd.Function`, an optimizer's `step`), norms of
`.grad`, `.data` or `.detach()` values, of tensors made without `requires_grad`
(`torch.randn(n, d)`, a registered buffer, `torch.from_numpy`) or of values computed under
`no_grad` a few statements earlier, values derived from detached ones by any torch function
(a cross product, `einsum`, `gather` with its index, the pieces of a `chunk`), norms whose
every use ends in `.detach()`, a comparison, an index or `.item()` (also through the lists
given to `torch.stack`/`torch.cat` and a chain of local names: a local frame built from edge
vectors and returned detached), and sums of constants.
A tensor marked `requires_grad` later, or filled in place from one that carries a gradient,
is reported.

Off by default (enable it with `--select NAN109` or `extend-select`): most sums of squares
under a square root in real code are never differentiated (kmeans convergence tests, box
matching, detector post-processing, metrics), and a linter cannot see whether a function is
on a backward path. On the corpus of eight PyTorch libraries and research repositories it
reported 16 places, of which 4 are on a training path (a perceptual loss, a CLIP embedding
norm, a root-sum-of-squares in MRI reconstruction, pairwise distances in a structure module).
Turn it on for model and loss code, where every finding is a real gradient hazard.
"""
    example = """\
```python
import torch

def pairwise_distances(points):
    diff = points[:, None, :] - points[None, :, :]
    return torch.sqrt((diff ** 2).sum(dim=-1))

def lengths(x):
    return x.pow(2).sum(-1, keepdim=True).sqrt()
```"""
    use_instead = """\
```python
import torch

def pairwise_distances(points):
    diff = points[:, None, :] - points[None, :, :]
    return torch.linalg.vector_norm(diff, dim=-1)

def lengths(x):
    return torch.linalg.vector_norm(x, dim=-1, keepdim=True)
```"""
    measured = """\
torch 2.13 on the CPU; gradient of the output's sum.

| expression | input | dtype | value | gradient | `vector_norm` gradient |
|---|---|---|---|---|---|
| `torch.sqrt((x ** 2).sum(-1))` | x = [0, 0, 0] | float32, float16, bfloat16 | 0 | [NaN, NaN, NaN] | [0, 0, 0] |
| `torch.sqrt(((a[:, None] - a[None]) ** 2).sum(-1))` | a: 4 random points in 3-D | float32, float16, bfloat16 | diagonal 0 | all 12 entries of `a.grad` NaN | no NaN |
| `torch.sqrt((x ** 2).sum(-1) + 1e-8)` | x = [0, 0, 0] | float32, bfloat16 | 1e-4 | [0, 0, 0] | |
| `torch.sqrt((x ** 2).sum(-1) + 1e-8)` | x = [0, 0, 0] | float16 | 0 (1e-8 rounds to 0) | [NaN, NaN, NaN] | |
| `torch.sqrt((x ** 2).sum())` | x = [200, 200, 200, 200] | float16 | inf (true 400) | | `vector_norm`: 400 |
| `(x ** 2).sum(-1, keepdim=True).sqrt().clamp_min(1e-8)` | x = [0, 0, 0] | float32 | 1e-8 | [NaN, NaN, NaN] | |
"""
    fix_notes = """\
Safe: `torch.linalg.vector_norm(x, dim=d, keepdim=k)` is the 2-norm, equal to
`sqrt(sum(x ** 2, d))` in real arithmetic; only rounding changes (vector_norm also scales to
avoid overflow of the squares). The `dim` and `keepdim` of the sum are kept as written; a sum
over all elements becomes `vector_norm(x)`. The fix is offered where the whole expression is
written in one place; where the sum is held in a local variable (it may be used elsewhere),
the finding comes without a fix. Sums with `dtype=` are reported without a fix. An epsilon
guard written as a literal below 2.98e-8 (`+ 1e-8`) is 0 in float16 and does not prevent the
NaN there (see the table); this rule stays silent on it, as on any guard."""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.linalg.vector_norm.html",
        "https://github.com/pytorch/pytorch/issues/2421",
    )

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        op = ctx.op(node)
        if op is None or op.kwargs:
            return
        if op.name == "sqrt" and len(op.args) == 1:
            inner = op.args[0]
        elif op.name == "pow" and len(op.args) == 2 and number_value(strip_parens(op.args[1])) == 0.5:
            inner = op.args[0]
        else:
            return
        total = _find(ctx, inner, ("sum",))
        if total is None or not total.op.args:
            return
        squared = _squared(ctx, total.op.args[0], total.env)
        if squared is None:
            return
        x, x_env = squared
        if not _has_free_input(ctx, x, x_env) or analysis.no_gradient(ctx, node):
            return
        if is_guarded(ctx, x, x_env):  # `(x - y + eps) ** 2`: the vector never reaches 0
            return
        dims = _sum_dims(total.op)
        edits = ()
        fixed = None
        if dims is not None:
            dim, keepdim = dims
            canonical = [_canon(ctx, x, x_env)]
            written = [_src(ctx, x)]
            if dim is not None:
                canonical.append(f"dim={_canon(ctx, dim, total.env)}")
                written.append(f"dim={_src(ctx, dim)}")
            if keepdim is not None:
                canonical.append(f"keepdim={_canon(ctx, keepdim, total.env)}")
                written.append(f"keepdim={_src(ctx, keepdim)}")
            fixed = cst.parse_expression(f"torch.linalg.vector_norm({', '.join(canonical)})")
            if not total.via_local and not self._squares_via_local(ctx, total.op.args[0]):
                spelled, imports = ctx.spell("torch.linalg.vector_norm")
                edits = (_edit(ctx, node, f"{spelled}({', '.join(written)})"),) + imports
        ctx.report(self, node, edits=edits, probe=ctx.expression_probe(ctx.canonical(node), fixed))

    @staticmethod
    def _squares_via_local(ctx: FileContext, node: cst.BaseExpression) -> bool:
        """The squared term is a local name (`sq = x ** 2; sq.sum().sqrt()`)."""
        return isinstance(strip_parens(node), cst.Name) and ctx.value_of(strip_parens(node)) is not strip_parens(node)


# ---------------------------------------------------------------------- NAN122


def _sqrt_argument(ctx: FileContext, node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """A where `node` is `sqrt(A)`, `A.sqrt()`, `A ** 0.5` or `A.pow(0.5)`."""
    op = ctx.op(node)
    if op is None or op.kwargs:
        return None
    if op.name == "sqrt" and len(op.args) == 1:
        return op.args[0]
    if op.name == "pow" and len(op.args) == 2 and number_value(strip_parens(op.args[1])) == 0.5:
        return op.args[0]
    return None


class SqrtAtZero(Rule):
    code = "NAN122"
    kind = "value"
    default_enabled = False
    manifest = (
        "the root's argument is clamped at exactly 0 (the clamp says the code expects values below 0 there), or x in `sqrt(x ** 2)` is 0 by construction (a ReLU's output)."
    )
    untuned_precision = (
        "Measured earlier by the same claim, on the untuned precision corpus (`benchmarks/precision/`, `run.py --select ALL`; 86 PyPI packages never used to tune the rules, split by a hash of the package name; every finding read with its function and callers and judged by the project's standard) 0 of 9 findings are real on the tune split and 1 of 9 on the test split (an isotropic Hessian that makes a discriminant exactly 0 in a differentiable Newton step), below the 90% bar. "
        "The tune split's false alarms: per-sample gradient norms built in backward hooks from detached tensors, optimizer internals that run without autograd (a `no_grad` caller in another file, a helper that ends in `detach_()`), and a constant geometry. Turn it on with `--extend-select NAN122` in loss code that clamps a squared distance at 0 before its root."
    )
    fails_in = 'all (gradient at 0)'
    name = "sqrt-at-zero"
    message = (
        "square root of a value that reaches exactly 0: the derivative of sqrt at 0 is inf, so "
        "the gradient is inf or NaN there"
    )
    fix_applicability = SAFE
    fix_title = "Replace `sqrt(x ** 2)` with `torch.abs(x)`"
    triggers = r"sqrt|\*\*\s*0?\.5|pow\(\s*0?\.5"
    summary = "`sqrt(d ** 2)` or `sqrt(x.clamp(min=0))`: infinite or NaN gradient where the argument is exactly 0."
    why = """\
`sqrt(s)` has the derivative `1 / (2 * sqrt(s))`, which is `inf` at `s = 0`. Two spellings
put an exact 0 under the root in normal use:

- `sqrt(d ** 2)` (no sum inside) is `abs(d)` written by hand. Where `d` is 0 (a difference of
  equal values, a prediction equal to its target) the chain rule multiplies sqrt's `inf` by
  the square's derivative `2 * d = 0`: the gradient is NaN, and it reaches every parameter
  upstream. `torch.abs(d)` is the same value and its gradient at 0 is 0.
- `sqrt(x.clamp(min=0))` (also `clamp(0, 1)`, `clamp_min(0)`): the clamp says the author
  expected `x` to round to 0 or below, as a squared distance computed by expansion
  (`|a|^2 + |b|^2 - 2 a.b`, exactly 0 or slightly negative on the diagonal) or `1 - cos ** 2`
  at an aligned pair does. The clamp passes the gradient through where `x` is exactly 0, so
  sqrt's `inf` goes on backwards and turns into NaN in the matrix products before it.

Not reported: a sum of squares under the root (NAN109 reports it), a clamp or an epsilon that
keeps the argument above 0 (`clamp(min=1e-12)`, `+ eps`), `sqrt(relu(x))` (ReLU's backward
selects 0 where its input is not positive, so the `inf` never leaves it), code where
autograd is off (`torch.no_grad()` / `torch.inference_mode()`, a `torch.autograd.Function`,
whose gradient is its own `backward`, an optimizer's `step`), and values no gradient reaches:
read from `.grad`, `.data` or `.detach()` (here or in an earlier statement), made without
`requires_grad`, or turned into numbers at once (`.item()`): the hazard is in the gradient only.

Off by default (enable it with `--select NAN122` or `extend-select`): like NAN109, a linter
cannot see whether a square root is on a backward path, and most clamps at 0 before a root
are in code that is never differentiated. On the untuned precision corpus
(`benchmarks/precision`, 86 PyPI packages) it reported 9 places on the tune split (none on a
training path: per-sample gradient norms, optimizer internals, a sampler) and 9 on the test
split, of which 1 is a real gradient hazard (an isotropic Hessian in a differentiable Newton
step); the others are variances and distances that are 0 only for coincident points, or code
no gradient reaches (acquisition constants, inference-only sparse paths, file writers):
precision 0.11. Turn it on for model and loss code.
"""
    example = """\
```python
import torch

def l1_distance(x, y):
    return torch.sqrt((x - y) ** 2).sum(-1)

def pairwise_distances(a):
    sq = (a ** 2).sum(-1)
    d2 = sq[:, None] + sq[None, :] - 2 * a @ a.T
    return d2.clamp(min=0).sqrt()
```"""
    use_instead = """\
```python
import torch

def l1_distance(x, y):
    return torch.abs(x - y).sum(-1)

def pairwise_distances(a):
    sq = (a ** 2).sum(-1)
    d2 = sq[:, None] + sq[None, :] - 2 * a @ a.T
    return d2.clamp(min=1e-12).sqrt()
```"""
    measured = """\
torch 2.13 on the CPU; gradient of the output's sum.

| expression | input | dtype | value | gradient |
|---|---|---|---|---|
| `torch.sqrt(d ** 2)` | d = [0, 2] | float32, float16, bfloat16 | [0, 2] | [NaN, 1] |
| `torch.abs(d)` | d = [0, 2] | float32, float16, bfloat16 | [0, 2] | [0, 1] |
| `x.clamp(min=0).sqrt()` | x = [-1, 0, 4] | float32, float16, bfloat16 | [0, 0, 2] | [0, inf, 0.25] |
| `x.clamp(min=1e-12).sqrt()` | x = [-1, 0, 4] | float32, bfloat16 | [1e-6, 1e-6, 2] | [0, 0, 0.25] |
| `torch.sqrt((1 - c ** 2).clamp(0, 1))` | c = [1, 0.6] | float32, float16, bfloat16 | [0, 0.8] | [-inf, -0.75] |
| `(sq[:, None] + sq[None] - 2 * a @ a.T).clamp(min=0).sqrt()` | a: 4 random points in 3-D | float32 | diagonal 0 | all 12 entries of `a.grad` NaN |
| `torch.sqrt(torch.relu(x))` | x = [-1, 0, 4] | float32, float16, bfloat16 | [0, 0, 2] | [0, 0, 0.25] (not reported) |
"""
    fix_notes = """\
Safe, for `sqrt(d ** 2)` (also `d.pow(2)`, `torch.square(d)`, `d * d`) written in one place:
`torch.abs(d)` is the same function in real arithmetic and in floating point (the square
can only lose range: `d ** 2` overflows float16 from |d| > 255.9). Its gradient is `sign(d)`,
0 at 0. No fix for a clamp at 0: the right floor (`1e-12`, `1e-8`, `eps ** 2`) depends on the
scale of the values and changes them slightly."""
    references = (
        "https://github.com/pytorch/pytorch/issues/2421",
        "https://pytorch.org/docs/stable/generated/torch.clamp.html",
    )

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        inner = _sqrt_argument(ctx, node)
        if inner is None:
            return
        if _find(ctx, inner, ("sum",)) is not None:
            return  # a sum of squares: NAN109
        squared = _squared(ctx, inner, None)
        if squared is not None:
            x, x_env = squared
            if not _has_free_input(ctx, x, x_env) or analysis.no_gradient(ctx, node):
                return
            if is_guarded(ctx, x, x_env) or analysis.excludes_zero(ctx, x):
                return
            edits = ()
            fixed = cst.parse_expression(f"torch.abs({_canon(ctx, x, x_env)})")
            if ctx.op(strip_parens(inner)) is not None and not isinstance(strip_parens(inner), cst.Name):
                spelled, imports = ctx.spell("torch.abs")
                edits = (_edit(ctx, node, f"{spelled}({_src(ctx, x)})"),) + imports
            message = (
                "`sqrt(x ** 2)` is `abs(x)` with a NaN gradient where x is 0 (sqrt's derivative "
                "there is inf, the square's is 0); use `torch.abs(x)`, whose gradient at 0 is 0"
            )
            # Manifest where the analysis knows x is 0 by construction (a ReLU, a clamp at 0).
            zero = analysis.value(ctx, x).zero
            evidence = (Step(ctx.span(x)[0].row, f"x is {zero}: exactly 0 for some inputs"),) if zero else ()
            ctx.report(self, node, message, edits=edits,
                       probe=ctx.expression_probe(ctx.canonical(node), fixed), evidence=evidence)
            return
        evidence = analysis.clamped_to_zero(ctx, inner)
        if evidence is None:
            return
        if not _has_free_input(ctx, inner, None) or analysis.no_gradient(ctx, node):
            return
        message = (
            f"square root of a value clamped at exactly 0 ({evidence}): where it sits on the "
            "bound the clamp passes the gradient through and sqrt's derivative there is inf, so "
            "the gradient is inf or NaN; clamp to a small positive floor inside the root "
            "(`clamp(min=1e-12)`) or add an epsilon"
        )
        probe = ctx.expression_probe(ctx.canonical(node), None, domains=analysis.input_domains(ctx, node))
        # The clamp is the evidence: the code expects values below 0 there and puts them at 0.
        ctx.report(self, node, message, probe=probe,
                   evidence=(Step(ctx.span(inner)[0].row, f"clamped at exactly 0: {evidence}"),))


class SqrtOfExpandedDistance(Rule):
    code = "NAN125"
    kind = "value"
    default_enabled = False
    fails_in = 'all (equal or nearly equal points)'
    name = "sqrt-of-expanded-distance"
    message = (
        "square root of a squared distance computed by expansion (`|a|^2 + |b|^2 - 2 a.b`): for "
        "equal or nearly equal points the three terms round apart and the sum comes out "
        "slightly negative, so the root is NaN, forward and backward; clamp it first "
        "(`.clamp(min=1e-12)`) or use `torch.cdist`"
    )
    untuned_precision = (
        "Measured earlier by the same claim, on the untuned precision corpus (`benchmarks/precision/`, `run.py --select NAN125`; 86 PyPI packages never used to tune the rules, split by a hash of the package name; every finding read with its function and callers and judged by the project's standard) it reports nothing on the tune split and 2 findings on the test split, both false alarms: a correlated-variance formula `se1 ** 2 + se2 ** 2 - 2 * rho * se1 * se2` (an elementwise product, not a matrix product) whose correlation is clamped below 1, so the sum cannot round below 0. "
        "Written from one real bug (vector-quantize-pytorch's `cdist`, real-bugs tune half). Turn it on with `--extend-select NAN125` where distances are computed by hand."
    )
    triggers = r"sqrt|\*\*\s*0?\.5|pow\(\s*0?\.5"
    summary = "`sqrt(x2 + y2 - 2 * x @ y.T)` with no clamp: NaN wherever two points coincide."
    why = """\
Pairwise distances are often computed by expanding the square, `|a|^2 + |b|^2 - 2 a.b`, so
that the cross term is one matrix product. In real arithmetic the sum is at least 0. In
floating point the three terms are rounded separately, and where the two points are equal or
close (the diagonal of a self-distance matrix, a sample that is also in the codebook, two
duplicate embeddings) the difference of large nearly equal numbers comes out exactly 0 or
slightly negative: -9e-5 for 128-dimensional Gaussian points in float32, -0.25 in float16,
-2 in bfloat16. `sqrt` of a negative number is NaN, in the value and in every gradient that
goes through it.

The rule reports a square root (`sqrt`, `** 0.5`, `.pow(0.5)`) whose argument, written there or
in the local name it reads, is such a sum: two terms that are squared norms (values the
analysis proves nonnegative, or squares written as such, also through `rearrange`,
`unsqueeze`, `view` and sums) and one product of tensors (`@`, `matmul`, `mm`, `bmm`,
`einsum`, a sum of a product) with a negative coefficient. Not reported: a sum the analysis
proves nonnegative (a `clamp(min=...)`, also in place, a `relu`); a clamp at exactly 0 is the
subject of NAN122 (the value is fine there, the gradient at 0 is not).

This is a forward hazard: it is reported whether or not a gradient flows.
"""
    example = """\
```python
import torch

def pairwise_distances(x, y):
    x2 = (x ** 2).sum(-1)
    y2 = (y ** 2).sum(-1)
    d2 = x2[:, None] + y2[None, :] - 2 * x @ y.T
    return d2.sqrt()
```"""
    use_instead = """\
```python
import torch

def pairwise_distances(x, y):
    return torch.cdist(x, y)  # or: d2.clamp(min=1e-12).sqrt()
```"""
    measured = """\
torch 2.13 on the CPU, `a = torch.randn(64, 128)` (seed 0), `d2 = sq[:, None] + sq[None, :] -
2 * a @ a.T` with `sq = (a ** 2).sum(-1)`: the self-distance matrix.

| dtype | diagonal entries below 0 | NaN entries of `d2.sqrt()` | smallest entry |
|---|---|---|---|
| float32 | 15 of 64 | 15 | -9.2e-05 |
| float16 | 2 of 64 | 2 | -0.25 |
| bfloat16 | 1 of 64 | 1 | -2.0 |

`d2.clamp(min=1e-12).sqrt()` on the same points (float32): no NaN in the value or in
`a.grad`.
"""
    fix_notes = """\
No automatic fix: the floor (`1e-12`, `1e-8`, `eps ** 2`) depends on the scale of the points
and changes the smallest distances, and `torch.cdist` may be faster or slower than the
expansion depending on the shapes. `clamp(min=0)` alone fixes the value but leaves an
infinite gradient at the clamped entries (NAN122)."""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.cdist.html",
        "https://github.com/open-mmlab/mmcv/issues/2178",
    )

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        inner = _sqrt_argument(ctx, node)
        if inner is None:
            return
        evidence = expansions.squared_distance_by_expansion(ctx, inner)
        if evidence is None:
            return
        message = (
            f"square root of a squared distance computed by expansion ({evidence}): for equal "
            "or nearly equal points the terms round apart and the sum comes out slightly "
            "negative, so the root is NaN, forward and backward; clamp it first "
            "(`.clamp(min=1e-12)`) or use `torch.cdist`"
        )
        # No fix to check (the floor is the author's choice); the probe runs the original.
        ctx.report(self, node, message, probe=ctx.expression_probe(ctx.canonical(node), None))


# ---------------------------------------------------------------------- NAN110


def _two_norm(ctx: FileContext, op: Op) -> bool:
    """True where a norm call computes the 2-norm of vectors (p / ord absent or 2)."""
    if op.name == "norm":
        p = op.args[1] if len(op.args) > 1 else op.kwargs.get("p")
    elif op.name == "linalg_norm":
        p = op.args[1] if len(op.args) > 1 else op.kwargs.get("ord")
    else:  # vector_norm
        p = op.args[1] if len(op.args) > 1 else op.kwargs.get("ord")
    if p is None:
        return True
    p = strip_parens(p)
    if number_value(p) == 2.0:
        return True
    return isinstance(p, cst.SimpleString) and p.evaluated_value == "fro" and op.name == "norm"


def _norm_dims(op: Op) -> Tuple[Optional[cst.BaseExpression], Optional[cst.BaseExpression], bool]:
    """(dim, keepdim, known) of a norm call; known is False for arguments not understood."""
    allowed = {"p", "ord", "dim", "keepdim"}
    if set(op.kwargs) - allowed or len(op.args) > 4:
        return None, None, False
    dim = op.args[2] if len(op.args) > 2 else op.kwargs.get("dim")
    keepdim = op.args[3] if len(op.args) > 3 else op.kwargs.get("keepdim")
    return dim, keepdim, True


def _broadcast_of(ctx: FileContext, node: cst.BaseExpression) -> cst.BaseExpression:
    """The norm inside `n[:, None]` or `n.unsqueeze(-1)` (the keepdim of old code), else
    `node` itself."""
    bare = strip_parens(node)
    if isinstance(bare, cst.Subscript) and any(
        isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name) and e.slice.value.value == "None"
        for e in bare.slice
    ) and all(
        isinstance(e.slice, cst.Slice)
        or (isinstance(e.slice, cst.Index) and isinstance(e.slice.value, (cst.Name, cst.Ellipsis))
            and (not isinstance(e.slice.value, cst.Name) or e.slice.value.value == "None"))
        for e in bare.slice
    ):
        return bare.value
    if isinstance(bare, cst.Call) and isinstance(bare.func, cst.Attribute) and bare.func.attr.value == "unsqueeze":
        return bare.func.value
    return node


class NormalizeByHand(Rule):
    code = "NAN110"
    kind = "value"
    default_enabled = False
    manifest = (
        "the vector is a ReLU's or a `clamp(min=0)` output, all 0 for some inputs; a difference or a data vector needs data that is exactly 0: latent."
    )
    untuned_precision = (
        "Measured earlier by the same claim, on the untuned precision corpus (`benchmarks/precision/`: 86 PyPI packages never used to tune the rules, split by a hash of the package name; every finding read with its function and callers and judged by the project's standard), 0 of 18 on the test split (0 of 8 on the tune split), below the 90% bar. "
        "The false alarms: random Gaussian vectors, learned parameters and embeddings, displacements between distinct atoms, quaternions, rows made non-zero by `x[x == 0] = eps`, and inverse-iteration vectors: vectors that are zero only by a coincidence of learned or random values. Turn it on with `--extend-select NAN110` where such values are not in play."
    )
    fails_in = 'all (0/0 at the zero vector)'
    name = "normalize-by-hand"
    message = (
        "Vector normalized by hand with `x / x.norm(...)`: at the zero vector this is 0/0 = NaN "
        "in the output and the gradient; use `F.normalize(x, dim=...)`, which divides by "
        "max(norm, eps) (in float16 its eps=1e-12 is 0: normalize in float32 there)"
    )
    fix_applicability = UNSAFE
    fix_title = "Replace with `F.normalize`"
    triggers = r"norm"
    summary = "`x / x.norm(dim=d, keepdim=True)`: 0/0 = NaN at the zero vector."
    why = """\
Dividing a vector by its own 2-norm is 0/0 when the vector is exactly 0: every entry of the
result is NaN, and so is the gradient of everything it feeds. All-zero vectors occur in
real data: zero padding, masked tokens, a feature map after ReLU that is dead for one
sample, an embedding row that was never trained, the difference of two equal points.

`torch.nn.functional.normalize(x, dim=d)` divides by `max(norm, eps)` with `eps=1e-12`: the
zero vector maps to the zero vector and the gradient stays finite (1e12 per entry in float32).
Elsewhere it is the same computation, except for vectors whose norm is below `eps`, which it
scales by `1/eps` instead of normalizing.

In float16 `eps=1e-12` rounds to 0 (every number below 2.98e-8 does), so `F.normalize` of a
float16 zero vector is 0/0 = NaN just like the hand-written form (measured below). For float16
tensors normalize in float32 (`F.normalize(x.float(), dim=-1).to(x.dtype)`) or pass an
epsilon that float16 can hold (`eps=torch.finfo(x.dtype).tiny`, 6.1e-5). bfloat16 has
float32's range and is safe with the default eps.

Not reported: guarded divisions (`x / (x.norm(...) + eps)`, `x.norm(...).clamp(min=eps)`,
`torch.maximum(n, eps)`, a norm variable changed in place as in `n[n == 0] = 1`), results
checked with `isfinite`/`nan_to_num` right after, and whole-tensor normalization
`x / x.norm()` with no `dim`. This is a forward hazard, so it is reported inside
`torch.no_grad()` too.

Learned vectors are not reported: the output of a linear layer or of a model, a parameter
(`nn.Parameter(torch.randn(...))`), a sum of those, as in CLIP-style heads
(`e = self.proj(x); e / e.norm(dim=-1, keepdim=True)`), nor Gaussian draws
(`v = torch.randn(n, 3); v / v.norm(dim=-1, keepdim=True)`, random axes and directions). They
are exactly 0 only by a freak of training or a coincidence of every coordinate, and a rule
that reports every such head teaches users to turn it off. A
difference of learned vectors, a count or bag-of-words vector, a mask or a padding row is
still reported. The broadcast spellings of `keepdim` (`x.norm(dim=1)[:, None]`,
`.unsqueeze(-1)`) are matched too (without a fix).
"""
    example = """\
```python
import torch

def unit_rows(embeddings):
    return embeddings / embeddings.norm(dim=-1, keepdim=True)

def unit_directions(v):
    return v / torch.linalg.norm(v, dim=1, keepdim=True)
```"""
    use_instead = """\
```python
import torch
import torch.nn.functional as F

def unit_rows(embeddings):
    return F.normalize(embeddings, dim=-1)

def unit_directions(v):
    return F.normalize(v, dim=1)
```

For float16 inputs: `F.normalize(embeddings.float(), dim=-1).to(embeddings.dtype)`.
"""
    measured = """\
torch 2.13 on the CPU; `x` is two rows of three zeros, normalized along the last dimension;
gradient of the output's sum.

| dtype | `x / x.norm(dim=-1, keepdim=True)` | gradient | `F.normalize(x, dim=-1)` | gradient |
|---|---|---|---|---|
| float32 | [NaN, NaN, NaN] | [NaN, NaN, NaN] | [0, 0, 0] | [1e12, 1e12, 1e12] |
| bfloat16 | [NaN, NaN, NaN] | [NaN, NaN, NaN] | [0, 0, 0] | [9.96e11, 9.96e11, 9.96e11] |
| float16 | [NaN, NaN, NaN] | [NaN, NaN, NaN] | [NaN, NaN, NaN] (eps 1e-12 is 0 in float16) | [NaN, NaN, NaN] |
| float16, `F.normalize(x.float(), dim=-1).to(x.dtype)` | | | [0, 0, 0] | |

For a vector of three entries 1e-4 (norm 1.7e-4) both forms agree in all three dtypes (0.577
in float32, 0.5776 in float16, 0.578 in bfloat16). Vectors that are tiny but not zero fail
too: for four entries of 1e-23 in float32 or bfloat16, `x.norm()` underflows to 0 (the
squares are below the smallest subnormal) and `x / x.norm(dim=-1, keepdim=True)` is
[inf, inf, inf, inf] where the true value is 0.5 each; `F.normalize` gives 1e-11 each
(finite, though not a unit vector).
"""
    fix_notes = """\
Unsafe: `F.normalize` divides by `max(norm, 1e-12)`, which differs from `x / norm` for vectors
whose norm is below 1e-12 (including the zero vector, which is the point). The fix is
offered where the norm keeps its dimension (`keepdim=True`) along one `dim`, with `p` /
`ord` absent or 2, and the norm is computed in the same expression; the `dim` is kept as
written. `x / x.norm(dim=d)` without `keepdim`, and norms held in a local variable (which may
be used elsewhere), are reported without a fix. In float16 the fix still gives NaN at the
zero vector (eps is 0 there): compute the normalization in float32, or pass
`eps=torch.finfo(x.dtype).tiny`."""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.functional.normalize.html",
        "https://pytorch.org/docs/stable/generated/torch.linalg.vector_norm.html",
    )

    def check_expression(self, node: cst.BaseExpression, ctx: FileContext) -> None:
        op = ctx.op(node)
        if op is None or op.name != "div" or len(op.args) != 2 or op.kwargs:
            return
        numerator, denominator = op.args
        norm = _find(ctx, _broadcast_of(ctx, denominator), ("norm", "linalg_norm", "vector_norm"))
        if norm is None or not norm.op.args or not _two_norm(ctx, norm.op):
            return
        if _key(ctx, numerator, None) != _key(ctx, norm.op.args[0], norm.env):
            return
        dim, keepdim, known = _norm_dims(norm.op)
        if not known or dim is None or (isinstance(dim, cst.Name) and dim.value == "None"):
            return
        held = strip_parens(denominator)
        if isinstance(held, cst.Name) and guards.changed_in_place(ctx, held.value):
            return
        if repairs.repaired_after(ctx, repairs.NAN) or guards.inside_zero_test(ctx, node, denominator):
            return
        if guards.nonzero_by_construction(ctx, numerator):
            return
        if analysis.value(ctx, numerator).learned:
            # A learned embedding or weight (a linear layer's output, a parameter) or a
            # Gaussian draw normalized by its own norm: exactly 0 only by a freak of training
            # or of chance; a difference, a count or a mask still reports.
            return
        single = not isinstance(strip_parens(dim), (cst.Tuple, cst.List))
        edits = ()
        fixed = None
        if single and _is_true(keepdim):
            fixed = cst.parse_expression(
                f"torch.nn.functional.normalize({_canon(ctx, numerator)}, dim={_canon(ctx, dim, norm.env)})"
            )
            if not norm.via_local:
                spelled, imports = ctx.spell("torch.nn.functional.normalize")
                text = f"{spelled}({_src(ctx, numerator)}, dim={_src(ctx, dim)})"
                edits = (_edit(ctx, node, text),) + imports
        # Manifest where the vector is 0 by construction for some inputs (a ReLU's output,
        # every entry negative); a difference or a mask needs data that makes it 0: latent.
        zero = analysis.value(ctx, numerator).zero
        evidence = (Step(ctx.span(numerator)[0].row, f"the vector is {zero}: all 0 for some inputs"),) \
            if zero in ("a ReLU output", "clamp(min=0)") else ()
        ctx.report(self, node, edits=edits, probe=ctx.expression_probe(ctx.canonical(node), fixed),
                   evidence=evidence)


# ---------------------------------------------------------------------- NAN111


class AcosWithoutClamp(Rule):
    code = "NAN111"
    kind = "value"
    default_enabled = False
    untuned_precision = (
        "Measured earlier by the same claim, on code the rule was not tuned on, judged by the project's standard (the test split of the untuned precision corpus, `benchmarks/precision/`, and research repositories judged blind: every file of the 44 real-bugs test-half repositories, and the test half of 122 repositories in no benchmark, split by a hash of the repository name before any finding was read; `benchmarks/precision/README.md`), 1 of 4 findings were real hazards (research repositories: 1 of 4, an unclamped `acos` of a dot product over norms in a line detector; the corpus had none), below the 90% bar. The false alarms: spherical interpolations between two independent Gaussian latents in public functions of a package (the analysis trusts their call sites only for scripts and helpers the file alone calls). Turn it on with `--extend-select NAN111` where the vectors can be equal or nearly parallel."
    )
    fails_in = 'all (gradient at ±1; forward when rounding passes 1)'
    name = "acos-without-clamp"
    message = (
        "`acos` of a cosine similarity with no clamp: rounding makes the cosine of two equal "
        "vectors exceed 1 (NaN forward), and at exactly ±1 the gradient is inf; clamp the "
        "argument to ±(1 - torch.finfo(dtype).eps)"
    )
    fix_applicability = UNSAFE
    fix_title = "Clamp the argument to ±(1 - finfo(dtype).eps)"
    triggers = r"\b(acos|arccos|asin|arcsin)\b"
    summary = "`acos(cosine_similarity(a, b))` unclamped: NaN once rounding pushes the cosine past ±1, inf gradient at ±1."
    why = """\
A cosine similarity is 1 for parallel vectors in real arithmetic, but the computed value is
rounded, and for a vector compared with itself it comes out above 1 about as often as not:
`F.cosine_similarity(v, v)` exceeded 1 for 21.7% of random 64-dimensional vectors in float32
(largest 1.00000024), 15.1% in float16 (1.00098) and 16.8% in bfloat16 (1.0078) (measured
below). `acos` and `asin` are only defined on [-1, 1]: outside it they return NaN. At exactly
±1 the value is defined, but the derivative `-1 / sqrt(1 - c ** 2)` is infinite, so the
gradient is inf, or NaN once multiplied by 0. Angular losses, geodesic distances on the
sphere and "angle between embeddings" metrics compute exactly this, and identical or
near-identical pairs (a sample compared with itself, a collapsed embedding) are common.

Clamping the cosine to `[-1 + eps, 1 - eps]` with `eps = torch.finfo(c.dtype).eps` keeps the
forward value finite and the derivative bounded (the clamp passes a gradient of 0 where it
is active). An alternative with no clamp is the atan2 form of the angle,
`torch.atan2(torch.linalg.vector_norm(torch.cross(a, b, dim=-1), dim=-1), (a * b).sum(-1))`
for 3-D vectors.

The rule reports only arguments that are evidently cosines: `F.cosine_similarity`, the sum
of products of two normalized vectors (`F.normalize` or `x / x.norm(...)` outputs), a
matrix product of normalized embeddings, and a dot product divided by norms
(`(a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))`, `torch.dot(a, b) / a.norm() / b.norm()`,
an `einsum` over a norm). `acos` of anything else is not reported, and a
clamped argument (`c.clamp(-1, 1)`, `torch.clamp(c, -1 + eps, 1 - eps)`) is not either. The
forward NaN does not depend on gradients, so the rule also reports inside `torch.no_grad()`.

The cosine may be built in other statements and functions: `cos = (unit(a) *
unit(b)).sum(-1)` with `unit` returning `F.normalize(...)` is a dot product of unit vectors,
which rounding takes past ±1 just the same.

Not reported: the cosine of two independent Gaussian draws (`z0, z1 =
torch.randn(2 * n, d).chunk(2)`, or two `torch.randn` calls, then a spherical interpolation
between them): it is concentrated around 0 with a spread of 1/sqrt(d) and does not come near
±1. The draws must reach the `acos` through the file's own code (a script, or a helper whose
every call the file makes); a public function of a package may be called with anything. A
draw against a perturbation of itself (`z + 1e-3 * torch.randn(...)`) is still reported. The
slerp of StyleGAN2-ADA's path-length metric (a tuning repository) is this shape, but its
`slerp` is a public function of a package module, so it is still reported.
"""
    example = """\
```python
import torch
import torch.nn.functional as F

def angle(a, b):
    cos = F.cosine_similarity(a, b, dim=-1)
    return torch.acos(cos)
```"""
    use_instead = """\
```python
import torch
import torch.nn.functional as F

def angle(a, b):
    cos = F.cosine_similarity(a, b, dim=-1)
    return torch.acos(cos.clamp(-1 + torch.finfo(cos.dtype).eps, 1 - torch.finfo(cos.dtype).eps))
```"""
    measured = """\
torch 2.13 on the CPU. "> 1" is the share of 10,000 random 64-dimensional vectors `v` for
which the cosine of `v` with itself rounds above 1 (and `acos` is NaN).

| cosine | dtype | > 1 | largest | `acos` NaN |
|---|---|---|---|---|
| `F.cosine_similarity(v, v, dim=-1)` | float32 | 21.7% | 1.00000024 | 21.7% |
| `F.cosine_similarity(v, v, dim=-1)` | float16 | 15.1% | 1.00098 | 15.1% |
| `F.cosine_similarity(v, v, dim=-1)` | bfloat16 | 16.8% | 1.0078 | 16.8% |
| `(u * u).sum(-1)`, u = `F.normalize(v)` in float32, then cast | float32 | 21.7% | 1.00000024 | 21.7% |
| same | float16 | 0.04% | 1.00098 | 0.04% |
| same | bfloat16 | 0.16% | 1.0078 | 0.16% |

Gradients: `torch.acos(c)` at c = 1 has gradient -inf in all three dtypes, and
`torch.acos(c) * 0` gradient NaN. The gradient of `torch.acos(F.cosine_similarity(a, a.detach()))`
with respect to `a` was NaN for 66% (float32), 71% (float16) and 72% (bfloat16) of 1,000
random rows. With the clamp to ±(1 − eps): no NaN or inf gradient in any row; `acos` of the
clamped 1 is 4.9e-4 (float32), 0.044 (float16), 0.125 (bfloat16).
"""
    fix_notes = """\
Unsafe: the clamp changes the result for cosines within eps of ±1 (the angle of two equal
vectors becomes 4.9e-4 rad in float32, 0.044 in float16 and 0.125 in bfloat16 instead of 0)
and passes a zero gradient there. The fix is written only where the argument is short (a
name, an attribute, or a `cosine_similarity` call whose first input is a name, which
provides the dtype): `torch.acos(cos)` ->
`torch.acos(cos.clamp(-1 + torch.finfo(cos.dtype).eps, 1 - torch.finfo(cos.dtype).eps))`.
Longer arguments are reported without a fix: write the cosine into a variable and clamp it.
Where the exact 0 angle matters, use the atan2 form."""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.acos.html",
        "https://pytorch.org/docs/stable/generated/torch.nn.functional.cosine_similarity.html",
        "https://github.com/pytorch/pytorch/issues/8069",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        op = ctx.bare_op(node)
        if op is None or op.name not in ("acos", "asin") or len(op.args) != 1 or op.kwargs:
            return
        arg = op.args[0]
        flow = analysis.value(ctx, arg)
        if not flow.cosine or flow.apart:
            return
        source = f"a cosine ({analysis.cite(ctx, flow)})"
        spelled = op.name if op.style == "method" else node_code(node.func)
        message = f"`{spelled}` of {source} with no clamp: " + self.message.split(": ", 1)[1]
        witness = self._witness(ctx, arg)
        edits = ()
        canonical_arg = node_code(ctx.canonical(strip_parens(arg)))
        if not is_atom(ctx.canonical(strip_parens(arg))):
            canonical_arg = f"({canonical_arg})"
        function = "torch.acos" if op.name == "acos" else "torch.asin"
        original = cst.parse_expression(f"{function}({canonical_arg})")
        fixed = None
        if witness is not None:
            w = _src(ctx, witness)
            finfo, imports = ctx.spell("torch.finfo")
            bounds = f"-1 + {finfo}({w}.dtype).eps, 1 - {finfo}({w}.dtype).eps"
            clamped = f"{_atom_src(ctx, arg)}.clamp({bounds})"
            if op.style == "method":
                text = f"{clamped}.{node.func.attr.value}()"
            else:
                text = f"{node_code(node.func)}({clamped})"
            edits = (ctx.replace(node, text),) + imports
            cw = node_code(ctx.canonical(strip_parens(witness)))
            fixed = cst.parse_expression(
                f"{function}({canonical_arg}.clamp(-1 + torch.finfo({cw}.dtype).eps, "
                f"1 - torch.finfo({cw}.dtype).eps))"
            )
        ctx.report(self, node, message=message, edits=edits, probe=ctx.expression_probe(original, fixed))

    @staticmethod
    def _witness(ctx: FileContext, arg: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        """A name with the cosine's dtype, where the argument is short enough to clamp in
        place: the argument itself (a name or attribute chain), or the first input of a
        `cosine_similarity` call or of an `nn.CosineSimilarity` module's call
        (`cos(a, b)`), when that is a name."""
        arg = strip_parens(arg)
        if isinstance(arg, cst.Name):
            return arg
        if isinstance(arg, cst.Attribute) and ctx.qualname(arg) is None:
            return arg
        op = ctx.bare_op(arg)
        if op is not None and op.name == "cosine_similarity" and op.args:
            first = strip_parens(op.args[0])
        elif op is None and isinstance(arg, cst.Call) and arg.args and arg.args[0].keyword is None:
            first = strip_parens(arg.args[0].value)  # the caller checked it is a cosine
        else:
            return None
        return first if isinstance(first, cst.Name) else None
