"""Statement-level findings: each built-in harness shows the failure in the original order or
form and its absence after the fix, on the CPU."""

from __future__ import annotations

import pytest

from nanlint.verify.harnesses import HARNESSES, run_harness


@pytest.mark.parametrize(
    "name, params",
    [
        ("clip-after-step", {"clip": "norm", "max_norm": 1.0}),
        ("clip-after-step", {"clip": "value", "max_norm": 0.5}),
        ("clip-after-step", {"clip": "norm", "max_norm": None}),
        ("clip-without-unscale", {"max_norm": 1.0}),
        ("step-bypasses-scaler", {}),
        ("adam-eps-half", {"optimizer": "Adam", "eps": 1e-8, "dtype": "float16"}),
        ("adam-eps-half", {"optimizer": "AdamW", "eps": 1e-7, "dtype": "float16"}),
        ("adam-eps-half", {"optimizer": "RAdam", "eps": 1e-8, "dtype": "float16"}),
        ("adam-eps-half", {"optimizer": "Adamax", "eps": 1e-8, "dtype": "float16"}),
        ("cross-entropy-half", {"label_smoothing": None, "reduction": "mean", "dtype": "float16", "in_autocast": False}),
        ("cross-entropy-half", {"label_smoothing": 0.1, "reduction": "none", "dtype": "float16", "in_autocast": False}),
        ("cross-entropy-half", {"label_smoothing": None, "reduction": "sum", "dtype": "float16", "in_autocast": False}),
        ("cross-entropy-all-ignored", {"ignore_index": -100}),
    ],
)
def test_harness_confirms(name, params):
    v = run_harness(name, params, "cpu")
    assert v.verdict == "confirmed", v.line()
    assert v.witness is not None and v.witness.sentence()
    assert v.harness["rows"] and v.harness["original_code"] != v.harness["fixed_code"]


def _rows(v):
    return {r["metric"]: r for r in v.harness["rows"]}


SPIKE_STEP = "the spike step's update norm"
DISTANCE = "distance from the run without the spike, 20 steps after it"


def test_clip_after_step_numbers():
    """SGD: the clip before the step bounds the spike step's update by lr·max_norm; after the
    step it bounds nothing, and the weights end far from where a run without the spike ends."""
    v = run_harness("clip-after-step", {"clip": "norm", "max_norm": 1.0}, "cpu")
    rows = _rows(v)
    assert rows[SPIKE_STEP]["fix"] <= 0.1 * 1.01
    assert rows[SPIKE_STEP]["original"] > 50 * rows[SPIKE_STEP]["fix"]
    assert rows[DISTANCE]["original"] == rows[DISTANCE + ", without any clip"]["original"]
    assert rows[DISTANCE]["original"] > 10 * rows[DISTANCE]["fix"]


# Every optimizer class the harness builds as the code does, with the lr it reads (or the
# class's default lr).
ADAPTIVE = ["Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta"]


@pytest.mark.parametrize("name", ["SGD", "ASGD"] + ADAPTIVE)
@pytest.mark.parametrize("clip", ["norm", "value"])
def test_clip_after_step_shows_the_harm_in_the_code_s_optimizer(name, clip):
    """The evidence reads the way the verdict does, in each optimizer: with the clip after the
    step the weights end where they end without any clip, and with the clip before it the
    spike's effect on them is at most two thirds of that. An adaptive optimizer normalises the
    gradient's scale away, so the measure is the spike's effect over the steps after it, not
    the size of one update."""
    v = run_harness("clip-after-step", {"clip": clip, "max_norm": 1.0, "optimizer": f"torch.optim.{name}"}, "cpu")
    assert v.verdict == "confirmed", v.line()
    what = "distance" if clip == "norm" else "largest change"
    rows = _rows(v)
    key = f"{what} from the run without the spike, 20 steps after it"
    original, fix, unclipped = rows[key]["original"], rows[key]["fix"], rows[key + ", without any clip"]["original"]
    assert original == unclipped and 1.5 * fix <= original
    text = v.witness.sentence()
    assert f"{name} lr=" in text and "as the code builds it" in text
    # The sentence's figures are the table's, in the order the verdict implies.
    from nanlint.verify.verdict import fmt_number
    assert f"the weights are {fmt_number(original)} from where a run without the spike is" in text
    assert f"vs {fmt_number(fix)} with the clip before it" in text
    step = rows["the spike step's " + ("update norm" if clip == "norm" else "largest update")]
    if step["original"] > step["fix"]:
        assert f"own {'update norm' if clip == 'norm' else 'largest update'}: {fmt_number(step['original'])} vs" in text
    else:  # a smaller spike step (Adamax): the sentence says what the spike cost instead
        assert "is smaller" in text and "steps after it average" in text


