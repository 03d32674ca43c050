"""Settings: `[tool.nanlint]` in the nearest pyproject.toml (or `--config`), then the CLI."""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Type

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..core.bounds import FileBudget
from ..rules import Rule, all_rules
from ..rules.base import LatentFindings

KNOWN_KEYS = {
    "select",
    "ignore",
    "extend-select",
    "per-file-ignores",
    "exclude",
    "extend-exclude",
    "force-exclude",
    "respect-gitignore",
    "lint-tests",
    "latent",
    "precision",
    "max-file-size",
    "file-timeout",
    "file-memory",
    "jobs",
    "cache-dir",
}
# Larger files are skipped with a one-line warning (generated tables, vendored blobs):
# LibCST needs about 0.5 GB and 7 s per MB of source.
DEFAULT_MAX_FILE_SIZE = 1024 * 1024
# A file whose analysis uses more CPU time (seconds), or grows the process by more memory
# (bytes), is reported as skipped and the run moves on (bounds.FileBudget).
DEFAULT_FILE_TIMEOUT = 30.0
DEFAULT_FILE_MEMORY = 1024 ** 3
# `precision = "fp16"`: the project runs in half precision (half-only hazards are reported
# everywhere, not only where the file shows a half dtype). "auto" (None): the project's own
# code decides (`project_precision`); "fp32" says it never runs in half precision.
PRECISIONS = {"auto": None, "fp32": "float32", "float32": "float32", "fp16": "float16", "float16": "float16",
              "bf16": "bfloat16", "bfloat16": "bfloat16"}

# Never descended into when walking a directory (a file named explicitly is still linted).
DEFAULT_EXCLUDE = [
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".env",
    "env",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "__pycache__",
    "build",
    "dist",
    "site-packages",
    "node_modules",
    "*.egg-info",
]


# Test code, skipped like an exclude unless `lint-tests = true`: a test computes its expected
# value with the textbook formula on purpose (`1 / (1 + exp(-x))`, `log(sigmoid(x))` on
# `torch.rand` inputs), so nanlint's findings there are noise. Measured: every one of the 16
# default findings in test files of 104 mirrored repositories was a false alarm.
TEST_DIRECTORIES = ("tests", "test", "testing", "unittests")
TEST_PATTERNS = TEST_DIRECTORIES + ("test_*.py", "*_test.py", "conftest.py")


class ConfigError(Exception):
    """A usage or configuration error: reported in one line, exit code 2."""


