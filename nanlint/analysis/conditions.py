"""Which conditions the node being visited runs under, read from the enclosing statements.

The flow (flow.py) refines values by conditions it can interpret (`n > 0`, `mask.any()`);
these helpers answer the coarser question rules also ask: does any enclosing test, earlier
early-exit test or assert mention one of these variables? (A guard the flow cannot read,
such as `if valid_count:` on another name for the same count, still counts.)
"""

from __future__ import annotations

from typing import Iterable, Set

import libcst as cst

from ..core.context import FileContext, dotted_name

_EXIT = (cst.Return, cst.Raise, cst.Continue, cst.Break)


def is_where(ctx: FileContext, node: cst.Call) -> bool:
    if ctx.qualname(node.func) == "torch.where":
        return True
    return isinstance(node.func, cst.Attribute) and node.func.attr.value == "where" and ctx.qualname(node.func.value) is None


def names_read(ctx: FileContext, node: cst.CSTNode, follow: bool = True, depth: int = 3) -> Set[str]:
    """The variables an expression reads (`x`, `self.scale`), through local assignments."""
    found: Set[str] = set()

    def walk(n: cst.CSTNode, d: int) -> None:
        if isinstance(n, cst.Call):
            # The callee is a function, not data; its receiver (`x.abs()`) is data.
            if isinstance(n.func, cst.Attribute):
                q = ctx.qualname(n.func)
                if q is None or not q.startswith("torch"):
                    walk(n.func.value, d)
            for a in n.args:
                walk(a.value, d)
            return
        name = dotted_name(n) if isinstance(n, (cst.Name, cst.Attribute)) else None
        if name is not None:
            q = ctx.qualname(n)
            if q is not None and (q.startswith("torch") or q.startswith("math")):
                return
            if name in ("self", "True", "False", "None"):
                return
            found.add(name)
            if follow and d > 0 and isinstance(n, cst.Name):
                value = ctx.value_of(n, 1)
                if value is not n:
                    walk(value, d - 1)
            return
        for child in n.children:
            walk(child, d)

    walk(node, depth)
    return found


def tests_in_scope(ctx: FileContext) -> Iterable[cst.BaseExpression]:
    """Conditions the current expression runs under: enclosing `if`/`elif`/`while`/ternary
    tests and `torch.where` conditions, and earlier `if ...: return/continue/raise` and
    `assert` statements in every enclosing block."""
    stack = ctx.stack
    for i, n in enumerate(stack):
        if isinstance(n, (cst.If, cst.While)) and i + 1 < len(stack):
            yield n.test
        elif isinstance(n, cst.IfExp):
            yield n.test
        elif isinstance(n, cst.Call) and is_where(ctx, n) and n.args:
            yield n.args[0].value
        body = getattr(n, "body", None)
        if isinstance(body, (list, tuple)) and i + 1 < len(stack):
            child = stack[i + 1]
            for stmt in body:
                if stmt is child:
                    break
                if isinstance(stmt, cst.If):
                    inner = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else stmt.body.body
                    last = inner[-1] if inner else None
                    smalls = last.body if isinstance(last, cst.SimpleStatementLine) else []
                    if any(isinstance(s, _EXIT) for s in smalls):
                        yield stmt.test
                elif isinstance(stmt, cst.SimpleStatementLine):
                    for s in stmt.body:
                        if isinstance(s, cst.Assert):
                            yield s.test


def guarded_by_condition(ctx: FileContext, names: Set[str]) -> bool:
    for test in tests_in_scope(ctx):
        if names_read(ctx, test) & names:
            return True
    return False


def runs_before_here(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`node` runs before the node being visited, on the way to it: it sits inside it, or in a
    statement that comes before the visited one's, in a block enclosing it (possibly inside an
    `if` there), not in a sibling branch (`if m: s = s.masked_fill(..) ... else: softmax(s)`)."""
    start, _ = ctx.span(node)
    here, here_end = ctx.span(ctx.stack[-1])
    if here <= start < here_end:
        return True  # inside the visited node itself
    if not start < here:
        return False
    for block in reversed(ctx.stack):
        body = getattr(block, "body", None)
        if not isinstance(body, (list, tuple)):
            continue
        for stmt in body:
            s_start, s_end = ctx.span(stmt)
            if s_start <= start and start < s_end:
                # The deepest block on the path holding `node`: the statement holding it
                # must not itself lie on the path (then `node` is in another branch of it).
                return not any(stmt is n for n in ctx.stack)
    return True


__all__ = ["is_where", "names_read", "tests_in_scope", "guarded_by_condition", "runs_before_here"]
