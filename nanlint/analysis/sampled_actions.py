"""The probability of an index sampled from a distribution is not 0.

The simple case is local: `choices = torch.multinomial(probs, 1)`, then `probs[rows, choices]`
(top-k and nucleus sampling): multinomial never draws an entry of probability 0.

On-policy reinforcement learning draws each action from the policy's softmax
(`a = Categorical(model.pi(s)).sample()`), stores it, and later recomputes the policy on the
stored states to take `torch.log(pi.gather(1, a))`. Categorical never draws an action whose
probability is exactly 0, and the recomputed probability is the one the action was drawn
with (or a few small steps away from it), so that log is finite. The actions reach the
update through a buffer the flow does not follow, so the index must be named like an action
(`a`, `actions`, `a_batch`). The log of the whole distribution (`torch.log(pi)`, an entropy)
is not covered: an action that was not drawn can have probability 0.

Where the file keeps a replay buffer, the stored actions may have been drawn by a much older
policy (off-policy: ACER, SAC-discrete), and the current policy may give them 0: no fact then.
Gathering by a label (`probs.gather(1, target)`, supervised learning) is not a sampled action
either: the file must sample from the same callee (`self.pi`, `model.pi`, `policy`).
"""

from __future__ import annotations

import re
from typing import Dict, Optional

import libcst as cst

from ..core.context import FileContext, last_name, strip_parens
from ..core.ops import number_value
from .ranges import pass_through

_SAMPLERS = re.compile(r"Categorical|multinomial")
# A replay buffer in use (`ReplayBuffer(...)`, `self.replay_buffer.sample(...)`).
_OFF_POLICY = re.compile(r"\b\w*[Rr]eplay\w*\s*[.(]")
# The index of the selection names an action (`a`, `a_vec`, `actions`, `act_batch`): the
# actions reach the update through a buffer the flow cannot follow, labels look the same.
_ACTION_TOKENS = {"a", "act", "acts", "action", "actions"}
_SELECT = {"gather", "take_along_dim"}


def sampled_probability(ctx: FileContext, expr: cst.BaseExpression) -> Optional[str]:
    """Evidence that `expr` is the probability of an index sampled from it: the same tensor
    (`probs[rows, torch.multinomial(probs, 1)[:, 0]]`), or a policy the file samples its
    actions from (`pi.gather(1, a)` with `Categorical(model.pi(s)).sample()` at line 100);
    None otherwise."""
    if not ctx.derived("samples", lambda: _SAMPLERS.search(ctx.source) is not None):
        return None  # nearly every file: one search per file, not per question
    selected = _selected_from(ctx, expr)
    if selected is None:
        return None
    source, indices = selected
    for index in indices:
        how = _sampled_from_same(ctx, index, source)
        if how is not None:
            return how
    if not any(_names_actions(i) for i in indices) or ctx.derived(
            "replay buffer", lambda: _OFF_POLICY.search(ctx.source) is not None):
        return None
    callee = _callee(ctx, source)
    line = _sampled_callees(ctx).get(callee) if callee is not None else None
    if line is None:
        return None
    return f"the probability of an action sampled from `{callee}` at line {line}"


def _selected_from(ctx: FileContext, expr: cst.BaseExpression):
    """(`pi`, [`a`]) for `pi.gather(1, a)`, `torch.gather(pi, 1, a)`, `pi[range(n), a]`
    (through local names and what only reshapes or casts, `pi.gather(1, a).reshape(-1)`), or
    None."""
    node = _through_names(ctx, expr)
    for _ in range(4):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and ctx.qualname(node.func) is None \
                and node.func.attr.value in _SELECT and len(node.args) >= 2:
            return node.func.value, [node.args[1].value]
        if isinstance(node, cst.Call) and ctx.qualname(node.func) == "torch.gather" and len(node.args) >= 3:
            return node.args[0].value, [node.args[2].value]
        if isinstance(node, cst.Subscript):
            indices = [e.slice.value for e in node.slice if isinstance(e.slice, cst.Index)]
            return (node.value, indices) if indices else None
        inner = pass_through(ctx, node)
        if inner is None:
            return None
        node = _through_names(ctx, inner)
    return None


