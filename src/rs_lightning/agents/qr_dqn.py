"""QR-DQN (Dabney et al., 2018a): the return as N equally weighted quantiles.

The network gives, for every action, N quantile estimates theta_i(s, a) at the fixed
fractions tau_i = (2i + 1) / (2N) (N = 200 here). Learning: the target action
a* = choose_action(target distribution at s') (the utility-greedy action), the target
samples r + gamma theta_j(s', a*) (r alone for a terminal transition), and the quantile Huber
loss sum_i mean_j rho^kappa_tau_i(target_j - theta_i(s, a)) with kappa = 1, evaluated from the
sorted targets by prefix sums (:func:`rs_lightning.agents.quantile_loss.quantile_huber_loss`):
pair by pair, its N x N' pairs per transition would cost more than the whole DQN step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from rs_lightning.agents.base import (
    MISSING,
    Agent,
    AgentConfig,
    ChooseAction,
    Problem,
    Transitions,
    register_agent,
)
from rs_lightning.agents.networks import state_network
from rs_lightning.agents.quantile_loss import (
    check_quantile_loss,
    huber_threshold,
    midpoint_fractions,
    quantile_huber_loss,
)
from rs_lightning.risk import ReturnDistribution, from_quantiles


@dataclass
class QRDQNConfig(AgentConfig):
    """QR-DQN settings (values in ``conf/agent/qr_dqn.yaml``); ``hidden_sizes``: the MLP."""

    NETWORK_SIZES = ("hidden_sizes", "n_quantiles")
    n_quantiles: int = MISSING  # N, at fractions (2i + 1) / (2N)
    kappa: Optional[float] = MISSING  # Huber threshold (null: share of the return support)

    def check(self) -> None:
        super().check()
        check_quantile_loss(self.n_quantiles, self.kappa)


@register_agent("qr_dqn", QRDQNConfig)
class QRDQN(Agent):
    """Quantile-regression DQN with the utility-greedy target action (module docstring)."""

    config: QRDQNConfig
    supports_members = True

    def __init__(self, config: QRDQNConfig, problem: Problem) -> None:
        super().__init__(config, problem)
        n = config.n_quantiles
        self.network = state_network(problem, config.network,
                                     [*config.hidden_sizes, problem.n_actions * n])
        self.register_buffer("fractions", midpoint_fractions(n), persistent=False)
        self.kappa = huber_threshold(config.kappa, problem)

    def quantiles(self, obs: Tensor) -> Tensor:
        """theta_i(s, a) at the fractions ``self.fractions`` -> ``[B, A, N]`` (unsorted)."""
        return self.network(obs).view(*obs.shape[:-1], self.problem.n_actions, -1)

    def distribution(self, quantiles: Tensor) -> ReturnDistribution:
        """The common form: N equally weighted quantiles."""
        return from_quantiles(quantiles)

    def return_distribution(self, obs: Tensor) -> ReturnDistribution:
        return self.distribution(self.quantiles(obs))

    def loss(
        self, batch: Transitions, target: Agent, choose_action: ChooseAction
    ) -> tuple[Tensor, dict[str, Tensor]]:
        with torch.no_grad():
            next_dist = target.return_distribution(batch.next_obs)  # sorted quantiles
            next_action = choose_action(next_dist)
            next_values = next_dist.gather_actions(next_action).values  # [B, N'], ascending
            targets = batch.reward.unsqueeze(-1) + batch.discount.unsqueeze(-1) * next_values
        quantiles = self.quantiles(batch.obs)
        index = batch.action[..., None, None].expand(*batch.action.shape, 1, quantiles.shape[-1])
        chosen = quantiles.gather(-2, index).squeeze(-2)  # [B, N]
        rows = quantile_huber_loss(  # the loss takes rows: stacked members are flattened
            chosen.flatten(0, -2), self.fractions, targets.flatten(0, -2), self.kappa,
            targets_sorted=True,
        )
        loss = rows.view(chosen.shape[:-1]).mean(-1)  # one per member if stacked
        return loss, {"return_mean": chosen.detach().mean((-2, -1))}
