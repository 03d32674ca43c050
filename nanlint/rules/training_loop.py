"""NAN401-NAN403: the order of backward, clip and step in a training loop.

The events and their order come from `analysis/training_events.py`. A rule fires only where
the hazardous order is certain enough (`follows` or `reached_after` for the finding,
`dominates` before offering a fix), and any event that may come between in source order
(a `backward`, an `unscale_`) silences it: precision over count.
"""

from __future__ import annotations

from typing import List, Optional, Set, Tuple

import libcst as cst

from ..analysis.training_events import (
    Event,
    TrainingEvents,
    clip_events,
    dominates,
    events_between,
    follows,
    reached_after,
    scaled_backward,
    training_events,
    until_next_backward,
)
from ..core.context import FileContext, dotted_name
from ..core.diagnostics import Edit, Position, Probe
from .base import UNSAFE, Rule

# Receivers whose clip unscales the gradient by itself (Accelerate, Lightning Fabric,
# LightningModule.clip_gradients).
_SELF_UNSCALING = ("accelerator", "fabric")

def _short_code(ctx: FileContext, node: cst.CSTNode, fallback: str, limit: int = 60) -> str:
    """The node's code for a message, or `fallback` where it spans lines or runs long."""
    code = ctx.code(node)
    return fallback if "\n" in code or len(code) > limit else code


def _cited(ctx: FileContext, event: Event, fallback: str) -> str:
    """`optimizer.step()` (line 58): the event's code and line, for a message to cite."""
    return f"`{_short_code(ctx, event.call, fallback)}` (line {ctx.span(event.call)[0].row})"


def _unscale_call(ctx: FileContext, scaler_step: Event) -> str:
    """`scaler.unscale_(opt)` for the `scaler.step(opt)` that follows the clip."""
    argument = scaler_step.argument
    optimizer = _short_code(ctx, argument, "optimizer", 40) if argument is not None else "optimizer"
    return f"{scaler_step.receiver}.unscale_({optimizer})"


# ---------------------------------------------------------------------------------- editing


def _single_line(event: Event) -> Optional[cst.SimpleStatementLine]:
    """The event's statement when it is a line holding this one small statement."""
    stmt = event.statement
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and event.small is not None:
        return stmt
    return None


def _attached_comment_rows(stmt: cst.SimpleStatementLine) -> int:
    """How many comment lines sit directly above `stmt` (no blank line between)."""
    count = 0
    for line in reversed(stmt.leading_lines):
        if line.comment is None:
            break
        count += 1
    return count


def _names_read(node: cst.CSTNode) -> Set[str]:
    found: Set[str] = set()

    def walk(n: cst.CSTNode) -> None:
        chain = dotted_name(n) if isinstance(n, (cst.Name, cst.Attribute)) else None
        if chain is not None:
            found.add(chain)
            return
        if isinstance(n, cst.Attribute):
            walk(n.value)
            return
        for child in n.children:
            walk(child)

    walk(node)
    return found


def _names_assigned(node: cst.CSTNode) -> Set[str]:
    found: Set[str] = set()

    def add_target(t: cst.CSTNode) -> None:
        chain = dotted_name(t) if isinstance(t, (cst.Name, cst.Attribute)) else None
        if chain is not None:
            found.add(chain)
        elif isinstance(t, (cst.Tuple, cst.List)):
            for element in t.elements:
                add_target(element.value)
        elif isinstance(t, cst.StarredElement):
            add_target(t.value)
        elif isinstance(t, cst.Subscript):
            add_target(t.value)

    def walk(n: cst.CSTNode) -> None:
        if isinstance(n, cst.Assign):
            for t in n.targets:
                add_target(t.target)
        elif isinstance(n, (cst.AnnAssign, cst.AugAssign)):
            add_target(n.target)
        elif isinstance(n, cst.NamedExpr):
            add_target(n.target)
        elif isinstance(n, cst.For):
            add_target(n.target)
        elif isinstance(n, cst.AsName):
            add_target(n.name)
        elif isinstance(n, (cst.FunctionDef, cst.ClassDef)):
            found.add(n.name.value)
        for child in n.children:
            walk(child)

    walk(node)
    return found


def _overlap(chains_a: Set[str], chains_b: Set[str]) -> bool:
    for a in chains_a:
        for b in chains_b:
            if a == b or a.startswith(b + ".") or b.startswith(a + "."):
                return True
    return False


