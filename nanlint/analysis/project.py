"""The project index: which of the project's own files each file imports.

A hazard's evidence is often in another file of the same project (the model in `models.py`,
the loss in `train.py`). This module finds the project a file belongs to, resolves its imports
of the project's own modules to files, and hands out what a dependent needs from them: their
summaries (computed by a pluggable function, never by re-analysing a whole imported file per
caller) and fingerprints for the cache.

Imports are found by a scan of the raw bytes, not a parse: the index must be cheap on a warm
run where no file is parsed at all. A line that only looks like an import (inside a string)
at worst adds a dependency, which costs a re-lint, never a wrong result.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

# Files and folders that mark a project's root (the nearest one above a file wins).
ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")

# `import a.b, c as d` and `from ..a.b import (x, y as z)` at the start of a line.
_IMPORT = re.compile(rb"^[ \t]*import[ \t]+([^\r\n#;]+)", re.M)
_FROM = re.compile(
    rb"^[ \t]*from[ \t]+(\.*)[ \t]*([\w.]*)[ \t]+import[ \t]*(\([^)]*\)|[^\r\n#;\\]*(?:\\\r?\n[^\r\n#;\\]*)*)",
    re.M,
)
_WORD = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class ImportRef:
    """One imported module: `level` leading dots (0: absolute), the dotted `module` after
    them (may be empty: `from . import x`), and the names a `from` import takes from it
    (each may be a submodule)."""

    level: int
    module: str
    names: Tuple[str, ...] = ()


def scan_imports(data: bytes) -> List[ImportRef]:
    """The imports a source states, in order, from its raw bytes (any ASCII-compatible
    encoding). Conditional and function-level imports count too: they are dependencies."""
    found: List[ImportRef] = []
    for m in _IMPORT.finditer(data):
        for part in m.group(1).decode("latin-1").split(","):
            words = part.split()
            if words and re.fullmatch(r"[A-Za-z_][\w.]*", words[0]):
                found.append(ImportRef(0, words[0]))
    for m in _FROM.finditer(data):
        level = len(m.group(1))
        module = m.group(2).decode("latin-1").strip(".")
        if level == 0 and not module:
            continue
        names_text = m.group(3).decode("latin-1").replace("\\", " ").strip("() \t\r\n")
        names = []
        for part in names_text.split(","):
            words = part.split()
            if words and _WORD.fullmatch(words[0]):
                names.append(words[0])
        found.append(ImportRef(level, module, tuple(names)))
    return found


def find_root(path: Path) -> Optional[Path]:
    """The nearest directory at or above `path`'s directory that holds a root marker."""
    start = path if path.is_dir() else path.parent
    for directory in [start, *start.parents]:
        if any((directory / marker).exists() for marker in ROOT_MARKERS):
            return directory
    return None


def package_base(file: Path) -> Path:
    """The directory that must be on sys.path for `file`'s package to import: the first
    directory above it without an `__init__.py`."""
    directory = file.parent
    while (directory / "__init__.py").is_file() and directory.parent != directory:
        directory = directory.parent
    return directory


SummaryProvider = Callable[[Path, str], Any]


