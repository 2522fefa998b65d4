"""Utility-greedy policy iteration: the per-decision criterion's exact policy, once for
every world whose laws are known.

The paper's method acts by pi(s) = argmax_a U[Z^pi(s, a)] (``EquationRiskSensitivePolicy``),
with Z^pi(s, a) the return of taking a in s and following pi after. A world's reference
module computes U[Z^pi(s, a)] for a policy (the Gaussian-mixture laws of the paper's grid
worlds, the atom-grid laws of a tabular model); :func:`iterate` turns that into the fixed
point. Unlike expected-value policy iteration nothing guarantees convergence, because U is
not additive over steps, so a cycle of policies is reported instead of looping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

# A deterministic stationary policy: the action of every state, in the world's state order.
PolicyKey = tuple[int, ...]
# The path of a policy iteration that cycles between policies of different paths.
CYCLE = "cycle"
# Policy iteration gives up after this many improvement steps (the worlds here settle in 1-6).
MAX_ITERATIONS = 100


def greedy(values: np.ndarray, current: Sequence[int], tie: float) -> PolicyKey:
    """argmax_a ``values[s, a]`` in every state; an action within ``tie`` of the best that
    is the current one is kept (so that iteration cannot cycle between equally good
    policies), else the lowest of the best."""
    current = np.asarray(current, dtype=np.int64)
    ties = values >= values.max(1, keepdims=True) - tie
    keep = ties[np.arange(len(current)), current]
    return tuple(int(a) for a in np.where(keep, current, ties.argmax(1)))


@dataclass(frozen=True)
class Iteration:
    """Where policy iteration stopped: the fixed point, or the first policy of the cycle
    it entered (``cycle`` lists the repeating policies in order; empty at a fixed point)."""

    policy: PolicyKey
    steps: int
    cycle: tuple[PolicyKey, ...]

    @property
    def converged(self) -> bool:
        return not self.cycle

    @property
    def policies(self) -> tuple[PolicyKey, ...]:
        """The policies it settled on: the fixed point alone, or the cycle's."""
        return self.cycle or (self.policy,)


def iterate(
    action_values: Callable[[PolicyKey], np.ndarray],
    initial: Sequence[int],
    *,
    tie: float,
    max_iterations: int = MAX_ITERATIONS,
) -> Iteration:
    """Policy iteration from ``initial``: ``action_values(pi)`` is U[Z^pi(s, a)] as a
    ``[states, actions]`` array; each step moves to the greedy policy on it."""
    seen: dict[PolicyKey, int] = {}
    history: list[PolicyKey] = []
    key = tuple(int(a) for a in initial)
    for step in range(max_iterations + 1):
        seen[key] = step
        history.append(key)
        new = greedy(action_values(key), key, tie)
        if new == key:
            return Iteration(key, step, ())
        if new in seen:
            return Iteration(new, step + 1, tuple(history[seen[new]:]))
        key = new
    raise RuntimeError(f"policy iteration neither converged nor cycled in {max_iterations} steps")


def settled_path(iteration: Iteration, path_of: Callable[[PolicyKey], str]) -> str:
    """The path from the start where iteration settled: the fixed point's, or the one the
    policies of a cycle share, else :data:`CYCLE`."""
    paths = {path_of(key) for key in iteration.policies}
    return paths.pop() if len(paths) == 1 else CYCLE


@dataclass(frozen=True)
class SwitchPoint:
    """The chosen path changes from ``path_below`` to ``path_above`` between ``alpha_below``
    and ``alpha_above`` (at most the bisection tolerance apart)."""

    alpha_below: float
    alpha_above: float
    path_below: str
    path_above: str

    @property
    def alpha(self) -> float:
        return 0.5 * (self.alpha_below + self.alpha_above)


def path_switch_points(
    path_at: Callable[[float], str],
    alphas: Iterable[float],
    tolerance: float = 1e-4,
) -> list[SwitchPoint]:
    """Every alpha at which ``path_at(alpha)`` changes along the sorted grid ``alphas``,
    located by bisection to ``tolerance``. Changes closer together than the grid step may
    be missed (two in one step cancel out)."""
    alphas = list(alphas)
    paths = [path_at(a) for a in alphas]
    points = []
    for (lo, path_lo), (hi, path_hi) in zip(zip(alphas, paths), zip(alphas[1:], paths[1:])):
        if path_lo == path_hi:
            continue
        while hi - lo > tolerance:
            mid = 0.5 * (lo + hi)
            if path_at(mid) == path_lo:
                lo = mid
            else:
                hi = mid
        points.append(SwitchPoint(lo, hi, path_lo, path_hi))
    return points


__all__ = ["CYCLE", "MAX_ITERATIONS", "Iteration", "PolicyKey", "SwitchPoint", "greedy",
           "iterate", "path_switch_points", "settled_path"]
