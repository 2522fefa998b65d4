"""Exact return distribution of a fixed deterministic policy on the grid worlds.

Every step pays one Gaussian reward (sigma ``REWARD_STD``) whose mean is drawn from a finite
set, and the transitions are finite, so the return S of a whole episode is exactly a
Gaussian mixture: one component per distinct (sum of means, number of steps). We enumerate
it by dynamic programming over the environment's own tabular model
(:meth:`GridWorld.outcomes`), merging branches that reach the same (cell, flag, mean so far)
at the same step, which keeps the frontier to a few dozen states.

This is the ground truth for checks: the paper's table (``PAPER_PATHS``), Monte Carlo
evaluation, and learned return distributions (``gamma``, ``start``, ``first_action``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from rs_lightning.envs import GRID_WORLDS, OTHER_GRID_WORLDS
from rs_lightning.envs.grid_worlds import (
    CELLS,
    DOWN,
    LEFT,
    REWARD_STD,
    RIGHT,
    START,
    UP,
    Cell,
    GridWorld,
    RiskyGridWorld,
    RiskyRewards,
    RiskyTransitions,
    TwoStage,
)
from rs_lightning.risk import combine_utility

CellPolicy = Union[Mapping[Cell, int], Callable[[Cell], int]]
# A policy that draws its action: each cell's {action: probability}.
RandomCellPolicy = Callable[[Cell], Mapping[int, float]]

_CLASSES: dict[str, type[GridWorld]] = {
    "risky_rewards": RiskyRewards,
    "risky_transitions": RiskyTransitions,
    "risky_grid_world": RiskyGridWorld,
    "two_stage": TwoStage,
}
_IDS = {**GRID_WORLDS, **OTHER_GRID_WORLDS}
_CLASSES.update({_IDS[name]: cls for name, cls in list(_CLASSES.items())})

# Branches whose accumulated means agree to this many decimals are the same component:
# the means are sums of decimals like -0.1, which float addition makes order-dependent.
_MEAN_DECIMALS = 9

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _norm_cdf(z: np.ndarray) -> np.ndarray:
    # erfc keeps full relative precision in the lower tail, which VaR / CVaR live in.
    return np.array([0.5 * math.erfc(-v / _SQRT2) for v in np.ravel(z)]).reshape(np.shape(z))


def _norm_pdf(z: np.ndarray) -> np.ndarray:
    return _INV_SQRT_2PI * np.exp(-0.5 * np.square(z))


@dataclass(frozen=True, eq=False)
class GaussianMixture:
    """sum_i weights[i] * N(means[i], stds[i]^2); one-dimensional, all stds > 0."""

    weights: np.ndarray
    means: np.ndarray
    stds: np.ndarray

    def __post_init__(self) -> None:
        for name in ("weights", "means", "stds"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.float64))
        same_shape = self.weights.shape == self.means.shape == self.stds.shape
        if not same_shape or self.weights.ndim != 1:
            raise ValueError("weights, means and stds must be 1-d arrays of the same length")
        if np.any(self.stds <= 0) or np.any(self.weights < 0):
            raise ValueError("stds must be > 0 and weights >= 0")
        if not math.isclose(float(self.weights.sum()), 1.0, abs_tol=1e-9):
            raise ValueError(f"weights must sum to 1, got {self.weights.sum()}")

    def __len__(self) -> int:
        return len(self.weights)

    def mean(self) -> float:
        return float(self.weights @ self.means)

    def variance(self) -> float:
        second = self.weights @ (np.square(self.stds) + np.square(self.means))
        return float(second - self.mean() ** 2)

    def std(self) -> float:
        return math.sqrt(max(self.variance(), 0.0))

    def cdf(self, x: Union[float, np.ndarray]) -> Union[float, np.ndarray]:
        z = (np.asarray(x, dtype=np.float64)[..., None] - self.means) / self.stds
        result = _norm_cdf(z) @ self.weights
        return float(result) if np.ndim(result) == 0 else result

    def pdf(self, x: Union[float, np.ndarray]) -> Union[float, np.ndarray]:
        z = (np.asarray(x, dtype=np.float64)[..., None] - self.means) / self.stds
        result = (_norm_pdf(z) / self.stds) @ self.weights
        return float(result) if np.ndim(result) == 0 else result

    def value_at_risk(self, rho: float) -> float:
        """VaR_rho = inf {x : F(x) >= rho}, the lower rho-quantile, by bisection on the
        exact CDF (continuous and strictly increasing, so this is its inverse)."""
        if not 0.0 < rho < 1.0:
            raise ValueError(f"rho must be in (0, 1), got {rho}")
        lo = float(np.min(self.means - 10.0 * self.stds))
        hi = float(np.max(self.means + 10.0 * self.stds))
        while self.cdf(lo) >= rho:  # only for rho below ~1e-23
            lo -= hi - lo
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if mid in (lo, hi):
                break
            if self.cdf(mid) >= rho:
                hi = mid
            else:
                lo = mid
        return hi

    def conditional_value_at_risk(self, rho: float) -> float:
        """CVaR_rho = E[S | S <= VaR_rho], in closed form:
        sum_i w_i (mu_i Phi(a_i) - sigma_i phi(a_i)) / rho with a_i = (VaR - mu_i) / sigma_i."""
        a = (self.value_at_risk(rho) - self.means) / self.stds
        tail = self.means * _norm_cdf(a) - self.stds * _norm_pdf(a)
        return float(self.weights @ tail / rho)

    def risk(self, rho: float, risk: str = "var") -> float:
        if risk == "var":
            return self.value_at_risk(rho)
        if risk == "cvar":
            return self.conditional_value_at_risk(rho)
        raise ValueError(f"risk must be 'var' or 'cvar', got {risk!r}")

    def utility(self, alpha: float, rho: float, risk: str = "var") -> float:
        """U = alpha E[S] + (1 - alpha) R_rho[S] (paper, section 3.3)."""
        return combine_utility(alpha, self.mean(), self.risk(rho, risk))

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        k = rng.choice(len(self.weights), size=n, p=self.weights / self.weights.sum())
        return self.means[k] + self.stds[k] * rng.standard_normal(n)


@dataclass(frozen=True, eq=False)
class ExactReturn:
    """The exact law of the return and of the paper's R_s indicator."""

    mixture: GaussianMixture
    risk_outcome_probs: dict[int, float]  # R_s in {+1, -1, 0} -> probability

    # Shortcuts to the mixture, so that the result reads like a distribution.
    def mean(self) -> float:
        return self.mixture.mean()

    def value_at_risk(self, rho: float) -> float:
        return self.mixture.value_at_risk(rho)

    def conditional_value_at_risk(self, rho: float) -> float:
        return self.mixture.conditional_value_at_risk(rho)

    def utility(self, alpha: float, rho: float, risk: str = "var") -> float:
        return self.mixture.utility(alpha, rho, risk)

    @property
    def expected_risk_outcome(self) -> float:
        """E[R_s], the quantity plotted in the paper's figure of R_s over training."""
        return sum(k * p for k, p in self.risk_outcome_probs.items())


