"""nanlint: find numerically unsafe PyTorch code and rewrite it into the stable form."""

__version__ = "0.1.0"

# Where each rule's page is published (the same text as rules/KIND/CODE.md and `nanlint rule
# CODE`): the catalog has a folder per rule kind (form, value, misuse, file).
RULES_URL = "https://github.com/nanlint/nanlint/blob/main/rules/{kind}/{code}.md"


def rule_url(code: str) -> str:
    """The published page of rule `code`."""
    from .rules import get_rule

    try:
        kind = get_rule(code).kind
    except KeyError:
        return RULES_URL.format(kind="file", code=code)
    return RULES_URL.format(kind=kind, code=code)
