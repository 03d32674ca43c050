"""Parameter facts from the file's own call sites.

A parameter of a function or method takes, as its entry value, the join of the argument
values at the calls the file makes to it: positional and keyword arguments, the default where
a call leaves the parameter out; `helper(a)`, `self.method(a, b)`, `obj.method(a)` where `obj`
is an instance of a class of the file, `Cls(a)` for `__init__`. The argument is evaluated in
the caller's environment at the call (itself seeded from its own callers), so a helper only
ever called with a softmax output sees a probability: "softmax at line 12, passed as `p` at
line 30".

`forward` of a module class runs when an instance is called, which a name-based index cannot
find from the name `forward`; its calls are found from where the class (or an in-file
subclass that keeps this `forward`) is built: `self.gate = Gate()` then `self.gate(p)` in any
method, `model = Policy(...).to(device)` then `model(obs)`, `Gate()(p)`, `inst.forward(p)`,
`super().forward(p)` in a subclass, and a member of `nn.Sequential(prev, Gate(), ...)`, whose
input is `prev`'s output. Each call through a holder is evaluated to check that it reaches
the class. Any other use of the class or of a holder (built in a list or an `nn.ModuleList`,
first in a Sequential, passed to a function, stored, `isinstance`) marks the calls
unresolved: their join may then raise a hazard but never make a value safer. A class with
its own `__call__` gets no facts for `forward`, nor does a `forward` the file never calls.

It is lazy and bounded: the callers' values are computed only when a rule asks about a value
that may hold what a caller passed (a parameter, or a name the body assigns from one:
`parameter_dependents`), the index of calls is built when a function first needs its entry
(and not at all for a function the source names only in its definition), an entry is
computed once per function (memoized), a call inside the function itself
or in a function whose entry is being computed (recursion, mutual recursion) contributes the
unknown value, and a function with more than `MAX_SITES` candidate calls gets no facts (for
`forward`: constructions of the class, or calls through its holders and of `.forward`).

Soundness policy. No false alarms comes first, and the file's calls are all the calls only
where no caller outside the file is plausible. So a call-site join is used two ways:
- To raise a hazard, or as a probe domain (inputs the code produces): always. A softmax
  passed to a public helper is a softmax at that call, whoever else calls the helper.
- To make a value safer than unknown (every caller clamps, passes a bounded value, a mask
  that cannot be empty): only where the file's calls are all its calls. That is a private
  name (`_helper`, a method of `_Cls`, the `forward` of `_Cls`), a nested function, a method
  the file calls only as `self.method(...)`, or any function of a script (a file with
  `if __name__ == "__main__":`, or not in a package: no `__init__.py` beside it); and nothing
  else refers to it (passed as a callback, stored, rebound: calls the index cannot see), and
  every candidate call was resolved. Elsewhere (a public function of a package module, the
  `forward` of a public class there) external callers may pass
  anything, and the entry is the join of the unknown value with the calls' values: it keeps
  what raises hazards (a reason for exact 0, float16, trainable) and drops every bound.
- One exception: a constructor's numeric setting (`def __init__(self, k=50)`) is what the
  file's constructions pass, the default where they leave it out, and the default where the
  file shows none (a model built from a config or in another file): a hyperparameter's
  default is its normal use, and no caller in view says otherwise.
Probes (`FileAnalysis(ctx, probing=True)`) trust the file's calls wherever the index sees them
all (inputs the code produces), and a parameter the file never passes takes its default
(`k=50`): that is the value the code runs with.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Set, Tuple

import libcst as cst

from ..core.context import code_children as _children, strip_parens
from ..core.ops import number_value, split_args
from .values import TOP, Evidence, Value, join

# More candidate calls than this: no facts (the join would cost more than it tells).
MAX_SITES = 8
# Decorators that keep a function's parameters as written.
_KEEPS_SIGNATURE = ("staticmethod", "classmethod")
# Methods of a module that return the module itself (`Policy(...).to(device)`).
_SAME_INSTANCE = ("to", "cuda", "cpu", "eval", "train", "half", "float", "double", "bfloat16", "requires_grad_")
# Uses of what holds a module that pass it no input (counted as seen, not as escapes);
# `forward` is one: those calls are resolved on their own.
# `word = ...`, `word: T = ...` (not `==`, not `+=`).
_ASSIGNED = r"\s*(?::[^=\n]*)?=(?!=)"
_HARMLESS = "|".join(_SAME_INSTANCE + ("parameters", "named_parameters", "buffers", "modules", "children",
                                       "state_dict", "load_state_dict", "zero_grad", "forward"))


class Site(NamedTuple):
    call: cst.Call
    stack: Tuple[cst.CSTNode, ...]  # the call's ancestors, the module first
    # The `functools.partial(fn, ...)` call the call goes through: its arguments are bound
    # first, evaluated where it was made.
    partial: Optional["Site"] = None


class _Index:
    """Every call of the module by the name it calls (`f(...)`, `x.m(...)`), and the names
    used otherwise (a callback, a stored reference: calls the index cannot see). A walk over
    the node fields, not a CSTVisitor: a visitor rebuilds every node it passes."""

    def __init__(self, module: cst.Module) -> None:
        self.by_name: Dict[str, List[Site]] = {}
        self.by_attr: Dict[str, List[Site]] = {}
        self.name_refs: Set[str] = set()
        self.attr_refs: Set[str] = set()
        self.nested_in: Dict[int, cst.FunctionDef] = {}  # id(nested def) -> enclosing def
        # Calls of a member and loops over a container (`self.layers[i](x)`, `for layer in
        # self.layers:`), by the container's last name.
        self.by_subscript: Dict[str, List[Site]] = {}
        self.loops: Dict[str, List[str]] = {}
        self._skip: Set[int] = set()
        self._path: List[cst.CSTNode] = []
        self._walk(module)

    def _walk(self, node: cst.CSTNode) -> None:
        kind = type(node)
        if kind in _NOT_INDEXED:
            return
        note = _NOTES.get(kind)
        if note is not None:
            note(self, node)
        path = self._path
        path.append(node)
        for child in _children(node):
            self._walk(child)
        path.pop()

    # What the walk notes at each kind of node (looked up by type: `isinstance` on LibCST's
    # node classes goes through ABCMeta, and the walk meets every node of the module).
    def _note_call(self, node: cst.Call) -> None:
        site = Site(node, tuple(self._path))
        func = node.func
        kind = type(func)
        if kind is cst.Name:
            self.by_name.setdefault(func.value, []).append(site)
            self._skip.add(id(func))
        elif kind is cst.Attribute:
            self.by_attr.setdefault(func.attr.value, []).append(site)
            self._skip.add(id(func))
        elif kind is cst.Subscript:
            word = _last_word(func.value)
            if word is not None:
                self.by_subscript.setdefault(word, []).append(site)

    def _note_for(self, node: cst.For) -> None:
        word = _last_word(node.iter)
        if word is not None and type(node.target) is cst.Name:
            self.loops.setdefault(word, []).append(node.target.value)

    def _note_def(self, node) -> None:
        self._skip.add(id(node.name))
        if type(node) is cst.FunctionDef:
            for outer in reversed(self._path):
                if type(outer) is cst.ClassDef:
                    break
                if type(outer) is cst.FunctionDef:
                    self.nested_in[id(node)] = outer
                    break

    def _note_arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._skip.add(id(node.keyword))

    def _note_attribute(self, node: cst.Attribute) -> None:
        self._skip.add(id(node.attr))
        if id(node) not in self._skip:
            self.attr_refs.add(node.attr.value)

    def _note_name(self, node: cst.Name) -> None:
        if id(node) not in self._skip:
            self.name_refs.add(node.value)


_NOT_INDEXED = frozenset((cst.Import, cst.ImportFrom, cst.Annotation))
_NOTES = {
    cst.Call: _Index._note_call, cst.For: _Index._note_for, cst.FunctionDef: _Index._note_def,
    cst.ClassDef: _Index._note_def, cst.Arg: _Index._note_arg, cst.Attribute: _Index._note_attribute,
    cst.Name: _Index._note_name,
}


def names_in(node: cst.CSTNode) -> Set[str]:
    """The names and attribute chains (`x`, `self.k`) an expression or statement reads or
    writes, nested functions and classes left out."""
    found: Set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) and n is not node:
            continue
        if isinstance(n, cst.Name):
            found.add(n.value)
            continue
        if isinstance(n, cst.Attribute):
            chain = _chain(n)
            if chain is not None:
                found.add(chain)  # `self.k`: the chain, not `self` and `k` apart
            else:
                stack.append(n.value)  # `f(x).y`: what the base reads
            continue
        stack.extend(_children(n))
    return found


def _single_target(node: cst.CSTNode, parent: Optional[cst.CSTNode]) -> Optional[cst.BaseExpression]:
    """The one target `parent` assigns `node` to (`x = node`, `x: T = node`), else None."""
    if not isinstance(parent, (cst.Assign, cst.AnnAssign)) or parent.value is not node:
        return None
    targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
    return targets[0] if len(targets) == 1 else None


def _last_word(node: cst.BaseExpression) -> Optional[str]:
    """`layers` of `self.layers` or `layers`; None for anything else."""
    node = strip_parens(node)
    if isinstance(node, cst.Attribute):
        return node.attr.value
    if isinstance(node, cst.Name):
        return node.value
    return None


def _chain(node: cst.BaseExpression) -> Optional[str]:
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def parameter_dependents(fn: cst.FunctionDef, method: bool = False) -> Set[str]:
    """The parameters of `fn` and the names its body assigns from them, transitively
    (`q = p * 2`, `for row in p:`, `x.add_(p)`): a value that may hold what a caller passed.
    A method's `self` is the instance, not a value a call passes."""
    p = fn.params
    params = [q.name.value for q in list(p.posonly_params) + list(p.params) + list(p.kwonly_params)]
    if method and params:
        params = params[1:]
    if isinstance(p.star_arg, cst.Param):
        params.append(p.star_arg.name.value)
    if p.star_kwarg is not None:
        params.append(p.star_kwarg.name.value)
    flows: List[Tuple[Set[str], Set[str]]] = []  # (targets, sources)
    stack: List[cst.CSTNode] = [fn.body]
    while stack:
        n = stack.pop()
        if isinstance(n, (cst.FunctionDef, cst.ClassDef)):
            continue
        if isinstance(n, cst.Assign):
            flows.append((set().union(*(names_in(t.target) for t in n.targets)), names_in(n.value)))
        elif isinstance(n, (cst.AugAssign, cst.AnnAssign)) and n.value is not None:
            flows.append((names_in(n.target), names_in(n.value) | names_in(n.target)))
        elif isinstance(n, (cst.For, cst.CompFor)):
            flows.append((names_in(n.target), names_in(n.iter)))
        elif isinstance(n, cst.WithItem) and n.asname is not None:
            flows.append((names_in(n.asname.name), names_in(n.item)))
        elif isinstance(n, cst.NamedExpr):
            flows.append((names_in(n.target), names_in(n.value)))
        elif isinstance(n, cst.Expr) and isinstance(n.value, cst.Call) and isinstance(n.value.func, cst.Attribute):
            receiver = _chain(n.value.func.value)
            if receiver is not None:  # `x.add_(p)`, `xs.append(p)`
                flows.append(({receiver}, set().union(set(), *(names_in(a.value) for a in n.value.args))))
        stack.extend(_children(n))
    found = set(params)
    changed = True
    while changed:
        changed = False
        for targets, sources in flows:
            if not targets <= found and _touches(sources, found):
                found |= targets
                changed = True
    return found


