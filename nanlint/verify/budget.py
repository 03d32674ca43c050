"""A memory and time budget per finding: costs bounded before an op runs, a watchdog after.

Whitelisted ops are pure, but not all are cheap: `einsum` of three `arange(4096)`s asks for
68 billion elements, a chain of products of a 4096 x 4096 `outer` takes minutes. Before an
op that can grow its output (products, broadcasting, creation from sizes, `repeat`) runs,
its result size and multiply-adds are estimated from the argument shapes and the op is
refused when they exceed the budget; after every op, the result size and the clock are
checked again (what the estimate does not know, such as `cat` of many tensors).

Under `vmap` an op sees one point's shapes, so the limits are divided by the number of
points evaluated at once (`scale`). Exceeding the budget raises `BudgetExceeded`, which
ends the finding's verification with a refusal (never an internal error).
"""

from __future__ import annotations

import math
import time
from typing import Any, Mapping, Optional, Sequence

# Elements one op may produce, all points together (float64: 8 bytes each).
MAX_RESULT_ELEMENTS = 4_000_000
# Elements all ops of one evaluation may produce together (autograd keeps most of them).
MAX_TOTAL_ELEMENTS = 40_000_000
# Multiply-adds one op may do (products, einsum), all points together.
MAX_OP_FLOPS = 400_000_000
# Wall-clock seconds one finding may take, all contexts together.
MAX_SECONDS = 20.0
# Varying inputs a probe may have (each is combined with the others).
MAX_INPUTS = 16


class BudgetExceeded(Exception):
    """The finding would exceed its memory or time budget: it is refused, not an error."""


class Budget:
    def __init__(self, seconds: float = MAX_SECONDS, result_elements: int = MAX_RESULT_ELEMENTS,
                 total_elements: int = MAX_TOTAL_ELEMENTS, flops: int = MAX_OP_FLOPS):
        self.deadline: Optional[float] = None  # set by arm(): the finding's clock starts
        self.seconds = seconds
        self.result_elements = result_elements
        self.total_elements = total_elements
        self.flops = flops
        self.scale = 1  # points per op call (vmap: the batch the op does not see)
        self.produced = 0  # elements produced in the current evaluation

    def arm(self) -> "Budget":
        self.deadline = time.perf_counter() + self.seconds
        return self

    def start(self, scale: int) -> None:
        """A new evaluation of an expression on `scale` points at once (vmap), or 1."""
        self.scale = max(1, int(scale))
        self.produced = 0
        self.check_time()

    def check_time(self) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise BudgetExceeded(f"over the time budget of {self.seconds:g} s for one finding")

    def before(self, what: str, elements: Optional[int], flops: Optional[int] = None) -> None:
        """Refuse an op whose estimated result or work is too large (nothing allocated yet)."""
        self.check_time()
        if elements is not None and elements * self.scale > self.result_elements:
            raise BudgetExceeded(f"{what} would produce {_count(elements * self.scale)} elements "
                                 f"(budget {_count(self.result_elements)})")
        if flops is not None and flops * self.scale > self.flops:
            raise BudgetExceeded(f"{what} would take {_count(flops * self.scale)} multiply-adds "
                                 f"(budget {_count(self.flops)})")

    def after(self, what: str, value: Any) -> None:
        """The watchdog: the result's size, the evaluation's total, the clock."""
        n = _numel(value)
        if n:
            if n * self.scale > self.result_elements:
                raise BudgetExceeded(f"{what} produced {_count(n * self.scale)} elements "
                                     f"(budget {_count(self.result_elements)})")
            self.produced += n * self.scale
            if self.produced > self.total_elements:
                raise BudgetExceeded(f"the expression produced {_count(self.produced)} elements in "
                                     f"one evaluation (budget {_count(self.total_elements)})")
        self.check_time()


def _count(n: int) -> str:
    for unit, size in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return str(n)


def _numel(value: Any) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return int(value.numel())
    if isinstance(value, (tuple, list)):
        return sum(_numel(v) for v in value)
    values = getattr(value, "values", None)  # torch.return_types (max, sort, ...)
    if isinstance(values, torch.Tensor):
        return int(values.numel()) * 2
    return 0


def _shape(v: Any) -> Optional[tuple]:
    import torch

    if isinstance(v, torch.Tensor):
        return tuple(v.shape)
    if isinstance(v, (int, float, bool)):
        return ()
    return None


def broadcast_elements(values: Sequence[Any]) -> Optional[int]:
    """Elements of the broadcast of the tensors among `values` (None if they do not broadcast)."""
    shapes = [s for s in (_shape(v) for v in values) if s is not None]
    if not shapes:
        return None
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(1, ndim + 1):
        sizes = {s[-i] for s in shapes if len(s) >= i}
        big = max(sizes)
        if len(sizes - {1, big}) > 0:
            return None  # torch raises a shape error itself, cheaply
        out.append(big)
    return math.prod(out) if out else 1


