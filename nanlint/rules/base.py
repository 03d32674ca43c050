"""The shape of a rule: identity, message, fix safety, documentation, matching hooks."""

from __future__ import annotations

from typing import ClassVar, Optional, Tuple

from ..diagnostics import SAFE, UNSAFE  # noqa: F401  (re-exported for rule modules)


class Rule:
    """A rule is a class with a code, a name, a message and `visit_<Node>` hooks.

    The engine walks each file once and calls `visit_<NodeType>(node, ctx)` /
    `leave_<NodeType>(node, ctx)` on every rule that defines them; a hook reports with
    `ctx.report(self, node, ...)`. The documentation fields are rendered into the rule's
    page (`nanlint rule CODE`, rules/CODE.md).
    """

    code: ClassVar[str]
    name: ClassVar[str]
    # One sentence: what fails and why. Shown with every finding.
    message: ClassVar[str]
    # SAFE: exact in real arithmetic; UNSAFE: changes values or order; None: no fix.
    fix_applicability: ClassVar[Optional[str]] = None
    fix_title: ClassVar[str] = ""
    default_enabled: ClassVar[bool] = True

    # Documentation (Markdown). `measured` states where the original fails, with figures.
    summary: ClassVar[str] = ""
    why: ClassVar[str] = ""
    example: ClassVar[str] = ""
    use_instead: ClassVar[str] = ""
    measured: ClassVar[str] = ""
    fix_notes: ClassVar[str] = ""
    references: ClassVar[Tuple[str, ...]] = ()

    @classmethod
    def fixable(cls) -> bool:
        return cls.fix_applicability is not None
