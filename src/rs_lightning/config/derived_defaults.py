"""Defaults derived from what gymnasium declares about an environment, as OmegaConf resolvers.

``conf/env/gym.yaml`` and ``conf/debug/quick.yaml`` write these defaults as interpolations,
so a value given on the command line replaces the interpolation and wins, and the run's
resolved ``config.yaml`` records the numbers used:

- ``${rs.reward_scale:FALLBACK}``: the power of ten bringing the largest discounted return
  the declared rewards allow into (0.1, 1] (:func:`~rs_lightning.envs.gym_support.unit_reward_scale`);
- ``${rs.return_bound:min|max,FALLBACK}``: the extremes of the discounted return of the learnt
  (scaled, clipped) rewards. The learner bootstraps through a time limit, so the values it
  learns are those of unbounded episodes: r / (1 - gamma) for a reward r earned every step;
- ``${rs.episodes_within:EPISODES,ENV_STEPS}``: EPISODES, fewer where EPISODES times the
  episode's time limit exceeds ENV_STEPS (long-episode environments in ``debug=quick``).

Where gymnasium declares no reward bounds (:func:`~rs_lightning.envs.gym_support.declared_reward_bounds`),
the fallback is used and a warning at start names the keys to set.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import gymnasium as gym
from omegaconf import OmegaConf

from rs_lightning.envs.gym_support import (
    adapt_spaces,
    declared_reward_bounds,
    discounted_return_bounds,
    register_optional_envs,
    scaled_reward_bounds,
    unit_reward_scale,
)

_warned: set[str] = set()


@functools.lru_cache(maxsize=64)
def _declarations(env_id: str, kwargs_yaml: str
                  ) -> tuple[bool, tuple[float, float] | None, int | None]:
    """(usable, per-step reward bounds, registered time limit) of ``env_id`` made with its
    kwargs; usable is False if it cannot be made or its spaces are not supported (the input
    check reports why)."""
    import rs_lightning.envs  # noqa: F401  (registers the rs_lightning/ ids)

    kwargs = OmegaConf.to_container(OmegaConf.create(kwargs_yaml)) or {}
    try:
        register_optional_envs(env_id)
        env = gym.make(env_id, disable_env_checker=True, **kwargs)
        # Spaces the agents cannot use: the input check's one line says so, no warning here.
        env = adapt_spaces(env, env_id)
    except Exception:  # noqa: BLE001  (a bad id, argument or space: the input check words it)
        return False, None, None
    try:
        limit = env.spec.max_episode_steps if env.spec is not None else None
        return True, declared_reward_bounds(env, env_id, kwargs), limit
    finally:
        env.close()


def _env_node(root) -> Any | None:
    env = root.get("env") if root is not None else None
    if env is None or OmegaConf.is_missing(env, "id"):
        return None
    return env


def _reward_bounds(env) -> tuple[float, float] | None:
    kwargs = OmegaConf.to_yaml(env.get("kwargs") or {})
    made, bounds, _ = _declarations(str(env.id), kwargs)
    if made and bounds is None and env.id not in _warned:
        _warned.add(str(env.id))
        print(f"[rs_lightning] warning: gymnasium declares no reward bounds for {env.id!r}, so "
              "the defaults of env.reward_scale, env.return_min and env.return_max are guesses "
              "(conf/env/gym.yaml); set them for this environment (docs/guides/environments.md, \"Choosing the "
              "return support\")", file=sys.stderr)
    return bounds


def reward_scale(fallback: float, *, _root_) -> float:
    env = _env_node(_root_)
    bounds = _reward_bounds(env) if env is not None else None
    if bounds is None:
        return float(fallback)
    scale = unit_reward_scale(*discounted_return_bounds(*bounds, float(env.gamma), None))
    return float(fallback) if scale is None else scale


def return_bound(side: str, fallback: float, *, _root_) -> float:
    if side not in ("min", "max"):
        raise ValueError(f"rs.return_bound: the side is min or max, got {side!r}")
    env = _env_node(_root_)
    bounds = _reward_bounds(env) if env is not None else None
    if bounds is None:
        return float(fallback)
    learnt = scaled_reward_bounds(*bounds, float(env.reward_scale), env.reward_clip)
    low, high = discounted_return_bounds(*learnt, float(env.gamma), None)
    # Rounded for a readable config.yaml; 1e-6 is far below any integration step or atom gap.
    return round(low if side == "min" else high, 6)


def episodes_within(episodes: int, env_steps: int, *, _root_) -> int:
    env = _env_node(_root_)
    if env is None:
        return int(episodes)
    limit = env.get("max_episode_steps")
    if limit is None:
        _, _, limit = _declarations(str(env.id), OmegaConf.to_yaml(env.get("kwargs") or {}))
    if not limit:
        return int(episodes)
    return int(min(episodes, max(1, env_steps // limit)))


def register_resolvers() -> None:
    """Register the ``rs.*`` resolvers (idempotent)."""
    for name, function in (("rs.reward_scale", reward_scale), ("rs.return_bound", return_bound),
                           ("rs.episodes_within", episodes_within)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)
