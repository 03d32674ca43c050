"""The result cache: `.nanlint_cache/` at the project root.

One entry per (file, settings): the file's diagnostics under a key that holds everything the
result depends on (the file's bytes, nanlint's own code, the rules and precision, the
displayed path, the summaries or contents of the project files it imports). A changed input
gives a new key, so a stale entry is never used, only overwritten. Entries are JSON (a cache
directory can travel with a checkout: it must never be able to run code) and are written to
a temporary file and renamed into place, so two concurrent runs each see a whole old entry
or a whole new one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..core.diagnostics import Diagnostic, Edit, Fix, Position, Probe, ProbeInput, Step
from ..core.store import FORMAT, Store, code_fingerprint, key_hash
from ..analysis.project import ImportRef

CACHE_DIR_NAME = ".nanlint_cache"
ENV_VAR = "NANLINT_CACHE_DIR"


def find_cache_dir(cli_value: Optional[str], config_value: Optional[Path], project_root: Path) -> Path:
    """`--cache-dir`, else `NANLINT_CACHE_DIR`, else the config's `cache-dir`, else
    `.nanlint_cache` at the project root."""
    if cli_value:
        return Path(cli_value)
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    if config_value is not None:
        return config_value
    return project_root / CACHE_DIR_NAME


def open_cache(settings: Any, cli_value: Optional[str] = None) -> "Cache":
    """The cache of a run with these settings: its project root is the directory of the
    config file, else the nearest directory above the working directory with a
    pyproject.toml, setup.py, setup.cfg or .git, else the working directory."""
    from ..analysis.project import find_root

    if settings.source is not None:
        root = Path(settings.source).resolve().parent
    else:
        root = find_root(Path.cwd()) or Path.cwd()
    return Cache(find_cache_dir(cli_value, settings.cache_dir, root))


class Cache(Store):
    def __init__(self, directory: Path):
        super().__init__(directory)
        self.hits = 0
        self.misses = 0

    # -- keys ---------------------------------------------------------------------------

    @staticmethod
    def slot(path: Path, display: str, settings_parts: Sequence[Any]) -> str:
        """Which entry a file's result lives in: one per file and settings, so edits
        overwrite it instead of piling up, and two settings do not evict each other."""
        return key_hash("slot", FORMAT, os.path.abspath(path), display, list(settings_parts))

    @staticmethod
    def key(slot: str, content_hash: str, dependencies: str) -> str:
        return key_hash("key", slot, code_fingerprint(), content_hash, dependencies)

    # -- storage ------------------------------------------------------------------------

    def load(self, slot: str, key: str) -> Optional[Dict[str, Any]]:
        return self.result_of(self.entry(slot), key)

    def entry(self, slot: str) -> Optional[Dict[str, Any]]:
        """A slot's entry as stored, whatever its key (None: none readable)."""
        return self._read(self._entry_path("results", slot))

    def result_of(self, entry: Optional[Dict[str, Any]], key: str) -> Optional[Dict[str, Any]]:
        """The result an entry holds for `key` (counted as a hit), else None (a miss)."""
        if entry is not None and entry.get("key") == key and isinstance(entry.get("result"), dict):
            self.hits += 1
            return entry["result"]
        self.misses += 1
        return None

    def store(self, slot: str, key: str, result: Dict[str, Any],
              scanned: Optional[Tuple[str, List[ImportRef]]] = None) -> None:
        """`scanned`: (content hash, imports) of the file's bytes, for `imports_of_entry`."""
        entry: Dict[str, Any] = {"key": key, "result": result}
        if scanned is not None:
            entry["content"] = scanned[0]
            entry["imports"] = [[r.level, r.module, list(r.names)] for r in scanned[1]]
        self._write(self._entry_path("results", slot), entry)


def imports_of_entry(entry: Optional[Dict[str, Any]], content_hash: str) -> Optional[List[ImportRef]]:
    """The imports scanned from the bytes an entry was stored for, when they are the bytes
    hashing to `content_hash` (a warm run then scans no file for its imports), else None."""
    if entry is None or entry.get("content") != content_hash:
        return None
    try:
        return [ImportRef(int(level), str(module), tuple(str(n) for n in names))
                for level, module, names in entry["imports"]]
    except (KeyError, TypeError, ValueError):
        return None


# -- diagnostics as JSON data ---------------------------------------------------------------


def _position(raw: Dict[str, int]) -> Position:
    return Position(raw["row"], raw["column"])


def _tuples(value: Any) -> Any:
    """JSON has no tuples; probes hold tuples (they are frozen and hashable)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def diagnostic_to_data(d: Diagnostic) -> Dict[str, Any]:
    return {
        "path": d.path,
        "start": d.start.to_json(),
        "end": d.end.to_json(),
        "code": d.code,
        "name": d.name,
        "message": d.message,
        "fix": d.fix.to_json() if d.fix else None,
        "probe": _probe_to_data(d.probe) if d.probe else None,
        "line_text": d.line_text,
        "evidence": [[s.row, s.note, s.path] for s in d.evidence],
        "latent": d.latent,
    }


def _probe_to_data(p: Probe) -> Dict[str, Any]:
    data = p.to_json()
    # `params` as pairs: to_json's dict would lose their order and a repeated key.
    data["params"] = [list(pair) for pair in p.params]
    return data


def diagnostic_from_data(raw: Dict[str, Any]) -> Diagnostic:
    fix = None
    if raw.get("fix") is not None:
        f = raw["fix"]
        fix = Fix(
            f["message"],
            tuple(Edit(_position(e["location"]), _position(e["end_location"]), e["content"]) for e in f["edits"]),
            f["applicability"],
        )
    probe = None
    if raw.get("probe") is not None:
        p = raw["probe"]
        probe = Probe(
            kind=p["kind"],
            original=p.get("original"),
            fixed=p.get("fixed"),
            inputs=tuple(
                ProbeInput(
                    i["name"],
                    i.get("value"),
                    tuple(i["domain"]) if i.get("domain") is not None else None,
                    i.get("kind", "real"),
                    i.get("dim"),
                    i.get("evidence", ""),
                )
                for i in p.get("inputs") or []
            ),
            harness=p.get("harness"),
            params=tuple((k, _tuples(v)) for k, v in p.get("params") or []),
            relations=tuple(tuple(r) for r in p.get("relations") or []),
        )
    return Diagnostic(
        path=raw["path"],
        start=_position(raw["start"]),
        end=_position(raw["end"]),
        code=raw["code"],
        name=raw["name"],
        message=raw["message"],
        fix=fix,
        probe=probe,
        line_text=raw.get("line_text", ""),
        evidence=tuple(Step(row, note, path) for row, note, path in raw.get("evidence") or ()),
        latent=bool(raw.get("latent", False)),
    )


def result_to_data(diagnostics: List[Diagnostic]) -> Dict[str, Any]:
    return {"diagnostics": [diagnostic_to_data(d) for d in diagnostics]}


def result_from_data(raw: Dict[str, Any]) -> Optional[List[Diagnostic]]:
    """The cached diagnostics, or None when the entry is not what this code wrote."""
    try:
        return [diagnostic_from_data(d) for d in raw["diagnostics"]]
    except (KeyError, TypeError, ValueError, IndexError):
        return None
