"""ruff's habits that users reach for: the full format, colours on a terminal, --show-fixes,
-q/-v, file-level noqa, --statistics formats, `rule --all` and JSON rules, the unsafe-fix hint
with --diff, a mistyped command, `precision = "float32"`, an early error for a report folder
that does not exist, and stdin (`nanlint check -`, `--stdin-filename`)."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nanlint.cli import main
from nanlint.rules import all_rules

# NAN101 (a sigmoid written by hand: one expression, an exact fix, on by default) is these
# tests' sample hazard.

ROOT = Path(__file__).resolve().parent.parent
HAZARD = "import torch\n\n\ndef gate(z):\n    return 1 / (1 + torch.exp(-z))\n"
FIXED = "import torch\n\n\ndef gate(z):\n    return torch.sigmoid(z)\n"
# NAN101 (safe fix) and NAN111 (unsafe fix: a clamp changes values; off by default, so the
# tests that use TWO turn it on with ACOS_ON in the project's configuration, with NAN203,
# also off by default, for the half fill of the file-level noqa test).
ACOS_ON = '[tool.nanlint]\nextend-select = ["NAN111", "NAN203"]\nlatent = true\n'
TWO = (
    "import torch\nimport torch.nn.functional as F\n\n\n"
    "def f(a, b, z):\n"
    "    g = 1 / (1 + torch.exp(-z))\n"
    "    t = torch.acos(F.cosine_similarity(a, b, dim=-1))\n"
    "    return g, t\n"
)


@pytest.fixture
def cli(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NO_COLOR", raising=False)

    def run(*args):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        out, err = capsys.readouterr()
        return exc.value.code or 0, out, err

    return run


def codes(out: str):
    """The codes of the finding lines in concise output."""
    return [line.split(" ")[1] for line in out.splitlines() if re.match(r"\S+:\d+:\d+: NAN\d{3}", line)]


def nanlint(*args, stdin=None, cwd=None, env=None):
    """The real entry point in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "nanlint", *args], input=stdin, capture_output=True, text=True,
        cwd=cwd, env=env, timeout=120,
    )


# --- output formats ----------------------------------------------------------------------------


def test_full_format_shows_source_and_caret_and_default_stays_concise(cli, tmp_path):
    (tmp_path / "m.py").write_text(HAZARD)
    code, out, _ = cli("--output-format", "full", "m.py")
    assert code == 1
    assert out.splitlines()[:8] == [
        "m.py:5:12: NAN101 [*] " + out.splitlines()[0].split("[*] ", 1)[1],
        "  |",
        "4 | def gate(z):",
        "5 |     return 1 / (1 + torch.exp(-z))",
        "  |            ^^^^^^^^^^^^^^^^^^^^^^^ NAN101",
        "  |",
        "  = help: Replace with `torch.sigmoid`",
        "Found 1 problem (1 fixable with --fix).",
    ]
    code, out, _ = cli("m.py")
    assert len(out.splitlines()) == 2 and "|" not in out  # concise: one line per finding


def _tty_output(args, cwd, env_extra=None) -> str:
    """Run nanlint with stdout on a pseudo-terminal; returns what it printed."""
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    env.update(env_extra or {})
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "nanlint", *args], stdout=slave, stderr=subprocess.DEVNULL,
                            cwd=cwd, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # the terminal closed: the process is done
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(master)
    return b"".join(chunks).decode()


def test_colours_on_a_terminal_only_and_never_with_no_color(tmp_path):
    (tmp_path / "m.py").write_text(HAZARD)
    coloured = _tty_output(["m.py"], tmp_path)
    assert "\x1b[31m\x1b[1mNAN101\x1b[0m" in coloured  # the code in bold red
    assert "\x1b[1mm.py:5:12\x1b[0m" in coloured
    assert "\x1b[" not in _tty_output(["m.py"], tmp_path, {"NO_COLOR": "1"})
    assert "\x1b[" not in _tty_output(["--no-color", "m.py"], tmp_path)
    piped = nanlint("m.py", cwd=tmp_path)  # stdout is a pipe: plain text
    assert "\x1b[" not in piped.stdout and "NAN101" in piped.stdout


