"""An honest report (issue 9, item 3): the summary never says the fix holds where a context
shows it failing; bits are measured in the context's dtype and never exceed its significand;
a fix that is finite but less accurate than the original is said so in words and in the
plot; captions name the axes drawn, flat plots are not drawn, long code lines wrap."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from nanlint.core.diagnostics import Probe, ProbeInput
from nanlint.lint.engine import lint_source
from nanlint.rules import all_rules
from nanlint.rules.base import LatentFindings
from nanlint.verify import contexts as C
from nanlint.verify.expression import verify_expression
from nanlint.verify.report_html import _plot, render_html
from nanlint.verify.verifier import Outcome, Verified, verify_one

ROOT = Path(__file__).resolve().parent.parent
SIGMOID = Probe("expression", "1 / (1 + torch.exp(-z))", "torch.sigmoid(z)",
                (ProbeInput("z", evidence="logits of a linear layer"),))


def _fixture_verifications(prefix):
    out = []
    for path in sorted((ROOT / "fixtures").glob(f"{prefix}_*.py")):
        for d in lint_source(str(path), path.read_text(), all_rules() + [LatentFindings]).diagnostics:
            if d.code == prefix and d.probe is not None and d.probe.kind == "expression":
                out.append((d, verify_one(d, "cpu")))
    return out


@pytest.mark.parametrize("code", ["NAN110", "NAN111"])
def test_summary_never_says_the_fix_holds_where_a_cell_shows_it_failing(code):
    seen_failing_cell = False
    for d, v in _fixture_verifications(code):
        failing = [c.name for c in v.contexts if c.fix is not None
                   and (c.fix.cell("forward").startswith("NaN") or c.fix.cell("gradient").startswith("NaN"))]
        if failing:
            seen_failing_cell = True
            assert "the fix holds in all" not in v.reason, (d.start.row, v.reason)
            assert "still NaN/Inf at some points in " + failing[0] in v.reason, v.reason
    assert seen_failing_cell  # the float16 normalize/acos cells that made the old summary wrong


def test_bits_never_exceed_the_significand_of_the_context_dtype():
    probes = [Probe("expression", "x / x.norm(dim=-1, keepdim=True)", "torch.nn.functional.normalize(x, dim=-1)",
                    (ProbeInput("x", evidence="a difference of embeddings"),)), SIGMOID]
    for probe in probes:
        v = verify_expression(probe, "cpu")
        for c in v.contexts:
            dtype = C.dtype_from_name(c.context["dtype"])
            auto = C.dtype_from_name(c.context["autocast"]) if c.context.get("autocast") else None
            cap = max(C.PRECISION[d] for d in (dtype, auto) if d is not None)
            for side in (c.original, c.fix):
                for b in (side.bits_median, side.bits_p99, side.bits_max):
                    assert b is None or b <= cap, (c.name, b)
                for part in ("forward",):
                    m = re.search(r"p99 ([\d.]+) bits", side.cell(part))
                    assert m is None or float(m.group(1)) <= cap
        assert not re.search(r"(2[5-9]|[3-9]\d) bits", v.reason), v.reason


def test_a_fix_less_accurate_than_the_original_is_said_in_words_and_in_the_plot():
    from nanlint.verify.report_html import plot_drawing

    v = verify_expression(SIGMOID, "cpu", want_sweep=True)
    assert v.verdict == "confirmed"
    note = [n for n in v.notes if "less accurate than the original" in n]
    assert note, v.notes
    # torch.sigmoid's float16 gradient is 0 from z ~ 8, where the hand-written form tracks float64.
    m = re.search(r"; in float16, ≥9 of 11 bits wrong at inputs of magnitude ([\d.]+)( to ([\d.]+))? "
                  r"\(float64 at most ([\d.e-]+)\)", note[0])
    assert m and 7.5 <= float(m.group(1)) <= 8.5, note[0]
    # The note carries its measure: against float64, in bits of the dtype, and how small the
    # true gradient is there (sigmoid'(8) = 3.4e-4: a fact about torch.sigmoid's backward).
    assert float(m.group(4)) < 1e-3, note[0]
    assert "measured against float64" in note[0] and "in float32, ≥18 of 24 bits wrong" in note[0]
    assert not re.search(r"magnitude ([\d.]+) to \1\b", note[0]), note[0]  # never "7.62 to 7.62"
    assert "gradient w.r.t. z" in note[0]
    drawn = plot_drawing(v.sweep)
    assert drawn is not None and drawn[1]["fix_worse"]
    html = _plot(v, True)
    assert "orange hatched: the fix is finite but less accurate" in html
    assert "x axis: z" in html and "the gradient w.r.t. z" in html


def test_flat_sweeps_are_not_plotted_and_captions_list_only_what_is_drawn():
    from nanlint.verify.report_html import plot_drawing

    t = [i / 10 for i in range(-10, 11)]
    flat = {"param": "x", "description": "x on the x axis", "t": t, "output_element": 0, "log_x": False,
            "series": {"float32": {"reference": [1.0] * len(t), "original": [1.0] * len(t), "fix": [1.0] * len(t),
                                   "reference_grad": [0.0] * len(t), "original_grad": [0.0] * len(t),
                                   "fix_grad": [0.0] * len(t)}}}
    assert plot_drawing(flat) is None

    class V:
        sweep = flat

    assert "No plot" in _plot(V, True)
    moving = dict(flat, series={"float32": {"reference": t, "original": t, "fix": t}})
    png, shown = plot_drawing(moving)
    assert shown["rows"] == ["output"] and not (shown["original_bad"] or shown["fix_bad"] or shown["fix_worse"])
    V.sweep = moving
    caption = _plot(V, True)
    assert "Shaded" not in caption and "gradient" not in caption and "top row: the output" in caption


def test_long_code_lines_wrap_in_the_html_report():
    long = " + ".join(f"torch.log(x{i})" for i in range(12))
    probe = Probe("expression", long, None, tuple(ProbeInput(f"x{i}", evidence="e") for i in range(12)))
    from nanlint.core.diagnostics import Diagnostic, Position

    d = Diagnostic("m.py", Position(1, 1), Position(1, 2), "NAN101", "n", "m", probe=probe)
    page = render_html(Outcome(device="cpu", results=[Verified(d, verify_expression(probe, "cpu"))]))
    css = page.split("<style>")[1].split("</style>")[0]
    assert re.search(r"pre\{[^}]*white-space:pre-wrap", css) and "overflow-wrap:anywhere" in css
    assert "overflow-x:auto" not in css


def test_witness_inputs_keep_the_digits_that_rerun_the_failure():
    from nanlint.verify.verdict import fmt_value

    below = torch.tensor(-1.0).nextafter(torch.tensor(-2.0)).item()  # -1.0000001 in float32
    assert fmt_value(below) == "-1.0000001" and torch.acos(torch.tensor(float(fmt_value(below)))).isnan()
    edge = torch.tensor(-11.09375, dtype=torch.float16).item()
    assert fmt_value(edge) == "-11.09375"
    assert fmt_value([below, 2.0]) == "[-1.0000001, 2]"
    assert fmt_value([0.5] * 4) == "torch.full((4,), 0.5)"
    # Round numbers and float64 values stay short.
    assert (fmt_value(-1.0), fmt_value(0.1), fmt_value(1 / 3), fmt_value(65504.0)) == ("-1", "0.1", "0.333333", "65504")


def test_each_dtype_is_swept_to_its_own_edge():
    """float32's sigmoid by hand fails past 88.7, float16's past 11.1: one range for both would
    hide float32's failures (the old plot swept +-22 for every dtype)."""
    v = verify_expression(SIGMOID, "cpu", want_sweep=True)
    series = v.sweep["series"]
    f32, f16 = max(abs(t) for t in series["float32"]["t"]), max(abs(t) for t in series["float16"]["t"])
    assert 150 < f32 < 200 and 20 < f16 < 25, (f32, f16)
    grad = series["float32"]["original_grad"]
    assert any(not math.isfinite(g) for g in grad)  # float32's failures are on its plot
    assert "float32 from -177" in v.sweep["description"] and "it first fails at |z| = 88.7" in v.sweep["description"]


