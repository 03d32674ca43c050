"""Check a probed expression against the whitelist, then evaluate it without `eval`.

`check_expression` parses the text with `ast` and walks every node before anything runs:
each call must be a whitelisted torch/math function, a whitelisted tensor method or one of
a few builtins; each other name is an input the verifier generates; attributes may only be
whitelisted tensor attributes (`dtype`, `shape`) or declared input chains (`self.k`);
lambdas, comprehensions, f-strings, walrus, dunder or private attributes, `**kwargs`,
conditional expressions and string arithmetic are refused. The result is a
`CheckedExpression`, which `Interpreter` evaluates node by node: it never calls Python's
`eval`/`exec`/`compile`, and it re-checks at run time that methods are called on tensors and
attributes read from tensors or `torch.finfo` objects.
"""

from __future__ import annotations

import ast
import math
import operator
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from . import whitelist as W
from .budget import Budget, estimate

MAX_SOURCE_CHARS = 4000
MAX_NODES = 600
MAX_DEPTH = 60
MAX_ARGS = 8
MAX_SEQUENCE = 8
MAX_STRING = 40
MAX_INT = 2**31

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_FLAG_KEYWORDS = {"keepdim", "unbiased", "largest", "sorted", "descending", "requires_grad", "stable"}
_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,40}$")
# Methods an index passes through on its way to being one (`t.view(-1)` as a target is t).
_INDEX_PASS_THROUGH = {"view", "reshape", "flatten", "long", "int", "squeeze", "unsqueeze", "contiguous",
                       "to", "clone", "detach"}
_INPUT_NAME = re.compile(rf"^{_IDENT}(\.{_IDENT})*$")
# Attributes that describe a tensor: a declared "input" ending in one of these is a read of
# that attribute (the linter may list `x.dtype` among the free names of `finfo(x.dtype)`).
_DESCRIPTIVE = {"dtype", "shape", "ndim", "device"}


# What the checker lets a call name as its callee (anything else is refused).
_CALLABLE_KINDS = ("function", "method", "builtin", "filler")

class Refused(Exception):
    """The expression uses something outside the whitelist; nothing was run."""


class EvaluationError(Exception):
    """The expression was accepted but raised while running (a shape or dtype problem)."""


@dataclass
class CheckedExpression:
    source: str
    tree: ast.Expression
    # Free inputs in order of first use, and what each must be ("float", "bool", "index").
    inputs: Tuple[str, ...]
    roles: Dict[str, str]
    # Every operation is element by element: inputs can be one flat batch of points.
    elementwise: bool
    # Otherwise each point is a tensor of this rank (the dims the expression reduces over).
    rank: int
    # Domains implied by where an input is used (a target of binary_cross_entropy: [0, 1]).
    implied_domains: Dict[str, Tuple[float, float]] = field(default_factory=dict)
    # How each Name/Attribute/Call node is to be read (by id of the ast node).
    kinds: Dict[int, Tuple[str, Any]] = field(repr=False, default_factory=dict)
    functions: Tuple[str, ...] = ()


def _fresh(node: ast.AST, kinds: Dict[int, Tuple[str, Any]]) -> bool:
    """Whether `node` is a call of a creation function (its result aliases nothing)."""
    if not isinstance(node, ast.Call):
        return False
    dotted = _dotted(node.func)
    return dotted in W.FRESH_FUNCTIONS


def _dotted(node: ast.AST) -> Optional[str]:
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _is_dunder(name: str) -> bool:
    return any(p.startswith("__") or p.endswith("__") for p in name.split("."))


def validate_input_name(name: str) -> None:
    if not isinstance(name, str) or not _INPUT_NAME.match(name):
        raise Refused(f"input name {name!r} is not a name or attribute chain")
    if _is_dunder(name):
        raise Refused(f"input name {name!r} uses a dunder attribute")
    root = name.split(".")[0]
    if root in W.MODULE_ROOTS:
        raise Refused(f"input name {name!r} shadows the module {root}")
    if name in W.BUILTIN_FUNCTIONS:
        raise Refused(f"input name {name!r} shadows a builtin")


