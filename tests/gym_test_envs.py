"""Small environments for the tests of tests/test_gym_envs.py, registered on import.

``gymnasium.make("tests.gym_test_envs:TinyImage-v0")`` imports this module first, so the
command line can name them too (``env.id=tests.gym_test_envs:TinyImage-v0``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import register, registry


class TinyImage(gym.Env):
    """An 8 x 8 RGB image observation (channels last, uint8) and two actions."""

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


class ImageCorridor(gym.Env):
    """A corridor seen as a [2, 3, 6] boolean image, channels first: channel 0 marks the
    agent's cell in the middle row, channel 1 the goal at the right end. Actions: 0 left, 1
    right; reward 1 on reaching the goal (terminal), 0 otherwise; 12 steps at most. A random
    walk often fails within the limit; walking right always succeeds."""

    observation_space = gym.spaces.Box(0, 1, (2, 3, 6), bool)
    action_space = gym.spaces.Discrete(2)
    reward_range = (0.0, 1.0)
    spec_max_steps = 12

    def image(self) -> np.ndarray:
        image = np.zeros((2, 3, 6), bool)
        image[0, 1, self.position] = True
        image[1, 1, 5] = True
        return image

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = int(self.np_random.integers(0, 3))
        return self.image(), {}

    def step(self, action):
        self.position = int(np.clip(self.position + (1 if action == 1 else -1), 0, 5))
        reached = self.position == 5
        return self.image(), float(reached), reached, False, {}


class Video(gym.Env):
    """A 4-D Box observation (frames of RGB images): refused."""

    observation_space = gym.spaces.Box(0, 255, (2, 4, 4, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((2, 4, 4, 3), np.uint8), {}

    def step(self, action):
        return np.zeros((2, 4, 4, 3), np.uint8), 0.0, True, False, {}


for _id, _entry, _limit in (("TinyImage-v0", TinyImage, None),
                            ("ShiftedCounter-v0", ShiftedCounter, None),
                            ("Unbounded-v0", Unbounded, None),
                            ("ImageCorridor-v0", ImageCorridor, ImageCorridor.spec_max_steps),
                            ("Video-v0", Video, None)):
    if _id not in registry:
        register(id=_id, entry_point=_entry, max_episode_steps=_limit)
