"""A verdict for nearly every real finding (issue 9, item 2): creation ops, linear algebra,
methods, index syntax with non-constant bounds, conditional expressions, string keys, dims
and sizes given by inputs, and shapes found by a small search. Each case below was refused
or failed to run before; each still runs inside the sandbox and the per-finding budget."""

from __future__ import annotations

import pytest
import torch

from nanlint.core.diagnostics import Probe, ProbeInput
from nanlint.verify.expression import prepare_probe, verify_expression
from nanlint.verify.sandbox import Interpreter, Refused, check_expression

E = "traced by the analysis"


def run(original, fixed, *names, **kinds):
    inputs = tuple(ProbeInput(n, evidence=E, **kinds.get(n, {})) if isinstance(n, str) else n for n in names)
    return verify_expression(Probe("expression", original, fixed, inputs), "cpu")


@pytest.mark.parametrize("original, fixed, names", [
    # methods that allocate from sizes, and casts
    ("(x.unsqueeze(-2).repeat(1, 4, 1).sum(-1)) / (m.unsqueeze(-2).repeat(1, 4, 1) == 0).sum(-1)",
     "(x.unsqueeze(-2).repeat(1, 4, 1).sum(-1)) / ((m.unsqueeze(-2).repeat(1, 4, 1) == 0).sum(-1)).clamp(min=1)",
     ["x", "m"]),
    ("x.sum(-1) / (x != 0).long().sum(-1)", "x.sum(-1) / (x != 0).long().sum(-1).clamp(min=1)", ["x"]),
    ("x.sum(-1) / x.bool().float().sum(-1)", "x.sum(-1) / x.bool().float().sum(-1).clamp(min=1)", ["x"]),
    # creation ops with sizes from inputs and from shapes
    ("torch.exp(torch.linspace(-eta, 0, n)) / torch.exp(torch.linspace(-eta, 0, n)).sum()",
     "torch.softmax(torch.linspace(-eta, 0, n), dim=0)", ["eta", "n"]),
    ("torch.log(torch.ones(x.shape[-1]) * x)", "torch.log((torch.ones(x.shape[-1]) * x).clamp(min=1e-30))", ["x"]),
    ("torch.log(torch.zeros_like(x) + x.exp())", "torch.zeros_like(x) + x", ["x"]),
    ("(torch.arange(x.shape[-1]) * x).sum(-1) / x.sum(-1)",
     "(torch.arange(x.shape[-1]) * x).sum(-1) / x.sum(-1).clamp(min=1e-30)", ["x"]),
    # index syntax: non-constant slice bounds, an index tensor's row, a dim given by an input
    ("torch.log(x[:, : x.shape[-1] // 2].exp().sum(-1))", "torch.logsumexp(x[:, : x.shape[-1] // 2], -1)", ["x"]),
    ("torch.log(torch.sum(torch.exp(t - m.unsqueeze(dim).expand_as(t)), dim))",
     "torch.logsumexp(t - m.unsqueeze(dim).expand_as(t), dim)", ["t", "m", "dim"]),
    # a (values, indices) pair indexed, a conditional expression on a flag
    ("(x / x.max(dim=-1, keepdim=True)[0]).log()", "(x / x.max(dim=-1, keepdim=True)[0]).clamp(min=1e-30).log()",
     ["x"]),
    ("torch.div((u if flag else v), torch.norm((u if flag else v), p=2, dim=-1, keepdim=True))",
     "torch.nn.functional.normalize((u if flag else v), dim=-1)", ["u", "flag", "v"]),
    # a device and a dtype read from a tensor
    ("(y * (~mask.to(x.device)).to(dtype=y.dtype)).sum(-1) / (~mask.to(x.device)).to(dtype=y.dtype).sum(-1)",
     "(y * (~mask.to(x.device)).to(dtype=y.dtype)).sum(-1) / (~mask.to(x.device)).to(dtype=y.dtype).sum(-1).clamp(min=1)",
     ["y", "mask", "x.device", "y.dtype"]),
    # linear algebra: a covariance's determinant by hand
    ("torch.pow(torch.diagonal(torch.linalg.cholesky(c), dim1=-2, dim2=-1), 2).prod(dim=-1).log()",
     "torch.log(torch.pow(torch.diagonal(torch.linalg.cholesky(c), dim1=-2, dim2=-1), 2)).sum(dim=-1)", ["c"]),
    # an entry of a dict the code holds
    ("torch.log(batch['probs'])", "torch.log(batch['probs'].clamp(min=1e-30))", ["batch"]),
    # a list comprehension over a literal tuple and over range(n)
    ("torch.log(torch.stack([torch.exp(v) for v in (a, b)]).sum(0))",
     "torch.logsumexp(torch.stack([v for v in (a, b)]), 0)", ["a", "b"]),
    ("torch.log(torch.stack([x[..., i].exp() for i in range(n)]).sum(0))",
     "torch.logsumexp(torch.stack([x[..., i] for i in range(n)]), 0)", ["x", "n"]),
    # a fresh tensor filled in place (out of place here)
    ("torch.log(torch.empty_like(x).uniform_(1e-6, 1 - 1e-6)) - torch.log(1 - torch.empty_like(x).uniform_(1e-6, 1 - 1e-6))",
     "torch.logit(torch.empty_like(x).uniform_(1e-6, 1 - 1e-6))", ["x"]),
])
def test_formerly_refused_probes_get_a_verdict(original, fixed, names):
    v = run(original, fixed, *names)
    assert v.verdict != "not-verifiable", v.line()


