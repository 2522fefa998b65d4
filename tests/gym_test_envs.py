"""Small environments for the tests of tests/test_gym_envs.py, registered on import.

``gymnasium.make("tests.gym_test_envs:TinyImage-v0")`` imports this module first, so the
command line can name them too (``env.id=tests.gym_test_envs:TinyImage-v0``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import register, registry


class TinyImage(gym.Env):
    """An 8 x 8 RGB image observation and two actions: what the agents refuse without a wrapper."""

    observation_space = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((8, 8, 3), np.uint8), {}

    def step(self, action):
        return np.zeros((8, 8, 3), np.uint8), 0.0, True, False, {}


class ShiftedCounter(gym.Env):
    """Discrete(3, start=-1) actions and a Discrete(5, start=10) observation: the position."""

    observation_space = gym.spaces.Discrete(5, start=10)
    action_space = gym.spaces.Discrete(3, start=-1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 2
        return self.position + 10, {}

    def step(self, action):
        assert action in (-1, 0, 1), action
        self.position = int(np.clip(self.position + action, 0, 4))
        return self.position + 10, float(self.position), self.position == 4, False, {}


class Unbounded(gym.Env):
    """A 1-D Box observation without finite bounds."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, True, False, {}


for _id, _entry in (("TinyImage-v0", TinyImage), ("ShiftedCounter-v0", ShiftedCounter),
                    ("Unbounded-v0", Unbounded)):
    if _id not in registry:
        register(id=_id, entry_point=_entry)
