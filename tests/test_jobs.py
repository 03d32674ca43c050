"""Parallel jobs give the output of one job, in the same order; the progress bar shows only
on a terminal."""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nanlint.run.jobs
import nanlint.run.progress
from nanlint.cli import main
from nanlint.run.config import Settings, select_rules
from nanlint.rules import Rule
from nanlint.output import render
from nanlint.run.progress import Progress, progress_for
from nanlint.run.runner import run

ROOT = Path(__file__).resolve().parent.parent


def project_copy(tmp_path: Path, pattern: str = "*.py") -> Path:
    """The fixtures (every rule's positives and negatives) plus files that cannot be linted."""
    target = tmp_path / "p"
    target.mkdir(parents=True)
    for fixture in (ROOT / "fixtures").glob(pattern):
        shutil.copy(fixture, target / fixture.name)
    (target / "pyproject.toml").write_text("[tool.nanlint]\n")
    (target / "broken.py").write_text("import torch\ndef f(:\n")
    (target / "latin.py").write_bytes(b"import torch\nx = '\xff'\n")
    return target


def run_in(path: Path, **kwargs):
    cwd = os.getcwd()
    os.chdir(path)
    try:
        return run(["."], Settings(root=path, select=["ALL"]), **kwargs)
    finally:
        os.chdir(cwd)


def test_two_jobs_report_what_one_job_reports(tmp_path, pools):
    project = project_copy(tmp_path)
    one = run_in(project, jobs=1)
    assert pools == []
    two = run_in(project, jobs=2)
    assert pools == [2]
    assert len(one.diagnostics) > 50 and {"NAN001", "NAN002"} <= {d.code for d in one.diagnostics}
    for fmt in ("text", "json", "sarif", "github"):
        assert render(fmt, two.diagnostics, unsafe_fixes=True) == render(fmt, one.diagnostics, unsafe_fixes=True)
    assert (two.errors, two.warnings) == (one.errors, one.warnings)


def test_two_jobs_fix_and_diff_like_one_job(tmp_path, pools):
    first, second = project_copy(tmp_path / "a"), project_copy(tmp_path / "b")
    diff_one = run_in(first, jobs=1, diff=True)
    diff_two = run_in(second, jobs=2, diff=True)
    assert diff_one.diffs and diff_two.diffs == diff_one.diffs and diff_two.fixed == diff_one.fixed
    fix_one = run_in(first, jobs=1, fix=True, unsafe_fixes=True)
    fix_two = run_in(second, jobs=2, fix=True, unsafe_fixes=True)
    assert pools == [2, 2]
    assert fix_one.fixed > 10 and fix_two.fixed == fix_one.fixed
    assert render("json", fix_two.diagnostics) == render("json", fix_one.diagnostics)
    assert fix_two.warnings == fix_one.warnings
    files = sorted(p.relative_to(first) for p in first.rglob("*.py"))
    assert files == sorted(p.relative_to(second) for p in second.rglob("*.py"))
    for name in files:
        assert (second / name).read_bytes() == (first / name).read_bytes(), name


def test_verify_lints_with_jobs_like_one_job(tmp_path, pools):
    from nanlint.verify.findings import lint_findings

    project = project_copy(tmp_path)
    cwd = os.getcwd()
    os.chdir(project)
    try:
        one = lint_findings(["."], Settings(root=project, select=["ALL"], jobs=1))
        two = lint_findings(["."], Settings(root=project, select=["ALL"], jobs=2))
    finally:
        os.chdir(cwd)
    assert pools == [2]
    assert render("json", two.diagnostics) == render("json", one.diagnostics) and one.diagnostics


def test_jobs_option_and_config_key(tmp_path, pools, monkeypatch, capsys):
    project = project_copy(tmp_path, "NAN10*.py")
    monkeypatch.chdir(project)

    def cli(*args):
        with pytest.raises(SystemExit):
            main(["--no-cache", "--select", "ALL", "--output-format", "json", *args, "."])
        return capsys.readouterr().out

    one = cli("--jobs", "1")
    assert pools == []
    assert cli("-j", "2") == one and pools == [2]
    (project / "pyproject.toml").write_text("[tool.nanlint]\njobs = 2\n")
    assert cli() == one and pools == [2, 2]
    (project / "pyproject.toml").write_text("[tool.nanlint]\njobs = 1\n")
    assert cli() == one and pools == [2, 2]
    (project / "pyproject.toml").write_text('[tool.nanlint]\njobs = "many"\n')
    with pytest.raises(SystemExit) as exc:
        main(["--no-cache", "."])
    assert exc.value.code == 2 and "`jobs` must be a whole number" in capsys.readouterr().err


