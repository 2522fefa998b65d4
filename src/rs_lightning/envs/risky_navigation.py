"""A risky navigation world with a known answer, for the continuous-action agents.

A point mass starts at (0, 0) and must reach the goal, the square |x - 2| <= 0.15,
|y| <= 0.15. Each step it moves by 0.1 times its action, a = (a_x, a_y) in [-1, 1]^2 (the
speed limit is per coordinate: a diagonal step is as fast as a straight one). Between start
and goal lies the risky region, the rectangle 0.35 <= x <= 1.65, ``south_edge`` < y < 0.95
(``south_edge`` -0.95 by default: |y| < 0.95): at every step that ends in it, with
probability ``strike_probability`` (0.1) a penalty of ``penalty`` (0.8) strikes. The way
around the region is longer.

Rewards per step: ``-step_cost`` (0.1), the penalty when it strikes, and a shaping term
``shaping`` x (d(s) - d(s')), d the Euclidean distance to the goal square (0 on it), which
tells the mass where the goal is and adds ``shaping`` x 1.85 to every episode that reaches
the goal from the start, whatever the path. The episode ends (terminated) on the goal.

**A lopsided region** (``south_edge`` below -0.95; the preset keeps the symmetric -0.95).
With a symmetric region there are two equally short ways around, by the north and by the
south, and the start lies on the boundary between them: an optimal policy turns north just
above the x axis and south just below it. A continuous actor can only blur that jump, so at
the start itself it may head nearly straight for the west gate and drift slowly to one side;
whether it slips through the gate (|y| < 0.25) is then a matter of a few hundredths. With
the south edge at -1.35 the way by the north is 31 steps from the start and the way by the
south 39, equally long only from (0, -0.4), and the laws of the two routes below are the
same. Measured, it did not help (docs/guides/continuous.md): some seeds still crossed, and
some took the longer way by the south.

**Fences** (``gate``, the preset's 0.25; None: none): the region's long sides and its two
ends are fenced, except a gate |y| < ``gate`` in each end (:func:`fenced`: a move that would
cross a fence stops at it and slides along it). The region is then entered and left through
its gates alone: a mass that enters is committed to the whole crossing, and one that passes
beside the region cannot clip a corner of it. Unfenced, a learned policy going around cut
through a corner (a continuous actor blurs an edge 0.05 off its path); fenced, the choice
between the two routes is made once, at the west gate.

A path of n steps, k of them in the region, has the undiscounted return
S = 1.85 - 0.1 n - 0.8 K with K ~ Binomial(k, 0.1): its law is exact. The paths that matter
(:func:`route_laws`, over the lattice of full-speed moves):

- the risk-neutral optimum (the least expected cost, by Dijkstra's algorithm) crosses: 19
  steps, 13 of them in the region with the fences (E = -1.09, CVaR_0.1 = -2.78; unfenced 12,
  the path stepping out of the region once: E = -1.01, CVaR_0.1 = -2.69);
- around the region: 31 steps, none in it: S = -1.25 surely.

A CVaR_0.1 agent at alpha 0 goes around (-1.25 > -2.78; any path with a step in the region
has a strike probability of at least 0.1, so its CVaR_0.1 is at most its base less 0.8).

``start="anywhere"`` draws each episode's start uniformly over the arena outside the goal
(exploring starts): a training setting (``env.training_kwargs``), so that the critic sees
the goal reached before its actor finds the way; evaluations start at (0, 0), where the laws
above hold. ``start="mixed"`` starts half the episodes there and half anywhere, so that the
actor's choice at the origin, where the routes part, is trained on episodes of its own.

The observation is the position (x, y). ``info["risk_outcome"]`` is -1 once a penalty
struck in the episode, +1 when the episode ends on the goal without one, 0 otherwise.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

GOAL = (2.0, 0.0)
GOAL_HALF_WIDTH = 0.15
REGION_X = (0.35, 1.65)
REGION_HALF_HEIGHT = 0.95  # the north side's y; the south side's is -0.95 unless moved
SPEED = 0.1
ARENA = ((-0.5, 2.5), (-2.5, 2.5))  # x and y bounds the mass cannot leave
STARTS = ("origin", "anywhere", "mixed")


def in_region(x: float, y: float, south_edge: float = -REGION_HALF_HEIGHT) -> bool:
    return REGION_X[0] <= x <= REGION_X[1] and south_edge < y < REGION_HALF_HEIGHT


# A move that passes a fence's end (a corner of the region, a gate's edge) within this is let
# by: the lattice's corner-grazing moves then pass in the environment too, whatever the
# rounding of positions summed step by step.
_GRAZE = 1e-9


def fenced(old: tuple[float, float], new: tuple[float, float], gate: float,
           south_edge: float = -REGION_HALF_HEIGHT) -> tuple[float, float]:
    """Where a move from ``old`` toward ``new`` ends when the region is fenced: its long
    sides (y = REGION_HALF_HEIGHT and y = ``south_edge``) and its two ends (x = REGION_X[0],
    REGION_X[1]) except a gate |y| < ``gate`` in each end. A move that would cross a fence stops at it and slides
    along it, so the region is entered and left through the gates alone."""
    (x0, y0), (x1, y1) = old, new
    left, right = REGION_X
    for edge in (REGION_HALF_HEIGHT, south_edge):  # the long sides
        inside_before = (y0 < edge) if edge > 0 else (y0 > edge)
        inside_after = (y1 < edge) if edge > 0 else (y1 > edge)
        if inside_before != inside_after:
            crossing = x0 + (x1 - x0) * (edge - y0) / (y1 - y0)
            if left + _GRAZE < crossing < right - _GRAZE:  # a corner lets the mass by
                y1 = math.nextafter(edge, 0.0) if inside_before else edge
    for edge, outward in ((left, -math.inf), (right, math.inf)):  # the ends, but their gates
        inside_before = (x0 >= edge) if outward < 0 else (x0 <= edge)
        inside_after = (x1 >= edge) if outward < 0 else (x1 <= edge)
        if inside_before != inside_after:
            crossing = y0 + (y1 - y0) * (edge - x0) / (x1 - x0)
            if (abs(crossing) > gate + _GRAZE
                    and south_edge + _GRAZE < crossing < REGION_HALF_HEIGHT - _GRAZE):
                x1 = edge if inside_before else math.nextafter(edge, outward)
    return x1, y1


def check_world(strike_probability: float = 0.1, penalty: float = 0.8, step_cost: float = 0.1,
                shaping: float = 1.0, gate: float | None = None,
                south_edge: float = -REGION_HALF_HEIGHT) -> None:
    """ValueError ``"name must be ..."`` for an argument no world takes: the route search
    (:func:`least_cost_path`) needs costs that are finite and not negative (a negative one
    makes cycles that pay), the rewards finite numbers."""
    if not 0.0 <= strike_probability <= 1.0:
        raise ValueError(f"strike_probability must be in [0, 1], got {strike_probability}")
    for name, value in (("penalty", penalty), ("step_cost", step_cost)):
        if not (math.isfinite(value) and value >= 0.0):
            raise ValueError(f"{name} must be a finite number >= 0 (a cost), got {value}")
    if not math.isfinite(shaping):
        raise ValueError(f"shaping must be a finite number, got {shaping}")
    if not ARENA[1][0] <= south_edge <= -GOAL_HALF_WIDTH - SPEED:
        raise ValueError(f"south_edge must be in [{ARENA[1][0]:g}, {-GOAL_HALF_WIDTH - SPEED:g}] "
                         f"(within the arena, the region spanning the start's row), got "
                         f"{south_edge}")
    if gate is not None and not 0.0 < gate <= min(REGION_HALF_HEIGHT, -south_edge):
        raise ValueError(f"gate must be in (0, {min(REGION_HALF_HEIGHT, -south_edge):g}] "
                         f"or None, got {gate}")


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

    @staticmethod
    def reference_laws(strike_probability: float = 0.1, penalty: float = 0.8,
                       step_cost: float = 0.1, shaping: float = 1.0, start: str = "origin",
                       gate: float | None = None, south_edge: float = -REGION_HALF_HEIGHT,
                       ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The exact laws of S of the routes that matter from the start, for the world these
        keyword arguments make (:func:`route_laws`): what the tools put beside a learned
        policy (``rs-lightning frontier``). ``start`` shapes training alone."""
        return route_laws(strike_probability, penalty, step_cost, shaping, gate, south_edge)

    def __init__(self, strike_probability: float = 0.1, penalty: float = 0.8,
                 step_cost: float = 0.1, shaping: float = 1.0, start: str = "origin",
                 gate: float | None = None, south_edge: float = -REGION_HALF_HEIGHT) -> None:
        check_world(strike_probability, penalty, step_cost, shaping, gate, south_edge)
        if start not in STARTS:
            raise ValueError(f"start must be one of {', '.join(STARTS)}, got {start!r}")
        self.south_edge = float(south_edge)
        self.start = start
        self.strike_probability = float(strike_probability)
        self.penalty = float(penalty)
        self.step_cost = float(step_cost)
        self.shaping = float(shaping)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.gate = None if gate is None else float(gate)
        high = np.array([ARENA[0][1], ARENA[1][1]], np.float32)
        low = np.array([ARENA[0][0], ARENA[1][0]], np.float32)
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.position = np.zeros(2)
        self.struck = False

    def _obs(self) -> np.ndarray:
        return self.position.astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.position = np.zeros(2)
        if self.start == "anywhere" or (self.start == "mixed" and self.np_random.random() < 0.5):
            low, high = [ARENA[0][0], ARENA[1][0]], [ARENA[0][1], ARENA[1][1]]
            self.position = self.np_random.uniform(low, high)
            while on_goal(*self.position):
                self.position = self.np_random.uniform(low, high)
        self.struck = False
        return self._obs(), {}

    def step(self, action) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        move = np.clip(np.asarray(action, dtype=np.float64).reshape(2), -1.0, 1.0) * SPEED
        before = goal_distance(*self.position)
        position = self.position + move
        position[0] = min(max(position[0], ARENA[0][0]), ARENA[0][1])
        position[1] = min(max(position[1], ARENA[1][0]), ARENA[1][1])
        if self.gate is not None:
            position = np.array(fenced(tuple(self.position), tuple(position), self.gate,
                                       self.south_edge))
        self.position = position
        reward = -self.step_cost + self.shaping * (before - goal_distance(*position))
        # One draw at every step that ends in the region (and only there).
        if (in_region(*position, self.south_edge)
                and self.np_random.random() < self.strike_probability):
            self.struck = True
            reward -= self.penalty
        terminated = on_goal(*position)
        outcome = -1.0 if self.struck else (1.0 if terminated else 0.0)
        return self._obs(), float(reward), terminated, False, {"risk_outcome": outcome}


