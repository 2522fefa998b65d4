"""The behaviour policy, one exploration generator per member: epsilon-greedy on the
objective's rule for discrete actions (:class:`EpsilonGreedy`), the actor's own sample for
continuous ones (:class:`ActorSampling`).

Copy i of member k at environment step t acts with the epsilon of step t + i and draws from
member k's generator in the order of i (a uniform, then an action where it explores), so a
member with N copies acts as N steps of one environment would, and member k as the run of
its seed alone. The greedy actions of all members and copies come from one forward pass.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np


def exploration_rate(env_step: int, start: float, end: float, decay: float, schedule: str) -> float:
    """epsilon after ``env_step`` environment steps.

    ``exponential``: end + (start - end) * exp(-t / decay) (the authors' schedule);
    ``linear``: from start to end over ``decay`` steps, then constant.
    """
    if schedule == "exponential":
        return end + (start - end) * math.exp(-env_step / decay)
    return end + (start - end) * max(0.0, 1.0 - env_step / decay)


class MemberExploration:
    """What a behaviour policy keeps: one exploration generator per member (seeded
    ``seed + 2``) and the share of random actions it last took (``epsilon``), checkpointed
    per member."""

    def __init__(self, seeds: list[int], epsilon: float) -> None:
        self.generators = [np.random.default_rng(seed + 2) for seed in seeds]
        self.epsilon = epsilon

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


class EpsilonGreedy(MemberExploration):
    """Epsilon-greedy actions ``[K, N]`` for the observations ``[K, N, ...]`` of K members'
    N copies (NumPy arrays; module docstring). ``learning`` holds the schedule
    (``epsilon_*`` keys)."""

    explores_by_epsilon = True  # the training logs and the progress line show epsilon

    def __init__(self, seeds: list[int], n_actions: int, learning) -> None:
        super().__init__(seeds, learning.epsilon_start)
        self.n_actions = n_actions
        self.learning = learning

    def rate(self, env_step: int) -> float:
        cfg = self.learning
        return exploration_rate(env_step, cfg.epsilon_start, cfg.epsilon_end, cfg.epsilon_decay,
                                cfg.epsilon_schedule)

    def __call__(self, obs: np.ndarray, env_step: int, policy: Callable[..., np.ndarray]
                 ) -> np.ndarray:
        """``policy(obs[K, N, ...]) -> [K, N]``, the greedy actions, is called once, if any
        copy acts greedily."""
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
            actions = np.array(policy(obs), dtype=np.int64, copy=True)
        for k, i, action in explored:
            actions[k, i] = action
        return actions


class ActorSampling(MemberExploration):
    """Continuous actions ``[K, N, d]`` in [-1, 1]^d: uniform draws during the warm-up (the
    first ``learning.warmup_steps`` environment steps, before any update, as SAC's
    random start), then the actor's own sample, ``policy(obs, noise)``, whose standard
    normal ``noise[K, N, d]`` is drawn from member k's generator in the order of its
    copies (so a member acts as a run of its seed alone, and a resume repeats the draws).
    ``epsilon`` reads 1 while the actions are uniform, 0 after: no exploration rate, so it
    is neither logged nor shown."""

    explores_by_epsilon = False

    def __init__(self, seeds: list[int], action_dim: int, learning) -> None:
        super().__init__(seeds, 1.0)
        self.action_dim = action_dim
        self.warmup_steps = learning.warmup_steps

    def __call__(self, obs: np.ndarray, env_step: int, policy: Callable[..., np.ndarray]
                 ) -> np.ndarray:
        shape = (obs.shape[1], self.action_dim)
        if env_step < self.warmup_steps:
            self.epsilon = 1.0
            return np.stack([g.uniform(-1.0, 1.0, shape) for g in self.generators]
                            ).astype(np.float32)
        self.epsilon = 0.0
        noise = np.stack([g.standard_normal(shape) for g in self.generators]).astype(np.float32)
        return np.asarray(policy(obs, noise), dtype=np.float32)


def make_behaviour(seeds: list[int], problem, learning):
    """The behaviour policy of a problem's actions (module docstring)."""
    if problem.continuous:
        return ActorSampling(seeds, problem.action_dim, learning)
    return EpsilonGreedy(seeds, problem.n_actions, learning)
