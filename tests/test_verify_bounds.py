"""The verifier is bounded and its reports quote nothing they should not (issue 11, item 6):
hostile findings files give one line, malformed probes and odd domains are per-finding
refusals, every op is bounded in memory and time, control characters never reach the
terminal raw, and the HTML report quotes only files under the paths the user linted."""

from __future__ import annotations

import json
import time

import pytest

from nanlint.cli import main
from nanlint.core.diagnostics import Probe, ProbeInput
from nanlint.verify.expression import verify_expression
from nanlint.verify.sandbox import Interpreter, check_expression


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def finding(original, fixed=None, inputs=(), filename="model.py", code="NAN101", row=1):
    return {"code": code, "message": "m", "filename": filename, "location": {"row": row, "column": 1},
            "end_location": {"row": row, "column": 2},
            "probe": {"kind": "expression", "original": original, "fixed": fixed, "inputs": list(inputs)}}


def write(tmp_path, items):
    path = tmp_path / "findings.json"
    path.write_text(json.dumps(items))
    return str(path)


def test_findings_nested_100k_deep_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    code, out, err = run(["verify", "--from", str(path)], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "nested too deeply" in err


def test_findings_with_invalid_utf8_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_bytes(b'[{"code": "NAN101", "message": "\xff\xfe", "filename": "a.py"}]')
    code, out, err = run(["verify", "--from", str(path)], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "not UTF-8" in err and "Traceback" not in err


@pytest.mark.parametrize("domain", [["-inf", "inf"], [1e308, "inf"], [-1e308, -1e307]])
def test_odd_domains_are_per_finding_verdicts_not_internal_errors(tmp_path, capsys, domain):
    path = write(tmp_path, [finding("torch.log(x)", "torch.log(x.clamp(min=1e-30))",
                                    [{"name": "x", "domain": domain}])])
    code, out, err = run(["verify", "--from", path, "--exit-zero"], capsys)
    assert code == 0, err
    assert "internal error" not in out and "crashed" not in err
    assert out.splitlines()[0].startswith("model.py:1:1: NAN101 ")


def test_a_forty_input_sum_is_refused_per_finding(tmp_path, capsys):
    names = [f"x{i}" for i in range(40)]
    path = write(tmp_path, [finding(" + ".join(f"torch.log({n})" for n in names), None,
                                    [{"name": n} for n in names]),
                            finding("torch.log(x)", None, [{"name": "x"}], row=2)])
    code, out, err = run(["verify", "--from", path, "--exit-zero"], capsys)
    assert code == 0, err
    first, second = out.splitlines()[:2]
    assert "not-verifiable: refused" in first and "40 varying inputs" in first
    assert "model.py:2:1: NAN101 " in second and "internal error" not in out


def test_a_malformed_probe_refuses_that_finding_only(tmp_path, capsys):
    bad = finding("torch.log(x)", None, [{"name": 3}])
    good = finding("1 / (1 + torch.exp(-x))", "torch.sigmoid(x)", [{"name": "x", "evidence": "logits"}], row=2)
    path = write(tmp_path, [bad, good])
    code, out, err = run(["verify", "--from", path], capsys)
    lines = out.splitlines()
    assert "not-verifiable: refused: malformed probe" in lines[0] and "string `name`" in lines[0]
    assert "model.py:2:1: NAN101 confirmed" in lines[1]
    assert code == 1 and err == ""


def test_einsum_of_three_aranges_is_refused_before_it_allocates():
    probe = Probe("expression", "x * torch.einsum('i,j,k->ijk', torch.arange(2048), torch.arange(2048), "
                                "torch.arange(2048)).sum()", None, (ProbeInput("x"),))
    start = time.perf_counter()
    v = verify_expression(probe, "cpu")
    assert v.verdict == "not-verifiable" and "refused" in v.reason and "elements" in v.reason
    assert time.perf_counter() - start < 5


def test_a_chain_of_large_products_is_refused_by_its_cost():
    chain = " @ ".join(["torch.outer(torch.arange(2000) * 1.0, torch.arange(2000) * 1.0)"] * 16)
    probe = Probe("expression", f"x * ({chain}).sum()", None, (ProbeInput("x"),))
    start = time.perf_counter()
    v = verify_expression(probe, "cpu")
    assert v.verdict == "not-verifiable" and "refused" in v.reason
    assert time.perf_counter() - start < 5


def test_broadcasting_that_blows_up_is_refused():
    from nanlint.verify.budget import Budget, BudgetExceeded

    budget = Budget(result_elements=1000)
    program = Interpreter(check_expression("a[:, None] * b", ["a", "b"]), budget=budget)
    import torch

    with pytest.raises(BudgetExceeded):
        program({"a": torch.ones(100), "b": torch.ones(100)})
    assert program({"a": torch.ones(10), "b": torch.ones(10)}).shape == (10, 10)


def test_the_watchdog_stops_a_finding_over_its_time():
    import torch

    from nanlint.verify.budget import Budget, BudgetExceeded

    budget = Budget(seconds=0.0).arm()
    time.sleep(0.01)
    program = Interpreter(check_expression("torch.exp(x) + 1", ["x"]), budget=budget)
    with pytest.raises(BudgetExceeded, match="time budget"):
        program({"x": torch.ones(3)})


def test_text_output_escapes_control_characters(tmp_path, capsys):
    evil = "\x1b[2J\x1b[31mevil\r.py"
    path = write(tmp_path, [finding("torch.log(x)", None, [{"name": "x"}], filename=evil, code="NAN\x1b[0m101")])
    code, out, err = run(["verify", "--from", path, "--exit-zero"], capsys)
    assert "\x1b" not in out and "\r" not in out and "\x1b" not in err
    assert "\\x1b[2J\\x1b[31mevil\\r.py:1:1: NAN\\x1b[0m101" in out
    code, out, err = run(["verify", "--from", path, "--exit-zero", "--output-format", "json"], capsys)
    assert "\x1b" not in out
    assert json.loads(out)["findings"][0]["filename"] == evil


def test_html_report_quotes_no_file_outside_the_linted_paths(tmp_path, capsys, monkeypatch):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-LINE = torch.log(x)\n")
    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_text("import torch\n\ny = TORCH_LOG_LINE = torch.log(x)\n")
    monkeypatch.chdir(tmp_path)
    items = [finding("torch.log(x)", None, [{"name": "x"}], filename=str(secret)),
             finding("torch.log(x)", None, [{"name": "x"}], filename=str(project / "model.py"), row=3),
             finding("torch.log(x)", None, [{"name": "x"}], filename="<b>\x1b[31m</b>.py")]
    path = write(tmp_path, items)
    report = tmp_path / "r.html"
    run(["verify", "--from", path, "--report", str(report), "--exit-zero"], capsys)
    page = report.read_text()
    assert "TOP-SECRET-LINE" not in page and "TORCH_LOG_LINE" not in page  # no paths: no file read
    assert "\x1b" not in page and "<b>\x1b" not in page and "&lt;b&gt;\\x1b[31m&lt;/b&gt;.py" in page
    run(["verify", "--from", path, str(project), "--report", str(report), "--exit-zero"], capsys)
    page = report.read_text()
    assert "TOP-SECRET-LINE" not in page and "TORCH_LOG_LINE" in page


@pytest.mark.parametrize("inputs, relations", [
    # a simplex whose axis is beyond the ranks tried, with an empty domain
    ([{"name": "x", "kind": "simplex", "dim": 5, "domain": [0, 0]}], []),
    # a domain no float16 or bfloat16 value lies in, next to an ordinary input
    ([{"name": "x", "domain": [1e308, "inf"]}, {"name": "y", "kind": "integer", "domain": [3, 3]}], []),
    # relations naming NaN, an overflowing number and the input itself
    ([{"name": "x", "kind": "mask"}, {"name": "y", "kind": "count", "dim": -2}],
     [["x", ">", "nan"], ["y", "<=", "1e400"], ["y", "!=", "y"]]),
    ([{"name": "x", "kind": "probability", "domain": [-1e-300, 1e-300], "evidence": "e"}], [["x", ">", "x"]]),
])
def test_odd_but_well_formed_probes_never_crash_the_verifier(tmp_path, capsys, inputs, relations):
    original = "torch.log(x.sum(-1)) + torch.exp(x).mean()" + (" + y.sum()" if len(inputs) > 1 else "")
    item = finding(original, None, inputs)
    item["probe"]["relations"] = relations
    path = write(tmp_path, [item])
    code, out, err = run(["verify", "--from", path, "--exit-zero"], capsys)
    assert code == 0, err
    assert "crashed" not in err and "internal error" not in out


@pytest.mark.parametrize("source", [
    "x.new_full((1000000000,), 1.0).sum() * x",
    "x.new_zeros(100000, 100000).sum() * x",
    "torch.repeat_interleave(x, 1000000000)",
    "x.repeat_interleave(t)",
    "torch.nn.functional.one_hot(t.clamp(max=4095), 4096).sum() * x",
    "torch.broadcast_to(x, (100000, 100000)).sum()",
    "torch.zeros(size=(100000, 100000))",
    "torch.randint(0, 5, (100000, 100000))",
    "torch.linspace(0, 1, 1000000000)",
    "torch.eye(100000)",
    "x.repeat(100000, 100000)",
    "torch.cartesian_prod(x.repeat(1000), x.repeat(1000), x.repeat(1000))",
])
def test_every_creation_op_is_sized_before_it_allocates(source):
    import torch

    from nanlint.verify.budget import BudgetExceeded

    program = Interpreter(check_expression(source, ["x", "t"]))
    start = time.perf_counter()
    with pytest.raises(BudgetExceeded):
        program({"x": torch.ones(4), "t": torch.full((3000,), 10**9, dtype=torch.long)})
    assert time.perf_counter() - start < 1.0


def test_fuzzed_fixture_probes_never_crash_the_verifier():
    """A bounded run of benchmarks/fuzz_verify.py (the full run is the script): fixture probes
    with random kinds, dims, domains and relations; and the case it found (a count whose
    domain holds no float32 integer)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import fuzz_verify

    items = fuzz_verify.fixture_findings()[::6]
    assert len(items) >= 40
    assert fuzz_verify.fuzz(items, seeds=1) == 0
    count = finding("torch.log(1 - torch.sigmoid(z))", None,
                    [{"name": "z", "kind": "count", "dim": 1, "domain": [1e308, "inf"]}])
    count["probe"]["relations"] = [["z", ">", "1e400"], ["z", "<", "0"]]
    from nanlint.verify.findings import parse_findings
    from nanlint.verify.verifier import verify_all

    outcome = verify_all(parse_findings(json.dumps([count])), "cpu")
    assert outcome.errors == [] and outcome.results[0].verification.verdict == "not-verifiable"
