"""Flow of abstract values through a file's statements.

`FileAnalysis` interprets each function body (and the module's top level) once, in statement
order, when a rule first asks about a value in it: assignments (tuple unpacking, `self.x`,
augmented), in-place tensor methods and masked assignments (`x.clamp_(min=eps)`,
`t[t > 20] = 20`, `x[x == 0] = eps`), `if/elif/else` with the condition refining each branch
and a join after, early `return/continue/break/raise` (what follows sees the other branch),
`assert`, loops to a fixed point (widening after two passes), `try`, `with` (autocast
regions). It records the environment before every statement, so a rule at any node gets the
value of an expression as it is there.

Calls inside the file are followed through summaries: a function's or method's return value
(`self.probs(x)`, `helper(x)`), `Cls(...)(x)` and `self.attr(x)` to `forward`, modules held in
attributes (`self.act = nn.Softmax(dim=1)`, an `nn.Sequential` ending in one), the members
of an `nn.ModuleList` / `nn.ModuleDict` (`for layer in self.layers:`, `self.heads["policy"](h)`),
and the elements of a returned tuple (`probs, logits = self(obs)`, `head(x)[0]`).

Facts that need two expressions at once are kept on the value: a maximum remembers the tensor
it is the maximum of (`max_of`), so `x - m` with `m = x.max(-1, keepdim=True).values` is <= 0
wherever it is computed, a helper included.

Parameters take their entry values from the file's own calls (callsites.py): `__init__` in its
one run (nothing calls it back through a return), any other function in a second, "seeded"
run made only when a rule asks about a value inside it; that run overwrites the function's
recorded environments and leaves the return summary (parameters unknown) as it was, so a
caller's summary never waits on its callee's callers.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

import libcst as cst

from ..core.bounds import parse_module
from ..core.context import FileContext, descendants, dotted_name, last_name, names_bound_inside, strip_parens as _strip
from ..core.ops import FINFO_FUNCTIONS, match_op, number_value, split_args
from . import imports, transfer
from .values import INF, TOP, UNIFORM_ZERO, Evidence, Value, bag, cited, interval, is_bag, join, point, unknown, widen
from .precision import Precision

Rel = Tuple[str, str, str]


bare = strip_parens = _strip  # a tuple's or generator's parentheses are kept: part of the value

_FLIP = {">": "<", "<": ">", ">=": "<=", "<=": ">=", "==": "==", "!=": "!="}
_NEGATE = {">": "<=", "<": ">=", ">=": "<", "<=": ">", "==": "!=", "!=": "=="}
_CMP = {
    cst.GreaterThan: ">", cst.LessThan: "<", cst.GreaterThanEqual: ">=",
    cst.LessThanEqual: "<=", cst.Equal: "==", cst.NotEqual: "!=",
}
_IN_PLACE = {
    "clamp_": "clamp", "clip_": "clamp", "clamp_min_": "clamp_min", "clamp_max_": "clamp_max", "add_": "add",
    "mul_": "mul", "div_": "div", "sub_": "sub", "exp_": "exp", "relu_": "relu",
    "sigmoid_": "sigmoid", "abs_": "abs", "sqrt_": "sqrt", "pow_": "pow", "log_": "log",
    "softmax_": "softmax", "neg_": "neg",
}
_MODULE_OPS = {
    "torch.nn.Softmax": "softmax", "torch.nn.Softmin": "softmax", "torch.nn.Sigmoid": "sigmoid",
    "torch.nn.ReLU": "relu", "torch.nn.Tanh": "tanh", "torch.nn.Softplus": "softplus",
    "torch.nn.CosineSimilarity": "cosine_similarity",
}
_LEARNED_MODULES = {
    "torch.nn.Linear", "torch.nn.Embedding", "torch.nn.Conv1d", "torch.nn.Conv2d",
    "torch.nn.Conv3d", "torch.nn.Bilinear", "torch.nn.LazyLinear",
}
_CONTAINERS = {"torch.nn.Sequential"}
# Ops that put tensors side by side: each element of the result comes from one of them.
_JOINING = {"torch.cat", "torch.concat", "torch.concatenate", "torch.stack", "torch.vstack",
            "torch.hstack", "torch.dstack", "torch.row_stack", "torch.column_stack"}
_MODULE_LISTS = {"torch.nn.ModuleList", "torch.nn.ModuleDict"}
# Distributions whose `.probs` the analysis follows, and the function of their `logits=`.
_DISTRIBUTIONS = {
    **{f"torch.distributions.{m}{name}": "softmax" for m in ("", "categorical.") for name in ("Categorical",)},
    **{f"torch.distributions.{m}{name}": "softmax" for m in ("", "one_hot_categorical.") for name in ("OneHotCategorical",)},
    **{f"torch.distributions.{m}{name}": "sigmoid" for m in ("", "bernoulli.") for name in ("Bernoulli",)},
}
# Methods that change what a ModuleList / ModuleDict holds.
_MEMBER_UPDATES = {"append", "extend", "insert", "update", "pop", "clear"}
_CREATION_PREFIX = "torch."
# Context managers and decorators that turn autograd off, back on, or either by a flag.
_NO_GRAD = {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad"}
_ENABLE_GRAD = {"torch.enable_grad", "torch.autograd.enable_grad"}
_SET_GRAD_ENABLED = {"torch.set_grad_enabled", "torch.autograd.set_grad_enabled"}
# Builtins whose result is a plain Python number: autograd does not see it.
_PYTHON_NUMBERS = {"len", "int", "float", "round", "bool", "range"}
_ARRAY_LIBRARIES = {"numpy", "scipy"}
# Reductions whose result is at least every entry along their dim: `x - max(x)` is <= 0.
_SHIFTS = {"max", "amax", "logsumexp"}
# Euclidean norms (`p=2`, the default): `x / <norm of x>` is a unit vector.
_NORMS = {"norm", "linalg_norm", "vector_norm"}
# Calls that compute dot products (products of two tensors summed along a dim).
_DOT_CALLS = {"torch.einsum", "torch.dot", "torch.inner", "torch.vdot", "torch.linalg.vecdot"}
_DIM_OPS = {"softmax", "sum", "max"}
_EPS_WORDS = ("eps", "epsilon", "tiny")


def trained(v: Value) -> Value:
    """A tensor training moves: its initializer's range says nothing about later values."""
    return replace(v, lo=-INF, hi=INF, zero=None, nonzero=False, prob=None, form=None, simplex_dim=None,
                   mask=False, count=False, trainable=True, learned=True, nograd=None)


def _boolean(token: int) -> Value:
    """A comparison or a boolean mask: 0/1 values that take no gradient."""
    return Value(lo=0.0, hi=1.0, mask=True, integer=True, nograd=Evidence(token, "a comparison"))


# Helpers (in every speech and NLP code base) that make a mask True at the valid positions of
# each sequence from its length; `make_pad_mask` and `*_to_padding_mask` are True at the pads.
_LENGTH_MASK_HELPERS = re.compile(r"^(?:lengths?|lens?|seq_lens?|sequence)_to_mask$|^sequence_mask$|^make_non_pad_mask$")
# Methods that keep a position index a position index (`torch.arange(T)[None, :].to(dev)`).
_INDEX_KEEPING = {"unsqueeze", "expand", "expand_as", "to", "view", "reshape", "repeat", "type_as",
                  "long", "int", "cuda", "float", "contiguous"}


def _length_mask(token: int, reason: str) -> Value:
    """A mask of the valid positions of sequences: every row keeps its first position, since a
    real sequence has at least one element (the standard counts such a mask as non-empty)."""
    return _boolean(token).with_evidence(token, reason, nonempty=True)


class Env:
    """Values of names (`x`, `self.x`) and known relations between expressions."""

    __slots__ = ("vars", "rels", "autocast", "nograd")

    def __init__(self, vars=None, rels: FrozenSet[Rel] = frozenset(), autocast: bool = False,
                 nograd: Optional[Evidence] = None):
        self.vars: Dict[str, Value] = dict(vars or {})
        self.rels = rels
        self.autocast = autocast
        # Autograd is off here (a `no_grad` block or decorator, a custom Function, an
        # optimizer's step), and why.
        self.nograd = nograd

    def copy(self) -> "Env":
        return Env(self.vars, self.rels, self.autocast, self.nograd)

    def __eq__(self, other) -> bool:
        return isinstance(other, Env) and self.vars == other.vars and self.rels == other.rels


def join_env(a: Optional[Env], b: Optional[Env], widening: bool = False) -> Optional[Env]:
    if a is None:
        return b.copy() if b is not None else None
    if b is None:
        return a.copy()
    out = Env(rels=a.rels & b.rels, autocast=a.autocast and b.autocast,
              nograd=a.nograd if a.nograd and b.nograd else None)
    for key in a.vars.keys() | b.vars.keys():
        va, vb = a.vars.get(key), b.vars.get(key)
        if va is None or vb is None:
            out.vars[key] = TOP  # bound on one path only
        elif widening:
            out.vars[key] = widen(va, vb)
        else:
            out.vars[key] = join(va, vb)  # type: ignore[assignment]
    return out


def _annotation_spelled(annotation: cst.Annotation) -> Optional[str]:
    """The dotted name an annotation writes (`Classifier`, `"nets.Actor"`), or None."""
    written = annotation.annotation
    if isinstance(written, cst.SimpleString):
        return written.evaluated_value if isinstance(written.evaluated_value, str) else None
    return dotted_name(written)


def _undetached(node: cst.BaseExpression) -> cst.BaseExpression:
    """`x` for `x.detach()` / `x.data` (the same values: a max taken on them shifts `x`)."""
    node = strip_parens(node)
    while True:
        if isinstance(node, cst.Attribute) and node.attr.value == "data":
            node = strip_parens(node.value)
        elif isinstance(node, cst.Call) and not node.args and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value == "detach":
            node = strip_parens(node.func.value)
        else:
            return node


# `torch.finfo(dtype).<attr>`: (lo, hi) over the float dtypes (float16 up to float64).
_FINFO_RANGES = {
    "tiny": (2.2e-308, 6.2e-5), "smallest_normal": (2.2e-308, 6.2e-5),
    "eps": (2.2e-16, 7.9e-3), "resolution": (1e-15, 0.01),
    "max": (65504.0, INF), "min": (-INF, -65504.0),
}


def _finfo_attribute(ctx, node: cst.Attribute) -> Optional[Value]:
    """The value of `torch.finfo(...).tiny` / `.eps` / `.max` / `.min` (numpy's too): a constant
    whose sign and size are known whatever the dtype."""
    call = strip_parens(node.value)
    bounds = _FINFO_RANGES.get(node.attr.value)
    if bounds is None or not isinstance(call, cst.Call):
        return None
    if ctx.qualname(call.func) not in FINFO_FUNCTIONS:
        return None
    return interval(*bounds, nograd=Evidence(0, f"`finfo.{node.attr.value}`"))


# Functions of torch's tensor namespaces (not classes, not `torch.nn.Module`s or utilities).
_TORCH_FUNCTION = re.compile(r"^torch\.(?:linalg\.|fft\.|special\.|nn\.functional\.)?[a-z_][a-z0-9_]*$")
# Numbers a module names (`2 * math.pi * k`: a frequency is positive).
_MATH_CONSTANTS = {f"{module}.{name}": value for module in ("math", "torch", "numpy")
                   for name, value in (("pi", math.pi), ("e", math.e), ("tau", math.tau))}


def _euclidean(op) -> bool:
    """A norm op whose order is 2, written or by default (`x.norm(dim=-1)`, `torch.norm(x, 2, -1)`,
    `vector_norm(x, ord=2)`; every norm takes its order second)."""
    order = op.kwargs.get("p", op.kwargs.get("ord", op.args[1] if len(op.args) > 1 else None))
    return order is None or number_value(strip_parens(order)) == 2


