"""Summaries of another file's functions and classes as plain JSON data, and where a
dependent gets them from.

A project file that imports `Actor` from `nets.py` needs only a few facts about it: what
`Actor.forward` (and its other methods) return, its bases, the modules it holds in `self.x`,
whether a function is run under autocast there. Those facts are `Value`s with their evidence;
here they become JSON (the cache stores them) and back, with each piece of evidence naming
the other file ("softmax at pkg/nets.py:14").

Summaries are computed per name and on demand (`SummaryStore`): a dependent's analysis asks
for `Actor` only when a rule's question reaches a call of it. Summarizing every function of
every imported file up front costs about as much again as parsing them all (measured on
kornia and torchmetrics), most of it for names no rule ever asks about. A summary is built
from the imported file alone (what that file imports is not followed), so it depends on that
file's bytes only: a dependent's cache key holds the bytes of the files it imports, and an
import cycle needs no cut.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import libcst as cst

from ..core.bounds import parse_module
from .values import TOP, Evidence, Value, unknown

# Bumped when the data layout or what it means changes (part of the cache's provider key).
FORMAT = 6
PROVIDER = f"nanlint.analysis.summaries:{FORMAT}"

# Larger imported files are not summarized (the default `max-file-size`: a file that large is
# generated code, skipped when linted, and would cost each dependent a parse of it).
MAX_SUMMARIZED_BYTES = 1024 * 1024
# How deep a module held in an attribute is followed into its own class's `forward`.
_NESTING = 2
# A file that never says this has no autocast region to call a function in.
_MAY_AUTOCAST = re.compile(r"autocast")

_DEFAULTS = {f.name: f.default for f in fields(Value) if f.name not in ("evidence", "module_out", "nograd", "members", "draw")}


# ---------------------------------------------------------------------- values <-> data


def _number_to_data(x: float) -> Any:
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def _number_from_data(x: Any) -> float:
    if x == "inf":
        return math.inf
    if x == "-inf":
        return -math.inf
    return float(x)


def value_to_data(v: Value) -> Dict[str, Any]:
    """The facts of a Value whose evidence lines are real line numbers of one file: only the
    fields that differ from an unknown value."""
    out: Dict[str, Any] = {}
    for name, default in _DEFAULTS.items():
        got = getattr(v, name)
        if got != default:
            out[name] = _number_to_data(got) if name in ("lo", "hi") else got
    if v.module_out is not None:
        out["module_out"] = value_to_data(v.module_out)
    if v.members is not None:
        out["members"] = [[k, value_to_data(m)] for k, m in v.members]
    if v.evidence:
        out["evidence"] = [[e.line, e.reason] for e in v.evidence]
    if v.nograd is not None:
        out["nograd"] = [v.nograd.line, v.nograd.reason]
    return out


def value_from_data(data: Dict[str, Any], display: str) -> Value:
    """A Value from its data; its evidence cites `display` (the file it came from)."""
    kw: Dict[str, Any] = {}
    for name, default in _DEFAULTS.items():
        if name not in data:
            continue
        got = data[name]
        if name in ("lo", "hi"):
            got = _number_from_data(got)
        elif isinstance(default, bool):
            got = bool(got)
        kw[name] = got
    if "module_out" in data:
        kw["module_out"] = value_from_data(data["module_out"], display)
    if "members" in data:
        kw["members"] = tuple((k, value_from_data(m, display)) for k, m in data["members"])
    evidence = []
    for line, reason in data.get("evidence", ()):
        evidence.append(Evidence(0, f"{reason} at {display}:{line}" if line else f"{reason} ({display})"))
    if "nograd" in data:
        line, reason = data["nograd"]
        kw["nograd"] = Evidence(0, f"{reason} at {display}:{line}" if line else reason)
    # Another file's class is not one of this file's: it is reached through `module_out`.
    kw.pop("instance_of", None)
    return Value(evidence=tuple(evidence), **kw)


# ---------------------------------------------------------------------- computing them


class _StatementLines:
    """Line numbers of nodes of an imported file, from the positions of the top-level
    statements that hold them only. Positions of a whole module cost more than parsing it,
    and a summary cites a few nodes, nearly always inside the summarized definition."""

    def __init__(self, fa):
        self.fa = fa
        module = fa.ctx.module
        self.module = module
        self.body = list(module.body)
        # A lone "\r" ends a line for the parser but not for the counts below.
        source = fa.ctx.source
        self.exact = "\r" not in source or source.count("\r") == source.count("\r\n")
        self._before: Optional[list] = None  # lines before each top-level statement
        self._positions: Dict[int, Any] = {}  # statement index -> its position map
        self._order: Optional[list] = None

    def line(self, token: int, first: Optional[str] = None) -> int:
        if token >= 0 or not self.exact:
            return self.fa.line(token)
        try:
            node = self.fa._tokens[-token - 1]
        except IndexError:
            return 0
        for i in self._candidates(first):
            found = self._map(i).get(node)
            if found is not None:
                return self._offset(i) + found.start.line
        return 0  # not a node of the module (as the whole-module map answers)

    def _offset(self, i: int) -> int:
        """The lines of the file before top-level statement `i` (where its own positions
        start counting). A def or class whose header the text states once at the start of
        a line is found by that: no code is generated for the statements before it."""
        stmt = self.body[i]
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            keyword = r"(?:async[ \t]+)?def" if isinstance(stmt, cst.FunctionDef) else "class"
            source = self.fa.ctx.source
            found = list(re.finditer(rf"^{keyword}[ \t]+{re.escape(stmt.name.value)}\b", source, re.M))
            if len(found) == 1:
                header = self._map(i)[stmt.name].start.line
                return source.count("\n", 0, found[0].start()) + 1 - header
        return self._lines_before()[i]

    def _candidates(self, first: Optional[str]):
        """Statement indexes in the order to look in: the named definition's first."""
        if first is not None:
            node = self.fa.functions.get(first) or self.fa.classes.get(first)
            for i, stmt in enumerate(self.body):
                if stmt is node:
                    yield i
                    break
        yield from list(self._positions)  # the statements already resolved
        for i in range(len(self.body)):
            if i not in self._positions:
                yield i

    def _map(self, i: int):
        found = self._positions.get(i)
        if found is None:
            from ..core.context import position_map

            alone = self.module.with_changes(header=(), body=(self.body[i],), footer=())
            found = self._positions[i] = position_map(alone)
        return found

    def _lines_before(self) -> list:
        if self._before is None:
            code = self.module.code_for_node
            count = sum(code(line).count("\n") for line in self.module.header)
            before = []
            for stmt in self.body:
                before.append(count)
                count += code(stmt).count("\n")
            self._before = before
        return self._before


