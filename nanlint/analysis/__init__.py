"""The value-flow analysis every rule asks: what an expression holds where it is written.

    from nanlint import analysis
    v = analysis.value(ctx, expr)          # a Value at the node being visited
    analysis.cite(ctx, v)                  # "softmax at line 12, returned by `Agent.probs` ..."
    analysis.zero_reason(ctx, expr)        # why exact 0 is reachable, with its evidence
    analysis.stable_form(ctx, expr)        # expr is exactly a softmax/sigmoid output, and from where
    analysis.evidence_steps(ctx, v)        # a value's evidence as located steps for a finding
    analysis.half_evidence(ctx)            # this function runs in float16/bfloat16, and why
    analysis.no_gradient(ctx, expr)        # why no gradient reaches expr (no_grad, detach, ...)
    analysis.backward_reaches(ctx, op, x)  # the backward pass evaluates op's derivative at x
    analysis.single_sample_batch(ctx, x)   # x is a mini-batch whose last one can hold 1 sample
    analysis.summarize_module(ctx)         # picklable summaries for a project index
    repairs.repaired_after(ctx, NEG_INF)   # the -inf/NaN assigned here is tested or replaced next
    training_events.clip_events(ctx)       # each gradient clip with the backward/step events around it
    dtypes.float16_reason(ctx, tensor)     # why this tensor is float16 here (.half(), autocast matmul...)
    masks.bounds_operand(ctx, cond, x)     # a where condition or patch index keeps x off its singular points
    guards.zeros_removed(ctx, p)           # p[p > 0], masked_fill, where: no zero reaches the log
    guards.strip_epsilon(ctx, x)           # (A, True) for `A + eps`, `A.clamp(min=eps)`
    guards.kept_in_domain(ctx, x)          # x is clamped, plus an epsilon, a where: off sqrt/log's edge
    masks.emptiness_expected(ctx, mask)    # a nanmean's mask, labels == c for c drawn from the labels
    repairs.non_finite_on_purpose(fill)    # a NaN/inf filler that marks entries invalid on purpose

It is computed lazily: nothing runs until a rule asks, then the enclosing function (and what
it calls in the file) is interpreted once and memoized on the FileContext (flow.py). Values
and their evidence are in values.py; what each torch op does to them, in one table, in
transfer.py. Parameters take what the file's own calls pass them (callsites.py, which also
says when such a fact may make a value safer); probes read the same analysis run with every
visible call trusted and defaults filled in (`probe_analysis`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Dict, Iterable, NamedTuple, Optional, Tuple

import libcst as cst

from ..core.bounds import parse_module
from ..core.context import FileContext, dotted_name
from .flow import bare as strip_parens
from ..core.diagnostics import ProbeInput, Step
from ..core.ops import number_value
from . import ranges
from .rewrite import follow_local
from .flow import Env, FileAnalysis, analyze_source, enforced_analysis, file_analysis, probe_analysis
from . import conditions, imports, sampled_actions, summaries, transfer, uses
from .summaries import ClassSummary, FunctionSummary, ModuleSummary
from .values import RAND_ZERO, TOP, UNIFORM_ZERO, Evidence, Value, join, stored_as
from .batches import single_sample_batch
from .dtypes import HalfEvidence, called_under_autocast, float16_reason, half_evidence

# The summaries of imported files are computed on flow's analysis (flow imports summaries).
summaries.set_analyzer(analyze_source)

__all__ = [
    "Evidence", "Value", "FileAnalysis", "ModuleSummary", "FunctionSummary", "ClassSummary",
    "file_analysis", "value", "cite", "zero_reason", "excludes_zero", "half_evidence",
    "nonempty", "probe_input", "summarize_module", "clamped_to_zero", "no_gradient", "cuts_gradient",
    "differentiated_nodes", "backward_reaches",
    "single_sample_batch", "has_many", "rounds_to_one", "upper_guard", "UpperGuard",
    "exp_cannot_overflow", "exp_kept_finite", "exp_bound_note", "ExpBound", "enforced_value",
    "enforced_value_where_kept", "exponent_bounded", "shifted_by_global_max", "called_under_autocast",
    "softmax_distribution", "selected_core", "FormOrigin", "stable_form", "evidence_steps",
]


def enforced_value(ctx: FileContext, expr: cst.BaseExpression) -> Value:
    """What `expr` holds at the node being visited whatever a default says: a bound here comes
    from the code's own guards (a clamp, a branch, a max-shift, `-abs(x)`, a clamp every caller
    applies), never from a setting someone may change."""
    fa = enforced_analysis(ctx)
    try:
        return fa.eval(expr, fa.env_at(ctx.stack, seeded=fa.depends_on_parameters(ctx.stack, expr)))
    except RecursionError:
        return TOP


def enforced_value_where_kept(ctx: FileContext, expr: cst.BaseExpression) -> Value:
    """`enforced_value`, on the elements a `torch.where` around the node keeps: in
    `where(s < 0.5, expm1(s), s.exp() - 1)` the second branch's `s` is at least 0.5 where its
    value is used. For a value's accuracy only (the backward pass still differentiates the
    discarded elements: NAN112's hazard)."""
    fa = enforced_analysis(ctx)
    try:
        env = fa.env_at(ctx.stack, seeded=fa.depends_on_parameters(ctx.stack, expr))
        stack = ctx.stack
        for i, node in enumerate(stack[:-1]):
            if not (isinstance(node, cst.Call) and len(node.args) == 3 and conditions.is_where(ctx, node)):
                continue
            child = stack[i + 1]
            if child is node.args[1] or child is node.args[2]:
                refined = fa.refine(node.args[0].value, env, child is node.args[1])
                if refined is not None:
                    env = refined
        return fa.eval(expr, env)
    except RecursionError:
        return TOP


