"""One step of environment copies under a policy: the interaction that training and
evaluation share.

A step observes the copies (the objective's episode state augments what they show), asks
the policy for actions, steps the copies and advances the episode state with the learning
rewards. Training stores the step's transitions (:class:`~rs_lightning.engine.experience.
Collector`, with an epsilon-greedy policy); an evaluation counts its episodes (the same step
with the greedy policy: epsilon 0).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np
import torch
from torch import Tensor

from rs_lightning.envs.copies import CopiesStep, EnvCopies
from rs_lightning.objectives.base import EpisodeState
from rs_lightning.risk import ReturnDistribution


class Policy(Protocol):
    """What acts on K members' N copies."""

    device: torch.device

    def network(self, obs: Tensor) -> ReturnDistribution:
        """The members' Z of observations ``[K, B, D']`` (as the network takes them)."""

    def act(self, obs: np.ndarray, env_step: int, state: EpisodeState) -> np.ndarray:
        """Actions ``[K, N]`` (continuous: ``[K, N, d]``) for the observations ``obs[K, N, D']`` the copies show after
        ``env_step`` environment steps of each member."""


def act_on_distinct(greedy, obs: np.ndarray) -> np.ndarray:
    """``greedy(rows[U, D]) -> [U]`` evaluated once per distinct row of one member's
    observations ``obs[1, N, D]`` -> ``[1, N]`` (a grid world shows 9 distinct ones;
    continuous actions: ``[U, d]`` -> ``[1, N, d]``)."""
    rows = torch.from_numpy(np.asarray(obs[0], dtype=np.float32))
    unique, inverse = torch.unique(rows, dim=0, return_inverse=True)
    return greedy(unique).cpu()[inverse].numpy()[None]


def learning_reward(reward, scale: float, clip: float | None):
    """The reward the learner stores: scaled, then clipped to [-clip, clip]. ``reward`` is a
    float, or an array of several copies' rewards (clipped elementwise)."""
    reward = reward * scale
    if clip is not None:
        if isinstance(reward, np.ndarray):
            reward = np.minimum(np.maximum(reward, -clip), clip)  # np.clip costs more when small
        else:
            reward = min(max(reward, -clip), clip)
    return reward


class RolloutStep(NamedTuple):
    obs: np.ndarray  # [M, D'] what the policy saw (the episode state's features appended)
    constants: np.ndarray | None  # [M, ...] what the state holds fixed for each copy's episode
    actions: np.ndarray  # [M] (continuous: [M, d])
    copies: CopiesStep  # the environment's answer (undiscounted rewards, ends, R_s)
    learnt: np.ndarray  # [M] the learning rewards (scaled, clipped)
    reached: np.ndarray  # [M, D'] the states reached, before the restart of an ended episode


class Rollout:
    """``members`` x ``copies_per_member`` environment copies and the objective's episode
    state that goes with them."""

    def __init__(self, copies: EnvCopies, state: EpisodeState, members: int,
                 copies_per_member: int, reward_scale: float, reward_clip: float | None) -> None:
        self.copies = copies
        self.state = state
        self.members = members
        self.copies_per_member = copies_per_member
        self.reward_scale = reward_scale
        self.reward_clip = reward_clip

    def step(self, policy: Policy, env_step: int) -> RolloutStep:
        """Observe, act, step the copies, advance the episode state."""
        obs = self.observe(policy)
        return self.advance(obs, policy.act(obs, env_step, self.state))

    def observe(self, policy: Policy) -> np.ndarray:
        """What the copies show, as the policy sees it: ``[K, N, D']`` (the episode state's
        features appended; ``policy.network`` may be asked about the copies whose episode
        starts)."""
        obs = self.state.observe(self.copies.obs(), policy.network, policy.device)
        return obs.reshape(self.members, self.copies_per_member, *obs.shape[1:])

    def advance(self, grouped: np.ndarray, actions: np.ndarray) -> RolloutStep:
        """Step the copies that showed ``grouped`` (:meth:`observe`) with ``actions[K, N]``
        (continuous: ``[K, N, d]``) and advance the episode state."""
        obs = grouped.reshape(-1, *grouped.shape[2:])
        constants = self.state.episode_constants()
        actions = actions.reshape(-1, *actions.shape[2:])  # [M] or, continuous, [M, d]
        step = self.copies.step(actions)
        learnt = learning_reward(step.reward, self.reward_scale, self.reward_clip)
        features = self.state.advance(learnt, step.ended)
        reached = step.next_obs if features is None else np.concatenate(
            [step.next_obs, features], axis=-1)
        return RolloutStep(obs, constants, actions, step, learnt, reached)
