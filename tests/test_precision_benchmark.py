"""The untuned precision benchmark's data stays consistent: splits follow the name hash,
every verdict names a pinned package and is well formed, and score.py joins them."""

from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "precision"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"precision_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run = _module("run")
score = _module("score")


def test_split_is_the_name_hash():
    # Fixed by sha256 of the lower-cased name: values checked by hand once.
    assert run.split_of("pyro-ppl") == "test"
    assert run.split_of("Pyro-PPL") == "test"
    assert run.split_of("gpytorch") == "tune"


def test_corpus_pins_each_package_once_with_its_hash_split():
    packages = run.load_corpus()  # exits on a split that disagrees with the hash
    names = [p["name"].lower() for p in packages]
    assert len(names) == len(set(names))
    for p in packages:
        assert re.fullmatch(r"[0-9a-f]{64}", p["sha256"]), p["name"]
        assert p["wheel"].endswith(".whl") and p["version"] in p["wheel"], p["name"]
    splits = Counter(p["split"] for p in packages)
    assert splits["test"] >= 15 and splits["tune"] >= 1


def test_tuning_corpora_are_not_in_the_untuned_corpus():
    tuned = {"transformers", "timm", "diffusers", "kornia", "monai", "torchmetrics",
             "ultralytics", "accelerate", "pytorch-lightning", "lightning"}
    assert not tuned & {p["name"].lower() for p in run.load_corpus()}


def test_every_verdict_is_well_formed_and_names_a_pinned_package():
    pinned = {(p["name"], p["version"]) for p in run.load_corpus()}
    verdicts = score.load_triage()  # exits on a missing field, a bad verdict or a duplicate
    assert verdicts
    for (package, version, path, line, code), row in verdicts.items():
        assert (package, version) in pinned, package
        assert path.endswith(".py") and isinstance(line, int) and line > 0
        assert re.fullmatch(r"NAN\d{3}", code)
        assert row["why"].strip().endswith(".") and "`" not in row["why"], row


def test_verdicts_by_claim_name_their_rule_s_kind():
    """A verdict judged by its rule's claim says so, with the kind that claim belongs to."""
    import sys

    sys.path.insert(0, str(BENCH.parent.parent))
    from nanlint.rules import get_rule

    rows = [json.loads(line) for name in ("triage.jsonl", "repo_triage.jsonl")
            for line in (BENCH / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    claimed = [r for r in rows if r.get("standard") == "claim"]
    assert len(claimed) >= 100
    for r in claimed:
        assert r["kind"] == get_rule(r["code"]).kind and r["judged"], r


def test_score_joins_findings_with_verdicts(tmp_path, monkeypatch, capsys):
    verdicts = score.load_triage()
    (package, version, path, line, code), row = next(iter(verdicts.items()))
    split = run.split_of(package)
    results = tmp_path / "results" / "probe"
    results.mkdir(parents=True)
    finding = {"path": path, "line": line, "column": 1, "code": code, "message": "m"}
    unjudged = {"path": path, "line": line + 100000, "column": 1, "code": code, "message": "m"}
    (results / "pkg.json").write_text(json.dumps(
        {"name": package, "version": version, "split": split, "files": 1,
         "findings": [finding, unjudged]}))
    monkeypatch.setattr(score, "RESULTS", tmp_path / "results")
    monkeypatch.setattr("sys.argv", ["score.py", "--label", "probe", "--show-untriaged"])
    score.main()
    out = capsys.readouterr().out
    real = 1 if row["verdict"] == "real" else 0
    assert f"both splits: 2 findings, {real} real, {1 - real} false alarms, 1 untriaged" in out
    assert f"{path}:{line + 100000}:1: {code}" in out


def test_careful_manifest_lines_are_well_formed():
    manifest = BENCH.parent / "realbugs" / "manifests" / "careful.jsonl"
    rows = [json.loads(raw) for raw in manifest.read_text().splitlines() if raw.strip()]
    assert len(rows) >= 40 and len({r["repo"] for r in rows}) >= 10
    keys = set()
    for r in rows:
        assert re.fullmatch(r"[0-9a-f]{40}", r["commit"]) and re.fullmatch(r"[0-9a-f]{64}", r["sha256"])
        assert r["label"] in ("bug", "safe") and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", r["category"])
        assert r["source"].startswith(f"https://github.com/{r['repo']}/blob/{r['commit']}/{r['path']}")
        key = (r["repo"], r["commit"], r["path"], r["line"])
        assert key not in keys
        keys.add(key)


@pytest.mark.parametrize("verdict", ["maybe", ""])
def test_a_bad_verdict_is_refused(tmp_path, monkeypatch, verdict):
    bad = tmp_path / "triage.jsonl"
    bad.write_text(json.dumps({"package": "p", "version": "1", "path": "a.py", "line": 1,
                               "code": "NAN101", "verdict": verdict, "why": "x."}) + "\n")
    monkeypatch.setattr(score, "TRIAGE", bad)
    with pytest.raises(SystemExit):
        score.load_triage()


repos = _module("repos")


def test_research_repositories_are_pinned_once_with_their_hash_split():
    rows = repos.load_repositories()  # exits on a split that disagrees with the realbugs hash
    names = [r["repo"].lower() for r in rows]
    assert len(names) == len(set(names)) and len(rows) >= 100
    for r in rows:
        assert re.fullmatch(r"[0-9a-f]{40}", r["commit"]), r["repo"]
        assert r["split"] in ("tune", "test") and isinstance(r["batch"], int), r["repo"]
    # Batches are numbered in the order they were chosen, none skipped.
    batches = {r["batch"] for r in rows}
    assert batches == set(range(1, max(batches) + 1))


def test_every_repository_verdict_names_a_pinned_commit_and_is_well_formed():
    pinned = {r["repo"]: r for r in repos.load_repositories()}
    rows = [json.loads(line) for line in repos.TRIAGE.read_text(encoding="utf-8").splitlines() if line.strip()]
    keys = Counter((r["repo"], r["path"], r["line"], r["code"]) for r in rows)
    assert not [k for k, n in keys.items() if n > 1]
    for r in rows:
        assert r["repo"] in pinned and r["commit"] == pinned[r["repo"]]["commit"], r
        assert r["split"] == pinned[r["repo"]]["split"], r
        assert r["verdict"] in ("real", "false-alarm") and re.fullmatch(r"NAN\d{3}", r["code"]), r
        assert r["why"].strip() and not r["path"].startswith("/"), r
    assert len(repos.load_triage()) == len(rows)
