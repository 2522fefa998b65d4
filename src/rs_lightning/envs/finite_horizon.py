"""The episode mechanics shared by the finite-horizon tabular worlds (trading, the American
put): a gymnasium environment whose model is published as gymnasium's toy-text worlds do
(``P[s][a]`` a list of ``(probability, next_state, reward, terminated)``,
``initial_state_distrib`` the start law), stepped by sampling that model, so the episodes
follow the model the exact references read, by construction."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.toy_text.utils import categorical_sample


def sample_outcome(outcomes: list[tuple[float, int, float, bool]],
                   np_random: np.random.Generator) -> int:
    """The index of an outcome of ``P[s][a]`` drawn with one uniform of ``np_random``: gymnasium's
    ``categorical_sample`` (the first outcome whose cumulative probability exceeds the uniform,
    the first if none does; the sums run in order, as NumPy's ``cumsum`` adds), to the bit, at a
    third of its cost on a list of a few outcomes (no arrays made for each step)."""
    uniform = np_random.random()
    cumulative = 0.0
    for i, outcome in enumerate(outcomes):
        cumulative += outcome[0]
        if cumulative > uniform:
            return i
    return 0


class PublishedModelEnv(gym.Env):
    """Reset and step by the published model. A subclass numbers its states
    (``decode``), gives each state and action its outcomes (``_outcomes``), publishes them
    (:meth:`_publish`) and says what an episode's total reward means for the evaluation's
    R_s (:meth:`risk_outcome`)."""

    P: dict[int, dict[int, list[tuple[float, int, float, bool]]]]
    initial_state_distrib: np.ndarray

    # The model of each setting, shared by its copies: built for each of an evaluation's
    # 1,000 copies it took several seconds (read-only once made).
    _models: dict[tuple, dict[int, dict[int, list[tuple[float, int, float, bool]]]]] = {}

    def _publish(self, n_states: int, n_actions: int, start: int,
                 render_mode: str | None, settings: tuple | None = None) -> None:
        """The spaces, the model ``P`` of every state and action (a subclass's
        ``_outcomes(*decode(state), action)``) and a start law on ``start``: what a
        subclass's constructor ends with. ``settings``: the constructor's arguments that
        decide the model, so that copies with equal settings share it (None: a model of
        its own)."""
        self.observation_space = gym.spaces.Discrete(n_states)
        self.action_space = gym.spaces.Discrete(n_actions)
        key = (type(self), n_states, n_actions, settings)
        model = self._models.get(key) if settings is not None else None
        if model is None:
            model = {s: {a: self._outcomes(*self.decode(s), a) for a in range(n_actions)}
                     for s in range(n_states)}
            if settings is not None:
                self._models[key] = model
        self.P = model
        self.initial_state_distrib = np.zeros(n_states)
        self.initial_state_distrib[start] = 1.0
        self.render_mode = render_mode
        self.s = start
        self._total = 0.0

    def risk_outcome(self, total):
        """``info["risk_outcome"]`` on an episode's last step, from its total reward: a
        number, or a tensor of totals (the device copies, :mod:`rs_lightning.envs.
        device_worlds`, apply the same rule), so arithmetic rather than ``if``."""
        raise NotImplementedError

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.s = int(categorical_sample(self.initial_state_distrib, self.np_random))
        self._total = 0.0
        return self.s, {"prob": 1.0}

    def step(self, action) -> tuple[int, float, bool, bool, dict[str, Any]]:
        transitions = self.P[self.s][int(action)]
        i = sample_outcome(transitions, self.np_random)
        probability, state, reward, terminated = transitions[i]
        self.s = int(state)
        self._total += reward
        outcome = self.risk_outcome(self._total) if terminated else 0.0
        return self.s, float(reward), terminated, False, {"prob": probability,
                                                         "risk_outcome": outcome}


__all__ = ["PublishedModelEnv"]
