"""Experience replay memory: a fixed-capacity ring of transitions for K members.

Storage is allocated once, ``[K, capacity, ...]`` per field, member k's memory at index k.
The members step together, so their memories share one write position; each member samples
with its own random generator, so member k draws exactly the indices a memory of its seed
alone draws, and sampling repeats from a seed and survives a checkpoint round trip.

:class:`NStepReturns` turns environment copies' one-step transitions into n-step ones on
their way in; :func:`update_ratio` reads the updates made per stored transition.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from rs_lightning.types import Transitions

FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "discount")


def update_ratio(updates_per_step: float) -> Fraction:
    """Gradient updates per stored transition (``learning.updates_per_step``, the replay
    ratio) as the fraction it stands for: the nearest with a denominator up to 10^6
    (0.125 -> 1/8, 0.3333333333333333 -> 1/3), so that a schedule of updates is exact."""
    return Fraction(repr(float(updates_per_step))).limit_denominator(1_000_000)


class ReplayMemory:
    """Uniform-sampling replay memories of ``members`` members, ``capacity`` transitions each.

    Args:
        capacity: transitions kept per member (the oldest are overwritten).
        obs_shape: the shape of one observation.
        seeds: one sampling seed per member (their number is the number of members).
        obs_dtype: how observations are held (``torch.uint8`` for whole numbers in 0..255, a
            quarter of float32's memory); samples give them as float32 whatever it is.
        action_shape: the shape of one action: ``()`` for a discrete action (int64),
            ``(d,)`` for a continuous one (float32).
    """

    def __init__(self, capacity: int, obs_shape: Sequence[int] | int, seeds: Sequence[int],
                 obs_dtype: torch.dtype = torch.float32,
                 action_shape: Sequence[int] = ()) -> None:
        if capacity <= 0:
            raise ValueError(f"replay capacity must be positive, got {capacity}")
        members = len(seeds)
        shape = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
        self.capacity = capacity
        self.members = members
        self.obs = torch.zeros(members, capacity, *shape, dtype=obs_dtype)
        self.next_obs = torch.zeros(members, capacity, *shape, dtype=obs_dtype)
        self.compact = obs_dtype != torch.float32
        self.action = torch.zeros(members, capacity, *action_shape,
                                  dtype=torch.float32 if action_shape else torch.long)
        self.reward = torch.zeros(members, capacity)
        self.terminated = torch.zeros(members, capacity)
        self.discount = torch.zeros(members, capacity)
        self.size = 0
        self.position = 0
        self.generators = [torch.Generator().manual_seed(int(seed)) for seed in seeds]
        self._offsets = torch.zeros(0, dtype=torch.long)  # _member_offsets
        self._arrays = {name: getattr(self, name).numpy() for name in FIELDS}  # shared memory
        # Every member's rows one after the other, [K * capacity, ...] (views: no copy).
        self._rows = [getattr(self, name).view(members * capacity, *getattr(self, name).shape[2:])
                      for name in FIELDS]

    def __len__(self) -> int:
        return self.size

    def add(self, obs, action, reward, next_obs, terminated, discount) -> None:
        """Store N transitions of every member: fields ``[K, N, ...]`` (NumPy arrays or
        tensors; copy i of member k at row i of k), written in the order of i, one write per
        field."""
        n = action.shape[1]
        if n > self.capacity:
            raise ValueError(f"{n} transitions at once do not fit a replay capacity of "
                             f"{self.capacity}")
        index = (self.position + np.arange(n)) % self.capacity if n > 1 else self.position
        for name, value in zip(FIELDS, (obs, action, reward, next_obs, terminated, discount)):
            # Through NumPy views of the storage: a small write costs a fraction of torch's.
            self._arrays[name][:, index] = np.asarray(value if n > 1 else value[:, 0])
        self.position = (self.position + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int) -> Transitions:
        """``batch_size`` transitions of every member, uniformly from its own memory ->
        fields ``[K, batch_size, ...]``."""
        index = torch.randint(self.size, (batch_size,), generator=self.generators[0])
        if self.members > 1:  # one flat index into the members' rows
            index = torch.cat([index] + [torch.randint(self.size, (batch_size,), generator=g)
                                         for g in self.generators[1:]])
            index += self._member_offsets(batch_size)
        # index_select is the cheapest gather (a third of indexing [K, capacity] by [:, index]).
        batch = Transitions(*[
            rows.index_select(0, index).view(self.members, batch_size, *rows.shape[1:])
            for rows in self._rows
        ])
        if self.compact:
            batch = batch._replace(obs=batch.obs.float(), next_obs=batch.next_obs.float())
        return batch

    def _member_offsets(self, batch_size: int) -> Tensor:
        """Where each member's rows start, for a batch of every member: ``k * capacity``
        repeated ``batch_size`` times for each k (made once per batch size)."""
        if self._offsets.numel() != self.members * batch_size:
            self._offsets = torch.arange(self.members).repeat_interleave(batch_size) * self.capacity
        return self._offsets

    def state_dict(self, members: Sequence[int] | None = None) -> dict[str, Any]:
        """The filled rows and the generators; ``members`` selects some members' memories
        (a member's own checkpoint)."""
        chosen = list(range(self.members)) if members is None else list(members)
        n = self.size
        state: dict[str, Any] = {name: getattr(self, name)[chosen, :n].clone() for name in FIELDS}
        state.update(size=self.size, position=self.position,
                     generators=[self.generators[k].get_state() for k in chosen])
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = state["size"]
        if n > self.capacity:
            raise ValueError(
                f"the checkpoint's replay memory holds {n} transitions, more than this run's "
                f"capacity {self.capacity}"
            )
        for name in FIELDS:
            getattr(self, name)[:, :n] = state[name]
        self.size = n
        self.position = state["position"] % self.capacity
        for generator, generator_state in zip(self.generators, state["generators"], strict=True):
            generator.set_state(generator_state)


class NStepReturns:
    """n-step transitions of ``copies`` environment copies, built from their one-step ones
    before they enter a replay memory.

    The transition that starts at step t of a copy is (s_t, a_t, R, s_{t+m}, terminated,
    gamma^m) with R = sum_{k<m} gamma^k r_{t+k} and m = n, or fewer where the episode ended
    at step t + m - 1 < t + n - 1: a termination stores discount 0 (nothing to bootstrap),
    a truncation (time limit) gamma^m and the last state reached, whose value is bootstrapped.
    It leaves the window at step t + n - 1 whatever happened in between, so once the first
    n - 1 steps have passed every step gives one transition per copy, as the replay memory's
    write position shared by every member wants. The window is a ring of n starts per copy,
    all of its state plain arrays (checkpoints hold them as tensors).
    """

    def __init__(self, n: int, gamma: float, copies: int, obs_shape: Sequence[int],
                 action_shape: Sequence[int] = ()) -> None:
        if n < 1:
            raise ValueError(f"n-step returns need n >= 1, got {n}")
        self.n = n
        self.gamma = gamma
        self.powers = gamma ** np.arange(n + 1)  # gamma^m for m = 0..n
        self.obs = np.zeros((n, copies, *obs_shape), dtype=np.float32)
        self.action = np.zeros((n, copies, *action_shape),
                               dtype=np.float32 if len(action_shape) else np.int64)
        self.reward = np.zeros((n, copies))  # the discounted sum so far
        self.steps = np.zeros((n, copies), dtype=np.int64)  # m so far
        self.open = np.zeros((n, copies), dtype=bool)  # no episode end since the start
        self.next_obs = np.zeros((n, copies, *obs_shape), dtype=np.float32)  # at the end
        self.terminated = np.zeros((n, copies), dtype=bool)
        self.started = 0  # steps pushed so far

    def push(self, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, next_obs: np.ndarray,
             terminated: np.ndarray, ended: np.ndarray) -> tuple[np.ndarray, ...] | None:
        """One step of every copy (fields ``[copies, ...]``; ``ended``: terminated or
        truncated) -> the fields of :data:`FIELDS` of the transitions that leave the window,
        ``[copies, ...]``, or None during the first n - 1 steps."""
        slot = self.started % self.n
        self.obs[slot] = obs
        self.action[slot] = action
        self.reward[slot] = 0.0
        self.steps[slot] = 0
        self.open[slot] = True
        self.terminated[slot] = False
        self.started += 1
        # Every start whose episode goes on takes this reward, discounted by its age.
        self.reward += self.open * self.powers[self.steps] * reward
        self.steps += self.open
        if ended.any():
            closing = self.open & ended
            self.next_obs[closing] = np.broadcast_to(next_obs, self.next_obs.shape)[closing]
            self.terminated[closing] = np.broadcast_to(terminated, closing.shape)[closing]
            self.open &= ~closing
        if self.started < self.n:
            return None
        oldest = self.started % self.n
        still_open = self.open[oldest]
        reached = np.where(still_open.reshape(-1, *[1] * (next_obs.ndim - 1)), next_obs,
                           self.next_obs[oldest])
        stopped = self.terminated[oldest] & ~still_open
        discount = np.where(stopped, 0.0, self.powers[self.steps[oldest]])
        return (self.obs[oldest].copy(), self.action[oldest].copy(), self.reward[oldest].copy(),
                reached, stopped, discount)

    def truncate(self, reached: np.ndarray) -> None:
        """End every copy's episode in progress as a time limit would, at the states
        ``reached`` ``[copies, ...]`` (its starts bootstrap from them): a resume that
        restarts the episodes (an environment whose state a checkpoint cannot hold)."""
        open_starts = self.open.copy()
        self.next_obs[open_starts] = np.broadcast_to(reached, self.next_obs.shape)[open_starts]
        self.terminated[open_starts] = False
        self.open[:] = False

    _ARRAYS = ("obs", "action", "reward", "steps", "open", "next_obs", "terminated")

    def state_dict(self, copies: Sequence[int] | None = None) -> dict[str, Any]:
        """The window's starts as tensors; ``copies`` selects some copies."""
        chosen = slice(None) if copies is None else list(copies)
        state: dict[str, Any] = {name: torch.from_numpy(getattr(self, name)[:, chosen].copy())
                                 for name in self._ARRAYS}
        state.update(n=self.n, started=self.started)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["n"] != self.n or state["obs"].shape != self.obs.shape:
            raise ValueError("the checkpoint's n-step window is of another n or number of copies")
        for name in self._ARRAYS:
            getattr(self, name)[...] = state[name].numpy()
        self.started = state["started"]


class ReplayBuffer:
    """The replay side of the collector (:class:`~rs_lightning.engine.experience.Buffer`):
    K members' replay memory, the n-step window each copy's transitions pass through, and
    the schedule of updates.

    ``updates_per_step`` = p / q gradient updates per environment step, exactly: every
    transition earns p, every update costs q, and the copies step whenever less than q is
    left. The integer balance, ``update_credit``, is part of the checkpoint, so a run resumed
    between two updates goes on exactly as the uninterrupted one. Warm-up: the first
    ``warmup_steps`` transitions are collected before any update, and more until the memory
    holds one (n-step transitions are stored n - 1 steps late); the transitions of the step
    of the copies that crosses it beyond it earn updates.
    """

    def __init__(self, memory: ReplayMemory, copies_per_member: int, gamma: float,
                 n_step: int = 1, updates_per_step: Fraction = Fraction(1),
                 batch_size: int = 32, warmup_steps: int = 0) -> None:
        self.memory = memory
        self.copies_per_member = copies_per_member
        self.gamma = gamma
        self.n_step = n_step
        self.window = None if n_step == 1 else NStepReturns(
            n_step, gamma, memory.members * copies_per_member, memory.obs.shape[2:],
            memory.action.shape[2:])
        self.updates_per_step = updates_per_step
        self.batch_size = batch_size
        self.warmup_steps = max(warmup_steps, 1)
        # Transitions earn updates_per_step.numerator each, an update costs its denominator.
        self.update_credit = 0

    def warming_up(self, env_steps: int) -> bool:
        """The first ``warmup_steps`` transitions, and more until the memory holds one."""
        return env_steps < self.warmup_steps or len(self.memory) == 0

    def needs_steps(self, env_steps: int) -> bool:
        """Whether the copies step before the next update: during the warm-up, then while
        the credit is short of an update's cost."""
        return self.warming_up(env_steps) or self.update_credit < self.updates_per_step.denominator

    def store(self, step, draw, env_steps: int) -> None:
        """One step of every copy (a :class:`~rs_lightning.engine.rollout.RolloutStep`)
        taken after ``env_steps`` environment steps of each member; past the warm-up its
        transitions earn updates. Only termination stops bootstrapping: a truncated
        episode's last state has a value."""
        earned = self.updates_per_step.numerator
        warming_up = self.warming_up(env_steps)
        shape = (self.memory.members, self.copies_per_member)
        copies = step.copies
        if self.window is None:
            obs_shape = step.obs.shape[1:]
            self.memory.add(step.obs.reshape(*shape, *obs_shape),
                            step.actions.reshape(*shape, *step.actions.shape[1:]),
                            step.learnt.reshape(shape), step.reached.reshape(*shape, *obs_shape),
                            copies.terminated.reshape(shape),
                            np.where(copies.terminated, 0.0, self.gamma).reshape(shape))
        else:
            leaving = self.window.push(step.obs, step.actions, step.learnt, step.reached,
                                       copies.terminated, copies.ended)
            if leaving is not None:
                self.memory.add(*(field.reshape(*shape, *field.shape[1:]) for field in leaving))
        after = env_steps + self.copies_per_member
        if not warming_up:
            self.update_credit += earned * self.copies_per_member
        elif not self.warming_up(after):
            self.update_credit = (after - self.warmup_steps) * earned

    def next_batch(self, env_steps: int) -> tuple[Transitions, int]:
        """A replay batch of every member and the environment step the update follows (the
        last transition whose credit it spends). The update is paid for here, before it
        runs: a checkpoint after it holds what is left."""
        self.update_credit -= self.updates_per_step.denominator
        return (self.memory.sample(self.batch_size),
                env_steps - self.update_credit // self.updates_per_step.numerator)

    def rewards(self) -> Tensor:
        """The learning rewards held ``[K, size]``."""
        return self.memory.reward[:, :len(self.memory)]

    def truncate(self, reached: np.ndarray) -> None:
        """The copies' episodes restarted (a resume), as if cut by a time limit at the
        states ``reached``."""
        if self.window is not None:
            self.window.truncate(reached)

    def state_dict(self, members: Sequence[int], copies: Sequence[int]) -> dict[str, Any]:
        return {
            "update_credit": self.update_credit,
            "updates_per_step": [self.updates_per_step.numerator,
                                 self.updates_per_step.denominator],
            "n_step": self.n_step,
            "replay": self.memory.state_dict(members),
            **({} if self.window is None else {"n_step_window": self.window.state_dict(copies)}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ratio = Fraction(*state["updates_per_step"])
        if ratio != self.updates_per_step or state["n_step"] != self.n_step:
            raise ValueError("the checkpoint's collector has another learning.updates_per_step "
                             "or learning.n_step")
        self.update_credit = state["update_credit"]
        self.memory.load_state_dict(state["replay"])
        if self.window is not None:
            self.window.load_state_dict(state["n_step_window"])
