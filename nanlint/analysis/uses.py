"""Where a value goes: whether its uses can carry a gradient back into it, or can tell apart
the values near 0 that a form written by hand gets wrong.

`no_gradient` answers "does a gradient reach this expression?" from what flows into it (a
`no_grad` block, `.detach()`, a buffer). This module answers it from where the value flows
out: a distance used only to compare, to pick an index (`argmin`, `argmax`, `argsort`), to
index another tensor, or read as a Python number is never differentiated, whatever its own
inputs carry. Box assignment, nearest-neighbour search and matching costs are written so.

It also answers, for the forms that lose accuracy near 0 (`exp(x) - 1`, `log(1 + x)`, whose
absolute error stays a rounding step while their relative error near 0 is 100%), whether a
use makes that region irrelevant (`region_discarded`): the value is rounded to an integer (a
duration floored at 1), only compared with a threshold away from 0 (a clip fraction), or
clamped to a bound away from 0 that overwrites it.

A use that passes the value on (arithmetic, a reduction, a reshape, an argument of most
calls, an element of a list given to `torch.stack`) is followed up to its statement; a local
name it is assigned to is followed through every later read of that name in the same
function, up to a plain reassignment of the name in the same block. Anything else (a
return, an attribute, a container, a call the table does not know) may carry the value
elsewhere, and the answer is None.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple

import libcst as cst

from ..core.context import FileContext, code_children
from ..core.ops import number_value
from .callsites import names_in

# Calls whose result carries no gradient back into their first operand.
_INDEX_PICKING = {"argmax", "argmin", "argsort", "searchsorted", "bucketize", "nonzero",
                  "count_nonzero", "isfinite", "isnan", "isinf", "sign", "eq", "ne", "lt",
                  "le", "gt", "ge", "equal", "allclose", "isclose"}
_NUMBER_READS = {"item", "tolist", "numpy", "detach", "detach_", "long", "int", "bool", "short", "byte"}
_PYTHON_NUMBERS = {"int", "float", "bool", "round", "len", "print", "str"}
# How many local names deep a use is followed (a name assigned from a name assigned from ...).
_DEPTH = 12


# ---------------------------------------------------------------------- the function's index


class _Scope(NamedTuple):
    """A function's nodes in source order, for finding the reads of a name after a statement."""

    parents: Dict[int, cst.CSTNode]  # id(child) -> parent
    index: Dict[int, int]  # id(node) -> position in source order
    end: Dict[int, int]  # id(node) -> the position just past its subtree
    names: Dict[str, List[cst.Name]]  # the Name nodes of each name, in source order


def _scope(ctx: FileContext, scope: cst.CSTNode) -> _Scope:
    """The index of `scope` (built once per scope)."""

    def build() -> _Scope:
        parents: Dict[int, cst.CSTNode] = {}
        index: Dict[int, int] = {}
        end: Dict[int, int] = {}
        names: Dict[str, List[cst.Name]] = {}
        # Depth first, children in field order (source order for the statements and the
        # expressions that matter here); a node's subtree spans index[node] to end[node].
        stack: List[Tuple[cst.CSTNode, bool]] = [(scope, False)]
        while stack:
            node, done = stack.pop()
            if done:
                end[id(node)] = len(index)
                continue
            index[id(node)] = len(index)
            if isinstance(node, cst.Name):
                names.setdefault(node.value, []).append(node)
            stack.append((node, True))
            children = list(code_children(node))
            for child in children:
                parents[id(child)] = node
            stack.extend((child, False) for child in reversed(children))
        return _Scope(parents, index, end, names)

    return ctx.derived(f"uses:{id(scope)}", build)


def _is_read(name: cst.Name, parents: Dict[int, cst.CSTNode]) -> bool:
    """A Name node that reads a variable (not the `attr` of `x.attr`, not a keyword, not an
    assignment's target)."""
    parent = parents.get(id(name))
    if isinstance(parent, cst.Attribute) and parent.attr is name:
        return False
    if isinstance(parent, cst.Arg) and parent.keyword is name:
        return False
    if isinstance(parent, (cst.AssignTarget, cst.Param)):
        return False
    return True


