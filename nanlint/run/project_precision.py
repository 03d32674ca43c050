"""The precision a project trains in, read from its own code (`precision = "auto"`).

Half-only hazards (a fill of -1e9, an epsilon of 1e-8 under a log) fail only where tensors
are float16, and a model file rarely shows that: a trainer in another file makes the model
`.half()`, wraps the step in CUDA autocast or builds a `GradScaler`. So where the config
leaves `precision` at "auto", the files of the file's project are searched once per run
for such a line; the first found (in path order) makes the project float16 for every file
in it, and the messages that rely on it cite that line. An explicit `precision` in the
config ("fp32" included) turns the search off.

The project is the directory with a root marker (`pyproject.toml`, `setup.py`, `setup.cfg`,
`.git`) at or above the file, else the directory above the file's top package; a loose
script outside both is its own evidence (what the file shows, as without this module).
Tests are not searched: a test that runs a module in float16 says the module supports it,
not that training runs it so.

A line counts for a file only where the two run in one program: some project file imports,
directly or through others, both the file and the line's file (a trainer with `--fp16` that
imports the model; the model's file itself). A monorepo's sub-project whose own script runs
a module in float32 is not made float16 by another sub-project's trainer. A file that no
other script imports (a model built from a config or a registry, by names no import shows)
is run by code the index cannot follow, and the project's first line counts for it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from .config import Settings, relative_display
from .files import walk
from ..analysis.precision import TrainingPrecision
from ..analysis.project import ROOT_MARKERS, ProjectIndex, find_root, package_base, scan_imports

# Code that trains a model in float16, and how much of it runs in float16: a model made
# `.half()` computes everything in float16 ("all"); mixed precision (autocast, a
# `GradScaler`, an fp16 option, which trainers map to either) only its matmul-family outputs
# ("matmul"). Casting weights or inputs for storage or inference (`.to(torch.float16)`,
# `dtype=torch.float16`) says nothing of training and is not evidence, nor is bfloat16
# autocast (float32's range) or autocast turned off: a line that names bfloat16 or says
# `enabled=False` does not count.
_MODEL = r"\b(?:self\.)?\w*(?:model|net|module|encoder|decoder|backbone|policy|generator|discriminator)\w*"
# (a substring every match contains, checked first: most files have none; the pattern;
# what it says; its scope)
_SIGNS: Tuple[Tuple[str, "re.Pattern[str]", str, str], ...] = (
    (".half(", re.compile(_MODEL + r"(?:\.\w+\(\s*\))*\.half\(\s*\)", re.I), "a model made `.half()`", "all"),
    ("GradScaler", re.compile(r"\bGradScaler\s*\("), "a `GradScaler` (float16 mixed precision)", "matmul"),
    ("autocast", re.compile(r"\bcuda\.amp\.autocast\s*\("), "CUDA autocast (float16)", "matmul"),
    ("autocast", re.compile(r"\bautocast\s*\(\s*(?:device_type\s*=\s*)?['\"]cuda['\"]"), "CUDA autocast (float16)",
     "matmul"),
    ("fp16", re.compile(r"\bmixed_precision\s*=\s*['\"]fp16['\"]"), "`mixed_precision=\"fp16\"`", "matmul"),
    ("--fp16", re.compile(r"['\"]--fp16['\"]"), "a `--fp16` option", "matmul"),
)
# The string "--fp16" is an option where it is declared (`add_argument("--fp16", ...)`, a
# click or optparse `option`, also when the call opened on the line before) or passed (a
# line that reads `sys.argv`, an element of a command list `["python", "train.py",
# "--fp16"]`); elsewhere it is only a word (a tool's own table of option names, as here).
_DECLARED = re.compile(r"add_argument|option\s*\(")
_IN_COMMAND_LIST = re.compile(r"\[\s*(?:(?:['\"][^'\"\n]*['\"]|[\w.]+)\s*,\s*)*$")
_NEEDLES = tuple(sorted({needle.encode() for needle, *_ in _SIGNS}))
_TEST_DIRS = {"test", "tests", "testing", "unittests"}
# A project this large is searched only this far (in path order): the search must stay a
# small part of a run even where no file trains in float16.
MAX_FILES = 20_000


def find_sign(data: bytes) -> Optional[Tuple[int, str, str]]:
    """The first line of a file's bytes that trains in float16: (line number, what it does,
    its scope: "all" or "matmul", as `TrainingPrecision.scope`). Text in comments and strings
    does not count (a docstring that says `model.half()`), except a string that is the whole
    match (the option `"--fp16"`)."""
    if not any(needle in data for needle in _NEEDLES):
        return None  # nearly every file: one substring search each, no decoding
    text = data.decode("utf-8", "replace")
    best: Optional[Tuple[int, str, str]] = None
    for needle, pattern, reason, scope in _SIGNS:
        at = text.find(needle)
        while at != -1:
            # Only the lines holding the needle are matched (a pattern over the whole text
            # would try every word of it).
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end == -1 else end
            line = text[start:end]
            m = pattern.search(line)
            # bfloat16 has float32's range; `autocast(enabled=False)` turns autocast off.
            if m and "bfloat16" not in line and "enabled=False" not in line \
                    and not _in_words(text, start, start + m.start()) \
                    and (needle != "--fp16" or _declares_option(text, start, start + m.start())):
                row = text.count("\n", 0, start) + 1
                if best is None or row < best[0]:
                    best = (row, reason, scope)
                break
            at = text.find(needle, end)
    return best


def _declares_option(text: str, line_start: int, pos: int) -> bool:
    """The option string at `pos` is declared or passed (see `_DECLARED`)."""
    previous = text.rfind("\n", 0, max(line_start - 1, 0)) + 1 if line_start else 0
    end = text.find("\n", pos)
    line_end = len(text) if end == -1 else end
    return (_DECLARED.search(text, previous, pos) is not None
            or "argv" in text[line_start:line_end]
            or _IN_COMMAND_LIST.search(text[previous:pos]) is not None)


def _in_words(text: str, line_start: int, pos: int) -> bool:
    """`pos` is inside a comment or a string: a `#` or an open quote before it on its line, or
    an odd number of triple quotes before it in the file (a docstring). Approximate (an
    escaped quote can fool it) but linear: the search reads whole projects on every run."""
    if text.count('"""', 0, pos) % 2 or text.count("'''", 0, pos) % 2:
        return True
    quote = None
    for ch in text[line_start:pos]:
        if quote is None and ch == "#":
            return True
        if ch in "\"'":
            quote = None if quote == ch else (ch if quote is None else quote)
    return quote is not None


