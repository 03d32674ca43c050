"""Bounds that keep one hostile or huge file from ending the run.

- Nesting: LibCST's native parser overflows its stack (SIGSEGV, the whole process gone) on
  brackets nested ~1,500 deep. Python itself rejects more than 200 nested brackets, so such a
  file is a syntax error in every Python version: it is reported before LibCST sees it.
- Expression depth (`parse_refusal`, which every LibCST parse of a whole file goes through):
  LibCST's parse time grows faster than the square of an expression's depth (a 1,000-term
  `a + b + ...` chain 0.6 s, 2,000 terms 11 s, 2,900 terms 27 s of CPU), and a parse is native
  code, which nothing in the process can interrupt. So a file with an expression nested more
  than `MAX_EXPRESSION_DEPTH` levels, or with more deep expressions than `MAX_DEEP_TOTAL`
  levels in all, is refused before LibCST sees it (NAN001, naming the limit). Real code stays
  far below: the deepest statement in the precision corpus and bench wheels is 88 levels, in
  the research repositories 160.
- Depth: deep but legal trees (a 900-term `a + b + ...` chain) are analysed on a thread with
  a large stack and a raised recursion limit, so that neither the walk nor a rule's recursion
  gives up on them.
- Time and memory (`FileBudget`): the analysis thread is watched from the calling thread,
  which interrupts it (an asynchronous exception, raised at its next bytecode wherever it is,
  a rule's own loop included) once it has used more CPU time than its budget, once the
  process has grown by more memory than its budget, or past a wall-clock backstop well above
  the CPU budget. CPU time, not wall time, decides: a busy machine does not change which
  files are skipped. The caller reports the file as skipped; the run goes on.
"""

from __future__ import annotations

import ast
import ctypes
import os
import re
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

# CPython's tokenizer: "too many nested parentheses" past this many open brackets.
MAX_BRACKET_DEPTH = 200
# The analysis thread's stack and recursion limit: enough for chains of ~50,000 operators.
_STACK_BYTES = 512 * 1024 * 1024
_RECURSION_LIMIT = 200_000

# What can hide a bracket: comments and string literals (prefixes are letters, skipped); a
# backslash continues the logical line.
_SCAN = re.compile(
    r"""\#[^\r\n]*
      | '''(?:[^'\\]|\\.|'(?!''))*(?:'''|\Z)
      | \"\"\"(?:[^"\\]|\\.|"(?!""))*(?:\"\"\"|\Z)
      | '(?:[^'\\\r\n]|\\.)*'?
      | "(?:[^"\\\r\n]|\\.)*"?
      | [(\[{] | [)\]}]
      | \\(?:\r\n|\r|\n)
      | \r\n | \r | \n""",
    re.X | re.S,
)

# The deepest expression a file may hold, and how many levels its expressions deeper than
# `DEEP_EXPRESSION` may add up to (ten expressions of 999 levels cost LibCST as much as one of
# 2,500). Measured (CPU, LibCST 1.9, Python 3.11): a chain `a[0][0]...` of 1,000 levels parses
# in 1.5 s, ten of 999 levels in 14 s (a `+` or call chain: 13 s, 10 s), one of 2,000 in 11 s;
# so a file under both limits costs LibCST at most ~7 s more than its size does. The deepest
# statement in the precision corpus and bench wheels (215 MB) is 88 levels, in the research
# repositories (210 MB) 160.
MAX_EXPRESSION_DEPTH = 1_000
DEEP_EXPRESSION = 100
MAX_DEEP_TOTAL = 5_000

# Everything that can nest an expression one level more, as characters (over-counted: a
# comparison or a slice colon counts too) and as keywords (counted as substrings, so an
# identifier that holds one counts too): an upper bound, computed at C speed.
_NESTING_CHARS = "-+*/%@&|^~<>.:=!)]}{"
_DROP_NESTING = str.maketrans("", "", _NESTING_CHARS)
_KEYWORDS = ("not", "and", "or", "if", "else", "lambda", "await", "in", "is", "for", "yield")

