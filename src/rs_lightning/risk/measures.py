"""Risk measures and the risk-based utility, as pure batched tensor functions.

Each measure maps a :class:`ReturnDistribution` of shape ``[..., K]`` to a tensor ``[...]``.
A new measure is one function decorated with :func:`risk_measure` (here or in a module of
this package) and one file in ``conf/risk/``; its keyword parameters are the config keys.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import Tensor

from rs_lightning.risk.distribution import ReturnDistribution

# Cumulative probabilities are float sums: 0.1 may come out as 0.09999999. A level rho is
# taken as reached within this tolerance, so that VaR_0.1 of ten equal atoms is the first one.
_LEVEL_TOLERANCE = 1e-6

RiskMeasure = Callable[..., Tensor]
RISK_MEASURES: dict[str, RiskMeasure] = {}


def risk_measure(name: str) -> Callable[[RiskMeasure], RiskMeasure]:
    """Register ``fn(dist, **params) -> Tensor`` under ``name`` (the ``risk=`` option)."""

    def register(fn: RiskMeasure) -> RiskMeasure:
        if name in RISK_MEASURES:
            raise ValueError(f"risk measure {name!r} is registered twice")
        RISK_MEASURES[name] = fn
        return fn

    return register


@risk_measure("expectation")
def expectation(dist: ReturnDistribution) -> Tensor:
    """E[Z]."""
    return (dist.values * dist.probs).sum(-1)


def _check_level(rho: float) -> None:
    """A risk level must lie in (0, 1]: outside it VaR and CVaR are silently meaningless
    (rho = 0 divides by zero, rho > 1 rescales the mean)."""
    if not 0.0 < float(rho) <= 1.0:
        raise ValueError(f"risk level rho must lie in (0, 1], got {rho!r}")


def _lower_cumulative(dist: ReturnDistribution) -> tuple[Tensor, Tensor]:
    """P(Z < v_k) and P(Z <= v_k) for every atom k."""
    upper = dist.cumulative
    lower = torch.cat([torch.zeros_like(upper[..., :1]), upper[..., :-1]], dim=-1)
    return lower, upper


@risk_measure("var")
def value_at_risk(dist: ReturnDistribution, rho: float) -> Tensor:
    """VaR_rho[Z] = inf {z : F(z) >= rho}, the lower rho-quantile (paper, section 3.2)."""
    _check_level(rho)
    cumulative = dist.cumulative.contiguous()
    # The tolerance is capped at half of rho: the level stays positive, so that atoms with
    # zero cumulative probability (zero-mass atoms below the support) are never returned.
    level = torch.full_like(cumulative[..., :1], rho - min(_LEVEL_TOLERANCE, 0.5 * rho))
    index = torch.searchsorted(cumulative, level).clamp_(max=cumulative.shape[-1] - 1)
    return dist.values.gather(-1, index).squeeze(-1)


@risk_measure("cvar")
def conditional_value_at_risk(dist: ReturnDistribution, rho: float) -> Tensor:
    """CVaR_rho[Z] = (1 / rho) * integral_0^rho VaR_u[Z] du, the mean of the worst rho tail.

    For a continuous distribution this is E[Z | Z <= VaR_rho[Z]] (the paper's definition);
    for atoms it splits the atom at VaR_rho so that exactly rho of mass is averaged.
    """
    _check_level(rho)
    lower, upper = _lower_cumulative(dist)
    tail_mass = (upper.clamp(max=rho) - lower).clamp_(min=0.0)
    return (dist.values * tail_mass).sum(-1) / rho


def distortion_risk(dist: ReturnDistribution, distortion: Callable[[Tensor], Tensor]) -> Tensor:
    """integral of VaR_u[Z] d g(u) for a distortion g: [0, 1] -> [0, 1], non-decreasing,
    g(0) = 0, g(1) = 1. E is g(u) = u; CVaR_rho is g(u) = min(u / rho, 1)."""
    lower, upper = _lower_cumulative(dist)
    weights = distortion(upper) - distortion(lower)
    return (dist.values * weights).sum(-1)


@dataclass(frozen=True)
class Utility:
    """U[Z] = alpha * E[Z] + (1 - alpha) * R[Z] (paper, equation of section 3.3).

    ``risk`` is a registered measure and ``params`` its keyword parameters (for example rho).
    """

    alpha: float
    risk: str = "var"
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.risk not in RISK_MEASURES:
            raise ValueError(
                f"risk={self.risk!r} is not a registered risk measure; "
                f"allowed: {', '.join(sorted(RISK_MEASURES))}"
            )
        allowed = set(inspect.signature(RISK_MEASURES[self.risk]).parameters) - {"dist"}
        unknown = set(self.params) - allowed
        if unknown:
            raise ValueError(
                f"risk={self.risk!r} takes no parameter {', '.join(sorted(unknown))}; "
                f"allowed: {', '.join(sorted(allowed)) or '(none)'}"
            )

    def risk_value(self, dist: ReturnDistribution) -> Tensor:
        return RISK_MEASURES[self.risk](dist, **self.params)

    def __call__(self, dist: ReturnDistribution) -> Tensor:
        if dist.values.shape[-1] == 1:
            # A point mass (DQN): every law-invariant measure of it is the point itself.
            return dist.values[..., 0]
        if self.alpha == 1.0:
            return expectation(dist)
        if self.alpha == 0.0:
            return self.risk_value(dist)
        return self.alpha * expectation(dist) + (1.0 - self.alpha) * self.risk_value(dist)

    def greedy(self, dist: ReturnDistribution) -> Tensor:
        """argmax_a U[Z(s, a)] for a ``[B, A, K]`` distribution -> actions ``[B]``."""
        return self(dist).argmax(-1)
