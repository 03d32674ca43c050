"""The verifier's sandbox: what it accepts, what it refuses without running anything, and
that the linter path never imports torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nanlint.core.diagnostics import Probe, ProbeInput
from nanlint.verify.sandbox import EvaluationError, Interpreter, Refused, check_expression

from fixture_support import checkout_env

ROOT = Path(__file__).resolve().parent.parent

# Each expression tries to create the file named by {marker} (or reach something that could).
HOSTILE = [
    "__import__('os').system('touch {marker}')",
    "__import__('pathlib').Path('{marker}').touch()",
    "open('{marker}', 'w')",
    "(lambda: open('{marker}', 'w'))()",
    "[open('{marker}', 'w') for _ in x]",
    "{{open('{marker}', 'w') for _ in x}}",
    "{{k: open('{marker}', 'w') for k in x}}",
    "(open('{marker}', 'w') for _ in x)",
    "f\"{{open('{marker}', 'w')}}\"",
    "x.__class__.__init__.__globals__['os'].system('touch {marker}')",
    "().__class__.__bases__[0].__subclasses__()",
    "x[__import__('os').system('touch {marker}')]",
    "x[open('{marker}', 'w')]",
    "x[lambda: 0]",
    "getattr(x, 'exp')()",
    "eval(\"open('{marker}', 'w')\")",
    "exec(\"open('{marker}', 'w')\")",
    "torch.save(x, '{marker}')",
    "torch.load('{marker}')",
    "torch.hub.load('{marker}', 'model')",
    "torch.ops.aten.exp(x)",
    "torch.utils.data.DataLoader(x)",
    "torch.compile(torch.exp)(x)",
    "torch.jit.script(x)",
    "torch.cuda.synchronize()",
    "torch.manual_seed(0)",
    "torch.Tensor.__init__(x)",
    "x.numpy()",
    "x.tolist()",
    "x.item()",
    "x.register_hook(torch.exp)",
    "x.backward()",
    "x.apply_(torch.exp)",
    "x.exp_()",
    "x.grad",
    "x.data",
    "x._version",
    "(y := open('{marker}', 'w'))",
    "open('{marker}', 'w') if x else x",
    "x and open('{marker}', 'w')",
    "torch.exp(*[x])",
    "torch.exp(**{{'input': x}})",
    "'{marker}' * 3",
    "user_function(x)",
    "self.model(x)",
    "x[3](y)",
    "torch.exp(x)(y)",
    "torch.exp",
    "x.foo",
    "math.__dict__",
    "torch.nn.functional.softplus.__code__",
    "x.to('cuda')",
    "x.to(open('{marker}', 'w'))",
    "float('{marker}')",
]


@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_expression_is_refused_statically(template, tmp_path):
    marker = tmp_path / "pwned"
    source = template.format(marker=marker)
    with pytest.raises(Refused):
        check_expression(source, ["x", "self.k"])
    assert not marker.exists()


@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_probe_is_not_verifiable_and_never_runs(template, tmp_path):
    """End to end through the verifier, as the original and as the fix."""
    from nanlint.verify.expression import verify_expression

    marker = tmp_path / "pwned"
    source = template.format(marker=marker)
    for original, fixed in ((source, "torch.sigmoid(x)"), ("torch.exp(x)", source)):
        probe = Probe("expression", original, fixed, (ProbeInput("x"),))
        result = verify_expression(probe, "cpu")
        assert result.verdict == "not-verifiable"
        assert "refused" in result.reason
    assert not marker.exists()
    assert not (Path.cwd() / "pwned").exists()


@pytest.mark.parametrize(
    "name",
    ["__class__", "x.__dict__", "torch.k", "math", "float", "os.system()", "1x", "", "a..b"],
)
def test_hostile_input_names_are_refused(name):
    with pytest.raises(Refused):
        check_expression("x + 1", [name])


def test_accepted_expression_is_described():
    c = check_expression("torch.reciprocal(1 + torch.exp(-self.k * (x - y)))", ["self.k", "x", "y"])
    assert c.inputs == ("self.k", "x", "y")
    assert c.elementwise and c.rank == 1
    c = check_expression("torch.log(torch.exp(x).sum(-1))", ["x"])
    assert not c.elementwise and c.rank == 1
    c = check_expression("torch.where(m, x, y).softmax(dim=1)", [])
    assert c.roles == {"m": "bool", "x": "float", "y": "float"} and c.rank == 2
    c = check_expression("x.masked_fill(mask, float('-inf')).softmax(-1)", [])
    assert c.roles["mask"] == "bool"
    c = check_expression("torch.nn.functional.cross_entropy(logits, target)", [])
    assert c.roles["target"] == "index"
    c = check_expression("torch.nn.functional.binary_cross_entropy(torch.sigmoid(z), target=y)", [])
    assert c.implied_domains == {"y": (0.0, 1.0)}
    c = check_expression("torch.log(1 - torch.sigmoid(s)[:, 0])", [])
    assert c.rank == 2
    c = check_expression("torch.log(p.clamp(min=torch.finfo(p.dtype).tiny))", ["p", "p.dtype"])
    assert c.inputs == ("p",)  # `p.dtype` is read from p, not generated


def test_undeclared_attribute_chain_is_not_an_input():
    """`self.k` is an input only when the probe declares it; otherwise it is attribute access."""
    with pytest.raises(Refused):
        check_expression("self.k * x", ["x"])
    assert check_expression("self.k * x", ["x", "self.k"]).inputs == ("self.k", "x")


def test_interpreter_rechecks_at_run_time():
    import torch

    # `x.dtype` on a number: the static check cannot know x is not a tensor.
    c = check_expression("torch.finfo(x.dtype).eps", ["x"])
    with pytest.raises(EvaluationError):
        Interpreter(c)({"x": 3.0})
    c = check_expression("x.exp()", ["x"])
    with pytest.raises(EvaluationError):
        Interpreter(c)({"x": 2.0})  # a method on a Python float
    assert float(Interpreter(c)({"x": torch.tensor(0.0)})) == 1.0


def test_python_number_arithmetic_cannot_hang():
    c = check_expression("x * 10 ** 10 ** 10", ["x"])
    import torch

    out = Interpreter(c)({"x": torch.tensor(1.0)})
    assert torch.isinf(out)


def test_a_size_computed_from_inputs_stays_an_integer_size():
    import torch

    # `x.view(-1, side ** 2)`: side is a size (an integer), and its small power stays an int.
    c = check_expression("x.view(-1, side ** 2)", ["x", "side"])
    assert c.roles["side"] == "size"
    out = Interpreter(c)({"x": torch.zeros(2, 16), "side": 4})
    assert tuple(out.shape) == (2, 16)


def test_an_indexed_mask_is_still_a_mask():
    c = check_expression("torch.softmax(s.masked_fill(m[:, :, None], float('-inf')), dim=1)", ["s", "m"])
    assert c.roles["m"] == "bool"


def test_reference_mode_keeps_float64_and_the_program_dtype_constants():
    import torch

    c = check_expression("x.float() + torch.finfo(x.dtype).eps", ["x"])
    x = torch.tensor([1.0], dtype=torch.float64)
    plain = Interpreter(c)({"x": x})
    ref = Interpreter(c).for_reference(torch.float16)({"x": x})
    assert plain.dtype == torch.float32
    assert ref.dtype == torch.float64
    assert float(ref) == 1.0 + torch.finfo(torch.float16).eps


def test_tensors_made_from_sizes_go_to_the_inputs_device():
    """`torch.arange(T) < lengths[:, None]` on a GPU: the arange must be made there too. The
    meta device stands in for CUDA (a CPU tensor compared with it fails the same way)."""
    import torch

    lengths = torch.empty(3, device="meta")
    for text in ("torch.arange(4)[None, :] < lengths[:, None]", "torch.arange(4, device=lengths.device) < 2",
                 "lengths[:, None] + torch.zeros(3, 4)",
                 "lengths + torch.rand(3)"):
        out = Interpreter(check_expression(text, ["lengths"]))({"lengths": lengths})
        assert out.device.type == "meta", text
    cpu = Interpreter(check_expression("torch.arange(4) + x", ["x"]))({"x": torch.zeros(4)})
    assert cpu.tolist() == [0.0, 1.0, 2.0, 3.0]


def _run_without_torch(args, cwd):
    """Run nanlint in a subprocess where `import torch` fails."""
    blocker = (
        "import sys; sys.modules['torch'] = None\n"
        "from nanlint.cli import main\n"
        f"main({args!r})\n"
    )
    env = checkout_env()
    return subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, cwd=cwd, env=env)


def test_importing_the_cli_does_not_import_torch():
    code = "import sys, nanlint.cli, nanlint.verify, nanlint.verify.command, nanlint.verify.findings; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=checkout_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_check_works_without_torch(tmp_path):
    (tmp_path / "m.py").write_text("import torch\n\n\ndef f(z):\n    return 1 / (1 + torch.exp(-z))\n")
    out = _run_without_torch(["check", "--extend-select", "NAN101", "m.py"], tmp_path)
    assert out.returncode == 1, out.stderr
    assert "NAN101" in out.stdout


def test_verify_without_torch_exits_2_with_one_line(tmp_path):
    (tmp_path / "m.py").write_text("import torch\n")
    out = _run_without_torch(["verify", "m.py"], tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    # The command that adds the extra to this install (tests/test_install.py checks its form).
    assert len(lines) == 1 and "needs PyTorch" in lines[0] and "[verify]" in lines[0]
    assert out.stdout == ""
