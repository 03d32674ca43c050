"""Built-in scenarios for statement-level findings (probe kind "harness").

Each harness drives a tiny model (a 4x4 linear layer, seeded) into the failure the rule
describes, once in the original order or form and once as fixed, and measures what a
training run would see: the size of the parameter update, whether parameters or the loss
stay finite. Nothing from the linted code is run: only the harness's name and the
parameters the linter read from the source (`max_norm=1.0`, `eps=1e-8`) are used.

Harnesses: clip-after-step, clip-without-unscale, step-bypasses-scaler, adam-eps-half,
cross-entropy-half, cross-entropy-all-ignored.
"""

from __future__ import annotations

import copy
import inspect
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch
import torch.nn.functional as F

from . import contexts as C
from .evaluate import single_threaded
from .verdict import (
    CONFIRMED,
    FIX_FAILED,
    NOT_REPRODUCED,
    Verification,
    Witness,
    fmt_number,
    not_verifiable,
)

LR = 0.1
SCALE = 2.0 ** 16


@dataclass
class Scenario:
    """What the report shows for a harness: code before/after and measured rows."""

    name: str
    params: Dict[str, Any]
    original_code: str
    fixed_code: str
    rows: List[Dict[str, Any]] = field(default_factory=list)  # metric, original, fix, expected
    # Where it ran, as the expression contexts state it: device, dtype (of the parameters or
    # logits), autocast (the dtype autocast runs in, or None).
    setting: Dict[str, Any] = field(default_factory=dict)

    def add(self, metric: str, original: Any, fix: Any, expected: str = "") -> None:
        self.rows.append({"metric": metric, "original": _plain(original), "fix": _plain(fix),
                          "expected": expected})

    def set(self, device: str, dtype: torch.dtype, autocast: Optional[torch.dtype] = None) -> None:
        self.setting = {"device": device, "dtype": C.dtype_name(dtype),
                        "autocast": C.dtype_name(autocast) if autocast is not None else None}

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "params": self.params, "original_code": self.original_code,
                "fixed_code": self.fixed_code, "rows": self.rows, "setting": self.setting}


def _plain(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        v = v.item()
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return float(f"{v:.6g}")
    return v


def _number(params: Mapping[str, Any], key: str, default: float) -> Tuple[float, bool]:
    """A numeric parameter, and whether it came from the source."""
    v = params.get(key)
    if isinstance(v, bool) or v is None:
        return default, False
    try:
        f = float(v)
    except (TypeError, ValueError):
        return default, False
    if not math.isfinite(f) or f <= 0:
        return default, False
    return f, True


def _model(device: str, dtype: torch.dtype = torch.float32) -> torch.nn.Linear:
    g = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(4, 4)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(4, 4, generator=g) * 0.5)
        lin.bias.copy_(torch.randn(4, generator=g) * 0.1)
    return lin.to(device=device, dtype=dtype)


def _data(device: str, scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 4, generator=g) * scale
    y = torch.randn(16, 4, generator=g)
    return x.to(device), y.to(device)


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().float().reshape(-1) for p in model.parameters()])


def _clip(model, kind: str, limit: float) -> float:
    if kind == "value":
        torch.nn.utils.clip_grad_value_(model.parameters(), limit)
        return limit
    return float(torch.nn.utils.clip_grad_norm_(model.parameters(), limit))


def _update_size(delta: torch.Tensor, kind: str) -> float:
    return float(delta.abs().max()) if kind == "value" else float(delta.norm())


def _half_for(device: str) -> torch.dtype:
    return torch.float16


def _verdict(original_fails: bool, fix_holds: bool, witness: Witness, fix_witness: Witness,
             scenario: Scenario, device: str, reason_ok: str, reason_not: str) -> Verification:
    data = scenario.to_json()
    if not fix_holds:
        return Verification(FIX_FAILED, "the fixed order/form fails too", device=device,
                            witness=witness if original_fails else None, fix_witness=fix_witness,
                            harness=data)
    if original_fails:
        return Verification(CONFIRMED, reason_ok, device=device, witness=witness, harness=data)
    return Verification(NOT_REPRODUCED, reason_not, device=device, harness=data)


def _harness_witness(text: str, device: str, dtype: str = "float32", which: str = "original",
                     inputs: Optional[Dict[str, Any]] = None) -> Witness:
    return Witness(which=which, kind="harness", where="training step", inputs=inputs or {},
                   dtype=dtype, device=device, text=text)


# ----------------------------------------------------------------------------- harnesses


# Adaptive torch.optim classes with an `eps` (adam-eps-half builds them on half parameters).
_OPTIMIZERS = {"Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad"}
# torch.optim classes the clip-after-step harness can build as the code does.
_STEP_OPTIMIZERS = _OPTIMIZERS | {"SGD", "Adadelta", "ASGD", "Rprop"}
# The clip-after-step scenario: ordinary steps with gradients well inside the limit (the clip
# never acts on them), then one batch whose gradient is far past it, then ordinary steps
# again. An adaptive optimizer needs the ordinary steps to reach its steady state: early on,
# its bias correction shrinks a spike's step and hides what the spike does to its state.
_WARM_STEPS = 300
_AFTER_STEPS = 20  # ordinary steps after the spike, over which its effect is measured
_ORDINARY = 0.5  # each ordinary step's gradient size, as a share of the clip's limit
_SPIKE = 100.0  # the spike's gradient size, as a multiple of the limit
# The clip before the step must shrink the spike's effect to at most 1/_HARM of what it is
# without a clip (Rprop, which reads only the gradient's sign, is the optimizer it cannot help).
_HARM = 1.5


