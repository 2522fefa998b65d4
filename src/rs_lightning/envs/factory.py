"""Build a training environment from its config section."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np

import rs_lightning.envs  # noqa: F401  (registers the rs_lightning/ ids)
from rs_lightning.envs.action_names import action_names
from rs_lightning.envs.gym_support import (
    adapt_spaces,
    image_shape,
    observations_fit_bytes,
    register_optional_envs,
)
from rs_lightning.errors import ConfigError
from rs_lightning.types import Problem

# Environments whose dependency is an optional extra of this package: the extra to install.
_EXTRAS = {"Box2D": "box2d", "box2d": "box2d", "mujoco": "mujoco", "MuJoCo": "mujoco"}


def make_env(config, kwargs_key: str = "env.kwargs") -> gym.Env:
    """``gymnasium.make(config.id, **config.kwargs)`` adapted for the agents (one-hot Discrete
    observations, optional normalisation; see :mod:`rs_lightning.envs.gym_support`), with a
    clear error for a bad id, a missing dependency or an unsupported space. ``kwargs_key``:
    the config key an error in the arguments names."""

    kwargs = dict(config.kwargs or {})
    max_episode_steps = getattr(config, "max_episode_steps", None)
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    register_optional_envs(config.id)
    try:
        # The checker runs in the tests; a training loop does not pay for its wrapper.
        env = gym.make(config.id, disable_env_checker=True, **kwargs)
    except (gym.error.DependencyNotInstalled, ImportError) as error:
        raise ConfigError("env.id", _missing_dependency(config.id, error)) from None
    except gym.error.Error as error:
        raise ConfigError(
            "env.id", f"{config.id!r} is not a registered gymnasium id ({error})"
        ) from None
    except TypeError as error:
        raise ConfigError(kwargs_key, f"{config.id!r} rejects these arguments: {error}") from None
    except ValueError as error:  # an environment's own check of its arguments
        # "step_cost must be ...": named by its key where the message starts with one.
        name = str(error).split(" ", 1)[0]
        key = f"{kwargs_key}.{name}" if name in kwargs else kwargs_key
        raise ConfigError(key, f"{config.id!r}: {error}") from None
    return adapt_spaces(env, config.id, getattr(config, "observation_normalization", "none"))


def training_env(config):
    """The ``env`` section that the copies collecting experience are made from: ``kwargs``
    with ``training_kwargs`` merged over them (an evaluation uses ``kwargs`` alone)."""
    extra = getattr(config, "training_kwargs", None)
    if not extra:
        return config
    return dataclasses.replace(config, kwargs={**(config.kwargs or {}), **extra},
                               training_kwargs={})


def check_training_env(config) -> None:
    """ConfigError naming ``env.training_kwargs`` where the environment refuses the arguments
    the copies collecting experience are made with (``kwargs`` are checked by
    :func:`env_problem`)."""
    if getattr(config, "training_kwargs", None):
        make_env(training_env(config), "env.training_kwargs").close()


def _missing_dependency(env_id: str, error: Exception) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    extra = next((name for key, name in _EXTRAS.items() if key in text), None)
    if extra is not None:
        return (f"{env_id!r} needs the optional extra '{extra}': "
                f"pip install -e \".[{extra}]\" ({text})")
    return f"{env_id!r} cannot be made: a module it needs is missing ({text})"


def observation_size(env: gym.Env) -> int:
    return int(np.prod(env.observation_space.shape))


def env_problem(config) -> Problem:
    """What an agent knows of the configured environment (the env is made to read its
    spaces, then closed)."""
    env = make_env(config)
    try:
        continuous = isinstance(env.action_space, gym.spaces.Box)
        try:
            names = action_names(env) or ()
        except ValueError as error:  # a user's environment that misnames its actions
            raise ConfigError("env.id", f"{config.id!r}: {error}") from None
        return Problem(
            obs_dim=observation_size(env),
            n_actions=1 if continuous else int(env.action_space.n),
            gamma=config.gamma,
            return_min=config.return_min,
            return_max=config.return_max,
            obs_shape=image_shape(env),
            obs_uint8=observations_fit_bytes(env),
            action_dim=int(env.action_space.shape[0]) if continuous else 0,
            action_names=names,
        )
    finally:
        env.close()
