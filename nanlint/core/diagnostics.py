"""The data every rule produces and every formatter, fixer and verifier consumes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

SAFE = "safe"
UNSAFE = "unsafe"


@dataclass(frozen=True, order=True)
class Position:
    """1-based line, 1-based column (as ruff reports them)."""

    row: int
    column: int

    def to_json(self) -> Dict[str, int]:
        return {"row": self.row, "column": self.column}


@dataclass(frozen=True)
class Edit:
    """Replace the source between two positions (end exclusive) by `content`.

    `expected`, when known, is the text the span must hold (the replaced node's code):
    applying an edit whose span holds anything else is refused, not guessed at."""

    start: Position
    end: Position
    content: str
    expected: Optional[str] = field(default=None, compare=False)

    def to_json(self) -> Dict[str, Any]:
        return {
            "content": self.content,
            "location": self.start.to_json(),
            "end_location": self.end.to_json(),
        }


@dataclass(frozen=True)
class Fix:
    """A set of edits applied together. `applicability` is SAFE (exact in real arithmetic:
    only rounding changes) or UNSAFE (changes values or order: an epsilon, a moved statement)."""

    message: str
    edits: Tuple[Edit, ...]
    applicability: str = SAFE

    def to_json(self) -> Dict[str, Any]:
        return {
            "applicability": self.applicability,
            "message": self.message,
            "edits": [e.to_json() for e in self.edits],
        }


# What kind of values a probe input holds, as the analysis proved it (the verifier draws
# inputs only from that set): any real; a probability in [0, 1]; a probability simplex
# (non-negative, sums to 1 along `dim`); a 0/1 mask; a non-negative integer count; an integer.
INPUT_KINDS = ("real", "probability", "simplex", "mask", "count", "integer")
# Relations between two inputs a probe may state: ("hi", ">=", "lo").
RELATIONS = (">=", ">", "<=", "<", "==", "!=")


@dataclass(frozen=True)
class ProbeInput:
    """A free input of a probed expression: a name or attribute chain (`x`, `self.k`).

    `value` is a constant found in the source (`self.k = 50` in `__init__`); `domain` a known
    closed interval of the value (a sigmoid output lies in [0, 1]); `kind` one of INPUT_KINDS
    (with `dim` for a simplex); `evidence` where the facts came from ("softmax at line 12"),
    empty when the analysis proved nothing about the input."""

    name: str
    value: Optional[float] = None
    domain: Optional[Tuple[float, float]] = None
    kind: str = "real"
    dim: Optional[int] = None
    evidence: str = ""

    def to_json(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "domain": list(self.domain) if self.domain is not None else None,
            "kind": self.kind,
            "dim": self.dim,
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class Probe:
    """What the verifier needs to run the flagged op.

    kind "expression": `original` and `fixed` are Python expressions over `inputs`, with every
    torch function spelled by its full name (`torch.nn.functional.softplus`), whatever alias
    the file used. kind "harness": `harness` names a built-in scenario (a training-loop order,
    an optimizer setting) and `params` carries what the source said about it."""

    kind: str
    original: Optional[str] = None
    fixed: Optional[str] = None
    inputs: Tuple[ProbeInput, ...] = ()
    harness: Optional[str] = None
    params: Tuple[Tuple[str, Any], ...] = ()
    # Proven relations between inputs, e.g. ("hi", ">=", "lo") where the code takes a max and a min.
    relations: Tuple[Tuple[str, str, str], ...] = ()

    def to_json(self) -> Dict[str, Any]:
        return {
            "kind": self.kind,
            "original": self.original,
            "fixed": self.fixed,
            "inputs": [i.to_json() for i in self.inputs],
            "harness": self.harness,
            "params": dict(self.params),
            "relations": [list(r) for r in self.relations],
        }


@dataclass(frozen=True)
class Step:
    """One located step of the evidence that a value reaches a hazard ("`num_pos` counts
    `labels > 0`" at line 41). `row` is a line of the linted file (0: not located), or of
    `path` when the step is in another file of the project; `cell` is set in a notebook."""

    row: int
    note: str
    path: Optional[str] = None
    cell: Optional[int] = None

    def to_json(self) -> Dict[str, Any]:
        return {"row": self.row, "note": self.note, "path": self.path, "cell": self.cell}

    def __str__(self) -> str:
        where = f"{self.path}:{self.row}" if self.path else (
            f"cell {self.cell}, line {self.row}" if self.cell is not None else f"line {self.row}")
        return f"{self.note} ({where})" if self.row else self.note


@dataclass
class Diagnostic:
    path: str
    start: Position
    end: Position
    code: str
    name: str
    message: str
    fix: Optional[Fix] = None
    probe: Optional[Probe] = None
    # Source line of `start` (for suppression comments and context in reports).
    line_text: str = field(default="", compare=False)
    # In a notebook: the cell (1-based, counting every cell) that `start` and `end` are
    # relative to, and the same range in the notebook file itself (SARIF and GitHub point
    # into the file, not into a cell).
    cell: Optional[int] = field(default=None, compare=False)
    file_start: Optional[Position] = field(default=None, compare=False)
    file_end: Optional[Position] = field(default=None, compare=False)
    # A value finding's evidence that the value reaches the hazard, producer first (empty:
    # none named). Without it a value finding is latent: it needs an assumption about the
    # callers or the data, and is reported only on request (`--latent`).
    evidence: Tuple[Step, ...] = ()
    latent: bool = False

    def sort_key(self) -> Tuple[str, int, int, int, str]:
        return (self.path, self.cell or 0, self.start.row, self.start.column, self.code)

    def where(self) -> str:
        """`path:row:col`, or `path:cell N:row:col` in a notebook (ruff's spelling)."""
        cell = f"cell {self.cell}:" if self.cell is not None else ""
        return f"{self.path}:{cell}{self.start.row}:{self.start.column}"

    def is_fixable(self, unsafe_fixes: bool) -> bool:
        return self.fix is not None and (self.fix.applicability == SAFE or unsafe_fixes)