def test_an_output_flushed_to_zero_is_said_by_table_plot_and_summary_alike():
    """float16 `1 / (1 + exp(-z))` is 0 for z in about -17..-11 where float64 is ~1e-5 (a
    float16 subnormal, where accuracy is not judged): the table, the plot's shading and a
    note all say so; none says "ok" alone."""
    from nanlint.verify.report_html import plot_drawing

    v = verify_expression(SIGMOID, "cpu", want_sweep=True)
    f16 = next(c for c in v.contexts if c.name == "float16")
    assert f16.original.zeroed > 0 and 1e-6 < f16.original.zeroed_max < 6.1e-5
    assert f16.original.cell("forward").startswith(f"0 at {f16.original.zeroed} where float64 is up to ")
    assert any("output is 0 where float64 is not" in n for n in v.notes), v.notes
    drawn = plot_drawing(v.sweep)
    assert drawn is not None and drawn[1]["zeroed"]
    assert "brown dotted: the original's output is 0 where float64 is not" in _plot(v, True)
    from nanlint.verify.report_html import _context_table

    assert f'<td class="warn">{f16.original.cell("forward")}</td>' in _context_table(v)
    # float32 has no such points: its cell stays plain.
    f32 = next(c for c in v.contexts if c.name == "float32")
    assert f32.original.zeroed == 0 and f32.original.cell("forward").startswith("ok")


