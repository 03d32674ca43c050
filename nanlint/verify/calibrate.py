"""Where each rule fails, as the verifier measures it on the rule's fixtures.

`python -m nanlint.verify.calibrate [CODES...]` lints fixtures/<CODE>_*.py (every default
rule plus CODE, as the fixture tests do), verifies each finding of CODE on the CPU and writes
a Markdown section to nanlint/rules/verified/<CODE>.md: one table with a row per context
(input dtype, autocast, device) saying where the original and the fix fail, aggregated over
the findings, the verdict counts and a few witnesses a person can rerun. The rule pages
(`nanlint rule CODE`, rules/KIND/CODE.md) include it as "Where it fails (verified)".

The output is deterministic for a given torch version and CPU kernels: the verifier's inputs are
seeded, kernels run on one thread, findings and contexts keep their order, and the file holds
counts and the verifier's rounded figures, no timings or dates. With no CODES, every rule
that has fixtures is calibrated; `--check` compares instead of writing (exit 1 when stale),
leaving out what depends on the CPU's float kernels (point counts, witnesses' numbers).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

# float16 kernels round differently with AVX-512 than with AVX2, so the counts in a section
# depend on the vector kernels torch picks. Every x86-64 machine the project runs on has AVX2:
# calibrations ask for those kernels (effective only where torch is not imported yet; the
# tests' conftest asks first) and the section names the kernels it was measured with.
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")

import torch  # noqa: E402

from ..core.diagnostics import Diagnostic
from ..lint.engine import lint_source
from .fixture_set import FIXTURES, fixture_code, fixture_files, rules_for_fixture
from .expression import EXTREME
from .verdict import (
    CONFIRMED,
    FIX_FAILED,
    NOT_REPRODUCED,
    NOT_VERIFIABLE,
    POSSIBLE,
    ContextOutcome,
    Verification,
    Witness,
    fmt_number,
    not_verifiable,
)
from .verifier import verify_one

DEVICE = "cpu"
# The generated sections: package data, so that an installed nanlint shows them too.
# Package data of the rules (their pages read it), written here.
VERIFIED_DIR = Path(__file__).resolve().parent.parent / "rules" / "verified"
MAX_WITNESSES = 3


@dataclass
class Checked:
    path: Path
    diagnostic: Diagnostic
    verification: Verification


def verify_rule(code: str, fixtures: Optional[Path] = None, device: str = DEVICE) -> List[Checked]:
    """Every finding of `code` in its fixture files, verified, in file and position order."""
    out: List[Checked] = []
    for path in fixture_files(fixtures, code):
        source = path.read_text(encoding="utf-8")
        result = lint_source(path.name, source, rules_for_fixture(path))
        for d in result.diagnostics:
            if d.code != code:
                continue
            try:
                v = verify_one(d, device)
            except Exception as exc:  # noqa: BLE001 - reported in the section, never fatal
                v = not_verifiable(f"internal error: {type(exc).__name__}: {exc}", device)
            out.append(Checked(path, d, v))
    return out


# ----------------------------------------------------------------------------- aggregation


Key = Tuple[str, str, Optional[str]]  # dtype, device, autocast


@dataclass
class _Side:
    forward: int = 0
    gradient: int = 0
    inaccurate: int = 0
    points: int = 0  # summed over the findings where this side ran
    raised: int = 0  # findings where this side raised
    ran: int = 0  # findings where this side ran

    def add(self, stats, points: int) -> None:
        if stats.error:
            self.raised += 1
            return
        self.ran += 1
        self.points += points
        self.forward += stats.forward_failures
        self.gradient += stats.gradient_failures
        self.inaccurate += stats.accuracy_failures


@dataclass
class _Row:
    original: _Side
    fix: _Side
    findings: int = 0  # findings whose original ran in this context
    failing: int = 0  # findings whose original fails here
    shared: int = 0  # points where both fail

    def add(self, c: ContextOutcome) -> None:
        self.findings += 0 if c.original.error else 1
        self.original.add(c.original, c.points)
        if c.fix is not None:
            self.fix.add(c.fix, c.points)
        if not c.original.error and c.original.fails:
            self.failing += 1
        self.shared += c.shared


def _key(context: Dict) -> Key:
    return (str(context.get("dtype")), str(context.get("device")), context.get("autocast"))


def _n(v: int) -> str:
    return f"{v:,}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _cell(side: _Side, part: str) -> str:
    if side.ran == 0 and side.raised == 0:
        return "—"
    if side.ran == 0:
        return f"raised in {_plural(side.raised, 'finding')}"
    count = side.forward if part == "forward" else side.gradient
    bits = []
    if count:
        bits.append(f"fails at {_n(count)} of {_n(side.points)} points")
    if part == "forward" and side.inaccurate:
        bits.append(f"inaccurate at {_n(side.inaccurate)}" if count else
                    f"inaccurate at {_n(side.inaccurate)} of {_n(side.points)} points")
    text = ", ".join(bits) if bits else "✓ holds"
    if side.raised:
        text += f"; raised in {_plural(side.raised, 'finding')}"
    return text


def _setting_cells(key: Key) -> List[str]:
    dtype, device, autocast = key
    return [dtype, autocast or "off", device]


def _expression_table(checked: List[Checked]) -> List[str]:
    rows: Dict[Key, _Row] = {}
    for c in checked:
        for outcome in c.verification.contexts:
            row = rows.setdefault(_key(outcome.context), _Row(_Side(), _Side()))
            row.add(outcome)
    if not rows:
        return []
    lines = [
        "| inputs | autocast | device | findings failing | original: output | original: gradient "
        "| fix: output | fix: gradient | both fail |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, row in rows.items():
        cells = _setting_cells(key) + [
            f"{row.failing} of {row.findings}",
            _cell(row.original, "forward"), _cell(row.original, "gradient"),
            _cell(row.fix, "forward"), _cell(row.fix, "gradient"),
            _n(row.shared) if row.shared else "—",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Points are the adversarial inputs each finding's original and fix run on (those that "
        "overflow the input dtype dropped), summed over the findings. A point fails where the "
        "output or a gradient is NaN/Inf although float64 gives a finite, representable value (the "
        "original's, or the fix's where the original is undefined as written); "
        "\"inaccurate\": finite, with three quarters of the significand or more wrong, where the fix "
        "is accurate. \"both fail\": points where the original and the fix fail together; there, "
        f"and at inputs beyond ±{fmt_number(EXTREME)}, a failing fix is reported but not held "
        "against it.",
    ]
    return lines


def _original_fails(v: Verification) -> bool:
    return v.verdict in (CONFIRMED, POSSIBLE) or (v.verdict == FIX_FAILED and v.witness is not None)


def _harness_table(checked: List[Checked]) -> List[str]:
    rows: Dict[Tuple[Key, str], List[Verification]] = {}
    for c in checked:
        h = c.verification.harness
        if h is None:
            continue
        setting = h.get("setting") or {}
        rows.setdefault((_key(setting), str(h.get("name"))), []).append(c.verification)
    if not rows:
        return []
    lines = ["| inputs | autocast | device | scenario | original | fix |", "|---|---|---|---|---|---|"]
    for (key, name), vs in rows.items():
        n = len(vs)
        failing = sum(_original_fails(v) for v in vs)
        fix_failing = sum(v.verdict == FIX_FAILED for v in vs)
        original = f"fails in {failing} of {_plural(n, 'finding')}" if failing else f"✓ holds in {_plural(n, 'finding')}"
        fix = f"fails in {fix_failing} of {_plural(n, 'finding')}" if fix_failing else "✓ holds"
        lines.append("| " + " | ".join(_setting_cells(key) + [f"`{name}`", original, fix]) + " |")
    lines += [
        "",
        "These findings run a built-in scenario (a small seeded model, optimizer or batch of "
        "logits driven into the failure) once as written and once as fixed; inputs is the dtype "
        "of the parameters or logits.",
    ]
    return lines


def _subject(d: Diagnostic) -> str:
    p = d.probe
    if p is None:
        return ""
    if p.kind == "expression" and p.original:
        return f"`{' '.join(p.original.split())}`"
    return f"`{p.harness}`"


_DECIMAL = re.compile(r"(?<![\w.])-?(?:\d+\.\d+(?:e[+-]?\d+)?|\d+e[+-]?\d+)(?![\w])")


def _round_figures(text: str) -> str:
    """A scenario's sentence with its decimal figures at 4 significant digits (whole numbers
    from 1000 up): a matmul's last digit depends on the CPU's kernels (7507.3 with AVX2,
    7507.31 without), and the sentence should not. Its settings (lr=0.1, eps=1e-08) are
    short and stay as they are."""

    def one(m: "re.Match[str]") -> str:
        v = float(m.group(0))
        if not math.isfinite(v):
            return m.group(0)
        if 1000 <= abs(v) < 1e15:
            return str(int(round(v)))
        return fmt_number(float(f"{v:.4g}"))

    return _DECIMAL.sub(one, text)


def _pick(cands: List[Tuple[Tuple, str]]) -> List[str]:
    """Up to MAX_WITNESSES sentences: first those with a setting not yet shown, then others."""
    chosen: List[str] = []
    seen = set()
    for key, text in cands:
        if len(chosen) < MAX_WITNESSES and key not in seen and text not in chosen:
            chosen.append(text)
            seen.add(key)
    for _, text in cands:
        if len(chosen) < MAX_WITNESSES and text not in chosen:
            chosen.append(text)
    return chosen


def _sentence(w: Witness) -> str:
    """The verifier's sentence; a scenario's with its figures rounded (an expression's
    witness keeps its inputs exact: they are what reruns it)."""
    return _round_figures(w.sentence()) if w.text is not None else w.sentence()


def _witnesses(checked: List[Checked]) -> List[str]:
    original: List[Tuple[Tuple, str]] = []
    fix: List[Tuple[Tuple, str]] = []
    for c in checked:
        v = c.verification
        w = v.witness
        if w is not None and _original_fails(v):
            key = (w.dtype, w.autocast, w.where, w.kind) if w.text is None else (w.text,)
            original.append((key, f"{_subject(c.diagnostic)}: {_sentence(w)}"))
        fw = v.fix_witness
        if v.verdict == FIX_FAILED and fw is not None:
            key = (fw.dtype, fw.autocast, fw.where, fw.kind) if fw.text is None else (fw.text,)
            fixed = c.diagnostic.probe.fixed if c.diagnostic.probe is not None else None
            what = f" → `{' '.join(fixed.split())}`" if fixed else ""
            fix.append((key, f"{_subject(c.diagnostic)}{what}: the fix gives {_sentence(fw)}"))
    lines: List[str] = []
    picked = _pick(original)
    if picked:
        lines += ["", "Witnesses (rerun them by hand):", ""] + [f"- {t}" for t in picked]
    picked = _pick(fix)
    if picked:
        lines += ["", "Where the fix failed:", ""] + [f"- {t}" for t in picked]
    return lines


def torch_version() -> str:
    """The release, without a local build tag (`2.13.0+cpu` and the CUDA wheel's `2.13.0` run
    the same CPU kernels)."""
    return torch.__version__.split("+")[0]


def cpu_kernels() -> str:
    """The vector kernels torch's CPU operators run with here ("AVX2", "AVX512", "DEFAULT")."""
    return torch.backends.cpu.get_cpu_capability()


