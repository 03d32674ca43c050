"""Apply fixes to a source text until nothing changes; never produce code that does not parse."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, List, Sequence, Set, Tuple, Type

from ..core.bounds import FileBudget, parse_module
from ..core.diagnostics import Diagnostic, Edit, Fix
from .engine import LintResult, lint_source
from ..rules import Rule
from ..core.text import line_starts, offset

MAX_ROUNDS = 20


@dataclass
class FixOutcome:
    source: str
    applied: int
    remaining: LintResult
    # Fixes dropped because the result would not parse: (diagnostic, reason).
    dropped: List[Tuple[Diagnostic, str]] = field(default_factory=list)
    # The findings whose fixes were applied, in order (`--show-fixes`).
    applied_diagnostics: List[Diagnostic] = field(default_factory=list)


_LAYOUT = re.compile(r"\s+")
_offsets = line_starts
_offset = offset


class SpanMismatch(ValueError):
    """An edit's span does not hold the code it was made for."""


def _same_code(a: str, b: str) -> bool:
    # LibCST renders a multi-line node with its own indentation, and its position excludes
    # the node's own parentheses: compare what is neither layout nor those parentheses.
    return _LAYOUT.sub("", a).strip("()") == _LAYOUT.sub("", b).strip("()")


def apply_edits(source: str, edits: Sequence[Edit]) -> str:
    """Apply non-overlapping edits (identical duplicates, like one import added by two
    fixes, count once). Raises SpanMismatch where an edit's span does not hold the code the
    edit was made for: everything outside the spans is copied byte for byte."""
    starts = _offsets(source)
    spans = []
    seen: Set[Tuple[int, int, str]] = set()
    for e in edits:
        key = (_offset(starts, source, e.start), _offset(starts, source, e.end), e.content)
        if e.expected is not None and not _same_code(source[key[0]:key[1]], e.expected):
            raise SpanMismatch(
                f"the span {e.start.row}:{e.start.column}-{e.end.row}:{e.end.column} "
                "does not hold the code the fix was made for"
            )
        if key not in seen:
            seen.add(key)
            spans.append(key)
    spans.sort(key=lambda s: (s[0], s[1]))
    out = []
    cursor = 0
    for start, end, content in spans:
        if start < cursor:
            raise ValueError("overlapping edits")
        out.append(source[cursor:start])
        out.append(content)
        cursor = end
    out.append(source[cursor:])
    return "".join(out)


def _overlaps(a: Fix, taken: List[Tuple[int, int, str]], starts, source) -> bool:
    for e in a.edits:
        s, t = _offset(starts, source, e.start), _offset(starts, source, e.end)
        for s2, t2, content in taken:
            if (s, t, e.content) == (s2, t2, content):
                continue  # the same edit: shared, not conflicting
            if s == t and s2 == t2:
                if s == s2:
                    return True  # two different insertions at one point: order unclear
                continue
            if s < t2 and s2 < t or (s == t and s2 < s < t2) or (s2 == t2 and s < s2 < t):
                return True
    return False


def _spans_hold(fix: Fix, starts: List[int], source: str) -> bool:
    for e in fix.edits:
        if e.expected is not None:
            held = source[_offset(starts, source, e.start):_offset(starts, source, e.end)]
            if not _same_code(held, e.expected):
                return False
    return True


def parses(source: str) -> bool:
    try:
        parse_module(source)  # bounded: a fix never makes the file too deep to parse
        return True
    except Exception:
        return False


def fix_source(
    path: str,
    source: str,
    rule_classes: Sequence[Type[Rule]],
    unsafe: bool,
    precision: Optional[str] = None,
    budget: Optional[FileBudget] = None,
    max_rounds: int = MAX_ROUNDS,
    imported: Optional[Dict[str, Any]] = None,
) -> FixOutcome:
    """Lint, apply the fixes that do not conflict, re-lint, until a fixed point. A file
    whose analysis is cut short (`result.skipped`) is not fixed: its findings may be partial."""
    applied = 0
    dropped: List[Tuple[Diagnostic, str]] = []
    rejected: Set[Tuple[str, Tuple[Edit, ...]]] = set()
    fixed_findings: List[Diagnostic] = []
    result = lint_source(path, source, rule_classes, precision, budget=budget, imported=imported)
    for _ in range(max_rounds):
        if result.skipped:
            break
        candidates = [
            d
            for d in result.diagnostics
            if d.is_fixable(unsafe) and (d.code, d.fix.edits) not in rejected
        ]
        if not candidates:
            break
        starts = _offsets(source)
        chosen: List[Diagnostic] = []
        taken: List[Tuple[int, int, str]] = []
        # Outer expressions first: a fix that contains another applies now, the inner
        # one is found again in the rewritten text next round.
        candidates.sort(key=lambda d: (d.start.row, d.start.column, -d.end.row, -d.end.column))
        for d in candidates:
            if not _spans_hold(d.fix, starts, source):
                rejected.add((d.code, d.fix.edits))
                dropped.append((d, "its edit does not point at the code it was made for (a nanlint bug: please report it)"))
                continue
            if _overlaps(d.fix, taken, starts, source):
                continue
            chosen.append(d)
            taken.extend(
                (_offset(starts, source, e.start), _offset(starts, source, e.end), e.content)
                for e in d.fix.edits
            )
        new_source = apply_edits(source, [e for d in chosen for e in d.fix.edits])
        if not parses(new_source):
            # Find the culprits one by one; keep the rest.
            new_source = source
            good: List[Diagnostic] = []
            for d in chosen:
                trial = apply_edits(source, [e for g in good + [d] for e in g.fix.edits])
                if parses(trial):
                    good.append(d)
                    new_source = trial
                else:
                    rejected.add((d.code, d.fix.edits))
                    dropped.append((d, "the fixed code would not parse"))
            chosen = good
        if not chosen or new_source == source:
            break
        applied += len(chosen)
        fixed_findings.extend(chosen)
        source = new_source
        result = lint_source(path, source, rule_classes, precision, budget=budget, imported=imported)
    return FixOutcome(source=source, applied=applied, remaining=result, dropped=dropped,
                      applied_diagnostics=fixed_findings)
