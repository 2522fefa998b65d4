"""Cliff walking with a configurable slip probability, and its exact tabular analysis.

:class:`SlipperyCliffWalking` is gymnasium's ``CliffWalking-v1`` (4 x 12 grid, start at the
bottom left, goal at the bottom right, the ten cells between them are the cliff; -1 per step,
``cliff_reward`` (-100) for stepping into the cliff, which sends the walker back to the start)
with one change: a move slips with probability ``slip_probability``, to one of the two
directions perpendicular to the intended one (half each). gymnasium's own ``is_slippery``
slips with probability 2/3, which makes every path along the cliff a disaster, for the
expectation too; a small slip probability gives the classic trade-off instead: the shortest
path along the cliff is best on average, a path further away is safer.

Each step's ``info["risk_outcome"]`` is -1 once the walker has fallen in this episode, +1 when
it reaches the goal without a fall, 0 otherwise (the evaluation's R_s share of episodes).

The tabular model (``env.unwrapped.P``, gymnasium's layout: ``P[s][a]`` is a list of
``(probability, next_state, reward, terminated)``) is exact, and the pure functions below use
it: :func:`optimal_expected_values` (finite-horizon value iteration on the expected return),
:func:`lane_policy` (walk to a row, along it, down to the goal) and
:func:`exact_return_distribution` (the law of the undiscounted episode return of a stationary
policy under the time limit, by forward dynamic programming over (state, return so far)).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from gymnasium.envs.toy_text.cliffwalking import (
    DOWN,
    LEFT,
    POSITION_MAPPING,
    RIGHT,
    UP,
    CliffWalkingEnv,
)

from rs_lightning.envs.finite_horizon import sample_outcome

ROWS, COLUMNS = 4, 12
START_STATE = 3 * COLUMNS  # (3, 0)
GOAL_STATE = ROWS * COLUMNS - 1  # (3, 11)

# model[s][a] = [(probability, next_state, reward, terminated), ...]
TabularModel = dict[int, dict[int, list[tuple[float, int, float, bool]]]]


def cell_of(state: int) -> tuple[int, int]:
    """(row, column) of a state index."""
    return divmod(int(state), COLUMNS)


def state_of(row: int, column: int) -> int:
    return row * COLUMNS + column


class SlipperyCliffWalking(CliffWalkingEnv):
    """gymnasium's cliff walking whose moves slip sideways with a chosen probability."""

    # (slip_probability, cliff_reward, state, move) -> (outcomes, falls): every copy of a
    # setting shares its table, which took about 20 ms a copy to build, most of an
    # evaluation's 1,000 copies' time. Read-only once made.
    _outcomes: dict[tuple[float, float, int, int], tuple[list, list[bool]]] = {}

    def __init__(
        self,
        slip_probability: float = 0.0,
        cliff_reward: float = -100.0,
        render_mode: str | None = None,
    ) -> None:
        if not 0.0 <= slip_probability <= 1.0:
            raise ValueError(f"slip_probability must be in [0, 1], got {slip_probability}")
        if not cliff_reward == int(cliff_reward):
            # Integer rewards keep the exact return law on an integer lattice.
            raise ValueError(f"cliff_reward must be a whole number, got {cliff_reward}")
        self.slip_probability = float(slip_probability)
        self.cliff_reward = float(cliff_reward)
        # falls[(state, action)][i]: whether outcome i of P[state][action] is a fall.
        self.falls: dict[tuple[int, int], list[bool]] = {}
        super().__init__(render_mode=render_mode, is_slippery=slip_probability > 0)
        self._fell = False

    def _calculate_transition_prob(self, current, move: int) -> list[tuple[float, Any, float, bool]]:
        state = state_of(int(current[0]), int(current[1]))  # cheaper than np.ravel_multi_index
        key = (self.slip_probability, self.cliff_reward, state, int(move))
        if key not in self._outcomes:
            self._outcomes[key] = self._outcomes_of(current, move)
        outcomes, falls = self._outcomes[key]
        self.falls[(state, move)] = falls
        return outcomes

    def _outcomes_of(self, current, move: int) -> tuple[list[tuple[float, Any, float, bool]],
                                                         list[bool]]:
        # The intended move with 1 - p, each perpendicular move with p / 2 (gymnasium's own
        # slippery rule is p = 2/3).
        p = self.slip_probability
        moves = [(1.0 - p, move)]
        if p > 0:
            moves += [(p / 2, (move - 1) % 4), (p / 2, (move + 1) % 4)]
        outcomes, falls = [], []
        for probability, direction in moves:
            position = np.array(current) + np.array(POSITION_MAPPING[direction])
            position = self._limit_coordinates(position).astype(int)
            falls.append(bool(self._cliff[tuple(position)]))
            if falls[-1]:
                outcomes.append((probability, int(self.start_state_index), self.cliff_reward, False))
            else:
                next_state = int(np.ravel_multi_index(tuple(position), self.shape))
                outcomes.append((probability, next_state, -1.0, next_state == GOAL_STATE))
        return outcomes, falls

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed, options=options)
        self._fell = False
        return obs, info

    def step(self, action):
        # gymnasium's step, which also notes whether the sampled outcome is a fall.
        transitions = self.P[self.s][action]
        i = sample_outcome(transitions, self.np_random)
        probability, state, reward, terminated = transitions[i]
        self._fell = self._fell or self.falls[(int(self.s), int(action))][i]
        self.s = state
        self.lastaction = action
        if self.render_mode == "human":
            self.render()
        info = {"prob": probability, "risk_outcome": self.risk_outcome(self._fell, terminated)}
        return int(state), float(reward), terminated, False, info

    @staticmethod
    def risk_outcome(fell: bool, terminated: bool) -> float:
        """R_s after a step: -1 once the walker has fallen in the episode, +1 on reaching
        the goal without a fall, 0 otherwise."""
        return -1.0 if fell else (1.0 if terminated else 0.0)


