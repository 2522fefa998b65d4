"""DQN (Mnih et al., 2015), the paper's risk-neutral baseline.

Its return distribution is a Dirac at Q(s, a), so every risk measure of it equals Q and the
utility is Q whatever ``alpha`` and the risk measure: DQN cannot be made risk-sensitive,
which is the point of the comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
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
from rs_lightning.risk import ReturnDistribution, dirac


@dataclass
class DQNConfig(AgentConfig):
    loss: str = MISSING  # mse | huber

    def check(self) -> None:
        super().check()
        if self.risk_conditioned:
            raise ValueError("agent.risk_conditioned: DQN learns no distribution, so no risk "
                             "setting changes its greedy action; allowed: false")
        if self.loss not in ("mse", "huber"):
            raise ValueError(f"agent.loss: must be one of mse, huber, got {self.loss!r}")


@register_agent("dqn", DQNConfig)
class DQN(Agent):
    config: DQNConfig
    supports_members = True
    distributional = False

    def __init__(self, config: DQNConfig, problem: Problem) -> None:
        super().__init__(config, problem)
        self.q_network = state_network(problem, config.network,
                                       [*config.hidden_sizes, problem.n_actions])

    def q_values(self, obs: Tensor) -> Tensor:
        return self.q_network(obs)

    def return_distribution(self, obs: Tensor) -> ReturnDistribution:
        return dirac(self.q_values(obs))

    def loss(
        self, batch: Transitions, target: Agent, choose_action: ChooseAction
    ) -> tuple[Tensor, dict[str, Tensor]]:
        with torch.no_grad():
            next_q = target.q_values(batch.next_obs)  # type: ignore[attr-defined]
            next_action = choose_action(dirac(next_q))  # argmax Q: U of a Dirac is Q
            next_value = next_q.gather(-1, next_action.unsqueeze(-1)).squeeze(-1)
            td_target = batch.reward + batch.discount * next_value
        q = self.q_values(batch.obs).gather(-1, batch.action.unsqueeze(-1)).squeeze(-1)
        loss_function = F.smooth_l1_loss if self.config.loss == "huber" else F.mse_loss
        if self.members is None:  # the batch mean inside the loss: one autograd node fewer
            loss = loss_function(q, td_target)
        else:  # stacked members: one loss per member, the mean over each one's batch
            loss = loss_function(q, td_target, reduction="none").mean(-1)
        return loss, {"q_mean": q.detach().mean(-1)}
