"""Environment interaction as a Lightning datamodule: K members x N environment copies.

:class:`Collector` steps the env copies with the policy it is handed (the training step's
epsilon-greedy one), writes every transition into the members' replay memory and gives each
update its replay batches, ``learning.updates_per_step`` updates per transition a copy
collected; Lightning's loop hands the training step the collector, forever
(``trainer.max_steps`` ends the run). The meaning of the schedule does not depend on N:

- an *environment step* is one transition of one copy of a member: a step of the copies is
  N of them, and ``env_steps``, the warm-up and the epsilon schedule count transitions;
- ``updates_per_step`` = p / q gradient updates per environment step, exactly: every
  transition earns p, every update costs q, and the copies step whenever less than q is
  left. The integer balance, ``update_credit``, is part of the checkpoint, so a run resumed
  between two updates goes on exactly as the uninterrupted one. p / q = 1: a step of the
  copies is followed by N updates;
- ``learning.n_step`` > 1: each copy's transitions pass through a window of n steps
  (:class:`~rs_lightning.engine.replay.NStepReturns`) before they are stored.

The datamodule's ``state_dict`` holds what a resumed run needs on this side: the copies
mid-episode, the objective's episode state, the n-step window, the replay memory and the
counters.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np
import pytorch_lightning as pl
import torch

from rs_lightning.engine.replay import NStepReturns, ReplayMemory, update_ratio
from rs_lightning.engine.rollout import Policy, Rollout
from rs_lightning.envs.copies import make_copies
from rs_lightning.envs.factory import env_problem, training_env
from rs_lightning.objectives import Objective
from rs_lightning.types import Transitions


class ExperienceBatch(NamedTuple):
    """What one update learns from: a replay batch of every member (fields ``[K, B, ...]``)
    and the episodes that ended since the last update, per member."""

    transitions: Transitions
    episode_returns: tuple[tuple[float, ...], ...]  # undiscounted, unscaled
    episode_outcomes: tuple[tuple[float, ...], ...]  # R_s of each (NaN if the env has none)
    env_steps: int  # environment steps of each member that this update follows


def member_seeds(seed: int, members: int) -> list[int]:
    """The seeds of a run's members: ``seed, seed + 1, ...``."""
    return [seed + k for k in range(members)]


def copy_seeds(seeds: list[int], copies: int) -> list[int]:
    """The reset seed of every env copy, member by member: copy i of the member of seed s is
    reset with s + i (as ``SyncVectorEnv.reset(seed=s)`` seeds N copies)."""
    return [seed + i for seed in seeds for i in range(copies)]