def test_clip_after_step_with_adam_is_not_judged_by_one_update():
    """The issue's case: Adam after a few steps makes the unclipped spike's own step small (its
    bias correction), which read as "the fix moves more". The harness runs Adam in its steady
    state and judges what the spike leaves behind."""
    v = run_harness("clip-after-step", {"clip": "norm", "max_norm": 1.0,
                                        "optimizer": "torch.optim.Adam", "lr": 1e-3}, "cpu")
    rows = _rows(v)
    assert rows[DISTANCE]["original"] > 5 * rows[DISTANCE]["fix"]
    assert rows[SPIKE_STEP]["original"] > rows[SPIKE_STEP]["fix"]
    assert "Adam's state carries it into the steps after" in v.reason


def test_clip_after_step_with_rprop_is_not_reproduced():
    """Rprop uses only the gradient's sign: no clip changes its updates, so the misplaced clip
    costs nothing, and the verifier says so instead of confirming (or calling the fix failed)."""
    v = run_harness("clip-after-step", {"clip": "norm", "max_norm": 1.0, "optimizer": "torch.optim.Rprop"}, "cpu")
    assert v.verdict == "not-reproduced", v.line()
    assert "with Rprop, a clip before the step does not bound the spike's effect either" in v.reason


def test_clip_after_step_runs_the_optimizer_the_code_builds():
    v = run_harness("clip-after-step", {"clip": "norm", "max_norm": 1.0,
                                        "optimizer": "torch.optim.AdamW", "lr": 1e-3}, "cpu")
    assert v.verdict == "confirmed", v.line()
    text = v.witness.sentence()
    assert "AdamW lr=0.001, as the code builds it" in text and "as with no clip at all" in text
    assert "torch.optim.AdamW(model.parameters(), lr=0.001)" in v.harness["original_code"]


@pytest.mark.parametrize("params, why", [
    ({}, "not built where nanlint could read it"),
    ({"optimizer": "bitsandbytes.optim.Lion8bit", "lr": 1e-4}, "`bitsandbytes.optim.Lion8bit`, is not a torch.optim"),
])
def test_clip_after_step_says_plainly_when_it_runs_a_generic_optimizer(params, why):
    v = run_harness("clip-after-step", dict({"clip": "norm", "max_norm": 1.0}, **params), "cpu")
    assert v.verdict == "confirmed", v.line()
    assert "a generic harness, SGD lr=0.1: " in v.witness.sentence() and why in v.witness.sentence()


_LOOP = (
    "import torch\n\n"
    "def train(model, loader):\n"
    "    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)\n"
    "    scaler = torch.amp.GradScaler()\n"
    "    for x, y in loader:\n"
    "{body}"
)
_ADAMW = {"optimizer": "torch.optim.AdamW", "lr": 3e-4}
_CLIP = "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"


@pytest.mark.parametrize("code, body, params", [
    ("NAN401", "        model(x).sum().backward()\n        optimizer.step()\n" + _CLIP,
     {"clip": "norm", "max_norm": 1.0, **_ADAMW}),
    ("NAN402", "        scaler.scale(model(x).sum()).backward()\n" + _CLIP
     + "        scaler.step(optimizer)\n        scaler.update()\n", {"clip": "norm", "max_norm": 1.0, **_ADAMW}),
    ("NAN403", "        scaler.scale(model(x).sum()).backward()\n        optimizer.step()\n        scaler.update()\n",
     _ADAMW),
])
def test_training_step_findings_carry_the_optimizer_the_file_builds(code, body, params):
    """The harnesses run the optimizer the code builds: the probe names it, with its lr."""
    from nanlint.lint.engine import lint_source
    from nanlint.rules import get_rule

    (d,) = lint_source("train.py", _LOOP.format(body=body), [get_rule(code)]).diagnostics
    assert dict(d.probe.params) == params


