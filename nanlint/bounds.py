"""Bounds that keep one hostile or huge file from ending the run.

- Nesting: LibCST's native parser overflows its stack (SIGSEGV, the whole process gone) on
  brackets nested ~1,500 deep. Python itself rejects more than 200 nested brackets, so such a
  file is a syntax error in every Python version: it is reported before LibCST sees it.
- Depth: deep but legal trees (a 5,000-term `a + b + ...` chain) are analysed on a thread with
  a large stack and a raised recursion limit, so that neither the walk nor a rule's recursion
  gives up on them.
- Time: the walk checks a deadline (`OutOfTime`); the caller reports the file as skipped.
"""

from __future__ import annotations

import re
import sys
import threading
from typing import Any, Callable, Optional, Tuple

# CPython's tokenizer: "too many nested parentheses" past this many open brackets.
MAX_BRACKET_DEPTH = 200
# The analysis thread's stack and recursion limit: enough for chains of ~50,000 operators.
_STACK_BYTES = 512 * 1024 * 1024
_RECURSION_LIMIT = 200_000

# What can hide a bracket: comments and string literals (prefixes are letters, skipped).
_SCAN = re.compile(
    r"""\#[^\r\n]*
      | '''(?:[^'\\]|\\.|'(?!''))*(?:'''|\Z)
      | \"\"\"(?:[^"\\]|\\.|"(?!""))*(?:\"\"\"|\Z)
      | '(?:[^'\\\r\n]|\\.)*'?
      | "(?:[^"\\\r\n]|\\.)*"?
      | [(\[{] | [)\]}]
      | \r\n | \r | \n""",
    re.X | re.S,
)


class OutOfTime(Exception):
    """The file's analysis ran past its time budget."""


class NestedTooDeeply(Exception):
    """LibCST ran out of recursion rendering the file (its positions, a node's text). Python
    3.12 caps C recursion whatever `sys.setrecursionlimit` says, and LibCST's code generator
    recurses through C once per level: a chain of a few hundred `+` is enough there. A
    condition of the file, so it ends the file's analysis instead of being one rule's bug."""


def max_bracket_depth(source: str) -> Tuple[int, int, int]:
    """The deepest bracket nesting outside strings and comments, and where it is first
    reached (1-based row and column)."""
    depth = deepest = 0
    row, line_start = 1, 0
    where = (1, 1)
    for m in _SCAN.finditer(source):
        text = m.group()
        c = text[0]
        if c in "([{":
            depth += 1
            if depth > deepest:
                deepest = depth
                where = (row, m.start() - line_start + 1)
        elif c in ")]}":
            depth = max(depth - 1, 0)
        elif c in "\r\n":
            row += 1
            line_start = m.end()
        elif c in "'\"":
            newlines = text.count("\n") + text.count("\r") - text.count("\r\n")
            if newlines:
                row += newlines
                line_start = m.start() + max(text.rfind("\n"), text.rfind("\r")) + 1
    return deepest, where[0], where[1]


def nesting_error(source: str) -> Optional[Tuple[int, int, str]]:
    """A syntax error for brackets nested deeper than Python allows, else None."""
    if source.count("(") + source.count("[") + source.count("{") <= MAX_BRACKET_DEPTH:
        return None  # cannot be that deep: skip the scan
    deepest, row, col = max_bracket_depth(source)
    if deepest <= MAX_BRACKET_DEPTH:
        return None
    try:
        compile(source, "<nanlint>", "exec", flags=0x400, dont_inherit=True)  # PyCF_ONLY_AST
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    else:
        return None  # the scan misread a string; Python accepts the file
    return row, col, f"too many nested parentheses ({deepest} levels; Python allows {MAX_BRACKET_DEPTH})"


def run_deep(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` on a thread with a large stack and recursion limit; its result or exception."""
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            outcome["error"] = exc

    limit = sys.getrecursionlimit()
    previous = threading.stack_size()
    try:
        threading.stack_size(_STACK_BYTES)
        sys.setrecursionlimit(max(limit, _RECURSION_LIMIT))
        worker = threading.Thread(target=target, name="nanlint-analysis", daemon=True)
        worker.start()
    finally:
        threading.stack_size(previous)
    try:
        worker.join()
    finally:
        sys.setrecursionlimit(limit)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
