"""The real-bugs benchmark's manifests, split, fetch and scoring (benchmarks/realbugs)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "realbugs"
sys.path.insert(0, str(BENCH))

import fetch  # noqa: E402
import manifest  # noqa: E402
import score  # noqa: E402
from split import split_of  # noqa: E402

# Code written for these tests: one hazard the seed rules flag and one guarded look-alike.
SAMPLE = """import torch
import torch.nn.functional as F


def loss(logits, target):
    probs = F.softmax(logits, dim=-1)
    bad = torch.log(F.softmax(logits,
                              dim=-1))
    good = torch.log(probs.clamp(min=1e-6))
    if target.numel() > 0:
        return bad.sum() + good.sum()
    return bad.sum()
"""


def test_committed_manifests_are_valid_and_cover_both_halves():
    entries = manifest.load()
    assert len(entries) >= 100
    assert {e.split for e in entries} == {"tune", "test"}
    assert {e.label for e in entries} == {"bug", "safe"}
    # No third-party code: the `why` sentences are prose, not the line itself.
    assert all(len(e.why.split()) >= 5 for e in entries)


def test_split_is_by_repository_name_case_insensitively():
    assert split_of("Owner/Repo") == split_of("owner/repo")
    halves = {split_of(f"owner/repo{i}") for i in range(20)}
    assert halves == {"tune", "test"}


def _entry(tmp_path, line, label, sha=None, text=SAMPLE, codes=None):
    lines = manifest.source_lines(text)
    obj = {
        "repo": "someone/sample",
        "commit": "a" * 40,
        "path": "pkg/loss.py",
        "line": line,
        "label": label,
        "category": "log-of-softmax",
        "sha256": sha or manifest.line_hash(lines[line - 1]),
        "source": "https://example.invalid/pr/1",
        "why": "a sentence written for this test about the line",
    }
    if codes:
        obj["codes"] = codes
    return obj


def _write(tmp_path, objs, text=SAMPLE):
    mf = tmp_path / "m.jsonl"
    mf.write_text("".join(json.dumps(o) + "\n" for o in objs))
    cached = manifest.cache_path(tmp_path / "cache", "someone/sample", "a" * 40, "pkg/loss.py")
    cached.parent.mkdir(parents=True)
    cached.write_text(text)
    return mf


def test_manifest_rejects_bad_entries(tmp_path):
    good = _entry(tmp_path, 7, "bug")
    for key, value in [("commit", "abc"), ("label", "maybe"), ("category", "Log Of Zero"), ("line", 0)]:
        mf = tmp_path / "bad.jsonl"
        mf.write_text(json.dumps({**good, key: value}) + "\n")
        with pytest.raises(manifest.ManifestError, match="bad.jsonl:1"):
            manifest.load([str(mf)])
    mf = tmp_path / "dup.jsonl"
    mf.write_text((json.dumps(good) + "\n") * 2)
    with pytest.raises(manifest.ManifestError, match="same location"):
        manifest.load([str(mf)])


def test_statement_span_covers_a_multiline_statement_and_only_a_header():
    import ast

    tree = ast.parse(SAMPLE)
    assert score.statement_span(tree, 8) == (7, 8)  # second line of the call
    assert score.statement_span(tree, 10) == (10, 10)  # `if` header, not its body
    assert score.statement_span(tree, 5) == (5, 5)  # `def` header


def test_score_counts_a_flagged_bug_and_a_quiet_safe_line(tmp_path, capsys):
    mf = _write(tmp_path, [_entry(tmp_path, 8, "bug"), {**_entry(tmp_path, 9, "safe")}])
    # NAN102 (the log of a softmax on line 8) is off by default: selected here.
    assert score.main([str(mf), "--cache", str(tmp_path / "cache"), "--json", "--extend-select", "NAN102"]) == 0
    out = json.loads(capsys.readouterr().out)
    by_line = {o["line"]: o for o in out["lines"]}
    assert by_line[8]["flagged"] and "NAN102" in by_line[8]["codes"]
    assert not by_line[9]["flagged"]
    half = out["summary"][split_of("someone/sample")]["all"]
    assert (half["bug"], half["recalled"], half["safe"], half["false_alarms"]) == (1, 1, 1, 0)


def test_score_honours_expected_codes_and_skips_hash_mismatches(tmp_path, capsys):
    objs = [
        _entry(tmp_path, 8, "bug", codes=["NAN201"]),  # flagged, but not by the expected code
        {**_entry(tmp_path, 9, "safe"), "line": 9, "sha256": "0" * 64},
    ]
    mf = _write(tmp_path, objs)
    assert score.main([str(mf), "--cache", str(tmp_path / "cache"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [o["flagged"] for o in out["lines"]] == [False]
    assert any("does not hash" in p for p in out["problems"])


def _bare_mirror(tmp_path, files):
    """A one-commit repository of `files` (path -> text) as a bare mirror of someone/sample in
    the fetch tool's layout: (the mirrors folder, the commit)."""
    work = tmp_path / "work"
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(work)]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "x"], check=True)
    commit = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirrors / "someone+sample" / "repo")], check=True)
    return mirrors, commit


def test_fetch_reads_a_bare_mirror_and_reports_hash_mismatches(tmp_path, capsys):
    mirrors, commit = _bare_mirror(tmp_path, {"pkg/loss.py": SAMPLE})

    good = {**_entry(tmp_path, 8, "bug"), "commit": commit}
    bad = {**_entry(tmp_path, 9, "safe"), "commit": commit, "sha256": "f" * 64}
    mf = tmp_path / "m.jsonl"
    mf.write_text(json.dumps(good) + "\n")
    cache = tmp_path / "cache"
    assert fetch.main([str(mf), "--mirrors", str(mirrors), "--cache", str(cache)]) == 0
    assert manifest.cache_path(cache, "someone/sample", commit, "pkg/loss.py").read_text() == SAMPLE

    mf.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    assert fetch.main([str(mf), "--mirrors", str(mirrors), "--cache", str(cache)]) == 1
    assert "1 hash mismatches" in capsys.readouterr().out


ATTEND = """import torch


def attend(q, k, pad):
    scores = q @ k.transpose(-2, -1)
    scores = scores.masked_fill(pad, -1e9)
    return scores.softmax(-1)
"""


def test_score_with_projects_lints_a_file_as_its_repository_does(tmp_path, capsys, monkeypatch):
    mirrors, commit = _bare_mirror(tmp_path, {
        "pkg/__init__.py": "", "pkg/attend.py": ATTEND, "train.py": "model = build()\nmodel = model.half()\n"})
    entry = {**_entry(tmp_path, 6, "bug", text=ATTEND), "commit": commit, "path": "pkg/attend.py",
             "category": "fp16-masked-fill"}
    mf = tmp_path / "m.jsonl"
    mf.write_text(json.dumps(entry) + "\n")
    cache = tmp_path / "cache"
    assert fetch.main([str(mf), "--mirrors", str(mirrors), "--cache", str(cache)]) == 0
    monkeypatch.setattr(score, "PROJECTS", tmp_path / "projects")
    capsys.readouterr()

    def flagged(*extra):  # with NAN203 (off by default), the rule this line is about
        assert score.main([str(mf), "--cache", str(cache), "--json", "--extend-select", "NAN203", *extra]) == 0
        return [o["codes"] for o in json.loads(capsys.readouterr().out)["lines"]]

    assert flagged() == [[]]  # alone, the file shows no float16
    assert flagged("--projects", str(mirrors)) == [["NAN203"]]  # its trainer makes the model half