def _touches(names: Set[str], dependents: Set[str]) -> bool:
    """Some name reads a dependent: itself, or an attribute of one (`p.shape`, `self.x.y`)."""
    for name in names:
        if name in dependents:
            return True
        parts = name.split(".")
        if any(".".join(parts[:i]) in dependents for i in range(1, len(parts))):
            return True
    return False


def depends_on_parameters(fn: cst.FunctionDef, expr: cst.BaseExpression, memo: Dict[int, Set[str]],
                          method: bool = False) -> bool:
    key = id(fn)
    if key not in memo:
        memo[key] = parameter_dependents(fn, method)
    return _touches(names_in(expr), memo[key])


def _is_script(fa) -> bool:
    """A file nobody imports functions from: it runs as `__main__`, or it is not in a package."""
    for stmt in fa.ctx.module.body:
        if isinstance(stmt, cst.If) and "__name__" in fa.ctx.code(stmt.test) and "__main__" in fa.ctx.code(stmt.test):
            return True
    try:
        return not (Path(fa.ctx.path).parent / "__init__.py").is_file()
    except (OSError, ValueError):
        return True


def _enclosing_class(site: Site) -> Optional[str]:
    return next((n.name.value for n in reversed(site.stack) if isinstance(n, cst.ClassDef)), None)