def _resolve_env(
    env: Union[str, type[GridWorld], GridWorld],
    max_steps: Optional[int],
    trap_terminal: Optional[bool],
) -> GridWorld:
    """A GridWorld instance with the requested flags (an instance keeps its own unless
    they are given)."""
    if isinstance(env, str):
        if env not in _CLASSES:
            raise ValueError(f"unknown environment {env!r}; known: {', '.join(_CLASSES)}")
        env = _CLASSES[env]
    unwrapped = getattr(env, "unwrapped", env)  # a gymnasium.make'd env
    if isinstance(unwrapped, GridWorld):
        if max_steps is None:
            max_steps = unwrapped.max_steps
        if trap_terminal is None:
            trap_terminal = getattr(unwrapped, "trap_terminal", False)
        cls = type(unwrapped)
    elif isinstance(env, type) and issubclass(env, GridWorld):
        cls = env
    else:
        raise TypeError(f"env must be a name, id, GridWorld class or instance, got {env!r}")
    kwargs: dict = {"max_steps": 10 if max_steps is None else max_steps}
    if issubclass(cls, RiskyGridWorld):
        kwargs["trap_terminal"] = bool(trap_terminal)
    elif trap_terminal:
        raise ValueError(f"{cls.__name__} has no trap; trap_terminal=True makes no sense")
    return cls(**kwargs)


