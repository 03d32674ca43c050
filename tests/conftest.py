import concurrent.futures
import os
import sys

# The calibrated rule sections were measured with torch's AVX2 kernels (AVX-512 rounds some
# float16 results differently); ask for them before any test imports torch.
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
from pathlib import Path

import pytest

import nanlint.run.jobs

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
    monkeypatch.setattr(nanlint.run.jobs, "POOL_MIN_BYTES", 0)
    return started
