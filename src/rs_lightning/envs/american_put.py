"""An American put option on a binomial price lattice, with an exact tabular model.

:class:`AmericanPut`: the holder of a put of strike ``strike`` on a stock that starts at
``initial_price`` decides, each of ``periods`` periods, whether to hold (action 0) or to
exercise (action 1). Exercising pays max(strike - price, 0) and ends the episode; holding
pays nothing and the price moves. At maturity (after the last period's move) the put pays
max(strike - price, 0), which is 0 when it expires out of the money, and the episode ends.

The price is a discretised geometric Brownian motion, the recombining binomial lattice of
Cox, Ross & Rubinstein (1979): each period it is multiplied by ``up`` with probability
``up_probability`` and by 1 / ``up`` otherwise, so after t periods with j up moves it is
initial_price * up^(2j - t). ``up`` = exp(sigma sqrt(dt)) matches a volatility sigma over a
period dt; ``up_probability`` is the real-world chance of a rise (the risk-neutral pricing
probability is (e^(r dt) - 1 / up) / (up - 1 / up)), and the discount gamma of the run plays
the interest rate's part. Rewards are in price units.

State: the lattice node (period t, up moves j), t = 0 .. periods, j = 0 .. t, folded into one
index t (t + 1) / 2 + j (:meth:`AmericanPut.encode`); the last row (maturity) is where
episodes that were held to the end stop (its actions end the episode again with reward 0, as
gymnasium's toy-text terminal cells do), and an exercise ends the episode at its own node.
Observation and action spaces are Discrete; the model ``env.unwrapped.P[s][a]`` is a list of
``(probability, next_state, reward, terminated)`` and ``initial_state_distrib`` the start
distribution, gymnasium's toy-text layout, which the project's exact references read.

Each step's ``info["risk_outcome"]`` is, on the episode's last step, +1 when the put paid
something and -1 when it ended with nothing (expired out of the money, or exercised out of
the money); 0 before the last step (the evaluation's R_s is then P(paid) - P(nothing)).
"""

from __future__ import annotations

import numpy as np

from rs_lightning.envs.finite_horizon import PublishedModelEnv

HOLD, EXERCISE = 0, 1


class AmericanPut(PublishedModelEnv):
    """Hold or exercise an American put on a binomial lattice (module docstring)."""

    action_names = ("hold", "exercise")  # HOLD, EXERCISE

    def __init__(
        self,
        periods: int = 8,
        initial_price: float = 10.0,
        strike: float = 11.0,
        up: float = 1.1,
        up_probability: float = 0.5,
        render_mode: str | None = None,
    ) -> None:
        if periods < 1:
            raise ValueError(f"periods must be at least 1, got {periods}")
        if up <= 1.0:
            raise ValueError(f"up must be above 1, got {up}")
        if not 0.0 < up_probability < 1.0:
            raise ValueError(f"up_probability must be in (0, 1), got {up_probability}")
        if initial_price <= 0 or strike <= 0:
            raise ValueError("initial_price and strike must be positive")
        self.periods, self.initial_price = int(periods), float(initial_price)
        self.strike, self.up, self.up_probability = float(strike), float(up), float(up_probability)
        # actions HOLD (0) and EXERCISE (1); the start is the lattice's root, state 0
        self._publish((self.periods + 1) * (self.periods + 2) // 2, 2, 0, render_mode,
                      (self.periods, self.initial_price, self.strike, self.up,
                       self.up_probability))

    @staticmethod
    def encode(t: int, ups: int) -> int:
        """The state index of the node after ``t`` periods with ``ups`` up moves."""
        return t * (t + 1) // 2 + ups

    @staticmethod
    def decode(state: int) -> tuple[int, int]:
        """(period, up moves) of a state index."""
        t = int((np.sqrt(8 * int(state) + 1) - 1) // 2)
        while AmericanPut.encode(t + 1, 0) <= state:  # guard against rounding
            t += 1
        while AmericanPut.encode(t, 0) > state:
            t -= 1
        return t, int(state) - AmericanPut.encode(t, 0)

    def price(self, t: int, ups: int) -> float:
        return self.initial_price * self.up ** (2 * ups - t)

    def payoff(self, t: int, ups: int) -> float:
        return max(self.strike - self.price(t, ups), 0.0)

    def _outcomes(self, t: int, ups: int, action: int) -> list[tuple[float, int, float, bool]]:
        state = self.encode(t, ups)
        if t == self.periods:  # where a put held to maturity has ended
            return [(1.0, state, 0.0, True)]
        if action == EXERCISE:
            return [(1.0, state, self.payoff(t, ups), True)]
        last = t + 1 == self.periods
        return [(probability, self.encode(t + 1, ups + rise),
                 self.payoff(t + 1, ups + rise) if last else 0.0, last)
                for probability, rise in ((self.up_probability, 1),
                                          (1.0 - self.up_probability, 0))]

    @staticmethod
    def risk_outcome(total):
        """+1 when the put paid something, -1 when nothing; ``total`` a number or a tensor
        of them (the device copies')."""
        return (total > 0) * 2.0 - 1.0


__all__ = ["EXERCISE", "HOLD", "AmericanPut"]