def test_default_jobs_is_the_usable_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert nanlint.run.jobs.usable_cpus() == 3


class _Crash(Rule):
    """A test rule that kills the process linting a file that asks for it (as a segfault
    in a native parser or the kernel's out-of-memory killer would)."""

    code = "NAN994"
    name = "test-crash"
    message = "never reported"

    def visit_Module(self, node, ctx):
        if "CRASH HERE" in ctx.source:
            os._exit(3)


def test_a_dead_worker_is_reported_and_the_other_files_are_linted(tmp_path, pools, monkeypatch):
    project = project_copy(tmp_path, "NAN1*.py")
    (project / "crash.py").write_text("import torch\n# CRASH HERE\n")
    expected = run_in(project, jobs=1, diff=False)  # (no crash: the rule is not selected yet)
    monkeypatch.setattr("nanlint.run.runner.select_rules", lambda s: [*select_rules(s), _Crash])
    got = run_in(project, jobs=2)
    assert got.internal_errors == [
        "internal error on crash.py: the worker process linting it died (A process in the process "
        "pool was terminated abruptly while the future was running or pending.); the other files were linted"
    ]
    assert render("json", got.diagnostics) == render("json", expected.diagnostics)


# --- progress ---------------------------------------------------------------------------------


def test_no_bar_when_piped_or_quiet(tmp_path):
    assert progress_for(quiet=False, stream=open(os.devnull, "w")) is None
    read, write = os.pipe()
    with os.fdopen(write, "w") as pipe:
        assert progress_for(quiet=False, stream=pipe) is None
    os.close(read)
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        assert progress_for(quiet=True, stream=tty) is None
        assert progress_for(quiet=False, stream=tty) is not None
    os.close(master)


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def _nanlint_with_stderr(project: Path, stderr, *args: str) -> subprocess.CompletedProcess:
    # A delay of 0 makes every run "longer than a moment" (the real delay is half a second).
    code = (
        "import sys, nanlint.run.progress as p; p.DELAY_S = 0.0; from nanlint.cli import main; "
        "main(sys.argv[1:])"
    )
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache", "-j", "1", *args, "."],
        cwd=project, stdout=subprocess.PIPE, stderr=stderr, timeout=300,
    )


def test_a_bar_on_a_terminal_and_none_when_piped(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    for name in ("NAN101_sigmoid_by_hand.py", "NAN102_log_of_softmax.py", "NAN103_log_of_sigmoid.py"):
        shutil.copy(ROOT / "fixtures" / name, project / name)
    master, slave = pty.openpty()
    done = _nanlint_with_stderr(project, slave)
    os.close(slave)
    on_tty = _read_all(master)
    os.close(master)
    total = len(list(project.rglob("*.py")))
    assert "Linting" in on_tty and f"{total}/{total}" in on_tty
    piped = _nanlint_with_stderr(project, subprocess.PIPE)
    assert piped.stderr == b"" and piped.stdout == done.stdout
    master, slave = pty.openpty()
    _nanlint_with_stderr(project, slave, "--quiet")
    os.close(slave)
    assert "Linting" not in _read_all(master)
    os.close(master)


def test_a_short_run_draws_nothing(tmp_path):
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        bar = Progress(3, tty, delay=60)
        bar.update(3)
        bar.close()
    assert _read_all_nonblocking(master) == ""
    os.close(master)


def _read_all_nonblocking(fd: int) -> str:
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 65536).decode()
    except (BlockingIOError, OSError):
        return ""


# --- memory -----------------------------------------------------------------------------------


def _live_syntax_nodes() -> int:
    import gc

    import libcst

    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, libcst.CSTNode))


def test_no_syntax_tree_outlives_its_file(tmp_path):
    """What keeps memory bounded by the largest file, not the number of files: after a file
    is done, none of its LibCST nodes is still reachable (every rule's fixtures, so every
    rule's per-file state, including the training-loop facts, is exercised)."""
    project = project_copy(tmp_path)
    warm_up = run_in(project, jobs=1)  # rule modules load, module-level constants exist
    before = _live_syntax_nodes()
    again = run_in(project, jobs=1)
    fixed = run_in(project, jobs=1, diff=True, unsafe_fixes=True)
    assert again.diagnostics == warm_up.diagnostics and fixed.diffs
    assert _live_syntax_nodes() <= before
