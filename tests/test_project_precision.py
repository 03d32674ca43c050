"""`precision = "auto"`: a project whose trainer makes the model float16 gets its half-only
hazards reported in the model's file, which shows no float16 itself
(fixtures/projects/half_trainer, written for these tests: `train.py` calls `.half()`,
`attention/layers.py` fills matmul scores with -1e9 and with an imported 1e9)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from nanlint.cli import main
from nanlint.run.config import Settings
from nanlint.analysis.project import find_root
from nanlint.run import project_precision
from nanlint.run.project_precision import ProjectPrecisionFinder, find_sign, project_of

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "fixtures" / "projects" / "half_trainer"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    target = tmp_path / "half_trainer"
    shutil.copytree(PROJECT, target)
    return target


@pytest.fixture
def check(monkeypatch, capsys, tmp_path):
    """`nanlint check --output-format json` in `cwd` (a cache in tmp_path unless told
    otherwise): the findings as (file, row, code, message)."""

    def go(cwd: Path, *args: str) -> List[Tuple[str, int, str, str]]:
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        with pytest.raises(SystemExit):
            main(["check", "--output-format", "json", *args])
        found = json.loads(capsys.readouterr().out)
        return [(Path(d["filename"]).as_posix(), d["location"]["row"], d["code"], d["message"]) for d in found]

    return go


def _without_half(trainer: Path) -> None:
    trainer.write_text(trainer.read_text().replace("    model = model.half()\n", "")
                       .replace(", dtype=torch.float16", ""))


def test_the_trainers_half_makes_the_models_fills_findings_citing_it(project, check):
    found = check(project, "--no-cache", ".")
    assert [(f, row, code) for f, row, code, _ in found] == [
        ("attention/layers.py", 18, "NAN203"),  # `-MASK_VALUE`, imported from attention/consts.py
        ("attention/layers.py", 30, "NAN203"),
    ]
    for *_, message in found:
        assert "the project runs in float16 (a model made `.half()` at train.py:15)" in message
    # The histogram filled with 1e9 (line 36) is no matmul output: float32 in any project.


def test_a_file_linted_alone_still_sees_its_project(project, check):
    found = check(project / "attention", "--no-cache", "layers.py")
    assert [row for _, row, _, _ in found] == [18, 30]
    where = f"a model made `.half()` at {project / 'train.py'}:15"  # outside the working directory: absolute
    assert all(where in m for *_, m in found)


def test_precision_fp32_in_the_config_turns_the_search_off(project, check):
    (project / "pyproject.toml").write_text('[tool.nanlint]\nextend-select = ["NAN203"]\nprecision = "fp32"\n')
    assert check(project, "--no-cache", ".") == []


def test_precision_fp16_in_the_config_is_cited_as_the_config(project, check):
    _without_half(project / "train.py")
    (project / "pyproject.toml").write_text('[tool.nanlint]\nextend-select = ["NAN203"]\nprecision = "fp16"\n')
    found = check(project, "--no-cache", ".")
    assert [row for _, row, _, _ in found] == [18, 30]
    assert all('(`precision = "fp16"` in the config)' in m for *_, m in found)


def test_tests_comments_strings_and_nested_projects_are_not_evidence(project, check):
    _without_half(project / "train.py")
    # The tests run the model in half (tests/test_layers.py); these say float16 in words only.
    (project / "notes.py").write_text(
        '"""Call model.half() or pass dtype=torch.float16 to run in half precision."""\n'
        "# scaler = torch.cuda.amp.GradScaler()\n"
        'HELP = "use .half() for speed"\n'
        "ctx = torch.autocast('cuda', dtype=torch.bfloat16)  # bfloat16: float32's range\n"
    )
    vendored = project / "third_party" / "other"
    vendored.mkdir(parents=True)
    (vendored / "setup.py").write_text("")
    (vendored / "run.py").write_text("model = model.half()\n")
    assert check(project, "--no-cache", "attention") == []


SQUASH = """import torch


def squash(t):
    e = torch.clamp(-t / 0.01, min=-50, max=50)
    return 1.0 / (1.0 + torch.exp(e))
"""


@pytest.mark.parametrize("trainer, reported", [
    ("model = model.half()\n", True),  # every op in float16: exp(50) is inf there
    ("scaler = torch.cuda.amp.GradScaler()\n", False),  # autocast runs exp in float32
    ("model = model.float()\n", False),
])
def test_mixed_precision_keeps_exp_in_float32_a_half_model_does_not(tmp_path, check, trainer, reported):
    (tmp_path / "setup.cfg").write_text("")
    (tmp_path / "train.py").write_text("import torch\n" + trainer)
    (tmp_path / "ops.py").write_text(SQUASH)
    found = check(tmp_path, "--no-cache", "--select", "NAN101", "ops.py")
    assert [code for _, _, code, _ in found] == (["NAN101"] if reported else [])


RANKING = """import torch


