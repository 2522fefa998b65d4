"""Any gymnasium environment as the agents see it: a flat float observation, Discrete actions
or continuous actions in [-1, 1]^d.

:func:`adapt_spaces` wraps an environment so that every agent can use it, or refuses it with a
:class:`~rs_lightning.errors.ConfigError` saying what is supported:

- observations: a 1-D ``Box`` is fed to the networks as it is (optionally normalised, below);
  a ``Discrete`` one is one-hot encoded (:class:`OneHotObservation`); an image (a 2-D or 3-D
  ``Box``: [H, W], [H, W, C] or [C, H, W]) is flattened to float32 values
  (:class:`FlatImageObservation`), its shape kept for the convolutional torso (``network=cnn``,
  :mod:`rs_lightning.agents.networks`), which puts it back together. Anything else (boxes of
  more dimensions, tuples, dicts, multi-discrete) is refused: it needs a wrapper of the
  user's that flattens it or extracts features first.
- actions: ``Discrete`` (a ``start`` other than 0 is shifted, :class:`ShiftedActions`) for
  the value-based agents, or a 1-D ``Box`` with finite bounds for the actor-critics, mapped
  affinely onto [-1, 1]^d (gymnasium's ``RescaleAction``: a tanh-squashed actor's range);
  multi-discrete actions and unbounded boxes are refused.
- ``observation_normalization: bounds`` maps every dimension of a Box with finite bounds
  affinely onto [-1, 1] (:class:`BoundsNormalizedObservation`); unbounded dimensions pass
  through unchanged. It is stateless, so training, evaluation and resumed runs see the same
  observations.

:func:`discounted_return_bounds` is the rule docs/guides/environments.md gives for choosing the return support
[return_min, return_max] of an environment; :func:`declared_reward_bounds` and
:func:`unit_reward_scale` derive the defaults of ``env=gym`` from what gymnasium declares
(:mod:`rs_lightning.config.derived_defaults`).
"""

from __future__ import annotations

import importlib
import math

import gymnasium as gym
import numpy as np

from rs_lightning.errors import ConfigError

OBSERVATION_NORMALIZATIONS = ("none", "bounds")

# A bound beyond this is treated as unbounded (gymnasium writes "no bound" as inf or as the
# float32 maximum, as CartPole's velocities do).
_LARGEST_FINITE_BOUND = 1e6

SUPPORTED_OBSERVATIONS = (
    "supported: a 1-D Box (fed to the network as it is), a 2-D or 3-D Box (an image: "
    "network=cnn) or Discrete (one-hot encoded); other spaces need a wrapper that flattens "
    "them or extracts features"
)
SUPPORTED_ACTIONS = ("supported: Discrete actions, or a 1-D Box with finite bounds, low < high "
                     "in every dimension, of floats (continuous actions, for agent=dsac or "
                     "agent=tqc); multi-discrete actions are not")


class OneHotObservation(gym.ObservationWrapper):
    """A ``Discrete(n, start)`` observation as a float32 one-hot vector of length ``n``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        self.n = int(space.n)
        self.start = int(space.start)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.n,), np.float32)

    def observation(self, observation) -> np.ndarray:
        return one_hot(int(observation) - self.start, self.n)


def one_hot(index: int, size: int) -> np.ndarray:
    encoded = np.zeros(size, dtype=np.float32)
    encoded[index] = 1.0
    return encoded


def bounds_normalization(
    low: np.ndarray, high: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(centre, half width, bounded) of the affine map of each dimension onto [-1, 1]; a
    dimension without finite bounds (``bounded`` False) gets (0, 1), the identity."""
    low = np.asarray(low, dtype=np.float64)
    high = np.asarray(high, dtype=np.float64)
    bounded = (
        np.isfinite(low) & np.isfinite(high)
        & (np.abs(low) < _LARGEST_FINITE_BOUND) & (np.abs(high) < _LARGEST_FINITE_BOUND)
        & (high > low)
    )
    low, high = np.where(bounded, low, -1.0), np.where(bounded, high, 1.0)
    centre = np.where(bounded, (low + high) / 2, 0.0)
    half_width = np.where(bounded, (high - low) / 2, 1.0)
    return centre.astype(np.float32), half_width.astype(np.float32), bounded


