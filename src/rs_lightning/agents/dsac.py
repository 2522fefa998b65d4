"""A DSAC-style agent (after Ma et al.'s distributional soft actor-critic): twin quantile
critics, a squashed Gaussian actor maximising U of the critics' law, an entropy temperature
tuned to a target (the shared parts: :mod:`rs_lightning.agents.actor_critic`).

The guard against overestimation is the twin critics' pessimistic law: quantile by quantile
the smaller of the two critics' sorted quantiles, both in the target and in the law the
actor maximises U of (as SAC takes the smaller of its two Q-values in both places).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from rs_lightning.agents.actor_critic import (
    ActorCritic,
    ActorCriticConfig,
    pessimistic_quantiles,
)
from rs_lightning.agents.base import register_agent


@dataclass
class DSACConfig(ActorCriticConfig):
    """DSAC settings (values in ``conf/agent/dsac.yaml``)."""


@register_agent("dsac", DSACConfig)
class DSAC(ActorCritic):
    """Twin quantile critics, pessimistic law (module docstring)."""

    def target_atoms(self, quantiles: Tensor) -> Tensor:
        return pessimistic_quantiles(quantiles)

    def actor_atoms(self, quantiles: Tensor) -> Tensor:
        return pessimistic_quantiles(quantiles)
