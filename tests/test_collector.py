"""A run collects garbage less often (collector.py) and gives the caller's settings back."""

from __future__ import annotations

import gc

from nanlint.run import collector
from nanlint.run.config import Settings
from nanlint.run.runner import run


def test_a_run_tunes_the_collector_and_restores_it(tmp_path, monkeypatch):
    (tmp_path / "m.py").write_text("import torch\n\n\ndef f(x):\n    return 1 / (1 + torch.exp(-x))\n")
    seen = []
    real = collector.tune

    def tune():
        real()
        seen.append((gc.get_threshold()[0], gc.get_freeze_count() > 0))

    monkeypatch.setattr(collector, "tune", tune)
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    monkeypatch.chdir(tmp_path)
    result = run(["."], Settings(root=tmp_path), jobs=1)
    assert [d.code for d in result.diagnostics] == ["NAN101"]
    assert seen == [(collector.YOUNG_THRESHOLD, True)]
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == frozen


def test_objects_made_during_a_tuned_stretch_are_still_collected():
    class Node:
        pass

    with collector.tuned():
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle: only the collector frees it
        alive = gc.get_objects()
        assert any(o is a for o in alive)
        del a, b, alive
        gc.collect()
        assert not any(type(o) is Node for o in gc.get_objects())


def test_a_linted_file_leaves_no_cycle_behind(monkeypatch):
    """The analysis and the context hold one another; the lint cuts that as it returns, so the
    file's tree and analysis are freed at once, not at the next full collection."""
    import weakref

    from nanlint import analysis
    from nanlint.lint import engine
    from nanlint.run.config import select_rules

    made = []
    real = analysis.file_analysis

    def recording(ctx):
        fa = real(ctx)
        made.append(weakref.ref(fa))
        return fa

    monkeypatch.setattr(analysis, "file_analysis", recording)
    source = (
        "import torch\n\n\nclass Net(torch.nn.Module):\n    def __init__(self, eps=1e-6):\n"
        "        super().__init__()\n        self.eps = eps\n\n    def forward(self, x):\n"
        "        return torch.sqrt(x.clamp(min=0)) / (x.norm() + self.eps)\n"
    )
    gc.collect()
    gc.disable()
    try:
        result = engine.lint_source("m.py", source, select_rules(Settings(select=["ALL"])))
        assert made and all(ref() is None for ref in made)
    finally:
        gc.enable()
    assert [d.code for d in result.diagnostics]  # the findings outlive the analysis
