"""One file of a run: read it, lint (and fix) it, write it back, into a RunResult. The
pool's workers (jobs) and the runner both call `lint_file`, so it lives below both."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..analysis.precision import TrainingPrecision
from ..core.bounds import FileBudget
from ..core.diagnostics import Diagnostic
from ..core.text import unified_diff
from ..lint.engine import io_error, lint_source
from ..lint.fixes import fix_source
from ..core.source import ChangedDuringRun, SourceError, read_source, write_fixed


@dataclass(frozen=True)
class Mode:
    """What every file of the run gets done to it."""

    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False
    max_file_size: int = 0  # bytes; 0: no limit
    budget: FileBudget = FileBudget()  # one file's analysis: CPU seconds, memory


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
    # Files (and notebooks) the run was asked to lint: 0 when the paths held none.
    files: int = 0
    diffs: List[str] = field(default_factory=list)
    # (display path, finding) for every fix applied (`--show-fixes`).
    applied: List[Tuple[str, Diagnostic]] = field(default_factory=list)

    def absorb(self, other: "RunResult") -> None:
        """Add a file's result to the run's (callers keep file order)."""
        self.diagnostics.extend(other.diagnostics)
        self.errors.extend(other.errors)
        self.internal_errors.extend(other.internal_errors)
        self.warnings.extend(other.warnings)
        self.fixed += other.fixed
        self.files += other.files
        self.diffs.extend(other.diffs)
        self.applied.extend(other.applied)



def lint_file(path: Path, display: str, file_rules, mode: Mode, out: RunResult,
              imported: Optional[Dict] = None, precision: Optional[TrainingPrecision] = None,
              ) -> Tuple[Optional[str], Optional[str]]:
    """Lint (and fix) one file into `out`; every failure is reported and costs only this file.
    Returns the sha256 of the bytes linted and of the bytes written (None where there are none),
    so a cache can store the result under the content it describes."""
    too_big = _over_size_limit(path, mode.max_file_size)
    if too_big:
        out.warnings.append(f"{display}: skipped: {too_big}")
        return None, None
    if path.suffix == ".ipynb":
        from .notebooks import check_notebook

        check_notebook(path, display, file_rules, precision, out,
                       fix=mode.fix, unsafe_fixes=mode.unsafe_fixes, diff=mode.diff, budget=mode.budget)
        return None, None
    try:
        source = read_source(path)
    except SourceError as exc:
        out.diagnostics.append(io_error(display, str(exc)))
        return None, None
    content = hashlib.sha256(source.data).hexdigest()
    lint = dict(budget=mode.budget, imported=imported)
    if not (mode.fix or mode.diff):
        collect(out, display, lint_source(display, source.text, file_rules, precision, **lint))
        return content, None
    outcome = fix_source(display, source.text, file_rules, mode.unsafe_fixes, precision, **lint)
    for d, reason in outcome.dropped:
        out.warnings.append(f"fix for {d.code} at {d.where()} dropped: {reason}")
    written = None
    if outcome.source != source.text and not mode.diff:
        try:
            write_fixed(path, source, outcome.source)
        except ChangedDuringRun as exc:
            # Nothing written: report the file as it was read.
            out.warnings.append(f"{display}: not fixed: {exc}")
            collect(out, display, lint_source(display, source.text, file_rules, precision, **lint))
            return content, None
        except OSError as exc:
            out.errors.append(f"cannot write {display}: {exc}")
            return content, None
        written = hashlib.sha256(outcome.source.encode(source.encoding)).hexdigest()
    if outcome.source != source.text:
        out.fixed += outcome.applied
        out.applied.extend((display, d) for d in outcome.applied_diagnostics)
        if mode.diff:
            out.diffs.append(unified_diff(display, source.text, outcome.source))
    collect(out, display, outcome.remaining)
    return content, written


def collect(out: RunResult, display: str, result) -> None:
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
