"""Names a file imports from its own project, followed into the other file's summaries.

`from .nets import Actor` then `torch.log(Actor(...)(obs))`: the flow asks here what a call
of a name bound by an import returns. The project index hands the lint of a file the modules
it imports, by the module as spelled (`ctx.imported`: `.nets`, `pkg.nets`); each is a
`summaries.ModuleRef` (summaries computed on demand) or a summary already computed (a
`summaries.module_data` dict). Names bound in the file itself (a def, a class, an assignment,
a parameter) hide the imported ones.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional, Tuple

import libcst as cst

from ..core.context import dotted_name, strip_parens
from . import summaries
from .values import TOP, Evidence, Value, cited, point, unknown

# (module as spelled, member name): `from .nets import Actor` binds Actor to (".nets", "Actor").
Member = Tuple[str, str]


class ImportedNames:
    """The bindings of one file's own-module imports and the summaries behind them."""

    def __init__(self, module: cst.Module, imported: Dict[str, Any]):
        self.imported = imported
        self.members: Dict[str, Member] = {}  # local name -> member of an imported module
        self.modules: Dict[str, str] = {}  # local dotted name -> imported module
        self.starred: list = []  # modules imported with `*`, in order (a later one wins)
        self._data: Dict[Member, Optional[Dict[str, Any]]] = {}
        self._origin: Dict[Member, str] = {}  # the file a member's summary came from
        self._instances: Dict[str, Member] = {}
        self.module = module
        self._discarded: Optional[frozenset] = None
        for stmt in _top_level_statements(module.body):
            if isinstance(stmt, cst.ImportFrom):
                self._bind_from(stmt)
            elif isinstance(stmt, cst.Import):
                self._bind_import(stmt)

    # -- bindings ---------------------------------------------------------------------

    def _bind_from(self, stmt: cst.ImportFrom) -> None:
        spelled = "." * len(stmt.relative) + (dotted_name(stmt.module) or "" if stmt.module is not None else "")
        if isinstance(stmt.names, cst.ImportStar):
            if spelled in self.imported:
                self.starred.append(spelled)  # `from .nets import *`: any name it defines
            return
        for alias in stmt.names:
            name = dotted_name(alias.name)
            if name is None:
                continue
            local = dotted_name(alias.asname.name) if alias.asname is not None else name
            submodule = spelled + ("" if spelled.endswith(".") else ".") + name
            if submodule in self.imported:
                self.modules[local] = submodule
            elif spelled in self.imported:
                self.members[local] = (spelled, name)

    def _bind_import(self, stmt: cst.Import) -> None:
        for alias in stmt.names:
            full = dotted_name(alias.name)
            if full is None:
                continue
            if alias.asname is not None:
                if full in self.imported:
                    self.modules[dotted_name(alias.asname.name) or full] = full
                continue
            # `import pkg.nets` binds `pkg`; `pkg.nets.Actor` reaches the member.
            parts = full.split(".")
            for i in range(1, len(parts) + 1):
                prefix = ".".join(parts[:i])
                if prefix in self.imported:
                    self.modules[prefix] = prefix

    def discarded(self) -> frozenset:
        """The calls written as statements (their value unused): no summary is needed."""
        if self._discarded is None:
            found = set()
            _statement_calls(self.module.body, found)
            self._discarded = frozenset(found)
        return self._discarded

    def member_of(self, spelled: str) -> Optional[Member]:
        """What a dotted name written in the file refers to among the imported members."""
        if spelled in self.members:
            return self.members[spelled]
        head, _, name = spelled.rpartition(".")
        if head and head in self.modules:
            return self.modules[head], name
        if not head:
            for module in reversed(self.starred):
                if self.data((module, spelled)) is not None:
                    self.members[spelled] = (module, spelled)
                    return self.members[spelled]
        return None

    # -- summaries --------------------------------------------------------------------

    def data(self, member: Member) -> Optional[Dict[str, Any]]:
        if member not in self._data:
            self._data[member] = None
            module, name = member
            source = self.imported.get(module)
            if isinstance(source, summaries.ModuleRef):
                found = summaries.STORE.get(source, name)
                self._origin[member] = source.display
                origin = self.imported.get(f"{module}:{name}")
                if found is None and isinstance(origin, summaries.ModuleRef):
                    # Re-exported (`from .nets import Actor` in a package's __init__.py).
                    found = summaries.STORE.get(origin, name)
                    self._origin[member] = origin.display
                self._data[member] = found
            elif isinstance(source, dict) and source.get("format") == summaries.FORMAT:
                found = (source.get("names") or {}).get(name)
                origin = self.imported.get(f"{module}:{name}")
                if not isinstance(found, dict) and isinstance(origin, dict):
                    found = (origin.get("names") or {}).get(name)
                    self._origin[member] = str(origin.get("path") or module)
                self._data[member] = found if isinstance(found, dict) else None
        return self._data[member]

    def constant(self, member: Member) -> Optional[Dict[str, Any]]:
        """The member's summary if it is a module constant. Cheaper than `data`: a name that
        is only referenced (not called) must not cost its class or function a summary."""
        module, name = member
        source = self.imported.get(module)
        if isinstance(source, summaries.ModuleRef):
            found = summaries.STORE.constant(source, name)
            if found is not None:
                self._origin[member] = source.display
            return found
        data = self.data(member)
        return data if data and data.get("kind") == "constant" else None

    def display(self, member: Member) -> str:
        """How evidence names the file a member's summary came from."""
        self.data(member)
        if member in self._origin:
            return self._origin[member]
        module = member[0]
        source = self.imported.get(module)
        if isinstance(source, dict):
            return str(source.get("path") or module)
        return module

    def method_data(self, member: Member, method: str, depth: int = 4) -> Tuple[Optional[Dict[str, Any]], Member]:
        """A method's summary, from the class or a base class of the same module, and the
        class it was found in."""
        while depth > 0:
            cls = self.data(member)
            if not cls or cls.get("kind") != "class":
                return None, member
            found = (cls.get("methods") or {}).get(method)
            if isinstance(found, dict):
                return found, member
            bases = cls.get("bases") or []
            if not bases or self.data((member[0], bases[0])) is None:
                return None, member
            member, depth = (member[0], bases[0]), depth - 1
        return None, member

    # -- what calls return ------------------------------------------------------------

    def returns(self, data: Optional[Dict[str, Any]], member: Member) -> Optional[Value]:
        if not data or not isinstance(data.get("returns"), dict):
            return None
        return summaries.value_from_data(data["returns"], self.display(member))

    def instance(self, member: Member, spelled: str, line: int) -> Value:
        """`Actor(...)`: a module object whose call runs `Actor.forward`."""
        key = f"{self.display(member)}::{member[1]}"
        self._instances[key] = member
        out = self.returns(*self.method_data(member, "forward"))
        if out is not None and out.prob is None and unknown(out):
            # A model's output with nothing more known: learned features (as in one file).
            out = Value(learned=True, nograd=out.nograd, evidence=(Evidence(line, f"output of `{spelled}`"),))
        return Value(instance_of=key, module_out=out, evidence=(Evidence(line, f"`{spelled}` instance"),))

    def call(self, member: Member, spelled: str, line: int) -> Optional[Value]:
        """What calling an imported function or class returns (None: not known)."""
        data = self.data(member)
        if data is None:
            return None
        if data.get("kind") == "class":
            return self.instance(member, spelled, line)
        out = self.returns(data, member)
        if out is None:
            return None
        return cited(out, line, f"returned by `{spelled}`")

    def method_call(self, instance: Value, method: str, line: int) -> Optional[Value]:
        """`actor.probs(x)` on an instance of an imported class."""
        member = self._instances.get(instance.instance_of or "")
        if member is None:
            return None
        if method in ("to", "cuda", "cpu", "eval", "train", "float", "half", "bfloat16", "requires_grad_"):
            return instance
        out = self.returns(*self.method_data(member, method))
        if out is None:
            return TOP
        return cited(out, line, f"returned by `{member[1]}.{method}`")


