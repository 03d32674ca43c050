"""The pre-commit hooks, end to end: a real git repository, a real `git commit`, and pre-commit
installing nanlint from a snapshot of this checkout into its own virtualenv (with pip, from the
package registry). The check hook blocks a commit that adds a hazard; the fixing hook rewrites
it, and the commit then goes through. The README's snippet works as written (`rev: main`), and
`pre-commit autoupdate --freeze` pins it to a commit.

Slow (pre-commit builds the hook's environment, about a minute; the tests share one
PRE_COMMIT_HOME, so a hook environment built by one is reused by the other)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# An entropy written by hand (NAN116, on by default, exact fix): a class absent from the
# labels has frequency 0, and 0 * log(0) is NaN.
HAZARD = """\
import torch


def class_log_probs(logits):
    return torch.log(torch.softmax(logits, dim=-1))
"""

FIXED = """\
import torch


def class_log_probs(logits):
    return torch.log_softmax(logits, dim=-1)
"""


def _env(tmp: Path, home: Path = None) -> dict:
    """A hermetic environment for git and pre-commit; `home`: pre-commit's cache of hook
    environments (default: one of its own under `tmp`)."""
    config = tmp / "gitconfig"
    config.write_text("")
    env = dict(os.environ)
    env.update(
        PRE_COMMIT_HOME=str(home if home is not None else tmp / "pre-commit-home"),
        # A hermetic git: no user or system config (hooksPath, signing, templates).
        GIT_CONFIG_GLOBAL=str(config),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="nanlint test",
        GIT_AUTHOR_EMAIL="test@example.invalid",
        GIT_COMMITTER_NAME="nanlint test",
        GIT_COMMITTER_EMAIL="test@example.invalid",
    )
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    env.pop("GIT_INDEX_FILE", None)
    return env


def _run(args, cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=timeout,
    )


def _git(cwd: Path, env: dict, *args: str) -> str:
    done = _run(["git", *args], cwd, env)
    assert done.returncode == 0, f"git {' '.join(args)} failed:\n{done.stdout}"
    return done.stdout


def _snapshot_checkout(dest: Path, env: dict) -> str:
    """Copy this checkout's working tree (uncommitted work included, ignored files such as
    .venv left out) into a fresh repository, on a branch named `main` as on GitHub, and
    commit it: pre-commit wants a `rev`. Returns the commit's SHA."""
    dest.mkdir()
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
    )
    if listed.returncode == 0 and listed.stdout:
        names = [n for n in listed.stdout.decode("utf-8", "surrogateescape").split("\0") if n]
        for name in names:
            source = ROOT / name
            if source.is_file():  # a tracked file deleted in the work tree is skipped
                target = dest / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
    else:  # not a git checkout (an unpacked sdist): copy what matters
        skip = shutil.ignore_patterns(
            ".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__",
            ".pytest_cache", "corpus",
        )
        shutil.copytree(ROOT, dest, ignore=skip, dirs_exist_ok=True)
    assert (dest / ".pre-commit-hooks.yaml").is_file()
    _git(dest, env, "init", "-q")
    _git(dest, env, "symbolic-ref", "HEAD", "refs/heads/main")  # whatever init.defaultBranch says
    _git(dest, env, "add", "-A")
    _git(dest, env, "commit", "-q", "--no-verify", "-m", "snapshot of the nanlint checkout")
    return _git(dest, env, "rev-parse", "HEAD").strip()


def _config(repo: Path, rev: str, hook_ids) -> str:
    hooks = "".join(f"      - id: {h}\n" for h in hook_ids)
    return f"repos:\n  - repo: {repo.as_posix()}\n    rev: {rev}\n    hooks:\n{hooks}"


@pytest.fixture(scope="module")
def hooks(tmp_path_factory):
    """(snapshot of this checkout, its commit, a PRE_COMMIT_HOME) shared by this module's
    tests: pre-commit keys a hook environment by (repo, rev), so one built for a commit of
    the snapshot serves every test that names that commit."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    base = tmp_path_factory.mktemp("hooks")
    home = base / "pre-commit-home"
    repo = base / "nanlint-src"
    rev = _snapshot_checkout(repo, _env(base, home))
    return repo, rev, home


def test_check_hook_blocks_and_fix_hook_repairs(tmp_path, hooks):
    hooks_repo, rev, home = hooks
    env = _env(tmp_path, home)

    project = tmp_path / "project"
    project.mkdir()
    _git(project, env, "init", "-q")
    (project / ".pre-commit-config.yaml").write_text(_config(hooks_repo, rev, ["nanlint"]))
    (project / "model.py").write_text(HAZARD)
    (project / "notes.txt").write_text("not python: the hooks never see it\n")
    installed = _run([sys.executable, "-m", "pre_commit", "install"], project, env)
    assert installed.returncode == 0, installed.stdout

    # 1. The check hook blocks the commit and names the rule.
    _git(project, env, "add", "-A")
    blocked = _run(["git", "commit", "-m", "add a gate"], project, env)
    assert blocked.returncode != 0, blocked.stdout
    assert "model.py:5:12: NAN102" in blocked.stdout, blocked.stdout
    assert _run(["git", "rev-parse", "--verify", "-q", "HEAD"], project, env).returncode != 0
    assert (project / "model.py").read_text() == HAZARD  # the check hook writes nothing

    # 2. With the fixing hook first, the commit attempt rewrites the file (pre-commit stops
    #    that commit because a hook changed a file)...
    (project / ".pre-commit-config.yaml").write_text(
        _config(hooks_repo, rev, ["nanlint-fix", "nanlint"])
    )
    _git(project, env, "add", "-A")
    rewritten = _run(["git", "commit", "-m", "add a gate"], project, env)
    assert rewritten.returncode != 0, rewritten.stdout
    assert "files were modified by this hook" in rewritten.stdout, rewritten.stdout
    assert (project / "model.py").read_text() == FIXED

    # 3. ...and once the rewrite is staged, the commit goes through with both hooks passing.
    _git(project, env, "add", "model.py")
    committed = _run(["git", "commit", "-m", "add a gate"], project, env)
    assert committed.returncode == 0, committed.stdout
    assert "Passed" in committed.stdout, committed.stdout
    assert _git(project, env, "show", "HEAD:model.py") == FIXED


def _readme_precommit_snippets() -> list:
    """The ```yaml blocks of README.md's `## pre-commit` section, as a user copies them: the
    `repo: local` hook, then the clone given by its path."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## pre-commit\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"^```yaml\n(.*?)^```$", section, re.S | re.M)
    assert len(found) == 2, "the README's pre-commit section should hold two yaml blocks"
    return found


