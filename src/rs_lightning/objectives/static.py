"""The static objective: U of the whole episode's discounted return S = sum_t gamma^t r_t.

It is Markov on the augmented state (s, c, gamma^t, b) (Bäuerle & Ott 2011): c the
discounted return accumulated so far, gamma^t the discount reached and b the thresholds
fixed for the episode (one per level of the measure: one for var and cvar, m for a spectral
measure); the rules and their maths are in :mod:`rs_lightning.risk.static`. Here is what a
run carries: each copy's (c, gamma^t, b), appended to what the replay memory stores and the
network sees, and the choice of an episode's thresholds at its start.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rs_lightning.errors import ConfigError
from rs_lightning.objectives.base import (
    EpisodeState,
    Network,
    Objective,
    register_objective,
)
from rs_lightning.risk import ReturnDistribution, Utility, from_samples
from rs_lightning.risk.static import MAX_CANDIDATES, StaticObjective, static_advantage

# Tags the generators of the episodes' thresholds.
THRESHOLD_STREAM = 0x7B5E
# Bootstrap resamples behind the standard error of a Monte Carlo utility.
BOOTSTRAP_RESAMPLES = 200
CANDIDATE_ROWS_PER_PASS = 8192


def start_input(static: StaticObjective, obs: Tensor, thresholds: Tensor) -> Tensor:
    """Plain observations ``obs[..., D]`` as an episode's start with thresholds
    ``[..., m]`` (or ``[...]`` when m is 1): ``[..., D + 2 + m]``."""
    zeros = torch.zeros(obs.shape[:-1], dtype=thresholds.dtype, device=thresholds.device)
    return torch.cat([obs, static.features(zeros, torch.ones_like(zeros), thresholds)
                      .to(obs.device)], dim=-1)


def best_thresholds(static: StaticObjective, network: Network, obs: Tensor) -> Tensor:
    """The thresholds b maximising max_a of the threshold value at an episode's start, for
    each plain observation ``obs[..., D]`` -> ``[..., m]`` (float64): one forward pass over
    every candidate (:meth:`StaticObjective.candidate_thresholds`). ``network`` maps
    augmented observations ``[..., D + 2 + m]`` to Z."""
    candidates = static.candidate_thresholds(obs.device)  # [G, m]
    count = candidates.shape[0]
    if count == 1:
        return candidates[0].expand(*obs.shape[:-1], -1).clone()
    # A bounded number of rows per pass (an evaluation starts 1,000 episodes at once, and a
    # UMDQN network evaluates a lattice per row).
    per_pass = max(1, CANDIDATE_ROWS_PER_PASS // count)
    if obs.shape[-2] > per_pass:
        return torch.cat([best_thresholds(static, network, part)
                          for part in obs.split(per_pass, dim=-2)], dim=-2)
    grid = candidates.expand(*obs.shape[:-1], *candidates.shape)  # [..., G, m]
    rows = obs.unsqueeze(-2).expand(*obs.shape[:-1], count, obs.shape[-1])
    augmented = start_input(static, rows, grid)  # [..., G, D + 2 + m]
    # The networks take one batch dimension (after the members'): rows and candidates as one.
    flat = network(augmented.reshape(*obs.shape[:-2], -1, augmented.shape[-1]))
    dist = ReturnDistribution(*(x.reshape(*grid.shape[:-1], *x.shape[-2:]) for x in flat))
    value = static.threshold_values(dist, grid).amax(-1)  # [..., G]
    return candidates[value.argmax(-1)]


class AccumulatedReturns(EpisodeState):
    """Each copy's (c, gamma^t, b) in learning units, for ``copies`` copies of each of the
    members of ``seeds``.

    A copy whose episode starts gets c = 0, gamma^0 = 1 and thresholds still to choose
    (``pending``): :meth:`observe` draws them from member k's generator, in the order of its
    copies: with probability ``uniform_share`` uniform over the support (m values, sorted),
    else the best ones at the start state (:func:`best_thresholds`). An evaluation uses a
    share of 0.
    """

    checkpoint_key = "accumulated"

    def __init__(self, objective: StaticObjective, seeds: list[int], copies: int, gamma: float,
                 uniform_share: float | None = None) -> None:
        self.objective = objective
        self.copies = copies
        self.gamma = gamma
        self.uniform_share = objective.uniform_share if uniform_share is None else uniform_share
        self.generators = [np.random.default_rng([seed, THRESHOLD_STREAM]) for seed in seeds]
        total = len(seeds) * copies
        self.stored_features = objective.n_features
        self.accumulated = np.zeros(total)
        self.discount = np.ones(total)
        self.threshold = np.zeros((total, objective.n_thresholds))
        self.pending = np.ones(total, dtype=bool)

    def features(self) -> np.ndarray:
        """The copies' augmented inputs ``[M, 2 + m]`` (float32)."""
        return self.objective.features(torch.from_numpy(self.accumulated),
                                       torch.from_numpy(self.discount),
                                       torch.from_numpy(self.threshold)).numpy()

    def episode_constants(self) -> np.ndarray:
        """Each copy's thresholds b ``[M, m]`` (learning units)."""
        return self.threshold.copy()

    def observe(self, obs: np.ndarray, network: Network, device) -> np.ndarray:
        """``obs[M, D]`` with each copy's (c, gamma^t, b) appended -> ``[M, D + 2 + m]``,
        after choosing the thresholds of the copies whose episode starts."""
        self.resolve(obs, lambda grouped: best_thresholds(
            self.objective, network,
            torch.from_numpy(grouped).to(device)).cpu().numpy())
        return self.augment(obs)

    def augment(self, obs: np.ndarray) -> np.ndarray:
        """``obs[M, D]`` with the copies' (c, gamma^t, b) appended -> ``[M, D + 2 + m]``."""
        return np.concatenate([np.asarray(obs, dtype=np.float32), self.features()], axis=-1)

    def resolve(self, obs: np.ndarray, best) -> None:
        """Choose the thresholds of the copies whose episode starts at ``obs[M, D]``;
        ``best(obs[K, N, D]) -> [K, N, m]`` is called once, if any of them needs it."""
        if not self.pending.any():
            return
        members = len(self.generators)
        if not self.objective.has_threshold:
            self.threshold[self.pending] = 0.0
            self.pending[:] = False
            return
        low, high = self.objective.return_min, self.objective.return_max
        m = self.objective.n_thresholds
        drawn: dict[int, np.ndarray] = {}
        for j in np.flatnonzero(self.pending).tolist():  # member by member, copy by copy
            generator = self.generators[j // self.copies]
            uniform = generator.random()
            value = generator.uniform(low, high) if m == 1 else np.sort(
                generator.uniform(low, high, size=m))
            if uniform < self.uniform_share:
                drawn[j] = value
        if len(drawn) < int(self.pending.sum()):
            grouped = np.asarray(obs, dtype=np.float32).reshape(members, self.copies, -1)
            chosen = np.asarray(best(grouped), dtype=np.float64).reshape(-1, m)
        for j in np.flatnonzero(self.pending).tolist():
            self.threshold[j] = drawn[j] if j in drawn else chosen[j]
        self.pending[:] = False

    def advance(self, reward: np.ndarray, ended: np.ndarray) -> np.ndarray:
        self.accumulated = self.accumulated + self.discount * reward
        self.discount = self.discount * self.gamma
        reached = self.features()
        if ended.any():
            self.restart(ended)
        return reached

    def restart(self, copies) -> None:
        self.accumulated[copies] = 0.0
        self.discount[copies] = 1.0
        self.threshold[copies] = 0.0
        self.pending[copies] = True

    def state_dict(self, members: list[int]) -> dict[str, Any]:
        rows = [k * self.copies + i for k in members for i in range(self.copies)]
        return {"generators": [self.generators[k].bit_generator.state for k in members],
                **{name: getattr(self, name)[rows].tolist()
                   for name in ("accumulated", "discount", "threshold", "pending")}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for generator, generator_state in zip(self.generators, state["generators"]):
            generator.bit_generator.state = generator_state
        for name in ("accumulated", "discount"):
            setattr(self, name, np.asarray(state[name], dtype=np.float64))
        # [M, m] (a flat list of one threshold per copy, as written when there was only one)
        self.threshold = np.asarray(state["threshold"], dtype=np.float64).reshape(
            len(self.accumulated), -1)
        self.pending = np.asarray(state["pending"], dtype=bool)


def _mean_thresholds(constants: np.ndarray) -> float | list[float]:
    """The episodes' mean threshold (learning units); one per level with several."""
    means = np.asarray(constants, dtype=np.float64).reshape(len(constants), -1).mean(0)
    return float(means[0]) if len(means) == 1 else means.tolist()


@register_objective("static")
class Static(Objective):
    """The static rule at each row's own (c, gamma^t, b) (:mod:`rs_lightning.risk.static`)."""

    # A static policy depends on (c, gamma^t, b), not on the observation alone.
    observation_markov = False
    needs_distribution = True  # its rules read the law's tail
    refuses_continuous_actions = (
        "its acting rule is an argmax over a finite set of actions' laws at the augmented "
        "state (the threshold rule), which an actor does not give; an actor would need a "
        "static loss of its own")

    def __init__(self, utility: Utility, static: StaticObjective) -> None:
        super().__init__(utility)
        self.static = static

    @classmethod
    def from_config(cls, utility, train) -> Static:
        section = train.static_objective  # its thresholds
        static = StaticObjective(utility, train.env.return_min, train.env.return_max,
                                 section.uniform_share, section.thresholds)
        levels = static.n_thresholds
        candidates = math.comb(section.thresholds + levels - 1, levels)
        if static.has_threshold and candidates > MAX_CANDIDATES:
            raise ConfigError("static_objective.thresholds", (
                f"{section.thresholds} values for each of the measure's {levels} levels make "
                f"{candidates:,} threshold vectors to search at every episode's start (at most "
                f"{MAX_CANDIDATES:,}); use fewer values or fewer levels"))
        return cls(utility, static)

    def network_problem(self, problem):
        return dataclasses.replace(problem, obs_dim=problem.obs_dim + self.static.n_features)

    def episode_state(self, seeds, copies, gamma, training=True) -> AccumulatedReturns:
        return AccumulatedReturns(self.static, seeds, copies, gamma,
                                  uniform_share=None if training else 0.0)

    def acting_rule(self, obs, state, network):
        return obs, self.static.choose_action_at(obs)  # each row's own (c, gamma^t, b)

    def start_rule(self, obs, network):
        """A plain observation as an episode's start, with its best threshold."""
        return self.acting_rule(
            start_input(self.static, obs, best_thresholds(self.static, network, obs)), None,
            network)

    def prepare_batch(self, transitions, state):
        # Each target action by its next state's (c, gamma^t, b).
        return transitions, self.static.choose_action_at(transitions.next_obs)

    def prepare_rollout(self, batch, state):
        """Each row's advantage for the static objective at its own (c, gamma^t, b), which
        the policy saw: :func:`~rs_lightning.risk.static.static_advantage` of the return
        the rollout observed from it (``batch.returns``: with ``agent.gae_lambda`` 1 the
        Monte Carlo return, bootstrapped from the critic's mean only where the rollout cut
        the episode) against the critic's atoms when it was collected."""
        accumulated, discount, threshold = self.static.decode(batch.obs)
        advantage = static_advantage(self.static, batch.returns, batch.value, accumulated,
                                     discount, threshold)
        return (batch._replace(advantage=advantage.to(batch.advantage.dtype)),
                self.static.choose_action_at(batch.obs))

    def at(self, utility: Utility) -> Static:
        raise ValueError("a run of objective=static is evaluated at its own setting only "
                         "(its network learned the laws of its own rule)")

    def monte_carlo_summary(self, discounted, constants, generator) -> dict[str, Any]:
        """``mc_static_utility``: U of the discounted episode return (environment units),
        its bootstrap standard error ``mc_static_utility_stderr`` and the mean threshold b
        the episodes started with (``static_threshold``, learning units)."""
        utility = self.utility
        values = torch.as_tensor(discounted, dtype=torch.float64)
        picks = torch.from_numpy(generator.integers(values.numel(),
                                                    size=(BOOTSTRAP_RESAMPLES, values.numel())))
        resampled = utility(from_samples(values[picks]))
        return {
            "objective": "static",
            "mc_static_utility": float(utility(from_samples(values))),
            "mc_static_utility_stderr": float(resampled.std()),
            "static_threshold": _mean_thresholds(constants),
        }

    def exact_summary(self, references, greedy, monte_carlo) -> dict[str, Any]:
        """The exact static optimum and its gap to the Monte Carlo static utility (the
        policy, not cell-Markov, is not evaluated exactly)."""
        summary = dict(references.static_references(self.utility))
        if "static_optimum" in summary:
            summary["mc_static_gap"] = summary["static_optimum"] - monte_carlo["mc_static_utility"]
        return summary