def bpr(hidden, index_map, pos_emb, neg_emb):
    out = torch.bmm(index_map, hidden)
    pos = torch.sum(out * pos_emb, dim=-1)
    neg = torch.sum(out * neg_emb, dim=-1)
    return -torch.log(1e-14 + torch.sigmoid(pos - neg)).mean()


def full_sort(hidden, items):
    scores = hidden @ items.T
    return -torch.log(1e-14 + torch.sigmoid(scores)).mean()
"""


def test_a_projects_mixed_precision_reads_sums_as_float32(tmp_path, check):
    """A trainer's GradScaler means autocast: a `torch.sum` of matmul outputs is float32
    there, so its epsilon survives; a matmul's own scores stay float16."""
    (tmp_path / "setup.cfg").write_text("")
    (tmp_path / "train.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    (tmp_path / "ranking.py").write_text(RANKING)
    found = check(tmp_path, "--no-cache", "--extend-select", "NAN202", "ranking.py")
    assert [(row, code) for _, row, code, _ in found] == [(13, "NAN202")]
    (tmp_path / "train.py").write_text("import torch\nmodel = model.half()\n")
    found = check(tmp_path, "--no-cache", "--extend-select", "NAN202", "ranking.py")
    assert [(row, code) for _, row, code, _ in found] == [(8, "NAN202"), (13, "NAN202")]


def test_the_cache_relints_a_model_file_when_the_trainer_starts_using_half(project, check, tmp_path):
    cache = ["--cache-dir", str(tmp_path / "cache")]
    original = (project / "train.py").read_text()
    _without_half(project / "train.py")
    assert check(project, *cache, ".") == []
    (project / "train.py").write_text(original)
    assert [row for _, row, _, _ in check(project, *cache, ".")] == [18, 30]


def test_a_loose_script_is_its_own_evidence(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    if find_root(scratch) is not None:
        pytest.skip(f"a root marker above the temporary directory: {find_root(scratch)}")
    script = scratch / "attend.py"
    script.write_text("scores = scores.masked_fill(m, -1e9)\n")
    (scratch / "other.py").write_text("model = model.half()\n")
    assert project_of(script) is None  # no root marker, no package: nothing around it is searched
    assert ProjectPrecisionFinder().of(script, Settings()) is None
    (scratch / "__init__.py").write_text("")
    assert project_of(script) == tmp_path  # a package: the folder above it is the project
    found = ProjectPrecisionFinder().of(script, Settings())
    assert found is not None and found.reason.endswith("other.py:1")
    installed = tmp_path / "site-packages" / "pkg"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    assert project_of(installed / "mod.py") is None  # an installed package: not a project to search


FILL = """import torch


def attend(q, k, mask):
    scores = q @ k.transpose(-2, -1)
    return scores.masked_fill(mask, -1e18).softmax(-1)
"""
FP16_OPTION = "import argparse\n\nparser = argparse.ArgumentParser()\nparser.add_argument('--fp16', action='store_true')\n"
MAIN = "\n\nif __name__ == '__main__':\n    main()\n"


def _write(root: Path, files: dict) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _precision_of(root: Path, name: str) -> Optional[str]:
    """What the project shows for `root/name`: the reason cited, with paths under `root`."""
    found = ProjectPrecisionFinder().of(root / name, Settings())
    return found.reason.replace(f"{root}{os.sep}", "") if found is not None else None


def test_a_line_counts_where_a_script_runs_both_it_and_the_file(tmp_path):
    # A monorepo: an unrelated trainer's `--fp16` does not make a sub-project float16 whose
    # own script runs its model in float32 (`from modeling import ...`: the script's folder).
    _write(tmp_path, {
        "setup.py": "",
        "lib/__init__.py": "",
        "legacy/run_glue.py": "import lib\n" + FP16_OPTION + MAIN,
        "research/abs/__init__.py": "",
        "research/abs/modeling.py": FILL,
        "research/abs/run.py": "from modeling import attend\n\ndef main():\n    pass\n" + MAIN,
    })
    assert _precision_of(tmp_path, "research/abs/modeling.py") is None
    # The sub-project's own script asks for float16: its line counts, and is the one cited.
    (tmp_path / "research/abs/run.py").write_text("from modeling import attend\n" + FP16_OPTION + MAIN)
    assert _precision_of(tmp_path, "research/abs/modeling.py") == "a `--fp16` option at research/abs/run.py:5"
    # A trainer elsewhere that imports a module which imports the model counts too.
    (tmp_path / "research/abs/run.py").write_text("from modeling import attend\n" + MAIN)
    _write(tmp_path, {"research/abs/loss.py": "from .modeling import attend\n",
                      "train.py": "from research.abs import loss\n\nmodel = model.half()\n"})
    assert _precision_of(tmp_path, "research/abs/modeling.py") == "a model made `.half()` at train.py:3"


def test_a_file_no_other_script_imports_takes_the_projects_first_line(tmp_path):
    # Built from a config or a registry, or run by its own smoke test only: the project's
    # trainer is taken to run it.
    _write(tmp_path, {
        "setup.cfg": "",
        "train.py": "import hydra\n\nscaler = torch.cuda.amp.GradScaler()\n",
        "models/__init__.py": "",
        "models/attention.py": FILL + "\n\nif __name__ == '__main__':\n    attend(q, k, m)\n",
    })
    assert _precision_of(tmp_path, "models/attention.py") == "a `GradScaler` (float16 mixed precision) at train.py:3"


def test_imports_for_type_checkers_do_not_run(tmp_path):
    # A lazy package's `__init__` names every module under `if TYPE_CHECKING:` and imports
    # none of them: a script that imports the package does not run its trainer.
    _write(tmp_path, {
        "setup.py": "",
        "lib/__init__.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .trainer import Trainer\n"
                           "else:\n    from .lazy import LazyModule\n",
        "lib/lazy.py": "",
        "lib/trainer.py": "scaler = torch.cuda.amp.GradScaler()\n",
        "app/modeling.py": FILL,
        "app/run.py": "import lib\nfrom modeling import attend\n" + MAIN,
    })
    assert _precision_of(tmp_path, "app/modeling.py") is None
    (tmp_path / "lib/__init__.py").write_text("from .trainer import Trainer\n")
    assert _precision_of(tmp_path, "app/modeling.py") == "a `GradScaler` (float16 mixed precision) at lib/trainer.py:1"


def test_find_sign_reads_code_not_words():
    assert find_sign(b"import torch\nnet = Net()\nnet = net.half()\n") == (3, "a model made `.half()`", "all")
    assert find_sign(b"self.model = self.model.cuda().half()\n") == (1, "a model made `.half()`", "all")
    assert find_sign(b"scaler = torch.cuda.amp.GradScaler()\n") == (
        1, "a `GradScaler` (float16 mixed precision)", "matmul")
    assert find_sign(b"with torch.autocast('cuda'):\n    pass\n") == (1, "CUDA autocast (float16)", "matmul")
    assert find_sign(b"p.add_argument('--fp16', action='store_true')\n") == (1, "a `--fp16` option", "matmul")
    # bfloat16 autocast has float32's range; casts for storage or inference say nothing of training.
    assert find_sign(b"with torch.autocast(device_type='cuda', dtype=torch.bfloat16):\n    pass\n") is None
    assert find_sign(b"with torch.cuda.amp.autocast(enabled=False):\n    y = x.float()\n") is None
    assert find_sign(b"w = torch.zeros(3, dtype=torch.float16)\nstate = {k: v.half() for k, v in sd.items()}\n") is None
    # Words are not code.
    assert find_sign(b"x = 1  # call model.half() here\n") is None
    assert find_sign(b'"""Pass a GradScaler() to train in float16."""\n') is None
    assert find_sign(b'HELP = "call model.half() first"\nx = 1\n') is None
    assert find_sign(b"a = '#'; net = net.half()\n") == (1, "a model made `.half()`", "all")  # a quoted '#'


def test_an_fp16_option_is_one_that_is_declared_or_passed():
    option = "a `--fp16` option"
    assert find_sign(b"parser.add_argument(\n    '--fp16',\n    action='store_true')\n") == (2, option, "matmul")
    assert find_sign(b"@click.option('--fp16', is_flag=True)\n") == (1, option, "matmul")
    assert find_sign(b"if '--fp16' in sys.argv:\n    pass\n") == (1, option, "matmul")
    assert find_sign(b"cmd = [sys.executable, 'train.py', '--fp16']\n") == (1, option, "matmul")
    assert find_sign(b"run(\n    [\n        '--fp16',\n    ])\n") == (3, option, "matmul")
    # A table of option names (a linter's own, like nanlint's) or a dictionary key is a word.
    assert find_sign(b"SIGNS = (\n    ('--fp16', re.compile('x'), 'an option'),\n)\n") is None
    assert find_sign(b"x = 1\nFLAGS = {'--fp16': True}\n") is None
    assert find_sign(Path(project_precision.__file__).read_bytes()) is None


def test_the_editor_sees_the_projects_precision(project):
    from nanlint.server.edits import lint_document

    layers = project / "attention" / "layers.py"
    linted = lint_document(layers, layers.read_text())
    assert [(d.start.row, d.code) for d in linted.diagnostics] == [(18, "NAN203"), (30, "NAN203")]
    assert all("a model made `.half()` at" in d.message for d in linted.diagnostics)
