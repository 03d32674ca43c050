"""Formatters: text (default), json (ruff's keys), sarif (2.1.0), github (annotations)."""

from __future__ import annotations

from typing import Callable, Dict, List

from ..diagnostics import Diagnostic
from . import github, json_format, sarif, text

FORMATS: Dict[str, Callable[..., str]] = {
    "text": text.render,
    "json": json_format.render,
    "sarif": sarif.render,
    "github": github.render,
}


def render(fmt: str, diagnostics: List[Diagnostic], **options) -> str:
    return FORMATS[fmt](diagnostics, **options)
