"""A risky navigation world with a known answer, for the continuous-action agents.

A point mass starts at (0, 0) and must reach the goal, the square |x - 2| <= 0.15,
|y| <= 0.15. Each step it moves by 0.1 times its action, a = (a_x, a_y) in [-1, 1]^2 (the
speed limit is per coordinate: a diagonal step is as fast as a straight one). Between start
and goal lies the risky region, the rectangle 0.35 <= x <= 1.65, |y| < 0.65: the first time
the mass stands in it, with probability ``strike_probability`` a penalty of ``penalty``
strikes (once per episode). The way around the region is longer.

Rewards per step: ``-step_cost`` (0.1), the penalty when it strikes, and a shaping term
``shaping`` x (d(s) - d(s')), d the Euclidean distance to the goal square (0 on it), which
tells the mass where the goal is and adds ``shaping`` x 1.85 to every episode that reaches
the goal from the start, whatever the route. The episode ends (terminated) on the goal.

The two routes' return laws are known exactly (:func:`route_laws`): the time-optimal paths
of full-speed steps take 19 steps straight through the region and 25 around it, so with the
defaults the undiscounted return S is

- straight through: 1.85 - 19 x 0.1 = -0.05, less 2 with probability 0.2: E = -0.45, and
  CVaR_0.1 = VaR_0.1 = -2.05;
- around: 1.85 - 25 x 0.1 = -0.65, surely: E = CVaR = -0.65.

The risk-neutral optimum crosses (-0.45 > -0.65); a CVaR_0.1 agent at alpha 0 goes around
(-0.65 > -2.05). The region is low (the way around climbs 7 steps), so that an agent that
learns to stay out of it finds the way around by exploring.

The observation is (x, y, struck-or-entered flag): the flag makes the state Markov (after the
first entry the region is harmless). ``info["risk_outcome"]`` is -1 once the penalty struck,
+1 when the episode ends on the goal without it, 0 otherwise.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

GOAL = (2.0, 0.0)
GOAL_HALF_WIDTH = 0.15
REGION_X = (0.35, 1.65)
REGION_HALF_HEIGHT = 0.65
SPEED = 0.1
ARENA = ((-0.5, 2.5), (-2.5, 2.5))  # x and y bounds the mass cannot leave


def in_region(x: float, y: float) -> bool:
    return REGION_X[0] <= x <= REGION_X[1] and abs(y) < REGION_HALF_HEIGHT


def goal_distance(x: float, y: float) -> float:
    """Euclidean distance from (x, y) to the goal square (0 on it)."""
    dx = max(abs(x - GOAL[0]) - GOAL_HALF_WIDTH, 0.0)
    dy = max(abs(y - GOAL[1]) - GOAL_HALF_WIDTH, 0.0)
    return math.hypot(dx, dy)


def on_goal(x: float, y: float) -> bool:
    # A hair of slack: 19 full steps from 0 reach 1.9 up to float rounding.
    return goal_distance(x, y) <= 1e-9


class RiskyNavigation(gym.Env):
    """The point mass of the module docstring (``gymnasium.make("rs_lightning/
    RiskyNavigation-v0")``, continuous actions in [-1, 1]^2)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, strike_probability: float = 0.2, penalty: float = 2.0,
                 step_cost: float = 0.1, shaping: float = 1.0) -> None:
        if not 0.0 <= strike_probability <= 1.0:
            raise ValueError(f"strike_probability must be in [0, 1], got {strike_probability}")
        self.strike_probability = float(strike_probability)
        self.penalty = float(penalty)
        self.step_cost = float(step_cost)
        self.shaping = float(shaping)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        high = np.array([ARENA[0][1], ARENA[1][1], 1.0], np.float32)
        low = np.array([ARENA[0][0], ARENA[1][0], 0.0], np.float32)
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.position = np.zeros(2)
        self.entered = False
        self.struck = False

    def _obs(self) -> np.ndarray:
        return np.array([*self.position, float(self.entered)], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.position = np.zeros(2)
        self.entered = False
        self.struck = False
        return self._obs(), {}

    def step(self, action) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        move = np.clip(np.asarray(action, dtype=np.float64).reshape(2), -1.0, 1.0) * SPEED
        before = goal_distance(*self.position)
        position = self.position + move
        position[0] = min(max(position[0], ARENA[0][0]), ARENA[0][1])
        position[1] = min(max(position[1], ARENA[1][0]), ARENA[1][1])
        self.position = position
        reward = -self.step_cost + self.shaping * (before - goal_distance(*position))
        if not self.entered and in_region(*position):
            self.entered = True
            # One draw per episode, at the first entry.
            if self.np_random.random() < self.strike_probability:
                self.struck = True
                reward -= self.penalty
        terminated = on_goal(*position)
        outcome = -1.0 if self.struck else (1.0 if terminated else 0.0)
        return self._obs(), float(reward), terminated, False, {"risk_outcome": outcome}


def route_paths() -> dict[str, list[tuple[float, float]]]:
    """A time-optimal path of full-speed steps from the start to the goal, straight through
    the region and around it: the positions after each step, by breadth-first search over
    the lattice of full-speed moves from the start. The region's and the goal's edges lie
    0.05 off that lattice, so a path on it never grazes an edge (the tests play these paths
    in the environment and find the laws of :func:`route_laws`)."""
    def search(avoid: bool) -> list[tuple[float, float]]:
        parent: dict[tuple[int, int], tuple[int, int] | None] = {(0, 0): None}
        frontier = [(0, 0)]
        while frontier:
            following = []
            for i, j in frontier:
                for di in (-1, 0, 1):
                    for dj in (-1, 0, 1):
                        cell = (i + di, j + dj)
                        x, y = cell[0] * SPEED, cell[1] * SPEED
                        if cell in parent or not (ARENA[0][0] <= x <= ARENA[0][1]
                                                  and ARENA[1][0] <= y <= ARENA[1][1]):
                            continue
                        if avoid and in_region(x, y):
                            continue
                        parent[cell] = (i, j)
                        if on_goal(x, y):
                            path = []
                            while cell != (0, 0):
                                path.append((cell[0] * SPEED, cell[1] * SPEED))
                                cell = parent[cell]
                            return path[::-1]
                        following.append(cell)
            frontier = following
        raise RuntimeError("the goal cannot be reached")

    return {"straight": search(avoid=False), "around": search(avoid=True)}


def route_laws(strike_probability: float = 0.2, penalty: float = 2.0, step_cost: float = 0.1,
               shaping: float = 1.0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The law of the undiscounted return S of each time-optimal route: ``{route: (atoms,
    probabilities)}``, atoms ascending."""
    start_distance = goal_distance(0.0, 0.0)
    laws = {}
    for route, path in route_paths().items():
        n = len(path)
        base = shaping * start_distance - step_cost * n
        if route == "straight" and strike_probability > 0.0:
            laws[route] = (np.array([base - penalty, base]),
                           np.array([strike_probability, 1.0 - strike_probability]))
        else:
            laws[route] = (np.array([base]), np.array([1.0]))
    return laws
