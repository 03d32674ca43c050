"""Lint files one by one or in a pool of worker processes, with identical results.

Each file is read, linted (or fixed) and dropped in the process that handles it: a worker
returns only diagnostics, messages and the file's content hash, never a syntax tree, so the
memory of a run is bounded by its largest file, not by the number of files. The pool uses
the `spawn` start method (the same on every platform, and safe after torch has started
threads in `nanlint verify`); results are put back in file order, so the output does not
depend on the number of jobs or on which worker finished first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from . import collector
from .one_file import Mode, RunResult, lint_file

# Below this much source a pool costs more to start (about half a second per worker, each
# importing nanlint and LibCST) than it saves.
POOL_MIN_BYTES = 200_000
# Files sent to a worker at once: few enough to balance the load, enough to keep the
# per-message cost small; the largest files go first and alone.
CHUNK_FILES = 8
CHUNK_BYTES = 256_000


def usable_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass
class FileTask:
    index: int
    path: str
    display: str
    # Rule classes (a worker receives them by reference: module and name).
    rules: Tuple[Any, ...]
    size: int = 0
    # Summaries of the project modules this file imports, by the module as spelled there.
    imported: Dict[str, Any] = field(default_factory=dict)
    # The half precision the file's project trains in (`precision.TrainingPrecision`), if any.
    precision: Any = None


@dataclass
class FileOutcome:
    index: int
    result: RunResult = field(default_factory=RunResult)
    # sha256 of the bytes linted (None: unreadable). With --fix, `written_hash` is the
    # hash of the bytes written: the remaining diagnostics belong to that content.
    content_hash: Optional[str] = None
    written_hash: Optional[str] = None

    @property
    def cacheable(self) -> bool:
        """Only a complete, clean result is kept: no error, no skip, no dropped fix."""
        r = self.result
        return not (r.errors or r.internal_errors or r.warnings)


def process_file(task: FileTask, mode: Mode) -> FileOutcome:
    """Lint (and with --fix/--diff, fix) one file. Never raises for bad input."""
    out = RunResult()
    content, written = lint_file(Path(task.path), task.display, list(task.rules), mode, out, task.imported,
                               task.precision)
    return FileOutcome(task.index, out, content_hash=content, written_hash=written)


def _process_chunk(tasks: List[FileTask], mode: Mode) -> List[FileOutcome]:
    return [process_file(t, mode) for t in tasks]


def _chunks(tasks: Sequence[FileTask]) -> List[List[FileTask]]:
    ordered = sorted(tasks, key=lambda t: -t.size)
    chunks: List[List[FileTask]] = []
    current: List[FileTask] = []
    size = 0
    for t in ordered:
        if current and (len(current) >= CHUNK_FILES or size + t.size > CHUNK_BYTES):
            chunks.append(current)
            current, size = [], 0
        current.append(t)
        size += t.size
    if current:
        chunks.append(current)
    return chunks


def run_tasks(
    tasks: Sequence[FileTask],
    mode: Mode,
    jobs: int,
) -> Iterator[FileOutcome]:
    """Process `tasks`, yielding outcomes as they finish (in any order; callers order them
    by `index`). `jobs` 1, or too little work to pay for a pool, runs in this process."""
    workers = min(jobs, len(tasks))
    if workers <= 1 or sum(t.size for t in tasks) < POOL_MIN_BYTES:
        for t in tasks:
            yield process_file(t, mode)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = multiprocessing.get_context("spawn")
    failed: List[FileTask] = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=collector.tune) as pool:
        futures = {pool.submit(_process_chunk, chunk, mode): chunk for chunk in _chunks(tasks)}
        try:
            for future in as_completed(futures):
                try:
                    outcomes = future.result()
                except Exception:  # a worker died (killed, out of memory): all pending fail
                    failed.extend(futures[future])
                    continue
                yield from outcomes
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    if failed:
        yield from _one_at_a_time(sorted(failed, key=lambda t: t.index), mode, context)


def _one_at_a_time(tasks: List[FileTask], mode: Mode, context: Any) -> Iterator[FileOutcome]:
    """Files whose worker died, each alone in a one-worker pool: the file that kills its
    worker is reported, the others are linted (never in this process: a crash here would
    lose the whole run)."""
    from concurrent.futures import ProcessPoolExecutor

    pending = list(tasks)
    while pending:
        with ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=collector.tune) as pool:
            while pending:
                task = pending[0]
                try:
                    outcome = pool.submit(process_file, task, mode).result()
                except Exception as exc:
                    pending.pop(0)
                    yield _worker_failed(task, exc)
                    break  # the pool is broken: a fresh one for the rest
                pending.pop(0)
                yield outcome


def _worker_failed(task: FileTask, exc: BaseException) -> FileOutcome:
    reason = str(exc) or type(exc).__name__
    return FileOutcome(task.index, RunResult(internal_errors=[
        f"internal error on {task.display}: the worker process linting it died ({reason}); "
        "the other files were linted"
    ]))
