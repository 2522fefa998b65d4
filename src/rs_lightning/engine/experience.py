"""Environment interaction as a Lightning datamodule: K members x N environment copies.

:class:`Collector` steps the env copies with the behaviour policy and writes every
transition into the members' replay memory; :class:`ExperienceStream` is the iterable
Lightning runs through: one replay batch of every member per transition a copy collected,
forever (``trainer.max_steps`` ends the run). The meaning of the schedule does not depend on
N:

- an *environment step* is one transition of one copy of a member: a step of the copies is
  N of them, and ``env_steps``, the warm-up and the epsilon schedule count transitions;
- one gradient update per environment step: a step of the copies is followed by N updates
  (the transitions collected but not yet matched by an update, ``pending_updates``, are part
  of the checkpoint, so a run resumed between them goes on exactly as the uninterrupted one).

The datamodule's ``state_dict`` holds what a resumed run needs on this side: the copies
mid-episode, the replay memory and the counters.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import IterableDataset

from rs_lightning.engine.behaviour import EpisodeSettings
from rs_lightning.envs.copies import EnvCopies, make_copies
from rs_lightning.envs.factory import env_problem
from rs_lightning.replay import ReplayMemory
from rs_lightning.types import Transitions

# (observations [K, N, ...], environment steps before them) -> actions [K, N] (NumPy arrays);
# a risk-conditioned run's policy also takes the copies' settings (EpisodeSettings).
Policy = Callable[..., np.ndarray]


class ExperienceBatch(NamedTuple):
    """What one training step receives: a replay batch of every member (fields
    ``[K, B, ...]``) and the episodes that ended since the last step, per member."""

    transitions: Transitions
    episode_returns: tuple[tuple[float, ...], ...]  # undiscounted, unscaled
    episode_outcomes: tuple[tuple[float, ...], ...]  # R_s of each (NaN if the env has none)
    env_steps: int  # environment steps of each member that this update follows


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


def member_seeds(seed: int, members: int) -> list[int]:
    """The seeds of a run's members: ``seed, seed + 1, ...``."""
    return [seed + k for k in range(members)]


def copy_seeds(seeds: list[int], copies: int) -> list[int]:
    """The reset seed of every env copy, member by member: copy i of the member of seed s is
    reset with s + i (as ``SyncVectorEnv.reset(seed=s)`` seeds N copies)."""
    return [seed + i for seed in seeds for i in range(copies)]


