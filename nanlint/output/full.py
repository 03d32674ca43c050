"""ruff's `full` format: each finding's line, then the source around it with a caret line
under the flagged range and the fix's title as help."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import click

from ..core.diagnostics import Diagnostic
from .text import line as headline

CONTEXT = 1  # lines shown before and after the flagged range
MAX_LINES = 6  # of a multi-line range


def _reader() -> Callable[[Diagnostic], Optional[List[str]]]:
    """Reads each file (or notebook cell) once, as it is now on disk."""
    cache: Dict[Tuple[str, Optional[int]], Optional[List[str]]] = {}

    def lines(d: Diagnostic) -> Optional[List[str]]:
        key = (d.path, d.cell)
        if key not in cache:
            text: Optional[str] = None
            if d.cell is not None:
                from ..run.notebooks import cell_text

                text = cell_text(d.path, d.cell)
            else:
                from ..core.source import SourceError, read_source

                try:
                    text = read_source(Path(d.path)).text
                except SourceError:
                    text = None
            cache[key] = text.splitlines() if text is not None else None
        return cache[key]

    return lines


def render(
    diagnostics: List[Diagnostic],
    unsafe_fixes: bool = False,
    color: bool = False,
    sources: Optional[Dict[str, str]] = None,
    **_,
) -> str:
    """`sources` maps a path to its text where the file is not on disk (stdin)."""
    read = _reader()
    blocks = []
    for d in diagnostics:
        lines = sources[d.path].splitlines() if sources and d.path in sources and d.cell is None else read(d)
        out = [headline(d, unsafe_fixes, color)]
        if lines and 0 < d.start.row <= len(lines):
            out.extend(_snippet(d, lines, color))
        else:
            out.extend(_notes(d, 1))
        blocks.append("\n".join(out) + "\n")
    return "\n".join(blocks)


def _snippet(d: Diagnostic, lines: List[str], color: bool) -> List[str]:
    first = max(1, d.start.row - CONTEXT)
    last_flagged = min(d.end.row if d.end.row >= d.start.row else d.start.row, len(lines), d.start.row + MAX_LINES - 1)
    last = min(len(lines), last_flagged + CONTEXT)
    width = len(str(last))
    gutter = " " * width + " |"
    out = [gutter]
    for row in range(first, last + 1):
        text = lines[row - 1].expandtabs(1)
        out.append(f"{row:>{width}} | {text}".rstrip())
        if row == d.start.row:
            start = d.start.column - 1
            end = d.end.column - 1 if d.end.row == d.start.row else len(text)
            carets = "^" * max(1, end - start)
            marker = f"{carets} {d.code}"
            if color:
                marker = click.style(marker, fg="red", bold=True)
            out.append(f"{gutter} {' ' * start}{marker}")
    out.append(gutter)
    return out + _notes(d, width)


def _notes(d: Diagnostic, width: int) -> List[str]:
    """The fix's title, then the evidence that the value gets there, step by step."""
    out = []
    if d.fix is not None:
        kind = "" if d.fix.applicability == "safe" else " (unsafe)"
        out.append(f"{' ' * width} = help: {d.fix.message}{kind}")
    out.extend(f"{' ' * width} = evidence: {step}" for step in d.evidence)
    return out
