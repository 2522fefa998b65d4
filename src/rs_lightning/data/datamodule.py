"""Environment interaction as a Lightning datamodule.

:class:`EnvCollector` steps the environment with the policy it is given and stores each
transition in the replay memory; :class:`ExperienceStream` is the IterableDataset Lightning
iterates: one environment step, then one sampled batch, forever (``trainer.max_steps`` ends
the run). The datamodule's ``state_dict`` holds everything a resumed run needs on this side:
the environment mid-episode, the replay memory and the counters.
"""

from __future__ import annotations

import pickle
from typing import Any, Callable, NamedTuple

import gymnasium as gym
import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import IterableDataset

from rs_lightning.agents.base import Problem, Transitions
from rs_lightning.data.replay import ReplayBuffer
from rs_lightning.data.vector_collection import (
    BatchPolicy,
    EndedEpisodes,
    VectorEnvCollector,
    VectorExperienceStream,
    learning_reward,
)
from rs_lightning.envs.factory import make_env, observation_size

Policy = Callable[[np.ndarray, int], int]


class ExperienceBatch(NamedTuple):
    """What one training step receives: a replay batch and the episodes that just ended."""

    transitions: Transitions
    episode_returns: tuple[float, ...]  # undiscounted, unclipped returns of ended episodes
    episode_outcomes: tuple[float, ...]  # the risk outcome R_s of each (NaN if the env has none)
    env_steps: int  # environment steps taken so far


