"""`--report FILE.html`: one self-contained page (inline CSS, plots as base64 PNG).

Per finding: the code before and after the fix, the verdict with its witness, the verdict
table (context x forward/gradient x original/fix) and, for expression probes, a plot of
original, fix and float64 reference along a one-dimensional sweep through the failure, per
dtype, with the NaN/Inf regions shaded. matplotlib is optional (nanlint[report]): without
it the page says so and keeps everything else.
"""

from __future__ import annotations

import base64
import html
import io
import math
import textwrap
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Tuple

from ..core.install import install_hint
from ..rules.pages import rule_url
from .findings import printable, source_lines
from .report_text import counts, summary
from .verdict import CONFIRMED, FIX_FAILED, NOT_REPRODUCED, NOT_VERIFIABLE, POSSIBLE, VERDICTS, fmt_number
from .verifier import Outcome, Verified

_COLORS = {
    CONFIRMED: "#1a7f37",
    POSSIBLE: "#8250df",
    NOT_REPRODUCED: "#6e7781",
    FIX_FAILED: "#cf222e",
    NOT_VERIFIABLE: "#9a6700",
}

_CSS = """
body{font:14px/1.5 -apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif;margin:0;color:#1f2328;background:#f6f8fa}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px} h2{font-size:17px;margin:0 0 6px;word-break:break-all}
.meta{color:#57606a;margin-bottom:16px}
.card{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:16px 20px;margin:16px 0}
.badge{display:inline-block;color:#fff;border-radius:12px;padding:1px 10px;font-size:12px;font-weight:600;vertical-align:middle}
.counts span{margin-right:14px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}
td.bad{background:#ffebe9;color:#82071e} td.ok{background:#dafbe1;color:#116329} td.na{color:#6e7781}
td.warn{background:#fff8c5;color:#7d4e00}
pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:8px 10px;margin:4px 0;font-size:12.5px;white-space:pre-wrap;overflow-wrap:anywhere}
code{white-space:pre-wrap;overflow-wrap:anywhere}
.code{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:12px}
.code>div{min-width:0}
.code h3{font-size:13px;margin:4px 0;color:#57606a}
.witness{font-weight:600}
.reason{color:#424a53}
img.plot{max-width:100%;border:1px solid #d0d7de;border-radius:6px;margin-top:8px}
.note{color:#57606a;font-size:13px}
nav ol{padding-left:20px;margin:6px 0} nav li{margin:2px 0}
details{margin-top:6px} summary{cursor:pointer;color:#0969da}
"""


def _e(text: Any) -> str:
    """HTML-escaped, control characters shown as escapes (text may come from a findings file)."""
    return html.escape(printable(str(text)), quote=True)


def _badge(verdict: str) -> str:
    return f'<span class="badge" style="background:{_COLORS.get(verdict, "#6e7781")}">{_e(verdict)}</span>'


