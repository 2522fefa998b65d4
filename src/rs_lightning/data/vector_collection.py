"""Collection from several copies of the environment stepped together (``env.num_envs > 1``).

:class:`VectorEnvCollector` steps a ``gymnasium.vector.SyncVectorEnv`` of ``num_envs`` copies
(copy ``i`` seeded ``seed + i``, reset as soon as its episode ends) and writes every copy's
transition into the same replay memory. The meaning of the schedule does not change:

- an *environment step* is one transition of one copy: a vector step is ``num_envs`` of them,
  and ``env_steps``, the warm-up and the epsilon schedule count transitions (copy ``i`` of a
  vector step acts with the epsilon of step ``env_steps + i``);
- one gradient update per environment step: :class:`VectorExperienceStream` yields one
  replay batch per transition collected, so ``trainer.max_steps`` updates still mean that
  many transitions after the warm-up, and a vector step is followed by ``num_envs`` updates.

What a vector step saves is the per-step policy call: with a batch policy (``batch_policy``,
see :func:`batched_exploration`) the network acts on all copies at once. The transitions
collected but not yet matched by an update are part of the checkpoint
(``pending_updates``), so a run resumed between the updates of one vector step goes on
exactly as the uninterrupted one.
"""

from __future__ import annotations

import functools
import pickle
from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from torch.utils.data import IterableDataset

from rs_lightning.data.replay import ReplayBuffer
from rs_lightning.envs.factory import make_env

Policy = Callable[[np.ndarray, int], int]
# (observations [N, obs_dim], environment steps before the first of them) -> actions [N]
BatchPolicy = Callable[[np.ndarray, int], np.ndarray]


def learning_reward(reward, scale: float, clip: float | None):
    """The reward the learner stores: scaled, then clipped to [-clip, clip]. ``reward`` is a
    float, or a tensor of several environments' rewards (clipped elementwise)."""
    reward = reward * scale
    if clip is not None:
        if isinstance(reward, torch.Tensor):
            reward = reward.clamp(-clip, clip)
        else:
            reward = min(max(reward, -clip), clip)
    return reward


