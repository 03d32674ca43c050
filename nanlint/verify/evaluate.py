"""Run a checked expression on a batch of points in one context: forward and gradient.

All points go through one call per context: an element-by-element expression is called on
flat tensors; an expression that reduces over a dimension is vectorized with
`torch.func.vmap`, so `x.sum(-1)` and `x.sum()` mean "over one point". Only when vmap cannot
run the expression (a data-dependent shape) does the caller fall back to a loop over a
subsample of the points.

The measures the verdict uses live here too: which outputs are NaN/Inf where a float64
reference is finite and representable, and the error in bits (Herbie's measure: log2 of one
plus the number of floats of the result's dtype between the result and the reference
rounded to that dtype).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Sequence

import torch

from .budget import BudgetExceeded
from .contexts import Context
from .sandbox import EvaluationError, Interpreter, Refused

FALLBACK_POINTS = 128
# Inputs whose value each run supplies from the context (never generated).
RUNTIME_ROLES = ("dtype", "device", "meta")


class single_threaded:
    """Run torch's CPU kernels on one thread: the batches are small (tens of thousands of
    elements), and on a busy machine OpenMP's thread pool makes each call hundreds of times
    slower than one thread. Restores the previous setting."""

    def __enter__(self):
        self.previous = torch.get_num_threads()
        if self.previous != 1:
            torch.set_num_threads(1)
        return self

    def __exit__(self, *exc):
        if self.previous != 1:
            torch.set_num_threads(self.previous)
        return False


@dataclass
class Run:
    out: Optional[torch.Tensor] = None  # (N, *out_shape), detached
    grads: Dict[str, torch.Tensor] = field(default_factory=dict)  # input -> (N, *shape)
    error: Optional[str] = None


def cotangent(out_shape: Sequence[int], dtype: torch.dtype, device) -> torch.Tensor:
    """What the output is multiplied by before backward: 1 for a scalar per point, a fixed
    pattern of mixed signs otherwise (ones would cancel, e.g. softmax sums to 1)."""
    n = math.prod(out_shape) if out_shape else 1
    if n == 1:
        return torch.ones(out_shape, dtype=dtype, device=device)
    pattern = torch.cos(torch.arange(n, dtype=torch.float64) * 1.3) + 0.1
    return pattern.reshape(tuple(out_shape)).to(dtype=dtype, device=device)


def run_program(
    program: Interpreter,
    mode: str,
    columns: Mapping[str, torch.Tensor],
    constants: Mapping[str, float],
    context: Optional[Context],
    grad_inputs: Sequence[str],
) -> Run:
    """Evaluate on every point at once. `mode`: "flat" (element-by-element expressions on
    flat tensors), "vmap" (one point per vmapped call), "loop" (one call per point)."""
    names = list(columns)
    n = next(iter(columns.values())).shape[0] if columns else 1
    leaves = {}
    for name in names:
        col = columns[name]
        if name in grad_inputs and col.is_floating_point():
            leaves[name] = col.detach().clone().requires_grad_(True)
        else:
            leaves[name] = col

    runtime = {n: r for n, r in program.checked.roles.items() if r in RUNTIME_ROLES}

    def call(*tensors):
        env = dict(constants)
        env.update(zip(names, tensors))
        if runtime:
            # A dtype, a device or a tensor read only for its dtype/device/shape: the context's.
            like = next((t for t in tensors if t.is_floating_point()), None)
            dtype = like.dtype if like is not None else torch.float32
            device = like.device if like is not None else torch.device("cpu")
            for name, role in runtime.items():
                env[name] = {"dtype": dtype, "device": device}.get(role)
                if role == "meta":
                    env[name] = torch.zeros_like(like) if like is not None else torch.zeros((), dtype=dtype)
        value = program(env)
        if not isinstance(value, torch.Tensor):
            raise EvaluationError(f"the expression gives a {type(value).__name__}, not a tensor")
        return value

    manager = context.autocast_manager() if context is not None else _null()
    program.budget.start(n if mode == "vmap" else 1)
    try:
        with manager:
            if mode == "flat":
                out = call(*[leaves[k] for k in names])
                if out.dim() == 0 or out.shape[0] != n:
                    out = out.expand((n,) + tuple(out.shape[1:] if out.dim() else ()))
            elif mode == "vmap":
                out = torch.func.vmap(call, randomness="same")(*[leaves[k] for k in names])
            else:
                outs = [call(*[leaves[k][i] for k in names]) for i in range(n)]
                if len({tuple(o.shape) for o in outs}) > 1:
                    return Run(error="the output's shape depends on the input values")
                out = torch.stack(outs)
    except (EvaluationError, Refused) as exc:
        return Run(error=str(exc))
    except BudgetExceeded:
        raise  # the whole finding stops: a refusal, not a context's error
    except Exception as exc:  # noqa: BLE001 - torch's own errors (shapes, dtypes, vmap)
        return Run(error=f"{type(exc).__name__}: {_first_line(exc)}")
    return _finish(out, leaves, grad_inputs)


def _finish(out: torch.Tensor, leaves, grad_inputs) -> Run:
    if not (out.is_floating_point() or out.is_complex()):
        return Run(error=f"the expression gives a {str(out.dtype).replace('torch.', '')} tensor, not floats")
    wanted = [k for k in grad_inputs if k in leaves and leaves[k].requires_grad]
    grads: Dict[str, torch.Tensor] = {}
    if wanted and out.requires_grad:
        cot = cotangent(out.shape[1:], out.dtype, out.device)
        # A scalar to differentiate (passing grad_outputs makes torch import sympy, seconds);
        # the sum's value is never used by backward, so its overflow does not matter.
        total = out.sum() if out.dim() == 1 or cot.numel() == 1 else (out * cot).sum()
        try:
            got = torch.autograd.grad(total, [leaves[k] for k in wanted], allow_unused=True)
        except Exception as exc:  # noqa: BLE001
            return Run(out=out.detach(), error=f"backward: {type(exc).__name__}: {_first_line(exc)}")
        for k, g in zip(wanted, got):
            grads[k] = torch.zeros_like(leaves[k]) if g is None else g.detach()
    return Run(out=out.detach(), grads=grads)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------------------- measures


def per_point(mask: torch.Tensor) -> torch.Tensor:
    """(N, ...) -> (N,): any element of the point."""
    return rows(mask).any(dim=1) if mask.dim() > 1 else mask


def rows(t: torch.Tensor) -> torch.Tensor:
    """(N, ...) -> (N, M): one row per point (also when N is 0, where reshape(N, -1) fails)."""
    return t.reshape(t.shape[0], math.prod(t.shape[1:]))


def representable(reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Finite once correctly rounded to `dtype` (an overflow of the true value is legitimate)."""
    return torch.isfinite(reference.to(dtype))