def test_show_fixes_lists_the_fixes_applied(cli, tmp_path):
    (tmp_path / "a.py").write_text(HAZARD)
    (tmp_path / "b.py").write_text(HAZARD + "\n\ndef h(z):\n    return 1 / (1 + torch.exp(-z))\n")
    code, out, _ = cli("--fix", "--show-fixes", ".")
    assert code == 0
    assert out == (
        "Fixed 3 problems:\n"
        "- a.py:\n    1 × NAN101 (sigmoid-by-hand)\n"
        "- b.py:\n    2 × NAN101 (sigmoid-by-hand)\n"
        "Found 3 problems (3 fixed, 0 remaining).\n"
    )


def test_quiet_prints_findings_only_and_verbose_tells_what_it_did(cli, tmp_path):
    (tmp_path / "m.py").write_text(HAZARD)
    (tmp_path / "clean.py").write_text(FIXED)
    code, out, err = cli("-q", ".")
    assert code == 1 and len(out.splitlines()) == 1 and out.startswith("m.py:5:12: NAN101")
    assert cli("--quiet", "clean.py")[1:] == ("", "")
    code, out, err = cli("-v", ".")
    assert out.splitlines()[-1] == "Found 1 problem (1 fixable with --fix)."
    lines = err.splitlines()
    assert lines[0] == "nanlint: settings: no [tool.nanlint] table found: defaults"
    assert "nanlint: checking clean.py" in lines and "nanlint: checking m.py" in lines
    assert lines[-1].startswith("nanlint: done in ") and lines[-1].endswith(" s")
    (tmp_path / "pyproject.toml").write_text("[tool.nanlint]\n")
    assert cli("--verbose", ".")[2].splitlines()[0] == f"nanlint: settings: {tmp_path / 'pyproject.toml'}"


# --- suppression ---------------------------------------------------------------------------------


def test_file_level_noqa(cli, tmp_path):
    (tmp_path / "pyproject.toml").write_text(ACOS_ON)
    (tmp_path / "all.py").write_text("# nanlint: noqa\n" + TWO)
    half = "\n\ndef h(q, mask):\n    return q.half().masked_fill(mask, -1e9)\n"
    (tmp_path / "codes.py").write_text("# nanlint: noqa: NAN1\n" + TWO + half)
    (tmp_path / "other.py").write_text("# nanlint: noqa: NAN2\n" + TWO)
    (tmp_path / "line.py").write_text(TWO.replace("(-z))\n", "(-z))  # noqa\n"))
    assert cli("all.py")[:2] == (0, "All checks passed!\n")
    code, out, _ = cli("codes.py")
    assert codes(out) == ["NAN203"]
    code, out, _ = cli("other.py")
    assert codes(out) == ["NAN101", "NAN111"]
    # On a line with code it is not file-level (and not a line-level noqa either).
    (tmp_path / "trailing.py").write_text(TWO.replace("(-z))\n", "(-z))  # nanlint: noqa\n"))
    assert codes(cli("trailing.py")[1]) == ["NAN101", "NAN111"]
    # A line-level bare `# noqa` stays line-level.
    code, out, _ = cli("line.py")
    assert codes(out) == ["NAN111"]
    # A suppressed file is not fixed.
    assert cli("--fix", "all.py")[1] == "All checks passed!\n"
    assert (tmp_path / "all.py").read_text() == "# nanlint: noqa\n" + TWO


# --- errors and hints ------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["sarif", "github", "full"])
def test_statistics_with_a_format_it_cannot_serve_is_an_error(cli, tmp_path, fmt):
    (tmp_path / "m.py").write_text(HAZARD)
    code, out, err = cli("--statistics", "--output-format", fmt, "m.py")
    assert code == 2 and out == ""
    assert err == f"nanlint: error: --statistics cannot be written as --output-format {fmt} (use text or json)\n"
    assert cli("--statistics", "--output-format", "json", "m.py")[0] == 1


