"""How fast nanlint lints real PyTorch code, against LibCST's bare parser on the same files.

    python benchmarks/bench_lint.py [--package NAME ...] [--jobs N] [--select CODES] [--show N]
    python benchmarks/bench_lint.py --in-process [--package NAME ...] [--repeat N]

Downloads pinned wheels of real PyTorch packages from PyPI (`pip download --no-deps`, checked
against their sha256), caches them and their extracted .py files under benchmarks/corpus/
(git-ignored), copies the files into a temporary project (so that touching a file changes
nothing here), then runs each phase in a fresh Python process, one after the other:

1. floor: read and `libcst.parse_module` every file, one process (what any LibCST linter pays);
2. nanlint cold, 1 job (no cache to read; the cache is written);
3. nanlint cold, all jobs (a fresh cache);
4. nanlint warm: the same run again (every result from the cache);
5. nanlint warm after one file is edited (a comment appended): that file and the files that
   import it are linted again, nothing else;
6. ruff (`ruff check --no-cache`, its default rules), when installed, as the reference.

It prints each phase's wall-clock seconds (the work only, not the interpreter's start), CPU
seconds (its own and its workers'), peak resident memory (its own and its largest worker's,
from `getrusage`), the ratios to the floor and to the cold run, the machine's load average
(other work on the machine slows every phase), and the findings per rule.

`--in-process` keeps the older measurement: parse pass and lint pass in this one process,
CPU time per pass, the fastest of `--repeat` runs.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

import libcst  # noqa: E402

from nanlint.lint.engine import lint_source, may_match  # noqa: E402
from nanlint.core.source import SourceError, read_source  # noqa: E402
from nanlint.rules import all_rules  # noqa: E402

CORPUS = HERE / "corpus"

# name -> (version, sha256 of the py3-none-any wheel on PyPI)
PACKAGES: Dict[str, Tuple[str, str]] = {
    "transformers": ("4.46.3", "a12ef6f52841fd190a3e5602145b542d03507222f2c64ebb7ee92e8788093aef"),
    "timm": ("1.0.11", "52a6f895e2cbec35a87d0846870419c2c0aa40de9b205bcda917f38278bf3044"),
    "diffusers": ("0.31.0", "cbc498ae63f4abfc7c3a07649cdcbee229ef2f9a9a1f0d19c9bbaf22f8d30c1f"),
    # The rest of the precision corpus (benchmarks/precision.md).
    "kornia": ("0.7.4", "1b816b4c45878a73531a500a46dbf61e646ec7a749bf8a4dd7a5833a04e28808"),
    "monai": ("1.4.0", "a715ca9ff8a068e36efdd147420f0ff02ead744909e7ea0998f31129c4997c9b"),
    "torchmetrics": ("1.6.0", "a508cdd87766cedaaf55a419812bf9f493aff8fffc02cc19df5a8e2e7ccb942a"),
    "ultralytics": ("8.3.40", "68eab78f4bdcd7ab2f62f5fe5a394958dd8507c47359a7f7930ab617ffba4302"),
    "accelerate": ("1.1.1", "61edd81762131b8d4bede008643fa1e1f3bf59bec710ebda9771443e24feae02"),
}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(name: str) -> Path:
    """The package's .py files, extracted under corpus/src/NAME-VERSION (downloaded once)."""
    version, expected = PACKAGES[name]
    return fetch_wheel(name, version, expected, CORPUS)