def _clip_params(clip: Event) -> Tuple[Tuple[str, object], ...]:
    """Harness parameters: the clip function ("norm"/"value") and, when the source gives
    it as a literal, its limit (`max_norm`, or the clip value for `clip_grad_value_`)."""
    params: Tuple[Tuple[str, object], ...] = (("clip", clip.clip_kind),)
    if clip.clip_limit is not None:
        params += (("max_norm", clip.clip_limit),)
    return params


def _optimizer_params(ctx: FileContext, step: Event) -> Tuple[Tuple[str, object], ...]:
    """The optimizer the step belongs to, as the file builds it (`torch.optim.AdamW` and its
    literal `lr`), for the harness to run the same one: `optimizer.step()`'s receiver, or the
    argument of `scaler.step(optimizer)`."""
    if step.kind == "scaler_step":
        receiver = dotted_name(step.argument) if step.argument is not None else None
    else:
        receiver = step.receiver
    built = training_events(ctx).optimizer_build(receiver)
    if built is None:
        return ()
    qualname, lr, _ = built
    return (("optimizer", qualname),) + ((("lr", lr),) if lr is not None else ())


def _line_indent(ctx: FileContext, row: int, column: int) -> Optional[str]:
    prefix = ctx.line_text(row)[: column - 1]
    return prefix if prefix.strip() == "" else None


# ---------------------------------------------------------------------------------- rules


