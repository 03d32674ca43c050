"""`python -m nanlint.verify.calibrate`: the rule pages' "Where it fails (verified)" sections
are what the verifier measures on the fixtures now (a stale table fails here), and the
section adds up the verifier's per-context results correctly.

Recomputing every rule takes about 15 s, so three cheap rules are recomputed here (two
expression rules and one harness rule); `python -m nanlint.verify.calibrate --check` checks
them all."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nanlint.lint.engine import lint_source
from nanlint.rules import get_rule
from nanlint.verify.calibrate import (
    VERIFIED_DIR,
    Checked,
    calibrate,
    codes_with_fixtures,
    cpu_kernels,
    machine_independent,
    main,
    render_section,
    torch_version,
)
from nanlint.verify.verdict import CONFIRMED, FIX_FAILED, ContextOutcome, SideStats, Verification, Witness

from fixture_support import FIXTURES


def _committed(code: str) -> str:
    text = (VERIFIED_DIR / f"{code}.md").read_text(encoding="utf-8")
    if f" with torch {torch_version()} on " not in text:
        pytest.skip(f"rules were calibrated with another torch than {torch_version()}")
    if f"({cpu_kernels()} kernels)" not in text:
        pytest.skip(f"rules were calibrated with other CPU kernels than {cpu_kernels()}")
    return text


# Every rule (about 25 s in all): a fixture or rule change that alters a verdict must come
# with its recalibrated section; three spot checks let ten sections go stale unnoticed.
@pytest.mark.parametrize("code", sorted(p.stem for p in VERIFIED_DIR.glob("NAN*.md")))
def test_committed_section_is_what_calibration_gives(code):
    assert machine_independent(calibrate(code, FIXTURES)) == machine_independent(_committed(code)), (
        f"nanlint/rules/verified/{code}.md is stale: run `python -m nanlint.verify.calibrate {code}` "
        "and `python -m nanlint.rules.pages rules`")


def test_every_rule_with_fixtures_has_a_section():
    have = sorted(p.stem for p in VERIFIED_DIR.glob("*.md"))
    assert have == codes_with_fixtures(FIXTURES)
    for code in have:
        get_rule(code)  # a real rule


def test_command_writes_and_checks(tmp_path, capsys):
    committed = _committed("NAN106")
    assert main(["--fixtures", str(FIXTURES), "--out", str(tmp_path), "NAN106"]) == 0
    written = tmp_path / "NAN106.md"
    assert machine_independent(written.read_text(encoding="utf-8")) == machine_independent(committed)
    assert main(["--fixtures", str(FIXTURES), "--out", str(tmp_path), "--check", "nan106"]) == 0
    written.write_text(committed.replace("confirmed", "confirmd", 1), encoding="utf-8")
    assert main(["--fixtures", str(FIXTURES), "--out", str(tmp_path), "--check", "NAN106"]) == 1
    assert "stale: NAN106" in capsys.readouterr().err
    assert main(["--fixtures", str(FIXTURES), "--out", str(tmp_path), "NAN999"]) == 2


def _diagnostic(tmp_path: Path):
    path = tmp_path / "NAN102_sample.py"
    source = "import torch\n\n\ndef f(x):\n    return torch.log(torch.softmax(x, -1))\n"
    path.write_text(source, encoding="utf-8")
    (d,) = [d for d in lint_source(path.name, source, [get_rule("NAN102")]).diagnostics]
    return path, d


def _context(dtype, autocast, points, original, fix, shared=0):
    ctx = {"device": "cpu", "dtype": dtype, "autocast": autocast}
    return ContextOutcome(ctx, dtype, points, original, fix, shared=shared)


def test_section_adds_up_contexts_verdicts_and_witnesses(tmp_path):
    path, d = _diagnostic(tmp_path)
    w = Witness("original", "rounding", "gradient", {"x": -90.0}, "float32", "cpu", wrt="x",
                result=math.nan, reference=0.5)
    fw = Witness("fix", "rounding", "forward", {"x": 3.0}, "float16", "cpu", result=math.inf, reference=2.0)
    first = Verification(CONFIRMED, "r", witness=w, contexts=[
        _context("float32", None, 100, SideStats(forward_failures=3, gradient_failures=5), SideStats()),
        _context("float16", "float16", 80, SideStats(error="boom"), SideStats(error="boom")),
    ])
    second = Verification(FIX_FAILED, "r", fix_witness=fw, contexts=[
        _context("float32", None, 50, SideStats(accuracy_failures=2), SideStats(forward_failures=1), shared=1),
        _context("float16", "float16", 40, SideStats(), SideStats(gradient_failures=4)),
    ])
    text = render_section("NAN102", [Checked(path, d, first), Checked(path, d, second)], [path])
    assert "the 2 findings of NAN102 in `fixtures/NAN102_sample.py`" in text
    assert "Verdicts: 1 confirmed, 0 not reproduced, 1 fix failed, 0 not verifiable." in text
    rows = [line for line in text.splitlines() if line.startswith("| float")]
    assert rows == [
        "| float32 | off | cpu | 2 of 2 | fails at 3 of 150 points, inaccurate at 2 | fails at 5 of 150 points "
        "| fails at 1 of 150 points | ✓ holds | 1 |",
        "| float16 | float16 | cpu | 0 of 1 | ✓ holds; raised in 1 finding | ✓ holds; raised in 1 finding "
        "| ✓ holds; raised in 1 finding | fails at 4 of 40 points; raised in 1 finding | — |",
    ]
    assert "- `torch.log(torch.softmax(x, -1))`: NaN gradient w.r.t. x at x=-90 in float32 on cpu (float64: 0.5)" in text
    assert ("- `torch.log(torch.softmax(x, -1))` → `torch.log_softmax(x, -1)`: the fix gives inf output at x=3 "
            "in float16 on cpu (float64: 2)") in text


def test_harness_findings_are_grouped_by_setting(tmp_path):
    path, d = _diagnostic(tmp_path)

    def harness(verdict, dtype, autocast, witness=None):
        setting = {"device": "cpu", "dtype": dtype, "autocast": autocast}
        return Verification(verdict, "r", witness=witness,
                            harness={"name": "cross-entropy-half", "rows": [], "setting": setting})

    w = Witness("original", "harness", "training step", {}, "float16", "cpu", text="loss inf at magnitude 10000")
    checked = [Checked(path, d, v) for v in (
        harness(CONFIRMED, "float16", None, w), harness(CONFIRMED, "float16", None, w),
        harness("not-reproduced", "float16", "float16"))]
    text = render_section("NAN102", checked, [path])
    assert "| float16 | off | cpu | `cross-entropy-half` | fails in 2 of 2 findings | ✓ holds |" in text
    assert "| float16 | float16 | cpu | `cross-entropy-half` | ✓ holds in 1 finding | ✓ holds |" in text
    assert text.count("loss inf at magnitude 10000") == 1  # the same witness once


def test_scenario_figures_are_rounded_but_settings_kept():
    from nanlint.verify.calibrate import _round_figures

    # The same update norm through AVX2 and through the default kernels.
    a = _round_figures("update norm 7507.3 (65536× the intended 0.114552) with lr=0.1, eps=1e-08.")
    b = _round_figures("update norm 7507.31 (65536× the intended 0.114552) with lr=0.1, eps=1e-08.")
    assert a == b == "update norm 7507 (65536× the intended 0.1146) with lr=0.1, eps=1e-08."
    assert _round_figures("moved by 1.53481e-06, loss -inf, float64: 1916.38") == \
        "moved by 1.535e-06, loss -inf, float64: 1916"
