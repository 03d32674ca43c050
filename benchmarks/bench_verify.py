"""How long `nanlint verify` takes per finding on the fixtures.

Runs `python -m nanlint verify fixtures/ --select ALL --output-format json` in a fresh process
(so torch's import and every first-call cost are counted), then prints:
- the median, 90th percentile and worst time per finding as the verifier measured it,
- the wall time of the whole process divided by the number of findings (startup amortised),
- the same per rule.
The goal is at most 0.5 s per finding on the CPU, startup included.

    .venv/bin/python benchmarks/bench_verify.py [--device cpu|cuda|auto] [--repeat N] [PATHS...]
    .venv/bin/python benchmarks/bench_verify.py --from findings.json   # e.g. a corpus's default findings

It also prints the process's peak resident memory and the slowest finding.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_SECONDS = 0.5


def run_once(paths, device, from_file=None):
    cmd = [sys.executable, "-m", "nanlint", "verify", *paths, "--select", "ALL",
           "--output-format", "json", "--device", device, "--exit-zero"]
    if from_file is not None:
        cmd += ["--from", os.path.abspath(from_file)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"nanlint verify exited {proc.returncode}")
    return wall, json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["fixtures"])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    parser.add_argument("--repeat", type=int, default=1, help="runs; the fastest wall time is reported")
    parser.add_argument("--from", dest="from_file", help="verify this findings file instead of linting PATHS")
    args = parser.parse_args()
    paths = [] if args.from_file and args.paths == ["fixtures"] else args.paths

    runs = [run_once(paths, args.device, args.from_file) for _ in range(max(1, args.repeat))]
    import resource

    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    wall, data = min(runs, key=lambda r: r[0])
    findings = data["findings"]
    if not findings:
        raise SystemExit("no findings with a probe")
    times = sorted(f["verification"]["seconds"] for f in findings)
    n = len(times)
    p90 = times[min(n - 1, int(0.9 * n))]
    per_code = defaultdict(list)
    for f in findings:
        per_code[f["code"]].append(f["verification"]["seconds"])
    startup = wall - sum(times)

    print(f"nanlint verify {' '.join(paths) or args.from_file} on {data['device']} (torch {data['torch']}), "
          f"{n} findings, best of {len(runs)} run(s)")
    print(f"  per finding (verifier's own clock): median {statistics.median(times):.3f} s, "
          f"p90 {p90:.3f} s, max {times[-1]:.3f} s")
    print(f"  whole process: {wall:.1f} s wall, of which {startup:.1f} s outside the findings "
          f"(interpreter, torch import, linting, output)")
    amortised = wall / n
    verdict = "meets" if amortised <= GOAL_SECONDS else "misses"
    print(f"  per finding, startup amortised: {amortised:.3f} s ({verdict} the {GOAL_SECONDS} s goal)")
    print(f"  verdicts: {data['summary']}")
    print(f"  peak resident memory of the verify process: {peak_mb:.0f} MB")
    slow = max(findings, key=lambda f: f["verification"]["seconds"])
    print(f"  slowest: {slow['filename']}:{slow['location']['row']} {slow['code']} "
          f"{slow['verification']['seconds']:.2f} s ({slow['verification']['verdict']})")
    print("  per rule (findings, median s, max s):")
    for code in sorted(per_code):
        ts = per_code[code]
        print(f"    {code}  {len(ts):3d}  {statistics.median(ts):.3f}  {max(ts):.3f}")


if __name__ == "__main__":
    main()