class ClipAfterStep(Rule):
    code = "NAN401"
    kind = "misuse"
    default_enabled = True
    untuned_precision = (
        'On the real-bugs benchmark it finds the clip-after-step bugs in both halves without a '
        'false alarm on their safe look-alikes.'
    )
    fails_in = 'all (any dtype)'
    name = "clip-after-step"
    message = (
        "Gradient clipped after `optimizer.step()`: the step already applied the unclipped "
        "gradient, so the clip has no effect on this update; clip between `backward()` and "
        "`step()`"
    )
    fix_applicability = UNSAFE
    fix_title = "Move the clip before the optimizer step"
    triggers = r"clip_grad|clip_gradients"
    summary = "`clip_grad_norm_` after `optimizer.step()`: the step used the unclipped gradient."
    why = """\
Clipping rewrites `p.grad` in place; only a step that runs afterwards sees the clipped
gradient. Called after `optimizer.step()`, `clip_grad_norm_` / `clip_grad_value_` clip a
gradient that has already been applied (and is usually zeroed next), so training runs
exactly as if there were no clip at all. The code looks protected against exploding
gradients and is not: the first outlier batch moves the weights by the full gradient.

Measured on a small MLP (16-32-1, SGD lr 0.1, `max_norm=1.0`) with outlier targets: the
gradient norm is 665; clipping before the step moves the weights by 0.1, clipping after
the step by 66.5, the same as no clip. Trained for 50 steps, the loss stays finite with
the clip before the step and is `inf` at step 5 with the clip after it.

Adam and the other adaptive optimizers divide each gradient by its own running size, so an
outlier's own step is not 66 times larger; what the outlier costs them is their state. It
fills the moment estimates: for the next steps Adam keeps moving along the outlier's
direction, and Adamax and Adagrad shrink every step after it. A clip before the step bounds
what enters that state. `nanlint verify` measures this in the optimizer the code builds (see
below); Rprop, which reads only the gradient's sign, is the one a clip cannot help.

Only a clip that runs after an optimizer step with no `backward()` in between is reported:
later in the step's block or nested below it (`if cfg.clip:`), or after the `with`, `try`
or loop that holds the step; a step inside an `if` is not followed that way (the clip may
run on the other branch). In `backward(); step(); ...; backward(); clip(); step()` the clip
belongs to the next step and is fine. A clip followed by another optimizer's step (two
optimizers, one clip each) is not reported either. `scheduler.step()`, `env.step(action)`
and `self.step()` are not optimizer steps.
"""
    example = """\
```python
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
```"""
    use_instead = """\
```python
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    optimizer.step()
```"""
    measured = """\
MLP 16-32-1, SGD lr 0.1, `clip_grad_norm_(..., 1.0)`, float32 on the CPU, targets of scale
1e3 (gradient norm 665 at the first step):

| order | update norm of the first step | 50 steps |
|---|---|---|
| `backward`, `clip`, `step` | 0.1 | loss 9.1e5, finite |
| `backward`, `step`, `clip` | 66.5 | loss `inf` at step 5 |
| no clip | 66.5 | loss `inf` at step 5 |

The verifier's harness (a 4x4 linear layer, `clip_grad_norm_(..., 1.0)`, float32 on the CPU,
each optimizer with its default lr): 300 ordinary steps of gradient norm 0.5, then one spike
of norm 100, then 20 ordinary steps. "Distance" is how far the weights then are from where
the same run without the spike ends; the clip after the step gives exactly what no clip
gives.

| optimizer | spike step's update: clip after | clip before | distance 20 steps later: clip after | clip before |
|---|---|---|---|---|
| SGD (lr 0.001) | 0.1 | 0.001 | 0.1 | 0.00142 |
| Adam (lr 0.001) | 0.00645 | 0.00235 | 0.105 | 0.0105 |
| AdamW (lr 0.001) | 0.00646 | 0.00234 | 0.105 | 0.0105 |
| Adamax (lr 0.002) | 0.000854 | 0.00222 | 0.0729 | 0.0229 |
| RMSprop (lr 0.01) | 0.412 | 0.0859 | 0.355 | 0.00916 |
| Adagrad (lr 0.01) | 0.0407 | 0.00487 | 0.065 | 0.00673 |
| Rprop (lr 0.01) | 4e-06 | 4e-06 | 1.67e-05 | 1.67e-05 |

With Adam only a few steps into training (5 ordinary steps), its bias correction makes the
unclipped spike's own step smaller than the clipped one; the harness measures in the steady
state a real run spends its time in, and judges by what the spike leaves behind.
"""
    fix_notes = """\
Unsafe: the fix moves the clip statement (with any comment lines directly above it) to just
before the optimizer step, at the same indentation, which changes the values of every
update that the clip now limits. It is offered only when the step and the clip are simple
statements of the same block and the clip's arguments do not depend on anything assigned
between them. When the step is `scaler.step(optimizer)`, the moved clip then needs
`scaler.unscale_(optimizer)` before it: NAN402 adds it.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html",
        "https://pytorch.org/docs/stable/notes/amp_examples.html#working-with-unscaled-gradients",
    )

    def leave_Module(self, node: cst.Module, ctx: FileContext) -> None:
        if "step" not in ctx.source:
            return
        for clip, events in clip_events(ctx):
            self._check(clip, events, ctx)

    def _check(self, clip: Event, events: List[Event], ctx: FileContext) -> None:
        steps = [
            e
            for e in events
            if e.kind in ("step", "scaler_step") and e.order < clip.order and reached_after(e, clip)
        ]
        if not steps:
            return
        step = max(steps, key=lambda e: e.order)
        if events_between(events, step, clip, ("backward",)):
            return
        # A later optimizer step before the next backward: the clip may be meant for it.
        for later in until_next_backward(events, clip):
            if later.kind in ("step", "scaler_step") and reached_after(step, later):
                return
        probe = Probe(
            kind="harness",
            harness="clip-after-step",
            params=_clip_params(clip) + _optimizer_params(ctx, step),
        )
        message = (
            f"Gradient clipped after {_cited(ctx, step, 'optimizer.step()')}: the step already applied the "
            "unclipped gradient, so the clip has no effect on this update; clip between `backward()` and "
            "`step()`"
        )
        ctx.report(self, clip.call, message=message, edits=self._move(step, clip, ctx), probe=probe)

    def _move(self, step: Event, clip: Event, ctx: FileContext) -> Tuple[Edit, ...]:
        step_line = _single_line(step)
        clip_line = _single_line(clip)
        if step_line is None or clip_line is None or step.path[:-1] != clip.path[:-1]:
            return ()
        if step.path[-1][0] != clip.path[-1][0]:
            return ()
        small = clip.small
        if isinstance(small, cst.Expr):
            if small.value is not clip.call:
                return ()
        elif isinstance(small, (cst.Assign, cst.AnnAssign)):
            if small.value is not clip.call:
                return ()
        else:
            return ()
        if not (isinstance(step.small, cst.Expr) and step.small.value is step.call):
            return ()
        # Statements from the step up to the clip: nothing the clip reads may be assigned
        # there, and nothing there may read what the clip assigns.
        block_start, _ = ctx.span(step_line)
        clip_start, clip_end = ctx.span(clip_line)
        parent = ctx.block_of(step_line)
        if parent is None or not any(s is clip_line for s in parent):
            return ()
        parent = list(parent)
        i, j = parent.index(step_line), parent.index(clip_line)
        between = list(parent[i:j])
        assigned: Set[str] = set()
        read_between: Set[str] = set()
        for stmt in between:
            assigned |= _names_assigned(stmt)
            read_between |= _names_read(stmt)
        if _overlap(_names_read(clip.call), assigned):
            return ()
        if _overlap(_names_assigned(clip_line), read_between | assigned):
            return ()
        lines = ctx.lines()
        step_first = block_start.row - _attached_comment_rows(step_line)
        clip_first = clip_start.row - _attached_comment_rows(clip_line)
        if clip_first <= block_start.row:
            return ()
        last = clip_end.row
        region = lines[step_first - 1 : last]
        newline = ctx.newline
        trailing_newline = region[-1].endswith(("\n", "\r"))
        if not trailing_newline:
            region = region[:-1] + [region[-1] + newline]
        head = region[: clip_first - step_first]
        moved = region[clip_first - step_first :]
        text = "".join(moved + head)
        if not trailing_newline:
            text = text[: -len(newline)]
        end_row = last + 1 if trailing_newline else last
        end = Position(end_row, 1) if trailing_newline else Position(last, len(lines[last - 1]) + 1)
        return (Edit(Position(step_first, 1), end, text),)



class ClipWithoutUnscale(Rule):
    code = "NAN402"
    kind = "misuse"
    default_enabled = False
    fails_in = 'all (with a GradScaler)'
    name = "clip-without-unscale"
    message = (
        "Gradient clipped while still multiplied by the GradScaler's scale (65536 at the "
        "start): the clip sees a norm 65536 times too large, so it fires on every step and "
        "scales the gradient by the same factor too far down (an SGD update shrinks with it); "
        "call `scaler.unscale_(optimizer)` before clipping"
    )
    untuned_precision = (
        'The false alarm on the test halves is a clip on a path that fails before it runs. Turn '
        'it on with `--extend-select NAN402`.'
    )
    fix_applicability = UNSAFE
    fix_title = "Insert `scaler.unscale_(optimizer)` before the clip"
    triggers = r"\.\s*scale\s*\("
    summary = "Clipping a GradScaler-scaled gradient without `scaler.unscale_(optimizer)` first."
    why = """\