# The tokens of a closer bound: comments and strings (an f-string's text counts as a whole),
# brackets, what separates sibling expressions, and what nests one level more.
_NESTING_TOKEN = re.compile(
    r"""(?P<skip>\#[^\r\n]*)
      | (?P<str>(?P<prefix>[rRbBuUfF]{0,2})
           (?:'''(?:[^'\\]|\\.|'(?!''))*(?:'''|\Z)
            | \"\"\"(?:[^"\\]|\\.|"(?!""))*(?:\"\"\"|\Z)
            | '(?:[^'\\\r\n]|\\.)*'?
            | "(?:[^"\\\r\n]|\\.)*"?))
      | (?P<open>[(\[{])
      | (?P<close>[)\]}])
      | (?P<sep>[,;]|(?:\*\*|//|>>|<<|[-+*/%@&|^])?=(?!=))
      | (?P<op>\*\*|//|<<|>>|->|:=|[=!<>]=|[-+*/%@&|^~<>.:]
              |\b(?:not|and|or|if|else|lambda|await|in|is|for|yield)\b)""",
    re.X | re.S,
)


@dataclass(frozen=True)
class FileBudget:
    """What one file's analysis may use (0: no limit): `cpu` seconds of its own thread's CPU
    time (`file-timeout`), `memory` bytes of growth of the process (`file-memory`). The wall
    clock is a backstop: three times the CPU budget and 30 s more (a thread starved by
    other work still ends)."""

    cpu: float = 0.0
    memory: int = 0

    @property
    def wall(self) -> float:
        return 3 * self.cpu + 30.0 if self.cpu else 0.0

    def __bool__(self) -> bool:
        return bool(self.cpu or self.memory)


class OverBudget(BaseException):
    """The file's analysis ran past its budget. A BaseException, so that the `except Exception`
    a rule's hook is run under does not take it for the rule's own error."""

    def reason(self, budget: FileBudget) -> str:
        raise NotImplementedError


class OutOfTime(OverBudget):
    def reason(self, budget: FileBudget) -> str:
        return f"the analysis used more than {budget.cpu:g} s of CPU time (file-timeout)"


class OutOfWallTime(OverBudget):
    def reason(self, budget: FileBudget) -> str:
        return (f"the analysis ran for more than {budget.wall:g} s of wall time (the backstop of "
                f"file-timeout {budget.cpu:g} s)")


class OutOfMemory(OverBudget):
    def reason(self, budget: FileBudget) -> str:
        return f"the analysis grew past {budget.memory // (1024 * 1024)} MB of memory (file-memory)"


class NestedTooDeeply(Exception):
    """LibCST ran out of recursion rendering the file (its positions, a node's text). Python
    3.12 caps C recursion whatever `sys.setrecursionlimit` says, and LibCST's code generator
    recurses through C once per level: a chain of a few hundred `+` is enough there. A
    condition of the file, so it ends the file's analysis instead of being one rule's bug."""


def parse_refusal(source: str) -> Optional[Tuple[int, int, str]]:
    """Why LibCST must not parse `source` (row, 1-based column, message), or None: brackets
    nested deeper than Python allows (a syntax error), or expressions nested deeper than
    LibCST parses in bounded time. Every parse of a whole file goes through here
    (`parse_module`, and the engine before its own parse), so the lint of a file, of a
    module it imports and of a fixed text are bounded alike."""
    if len(source) <= DEEP_EXPRESSION:
        return None  # neither 200 brackets nor 100 levels fit
    brackets, row, col, deep = _scan(source)
    if brackets > MAX_BRACKET_DEPTH and _python_rejects(source):
        return row, col, f"SyntaxError: too many nested parentheses ({brackets} levels; Python allows {MAX_BRACKET_DEPTH})"
    if deep:
        return _depth_refusal(source, deep)
    return None


class Unparsable(ValueError):
    """`parse_module` refused a source (`parse_refusal`); `where` is (row, column, message)."""

    def __init__(self, where: Tuple[int, int, str]):
        super().__init__(where[2])
        self.where = where


