"""The fixture files of a rule and the rules they are linted with (shared by the tests and by
`python -m nanlint.verify.calibrate`). Does not import torch."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional, Type

from ..rules import Rule, all_rules
from ..rules.base import LatentFindings

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


# `# expect: NAN201, NAN103` on a fixture line (the tests read the same markers); a value
# rule's latent finding (no evidence named, reported only with `--latent`) is `NAN113:latent`.
EXPECT_MARKER = re.compile(r"#\s*expect:\s*(?P<codes>NAN\d{3}(?::latent)?(?:\s*,\s*NAN\d{3}(?::latent)?)*)")
LATENT_SUFFIX = ":latent"


def rules_for_fixture(path: Path) -> List[Type[Rule]]:
    """Every rule on by default, the fixture's own rule and every rule its `# expect:` markers
    name (any of them may be off by default: a marker says what that rule reports there,
    and the rule then runs on the whole file, so its silence elsewhere is checked too)."""
    named = {fixture_code(path)}
    for m in EXPECT_MARKER.finditer(path.read_text(encoding="utf-8")):
        named.update(code.split(":")[0] for code in re.split(r"\s*,\s*", m.group("codes")))
    # Latent findings too: a marker says which findings are latent, so both kinds are checked.
    return [r for r in all_rules() if r.default_enabled or r.code in named] + [LatentFindings]
