"""The common form of a return distribution that every risk measure reads.

Every distributional agent turns its output into a :class:`ReturnDistribution`: a batch of
discrete distributions given by sorted atoms and their probabilities. Risk measures are pure
functions of that form only, so a risk measure never knows which agent produced the
distribution and an agent never knows which risk measure is plugged in.

Three constructors cover the representations distributional agents use:

- :func:`from_atoms`: atoms with probabilities (C51, a DQN's Dirac at Q, Monte Carlo samples);
- :func:`from_quantiles`: equally weighted quantile estimates (QR-DQN, IQN);
- :func:`from_cdf`: a CDF evaluated on a sorted return grid (UMDQN). The mass between two grid
  points is placed at their midpoint, the mass at or below the first point on it and the mass
  above the last point on it; E is then exact for a CDF that is linear between grid points,
  and VaR is within half a grid step.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor


class ReturnDistribution(NamedTuple):
    """A batch of discrete return distributions, shape ``[..., K]`` for both fields.

    ``values`` are sorted ascending along the last dimension; ``probs`` are non-negative and
    sum to one along it.
    """

    values: Tensor
    probs: Tensor

    @property
    def cumulative(self) -> Tensor:
        """P(Z <= values[..., k]) for every atom k (clamped into [0, 1])."""
        return self.probs.cumsum(-1).clamp_(0.0, 1.0)

    def select(self, index) -> "ReturnDistribution":
        """Index the batch dimensions (plain ``[]`` would select a field of the tuple)."""
        return ReturnDistribution(self.values[index], self.probs[index])

    def mass_at_each_end(self, low: float, high: float, tolerance: float = 1e-3
                         ) -> tuple[Tensor, Tensor]:
        """(P(Z <= low + t), P(Z >= high - t)), t = ``tolerance`` x (high - low): the mass a
        law puts at or beyond each end of the support [low, high], ``[...]`` each. A law on a
        fixed support piles there what the support clips."""
        margin = tolerance * (high - low)
        return ((self.probs * (self.values <= low + margin)).sum(-1),
                (self.probs * (self.values >= high - margin)).sum(-1))

    def gather_actions(self, actions: Tensor) -> "ReturnDistribution":
        """Select one action per batch row from a ``[..., B, A, K]`` distribution with
        ``actions[..., B]`` -> ``[..., B, K]``."""
        index = actions.long()[..., None, None].expand(*actions.shape, 1, self.values.shape[-1])
        return ReturnDistribution(
            self.values.gather(-2, index).squeeze(-2), self.probs.gather(-2, index).squeeze(-2)
        )


def from_atoms(values: Tensor, probs: Tensor, sort: bool = True) -> ReturnDistribution:
    """Atoms ``values[..., K]`` with probabilities ``probs[..., K]`` (normalised here)."""
    values, probs = torch.broadcast_tensors(values, probs)
    probs = probs.clamp_min(0.0)
    probs = probs / probs.sum(-1, keepdim=True)
    if sort:
        values, order = values.sort(-1)
        probs = probs.gather(-1, order)
    return ReturnDistribution(values, probs)


def _sort_values(values: Tensor) -> Tensor:
    """``values`` sorted along the last dimension.

    Without gradient on the CPU, numpy sorts: its vectorised sort is about ten times faster
    than torch's on rows of a few hundred unsorted floats (the quantiles of a young network),
    which matters when a quantile agent sorts its target distribution at every update.
    """
    if (
        values.device.type == "cpu"
        and values.dtype in (torch.float32, torch.float64)
        and not (values.requires_grad and torch.is_grad_enabled())
    ):
        return torch.from_numpy(np.sort(values.detach().numpy(), axis=-1))
    return values.sort(-1).values


def from_quantiles(quantiles: Tensor) -> ReturnDistribution:
    """Equally weighted quantile estimates ``[..., N]`` (sorted here: a learnt quantile
    function need not be monotone)."""
    values = _sort_values(quantiles)
    return ReturnDistribution(values, torch.full_like(values, 1.0 / values.shape[-1]))


def from_samples(samples: Tensor) -> ReturnDistribution:
    """The empirical distribution of samples along the last dimension."""
    return from_quantiles(samples)


def from_cdf(grid: Tensor, cdf: Tensor) -> ReturnDistribution:
    """A CDF ``cdf[..., K]`` evaluated on a sorted return grid ``grid[..., K]``.

    Returns ``K + 1`` atoms: ``grid[0]`` with mass ``F(grid[0])``, the midpoint of each interval
    with the CDF's increase over it, and ``grid[-1]`` with the mass above it.
    """
    # A learnt CDF is monotone by construction for UMDQN (up to rounding); cummax guards
    # other sources.
    cdf = cdf.clamp(0.0, 1.0).cummax(-1).values
    # The atoms of a shared grid once, then copied to every row (not added row by row).
    mids = 0.5 * (grid[..., 1:] + grid[..., :-1])
    values = torch.cat([grid[..., :1], mids, grid[..., -1:]], dim=-1)
    probs = torch.cat(
        [cdf[..., :1], cdf[..., 1:] - cdf[..., :-1], 1.0 - cdf[..., -1:]], dim=-1
    )
    # broadcast_tensors, not broadcast_shapes: the latter runs Python reference code that
    # cost about 2 % of an RS-UMDQN-C update.
    values, probs = torch.broadcast_tensors(values, probs)
    return ReturnDistribution(values.contiguous(), probs.contiguous())


def dirac(values: Tensor) -> ReturnDistribution:
    """Point masses at ``values[...]`` (a DQN's Q): shape ``[..., 1]``."""
    values = values.unsqueeze(-1)
    return ReturnDistribution(values, torch.ones_like(values))
