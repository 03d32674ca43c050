"""FileContext.op memoizes each node's op, and forgets it when an import changes a name."""

from __future__ import annotations

import libcst as cst

from nanlint.core.context import FileContext


def _context(source: str):
    module = cst.parse_module(source)
    return FileContext("m.py", source, module), module


def test_the_op_of_a_node_is_the_same_object_when_asked_again() -> None:
    ctx, module = _context("import torch\ny = torch.exp(x)\n")
    call = module.body[1].body[0].value
    first = ctx.op(call)
    assert first is not None and first.name == "exp"
    assert ctx.op(call) is first


def test_an_import_read_later_changes_what_a_call_is() -> None:
    # `exp` means nothing until the function-level import is met (the walk adds it then).
    ctx, module = _context("def f(x):\n    return exp(x)\n")
    call = module.body[0].body.body[0].body[0].value
    assert ctx.op(call) is None
    ctx.imports.add(cst.parse_statement("from torch import exp\n").body[0])
    found = ctx.op(call)
    assert found is not None and found.name == "exp"


def test_calls_of_user_code_become_free_inputs_in_a_probe():
    """A module held in a list (`flow[3](h)`), a method of an indexed block and a call of a
    call are user code the verifier cannot run: each becomes a free input."""
    from nanlint.core.context import abstract_calls, node_code

    def abstracted(code):
        return node_code(abstract_calls(cst.parse_expression(code))[0])

    assert abstracted("torch.sigmoid(flow[3](flow[0](z)) + b).log()") == "torch.sigmoid(flow_out2 + b).log()"
    assert abstracted("self.blocks[0].forward(x).exp()") == "forward_out.exp()"
    assert abstracted("make(n)(x).softmax(-1)") == "make_out_out.softmax(-1)"
    # Tensor methods of computed values and torch functions stay.
    assert abstracted("(a + b).exp() + torch.log(x[0])") == "(a + b).exp() + torch.log(x[0])"


def _input_names(source: str, code: str):
    """The probe inputs' names of each finding of rule `code` on `source`."""
    from nanlint.lint.engine import lint_source
    from nanlint.rules import get_rule

    return [[i.name for i in d.probe.inputs] for d in lint_source("m.py", source, [get_rule(code)]).diagnostics]


GATE = "import torch\n\ndef gate(self, x):\n    gate_logit = self.proj(x)\n    return torch.reciprocal(1 + torch.exp(-gate_logit))\n"


def test_a_probe_input_keeps_the_name_of_the_local_that_held_the_call():
    """`gate_logit = self.proj(x)`: the verifier's input is `gate_logit`, as in the user's code
    and the report, not a name made from the callee. A call held by two different locals
    keeps the callee's name (neither local would be right for both)."""
    assert _input_names(GATE, "NAN101") == [["gate_logit"]]
    other = "\n\ndef other(self, x):\n    z = self.proj(x)\n    return torch.reciprocal(1 + torch.exp(-z))\n"
    assert _input_names(GATE + other, "NAN101") == [["proj_out"], ["proj_out"]]


def test_a_call_of_a_local_model_keeps_the_name_of_its_result():
    """Module level, as in a notebook: `model` is itself a local (inlined to `Gate(16)`), and
    the log's input is still shown as `logits`."""
    notebook = ("import torch\nmodel = Gate(16)\nx = torch.randn(64, 16)\nlogits = model(x)\n"
                "log_probs = torch.log(torch.softmax(logits, dim=-1))\n")
    assert _input_names(notebook, "NAN102") == [["logits"]]


def test_a_submodule_called_through_self_is_not_a_tensor_method():
    """`self.var(x)` (an nn.Linear named var), `self.norm(h)`, `self.softmax(h)`: calls of
    attributes of a module, not `Tensor.var` / `.norm` / `.softmax` of a tensor `self`."""
    from nanlint.core.ops import match_op

    def op(code):
        found = match_op(cst.parse_expression(code), lambda node: None)
        return found.name if found is not None else None

    assert [op(c) for c in ("self.var(x)", "self.norm(h)", "self.softmax(h)")] == [None, None, None]
    assert [op(c) for c in ("x.var()", "h.norm()", "h.softmax(1)")] == ["var", "norm", "softmax"]