@dataclass
class Settings:
    select: Optional[List[str]] = None
    ignore: List[str] = field(default_factory=list)
    extend_select: List[str] = field(default_factory=list)
    per_file_ignores: Dict[str, List[str]] = field(default_factory=dict)
    exclude: List[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    extend_exclude: List[str] = field(default_factory=list)
    # Apply excludes to files named explicitly too (pre-commit passes every staged file).
    force_exclude: bool = False
    # Skip what git ignores when walking a directory (as ruff does).
    respect_gitignore: bool = True
    # Lint test files too (TEST_PATTERNS); a test directory named on the command line always is.
    lint_tests: bool = False
    precision: Optional[str] = None  # "float16" / "bfloat16" / "float32" from `precision`; None: auto
    # Also report the value rules' latent findings (no evidence that the value gets there).
    latent: bool = False
    max_file_size: int = DEFAULT_MAX_FILE_SIZE  # bytes; 0: no limit
    file_timeout: float = DEFAULT_FILE_TIMEOUT  # seconds of CPU time; 0: no limit
    file_memory: int = DEFAULT_FILE_MEMORY  # bytes; 0: no limit
    # Worker processes (None: every usable CPU) and where results are cached (None: the
    # project root's .nanlint_cache).
    jobs: Optional[int] = None
    cache_dir: Optional[Path] = None
    # Directory that relative patterns in the config are relative to.
    root: Path = field(default_factory=Path.cwd)
    source: Optional[Path] = None  # the file the settings came from

    def file_budget(self) -> FileBudget:
        """What one file's analysis may use (`file-timeout`, `file-memory`)."""
        return FileBudget(cpu=self.file_timeout, memory=self.file_memory)

    def excluded(self, path: Path, below: Optional[Path] = None) -> bool:
        """Whether `path` matches an exclude pattern. With `below` (a directory named on
        the command line), only the part of the path under it counts: `nanlint gen/` lints
        `gen/` even when `gen` is excluded."""
        patterns = tuple(self.exclude + self.extend_exclude)
        rel = self._relative(path)
        skip = 0
        base = ""
        if below is not None:
            base = self._relative(below, resolved=self._resolved(below)).rstrip("/")
            if base not in ("", ".") and rel.startswith(base + "/"):
                skip = len(base.split("/"))
        if _glob_match(rel, path.name, patterns, skip):
            return True
        if self.lint_tests or any(part in TEST_DIRECTORIES for part in base.split("/")):
            return False  # `nanlint tests/`: the user asks for the tests
        return _glob_match(rel, path.name, TEST_PATTERNS, skip)

    def _relative(self, path: Path, resolved: Optional[Path] = None) -> str:
        try:
            return (resolved or safe_resolve(path)).relative_to(self._resolved(self.root)).as_posix()
        except ValueError:
            return path.as_posix()

    def _resolved(self, directory: Path) -> Path:
        """The root (or a directory named on the command line) resolved once per run: a
        walk asks about every file and folder under it."""
        memo = self.__dict__.setdefault("_resolved_dirs", {})
        found = memo.get(directory)
        if found is None:
            found = memo[directory] = safe_resolve(directory)
        return found

    def rules_for(self, path: Path, selected: Sequence[Type[Rule]]) -> List[Type[Rule]]:
        if not self.per_file_ignores:
            return list(selected)
        rel = self._relative(path)
        ignored: List[str] = []
        for pattern, codes in self.per_file_ignores.items():
            if _glob_match(rel, path.name, (pattern,)):
                ignored.extend(codes)
        return [r for r in selected if not _matches_any(r.code, ignored, exact_for_off=False)]


def safe_resolve(path: Path) -> Path:
    """`path.resolve()`, or the absolute path where links loop (pathlib raises there)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def _glob_match(rel: str, name: str, patterns: Tuple[str, ...], skip: int = 0) -> bool:
    """Whether any of `patterns` matches the path (`rel`, whose last part is `name`)."""
    match = _glob_matcher(patterns)
    if match(name) or match(rel):
        return True
    # A pattern matches a path below it too: `fixtures` excludes `fixtures/a.py`
    # (but not when `fixtures` is among the first `skip` parts: the directory named).
    parts = rel.split("/")
    for i in range(skip + 1, len(parts)):
        if match("/".join(parts[:i])) or match(parts[i - 1]):
            return True
    return False


@functools.lru_cache(maxsize=64)
def _glob_matcher(patterns: Tuple[str, ...]) -> Callable[[str], bool]:
    """`fnmatch.fnmatch(text, p)` for any p of `patterns` (a trailing "/" ignored), as one
    regex: the walk tests every file and folder against every exclude."""
    if not patterns:
        return lambda text: False
    regex = re.compile("|".join(fnmatch.translate(os.path.normcase(p.rstrip("/"))) for p in patterns))
    return lambda text: regex.match(os.path.normcase(text)) is not None


def _matches_any(code: str, selectors: Sequence[str], exact_for_off: bool, off: bool = False) -> bool:
    for s in selectors:
        if s == "ALL" or s == code:
            return True
        if code.startswith(s) and not (exact_for_off and off):
            return True
    return False


def validate_selectors(selectors: Sequence[str], where: str) -> List[str]:
    codes = [r.code for r in all_rules()]
    out = []
    for raw in selectors:
        s = raw.strip().upper()
        if not s:
            # `select = [""]` would otherwise select nothing and pass every file.
            raise ConfigError(f"{where}: empty rule selector (a code such as NAN101, a prefix such as NAN1, or ALL)")
        if s != "ALL" and not any(c.startswith(s) for c in codes):
            raise ConfigError(f"{where}: unknown rule selector '{raw}' (see `nanlint rules`)")
        out.append(s)
    return out


def select_rules(settings: Settings) -> List[Type[Rule]]:
    """ruff's order: `select` (default: every rule on by default), plus `extend-select`,
    minus `ignore`. A rule that is off by default needs its exact code or ALL."""
    chosen = []
    for rule in all_rules():
        off = not rule.default_enabled
        if settings.select is None:
            picked = not off
        else:
            picked = _matches_any(rule.code, settings.select, True, off)
        if _matches_any(rule.code, settings.extend_select, True, off):
            picked = True
        if _matches_any(rule.code, settings.ignore, False):
            picked = False
        if picked:
            chosen.append(rule)
    if settings.latent:
        chosen.append(LatentFindings)
    return chosen


def find_config(start: Path) -> Optional[Path]:
    """The nearest pyproject.toml with a [tool.nanlint] table, from `start` upwards."""
    for directory in [start, *start.parents]:
        candidate = directory / "pyproject.toml"
        if candidate.is_file() and "nanlint" in _read_toml(candidate).get("tool", {}):
            return candidate
    return None


def _read_toml(path: Path) -> dict:
    """A config file's table; one that cannot be read or parsed is an error, never skipped
    (skipping it would silently drop the user's settings)."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc


def validate_glob(pattern: str, where: str) -> str:
    """A glob as fnmatch reads it; `[` without its `]` and reversed ranges are errors, not
    patterns that silently match nothing."""
    if not pattern.strip():
        raise ConfigError(f"{where}: empty glob pattern")
    i = 0
    while i < len(pattern):
        if pattern[i] == "[":
            j = i + 1
            if pattern[j:j + 1] == "!":
                j += 1
            if pattern[j:j + 1] == "]":
                j += 1  # a leading `]` is a member, not the end
            close = pattern.find("]", j)
            if close == -1:
                raise ConfigError(f"{where}: invalid glob '{pattern}': '[' is never closed")
            members = pattern[i + 1:close].lstrip("!")
            for m in re.finditer(r"(.)-(.)", members):
                if m.group(1) > m.group(2):
                    raise ConfigError(
                        f"{where}: invalid glob '{pattern}': the range {m.group(0)} is reversed (it matches nothing)"
                    )
            i = close
        i += 1
    try:
        re.compile(fnmatch.translate(pattern))
    except re.error as exc:
        raise ConfigError(f"{where}: invalid glob '{pattern}': {exc}") from None
    return pattern


def _glob_list(value, key: str, where: str) -> List[str]:
    return [validate_glob(p, f"{where}: `{key}`") for p in _string_list(value, key, where)]


def parse_size(value, where: str) -> int:
    """`max-file-size`: bytes as an integer, or a string such as "512KB", "2MB"; 0 = no limit."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: must be a size such as 1048576, \"512KB\" or \"2MB\"")
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*", value, re.I)
        if m:
            scale = {"": 1, "B": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}[(m.group(2) or "")[:1].upper()]
            return int(float(m.group(1)) * scale)
    raise ConfigError(f"{where}: must be a size such as 1048576, \"512KB\" or \"2MB\"")


def parse_seconds(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value:
        raise ConfigError(f"{where}: must be a number of seconds (0: no limit)")
    return float(value)


def _string_list(value, key: str, where: str) -> List[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return list(value)


def load_settings(config_path: Optional[str] = None, start: Optional[Path] = None) -> Settings:
    if config_path is not None:
        path = Path(config_path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {config_path}")
    else:
        path = find_config(start or Path.cwd())
        if path is None:
            return Settings()
    data = _read_toml(path)
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("nanlint", {})
        where = f"{path} [tool.nanlint]"
    else:
        # A standalone nanlint.toml: the table itself, or a [tool.nanlint] inside it.
        table = data.get("tool", {}).get("nanlint", data)
        where = str(path)
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: must be a table")
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key `{unknown[0]}` (known: {', '.join(sorted(KNOWN_KEYS))})"
        )
    settings = Settings(root=path.parent.resolve(), source=path)
    if "select" in table:
        settings.select = validate_selectors(_string_list(table["select"], "select", where), where)
    if "ignore" in table:
        settings.ignore = validate_selectors(_string_list(table["ignore"], "ignore", where), where)
    if "extend-select" in table:
        settings.extend_select = validate_selectors(
            _string_list(table["extend-select"], "extend-select", where), where
        )
    if "exclude" in table:
        settings.exclude = _glob_list(table["exclude"], "exclude", where)
    if "extend-exclude" in table:
        settings.extend_exclude = _glob_list(table["extend-exclude"], "extend-exclude", where)
    if "max-file-size" in table:
        settings.max_file_size = parse_size(table["max-file-size"], f"{where}: `max-file-size`")
    if "file-timeout" in table:
        settings.file_timeout = parse_seconds(table["file-timeout"], f"{where}: `file-timeout`")
    if "file-memory" in table:
        settings.file_memory = parse_size(table["file-memory"], f"{where}: `file-memory`")
    for key in ("force-exclude", "respect-gitignore", "lint-tests", "latent"):
        if key in table:
            if not isinstance(table[key], bool):
                raise ConfigError(f"{where}: `{key}` must be true or false")
            setattr(settings, key.replace("-", "_"), table[key])
    if "precision" in table:
        value = table["precision"]
        if not isinstance(value, str) or value.lower() not in PRECISIONS:
            raise ConfigError(
                f"{where}: `precision` must be one of {', '.join(sorted(PRECISIONS))}"
            )
        settings.precision = PRECISIONS[value.lower()]
    if "jobs" in table:
        jobs = table["jobs"]
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
            raise ConfigError(f"{where}: `jobs` must be a whole number (0: one per usable CPU)")
        settings.jobs = jobs or None
    if "cache-dir" in table:
        if not isinstance(table["cache-dir"], str) or not table["cache-dir"]:
            raise ConfigError(f"{where}: `cache-dir` must be a path")
        settings.cache_dir = settings.root / Path(table["cache-dir"]).expanduser()
    if "per-file-ignores" in table:
        pfi = table["per-file-ignores"]
        if not isinstance(pfi, dict):
            raise ConfigError(f"{where}: `per-file-ignores` must be a table of glob = [codes]")
        settings.per_file_ignores = {
            validate_glob(pattern, f"{where}: `per-file-ignores`"): validate_selectors(
                _string_list(codes, f"per-file-ignores.{pattern}", where), where
            )
            for pattern, codes in pfi.items()
        }
    return settings


def apply_cli(
    settings: Settings,
    select: Optional[str],
    extend_select: Optional[str],
    ignore: Optional[str],
) -> Settings:
    def parse(value: Optional[str], option: str) -> Optional[List[str]]:
        if value is None:
            return None
        return validate_selectors(value.split(","), option)

    s = parse(select, "--select")
    if s is not None:
        settings.select = s
    e = parse(extend_select, "--extend-select")
    if e:
        settings.extend_select = settings.extend_select + e
    i = parse(ignore, "--ignore")
    if i:
        settings.ignore = settings.ignore + i
    return settings


def relative_display(path: Path) -> str:
    """A path as a user reads it: relative below the working directory, else absolute."""
    absolute = os.path.abspath(path)
    cwd = os.getcwd()
    if absolute == cwd or absolute.startswith(cwd.rstrip(os.sep) + os.sep):
        return os.path.relpath(absolute, cwd)
    return absolute