class EndedEpisodes:
    """What a collector keeps of the episodes ended since the last training step: their
    (unscaled) returns and risk outcomes, in ``ended_returns`` and ``ended_outcomes``."""

    ended_returns: list[float]
    ended_outcomes: list[float]

    def pop_ended_episodes(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        if not self.ended_returns:
            return (), ()
        ended = tuple(self.ended_returns), tuple(self.ended_outcomes)
        self.ended_returns.clear()
        self.ended_outcomes.clear()
        return ended


def make_vector_env(env_config, num_envs: int) -> gym.vector.SyncVectorEnv:
    # A partial of a module-level function (not a lambda): the vector env pickles whole.
    make_copy = functools.partial(make_env, env_config)
    return gym.vector.SyncVectorEnv(
        [make_copy] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP
    )


class VectorEnvCollector(EndedEpisodes):
    """Steps ``num_envs`` copies of an environment with a policy and fills the replay memory."""

    def __init__(self, env_config, num_envs: int, replay: ReplayBuffer, reward_clip: float | None,
                 seed: int, reward_scale: float = 1.0) -> None:
        self.env = make_vector_env(env_config, num_envs)
        self.num_envs = num_envs
        self.replay = replay
        self.reward_clip = reward_clip
        self.reward_scale = reward_scale
        self.obs, _ = self.env.reset(seed=seed)
        self.env_steps = 0
        self.episodes = 0
        self.pending_updates = 0  # transitions collected that no update has matched yet
        self.episode_returns = np.zeros(num_envs)
        self.ended_returns: list[float] = []
        self.ended_outcomes: list[float] = []

    def step(self, policy: Policy, batch_policy: Optional[BatchPolicy] = None) -> int:
        """One step of every copy; returns the number of transitions added (``num_envs``)."""
        n = self.num_envs
        if batch_policy is not None:
            actions = np.asarray(batch_policy(self.obs, self.env_steps), dtype=np.int64)
        else:
            actions = np.array([policy(self.obs[i], self.env_steps + i) for i in range(n)])
        next_obs, rewards, terminated, truncated, info = self.env.step(actions)
        ended = np.logical_or(terminated, truncated)
        for i in range(n):
            # With same-step autoreset, next_obs of an ended copy is already the new episode's
            # first observation; the transition's own next state is in final_obs.
            successor = info["final_obs"][i] if ended[i] else next_obs[i]
            reward = float(rewards[i])
            self.replay.add(self.obs[i], int(actions[i]),
                            learning_reward(reward, self.reward_scale, self.reward_clip),
                            successor, bool(terminated[i]))
            self.episode_returns[i] += reward
            if ended[i]:
                self.ended_returns.append(float(self.episode_returns[i]))
                self.ended_outcomes.append(_final_outcome(info, i))
                self.episodes += 1
                self.episode_returns[i] = 0.0
        self.obs = next_obs
        self.env_steps += n
        return n

    def state_dict(self) -> dict[str, Any]:
        return {
            "env": pickle.dumps(self.env),  # every copy mid-episode, with its generator
            "obs": torch.as_tensor(np.asarray(self.obs)),
            "num_envs": self.num_envs,
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "pending_updates": self.pending_updates,
            "episode_returns": torch.as_tensor(self.episode_returns),
            "ended_returns": list(self.ended_returns),
            "ended_outcomes": list(self.ended_outcomes),
            "replay": self.replay.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env = pickle.loads(state["env"])
        self.obs = state["obs"].numpy()
        self.num_envs = state["num_envs"]
        self.env_steps = state["env_steps"]
        self.episodes = state["episodes"]
        self.pending_updates = state["pending_updates"]
        self.episode_returns = state["episode_returns"].numpy().copy()
        self.ended_returns = list(state["ended_returns"])
        self.ended_outcomes = list(state["ended_outcomes"])
        self.replay.load_state_dict(state["replay"])


def _final_outcome(info: dict, i: int) -> float:
    final = info.get("final_info") or {}
    if "risk_outcome" in final and final.get("_risk_outcome", np.ones(i + 1, bool))[i]:
        return float(final["risk_outcome"][i])
    return float("nan")


class VectorExperienceStream(IterableDataset):
    """One replay batch per transition collected: a vector step, then ``num_envs`` batches.

    Warm-up: the first ``warmup_steps`` transitions are collected before any update, as with
    one environment (the transitions of the vector step that crosses it beyond it count).
    """

    def __init__(self, collector: VectorEnvCollector, policy: Policy, batch_size: int,
                 warmup_steps: int, batch_policy: Optional[BatchPolicy] = None) -> None:
        super().__init__()
        self.collector = collector
        self.policy = policy
        self.batch_policy = batch_policy
        self.batch_size = batch_size
        self.warmup_steps = max(warmup_steps, 1)

    def __iter__(self):
        from rs_lightning.data.datamodule import ExperienceBatch

        collector = self.collector
        if collector.env_steps < self.warmup_steps:  # a fresh run (a resumed one is past it)
            while collector.env_steps < self.warmup_steps:
                collector.step(self.policy, self.batch_policy)
            collector.pending_updates = collector.env_steps - self.warmup_steps
        while True:
            if collector.pending_updates == 0:
                collector.pending_updates = collector.step(self.policy, self.batch_policy)
            # Counted before the update runs: a checkpoint after it holds what is left.
            collector.pending_updates -= 1
            returns, outcomes = collector.pop_ended_episodes()
            yield ExperienceBatch(
                collector.replay.sample(self.batch_size), returns, outcomes,
                collector.env_steps - collector.pending_updates,
            )


def batched_exploration(module) -> BatchPolicy:
    """The module's epsilon-greedy policy on the utility, for a batch of observations.

    Row ``i`` acts at environment step ``env_step + i`` and draws from the module's
    exploration generator in the same order as ``module.explore`` called row by row, so the
    actions are the same; the greedy rows share one forward pass of the network.
    """
    from rs_lightning.module import exploration_rate

    @torch.no_grad()
    def act(obs: np.ndarray, env_step: int) -> np.ndarray:
        cfg = module.learning
        rng = module.exploration_rng
        actions = np.zeros(len(obs), dtype=np.int64)
        greedy_rows = []
        for i in range(len(obs)):
            module.epsilon = exploration_rate(
                env_step + i, cfg.epsilon_start, cfg.epsilon_end, cfg.epsilon_decay,
                cfg.epsilon_schedule,
            )
            if rng.random() < module.epsilon:
                actions[i] = int(rng.integers(module.n_actions))
            else:
                greedy_rows.append(i)
        if greedy_rows:
            obs_t = torch.as_tensor(np.asarray(obs)[greedy_rows], dtype=torch.float32,
                                    device=module.device)
            chosen = module.agent.greedy_action(obs_t, module.utility.greedy)
            actions[greedy_rows] = chosen.cpu().numpy()
        return actions

    return act
