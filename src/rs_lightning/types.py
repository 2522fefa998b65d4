"""Plain types shared by the pure core: what a replay memory and a rollout hold, and what an
agent knows.

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
    action: Tensor  # [B] int64; continuous actions: [B, action_dim] float32 in [-1, 1]
    reward: Tensor  # [B] float32, already scaled and clipped (of m steps: their discounted sum)
    next_obs: Tensor  # [B, obs_dim] float32 (the state m steps later)
    terminated: Tensor  # [B] float32: 1 where no bootstrapping (terminal transition)
    # [B] float32: what multiplies the next state's return in the target, gamma^m for a
    # transition of m steps (m = 1, or learning.n_step's m <= n), 0 where terminated.
    discount: Tensor


class PolicySample(NamedTuple):
    """What an on-policy agent's behaviour gives for a batch of observations ``[..., B, D]``
    (:meth:`rs_lightning.agents.on_policy.OnPolicyAgent.sample`)."""

    action: Tensor  # [..., B] int64; continuous actions: [..., B, action_dim] float32
    log_prob: Tensor  # [..., B] float32: log pi(action | obs) of the policy that acted
    value: Tensor  # [..., B, n] float32: the critic's n atoms (equal weights) of the return law


class RolloutBatch(NamedTuple):
    """A minibatch of on-policy experience: steps of fixed-length rollouts, shuffled. One
    agent sees ``[B, ...]`` fields; the engine's K members see ``[K, B, ...]``.

    ``log_prob`` and ``value`` are what the policy and the critic said when the step was
    collected (the old policy of a clipped surrogate); ``advantage`` and ``returns`` come
    from generalised advantage estimation over the whole rollout
    (:func:`rs_lightning.agents.on_policy.generalized_advantages`, on the critic's mean).
    """

    obs: Tensor  # [B, obs_dim] float32, as the policy saw it (the objective's features appended)
    action: Tensor  # [B] int64; continuous actions: [B, action_dim] float32, as sampled
    log_prob: Tensor  # [B] float32: log pi_old(action | obs)
    value: Tensor  # [B, n] float32: the critic's atoms at obs when collected
    advantage: Tensor  # [B] float32: the GAE(lambda) advantage
    returns: Tensor  # [B] float32: advantage + the critic's mean, the lambda-return
    reward: Tensor  # [B] float32: the learning reward (scaled, clipped)
    terminated: Tensor  # [B] float32: 1 where the episode ended in a terminal state
    truncated: Tensor  # [B] float32: 1 where a time limit cut it (bootstrapped from the critic)


@dataclass(frozen=True)
class Problem:
    """What an agent needs to know of the environment and of the learning setting."""

    obs_dim: int
    # Discrete actions: their number. Continuous ones (action_dim > 0): 1, the actor's one
    # action, whose law Z(s, pi(s)) is what the agent shows as its return distribution.
    n_actions: int
    gamma: float
    return_min: float
    return_max: float
    # The observation's shape before it was flattened to obs_dim values (an image's [H, W, C]
    # or [C, H, W]; the image comes first in the flat vector); () for a flat observation.
    obs_shape: tuple[int, ...] = ()
    # Every observation value is a whole number in 0..255 (a bool or uint8 image fed as it
    # is): a replay memory holds them in one byte each instead of four.
    obs_uint8: bool = False
    # 0: discrete actions; d > 0: continuous actions in the box [-1, 1]^d (the environment's
    # own bounds are mapped onto it, rs_lightning.envs.gym_support).
    action_dim: int = 0
    # The name of each discrete action (rs_lightning.envs.action_names); () where the
    # environment names none: its actions are shown as numbers.
    action_names: tuple[str, ...] = ()

    @property
    def continuous(self) -> bool:
        return self.action_dim > 0

    @property
    def action_shape(self) -> tuple[int, ...]:
        """The shape of one action as the replay memory holds it."""
        return (self.action_dim,) if self.continuous else ()

    def check_return_support(self) -> None:
        """For agents whose representation lives on [return_min, return_max]."""
        if not self.return_max > self.return_min:
            raise ValueError(
                f"problem: return_max must exceed return_min, got "
                f"[{self.return_min}, {self.return_max}]"
            )
