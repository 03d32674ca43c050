"""Every fixture positive that carries a probe is verified on the CPU: the original fails in at
least one context and the fix holds (for harness probes: the scenario shows the failure in
the original order or form and not after the fix). Rules added later are covered as soon as
their fixtures exist."""

from __future__ import annotations

import pytest

from nanlint.lint.engine import lint_source
from nanlint.rules import get_rule
from nanlint.verify.expression import prepare_probe
from nanlint.verify.verifier import verify_one

from fixture_support import expected_verdicts, fixture_files, rules_for_fixture


def _probed():
    out = []
    for path in fixture_files():
        source = path.read_text(encoding="utf-8")
        verdicts = expected_verdicts(source)
        result = lint_source(path.name, source, rules_for_fixture(path))
        on_row = {}
        for d in result.diagnostics:  # sorted by row, then column
            index = on_row.setdefault(d.start.row, 0)
            on_row[d.start.row] += 1
            if d.probe is None:
                continue
            listed = verdicts.get(d.start.row, ["confirmed"])
            want = listed[index] if len(listed) > 1 else listed[0]
            out.append(
                pytest.param(d, want, id=f"{path.name}:{d.start.row}:{d.start.column}:{d.code}")
            )
    return out


PROBED = _probed()


def test_there_are_probes():
    assert len(PROBED) >= 10


@pytest.mark.parametrize("diagnostic, verdict", PROBED)
def test_fixture_probe_gets_its_verdict(diagnostic, verdict):
    """Confirmed unless the fixture line says otherwise with `# verify: ...` (and says why)."""
    v = verify_one(diagnostic, "cpu")
    what = diagnostic.probe.original or diagnostic.probe.harness
    if verdict == "confirmed" and diagnostic.probe.kind == "expression":
        # A fixture's inputs are often bare parameters the analysis proves nothing about. For
        # a form rule the failure at any input of the dtype confirms the claim, and the reason
        # says that reach was not shown; for the others the same failure is "possible".
        unbounded = [s.name for s in prepare_probe(diagnostic.probe).specs if s.value is None and not s.proven]
        if get_rule(diagnostic.code).kind == "form":
            if v.verdict == "confirmed":
                assert ("reach not shown" in v.reason) == bool(unbounded) or "it held: reach not shown" in v.reason, v.reason
                assert "reach" in v.reason, v.reason
        elif unbounded:
            verdict = "possible"
            assert all(name in v.reason for name in unbounded) or v.verdict != "possible", v.reason
        if diagnostic.latent:
            # A latent value finding names no evidence that the code gets there: the failure
            # it shows is possible at best, and the reason says what is missing.
            verdict = "possible"
            assert v.verdict != "possible" or v.reason.startswith("latent:"), v.reason
    assert v.verdict == verdict, f"{diagnostic.code} {what}: {v.line()}"
    if verdict in ("confirmed", "possible"):
        assert v.witness is not None and v.witness.sentence()