def _line(fa, token: int, first: Optional[str] = None) -> int:
    """`fa.line(token)` (the line of an evidence token), cheaper on an imported file."""
    lines = getattr(fa, "_statement_lines", None)
    if lines is None:
        lines = fa._statement_lines = _StatementLines(fa)
    return lines.line(token, first)


def _resolved(fa, v: Value, depth: int = _NESTING) -> Value:
    """`v` with evidence lines resolved and instances of the file's own classes replaced by
    what calling them returns (their `forward`): another file cannot look the class up."""
    ev = tuple(Evidence(_line(fa, e.line, getattr(fa, "_summary_name", None)), e.reason) for e in v.evidence)
    out = v.module_out
    if v.instance_of is not None and v.instance_of in fa.classes and out is None and depth > 0:
        forward = fa.method(v.instance_of, "forward")
        if forward is not None:
            out = fa.function_return(forward)
            if unknown(out):
                out = Value(learned=True, nograd=out.nograd, evidence=(Evidence(0, f"output of `{v.instance_of}`"),))
    if out is not None:
        out = _resolved(fa, out, depth - 1) if depth > 0 else None
    nograd = v.nograd and Evidence(_line(fa, v.nograd.line, getattr(fa, "_summary_name", None)), v.nograd.reason)
    members = v.members
    if members is not None:
        members = tuple((k, _resolved(fa, m, depth - 1)) for k, m in members) if depth > 0 else None
    return replace(v, evidence=ev, module_out=out, instance_of=None, nograd=nograd, members=members)


def half_precision_callees(fa) -> Dict[str, str]:
    """Why each function of the file runs in half precision where the file shows so (it is
    called under autocast there): a whole-file question, asked once per file."""
    if not _MAY_AUTOCAST.search(fa.ctx.source):
        return {}
    fa.ensure_all()
    return {name: f"{ev.reason} at line {_line(fa, ev.line)}" for name, ev in fa.autocast_callees.items()}


def _half_of(fa, name: str) -> Optional[str]:
    halves = getattr(fa, "_summary_halves", None)
    if halves is None:
        halves = fa._summary_halves = half_precision_callees(fa)
    return halves.get(name)


def function_data(fa, fn, qualified: str) -> Dict[str, Any]:
    """A function's (or method's) summary: what it returns, and why it runs in half
    precision where its own file shows so."""
    data: Dict[str, Any] = {"kind": "function", "returns": value_to_data(_resolved(fa, fa.function_return(fn)))}
    half = _half_of(fa, qualified)
    if half:
        data["half"] = half
    return data