def render_html(outcome: Outcome) -> str:
    plots_available = _matplotlib() is not None
    c = counts(outcome)
    parts: List[str] = []
    parts.append("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
                 "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                 f"<title>nanlint verify report</title><style>{_CSS}</style></head><body><main>")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts.append("<h1>nanlint verify report</h1>")
    parts.append(f'<div class="meta">{_e(summary(outcome))}<br>device {_e(outcome.device)}, '
                 f"torch {_e(outcome.torch_version)}, {_e(stamp)}</div>")
    parts.append('<div class="card counts">' + "".join(
        f"<span>{_badge(v)} {c[v]}</span>" for v in VERDICTS) + "</div>")
    if not plots_available:
        parts.append('<div class="card note">Plots are not included: matplotlib is not installed '
                     f"({_e(install_hint('report'))}).</div>")
    if outcome.errors:
        parts.append('<div class="card"><b>Errors</b><pre>' + _e("\n".join(outcome.errors)) + "</pre></div>")
    parts.append('<div class="card"><nav><b>Findings</b><ol>')
    for i, r in enumerate(outcome.results):
        d = r.diagnostic
        parts.append(f'<li><a href="#f{i}">{_e(d.where())} {_e(d.code)}</a> '
                     f"{_badge(r.verification.verdict)}</li>")
    parts.append("</ol></nav></div>")
    for i, r in enumerate(outcome.results):
        parts.append(_finding(i, r, plots_available, outcome.source_roots))
    if outcome.unprobed:
        parts.append('<div class="card"><b>Findings without a probe (not verified)</b><ul>')
        for d in outcome.unprobed:
            parts.append(f"<li>{_e(d.where())} {_e(d.code)} {_e(d.message)}</li>")
        parts.append("</ul></div>")
    parts.append("</main></body></html>\n")
    return "".join(parts)


def _finding(i: int, r: Verified, plots: bool, roots: List[str]) -> str:
    d, v = r.diagnostic, r.verification
    out = [f'<section class="card" id="f{i}">']
    out.append(f"<h2>{_e(d.where())} "
               f'<a href="{_e(rule_url(d.code))}">{_e(d.code)}</a> {_e(d.name)} {_badge(v.verdict)}</h2>')
    out.append(f"<div>{_e(d.message)}</div>")
    if v.witness is not None:
        out.append(f'<p class="witness">Original: {_e(v.witness.sentence())}</p>')
    if v.fix_witness is not None:
        out.append(f'<p class="witness">Fix: {_e(v.fix_witness.sentence())}</p>')
    out.append(f'<p class="reason">{_e(v.reason)}</p>')
    for note in v.notes:
        out.append(f'<p class="note">Note: {_e(note)}</p>')
    out.append(_code(d, v, roots))
    if v.harness is not None:
        out.append(_harness_table(v.harness))
    if v.contexts:
        out.append(_context_table(v))
    if v.sweep is not None:
        out.append(_plot(v, plots))
    if v.ranges:
        out.append("<details><summary>Inputs tried</summary><ul>" + "".join(
            f"<li>{_e(x)}</li>" for x in v.ranges) + f"</ul><div class=\"note\">{v.points} points per context, "
            f"{v.seconds:.2f} s</div></details>")
    out.append("</section>")
    return "".join(out)


def _code(d, v, roots: List[str]) -> str:
    before = after = None
    lines = source_lines(d, roots)
    if lines is not None:
        before = textwrap.dedent(lines["before"])
        after = textwrap.dedent(lines["after"]) if lines["after"] is not None else None
    probe = d.probe
    if v.harness is not None:
        before_h, after_h = v.harness.get("original_code"), v.harness.get("fixed_code")
        block = ['<div class="code"><div><h3>Before (as the harness runs it)</h3>'
                 f"<pre>{_e(before_h)}</pre></div><div><h3>After</h3><pre>{_e(after_h)}</pre></div></div>"]
        if before:
            block.append(f"<h3 class=\"note\">Source</h3><pre>{_e(before.rstrip())}</pre>")
        return "".join(block)
    if before is None and probe is not None:
        before = probe.original
    if after is None and probe is not None:
        after = probe.fixed
    block = ['<div class="code">']
    block.append(f"<div><h3>Before</h3><pre>{_e((before or '').rstrip())}</pre></div>")
    block.append(f"<div><h3>After</h3><pre>{_e((after or '(no fix)').rstrip())}</pre></div>")
    block.append("</div>")
    if probe is not None and probe.kind == "expression":
        block.append('<div class="note">Evaluated as: <code>' + _e(" ".join((probe.original or "").split()))
                     + "</code> → <code>" + _e(" ".join((probe.fixed or "—").split())) + "</code></div>")
    return "".join(block)


def _cls(text: str) -> str:
    if text == "error":
        return "na"
    if text.startswith("NaN") or "inaccurate" in text:
        return "bad"
    return "warn" if "where float64 is up to" in text else "ok"  # flushed to 0: the brown shading


def _context_table(v) -> str:
    rows = ["<table><tr><th>context</th><th>points</th><th>original forward</th><th>original gradient</th>"
            "<th>fix forward</th><th>fix gradient</th><th>both fail</th></tr>"]
    for c in v.contexts:
        o, f = c.original, c.fix
        cells = [o.cell("forward"), o.cell("gradient")]
        cells += [f.cell("forward"), f.cell("gradient")] if f is not None else ["—", "—"]
        tds = "".join(f'<td class="{_cls(x)}">{_e(x)}</td>' for x in cells)
        errors = [x for x in (o.error, f.error if f else None) if x]
        title = f' title="{_e("; ".join(errors))}"' if errors else ""
        rows.append(f"<tr{title}><td>{_e(c.name)}</td><td>{c.points}</td>{tds}<td>{c.shared or ''}</td></tr>")
    rows.append("</table>")
    rows.append('<div class="note">Counts are points with NaN/Inf where the float64 reference is finite and '
                "representable; p99 is the 99th percentile error in bits (log2 of floats between the "
                "result and the reference) where the reference is reliable. “inaccurate”: three quarters "
                "of the significand or more lost where the fix is accurate. “both fail”: points where "
                "the fix fails too (not counted against it when the original was already non-finite).</div>")
    return "".join(rows)


def _harness_table(h: Dict[str, Any]) -> str:
    rows = ["<table><tr><th>measure</th><th>original</th><th>fix</th><th>expected</th></tr>"]
    for r in h.get("rows", []):
        rows.append(f"<tr><td>{_e(r['metric'])}</td><td>{_e(r['original'])}</td><td>{_e(r['fix'])}</td>"
                    f"<td>{_e(r['expected'])}</td></tr>")
    rows.append("</table>")
    return "".join(rows)


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure, FigureCanvasAgg


def _runs(flags: List[bool]) -> List[Tuple[int, int]]:
    out, start = [], None
    for i, f in enumerate(flags + [False]):
        if f and start is None:
            start = i
        elif not f and start is not None:
            out.append((start, i - 1))
            start = None
    return out


def _plot(v, plots: bool) -> str:
    sweep = v.sweep
    if isinstance(sweep, dict) and "error" in sweep:
        return f'<div class="note">No plot: {_e(sweep["error"])}</div>'
    if not plots:
        return '<div class="note">Plot omitted: matplotlib is not installed.</div>'
    drawn = plot_drawing(sweep)
    if drawn is None:
        return ('<div class="note">No plot: along the sweep every curve is flat or missing, '
                "so a plot would show nothing the table does not.</div>")
    png, shown = drawn
    data = base64.b64encode(png).decode("ascii")
    rows = []
    if "output" in shown["rows"]:
        rows.append(f"top row: the output{_e(shown['output'])}")
    if "gradient" in shown["rows"]:
        rows.append(f"{'bottom' if len(shown['rows']) > 1 else 'the'} row: the gradient w.r.t. {_e(sweep['param'])} "
                    "(of the output, or of a fixed mix of its elements when it has several)")
    shading = []
    if shown["original_bad"]:
        shading.append("red: the original is NaN/Inf")
    points = list(dict.fromkeys(f"{name} at {_e(sweep['param'])} = {fmt_number(x)}"
                                for label, name, x in shown["points"] if label == "original"))
    if points:
        shading.append("a red line and ×: the original is NaN/Inf at that one point (" + ", ".join(points) + ")")
    if shown["zeroed"]:
        shading.append("brown dotted: the original's output is 0 where float64 is not (it underflowed; "
                       "the table counts these points as “0 at”)")
    if shown["fix_bad"]:
        shading.append("blue hatched: the fix is NaN/Inf")
    if shown["fix_worse"]:
        shading.append("orange hatched: the fix is finite but less accurate than the original "
                       "(more than half off where the original is within 5% of float64)")
    caption = (f"x axis: {_e(sweep['param'])}; " + "; ".join(rows) + f". Sweep: {_e(sweep['description'])}."
               + (f" Shaded: {'; '.join(shading)}." if shading else ""))
    return (f'<img class="plot" alt="original, fix and float64 reference along a sweep of {_e(sweep["param"])}" '
            f'src="data:image/png;base64,{data}"><div class="note">{caption}</div>')


# Half the smallest subnormal of each dtype: a float64 value at least this large rounds to a
# nonzero number of the dtype.
_ROUNDS_TO_ZERO_BELOW = {"float32": 0.5 * 2.0 ** -149, "float16": 0.5 * 2.0 ** -24, "bfloat16": 0.5 * 2.0 ** -133}


def _zeroed(entry: Dict[str, List[float]], suffix: str, dtype: str) -> List[bool]:
    """Points where the original's output is 0 while float64 rounds to a nonzero value of the
    dtype and the fix gives one (the table's "0 at N where float64 is up to ...")."""
    if suffix != "":
        return []
    ref, fix, orig = (entry.get(k) for k in ("reference", "fix", "original"))
    if not (ref and fix and orig):
        return []
    tiny = _ROUNDS_TO_ZERO_BELOW.get(dtype, 0.0)
    return [o == 0 and math.isfinite(r) and abs(r) >= tiny and math.isfinite(f) and f != 0
            for r, f, o in zip(ref, fix, orig)]


def _fix_worse(entry: Dict[str, List[float]], suffix: str) -> List[bool]:
    """Points where the fix is finite but more than half off float64 while the original is
    within 5% of it (a gradient flushed to 0 where the original tracks the reference)."""
    ref, fix, orig = (entry.get(k + suffix) for k in ("reference", "fix", "original"))
    if not (ref and fix and orig):
        return []
    out = []
    for r, f, o in zip(ref, fix, orig):
        ok = all(math.isfinite(v) for v in (r, f, o)) and r != 0
        out.append(ok and abs(f - r) > 0.5 * abs(r) and abs(o - r) <= 0.05 * abs(r))
    return out


def _informative(entry: Dict[str, List[float]], suffix: str) -> bool:
    """Something to see: a curve that moves, or a NaN/Inf region."""
    for label in ("reference", "original", "fix"):
        ys = entry.get(label + suffix)
        if not ys:
            continue
        finite = [y for y in ys if math.isfinite(y)]
        if len(finite) < len(ys) and label != "reference":
            return True
        if finite and max(finite) - min(finite) > 1e-12 * max(1.0, max(abs(y) for y in finite)):
            return True
    return False


def plot_png(sweep: Optional[Dict[str, Any]]) -> Optional[bytes]:
    drawn = plot_drawing(sweep)
    return drawn[0] if drawn is not None else None


def plot_drawing(sweep: Optional[Dict[str, Any]]) -> Optional[Tuple[bytes, Dict[str, Any]]]:
    """The PNG and what it shows (rows drawn, shadings used), or None when every panel would
    be empty or flat."""
    mpl = _matplotlib()
    if mpl is None or not sweep or not sweep.get("series"):
        return None
    Figure, FigureCanvasAgg = mpl
    series = sweep["series"]
    names = [n for n in series if series[n]]
    kinds = [(suffix, title) for suffix, title in (("", "output"), ("_grad", f"gradient w.r.t. {sweep['param']}"))
             if any(_informative(series[n], suffix) for n in names)]
    if not names or not kinds:
        return None
    shown: Dict[str, Any] = {"rows": ["output" if s == "" else "gradient" for s, _ in kinds],
                             "original_bad": False, "fix_bad": False, "fix_worse": False, "points": [],
                             "zeroed": False,
                             "output": f"[{sweep.get('output_element', 0)}]" if sweep.get("output_element") else ""}
    fig = Figure(figsize=(4.2 * len(names), 3.2 * len(kinds)), dpi=90)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(kinds), len(names), squeeze=False)
    for col, name in enumerate(names):
        entry = series[name]
        t = entry.get("t") or sweep["t"]  # each dtype has its own range (older sweeps: one)
        for row, (suffix, title) in enumerate(kinds):
            ax = axes[row][col]
            for a, b in _runs(_zeroed(entry, suffix, name)):
                shown["zeroed"] = True
                ax.axvspan(min(t[a], t[b]), max(t[a], t[b]), facecolor="none", edgecolor="#9a6700",
                           hatch="..", alpha=0.6, lw=0)
            for a, b in _runs(_fix_worse(entry, suffix)):
                shown["fix_worse"] = True
                ax.axvspan(min(t[a], t[b]), max(t[a], t[b]), facecolor="none", edgecolor="#bc4c00",
                           hatch="\\\\", alpha=0.6, lw=0)
            ax.set_title(f"{name}: {title}{shown['output'] if suffix == '' else ''}", fontsize=10)
            plotted = False
            for label, color, style, lw, z in (("reference", "#8c959f", "-", 4.0, 1), ("fix", "#0969da", "-", 2.0, 2),
                                               ("original", "#cf222e", "--", 1.3, 3)):
                ys = entry.get(label + suffix)
                if ys is None:
                    continue
                finite = [y if math.isfinite(y) else float("nan") for y in ys]
                ax.plot(t, finite, style, color=color, lw=lw, zorder=z, alpha=0.45 if label == "reference" else 0.95,
                        label=("float64 reference" if label == "reference" else label))
                plotted = True
                if label in ("original", "fix"):
                    bad = [not math.isfinite(y) for y in ys]
                    color = "#cf222e" if label == "original" else "#0969da"
                    for a, b in _runs(bad):
                        lo, hi = t[a], t[b]
                        shown["original_bad" if label == "original" else "fix_bad"] = True
                        if a == b:
                            # One point (log(p) at p = 0): a span of no width would not show.
                            shown["points"].append((label, name, lo))
                            ax.axvline(lo, color=color, lw=2.0, alpha=0.7, ls=":" if label == "fix" else "-")
                            ax.plot([lo], [0], marker="x", color=color, ms=9, mew=2.5,
                                    transform=ax.get_xaxis_transform(), clip_on=False, zorder=5)
                        elif label == "original":
                            ax.axvspan(min(lo, hi), max(lo, hi), color=color, alpha=0.15, lw=0)
                        else:
                            ax.axvspan(min(lo, hi), max(lo, hi), facecolor="none", edgecolor=color,
                                       hatch="///", alpha=0.5, lw=0)
            if not plotted:
                ax.text(0.5, 0.5, "not available", ha="center", va="center", transform=ax.transAxes)
            if entry.get("log_x", sweep.get("log_x")):
                ax.set_xscale("symlog", linthresh=1e-3)
            _y_scale(ax, [entry.get(k + suffix) for k in ("reference", "original", "fix")])
            ax.set_xlabel(sweep["param"], fontsize=9)
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3)
            if row == 0 and col == 0:
                ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue(), shown


def _y_scale(ax, lists) -> None:
    finite = [y for ys in lists if ys for y in ys if math.isfinite(y)]
    vals = [abs(y) for y in finite if y != 0]
    if vals and max(vals) / max(min(vals), 1e-300) > 1e6:
        ax.set_yscale("symlog", linthresh=max(min(max(vals) * 1e-6, 1.0), 1e-12))
        return
    if finite:
        lo, hi = min(finite), max(finite)
        size = max(abs(lo), abs(hi))
        if hi - lo < 1e-3 * size:  # a flat line: do not magnify rounding noise
            pad = 0.05 * size or 1.0
            ax.set_ylim(lo - pad, hi + pad)