class Collector:
    """Steps K members' N env copies with a policy and fills the replay memory."""

    def __init__(self, copies: EnvCopies, replay: ReplayMemory, members: int, copies_per_member: int,
                 reward_scale: float, reward_clip: float | None,
                 settings: EpisodeSettings | None = None) -> None:
        self.copies = copies
        self.settings = settings  # the copies' risk settings (risk-conditioned runs)
        self.replay = replay
        self.members = members
        self.copies_per_member = copies_per_member
        self.reward_scale = reward_scale
        self.reward_clip = reward_clip
        self.env_steps = 0  # transitions of each member so far
        self.pending_updates = 0  # transitions collected that no update has matched yet
        self.episodes = [0] * members
        self.episode_returns = np.zeros(len(copies))
        self.ended_returns: list[list[float]] = [[] for _ in range(members)]
        self.ended_outcomes: list[list[float]] = [[] for _ in range(members)]

    def step(self, policy: Policy) -> int:
        """One step of every copy; returns the transitions each member collected (N)."""
        shape = (self.members, self.copies_per_member)
        obs = self.copies.obs()
        grouped = obs.reshape(*shape, *obs.shape[1:])
        if self.settings is None:
            actions = policy(grouped, self.env_steps)
        else:
            actions = policy(grouped, self.env_steps, self.settings)
        step = self.copies.step(actions.reshape(-1))
        learnt = learning_reward(step.reward, self.reward_scale, self.reward_clip)
        # Only termination stops bootstrapping; a truncated episode's last state has a value.
        self.replay.add(grouped, actions, learnt.reshape(shape),
                        step.next_obs.reshape(*shape, *obs.shape[1:]),
                        step.terminated.reshape(shape))
        self.episode_returns += step.reward
        if step.ended.any():
            for j in np.flatnonzero(step.ended).tolist():
                member = j // self.copies_per_member
                self.ended_returns[member].append(float(self.episode_returns[j]))
                self.ended_outcomes[member].append(float(step.risk_outcome[j]))
                self.episodes[member] += 1
                if self.settings is not None:
                    self.settings.episode_ended(member, j % self.copies_per_member)
            self.episode_returns[step.ended] = 0.0
        self.env_steps += self.copies_per_member
        return self.copies_per_member

    def pop_ended_episodes(self) -> tuple[tuple[tuple[float, ...], ...], tuple[tuple[float, ...], ...]]:
        if not any(self.ended_returns):  # most steps end no episode
            empty = ((),) * self.members
            return empty, empty
        returns = tuple(tuple(r) for r in self.ended_returns)
        outcomes = tuple(tuple(o) for o in self.ended_outcomes)
        for books in (*self.ended_returns, *self.ended_outcomes):
            books.clear()
        return returns, outcomes

    def member_copies(self, members: list[int]) -> list[int]:
        n = self.copies_per_member
        return [k * n + i for k in members for i in range(n)]

    def state_dict(self, members: list[int] | None = None) -> dict[str, Any]:
        """Counters, books, copies and replay memory; ``members`` selects some members (a
        member's own checkpoint, loadable by a run of its seed alone)."""
        chosen = list(range(self.members)) if members is None else list(members)
        copies = self.member_copies(chosen)
        settings = {} if self.settings is None else {"settings": self.settings.state_dict(chosen)}
        return {
            **settings,
            "members": len(chosen),
            "copies_per_member": self.copies_per_member,
            "env_steps": self.env_steps,
            "pending_updates": self.pending_updates,
            "episodes": [self.episodes[k] for k in chosen],
            "episode_returns": torch.from_numpy(self.episode_returns[copies]),
            "ended_returns": [list(self.ended_returns[k]) for k in chosen],
            "ended_outcomes": [list(self.ended_outcomes[k]) for k in chosen],
            "copies": self.copies.state_dict(copies),
            "replay": self.replay.state_dict(chosen),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (state["members"], state["copies_per_member"]) != (self.members, self.copies_per_member):
            raise ValueError("the checkpoint's collector is of another number of members or copies")
        self.env_steps = state["env_steps"]
        self.pending_updates = state["pending_updates"]
        self.episodes = list(state["episodes"])
        self.episode_returns = state["episode_returns"].numpy().copy()
        self.ended_returns = [list(r) for r in state["ended_returns"]]
        self.ended_outcomes = [list(o) for o in state["ended_outcomes"]]
        self.copies.load_state_dict(state["copies"])
        self.replay.load_state_dict(state["replay"])
        if self.settings is not None:
            self.settings.load_state_dict(state["settings"])


class ExperienceStream(IterableDataset):
    """One replay batch of every member per transition collected (module docstring).

    Warm-up: the first ``warmup_steps`` transitions are collected before any update (the
    transitions of the step of the copies that crosses it beyond it count as pending).
    """

    def __init__(self, collector: Collector, policy: Policy, batch_size: int,
                 warmup_steps: int) -> None:
        super().__init__()
        self.collector = collector
        self.policy = policy
        self.batch_size = batch_size
        self.warmup_steps = max(warmup_steps, 1)

    def __iter__(self):
        collector, policy = self.collector, self.policy
        if collector.env_steps < self.warmup_steps:  # a fresh run (a resumed one is past it)
            while collector.env_steps < self.warmup_steps:
                collector.step(policy)
            collector.pending_updates = collector.env_steps - self.warmup_steps
        while True:
            if collector.pending_updates == 0:
                collector.pending_updates = collector.step(policy)
            # Counted before the update runs: a checkpoint after it holds what is left.
            collector.pending_updates -= 1
            returns, outcomes = collector.pop_ended_episodes()
            yield ExperienceBatch(collector.replay.sample(self.batch_size), returns, outcomes,
                                  collector.env_steps - collector.pending_updates)


class ExperienceDataModule(pl.LightningDataModule):
    """The members' env copies, replay memory and the stream of batches between them.

    Args:
        env_config: the ``env`` section (``num_envs`` copies per member).
        seeds: the members' seeds: member k's copies are reset with ``seeds[k] + i``, its
            replay memory samples with generator ``seeds[k] + 1``.
    """

    def __init__(self, env_config, batch_size: int, replay_capacity: int, warmup_steps: int,
                 seeds: list[int], conditioning=None) -> None:
        super().__init__()
        self.env_config = env_config
        self.batch_size = batch_size
        self.replay_capacity = replay_capacity
        self.warmup_steps = warmup_steps
        self.seeds = list(seeds)
        self.conditioning = conditioning  # RiskConditioning of a risk-conditioned run, or None
        self.copies_per_member = int(getattr(env_config, "num_envs", 1))
        self.collector: Collector | None = None
        self.policy: Policy | None = None
        self.problem = env_problem(env_config)
        self.obs_shape = (self.problem.obs_dim,)

    def setup(self, stage: str | None = None) -> None:
        if self.collector is not None:  # called by the user before fit, then by Lightning
            return
        n = self.copies_per_member
        copies = make_copies(self.env_config, copy_seeds(self.seeds, n), groups=len(self.seeds))
        replay = ReplayMemory(self.replay_capacity, self.obs_shape,
                              seeds=[seed + 1 for seed in self.seeds])
        settings = None
        if self.conditioning is not None and self.conditioning.acting == "episode":
            settings = EpisodeSettings(self.conditioning, self.seeds, n)
        self.collector = Collector(copies, replay, len(self.seeds), n,
                                   getattr(self.env_config, "reward_scale", 1.0),
                                   self.env_config.reward_clip, settings)

    @property
    def env_steps(self) -> int:
        return self.collector.env_steps if self.collector is not None else 0

    def attach_policy(self, policy: Policy) -> None:
        """The policy that chooses the actions (the module's epsilon-greedy on the utility)."""
        self.policy = policy

    def train_dataloader(self) -> ExperienceStream:
        if self.policy is None:
            raise RuntimeError("ExperienceDataModule needs a policy: call attach_policy() before fit")
        self.setup()
        # Lightning iterates any iterable; the stream yields whole batches already, so a
        # DataLoader around it would only add per-step overhead.
        return ExperienceStream(self.collector, self.policy, self.batch_size, self.warmup_steps)

    def state_dict(self, members: list[int] | None = None) -> dict[str, Any]:
        if self.collector is None:
            return {}
        # The env id lets a resume refuse a checkpoint of another environment.
        return {"collector": self.collector.state_dict(members), "env_id": self.env_config.id,
                "num_envs": self.copies_per_member}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.setup()
        self.collector.load_state_dict(state_dict["collector"])