def _reassigns(statement: cst.Assign, name: str) -> bool:
    return len(statement.targets) == 1 and isinstance(statement.targets[0].target, cst.Name) \
        and statement.targets[0].target.value == name


def _same_block(a: cst.CSTNode, b: cst.CSTNode, parents: Dict[int, cst.CSTNode]) -> bool:
    """Two small statements on lines of the same block (straight-line code between them)."""
    line_a, line_b = parents.get(id(a)), parents.get(id(b))
    return line_a is not None and line_b is not None and parents.get(id(line_a)) is parents.get(id(line_b))


def _reads_of(index: _Scope, name: str, after: cst.Assign) -> Iterator[cst.Name]:
    """Every read of `name` after the statement `after` that assigns it, in source order, up
    to (and including the right-hand side of) a plain reassignment of the name in the same
    block: later reads see the new value. (A read before `after` saw another value.)"""
    start = index.end[id(after)]
    stop = None
    for node in index.names.get(name, ()):
        at = index.index[id(node)]
        if at < start or (stop is not None and at >= stop):
            continue
        parent = index.parents.get(id(node))
        if isinstance(parent, cst.AssignTarget):
            statement = index.parents.get(id(parent))
            if stop is None and isinstance(statement, cst.Assign) and _reassigns(statement, name) \
                    and _same_block(statement, after, index.parents):
                stop = index.end[id(statement)]
            continue
        if _is_read(node, index.parents):
            yield node


# ---------------------------------------------------------------------- following the uses

# What a step up from a node to its parent gives: the use ends here (with why), the value
# goes on as `node` in `state`, or the use may carry it elsewhere.
_Done = Tuple[str, str]
_Up = Tuple[str, cst.CSTNode, str]


class _Uses:
    """Follows every use of a value up the tree and through local names; `step` says what each
    parent does with it."""

    def __init__(self, ctx: FileContext, scope: cst.CSTNode):
        self.ctx = ctx
        self.index = _scope(ctx, scope)
        self.memo: Dict[Tuple[int, str], Optional[str]] = {}

    def step(self, parent: cst.CSTNode, child: cst.CSTNode, state: str):
        """("done", why), ("up", node, state) or None."""
        raise NotImplementedError

    def all_uses(self, node: cst.CSTNode, state: str, depth: int = _DEPTH) -> Optional[str]:
        """Why no use of `node`'s value (in `state`) matters, or None."""
        child = node
        while True:
            parent = self.index.parents.get(id(child))
            if parent is None:
                return None
            if isinstance(parent, cst.Assign) and parent.value is child:
                return self._through_name(parent, state, depth)
            if isinstance(parent, cst.Element):
                # An element of a list or tuple given straight to a call (`torch.stack([a, b])`).
                display = self.index.parents.get(id(parent))
                arg = self.index.parents.get(id(display))
                if isinstance(display, (cst.List, cst.Tuple)) and isinstance(arg, cst.Arg) \
                        and arg.value is display:
                    child = display
                    continue
                return None
            taken = self.step(parent, child, state)
            if taken is None:
                return None
            if taken[0] == "done":
                return taken[1]
            _, child, state = taken

    def _through_name(self, statement: cst.Assign, state: str, depth: int) -> Optional[str]:
        targets = [t.target for t in statement.targets]
        if depth <= 0 or len(targets) != 1 or not isinstance(targets[0], cst.Name):
            return None
        key = (id(statement), state)
        if key not in self.memo:
            self.memo[key] = None  # (a use that reaches its own assignment again may carry it)
            name = targets[0].value
            reads = list(_reads_of(self.index, name, statement))
            whys = [self.all_uses(read, state, depth - 1) for read in reads]
            if reads and all(whys):
                self.memo[key] = whys[0] if len(set(whys)) == 1 else f"`{name}` is {self.summary}"
        return self.memo[key]

    summary = "used only where its value does not matter"


def _method(call: cst.Call) -> Optional[str]:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    if isinstance(func, cst.Name):
        return func.value
    return None


