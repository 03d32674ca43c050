"""How this nanlint was installed, and what follows from it: its version, the line
`nanlint --version` prints, and the pip command that adds an extra (`server`, `verify`,
`report`) to this installation.

nanlint is not on PyPI, so `pip install 'nanlint[server]'` finds nothing. The command has to
name where this copy came from, which pip records in the distribution's `direct_url.json`
(PEP 610): a VCS URL and the commit it was at, or a local directory (editable or not).

The version has one source, `pyproject.toml`: an installed copy reads it from its
distribution's metadata, a source tree that is not installed from the pyproject.toml beside
the package. Nothing here runs at import time (importlib.metadata alone takes ~20 ms to
import): the functions are called when a version or a hint is printed.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Optional

# nanlint is not published yet (no package index, no public repository): an install of
# unknown origin is pointed at the clone or wheel it came from.
FROM_SOURCE = "<your nanlint clone or wheel>"
# Where a torch build for a given platform and CUDA version is chosen.
TORCH_INSTALL_URL = "https://pytorch.org/get-started/locally/"
# The version when neither an installed distribution nor a pyproject.toml says one.
UNKNOWN_VERSION = "0+unknown"

_PACKAGE = Path(__file__).resolve().parent.parent  # the nanlint package (this file is in core/)


# --- where this copy came from -----------------------------------------------------------


def _local_path(url: str) -> Optional[str]:
    """The path a `file:` URL names (None for any other URL)."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(url)
    if parsed.scheme != "file":
        return None
    if os.name == "nt":  # file:///C:/src/nanlint
        from nturl2path import url2pathname

        return url2pathname(parsed.path)
    return unquote(parsed.path)


def _read_origin(dist: Any) -> Optional[Dict[str, Any]]:
    try:
        text = dist.read_text("direct_url.json")
        data = json.loads(text) if text else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("url"), str) else None


def _same_path(a: Any, b: Path) -> bool:
    try:
        return Path(a).resolve() == b.resolve()
    except (OSError, RuntimeError, ValueError):
        return False


def _is_this_copy(dist: Any) -> bool:
    """Whether `dist` is an installation of the package this module is part of (a source
    tree on sys.path beside an installed nanlint must not take the other copy's version).
    A `nanlint.egg-info` that a build left in a source tree is no installation (it has no
    RECORD, and its version can be older than the pyproject.toml beside it)."""
    try:
        if dist.read_text("RECORD") is None:
            return False
    except OSError:
        return False
    if _same_path(dist.locate_file("nanlint/__init__.py"), _PACKAGE / "__init__.py"):
        return True  # installed: the files are where the distribution says
    origin = _read_origin(dist)  # editable: the distribution points at the source tree
    if origin is None or not (origin.get("dir_info") or {}).get("editable"):
        return False
    path = _local_path(origin["url"])
    return path is not None and _same_path(path, _PACKAGE.parent)


@lru_cache(maxsize=1)
def _distribution() -> Any:
    """This copy's installed distribution, or None where it is not installed."""
    import importlib.metadata as metadata

    try:
        found = list(metadata.distributions(name="nanlint"))
    except Exception:  # a damaged or unreadable sys.path entry: as if not installed
        return None
    return next((dist for dist in found if _is_this_copy(dist)), None)


def origin() -> Optional[Dict[str, Any]]:
    """This copy's `direct_url.json` (PEP 610), or None (not installed, or installed from
    an index, which records none)."""
    dist = _distribution()
    return _read_origin(dist) if dist is not None else None


# --- the version ---------------------------------------------------------------------------


def _source_tree_version() -> Optional[str]:
    """`version` in the pyproject.toml beside the package, when that file is nanlint's."""
    pyproject = _PACKAGE.parent / "pyproject.toml"
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - depends on the Python version
        import tomli as tomllib
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project") or {}
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    version = project.get("version")
    if project.get("name") != "nanlint" or not isinstance(version, str):
        return None
    return version


@lru_cache(maxsize=1)
def version() -> str:
    """nanlint's version: the installed distribution's, else the source tree's
    pyproject.toml's, else 0+unknown."""
    dist = _distribution()
    if dist is not None and dist.version:
        return str(dist.version)
    return _source_tree_version() or UNKNOWN_VERSION


