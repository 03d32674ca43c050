"""Jupyter notebooks: linted as one module per notebook (facts flow from cell to cell),
IPython syntax skipped, positions per cell in every format, fixes written back into the
changed cells only, broken notebooks reported in one line, and `verify` on their findings.

The fixture set is fixtures/notebooks/: hazards.ipynb (hazards in cells 4 and 7, magics,
a %%bash cell, a suppressed finding, outputs), broken.ipynb (invalid JSON) and
not_a_notebook.ipynb (JSON that is not a notebook)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nanlint.cli import main
from nanlint.core.diagnostics import Position
from nanlint.run.notebooks import read_notebook

# NAN101 (a sigmoid written by hand: one expression, an exact fix, on by default) is these
# tests' sample hazard.

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "fixtures" / "notebooks"
HAZARDS = NOTEBOOKS / "hazards.ipynb"


def run(capsys, *args):
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A copy of the fixture set, as the current directory, in a project with a config (the
    log of a softmax in cell 7, NAN102, is the notebook's second hazard)."""
    for f in NOTEBOOKS.glob("*.ipynb"):
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "pyproject.toml").write_text('[tool.nanlint]\nextend-select = ["NAN102"]\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


def notebook(*cells, language="python", indent=1, ensure_ascii=False):
    """A notebook in nbformat's layout; each cell is source text, a ("markdown", text) pair or
    a ("string", text) pair for a source stored as one string."""
    out = []
    for i, cell in enumerate(cells):
        kind, text = cell if isinstance(cell, tuple) else ("code", cell)
        lines = [line for line in text.splitlines(keepends=True)]
        entry = {"cell_type": "markdown" if kind == "markdown" else "code", "id": f"c{i}", "metadata": {},
                 "source": text if kind == "string" else lines}
        if entry["cell_type"] == "code":
            entry.update(execution_count=None, outputs=[])
        out.append(entry)
    nb = {"cells": out, "metadata": {"language_info": {"name": language}}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=indent, sort_keys=True, ensure_ascii=ensure_ascii) + "\n"


def test_fixture_set_is_linted_per_cell_and_the_run_goes_on(work, capsys):
    code, out, err = run(capsys, ".")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == (
        "broken.ipynb:1:1: NAN002 not a valid notebook: invalid JSON (Expecting ',' delimiter at line 4, "
        "column 2); the file was not linted"
    )
    assert lines[1].startswith("hazards.ipynb:cell 4:2:8: NAN101 [*] Sigmoid written with `exp`")
    assert lines[2].startswith("hazards.ipynb:cell 7:2:12: NAN102 [*] `log(softmax(x))`")
    assert lines[3] == (
        "not_a_notebook.ipynb:1:1: NAN002 not a Jupyter notebook: no `cells` list at the top level; "
        "the file was not linted"
    )
    # No syntax error for %timeit, !pip, ?obj, obj?, %%time, %%bash, `files = !ls`; the %%bash
    # cell's text is not Python and the `# noqa: NAN101` line in cell 8 is suppressed.
    assert "NAN001" not in out
    assert lines[4] == "Found 4 problems (2 fixable with --fix)."
    assert err == ""


def test_notebook_named_or_found_by_a_walk_next_to_python_files(work, capsys):
    (work / "sub").mkdir()
    shutil.copy(HAZARDS, work / "sub" / "nb.ipynb")
    (work / "sub" / "m.py").write_text("import torch\n\n\ndef g(z):\n    return 1 / (1 + torch.exp(-z))\n")
    code, out, _ = run(capsys, "sub")
    assert [line.split(" ")[0] for line in out.splitlines()[:-1]] == [
        "sub/m.py:5:12:", "sub/nb.ipynb:cell", "sub/nb.ipynb:cell",
    ]
    code, out, _ = run(capsys, "sub/nb.ipynb")
    assert out.count("sub/nb.ipynb:cell ") == 2


def test_facts_flow_from_cell_to_cell(tmp_path, monkeypatch, capsys):
    # `exp` is torch's only because of the import in the first cell.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nb.ipynb").write_text(notebook(
        "from torch import exp\n", ("markdown", "text\n"), "def gate(z):\n    return 1 / (1 + exp(-z))\n"
    ))
    code, out, _ = run(capsys, "nb.ipynb")
    assert out.splitlines()[0].startswith("nb.ipynb:cell 3:2:12: NAN101")