def _optimizer_from_code(params: Mapping[str, Any]) -> Tuple[str, float, Optional[str]]:
    """(torch.optim class name, lr, why the harness runs something else or None): the
    optimizer the linted code builds where it is a torch.optim class, else SGD lr=0.1."""
    qualname = str(params.get("optimizer") or "")
    name = qualname.rsplit(".", 1)[-1]
    if not qualname:
        return "SGD", LR, "the optimizer the code steps is not built where nanlint could read it"
    if not qualname.startswith("torch.optim.") or name not in _STEP_OPTIMIZERS:
        return "SGD", LR, f"the code's optimizer, `{qualname}`, is not a torch.optim class the harness builds"
    lr, given = _number(params, "lr", 0.0)
    if not given or lr <= 0:
        default = inspect.signature(getattr(torch.optim, name)).parameters.get("lr")
        lr = float(default.default) if default is not None and isinstance(default.default, (int, float)) else LR
    return name, lr, None


def _grads(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def clip_after_step(params: Mapping[str, Any], device: str) -> Verification:
    kind = "value" if str(params.get("clip") or "norm") == "value" else "norm"
    limit, given = _number(params, "max_norm", 1.0)
    if kind == "value":
        limit, given = _number(params, "clip_value", limit) if "clip_value" in params else (limit, given)
    name, lr, generic = _optimizer_from_code(params)
    clip_call = ("torch.nn.utils.clip_grad_value_(model.parameters(), {})" if kind == "value"
                 else "torch.nn.utils.clip_grad_norm_(model.parameters(), {})").format(fmt_number(limit))
    build = f"optimizer = torch.optim.{name}(model.parameters(), lr={fmt_number(lr)})\n"
    scenario = Scenario(
        "clip-after-step", dict(params),
        original_code=f"{build}...\nloss.backward()\noptimizer.step()\n{clip_call}",
        fixed_code=f"{build}...\nloss.backward()\n{clip_call}\noptimizer.step()",
    )
    scenario.set(device, torch.float32)
    # A linear teacher with noise: fresh batches every step, so the gradients never vanish.
    g = torch.Generator().manual_seed(1)
    teacher = torch.randn(4, 4, generator=g)
    batches = []
    for _ in range(_WARM_STEPS + 1 + _AFTER_STEPS):
        x = torch.randn(16, 4, generator=g)
        batches.append((x.to(device), (x @ teacher.T + 0.3 * torch.randn(16, 4, generator=g)).to(device)))
    spike_x = torch.randn(16, 4, generator=g) * 10  # an outlier batch
    spike = (spike_x.to(device), (spike_x @ teacher.T * -3).to(device))

    def backward(model: torch.nn.Module, batch, size: float) -> None:
        """The batch's gradient, scaled (as a loss scale would) to `size`: its norm, or its
        largest element for a value clip."""
        x, y = batch
        F.mse_loss(model(x), y).backward()
        factor = size / max(_update_size(_grads(model), kind), 1e-30)
        for p in model.parameters():
            p.grad.mul_(factor)

    def run(model, opt, steps, clip: Optional[str], spike_first: bool) -> Tuple[float, float]:
        """Train `steps` steps from this state; the first is the spike where `spike_first`.
        Returns the first step's update size and the mean of the others'. `clip` is None,
        "after" or "before" the step; every step ends with zero_grad, as a training loop does."""
        sizes = []
        for i, batch in enumerate(steps):
            before = _flat(model)
            is_spike = spike_first and i == 0
            backward(model, spike if is_spike else batch, limit * (_SPIKE if is_spike else _ORDINARY))
            if clip == "before":
                _clip(model, kind, limit)
            opt.step()
            if clip == "after":
                _clip(model, kind, limit)
            opt.zero_grad()
            sizes.append(_update_size(_flat(model) - before, kind))
        return sizes[0], sum(sizes[1:]) / max(len(sizes) - 1, 1)

    model = _model(device)
    opt = getattr(torch.optim, name)(model.parameters(), lr=lr)
    run(model, opt, batches[:_WARM_STEPS], None, False)
    tail = batches[_WARM_STEPS:]

    def branch(clip: Optional[str], spike_first: bool = True) -> Tuple[Tuple[float, float], torch.Tensor]:
        m, o = copy.deepcopy((model, opt))
        sizes = run(m, o, tail, clip, spike_first)
        return sizes, _flat(m)

    _, calm_end = branch(None, spike_first=False)
    _, unclipped_end = branch(None)
    (orig_step, orig_later), orig_end = branch("after")
    (fix_step, fix_later), fix_end = branch("before")
    unclipped = _update_size(unclipped_end - calm_end, kind)
    orig_drift = _update_size(orig_end - calm_end, kind)
    fix_drift = _update_size(fix_end - calm_end, kind)

    size = "max |g|" if kind == "value" else "norm"
    setting = "clip_value" if kind == "value" else "max_norm"
    what = "largest change" if kind == "value" else "distance"  # of the weights from the spike-free run
    step_what = "largest update" if kind == "value" else "update norm"
    ordinary, spike_size = limit * _ORDINARY, limit * _SPIKE
    drift_metric = f"{what} from the run without the spike, {_AFTER_STEPS} steps after it"
    scenario.add(f"gradient {size} of each ordinary step", ordinary, ordinary)
    scenario.add(f"gradient {size} of the spike", spike_size, spike_size)
    scenario.add(f"{drift_metric}, without any clip", unclipped, unclipped)
    bound = lr * limit
    sgd = name in ("SGD", "ASGD")  # a step of lr·gradient: the clip bounds it by lr·limit
    scenario.add(f"the spike step's {step_what}", orig_step, fix_step,
                 f"≤ lr·{setting} = {fmt_number(bound)}" if sgd else "")
    scenario.add(drift_metric, orig_drift, fix_drift, f"≤ {fmt_number(unclipped / _HARM)}, two thirds of the {what} without a clip")
    # The claim: the clip after the step changes nothing, while one before it would bound the
    # spike's effect on the weights.
    no_effect = abs(orig_drift - unclipped) <= 1e-6 * max(unclipped, 1e-30)
    bounded = fix_drift * _HARM <= unclipped and (not sgd or fix_step <= bound * 1.01)
    run_as = (f"{name} lr={fmt_number(lr)}, as the code builds it" if generic is None
              else f"a generic harness, SGD lr={fmt_number(lr)}: {generic}")
    note = "" if given else f"; {setting} not a literal in the source: {fmt_number(limit)} used"
    if orig_step > fix_step:
        own = (f"the spike step's own {step_what}: {fmt_number(orig_step)} vs {fmt_number(fix_step)}"
               + (f" (≤ lr·{setting})" if sgd else ""))
    else:
        own = (f"the spike step's own {step_what} is smaller ({fmt_number(orig_step)} vs {fmt_number(fix_step)}), "
               f"but {name}'s state took in the whole spike: the {_AFTER_STEPS} steps after it average "
               f"{fmt_number(orig_later)} vs {fmt_number(fix_later)}")
    where = " (the largest change of one weight)" if kind == "value" else ""
    w = _harness_witness(
        f"{_AFTER_STEPS} steps after a gradient spike, the weights are {fmt_number(orig_drift)} from where a "
        f"run without the spike is{where}, with the clip after optimizer.step() as with no clip at all, "
        f"vs {fmt_number(fix_drift)} with the clip before it; {own} ({run_as}; {_WARM_STEPS} ordinary steps "
        f"of gradient {size} {fmt_number(ordinary)}, then a spike of {fmt_number(spike_size)}, "
        f"{setting}={fmt_number(limit)}{note}) on {device}", device)
    adaptive = "" if sgd else f", and {name}'s state carries it into the steps after"
    if not no_effect:
        # Never expected (zero_grad discards the clipped gradient): say what was seen.
        return Verification(NOT_REPRODUCED, f"the clip after the step changed the run ({what} "
                            f"{fmt_number(orig_drift)} vs {fmt_number(unclipped)} without a clip)",
                            device=device, harness=scenario.to_json())
    if not bounded:
        return Verification(
            NOT_REPRODUCED,
            f"with {name}, a clip before the step does not bound the spike's effect either ({what} "
            f"{fmt_number(fix_drift)} from the run without the spike, vs {fmt_number(unclipped)} with no "
            f"clip): the misplaced clip costs nothing measurable with this optimizer",
            device=device, harness=scenario.to_json())
    return Verification(CONFIRMED, f"the step used the unclipped gradient{adaptive}; clipping first bounds "
                        "the gradient the step uses", device=device, witness=w, harness=scenario.to_json())


def _scaler_model(name: str, lr: float, device: str):
    model = _model(device)
    return model, getattr(torch.optim, name)(model.parameters(), lr=lr)


def _scaled_backward(model, scaler, x, y, device: str, half: torch.dtype) -> None:
    with torch.autocast(device_type=device, dtype=half):
        out = model(x)
    scaler.scale(F.mse_loss(out.float(), y)).backward()


def clip_without_unscale(params: Mapping[str, Any], device: str) -> Verification:
    limit, given = _number(params, "max_norm", 1.0)
    name, lr, generic = _optimizer_from_code(params)
    build = f"optimizer = torch.optim.{name}(model.parameters(), lr={fmt_number(lr)})\n"
    scenario = Scenario(
        "clip-without-unscale", dict(params),
        original_code=(f"{build}...\nscaler.scale(loss).backward()\n"
                       f"torch.nn.utils.clip_grad_norm_(model.parameters(), {fmt_number(limit)})\n"
                       "scaler.step(optimizer)\nscaler.update()"),
        fixed_code=(f"{build}...\nscaler.scale(loss).backward()\nscaler.unscale_(optimizer)\n"
                    f"torch.nn.utils.clip_grad_norm_(model.parameters(), {fmt_number(limit)})\n"
                    "scaler.step(optimizer)\nscaler.update()"),
    )
    x, y = _data(device, 0.3)  # small enough that the scaled float16 gradient stays finite
    half = _half_for(device)
    scenario.set(device, torch.float32, half)

    def train(variant: str) -> Tuple[float, float]:
        """(update norm, norm the clip saw): "original" clips the scaled gradient, "fix"
        unscales first, "intended" clips the gradient of an unscaled backward."""
        model, opt = _scaler_model(name, lr, device)
        before = _flat(model)
        if variant == "intended":
            with torch.autocast(device_type=device, dtype=half):
                out = model(x)
            F.mse_loss(out.float(), y).backward()
            seen = _clip(model, "norm", limit)
            opt.step()
        else:
            scaler = torch.amp.GradScaler(device, init_scale=SCALE)
            _scaled_backward(model, scaler, x, y, device, half)
            if variant == "fix":
                scaler.unscale_(opt)
            seen = _clip(model, "norm", limit)
            scaler.step(opt)
            scaler.update()
        return float((_flat(model) - before).norm()), seen

    orig_update, orig_seen = train("original")
    fix_update, fix_seen = train("fix")
    intended, true_norm = train("intended")
    if not (math.isfinite(orig_seen) and math.isfinite(fix_seen)):
        return not_verifiable("clip-without-unscale: the scaled gradient overflowed in the harness", device)
    run_as = (f"{name} lr={fmt_number(lr)}, as the code builds it" if generic is None
              else f"a generic harness, SGD lr={fmt_number(lr)}: {generic}")
    scenario.add("gradient norm seen by the clip", orig_seen, fix_seen, f"true norm {fmt_number(true_norm)}")
    scenario.add("update norm", orig_update, fix_update,
                 f"{fmt_number(intended)}, as when clipping the gradient of an unscaled backward")
    original_fails = abs(orig_update - intended) > 0.5 * intended
    fix_holds = abs(fix_update - intended) <= 0.01 * intended + 1e-12
    w = _harness_witness(
        f"the clip saw the scaled gradient (norm {fmt_number(orig_seen)}, scale {fmt_number(SCALE)}): "
        f"update norm {fmt_number(orig_update)} instead of {fmt_number(intended)}; with "
        f"scaler.unscale_(optimizer) first it is {fmt_number(fix_update)} ({run_as}; GradScaler on {device}, "
        f"autocast {C.dtype_name(half)}, max_norm={fmt_number(limit)})", device)
    fw = _harness_witness(f"update norm {fmt_number(fix_update)} instead of {fmt_number(intended)} "
                          "after unscale_", device, which="fix")
    not_text = "the update was as intended"
    if not original_fails and orig_seen > limit:
        not_text = (f"with {name} the update norm is {fmt_number(orig_update)}, as with the clip on the "
                    f"unscaled gradient ({fmt_number(intended)}), though the clip saw a norm of "
                    f"{fmt_number(orig_seen)}: {name}'s step does not scale with the gradient, so the "
                    f"clip's shrink cancels in this step ({run_as})")
    return _verdict(original_fails, fix_holds, w, fw, scenario, device,
                    "clipping the scaled gradient divides the limit by the loss scale", not_text)


def step_bypasses_scaler(params: Mapping[str, Any], device: str) -> Verification:
    name, lr, generic = _optimizer_from_code(params)
    build = f"optimizer = torch.optim.{name}(model.parameters(), lr={fmt_number(lr)})\n"
    scenario = Scenario(
        "step-bypasses-scaler", dict(params),
        original_code=f"{build}...\nscaler.scale(loss).backward()\noptimizer.step()\nscaler.update()",
        fixed_code=f"{build}...\nscaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()",
    )
    x, y = _data(device, 1.0)
    half = _half_for(device)
    scenario.set(device, torch.float32, half)

    def train(variant: str, overflow: bool = False) -> Tuple[float, bool, Optional[str]]:
        """(update norm, weights finite, what scaler.update() raised): "original" steps the
        optimizer itself, "fix" steps through the scaler, "intended" steps on the gradient of
        an unscaled backward. `overflow`: one gradient element is inf, as a float16 overflow
        leaves it (GradScaler's job is to skip that step)."""
        model, opt = _scaler_model(name, lr, device)
        before = _flat(model)
        error = None
        if variant == "intended":
            with torch.autocast(device_type=device, dtype=half):
                out = model(x)
            F.mse_loss(out.float(), y).backward()
            opt.step()
        else:
            scaler = torch.amp.GradScaler(device, init_scale=SCALE)
            _scaled_backward(model, scaler, x, y, device, half)
            if overflow:
                with torch.no_grad():
                    next(model.parameters()).grad.view(-1)[0] = math.inf
            if variant == "fix":
                scaler.step(opt)
            else:
                opt.step()
            try:
                scaler.update()
            except Exception as exc:  # noqa: BLE001 - what the user's loop would hit
                error = f"{type(exc).__name__}: {exc}"
        after = _flat(model)
        finite = bool(torch.isfinite(after).all())
        return (float((after - before).norm()) if finite else math.inf), finite, error

    orig_update, _, orig_error = train("original")
    fix_update, _, fix_error = train("fix")
    intended, _, _ = train("intended")
    _, orig_finite, _ = train("original", overflow=True)
    _, fix_finite, _ = train("fix", overflow=True)
    scenario.add("update norm", orig_update, fix_update, f"{fmt_number(intended)}, as with an unscaled backward")
    scenario.add("weights after a step whose gradient overflowed", "finite" if orig_finite else "NaN/Inf",
                 "finite" if fix_finite else "NaN/Inf", "finite (the step is skipped)")
    scenario.add("scaler.update()", orig_error or "ok", fix_error or "ok", "ok")
    inflated = orig_update > 10 * intended
    original_fails = inflated or orig_error is not None or not orig_finite
    fix_holds = fix_error is None and fix_finite and abs(fix_update - intended) <= 0.01 * intended + 1e-12
    run_as = (f"{name} lr={fmt_number(lr)}, as the code builds it" if generic is None
              else f"a generic harness, SGD lr={fmt_number(lr)}: {generic}")
    if inflated:
        what = (f"optimizer.step() applied the scaled gradient: update norm {fmt_number(orig_update)} "
                f"({fmt_number(orig_update / intended if intended else math.inf)}× the intended "
                f"{fmt_number(intended)}, scale {fmt_number(SCALE)})")
    else:
        what = (f"the update norm is {fmt_number(orig_update)}, near the intended {fmt_number(intended)} "
                f"({name}'s step does not scale with the gradient)")
    skip = ("; a step whose gradient overflowed to inf is applied instead of skipped: the weights become NaN/Inf"
            if not orig_finite else "")
    tail = f"; scaler.update() then raises {orig_error}" if orig_error else ""
    w = _harness_witness(f"{what}{skip}{tail} ({run_as}) on {device}", device)
    fw = _harness_witness(f"update norm {fmt_number(fix_update)} instead of {fmt_number(intended)} "
                          f"with scaler.step(optimizer){'; ' + fix_error if fix_error else ''}", device,
                          which="fix")
    return _verdict(original_fails, fix_holds, w, fw, scenario, device,
                    "the optimizer stepped around the scaler" + (" on the loss-scaled gradient" if inflated else ""),
                    "the update was as intended")


def adam_eps_half(params: Mapping[str, Any], device: str) -> Verification:
    name = str(params.get("optimizer") or "Adam").rsplit(".", 1)[-1]
    if name not in _OPTIMIZERS:
        return not_verifiable(f"adam-eps-half: optimizer {name!r} is not one the harness runs", device)
    default_eps = {"Adagrad": 1e-10}.get(name, 1e-8)
    eps, given = _number(params, "eps", default_eps)
    try:
        dtype = C.dtype_from_name(str(params.get("dtype") or "float16"))
    except ValueError:
        dtype = torch.float16
    opt_cls = getattr(torch.optim, name)
    lr = 1e-3
    steps = 10  # RAdam only divides by the second moment from step 6
    scenario = Scenario(
        "adam-eps-half", dict(params),
        original_code=(f"model = model.to(torch.{C.dtype_name(dtype)})\n"
                       f"optimizer = torch.optim.{name}(model.parameters(), lr={lr}, eps={eps:g})"),
        fixed_code=("# float32 master weights; the forward pass runs in half under autocast\n"
                    f"optimizer = torch.optim.{name}(model.parameters(), lr={lr}, eps={eps:g})\n"
                    f"with torch.autocast(device_type, dtype=torch.{C.dtype_name(dtype)}):\n    loss = ..."),
    )

    scenario.set(device, dtype)

    def train(param_dtype: torch.dtype, g: float) -> Tuple[float, float, int]:
        """(parameter after the steps, largest single-step move, first step with NaN/Inf)."""
        p = torch.nn.Parameter(torch.ones(8, device=device, dtype=param_dtype))
        opt = opt_cls([p], lr=lr, eps=eps)
        first_bad, largest = 0, 0.0
        for step in range(1, steps + 1):
            before = p.detach().double().clone()
            p.grad = torch.full_like(p, g)
            opt.step()
            after = p.detach().double()
            if not bool(torch.isfinite(after).all()):
                first_bad = first_bad or step
            else:
                largest = max(largest, float((after - before).abs().max()))
        return float(p.detach().double()[0]), largest, first_bad

    # Gradients a model really sees late in training, and exactly 0 (a dead unit); the first
    # that breaks the half-precision state is reported.
    tried = [1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 1e-5, 0.0]
    failing = None
    for g in tried:
        final, move, bad = train(dtype, g)
        ref_final, ref_move, ref_bad = train(torch.float32, g)
        if ref_bad:
            continue
        blown = move > 10 * max(ref_move, lr)
        if bad or blown:
            failing = (g, final, move, bad, ref_final, ref_move)
            break
    g = failing[0] if failing else tried[-1]
    orig_final, orig_move, orig_bad = train(dtype, g)
    fix_final, fix_move, fix_bad = train(torch.float32, g)
    scenario.add("gradient", g, g)
    scenario.add(f"parameter after {steps} steps (start 1)", orig_final, fix_final, "finite")
    scenario.add("largest single-step move", orig_move, fix_move, f"≈ lr = {lr:g} (a few × lr for RMSprop)")
    scenario.add("step at which a parameter became NaN/Inf", orig_bad or "never", fix_bad or "never", "never")
    original_fails = failing is not None
    fix_holds = fix_bad == 0
    eps_vanishes = float(torch.tensor(eps, dtype=dtype)) == 0.0
    if g == 0.0:
        where = f"a zero gradient gives 0/0 because eps={eps:g} is 0 in {C.dtype_name(dtype)}"
    elif eps_vanishes:
        where = f"the second-moment estimate underflows to 0 and eps={eps:g} is 0 in {C.dtype_name(dtype)}"
    else:
        where = "the second-moment estimate underflows to 0, so the step divides by eps alone"
    if original_fails and orig_bad:
        what = f"the parameters are {fmt_number(orig_final)} after step {orig_bad}"
    else:
        what = (f"a single step moves a parameter by {fmt_number(orig_move)} "
                f"({fmt_number(orig_move / max(fix_move, 1e-30))}× the float32 step)")
    w = _harness_witness(
        f"{name}(eps={eps:g}) on {C.dtype_name(dtype)} parameters with gradient {g:g}: {what} "
        f"({where}); with float32 master weights the parameter is {fmt_number(fix_final)} after "
        f"{steps} steps on {device}", device, dtype=C.dtype_name(dtype))
    fw = _harness_witness(f"float32 parameters become NaN/Inf at step {fix_bad}", device, which="fix")
    not_text = (f"the {C.dtype_name(dtype)} parameters stayed finite and moved like the float32 ones "
                f"for every gradient tried ({', '.join(f'{t:g}' for t in tried)})")
    if dtype == torch.bfloat16:
        not_text += f"; eps={eps:g} is representable in bfloat16 (its range is float32's)"
    return _verdict(original_fails, fix_holds, w, fw, scenario, device,
                    "the half-precision optimizer state breaks; float32 master weights hold", not_text)


def cross_entropy_half(params: Mapping[str, Any], device: str) -> Verification:
    smoothing, _ = _number(params, "label_smoothing", 0.0)
    if params.get("label_smoothing") in (0, 0.0):
        smoothing = 0.0
    reduction = str(params.get("reduction") or "mean")
    if reduction not in ("mean", "sum", "none"):
        reduction = "mean"
    try:
        dtype = C.dtype_from_name(str(params.get("dtype") or "float16"))
    except ValueError:
        dtype = torch.float16
    in_autocast = bool(params.get("in_autocast"))
    kw = f", label_smoothing={smoothing:g}" if smoothing else ""
    kw += f", reduction={reduction!r}" if reduction != "mean" else ""
    wrap = f"with torch.autocast(device_type, dtype=torch.{C.dtype_name(dtype)}):\n    " if in_autocast else ""
    scenario = Scenario(
        "cross-entropy-half", dict(params),
        original_code=f"{wrap}loss = F.cross_entropy(logits, target{kw})  # logits in {C.dtype_name(dtype)}",
        fixed_code=f"{wrap}loss = F.cross_entropy(logits.float(), target{kw})",
    )
    scenario.set(device, dtype, dtype if in_autocast else None)
    classes, batch = 10, 8
    g = torch.Generator().manual_seed(2)
    pattern = torch.where(torch.rand(batch, classes, generator=g) < 0.5, 1.0, -1.0)
    target = torch.randint(classes, (batch,), generator=g)
    for i in range(batch):  # the target class sits at -M: the largest loss the logits allow
        pattern[i, int(target[i])] = -1.0
    target = target.to(device)
    fmax = float(torch.finfo(dtype).max)
    ladder = [m for m in (10.0, 100.0, 1e3, 1e4, 3e4, 6e4, 1e6, 1e10, 1e20, 1e30, 1e38) if m < fmax]

    def loss_of(logits: torch.Tensor, upcast: bool, autocast: bool):
        leaf = logits.detach().clone().requires_grad_(True)
        inp = leaf.float() if upcast else leaf
        manager = torch.autocast(device_type=device, dtype=dtype) if autocast else _Null()
        with manager:
            # As written in the code under test: the scenario runs the un-upcast call on purpose.
            loss = F.cross_entropy(inp, target, label_smoothing=smoothing, reduction=reduction)  # noqa: NAN304
        loss.sum().backward()
        return loss.detach(), leaf.grad.detach()

    def finite(*ts) -> bool:
        return all(bool(torch.isfinite(t).all()) for t in ts)

    def confirms(m: float) -> Optional[bool]:
        """True where the original fails and the fix holds at magnitude m, False where the
        original holds, None where both fail or float64 does."""
        logits = (pattern * m).to(device=device, dtype=dtype)
        ref, ref_grad = loss_of(logits.double(), False, False)
        if not finite(ref, ref_grad):
            return None
        if finite(*loss_of(logits, False, in_autocast)):
            return False
        return True if finite(*loss_of(logits, True, in_autocast)) else None

    found = None
    shared_from = None
    held = 0.0  # the largest magnitude tried below the failure where the original held
    for m in ladder:
        verdict = confirms(m)
        if verdict is False:
            held = m
        elif verdict:
            found = m
            break
        elif shared_from is None and verdict is None and finite(
                *loss_of((pattern * m).to(device=device, dtype=torch.float64), False, False)):
            shared_from = m
    smallest = found is not None and held > 0
    if smallest:
        # The smallest failing magnitude, to three digits: a witness at 10000 when 4100
        # already fails reads as an input no model produces.
        lo, hi = held, found
        while hi / lo > 1.001:
            mid = math.sqrt(lo * hi)
            if confirms(mid):
                hi = mid
            else:
                lo = mid
        found = float(f"{hi:.3g}") if confirms(float(f"{hi:.3g}")) else hi
    m = found if found is not None else (shared_from or ladder[-1])
    logits = (pattern * m).to(device=device, dtype=dtype)
    loss, grad = loss_of(logits, False, in_autocast)
    fix_loss, fix_grad = loss_of(logits, True, in_autocast)
    ref, _ = loss_of(logits.double(), False, False)
    fix_ok = finite(fix_loss, fix_grad)
    rel = float(((fix_loss.double() - ref).abs() / ref.abs().clamp(min=1e-30)).max())
    scenario.add("|logits|", m, m)
    scenario.add("loss", _summary(loss), _summary(fix_loss), f"float64: {fmt_number(_summary(ref))}")
    scenario.add("gradient finite", bool(torch.isfinite(grad).all()), bool(torch.isfinite(fix_grad).all()), "True")
    original_fails = found is not None
    fix_holds = fix_ok and rel < 1e-3 if found is not None else True
    setting = f"{C.dtype_name(dtype)} logits" + (f" under autocast({C.dtype_name(dtype)})" if in_autocast else "")
    why = ""
    total = _summary(ref) * batch if reduction == "mean" else None
    if total is not None and abs(_summary(ref)) < fmax < abs(total):
        why = (f": the mean is representable, but the {batch} targets' summed loss, {fmt_number(total)}, "
               f"passes {C.dtype_name(dtype)}'s largest value {fmt_number(fmax)}")
    w = _harness_witness(
        f"loss {fmt_number(_summary(loss))} with {setting} of magnitude {fmt_number(m)}"
        f"{', the smallest that fails' if smallest else ''} (float64: {fmt_number(_summary(ref))}{why}); "
        "with logits.float() it is "
        f"{fmt_number(_summary(fix_loss))} on {device}", device, dtype=C.dtype_name(dtype))
    fw = _harness_witness(f"loss {fmt_number(_summary(fix_loss))} vs float64 {fmt_number(_summary(ref))} "
                          "with logits.float()", device, which="fix")
    not_text = (f"loss and gradient stayed finite for {setting} up to magnitude {fmt_number(ladder[-1])}"
                + (f" (autocast computed cross_entropy in float32 on {device})" if in_autocast else ""))
    if shared_from is not None:
        not_text = (f"the loss is NaN/Inf in {setting} only from magnitude {fmt_number(shared_from)}, where "
                    "float32 overflows too: logits.float() cannot help there")
    return _verdict(original_fails, fix_holds, w, fw, scenario, device,
                    f"the loss overflows {C.dtype_name(dtype)}; in float32 it holds", not_text)


def cross_entropy_all_ignored(params: Mapping[str, Any], device: str) -> Verification:
    ignore = params.get("ignore_index", -100)
    ignore = int(ignore) if isinstance(ignore, (int, float)) and not isinstance(ignore, bool) else -100
    scenario = Scenario(
        "cross-entropy-all-ignored", dict(params),
        original_code=f"loss = F.cross_entropy(logits, target, ignore_index={ignore})",
        fixed_code=(f"loss = F.cross_entropy(logits, target, ignore_index={ignore}, reduction='sum')\n"
                    f"loss = loss / (target != {ignore}).sum().clamp(min=1)"),
    )
    scenario.set(device, torch.float32)
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(8, 10, generator=g).to(device).requires_grad_(True)
    target = torch.full((8,), ignore, dtype=torch.int64, device=device)
    loss = F.cross_entropy(logits, target, ignore_index=ignore)
    grad = torch.autograd.grad(loss, logits)[0]
    fix = F.cross_entropy(logits, target, ignore_index=ignore, reduction="sum") / (target != ignore).sum().clamp(min=1)
    fix_grad = torch.autograd.grad(fix, logits)[0]
    loss, fix = loss.detach(), fix.detach()
    scenario.add("loss", loss, fix, "finite (0: nothing to learn)")
    scenario.add("gradient finite", bool(torch.isfinite(grad).all()), bool(torch.isfinite(fix_grad).all()), "True")
    original_fails = not (torch.isfinite(loss) and torch.isfinite(grad).all())
    fix_holds = bool(torch.isfinite(fix) and torch.isfinite(fix_grad).all())
    w = _harness_witness(f"loss {fmt_number(float(loss))} when every target is ignore_index={ignore} "
                         f"(mean over zero elements, 0/0); the guarded mean gives {fmt_number(float(fix))} "
                         f"on {device}", device)
    fw = _harness_witness(f"guarded loss {fmt_number(float(fix))}", device, which="fix")
    return _verdict(original_fails, fix_holds, w, fw, scenario, device,
                    "a batch with every target ignored gives a NaN loss",
                    "the loss stayed finite")


def loss_on_probabilities(params: Mapping[str, Any], device: str) -> Verification:
    """kl_div / nll_loss / cross_entropy fed probabilities instead of what they expect: on a
    confidently wrong batch the original's gradient all but vanishes, the fix's does not."""
    loss = str(params.get("loss") or "cross_entropy")
    forms = {
        "kl_div": ("F.kl_div(F.softmax(logits, -1), target, reduction='batchmean')",
                   "F.kl_div(F.log_softmax(logits, -1), target, reduction='batchmean')"),
        "nll_loss": ("F.nll_loss(F.softmax(logits, -1), labels)",
                     "F.nll_loss(F.log_softmax(logits, -1), labels)"),
        "cross_entropy": ("F.cross_entropy(F.softmax(logits, -1), labels)",
                          "F.cross_entropy(logits, labels)"),
    }
    if loss not in forms:
        return not_verifiable(f"loss-on-probabilities: unknown loss {loss!r}", device)
    original_code, fixed_code = forms[loss]
    scenario = Scenario("loss-on-probabilities", dict(params), original_code=f"loss = {original_code}",
                        fixed_code=f"loss = {fixed_code}")
    scenario.set(device, torch.float32)
    # A confidently wrong batch: every row puts a margin of 20 on a wrong class.
    classes, margin = 10, 20.0
    labels = torch.arange(8, device=device) % classes
    wrong = (labels + 1) % classes
    logits = torch.zeros(8, classes, device=device)
    logits[torch.arange(8), wrong] = margin
    logits.requires_grad_(True)
    target = F.one_hot(labels, classes).float().clamp(min=1e-6)
    target = target / target.sum(-1, keepdim=True)

    def run(kind: str) -> Tuple[float, float]:
        if loss == "kl_div":
            inp = F.softmax(logits, -1) if kind == "original" else F.log_softmax(logits, -1)
            value = F.kl_div(inp, target, reduction="batchmean")
        elif loss == "nll_loss":
            inp = F.softmax(logits, -1) if kind == "original" else F.log_softmax(logits, -1)
            value = F.nll_loss(inp, labels)
        else:
            inp = F.softmax(logits, -1) if kind == "original" else logits
            value = F.cross_entropy(inp, labels)
        grad = torch.autograd.grad(value, logits)[0]
        return float(value.detach()), float(grad.norm())

    loss_o, grad_o = run("original")
    loss_f, grad_f = run("fix")
    scenario.add("loss", loss_o, loss_f)
    scenario.add("gradient norm", grad_o, grad_f, "the fix's, within a factor of 10")
    finite = all(math.isfinite(v) for v in (loss_o, grad_o, loss_f, grad_f))
    original_fails = finite and grad_o < 1e-2 * grad_f
    fix_holds = finite and grad_f > 0.1
    w = _harness_witness(
        f"{loss} on probabilities, confidently wrong batch (margin {margin:g}, {classes} classes): "
        f"gradient norm {fmt_number(grad_o)} against {fmt_number(grad_f)} with the expected input, "
        f"{fmt_number(float(f'{grad_f / max(grad_o, 1e-300):.2g}'))} times smaller "
        f"(loss {fmt_number(loss_o)} vs {fmt_number(loss_f)}) on {device}", device)
    fw = _harness_witness(f"gradient norm {fmt_number(grad_f)}", device, which="fix")
    return _verdict(original_fails, fix_holds, w, fw, scenario, device,
                    "the loss on probabilities gives a confidently wrong model almost no gradient",
                    "the gradients were comparable")


def _summary(t: torch.Tensor) -> float:
    """A loss tensor as one number: the value, or its worst element."""
    t = t.detach().double().reshape(-1)
    if t.numel() == 1:
        return float(t[0])
    bad = t[~torch.isfinite(t)]
    return float(bad[0]) if bad.numel() else float(t.abs().max())


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


HARNESSES: Dict[str, Callable[[Mapping[str, Any], str], Verification]] = {
    "clip-after-step": clip_after_step,
    "clip-without-unscale": clip_without_unscale,
    "step-bypasses-scaler": step_bypasses_scaler,
    "adam-eps-half": adam_eps_half,
    "cross-entropy-half": cross_entropy_half,
    "cross-entropy-all-ignored": cross_entropy_all_ignored,
    "loss-on-probabilities": loss_on_probabilities,
}


def run_harness(name: Optional[str], params: Mapping[str, Any], device: str) -> Verification:
    start = time.perf_counter()
    fn = HARNESSES.get(name or "")
    if fn is None:
        return not_verifiable(f"no built-in harness named {name!r} (known: {', '.join(sorted(HARNESSES))})", device)
    try:
        with single_threaded():
            result = fn(dict(params or {}), device)
    except Exception as exc:  # noqa: BLE001 - a harness crash is reported, never fatal
        result = not_verifiable(f"harness {name} raised {type(exc).__name__}: {exc}", device)
    result.seconds = time.perf_counter() - start
    return result
