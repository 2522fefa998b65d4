"""Copies of one grid world stepped together with tensor operations.

:class:`GridWorldCopies` steps M grid worlds (the engine's members x environment copies, or
an evaluation's episodes) at once: one table lookup finds
every copy's branch, next cell, reward mean and termination, and resets are a masked
write. Each copy draws its random numbers from the generator of its own gymnasium
environment, in the order :meth:`GridWorld.step` draws them (a uniform for the branch, then
a normal for the reward), so copy k produces exactly the transitions its environment would
produce stepped alone: a member stays the run of its seed alone.

The copies hold the state (cell, step count, sticky flag) while they run;
:meth:`GridWorldCopies.state_dict` gives it as plain tensors and the generators' states
(numbers), and :meth:`GridWorldCopies.write_back` puts it into the environment objects.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import gymnasium as gym
import numpy as np
import torch

from rs_lightning.errors import ConfigError
from rs_lightning.envs.grid_worlds import CELLS, GRID_SIZE, REWARD_STD, START, GridWorld


class CopiesStep(NamedTuple):
    """One step of M copies (NumPy arrays: a few copies step faster without torch's per-call
    cost); ``next_obs`` is the state the step reached (before a reset)."""

    next_obs: np.ndarray  # [M, ...] float32
    reward: np.ndarray  # [M] float64, the environment's reward
    terminated: np.ndarray  # [M] bool
    ended: np.ndarray  # [M] bool: terminated or truncated; the copy starts a new episode
    risk_outcome: np.ndarray  # [M] float64: R_s of an ended episode (NaN or meaningless elsewhere)


# Up to this many copies step one by one in Python (:meth:`GridWorldCopies._step_few`): the
# two routes cost about the same here on a CPU (measured: benchmarks/RESULTS.md).
_FEW = 16


def _cell_index(cell) -> int:
    return int(cell[0]) * GRID_SIZE + int(cell[1])


def refuse_device_state(state: dict) -> None:
    """ConfigError naming ``env.backend`` for a checkpoint of copies that stepped on a device
    (:mod:`rs_lightning.envs.device_worlds`), which gymnasium's copies cannot continue."""
    if state.get("backend") == "torch":
        raise ConfigError("env.backend", "the checkpoint's environment copies stepped with "
                          "torch; resume with the run's own env.backend")


def unwrapped_grid_world(env: gym.Env) -> Optional[GridWorld]:
    """The grid world under ``env`` if nothing but order enforcing wraps it (a wrapper that
    changes observations or rewards rules tensor stepping out), else None."""
    inner = env
    while isinstance(inner, gym.Wrapper):
        if not isinstance(inner, gym.wrappers.OrderEnforcing):
            return None
        inner = inner.env
    return inner if isinstance(inner, GridWorld) else None