def test_fix_writes_back_only_the_changed_cells(work, capsys):
    before = (work / "hazards.ipynb").read_text(encoding="utf-8")
    code, out, err = run(capsys, "--fix", "hazards.ipynb")
    assert code == 0, out + err
    assert out == "Found 2 problems (2 fixed, 0 remaining).\n"
    after = (work / "hazards.ipynb").read_text(encoding="utf-8")
    changed = [(a, b) for a, b in zip(before.splitlines(True), after.splitlines(True)) if a != b]
    assert len(before.splitlines()) == len(after.splitlines())
    assert changed == [
        ('    "gate = 1 / (1 + torch.exp(-z))  # cell 4, line 2: NAN101\\n",\n',
         '    "gate = torch.sigmoid(z)  # cell 4, line 2: NAN101\\n",\n'),
        ('    "    return torch.log(torch.softmax(logits, dim=-1))  # NAN102\\n",\n',
         '    "    return torch.log_softmax(logits, dim=-1)  # NAN102\\n",\n'),
    ]
    assert after.endswith("}\n")
    # nbformat accepts it, and the outputs, metadata and other cells are what they were.
    nbformat = pytest.importorskip("nbformat")
    old = nbformat.reads(before, as_version=4)
    new = nbformat.reads(after, as_version=4)
    nbformat.validate(new)
    assert new.metadata == old.metadata
    assert [c.get("outputs") for c in new.cells] == [c.get("outputs") for c in old.cells]
    assert new.cells[4].source == old.cells[4].source  # the %%bash cell
    assert new.cells[3].source.startswith("%%time\ngate = torch.sigmoid(z)")
    # Nothing left to fix; a second run changes nothing.
    assert run(capsys, "hazards.ipynb")[0] == 0
    assert run(capsys, "--fix", "hazards.ipynb")[1] == "All checks passed!\n"
    assert (work / "hazards.ipynb").read_text(encoding="utf-8") == after


def test_diff_shows_changed_cells_and_writes_nothing(work, capsys):
    before = (work / "hazards.ipynb").read_bytes()
    code, out, err = run(capsys, "--diff", "hazards.ipynb")
    assert code == 1
    assert "--- a/hazards.ipynb:cell 4\n+++ b/hazards.ipynb:cell 4\n" in out
    assert "-gate = 1 / (1 + torch.exp(-z))  # cell 4, line 2: NAN101\n+gate = torch.sigmoid(z)" in out
    assert "--- a/hazards.ipynb:cell 7\n" in out
    assert err.startswith("Would fix 2 problems.")
    assert (work / "hazards.ipynb").read_bytes() == before


