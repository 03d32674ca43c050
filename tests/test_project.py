"""The project index: own-module imports resolved to files, on small projects written here."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

from nanlint.analysis.project import ImportRef, ProjectIndex, find_root, scan_imports


def make(root: Path, files: Dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def deps(index: ProjectIndex, root: Path, name: str):
    return [p.relative_to(root.resolve()).as_posix() for p in index.dependencies(root / name)]


def test_scan_finds_every_import_form():
    source = b"""import os, torch.nn as nn
import pkg.models
from . import nets, losses as L
from ..common.util import (
    helper,
    other as o,
)
from .x import y \\
    , z
from __future__ import annotations
    from .late import thing  # inside a function
"""
    found = scan_imports(source)
    assert ImportRef(0, "os") in found and ImportRef(0, "torch.nn") in found
    assert ImportRef(0, "pkg.models") in found
    assert ImportRef(1, "", ("nets", "losses")) in found
    assert ImportRef(2, "common.util", ("helper", "other")) in found
    assert ImportRef(1, "x", ("y", "z")) in found
    assert ImportRef(1, "late", ("thing",)) in found


def test_root_is_the_nearest_marker(tmp_path):
    make(tmp_path, {"pyproject.toml": "", "sub/setup.py": "", "sub/pkg/a.py": "", "other/b.py": ""})
    assert find_root(tmp_path / "sub/pkg/a.py") == tmp_path / "sub"
    assert find_root(tmp_path / "other/b.py") == tmp_path


def test_relative_imports(tmp_path):
    root = make(tmp_path, {
        "pyproject.toml": "",
        "pkg/__init__.py": "",
        "pkg/nets.py": "import torch\n",
        "pkg/losses.py": "",
        "pkg/common/__init__.py": "",
        "pkg/common/util.py": "",
        "pkg/train.py": "from .nets import Actor\nfrom . import losses\nfrom .missing import x\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/deep.py": "from ..common.util import helper\nfrom ...outside import q\n",
    })
    index = ProjectIndex()
    assert deps(index, root, "pkg/train.py") == ["pkg/__init__.py", "pkg/losses.py", "pkg/nets.py"]
    assert deps(index, root, "pkg/sub/deep.py") == ["pkg/common/util.py"]


def test_absolute_imports_of_the_projects_package(tmp_path):
    root = make(tmp_path, {
        "setup.py": "",
        "pkg/__init__.py": "",
        "pkg/models.py": "",
        "pkg/train.py": "import os\nimport torch\nimport pkg.models\nfrom pkg import models\n",
        "tests/test_train.py": "from pkg.train import step\n",
    })
    index = ProjectIndex()
    assert deps(index, root, "pkg/train.py") == ["pkg/__init__.py", "pkg/models.py"]
    assert deps(index, root, "tests/test_train.py") == ["pkg/train.py"]


def test_src_layout(tmp_path):
    root = make(tmp_path, {
        "pyproject.toml": "",
        "src/mypkg/__init__.py": "",
        "src/mypkg/model.py": "",
        "src/mypkg/loss.py": "from mypkg.model import Net\n",
        "tests/test_loss.py": "import mypkg.loss\n",
    })
    index = ProjectIndex()
    assert deps(index, root, "src/mypkg/loss.py") == ["src/mypkg/model.py"]
    assert deps(index, root, "tests/test_loss.py") == ["src/mypkg/loss.py"]


def test_sibling_scripts_import_each_other(tmp_path):
    root = make(tmp_path, {
        ".git/HEAD": "",
        "scripts/models.py": "",
        "scripts/train.py": "import models\nfrom models import Net\n",
    })
    assert deps(ProjectIndex(), root, "scripts/train.py") == ["scripts/models.py"]


def test_a_package_module_does_not_see_its_folder_as_top_level(tmp_path):
    # `import logging` inside pkg/ is the standard library, not pkg/logging.py.
    root = make(tmp_path, {
        "pyproject.toml": "",
        "pkg/__init__.py": "",
        "pkg/logging.py": "",
        "pkg/a.py": "import logging\n",
    })
    assert deps(ProjectIndex(), root, "pkg/a.py") == []


def test_a_script_inside_a_package_sees_its_own_folder_first(tmp_path):
    # `python pkg/run.py` puts pkg/ on sys.path: the script's bare `import modeling` is its
    # sibling (a module of the package without the `__main__` block is not a script).
    root = make(tmp_path, {
        "pyproject.toml": "",
        "pkg/__init__.py": "",
        "pkg/modeling.py": "",
        "pkg/run.py": "from modeling import Net\n\nif __name__ == '__main__':\n    Net()\n",
        "pkg/lib.py": "from modeling import Net\n",
    })
    assert deps(ProjectIndex(), root, "pkg/run.py") == ["pkg/modeling.py"]
    assert deps(ProjectIndex(), root, "pkg/lib.py") == []


def test_files_outside_the_project_are_not_dependencies(tmp_path):
    make(tmp_path, {"shared.py": ""})
    root = make(tmp_path / "proj", {"pyproject.toml": "", "main.py": "from .. import shared\nimport shared\n"})
    assert deps(ProjectIndex(), root, "main.py") == []


def test_cycles_are_one_group_and_come_before_their_importers(tmp_path):
    root = make(tmp_path, {
        "pyproject.toml": "",
        "pkg/__init__.py": "",
        "pkg/a.py": "from .b import x\n",
        "pkg/b.py": "from .a import y\n",
        "pkg/c.py": "from .a import z\n",
        "pkg/d.py": "",
    })
    index = ProjectIndex()
    order = index.dependency_order([root / "pkg/c.py", root / "pkg/d.py"])
    names = [[p.name for p in group] for group in order]
    assert ["a.py", "b.py"] in names
    assert names.index(["a.py", "b.py"]) < names.index(["c.py"])
    assert ["d.py"] in names
    assert deps(index, root, "pkg/a.py") == ["pkg/b.py"]  # no self edge through the cycle


def test_a_long_import_chain_does_not_recurse(tmp_path):
    files = {"pyproject.toml": ""}
    for i in range(1500):
        files[f"m{i}.py"] = f"import m{i + 1}\n"
    root = make(tmp_path, files)
    order = ProjectIndex().dependency_order([root / "m0.py"])
    assert len(order) == 1500
    assert order[0][0].name == "m1499.py" and order[-1][0].name == "m0.py"


def test_summaries_come_from_the_provider_by_the_module_as_spelled(tmp_path):
    root = make(tmp_path, {
        "pyproject.toml": "",
        "pkg/__init__.py": "",
        "pkg/nets.py": "def forward(x):\n    return x.softmax(-1)\n",
        "pkg/train.py": "from .nets import forward\nfrom . import nets\nimport pkg.nets\nimport torch\n",
    })
    calls = []

    def summarize(path, text):
        calls.append(path.name)
        return {"returns_softmax": "softmax" in text}

    index = ProjectIndex(summarize)
    imported = index.imported_summaries(root / "pkg/train.py")
    assert imported == {
        ".nets": {"returns_softmax": True},  # `from .nets import ...` and `from . import nets`
        ".": {"returns_softmax": False},
        "pkg.nets": {"returns_softmax": True},
    }
    assert sorted(calls) == ["__init__.py", "nets.py"]  # each file summarized once
    assert ProjectIndex().imported_summaries(root / "pkg/train.py") == {}  # no provider, no facts


def test_fingerprint_follows_the_summary_not_the_bytes(tmp_path):
    root = make(tmp_path, {
        "pyproject.toml": "",
        "nets.py": "def forward(x):\n    return x.softmax(-1)\n",
        "train.py": "import nets\n",
    })

    def summarize(path, text):
        return {"returns_softmax": "softmax" in text}

    before = ProjectIndex(summarize).dependency_fingerprint(root / "train.py")
    (root / "nets.py").write_text("def forward(x):\n    # a comment\n    return x.softmax(-1)\n")
    assert ProjectIndex(summarize).dependency_fingerprint(root / "train.py") == before
    by_content = ProjectIndex().dependency_fingerprint(root / "train.py")
    (root / "nets.py").write_text("def forward(x):\n    return x.sigmoid()\n")
    assert ProjectIndex(summarize).dependency_fingerprint(root / "train.py") != before
    assert ProjectIndex().dependency_fingerprint(root / "train.py") != by_content