def _env_here(ctx: FileContext, fa: FileAnalysis) -> Env:
    """The environment before the innermost statement being visited (see `FileAnalysis.env_at`)."""
    return fa.env_at(ctx.stack)


def _at_node(ctx: FileContext, expr: cst.BaseExpression) -> Tuple[Env, Value]:
    """The environment at the node being visited and what `expr` holds there."""
    fa = file_analysis(ctx)
    try:
        # The file's calls are consulted only for a value that may hold what they pass.
        env = fa.env_at(ctx.stack, seeded=fa.depends_on_parameters(ctx.stack, expr))
        return env, fa.eval(expr, env)
    except RecursionError:
        return Env(), TOP


def value(ctx: FileContext, expr: cst.BaseExpression) -> Value:
    """What `expr` holds at the node being visited (memoized per function)."""
    return _at_node(ctx, expr)[1]


# Ops after which a softmax is no longer a whole distribution along its dim (transfer.py's
# pass-through ops: selections and reshapes), and ops that keep one (copies and casts).
_ENDS_DISTRIBUTION = frozenset(name for name, t in transfer.OPS.items() if t is transfer.passthrough)
_KEEPS_DISTRIBUTION = frozenset(name for name, t in transfer.OPS.items() if t is transfer.copy) | {
    "float", "double", "half", "bfloat16"}


def _ends_distribution(ctx: FileContext, expr: cst.BaseExpression, depth: int = 4) -> bool:
    """`expr` is visibly a selection or reshape (through copies, casts and a local's last
    assignment): no whole distribution, whatever the flow would say about its operand."""
    expr = strip_parens(expr)
    if depth <= 0:
        return False
    if isinstance(expr, cst.Name):
        assigned = ctx.value_of(expr)
        return assigned is not expr and assigned is not None and _ends_distribution(ctx, assigned, depth - 1)
    if isinstance(expr, cst.Subscript):
        # `x[..., :-1, :]`, `x[1:]`; a single index may pick a member of a returned tuple.
        return len(expr.slice) > 1 or isinstance(expr.slice[0].slice, cst.Slice)
    if not isinstance(expr, cst.Call):
        return False
    op = ctx.op(expr)
    if op is not None:
        name, operand = op.name, (op.args[0] if op.args else None)
    elif isinstance(expr.func, cst.Attribute) and ctx.qualname(expr.func) is None:
        name, operand = expr.func.attr.value, expr.func.value  # `logits.view(-1, C)`
    else:
        full = ctx.qualname(expr.func) or ""
        first = expr.args[0].value if expr.args and expr.args[0].keyword is None else None
        name, operand = (full.rsplit(".", 1)[-1], first) if full.startswith("torch.") else ("", None)
    if operand is None:
        return False
    if name in _ENDS_DISTRIBUTION:
        return True
    return name in _KEEPS_DISTRIBUTION and _ends_distribution(ctx, operand, depth - 1)


def softmax_distribution(ctx: FileContext, expr: cst.BaseExpression) -> Optional[Value]:
    """The value of `expr` where it is a softmax output that is still a whole distribution
    along a dim (a loss given it expects logits or log-probabilities), else None. A visible
    selection or reshape is answered without running the flow (most loss inputs are
    `logits.view(-1, C)`)."""
    if _ends_distribution(ctx, expr):
        return None
    v = value(ctx, expr)
    return v if v.prob == "softmax" and v.simplex_dim is not None else None


# Selections, reshapes, copies and casts: an elementwise function commutes with them
# (`log(p[i])` is `log(p)[i]`), so what they select keeps its stable form.
_SELECTING = _ENDS_DISTRIBUTION | _KEEPS_DISTRIBUTION | {"to", "type_as"}
_SELECTING_ATTRIBUTES = ("T", "mT", "data")


def selected_core(ctx: FileContext, expr: cst.BaseExpression) -> cst.BaseExpression:
    """What `expr` selects, reshapes, copies or casts, as written: `F.softmax(x, -1)` in
    `F.softmax(x, -1)[idx].squeeze(1)`, `p` in `torch.gather(p, 1, a)`; `expr` itself where it
    is none of those."""
    for _ in range(8):
        bare = strip_parens(expr)
        if isinstance(bare, cst.Subscript):
            expr = bare.value
            continue
        if isinstance(bare, cst.Attribute) and bare.attr.value in _SELECTING_ATTRIBUTES \
                and ctx.qualname(bare) is None:
            expr = bare.value
            continue
        if isinstance(bare, cst.Call):
            func = strip_parens(bare.func)
            full = ctx.qualname(func)
            if full is None and isinstance(func, cst.Attribute) and func.attr.value in _SELECTING:
                expr = func.value
                continue
            if full is not None and full.startswith("torch.") and full.rsplit(".", 1)[-1] in _SELECTING \
                    and bare.args and bare.args[0].keyword is None and not bare.args[0].star:
                expr = bare.args[0].value
                continue
        break
    return expr


class FormOrigin(NamedTuple):
    """A value that is exactly a stable function's output, selected or reshaped since."""

    form: str  # "softmax", "sigmoid" or "1 - sigmoid" (`Value.form`)
    cite: str  # where it was computed and how it got here ("softmax at line 12; ...")
    dim: Optional[str] = None  # a softmax's dim, as written, where the value is still whole