def test_statistics_count_fixable_findings_one_by_one(cli, tmp_path):
    """A rule with one fixable finding and one without a fix is neither `[*]` nor `[ ]`."""
    (tmp_path / "m.py").write_text(
        "import torch\n\n"
        "def f(x):\n"
        "    a = torch.log(torch.softmax(x, -1))\n"
        "    p = torch.softmax(x, -1)\n"
        "    return a, torch.log(p)\n"
    )
    code, out, _ = cli("--statistics", "m.py")
    assert code == 1
    assert out.splitlines()[0] == "2\tNAN102\t[*] log-of-softmax (1 of 2 fixable)"
    code, out, _ = cli("--statistics", "--output-format", "json", "m.py")
    assert json.loads(out) == [{"code": "NAN102", "name": "log-of-softmax", "count": 2, "fixable": False,
                                "fixable_count": 1}]


@pytest.mark.parametrize("args, says", [
    (["--diff", "--output-format", "json"], "--diff prints the fixes as a unified diff: it cannot be written as --output-format json"),
    (["--diff", "--output-format", "sarif"], "--diff prints the fixes as a unified diff: it cannot be written as --output-format sarif"),
    (["--diff", "--statistics"], "--diff prints the fixes as a diff, not findings: it cannot be combined with --statistics"),
    (["--show-fixes"], "--show-fixes lists the fixes --fix applied: use it with --fix"),
    (["--fix", "--diff", "--show-fixes"], "--show-fixes lists the fixes --fix applied: use it with --fix and without --diff"),
])
def test_options_that_cannot_combine_are_a_usage_error(cli, tmp_path, args, says):
    """Never silently ignored: exit 2, one sentence, nothing written."""
    path = tmp_path / "m.py"
    path.write_text(HAZARD)
    code, out, err = cli(*args, "m.py")
    assert (code, out) == (2, "")
    assert err.startswith(f"nanlint: error: {says}") and err.count("\n") == 1, err
    assert path.read_text() == HAZARD


def test_diff_prints_the_unsafe_fixes_hint(cli, tmp_path):
    (tmp_path / "pyproject.toml").write_text(ACOS_ON)
    (tmp_path / "m.py").write_text(TWO)
    code, out, err = cli("--diff", "m.py")
    assert code == 1 and "+    g = torch.sigmoid(z)" in out
    assert err == (
        "Would fix 1 problem.\n"
        "1 more fix available with --fix --unsafe-fixes (they change values or statement order: review them).\n"
    )
    assert "more fix" not in cli("--diff", "--unsafe-fixes", "m.py")[2]


def test_mistyped_command_says_no_such_command(cli, tmp_path):
    code, out, err = cli("chek", "src")
    assert code == 2 and err == "nanlint: error: no such command 'chek'; did you mean 'check'?\n"
    assert cli("verfy")[2] == "nanlint: error: no such command 'verfy'; did you mean 'verify'?\n"
    assert cli("frobnicate")[2].startswith("nanlint: error: no such command or path 'frobnicate' (commands: check, ")
    # A directory of that name is linted, as before.
    (tmp_path / "chek").mkdir()
    (tmp_path / "chek" / "m.py").write_text(HAZARD)
    assert cli("chek")[1].startswith("chek/m.py:5:12: NAN101")


def test_precision_float32_is_accepted(cli, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.nanlint]\nprecision = "float32"\n')
    (tmp_path / "m.py").write_text(HAZARD)
    code, out, err = cli("m.py")
    assert code == 1 and err == "" and "NAN101" in out
    (tmp_path / "pyproject.toml").write_text('[tool.nanlint]\nprecision = "float31"\n')
    assert cli("m.py")[0] == 2


def test_verify_report_into_a_missing_folder_fails_before_the_run(cli, tmp_path):
    (tmp_path / "m.py").write_text(HAZARD)
    started = time.perf_counter()
    code, out, err = cli("verify", "--report", "missing/dir/report.html", "m.py")
    assert code == 2 and out == ""  # no verdict printed: nothing ran
    assert err == (
        f"nanlint: error: cannot write missing/dir/report.html: folder {tmp_path / 'missing' / 'dir'} does not exist\n"
    )
    assert time.perf_counter() - started < 5