def _is_test_file(name: str) -> bool:
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def project_of(path: Path) -> Optional[Path]:
    """The directory whose files say how `path`'s project trains (None: a loose script)."""
    root = find_root(path)
    if root is None and (path.parent / "__init__.py").is_file():
        root = package_base(path)
    if root is not None and root.name in ("site-packages", "dist-packages"):
        return None  # an installed package: its neighbours are other projects
    return root


class ProjectPrecisionFinder:
    """Searches each project once per run (memoized by its directory). Files the run has
    read already are given to `note`, so the search reads only the others."""

    def __init__(self) -> None:
        self._found: Dict[str, Optional["_ProjectSigns"]] = {}
        self._projects: Dict[str, Optional[Path]] = {}  # a file's folder -> its project
        self._signs: Dict[str, Optional[Tuple[int, str, str]]] = {}  # absolute path -> find_sign

    def note(self, path: Path, data: bytes) -> None:
        self._signs[os.path.abspath(path)] = find_sign(data)

    def of(self, path: Path, settings: Settings) -> Optional[TrainingPrecision]:
        path = Path(os.path.abspath(path))
        folder = str(path.parent)
        if folder not in self._projects:
            self._projects[folder] = project_of(path)
        project = self._projects[folder]
        if project is None:
            return None
        key = str(project)
        if key not in self._found:
            self._found[key] = self._search(project, settings)
        signs = self._found[key]
        return signs.for_file(str(path)) if signs is not None else None

    def _search(self, project: Path, settings: Settings) -> Optional["_ProjectSigns"]:
        files: List[str] = []
        signs: List[Tuple[str, TrainingPrecision]] = []
        for file in project_files(project, settings):
            key = os.path.abspath(file)
            files.append(key)
            if key in self._signs:
                found = self._signs[key]
            else:
                try:
                    found = find_sign(file.read_bytes())
                except OSError:
                    continue
            if found is not None:
                row, what, scope = found
                signs.append((key, TrainingPrecision("float16", f"{what} at {relative_display(file)}:{row}", scope)))
        return _ProjectSigns(files, signs) if signs else None