# ----------------------------------------------------------------------- exact analysis
def optimal_expected_values(
    model: TabularModel, n_states: int, n_actions: int, horizon: int, gamma: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Finite-horizon value iteration on the expected return.

    Returns ``values[k, s]``, the best expected (discounted) return from ``s`` with ``k``
    steps left, and ``policy[k, s]``, an action achieving it (``k = 0 .. horizon``).
    """
    values = np.zeros((horizon + 1, n_states))
    policy = np.zeros((horizon + 1, n_states), dtype=int)
    for k in range(1, horizon + 1):
        q = np.zeros((n_states, n_actions))
        for s in range(n_states):
            for a in range(n_actions):
                q[s, a] = sum(
                    p * (r + (0.0 if done else gamma * values[k - 1, s2]))
                    for p, s2, r, done in model[s][a]
                )
        values[k] = q.max(1)
        policy[k] = q.argmax(1)
    return values, policy


def nominal_path(model: TabularModel, actions: np.ndarray, start: int = START_STATE,
                 max_length: int = 100) -> list[int]:
    """The states a policy visits when no move slips: ``actions[s]`` (stationary) or
    ``actions[k, s]`` with ``k`` steps left (as :func:`optimal_expected_values` gives it,
    starting with ``k = len(actions) - 1``)."""
    actions = np.asarray(actions)
    path = [start]
    state = start
    for t in range(max_length):
        if actions.ndim == 2:
            if t >= len(actions) - 1:
                break
            action = int(actions[len(actions) - 1 - t, state])
        else:
            action = int(actions[state])
        _, state, _, done = max(model[state][action], key=lambda outcome: outcome[0])
        path.append(state)
        if done:
            break
    return path


def lane_policy(row: int) -> np.ndarray:
    """The stationary policy that walks along ``row`` (0: the top, 2: next to the cliff):
    up the first column to ``row``, right along it, down the last column; from any cell off
    that path it heads back to the row first."""
    actions = np.zeros(ROWS * COLUMNS, dtype=int)
    for state in range(ROWS * COLUMNS):
        r, c = cell_of(state)
        if c == COLUMNS - 1:
            actions[state] = DOWN
        elif r > row:
            actions[state] = UP
        elif r < row:
            actions[state] = DOWN
        else:
            actions[state] = RIGHT
    return actions


def exact_return_distribution(
    model: TabularModel, actions: Sequence[int], horizon: int, start: int = START_STATE
) -> tuple[np.ndarray, np.ndarray]:
    """The exact law of the undiscounted return of a stationary policy within ``horizon`` steps.

    Rewards must be whole numbers: the return lives on an integer lattice, and the law is
    propagated as probabilities over (state, return so far), one step at a time; an episode
    ends when it terminates or after ``horizon`` steps (truncation). Returns the sorted
    ``(values, probabilities)`` of the returns with positive probability.
    """
    n_states = len(model)
    worst = min(r for s in model for a in model[s] for _, _, r, _ in model[s][a])
    best = max(r for s in model for a in model[s] for _, _, r, _ in model[s][a])
    low, high = int(min(worst, 0)) * horizon, int(max(best, 0)) * horizon
    width = high - low + 1
    mass = np.zeros((n_states, width))
    mass[start, -low] = 1.0
    ended = np.zeros(width)
    for _ in range(horizon):
        moved = np.zeros_like(mass)
        for s in np.flatnonzero(mass.any(1)):
            for p, s2, r, done in model[s][int(actions[s])]:
                shifted = np.roll(mass[s], int(r)) * p  # the lattice is wide enough: no wrap
                if done:
                    ended += shifted
                else:
                    moved[s2] += shifted
        mass = moved
    ended += mass.sum(0)  # the episodes the time limit truncates
    support = np.flatnonzero(ended > 0)
    return support + low, ended[support]


def lower_quantile(values: np.ndarray, probs: np.ndarray, rho: float) -> float:
    """VaR_rho = inf {z : P(Z <= z) >= rho} of a discrete law (the risk module's definition)."""
    cumulative = np.cumsum(probs)
    return float(values[np.searchsorted(cumulative, rho - 1e-12)])


def lower_tail_mean(values: np.ndarray, probs: np.ndarray, rho: float) -> float:
    """CVaR_rho, the mean of the worst rho of the law (an atom at VaR split as needed)."""
    lower = np.concatenate([[0.0], np.cumsum(probs)[:-1]])
    tail = np.clip(np.minimum(lower + probs, rho) - lower, 0.0, None)
    return float((values * tail).sum() / rho)


__all__ = [
    "COLUMNS", "DOWN", "GOAL_STATE", "LEFT", "RIGHT", "ROWS", "START_STATE", "UP",
    "SlipperyCliffWalking", "cell_of", "exact_return_distribution", "lane_policy",
    "lower_quantile", "lower_tail_mean", "nominal_path", "optimal_expected_values", "state_of",
]