def test_a_failure_at_a_single_point_is_drawn_and_the_caption_gives_the_real_range():
    """log(p) of a probability fails at p = 0 only, the edge of its domain: the sweep holds
    an exact 0, the plot marks it, and the caption says 0 to 1, not the -1 to 1 it asked for."""
    probe = Probe("expression", "torch.log(p)", "torch.log(p.clamp(min=torch.finfo(p.dtype).tiny))",
                  (ProbeInput("p", domain=(0.0, 1.0), kind="probability", evidence="softmax at line 3"),
                   ProbeInput("p.dtype")))
    v = verify_expression(probe, "cpu", want_sweep=True)
    assert v.verdict == "confirmed", v.line()
    assert "float32 from 0 to 1" in v.sweep["description"] and "-1" not in v.sweep["description"]
    from nanlint.verify.report_html import plot_drawing

    png, shown = plot_drawing(v.sweep)
    assert ("original", "float32", 0.0) in shown["points"]
    caption = _plot(v, True)
    assert "a red line and ×: the original is NaN/Inf at that one point (float32 at p = 0" in caption


def test_bits_are_worded_for_a_reader():
    from nanlint.verify.verdict import SideStats, bits_text

    assert (bits_text(1.0), bits_text(1.04), bits_text(15.5)) == ("1 bit", "1 bit", "15.5 bits")
    assert "p99 1 bit" in SideStats(bits_p99=1.0).cell("forward")
    v = verify_expression(SIGMOID, "cpu")
    assert "1 bits" not in v.reason
    m = re.search(r"the fix's 99th-percentile error vs float64 in (\S+): ([\d.]+) bits? of \1's (\d+), "
                  r"about ([\de.+-]+) relative", v.reason)
    assert m, v.reason
    assert m.group(1) == "float32" and m.group(3) == "24"


def test_a_fix_is_not_called_less_accurate_where_float64_of_the_original_is_wrong_itself():
    """log(1 + exp(x)) at x = -38 is 0 even in float64 (1 + 3e-17 rounds to 1), where
    softplus gives 3e-17: the reference and the fix's float64 disagree there, so that point
    cannot judge the fix (the report once said softplus 'loses most of its bits')."""
    probe = Probe("expression", "torch.log(1 + torch.exp(x))", "torch.nn.functional.softplus(x)",
                  (ProbeInput("x", evidence="a learned scale"),))
    v = verify_expression(probe, "cpu")
    assert v.verdict == "confirmed", v.line()
    assert not any("less accurate than the original" in n for n in v.notes), v.notes
