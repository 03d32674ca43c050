"""NAN202-NAN204: constants that half precision cannot hold, and -inf masks.

- NAN202 vanishing-epsilon: an epsilon literal at or below 2**-25 used as a guard
  (`log(x + 1e-10)`, `x / n.clamp(min=1e-12)`, `torch.logit(p, eps=1e-8)`) in code that runs
  in float16: the literal rounds to 0 and the guard does nothing.
- NAN203 masked-fill-overflow: `masked_fill(mask, -1e9)` / `torch.where(mask, x, -1e9)` on
  a tensor that may be float16: the fill raises (masked_fill) or becomes -inf (where).
- NAN204 fully-masked-softmax: `softmax(scores.masked_fill(mask, float("-inf")))`: a row
  whose every entry is masked is NaN.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import libcst as cst

from .. import analysis
from ..analysis import conditions, masks, repairs
from ..analysis.dtypes import float16_reason
from ..core.context import FileContext, dotted_name, free_inputs, is_atom, node_code, strip_parens
from ..core.ops import number_value, split_args
from ..core.diagnostics import Step
from ..analysis.ranges import FP16_ROUNDS_TO_ZERO, dtype_witness, pass_through
from .base import UNSAFE, Rule

FP16_MAX = 65504.0


# Consumers that need their argument away from 0: what a vanishing epsilon was guarding.
_UNARY_CONSUMERS = {
    "torch.log": "log", "torch.log2": "log2", "torch.log10": "log10", "torch.sqrt": "sqrt",
    "torch.rsqrt": "rsqrt", "torch.reciprocal": "reciprocal",
}
_UNARY_METHODS = {"log", "log2", "log10", "sqrt", "rsqrt", "reciprocal"}
# Functions taking an `eps=` they use as a guard (normalize/cosine_similarity clamp a norm
# from below; logit clamps p to [eps, 1 - eps]).
_EPS_FUNCTIONS = {
    "torch.nn.functional.normalize": "normalize",
    "torch.nn.functional.cosine_similarity": "cosine_similarity",
    "torch.logit": "logit",
    "torch.special.logit": "logit",
}
# Under CUDA autocast these run in float32 whatever their input: their eps is then safe.
_AUTOCAST_FP32 = {"normalize", "cosine_similarity"}

_INF_NAMES = {"math.inf", "torch.inf", "numpy.inf", "np.inf", "float.inf"}


# --------------------------------------------------------------------------- helpers


def _parent_expr(ctx: FileContext, node: cst.CSTNode) -> Tuple[Optional[cst.CSTNode], Optional[cst.CSTNode]]:
    """The nearest enclosing expression of `node` (skipping Arg wrappers), and the child of it
    on the path to `node`."""
    stack = ctx.stack
    try:
        i = len(stack) - 1 - stack[::-1].index(node)
    except ValueError:
        return None, None
    child = node
    for j in range(i - 1, -1, -1):
        parent = stack[j]
        if isinstance(parent, cst.Arg):
            child = parent
            continue
        return parent, child
    return None, None


def _arg_value(child: cst.CSTNode) -> cst.CSTNode:
    return child.value if isinstance(child, cst.Arg) else child


def _consumer(ctx: FileContext, guarded: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The expression that needed `guarded` away from 0: `log(guarded)`, `sqrt`, `rsqrt`,
    `reciprocal` of it, or a division by it. None when not visible in the same expression."""
    parent, child = _parent_expr(ctx, guarded)
    if parent is None:
        return None
    if isinstance(parent, cst.BinaryOperation):
        if isinstance(parent.operator, cst.Divide) and parent.right is guarded:
            return parent
        if isinstance(parent.operator, cst.Power) and parent.left is guarded:
            exponent = number_value(strip_parens(parent.right))
            if exponent is not None and exponent < 0:
                return parent
        return None
    if isinstance(parent, cst.Call):
        if parent.func is guarded:
            return None
        full = ctx.qualname(parent.func)
        value = _arg_value(child)
        if full in _UNARY_CONSUMERS and parent.args and parent.args[0].value is value:
            return parent
        if full in ("torch.div", "torch.true_divide") and len(parent.args) >= 2 and parent.args[1].value is value:
            return parent
        return None
    if isinstance(parent, cst.Attribute) and parent.value is guarded:
        # `(x + eps).log()`: the call around the attribute.
        call, _ = _parent_expr(ctx, parent)
        if isinstance(call, cst.Call) and call.func is parent and not call.args:
            if parent.attr.value in _UNARY_METHODS:
                return call
    return None


# sqrt: gradient 0.5/sqrt(eps) <= 65504; rsqrt: 1/sqrt(eps) <= 65504.
_SQRT_EPS_FLOOR = {"sqrt": 5.83e-11, "rsqrt": 2.34e-10}


_LOG_KINDS = ("log", "log2", "log10")


def _consumer_words(ctx: FileContext, consumer: cst.BaseExpression) -> str:
    """The consumer as a message names it: its code where short, else what it does."""
    code = node_code(consumer)
    if len(code) <= 60 and "\n" not in code:
        return f"`{code}`"
    if isinstance(consumer, cst.BinaryOperation):
        return "the power" if isinstance(consumer.operator, cst.Power) else "the division"
    kind = _consumer_kind(ctx, consumer)
    return f"the `{kind}`" if kind else "the division"


