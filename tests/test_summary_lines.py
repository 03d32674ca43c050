"""Evidence lines of an imported file's summary come from the positions of single top-level
statements (summaries._StatementLines); they must be the lines the whole module's positions
give, for every kind of statement and where a def's header is not unique in the text."""

from __future__ import annotations

import libcst as cst
import pytest

from nanlint.analysis import summaries

SOURCE = '''\
# a header comment
"""Module docstring
def forward(x):
    (a def header inside a string: the header of `forward` below is not unique)
"""
import torch

SCALE = torch.tensor(2.0).log()


@torch.no_grad()
def helper(x):
    return torch.softmax(
        x,
        dim=-1,
    )


async def fetch(x):
    return torch.log(x)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.proj(x)
        return torch.sigmoid(y) * SCALE


def forward(x):
    return helper(x) / x.sum()
'''


def expressions(module: cst.Module):
    found = []

    class Collect(cst.CSTVisitor):
        def on_visit(self, node):
            if isinstance(node, cst.BaseExpression):
                found.append(node)
            return True

    module.visit(Collect())
    return found


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("first", [None, "helper", "fetch", "Net", "forward"])
def test_statement_lines_match_the_whole_module_positions(newline, first):
    fa = summaries._analysis_of("nets.py", SOURCE.replace("\n", newline))
    nodes = expressions(fa.ctx.module)
    tokens = [fa.token(node) for node in nodes]
    lines = summaries._StatementLines(fa)
    got = [lines.line(token, first) for token in tokens]
    want = [fa.ctx.span(node)[0].row for node in nodes]
    assert got == want
    assert len(set(want)) > 15  # the nodes span the whole file
    assert lines.exact  # \r\n line ends too


def test_a_lone_carriage_return_uses_the_whole_module_positions():
    fa = summaries._analysis_of("nets.py", "import torch\rdef f(x):\r    return torch.log(x)\r")
    nodes = expressions(fa.ctx.module)
    lines = summaries._StatementLines(fa)
    assert not lines.exact
    assert [lines.line(fa.token(n)) for n in nodes] == [fa.ctx.span(n)[0].row for n in nodes]
