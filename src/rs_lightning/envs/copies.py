"""M copies of one environment stepped together: the engine's members x environment copies,
and the episodes an evaluation plays side by side.

Both kinds give the same interface (:class:`EnvCopies`): ``obs()`` of every copy, ``step``
with one action per copy (an ended episode restarts at once, unseeded, as gymnasium's
same-step autoreset does), ``reseed`` to restart chosen copies with given seeds, and a
state of tensors, numbers and strings for checkpoints (never pickled objects: a checkpoint
from elsewhere must not be able to run code when it is loaded).

- :class:`~rs_lightning.envs.grid_world_copies.GridWorldCopies`: the paper's grid worlds as
  tensors (one table lookup for all copies);
- :class:`GymCopies`: any other environment through gymnasium's vector API, one
  ``SyncVectorEnv`` per group of copies (a member's copies), so a group's state can be
  taken alone.

Copy j is seeded ``seeds[j]`` and draws only from its own generator, so it produces exactly
the transitions its environment would produce stepped alone.

A resume is exact wherever the environment's state is plain data
(:mod:`rs_lightning.envs.plain_state`: the grid worlds, cliff walking, FrozenLake, CartPole
and the other classic-control environments). An environment holding anything else (Box2D's
LunarLander holds a physics world) cannot be stored that way: its checkpoint holds no
environment state, and a resumed run restarts the episodes that were in progress, each copy
reset with a seed drawn from its own seed and the step count (so a resume is reproducible,
though not the same as the uninterrupted run); it says so on stderr.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from rs_lightning.envs.factory import make_env
from rs_lightning.envs.plain_state import UncapturableState, capture_state, restore_state
from rs_lightning.errors import ConfigError, EnvironmentFault
from rs_lightning.envs.grid_world_copies import (CopiesStep, GridWorldCopies, refuse_device_state,
                                                 unwrapped_grid_world)
from rs_lightning.envs.device_worlds import device_copies


class EnvCopies(Protocol):
    def __len__(self) -> int: ...

    def obs(self) -> np.ndarray:
        """The copies' current observations ``[M, ...]`` (float32)."""

    def step(self, actions: np.ndarray) -> CopiesStep:
        """One step of every copy; ``next_obs`` is the state each step reached (before the
        restart of an ended episode)."""

    def reseed(self, indices: list[int], seeds: list[int]) -> None:
        """Start a new episode in the given copies, each reset with its seed."""

    def state_dict(self, indices: list[int] | None = None) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Restore a state; True if the episodes in progress were restarted instead
        (an environment whose state could not be stored)."""


def _vector_env(env_config, copies: int) -> gym.vector.SyncVectorEnv:
    make_copy = functools.partial(make_env, env_config)
    return gym.vector.SyncVectorEnv([make_copy] * copies, autoreset_mode=AutoresetMode.SAME_STEP)


def _risk_outcomes(info: dict, ended: np.ndarray) -> np.ndarray:
    """R_s of each ended episode from a vector step's ``final_info`` (NaN where none)."""
    outcomes = np.full(len(ended), np.nan)
    final = info.get("final_info") or {}
    if "risk_outcome" in final:
        present = final.get("_risk_outcome", np.ones(len(ended), bool))
        where = ended & present
        outcomes[where] = np.asarray(final["risk_outcome"], dtype=np.float64)[where]
    return outcomes


# The largest reward size accepted: the learner keeps returns in float32, where the risk
# measures square them (mean-variance) and sum them; beyond this they overflow to inf.
MAX_ABS_REWARD = 1e15


def failed_method(error: BaseException) -> str | None:
    """``"reset()"`` or ``"step()"``: the environment's method ``error`` was raised in (the
    vector env's step() resets an ended copy itself), None where no environment's was."""
    frame = error.__traceback__
    while frame is not None:
        code = frame.tb_frame.f_code
        if (code.co_name in ("reset", "step")
                and isinstance(frame.tb_frame.f_locals.get("self"), gym.Env)):
            return f"{code.co_name}()"
        frame = frame.tb_next
    return None


