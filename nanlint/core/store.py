"""What nanlint keeps on disk between runs: JSON entries under a cache directory (tagged, and
git-ignored), each written to a temporary file and renamed into place, so two concurrent runs
each see a whole old entry or a whole new one. A project file's summary is kept here by the
analysis (`load_summary`, `store_summary`); run.cache.Cache adds the lint results."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .source import write_atomic

# Bumped when the entry layout changes.
FORMAT = 1

_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by nanlint.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)

_code_fingerprint: Optional[str] = None


def code_fingerprint() -> str:
    """A hash of nanlint's own source: an edited checkout (same version number, new rule
    code) must not reuse results computed by the old code."""
    global _code_fingerprint
    if _code_fingerprint is None:
        # The source alone: the version number adds nothing the bytes do not say, and
        # reading it costs a package-metadata lookup on every warm run.
        digest = hashlib.sha256(b"nanlint cache 1\0")
        package = Path(__file__).resolve().parent.parent  # all of nanlint, not core/ alone
        for path in sorted(package.rglob("*.py")):
            if "verify" in path.relative_to(package).parts:
                continue  # the verifier does not take part in linting
            digest.update(path.relative_to(package).as_posix().encode() + b"\0")
            try:
                digest.update(path.read_bytes())
            except OSError:
                pass
        _code_fingerprint = digest.hexdigest()
    return _code_fingerprint


def key_hash(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode("utf-8", "surrogateescape")).hexdigest()


class Store:
    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self._ready = False
        self._broken = False  # the directory cannot be written: run on without a cache

    def _entry_path(self, kind: str, slot: str) -> str:
        # A string, not a Path: a warm run builds one per file and pathlib joins are slow.
        return os.path.join(self.directory, f"v{FORMAT}", kind, slot[:2], f"{slot}.json")

    def load_summary(self, path: Path, content_hash: str, provider: str) -> Tuple[bool, Any]:
        """(found, summary) for a file's bytes and a summary provider."""
        data = self._read(self._entry_path("summaries", key_hash(os.path.abspath(path))))
        provider = f"{provider}@{code_fingerprint()}"
        if data is not None and data.get("content") == content_hash and data.get("provider") == provider:
            return True, data.get("summary")
        return False, None

    def store_summary(self, path: Path, content_hash: str, provider: str, summary: Any) -> None:
        entry = {"content": content_hash, "provider": f"{provider}@{code_fingerprint()}", "summary": summary}
        self._write(self._entry_path("summaries", key_hash(os.path.abspath(path))), entry)

    def _read(self, path: str) -> Optional[Dict[str, Any]]:
        try:
            with open(path, "rb") as handle:
                data = json.loads(handle.read())  # bytes: JSON is UTF-8, no text layer
        except (OSError, ValueError):
            return None  # missing, unreadable or damaged: a miss, never an error
        return data if isinstance(data, dict) else None

    def _prepare(self) -> bool:
        if self._ready or self._broken:
            return self._ready
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for name, text in (("CACHEDIR.TAG", _TAG), (".gitignore", "# Created by nanlint.\n*\n")):
                target = self.directory / name
                if not target.exists():
                    write_atomic(target, text, "utf-8", durable=False)
            self._ready = True
        except OSError:
            self._broken = True
        return self._ready

    def _write(self, path: str, data: Dict[str, Any]) -> None:
        if not self._prepare():
            return
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_atomic(Path(path), json.dumps(data, separators=(",", ":")), "utf-8", durable=False)
        except (OSError, TypeError, ValueError):
            pass  # a cache that cannot be written costs speed, never a result
