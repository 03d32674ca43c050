"""Where a probe runs: device, input dtype, autocast; and the dtype facts the verdict uses."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

import torch

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
DTYPE_NAMES = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float64: "float64",
}
# Significand bits (with the implicit bit).
PRECISION = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8, torch.float64: 53}


def measure_dtype(context_dtype: torch.dtype, autocast: Optional[torch.dtype], result: torch.dtype) -> torch.dtype:
    """The dtype accuracy is measured in: the narrowest of the context's inputs, its autocast
    dtype and the result (a float32 result of float16 arithmetic has float16's accuracy)."""
    candidates = [d for d in (context_dtype, autocast, result) if d in PRECISION]
    return min(candidates, key=lambda d: (PRECISION[d], d != torch.float16)) if candidates else result


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def dtype_from_name(name: str) -> torch.dtype:
    for dt, n in DTYPE_NAMES.items():
        if n == name:
            return dt
    aliases = {"half": torch.float16, "fp16": torch.float16, "bf16": torch.bfloat16,
               "float": torch.float32, "fp32": torch.float32, "double": torch.float64}
    if name in aliases:
        return aliases[name]
    raise ValueError(f"unknown dtype {name!r}")


def accuracy_failure_bits(dtype: torch.dtype) -> float:
    """An original "fails" on accuracy when it loses at least three quarters of its
    significand bits (18 in float32, 9 in float16, 6 in bfloat16): compound expressions in
    half precision routinely lose a few bits; this is the loss of the value itself."""
    return math.ceil(3 * PRECISION[dtype] / 4)


def agreement_bits(dtype: torch.dtype) -> float:
    """The fix "agrees" with the float64 reference when its error is within this many bits
    (log2 of the number of floats of `dtype` between them) at 99% of the points checked."""
    return math.ceil(PRECISION[dtype] / 2)


def accurate_bits(dtype: torch.dtype) -> float:
    """A result this close to the reference counts as accurate (for accuracy witnesses)."""
    return math.ceil(PRECISION[dtype] / 4)


@dataclass(frozen=True)
class Context:
    device: str
    dtype: torch.dtype  # what the inputs are
    autocast: Optional[torch.dtype] = None  # autocast(device, dtype=...) around the call

    @property
    def name(self) -> str:
        if self.autocast is None:
            return dtype_name(self.dtype)
        return f"{dtype_name(self.dtype)} in autocast({dtype_name(self.autocast)})"

    @property
    def short(self) -> str:
        if self.autocast is None:
            return dtype_name(self.dtype)
        return f"{dtype_name(self.dtype)}+autocast-{dtype_name(self.autocast)}"

    def autocast_manager(self):
        if self.autocast is None:
            return _Null()
        return torch.autocast(device_type=self.device, dtype=self.autocast)

    def describe(self) -> str:
        where = f"on {self.device}"
        if self.autocast is None:
            return f"in {dtype_name(self.dtype)} {where}"
        return f"with {dtype_name(self.dtype)} inputs under autocast({dtype_name(self.autocast)}) {where}"

    def to_json(self):
        return {
            "device": self.device,
            "dtype": dtype_name(self.dtype),
            "autocast": dtype_name(self.autocast) if self.autocast is not None else None,
        }


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def resolve_device(requested: str) -> str:
    """`auto` is CUDA when available, else the CPU. `cuda` without a GPU is an error."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: no CUDA device is available to torch")
    return requested


def contexts_for(device: str) -> List[Context]:
    """float32, float16 and bfloat16 inputs; float32 inputs under autocast to float16 and to
    bfloat16 (mixed precision as written in training loops); half inputs under autocast
    too (a `.half()` model run inside autocast)."""
    out = [Context(device, dt) for dt in DTYPES]
    for half in (torch.float16, torch.bfloat16):
        out.append(Context(device, torch.float32, half))
    for half in (torch.float16, torch.bfloat16):
        out.append(Context(device, half, half))
    return out