def stable_form(ctx: FileContext, expr: cst.BaseExpression) -> Optional[FormOrigin]:
    """The stable function `expr` is exactly an output of, however far away it was computed (a
    method, `forward`, a module attribute, a tuple element, a list, another file), selected,
    reshaped or cast since: its log has an exact stable spelling. None where the code keeps the
    value off 0 (a filter, a branch, an in-place clamp) or it is the probability of an action
    sampled from the same policy (a Categorical never draws a 0)."""
    if not ctx.imported and not ctx.derived("form words", lambda: _FORM_WORDS.search(ctx.source) is not None):
        return None  # nothing here computes one, and nothing is imported that could
    v = value(ctx, expr)
    if v.form is None or v.excludes_zero or sampled_actions.sampled_probability(ctx, expr) is not None:
        return None
    dim = v.simplex_dim if v.simplex_dim is not None and v.simplex_dim.lstrip("-").isdigit() else None
    return FormOrigin(v.form, cite(ctx, v), dim)


# How a file names the functions behind `Value.form` (as ops, modules or functions).
_FORM_WORDS = re.compile(r"[sS]oftm(?:ax|in)|[sS]igmoid|expit")


# A fact a summary brought from another file of the project: "softmax at pkg/heads.py:12".
_ELSEWHERE = re.compile(r"^(?P<note>.*) at (?P<path>[^\s:]+):(?P<row>\d+)$")


def evidence_steps(ctx: FileContext, v: Value, count: int = 4) -> Tuple[Step, ...]:
    """`v`'s evidence as located steps, producer first ("softmax" at line 12, "returned by
    `Agent.probs`" at line 30): what a value finding shows the user, in every output format."""
    fa = file_analysis(ctx)
    steps = []
    for ev in v.evidence[-count:]:
        found = _ELSEWHERE.match(ev.reason) if not ev.line else None
        if found is not None:
            steps.append(Step(int(found["row"]), found["note"], path=found["path"]))
        else:
            steps.append(Step(fa.line(ev.line), ev.reason))
    return tuple(dict.fromkeys(steps))


def cite(ctx: FileContext, v: Value, count: int = 2) -> str:
    return file_analysis(ctx).cite(v, count)


# Zero reasons rules report on (others, such as `torch.rand`, belong to dedicated rules).
_ZERO_REASONS = ("a softmax output", "a sigmoid output", "a ReLU output", "clamp(min=0)",
                 "1 - a probability", "a ratio of counts")


def imported_constant(ctx: FileContext, expr: cst.BaseExpression) -> Optional[float]:
    """The number `expr` is where it names a module constant imported from the project
    (`-NEAR_INF`, `from .utils import NEAR_INF`), found without running the flow (a rule may
    ask at every `torch.where`)."""
    expr = strip_parens(expr)
    sign = 1.0
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        sign, expr = -1.0, strip_parens(expr.expression)
    names = imports.imported_names(ctx) if isinstance(expr, cst.Name) else None
    if names is None or any(expr.value in scope.bindings for scope in ctx.scopes[1:]):
        return None  # nothing imported, or a local name hides the import
    member = names.member_of(expr.value)
    data = names.constant(member) if member is not None else None
    if data is None:
        return None
    return sign * summaries.value_from_data({"lo": data["value"]}, "").lo


