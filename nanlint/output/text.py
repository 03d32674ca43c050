"""`path:line:col: CODE [*] message`, one line per finding (ruff's concise format)."""

from __future__ import annotations

from typing import List

from ..diagnostics import Diagnostic


def line(d: Diagnostic, unsafe_fixes: bool) -> str:
    mark = " [*]" if d.is_fixable(unsafe_fixes) else ""
    return f"{d.path}:{d.start.row}:{d.start.column}: {d.code}{mark} {d.message}"


def render(diagnostics: List[Diagnostic], unsafe_fixes: bool = False, **_) -> str:
    return "".join(line(d, unsafe_fixes) + "\n" for d in diagnostics)