def class_data(fa, cls: str) -> Dict[str, Any]:
    """A class's summary: its bases as written, its methods (inherited ones from classes of
    the same file included) and what its instances hold in `self.x`."""
    from ..core.context import dotted_name

    node = fa.classes[cls]
    methods: Dict[str, Any] = {}
    seen, current, depth = set(), cls, 4
    while current is not None and current not in seen and depth > 0:
        seen.add(current)
        for name, fn in fa.methods.get(current, {}).items():
            if name not in methods and not name.startswith("__"):
                methods[name] = function_data(fa, fn, f"{current}.{name}")
        base = None
        for b in fa.classes[current].bases:
            spelled = dotted_name(b.value)
            if spelled in fa.classes:
                base = spelled
                break
        current, depth = base, depth - 1
    attributes = {}
    for name, v in sorted(fa.class_attrs(cls).items()):
        resolved = _resolved(fa, v)
        if replace(resolved, evidence=()) != TOP:
            attributes[name] = value_to_data(resolved)
    return {
        "kind": "class",
        "bases": [dotted_name(b.value) or "?" for b in node.bases],
        "methods": methods,
        "attributes": attributes,
    }


def name_data(fa, name: str) -> Optional[Dict[str, Any]]:
    """The summary of one top-level function, class or numeric constant of the file (None:
    not defined there)."""
    fa._summary_name = name  # where its evidence is looked up first
    if name in fa.functions:
        return function_data(fa, fa.functions[name], name)
    if name in fa.classes:
        return class_data(fa, name)
    return constant_data(fa.ctx.source, name)


# `NEAR_INF = 1e20` at the start of a line (a module constant), with an optional annotation.
_NUMBER = r"[-+]?(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][-+]?\d+)?"


def constant_data(text: str, name: str) -> Optional[Dict[str, Any]]:
    """A module-level number assigned once in `text` (`NEAR_INF = 1e20`), as summary data:
    a dependent's `-NEAR_INF` is then a known value. Read from the text, without parsing."""
    return module_constants(text).get(name)


_ASSIGNED = re.compile(r"^([A-Za-z_]\w*)[ \t]*(?::[^=\n]+)?=(?!=)[ \t]*([^\n]*)", re.M)


def module_constants(text: str) -> Dict[str, Dict[str, Any]]:
    """Every module-level name of `text` assigned exactly once, to a number."""
    seen: Dict[str, Optional[Dict[str, Any]]] = {}
    for m in _ASSIGNED.finditer(text):
        name = m.group(1)
        if name in seen:
            seen[name] = None  # reassigned: no one value
            continue
        number = re.fullmatch(rf"({_NUMBER})[ \t]*(?:#.*)?", m.group(2).rstrip())
        value = None
        if number is not None:
            try:
                value = float(number.group(1).replace("_", ""))
            except ValueError:
                value = None
        seen[name] = None if value is None else {
            "kind": "constant", "value": _number_to_data(value), "line": text.count("\n", 0, m.start()) + 1}
    return {k: v for k, v in seen.items() if v is not None}


def module_data(fa, display: str, names=None) -> Dict[str, Any]:
    """A module's summary as JSON data: every top-level function and class, or only `names`."""
    wanted = sorted(set(fa.functions) | set(fa.classes)) if names is None else sorted(names)
    return {"format": FORMAT, "path": display, "names": {n: name_data(fa, n) for n in wanted}}


@dataclass(frozen=True)
class FunctionSummary:
    """What calling a function of the file returns (parameters unknown), and in which
    precision it runs where the file shows it."""

    name: str
    returns: Value
    half: Optional[str] = None  # why it runs in half precision, if the file shows it


@dataclass(frozen=True)
class ClassSummary:
    name: str
    bases: Tuple[str, ...]
    methods: Dict[str, FunctionSummary] = field(default_factory=dict)
    attributes: Dict[str, Value] = field(default_factory=dict)  # self.x, joined over methods


@dataclass(frozen=True)
class ModuleSummary:
    """Plain, picklable facts about one module (no CST nodes; evidence lines resolved)."""

    path: str
    functions: Dict[str, FunctionSummary]
    classes: Dict[str, ClassSummary]
    trainable: Tuple[str, ...] = ()


