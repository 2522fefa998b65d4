"""benchmarks/speed.py's yardsticks and benchmarks/rounds.py's interleaved timing: the plain DQN
loop runs the updates it is asked for, the paired case times equal blocks of both loops, and
the rounds give every case one value a round."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


speed = _load("speed_benchmark", "speed.py")
rounds = _load("rounds_benchmark", "rounds.py")


def test_the_plain_loop_runs_the_updates_asked_for_after_the_same_warm_up(monkeypatch):
    import torch

    advance = speed.hand_written_dqn(1, lean=False)
    # The closure's optimizer: count its steps (one per update).
    optimizer = next(cell.cell_contents for cell in advance.__closure__
                     if isinstance(cell.cell_contents, torch.optim.Optimizer))
    steps = []
    optimizer.register_step_post_hook(lambda *args: steps.append(1))
    advance(5)
    assert len(steps) == 5  # after 32 warm-up steps of the environment, 5 updates
    advance(3)
    assert len(steps) == 8  # no second warm-up


def test_the_paired_case_times_equal_blocks_of_both_loops(monkeypatch):
    monkeypatch.setattr(speed, "PAIRED_BLOCK", 20)
    monkeypatch.setattr(speed, "SHORT", 40)
    result = speed.time_paired_dqn(40 + 3 * 20, 1)
    blocks = result["paired"]
    # Timed from update SHORT on: a block after each PAIRED_BLOCK Lightning updates.
    assert len(blocks["lightning"]) == len(blocks["plain"]) == 3
    assert all(seconds > 0 for seconds in blocks["lightning"] + blocks["plain"])


def test_rounds_run_every_case_in_turn_and_take_the_median_of_the_ratios():
    ticks = iter(range(1_000))
    order = []
    cases = {"a": lambda n: order.append(("a", n)), "b": lambda n: order.append(("b", n))}
    times = rounds.interleaved(cases, rounds=3, block=4, clock=lambda: next(ticks), warm_up=2)
    assert order == [("a", 2), ("b", 2)] + [("a", 4), ("b", 4)] * 3
    # One clock reading before and after each block: 1 tick a block of 4 calls.
    assert times == {"a": [250.0] * 3, "b": [250.0] * 3}
    assert rounds.median_ratio([2.0, 9.0, 3.0], [1.0, 3.0, 1.0]) == pytest.approx(3.0)