def _code(ctx, node: cst.CSTNode) -> str:
    """The code of a node, memoized per file (codegen is the costly part of the flow); a name
    or an attribute chain is spelled without codegen. The memo lives on the file's context:
    a module-level one kept every file's syntax tree alive to the end of the run."""
    if isinstance(node, cst.BaseExpression):
        node = strip_parens(node)
    name = dotted_name(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
    if name is not None:
        return name
    codes: Dict[int, Tuple[cst.CSTNode, str]] = ctx.node_codes
    key = id(node)
    hit = codes.get(key)
    if hit is not None and hit[0] is node:
        return hit[1]
    from ..core.context import node_code

    text = node_code(node)
    codes[key] = (node, text)  # the node is kept so that its id cannot be reused
    return text


class _Frame:
    """One function being interpreted: its returns, and the loop exits in flight."""

    def __init__(self, cls: Optional[str]):
        self.cls = cls
        self.returns: Optional[Value] = None
        self.returned = False
        self.loops: List[Tuple[List[Env], List[Env]]] = []  # (continues, breaks)


class FileAnalysis:
    def __init__(self, ctx, probing: bool = False, enforced: bool = False):
        self.ctx = ctx
        # Probe domains: trust every call site of the file, and defaults where none passes.
        self.probing = probing
        # Only what the code itself enforces: a parameter's default (a gain `k=50`, a setting)
        # is a value someone may change, not a guard; what the file's calls pass (a clamp a
        # caller applies) still counts.
        self.enforced = enforced
        module = ctx.module
        self.functions: Dict[str, cst.FunctionDef] = {}
        self.classes: Dict[str, cst.ClassDef] = {}
        self.methods: Dict[str, Dict[str, cst.FunctionDef]] = {}
        self.owner: Dict[int, Optional[str]] = {}  # id(function) -> class name
        for stmt in module.body:
            if isinstance(stmt, cst.FunctionDef):
                self.functions[stmt.name.value] = stmt
                self.owner[id(stmt)] = None
            elif isinstance(stmt, cst.ClassDef):
                self.classes[stmt.name.value] = stmt
                table = self.methods.setdefault(stmt.name.value, {})
                for item in stmt.body.body:
                    if isinstance(item, cst.FunctionDef):
                        table[item.name.value] = item
                        self.owner[id(item)] = stmt.name.value
        self.env_before: Dict[int, Env] = {}
        self.returns: Dict[int, Value] = {}
        self._done: Set[int] = set()
        self._running: Set[int] = set()
        self.attrs: Dict[str, Dict[str, Value]] = {}
        self._attrs_done: Set[str] = set()
        self.module_env: Optional[Env] = None
        # Evidence that a class's instances / a function run in half precision.
        self.half_owners: Dict[str, Evidence] = {}
        self.autocast_callees: Dict[str, Evidence] = {}
        self.trainable_names: Set[str] = set()
        self._seeded: Set[int] = set()
        # Class -> attributes a method fills by `append` (`self.data.append((r, prob))`).
        self._appended: Dict[str, Set[str]] = {}
        self._dependents: Dict[int, Set[str]] = {}
        self._callsites = None
        self._tokens: List[cst.CSTNode] = []
        self._token_of: Dict[int, int] = {}
        self._all_done = False

    # ------------------------------------------------------------------ evidence lines
    def token(self, node: cst.CSTNode) -> int:
        """A stand-in for `node`'s line (positions are computed only when a message cites)."""
        key = id(node)
        t = self._token_of.get(key)
        if t is None:
            self._tokens.append(node)
            t = self._token_of[key] = -len(self._tokens)
        return t

    def line(self, token: int) -> int:
        if token >= 0:
            return token
        try:
            return self.ctx.span(self._tokens[-token - 1])[0].row
        except Exception:
            return 0

    def cite(self, value: Value, count: int = 2) -> str:
        parts = []
        for ev in value.evidence[-count:]:
            row = self.line(ev.line)
            parts.append(f"{ev.reason} at line {row}" if row else ev.reason)
        return ", ".join(dict.fromkeys(parts))

    # ------------------------------------------------------------------ driving
    def ensure_module(self) -> Env:
        if self.module_env is None:
            self.module_env = Env()
            frame = _Frame(None)
            out = self.run_block(self.ctx.module.body, Env(), frame)
            self.module_env = out or Env()
        return self.module_env

    def ensure_function(self, fn: cst.FunctionDef) -> None:
        key = id(fn)
        if key in self._done or key in self._running:
            return
        cls = self.owner.get(key)
        if cls is not None and cls not in self._attrs_done:
            # Runs every method of the class, `__init__` first (this one included).
            self.class_attrs(cls)
            if key in self._done or key in self._running:
                return
        self._running.add(key)
        try:
            self._run_function(fn, cls)
        finally:
            self._running.discard(key)

    def _entry_env(self, fn: cst.FunctionDef, cls: Optional[str]) -> Env:
        """Parameters as unknown (an `eps` positive, `self` the class's instance)."""
        env = Env()
        params = fn.params
        every = list(params.posonly_params) + list(params.params) + list(params.kwonly_params)
        for i, p in enumerate(every):
            name = p.name.value
            if i == 0 and cls is not None and name == "self":
                env.vars[name] = Value(instance_of=cls)
            elif any(w in name.lower() for w in _EPS_WORDS):
                env.vars[name] = Value(lo=0.0, nonzero=True)
            elif p.annotation is not None:
                # `model: Classifier`: an instance of the class, as a type checker reads it (a
                # class of this file, or one imported from the project: as `Actor(...)` is).
                spelled = _annotation_spelled(p.annotation)
                if spelled in self.classes:
                    env.vars[name] = Value(instance_of=spelled)
                else:
                    env.vars[name] = imports.annotated_instance(self, spelled, self.token(p)) or TOP
            else:
                env.vars[name] = TOP
        env.nograd = self._function_grad_region(fn, cls)
        return env

    # ------------------------------------------------------------------ autograd regions
    def grad_mode(self, call: cst.BaseExpression) -> Optional[bool]:
        """What a `with` item or a decorator does to autograd: False where it turns it off
        (`torch.no_grad()`, `torch.inference_mode()`, `torch.set_grad_enabled(False)`), True
        where it turns it back on (`torch.enable_grad()`, `set_grad_enabled(True)`), None
        where it says nothing."""
        full = self.ctx.qualname(call.func if isinstance(call, cst.Call) else call)
        flag = call.args[0].value if isinstance(call, cst.Call) and call.args else None
        literal = flag.value if isinstance(flag, cst.Name) and flag.value in ("True", "False") else None
        if full in _NO_GRAD:
            # `inference_mode(False)` keeps autograd on.
            return None if literal == "False" else False
        if full in _ENABLE_GRAD:
            return True
        if full in _SET_GRAD_ENABLED and literal is not None:
            return literal == "True"
        return None

    def _grad_region(self, item: cst.BaseExpression, current: Optional[Evidence]) -> Optional[Evidence]:
        """The no-gradient region in force under a `with` item or a decorator."""
        mode = self.grad_mode(item)
        if mode is False:
            return Evidence(self.token(item), f"under `{_code(self.ctx, item)}`")
        return None if mode is True else current

    def _function_grad_region(self, fn: cst.FunctionDef, cls: Optional[str]) -> Optional[Evidence]:
        """Autograd is off in the whole of `fn`: a `@torch.no_grad()` decorator, a method of
        a `torch.autograd.Function` (its gradient is what `backward` returns), an
        optimizer's `step` (torch runs it without autograd)."""
        region = None
        for deco in fn.decorators:
            region = self._grad_region(deco.decorator, region)
        if region is not None or cls is None:
            return region
        base = self._torch_base(cls)
        if base == "function":
            return Evidence(self.token(fn), f"in the custom autograd Function `{cls}`")
        if base == "optimizer" and fn.name.value == "step":
            return Evidence(self.token(fn), f"in the optimizer step `{cls}.step`")
        return None

    def _torch_base(self, cls: str, depth: int = 4) -> Optional[str]:
        """"function" for a subclass of `torch.autograd.Function`, "optimizer" for one of
        `torch.optim.Optimizer`, "module" for an `nn.Module` (through the file's own classes
        too), else None."""
        node = self.classes.get(cls)
        if node is None or depth <= 0:
            return None
        for base in node.bases:
            full = self.ctx.qualname(base.value) or dotted_name(base.value) or ""
            if full in ("torch.autograd.Function", "torch.autograd.function.Function") or \
                    full.endswith("autograd.Function") or full == "Function" and "autograd" in self.ctx.source:
                return "function"
            if full in ("torch.optim.Optimizer", "torch.optim.optimizer.Optimizer"):
                return "optimizer"
            if full.startswith("torch.nn.") and full.split(".")[-1][:1].isupper() or \
                    full.endswith("LightningModule"):
                return "module"
            if full in self.classes and full != cls:
                found = self._torch_base(full, depth - 1)
                if found:
                    return found
        return None

    def construction(self, fn: cst.FunctionDef, path: Sequence[cst.CSTNode]) -> Optional[Evidence]:
        """`fn` is the `__init__` of an `nn.Module` and `path` (the nodes down to a place in
        it) enters no lambda: what it computes there (filters, bases, buffers, a parameter's
        initial value) is built once, before training, and autograd never differentiates it;
        a lambda made there runs later. Other classes' constructors may be differentiated (a
        distribution's `__init__` derives the tensors its `log_prob` uses), so they do not
        count."""
        cls = self.owner.get(id(fn))
        if cls is None or fn.name.value != "__init__" or self._torch_base(cls) != "module":
            return None
        if any(isinstance(n, cst.Lambda) for n in path):
            return None
        return Evidence(self.token(fn), f"at construction, in `{cls}.__init__`")

    def _in_region(self, value: Value, env: Env) -> Value:
        """A value computed where autograd is off takes no gradient, wherever it is used."""
        if env.nograd is not None and value.nograd is None and value.module_out is None and not value.instance_of:
            return replace(value, nograd=env.nograd)
        return value

    @property
    def callsites(self):
        if self._callsites is None:
            from .callsites import CallSites

            self._callsites = CallSites(self)
        return self._callsites

    def _seed(self, fn: cst.FunctionDef, env: Env) -> bool:
        """Parameter values from the file's calls of `fn` into `env`; False where they tell
        nothing."""
        entry = self.callsites.entry(fn, env.vars)
        if entry is None:
            return False
        env.vars.update(entry)
        return True

    def _run_function(self, fn: cst.FunctionDef, cls: Optional[str]) -> None:
        key = id(fn)
        env = self._entry_env(fn, cls)
        frame = _Frame(cls)
        self.run_block(fn.body.body if isinstance(fn.body, cst.IndentedBlock) else fn.body.body, env, frame)
        # What `max_of` and `norm_of` name is the callee's own variable: meaningless to a caller.
        self.returns[key] = replace(frame.returns, max_of=None, norm_of=None) if frame.returned else TOP
        self._done.add(key)

    def ensure_seeded(self, fn: cst.FunctionDef) -> None:
        """Rerun `fn` with its parameters' values from the file's calls (once; nothing when
        the calls tell nothing). Its recorded environments are replaced; its return summary
        is kept."""
        key = id(fn)
        if key in self._seeded or key in self._running:
            return
        cls = self.owner.get(key)
        if cls is not None and fn.name.value == "__init__":
            self.class_attrs(cls)  # seeded there
            return
        self._seeded.add(key)
        env = self._entry_env(fn, cls)
        if not self._seed(fn, env):
            return
        self._running.add(key)
        try:
            self.run_block(fn.body.body if isinstance(fn.body, cst.IndentedBlock) else fn.body.body, env, _Frame(cls))
        finally:
            self._running.discard(key)

    def depends_on_parameters(self, stack, expr: cst.BaseExpression) -> bool:
        """`expr`, written inside the innermost function of `stack`, may hold what a caller
        passed (a parameter, or a name assigned from one): only then are the callers' values
        worth computing."""
        fn = next((n for n in reversed(stack) if isinstance(n, cst.FunctionDef)), None)
        if fn is None:
            return False
        from .callsites import depends_on_parameters

        return depends_on_parameters(fn, expr, self._dependents, method=self.owner.get(id(fn)) is not None)

    def env_at(self, stack, seeded: bool = True) -> Env:
        """The environment before the innermost statement of `stack` (the node's ancestors,
        the module first), refined by the conditional expressions (`a if c else b`) it sits
        in; comprehension and lambda variables are unknown there."""
        fn = None
        for node in reversed(stack):
            if isinstance(node, cst.FunctionDef):
                fn = node
                break
        self.ensure_module()
        if fn is not None:
            self.ensure_function(fn)
            if seeded:
                self.ensure_seeded(fn)
        env: Optional[Env] = None
        at = -1
        for i in range(len(stack) - 1, -1, -1):
            env = self.env_before.get(id(stack[i]))
            if env is not None:
                at = i
                break
        if env is None:
            return self.module_env or Env()
        for i in range(at + 1, len(stack) - 1):
            node = stack[i]
            if isinstance(node, cst.IfExp):
                branch = self.refine(node.test, env, stack[i + 1] is node.body)
                if branch is not None:
                    env = branch
            elif isinstance(node, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp, cst.Lambda)):
                env = self._comprehension_env(node, env)
        return env

    def _comprehension_env(self, node: cst.CSTNode, env: Env) -> Env:
        """The names a comprehension binds, from what it iterates where the analysis knows
        the elements (`for p, r in zip(probs, rewards)`), else unknown; a lambda's unknown."""
        env = env.copy()
        for name in names_bound_inside(node):
            env.vars[name] = TOP
        comp = getattr(node, "for_in", None)
        while comp is not None:
            held = self._member_of(comp.iter, env)
            if held is not None:
                self.assign(comp.target, held, env)
            comp = comp.inner_for_in
        return env

    def ensure_all(self) -> None:
        """Run every flow of the file (for facts that come from anywhere: `.half()` models,
        autocast regions calling a function, optimizers)."""
        if self._all_done:
            return
        self._all_done = True
        self.ensure_module()
        for fn in self.functions.values():
            self.ensure_function(fn)
        for table in self.methods.values():
            for fn in table.values():
                self.ensure_function(fn)

    def class_attrs(self, cls: str) -> Dict[str, Value]:
        table = self.attrs.setdefault(cls, {})
        if cls in self._attrs_done:
            return table
        self._attrs_done.add(cls)
        methods = self.methods.get(cls, {})
        ordered = sorted(methods.values(), key=lambda f: f.name.value != "__init__")
        for fn in ordered:
            if id(fn) not in self._done and id(fn) not in self._running:
                self._running.add(id(fn))
                try:
                    self._run_function(fn, cls)
                finally:
                    self._running.discard(id(fn))
        init = methods.get("__init__")
        if init is not None:
            self._seed_init(cls, init, table)
        self._refill(cls, methods)
        return table

    def _refill(self, cls: str, methods: Dict[str, cst.FunctionDef]) -> None:
        """A list one method fills and another reads (`put_data` appends `(r, prob)` to
        `self.data`, `train_net` iterates it): the filling methods run again with their
        parameters from the file's calls, then the reading ones run again on the complete
        attribute. Appends in `__init__` need nothing: it runs first."""
        filled = self._appended.get(cls)
        if not filled:
            return
        init = methods.get("__init__")
        uses = {id(fn): _self_attribute_uses(fn) for fn in methods.values() if fn is not init}
        fillers = [fn for fn in methods.values() if fn is not init and uses[id(fn)][1] & filled]
        if not fillers:
            return
        for fn in fillers:
            self.ensure_seeded(fn)
        for fn in methods.values():
            if fn is init or fn in fillers or id(fn) in self._running:
                continue
            if uses[id(fn)][0] & filled:
                self._running.add(id(fn))
                try:
                    self._run_function(fn, cls)
                finally:
                    self._running.discard(id(fn))

    def _seed_init(self, cls: str, init: cst.FunctionDef, table: Dict[str, Value]) -> None:
        """`self.k = k` where the file builds `Head(k=...)` (or, for probes, the default
        `k=50`): rerun `__init__` with those values once the class's attributes are complete
        (the callers may use them), and keep what it assigns to attributes no other method
        assigns."""
        key = id(init)
        if key in self._seeded or key in self._running:
            return
        self._seeded.add(key)
        env = self._entry_env(init, cls)
        if not self._seed(init, env):
            return
        others: Set[str] = set()
        for name, fn in self.methods.get(cls, {}).items():
            if fn is not init:
                others |= _self_targets(fn)
        self.attrs[cls] = {}
        self._running.add(key)
        try:
            self.run_block(init.body.body if isinstance(init.body, cst.IndentedBlock) else init.body.body,
                           env, _Frame(cls))
        finally:
            self._running.discard(key)
            seeded = self.attrs[cls]
            self.attrs[cls] = table
        for attr, v in seeded.items():
            if attr not in others:
                table[attr] = v

    def function_return(self, fn: cst.FunctionDef) -> Value:
        self.ensure_function(fn)
        return self.returns.get(id(fn), TOP)

    def method(self, cls: Optional[str], name: str, depth: int = 4) -> Optional[cst.FunctionDef]:
        while cls is not None and depth > 0:
            found = self.methods.get(cls, {}).get(name)
            if found is not None:
                return found
            node = self.classes.get(cls)
            base = None
            if node is not None:
                for b in node.bases:
                    if isinstance(b.value, cst.Name) and b.value.value in self.classes:
                        base = b.value.value
                        break
            cls, depth = base, depth - 1
        return None

    # ------------------------------------------------------------------ statements
    def run_block(self, body, env: Optional[Env], frame: _Frame) -> Optional[Env]:
        for stmt in body:
            if env is None:
                return None
            self.env_before[id(stmt)] = env
            env = self.run_statement(stmt, env, frame)
        return env

    def _suite(self, suite) -> list:
        return list(suite.body) if suite is not None else []

    def run_statement(self, stmt: cst.CSTNode, env: Env, frame: _Frame) -> Optional[Env]:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if env is None:
                    return None
                self.env_before[id(small)] = env
                env = self.run_small(small, env, frame)
            return env
        if isinstance(stmt, cst.If):
            return self.run_if(stmt, env, frame)
        if isinstance(stmt, (cst.For, cst.While)):
            return self.run_loop(stmt, env, frame)
        if isinstance(stmt, cst.With):
            inner = env.copy()
            for item in stmt.items:
                region = self.ctx.precision.autocast_region(item.item) if self.ctx.precision is not None else None
                if region is not None and region.effective_dtype == "float16":
                    inner.autocast = True
                inner.nograd = self._grad_region(item.item, inner.nograd)
                if item.asname is not None:
                    self.assign(item.asname.name, TOP, inner)
            out = self.run_block(self._suite(stmt.body), inner, frame)
            if out is not None:
                # A copy: `out` may be the very environment recorded for the block's last statement.
                out = out.copy()
                out.autocast = env.autocast
                out.nograd = env.nograd
            return out
        if isinstance(stmt, cst.Try):
            body_out = self.run_block(self._suite(stmt.body), env.copy(), frame)
            out = body_out
            if stmt.orelse is not None and body_out is not None:
                out = self.run_block(self._suite(stmt.orelse.body), body_out, frame)
            for handler in stmt.handlers:
                h_env = join_env(env, body_out) or env.copy()
                if handler.name is not None:
                    self.assign(handler.name.name, TOP, h_env)
                out = join_env(out, self.run_block(self._suite(handler.body), h_env, frame))
            if stmt.finalbody is not None:
                final_in = out if out is not None else env.copy()
                final = self.run_block(self._suite(stmt.finalbody.body), final_in, frame)
                return final if out is not None else None
            return out
        if isinstance(stmt, cst.FunctionDef):
            env = env.copy()
            env.vars[stmt.name.value] = TOP
            return env
        if isinstance(stmt, cst.ClassDef):
            env = env.copy()
            env.vars[stmt.name.value] = TOP
            return env
        return env

    def run_if(self, stmt: cst.If, env: Env, frame: _Frame) -> Optional[Env]:
        true_env = self.refine(stmt.test, env, True)
        false_env = self.refine(stmt.test, env, False)
        out_true = self.run_block(self._suite(stmt.body), true_env, frame) if true_env is not None else None
        orelse = stmt.orelse
        if orelse is None:
            out_false = false_env
        elif false_env is None:
            out_false = None
        elif isinstance(orelse, cst.If):
            self.env_before[id(orelse)] = false_env
            out_false = self.run_if(orelse, false_env, frame)
        else:
            out_false = self.run_block(self._suite(orelse.body), false_env, frame)
        return join_env(out_true, out_false)

    def run_loop(self, stmt, env: Env, frame: _Frame) -> Optional[Env]:
        head = env.copy()
        if isinstance(stmt, cst.For):
            self.bind_loop_target(stmt, head)
        breaks: List[Env] = []
        exit_env: Optional[Env] = head
        for i in range(4):
            frame.loops.append(([], []))
            entry = head if isinstance(stmt, cst.For) else self.refine(stmt.test, head, True)
            out = self.run_block(self._suite(stmt.body), entry, frame) if entry is not None else None
            continues, brks = frame.loops.pop()
            breaks = brks
            back = out
            for c in continues:
                back = join_env(back, c)
            new_head = join_env(head, back, widening=i >= 1)
            if isinstance(stmt, cst.For) and new_head is not None:
                self.bind_loop_target(stmt, new_head)
            if new_head == head:
                break
            head = new_head  # type: ignore[assignment]
        exit_env = head if isinstance(stmt, cst.For) else self.refine(stmt.test, head, False)
        for b in breaks:
            exit_env = join_env(exit_env, b)
        if stmt.orelse is not None and exit_env is not None:
            exit_env = self.run_block(self._suite(stmt.orelse.body), exit_env, frame)
        return exit_env

    def bind_loop_target(self, stmt: cst.For, env: Env) -> None:
        it = strip_parens(stmt.iter)
        source = self._unique_source(it)
        if source is not None and isinstance(stmt.target, cst.Name):
            # `for c in torch.unique(labels)`: `labels == c` holds somewhere.
            env.rels = env.rels | {(source, "∋", stmt.target.value)}
        self.assign(stmt.target, self._member_of(it, env) or TOP, env)

    def _member_of(self, it: cst.BaseExpression, env: Env) -> Optional[Value]:
        """What `for m in self.layers:` (or `.values()`) binds: the join of the modules a
        ModuleList / ModuleDict holds, or of what a list was filled with (`for r, p in
        buf[::-1]`, `reversed(buf)`, `zip(rewards, probs)`, `enumerate(probs)`), where the
        analysis knows them."""
        it = strip_parens(it)
        counted = self._range_index(it, env)
        if counted is not None:
            return counted
        if isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and it.func.attr.value == "values" \
                and not it.args:
            it = strip_parens(it.func.value)
        if isinstance(it, cst.Subscript) and all(isinstance(e.slice, cst.Slice) for e in it.slice):
            it = strip_parens(it.value)  # `buf[::-1]`, `buf[1:]`: the same elements
        if isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.args \
                and all(a.keyword is None and a.star == "" for a in it.args):
            inner = [self._member_of(a.value, env) for a in it.args]
            if it.func.value == "reversed" and len(inner) == 1:
                return inner[0]
            if it.func.value == "zip" and any(v is not None for v in inner):
                return Value(members=tuple((str(i), v or TOP) for i, v in enumerate(inner)))
            if it.func.value == "enumerate" and inner[0] is not None:
                return Value(members=(("0", Value(lo=0.0, integer=True, nograd=Evidence(0, "an index"))),
                                      ("1", inner[0])))
            return None
        if not isinstance(it, (cst.Name, cst.Attribute, cst.List, cst.Tuple)):
            return None
        held = self.eval(it, env)  # (a display holds its elements: `for k in (1, 3, 5)`)
        return _join_members(held.members)

    def _range_index(self, it: cst.BaseExpression, env: Env) -> Optional[Value]:
        """What `for k in range(a, b)` binds: an integer from `a` (0 without it) below `b`, no
        tensor (a Fourier series' `sin(k * x) / k` divides by k >= 1). None for another
        iterable, or a step that is not a positive number."""
        if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "range"
                and self.ctx.qualname(it.func) is None and it.func.value not in self.functions):
            return None
        split = split_args(it.args)
        if split is None or split[1] or not 1 <= len(split[0]) <= 3:
            return None
        bounds = split[0]
        if len(bounds) == 3 and not (number_value(strip_parens(bounds[2])) or 0) > 0:
            return None
        start = self.eval(bounds[0], env) if len(bounds) > 1 else point(0.0)
        stop = self.eval(bounds[-1] if len(bounds) == 1 else bounds[1], env)
        lo, hi = start.lo, max(start.lo, stop.hi - 1)
        return Value(lo=lo, hi=hi, nonzero=lo > 0, integer=True, nograd=Evidence(0, "a loop index"))

    def _element_of(self, it: cst.BaseExpression, env: Env) -> Value:
        """An element of an iterable argument (`extend(xs)`): a display's join, else unknown."""
        it = strip_parens(it)
        if isinstance(it, (cst.List, cst.Tuple)):
            return _join_members(self.eval(it, env).members) or TOP
        if isinstance(it, (cst.ListComp, cst.GeneratorExp)):
            return self._element(it, env, 8)
        return self._member_of(it, env) or TOP

    def _unique_source(self, it: cst.BaseExpression) -> Optional[str]:
        if not isinstance(it, cst.Call):
            return None
        func = it.func
        if self.ctx.qualname(func) == "torch.unique" and it.args:
            return _code(self.ctx, it.args[0].value)
        if isinstance(func, cst.Attribute) and func.attr.value == "unique" and self.ctx.qualname(func.value) is None:
            return _code(self.ctx, func.value)
        if isinstance(func, cst.Attribute) and func.attr.value == "tolist":
            return self._unique_source(strip_parens(func.value))
        return None

    def run_small(self, small: cst.CSTNode, env: Env, frame: _Frame) -> Optional[Env]:
        if isinstance(small, cst.Assign):
            value = self._in_region(self.eval(small.value, env), env)
            env = env.copy()
            for name in self.note_optimizer(small.value, env):
                env.vars[name] = trained(env.vars.get(name, TOP))
            for t in small.targets:
                self.assign(t.target, value, env, small.value)
            self._note_extreme(small, env)
            return env
        if isinstance(small, cst.AnnAssign):
            if small.value is None:
                return env
            value = self._in_region(self.eval(small.value, env), env)
            env = env.copy()
            self.assign(small.target, value, env, small.value)
            return env
        if isinstance(small, cst.AugAssign):
            op = {cst.AddAssign: "add", cst.SubtractAssign: "sub", cst.MultiplyAssign: "mul",
                  cst.DivideAssign: "div", cst.PowerAssign: "pow"}.get(type(small.operator))
            current = self.eval(small.target, env)
            rhs = self.eval(small.value, env)
            value = transfer.apply(op, [current, rhs], {}, {}, self.token(small)) if op else TOP
            if value is not None and op == "sub":
                value = _max_shifted(value, rhs, dotted_name(strip_parens(small.target)), self.token(small))
            env = env.copy()
            self.assign(small.target, self._in_region(value or TOP, env), env)
            return env
        if isinstance(small, cst.Expr):
            return self.run_expression_statement(small.value, env)
        if isinstance(small, cst.Return):
            value = self._in_region(self.eval(small.value, env) if small.value is not None else TOP, env)
            frame.returns = join(frame.returns, value) if frame.returned else value
            frame.returned = True
            return None
        if isinstance(small, cst.Raise):
            return None
        if isinstance(small, cst.Continue):
            if frame.loops:
                frame.loops[-1][0].append(env)
            return None
        if isinstance(small, cst.Break):
            if frame.loops:
                frame.loops[-1][1].append(env)
            return None
        if isinstance(small, cst.Assert):
            return self.refine(small.test, env, True) or env
        return env

    def run_expression_statement(self, expr: cst.BaseExpression, env: Env) -> Env:
        expr = strip_parens(expr)
        if not isinstance(expr, cst.Call):
            return env
        trained_names = self.note_optimizer(expr, env)
        if trained_names:
            env = env.copy()
            for name in trained_names:
                env.vars[name] = trained(env.vars.get(name, TOP))
        func = expr.func
        if not isinstance(func, cst.Attribute):
            self.eval(expr, env)  # calls record autocast callees
            return env
        target = func.value
        key = dotted_name(target)
        method = func.attr.value
        if key is None or self.ctx.qualname(target) is not None:
            self.eval(expr, env)
            return env
        current = self.eval(target, env)
        split = split_args(expr.args)
        positional, keywords = split if split is not None else ([], {})
        line = self.token(expr)
        new: Optional[Value] = None
        if method in _IN_PLACE:
            args = [current] + [self.eval(a, env) for a in positional]
            kw = {k: self.eval(v, env) for k, v in keywords.items()}
            new = transfer.apply(_IN_PLACE[method], args, kw, {}, line)
            if new is not None:
                new = new.with_evidence(line, f"`{method}` in place")
            if new is not None and method == "sub_" and len(args) == 2:
                new = _max_shifted(new, args[1], key, line)
        elif method == "uniform_":
            lo = self.eval(positional[0], env) if positional else point(0.0)
            hi = self.eval(positional[1], env) if len(positional) > 1 else point(1.0)
            new = interval(lo.lo, hi.hi, dtype=current.dtype).with_evidence(line, "`uniform_` bounds")
            if new.lo <= 0:
                new = replace(new, zero=UNIFORM_ZERO)
        elif method == "masked_fill_" and len(positional) == 2:
            fill = self.eval(positional[1], env)
            new = self._masked_update(target, positional[0], current, fill, env, line)
        elif method in ("half", "bfloat16") and not positional:
            new = replace(current, dtype="float16" if method == "half" else "bfloat16")
            self._note_half(current, expr)
        elif method == "to" and any(self.ctx.qualname(a) in ("torch.float16", "torch.half", "torch.bfloat16") for a in positional):
            new = replace(current, dtype="float16")
            self._note_half(current, expr)
        elif method == "register_buffer" and key == "self" and len(positional) >= 2 and \
                isinstance(strip_parens(positional[0]), cst.SimpleString):
            # A buffer is state autograd does not train: `self.codes` holds what is registered.
            env = env.copy()
            name = strip_parens(positional[0]).evaluated_value
            self.assign(cst.Attribute(value=cst.Name("self"), attr=cst.Name(name)), self.eval(positional[1], env), env)
            return env
        elif method == "requires_grad_":
            new = replace(current, trainable=True, nograd=None)
        elif method == "detach_":
            new = replace(current, trainable=False, nograd=Evidence(self.token(expr), f"`{key}.detach_()`"))
        elif method in ("append", "insert", "extend") and current.members is not None and (
                is_bag(current.members) or not current.instance_of):
            # `buf.append((r, prob))`: the list holds `(r, prob)` at some index, so `for r, p in
            # buf` and `torch.stack(buf)` read it back. `extend` adds each element of its argument.
            env = env.copy()
            added = positional[-1] if positional else None
            element = (self._element_of(added, env) if method == "extend" else self.eval(added, env)) \
                if added is not None else None
            if element is not None and not unknown(element):
                element = _kept_in(element, line, f"kept in `{key}`")
            cls = self._current_class(env)
            filled_attr = key.startswith("self.") and key.count(".") == 1 and cls is not None
            if filled_attr:
                self._appended.setdefault(cls, set()).add(key[5:])
                if element is not None and unknown(element):
                    # A method's parameter before its callers are known: `_refill` reruns the
                    # method with the callers' values, which is what the list then holds.
                    return env
            members = bag(*(v for _, v in current.members), element) if element is not None else None
            self.assign(target, replace(current, members=members), env)
            return env
        elif method in _MEMBER_UPDATES and current.members is not None:
            # `self.layers.update(m)`, `pop`, `clear`: what the container holds is no longer known.
            env = env.copy()
            self.assign(target, replace(current, members=None), env)
            return env
        else:
            self.eval(expr, env)
            if method.endswith("_") and current.nograd is not None and env.nograd is None and any(
                self.eval(a, env).nograd is None for a in positional + list(keywords.values())
            ):
                # `buf.copy_(h)`, `out.index_add_(0, i, h)`: what is written may carry a gradient.
                new = replace(current, nograd=None)
        if new is None:
            return env
        env = env.copy()
        env.vars[key] = new
        return env

    def _note_half(self, module: Value, call: cst.Call) -> None:
        if module.instance_of:
            self.half_owners.setdefault(module.instance_of, Evidence(self.token(call), f"`{module.instance_of}` is made half precision"))

    def note_optimizer(self, expr: cst.BaseExpression, env: Env) -> List[str]:
        """`torch.optim.SGD([w, b], ...)`: w and b are moved by training."""
        expr = strip_parens(expr)
        if not isinstance(expr, cst.Call):
            return []
        full = self.ctx.qualname(expr.func) or ""
        if not full.startswith("torch.optim.") or not expr.args:
            return []
        params = strip_parens(expr.args[0].value)
        names: List[str] = []
        if isinstance(params, (cst.List, cst.Tuple)):
            for el in params.elements:
                name = dotted_name(el.value)
                if name:
                    self.trainable_names.add(name)
                    names.append(name)
        return names

    def _masked_values(self, target, index, current: Value, fill: Value, env: Env, line: int) -> Value:
        """`t[cond] = v` / `t.masked_fill_(cond, v)` where cond tests t itself."""
        index = strip_parens(index)
        tcode = _code(self.ctx, target)
        if isinstance(index, cst.Comparison) and len(index.comparisons) == 1:
            cmp = index.comparisons[0]
            op = _CMP.get(type(cmp.operator))
            left = _code(self.ctx, index.left)
            bound = self.eval(cmp.comparator, env)
            if left == tcode and op is not None and bound.lo == bound.hi:
                c = bound.lo
                # A replacement changes values: no longer exactly a function's output (`form`).
                if op in (">", ">=") and fill.hi <= c:
                    return replace(current, hi=c, form=None, evidence=(current.evidence + (Evidence(line, f"values above {c:g} replaced"),))[-4:])
                if op in ("<", "<=", "==") and fill.positive and (c <= fill.lo or op == "==" and c == 0):
                    lo = max(min(current.lo, fill.lo), 0.0) if current.lo >= 0 else current.lo
                    if op == "==" or current.lo >= 0:
                        return replace(current, lo=lo, nonzero=True, zero=None, form=None,
                                       evidence=(current.evidence + (Evidence(line, "zeros replaced"),))[-4:])
                    return replace(current, lo=max(current.lo, min(c, fill.lo)), nonzero=True, zero=None, form=None,
                                   evidence=(current.evidence + (Evidence(line, "small values replaced"),))[-4:])
        return join(current, fill) or TOP

    def _masked_update(self, target, index, current: Value, fill: Value, env: Env, line: int) -> Value:
        """`t[cond] = v` / `t.masked_fill_(cond, v)`: the values (`_masked_values`) and the
        gradient: t takes one from v where it had none."""
        out = self._masked_values(target, index, current, fill, env, line)
        if out.nograd is not None and fill.nograd is None:
            return replace(out, nograd=None)
        return out

    def assign(self, target: cst.BaseExpression, value: Value, env: Env, source=None) -> None:
        target = strip_parens(target)
        key = dotted_name(target) if isinstance(target, (cst.Name, cst.Attribute)) else None
        if key is not None and env.rels:
            # Relations about the old value no longer hold.
            word = re.compile(r"(?<![\w.])" + re.escape(key) + r"(?![\w])")
            env.rels = frozenset(r for r in env.rels if not (word.search(r[0]) or word.search(r[2])))
        if isinstance(target, cst.Name):
            if target.value in self.trainable_names:
                value = trained(value)
            env.vars[target.value] = value
        elif isinstance(target, (cst.Tuple, cst.List)):
            elements = None
            if source is not None and isinstance(strip_parens(source), (cst.Tuple, cst.List)):
                elements = strip_parens(source).elements
            positions = dict(value.members) if value.members is not None and elements is None else {}
            starred = False
            for i, el in enumerate(target.elements):
                inner = el.value
                if isinstance(el, cst.StarredElement):
                    starred = True
                    self.assign(inner, TOP, env)
                elif elements is not None and i < len(elements) and not isinstance(elements[i], cst.StarredElement):
                    self.assign(inner, self.eval(elements[i].value, env), env, elements[i].value)
                elif not starred and str(i) in positions:
                    # `p, _ = self.head(x)` where the method returns `softmax(...), logits`.
                    self.assign(inner, positions[str(i)], env)
                elif not starred and value.max_of is not None and value.members is None \
                        and len(target.elements) == 2:
                    # `m, _ = torch.max(x, dim)`: (values, indices); the values keep "the
                    # maximum of x" (a max-shift), the indices are integers with no gradient.
                    self.assign(inner, value if i == 0 else Value(
                        lo=0.0, integer=True, nograd=Evidence(self.token(target), "indices")), env)
                elif not starred and value.draw is not None and value.members is None:
                    # `z0, z1 = torch.randn(2 * n, d).chunk(2)`: pieces of one draw are
                    # independent draws.
                    self.assign(inner, replace(value, draw=f"{value.draw}/{i}"), env)
                else:
                    # `c, d = x.detach().chunk(2)`: pieces of a value no gradient reaches.
                    piece = Value(nograd=value.nograd) if value.members is None and value.nograd else TOP
                    self.assign(inner, piece, env)
        elif isinstance(target, cst.Attribute):
            key = dotted_name(target)
            if key is None:
                return
            if target.attr.value == "requires_grad":
                # `x.requires_grad = True`: x is a leaf autograd now tracks.
                owner = dotted_name(target.value)
                if owner is not None:
                    env.vars[owner] = replace(self.eval(target.value, env), trainable=True, nograd=None)
                return
            env.vars[key] = value
            if key.startswith("self.") and key.count(".") == 1:
                cls = self._current_class(env)
                if cls is not None:
                    table = self.attrs.setdefault(cls, {})
                    old = table.get(key[5:])
                    table[key[5:]] = value if old is None else (join(old, value) or TOP)
        elif isinstance(target, cst.Subscript) and len(target.slice) != 1:
            # `t[:, 0] = h`: the values are not followed, but what is written may carry a gradient.
            base = dotted_name(target.value)
            current = self.eval(target.value, env) if base is not None else TOP
            if base is not None and current.nograd is not None and value.nograd is None:
                env.vars[base] = replace(current, nograd=None)
        elif isinstance(target, cst.Subscript) and len(target.slice) == 1:
            base = dotted_name(target.value)
            index = target.slice[0].slice
            if base is not None and isinstance(index, cst.Index):
                current = self.eval(target.value, env)
                if current.members is not None:  # `self.heads["x"] = m`: members unknown now
                    self.assign(target.value, replace(current, members=None), env)
                    return
                env.vars[base] = self._masked_update(target.value, index.value, current, value, env, self.token(target))

    def _current_class(self, env: Env) -> Optional[str]:
        me = env.vars.get("self")
        return me.instance_of if me is not None else None

    # ------------------------------------------------------------------ conditions
    def refine(self, test: cst.BaseExpression, env: Env, truth: bool) -> Optional[Env]:
        """The environment where `test` evaluated to `truth` (None: cannot happen)."""
        test = strip_parens(test)
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            return self.refine(test.expression, env, not truth)
        if isinstance(test, cst.BooleanOperation):
            both = isinstance(test.operator, cst.And) == truth
            if both:
                left = self.refine(test.left, env, truth)
                return self.refine(test.right, left, truth) if left is not None else None
            return env.copy()
        if isinstance(test, cst.Name) and test.value in ("True", "False"):
            return env.copy() if (test.value == "True") == truth else None
        if not truth and isinstance(test, cst.Attribute) and test.attr.value == "requires_grad" and \
                isinstance(test.value, cst.Name) and test.value.value in env.vars:
            # `if x.requires_grad: ... else: <x takes no gradient here>`
            out = env.copy()
            name = test.value.value
            out.vars[name] = replace(env.vars[name], nograd=Evidence(self.token(test), f"`{name}.requires_grad` is false"))
            return out
        every = self._all_of(test)
        if every is not None:
            # `(y > 0).all()`: on the true branch every element satisfies the comparison.
            return self.refine(every, env, True) if truth else env.copy()
        out = env.copy()
        line = self.token(test)
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            cmp = test.comparisons[0]
            op = _CMP.get(type(cmp.operator))
            if op is None:
                return out
            if not truth:
                op = _NEGATE[op]
            left, right = strip_parens(test.left), strip_parens(cmp.comparator)
            lcode, rcode = _code(self.ctx, left), _code(self.ctx, right)
            out.rels = out.rels | {(lcode, op, rcode), (rcode, _FLIP[op], lcode)}
            rv = self.eval(right, env)
            lv = self.eval(left, env)
            if rv.lo == rv.hi:
                self._bound(left, op, rv.lo, out, line)
            elif lv.lo == lv.hi:
                self._bound(right, _FLIP[op], lv.lo, out, line)
            return out
        # A bare truth test: `if mask.any():`, `if n:`, `if len(x):`.
        subject = self._size_subject(test)
        if subject is not None and truth:
            self._mark_nonempty(subject, out, line, f"`{_code(self.ctx, test)}` holds")
        elif truth:
            key = dotted_name(test)
            if key is not None:
                out.vars[key] = replace(self.eval(test, env), nonzero=True, zero=None)
        return out

    def _all_of(self, node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        """The comparison inside `(cmp).all()` / `torch.all(cmp)`, else None."""
        if not isinstance(node, cst.Call):
            return None
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "all" and not node.args:
            inner = strip_parens(func.value)
        elif self.ctx.qualname(func) == "torch.all" and len(node.args) == 1:
            inner = strip_parens(node.args[0].value)
        else:
            return None
        return inner if isinstance(inner, cst.Comparison) else None

    def _extreme_subject(self, node: cst.BaseExpression) -> Optional[Tuple[str, cst.BaseExpression]]:
        """("min", x) for `x.min()`, `x.amin()`, `torch.min(x)`; ("max", x) likewise."""
        node = strip_parens(node)
        if not isinstance(node, cst.Call):
            return None
        full = self.ctx.qualname(node.func)
        if full in ("torch.min", "torch.amin", "torch.max", "torch.amax") and len(node.args) == 1:
            return ("min" if full in ("torch.min", "torch.amin") else "max"), node.args[0].value
        func = node.func
        if isinstance(func, cst.Attribute) and not node.args and full is None:
            name = func.attr.value
            if name in ("min", "amin", "max", "amax") and self.ctx.qualname(func.value) is None:
                return ("min" if name in ("min", "amin") else "max"), func.value
        return None

    def _note_extreme(self, small: cst.Assign, env: Env) -> None:
        """`hi = x.max()` / `lo = x.min()` (also `.amax`, `torch.max(x)`, `.values`): record
        which extreme of which tensor a name holds, so that `hi >= lo` can be stated."""
        if len(small.targets) != 1 or not isinstance(small.targets[0].target, cst.Name):
            return
        value = strip_parens(small.value)
        if isinstance(value, cst.Attribute) and value.attr.value == "values":
            value = strip_parens(value.value)
        found = self._extreme_of_call(value)
        if found is not None:
            which, subject = found
            env.rels = env.rels | {(small.targets[0].target.value, f"{which}_of", _code(self.ctx, subject))}

    def _extreme_of_call(self, node: cst.BaseExpression) -> Optional[Tuple[str, cst.BaseExpression]]:
        if not isinstance(node, cst.Call):
            return None
        full = self.ctx.qualname(node.func)
        if full in ("torch.min", "torch.amin", "torch.max", "torch.amax") and node.args:
            return ("min" if full in ("torch.min", "torch.amin") else "max"), node.args[0].value
        func = node.func
        if isinstance(func, cst.Attribute) and full is None and self.ctx.qualname(func.value) is None:
            if func.attr.value in ("min", "amin", "max", "amax"):
                return ("min" if func.attr.value in ("min", "amin") else "max"), func.value
        return None

    def _size_subject(self, node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        """x for `x.any()`, `x.sum()`, `torch.any(x)`, `len(x)`, `x.numel()`,
        `x.count_nonzero()`, `x.shape[0]`, `x.size(0)`."""
        node = strip_parens(node)
        if isinstance(node, cst.Call):
            func = node.func
            if isinstance(func, cst.Name) and func.value == "len" and node.args:
                return node.args[0].value
            full = self.ctx.qualname(func)
            if full in ("torch.any", "torch.sum", "torch.count_nonzero", "torch.numel") and node.args:
                return node.args[0].value
            if isinstance(func, cst.Attribute) and full is None:
                if func.attr.value in ("any", "sum", "numel", "count_nonzero", "nelement", "item", "size", "float", "long", "int"):
                    if func.attr.value in ("item", "float", "long", "int"):
                        return self._size_subject(func.value) or None
                    return func.value
        if isinstance(node, cst.Subscript):
            base = strip_parens(node.value)
            if isinstance(base, cst.Attribute) and base.attr.value == "shape":
                return base.value
        return None

    def _mark_nonempty(self, subject: cst.BaseExpression, env: Env, line: int, reason: str, many: bool = False) -> None:
        key = dotted_name(strip_parens(subject))
        if key is None:
            return
        current = env.vars.get(key) or self.eval(subject, env)
        env.vars[key] = current.with_evidence(line, reason, nonempty=True)
        env.rels = env.rels | {(key, "nonempty", "many" if many else "one")}

    def _bound(self, subject: cst.BaseExpression, op: str, c: float, env: Env, line: int) -> None:
        reason = f"`{_code(self.ctx, subject)} {op} {c:g}`"
        inner = self._size_subject(subject)
        if inner is not None:
            if (op == ">" and c >= 0) or (op == ">=" and c >= 1) or (op == "!=" and c == 0):
                many = (op == ">" and c >= 1) or (op == ">=" and c >= 2)
                self._mark_nonempty(inner, env, line, f"guarded by {reason}", many)
        extreme = self._extreme_subject(subject)
        if extreme is not None:
            # `x.min() > 0` bounds every element from below; `x.max() < c` from above.
            which, inner_subject = extreme
            if (which == "min" and op in (">", ">=")) or (which == "max" and op in ("<", "<=")):
                subject = inner_subject
        key = dotted_name(strip_parens(subject))
        if key is None:
            return
        v = env.vars.get(key) or self.eval(subject, env)
        lo, hi, nonzero = v.lo, v.hi, v.nonzero
        if op == ">":
            lo = max(lo, c + 1 if v.integer or v.count else c)
            nonzero = nonzero or c >= 0
        elif op == ">=":
            lo = max(lo, c)
            nonzero = nonzero or c > 0
        elif op == "<":
            hi = min(hi, c - 1 if v.integer or v.count else c)
            nonzero = nonzero or c <= 0
        elif op == "<=":
            hi = min(hi, c)
            nonzero = nonzero or c < 0
        elif op == "==":
            lo, hi, nonzero = c, c, c != 0
        elif op == "!=" and c == 0:
            nonzero = True
        else:
            return
        if lo > hi:
            # The guard contradicts the value assumed here (`DIM = 0` at the top, `if DIM > 0:`:
            # a default the run sets otherwise): inside the branch the guard holds, and bounds.
            lo, hi = (lo, INF) if op in (">", ">=") else (-INF, hi)
        zero = None if nonzero else v.zero
        env.vars[key] = v.with_evidence(line, f"guarded by {reason}", lo=lo, hi=hi, nonzero=nonzero,
                                        zero=zero, nonempty=v.nonempty or (nonzero and v.count))

    # ------------------------------------------------------------------ expressions
    def eval(self, node: Optional[cst.BaseExpression], env: Env, depth: int = 24) -> Value:
        if node is None or depth <= 0:
            return TOP
        bare = strip_parens(node)
        if bare is not node:
            # Stripping parentheses makes a new node, which has no position: evidence found in
            # it is cited at the parenthesized one's line (the token list keeps both alive).
            self._token_of[id(bare)] = self.token(node)
            self._tokens.append(bare)
            node = bare
        number = number_value(node)
        if number is not None:
            return point(number)
        if isinstance(node, cst.Name):
            if node.value in env.vars:
                return env.vars[node.value]
            if node.value in self.classes:
                return Value(module_out=None, instance_of=None)
            if node.value in ("True", "False"):
                return point(1.0 if node.value == "True" else 0.0)
            module_env = self.module_env
            if module_env is not None and node.value in module_env.vars and env is not module_env:
                return module_env.vars[node.value]
            if node.value not in self.functions:
                return imports.name_value(self, node.value) or TOP
            return TOP
        if isinstance(node, cst.Attribute):
            key = dotted_name(node)
            if key is not None and key in env.vars:
                return env.vars[key]
            if isinstance(node.value, cst.Name) and node.value.value == "self":
                me = env.vars.get("self")
                if me is not None and me.instance_of:
                    attrs = self.attrs.get(me.instance_of) or {}
                    if node.attr.value not in attrs and me.instance_of not in self._attrs_done:
                        attrs = self.class_attrs(me.instance_of)
                    found = attrs.get(node.attr.value)
                    if found is not None:
                        return found
                return TOP
            if node.attr.value == "probs" and self.ctx.qualname(node) is None:
                # A distribution's `.probs` (`Categorical(probs=p).probs` is p).
                held = dict(self.eval(node.value, env, depth - 1).members or ()).get("probs")
                if held is not None:
                    return held
            if node.attr.value in ("T", "mT", "data", "values") and self.ctx.qualname(node) is None:
                inner = self.eval(node.value, env, depth - 1)
                out = transfer.passthrough([inner], {}, {}, 0)
                return transfer.gradient(out, node.attr.value, [inner], {}, self.token(node))
            finfo = _finfo_attribute(self.ctx, node)
            if finfo is not None:
                return finfo
            constant = _MATH_CONSTANTS.get(self.ctx.qualname(node) or "")
            if constant is not None:
                return point(constant)
            if node.attr.value in ("grad", "shape", "ndim", "dtype", "device") and self.ctx.qualname(node) is None:
                # A gradient read as data (optimizer code), or metadata: nothing to differentiate.
                what = "a `.grad` tensor" if node.attr.value == "grad" else f"`.{node.attr.value}`"
                return Value(nograd=Evidence(self.token(node), what))
            return TOP
        if isinstance(node, cst.Subscript):
            base = self.eval(node.value, env, depth - 1)
            if base.members is not None:
                # `self.heads["policy"]`, `self.layers[0]`: that member; another index: any.
                key = None
                if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
                    index = strip_parens(node.slice[0].slice.value)
                    if isinstance(index, cst.SimpleString):
                        key = index.evaluated_value
                    elif isinstance(index, cst.Integer):
                        key = str(int(index.value) % len(base.members)) if base.members else None
                    elif isinstance(index, cst.Slice):
                        return TOP
                found = dict(base.members).get(key) if key is not None else None
                return found or _join_members(base.members) or TOP
            if base.module_out is not None and not base.instance_of:
                # `nn.Sequential(...)[i]`: unknown member.
                return TOP
            out = replace(base, module_out=None, instance_of=None, count=False, simplex_dim=None)
            if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
                index = strip_parens(node.slice[0].slice.value)
                if isinstance(index, cst.Comparison) and len(index.comparisons) == 1:
                    cmp = index.comparisons[0]
                    bound = self.eval(cmp.comparator, env, depth - 1)
                    if _code(self.ctx, index.left) == _code(self.ctx, node.value):
                        if isinstance(cmp.operator, (cst.GreaterThan,)) and bound.lo >= 0 or (
                            isinstance(cmp.operator, cst.NotEqual) and bound.lo == bound.hi == 0
                        ) or (isinstance(cmp.operator, cst.GreaterThanEqual) and bound.lo > 0):
                            out = replace(out, nonzero=True, zero=None, lo=max(out.lo, 0.0))
            return out
        if isinstance(node, cst.ListComp):
            # `[softmax(f(o)).gather(1, a) for o, a in batch]`: a list of such elements.
            element = self._element(node, env, depth)
            if unknown(element):
                return TOP
            return Value(members=bag(_kept_in(element, self.token(node), "kept in a list")))
        if isinstance(node, (cst.Tuple, cst.List)):
            # Every element is evaluated (calls inside count: autocast callees, half models).
            elements = [self.eval(el.value, env, depth - 1) for el in node.elements]
            if any(isinstance(el, cst.StarredElement) for el in node.elements):
                return TOP
            # `return probs, logits` then `p, _ = f(x)` or `f(x)[0]`: each element by position.
            return Value(members=tuple((str(i), v) for i, v in enumerate(elements)))
        if isinstance(node, cst.Comparison):
            if self._compares_positions_to_lengths(node):
                return _length_mask(self.token(node), f"`{_code(self.ctx, node)}` keeps the first position of each sequence")
            v = _boolean(self.token(node))
            lifted = self._small_where(node, env, depth)
            if lifted is not None:
                v = replace(v, positive_where_zero=lifted)
            if len(node.comparisons) == 1 and isinstance(node.comparisons[0].operator, cst.Equal):
                left = _code(self.ctx, node.left)
                right = _code(self.ctx, node.comparisons[0].comparator)
                for src, _, member in (r for r in env.rels if r[1] == "∋"):
                    if {left, right} == {src, member}:
                        v = v.with_evidence(self.token(node), f"`{member}` is taken from `unique({src})`", nonempty=True)
            return v
        if isinstance(node, cst.IfExp):
            t = self.refine(node.test, env, True)
            f = self.refine(node.test, env, False)
            a = self.eval(node.body, t, depth - 1) if t is not None else None
            b = self.eval(node.orelse, f, depth - 1) if f is not None else None
            return join(a, b) or TOP
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.BitInvert):
            return _boolean(self.token(node))
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.BitAnd, cst.BitOr)):
            return _boolean(self.token(node))
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract):
            rel = self._relation(node.left, node.right, env)
            operands = [self.eval(node.left, env, depth - 1), self.eval(node.right, env, depth - 1)]
            out = transfer.apply("sub", operands, {}, {}, self.token(node)) or TOP
            if rel is not None:
                out = replace(out, lo=max(out.lo, 0.0)) if rel == ">=" else replace(out, hi=min(out.hi, 0.0))
                out = out.with_evidence(self.token(node), "the branch condition bounds this difference")
            elif operands[1].max_of is not None and operands[1].max_of == _code(self.ctx, node.left):
                out = replace(out, hi=min(out.hi, 0.0)).with_evidence(
                    self.token(node), f"shifted by the maximum of `{operands[1].max_of}`")
            return out
        op = match_op(node, self.ctx.qualname)
        if op is not None:
            return self._eval_op(op, node, env, depth)
        if isinstance(node, cst.Call):
            return self._eval_call(node, env, depth)
        return TOP

    def _compares_positions_to_lengths(self, node: cst.Comparison) -> bool:
        """`torch.arange(T)[None, :] < lengths[:, None]` (or `lengths[:, None] > positions`):
        True at the first `length` positions of each row."""
        if len(node.comparisons) != 1:
            return False
        operator = node.comparisons[0].operator
        right = node.comparisons[0].comparator
        if isinstance(operator, (cst.LessThan, cst.LessThanEqual)):
            positions, lengths = node.left, right
        elif isinstance(operator, (cst.GreaterThan, cst.GreaterThanEqual)):
            positions, lengths = right, node.left
        else:
            return False
        return self._positions(positions) and not self._positions(lengths)

    def _positions(self, expr: cst.BaseExpression, depth: int = 6) -> bool:
        """`expr` is `torch.arange(...)`, through names, indexing and shape-only methods."""
        for _ in range(depth):
            expr = strip_parens(expr)
            if isinstance(expr, cst.Name):
                value, _ = self.ctx.resolve(expr, None)
                if value is expr:
                    return False
                expr = value
            elif isinstance(expr, cst.Subscript):
                expr = expr.value
            elif isinstance(expr, cst.Call):
                if self.ctx.qualname(expr.func) == "torch.arange":
                    return True
                func = expr.func
                if not (isinstance(func, cst.Attribute) and func.attr.value in _INDEX_KEEPING):
                    return False
                expr = func.value
            else:
                return False
        return False

    def _relation(self, left, right, env: Env) -> Optional[str]:
        """">=" where `left - right >= 0` is known from a condition, "<=" where <= 0."""
        if not env.rels:
            return None
        l, r = _code(self.ctx, left), _code(self.ctx, right)
        for a, op, b in env.rels:
            if a == l and b == r:
                if op in (">", ">="):
                    return ">="
                if op in ("<", "<="):
                    return "<="
        return None

    def _eval_op(self, op, node, env: Env, depth: int) -> Value:
        args = [self.eval(a, env, depth - 1) for a in op.args]
        kw = {k: self.eval(v, env, depth - 1) for k, v in op.kwargs.items()}
        codes: Dict[str, str] = {}
        if op.name in _DIM_OPS:
            # Only these ops keep their dim (a simplex, a sum along it).
            codes = {k: _code(self.ctx, v) for k, v in op.kwargs.items() if k == "dim"}
            if len(op.args) > 1:
                codes["#1"] = _code(self.ctx, op.args[1])
        out = transfer.apply(op.name, args, kw, codes, self.token(node))
        if op.name in _SHIFTS and op.args:
            return replace(out or TOP, max_of=_code(self.ctx, _undetached(op.args[0])))
        if op.name in _NORMS and op.args and _euclidean(op):
            return replace(out or TOP, norm_of=_code(self.ctx, _undetached(op.args[0])))
        if op.name == "div" and len(args) == 2 and args[1].norm_of is not None:
            return self._over_norm(out or TOP, args, op.args[0], self.token(node))
        if op.name == "div" and len(args) == 2 and out is not None and self._uniform(op.args[0], op.args[1]):
            return replace(out, lo=max(out.lo, 0.0), nonzero=True).with_evidence(
                self.token(node), "a uniform distribution, 1 over its size")
        if op.name in ("mul", "add") and len(args) == 2 and out is not None:
            return self._lifted(op, out, args, self.token(node))
        if out is None:  # an op the table does not know: only its operands' gradient fact
            return transfer.gradient(TOP, op.name, args, kw, self.token(node))
        return out

    def _small_where(self, node: cst.Comparison, env: Env, depth: int) -> Optional[str]:
        """The tensor `x` where `node` is `x <= t` (t >= 0), `x < t` (t > 0) or `x == 0`: the
        mask is 1 wherever x is 0 (for x >= 0)."""
        if len(node.comparisons) != 1:
            return None
        operator = node.comparisons[0].operator
        if not isinstance(operator, (cst.LessThanEqual, cst.LessThan, cst.Equal)):
            return None
        bound = self.eval(node.comparisons[0].comparator, env, depth - 1)
        if isinstance(operator, cst.LessThanEqual) and bound.lo >= 0 or \
                isinstance(operator, cst.LessThan) and bound.lo > 0 or \
                isinstance(operator, cst.Equal) and bound.lo == bound.hi == 0:
            return _code(self.ctx, _undetached(node.left))
        return None

    def _lifted(self, op, out: Value, args: List[Value], line: int) -> Value:
        """`eps * (x <= eps)` keeps the mask's fact; `x + eps * (x <= eps)` with x >= 0 is
        never 0 (the conditional epsilon: a small value added only where x is small)."""
        for i in (0, 1):
            a, b = args[i], args[1 - i]
            if not (b.positive_where_zero and b.lo >= 0):
                continue
            if op.name == "mul" and a.lo > 0:
                return replace(out, positive_where_zero=b.positive_where_zero)
            if op.name == "add" and a.lo >= 0 and b.positive_where_zero == _code(self.ctx, _undetached(op.args[i])):
                return replace(out, lo=max(out.lo, 0.0), nonzero=True).with_evidence(
                    line, f"`{b.positive_where_zero}` lifted off 0 where it is small")
        return out

    def _uniform(self, numerator: cst.BaseExpression, divisor: cst.BaseExpression) -> bool:
        """`torch.ones(n) / n`: 1/n over a size n, never 0."""
        numerator = strip_parens(numerator)
        if not isinstance(numerator, cst.Call) or self.ctx.qualname(numerator.func) != "torch.ones":
            return False
        sizes = [a.value for a in numerator.args if a.keyword is None]
        if len(sizes) == 1 and isinstance(strip_parens(sizes[0]), (cst.Tuple, cst.List)):
            sizes = [e.value for e in strip_parens(sizes[0]).elements]
        return any(_code(self.ctx, s) == _code(self.ctx, divisor) for s in sizes)

    def _over_norm(self, out: Value, args: List[Value], numerator: cst.BaseExpression, line: int) -> Value:
        """A division by a norm: a dot product (or a cosine) over norms is a cosine (the
        division says the author means one), `x / <norm of x>` a unit vector."""
        a, b = args
        if a.dot or a.cosine:
            return replace(out, lo=-1.0, hi=1.0, cosine=True, dot=False).with_evidence(
                line, "a dot product divided by norms")
        if b.norm_of == _code(self.ctx, _undetached(numerator)):
            return replace(out, lo=-1.0, hi=1.0, unit=True, draw=a.draw).with_evidence(
                line, f"`{b.norm_of}` divided by its norm")
        return out

    def _eval_call(self, node: cst.Call, env: Env, depth: int) -> Value:
        ctx = self.ctx
        func = strip_parens(node.func)
        split = split_args(node.args)
        positional, keywords = split if split is not None else ([], {})
        full = ctx.qualname(func)
        line = self.token(node)
        called = last_name(func)
        if _LENGTH_MASK_HELPERS.match(called):
            return _length_mask(line, f"`{called}(...)` is True at each sequence's valid positions")
        if ctx.imported:
            # A name the file imports from its own project (analysis/imports.py).
            found = imports.call_value(self, node, env, line)
            if found is not None:
                return found
        if full is not None and full.split(".")[0] in _ARRAY_LIBRARIES:
            # NumPy and SciPy compute outside autograd: no gradient reaches their results.
            return Value(nograd=Evidence(line, f"a NumPy array (`{_code(ctx, func)}(...)`)"))
        if full in _DOT_CALLS:
            return replace(self._untracked(list(positional) + list(keywords.values()), env, depth, line), dot=True)
        if full is not None:
            return self._eval_torch(full, node, positional, keywords, env, depth, line)
        if isinstance(func, cst.Name):
            if func.value in _PYTHON_NUMBERS and func.value not in env.vars and func.value not in self.functions:
                return Value(nograd=Evidence(line, f"a Python number (`{func.value}(...)`)"))
            if func.value in ("sum", "max", "min") and len(positional) == 1 and func.value not in env.vars and \
                    isinstance(strip_parens(positional[0]), (cst.GeneratorExp, cst.ListComp)):
                # `sum(p.grad.norm() ** 2 for p in params)`: only whether the terms carry a gradient.
                return Value(nograd=self._element(strip_parens(positional[0]), env, depth).nograd)
            if func.value in self.functions:
                self._note_autocast(func.value, env, line)
                value = self.function_return(self.functions[func.value])
                return cited(value, line, f"returned by `{func.value}`")
            if func.value in self.classes:
                return Value(instance_of=func.value, evidence=(Evidence(line, f"`{func.value}` instance"),))
            callee = self.eval(func, env, depth - 1)
            return self._call_value(callee, _code(ctx, func), env, line)
        if isinstance(func, cst.Attribute):
            receiver = self.eval(func.value, env, depth - 1)
            name = func.attr.value
            if receiver.instance_of and (receiver.module_out is None):
                fn = self.method(receiver.instance_of, name)
                if fn is not None:
                    self._note_autocast(f"{receiver.instance_of}.{name}", env, line)
                    value = self.function_return(fn)
                    return cited(value, line, f"returned by `{receiver.instance_of}.{name}`")
                inherited = imports.inherited_method(self, receiver.instance_of, name, line)
                if inherited is not None:
                    return cited(inherited, line, f"returned by `{receiver.instance_of}.{name}`")
                if name in ("half", "bfloat16") or (name == "to" and any(
                    ctx.qualname(a) in ("torch.float16", "torch.half", "torch.bfloat16") for a in positional
                )):
                    self._note_half(receiver, node)
                    return replace(receiver, dtype="float16" if name != "bfloat16" else "bfloat16")
                if name in ("to", "cuda", "cpu", "eval", "train", "float"):
                    return receiver
                # A module held in an attribute: `self.act(x)` with `self.act = nn.Softmax(1)`.
                held = self.eval(func, env, depth - 1)
                if held.module_out is None and held.instance_of is None and held == TOP and (
                    isinstance(func.value, cst.Name) and func.value.value == "self"
                    and name in self.attrs.get(receiver.instance_of, {})
                ):
                    # A submodule built in the class (an encoder, a projection): its output
                    # is a learned feature, not a value that is exactly 0 in practice.
                    return Value(learned=True, evidence=(Evidence(line, f"output of `self.{name}`"),))
                return self._call_value(held, _code(ctx, func), env, line)
            if receiver.module_out is not None and name in ("to", "cuda", "cpu", "eval", "train", "half"):
                return receiver
            if name == "new_zeros":
                return Value(lo=0.0, hi=0.0, zero="zeros", nograd=Evidence(line, "made by `new_zeros`"))
            if name == "new_ones":
                return Value(lo=1.0, hi=1.0, nonzero=True, nograd=Evidence(line, "made by `new_ones`"))
            if name in transfer.NUMBER_METHODS or name in ("size", "dim", "numel"):
                return replace(receiver, module_out=None, instance_of=None, members=None,
                               nograd=Evidence(line, f"`.{name}()`"))
            if name in ("uniform_",):
                lo = self.eval(positional[0], env) if positional else point(0.0)
                hi = self.eval(positional[1], env) if len(positional) > 1 else point(1.0)
                v = interval(lo.lo, hi.hi).with_evidence(line, "`uniform_` bounds")
                return replace(v, zero=UNIFORM_ZERO) if v.lo <= 0 else v
            if name in transfer.OPS and name not in ("max", "sum", "mean"):
                args = [receiver] + [self.eval(a, env, depth - 1) for a in positional]
                kw = {k: self.eval(v, env, depth - 1) for k, v in keywords.items()}
                out = transfer.apply(name, args, kw, {}, line)
                return out if out is not None else TOP
            if name == "to":
                for a in positional + list(keywords.values()):
                    q = ctx.qualname(a)
                    if q in ("torch.float16", "torch.half"):
                        return replace(receiver, dtype="float16")
                    if q == "torch.bfloat16":
                        return replace(receiver, dtype="bfloat16")
                    if q in ("torch.float32", "torch.float"):
                        return replace(receiver, dtype="float32")
                return replace(receiver, module_out=None, instance_of=None)
            if name in ("type_as",):
                return receiver
            if name in ("masked_fill",) and len(positional) == 2:
                return self._masked_update(func.value, positional[0], receiver,
                                           self.eval(positional[1], env, depth - 1), env, line)
            return self._call_value(receiver, _code(ctx, func), env, line)
        if isinstance(func, (cst.Subscript, cst.Call)):
            # `self.heads["policy"](h)`, `self.layers[-1](x)`; a module built and called at
            # once: `nn.Softmax(dim=-1)(x)`, `nn.CosineSimilarity(dim=1)(a, b)`, `Policy(n)(obs)`.
            return self._call_value(self.eval(func, env, depth - 1), _code(ctx, func), env, line)
        return TOP

    def _call_value(self, callee: Value, spelled: str, env: Env, line: int) -> Value:
        """Calling a value: a module object (`self.act(x)`, `model(x)`)."""
        if callee.module_out is not None:
            out = callee.module_out
            if out.prob:
                return out.with_evidence(line, f"`{spelled}` output")
            return out
        if callee.instance_of:
            fn = self.method(callee.instance_of, "forward")
            if fn is None:
                inherited = imports.inherited_method(self, callee.instance_of, "forward", line)
                if inherited is not None:
                    return cited(inherited, line, f"`{callee.instance_of}.forward` via `{spelled}(...)`")
            if fn is not None:
                self._note_autocast(f"{callee.instance_of}.forward", env, line)
                value = self.function_return(fn)
                if callee.dtype in ("float16", "bfloat16"):
                    value = replace(value, dtype=callee.dtype)
                value = cited(value, line, f"`{callee.instance_of}.forward` via `{spelled}(...)`")
                if value.prob:
                    return value
                if unknown(value):
                    # A model's output with nothing more known: learned features.
                    return Value(learned=True, nograd=value.nograd, evidence=(Evidence(line, f"output of `{spelled}`"),))
                if value.members is not None:
                    # `return h, attn`: each unknown element is a learned feature too.
                    learned = Value(learned=True, evidence=(Evidence(line, f"output of `{spelled}`"),))
                    return replace(value, members=tuple(
                        (k, replace(learned, nograd=v.nograd) if unknown(v) else v) for k, v in value.members))
                return value
        return TOP

    def _note_autocast(self, name: str, env: Env, line: int) -> None:
        if env.autocast:
            self.autocast_callees.setdefault(name, Evidence(line, f"`{name}` is called under autocast"))

    def _eval_torch(self, full: str, node: cst.Call, positional, keywords, env: Env, depth: int, line: int) -> Value:
        short = full[len(_CREATION_PREFIX):] if full.startswith(_CREATION_PREFIX) else None
        if full in _MODULE_OPS:
            dim = keywords.get("dim") or (positional[0] if positional else None)
            codes = {"dim": _code(self.ctx, dim)} if dim is not None else {}
            out = transfer.apply(_MODULE_OPS[full], [TOP], {}, codes, line) or TOP
            if out.prob or out.cosine:
                out = replace(out, evidence=(Evidence(line, f"`{full.split('.')[-1]}` module"),))
            return Value(module_out=out)
        if full in _LEARNED_MODULES:
            return Value(module_out=Value(learned=True, evidence=(Evidence(line, f"`{full.split('.')[-1]}` output"),)))
        if full in _CONTAINERS and positional:
            last = self.eval(positional[-1], env, depth - 1)
            if last.module_out is not None:
                return Value(module_out=last.module_out)
            if last.instance_of:
                # The file's own module closes the Sequential: its `forward` gives the output.
                return Value(module_out=self._call_value(last, last.instance_of, env, line))
            return Value(module_out=TOP)
        if full in _MODULE_LISTS:
            return self._module_list(full, positional[0] if positional else None, env, depth)
        if full in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
            inner = self.eval(positional[0], env, depth - 1) if positional else TOP
            return trained(inner).with_evidence(line, "an `nn.Parameter`: moved by training", learned=True)
        if full in _DISTRIBUTIONS:
            return self._distribution(full, positional, keywords, env, depth, line)
        if full in _JOINING and positional:
            return self._joined_pieces(positional[0], env, depth)
        if full in ("torch.autograd.grad", "torch.autograd.functional.vjp"):
            # Gradients as values: differentiable only when built with `create_graph=True`.
            flag = keywords.get("create_graph")
            if flag is None or isinstance(flag, cst.Name) and flag.value == "False":
                return Value(nograd=Evidence(line, f"`{full}` without `create_graph`"))
            return TOP
        made = Evidence(line, f"made by `{full}` without `requires_grad`")
        if full in ("torch.linspace",) and len(positional) >= 2:
            a, b = self.eval(positional[0], env, depth - 1), self.eval(positional[1], env, depth - 1)
            v = interval(min(a.lo, b.lo), max(a.hi, b.hi), nograd=made).with_evidence(line, "`linspace` bounds")
            return self._requires_grad(v, keywords, line)
        if full == "torch.arange":
            # `arange(end)` starts at 0; `arange(start, end[, step])` at `start` when it counts up.
            start = self.eval(positional[0], env, depth - 1).lo if len(positional) >= 2 else 0.0
            step = self.eval(positional[2], env, depth - 1) if len(positional) >= 3 else point(1.0)
            lo = start if step.lo > 0 else -INF
            return Value(lo=lo, nonzero=lo > 0, integer=True, nograd=made)
        if full in ("torch.tensor", "torch.scalar_tensor", "torch.from_numpy") and positional:
            # A new leaf: its data is copied, its history is not.
            inner = replace(self.eval(positional[0], env, depth - 1), nograd=made)
            return self._requires_grad(inner, keywords, line)
        if full == "torch.as_tensor" and positional:
            return self._requires_grad(self.eval(positional[0], env, depth - 1), keywords, line)
        if full in ("torch.autograd.Variable", "torch.autograd.variable.Variable") and positional:
            # Pre-0.4 code wraps tensors in `Variable(x)`: the same values (and gradient).
            return self._requires_grad(self.eval(positional[0], env, depth - 1), keywords, line)
        if short in transfer.CREATION:
            lo, hi, zero = transfer.CREATION[short]
            v = Value(lo=lo, hi=hi, zero=zero, nonzero=lo > 0, nograd=made)
            if short in ("randn", "randn_like"):
                v = v.with_evidence(line, f"a Gaussian draw (`{full}`)", learned=True,
                                    draw=str(self.token(node)))
            dtype = self.ctx.precision.dtype_of(keywords.get("dtype")) if self.ctx.precision else None
            if dtype:
                v = replace(v, dtype=dtype)
            return self._requires_grad(v, keywords, line)
        if full in ("torch.full", "torch.full_like") and len(positional) >= 2:
            filled = replace(self.eval(positional[1], env, depth - 1), nograd=made)
            return self._requires_grad(filled, keywords, line)
        if full == "torch.where" and len(positional) == 3:
            return join(self.eval(positional[1], env, depth - 1), self.eval(positional[2], env, depth - 1)) or TOP
        if full in ("torch.maximum", "torch.fmax") and len(positional) == 2:
            a, b = (self.eval(p, env, depth - 1) for p in positional)
            lo = max(a.lo, b.lo)
            return Value(lo=lo, hi=max(a.hi, b.hi), nonzero=a.positive or b.positive or lo > 0)
        if full in ("torch.nn.functional.relu6", "torch.relu_", "torch.nn.functional.relu_") and positional:
            return transfer.apply("relu", [self.eval(positional[0], env, depth - 1)], {}, {}, line) or TOP
        if full == "torch.nn.functional.softmin" and positional:
            return transfer.softmax([TOP], {}, {}, line)
        if full in ("torch.tanh", "torch.nn.functional.tanh"):
            return transfer.tanh([TOP], {}, {}, line)
        if full in ("torch.bincount", "torch.histc", "torch.count_nonzero"):
            counted = transfer.apply("bincount", [], {}, {}, line) or TOP
            what = "value" if full == "torch.bincount" else "bin" if full == "torch.histc" else "row"
            return replace(counted, evidence=(Evidence(line, f"`{_code(self.ctx, node)}` counts: 0 for a {what} the data lacks"),))
        if full in ("torch.any", "torch.all", "torch.isfinite", "torch.isnan", "torch.logical_and",
                    "torch.logical_or", "torch.logical_not", "torch.isin", "torch.eq", "torch.ne",
                    "torch.gt", "torch.lt", "torch.ge", "torch.le"):
            return _boolean(line)
        if short is not None and short in transfer.OPS and positional:
            args = [self.eval(a, env, depth - 1) for a in positional]
            out = transfer.apply(short, args, {}, {}, line)
            return out if out is not None else TOP
        if full is not None and _TORCH_FUNCTION.match(full):
            return self._untracked(list(positional) + list(keywords.values()), env, depth, line)
        return TOP

    def _distribution(self, full: str, positional, keywords, env: Env, depth: int, line: int) -> Value:
        """`Categorical(probs=p)` / `Bernoulli(probs=p)`: `.probs` is p; with `logits=` it is the
        softmax (sigmoid) of the logits, as torch computes it."""
        kind = _DISTRIBUTIONS[full]
        probs = keywords.get("probs", positional[0] if positional else None)
        if probs is not None:
            held = self.eval(probs, env, depth - 1)
        elif keywords.get("logits") is not None:
            logits = self.eval(keywords["logits"], env, depth - 1)
            held = transfer.apply(kind, [logits], {}, {"dim": "-1"} if kind == "softmax" else {}, line) or TOP
        else:
            return TOP
        return Value(members=(("probs", _kept_in(held, line, f"the `.probs` of `{full.rsplit('.', 1)[-1]}`")),))

    def _untracked(self, operands: Sequence[cst.BaseExpression], env: Env, depth: int, line: int) -> Value:
        """A torch function the table does not know (`einsum`, `cross`, `cdist`): nothing about
        its values, but it differentiates only through its tensor arguments, so no gradient
        flows where none of them carries one (a value derived from detached ones)."""
        values = [self.eval(a, env, depth - 1) for a in operands
                  if not isinstance(strip_parens(a), (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString))]
        return transfer.gradient(TOP, None, values, {}, line)

    def _element(self, comp, env: Env, depth: int) -> Value:
        """What a comprehension's element holds (see `_comprehension_env`)."""
        return self.eval(comp.elt, self._comprehension_env(comp, env), depth - 1)

    def _joined_pieces(self, pieces: cst.BaseExpression, env: Env, depth: int) -> Value:
        """`torch.cat([a, b])`, `torch.stack([f(o) for o in obs])`: every element of the
        result is an element of one piece (their join); a simplex along a dim is not kept."""
        pieces = strip_parens(pieces)
        if isinstance(pieces, (cst.List, cst.Tuple)):
            # The display's value holds each piece by position (none for a starred one).
            held = self.eval(pieces, env, depth).members
            if not held:
                return TOP
            values = [v for _, v in held]
        elif isinstance(pieces, (cst.ListComp, cst.GeneratorExp)):
            values = [self._element(pieces, env, depth)]
        else:
            held = self._member_of(pieces, env)  # `torch.stack(probs)` of a filled list
            if held is None or held.members is not None:
                return TOP
            values = [held]
        joined = transfer.joined(values)
        return replace(joined, simplex_dim=None, module_out=None, instance_of=None, members=None)

    def _module_list(self, full: str, arg: Optional[cst.BaseExpression], env: Env, depth: int) -> Value:
        """`nn.ModuleList([a, b])`, `nn.ModuleList([Block() for _ in range(n)])`,
        `nn.ModuleDict({"policy": head, ...})`: the members, by index or key (unknown where
        the argument is not written out)."""
        if arg is None:
            return Value(members=())
        arg = strip_parens(arg)
        members: List[Tuple[str, Value]] = []
        if isinstance(arg, (cst.List, cst.Tuple)) and full.endswith("ModuleList"):
            for i, el in enumerate(arg.elements):
                if isinstance(el, cst.StarredElement):
                    return TOP
                members.append((str(i), self.eval(el.value, env, depth - 1)))
        elif isinstance(arg, cst.ListComp) and full.endswith("ModuleList"):
            # The same module built n times: one member stands for all (index any).
            members.append(("*", self._element(arg, env, depth)))
        elif isinstance(arg, cst.Dict) and full.endswith("ModuleDict"):
            for el in arg.elements:
                if not isinstance(el, cst.DictElement) or not isinstance(el.key, cst.SimpleString):
                    return TOP
                members.append((str(el.key.evaluated_value), self.eval(el.value, env, depth - 1)))
        else:
            return TOP
        return Value(members=tuple(members))

    def _requires_grad(self, v: Value, keywords, line: int) -> Value:
        flag = keywords.get("requires_grad")
        if isinstance(flag, cst.Name) and flag.value == "True":
            return trained(v).with_evidence(line, "`requires_grad=True`: moved by training")
        return v


