"""The README's commands, run as a user runs them: in a fresh copy of this checkout (what a
clone holds, uncommitted work included), with no network but the package registry.

Every command block of the README (```sh, ```console, the CI and pre-commit ```yaml, the
config ```toml) and every sample of output is listed in BLOCKS with the test that runs or
checks it, or with why no test can; test_every_command_block_is_accounted_for fails on a
block that is not. The pre-commit blocks run in tests/test_precommit.py.

Slow: it builds two virtualenvs and a wheel, and installs torch from the local wheel the
machine's pip finds (about 2.5 minutes on a shared 2-core machine).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from test_precommit import FIXED, HAZARD, _env, _readme_precommit_snippets, _snapshot_checkout

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
WHEEL = "nanlint-0.1.0-py3-none-any.whl"


def _blocks() -> List[Tuple[str, str]]:
    """(language, text) of every fenced block of the README, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", README, re.S | re.M)


def _block(first_line_start: str) -> str:
    found = [text for _, text in _blocks() if text.lstrip().startswith(first_line_start)]
    assert len(found) == 1, f"{len(found)} README blocks start with {first_line_start!r}"
    return found[0]


def _lines(block: str) -> List[str]:
    return [line for line in block.splitlines() if line.strip()]


# Each block a user would run or compare with what they see, by how it starts: the test that
# runs it, or why none does.
BLOCKS: Dict[str, str] = {
    "$ cat gate.py": "test_the_first_session_runs_as_shown",
    "python3 -m venv .venv && .venv/bin/pip install -e .   #": "test_install_from_the_clone",
    "python3 -m pip wheel --no-deps -w dist .": "test_wheel_build_install_and_upgrade",
    "~/nanlint-env/bin/pip install --force-reinstall": "test_wheel_build_install_and_upgrade",
    "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/nanlint --diff": "test_the_example_runs_from_a_fresh_clone",
    "python3 -m venv .venv && .venv/bin/pip install torch==2.13.0": (
        "test_the_suite_command_is_what_ci_runs (its first line reaches download.pytorch.org, "
        "which is no package registry: .ci/run gets torch through the `test` extra's pin)"),
    "nanlint [check] [OPTIONS] [PATHS]...": "test_the_usage_lines_run",
    "examples/train_step.py:30:13: NAN101 [*] Sigmoid written with `exp`: once the exponent passes 11.09 in float16 (88.7 in float32 and bfloat16) `exp` is inf and the gradient NaN, though the value looks fine; use `torch.sigmoid`\nexamples": "test_the_output_samples_are_what_nanlint_prints",
    "examples/train_step.py:30:13: NAN101 [*] Sigmoid written with `exp`: once the exponent passes 11.09 in float16 (88.7 in float32 and bfloat16) `exp` is inf and the gradient NaN, though the value looks fine; use `torch.sigmoid`\n   |": "test_the_output_samples_are_what_nanlint_prints",
    "[tool.nanlint]": "test_the_configuration_sample_is_valid",
    "pkg/train.py:11:12: NAN201": "an excerpt (`...`) of a message, not a command: tests/test_cross_file.py checks such findings",
    "nb.ipynb:cell 4:2:8": "an excerpt (`...`) of a message: tests/test_notebooks.py checks notebook positions",
    "nanlint check --stdin-filename src/model.py": "test_the_stdin_lines_run",
    "repos:\n  - repo: local": "tests/test_precommit.py::test_the_readme_local_hook_works_verbatim",
    "repos:\n  - repo: /path/to/nanlint": "tests/test_precommit.py::test_the_readme_snippet_works_verbatim_and_autoupdate_freeze_pins_a_commit",
    "name: nanlint\non: [push, pull_request]": "test_the_ci_workflow_s_commands_run",
    "$ nanlint verify examples/train_step.py": "test_the_verify_session_runs_as_shown",
    "nanlint check --output-format json --exit-zero src/ > findings.json": "test_lint_here_verify_there",
    "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/pytest": (
        "test_the_suite_command_is_what_ci_runs; the benchmark lines take minutes and download "
        "pinned wheels (not run); calibrate --check runs in tests/test_verify_calibrate.py and the "
        "pages' sync in tests/test_pages.py"),
}
# Blocks that are not commands: code to read, editor settings.
NOT_COMMANDS = ("python", "json", "lua")