class GridWorldCopies:
    """K grid worlds of one class and settings, stepped as tensors (module docstring).

    Args:
        envs: the K environments (gymnasium objects, reset, not mid-step); their state and
            generators are taken over until :meth:`write_back`.
    """

    def __init__(self, envs: list[gym.Env]) -> None:
        worlds = [unwrapped_grid_world(env) for env in envs]
        if not worlds or any(world is None for world in worlds):
            raise ValueError("GridWorldCopies steps unwrapped rs_lightning grid worlds only")
        first = worlds[0]
        settings = (type(first), first.max_steps, first.timeout_is_terminal, first._sampler)
        if any((type(w), w.max_steps, w.timeout_is_terminal, w._sampler) != settings
               for w in worlds):
            raise ValueError("GridWorldCopies: the copies must be one environment with one set "
                             "of arguments")
        if any(w.cell is None for w in worlds):
            raise ValueError("GridWorldCopies: reset() every environment first")
        self.worlds = worlds
        self.generators = [w.np_random for w in worlds]
        self.max_steps = first.max_steps
        self.timeout_is_terminal = first.timeout_is_terminal
        self._compile(first)
        self.cell = np.array([_cell_index(w.cell) for w in worlds], dtype=np.int64)
        self.steps = np.array([w.steps for w in worlds], dtype=np.int64)
        self.flag = np.array([w.shortcut_flag for w in worlds], dtype=bool)

    def _compile(self, world: GridWorld) -> None:
        """The world's sampler as padded tables ``[keys, branches]`` (see
        :meth:`GridWorld._compile`: key ((x * 3 + y) * 4 + action) * 2 + flag)."""
        sampler = world._sampler
        width = max(len(entries) for entries in sampler)
        shape = (len(sampler), width)
        self.cumulative = np.full(shape, np.inf)
        self.next_cell = np.zeros(shape, dtype=np.int64)
        self.mean = np.zeros(shape)
        self.terminal = np.zeros(shape, dtype=bool)
        self.new_flag = np.zeros(shape, dtype=bool)
        for key, entries in enumerate(sampler):
            for j, (cumulative, cell, mean, terminal, flag) in enumerate(entries):
                self.cumulative[key, j] = cumulative
                self.next_cell[key, j] = _cell_index(cell)
                self.mean[key, j] = mean
                self.terminal[key, j] = terminal
                self.new_flag[key, j] = flag
        self.observations = np.zeros((len(CELLS), 2), dtype=np.float32)
        outcome = np.zeros((len(CELLS), 2, 2))  # [cell, terminal, flag]
        for cell in CELLS:
            index = _cell_index(cell)
            self.observations[index] = cell
            for terminal in (False, True):
                for flag in (False, True):
                    outcome[index, int(terminal), int(flag)] = world.risk_outcome(cell, terminal, flag)
        self.outcome = outcome
        self.start = _cell_index(START)
        # The same tables as Python lists for _step_few: a list lookup costs a fraction of
        # a NumPy scalar's. branches[key] holds (cumulative, next cell, mean, terminal, flag)
        # of each branch, the inf padding included.
        self._branches = [
            list(zip(*(table[key].tolist() for table in
                       (self.cumulative, self.next_cell, self.mean, self.terminal, self.new_flag))))
            for key in range(shape[0])
        ]
        self._outcomes = outcome.tolist()  # [cell][terminal][flag]

    def __len__(self) -> int:
        return len(self.worlds)

    def obs(self) -> np.ndarray:
        """The copies' current observations ``[M, 2]``."""
        return self._observations_of(self.cell)

    def _observations_of(self, cells) -> np.ndarray:
        """The observations of the cell indices ``cells`` -> ``[M, 2]`` (a new array). One
        cell (most runs): a sliced row, at a sixth of an indexed gather's cost."""
        if len(cells) == 1:
            cell = int(cells[0])
            return self.observations[cell:cell + 1].copy()
        return self.observations[cells]

    def step(self, actions) -> CopiesStep:
        """Take ``actions[M]`` in every copy; an ended episode restarts at the start cell."""
        if len(self.worlds) <= _FEW:
            return self._step_few(actions)
        draws = np.array([(rng.random(), rng.standard_normal()) for rng in self.generators])
        key = (self.cell * 4 + np.asarray(actions)) * 2 + self.flag  # [M]
        # The first branch whose cumulative probability exceeds the uniform.
        branch = (self.cumulative[key] <= draws[:, :1]).sum(1)
        cell = self.next_cell[key, branch]
        terminal = self.terminal[key, branch]
        flag = self.new_flag[key, branch]
        reward = self.mean[key, branch] + REWARD_STD * draws[:, 1]
        steps = self.steps + 1
        timeout = steps >= self.max_steps
        ended = terminal | timeout
        outcome = self.outcome[cell, terminal.astype(np.int64), flag.astype(np.int64)]
        terminated = terminal | (timeout & self.timeout_is_terminal)
        next_obs = self.observations[cell]
        self.cell = np.where(ended, self.start, cell)
        self.steps = np.where(ended, 0, steps)
        self.flag = flag & ~ended
        return CopiesStep(next_obs, reward, terminated, ended, outcome)

    def _step_few(self, actions) -> CopiesStep:
        """:meth:`step` for a few copies, copy by copy in Python: below ~16 copies NumPy's
        per-call cost exceeds the arithmetic (the same tables, draws and results)."""
        cells, rewards, terminated, ended, outcomes = [], [], [], [], []
        for j, (rng, action) in enumerate(zip(self.generators, np.asarray(actions).tolist())):
            cell, flag, steps = int(self.cell[j]), bool(self.flag[j]), int(self.steps[j]) + 1
            u = rng.random()
            # The first branch whose cumulative probability exceeds the uniform.
            for cumulative, next_cell, mean, terminal, new_flag in self._branches[
                    (cell * 4 + action) * 2 + flag]:
                if u < cumulative:
                    break
            timeout = steps >= self.max_steps
            end = terminal or timeout
            cells.append(next_cell)
            rewards.append(mean + REWARD_STD * rng.standard_normal())
            terminated.append(terminal or (timeout and self.timeout_is_terminal))
            ended.append(end)
            outcomes.append(self._outcomes[next_cell][terminal][new_flag])
            self.cell[j] = self.start if end else next_cell
            self.steps[j] = 0 if end else steps
            self.flag[j] = new_flag and not end
        return CopiesStep(self._observations_of(cells), np.array(rewards), np.array(terminated),
                          np.array(ended), np.array(outcomes))

    def reseed(self, indices: list[int], seeds: list[int]) -> None:
        """Start a new episode in copies ``indices``, each reset with its seed (its generator
        is then a new one, as ``env.reset(seed=...)`` makes it)."""
        for j, seed in zip(indices, seeds):
            world = self.worlds[j]
            world.reset(seed=int(seed))
            self.generators[j] = world.np_random
        index = np.asarray(indices, dtype=np.int64)
        self.cell[index] = self.start
        self.steps[index] = 0
        self.flag[index] = False

    def state_dict(self, indices: list[int] | None = None) -> dict:
        """The copies' cells, step counts, flags and generator states (tensors and numbers);
        ``indices`` selects some copies."""
        chosen = list(range(len(self.worlds))) if indices is None else list(indices)
        return {  # tensors: a checkpoint loads them with weights_only
            "cell": torch.from_numpy(self.cell[chosen]),
            "steps": torch.from_numpy(self.steps[chosen]),
            "flag": torch.from_numpy(self.flag[chosen]),
            "generators": [self.generators[j].bit_generator.state for j in chosen],
        }

    def load_state_dict(self, state: dict) -> bool:
        refuse_device_state(state)
        if len(state["generators"]) != len(self.worlds):
            raise ValueError(f"the checkpoint holds {len(state['generators'])} environment "
                             f"copies, this run {len(self.worlds)}")
        self.cell = state["cell"].numpy().copy()
        self.steps = state["steps"].numpy().copy()
        self.flag = state["flag"].numpy().copy()
        for generator, generator_state in zip(self.generators, state["generators"]):
            generator.bit_generator.state = generator_state
        return False  # restored exactly

    def write_back(self) -> None:
        """Put the copies' state into their environment objects (which share the generators
        already), as if each had been stepped alone."""
        for world, cell, steps, flag in zip(
            self.worlds, self.cell.tolist(), self.steps.tolist(), self.flag.tolist()
        ):
            world._cell = CELLS[cell]
            world._steps = steps
            world._flag = bool(flag)
            world._done = False