def parse_module(source: str) -> Any:
    """`libcst.parse_module(source)`, once `parse_refusal` lets it: raises `Unparsable`
    before a parse that could not be bounded, LibCST's own error for a syntax error."""
    import libcst

    refused = parse_refusal(source)
    if refused is not None:
        raise Unparsable(refused)
    return libcst.parse_module(source)


@contextmanager
def quiet_python_parser() -> Iterator[None]:
    """Python's parser prints its SyntaxWarnings on stderr as it reads (`1if x`, an invalid
    escape: `<nanlint>:175: SyntaxWarning: invalid decimal literal`); nanlint's own reading
    of a file is no place for them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _python_rejects(source: str) -> bool:
    try:
        with quiet_python_parser():
            compile(source, "<nanlint>", "exec", flags=0x400, dont_inherit=True)  # PyCF_ONLY_AST
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    return False


def _scan(source: str) -> Tuple[int, int, int, list]:
    """One pass over `source`: the deepest bracket nesting outside strings and comments,
    where it is first reached (1-based row and column), and the logical lines (start, end
    offsets) that may hold an expression `DEEP_EXPRESSION` levels deep. A line is first
    bounded at C speed (its nesting characters and keywords), then, when that bound is not
    enough, token by token (`_depth_bound`)."""
    depth = deepest = where = 0
    begin = 0  # where the current logical line starts
    deep = []
    for m in _SCAN.finditer(source):
        c = source[m.start()]
        if c in "([{":
            depth += 1
            if depth > deepest:
                deepest, where = depth, m.start()
        elif c in ")]}":
            if depth:
                depth -= 1
        elif c in "\r\n" and not depth:  # the end of a logical line (strings, comments, continuations: no)
            if m.start() - begin > DEEP_EXPRESSION and _may_be_deep(source, begin, m.start()):
                deep.append((begin, m.start()))
            begin = m.end()
    if len(source) - begin > DEEP_EXPRESSION and _may_be_deep(source, begin, len(source)):
        deep.append((begin, len(source)))
    return (deepest, *_row_col(source, where), deep)


def _may_be_deep(source: str, start: int, end: int) -> bool:
    line = source[start:end]
    # The closer bound adds an atom and a tuple to the tokens: hence the 2. A keyword has two
    # letters at least: counted only where they could make the difference.
    bound = len(line) - len(line.translate(_DROP_NESTING)) + 2
    if bound <= DEEP_EXPRESSION < bound + len(line) // 2:
        bound += sum(line.count(k) for k in _KEYWORDS)
    return bound > DEEP_EXPRESSION and _depth_bound(line) > DEEP_EXPRESSION


def _depth_bound(text: str) -> int:
    """An upper bound on how deep LibCST nests the expressions of `text` (one logical line):
    within a bracket, the nesting tokens since the last separator, on top of the deepest
    bracket closed since or of an atom; a closing bracket is one level of its own (a call, a
    subscript)."""
    stack = []  # per open bracket, the enclosing one's (tokens, nested, deepest)
    ops, nested, top = 0, 1, 0
    for m in _NESTING_TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "op":
            ops += 1
        elif kind == "sep":
            top = max(top, ops + nested)
            ops, nested = 0, 1
        elif kind == "open":
            stack.append((ops, nested, top))
            ops, nested, top = 0, 1, 0
        elif kind == "close":
            inner = max(top, ops + nested) + 1
            ops, nested, top = stack.pop() if stack else (0, 1, 0)
            ops += 1
            nested = max(nested, inner)
        elif kind == "str" and "f" in m.group("prefix").lower():
            body = m.group()  # an f-string's fields are expressions: every nesting character counts
            ops += len(body) - len(body.translate(_DROP_NESTING)) + sum(body.count(k) for k in _KEYWORDS)
    deepest = max(top, ops + nested)
    for tokens, inner, level_top in stack:  # brackets never closed
        deepest = max(deepest, level_top, tokens + inner)
    return deepest + 1  # the statement's own tuple (`y = a, b + c`)


def _depth_refusal(source: str, lines: list) -> Optional[Tuple[int, int, str]]:
    """The refusal for `source` whose logical `lines` may hold deep expressions, from the
    depth of every statement in Python's own tree (its parser is fast and bounded)."""
    try:
        with quiet_python_parser():
            tree = ast.parse(source)
    except (RecursionError, MemoryError):
        row, col = _row_col(source, lines[0][0])
        return row, col, f"an expression nested deeper than Python's own parser allows ({_LIMIT}); split it"
    except (SyntaxError, ValueError) as exc:
        # Python rejects the file: where the bounds allow a deep expression, its error is
        # reported (LibCST, which reads a few newer forms, is not asked).
        bounds = [(_depth_bound(source[a:b]),) + _row_col(source, a) for a, b in lines]
        if _over_limits(bounds) is None:
            return None
        if isinstance(exc, SyntaxError) and exc.lineno:
            return exc.lineno, max(exc.offset or 1, 1), f"SyntaxError: {exc.msg}"
        return bounds[0][1], bounds[0][2], f"SyntaxError: {exc}"
    return _over_limits(_statement_depths(tree))


