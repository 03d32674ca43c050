"""A JSON list with ruff's keys, plus `name` and `probe` (what `nanlint verify` consumes)."""

from __future__ import annotations

import json
from typing import Any, Dict, List

from ..core.diagnostics import Diagnostic
from ..rules.pages import rule_kind, rule_url


def to_dict(d: Diagnostic) -> Dict[str, Any]:
    return {
        "code": d.code,
        "name": d.name,
        # What the finding claims (form, value, misuse, file): how it is judged and verified.
        "kind": rule_kind(d.code),
        "message": d.message,
        "filename": d.path,
        # The cell (1-based, every cell counted) in a notebook, else null; rows are the cell's.
        "cell": d.cell,
        "location": d.start.to_json(),
        "end_location": d.end.to_json(),
        "fix": d.fix.to_json() if d.fix else None,
        # Where a `# noqa: CODE` comment suppresses it (the first line of the range).
        "noqa_row": d.start.row,
        "url": rule_url(d.code),
        "probe": d.probe.to_json() if d.probe else None,
        # A value finding's evidence that the value reaches the hazard, as located steps
        # (producer first); `latent` where there is none (reported only with --latent).
        "evidence": [s.to_json() for s in d.evidence],
        "latent": d.latent,
    }


def render(diagnostics: List[Diagnostic], **_) -> str:
    return json.dumps([to_dict(d) for d in diagnostics], indent=2) + "\n"