class BoundsNormalizedObservation(gym.ObservationWrapper):
    """Each bounded dimension of a 1-D Box mapped affinely onto [-1, 1]; others unchanged."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        self.centre, self.half_width, bounded = bounds_normalization(space.low, space.high)
        low = np.where(bounded, -1.0, space.low).astype(np.float32)
        high = np.where(bounded, 1.0, space.high).astype(np.float32)
        self.observation_space = gym.spaces.Box(low, high, space.shape, np.float32)

    def observation(self, observation) -> np.ndarray:
        return ((np.asarray(observation, dtype=np.float32) - self.centre) / self.half_width)


class FlatImageObservation(gym.ObservationWrapper):
    """An image ``Box`` (any dtype: MinAtar's bool channels, uint8 pixels) as the float32 vector
    of its values in their own order; ``image_shape`` is the shape it had."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        self.image_shape = tuple(int(n) for n in space.shape)
        self.whole_bytes = space.dtype in (np.dtype(bool), np.dtype(np.uint8))
        self.observation_space = gym.spaces.Box(
            np.asarray(space.low, dtype=np.float32).reshape(-1),
            np.asarray(space.high, dtype=np.float32).reshape(-1), dtype=np.float32)

    def observation(self, observation) -> np.ndarray:
        return np.asarray(observation, dtype=np.float32).reshape(-1)


def image_shape(env: gym.Env) -> tuple[int, ...]:
    """The shape of the image an adapted environment's flat observations come from; () when
    they are not an image."""
    image = _image_wrapper(env)
    return () if image is None else image.image_shape


def observations_fit_bytes(env: gym.Env) -> bool:
    """Whether every observation of an adapted environment is a whole number in 0..255: a
    bool or uint8 image that no normalisation rescaled."""
    image = _image_wrapper(env)
    return image is not None and image.whole_bytes and env.observation_space == image.observation_space


def _image_wrapper(env: gym.Env) -> FlatImageObservation | None:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, FlatImageObservation):
            return env
        env = env.env
    return None


