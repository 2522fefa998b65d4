"""PPO (Schulman et al., 2017) with a distributional critic: a policy improved by the clipped
surrogate on rollouts of its own, and a critic of the quantiles of the return from a state.

For a minibatch of steps collected by the policy pi_old (:class:`~rs_lightning.types.
RolloutBatch`), with r = pi(a | s) / pi_old(a | s) and the advantage A normalised over the
minibatch, the loss is

    L = E[max(-r A, -clip(r, 1 - eps, 1 + eps) A)]                  the clipped surrogate
      + c_v E[sum_i rho_kappa_tau_i(G - theta_i(s))] / N            the quantile critic
      - c_e E[H(pi(. | s))]                                        the entropy bonus

with theta_i(s) the critic's N quantiles at the fractions tau_i = (2i + 1) / (2N), fitted to
the lambda-return G by the quantile Huber loss (:mod:`rs_lightning.agents.quantile_loss`):
with ``gae_lambda`` 1 the Monte Carlo return, whose quantiles the critic then learns. The
engine's generalised advantages run on the critic's mean; risk enters through the objective,
which may replace the advantage (``objective=static``: the static objective's own,
:func:`rs_lightning.risk.static.static_advantage`). Gradient clipping is the engine's
(``learning.grad_clip_norm``).

Actions: a softmax policy over discrete actions; for a box [-1, 1]^d a Gaussian of a
state-dependent mean and a state-independent log standard deviation (as Stable-Baselines3's
PPO), its draws clipped to the box by the environment copies (the log-probability is of the
draw) and its mean clipped for the greedy action.

The agent's law of a state, :meth:`PPO.return_distribution`, is the critic's: the law of the
return from the state under the current policy, shown as the law of the one action the
policy takes (``[..., B, 1, N]``), which the static objective's threshold search at an
episode's start reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, nn

from rs_lightning.agents.base import MISSING, ChooseAction, register_agent
from rs_lightning.agents.networks import state_network
from rs_lightning.agents.on_policy import (
    OnPolicyAgent,
    OnPolicyConfig,
    categorical_sample,
    gaussian_log_prob,
)
from rs_lightning.agents.quantile_loss import (
    check_quantile_loss,
    huber_threshold,
    midpoint_fractions,
    quantile_huber_loss,
)
from rs_lightning.risk import ReturnDistribution, Utility, from_quantiles
from rs_lightning.risk.static import policy_gradient_refusal
from rs_lightning.types import PolicySample, Problem, RolloutBatch

# A normalised advantage divides by the minibatch's standard deviation plus this.
ADVANTAGE_EPS = 1e-8


# ----------------------------------------------------------------------- pure maths
def clipped_surrogate(log_prob: Tensor, old_log_prob: Tensor, advantage: Tensor,
                      clip: float) -> Tensor:
    """-min(r A, clip(r, 1 - clip, 1 + clip) A) of each step, r = exp(log_prob -
    old_log_prob): the pessimistic bound PPO minimises (``[...]``)."""
    ratio = torch.exp(log_prob - old_log_prob)
    return -torch.minimum(ratio * advantage, ratio.clamp(1.0 - clip, 1.0 + clip) * advantage)


def normalised(advantage: Tensor) -> Tensor:
    """``advantage[..., B]`` centred and scaled over its last dimension (each member's
    minibatch): (A - mean) / (std + ADVANTAGE_EPS); one step is only centred."""
    centred = advantage - advantage.mean(-1, keepdim=True)
    if advantage.shape[-1] < 2:
        return centred
    return centred / (advantage.std(-1, keepdim=True) + ADVANTAGE_EPS)


def categorical_entropy(logits: Tensor) -> Tensor:
    """H of the softmax law of ``logits[..., A]`` -> ``[...]``."""
    log_probs = torch.log_softmax(logits, dim=-1)
    return -(log_probs.exp() * log_probs).sum(-1)


def gaussian_entropy(log_std: Tensor) -> Tensor:
    """H of a diagonal Gaussian of standard deviations exp(``log_std[..., d]``) -> ``[...]``:
    sum_j log_std_j + (1 + log 2 pi) / 2."""
    return (log_std + 0.5 * (1.0 + math.log(2.0 * math.pi))).sum(-1)


# ----------------------------------------------------------------------- the agent
@dataclass
class PPOConfig(OnPolicyConfig):
    """PPO's settings (values in ``conf/agent/ppo.yaml``); ``hidden_sizes``: the actor's and
    the critic's MLPs."""

    NETWORK_SIZES = ("hidden_sizes", "n_quantiles")
    n_quantiles: int = MISSING  # N, the critic's quantiles at fractions (2i + 1) / (2N)
    kappa: Optional[float] = MISSING  # Huber threshold (null: share of the return support)
    clip_range: float = MISSING  # eps of the clipped surrogate
    entropy_coef: float = MISSING  # c_e
    value_coef: float = MISSING  # c_v
    normalize_advantage: bool = MISSING
    log_std_init: float = MISSING  # continuous actions: the Gaussian's initial log std

    def check(self) -> None:
        super().check()
        check_quantile_loss(self.n_quantiles, self.kappa)
        for key, low, high in (("clip_range", 0.0, 1.0), ("entropy_coef", 0.0, 1e6),
                               ("value_coef", 0.0, 1e6), ("log_std_init", -20.0, 2.0)):
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and math.isfinite(value)
                    and low <= value <= high) or (key == "clip_range" and value == 0.0):
                bounds = "(0, 1]" if key == "clip_range" else f"[{low:g}, {high:g}]"
                raise ValueError(f"agent.{key}: must be a number in {bounds}, got {value!r}")


