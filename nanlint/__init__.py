"""nanlint: find numerically unsafe PyTorch code and rewrite it into the stable form."""

from typing import Optional


# Where each rule's page is published (the same text as rules/KIND/CODE.md and `nanlint rule
# CODE`): the catalog has a folder per rule kind (form, value, misuse, file).
RULES_URL = "https://github.com/nanlint/nanlint/blob/main/rules/{kind}/{code}.md"


def rule_kind(code: str) -> Optional[str]:
    """The kind of rule `code` (form, value, misuse, file), or None for a code no rule has."""
    from .rules import get_rule

    try:
        return get_rule(code).kind
    except KeyError:
        return None


def rule_url(code: str) -> str:
    """The published page of rule `code`."""
    return RULES_URL.format(kind=rule_kind(code) or "file", code=code)


def __getattr__(name: str) -> str:
    """`nanlint.__version__`: the version pyproject.toml sets, read from the installed
    distribution when asked for (not at import: reading metadata costs start-up time)."""
    if name == "__version__":
        from .core.install import version

        return version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
