"""Lint (and optionally fix) a set of paths: what `nanlint check` and `nanlint verify` share."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple, Type

from .config import Settings, relative_display, select_rules
from .diagnostics import Diagnostic
from .engine import io_error, lint_source
from .files import SourceError, discover, read_source, write_atomic
from .fixes import fix_source


@dataclass
class RunResult:
    diagnostics: List[Diagnostic] = field(default_factory=list)
    # Internal errors (a rule crashed, a file could not be written): exit code 2.
    errors: List[str] = field(default_factory=list)
    # Warnings for stderr (a fix dropped because its result would not parse).
    warnings: List[str] = field(default_factory=list)
    fixed: int = 0
    diffs: List[str] = field(default_factory=list)
    # (display path, finding) for every fix applied (`--show-fixes`).
    applied: List[Tuple[str, Diagnostic]] = field(default_factory=list)


def run(
    paths: Sequence[str],
    settings: Settings,
    fix: bool = False,
    unsafe_fixes: bool = False,
    diff: bool = False,
) -> RunResult:
    """Lint every file under `paths`. With `fix`, write fixed files atomically (only those
    that change); with `diff`, collect unified diffs and write nothing."""
    rules = select_rules(settings)
    out = RunResult()
    for path in discover(list(paths) or ["."], settings):
        display = relative_display(path)
        if path.suffix == ".ipynb":
            from .notebooks import check_notebook

            check_notebook(path, display, settings.rules_for(path, rules), settings.precision, out,
                           fix=fix, unsafe_fixes=unsafe_fixes, diff=diff)
            continue
        try:
            source = read_source(path)
        except SourceError as exc:
            out.diagnostics.append(io_error(display, str(exc)))
            continue
        file_rules = settings.rules_for(path, rules)
        if not (fix or diff):
            result = lint_source(display, source.text, file_rules, settings.precision)
            out.diagnostics.extend(result.diagnostics)
            out.errors.extend(result.errors)
            continue
        outcome = fix_source(display, source.text, file_rules, unsafe_fixes, settings.precision)
        out.errors.extend(outcome.remaining.errors)
        for d, reason in outcome.dropped:
            out.warnings.append(
                f"fix for {d.code} at {d.path}:{d.start.row}:{d.start.column} dropped: {reason}"
            )
        if outcome.source != source.text:
            out.fixed += outcome.applied
            out.applied.extend((display, d) for d in outcome.applied_diagnostics)
            if diff:
                out.diffs.append(unified_diff(display, source.text, outcome.source))
            else:
                try:
                    write_atomic(path, outcome.source, source.encoding)
                except OSError as exc:
                    out.errors.append(f"cannot write {display}: {exc}")
                    continue
        out.diagnostics.extend(outcome.remaining.diagnostics)
    out.diagnostics.sort(key=Diagnostic.sort_key)
    return out


def unified_diff(display: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{display}",
        tofile=f"b/{display}",
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def stdin_display(stdin_filename: Optional[str]) -> str:
    """How a source read from stdin is named in the report."""
    return stdin_filename if stdin_filename is not None else "-"


def run_stdin(
    text: str,
    stdin_filename: Optional[str],
    settings: Settings,
    fix: bool = False,
    unsafe_fixes: bool = False,
    diff: bool = False,
) -> Tuple[RunResult, str]:
    """Lint a source read from stdin (editors, formatters-on-save), named `stdin_filename`
    for the settings (per-file-ignores, excludes with --force-exclude) and the report.
    Returns the result and the source after fixes (the input unchanged without `fix`)."""
    from pathlib import Path

    out = RunResult()
    display = stdin_display(stdin_filename)
    rules: List[Type] = select_rules(settings)
    if stdin_filename is not None:
        path = Path(stdin_filename)
        if settings.force_exclude and settings.excluded(path):
            return out, text
        rules = settings.rules_for(path, rules)
    if display.endswith(".ipynb"):
        from .notebooks import fix_notebook_text

        new_text = fix_notebook_text(display, text, rules, settings.precision, out,
                                     fix=fix or diff, unsafe_fixes=unsafe_fixes, diff=diff)
        return out, new_text
    if not (fix or diff):
        result = lint_source(display, text, rules, settings.precision)
        out.diagnostics.extend(result.diagnostics)
        out.errors.extend(result.errors)
        return out, text
    outcome = fix_source(display, text, rules, unsafe_fixes, settings.precision)
    out.errors.extend(outcome.remaining.errors)
    for d, reason in outcome.dropped:
        out.warnings.append(f"fix for {d.code} at {d.where()} dropped: {reason}")
    if outcome.source != text:
        out.fixed += outcome.applied
        out.applied.extend((display, d) for d in outcome.applied_diagnostics)
        if diff:
            out.diffs.append(unified_diff(display, text, outcome.source))
    out.diagnostics.extend(outcome.remaining.diagnostics)
    return out, outcome.source
