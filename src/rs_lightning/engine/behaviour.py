"""The behaviour policy: epsilon-greedy on the utility, one exploration generator per member.

Copy i of member k at environment step t acts with the epsilon of step t + i and draws from
member k's generator in the order of i (a uniform, then an action where it explores), so a
member with N copies acts as N steps of one environment would, and member k as the run of
its seed alone. The greedy actions of all members and copies come from one forward pass.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from rs_lightning.risk.conditioning import RiskConditioning

# Tag the generators of the risk settings, apart from any other use of a member's seed.
ACTING_SETTINGS_STREAM = 0xA5E7
LEARNING_SETTINGS_STREAM = 0x1EA5


def exploration_rate(env_step: int, start: float, end: float, decay: float, schedule: str) -> float:
    """epsilon after ``env_step`` environment steps.

    ``exponential``: end + (start - end) * exp(-t / decay) (the authors' schedule);
    ``linear``: from start to end over ``decay`` steps, then constant.
    """
    if schedule == "exponential":
        return end + (start - end) * math.exp(-env_step / decay)
    return end + (start - end) * max(0.0, 1.0 - env_step / decay)


class EpsilonGreedy:
    """Epsilon-greedy actions ``[K, N]`` for the observations ``[K, N, ...]`` of K members'
    N copies (NumPy arrays; module docstring). ``learning`` holds the schedule
    (``epsilon_*`` keys)."""

    def __init__(self, seeds: list[int], n_actions: int, learning) -> None:
        self.generators = [np.random.default_rng(seed + 2) for seed in seeds]
        self.n_actions = n_actions
        self.learning = learning
        self.epsilon = learning.epsilon_start

    def rate(self, env_step: int) -> float:
        cfg = self.learning
        return exploration_rate(env_step, cfg.epsilon_start, cfg.epsilon_end, cfg.epsilon_decay,
                                cfg.epsilon_schedule)

    def __call__(self, obs: np.ndarray, env_step: int,
                 greedy: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """``greedy(obs[K, N, ...]) -> [K, N]`` is called once, if any copy acts greedily."""
        copies = obs.shape[1]
        rates = [self.rate(env_step + i) for i in range(copies)]
        self.epsilon = rates[-1]
        explored: list[tuple[int, int, int]] = []  # (member, copy, random action)
        for k, generator in enumerate(self.generators):
            for i, epsilon in enumerate(rates):
                if generator.random() < epsilon:
                    explored.append((k, i, int(generator.integers(self.n_actions))))
        if len(explored) == obs.shape[0] * copies:  # nobody acts greedily: no forward pass
            actions = np.empty(obs.shape[:2], dtype=np.int64)
        else:
            actions = np.array(greedy(obs), dtype=np.int64, copy=True)
        for k, i, action in explored:
            actions[k, i] = action
        return actions

    def state_dict(self, members: list[int] | None = None) -> dict[str, Any]:
        chosen = range(len(self.generators)) if members is None else members
        return {"generators": [self.generators[k].bit_generator.state for k in chosen],
                "epsilon": self.epsilon}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["generators"]) != len(self.generators):
            raise ValueError("the checkpoint's exploration state is of another number of members")
        for generator, generator_state in zip(self.generators, state["generators"]):
            generator.bit_generator.state = generator_state
        self.epsilon = state["epsilon"]


class EpisodeSettings:
    """The risk setting each env copy of each member acts at (risk-conditioned runs with
    ``risk_conditioning.acting: episode``): drawn for every copy at the start, and anew for a
    copy whose episode ended. Member k draws from its own generator, in the order of its
    copies, so that it acts as the run of its seed alone would."""

    def __init__(self, conditioning: RiskConditioning, seeds: list[int], copies: int) -> None:
        self.conditioning = conditioning
        self.generators = [np.random.default_rng([seed, ACTING_SETTINGS_STREAM])
                           for seed in seeds]
        drawn = [conditioning.sample(generator, copies) for generator in self.generators]
        self.alpha = np.stack([alpha for alpha, _ in drawn])  # [K, N]
        self.parameter = np.stack([parameter for _, parameter in drawn])  # [K, N]

    def episode_ended(self, member: int, copy: int) -> None:
        alpha, parameter = self.conditioning.sample(self.generators[member], 1)
        self.alpha[member, copy], self.parameter[member, copy] = alpha[0], parameter[0]

    def state_dict(self, members: list[int]) -> dict[str, Any]:
        return {"generators": [self.generators[k].bit_generator.state for k in members],
                "alpha": self.alpha[members].tolist(),
                "parameter": self.parameter[members].tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for generator, generator_state in zip(self.generators, state["generators"]):
            generator.bit_generator.state = generator_state
        self.alpha = np.asarray(state["alpha"], dtype=np.float64)
        self.parameter = np.asarray(state["parameter"], dtype=np.float64)


# Tags the generators of the static objective's episode thresholds.
THRESHOLD_STREAM = 0x7B5E


class AccumulatedReturns:
    """What the static objective adds to each env copy's state (``objective=static``,
    :mod:`rs_lightning.risk.static`): the discounted return accumulated so far c (learning
    units), the discount reached gamma^t and the episode's threshold b, for ``copies`` copies
    of each of the members of ``seeds``.

    A copy whose episode starts gets c = 0, gamma^0 = 1 and a threshold still to choose
    (``pending``): :meth:`resolve` draws it from member k's generator, in the order of its
    copies: with probability ``uniform_share`` uniform over the support, else the best one
    at the start state (a forward pass of the module's, ``best``). Evaluation uses a share 0.
    """

    def __init__(self, objective, seeds: list[int], copies: int, gamma: float,
                 uniform_share: float | None = None) -> None:
        self.objective = objective
        self.copies = copies
        self.gamma = gamma
        self.uniform_share = objective.uniform_share if uniform_share is None else uniform_share
        self.generators = [np.random.default_rng([seed, THRESHOLD_STREAM]) for seed in seeds]
        total = len(seeds) * copies
        self.accumulated = np.zeros(total)
        self.discount = np.ones(total)
        self.threshold = np.zeros(total)
        self.pending = np.ones(total, dtype=bool)

    def features(self) -> np.ndarray:
        """The copies' augmented inputs ``[M, 3]`` (float32)."""
        return self.objective.features(torch.from_numpy(self.accumulated),
                                       torch.from_numpy(self.discount),
                                       torch.from_numpy(self.threshold)).numpy()

    def augment(self, obs: np.ndarray) -> np.ndarray:
        """``obs[M, D]`` of the copies with their (c, gamma^t, b) appended -> ``[M, D + 3]``."""
        return np.concatenate([np.asarray(obs, dtype=np.float32), self.features()], axis=-1)

    def resolve(self, obs: np.ndarray, best: Callable[[np.ndarray], np.ndarray]) -> None:
        """Choose the thresholds of the copies whose episode starts at ``obs[M, D]``;
        ``best(obs[K, N, D]) -> [K, N]`` is called once, if any of them needs it."""
        if not self.pending.any():
            return
        members = len(self.generators)
        if not self.objective.has_threshold:
            self.threshold[self.pending] = 0.0
            self.pending[:] = False
            return
        low, high = self.objective.return_min, self.objective.return_max
        drawn: dict[int, float] = {}
        for j in np.flatnonzero(self.pending).tolist():  # member by member, copy by copy
            generator = self.generators[j // self.copies]
            uniform, value = generator.random(), generator.uniform(low, high)
            if uniform < self.uniform_share:
                drawn[j] = value
        if len(drawn) < int(self.pending.sum()):
            grouped = np.asarray(obs, dtype=np.float32).reshape(members, self.copies, -1)
            best_thresholds = np.asarray(best(grouped), dtype=np.float64).reshape(-1)
        for j in np.flatnonzero(self.pending).tolist():
            self.threshold[j] = drawn[j] if j in drawn else best_thresholds[j]
        self.pending[:] = False

    def advance(self, reward: np.ndarray, ended: np.ndarray) -> np.ndarray:
        """One step of every copy with learning rewards ``reward[M]``: returns the features
        of the states reached ``[M, 3]`` (before the restart of an ended episode), then
        starts the ended copies' next episodes (thresholds pending)."""
        self.accumulated = self.accumulated + self.discount * reward
        self.discount = self.discount * self.gamma
        reached = self.features()
        if ended.any():
            self.restart(ended)
        return reached

    def restart(self, copies) -> None:
        """Start new episodes in ``copies`` (a mask or indices)."""
        self.accumulated[copies] = 0.0
        self.discount[copies] = 1.0
        self.threshold[copies] = 0.0
        self.pending[copies] = True

    def state_dict(self, members: list[int]) -> dict[str, Any]:
        rows = [k * self.copies + i for k in members for i in range(self.copies)]
        return {"generators": [self.generators[k].bit_generator.state for k in members],
                **{name: getattr(self, name)[rows].tolist()
                   for name in ("accumulated", "discount", "threshold", "pending")}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for generator, generator_state in zip(self.generators, state["generators"]):
            generator.bit_generator.state = generator_state
        for name in ("accumulated", "discount", "threshold"):
            setattr(self, name, np.asarray(state[name], dtype=np.float64))
        self.pending = np.asarray(state["pending"], dtype=bool)