def _over_limits(depths: list) -> Optional[Tuple[int, int, str]]:
    """The refusal for statements of these (depth, row, column), if they are over a limit."""
    deepest = max(depths, key=lambda d: (d[0], -d[1], -d[2]))  # the first of the deepest
    if deepest[0] > MAX_EXPRESSION_DEPTH:
        return deepest[1], deepest[2], f"an expression nested {deepest[0]:,} levels deep ({_LIMIT}); split it"
    deep = sorted((d for d in depths if d[0] > DEEP_EXPRESSION), key=lambda d: d[1:])
    total = sum(d[0] for d in deep)
    if total > MAX_DEEP_TOTAL:
        return deep[0][1], deep[0][2], (
            f"{len(deep)} expressions nested more than {DEEP_EXPRESSION} levels deep, {total:,} levels in all "
            f"(nanlint reads up to {MAX_DEEP_TOTAL:,} such levels in one file: {_WHY_DEPTH}); split them")
    return None


_WHY_DEPTH = "LibCST's parse time grows faster than the square of the depth"
_LIMIT = f"nanlint reads expressions up to {MAX_EXPRESSION_DEPTH:,} levels deep: {_WHY_DEPTH}"


def _statement_depths(tree: ast.AST) -> list:
    """(depth, row, column) of every statement of a Python `ast` tree: how many expression
    levels its deepest expression nests, as LibCST nests them (`a and b and c` is two
    levels there, one in `ast`)."""
    out: list = []
    stack = [(tree, 0, None)]
    while stack:
        node, depth, statement = stack.pop()
        if isinstance(node, ast.stmt):
            statement = [0, node.lineno, node.col_offset + 1]
            out.append(statement)
            depth = 0
        elif isinstance(node, ast.expr):
            depth += len(node.values) - 1 if isinstance(node, ast.BoolOp) else 1
            if statement is not None and depth > statement[0]:
                statement[0] = depth
        stack.extend((child, depth, statement) for child in ast.iter_child_nodes(node))
    return [tuple(s) for s in out] or [(0, 1, 1)]


def _row_col(source: str, offset: int) -> Tuple[int, int]:
    """The 1-based row and column of `offset` (rows end at \\n, \\r\\n or \\r, as Python's)."""
    row = source.count("\n", 0, offset) + source.count("\r", 0, offset) - source.count("\r\n", 0, offset) + 1
    return row, offset - (max(source.rfind("\n", 0, offset), source.rfind("\r", 0, offset)) + 1) + 1


