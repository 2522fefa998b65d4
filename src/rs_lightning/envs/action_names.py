"""The names of an environment's discrete actions, for the outputs a person reads
(``policy.json``, the Python API, the figures).

An environment declares them as an ``action_names`` attribute (a sequence of strings, one
per action: the project's worlds do, and so can a user's own); gymnasium's own worlds, which
declare none, are named here from their documentation. An environment with neither, or with
continuous actions, has no names: its actions stay numbers.
"""

from __future__ import annotations

from typing import Optional

import gymnasium as gym

# gymnasium's worlds by their class (a subclass inherits the names of the class it extends).
GYMNASIUM_ACTION_NAMES: dict[str, tuple[str, ...]] = {
    "gymnasium.envs.classic_control.cartpole.CartPoleEnv": ("left", "right"),
    "gymnasium.envs.classic_control.mountain_car.MountainCarEnv": (
        "push left", "no push", "push right"),
    "gymnasium.envs.classic_control.acrobot.AcrobotEnv": ("torque -1", "torque 0", "torque +1"),
    "gymnasium.envs.box2d.lunar_lander.LunarLander": (
        "nothing", "left engine", "main engine", "right engine"),
    "gymnasium.envs.toy_text.cliffwalking.CliffWalkingEnv": ("up", "right", "down", "left"),
    "gymnasium.envs.toy_text.frozen_lake.FrozenLakeEnv": ("left", "down", "right", "up"),
    "gymnasium.envs.toy_text.taxi.TaxiEnv": (
        "south", "north", "east", "west", "pickup", "dropoff"),
    "gymnasium.envs.toy_text.blackjack.BlackjackEnv": ("stick", "hit"),
}


def action_names(env: gym.Env) -> Optional[tuple[str, ...]]:
    """The name of each discrete action of ``env`` (any wrapper of it), or None: continuous
    actions, or an environment that names none. ValueError in one line where an environment
    declares names that do not match its actions."""
    space = env.action_space
    if not isinstance(space, gym.spaces.Discrete):
        return None
    inner = env.unwrapped
    declared = getattr(inner, "action_names", None)
    if declared is None and callable(getattr(inner, "get_action_meanings", None)):
        declared = [meaning.lower() for meaning in inner.get_action_meanings()]  # Atari
    if declared is None:
        declared = next((GYMNASIUM_ACTION_NAMES[f"{cls.__module__}.{cls.__qualname__}"]
                         for cls in type(inner).__mro__
                         if f"{cls.__module__}.{cls.__qualname__}" in GYMNASIUM_ACTION_NAMES),
                        None)
    if declared is None:
        return None
    names = tuple(declared)
    if len(names) != int(space.n) or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"{type(inner).__name__}.action_names must be {int(space.n)} "
                         f"non-empty strings, one per action, got {names!r}")
    return names


__all__ = ["GYMNASIUM_ACTION_NAMES", "action_names"]
