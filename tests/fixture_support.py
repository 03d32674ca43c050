"""Reading fixtures: `# expect: CODE[, CODE]` marks the line a finding starts on."""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Counter as CounterT, Dict, List, Tuple

from nanlint.verify.fixture_set import fixture_files as _fixture_files
from nanlint.verify.fixture_set import EXPECT_MARKER as _EXPECT
from nanlint.verify.fixture_set import rules_for_fixture  # noqa: F401 - used by the tests

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
_VERDICTS = ("confirmed", "not-reproduced", "fix-failed", "not-verifiable")
_VERIFY = re.compile(r"#\s*verify:\s*(?P<verdicts>[a-z-]+(?:\s*,\s*[a-z-]+)*)")


def checkout_env() -> Dict[str, str]:
    """The environment for a `python -m nanlint` subprocess: this checkout first on PYTHONPATH,
    after it whatever PYTHONPATH already held (where the dependencies may live)."""
    paths = [str(FIXTURES.parent), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))


def fixture_files() -> List[Path]:
    return _fixture_files(FIXTURES)


def expected(source: str) -> CounterT[Tuple[int, str]]:
    found: CounterT[Tuple[int, str]] = Counter()
    for row, line in enumerate(source.splitlines(), start=1):
        m = _EXPECT.search(line)
        if m:
            for code in re.split(r"\s*,\s*", m.group("codes")):
                found[(row, code)] += 1
    return found


def expected_verdicts(source: str) -> Dict[int, List[str]]:
    """`# verify: not-reproduced` on a line: the verifier's expected verdict for the findings
    that start there (default: confirmed). Several, comma-separated, go to the findings in
    column order (`torch.log(1 + torch.log(1 + x))`: outer first)."""
    found: Dict[int, List[str]] = {}
    for row, line in enumerate(source.splitlines(), start=1):
        m = _VERIFY.search(line)
        if m:
            verdicts = re.split(r"\s*,\s*", m.group("verdicts"))
            assert all(v in _VERDICTS for v in verdicts), f"line {row}: unknown verdict in {verdicts}"
            found[row] = verdicts
    return found
