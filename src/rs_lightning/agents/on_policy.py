"""The contract between the rollout loop and an on-policy agent (an actor and a critic of
the state's return law, learned from fixed-length rollouts: A2C, PPO).

The engine (:mod:`rs_lightning.engine.learner`, its rollout path) runs K members' N
environment copies for ``rollout_steps`` (T) steps, asking the agent at every step for
:meth:`OnPolicyAgent.sample`: an action, its log-probability and the critic's atoms; it
bootstraps the rollout's last step and every truncated episode from the critic, computes
generalised advantages (:func:`generalized_advantages`, on the critic's mean), then makes
``epochs`` passes over the N x T steps in ``minibatches`` shuffled minibatches, one gradient
update each (one Lightning step, so ``trainer.max_steps`` counts minibatch updates). The
next rollout starts after the last minibatch, acting with the updated policy.

To add an on-policy agent: a config dataclass derived from :class:`OnPolicyConfig` (which
holds the rollout's settings), a class derived from :class:`OnPolicyAgent`, decorated with
``@register_agent("name", NameConfig)`` (:func:`rs_lightning.agents.base.register_agent`),
and ``conf/agent/name.yaml`` with every field (``name``, ``hidden_sizes``,
``risk_conditioned``, ``rollout_steps``, ``epochs``, ``minibatches``, ``gae_lambda`` and the
agent's own). It implements:

- :meth:`OnPolicyAgent.sample` ``(obs[..., B, D], noise) -> PolicySample(action, log_prob,
  value)``: the behaviour policy's draw, without gradients. ``noise`` is drawn by the engine
  from each member's own generator, so that member k acts as the run of its seed alone and a
  resume repeats the draws: discrete actions get ``noise[..., B, 1]`` uniform in [0, 1)
  (:func:`categorical_sample` turns it and the logits into an action), continuous ones
  ``noise[..., B, d]`` standard normal (``mean + std * noise``). A continuous action may lie
  outside [-1, 1]: the rollout stores it as drawn (its log-probability is of that value) and
  the environment copies get it clipped to the box;
- :meth:`OnPolicyAgent.greedy_action` ``(obs, choose_action)``: the action evaluation takes
  (the policy's mode, or its mean), ``[..., B]`` or ``[..., B, d]``;
- :meth:`OnPolicyAgent.return_distribution` ``(obs) -> [..., B, 1, n]``: the critic's law of
  the return from each state as the law of the one action the agent shows (as the
  actor-critics show Z(s, pi(s))), so that the objectives' rules (the static threshold
  search at an episode's start) and the evaluations read it as any agent's;
- :meth:`OnPolicyAgent.loss` ``(batch, target, choose_action) -> (loss, metrics)``: the
  loss of one minibatch (:class:`~rs_lightning.types.RolloutBatch`; ``target`` is None: an
  on-policy agent keeps no target network; ``choose_action`` is what the objective's
  :meth:`~rs_lightning.objectives.base.Objective.prepare_rollout` gives, by default its
  acting rule at each row's observation, whose ``utility`` names the run's utility).

Members: as for any agent (:mod:`rs_lightning.agents.base`), ``supports_members = True``
where the code treats leading dimensions as independent (the layers of ``agents/base.py``,
reductions over the batch dimension only, a loss ``[K]`` for K stacked members); the loss
must use every parameter in every update.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from rs_lightning.agents.base import MISSING, Agent, AgentConfig, ChooseAction, check_count
from rs_lightning.risk import ReturnDistribution
from rs_lightning.types import PolicySample, RolloutBatch

# Steps of one rollout per copy, passes over it and minibatches per pass: each bounded so
# that a typo cannot ask for days of work before the first update.
MAX_ROLLOUT_STEPS = 1_000_000
MAX_EPOCHS = 10_000
MAX_MINIBATCHES = 1_000_000


@dataclass
class OnPolicyConfig(AgentConfig):
    """The rollout's settings, every on-policy agent's (values in ``conf/agent/<name>.yaml``).

    ``rollout_steps`` (T) steps of each of the ``env.num_envs`` (N) copies make one rollout of
    N x T steps per member; ``epochs`` passes over it, each in ``minibatches`` shuffled
    minibatches of N x T / minibatches steps (a whole number); ``gae_lambda`` is the
    lambda of generalised advantage estimation (1: Monte Carlo returns bootstrapped at the
    rollout's end, 0: one-step temporal differences)."""

    rollout_steps: int = MISSING
    epochs: int = MISSING
    minibatches: int = MISSING
    gae_lambda: float = MISSING

    def check(self) -> None:
        super().check()
        check_count("rollout_steps", self.rollout_steps, 1, MAX_ROLLOUT_STEPS)
        check_count("epochs", self.epochs, 1, MAX_EPOCHS)
        check_count("minibatches", self.minibatches, 1, MAX_MINIBATCHES)
        if not (isinstance(self.gae_lambda, (int, float)) and 0.0 <= self.gae_lambda <= 1.0):
            raise ValueError(f"agent.gae_lambda: must be a number in [0, 1], got "
                             f"{self.gae_lambda!r}")

    def minibatch_size(self, copies: int) -> int:
        """Steps per minibatch of a rollout of ``copies`` copies (ValueError naming
        ``agent.minibatches`` unless they divide its N x T steps)."""
        steps = copies * self.rollout_steps
        if steps % self.minibatches:
            raise ValueError(
                f"agent.minibatches: must divide a rollout's env.num_envs x agent.rollout_steps "
                f"= {copies} x {self.rollout_steps} = {steps} steps, got {self.minibatches}")
        return steps // self.minibatches


class OnPolicyAgent(Agent):
    """An actor and a critic of the state's return law, learned from rollouts (module
    docstring)."""

    config: OnPolicyConfig
    # What the engine builds for it: the rollout path (collector, rollout buffer, no target).
    on_policy: ClassVar[bool] = True

    @abstractmethod
    def sample(self, obs: Tensor, noise: Tensor) -> PolicySample:
        """The behaviour policy's action for each state of ``obs[..., B, D]`` with its
        log-probability and the critic's atoms ``[..., B, n]`` (module docstring for
        ``noise``); called without gradients."""

    @abstractmethod
    def greedy_action(self, obs: Tensor, choose_action: ChooseAction) -> Tensor:
        """The evaluation's action in each state: ``[..., B]`` (continuous: ``[..., B, d]``)."""

    @abstractmethod
    def return_distribution(self, obs: Tensor) -> ReturnDistribution:
        """The critic's law of the return from each state: ``[..., B, 1, n]``."""

    @abstractmethod
    def loss(self, batch: RolloutBatch, target: None, choose_action: ChooseAction
             ) -> tuple[Tensor, dict[str, Tensor]]:
        """The loss of one minibatch and metrics to log (detached; module docstring)."""

    def sample_action(self, obs: Tensor, noise: Tensor) -> Tensor:
        return self.sample(obs, noise).action


def categorical_sample(logits: Tensor, uniform: Tensor) -> tuple[Tensor, Tensor]:
    """An action of the softmax law of ``logits[..., A]`` by inverting its distribution
    function at ``uniform[..., 1]`` (in [0, 1)), and its log-probability: ``([...],
    [...])``."""
    log_probs = torch.log_softmax(logits, dim=-1)
    below = torch.cumsum(log_probs.exp(), dim=-1) <= uniform
    action = below.sum(-1).clamp(max=logits.shape[-1] - 1)
    return action, log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1)


