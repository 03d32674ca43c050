"""Reading and writing a source file without losing a byte: its encoding (a BOM kept), its
line endings, and never over a change made on disk since it was read."""

from __future__ import annotations

import codecs
import io
import os
import stat
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path


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