def exact_return(
    env: Union[str, type[GridWorld], GridWorld],
    policy: Union[CellPolicy, RandomCellPolicy],
    *,
    max_steps: Optional[int] = None,
    trap_terminal: Optional[bool] = None,
    gamma: float = 1.0,
    start: Cell = START,
    first_action: Optional[int] = None,
) -> ExactReturn:
    """Exact distribution of the return sum_t gamma^t r_t of ``policy`` over an episode.

    Args:
        env: short name ("risky_grid_world"), gymnasium id, GridWorld class, or instance
            (possibly wrapped; its max_steps / trap_terminal are used unless given here).
        policy: deterministic stationary policy, {(x, y): action} or a callable on cells;
            a callable may instead give each cell's {action: probability} (a stationary
            random policy, e.g. :func:`uniform_random_policy`). Only cells the policy
            actually reaches are looked up.
        max_steps: episode limit (default 10); the episode ends there whatever the
            timeout convention, which only matters to learners.
        trap_terminal: risky grid world only, see :class:`RiskyGridWorld`.
        gamma: discount; 1 gives the paper's undiscounted episode score S.
        start: initial cell (with a clear flag and the full ``max_steps`` left).
        first_action: if given, the first action instead of ``policy(start)``, i.e. the law
            of Z(start, first_action) under ``policy`` afterwards.
    """
    model = _resolve_env(env, max_steps, trap_terminal)
    lookup = policy.__getitem__ if isinstance(policy, Mapping) else policy
    start = tuple(start)
    if start not in CELLS:
        raise ValueError(f"start must be a grid cell, got {start}")

    # frontier: (cell, flag, rounded mean) -> [probability, mean]; the step count is the
    # loop index, and each step adds exactly one Gaussian, so the variance is a function
    # of the episode length alone.
    frontier: dict[tuple, list[float]] = {(start, False, 0.0): [1.0, 0.0]}
    ends: dict[tuple, list[float]] = {}  # (rounded mean, steps, R_s) -> [probability, mean]

    def add(table: dict, key: tuple, prob: float, mean: float) -> None:
        entry = table.get(key)
        if entry is None:
            table[key] = [prob, mean]
        else:
            entry[0] += prob

    for t in range(model.max_steps):
        discount = gamma**t
        successors: dict[tuple, list[float]] = {}
        for (cell, flag, _), (prob, mean) in frontier.items():
            chosen = first_action if (t == 0 and first_action is not None) else lookup(cell)
            actions = chosen.items() if isinstance(chosen, Mapping) else ((chosen, 1.0),)
            for action, p_action in actions:
                for out in model.outcomes(cell, action, flag):
                    for p_comp, mu in out.reward_components:
                        p = prob * p_action * out.probability * p_comp
                        m = mean + discount * mu
                        if out.terminal:
                            r_s = model.risk_outcome(out.next_cell, True, out.new_flag)
                            add(ends, (round(m, _MEAN_DECIMALS), t + 1, r_s), p, m)
                        else:
                            key = (out.next_cell, out.new_flag, round(m, _MEAN_DECIMALS))
                            add(successors, key, p, m)
        frontier = successors
    for (cell, flag, key), (prob, mean) in frontier.items():  # the time limit
        add(ends, (key, model.max_steps, model.risk_outcome(cell, False, flag)), prob, mean)

    components: dict[tuple, list[float]] = {}
    risk_probs = {+1: 0.0, -1: 0.0, 0: 0.0}
    for (key, steps, r_s), (prob, mean) in ends.items():
        add(components, (key, steps), prob, mean)
        risk_probs[r_s] += prob
    keys = sorted(components)
    weights = np.array([components[k][0] for k in keys])
    means = np.array([components[k][1] for k in keys])
    # Var of sum_{t < n} gamma^t eps_t with eps_t ~ N(0, REWARD_STD^2).
    variance_factor = [sum(gamma ** (2 * i) for i in range(n)) for _, n in keys]
    stds = REWARD_STD * np.sqrt(np.array(variance_factor))
    return ExactReturn(GaussianMixture(weights / weights.sum(), means, stds), risk_probs)


