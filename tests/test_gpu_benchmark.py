"""benchmarks/gpu.py on the CPU, where the suite runs: a member sweep's case is timed by the
real Trainer and stopped by its clock, and the table's scaling is the throughput over K = 1's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gpu_benchmark", ROOT / "benchmarks" / "gpu.py")
gpu = importlib.util.module_from_spec(_spec)
sys.modules["gpu_benchmark"] = gpu
_spec.loader.exec_module(gpu)


def test_a_case_is_timed_after_the_mark_and_stopped_by_the_clock():
    result = gpu.time_members("dqn", 2, "cpu", seconds=0.5, max_steps=50_000)
    assert result["stacked"] == "StackedMembers"
    # The clock, not max_steps, ended the fit: far fewer updates than 50,000 were timed.
    assert 0 < result["steps_timed"] < 10_000
    per_step = result["ms_per_step"] / 1e3
    assert result["member_updates_per_s"] == pytest.approx(2 / per_step, rel=1e-3)
    assert result["fit_seconds"] >= 0.5


def test_the_summary_scales_by_the_single_member_of_the_same_case_and_device():
    results = [
        {"case": "dqn", "device": "cuda", "members": 1, "ms_per_step": 3.0, "member_updates_per_s": 333.3},
        {"case": "dqn", "device": "cuda", "members": 8, "ms_per_step": 4.0, "member_updates_per_s": 2000.0},
        {"case": "dqn", "device": "cpu", "members": 1, "ms_per_step": 2.0, "member_updates_per_s": 500.0},
        {"case": "dqn", "device": "cpu", "members": 8, "error": "RuntimeError: out of memory"},
        {"case": "tqc", "device": "cuda", "members": 8, "ms_per_step": 10.0, "member_updates_per_s": 800.0},
    ]
    rows = gpu.summary(results).splitlines()[2:]
    assert len(rows) == 4  # the failed case has no row
    assert rows[1].startswith("| dqn (cuda) | 8 | 4.00 | 2,000 | 6.0x |")
    assert rows[2].startswith("| dqn (cpu) | 1 | 2.00 | 500 | 1.0x |")
    assert "| tqc (cuda) | 8 | 10.00 | 800 |  |" in rows[3]  # no K = 1 row to scale by
