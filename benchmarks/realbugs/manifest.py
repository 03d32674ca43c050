"""Reading and checking the real-bugs manifests, and where fetched files live.

A manifest is a JSON Lines file; each line names one labelled source line in a public
repository by location and hash only (no third-party code is stored here).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, List, Optional, Tuple

from split import split_of

HERE = Path(__file__).resolve().parent
MANIFEST_DIR = HERE / "manifests"
DEFAULT_CACHE = HERE / ".cache"

LABELS = ("bug", "safe")
REQUIRED = ("repo", "commit", "path", "line", "label", "category", "sha256", "source", "why")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+$")
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
# Python's own line terminators (what `ast` line numbers count).
_NEWLINE = re.compile(r"\r\n|\r|\n")


# The kind of claim a category's bugs are (nanlint's rule kinds, rules/README.md): a form
# category is an unstable spelling with an exact stable rewrite, a value category a singular
# point the code's values reach, a misuse category an order or API use that is wrong.
CATEGORY_KINDS = {
    **dict.fromkeys((
        "sigmoid-by-hand", "softplus-by-hand", "softmax-by-hand", "logsumexp-by-hand",
        "log-of-softmax", "log-of-sigmoid", "bce-by-hand", "bce-on-sigmoid",
        "entropy-log-of-zero", "kl-by-hand"), "form"),
    **dict.fromkeys((
        "acos-domain", "acos-unclamped", "atanh-unclamped", "division-by-count", "division-by-norm",
        "division-by-zero", "empty-mask-mean", "exp-overflow", "fp16-epsilon", "fp16-masked-fill",
        "fp16-norm-overflow", "fully-masked-softmax", "gumbel-log-of-zero", "inf-minus-inf",
        "inf-times-zero", "log-of-zero", "logit-by-hand", "minmax-zero-range", "nan-handled",
        "normalize-zero-vector", "sqrt-at-zero", "sqrt-of-negative", "std-of-one",
        "where-unsafe-branch"), "value"),
    **dict.fromkeys((
        "adam-eps-half", "clip-after-step", "cross-entropy-on-softmax", "fp16-cross-entropy",
        "fp16-sum-overflow", "half-softmax", "kl-div-on-probabilities", "scaler-unscale",
        "step-bypasses-scaler"), "misuse"),
}


class ManifestError(Exception):
    """A manifest line that is not a valid entry: reported with its file and line number."""


@dataclass(frozen=True)
class Entry:
    repo: str
    commit: str
    path: str
    line: int
    label: str
    category: str
    sha256: str
    source: str
    why: str
    codes: Tuple[str, ...] = ()
    origin: str = field(default="", compare=False)  # "manifest.jsonl:12"

    @property
    def split(self) -> str:
        return split_of(self.repo)

    @property
    def kind(self) -> str:
        return CATEGORY_KINDS[self.category]

    @property
    def key(self) -> Tuple[str, str, str, int]:
        return (self.repo.lower(), self.commit, self.path, self.line)


def source_lines(text: str) -> List[str]:
    """The file's lines as Python numbers them (1-based index = list index + 1)."""
    return _NEWLINE.split(text)


def line_hash(line_text: str) -> str:
    """sha256 hex of a line's text with the surrounding whitespace stripped."""
    return hashlib.sha256(line_text.strip().encode("utf-8")).hexdigest()


def cache_path(cache: Path, repo: str, commit: str, path: str) -> Path:
    owner, name = repo.split("/", 1)
    return cache / f"{owner}+{name}" / commit / path


def read_cached(cache: Path, entry: Entry) -> Optional[str]:
    p = cache_path(cache, entry.repo, entry.commit, entry.path)
    if not p.is_file():
        return None
    return p.read_bytes().decode("utf-8", errors="replace")


def check_line(text: str, entry: Entry) -> Optional[str]:
    """None when the entry's line exists and hashes to its sha256, else the reason."""
    lines = source_lines(text)
    if entry.line > len(lines):
        return f"line {entry.line} is past the end of the file ({len(lines)} lines)"
    if line_hash(lines[entry.line - 1]) != entry.sha256:
        return f"line {entry.line} does not hash to the manifest's sha256"
    return None


def _entry(obj: dict, origin: str) -> Entry:
    if not isinstance(obj, dict):
        raise ManifestError(f"{origin}: not a JSON object")
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        raise ManifestError(f"{origin}: missing {', '.join(missing)}")
    if not isinstance(obj["repo"], str) or not _REPO.match(obj["repo"]):
        raise ManifestError(f"{origin}: repo must be 'owner/name'")
    if not isinstance(obj["commit"], str) or not _SHA1.match(obj["commit"]):
        raise ManifestError(f"{origin}: commit must be 40 lowercase hex digits")
    if not isinstance(obj["line"], int) or isinstance(obj["line"], bool) or obj["line"] < 1:
        raise ManifestError(f"{origin}: line must be a positive integer")
    if obj["label"] not in LABELS:
        raise ManifestError(f"{origin}: label must be one of {', '.join(LABELS)}")
    if not isinstance(obj["category"], str) or not _KEBAB.match(obj["category"]):
        raise ManifestError(f"{origin}: category must be kebab-case")
    if obj["category"] not in CATEGORY_KINDS:
        raise ManifestError(f"{origin}: category {obj['category']!r} has no kind in CATEGORY_KINDS")
    if not isinstance(obj["sha256"], str) or not _SHA256.match(obj["sha256"]):
        raise ManifestError(f"{origin}: sha256 must be 64 lowercase hex digits")
    for k in ("path", "source", "why"):
        if not isinstance(obj[k], str) or not obj[k].strip():
            raise ManifestError(f"{origin}: {k} must be a non-empty string")
    codes = obj.get("codes", [])
    if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes):
        raise ManifestError(f"{origin}: codes must be a list of rule codes")
    return Entry(
        repo=obj["repo"],
        commit=obj["commit"],
        path=obj["path"],
        line=obj["line"],
        label=obj["label"],
        category=obj["category"],
        sha256=obj["sha256"],
        source=obj["source"],
        why=obj["why"],
        codes=tuple(c.upper() for c in codes),
        origin=origin,
    )


def manifest_files(paths: Iterable[str] = ()) -> List[Path]:
    chosen = [Path(p) for p in paths]
    if not chosen:
        return sorted(MANIFEST_DIR.glob("*.jsonl"))
    out: List[Path] = []
    for p in chosen:
        out.extend(sorted(p.glob("*.jsonl")) if p.is_dir() else [p])
    return out


def load(paths: Iterable[str] = ()) -> List[Entry]:
    """Every entry of the given manifests (default: manifests/*.jsonl). Raises
    ManifestError on a malformed line or a location labelled twice."""
    entries: List[Entry] = []
    seen = {}
    for mf in manifest_files(paths):
        for n, raw in enumerate(mf.read_text(encoding="utf-8").splitlines(), 1):
            if not raw.strip():
                continue
            origin = f"{mf.name}:{n}"
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ManifestError(f"{origin}: not JSON ({exc.msg})") from None
            e = _entry(obj, origin)
            if e.key in seen:
                raise ManifestError(f"{origin}: same location as {seen[e.key]}")
            seen[e.key] = origin
            entries.append(e)
    return entries
