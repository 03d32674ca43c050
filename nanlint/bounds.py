"""Bounds that keep one hostile or huge file from ending the run.

- Nesting: LibCST's native parser overflows its stack (SIGSEGV, the whole process gone) on
  brackets nested ~1,500 deep. Python itself rejects more than 200 nested brackets, so such a
  file is a syntax error in every Python version: it is reported before LibCST sees it.
- Depth: deep but legal trees (a 5,000-term `a + b + ...` chain) are analysed on a thread with
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

import ctypes
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

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