def describe(number: str, origin: Optional[Dict[str, Any]]) -> str:
    """`0.1.0`, or `0.1.0 (git 1a2b3c4)` for a copy installed from a VCS URL: one version
    number covers every commit until the next release, the commit tells them apart."""
    vcs = (origin or {}).get("vcs_info")
    commit = vcs.get("commit_id") if isinstance(vcs, dict) else None
    if not isinstance(commit, str) or not commit:
        return number
    return f"{number} ({vcs.get('vcs') or 'vcs'} {commit[:7]})"


def version_line() -> str:
    """What `nanlint --version` prints after `nanlint `."""
    return describe(version(), origin())


# --- adding an extra -----------------------------------------------------------------------


def pip_command() -> str:
    """The pip that installs into the environment this nanlint runs in.

    Plain `pip` is what a user types and what linters print, and it is the right one in an
    activated virtualenv. But `pip` on PATH can belong to another environment (a virtualenv
    run as `.venv/bin/nanlint` without activating it, a pipx install, a pyenv shim): a hint
    that installs into the wrong environment is worse than a long one, so there the hint
    names this interpreter, `/path/to/python -m pip`, which cannot miss."""
    executable = sys.executable
    if not executable:
        return "pip"
    pip = shutil.which("pip")
    if pip is not None and os.path.normcase(os.path.dirname(os.path.abspath(pip))) == os.path.normcase(
        os.path.dirname(os.path.abspath(executable))
    ):
        return "pip"
    return f"{shlex.quote(executable)} -m pip"


def install_command(extra: str, origin: Optional[Dict[str, Any]], pip: str = "pip") -> str:
    """The command that installs nanlint's `extra` where nanlint came from (`origin`, a
    PEP 610 `direct_url.json`): from a VCS URL at the commit installed (adding the extra
    does not move nanlint to another commit), from the local directory it was installed
    from (`-e` where that install was editable), from the archive URL it was installed
    from, else (no origin, or one that is gone) a template naming the clone or wheel."""
    origin = origin or {}
    url = origin.get("url")
    vcs = origin.get("vcs_info")
    if isinstance(url, str) and isinstance(vcs, dict) and vcs.get("vcs"):
        ref = f"{vcs['vcs']}+{url}"
        commit = vcs.get("commit_id")
        if isinstance(commit, str) and commit:
            ref += f"@{commit}"
        if isinstance(origin.get("subdirectory"), str):
            ref += f"#subdirectory={origin['subdirectory']}"
        return f"{pip} install {shlex.quote(f'nanlint[{extra}] @ {ref}')}"
    directory = origin.get("dir_info")
    path = _local_path(url) if isinstance(url, str) and isinstance(directory, dict) else None
    if path is not None and os.path.isdir(path):
        editable = "-e " if directory.get("editable") else ""
        return f"{pip} install {editable}{shlex.quote(f'{path}[{extra}]')}"
    if isinstance(url, str) and isinstance(origin.get("archive_info"), dict):  # a wheel or sdist by URL
        path = _local_path(url)
        if path is None or os.path.isfile(path):
            return f"{pip} install {shlex.quote(f'nanlint[{extra}] @ {url}')}"
    # Unknown (a source tree that is not installed) or gone (a deleted directory or wheel):
    # nanlint has no public home to point at yet.
    return f"{pip} install '{FROM_SOURCE}[{extra}]'"


def install_hint(extra: str) -> str:
    """install_command for this copy of nanlint, with the pip of its environment."""
    return install_command(extra, origin(), pip_command())


class InstallHint:
    """A one-line message that ends in the command installing an extra, built when it is
    first printed: the module holding it can be imported at start-up without reading any
    package metadata. `str()` or an f-string gives the text."""

    def __init__(self, needs: str, extra: str, note: str = ""):
        self.needs = needs
        self.extra = extra
        self.note = note

    def __str__(self) -> str:
        return f"{self.needs}: {install_hint(self.extra)}{self.note}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __repr__(self) -> str:
        return f"InstallHint({str(self)!r})"
