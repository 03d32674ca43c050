"""Fuzz `--fix`: generated modules with hazards spliced in and odd characters everywhere.

Each generated module is a valid Python module built from (a) statements Hypothesis draws with
hypothesmith (random but valid Python), (b) the top-level statements of this project's own
fixtures (hazards and look-alikes, written for nanlint), with (c) odd characters put into its
comments and strings (form feed, vertical tab, \\x1c-\\x1e, NEL, U+2028, U+2029, tabs) and (d) a
random line-ending style (LF, CRLF, CR) and maybe a BOM. For each module it checks:

- no internal error in any rule;
- every fixed text parses;
- only flagged lines changed (each changed original line carried a finding with a fix, and each
  added line is an import a fix needs or a line a fix moved);
- a second `--fix` changes nothing (a fixed point).

`python benchmarks/fuzz_fix.py --examples 2000` is the full run; the test suite runs a bounded one
(tests/test_fuzz.py). Prints the figures and exits 1 on any failure, writing each failing module
to --failures DIR.
"""

from __future__ import annotations

import argparse
import difflib
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

import libcst as cst

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nanlint.lint.engine import lint_source  # noqa: E402
from nanlint.lint.fixes import fix_source  # noqa: E402
from nanlint.rules import all_rules  # noqa: E402
from nanlint.core.text import split_lines  # noqa: E402

