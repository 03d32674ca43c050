"""What the language server offers, computed without pygls: findings for a document's text,
and the text edits of a fix, of "fix all safe" and of "ignore CODE on this line".

Positions here are nanlint's (1-based rows and columns, in characters); lsp.py converts them
into the client's units."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..run.config import ConfigError, Settings, load_settings, select_rules
from ..core.bounds import FileBudget
from ..core.diagnostics import Diagnostic, Edit, Position
from ..lint.engine import lint_source
from ..lint.fixes import fix_source
from ..run.project_precision import ProjectPrecisionFinder
from ..run.project_precision import resolve as resolve_precision

LINTED_SUFFIXES = (".py", ".pyi")


@dataclass
class Linted:
    diagnostics: List[Diagnostic]
    # A config that could not be read: reported once to the user, the defaults used meanwhile.
    config_error: Optional[str] = None
    rules: Tuple = ()
    precision: Any = None  # a precision.TrainingPrecision, or None
    # The project files the document imports (what its lint knows of them).
    imported: Optional[Dict[str, Any]] = None
    budget: Optional[FileBudget] = None  # the settings' per-file budget, for the fixes too


def settings_for(path: Path) -> Tuple[Settings, Optional[str]]:
    """The settings of the nearest pyproject.toml with a [tool.nanlint] table above `path`."""
    try:
        return load_settings(start=path.parent), None
    except ConfigError as exc:
        return Settings(), str(exc)


# How each project trains, searched once for the server's life (a trainer that starts using
# float16 is seen after a restart, as a changed config is).
_PROJECT_PRECISIONS = ProjectPrecisionFinder()


def lint_document(path: Path, text: str) -> Linted:
    settings, error = settings_for(path)
    rules = tuple(settings.rules_for(path, select_rules(settings)))
    imported = imported_modules(path, text)
    precision = resolve_precision(settings.precision, path, _PROJECT_PRECISIONS, settings)
    budget = settings.file_budget()
    result = lint_source(path.name, text, rules, precision, budget, imported=imported)
    return Linted(result.diagnostics, error, rules, precision, imported, budget)


def imported_modules(path: Path, text: str) -> Dict[str, Any]:
    """The project files the document's text imports, as `nanlint check` hands them to a
    file's lint (their summaries are computed on demand and kept for the server's life,
    by content: an edited model file is summarized again)."""
    from ..analysis.project import ProjectIndex

    index = ProjectIndex()
    try:
        index.note_content(path, text.encode("utf-8", "surrogateescape"))
        return index.module_refs(path)
    except (OSError, ValueError):
        return {}


def fix_all_safe(path: Path, text: str, linted: Linted) -> Optional[str]:
    """The document with every safe fix applied (None when nothing changes)."""
    outcome = fix_source(path.name, text, linted.rules, unsafe=False, precision=linted.precision,
                         budget=linted.budget, imported=linted.imported)
    return outcome.source if outcome.source != text else None


_NOQA = re.compile(r"#\s*noqa:\s*(?P<codes>[A-Za-z]+[0-9]+(?:\s*,\s*[A-Za-z]+[0-9]+)*)\s*$", re.I)


def ignore_edit(text: str, d: Diagnostic) -> Optional[Edit]:
    """`# noqa: CODE` at the end of the finding's first line (where suppression looks), or
    the code added to the `# noqa: ...` already there. None where a comment cannot go (a
    line continued with a backslash)."""
    lines = text.splitlines()
    if not 0 < d.start.row <= len(lines):
        return None
    line = lines[d.start.row - 1]
    body = line.rstrip()
    if body.endswith("\\"):
        return None
    end = Position(d.start.row, len(line) + 1)
    existing = _NOQA.search(body)
    if existing:
        return Edit(Position(d.start.row, existing.end("codes") + 1), Position(d.start.row, existing.end("codes") + 1), f", {d.code}")
    if re.search(r"#\s*noqa\s*$", body):
        return None  # already suppresses every code
    return Edit(Position(d.start.row, len(body) + 1), end, f"  # noqa: {d.code}")