class GymCopies:
    """Gymnasium environments in groups of ``SyncVectorEnv`` (same-step autoreset).

    What an environment returns is checked, so that a broken one is named as the cause in
    one line (:class:`~rs_lightning.errors.EnvironmentFault`) rather than surfacing as a
    NaN loss or a traceback inside gymnasium."""

    def __init__(self, env_config, seeds: list[int], groups: int = 1) -> None:
        if len(seeds) % groups:
            raise ValueError(f"{len(seeds)} copies do not split into {groups} groups")
        self.env_id = env_config.id
        self.seeds = [int(s) for s in seeds]
        self.steps = 0  # steps of the copies so far: with the seeds, a restart's seeds
        self.group_size = len(seeds) // groups
        self.groups = [_vector_env(env_config, self.group_size) for _ in range(groups)]
        observations = []
        for g, env in enumerate(self.groups):
            chunk = self.seeds[g * self.group_size:(g + 1) * self.group_size]
            observations.append(self._call(env.reset, "reset()", seed=chunk)[0])
        self._obs = self._checked_obs(np.concatenate(observations), "reset()")

    def __len__(self) -> int:
        return len(self.groups) * self.group_size

    def obs(self) -> np.ndarray:
        return self._obs

    def step(self, actions: np.ndarray) -> CopiesStep:
        parts = []
        actions = np.asarray(actions)
        actions = actions.reshape(len(self.groups), self.group_size, *actions.shape[1:])
        for env, group_actions in zip(self.groups, actions):
            result = self._call(env.step, "step()", group_actions)
            next_obs, reward, terminated, truncated, info = result
            self._check_reward(reward)
            ended = np.logical_or(terminated, truncated)
            reached = np.array(next_obs, dtype=np.float32, copy=True)
            for i in np.flatnonzero(ended):
                # Same-step autoreset: next_obs of an ended copy is already the next
                # episode's first observation; the state the step reached is final_obs.
                final = np.asarray(info["final_obs"][i], dtype=np.float32)
                if final.shape != reached[i].shape:
                    raise EnvironmentFault(
                        f"{self.env_id}: step() changed the observation shape from "
                        f"{list(reached[i].shape)} to {list(final.shape)}")
                reached[i] = final
            parts.append((next_obs, reached, reward, terminated, ended, _risk_outcomes(info, ended)))
        current, reached, reward, terminated, ended, outcome = (np.concatenate(p) for p in zip(*parts))
        self._checked_obs(reached, "step()")
        self._obs = self._checked_obs(current, "step()")
        self.steps += 1
        return CopiesStep(reached, reward.astype(np.float64), terminated.astype(bool), ended,
                          outcome)

    def _call(self, method, name: str, *args, **kwargs):
        """An environment call; what it raises, or a result that is not gymnasium's
        five-tuple of step() (the old API's four), names the environment."""
        try:
            result = method(*args, **kwargs)
        except Exception as error:  # the environment's own code failed: say whose
            first = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
            if isinstance(error, ValueError) and "expected 5, got 4" in first:
                first += " (the old gym API's step() returns 4 values; gymnasium's 5)"
            name = failed_method(error) or name
            raise EnvironmentFault(f"{self.env_id}: {name} raised {type(error).__name__}"
                                   + (f": {first}" if first else "")) from error
        if name == "step()" and not (isinstance(result, tuple) and len(result) == 5):
            size = len(result) if isinstance(result, tuple) else type(result).__name__
            raise EnvironmentFault(f"{self.env_id}: step() returned {size} values, not "
                                   "gymnasium's 5 (obs, reward, terminated, truncated, info; "
                                   "the old gym API returned 4)")
        return result

    def _checked_obs(self, obs, name: str) -> np.ndarray:
        try:
            obs = np.asarray(obs, dtype=np.float32)
        except (TypeError, ValueError) as error:
            raise EnvironmentFault(f"{self.env_id}: {name} returned observations that are not "
                                   f"one array ({error})") from None
        expected = getattr(self, "_obs", None)
        if expected is not None and obs.shape != expected.shape:
            raise EnvironmentFault(f"{self.env_id}: {name} changed the observation shape from "
                                   f"{list(expected.shape[1:])} to {list(obs.shape[1:])}")
        if not np.isfinite(obs).all():
            bad = obs[~np.isfinite(obs)].flat[0]
            raise EnvironmentFault(f"{self.env_id}: {name} returned a non-finite observation "
                                   f"({bad}) after {self.steps} steps of the copies")
        return obs

    def _check_reward(self, reward) -> None:
        reward = np.asarray(reward, dtype=np.float64)
        bad = ~np.isfinite(reward) | (np.abs(reward) > MAX_ABS_REWARD)
        if bad.any():
            raise EnvironmentFault(f"{self.env_id}: step() returned the reward "
                                   f"{reward[bad].flat[0]} after {self.steps} steps of the "
                                   f"copies; rewards must be finite and at most "
                                   f"{MAX_ABS_REWARD:g} in size (rescale them)")

    def reseed(self, indices: list[int], seeds: list[int]) -> None:
        size = self.group_size
        for g, env in enumerate(self.groups):
            mask = np.zeros(size, dtype=bool)
            group_seeds: list[int | None] = [None] * size
            for j, seed in zip(indices, seeds):
                if j // size == g:
                    mask[j % size] = True
                    group_seeds[j % size] = int(seed)
            if mask.any():
                obs, _ = self._call(env.reset, "reset()", seed=group_seeds,
                                    options={"reset_mask": mask})
                rows = np.flatnonzero(mask) + g * size
                self._obs[rows] = np.asarray(obs, dtype=np.float32)[mask]

    def state_dict(self, indices: list[int] | None = None) -> dict[str, Any]:
        """Whole groups only (``indices`` must cover whole groups): every copy's state as
        plain data, or, for an environment that holds something else, none (a resume
        restarts its episodes; the reason is kept)."""
        size = self.group_size
        chosen = list(range(len(self))) if indices is None else list(indices)
        groups = sorted({j // size for j in chosen})
        if len(chosen) != len(groups) * size:
            raise ValueError("GymCopies.state_dict takes whole groups of copies")
        state: dict[str, Any] = {"steps": self.steps, "obs": torch.from_numpy(self._obs[chosen])}
        try:
            state["envs"] = [capture_state(copy) for g in groups for copy in self.groups[g].envs]
        except UncapturableState as reason:
            state["uncapturable"] = str(reason)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        refuse_device_state(state)
        if "envs" not in state and "uncapturable" not in state:
            raise ConfigError("ckpt_path", "the checkpoint's environment state is in a form this "
                              "version does not load (earlier versions pickled it); start afresh")
        self.steps = int(state["steps"])
        if "uncapturable" in state:
            # Episodes start afresh from seeds drawn from each copy's seed and the step count.
            restart_seeds = [int(np.random.SeedSequence([seed, self.steps]).generate_state(1)[0])
                             for seed in self.seeds]
            self.reseed(list(range(len(self))), restart_seeds)
            print(f"[rs_lightning] resume of {self.env_id} is not exact: its state cannot be "
                  f"stored as data ({state['uncapturable']}); the episodes in progress restart",
                  file=sys.stderr)
            return True
        copies = [copy for env in self.groups for copy in env.envs]
        if len(state["envs"]) != len(copies):
            raise ConfigError("ckpt_path", f"the checkpoint holds {len(state['envs'])} copies of "
                              f"the environment, this run {len(copies)}")
        try:
            for copy, record in zip(copies, state["envs"]):
                restore_state(copy, record)
            self._obs = state["obs"].numpy().copy()
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as error:
            # A record of another environment, or one edited by hand.
            raise ConfigError("ckpt_path", f"its {self.env_id} state does not fit this "
                              f"run's environment ({error})") from None
        return False


def make_copies(env_config, seeds: list[int], groups: int = 1,
                device: torch.device | str = "cpu") -> EnvCopies:
    """``len(seeds)`` copies of the configured environment, copy j reset with ``seeds[j]``
    (in ``groups`` equal groups): with ``env.backend: torch`` the package's worlds as
    tensors on ``device`` (:mod:`rs_lightning.envs.device_worlds`); else grid worlds as
    NumPy tables, anything else through gymnasium's vector API."""
    first = make_env(env_config)
    if getattr(env_config, "backend", "gymnasium") == "torch":
        try:
            return device_copies(first, seeds, device)
        finally:
            first.close()
    if unwrapped_grid_world(first) is not None:
        envs = [first] + [make_env(env_config) for _ in seeds[1:]]
        for env, seed in zip(envs, seeds):
            env.reset(seed=int(seed))
        return GridWorldCopies(envs)
    first.close()
    return GymCopies(env_config, seeds, groups)
