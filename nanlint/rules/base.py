"""The shape of a rule: identity, message, fix safety, documentation, matching hooks."""

from __future__ import annotations

from typing import ClassVar, Optional, Tuple

from ..core.diagnostics import SAFE, UNSAFE  # noqa: F401  (re-exported for rule modules)
from ..core.triggers import trigger


# What a finding claims, and so how it is judged and verified (DESIGN.md, "A rule"):
KINDS = {
    "form": (
        "this expression is an unstable spelling of a function PyTorch computes stably: in its "
        "dtype it overflows, underflows or cancels where that function is finite, and the "
        "rewrite is exact. It is reported whatever today's inputs are: only a guard the code "
        "applies to the input (a clamp, a shift) or, for a failure in the gradient alone, the "
        "absence of a gradient keeps it quiet"
    ),
    "value": (
        "the value here can reach a singular point (log or division at 0, sqrt's gradient at 0, "
        "an empty selection, an epsilon that is 0 in float16) with inputs the surrounding code "
        "plausibly produces in normal use; a range the code bounds elsewhere keeps it quiet"
    ),
    "misuse": "the code does this, on a path that runs: an order or an API use that is wrong",
    "file": "the file could not be linted (an engine finding, not a hazard in the code)",
}


class Rule:
    """A rule is a class with a code, a name, a message and `visit_<Node>` hooks.

    The engine walks each file once and calls `visit_<NodeType>(node, ctx)` /
    `leave_<NodeType>(node, ctx)` on every rule that defines them; a hook reports with
    `ctx.report(self, node, ...)`. A rule that matches an operation however it is spelled
    (`a / b` or `torch.div(a, b)`, `-x` or `torch.neg(x)`) defines one
    `check_expression(node, ctx)` instead, called on every node of `expression_kinds`.
    The documentation fields are rendered into the rule's page (`nanlint rule CODE`,
    rules/CODE.md).
    """

    # The node types `check_expression` is called on (an operator or a call spells most ops).
    expression_kinds: ClassVar[Tuple[str, ...]] = ("BinaryOperation", "Call")

    code: ClassVar[str]
    name: ClassVar[str]
    # One of KINDS: what a finding of this rule claims.
    kind: ClassVar[str]
    # One sentence: what fails and why. Shown with every finding.
    message: ClassVar[str]
    # SAFE: exact in real arithmetic; UNSAFE: changes values or order; None: no fix.
    fix_applicability: ClassVar[Optional[str]] = None
    fix_title: ClassVar[str] = ""
    default_enabled: ClassVar[bool] = True
    # A regex that any file this rule can fire on must contain (e.g. r"\bexp\b"): the
    # engine runs the rule only on such files and skips parsing files no rule can match.
    # Write it naturally: triggers.py searches a leading `\bword` from the word itself.
    # None: always run.
    triggers: ClassVar[Optional[str]] = None

    # Documentation (Markdown). `measured` states where the original fails, with figures.
    summary: ClassVar[str] = ""
    # In which dtypes (and where) it fails, for the catalog table.
    fails_in: ClassVar[str] = ""
    why: ClassVar[str] = ""
    example: ClassVar[str] = ""
    use_instead: ClassVar[str] = ""
    measured: ClassVar[str] = ""
    # What its findings on code it was not tuned on were (benchmarks/precision/): the page puts
    # the figures and the default decision (default_set.py) before this account.
    untuned_precision: ClassVar[str] = ""
    fix_notes: ClassVar[str] = ""
    # A value rule: when a finding is manifest (the evidence it names, reported by default);
    # empty: the rule names none yet, and every finding is latent (`--latent`).
    manifest: ClassVar[str] = ""
    references: ClassVar[Tuple[str, ...]] = ()

    @classmethod
    def has_hooks(cls) -> bool:
        """Whether the rule matches anything (the engine's own findings, NAN001 and NAN002,
        are rules without hooks)."""
        known = cls.__dict__.get("_has_hooks")
        if known is None:
            known = any(a.startswith(("visit_", "leave_")) or a == "check_expression" for a in dir(cls))
            cls._has_hooks = known
        return known

    @classmethod
    def may_fire(cls, source: str) -> bool:
        """Whether this rule can report anything on `source` (hooks present, triggers met)."""
        if not cls.has_hooks():
            return False
        if cls.triggers is None:
            return True
        return trigger(cls.triggers).search(source)

    @classmethod
    def claim(cls) -> str:
        return KINDS[cls.kind]

    @classmethod
    def fixable(cls) -> bool:
        return cls.fix_applicability is not None


class LatentFindings(Rule):
    """Not a rule: in a selection, it asks for the latent findings of the value rules too
    (`--latent`, `latent = true`). It travels with the selected rules, so every way a file is
    linted (workers, the cache slot, fixes, notebooks, the server) sees the same choice."""

    code = "latent"
    name = "latent-findings"
    kind = "file"
    message = ""


def reports_latent(rule_classes) -> bool:
    return any(r is LatentFindings for r in rule_classes)