def _consumer_kind(ctx: FileContext, consumer: cst.BaseExpression) -> Optional[str]:
    if isinstance(consumer, cst.Call):
        full = ctx.qualname(consumer.func)
        if full in _UNARY_CONSUMERS:
            return _UNARY_CONSUMERS[full]
        if full in _EPS_FUNCTIONS:
            return _EPS_FUNCTIONS[full]
        if isinstance(consumer.func, cst.Attribute) and full is None:
            return consumer.func.attr.value
    return None


def _tiny_literal(node: Optional[cst.BaseExpression]) -> Optional[float]:
    if node is None:
        return None
    value = number_value(strip_parens(node))
    if value is not None and 0 < value <= FP16_ROUNDS_TO_ZERO:
        return value
    return None


def _float_string(ctx: FileContext, node: cst.BaseExpression) -> Optional[float]:
    """`float("-1e9")`, `float('-inf')` -> the float; else None."""
    node = strip_parens(node)
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value == "float"
        and len(node.args) == 1
        and isinstance(node.args[0].value, cst.SimpleString)
    ):
        try:
            return float(node.args[0].value.evaluated_value)
        except (ValueError, TypeError):
            return None
    return None


def constant_value(ctx: FileContext, node: cst.BaseExpression, depth: int = 3) -> Optional[float]:
    """A numeric constant written here or held by a local/module name: `-1e9`, `float("-inf")`,
    `-float("inf")`, `-math.inf`, `NEG_INF` (= one of those)."""
    if depth <= 0:
        return None
    node = strip_parens(node)
    value = number_value(node)
    if value is not None:
        return value
    value = _float_string(ctx, node)
    if value is not None:
        return value
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = constant_value(ctx, node.expression, depth - 1)
        return -inner if inner is not None else None
    full = ctx.qualname(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
    if full in _INF_NAMES or (isinstance(node, cst.Attribute) and dotted_name(node) in _INF_NAMES):
        return float("inf")
    if isinstance(node, cst.Name):
        value_node = ctx.value_of(node)
        if value_node is not node and value_node is not None:
            return constant_value(ctx, value_node, depth - 1)
        held = ctx.constant(node.value)
        if held is None and node.value not in ctx.scope.bindings and ctx.scopes:
            # A module constant (`NEG_INF = float("-inf")`) not shadowed here.
            module = ctx.scopes[0].bindings.get(node.value)
            if module is not None and module.value is not None:
                return constant_value(ctx, module.value, depth - 1)
        return held
    return None


def _finfo_text(ctx: FileContext, witness: cst.BaseExpression, attr: str):
    finfo, imports = ctx.spell("torch.finfo")
    return f"{finfo}({node_code(strip_parens(witness))}.dtype).{attr}", imports


def _finfo_canonical(ctx: FileContext, witness: cst.BaseExpression, attr: str,
                     inline: bool = True) -> cst.BaseExpression:
    text = node_code(ctx.canonical(strip_parens(witness), inline=inline))
    return cst.parse_expression(f"torch.finfo({text}.dtype).{attr}")


def _probe_pair(ctx: FileContext, whole: cst.BaseExpression, part: cst.BaseExpression,
                replacement: Optional[cst.BaseExpression], inline: bool = True,
                domains: Optional[Dict[str, Tuple[float, float]]] = None):
    original = ctx.canonical(whole, inline=inline)
    if replacement is None:
        return ctx.expression_probe(original, None, domains)
    fixed_tree = whole.deep_replace(part, replacement)
    fixed = ctx.canonical(fixed_tree, inline=inline)
    return ctx.expression_probe(original, fixed, domains)


# --------------------------------------------------------------------------- NAN202


class VanishingEpsilon(Rule):
    code = "NAN202"
    kind = "value"
    default_enabled = False
    manifest = (
        "the float16 path is evident, and it is named (a `.half()` model, a float16 autocast region's matmul output, a project that trains in float16): every finding of this rule has one (it reports only there)."
    )
    untuned_precision = (
        "Measured earlier by the same claim, on code the rule was not tuned on, judged blind by the project's standard (`benchmarks/precision/README.md`: the test halves of research repositories in no benchmark, batches 1 to 9, each split and fixed before any finding was read), 1 of 4 findings were real hazards, below the 90% bar; every finding on the tune halves (4) was a false alarm too. "
        "The real one: a decision transformer that runs under its float16 autocast option, where zero-padded rows give 0 / 0 once `1e-8` rounds to 0. The false alarms: float16 evidence that does not hold where the epsilon runs (another model of the project made `.half()`, a real-time voice path whose tensors are all built float32, a relaxed branch nothing calls), and linear-attention normalizers of positive features. "
        "Turn it on with `--extend-select NAN202`, best with `precision = \"fp16\"` in a project that does train in float16."
    )
    fails_in = 'float16'
    name = "vanishing-epsilon"
    message = (
        "Epsilon literal at or below 2.98e-8 in float16 code: it rounds to 0 in float16, so the "
        "guard does nothing and log/division/sqrt see an exact 0; take it from `torch.finfo(x.dtype)`"
    )
    fix_applicability = UNSAFE
    fix_title = "Take the epsilon from `torch.finfo(x.dtype)`"
    triggers = r"\d[eE]-(?:0?[89]|[1-9]\d)\b"
    summary = "An epsilon such as `1e-8`/`1e-12` guarding log/division/sqrt in float16 code, where it rounds to 0."
    why = """\
float16's smallest subnormal is 5.96e-8 and every number at or below half of it
(2**-25 = 2.98e-8) rounds to 0. The common epsilons `1e-8`, `1e-10`, `1e-12` and `1e-15`
therefore vanish when the tensor they are added to, or clamped against, is float16:
`x + 1e-10` is `x`, `x.clamp(min=1e-12)` is `x.clamp(min=0)`, and the log, division or square
root they were meant to protect sees an exact 0 again (`log` gives -inf, `0 / 0` NaN, the
gradient of `sqrt` at 0 inf). `torch.logit(p, eps=1e-8)` clamps p to [0, 1] and returns
±inf; `F.normalize(x, eps=1e-12)` divides the zero vector by 0.

The rule reports only where the code visibly runs in float16: the guarded tensor is
float16 (`.half()`, `dtype=torch.float16`, a module made half in the file), or, inside a
float16 autocast region, it is a matmul output (autocast computes `matmul`/`linear`/`conv`
in float16; an addition or clamp is not autocast and runs in its input's dtype, while
`normalize` and `cosine_similarity` run in float32 under CUDA autocast, so their eps is safe
there), or it is such a matmul output in a project that trains in float16 (configured with
`precision = "fp16"`, or, with the default `precision = "auto"`, shown by a line elsewhere in
the project: a model made `.half()`, a `GradScaler`, CUDA autocast; the message cites it)
(a half-precision project alone is not enough: run over the corpus with `precision = "fp16"`,
most hits were schedulers, metrics, optimizer state and preprocessing, which stay float32
in half-precision training). A visible float32 cast (`.float()`, `.to(torch.float32)`)
ends the question, except below a matmul inside autocast (`q.float() @ k.float()` is still
float16 there). In bfloat16 the same literals survive (its smallest normal is 1.18e-38):
not reported. The guard must be visible in the expression that needs it
(`torch.log(x + 1e-10)`, `a / (n + 1e-12)`, `x / n.clamp(min=1e-12)`); optimizer eps
(`Adam(eps=1e-8)`) is NAN404's. `sqrt(x + eps)` with eps below 5.8e-11 (and `rsqrt` below
2.3e-10) is not reported: there even a surviving epsilon overflows float16 (the gradient
0.5/sqrt(eps), the rsqrt itself), so the literal is not what breaks. Nor is a log whose -inf
the next statements test or replace (`torch.isfinite(v)`, `nan_to_num`, `v[v == -inf] = 0`)
or floor at a dynamic range below its maximum, as log spectrograms do
(`torch.maximum(v, v.max() - 8.0)`); a clamp of the log itself (`log(x + 1e-10).clamp(min=-100)`)
is still reported, since its gradient at 0 is 0 * inf = NaN.

Half precision is also seen where the file shows it elsewhere: a class whose instance is
made `.half()` (`model = Net().half()`: every tensor in its methods is float16), or a
function called inside a float16 autocast region (`with torch.autocast("cuda"): out =
attend(...)`). The message says where.
"""
    example = """\
```python
import torch

def feature_log(h):
    h = h.half()
    return torch.log(h + 1e-10)

def unit(v):
    v = v.half()
    return v / v.norm(dim=-1, keepdim=True).clamp(min=1e-12)
```"""
    use_instead = """\
```python
import torch

def feature_log(h):
    h = h.half()
    return torch.log(h + torch.finfo(h.dtype).eps)

def unit(v):
    v = v.half()
    return v / v.norm(dim=-1, keepdim=True).clamp(min=torch.finfo(v.dtype).tiny)
```"""
    measured = """\
torch 2.13 CPU, float16 inputs at 0 (zero vector for the norms).

| expression | float16 | float32 | fixed, float16 |
|---|---|---|---|
| `torch.tensor(1e-8 / 2.98e-8 / 3e-8, dtype=float16)` | 0 / 0 / 5.96e-8 | | |
| `torch.log(x + 1e-8)` | -inf | -18.4 | `+ finfo.eps`: -6.93 |
| `torch.log(x.clamp(min=1e-8))` | -inf | -18.4 | `min=finfo.tiny`: -9.70 |
| `x / (x.norm() + 1e-12)` | NaN | 0 | `+ finfo.eps`: 0 |
| gradient of `torch.sqrt(x + 1e-8)` | inf | 5000 | `+ finfo.eps`: 16 |
| `torch.logit(p, eps=1e-8)` at p = 0, 1 | -inf, inf | -18.4, inf (1 - 1e-8 rounds to 1 in float32 too) | `eps=finfo.eps`: -6.93, 6.93 |
| `F.normalize(x, eps=1e-12)` | NaN | 0 | `eps=finfo.tiny`: 0 |
| `torch.log(x + 1e-8)` in bfloat16 | -18.4 (not reported) | | |
"""
    fix_notes = """\
Unsafe: the epsilon changes. A literal added to the value becomes `torch.finfo(x.dtype).eps`
(9.77e-4 in float16, 1.19e-7 in float32: close to the usual float32 epsilons, and the
gradient `1/eps` stays finite); a clamp minimum or a `normalize`/`cosine_similarity` eps
becomes `torch.finfo(x.dtype).tiny` (the smallest normal number: 6.10e-5 in float16, 1.18e-38
in float32); `torch.logit`'s eps becomes `torch.finfo(p.dtype).eps` (tiny would leave
`1 - eps == 1`). `x` is a name or attribute with the tensor's dtype read from the code; where
none is visible the finding has no fix. In float32 the new value differs from the old one
(1.19e-7 instead of 1e-10): where the exact float32 value matters, compute the guarded
expression in float32 instead.
"""
    references = (
        "https://pytorch.org/docs/stable/type_info.html#torch.finfo",
        "https://pytorch.org/docs/stable/amp.html#autocast-op-reference",
        "https://en.wikipedia.org/wiki/Half-precision_floating-point_format",
    )

    def visit_BinaryOperation(self, node: cst.BinaryOperation, ctx: FileContext) -> None:
        if not isinstance(node.operator, cst.Add):
            return
        for literal, tensor in ((node.right, node.left), (node.left, node.right)):
            value = _tiny_literal(literal)
            if value is not None and number_value(strip_parens(tensor)) is None:
                self._additive(node, literal, tensor, value, ctx)
                return

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        op = ctx.op(node)
        if op is not None and op.name in ("clamp", "clamp_min") and op.args:
            low = op.arg(1, "min")
            value = _tiny_literal(low)
            if value is None:
                return
            consumer = _consumer(ctx, node)
            reason = float16_reason(ctx, op.args[0])
            if consumer is None or reason is None:
                return
            self._emit(node, consumer, low, value, op.args[0], "tiny", reason, ctx)
            return
        if op is not None and op.name == "add" and op.style != "operator" and len(op.args) == 2:
            value = _tiny_literal(op.args[1])
            if value is not None:
                self._additive(node, op.args[1], op.args[0], value, ctx)
            return
        full = ctx.qualname(node.func)
        kind = _EPS_FUNCTIONS.get(full or "")
        tensor = None
        if kind is None and isinstance(node.func, cst.Attribute) and full is None and node.func.attr.value == "logit":
            kind, tensor = "logit", node.func.value
        if kind is None:
            return
        split = split_args(node.args)
        if split is None:
            return
        positional, keywords = split
        if tensor is None:
            if not positional:
                return
            tensor = positional[0]
            if kind == "logit" and len(positional) > 1:
                eps = positional[1]
            else:
                eps = keywords.get("eps")
        else:
            eps = positional[0] if positional else keywords.get("eps")
        value = _tiny_literal(eps)
        if value is None:
            return
        reason = float16_reason(ctx, tensor, autocast_fp32_op=kind in _AUTOCAST_FP32)
        if reason is None:
            return
        self._emit(node, node, eps, value, tensor, "eps" if kind == "logit" else "tiny", reason, ctx)

    def _additive(self, node, literal, tensor, value, ctx: FileContext) -> None:
        consumer = _consumer(ctx, node)
        if consumer is None:
            return
        reason = float16_reason(ctx, tensor)
        if reason is None:
            return
        self._emit(node, consumer, literal, value, tensor, "eps", reason, ctx)

    def _emit(self, node, consumer, literal, value, tensor, attr, reason, ctx: FileContext) -> None:
        witness = dtype_witness(ctx, tensor)
        text = node_code(strip_parens(literal))
        message = (
            f"Epsilon `{text}` rounds to 0 in float16 ({reason}): the guard does nothing and "
            f"{_consumer_words(ctx, consumer)} still sees an exact 0; use `torch.finfo(x.dtype).{attr}` "
            "(x the tensor) or compute in float32"
        )
        edits: tuple = ()
        replacement = None
        if witness is not None and is_atom(strip_parens(witness)):
            fix_text, imports = _finfo_text(ctx, witness, attr)
            edits = (ctx.replace(strip_parens(literal), fix_text),) + imports
            replacement = _finfo_canonical(ctx, witness, attr, inline=False)
        # Local names stay free inputs (not inlined): the verifier then runs the guard in
        # each dtype instead of the `.half()` the code applies before it.
        domains = {}
        kind = _consumer_kind(ctx, consumer)
        if kind in _SQRT_EPS_FLOOR and value < _SQRT_EPS_FLOOR[kind]:
            # Below this even a surviving epsilon overflows float16 (the sqrt gradient
            # 0.5/sqrt(eps), rsqrt itself): the literal is not what breaks.
            return
        if kind in _LOG_KINDS and repairs.repaired_after(ctx, repairs.NEG_INF):
            return  # the -inf of log(0) is expected and handled (a dynamic-range floor)
        if kind in ("log", "log2", "log10", "sqrt", "rsqrt", "logit"):
            low, high = (0.0, 1.0) if kind == "logit" else (0.0, 1e4)
            for name in free_inputs(ctx.canonical(strip_parens(tensor), inline=False)):
                domains[name] = (low, high)
        probe = _probe_pair(ctx, consumer, strip_parens(literal), replacement, inline=False, domains=domains)
        ctx.report(self, node, message=message, edits=edits, probe=probe, evidence=_float16_path(ctx, node, reason))


def _float16_path(ctx: FileContext, node: cst.CSTNode, reason: str) -> Tuple[Step, ...]:
    """The evidence of a float16 constant's finding: why the code runs in float16 here (the
    finding is reported only with such a reason, so it is manifest)."""
    return (Step(ctx.span(node)[0].row, f"float16 here: {reason}"),)


# --------------------------------------------------------------------------- NAN203


class MaskedFillOverflow(Rule):
    code = "NAN203"
    kind = "value"
    default_enabled = False
    manifest = (
        "the float16 path is evident, and it is named (a `.half()` model, a float16 autocast region's matmul output, a project that trains in float16): every finding of this rule has one (it reports only there)."
    )
    untuned_precision = (
        "Measured earlier by the same claim, on code the rule was not tuned on, judged blind by the project's standard (`benchmarks/precision/README.md`: every file of the real-bugs test-half repositories, the test half of the research repositories in no benchmark, and both halves of batches 4 and 5, 80 repositories that train in float16, batch 5 chosen because they fill scores with large constants; each split and fixed before any finding was read), 1 of 5 findings were real hazards, below the 90% bar. "
        "The real one was a large negative fill of a float16 einsum output in the file itself (kornia's LoFTR). The false alarms: a branch no configuration reaches, and three fills in vendored code (`bertabs` twice, Transformer-XL's sampled softmax inside a copy of `pytorch_pretrained_bert`) that the project's float16 line does not run in practice; the fill overflows only where the tensor is float16, and the rule reads that from another file of the project. "
        "Since then a project's float16 line counts only where some file imports both it and the module, which removes the two `bertabs` findings but not the vendored Transformer-XL one (its package is imported, that function never called). "
        "Turn it on with `--extend-select NAN203`, best with `precision = \"fp16\"` in a project that does train in float16."
    )
    fails_in = 'float16'
    name = "masked-fill-overflow"
    message = (
        "Fill value beyond float16's range (±65504) on a tensor that may be float16: "
        "`masked_fill` raises a RuntimeError, `torch.where` gives -inf on the CPU and raises on CUDA; "
        "use `torch.finfo(x.dtype).min`"
    )
    fix_applicability = UNSAFE
    fix_title = "Fill with `torch.finfo(x.dtype).min`"
    triggers = r"masked_fill|\bwhere\s*\(|\]\s*=[^=]"
    summary = "`masked_fill(mask, -1e9)` / `where(mask, x, -1e9)` on a float16 tensor: RuntimeError or -inf."
    why = """\
Attention code masks scores with a large negative number before a softmax. float16 holds
at most ±65504, so `-1e9`, `-1e10`, `-1e30` or even `-1e5` do not fit:
`scores.masked_fill(mask, -1e9)` on a float16 tensor raises
`RuntimeError: value cannot be converted to type c10::Half without overflow`, and
on the CPU `torch.where(mask, scores, -1e9)`, `scores[mask] = -1e9` or
`torch.tensor(-1e9).half()` silently give -inf (on CUDA `torch.where` raises the same
error as `masked_fill`), after which a row whose every entry is masked is NaN after softmax
(see NAN204). `torch.finfo(scores.dtype).min` (-65504 in float16, -3.4e38 in float32) is the
most negative number the tensor can hold, whatever its dtype.

Reported only where the tensor visibly is float16: `.half()`/`dtype=torch.float16`
evidence, a matmul output inside a float16 autocast region (autocast computes matmul in
float16; `masked_fill` itself is not autocast), or such a matmul output in a project that
trains in float16: `precision = "fp16"` in the config, or, with the default
`precision = "auto"`, a line elsewhere in the project that makes the model `.half()` or
trains it under mixed precision (a `GradScaler`, CUDA autocast, a `--fp16` option), which
the message cites: the attention module rarely shows that the trainer makes it half. Such a
line counts where it runs with the module: some file of the project imports both (a
sub-project of a monorepo whose own script runs the module in float32 is not made float16
by another sub-project's trainer). In float32 and bfloat16 code -1e9 is harmless and not
reported. The subscript form
(`scores[:, :, pad_idx] = -1e9`) is reported on the same evidence (it has no probe for
`nanlint verify`, which runs expressions, not assignments); `torch.tensor(-1e9)` is not
reported yet.

A function called inside a float16 autocast region elsewhere in the file counts as running
under autocast: its matmul outputs are float16 and the fill overflows (the message names the
call).
"""
    example = """\
```python
import torch

def attend(q, k, mask):
    with torch.autocast("cuda", dtype=torch.float16):
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(mask, -1e9)
        return scores.softmax(-1)
```"""
    use_instead = """\
```python
import torch

def attend(q, k, mask):
    with torch.autocast("cuda", dtype=torch.float16):
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        return scores.softmax(-1)
```"""
    measured = """\
torch 2.13 CPU, `x = torch.zeros(2, 3, dtype=torch.float16)`, one row fully masked.

| fill value | `x.masked_fill(m, v)` float16 | `torch.where(m, v, x)` float16 | softmax of the masked row |
|---|---|---|---|
| -1e4, -65504, `finfo.min` | fits | fits | uniform (0.333) |
| -65519, -65520, -1e5, -1e9, -1e30 | RuntimeError (also `masked_fill_`) | -inf | NaN |
| -1e9 in float32 or bfloat16 | fits | fits | uniform |
| `q @ k.T` in CPU autocast(float16), then `masked_fill(m, -1e9)` | RuntimeError | | |

The subscript assignments `x[:, 0] = -1e20`, `x[m] = -1e9` and `x[0] = -1e9` on a float16
tensor write -inf, on the CPU and on CUDA (torch 2.11, H100) alike: nothing raises, and a later
`scores * 0` (a label-smoothing weight of 0 at the padding index) or a row that is all -inf
gives NaN.

torch 2.11 on an NVIDIA H100, a float16 CUDA tensor: `masked_fill(m, -1e9)`,
`torch.where(m, x, -1e9)` and `torch.where(m, x, -1e30)` all raise the RuntimeError;
`masked_fill(m, float("-inf"))` fits (it gives -inf).
"""
    fix_notes = """\
Unsafe: `torch.finfo(x.dtype).min` is -3.4e38 in float32 where -1e9 was written, so values
change (the softmax result does not: both underflow to 0 after `exp`). Adding to a filled
score afterwards can overflow to -inf (`finfo.min + (-1)` still rounds to `finfo.min`, but
`finfo.min * 2` is -inf). `x` is the filled tensor when it is a name or attribute; otherwise
the finding has no fix. A positive fill beyond 65504 becomes `torch.finfo(x.dtype).max`.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.Tensor.masked_fill_.html",
        "https://pytorch.org/docs/stable/type_info.html#torch.finfo",
        "https://github.com/huggingface/transformers/pull/17306",
    )

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        split = split_args(node.args)
        if split is None:
            return
        positional, keywords = split
        func = node.func
        full = ctx.qualname(func)
        tensor = value = None
        if isinstance(func, cst.Attribute) and full is None and func.attr.value in ("masked_fill", "masked_fill_"):
            tensor = func.value
            value = positional[1] if len(positional) > 1 else keywords.get("value")
        elif full == "torch.masked_fill" and len(positional) >= 2:
            tensor = positional[0]
            value = positional[2] if len(positional) > 2 else keywords.get("value")
        elif full == "torch.where" and len(positional) == 3:
            a, b = positional[1], positional[2]
            if _big(ctx, b) is not None and _big(ctx, a) is None:
                tensor, value = a, b
            elif _big(ctx, a) is not None and _big(ctx, b) is None:
                tensor, value = b, a
        if tensor is None or value is None:
            return
        big = _big(ctx, value)
        if big is None:
            return
        reason = float16_reason(ctx, tensor)
        if reason is None:
            return
        # Measured on an H100 (torch 2.11): CUDA's `torch.where` refuses the scalar too.
        what = ("raises a RuntimeError" if full != "torch.where"
                else f"gives {'-inf' if big < 0 else 'inf'} on the CPU and raises a RuntimeError on CUDA")
        self._report(ctx, node, tensor, value, big, reason, what, probe=True)

    def visit_Assign(self, node: cst.Assign, ctx: FileContext) -> None:
        # `scores[:, :, pad] = -1e20`: the value is cast to the tensor's dtype as in masked_fill.
        if not any(isinstance(t.target, cst.Subscript) for t in node.targets):
            return
        big = _big(ctx, node.value)
        if big is None:
            return
        for target in node.targets:
            if isinstance(target.target, cst.Subscript):
                reason = float16_reason(ctx, target.target.value)
                if reason is not None:
                    # Measured on the CPU and an H100: the assignment writes -inf, it never raises.
                    what = f"writes {'-inf' if big < 0 else 'inf'} (CPU and CUDA)"
                    self._report(ctx, node, target.target.value, node.value, big, reason, what, probe=False)
                    return

    def _report(self, ctx: FileContext, node, tensor, value, big, reason, what, probe: bool) -> None:
        attr = "min" if big < 0 else "max"
        witness = dtype_witness(ctx, tensor)
        edits: tuple = ()
        replacement = None
        literal = strip_parens(value)
        direct = number_value(literal) is not None or _float_string(ctx, literal) is not None
        if witness is not None and is_atom(strip_parens(witness)) and direct:
            fix_text, imports = _finfo_text(ctx, witness, attr)
            edits = (ctx.replace(literal, fix_text),) + imports
            replacement = _finfo_canonical(ctx, witness, attr)
        message = (
            f"Fill value `{node_code(literal)}` is beyond float16's range (±65504) and {reason}: "
            f"the fill {what}; use `torch.finfo(x.dtype).{attr}` (x the filled tensor)"
        )
        # An assignment is a statement: the verifier runs expressions only.
        ctx.report(self, node, message=message, edits=edits,
                   probe=(lambda: self._probe(ctx, node, tensor, literal, big, witness, attr, replacement is not None))
                   if probe else None, evidence=_float16_path(ctx, node, reason))

    def _probe(self, ctx: FileContext, node: cst.Call, tensor, literal, big, witness, attr, fixable):
        """The fill as the verifier can run it: the value as a number (not `float("-1e9")` or a
        name), `masked_fill` for `masked_fill_`, local names as free inputs (each dtype)."""
        whole = node.deep_replace(literal, cst.parse_expression(repr(big)))
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "masked_fill_":
            whole = whole.with_changes(func=whole.func.with_changes(attr=cst.Name("masked_fill")))
        original = ctx.canonical(whole, inline=False)
        fixed = None
        if fixable:
            fixed = ctx.canonical(
                node.deep_replace(literal, _finfo_canonical(ctx, witness, attr, inline=False)), inline=False
            )
        return ctx.expression_probe(original, fixed)


def _big(ctx: FileContext, node: cst.BaseExpression) -> Optional[float]:
    value = constant_value(ctx, node)
    if value is None:
        value = analysis.imported_constant(ctx, node)  # `-NEAR_INF` from the project's utils
    if value is None or value != value or abs(value) == float("inf"):
        return None
    return value if abs(value) > FP16_MAX else None


# --------------------------------------------------------------------------- NAN204


class FullyMaskedSoftmax(Rule):
    code = "NAN204"
    kind = "value"
    default_enabled = False
    fails_in = 'all (a fully masked row)'
    name = "fully-masked-softmax"
    message = (
        "Softmax over scores masked with -inf: a row whose every entry is masked (a padded "
        "sequence, an empty key set) is NaN forward and backward; fill with "
        "`torch.finfo(dtype).min` or zero the empty rows after the softmax"
    )
    fix_applicability = UNSAFE
    fix_title = "Fill with `torch.finfo(x.dtype).min` instead of -inf"
    untuned_precision = (
        "Measured earlier by the same claim, on the untuned precision corpus (`benchmarks/precision/`, `run.py --select ALL`; 86 PyPI packages never used to tune the rules, split by a hash of the package name; every finding read with its function and callers and judged by the project's standard) 0 of 8 findings are real on the tune split and 0 of 1 on the test split. "
        "The false alarms: key-padding masks built from real lengths (every row keeps a key), masks that a caller never passes, a diagonal of self-loops set before the fill, and a masked row zeroed again right after the softmax. Turn it on with `--extend-select NAN204` where a query row can lose every key (a padded query against padded keys)."
    )
    triggers = r"masked_fill"
    summary = "`softmax(scores.masked_fill(mask, -inf))`: NaN for a row with every entry masked."
    why = """\
`softmax` subtracts the row maximum before exponentiating. When every entry of a row is
-inf, the maximum is -inf and `-inf - (-inf)` is NaN: the whole row of probabilities is NaN,
in every dtype, and so is the gradient of everything the row touches. Padding masks make such
rows: a sequence that is all padding, a query position that left padding and a causal mask
together leave with no key to attend to, a set of candidates filtered down to none.

`torch.finfo(scores.dtype).min` instead of -inf keeps the row finite: an all-masked row becomes
uniform (its output is then meaningless but finite, and typically ignored or zeroed by the
same padding mask downstream). Alternatively zero the empty rows after the softmax
(`probs.nan_to_num(0.0)`, `probs.masked_fill(all_masked, 0.0)`).

Not reported: a mask built from `torch.tril`/`torch.triu(..., diagonal=1)` alone (a causal mask
never masks the diagonal, so no row is empty; nanoGPT's `self.bias[..., :T, :T] == 0` with a
`tril` buffer included); a threshold mask (`scores < kth_largest`) in a function that takes
the row's `max`/`topk` (top-k filtering and sparse expert routing never mask the row maximum);
code that repairs the softmax output within the next few statements (`nan_to_num`, `isnan`, a
`masked_fill`/`torch.where` of the probabilities) or calls `nan_to_num` on a later value in
the same function; and a softmax in a branch the fill does not reach (`if mask is not None:`
fill and softmax, `else:` softmax alone).

Off by default (enable with `--select NAN204` or `extend-select`): on the corpus of
transformers, diffusers, timm, kornia, fairseq and others it reported 8 sites after the
exclusions above; 6 are key-padding masks that empty a row only when a whole sequence is
padding (real, but rare in practice), and 2 (one function, vendored twice) receive a mask
that its caller builds so that no row is empty. Below the 90% bar for a default rule.
"""
    example = """\
```python
import torch

def attend(scores, pad_mask):
    scores = scores.masked_fill(pad_mask, float("-inf"))
    return torch.softmax(scores, dim=-1)
```"""
    use_instead = """\
```python
import torch

def attend(scores, pad_mask):
    scores = scores.masked_fill(pad_mask, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1)
```"""
    measured = """\
torch 2.13 CPU, scores 0, a mask with one row all True and one row partly True.

| fill | dtype | fully masked row after softmax | partly masked row |
|---|---|---|---|
| `float("-inf")` | float32, float16, bfloat16 | NaN, NaN, NaN | correct |
| `torch.finfo(dtype).min` | float32 | uniform 0.333 | correct (masked entries exactly 0) |
| `torch.finfo(dtype).min` | float16 | uniform 0.333 | correct |
| `-1e9` | float32, bfloat16 | uniform | correct |
"""
    fix_notes = """\
Unsafe: a fully masked row becomes uniform instead of NaN (finite, but attending equally to
padding), and masked entries of other rows are exactly 0 either way. The fix rewrites the
-inf of the `masked_fill` (even when it sits in an earlier statement of the same function)
as `torch.finfo(x.dtype).min`, with `x` the filled tensor when it is a name or attribute; a
-inf held in a named constant is not rewritten. Where the NaN rows must be zeros instead,
keep -inf and repair the softmax output (`torch.nan_to_num(probs, nan=0.0)`).
"""
    references = (
        "https://github.com/pytorch/pytorch/issues/41508",
        "https://github.com/pytorch/pytorch/issues/25110",
        "https://pytorch.org/docs/stable/type_info.html#torch.finfo",
    )

    def __init__(self) -> None:
        # In-place -inf fills seen so far: (function node, name) -> (call, receiver, mask, value)
        self._inplace: Dict[Tuple[int, str], Tuple[cst.Call, cst.BaseExpression, cst.BaseExpression, cst.BaseExpression]] = {}

    def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "masked_fill_" and ctx.qualname(func) is None:
            fill = _fill(ctx, node)
            if fill is not None and isinstance(strip_parens(func.value), cst.Name):
                self._inplace[(id(ctx.enclosing_function()), strip_parens(func.value).value)] = (node,) + fill
            return
        op = ctx.op(node)
        if op is None or op.name != "softmax" or not op.args:
            return
        found = self._masked_source(ctx, op.args[0])
        if found is None:
            return
        fill_call, receiver, mask, value, inplace = found
        if not conditions.runs_before_here(ctx, fill_call) or masks.keeps_a_key_per_row(ctx, mask):
            return
        if repairs.repaired_around(ctx) or repairs.repaired_downstream(ctx, node, repairs.NAN, 4):
            return
        witness = dtype_witness(ctx, receiver)
        edits: tuple = ()
        direct = _float_string(ctx, strip_parens(value)) is not None or _literal_inf(ctx, strip_parens(value))
        replacement_text = None
        if witness is not None and is_atom(strip_parens(witness)):
            # The probe checks the replacement even where the source is not rewritten (a
            # named -inf constant may serve other uses).
            replacement_text = node_code(_finfo_canonical(ctx, witness, "min", inline=False))
            if direct:
                fix_text, imports = _finfo_text(ctx, witness, "min")
                edits = (ctx.replace(strip_parens(value), fix_text),) + imports
        probe = self._probe(ctx, node, op, fill_call, receiver, mask, inplace, replacement_text)
        ctx.report(self, node, edits=edits, probe=probe)

    def _masked_source(self, ctx: FileContext, arg: cst.BaseExpression, depth: int = 6):
        """The -inf `masked_fill` the softmax input comes from (through local names, casts,
        scaling), as (call, receiver, mask, value, inplace)."""
        expr = strip_parens(arg)
        for _ in range(depth):
            if isinstance(expr, cst.Name):
                key = (id(ctx.enclosing_function()), expr.value)
                resolved = ctx.value_of(expr)
                if key in self._inplace:
                    call, receiver, mask, value = self._inplace[key]
                    return call, receiver, mask, value, True
                if resolved is expr or resolved is None:
                    return None
                expr = strip_parens(resolved)
                continue
            if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and \
                    expr.func.attr.value == "masked_fill" and ctx.qualname(expr.func) is None:
                fill = _fill(ctx, expr)
                return (expr,) + fill + (False,) if fill is not None else None
            if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Divide, cst.Multiply)):
                # `scores.masked_fill(m, -inf) / temperature`
                if number_value(strip_parens(expr.right)) is not None or isinstance(strip_parens(expr.right), cst.Name):
                    expr = strip_parens(expr.left)
                    continue
                return None
            inner = pass_through(ctx, expr)
            if inner is None or isinstance(expr, cst.Subscript):
                return None
            expr = strip_parens(inner)
        return None

    def _probe(self, ctx, node, op, fill_call, receiver, mask, inplace, replacement_text):
        dims = [node_code(ctx.canonical(a)) for a in op.args[1:]] + \
            [f"{k}={node_code(ctx.canonical(v))}" for k, v in op.kwargs.items() if k in ("dim",)]
        dim = ", ".join(dims) if dims else "-1"
        # Local names stay free inputs: `att` may hold an earlier fill (a causal mask), which
        # is not what this finding is about.
        recv_node = ctx.canonical(strip_parens(receiver), inline=False)
        recv = node_code(recv_node) if is_atom(recv_node) else f"({node_code(recv_node)})"
        mask_text = node_code(ctx.canonical(mask, inline=False))
        original = cst.parse_expression(f"torch.softmax({recv}.masked_fill({mask_text}, float('-inf')), {dim})")
        fixed = None
        if replacement_text is not None:
            fixed = cst.parse_expression(f"torch.softmax({recv}.masked_fill({mask_text}, {replacement_text}), {dim})")
        return ctx.expression_probe(original, fixed)


def _literal_inf(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """`-float("inf")`, `-math.inf`, `-torch.inf` written here (not through a name)."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = strip_parens(node.expression)
        if _float_string(ctx, inner) is not None:
            return True
        if isinstance(inner, cst.Attribute):
            return ctx.qualname(inner) in _INF_NAMES or dotted_name(inner) in _INF_NAMES
    return False


def _fill(ctx: FileContext, call: cst.Call):
    """(receiver, mask, value) of `x.masked_fill(mask, -inf)`, else None."""
    split = split_args(call.args)
    if split is None:
        return None
    positional, keywords = split
    mask = positional[0] if positional else keywords.get("mask")
    value = positional[1] if len(positional) > 1 else keywords.get("value")
    if mask is None or value is None:
        return None
    v = constant_value(ctx, value)
    if v != float("-inf"):
        return None
    return call.func.value, mask, value