def uniform_random_policy(n_actions: int) -> RandomCellPolicy:
    """The policy that draws every action with probability 1 / ``n_actions`` in every cell
    (the benchmark's lower reference, :mod:`rs_lightning.analysis.benchmark`)."""
    probabilities = {action: 1.0 / n_actions for action in range(n_actions)}
    return lambda cell: probabilities


def _policy(**overrides: int) -> dict[Cell, int]:
    """A full 9-cell policy from overrides written as x{x}y{y}=action."""
    policy = {}
    for cell in CELLS:
        name = f"x{cell[0]}y{cell[1]}"
        policy[cell] = overrides.pop(name)
    if overrides:
        raise ValueError(f"unknown cells {sorted(overrides)}")
    return policy


# The paper's green (risk-averse, RS-UMDQN-C) and orange (expectation-seeking, DQN) paths as
# full policies. Goal cells end the episode, so their action never matters; cells off the
# path (never reached from the start) head back towards the same path.
PAPER_PATHS: dict[str, dict[str, dict[Cell, int]]] = {
    "risky_rewards": {
        # LEFT, UP, UP to the safe goal (0, 2): S ~ N(0.1, 3 sigma^2).
        "green": _policy(
            x0y0=UP, x0y1=UP, x0y2=UP,
            x1y0=LEFT, x1y1=LEFT, x1y2=LEFT,
            x2y0=LEFT, x2y1=LEFT, x2y2=LEFT,
        ),
        # RIGHT, UP, UP to the risky goal (2, 2).
        "orange": _policy(
            x0y0=RIGHT, x0y1=RIGHT, x0y2=RIGHT,
            x1y0=RIGHT, x1y1=RIGHT, x1y2=RIGHT,
            x2y0=UP, x2y1=UP, x2y2=UP,
        ),
    },
    "risky_transitions": {
        # UP, UP (the wind can only help towards (0, 2)), then LEFT from (1, 2).
        "green": _policy(
            x0y0=UP, x0y1=UP, x0y2=UP,
            x1y0=UP, x1y1=UP, x1y2=LEFT,
            x2y0=UP, x2y1=UP, x2y2=LEFT,
        ),
        # RIGHT from the start against the wind until it lets the agent into (2, 0).
        "orange": _policy(
            x0y0=RIGHT, x0y1=DOWN, x0y2=DOWN,
            x1y0=RIGHT, x1y1=DOWN, x1y2=DOWN,
            x2y0=RIGHT, x2y1=DOWN, x2y2=DOWN,
        ),
    },
    "risky_grid_world": {
        # Around the trap on the left, where the wind cannot push the agent into it:
        # LEFT, UP, UP, then RIGHT from (0, 2) until the wind lets the agent in.
        "green": _policy(
            x0y0=UP, x0y1=UP, x0y2=RIGHT,
            x1y0=LEFT, x1y1=UP, x1y2=UP,
            x2y0=LEFT, x2y1=UP, x2y2=LEFT,
        ),
        # UP through the trap; if the wind pushes the agent to the left column, it goes up
        # that column and right into the objective rather than back into the trap.
        "orange": _policy(
            x0y0=UP, x0y1=UP, x0y2=RIGHT,
            x1y0=UP, x1y1=UP, x1y2=UP,
            x2y0=UP, x2y1=UP, x2y2=LEFT,
        ),
    },
}

__all__ = [
    "ExactReturn",
    "GaussianMixture",
    "PAPER_PATHS",
    "CellPolicy",
    "RandomCellPolicy",
    "exact_return",
    "uniform_random_policy",
]