def run_deep(fn: Callable[..., Any], *args: Any, budget: Optional[FileBudget] = None,
             usage: Optional[Dict[str, float]] = None) -> Any:
    """`fn(*args)` on a thread with a large stack and recursion limit; its result or exception.
    With a `budget`, the thread is interrupted once it goes past it (`OverBudget` is raised
    here). `usage`, when given, receives the thread's CPU seconds and the largest growth of
    the process's memory seen while it ran (bytes; sampled)."""
    outcome: dict = {}
    # Held by the watcher while it reads the thread's CPU clock (the clock of a thread that
    # has exited is freed memory: reading it crashed the process), and taken by the thread
    # on its way out, so that it cannot exit in the middle of a read.
    gate = threading.Lock()

    def target() -> None:
        try:
            try:
                outcome["clock"] = _own_clock()  # asked here: this thread is surely alive
                outcome["value"] = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                outcome["error"] = exc
            finally:
                with gate:
                    outcome["cpu"] = time.thread_time()
                    outcome["done"] = True
        except OverBudget:
            pass  # the watcher's interrupt arrived just as the work ended: the result stands

    limit = sys.getrecursionlimit()
    previous = threading.stack_size()
    try:
        threading.stack_size(_STACK_BYTES)
        sys.setrecursionlimit(max(limit, _RECURSION_LIMIT))
        worker = threading.Thread(target=target, name="nanlint-analysis", daemon=True)
        worker.start()
    finally:
        threading.stack_size(previous)
    sent: Optional[type] = None
    try:
        if budget or usage is not None:
            sent = _watch(worker, budget or FileBudget(), outcome, gate, usage)
        else:
            worker.join()
    finally:
        sys.setrecursionlimit(limit)
    if "error" in outcome:
        raise outcome["error"]
    if "value" not in outcome:
        raise (sent or OutOfTime)()  # interrupted on its way out, before it could say so
    return outcome["value"]


# How often the watcher looks (seconds): an interrupted file overruns its budget by about this.
_TICK = 0.02


def _own_clock() -> Optional[int]:
    """The CPU-time clock of the calling thread, where the platform has one (Linux, the BSDs)."""
    try:
        return time.pthread_getcpuclockid(threading.get_ident())
    except (AttributeError, OSError, TypeError):
        return None


# Whether thread CPU clocks exist here (else the CPU budget is read on the wall clock).
_HAS_THREAD_CLOCKS = hasattr(time, "pthread_getcpuclockid")


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> Optional[int]:
    """This process's resident memory now (Linux: /proc/self/statm), or None."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def _interrupt(thread: threading.Thread, exc: type) -> None:
    """Raise `exc` in `thread` at its next bytecode."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc))


def _watch(worker: threading.Thread, budget: FileBudget, outcome: dict, gate: threading.Lock,
           usage: Optional[Dict[str, float]]) -> Optional[type]:
    """Watch `worker` until it ends; interrupt it once it goes past `budget`. Returns the
    exception type sent, if any."""
    start = time.monotonic()
    base = resident_bytes()
    peak = 0
    cpu = 0.0
    sent: Optional[type] = None
    # Without thread clocks, the CPU budget is read on the wall clock (the old behaviour).
    wall = budget.wall if _HAS_THREAD_CLOCKS else budget.cpu
    while worker.is_alive():
        worker.join(_TICK)
        grown = (resident_bytes() or 0) - base if base is not None else 0
        peak = max(peak, grown)
        with gate:
            # Done, or interrupted (it may then leave without saying done): never read the
            # clock of a thread that may have exited.
            if outcome.get("done") or sent is not None:
                continue
            clock = outcome.get("clock")
            if clock is not None:
                cpu = time.clock_gettime(clock)
            over = None
            if budget.cpu and clock is not None and cpu > budget.cpu:
                over = OutOfTime
            elif wall and time.monotonic() - start > wall:
                over = OutOfWallTime if _HAS_THREAD_CLOCKS else OutOfTime
            elif budget.memory and grown > budget.memory:
                over = OutOfMemory
            if over is not None:
                _interrupt(worker, over)
                sent = over
    worker.join()
    if usage is not None:
        usage["cpu"] = outcome.get("cpu", cpu)
        usage["memory"] = peak
    return sent