def module_summary_to_data(summary) -> Dict[str, Any]:
    """A `ModuleSummary` (whole module, evidence lines resolved) as JSON data in the
    layout `module_data` writes."""
    def function(f) -> Dict[str, Any]:
        data: Dict[str, Any] = {"kind": "function", "returns": value_to_data(f.returns)}
        if f.half:
            data["half"] = f.half
        return data

    names: Dict[str, Any] = {name: function(f) for name, f in summary.functions.items()}
    for name, c in summary.classes.items():
        names[name] = {
            "kind": "class",
            "bases": list(c.bases),
            "methods": {m: function(f) for m, f in c.methods.items()},
            "attributes": {a: value_to_data(v) for a, v in c.attributes.items()},
        }
    return {"format": FORMAT, "path": summary.path, "names": names, "trainable": list(summary.trainable)}


def module_summary_from_data(data: Dict[str, Any]):
    """The `ModuleSummary` of JSON data (its evidence cites the file by `path`)."""
    display = str(data.get("path", ""))

    def function(name: str, raw: Dict[str, Any]):
        return FunctionSummary(name, value_from_data(raw.get("returns") or {}, display), raw.get("half"))

    functions, classes = {}, {}
    for name, raw in (data.get("names") or {}).items():
        if not isinstance(raw, dict):
            continue
        if raw.get("kind") == "class":
            classes[name] = ClassSummary(
                name, tuple(raw.get("bases") or ()),
                {m: function(m, f) for m, f in (raw.get("methods") or {}).items()},
                {a: value_from_data(v, display) for a, v in (raw.get("attributes") or {}).items()},
            )
        else:
            functions[name] = function(name, raw)
    return ModuleSummary(display, functions, classes, tuple(data.get("trainable") or ()))


# Builds a file's analysis from its text: flow.analyze_source, given by the analysis package
# when it is imported. flow imports this module (through imports) to read the summaries of
# the files a file imports, so this module does not import flow.
_analyze: Optional[Callable[..., Any]] = None


def set_analyzer(analyze: Callable[..., Any]) -> None:
    global _analyze
    _analyze = analyze


def _analysis_of(path: str, text: str, module=None):
    return _analyze(path, text, module)


@contextmanager
def _released(fa) -> Iterator[Any]:
    """`fa` for the block; then its memos and context are dropped at once (`release`): they
    hold one another, and would otherwise wait for a full collection."""
    try:
        yield fa
    finally:
        fa.ctx.release()
        fa.__dict__.clear()


def summarize_file(path, text: str, display: Optional[str] = None) -> Dict[str, Any]:
    """The whole module's summary as JSON data (a `ProjectIndex` provider)."""
    return module_data(_analysis_of(str(path), text), display or os.path.basename(str(path)))


summarize_file.version = FORMAT  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- where dependents get them


def _defines(text: str, name: str) -> bool:
    """The text has a top-level `def name` or `class name` (what a summary can describe)."""
    return re.search(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(name)}\b|^class[ \t]+{re.escape(name)}\b",
                     text, re.M) is not None


@dataclass(frozen=True)
class ModuleRef:
    """An imported project file as a dependent's lint receives it (picklable, for workers):
    its path, the sha256 of the bytes the run's cache key holds, how evidence names it, and
    the cache directory where summaries are kept between runs (None: no cache)."""

    path: str
    content: str
    display: str
    cache: Optional[str] = None


