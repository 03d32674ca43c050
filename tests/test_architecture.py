"""The layering the design asks for, checked on the source: a rule module is a matcher, a fix
and its page, and what rules share lives outside rules/ (the analysis, loss_calls, ranges)."""

import ast
from pathlib import Path

import nanlint.rules

RULES = Path(nanlint.rules.__file__).parent
RULE_MODULES = sorted(p for p in RULES.glob("*.py") if p.name != "__init__.py" and p.stem not in nanlint.rules.NOT_RULES)


def _imports_from_rule_modules(path: Path):
    """(module, name) for every `from .other import name` of a sibling rule module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module not in (None, "base"):
            for alias in node.names:
                yield node.module, alias.name


def test_rule_modules_are_found():
    assert len(RULE_MODULES) >= 10
    assert any(p.name == "cross_entropy.py" for p in RULE_MODULES)


def test_no_rule_module_imports_a_private_name_of_another():
    offending = [
        f"{path.name}: from .{module} import {name}"
        for path in RULE_MODULES
        for module, name in _imports_from_rule_modules(path)
        if name.startswith("_")
    ]
    assert offending == []


def test_the_checker_sees_a_private_import(tmp_path):
    # The check above would pass vacuously if it missed the parenthesized, multi-line form.
    sample = tmp_path / "sample.py"
    sample.write_text("from .cross_entropy import (\n    LossCall,\n    _Criteria,\n)\n", encoding="utf-8")
    assert list(_imports_from_rule_modules(sample)) == [("cross_entropy", "LossCall"), ("cross_entropy", "_Criteria")]
