"""Trading a mean-reverting price over a few periods, with an exact tabular model.

:class:`Trading` (inspired by the trading world of Moghimi & Ku, ICML 2025; numbers of our
own): a trader holds a position in ``positions`` (default -1, 0, 1: short, flat, long one
unit) and, each of ``periods`` periods, chooses the position to hold through the period.
Changing the position costs ``cost`` per unit traded; the position then earns the price
change. The reward of a period is

    new_position * (price_after - price_before) - cost * |new_position - old_position|.

The episode ends after the last period (no time limit is needed; the position is marked to
market, not closed). It starts at ``initial_position`` with the price at its mean.

The price is an Ornstein-Uhlenbeck process dX = theta (mu - X) dt + sigma dW sampled once a
period, on a lattice of ``price_levels`` (odd) prices ``mu + tick * (i - (price_levels - 1) / 2)``.
Over one period the process moves exactly from x to a Gaussian of mean
mu + (x - mu) e^-theta and variance sigma^2 (1 - e^-2theta) / (2 theta); the lattice's
transition probability from level i to level j is that Gaussian's mass on level j's cell, the
prices closer to level j than to its neighbours (the end cells reach to -inf and +inf):
Tauchen's (1986) discretisation, so each row sums to one and the lattice chain reverts to the
mean as the process does. Rewards are in price units.

State: (period t, price level, position), folded into one index (:meth:`Trading.encode`);
the periods t = 0 .. periods, the last row being where episodes end (its actions end the
episode again with reward 0, as gymnasium's toy-text terminal cells do). Observation and
action spaces are Discrete (the action k is the position ``positions[k]``); the model
``env.unwrapped.P[s][a]`` is a list of ``(probability, next_state, reward, terminated)`` and
``initial_state_distrib`` the start distribution, gymnasium's toy-text layout, which the
project's exact references read.

Each step's ``info["risk_outcome"]`` is, on the episode's last step, +1 when the episode's
(undiscounted) profit is positive, -1 when it is a loss, 0 when it is even; 0 before the
last step (the evaluation's R_s is then P(profit) - P(loss)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rs_lightning.envs.finite_horizon import PublishedModelEnv


# A total within this of zero is even: sums of lattice prices carry float round-off.
_EVEN = 5e-10


def lattice_offsets(levels: int, tick: float) -> np.ndarray:
    """x - mu of each of the lattice's ``levels`` prices, ``tick`` apart around the mean."""
    return tick * (np.arange(levels) - (levels - 1) / 2)


def ou_lattice_transitions(levels: int, tick: float, reversion: float, volatility: float
                           ) -> np.ndarray:
    """The lattice's one-period transition matrix ``[levels, levels]`` of the
    Ornstein-Uhlenbeck process (module docstring): row i is the law of the next level from
    level i, each entry the Gaussian mass of the next level's cell."""
    if levels < 1 or levels % 2 == 0:
        raise ValueError(f"price_levels must be odd and positive, got {levels}")
    if reversion <= 0 or volatility <= 0 or tick <= 0:
        raise ValueError("reversion, volatility and tick must be positive")
    offsets = lattice_offsets(levels, tick)
    decay = math.exp(-reversion)
    std = volatility * math.sqrt((1.0 - decay ** 2) / (2.0 * reversion))
    edges = np.concatenate([[-np.inf], (offsets[:-1] + offsets[1:]) / 2, [np.inf]])

    def normal_cdf(z: np.ndarray) -> np.ndarray:
        return 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))

    matrix = np.empty((levels, levels))
    for i, x in enumerate(offsets):
        cdf = normal_cdf((edges - decay * x) / std)
        matrix[i] = np.diff(cdf)
    return matrix / matrix.sum(1, keepdims=True)


def position_name(units: int) -> str:
    """``flat``, ``long``, ``short``, ``long 2``...: a position of ``units`` units."""
    if units == 0:
        return "flat"
    side = "long" if units > 0 else "short"
    return side if abs(units) == 1 else f"{side} {abs(units)}"


class Trading(PublishedModelEnv):
    """A position in a mean-reverting price over ``periods`` periods (module docstring)."""

    def __init__(
        self,
        periods: int = 5,
        price_levels: int = 5,
        tick: float = 1.0,
        reversion: float = 0.5,
        volatility: float = 1.0,
        positions: Sequence[int] = (-1, 0, 1),
        initial_position: int = 1,
        cost: float = 0.5,
        render_mode: str | None = None,
    ) -> None:
        if periods < 1:
            raise ValueError(f"periods must be at least 1, got {periods}")
        positions = tuple(int(x) for x in positions)
        if initial_position not in positions:
            raise ValueError(f"initial_position {initial_position} is not one of {positions}")
        if cost < 0:
            raise ValueError(f"cost must be >= 0, got {cost}")
        self.periods, self.price_levels, self.tick = int(periods), int(price_levels), float(tick)
        self.positions, self.cost = positions, float(cost)
        self.price_transitions = ou_lattice_transitions(self.price_levels, self.tick,
                                                        float(reversion), float(volatility))
        self.offsets = lattice_offsets(self.price_levels, self.tick)
        start = self.encode(0, (self.price_levels - 1) // 2, positions.index(initial_position))
        self._publish((self.periods + 1) * self.price_levels * len(positions), len(positions),
                      start, render_mode, (self.periods, self.price_levels, self.tick,
                                           float(reversion), float(volatility), positions,
                                           self.cost))

    @property
    def action_names(self) -> tuple[str, ...]:
        """Each action by the position it holds: ``short``, ``flat``, ``long`` (``long 2``
        for two units)."""
        return tuple(position_name(p) for p in self.positions)

    def encode(self, t: int, level: int, position_index: int) -> int:
        """The state index of period ``t``, price level and position (its index)."""
        return (t * self.price_levels + level) * len(self.positions) + position_index

    def decode(self, state: int) -> tuple[int, int, int]:
        """(period, price level, position index) of a state index."""
        rest, position_index = divmod(int(state), len(self.positions))
        t, level = divmod(rest, self.price_levels)
        return t, level, position_index

    def _outcomes(self, t: int, level: int, held: int, action: int
                  ) -> list[tuple[float, int, float, bool]]:
        state = self.encode(t, level, held)
        if t == self.periods:  # where the episode has ended
            return [(1.0, state, 0.0, True)]
        new, old = self.positions[action], self.positions[held]
        fee = self.cost * abs(new - old)
        last = t + 1 == self.periods
        return [(float(p), self.encode(t + 1, j, action),
                 float(new * (self.offsets[j] - self.offsets[level]) - fee), last)
                for j, p in enumerate(self.price_transitions[level]) if p > 0]

    @staticmethod
    def risk_outcome(total):
        """+1 for a profit, -1 for a loss, 0 for even (within the round-off of summed
        prices, 5e-10); ``total`` a number or a tensor of them (the device copies')."""
        return (total > _EVEN) * 1.0 - (total < -_EVEN) * 1.0


__all__ = ["Trading", "lattice_offsets", "ou_lattice_transitions", "position_name"]