def test_clip_without_unscale_divides_the_limit_by_the_scale():
    v = run_harness("clip-without-unscale", {"max_norm": 1.0}, "cpu")
    rows = {r["metric"]: r for r in v.harness["rows"]}
    original, fix = rows["update norm"]["original"], rows["update norm"]["fix"]
    assert original * 1000 < fix  # the clip saw a gradient 65536 times too large


def test_step_bypassing_the_scaler_applies_the_scaled_gradient():
    v = run_harness("step-bypasses-scaler", {}, "cpu")
    rows = {r["metric"]: r for r in v.harness["rows"]}
    assert rows["update norm"]["original"] > 1000 * rows["update norm"]["fix"]
    assert "No inf checks" in str(rows["scaler.update()"]["original"])


def test_scaler_harnesses_run_the_optimizer_the_code_builds():
    """With Adam the loss scale cancels in the step: the evidence must not claim a 65536-fold
    update. Stepping around the scaler still applies a step whose gradient overflowed (the
    weights become NaN) and makes scaler.update() raise; clipping the scaled gradient changes
    nothing Adam's step shows, and the verifier says so instead of confirming."""
    adam = {"max_norm": 1.0, "optimizer": "torch.optim.Adam", "lr": 1e-3}
    v = run_harness("step-bypasses-scaler", adam, "cpu")
    assert v.verdict == "confirmed", v.line()
    text = v.witness.sentence()
    assert "65536×" not in text and "Adam lr=0.001, as the code builds it" in text
    assert "the weights become NaN/Inf" in text and "scaler.update() then raises" in text
    rows = _rows(v)
    assert rows["weights after a step whose gradient overflowed"]["original"] == "NaN/Inf"
    assert rows["weights after a step whose gradient overflowed"]["fix"] == "finite"

    v = run_harness("clip-without-unscale", adam, "cpu")
    assert v.verdict == "not-reproduced", v.line()
    assert "with Adam the update norm is" in v.reason and "Adam lr=0.001, as the code builds it" in v.reason


@pytest.mark.parametrize(
    "name, params",
    [
        # CPU autocast computes cross_entropy in float32 (NUMERICS.md; CUDA's does not).
        ("cross-entropy-half", {"dtype": "float16", "in_autocast": True}),
        # bfloat16 has float32's range: eps=1e-8 is not 0 and v does not underflow.
        ("adam-eps-half", {"optimizer": "Adam", "eps": 1e-8, "dtype": "bfloat16"}),
        ("cross-entropy-half", {"dtype": "bfloat16", "in_autocast": False}),
    ],
)
def test_harness_does_not_confirm_what_does_not_fail(name, params):
    v = run_harness(name, params, "cpu")
    assert v.verdict == "not-reproduced", v.line()


def test_unknown_harness_and_bad_params():
    assert run_harness("no-such-scenario", {}, "cpu").verdict == "not-verifiable"
    assert run_harness(None, {}, "cpu").verdict == "not-verifiable"
    assert run_harness("adam-eps-half", {"optimizer": "os.system"}, "cpu").verdict == "not-verifiable"
    # Garbage parameters fall back to defaults rather than crash.
    v = run_harness("clip-after-step", {"clip": 3, "max_norm": "big"}, "cpu")
    assert v.verdict == "confirmed"
    assert set(HARNESSES) >= {"clip-after-step", "clip-without-unscale", "step-bypasses-scaler",
                              "adam-eps-half", "cross-entropy-half"}


def test_cross_entropy_half_witness_is_the_smallest_failing_magnitude():
    """A witness at 10000 when a few thousand already fail reads as an input no model
    produces: the harness narrows the magnitude down and says why it fails there."""
    v = run_harness("cross-entropy-half", {"dtype": "float16"}, "cpu")
    assert v.verdict == "confirmed", v.line()
    rows = {r["metric"]: r for r in v.harness["rows"]}
    m = rows["|logits|"]["original"]
    assert 1000 < m < 10000, m
    text = v.witness.sentence()
    assert "the smallest that fails" in text and "summed loss" in text and "65504" in text
