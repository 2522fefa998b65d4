"""Environment interaction as a Lightning datamodule: K members x N environment copies.

:class:`Collector` steps the env copies with the behaviour policy it owns
(:class:`~rs_lightning.engine.behaviour.BehaviourPolicy`: the members, the objective's acting
rule and the exploration rule) and writes every step into its buffer, one of two
implementations of :class:`Buffer`: a replay memory (:class:`~rs_lightning.engine.replay.
ReplayBuffer`: an update samples, ``learning.updates_per_step`` updates per transition a copy
collected) or fixed-length rollouts (:class:`~rs_lightning.engine.rollout_buffer.
RolloutBuffer`: an update iterates over minibatches). :meth:`Collector.experience` is what one
update learns from: the steps its buffer asks for, then its batch. Lightning's loop hands the
training step the collector, forever (``trainer.max_steps`` ends the run). It never calls the
LightningModule: the policy holds the members the learner updates.

An *environment step* is one transition of one copy of a member: a step of the copies is N
of them, and ``env_steps``, the warm-up and the epsilon schedule count transitions (the
meaning of the schedule does not depend on N).

The datamodule's ``state_dict`` holds what a resumed run needs on this side: the copies
mid-episode, the objective's episode state, the buffer and the counters.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, NamedTuple, Protocol

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.exceptions import SIGTERMException
from torch import Tensor

from rs_lightning.engine.behaviour import BehaviourPolicy, Draw
from rs_lightning.engine.replay import ReplayBuffer, ReplayMemory, update_ratio
from rs_lightning.engine.rollout import Rollout, RolloutStep
from rs_lightning.engine.rollout_buffer import RolloutBuffer
from rs_lightning.envs.copies import make_copies
from rs_lightning.envs.factory import env_problem, training_env
from rs_lightning.types import RolloutBatch, Transitions


class ExperienceBatch(NamedTuple):
    """What one update learns from: a batch of every member (fields ``[K, B, ...]``: replay
    transitions, or a rollout's minibatch) and the episodes that ended since the last update,
    per member."""

    batch: Transitions | RolloutBatch
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


class Buffer(Protocol):
    """Where the collector writes the steps of the copies and what an update reads:
    :class:`~rs_lightning.engine.replay.ReplayBuffer` (sampled) or
    :class:`~rs_lightning.engine.rollout_buffer.RolloutBuffer` (iterated)."""

    def needs_steps(self, env_steps: int) -> bool:
        """Whether the copies step before the next update (``env_steps`` of each member so far)."""

    def store(self, step: RolloutStep, draw: Draw, env_steps: int) -> None:
        """One step of every copy, taken after ``env_steps`` environment steps."""

    def next_batch(self, env_steps: int) -> tuple[Transitions | RolloutBatch, int]:
        """The next update's batch ``[K, B, ...]`` and the environment step it follows."""

    def rewards(self) -> Tensor:
        """The learning rewards held, ``[K, ...]``."""

    def truncate(self, reached: np.ndarray) -> None:
        """The copies' episodes restarted (a resume), cut as by a time limit at ``reached``."""

    def state_dict(self, members: list[int], copies: list[int]) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Collector:
    """Steps K members' N env copies (a :class:`~rs_lightning.engine.rollout.Rollout`) with
    the behaviour policy it owns and fills its buffer; :meth:`experience` is what one update
    learns from (module docstring)."""

    def __init__(self, rollout: Rollout, buffer: Buffer, policy: BehaviourPolicy) -> None:
        self.rollout = rollout
        self.buffer = buffer
        self.policy = policy
        self.env_steps = 0  # transitions of each member so far
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

    @property
    def replay(self) -> ReplayMemory:
        """The replay memory (a replay buffer's)."""
        return self.buffer.memory

    def experience(self, stop: Callable[[], bool] | None = None) -> ExperienceBatch:
        """What the next update learns from: the steps of the copies its buffer asks for
        (first a replay memory's warm-up, or a whole rollout), then its batch and the
        episodes that ended since the last update. ``stop``, asked before every step of the
        copies, ends the collection with SIGTERMException when it says so."""
        while self.buffer.needs_steps(self.env_steps):
            if stop is not None and stop():
                raise SIGTERMException()  # saved and reported as at the end of a step
            self.collect()
        batch, env_steps = self.buffer.next_batch(self.env_steps)
        returns, outcomes = self.pop_ended_episodes()
        return ExperienceBatch(batch, returns, outcomes, env_steps)

    def collect(self) -> int:
        """One step of every copy: observe (the objective's episode state augments), ask
        the policy (one forward pass for every member and copy), step the copies and store;
        returns the transitions each member collected (N)."""
        obs = self.rollout.observe(self.policy)
        draw = self.policy.draw(obs, self.env_steps, self.rollout.state)
        step = self.rollout.advance(obs, draw.actions)
        self.buffer.store(step, draw, self.env_steps)
        copies = step.copies
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
        """Counters, books, copies, the objective's episode state and the buffer;
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
            "episodes": [self.episodes[k] for k in chosen],
            "episode_returns": torch.from_numpy(self.episode_returns[copies]),
            "ended_returns": [list(self.ended_returns[k]) for k in chosen],
            "ended_outcomes": [list(self.ended_outcomes[k]) for k in chosen],
            "copies": self.copies.state_dict(copies),
            **self.buffer.state_dict(chosen, copies),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (state["members"], state["copies_per_member"]) != (self.members, self.copies_per_member):
            raise ValueError("the checkpoint's collector is of another number of members or copies")
        self.buffer.load_state_dict(state)
        self.env_steps = state["env_steps"]
        self.episodes = list(state["episodes"])
        self.episode_returns = state["episode_returns"].numpy().copy()
        self.ended_returns = [list(r) for r in state["ended_returns"]]
        self.ended_outcomes = [list(o) for o in state["ended_outcomes"]]
        restarted = self.copies.load_state_dict(state["copies"])
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
            self.buffer.truncate(reached)


class ExperienceDataModule(pl.LightningDataModule):
    """The members' env copies, the objective's episode state and the buffer, with the
    behaviour policy that acts on them.

    Args:
        env_config: the ``env`` section (``num_envs`` copies per member).
        policy: the behaviour policy (its objective's episode state goes with the copies).
        seeds: the members' seeds: member k's copies are reset with ``seeds[k] + i``, its
            buffer samples (or shuffles) with generator ``seeds[k] + 1``.
        learning: the ``learning`` section (the replay memory's settings).
        rollouts: an on-policy agent's config (:class:`~rs_lightning.agents.on_policy.
            OnPolicyConfig`: the rollouts' settings), or None: a replay memory.
    """

    def __init__(self, env_config, policy: BehaviourPolicy, seeds: list[int], learning,
                 rollouts=None) -> None:
        super().__init__()
        self.env_config = env_config
        self.policy = policy
        self.objective = policy.objective
        self.learning = learning
        self.rollouts = rollouts
        self.seeds = list(seeds)
        self.copies_per_member = int(getattr(env_config, "num_envs", 1))
        self.collector: Collector | None = None
        self.problem = env_problem(env_config)

    def setup(self, stage: str | None = None) -> None:
        if self.collector is not None:  # called by the user before fit, then by Lightning
            return
        n = self.copies_per_member
        # The networks' device (env.backend=torch keeps the copies there): the trainer's
        # before fit has moved the members, the members' when set up by hand.
        device = self.trainer.strategy.root_device if self.trainer is not None \
            else self.policy.device
        copies = make_copies(training_env(self.env_config), copy_seeds(self.seeds, n),
                             groups=len(self.seeds), device=device)
        state = self.objective.episode_state(self.seeds, n, self.problem.gamma)
        rollout = Rollout(copies, state, len(self.seeds), n,
                          getattr(self.env_config, "reward_scale", 1.0),
                          self.env_config.reward_clip)
        self.collector = Collector(rollout, self._buffer(state), self.policy)

    def _buffer(self, state) -> Buffer:
        n, learning, gamma = self.copies_per_member, self.learning, self.problem.gamma
        if self.rollouts is not None:
            policy = self.policy
            return RolloutBuffer(self.seeds, n, self.rollouts.rollout_steps,
                                 self.rollouts.epochs, self.rollouts.minibatches, gamma,
                                 self.rollouts.gae_lambda,
                                 critic=lambda reached: policy.bootstrap(reached, state))
        # Bytes only where every stored value is a byte: an episode state's features are not.
        compact = self.problem.obs_uint8 and state.stored_features == 0
        memory = ReplayMemory(learning.replay_capacity,
                              (self.problem.obs_dim + state.stored_features,),
                              seeds=[seed + 1 for seed in self.seeds],
                              obs_dtype=torch.uint8 if compact else torch.float32,
                              action_shape=self.problem.action_shape)
        return ReplayBuffer(memory, n, gamma, learning.n_step,
                            update_ratio(learning.updates_per_step), learning.batch_size,
                            learning.warmup_steps)

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