def _with_nanlint_on_path(env: dict) -> dict:
    """The environment a user commits in after installing nanlint (the README's `local` hook
    runs the `nanlint` on PATH): this test's own installation."""
    env = dict(env)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    assert shutil.which("nanlint", path=env["PATH"]), "no nanlint beside this interpreter"
    return env


def test_the_readme_local_hook_works_verbatim(tmp_path):
    """`repo: local` runs the installed nanlint: the snippet as written blocks a hazard, and
    its commented alternative entry (the fixing one) rewrites it."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    snippet = _readme_precommit_snippets()[0]
    assert "repo: local" in snippet and "language: system" in snippet, snippet
    env = _with_nanlint_on_path(_env(tmp_path))
    project = tmp_path / "project"
    project.mkdir()
    _git(project, env, "init", "-q")
    config = project / ".pre-commit-config.yaml"
    config.write_text(snippet)
    (project / "model.py").write_text(HAZARD)
    _git(project, env, "add", "-A")
    ran = _run([sys.executable, "-m", "pre_commit", "run", "--all-files"], project, env)
    assert ran.returncode == 1, ran.stdout
    assert "model.py:5:12: NAN102" in ran.stdout, ran.stdout
    assert (project / "model.py").read_text() == HAZARD

    # The other entry the snippet offers, uncommented in place of the first.
    report = re.search(r"^(\s*)entry: (nanlint --force-exclude)(.*)$", snippet, re.M)
    fixing = re.search(r"^(\s*)# entry: (nanlint --fix --force-exclude)(.*)$", snippet, re.M)
    assert report and fixing, snippet
    swapped = snippet.replace(report.group(0), "").replace(fixing.group(0), f"{fixing.group(1)}entry: {fixing.group(2)}")
    config.write_text(swapped)
    fixed = _run([sys.executable, "-m", "pre_commit", "run", "--all-files"], project, env)
    assert fixed.returncode == 1 and "files were modified by this hook" in fixed.stdout, fixed.stdout
    assert (project / "model.py").read_text() == FIXED


def test_the_readme_snippet_works_verbatim_and_autoupdate_freeze_pins_a_commit(tmp_path, hooks):
    hooks_repo, rev, home = hooks
    env = _env(tmp_path, home)
    snippet = _readme_precommit_snippets()[1]
    # Only the path changes: this checkout's snapshot stands in for the user's clone.
    placeholder = "/path/to/nanlint"
    assert snippet.count(placeholder) == 1, snippet
    assert re.search(r"^    rev: main$", snippet, re.M), snippet
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"`{placeholder}`" in readme  # the README says to write the clone's path there

    project = tmp_path / "project"
    project.mkdir()
    _git(project, env, "init", "-q")
    config = project / ".pre-commit-config.yaml"
    config.write_text(snippet.replace(placeholder, hooks_repo.as_posix()))
    (project / "model.py").write_text(HAZARD)
    _git(project, env, "add", "-A")

    ran = _run([sys.executable, "-m", "pre_commit", "run", "--all-files"], project, env)
    assert ran.returncode == 1, ran.stdout
    assert "model.py:5:12: NAN102" in ran.stdout, ran.stdout
    # The warning the README describes for a branch name.
    assert "appears to be a mutable reference" in ran.stdout, ran.stdout
    assert "mutable reference" in readme

    # `autoupdate --freeze` with no tag in the repository: the SHA of the commit main is at.
    updated = _run([sys.executable, "-m", "pre_commit", "autoupdate", "--freeze"], project, env)
    assert updated.returncode == 0, updated.stdout
    pinned = re.findall(r"^    rev: (\S+)$", config.read_text(), re.M)
    assert pinned == [rev] and re.fullmatch(r"[0-9a-f]{40}", rev), config.read_text()
    assert config.read_text() == snippet.replace(placeholder, hooks_repo.as_posix()).replace(
        "rev: main", f"rev: {rev}"
    )

    # The pinned config runs the same hook, without the warning.
    again = _run([sys.executable, "-m", "pre_commit", "run", "--all-files"], project, env)
    assert again.returncode == 1, again.stdout
    assert "model.py:5:12: NAN102" in again.stdout and "mutable reference" not in again.stdout, again.stdout
