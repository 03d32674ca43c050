"""The layering the design asks for, checked on the source: the package's layers (LAYERS,
lowest first, as ARCHITECTURE.md lists them) import only down and in no circle; a rule module
is a matcher, a fix and its page, and what rules share lives outside rules/ (the analysis)."""

import ast
import re
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


# --- layers --------------------------------------------------------------------------------

# The package's layers, lowest first (ARCHITECTURE.md describes the same order). A module may
# import modules of its own layer and of the layers below it, never of one above. "entry" is
# the top of the package: its only modules are ENTRY; every other module is in a layer folder.
LAYERS = ("core", "analysis", "rules", "lint", "run", "output", "verify", "server", "entry")
ENTRY = ("__init__", "__main__", "cli")
PACKAGE = Path(nanlint.__file__).parent


def _modules(package: Path) -> dict:
    """Dotted name -> file, for every module of the package rooted at `package`."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict):
    """(imported module, line) for every import the file states: at the top, inside functions
    (lazy) and under TYPE_CHECKING alike. `from P import x` imports the module P.x where there
    is one, else P. The package a module sits in is not counted as imported by it: Python runs
    it first, but a package's __init__ importing its own modules would otherwise make each a
    circle with it."""
    root = name.split(".")[0]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                if node.level else node.module or ""
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            if target == root or target.startswith(root + "."):
                while target not in modules:  # `import pkg.mod.attr` names no module: its module
                    target = target.rpartition(".")[0]
                yield target, node.lineno


def _graph(package: Path) -> dict:
    """Module -> {imported module: first line importing it}."""
    modules = _modules(package)
    graph = {name: {} for name in modules}
    for name, path in modules.items():
        for target, line in _imports(name, path, modules):
            if target != name:
                graph[name].setdefault(target, line)
    return graph


def _layer(module: str) -> str:
    parts = module.split(".")[1:]
    return "entry" if not parts or parts[0] in ENTRY else parts[0]


def _where(package: Path, module: str, line: int) -> str:
    path = _modules(package)[module]
    return f"{path.relative_to(package.parent).as_posix()}:{line}"


def upward_imports(package: Path, layers=LAYERS) -> list:
    """Every import of a module from a layer above the importer's, as a sentence."""
    graph = _graph(package)
    out = []
    for module, targets in graph.items():
        for target, line in targets.items():
            if layers.index(_layer(target)) > layers.index(_layer(module)):
                out.append(f"{_where(package, module, line)}: {module} imports {target}, "
                           f"but layer {_layer(target)} is above {_layer(module)}")
    return sorted(out)


def import_circles(package: Path) -> list:
    """One circle of imports per strongly connected group of modules, as a chain of imports."""
    graph = _graph(package)
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    out = []
    for group in groups:
        start = min(group)
        path, seen = [start], {start}  # walk inside the group until it comes back to start
        while True:
            nexts = sorted(w for w in graph[path[-1]] if w in group)
            back = start in nexts
            if back:
                break
            step = next((w for w in nexts if w not in seen), None) or nexts[0]
            if step in seen:  # a smaller circle that misses start: report that one
                path = path[path.index(step):]
                break
            path.append(step)
            seen.add(step)
        chain = [f"{a} -> {b} ({_where(package, a, graph[a][b])})"
                 for a, b in zip(path, path[1:] + path[:1])]
        out.append("circle: " + "; ".join(chain))
    return sorted(out)


def test_every_module_is_in_a_layer():
    graph = _graph(PACKAGE)
    stray = sorted(m for m in graph if _layer(m) not in LAYERS)
    assert stray == [], f"modules outside the layers {LAYERS}: {stray}"
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == sorted(f"{m}.py" for m in ENTRY) and len(top) <= 5, top
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert folders == sorted(LAYERS[:-1]), folders


def test_no_import_runs_up_a_layer():
    assert upward_imports(PACKAGE) == []


def test_no_import_circle():
    assert import_circles(PACKAGE) == []


def test_architecture_md_lists_the_layers_in_order():
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    # The numbered list of the layers, lowest first: "1. `core/` ...".
    listed = [m.group(1).rstrip("/") for m in re.finditer(r"^\d+\. `([\w/ .,]+?)`", text, re.M)]
    assert listed[: len(LAYERS) - 1] == list(LAYERS[:-1]), listed
    for name in ENTRY:
        assert f"`{name}" in text, name


def _package(tmp_path: Path, files: dict) -> Path:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path / "pkg"


def test_the_checker_sees_a_lazy_upward_import_and_its_circle(tmp_path):
    package = _package(tmp_path, {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/context.py": "def f():\n    from ..analysis import flow\n",
        "analysis/__init__.py": "",
        "analysis/flow.py": "from ..core import context\n",
    })
    assert upward_imports(package) == [
        "pkg/core/context.py:2: pkg.core.context imports pkg.analysis.flow, but layer analysis is above core"]
    assert import_circles(package) == [
        "circle: pkg.analysis.flow -> pkg.core.context (pkg/analysis/flow.py:1); "
        "pkg.core.context -> pkg.analysis.flow (pkg/core/context.py:2)"]


def test_the_checker_sees_a_circle_inside_a_layer_and_type_checking_imports(tmp_path):
    package = _package(tmp_path, {
        "__init__.py": "",
        "run/__init__.py": "",
        "run/jobs.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .runner import lint_file\n",
        "run/runner.py": "from . import jobs\n",
    })
    assert upward_imports(package) == []
    assert import_circles(package) == [
        "circle: pkg.run.jobs -> pkg.run.runner (pkg/run/jobs.py:3); pkg.run.runner -> pkg.run.jobs (pkg/run/runner.py:1)"]