class _ProjectSigns:
    """A project's float16 lines and which of its files each counts for (see the module's
    docstring). The import graph is built on the first question, once per project."""

    def __init__(self, files: List[str], signs: List[Tuple[str, TrainingPrecision]]):
        self.files = files  # absolute paths, in path order
        self.signs = signs  # (file, what it shows), in path order
        self._own = dict(signs)  # a file shows at most one line (`find_sign`: its first)
        # Per searched file: the first sign one of its importers (direct or not, itself
        # included) leads to, and whether one of them is a script other than the file.
        self._reached: Optional[Dict[str, Tuple[Optional[int], bool]]] = None

    def for_file(self, key: str) -> Optional[TrainingPrecision]:
        if key in self._own:
            return self._own[key]
        if self._reached is None:
            self._reached = self._reach()
        if key not in self._reached:
            return self.signs[0][1]  # not a searched file (a test): the project's first line
        sign, by_script = self._reached[key]
        if sign is not None:
            return self.signs[sign][1]
        return None if by_script else self.signs[0][1]

    def _reach(self) -> Dict[str, Tuple[Optional[int], bool]]:
        """`_reached`, from the project's import graph: one pass down it, importers first,
        so a large project costs its scan and resolution, not a walk per file."""
        index = ProjectIndex()
        for key in self.files:
            try:
                with open(key, "rb") as handle:
                    data = handle.read()
            except OSError:
                data = b""
            # Resolution only: no summaries, so no content hash is needed.
            index.note_content(Path(key), data, imports=scan_imports(runtime_imports(data)), digest="")
        scripts = {key for key in self.files if index.is_script(Path(key))}
        importers: Dict[str, List[str]] = {key: [] for key in self.files}
        for key in self.files:
            for dep in index.dependencies(Path(key)):
                dep_key = str(dep)
                if dep_key in importers and dep_key != key:
                    importers[dep_key].append(key)
        # The first sign each file leads to through its imports: walk up from each sign, in
        # order; a file met before leads to an earlier sign, and so do the files above it.
        leads_to: Dict[str, int] = {}
        for i, (sign_file, _) in enumerate(self.signs):
            stack = [sign_file]
            while stack:
                node = stack.pop()
                if node not in leads_to:
                    leads_to[node] = i
                    stack.extend(p for p in importers[node] if p not in leads_to)
        # Down the import graph, importers first (its cycles taken whole): what a file's
        # importers lead to and whether a script is among them.
        group_of: Dict[str, int] = {}
        groups = [[str(m) for m in group if str(m) in importers]
                  for group in reversed(index.dependency_order(Path(k) for k in self.files))]
        best_in: List[Optional[int]] = []  # per group: the first sign its members or importers reach
        script_in: List[bool] = []  # per group: a script among its members or importers
        script_above: List[bool] = []  # per group: a script among its importers outside it
        for g, members in enumerate(groups):
            best: Optional[int] = None
            above = False
            for member in members:
                group_of[member] = g
            for member in members:
                if member in leads_to and (best is None or leads_to[member] < best):
                    best = leads_to[member]
                for importer in importers[member]:
                    h = group_of.get(importer, g)
                    if h == g:
                        continue
                    if best_in[h] is not None and (best is None or best_in[h] < best):
                        best = best_in[h]
                    above = above or script_in[h]
            best_in.append(best)
            script_above.append(above)
            script_in.append(above or any(m in scripts for m in members))
        reached: Dict[str, Tuple[Optional[int], bool]] = {}
        for g, members in enumerate(groups):
            for member in members:
                others = any(m in scripts and m != member for m in members)
                reached[member] = (best_in[g], script_above[g] or others)
        return reached


_TYPE_CHECKING = re.compile(rb"^([ \t]*)if[ \t]+(?:typing\.)?TYPE_CHECKING[ \t]*:[ \t]*(?:#[^\n]*)?$")


def runtime_imports(data: bytes) -> bytes:
    """The source without its `if TYPE_CHECKING:` blocks: their imports never run (a lazy
    package's `__init__` lists every module there and imports none of them)."""
    if b"TYPE_CHECKING" not in data:
        return data
    out: List[bytes] = []
    block_indent: Optional[int] = None
    for line in data.split(b"\n"):
        stripped = line.strip()
        if block_indent is not None:
            indent = len(line) - len(line.lstrip(b" \t"))
            if not stripped or indent > block_indent:
                continue
            block_indent = None
        m = _TYPE_CHECKING.match(line.rstrip(b"\r"))
        if m:
            block_indent = len(m.group(1))
            continue
        out.append(line)
    return b"\n".join(out)


def project_files(project: Path, settings: Settings) -> Iterator[Path]:
    """The project's Python files that are searched, in the order a lint walks them: what
    `nanlint check` would lint there (excludes and `.gitignore` honoured), less tests and
    nested projects (a subdirectory with its own root marker), at most MAX_FILES."""
    nested: Dict[Path, bool] = {project: False}

    def inside_nested(directory: Path) -> bool:
        if directory not in nested:
            own = any((directory / m).exists() for m in ROOT_MARKERS)
            nested[directory] = own or inside_nested(directory.parent)
        return nested[directory]

    seen = 0
    for file in walk(project, settings):
        if file.suffix != ".py" or _is_test_file(file.name) or _TEST_DIRS & set(file.relative_to(project).parts[:-1]):
            continue
        if inside_nested(file.parent):
            continue
        seen += 1
        if seen > MAX_FILES:
            return
        yield file


def resolve(configured: Optional[str], path: Optional[Path], finder: Optional[ProjectPrecisionFinder],
            settings: Settings) -> Optional[TrainingPrecision]:
    """The precision a file is linted for: the config's where it names one ("fp32" means
    none), else what its project's code shows (`finder`; None: nothing is searched)."""
    if configured is not None:
        return TrainingPrecision.from_config(configured)
    if path is None or finder is None:
        return None
    return finder.of(path, settings)
