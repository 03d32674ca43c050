"""Facts rules can ask about the file being linted.

One FileContext per file, filled by the engine during its single traversal:
- what a name really is (import aliases of torch, resolved without LibCST's costly
  qualified-name metadata: a file's imports are read as the traversal meets them);
- what a local name holds (the last assignment met in the enclosing function);
- where a node is (positions are computed lazily, only for files with findings);
- how to spell a torch function in this file, and the import a fix must add;
- probes: an expression rewritten with full torch names, and its free inputs.
Precision (autocast, half) lives in analysis/precision.py; value ranges in analysis/ranges.py.
"""

from __future__ import annotations

import tokenize
import bisect
import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from .bounds import NestedTooDeeply
from .diagnostics import SAFE, Diagnostic, Edit, Fix, Position, Probe, ProbeInput, Step
from .positions import fast_position_map
from .ops import TENSOR_METHOD, Op, called_on_self, match_op, number_value
from .text import line_starts, offset, split_lines

_EMPTY_MODULE = cst.Module(body=[])


def node_code(node: cst.CSTNode) -> str:
    return _EMPTY_MODULE.code_for_node(node)


# The helpers below run on most nodes a rule or the analysis looks at: they compare exact
# types (LibCST's Name and Attribute are not subclassed), since `isinstance` on LibCST's
# node classes goes through ABCMeta.
_NAME, _ATTRIBUTE = cst.Name, cst.Attribute