@register_agent("ppo", PPOConfig)
class PPO(OnPolicyAgent):
    """The clipped surrogate, a quantile critic and an entropy bonus (module docstring)."""

    config: PPOConfig
    supports_members = True  # the layers of agents/base.py, reductions over the batch only
    # Either kind of action: a softmax over discrete ones, a Gaussian in a box (each
    # instance says which it has).
    continuous_actions = None

    def __init__(self, config: PPOConfig, problem: Problem) -> None:
        super().__init__(config, problem)
        self.continuous_actions = problem.continuous
        outputs = problem.action_dim if problem.continuous else problem.n_actions
        self.actor = state_network(problem, config.network, [*config.hidden_sizes, outputs])
        self.critic = state_network(problem, config.network,
                                    [*config.hidden_sizes, config.n_quantiles])
        if problem.continuous:
            self.log_std = nn.Parameter(torch.full((problem.action_dim,), config.log_std_init))
        self.register_buffer("fractions", midpoint_fractions(config.n_quantiles),
                             persistent=False)
        self.kappa = huber_threshold(config.kappa, problem)

    @staticmethod
    def objective_refusal(objective: str, utility: Utility | None) -> str | None:
        """Why PPO cannot follow ``objective`` at ``utility`` (None: it can; ``utility``
        None: what it refuses at any setting)."""
        if objective == "static":
            return None if utility is None else policy_gradient_refusal(utility)
        if objective == "per_decision":
            if utility is None or utility.alpha == 1.0 or utility.risk == "expectation":
                return None  # the expectation: plain PPO
            return ("agent=ppo maximises the expected return under per_decision (a policy "
                    "gradient has no per-state utility rule to follow); for risk use "
                    "objective=static (allowed: static, or per_decision with "
                    "risk=expectation or alpha=1)")
        return f"agent=ppo does not take objective={objective} (allowed: per_decision, static)"

    def _log_std(self) -> Tensor:
        # [d], or [K, 1, d] for stacked members (rows between the member and the action).
        return self.log_std if self.log_std.dim() == 1 else self.log_std.unsqueeze(-2)

    def sample(self, obs: Tensor, noise: Tensor) -> PolicySample:
        out = self.actor(obs)
        if self.problem.continuous:
            log_std = self._log_std().expand_as(out)
            action = out + log_std.exp() * noise
            log_prob = gaussian_log_prob(action, out, log_std)
        else:
            action, log_prob = categorical_sample(out, noise)
        return PolicySample(action, log_prob, self.critic(obs))

    @torch.no_grad()
    def greedy_action(self, obs: Tensor, choose_action: ChooseAction) -> Tensor:
        out = self.actor(obs)
        return out.clamp(-1.0, 1.0) if self.problem.continuous else out.argmax(-1)

    def return_distribution(self, obs: Tensor) -> ReturnDistribution:
        law = from_quantiles(self.critic(obs))
        return ReturnDistribution(law.values.unsqueeze(-2), law.probs.unsqueeze(-2))

    def _log_prob_entropy(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        out = self.actor(obs)
        if self.problem.continuous:
            log_std = self._log_std().expand_as(out)
            return gaussian_log_prob(action, out, log_std), gaussian_entropy(log_std)
        log_probs = torch.log_softmax(out, dim=-1)
        return (log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1),
                categorical_entropy(out))

    def loss(self, batch: RolloutBatch, target: None, choose_action: ChooseAction
             ) -> tuple[Tensor, dict[str, Tensor]]:
        config = self.config
        advantage = batch.advantage
        if config.normalize_advantage:
            advantage = normalised(advantage)
        log_prob, entropy = self._log_prob_entropy(batch.obs, batch.action)
        surrogate = clipped_surrogate(log_prob, batch.log_prob, advantage, config.clip_range)
        quantiles = self.critic(batch.obs)
        critic_rows = quantile_huber_loss(quantiles.flatten(0, -2), self.fractions,
                                          batch.returns.reshape(-1, 1), self.kappa,
                                          targets_sorted=True)
        critic_loss = critic_rows.view(quantiles.shape[:-1]).mean(-1)
        policy_loss = surrogate.mean(-1)
        entropy_mean = entropy.mean(-1)
        loss = policy_loss + config.value_coef * critic_loss - config.entropy_coef * entropy_mean
        with torch.no_grad():
            log_ratio = log_prob - batch.log_prob
            metrics = {
                "policy_loss": policy_loss.detach(),
                "critic_loss": critic_loss.detach(),
                "entropy": entropy_mean.detach(),
                # (r - 1) - log r >= 0, an unbiased estimate of KL(pi_old || pi)
                "approx_kl": (torch.expm1(log_ratio) - log_ratio).mean(-1),
                "clip_fraction": ((log_ratio.exp() - 1.0).abs() > config.clip_range
                                  ).float().mean(-1),
            }
        return loss, metrics
