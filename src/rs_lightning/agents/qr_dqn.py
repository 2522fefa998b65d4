"""QR-DQN (Dabney et al., 2018a): the return as N equally weighted quantiles.

The network gives, for every action, N quantile estimates theta_i(s, a) at the fixed
fractions tau_i = (2i + 1) / (2N) (N = 200 here). Learning: the target action
a* = choose_action(target distribution at s') (the utility-greedy action), the target
samples r + gamma theta_j(s', a*) (r alone for a terminal transition), and the quantile Huber
loss sum_i mean_j rho^kappa_tau_i(target_j - theta_i(s, a)) with kappa = 1.

Speed. The loss compares every predicted quantile with every target sample: N x N' pairs per
transition (1.3 million for a batch of 32 with N = N' = 200), which evaluated pair by pair
costs more than the whole DQN step. :func:`quantile_huber_loss` computes the same sum from the
sorted targets instead: for a given theta_i the pairs fall into four ranges of targets (below
theta - kappa, in [theta - kappa, theta), in [theta, theta + kappa], above), on each of which
the Huber term is linear or quadratic in the target, so counts, sums and sums of squares of
the targets (prefix sums) give the exact value and gradient in O((N + N') log N').
:func:`quantile_huber_loss_pairwise` is the plain pairwise reference (tests compare the two).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import MISSING
from torch import Tensor

from rs_lightning.agents.base import (
    Agent,
    AgentConfig,
    ChooseAction,
    Problem,
    Transitions,
    mlp,
    register_agent,
)
from rs_lightning.risk import ReturnDistribution, from_quantiles


@dataclass
class QRDQNConfig(AgentConfig):
    """QR-DQN settings (values in ``conf/agent/qr_dqn.yaml``); ``hidden_sizes``: the MLP."""

    n_quantiles: int = MISSING  # N, at fractions (2i + 1) / (2N)
    kappa: float = MISSING  # Huber threshold of the quantile loss

    def check(self) -> None:
        super().check()
        check_quantile_loss(self.n_quantiles, self.kappa)


def check_kappa(kappa: float) -> None:
    if not kappa > 0:
        raise ValueError(f"agent.kappa: must be a positive float, got {kappa}")


def check_quantile_loss(n_quantiles: int, kappa: float) -> None:
    """The settings of a fixed set of quantiles fitted by the quantile Huber loss."""
    if n_quantiles < 1:
        raise ValueError(f"agent.n_quantiles: must be a positive integer, got {n_quantiles}")
    check_kappa(kappa)


def midpoint_fractions(n: int, like: Tensor | None = None) -> Tensor:
    """tau_i = (2i + 1) / (2n), i < n: the fractions whose quantiles minimise the W1 error."""
    device = like.device if like is not None else None
    dtype = like.dtype if like is not None else torch.float32
    return (torch.arange(n, device=device, dtype=dtype) + 0.5) / n


def quantile_huber_loss_pairwise(
    quantiles: Tensor, fractions: Tensor, targets: Tensor, kappa: float
) -> Tensor:
    """Reference: sum_i mean_j |tau_i - 1{u_ij < 0}| H_kappa(u_ij) / kappa with
    u_ij = targets_j - quantiles_i, H_kappa the Huber function -> ``[B]``.

    ``quantiles[B, N]``, ``fractions`` broadcastable to it, ``targets[B, M]``.
    """
    u = targets.unsqueeze(1) - quantiles.unsqueeze(2)  # [B, N, M]
    huber = torch.where(u.abs() <= kappa, 0.5 * u.square(), kappa * (u.abs() - 0.5 * kappa))
    weight = (fractions.unsqueeze(-1) - (u < 0).to(u.dtype)).abs()
    return (weight * huber).mean(2).sum(1) / kappa


def quantile_huber_loss(
    quantiles: Tensor,
    fractions: Tensor,
    targets: Tensor,
    kappa: float,
    targets_sorted: bool = False,
) -> Tensor:
    """The quantile Huber loss of :func:`quantile_huber_loss_pairwise`, exact, in
    O((N + M) log M) per row by prefix sums over the sorted targets -> ``[B]``.

    Differentiable with respect to ``quantiles`` only (``targets`` and ``fractions`` are
    constants of the loss, as in every quantile-regression TD update). ``targets_sorted``:
    the rows of ``targets`` are already ascending (spares a sort).
    """
    n_targets = targets.shape[-1]
    with torch.no_grad():
        # Centre each row (the loss depends on differences only) and sum in float64, so that
        # sums of squares do not cancel.
        centre = targets.mean(-1, keepdim=True)
        sorted_targets = (targets - centre).double()
        if not targets_sorted:
            sorted_targets = sorted_targets.sort(-1).values
        zero = torch.zeros_like(sorted_targets[..., :1])
        # Prefix sums of t and of t^2, each [B, M + 1].
        sum_1 = torch.cat([zero, sorted_targets.cumsum(-1)], dim=-1)
        sum_2 = torch.cat([zero, sorted_targets.square().cumsum(-1)], dim=-1)
        theta = (quantiles.detach() - centre).double()
        n = theta.shape[-1]
        # Targets t_j in A: t < theta - kappa, B: [theta - kappa, theta), C: [theta, theta +
        # kappa], D: t > theta + kappa. The ends of A, B and C as positions in the sorted
        # targets, by one search. (A target exactly at theta + kappa counts in D: the Huber
        # term and its slope agree there, so the loss is the same either way.)
        bounds = torch.cat([theta - kappa, theta, theta + kappa], dim=-1)
        ends = torch.searchsorted(sorted_targets, bounds)  # [B, 3N]
        p1_a, p1_m, p1_c = sum_1.gather(-1, ends).split(n, -1)  # sums of t below each end
        p2_a, p2_m, p2_c = sum_2.gather(-1, ends).split(n, -1)  # sums of t^2 below each end
        a, m, c = ends.double().split(n, -1)
        n_a, n_b, n_c, n_d = a, m - a, c - m, n_targets - c
        s1_a, s1_b, s1_c, s1_d = p1_a, p1_m - p1_a, p1_c - p1_m, sum_1[..., -1:] - p1_c
        s2_b, s2_c = p2_m - p2_a, p2_c - p2_m
        # On each range the Huber term is a polynomial in theta: the loss of quantile i is
        # c2 theta^2 + c1 theta + c0 (its range assignment is locally constant, so the
        # gradient 2 c2 theta + c1 is exact).
        tau = fractions.double()
        low, high = 1.0 - tau, tau
        half_k2 = 0.5 * kappa * kappa
        c2 = 0.5 * (low * n_b + high * n_c)
        c1 = low * (kappa * n_a - s1_b) - high * (s1_c + kappa * n_d)
        c0 = low * (0.5 * s2_b - kappa * s1_a - half_k2 * n_a) + high * (
            0.5 * s2_c + kappa * s1_d - half_k2 * n_d
        )
    x = (quantiles - centre).double()  # carries the gradient
    per_quantile = (c2 * x + c1) * x + c0
    return (per_quantile.sum(-1) / (kappa * n_targets)).to(quantiles.dtype)


@register_agent("qr_dqn", QRDQNConfig)
class QRDQN(Agent):
    """Quantile-regression DQN with the utility-greedy target action (module docstring)."""

    config: QRDQNConfig
    supports_members = True

    def __init__(self, config: QRDQNConfig, problem: Problem) -> None:
        super().__init__(config, problem)
        n = config.n_quantiles
        self.network = mlp([problem.obs_dim, *config.hidden_sizes, problem.n_actions * n])
        self.register_buffer("fractions", midpoint_fractions(n), persistent=False)

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
            discount = self.problem.gamma * (1.0 - batch.terminated)
            targets = batch.reward.unsqueeze(-1) + discount.unsqueeze(-1) * next_values
        quantiles = self.quantiles(batch.obs)
        index = batch.action[..., None, None].expand(*batch.action.shape, 1, quantiles.shape[-1])
        chosen = quantiles.gather(-2, index).squeeze(-2)  # [B, N]
        rows = quantile_huber_loss(  # the loss takes rows: stacked members are flattened
            chosen.flatten(0, -2), self.fractions, targets.flatten(0, -2), self.config.kappa,
            targets_sorted=True,
        )
        loss = rows.view(chosen.shape[:-1]).mean(-1)  # one per member if stacked
        return loss, {"return_mean": chosen.detach().mean((-2, -1))}