# --- rules ------------------------------------------------------------------------------------------


def test_rule_all_and_json(cli):
    code, out, _ = cli("rule", "--all")
    assert code == 0
    assert [line.split(" ")[1] for line in out.splitlines() if line.startswith("# NAN")] == [r.code for r in all_rules()]
    code, out, _ = cli("rule", "NAN101", "--output-format", "json")
    item = json.loads(out)
    assert item["code"] == "NAN101" and item["name"] == "sigmoid-by-hand" and item["fix"] == "safe"
    assert item["default"] is True and item["url"].endswith("/rules/form/NAN101.md") and item["kind"] == "form"
    assert item["explanation"].startswith("# NAN101 ")
    code, out, _ = cli("rule", "--all", "--output-format", "json")
    assert [x["code"] for x in json.loads(out)] == [r.code for r in all_rules()]
    code, out, _ = cli("rules", "--output-format", "json")
    assert {x["code"]: x["default"] for x in json.loads(out)} == {r.code: r.default_enabled for r in all_rules()}
    assert cli("rule")[0] == 2 and cli("rule", "NAN101", "--all")[0] == 2


# --- stdin -----------------------------------------------------------------------------------------


def test_check_dash_reads_stdin(tmp_path):
    r = nanlint("check", "-", stdin=HAZARD, cwd=tmp_path)
    assert r.returncode == 1
    assert r.stdout.splitlines()[0].startswith("-:5:12: NAN101 [*] Sigmoid written with `exp`")
    r = nanlint("-", stdin=FIXED, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "All checks passed!\n")


def test_stdin_filename_applies_settings_by_that_name(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.nanlint.per-file-ignores]\n"legacy/*" = ["NAN101"]\n')
    r = nanlint("check", "--stdin-filename", "src/model.py", stdin=HAZARD, cwd=tmp_path)
    assert r.returncode == 1 and r.stdout.startswith("src/model.py:5:12: NAN101")
    r = nanlint("check", "--stdin-filename", "legacy/old.py", stdin=HAZARD, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "All checks passed!\n")


def test_stdin_fix_writes_the_fixed_source_to_stdout(tmp_path):
    (tmp_path / "pyproject.toml").write_text(ACOS_ON)
    r = nanlint("check", "--fix", "--stdin-filename", "m.py", stdin=TWO, cwd=tmp_path)
    assert r.stdout == TWO.replace("1 / (1 + torch.exp(-z))", "torch.sigmoid(z)")
    assert r.returncode == 1  # NAN111 remains (its fix is unsafe)
    assert r.stderr.splitlines()[0].startswith("m.py:7:9: NAN111")
    assert r.stderr.splitlines()[-2:] == [
        "Found 2 problems (1 fixed, 1 remaining).",
        "1 more fix available with --fix --unsafe-fixes (they change values or statement order: review them).",
    ]
    clean = nanlint("check", "--fix", "-", stdin=FIXED, cwd=tmp_path)
    assert (clean.returncode, clean.stdout) == (0, FIXED)
    diff = nanlint("check", "--diff", "--stdin-filename", "m.py", stdin=HAZARD, cwd=tmp_path)
    assert diff.returncode == 1 and "--- a/m.py\n+++ b/m.py\n" in diff.stdout


def test_stdin_cannot_be_mixed_with_paths(cli, tmp_path):
    (tmp_path / "m.py").write_text(HAZARD)
    assert cli("-", "m.py")[0] == 2
    assert cli("--stdin-filename", "x.py", "m.py")[0] == 2


def test_stdin_force_exclude_gives_the_source_back(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.nanlint]\nextend-exclude = ["generated"]\n')
    r = nanlint("check", "--fix", "--force-exclude", "--stdin-filename", "generated/m.py", stdin=HAZARD, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, HAZARD)
    r = nanlint("check", "--fix", "--stdin-filename", "generated/m.py", stdin=HAZARD, cwd=tmp_path)
    assert r.stdout == FIXED  # without --force-exclude a named file is linted, as on the command line
