"""rules/ holds exactly the pages the rule classes render (regenerate: python -m nanlint.pages)."""

from pathlib import Path

from nanlint.pages import expected_files
from nanlint.rules import all_rules

RULES_DIR = Path(__file__).resolve().parent.parent / "rules"


def test_rule_pages_are_in_sync():
    want = expected_files()
    have = {p.name: p.read_text(encoding="utf-8") for p in RULES_DIR.glob("*.md")}
    assert sorted(have) == sorted(want), "run `python -m nanlint.pages` to regenerate rules/"
    for name, text in want.items():
        assert have[name] == text, f"rules/{name} is stale: run `python -m nanlint.pages`"


def test_every_rule_is_documented():
    for rule in all_rules():
        assert rule.code[:3] == "NAN" and rule.code[3:].isdigit() and len(rule.code) == 6
        assert rule.name == rule.name.lower() and " " not in rule.name and "_" not in rule.name
        assert rule.message and not rule.message.endswith(".")
        assert rule.why.strip(), f"{rule.code} has no 'why' section"
        if rule.code not in ("NAN001", "NAN002"):
            assert rule.example.strip() and rule.use_instead.strip(), rule.code
        if rule.fix_applicability is not None:
            assert rule.fix_title, rule.code
