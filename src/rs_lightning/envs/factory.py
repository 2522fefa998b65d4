"""Build a training environment from its config section."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from rs_lightning.errors import ConfigError


def make_env(config) -> gym.Env:
    """``gymnasium.make(config.id, **config.kwargs)`` with a clear error for a bad id or space."""
    import rs_lightning.envs  # noqa: F401  (registers the rs_lightning/ ids)

    kwargs = dict(config.kwargs or {})
    try:
        # The checker runs in the tests; a training loop does not pay for its wrapper.
        env = gym.make(config.id, disable_env_checker=True, **kwargs)
    except gym.error.Error as error:
        raise ConfigError(
            "env.id", f"{config.id!r} is not a registered gymnasium id ({error})"
        ) from None
    except TypeError as error:
        raise ConfigError("env.kwargs", f"{config.id!r} rejects these arguments: {error}") from None
    if not isinstance(env.action_space, gym.spaces.Discrete):
        raise ConfigError(
            "env.id",
            f"{config.id!r} has action space {env.action_space}; only Discrete actions are supported",
        )
    space = env.observation_space
    if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1):
        raise ConfigError(
            "env.id",
            f"{config.id!r} has observation space {space}; supported: a 1-D Box",
        )
    return env


def observation_size(env: gym.Env) -> int:
    return int(np.prod(env.observation_space.shape))