With mixed precision, `scaler.scale(loss).backward()` leaves every gradient multiplied by
the scale factor (65536 at the start, adjusted as training runs). `scaler.step(optimizer)`
divides it back out before the update, but a clip in between sees the scaled values: its
`max_norm` is compared with a norm 65536 times too large, so the clip always fires and
scales the true gradient down to `max_norm / scale` — about 1.5e-5 for `max_norm=1.0`.
With SGD the model barely learns, and since the scale changes during training, the
effective learning rate changes with it. Adam and the other adaptive optimizers divide each
gradient by its own running size, so their step keeps its size; there the clip is a
different operation from the one written: it rescales every gradient to the same norm
instead of bounding the large ones (`nanlint verify` runs the optimizer the code builds and
reports such a finding as not reproduced: one step shows no difference).

`scaler.unscale_(optimizer)` before the clip divides the gradients in place (and records
that it did, so `scaler.step` does not divide twice).

Not reported: Accelerate's `accelerator.clip_grad_norm_`, Fabric's `clip_gradients` and
Lightning's `self.clip_gradients`, which unscale by themselves; clips with an `unscale_`
anywhere before them since the backward.
"""
    example = """\
```python
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
```"""
    use_instead = """\
```python
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
```"""
    measured = """\
MLP 16-32-1, SGD lr 0.1, `torch.amp.GradScaler("cpu")` (scale 65536), `clip_grad_norm_(...,
1.0)`, float32 on the CPU, true gradient norm 665:

| variant | norm the clip sees | update norm |
|---|---|---|
| `scaler.unscale_(optimizer)`, then clip | 665.3 | 0.1 |
| clip without `unscale_` | 4.36e7 | 1.5e-6 (0.1 / 65536) |
| no clip | — | 66.5 |
"""
    fix_notes = """\