def test_every_command_block_is_accounted_for():
    this = Path(__file__).read_text(encoding="utf-8")
    for lang, text in _blocks():
        if lang in NOT_COMMANDS:
            continue
        keys = [k for k in BLOCKS if text.startswith(k)]
        assert len(keys) == 1, f"README block not accounted for in BLOCKS (or matched twice):\n{text[:200]}"
        where = BLOCKS[keys[0]]
        named = re.split(r"[ ;]", where, maxsplit=1)[0]
        test = named.split("::")[-1]
        if test.startswith("test_"):
            home = this if "::" not in named else (ROOT / named.split("::")[0]).read_text(encoding="utf-8")
            assert f"def {test}(" in home, f"{where}: no such test"


# --- a fresh clone ---------------------------------------------------------------------------


class Shell:
    """Runs README lines with bash in a folder, as a user's shell would: HOME is a folder of
    its own (for `~/nanlint-env`), and `activate` puts a virtualenv's bin first on PATH."""

    def __init__(self, env: Dict[str, str]):
        self.env = env

    def run(self, line: str, cwd: Path, activate: Path = None, stdin: str = None, timeout: float = 600,
            extra_env: Dict[str, str] = None) -> subprocess.CompletedProcess:
        env = dict(self.env, **(extra_env or {}))
        if activate is not None:
            env["PATH"] = os.pathsep.join([str(activate / "bin"), env["PATH"]])
            env["VIRTUAL_ENV"] = str(activate)
        return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, input=stdin, capture_output=True,
                              text=True, timeout=timeout)

    def ok(self, line: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
        done = self.run(line, cwd, **kw)
        assert done.returncode == 0, f"`{line}` failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        return done


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """(clone, shell, home): a copy of this checkout as a clone holds it, and a shell whose
    HOME is empty; torch is pinned by a constraint in the environment (as the machine's pip
    configuration caps it), never by changing a README line."""
    base = tmp_path_factory.mktemp("readme")
    env = _env(base)
    home = base / "home"
    home.mkdir()
    clone = base / "nanlint"
    _snapshot_checkout(clone, env)
    constraint = base / "constraints.txt"
    constraint.write_text("torch==2.13.0\n")
    env.update(HOME=str(home), PIP_CONSTRAINT=str(constraint), PYTHONDONTWRITEBYTECODE="1")
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(name, None)
    # The interpreter a user types as python3: this one's, not a virtualenv's.
    real = Path(getattr(sys, "_base_executable", sys.executable) or sys.executable).resolve().parent
    env["PATH"] = os.pathsep.join([str(real), env.get("PATH", "")])
    return clone, Shell(env), home


@pytest.fixture(scope="module")
def installed(fresh):
    """The clone after the README's Installation block, line by line, verbatim."""
    clone, shell, _ = fresh
    for line in _lines(_block("python3 -m venv .venv && .venv/bin/pip install -e .   #")):
        shell.ok(line, clone)
    return clone / ".venv"


def test_install_from_the_clone(fresh, installed):
    clone, shell, _ = fresh
    done = shell.ok(".venv/bin/nanlint --version", clone)
    assert done.stdout.startswith("nanlint 0.1.0")
    shell.ok(".venv/bin/python -c 'import torch, pygls'", clone)  # the two extras


def test_the_example_runs_from_a_fresh_clone(fresh, installed):
    clone, shell, _ = fresh
    (line,) = _lines(_block("python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/nanlint --diff"))
    done = shell.run(line, clone)
    assert done.returncode == 1, done.stderr  # fixes to show
    assert "+        g = torch.sigmoid(self.temperature * self.gate(x))" in done.stdout
    assert "Would fix 4 problems." in done.stderr
    assert (clone / "examples" / "train_step.py").read_text() == (ROOT / "examples" / "train_step.py").read_text()


def test_wheel_build_install_and_upgrade(fresh):
    """A wheel built in the clone, installed elsewhere, its extra's hint naming that wheel, and
    the README's upgrade line."""
    clone, shell, home = fresh
    build = _lines(_block("python3 -m pip wheel --no-deps -w dist ."))
    for line in build:
        shell.ok(line, clone)
    assert (clone / "dist" / WHEEL).is_file()
    env_dir = home / "nanlint-env"
    done = shell.ok("~/nanlint-env/bin/nanlint --version", clone)
    assert done.stdout == "nanlint 0.1.0\n"
    # `nanlint server` without its extra: the command that adds it, from this very wheel.
    hint = shell.run("~/nanlint-env/bin/nanlint server", clone, stdin="")
    assert hint.returncode == 2
    assert f"pip install 'nanlint[server] @ {(clone / 'dist' / WHEEL).as_uri()}'" in hint.stderr, hint.stderr
    (upgrade,) = _lines(_block("~/nanlint-env/bin/pip install --force-reinstall"))
    done = shell.ok(upgrade, clone)
    assert "Successfully installed nanlint-0.1.0" in done.stdout
    assert (env_dir / "bin" / "nanlint").is_file()
    # The CI workflow below installs the same wheel from its repository's tools/.
    (clone / "tools").mkdir(exist_ok=True)
    (clone / "tools" / WHEEL).write_bytes((clone / "dist" / WHEEL).read_bytes())


def _project(base: Path) -> Path:
    project = base / "project"
    (project / "src").mkdir(parents=True, exist_ok=True)
    (project / "src" / "model.py").write_text(HAZARD)
    return project


def test_the_ci_workflow_s_commands_run(fresh, tmp_path):
    """The workflow's `run:` lines, in a checkout of a user's repository that holds the wheel,
    with the environment setup-python gives (its pip and python first on PATH)."""
    clone, shell, home = fresh
    wheel = clone / "tools" / WHEEL
    if not wheel.is_file():
        pytest.skip("needs test_wheel_build_install_and_upgrade's wheel")
    project = _project(tmp_path)
    (project / "tools").mkdir()
    (project / "tools" / WHEEL).write_bytes(wheel.read_bytes())
    runs = re.findall(r"^\s*- run: (.*)$", _block("name: nanlint\non: [push, pull_request]"), re.M)
    assert len(runs) == 3, runs
    venv = home / "nanlint-env"  # stands in for setup-python's interpreter
    shell.ok(runs[0], project, activate=venv)
    annotations = shell.run(runs[1], project, activate=venv)
    assert annotations.returncode == 1  # a finding fails the job, as it should
    assert annotations.stdout.startswith("::error file=src/model.py,line=5,col=12"), annotations.stdout
    shell.ok(runs[2], project, activate=venv)
    log = json.loads((project / "nanlint.sarif").read_text())
    assert log["version"] == "2.1.0" and [r["ruleId"] for r in log["runs"][0]["results"]] == ["NAN102"]


def test_the_usage_lines_run(fresh, installed, tmp_path):
    """The runnable lines of the usage block, and `--help` for each synopsis line's command."""
    _, shell, _ = fresh
    project = _project(tmp_path)
    for line in _lines(_block("nanlint [check] [OPTIONS] [PATHS]...")):
        command = line.split("#", 1)[0].strip()
        if command == "nanlint server":
            continue  # waits for an editor on stdin: tests/test_server.py drives it
        if "[" in command:  # a synopsis: its command's help
            command = " ".join(w for w in command.split() if not w.startswith("[")) + " --help"
        done = shell.run(command, project, activate=installed, stdin="")
        assert done.returncode in (0, 1), f"`{command}`: {done.returncode}\n{done.stderr}"
        assert done.stdout, command


def test_the_stdin_lines_run(fresh, installed, tmp_path):
    _, shell, _ = fresh
    project = _project(tmp_path)
    report, fixed = [line.split("  #", 1)[0].strip() for line in _lines(_block("nanlint check --stdin-filename"))]
    done = shell.run(report, project, activate=installed)
    assert done.returncode == 1 and done.stdout.startswith("src/model.py:5:12: NAN102"), done.stdout
    done = shell.run(fixed, project, activate=installed)
    assert done.stdout == FIXED and done.stderr == "Found 1 problem (1 fixed, 0 remaining).\n"


def test_lint_here_verify_there(fresh, installed, tmp_path):
    _, shell, _ = fresh
    project = _project(tmp_path)
    lint, verify = [line.split("  #", 1)[0].strip() for line in _lines(
        _block("nanlint check --output-format json --exit-zero src/ > findings.json"))]
    shell.ok(lint, project, activate=installed)
    assert [f["code"] for f in json.loads((project / "findings.json").read_text())] == ["NAN102"]
    import torch

    if not torch.cuda.is_available():
        pytest.skip("the second line runs on a GPU (--device cuda)")
    shell.run(verify, project, activate=installed)
    assert (project / "report.html").is_file()


def _session(block: str) -> List[Tuple[str, str]]:
    """(command, output) pairs of a ```console block."""
    pairs, current = [], None
    for line in block.splitlines():
        if line.startswith("$ "):
            current = [line[2:], []]
            pairs.append(current)
        else:
            current[1].append(line)
    return [(c, "\n".join(o) + ("\n" if o else "")) for c, o in pairs]


def test_the_first_session_runs_as_shown(fresh, installed, tmp_path):
    _, shell, _ = fresh
    session = _session(_block("$ cat gate.py"))
    assert session[0][0] == "cat gate.py"
    (tmp_path / "gate.py").write_text(session[0][1])
    for command, output in session:
        done = shell.run(command, tmp_path, activate=installed)
        assert done.stdout == output, f"`{command}`"


def _timeless(text: str) -> str:
    return re.sub(r" in [\d.]+ s:", " in N s:", text)


def test_the_verify_session_runs_as_shown(fresh, installed):
    clone, shell, _ = fresh
    ((command, output),) = _session(_block("$ nanlint verify examples/train_step.py"))
    done = shell.run(command, clone, activate=installed)
    assert done.returncode == 1, done.stderr
    assert _timeless(done.stdout) == _timeless(output)


def test_the_output_samples_are_what_nanlint_prints():
    texts = [text for lang, text in _blocks() if not lang and text.startswith("examples/train_step.py:30:13")]
    assert len(texts) == 2
    concise, full = texts
    run = lambda *a: subprocess.run([sys.executable, "-m", "nanlint", "--no-cache", *a], cwd=ROOT,  # noqa: E731
                                    capture_output=True, text=True, timeout=120)
    assert run("examples/train_step.py").stdout == concise
    shown = run("--output-format", "full", "examples/train_step.py").stdout
    assert shown.startswith(full), "the README's `full` sample is not how the output starts"


def test_the_configuration_sample_is_valid(tmp_path):
    from nanlint.run.config import load_settings

    (tmp_path / "pyproject.toml").write_text(_block("[tool.nanlint]"))
    settings = load_settings(str(tmp_path / "pyproject.toml"))
    assert settings.select == ["NAN1"] and settings.extend_select == ["NAN102"] and settings.jobs == 2


def test_the_suite_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    first, second = _lines(_block("python3 -m venv .venv && .venv/bin/pip install torch==2.13.0"))
    assert first.startswith("python3 -m venv .venv && ")
    for command in ["python3 -m venv .venv"] + second.split(" && "):
        assert re.search(rf"^{re.escape(command)}$", ci, re.M), command
    dev = _lines(_block("python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/pytest"))[0]
    assert dev.split(" && ") == ["python3 -m venv .venv"] + second.split(" && ")
    assert shlex.split(first)[-1] == "https://download.pytorch.org/whl/cpu"
    assert "torch==2.13.0" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    # The pre-commit blocks are the two tests/test_precommit.py runs.
    assert len(_readme_precommit_snippets()) == 2