def dotted_name(node: cst.BaseExpression) -> Optional[str]:
    """`a.b.c` for a chain of names, else None."""
    kind = type(node)
    if kind is _NAME:
        return node.value
    if kind is _ATTRIBUTE:
        base = dotted_name(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


def last_name(node: cst.BaseExpression) -> str:
    """The last name of a name or attribute chain (`torch.nan_to_num` -> `nan_to_num`,
    `x.sum` -> `sum`): what a call calls, however it is spelled; "" for anything else."""
    kind = type(node)
    if kind is _ATTRIBUTE:
        return node.attr.value
    return node.value if kind is _NAME else ""


def strip_parens(node: cst.BaseExpression) -> cst.BaseExpression:
    # A tuple's and a generator's parentheses are part of the value (`()` cannot lose them).
    if getattr(node, "lpar", None) and not isinstance(node, (cst.Tuple, cst.GeneratorExp)):
        return node.with_changes(lpar=[], rpar=[])
    return node


def same_code(a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
    """`a` and `b` are written the same, parentheses aside."""
    return node_code(strip_parens(a)).strip() == node_code(strip_parens(b)).strip()


def is_atom(node: cst.BaseExpression) -> bool:
    """True where `-node` or `node.method()` needs no parentheses."""
    if getattr(node, "lpar", None):
        return True
    return isinstance(
        node,
        (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float, cst.SimpleString),
    )


def parenthesize(node: cst.BaseExpression) -> cst.BaseExpression:
    return node if is_atom(node) else node.with_changes(
        lpar=[cst.LeftParen()], rpar=[cst.RightParen()]
    )


def comment_tokens(source: str) -> List[Tuple[int, int, str]]:
    """(row, 1-based column, text) of every comment, from the tokenizer: a `#` inside a
    string is not a comment."""
    found: List[Tuple[int, int, str]] = []
    # Lines as Python counts them; a CR-only ending becomes LF (same length, so rows and
    # columns are unchanged) because the tokenize module does not end lines at a lone CR.
    lines = [line[:-1] + "\n" if line.endswith("\r") else line for line in split_lines(source, keepends=True)]
    try:
        for tok in tokenize.generate_tokens(iter(lines).__next__):
            if tok.type == tokenize.COMMENT:
                found.append((tok.start[0], tok.start[1] + 1, tok.string))
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


@dataclass
class Binding:
    """A local assignment: the value and the bindings in force when it was made."""

    value: Optional[cst.BaseExpression]  # None: rebound in a way we do not follow
    env: Dict[str, "Binding"]


class Scope:
    def __init__(self, node: Optional[cst.CSTNode], kind: str):
        self.node = node
        self.kind = kind  # "module", "class", "function"
        self.bindings: Dict[str, Binding] = {}


class Imports:
    """Local name -> full dotted name, for the names a file imports."""

    def __init__(self) -> None:
        # `torch` is torch even in a snippet that forgot the import.
        self.names: Dict[str, str] = {"torch": "torch"}
        # Bumped by every import read: what a name means may have changed.
        self.version = 0

    def add(self, node: cst.CSTNode) -> None:
        self.version += 1
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = dotted_name(alias.name)
                if full is None:
                    continue
                if alias.asname is not None:
                    local = dotted_name(alias.asname.name)  # type: ignore[arg-type]
                    if local:
                        self.names[local] = full
                else:
                    root = full.split(".")[0]
                    self.names[root] = root
        elif isinstance(node, cst.ImportFrom):
            if node.relative or node.module is None:
                return
            module = dotted_name(node.module)
            if module is None or isinstance(node.names, cst.ImportStar):
                return
            for alias in node.names:
                name = dotted_name(alias.name)
                if name is None:
                    continue
                local = name
                if alias.asname is not None:
                    local = dotted_name(alias.asname.name) or name  # type: ignore[arg-type]
                self.names[local] = f"{module}.{name}"

    def qualname(self, node: cst.BaseExpression) -> Optional[str]:
        kind = type(node)
        if kind is _NAME:
            return self.names.get(node.value)
        if kind is _ATTRIBUTE:
            base = self.qualname(node.value)
            return None if base is None else f"{base}.{node.attr.value}"
        return None

    def local_name_for(self, full: str) -> Optional[str]:
        """A spelling of `full` through this file's imports (`F.softplus`), or None."""
        best: Optional[Tuple[int, str]] = None
        for local, target in self.names.items():
            if full == target:
                return local
            if full.startswith(target + "."):
                spelled = local + full[len(target):]
                if best is None or len(target) > best[0]:
                    best = (len(target), spelled)
        return best[1] if best else None


def position_map(module: cst.Module) -> Any:
    """The PositionProvider's positions of `module`'s nodes, generated directly: resolving
    them through a MetadataWrapper also runs a visitor over the module that rebuilds every
    node, which costs as much again as the positions themselves (positions.py records the
    same ranges for less than half the provider's own cost)."""
    try:
        try:
            return fast_position_map(module)
        except RecursionError:
            raise
        except Exception:  # a libcst whose codegen hooks differ: the provider itself
            pass
        try:
            provider = PositionProvider()
            provider._gen_impl(module)
            return provider._computed
        except RecursionError:
            raise
        except Exception:  # a libcst without that hook: the public way
            return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    except RecursionError as exc:
        raise NestedTooDeeply(str(exc)) from exc


class FileContext:
    def __init__(self, path: str, source: str, module: cst.Module):
        self.path = path
        self.source = source
        self.module = module
        self.imports = Imports()
        self.scopes: List[Scope] = [Scope(module, "module")]
        # The engine's walk of `if`/`elif`/`else` chains (engine._enter_if): chains by their
        # first `if`, and the arms still to come.
        self.if_chains: Dict[int, Any] = {}
        self.if_arms: Dict[int, Any] = {}
        # What layers above the context compute once per file (see `derived`).
        self._derived: Dict[str, Any] = {}
        self.diagnostics: List[Diagnostic] = []
        # Internal errors of rules (reported on stderr; the findings of the run still count).
        self.errors: List[str] = []
        # Set while a hook that failed is run again for its finding alone: no fix, no probe,
        # and a canonical form that fails falls back to the node as written.
        self.degraded = False
        self._positions = None
        self._lines: Optional[List[str]] = None
        self._starts: Optional[List[int]] = None
        self._blocks: Optional[Dict[int, Sequence[cst.CSTNode]]] = None
        # The analysis's memo of node code (analysis.flow._code), dropped with the file.
        self.node_codes: Dict[int, Tuple[cst.CSTNode, str]] = {}
        self._ops: Dict[int, Tuple[cst.CSTNode, Optional[Op]]] = {}
        self._ops_version = -1
        self._top_level_names: Optional[Set[str]] = None
        self._comments: Optional[List[Tuple[int, int, str]]] = None
        # Constants a probe can use: `self.k = 50` in a class, `K = 50` at module level.
        self.constants: Dict[str, float] = {}
        # Precision facts, filled by precision.PrecisionTracker.
        self.precision = None
        # The stack of nodes being visited (the engine keeps it), for rules that look up.
        self.stack: List[cst.CSTNode] = []
        # Summaries of the project modules this file imports, by the module as the import
        # spells it (`.nets`, `pkg.nets`): what the project index knows of other files.
        self.imported: Dict[str, Any] = {}
        # (ctx, names) -> the relations the analysis proves between those names here; given
        # by the engine (analysis.relations), since the core does not import the analysis.
        self.proven_relations: Optional[Callable[[Any, List[str]], Tuple[Tuple[str, str, str], ...]]] = None
        # Top-level imports are read before the traversal so fixes know the file's aliases.
        for stmt in module.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    self.imports.add(small)

    # ------------------------------------------------------------------ names and values
    def qualname(self, node: cst.BaseExpression) -> Optional[str]:
        return self.imports.qualname(node)

    def bare_op(self, node: Optional[cst.CSTNode]) -> Optional[Op]:
        """`op` of the expression without its parentheses."""
        if node is None:
            return None
        return self.op(strip_parens(node) if isinstance(node, cst.BaseExpression) else node)

    def op(self, node: Optional[cst.CSTNode]) -> Optional[Op]:
        """The op `node` performs (ops.match_op), memoized: several rules ask about each
        call. An import read since (a function-level import) empties the memo."""
        if node is None:
            return None
        if self._ops_version != self.imports.version:
            self._ops.clear()
            self._ops_version = self.imports.version
        known = self._ops.get(id(node))
        if known is not None and known[0] is node:
            return known[1]
        found = match_op(node, self.imports.qualname)
        # The node is kept with its op so that its id cannot be reused by another node.
        self._ops[id(node)] = (node, found)
        return found

    def derived(self, key: str, build: Callable[[], Any]) -> Any:
        """`build()` once per file, kept under `key`: the value-flow analysis, the training
        loop's facts. Kept on the context (not in a module-level weak map, whose values hold
        the context and so would keep their own keys and the syntax tree alive) so they go
        when the file is done."""
        found = self._derived.get(key)
        if found is None:
            found = self._derived[key] = build()
        return found

    def release(self) -> None:
        """Drop what the file's lint computed, keeping its findings and internal errors. The
        analysis and the trackers hold the context and the context holds them: left alone,
        such cycles (and the syntax tree they keep) wait for a full collection, and the trees
        of several files are then alive at once. Here the references are cut, so reference
        counting frees them as soon as the lint returns."""
        for value in self._derived.values():
            inner = getattr(value, "__dict__", None)
            if inner is not None:
                inner.clear()  # its own cycles (the analysis and its call-site index) with it
        kept = {"path": self.path, "diagnostics": self.diagnostics, "errors": self.errors}
        self.__dict__.clear()
        self.__dict__.update(kept)

    @property
    def scope(self) -> Scope:
        return self.scopes[-1]

    def function_scope(self) -> Scope:
        for scope in reversed(self.scopes):
            if scope.kind in ("function", "module"):
                return scope
        return self.scopes[0]

    def bind(self, name: str, value: Optional[cst.BaseExpression]) -> None:
        scope = self.scope
        scope.bindings[name] = Binding(value, dict(scope.bindings))

    def binding(self, name: str, env: Optional[Dict[str, Binding]] = None) -> Optional[Binding]:
        if env is not None:
            return env.get(name)
        return self.scope.bindings.get(name)

    def value_of(
        self, node: cst.BaseExpression, depth: int = 4
    ) -> cst.BaseExpression:
        """Follow a local name to the expression last assigned to it (up to `depth` hops)."""
        return self.resolve(node, None, depth)[0]

    def resolve(
        self,
        node: cst.BaseExpression,
        env: Optional[Dict[str, Binding]],
        depth: int = 4,
    ) -> Tuple[cst.BaseExpression, Optional[Dict[str, Binding]]]:
        """Like value_of, but also returns the bindings in force for the result, so that
        names inside it resolve as they did where it was assigned."""
        while depth > 0 and isinstance(node, cst.Name):
            b = self.binding(node.value, env)
            if b is None or b.value is None:
                break
            node, env = b.value, b.env
            depth -= 1
        return node, env

    def is_local(self, node: cst.BaseExpression) -> bool:
        return isinstance(node, cst.Name) and node.value in self.scope.bindings

    def enclosing_function(self) -> Optional[cst.FunctionDef]:
        """The innermost `def` around the node being visited, or None at module level."""
        return next((n for n in reversed(self.stack) if isinstance(n, cst.FunctionDef)), None)

    def enclosing_class(self) -> Optional[str]:
        """The name of the innermost class around the node being visited, or None."""
        for scope in reversed(self.scopes):
            if scope.kind == "class" and isinstance(scope.node, cst.ClassDef):
                return scope.node.name.value
        return None

    def statements_after(self, count: int) -> Tuple[List[str], str]:
        """For the simple statement being visited: the names it assigns (`v`, `self.v`, and an
        augmented target) and the code of the next `count` statements of its block. Rules
        use it to see a result that is tested or repaired right after
        (`v = torch.log(p)` then `torch.isfinite(v)`)."""
        line_index = None
        for i in range(len(self.stack) - 1, -1, -1):
            if isinstance(self.stack[i], cst.SimpleStatementLine):
                line_index = i
                break
        if not line_index:
            return [], ""
        line = self.stack[line_index]
        names: List[str] = []
        for small in line.body:
            if isinstance(small, cst.Assign):
                names += [
                    node_code(t.target)
                    for t in small.targets
                    if isinstance(t.target, (cst.Name, cst.Attribute))
                ]
            elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
                names.append(small.target.value)
        body = getattr(self.stack[line_index - 1], "body", None)
        if not names or not isinstance(body, (list, tuple)):
            return [], ""
        position = next((i for i, stmt in enumerate(body) if stmt is line), None)
        if position is None:
            return [], ""
        return names, "".join(node_code(stmt) for stmt in body[position + 1: position + 1 + count])

    def constant(self, name: str) -> Optional[float]:
        return self.constants.get(name)

    # ------------------------------------------------------------------ positions and text
    def _position_map(self):
        if self._positions is None:
            self._positions = position_map(self.module)
        return self._positions

    def span(self, node: cst.CSTNode) -> Tuple[Position, Position]:
        r = self._position_map()[node]
        return Position(r.start.line, r.start.column + 1), Position(r.end.line, r.end.column + 1)

    def lines(self) -> List[str]:
        if self._lines is None:
            self._lines = split_lines(self.source, keepends=True)
        return self._lines

    def offset(self, pos: Position) -> int:
        """The offset in `source` of a 1-based position."""
        if self._starts is None:
            self._starts = line_starts(self.source)
        return offset(self._starts, self.source, pos)

    def line_text(self, row: int) -> str:
        lines = self.lines()
        return lines[row - 1].rstrip("\r\n") if 0 < row <= len(lines) else ""

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    @property
    def newline(self) -> str:
        return self.module.default_newline

    # ------------------------------------------------------------------ edits
    def replace(self, node: cst.CSTNode, content: str) -> Edit:
        """Replace `node`; the edit remembers the node's text so that applying it can check
        the span still holds exactly that (a wrong position must never rewrite other code)."""
        start, end = self.span(node)
        return Edit(start, end, content, expected=self.code(node))

    def top_level_names(self) -> Set[str]:
        """Names bound at module level (to know whether a fix may introduce `F`)."""
        if self._top_level_names is None:
            names: Set[str] = set(self.imports.names)
            for stmt in self.module.body:
                if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                    names.add(stmt.name.value)
                elif isinstance(stmt, cst.SimpleStatementLine):
                    for small in stmt.body:
                        if isinstance(small, (cst.Assign, cst.AnnAssign)):
                            targets = (
                                [t.target for t in small.targets]
                                if isinstance(small, cst.Assign)
                                else [small.target]
                            )
                            for t in targets:
                                if isinstance(t, cst.Name):
                                    names.add(t.value)
            self._top_level_names = names
        return self._top_level_names

    def _import_edit(self, statement: str) -> Edit:
        """Insert `statement` after the file's top import block (or its docstring)."""
        anchor: Optional[cst.CSTNode] = None
        body = self.module.body
        for i, stmt in enumerate(body):
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                break
            if isinstance(stmt, cst.SimpleStatementLine):
                if any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
                    anchor = stmt
                elif i == 0 and isinstance(stmt.body[0], cst.Expr) and isinstance(
                    stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)
                ) and anchor is None:
                    anchor = stmt
        if anchor is None:
            at = Position(1, 1)
        else:
            _, end = self.span(anchor)
            at = Position(end.row + 1, 1)
        return Edit(at, at, statement + self.newline)

    def spell(self, full: str) -> Tuple[str, Tuple[Edit, ...]]:
        """How to write the torch name `full` here, and the import edits that takes.

        Uses the file's own aliases (`th.sigmoid`, `F.softplus`); otherwise adds
        `import torch.nn.functional as F` (when `F` is free) or `import torch`."""
        local = self.imports.local_name_for(full)
        functional = "torch.nn.functional."
        if full.startswith(functional):
            existing = self.imports.local_name_for("torch.nn.functional")
            if existing is not None and "." not in existing:
                return existing + full[len(functional) - 1:], ()
            if "F" not in self.top_level_names():
                return "F" + full[len(functional) - 1:], (
                    self._import_edit("import torch.nn.functional as F"),
                )
        if local is not None and self._is_imported_root(local):
            return local, ()
        return full, (self._import_edit("import torch"),)

    def _is_imported_root(self, spelled: str) -> bool:
        """`torch` is assumed even without an import; a fix must not rely on that."""
        root = spelled.split(".")[0]
        if root != "torch":
            return True
        return self._imports_torch_root()

    def _imports_torch_root(self) -> bool:
        for stmt in self.module.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Import):
                        for alias in small.names:
                            full = dotted_name(alias.name) or ""
                            if alias.asname is None and full.split(".")[0] == "torch":
                                return True
        return False

    # ------------------------------------------------------------------ reporting
    def report(
        self,
        rule,
        node: cst.CSTNode,
        message: Optional[str] = None,
        *,
        edits: Union[Sequence[Edit], Callable[[], Sequence[Edit]]] = (),
        fix_message: Optional[str] = None,
        applicability: Optional[str] = None,
        probe: Union[Optional[Probe], Callable[[], Optional[Probe]]] = None,
        evidence: Sequence[Step] = (),
    ) -> Diagnostic:
        """Report a finding at `node`. `edits` and `probe` may be builders (callables): a
        builder that fails costs only its own part (the finding stays, without its fix or
        probe) and leaves an internal-error line naming the rule and the position.
        `evidence`: the located steps that show a value rule's value reaching the hazard; a
        value finding without them is latent (the engine keeps it only on request)."""
        start, end = self.span(node)
        if self.degraded:  # a retry after the rule failed: the finding alone
            edits, probe = (), None
        edits = self._built(rule, start, "fix", edits, ())
        probe = self._built(rule, start, "probe", probe, None)
        fix = None
        if edits and any(self._deletes_comment(e) for e in edits):
            # A fix must keep the file's comments; one that would drop a comment inside
            # the rewritten expression is not offered (the finding still is).
            edits = ()
        if edits:
            fix = Fix(
                message=fix_message or rule.fix_title,
                edits=tuple(edits),
                applicability=applicability or rule.fix_applicability or SAFE,
            )
        diag = Diagnostic(
            path=self.path,
            start=start,
            end=end,
            code=rule.code,
            name=rule.name,
            message=message or rule.message,
            fix=fix,
            probe=probe,
            line_text=self.line_text(start.row),
            evidence=tuple(evidence),
            latent=getattr(rule, "kind", None) == "value" and not evidence,
        )
        self.diagnostics.append(diag)
        return diag

    def _built(self, rule, at: Position, what: str, built, empty):
        if not callable(built):
            return built
        try:
            return built()
        except Exception as exc:  # noqa: BLE001 - a rule bug must cost only this piece
            self.internal_error(rule.code, at, f"building its {what}", exc)
            return empty

    def internal_error(self, code: str, at: Position, doing: str, exc: BaseException) -> None:
        """Record a rule's internal error: one line naming the rule, the file and the position."""
        text = str(exc).splitlines()[0] if str(exc) else ""
        self.errors.append(
            f"internal error in {code} at {self.path}:{at.row}:{at.column} while {doing}: "
            f"{type(exc).__name__}{': ' + text if text else ''} (please report this at the nanlint issue tracker)"
        )

    def _comment_positions(self) -> List[Tuple[int, int, str]]:
        if self._comments is None:
            self._comments = comment_tokens(self.source)
        return self._comments

    def _deletes_comment(self, edit: Edit) -> bool:
        if edit.start == edit.end:
            return False
        if edit.start.row == edit.end.row and "#" not in self.line_text(edit.start.row):
            return False
        comments = self._comment_positions()  # in source order: look only inside the span
        i = bisect.bisect_left(comments, (edit.start.row, edit.start.column, ""))
        for row, col, text in comments[i:]:
            if Position(row, col) >= edit.end:
                break
            if text not in edit.content:
                return True
        return False

    def block_of(self, statement: cst.CSTNode) -> Optional[Sequence[cst.CSTNode]]:
        """The statement sequence (module body or indented block) that holds `statement`.
        The map is built once per file: asking per finding must not walk the module."""
        if self._blocks is None:
            self._blocks = {}
            stack: List[cst.CSTNode] = [self.module]
            while stack:
                node = stack.pop()
                if isinstance(node, (cst.Module, cst.IndentedBlock)):
                    for stmt in node.body:
                        self._blocks[id(stmt)] = node.body
                # Descend through statements and their suites, never into expressions.
                for f in dataclasses.fields(node):
                    value = getattr(node, f.name)
                    for child in value if isinstance(value, (list, tuple)) else (value,):
                        if isinstance(child, cst.CSTNode) and not isinstance(
                            child, (cst.BaseExpression, cst.SimpleStatementLine, cst.BaseSmallStatement)
                        ):
                            stack.append(child)
        return self._blocks.get(id(statement))

    # ------------------------------------------------------------------ probes
    def canonical(
        self,
        node: cst.BaseExpression,
        env: Optional[Dict[str, Binding]] = None,
        inline: bool = True,
        keep: Iterable[str] = (),
    ) -> cst.BaseExpression:
        """`node` with torch aliases spelled out in full and (with `inline`) local names
        replaced by what they hold, as a probe's expression must stand on its own. Names in
        `keep` stay free inputs (a trainable tensor: its initializer says nothing)."""
        bindings = env if env is not None else self.scope.bindings
        kept = frozenset(keep)
        # Memoized: a local read in many places (a polynomial's shared terms) is inlined
        # once, not once per read, which was exponential in the chain of locals.
        memo = self.derived("canonical memo", dict)
        key = (id(node), id(bindings), inline, kept)
        found = memo.get(key)
        if found is not None:
            return found[0]
        canonicalizer = _Canonicalizer(self, bindings, inline, kept)
        if not self.degraded:
            result = node.visit(canonicalizer)
        else:
            try:
                result = node.visit(canonicalizer)
            except Exception:  # noqa: BLE001 - degraded retry: the node as written still matches
                result = node
        memo[key] = (result, node, bindings)  # the keys' objects stay alive with the entry
        return result

    def expression_probe(
        self,
        original: cst.BaseExpression,
        fixed: Optional[cst.BaseExpression],
        domains: Optional[Dict[str, Union[Tuple[float, float], ProbeInput]]] = None,
        relations: Tuple[Tuple[str, str, str], ...] = (),
    ) -> Optional[Probe]:
        """A probe for `original` -> `fixed`, both already canonical (see `canonical`).
        Calls to user code (`model(x)`) become free inputs: the verifier runs torch only.
        `domains` maps an input's name to an interval, or to a ProbeInput whose domain, kind,
        dim and evidence are copied (its name and value are the probe's own)."""
        if self.degraded:
            return None
        original, fixed = abstract_calls(original, fixed, ctx=self)
        inputs: List[ProbeInput] = []
        seen: Set[str] = set()
        for expr in (original, fixed):
            if expr is None:
                continue
            for name in free_inputs(expr):
                if name in seen:
                    continue
                seen.add(name)
                known = (domains or {}).get(name)
                if isinstance(known, ProbeInput):
                    constant = self.constant(name)
                    inputs.append(dataclasses.replace(
                        known, name=name, value=constant if constant is not None else known.value))
                else:
                    inputs.append(ProbeInput(name=name, value=self.constant(name), domain=known))
        if not relations and len(inputs) > 1 and self.stack and self.proven_relations is not None:
            # What the value-flow analysis proves between the inputs (`hi >= lo` where the
            # code took a max and a min, `a > b` inside `if a > b:`).
            relations = self.proven_relations(self, [i.name for i in inputs])
        return Probe(
            kind="expression",
            original=node_code(original),
            fixed=node_code(fixed) if fixed is not None else None,
            inputs=tuple(inputs),
            relations=tuple(relations),
        )


