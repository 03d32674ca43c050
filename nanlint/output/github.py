"""GitHub Actions workflow commands: each finding becomes an annotation on the PR diff."""

from __future__ import annotations

from typing import List

from ..diagnostics import Diagnostic


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def render(diagnostics: List[Diagnostic], **_) -> str:
    out = []
    for d in diagnostics:
        out.append(
            f"::error file={_escape_property(d.path)},line={d.start.row},col={d.start.column},"
            f"endLine={d.end.row},endColumn={d.end.column},title={_escape_property(d.code)}"
            f"::{_escape_data(f'{d.code} {d.message}')}\n"
        )
    return "".join(out)