def test_json_sarif_and_github_positions(work, capsys):
    raw_lines = (work / "hazards.ipynb").read_text(encoding="utf-8").splitlines()
    _, out, _ = run(capsys, "--output-format", "json", "hazards.ipynb")
    first, second = json.loads(out)
    assert (first["cell"], first["location"], first["end_location"]) == (
        4, {"row": 2, "column": 8}, {"row": 2, "column": 31}
    )
    assert first["noqa_row"] == 2 and second["cell"] == 7
    _, out, _ = run(capsys, "--output-format", "sarif", "hazards.ipynb")
    results = json.loads(out)["runs"][0]["results"]
    for result in results:
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uri"] == (work / "hazards.ipynb").resolve().as_uri()
        region = location["region"]
        line = raw_lines[region["startLine"] - 1]
        flagged = line[region["startColumn"] - 1: region["endColumn"] - 1]
        assert flagged in ("1 / (1 + torch.exp(-z))", "torch.log(torch.softmax(logits, dim=-1))")
        assert result["message"]["text"].startswith("cell ")
        assert "fixes" not in result  # cell-relative edits are not file edits
    _, out, _ = run(capsys, "--output-format", "github", "hazards.ipynb")
    first_line = out.splitlines()[0]
    row = next(i for i, line in enumerate(raw_lines, 1) if "gate = 1 / (1 + torch.exp(-z))" in line)
    assert first_line.startswith(f"::error file=hazards.ipynb,line={row},col=13,endLine={row},endColumn=36,")
    assert "::cell 4:2:8: NAN101 " in first_line


