"""Which files to lint, and reading and writing them without losing a byte."""

from __future__ import annotations

import codecs
import io
import os
import stat
import subprocess
import tempfile
import tokenize
from dataclasses import dataclass
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


@dataclass
class SourceFile:
    text: str
    encoding: str  # as read; written back the same way ("utf-8-sig" keeps a BOM)
    data: bytes = b""  # the bytes read: a file changed since is not overwritten


class SourceError(Exception):
    pass


def read_source(path: Path) -> SourceFile:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SourceError(f"cannot read file: {exc.strerror or exc}") from exc
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        raise SourceError(f"cannot decode file: {exc}") from exc
    if encoding == "utf-8" and data.startswith(codecs.BOM_UTF8):
        encoding = "utf-8-sig"
    try:
        # No newline translation: `\r\n` stays `\r\n`, so edits keep the file's line endings.
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        row = data.count(b"\n", 0, exc.start) + 1
        raise SourceError(
            f"cannot decode file as {encoding}: byte {data[exc.start]:#04x} on line {row} is "
            f"not valid {encoding} ({exc.reason}); the file was not linted"
        ) from exc
    except LookupError as exc:
        raise SourceError(f"cannot decode file as {encoding}: {exc}") from exc
    return SourceFile(text, encoding, data)


class ChangedDuringRun(Exception):
    """The file on disk is no longer what was read: writing would lose someone's change."""


def write_fixed(path: Path, original: SourceFile, text: str) -> None:
    """Write `text` over a file read as `original`: through a symbolic link to its target,
    never recreating a file deleted meanwhile nor overwriting one changed meanwhile."""
    target = Path(os.path.realpath(path))
    try:
        current = target.read_bytes()
    except FileNotFoundError:
        raise ChangedDuringRun("it was deleted during the run") from None
    if current != original.data:
        raise ChangedDuringRun("it changed on disk during the run")
    write_atomic(target, text, original.encoding)


def write_atomic(path: Path, text: str, encoding: str, durable: bool = True) -> None:
    """Write via a temporary file in the same directory and rename over the original,
    so the file is never half-written; keeps its permission bits. `durable`: flush to disk
    before the rename (a user's file; a cache entry can skip it)."""
    data = text.encode(encoding)
    directory = path.parent
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".nanlint", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise

