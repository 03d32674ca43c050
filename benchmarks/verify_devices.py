"""Does `nanlint verify` say the same on a GPU as on the CPU?

    python benchmarks/verify_devices.py [--codes NAN101,NAN201] [--json OUT.json]

Verifies every finding of every rule's fixtures (as `python -m nanlint.verify.calibrate`
lints them) once on the CPU and once on CUDA, in the same process, and prints per rule how
many verdicts agree, then each finding whose verdict differs with both verdict lines. CUDA
kernels round float16/bfloat16 differently from the CPU's (and autocast picks other ops), so
an occasional difference between "confirmed" and "possible" is expected; a fix that holds on
one device and fails on the other, or an original that fails on one only, is what to read.
Also prints the seconds each device took (a ratio, not a goal).

Needs torch with a visible GPU; exits 2 without one. Never run by the test suite.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from nanlint.verify.calibrate import verify_rule  # noqa: E402
from nanlint.verify.fixture_set import fixture_code, fixture_files  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--codes", default="", help="comma-separated rule codes (default: all with fixtures)")
    parser.add_argument("--json", dest="json_out", default="", help="write every finding's two verdicts here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("verify_devices: torch sees no CUDA GPU", file=sys.stderr)
        return 2
    codes = [c for c in args.codes.split(",") if c] or sorted({fixture_code(p) for p in fixture_files()})
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")

    seconds = Counter()
    rows = []
    print(f"{'rule':8} {'findings':>8} {'agree':>6}", flush=True)
    for code in codes:
        results = {}
        for device in ("cpu", "cuda"):
            start = time.perf_counter()
            results[device] = verify_rule(code, device=device)
            seconds[device] += time.perf_counter() - start
        for cpu, cuda in zip(results["cpu"], results["cuda"]):
            d = cpu.diagnostic
            rows.append({
                "code": code, "path": cpu.path.name, "line": d.start.row, "column": d.start.column,
                "cpu": cpu.verification.verdict, "cuda": cuda.verification.verdict,
                "cpu_line": cpu.verification.line(), "cuda_line": cuda.verification.line(),
            })
        mine = [r for r in rows if r["code"] == code]
        print(f"{code:8} {len(mine):8d} {sum(r['cpu'] == r['cuda'] for r in mine):6d}", flush=True)

    total = len(rows)
    agree = sum(r["cpu"] == r["cuda"] for r in rows)
    print(f"all      {total:8d} {agree:6d}")
    print("verdicts (cpu -> cuda):", dict(Counter((r["cpu"], r["cuda"]) for r in rows)))
    for r in rows:
        if r["cpu"] != r["cuda"]:
            print(f"\n{r['path']}:{r['line']}:{r['column']} {r['code']}")
            print(f"  cpu:  {r['cpu_line']}")
            print(f"  cuda: {r['cuda_line']}")
    ratio = seconds["cuda"] / seconds["cpu"] if seconds["cpu"] else float("nan")
    print(f"\nseconds: cpu {seconds['cpu']:.1f}, cuda {seconds['cuda']:.1f} (cuda/cpu {ratio:.2f})")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
