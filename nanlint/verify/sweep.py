"""A one-dimensional sweep through a failure, for the report's plot.

The line runs through the witness: the input with the largest value moves along it (a
vector input scales as a whole); every other input, mask, index and constant stays as in
the witness. Each dtype (no autocast) is swept to twice where its own original first fails
on the line (float32's sigmoid by hand fails past 88.7, float16's past 11.1), or to twice
the witness where it holds, and gets the original, the fix and the float64 reference of
the original on the inputs as rounded to that dtype, forward and gradient.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import torch

from . import contexts as C
from .evaluate import run_program
from .inputs import FLOAT_ROLES
from .verdict import Verification, fmt_number

POINTS = 601


def _tensor(v: Any, dtype=torch.float64) -> torch.Tensor:
    return torch.tensor(v, dtype=dtype)


def _flat_list(t: torch.Tensor) -> List[float]:
    return [float(x) for x in t.reshape(-1).tolist()]


def build_sweep(p, result: Verification, device: str) -> Optional[Dict[str, Any]]:
    witness = result.witness or result.fix_witness
    floats = [s for s in p.specs if s.differentiable]
    if not floats:
        return None
    base: Dict[str, torch.Tensor] = {}
    for s in p.specs:
        if s.value is not None:
            continue
        if witness is not None and s.name in witness.inputs:
            dtype = torch.float64 if s.role in FLOAT_ROLES else (torch.bool if s.role == "bool" else torch.int64)
            base[s.name] = _tensor(witness.inputs[s.name], dtype)
        elif s.role in FLOAT_ROLES:
            base[s.name] = torch.zeros(p.shape, dtype=torch.float64)
        elif s.role == "bool":
            base[s.name] = torch.ones(p.shape, dtype=torch.bool)
        else:
            base[s.name] = torch.zeros((), dtype=torch.int64)
    main = max(floats, key=lambda s: float(base[s.name].abs().max()))
    scale = float(base[main.name].abs().max())
    element = int(base[main.name].abs().reshape(-1).argmax()) if base[main.name].dim() else 0
    # Only the largest input moves (the others stay at the witness): scaling every input
    # together would keep ratios such as `x / temperature` constant along the line.
    if scale == 0.0:
        span, directions = 1.0, {main.name: torch.ones_like(base[main.name])}
    else:
        span = 2.0 * scale
        directions = {main.name: base[main.name] / scale}
    constants = {s.name: s.value for s in p.specs if s.value is not None}
    series: Dict[str, Dict[str, List[float]]] = {}
    edges: Dict[str, Optional[float]] = {}
    for dtype in C.DTYPES:
        # Each dtype is swept to its own edge: float32 fails past 88.7 where float16 fails
        # past 11.1, and one common range would hide one of them.
        edge = _first_failure(p, main.name, directions, base, dtype, device, constants)
        edges[C.dtype_name(dtype)] = edge
        ts, cols64 = _line(p, _grid(2.0 * edge if edge else span), directions, base)
        if len(ts) < 2:
            continue
        entry: Dict[str, List[float]] = {}
        for label, values in _evaluate(p, main.name, cols64, dtype, device, constants).items():
            out, g = values
            entry[label] = _flat_list(out[:, min(_out_element(witness), out.shape[1] - 1)])
            if g is not None:
                entry[label + "_grad"] = _flat_list(g[:, min(element, g.shape[1] - 1)])
        entry["t"] = _flat_list(ts)
        entry["log_x"] = float(ts.abs().max()) > 1e3
        series[C.dtype_name(dtype)] = entry
    if not series:
        return None
    sign = 1.0
    if scale != 0.0:
        sign = 1.0 if float(directions[main.name].reshape(-1)[element]) >= 0 else -1.0
    for entry in series.values():
        entry["t"] = [sign * t for t in entry["t"]]
    label = f"{main.name}[{element}]" if base[main.name].dim() else main.name
    fixed = [s for s in p.specs if s is not main]
    held = ", ".join(
        f"{s.name} = {s.value:g}" if isinstance(s.value, float) else (
            f"{s.name} = {s.value!r}" if s.value is not None else f"{s.name} as in the witness") for s in fixed)
    what = f"{label} on the x axis"
    if base[main.name].dim():
        what += " (all its elements move together)" if scale == 0.0 else \
            f" (every element of {main.name} scales with it)"
    if scale != 0.0:
        what += f"; the witness is at {label} = {base[main.name].reshape(-1)[element].item():.6g}"
    ranges = []
    for name, entry in series.items():
        lo, hi = min(entry["t"]), max(entry["t"])
        edge = edges.get(name)
        reach = f" (it first fails at |{label}| = {fmt_number(edge)})" if edge else ""
        ranges.append(f"{name} from {fmt_number(lo)} to {fmt_number(hi)}{reach}")
    what += "; " + ", ".join(ranges)
    if held:
        what += f"; fixed: {held}"
    return {"param": label, "description": what, "series": series, "output_element": _out_element(witness)}


def _out_element(witness) -> int:
    """The output element the plot follows: the first non-finite one of a forward witness."""
    if witness is not None and witness.where == "forward" and isinstance(witness.result, list):
        for i, v in enumerate(_walk(witness.result)):
            if isinstance(v, float) and not math.isfinite(v):
                return i
    return 0


def _line(p, ts: torch.Tensor, directions: Dict[str, torch.Tensor], base: Dict[str, torch.Tensor]):
    """The points of the line (moving inputs kept inside their domains) as float64 columns."""
    keep = torch.ones(len(ts), dtype=torch.bool)
    cols64: Dict[str, torch.Tensor] = {}
    for s in p.specs:
        if s.value is not None:
            continue
        if s.name in directions:
            col = ts.reshape((-1,) + (1,) * directions[s.name].dim()) * directions[s.name]
            if s.domain is not None:
                lo, hi = s.domain
                keep &= ((col >= lo) & (col <= hi)).reshape(len(ts), -1).all(dim=1)
            cols64[s.name] = col
        else:
            cols64[s.name] = base[s.name].expand((len(ts),) + tuple(base[s.name].shape)).clone()
    return ts[keep], {k: v[keep] for k, v in cols64.items()}


def _evaluate(p, main: str, cols64: Dict[str, torch.Tensor], dtype: torch.dtype, device: str,
              constants: Dict[str, Any]) -> Dict[str, Any]:
    """label -> (output rows, gradient rows w.r.t. `main` or None), float64 on the CPU: the
    original and the fix on the inputs in `dtype`, and the float64 reference of the original
    on those same (rounded) inputs."""
    cols = {k: (v.to(dtype) if v.is_floating_point() else v).to(device) for k, v in cols64.items()}
    rounded = {k: (v.to(torch.float64) if v.is_floating_point() else v) for k, v in cols.items()}
    n = next(iter(cols64.values())).shape[0]
    out: Dict[str, Any] = {}
    for label, program, columns in (("original", p.program_o, cols), ("fix", p.program_f, cols),
                                    ("reference", p.program_o, rounded)):
        if program is None:
            continue
        r = run_program(program, p.mode, columns, constants, None, [main])
        if r.error is not None or r.out is None:
            continue
        g = r.grads.get(main)
        out[label] = (r.out.reshape(n, -1).double().cpu(),
                      g.reshape(n, -1).double().cpu() if g is not None else None)
    return out


# Magnitudes searched for where a dtype first fails along the line.
_SEARCH = torch.logspace(-4, 38, 841, dtype=torch.float64)


def _first_failure(p, main: str, directions, base, dtype: torch.dtype, device: str,
                   constants: Dict[str, Any]) -> Optional[float]:
    """The smallest |t| on the line where the original's output or gradient is NaN/Inf in
    `dtype` while float64 is finite (None where it holds along the whole line)."""
    limit = float(torch.finfo(dtype).max)
    mags = _SEARCH[_SEARCH <= limit]
    first = _smallest_failing(p, main, torch.cat([-mags, torch.zeros(1, dtype=torch.float64), mags]),
                              directions, base, dtype, device, constants)
    if not first:
        return first
    # Refine between the grid's last holding magnitude and its first failing one.
    below = float(mags[mags < first].max()) if bool((mags < first).any()) else 0.0
    fine = torch.linspace(below, first, 257, dtype=torch.float64)
    refined = _smallest_failing(p, main, torch.cat([-fine, fine]), directions, base, dtype, device, constants)
    return refined if refined is not None else first


def _smallest_failing(p, main: str, ts: torch.Tensor, directions, base, dtype: torch.dtype, device: str,
                      constants: Dict[str, Any]) -> Optional[float]:
    ts, cols64 = _line(p, ts, directions, base)
    if len(ts) == 0:
        return None
    runs = _evaluate(p, main, cols64, dtype, device, constants)
    if "original" not in runs or "reference" not in runs:
        return None
    bad = torch.zeros(len(ts), dtype=torch.bool)
    for o, r in zip(runs["original"], runs["reference"]):
        if o is None or r is None or o.shape != r.shape:
            continue
        bad |= (~torch.isfinite(o) & torch.isfinite(r)).any(dim=1)
    return float(ts[bad].abs().min()) if bool(bad.any()) else None


def _walk(v):
    for x in v:
        if isinstance(x, list):
            yield from _walk(x)
        else:
            yield x


def _grid(span: float) -> torch.Tensor:
    half = POINTS // 2
    if span <= 1e3:
        # Symmetric, with an exact 0: `linspace(-1, 1)` misses it by a rounding, and a domain
        # starting at 0 (log of a probability) then drops the very point that fails.
        steps = torch.linspace(0.0, span, half + 1, dtype=torch.float64)[1:]
        return torch.cat([-steps.flip(0), torch.zeros(1, dtype=torch.float64), steps])
    # Wide ranges: logarithmic on both sides of zero, with a linear patch around it.
    mags = torch.logspace(-3, math.log10(span), half, dtype=torch.float64)
    return torch.cat([-mags.flip(0), torch.zeros(1, dtype=torch.float64), mags])