class EnvCollector(EndedEpisodes):
    """Steps one environment with a policy and fills the replay memory."""

    def __init__(self, env: gym.Env, replay: ReplayBuffer, reward_clip: float | None, seed: int,
                 reward_scale: float = 1.0):
        self.env = env
        self.replay = replay
        self.reward_clip = reward_clip
        self.reward_scale = reward_scale  # rewards are learnt as r * reward_scale, then clipped
        self.obs, _ = env.reset(seed=seed)
        self.env_steps = 0
        self.episodes = 0
        self.episode_return = 0.0
        self.ended_returns: list[float] = []
        self.ended_outcomes: list[float] = []

    def step(self, policy: Policy) -> None:
        self.replay.add(*self.transition(policy(self.obs, self.env_steps)))

    def transition(self, action: int) -> tuple:
        """Take ``action``, keep the episode's books and return the transition to store:
        ``(obs, action, learnt reward, next obs, terminated)``."""
        obs = self.obs
        next_obs, reward, terminated, truncated, info = self.env.step(action)
        reward = float(reward)
        learnt = learning_reward(reward, self.reward_scale, self.reward_clip)
        # Only termination stops bootstrapping; a truncated episode's last state has a value.
        stored = (obs, action, learnt, next_obs, terminated)
        self.env_steps += 1
        self.episode_return += reward
        if terminated or truncated:
            self.ended_returns.append(self.episode_return)
            self.ended_outcomes.append(float(info.get("risk_outcome", float("nan"))))
            self.episodes += 1
            self.episode_return = 0.0
            next_obs, _ = self.env.reset()
        self.obs = next_obs
        return stored

    def state_dict(self) -> dict[str, Any]:
        return {
            # The environment is pickled whole: its position, clock and random generator.
            "env": pickle.dumps(self.env),
            "obs": torch.as_tensor(self.obs),  # tensors and bytes load with weights_only
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "episode_return": self.episode_return,
            "ended_returns": list(self.ended_returns),
            "ended_outcomes": list(self.ended_outcomes),
            "replay": self.replay.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env = pickle.loads(state["env"])
        self.obs = state["obs"].numpy()
        self.env_steps = state["env_steps"]
        self.episodes = state["episodes"]
        self.episode_return = state["episode_return"]
        self.ended_returns = list(state["ended_returns"])
        self.ended_outcomes = list(state["ended_outcomes"])
        self.replay.load_state_dict(state["replay"])


class ExperienceStream(IterableDataset):
    """One environment step, then one replay batch; warm-up steps fill the memory first."""

    def __init__(self, collector: EnvCollector, policy: Policy, batch_size: int, warmup_steps: int):
        super().__init__()
        self.collector = collector
        self.policy = policy
        self.batch_size = batch_size
        self.warmup_steps = max(warmup_steps, 1)

    def __iter__(self):
        collector, policy = self.collector, self.policy
        while collector.env_steps < self.warmup_steps:
            collector.step(policy)
        while True:
            collector.step(policy)
            returns, outcomes = collector.pop_ended_episodes()
            yield ExperienceBatch(
                collector.replay.sample(self.batch_size), returns, outcomes, collector.env_steps
            )


class EnvDataModule(pl.LightningDataModule):
    """The environment, the replay memory and the stream of batches between them."""

    def __init__(
        self,
        env_config,
        batch_size: int,
        replay_capacity: int,
        warmup_steps: int,
        seed: int,
    ) -> None:
        super().__init__()
        self.env_config = env_config
        self.batch_size = batch_size
        self.replay_capacity = replay_capacity
        self.warmup_steps = warmup_steps
        self.seed = seed
        self.collector: EnvCollector | VectorEnvCollector | None = None
        self.policy: Policy | None = None
        self.batch_policy: BatchPolicy | None = None  # used with env.num_envs > 1 if given

    def setup(self, stage: str | None = None) -> None:
        if self.collector is not None:  # called by the user before fit, then by Lightning
            return
        env = make_env(self.env_config)
        replay = ReplayBuffer(self.replay_capacity, observation_size(env), seed=self.seed + 1)
        reward_scale = getattr(self.env_config, "reward_scale", 1.0)
        num_envs = getattr(self.env_config, "num_envs", 1)
        self.spaces = (observation_size(env), int(env.action_space.n))
        if num_envs > 1:  # several copies stepped together (data/vector_collection.py)
            env.close()
            self.collector = VectorEnvCollector(
                self.env_config, num_envs, replay, self.env_config.reward_clip, seed=self.seed,
                reward_scale=reward_scale,
            )
            return
        self.collector = EnvCollector(env, replay, self.env_config.reward_clip, seed=self.seed,
                                      reward_scale=reward_scale)

    @property
    def problem(self) -> Problem:
        self.setup()
        obs_dim, n_actions = self.spaces
        return Problem(
            obs_dim=obs_dim,
            n_actions=n_actions,
            gamma=self.env_config.gamma,
            return_min=self.env_config.return_min,
            return_max=self.env_config.return_max,
        )

    def attach_policy(self, policy: Policy, batch_policy: BatchPolicy | None = None) -> None:
        """The policy that chooses the actions (the module's epsilon-greedy on the utility);
        ``batch_policy``, the same for a batch of observations, serves ``env.num_envs > 1``."""
        self.policy = policy
        self.batch_policy = batch_policy

    def train_dataloader(self) -> ExperienceStream:
        if self.policy is None:
            raise RuntimeError("EnvDataModule needs a policy: call attach_policy() before fit")
        # Lightning iterates any iterable; the stream yields whole batches already, so a
        # DataLoader around it would only add per-step overhead.
        if isinstance(self.collector, VectorEnvCollector):
            return VectorExperienceStream(self.collector, self.policy, self.batch_size,
                                          self.warmup_steps, self.batch_policy)
        return ExperienceStream(self.collector, self.policy, self.batch_size, self.warmup_steps)

    def state_dict(self) -> dict[str, Any]:
        if self.collector is None:
            return {}
        # The env id lets a resume refuse a checkpoint of another environment.
        return {"collector": self.collector.state_dict(), "env_id": self.env_config.id,
                "num_envs": getattr(self.env_config, "num_envs", 1)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.setup()
        self.collector.load_state_dict(state_dict["collector"])
