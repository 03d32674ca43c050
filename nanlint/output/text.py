"""`path:line:col: CODE [*] message`, one line per finding (ruff's concise format); in a
notebook `path:cell N:line:col: ...`."""

from __future__ import annotations

from typing import List

import click

from ..core.diagnostics import Diagnostic


# After the code of a value finding with no evidence that the value gets there (`--latent`).
LATENT = "(latent)"


def line(d: Diagnostic, unsafe_fixes: bool, color: bool = False) -> str:
    fixable = d.is_fixable(unsafe_fixes)
    latent = f" {LATENT}" if d.latent else ""
    if not color:
        mark = " [*]" if fixable else ""
        return f"{d.where()}: {d.code}{mark}{latent} {d.message}"
    mark = (" " + click.style("[*]", fg="cyan") if fixable else "") + (
        " " + click.style(LATENT, fg="yellow") if d.latent else "")
    return (
        f"{click.style(d.where(), bold=True)}: {click.style(d.code, fg='red', bold=True)}"
        f"{mark} {d.message}"
    )


def render(diagnostics: List[Diagnostic], unsafe_fixes: bool = False, color: bool = False, **_) -> str:
    return "".join(line(d, unsafe_fixes, color) + "\n" for d in diagnostics)