# The most code (characters) locals may add to one canonical expression by inlining.
MAX_INLINED = 4000


def _code_size(node: cst.BaseExpression) -> int:
    return len(node_code(node))


class _Canonicalizer(cst.CSTTransformer):
    def __init__(self, ctx: FileContext, env: Dict[str, Binding], inline: bool, keep=frozenset()):
        super().__init__()
        self.ctx = ctx
        self.env = env
        self.inline = inline
        self.keep = keep
        self.inlined = 0  # characters inlined so far (MAX_INLINED)
        self._skip: Set[int] = set()
        # Names a comprehension or a lambda inside the expression binds: there they are not
        # the enclosing scope's (`sum([e * w for e, w in pairs])` with an `e` outside), and
        # neither inlined nor spelled out anywhere in the expression.
        self._shadowed: Set[str] = set()

    def _binds(self, node) -> bool:
        self._shadowed.update(names_bound_inside(node))
        return True

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda = _binds

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        self._skip.add(id(node.attr))
        return True

    def visit_Arg(self, node: cst.Arg) -> bool:
        if node.keyword is not None:
            self._skip.add(id(node.keyword))
        return True

    # A probe is code to run, not to read: comments inside the expression are dropped.
    def leave_TrailingWhitespace(self, original, updated):
        return updated.with_changes(comment=None)

    def leave_EmptyLine(self, original, updated):
        return updated.with_changes(comment=None)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute):
        full = self.ctx.qualname(original)
        if full is not None and full.startswith("torch"):
            return cst.parse_expression(full).with_changes(lpar=updated.lpar, rpar=updated.rpar)
        return updated

    def leave_Name(self, original: cst.Name, updated: cst.Name):
        if id(original) in self._skip or original.value in self._shadowed:
            return updated
        binding = self.env.get(original.value)
        if self.inline and binding is not None and binding.value is not None and original.value not in self.keep \
                and not _empty_container(binding.value):
            inner = self.ctx.canonical(binding.value, binding.env, True, self.keep)
            size = _code_size(inner)
            if self.inlined + size <= MAX_INLINED:
                self.inlined += size
                raw = strip_parens(binding.value)
                if isinstance(inner, cst.Call) and isinstance(raw, cst.Call):
                    callee = dotted_name(raw.func) or node_code(raw.func)  # `zeros(n).index_add_`
                    if callee:
                        # `gate_logit = self.proj(x)`: where the call becomes a free input of
                        # a probe, it keeps the user's name (see `abstract_calls`). Kept by
                        # identity (no code generated here, on every read of every local).
                        self.ctx.derived("inlined call names", dict)[id(inner)] = (inner, original.value, callee)
                return parenthesize(inner)
            # Past the budget the local stays a free input: a probe is an op to run, not a
            # whole program (a polynomial solver's chain of locals would be inlined for ever).
        full = self.ctx.imports.names.get(original.value)
        if full is not None and full.startswith("torch") and full != original.value:
            return cst.parse_expression(full)
        return updated


