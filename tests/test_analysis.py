"""The value-flow analysis on small programs: summaries a project index can store, facts with
their evidence, and the rule behaviour that depends on a dtype (no fixture: the calibrated
page sections list fixture files)."""

from __future__ import annotations

import pickle

from nanlint import analysis
from nanlint.engine import lint_source
from nanlint.rules import get_rule

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


def test_probability_through_a_model_cites_where_it_came_from_and_probes_a_simplex():
    source = SOURCE + "\n\ndef loss(x):\n    model = Policy(3)\n    return torch.log(model(x)).sum()\n"
    (d,) = [d for d in lint_source("m.py", source, [get_rule("NAN201")]).diagnostics]
    assert "`self.act` output at line 13" in d.message and "`Policy.forward`" in d.message
    (p,) = [i for i in d.probe.inputs if i.name == "p"]
    assert (p.kind, p.dim, p.domain) == ("simplex", 1, (0.0, 1.0))


def test_branch_refinement_and_relations_die_on_reassignment():
    rules = [get_rule("NAN104")]
    safe = "import torch\ndef f(a, b):\n    if a > b:\n        return a + torch.log1p(torch.exp(b - a))\n"
    lost = "import torch\ndef f(a, b, c):\n    if a > b:\n        a = c\n        return a + torch.log1p(torch.exp(b - a))\n"
    assert lint_source("a.py", safe, rules).diagnostics == []
    assert [d.start.row for d in lint_source("b.py", lost, rules).diagnostics] == [5]


def test_a_masked_mean_probes_its_mask_as_a_mask():
    source = "import torch\ndef f(pred, target, valid):\n    return (pred - target).abs()[valid].mean()\n"
    (d,) = lint_source("m.py", source, [get_rule("NAN113")]).diagnostics
    (valid,) = [i for i in d.probe.inputs if i.name == "valid"]
    assert (valid.kind, valid.domain) == ("mask", (0.0, 1.0))


def test_relations_between_a_max_and_a_min_of_the_same_tensor():
    import libcst as cst

    from nanlint.context import FileContext
    from nanlint.precision import Precision

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
