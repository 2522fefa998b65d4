"""Statistics over the seeds of a setting: interquartile mean, bootstrap confidence intervals
and the probability of improvement (Agarwal et al., "Deep RL at the edge of the statistical
precipice", NeurIPS 2021).

Pure functions on arrays of per-seed scores. With the optional ``stats`` extra installed
(``pip install -e '.[stats]'``: the ``rliable`` package), :func:`interval_estimate` computes
the interval through rliable's stratified bootstrap; without it, through the NumPy
percentile bootstrap here. The two agree up to the Monte Carlo error of the resampling
(tests/test_results.py compares them where rliable is installed). rliable is an extra, not a
dependency: it pulls in arch, statsmodels, pandas and seaborn (about 190 MB installed), and
arch 7 fails to import under pandas 3, hence the extra's ``pandas<3``.

Each row of a results table is one environment (one "task" in rliable's terms), so the
stratified bootstrap, which resamples runs within each task, is the plain bootstrap over
the seeds of the row.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

CONFIDENCE = 0.95
# Fewer seeds than this give no interval: a bootstrap of 3 seeds only resamples those 3
# values, so its "95%" interval is their range and holds no such coverage. Below it the
# tables and figures give the seeds' range, and say so.
MIN_SEEDS_FOR_INTERVAL = 5
RANGE_METHOD = "the seeds' range (min, max): fewer than 5 seeds give no interval"


def band_label(seeds: int) -> str:
    """What a figure's band over ``seeds`` seeds is (see :func:`bootstrap_band`)."""
    if seeds == 1:
        return "one seed: no band"
    if seeds < MIN_SEEDS_FOR_INTERVAL:
        return f"band: the range of {seeds} seeds"
    return f"band: {CONFIDENCE:.0%} bootstrap interval of the mean over {seeds} seeds"
# Resamples per interval. A row has a handful of seeds, so few distinct resamples exist (126
# for 5 seeds); 2,000 draws put the interval's ends within about 0.01 of their limit for
# returns of order 1, and the rliable path (one Python call per resample) stays fast.
BOOTSTRAP_REPS = 2000
# The share of runs cut from each end for the interquartile mean (rliable's aggregate_iqm).
IQM_TRIM = 0.25


