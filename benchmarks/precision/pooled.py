"""Precision by claim of every rule and of the default set, pooling both untuned corpora.

    python benchmarks/precision/pooled.py --pypi LABEL --repos LABEL [--markdown] [--show-unjudged]
        (--pypi and --repos repeat: a later batch's run adds its findings)

Reads the findings of a run.py run (the PyPI corpus) and of a repos.py run (the research
repositories), both made with `--select ALL`, and the verdicts in triage.jsonl and
repo_triage.jsonl. A finding counts as judged by its rule's claim (rules/README.md: form,
value, misuse) when its verdict row says `"standard": "claim"`; value rules were always judged
by their claim ("the value can reach the singular point"), so their older rows count too.
A verdict "real" is a finding whose claim is correct, "false-alarm" one whose claim is not.

Prints, for the test half and then the tune half (the same hash splits as run.py and
repos.py), each rule's kind, whether it is on by default, its findings, judged findings,
correct ones and precision; then the default set's figure. `--markdown` prints the same
tables for benchmarks/precision/README.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
RESULTS = HERE / ".cache" / "results"
sys.path.insert(0, str(HERE.parent.parent))

from nanlint.rules import all_rules  # noqa: E402

sys.path.insert(0, str(HERE))
from score import load_findings  # noqa: E402  (run.py's findings, as score.py reads them)

SPLITS = ("test", "tune")


def _rows(path: Path) -> List[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _counts(verdict: Optional[dict], kind: str) -> str:
    """"real", "false-alarm" or "unjudged" for one finding, by its rule's claim."""
    if verdict is None:
        return "unjudged"
    if kind != "value" and verdict.get("standard") != "claim":
        return "unjudged"  # judged by the older standard only: not evidence for this claim
    return verdict["verdict"]


def pypi_findings(label: str) -> List[Tuple[str, str, Tuple]]:
    """(split, code, triage key) for every finding of a run.py run."""
    return [(f["split"], _row(f), ("pypi", f["package"], f["version"], f["path"], f["line"], f["code"]))
            for f in load_findings(label)]


# A value rule's latent findings (no evidence that the value gets there; shown only with
# `--latent`) are counted in a row of their own: the default set reports only the manifest ones.
LATENT = "/latent"


def _row(f: dict) -> str:
    return f["code"] + (LATENT if f.get("latent") else "")


def repo_findings(label: str) -> List[Tuple[str, str, Tuple]]:
    folder = RESULTS / label / "repos"
    if not folder.is_dir():
        sys.exit(f"no results for {label!r}: run repos.py --label {label} --select ALL first")
    splits = {r["repo"].replace("/", "+"): (r["repo"], r["split"])
              for r in json.loads((HERE / "repositories.json").read_text(encoding="utf-8"))}
    out = []
    for path in sorted(folder.glob("*.json")):
        if path.stem not in splits:
            continue
        repo, split = splits[path.stem]
        for f in json.loads(path.read_text(encoding="utf-8")):
            out.append((split, _row(f), ("repo", repo, f["filename"], f["location"]["row"], f["code"])))
    return out


def verdicts() -> Dict[Tuple, dict]:
    out: Dict[Tuple, dict] = {}
    for row in _rows(HERE / "triage.jsonl"):
        out[("pypi", row["package"], row["version"], row["path"], row["line"], row["code"])] = row
    for row in _rows(HERE / "repo_triage.jsonl"):
        out[("repo", row["repo"], row["path"], row["line"], row["code"])] = row
    return out


def table(findings, judged: Dict[Tuple, dict]) -> Tuple[Dict[str, Dict[str, Counter]], List[Tuple]]:
    rules = {r.code: r for r in all_rules()}
    counts: Dict[str, Dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    unjudged = []
    for split, code, key in findings:
        rule = rules.get(code.removesuffix(LATENT))
        if rule is None:
            continue
        outcome = _counts(judged.get(key), rule.kind)
        counts[split][code][outcome] += 1
        if outcome == "unjudged":
            unjudged.append((split, key))
    return counts, unjudged


def _precision(c: Counter) -> str:
    n = c["real"] + c["false-alarm"]
    return f"{c['real'] / n:.2f}" if n else "-"


def report(counts, markdown: bool) -> None:
    rules = {r.code: r for r in all_rules()}
    for split in SPLITS:
        rows = counts.get(split, {})
        default = Counter()
        kinds: Dict[str, Counter] = defaultdict(Counter)
        if markdown:
            print(f"\n{split} half\n")
            print("| rule | kind | default | findings | judged | correct | precision |")
            print("|---|---|---|---|---|---|---|")
        else:
            print(f"\n{split} half")
            print(f"  {'rule':8} {'kind':6} {'default':7} {'findings':>8} {'judged':>6} {'correct':>7} {'precision':>9}")
        for code in sorted(rows):
            c = rows[code]
            rule = rules[code.removesuffix(LATENT)]
            judged_n = c["real"] + c["false-alarm"]
            on = "on" if rule.default_enabled and not code.endswith(LATENT) else "off"
            if on == "on":
                default.update(c)
            kinds[rule.kind].update(c)
            if markdown:
                print(f"| {code} {rule.name} | {rule.kind} | {on} | {sum(c.values())} | {judged_n} | "
                      f"{c['real']} | {_precision(c)} |")
            else:
                print(f"  {code:8} {rule.kind:6} {on:7} {sum(c.values()):8} {judged_n:6} {c['real']:7} {_precision(c):>9}")
        for name, c in [(f"kind {k}", v) for k, v in sorted(kinds.items())] + [("default set", default)]:
            judged_n = c["real"] + c["false-alarm"]
            if markdown:
                print(f"| **{name}** | | | {sum(c.values())} | {judged_n} | {c['real']} | **{_precision(c)}** |")
            else:
                print(f"  {name:24} {sum(c.values()):8} {judged_n:6} {c['real']:7} {_precision(c):>9}")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pypi", required=True, action="append",
                    help="label of a run.py --select ALL run (repeatable: a later batch's run)")
    ap.add_argument("--repos", required=True, action="append",
                    help="label of a repos.py --select ALL run (repeatable)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--show-unjudged", action="store_true", help="list the findings without a verdict by claim")
    args = ap.parse_args(argv)
    found = {}
    for label in args.pypi:
        found.update((key, (split, code)) for split, code, key in pypi_findings(label))
    for label in args.repos:
        found.update((key, (split, code)) for split, code, key in repo_findings(label))
    counts, unjudged = table([(split, code, key) for key, (split, code) in found.items()], verdicts())
    report(counts, args.markdown)
    if args.show_unjudged:
        rules = {r.code: r for r in all_rules()}
        for split, key in unjudged:
            if rules[key[-1]].kind != "value":
                print(split, *key)
    return 0


if __name__ == "__main__":
    sys.exit(main())
