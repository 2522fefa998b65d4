"""The paper's three 3 x 3 grid worlds (Théate & Ernst, appendix A).

The semantics follow the paper; ``docs/guides/paper.md`` says where the paper's text and
the authors' code disagree. Every environment is a tabular MDP: :meth:`GridWorld.outcomes`
returns the exact one-step model, and :meth:`GridWorld.step` samples from a table compiled
from that same model, so the simulator and the exact computations in
:mod:`rs_lightning.references.exact` cannot drift apart.

Step order: the chosen move (clamped to the grid), then the wind (one cell to the left,
clamped) with probability ``wind_prob``, then the reward and termination, decided by the
cell the agent ends in. Every reward is Gaussian with standard deviation ``REWARD_STD``
around a mean that may itself be random (a finite mixture, e.g. the risky goal).
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

Cell = tuple[int, int]
# A step's reward: a Gaussian mixture given as ((probability, mean), ...), sigma REWARD_STD.
RewardComponents = tuple[tuple[float, float], ...]

GRID_SIZE = 3
START: Cell = (1, 0)
REWARD_STD = 0.1
CELLS: tuple[Cell, ...] = tuple((x, y) for x in range(GRID_SIZE) for y in range(GRID_SIZE))

RIGHT, DOWN, LEFT, UP = 0, 1, 2, 3
ACTION_NAMES = ("right", "down", "left", "up")
_MOVES = ((1, 0), (0, -1), (-1, 0), (0, 1))


def _clamp(x: int, y: int) -> Cell:
    return (min(max(x, 0), GRID_SIZE - 1), min(max(y, 0), GRID_SIZE - 1))


class Outcome(NamedTuple):
    """One branch of the one-step model, see :meth:`GridWorld.outcomes`."""

    probability: float
    next_cell: Cell
    reward_components: RewardComponents
    terminal: bool
    new_flag: bool


# The compiled model of each GridWorld class and settings (GridWorld._compile).
_COMPILED: dict[tuple, tuple[list, list, dict]] = {}


class GridWorld(gym.Env):
    """Shared machinery of the grid worlds; a subclass declares its cells and reward rules.

    Subclasses set ``wind_prob``, ``step_reward`` and ``goals`` (cell -> (reward components,
    R_s)), and override :meth:`cell_rule`, :meth:`next_flag` or :meth:`risk_outcome` when
    their rules go beyond "a goal ends the episode, anything else costs ``step_reward``".

    Args:
        max_steps: episode length limit.
        timeout_is_terminal: ``True`` (authors' convention, used for the paper reproduction)
            returns ``terminated=True`` at the limit, which makes a learner bootstrap nothing
            from the last state; ``False`` (gymnasium convention) returns ``truncated=True``.
        render_mode: ``None`` or ``"ansi"``.

    ``info`` has ``"cell"`` on every step; on the last step of an episode it also has
    ``"risk_outcome"`` (R_s in {+1, -1, 0}) and ``"timeout"`` (whether the limit ended it).
    ``reset(options={"cell": (x, y)})`` starts from another cell (tests, per-state checks).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}
    action_names: ClassVar[tuple[str, ...]] = ACTION_NAMES

    wind_prob: ClassVar[float] = 0.0
    # The wind blows only on moves that target one of these cells (None: on every move).
    wind_targets: ClassVar[Optional[frozenset[Cell]]] = None
    step_reward: ClassVar[float] = 0.0
    goals: ClassVar[dict[Cell, tuple[RewardComponents, int]]] = {}

    def __init__(
        self,
        max_steps: int = 10,
        timeout_is_terminal: bool = True,
        render_mode: Optional[str] = None,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.max_steps = int(max_steps)
        self.timeout_is_terminal = bool(timeout_is_terminal)
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0.0, GRID_SIZE - 1.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(len(_MOVES))
        # State lives in plain attributes (plus self.np_random) so that pickle / deepcopy
        # capture an episode in progress; None means "reset() not called yet".
        self._cell: Optional[Cell] = None
        self._steps = 0
        self._flag = False
        self._done = False
        self._compile()

    # ------------------------------------------------------------------ rules (subclasses)

    def cell_rule(self, cell: Cell) -> tuple[RewardComponents, bool]:
        """Reward components and termination for a step that ends in ``cell``."""
        goal = self.goals.get(cell)
        if goal is not None:
            return goal[0], True
        return ((1.0, self.step_reward),), False

    def next_flag(self, target: Cell, cell: Cell, flag: bool) -> bool:
        """The episode's sticky flag after a move aimed at ``target`` that ended in ``cell``.

        Only the risky grid world uses it (the shortcut through the trap); R_s of the other
        environments depends on the final cell alone.
        """
        return flag

    def risk_outcome(self, cell: Cell, terminal: bool, flag: bool) -> int:
        """R_s of an episode that ends in ``cell`` (``terminal``: ended by the rules, not
        by the time limit) with the given flag."""
        if terminal and cell in self.goals:
            return self.goals[cell][1]
        return 0

    # ------------------------------------------------------------------ tabular model

    def outcomes(self, cell: Cell, action: int, shortcut_flag: bool = False) -> list[Outcome]:
        """The exact one-step model: every branch of taking ``action`` in ``cell``.

        Returns a list of :class:`Outcome` (probability, next_cell, reward_components,
        terminal, new_flag); ``terminal`` is termination by the rules (goal, terminal trap),
        never the time limit. Branches reaching the same cell are merged (e.g. no wind
        effect in column x = 0), so the probabilities sum to one over distinct cells.
        """
        cell, action = tuple(cell), int(action)
        if cell not in self._observations or not 0 <= action < len(_MOVES):
            raise ValueError(f"no such cell / action: {cell}, {action}")
        return list(self._model[self._key(cell, action, bool(shortcut_flag))])

    def _build_outcomes(self, cell: Cell, action: int, flag: bool) -> list[Outcome]:
        dx, dy = _MOVES[action]
        target = _clamp(cell[0] + dx, cell[1] + dy)
        pushed = _clamp(target[0] - 1, target[1])
        windy = self.wind_targets is None or target in self.wind_targets
        wind = self.wind_prob if windy else 0.0
        branches: dict[Cell, float] = {}
        for prob, nxt in ((1.0 - wind, target), (wind, pushed)):
            if prob > 0.0:
                branches[nxt] = branches.get(nxt, 0.0) + prob
        result = []
        for nxt, prob in branches.items():
            components, terminal = self.cell_rule(nxt)
            new_flag = self.next_flag(target, nxt, flag)
            result.append(Outcome(prob, nxt, components, terminal, new_flag))
        return result

    @staticmethod
    def _key(cell: Cell, action: int, flag: bool) -> int:
        # A flat index is cheaper than hashing a tuple on every step.
        return ((cell[0] * GRID_SIZE + cell[1]) * len(_MOVES) + action) * 2 + flag

    def _compile(self) -> None:
        """Tabulate the model, and a sampler that flattens (branch x reward component) into
        one cumulative-probability list, so a step costs one uniform and one normal draw.
        The rules are the class's methods and class attributes and the settings its
        constructor stored before this call (``trap_terminal``), so the tables are made once
        per class and settings and shared, read-only, by such instances: an evaluation makes
        hundreds."""
        try:
            # The spaces are not settings (and gymnasium's spaces are unhashable).
            settings = {name: value for name, value in vars(self).items()
                        if name not in ("observation_space", "action_space")}
            key = (type(self), tuple(sorted(settings.items())))
            hash(key)
        except TypeError:  # a setting that cannot be a key: this instance's own tables
            self._model, self._sampler, self._observations = self._tabulate()
            return
        if key not in _COMPILED:
            _COMPILED[key] = self._tabulate()
        self._model, self._sampler, self._observations = _COMPILED[key]

    def _tabulate(self) -> tuple[list, list, dict]:
        model: list[tuple[Outcome, ...]] = [()] * (len(CELLS) * len(_MOVES) * 2)
        # Entries: (cumulative probability, next cell, reward mean, terminal, new flag).
        sampler: list[tuple[tuple, ...]] = [()] * len(model)
        for cell in CELLS:
            for action in range(len(_MOVES)):
                for flag in (False, True):
                    key = self._key(cell, action, flag)
                    branches = tuple(self._build_outcomes(cell, action, flag))
                    model[key] = branches
                    entries, cumulative = [], 0.0
                    for out in branches:
                        for p, mean in out.reward_components:
                            cumulative += out.probability * p
                            entries.append(
                                [cumulative, out.next_cell, mean, out.terminal, out.new_flag]
                            )
                    entries[-1][0] = float("inf")  # float round-off must never skip the last branch
                    sampler[key] = tuple(tuple(e) for e in entries)
        observations = {cell: np.array(cell, dtype=np.float32) for cell in CELLS}
        return model, sampler, observations

    # ------------------------------------------------------------------ gymnasium API

    @property
    def cell(self) -> Optional[Cell]:
        return self._cell

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def shortcut_flag(self) -> bool:
        return self._flag

    def reset(
        self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        cell = START
        if options and options.get("cell") is not None:
            cell = tuple(int(c) for c in options["cell"])
            if cell not in self._observations:
                raise ValueError(f"options['cell'] must be a cell of the 3 x 3 grid, got {cell}")
        self._cell, self._steps, self._flag, self._done = cell, 0, False, False
        return self._observations[cell].copy(), {"cell": cell}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._cell is None or self._done:
            raise RuntimeError("call reset() before step(): the episode has not started or is over")
        a = int(action)
        if not 0 <= a < 4:
            raise ValueError(f"action must be in {{0, 1, 2, 3}}, got {action!r}")
        rng = self.np_random
        u = rng.random()
        branches = self._sampler[self._key(self._cell, a, self._flag)]
        for cumulative, cell, mean, terminal, flag in branches:
            if u < cumulative:
                break
        reward = mean + REWARD_STD * rng.standard_normal()
        self._cell, self._flag = cell, flag
        self._steps += 1
        info: dict[str, Any] = {"cell": cell}
        truncated = False
        if terminal or self._steps >= self.max_steps:
            self._done = True
            info["risk_outcome"] = self.risk_outcome(cell, terminal, flag)
            info["timeout"] = not terminal
            if not terminal:
                # Authors' convention: the limit is a terminal transition; else truncation.
                terminal, truncated = self.timeout_is_terminal, not self.timeout_is_terminal
        return self._observations[cell].copy(), float(reward), terminal, truncated, info

    def render(self) -> Optional[str]:
        if self.render_mode != "ansi":
            return None
        rows = []
        for y in reversed(range(GRID_SIZE)):  # y grows upwards, as UP is y + 1
            row = ""
            for x in range(GRID_SIZE):
                cell = (x, y)
                row += "A" if cell == self._cell else ("G" if cell in self.goals else ".")
            rows.append(row)
        return "\n".join(rows) + "\n"


class RiskyRewards(GridWorld):
    """Two goals at equal distance: (0, 2) pays N(0.3) (green, R_s = +1); (2, 2) pays N(+1)
    or, with probability 0.25, N(-1) (orange, R_s = -1). Deterministic moves."""

    wind_prob = 0.0
    step_reward = -0.1
    goals = {
        (0, 2): (((1.0, 0.3),), +1),
        (2, 2): (((0.75, 1.0), (0.25, -1.0)), -1),
    }


class RiskyTransitions(GridWorld):
    """Goal (2, 0) is one step right of the start but against the wind (p = 0.5), which
    keeps pushing the agent back (orange, R_s = -1); (0, 2) is a longer path that the wind
    only helps (green, R_s = +1). Both pay N(+1)."""

    wind_prob = 0.5
    step_reward = -0.3
    goals = {
        (0, 2): (((1.0, 1.0),), +1),
        (2, 0): (((1.0, 1.0),), -1),
    }


class RiskyGridWorld(GridWorld):
    """Objective (1, 2), straight above the start, behind a trap at (1, 1).

    The trap pays N(-0.2) or, with probability 0.25, N(-2). It does not end the episode
    (authors' code; the paper's reported numbers match this) unless ``trap_terminal=True``
    (paper text). Wind p = 0.25 to the left.

    R_s uses a sticky "shortcut" flag: set by a move aimed at the trap, even if the wind
    pushes the agent aside (authors' code), or by ending a step in the trap (the wind can
    push the agent in from the right). R_s = -1 if the flag is set at the end, timeout
    included; else +1 for the objective; else 0.
    """

    wind_prob = 0.25
    step_reward = -0.2
    goals = {(1, 2): (((1.0, 1.0),), +1)}
    trap: ClassVar[Cell] = (1, 1)
    trap_reward: ClassVar[RewardComponents] = ((0.75, -0.2), (0.25, -2.0))

    def __init__(
        self,
        max_steps: int = 10,
        timeout_is_terminal: bool = True,
        trap_terminal: bool = False,
        render_mode: Optional[str] = None,
    ) -> None:
        # Set before the base constructor, which compiles the model from cell_rule.
        self.trap_terminal = bool(trap_terminal)
        super().__init__(max_steps, timeout_is_terminal, render_mode)

    def cell_rule(self, cell: Cell) -> tuple[RewardComponents, bool]:
        if cell == self.trap:
            return self.trap_reward, self.trap_terminal
        return super().cell_rule(cell)

    def next_flag(self, target: Cell, cell: Cell, flag: bool) -> bool:
        return flag or target == self.trap or cell == self.trap

    def risk_outcome(self, cell: Cell, terminal: bool, flag: bool) -> int:
        if flag:
            return -1
        return super().risk_outcome(cell, terminal, flag)

    def render(self) -> Optional[str]:
        text = super().render()
        if text is None or self._cell == self.trap:
            return text
        # Row y = 1 is the second line; column x = 1 its second character.
        lines = text.split("\n")
        lines[1] = lines[1][0] + "T" + lines[1][2:]
        return "\n".join(lines)


class TwoStage(GridWorld):
    """A two-stage gamble where the paper's per-decision criterion and the static objective
    U[S] of the whole episode disagree (not from the paper)::

        y=2   safe goal (0, 2)   risky goal (1, 2)   .
        y=1   penalty (0, 1)     coin (1, 1)         safe goal (2, 1)
        y=0   penalty (0, 0)     start (1, 0)        penalty (2, 0)

    Stage one: UP from the start aims at the coin cell (1, 1) (lucky); with probability
    0.4 the wind (which blows on moves aimed at the coin cell only) pushes the agent into
    the penalty cell (0, 1) instead, N(-2) (unlucky). The whole bottom row pays that
    penalty when entered (the start on a return to it, DOWN included), so the gamble is
    the way out and waiting for the timeout is no option. Stage two: from
    the coin cell, RIGHT reaches the safe goal (2, 1), N(+0.5), and UP the risky goal
    (1, 2), N(+2) with probability 0.75 or N(-1) with 0.25; from the penalty cell (0, 1),
    UP reaches the safe goal (0, 2), N(+0.5). Other steps: N(-0.1). R_s: +1 at a safe goal
    (green), -1 at the risky goal (orange), 0 at the timeout.

    Why they disagree: the lowest tenth of the episode's return S lies in the unlucky 40 %
    (about -1.5), below the risky goal's loss after a lucky stage one (about -1.1), so for
    U[S] with rho = 0.1 the risky goal after the coin costs no VaR / CVaR and adds
    expectation. The per-decision criterion judges Z(coin, a) alone, whose own 10 % tail is
    that loss, and takes the safe goal (see tests/test_exact_policies.py for the numbers).
    """

    wind_prob = 0.4
    wind_targets = frozenset({(1, 1)})
    step_reward = -0.1
    goals = {
        (0, 2): (((1.0, 0.5),), +1),
        (2, 1): (((1.0, 0.5),), +1),
        (1, 2): (((0.75, 2.0), (0.25, -1.0)), -1),
    }
    penalty_cells: ClassVar[frozenset[Cell]] = frozenset({(0, 0), (0, 1), (1, 0), (2, 0)})
    penalty_reward: ClassVar[RewardComponents] = ((1.0, -2.0),)

    def cell_rule(self, cell: Cell) -> tuple[RewardComponents, bool]:
        if cell in self.penalty_cells:
            return self.penalty_reward, False
        return super().cell_rule(cell)


__all__ = [
    "ACTION_NAMES",
    "CELLS",
    "DOWN",
    "GRID_SIZE",
    "GridWorld",
    "LEFT",
    "Outcome",
    "REWARD_STD",
    "RIGHT",
    "RiskyGridWorld",
    "RiskyRewards",
    "RiskyTransitions",
    "START",
    "TwoStage",
    "UP",
]