def test_positions_in_the_file_across_escapes_and_string_sources(tmp_path, monkeypatch, capsys):
    # ensure_ascii escapes `é` as \u00e9 and a tab as \t: the file column counts them.
    monkeypatch.chdir(tmp_path)
    text = notebook("import torch\n", 'note = "é\\t"; g = 1 / (1 + torch.exp(-z))\n', ensure_ascii=True)
    (tmp_path / "nb.ipynb").write_text(text)
    _, out, _ = run(capsys, "--output-format", "sarif", "nb.ipynb")
    region = json.loads(out)["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
    line = text.splitlines()[region["startLine"] - 1]
    assert line[region["startColumn"] - 1: region["endColumn"] - 1] == "1 / (1 + torch.exp(-z))"
    # A source stored as one string (allowed by nbformat) is fixed as one string.
    (tmp_path / "s.ipynb").write_text(notebook(("string", "import torch\nz = encoder(batch)\ng = 1 / (1 + torch.exp(-z))")))
    code, out, _ = run(capsys, "--fix", "s.ipynb")
    data = json.loads((tmp_path / "s.ipynb").read_text())
    assert data["cells"][0]["source"] == "import torch\nz = encoder(batch)\ng = torch.sigmoid(z)"


def test_magics_are_masked_not_reported_and_restored(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cells = [
        "import torch\n%load_ext autoreload\n??torch.exp\n",
        "%%writefile helper.py\nthis is not python (\n",
        "for i in range(3):\n    %time y = torch.exp(torch.ones(2))\n    x = 1 / (1 + torch.exp(-y))\nout = !ls\ntorch.log?\n",
    ]
    (tmp_path / "nb.ipynb").write_text(notebook(*cells))
    code, out, _ = run(capsys, "nb.ipynb")
    assert "NAN001" not in out
    assert out.splitlines()[0].startswith("nb.ipynb:cell 3:3:9: NAN101")
    run(capsys, "--fix", "nb.ipynb")
    fixed = json.loads((tmp_path / "nb.ipynb").read_text())
    sources = ["".join(c["source"]) for c in fixed["cells"]]
    assert sources[:2] == cells[:2]
    assert sources[2] == cells[2].replace("1 / (1 + torch.exp(-y))", "torch.sigmoid(y)")


def test_automagics_without_percent_are_masked_and_restored(tmp_path, monkeypatch, capsys):
    """Colab-style cells: `cd repo/`, `ls -la`, `pip install timm` run as magics in IPython."""
    monkeypatch.chdir(tmp_path)
    cells = [
        "cd LearningToPaint/\nls -la\n",
        "pip install timm\nimport torch\ndef gate(x):\n    return 1 / (1 + torch.exp(-x))\n",
        "cd = 3\nls = [cd]\n",  # Python that happens to use those names: left alone
    ]
    (tmp_path / "nb.ipynb").write_text(notebook(*cells))
    code, out, _ = run(capsys, "nb.ipynb")
    assert "NAN001" not in out
    assert out.splitlines()[0].startswith("nb.ipynb:cell 2:4:12: NAN101")
    run(capsys, "--fix", "nb.ipynb")
    sources = ["".join(c["source"]) for c in json.loads((tmp_path / "nb.ipynb").read_text())["cells"]]
    assert sources[0] == cells[0] and sources[2] == cells[2]
    assert sources[1] == cells[1].replace("1 / (1 + torch.exp(-x))", "torch.sigmoid(x)")


def test_a_notebook_in_another_language_is_skipped(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.ipynb").write_text(notebook("x <- torch$exp(1)\n", language="R"))
    assert run(capsys, "r.ipynb")[:2] == (0, "All checks passed!\n")


def test_a_cell_that_does_not_parse_is_reported_and_the_other_cells_are_linted(tmp_path, monkeypatch, capsys):
    """Jupyter runs cells one by one: a scratch cell that does not parse (a stray indented
    line, a shell command without `!`) fails there alone, and loses no other cell here."""
    monkeypatch.chdir(tmp_path)
    cells = [
        "import torch\n",
        "def f(:\n    pass\n",
        "    ax.add_feature(land)\n",
        "def gate(x):\n    return 1 / (1 + torch.exp(-x))\n",
    ]
    (tmp_path / "nb.ipynb").write_text(notebook(*cells))
    code, out, _ = run(capsys, "nb.ipynb")
    lines = out.splitlines()
    assert lines[0].startswith("nb.ipynb:cell 2:1:") and "NAN001 SyntaxError" in lines[0]
    assert "(this cell was not linted)" in lines[0]
    assert lines[1].startswith("nb.ipynb:cell 3:1:") and "unexpected indent" in lines[1]
    assert lines[2].startswith("nb.ipynb:cell 4:2:12: NAN101")
    run(capsys, "--fix", "nb.ipynb")
    sources = ["".join(c["source"]) for c in json.loads((tmp_path / "nb.ipynb").read_text())["cells"]]
    assert sources[:3] == cells[:3]  # the broken cells are written back as they were
    assert sources[3] == cells[3].replace("1 / (1 + torch.exp(-x))", "torch.sigmoid(x)")


def test_a_cell_that_does_not_parse_is_blank_in_the_module_and_written_back_as_it_was():
    nb = read_notebook(notebook("x = (\n  1,\n", "import torch\ny = torch.exp(x)\n"))
    assert nb.broken == {0: (1, 5, "SyntaxError: '(' was never closed")}
    assert nb.module.split("\n")[1:3] == ["", ""]  # its rows stay, empty
    assert nb.cell_sources(nb.module)[0] == "x = (\n  1,\n"
    # Text that a fix put into its rows (an added import) is not dropped silently:
    # cell_sources returns it, and fix_notebook_text refuses to write such a fix.
    edited = nb.module.replace("\n\n\n", "\nimport math\n\n", 1)
    assert nb.cell_sources(edited)[0] == "import math\n\n"


@pytest.mark.parametrize("terms", [1_500, 20_000])
def test_a_cell_nested_too_deeply_to_parse_is_reported_and_the_other_cells_are_linted(tmp_path, monkeypatch,
                                                                                      capsys, terms):
    """A generated cell with one long sum: Python's parser rejects 20,000 terms (it used to end
    the run), LibCST would parse 1,500 for seconds (the refusal was dropped as an IPython-only
    syntax error, and the notebook passed)."""
    monkeypatch.chdir(tmp_path)
    chain = "y = " + " + ".join(["torch.exp(a)"] * terms) + "\n"
    cells = ["import torch\na = torch.ones(3)\n", chain, "def gate(x):\n    return 1 / (1 + torch.exp(-x))\n"]
    (tmp_path / "nb.ipynb").write_text(notebook(*cells))
    code, out, err = run(capsys, "nb.ipynb")
    lines = out.splitlines()
    assert lines[0].startswith("nb.ipynb:cell 2:1:1: NAN001 an expression nested ")
    assert "nanlint reads expressions up to 1,000 levels deep" in lines[0]
    assert lines[0].endswith("(this cell was not linted)")
    assert lines[1].startswith("nb.ipynb:cell 3:2:12: NAN101") and code == 1 and err == ""


def test_a_continued_shell_command_inside_a_block_stays_in_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cells = ["import torch\ndef gate(x, train):\n    if train:\n        !python train.py \\\n"
             "        --steps 10\n    return 1 / (1 + torch.exp(-x))\n"]
    (tmp_path / "nb.ipynb").write_text(notebook(*cells))
    code, out, _ = run(capsys, "nb.ipynb")
    assert "NAN001" not in out
    assert out.splitlines()[0].startswith("nb.ipynb:cell 1:6:12: NAN101")


def test_read_notebook_maps_rows_both_ways():
    nb = read_notebook(notebook("import torch\n", ("markdown", "m\n"), "a = 1\nb = torch.exp(a)\n"))
    assert [c.number for c in nb.cells] == [1, 3]
    assert nb.cell_sources(nb.module) == [c.source for c in nb.cells]


def test_verify_works_on_notebook_findings(work, capsys):
    pytest.importorskip("torch")
    code, out, err = run(capsys, "verify", "--device", "cpu", "hazards.ipynb")
    lines = out.splitlines()
    # Form rules: confirmed at inputs of the dtype; the cells' inputs are bare names the
    # analysis proves nothing about, which the verdict says ("reach not shown").
    assert lines[0].startswith("hazards.ipynb:cell 4:2:8: NAN101 confirmed:") and "reach not shown" in lines[0]
    assert lines[1].startswith("hazards.ipynb:cell 7:2:12: NAN102 confirmed:") and "reach not shown" in lines[1]
    assert code == 1
    # And from the JSON of an earlier check: the cell comes back with the finding.
    _, findings, _ = run(capsys, "--output-format", "json", "--exit-zero", "hazards.ipynb")
    (work / "findings.json").write_text(findings)
    code, out, err = run(capsys, "verify", "--device", "cpu", "--from", "findings.json", "--output-format", "json")
    data = json.loads(out)
    assert [(f["cell"], f["verification"]["verdict"]) for f in data["findings"]] == [(4, "confirmed"), (7, "confirmed")]


def test_stdin_notebook(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "nanlint", "check", "--extend-select", "NAN101", "--stdin-filename", "nb.ipynb"],
        input=HAZARDS.read_text(encoding="utf-8"), capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )
    assert r.returncode == 1
    assert r.stdout.splitlines()[0].startswith("nb.ipynb:cell 4:2:8: NAN101")


def test_top_level_await_is_not_a_syntax_error(tmp_path, monkeypatch, capsys):
    # IPython runs `await` in a cell; Python's script parser would not.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain.ipynb").write_text(notebook("import asyncio\n", "await asyncio.sleep(0)\n"))
    (tmp_path / "torch.ipynb").write_text(notebook("import torch\n", "z = await fetch()\ng = 1 / (1 + torch.exp(-z))\n"))
    code, out, _ = run(capsys, "plain.ipynb", "torch.ipynb")
    assert "NAN001" not in out
    assert out.splitlines()[0].startswith("torch.ipynb:cell 2:2:5: NAN101")


@pytest.mark.parametrize("indent", [None, 2, 4])
def test_fix_keeps_the_files_own_layout(tmp_path, monkeypatch, capsys, indent):
    monkeypatch.chdir(tmp_path)
    cells = ("import torch\n", "z = encoder(batch)\ng = 1 / (1 + torch.exp(-z))\nloss = (g * z).mean()\n")
    (tmp_path / "nb.ipynb").write_text(notebook(*cells, indent=indent))
    run(capsys, "--fix", "nb.ipynb")
    expected = notebook(cells[0], cells[1].replace("1 / (1 + torch.exp(-z))", "torch.sigmoid(z)"), indent=indent)
    assert (tmp_path / "nb.ipynb").read_text() == expected


def test_file_position_of_a_line_start_is_on_that_lines_string():
    raw = notebook("import torch\nx = 1\ny = torch.exp(x)\n")
    nb = read_notebook(raw)
    lines = raw.splitlines()
    for row, text in ((1, "import torch"), (2, "x = 1"), (3, "y = torch.exp(x)")):
        p = nb.file_position(0, Position(row, 1))
        assert lines[p.row - 1][p.column - 1:].startswith(text)


# --- lines cited in messages name their cells -----------------------------------------------

# A hand-written training step, with markdown between the cells: the step in cell 4, the clip
# in cell 6 (NAN401, on by default); a softmax in cell 8, given to `nll_loss` (NAN307, on by
# default) and to `log` (NAN102, whose message cites no line) in cell 9.
STEP_CELLS = (
    ("markdown", "# Fine-tuning\n"),
    "import torch\nimport torch.nn.functional as F\n\nmodel = torch.nn.Linear(4, 2)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nx, y = torch.randn(8, 4), torch.randn(8, 2)\n",
    ("markdown", "One step by hand.\n"),
    "opt.zero_grad()\nloss = F.mse_loss(model(x), y)\nloss.backward()\nopt.step()\n",
    ("markdown", "Then keep the gradient in check.\n"),
    "norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nprint(norm)\n",
    ("markdown", "Probabilities.\n"),
    "logits = model(x)\nprobs = torch.softmax(logits, dim=-1)\n",
    "target = torch.tensor([0, 1, 1, 0, 1, 0, 0, 1])\nnll = F.nll_loss(probs, target)\nlogp = torch.log(probs)\n",
)


def _as_script(cells) -> str:
    """The code cells as one .py file, in order (what the messages say of a script)."""
    return "".join(c for c in cells if not isinstance(c, tuple))


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_lines_cited_in_messages_name_their_cells(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nb.ipynb").write_text(notebook(*STEP_CELLS))
    script = _as_script(STEP_CELLS)
    (tmp_path / "script.py").write_text(script)
    _, out, _ = run(capsys, "--output-format", "json", "--no-cache", "nb.ipynb", "script.py")
    found = {(d["filename"], d["code"]): d for d in json.loads(out)}
    assert {code for _, code in found} == {"NAN401", "NAN307", "NAN102"}

    # NAN401 cites the step: line 10 of the script, cell 4's line 4 in the notebook.
    clip = found["nb.ipynb", "NAN401"]
    assert (clip["cell"], clip["location"]["row"]) == (6, 1)
    step_row = _line_of(script, "opt.step()")
    assert step_row == 10
    assert "clipped after `opt.step()` (cell 4, line 4): " in clip["message"]
    assert clip["message"] == found["script.py", "NAN401"]["message"].replace(
        f"(line {step_row})", "(cell 4, line 4)")

    # NAN307 cites the softmax (cell 8, line 2) and the Linear (cell 2, line 4).
    nll = found["nb.ipynb", "NAN307"]
    softmax_row, linear_row = _line_of(script, "torch.softmax"), _line_of(script, "torch.nn.Linear")
    assert (softmax_row, linear_row) == (14, 4)
    assert "softmax at cell 8, line 2" in nll["message"] and "output at cell 2, line 4" in nll["message"]
    assert "at line" not in nll["message"]
    assert nll["message"] == (
        found["script.py", "NAN307"]["message"]
        .replace(f"at line {softmax_row}", "at cell 8, line 2")
        .replace(f"at line {linear_row}", "at cell 2, line 4")
    )
    # NAN102's message cites no line: the same text as in the script.
    assert found["nb.ipynb", "NAN102"]["message"] == found["script.py", "NAN102"]["message"]


def test_cited_lines_read_the_same_in_every_format_and_from_the_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.nanlint]\n")  # the cache lives beside it
    (tmp_path / "nb.ipynb").write_text(notebook(*STEP_CELLS))
    _, out, _ = run(capsys, "--output-format", "json", "nb.ipynb")
    findings = json.loads(out)
    messages = [d["message"] for d in findings]
    assert sum("(cell 4, line 4)" in m for m in messages) == 1

    _, text, _ = run(capsys, "nb.ipynb")
    shown = [line for line in text.splitlines() if line.startswith("nb.ipynb:")]
    assert shown == [
        f"nb.ipynb:cell {d['cell']}:{d['location']['row']}:{d['location']['column']}: {d['code']} {d['message']}"
        for d in findings
    ]
    _, sarif, _ = run(capsys, "--output-format", "sarif", "nb.ipynb")
    assert [r["message"]["text"] for r in json.loads(sarif)["runs"][0]["results"]] == [
        f"cell {d['cell']}:{d['location']['row']}:{d['location']['column']}: {d['message']}" for d in findings
    ]
    _, github, _ = run(capsys, "--output-format", "github", "nb.ipynb")
    for d in findings:
        assert f"::cell {d['cell']}:{d['location']['row']}:{d['location']['column']}: {d['code']} {d['message']}" in github

    # With the cache on (a script beside the notebook fills it), a cold run, a warm run and
    # a run without the cache print the same findings (a notebook's are not cached: cell
    # positions and cited cells are computed on every run).
    (tmp_path / "script.py").write_text(_as_script(STEP_CELLS))
    _, cold, _ = run(capsys, "nb.ipynb", "script.py")
    assert (tmp_path / ".nanlint_cache").is_dir()
    _, warm, _ = run(capsys, "nb.ipynb", "script.py")
    _, uncached, _ = run(capsys, "--no-cache", "nb.ipynb", "script.py")
    assert cold == warm == uncached
    assert [line for line in warm.splitlines() if line.startswith("nb.ipynb:")] == shown


def test_only_lines_of_the_joined_module_are_rewritten():
    nb = read_notebook(notebook(("markdown", "m\n"), "import torch\n", "a = 1\nb = torch.exp(a)\n"))
    # Module rows: 1 marker, 2 import, 3 marker, 4 `a = 1`, 5 `b = ...`.
    assert nb.cited("exp at line 5 (line 2)") == "exp at cell 3, line 2 (cell 2, line 1)"
    # Quoted code, another file's line (`path:N`), a row that is no cell's line: as they were.
    kept = "`s = f'line 5'` at line 99, at utils.py:5, at line 3, pipeline 5"
    assert nb.cited(kept) == kept
    assert nb.cited("no lines here") == "no lines here"


def test_a_broken_cells_own_line_numbers_are_kept(tmp_path, monkeypatch, capsys):
    # Python reports a cell that does not parse in the cell's own lines ("on line 1").
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nb.ipynb").write_text(notebook("import torch\n\n\n", "x = (1,\n     2]\n"))
    _, out, _ = run(capsys, "nb.ipynb")
    assert out.splitlines()[0] == (
        "nb.ipynb:cell 2:2:7: NAN001 SyntaxError: closing parenthesis ']' does not match opening "
        "parenthesis '(' on line 1 (this cell was not linted)"
    )


def test_probe_evidence_cites_cells_too(tmp_path, monkeypatch, capsys):
    # What the verifier's report shows of a probe input: where its value comes from.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nb.ipynb").write_text(notebook(
        "import torch\n", ("markdown", "m\n"), "def gate(x, k=50):\n    return 1 / (1 + torch.exp(-k * x))\n"))
    _, out, _ = run(capsys, "--output-format", "json", "--no-cache", "nb.ipynb")
    (finding,) = json.loads(out)
    assert finding["code"] == "NAN101"
    assert [i["evidence"] for i in finding["probe"]["inputs"]] == ["default `k=50` at cell 3, line 1", ""]
