"""GitHub Actions workflow commands: each finding becomes an annotation on the PR diff."""

from __future__ import annotations

from typing import List

from ..core.diagnostics import Diagnostic

_LATENT = " (latent)"


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def render(diagnostics: List[Diagnostic], **_) -> str:
    out = []
    for d in diagnostics:
        # In a notebook the annotation points into the file; the message names the cell.
        start, end = d.file_start or d.start, d.file_end or d.end
        cell = f"cell {d.cell}:{d.start.row}:{d.start.column}: " if d.cell is not None else ""
        out.append(
            f"::error file={_escape_property(d.path)},line={start.row},col={start.column},"
            f"endLine={end.row},endColumn={end.column},title={_escape_property(d.code)}"
            f"::{_escape_data(cell + d.code + (_LATENT if d.latent else '') + ' ' + d.message)}\n"
        )
    return "".join(out)
