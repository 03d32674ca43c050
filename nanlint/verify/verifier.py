"""Verify a list of findings: each probe goes to the expression verifier or a harness."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, TextIO

import torch

from ..core.diagnostics import SAFE, Diagnostic
from .expression import verify_expression
from .findings import MALFORMED, printable_line
from .harnesses import run_harness
from .verdict import CONFIRMED, POSSIBLE, Verification, not_verifiable


@dataclass
class Verified:
    diagnostic: Diagnostic
    verification: Verification


@dataclass
class Outcome:
    device: str
    results: List[Verified] = field(default_factory=list)
    unprobed: List[Diagnostic] = field(default_factory=list)  # findings with no probe
    errors: List[str] = field(default_factory=list)  # internal errors (exit code 2)
    # Files under these paths may be quoted in the report (the paths the user linted).
    source_roots: List[str] = field(default_factory=list)
    seconds: float = 0.0
    torch_version: str = torch.__version__


def rule_kind(d: Diagnostic) -> Optional[str]:
    """The kind of the finding's rule (form, value, misuse), None for an unknown code."""
    from ..rules import get_rule

    try:
        return get_rule(d.code).kind
    except KeyError:
        return None


def fix_is_exact(d: Diagnostic) -> bool:
    """Whether the finding's fix is exact in real arithmetic: the rule's fix is safe (a
    fix that changes values, such as a clamp, is judged only where the original was
    accurate). A rule that offers no fix and still gives its probe one (NAN127's clamp)
    gives a counterfactual, not the same function: not exact. Unknown rules: the
    applicability in the finding, else exact."""
    try:
        from ..rules import get_rule

        rule = get_rule(d.code)
        if rule.fix_applicability is not None:
            return rule.fix_applicability == SAFE
        if d.fix is None and d.probe is not None and d.probe.fixed is not None:
            return False
    except KeyError:
        pass
    if d.fix is not None:
        return d.fix.applicability == SAFE
    return True


def verify_one(d: Diagnostic, device: str, want_sweep: bool = False) -> Verification:
    v = _verify_probe(d, device, want_sweep)
    if d.latent and v.verdict in (CONFIRMED, POSSIBLE):
        # A latent value finding: the op fails at the point, but nothing shows the code's own
        # values get there; that is the fact the verdict lacks.
        v.verdict = POSSIBLE
        v.reason = ("latent: the analysis names no evidence that the code's values reach this point; "
                    + v.reason)
    elif d.evidence and v.verdict == CONFIRMED:
        v.reason += "; evidence that the code gets there: " + "; ".join(str(s) for s in d.evidence)
    return v


def _verify_probe(d: Diagnostic, device: str, want_sweep: bool) -> Verification:
    probe = d.probe
    if probe is None:
        return not_verifiable("the finding has no probe", device)
    if probe.kind == MALFORMED:
        return not_verifiable(f"refused: malformed probe: {dict(probe.params).get('reason', '')}", device)
    if probe.kind == "expression":
        return verify_expression(probe, device, want_sweep=want_sweep, exact=fix_is_exact(d),
                                 form=rule_kind(d) == "form")
    if probe.kind == "harness":
        return run_harness(probe.harness, dict(probe.params), device)
    return not_verifiable(f"unknown probe kind {probe.kind!r}", device)


class Progress:
    """A line on stderr every couple of seconds once a run takes that long."""

    def __init__(self, total: int, stream: Optional[TextIO] = None, every: float = 2.0):
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        self.start = time.perf_counter()
        self.last = self.start
        self.shown = False

    def step(self, done: int, d: Diagnostic) -> None:
        now = time.perf_counter()
        if now - self.last >= self.every and done < self.total:
            self.last = now
            self.shown = True
            print(f"nanlint verify: {done}/{self.total} findings verified ({now - self.start:.1f} s); "
                  f"next {printable_line(d.path)}:{d.start.row} {printable_line(d.code)}",
                  file=self.stream, flush=True)


def verify_all(
    diagnostics: Sequence[Diagnostic],
    device: str,
    want_sweep: bool = False,
    progress: Optional[Callable[[int, Diagnostic], None]] = None,
) -> Outcome:
    start = time.perf_counter()
    out = Outcome(device=device)
    probed = [d for d in diagnostics if d.probe is not None]
    out.unprobed = [d for d in diagnostics if d.probe is None]
    for i, d in enumerate(probed):
        if progress is not None:
            progress(i, d)
        try:
            v = verify_one(d, device, want_sweep)
        except Exception as exc:  # noqa: BLE001 - one finding must not stop the run
            msg = printable_line(f"verifying {d.code} at {d.where()} crashed: {type(exc).__name__}: {exc}")
            out.errors.append(msg)
            v = not_verifiable(f"internal error: {type(exc).__name__}: {exc}", device)
        out.results.append(Verified(d, v))
    out.seconds = time.perf_counter() - start
    return out