class ShiftedActions(gym.ActionWrapper):
    """``Discrete(n, start)`` actions seen by the agent as 0 .. n-1."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.start = int(env.action_space.start)
        self.action_space = gym.spaces.Discrete(int(env.action_space.n))

    def action(self, action):
        return int(action) + self.start


def has_bounded_dimension(space: gym.spaces.Box) -> bool:
    return bool(bounds_normalization(space.low, space.high)[2].any())


def adapt_spaces(env: gym.Env, env_id: str, observation_normalization: str = "none") -> gym.Env:
    """``env`` wrapped for the agents, or ConfigError naming ``env.id`` and what is supported."""
    action_space = env.action_space
    unusable = (unusable_box(action_space) if isinstance(action_space, gym.spaces.Box)
                else None if isinstance(action_space, gym.spaces.Discrete) else "")
    if unusable is not None:
        env.close()
        raise ConfigError(
            "env.id", f"{env_id!r} has action space {action_space}; {SUPPORTED_ACTIONS}"
            + (f" (here: {unusable})" if unusable else ""))
    space = env.observation_space
    if isinstance(space, gym.spaces.Box) and len(space.shape) in (2, 3):
        env = FlatImageObservation(env)
        space = env.observation_space
    if isinstance(space, gym.spaces.Discrete):
        env = OneHotObservation(env)
    elif isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        if observation_normalization == "bounds":
            if not has_bounded_dimension(space):
                env.close()
                raise ConfigError(
                    "env.observation_normalization",
                    f"bounds needs finite observation bounds, and {env_id!r} has none; use none",
                )
            env = BoundsNormalizedObservation(env)
    else:
        env.close()
        raise ConfigError(
            "env.id", f"{env_id!r} has observation space {space}; {SUPPORTED_OBSERVATIONS}")
    if isinstance(action_space, gym.spaces.Box):
        ones = np.ones(action_space.shape, dtype=np.float32)
        env = gym.wrappers.RescaleAction(env, -ones, ones)
    elif int(action_space.start) != 0:
        env = ShiftedActions(env)
    return env


def unusable_box(space: gym.spaces.Box) -> str | None:
    """Why no actor can act in the action Box ``space``, or None where one can: the
    actor-critics need a 1-D Box of floats with finite bounds, low < high in every dimension
    (rescaled onto [-1, 1])."""
    if len(space.shape) != 1:
        return f"{len(space.shape)}-D"
    if space.shape[0] == 0:
        return "no dimension: there is nothing to choose"
    if not np.issubdtype(space.dtype, np.floating):
        return f"a Box of {space.dtype} numbers, which a continuous actor cannot give"
    if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
        return "bounds that are not finite"
    fixed = np.flatnonzero(~(space.low < space.high))
    if fixed.size:
        i = int(fixed[0])
        return (f"dimension {i} spans [{space.low[i]:g}, {space.high[i]:g}]: nothing to choose "
                "there")
    return None


# Environments an optional package registers when asked to (id prefix -> the package's module,
# its function registering the ids, the extra of this package that installs it). Imported only
# when such an id is asked for.
OPTIONAL_ENV_PACKAGES = {"MinAtar/": ("minatar.gym", "register_envs", "minatar")}


def register_optional_envs(env_id: str) -> None:
    """Register the ids of the optional package ``env_id`` belongs to (MinAtar's ``MinAtar/``),
    or ConfigError naming the extra to install when it is missing."""
    for prefix, (module_name, function, extra) in OPTIONAL_ENV_PACKAGES.items():
        if not env_id.startswith(prefix) or env_id in gym.registry:
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ConfigError("env.id", f"{env_id!r} needs the optional extra '{extra}': "
                              f"pip install -e \".[{extra}]\" ({error})") from None
        getattr(module, function)()


def discounted_return_bounds(
    reward_min: float, reward_max: float, gamma: float, horizon: int | None
) -> tuple[float, float]:
    """The smallest and largest discounted return of an episode of at most ``horizon`` steps
    whose rewards lie in [reward_min, reward_max] (``horizon`` None: unbounded episodes).

    A reward r earned every step for H steps is worth r (1 - gamma^H) / (1 - gamma); the
    support of the learnt law must hold the returns the agent can meet, so this (after
    reward scaling and clipping) is the widest sensible [return_min, return_max].
    """
    if not 0.0 <= gamma < 1.0:
        raise ValueError(f"gamma must be in [0, 1), got {gamma}")
    steps_worth = 1.0 / (1.0 - gamma) if horizon is None else (1.0 - gamma**horizon) / (1.0 - gamma)
    low = min(reward_min, 0.0) * steps_worth + max(reward_min, 0.0)
    high = max(reward_max, 0.0) * steps_worth + min(reward_max, 0.0)
    return low, high


# Per-step reward bounds of gymnasium's own environments that declare none in code (their
# documentation: CartPole +1 every step, Acrobot -1 per step and 0 on reaching the goal,
# MountainCar -1 every step), for their default arguments.
KNOWN_REWARD_BOUNDS = {
    "CartPole": (1.0, 1.0),
    "Acrobot": (-1.0, 0.0),
    "MountainCar": (-1.0, -1.0),
}


def declared_reward_bounds(env: gym.Env, env_id: str, kwargs: dict | None = None
                           ) -> tuple[float, float] | None:
    """[r_min, r_max] of one step's reward as declared: the environment's own finite
    ``reward_range`` (FrozenLake sets it from its arguments), else :data:`KNOWN_REWARD_BOUNDS`
    when no ``kwargs`` are given (arguments may change the rewards); None if neither."""
    declared = getattr(env.unwrapped, "reward_range", None)
    if declared is not None and all(math.isfinite(float(r)) for r in declared):
        return float(declared[0]), float(declared[1])
    if kwargs:
        return None
    name = env_id.rsplit("/", 1)[-1].rsplit(":", 1)[-1].split("-v")[0]
    return KNOWN_REWARD_BOUNDS.get(name)


def unit_reward_scale(return_low: float, return_high: float) -> float | None:
    """The power of ten that brings the larger of |return_low|, |return_high| into (0.1, 1]
    (docs/guides/environments.md, "Choosing the return support": returns of a few units suit every agent's
    default settings); None when both are 0."""
    largest = max(abs(return_low), abs(return_high))
    if not largest > 0 or not math.isfinite(largest):
        return None
    return 10.0 ** -math.ceil(math.log10(largest) - 1e-9)


def scaled_reward_bounds(reward_min: float, reward_max: float, scale: float,
                         clip: float | None) -> tuple[float, float]:
    """The bounds of a learnt reward, r * scale then clipped to [-clip, clip] (the learner's
    rule, rs_lightning.engine.rollout.learning_reward)."""
    low, high = reward_min * scale, reward_max * scale
    if clip is not None:
        low, high = min(max(low, -clip), clip), min(max(high, -clip), clip)
    return low, high