ODD = ["\f", "\v", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\t", "é", "\u00a0"]
ENDINGS = ["\n", "\r\n", "\r"]


def fixture_statements() -> List[str]:
    """Top-level statements of every fixture (our own hazard and look-alike code)."""
    out = []
    for path in sorted((ROOT / "fixtures").glob("NAN*.py")):
        module = cst.parse_module(path.read_text(encoding="utf-8"))
        for stmt in module.body:
            out.append(module.code_for_node(stmt))
    return out


def sprinkle(code: str, rng: random.Random) -> str:
    """Odd characters into comments and string literals (never into code, where they would
    change what parses)."""
    out = []
    for line in code.split("\n"):
        if "#" in line and rng.random() < 0.5:
            line = line + rng.choice(ODD) + "x"
        out.append(line)
    code = "\n".join(out)
    if rng.random() < 0.5:
        odd = "".join(rng.choice(ODD) for _ in range(3))
        code += f"\n_note = \"a{odd}b\"  # {rng.choice(ODD)}c\n"
    return code


def assemble(parts: List[str], rng: random.Random) -> str:
    body = "import torch\nimport torch.nn.functional as F\n" + "\n".join(p.rstrip("\n") + "\n" for p in parts)
    body = sprinkle(body, rng)
    ending = rng.choice(ENDINGS)
    if ending != "\n":
        body = body.replace("\n", ending)
    if rng.random() < 0.1:
        body = "\ufeff" + body
    return body


@dataclass
class Figures:
    modules: int = 0
    findings: int = 0
    fixes: int = 0
    internal_errors: int = 0
    unparsable: int = 0
    corrupted: int = 0
    not_idempotent: int = 0
    failures: List[str] = field(default_factory=list)


def check_module(source: str, rules, figures: Figures) -> Optional[str]:
    """The failure found in one module, or None."""
    figures.modules += 1
    try:
        cst.parse_module(source)
    except Exception:  # noqa: BLE001 - a generator slip, not a nanlint failure
        figures.modules -= 1
        return None
    first = fix_source("fuzz.py", source, rules, unsafe=True)
    figures.findings += len(first.remaining.diagnostics) + first.applied
    figures.fixes += first.applied
    problems = []
    if first.remaining.errors:
        figures.internal_errors += len(first.remaining.errors)
        problems.append("internal errors: " + "; ".join(first.remaining.errors[:3]))
    try:
        cst.parse_module(first.source)
    except Exception:  # noqa: BLE001
        figures.unparsable += 1
        problems.append("the fixed text does not parse")
    if first.source != source and not _each_round_changes_only_flagged_lines(source, rules):
        figures.corrupted += 1
        problems.append("a line without a fixable finding changed")
    second = fix_source("fuzz.py", first.source, rules, unsafe=True)
    if second.source != first.source:
        figures.not_idempotent += 1
        problems.append("a second --fix changed the file again")
    if second.remaining.errors and not first.remaining.errors:
        figures.internal_errors += len(second.remaining.errors)
        problems.append("internal errors on the fixed text")
    return "; ".join(problems) or None


def _each_round_changes_only_flagged_lines(source: str, rules) -> bool:
    text = source
    for _ in range(20):
        after = fix_source("fuzz.py", text, rules, unsafe=True, max_rounds=1).source
        if after == text:
            return True
        if not _only_flagged_lines_changed(text, after, rules):
            return False
        text = after
    return False


def _only_flagged_lines_changed(before: str, after: str, rules) -> bool:
    """In one fix round: every line changed or removed lay inside a fixable finding's span,
    and every added line is text a fix inserts (an import, an `unscale_` call) or a moved line."""
    flagged = set()
    inserted = []
    for d in lint_source("fuzz.py", before, rules).diagnostics:
        if d.fix is None:
            continue
        for e in d.fix.edits:
            flagged.update(text_line(before, r) for r in range(e.start.row, e.end.row + 1))
            inserted.append(e.content)
    old = split_lines(before, keepends=True)
    new = split_lines(after, keepends=True)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if any(line not in flagged for line in old[i1:i2]):
            return False
        if tag == "insert":
            for line in new[j1:j2]:
                body = line.strip()
                if not (body.startswith(("import ", "from ")) or line in old
                        or any(body and body in content for content in inserted)):
                    return False
    return True


def text_line(text: str, row: int) -> str:
    lines = split_lines(text, keepends=True)
    return lines[row - 1] if 0 < row <= len(lines) else ""


def generate(rng: random.Random, pool: List[str], hypo_modules: List[str]) -> str:
    parts = rng.sample(pool, k=min(len(pool), rng.randint(1, 6)))
    if hypo_modules and rng.random() < 0.7:
        parts.insert(rng.randint(0, len(parts)), rng.choice(hypo_modules))
    return assemble(parts, rng)


def hypothesmith_modules(count: int, seed: int) -> List[str]:
    """Valid modules from hypothesmith's grammar-based strategy (drawn up front: Hypothesis
    is the generator here, the checks are ours)."""
    try:
        import hypothesmith
        from hypothesis import HealthCheck, given, settings, seed as hseed
    except ImportError:
        return []
    drawn: List[str] = []

    @hseed(seed)
    @settings(max_examples=count, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(hypothesmith.from_node())
    def draw(code: str) -> None:
        drawn.append(code)

    draw()
    return [c for c in drawn if c.strip()]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hypothesmith", type=int, default=200, help="modules drawn from hypothesmith")
    parser.add_argument("--failures", type=Path, default=None)
    args = parser.parse_args(argv)
    figures = run(args.examples, args.seed, args.hypothesmith, args.failures)
    print(report(figures))
    return 1 if figures.failures else 0


def run(examples: int, seed: int, hypo: int, failures_dir: Optional[Path] = None,
        stop_at_failure: bool = False) -> Figures:
    """Check `examples` generated modules; with `stop_at_failure`, stop at the first that
    fails (what a test that the harness catches a defect needs)."""
    rng = random.Random(seed)
    rules = all_rules()
    pool = fixture_statements()
    hypo_modules = hypothesmith_modules(hypo, seed) if hypo else []
    figures = Figures()
    for i in range(examples):
        source = generate(rng, pool, hypo_modules)
        problem = check_module(source, rules, figures)
        if problem:
            figures.failures.append(f"module {i}: {problem}")
            if failures_dir is not None:
                failures_dir.mkdir(parents=True, exist_ok=True)
                (failures_dir / f"fuzz_{seed}_{i}.py").write_bytes(source.encode("utf-8"))
            if stop_at_failure:
                break
    return figures


def report(f: Figures) -> str:
    lines = [
        f"modules {f.modules}, findings {f.findings}, fixes applied {f.fixes}",
        f"internal errors {f.internal_errors}, unparsable {f.unparsable}, corrupted {f.corrupted}, "
        f"not idempotent {f.not_idempotent}",
    ]
    lines += f.failures[:20]
    return "\n".join(lines)


if __name__ == "__main__":
    start = time.time()
    code = main()
    print(f"{time.time() - start:.1f} s", file=sys.stderr)
    sys.exit(code)