class SummaryStore:
    """Per-name summaries of imported files, computed once per process (memoized by file
    content and name), kept in the cache between runs. A name's summary is computed on a
    fresh analysis of its file, so it does not depend on which names were asked before (the
    same in every worker); the parsed module is kept for a few files only."""

    KEEP_PARSED = 4

    def __init__(self):
        self._memo: Dict[Tuple[str, str, str], Optional[Dict[str, Any]]] = {}
        self._parsed: "OrderedDict[Tuple[str, str], Any]" = OrderedDict()
        self._stored: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self._caches: Dict[str, Any] = {}
        self._halves: Dict[Tuple[str, str], Dict[str, str]] = {}
        self._constants: Dict[Tuple[str, str], Dict[str, Dict[str, Any]]] = {}
        self._mentions: Dict[Tuple[str, str, str], bool] = {}
        self.computed = 0  # names summarized by this process (for tests and benchmarks)

    def get(self, ref: ModuleRef, name: str) -> Optional[Dict[str, Any]]:
        key = (ref.path, ref.content, name)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None  # a failure below stays a miss
        names = self._cached_names(ref)
        if names is not None and name in names:
            self._memo[key] = names[name]
            return names[name]
        entry = self._source(ref)
        if entry is None:
            return None
        if not _defines(entry["text"], name):
            # Not a top-level def or class there (an import, a constant): nothing to parse;
            # the file's constants are read once for all its names.
            found = self.constant(ref, name)
            self._memo[key] = found
            if names is not None:
                names[name] = found
                self._store(ref, names)
            return found
        try:
            if entry["module"] is None:
                entry["module"] = parse_module(entry["text"])  # bounded, as the file's own lint
        except Exception:  # unparsable: the dependent knows nothing of it
            entry["text"] = ""
            return None
        text, module = entry["text"], entry["module"]
        try:
            halves = self._halves.get((ref.path, ref.content))
            if halves is None:
                with _released(_analysis_of(ref.path, text, module)) as whole:
                    halves = self._halves[(ref.path, ref.content)] = half_precision_callees(whole)
            with _released(_analysis_of(ref.path, text, module)) as fa:
                fa._summary_halves = halves
                found = name_data(fa, name)
        except Exception:  # a bad dependency must not stop the dependent's lint
            return None
        self.computed += 1
        self._memo[key] = found
        if names is not None:
            names[name] = found
            self._store(ref, names)
        return found

    def constant(self, ref: ModuleRef, name: str) -> Optional[Dict[str, Any]]:
        """`name`'s summary where it is a module constant of the file, read from its text
        alone: asking for a name that is a function or class computes nothing."""
        key = (ref.path, ref.content)
        constants = self._constants.get(key)
        if constants is None:
            entry = self._source(ref)
            constants = self._constants[key] = module_constants(entry["text"]) if entry is not None else {}
        return constants.get(name)

    def mentions(self, ref: ModuleRef, pattern: "re.Pattern[str]") -> bool:
        """Whether the file's text matches `pattern` (True where it cannot be read as the run
        saw it: then anything may be in it). A question about the text, so that a fact only
        some words can produce is not looked for through summaries of files without them."""
        key = (ref.path, ref.content, pattern.pattern)
        found = self._mentions.get(key)
        if found is None:
            entry = self._parsed.get((ref.path, ref.content))
            if entry is not None:
                text: Optional[str] = entry["text"]
            else:
                source = _read_as_run(ref)
                text = source.text if source is not None else None
            found = self._mentions[key] = text is None or pattern.search(text) is not None
        return found

    def _source(self, ref: ModuleRef) -> Optional[Dict[str, Any]]:
        """The file's text (and its syntax tree once parsed), for the last few files."""
        key = (ref.path, ref.content)
        if key in self._parsed:
            self._parsed.move_to_end(key)
            return self._parsed[key]
        entry: Optional[Dict[str, Any]] = None
        source = _read_as_run(ref)
        # A larger file is generated code: parsing it would cost the dependent's time budget.
        if source is not None and len(source.data) <= MAX_SUMMARIZED_BYTES:
            entry = {"text": source.text, "module": None}
        self._parsed[key] = entry
        while len(self._parsed) > self.KEEP_PARSED:
            self._parsed.popitem(last=False)
        return entry

    def _cache(self, ref: ModuleRef):
        if ref.cache is None:
            return None
        found = self._caches.get(ref.cache)
        if found is None:
            from ..core.store import Store

            found = self._caches[ref.cache] = Store(ref.cache)
        return found

    def _cached_names(self, ref: ModuleRef) -> Optional[Dict[str, Any]]:
        """The names of this file summarized so far (by any run), or None without a cache."""
        cache = self._cache(ref)
        if cache is None:
            return None
        key = (ref.path, ref.content)
        if key not in self._stored:
            found, data = cache.load_summary(ref.path, ref.content, PROVIDER)
            names = data.get("names") if found and isinstance(data, dict) else None
            self._stored[key] = dict(names) if isinstance(names, dict) else {}
        return self._stored[key]

    def _store(self, ref: ModuleRef, names: Dict[str, Any]) -> None:
        cache = self._cache(ref)
        if cache is not None:
            cache.store_summary(ref.path, ref.content, PROVIDER, {"format": FORMAT, "names": names})


def _read_as_run(ref: ModuleRef):
    """The file's source (`core.source.SourceFile`) if its bytes are still those the run hashed (else
    what it held then is unknown), None where it cannot be read."""
    from pathlib import Path

    from ..core.source import read_source

    try:
        source = read_source(Path(ref.path))
    except Exception:  # unreadable: the dependent knows nothing of it
        return None
    if hashlib.sha256(source.data).hexdigest() != ref.content:
        return None
    return source


# One per process: workers of a pool each keep their own.
STORE = SummaryStore()


__all__ = [
    "FORMAT", "ModuleRef", "SummaryStore", "STORE", "value_to_data", "value_from_data",
    "FunctionSummary", "ClassSummary", "ModuleSummary",
    "function_data", "class_data", "name_data", "module_data", "summarize_file",
    "module_summary_to_data", "module_summary_from_data",
]