class _Checker:
    def __init__(self, declared: Sequence[str]):
        self.declared: Set[str] = set()
        for name in declared:
            validate_input_name(name)
            last = name.rsplit(".", 1)[-1]
            if "." in name and last in _DESCRIPTIVE:
                continue
            self.declared.add(name)
        self.inputs: List[str] = []
        self.roles: Dict[str, str] = {}
        self.kinds: Dict[int, Tuple[str, Any]] = {}
        self.functions: List[str] = []
        self.elementwise = True
        self.rank = 1
        self.nodes = 0
        self.implied: Dict[str, Tuple[float, float]] = {}
        self.locals: Set[str] = set()  # loop variables of a list comprehension

    # ----------------------------------------------------------------- helpers
    def _input(self, node: ast.AST, name: str, where: str = "value") -> None:
        if name not in self.inputs:
            self.inputs.append(name)
        # An input read only for its dtype, device or shape is "meta": its values never matter.
        if where == "meta":
            self.roles.setdefault(name, "meta")
        elif self.roles.get(name) in (None, "meta"):
            self.roles[name] = "float"
        self.kinds[id(node)] = ("input", name)

    def _input_name(self, node: ast.AST) -> Optional[str]:
        k = self.kinds.get(id(node))
        return k[1] if k and k[0] == "input" else None

    def _set_role(self, node: ast.AST, role: str) -> None:
        if role in ("index", "bool"):
            while True:  # `target[:, None]`, `t.view(-1)`, `m.to(device)` as an index or mask: the input
                if isinstance(node, ast.Subscript):  # `mask[:, None]` is still a mask
                    node = node.value
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and node.func.attr in _INDEX_PASS_THROUGH):
                    node = node.func.value
                else:
                    break
        name = self._input_name(node)
        if name is not None and self.roles.get(name, "float") == "float":
            self.roles[name] = role

    def _set_structural(self, node: ast.AST, role: str) -> None:
        """An input passed where an integer size or dim, a dtype, a device or a string goes
        is that, never a tensor (`x.unsqueeze(dim)`, `torch.linspace(a, b, n)`); a number
        (`linspace(-eta, 0, n)`) is one value per point."""
        if role == "scalar":
            for n in ast.walk(node):
                if self._input_name(n) is not None and self.roles.get(self._input_name(n)) == "float":
                    self.roles[self._input_name(n)] = "scalar"
            return
        name = self._input_name(node)
        if name is not None and self.roles.get(name, "float") in ("float", "meta"):
            self.roles[name] = role

    def _set_sizes(self, node: ast.AST) -> None:
        """A size argument, also one computed from inputs (`x.view(-1, side ** 2)`, `n * k`):
        every input in its arithmetic is a size."""
        if isinstance(node, ast.BinOp):
            self._set_sizes(node.left)
            self._set_sizes(node.right)
        elif isinstance(node, ast.UnaryOp):
            self._set_sizes(node.operand)
        else:
            self._set_structural(node, "size")

    def _imply(self, node: ast.AST, domain: Tuple[float, float]) -> None:
        while isinstance(node, ast.Subscript):  # `y[:, 0]` as a target: y's values
            node = node.value
        name = self._input_name(node)
        if name is not None:
            self.implied.setdefault(name, domain)

    def _dims(self, node: ast.AST) -> None:
        if isinstance(node, (ast.Name, ast.Attribute)):
            self._set_structural(node, "dim")
            return
        values: List[int] = []
        if isinstance(node, ast.Constant) and type(node.value) is int:
            values.append(node.value)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            if isinstance(node.operand, ast.Constant) and type(node.operand.value) is int:
                values.append(-node.operand.value)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for e in node.elts:
                self._dims(e)
            return
        for d in values:
            need = d + 1 if d >= 0 else -d
            self.rank = max(self.rank, min(need, 3))

    # ----------------------------------------------------------------- the walk
    def check(self, node: ast.AST, where: str = "value", depth: int = 0) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise Refused("expression too large")
        if depth > MAX_DEPTH:
            raise Refused("expression nested too deeply")
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise Refused(f"{_describe(node)} is not allowed")
        method(node, where, depth + 1)

    def _Expression(self, node: ast.Expression, where: str, depth: int) -> None:
        self.check(node.body, "value", depth)

    def _Constant(self, node: ast.Constant, where: str, depth: int) -> None:
        v = node.value
        if v is None or isinstance(v, bool) or type(v) is float:
            return
        if type(v) is int:
            if abs(v) > MAX_INT:
                raise Refused(f"integer constant {v} is too large")
            return
        if type(v) is str:
            if where != "arg":
                raise Refused("a string is only allowed as a function argument")
            if len(v) > MAX_STRING:
                raise Refused("string argument too long")
            return
        raise Refused(f"constant of type {type(v).__name__} is not allowed")

    def _Name(self, node: ast.Name, where: str, depth: int) -> None:
        name = node.id
        if _is_dunder(name):
            raise Refused(f"name `{name}` is not allowed (dunder)")
        if name in self.locals and where != "callee":
            self.kinds[id(node)] = ("local", name)
            return
        if where == "callee":
            if name in self.declared:
                raise Refused(f"input `{name}` is called as a function")
            if name in W.BUILTIN_FUNCTIONS:
                self.kinds[id(node)] = ("builtin", name)
                self.functions.append(name)
                if name in ("min", "max"):
                    self.elementwise = False
                return
            raise Refused(f"call to unknown function `{name}`")
        if name in W.MODULE_ROOTS:
            raise Refused(f"module `{name}` used as a value")
        if name in W.BUILTIN_FUNCTIONS:
            raise Refused(f"builtin `{name}` used as a value")
        self._input(node, name, where)

    def _Attribute(self, node: ast.Attribute, where: str, depth: int) -> None:
        dotted = _dotted(node)
        if dotted is not None and _is_dunder(dotted):
            raise Refused(f"attribute chain `{dotted}` uses a dunder attribute")
        if node.attr.startswith("_"):
            raise Refused(f"private attribute `.{node.attr}` is not allowed")
        if dotted is not None and dotted in self.declared:
            if where == "callee":
                raise Refused(f"input `{dotted}` is called as a function")
            self._input(node, dotted, where)
            return
        if dotted is not None and dotted.split(".")[0] in W.MODULE_ROOTS:
            self._module_name(node, dotted, where)
            return
        if where == "callee":
            # The receiver first: `__import__("os").system(...)` is refused for `__import__`.
            self.check(node.value, "value", depth)
            if node.attr in W.FILLERS and _fresh(node.value, self.kinds):
                self.kinds[id(node)] = ("filler", node.attr)
                self.functions.append("." + node.attr)
                return
            if node.attr.endswith("_"):
                raise Refused(f"in-place method `.{node.attr}()` is not allowed")
            if node.attr not in W.TENSOR_METHODS:
                raise Refused(f"method `.{node.attr}()` is not a whitelisted tensor method")
            self.kinds[id(node)] = ("method", node.attr)
            self.functions.append("." + node.attr)
            if node.attr not in W.TENSOR_METHODS_ELEMENTWISE:
                self.elementwise = False
            return
        self.check(node.value, "meta" if node.attr in _DESCRIPTIVE else "value", depth)
        if node.attr in W.TENSOR_ATTRIBUTES or node.attr in W.FINFO_ATTRIBUTES:
            self.kinds[id(node)] = ("attr", node.attr)
            if node.attr in ("values", "indices", "mT", "T", "shape", "ndim"):
                self.elementwise = False
            if node.attr in ("mT",):
                self.rank = max(self.rank, 2)
            return
        raise Refused(f"attribute `.{node.attr}` is not allowed here")

    def _module_name(self, node: ast.Attribute, dotted: str, where: str) -> None:
        for prefix, why in W.REFUSED_HINTS.items():
            if dotted == prefix or dotted.startswith(prefix + "."):
                raise Refused(f"`{dotted}` is not allowed ({why})")
        if where == "callee":
            if dotted.startswith("torch.Tensor."):
                m = dotted[len("torch.Tensor."):]
                if m in W.TENSOR_METHODS and not m.endswith("_"):
                    self.kinds[id(node)] = ("function", dotted)
                    self.functions.append(dotted)
                    if m not in W.TENSOR_METHODS_ELEMENTWISE:
                        self.elementwise = False
                    return
            if dotted in W.all_functions():
                self.kinds[id(node)] = ("function", dotted)
                self.functions.append(dotted)
                if dotted not in W.ELEMENTWISE_FUNCTIONS and dotted not in W.MATH_FUNCTIONS \
                        and dotted != W.FINFO_FUNCTION:
                    self.elementwise = False
                return
            raise Refused(f"call to `{dotted}` is not a whitelisted operation")
        if dotted in W.DTYPE_CONSTANTS:
            self.kinds[id(node)] = ("dtype", W.DTYPE_CONSTANTS[dotted])
            return
        if dotted in W.NUMBER_CONSTANTS:
            self.kinds[id(node)] = ("const", W.NUMBER_CONSTANTS[dotted])
            return
        raise Refused(f"`{dotted}` is not a whitelisted constant")

    def _Call(self, node: ast.Call, where: str, depth: int) -> None:
        if len(node.args) + len(node.keywords) > MAX_ARGS:
            raise Refused("too many arguments")
        self.check(node.func, "callee", depth)
        kind, what = self.kinds.get(id(node.func), (None, None))
        if kind not in _CALLABLE_KINDS:
            # `flow[3](h)`, `f(x)(y)`: a value called, not a whitelisted function or method.
            raise Refused("a call of something that is not a torch function or tensor method")
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise Refused("`*args` is not allowed")
            self.check(a, "arg", depth)
        for k in node.keywords:
            if k.arg is None:
                raise Refused("`**kwargs` is not allowed")
            if _is_dunder(k.arg):
                raise Refused(f"keyword `{k.arg}` is not allowed")
            self.check(k.value, "arg", depth)
        self._roles_and_dims(node, kind, what)

    def _roles_and_dims(self, node: ast.Call, kind: Optional[str], what: Any) -> None:
        # `args` lists the operands as the function form takes them (receiver first).
        if kind == "function":
            short = what.rsplit(".", 1)[-1]
            args = list(node.args)
            method_form = what.startswith("torch.Tensor.")
        elif kind == "method":
            short = what
            args = [node.func.value] + list(node.args)
            method_form = True
        else:
            return
        if short == "where" and len(args) >= 2:
            self._set_role(args[1] if method_form else args[0], "bool")
        if short == "masked_fill" and len(args) >= 2:
            self._set_role(args[1], "bool")
        if short.startswith("logical_"):
            for a in args:
                self._set_role(a, "bool")
        position = W.INDEX_ARGUMENTS.get(short)
        if position is not None and len(args) > position:
            self._set_role(args[position], "index")
        for k in node.keywords:
            if k.arg == "index" and short in W.INDEX_ARGUMENTS:
                self._set_role(k.value, "index")
        if kind == "function" and what in W.INDEX_TARGET_FUNCTIONS:
            target = args[1] if len(args) >= 2 else None
            for k in node.keywords:
                if k.arg == "target":
                    target = k.value
            if target is not None:
                self._set_role(target, "index")
        for table in (W.DIM_POSITION, W.DIM_POSITION_2):
            position = table.get(short)
            if position is not None and len(args) > position:
                self._dims(args[position])
        unit = W.UNIT_INTERVAL_ARGUMENTS.get(what) if kind == "function" else None
        if unit is not None:
            for i, a in enumerate(args):
                if i in unit:
                    self._imply(a, (0.0, 1.0))
            for k in node.keywords:
                if k.arg in unit:
                    self._imply(k.value, (0.0, 1.0))
        for k in node.keywords:
            if k.arg in ("dim", "axis", "dims", "dim0", "dim1", "dim2"):
                self._dims(k.value)
            elif k.arg in W.STRING_KEYWORDS:
                self._set_structural(k.value, "string:" + k.arg)
            elif k.arg == "dtype":
                self._set_structural(k.value, "dtype")
            elif k.arg == "device":
                self._set_structural(k.value, "device")
            elif k.arg in ("steps", "size", "num_classes", "repeats"):
                self._set_structural(k.value, "size")
            elif k.arg in _FLAG_KEYWORDS:
                self._set_structural(k.value, "flag")
        if short in W.SIZE_ARGUMENT_FUNCTIONS or short == "arange":
            sized = args[1:] if method_form else args
            for a in sized:
                for e in (a.elts if isinstance(a, (ast.Tuple, ast.List)) else [a]):
                    self._set_sizes(e)
        if short in ("linspace", "logspace") and len(args) > 2:
            self._set_structural(args[2], "size")
        if short in ("linspace", "logspace"):
            for a in args[:2]:  # start and end are numbers (0-dim per point)
                self._set_structural(a, "scalar")
        if kind == "function" and what in W.SPD_ARGUMENT_FUNCTIONS and args:
            for n in ast.walk(args[0]):  # a covariance: symmetric positive definite
                name = self._input_name(n)
                if name is not None and self.roles.get(name, "float") == "float":
                    self.roles[name] = "spd"
                    self.rank = max(self.rank, 2)
        if short == "permute" and method_form:
            self.rank = max(self.rank, min(len(args) - 1, 3))
        if short == "size" and method_form and len(args) == 2:
            self._dims(args[1])
        if short in ("to",):
            for a in list(node.args) + [k.value for k in node.keywords]:
                kind_a = self.kinds.get(id(a), ("", None))
                if kind_a[0] == "input":
                    # `x.to(other.device)` declared as an input, `x.to(dtype)`: a device or dtype.
                    self._set_structural(a, "device" if kind_a[1].endswith("device") else "dtype")
                    continue
                if not (kind_a[0] == "dtype" or (kind_a[0] == "attr" and kind_a[1] in ("dtype", "device"))):
                    raise Refused("`.to()` is only allowed with a dtype or a tensor's device")
            for k in node.keywords:
                if k.arg not in ("dtype", "device"):
                    raise Refused("`.to()` is only allowed with a dtype or a tensor's device")

    def _BinOp(self, node: ast.BinOp, where: str, depth: int) -> None:
        if type(node.op) not in _BINARY:
            raise Refused(f"operator {type(node.op).__name__} is not allowed")
        self.check(node.left, "value", depth)
        self.check(node.right, "value", depth)
        if isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            self._set_role(node.left, "bool")
            self._set_role(node.right, "bool")
        if isinstance(node.op, ast.MatMult):
            self.elementwise = False

    def _UnaryOp(self, node: ast.UnaryOp, where: str, depth: int) -> None:
        if type(node.op) not in _UNARY:
            raise Refused(f"operator {type(node.op).__name__} is not allowed")
        self.check(node.operand, "value", depth)
        if isinstance(node.op, ast.Invert):
            self._set_role(node.operand, "bool")

    def _Compare(self, node: ast.Compare, where: str, depth: int) -> None:
        if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARE:
            raise Refused("only a single <, <=, >, >=, == or != comparison is allowed")
        self.check(node.left, "value", depth)
        self.check(node.comparators[0], "value", depth)

    def _Subscript(self, node: ast.Subscript, where: str, depth: int) -> None:
        key = node.slice.value if isinstance(node.slice, ast.Constant) else None
        if isinstance(key, str):
            # `batch["mask"]`, `self.coeffs['bias']`: an entry of a dict the code holds is an input.
            base = _dotted(node.value)
            if base is None or not _KEY.match(key) or key.startswith("_") or base.split(".")[0] in W.MODULE_ROOTS:
                raise Refused("a string subscript is only allowed on an input name with a plain key")
            validate_input_name(base)
            self._input(node, f"{base}[{key!r}]", where)
            return
        self.elementwise = False
        self.check(node.value, "value", depth)
        self._index(node.slice, depth, top=True)
        # `p[:, 1]` needs points of rank 2 at least.
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        indexed = [e for e in parts if not (isinstance(e, ast.Constant) and (e.value is None or e.value is Ellipsis))]
        if not any(isinstance(e, ast.Constant) and e.value is Ellipsis for e in parts):
            self.rank = max(self.rank, min(len(indexed), 3))

    def _index(self, node: ast.AST, depth: int, top: bool = False, several: bool = False) -> None:
        """`x[mask]` takes a boolean mask; `x[rows, target]` takes integer indices."""
        if isinstance(node, ast.Slice):
            for part in (node.lower, node.upper, node.step):
                if part is not None:
                    self._index_number(part)
            return
        if isinstance(node, ast.Tuple) and top:
            if len(node.elts) > MAX_SEQUENCE:
                raise Refused("index too long")
            tensors = [e for e in node.elts if isinstance(e, (ast.Name, ast.Attribute, ast.Call))]
            for e in node.elts:
                self._index(e, depth, several=len(tensors) > 1)
            return
        if isinstance(node, ast.Constant) and (node.value is None or node.value is Ellipsis):
            return
        if isinstance(node, ast.Constant) and type(node.value) is int:
            self._index_number(node)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            self._index_number(node)
            return
        if isinstance(node, (ast.Name, ast.Attribute, ast.Compare, ast.Call, ast.BinOp, ast.UnaryOp)):
            self.check(node, "value", depth)
            if isinstance(node, (ast.Name, ast.Attribute)):
                self._set_role(node, "index" if several else "bool")
            return
        if isinstance(node, ast.Subscript):
            self.check(node, "value", depth)
            key = node.slice.value if isinstance(node.slice, ast.Constant) else None
            if isinstance(key, str):  # `x[batch["mask"]]`
                self._set_role_of_entry(node, "index" if several else "bool")
            else:  # `x[edges[1]]`: rows of an integer index tensor
                self._set_role(node, "index")
            return
        raise Refused(f"index {_describe(node)} is not allowed")

    def _set_role_of_entry(self, node: ast.AST, role: str) -> None:
        name = self._input_name(node)
        if name is not None and self.roles.get(name, "float") == "float":
            self.roles[name] = role

    def _index_number(self, node: ast.AST) -> None:
        """A slice bound or an integer index: a constant, or an integer expression of sizes
        (`x[:, :n]`, `x[: x.shape[0] // 2]`); an input there is a size."""
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            node = node.operand
        if isinstance(node, ast.Constant) and type(node.value) is int and abs(node.value) <= MAX_INT:
            return
        if isinstance(node, (ast.Name, ast.Attribute, ast.BinOp, ast.Call, ast.Subscript)):
            self.check(node, "value", 0)
            self._set_structural(node, "size")
            return
        raise Refused("slice bounds must be integers")

    def _ListComp(self, node: ast.ListComp, where: str, depth: int) -> None:
        """`[f(v) for v in (a, b)]`, `[x[i] for i in range(n)]`: one loop over at most
        MAX_SEQUENCE items (a literal tuple/list, or `range` of a small integer or a size), a
        plain loop variable, no condition; as an argument only (like a list)."""
        if where != "arg":
            raise Refused("a list comprehension is only allowed as a function argument")
        if len(node.generators) != 1:
            raise Refused("a list comprehension may have one `for` only")
        gen = node.generators[0]
        if gen.ifs or gen.is_async or not isinstance(gen.target, ast.Name) or _is_dunder(gen.target.id):
            raise Refused("a list comprehension needs a plain loop variable and no condition")
        it = gen.iter
        if isinstance(it, (ast.Tuple, ast.List)):
            self._sequence(it, "arg", depth)
        elif (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
              and len(it.args) == 1 and not it.keywords):
            self.kinds[id(it)] = ("range", None)
            self._index_number(it.args[0])
        else:
            raise Refused("a list comprehension may loop over a literal tuple/list or range(n) only")
        name = gen.target.id
        if name in self.declared or name in W.MODULE_ROOTS or name in W.BUILTIN_FUNCTIONS:
            raise Refused(f"loop variable `{name}` shadows an input or a name")
        self.locals.add(name)
        try:
            self.check(node.elt, "value", depth)
        finally:
            self.locals.discard(name)
        self.elementwise = False

    def _IfExp(self, node: ast.IfExp, where: str, depth: int) -> None:
        """`a if flag else b`: a flag input is a Python bool (True: the first branch is
        verified); a tensor condition raises when evaluated on a batch."""
        self.check(node.test, "value", depth)
        self._set_structural(node.test, "flag")
        self.check(node.body, where, depth)
        self.check(node.orelse, where, depth)

    def _Tuple(self, node: ast.Tuple, where: str, depth: int) -> None:
        self._sequence(node, where, depth)

    def _List(self, node: ast.List, where: str, depth: int) -> None:
        self._sequence(node, where, depth)

    def _sequence(self, node, where: str, depth: int) -> None:
        if where != "arg":
            raise Refused("a tuple or list is only allowed as a function argument")
        if len(node.elts) > MAX_SEQUENCE:
            raise Refused("sequence too long")
        for e in node.elts:
            if isinstance(e, ast.Starred):
                raise Refused("`*` unpacking is not allowed")
            self.check(e, "value", depth)


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.MatMult: operator.matmul,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
}
_INT_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
_COMPARE = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}