def file_analysis(ctx: FileContext) -> FileAnalysis:
    return ctx.derived("analysis", lambda: FileAnalysis(ctx))


def probe_analysis(ctx: FileContext) -> FileAnalysis:
    """The analysis probes take their domains from: every call site of the file is trusted and
    a parameter no call passes has its default (callsites.py says why the rules' analysis is
    more careful)."""
    return ctx.derived("probe analysis", lambda: FileAnalysis(ctx, probing=True))


def enforced_analysis(ctx: FileContext) -> FileAnalysis:
    """The analysis without parameter defaults: what holds for any setting the code may be
    given (a constructor's `k=50` is unknown; what the file's calls pass still counts)."""
    return ctx.derived("enforced analysis", lambda: FileAnalysis(ctx, enforced=True))


def analyze_source(path: str, text: str, module: Optional[cst.Module] = None) -> FileAnalysis:
    """A fresh analysis of a file from its text alone (`module`: its syntax tree, when parsed):
    what the summaries of an imported file are computed on."""
    ctx = FileContext(path, text, module if module is not None else parse_module(text))
    ctx.precision = Precision(ctx)
    return FileAnalysis(ctx)


def _max_shifted(new: Value, shift: Value, key: Optional[str], line: int) -> Value:
    """`x -= m` / `x.sub_(m.unsqueeze(-1))` with m the maximum of x: the in-place max-shift
    leaves every entry <= 0."""
    if key is None or shift.max_of != key:
        return new
    return replace(new, hi=min(new.hi, 0.0)).with_evidence(line, f"shifted by the maximum of `{key}`")