def fetch_wheel(name: str, version: str, expected: str, root: Path, wheel_name: str = "") -> Path:
    """`pip download --no-deps` a pinned wheel into ROOT/wheels, check its sha256 and extract
    its .py files into ROOT/src/NAME-VERSION, once (shared by the benchmark corpora)."""
    target = root / "src" / f"{name}-{version}"
    done = target / ".complete"
    if done.exists():
        return target
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pattern = wheel_name or f"{name.replace('-', '_')}-{version}-*.whl"
    found = sorted(wheels.glob(pattern))
    if not found:
        # The wheels are pure Python and pinned by sha256: download them for any interpreter
        # (a package that requires a newer Python than the one running is still read here).
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
             "--python-version", "3.12", "--quiet", "--dest", str(wheels), f"{name}=={version}"],
            check=True,
        )
        found = sorted(wheels.glob(pattern))
    if not found:
        sys.exit(f"pip download of {name}=={version} gave no wheel matching {pattern}")
    wheel = found[0]
    got = sha256(wheel)
    if got != expected:
        sys.exit(f"{wheel.name}: sha256 {got} does not match the pinned {expected}")
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.endswith(".py") and ".dist-info/" not in member:
                archive.extract(member, target)
    done.write_text(f"{wheel.name} {got}\n")
    return target


def load(roots: List[Path]) -> List[Tuple[str, str]]:
    files = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            try:
                source = read_source(path)
            except SourceError:
                continue
            files.append((path.relative_to(CORPUS / "src").as_posix(), source.text))
    return files


def time_pass(fn, files, repeat: int) -> Tuple[float, float, Dict[str, float]]:
    """The fastest of `repeat` passes: wall seconds, CPU seconds of this process (robust
    when other work shares the machine), and CPU seconds per file in that pass."""
    best = (float("inf"), float("inf"), {})
    wall, cpu = time.perf_counter, time.process_time
    for _ in range(repeat):
        gc.collect()
        per_file = {}
        wall_start = wall()
        for path, text in files:
            start = cpu()
            fn(path, text)
            per_file[path] = cpu() - start
        elapsed = wall() - wall_start
        total = sum(per_file.values())
        if total < best[1]:
            best = (elapsed, total, per_file)
    return best


def in_process(args: argparse.Namespace) -> None:
    names = args.package or sorted(PACKAGES)

    roots = [fetch(name) for name in names]
    files = load(roots)
    if args.select:
        from nanlint.run.config import Settings, select_rules

        rules = select_rules(Settings(select=args.select.split(",")))
    else:
        rules = [r for r in all_rules() if r.default_enabled]
    lines = sum(text.count("\n") for _, text in files)
    torch_files = sum(1 for _, text in files if may_match(text))
    print(f"corpus: {', '.join(f'{n}=={PACKAGES[n][0]}' for n in names)}")
    print(f"files: {len(files)} ({torch_files} mention torch), lines: {lines}")
    print(f"rules: {len(rules)} default ({', '.join(r.code for r in rules)})")

    libcst.parse_module("x = 1\n")  # load the native parser before timing

    def parse_only(path, text):
        try:
            libcst.parse_module(text)
        except Exception:
            pass

    parse_wall, parse_s, parse_per_file = time_pass(parse_only, files, args.repeat)
    # nanlint never parses a file that does not mention torch: the parse cost it does pay.
    parse_torch_s = sum(parse_per_file[path] for path, text in files if may_match(text))

    findings: Counter = Counter()
    examples: Dict[str, List[str]] = {}
    errors: List[str] = []

    def lint(path, text):
        result = lint_source(path, text, rules)
        for d in result.diagnostics:
            findings[d.code] += 1
            shown = examples.setdefault(d.code, [])
            if len(shown) < args.show:
                shown.append(f"{d.path}:{d.start.row}:{d.start.column}: {d.line_text.strip()}")
        errors.extend(result.errors)

    lint_wall, lint_s, _ = time_pass(lint, files, args.repeat)
    runs = args.repeat
    if args.project_index:
        paired_s, index_s, index_wall, index_summaries = _index_pass(files, rules, args.repeat)

    print("times are CPU seconds of this process (wall-clock seconds in brackets)")
    print(f"libcst.parse_module only: {parse_s:.2f} s [{parse_wall:.2f}], "
          f"{len(files) / parse_s:.0f} files/s, {lines / parse_s:.0f} lines/s "
          f"(the torch files alone: {parse_torch_s:.2f} s)")
    print(f"nanlint (parse + all rules): {lint_s:.2f} s [{lint_wall:.2f}], "
          f"{len(files) / lint_s:.0f} files/s, {lines / lint_s:.0f} lines/s")
    print(f"ratio nanlint / parse-only (all files): {lint_s / parse_s:.2f}")
    print(f"ratio nanlint / parse-only (the {torch_files} files that mention torch): "
          f"{lint_s / parse_torch_s:.2f}")
    if args.project_index:
        print(f"nanlint with the project index (imports resolved, summaries on demand): {index_s:.2f} s "
              f"[{index_wall:.2f}], {index_summaries} names summarized; the same files without it, "
              f"linted in turn with it: {paired_s:.2f} s")
        print(f"ratio with / without the project index (file by file in turn): {index_s / paired_s:.2f}")
        print(f"ratio nanlint with the project index / parse-only (all files): {index_s / parse_s:.2f}; "
              f"scaled from the paired ratio: {lint_s / parse_s * index_s / paired_s:.2f}")
    print("findings per rule:")
    for rule in rules:
        print(f"  {rule.code} {rule.name}: {findings[rule.code] // runs}")
        for line in examples.get(rule.code, []):
            print(f"      {line}")
    if errors:
        print(f"internal errors: {len(errors) // runs} (first: {errors[0]})")


