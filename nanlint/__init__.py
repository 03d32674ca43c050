"""nanlint: find numerically unsafe PyTorch code and rewrite it into the stable form."""

__version__ = "0.1.0"

# Where each rule's page is published (the same text as rules/CODE.md and `nanlint rule CODE`).
RULES_URL = "https://github.com/nanlint/nanlint/blob/main/rules/{code}.md"
