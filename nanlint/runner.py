"""Lint (and optionally fix) a set of paths: what `nanlint check` and `nanlint verify` share."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .cache import Cache, result_from_data, result_to_data
from .config import Settings, relative_display, select_rules
from .diagnostics import Diagnostic
from .files import discover
from .jobs import FileOutcome, FileTask, Mode, run_tasks, usable_cpus
from .progress import Progress
from .project import ProjectIndex, SummaryProvider


@dataclass
class RunResult:
    diagnostics: List[Diagnostic] = field(default_factory=list)
    # Internal errors (a rule crashed, a file could not be written): exit code 2.
    errors: List[str] = field(default_factory=list)
    # Warnings for stderr (a fix dropped because its result would not parse).
    warnings: List[str] = field(default_factory=list)
    fixed: int = 0
    diffs: List[str] = field(default_factory=list)


def run(
    paths: Sequence[str],
    settings: Settings,
    fix: bool = False,
    unsafe_fixes: bool = False,
    diff: bool = False,
    jobs: Optional[int] = None,
    cache: Optional[Cache] = None,
    progress: Optional[Callable[[int], Progress]] = None,
    summarize: Optional[SummaryProvider] = None,
) -> RunResult:
    """Lint every file under `paths`. With `fix`, write fixed files atomically (only those
    that change); with `diff`, collect unified diffs and write nothing.

    `jobs`: worker processes (default: the config's `jobs`, else every usable CPU; 1 runs
    in this process). `cache`: where results are kept between runs (None: no cache).
    `summarize`: the summary provider of the project index (what a file's dependents may
    know of it). The result is the same whatever `jobs` and whether the cache is used."""
    rules = select_rules(settings)
    files = discover(list(paths) or ["."], settings)
    mode = Mode(fix=fix, unsafe_fixes=unsafe_fixes, diff=diff, precision=settings.precision)
    index = ProjectIndex(summarize, summary_cache=cache) if (cache or summarize) else None
    tasks = []
    for i, path in enumerate(files):
        task = FileTask(i, str(path), relative_display(path), tuple(settings.rules_for(path, rules)))
        if index is not None:
            try:
                data = path.read_bytes()
            except OSError:
                pass  # reported when the file is linted
            else:
                task.size = len(data)
                index.note_content(path, data)
        else:
            try:
                task.size = path.stat().st_size
            except OSError:
                pass
        tasks.append(task)

    outcomes: Dict[int, FileOutcome] = {}
    keys: Dict[int, Tuple[str, str]] = {}  # task index -> (cache slot, dependency fingerprint)
    bar = progress(len(tasks)) if progress is not None else None
    todo = []
    for task in tasks:
        path = Path(task.path)
        if index is not None and summarize is not None:
            task.imported = index.imported_summaries(path)
        content = index.content_hash(path) if index is not None else None
        if cache is None or content is None:
            todo.append(task)
            continue
        slot = Cache.slot(path, task.display, [[r.code for r in task.rules], settings.precision])
        dependencies = index.dependency_fingerprint(path)
        keys[task.index] = (slot, dependencies)
        cached = cache.load(slot, Cache.key(slot, content, dependencies))
        diagnostics = result_from_data(cached) if cached is not None else None
        if diagnostics is not None and not (
            (fix or diff) and any(d.is_fixable(unsafe_fixes) for d in diagnostics)
        ):
            outcomes[task.index] = FileOutcome(task.index, diagnostics=diagnostics)
            if bar is not None:
                bar.update(1)
        else:
            todo.append(task)

    workers = jobs if jobs is not None else (settings.jobs or usable_cpus())
    try:
        for outcome in run_tasks(todo, mode, workers):
            outcomes[outcome.index] = outcome
            if bar is not None:
                bar.update(1)
            if cache is not None and outcome.index in keys and not outcome.errors:
                _remember(cache, keys[outcome.index], outcome, diff)
    finally:
        if bar is not None:
            bar.close()

    out = RunResult()
    for i in range(len(tasks)):
        outcome = outcomes[i]
        out.diagnostics.extend(outcome.diagnostics)
        out.errors.extend(outcome.errors)
        out.warnings.extend(outcome.warnings)
        out.fixed += outcome.fixed
        if outcome.diff is not None:
            out.diffs.append(outcome.diff)
    out.diagnostics.sort(key=Diagnostic.sort_key)
    return out


def _remember(cache: Cache, key: Tuple[str, str], outcome: FileOutcome, diff: bool) -> None:
    """Store a file's diagnostics under the content they describe: the written content after
    --fix; nothing after a --diff that would change the file (they describe unwritten text)."""
    slot, dependencies = key
    if outcome.written_hash is not None:
        content = outcome.written_hash
    elif diff and outcome.diff is not None:
        return
    else:
        content = outcome.content_hash
    if content is None:
        return
    cache.store(slot, Cache.key(slot, content, dependencies), result_to_data(outcome.diagnostics))


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
