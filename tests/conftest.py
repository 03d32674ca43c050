import concurrent.futures
import os
import sys

# The calibrated rule sections were measured with torch's AVX2 kernels (AVX-512 rounds some
# float16 results differently); ask for them before any test imports torch.
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
from pathlib import Path

import pytest

import nanlint.jobs

# Let tests import their shared helpers (fixture_support) by module name.
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def pools(monkeypatch):
    """Count the process pools started (in this process; the workers are spawned fresh)
    and let even a small run use one."""
    started = []
    real = concurrent.futures.ProcessPoolExecutor

    class Counting(real):
        def __init__(self, *args, **kwargs):
            started.append(kwargs.get("max_workers"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Counting)
    monkeypatch.setattr(nanlint.jobs, "POOL_MIN_BYTES", 0)
    return started


@pytest.fixture
def sample_rule_on(monkeypatch):
    """Turn NAN101 on by default, in this process, as a project's `extend-select` would.

    The tests of the command line, the cache, notebooks and ruff's habits use its hazard, a
    sigmoid written by hand (one expression, an exact fix), as their sample finding. The rule
    is off by default since its precision was measured on code it was not tuned on (its page);
    these tests exercise the machinery around the default selection, not the default set,
    which `test_pages.py` and `nanlint rules` check as it ships. Subprocesses (the language
    server included) do not see this: they pass `--extend-select NAN101` or read it from a
    config."""
    from nanlint.rules.hand_sigmoid import HandWrittenSigmoid

    monkeypatch.setattr(HandWrittenSigmoid, "default_enabled", True)
