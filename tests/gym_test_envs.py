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


class UnboundedActions(Unbounded):
    """Continuous actions without finite bounds (no squashed actor can cover them)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)


class OddActions(Unbounded):
    """A continuous action Box no actor can act in: ``box`` empty (shape (0,)), fixed (low ==
    high in one dimension) or integer (an int64 Box)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def __init__(self, box: str = "empty"):
        self.action_space = {
            "empty": gym.spaces.Box(-1.0, 1.0, (0,), np.float32),
            "fixed": gym.spaces.Box(np.array([-1.0, 0.5], np.float32),
                                    np.array([1.0, 0.5], np.float32)),
            "integer": gym.spaces.Box(-3, 3, (2,), np.int64),
        }[box]

    def step(self, action):
        return np.zeros(2, np.float32), float(np.sum(action)), True, False, {}


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


class Faulty(gym.Env):
    """Two steps an episode, well behaved until its ``after``-th step, then the ``fault``:
    nan_reward, inf_reward, huge_reward (1e308), nan_obs, shape (3 values instead of 2),
    four_tuple (the old gym API), raise (an exception inside step()) or raise_in_reset (an
    exception inside reset(), once it has been called ``after`` times)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, fault: str = "none", after: int = 30):
        self.fault, self.after, self.count = fault, after, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.resets = getattr(self, "resets", 0) + 1
        if self.fault == "raise_in_reset" and self.resets >= self.after:
            raise RuntimeError("the simulator could not restart")
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.count += 1
        self.t += 1
        obs, reward, done = np.full(2, 0.5, np.float32), 1.0, self.t >= 2
        if self.count < self.after or self.fault in ("none", "raise_in_reset"):
            return obs, reward, done, False, {}
        if self.fault == "raise":
            raise RuntimeError("the simulator lost its connection")
        if self.fault == "four_tuple":
            return obs, reward, done, {}
        if self.fault == "shape":
            return np.zeros(3, np.float32), reward, done, False, {}
        if self.fault == "nan_obs":
            obs[0] = np.nan
        reward = {"nan_reward": np.nan, "inf_reward": np.inf, "huge_reward": 1e308}.get(
            self.fault, reward)
        return obs, reward, done, False, {}


class NeverEnds(gym.Env):
    """No step ends an episode and no time limit is registered (a continuing task)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.full(2, 0.5 * (action - 0.5), np.float32), 0.0, False, False, {}


for _id, _entry, _limit in (("TinyImage-v0", TinyImage, None),
                            ("Faulty-v0", Faulty, None),
                            ("NeverEnds-v0", NeverEnds, None),
                            ("ShiftedCounter-v0", ShiftedCounter, None),
                            ("Unbounded-v0", Unbounded, None),
                            ("UnboundedActions-v0", UnboundedActions, None),
                            ("OddActions-v0", OddActions, None),
                            ("ImageCorridor-v0", ImageCorridor, ImageCorridor.spec_max_steps),
                            ("Video-v0", Video, None)):
    if _id not in registry:
        register(id=_id, entry_point=_entry, max_episode_steps=_limit)
