"""How a fix writes its replacement: the source text of a node exactly as written, an edit
that keeps comments and drops parentheses that only enclosed the replaced expression, and
a comparison key for two operands. Shared by every rule that offers a rewrite."""

from __future__ import annotations

import re
from typing import Dict, Optional, Tuple

import libcst as cst

from ..core.context import FileContext, is_atom, node_code, strip_parens
from ..core.diagnostics import Edit, Position

Env = Optional[Dict]


def follow_local(
    ctx: FileContext, node: cst.BaseExpression, env: Env, via_local: bool
) -> Tuple[cst.BaseExpression, Env, bool]:
    value, new_env = ctx.resolve(node, env)
    if value is not node:
        return value, new_env, True
    return node, env, via_local


def operand_key(ctx: FileContext, node: cst.BaseExpression, env: Env) -> str:
    """The expression's meaning for comparing two operands (aliases and locals resolved,
    layout ignored)."""
    return re.sub(r"\s+", "", node_code(ctx.canonical(strip_parens(node), env)))


def _drop_comma(text: str) -> str:
    """`text` without its first comma outside a comment (a trailing argument comma)."""
    in_comment = False
    for i, ch in enumerate(text):
        if ch == "#":
            in_comment = True
        elif ch == "\n":
            in_comment = False
        elif ch == "," and not in_comment:
            return text[:i] + text[i + 1:]
    return text


def replace_edit(ctx: FileContext, node: cst.BaseExpression, text: str) -> Edit:
    """Replace `node` by `text` (always a call, an atom).

    - Comments between a one-argument call's parentheses and its argument are kept, with
      the parentheses: `torch.log(  # note` + newline + `F.softmax(x, -1))` becomes
      `(  # note` + newline + `F.log_softmax(x, -1))`.
    - Parentheses that only enclosed the replaced expression go with it:
      `alpha * (torch.exp(x) - 1)` becomes `alpha * torch.expm1(x)`; they stay where a
      keyword or name touches them (`return(torch.exp(x) - 1)`).
    """
    start, end = ctx.span(node)
    if isinstance(node, cst.Call) and len(node.args) == 1 and not node.args[0].keyword:
        source = ctx.source
        func_end = ctx.span(node.func)[1]
        arg_start, arg_end = ctx.span(node.args[0].value)
        head = source[ctx.offset(func_end): ctx.offset(arg_start)]
        tail = source[ctx.offset(arg_end): ctx.offset(end)]
        if "#" in head or "#" in tail:
            head = head[head.index("(") + 1:]
            return ctx.replace(node, f"({head}{text}{_drop_comma(tail)}")
    count = len(getattr(node, "lpar", ()))
    if count and count == len(getattr(node, "rpar", ())):
        first, last = ctx.line_text(start.row), ctx.line_text(end.row)
        i, j = start.column - 1, end.column - 1
        for _ in range(count):
            i = len(first[:i].rstrip(" \t"))
            j = len(last) - len(last[j:].lstrip(" \t"))
            if i == 0 or first[i - 1] != "(" or j >= len(last) or last[j] != ")":
                break
            i, j = i - 1, j + 1
        else:
            if not (i > 0 and (first[i - 1].isalnum() or first[i - 1] == "_")):
                return Edit(Position(start.row, i + 1), Position(end.row, j + 1), text)
    return ctx.replace(node, text)


def source_replacing(ctx: FileContext, outer: cst.CSTNode, inner: cst.CSTNode, text: str) -> str:
    """The source of `outer` as written (`source_of`), with the part `inner` spans replaced by
    `text`: `F.softmax(x, -1)[idx]` with its call renamed is `F.log_softmax(x, -1)[idx]`."""
    start, end = ctx.span(outer)
    inner_start, inner_end = ctx.span(inner)
    source = ctx.source
    return (source[ctx.offset(start): ctx.offset(inner_start)] + text
            + source[ctx.offset(inner_end): ctx.offset(end)])


def source_of(ctx: FileContext, node: cst.CSTNode) -> str:
    """The source text of a node of the file, exactly as written (continuation lines keep
    their indentation; the node's own enclosing parentheses are not included)."""
    start, end = ctx.span(node)
    text = ctx.source[ctx.offset(start): ctx.offset(end)]
    if isinstance(node, (cst.Tuple, cst.GeneratorExp)) and node.lpar:
        return f"({text})"  # these parentheses are part of the value: `dim=(1, 2)`
    return text


def atom_source(ctx: FileContext, node: cst.BaseExpression) -> str:
    """`source_of`, parenthesized where a method call on it needs it (`(a + b).log1p()`)."""
    text = source_of(ctx, node)
    return text if is_atom(strip_parens(node)) else f"({text})"


__all__ = ["follow_local", "operand_key", "replace_edit", "source_of", "source_replacing", "atom_source"]
