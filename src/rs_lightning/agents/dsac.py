"""A DSAC-style agent (after Ma et al.'s distributional soft actor-critic): twin quantile
critics, a squashed Gaussian actor maximising U of the critics' law, an entropy temperature
tuned to a target (the shared parts: :mod:`rs_lightning.agents.actor_critic`).

The guard against overestimation is the twin critics' pessimistic law: quantile by quantile
the smaller of the two critics' sorted quantiles, in the target and, by default, in the law
the actor maximises U of (as SAC takes the smaller of its two Q-values in both places).
``actor_law: mixture`` gives the actor the critics' pooled atoms instead (TQC's actor law):
the quantile-wise minimum is lower where the critics disagree, so in the actor it also
penalises the actions whose laws are least known.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from rs_lightning.agents.actor_critic import (
    ActorCritic,
    ActorCriticConfig,
    pessimistic_quantiles,
)
from rs_lightning.agents.base import MISSING, register_agent

ACTOR_LAWS = ("pessimistic", "mixture")


@dataclass
class DSACConfig(ActorCriticConfig):
    """DSAC settings (values in ``conf/agent/dsac.yaml``)."""

    actor_law: str = MISSING  # pessimistic | mixture (module docstring)

    def check(self) -> None:
        super().check()
        if self.actor_law not in ACTOR_LAWS:
            raise ValueError(f"agent.actor_law: must be one of {', '.join(ACTOR_LAWS)}, got "
                             f"{self.actor_law!r}")


@register_agent("dsac", DSACConfig)
class DSAC(ActorCritic):
    """Twin quantile critics, pessimistic law (module docstring)."""

    config: DSACConfig

    def target_atoms(self, quantiles: Tensor) -> Tensor:
        return pessimistic_quantiles(quantiles)

    def actor_atoms(self, quantiles: Tensor) -> Tensor:
        if self.config.actor_law == "mixture":
            return quantiles.flatten(-2)
        return pessimistic_quantiles(quantiles)
