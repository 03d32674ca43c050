"""Where a value goes: whether any use of it can carry a gradient back into it.

`no_gradient` answers "does a gradient reach this expression?" from what flows into it (a
`no_grad` block, `.detach()`, a buffer). This module answers it from where the value flows
out: a distance used only to compare, to pick an index (`argmin`, `argmax`, `argsort`), to
index another tensor, or read as a Python number is never differentiated, whatever its own
inputs carry. Box assignment, nearest-neighbour search and matching costs are written so.

A use that passes the value on differentiably (arithmetic, a reduction, a reshape, an
argument of most calls) is followed up to its statement; a local name it is assigned to is
followed through every later read of that name in the same function (a few levels deep).
Anything else (a return, an attribute, a container, a call the table does not know) may
carry a gradient, and the answer is None.
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional

import libcst as cst

from ..context import FileContext, code_children

# Calls whose result carries no gradient back into their first operand.
_INDEX_PICKING = {"argmax", "argmin", "argsort", "searchsorted", "bucketize", "nonzero",
                  "count_nonzero", "isfinite", "isnan", "isinf", "sign", "eq", "ne", "lt",
                  "le", "gt", "ge", "equal", "allclose", "isclose"}
_NUMBER_READS = {"item", "tolist", "numpy", "detach", "detach_", "long", "int", "bool", "short", "byte"}
_PYTHON_NUMBERS = {"int", "float", "bool", "round", "len", "print", "str"}
# How deep local names are followed (a name assigned from a name assigned from ...).
_DEPTH = 3


def _parents(ctx: FileContext, scope: cst.CSTNode) -> Dict[int, cst.CSTNode]:
    """id(child) -> parent for every node under `scope` (built once per scope)."""

    def build() -> Dict[int, cst.CSTNode]:
        table: Dict[int, cst.CSTNode] = {}
        stack: List[cst.CSTNode] = [scope]
        while stack:
            node = stack.pop()
            for child in code_children(node):
                table[id(child)] = node
                stack.append(child)
        return table

    return ctx.derived(f"parents:{id(scope)}", build)


def _method(call: cst.Call) -> Optional[str]:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    if isinstance(func, cst.Name):
        return func.value
    return None


def _subtree(node: cst.CSTNode) -> List[cst.CSTNode]:
    """`node` and every node under it, in source order."""
    out: List[cst.CSTNode] = []
    stack: List[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(reversed(list(current.children)))
    return out


def _reads_of(scope: cst.CSTNode, name: str, after: cst.CSTNode) -> Iterable[cst.Name]:
    """Every `Name` node reading `name` in `scope` after the statement `after` that assigns
    it, in source order (a read before it saw another value)."""
    inside = {id(n) for n in _subtree(after)}
    seen_assignment = False
    for node in _subtree(scope):
        if node is after:
            seen_assignment = True
        if seen_assignment and id(node) not in inside and isinstance(node, cst.Name) and node.value == name:
            yield node


def _consumed(ctx: FileContext, node: cst.CSTNode, parents: Dict[int, cst.CSTNode],
              scope: cst.CSTNode, depth: int) -> Optional[str]:
    """Why no use of `node`'s value carries a gradient back, or None."""
    child = node
    while True:
        parent = parents.get(id(child))
        if parent is None:
            return None
        if isinstance(parent, (cst.Comparison, cst.ComparisonTarget)):
            return "its value is only compared"
        if isinstance(parent, (cst.SubscriptElement, cst.Index, cst.Slice)):
            return "its value is only used as an index"
        if isinstance(parent, cst.Attribute) and parent.value is child:
            grand = parents.get(id(parent))
            if isinstance(grand, cst.Call) and grand.func is parent:
                name = parent.attr.value
                if name in _NUMBER_READS or name in _INDEX_PICKING:
                    return f"its value is only read by `.{name}()`"
                child = grand  # a method that passes the value on (`.sum()`, `.view(...)`)
                continue
            if parent.attr.value == "data":
                return "its value is only read through `.data`"
            return None  # another attribute (`.grad`, `.shape`): not followed
        if isinstance(parent, cst.Arg):
            call = parents.get(id(parent))
            if not isinstance(call, cst.Call):
                return None
            name = _method(call)
            if name in _INDEX_PICKING or name in _PYTHON_NUMBERS:
                return f"its value is only read by `{name}`"
            child = call  # `torch.sqrt(...)`, `torch.min(...)`: passed on
            continue
        if isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation, cst.BooleanOperation)) or (
                isinstance(parent, cst.Subscript) and parent.value is child):
            child = parent  # arithmetic and selections pass the value on
            continue
        if isinstance(parent, cst.Call) and parent.func is child:
            return None  # calling the value
        if isinstance(parent, cst.Assign) and parent.value is child:
            targets = [t.target for t in parent.targets]
            if depth <= 0 or len(targets) != 1 or not isinstance(targets[0], cst.Name):
                return None
            name = targets[0].value
            reads = list(_reads_of(scope, name, parent))
            if not reads:
                return None  # assigned and never read here: returned or stored elsewhere
            if any(_consumed(ctx, read, parents, scope, depth - 1) is None for read in reads):
                return None
            return f"`{name}` is only compared, indexed with or read as a number"
        return None


def consumed_without_gradient(ctx: FileContext, node: cst.BaseExpression) -> Optional[str]:
    """Why no gradient flows back into `node` from where its value goes (compared, used as an
    index, picked by `argmin`, read with `.item()`, through local names), or None."""
    scope = ctx.enclosing_function() or ctx.module
    parents = _parents(ctx, scope)
    if id(node) not in parents:
        return None
    return _consumed(ctx, node, parents, scope, _DEPTH)


__all__ = ["consumed_without_gradient"]
