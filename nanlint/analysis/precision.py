"""Precision facts: autocast regions, evident half precision, no-grad regions.

The engine calls `enter`/`leave` for every `with` block and function as it walks the file,
so a rule can ask at any node: am I inside autocast (which device, which dtype)? is this
value evidently float16/bfloat16? are gradients off here?
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Set

import libcst as cst

from ..core.ops import split_args

_AUTOCAST = {
    "torch.autocast": None,  # device from the first argument / device_type=
    "torch.amp.autocast": None,
    "torch.amp.autocast_mode.autocast": None,
    "torch.cuda.amp.autocast": "cuda",
    "torch.cuda.amp.autocast_mode.autocast": "cuda",
    "torch.cpu.amp.autocast": "cpu",
    "torch.cpu.amp.autocast_mode.autocast": "cpu",
}
HALF_DTYPES = {
    "torch.float16": "float16",
    "torch.half": "float16",
    "torch.bfloat16": "bfloat16",
    "torch.HalfTensor": "float16",
    "torch.cuda.HalfTensor": "float16",
    "torch.BFloat16Tensor": "bfloat16",
    "torch.cuda.BFloat16Tensor": "bfloat16",
}
# Tensor methods whose result has the receiver's dtype (a view, a copy, a selection).
_SAME_DTYPE_METHODS = {
    "view", "reshape", "flatten", "contiguous", "transpose", "permute", "squeeze",
    "unsqueeze", "clone", "detach", "t", "expand", "expand_as", "view_as", "reshape_as",
    "narrow", "select", "gather", "index_select", "masked_fill", "repeat", "flip", "roll",
    "cuda", "cpu",
}
_HALF_STRINGS = {"'float16'": "float16", '"float16"': "float16", "'half'": "float16",
                 '"half"': "float16", "'bfloat16'": "bfloat16", '"bfloat16"': "bfloat16"}


@dataclass(frozen=True)
class AutocastRegion:
    device: Optional[str]  # "cuda", "cpu", or None when not evident
    dtype: Optional[str]  # "float16", "bfloat16", or None for the device default
    node: cst.CSTNode

    @property
    def effective_dtype(self) -> Optional[str]:
        if self.dtype is not None:
            return self.dtype
        if self.device == "cuda":
            return "float16"
        if self.device == "cpu":
            return "bfloat16"
        return None


@dataclass(frozen=True)
class TrainingPrecision:
    """The half precision a whole project trains in, and why nanlint thinks so: the config
    says it, or a line of the project does (`project_precision`). Messages cite `reason`."""

    dtype: str  # "float16" / "bfloat16"
    reason: str
    # "all": every activation is half (the config says so, a model made `.half()`);
    # "matmul": mixed precision (autocast, a GradScaler): matmul-family outputs are half,
    # while autocast runs exp, log, softmax and reductions in float32.
    scope: str = "all"

    @staticmethod
    def from_config(value: Optional[str]) -> Optional["TrainingPrecision"]:
        """The config's `precision` (as `config.PRECISIONS` maps it): "float32" is none."""
        if value in (None, "float32"):
            return None
        short = {"float16": "fp16", "bfloat16": "bf16"}.get(value, value)
        return TrainingPrecision(value, f'`precision = "{short}"` in the config')


