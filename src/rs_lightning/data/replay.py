"""Experience replay memory: a fixed-capacity ring of transitions in preallocated tensors."""

from __future__ import annotations

from typing import Any

import torch

from rs_lightning.agents.base import Transitions


class ReplayBuffer:
    """Uniform-sampling replay memory of capacity ``capacity``.

    Storage is allocated once; :meth:`add` writes one row and :meth:`sample` gathers a batch
    with its own random generator, so sampling repeats exactly from a seed and survives a
    checkpoint round trip.
    """

    def __init__(self, capacity: int, obs_dim: int, seed: int) -> None:
        if capacity <= 0:
            raise ValueError(f"replay capacity must be positive, got {capacity}")
        self.capacity = capacity
        self.obs = torch.zeros(capacity, obs_dim)
        self.next_obs = torch.zeros(capacity, obs_dim)
        self.action = torch.zeros(capacity, dtype=torch.long)
        self.reward = torch.zeros(capacity)
        self.terminated = torch.zeros(capacity)
        self.size = 0
        self.position = 0
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, obs, action: int, reward: float, next_obs, terminated: bool) -> None:
        i = self.position
        self.obs[i] = torch.as_tensor(obs)
        self.next_obs[i] = torch.as_tensor(next_obs)
        self.action[i] = action
        self.reward[i] = reward
        self.terminated[i] = float(terminated)
        self.advance()

    def advance(self) -> None:
        """Count the row just written at ``position`` and move on (the ring wraps)."""
        self.position = (self.position + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int) -> Transitions:
        index = torch.randint(self.size, (batch_size,), generator=self.generator)
        return Transitions(
            obs=self.obs[index],
            action=self.action[index],
            reward=self.reward[index],
            next_obs=self.next_obs[index],
            terminated=self.terminated[index],
        )

    def state_dict(self) -> dict[str, Any]:
        n = self.size
        return {
            "obs": self.obs[:n].clone(),
            "next_obs": self.next_obs[:n].clone(),
            "action": self.action[:n].clone(),
            "reward": self.reward[:n].clone(),
            "terminated": self.terminated[:n].clone(),
            "size": self.size,
            "position": self.position,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = state["size"]
        if n > self.capacity:
            raise ValueError(
                f"the checkpoint's replay memory holds {n} transitions, more than this run's "
                f"capacity {self.capacity}"
            )
        for name in ("obs", "next_obs", "action", "reward", "terminated"):
            getattr(self, name)[:n] = state[name]
        self.size = n
        self.position = state["position"] % self.capacity
        self.generator.set_state(state["generator"])
