"""nanlint: find numerically unsafe PyTorch code and rewrite it into the stable form."""

# Public names defined in the layers, looked up when first asked for: `import nanlint`
# imports no rule and reads no package metadata.
_PUBLIC = {"RULES_URL": "rules.pages", "rule_kind": "rules.pages", "rule_url": "rules.pages"}


def __getattr__(name: str):
    """`nanlint.__version__`: the version pyproject.toml sets, read from the installed
    distribution when asked for (not at import: reading metadata costs start-up time);
    `nanlint.rule_url`, `rule_kind` and `RULES_URL`, from rules.pages."""
    if name == "__version__":
        from .core.install import version

        return version()
    if name in _PUBLIC:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_PUBLIC[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
