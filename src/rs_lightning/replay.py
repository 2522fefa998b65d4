"""Experience replay memory: a fixed-capacity ring of transitions for K members.

Storage is allocated once, ``[K, capacity, ...]`` per field, member k's memory at index k.
The members step together, so their memories share one write position; each member samples
with its own random generator, so member k draws exactly the indices a memory of its seed
alone draws, and sampling repeats from a seed and survives a checkpoint round trip.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from rs_lightning.types import Transitions

FIELDS = ("obs", "action", "reward", "next_obs", "terminated")


class ReplayMemory:
    """Uniform-sampling replay memories of ``members`` members, ``capacity`` transitions each.

    Args:
        capacity: transitions kept per member (the oldest are overwritten).
        obs_shape: the shape of one observation.
        seeds: one sampling seed per member (their number is the number of members).
    """

    def __init__(self, capacity: int, obs_shape: Sequence[int] | int, seeds: Sequence[int]) -> None:
        if capacity <= 0:
            raise ValueError(f"replay capacity must be positive, got {capacity}")
        members = len(seeds)
        shape = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
        self.capacity = capacity
        self.members = members
        self.obs = torch.zeros(members, capacity, *shape)
        self.next_obs = torch.zeros(members, capacity, *shape)
        self.action = torch.zeros(members, capacity, dtype=torch.long)
        self.reward = torch.zeros(members, capacity)
        self.terminated = torch.zeros(members, capacity)
        self.size = 0
        self.position = 0
        self.generators = [torch.Generator().manual_seed(int(seed)) for seed in seeds]
        self._arrays = {name: getattr(self, name).numpy() for name in FIELDS}  # shared memory
        self._storage = [getattr(self, name) for name in FIELDS]
        # Every member's rows one after the other, [K * capacity, ...] (views: no copy).
        self._rows = [getattr(self, name).view(members * capacity, *getattr(self, name).shape[2:])
                      for name in FIELDS]

    def __len__(self) -> int:
        return self.size

    def add(self, obs, action, reward, next_obs, terminated) -> None:
        """Store N transitions of every member: fields ``[K, N, ...]`` (NumPy arrays or
        tensors; copy i of member k at row i of k), written in the order of i, one write per
        field."""
        n = action.shape[1]
        if n > self.capacity:
            raise ValueError(f"{n} transitions at once do not fit a replay capacity of "
                             f"{self.capacity}")
        index = (self.position + np.arange(n)) % self.capacity if n > 1 else self.position
        for name, value in zip(FIELDS, (obs, action, reward, next_obs, terminated)):
            # Through NumPy views of the storage: a small write costs a fraction of torch's.
            self._arrays[name][:, index] = np.asarray(value if n > 1 else value[:, 0])
        self.position = (self.position + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int) -> Transitions:
        """``batch_size`` transitions of every member, uniformly from its own memory ->
        fields ``[K, batch_size, ...]``."""
        index = torch.randint(self.size, (batch_size,), generator=self.generators[0])
        if self.members == 1:  # one gather per field, [1, B, ...]
            return Transitions(*(storage[:, index] for storage in self._storage))
        # One flat index into the members' rows: index_select is the cheapest gather.
        index = torch.cat([index] + [
            torch.randint(self.size, (batch_size,), generator=generator) + k * self.capacity
            for k, generator in enumerate(self.generators[1:], start=1)
        ])
        return Transitions(*(
            rows.index_select(0, index).view(self.members, batch_size, *rows.shape[1:])
            for rows in self._rows
        ))

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
