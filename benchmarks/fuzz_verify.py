"""Fuzz the verifier with well-formed but odd probes: no finding may crash it.

Takes real probes (every fixture finding, or `--from findings.json`), then per seed gives each
input a random kind, dim, domain (including [-inf, inf], [1e308, inf], empty intervals and
tiny ones) and evidence, and each probe random relations (naming NaN, huge numbers, the input
itself), and verifies them all on the CPU. Prints the verdict counts and every internal error
(a crash of the verifier on one finding); exits 1 if there was any.

    .venv/bin/python benchmarks/fuzz_verify.py [--seeds N] [--limit K] [--from findings.json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

KINDS = ["real", "probability", "simplex", "mask", "count", "integer"]
DOMAINS: List[Optional[list]] = [None, [0, 1], ["-inf", "inf"], [1e308, "inf"], [-5, -1], [0, 0], [3, 3],
                                 [-1e-300, 1e-300], ["-inf", 0]]
DIMS = [None, 0, 1, -1, -2, 5]


def fixture_findings() -> List[Dict[str, Any]]:
    from nanlint.lint.engine import lint_source
    from nanlint.output.json_format import to_dict
    from nanlint.verify.fixture_set import fixture_files, rules_for_fixture

    out = []
    for path in fixture_files():
        for d in lint_source(str(path), path.read_text(encoding="utf-8"), rules_for_fixture(path)).diagnostics:
            if d.probe is not None and d.probe.kind == "expression":
                out.append(to_dict(d))
    return out


def mutate(items: List[Dict[str, Any]], seed: int) -> List[Dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for item in items:
        item = json.loads(json.dumps(item))
        probe = item.get("probe") or {}
        if probe.get("kind") != "expression":
            continue
        for i in probe.get("inputs") or []:
            i["kind"] = rng.choice(KINDS)
            i["dim"] = rng.choice(DIMS)
            i["domain"] = rng.choice(DOMAINS)
            i["evidence"] = rng.choice(["", "softmax at line 3"])
        names = [i["name"] for i in probe.get("inputs") or []] or ["x"]
        probe["relations"] = [[rng.choice(names), rng.choice([">=", ">", "<", "<=", "==", "!="]),
                               rng.choice(names + ["0", "1e400", "nan"])] for _ in range(rng.randint(0, 2))]
        out.append(item)
    return out


def fuzz(items: List[Dict[str, Any]], seeds: int) -> int:
    from nanlint.verify.findings import parse_findings
    from nanlint.verify.verifier import verify_all

    errors = 0
    for seed in range(seeds):
        start = time.perf_counter()
        diagnostics = parse_findings(json.dumps(mutate(items, seed)))
        outcome = verify_all(diagnostics, "cpu")
        counts = Counter(r.verification.verdict for r in outcome.results)
        print(f"seed {seed}: {len(diagnostics)} probes, {dict(counts)}, internal errors {len(outcome.errors)}, "
              f"{time.perf_counter() - start:.1f} s")
        for e in outcome.errors:
            print(f"  {e}")
        errors += len(outcome.errors)
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--limit", type=int, default=0, help="use only the first K probes (0: all)")
    parser.add_argument("--from", dest="from_file", help="probes from this findings file instead of the fixtures")
    args = parser.parse_args()
    items = json.loads(Path(args.from_file).read_text()) if args.from_file else fixture_findings()
    if args.limit:
        items = items[:args.limit]
    errors = fuzz(items, args.seeds)
    print(f"internal errors: {errors}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
