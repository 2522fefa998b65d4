"""Plain types shared by the pure core: what a replay memory holds and what an agent knows.

They live below ``agents/``, ``envs/`` and the replay memory so that each of those can use
them without importing the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from torch import Tensor


class Transitions(NamedTuple):
    """A batch of transitions. One agent sees ``[B, ...]`` fields; the engine's K members see
    ``[K, B, ...]`` (member k's batch at index k)."""

    obs: Tensor  # [B, obs_dim] float32
    action: Tensor  # [B] int64
    reward: Tensor  # [B] float32, already scaled and clipped
    next_obs: Tensor  # [B, obs_dim] float32
    terminated: Tensor  # [B] float32: 1 where no bootstrapping (terminal transition)


@dataclass(frozen=True)
class Problem:
    """What an agent needs to know of the environment and of the learning setting."""

    obs_dim: int
    n_actions: int
    gamma: float
    return_min: float
    return_max: float

    def check_return_support(self) -> None:
        """For agents whose representation lives on [return_min, return_max]."""
        if not self.return_max > self.return_min:
            raise ValueError(
                f"problem: return_max must exceed return_min, got "
                f"[{self.return_min}, {self.return_max}]"
            )
