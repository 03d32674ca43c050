"""Rule triggers: whether a rule can fire on a source, decided on its text before any parse.

A rule's `triggers` is a regex that any file it can report on contains (`\\bexp\\b`). Most
files of a run are decided here, so the search itself must be cheap: Python's `re` scans
fast only for a pattern that starts with a literal, and a leading `\\b` (the natural way to
write a word) makes it try a match at every character, ~30x slower. So a trigger whose every
match starts with one of a few known literals is searched by finding those literals with
`str.find` and trying the regex only there (`match` at a position still sees the text before
it, so `\\b` and lookbehinds mean what they mean in `search`): exactly `search`'s answer.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

try:  # the parser behind `re` (private; any surprise falls back to a plain search)
    from re import _parser as _sre  # type: ignore[attr-defined]
except ImportError:  # Python < 3.11
    import sre_parse as _sre  # type: ignore[no-redef]

# Literal starts shorter than this occur too often to beat `re`'s own scan.
_MIN_START = 3
_MAX_STARTS = 32


class Trigger:
    """A compiled trigger: `search(source)` is `re.search(pattern, source) is not None`."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.regex = re.compile(pattern)
        self.starts = _starts(pattern)

    def search(self, source: str) -> bool:
        if self.starts is None:
            return self.regex.search(source) is not None
        match = self.regex.match
        find = source.find
        for start in self.starts:
            at = find(start)
            while at != -1:
                if match(source, at):
                    return True
                at = find(start, at + 1)
        return False


_COMPILED: Dict[str, Trigger] = {}


def trigger(pattern: str) -> Trigger:
    found = _COMPILED.get(pattern)
    if found is None:
        found = _COMPILED[pattern] = Trigger(pattern)
    return found


def firing(rules: Sequence, source: str) -> List:
    """The rules of `rules` that may fire on `source` (`Rule.may_fire`), each distinct
    trigger searched once (several rules share `\\blog\\b`)."""
    seen: Dict[str, bool] = {}
    out = []
    for rule in rules:
        pattern = rule.triggers
        if pattern is None or not rule.has_hooks():
            if rule.may_fire(source):
                out.append(rule)
            continue
        hit = seen.get(pattern)
        if hit is None:
            hit = seen[pattern] = trigger(pattern).search(source)
        if hit:
            out.append(rule)
    return out


def _starts(pattern: str) -> Optional[Tuple[str, ...]]:
    """Literals one of which every match of `pattern` starts with (the text it consumes
    first), when there are few and none is short; else None (search with `re`)."""
    try:
        parsed = _sre.parse(pattern)
        if parsed.state.flags & (re.IGNORECASE | re.LOCALE):
            return None
        starts, _ = _prefixes(list(parsed))
    except Exception:  # noqa: BLE001 - an unexpected parse tree: search plainly
        return None
    if not starts or len(starts) > _MAX_STARTS or min(len(s) for s in starts) < _MIN_START:
        return None
    # A start that begins with another start occurs only where that one does. Sorted by
    # length, then text: a set's order changes with the hash seed, the result must not.
    ordered = sorted(starts, key=lambda s: (len(s), s))
    kept: List[str] = []
    for s in ordered:
        if not any(s.startswith(k) for k in kept):
            kept.append(s)
    return tuple(kept)


_ZERO_WIDTH = {_sre.AT, _sre.ASSERT, _sre.ASSERT_NOT}


def _prefixes(items: Iterable) -> Tuple[Set[str], bool]:
    """(prefixes, complete): a set of literal strings one of which begins every match of
    `items`; `complete` when `items` are literals only (a match is exactly one of them, so
    what follows may extend it)."""
    out: Set[str] = {""}
    for op, av in items:
        if op is _sre.LITERAL:
            out = {p + chr(av) for p in out}
            continue
        if op in _ZERO_WIDTH and out == {""}:
            continue  # consumes nothing: the match still starts with what follows
        if op is _sre.BRANCH:
            alternatives = av[1]
        elif op is _sre.SUBPATTERN and not av[1] and not av[2]:  # no inline flags
            alternatives = [av[3]]
        else:
            return out, False
        found: Set[str] = set()
        complete = True
        for alternative in alternatives:
            sub, sub_complete = _prefixes(list(alternative))
            found |= sub
            complete = complete and sub_complete
        widened = {p + f for p in out for f in found}
        if len(widened) > _MAX_STARTS:
            return out, False
        out = widened
        if not complete:
            return out, False
    return out, True

