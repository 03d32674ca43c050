"""A one-dimensional sweep through a failure, for the report's plot.

The line runs through the witness: the input with the largest value moves from -2x to +2x
its witness value (a vector input scales as a whole); every other input, mask, index and
constant stays as in the witness. Each dtype (no autocast)
gets the original, the fix and the float64 reference of the original on the inputs as
rounded to that dtype, forward and gradient.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import torch

from . import contexts as C
from .evaluate import run_program
from .inputs import FLOAT_ROLES
from .verdict import Verification

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
    ts = _grid(span)
    # Keep every moving input inside its domain.
    keep = torch.ones(len(ts), dtype=torch.bool)
    cols64: Dict[str, torch.Tensor] = {}
    for s in p.specs:
        if s.value is not None:
            continue
        if s.name in directions:
            col = ts.reshape((-1,) + (1,) * directions[s.name].dim()) * directions[s.name]
            if s.domain is not None:
                lo, hi = s.domain
                inside = ((col >= lo) & (col <= hi)).reshape(len(ts), -1).all(dim=1)
                keep &= inside
            cols64[s.name] = col
        else:
            cols64[s.name] = base[s.name].expand((len(ts),) + tuple(base[s.name].shape)).clone()
    ts = ts[keep]
    cols64 = {k: v[keep] for k, v in cols64.items()}
    if len(ts) < 2:
        return None
    out_element = 0
    if witness is not None and witness.where == "forward" and isinstance(witness.result, list):
        flat = list(_walk(witness.result))
        for i, v in enumerate(flat):
            if isinstance(v, float) and not math.isfinite(v):
                out_element = i
                break
    series: Dict[str, Dict[str, List[float]]] = {}
    for dtype in C.DTYPES:
        cols = {}
        for k, v in cols64.items():
            cols[k] = (v.to(dtype) if v.is_floating_point() else v).to(device)
        rounded = {k: (v.to(torch.float64) if v.is_floating_point() else v) for k, v in cols.items()}
        entry: Dict[str, List[float]] = {}
        for label, program, columns in (("original", p.program_o, cols), ("fix", p.program_f, cols),
                                        ("reference", p.program_o, rounded)):
            if program is None:
                continue
            r = run_program(program, p.mode, columns, {s.name: s.value for s in p.specs if s.value is not None},
                            None, [main.name])
            if r.error is not None or r.out is None:
                continue
            out = r.out.reshape(len(ts), -1)
            entry[label] = _flat_list(out[:, min(out_element, out.shape[1] - 1)].double().cpu())
            g = r.grads.get(main.name)
            if g is not None:
                g = g.reshape(len(ts), -1)
                entry[label + "_grad"] = _flat_list(g[:, min(element, g.shape[1] - 1)].double().cpu())
        series[C.dtype_name(dtype)] = entry
    sign = 1.0
    if scale != 0.0:
        sign = 1.0 if float(directions[main.name].reshape(-1)[element]) >= 0 else -1.0
    axis = ts * sign
    label = f"{main.name}[{element}]" if base[main.name].dim() else main.name
    fixed = [s for s in p.specs if s is not main]
    held = ", ".join(
        f"{s.name} = {s.value:g}" if isinstance(s.value, float) else (
            f"{s.name} = {s.value!r}" if s.value is not None else f"{s.name} as in the witness") for s in fixed)
    if scale == 0.0:
        what = f"{label} from -1 to 1 (all its elements)"
    else:
        what = f"{label} on the x axis"
        if base[main.name].dim():
            what += f" (every element of {main.name} scales with it)"
        what += f"; the witness is at {label} = {base[main.name].reshape(-1)[element].item():.6g}"
    if held:
        what += f"; fixed: {held}"
    return {"param": label, "description": what, "t": _flat_list(axis), "series": series,
            "output_element": out_element, "log_x": span > 1e3}


def _walk(v):
    for x in v:
        if isinstance(x, list):
            yield from _walk(x)
        else:
            yield x


def _grid(span: float) -> torch.Tensor:
    if span <= 1e3:
        return torch.linspace(-span, span, POINTS, dtype=torch.float64)
    # Wide ranges: logarithmic on both sides of zero, with a linear patch around it.
    half = POINTS // 2
    mags = torch.logspace(-3, math.log10(span), half, dtype=torch.float64)
    return torch.cat([-mags.flip(0), torch.zeros(1, dtype=torch.float64), mags])