def names_bound_inside(node: cst.CSTNode) -> Iterator[str]:
    """The names a comprehension's targets or a lambda's parameters bind (inside it they
    shadow the enclosing scope's)."""
    if isinstance(node, cst.Lambda):
        params = node.params
        for p in (*params.posonly_params, *params.params, *params.kwonly_params, params.star_arg, params.star_kwarg):
            if isinstance(p, cst.Param):
                yield p.name.value
        return
    comp = getattr(node, "for_in", None)
    while comp is not None:
        yield from target_names(comp.target)
        comp = comp.inner_for_in


def target_names(target: cst.BaseExpression) -> Iterator[str]:
    """The names an assignment or loop target binds (`a`, `a, (b, *c)`)."""
    stack = [target]
    while stack:
        t = stack.pop()
        if isinstance(t, cst.Name):
            yield t.value
        elif isinstance(t, (cst.Tuple, cst.List)):
            stack.extend(e.value for e in t.elements)
        elif isinstance(t, cst.StarredElement):
            stack.append(t.value)


def _empty_container(node: cst.BaseExpression) -> bool:
    """`[]`, `{}`, `list()`, `dict()`: filled later by `append`/`update`, which bindings do
    not follow, so the name is an input, not the empty literal."""
    if isinstance(node, (cst.List, cst.Dict, cst.Set, cst.Tuple)):
        return not node.elements
    return isinstance(node, cst.Call) and not node.args and isinstance(node.func, cst.Name) \
        and node.func.value in ("list", "dict", "set")


