"""Mini-batches (and per-class subsets) that can hold a single sample.

A loop over mini-batches (`for x, y in DataLoader(ds, batch_size=64)`, `for data in
buffer.get(self.batch_size)`, `for chunk in x.split(bs)`) ends with a batch of what is left:
`len(ds) % batch_size` samples, one for some dataset sizes. A statistic with Bessel's
correction over the batch axis (`x.std()`, `x.var(0)`) is 0/0 = NaN on that batch. This
module answers which expressions take their first axis from such a loop variable, or are
the rows of one class selected in a loop over classes (`x[labels == c]`), and why.

The facts are syntactic on purpose (loops, the iterable's construction, local assignments):
the batch size is a property of the data, not of any value the interval analysis tracks.
"""

from __future__ import annotations

import re
from typing import Dict, Iterator, Optional, Set, Union

import libcst as cst

from ..core.context import FileContext, dotted_name, node_code, strip_parens, target_names
from ..core.ops import split_args

# Wrappers that iterate over their first argument unchanged (`enumerate(loader)`).
_WRAPPERS = {"enumerate", "tqdm", "iter", "zip", "list", "tqdm.tqdm", "tqdm.auto.tqdm"}
# Methods that keep a tensor's first axis (casts, moves, views, elementwise math).
_KEEP_AXIS = {
    "float", "double", "half", "bfloat16", "to", "cuda", "cpu", "detach", "clone", "contiguous",
    "type", "long", "int", "squeeze", "flatten", "view", "reshape", "abs", "exp", "log",
}
# A condition that mentions a size: `if len(x) > 1`, `if x.shape[0] > 1`, `if n_samples > 1`.
_SIZE_TEST = re.compile(r"\blen\(|\.shape\b|\.size\(|numel|nelement|\bsize\b|_size\b|\bn_\w+|num_\w+|count|\.sum\(|\.any\(")


def _is_none(node: Optional[cst.BaseExpression]) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _is_true(node: Optional[cst.BaseExpression]) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def batched_iterable(ctx: FileContext, it: cst.BaseExpression, depth: int = 3) -> Optional[str]:
    """Why iterating over `it` yields mini-batches whose last one can hold one sample, or None.

    - `DataLoader(...)` without `drop_last=True` (its default batch size is 1) and without a
      `batch_sampler`/`sampler` that could drop the rest;
    - a call given a batch size (`.get(self.batch_size)`, `iterate(batch_size=bs)`), not
      `batch_size=None` (one batch of everything);
    - `torch.split(x, n)` / `x.split(n)` (the last chunk holds the remainder).
    Names are followed to their last local assignment."""
    it = strip_parens(it)
    if isinstance(it, cst.Name) and depth > 0:
        value = ctx.value_of(it, 1)
        if value is not it:
            return batched_iterable(ctx, value, depth - 1)
        return None
    if not isinstance(it, cst.Call):
        return None
    split = split_args(it.args)
    if split is None:
        return None
    positional, keywords = split
    full = ctx.qualname(it.func) or dotted_name(it.func) or ""
    last = full.rsplit(".", 1)[-1]
    if (full in _WRAPPERS or last in ("enumerate", "tqdm")) and positional:
        for arg in positional if last == "zip" else positional[:1]:
            found = batched_iterable(ctx, arg, depth)
            if found is not None:
                return found
        return None
    code = node_code(it)
    if last == "DataLoader":
        if "drop_last" in keywords or "batch_sampler" in keywords or "sampler" in keywords:
            return None
        return f"`{_short(code)}` has no `drop_last=True`: its last batch holds what is left, possibly one sample"
    if last == "split" and (full == "torch.split" or isinstance(it.func, cst.Attribute)):
        return f"`{_short(code)}`: the last chunk holds what is left, possibly one sample"
    sizes = [v for k, v in keywords.items() if "batch_size" in k]
    sizes += [p for p in positional if "batch_size" in node_code(p)]
    if sizes and not any(_is_none(s) for s in sizes) and not _is_true(keywords.get("drop_last")):
        return f"`{_short(code)}` yields batches of `{node_code(sizes[0])}`: the last one holds what is left, possibly one sample"
    return None


def _short(code: str, limit: int = 60) -> str:
    code = " ".join(code.split())
    return code if len(code) <= limit else code[: limit - 3] + "..."