def sizes_product(args: Sequence[Any]) -> Optional[int]:
    """Elements of `torch.zeros(2, 3)`, `torch.zeros((2, 3))`, `x.repeat(1, 4)` style sizes."""
    flat = list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else list(args)
    try:
        import torch

        flat = list(flat[0]) if len(flat) == 1 and isinstance(flat[0], torch.Size) else flat
    except ImportError:  # pragma: no cover
        pass
    total = 1
    for s in flat:
        if isinstance(s, bool) or not isinstance(s, int):
            return None
        total *= max(s, 0)
    return total


def estimate(short: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple:
    """(elements, multiply-adds) an op will produce/do, or None where not known up front.
    `short` is the op's name without module; `args` are in function form (receiver first)."""
    import torch

    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if short in ("matmul", "mm", "bmm", "mv", "dot", "inner", "vdot", "__matmul__") and len(tensors) >= 2:
        a, b = tensors[0], tensors[1]
        if a.dim() == 0 or b.dim() == 0:
            return broadcast_elements([a, b]), None
        k = a.shape[-1]
        cols = b.shape[-1] if b.dim() > 1 else 1
        batch = max(math.prod(a.shape[:-2]) if a.dim() > 2 else 1, math.prod(b.shape[:-2]) if b.dim() > 2 else 1)
        rows = a.shape[-2] if a.dim() > 1 else 1
        out = batch * rows * cols
        return out, out * k
    if short in ("outer", "ger") and len(tensors) >= 2:
        n = tensors[0].numel() * tensors[1].numel()
        return n, n
    if short == "einsum":
        return _einsum(args)
    if short in ("cdist",) and len(tensors) >= 2:
        a, b = tensors[0], tensors[1]
        out = math.prod(a.shape[:-1]) * b.shape[-2] if a.dim() >= 2 and b.dim() >= 2 else None
        return out, (out * a.shape[-1]) if out is not None else None
    if short in ("kron",) and len(tensors) >= 2:
        n = tensors[0].numel() * tensors[1].numel()
        return n, n
    if short in ("repeat", "tile") and tensors:
        reps = sizes_product(args[1:])
        return (reps * tensors[0].numel() if reps is not None else None), None
    if short in ("expand",) and tensors:
        return sizes_product(args[1:]), None
    if short in ("broadcast_to",) and tensors:
        return sizes_product(args[1:2]) if len(args) > 1 else None, None
    if short in ("new_zeros", "new_ones", "new_empty") and tensors:
        return sizes_product(args[1:] or [kwargs.get("size", ())]), None
    if short == "new_full" and tensors:
        return sizes_product(args[1:2] or [kwargs.get("size", ())]), None
    if short == "repeat_interleave" and tensors:
        reps = args[1] if len(args) > 1 else kwargs.get("repeats")
        if isinstance(reps, int) and not isinstance(reps, bool):
            return tensors[0].numel() * max(reps, 0), None
        if isinstance(reps, torch.Tensor) and not reps.is_floating_point():
            try:
                return int(reps.clamp(min=0).sum()) * max(1, tensors[0].numel() // max(1, reps.numel())), None
            except RuntimeError:  # inside vmap: the total is per point
                return None, None
        return None, None
    if short == "one_hot" and tensors:
        n = args[1] if len(args) > 1 else kwargs.get("num_classes")
        return (tensors[0].numel() * n if isinstance(n, int) and n > 0 else None), None
    if short in ("zeros", "ones", "empty", "rand", "randn", "full", "randint"):
        sizes = args[:1] if short == "full" else args
        if short == "randint":
            sizes = [a for a in args if isinstance(a, (tuple, list))][:1]
        return sizes_product(sizes if sizes else [kwargs.get("size", ())]), None
    if short in ("linspace", "logspace"):
        steps = args[2] if len(args) > 2 else kwargs.get("steps")
        return (steps if isinstance(steps, int) and not isinstance(steps, bool) else None), None
    if short == "eye":
        n = args[0] if args else None
        m = args[1] if len(args) > 1 else n
        if isinstance(n, int) and isinstance(m, int):
            return n * m, None
        return None, None
    if short == "arange":
        nums = [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
        if len(nums) == 1:
            return int(abs(nums[0])) + 1, None
        if len(nums) >= 2:
            step = nums[2] if len(nums) > 2 and nums[2] else 1
            return int(abs((nums[1] - nums[0]) / step)) + 1, None
        return None, None
    if short in ("cartesian_prod",) and tensors:
        return math.prod(t.numel() for t in tensors) * len(tensors), None
    return broadcast_elements(args), None


def _einsum(args: Sequence[Any]) -> tuple:
    import torch

    if not args or not isinstance(args[0], str):
        return None, None
    equation = args[0].replace(" ", "")
    operands = [a for a in args[1:] if isinstance(a, torch.Tensor)]
    lhs, _, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands) or "." in equation:
        return None, None
    sizes = {}
    for term, t in zip(terms, operands):
        if len(term) != t.dim():
            return None, None
        for letter, n in zip(term, t.shape):
            sizes[letter] = max(sizes.get(letter, 1), int(n))
    out_letters = rhs if "->" in equation else "".join(sorted(c for c in sizes if lhs.count(c) == 1))
    out = math.prod(sizes.get(c, 1) for c in out_letters)
    work = math.prod(sizes.values())
    return out, work
