"""The training loop's events in order: backward, optimizer and GradScaler steps, unscale,
update and gradient clips, and where each runs relative to the others.

Each function body (and the module's top level) is read as a sequence of events in source
order. Every event remembers where it sits: the chain of blocks (`for` body, `if` body,
`with` body...) and its statement's index in each.

Relations between events come from that position:
- `follows(a, b)`: some run of the code reaches `a` and then `b` in the same pass (they are
  not in exclusive branches such as the `if` and `else` of one statement);
- `dominates(a, b)`: `follows(a, b)`, and `a` is not inside a branch or loop below the
  block the two share, so every run that reaches `b` has run `a` first;
- `reached_after(a, b)`: once `a` has run, `b` runs (in `a`'s block or below it, or after
  the `with`/`try` blocks and loops that hold `a`).
NAN401-NAN403 are matchers on these events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from ..core.context import FileContext, dotted_name, last_name, node_code
from ..core.ops import number_value, split_args

# ---------------------------------------------------------------------------------- names

# A name token that says "optimizer": opt, opt_g, optimizerD, g_optim, optimizers[0] ...
# but not `opts`/`options` (command-line options) nor `adopt`.
_OPTIMIZER_TOKEN = re.compile(r"^(?:opt\d*|optims?\d*|optimi[sz]ers?\d*)$")
# Optimizer classes (torch.optim, bitsandbytes, apex, DeepSpeed, transformers, timm...).
_OPTIMIZER_CLASS = re.compile(
    r"^(?:Paged|Fused|DeepSpeedCPU|DeepSpeed|CPU|Sparse|Zero|Apex)?"
    r"(?:Adam|AdamW|SGD|SGDW|RMSprop|Adagrad|Adadelta|Adamax|NAdam|NAdamW|RAdam|LBFGS|Rprop|ASGD"
    r"|Adafactor|Lion|LAMB|Lamb|LARS|Lars|Muon|AdEMAMix|Sophia|AdaBelief|Adan|Novograd|NovoGrad)"
    r"(?:W)?(?:8bit|32bit|4bit)?$"
)
_CLIP_FUNCTIONS = {
    "clip_grad_norm_": "norm",
    "clip_grad_norm": "norm",  # deprecated spelling, same effect
    "clip_grad_value_": "value",
    "clip_grads_with_norm_": "norm",
}
_CLIP_METHODS = dict(_CLIP_FUNCTIONS, clip_gradients="norm")
_BACKWARD_METHODS = {"backward", "manual_backward"}
_UNCONDITIONAL = {"with", "try", "finally"}


def _tokens(name: str) -> List[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return [t for t in spaced.lower().split("_") if t]


def _last_name(node: cst.BaseExpression) -> Optional[str]:
    """`optimizer` for `self.optimizer`, `optimizers[0]`, `optimizer`."""
    while isinstance(node, cst.Subscript):
        node = node.value
    return last_name(node) or None


def _looks_like_optimizer(name: Optional[str]) -> bool:
    return name is not None and any(_OPTIMIZER_TOKEN.match(t) for t in _tokens(name))


def _looks_like_scaler(name: Optional[str]) -> bool:
    return name is not None and "scaler" in name.lower()


# ---------------------------------------------------------------------------------- events


@dataclass
class Event:
    kind: str  # "backward", "step", "scaler_step", "unscale", "update", "clip"
    call: cst.Call
    order: int
    # Per level: (block key, statement index, small-statement index; -1 = a compound
    # statement's header).
    path: Tuple[Tuple[object, int, int], ...]
    # How each deeper level was entered: "if", "else", "loop", "with", "try", "except"...
    entries: Tuple[str, ...]
    statement: cst.CSTNode  # the innermost statement (a line, a suite or a compound)
    small: Optional[cst.CSTNode]  # the small statement holding the call, if any
    receiver: Optional[str] = None  # the code of the object the method is called on
    scaled_by: Optional[str] = None  # backward: the scaler of `scaler.scale(loss).backward()`
    argument: Optional[cst.BaseExpression] = None  # scaler.step(optimizer): the optimizer
    clip_kind: Optional[str] = None  # "norm" or "value"
    clip_limit: Optional[float] = None
    clip_form: str = ""  # "function" or "method"

    @property
    def depth(self) -> int:
        return len(self.path)


def _key(event: Event, level: int) -> Tuple[int, int]:
    return event.path[level][1], event.path[level][2]


def _common_level(a: Event, b: Event) -> int:
    level = 0
    limit = min(a.depth, b.depth)
    while level + 1 < limit and a.path[level + 1][0] == b.path[level + 1][0]:
        level += 1
    return level


def follows(a: Event, b: Event) -> bool:
    """Some run reaches `a`, then `b` (not in exclusive branches)."""
    if a.order >= b.order or a.path[0][0] != b.path[0][0]:
        return False
    level = _common_level(a, b)
    ka, kb = _key(a, level), _key(b, level)
    if ka != kb:
        return ka < kb
    # Same statement at the shared level: the same small statement, or a compound whose
    # sub-blocks (if/else, try/except) we treat as exclusive.
    return a.depth == level + 1 and b.depth == level + 1


def dominates(a: Event, b: Event) -> bool:
    """Every run that reaches `b` has run `a` before (in this pass)."""
    if not follows(a, b):
        return False
    level = _common_level(a, b)
    return all(entry in _UNCONDITIONAL for entry in a.entries[level:])


def within_block_after(anchor: Event, other: Event) -> bool:
    """`other` is in `anchor`'s block (or nested below it) and after `anchor`."""
    level = anchor.depth - 1
    if other.depth <= level or other.path[level][0] != anchor.path[level][0]:
        return False
    ka, ko = _key(anchor, level), _key(other, level)
    return ko > ka or (ko == ka and other.order > anchor.order)