def test_dims_sizes_and_flags_given_by_inputs_are_integers_and_booleans_never_tensors():
    p = prepare_probe(Probe("expression", "torch.log(torch.sum(torch.exp(x[:, :n]), dim)) if flag else x.sum()", None,
                            (ProbeInput("x"), ProbeInput("n"), ProbeInput("dim"), ProbeInput("flag"))))
    by = {s.name: s for s in p.specs}
    assert (by["n"].role, by["n"].value) == ("size", 4)
    assert (by["dim"].role, by["dim"].value) == ("dim", -1)
    assert (by["flag"].role, by["flag"].value) == ("flag", True)
    assert by["x"].role == "float" and by["x"].value is None
    assert p.grad_inputs == ["x"]


def test_inputs_read_only_for_dtype_device_or_shape_are_not_generated_and_not_unbounded():
    v = run("x.sum(-1) / torch.ones(y.shape[-1], dtype=y.dtype).sum() * 0 + x.sum(-1) / x.sum(-1)",
            "x.sum(-1) / x.sum(-1).clamp(min=1e-30)", ProbeInput("x", evidence=E), ProbeInput("y"))
    assert "could not bound" not in v.reason  # y is only read for its shape and dtype


def test_random_calls_draw_the_same_values_for_the_same_text_and_never_touch_the_global_generator():
    c = check_expression("torch.randn(4, 3) - torch.randn(4, 3) + torch.rand_like(x) * 0", ["x"])
    state = torch.random.get_rng_state()
    out = Interpreter(c)({"x": torch.zeros(4, 3)})
    assert torch.equal(torch.random.get_rng_state(), state)
    assert bool((out == 0).all())
    other = Interpreter(check_expression("torch.randn(4, 3) - torch.randn(3, 4).T", []))({})
    assert not bool((other == 0).all())


def test_empty_gives_zeros_never_uninitialized_memory():
    out = Interpreter(check_expression("torch.empty(64, 64) + x.new_empty(64, 64) + torch.empty_like(x)", ["x"]))(
        {"x": torch.ones(64, 64)})
    assert bool((out == 0).all())


@pytest.mark.parametrize("source", [
    "x.uniform_(0, 1)",  # in place on an input
    "torch.ones_like(x).add_(1)",  # not a filler
    "torch.zeros(3, device='cuda')",  # a device string
    "x.to('cuda')",
    "batch['__class__']",
    "torch['x']",
    "[torch.exp(v) for v in (x,)]",  # a comprehension outside an argument
    "torch.stack([v for v in x])",  # over a tensor (unbounded)
    "torch.stack([x for x in (batch,)])",  # shadowing an input
    "torch.stack([v for v in (x,) if v])",
    "torch.stack([x[i] for i in range(10 ** 6)])",  # over the sequence limit
])
def test_still_refused_or_rejected(source):
    try:
        c = check_expression(source, ["x", "batch"])
    except Refused:
        return
    from nanlint.verify.sandbox import EvaluationError

    with pytest.raises(EvaluationError):
        Interpreter(c)({"x": torch.ones(3), "batch['__class__']": torch.ones(3)})


def test_the_shape_search_finds_a_rank_the_probe_does_not_state():
    # `x[0].shape[-1]` needs x of rank 2 at least; nothing in the probe says so directly.
    v = run("torch.log(x[0].view(-1, x[0].shape[-1]).exp().sum(-1))",
            "torch.logsumexp(x[0].view(-1, x[0].shape[-1]), -1)", "x")
    assert v.verdict == "confirmed", v.line()