def free_inputs(node: cst.BaseExpression) -> List[str]:
    """The names and attribute chains (`x`, `self.k`) a canonical expression reads."""
    found: List[str] = []

    def walk(n: cst.CSTNode, as_callee: bool = False) -> None:
        if isinstance(n, cst.Name):
            if as_callee:
                return  # a builtin or local function (`float`), not a tensor input
            if n.value not in ("torch", "math", "True", "False", "None") and n.value not in found:
                found.append(n.value)
            return
        if isinstance(n, cst.Attribute):
            chain = dotted_name(n)
            if chain is not None:
                if chain.split(".")[0] in ("torch", "math"):
                    return
                if as_callee:
                    # `x.exp` called: x is the input.
                    walk(n.value)
                    return
                if chain not in found:
                    found.append(chain)
                return
            walk(n.value)
            return
        if isinstance(n, cst.Call):
            walk(n.func, as_callee=True)
            for a in n.args:
                walk(a.value)
            return
        for child in n.children:
            if isinstance(child, cst.Arg):
                walk(child.value)
            else:
                walk(child)

    walk(node)
    return found


_BUILTINS = {"float", "int", "abs", "min", "max", "len"}
# Tensor methods a probe keeps (the verifier runs them); any other method call is user code.
_TENSOR_METHODS = set(TENSOR_METHOD) | {
    "clamp", "clip", "clamp_min", "clamp_max", "max", "min", "amax", "amin", "tril", "triu",
    "bool", "long", "int", "float", "double", "half", "bfloat16", "to", "type", "masked_fill",
    "logsumexp", "softmax", "log_softmax", "log2", "log10", "view", "reshape", "flatten",
    "squeeze", "unsqueeze", "transpose", "permute", "contiguous", "detach", "clone", "t",
    "expand", "expand_as", "view_as", "reshape_as", "gather", "index_select", "narrow",
    "select", "flip", "roll", "size", "dim", "norm", "where",
    "rsqrt", "acos", "asin", "arccos", "arcsin", "numel", "count_nonzero", "any", "all",
    "var", "std", "prod", "atan", "arctan", "atan2",
}


