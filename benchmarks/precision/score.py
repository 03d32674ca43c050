"""Precision of nanlint's default rules on the untuned corpus: findings joined with triage.jsonl.

    python benchmarks/precision/score.py [--label NAME] [--show-untriaged] [--context N]
    python benchmarks/precision/score.py --label NEW --new-vs main

Reads the findings that run.py wrote to .cache/results/LABEL and the verdicts in triage.jsonl
(one JSON object a line: package, version, path, line, code, verdict "real"|"false-alarm",
why). A finding's verdict is the triage line with the same package, version, path, line and
code. Prints, per split, each rule's findings, verdicts and precision (real / triaged), the
overall figure, then every finding that has no verdict yet (with N lines of its source around
it when --context is given, read from the git-ignored cache, for triaging).
`--new-vs OTHER` counts only the findings that OTHER's run did not have (same package, path,
line, code): what a code change added.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Set, Tuple

HERE = Path(__file__).resolve().parent
RESULTS = HERE / ".cache" / "results"
TRIAGE = HERE / "triage.jsonl"
VERDICTS = ("real", "false-alarm")
Key = Tuple[str, str, str, int, str]


def load_triage() -> Dict[Key, dict]:
    verdicts: Dict[Key, dict] = {}
    if not TRIAGE.exists():
        return verdicts
    for n, raw in enumerate(TRIAGE.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip():
            continue
        row = json.loads(raw)
        missing = {"package", "version", "path", "line", "code", "verdict", "why"} - set(row)
        if missing:
            sys.exit(f"triage.jsonl:{n}: missing {', '.join(sorted(missing))}")
        if row["verdict"] not in VERDICTS:
            sys.exit(f"triage.jsonl:{n}: verdict must be one of {', '.join(VERDICTS)}")
        key = (row["package"], row["version"], row["path"], row["line"], row["code"])
        if key in verdicts:
            sys.exit(f"triage.jsonl:{n}: a second verdict for {key}")
        verdicts[key] = row
    return verdicts


def load_findings(label: str) -> List[dict]:
    folder = RESULTS / label
    if not folder.is_dir():
        sys.exit(f"no results for {label!r}: run run.py --label {label} first")
    out = []
    for path in sorted(folder.glob("*.json")):
        if path.name == "meta.json":
            continue
        doc = json.loads(path.read_text(encoding="utf-8"))
        for f in doc["findings"]:
            out.append({**f, "package": doc["name"], "version": doc["version"], "split": doc["split"]})
    return out


def key_of(f: dict) -> Key:
    return (f["package"], f["version"], f["path"], f["line"], f["code"])


def context(f: dict, n: int) -> str:
    src = HERE / ".cache" / "src" / f"{f['package']}-{f['version']}" / f["path"]
    lines = src.read_text(encoding="utf-8", errors="replace").splitlines()
    lo, hi = max(1, f["line"] - n), min(len(lines), f["line"] + n)
    return "\n".join(f"{'>' if i == f['line'] else ' '}{i:5} {lines[i - 1]}" for i in range(lo, hi + 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="main")
    ap.add_argument("--new-vs", metavar="OTHER", help="only findings OTHER's run did not have")
    ap.add_argument("--show-untriaged", action="store_true", help="list the findings with no verdict")
    ap.add_argument("--context", type=int, default=0, metavar="N", help="with the list: N source lines around")
    args = ap.parse_args()

    findings = load_findings(args.label)
    if args.new_vs:
        before: Set[Key] = {key_of(f) for f in load_findings(args.new_vs)}
        findings = [f for f in findings if key_of(f) not in before]
        print(f"{args.label}: {len(findings)} findings that {args.new_vs} did not report")
    verdicts = load_triage()

    untriaged = []
    grand = Counter()
    for split in ("tune", "test"):
        rows: Dict[str, Counter] = defaultdict(Counter)
        for f in findings:
            if f["split"] != split:
                continue
            v = verdicts.get(key_of(f))
            rows[f["code"]]["findings"] += 1
            if v is None:
                rows[f["code"]]["untriaged"] += 1
                untriaged.append(f)
            else:
                rows[f["code"]][v["verdict"]] += 1
        total = Counter()
        print(f"\n{split} split")
        print(f"  {'rule':8} {'findings':>8} {'real':>5} {'false':>5} {'untriaged':>9} {'precision':>9}")
        for code in sorted(rows):
            c = rows[code]
            total.update(c)
            print(f"  {code:8} {c['findings']:8} {c['real']:5} {c['false-alarm']:5} {c['untriaged']:9} "
                  f"{precision(c):>9}")
        print(f"  {'all':8} {total['findings']:8} {total['real']:5} {total['false-alarm']:5} "
              f"{total['untriaged']:9} {precision(total):>9}")
        grand.update(total)
    print(f"\nboth splits: {grand['findings']} findings, {grand['real']} real, {grand['false-alarm']} false "
          f"alarms, {grand['untriaged']} untriaged, precision {precision(grand)}")

    if untriaged:
        print(f"\n{len(untriaged)} findings without a verdict in triage.jsonl"
              + ("" if args.show_untriaged else " (--show-untriaged lists them)"))
    if args.show_untriaged:
        for f in untriaged:
            print(f"\n{f['split']} {f['package']}=={f['version']} {f['path']}:{f['line']}:{f['column']}: "
                  f"{f['code']} {f['message']}")
            if args.context:
                print(context(f, args.context))


def precision(c: Counter) -> str:
    judged = c["real"] + c["false-alarm"]
    return f"{c['real'] / judged:.2f}" if judged else "-"


if __name__ == "__main__":
    main()