class Collector:
    """Steps K members' N env copies (a :class:`~rs_lightning.engine.rollout.Rollout`) with
    a policy and fills the replay memory with their transitions, of ``n_step`` steps each,
    discounted by ``gamma``; :meth:`experience` is what one update learns from.

    Warm-up: the first ``warmup_steps`` transitions are collected before any update, and
    more until the replay memory holds one (n-step transitions are stored n - 1 steps late);
    the transitions of the step of the copies that crosses it beyond it earn updates.
    """

    def __init__(self, rollout: Rollout, replay: ReplayMemory, gamma: float, n_step: int = 1,
                 updates_per_step: Fraction = Fraction(1), batch_size: int = 32,
                 warmup_steps: int = 0) -> None:
        self.rollout = rollout
        self.replay = replay
        self.gamma = gamma
        self.n_step = n_step
        self.window = None if n_step == 1 else NStepReturns(
            n_step, gamma, len(self.copies), replay.obs.shape[2:], replay.action.shape[2:])
        self.updates_per_step = updates_per_step
        self.batch_size = batch_size
        self.warmup_steps = max(warmup_steps, 1)
        self.env_steps = 0  # transitions of each member so far
        # Transitions earn updates_per_step.numerator each, an update costs its denominator.
        self.update_credit = 0
        self.episodes = [0] * self.members
        self.episode_returns = np.zeros(len(self.copies))
        self.ended_returns: list[list[float]] = [[] for _ in range(self.members)]
        self.ended_outcomes: list[list[float]] = [[] for _ in range(self.members)]

    @property
    def copies(self):
        return self.rollout.copies

    @property
    def members(self) -> int:
        return self.rollout.members

    @property
    def copies_per_member(self) -> int:
        return self.rollout.copies_per_member

    @property
    def episode_state(self):
        return self.rollout.state

    def step(self, policy: Policy) -> int:
        """One step of every copy, stored; returns the transitions each member collected (N)."""
        shape = (self.members, self.copies_per_member)
        step = self.rollout.step(policy, self.env_steps)
        copies = step.copies
        # Only termination stops bootstrapping; a truncated episode's last state has a value.
        if self.window is None:
            obs_shape = step.obs.shape[1:]
            self.replay.add(step.obs.reshape(*shape, *obs_shape),
                            step.actions.reshape(*shape, *step.actions.shape[1:]),
                            step.learnt.reshape(shape), step.reached.reshape(*shape, *obs_shape),
                            copies.terminated.reshape(shape),
                            np.where(copies.terminated, 0.0, self.gamma).reshape(shape))
        else:
            leaving = self.window.push(step.obs, step.actions, step.learnt, step.reached,
                                       copies.terminated, copies.ended)
            if leaving is not None:
                self.replay.add(*(field.reshape(*shape, *field.shape[1:]) for field in leaving))
        self.episode_returns += copies.reward
        if copies.ended.any():
            for j in np.flatnonzero(copies.ended).tolist():
                member = j // self.copies_per_member
                self.ended_returns[member].append(float(self.episode_returns[j]))
                self.ended_outcomes[member].append(float(copies.risk_outcome[j]))
                self.episodes[member] += 1
            self.episode_returns[copies.ended] = 0.0
        self.env_steps += self.copies_per_member
        return self.copies_per_member

    @property
    def warming_up(self) -> bool:
        """The first ``warmup_steps`` transitions, and more until the replay memory holds
        one (n-step transitions are stored n - 1 steps late): no update learns yet."""
        return self.env_steps < self.warmup_steps or len(self.replay) == 0

    def needs_transitions(self) -> bool:
        """Whether the copies step before the next update: during the warm-up, then while
        the update ratio's credit is short of an update's cost (``updates_per_step`` =
        p / q: every transition earns p, every update costs q)."""
        return self.warming_up or self.update_credit < self.updates_per_step.denominator

    def collect(self, policy: Policy) -> None:
        """One step of the copies (:meth:`step`); past the warm-up its transitions earn
        updates (those of the step that crosses it, the ones beyond it)."""
        earned = self.updates_per_step.numerator
        warming_up = self.warming_up
        copies = self.step(policy)
        if not warming_up:
            self.update_credit += earned * copies
        elif not self.warming_up:
            self.update_credit = (self.env_steps - self.warmup_steps) * earned

    def sample(self) -> ExperienceBatch:
        """What the next update learns from: a replay batch of every member and the episodes
        that ended since the last one. The update is paid for here, before it runs: a
        checkpoint after it holds what is left."""
        earned, cost = self.updates_per_step.numerator, self.updates_per_step.denominator
        self.update_credit -= cost
        returns, outcomes = self.pop_ended_episodes()
        # The transition this update follows: the last one whose credit it spent.
        return ExperienceBatch(self.replay.sample(self.batch_size), returns, outcomes,
                               self.env_steps - self.update_credit // earned)

    def experience(self, policy: Policy) -> ExperienceBatch:
        """The steps the next update asks for, then its batch (:meth:`collect`,
        :meth:`sample`)."""
        while self.needs_transitions():
            self.collect(policy)
        return self.sample()

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
        """Counters, books, copies, the objective's episode state and the replay memory;
        ``members`` selects some members (a member's own checkpoint, loadable by a run of
        its seed alone)."""
        chosen = list(range(self.members)) if members is None else list(members)
        copies = self.member_copies(chosen)
        state = self.episode_state
        episode = {} if state.checkpoint_key is None else {
            state.checkpoint_key: state.state_dict(chosen)}
        return {
            **episode,
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
        ratio = Fraction(*state["updates_per_step"])
        if ratio != self.updates_per_step or state["n_step"] != self.n_step:
            raise ValueError("the checkpoint's collector has another learning.updates_per_step "
                             "or learning.n_step")
        self.env_steps = state["env_steps"]
        self.update_credit = state["update_credit"]
        self.episodes = list(state["episodes"])
        self.episode_returns = state["episode_returns"].numpy().copy()
        self.ended_returns = [list(r) for r in state["ended_returns"]]
        self.ended_outcomes = [list(o) for o in state["ended_outcomes"]]
        restarted = self.copies.load_state_dict(state["copies"])
        self.replay.load_state_dict(state["replay"])
        if self.window is not None:
            self.window.load_state_dict(state["n_step_window"])
        episode = self.episode_state
        if episode.checkpoint_key is not None:
            episode.load_state_dict(state[episode.checkpoint_key])
        if restarted:  # the episodes in progress restarted: as if cut by a time limit
            self.episode_returns[:] = 0.0
            reached = state["copies"]["obs"].numpy()
            features = episode.features()
            if features is not None:
                reached = np.concatenate([reached, features], axis=-1)
            episode.restart(slice(None))
            if self.window is not None:
                self.window.truncate(reached)


class ExperienceDataModule(pl.LightningDataModule):
    """The members' env copies, the objective's episode state and the replay memory.

    Args:
        env_config: the ``env`` section (``num_envs`` copies per member).
        objective: what the run optimises (its episode state goes with the copies).
        seeds: the members' seeds: member k's copies are reset with ``seeds[k] + i``, its
            replay memory samples with generator ``seeds[k] + 1``.
    """

    def __init__(self, env_config, objective: Objective, batch_size: int, replay_capacity: int,
                 warmup_steps: int, seeds: list[int], n_step: int = 1,
                 updates_per_step: float = 1.0) -> None:
        super().__init__()
        self.env_config = env_config
        self.objective = objective
        self.batch_size = batch_size
        self.replay_capacity = replay_capacity
        self.warmup_steps = warmup_steps
        self.n_step = n_step
        self.updates_per_step = update_ratio(updates_per_step)
        self.seeds = list(seeds)
        self.copies_per_member = int(getattr(env_config, "num_envs", 1))
        self.collector: Collector | None = None
        self.problem = env_problem(env_config)

    def setup(self, stage: str | None = None) -> None:
        if self.collector is not None:  # called by the user before fit, then by Lightning
            return
        n = self.copies_per_member
        copies = make_copies(training_env(self.env_config), copy_seeds(self.seeds, n),
                             groups=len(self.seeds))
        state = self.objective.episode_state(self.seeds, n, self.problem.gamma)
        # Bytes only where every stored value is a byte: an episode state's features are not.
        compact = self.problem.obs_uint8 and state.stored_features == 0
        replay = ReplayMemory(self.replay_capacity,
                              (self.problem.obs_dim + state.stored_features,),
                              seeds=[seed + 1 for seed in self.seeds],
                              obs_dtype=torch.uint8 if compact else torch.float32,
                              action_shape=self.problem.action_shape)
        rollout = Rollout(copies, state, len(self.seeds), n,
                          getattr(self.env_config, "reward_scale", 1.0),
                          self.env_config.reward_clip)
        self.collector = Collector(rollout, replay, self.problem.gamma, self.n_step,
                                   self.updates_per_step, self.batch_size, self.warmup_steps)

    @property
    def env_steps(self) -> int:
        return self.collector.env_steps if self.collector is not None else 0

    def train_dataloader(self):
        """The collector, once per update: the training step collects and samples through
        it (Lightning iterates any iterable; a DataLoader would only add per-step work)."""
        self.setup()
        return itertools.repeat(self.collector)

    def state_dict(self, members: list[int] | None = None) -> dict[str, Any]:
        if self.collector is None:
            return {}
        # The env id lets a resume refuse a checkpoint of another environment.
        return {"collector": self.collector.state_dict(members), "env_id": self.env_config.id,
                "num_envs": self.copies_per_member}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.setup()
        self.collector.load_state_dict(state_dict["collector"])
