"""benchmarks/verify_devices.py: the CPU-against-CUDA comparison of every fixture finding.

CI has no GPU: the script's bookkeeping is checked here with "cuda" answered by the CPU
(monkeypatched), so every verdict must agree; a real run on a GPU is in
benchmarks/verify_devices.md."""

import json
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import verify_devices  # noqa: E402


def test_without_a_gpu_it_says_so_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(sys, "argv", ["verify_devices.py", "--codes", "NAN101"])
    assert verify_devices.main() == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_every_finding_gets_both_verdicts_and_a_summary(monkeypatch, capsys, tmp_path):
    devices = []
    real = verify_devices.verify_rule

    def on_the_cpu(code, device):
        devices.append(device)
        return real(code, device="cpu")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "stand-in")
    monkeypatch.setattr(verify_devices, "verify_rule", on_the_cpu)
    out_json = tmp_path / "devices.json"
    monkeypatch.setattr(sys, "argv", ["verify_devices.py", "--codes", "NAN101,NAN103", "--json", str(out_json)])
    assert verify_devices.main() == 0
    assert devices == ["cpu", "cuda", "cpu", "cuda"]
    rows = json.loads(out_json.read_text())
    assert {r["code"] for r in rows} == {"NAN101", "NAN103"}
    assert all(r["cpu"] == r["cuda"] and r["cpu_line"] for r in rows)
    out = capsys.readouterr().out
    assert f"all      {len(rows):8d} {len(rows):6d}" in out
    assert "cuda/cpu" in out


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_sigmoid_rule_agrees(monkeypatch, tmp_path):
    # Measured on an H100: all 23 NAN101 fixture findings get the same verdict on both devices.
    out_json = tmp_path / "devices.json"
    monkeypatch.setattr(sys, "argv", ["verify_devices.py", "--codes", "NAN101", "--json", str(out_json)])
    assert verify_devices.main() == 0
    rows = json.loads(out_json.read_text())
    assert rows and all(r["cpu"] == r["cuda"] for r in rows), [r for r in rows if r["cpu"] != r["cuda"]]
