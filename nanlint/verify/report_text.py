"""Text and JSON output of `nanlint verify`."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Dict, List

from ..output.json_format import to_dict
from .findings import printable_line
from .verdict import CONFIRMED, FIX_FAILED, NOT_REPRODUCED, NOT_VERIFIABLE, POSSIBLE, VERDICTS
from .verifier import Outcome


def counts(outcome: Outcome) -> Dict[str, int]:
    c = Counter(r.verification.verdict for r in outcome.results)
    return {v: c.get(v, 0) for v in VERDICTS}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def summary(outcome: Outcome) -> str:
    c = counts(outcome)
    n = len(outcome.results)
    parts = [f"{c[CONFIRMED]} confirmed"]
    if c[POSSIBLE]:
        parts.append(f"{c[POSSIBLE]} possible (found only with inputs the analysis could not bound)")
    parts += [f"{c[NOT_REPRODUCED]} not reproduced", f"{c[FIX_FAILED]} fix failed"]
    if c[NOT_VERIFIABLE]:
        parts.append(f"{c[NOT_VERIFIABLE]} not verifiable")
    text = (f"Verified {_plural(n, 'finding')} on {outcome.device} (torch {outcome.torch_version}) "
            f"in {outcome.seconds:.1f} s: {', '.join(parts)}.")
    if outcome.unprobed:
        text += f"\n{_plural(len(outcome.unprobed), 'finding')} without a probe not verified."
    return text


def render_text(outcome: Outcome) -> str:
    lines: List[str] = []
    for r in outcome.results:
        d = r.diagnostic
        # Names and codes may come from a findings file: never let them drive the terminal.
        lines.append(printable_line(f"{d.where()}: {d.code} {r.verification.line()}"))
    for d in outcome.unprobed:
        lines.append(printable_line(f"{d.where()}: {d.code} not verified: its rule gives no probe "
                                    "(the hazard is not one expression that can be run alone)"))
    lines.append(summary(outcome))
    return "\n".join(lines) + "\n"


def to_json(outcome: Outcome) -> Dict[str, Any]:
    findings = []
    for r in outcome.results:
        item = to_dict(r.diagnostic)
        item["verification"] = r.verification.to_json()
        findings.append(item)
    return {
        "device": outcome.device,
        "torch": outcome.torch_version,
        "seconds": round(outcome.seconds, 3),
        "summary": {k.replace("-", "_"): v for k, v in counts(outcome).items()},
        "findings": findings,
        "unprobed": [to_dict(d) for d in outcome.unprobed],
        "errors": outcome.errors,
    }


def render_json(outcome: Outcome) -> str:
    return json.dumps(to_json(outcome), indent=2) + "\n"
