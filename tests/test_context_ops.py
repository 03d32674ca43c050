"""FileContext.op memoizes each node's op, and forgets it when an import changes a name."""

from __future__ import annotations

import libcst as cst

from nanlint.context import FileContext


def _context(source: str):
    module = cst.parse_module(source)
    return FileContext("m.py", source, module), module


def test_the_op_of_a_node_is_the_same_object_when_asked_again() -> None:
    ctx, module = _context("import torch\ny = torch.exp(x)\n")
    call = module.body[1].body[0].value
    first = ctx.op(call)
    assert first is not None and first.name == "exp"
    assert ctx.op(call) is first


def test_an_import_read_later_changes_what_a_call_is() -> None:
    # `exp` means nothing until the function-level import is met (the walk adds it then).
    ctx, module = _context("def f(x):\n    return exp(x)\n")
    call = module.body[0].body.body[0].body[0].value
    assert ctx.op(call) is None
    ctx.imports.add(cst.parse_statement("from torch import exp\n").body[0])
    found = ctx.op(call)
    assert found is not None and found.name == "exp"
