"""Interleaved timing for the benchmarks that compare cases in one process: every case runs a
block of calls in turn, round after round, so that a shared machine's drift falls on every
case alike; a ratio is the median of the rounds' ratios.

    from rounds import clock_named, interleaved, median_ratio, rounds_parser  # in benchmarks/
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable


def rounds_parser(description: str, rounds: int, block: int, calls: str
                  ) -> argparse.ArgumentParser:
    """A script's argument parser with ``--rounds``, ``--block`` (how many ``calls`` a case
    runs in turn) and ``--clock`` (``cpu`` by default, see :func:`clock_named`)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--block", type=int, default=block, help=f"{calls} a case runs in turn")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    return parser


def clock_named(name: str) -> Callable[[], float]:
    """``cpu``: the process's CPU time (steadier where other work shares the cores);
    ``wall``: the wall clock."""
    return time.process_time if name == "cpu" else time.perf_counter


def interleaved(cases: dict[str, Callable[[int], None]], rounds: int, block: int,
                clock: Callable[[], float], warm_up: int = 5) -> dict[str, list[float]]:
    """Milliseconds a call of each case, one value a round. ``cases[name](n)`` makes n calls;
    each case first runs ``warm_up`` calls outside the timing."""
    for run in cases.values():
        run(warm_up)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, run in cases.items():
            start = clock()
            run(block)
            times[name].append((clock() - start) / block * 1e3)
    return times


def median_ratio(times: list[float], reference: list[float]) -> float:
    """The median over rounds of ``times / reference``."""
    return statistics.median(a / b for a, b in zip(times, reference))


def calls(function: Callable[[], object]) -> Callable[[int], None]:
    """A case of ``n`` calls of ``function``."""

    def run(n: int) -> None:
        for _ in range(n):
            function()

    return run
