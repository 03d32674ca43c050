"""The command line as users meet it: exit codes, output formats, fixing, selection, config,
file discovery, suppression comments and bad input.

Most tests call `nanlint.cli.main` in-process (fast, and monkeypatch reaches the writer); a few
run `python -m nanlint` in a subprocess to check the real entry point. The findings come from
NAN101 (the sigmoid written by hand) and, where a test needs an unsafe fix, an off-by-default
rule or a fix that breaks the code, from small fake rules registered only for that test."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
import pytest

import nanlint
from nanlint.cli import main
from nanlint.core.context import node_code
from nanlint.core.diagnostics import UNSAFE
from nanlint.lint.fixes import fix_source
from nanlint.core.install import version_line
from nanlint.rules import Rule, all_rules, get_rule

# NAN101 (a sigmoid written by hand: one expression, an exact fix, on by default) is these
# tests' sample hazard.

ROOT = Path(__file__).resolve().parent.parent

HAZARD = "import torch\n\n\ndef gate(z):\n    return 1 / (1 + torch.exp(-z))\n"
HAZARD_FIXED = "import torch\n\n\ndef gate(z):\n    return torch.sigmoid(z)\n"
CLEAN = "import torch\n\n\ndef gate(z):\n    return torch.sigmoid(z)\n"
# A hazard reached through a local variable: reported, but not fixed.
UNFIXABLE = "import torch\n\n\ndef gate(z):\n    d = 1 + torch.exp(-z)\n    return 1 / d\n"

LINE = re.compile(r"^(?P<path>[^:]+):(?P<row>\d+):(?P<col>\d+): (?P<code>NAN\d{3})(?P<fix> \[\*\])? (?P<msg>\S.*)$")


@dataclass
class Result:
    code: int
    out: str
    err: str

    def lines(self):
        return [LINE.match(l) for l in self.out.splitlines() if LINE.match(l)]


@pytest.fixture
def cli(capsys, monkeypatch, tmp_path):
    """Run `nanlint ARGS` in-process from tmp_path; returns exit code, stdout, stderr."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> Result:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        out, err = capsys.readouterr()
        code = exc.value.code
        return Result(0 if code is None else code, out, err)

    return run


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def one_line_error(result: Result) -> str:
    err = result.err.strip()
    assert err, "expected a message on stderr"
    assert "\n" not in err, f"expected one line on stderr, got:\n{result.err}"
    assert err.startswith("nanlint: error: ")
    assert "Traceback" not in result.err
    return err


# --- fake rules, registered only by the tests that ask for them -------------------------------


class _FakeEps(Rule):
    """Unsafe fix: `torch.fake_log(x)` -> `torch.fake_log(x + 1e-12)`."""

    code = "NAN990"
    name = "test-unsafe-eps"
    message = "Test rule: a log of a value that may be 0"
    fix_applicability = UNSAFE
    fix_title = "Add an epsilon"

    def visit_Call(self, node, ctx):
        if ctx.qualname(node.func) != "torch.fake_log" or len(node.args) != 1:
            return
        arg = node.args[0].value
        if isinstance(arg, cst.BinaryOperation):
            return  # already has its epsilon
        ctx.report(self, node, edits=(ctx.replace(arg, f"{node_code(arg)} + 1e-12"),))


class _FakeOptIn(Rule):
    code = "NAN991"
    name = "test-off-by-default"
    message = "Test rule that is off unless selected by its code"
    default_enabled = False

    def visit_Call(self, node, ctx):
        if ctx.qualname(node.func) == "torch.fake_opt":
            ctx.report(self, node)


class _FakeBroken(Rule):
    """A buggy fix: its result does not parse."""

    code = "NAN992"
    name = "test-broken-fix"
    message = "Test rule whose fix is broken"
    fix_applicability = "safe"
    fix_title = "Break the code"

    def visit_Call(self, node, ctx):
        if ctx.qualname(node.func) == "torch.fake_broken":
            ctx.report(self, node, edits=(ctx.replace(node, "torch.fake_broken((("),))


FAKES = (_FakeEps, _FakeOptIn, _FakeBroken)


@pytest.fixture
def fake_rules(monkeypatch):
    from nanlint.rules import _REGISTRY

    all_rules()  # load the real ones first
    for cls in FAKES:
        monkeypatch.setitem(_REGISTRY, cls.code, cls)
    return FAKES


# --- exit codes and one-line errors ---------------------------------------------------------


def test_clean_file_exits_0(cli, tmp_path):
    write(tmp_path / "m.py", CLEAN)
    r = cli("m.py")
    assert r.code == 0
    assert r.out == "All checks passed!\n"
    assert r.err == ""