class ProjectIndex:
    """Own-module imports of the files of one run, resolved to files, with their summaries.

    `summarize(path, text)` (optional) computes a file's summary: plain data (JSON-able, so
    the cache can store it) describing what its functions and classes return. Without it,
    `summary_of` is None and fingerprints fall back to the dependencies' content.

    Internally files are absolute path strings: resolving every file's imports makes tens of
    thousands of lookups, and hashing and comparing `Path` objects was most of their cost."""

    def __init__(self, summarize: Optional[SummaryProvider] = None, summary_cache: Any = None):
        self.summarize = summarize
        # Where summaries are kept between runs (a `core.store.Store`, the run's cache), keyed by content.
        self.summary_cache = summary_cache
        self._abs: Dict[str, str] = {}
        self._paths: Dict[str, Path] = {}
        self._roots: Dict[str, Optional[str]] = {}
        self._imports: Dict[str, List[ImportRef]] = {}
        self._deps: Dict[Path, List[Path]] = {}
        self._bytes_hash: Dict[str, Optional[str]] = {}
        self._summaries: Dict[Path, Any] = {}
        self._search_roots: Dict[Tuple[str, bool], Tuple[str, ...]] = {}
        self._scripts: set = set()  # files that run as scripts (their folder is on sys.path)
        self._listings: Dict[str, frozenset] = {}
        self._lookups: Dict[Tuple[Tuple[str, ...], ImportRef], Tuple[Optional[str], Dict[str, str]]] = {}
        self._inside_memo: Dict[Tuple[str, Optional[str]], bool] = {}
        self._reexports: Dict[Tuple[str, str], Optional[str]] = {}
        self._displays: Dict[str, str] = {}
        self._modules: Dict[str, Dict[str, Path]] = {}
        self._reexports_of: Dict[str, Dict[str, Path]] = {}
        self._module_keys: Dict[str, Dict[str, str]] = {}
        self._reexport_keys: Dict[str, Dict[str, str]] = {}

    # -- files --------------------------------------------------------------------------

    def _key(self, path: Any) -> str:
        """The absolute path string a file is known by."""
        text = path if isinstance(path, str) else os.fspath(path)
        known = self._abs.get(text)
        if known is None:
            known = self._abs[text] = os.path.abspath(text)
        return known

    def _path(self, key: str) -> Path:
        known = self._paths.get(key)
        if known is None:
            known = self._paths[key] = Path(key)
        return known

    def normalize(self, path: Path) -> Path:
        return self._path(self._key(path))

    def _root_key(self, key: str) -> Optional[str]:
        directory = os.path.dirname(key)
        if directory not in self._roots:
            found = find_root(Path(directory))
            self._roots[directory] = str(found) if found is not None else None
        return self._roots[directory]

    def root_of(self, path: Path) -> Optional[Path]:
        root = self._root_key(self._key(path))
        return self._path(root) if root is not None else None

    def _files_in(self, directory: str) -> frozenset:
        """The files in `directory`, from one listing per directory (an import is looked up
        in several roots: most candidates do not exist, and a stat each is slow)."""
        listing = self._listings.get(directory)
        if listing is None:
            try:
                with os.scandir(directory) as entries:
                    listing = frozenset(e.name for e in entries if e.is_file())
            except OSError:
                listing = frozenset()
            self._listings[directory] = listing
        return listing

    def content_hash(self, path: Path) -> Optional[str]:
        """sha256 of the file's bytes (None when it cannot be read); memoized for the run."""
        return self._content_hash(self._key(path))

    def _content_hash(self, key: str) -> Optional[str]:
        if key not in self._bytes_hash:
            try:
                with open(key, "rb") as handle:
                    data = handle.read()
            except OSError:
                self._bytes_hash[key] = None
            else:
                self.note_content(key, data)
        return self._bytes_hash[key]

    def note_content(self, path: Path, data: bytes, imports: Optional[List[ImportRef]] = None,
                     digest: Optional[str] = None) -> str:
        """Record a file's bytes as read by the caller (one read per file per run); returns
        its content hash (`digest`, when the caller already has it). `imports` may come from
        the cache (then the bytes are not scanned)."""
        key = self._key(path)
        if digest is None:
            digest = hashlib.sha256(data).hexdigest()
        self._bytes_hash[key] = digest
        self._imports[key] = imports if imports is not None else scan_imports(data)
        if b"__main__" in data and b"__name__" in data:
            self._scripts.add(key)
        return digest

    def is_script(self, path: Path) -> bool:
        """Whether the file, as noted, runs as a script (`if __name__ == "__main__"`)."""
        return self._key(path) in self._scripts

    def imports_of(self, path: Path) -> List[ImportRef]:
        return self._imports_of(self._key(path))

    def _imports_of(self, key: str) -> List[ImportRef]:
        if key not in self._imports:
            self._content_hash(key)
            self._imports.setdefault(key, [])
        return self._imports[key]

    # -- resolution ---------------------------------------------------------------------

    def search_roots(self, path: Path) -> List[Path]:
        """Where absolute imports of own modules are looked up, in order: the base of the
        file's package (for a script outside any package, its own directory: sibling scripts
        import each other as `python script.py` puts it on sys.path), the project root and
        its `src/` (the src layout). A script inside a package (`if __name__ ==
        "__main__"`, run as `python pkg/run.py`) has its own directory first too: Python
        puts it there, and the script imports its siblings by their bare names."""
        return [self._path(r) for r in self._search_roots_of(self._key(path))]

    def _search_roots_of(self, key: str) -> Tuple[str, ...]:
        directory = os.path.dirname(key)
        script = key in self._scripts
        memo = (directory, script)
        known = self._search_roots.get(memo)
        if known is not None:
            return known
        # A package module's own directory is not on sys.path (no implicit relative imports).
        roots = ([directory] if script else []) + [str(package_base(Path(key)))]
        root = self._root_key(key)
        if root is not None:
            roots += [root, os.path.join(root, "src")]
        out: List[str] = []
        for r in roots:
            if r not in out:
                out.append(r)
        known = self._search_roots[memo] = tuple(out)
        return known

    def _module_file(self, base: str, dotted: str) -> Optional[str]:
        """`base/a/b.py` or `base/a/b/__init__.py` for `a.b`."""
        parts = [p for p in dotted.split(".") if p]
        target = os.path.join(base, *parts)
        if parts:
            head, name = os.path.split(target)
            if name + ".py" in self._files_in(head):
                return target + ".py"
        if "__init__.py" in self._files_in(target):
            return os.path.join(target, "__init__.py")
        return None

    def _inside(self, key: str, root: Optional[str]) -> bool:
        if root is None:
            return True
        memo = (key, root)
        known = self._inside_memo.get(memo)
        if known is None:
            prefix = root if root.endswith(os.sep) else root + os.sep
            known = self._inside_memo[memo] = key.startswith(prefix)
        return known

    def resolve_parts(self, path: Path, ref: ImportRef) -> Tuple[Optional[Path], Dict[str, Path]]:
        """The own-module files an import refers to: the module's file (None when it is not
        a project file, or a folder without `__init__.py`), and for `from M import name` the
        submodules M.name that are files. An absolute import is looked up in each search
        root in turn; a module found in none (the standard library, an installed package)
        gives nothing."""
        module_file, subs = self._resolve(self._key(path), ref)
        return (self._path(module_file) if module_file is not None else None,
                {n: self._path(f) for n, f in subs.items()})

    def _resolve(self, key: str, ref: ImportRef) -> Tuple[Optional[str], Dict[str, str]]:
        root = self._root_key(key)
        if ref.level:
            base = os.path.dirname(key)  # the package `from . import x` refers to
            for _ in range(ref.level - 1):
                base = os.path.dirname(base)
            bases: Tuple[str, ...] = (base,)
        else:
            bases = self._search_roots_of(key)
        memo_key = (bases, ref)
        found = self._lookups.get(memo_key)
        if found is None:
            found = self._lookups[memo_key] = self._lookup(bases, ref)
        module_file, subs = found

        def own(f: Optional[str]) -> bool:
            return f is not None and f != key and self._inside(f, root)

        return (module_file if own(module_file) else None), {n: f for n, f in subs.items() if own(f)}

    def _lookup(self, bases: Tuple[str, ...], ref: ImportRef) -> Tuple[Optional[str], Dict[str, str]]:
        parts = [p for p in ref.module.split(".") if p]
        for base in bases:
            module_file = self._module_file(base, ref.module)
            package_dir = os.path.join(base, *parts)
            subs = {}
            for name in ref.names:
                sub = self._module_file(package_dir, name)
                if sub is not None:
                    subs[name] = sub
            if module_file is None and not subs and ref.level == 0:
                continue  # not in this root: try the next
            return module_file, subs
        return None, {}

    def resolve(self, path: Path, ref: ImportRef) -> List[Path]:
        """The own-module files an import refers to (see `resolve_parts`)."""
        module_file, subs = self.resolve_parts(path, ref)
        found = [module_file] if module_file is not None else []
        return found + [f for f in subs.values() if f not in found]

    def dependencies(self, path: Path) -> List[Path]:
        """The project files `path` imports directly (sorted, without itself)."""
        path = self.normalize(path)
        if path not in self._deps:
            self._deps[path] = sorted(set(self.imported_modules(path).values()))
        return self._deps[path]

    def dependency_order(self, paths: Iterable[Path]) -> List[List[Path]]:
        """`paths` and the project files they import, grouped into strongly connected
        components, each after the components it imports: an import cycle is one group
        (the cut: its members see each other's summaries from before the cycle, not through
        it). Iterative Tarjan, so deep chains do not hit the recursion limit."""
        index: Dict[Path, int] = {}
        low: Dict[Path, int] = {}
        on_stack: Dict[Path, bool] = {}
        stack: List[Path] = []
        out: List[List[Path]] = []
        counter = 0
        for start in sorted(self.normalize(p) for p in paths):
            if start in index:
                continue
            work: List[Tuple[Path, int]] = [(start, 0)]
            while work:
                node, i = work.pop()
                if i == 0:
                    index[node] = low[node] = counter
                    counter += 1
                    stack.append(node)
                    on_stack[node] = True
                deps = self.dependencies(node)
                if i < len(deps):
                    work.append((node, i + 1))
                    child = deps[i]
                    if child not in index:
                        work.append((child, 0))
                    elif on_stack.get(child):
                        low[node] = min(low[node], index[child])
                    continue
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack[member] = False
                        group.append(member)
                        if member == node:
                            break
                    out.append(sorted(group))
        return out

    # -- what dependents see ------------------------------------------------------------

    def summary_of(self, path: Path) -> Any:
        """The file's summary from the provider (None without one, or when the file cannot
        be read or the provider fails on it: a dependent then knows nothing of it)."""
        path = self.normalize(path)
        if self.summarize is None:
            return None
        if path not in self._summaries:
            self._summaries[path] = None
            content = self.content_hash(path)
            if content is None:
                return None
            provider = _provider_id(self.summarize)
            if self.summary_cache is not None:
                found, summary = self.summary_cache.load_summary(path, content, provider)
                if found:
                    self._summaries[path] = summary
                    return summary
            try:
                from ..core.source import read_source

                summary = self.summarize(path, read_source(path).text)
            except Exception:  # a bad dependency must not stop the dependent's lint
                return None
            self._summaries[path] = summary
            if self.summary_cache is not None:
                self.summary_cache.store_summary(path, content, provider, summary)
        return self._summaries[path]

    def set_summary(self, path: Path, summary: Any) -> None:
        """A summary known without computing it (read from the cache)."""
        self._summaries[self.normalize(path)] = summary

    def imported_summaries(self, path: Path) -> Dict[str, Any]:
        """The summaries of the project modules `path` imports, by the module as the import
        spells it: `from .nets import Actor` gives `.nets`; `from . import nets` gives `.`
        (the package's `__init__`, when it has one) and `.nets`; `import pkg.nets` gives
        `pkg.nets`."""
        if self.summarize is None:
            return {}
        modules = list(self.imported_modules(path).items()) + list(self.reexports(path).items())
        return {spelled: self.summary_of(file) for spelled, file in modules}

    def imported_modules(self, path: Path) -> Dict[str, Path]:
        """The project files `path` imports, by the module as the import spells it (see
        `imported_summaries`); memoized for the run (do not modify)."""
        return self._as_paths(self._modules, self._key(path), self._modules_of)

    def _as_paths(self, memo: Dict[str, Dict[str, Path]], key: str,
                  strings: Callable[[str], Dict[str, str]]) -> Dict[str, Path]:
        """`strings(key)` with its files as Paths, memoized in `memo` (the API's form)."""
        known = memo.get(key)
        if known is None:
            known = memo[key] = {s: self._path(f) for s, f in strings(key).items()}
        return known

    def _modules_of(self, key: str) -> Dict[str, str]:
        known = self._module_keys.get(key)
        if known is not None:
            return known
        out: Dict[str, str] = {}
        self._module_keys[key] = out
        for ref in self._imports_of(key):
            module_file, subs = self._resolve(key, ref)
            spelled = "." * ref.level + ref.module
            if module_file is not None:
                out[spelled] = module_file
            for name, sub in subs.items():
                out[spelled + ("" if spelled.endswith(".") else ".") + name] = sub
        return out

    def reexport_of(self, module_file: Path, name: str, hops: int = 3) -> Optional[Path]:
        """The project file that defines `name` where `module_file` only imports it
        (`from .nets import Actor` in a package's `__init__.py`), followed a few hops;
        None where the module does not import it from a project file. Unaliased imports
        only: the scan does not keep `as` names."""
        found = self._reexport_of(self._key(module_file), name, hops)
        return self._path(found) if found is not None else None

    def _reexport_of(self, module_file: str, name: str, hops: int = 3) -> Optional[str]:
        key = (module_file, name)
        if key not in self._reexports:
            self._reexports[key] = self._follow_reexport(module_file, name, hops)
        return self._reexports[key]

    def _follow_reexport(self, module_file: str, name: str, hops: int) -> Optional[str]:
        found = None
        seen = {module_file}
        current = module_file
        while hops > 0:
            nxt = None
            for ref in self._imports_of(current):
                if name in ref.names:
                    target, subs = self._resolve(current, ref)
                    if target is not None and name not in subs:
                        nxt = target
                        break
            if nxt is None or nxt in seen:
                break
            seen.add(nxt)
            found, current, hops = nxt, nxt, hops - 1
        return found

    def reexports(self, path: Path) -> Dict[str, Path]:
        """For each name `path` takes from a project module that only re-exports it (a
        package's `__init__.py`, or any module that imports it from another: two hops), the
        file that defines it, keyed `module as spelled:name`."""
        return self._as_paths(self._reexports_of, self._key(path), self._reexports_in)

    def _reexports_in(self, key: str) -> Dict[str, str]:
        known = self._reexport_keys.get(key)
        if known is not None:
            return known
        out: Dict[str, str] = {}
        self._reexport_keys[key] = out
        for ref in self._imports_of(key):
            if not ref.names:
                continue
            module_file, subs = self._resolve(key, ref)
            if module_file is None:
                continue
            spelled = "." * ref.level + ref.module
            for name in ref.names:
                if name not in subs:
                    target = self._reexport_of(module_file, name)
                    if target is not None and target != key:
                        out[f"{spelled}:{name}"] = target
        return out

    def module_refs(self, path: Path, cache_dir: Optional[str] = None) -> Dict[str, Any]:
        """What the lint of `path` receives of the project files it imports when summaries
        are computed on demand (the default): a `ModuleRef` per module as spelled (and per
        re-exported name, keyed `module:name`), naming the file by its path under the
        project root."""
        from .summaries import ModuleRef

        out: Dict[str, Any] = {}
        key = self._key(path)
        for spelled, file in list(self._modules_of(key).items()) + list(self._reexports_in(key).items()):
            content = self._content_hash(file)
            if content is None:
                continue
            out[spelled] = ModuleRef(file, content, self._display(file), cache_dir)
        return out

    def display_of(self, file: Path) -> str:
        """How evidence names a project file: its path under the project root."""
        return self._display(self._key(file))

    def _display(self, key: str) -> str:
        found = self._displays.get(key)
        if found is None:
            root = self._root_key(key)
            display = os.path.relpath(key, root) if root is not None else os.path.basename(key)
            found = self._displays[key] = display.replace(os.sep, "/")
        return found

    def in_package(self, path: Path) -> bool:
        """Whether an `__init__.py` sits beside the file (one listing per directory)."""
        return "__init__.py" in self._files_in(os.path.dirname(self._key(path)))

    def dependency_fingerprint(self, path: Path) -> str:
        """What a file's cached result depends on outside the file: its direct own-module
        imports, by their summaries when a provider is plugged in (an edit that leaves a
        summary alone invalidates nothing), else by their content; the files that define
        the names it takes from a package that re-exports them; and whether it is in a
        package (a script's own calls are all its calls, which the analysis trusts)."""
        digest = hashlib.sha256()
        digest.update(b"package\0" if self.in_package(path) else b"script\0")
        deps = sorted(set(self.dependencies(path)) | set(self.reexports(path).values()))
        for dep in deps:
            digest.update(str(dep).encode("utf-8", "surrogateescape") + b"\0")
            if self.summarize is not None:
                part = summary_hash(self.summary_of(dep))
            else:
                part = self.content_hash(dep) or "unreadable"
            digest.update(part.encode() + b"\0")
        return digest.hexdigest()

    def dependents(self, paths: Sequence[Path]) -> Dict[Path, List[Path]]:
        """Reverse edges among `paths`: who imports each file (for reports and tests)."""
        wanted = {self.normalize(p) for p in paths}
        out: Dict[Path, List[Path]] = {p: [] for p in wanted}
        for p in sorted(wanted):
            deps = set(self.dependencies(p)) | set(self.reexports(p).values())
            for dep in sorted(deps):
                if dep in out:
                    out[dep].append(p)
        return out


def _provider_id(summarize: SummaryProvider) -> str:
    """Which provider computed a cached summary (nanlint's own code is part of the cache
    key already)."""
    name = getattr(summarize, "__qualname__", None) or type(summarize).__qualname__
    version = getattr(summarize, "version", "")
    return f"{getattr(summarize, '__module__', '')}.{name}:{version}"


def summary_hash(summary: Any) -> str:
    import json

    text = json.dumps(summary, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()
