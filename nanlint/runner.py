"""Lint (and optionally fix) a set of paths: what `nanlint check` and `nanlint verify` share."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple, Type

from .config import Settings, relative_display, select_rules
from .diagnostics import Diagnostic
from .engine import io_error, lint_source
from .files import ChangedDuringRun, SourceError, discover, read_source, write_fixed
from .fixes import fix_source
from .text import split_lines


@dataclass
class RunResult:
    diagnostics: List[Diagnostic] = field(default_factory=list)
    # Errors that make the run fail (exit code 2): a fixed file that could not be written.
    errors: List[str] = field(default_factory=list)
    # A rule's internal error on one node: one line each on stderr; the findings (and so the
    # exit code) stand, since the error cost only that rule's piece at that node.
    internal_errors: List[str] = field(default_factory=list)
    # Warnings for stderr (a fix dropped because its result would not parse, a file skipped).
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
        lint_file(path, settings, rules, out, fix, unsafe_fixes, diff)
    out.diagnostics.sort(key=Diagnostic.sort_key)
    return out


def lint_file(path, settings: Settings, rules, out: RunResult, fix: bool, unsafe_fixes: bool, diff: bool) -> None:
    """Lint (and fix) one file into `out`; every failure is reported and costs only this file."""
    display = relative_display(path)
    too_big = _over_size_limit(path, settings.max_file_size)
    if too_big:
        out.warnings.append(f"{display}: skipped: {too_big}")
        return
    file_rules = settings.rules_for(path, rules)
    if path.suffix == ".ipynb":
        from .notebooks import check_notebook

        check_notebook(path, display, file_rules, settings.precision, out,
                       fix=fix, unsafe_fixes=unsafe_fixes, diff=diff)
        return
    try:
        source = read_source(path)
    except SourceError as exc:
        out.diagnostics.append(io_error(display, str(exc)))
        return
    if not (fix or diff):
        _collect(out, display, lint_source(display, source.text, file_rules, settings.precision, settings.file_timeout))
        return
    outcome = fix_source(display, source.text, file_rules, unsafe_fixes, settings.precision, settings.file_timeout)
    for d, reason in outcome.dropped:
        out.warnings.append(f"fix for {d.code} at {d.where()} dropped: {reason}")
    if outcome.source != source.text and not diff:
        try:
            write_fixed(path, source, outcome.source)
        except ChangedDuringRun as exc:
            # Nothing written: report the file as it was read.
            out.warnings.append(f"{display}: not fixed: {exc}")
            _collect(out, display, lint_source(display, source.text, file_rules, settings.precision,
                                               settings.file_timeout))
            return
        except OSError as exc:
            out.errors.append(f"cannot write {display}: {exc}")
            return
    if outcome.source != source.text:
        out.fixed += outcome.applied
        out.applied.extend((display, d) for d in outcome.applied_diagnostics)
        if diff:
            out.diffs.append(unified_diff(display, source.text, outcome.source))
    _collect(out, display, outcome.remaining)


def _collect(out: RunResult, display: str, result) -> None:
    out.diagnostics.extend(result.diagnostics)
    out.internal_errors.extend(result.errors)
    if result.skipped:
        out.warnings.append(f"{display}: skipped: {result.skipped}")


def _over_size_limit(path, limit: int) -> str:
    if not limit:
        return ""
    try:
        size = os.path.getsize(path)
    except OSError:
        return ""  # reading it reports the error
    if size <= limit:
        return ""
    return f"{_size(size)} is over max-file-size ({_size(limit)})"


def _size(n: int) -> str:
    for unit, scale in (("GB", 1024 ** 3), ("MB", 1024 ** 2), ("KB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


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
        _collect(out, display, lint_source(display, text, rules, settings.precision, settings.file_timeout))
        return out, text
    outcome = fix_source(display, text, rules, unsafe_fixes, settings.precision, settings.file_timeout)
    for d, reason in outcome.dropped:
        out.warnings.append(f"fix for {d.code} at {d.where()} dropped: {reason}")
    if outcome.source != text:
        out.fixed += outcome.applied
        out.applied.extend((display, d) for d in outcome.applied_diagnostics)
        if diff:
            out.diffs.append(unified_diff(display, text, outcome.source))
    _collect(out, display, outcome.remaining)
    return out, outcome.source
