"""Line and column of LibCST nodes, as LibCST's `PositionProvider` gives them, at a fraction
of its cost.

`PositionProvider` generates the module's code once and records each node's range on the
way; it costs about one and a half times the parse itself (measured on timm and
torchmetrics), mostly for what it does per token and per node: a regular expression split of
every token, two `CodePosition` objects and a `CodeRange` per node, a generator-based context
manager per syntactic range. This state records the same ranges, as tuples, with the same
hooks the provider uses (`before_codegen`, `after_codegen`, `record_syntactic_position`): a
token without a line break only moves the column, and `CodeRange` objects are made only for
the nodes a caller looks up.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator, List, Optional, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState  # the hooks the provider itself uses
from libcst.metadata import CodePosition, CodeRange

_LINE_BREAK = re.compile(r"\r\n?|\n")

# (start line, start column, end line, end column): lines 1-based, columns 0-based.
Span = Tuple[int, int, int, int]


class PositionMap:
    """The ranges of a module's nodes, looked up by node (as `PositionProvider`'s mapping)."""

    __slots__ = ("_spans",)

    def __init__(self, spans: Dict[cst.CSTNode, Span]):
        self._spans = spans

    def __getitem__(self, node: cst.CSTNode) -> CodeRange:
        sl, sc, el, ec = self._spans[node]
        return CodeRange(CodePosition(sl, sc), CodePosition(el, ec))

    def get(self, node: cst.CSTNode, default: Any = None) -> Any:
        return self[node] if node in self._spans else default

    def __contains__(self, node: object) -> bool:
        return node in self._spans

    def __len__(self) -> int:
        return len(self._spans)


class _Syntactic:
    """`record_syntactic_position` as a plain context manager (no generator per use)."""

    __slots__ = ("state", "node", "start_node", "end_node", "line", "column")

    def __init__(self, state: "_PositionState", node, start_node, end_node):
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node

    def __enter__(self) -> None:
        self.line, self.column = self.state.line, self.state.column

    def __exit__(self, *exc: Any) -> bool:
        state = self.state
        spans = state.spans
        sl, sc = self.line, self.column
        el, ec = state.line, state.column
        if self.start_node is not None:
            sl, sc = spans[self.start_node][:2]
        if self.end_node is not None:
            el, ec = spans[self.end_node][2:]
        spans[self.node] = (sl, sc, el, ec)
        return False


class _PositionState(CodegenState):
    """A codegen state that follows line and column and records every node's range, as
    `PositionProvidingCodegenState` does."""

    def __init__(self, module: cst.Module):
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.line = 1
        self.column = 0
        self.spans: Dict[cst.CSTNode, Span] = {}
        self._starts: List[Tuple[int, int]] = []

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        if "\n" in value or "\r" in value:
            pieces = _LINE_BREAK.split(value)
            self.line += len(pieces) - 1
            self.column = len(pieces[-1])
        else:
            self.column += len(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._starts.append((self.line, self.column))

    def after_codegen(self, node: cst.CSTNode) -> None:
        sl, sc = self._starts.pop()
        if node not in self.spans:  # a syntactic range recorded inside wins
            self.spans[node] = (sl, sc, self.line, self.column)

    def record_syntactic_position(self, node: cst.CSTNode, *, start_node: Optional[cst.CSTNode] = None,
                                  end_node: Optional[cst.CSTNode] = None) -> Iterator[None]:
        return _Syntactic(self, node, start_node, end_node)  # type: ignore[return-value]


def fast_position_map(module: cst.Module) -> PositionMap:
    """Every node's range in `module`, equal to `PositionProvider`'s."""
    state = _PositionState(module)
    module._codegen(state)
    return PositionMap(state.spans)


__all__ = ["PositionMap", "fast_position_map"]
