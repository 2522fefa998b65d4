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


def test_the_plain_loop_runs_the_updates_asked_for_after_the_same_warm_up():
    from torch.optim.optimizer import register_optimizer_step_post_hook

    steps = []
    handle = register_optimizer_step_post_hook(lambda *args: steps.append(1))
    try:
        advance = speed.hand_written_dqn(1, lean=False)
        advance(5)
        assert len(steps) == 5  # after 32 warm-up steps of the environment, 5 updates
        advance(3)
        assert len(steps) == 8  # no second warm-up
    finally:
        handle.remove()


def test_the_paired_case_times_equal_blocks_of_both_loops_apart(monkeypatch):
    import time

    monkeypatch.setattr(speed, "PAIRED_BLOCK", 20)
    monkeypatch.setattr(speed, "SHORT", 40)
    asked = []

    def plain_loop(threads, lean):
        def advance(updates):  # a stand-in for the plain loop: 0.2 s of work a call
            asked.append(updates)
            end = time.process_time() + 0.2
            while time.process_time() < end:
                pass

        return advance

    monkeypatch.setattr(speed, "hand_written_dqn", plain_loop)
    blocks = speed.time_paired_dqn(40 + 3 * 20, 1)["paired"]
    # Its warm-up to update SHORT, then a block of PAIRED_BLOCK after each as many
    # Lightning updates from update SHORT on.
    assert asked == [40, 20, 20, 20]
    assert len(blocks["lightning"]) == len(blocks["plain"]) == 3
    # The plain blocks' time is not counted in the Lightning blocks (20 updates of a small
    # DQN take well under the stand-in's 0.2 s).
    assert min(blocks["plain"]) >= 0.2 > max(blocks["lightning"]) > 0


def test_rounds_run_every_case_in_turn_and_take_the_median_of_the_ratios():
    ticks = iter(range(1_000))
    order = []
    cases = {"a": lambda n: order.append(("a", n)), "b": lambda n: order.append(("b", n))}
    times = rounds.interleaved(cases, rounds=3, block=4, clock=lambda: next(ticks), warm_up=2)
    assert order == [("a", 2), ("b", 2)] + [("a", 4), ("b", 4)] * 3
    # One clock reading before and after each block: 1 tick a block of 4 calls.
    assert times == {"a": [250.0] * 3, "b": [250.0] * 3}
    assert rounds.median_ratio([2.0, 9.0, 3.0], [1.0, 3.0, 1.0]) == pytest.approx(3.0)