def lattice_moves(cell: tuple[int, int], gate: float | None = None,
                  south_edge: float = -REGION_HALF_HEIGHT):
    """The full-speed moves from a lattice cell (i, j), at (0.1 i, 0.1 j): ``(next cell, x,
    y)`` for each of the 8 neighbours inside the arena (with a ``gate``, not across a fence)."""
    i, j = cell
    for di in (-1, 0, 1):
        for dj in (-1, 0, 1):
            nxt = (i + di, j + dj)
            x, y = nxt[0] * SPEED, nxt[1] * SPEED
            if nxt == cell or not (ARENA[0][0] <= x <= ARENA[0][1]
                                   and ARENA[1][0] <= y <= ARENA[1][1]):
                continue
            if gate is not None and fenced((i * SPEED, j * SPEED), (x, y), gate,
                                           south_edge) != (x, y):
                continue
            yield nxt, x, y


def least_cost_path(step_cost: float, region_cost: float | None, gate: float | None = None,
                    south_edge: float = -REGION_HALF_HEIGHT, start: tuple[int, int] = (0, 0)
                    ) -> list[tuple[float, float]]:
    """The path of full-speed moves from the start to the goal of least total cost,
    ``step_cost`` a step plus ``region_cost`` a step that ends in the region (None: the
    region is forbidden), by Dijkstra's algorithm over the lattice of full-speed moves (the
    region's and the goal's edges lie 0.05 off it, so a path on it never grazes an edge);
    among paths of equal cost, the first found; with a ``gate``, no move crosses a fence
    (:func:`fenced`). ``start``: the lattice cell it starts from. Returns the positions
    after each step."""
    import heapq

    best = {start: 0.0}
    parent: dict[tuple[int, int], tuple[int, int]] = {}
    queue = [(0.0, start)]
    while queue:
        cost, cell = heapq.heappop(queue)
        if cost > best[cell] + 1e-12:
            continue
        if cell != start and on_goal(cell[0] * SPEED, cell[1] * SPEED):
            path = []
            while cell != start:
                path.append((cell[0] * SPEED, cell[1] * SPEED))
                cell = parent[cell]
            return path[::-1]
        for nxt, x, y in lattice_moves(cell, gate, south_edge):
            inside = in_region(x, y, south_edge)
            if inside and region_cost is None:
                continue
            total = cost + step_cost + (region_cost if inside else 0.0)
            if total < best.get(nxt, math.inf) - 1e-12:
                best[nxt] = total
                parent[nxt] = cell
                heapq.heappush(queue, (total, nxt))
    raise RuntimeError("the goal cannot be reached")


