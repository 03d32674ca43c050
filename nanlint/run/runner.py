"""Lint (and optionally fix) a set of paths: what `nanlint check` and `nanlint verify` share."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Type

from . import collector
from .cache import Cache, imports_of_entry, result_from_data, result_to_data
from .config import Settings, relative_display, select_rules
from ..core.diagnostics import Diagnostic
from ..core.text import unified_diff
from ..lint.engine import lint_source
from .files import discover
from ..lint.fixes import fix_source
from .jobs import FileOutcome, FileTask, run_tasks, usable_cpus
from .one_file import Mode, RunResult, collect  # noqa: F401 (RunResult: re-exported)
from .progress import Progress
from ..analysis.precision import TrainingPrecision
from ..analysis.project import ProjectIndex, SummaryProvider
from .project_precision import ProjectPrecisionFinder
from .project_precision import resolve as resolve_precision


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
    empty: List[str] = []
    files = discover(list(paths) or ["."], settings, empty)
    mode = Mode(fix=fix, unsafe_fixes=unsafe_fixes, diff=diff,
                max_file_size=settings.max_file_size, budget=settings.file_budget())
    # The project index is always on: a file's lint sees what it imports from the project.
    index = ProjectIndex(summarize, summary_cache=cache)
    cache_dir = str(cache.directory) if cache is not None else None
    precisions = ProjectPrecisionFinder()
    digests: Dict[int, str] = {}
    for i, path in enumerate(files):
        # First every file's bytes once: the precision search then reads only the project
        # files this run does not lint (a file's precision is part of its cache slot).
        try:
            data = path.read_bytes()
        except OSError:
            continue  # reported when the file is linted
        digests[i] = hashlib.sha256(data).hexdigest()
        precisions.note(path, data)
    tasks = []
    entries: Dict[int, Tuple[str, Optional[Dict]]] = {}  # task index -> (cache slot, its entry)
    for i, path in enumerate(files):
        task = FileTask(i, str(path), relative_display(path), tuple(settings.rules_for(path, rules)),
                        precision=resolve_precision(settings.precision, path, precisions, settings))
        tasks.append(task)
        if i not in digests:
            continue
        digest = digests[i]
        imports = None
        if cache is not None:
            # The entry is read once, here: it holds the result and, for unchanged
            # bytes, their imports (scanning every file is most of a warm run).
            slot = Cache.slot(path, task.display, [[r.code for r in task.rules], _precision_key(task.precision)])
            entries[i] = (slot, cache.entry(slot))
            imports = imports_of_entry(entries[i][1], digest)
        try:
            task.size = path.stat().st_size
            data = path.read_bytes() if imports is None else b""
        except OSError:
            continue  # reported when the file is linted
        if imports is None:
            digest = hashlib.sha256(data).hexdigest()  # what is scanned is what is hashed
        index.note_content(path, data, imports, digest)

    outcomes: Dict[int, FileOutcome] = {}
    keys: Dict[int, Tuple[str, str]] = {}  # task index -> (cache slot, dependency fingerprint)
    bar = progress(len(tasks)) if progress is not None else None
    todo = []
    for task in tasks:
        path = Path(task.path)
        if summarize is not None:
            task.imported = index.imported_summaries(path)
        else:
            # Summaries computed on demand, by name, where the lint needs them.
            task.imported = index.module_refs(path, cache_dir)
        content = index.content_hash(path)
        if cache is None or content is None:
            todo.append(task)
            continue
        found = entries.get(task.index)
        if found is None:  # unreadable a moment ago: no entry read yet
            slot = Cache.slot(path, task.display, [[r.code for r in task.rules], _precision_key(task.precision)])
            found = (slot, cache.entry(slot))
        slot, entry = found
        dependencies = index.dependency_fingerprint(path)
        keys[task.index] = (slot, dependencies)
        cached = cache.result_of(entry, Cache.key(slot, content, dependencies))
        diagnostics = result_from_data(cached) if cached is not None else None
        if diagnostics is not None and not (
            (fix or diff) and any(d.is_fixable(unsafe_fixes) for d in diagnostics)
        ):
            outcomes[task.index] = FileOutcome(task.index, RunResult(diagnostics=diagnostics))
            if bar is not None:
                bar.update(1)
        else:
            todo.append(task)

    workers = jobs if jobs is not None else (settings.jobs or usable_cpus())
    try:
        with collector.tuned():
            for outcome in run_tasks(todo, mode, workers):
                outcomes[outcome.index] = outcome
                if bar is not None:
                    bar.update(1)
                if cache is not None and outcome.index in keys and outcome.cacheable:
                    path = Path(tasks[outcome.index].path)
                    _remember(cache, keys[outcome.index], outcome, diff,
                              (index.content_hash(path), index.imports_of(path)))
    finally:
        if bar is not None:
            bar.close()

    out = RunResult(files=len(tasks))
    out.warnings.extend(_nothing_to_lint(empty, bool(tasks)))
    for i in range(len(tasks)):
        out.absorb(outcomes[i].result)
    out.diagnostics.sort(key=Diagnostic.sort_key)
    return out


def _nothing_to_lint(empty: List[str], linted: bool) -> List[str]:
    """Warnings for the paths that held nothing to lint (ruff warns that it found no Python
    file; these name each folder): a CI gate pointed at the wrong folder must not pass in
    silence. A file named but excluded (`--force-exclude`, as pre-commit runs) is said only
    when nothing at all was linted."""
    out = []
    for path in empty:
        if os.path.isdir(path):
            out.append(f"{path}: no Python file or notebook to lint there")
        elif not linted:
            out.append(f"{path}: excluded by the settings (force-exclude), not linted")
    return out


def _precision_key(precision: Optional[TrainingPrecision]) -> Optional[List[str]]:
    """The precision in a cache slot: a file's result depends on it and on its evidence."""
    return [precision.dtype, precision.scope, precision.reason] if precision is not None else None


