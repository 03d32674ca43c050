"""How fast nanlint lints real PyTorch code, against LibCST's bare parser on the same files.

    python benchmarks/bench_lint.py [--package NAME ...] [--repeat N]

Downloads pinned wheels of real PyTorch packages from PyPI (`pip download --no-deps`, checked
against their sha256), caches them and their extracted .py files under benchmarks/corpus/
(git-ignored), then, in this one process:

1. parses every file with `libcst.parse_module` (what any LibCST linter pays at least);
2. lints every file with every default rule (`nanlint.engine.lint_source`).

It prints the file and line counts, the seconds and files/s of each pass (CPU time of the
process, with wall-clock time beside it: CPU time holds steady when other work shares the
machine), the ratio of nanlint's time to the parse-only time, and the findings per rule.
Reading files from disk is outside both timings. Each pass is timed `--repeat` times and the
fastest run is reported.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import subprocess
import sys
import time
import zipfile
from collections import Counter
from pathlib import Path
from typing import Dict, List, Tuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

import libcst  # noqa: E402

from nanlint.engine import lint_source, may_match  # noqa: E402
from nanlint.files import SourceError, read_source  # noqa: E402
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
    target = CORPUS / "src" / f"{name}-{version}"
    done = target / ".complete"
    if done.exists():
        return target
    wheels = CORPUS / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    found = sorted(wheels.glob(pattern))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
             "--quiet", "--dest", str(wheels), f"{name}=={version}"],
            check=True,
        )
        found = sorted(wheels.glob(pattern))
    if not found:
        sys.exit(f"pip download gave no wheel matching {pattern}")
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", action="append", choices=sorted(PACKAGES),
                        help="only this package (repeatable; default: all)")
    parser.add_argument("--repeat", type=int, default=1, help="time each pass N times, keep the best")
    parser.add_argument("--show", type=int, default=0, metavar="N",
                        help="also print the first N findings of each rule (to review them)")
    args = parser.parse_args()
    names = args.package or sorted(PACKAGES)

    roots = [fetch(name) for name in names]
    files = load(roots)
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

    print("times are CPU seconds of this process (wall-clock seconds in brackets)")
    print(f"libcst.parse_module only: {parse_s:.2f} s [{parse_wall:.2f}], "
          f"{len(files) / parse_s:.0f} files/s, {lines / parse_s:.0f} lines/s "
          f"(the torch files alone: {parse_torch_s:.2f} s)")
    print(f"nanlint (parse + all rules): {lint_s:.2f} s [{lint_wall:.2f}], "
          f"{len(files) / lint_s:.0f} files/s, {lines / lint_s:.0f} lines/s")
    print(f"ratio nanlint / parse-only (all files): {lint_s / parse_s:.2f}")
    print(f"ratio nanlint / parse-only (the {torch_files} files that mention torch): "
          f"{lint_s / parse_torch_s:.2f}")
    print("findings per rule:")
    for rule in rules:
        print(f"  {rule.code} {rule.name}: {findings[rule.code] // runs}")
        for line in examples.get(rule.code, []):
            print(f"      {line}")
    if errors:
        print(f"internal errors: {len(errors) // runs} (first: {errors[0]})")


if __name__ == "__main__":
    main()