def _sampled_from_same(ctx: FileContext, index: cst.BaseExpression, source: cst.BaseExpression) -> Optional[str]:
    """How `index` was chosen by `source` itself, or None: drawn from it
    (`torch.multinomial(probs, 1)`, `Categorical(probs).sample()`, `m.sample()` of such an
    `m`, then indexed or reshaped), drawn from the logits `source` is the softmax of (tempered,
    or with entries masked to -inf: `Categorical(logits=logits / t).sample()`), or its argmax."""
    node, env = _resolved(ctx, index, None)
    for _ in range(4):
        scored = _argmax_of(ctx, node)
        if scored is not None:
            same = _code(ctx, scored) == _code(ctx, source) or _same_logits(ctx, (scored, env), source)
            # The largest of n probabilities that sum to 1 is at least 1/n.
            return f"the probability of its most likely index (argmax at line {ctx.span(node)[0].row})" if same else None
        if not isinstance(node, cst.Call):
            inner = pass_through(ctx, node)  # `torch.multinomial(p, 1)[:, 0]`
            if inner is None:
                return None
            node, env = _resolved(ctx, inner, env)
            continue
        row = ctx.span(node)[0].row
        sampler, sampler_env = node, env
        if isinstance(node.func, cst.Attribute) and ctx.qualname(node.func) is None and node.func.attr.value == "sample":
            sampler, sampler_env = _resolved(ctx, node.func.value, env)  # `Categorical(p).sample()`, `m.sample()`
        if isinstance(sampler, cst.Call):
            drawn = _sampled_argument(ctx, sampler)
            if drawn is not None:
                same = _code(ctx, drawn) == _code(ctx, source)
                return f"the probability of an index sampled from it at line {row}" if same else None
            logits = _categorical_argument(ctx, sampler, "logits")
            if logits is not None:
                same = _same_logits(ctx, (logits, sampler_env), source)
                return f"the probability of an index sampled from its logits at line {row}" if same else None
        inner = pass_through(ctx, node)
        if inner is None and isinstance(node.func, cst.Attribute) and node.func.attr.value == "long":
            inner = node.func.value
        if inner is None:
            return None
        node, env = _resolved(ctx, inner, env)
    return None


def _argmax_of(ctx: FileContext, node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """`x` where `node` is its argmax: `x.argmax(...)`, `torch.argmax(x, ...)`, or the indices
    of `x.max(dim)` / `torch.max(x, dim)` (`.indices`, `[1]`, a name unpacked as the second of
    `values, indices = x.max(dim)`); else None."""
    if isinstance(node, cst.Call):
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "argmax" and ctx.qualname(node.func) is None:
            return node.func.value
        if ctx.qualname(node.func) == "torch.argmax" and node.args and node.args[0].keyword is None:
            return node.args[0].value
        return None
    call = None
    if isinstance(node, cst.Attribute) and node.attr.value == "indices":
        call = strip_parens(node.value)
    elif isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) \
            and number_value(node.slice[0].slice.value) == 1:
        call = strip_parens(node.value)
    elif isinstance(node, cst.Name):
        call = _unpacked_call(ctx.enclosing_function(), node.value, position=1)
    if not isinstance(call, cst.Call) or not call.args:
        return None
    if isinstance(call.func, cst.Attribute) and call.func.attr.value == "max" and ctx.qualname(call.func) is None:
        return call.func.value
    if ctx.qualname(call.func) == "torch.max" and len(call.args) >= 2 and call.args[0].keyword is None:
        return call.args[0].value
    return None


def _categorical_argument(ctx: FileContext, call: cst.Call, which: str) -> Optional[cst.BaseExpression]:
    """The `probs` (first positional or `probs=`) or the `logits` (`logits=`) a
    `Categorical`/`OneHotCategorical` is built from, or None for any other call."""
    qualname = ctx.qualname(call.func) or ""
    if last_name(call.func) not in ("Categorical", "OneHotCategorical") or (qualname and "distributions" not in qualname):
        return None
    for arg in call.args:
        if (arg.keyword.value if arg.keyword is not None else "probs") == which:
            return arg.value
    return None


# An added term that masks entries out (`float("-inf")`, `torch.finfo(t).min`, `-1e20`)
# rather than shifting them: the masked logits' support is a subset of the logits'.
_MASKING_TERM = re.compile(r"inf\b|finfo|\d[eE]\+?(?:[4-9]|\d\d)\b|\d{5,}")
_MASK_WORDS = re.compile(r"mask|keep|valid|allow", re.IGNORECASE)


def _same_logits(ctx: FileContext, chosen, source: cst.BaseExpression) -> bool:
    """Whether `source` is the softmax of the logits `chosen` (an expression and the bindings
    its names are read in) was computed from, up to a temperature, masked entries and what
    only indexes or reshapes."""
    probs, env = _resolved(ctx, source, None)
    for _ in range(4):
        op = ctx.op(probs) if isinstance(probs, cst.Call) else None
        if op is not None and op.name == "softmax" and op.args:
            return _logits_root(ctx, *chosen) == _logits_root(ctx, op.args[0], env)
        inner = pass_through(ctx, probs)  # `probs = probs.squeeze(1)`
        if inner is None:
            return False
        probs, env = _resolved(ctx, inner, env)
    return False


def _logits_root(ctx: FileContext, node: cst.BaseExpression, env) -> tuple:
    """An identity for the tensor `node` scales, masks, indexes or reshapes: the node that
    computed it, or the binding of the name it was read from."""
    for _ in range(8):
        node, env = _resolved(ctx, node, env)
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, (cst.Divide, cst.Multiply)) and not _MASK_WORDS.search(ctx.code(node.right)):
                node = node.left  # a temperature (a product with a 0/1 mask moves logits to 0)
                continue
            if isinstance(node.operator, (cst.Add, cst.Subtract)) and _MASKING_TERM.search(ctx.code(node.right)):
                node = node.left
                continue
            break
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
                node.func.attr.value in ("masked_fill", "masked_fill_") and ctx.qualname(node.func) is None:
            node = node.func.value
            continue
        inner = pass_through(ctx, node)
        if inner is None:
            break
        node = inner
    if isinstance(node, cst.Name):
        binding = ctx.binding(node.value, env)
        return ("name", node.value, id(binding) if binding is not None else None)
    return ("node", id(node))


