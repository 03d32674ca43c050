"""Lint the untuned precision corpus (corpus.json) with nanlint's default rules.

    python benchmarks/precision/run.py [--python PY] [--label NAME] [--package NAME ...]
                                       [--select CODES]

Downloads each pinned wheel from PyPI (`pip download --no-deps --only-binary=:all:`), checks
its sha256 against corpus.json, extracts its .py files under .cache/src/NAME-VERSION
(git-ignored), then runs `PY -m nanlint check --output-format json --exit-zero` on each
package with an empty config (the default rules, no project settings). PY is the interpreter
whose installed nanlint is measured (default: this one), so another branch's code can be
measured with its own venv: `--python /path/to/other/.venv/bin/python --label other`.
`--select ALL` (or a list of codes) measures rules that are off by default, so that a rule's
page can state its precision on this corpus before it is turned on.

Writes .cache/results/LABEL/PACKAGE.json (the findings: path, line, column, code, message) and
.cache/results/LABEL/meta.json, and prints the findings per split and per rule code.
`score.py --label LABEL` joins them with triage.jsonl.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from bench_lint import fetch_wheel  # noqa: E402  (one wheel fetcher for every corpus)

CACHE = HERE / ".cache"
MANIFEST = HERE / "corpus.json"


def split_of(name: str) -> str:
    """The split, fixed by the package name alone (decided before any finding was read)."""
    return "tune" if int(hashlib.sha256(name.lower().encode()).hexdigest(), 16) % 2 == 0 else "test"


def load_corpus() -> List[dict]:
    packages = json.loads(MANIFEST.read_text(encoding="utf-8"))["packages"]
    for p in packages:
        if p["split"] != split_of(p["name"]):
            sys.exit(f"corpus.json: {p['name']} is marked {p['split']}, its hash says {split_of(p['name'])}")
    return packages


def fetch(p: dict) -> Path:
    """The package's .py files under .cache/src/NAME-VERSION, downloaded and checked once."""
    return fetch_wheel(p["name"], p["version"], p["sha256"], CACHE, wheel_name=p["wheel"])


def lint(python: str, root: Path, config: Path, select: Optional[str] = None, latent: bool = False) -> List[dict]:
    """nanlint's findings on one package (the default rules, or `select`; with `latent`, the
    value rules' latent findings too), paths relative to the package root."""
    chosen = (["--select", select] if select else []) + (["--latent"] if latent else [])
    proc = subprocess.run(
        [python, "-m", "nanlint", "check", "--output-format", "json", "--exit-zero",
         "--config", str(config), *chosen, "."],
        cwd=root, capture_output=True, text=True,
    )
    if proc.returncode != 0:
        sys.exit(f"nanlint failed on {root.name} (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    out = []
    for d in json.loads(proc.stdout):
        out.append({
            "path": Path(d["filename"]).as_posix().removeprefix("./"),
            "line": d["location"]["row"],
            "column": d["location"]["column"],
            "code": d["code"],
            "message": d["message"],
            "latent": d.get("latent", False),
        })
    if proc.stderr.strip():
        print(f"  {root.name}: nanlint stderr: {proc.stderr.strip()[:500]}", file=sys.stderr)
    return out


def linted_files(python: str, root: Path, config: Path) -> int:
    """How many .py files nanlint walks in the package (its default excludes drop, e.g., the
    copy of the sources that some wheels ship under build/lib)."""
    # (Another branch may predate the layer folders and keep config and files on top.)
    code = ("import sys\n"
            "try: from nanlint.run.config import load_settings; from nanlint.run.files import discover\n"
            "except ImportError: from nanlint.config import load_settings; from nanlint.files import discover\n"
            "print(sum(1 for _ in discover(['.'], load_settings(sys.argv[1]))))")
    out = subprocess.run([python, "-c", code, str(config)], cwd=root, capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def nanlint_origin(python: str) -> str:
    """Which nanlint the interpreter imports, and its git commit when it is a checkout."""
    where = subprocess.run([python, "-c", "import nanlint, os; print(os.path.dirname(nanlint.__file__))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    commit = subprocess.run(["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--", "."],
                           capture_output=True, text=True).stdout.strip()
    rev = commit.stdout.strip() if commit.returncode == 0 else "unknown"
    return f"{where} @ {rev}{' (uncommitted changes)' if dirty else ''}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=sys.executable, help="interpreter whose nanlint is run")
    ap.add_argument("--label", default="main", help="results go to .cache/results/LABEL")
    ap.add_argument("--package", action="append", help="only this package (repeatable)")
    ap.add_argument("--select", help="rule codes to run instead of the defaults (e.g. ALL, NAN123): "
                    "measures rules that are off by default")
    ap.add_argument("--latent", action="store_true",
                    help="also the value rules' latent findings (pooled.py counts them apart)")
    args = ap.parse_args()

    packages = load_corpus()
    if args.package:
        unknown = set(args.package) - {p["name"] for p in packages}
        if unknown:
            sys.exit(f"not in corpus.json: {', '.join(sorted(unknown))}")
        packages = [p for p in packages if p["name"] in args.package]

    results = CACHE / "results" / args.label
    results.mkdir(parents=True, exist_ok=True)
    config = CACHE / "empty.toml"  # the defaults: no select/ignore/precision from any pyproject
    config.write_text("")
    origin = nanlint_origin(args.python)
    print(f"nanlint: {origin}")

    per_rule: Dict[str, Counter] = {"tune": Counter(), "test": Counter()}
    files: Counter = Counter()
    for p in packages:
        root = fetch(p)
        # Each wheel is a project of its own: a root marker keeps nanlint's project search
        # (`precision = "auto"`: does the project train in float16?) inside it, not in the
        # checkout that holds .cache/.
        (root / "setup.cfg").touch()
        n_files = linted_files(args.python, root, config)
        files[p["split"]] += n_files
        findings = lint(args.python, root, config, args.select, args.latent)
        (results / f"{p['name']}.json").write_text(json.dumps(
            {"name": p["name"], "version": p["version"], "split": p["split"], "files": n_files,
             "findings": findings}, indent=1) + "\n")
        counts = Counter(f["code"] for f in findings)
        per_rule[p["split"]].update(counts)
        shown = ", ".join(f"{c} {n}" for c, n in sorted(counts.items())) or "none"
        print(f"{p['split']:4} {p['name']}=={p['version']}: {n_files} files, {len(findings)} findings ({shown})")
    (results / "meta.json").write_text(json.dumps({"nanlint": origin, "python": args.python,
                                                        "select": args.select or "defaults"}) + "\n")

    for split in ("tune", "test"):
        total = sum(per_rule[split].values())
        print(f"\n{split}: {files[split]} files, {total} findings")
        for code, n in sorted(per_rule[split].items()):
            print(f"  {code}: {n}")


if __name__ == "__main__":
    main()