def ordinal(t: torch.Tensor) -> torch.Tensor:
    """Map floats to integers that count representable values in order (-0 == +0)."""
    if t.dtype == torch.float32:
        bits, mask = t.view(torch.int32).to(torch.int64), 0x7FFFFFFF
    elif t.dtype in (torch.float16, torch.bfloat16):
        bits, mask = t.view(torch.int16).to(torch.int64), 0x7FFF
    elif t.dtype == torch.float64:
        bits = t.view(torch.int64)
        return torch.where(bits < 0, -(bits & 0x7FFFFFFFFFFFFFFF), bits)
    else:
        raise TypeError(f"no ordinal for {t.dtype}")
    return torch.where(bits < 0, -(bits & mask), bits)


def bits_of_error(result: torch.Tensor, reference: torch.Tensor,
                  dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """log2(1 + floats between result and the reference, both rounded to `dtype` (default:
    the result's), at most the significand of `dtype` (every bit wrong); NaN where either is
    not finite."""
    from .contexts import PRECISION

    if dtype is not None and dtype != result.dtype:
        result = result.to(dtype)
    rounded = reference.to(result.dtype)
    valid = torch.isfinite(result) & torch.isfinite(rounded)
    safe_r = torch.where(valid, result, torch.zeros_like(result))
    safe_ref = torch.where(valid, rounded, torch.zeros_like(rounded))
    distance = (ordinal(safe_r) - ordinal(safe_ref)).abs().to(torch.float64)
    bits = torch.log2(1.0 + distance).clamp(max=float(PRECISION.get(result.dtype, 53)))
    return torch.where(valid, bits, torch.full_like(bits, float("nan")))


def trusted(ref_original: torch.Tensor, ref_fixed: Optional[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """Points where the float64 reference can judge accuracy in `dtype`: it rounds to zero or
    to a normal number of `dtype` (subnormal results are flushed by many kernels) and, when
    there is a fix, the float64 values of original and fix round to neighbouring floats of
    `dtype` (where they differ more, float64 itself lost the value, or the fix changes it on
    purpose, e.g. an epsilon)."""
    a = ref_original.to(dtype)
    tiny = torch.finfo(dtype).tiny
    ok = torch.isfinite(a) & ((a == 0) | (a.abs() >= tiny))
    if ref_fixed is not None and ref_fixed.shape == ref_original.shape:
        b = ref_fixed.to(dtype)
        ok = ok & torch.isfinite(b)
        both = torch.where(ok, a, torch.zeros_like(a)), torch.where(ok, b, torch.zeros_like(b))
        ok = ok & ((ordinal(both[0]) - ordinal(both[1])).abs() <= 1)
    return ok


def subnormal(t: torch.Tensor) -> torch.Tensor:
    """Nonzero values below the smallest normal number of their dtype."""
    tiny = torch.finfo(t.dtype).tiny
    return (t != 0) & (t.abs() < tiny)


def expand_points(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(N,) -> broadcastable against `like` of shape (N, ...)."""
    return mask.reshape((mask.shape[0],) + (1,) * (like.dim() - 1)).expand_as(like)