def _index_pass(files, rules, repeat: int) -> Tuple[float, float, float, int]:
    """The lint with and without the project index, file by file in turn (each file linted
    without it, then with it: both sides see the same load, which drifts a lot on a shared
    machine over a whole pass). With it, each file sees the project modules it imports as
    `nanlint check` hands them (summaries computed on demand; a fresh index and summary store
    per pass, no cache). Returns CPU seconds without and with it, wall seconds with it, and
    the names summarized; the fastest of `repeat` passes by the with-index total."""
    from nanlint.analysis import summaries
    from nanlint.analysis.project import ProjectIndex

    cpu, wall = time.process_time, time.perf_counter
    best = (float("inf"), float("inf"), float("inf"), 0)
    for _ in range(repeat):
        gc.collect()
        index = ProjectIndex()
        summaries.STORE = store = summaries.SummaryStore()
        without = with_index = with_wall = 0.0
        for path, text in files:
            start = cpu()
            lint_source(path, text, rules)
            middle, middle_wall = cpu(), wall()
            lint_source(path, text, rules, imported=index.module_refs(CORPUS / "src" / path))
            with_index += cpu() - middle
            with_wall += wall() - middle_wall
            without += middle - start
        if with_index < best[1]:
            best = (without, with_index, with_wall, store.computed)
    return best


# -- the phases, each in a fresh process ---------------------------------------------------


def _usage() -> Dict[str, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "cpu": me.ru_utime + me.ru_stime,
        "cpu_children": kids.ru_utime + kids.ru_stime,
        # Linux reports kilobytes; for RUSAGE_CHILDREN, the largest single child.
        "rss_mb": me.ru_maxrss / 1024,
        "rss_children_mb": kids.ru_maxrss / 1024,
    }


def phase_main(name: str, root: Path, cache_dir: Optional[Path], jobs: int, select: Optional[str] = None) -> None:
    """One phase in this (fresh) process; prints one JSON line."""
    started = time.perf_counter()
    report: Dict[str, Any] = {"phase": name}
    if name == "floor":
        import libcst

        files = sorted(root.rglob("*.py"))
        count = 0
        for path in files:
            try:
                text = read_source(path).text
            except SourceError:
                continue
            count += 1
            try:
                libcst.parse_module(text)
            except Exception:
                pass
        report["files"] = count
    elif name == "ruff":
        exe = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
        done = subprocess.run([exe, "check", "--no-cache", "--exit-zero", "--quiet", "--isolated", str(root)],
                              capture_output=True, text=True)
        report["findings"] = len(done.stdout.splitlines())
    else:
        from nanlint.run.cache import Cache
        from nanlint.run.config import Settings
        from nanlint.run.runner import run

        cache = Cache(cache_dir) if cache_dir is not None else None
        os.chdir(root)
        settings = Settings(root=root, select=select.split(",") if select else None)
        result = run(["."], settings, jobs=jobs, cache=cache)
        report["files"] = (cache.hits + cache.misses) if cache else None
        report["relinted"] = cache.misses if cache else None
        report["findings"] = dict(Counter(d.code for d in result.diagnostics))
        report["errors"] = len(result.errors)
        report["first_error"] = result.errors[0] if result.errors else None
    report["wall"] = time.perf_counter() - started
    report.update(_usage())
    print(json.dumps(report))