def gaussian_log_prob(action: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """log N(action; mean, diag(exp(log_std))^2) summed over the last dimension -> ``[...]``."""
    z = (action - mean) * torch.exp(-log_std)
    return (-0.5 * z.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


def generalized_advantages(reward: Tensor, value: Tensor, next_value: Tensor,
                           terminated: Tensor, ended: Tensor, gamma: float, lam: float
                           ) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al., 2016) over a rollout whose first
    dimension is time: every field ``[T, ...]``.

    ``value`` is V(s_t); ``next_value`` is V of the state step t reached (for a step that
    ended its episode, the episode's last state, not the next episode's start; at the
    rollout's last step, the state it stopped in); ``terminated`` marks the steps that ended
    in a terminal state (no future: nothing bootstrapped), ``ended`` those that ended their
    episode either way (terminated or truncated by a time limit: the next step belongs to
    another episode). Then

        delta_t = r_t + gamma (1 - terminated_t) V(s'_t) - V(s_t)
        A_t     = delta_t + gamma lambda (1 - ended_t) A_{t+1},   A_T = 0

    and the lambda-return ``A_t + V(s_t)``. Returns ``(advantage, returns)``, ``[T, ...]``.
    """
    delta = reward + gamma * (1.0 - terminated) * next_value - value
    carry = gamma * lam * (1.0 - ended)
    advantage = torch.empty_like(delta)
    running = torch.zeros_like(delta[0])
    for t in range(delta.shape[0] - 1, -1, -1):
        running = delta[t] + carry[t] * running
        advantage[t] = running
    return advantage, advantage + value
