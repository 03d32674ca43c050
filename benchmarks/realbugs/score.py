"""Score nanlint on the real-bugs benchmark: recall on bug lines, false alarms on safe lines.

    python benchmarks/realbugs/score.py                 # default rules
    python benchmarks/realbugs/score.py --select ALL    # every rule
    python benchmarks/realbugs/score.py --json          # machine-readable
    python benchmarks/realbugs/score.py --projects /work/.mirror   # with each project's precision

Run fetch.py first. nanlint is imported in-process from whatever `nanlint` the running
Python finds (run it with another checkout's venv, or pass --nanlint-root, to score that
checkout). A labelled line counts as flagged when a finding (any code, or one of the entry's
"codes" when it lists some) starts or ends within the line range of the simple statement
that contains it (the header only, for an if/for/while/with/def line).

With `--projects MIRRORS`, each file is linted as `nanlint check` lints it inside its
repository at that commit: the Python files and root markers of the commit are extracted
from the bare git mirror (fetch.py's `--mirrors` layout) into `.projects/`, and the
precision nanlint finds there (`precision = "auto"`: a trainer's `.half()`, a `GradScaler`)
is the one the file is linted with. Without it, a file is linted alone (float32 unless it
shows half precision itself, or `--precision` says so).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import manifest
from manifest import CATEGORY_KINDS, DEFAULT_CACHE, Entry, ManifestError
from split import TEST, TUNE

# Findings about the file itself, not about a line's numerics.
_FILE_CODES = {"NAN001", "NAN002"}


def statement_span(tree: Optional[ast.AST], line: int) -> Tuple[int, int]:
    """(first, last) line of the innermost statement containing `line`; for a compound
    statement only its header (up to the line before its body)."""
    best: Optional[Tuple[int, int]] = None
    if tree is None:
        return (line, line)
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        lo, hi = node.lineno, getattr(node, "end_lineno", None) or node.lineno
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            # Compound statement: the header ends where the body (or first decorator) starts.
            hi = max(lo, body[0].lineno - 1)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                lo = min([d.lineno for d in node.decorator_list] + [lo])
        if lo <= line <= hi and (best is None or hi - lo < best[1] - best[0]):
            best = (lo, hi)
    return best or (line, line)


def _parse(text: str) -> Optional[ast.AST]:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None


def _nanlint(root: Optional[str]):
    if root:
        sys.path.insert(0, str(Path(root).resolve()))
    # Imported after the path is set; a checkout from before the layer folders has them on top.
    try:
        from nanlint.lint import engine
        from nanlint.run import config
    except ImportError:
        from nanlint import config, engine  # type: ignore[no-redef]

    return config, engine


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifests", nargs="*", help="manifest files or folders (default: manifests/*.jsonl)")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help="where fetch.py put the files")
    ap.add_argument("--select", help="rule codes/prefixes to enable instead of the defaults (e.g. ALL)")
    ap.add_argument("--extend-select", help="rule codes/prefixes to enable on top")
    ap.add_argument("--ignore", help="rule codes/prefixes to disable")
    ap.add_argument("--latent", action="store_true", help="also count the value rules' latent findings (as `nanlint --latent`)")
    ap.add_argument("--precision", choices=["float16", "bfloat16"], help="as the config's `precision`")
    ap.add_argument("--split", choices=[TUNE, TEST], help="score one half only")
    ap.add_argument("--projects", metavar="MIRRORS",
                    help="bare git mirrors: lint each file with the precision its repository shows")
    ap.add_argument("--nanlint-root", help="checkout whose nanlint package to import")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ap.add_argument("-v", "--verbose", action="store_true", help="also list every labelled line's outcome")
    args = ap.parse_args(argv)

    try:
        entries = manifest.load(args.manifests)
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 0
    if args.split:
        entries = [e for e in entries if e.split == args.split]

    config, engine = _nanlint(args.nanlint_root)
    settings = config.Settings()
    if args.select:
        settings.select = config.validate_selectors(args.select.split(","), "--select")
    if args.extend_select:
        settings.extend_select = config.validate_selectors(args.extend_select.split(","), "--extend-select")
    if args.ignore:
        settings.ignore = config.validate_selectors(args.ignore.split(","), "--ignore")
    settings.latent = args.latent
    rules = config.select_rules(settings)

    cache = Path(args.cache)
    by_file: Dict[Tuple[str, str, str], List[Entry]] = defaultdict(list)
    for e in entries:
        by_file[(e.repo, e.commit, e.path)].append(e)

    outcomes: List[dict] = []
    problems: List[str] = []
    for (repo, commit, path), file_entries in sorted(by_file.items()):
        text = manifest.read_cached(cache, file_entries[0])
        if text is None:
            problems.append(f"not in the cache (run fetch.py): {repo}@{commit[:12]}:{path}")
            continue
        precision, imported = args.precision, None
        if args.projects:
            checkout = project_checkout(Path(args.projects), repo, commit)
            imported = project_imports(checkout / path, text)
            if precision is None:
                precision = project_precision(checkout / path, settings)
        result = engine.lint_source(path, text, rules, precision, imported=imported)
        for err in result.errors:
            problems.append(f"nanlint error on {repo}:{path}: {err}")
        tree = _parse(text)
        for e in file_entries:
            bad = manifest.check_line(text, e)
            if bad:
                problems.append(f"{e.origin}: skipped, {bad}")
                continue
            lo, hi = statement_span(tree, e.line)
            hits = sorted(
                {
                    d.code
                    for d in result.diagnostics
                    if d.code not in _FILE_CODES
                    and (not e.codes or d.code in e.codes)
                    and (lo <= d.start.row <= hi or lo <= d.end.row <= hi)
                }
            )
            outcomes.append(
                {
                    "origin": e.origin,
                    "repo": e.repo,
                    "commit": e.commit,
                    "path": e.path,
                    "line": e.line,
                    "span": [lo, hi],
                    "label": e.label,
                    "category": e.category,
                    "kind": e.kind,
                    "split": e.split,
                    "flagged": bool(hits),
                    "codes": hits,
                }
            )

    report = summarize(outcomes)
    if args.json:
        print(json.dumps({"summary": report, "lines": outcomes, "problems": problems}, indent=2))
        return 0
    print_tables(report, rules)
    if args.verbose:
        print()
        for o in outcomes:
            mark = "FLAGGED" if o["flagged"] else "quiet"
            print(
                f"{o['split']:4} {o['label']:4} {mark:7} {o['category']:24} "
                f"{o['repo']}@{o['commit'][:10]}:{o['path']}:{o['line']} {' '.join(o['codes'])}"
            )
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)
    return 0


# Checkouts for --projects (git-ignored; apart from the cache, which holds only labelled files).
PROJECTS = Path(__file__).resolve().parent / ".projects"


def project_checkout(mirrors: Path, repo: str, commit: str) -> Path:
    """The Python files and root markers of `repo` at `commit`, extracted once from its mirror."""
    from fetch import mirror_dir

    checkout = PROJECTS / repo.replace("/", "+") / commit
    if not (checkout / ".done").exists():
        git_dir = mirror_dir(mirrors, repo)
        if git_dir is None:
            raise SystemExit(f"no mirror of {repo} under {mirrors}")
        checkout.mkdir(parents=True, exist_ok=True)
        listed = subprocess.run(["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only", "-z", commit],
                                capture_output=True, check=True).stdout.decode("utf-8", "replace").split("\0")
        wanted = [f for f in listed if f.endswith(".py") or f.rsplit("/", 1)[-1] in ("pyproject.toml", "setup.cfg")]
        archive = subprocess.run(["git", "--git-dir", str(git_dir), "archive", "--format=tar", commit, "--", *wanted],
                                 capture_output=True, check=True)
        subprocess.run(["tar", "x", "-C", str(checkout)], input=archive.stdout, check=True)
        (checkout / ".git").mkdir(exist_ok=True)  # the repository's root, as in a clone
        (checkout / ".done").touch()
    return checkout


def project_precision(file: Path, settings):
    """The precision nanlint finds for `file` in its checkout (None: float32)."""
    from nanlint.run.project_precision import ProjectPrecisionFinder

    return ProjectPrecisionFinder().of(file, settings)


def project_imports(file: Path, text: str):
    """The project modules `file` imports, as `nanlint check` hands them to its lint."""
    from nanlint.analysis.project import ProjectIndex

    index = ProjectIndex()
    index.note_content(file, text.encode("utf-8", "surrogateescape"))
    return index.module_refs(file)


def _cell() -> dict:
    return {"bug": 0, "recalled": 0, "safe": 0, "false_alarms": 0, "repos": set()}


def summarize(outcomes: List[dict]) -> dict:
    """{split: {"all": counts, "kinds": {kind: counts}, "categories": {category: counts}}}
    with split "all" too."""
    table: Dict[str, Dict[str, dict]] = defaultdict(lambda: defaultdict(_cell))
    for o in outcomes:
        for split in (o["split"], "all"):
            for cat in (o["category"], "*", "kind:" + o.get("kind", CATEGORY_KINDS.get(o["category"], "?"))):
                c = table[split][cat]
                c["repos"].add(o["repo"].lower())
                if o["label"] == "bug":
                    c["bug"] += 1
                    c["recalled"] += o["flagged"]
                else:
                    c["safe"] += 1
                    c["false_alarms"] += o["flagged"]
    out = {}
    for split in (TUNE, TEST, "all"):
        cats = table.get(split, {})
        out[split] = {
            "all": _finish(cats.get("*", _cell())),
            "kinds": {k[5:]: _finish(v) for k, v in sorted(cats.items()) if k.startswith("kind:")},
            "categories": {k: _finish(v) for k, v in sorted(cats.items())
                           if k != "*" and not k.startswith("kind:")},
        }
    return out


def _finish(c: dict) -> dict:
    return {
        "repos": len(c["repos"]),
        "bug": c["bug"],
        "recalled": c["recalled"],
        "recall": round(c["recalled"] / c["bug"], 3) if c["bug"] else None,
        "safe": c["safe"],
        "false_alarms": c["false_alarms"],
        "false_alarm_rate": round(c["false_alarms"] / c["safe"], 3) if c["safe"] else None,
    }


def _ratio(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}"


def print_tables(report: dict, rules) -> None:
    print(f"rules: {len(rules)} selected ({', '.join(r.code for r in rules)})")
    for split in (TUNE, TEST, "all"):
        block = report[split]
        a = block["all"]
        print()
        print(
            f"== {split}: {a['repos']} repos; bugs {a['recalled']}/{a['bug']} recalled "
            f"(recall {_ratio(a['recall'])}); safe {a['false_alarms']}/{a['safe']} "
            f"flagged (false-alarm rate {_ratio(a['false_alarm_rate'])})"
        )
        for kind, c in block.get("kinds", {}).items():
            print(
                f"   {kind:7} bugs {c['recalled']}/{c['bug']} (recall {_ratio(c['recall'])}); "
                f"safe {c['false_alarms']}/{c['safe']} flagged (rate {_ratio(c['false_alarm_rate'])})"
            )
        if split == "all":
            continue
        print(f"  {'category':26} {'bug':>4} {'hit':>4} {'recall':>6}   {'safe':>4} {'fa':>4} {'rate':>5}")
        for cat, c in block["categories"].items():
            print(
                f"  {cat:26} {c['bug']:4} {c['recalled']:4} {_ratio(c['recall']):>6}   "
                f"{c['safe']:4} {c['false_alarms']:4} {_ratio(c['false_alarm_rate']):>5}"
            )


if __name__ == "__main__":
    sys.exit(main())