def reached_after(anchor: Event, other: Event) -> bool:
    """`other` runs after `anchor` once `anchor` has run: in its block (or nested below it),
    or after the `with`/`try` blocks and loops that hold `anchor` (not after an `if`)."""
    if within_block_after(anchor, other):
        return True
    if not follows(anchor, other):
        return False
    level = _common_level(anchor, other)
    return all(entry in _UNCONDITIONAL or entry == "loop" for entry in anchor.entries[level:])


class TrainingEvents:
    """What a file says about optimizers and scalers, and its events per region."""

    def __init__(self, ctx: FileContext):
        self.ctx = ctx
        self.optimizers: Dict[str, str] = {}  # chain -> class name
        # chain -> (qualified class, learning rate where a literal, the construction): what
        # `verify` runs the training step with, as the code builds it.
        self.optimizer_builds: Dict[str, Tuple[str, Optional[float], cst.Call]] = {}
        self.scalers: Set[str] = set()
        # Names that are not (working) GradScalers: `GradScaler(enabled=False)`,
        # `StandardScaler()`. Per region (function) for plain names; `self.x` file-wide.
        self.not_scalers: Dict[object, Set[str]] = {}
        self.regions: List[List[Event]] = []
        self._raw: List[Tuple[object, list]] = []
        self._walk_region(ctx.module.body, ("module", id(ctx.module)))
        self._classify()

    # ------------------------------------------------------------------ walking
    def _walk_region(self, body: Sequence[cst.CSTNode], key: object) -> None:
        raw: List[tuple] = []
        self._raw.append((key, raw))
        self._walk_block(body, key, (), (), raw, key)

    def _walk_block(self, statements, key, path, entries, raw, region) -> None:
        for index, stmt in enumerate(statements):
            if isinstance(stmt, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
                for j, small in enumerate(stmt.body):
                    self._note_assignment(small, region)
                    here = path + ((key, index, j),)
                    for call in _calls(small):
                        raw.append((call, here, entries, stmt, small))
            elif isinstance(stmt, cst.FunctionDef):
                self._walk_region(_body(stmt.body), ("def", id(stmt)))
            elif isinstance(stmt, cst.ClassDef):
                self._walk_region(_body(stmt.body), ("class", id(stmt)))
            else:
                header = path + ((key, index, -1),)
                for expr in _headers(stmt):
                    for call in _calls(expr):
                        raw.append((call, header, entries, stmt, None))
                inside = path + ((key, index, 0),)
                for entry, sub_key, sub_statements in _sub_blocks(stmt):
                    self._walk_block(
                        sub_statements, sub_key, inside, entries + (entry,), raw, region
                    )

    def _note_assignment(self, small: cst.CSTNode, region: object) -> None:
        if isinstance(small, cst.Assign):
            targets = [t.target for t in small.targets]
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            targets = [small.target]
        else:
            return
        value = small.value
        if not isinstance(value, cst.Call):
            return
        callee = _last_name(value.func)
        for target in targets:
            chain = dotted_name(target)
            if chain is None:
                continue
            if callee is not None and _OPTIMIZER_CLASS.match(callee):
                self.optimizers[chain] = callee
                split = split_args(value.args)
                lr = None
                if split is not None:
                    positional, keywords = split
                    lr = number_value(keywords["lr"]) if "lr" in keywords else (
                        number_value(positional[1]) if len(positional) > 1 else None)
                self.optimizer_builds[chain] = (self.ctx.qualname(value.func) or callee, lr, value)
            elif callee is not None and callee.endswith("GradScaler") and not _enabled_false(value):
                self.scalers.add(chain)
            elif callee is not None and callee.endswith("Scaler"):
                # `GradScaler(enabled=False)`, `scaler = StandardScaler()`: not a working
                # GradScaler.
                scope = "self" if chain.startswith("self.") else region
                self.not_scalers.setdefault(scope, set()).add(chain)

    # ------------------------------------------------------------------ classifying
    def is_optimizer(self, node: cst.BaseExpression) -> bool:
        chain = dotted_name(node)
        if chain is not None and chain in self.optimizers:
            return True
        return _looks_like_optimizer(_last_name(node))

    def is_scaler(self, node: cst.BaseExpression, region: object) -> bool:
        chain = dotted_name(node)
        if chain is None:
            return False
        scope = "self" if chain.startswith("self.") else region
        if chain in self.not_scalers.get(scope, ()):
            return False
        if chain in self.scalers:
            return True
        return _looks_like_scaler(chain.split(".")[-1])

    def optimizer_build(self, receiver: Optional[str]) -> Optional[Tuple[str, Optional[float], cst.Call]]:
        """How the file builds the optimizer `receiver` names (`optimizer`, `self.opt`):
        (qualified class, literal learning rate or None, the call), or None."""
        return self.optimizer_builds.get(receiver) if receiver is not None else None

    def optimizer_class(self, node: cst.BaseExpression) -> Optional[str]:
        chain = dotted_name(node)
        return self.optimizers.get(chain) if chain is not None else None

    def _classify(self) -> None:
        for region, raw in self._raw:
            events: List[Event] = []
            for order, (call, path, entries, stmt, small) in enumerate(raw):
                event = self._event(call, order, path, entries, stmt, small, region)
                if event is not None:
                    events.append(event)
            if events:
                self.regions.append(events)
        self._raw = []

    def _event(self, call, order, path, entries, stmt, small, region) -> Optional[Event]:
        func = call.func
        split = split_args(call.args)
        # `clip_grad_norm_(params, **cfg)` is still a clip, of a limit out of view; other
        # calls whose arguments cannot be read are not classified (below).
        positional, keywords = split if split is not None else ([], {})
        make = lambda kind, **kw: Event(kind, call, order, path, entries, stmt, small, **kw)  # noqa: E731
        full = self.ctx.qualname(func)
        if full is not None and full.startswith("torch."):
            name = full.rsplit(".", 1)[-1]
            if full == "torch.autograd.backward":
                return make("backward")
            if name in _CLIP_FUNCTIONS and full.startswith("torch.nn.utils"):
                return make(
                    "clip",
                    clip_kind=_CLIP_FUNCTIONS[name],
                    clip_limit=_clip_limit(positional, keywords, 1),
                    clip_form="function",
                )
            return None
        if isinstance(func, cst.Name):
            # A clip function imported from elsewhere (apex) or wrapped under its own name.
            if func.value in _CLIP_FUNCTIONS:
                return make(
                    "clip",
                    clip_kind=_CLIP_FUNCTIONS[func.value],
                    clip_limit=_clip_limit(positional, keywords, 1),
                    clip_form="function",
                )
            return None
        if not isinstance(func, cst.Attribute) or split is None:
            return None
        method = func.attr.value
        receiver = func.value
        code = node_code(receiver)
        if method in _BACKWARD_METHODS:
            scaled_by = None
            if (
                isinstance(receiver, cst.Call)
                and isinstance(receiver.func, cst.Attribute)
                and receiver.func.attr.value == "scale"
                and self.is_scaler(receiver.func.value, region)
            ):
                scaled_by = node_code(receiver.func.value)
            return make("backward", receiver=code, scaled_by=scaled_by)
        if method == "step":
            # Keyword options (`closure=`, a wrapper's `optimize_sparse_params=`) are still a step.
            if not positional and self.is_optimizer(receiver):
                return make("step", receiver=code)
            if len(positional) == 1 and self.is_scaler(receiver, region):
                return make("scaler_step", receiver=code, argument=positional[0])
            return None
        if method in ("unscale_", "unscale_gradients"):
            return make("unscale", receiver=code)
        if method == "update" and not positional and self.is_scaler(receiver, region):
            return make("update", receiver=code)
        if method in _CLIP_METHODS:
            start = 1 if len(positional) >= 2 else 0
            kind = _CLIP_METHODS[method]
            if method == "clip_gradients":
                kind = "value" if "clip_val" in keywords and "max_norm" not in keywords else "norm"
            return make(
                "clip",
                receiver=code,
                clip_kind=kind,
                clip_limit=_clip_limit(positional, keywords, start),
                clip_form="method",
            )
        return None


def _enabled_false(call: cst.Call) -> bool:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "enabled":
            return isinstance(arg.value, cst.Name) and arg.value.value == "False"
    return False


def _clip_limit(positional, keywords, index) -> Optional[float]:
    for name in ("max_norm", "clip_value", "clip_val", "gradient_clip_val"):
        if name in keywords:
            return number_value(keywords[name])
    if len(positional) > index:
        return number_value(positional[index])
    return None


def _body(block: cst.BaseSuite) -> Sequence[cst.CSTNode]:
    if isinstance(block, cst.IndentedBlock):
        return block.body
    return [block]  # a SimpleStatementSuite: one line of small statements


def _headers(stmt: cst.CSTNode) -> List[cst.CSTNode]:
    if isinstance(stmt, (cst.If, cst.While)):
        return [stmt.test]
    if isinstance(stmt, cst.For):
        return [stmt.iter]
    if isinstance(stmt, cst.With):
        return [item.item for item in stmt.items]
    if isinstance(stmt, cst.Match):
        return [stmt.subject]
    return []


def _sub_blocks(stmt: cst.CSTNode):
    """(entry kind, block key, statements) for each block a compound statement holds."""
    out = []
    if isinstance(stmt, cst.If):
        out.append(("if", id(stmt.body), _body(stmt.body)))
        if isinstance(stmt.orelse, cst.Else):
            out.append(("else", id(stmt.orelse.body), _body(stmt.orelse.body)))
        elif isinstance(stmt.orelse, cst.If):
            # `elif`: a block holding one `if` statement.
            out.append(("else", ("elif", id(stmt.orelse)), [stmt.orelse]))
    elif isinstance(stmt, (cst.For, cst.While)):
        out.append(("loop", id(stmt.body), _body(stmt.body)))
        if stmt.orelse is not None:
            out.append(("else", id(stmt.orelse.body), _body(stmt.orelse.body)))
    elif isinstance(stmt, cst.With):
        out.append(("with", id(stmt.body), _body(stmt.body)))
    elif isinstance(stmt, (cst.Try, cst.TryStar)):
        out.append(("try", id(stmt.body), _body(stmt.body)))
        for handler in stmt.handlers:
            out.append(("except", id(handler.body), _body(handler.body)))
        if stmt.orelse is not None:
            out.append(("else", id(stmt.orelse.body), _body(stmt.orelse.body)))
        if stmt.finalbody is not None:
            out.append(("finally", id(stmt.finalbody.body), _body(stmt.finalbody.body)))
    elif isinstance(stmt, cst.Match):
        for case in stmt.cases:
            out.append(("case", id(case.body), _body(case.body)))
    return out


def _calls(node: cst.CSTNode):
    """Calls inside `node` in evaluation order (arguments before the call), not entering
    lambdas, nested functions or classes."""
    out: List[cst.Call] = []

    def walk(n: cst.CSTNode) -> None:
        if isinstance(n, (cst.Lambda, cst.FunctionDef, cst.ClassDef)):
            return
        for child in n.children:
            walk(child)
        if isinstance(n, cst.Call):
            out.append(n)

    walk(node)
    return out


def training_events(ctx: FileContext) -> TrainingEvents:
    return ctx.derived("training facts", lambda: TrainingEvents(ctx))


def events_between(events: List[Event], a: Event, b: Event, kinds: Tuple[str, ...]) -> List[Event]:
    """Events of `kinds` between `a` and `b` in source order (in any branch)."""
    return [e for e in events if a.order < e.order < b.order and e.kind in kinds]


def scaled_backward(events: List[Event], target: Event) -> Optional[Event]:
    """The last `scaler.scale(loss).backward()` some run reaches before `target`, when no
    other backward runs between them on that run."""
    candidates = [
        e
        for e in events
        if e.kind == "backward" and e.order < target.order and follows(e, target)
    ]
    if not candidates:
        return None
    scaled = [e for e in candidates if e.scaled_by is not None]
    if not scaled:
        return None
    backward = scaled[-1]
    for other in candidates:
        if other.order > backward.order and follows(backward, other):
            return None  # a later backward on the same run: the gradient is not only scaled
    return backward


def until_next_backward(events: List[Event], anchor: Event) -> List[Event]:
    """Events after `anchor` up to the next backward that can run after it."""
    out: List[Event] = []
    for later in events:
        if later.order <= anchor.order:
            continue
        if later.kind == "backward" and follows(anchor, later):
            break
        out.append(later)
    return out


def clip_events(ctx: FileContext):
    """Every gradient clip of the file, with the events of the region it belongs to."""
    for events in training_events(ctx).regions:
        for event in events:
            if event.kind == "clip":
                yield event, events


__all__ = [
    "Event", "TrainingEvents", "clip_events", "dominates", "events_between", "follows", "reached_after",
    "scaled_backward", "training_events", "until_next_backward",
]
