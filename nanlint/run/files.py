"""Which files to lint (reading and writing one is core.source)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Set

from .config import ConfigError, Settings


def discover(paths: Sequence[str], settings: Settings, empty: Optional[List[str]] = None) -> List[Path]:
    """Python files under `paths`, sorted, each once. A path named explicitly is linted even
    when it matches an exclude (unless `force-exclude`); a directory walk skips excluded and
    default-skipped folders, and what git ignores (unless `respect-gitignore = false`).
    `empty`, when given, receives the paths (as given) that hold no file to lint."""
    found = []
    seen = set()
    for raw in paths:
        p = Path(raw)
        if not p.exists() and not p.is_symlink():
            raise ConfigError(f"path does not exist: {raw}")
        if p.is_file() or p.is_symlink() and not p.is_dir():
            # A broken or looping link named explicitly is read, and its error reported.
            if settings.force_exclude and settings.excluded(p):
                candidates: Iterator[Path] = iter([])
            else:
                candidates = iter([p])
        else:
            candidates = walk(p, settings)
        held = False
        for f in candidates:
            held = True
            key = os.path.normcase(os.path.abspath(f))
            if key not in seen:
                seen.add(key)
                found.append(f)
        if not held and empty is not None:
            empty.append(raw)
    found.sort(key=lambda f: f.as_posix())
    return found


def walk(root: Path, settings: Settings) -> Iterator[Path]:
    """The files a lint of the directory `root` reads, in order (excludes and `.gitignore`
    honoured; a directory's files, sorted, before its subdirectories)."""
    ignored = _git_ignored(root) if settings.respect_gitignore else set()
    for directory, dirnames, filenames in os.walk(root):
        d = Path(directory)
        dirnames[:] = sorted(
            n
            for n in dirnames
            if not settings.excluded(d / n, below=root) and _key(d / n) not in ignored
        )
        for name in sorted(filenames):
            if name.endswith((".py", ".pyi", ".ipynb")):
                f = d / name
                if not settings.excluded(f, below=root) and _key(f) not in ignored:
                    yield f


def _key(path: Path) -> str:
    return os.path.normcase(os.path.abspath(path))


def _git_ignored(root: Path) -> Set[str]:
    """Files and folders under `root` that git ignores; empty outside a git work tree or
    without git (one `git ls-files` per walked root)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z"],
            cwd=root,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return set()
    if out.returncode != 0:
        return set()
    return {
        _key(root / entry.rstrip("/"))
        for entry in out.stdout.decode("utf-8", "surrogateescape").split("\0")
        if entry
    }
