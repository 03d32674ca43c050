"""`--select ALL --fix --unsafe-fixes` over thousands of real files: nothing crashes, nothing
is corrupted, a second run changes nothing.

    python benchmarks/corpus_fix.py [--package NAME ...]

Takes the pinned wheels of bench_lint.py (downloaded and checked there), copies their .py files
into a scratch folder, and runs the real command line on it twice, each in a subprocess whose
wall time and peak memory are measured. Prints: files, findings, fixes, crashes (a traceback or
an exit code other than 0/1), internal errors (stderr lines), unparsable fixed files (LibCST),
files changed by the second run, peak RSS and wall time.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import libcst  # noqa: E402

from bench_lint import PACKAGES, fetch  # noqa: E402


def digest(root: Path) -> Dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*.py"))
    }


def run_fix(root: Path) -> Dict[str, object]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "nanlint", "check", "--select", "ALL", "--fix", "--unsafe-fixes",
         "--exit-zero", "--output-format", "json", "."],
        cwd=root, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(HERE.parent)},
    )
    wall = time.time() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    import json

    try:
        findings = len(json.loads(proc.stdout or "[]"))
    except ValueError:
        findings = -1
    return {
        "code": proc.returncode,
        "crash": proc.returncode not in (0, 1) or "Traceback" in proc.stderr,
        "internal": [l for l in proc.stderr.splitlines() if "internal error" in l],
        "stderr": proc.stderr,
        "findings": findings,
        "wall": wall,
        # ru_maxrss is the largest child so far (KB on Linux): report it when it grew.
        "peak_mb": max(peak, before) / 1024,
    }


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", action="append", choices=sorted(PACKAGES))
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args(argv)
    names = args.package or sorted(PACKAGES)
    scratch = Path(tempfile.mkdtemp(prefix="nanlint-corpus-"))
    try:
        for name in names:
            shutil.copytree(fetch(name), scratch / name, ignore=shutil.ignore_patterns(".complete"))
        files = list(scratch.rglob("*.py"))
        original = digest(scratch)
        first = run_fix(scratch)
        after_first = digest(scratch)
        unparsable = []
        for rel, h in after_first.items():
            if h != original.get(rel):
                try:
                    libcst.parse_module((scratch / rel).read_text(encoding="utf-8"))
                except Exception:  # noqa: BLE001 - any parse failure counts
                    unparsable.append(rel)
        second = run_fix(scratch)
        after_second = digest(scratch)
        changed_again = [rel for rel in after_second if after_second[rel] != after_first.get(rel)]
        print(f"packages: {', '.join(f'{n}=={PACKAGES[n][0]}' for n in names)}")
        print(f"files {len(files)}, changed by --fix {sum(1 for r in after_first if after_first[r] != original.get(r))}")
        print(f"first run: exit {first['code']}, findings left {first['findings']}, "
              f"wall {first['wall']:.1f} s, peak RSS {first['peak_mb']:.0f} MB")
        print(f"crashes {int(first['crash']) + int(second['crash'])}, internal errors "
              f"{len(first['internal']) + len(second['internal'])}, unparsable {len(unparsable)}, "
              f"changed by a second --fix {len(changed_again)}")
        for line in (first["internal"] + second["internal"])[:10]:
            print("  " + line)
        for rel in (unparsable + changed_again)[:10]:
            print("  " + rel)
        if first["crash"]:
            print(first["stderr"][-2000:])
        bad = first["crash"] or second["crash"] or unparsable or changed_again
        return 1 if bad else 0
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