def _remember(cache: Cache, key: Tuple[str, str], outcome: FileOutcome, diff: bool,
              scanned: Tuple[Optional[str], list]) -> None:
    """Store a file's diagnostics under the content they describe: the written content after
    --fix; nothing after a --diff that would change the file (they describe unwritten text).
    `scanned`: the content hash and imports the index read; kept when they are of that content."""
    slot, dependencies = key
    if outcome.written_hash is not None:
        content = outcome.written_hash
    elif diff and outcome.result.diffs:
        return
    else:
        content = outcome.content_hash
    if content is None:
        return
    cache.store(slot, Cache.key(slot, content, dependencies), result_to_data(outcome.result.diagnostics),
                scanned=(content, scanned[1]) if scanned[0] == content else None)


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
    out.files = 1
    precision = resolve_precision(settings.precision, Path(stdin_filename) if stdin_filename else None,
                                  ProjectPrecisionFinder(), settings)
    if display.endswith(".ipynb"):
        from .notebooks import fix_notebook_text

        new_text = fix_notebook_text(display, text, rules, precision, out,
                                     fix=fix or diff, unsafe_fixes=unsafe_fixes, diff=diff, budget=settings.file_budget())
        return out, new_text
    imported = _stdin_imports(stdin_filename, text)
    if not (fix or diff):
        collect(out, display, lint_source(display, text, rules, precision, settings.file_budget(),
                                           imported=imported))
        return out, text
    outcome = fix_source(display, text, rules, unsafe_fixes, precision, settings.file_budget(),
                         imported=imported)
    for d, reason in outcome.dropped:
        out.warnings.append(f"fix for {d.code} at {d.where()} dropped: {reason}")
    if outcome.source != text:
        out.fixed += outcome.applied
        out.applied.extend((display, d) for d in outcome.applied_diagnostics)
        if diff:
            out.diffs.append(unified_diff(display, text, outcome.source))
    collect(out, display, outcome.remaining)
    return out, outcome.source


def _stdin_imports(stdin_filename: Optional[str], text: str) -> Dict:
    """The project files a source read from stdin imports, found from the path it is linted
    as (none without `--stdin-filename`)."""
    if stdin_filename is None:
        return {}
    index = ProjectIndex()
    path = Path(stdin_filename)
    index.note_content(path, text.encode("utf-8", "surrogateescape"))
    return index.module_refs(path)
