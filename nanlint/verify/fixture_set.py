"""The fixture files of a rule and the rules they are linted with (shared by the tests and by
`python -m nanlint.verify.calibrate`). Does not import torch."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Type

from ..rules import Rule, all_rules

# fixtures/ sits beside the package in a source checkout (it is not installed).
FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures"


def fixture_code(path: Path) -> str:
    """The rule a fixture is about: `NAN101_sigmoid_by_hand.py` -> NAN101."""
    return path.name.split("_")[0]


def fixture_files(directory: Optional[Path] = None, code: Optional[str] = None) -> List[Path]:
    """The fixture files (`NAN*.py`) in `directory` (default: the checkout's fixtures/), sorted;
    only those of rule `code` when given."""
    files = sorted((directory if directory is not None else FIXTURES).glob("NAN*.py"))
    return [p for p in files if code is None or fixture_code(p) == code]


def rules_for_fixture(path: Path) -> List[Type[Rule]]:
    """Every rule on by default, plus the fixture's own rule (which may be off by default)."""
    own = fixture_code(path)
    return [r for r in all_rules() if r.default_enabled or r.code == own]
