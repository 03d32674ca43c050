"""Precision of nanlint on research repositories it was not tuned on, judged blind.

    python benchmarks/precision/repos.py --mirrors /work/.mirror [--label NAME] [--select CODES]
        [--batch N] [--python PY] [--show-untriaged]

The PyPI corpus (run.py) is libraries; this measures training scripts and research code.
`repositories.json` names each repository by commit with its split (the same hash of the
"owner/name" as benchmarks/realbugs: tune rules on the tune half only) and the batch it was
chosen in; `repo_triage.jsonl` holds one verdict per judged finding: repo, commit, path, line,
code, verdict ("real" / "false-alarm"), why (in the judge's words, never quoted code).

For each repository the script extracts the commit's .py, .ipynb, .toml and .cfg files from a
bare git mirror into the git-ignored `.cache/repos/` (nothing is downloaded; no third-party
code is committed), runs `PY -m nanlint check .` inside it as a user would (the default rules
unless --select, the repository's own configuration and precision), writes the findings to
`.cache/results/LABEL/repos/`, and prints, per split and rule, findings, verdicts and
precision (real / judged).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
REPOSITORIES = HERE / "repositories.json"
TRIAGE = HERE / "repo_triage.jsonl"
CACHE = HERE / ".cache" / "repos"
RESULTS = HERE / ".cache" / "results"
KEPT = (".py", ".ipynb", ".toml", ".cfg")
Key = Tuple[str, str, int, str]

sys.path.insert(0, str(HERE.parent / "realbugs"))
from fetch import mirror_dir  # noqa: E402  (the realbugs fetcher's mirror layouts)
from split import split_of  # noqa: E402


def load_repositories() -> List[dict]:
    repos = json.loads(REPOSITORIES.read_text(encoding="utf-8"))
    for r in repos:
        if split_of(r["repo"]) != r["split"]:
            sys.exit(f"repositories.json: {r['repo']} is in the {split_of(r['repo'])} half, not {r['split']}")
    return repos


def load_triage() -> Dict[Key, dict]:
    verdicts: Dict[Key, dict] = {}
    for n, raw in enumerate(TRIAGE.read_text(encoding="utf-8").splitlines(), 1):
        if raw.strip():
            row = json.loads(raw)
            if row.get("verdict") not in ("real", "false-alarm"):
                sys.exit(f"repo_triage.jsonl:{n}: verdict must be real or false-alarm")
            verdicts[(row["repo"], row["path"], row["line"], row["code"])] = row
    return verdicts


def extract(git_dir: Path, commit: str, into: Path) -> int:
    """The commit's kept files under `into` (once: a complete folder is reused)."""
    # A clone has `.git` at its root: nanlint's project search (configuration, precision,
    # imports) then stops there, as it would for the user, not in the checkout holding .cache.
    (into / ".git").mkdir(parents=True, exist_ok=True)
    done = into / ".extracted"
    if done.is_file():
        return int(done.read_text())
    listing = subprocess.run(["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only", commit],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    count = 0
    for path in listing:
        if not path.endswith(KEPT):
            continue
        shown = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"], capture_output=True)
        if shown.returncode != 0:
            continue  # a file the snapshot lacks (large blobs may be absent)
        target = into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(shown.stdout)
        count += 1
    done.write_text(str(count))
    return count


def lint(python: str, root: Path, select: Optional[str], latent: bool = False) -> List[dict]:
    cmd = [python, "-m", "nanlint", "check", ".", "--output-format", "json", "--exit-zero", "--no-cache"]
    own = root / "pyproject.toml"
    if not (own.is_file() and "[tool.nanlint" in own.read_text(encoding="utf-8", errors="replace")):
        # Without a configuration of its own, nanlint would take the one of the checkout
        # holding .cache/ (configuration is searched upwards, as ruff does): use the defaults.
        empty = HERE / ".cache" / "empty.toml"
        empty.touch()
        cmd += ["--config", str(empty)]
    if select:
        cmd += ["--select", select]
    if latent:
        cmd += ["--latent"]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nanlint failed in {root}: {proc.stderr.strip()[-500:]}")
    return [f for f in json.loads(proc.stdout) if f["code"] not in ("NAN001", "NAN002")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mirrors", type=Path, required=True, help="folder of bare git mirrors")
    ap.add_argument("--label", default="repos")
    ap.add_argument("--select", default=None)
    ap.add_argument("--latent", action="store_true", help="also the value rules' latent findings")
    ap.add_argument("--batch", type=int, action="append", help="only the repositories chosen in batch N (repeatable)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--show-untriaged", action="store_true")
    args = ap.parse_args()

    verdicts = load_triage()
    out_dir = RESULTS / args.label / "repos"
    out_dir.mkdir(parents=True, exist_ok=True)
    counts: Dict[str, Dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    untriaged: List[str] = []
    for r in load_repositories():
        if args.batch and r["batch"] not in args.batch:
            continue
        git_dir = mirror_dir(args.mirrors, r["repo"])
        if git_dir is None:
            print(f"warning: no mirror of {r['repo']}", file=sys.stderr)
            continue
        root = CACHE / r["repo"].replace("/", "+") / r["commit"]
        extract(git_dir, r["commit"], root)
        findings = lint(args.python, root, args.select, args.latent)
        (out_dir / (r["repo"].replace("/", "+") + ".json")).write_text(json.dumps(findings, indent=1))
        for f in findings:
            row = verdicts.get((r["repo"], f["filename"], f["location"]["row"], f["code"]))
            verdict = row["verdict"] if row else "untriaged"
            counts[r["split"]][f["code"]][verdict] += 1
            if row is None:
                untriaged.append(f"{r['split']} {r['repo']} {f['filename']}:{f['location']['row']}: "
                                 f"{f['code']} {f['message']}")
    for split in ("tune", "test"):
        rules = counts.get(split, {})
        total = Counter()
        print(f"\n{split} split\n  rule     findings  real false untriaged precision")
        for code in sorted(rules):
            c = rules[code]
            total.update(c)
            print(f"  {code:8} {sum(c.values()):8} {c['real']:5} {c['false-alarm']:5} {c['untriaged']:9}      {_precision(c)}")
        print(f"  {'all':8} {sum(total.values()):8} {total['real']:5} {total['false-alarm']:5} "
              f"{total['untriaged']:9}      {_precision(total)}")
    if args.show_untriaged:
        print("\nuntriaged:\n" + "\n".join(untriaged))


def _precision(c: Counter) -> str:
    # As score.py computes it; not imported: realbugs has a `score` module of its own.
    judged = c["real"] + c["false-alarm"]
    return f"{c['real'] / judged:.2f}" if judged else "-"


if __name__ == "__main__":
    main()