class _GradientUses(_Uses):
    summary = "only compared, indexed with or read as a number"

    def step(self, parent, child, state):
        parents = self.index.parents
        if isinstance(parent, (cst.Comparison, cst.ComparisonTarget)):
            return "done", "its value is only compared"
        if isinstance(parent, (cst.SubscriptElement, cst.Index, cst.Slice)):
            return "done", "its value is only used as an index"
        if isinstance(parent, cst.Attribute) and parent.value is child:
            grand = parents.get(id(parent))
            if isinstance(grand, cst.Call) and grand.func is parent:
                name = parent.attr.value
                if name in _NUMBER_READS or name in _INDEX_PICKING:
                    return "done", f"its value is only read by `.{name}()`"
                return "up", grand, state  # a method that passes the value on (`.sum()`, `.view(...)`)
            if parent.attr.value == "data":
                return "done", "its value is only read through `.data`"
            return None  # another attribute (`.grad`, `.shape`): not followed
        if isinstance(parent, cst.Arg):
            call = parents.get(id(parent))
            if not isinstance(call, cst.Call):
                return None
            name = _method(call)
            if name in _INDEX_PICKING or name in _PYTHON_NUMBERS:
                return "done", f"its value is only read by `{name}`"
            return "up", call, state  # `torch.sqrt(...)`, `torch.min(...)`: passed on
        if isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation, cst.BooleanOperation)) or (
                isinstance(parent, cst.Subscript) and parent.value is child):
            return "up", parent, state  # arithmetic and selections pass the value on
        return None  # called, returned, stored, yielded


def consumed_without_gradient(ctx: FileContext, node: cst.BaseExpression) -> Optional[str]:
    """Why no gradient flows back into `node` from where its value goes (compared, used as an
    index, picked by `argmin`, read with `.item()` or `.detach()`, through local names and the
    lists given to `torch.stack`/`torch.cat`), or None."""
    walk = _GradientUses(ctx, ctx.enclosing_function() or ctx.module)
    if id(node) not in walk.index.parents:
        return None
    return walk.all_uses(node, "")


# ---------------------------------------------------------------------- the region near 0

# Rounding to the nearest integer or toward 0 sends every value within a rounding step of 0 to
# 0, whatever its relative error; `floor` and `ceil` tell a tiny value from 0 (`ceil(1e-9)` is
# 1, `ceil(0.0)` is 0), so they need a floor of at least 1 after them (`max(1, ceil(d))`).
_ROUNDING_METHODS = {"round", "trunc", "fix", "long", "int", "short"}
_ROUNDING_FUNCTIONS = {"round", "int", "torch.round", "torch.trunc", "torch.fix", "math.trunc"}
_FLOOR_CEIL_METHODS = {"floor", "ceil"}
_FLOOR_CEIL_FUNCTIONS = {"torch.floor", "torch.ceil", "math.floor", "math.ceil"}
_INTEGER_DTYPES = {"torch.long", "torch.int", "torch.int64", "torch.int32", "torch.int16", "torch.int8",
                   "torch.uint8", "torch.short"}
# Methods and functions that keep each value as it is (a view, a copy, a cast to a float type,
# the absolute value), and reductions that add absolute errors no larger than the values'.
_KEEPING_METHODS = {"abs", "float", "double", "half", "bfloat16", "squeeze", "unsqueeze", "view", "reshape",
                    "flatten", "contiguous", "clone", "cpu", "cuda", "detach", "t", "transpose", "permute",
                    "sum", "mean", "neg"}
_KEEPING_FUNCTIONS = {"abs", "float", "torch.abs", "torch.squeeze", "torch.flatten", "torch.neg"}
_THRESHOLD_METHODS = {"gt", "ge", "lt", "le", "greater", "greater_equal", "less", "less_equal"}
_ORDERING = (cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual)

# States of a value followed towards a consumer.
_VALUE = "value"  # as computed: the values near 0 still count
_FLOORED_OR_CEILED = "floor/ceil"  # after `floor`/`ceil`: needs a floor of at least 1