Unsafe: inserting `scaler.unscale_(optimizer)` (the scaler and optimizer named in the
`scaler.step(optimizer)` that follows; one line per optimizer when several are stepped)
changes what the clip does, and so every update. Offered only where the scaled backward
always runs before the clip and no other `unscale_` follows the clip (a second `unscale_`
of one optimizer in one step raises a RuntimeError).
"""
    references = (
        "https://pytorch.org/docs/stable/notes/amp_examples.html#working-with-unscaled-gradients",
        "https://github.com/milesial/Pytorch-UNet/pull/470 (\"Unscale gradients before clipping\")",
    )

    def leave_Module(self, node: cst.Module, ctx: FileContext) -> None:
        if "clip" not in ctx.source:
            return
        for clip, events in clip_events(ctx):
            self._check(clip, events, ctx)

    def _check(self, clip: Event, events: List[Event], ctx: FileContext) -> None:
        if clip.clip_form == "method" and clip.receiver is not None:
            last = clip.receiver.split(".")[-1].lower()
            if clip.receiver == "self" or any(name in last for name in _SELF_UNSCALING):
                return
        backward = scaled_backward(events, clip)
        if backward is None:
            return
        if events_between(events, backward, clip, ("unscale",)):
            return
        steps = [
            later
            for later in until_next_backward(events, clip)
            if later.kind == "scaler_step"
            and later.receiver == backward.scaled_by
            and follows(clip, later)
        ]
        if not steps:
            return
        probe = Probe(
            kind="harness",
            harness="clip-without-unscale",
            params=_clip_params(clip) + _optimizer_params(ctx, steps[-1]),
        )
        edits: Tuple[Edit, ...] = ()
        if dominates(backward, clip) and not events_between(events, clip, steps[-1], ("unscale",)):
            edits = self._insert(clip, steps, ctx)
        message = (
            "Gradient clipped while still multiplied by the GradScaler's scale (65536 at the start) "
            f"from {_cited(ctx, backward, 'scaler.scale(loss).backward()')}: the clip sees a norm 65536 "
            "times too large, so it fires on every step and scales the gradient by the same factor too far "
            f"down (an SGD update shrinks with it); call `{_unscale_call(ctx, steps[0])}` before clipping"
        )
        ctx.report(self, clip.call, message=message, edits=edits, probe=probe)

    def _insert(self, clip: Event, steps: List[Event], ctx: FileContext) -> Tuple[Edit, ...]:
        line = clip.statement
        if not isinstance(line, cst.SimpleStatementLine) or clip.small is not line.body[0]:
            return ()
        start, _ = ctx.span(line)
        indent = _line_indent(ctx, start.row, start.column)
        if indent is None:
            return ()
        optimizers: List[str] = []
        for step in steps:
            code = ctx.code(step.argument)
            if "\n" in code or code in optimizers:
                continue
            optimizers.append(code)
        if not optimizers:
            return ()
        scaler = steps[0].receiver
        text = "".join(f"{indent}{scaler}.unscale_({opt}){ctx.newline}" for opt in optimizers)
        # Above the comment lines that introduce the clip, if any.
        at = Position(start.row - _attached_comment_rows(line), 1)
        return (Edit(at, at, text),)


class StepBypassesScaler(Rule):
    code = "NAN403"
    kind = "misuse"
    default_enabled = True
    fails_in = 'all (with a GradScaler)'
    name = "step-bypasses-scaler"
    message = (
        "`optimizer.step()` after `scaler.scale(loss).backward()` applies the still-scaled "
        "gradient (65536 times the update with SGD) and skips GradScaler's inf/NaN check, "
        "and `scaler.update()` then raises; use `scaler.step(optimizer)`"
    )
    fix_applicability = UNSAFE
    fix_title = "Step through the scaler: `scaler.step(optimizer)`"
    triggers = r"\.\s*scale\s*\("
    summary = "`optimizer.step()` where `scaler.step(optimizer)` is needed after a scaled backward."
    why = """\
`scaler.scale(loss).backward()` multiplies every gradient by the scale factor (65536 at
the start). `scaler.step(optimizer)` divides it back out, skips the step when a gradient
overflowed to inf/NaN, and records that it did so for `scaler.update()`. Calling
`optimizer.step()` directly does none of this:

