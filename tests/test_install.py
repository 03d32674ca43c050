"""How nanlint is installed and what it tells the user about it: the version comes from
pyproject.toml alone (`nanlint --version` names the commit of a git install), the README's
install lines name no tag that does not exist, and a missing extra's error prints the pip
command that works for this install (nanlint is not on PyPI, `pip install 'nanlint[server]'`
finds nothing)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nanlint
from nanlint.core import install
from nanlint.core.install import FROM_SOURCE, describe, install_command

ROOT = Path(__file__).resolve().parent.parent
SHA = "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - depends on the Python version
    import tomli as tomllib


def _pyproject_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


# --- the version ---------------------------------------------------------------------------


def test_the_version_is_pyprojects_and_written_nowhere_else():
    assert nanlint.__version__ == _pyproject_version()
    # One place: no module of the package spells the number.
    spelled = [p for p in (ROOT / "nanlint").rglob("*.py")
               if re.search(r"""__version__\s*=\s*["']""", p.read_text(encoding="utf-8"))]
    assert spelled == []


def test_nanlint_version_prints_the_pyproject_version():
    done = subprocess.run([sys.executable, "-m", "nanlint", "--version"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    # This checkout is installed from a directory (editable), not a git URL: no commit.
    assert done.stdout == f"nanlint {describe(_pyproject_version(), install.origin())}\n"
    assert done.stdout.startswith(f"nanlint {_pyproject_version()}")


def test_describe_names_the_commit_of_a_vcs_install_only():
    assert describe("0.1.0", None) == "0.1.0"
    assert describe("0.1.0", {"url": "file:///src/nanlint", "dir_info": {"editable": True}}) == "0.1.0"
    vcs = {"url": "https://github.com/nanlint/nanlint", "vcs_info": {"vcs": "git", "commit_id": SHA}}
    assert describe("0.1.0", vcs) == "0.1.0 (git 1a2b3c4)"


def test_a_source_tree_that_is_not_installed_reads_its_pyproject(monkeypatch):
    install.version.cache_clear()
    monkeypatch.setattr(install, "_distribution", lambda: None)
    try:
        assert install.version() == _pyproject_version()
        monkeypatch.setattr(install, "_source_tree_version", lambda: None)
        install.version.cache_clear()
        assert install.version() == "0+unknown"
    finally:
        install.version.cache_clear()


# --- the README's install, pre-commit and CI lines ------------------------------------------


def _tags() -> set:
    done = subprocess.run(["git", "-C", str(ROOT), "tag", "--list"], capture_output=True, text=True)
    return set(done.stdout.split()) if done.returncode == 0 else set()


@pytest.mark.parametrize("name", ["README.md", ".pre-commit-hooks.yaml"])
def test_install_lines_name_no_tag_that_does_not_exist(name):
    text = (ROOT / name).read_text(encoding="utf-8")
    # Every pre-commit `rev:`: `main`, a commit, or a tag this repository has (none yet:
    # `@v0.1.0` made pre-commit fail).
    refs = re.findall(r"^[#\s]*rev:\s*(\S+)", text, re.M)
    assert refs, f"{name} has no rev"
    tags = _tags()
    for ref in refs:
        assert ref == "main" or re.fullmatch(r"[0-9a-f]{40}", ref) or ref in tags, (
            f"{name} names `{ref}`, which is no branch, commit or tag of this repository"
        )
    assert not re.search(r"nanlint@v\d|rev:\s*v\d", text)


@pytest.mark.parametrize("name", ["README.md", ".pre-commit-hooks.yaml"])
def test_no_line_a_user_runs_points_at_a_repository_that_does_not_exist(name):
    """nanlint has no public home yet: an install, pre-commit or CI line that names one
    cannot work. The README says so once, in words."""
    text = (ROOT / name).read_text(encoding="utf-8")
    blocks = "\n".join(re.findall(r"^```\w*\n(.*?)^```$", text, re.S | re.M)) if name == "README.md" else text
    assert "github.com/nanlint" not in blocks and "git+" not in blocks
    if name == "README.md":
        assert "nanlint is not published yet" in text


# --- the command that adds an extra ---------------------------------------------------------


def test_a_vcs_install_adds_the_extra_at_its_own_commit():
    origin = {"url": "https://github.com/nanlint/nanlint", "vcs_info": {"vcs": "git", "commit_id": SHA}}
    assert install_command("server", origin) == (
        f"pip install 'nanlint[server] @ git+https://github.com/nanlint/nanlint@{SHA}'"
    )
    # A fork, a subdirectory, another pip.
    fork = {"url": "https://example.org/me/nanlint.git", "subdirectory": "py",
            "vcs_info": {"vcs": "git", "commit_id": SHA, "requested_revision": "main"}}
    assert install_command("verify", fork, "/opt/venv/bin/python -m pip") == (
        f"/opt/venv/bin/python -m pip install "
        f"'nanlint[verify] @ git+https://example.org/me/nanlint.git@{SHA}#subdirectory=py'"
    )


def test_a_directory_install_adds_the_extra_from_that_directory(tmp_path):
    checkout = tmp_path / "my checkout"
    checkout.mkdir()
    url = checkout.as_uri()  # file:///.../my%20checkout
    assert install_command("server", {"url": url, "dir_info": {"editable": True}}) == (
        f"pip install -e '{checkout}[server]'"
    )
    assert install_command("report", {"url": url, "dir_info": {}}) == f"pip install '{checkout}[report]'"


def test_an_unknown_or_vanished_origin_names_the_clone_or_wheel(tmp_path):
    # No public repository to point at: the command says what to put there.
    expected = f"pip install '{FROM_SOURCE}[verify]'"
    assert install_command("verify", None) == expected
    assert install_command("verify", {}) == expected
    gone = (tmp_path / "deleted").as_uri()
    assert install_command("verify", {"url": gone, "dir_info": {"editable": True}}) == expected
    assert install_command("verify", {"url": gone + "/nanlint-0.1.0-py3-none-any.whl", "archive_info": {}}) == expected


def test_an_archive_install_adds_the_extra_from_that_archive():
    url = "https://example.org/nanlint-0.1.0-py3-none-any.whl"
    assert install_command("server", {"url": url, "archive_info": {"hashes": {}}}) == (
        f"pip install 'nanlint[server] @ {url}'"
    )


def test_the_pip_is_plain_only_where_it_is_this_environments(tmp_path, monkeypatch):
    venv_bin = tmp_path / "venv" / "bin"
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    monkeypatch.setattr(shutil, "which", lambda name: str(venv_bin / name))
    assert install.pip_command() == "pip"
    other = tmp_path / "other env" / "bin"
    monkeypatch.setattr(shutil, "which", lambda name: str(other / name))
    assert install.pip_command() == f"{venv_bin / 'python'} -m pip"
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(sys, "executable", str(other / "python"))
    assert install.pip_command() == f"'{other / 'python'}' -m pip"


# --- the real CLI with an extra missing -----------------------------------------------------


def _hidden(modules, argv, cwd: Path, env=None) -> subprocess.CompletedProcess:
    """`nanlint ARGV` in a subprocess where importing `modules` fails (as if not installed),
    with this interpreter's bin folder first on PATH (so the hint's pip is plain `pip`)."""
    hide = "; ".join(f"sys.modules[{m!r}] = None" for m in modules)
    code = f"import sys; {hide}; from nanlint.cli import main; main({argv!r})"
    env = dict(env if env is not None else os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=120)


def _this_install(extra: str) -> str:
    command = install_command(extra, install.origin(), "pip")
    origin = install.origin() or {}
    if (origin.get("dir_info") or {}).get("editable") and Path(install._local_path(origin["url"])) == ROOT:
        assert command == f"pip install -e '{ROOT}[{extra}]'"  # the development setup: this checkout
    return command


def test_server_without_pygls_prints_the_command_for_this_install(tmp_path):
    done = _hidden(["pygls", "pygls.lsp", "pygls.lsp.server"], ["server"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"nanlint: error: the language server needs pygls: {_this_install('server')} (")
    assert done.stderr.count("\n") == 1 and "'nanlint[server]'" not in done.stderr


def test_verify_without_torch_prints_the_command_for_this_install(tmp_path):
    (tmp_path / "m.py").write_text("import torch\n")
    done = _hidden(["torch"], ["verify", "m.py"], tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"nanlint: error: `nanlint verify` needs PyTorch: {_this_install('verify')} (for a specific "
        "platform or CUDA build, install torch first: https://pytorch.org/get-started/locally/)\n"
    )


def test_a_git_install_names_its_commit_and_adds_extras_at_it(tmp_path):
    # A real install from a git URL (pip, no network: no build isolation, no dependencies)
    # into a folder of its own, run from there: PEP 610's record, read back.
    from test_precommit import _env, _git, _snapshot_checkout

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    env = _env(tmp_path)
    source = tmp_path / "nanlint-src"
    commit = _snapshot_checkout(source, env)
    target = tmp_path / "site"
    url = f"git+file://localhost{source.as_posix()}@main"  # pip 23 wants a host in a file URL
    built = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(target), f"nanlint @ {url}"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(target), os.environ.get("PYTHONPATH", "")] if p)
    shown = subprocess.run([sys.executable, "-m", "nanlint", "--version"], capture_output=True, text=True,
                           cwd=tmp_path, env=env, timeout=60)
    assert shown.stdout == f"nanlint {_pyproject_version()} (git {commit[:7]})\n", shown.stdout + shown.stderr
    done = _hidden(["pygls", "pygls.lsp", "pygls.lsp.server"], ["server"], tmp_path, env)
    assert done.stderr.startswith(
        "nanlint: error: the language server needs pygls: "
        f"pip install 'nanlint[server] @ git+file://localhost{source.as_posix()}@{commit}' ("
    ), done.stderr
    assert _git(source, env, "rev-parse", "main").strip() == commit


class _FakeDistribution:
    def __init__(self, files, root):
        self.files, self.root = files, root

    def read_text(self, name):
        return self.files.get(name)

    def locate_file(self, name):
        return self.root / name


def test_a_build_leftover_egg_info_is_no_installation():
    # `nanlint.egg-info` in a checkout sits beside the package, but nothing installed it.
    leftover = _FakeDistribution({"PKG-INFO": "Version: 0.0.1"}, ROOT)
    assert not install._is_this_copy(leftover)
    installed = _FakeDistribution({"RECORD": "nanlint/__init__.py,,\n"}, ROOT)
    assert install._is_this_copy(installed)
    elsewhere = _FakeDistribution({"RECORD": "nanlint/__init__.py,,\n"}, ROOT / "elsewhere")
    assert not install._is_this_copy(elsewhere)
    editable = _FakeDistribution(
        {"RECORD": "", "direct_url.json": f'{{"url": "{ROOT.as_uri()}", "dir_info": {{"editable": true}}}}'},
        ROOT / "site-packages",
    )
    assert install._is_this_copy(editable)


def test_starting_the_cli_reads_no_package_metadata():
    # importlib.metadata alone takes ~20 ms to import: read only when a version or a hint
    # is printed (or the cache needs the version), not to start.
    code = "import sys, nanlint, nanlint.cli, nanlint.server; print('importlib.metadata' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