_NODE_WORDS = {
    "Lambda": "a lambda",
    "SetComp": "a set comprehension",
    "DictComp": "a dict comprehension",
    "GeneratorExp": "a generator expression",
    "JoinedStr": "an f-string",
    "FormattedValue": "an f-string",
    "NamedExpr": "an assignment expression (:=)",
    "BoolOp": "`and`/`or`",
    "Dict": "a dict",
    "Set": "a set",
    "Starred": "`*` unpacking",
    "Await": "await",
    "Yield": "yield",
    "YieldFrom": "yield",
}


def _describe(node: ast.AST) -> str:
    return _NODE_WORDS.get(type(node).__name__, f"syntax `{type(node).__name__}`")


def check_expression(source: str, declared_inputs: Sequence[str] = ()) -> CheckedExpression:
    """Parse and check `source`; raise Refused (nothing evaluated) if anything is not allowed."""
    if not isinstance(source, str) or not source.strip():
        raise Refused("empty expression")
    if len(source) > MAX_SOURCE_CHARS:
        raise Refused("expression too long")
    text = source.strip()
    try:
        tree = ast.parse(text if "\n" not in text else f"({text})", mode="eval")
    except SyntaxError as exc:
        raise Refused(f"not a Python expression: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError):
        raise Refused("not a Python expression") from None
    checker = _Checker(declared_inputs)
    try:
        checker.check(tree)
    except RecursionError:
        raise Refused("expression nested too deeply") from None
    for name in checker.inputs:
        validate_input_name(name.split("[", 1)[0])  # `batch['mask']`: its base is checked
    return CheckedExpression(
        source=source,
        tree=tree,
        inputs=tuple(checker.inputs),
        roles=dict(checker.roles),
        elementwise=checker.elementwise,
        rank=checker.rank,
        kinds=checker.kinds,
        functions=tuple(checker.functions),
        implied_domains=dict(checker.implied),
    )


_CASTS = {"float", "half", "bfloat16", "double", "to", "type_as"}


class Interpreter:
    """Evaluates a CheckedExpression with inputs bound to values, node by node.

    With `reference_dtype` set, it computes the float64 reference of a program written for
    that dtype: casts between floating dtypes (`.float()`, `.half()`, `.to(torch.float32)`,
    `dtype=torch.float32` arguments) keep float64, and `torch.finfo` of float64 answers for
    `reference_dtype` (an epsilon taken from `torch.finfo(x.dtype)` is a constant of the
    program, not of float64)."""

    def __init__(self, checked: CheckedExpression, reference_dtype: Any = None,
                 budget: Optional[Budget] = None):
        import torch

        self.torch = torch
        self.checked = checked
        self.reference_dtype = reference_dtype
        # Every op's size and work are bounded before it runs and checked after (budget.py).
        self.budget = budget if budget is not None else Budget()
        self._functions: Dict[str, Any] = {}
        # Where the inputs live: a tensor the probe makes from sizes alone (`torch.arange(n)`)
        # goes there too, or comparing it with a CUDA input fails on a GPU.
        self._device: Any = None

    def for_reference(self, dtype: Any) -> "Interpreter":
        return Interpreter(self.checked, reference_dtype=dtype, budget=self.budget)

    def _bounded(self, what: str, short: str, fn: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
                 receiver_first: Sequence[Any]) -> Any:
        """Run one op inside the budget: estimated before, measured after."""
        elements, flops = estimate(short, receiver_first, kwargs)
        self.budget.before(what, elements, flops)
        value = fn(*args, **kwargs)
        self.budget.after(what, value)
        return value

    def __call__(self, env: Mapping[str, Any]) -> Any:
        self._device = next((v.device for v in env.values() if isinstance(v, self.torch.Tensor)), None)
        try:
            return self._eval(self.checked.tree.body, env)
        except Refused:
            raise
        except EvaluationError:
            raise
        except (RuntimeError, TypeError, ValueError, IndexError, OverflowError,
                ZeroDivisionError, NotImplementedError, AttributeError) as exc:
            raise EvaluationError(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc

    def _function(self, qualname: str) -> Any:
        fn = self._functions.get(qualname)
        if fn is not None:
            return fn
        if qualname not in W.all_functions() and not qualname.startswith("torch.Tensor."):
            raise Refused(f"`{qualname}` is not whitelisted")
        parts = qualname.split(".")
        obj: Any = math if parts[0] == "math" else self.torch
        for p in parts[1:]:
            obj = getattr(obj, p)
        self._functions[qualname] = obj
        return obj

    def _eval(self, node: ast.AST, env: Mapping[str, Any]) -> Any:
        torch = self.torch
        kind = self.checked.kinds.get(id(node))
        if kind is not None and kind[0] in ("input", "local"):
            return env[kind[1]]
        if isinstance(node, ast.ListComp):
            return self._list_comp(node, env)
        if isinstance(node, ast.Constant):
            return node.value
        if kind is not None and kind[0] == "const":
            return kind[1]
        if kind is not None and kind[0] == "dtype":
            return getattr(torch, kind[1])
        if isinstance(node, ast.Call):
            return self._call(node, env)
        if isinstance(node, ast.Attribute) and kind is not None and kind[0] == "attr":
            value = self._eval(node.value, env)
            attr = node.attr
            if attr in W.FINFO_ATTRIBUTES and isinstance(value, torch.finfo):
                return getattr(value, attr)
            if attr in ("values", "indices") and type(value).__module__.startswith("torch.return_types"):
                return getattr(value, attr)
            if attr in W.TENSOR_ATTRIBUTES and isinstance(value, torch.Tensor):
                return getattr(value, attr)
            raise EvaluationError(f"`.{attr}` read from a {type(value).__name__}")
        if isinstance(node, ast.BinOp):
            left = self._eval(node.left, env)
            right = self._eval(node.right, env)
            short = "matmul" if isinstance(node.op, ast.MatMult) else "binary"
            return self._bounded(f"operator {type(node.op).__name__}", short,
                                 lambda a, b: self._binary(node.op, a, b), (left, right), {}, (left, right))
        if isinstance(node, ast.UnaryOp):
            value = self._eval(node.operand, env)
            if not isinstance(value, (torch.Tensor, int, float, bool)):
                raise EvaluationError("unary operator on a non-number")
            return _UNARY[type(node.op)](value)
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, env)
            right = self._eval(node.comparators[0], env)
            for v in (left, right):
                if not isinstance(v, (torch.Tensor, int, float, bool)):
                    raise EvaluationError("comparison of non-numbers")
            return _COMPARE[type(node.ops[0])](left, right)
        if isinstance(node, ast.IfExp):
            test = self._eval(node.test, env)
            if isinstance(test, torch.Tensor):
                if test.numel() != 1:
                    raise EvaluationError("a conditional expression on a tensor of several elements")
                test = bool(test)
            if not isinstance(test, (bool, int, float)):
                raise EvaluationError("a conditional expression on something that is not a number")
            return self._eval(node.body if test else node.orelse, env)
        if isinstance(node, ast.Subscript):
            value = self._eval(node.value, env)
            if type(value).__module__.startswith("torch.return_types"):
                index = self._eval(node.slice, env)
                if type(index) is not int or index not in (0, 1, -1, -2):
                    raise EvaluationError("a (values, indices) pair is indexed by 0 or 1 only")
                return value[index]
            if not isinstance(value, (torch.Tensor, torch.Size)):
                raise EvaluationError(f"subscript of a {type(value).__name__}")
            index = self._index(node.slice, env)
            result = value[index]
            self.budget.after("indexing", result)
            return result
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self._eval(e, env) for e in node.elts)
        raise Refused(f"{_describe(node)} is not allowed")

    def _list_comp(self, node: ast.ListComp, env: Mapping[str, Any]) -> Any:
        gen = node.generators[0]
        if self.checked.kinds.get(id(gen.iter), ("",))[0] == "range":
            n = self._eval(gen.iter.args[0], env)
            if type(n) is not int or not 0 <= n <= MAX_SEQUENCE:
                raise EvaluationError(f"range() of a list comprehension must be an integer up to {MAX_SEQUENCE}")
            items: Sequence[Any] = list(range(n))
        else:
            items = self._eval(gen.iter, env)
        out = []
        for item in items:
            inner = dict(env)
            inner[gen.target.id] = item
            out.append(self._eval(node.elt, inner))
        return tuple(out)

    def _index(self, node: ast.AST, env: Mapping[str, Any]) -> Any:
        torch = self.torch
        if isinstance(node, ast.Slice):
            parts = [None if p is None else self._eval(p, env) for p in (node.lower, node.upper, node.step)]
            for part in parts:
                if part is not None and type(part) is not int:
                    raise EvaluationError(f"slice bound of type {type(part).__name__}")
            return slice(*parts)
        if isinstance(node, ast.Tuple):
            return tuple(self._index(e, env) for e in node.elts)
        value = self._eval(node, env)
        if value is None or value is Ellipsis or type(value) is int or isinstance(value, torch.Tensor):
            return value
        raise EvaluationError(f"index of type {type(value).__name__}")

    def _reference_cast(self, value: Any) -> Any:
        """A cast in the reference: everything stays (or becomes) float64."""
        return _reference_cast_impl(self.torch, value)

    def _binary(self, op: ast.operator, left: Any, right: Any) -> Any:
        torch = self.torch
        numbers = (int, float, bool)
        for v in (left, right):
            if not isinstance(v, (torch.Tensor,) + numbers):
                raise EvaluationError(f"arithmetic on a {type(v).__name__}")
        if isinstance(left, numbers) and isinstance(right, numbers):
            if (type(left) is int and type(right) is int
                    and (type(op) in _INT_OPS or (isinstance(op, ast.Pow) and 0 <= right <= 64))
                    and not (isinstance(op, (ast.FloorDiv, ast.Mod)) and right == 0)):
                # Sizes and indices (`n // 2`, `x.shape[0] - 1`, `side ** 2`) stay integers
                # while small (a power only with a small exponent: it cannot hang).
                value = _BINARY[type(op)](left, right)
                if abs(value) <= MAX_INT:
                    return value
            # Python numbers: compute in float so that `10 ** 10 ** 10` cannot hang.
            a, b = float(left), float(right)
            if isinstance(op, (ast.BitAnd, ast.BitOr, ast.BitXor, ast.MatMult)):
                raise EvaluationError("bitwise operator on numbers")
            try:
                return _BINARY[type(op)](a, b)
            except OverflowError:
                return math.inf
        return _BINARY[type(op)](left, right)

    def _call(self, node: ast.Call, env: Mapping[str, Any]) -> Any:
        torch = self.torch
        kind, what = self.checked.kinds[id(node.func)]
        args = [self._eval(a, env) for a in node.args]
        kwargs = {k.arg: self._eval(k.value, env) for k in node.keywords}
        for v in list(args) + list(kwargs.values()):
            _check_argument(torch, v)
        if self.reference_dtype is not None:
            wanted = kwargs.get("dtype")
            if isinstance(wanted, torch.dtype) and wanted.is_floating_point:
                kwargs["dtype"] = torch.float64  # `softmax(x, dtype=torch.float32)` in float64
        device = kwargs.get("device")
        if device is not None and not isinstance(device, torch.device):
            raise EvaluationError("device= only with a tensor's device")
        if (kind == "function" and what in W.FROM_SIZES_FUNCTIONS and device is None
                and self._device is not None and self._device.type != "cpu"):
            kwargs["device"] = self._device
        if kind == "function" and what in W.RANDOM_FUNCTIONS:
            return self._bounded(what, what.rsplit(".", 1)[-1], lambda *a, **k: self._random(node, what, a, k),
                                 args, kwargs, args)
        if kind == "function" and what in ("torch.empty", "torch.empty_like"):
            what = what.replace("empty", "zeros")  # never uninitialized memory
        if kind == "function" and what in W.FRESH_FUNCTIONS:
            kwargs.pop("requires_grad", None)  # a new leaf: whether it trains does not change values
        if kind == "filler":
            receiver = self._eval(node.func.value, env)
            return self._fill(node, what, receiver, args, kwargs)
        if kind == "function":
            fn = self._function(what)
            if what == W.FINFO_FUNCTION:
                if len(args) != 1 or kwargs or not isinstance(args[0], torch.dtype):
                    raise EvaluationError("torch.finfo takes one dtype")
                if self.reference_dtype is not None and args[0] == torch.float64:
                    args = [self.reference_dtype]
            method = what.rsplit(".", 1)[-1]
            if (self.reference_dtype is not None and what.startswith("torch.Tensor.") and method in _CASTS
                    and args and isinstance(args[0], torch.Tensor)
                    and _to_floating(torch, method, args[1:], kwargs)):
                return self._reference_cast(args[0])
            if what.startswith("torch.Tensor.") and (not args or not isinstance(args[0], torch.Tensor)):
                raise EvaluationError(f"{what} called on a non-tensor")
            if what in W.SIZED_FUNCTIONS:
                _check_size(torch, what, args, kwargs)
            return self._bounded(what, method, fn, args, kwargs, args)
        if kind == "method":
            receiver = self._eval(node.func.value, env)
            if not isinstance(receiver, torch.Tensor):
                raise EvaluationError(f"method `.{what}()` called on a {type(receiver).__name__}")
            if what == "to":
                if any(not isinstance(a, (torch.dtype, torch.device)) for a in args) or set(kwargs) - {"dtype", "device"}:
                    raise EvaluationError("`.to()` only with a dtype or a tensor's device")
                if any(isinstance(a, torch.device) and a != receiver.device for a in args):
                    raise EvaluationError("`.to()` another device")
            if what == "new_empty":
                what = "new_zeros"  # never uninitialized memory
            if self.reference_dtype is not None and what in _CASTS and _to_floating(torch, what, args, kwargs):
                return self._reference_cast(receiver)
            return self._bounded(f".{what}()", what, getattr(receiver, what), args, kwargs,
                                 [receiver] + list(args))
        if kind == "builtin":
            for v in args:
                if isinstance(v, str) and what != "float":
                    raise EvaluationError(f"{what}() of a string")
            if what == "float" and args and isinstance(args[0], str):
                if args[0].strip().lower() not in ("inf", "-inf", "+inf", "nan", "infinity", "-infinity"):
                    raise EvaluationError("float() of a string other than inf/nan")
            if kwargs:
                raise EvaluationError(f"{what}() with keywords")
            if what == "len" and (len(args) != 1 or not isinstance(args[0], torch.Tensor)):
                raise EvaluationError("len() of something that is not a tensor")
            return {"float": float, "int": int, "abs": abs, "min": min, "max": max, "len": len}[what](*args)
        raise Refused("call of something that is not a function")


