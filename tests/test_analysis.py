"""The value-flow analysis on small programs: summaries a project index can store, facts with
their evidence, and the rule behaviour that depends on a dtype (no fixture: the calibrated
page sections list fixture files)."""

from __future__ import annotations

import pickle

from nanlint import analysis
from nanlint.lint.engine import lint_source
from nanlint.rules import get_rule
from nanlint.rules.base import LatentFindings

SOURCE = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Policy(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, 4)
        self.act = nn.Softmax(dim=1)

    def forward(self, obs):
        return self.act(self.fc(obs))


def gate(z):
    return torch.sigmoid(z)


def fit():
    w = torch.rand(3, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    return w, opt


def run(x):
    net = Policy(3).half()
    with torch.autocast("cuda"):
        return net(x), gate(x)
'''


def test_summaries_are_plain_picklable_data_with_resolved_evidence():
    summary = analysis.summarize_module(("m.py", SOURCE))
    again = pickle.loads(pickle.dumps(summary))
    assert again == summary
    forward = summary.classes["Policy"].methods["forward"].returns
    assert forward.prob == "softmax" and forward.simplex_dim == "1"
    assert any(e.line == 10 and "Softmax" in e.reason for e in forward.evidence)
    assert summary.classes["Policy"].attributes["act"].module_out.prob == "softmax"
    assert summary.functions["gate"].returns.prob == "sigmoid"
    assert "called under autocast" in (summary.functions["gate"].half or "")
    assert summary.trainable == ("w",)


def test_a_clamp_in_an_earlier_statement_bounds_exp_in_float32_only():
    rules = [get_rule("NAN101")]
    body = (
        "    exponent = torch.clamp(exponent, min=-50, max=50)\n"
        "    return 1.0 / (1.0 + torch.exp(exponent))\n"
    )
    float32 = "import torch\ndef f(exponent):\n" + body
    float16 = "import torch\ndef f(exponent):\n    exponent = exponent.half()\n" + body
    assert lint_source("a.py", float32, rules).diagnostics == []
    found = lint_source("b.py", float16, rules).diagnostics
    assert [(d.code, d.start.row) for d in found] == [("NAN101", 5)]


def test_cuda_autocast_runs_exp_in_float32_so_a_float32_bound_holds_there():
    """CUDA autocast computes `exp` in float32 whatever its input (NUMERICS.md): a bound of
    50 keeps it finite there; CPU float16 autocast leaves `exp` in float16."""
    rules = [get_rule("NAN101")]
    def region(device):
        return (
            "import torch\ndef f(exponent):\n"
            f"    with torch.autocast({device!r}, dtype=torch.float16):\n"
            "        exponent = torch.clamp(exponent, min=-50, max=50)\n"
            "        return 1.0 / (1.0 + torch.exp(exponent))\n"
        )
    assert lint_source("cuda.py", region("cuda"), rules).diagnostics == []
    # A float16 tensor too: autocast casts `exp`'s input to float32 on CUDA.
    assert lint_source("cuda.py", region("cuda").replace("clamp(exponent,", "clamp(exponent.half(),"), rules).diagnostics == []
    (d,) = lint_source("cpu.py", region("cpu"), rules).diagnostics
    assert d.start.row == 5 and "float16 autocast on CPU" in d.message


def test_a_constructor_setting_no_construction_overrides_is_its_default():
    """`self.k = k` with `k=10`: the exponent `k * (x - y)` of two sigmoid maps stays in
    [-10, 10]; a construction in view that passes k=100 is what the class runs with."""
    source = (
        "import torch\nfrom torch import nn\n\n\n"
        "class Step(nn.Module):\n"
        "    def __init__(self, k=10):\n"
        "        super().__init__()\n"
        "        self.k = k\n\n"
        "    def forward(self, a, b):\n"
        "        return self._step(torch.sigmoid(a), torch.sigmoid(b))\n\n"
        "    def _step(self, x, y):\n"
        "        return torch.reciprocal(1 + torch.exp(-self.k * (x - y)))\n"
    )
    bounds = _query_each_call("m.py", source, "torch.exp",
                              lambda ctx, call: (analysis.value(ctx, call.args[0].value).lo,
                                                 analysis.value(ctx, call.args[0].value).hi))
    assert bounds == {14: (-10.0, 10.0)}
    # A default is a setting someone may change, not a guard the code applies: the enforced
    # analysis leaves k unknown, so the form rule reports the spelling and says the bound.
    enforced = _query_each_call("m.py", source, "torch.exp",
                                lambda ctx, call: analysis.enforced_value(ctx, call.args[0].value).hi)
    assert enforced == {14: float("inf")}
    rules = [get_rule("NAN101")]
    (d,) = lint_source("m.py", source, rules).diagnostics
    assert d.start.row == 14 and "at most 10" in d.message and "does not enforce" in d.message
    built = source + "\n\nstep = Step(k=100)\n"
    assert [d.start.row for d in lint_source("m.py", built, rules).diagnostics] == [14]
    unknown = source + "\n\ndef make(k):\n    return Step(k)\n"
    assert [d.start.row for d in lint_source("m.py", unknown, rules).diagnostics] == [14]


def test_a_softmax_through_a_model_is_log_softmax_cited_where_it_came_from():
    # The log of a model's softmax output is NAN102's form (NAN201 leaves it), reported where
    # the log is with where the softmax came from, and probed along the softmax's own dim.
    source = SOURCE + "\n\ndef loss(x):\n    model = Policy(3)\n    return torch.log(model(x)).sum()\n"
    assert lint_source("m.py", source, [get_rule("NAN201")]).diagnostics == []
    (d,) = lint_source("m.py", source, [get_rule("NAN102")]).diagnostics
    assert d.start.row == 34 and d.fix is None
    assert "`self.act` output at line 13" in d.message and "`Policy.forward`" in d.message
    assert (d.probe.original, d.probe.fixed) == (
        "torch.log(torch.softmax(logits, dim=1))", "torch.log_softmax(logits, dim=1)")


def test_branch_refinement_and_relations_die_on_reassignment():
    rules = [get_rule("NAN104")]
    safe = "import torch\ndef f(a, b):\n    if a > b:\n        return a + torch.log1p(torch.exp(b - a))\n"
    lost = "import torch\ndef f(a, b, c):\n    if a > b:\n        a = c\n        return a + torch.log1p(torch.exp(b - a))\n"
    assert lint_source("a.py", safe, rules).diagnostics == []
    assert [d.start.row for d in lint_source("b.py", lost, rules).diagnostics] == [5]


def test_a_masked_mean_probes_its_mask_as_a_mask():
    source = "import torch\ndef f(pred, target, valid):\n    return (pred - target).abs()[valid].mean()\n"
    (d,) = lint_source("m.py", source, [get_rule("NAN113"), LatentFindings]).diagnostics
    (valid,) = [i for i in d.probe.inputs if i.name == "valid"]
    assert (valid.kind, valid.domain) == ("mask", (0.0, 1.0))


def test_relations_between_a_max_and_a_min_of_the_same_tensor():
    import libcst as cst

    from nanlint.core.context import FileContext
    from nanlint.analysis.precision import Precision

    source = (
        "import torch\n"
        "def scale(x, y):\n"
        "    hi = x.max()\n"
        "    lo = torch.min(x)\n"
        "    other = y.min()\n"
        "    return (x - lo) / (hi - lo)\n"
    )
    module = cst.parse_module(source)
    ctx = FileContext("m.py", source, module)
    ctx.precision = Precision(ctx)
    fn = module.body[1]
    ret = fn.body.body[-1]
    ctx.stack = [module, fn, fn.body, ret]  # as the engine has it at the return
    assert analysis.relations(ctx, ["hi", "lo", "other"]) == (("hi", ">=", "lo"),)


def test_a_clamp_past_the_whole_range_moves_both_ends():
    """`zeros(()).clamp(min=1.0)` is 1: the clamp used to keep the old top, an empty range
    [1, 0] whose reciprocal divided by zero (internal errors in NAN122, NAN125, NAN127)."""
    from nanlint.analysis import transfer
    from nanlint.analysis.values import interval, point

    def clamp(v, **bounds):
        out = transfer.clamp([v], {k: point(b) for k, b in bounds.items()}, {}, 1)
        return out.lo, out.hi

    assert clamp(point(0.0), min=1.0) == (1.0, 1.0)
    assert clamp(interval(-3.0, -2.0), min=0.0) == (0.0, 0.0)
    assert clamp(interval(5.0, 9.0), max=3.0) == (3.0, 3.0)
    assert clamp(interval(0.0, 9.0), min=1.0, max=3.0) == (1.0, 3.0)
    rules = [get_rule(code) for code in ("NAN122", "NAN125", "NAN127")]
    source = (
        "import torch\n"
        "class Welford(torch.nn.Module):\n"
        "    def __init__(self, shape):\n"
        "        super().__init__()\n"
        "        self.register_buffer('m2', torch.zeros(shape))\n"
        "        self.register_buffer('count', torch.zeros(()))\n"
        "    def scale(self):\n"
        "        return (self.m2 / self.count.clamp(min=1.0)).clamp(min=1e-5).sqrt()\n"
    )
    assert (lint_source("m.py", source, rules).errors, lint_source("m.py", source, rules).diagnostics) == ([], [])


def test_a_clamp_at_zero_is_cited_across_statements_and_undone_by_an_epsilon():
    rules = [get_rule("NAN122")]
    source = (
        "import torch\n"
        "def dist(a):\n"
        "    sq = (a ** 2).sum(-1)\n"
        "    d2 = (sq[:, None] + sq[None] - 2 * a @ a.T).clamp(min=0)\n"
        "    return d2.sqrt()\n"
    )
    found = lint_source("m.py", source, rules).diagnostics
    assert [(d.start.row, d.code) for d in found] == [(5, "NAN122")]
    assert "clamp at line 4" in found[0].message
    guarded = source.replace("    return d2.sqrt()\n", "    d2 = d2 + 1e-12\n    return d2.sqrt()\n")
    assert lint_source("m.py", guarded, rules).diagnostics == []


def test_no_gradient_is_taken_through_a_custom_autograd_function():
    rules = [get_rule("NAN122")]
    body = (
        "    @staticmethod\n"
        "    def forward(ctx, d):\n"
        "        return torch.sqrt(d.clamp(min=0))\n"
    )
    custom = "import torch\nfrom torch.autograd import Function\nclass F(Function):\n" + body
    module = "import torch\nclass F(torch.nn.Module):\n" + body
    assert lint_source("m.py", custom, rules).diagnostics == []
    assert [d.code for d in lint_source("m.py", module, rules).diagnostics] == ["NAN122"]


# ---------------------------------------------------------------- parameter facts from call sites

HELPERS = '''\
import torch


def gated(a):
    return gate(a.clamp(-20.0, 20.0))


def gate(z):
    return 1 / (1 + torch.exp(-z))


def scores(logits):
    return nll(torch.softmax(logits, dim=-1))


def nll(p):
    return -torch.log(p).mean()
'''


def _findings(path, source):
    # The log of a parameter every call passes a softmax is NAN102's form; where callers the
    # file cannot see may pass anything, NAN201's value finding (a call passes one that can be 0).
    rules = [get_rule("NAN101"), get_rule("NAN102"), get_rule("NAN201")]
    return sorted((d.code, d.start.row) for d in lint_source(str(path), source, rules).diagnostics)


def _package_module(tmp_path, source, name):
    """`source` written as `pkg/<name>`, a module of a package (callers elsewhere are plausible)."""
    package = tmp_path / "pkg"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    module = package / name
    module.write_text(source)
    return module


def _script_and_package_module(tmp_path, source, name):
    """`source` written as a script (`train.py`, no package) and as `pkg/<name>` (a module of
    a package), with the findings in each."""
    script = tmp_path / "train.py"
    script.write_text(source)
    module = _package_module(tmp_path, source, name)
    return script, _findings(script, source), module, _findings(module, source)


def test_call_sites_bound_a_helper_only_where_no_outside_caller_is_plausible(tmp_path):
    """A script (no package): the file's calls are all the calls, the clamp bounds `gate`.
    A public function of a package module: callers elsewhere may pass anything, so the
    clamp does not make it safer than unknown, while the softmax still raises NAN201 (where
    the file's calls are all the calls, `log(p)` is `log(softmax)`: NAN102)."""
    _, in_script, module, in_package = _script_and_package_module(tmp_path, HELPERS, "ops.py")
    assert in_script == [("NAN102", 17)]
    assert in_package == [("NAN101", 9), ("NAN201", 17)]
    # The same module with private helpers: the file's calls are all the calls again.
    private = HELPERS.replace("gate(", "_gate(").replace("nll(", "_nll(")
    module.write_text(private)
    assert _findings(module, private) == [("NAN102", 17)]
    # ...and a script guard makes a package module a script.
    guarded = HELPERS + '\n\nif __name__ == "__main__":\n    gated(torch.zeros(3))\n'
    module.write_text(guarded)
    assert _findings(module, guarded) == [("NAN102", 17)]


def test_a_call_site_fact_is_cited_and_unknown_callers_add_nothing(tmp_path):
    source = HELPERS + "\n\ndef other(x):\n    return nll(x)\n"
    module = _package_module(tmp_path, source, "ops.py")
    (d,) = [d for d in lint_source(str(module), source, [get_rule("NAN201")]).diagnostics]
    assert "softmax at line 13, passed as `p` at line 13" in d.message
    # A helper only called with values nothing is known about is not reported.
    plain = "import torch\n\n\ndef f(x):\n    return _g(x * 2)\n\n\ndef _g(v):\n    return torch.log(v)\n"
    assert lint_source("s.py", plain, [get_rule("NAN201")]).diagnostics == []


def test_self_method_and_init_default_reach_the_probe():
    """`self.k = k` with `k=50` a default and no call passing it: the probe holds 50; the
    step function's inputs are the sigmoid maps its caller passes."""
    from nanlint.rules import all_rules

    path = "fixtures/NAN101_dbnet_head.py"
    from pathlib import Path

    source = (Path(__file__).resolve().parent.parent / path).read_text()
    (d,) = [d for d in lint_source(path, source, all_rules()).diagnostics if d.code == "NAN101"]
    inputs = {i.name: i for i in d.probe.inputs}
    assert inputs["self.k"].value == 50.0 and "default `k=50`" in inputs["self.k"].evidence
    for name, head in (("x", "binarize"), ("y", "thresh")):
        assert (inputs[name].kind, inputs[name].domain) == ("probability", (0.0, 1.0))
        assert f"`self.{head}` output" in inputs[name].evidence and f"passed as `{name}`" in inputs[name].evidence
    # Built in the file with k=100: the calls' value, not the default (with k=10 the
    # exponent stays within [-10, 10], finite even in float16: not reported).
    built_here = "TextDetectionHead(in_channels)"
    assert built_here in source
    built = source.replace(built_here, "TextDetectionHead(in_channels, k=100)")
    (d,) = [d for d in lint_source(path, built, all_rules()).diagnostics if d.code == "NAN101"]
    assert {i.name: i.value for i in d.probe.inputs}["self.k"] == 100.0
    small = source.replace(built_here, "TextDetectionHead(in_channels, k=10)")
    # Without the `.half()`: float32, where an exponent of at most 50 keeps exp finite for the
    # default; but the default is not a guard, so the form rule reports it and says the bound.
    float32 = source.replace(".cuda().half()", ".cuda()")
    assert float32 != source
    (d,) = [d for d in lint_source(path, float32, all_rules()).diagnostics if d.code == "NAN101"]
    assert "at most 50" in d.message and "float16" not in d.message.split("at most 50")[1]
    # Built in view with k=10, a value the code passes: exp stays finite even in float16.
    assert [d for d in lint_source(path, small, all_rules()).diagnostics if d.code == "NAN101"] == []


def test_recursion_and_mutual_recursion_are_cut():
    source = (
        "import torch\n\n\n"
        "def _a(p, n):\n    return torch.log(p) if n == 0 else _b(p, n - 1)\n\n\n"
        "def _b(p, n):\n    return _a(p, n)\n\n\n"
        "def run(x):\n    return _a(torch.softmax(x, -1), 3)\n"
    )
    found = lint_source("r.py", source, [get_rule("NAN201")]).diagnostics
    # The call from `run` passes a softmax; the recursive calls add the unknown value,
    # which keeps the reason for 0 (a join) and nothing loops.
    assert [(d.code, d.start.row) for d in found] == [("NAN201", 5)]


def test_in_a_package_a_method_called_only_through_self_trusts_its_callers(tmp_path):
    source = (
        "import torch\n\n\n"
        "class Attention(torch.nn.Module):\n"
        "    def forward(self, scores):\n"
        "        return self.squash(scores.clamp(-30.0, 30.0))\n\n"
        "    def squash(self, s):\n"
        "        return 1.0 / (1.0 + torch.exp(-s))\n"
    )
    module = _package_module(tmp_path, source, "attention.py")
    assert _findings(module, source) == []
    # Called on an object the file cannot resolve: it may be this method, with anything.
    loose = source + "\n\ndef score(layer, s):\n    return layer.squash(s)\n"
    module.write_text(loose)
    assert _findings(module, loose) == [("NAN101", 9)]


def test_probes_take_the_calls_values_even_where_the_rules_may_not(tmp_path):
    """A public function of a package: the rule may not assume its callers are all in the
    file, but the probe's domain is what the file's calls produce."""
    module = _package_module(tmp_path, HELPERS, "ops.py")
    (d,) = [d for d in lint_source(str(module), HELPERS, [get_rule("NAN201")]).diagnostics]
    (p,) = [i for i in d.probe.inputs if i.name == "p"]
    assert (p.kind, p.dim, p.domain) == ("simplex", -1, (0.0, 1.0))
    assert "passed as `p`" in p.evidence


def test_only_values_that_may_hold_a_callers_argument_consult_the_calls():
    import libcst as cst

    from nanlint.analysis.callsites import depends_on_parameters, parameter_dependents

    fn = cst.parse_module(
        "def f(p, n, *rest):\n"
        "    q = p * 2\n"
        "    for row in q:\n"
        "        acc.add_(row)\n"
        "    z = torch.zeros(3)\n"
        "    w = z + 1\n"
        "    self.scale = n\n"
        "    def inner(p2):\n"
        "        z = p2\n"
    ).body[0]
    assert parameter_dependents(fn) == {"p", "n", "rest", "q", "row", "acc", "self.scale"}
    memo = {}
    assert depends_on_parameters(fn, cst.parse_expression("torch.log(q.sum(-1))"), memo)
    assert depends_on_parameters(fn, cst.parse_expression("self.scale.exp()"), memo)
    assert not depends_on_parameters(fn, cst.parse_expression("torch.log(w)"), memo)
    method = cst.parse_module("def m(self, x):\n    y = self.w * x\n").body[0]
    assert parameter_dependents(method, method=True) == {"x", "y"}
    assert not depends_on_parameters(method, cst.parse_expression("self.w.exp()"), {}, method=True)


def test_a_join_cites_the_evidence_of_the_zero_reason_it_keeps():
    from nanlint.analysis.values import Evidence, Value, join

    softmax = Value(lo=0.0, hi=1.0, zero="a softmax output", evidence=(Evidence(3, "softmax"),))
    sigmoid = Value(lo=0.0, hi=1.0, zero="a sigmoid output", evidence=(Evidence(5, "sigmoid"),))
    clamped = Value(lo=1e-6, hi=1.0, nonzero=True, evidence=(Evidence(7, "clamp(min=1e-6)"),))
    for a, b in ((softmax, sigmoid), (softmax, clamped), (clamped, sigmoid)):
        both = join(a, b)
        kept = a if a.zero else b
        assert both.zero == kept.zero
        assert both.evidence[-1] == kept.evidence[-1]


# ---------------------------------------------------------------- gradient flow

GRADIENTS = '''\
import torch


class Step(torch.optim.Optimizer):
    def step(self):
        for p in self.params:
            torch.sqrt(p)


def f(x, w):
    d = x.detach()
    torch.sqrt(d)
    with torch.no_grad():
        t = x * 2
        torch.sqrt(x)
    torch.sqrt(t)
    torch.sqrt(x)
    r = torch.randn(3)
    torch.sqrt(r * w)
    torch.sqrt(r * 2)
    r[:, 0] = w
    torch.sqrt(r)
    torch.sqrt(x).item()
'''


def _query_each_call(path: str, source: str, function: str, query) -> dict:
    """`query(ctx, call)` at every call of `function` in `source`, by line."""
    import libcst as cst

    from nanlint.core.context import FileContext
    from nanlint.rules.base import Rule

    seen = {}

    class Probe(Rule):
        code = "NAN999"
        name = "probe"
        message = "-"

        def visit_Call(self, node: cst.Call, ctx: FileContext) -> None:
            if ctx.qualname(node.func) == function:
                seen[ctx.span(node)[0].row] = query(ctx, node)

    lint_source(path, source, [Probe])
    return seen


def _no_gradient_of_each_sqrt(path: str, source: str) -> dict:
    """`analysis.no_gradient` of every `torch.sqrt(...)` call of `source`, by line."""
    return _query_each_call(path, source, "torch.sqrt", analysis.no_gradient)


def test_no_gradient_says_why_with_the_line_of_its_evidence():
    seen = _no_gradient_of_each_sqrt("m.py", GRADIENTS)
    assert "in the optimizer step `Step.step`" in seen[7]
    assert seen[12] == "`.detach()` at line 11"
    assert seen[15] == "under `torch.no_grad()` at line 13"
    assert seen[16] == "under `torch.no_grad()` at line 13"  # computed there, read after it
    assert seen[17] is None  # a parameter: training may differentiate it
    assert seen[19] is None  # a product with a parameter
    assert seen[20] == "made by `torch.randn` without `requires_grad` at line 18"
    assert seen[22] is None  # a parameter was written into it
    assert seen[23] == "its value is only read by `.item()`"


CALLED_WITHOUT_AUTOGRAD = '''import numpy as np
import torch


def _means(x):
    return torch.sqrt(x)


def _via(x):
    return _means(x)


def public(x):
    return torch.sqrt(x)


def _trained(x):
    return torch.sqrt(x)


class Mixture(torch.nn.Module):
    @torch.no_grad()
    def initialize(self, x):
        self.a = _via(x)
        self.b = public(x) + _trained(x)

    def forward(self, x):
        return _trained(x)


def weights(labels):
    return torch.sqrt(np.bincount(labels))
'''


def test_no_gradient_where_every_call_of_a_private_helper_is_under_no_grad(tmp_path):
    # In a package module, a public function may have callers elsewhere that differentiate it.
    _, _, module, _ = _script_and_package_module(tmp_path, CALLED_WITHOUT_AUTOGRAD, "mixture.py")
    seen = _no_gradient_of_each_sqrt(str(module), CALLED_WITHOUT_AUTOGRAD)
    assert seen[6] == "`_means` is only called from `_via`; `_via` is only called under `torch.no_grad()` at line 22"
    assert seen[14] is None  # public: callers outside the file
    assert seen[18] is None  # also called from `forward`
    assert seen[32] == "a NumPy array (`np.bincount(...)`) at line 32"


RECURSIVE_HELPER = '''\
import torch
from torch.autograd import Function


def _threshold(x, k=None):
    if k is not None:
        return _threshold(x[..., :k])
    return torch.sqrt(torch.clamp(1 - x.cumsum(-1), 0))


def _alone(x, k):
    if k:
        return _alone(x, k - 1)
    return torch.sqrt(torch.clamp(1 - x, 0))


class Threshold(Function):
    @classmethod
    def forward(cls, ctx, x, k=None):
        return _threshold(x, k)

    @classmethod
    def backward(cls, ctx, grad):
        return grad, None
'''


def test_a_helper_that_also_calls_itself_runs_where_its_callers_do(tmp_path):
    # A partial-sort fallback calls the helper again from inside it; its one outside call
    # is in a custom Function's forward, where autograd does not record.
    _, _, module, _ = _script_and_package_module(tmp_path, RECURSIVE_HELPER, "entmax.py")
    seen = _no_gradient_of_each_sqrt(str(module), RECURSIVE_HELPER)
    assert seen[8] is not None and seen[8].startswith("`_threshold` is only called")
    assert seen[14] is None  # only its own recursive call: nothing says where it runs


def test_a_summary_keeps_the_no_gradient_fact_with_its_line():
    source = "import torch\n\n\ndef frozen(x):\n    return x.detach()\n"
    summary = analysis.summarize_module(("m.py", source))
    fact = summary.functions["frozen"].returns.nograd
    assert fact is not None and fact.line == 5 and "detach" in fact.reason
    from nanlint.analysis.summaries import value_from_data, value_to_data

    back = value_from_data(value_to_data(summary.functions["frozen"].returns), "pkg/m.py")
    assert back.nograd.reason == "`.detach()` at pkg/m.py:5"


def test_a_summary_keeps_the_elements_of_a_returned_tuple():
    source = "import torch\n\n\ndef gate(x):\n    return torch.sigmoid(x), x\n"
    summary = analysis.summarize_module(("m.py", source))
    returned = summary.functions["gate"].returns
    assert [k for k, _ in returned.members] == ["0", "1"]
    assert returned.members[0][1].prob == "sigmoid" and returned.members[1][1].prob is None
    from nanlint.analysis.summaries import value_from_data, value_to_data

    back = value_from_data(value_to_data(returned), "pkg/m.py")
    assert back.members[0][1].prob == "sigmoid"
    assert "pkg/m.py:5" in back.members[0][1].evidence[-1].reason


GATED = '''\
import torch
from torch import nn


class Gate(nn.Module):
    def forward(self, p):
        return torch.log(p)


class Squash(nn.Module):
    def forward(self, z):
        return 1 / (1 + torch.exp(-z))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = Gate()
        self.squash = Squash()

    def forward(self, x):
        return self.gate(torch.softmax(x, -1)) + self.squash(x.clamp(-10.0, 10.0))
'''


def test_forward_takes_what_the_instances_calls_pass_under_the_policy(tmp_path):
    """`self.gate(p)` runs `Gate.forward`: the softmax it passes raises NAN201 wherever the
    file lives; the clamp at the only call bounds `Squash.forward`'s exponent in a script or
    for a private class, never for a public class of a package module."""
    script, in_script, module, in_package = _script_and_package_module(tmp_path, GATED, "layers.py")
    assert in_script == [("NAN102", 7)]
    assert in_package == [("NAN101", 12), ("NAN201", 7)]
    private = GATED.replace("Squash", "_Squash")
    module.write_text(private)
    assert _findings(module, private) == [("NAN201", 7)]  # `Gate` is still public
    # Every call clamps the softmax: quiet in a script, for a private class of a package
    # module, and for a public one (the clamp is dropped there, and an unknown `p` is no
    # reason for 0).
    clamped = GATED.replace("torch.softmax(x, -1)", "torch.softmax(x, -1).clamp(min=1e-6)")
    for where, text in ((script, clamped), (module, clamped.replace("Gate", "_Gate")), (module, clamped)):
        where.write_text(text)
        assert [f for f in _findings(where, text) if f[0] in ("NAN102", "NAN201")] == []
    # A class with its own `__call__`: `inst(x)` does not run `forward`.
    called = GATED.replace("class Gate(nn.Module):\n", "class Gate(nn.Module):\n    def __call__(self, p):\n        return p\n\n")
    script.write_text(called)
    assert _findings(script, called) == []
    # The instance escapes (stored in a list the file never calls through): the clamp no longer
    # speaks for every call, the softmax still does.
    escaped = GATED + "\n\nREGISTRY = [Squash()]\n"
    script.write_text(escaped)
    assert _findings(script, escaped) == [("NAN101", 12), ("NAN102", 7)]


def test_forward_through_explicit_calls_and_super():
    source = (
        "import torch\nfrom torch import nn\n\n\n"
        "class Base(nn.Module):\n"
        "    def forward(self, p):\n"
        "        return torch.log(p)\n\n\n"
        "class Child(Base):\n"
        "    def forward(self, x):\n"
        "        return super().forward(torch.sigmoid(x))\n\n\n"
        "class Other(nn.Module):\n"
        "    def forward(self, q):\n"
        "        return torch.log(q)\n\n\n"
        "def run(x):\n"
        "    return Other().forward(torch.softmax(x, 0))\n"
    )
    found = lint_source("m.py", source, [get_rule(c) for c in ("NAN102", "NAN103", "NAN201")]).diagnostics
    # `super().forward(sigmoid)`: every call is seen, the log is `logsigmoid`'s form (NAN103);
    # `Other().forward(softmax)` on a public class is not trusted to be every call, so a
    # softmax that can be 0 is passed (NAN201's value finding), not `log_softmax`'s form.
    assert sorted((d.code, d.start.row) for d in found) == [("NAN103", 7), ("NAN201", 17)]


def test_forward_of_module_list_members_trusts_calls_only_while_the_list_stays_in_view():
    """Members of `nn.ModuleList([...])` are called through `self.bounded[i](x)` or a loop over
    it; once the list is passed on, the clamps at the calls the file shows stop bounding."""
    source = (
        "import torch\nfrom torch import nn\n\n\n"
        "class Bounded(nn.Module):\n"
        "    def forward(self, z):\n"
        "        return 1 / (1 + torch.exp(-z))\n\n\n"
        "class Stack(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.bounded = nn.ModuleList([Bounded() for _ in range(3)])\n\n"
        "    def forward(self, x):\n"
        "        y = self.bounded[0](x.clamp(-5.0, 5.0))\n"
        "        for block in self.bounded:\n"
        "            y = y + block(x.clamp(-5.0, 5.0))\n"
        "        return y\n"
    )
    assert _findings("stack.py", source) == []
    escaped = source + "\n\ndef hooks(model):\n    return register(model.bounded)\n"
    assert _findings("stack.py", escaped) == [("NAN101", 7)]


def test_the_probe_of_forward_takes_the_domain_its_instances_calls_pass(tmp_path):
    """Probes trust the calls the file shows all of, a public class of a package included:
    the verifier draws `p` from the simplex the only call passes."""
    module = _package_module(tmp_path, GATED, "layers.py")
    (d,) = [d for d in lint_source(str(module), GATED, [get_rule("NAN201")]).diagnostics]
    (p,) = [i for i in d.probe.inputs if i.name == "p"]
    assert (p.kind, p.dim, p.domain) == ("simplex", -1, (0.0, 1.0))
    assert "passed as `p`" in p.evidence
    # Also named in a string (a registry by name may build it): any `p`, no domain.
    named = GATED + '\n\nLAYERS = {"gate": "Gate"}\n'
    (d,) = [d for d in lint_source(str(module), named, [get_rule("NAN201")]).diagnostics]
    assert [i for i in d.probe.inputs if i.name == "p" and i.kind == "simplex"] == []


def test_a_norm_makes_unit_vectors_and_a_dot_product_over_norms_a_cosine():
    source = (
        "import torch\n"
        "def f(x, y, w):\n"
        "    u = x / x.norm(dim=-1, keepdim=True)\n"
        "    v = y / (torch.linalg.vector_norm(y, dim=-1, keepdim=True) + 1e-8)\n"
        "    a = torch.acos((u * v).sum(-1))\n"
        "    b = torch.acos(torch.einsum('nd,nd->n', x, y) / (x.norm(dim=-1) * y.norm(dim=-1)))\n"
        "    c = torch.acos(x / w.norm(dim=-1, keepdim=True))\n"
        "    d = torch.acos(x / x.norm(p=1, dim=-1, keepdim=True))\n"
        "    e = torch.acos(x / x.norm(dim=-1, keepdim=True).clamp(max=1.0))\n"
        "    n = y.norm(dim=-1, keepdim=True)\n"
        "    g = torch.acos(((y / n) * (y / n)).sum(-1))\n"
        "    return a, b, c, d, e, g\n"
    )
    def facts_of(ctx, call):
        v = analysis.value(ctx, call.args[0].value)
        return v.cosine, v.unit, analysis.cite(ctx, v)

    facts = _query_each_call("m.py", source, "torch.acos", facts_of)
    assert facts[5][:2] == (True, False) and "divided by its norm at line 3" in facts[5][2]
    assert facts[6][:2] == (True, False) and "a dot product divided by norms at line 6" in facts[6][2]
    # Another tensor's norm, an L1 norm, a norm clamped from above: no unit vector.
    assert [facts[line][:2] for line in (7, 8, 9)] == [(False, False)] * 3
    # Evidence found inside parentheses keeps its line.
    assert facts[11][0] and "`y` divided by its norm at line 11" in facts[11][2]


def test_a_uniform_sample_is_known_until_it_is_kept_off_zero():
    source = (
        "import torch\n"
        "def g(logits, n):\n"
        "    u = torch.rand_like(logits)\n"
        "    a = torch.log(u)\n"
        "    c = torch.rand(n).clamp(torch.finfo(logits.dtype).tiny, 1.0)\n"
        "    b = torch.log(c)\n"
        "    w = torch.empty(n).uniform_()\n"
        "    d = torch.log(w)\n"
        "    e = torch.log(0.98 * torch.rand(n) + 0.01)\n"
        "    f = torch.log(torch.empty(n).uniform_(-1, 1))\n"
        "    return a, b, d, e, f\n"
    )
    facts = _query_each_call("m.py", source, "torch.log",
                             lambda ctx, call: analysis.uniform_sample(ctx, call.args[0].value))
    assert facts[4] and facts[8]
    # Clamped at finfo.tiny, shifted off 0, or not on [0, 1): not the sample the rules mean.
    assert [facts[line] for line in (6, 9, 10)] == [None, None, None]


def test_a_module_constant_is_summarized_for_the_files_that_import_it():
    from nanlint.analysis.summaries import constant_data

    text = '"""Limits."""\nNEAR_INF = 1e20  # too big for float16\nSCALE: float = 1_000.5\nN = 3\nN = 4\nNAME = "x"\n'
    assert constant_data(text, "NEAR_INF") == {"kind": "constant", "value": 1e20, "line": 2}
    assert constant_data(text, "SCALE") == {"kind": "constant", "value": 1000.5, "line": 3}
    assert constant_data(text, "N") is None  # assigned twice: no one value
    assert constant_data(text, "NAME") is None  # not a number
    assert constant_data("def f():\n    LOCAL = 1.0\n", "LOCAL") is None  # not at module level


def test_a_long_guarded_expression_is_named_by_what_it_does_not_by_a_placeholder():
    source = (
        "import torch\n\n\n"
        "def attn(q, k_cumsum):\n"
        "    with torch.autocast('cuda', dtype=torch.float16):\n"
        "        return 1. / (torch.einsum('...nd,...d->...n', q, k_cumsum.type_as(q)) + 1e-8)\n"
    )
    (d,) = lint_source("m.py", source, [get_rule("NAN202")]).diagnostics
    assert "the guard does nothing and the division still sees an exact 0" in d.message
    assert "`the expression`" not in d.message


# ------------------------------------------------ flows issue 33 names (containers, scripts)

CONTAINERS = """\
import torch
import torch.nn.functional as F
from torch.autograd import Variable


def kept(policy, batches, rewards):
    picked, safe = [], []
    for obs, actions in batches:
        prob = F.softmax(policy(obs), dim=-1)
        picked.append((rewards, prob.gather(1, actions)))
        safe.append(prob.gather(1, actions).clamp(min=1e-6))
    for r, p in picked[::-1]:
        a = torch.log(p)
    for s in safe:
        b = torch.log(s)
    listed = [F.softmax(policy(o), dim=-1) for o in batches]
    for p, r in zip(listed, rewards):
        c = torch.log(p)
    d = torch.log(torch.stack([q for q in listed]))
    wrapped = Variable(F.softmax(policy(batches), dim=1))
    e = torch.log(wrapped)
    top = F.softmax(policy(batches), dim=1).max(1)[0]
    f = torch.log(top)
"""


def test_flow_facts_containers_keep_what_their_elements_are():
    """Shape 1 (a probability kept in a container and read back): `append` of a tuple, a
    reversed slice, `zip`, a list comprehension, `torch.stack`; shape 3: `Variable(x)` is x.
    The max of a softmax row is at least 1/n: never 0."""
    zero = _query_each_call("m.py", CONTAINERS, "torch.log",
                            lambda ctx, call: analysis.value(ctx, call.args[0].value).zero)
    assert zero[13] == "a softmax output"  # for r, p in picked[::-1]
    assert zero[15] is None  # each element was clamped before it was kept
    assert zero[18] == "a softmax output"  # zip(list comprehension, ...)
    assert zero[19] == "a softmax output"  # torch.stack of the list
    assert zero[21] == "a softmax output"  # Variable(softmax)
    assert zero[23] is None  # the largest probability of a row
    reasons = _query_each_call("m.py", CONTAINERS, "torch.log",
                               lambda ctx, call: analysis.zero_reason(ctx, call.args[0].value))
    assert "kept in `picked` at line 10" in reasons[13][1]


METHOD_FILLED = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.data = []

    def train_net(self):
        for r, prob in self.data:
            loss = -torch.log(prob) * r

    def forward(self, x):
        return F.softmax(self.fc(x), dim=-1)

    def put_data(self, item):
        self.data.append(item)


def main(states, actions):
    pi = Policy()
    for s, a in zip(states, actions):
        pi.put_data((1.0, pi(s)[a]))
    pi.train_net()
"""


def test_flow_facts_a_list_one_method_fills_and_another_reads():
    """Shape 1 across methods: `put_data` appends what its callers pass, `train_net` (defined
    before it) iterates the list: its loop target is the softmax output the caller passed."""
    reasons = _query_each_call("m.py", METHOD_FILLED, "torch.log",
                               lambda ctx, call: analysis.zero_reason(ctx, call.args[0].value))
    reason, cited = reasons[14]
    assert reason == "a softmax output" and "kept in `self.data` at line 20" in cited


def test_flow_facts_a_raw_layer_output_is_the_last_thing_the_value_went_through(tmp_path):
    """NAN127's fact: `self.var(h)` straight from an nn.Linear can be negative. A sigmoid of
    one, passed to a public function of a package (whose entry joins the callers' values
    with the unknown: bounds dropped), is not a raw output (a real-bugs false alarm)."""
    from nanlint.rules import get_rule

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = (
        "import torch\nimport torch.nn as nn\n\n\n"
        "def log_gate(gate_score):\n    return torch.log(gate_score)\n\n\n"
        "class Gated(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
        "        self.proj = nn.Linear(d, 1)\n        self.var = nn.Linear(d, 1)\n\n"
        "    def forward(self, h):\n        return log_gate(torch.sigmoid(self.proj(h))), torch.log(self.var(h))\n"
    )
    path = package / "gated.py"
    path.write_text(source)
    found = [(d.start.row, d.code) for d in lint_source(str(path), source, [get_rule("NAN127")]).diagnostics]
    assert found == [(16, "NAN127")]


# ---------------------------------------------------------------- where a value's uses go

REGION = '''\
import torch


def f(a, clip, frames):
    max(1, round(float(torch.exp(a) - 1)))
    torch.clamp_min(torch.ceil(torch.exp(a) - 1), 1)
    torch.ceil(torch.exp(a) - 1)
    (torch.exp(a) - 1).abs() > clip
    (torch.exp(a) - 1) > 0
    (torch.exp(a) - 1).clamp(min=0.5)
    ((torch.exp(a) - 1) / a).round()
    ((torch.exp(a) - 1) / frames).round()
    n = torch.exp(a) - 1
    n = n.clamp(min=1.0)
    kept = n.sum()
'''


def test_region_discarded_names_the_consumer_that_throws_the_values_near_0_away():
    import libcst as cst

    from nanlint.analysis.uses import region_discarded

    def query(ctx, node):
        parent = [n for n in ctx.stack if isinstance(n, cst.BinaryOperation)]
        return region_discarded(ctx, parent[-1], 0.01) if parent else None

    seen = _query_each_call("m.py", REGION, "torch.exp", query)
    assert seen[5] == "rounded to an integer (`round`)"
    assert seen[6] == "rounded, then floored at 1"
    assert seen[7] is None  # ceil tells 1e-9 from 0: it needs a floor of at least 1 after it
    assert seen[8] == "only compared with a threshold"
    assert seen[9] is None  # a test against 0 is where the relative error lies
    assert seen[10] == "clamped to at least 0.5, which overwrites the values near 0"
    assert seen[11] is None  # divided by what shrinks with it: the error grows
    assert seen[12] == "rounded to an integer (`.round()`)"
    # Reassigned in the same block: the reads after it see the clamped value.
    assert seen[13] == "clamped to at least 1, which overwrites the values near 0"


FRAME = '''\
import torch


def frame(edges, w):
    length = torch.sqrt((edges ** 2).sum(-1, keepdim=True))
    x_axis = edges / length
    z_axis = torch.cross(x_axis, torch.roll(x_axis, 1, -1), dim=-1)
    out = torch.stack([x_axis, z_axis], dim=-1)
    out = out.transpose(-1, -2)
    return out.detach()


def kept(edges):
    length = torch.sqrt((edges ** 2).sum(-1, keepdim=True))
    out = torch.stack([edges / length, edges], dim=-1)
    return out
'''


def test_no_gradient_follows_uses_through_stacked_lists_and_a_chain_of_names():
    seen = _no_gradient_of_each_sqrt("m.py", FRAME)
    assert seen[5] == "its value is only read by `.detach()`"
    assert seen[14] is None  # returned as it is


def test_a_range_loop_binds_an_integer_index_and_math_constants_are_numbers():
    import math

    source = (
        "import math\nimport torch\n\n\ndef f(x, n):\n"
        "    for k in range(1, n):\n        torch.sin(k * x)\n"
        "    for i in range(n):\n        torch.sin(i * x)\n"
        "    for c in (1, 3, 5):\n        torch.sin(c * x)\n"
        "    torch.sin(2 * math.pi * x)\n"
    )

    def factor(ctx, node):
        v = analysis.value(ctx, node.args[0].value.left)
        return v.lo, v.integer, v.excludes_zero

    seen = _query_each_call("m.py", source, "torch.sin", factor)
    assert seen[7] == (1.0, True, True)
    assert seen[9] == (0.0, True, False)
    assert seen[11] == (1.0, True, True)
    assert seen[12][0] == 2 * math.pi and seen[12][2]


def test_a_helper_called_through_partial_takes_the_values_its_holder_is_called_with():
    source = (
        "from functools import partial\nimport torch\nfrom torch import nn\n\n\n"
        "def _gate(x, k):\n    return torch.sqrt(x * k)\n\n\n"
        "class M(nn.Module):\n"
        "    def __init__(self, n, k=2.0):\n        super().__init__()\n"
        "        self.register_buffer('stats', torch.ones(n))\n"
        "        self.gate = partial(_gate, k=k)\n\n"
        "    def forward(self, h):\n        return h * self.gate(self.stats)\n"
    )
    seen = _no_gradient_of_each_sqrt("m.py", source)
    assert seen[7] is not None and "torch.ones" in seen[7]
    escaped = source + "\n\ndef other(m):\n    return m.gate\n"
    assert _no_gradient_of_each_sqrt("m.py", escaped)[7] is None  # the holder is read elsewhere


def test_a_conditional_epsilon_and_a_uniform_prior_keep_a_value_off_zero():
    """`p + eps * (p <= eps).float()` with p >= 0 is never 0 (directly or through a local
    holding the correction), and neither is `torch.ones(n) / n`; a lift only where p < 0, a
    p that may be negative, or ones over another size are not."""
    source = (
        "import torch\n"
        "def f(logits, x, n, m):\n"
        "    p = torch.softmax(logits, -1)\n"
        "    a = torch.log(p + 1e-15 * (p <= 1e-15).float().detach())\n"
        "    c = 1e-15 * (p <= 1e-15).float()\n"
        "    b = torch.log(p + c)\n"
        "    d = torch.log(torch.ones(n) / n)\n"
        "    e = torch.log(p + 1e-15 * (p < 0).float())\n"
        "    g = torch.log(x + 1e-15 * (x <= 1e-15).float())\n"
        "    h = torch.log(torch.ones(n) / m)\n"
        "    return a, b, d, e, g, h\n"
    )
    off_zero = _query_each_call("m.py", source, "torch.log",
                                lambda ctx, call: analysis.value(ctx, call.args[0].value).excludes_zero)
    assert off_zero == {4: True, 6: True, 7: True, 8: False, 9: False, 10: False}
