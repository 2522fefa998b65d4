"""TQC (Kuznetsov et al., 2020, "Controlling overestimation bias with truncated mixture of
continuous distributional quantile critics"): C quantile critics whose pooled atoms, less
the largest C * d, make the target law; the actor maximises U of the whole mixture of the
C * M atoms (TQC's actor maximises its mean: U at alpha 1). The shared parts:
:mod:`rs_lightning.agents.actor_critic`.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from rs_lightning.agents.actor_critic import (
    ActorCritic,
    ActorCriticConfig,
    truncated_mixture,
)
from rs_lightning.agents.base import MISSING, register_agent


@dataclass
class TQCConfig(ActorCriticConfig):
    """TQC settings (values in ``conf/agent/tqc.yaml``)."""

    dropped_quantiles: int = MISSING  # d: the largest atoms dropped per critic in the target

    def check(self) -> None:
        super().check()
        if not 0 <= self.dropped_quantiles < self.n_quantiles:
            raise ValueError(f"agent.dropped_quantiles: must be in [0, n_quantiles="
                             f"{self.n_quantiles}), got {self.dropped_quantiles}")


@register_agent("tqc", TQCConfig)
class TQC(ActorCritic):
    """Truncated mixture of quantile critics (module docstring)."""

    config: TQCConfig

    def target_atoms(self, quantiles: Tensor) -> Tensor:
        return truncated_mixture(quantiles, self.config.dropped_quantiles)

    def actor_atoms(self, quantiles: Tensor) -> Tensor:
        return quantiles.flatten(-2)
