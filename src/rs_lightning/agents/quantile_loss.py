"""The quantile Huber loss of quantile-regression TD learning (Dabney et al., 2018a), shared by
QR-DQN, IQN and UMDQN-W, and the checks of its settings.

For quantile estimates theta_i at fractions tau_i and target samples t_j, the loss is
sum_i mean_j |tau_i - 1{u_ij < 0}| H_kappa(u_ij) / kappa with u_ij = t_j - theta_i and
H_kappa the Huber function (kappa: its threshold). Three evaluations of the same value:

- :func:`quantile_huber_loss_pairwise`, pair by pair: the plain reference (tests compare the
  other two with it);
- :func:`quantile_huber_loss`, from the sorted targets. Comparing every quantile with every
  target costs N x N' pairs per transition (1.3 million for a batch of 32 with QR-DQN's
  N = N' = 200), which evaluated pair by pair costs more than the whole DQN step. For a given
  theta_i the pairs fall into four ranges of targets (below theta - kappa, in
  [theta - kappa, theta), in [theta, theta + kappa], above), on each of which the Huber term
  is linear or quadratic in the target, so counts, sums and sums of squares of the targets
  (prefix sums) give the exact value and gradient in O((N + N') log N');
- :class:`PairwiseQuantileHuberLoss`, pair by pair with its gradient in one pass: cheaper
  for IQN's 32 x 32 pairs than the prefix sums and than autograd through the reference.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from rs_lightning.agents.base import ATOMS_WHY, MAX_ATOMS, check_count
from rs_lightning.types import Problem


# The default Huber threshold as a share of the return support's width: small enough that
# the loss's fixed points are the quantiles themselves, not Huber quantiles pulled towards the
# mean (docs/qr_dqn_kappa.py: 0.1 on the grid worlds' support [-2, 2] learns their tails).
KAPPA_SHARE_OF_SUPPORT = 0.025


def check_kappa(kappa: Optional[float]) -> None:
    if kappa is not None and not (math.isfinite(kappa) and kappa > 0):
        raise ValueError(f"agent.kappa: must be a positive float or null, got {kappa}")


def huber_threshold(kappa: Optional[float], problem: Problem) -> float:
    """``agent.kappa``, or by default (null) ``KAPPA_SHARE_OF_SUPPORT`` of the width of the
    return support [``env.return_min``, ``env.return_max``]."""
    if kappa is not None:
        return float(kappa)
    return KAPPA_SHARE_OF_SUPPORT * (problem.return_max - problem.return_min)


def check_quantile_loss(n_quantiles: int, kappa: Optional[float]) -> None:
    """The settings of a fixed set of quantiles fitted by the quantile Huber loss."""
    check_count("n_quantiles", n_quantiles, 1, MAX_ATOMS, ATOMS_WHY)
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


class PairwiseQuantileHuberLoss(torch.autograd.Function):
    """The batch mean of the quantile Huber loss of QR-DQN,
    mean_b sum_i mean_j |tau_bi - 1{u_bij < 0}| H_kappa(u_bij) / kappa, u_bij = t_bj - theta_bi
    (:func:`quantile_huber_loss_pairwise`), with its gradient with respect to ``quantiles``
    theta only, both computed pair by pair in one pass.

    For IQN's 32 x 32 pairs per transition this is cheaper than the prefix sums of
    :func:`quantile_huber_loss` (which pay off for QR-DQN's 200 x 200) and than autograd
    through the pairwise formula. With c = clamp(u, -kappa, kappa) and
    w = |tau - 1{u < 0}|: H_kappa(u) = c (u - c / 2), dH/du = c, so the loss is
    sum w c (u - c / 2) and its gradient with respect to theta_bi is -sum_j w c / (kappa M B).
    """

    @staticmethod
    def forward(ctx, quantiles: Tensor, fractions: Tensor, targets: Tensor, kappa: float):
        u = targets.unsqueeze(-2) - quantiles.unsqueeze(-1)  # [B, N, M]
        clipped = u.clamp(-kappa, kappa)
        tau = fractions.unsqueeze(-1)
        weighted = torch.where(u < 0, 1.0 - tau, tau).mul_(clipped)  # w c
        scale = 1.0 / (kappa * targets.shape[-1] * targets.shape[0])
        value = torch.dot(weighted.flatten(), u.sub_(clipped, alpha=0.5).flatten()) * scale
        ctx.save_for_backward(weighted.sum(-1).mul_(-scale))  # d value / d theta: [B, N]
        return value

    @staticmethod
    def backward(ctx, grad: Tensor):
        (slope,) = ctx.saved_tensors
        return slope * grad, None, None, None
