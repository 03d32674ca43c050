"""Lint one source text: parse once, walk once with every rule, apply suppressions."""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Type

import libcst as cst

from .context import FileContext, comment_tokens
from .diagnostics import Diagnostic, Position
from .precision import Precision
from .rules import Rule

SYNTAX_ERROR = "NAN001"
IO_ERROR = "NAN002"

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.I)
_IGNORE = re.compile(r"#\s*nanlint:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.I)
_SKIP_FILE = re.compile(r"#\s*nanlint:\s*skip-file\b", re.I)


@dataclass
class LintResult:
    diagnostics: List[Diagnostic]
    # Internal errors (a rule crashed): reported, and the exit code becomes 2.
    errors: List[str] = field(default_factory=list)
    module: Optional[cst.Module] = None


def may_match(source: str) -> bool:
    """Every rule concerns torch code: a file that never says "torch" is skipped unparsed."""
    return "torch" in source


def syntax_error(path: str, source: str, exc: Exception) -> Diagnostic:
    row = getattr(exc, "editor_line", None) or 1
    col = getattr(exc, "editor_column", None) or 1
    text = getattr(exc, "message", None) or str(exc).splitlines()[0]
    lines = source.splitlines()
    return Diagnostic(
        path=path,
        start=Position(row, col),
        end=Position(row, col),
        code=SYNTAX_ERROR,
        name="syntax-error",
        message=f"SyntaxError: {text} (the file was not linted)",
        line_text=lines[row - 1] if 0 < row <= len(lines) else "",
    )


def io_error(path: str, message: str) -> Diagnostic:
    return Diagnostic(
        path=path,
        start=Position(1, 1),
        end=Position(1, 1),
        code=IO_ERROR,
        name="io-error",
        message=message,
    )


class _Walker(cst.CSTVisitor):
    """The one traversal: keeps the context's scopes and precision facts current and
    calls each rule's hooks for the node types it asked for."""

    def __init__(self, ctx: FileContext, rules: Sequence[Rule], errors: List[str]):
        super().__init__()
        self.ctx = ctx
        self.errors = errors
        self.visits: Dict[str, List[Callable]] = {}
        self.leaves: Dict[str, List[Callable]] = {}
        for rule in rules:
            for attr in dir(rule):
                if attr.startswith("visit_"):
                    self.visits.setdefault(attr[6:], []).append(getattr(rule, attr))
                elif attr.startswith("leave_"):
                    self.leaves.setdefault(attr[6:], []).append(getattr(rule, attr))

    def _call(self, handlers: List[Callable], node: cst.CSTNode) -> None:
        for handler in handlers:
            try:
                handler(node, self.ctx)
            except Exception:  # a rule bug must not lose the rest of the run
                rule = getattr(handler, "__self__", None)
                code = getattr(rule, "code", "?")
                tb = traceback.format_exc(limit=-3).strip().splitlines()
                self.errors.append(
                    f"internal error in rule {code} on {self.ctx.path}: {tb[-1]} "
                    "(please report this at the nanlint issue tracker)"
                )

    def on_visit(self, node: cst.CSTNode) -> bool:
        ctx = self.ctx
        ctx.stack.append(node)
        if isinstance(node, (cst.Import, cst.ImportFrom)):
            ctx.imports.add(node)
        elif isinstance(node, cst.FunctionDef):
            ctx.precision.enter(node)
            ctx.scopes.append(_function_scope(ctx, node))
        elif isinstance(node, cst.ClassDef):
            from .context import Scope

            ctx.scopes.append(Scope(node, "class"))
        elif isinstance(node, cst.With):
            ctx.precision.enter(node)
            for item in node.items:
                if item.asname is not None:
                    _bind_targets(ctx, item.asname.name, None)
        elif isinstance(node, (cst.For,)):
            _bind_targets(ctx, node.target, None)
        handlers = self.visits.get(type(node).__name__)
        if handlers:
            self._call(handlers, node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        ctx = self.ctx
        handlers = self.leaves.get(type(original_node).__name__)
        if handlers:
            self._call(handlers, original_node)
        node = original_node
        if isinstance(node, cst.Assign):
            for target in node.targets:
                _bind_targets(ctx, target.target, node.value)
            ctx.precision.note_statement(node)
        elif isinstance(node, cst.AnnAssign):
            if node.value is not None:
                _bind_targets(ctx, node.target, node.value)
                ctx.precision.note_statement(node)
        elif isinstance(node, cst.AugAssign):
            _bind_targets(ctx, node.target, None)
        elif isinstance(node, cst.NamedExpr):
            _bind_targets(ctx, node.target, node.value)
        elif isinstance(node, cst.Expr):
            ctx.precision.note_statement(node)
        elif isinstance(node, cst.FunctionDef):
            ctx.scopes.pop()
            ctx.precision.leave(node)
            ctx.bind(node.name.value, None)
        elif isinstance(node, cst.ClassDef):
            ctx.scopes.pop()
            ctx.bind(node.name.value, None)
        elif isinstance(node, cst.With):
            ctx.precision.leave(node)
        ctx.stack.pop()


def _function_scope(ctx: FileContext, node: cst.FunctionDef):
    from .context import Scope

    scope = Scope(node, "function")
    params = node.params
    for p in list(params.params) + list(params.posonly_params) + list(params.kwonly_params):
        scope.bindings[p.name.value] = _UNKNOWN
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            scope.bindings[star.name.value] = _UNKNOWN
    return scope


def _bind_targets(ctx: FileContext, target: cst.BaseExpression, value) -> None:
    if isinstance(target, cst.Name):
        ctx.bind(target.value, value)
        if value is not None and len(ctx.scopes) == 1:
            _note_constant(ctx, target.value, value)
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            _bind_targets(ctx, element.value, None)
    elif isinstance(target, cst.StarredElement):
        _bind_targets(ctx, target.value, None)
    elif isinstance(target, cst.Attribute) and value is not None:
        # `self.k = 50` in a class: a constant a probe can use.
        if isinstance(target.value, cst.Name) and target.value.value == "self":
            _note_constant(ctx, f"self.{target.attr.value}", value)


def _note_constant(ctx: FileContext, name: str, value: cst.BaseExpression) -> None:
    from .ops import number_value

    number = number_value(value)
    if number is not None:
        ctx.constants[name] = number


class _Unknown:
    value = None
    env: dict = {}


_UNKNOWN = _Unknown()  # a parameter: shadows outer bindings, holds nothing we know


def lint_source(
    path: str,
    source: str,
    rule_classes: Sequence[Type[Rule]],
) -> LintResult:
    """Diagnostics for one file's text. Never raises for bad input."""
    if not may_match(source) or not rule_classes:
        return LintResult([])
    if _SKIP_FILE.search(source) and _skip_file_comment(source):
        return LintResult([])
    try:
        module = cst.parse_module(source)
    except Exception as exc:  # ParserSyntaxError, and RecursionError on absurd nesting
        return LintResult([syntax_error(path, source, exc)])
    ctx = FileContext(path, source, module)
    ctx.precision = Precision(ctx)
    errors: List[str] = []
    rules = [cls() for cls in rule_classes]
    try:
        module.visit(_Walker(ctx, rules, errors))
    except RecursionError:
        errors.append(f"internal error on {path}: the file is nested too deeply to analyse")
    diagnostics = _dedupe(ctx.diagnostics)
    if diagnostics:
        diagnostics = apply_suppressions(source, diagnostics)
    diagnostics.sort(key=Diagnostic.sort_key)
    return LintResult(diagnostics, errors, module)


def _dedupe(diagnostics: Iterable[Diagnostic]) -> List[Diagnostic]:
    seen: Set[Tuple] = set()
    out = []
    for d in diagnostics:
        key = (d.code, d.start, d.end)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def _comments(source: str) -> Dict[int, List[str]]:
    found: Dict[int, List[str]] = {}
    for row, _, text in comment_tokens(source):
        found.setdefault(row, []).append(text)
    return found


def _skip_file_comment(source: str) -> bool:
    return any(_SKIP_FILE.search(c) for cs in _comments(source).values() for c in cs)


def _suppressed_codes(comment: str) -> Optional[Set[str]]:
    """The codes a comment suppresses; an empty set means all; None means none."""
    codes: Optional[Set[str]] = None
    for pattern in (_NOQA, _IGNORE):
        m = pattern.search(comment)
        if m:
            listed = m.group("codes")
            if not listed or not listed.strip():
                return set()
            codes = (codes or set()) | {c.upper() for c in re.split(r"[\s,]+", listed) if c}
    return codes


def apply_suppressions(source: str, diagnostics: List[Diagnostic]) -> List[Diagnostic]:
    if "noqa" not in source and "nanlint" not in source:
        return diagnostics
    comments = _comments(source)
    kept = []
    for d in diagnostics:
        rows = {d.start.row, d.end.row}
        suppressed = False
        for row in rows:
            for comment in comments.get(row, ()):
                codes = _suppressed_codes(comment)
                if codes is None:
                    continue
                if not codes or any(d.code.startswith(c) for c in codes):
                    suppressed = True
        if not suppressed:
            kept.append(d)
    return kept