SELECT: Optional[str] = None  # `--select`: the rules every nanlint phase runs (default: the default set)


def run_phase(name: str, root: Path, cache_dir: Optional[Path] = None, jobs: int = 1) -> Dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--phase", name, "--root", str(root), "--jobs", str(jobs)]
    if cache_dir is not None:
        command += ["--cache-dir", str(cache_dir)]
    if SELECT:
        command += ["--select", SELECT]
    load = os.getloadavg()[0]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"phase {name} failed:\n{done.stderr}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["load_before"] = load
    return report


def touched_file(root: Path) -> Tuple[Path, List[Path]]:
    """The file the warm-after-edit phase edits: the torch file with the most importers
    among those with at most 10 (an ordinary module, not a package's hub), and those importers."""
    from nanlint.lint.engine import may_match
    from nanlint.analysis.project import ProjectIndex

    index = ProjectIndex()
    files = sorted(root.rglob("*.py"))
    importers = index.dependents(files)
    candidates = [
        (len(users), path) for path, users in importers.items()
        if len(users) <= 10 and may_match(path.read_text(encoding="utf-8", errors="replace"))
    ]
    _, chosen = max(candidates, key=lambda c: (c[0], str(c[1])))
    return chosen, importers[chosen]


def phases(args: argparse.Namespace) -> None:
    names = args.package or sorted(PACKAGES)
    roots = [fetch(name) for name in names]
    jobs = args.jobs or len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="nanlint-bench-") as tmp:
        root = Path(tmp) / "project"
        for src in roots:
            shutil.copytree(src, root / src.name, ignore=shutil.ignore_patterns(".complete"))
            # Each package is a project of its own (`precision = "auto"` searches one package).
            (root / src.name / "setup.cfg").touch()
        (root / "pyproject.toml").write_text("[tool.nanlint]\n")
        files = sorted(root.rglob("*.py"))
        lines = sum(p.read_bytes().count(b"\n") for p in files)
        print(f"corpus: {', '.join(f'{n}=={PACKAGES[n][0]}' for n in names)}")
        print(f"files: {len(files)}, lines: {lines}; usable CPUs: {len(os.sched_getaffinity(0))}, "
              f"jobs for the parallel phases: {jobs}")
        print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        cold_cache, cold1_cache = Path(tmp) / "cache-all", Path(tmp) / "cache-1"
        results = [
            ("libcst.parse_module only, 1 process (floor)", run_phase("floor", root)),
            ("nanlint cold, 1 job", run_phase("nanlint", root, cold1_cache, 1)),
            (f"nanlint cold, {jobs} jobs", run_phase("nanlint", root, cold_cache, jobs)),
            (f"nanlint warm, {jobs} jobs", run_phase("nanlint", root, cold_cache, jobs)),
        ]
        edited, importers = touched_file(root)
        with edited.open("a", encoding="utf-8") as handle:
            handle.write("\n# edited by bench_lint\n")
        results.append((f"nanlint warm after editing 1 file, {jobs} jobs", run_phase("nanlint", root, cold_cache, jobs)))
        ruff = shutil.which("ruff") or (Path(sys.executable).parent / "ruff").exists()
        if ruff:
            results.append(("ruff check --no-cache (reference)", run_phase("ruff", root)))
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    floor = results[0][1]["wall"]
    cold = results[2][1]["wall"]
    print()
    floor_cpu = results[0][1]["cpu"]
    print("wall: seconds of the work; cpu: seconds of CPU of the phase and its workers (steadier than")
    print("wall when other work shares the machine); RSS: peak of the phase's own process, and of its")
    print("largest child (a worker; `git ls-files` for a 1-job run); load: 1-minute load average before")
    print(f"{'phase':<48} {'wall s':>8} {'cpu s':>8} {'wall/floor':>10} {'cpu/floor':>9} {'wall/cold':>9} "
          f"{'RSS MB':>7} {'child MB':>8} {'load':>5}")
    for label, r in results:
        cpu = r["cpu"] + r["cpu_children"]
        worker = f"{r['rss_children_mb']:.0f}" if r["rss_children_mb"] > 1 else "-"
        print(f"{label:<48} {r['wall']:>8.2f} {cpu:>8.2f} {r['wall'] / floor:>10.3f} {cpu / floor_cpu:>9.3f} "
              f"{r['wall'] / cold:>9.3f} {r['rss_mb']:>7.0f} {worker:>8} {r['load_before']:>5.2f}")
    warm = results[3][1]
    touched = results[4][1]
    print()
    cold1 = results[1][1]
    print(f"cold 1 job / floor: {cold1['wall'] / floor:.2f} wall, "
          f"{(cold1['cpu'] + cold1['cpu_children']) / floor_cpu:.2f} CPU "
          f"(goal <= {'1.5 with every rule' if SELECT == 'ALL' else '1.0 for the default set'})")
    cold_n = results[2][1]
    cold_cpu = cold_n["cpu"] + cold_n["cpu_children"]
    # On a loaded machine wall-clock ratios mean little; CPU / jobs is what idle cores would
    # take at best (every process's CPU spread evenly over the jobs).
    print(f"cold {jobs} jobs / floor: {cold / floor:.2f} wall, {cold_cpu / floor_cpu:.2f} CPU of all its "
          f"processes, {cold_cpu / jobs / floor_cpu:.2f} CPU / jobs (goal <= 0.6 with 2 jobs)")
    print(f"warm / cold {jobs} jobs: {warm['wall'] / cold:.3f} wall, "
          f"{(warm['cpu'] + warm['cpu_children']) / (cold_cpu / jobs):.3f} as CPU / (cold CPU / jobs) "
          f"(goal <= 0.05); files re-linted: {warm['relinted']}")
    print(f"edited {edited.relative_to(root)} ({len(importers)} project files import it): "
          f"files re-linted {touched['relinted']} (expected {1 + len(importers)}), "
          f"{touched['wall'] / cold:.3f} of cold")
    peak = max(max(r["rss_mb"], r["rss_children_mb"]) for _, r in results[1:5])
    print(f"peak RSS of any nanlint process: {peak:.0f} MB (goal <= 300)")
    for label, r in results[1:5]:
        if r.get("errors"):
            print(f"{label}: {r['errors']} internal errors (first: {r['first_error']})")
    print("findings per rule (cold, 1 job):")
    for code, count in sorted(results[1][1]["findings"].items()):
        print(f"  {code}: {count}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", action="append", choices=sorted(PACKAGES),
                        help="only this package (repeatable; default: all)")
    parser.add_argument("--jobs", type=int, default=0, help="jobs of the parallel phases (default: usable CPUs)")
    parser.add_argument("--in-process", action="store_true", help="the older single-process parse/lint comparison")
    parser.add_argument("--repeat", type=int, default=1, help="(--in-process) time each pass N times, keep the best")
    parser.add_argument("--project-index", action="store_true",
                        help="(--in-process) also time the lint with the project index (cross-file summaries)")
    parser.add_argument("--select", metavar="CODES",
                        help="rules the nanlint phases run, as `nanlint --select` (e.g. ALL; default: the default set)")
    parser.add_argument("--show", type=int, default=0, metavar="N",
                        help="(--in-process) also print the first N findings of each rule (to review them)")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global SELECT
    SELECT = args.select
    if args.phase:
        phase_main(args.phase, Path(args.root), Path(args.cache_dir) if args.cache_dir else None, args.jobs,
                   args.select)
    elif args.in_process:
        in_process(args)
    else:
        phases(args)


if __name__ == "__main__":
    main()