def _once(memo: Dict[int, Any], pending: Set[int], key: int, compute: Callable[[], Any]) -> Any:
    """`compute()` memoized under `key`; None for a key whose computation is under way (a
    recursive call: the unknown answer stands for it)."""
    if key in memo:
        return memo[key]
    if key in pending:
        return None
    pending.add(key)
    try:
        found = compute()
    finally:
        pending.discard(key)
    memo[key] = found
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


class CallSites:
    """Entries of parameters from the calls of one file (see the module docstring)."""

    def __init__(self, fa) -> None:
        self.fa = fa
        self._index: Optional[_Index] = None
        self._script: Optional[bool] = None
        self._entries: Dict[int, Optional[Dict[str, Value]]] = {}
        self._words: Dict[str, int] = {}
        self.computing: Set[int] = set()
        self._grad_free: Dict[int, Optional[Evidence]] = {}
        self._grad_pending: Set[int] = set()

    @property
    def index(self) -> _Index:
        if self._index is None:
            self._index = _Index(self.fa.ctx.module)
        return self._index

    @property
    def script(self) -> bool:
        if self._script is None:
            self._script = _is_script(self.fa)
        return self._script

    # ------------------------------------------------------------------ entries
    def entry(self, fn: cst.FunctionDef, plain: Dict[str, Value]) -> Optional[Dict[str, Value]]:
        """The entry value of each parameter of `fn` from the file's calls, or None where the
        calls tell nothing (no call, too many, a class's own `__call__`). `plain` holds what a parameter is
        without call sites (unknown; an `eps` is positive): an untrusted join keeps it."""
        return _once(self._entries, self.computing, id(fn), lambda: self._entry(fn, plain))

    def _entry(self, fn: cst.FunctionDef, plain: Dict[str, Value]) -> Optional[Dict[str, Value]]:
        fa = self.fa
        cls = fa.owner.get(id(fn))
        name = fn.name.value
        if cls is not None and name == "__call__":
            return None
        if cls is not None and name == "forward" and fa.method(cls, "__call__") is not None:
            return None  # `inst(x)` runs the class's own `__call__`, not this
        decorators = self._plain_decorators(fn)
        if decorators is None:
            return None
        params = self._params(fn, cls, decorators)
        if params is None:
            return None
        probing = fa.probing
        settings: Dict[str, Value] = {}
        if cls is not None and name == "forward":
            found_fwd = self._forward_calls(fn, cls, params)
            if found_fwd is None:
                return None
            bound, resolved_all = found_fwd
            if not bound:
                return None  # no call the file makes: callers elsewhere (a training loop)
            via_self_only = False
        else:
            found = self._sites(fn, cls, name)
            if found is None:
                return None
            sites, resolved_all, via_self_only = found
            if cls is not None and name == "__init__":
                settings = self._settings(params)
            if not sites and not probing and not settings:
                return None
            bound = [self._bind(site, params) for site in sites]
        # Probes trust the file's calls where the index sees them all (a function passed as
        # a value is called where the index cannot see with what).
        trusted = resolved_all and (probing or self._may_trust(fn, cls, name, via_self_only))
        joined: Dict[str, Optional[Value]] = {}
        for p in params:
            pname = p.name.value
            # The calls that make a hazard last: their evidence is the one a message cites.
            values = sorted((b.get(pname, TOP) for b in bound), key=lambda v: (v.zero is not None, bool(v.prob)))
            joined[pname] = None
            for v in values:
                joined[pname] = join(joined[pname], v)
        if not bound:  # probing: the defaults are what the code runs with
            for p in params:
                joined[p.name.value] = self._default(p) if p.default is not None else TOP
        out: Dict[str, Value] = {}
        for pname, v in joined.items():
            before = plain.get(pname, TOP)
            if pname in settings:
                # What the file's constructions pass (the default where they leave it out),
                # else the default: the setting the class runs with. A construction from a
                # config or in another file is not seen; the default is its normal use.
                v = v if bound and v is not None else settings[pname]
            elif v is None or replace(v, evidence=()) == TOP:
                v = before  # the calls tell nothing: what the parameter is without them
            elif not trusted:
                v = join(before, v) or TOP
            out[pname] = v
        if all(out[k] == plain.get(k, TOP) for k in out):
            return None
        return out

    def _plain_decorators(self, fn: cst.FunctionDef) -> Optional[List[str]]:
        """`fn`'s decorators as written, or None where one may wrap it (the calls the index
        sees would then not be calls of `fn` as written)."""
        decorators = [self.fa.ctx.code(d.decorator) for d in fn.decorators]
        if any(not (d in _KEEPS_SIGNATURE or d.startswith("torch.")) for d in decorators):
            return None
        return decorators

    def _params(self, fn: cst.FunctionDef, cls: Optional[str], decorators: List[str]) -> Optional[List[cst.Param]]:
        """The parameters a call binds, in order (`self` / `cls` left out)."""
        p = fn.params
        every = list(p.posonly_params) + list(p.params)
        if cls is not None and "staticmethod" not in decorators:
            if not every:
                return None
            every = every[1:]
        return every + list(p.kwonly_params)

    def _may_trust(self, fn: cst.FunctionDef, cls: Optional[str], name: str, via_self_only: bool) -> bool:
        if self.script or id(fn) in self.index.nested_in:
            return True
        if cls is not None:
            if _private(cls):
                return True
            if name == "__init__":
                return False
            return _private(name) or via_self_only
        return _private(name)

    def _mentions(self, word: str) -> int:
        found = self._words.get(word)
        if found is None:
            found = self._words[word] = len(re.findall(r"(?<![\w.])" + re.escape(word) + r"\b", self.fa.ctx.source)) \
                + len(re.findall(r"\." + re.escape(word) + r"\b", self.fa.ctx.source))
        return found

    def _sites(self, fn: cst.FunctionDef, cls: Optional[str], name: str):
        """(sites, every candidate resolved and nothing else refers to it, all via self), or
        None where there are too many candidates."""
        # Named nowhere but in its own definition: no call, no reference (the index, a walk
        # of the whole module, is not built for it).
        if self._mentions(cls if name == "__init__" and cls is not None else name) <= 1:
            return [], True, False
        index = self.index
        fa = self.fa
        sites: List[Site] = []
        resolved = True
        via_self = True
        if cls is None:
            outer = index.nested_in.get(id(fn))
            candidates = index.by_name.get(name, [])
            if len(candidates) > MAX_SITES:
                return None
            for site in candidates:
                if outer is not None and not any(n is outer for n in site.stack):
                    continue
                sites.append(site)
            if name in index.name_refs:
                through = self._partial_calls(name, outer, len(candidates))
                if through is None:
                    resolved = False
                else:
                    sites.extend(through)
            return sites, resolved, False
        if name == "__init__":
            owners = [c for c in fa.classes if fa.method(c, "__init__") is fn]
            candidates = [s for c in owners for s in index.by_name.get(c, [])]
            for site in index.by_attr.get("__init__", []):
                # `super().__init__(...)` in a subclass calls this one; in the class itself
                # (or an unrelated one) it calls another `__init__`.
                here = _enclosing_class(site)
                receiver = site.call.func.value  # type: ignore[attr-defined]
                is_super = isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Name) \
                    and receiver.func.value == "super"
                if not is_super:
                    resolved = False
                elif here is not None and here != cls and self._inherits(here, cls):
                    candidates.append(site)
            if len(candidates) > MAX_SITES:
                return None
            if any(c in index.name_refs for c in owners):
                resolved = False
            return candidates, resolved, False
        candidates = index.by_attr.get(name, [])
        if len(candidates) > MAX_SITES:
            return None
        if name in index.attr_refs:
            resolved = False
        for site in candidates:
            receiver = site.call.func.value  # type: ignore[attr-defined]
            if isinstance(receiver, cst.Name) and receiver.value == "self":
                here = _enclosing_class(site)
                if here is not None and (fa.method(here, name) is fn or self._inherits(cls, here)):
                    sites.append(site)
                continue
            owner = self._receiver_class(site)
            if owner is None:
                resolved = False  # it may be this method, called with anything
            elif fa.method(owner, name) is fn:
                sites.append(site)
                via_self = False
        return sites, resolved, via_self and bool(sites)

    def _partial_calls(self, name: str, outer: Optional[cst.FunctionDef], direct: int) -> Optional[List[Site]]:
        """The calls of function `name` made through `functools.partial(name, ...)` bound to a
        local or an attribute (`self.weigh = partial(_squash, gain=g)`, then
        `self.weigh(self.ratio)`), each with the partial's arguments bound first; None where
        the name or such a holder is used any other way (passed on, stored elsewhere)."""
        index = self.index
        ctx = self.fa.ctx
        made = [site for site in index.by_name.get("partial", []) + index.by_attr.get("partial", [])
                if ctx.qualname(site.call.func) == "functools.partial" and site.call.args
                and isinstance(site.call.args[0].value, cst.Name) and site.call.args[0].value.value == name
                and site.call.args[0].keyword is None and not site.call.args[0].star]
        if not made or self._mentions(name) != 1 + direct + len(made):
            return None
        sites: List[Site] = []
        for site in made:
            if outer is not None and not any(n is outer for n in site.stack):
                return None
            target = _single_target(site.call, site.stack[-1] if site.stack else None)
            if isinstance(target, cst.Name):
                word = target.value
                calls = index.by_name.get(word, [])
                mentions = self._mentions(word)
            elif isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) \
                    and target.value.value == "self":
                # `self.weigh`: called only through `self` in the class that made it.
                owner = next((n for n in reversed(site.stack) if isinstance(n, cst.ClassDef)), None)
                if owner is None:
                    return None
                word = target.attr.value
                calls = [c for c in index.by_attr.get(word, []) if any(n is owner for n in c.stack)
                         and isinstance(c.call.func.value, cst.Name) and c.call.func.value.value == "self"]  # type: ignore[attr-defined]
                mentions = self._mentions(word)  # anywhere: `model.weigh` may call it with anything
            else:
                return None
            if mentions != 1 + len(calls):
                return None  # the holder is passed on, or assigned more than once
            sites.extend(Site(c.call, c.stack, site) for c in calls)
        return sites if len(sites) <= MAX_SITES else None

    # ------------------------------------------------------------------ autograd
    def only_without_autograd(self, fn: cst.FunctionDef, depth: int = 3) -> Optional[Evidence]:
        """Evidence that `fn` only ever runs where autograd is off: the file's calls are all
        its calls (the trust rule above), there is at least one besides its own recursive
        calls, and each is inside a no-grad region or in a function that itself only runs
        there (`_kmeans(x)` called from a `@torch.no_grad()` initializer, a helper of a custom
        `autograd.Function`'s `forward`). None otherwise, or past `depth` callers."""
        if depth <= 0:
            return None
        return _once(self._grad_free, self._grad_pending, id(fn), lambda: self._only_without_autograd(fn, depth))

    def _only_without_autograd(self, fn: cst.FunctionDef, depth: int) -> Optional[Evidence]:
        fa = self.fa
        cls = fa.owner.get(id(fn))
        name = fn.name.value
        if cls is not None and name in ("forward", "__call__", "__init__"):
            return None  # run through instances and constructors the index does not list
        if self._plain_decorators(fn) is None:
            return None
        found = self._sites(fn, cls, name)
        if found is None:
            return None
        sites, resolved_all, via_self_only = found
        if not sites or not resolved_all or not self._may_trust(fn, cls, name, via_self_only):
            return None
        first: Optional[Evidence] = None
        for site in sites:
            caller = next((n for n in reversed(site.stack) if isinstance(n, cst.FunctionDef)), None)
            if caller is fn:
                continue  # a recursive call runs wherever the outer call does
            region = fa.env_at(site.stack + (site.call,), seeded=False).nograd
            if region is None and caller is not None:
                region = fa.construction(caller, site.stack)
            if region is None:
                inner = self.only_without_autograd(caller, depth - 1) if caller is not None else None
                if inner is None:
                    return None
                region = Evidence(inner.line, f"from `{caller.name.value}`; {inner.reason}")
            first = first or region
        if first is None:
            return None  # only recursive calls
        return Evidence(first.line, f"`{name}` is only called {first.reason}")

    # ------------------------------------------------------------------ forward
    def _forward_calls(self, fn: cst.FunctionDef, cls: str, params: List[cst.Param]):
        """(the bound arguments of every call the file makes to `fn`, the `forward` of an
        nn.Module, and whether every one was resolved), or None where there are too many.

        `forward` runs when an instance is called: `Cls(...)(x)`, `self.head = Head()` then
        `self.head(x)`, `model = Policy(); model(obs)`, `inst.forward(x)`, `super().forward(x)`
        in a subclass, a member of `self.blocks = nn.ModuleList([...])` called as
        `self.blocks[i](x)` or in `for block in self.blocks:`, and a member of
        `nn.Sequential(a, Cls(), ...)`, whose input is the previous member's output. The
        instances are found from where the class (or an in-file subclass that keeps this
        `forward`) is built, and each call through what holds one is evaluated to check it
        calls this class. Anything else the file does with the class or a holder (built in a
        plain list, passed to a function, `isinstance`, a first Sequential member, a list
        appended to) leaves the calls unresolved: then the join may raise a hazard but never
        makes a value safer."""
        fa = self.fa
        owners = [c for c in fa.classes if (c == cls or self._inherits(c, cls)) and fa.method(c, "forward") is fn
                  and (c == cls or fa.method(c, "__call__") is None)]
        if all(self._mentions(c) <= 1 for c in owners):
            return [], True  # built nowhere in the file
        index = self.index
        resolved = True
        bound: List[Dict[str, Value]] = []
        candidates: List[Site] = []
        by_name: Set[str] = set()  # names assigned an instance (`model = Policy()`)
        by_attr: Set[str] = set()  # attributes assigned one: `self.head = Head()` -> "head"
        by_member: Set[str] = set()  # `self.layers = nn.ModuleList([Block() ...])` -> "layers"
        for c in owners:
            made = index.by_name.get(c, [])
            if len(made) > MAX_SITES:
                return None
            bases = sum(1 for node in fa.classes.values() for b in node.bases
                        if isinstance(b.value, cst.Name) and b.value.value == c)
            if self._mentions(c) > 1 + len(made) + bases:
                resolved = False  # a factory argument, `isinstance`, an annotation, a string
            for site in made:
                node, stack = site.call, site.stack
                # `Policy(...).to(device)`: still the instance.
                while len(stack) >= 2 and isinstance(stack[-1], cst.Attribute) and stack[-1].value is node \
                        and stack[-1].attr.value in _SAME_INSTANCE and isinstance(stack[-2], cst.Call) \
                        and stack[-2].func is stack[-1]:
                    node, stack = stack[-2], stack[:-2]
                parent = stack[-1] if stack else None
                if isinstance(parent, cst.Call) and parent.func is node:
                    candidates.append(Site(parent, stack[:-1]))  # `Gate()(x)`
                elif isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is node:
                    target = _single_target(node, parent)
                    if isinstance(target, cst.Name):
                        by_name.add(target.value)
                    elif isinstance(target, cst.Attribute):
                        by_attr.add(target.attr.value)
                    else:
                        resolved = False
                elif isinstance(parent, (cst.Element, cst.ListComp)):
                    held = self._module_list(node, stack)
                    word = self._holder(*held) if held is not None else None
                    if word is None:
                        resolved = False
                    else:
                        by_member.add(word)
                elif isinstance(parent, cst.Arg) and len(stack) >= 2 and isinstance(stack[-2], cst.Call) \
                        and fa.ctx.qualname(stack[-2].func) == "torch.nn.Sequential":
                    found = self._sequential_input(stack[-2], stack[:-2], parent, params)
                    if found is None:
                        resolved = False  # the first member: its input is the Sequential's
                    else:
                        bound.append(found)
                else:
                    resolved = False
        # A holder's mentions that pass the instance nowhere: calls through it (evaluated
        # below), harmless methods, and assignments to it (they replace what it holds; an
        # instance assigned there was built somewhere, and that place is checked above).
        source = fa.ctx.source

        def harmless(word: str, before: str, assigned_before: str) -> int:
            """Mentions of holder `word` that pass its module nowhere: a harmless method
            (`.to()`, `.parameters()`) after `before`, an assignment to it after `assigned_before`."""
            w = re.escape(word)
            return len(re.findall(before + w + r"\.(?:" + _HARMLESS + r")\b", source)) \
                + len(re.findall(assigned_before + w + _ASSIGNED, source))

        for word in sorted(by_name):
            calls = index.by_name.get(word, [])
            uses = harmless(word, r"(?<![\w.])", r"(?<![\w.])")
            if self._mentions(word) > len(calls) + uses:
                resolved = False  # passed on, stored, compiled: called where the index cannot see
            candidates.extend(calls)
        for word in sorted(by_attr):
            calls = index.by_attr.get(word, [])
            uses = harmless(word, r"\.", r"\.")
            if self._mentions(word) > len(calls) + uses:
                resolved = False
            candidates.extend(calls)
        for word in sorted(by_member):
            # `self.layers[i](x)`, `for layer in self.layers: x = layer(x)`, `len(self.layers)`.
            calls = list(index.by_subscript.get(word, []))
            loops = index.loops.get(word, [])
            for target in dict.fromkeys(loops):
                calls.extend(index.by_name.get(target, []))
            uses = harmless(word, r"\.", r"(?<![\w])") \
                + len(re.findall(r"\blen\(\s*(?:self\.)?" + re.escape(word) + r"\s*\)", source))
            if self._mentions(word) > len(index.by_subscript.get(word, [])) + len(loops) + uses:
                resolved = False  # appended to, passed on, iterated some other way
            candidates.extend(calls)
        explicit = index.by_attr.get("forward", [])
        if len(candidates) + len(bound) > MAX_SITES:
            return None
        if len(explicit) > MAX_SITES:
            # `.forward(...)` on many receivers (an encoder's, a base class's): not evaluated
            # one by one; any may be this one.
            explicit, resolved = [], False
        for site in candidates:
            env = self._env(site)
            if env is None:
                bound.append({})  # inside a function whose entry is being computed
                continue
            func = strip_parens(site.call.func)
            if isinstance(func, cst.Attribute):
                receiver = fa.eval(func.value, env)
                if receiver.instance_of and receiver.module_out is None \
                        and fa.method(receiver.instance_of, func.attr.value) is not None:
                    continue  # a method of that name (`self.gate(x)` with `def gate`)
            callee = fa.eval(func, env)
            if callee.instance_of in owners and callee.module_out is None:
                bound.append(self._bind(site, params))
            elif callee.instance_of is None and callee.module_out is None and callee.members is None:
                resolved = False  # unknown: it may be an instance of the class
        for site in explicit:
            receiver = strip_parens(site.call.func.value)  # type: ignore[attr-defined]
            if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Name) and receiver.func.value == "super":
                here = _enclosing_class(site)
                base = self._base(here) if here is not None else None
                if base is not None and fa.method(base, "forward") is fn:
                    bound.append(self._bind(site, params))
                continue
            env = self._env(site)
            if env is None:
                continue
            v = fa.eval(receiver, env)
            if v.instance_of in owners and v.module_out is None:
                bound.append(self._bind(site, params))
            elif v.instance_of is None and v.module_out is None and v.members is None:
                resolved = False
        if len(bound) > MAX_SITES:
            return None
        return bound, resolved

    def _module_list(self, node: cst.Call, stack: Tuple[cst.CSTNode, ...]):
        """(the `nn.ModuleList(...)` call, its ancestors) where `node` is written as one of its
        members (`[Block(), ...]`, `[Block() for _ in range(n)]`), else None."""
        fa = self.fa
        parent = stack[-1] if stack else None
        if isinstance(parent, cst.Element) and parent.value is node and len(stack) >= 4 \
                and isinstance(stack[-2], (cst.List, cst.Tuple)):
            arg_at = -3
        elif isinstance(parent, cst.ListComp) and parent.elt is node and len(stack) >= 3:
            arg_at = -2
        else:
            return None
        arg, call = stack[arg_at], stack[arg_at - 1]
        if isinstance(arg, cst.Arg) and isinstance(call, cst.Call) and arg.keyword is None and not arg.star \
                and fa.ctx.qualname(call.func) == "torch.nn.ModuleList":
            return call, stack[:arg_at - 1]
        return None

    def _holder(self, node: cst.Call, stack: Tuple[cst.CSTNode, ...]) -> Optional[str]:
        """The name or attribute `node` is assigned to (`self.layers = node`), else None."""
        target = _single_target(node, stack[-1] if stack else None)
        return _last_word(target) if isinstance(target, (cst.Name, cst.Attribute)) else None

    def _sequential_input(self, seq: cst.Call, stack: Tuple[cst.CSTNode, ...], arg: cst.Arg,
                          params: List[cst.Param]) -> Optional[Dict[str, Value]]:
        """A member of `nn.Sequential(prev, Cls(), ...)` takes `prev`'s output; None for the
        first member (its input is what the Sequential is called with)."""
        fa = self.fa
        position = next((i for i, a in enumerate(seq.args) if a is arg), 0)
        if position == 0 or arg.star or seq.args[position - 1].star or arg.keyword is not None or not params:
            return None
        env = self._env(Site(seq, stack))
        if env is None:
            return {}
        prev = fa.eval(seq.args[position - 1].value, env)
        if prev.module_out is not None:
            out = prev.module_out
        elif prev.instance_of and prev.members is None:
            previous = fa.method(prev.instance_of, "forward")
            out = fa.function_return(previous) if previous is not None and id(previous) not in self.computing else TOP
        else:
            out = TOP
        first = params[0].name.value
        bound = {first: out.with_evidence(fa.token(seq.args[position - 1]), f"the previous member's output, passed as `{first}`")}
        for p in params[1:]:
            if p.default is not None:
                bound[p.name.value] = self._default(p)
        return bound

    def _base(self, cls: str) -> Optional[str]:
        """The first base of `cls` that is a class of the file, else None."""
        node = self.fa.classes.get(cls)
        if node is not None:
            for b in node.bases:
                if isinstance(b.value, cst.Name) and b.value.value in self.fa.classes:
                    return b.value.value
        return None

    def _inherits(self, cls: str, base: str) -> bool:
        """`cls` is `base` or an in-file subclass of it (`self.m()` in the base dispatches to
        the subclass's `m`)."""
        seen = 0
        while cls is not None and seen < 8:
            if cls == base:
                return True
            cls, seen = self._base(cls), seen + 1
        return False

    def _receiver_class(self, site: Site) -> Optional[str]:
        env = self._env(site)
        if env is None:
            return None
        return self.fa.eval(site.call.func.value, env).instance_of  # type: ignore[attr-defined]

    def _env(self, site: Site):
        """The caller's environment at the call; None inside a function whose entry is being
        computed (recursion: the unknown value stands for it)."""
        fa = self.fa
        caller = next((n for n in reversed(site.stack) if isinstance(n, cst.FunctionDef)), None)
        if caller is not None and id(caller) in self.computing:
            return None
        return fa.env_at(site.stack + (site.call,))

    def _bind(self, site: Site, params: List[cst.Param]) -> Dict[str, Value]:
        fa = self.fa
        env = self._env(site)
        # Through `partial(fn, a, k=b)`: a and b are bound first, as they were where it was made.
        made = site.partial
        made_env = self._env(made) if made is not None else None
        split = split_args(site.call.args)
        first = split_args(made.call.args[1:]) if made is not None else ([], {})
        if env is None or split is None or first is None or (made is not None and made_env is None):
            return {}
        line = fa.token(site.call)
        out: Dict[str, Value] = {}
        names = [p.name.value for p in params]
        positional = [(arg, made_env) for arg in first[0]] + [(arg, env) for arg in split[0]]
        keywords = {**{k: (arg, made_env) for k, arg in first[1].items()},
                    **{k: (arg, env) for k, arg in split[1].items()}}
        for i, (arg, where) in enumerate(positional):
            if i < len(names):
                out[names[i]] = fa.eval(arg, where)
        for key, (arg, where) in keywords.items():
            if key in names:
                out[key] = fa.eval(arg, where)
        for pname in list(out):
            out[pname] = out[pname].with_evidence(line, f"passed as `{pname}`")
        for p in params:
            if p.name.value not in out and p.default is not None:
                out[p.name.value] = self._default(p)
        return out

    def _settings(self, params: List[cst.Param]) -> Dict[str, Value]:
        """A constructor's numeric settings (`k=50`, `eps=1e-6`), by parameter: what an
        instance runs with unless a construction passes another value (none for the enforced
        analysis: a setting is not a guard)."""
        if self.fa.enforced:
            return {}
        return {p.name.value: self._default(p) for p in params
                if p.default is not None and number_value(p.default) is not None}

    def _default(self, p: cst.Param) -> Value:
        fa = self.fa
        if fa.enforced:
            return TOP  # a default is what runs unless someone passes another value
        v = fa.eval(p.default, fa.ensure_module())
        return v.with_evidence(fa.token(p), f"default `{p.name.value}={fa.ctx.code(p.default)}`")


__all__ = ["CallSites", "MAX_SITES", "Site", "depends_on_parameters", "parameter_dependents", "names_in"]
