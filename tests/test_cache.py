"""The result cache: hits give exactly what a fresh lint gives; every input that changes a
result (the file, an imported file's summary, the settings, nanlint's code) misses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import libcst as cst
import pytest

import nanlint.core.store
from nanlint.run.cache import Cache, diagnostic_from_data, diagnostic_to_data
from nanlint.cli import main
from nanlint.run.config import Settings
from nanlint.output import render
from nanlint.rules import Rule
from nanlint.run.runner import run

# NAN101 (a sigmoid written by hand: one expression, an exact fix, on by default) is these
# tests' sample hazard.

ROOT = Path(__file__).resolve().parent.parent
HAZARD = "import torch\n\n\ndef gate(z):\n    return 1 / (1 + torch.exp(-z))\n"
CLEAN = "import torch\n\n\ndef gate(z):\n    return torch.sigmoid(z)\n"


def make(root: Path, files: Dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def lint(root: Path, cache: Cache, **kwargs):
    cwd = os.getcwd()
    os.chdir(root)
    try:
        return run(["."], Settings(root=root), jobs=1, cache=cache, **kwargs)
    finally:
        os.chdir(cwd)


def test_diagnostics_survive_the_round_trip_with_fixes_and_probes():
    result = run([str(ROOT / "fixtures")], Settings(root=ROOT, select=["ALL"]), jobs=1)
    with_probe = [d for d in result.diagnostics if d.probe is not None]
    with_fix = [d for d in result.diagnostics if d.fix is not None]
    assert len(with_probe) > 20 and len(with_fix) > 20
    assert any(d.probe.kind == "harness" and d.probe.params for d in with_probe)
    for d in result.diagnostics:
        back = diagnostic_from_data(json.loads(json.dumps(diagnostic_to_data(d))))
        assert back == d and back.line_text == d.line_text
        hash(back.probe)  # still frozen data: tuples, not lists


def test_warm_run_reads_every_result_and_prints_the_same(tmp_path):
    project = make(tmp_path / "p", {"pyproject.toml": ""})
    for fixture in sorted((ROOT / "fixtures").glob("NAN1*.py")):
        (project / fixture.name).write_text(fixture.read_text())
    cache = Cache(tmp_path / "cache")
    fresh = lint(project, None)
    cold = lint(project, cache)
    assert cache.misses == len(list(project.glob("*.py"))) and cache.hits == 0
    warm_cache = Cache(tmp_path / "cache")
    warm = lint(project, warm_cache)
    assert warm_cache.hits == cache.misses and warm_cache.misses == 0
    for fmt in ("json", "text", "sarif"):
        expected = render(fmt, fresh.diagnostics, unsafe_fixes=True)
        assert render(fmt, cold.diagnostics, unsafe_fixes=True) == expected
        assert render(fmt, warm.diagnostics, unsafe_fixes=True) == expected
    assert fresh.diagnostics and [d.line_text for d in warm.diagnostics] == [d.line_text for d in fresh.diagnostics]


def test_an_edited_file_is_linted_again_and_only_it(tmp_path):
    project = make(tmp_path / "p", {"pyproject.toml": "", "a.py": HAZARD, "b.py": HAZARD})
    lint(project, Cache(tmp_path / "c"))
    (project / "a.py").write_text(CLEAN)
    cache = Cache(tmp_path / "c")
    result = lint(project, cache)
    assert (cache.hits, cache.misses) == (1, 1)
    assert [d.path for d in result.diagnostics] == ["b.py"]


CLAMPED_CALLERS = (
    "import torch\n\n\ndef mix(a):\n    return gate(a.clamp(-20.0, 20.0))\n\n\n"
    "def gate(z):\n    return 1 / (1 + torch.exp(-z))\n"
)


def test_becoming_part_of_a_package_is_part_of_the_key(tmp_path):
    # In a script the file's calls are all the calls, so every caller's clamp bounds `gate`;
    # once an __init__.py makes it a package module, callers elsewhere may pass anything.
    project = make(tmp_path / "p", {"pyproject.toml": "", "m.py": CLAMPED_CALLERS})
    assert lint(project, Cache(tmp_path / "c")).diagnostics == []
    (project / "__init__.py").write_text("")
    cache = Cache(tmp_path / "c")
    found = [d for d in lint(project, cache).diagnostics if d.path.endswith("m.py")]
    assert [d.code for d in found] == ["NAN101"] and cache.hits == 0
    (project / "__init__.py").unlink()
    assert lint(project, Cache(tmp_path / "c")).diagnostics == []


def test_a_warm_run_takes_each_unchanged_files_imports_from_its_entry(tmp_path, monkeypatch):
    import nanlint.analysis.project

    files = {"pyproject.toml": "", "pkg/__init__.py": "", "pkg/nets.py": HAZARD,
             "pkg/train.py": "from .nets import gate\nimport torch\n" + HAZARD}
    project = make(tmp_path / "p", files)
    lint(project, Cache(tmp_path / "c"))
    scanned = []
    real_scan = nanlint.analysis.project.scan_imports
    monkeypatch.setattr(nanlint.analysis.project, "scan_imports", lambda data: scanned.append(data) or real_scan(data))
    warm = Cache(tmp_path / "c")
    lint(project, warm)
    assert scanned == [] and (warm.hits, warm.misses) == (3, 0)
    # An edited file is scanned again, and its importer is linted again through the import.
    (project / "pkg" / "nets.py").write_text(CLEAN)
    edited = Cache(tmp_path / "c")
    result = lint(project, edited)
    assert scanned == [CLEAN.encode()] and (edited.hits, edited.misses) == (1, 2)
    assert [d.path for d in result.diagnostics] == ["pkg/train.py"]


def test_settings_and_nanlint_code_are_part_of_the_key(tmp_path, monkeypatch):
    project = make(tmp_path / "p", {"pyproject.toml": "", "a.py": HAZARD})
    lint(project, Cache(tmp_path / "c"))

    def again(settings: Settings) -> Cache:
        cache = Cache(tmp_path / "c")
        cwd = os.getcwd()
        os.chdir(project)
        try:
            run(["."], settings, jobs=1, cache=cache)
        finally:
            os.chdir(cwd)
        return cache

    assert again(Settings(root=project)).hits == 1
    assert again(Settings(root=project, ignore=["NAN101"])).misses == 1
    assert again(Settings(root=project, precision="float16")).misses == 1
    assert again(Settings(root=project)).hits == 1  # other settings did not evict it
    monkeypatch.setattr(nanlint.core.store, "_code_fingerprint", "another build of nanlint")
    assert again(Settings(root=project)).misses == 1


def test_fix_stores_the_fixed_content_and_diff_stores_nothing_false(tmp_path):
    project = make(tmp_path / "p", {"pyproject.toml": "", "a.py": HAZARD})
    assert len(lint(project, Cache(tmp_path / "c")).diagnostics) == 1  # cached: one fixable finding
    shown = lint(project, Cache(tmp_path / "c"), diff=True)
    assert shown.fixed == 1 and shown.diffs  # a cached fixable finding does not skip the fix
    after_diff = Cache(tmp_path / "c")
    assert len(lint(project, after_diff).diagnostics) == 1  # the file was not written
    assert after_diff.hits == 1
    fixed = lint(project, Cache(tmp_path / "c"), fix=True)
    assert fixed.fixed == 1 and (project / "a.py").read_text() == CLEAN
    warm = Cache(tmp_path / "c")
    assert lint(project, warm).diagnostics == [] and warm.hits == 1  # the fixed content's entry
    (project / "a.py").write_text(HAZARD)  # back to the old content: linted and found again
    assert len(lint(project, Cache(tmp_path / "c")).diagnostics) == 1


def test_a_damaged_or_unwritable_cache_costs_speed_only(tmp_path):
    project = make(tmp_path / "p", {"pyproject.toml": "", "a.py": HAZARD})
    lint(project, Cache(tmp_path / "c"))
    for entry in (tmp_path / "c").rglob("*.json"):
        entry.write_text('{"key": "truncated')
    cache = Cache(tmp_path / "c")
    assert len(lint(project, cache).diagnostics) == 1 and cache.misses == 1
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert len(lint(project, Cache(blocked / "cache")).diagnostics) == 1


# --- what the cache depends on outside the file ----------------------------------------------


class _LogOfImportedSoftmax(Rule):
    """A test rule that reads the project index's summaries: `torch.log(f(x))` where `f`
    comes from a project module whose summary says it returns a softmax."""

    code = "NAN993"
    name = "test-imported-softmax"
    message = "Test rule: log of a softmax computed in another module"

    def visit_Call(self, node, ctx):
        if ctx.qualname(node.func) != "torch.log" or not node.args:
            return
        inner = node.args[0].value
        if not (isinstance(inner, cst.Call) and isinstance(inner.func, cst.Name)):
            return
        for stmt in ctx.module.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                    spelled = "." * len(small.relative) + (cst.Module([]).code_for_node(small.module) if small.module else "")
                    names = [a.name.value for a in small.names]
                    summary = ctx.imported.get(spelled) or {}
                    if inner.func.value in names and inner.func.value in summary.get("softmax_functions", ()):
                        ctx.report(self, node)


def _summarize(path: Path, text: str):
    """A fake summary provider: the functions whose return line takes a softmax."""
    found, current = [], None
    for line in text.splitlines():
        if line.startswith("def "):
            current = line[4:].split("(")[0]
        elif line.strip().startswith("return") and "softmax" in line and current:
            found.append(current)
    return {"softmax_functions": found}


CROSS_FILE = {
    "pyproject.toml": "",
    "pkg/__init__.py": "",
    "pkg/nets.py": "import torch\n\n\ndef actor(x):\n    return torch.softmax(x, -1)\n",
    "pkg/train.py": "import torch\nfrom .nets import actor\n\n\ndef loss(obs):\n    return -torch.log(actor(obs)).mean()\n",
    "pkg/other.py": "import torch\n\n\ndef f(x):\n    return torch.log(x)\n",
}


def test_editing_an_imported_module_relints_its_importers_and_changes_their_result(tmp_path, monkeypatch):
    monkeypatch.setattr("nanlint.run.runner.select_rules", lambda settings: [_LogOfImportedSoftmax])
    project = make(tmp_path / "p", CROSS_FILE)

    def go():
        cache = Cache(tmp_path / "c")
        result = lint(project, cache, summarize=_summarize)
        assert result.errors == []
        return cache, [(d.path, d.start.row, d.code) for d in result.diagnostics]

    cache, found = go()
    assert found == [(os.path.join("pkg", "train.py"), 6, "NAN993")] and cache.misses == 4
    cache, again = go()
    assert again == found and (cache.hits, cache.misses) == (4, 0)

    # An edit that leaves nets' summary alone re-lints nets only.
    (project / "pkg/nets.py").write_text(CROSS_FILE["pkg/nets.py"] + "# a comment\n")
    cache, again = go()
    assert again == found and (cache.hits, cache.misses) == (3, 1)

    # The model now returns a sigmoid: train.py is linted again and its finding goes.
    (project / "pkg/nets.py").write_text("import torch\n\n\ndef actor(x):\n    return torch.sigmoid(x)\n")
    cache, after = go()
    assert after == [] and (cache.hits, cache.misses) == (2, 2)

    # And back: found again (the old entry was overwritten, not wrongly reused).
    (project / "pkg/nets.py").write_text(CROSS_FILE["pkg/nets.py"])
    cache, back = go()
    assert back == found and cache.misses == 2


def test_without_a_provider_an_imported_files_bytes_are_the_dependency(tmp_path):
    project = make(tmp_path / "p", CROSS_FILE)
    lint(project, Cache(tmp_path / "c"))
    (project / "pkg/nets.py").write_text(CROSS_FILE["pkg/nets.py"] + "# a comment\n")
    cache = Cache(tmp_path / "c")
    lint(project, cache)
    assert (cache.hits, cache.misses) == (2, 2)  # nets.py and train.py, which imports it


# --- where the cache lives, and two runs at once ----------------------------------------------


@pytest.fixture
def cli(monkeypatch, capsys):
    def go(cwd: Path, *args: str):
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        return exc.value.code, capsys.readouterr().out

    return go


def test_the_cache_directory_and_its_options(tmp_path, cli, monkeypatch):
    project = make(tmp_path / "p", {"pyproject.toml": "[tool.nanlint]\n", "sub/a.py": HAZARD})
    monkeypatch.delenv("NANLINT_CACHE_DIR", raising=False)
    code, out = cli(project / "sub", "a.py")
    assert code == 1 and "NAN101" in out
    cache_dir = project / ".nanlint_cache"  # at the project root, not the working directory
    assert (cache_dir / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert (cache_dir / ".gitignore").read_text().splitlines()[-1] == "*"
    assert not (project / "sub" / ".nanlint_cache").exists()

    cli(project, "--cache-dir", str(tmp_path / "chosen"), "sub")
    assert list((tmp_path / "chosen").rglob("*.json"))
    monkeypatch.setenv("NANLINT_CACHE_DIR", str(tmp_path / "from-env"))
    cli(project, "sub")
    assert list((tmp_path / "from-env").rglob("*.json"))
    monkeypatch.delenv("NANLINT_CACHE_DIR")
    (project / "pyproject.toml").write_text('[tool.nanlint]\ncache-dir = "build/lint-cache"\n')
    cli(project, "sub")
    assert list((project / "build/lint-cache").rglob("*.json"))

    other = make(tmp_path / "q", {"pyproject.toml": "", "a.py": HAZARD})
    code, _ = cli(other, "--no-cache", "a.py")
    assert code == 1 and not (other / ".nanlint_cache").exists()


def test_the_repository_ignores_the_cache(tmp_path):
    project = make(tmp_path / "p", {"pyproject.toml": "", "a.py": HAZARD})
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    lint(project, Cache(project / ".nanlint_cache"))
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=project,
                            capture_output=True, text=True, check=True).stdout
    assert ".nanlint_cache" not in status and "a.py" in status


_WRITER = """
import sys
from pathlib import Path
from nanlint.run.cache import Cache
cache = Cache(Path(sys.argv[1]))
me = sys.argv[2]
payload = {"diagnostics": [], "writer": me, "padding": me * (1000 if me == "a" else 50000)}
for i in range(300):
    cache.store("slot", "key-" + me, payload)
"""


def test_two_processes_writing_one_entry_leave_a_whole_entry(tmp_path):
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path / "c"), who])
        for who in ("a", "b")
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    entries = list((tmp_path / "c").rglob("*.json"))
    assert len(entries) == 1  # no temporary file left beside it
    data = json.loads(entries[0].read_text())
    who = data["result"]["writer"]
    assert data["key"] == "key-" + who and data["result"]["padding"] == who * (1000 if who == "a" else 50000)


def test_two_concurrent_runs_agree(tmp_path):
    project = make(tmp_path / "p", {"pyproject.toml": ""})
    for fixture in sorted((ROOT / "fixtures").glob("NAN1*.py")):
        (project / fixture.name).write_text(fixture.read_text())
    command = [sys.executable, "-m", "nanlint", "--output-format", "json", "-j", "1", "."]
    procs = [subprocess.Popen(command, cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    again = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=300)
    assert outs[0][0] == outs[1][0] == again.stdout and json.loads(again.stdout)
    assert not [p for p in (project / ".nanlint_cache").rglob("*") if p.name.endswith(".tmp")]