def interquartile_mean(scores, axis: int = -1) -> np.ndarray:
    """The mean of the middle half of ``scores`` along ``axis``.

    As ``scipy.stats.trim_mean(scores, 0.25)`` (rliable's IQM): ``floor(n / 4)`` values are
    cut from each end, so with fewer than 4 seeds it is the plain mean.
    """
    ordered = np.sort(np.asarray(scores, dtype=float), axis=axis)
    n = ordered.shape[axis]
    cut = int(IQM_TRIM * n)
    return np.take(ordered, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def bootstrap_interval(
    scores,
    statistic: Callable[..., np.ndarray] = interquartile_mean,
    reps: int = BOOTSTRAP_REPS,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over the seeds' ``scores`` (1-D).

    ``statistic(samples, axis=-1)`` is applied to all ``reps`` resamples at once. A single
    seed gives the interval (score, score): there is nothing to resample.
    """
    scores = np.asarray(scores, dtype=float)
    rng = np.random.default_rng(seed)
    samples = scores[rng.integers(0, scores.size, size=(reps, scores.size))]
    values = statistic(samples, axis=-1)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def bootstrap_band(
    curves,
    reps: int = BOOTSTRAP_REPS,
    confidence: float = CONFIDENCE,
    seed: int = 0,
    limits: tuple[float, float] = (-np.inf, np.inf),
) -> tuple[np.ndarray, np.ndarray]:
    """Per-step percentile bootstrap interval of the mean over seeds of ``curves``
    ([seeds, steps]), clipped to ``limits`` (the metric's range, e.g. [-1, 1] for R_s); with
    fewer than MIN_SEEDS_FOR_INTERVAL seeds, their range (:func:`band_label` says which)."""
    curves = np.asarray(curves, dtype=float)
    if curves.shape[0] < MIN_SEEDS_FOR_INTERVAL:
        return np.clip(curves.min(0), *limits), np.clip(curves.max(0), *limits)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, curves.shape[0], size=(reps, curves.shape[0]))
    means = curves[picks].mean(axis=1)  # [reps, steps]
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(means, [tail, 100 - tail], axis=0)
    return np.clip(low, *limits), np.clip(high, *limits)


def probability_of_improvement(x, y) -> float:
    """P(X > Y) for a seed X of one setting and a seed Y of another, ties counting half
    (the Mann-Whitney U statistic over the number of pairs; rliable's
    ``probability_of_improvement`` on one task)."""
    x = np.asarray(x, dtype=float)[:, None]
    y = np.asarray(y, dtype=float)[None, :]
    return float(np.mean((x > y) + 0.5 * (x == y)))


def rliable_installed() -> bool:
    return importlib.util.find_spec("rliable") is not None


@dataclass(frozen=True)
class Estimate:
    iqm: float
    low: float  # ends of the bootstrap confidence interval of the IQM
    high: float
    method: str  # which bootstrap computed the interval


NUMPY_METHOD = "percentile bootstrap (NumPy)"
RLIABLE_METHOD = "stratified bootstrap (rliable)"
STRATIFIED_METHOD = "stratified percentile bootstrap (NumPy)"


def interval_estimates(
    scores: Mapping[str, Sequence[float]],
    reps: int = BOOTSTRAP_REPS,
    confidence: float = CONFIDENCE,
    seed: int = 0,
    use_rliable: Optional[bool] = None,
) -> dict[str, Estimate]:
    """{metric: the IQM of its seeds' scores and the IQM's bootstrap confidence interval}.

    ``use_rliable``: None uses rliable where it is installed, else NumPy. Metrics with as
    many seeds go through rliable in one call (its resampling loop is in Python).
    """
    if use_rliable is None:
        use_rliable = rliable_installed()
    by_seeds: dict[int, list[str]] = {}
    for metric, values in scores.items():
        by_seeds.setdefault(len(values), []).append(metric)
    estimates = {}
    for metrics in by_seeds.values():
        matrix = np.array([scores[metric] for metric in metrics], dtype=float).T  # [seeds, metrics]
        if matrix.shape[0] < MIN_SEEDS_FOR_INTERVAL:
            for metric, column in zip(metrics, matrix.T):
                estimates[metric] = Estimate(float(interquartile_mean(column)),
                                             float(column.min()), float(column.max()),
                                             RANGE_METHOD)
            continue
        if use_rliable:
            intervals = _rliable_intervals(matrix, reps, confidence, seed)
        else:
            intervals = [bootstrap_interval(column, reps=reps, confidence=confidence, seed=seed)
                         for column in matrix.T]
        method = RLIABLE_METHOD if use_rliable else NUMPY_METHOD
        for metric, column, (low, high) in zip(metrics, matrix.T, intervals):
            estimates[metric] = Estimate(float(interquartile_mean(column)), low, high, method)
    return estimates


def stratified_estimate(
    tasks: Sequence[Sequence[float]],
    reps: int = BOOTSTRAP_REPS,
    confidence: float = CONFIDENCE,
    seed: int = 0,
    use_rliable: Optional[bool] = None,
) -> Estimate:
    """The IQM of the runs of several tasks pooled (``tasks[i]``: the scores of task i's
    seeds), and its stratified bootstrap interval: each resample draws every task's seeds
    from that task's own (Agarwal et al.'s aggregate over tasks).

    With fewer than MIN_SEEDS_FOR_INTERVAL seeds in some task it gives no interval but the
    range of the runs' scores (every seed of every task): the lowest and the highest run,
    which always hold the IQM (an aggregate of each seed's scores over the tasks need not:
    the pooled IQM trims runs that a seed's mean keeps). ``use_rliable``: as in
    :func:`interval_estimates`; rliable needs as many seeds in every task.
    """
    tasks = [np.asarray(task, dtype=float) for task in tasks]
    runs = np.concatenate(tasks)
    pooled = float(interquartile_mean(runs))
    if min(task.size for task in tasks) < MIN_SEEDS_FOR_INTERVAL:
        return Estimate(pooled, float(runs.min()), float(runs.max()), RANGE_METHOD)
    if use_rliable is None:
        use_rliable = rliable_installed()
    if use_rliable and len({task.size for task in tasks}) == 1:
        # rliable's aggregate over the tasks: the IQM of all runs pooled
        (low, high), = _rliable_intervals(
            np.stack(tasks, axis=1), reps, confidence, seed,
            aggregate=lambda runs: np.array([interquartile_mean(runs.ravel())]))
        return Estimate(pooled, low, high, RLIABLE_METHOD)
    rng = np.random.default_rng(seed)
    samples = np.concatenate(
        [task[rng.integers(0, task.size, size=(reps, task.size))] for task in tasks], axis=1)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(interquartile_mean(samples, axis=-1), [tail, 100 - tail])
    return Estimate(pooled, float(low), float(high), STRATIFIED_METHOD)


def interval_estimate(scores: Sequence[float], **options) -> Estimate:
    """:func:`interval_estimates` of one metric."""
    return interval_estimates({"scores": scores}, **options)["scores"]


def _rliable_intervals(matrix: np.ndarray, reps: int, confidence: float, seed: int,
                       aggregate: Optional[Callable[[np.ndarray], np.ndarray]] = None
                       ) -> list[tuple[float, float]]:
    """rliable's stratified bootstrap intervals of ``aggregate`` of ``matrix`` ([seeds,
    tasks]), each task's seeds resampled within it; by default the IQM of each column (each
    metric a task), one interval per column."""
    from rliable import library

    # rliable draws its resamples from NumPy's global generator (its random_state only
    # reaches arch, which warns that it is deprecated): seed that generator for a
    # reproducible interval, and give the caller's state back.
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        _, intervals = library.get_interval_estimates(
            {"scores": matrix},
            # The IQM of each task: rliable's aggregate_iqm (scipy's trim_mean) on one column,
            # without scipy's per-call overhead, which would dominate the 2,000 calls.
            aggregate or (lambda runs: interquartile_mean(runs, axis=0)),
            reps=reps,
            confidence_interval_size=confidence,
        )
    finally:
        np.random.set_state(state)
    low, high = intervals["scores"]
    return [(float(a), float(b)) for a, b in zip(np.ravel(low), np.ravel(high))]