class Precision:
    def __init__(self, ctx, configured=None) -> None:
        self.ctx = ctx
        # The project trains in half precision (the config or another file says so), so
        # half-only hazards are reported even where the file itself shows no half dtype.
        # `configured`: a TrainingPrecision, or the config's value as a string.
        if not isinstance(configured, TrainingPrecision):
            configured = TrainingPrecision.from_config(configured)
        # The half dtype of the project's matmul outputs (model activations), and why.
        self.configured: Optional[str] = configured.dtype if configured is not None else None
        self.configured_reason: Optional[str] = configured.reason if configured is not None else None
        # The half dtype every value of the project may have (not under mixed precision).
        self.configured_everywhere: Optional[str] = (
            configured.dtype if configured is not None and configured.scope == "all" else None)
        self.autocast: List[AutocastRegion] = []
        self._pushed: List[tuple] = []
        # Innermost autocast state: a region, or None for `autocast(enabled=False)` nested
        # inside one (which turns autocast off again). `autocast` above keeps only regions.
        self._autocast_state: List[Optional[AutocastRegion]] = []
        # Names and attribute chains made half precision somewhere in the file
        # (`model.half()`, `self.net = Net().half()`, `model.to(torch.float16)`).
        self.half_modules: Set[str] = set()

    # ------------------------------------------------------------------ regions
    def enter(self, node: cst.CSTNode) -> None:
        pushed_autocast = 0
        pushed_disabled = 0
        for call in _region_calls(node):
            call = self._held_region(call)
            region = self.autocast_region(call)
            if region is not None:
                self.autocast.append(region)
                self._autocast_state.append(region)
                pushed_autocast += 1
            elif self._disables_autocast(call):
                self._autocast_state.append(None)
                pushed_disabled += 1
        self._pushed.append((pushed_autocast, pushed_disabled))

    def leave(self, node: cst.CSTNode) -> None:
        pushed_autocast, pushed_disabled = self._pushed.pop()
        for _ in range(pushed_autocast):
            self.autocast.pop()
        for _ in range(pushed_autocast + pushed_disabled):
            self._autocast_state.pop()

    @property
    def in_autocast(self) -> Optional[AutocastRegion]:
        """The innermost autocast region in force here; None outside autocast and inside a
        nested `autocast(enabled=False)`."""
        return self._autocast_state[-1] if self._autocast_state else None

    @property
    def upcasts_softmax_math(self) -> bool:
        """Inside an autocast region that computes exp/log_softmax/sum in float32 (CUDA, or a
        device we cannot tell: assumed to upcast, to stay quiet); CPU autocast does not."""
        region = self.in_autocast
        return region is not None and region.device != "cpu"

    def _held_region(self, expr: cst.BaseExpression) -> cst.BaseExpression:
        """For `with ctx:`, the autocast call a local `ctx` holds: `ctx = torch.autocast(...)`,
        or nanoGPT's `ctx = nullcontext() if cpu else torch.amp.autocast(...)` (taken as
        autocast: a region that may be one)."""
        if not isinstance(expr, cst.Name):
            return expr
        value = self.ctx.value_of(expr)
        if isinstance(value, cst.IfExp):
            for branch in (value.body, value.orelse):
                if self.autocast_region(branch) is not None:
                    return branch
            return expr
        return value if isinstance(value, cst.Call) else expr

    def _disables_autocast(self, call: cst.BaseExpression) -> bool:
        """`torch.autocast(..., enabled=False)` (any spelling): autocast is off inside."""
        if not isinstance(call, cst.Call):
            return False
        full = self.ctx.qualname(call.func)
        if full not in _AUTOCAST and not (
            full is None and isinstance(call.func, cst.Attribute) and call.func.attr.value == "autocast"
        ):
            return False
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "enabled":
                return isinstance(arg.value, cst.Name) and arg.value.value == "False"
        return False

    def half_context(self, expr: Optional[cst.BaseExpression] = None) -> Optional[str]:
        """The half dtype code here runs in, where evident: `expr`'s own dtype, an autocast
        region, or the configured project precision. None: nothing shows half precision."""
        if expr is not None:
            dtype = self.half_dtype(expr)
            if dtype:
                return dtype
        region = self.in_autocast
        if region is not None and region.effective_dtype:
            return region.effective_dtype
        return self.configured_everywhere

    def autocast_region(self, call: cst.BaseExpression) -> Optional[AutocastRegion]:
        if not isinstance(call, cst.Call):
            return None
        full = self.ctx.qualname(call.func)
        name = full
        if full is None:
            # `accelerator.autocast()`, `self.autocast_ctx()`: a method named autocast.
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == "autocast":
                name = "autocast"
            else:
                return None
        elif full not in _AUTOCAST:
            return None
        split = split_args(call.args)
        positional, keywords = split if split is not None else ([], {})
        enabled = keywords.get("enabled")
        if enabled is not None and isinstance(enabled, cst.Name) and enabled.value == "False":
            return None
        device = _AUTOCAST.get(name) if name in _AUTOCAST else None
        if device is None and name in _AUTOCAST:
            dev = keywords.get("device_type") or (positional[0] if positional else None)
            if isinstance(dev, cst.SimpleString):
                device = dev.evaluated_value.split(":")[0]
        dtype_expr = keywords.get("dtype")
        if dtype_expr is None and name in ("torch.autocast", "torch.amp.autocast") and len(positional) > 1:
            dtype_expr = positional[1]
        dtype = self.dtype_of(dtype_expr) if dtype_expr is not None else None
        return AutocastRegion(device=device, dtype=dtype, node=call)

    # ------------------------------------------------------------------ dtypes
    def dtype_of(self, expr: Optional[cst.BaseExpression]) -> Optional[str]:
        """"float16"/"bfloat16" where `expr` names a half dtype, else None."""
        if expr is None:
            return None
        full = self.ctx.qualname(expr)
        if full in HALF_DTYPES:
            return HALF_DTYPES[full]
        if isinstance(expr, cst.SimpleString):
            return _HALF_STRINGS.get(expr.value)
        return None

    def half_dtype(self, expr: cst.BaseExpression, depth: int = 4) -> Optional[str]:
        """The half dtype `expr` evidently has (float16 or bfloat16), else None.

        Evidence: `.half()`/`.bfloat16()`, `.to(torch.float16)`, `.type(torch.HalfTensor)`,
        a factory with `dtype=torch.float16`, a local name assigned from one of those, or the
        output of a module made half in this file (`model.half()` then `model(x)`)."""
        expr, env = self.ctx.resolve(expr, None, depth)
        return self._half_dtype(expr, env, depth)

    def _half_dtype(self, expr, env, depth) -> Optional[str]:
        if depth <= 0:
            return None
        if isinstance(expr, cst.Name):
            expr, env = self.ctx.resolve(expr, env, 1)
            if isinstance(expr, cst.Name):
                return None
        if isinstance(expr, cst.Subscript):
            # `logits[:, -1]`, `model(x)[0]`: a selection keeps the dtype.
            return self._half_dtype(expr.value, env, depth - 1)
        if not isinstance(expr, cst.Call):
            return None
        func = expr.func
        split = split_args(expr.args)
        if split is None:
            return None
        positional, keywords = split
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method == "half" and not positional:
                return "float16"
            if method == "bfloat16" and not positional:
                return "bfloat16"
            if method in ("to", "type"):
                for candidate in positional + [keywords.get("dtype")]:
                    dtype = self.dtype_of(candidate) if candidate is not None else None
                    if dtype:
                        return dtype
                if method == "to" and "dtype" not in keywords and _device_only(positional):
                    # `x.half().to(device)`, `.to("cuda")`: a move keeps the dtype.
                    return self._half_dtype(func.value, env, depth - 1)
                return None
            if method in ("float", "double", "float32"):
                return None
            if method in _SAME_DTYPE_METHODS:
                # `logits.view(-1, C)`, `lp.gather(1, y)`: same dtype as the receiver.
                return self._half_dtype(func.value, env, depth - 1)
        dtype = self.dtype_of(keywords.get("dtype"))
        if dtype:
            return dtype
        # A module made half in this file, called: its output is half.
        callee = _chain(func)
        if callee is not None and callee in self.half_modules:
            return "float16"
        return None

    def note_statement(self, node: cst.CSTNode) -> None:
        """Record modules made half precision by a statement (`model.half()`)."""
        if isinstance(node, cst.Expr) and isinstance(node.value, cst.Call):
            call = node.value
            if isinstance(call.func, cst.Attribute) and self._converts_to_half(call):
                target = _chain(call.func.value)
                if target:
                    self.half_modules.add(target)
            elif isinstance(call.func, cst.Attribute) and self._converts_to_float(call):
                # `model.float()` after `model.half()`: float32 again.
                self.half_modules.discard(_chain(call.func.value) or "")
        elif isinstance(node, (cst.Assign, cst.AnnAssign)):
            value = node.value
            targets = (
                [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            )
            if isinstance(value, cst.Call) and self._converts_to_half_chain(value):
                for t in targets:
                    chain = _chain(t)
                    if chain:
                        self.half_modules.add(chain)
            else:
                # Rebinding (`model = model.float()`, `model = Net()`) ends the evidence;
                # `model = model.to(device)` / `.cuda()` / `.eval()` keeps it.
                for t in targets:
                    chain = _chain(t)
                    if chain in self.half_modules and not self._same_module(value, chain):
                        self.half_modules.discard(chain)

    def _same_module(self, value: Optional[cst.BaseExpression], chain: str) -> bool:
        node = value
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if self._converts_to_float(node):
                return False
            node = node.func.value
        return node is not value and _chain(node) == chain

    def _converts_to_float(self, call: cst.Call) -> bool:
        method = call.func.attr.value  # type: ignore[union-attr]
        if method in ("float", "double") and not call.args:
            return True
        return method == "to" and any(
            self.ctx.qualname(a.value) in ("torch.float32", "torch.float", "torch.float64", "torch.double")
            for a in call.args
        )

    def _converts_to_half(self, call: cst.Call) -> bool:
        if not isinstance(call.func, cst.Attribute):
            return False
        method = call.func.attr.value
        if method in ("half", "bfloat16") and not call.args:
            return True
        if method == "to":
            return any(self.dtype_of(a.value) for a in call.args)
        return False

    def _converts_to_half_chain(self, call: cst.Call) -> bool:
        """`Net().cuda().half()`, `model.to(device).half()`: any link converts."""
        node: cst.BaseExpression = call
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if self._converts_to_half(node):
                return True
            node = node.func.value
        return False


def _device_only(positional) -> bool:
    """`.to()` arguments that can only be a device: a string, or a name that says device."""
    for arg in positional:
        if isinstance(arg, cst.SimpleString):
            continue
        chain = _chain(arg)
        if chain is not None and "device" in chain.split(".")[-1].lower():
            continue
        return False
    return True


def _chain(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = _chain(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


def _region_calls(node: cst.CSTNode):
    if isinstance(node, cst.With):
        for item in node.items:
            yield item.item
    elif isinstance(node, cst.FunctionDef):
        for deco in node.decorators:
            yield deco.decorator
