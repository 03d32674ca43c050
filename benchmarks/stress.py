"""Every rule on every file of the benchmark corpora: each file's CPU time and memory, against
the per-file budget (`file-timeout`, `file-memory`).

    python benchmarks/stress.py [--jobs N] [--corpus bench|precision|all] [--show N]

Files: the 8 pinned wheels of bench_lint.py and the packages of the precision corpus
(benchmarks/precision/corpus.json), downloaded and checked by sha256 once (the same caches as
those scripts). Each worker process lints its share of the files one at a time with
`--select ALL` and the default budget, through `engine.lint_source` (the same bounded,
preemptible analysis thread `nanlint check` uses), and records per file the analysis
thread's CPU seconds, the largest growth of the process's memory seen while it ran (sampled
every 20 ms), and whether the budget skipped it; and per worker its peak resident memory.

Prints p50, p99 and max of CPU time and memory growth, the slowest files, every file over a
budget or skipped, every internal error (a rule that raised: its finding is lost), and each
worker's peak memory. The goals (issue 31): no file over the default budgets; the slowest file
at most 10 s of CPU; at most 1 GB per worker; and (issue 39) no internal error. Exits 1 when
any internal error was seen, 0 otherwise. A measurement, never run by the test suite.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Dict, List, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_lint import CORPUS, PACKAGES, fetch_wheel  # noqa: E402

CPU_GOAL = 10.0
WORKER_MEMORY_GOAL = 1024 ** 3


def corpus_roots(which: str) -> List[Path]:
    roots: List[Path] = []
    if which in ("bench", "all"):
        for name, (version, digest) in sorted(PACKAGES.items()):
            roots.append(fetch_wheel(name, version, digest, CORPUS))
    if which in ("precision", "all"):
        manifest = json.loads((HERE / "precision" / "corpus.json").read_text(encoding="utf-8"))
        cache = HERE / "precision" / ".cache"
        for p in manifest["packages"]:
            roots.append(fetch_wheel(p["name"], p["version"], p["sha256"], cache, wheel_name=p["wheel"]))
    return roots


def _lint_share(paths: List[str]) -> Tuple[List[dict], int]:
    """Lint each file (every rule, the default budget); per-file usage and this worker's peak
    resident memory in bytes."""
    from nanlint.run.config import Settings
    from nanlint.lint.engine import lint_source
    from nanlint.rules import all_rules

    rules = all_rules()
    budget = Settings().file_budget()
    rows = []
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        usage: Dict[str, float] = {}
        start = time.perf_counter()
        result = lint_source(path, text, rules, budget=budget, usage=usage)
        rows.append({"path": path, "cpu": usage.get("cpu", 0.0), "memory": usage.get("memory", 0),
                     "wall": time.perf_counter() - start, "skipped": result.skipped,
                     "findings": len(result.diagnostics), "internal_errors": list(result.errors)})
    return rows, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _quantile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--corpus", choices=["bench", "precision", "all"], default="all")
    ap.add_argument("--show", type=int, default=10, help="how many of the slowest files to list")
    args = ap.parse_args()

    from nanlint.run.config import Settings

    budget = Settings().file_budget()
    files = sorted(str(p) for root in corpus_roots(args.corpus) for p in root.rglob("*.py"))
    # Large files first, dealt round-robin: the workers finish together.
    files.sort(key=lambda p: -Path(p).stat().st_size)
    shares = [files[i::args.jobs] for i in range(args.jobs)]
    started = time.perf_counter()
    rows: List[dict] = []
    peaks: List[int] = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for share_rows, peak in pool.map(_lint_share, shares):
            rows.extend(share_rows)
            peaks.append(peak)
    elapsed = time.perf_counter() - started

    cpu = [r["cpu"] for r in rows]
    memory = [r["memory"] for r in rows]
    mb = 1024 * 1024
    print(f"{len(rows)} files, every rule, {args.jobs} workers, {elapsed:.0f} s; budget: "
          f"{budget.cpu:g} s of CPU and {budget.memory // mb} MB per file")
    print(f"CPU seconds per file:   p50 {_quantile(cpu, 0.5):.3f}  p99 {_quantile(cpu, 0.99):.2f}  max {max(cpu):.2f}")
    print(f"memory growth per file: p50 {_quantile(memory, 0.5) / mb:.0f} MB  p99 {_quantile(memory, 0.99) / mb:.0f} MB"
          f"  max {max(memory) / mb:.0f} MB")
    print("peak resident memory per worker: " + ", ".join(f"{p / mb:.0f} MB" for p in peaks))
    print(f"\nslowest {args.show} files (CPU s, memory growth MB):")
    for r in sorted(rows, key=lambda r: -r["cpu"])[: args.show]:
        print(f"  {r['cpu']:7.2f}  {r['memory'] / mb:6.0f}  {r['path']}")
    over = [r for r in rows if r["skipped"] or r["cpu"] > budget.cpu or r["memory"] > budget.memory]
    print(f"\nfiles over a budget or skipped: {len(over)}")
    for r in over:
        print(f"  {r['path']}: {r['skipped'] or 'over budget'} ({r['cpu']:.1f} s, {r['memory'] / mb:.0f} MB)")
    internal = [(r["path"], e) for r in rows for e in r["internal_errors"]]
    print(f"\ninternal errors: {len(internal)} in {len({p for p, _ in internal})} files")
    for _, error in internal:
        print(f"  {error}")  # names the rule, the file and the position
    goals = [
        ("no internal error", not internal),
        ("no file over the default budgets", not over),
        (f"slowest file <= {CPU_GOAL:g} s of CPU", max(cpu) <= CPU_GOAL),
        (f"peak memory <= {WORKER_MEMORY_GOAL // mb} MB per worker", max(peaks) <= WORKER_MEMORY_GOAL),
    ]
    print()
    for text, met in goals:
        print(f"{'met' if met else 'NOT MET'}: {text}")
    return 1 if internal else 0


if __name__ == "__main__":
    sys.exit(main())
