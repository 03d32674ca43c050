"""Append one labelled line to a manifest, reading the file from a local git mirror.

    python benchmarks/realbugs/add.py manifests/nanfix.jsonl --mirrors /work/.mirror \\
        --repo owner/name --commit SHA --path pkg/loss.py --match "torch.log(" \\
        --label bug --category log-of-zero --source URL --why "..."

`--match` finds the line by a substring (use `--line N` instead, or both to pick the
occurrence nearest N). The commit may be abbreviated or a ref; the full sha is stored. The
line's text is shown on the terminal for checking and is never written to the manifest.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import manifest
from fetch import from_mirror, mirror_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest")
    ap.add_argument("--mirrors", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--path", required=True)
    ap.add_argument("--line", type=int)
    ap.add_argument("--match")
    ap.add_argument("--label", required=True, choices=manifest.LABELS)
    ap.add_argument("--category", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--why", required=True)
    ap.add_argument("--codes", help="comma-separated rule codes that should flag the line")
    args = ap.parse_args()

    git_dir = mirror_dir(Path(args.mirrors), args.repo)
    if git_dir is None:
        sys.exit(f"no mirror of {args.repo}")
    commit = subprocess.run(
        ["git", "--git-dir", str(git_dir), "rev-parse", "--verify", args.commit + "^{commit}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    text = from_mirror(git_dir, commit, args.path).decode("utf-8", errors="replace")
    lines = manifest.source_lines(text)
    if args.match:
        hits = [i + 1 for i, t in enumerate(lines) if args.match in t]
        if not hits:
            sys.exit(f"no line contains {args.match!r}")
        if args.line:
            line = min(hits, key=lambda n: abs(n - args.line))
        elif len(hits) > 1:
            sys.exit(f"{len(hits)} lines contain {args.match!r}: {hits}; add --line")
        else:
            line = hits[0]
    elif args.line:
        line = args.line
    else:
        sys.exit("give --line or --match")
    obj = {
        "repo": args.repo,
        "commit": commit,
        "path": args.path,
        "line": line,
        "label": args.label,
        "category": args.category,
        "sha256": manifest.line_hash(lines[line - 1]),
        "source": args.source,
        "why": args.why,
    }
    if args.codes:
        obj["codes"] = [c.strip().upper() for c in args.codes.split(",") if c.strip()]
    manifest._entry(obj, "new entry")  # validate before writing
    key = (args.repo.lower(), commit, args.path, line)
    if Path(args.manifest).exists() and any(e.key == key for e in manifest.load([args.manifest])):
        sys.exit("that location is already in the manifest")
    with open(args.manifest, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(obj) + "\n")
    print(f"{args.label} {args.repo}@{commit[:10]}:{args.path}:{line}: {lines[line - 1].strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