def test_a_run_that_lints_nothing_says_so_and_names_the_paths(cli, tmp_path):
    """A CI gate pointed at the wrong folder used to print "All checks passed!": the exit code
    stays ruff's (0), but each path that held nothing to lint is named."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes").mkdir()
    write(tmp_path / "notes" / "todo.txt", "not python\n")
    r = cli("empty", "notes")
    assert r.code == 0 and r.out == "Nothing was linted: no Python file or notebook found.\n"
    assert r.err.splitlines() == ["nanlint: warning: empty: no Python file or notebook to lint there",
                                  "nanlint: warning: notes: no Python file or notebook to lint there"]
    write(tmp_path / "m.py", CLEAN)
    r = cli("empty", "m.py")  # one empty folder among linted files: still named
    assert (r.code, r.out) == (0, "All checks passed!\n")
    assert r.err == "nanlint: warning: empty: no Python file or notebook to lint there\n"
    write(tmp_path / "pyproject.toml", '[tool.nanlint]\nextend-exclude = ["generated"]\n')
    write(tmp_path / "generated" / "g.py", CLEAN)
    r = cli("--force-exclude", "generated/g.py")  # pre-commit naming an excluded file
    assert (r.code, r.out) == (0, "Nothing was linted: no Python file or notebook found.\n")
    assert r.err == "nanlint: warning: generated/g.py: excluded by the settings (force-exclude), not linted\n"
    assert cli("--force-exclude", "generated/g.py", "m.py").err == ""  # said only when nothing was linted


def test_findings_exit_1(cli, tmp_path):
    write(tmp_path / "m.py", HAZARD)
    r = cli("m.py")
    assert r.code == 1
    assert [m.group("code") for m in r.lines()] == ["NAN101"]
    assert r.err == ""


def test_default_path_is_the_current_directory(cli, tmp_path):
    write(tmp_path / "pkg" / "m.py", HAZARD)
    r = cli()
    assert r.code == 1
    assert [m.group("path") for m in r.lines()] == ["pkg/m.py"]
    assert cli("check").out == r.out  # `nanlint` is `nanlint check`


def test_file_that_never_mentions_torch_is_clean(cli, tmp_path):
    write(tmp_path / "m.py", "import numpy as np\ny = 1 / (1 + np.exp(-x))\n")
    assert cli("m.py").code == 0


def test_unknown_option_exits_2(cli, tmp_path):
    write(tmp_path / "m.py", HAZARD)
    r = cli("--bogus", "m.py")
    assert r.code == 2
    assert "--bogus" in one_line_error(r)
    assert r.out == ""


def test_unknown_code_in_select_exits_2(cli, tmp_path):
    write(tmp_path / "m.py", HAZARD)
    r = cli("--select", "NAN101,NAN9", "m.py")
    assert r.code == 2
    err = one_line_error(r)
    assert "--select" in err and "'NAN9'" in err


def test_unknown_code_in_ignore_and_extend_select_exits_2(cli, tmp_path):
    write(tmp_path / "m.py", HAZARD)
    for option in ("--ignore", "--extend-select"):
        r = cli(option, "XYZ1", "m.py")
        assert r.code == 2
        assert option in one_line_error(r) and "XYZ1" in r.err


def test_missing_path_exits_2(cli, tmp_path):
    write(tmp_path / "m.py", HAZARD)
    r = cli("m.py", "nowhere.py")
    assert r.code == 2
    assert "nowhere.py" in one_line_error(r)
    assert r.out == ""


def test_bad_config_key_exits_2_naming_it(cli, tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.nanlint]\nselct = ["NAN101"]\n')
    write(tmp_path / "m.py", HAZARD)
    r = cli("m.py")
    assert r.code == 2
    err = one_line_error(r)
    assert "`selct`" in err and "pyproject.toml" in err


def test_unknown_code_in_config_exits_2(cli, tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.nanlint]\nignore = ["NAN101", "NAN77"]\n')
    write(tmp_path / "m.py", HAZARD)
    r = cli("m.py")
    assert r.code == 2
    assert "'NAN77'" in one_line_error(r)


@pytest.mark.parametrize(
    "table, words",
    [
        ('select = "NAN101"', ["`select`", "list of strings"]),
        ("per-file-ignores = 3", ["per-file-ignores"]),
        ("select = [", ["invalid TOML"]),
    ],
)
def test_malformed_config_exits_2(cli, tmp_path, table, words):
    write(tmp_path / "pyproject.toml", f"[tool.nanlint]\n{table}\n")
    write(tmp_path / "m.py", HAZARD)
    r = cli("m.py")
    assert r.code == 2
    err = one_line_error(r)
    for word in words:
        assert word in err


def test_exit_zero_keeps_the_report(cli, tmp_path):
    write(tmp_path / "m.py", HAZARD)
    r = cli("--exit-zero", "m.py")
    assert r.code == 0
    assert len(r.lines()) == 1
    assert "Found 1 problem" in r.out


def test_real_entry_point_in_a_subprocess(tmp_path):
    write(tmp_path / "m.py", HAZARD)
    done = subprocess.run(
        [sys.executable, "-m", "nanlint", "--extend-select", "NAN101", "m.py"], cwd=tmp_path,
        capture_output=True, text=True,
    )
    assert done.returncode == 1
    assert done.stdout.startswith("m.py:5:12: NAN101 [*] Sigmoid")
    bad = subprocess.run(
        [sys.executable, "-m", "nanlint", "--select", "BOGUS", "m.py"],
        cwd=tmp_path, capture_output=True, text=True,
    )
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "BOGUS" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_importing_the_cli_does_not_import_torch():
    code = "import sys, nanlint.cli, nanlint.run.runner; assert 'torch' not in sys.modules, 'torch imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_linting_does_not_import_torch(tmp_path):
    write(tmp_path / "m.py", HAZARD)
    code = (
        "import sys\nfrom nanlint.cli import main\n"
        "try:\n    main(['--fix', '--extend-select', 'NAN101', 'm.py'])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "m.py").read_text() == HAZARD_FIXED


def test_version(cli):
    r = cli("--version")
    assert r.code == 0
    # The commit too where nanlint was installed from a git URL (tests/test_install.py).
    assert r.out.strip() == f"nanlint {version_line()}"
    assert r.out.startswith(f"nanlint {nanlint.__version__}")
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{nanlint.__version__}"' in pyproject


# --- text output ----------------------------------------------------------------------------


def test_text_lines_are_sorted_by_path_line_column(cli, tmp_path):
    # Written so that discovery order, line order and column order all differ from sorted order.
    write(tmp_path / "b.py", "import torch\nx = 1 / (1 + torch.exp(-(1 / (1 + torch.exp(-z))) * k))\n")
    write(tmp_path / "a" / "z.py", "import torch\n\n\n\ny = 1 / (1 + torch.exp(-z))\nw = (1 + torch.exp(-z)) ** -1\n")
    write(tmp_path / "a.py", "import torch\nq = 1 / (1 + torch.exp(-z))\n")
    r = cli(".")
    assert r.code == 1
    got = [(m.group("path"), int(m.group("row")), int(m.group("col"))) for m in r.lines()]
    assert got == [
        ("a.py", 2, 5),
        ("a/z.py", 5, 5),
        ("a/z.py", 6, 5),
        ("b.py", 2, 5),
        ("b.py", 2, 26),
    ]
    assert len(r.out.splitlines()) == 6  # five findings and the summary
    assert r.out.splitlines()[-1] == "Found 5 problems (5 fixable with --fix)."


def test_text_line_format_and_fix_mark(cli, tmp_path):
    write(tmp_path / "m.py", HAZARD)
    write(tmp_path / "n.py", UNFIXABLE)
    r = cli(".")
    lines = r.out.splitlines()
    rule = next(x for x in all_rules() if x.code == "NAN101")
    assert lines[0] == f"m.py:5:12: NAN101 [*] {rule.message}"
    assert lines[1] == f"n.py:6:12: NAN101 {rule.message}"  # no fix: no [*]
    assert lines[2] == "Found 2 problems (1 fixable with --fix)."


def test_singular_summary(cli, tmp_path):
    write(tmp_path / "n.py", UNFIXABLE)
    r = cli("n.py")
    assert r.out.splitlines()[-1] == "Found 1 problem."


def test_paths_outside_the_working_directory_are_absolute(cli, tmp_path):
    inside = tmp_path / "work"
    inside.mkdir()
    other = write(tmp_path / "other" / "m.py", HAZARD)
    os.chdir(inside)
    r = cli(str(other))
    assert r.lines()[0].group("path") == str(other)


# --- json, sarif, github ----------------------------------------------------------------------


def _apply(source: str, edits) -> str:
    lines = source.splitlines(keepends=True)
    starts = [0]
    for l in lines:
        starts.append(starts[-1] + len(l))

    def offset(pos):
        return starts[pos["row"] - 1] + pos["column"] - 1

    out = source
    for e in sorted(edits, key=lambda e: offset(e["location"]), reverse=True):
        out = out[: offset(e["location"])] + e["content"] + out[offset(e["end_location"]) :]
    return out


def test_json_output_has_ruffs_keys(cli, tmp_path):
    write(tmp_path / "m.py", HAZARD)
    write(tmp_path / "n.py", UNFIXABLE)
    r = cli("--output-format", "json", ".")
    assert r.code == 1
    data = json.loads(r.out)  # nothing but the JSON on stdout
    assert [d["filename"] for d in data] == ["m.py", "n.py"]
    for d in data:
        assert set(d) == {
            "code", "name", "kind", "message", "filename", "cell", "location", "end_location", "fix",
            "noqa_row", "url", "probe", "evidence", "latent",
        }
        assert d["code"] == "NAN101" and d["name"] == "sigmoid-by-hand" and d["kind"] == "form"
        assert d["evidence"] == [] and d["latent"] is False  # a form finding: no value evidence
        assert d["cell"] is None  # a cell number only in notebooks
        assert d["url"].endswith("/rules/form/NAN101.md")
    fixable, unfixable = data
    assert fixable["location"] == {"row": 5, "column": 12}
    assert fixable["end_location"] == {"row": 5, "column": 35}
    fix = fixable["fix"]
    assert fix["applicability"] == "safe" and fix["message"]
    assert all(set(e) == {"content", "location", "end_location"} for e in fix["edits"])
    # The edits, applied as a consumer of the JSON would, give the fixed file.
    assert _apply(HAZARD, fix["edits"]) == HAZARD_FIXED
    assert unfixable["fix"] is None
    assert fixable["noqa_row"] == 5 and unfixable["noqa_row"] == 6
    probe = fixable["probe"]
    assert probe["kind"] == "expression"
    assert probe["original"] == "1 / (1 + torch.exp(-z))"
    assert probe["fixed"] == "torch.sigmoid(z)"
    assert [i["name"] for i in probe["inputs"]] == ["z"]


def test_json_output_when_clean_is_an_empty_list(cli, tmp_path):
    write(tmp_path / "m.py", CLEAN)
    r = cli("--output-format", "json", "m.py")
    assert r.code == 0
    assert json.loads(r.out) == []


def test_sarif_output_structure(cli, tmp_path):
    write(tmp_path / "src" / "m.py", HAZARD)
    write(tmp_path / "src" / "bad.py", "import torch\ndef (:\n")
    r = cli("--output-format", "sarif", "src")
    assert r.code == 1
    log = json.loads(r.out)
    # The schema's structural requirements are checked in tests/test_sarif.py.
    assert log["version"] == "2.1.0"
    assert log["$schema"].startswith("https://") and "sarif-2.1.0" in log["$schema"]
    assert len(log["runs"]) == 1
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "nanlint" and driver["version"] == nanlint.__version__
    rules = driver["rules"]
    assert [x["id"] for x in rules] == ["NAN001", "NAN101"]  # the rules that fired, once each
    for rule in rules:
        assert rule["shortDescription"]["text"]
        assert rule["help"]["text"] and rule["help"]["markdown"].startswith(f"# {rule['id']} ")
        kind = get_rule(rule["id"]).kind
        assert rule["helpUri"].endswith(f"/rules/{kind}/{rule['id']}.md")
        assert rule["properties"]["kind"] == kind and kind in rule["properties"]["tags"]
    results = run["results"]
    assert [x["ruleId"] for x in results] == ["NAN001", "NAN101"]
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] in ("error", "warning", "note")
        assert result["message"]["text"]
        (location,) = result["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uri"] in (
            (tmp_path / "src" / "bad.py").resolve().as_uri(), (tmp_path / "src" / "m.py").resolve().as_uri()
        )
        region = physical["region"]
        assert region["startLine"] >= 1 and region["startColumn"] >= 1
        assert (region["endLine"], region["endColumn"]) >= (region["startLine"], region["startColumn"])
    assert results[1]["locations"][0]["physicalLocation"]["region"] == {
        "startLine": 5, "startColumn": 12, "endLine": 5, "endColumn": 35
    }
    # The fix travels with the result: one replacement of the flagged range.
    (fix,) = results[1]["fixes"]
    (change,) = fix["artifactChanges"]
    assert change["artifactLocation"]["uri"].startswith("file:///")
    (replacement,) = change["replacements"]
    assert replacement["deletedRegion"] == {"startLine": 5, "startColumn": 12, "endLine": 5, "endColumn": 35}
    assert replacement["insertedContent"]["text"] == "torch.sigmoid(z)"
    assert "fixes" not in results[0]


def test_github_annotations(cli, tmp_path):
    write(tmp_path / "m.py", HAZARD)
    r = cli("--output-format", "github", "m.py")
    assert r.code == 1
    (line,) = r.out.splitlines()
    assert line.startswith(
        "::error file=m.py,line=5,col=12,endLine=5,endColumn=35,title=NAN101::NAN101 Sigmoid"
    )


def test_github_annotations_escape_properties_and_data(cli, tmp_path):
    write(tmp_path / "we%ird,na:me.py", "import torch\ndef (:\n")
    r = cli("--output-format", "github", ".")
    (line,) = r.out.splitlines()
    m = re.match(r"^::error (?P<props>[^:]*)::(?P<data>.*)$", line)
    assert m, line
    props = dict(p.split("=", 1) for p in m.group("props").split(","))
    assert props["file"] == "we%25ird%2Cna%3Ame.py"
    assert props["line"] == "2" and props["col"] == "5" and props["title"] == "NAN001"
    assert m.group("data").startswith("NAN001 SyntaxError")


def test_statistics(cli, tmp_path):
    write(tmp_path / "a.py", HAZARD)
    write(tmp_path / "b.py", "import torch\nx = 1 / (1 + torch.exp(-(1 / (1 + torch.exp(-z))) * k))\n")
    write(tmp_path / "c.py", "import torch\ndef (:\n")
    r = cli("--statistics", ".")
    assert r.code == 1
    lines = r.out.splitlines()
    assert lines[0].split() == ["3", "NAN101", "[*]", "sigmoid-by-hand"]
    assert lines[1].split() == ["1", "NAN001", "[", "]", "syntax-error"]
    assert lines[-1] == "Found 4 problems (3 fixable with --fix)."
    j = cli("--statistics", "--output-format", "json", ".")
    assert json.loads(j.out) == [
        {"code": "NAN101", "name": "sigmoid-by-hand", "count": 3, "fixable": True, "fixable_count": 3},
        {"code": "NAN001", "name": "syntax-error", "count": 1, "fixable": False, "fixable_count": 0},
    ]


# --- fixing -----------------------------------------------------------------------------------


def test_fix_writes_and_exits_0_when_nothing_remains(cli, tmp_path):
    path = write(tmp_path / "m.py", HAZARD)
    r = cli("--fix", "m.py")
    assert r.code == 0
    assert path.read_text() == HAZARD_FIXED
    assert r.out.splitlines()[-1] == "Found 1 problem (1 fixed, 0 remaining)."
    again = cli("--fix", "m.py")
    assert again.code == 0 and again.out == "All checks passed!\n"


def test_fix_reports_what_remains(cli, tmp_path):
    write(tmp_path / "m.py", HAZARD)
    write(tmp_path / "n.py", UNFIXABLE)
    r = cli("--fix", ".")
    assert r.code == 1
    assert [(m.group("path"), m.group("fix")) for m in r.lines()] == [("n.py", None)]
    assert r.out.splitlines()[-1] == "Found 2 problems (1 fixed, 1 remaining)."
    assert (tmp_path / "n.py").read_text() == UNFIXABLE


def test_nested_hazards_are_fixed_in_one_run(cli, tmp_path):
    path = write(
        tmp_path / "m.py",
        "import torch\nx = 1 / (1 + torch.exp(-(1 / (1 + torch.exp(-z))) * k))  # two gates\n",
    )
    r = cli("--fix", "m.py")
    assert r.code == 0
    assert path.read_text() == "import torch\nx = torch.sigmoid((torch.sigmoid(z)) * k)  # two gates\n"
    assert "(2 fixed, 0 remaining)" in r.out


def test_nested_hazards_of_different_rules_are_fixed_in_one_run(cli, tmp_path):
    codes = {r.code for r in all_rules()}
    if not {"NAN105", "NAN102"} <= codes:
        pytest.skip("NAN105 (log1p) and NAN102 (log of softmax) are not written yet")
    path = write(tmp_path / "m.py", (
        "import torch\n"
        "y = torch.log(1 + 1 / (1 + torch.exp(-z)))\n"
        "w = torch.log(torch.softmax(1 / (1 + torch.exp(-x)), dim=-1))\n"
    ))
    r = cli("--fix", "--extend-select", "NAN105,NAN102", "m.py")  # both off by default
    assert r.code == 0
    assert path.read_text() == (
        "import torch\n"
        "y = torch.log1p(torch.sigmoid(z))\n"
        "w = torch.log_softmax(torch.sigmoid(x), dim=-1)\n"
    )
    assert "(4 fixed, 0 remaining)" in r.out


def test_unsafe_fixes_need_the_flag(cli, tmp_path, fake_rules):
    source = "import torch\ny = torch.fake_log(p)\n"
    path = write(tmp_path / "m.py", source)
    r = cli("m.py")
    assert r.code == 1
    (m,) = r.lines()
    assert m.group("code") == "NAN990" and m.group("fix") is None  # not fixable without the flag
    assert "1 more fix available with --fix --unsafe-fixes" in r.out
    shown = cli("--unsafe-fixes", "m.py")
    assert shown.lines()[0].group("fix") == " [*]"
    assert "(1 fixable with --fix)" in shown.out
    assert cli("--fix", "m.py").code == 1
    assert path.read_text() == source  # --fix alone applies safe fixes only
    r = cli("--fix", "--unsafe-fixes", "m.py")
    assert r.code == 0
    assert path.read_text() == "import torch\ny = torch.fake_log(p + 1e-12)\n"
    assert "(1 fixed, 0 remaining)" in r.out


def test_diff_prints_and_writes_nothing(cli, tmp_path):
    path = write(tmp_path / "m.py", HAZARD)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = path.stat()
    r = cli("--diff", "m.py")
    assert r.code == 1  # fixes would be applied
    assert r.out == (
        "--- a/m.py\n+++ b/m.py\n@@ -2,4 +2,4 @@\n \n \n def gate(z):\n"
        "-    return 1 / (1 + torch.exp(-z))\n+    return torch.sigmoid(z)\n"
    )
    assert r.err.strip() == "Would fix 1 problem."
    after = path.stat()
    assert path.read_bytes() == HAZARD.encode()
    assert (after.st_mtime_ns, after.st_ino) == (before.st_mtime_ns, before.st_ino)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.py"]  # no temp file either


def test_diff_with_nothing_to_fix(cli, tmp_path):
    write(tmp_path / "n.py", UNFIXABLE)
    r = cli("--diff", "n.py")
    assert r.code == 0 and r.out == ""
    assert r.err.strip() == "No fixes to apply."


def test_fix_keeps_latin1_encoding(cli, tmp_path):
    path = tmp_path / "m.py"
    path.write_bytes(
        b"# -*- coding: latin-1 -*-\nimport torch\n# caf\xe9\ny = 1 / (1 + torch.exp(-z))  # \xb5\n"
    )
    assert cli("--fix", "m.py").code == 0
    assert path.read_bytes() == (
        b"# -*- coding: latin-1 -*-\nimport torch\n# caf\xe9\ny = torch.sigmoid(z)  # \xb5\n"
    )


def test_fix_keeps_utf8_bom(cli, tmp_path):
    path = tmp_path / "m.py"
    path.write_bytes(b"\xef\xbb\xbfimport torch\ny = 1 / (1 + torch.exp(-z))  # \xc3\xa9t\xc3\xa9\n")
    assert cli("--fix", "m.py").code == 0
    assert path.read_bytes() == b"\xef\xbb\xbfimport torch\ny = torch.sigmoid(z)  # \xc3\xa9t\xc3\xa9\n"


def test_fix_keeps_crlf_line_endings(cli, tmp_path):
    path = tmp_path / "m.py"
    path.write_bytes(HAZARD.replace("\n", "\r\n").encode())
    assert cli("--fix", "m.py").code == 0
    assert path.read_bytes() == HAZARD_FIXED.replace("\n", "\r\n").encode()


def test_fix_keeps_mode_bits(cli, tmp_path):
    path = write(tmp_path / "m.py", "#!/usr/bin/env python\n" + HAZARD)
    path.chmod(0o750)
    assert cli("--fix", "m.py").code == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o750
    assert path.read_text() == "#!/usr/bin/env python\n" + HAZARD_FIXED


def test_fix_does_not_touch_unchanged_files(cli, tmp_path):
    changed = write(tmp_path / "a.py", HAZARD)
    untouched = [write(tmp_path / "b.py", CLEAN), write(tmp_path / "c.py", UNFIXABLE)]
    for p in untouched:
        os.utime(p, ns=(1_000_000_000, 1_000_000_000))
    before = [(p.stat().st_mtime_ns, p.stat().st_ino) for p in untouched]
    cli("--fix", ".")
    assert changed.read_text() == HAZARD_FIXED
    assert [(p.stat().st_mtime_ns, p.stat().st_ino) for p in untouched] == before


def test_failed_write_leaves_the_original_intact(cli, tmp_path, monkeypatch):
    path = write(tmp_path / "m.py", HAZARD)
    other = write(tmp_path / "z.py", HAZARD)
    real_replace = os.replace

    def failing_replace(src, dst, *args, **kwargs):
        if Path(dst).name == "m.py":
            raise OSError(28, "No space left on device")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", failing_replace)
    r = cli("--fix", ".")
    assert r.code == 2
    assert "cannot write m.py" in r.err and "No space left on device" in r.err
    assert path.read_bytes() == HAZARD.encode()
    assert other.read_text() == HAZARD_FIXED  # the run went on
    # No temp file left (the result cache is a directory of its own).
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".nanlint_cache") == ["m.py", "z.py"]


def test_failure_while_writing_the_temp_file_leaves_the_original(tmp_path, monkeypatch):
    from nanlint.core import source

    path = write(tmp_path / "m.py", HAZARD)

    def failing_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(source.os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        source.write_atomic(path, HAZARD_FIXED, "utf-8")
    assert path.read_text() == HAZARD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.py"]


def test_fix_that_would_not_parse_is_dropped_and_reported(cli, tmp_path, fake_rules):
    source = "import torch\ny = torch.fake_broken(x)\nz = 1 / (1 + torch.exp(-w))\n"
    path = write(tmp_path / "m.py", source)
    r = cli("--fix", "m.py")
    assert r.code == 1
    assert "nanlint: warning: fix for NAN992 at m.py:2:5 dropped: the fixed code would not parse" in r.err
    # The good fix in the same file is still applied; the finding with the broken fix remains.
    assert path.read_text() == "import torch\ny = torch.fake_broken(x)\nz = torch.sigmoid(w)\n"
    assert [m.group("code") for m in r.lines()] == ["NAN992"]
    assert "(1 fixed, 1 remaining)" in r.out


def test_fix_source_drops_a_fix_that_would_not_parse(fake_rules):
    source = "import torch\ny = torch.fake_broken(x)\n"
    outcome = fix_source("m.py", source, [_FakeBroken], unsafe=False)
    assert outcome.source == source
    assert outcome.applied == 0
    ((diag, reason),) = outcome.dropped
    assert diag.code == "NAN992" and "not parse" in reason
    assert [d.code for d in outcome.remaining.diagnostics] == ["NAN992"]


# --- selection ----------------------------------------------------------------------------

SELECTION = "import torch\na = 1 / (1 + torch.exp(-z))\nb = torch.fake_log(p)\nc = torch.fake_opt(q)\n"


def _codes(result: Result):
    return sorted({m.group("code") for m in result.lines()})


def test_select_ignore_extend_select(cli, tmp_path, fake_rules):
    write(tmp_path / "m.py", SELECTION)
    assert _codes(cli("m.py")) == ["NAN101", "NAN990"]  # NAN991 is off by default
    assert _codes(cli("--select", "NAN101", "m.py")) == ["NAN101"]
    assert _codes(cli("--select", "NAN9", "m.py")) == ["NAN990"]  # a prefix leaves opt-in rules off
    assert _codes(cli("--select", "NAN991", "m.py")) == ["NAN991"]  # the exact code enables it
    assert _codes(cli("--select", "ALL", "m.py")) == ["NAN101", "NAN990", "NAN991"]
    assert _codes(cli("--select", "all", "m.py")) == ["NAN101", "NAN990", "NAN991"]
    assert _codes(cli("--ignore", "NAN1", "m.py")) == ["NAN990"]
    assert _codes(cli("--select", "ALL", "--ignore", "NAN99", "m.py")) == ["NAN101"]
    assert _codes(cli("--extend-select", "NAN991", "m.py")) == ["NAN101", "NAN990", "NAN991"]
    assert _codes(cli("--select", "NAN101", "--extend-select", "NAN990", "m.py")) == ["NAN101", "NAN990"]
    assert _codes(cli("--select", " NAN101 , NAN990 ", "m.py")) == ["NAN101", "NAN990"]
    r = cli("--ignore", "NAN", "m.py")
    assert r.code == 0 and r.out == "All checks passed!\n"


def test_syntax_errors_are_reported_whatever_the_selection(cli, tmp_path):
    write(tmp_path / "m.py", "import torch\ndef (:\n")
    assert _codes(cli("--ignore", "NAN001", "m.py")) == ["NAN001"]
    assert _codes(cli("--select", "NAN101", "m.py")) == ["NAN001"]


# --- configuration ------------------------------------------------------------------------


def test_config_found_from_cwd_upwards(cli, tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.nanlint]\nignore = ["NAN101"]\n')
    # A nearer pyproject.toml without a [tool.nanlint] table does not stop the search.
    write(tmp_path / "pkg" / "pyproject.toml", '[project]\nname = "pkg"\n')
    write(tmp_path / "pkg" / "src" / "m.py", HAZARD)
    os.chdir(tmp_path / "pkg" / "src")
    assert cli("m.py").code == 0
    os.chdir(tmp_path.parent)  # above the config: nothing applies
    assert cli(str(tmp_path / "pkg" / "src" / "m.py")).code == 1


def test_config_select_and_extend_select(cli, tmp_path, fake_rules):
    write(tmp_path / "m.py", SELECTION)
    write(tmp_path / "pyproject.toml", '[tool.nanlint]\nselect = ["NAN9"]\nextend-select = ["NAN991"]\n')
    assert _codes(cli("m.py")) == ["NAN990", "NAN991"]
    # The command line's --select replaces the config's; its --extend-select adds to it.
    assert _codes(cli("--select", "NAN101", "m.py")) == ["NAN101", "NAN991"]


def test_config_option_reads_the_given_file(cli, tmp_path):
    write(tmp_path / "m.py", HAZARD)
    write(tmp_path / "pyproject.toml", '[tool.nanlint]\nselect = ["NAN101"]\n')
    write(tmp_path / "ci" / "nanlint.toml", 'ignore = ["NAN101"]\n')
    write(tmp_path / "ci" / "other.toml", '[tool.nanlint]\nignore = ["NAN1"]\n')
    assert cli("m.py").code == 1
    assert cli("--config", "ci/nanlint.toml", "m.py").code == 0
    assert cli("--config", "ci/other.toml", "m.py").code == 0
    r = cli("--config", "ci/missing.toml", "m.py")
    assert r.code == 2 and "ci/missing.toml" in one_line_error(r)


def test_per_file_ignores(cli, tmp_path, fake_rules):
    write(tmp_path / "pyproject.toml", (
        "[tool.nanlint]\n"
        "[tool.nanlint.per-file-ignores]\n"
        '"scripts/*" = ["NAN1"]\n'
        '"legacy.py" = ["NAN990"]\n'
    ))
    write(tmp_path / "scripts" / "t.py", SELECTION)
    write(tmp_path / "legacy.py", SELECTION)
    write(tmp_path / "src" / "m.py", SELECTION)
    r = cli(".")
    got = sorted((m.group("path"), m.group("code")) for m in r.lines())
    assert got == [
        ("legacy.py", "NAN101"),
        ("scripts/t.py", "NAN990"),
        ("src/m.py", "NAN101"),
        ("src/m.py", "NAN990"),
    ]
    # Patterns are relative to the config's directory, wherever nanlint runs from.
    os.chdir(tmp_path / "scripts")
    assert _codes(cli("t.py")) == ["NAN990"]


def test_test_files_are_skipped_unless_asked_for(cli, tmp_path):
    """A test's expected value is the textbook formula on purpose: a walk skips test files;
    a test directory or file named on the command line, `--lint-tests` or `lint-tests = true`
    lints them; `--force-exclude` (pre-commit) skips a named one."""
    for rel in ("src/m.py", "src/contest.py", "src/m_test.py", "src/conftest.py", "tests/helpers.py",
                "pkg/test/util.py", "test_top.py"):
        write(tmp_path / rel, HAZARD)

    def paths(r):
        return sorted({m.group("path") for m in r.lines()})

    assert paths(cli(".")) == ["src/contest.py", "src/m.py"]
    assert paths(cli("tests")) == ["tests/helpers.py"]
    assert paths(cli("src/m_test.py")) == ["src/m_test.py"]
    assert paths(cli("--force-exclude", "src/m_test.py", "src/m.py")) == ["src/m.py"]
    everything = ["pkg/test/util.py", "src/conftest.py", "src/contest.py", "src/m.py", "src/m_test.py",
                  "test_top.py", "tests/helpers.py"]
    assert paths(cli("--lint-tests", ".")) == everything
    write(tmp_path / "pyproject.toml", "[tool.nanlint]\nlint-tests = true\n")
    assert paths(cli(".")) == everything


def test_exclude_and_extend_exclude(cli, tmp_path):
    for d in ("gen", "vendored/lib", "src", "src/gen2"):
        write(tmp_path / d / "m.py", HAZARD)
    write(tmp_path / ".venv" / "m.py", HAZARD)
    write(tmp_path / "pyproject.toml", '[tool.nanlint]\nextend-exclude = ["gen", "vendored/*", "src/gen*"]\n')
    r = cli(".")
    assert sorted(m.group("path") for m in r.lines()) == ["src/m.py"]  # .venv still skipped
    # `exclude` replaces the default list.
    write(tmp_path / "pyproject.toml", '[tool.nanlint]\nexclude = ["gen"]\n')
    r = cli(".")
    assert sorted(m.group("path") for m in r.lines()) == [
        ".venv/m.py", "src/gen2/m.py", "src/m.py", "vendored/lib/m.py"
    ]


def test_directory_walk_skips_default_folders_but_named_files_are_linted(cli, tmp_path):
    skipped = [".git", ".venv", "venv", "build", "__pycache__", "lib/site-packages/pkg", "x.egg-info"]
    for d in skipped:
        write(tmp_path / d / "m.py", HAZARD)
    write(tmp_path / "pkg" / "m.py", HAZARD)
    write(tmp_path / "pkg" / "stub.pyi", "import torch\ndef f(z): return 1 / (1 + torch.exp(-z))\n")
    write(tmp_path / "pkg" / "notes.txt", HAZARD)
    write(tmp_path / "pkg" / "script", HAZARD)
    r = cli(".")
    assert sorted(m.group("path") for m in r.lines()) == ["pkg/m.py", "pkg/stub.pyi"]
    r = cli(".venv/m.py", "build/m.py", "pkg/script")  # named explicitly: always linted
    assert sorted(m.group("path") for m in r.lines()) == [".venv/m.py", "build/m.py", "pkg/script"]


def test_explicit_path_in_an_excluded_folder_is_linted(cli, tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.nanlint]\nextend-exclude = ["gen", "*_pb2.py"]\n')
    write(tmp_path / "gen" / "m.py", HAZARD)
    write(tmp_path / "gen" / "sub" / "m.py", HAZARD)
    write(tmp_path / "gen" / "sub" / "api_pb2.py", HAZARD)
    assert cli(".").code == 0
    assert [m.group("path") for m in cli("gen/m.py").lines()] == ["gen/m.py"]
    assert [m.group("path") for m in cli("gen/sub/api_pb2.py").lines()] == ["gen/sub/api_pb2.py"]
    # A directory named on the command line is walked; excludes apply below it.
    assert [m.group("path") for m in cli("gen").lines()] == ["gen/m.py", "gen/sub/m.py"]
    os.chdir(tmp_path / "gen")
    assert [m.group("path") for m in cli(".").lines()] == ["m.py", "sub/m.py"]


def test_a_file_named_twice_is_reported_once(cli, tmp_path):
    write(tmp_path / "m.py", HAZARD)
    r = cli("m.py", "./m.py", ".")
    assert len(r.lines()) == 1


# --- rule pages ---------------------------------------------------------------------------


def test_rule_prints_the_page(cli):
    r = cli("rule", "NAN116")
    assert r.code == 0
    assert r.out == (ROOT / "rules" / "form" / "NAN116.md").read_text(encoding="utf-8")
    assert r.out.startswith("# NAN116 entropy-by-hand\n")
    assert cli("rule", "nan116").out == r.out


def test_rule_unknown_code_exits_2(cli):
    r = cli("rule", "NAN999")
    assert r.code == 2
    assert "NAN999" in one_line_error(r)


def test_rules_lists_every_rule(cli):
    r = cli("rules")
    assert r.code == 0
    listed = [line.split()[0] for line in r.out.splitlines()[1:]]
    assert listed == [rule.code for rule in all_rules()]
    rows = {line.split()[0]: line.split() for line in r.out.splitlines()[1:]}
    assert rows["NAN116"] == ["NAN116", "entropy-by-hand", "form", "safe", "off"]
    assert rows["NAN401"] == ["NAN401", "clip-after-step", "misuse", "unsafe", "on"]
    assert rows["NAN102"] == ["NAN102", "log-of-softmax", "form", "safe", "on"]
    assert rows["NAN201"] == ["NAN201", "log-without-epsilon", "value", "unsafe", "on"]
    assert rows["NAN113"] == ["NAN113", "masked-mean-empty", "value", "unsafe", "off"]


# --- suppression comments -------------------------------------------------------------------


def test_suppression_comments(cli, tmp_path):
    write(tmp_path / "m.py", (
        "import torch\n"                                         # 1
        "\n"                                                     # 2
        "def gates(z):\n"                                        # 3
        "    a = 1 / (1 + torch.exp(-z))  # noqa\n"              # 4 suppressed
        "    b = 1 / (1 + torch.exp(-z))  # noqa: NAN101, NAN102\n"  # 5 suppressed
        "    c = 1 / (1 + torch.exp(-z))  # nanlint: ignore[NAN101]\n"  # 6 suppressed
        "    d = 1 / (1 + torch.exp(-z))  # noqa: NAN102\n"      # 7 other code: reported
        "    e = 1 / (  # noqa: NAN101\n"                        # 8 suppressed (first line)
        "        1 + torch.exp(-z)\n"
        "    )\n"
        "    f = 1 / (1 + torch.exp(-z))  # NOQA:NAN1\n"         # 11 suppressed (prefix)
        "    g = '# noqa'; h = 1 / (1 + torch.exp(-z))\n"        # 12 a string is not a comment
        "    i = 1 / (1 + torch.exp(-z))  # nanlint: ignore[NAN102]\n"  # 13 reported
        "    j = 1 / (1 + torch.exp(-z))  # nanlint: ignore\n"   # 14 suppressed
        "    return a, b, c, d, e, f, g, h, i, j\n"
    ))
    r = cli("m.py")
    assert [int(m.group("row")) for m in r.lines()] == [7, 12, 13]


def test_suppressed_finding_is_not_fixed(cli, tmp_path):
    source = "import torch\na = 1 / (1 + torch.exp(-z))  # noqa: NAN101\n"
    path = write(tmp_path / "m.py", source)
    assert cli("--fix", "m.py").code == 0
    assert path.read_text() == source


def test_skip_file(cli, tmp_path):
    write(tmp_path / "m.py", "# nanlint: skip-file\n" + HAZARD)
    write(tmp_path / "n.py", 'import torch\nDOC = "# nanlint: skip-file"\ny = 1 / (1 + torch.exp(-z))\n')
    r = cli(".")
    assert [m.group("path") for m in r.lines()] == ["n.py"]  # inside a string it is not a comment


# --- bad input ----------------------------------------------------------------------------


def test_syntax_error_is_reported_at_its_position_and_the_run_goes_on(cli, tmp_path):
    write(tmp_path / "a.py", "import torch\n\ndef (:\n    pass\n")
    write(tmp_path / "b.py", HAZARD)
    r = cli(".")
    assert r.code == 1
    a, b = r.lines()
    assert (a.group("path"), a.group("row"), a.group("col"), a.group("code")) == ("a.py", "3", "5", "NAN001")
    assert "SyntaxError" in a.group("msg") and "not linted" in a.group("msg")
    assert (b.group("path"), b.group("code")) == ("b.py", "NAN101")


def test_unclosed_bracket_points_at_the_bracket(cli, tmp_path):
    write(tmp_path / "a.py", "import torch\ny = torch.exp(\n    1,\n")
    (m,) = cli("a.py").lines()
    assert (m.group("row"), m.group("col")) == ("2", "14")
    assert "never closed" in m.group("msg")


def test_fix_leaves_a_file_that_does_not_parse_alone(cli, tmp_path):
    source = "import torch\nx = 1 / (1 + torch.exp(-z))\ndef (:\n"
    path = write(tmp_path / "a.py", source)
    r = cli("--fix", "a.py")
    assert r.code == 1
    assert path.read_text() == source


def test_undecodable_file_is_reported_and_the_run_goes_on(cli, tmp_path):
    (tmp_path / "a.py").write_bytes(b"import torch\nx = '\xff\xfe'\n")
    write(tmp_path / "b.py", HAZARD)
    r = cli(".")
    assert r.code == 1
    a, b = r.lines()
    assert (a.group("path"), a.group("code")) == ("a.py", "NAN002")
    msg = a.group("msg")
    assert "utf-8" in msg and "0xff" in msg and "line 2" in msg and "not linted" in msg
    assert (b.group("path"), b.group("code")) == ("b.py", "NAN101")
    # --fix never writes a file it could not decode.
    cli("--fix", ".")
    assert (tmp_path / "a.py").read_bytes() == b"import torch\nx = '\xff\xfe'\n"


def test_unreadable_file_is_reported_and_the_run_goes_on(cli, tmp_path):
    secret = write(tmp_path / "a.py", HAZARD)
    write(tmp_path / "b.py", HAZARD)
    secret.chmod(0)
    try:
        try:
            secret.read_bytes()
            pytest.skip("running as root: a mode-000 file is still readable")
        except PermissionError:
            pass
        r = cli(".")
        assert r.code == 1
        a, b = r.lines()
        assert (a.group("path"), a.group("code")) == ("a.py", "NAN002")
        assert "cannot read" in a.group("msg")
        assert (b.group("path"), b.group("code")) == ("b.py", "NAN101")
    finally:
        secret.chmod(0o644)


def test_dangling_symlink_is_reported_and_the_run_goes_on(cli, tmp_path):
    # Readable by nobody, root included: the read fails whoever runs the tests.
    (tmp_path / "a.py").symlink_to(tmp_path / "gone.py")
    write(tmp_path / "b.py", HAZARD)
    r = cli(".")
    assert r.code == 1
    a, b = r.lines()
    assert (a.group("path"), a.group("code")) == ("a.py", "NAN002")
    assert "cannot read" in a.group("msg") and "No such file" in a.group("msg")
    assert (b.group("path"), b.group("code")) == ("b.py", "NAN101")


# --- the repository's own surface -----------------------------------------------------------


def test_readme_documents_every_option():
    from nanlint.cli import check

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for param in check.params:
        for opt in getattr(param, "opts", []):
            if opt.startswith("--"):
                assert f"`{opt}" in readme, f"{opt} is not documented in README.md"
    for key in ("select", "extend-select", "ignore", "per-file-ignores", "exclude", "extend-exclude"):
        assert f"`{key}`" in readme


def test_the_repository_lints_clean():
    done = subprocess.run(
        [sys.executable, "-m", "nanlint"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_readme_example_shows_findings_and_its_fixed_version_runs(tmp_path):
    example = ROOT / "examples" / "train_step.py"
    diff = subprocess.run(
        [sys.executable, "-m", "nanlint", "--diff", "examples/train_step.py"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert diff.returncode == 1
    assert diff.stdout.startswith("--- a/examples/train_step.py\n+++ b/examples/train_step.py\n")
    assert "+        g = torch.sigmoid(self.temperature * self.gate(x))" in diff.stdout
    listed = subprocess.run(
        [sys.executable, "-m", "nanlint", "examples/train_step.py"],
        cwd=ROOT, capture_output=True, text=True,
    )
    codes = {m.group("code") for m in map(LINE.match, listed.stdout.splitlines()) if m}
    assert len(codes) >= 2, listed.stdout
    # Fixed (unsafe fixes too), the script still parses, lints clean of fixable findings, runs.
    copy = tmp_path / "train_step.py"
    copy.write_bytes(example.read_bytes())
    subprocess.run(
        [sys.executable, "-m", "nanlint", "--fix", "--unsafe-fixes", str(copy)],
        cwd=tmp_path, capture_output=True, text=True,
    )
    fixed = copy.read_text()
    assert fixed != example.read_text()
    cst.parse_module(fixed)
    pytest.importorskip("torch")
    ran = subprocess.run([sys.executable, str(copy)], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert "step 4: loss" in ran.stdout and "nan" not in ran.stdout


SHORT_HAZARD = "import torch\n\ny = 1 / (1 + torch.exp(-x))\n"


def test_force_exclude_applies_excludes_to_named_files(cli, tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.nanlint]\nextend-exclude = ["generated"]\n')
    target = write(tmp_path / "generated" / "model.py", SHORT_HAZARD)
    assert cli(str(target.relative_to(tmp_path))).code == 1  # named: linted
    result = cli("--force-exclude", "generated/model.py")
    assert result.code == 0 and "NAN101" not in result.out
    write(tmp_path / "pyproject.toml", '[tool.nanlint]\nextend-exclude = ["generated"]\nforce-exclude = true\n')
    assert cli("generated/model.py").code == 0


def test_directory_walk_respects_gitignore(cli, tmp_path):
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    write(tmp_path / ".gitignore", "out/\n")
    write(tmp_path / "out" / "copy.py", SHORT_HAZARD)
    write(tmp_path / "src" / "model.py", SHORT_HAZARD)
    result = cli(".")
    assert "src/model.py" in result.out and "out/copy.py" not in result.out
    write(tmp_path / "pyproject.toml", "[tool.nanlint]\nrespect-gitignore = false\n")
    assert "out/copy.py" in cli(".").out


def test_boolean_config_keys_are_checked(cli, tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.nanlint]\nforce-exclude = "yes"\n')
    write(tmp_path / "a.py", SHORT_HAZARD)
    result = cli("a.py")
    assert result.code == 2
    assert "force-exclude" in one_line_error(result)


def test_precision_config_reports_half_only_hazards_everywhere(cli, tmp_path):
    """`precision = "fp16"`: the project runs in half precision even where a file shows no
    half dtype; an unknown value is a config error naming the key."""
    write(tmp_path / "pyproject.toml", '[tool.nanlint]\nprecision = "fp16"\n')
    write(tmp_path / "a.py", SHORT_HAZARD)
    assert cli("a.py").code == 1
    write(tmp_path / "pyproject.toml", '[tool.nanlint]\nprecision = "fp8"\n')
    result = cli("a.py")
    assert result.code == 2 and "precision" in one_line_error(result)


def test_precision_config_reaches_the_rules(tmp_path):
    from nanlint.run.config import load_settings

    (tmp_path / "pyproject.toml").write_text('[tool.nanlint]\nprecision = "bf16"\n')
    assert load_settings(start=tmp_path).precision == "bfloat16"
    (tmp_path / "pyproject.toml").write_text('[tool.nanlint]\nprecision = "auto"\n')
    assert load_settings(start=tmp_path).precision is None