_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _enclosing_loops(ctx: FileContext) -> Iterator[Union[cst.For, cst.CompFor]]:
    """The `for` loops and comprehension clauses around the node being visited, innermost
    first, inside its function (each has a `target` and an `iter`)."""
    for node in reversed(ctx.stack):
        if isinstance(node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        if isinstance(node, cst.For):
            yield node
        elif isinstance(node, _COMPREHENSIONS):
            clause = node.for_in
            while clause is not None:
                yield clause
                clause = clause.inner_for_in


def _loop_targets(ctx: FileContext) -> Dict[str, str]:
    """Names bound by the enclosing `for` loops of the current function that iterate over
    mini-batches, with the reason each can hold one sample."""
    found: Dict[str, str] = {}
    for loop in _enclosing_loops(ctx):
        reason = batched_iterable(ctx, loop.iter)
        if reason is None:
            continue
        for name in target_names(loop.target):
            found.setdefault(name, reason)
    return found


def _class_mask(ctx: FileContext, index: cst.BaseExpression, loop_names: Set[str], depth: int = 2) -> Optional[str]:
    """`labels == c` (also through a local name) with `c` bound by an enclosing loop: the
    rows of one class, which can be a single row."""
    index = strip_parens(index)
    if isinstance(index, cst.Name) and depth > 0:
        value = ctx.value_of(index, 1)
        return _class_mask(ctx, value, loop_names, depth - 1) if value is not index else None
    if not isinstance(index, cst.Comparison) or len(index.comparisons) != 1 \
            or not isinstance(index.comparisons[0].operator, cst.Equal):
        return None
    sides = (strip_parens(index.left), strip_parens(index.comparisons[0].comparator))
    if any(isinstance(side, cst.Name) and side.value in loop_names for side in sides):
        return f"`{_short(node_code(index))}` selects the rows of one class, possibly one row"
    return None


def _roots(ctx: FileContext, expr: cst.BaseExpression, loops: Dict[str, str], seen: Set[str],
           depth: int = 6) -> Optional[str]:
    """The reason of the first loop variable `expr` takes its first axis from, or None."""
    expr = strip_parens(expr)
    if depth <= 0:
        return None
    if isinstance(expr, cst.Name):
        if expr.value in loops:
            return loops[expr.value]
        if expr.value in seen:
            return None
        seen.add(expr.value)
        value = ctx.value_of(expr, 1)
        return _roots(ctx, value, loops, seen, depth - 1) if value is not expr else None
    if isinstance(expr, cst.Attribute):
        return _roots(ctx, expr.value, loops, seen, depth - 1)
    if isinstance(expr, cst.Subscript):
        if len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
            loop_names = {n for loop in _enclosing_loops(ctx) for n in target_names(loop.target)}
            subset = _class_mask(ctx, expr.slice[0].slice.value, loop_names)
            if subset is not None:
                return subset
        return _roots(ctx, expr.value, loops, seen, depth - 1)
    if isinstance(expr, cst.BinaryOperation):
        return _roots(ctx, expr.left, loops, seen, depth - 1) or _roots(ctx, expr.right, loops, seen, depth - 1)
    if isinstance(expr, cst.UnaryOperation):
        return _roots(ctx, expr.expression, loops, seen, depth - 1)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
            and expr.func.attr.value in _KEEP_AXIS and ctx.qualname(expr.func.value) is None:
        return _roots(ctx, expr.func.value, loops, seen, depth - 1)
    return None


def single_sample_batch(ctx: FileContext, expr: cst.BaseExpression) -> Optional[str]:
    """Why `expr`, at the node being visited, may hold a single sample along its first axis
    (it is taken from the variable of a loop over mini-batches: see `batched_iterable`), or
    None. A condition or early exit in scope that tests a size (`if len(x) > 1:`, `if
    batch_size > 1:`, `assert x.shape[0] > 1`) answers None."""
    if next(_enclosing_loops(ctx), None) is None:
        return None
    reason = _roots(ctx, expr, _loop_targets(ctx), set())
    if reason is None:
        return None
    from .conditions import tests_in_scope

    for test in tests_in_scope(ctx):
        if _SIZE_TEST.search(node_code(test)):
            return None
    return reason


# Methods that leave one number per sample of a batch (`x.flatten()`, `x.view(-1)`).
_PER_SAMPLE_METHODS = ("flatten", "view", "reshape", "squeeze")
# Per-sample quantities of a training step by their usual names.
_PER_SAMPLE_NAME = re.compile(r"adv|return|reward|loss|value|log_?prob|logp|td_?err|ratio")


def per_sample_values(ctx: FileContext, x: cst.BaseExpression, depth: int = 3) -> bool:
    """`x` holds one number per sample (so its std over every element is over the batch): a
    flattened tensor, or a per-sample quantity of a training step by its usual names
    (advantages, returns, rewards, losses, values, log-probabilities)."""
    x = strip_parens(x)
    if isinstance(x, cst.Call) and isinstance(x.func, cst.Attribute):
        if x.func.attr.value in _PER_SAMPLE_METHODS and (x.func.attr.value != "view" or node_code(x).endswith("(-1)")):
            return True
        return per_sample_values(ctx, x.func.value, depth)
    if isinstance(x, cst.Subscript):
        return per_sample_values(ctx, x.value, depth)
    if isinstance(x, cst.BinaryOperation):
        return per_sample_values(ctx, x.left, depth) or per_sample_values(ctx, x.right, depth)
    name = x.attr.value if isinstance(x, cst.Attribute) else x.value if isinstance(x, cst.Name) else ""
    if _PER_SAMPLE_NAME.search(name.lower()):
        return True
    if isinstance(x, cst.Name) and depth > 0:
        value = ctx.value_of(x, 1)
        return value is not x and per_sample_values(ctx, value, depth - 1)
    return False


__all__ = ["batched_iterable", "single_sample_batch", "per_sample_values"]