class _Abstract(cst.CSTTransformer):
    """Replace calls the verifier cannot run (`model(x)`, `self.net(x)`) by free names."""

    def __init__(self, names: Dict[str, str], taken: Set[str], local_names: Optional["_LocalNames"] = None):
        super().__init__()
        self.names = names
        self.taken = taken
        self.local_names = local_names

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = updated.func
        if isinstance(func, cst.Name):
            opaque = func.value not in _BUILTINS
            stem = func.value
        elif isinstance(func, cst.Attribute):
            chain = dotted_name(func)
            # `(a + b).exp()`, `model(x).softmax(-1)`: a tensor method of a computed value;
            # `self.blocks[0].forward(x)`: user code.
            opaque = (
                (chain is None or chain.split(".")[0] not in ("torch", "math"))
                and (func.attr.value not in _TENSOR_METHODS or called_on_self(func))
            )
            stem = func.attr.value
        else:
            # `flow[3](h)` (a module held in a list), `make_layer(n)(x)`: user code.
            opaque = True
            inner = func
            while isinstance(inner, (cst.Subscript, cst.Call)):
                inner = inner.value if isinstance(inner, cst.Subscript) else inner.func
            stem = inner.attr.value if isinstance(inner, cst.Attribute) else \
                inner.value if isinstance(inner, cst.Name) else "call"
        if not opaque:
            return updated
        code = node_code(strip_parens(updated))
        if code not in self.names:
            # Looked up as written before the inner calls were abstracted.
            local = self.local_names.get(strip_parens(original)) if self.local_names is not None else None
            name = local if local is not None and local not in self.taken else f"{stem}_out"
            i = 2
            while name in self.taken:
                name, i = f"{stem}_out{i}", i + 1
            self.taken.add(name)
            self.names[code] = name
        return cst.Name(self.names[code])


