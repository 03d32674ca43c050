"""Every fixture: findings exactly as marked, fixes parse, equal the expected text, and are a
fixed point."""

from __future__ import annotations

from collections import Counter

import libcst as cst
import pytest

from nanlint.lint.engine import lint_source
from nanlint.rules import all_rules
from nanlint.lint.fixes import fix_source

from fixture_support import expected, fixture_files, rules_for_fixture
from nanlint.verify.fixture_set import LATENT_SUFFIX

FILES = fixture_files()


def test_there_are_fixtures():
    assert len(FILES) >= 1


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_findings_match_markers(path):
    source = path.read_text(encoding="utf-8")
    result = lint_source(path.name, source, rules_for_fixture(path))
    assert result.errors == []
    got = Counter((d.start.row, d.code + (LATENT_SUFFIX if d.latent else "")) for d in result.diagnostics)
    want = expected(source)
    assert got == want, (
        f"unexpected: {sorted((got - want).elements())}, missing: {sorted((want - got).elements())}"
    )


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_fix_matches_expected_text(path):
    source = path.read_text(encoding="utf-8")
    rules = rules_for_fixture(path)
    outcome = fix_source(path.name, source, rules, unsafe=True)
    assert outcome.dropped == []
    expected_path = path.with_name(path.name + ".fixed")
    if outcome.source == source:
        assert not expected_path.exists(), "the .fixed file expects a change that did not happen"
        return
    cst.parse_module(outcome.source)  # the fixed code parses
    assert expected_path.exists(), f"missing {expected_path.name}; fixed output:\n{outcome.source}"
    assert outcome.source == expected_path.read_text(encoding="utf-8")
    # A fixed point: fixing the fixed text changes nothing.
    again = fix_source(path.name, outcome.source, rules, unsafe=True)
    assert again.source == outcome.source
    assert again.applied == 0
    # What remains had no fix. (It may be less: a fix of an outer expression, such as a
    # whole hand-written BCE, also clears the fixless findings inside it.)
    unfixable = Counter(
        d.code for d in lint_source(path.name, source, rules).diagnostics if d.fix is None
    )
    remaining = Counter(d.code for d in again.remaining.diagnostics)
    assert not remaining - unfixable, f"left after fixing: {remaining - unfixable}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_safe_fix_leaves_no_safe_fix(path):
    source = path.read_text(encoding="utf-8")
    rules = rules_for_fixture(path)
    outcome = fix_source(path.name, source, rules, unsafe=False)
    cst.parse_module(outcome.source)
    assert not [d for d in outcome.remaining.diagnostics if d.is_fixable(False)]


def test_only_value_rules_that_state_their_evidence_have_manifest_findings():
    """A value rule's page says when a finding is manifest (`Rule.manifest`); a rule that
    states nothing names no evidence, so every finding of it in the fixtures is latent. Rules
    of the other kinds are never latent."""
    from nanlint.rules import get_rule

    manifest_codes = set()
    for path in FILES:
        for (_, code), _n in expected(path.read_text(encoding="utf-8")).items():
            base, latent = code.split(":")[0], code.endswith(LATENT_SUFFIX)
            rule = get_rule(base)
            assert not latent or rule.kind == "value", f"{path.name}: {code} is not a value rule"
            if not latent and rule.kind == "value":
                manifest_codes.add(base)
    stated = {r.code for r in all_rules() if r.kind == "value" and r.manifest}
    assert manifest_codes <= stated, f"manifest findings of rules that state no evidence: {manifest_codes - stated}"
    assert {"NAN113", "NAN201"} <= manifest_codes