def _seed(node: ast.AST) -> int:
    """A random call's seed: a function of its text (the same call inlined twice draws the same)."""
    return zlib.crc32(ast.dump(node, annotate_fields=False).encode("utf-8"))


def _generator(torch: Any, node: ast.AST) -> Any:
    return torch.Generator().manual_seed(_seed(node))


def _random_impl(self: "Interpreter", node: ast.AST, what: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """rand/randn/randint(_like) drawn in float64 on the CPU from a seeded generator, then
    cast: every context and the float64 reference see the same draws (rounded)."""
    torch = self.torch
    kwargs = dict(kwargs)
    dtype = kwargs.pop("dtype", None)
    device = kwargs.pop("device", None)
    kwargs.pop("requires_grad", None)  # a new leaf: whether it trains does not change values
    if kwargs.pop("generator", None) is not None:
        raise EvaluationError(f"{what}: a generator argument is not allowed")
    short = what.rsplit(".", 1)[-1]
    g = _generator(torch, node)
    if short in ("rand_like", "randn_like"):
        if len(args) != 1 or not isinstance(args[0], torch.Tensor) or kwargs:
            raise EvaluationError(f"{what} takes one tensor")
        like = args[0]
        draw = (torch.rand if short == "rand_like" else torch.randn)(tuple(like.shape), generator=g, dtype=torch.float64)
        return draw.to(dtype=dtype or like.dtype, device=device or like.device)
    if short == "randint":
        out = torch.randint(*args, generator=g, **kwargs)
        return out.to(device=device) if device is not None else out
    sizes = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else args
    if kwargs or any(type(n) is not int for n in sizes):
        raise EvaluationError(f"{what} takes integer sizes")
    draw = (torch.rand if short == "rand" else torch.randn)(tuple(sizes), generator=g, dtype=torch.float64)
    target = dtype if dtype is not None else torch.get_default_dtype()
    if self.reference_dtype is not None and target.is_floating_point:
        target = torch.float64
    return draw.to(dtype=target, device=device) if device is not None else draw.to(dtype=target)


def _fill_impl(self: "Interpreter", node: ast.Call, what: str, receiver: Any, args: Sequence[Any],
               kwargs: Mapping[str, Any]) -> Any:
    """`fresh.uniform_(a, b)` and friends, out of place (the receiver is a new tensor)."""
    torch = self.torch
    if not isinstance(receiver, torch.Tensor):
        raise EvaluationError(f".{what}() on a non-tensor")
    values = list(args) + [kwargs[k] for k in ("from", "to", "mean", "std", "value") if k in kwargs]
    if any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in values):
        raise EvaluationError(f".{what}() takes numbers")
    g = _generator(torch, node)
    shape = tuple(receiver.shape)
    first = float(values[0]) if values else (0.0)
    second = float(values[1]) if len(values) > 1 else 1.0
    if what == "uniform_":
        out = first + (second - first) * torch.rand(shape, generator=g, dtype=torch.float64)
    elif what == "normal_":
        out = first + second * torch.randn(shape, generator=g, dtype=torch.float64)
    elif what == "fill_":
        if len(values) != 1:
            raise EvaluationError(".fill_() takes one number")
        return torch.full_like(receiver, values[0])
    else:
        return torch.zeros_like(receiver)
    return out.to(dtype=receiver.dtype, device=receiver.device)


