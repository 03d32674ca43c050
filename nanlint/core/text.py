"""Lines and offsets counted the way Python's tokenizer and LibCST count them.

`str.splitlines` also breaks at \\f, \\v, \\x1c-\\x1e, \\x85, \\u2028 and \\u2029, which are
ordinary characters inside a Python string or comment: a position computed from it points
into the wrong place of any line below such a character, and a fix written there corrupts the
file. Every row/column <-> offset conversion in nanlint goes through this module.
"""

from __future__ import annotations

import difflib
import re
from typing import List

from .diagnostics import Position

# A line ends at \r\n, \r or \n, and nowhere else.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def split_lines(text: str, keepends: bool = False) -> List[str]:
    """`text`'s lines as Python counts them (like splitlines, but only at \\r\\n, \\r, \\n)."""
    lines = _LINE.findall(text)
    if keepends:
        return lines
    return [line.rstrip("\r\n") for line in lines]


def line_starts(text: str) -> List[int]:
    """The offset where each line starts, plus one entry for the end of the text."""
    starts = [0]
    for line in split_lines(text, keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def offset(starts: List[int], text: str, pos: Position) -> int:
    """The offset of a 1-based (row, column) position, clamped to the text."""
    if pos.row - 1 >= len(starts):
        return len(text)
    return min(starts[pos.row - 1] + pos.column - 1, len(text))


def unified_diff(display: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(
        split_lines(before, keepends=True),
        split_lines(after, keepends=True),
        fromfile=f"a/{display}",
        tofile=f"b/{display}",
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)
