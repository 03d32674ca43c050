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


def test_clip_after_step_numbers():
    v = run_harness("clip-after-step", {"clip": "norm", "max_norm": 1.0}, "cpu")
    rows = {r["metric"]: r for r in v.harness["rows"]}
    assert rows["update norm"]["fix"] <= 0.1 * 1.01
    assert rows["update norm"]["original"] > 100 * rows["update norm"]["fix"]


def test_clip_after_step_runs_the_optimizer_the_code_builds():
    """The harness steps the code's own optimizer: with AdamW the clip after the step leaves
    the update exactly as it is without a clip, while the clip before it changes it."""
    v = run_harness("clip-after-step", {"clip": "norm", "max_norm": 1.0,
                                        "optimizer": "torch.optim.AdamW", "lr": 1e-3}, "cpu")
    assert v.verdict == "confirmed", v.line()
    text = v.witness.sentence()
    assert "AdamW lr=0.001, as the code builds it" in text and "the same as with no clip at all" in text
    rows = {r["metric"]: r for r in v.harness["rows"]}
    assert rows["update norm"]["original"] == rows["update norm without any clip"]["original"]
    assert rows["update norm"]["fix"] != rows["update norm"]["original"]
    assert "torch.optim.AdamW(model.parameters(), lr=0.001)" in v.harness["original_code"]


@pytest.mark.parametrize("params, why", [
    ({}, "not built where nanlint could read it"),
    ({"optimizer": "bitsandbytes.optim.Lion8bit", "lr": 1e-4}, "`bitsandbytes.optim.Lion8bit`, is not a torch.optim"),
])
def test_clip_after_step_says_plainly_when_it_runs_a_generic_optimizer(params, why):
    v = run_harness("clip-after-step", dict({"clip": "norm", "max_norm": 1.0}, **params), "cpu")
    assert v.verdict == "confirmed", v.line()
    assert "a generic harness, SGD lr=0.1: " in v.witness.sentence() and why in v.witness.sentence()


def test_clip_after_step_finding_carries_the_optimizer_the_file_builds():
    from nanlint.engine import lint_source
    from nanlint.rules import get_rule

    source = (
        "import torch\n\n"
        "def train(model, loader):\n"
        "    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)\n"
        "    for x, y in loader:\n"
        "        model(x).sum().backward()\n"
        "        optimizer.step()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "        optimizer.zero_grad()\n"
    )
    (d,) = lint_source("train.py", source, [get_rule("NAN401")]).diagnostics
    assert dict(d.probe.params) == {"clip": "norm", "max_norm": 1.0, "optimizer": "torch.optim.AdamW", "lr": 3e-4}


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