def _check_size(torch: Any, what: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """`torch.arange(n)`, `one_hot(t, n)`: n must be a small integer."""
    sizes = list(args) + list(kwargs.values())
    if what in ("torch.histc", "torch.bincount"):
        sizes = [v for k, v in kwargs.items() if k in ("bins", "minlength")] + list(args[1:2])
        if what == "torch.bincount" and args and isinstance(args[0], torch.Tensor) and args[0].numel():
            if int(args[0].max()) > W.MAX_SIZE:
                raise EvaluationError("bincount of values larger than the size limit")
    if what == "torch.nn.functional.one_hot":
        sizes = list(args[1:]) + [kwargs.get("num_classes")]
        if not any(isinstance(v, int) for v in sizes):
            raise EvaluationError("one_hot needs an explicit num_classes here")
    for v in sizes:
        if v is None or isinstance(v, (torch.dtype, torch.device)):
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise EvaluationError(f"{what}: a size argument must be an integer constant, "
                                  "not a generated input")
        if abs(v) > W.MAX_SIZE:
            raise EvaluationError(f"{what} size {v} is larger than {W.MAX_SIZE}")


def _to_floating(torch: Any, method: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether a cast method converts to a floating dtype."""
    if method in ("float", "half", "bfloat16", "double"):
        return True
    if method == "to":
        target = args[0] if args else kwargs.get("dtype")
        return isinstance(target, torch.dtype) and target.is_floating_point
    if method == "type_as":
        return bool(args) and isinstance(args[0], torch.Tensor) and args[0].is_floating_point()
    return False


def _reference_cast_impl(torch: Any, value: Any) -> Any:
    return value if value.dtype == torch.float64 else value.to(torch.float64)


def _check_argument(torch: Any, value: Any) -> None:
    """Arguments may only be tensors, numbers, strings, dtypes, None, tuples of those."""
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor, torch.dtype, torch.device)):
        return
    if isinstance(value, (tuple, list, torch.Size)):
        for v in value:
            _check_argument(torch, v)
        return
    raise EvaluationError(f"argument of type {type(value).__name__} is not allowed")


Interpreter._random = _random_impl
Interpreter._fill = _fill_impl
