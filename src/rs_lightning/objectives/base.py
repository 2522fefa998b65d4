"""The objective protocol: what a run optimises, as one plug-in.

An objective owns everything that differs between what a run can optimise (the per-decision
utility, the risk-conditioned utility, the static objective, ...):

- :meth:`Objective.network_problem`: what the network sees (features appended to the
  observation);
- :meth:`Objective.episode_state`: what each environment copy carries through its episode
  (a drawn setting, the accumulated return and threshold), with its checkpoint;
- :meth:`Objective.acting_rule`: the network's input and the argmax rule for the
  observations the copies show;
- :meth:`Objective.batch_state` and :meth:`Objective.prepare_batch`: what a replay batch
  becomes before the loss, and the rule that picks its target actions
  (:meth:`Objective.prepare_rollout`: the same for an on-policy agent's minibatch);
- :meth:`Objective.at`, :meth:`Objective.monte_carlo_summary` and
  :meth:`Objective.exact_summary`: evaluation at another setting, and the figures an
  evaluation adds.

The engine and the evaluation call these and never ask which objective runs. A new
objective is one module of this package (a subclass decorated with
:func:`register_objective`) and one file in ``conf/objective/``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar

import numpy as np
from torch import Tensor

from rs_lightning.risk import ReturnDistribution, Utility
from rs_lightning.types import Problem, RolloutBatch, Transitions

# Observations (on the network's device) -> Z(s, a): a network's return_distribution.
Network = Callable[[Tensor], ReturnDistribution]

OBJECTIVES: dict[str, type["Objective"]] = {}


def register_objective(name: str):
    """Class decorator: ``objective=name`` runs this class."""

    def register(cls: type[Objective]) -> type[Objective]:
        if name in OBJECTIVES:
            raise ValueError(f"objective {name!r} is registered twice")
        cls.name = name
        OBJECTIVES[name] = cls
        return cls

    return register


class EpisodeState:
    """What each of K members' N environment copies carries through its episode; this base
    carries nothing. Copies are indexed flat, member by member (``k * N + i``).

    ``stored_features``: values appended to every observation stored in the replay memory
    (their values at each transition's two states); ``checkpoint_key``: where the state lives
    in the collector's checkpoint (None: nothing to save)."""

    stored_features: int = 0
    checkpoint_key: ClassVar[str | None] = None

    def observe(self, obs: np.ndarray, network: Network, device) -> np.ndarray:
        """The copies' observations ``obs[M, D]`` as the policy sees and the replay stores
        them (``[M, D + stored_features]``). ``network`` may be asked about copies whose
        episode starts (one forward pass)."""
        return obs

    def advance(self, reward: np.ndarray, ended: np.ndarray) -> np.ndarray | None:
        """One step of every copy with learning rewards ``reward[M]``; ``ended[M]`` marks
        the copies whose episode ended (their next episode starts). Returns the stored
        features of the states reached, before any restart (``[M, stored_features]``), or
        None when there are none."""
        return None

    def episode_constants(self) -> np.ndarray | None:
        """What is fixed for each copy's episode once it has started ``[M, ...]`` (a copy
        of it), or None."""
        return None

    def features(self) -> np.ndarray | None:
        """The stored features of the copies' current states ``[M, stored_features]``."""
        return None

    def restart(self, copies) -> None:
        """Start new episodes in ``copies`` (a mask, indices or a slice)."""

    def state_dict(self, members: list[int]) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class BatchState:
    """What the learner keeps to prepare replay batches (the generators of drawn settings);
    this base keeps nothing. Its state is part of the module's checkpoint."""

    def state_dict(self, members: list[int]) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class Objective(ABC):
    """What a run optimises (module docstring). ``utility`` is the run's own setting."""

    name: ClassVar[str]
    # Whether the greedy action depends on the observation alone, so that a grid world's
    # policy is a table of cells and its exact return laws can be computed.
    observation_markov: ClassVar[bool] = True
    # Whether it needs a return law (not DQN's point value).
    needs_distribution: ClassVar[bool] = False
    # Why it cannot run a continuous-action agent (an actor-critic); "" where it can.
    refuses_continuous_actions: ClassVar[str] = ""

    def __init__(self, utility: Utility) -> None:
        self.utility = utility

    @classmethod
    def from_config(cls, utility: Utility, train) -> Objective:
        """The objective of a run: its utility and the typed config ``train``
        (:class:`rs_lightning.config.schema.TrainConfig`), whose own section it reads; a bad
        value raises :class:`~rs_lightning.errors.ConfigError` naming the key."""
        return cls(utility)

    def network_problem(self, problem: Problem) -> Problem:
        """The problem as the network sees it (features appended to the observation)."""
        return problem

    def episode_state(self, seeds: list[int], copies: int, gamma: float,
                      training: bool = True) -> EpisodeState:
        """The episode state of ``copies`` copies of each member of ``seeds`` (an
        evaluation's: ``training`` False, one member of the run's seed)."""
        return EpisodeState()

    @abstractmethod
    def acting_rule(self, obs: Tensor, state: EpisodeState, network: Network):
        """``(network input, choose_action)`` for the observations ``obs[..., B, D']`` the
        copies show (as :meth:`EpisodeState.observe` made them), acting as ``state`` (made
        by :meth:`episode_state`) says."""

    def start_rule(self, obs: Tensor, network: Network):
        """``(network input, choose_action)`` for plain observations ``obs[..., B, D]``
        taken as an episode's start at the run's own setting (a grid world's policy table,
        the exact evaluation of a greedy policy)."""
        return self.acting_rule(obs, EpisodeState(), network)

    def batch_state(self, seeds: list[int]) -> BatchState:
        return BatchState()

    @abstractmethod
    def prepare_batch(self, transitions: Transitions, state: BatchState):
        """``(transitions, choose_action)``: a replay batch of every member ``[K, B, ...]``
        as the loss takes it, and the rule picking its target actions."""

    def prepare_rollout(self, batch: RolloutBatch, state: BatchState):
        """``(batch, choose_action)``: a minibatch of every member's rollout ``[K, B, ...]``
        (its observations as the policy saw them) as an on-policy loss takes it, and the rule
        whose utility it optimises (here the run's own, the same for every row)."""
        return batch, self.utility.greedy

    def at(self, utility: Utility) -> Objective:
        """This objective acting on another setting (an evaluation), or ValueError in one
        line when it cannot."""
        return type(self)(utility)

    def monte_carlo_summary(self, discounted: np.ndarray, constants: np.ndarray | None,
                            generator: np.random.Generator) -> dict[str, Any]:
        """What an evaluation adds to its Monte Carlo figures: ``discounted`` holds each
        episode's discounted return (environment units), ``constants`` each episode's
        :meth:`EpisodeState.episode_constants` (None where the state has none);
        ``generator`` is the evaluation's own (for a bootstrap)."""
        return {}

    def exact_summary(self, references, greedy, monte_carlo: dict[str, Any]) -> dict[str, Any]:
        """The exact figures of an evaluation on a world small enough for them:
        ``references`` answers ``policy_metrics(greedy, utility)``,
        ``objective_references(greedy, utility)`` and ``static_references(utility)`` (each
        ``{}`` off the tabular worlds); ``monte_carlo`` is the evaluation so far."""
        return {**references.policy_metrics(greedy, self.utility),
                **references.objective_references(greedy, self.utility)}
