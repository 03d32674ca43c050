"""A hazard whose evidence is in another file of the project: the model in `nets.py`, the
loss in `train.py` (fixtures/projects/crossfile, written for these tests). The CLI flags it
with evidence from the other file, the cache re-lints a file and its importers only when the
model file is edited, and the result is the same with a pool of workers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

import nanlint.run.runner
from fixture_support import expected
from nanlint.analysis import summaries
from nanlint.analysis.values import INF, Evidence, Value
from nanlint.cli import main

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "fixtures" / "projects" / "crossfile"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    target = tmp_path / "crossfile"
    shutil.copytree(PROJECT, target)
    return target


@pytest.fixture
def check(monkeypatch, capsys, tmp_path):
    """`nanlint check --output-format json` in the project with a cache in tmp_path: the
    findings as (file, row, code, message) and the files actually linted (not from cache)."""
    linted: List[str] = []
    real = nanlint.run.runner.run_tasks

    def recording(tasks, mode, jobs):
        linted.extend(Path(t.display).as_posix() for t in tasks)
        return real(tasks, mode, jobs)

    monkeypatch.setattr(nanlint.run.runner, "run_tasks", recording)

    def go(cwd: Path, *args: str) -> Tuple[List[Tuple[str, int, str, str]], Set[str]]:
        monkeypatch.chdir(cwd)
        linted.clear()
        capsys.readouterr()
        with pytest.raises(SystemExit):
            main(["check", "--output-format", "json", "--cache-dir", str(tmp_path / "cache"), *args])
        out = capsys.readouterr().out
        found = [(Path(d["filename"]).as_posix(), d["location"]["row"], d["code"], d["message"])
                 for d in json.loads(out)]
        return found, set(linted)

    return go


# The log of a softmax or sigmoid computed in another file is NAN102's or NAN103's (on by
# default); these projects are about the facts they read from other files.
DEFAULTS = '[tool.nanlint]\n'


def expectations(root: Path) -> List[Tuple[str, int, str]]:
    out = []
    for path in sorted(root.rglob("*.py")):
        for (row, code), n in expected(path.read_text()).items():
            out += [(path.relative_to(root).as_posix(), row, code)] * n
    return sorted(out)


def where(found) -> List[Tuple[str, int, str]]:
    return sorted((f, row, code) for f, row, code, _ in found)


def test_the_project_is_flagged_with_evidence_from_the_other_file(project, check):
    found, linted = check(project, ".")
    assert where(found) == expectations(project)
    messages = {(f, row): message for f, row, _, message in found}
    # The softmax is at nets.py:14; the loss that takes its log is in train.py.
    assert "softmax at pkg/nets.py:14" in messages[("pkg/train.py", 11)]
    assert "sigmoid at pkg/nets.py:30" in messages[("pkg/train.py", 18)]
    assert "softmax at pkg/cycle_b.py:7" in messages[("pkg/cycle_a.py", 13)]
    assert "returned by `nets.Heads.gate`" in messages[("pkg/train.py", 50)]
    # Same names, no import: nothing from nets.py applies to unrelated.py; nor where a local
    # binding hides an imported name (shadowed.py).
    assert not [f for f in found if f[0] in ("pkg/unrelated.py", "pkg/shadowed.py")]
    assert "sigmoid output (`self.gate` output at pkg/models/policy.py:12" in messages[("pkg/evaluate.py", 9)]
    assert linted == {"pkg/" + name for name in (
        "__init__.py", "nets.py", "train.py", "unrelated.py", "cycle_a.py", "cycle_b.py", "evaluate.py",
        "models/__init__.py", "models/policy.py", "shadowed.py")}


def test_editing_the_model_file_relints_it_and_its_importers_only(project, check):
    first, _ = check(project, ".")
    again, linted = check(project, ".")
    assert again == first and linted == set()

    nets = project / "pkg" / "nets.py"
    original = nets.read_text()
    nets.write_text(original.replace("return torch.softmax(logits, dim=-1)", "return torch.log_softmax(logits, dim=-1)"))
    after, linted = check(project, ".")
    # nets.py and its importers; not unrelated.py, not the cycle.
    assert linted == {"pkg/nets.py", "pkg/train.py", "pkg/shadowed.py"}
    gone = {(f, row) for f, row, _, _ in first} - {(f, row) for f, row, _, _ in after}
    assert gone == {("pkg/train.py", 11), ("pkg/train.py", 23), ("pkg/train.py", 41), ("pkg/train.py", 46)}
    assert ("pkg/train.py", 18, "NAN103") in where(after)

    nets.write_text(original)
    back, linted = check(project, ".")
    assert back == first and linted == {"pkg/nets.py", "pkg/train.py", "pkg/shadowed.py"}

    # An edit of the unrelated file re-lints that file alone.
    unrelated = project / "pkg" / "unrelated.py"
    unrelated.write_text(unrelated.read_text() + "\n# edited\n")
    again, linted = check(project, ".")
    assert again == first and linted == {"pkg/unrelated.py"}

    # The re-exported policy: its file, the package that re-exports it, and evaluate.py,
    # which takes it from the package.
    policy = project / "pkg" / "models" / "policy.py"
    policy.write_text(policy.read_text().replace("self.gate = nn.Sigmoid()", "self.gate = nn.Identity()"))
    after, linted = check(project, ".")
    assert linted == {"pkg/models/policy.py", "pkg/models/__init__.py", "pkg/evaluate.py"}
    assert ("pkg/evaluate.py", 9, "NAN103") not in where(after)


def test_two_jobs_report_what_one_job_reports(project, check, pools):
    started = pools
    one, _ = check(project, "--no-cache", "--jobs", "1", ".")
    assert started == []
    two, _ = check(project, "--no-cache", "--jobs", "2", ".")
    assert started == [2]
    assert two == one and where(two) == expectations(project)


def test_diff_and_fix_see_the_imported_model(project, check, monkeypatch, capsys):
    monkeypatch.chdir(project)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["check", "--no-cache", "--diff", "--unsafe-fixes", "pkg"])
    diff = capsys.readouterr().out
    # The softplus by hand is fixed in place; the log of the softmax computed in nets.py has no
    # fix here (the logits are in nets.py), so its line is left as it is.
    assert "+    a = F.softplus(actor.logits(obs))  # expect: NAN104  (a softplus by hand)" in diff
    assert "logp = torch.log(probs)" not in diff
    with pytest.raises(SystemExit):
        main(["check", "--no-cache", "--fix", "--unsafe-fixes", "pkg"])
    fixed = (project / "pkg" / "train.py").read_text().splitlines()
    assert any("F.softplus(actor.logits(obs))" in line for line in fixed)
    found, _ = check(project, ".")
    in_train = {(row, code) for f, row, code, _ in found if f == "pkg/train.py"}
    assert "NAN104" not in {code for _, code in in_train}
    logp = next(i for i, line in enumerate(fixed, start=1) if "logp = torch.log(probs)" in line)
    assert (logp, "NAN102") in in_train


# --- summaries as data -----------------------------------------------------------------------


def test_a_value_round_trips_through_json_and_cites_its_file():
    inner = Value(lo=0.0, hi=1.0, zero="a softmax output", prob="softmax", simplex_dim="-1",
                  evidence=(Evidence(14, "softmax"),))
    v = Value(lo=-INF, hi=INF, learned=True, module_out=inner, dtype="float16",
              evidence=(Evidence(9, "`Linear` output"),))
    data = json.loads(json.dumps(summaries.value_to_data(v), allow_nan=False))
    back = summaries.value_from_data(data, "pkg/nets.py")
    assert back.module_out.prob == "softmax" and back.module_out.simplex_dim == "-1"
    assert (back.module_out.lo, back.module_out.hi, back.module_out.zero) == (0.0, 1.0, "a softmax output")
    assert (back.lo, back.hi, back.learned, back.dtype) == (-INF, INF, True, "float16")
    assert [str(e) for e in back.module_out.evidence] == ["softmax at pkg/nets.py:14"]
    assert summaries.value_to_data(Value()) == {}


def test_a_module_summary_is_small_plain_data():
    text = (PROJECT / "pkg" / "nets.py").read_text()
    data = summaries.summarize_file("nets.py", text, "pkg/nets.py")
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data["format"] == summaries.FORMAT and data["path"] == "pkg/nets.py"
    actor = data["names"]["Actor"]
    assert actor["kind"] == "class" and actor["bases"] == ["nn.Module"]
    assert actor["methods"]["forward"]["returns"]["prob"] == "softmax"
    assert actor["methods"]["logits"]["returns"].get("prob") is None
    assert "body" in actor["attributes"]
    assert data["names"]["probs_of"]["returns"]["prob"] == "sigmoid"
    assert data["names"]["stable_log_probs"]["returns"].get("zero") is None


def test_a_summary_is_computed_once_and_then_read_from_the_cache(tmp_path):
    nets = tmp_path / "nets.py"
    nets.write_text((PROJECT / "pkg" / "nets.py").read_text())
    import hashlib

    ref = summaries.ModuleRef(str(nets), hashlib.sha256(nets.read_bytes()).hexdigest(), "nets.py", str(tmp_path / "c"))
    store = summaries.SummaryStore()
    first = store.get(ref, "Actor")
    assert store.get(ref, "Actor") == first and store.computed == 1
    fresh = summaries.SummaryStore()
    assert fresh.get(ref, "Actor") == first and fresh.computed == 0  # from the cache
    assert fresh.get(ref, "probs_of")["returns"]["prob"] == "sigmoid" and fresh.computed == 1
    # A file changed since the run hashed it: nothing is known of it.
    nets.write_text("def probs_of(x):\n    return x\n")
    assert summaries.SummaryStore().get(ref, "Critic") is None


def test_an_import_cycle_terminates(tmp_path, check):
    files: Dict[str, str] = {
        "pyproject.toml": DEFAULTS,
        "a.py": "import torch\nfrom b import g\n\n\ndef f(x):\n    return torch.log(g(x))\n",
        "b.py": "import torch\nfrom a import f\n\n\ndef g(x):\n    return torch.sigmoid(f(x))\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    found, linted = check(tmp_path, ".")
    assert [(f, row) for f, row, _, _ in found] == [("a.py", 6)] and linted == {"a.py", "b.py"}


def test_the_index_follows_a_reexport_to_the_defining_file(project):
    from nanlint.analysis.project import ProjectIndex

    index = ProjectIndex()
    evaluate = project / "pkg" / "evaluate.py"
    origin = index.reexports(evaluate)
    assert origin == {".models:GatedPolicy": (project / "pkg" / "models" / "policy.py").resolve()}
    refs = index.module_refs(evaluate)
    assert refs[".models:GatedPolicy"].display == "pkg/models/policy.py"
    assert refs[".models"].display == "pkg/models/__init__.py"


def test_the_language_server_sees_the_imported_model(project):
    from nanlint.server.edits import lint_document

    train = project / "pkg" / "train.py"
    text = train.read_text()
    linted = lint_document(train, text)
    logs = ("NAN102", "NAN103")
    rows = sorted(d.start.row for d in linted.diagnostics if d.code in logs)
    assert rows == [row for f, row, code in expectations(project) if f == "pkg/train.py" and code in logs]
    assert any("softmax at pkg/nets.py:14" in d.message for d in linted.diagnostics)
    # The unsaved buffer counts: without the import, nothing is known of nets.py.
    alone = lint_document(train, text.replace("from .nets import Actor, Critic, probs_of, stable_log_probs\n",
                                              "from .other import Actor, Critic, probs_of, stable_log_probs\n"))
    assert sorted(d.start.row for d in alone.diagnostics if d.code in logs) == [23, 50]  # `nets.`


def test_verify_confirms_with_the_domain_proven_in_the_other_file(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["verify", "pkg/train.py"])
    lines = capsys.readouterr().out.strip().splitlines()
    # The log's argument is a softmax of nets.py: the verifier runs `log(softmax)` against
    # `log_softmax` on logits, along the softmax's dim.
    assert lines[0].startswith("pkg/train.py:11:12: NAN102 confirmed:") and "logits=[" in lines[0]
    # The six logs of a softmax or sigmoid and the softplus by hand (NAN104).
    assert ": 7 confirmed," in lines[-1]


def test_stdin_named_as_a_project_file_sees_what_it_imports(project):
    import subprocess
    import sys

    text = (project / "pkg" / "train.py").read_text()

    def lint(*args):
        done = subprocess.run([sys.executable, "-m", "nanlint", "check", "--no-cache", *args],
                              input=text, capture_output=True, text=True, cwd=project)
        return [line for line in done.stdout.splitlines() if " NAN102 " in line or " NAN103 " in line]

    named = lint("--stdin-filename", "pkg/train.py", "-")
    assert [line.split(" ")[0] for line in named] == [
        f"pkg/train.py:{row}:{col}:" for row, col in (
            ("11", "12"), ("18", "24"), ("23", "13"), ("41", "16"), ("46", "12"), ("50", "12"))]
    assert "softmax at pkg/nets.py:14" in named[0]
    assert lint("-") == []  # no name: its relative imports lead nowhere


def test_an_imported_file_that_is_too_big_or_broken_tells_nothing(tmp_path, monkeypatch):
    import hashlib

    big = tmp_path / "big.py"
    big.write_text("import torch\n\n\ndef probs_of(x):\n    return torch.sigmoid(x)\n" + "# padding\n" * 20)
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\n\ndef probs_of(x:\n    return torch.sigmoid(x)\n")

    def ref(path):
        return summaries.ModuleRef(str(path), hashlib.sha256(path.read_bytes()).hexdigest(), path.name)

    assert summaries.SummaryStore().get(ref(big), "probs_of")["returns"]["prob"] == "sigmoid"
    monkeypatch.setattr(summaries, "MAX_SUMMARIZED_BYTES", 100)
    assert summaries.SummaryStore().get(ref(big), "probs_of") is None
    assert summaries.SummaryStore().get(ref(broken), "probs_of") is None


def test_a_function_run_under_autocast_in_its_file_says_so(tmp_path):
    import hashlib

    nets = tmp_path / "nets.py"
    nets.write_text(
        "import torch\n\n\ndef encode(x):\n    return x * 2\n\n\ndef plain(x):\n    return x\n\n\n"
        "def step(x):\n    with torch.autocast('cuda', dtype=torch.float16):\n        return encode(x)\n"
    )
    ref = summaries.ModuleRef(str(nets), hashlib.sha256(nets.read_bytes()).hexdigest(), "nets.py")
    store = summaries.SummaryStore()
    assert store.get(ref, "encode")["half"] == "`encode` is called under autocast at line 14"
    assert "half" not in store.get(ref, "plain")
    assert summaries.summarize_file(nets, nets.read_text())["names"]["encode"]["half"].startswith("`encode`")


def test_eager_whole_module_summaries_give_the_same_findings(project, monkeypatch):
    """The index's pluggable provider with whole-module summaries (`summarize_file`): the
    cache key then holds the imported summaries instead of the imported bytes."""
    from nanlint.run.config import Settings
    from nanlint.run.runner import run

    monkeypatch.chdir(project)
    settings = Settings(root=project)
    lazy = run(["."], settings, jobs=1)
    eager = run(["."], settings, jobs=1, summarize=summaries.summarize_file)
    assert [(d.path, d.start.row, d.code) for d in eager.diagnostics] == \
        [(d.path, d.start.row, d.code) for d in lazy.diagnostics]
    assert sorted((Path(d.path).as_posix(), d.start.row, d.code) for d in lazy.diagnostics) == expectations(project)


def test_the_analysis_summary_types_round_trip_through_json():
    from nanlint.analysis import summarize_module

    text = (PROJECT / "pkg" / "nets.py").read_text()
    summary = summarize_module(("pkg/nets.py", text))
    data = json.loads(json.dumps(summaries.module_summary_to_data(summary), allow_nan=False))
    back = summaries.module_summary_from_data(data)
    assert back.path == "pkg/nets.py" and set(back.classes) == {"Actor", "Critic", "Heads"}
    assert set(back.functions) == {"probs_of", "stable_log_probs"}
    forward = back.classes["Actor"].methods["forward"].returns
    assert (forward.prob, forward.simplex_dim, forward.lo, forward.hi) == ("softmax", "-1", 0.0, 1.0)
    assert "softmax at pkg/nets.py:14" in [str(e) for e in forward.evidence]
    assert back.classes["Actor"].bases == ("nn.Module",)
    assert back.classes["Actor"].attributes["body"].module_out is not None
    assert back.functions["probs_of"].returns.prob == "sigmoid"


def _package(root: Path, files: Dict[str, str]) -> Path:
    """A project at `root` (the default rules) with the package `pkg` holding `files` by name."""
    (root / "pkg").mkdir(parents=True)
    (root / "setup.py").write_text("")
    (root / "pyproject.toml").write_text(DEFAULTS)
    (root / "pkg" / "__init__.py").write_text("")
    for name, text in files.items():
        (root / "pkg" / name).write_text(text)
    return root


def test_a_probability_returned_in_a_tuple_from_another_file(tmp_path, check):
    root = _package(tmp_path / "tuples", {
        "heads.py": "import torch\n\n\ndef policy_and_value(obs):\n    return torch.softmax(obs, -1), obs.mean(-1)\n",
        "train.py": ("import torch\n\nfrom .heads import policy_and_value\n\n\n"
                     "def loss(obs):\n    probs, value = policy_and_value(obs)\n"
                     "    return torch.log(probs).mean() + torch.log(value.exp()).mean()\n"),
    })
    found, _ = check(root, ".")
    assert where(found) == [("pkg/train.py", 8, "NAN102")]
    assert "softmax at pkg/heads.py:5" in found[0][3]


def test_flows_across_files_an_inherited_forward_two_hops_and_a_star_import(tmp_path, check):
    """Issue 33's shape 7: a class that inherits its `forward` from an imported class, a name
    imported from a module that only imports it (two hops), and `from m import *`; a look-alike
    subclass that overrides `forward` with a log-softmax is not reported."""
    root = _package(tmp_path / "hops", {
        "base.py": ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
                    "class Policy(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "        self.fc = nn.Linear(4, 2)\n\n    def forward(self, x):\n"
                    "        return F.softmax(self.fc(x), dim=-1)\n\n\n"
                    "def probs_of(logits):\n    return torch.softmax(logits, dim=-1)\n"),
        "mid.py": "from pkg.base import Policy, probs_of\n",
        "actor.py": ("import torch\nimport torch.nn.functional as F\nfrom pkg.base import Policy\n\n\n"
                     "class Actor(Policy):\n    def loss(self, x, y):\n"
                     "        return -torch.log(self(x).gather(1, y)).mean()  # expect: NAN102\n\n\n"
                     "class LogActor(Policy):\n    def forward(self, x):\n"
                     "        return F.log_softmax(self.fc(x), dim=-1)\n\n    def loss(self, x, y):\n"
                     "        return -torch.log(self(x).exp().gather(1, y)).mean()\n"),
        "hop.py": ("import torch\nfrom pkg.mid import probs_of\n\n\n"
                   "def loss(logits, y):\n    return -torch.log(probs_of(logits).gather(1, y)).mean()  # expect: NAN102\n"),
        "star.py": ("import torch\nfrom pkg.base import *\n\n\n"
                    "def loss(x, y):\n    return -torch.log(Policy()(x).gather(1, y)).mean()  # expect: NAN102\n"),
    })
    found, _ = check(root, ".")
    assert where(found) == expectations(root)
    by_file = {f: message for f, _, _, message in found}
    assert "softmax at pkg/base.py:12" in by_file["pkg/actor.py"] and "`Actor.forward`" in by_file["pkg/actor.py"]
    assert "softmax at pkg/base.py:16" in by_file["pkg/hop.py"]


def test_a_parameter_annotated_with_an_imported_class_is_its_instance(tmp_path, check):
    """Issue 38's REINFORCE shape: `actor: Actor` with `Actor` from another file, its
    `forward` a softmax, a gathered probability under a log. A name rebound in the file, or
    a class whose `forward` returns a log-softmax, is not reported."""
    root = _package(tmp_path / "annotated", {
        "nets.py": ("import torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
                    "class Actor(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "        self.fc = nn.Linear(4, 2)\n\n    def forward(self, x):\n"
                    "        return F.softmax(self.fc(x), dim=-1)\n\n\n"
                    "class LogActor(Actor):\n    def forward(self, x):\n"
                    "        return F.log_softmax(self.fc(x), dim=-1)\n"),
        "train.py": ("import torch\n\nfrom .nets import Actor, LogActor\n\n\n"
                     "def reinforce(actor: Actor, obs, a, ret):\n"
                     "    chosen = actor(obs).gather(1, a).squeeze(1)\n"
                     "    return -(torch.log(chosen) * ret).mean()  # expect: NAN102\n\n\n"
                     "def quoted(actor: \"Actor\", obs):\n"
                     "    return torch.log(actor(obs)).sum()  # expect: NAN102\n\n\n"
                     "def logs(actor: LogActor, obs, a):\n"
                     "    return -torch.log(actor(obs).exp().gather(1, a)).mean()\n"),
        "shadow.py": ("import torch\n\nfrom .nets import Actor\n\nActor = object\n\n\n"
                      "def loss(actor: Actor, obs):\n    return torch.log(actor(obs)).sum()\n"),
    })
    found, _ = check(root, ".")
    assert where(found) == expectations(root)
    assert all("softmax at pkg/nets.py:11" in message for _, _, _, message in found)


def test_a_clamp_at_zero_in_an_imported_helper_is_seen(tmp_path, check):
    """NAN122's question (a value clamped at exactly 0 under a sqrt) is asked of the flow only
    where a clamp is written in the file or in a file it imports: here only the helper's file
    says `clamp`, and the finding in the other file stands."""
    root = _package(tmp_path / "clamps", {
        "geo.py": ("import torch\n\n\ndef sq_dist(a, b):\n"
                   "    return (a * a + b * b - 2 * a * b).clamp(min=0)\n"),
        "plain.py": "import torch\n\n\ndef sq_norm(a):\n    return (a * a).sum(-1)\n",
        "model.py": ("import torch\n\nfrom .geo import sq_dist\nfrom .plain import sq_norm\n\n\n"
                     "def dist(a, b):\n    return torch.sqrt(sq_dist(a, b))  # expect: NAN122\n\n\n"
                     "def norm(a):\n    return torch.sqrt(sq_norm(a))\n"),
    })
    (root / "pyproject.toml").write_text('[tool.nanlint]\nextend-select = ["NAN122"]\n')
    found, _ = check(root, ".")
    assert where(found) == expectations(root)


def test_whether_an_imported_file_mentions_a_word_is_read_from_its_text(tmp_path):
    import hashlib
    import re

    from nanlint.analysis.imports import may_mention

    geo = tmp_path / "geo.py"
    geo.write_text("import torch\n\n\ndef f(x):\n    return x.clip(0)\n")
    plain = tmp_path / "plain.py"
    plain.write_text("import torch\n\n\ndef g(x):\n    return x * 2\n")

    def ref(path):
        return summaries.ModuleRef(str(path), hashlib.sha256(path.read_bytes()).hexdigest(), path.name)

    class Ctx:
        def __init__(self, source, imported):
            self.source, self.imported = source, imported

    words = re.compile(r"clamp|clip")
    assert may_mention(Ctx("y = torch.sqrt(f(x))", {".geo": ref(geo)}), words)
    assert not may_mention(Ctx("y = torch.sqrt(g(x))", {".plain": ref(plain)}), words)
    assert may_mention(Ctx("y = x.clamp(min=0)", {}), words)
    # A summary handed over as data, and a file changed since the run hashed it: anything may be there.
    assert may_mention(Ctx("y = 1", {".plain": {"format": summaries.FORMAT, "names": {}}}), words)
    changed = tmp_path / "changed.py"
    changed.write_text("import torch\n")
    stale = ref(changed)
    changed.write_text("import torch\n\n\ndef g(x):\n    return x.clamp(min=0)\n")
    assert may_mention(Ctx("y = 1", {".changed": stale}), words)