def abstract_calls(*exprs: Optional[cst.BaseExpression], ctx: Optional["FileContext"] = None,
                   ) -> List[Optional[cst.BaseExpression]]:
    """The canonical expressions with each call to user code (`model(x)`) replaced by a free
    input, the same name for the same call in every expression: the verifier runs only torch
    operations, and nothing is known about such a value anyway. The input is named after the
    local that held the call where `ctx.canonical` inlined one (`logits = model(x)`: `logits`),
    else after the callee (`model_out`)."""
    taken: Set[str] = set()
    for e in exprs:
        if e is not None:
            taken.update(free_inputs(e))
    names: Dict[str, str] = {}
    local_names = _LocalNames(ctx) if ctx is not None else None
    return [e.visit(_Abstract(names, taken, local_names)) if e is not None else None for e in exprs]


class _LocalNames:
    """The local that held a call `ctx.canonical` inlined: by identity (the node the inliner
    placed), else by code (a rule that rebuilt the expression from text). Only where the whole
    file binds that callee to one local name: which locals were inlined first depends on the
    rules' order, and the names shown must not."""

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self.records = ctx.derived("inlined call names", dict)
        self._by_code: Optional[Dict[str, str]] = None

    def _usable(self, local: str, callee: str) -> bool:
        holders = self.ctx.derived("locals holding a call", lambda: _locals_holding_calls(self.ctx.module))
        return holders.get(callee) == {local}

    def get(self, call: cst.BaseExpression) -> Optional[str]:
        found = self.records.get(id(call))
        if found is not None and found[0] is call:
            return found[1] if self._usable(found[1], found[2]) else None
        if not self.records:
            return None
        if self._by_code is None:
            self._by_code = {}
            seen: Dict[str, Set[Tuple[str, str]]] = {}
            for node, local, callee in self.records.values():
                seen.setdefault(node_code(node), set()).add((local, callee))
            for code, held in seen.items():
                if len(held) == 1:
                    ((local, callee),) = held
                    if self._usable(local, callee):
                        self._by_code[code] = local
        return self._by_code.get(node_code(call))


