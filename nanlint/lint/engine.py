"""Lint one source text: parse once, walk once with every rule, apply suppressions."""

from __future__ import annotations

import dataclasses
import re
import symtable
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Type

import libcst as cst

from ..core.context import NODE_TYPES, FileContext, Scope, comment_tokens, is_node_type
from ..core.diagnostics import Diagnostic, Position
from ..analysis import relations as proven_relations
from ..analysis.precision import Precision
from ..rules import Rule
from ..rules.base import reports_latent
from ..core.bounds import FileBudget, NestedTooDeeply, OverBudget, parse_refusal, quiet_python_parser, run_deep
from ..core.triggers import firing
from ..core.text import split_lines

SYNTAX_ERROR = "NAN001"
IO_ERROR = "NAN002"

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.I)
_IGNORE = re.compile(r"#\s*nanlint:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.I)
_SKIP_FILE = re.compile(r"#\s*nanlint:\s*skip-file\b", re.I)
# `# nanlint: noqa` on a line of its own (ruff's `# ruff: noqa`): every finding in the file;
# `# nanlint: noqa: NAN1, NAN205`: those codes (or prefixes) in the file.
_FILE_NOQA = re.compile(
    r"^#\s*nanlint:\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]*(?:[\s,]+[A-Za-z]+[0-9]*)*))?\s*$", re.I
)


@dataclass
class LintResult:
    diagnostics: List[Diagnostic]
    # Internal errors (a rule crashed on one node): one line each on stderr; the findings
    # of the file, and so the exit code, are unaffected.
    errors: List[str] = field(default_factory=list)
    # No syntax tree: a result outlives its file's lint, and a tree is ~100x the source.
    # Why the file was not (fully) analysed (time budget, memory), for one warning line.
    skipped: Optional[str] = None


def may_match(source: str) -> bool:
    """Every rule concerns torch code: a file that never says "torch" is skipped unparsed."""
    return "torch" in source


def _python_accepts(source: str) -> bool:
    """Whether Python's parser accepts `source`. Through `symtable`, which parses to the
    interpreter's internal tree without building `ast` objects (~40% cheaper than
    `compile(..., PyCF_ONLY_AST)`); it also rejects a few scoping errors the parser lets
    through, which only sends such a file down the slower, exact path."""
    try:
        with quiet_python_parser():
            symtable.symtable(source, "<nanlint>", "exec")
    except Exception:  # SyntaxError, RecursionError, MemoryError, ValueError
        return False
    return True


def _python_syntax_error(source: str) -> Optional[Tuple[int, int, str]]:
    """Python's own report (row, 1-based column, message), which points at the offending
    token; LibCST's `editor_column` is often just the start of the line."""
    try:
        with quiet_python_parser():
            compile(source, "<nanlint>", "exec", flags=0x400, dont_inherit=True)  # PyCF_ONLY_AST
    except SyntaxError as exc:
        if exc.lineno:
            return exc.lineno, max(exc.offset or 1, 1), exc.msg
    except Exception:  # ValueError (NUL bytes), RecursionError, MemoryError
        pass
    return None


def syntax_error(path: str, source: str, row: int, col: int, text: str) -> Diagnostic:
    return not_parsed(path, source, row, col, f"SyntaxError: {text}")


def not_parsed(path: str, source: str, row: int, col: int, why: str) -> Diagnostic:
    """NAN001 at (row, col): the file was not linted, for the reason `why`."""
    lines = split_lines(source)
    return Diagnostic(
        path=path,
        start=Position(row, col),
        end=Position(row, col),
        code=SYNTAX_ERROR,
        name="syntax-error",
        message=f"{why} (the file was not linted)",
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


# Fields that hold only whitespace, punctuation or operator tokens: no rule looks inside them.
_SKIPPED_FIELDS = {
    "lpar", "rpar", "comma", "semicolon", "leading_lines", "lines_after_decorators",
    "header", "footer", "newline", "trailing_whitespace", "colon", "equal", "dot",
    "operator", "whitespace", "star_tok", "asynchronous",
}
_CHILD_FIELDS: Dict[type, Tuple[str, ...]] = {}


def _child_fields(cls: type) -> Tuple[str, ...]:
    fields = _CHILD_FIELDS.get(cls)
    if fields is None:
        fields = tuple(
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in _SKIPPED_FIELDS and "whitespace" not in f.name
        )
        _CHILD_FIELDS[cls] = fields
    return fields


class _Walker:
    """The one traversal: keeps the context's scopes and precision facts current and
    calls each rule's hooks for the node types it asked for.

    It walks the dataclass fields of the tree directly (in source order) rather than
    through LibCST's visitor protocol, which rebuilds every node as it goes: the walk is
    read-only, so that work is pure cost (it tripled lint time on large files)."""

    def __init__(self, ctx: FileContext, rules: Sequence[Rule], errors: List[str]):
        self.ctx = ctx
        self.errors = errors
        self.visits: Dict[str, List[Callable]] = {}
        self.leaves: Dict[str, List[Callable]] = {}
        self._plans: Dict[type, Tuple] = {}
        for rule in rules:
            for attr in dir(rule):
                if attr.startswith("visit_"):
                    self.visits.setdefault(attr[6:], []).append(getattr(rule, attr))
                elif attr.startswith("leave_"):
                    self.leaves.setdefault(attr[6:], []).append(getattr(rule, attr))
                elif attr == "check_expression":
                    for kind in rule.expression_kinds:
                        self.visits.setdefault(kind, []).append(rule.check_expression)

    def _call(self, handlers: List[Callable], node: cst.CSTNode) -> None:
        for handler in handlers:
            try:
                handler(node, self.ctx)
            except NestedTooDeeply:
                raise  # the file's condition, not the rule's: the file is reported skipped
            except Exception as exc:  # a rule bug must not lose the rest of the run
                self._contain(handler, node, exc)

    def _contain(self, handler: Callable, node: cst.CSTNode, exc: Exception) -> None:
        """A hook raised: run it once more for its finding alone (most failures are in
        building a fix or a probe), and record one line naming rule, file and position."""
        ctx = self.ctx
        before = len(ctx.diagnostics)
        ctx.degraded = True
        try:
            handler(node, ctx)
            kept = len(ctx.diagnostics) > before
        except Exception:  # noqa: BLE001 - the matcher itself fails: that finding is lost
            kept = False
        finally:
            ctx.degraded = False
        rule = getattr(handler, "__self__", None)
        try:
            at = ctx.span(node)[0]
        except Exception:  # noqa: BLE001 - positions of a node the walk reached
            at = Position(1, 1)
        doing = "building its fix or probe (the finding is kept without them)" if kept else "matching"
        ctx.internal_error(getattr(rule, "code", "?"), at, doing, exc)

    def _plan(self, kind: type) -> Tuple:
        """What the walk does at a node of type `kind`, looked up once per type."""
        name = kind.__name__
        plan = (_child_fields(kind), _ENTER.get(kind), self.visits.get(name),
                self.leaves.get(name), _LEAVE.get(kind))
        self._plans[kind] = plan
        return plan

    def walk(self, node: cst.CSTNode) -> None:
        kind = type(node)
        plan = self._plans.get(kind)
        if plan is None:
            plan = self._plan(kind)
        fields, enter, visits, leaves, leave = plan
        ctx = self.ctx
        ctx.stack.append(node)
        if enter is not None:
            enter(ctx, node)
        if visits:
            self._call(visits, node)
        node_types = NODE_TYPES
        for field_name in fields:
            value = getattr(node, field_name)
            vtype = type(value)
            if vtype is list or vtype is tuple:
                for item in value:
                    is_node = node_types.get(type(item))
                    if is_node or (is_node is None and is_node_type(type(item))):
                        self.walk(item)
            else:
                is_node = node_types.get(vtype)
                if is_node or (is_node is None and is_node_type(vtype)):
                    self.walk(value)
        if leaves:
            self._call(leaves, node)
        if leave is not None:
            leave(ctx, node)
        ctx.stack.pop()


def _enter_function(ctx: FileContext, node: cst.FunctionDef) -> None:
    ctx.precision.enter(node)
    ctx.scopes.append(_function_scope(ctx, node))


def _enter_class(ctx: FileContext, node: cst.ClassDef) -> None:
    ctx.scopes.append(Scope(node, "class"))


def _enter_with(ctx: FileContext, node: cst.With) -> None:
    ctx.precision.enter(node)
    for item in node.items:
        if item.asname is not None:
            _bind_targets(ctx, item.asname.name, None)


def _leave_assign(ctx: FileContext, node: cst.Assign) -> None:
    for target in node.targets:
        _bind_targets(ctx, target.target, node.value)
    ctx.precision.note_statement(node)


def _leave_ann_assign(ctx: FileContext, node: cst.AnnAssign) -> None:
    if node.value is not None:
        _bind_targets(ctx, node.target, node.value)
        ctx.precision.note_statement(node)


class _Chain:
    """An `if`/`elif`/`else` chain being walked: the bindings before it, and those its
    finished arms made (later arms win, as after a plain sequence)."""

    __slots__ = ("scope", "before", "made")

    def __init__(self, scope, before):
        self.scope = scope
        self.before = before
        self.made: dict = {}

    def close_arm(self) -> None:
        bindings = self.scope.bindings
        self.made.update((n, b) for n, b in bindings.items() if self.before.get(n) is not b)
        bindings.clear()
        bindings.update(self.before)


def _enter_if(ctx: FileContext, node: cst.If) -> None:
    # An `elif` or `else` arm does not see what an earlier arm of its chain assigned: only one
    # arm runs (a probe built in the `elif` must not inline the `if` arm's value).
    chain = ctx.if_arms.pop(id(node), None)
    if chain is not None:
        chain.close_arm()
    else:
        chain = _Chain(ctx.scope, dict(ctx.scope.bindings))
        ctx.if_chains[id(node)] = chain
    if node.orelse is not None:
        ctx.if_arms[id(node.orelse)] = chain


def _enter_else(ctx: FileContext, node: cst.Else) -> None:
    chain = ctx.if_arms.pop(id(node), None)
    if chain is not None:
        chain.close_arm()


def _leave_if(ctx: FileContext, node: cst.If) -> None:
    chain = ctx.if_chains.pop(id(node), None)
    if chain is not None:  # the chain's first `if`: what follows sees every arm's last binding
        chain.close_arm()
        chain.scope.bindings.update(chain.made)


def _leave_function(ctx: FileContext, node: cst.FunctionDef) -> None:
    ctx.scopes.pop()
    ctx.precision.leave(node)
    ctx.bind(node.name.value, None)


def _leave_class(ctx: FileContext, node: cst.ClassDef) -> None:
    ctx.scopes.pop()
    ctx.bind(node.name.value, None)


# Bookkeeping by exact node type (type lookups, not isinstance chains: this runs per node).
_ENTER = {
    cst.Import: lambda ctx, n: ctx.imports.add(n),
    cst.ImportFrom: lambda ctx, n: ctx.imports.add(n),
    cst.FunctionDef: _enter_function,
    cst.ClassDef: _enter_class,
    cst.With: _enter_with,
    cst.For: lambda ctx, n: _bind_targets(ctx, n.target, None),
    cst.If: _enter_if,
    cst.Else: _enter_else,
}
_LEAVE = {
    cst.Assign: _leave_assign,
    cst.AnnAssign: _leave_ann_assign,
    cst.AugAssign: lambda ctx, n: _bind_targets(ctx, n.target, None),
    cst.NamedExpr: lambda ctx, n: _bind_targets(ctx, n.target, n.value),
    cst.Expr: lambda ctx, n: ctx.precision.note_statement(n),
    cst.FunctionDef: _leave_function,
    cst.ClassDef: _leave_class,
    cst.With: lambda ctx, n: ctx.precision.leave(n),
    cst.If: _leave_if,
}


def _function_scope(ctx: FileContext, node: cst.FunctionDef) -> Scope:
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
    from ..core.ops import number_value

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
    precision: Any = None,
    budget: Optional[FileBudget] = None,
    imported: Optional[Dict[str, Any]] = None,
    usage: Optional[Dict[str, float]] = None,
) -> LintResult:
    """Diagnostics for one file's text. Never raises for bad input. `precision` is the half
    precision the project trains in (a `precision.TrainingPrecision`, which says why, or the
    config's value: "float16"/"bfloat16"; None or "float32": only what the file shows counts).
    `budget` bounds the analysis (its CPU time and memory, `bounds.FileBudget`): past it the
    file is reported skipped. `imported`: summaries of the project modules the file imports
    (`project.ProjectIndex`). `usage`, when given, receives the analysis's CPU seconds and the
    largest growth of memory seen (benchmarks/stress.py)."""
    try:
        return run_deep(_lint, path, source, rule_classes, precision, imported, budget=budget, usage=usage)
    except OverBudget as exc:
        return LintResult([], skipped=exc.reason(budget or FileBudget()))
    except (MemoryError, RecursionError) as exc:
        reason = "it needs more memory than there is" if isinstance(exc, MemoryError) else \
            "it is nested too deeply to analyse"
        return LintResult([], skipped=reason)


_TOO_DEEP = (
    f"an expression is nested too deeply for LibCST on Python {sys.version_info[0]}.{sys.version_info[1]}"
    " (a long operator chain: split it, or lint with another Python version)"
)


def _lint(path, source, rule_classes, precision, imported) -> LintResult:
    nul = source.find("\0")
    if nul != -1:
        # Python refuses NUL bytes anywhere; point at the first one, not at 1:1.
        row = source.count("\n", 0, nul) + 1
        col = nul - (source.rfind("\n", 0, nul) + 1) + 1
        return LintResult([syntax_error(path, source, row, col, "source code cannot contain null bytes")])
    latent = reports_latent(rule_classes)
    rule_classes = firing(rule_classes, source) if may_match(source) else []
    if not rule_classes and _python_accepts(source):
        # Nothing can fire and Python's parser (an order of magnitude faster than LibCST)
        # accepts the file: nothing to report, and no need to scan its brackets.
        return LintResult([])
    refused = parse_refusal(source)  # before any LibCST parse: what it cannot bound
    if refused is not None:
        return LintResult([not_parsed(path, source, *refused)])
    if not rule_classes:
        # Python rejects the file: LibCST decides (it reads newer syntax than the running
        # Python does), and Python's message words the error.
        found = _python_syntax_error(source)
        if found is not None and _libcst_parses(source):
            found = None
        return LintResult([syntax_error(path, source, *found)] if found else [])
    if _SKIP_FILE.search(source) and _skip_file_comment(source):
        return LintResult([])
    try:
        module = cst.parse_module(source)
    except Exception as exc:  # ParserSyntaxError
        # Python's own parser words and places errors better ("'(' was never closed");
        # LibCST's message stands only where Python accepts the file and LibCST does not.
        found = _python_syntax_error(source)
        if found is None:
            row = getattr(exc, "editor_line", None) or 1
            col = getattr(exc, "editor_column", None) or 1
            text = getattr(exc, "message", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
            found = (row, col, text)
        return LintResult([syntax_error(path, source, *found)])
    ctx = FileContext(path, source, module)
    ctx.precision = Precision(ctx, configured=precision)
    ctx.imported = dict(imported or {})
    ctx.proven_relations = proven_relations
    rules = [cls() for cls in rule_classes]
    walker = _Walker(ctx, rules, ctx.errors)
    try:
        walker.walk(module)
    except NestedTooDeeply:
        return LintResult([], ctx.errors, skipped=_TOO_DEEP)
    finally:
        ctx.release()  # the tree and the analysis go now, not at the next full collection
    diagnostics = _dedupe(d for d in ctx.diagnostics if latent or not d.latent)
    if diagnostics:
        diagnostics = apply_suppressions(source, diagnostics)
    diagnostics.sort(key=Diagnostic.sort_key)
    return LintResult(diagnostics, ctx.errors)


def _libcst_parses(source: str) -> bool:
    try:
        cst.parse_module(source)
        return True
    except Exception:  # noqa: BLE001 - any failure means it does not parse
        return False


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


def _file_noqa(source: str, comments: Dict[int, List[str]]) -> Optional[Set[str]]:
    """The codes a file-level `# nanlint: noqa[: CODES]` suppresses (empty: all; None: none)."""
    codes: Optional[Set[str]] = None
    lines = source.splitlines()
    for row, texts in comments.items():
        for text in texts:
            own_line = 0 < row <= len(lines) and lines[row - 1].strip() == text.strip()
            m = _FILE_NOQA.match(text.strip()) if own_line else None
            if m:
                listed = m.group("codes")
                if not listed:
                    return set()
                codes = (codes or set()) | {c.upper() for c in re.split(r"[\s,]+", listed) if c}
    return codes


def apply_suppressions(source: str, diagnostics: List[Diagnostic]) -> List[Diagnostic]:
    if "noqa" not in source and "nanlint" not in source:
        return diagnostics
    comments = _comments(source)
    file_codes = _file_noqa(source, comments) if "nanlint" in source else None
    if file_codes is not None:
        diagnostics = [
            d for d in diagnostics if file_codes and not any(d.code.startswith(c) for c in file_codes)
        ]
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