- with SGD (and any optimizer whose update is proportional to the gradient) the update is
  65536 times too large: one step sends the loss from 1.0 to 1e9;
- with Adam the update is nearly scale-invariant, but an overflowed (inf) gradient is no
  longer skipped: it writes NaN into the weights;
- `scaler.update()` afterwards raises `AssertionError: No inf checks were recorded prior to
  update.` — when the loop calls it at all.

Not reported where a `scaler.step(...)` follows the same scaled backward (for example in
the other branch of `if use_amp:`), where the nearest backward is a plain one, or where
`scaler.unscale_(optimizer)` runs before the step (the gradient then has its true size and
`scaler.update()` works; such code usually checks the norm for inf itself).
"""
    example = """\
```python
scaler.scale(loss).backward()
optimizer.step()
scaler.update()
```"""
    use_instead = """\
```python
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
```"""
    measured = """\
MLP 16-32-1 (lr 0.01) and a Linear layer, `torch.amp.GradScaler("cpu")` (scale 65536),
float32 on the CPU:

| optimizer | step | loss before → after one step | update norm | `scaler.update()` |
|---|---|---|---|---|
| SGD | `scaler.step(optimizer)` | 1.011 → 1.006 | 0.0073 | ok |
| SGD | `optimizer.step()` | 1.011 → 1.0e9 | 476.9 (65536×) | AssertionError |
| Adam | `scaler.step(optimizer)` | 1.011 → 0.929 | 0.240 | ok |
| Adam | `optimizer.step()` | 1.011 → 0.929 | 0.240 | AssertionError |
| Adam, one gradient element inf | `scaler.step(optimizer)` | — | step skipped, weights finite | ok |
| Adam, one gradient element inf | `optimizer.step()` | — | weight becomes NaN | — |
"""
    fix_notes = """\
Unsafe: `optimizer.step()` becomes `scaler.step(optimizer)` (the scaler of the scaled
backward before it), which changes every update. Offered only where that backward always
runs before the step and a `scaler.update()` follows: without `update()`, a second
`scaler.step` of the same optimizer raises `RuntimeError: step() has already been called
since the last update()` (measured), so the rewrite alone would break the loop.
"""
    references = (
        "https://pytorch.org/docs/stable/notes/amp_examples.html",
        "https://pytorch.org/docs/stable/amp.html#gradient-scaling",
    )

    def leave_Module(self, node: cst.Module, ctx: FileContext) -> None:
        if "step" not in ctx.source:
            return
        facts = training_events(ctx)
        for events in facts.regions:
            for step in events:
                if step.kind == "step":
                    self._check(step, events, facts, ctx)

    def _check(self, step: Event, events: List[Event], facts: TrainingEvents, ctx: FileContext) -> None:
        backward = scaled_backward(events, step)
        if backward is None:
            return
        if events_between(events, backward, step, ("unscale",)):
            # Unscaled by hand (`scaler.unscale_`, then often a finiteness check before
            # the step): the update has the right size and `update()` works (measured).
            return
        # A scaler.step after the same backward (another branch, another optimizer):
        # the code knows about the scaler; this step is then deliberate or exclusive.
        if any(e.kind == "scaler_step" for e in until_next_backward(events, backward)):
            return
        receiver = step.call.func.value  # type: ignore[attr-defined]
        probe = Probe(
            kind="harness",
            harness="step-bypasses-scaler",
            params=_optimizer_params(ctx, step),
        )
        edits: Tuple[Edit, ...] = ()
        updates = [
            e
            for e in events
            if e.kind == "update" and e.receiver == backward.scaled_by and follows(step, e)
        ]
        if dominates(backward, step) and updates:
            optimizer = ctx.code(receiver)
            if "\n" not in optimizer:
                edits = (ctx.replace(step.call, f"{backward.scaled_by}.step({optimizer})"),)
        optimizer = _short_code(ctx, receiver, "optimizer", 40)
        message = (
            f"`{optimizer}.step()` after {_cited(ctx, backward, 'scaler.scale(loss).backward()')} applies the "
            "still-scaled gradient (65536 times the update with SGD) and skips GradScaler's inf/NaN check, and "
            f"`scaler.update()` then raises; use `{backward.scaled_by}.step({optimizer})`"
        )
        ctx.report(self, step.call, message=message, edits=edits, probe=probe)