def _locals_holding_calls(module: cst.Module) -> Dict[str, Set[str]]:
    """Callee (dotted) -> the local names the file binds a call of it to (`z = self.proj(x)`)."""
    out: Dict[str, Set[str]] = {}
    for node in descendants(module):
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            target, value = node.targets[0].target, node.value
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        value = strip_parens(value)
        if isinstance(target, cst.Name) and isinstance(value, cst.Call):
            out.setdefault(dotted_name(value.func) or node_code(value.func), set()).add(target.value)
    return out


# Fields that hold layout (whitespace, commas, parentheses) or operators: never code to search.
_LAYOUT = re.compile(r"whitespace|^lpar$|^rpar$|comma|leading_lines|lines_after|header|footer|semicolon|"
                     r"^colon$|^equal$|^star$|^dot$|operator|asynchronous|newline|^lbracket$|^rbracket$|"
                     r"^lbrace$|^rbrace$")
_CODE_FIELDS: Dict[type, Tuple[str, ...]] = {}
# Whether a type is a syntax-tree node, by type: `isinstance(x, cst.CSTNode)` goes through
# ABCMeta on every call. Shared with the engine's walk.
NODE_TYPES: Dict[type, bool] = {}


def is_node_type(cls: type) -> bool:
    known = NODE_TYPES.get(cls)
    if known is None:
        known = NODE_TYPES[cls] = issubclass(cls, cst.CSTNode)
    return known


def code_children(node: cst.CSTNode) -> Iterable[cst.CSTNode]:
    """The child nodes that can hold code, in field order. Much cheaper than `node.children`,
    which LibCST computes by visiting (and rebuilding) the node, layout included."""
    kind = type(node)
    names = _CODE_FIELDS.get(kind)
    if names is None:
        names = _CODE_FIELDS[kind] = tuple(f.name for f in dataclasses.fields(node) if not _LAYOUT.search(f.name))
    is_node = NODE_TYPES
    for name in names:
        value = getattr(node, name)
        vtype = type(value)
        if vtype is list or vtype is tuple:
            for child in value:
                ctype = type(child)
                known = is_node.get(ctype)
                if known or (known is None and is_node_type(ctype)):
                    yield child
        else:
            known = is_node.get(vtype)
            if known or (known is None and is_node_type(vtype)):
                yield value


def descendants(node: cst.CSTNode) -> Iterable[cst.CSTNode]:
    """`node` and every code node inside it (depth first; layout such as whitespace and
    commas left out). For a search; `_subtree`-style walks that need source order use
    `children`."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(tuple(code_children(n))))


def contains(root: cst.CSTNode, target: cst.CSTNode) -> bool:
    """`target` is `root` or a code node inside it (by identity)."""
    return any(n is target for n in descendants(root))


def iter_calls(node: cst.CSTNode) -> Iterable[cst.Call]:
    """Every call inside `node` (depth first), for rules that scan a statement."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.Call):
            yield n
        stack.extend(reversed(n.children))


__all__ = [
    "FileContext",
    "descendants",
    "code_children",
    "Imports",
    "Binding",
    "node_code",
    "dotted_name",
    "strip_parens",
    "parenthesize",
    "is_atom",
    "free_inputs",
    "iter_calls",
    "abstract_calls",
    "number_value",
]
