"""Formatters: text (default, concise), full (with source context), json (ruff's keys),
sarif (2.1.0), github (annotations)."""

from __future__ import annotations

from typing import Callable, Dict, List

from ..core.diagnostics import Diagnostic
from . import full, github, json_format, sarif, text

FORMATS: Dict[str, Callable[..., str]] = {
    "text": text.render,
    "concise": text.render,
    "full": full.render,
    "json": json_format.render,
    "sarif": sarif.render,
    "github": github.render,
}


def render(fmt: str, diagnostics: List[Diagnostic], **options) -> str:
    return FORMATS[fmt](diagnostics, **options)