def excludes_zero(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """The flow proves `expr` is never exactly 0 here (a branch, an assert, an in-place
    clamp, a masked replacement; `cite(ctx, value(ctx, expr))` says why), or it is the
    probability of an action sampled from the same policy (sampled_actions.py)."""
    return value(ctx, expr).excludes_zero or sampled_actions.sampled_probability(ctx, expr) is not None


def zero_reason(ctx: FileContext, expr: cst.BaseExpression) -> Optional[Tuple[str, str]]:
    """(reason, evidence) where exact 0 is reachable through what the flow sees beyond one
    expression: a softmax or sigmoid returned by a function, a method, a model's `forward`,
    a module held in an attribute, or passed to this function by the file's own calls. None
    where nothing says so."""
    v = value(ctx, expr)
    if v.excludes_zero or v.zero not in _ZERO_REASONS or sampled_actions.sampled_probability(ctx, expr):
        return None
    if not any(("returned by" in e.reason or "output" in e.reason or "forward" in e.reason
                or "passed as" in e.reason or "kept in" in e.reason) for e in v.evidence):
        return None
    return v.zero, cite(ctx, v)


# Layers whose output nothing keeps positive (issue 33: a variance taken straight from one).
_UNCONSTRAINED = re.compile(r"^`(Linear|LazyLinear|Bilinear|Conv[123]d|ConvTranspose[123]d|LazyConv[123]d)` output$")


def unconstrained_output(ctx: FileContext, expr: cst.BaseExpression) -> Optional[str]:
    """Evidence that `expr` is a linear layer's or a convolution's raw output, negative for
    many inputs (`self.var(h)` with `self.var = nn.Linear(d, 1)`), or None: where nothing
    after the layer bounds it below 0 (a clamp, `exp`, `softplus`, a square would)."""
    v = value(ctx, expr)
    # The layer's output must be the last thing the value went through: a sigmoid after it,
    # or a join with a caller's value (whose bounds a public function drops), says nothing
    # about its sign.
    if v.lo >= 0 or not v.evidence or not _UNCONSTRAINED.match(v.evidence[-1].reason):
        return None
    return cite(ctx, v)


def softmax_module_call(ctx: FileContext, expr: cst.BaseExpression) -> Optional[Tuple[cst.BaseExpression, str]]:
    """(input, dim) where `expr` calls an `nn.Softmax(dim=d)` module on one input
    (`self.softmax(h)` with `self.softmax = nn.Softmax(dim=1)`), or None."""
    call = strip_parens(expr)
    if not isinstance(call, cst.Call) or ctx.op(call) is not None or len(call.args) != 1 \
            or call.args[0].keyword is not None or call.args[0].star:
        return None
    # The callee itself must be the Softmax module, not a model whose forward ends in one.
    held = value(ctx, call.func)
    out = held.module_out
    if held.instance_of or out is None or out.prob != "softmax" \
            or not any(e.reason == "`Softmax` module" for e in out.evidence):
        return None
    dim = value(ctx, call).simplex_dim
    if dim is None or not dim.lstrip("-").isdigit():
        return None
    return call.args[0].value, dim


_CLAMP_WORDS = re.compile(r"clamp|clip")


def clamped_to_zero(ctx: FileContext, expr: cst.BaseExpression) -> Optional[str]:
    """Evidence that `expr` was clamped at exactly 0 (`clamp(min=0)`, `clamp(0, 1)`,
    `clamp_min(0)`) and may sit on that bound: a value computed to be >= 0 in real arithmetic
    (a squared distance by expansion, `1 - cos ** 2`) rounds to 0 or below, and the clamp
    passes the gradient through at the bound itself. None where the flow excludes 0."""
    if not imports.may_mention(ctx, _CLAMP_WORDS):
        return None  # no clamp written here nor in a file it imports: no need to run the flow
    v = value(ctx, expr)
    if v.excludes_zero or v.zero != "clamp(min=0)":
        return None
    return cite(ctx, v) or "clamp(min=0)"


def inside_zero_one(ctx: FileContext, expr: cst.BaseExpression) -> Optional[str]:
    """Evidence that `expr` lies strictly between 0 and 1 (`uniform_(1e-6, 1 - 1e-6)`,
    `0.98 * torch.sigmoid(z) + 0.01`, an affine map of `torch.rand`), or None."""
    v = value(ctx, expr)
    if not (0.0 < v.lo and v.hi < 1.0):
        return None
    return cite(ctx, v) or f"in [{v.lo:g}, {v.hi:g}]"


# A file that says these may compute in float64, where `1 - 1e-8` keeps its value.
_MAY_BE_FLOAT64 = re.compile(r"float64|\.double\(|torch\.double|set_default_dtype|set_default_tensor_type")


class UpperGuard(NamedTuple):
    guarded: cst.BaseExpression  # the value kept below 1
    bound: cst.BaseExpression  # the clamp's `max`, or the soft clip's factor `1 - 2 * eps`
    clamp: bool  # a clamp (not a soft clip)


def upper_guard(ctx: FileContext, expr: cst.BaseExpression) -> Optional[UpperGuard]:
    """How `expr` keeps a value below 1, or None: `p.clamp(eps, 1 - eps)`,
    `torch.clamp(p, max=c)`, `p.clamp_max(c)` or the soft clip `eps + (1 - 2 * eps) * p`
    (either order, with constant eps), written here or assigned to the name `expr`."""
    node, _ = ctx.resolve(strip_parens(expr), None)
    op = ctx.op(strip_parens(node))
    if op is None or not op.args:
        return None
    if op.name == "clamp" and op.arg(2, "max") is not None:
        return UpperGuard(op.args[0], op.arg(2, "max"), True)
    if op.name == "clamp_max" and len(op.args) == 2:
        return UpperGuard(op.args[0], op.args[1], True)
    if op.name == "add" and len(op.args) == 2 and not op.kwargs:
        for shift, scaled in ((op.args[0], op.args[1]), (op.args[1], op.args[0])):
            inner = ctx.op(scaled)  # the syntax first: most additions are no soft clip
            if inner is None or inner.name != "mul" or len(inner.args) != 2 or not _may_be_small_constant(ctx, shift):
                continue
            v = value(ctx, shift)
            if v.lo != v.hi or v.lo <= 0:
                continue
            for factor, p in ((inner.args[0], inner.args[1]), (inner.args[1], inner.args[0])):
                v = value(ctx, factor)
                if v.lo == v.hi and 0.5 < v.lo < 1.0:
                    return UpperGuard(p, factor, False)
    return None


def _may_be_small_constant(ctx: FileContext, node: cst.BaseExpression) -> bool:
    """Whether `node` can be a soft clip's epsilon, judged from its spelling alone (asking the
    flow would run the whole file's analysis for every `a + b * c`): a number, a name bound
    to one, or a name that says eps."""
    node = strip_parens(node)
    if number_value(node) is not None:
        return True
    if isinstance(node, cst.BinaryOperation):  # `smoothing / n_classes`
        return _may_be_small_constant(ctx, node.left) and _may_be_small_constant(ctx, node.right)
    chain = dotted_name(node)
    if chain is None:
        return False
    if any(word in chain.lower() for word in ("eps", "smooth")):
        return True
    bound, _ = ctx.resolve(node, None)
    return number_value(strip_parens(bound)) is not None


def rounds_to_one(ctx: FileContext, expr: cst.BaseExpression,
                  guard: Optional[UpperGuard] = None) -> Optional[str]:
    """Why `expr`, kept below 1 in real arithmetic by a guard (`upper_guard`, found again
    unless given) whose bound is one number, is 1.0 as the tensor stores it: the bound rounds
    to 1 in the dtype the value has (float32 unless it is float16 or bfloat16; nothing where
    the file may compute in float64). `1 - torch.finfo(p.dtype).eps` is no one number: it is
    the dtype's own, and never rounds to 1. A sentence for a message, or None."""
    guard = guard or upper_guard(ctx, expr)
    if guard is None:
        return None
    bound = value(ctx, guard.bound)
    if bound.lo != bound.hi:
        return None
    v = value(ctx, expr)
    if not 0.5 < v.hi < 1.0:
        return None
    if float16_reason(ctx, expr) is not None:
        dtype = "float16"
    elif v.dtype == "bfloat16":
        dtype = "bfloat16"
    elif _MAY_BE_FLOAT64.search(ctx.source):
        return None
    else:
        dtype = "float32"
    if stored_as(v.hi, dtype) != 1.0:
        return None
    return f"its upper bound 1 - {1.0 - v.hi:.2g} rounds to 1.0 in {dtype}"


def uniform_sample(ctx: FileContext, expr: cst.BaseExpression) -> Optional[str]:
    """Evidence that `expr` is a uniform sample on [0, 1) that can be exactly 0 (`torch.rand`,
    `rand_like`, `uniform_()`, through names and helpers), not clamped or shifted off 0 since.
    None otherwise."""
    v = value(ctx, expr)
    if v.excludes_zero or v.zero not in (RAND_ZERO, UNIFORM_ZERO) or v.lo < 0 or v.hi > 1:
        return None
    return cite(ctx, v) or v.zero


def no_gradient(ctx: FileContext, expr: cst.BaseExpression) -> Optional[str]:
    """Why no gradient flows back through `expr` where it is written, with its evidence, or
    None where one may. For the hazards that are in the gradient only (the inf derivative of
    `sqrt` at 0, a discarded `where` branch):
    - autograd is off here: a `with torch.no_grad()` / `inference_mode()` block or decorator,
      a method of a custom `torch.autograd.Function` (its `backward` is written by hand), an
      optimizer's `step`;
    - the value carries none: a constant, a comparison or a count, `.detach()`, `.data`, a
      `.grad` tensor, a tensor made without `requires_grad` (`torch.randn`, `torch.zeros`),
      a value computed under `no_grad` earlier, in this function or a callee, a NumPy array;
    - the function only ever runs where autograd is off (every call the file makes to a
      private helper is under `no_grad`, `callsites.only_without_autograd`), or it is an
      `nn.Module`'s `__init__` (built once, never differentiated);
    - no use of the result carries a gradient back: it is read as a Python number
      (`.item()`, `.tolist()`), only compared, used as an index or picked by `argmin` /
      `argmax` (box assignment, nearest neighbours), also through local names (uses.py)."""
    fa = file_analysis(ctx)
    env, v = _at_node(ctx, expr)
    why = env.nograd or v.nograd
    if why is None:
        fn = ctx.enclosing_function()
        turned_on = any(isinstance(n, cst.With) and any(fa.grad_mode(i.item) for i in n.items) for n in ctx.stack)
        if fn is not None and not turned_on:  # `with torch.enable_grad():` inside it: on again
            why = fa.construction(fn, ctx.stack) or fa.callsites.only_without_autograd(fn)
    if why is not None:
        row = fa.line(why.line)
        return f"{why.reason} at line {row}" if row else why.reason
    # Where the value goes: only compared, used as an index, picked by `argmin`, read as a
    # number (uses.py), so nothing differentiates it.
    return uses.consumed_without_gradient(ctx, expr)


# Integer casts the transfer table has no entry for.
_INTEGER_METHODS = ("short", "byte")
_INTEGER_DTYPES = re.compile(r"^torch\.(long|int|int64|int32|int16|int8|uint8|bool)$")


def cuts_gradient(ctx: FileContext, node: cst.CSTNode) -> bool:
    """No gradient flows back through `node` into the expressions under it: a comparison, an
    integer or boolean cast, `detach()`, `.item()` (the ops the transfer table cuts)."""
    if isinstance(node, cst.Comparison):
        return True
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return False
    if ctx.qualname(node.func.value) is not None:
        return False
    method = node.func.attr.value
    if method in transfer.GRADIENT_CUTS or method in transfer.NUMBER_METHODS or method in _INTEGER_METHODS:
        return True
    if method in ("to", "type") and node.args:
        arg = node.args[0]
        q = ctx.qualname(arg.value) if arg.keyword is None or arg.keyword.value == "dtype" else None
        return q is not None and _INTEGER_DTYPES.match(q) is not None
    return False


def differentiated_nodes(ctx: FileContext, node: cst.CSTNode) -> Iterable[cst.CSTNode]:
    """`node` and the nodes under it whose gradient reaches it: the walk stops below a node
    that `cuts_gradient` (a comparison, an integer cast, `detach()`)."""
    if cuts_gradient(ctx, node):
        return
    yield node
    for child in node.children:
        yield from differentiated_nodes(ctx, child)


def backward_reaches(ctx: FileContext, op_node: cst.BaseExpression, operand: cst.BaseExpression) -> bool:
    """Whether the backward pass evaluates the derivative of the op at `op_node` at its
    singular point: its unsafe operand carries a gradient, or, for a division, the numerator
    does (d(a/b)/da = 1/b is inf at b = 0 even when `b` is a count without gradient)."""
    op = ctx.op(op_node)
    inputs = op.args[:2] if op is not None and op.name == "div" else [operand]
    return not all(no_gradient(ctx, a) for a in inputs)


# exp(x) is finite up to here: float16 overflows from 11.09, float32 and bfloat16 from 88.7.
FLOAT16_EXP_LIMIT = 11.0
FLOAT32_EXP_LIMIT = 88.0


def _below_exp_edge(ctx: FileContext, exponent: cst.BaseExpression, v: Value) -> bool:
    """`v`, the exponent's value, stays below the overflow edge of the dtype `exp` runs in
    (float16 where `_exp_in_float16` says why, else float32)."""
    if v.hi == float("inf"):
        return False
    half = _exp_in_float16(ctx, exponent, v) is not None
    return v.hi <= (FLOAT16_EXP_LIMIT if half else FLOAT32_EXP_LIMIT)


def exp_cannot_overflow(ctx: FileContext, exponent: cst.BaseExpression) -> bool:
    """`exp(exponent)` stays finite here for the inputs the analysis sees: the flow bounds the
    exponent (a branch condition, a clamp, `t[t > 20] = 20`, a constructor's default `k`, what
    the file's calls pass) below the overflow edge of the dtype `exp` runs in."""
    return _below_exp_edge(ctx, exponent, value(ctx, exponent))


def exp_kept_finite(ctx: FileContext, exponent: cst.BaseExpression) -> bool:
    """The code itself keeps `exp(exponent)` finite, whatever its inputs: a guard it applies
    (a clamp, a branch, a max-shift, `-abs(x)`) bounds the exponent below the edge of the
    dtype `exp` runs in. A bound that holds only for what callers pass or a default says
    (a gain `k = 50`, two sigmoid maps) does not count: a form rule reports the spelling."""
    return exp_cannot_overflow(ctx, exponent) and _below_exp_edge(ctx, exponent, enforced_value(ctx, exponent))


class ExpBound(NamedTuple):
    """A bound on `exp`'s exponent that the code does not enforce (a default, what the inputs
    happen to be): the largest exponent, where it comes from, and why `exp` runs in float16
    here (None: in float32)."""

    hi: float
    cited: str
    half: Optional[str]

    def clause(self) -> str:
        """"here the exponent is at most 50 (...)", for a message."""
        source = f" ({self.cited})" if self.cited else ""
        if self.half is not None and self.hi > FLOAT16_EXP_LIMIT:
            return (f"here the exponent is at most {self.hi:g}{source}, past float16's 11.09 "
                    f"where `exp` runs ({self.half})")
        return f"here the exponent is at most {self.hi:g}{source}, a bound the code does not enforce"


def exp_bound_note(ctx: FileContext, exponent: cst.BaseExpression) -> Optional[ExpBound]:
    """Where the flow bounds `exp`'s exponent only through what the code is given (a default,
    not a guard it applies): the bound, for the message to state as information. None where
    nothing bounds it below float32's edge, or the code itself keeps it finite."""
    v = value(ctx, exponent)
    if v.hi > FLOAT32_EXP_LIMIT or exp_kept_finite(ctx, exponent):
        return None
    cited = ", ".join(dict.fromkeys(
        f"{ev.reason} at line {row}" if row else ev.reason
        for ev, row in ((ev, file_analysis(ctx).line(ev.line)) for ev in v.evidence[-3:])))
    return ExpBound(v.hi, cited, _exp_in_float16(ctx, exponent, v))


def _unwrap_shift(ctx: FileContext, node: cst.BaseExpression, env: Optional[dict]):
    """Peel `.detach()`, `.values` and `[0]` off a reduction's result."""
    for _ in range(6):
        node, env, _ = follow_local(ctx, strip_parens(node), env, False)
        if (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "detach"
            and not node.args
        ):
            node = node.func.value
        elif isinstance(node, cst.Attribute) and node.attr.value == "values":
            node = node.value
        elif (
            isinstance(node, cst.Subscript)
            and len(node.slice) == 1
            and isinstance(node.slice[0].slice, cst.Index)
            and number_value(node.slice[0].slice.value) == 0
        ):
            node = node.value
        else:
            break
    return node, env


def shifted_by_global_max(ctx: FileContext, node: cst.BaseExpression, env: Optional[dict] = None) -> bool:
    """`x - x.max()` (also `x.data.max()`, `torch.max(x)`, `amax` with no dim): the shift is
    one number for the whole tensor, so a sum of `exp` along a dim is 0 for every row whose
    entries all lie far below the largest entry of the tensor. `env`: the bindings the
    caller resolved `node`'s names in (None: the visited scope)."""
    node, env, _ = follow_local(ctx, strip_parens(node), env, False)
    op = ctx.op(node)
    if op is None or op.name != "sub" or len(op.args) != 2 or op.kwargs:
        return False
    shift, _ = _unwrap_shift(ctx, op.args[1], env)
    inner = ctx.op(shift)
    return inner is not None and inner.name in ("max", "amax") and len(inner.args) == 1 and not inner.kwargs


def exponent_bounded(ctx: FileContext, node: cst.BaseExpression, env: Optional[dict] = None) -> bool:
    """True where `exp(node)` cannot overflow: what the code keeps finite (`exp_kept_finite`:
    a max-shift `x - x.max(...)` / `amax` / `logsumexp` of the same tensor, written here, a
    statement earlier or in a helper; `b - a` inside `if a > b:`; `t` after `t[t > 20] = 20`;
    log-probabilities, `-abs(x)`, a Gaussian `-d ** 2 / (2 * s ** 2)`: any exponent <= 0),
    and a Gaussian (Parzen) window `-scale * (x - c) ** 2` whose scale has no visible sign:
    a positive precision by convention (monai's histogram weights)."""
    if exp_kept_finite(ctx, node):
        return True
    node, env, _ = follow_local(ctx, strip_parens(node), env, False)
    op = ctx.op(node)
    if op is None or op.name not in ("mul", "div") or len(op.args) != 2 or op.kwargs:
        return False

    def negated(e: cst.BaseExpression) -> bool:
        inner = ctx.op(strip_parens(e))
        number = number_value(strip_parens(e))
        return (inner is not None and inner.name == "neg") or (number is not None and number < 0)

    left, right = op.args
    return (negated(left) and ranges.sign(ctx, right, env) == "nonneg") or (
        op.name == "mul" and negated(right) and ranges.sign(ctx, left, env) == "nonneg"
    )


def _exp_in_float16(ctx: FileContext, exponent: cst.BaseExpression, v: Value) -> Optional[str]:
    """Why `exp(exponent)` is computed in float16 here, or None. CUDA autocast runs `exp` in
    float32 whatever its input's dtype (NUMERICS.md), so a float16 autocast region counts
    only on CPU; a tensor that is float16 itself (`.half()`, a module made half) counts
    outside autocast."""
    precision = ctx.precision
    region = precision.in_autocast if precision is not None else None
    if region is not None and region.effective_dtype == "float16":
        # Autocast upcasts `exp`'s input on CUDA, a float16 tensor included.
        return "it runs under float16 autocast on CPU" if region.device == "cpu" else None
    if v.dtype == "float16":
        return "the tensor is float16"
    if precision is None:
        return None
    reason = float16_reason(ctx, exponent, autocast_fp32_op=True)
    if reason is not None:
        return reason
    if precision.configured_everywhere == "float16":
        return f"the project runs in float16: {precision.configured_reason}"
    return None


def nonempty(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """A mask (or the selection it makes) has at least one True entry here: a condition,
    an assert or an early exit says so, or its classes come from `unique`."""
    v = value(ctx, expr)
    if v.nonempty:
        return True
    key = dotted_name(strip_parens(expr))
    if key is not None:
        env = _env_here(ctx, file_analysis(ctx))
        return any(r[0] == key and r[1] == "nonempty" for r in env.rels)
    return False


def has_many(ctx: FileContext, expr: cst.BaseExpression) -> bool:
    """A condition or assert says `expr` holds more than one element (`assert n > 1`)."""
    fa = file_analysis(ctx)
    env = _env_here(ctx, fa)
    key = dotted_name(strip_parens(expr))
    return key is not None and (key, "nonempty", "many") in env.rels


def probe_input(ctx: FileContext, expr: cst.BaseExpression) -> Optional[ProbeInput]:
    """The domain the analysis proves for a probe input (its name is set by the probe): what
    the code can produce there, the file's own calls included (`probe_analysis`)."""
    fa = probe_analysis(ctx)
    try:
        v = fa.eval(expr, fa.env_at(ctx.stack, seeded=fa.depends_on_parameters(ctx.stack, expr)))
    except RecursionError:
        return None
    evidence = fa.cite(v)
    if v.lo == v.hi and v.lo not in (float("inf"), float("-inf")) and v.evidence:
        # One value (`self.k = k` with `k=50` the only one passed, or the default).
        return ProbeInput(name="", value=v.lo, domain=(v.lo, v.hi), kind="integer" if v.integer else "real",
                          evidence=evidence)
    if v.prob == "softmax" and v.simplex_dim is not None:
        dim = _int(v.simplex_dim)
        return ProbeInput(name="", domain=(0.0, 1.0), kind="simplex" if dim is not None else "probability",
                          dim=dim, evidence=evidence)
    if v.prob:
        return ProbeInput(name="", domain=(0.0, 1.0), kind="probability", evidence=evidence)
    if v.mask:
        return ProbeInput(name="", domain=(0.0, 1.0), kind="mask", evidence=evidence)
    if v.count:
        return ProbeInput(name="", domain=(1.0 if v.nonempty else 0.0, 1000.0), kind="count", evidence=evidence)
    if v.lo > float("-inf") or v.hi < float("inf"):
        lo = v.lo if v.lo > float("-inf") else -1e4
        hi = v.hi if v.hi < float("inf") else 1e4
        return ProbeInput(name="", domain=(lo, hi), kind="integer" if v.integer else "real", evidence=evidence)
    return None


def _int(text: Optional[str]) -> Optional[int]:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


# ---------------------------------------------------------------------- summaries


def _resolved(fa: FileAnalysis, v: Value) -> Value:
    ev = tuple(Evidence(fa.line(e.line), e.reason) for e in v.evidence)
    out = v.module_out
    nograd = v.nograd and Evidence(fa.line(v.nograd.line), v.nograd.reason)
    members = tuple((k, _resolved(fa, m)) for k, m in v.members) if v.members is not None else None
    return replace(v, evidence=ev, module_out=_resolved(fa, out) if out is not None else None, nograd=nograd,
                   members=members)


def summarize_module(source) -> ModuleSummary:
    """Summaries of every function, class, method and attribute of one module. `source` is a
    FileContext, or a (path, text) pair parsed here."""
    if isinstance(source, tuple):
        path, text = source
        from .precision import Precision

        ctx = FileContext(path, text, parse_module(text))
        ctx.precision = Precision(ctx)
    else:
        ctx = source
    fa = file_analysis(ctx)
    fa.ensure_all()

    def half_of(name: str) -> Optional[str]:
        ev = fa.autocast_callees.get(name)
        return f"{ev.reason} at line {fa.line(ev.line)}" if ev else None

    functions = {
        name: FunctionSummary(name, _resolved(fa, fa.function_return(fn)), half_of(name))
        for name, fn in fa.functions.items()
    }
    classes = {}
    for cname, node in fa.classes.items():
        methods = {
            m: FunctionSummary(m, _resolved(fa, fa.function_return(fn)), half_of(f"{cname}.{m}"))
            for m, fn in fa.methods.get(cname, {}).items()
        }
        bases = tuple(dotted_name(b.value) or "?" for b in node.bases)
        attrs = {k: _resolved(fa, v) for k, v in fa.class_attrs(cname).items()}
        classes[cname] = ClassSummary(cname, bases, methods, attrs)
    return ModuleSummary(ctx.path, functions, classes, tuple(sorted(fa.trainable_names)))


def joined(*values: Value) -> Value:
    out: Optional[Value] = None
    for v in values:
        out = join(out, v)
    return out or TOP


# ---------------------------------------------------------------------- probe domains

# Counts are >= 0; the upper end only bounds the verifier's sweep.
COUNT_DOMAIN = (0.0, 1000.0)
DIVISOR_DOMAIN = (1.0, 1000.0)


def count_ratio_inputs(ctx: FileContext, arg: cst.BaseExpression) -> Dict[str, ProbeInput]:
    """Probe inputs for a ratio of counts written with local names (not inlined in its
    probe): the counts divided are counts in [0, 1000], the divisor a count in [1, 1000] (a
    zero divisor is another hazard), a name holding the ratio itself a probability."""
    from ..core.context import free_inputs

    arg = strip_parens(arg)
    if isinstance(arg, cst.Name):
        return {arg.value: ProbeInput("", domain=(0.0, 1.0), kind="probability", evidence="a ratio of counts")}
    op = ctx.op(arg)
    if op is None or op.name != "div" or len(op.args) != 2:
        return {}
    out = {
        name: ProbeInput("", domain=COUNT_DOMAIN, kind="count", evidence="counted")
        for name in free_inputs(ctx.canonical(op.args[0], inline=False))
    }
    for name in free_inputs(ctx.canonical(op.args[1], inline=False)):
        out.setdefault(name, ProbeInput("", domain=DIVISOR_DOMAIN, kind="count", evidence="a divisor"))
    return out


def input_domains(ctx: FileContext, expr: cst.BaseExpression) -> Dict[str, ProbeInput]:
    """A ProbeInput for each free name of `expr` (as the probe writes it, not inlined) whose
    domain the analysis proves: a softmax -> simplex with its dim, a mask, a count, an
    interval. Names the analysis knows nothing about are left out."""
    from ..core.context import free_inputs

    found: Dict[str, ProbeInput] = {}
    for name in free_inputs(ctx.canonical(strip_parens(expr), inline=False)):
        if ctx.constant(name) is not None:
            continue  # a constant of the source (`self.k = 50`): the probe has its value
        try:
            node = cst.parse_expression(name)
        except Exception:
            continue
        known = probe_input(ctx, node)
        if known is not None:
            found[name] = known
    return found


def mask_inputs(ctx: FileContext, mask: cst.BaseExpression) -> Dict[str, ProbeInput]:
    """A probe input of kind "mask" for a mask written as a name (`x[valid]`,
    `(x * m).sum() / m.sum()`, possibly cast): the verifier then draws 0/1 values, the
    all-False mask included."""
    from ..core.context import free_inputs

    found: Dict[str, ProbeInput] = {}
    bare = strip_parens(mask)
    while isinstance(bare, cst.Call) and isinstance(bare.func, cst.Attribute) and not bare.args \
            and bare.func.attr.value in ("float", "bool", "long", "int", "half", "double"):
        bare = strip_parens(bare.func.value)
    if isinstance(bare, cst.Name):
        names = free_inputs(ctx.canonical(bare))
        if names == [bare.value]:
            found[bare.value] = ProbeInput("", domain=(0.0, 1.0), kind="mask", evidence="used as a mask")
    return found


def relations(ctx: FileContext, names) -> Tuple[Tuple[str, str, str], ...]:
    """Relations between probe inputs that hold here (`hi >= lo` after `if hi >= lo:`, or
    where `hi` was taken as the max of `lo` and something)."""
    fa = file_analysis(ctx)
    env = _env_here(ctx, fa)
    names = set(names)
    out = []
    for a, op, b in sorted(env.rels):
        if a in names and b in names and op in (">=", ">", "<=", "<", "==", "!="):
            out.append((a, op, b))
    # `hi = x.max()`, `lo = x.min()`: hi >= lo.
    maxima = {(a, b) for a, op, b in env.rels if op == "max_of"}
    minima = {(a, b) for a, op, b in env.rels if op == "min_of"}
    for hi, subject in sorted(maxima):
        for lo, other in sorted(minima):
            if subject == other and hi in names and lo in names and (hi, ">=", lo) not in out:
                out.append((hi, ">=", lo))
    return tuple(out)