def cpu_model() -> str:
    """The processor the counts were taken on (Linux: /proc/cpuinfo), or the platform's word."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "an unknown processor"


def render_section(code: str, checked: List[Checked], fixtures: Sequence[Path],
                   device: str = DEVICE) -> str:
    """The Markdown body of "Where it fails (verified)" for rule `code` (no heading)."""
    names = ", ".join(f"`fixtures/{p.name}`" for p in fixtures) or "no fixture file"
    counts = {v: 0 for v in (CONFIRMED, POSSIBLE, NOT_REPRODUCED, FIX_FAILED, NOT_VERIFIABLE)}
    for c in checked:
        counts[c.verification.verdict] = counts.get(c.verification.verdict, 0) + 1
    kinds = {c.diagnostic.probe.kind for c in checked if c.diagnostic.probe is not None}
    how = []
    if "expression" in kinds:
        how.append("expressions in float32, float16 and bfloat16, with and without autocast, "
                   "forward and backward, against float64")
    if "harness" in kinds:
        how.append("statements through their built-in scenario, as written and as fixed")
    lines = [
        f"Generated by `python -m nanlint.verify.calibrate {code}` with torch {torch_version()} "
        f"on {device} ({cpu_kernels()} kernels): the verifier ran the {_plural(len(checked), 'finding')} of {code} in "
        f"{names}" + (f" ({'; '.join(how)})" if how else "") + ".",
        "",
        f"Verdicts: {counts[CONFIRMED]} confirmed, "
        + (f"{counts[POSSIBLE]} possible (the fixture's inputs are bare parameters the analysis "
           "does not bound, so the failure was found with any value of them), " if counts[POSSIBLE] else "")
        + f"{counts[NOT_REPRODUCED]} not reproduced, "
        f"{counts[FIX_FAILED]} fix failed, {counts[NOT_VERIFIABLE]} not verifiable.",
    ]
    for table in (_expression_table(checked), _harness_table(checked)):
        if table:
            lines += [""] + table
    if kinds:
        # Point counts depend on the processor's float kernels; the verdicts do not.
        lines += ["", f"Counts taken on {cpu_model()}."]
    lines += _witnesses(checked)
    return "\n".join(lines) + "\n"


def calibrate(code: str, fixtures: Optional[Path] = None, device: str = DEVICE) -> str:
    """Lint and verify rule `code`'s fixtures; the section's text."""
    code = code.upper()
    return render_section(code, verify_rule(code, fixtures, device), fixture_files(fixtures, code), device)


def codes_with_fixtures(fixtures: Optional[Path] = None) -> List[str]:
    return sorted({fixture_code(p) for p in fixture_files(fixtures)})


def machine_independent(section: str) -> str:
    """What a section says that does not depend on the machine's float kernels: the verdicts,
    which findings fail in which context, and each witness's expression and kind of failure.
    Point counts and the witnesses' numbers are masked: two x86 CPUs with the same kernels
    gave different counts (17,052 against 17,296 failing bfloat16 points for NAN116)."""
    out = []
    number = re.compile(r"(?<![A-Za-z\d.])\d[\d,.]*")
    for line in section.splitlines():
        if line.startswith("Counts taken on "):
            continue
        if line.startswith("|"):
            # Table cells: every count is masked but "findings failing" ("12 of 12").
            cells = line.split("|")
            line = "|".join(c if re.fullmatch(r"\s*\d+ of \d+\s*", c) else number.sub("#", c) for c in cells)
        if line.startswith("- `"):
            expression, _, rest = line.partition("`: ")
            line = expression + "`: " + re.sub(r"-?\d[\d.e+-]*", "#", rest)
        out.append(line)
    return "\n".join(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nanlint.verify.calibrate",
        description="Verify each rule's fixture findings on the CPU and write the rule page's "
                    "'Where it fails (verified)' section.")
    parser.add_argument("codes", nargs="*", metavar="CODE",
                        help="rule codes (default: every rule with fixtures)")
    parser.add_argument("--fixtures", type=Path, default=FIXTURES, help="fixture directory (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=VERIFIED_DIR, help="output directory (default: %(default)s)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when a file differs from what calibration gives")
    args = parser.parse_args(argv)
    available = codes_with_fixtures(args.fixtures)
    codes = [c.upper() for c in args.codes] or available
    unknown = [c for c in codes if c not in available]
    if unknown:
        print(f"calibrate: no fixtures for {', '.join(unknown)} in {args.fixtures}", file=sys.stderr)
        return 2
    stale = []
    total = time.perf_counter()
    for code in codes:
        start = time.perf_counter()
        text = calibrate(code, args.fixtures)
        target = args.out / f"{code}.md"
        if args.check:
            have = target.read_text(encoding="utf-8") if target.exists() else None
            same = have is not None and machine_independent(have) == machine_independent(text)
            if not same:
                stale.append(code)
            status = "ok" if same else "stale"
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            status = f"wrote {target}"
        print(f"{code}: {status} ({time.perf_counter() - start:.1f} s)", file=sys.stderr)
    print(f"calibrate: {_plural(len(codes), 'rule')} in {time.perf_counter() - total:.1f} s", file=sys.stderr)
    if stale:
        print(f"calibrate: stale: {', '.join(stale)} (run `python -m nanlint.verify.calibrate "
              f"{' '.join(stale)}` and `python -m nanlint.rules.pages rules`)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