class _RegionUses(_Uses):
    """Follows a value whose entries within `near` of 0 are inaccurate (a rounding step of
    absolute error, a relative error of up to 100%) to consumers that discard them."""

    summary = "only rounded, compared with a threshold or clamped away from 0"

    def __init__(self, ctx: FileContext, scope: cst.CSTNode, near: float, value: cst.BaseExpression):
        super().__init__(ctx, scope)
        self.near = near
        self.reads = names_in(value)

    def _name(self, func: cst.BaseExpression) -> Optional[str]:
        """`torch.round`, `math.ceil`, or a builtin's bare name (`round`, `max`)."""
        full = self.ctx.qualname(func)
        if full is not None:
            return full
        return func.value if isinstance(func, cst.Name) else None

    def _threshold(self, other: cst.BaseExpression) -> bool:
        """A bound a comparison tests against, at least `near` away from 0: a number written
        so, or settings and numbers combined by arithmetic (`clip`, `1.5 * self.target_kl`)."""
        c = number_value(other)
        if c is not None:
            return abs(c) >= self.near
        return self._setting(other)

    def _setting(self, other: cst.BaseExpression) -> bool:
        """Names, attributes and numbers combined by arithmetic (`hop`, `1.5 * self.kl`), none
        of them read by the value followed: a setting, not a tensor that shrinks with it."""
        if names_in(other) & self.reads:
            return False  # `(exp(x) - 1) / x`: the divisor shrinks with the value
        stack: List[cst.CSTNode] = [other]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.BinaryOperation):
                stack += [node.left, node.right]
            elif isinstance(node, cst.UnaryOperation):
                stack.append(node.expression)
            elif isinstance(node, (cst.Name, cst.Attribute)):
                if self.ctx.qualname(node) is not None:
                    return False  # `torch.pi`, an imported constant: not a setting
            elif number_value(node) is None:
                return False  # a call, a subscript: a tensor, not a setting
        return True

    def _bounds(self, call: cst.Call, child: cst.CSTNode) -> Tuple[Optional[float], Optional[float]]:
        """(lower, upper) numeric bounds a clamp of `child` (or `max(c, child)`) puts on it."""
        name = self._name(call.func)
        if name in ("max", "min") and len(call.args) == 2 and not any(a.keyword or a.star for a in call.args):
            first, second = (a.value for a in call.args)
            if child is not first and child is not second:
                return None, None
            c = number_value(second if first is child else first)
            return (c, None) if name == "max" else (None, c)
        op = self.ctx.op(call)
        if op is None or op.name not in ("clamp", "clamp_min", "clamp_max") or not op.args or op.args[0] is not child:
            return None, None
        lower = op.args[1] if len(op.args) > 1 and op.name != "clamp_max" else op.kwargs.get("min")
        upper = op.args[1] if op.name == "clamp_max" and len(op.args) > 1 else (
            op.args[2] if len(op.args) > 2 else op.kwargs.get("max"))
        lo = number_value(lower) if lower is not None else None
        hi = number_value(upper) if upper is not None else None
        return lo, hi

    def _clamped(self, call: cst.Call, child: cst.CSTNode, state: str):
        lo, hi = self._bounds(call, child)
        if state == _FLOORED_OR_CEILED:
            if lo is not None and lo >= 1:
                return "done", f"rounded, then floored at {lo:g}"
            return None
        if lo is not None and lo >= self.near:
            return "done", f"clamped to at least {lo:g}, which overwrites the values near 0"
        if hi is not None and hi <= -self.near:
            return "done", f"clamped to at most {hi:g}, which overwrites the values near 0"
        return None

    def _rounded(self, name: str, state: str, call: cst.Call):
        if state != _VALUE:
            return "up", call, state  # a cast after `floor`/`ceil`: still needs its floor
        return "done", f"rounded to an integer (`{name}`)"

    def _compared(self, other: cst.BaseExpression, state: str):
        if state == _VALUE and self._threshold(other):
            return "done", "only compared with a threshold"
        return None

    def step(self, parent, child, state):
        parents = self.index.parents
        if isinstance(parent, cst.ComparisonTarget) and parent.comparator is child:
            comparison = parents.get(id(parent))
            if isinstance(comparison, cst.Comparison) and len(comparison.comparisons) == 1 \
                    and isinstance(parent.operator, _ORDERING):
                return self._compared(comparison.left, state)
            return None
        if isinstance(parent, cst.Comparison) and parent.left is child:
            if len(parent.comparisons) == 1 and isinstance(parent.comparisons[0].operator, _ORDERING):
                return self._compared(parent.comparisons[0].comparator, state)
            return None
        if state == _VALUE and isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Minus):
            return "up", parent, state
        if state == _VALUE and isinstance(parent, cst.BinaryOperation):
            if isinstance(parent.operator, (cst.Add, cst.Subtract, cst.Multiply)) or (
                    isinstance(parent.operator, cst.Divide) and parent.left is child
                    and number_value(parent.right) != 0 and self._setting(parent.right)):
                return "up", parent, state  # the absolute error stays a rounding step
            return None  # a divisor that shrinks with it, an exponent: the error grows
        if isinstance(parent, cst.Subscript) and parent.value is child:
            return "up", parent, state
        if isinstance(parent, cst.Attribute) and parent.value is child:
            call = parents.get(id(parent))
            if not (isinstance(call, cst.Call) and call.func is parent):
                return None
            method = parent.attr.value
            if method in _ROUNDING_METHODS:
                return self._rounded(f".{method}()", state, call)
            if method in ("to", "type") and call.args and self.ctx.qualname(call.args[0].value) in _INTEGER_DTYPES:
                return self._rounded(f".{method}(...)", state, call)
            if method in _FLOOR_CEIL_METHODS and state == _VALUE:
                return "up", call, _FLOORED_OR_CEILED
            if method in _THRESHOLD_METHODS and len(call.args) == 1:
                return self._compared(call.args[0].value, state)
            if method in ("clamp", "clip", "clamp_min", "clamp_max"):
                return self._clamped(call, child, state)
            if method in _KEEPING_METHODS or (method in ("to", "type") and state == _FLOORED_OR_CEILED):
                return "up", call, state
            return None
        if isinstance(parent, cst.Arg) and parent.value is child and not parent.star:
            call = parents.get(id(parent))
            if not isinstance(call, cst.Call) or not call.args or call.args[0] is not parent:
                if isinstance(call, cst.Call) and self._name(call.func) in ("max", "min"):
                    return self._clamped(call, child, state)
                return None
            name = self._name(call.func)
            if name in _ROUNDING_FUNCTIONS and (name != "round" or len(call.args) == 1):
                return self._rounded(f"{name}", state, call)
            if name in _FLOOR_CEIL_FUNCTIONS and state == _VALUE:
                return "up", call, _FLOORED_OR_CEILED
            if name in ("max", "min", "torch.clamp", "torch.clip", "torch.clamp_min", "torch.clamp_max"):
                return self._clamped(call, child, state)
            if name is not None and name.startswith("torch.") and name[6:] in _THRESHOLD_METHODS \
                    and len(call.args) == 2:
                return self._compared(call.args[1].value, state)
            if name in _KEEPING_FUNCTIONS or (name == "int" and state == _FLOORED_OR_CEILED):
                return "up", call, state
            return None
        return None


def region_discarded(ctx: FileContext, node: cst.BaseExpression, near: float) -> Optional[str]:
    """Why the entries of `node`'s value within `near` of 0, which a hand-written `exp(x) - 1`
    or `log(1 + x)` gets wrong by up to 100% (its absolute error stays a rounding step), make no
    difference where every use of it goes, or None:
    - rounded to an integer: `round`, `trunc`, `int()`, `.long()` send them to 0 either way;
      `floor` and `ceil` with a floor of at least 1 after them (`max(1, ceil(d))`, a duration);
    - compared with a threshold at least `near` from 0 (`(ratio - 1).abs() > clip`, as a mask
      or a count): the error moves only values within a rounding step of the threshold;
    - clamped to a bound at least `near` from 0 (`clamp(min=0.5)`), which overwrites them.
    Additions, products, selections and casts on the way keep the error a rounding step."""
    walk = _RegionUses(ctx, ctx.enclosing_function() or ctx.module, near, node)
    if id(node) not in walk.index.parents:
        return None
    return walk.all_uses(node, _VALUE)


__all__ = ["consumed_without_gradient", "region_discarded"]