def route_paths(strike_probability: float = 0.1, penalty: float = 0.8, step_cost: float = 0.1,
                gate: float | None = None, south_edge: float = -REGION_HALF_HEIGHT
                ) -> dict[str, list[tuple[float, float]]]:
    """The two paths of the module docstring: ``"crossing"``, the risk-neutral optimum (the
    least expected cost: a step costs ``step_cost``, a step in the region
    ``strike_probability`` x ``penalty`` more), and ``"around"``, the shortest path that
    never enters the region (the same with and without the fences)."""
    check_world(strike_probability, penalty, step_cost, gate=gate, south_edge=south_edge)
    return {"crossing": least_cost_path(step_cost, strike_probability * penalty, gate,
                                        south_edge),
            "around": least_cost_path(step_cost, None, gate, south_edge)}


def path_law(path: list[tuple[float, float]], strike_probability: float = 0.1,
             penalty: float = 0.8, step_cost: float = 0.1, shaping: float = 1.0,
             south_edge: float = -REGION_HALF_HEIGHT) -> tuple[np.ndarray, np.ndarray]:
    """The law of the undiscounted return S of a path that ends on the goal: ``(atoms,
    probabilities)``, atoms ascending (S = 1.85 shaping - n step_cost - penalty K, K the
    strikes of its k steps in the region, Binomial(k, strike_probability))."""
    steps = len(path)
    inside = sum(in_region(*point, south_edge) for point in path)
    strikes = np.arange(inside + 1)
    probabilities = np.array([math.comb(inside, k) * strike_probability**k
                              * (1.0 - strike_probability) ** (inside - k) for k in strikes])
    atoms = shaping * goal_distance(0.0, 0.0) - step_cost * steps - penalty * strikes
    order = np.argsort(atoms)
    return atoms[order], probabilities[order]


def route_laws(strike_probability: float = 0.1, penalty: float = 0.8, step_cost: float = 0.1,
               shaping: float = 1.0, gate: float | None = None,
               south_edge: float = -REGION_HALF_HEIGHT
               ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The law of S of each path of :func:`route_paths`: ``{route: (atoms, probabilities)}``."""
    paths = route_paths(strike_probability, penalty, step_cost, gate, south_edge)
    return {route: path_law(path, strike_probability, penalty, step_cost, shaping, south_edge)
            for route, path in paths.items()}