def _statement_calls(body, found: set) -> None:
    """ids of the calls that are whole expression statements, in every block of `body`."""
    for stmt in body:
        if isinstance(stmt, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            for small in stmt.body:
                if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                    found.add(id(small.value))
            continue
        blocks = [getattr(stmt, "body", None), getattr(stmt, "finalbody", None)]
        blocks += [h for h in getattr(stmt, "handlers", ()) or ()]
        orelse = getattr(stmt, "orelse", None)
        if isinstance(orelse, cst.If):
            _statement_calls([orelse], found)
        else:
            blocks.append(orelse)
        for block in blocks:
            _statement_calls(_block_statements(block), found)


def _block_statements(block) -> list:
    """The statements of a block (`Else`, `Finally`, a handler: through their suite)."""
    while block is not None and not isinstance(block, (cst.IndentedBlock, cst.SimpleStatementSuite)):
        block = getattr(block, "body", None)
    if isinstance(block, cst.IndentedBlock):
        return list(block.body)
    if isinstance(block, cst.SimpleStatementSuite):
        return [block]
    return []


def _top_level_statements(body):
    """Import statements at module level, also inside top-level `if`/`try` blocks (an
    optional dependency, a TYPE_CHECKING block)."""
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    yield small
        elif isinstance(stmt, cst.If):
            yield from _top_level_statements(stmt.body.body)
            orelse = stmt.orelse
            while orelse is not None:
                yield from _top_level_statements(orelse.body.body)
                orelse = getattr(orelse, "orelse", None) if isinstance(orelse, cst.If) else None
        elif isinstance(stmt, cst.Try):
            yield from _top_level_statements(stmt.body.body)
            for handler in stmt.handlers:
                yield from _top_level_statements(handler.body.body)


def imported_names(ctx) -> Optional[ImportedNames]:
    """The file's imported names, one per file (None when the project index gave it nothing)."""
    imported = getattr(ctx, "imported", None)
    if not imported:
        return None
    return ctx.derived("imported names", lambda: ImportedNames(ctx.module, imported))


def may_mention(ctx, pattern: "re.Pattern[str]") -> bool:
    """Whether the file or a project file whose summaries its analysis may read (`ctx.imported`:
    the modules it imports and the files of names they re-export) matches `pattern`. A
    summary is computed from its own file's text alone, so a fact that only some words can
    produce (a clamp at 0 needs `clamp` or `clip`) cannot reach the file's values otherwise."""
    if pattern.search(ctx.source):
        return True
    for source in (getattr(ctx, "imported", None) or {}).values():
        if not isinstance(source, summaries.ModuleRef) or summaries.STORE.mentions(source, pattern):
            return True  # a summary given as data: its file's text is not at hand
    return False


def name_value(fa, name: str) -> Optional[Value]:
    """A module constant the file imports from its own project (`from .consts import
    NEAR_INF`): its number, citing where it is set. None: not such a name."""
    names = imported_names(fa.ctx)
    member = names.member_of(name) if names is not None else None
    if member is None:
        return None
    data = names.constant(member)
    if data is None:
        return None
    number = summaries.value_from_data({"lo": data["value"]}, "").lo
    where = f"{names.display(member)}:{data.get('line', 0)}"
    return point(number).with_evidence(0, f"`{member[1]}` = {number:g} at {where}")


def _shadowed(fa, spelled: str, env=None) -> bool:
    """Whether the first name of `spelled` is bound in the file (a local, a function or class
    of the file, a module-level assignment such as `Actor = wrap(Actor)`): then it is not
    the imported name."""
    root = spelled.split(".", 1)[0]
    module_env = fa.module_env
    return (env is not None and root in env.vars) or root in fa.functions or root in fa.classes or (
        module_env is not None and root in module_env.vars)


def annotated_instance(fa, spelled: Optional[str], line: int) -> Optional[Value]:
    """A parameter annotated with a class the file imports from its own project (`actor:
    Actor`, `actor: "nets.Actor"`): an instance of it, as a type checker reads it. None: not
    such an annotation, or the name is rebound in the file."""
    names = imported_names(fa.ctx)
    if names is None or not spelled or _shadowed(fa, spelled):
        return None
    member = names.member_of(spelled)
    if member is None or (names.data(member) or {}).get("kind") != "class":
        return None
    return names.instance(member, spelled, line)


def inherited_method(fa, cls: str, method: str, line: int) -> Optional[Value]:
    """What `method` returns where the file's class `cls` (or an in-file base of it) inherits
    it from a class the file imports from its own project (`class Actor(Policy)` with
    `Policy` from `.nets`: `self(x)` runs `Policy.forward`). None: not such a method."""
    names = imported_names(fa.ctx)
    if names is None:
        return None
    for _ in range(4):
        node = fa.classes.get(cls)
        if node is None:
            return None
        local = next((b.value for b in node.bases if dotted_name(b.value) in fa.classes), None)
        if local is not None:
            cls = dotted_name(local)
            continue
        for base in node.bases:
            spelled = dotted_name(base.value)
            member = names.member_of(spelled) if spelled is not None else None
            if member is not None and (names.data(member) or {}).get("kind") == "class":
                out = names.returns(*names.method_data(member, method))
                if out is None:
                    return None
                if method == "forward" and out.prob is None and unknown(out):
                    return Value(learned=True, nograd=out.nograd,
                                 evidence=(Evidence(line, f"output of `{member[1]}.forward`"),))
                return out
        return None
    return None


def call_value(fa, node: cst.Call, env, line: int) -> Optional[Value]:
    """The flow's hook: what `node` returns when it calls a name the file imports from its
    own project (an imported function, class or a method of an imported class's instance).
    None: not such a call (the flow goes on as before)."""
    names = imported_names(fa.ctx)
    if names is None:
        return None
    func = strip_parens(node.func)
    spelled = dotted_name(func)
    if spelled is not None:
        shadowed = _shadowed(fa, spelled, env)
        member = None if shadowed else names.member_of(spelled)
        if member is not None:
            if id(node) in names.discarded():
                return TOP  # `check_shape(x)` as a statement: what it returns is never used
            return names.call(member, spelled, line)
        owner, _, method = spelled.rpartition(".")
        cls = None if shadowed or not owner else names.member_of(owner)
        if cls is not None and (names.data(cls) or {}).get("kind") == "class":
            # `Actor.probs(model, x)`, a static or class method: the method's summary.
            out = names.returns(*names.method_data(cls, method))
            if out is not None:
                return cited(out, line, f"returned by `{spelled}`")
    if isinstance(func, cst.Attribute) and names._instances:
        receiver_name = dotted_name(func.value)
        if receiver_name is not None:
            receiver = fa.eval(func.value, env)
            if receiver.instance_of in names._instances:
                return names.method_call(receiver, func.attr.value, line)
    return None


__all__ = ["ImportedNames", "imported_names", "call_value", "name_value", "may_mention"]
