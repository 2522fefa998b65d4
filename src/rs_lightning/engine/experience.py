"""Environment interaction as a Lightning datamodule: K members x N environment copies.

:class:`Collector` steps the env copies with the behaviour policy and writes every
transition into the members' replay memory; :class:`ExperienceStream` is the iterable
Lightning runs through: replay batches of every member, ``learning.updates_per_step`` of
them per transition a copy collected, forever (``trainer.max_steps`` ends the run). The
meaning of the schedule does not depend on N:

- an *environment step* is one transition of one copy of a member: a step of the copies is
  N of them, and ``env_steps``, the warm-up and the epsilon schedule count transitions;
- ``updates_per_step`` = p / q gradient updates per environment step, exactly: every
  transition earns p, every update costs q, and the copies step whenever less than q is
  left. The integer balance, ``update_credit``, is part of the checkpoint, so a run resumed
  between two updates goes on exactly as the uninterrupted one. p / q = 1: a step of the
  copies is followed by N updates;
- ``learning.n_step`` > 1: each copy's transitions pass through a window of n steps
  (:class:`~rs_lightning.replay.NStepReturns`) before they are stored.

The datamodule's ``state_dict`` holds what a resumed run needs on this side: the copies
mid-episode, the n-step window, the replay memory and the counters.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Callable, NamedTuple

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import IterableDataset

from rs_lightning.engine.behaviour import AccumulatedReturns, EpisodeSettings
from rs_lightning.envs.copies import EnvCopies, make_copies
from rs_lightning.envs.factory import env_problem
from rs_lightning.replay import NStepReturns, ReplayMemory, update_ratio
from rs_lightning.risk.static import N_FEATURES as N_STATIC_FEATURES
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
    """Steps K members' N env copies with a policy and fills the replay memory with their
    transitions, of ``n_step`` steps each, discounted by ``gamma``."""

    def __init__(self, copies: EnvCopies, replay: ReplayMemory, members: int, copies_per_member: int,
                 reward_scale: float, reward_clip: float | None, gamma: float, n_step: int = 1,
                 updates_per_step: Fraction = Fraction(1),
                 settings: EpisodeSettings | None = None,
                 accumulated: AccumulatedReturns | None = None) -> None:
        self.copies = copies
        self.settings = settings  # the copies' risk settings (risk-conditioned runs)
        # objective=static: the copies' (c, gamma^t, b), appended to what is stored and seen;
        # ``best_thresholds`` (the module's) picks an episode's threshold at its start.
        self.accumulated = accumulated
        self.best_thresholds: Callable[[np.ndarray], np.ndarray] | None = None
        self.replay = replay
        self.members = members
        self.copies_per_member = copies_per_member
        self.reward_scale = reward_scale
        self.reward_clip = reward_clip
        self.gamma = gamma
        self.n_step = n_step
        self.window = None if n_step == 1 else NStepReturns(
            n_step, gamma, len(copies), replay.obs.shape[2:])
        self.updates_per_step = updates_per_step
        self.env_steps = 0  # transitions of each member so far
        # Transitions earn updates_per_step.numerator each, an update costs its denominator.
        self.update_credit = 0
        self.episodes = [0] * members
        self.episode_returns = np.zeros(len(copies))
        self.ended_returns: list[list[float]] = [[] for _ in range(members)]
        self.ended_outcomes: list[list[float]] = [[] for _ in range(members)]

    def step(self, policy: Policy) -> int:
        """One step of every copy; returns the transitions each member collected (N)."""
        shape = (self.members, self.copies_per_member)
        obs = self.copies.obs()
        if self.accumulated is not None:
            self.accumulated.resolve(obs, self.best_thresholds)
            obs = self.accumulated.augment(obs)
        grouped = obs.reshape(*shape, *obs.shape[1:])
        if self.settings is None:
            actions = policy(grouped, self.env_steps)
        else:
            actions = policy(grouped, self.env_steps, self.settings)
        step = self.copies.step(actions.reshape(-1))
        learnt = learning_reward(step.reward, self.reward_scale, self.reward_clip)
        next_obs = step.next_obs
        if self.accumulated is not None:
            next_obs = np.concatenate(
                [next_obs, self.accumulated.advance(learnt, step.ended)], axis=-1)
        # Only termination stops bootstrapping; a truncated episode's last state has a value.
        if self.window is None:
            self.replay.add(grouped, actions, learnt.reshape(shape),
                            next_obs.reshape(*shape, *obs.shape[1:]),
                            step.terminated.reshape(shape),
                            np.where(step.terminated, 0.0, self.gamma).reshape(shape))
        else:
            leaving = self.window.push(obs, actions.reshape(-1), learnt, next_obs,
                                       step.terminated, step.ended)
            if leaving is not None:
                self.replay.add(*(field.reshape(*shape, *field.shape[1:]) for field in leaving))
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
        if self.accumulated is not None:
            settings["accumulated"] = self.accumulated.state_dict(chosen)
        return {
            **settings,
            "members": len(chosen),
            "copies_per_member": self.copies_per_member,
            "env_steps": self.env_steps,
            "update_credit": self.update_credit,
            "updates_per_step": [self.updates_per_step.numerator, self.updates_per_step.denominator],
            "n_step": self.n_step,
            "episodes": [self.episodes[k] for k in chosen],
            "episode_returns": torch.from_numpy(self.episode_returns[copies]),
            "ended_returns": [list(self.ended_returns[k]) for k in chosen],
            "ended_outcomes": [list(self.ended_outcomes[k]) for k in chosen],
            "copies": self.copies.state_dict(copies),
            "replay": self.replay.state_dict(chosen),
            **({} if self.window is None else {"n_step_window": self.window.state_dict(copies)}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (state["members"], state["copies_per_member"]) != (self.members, self.copies_per_member):
            raise ValueError("the checkpoint's collector is of another number of members or copies")
        ratio = Fraction(*state.get("updates_per_step", (1, 1)))
        if ratio != self.updates_per_step or state.get("n_step", 1) != self.n_step:
            raise ValueError("the checkpoint's collector has another learning.updates_per_step "
                             "or learning.n_step")
        self.env_steps = state["env_steps"]
        # Checkpoints before updates_per_step held the transitions not yet matched by an update.
        self.update_credit = state.get("update_credit", state.get("pending_updates"))
        self.episodes = list(state["episodes"])
        self.episode_returns = state["episode_returns"].numpy().copy()
        self.ended_returns = [list(r) for r in state["ended_returns"]]
        self.ended_outcomes = [list(o) for o in state["ended_outcomes"]]
        restarted = self.copies.load_state_dict(state["copies"])
        replay = state["replay"]
        if "discount" not in replay:  # written before the replay memory stored discounts
            replay = {**replay, "discount": (1.0 - replay["terminated"]) * self.gamma}
        self.replay.load_state_dict(replay)
        if self.window is not None:
            self.window.load_state_dict(state["n_step_window"])
        if self.settings is not None:
            self.settings.load_state_dict(state["settings"])
        if self.accumulated is not None:
            self.accumulated.load_state_dict(state["accumulated"])
        if restarted:  # the episodes in progress restarted: as if cut by a time limit
            self.episode_returns[:] = 0.0
            reached = state["copies"]["obs"].numpy()
            if self.accumulated is not None:
                reached = np.concatenate([reached, self.accumulated.features()], axis=-1)
                self.accumulated.restart(slice(None))
            if self.window is not None:
                self.window.truncate(reached)


class ExperienceStream(IterableDataset):
    """A replay batch of every member per update, ``collector.updates_per_step`` updates per
    transition collected (module docstring).

    Warm-up: the first ``warmup_steps`` transitions are collected before any update, and
    more until the replay memory holds one (n-step transitions are stored n - 1 steps late);
    the transitions of the step of the copies that crosses it beyond it earn updates.
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
        earned, cost = collector.updates_per_step.numerator, collector.updates_per_step.denominator
        if collector.env_steps < self.warmup_steps or len(collector.replay) == 0:
            # A fresh run (a resumed one is past it).
            while collector.env_steps < self.warmup_steps or len(collector.replay) == 0:
                collector.step(policy)
            collector.update_credit = (collector.env_steps - self.warmup_steps) * earned
        while True:
            while collector.update_credit < cost:
                collector.update_credit += earned * collector.step(policy)
            # Paid before the update runs: a checkpoint after it holds what is left.
            collector.update_credit -= cost
            returns, outcomes = collector.pop_ended_episodes()
            # The transition this update follows: the last one whose credit it spent.
            yield ExperienceBatch(collector.replay.sample(self.batch_size), returns, outcomes,
                                  collector.env_steps - collector.update_credit // earned)


class ExperienceDataModule(pl.LightningDataModule):
    """The members' env copies, replay memory and the stream of batches between them.

    Args:
        env_config: the ``env`` section (``num_envs`` copies per member).
        seeds: the members' seeds: member k's copies are reset with ``seeds[k] + i``, its
            replay memory samples with generator ``seeds[k] + 1``.
    """

    def __init__(self, env_config, batch_size: int, replay_capacity: int, warmup_steps: int,
                 seeds: list[int], n_step: int = 1, updates_per_step: float = 1.0,
                 conditioning=None, static=None) -> None:
        super().__init__()
        self.env_config = env_config
        self.batch_size = batch_size
        self.replay_capacity = replay_capacity
        self.warmup_steps = warmup_steps
        self.n_step = n_step
        self.updates_per_step = update_ratio(updates_per_step)
        self.seeds = list(seeds)
        self.conditioning = conditioning  # RiskConditioning of a risk-conditioned run, or None
        self.static = static  # StaticObjective of an objective=static run, or None
        self.best_thresholds: Callable[[np.ndarray], np.ndarray] | None = None
        self.copies_per_member = int(getattr(env_config, "num_envs", 1))
        self.collector: Collector | None = None
        self.policy: Policy | None = None
        self.problem = env_problem(env_config)
        # objective=static: the replay holds the augmented states (exact next-state features).
        extra = 0 if static is None else N_STATIC_FEATURES
        self.obs_shape = (self.problem.obs_dim + extra,)

    def setup(self, stage: str | None = None) -> None:
        if self.collector is not None:  # called by the user before fit, then by Lightning
            return
        n = self.copies_per_member
        copies = make_copies(self.env_config, copy_seeds(self.seeds, n), groups=len(self.seeds))
        # Bytes only where every stored value is a byte: objective=static appends (c,
        # gamma^t, b), which are not.
        compact = self.problem.obs_uint8 and self.static is None
        replay = ReplayMemory(self.replay_capacity, self.obs_shape,
                              seeds=[seed + 1 for seed in self.seeds],
                              obs_dtype=torch.uint8 if compact else torch.float32)
        settings = None
        if self.conditioning is not None and self.conditioning.acting == "episode":
            settings = EpisodeSettings(self.conditioning, self.seeds, n)
        accumulated = None
        if self.static is not None:
            accumulated = AccumulatedReturns(self.static, self.seeds, n, self.problem.gamma)
        self.collector = Collector(copies, replay, len(self.seeds), n,
                                   getattr(self.env_config, "reward_scale", 1.0),
                                   self.env_config.reward_clip, self.problem.gamma, self.n_step,
                                   self.updates_per_step, settings, accumulated)
        self.collector.best_thresholds = self.best_thresholds

    @property
    def env_steps(self) -> int:
        return self.collector.env_steps if self.collector is not None else 0

    def attach_policy(self, policy: Policy,
                      best_thresholds: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        """The policy that chooses the actions (the module's epsilon-greedy on the utility)
        and, for objective=static, the module's choice of an episode's threshold."""
        self.policy = policy
        self.best_thresholds = best_thresholds
        if self.collector is not None:
            self.collector.best_thresholds = best_thresholds

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