def _kept_in(v: Value, line: int, why: str) -> Value:
    """`v` (and each member of a tuple `v`) with the evidence that it went through a list."""
    if v.members is not None:
        return replace(v, members=tuple((k, m if unknown(m) else m.with_evidence(line, why)) for k, m in v.members))
    return v.with_evidence(line, why)


def _join_members(members) -> Optional[Value]:
    out: Optional[Value] = None
    for _, v in members or ():
        out = join(out, v)
    return out


def _self_attribute_uses(fn: cst.FunctionDef) -> Tuple[Set[str], Set[str]]:
    """(the `self.x` a method mentions, those it fills: `self.x.append(...)`, `extend`,
    `insert`)."""
    read: Set[str] = set()
    filled: Set[str] = set()
    for node in descendants(fn):
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
            read.add(node.attr.value)
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value in ("append", "extend", "insert"):
            owner = node.func.value
            if isinstance(owner, cst.Attribute) and isinstance(owner.value, cst.Name) and owner.value.value == "self":
                filled.add(owner.attr.value)
    return read, filled


def _self_targets(fn: cst.FunctionDef) -> Set[str]:
    """The attributes a method assigns (`self.x = ...`, `self.x += ...`, `self.x: T = ...`)."""
    found: Set[str] = set()
    # A plain walk: a CSTVisitor's dispatch per node cost more than the rest of `_seed_init`.
    for node in descendants(fn):
        if isinstance(node, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)):
            target = node.target
            for t in [target] + ([e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else []):
                if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                    found.add(t.attr.value)
    return found


__all__ = ["FileAnalysis", "Env", "join_env"]