def _resolved(ctx: FileContext, node: cst.BaseExpression, env):
    """`node` through the local names it reads (with the bindings in force where it was
    assigned), or the call whose first result a name unpacks."""
    node, env = ctx.resolve(strip_parens(node), env)
    node = strip_parens(node)
    if isinstance(node, cst.Name):
        unpacked = _unpacked_call(ctx.enclosing_function(), node.value)
        if unpacked is not None:
            return unpacked, None
    return node, env


def _code(ctx: FileContext, node: cst.BaseExpression) -> str:
    return ctx.code(_through_names(ctx, node))


def _names_actions(index: cst.BaseExpression) -> bool:
    index = strip_parens(index)
    while isinstance(index, cst.Call) and isinstance(index.func, cst.Attribute):
        index = index.func.value  # `a.long()`, `actions.unsqueeze(-1)`
    name = last_name(index) if isinstance(index, (cst.Name, cst.Attribute)) else ""
    return bool(_ACTION_TOKENS & set(re.split(r"[_\d]+", name.lower())))


def _through_names(ctx: FileContext, node: cst.BaseExpression) -> cst.BaseExpression:
    return _resolved(ctx, node, None)[0]


def _callee(ctx: FileContext, source: cst.BaseExpression) -> Optional[str]:
    """`pi` for `self.pi(s)`, `model.pi(s)`, a name assigned one of them; `policy` for
    `policy(s)`."""
    node = _through_names(ctx, source)
    for _ in range(4):
        if not (isinstance(node, cst.Call) and ctx.qualname(node.func) is None):
            return None
        inner = pass_through(ctx, node)
        if inner is None:
            return last_name(node.func) or None
        node = _through_names(ctx, inner)
    return None


def _unpacked_call(function: Optional[cst.CSTNode], name: str, position: int = 0) -> Optional[cst.Call]:
    """The call whose first result (or the result at `position`) `name` takes in `function`
    (`pi, h = model.pi(s, h)`)."""
    if function is None:
        return None
    for node in _walk(function):
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call):
            for target in node.targets:
                t = target.target
                if isinstance(t, (cst.Tuple, cst.List)) and len(t.elements) > position:
                    element = t.elements[position].value
                    if isinstance(element, cst.Name) and element.value == name:
                        return node.value
    return None


def _sampled_callees(ctx: FileContext) -> Dict[str, int]:
    """Callees the file samples actions from: `Categorical(prob)` / `prob.multinomial(1)` /
    `torch.multinomial(prob, 1)` with `prob` a call of the callee (directly or through a
    name assigned in the same function). Callee -> the line of the first such sample."""
    return ctx.derived("sampled callees", lambda: _find_sampled(ctx))


def _find_sampled(ctx: FileContext) -> Dict[str, int]:
    found: Dict[str, int] = {}

    def visit(node: cst.CSTNode, function: Optional[cst.CSTNode]) -> None:
        if isinstance(node, cst.FunctionDef):
            function = node
        if isinstance(node, cst.Call):
            probs = _sampled_argument(ctx, node)
            if probs is not None:
                call = _call_in(ctx, function, strip_parens(probs))
                name = last_name(call.func) if call is not None and ctx.qualname(call.func) is None else ""
                if name and name not in found:
                    found[name] = ctx.span(node)[0].row
        for child in node.children:
            visit(child, function)

    visit(ctx.module, None)
    return found


def _sampled_argument(ctx: FileContext, call: cst.Call) -> Optional[cst.BaseExpression]:
    """The probabilities a sampling call draws from, or None for any other call."""
    probs = _categorical_argument(ctx, call, "probs")
    if probs is not None:
        return probs
    qualname = ctx.qualname(call.func) or ""
    name = last_name(call.func)
    if qualname == "torch.multinomial" and call.args:
        return call.args[0].value
    if name == "multinomial" and qualname == "" and isinstance(call.func, cst.Attribute):
        return call.func.value
    return None


def _call_in(ctx: FileContext, function: Optional[cst.CSTNode], node: cst.BaseExpression) -> Optional[cst.Call]:
    """`node` itself when it is a call, else the call last assigned to the name `node` in
    `function` (plain or as the first of a tuple); `prob = prob.view(-1)` reshapes the same
    probabilities, it is not their source."""
    if isinstance(node, cst.Call):
        return node
    if not isinstance(node, cst.Name) or function is None:
        return None
    call = None
    for n in _walk(function):
        if isinstance(n, cst.Assign) and isinstance(n.value, cst.Call) and pass_through(ctx, n.value) is None:
            for target in n.targets:
                t = target.target
                if isinstance(t, cst.Name) and t.value == node.value:
                    call = n.value
    return call or _unpacked_call(function, node.value)


def _walk(node: cst.CSTNode):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


__all__ = ["sampled_probability"]
