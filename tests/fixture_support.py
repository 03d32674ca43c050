"""Reading fixtures: `# expect: CODE[, CODE]` marks the line a finding starts on."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Counter as CounterT, List, Tuple, Type

from nanlint.rules import Rule, all_rules

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>NAN\d{3}(?:\s*,\s*NAN\d{3})*)")


def fixture_files() -> List[Path]:
    return sorted(FIXTURES.glob("NAN*.py"))


def expected(source: str) -> CounterT[Tuple[int, str]]:
    found: CounterT[Tuple[int, str]] = Counter()
    for row, line in enumerate(source.splitlines(), start=1):
        m = _EXPECT.search(line)
        if m:
            for code in re.split(r"\s*,\s*", m.group("codes")):
                found[(row, code)] += 1
    return found


def rules_for_fixture(path: Path) -> List[Type[Rule]]:
    """Every rule on by default, plus the fixture's own rule (which may be off by default)."""
    own = path.name.split("_")[0]
    return [r for r in all_rules() if r.default_enabled or r.code == own]
