"""C51 (Bellemare et al., 2017): a categorical return distribution on fixed atoms.

The network gives, for every action, the logits of probabilities p_j(s, a) on N evenly spaced
atoms z_j covering [return_min, return_max] (51 atoms in the paper). Learning: the target
action a* = choose_action(target distribution at s') (the utility-greedy action, the only
place besides acting where the risk measure enters), the Bellman update r + gamma z_j of its
atoms is clipped to the support and projected back onto the atoms, and the loss is the cross
entropy between that projection and p(s, a).

The projection spreads the mass of each updated atom Tz_i over its two neighbouring atoms in
proportion to proximity: m_j = sum_i p_i max(0, 1 - |Tz_i - z_j| / dz) (the "triangle" form
of the usual floor / ceil bookkeeping; an update landing exactly on an atom keeps all its
mass there). It preserves the mean of any law inside the support, and moves no mass by more
than dz, so every quantile moves by at most dz.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from rs_lightning.agents.base import (
    ATOMS_WHY,
    MAX_ATOMS,
    check_count,
    MISSING,
    Agent,
    AgentConfig,
    ChooseAction,
    Problem,
    Transitions,
    register_agent,
)
from rs_lightning.agents.networks import state_network
from rs_lightning.risk import ReturnDistribution


@dataclass
class C51Config(AgentConfig):
    """C51 settings (values in ``conf/agent/c51.yaml``); ``hidden_sizes`` is the MLP torso."""

    NETWORK_SIZES = ("hidden_sizes", "n_atoms")
    n_atoms: int = MISSING  # atoms evenly spaced on [return_min, return_max]

    def check(self) -> None:
        super().check()
        check_count("n_atoms", self.n_atoms, 2, MAX_ATOMS, ATOMS_WHY)


def project_onto_atoms(values: Tensor, probs: Tensor, atoms: Tensor) -> Tensor:
    """The categorical (Cramér) projection of atoms ``values[..., M]`` with ``probs[..., M]``
    onto the evenly spaced ``atoms[N]`` -> probabilities ``[..., N]``.

    Values outside the atoms' range are clipped to the nearest end first (C51's Tz clipping).
    """
    step = atoms[1] - atoms[0]
    # Tensor bounds: no host read of the atoms (a sync on a GPU, a graph break when compiled).
    clipped = values.clamp(atoms[0], atoms[-1])
    # weight[..., i, j] = max(0, 1 - |Tz_i - z_j| / dz): at most two non-zero j per i.
    weight = (1.0 - (clipped.unsqueeze(-1) - atoms).abs() / step).clamp_(min=0.0)
    return torch.einsum("...i,...ij->...j", probs, weight)


@register_agent("c51", C51Config)
class C51(Agent):
    """Categorical DQN with the utility-greedy target action (module docstring)."""

    config: C51Config
    supports_members = True
    fixed_support = True

    def __init__(self, config: C51Config, problem: Problem) -> None:
        super().__init__(config, problem)
        problem.check_return_support()
        n_outputs = problem.n_actions * config.n_atoms
        self.network = state_network(problem, config.network, [*config.hidden_sizes, n_outputs])
        atoms = torch.linspace(problem.return_min, problem.return_max, config.n_atoms)
        self.register_buffer("atoms", atoms, persistent=False)

    def logits(self, obs: Tensor) -> Tensor:
        """Unnormalised log-probabilities ``[B, A, N]``."""
        return self.network(obs).view(*obs.shape[:-1], self.problem.n_actions, self.config.n_atoms)

    def distribution(self, logits: Tensor) -> ReturnDistribution:
        """The common form of the network output: the atoms with softmax probabilities."""
        probs = logits.softmax(-1)
        return ReturnDistribution(self.atoms.to(probs.dtype).expand_as(probs), probs)

    def return_distribution(self, obs: Tensor) -> ReturnDistribution:
        return self.distribution(self.logits(obs))

    def loss(
        self, batch: Transitions, target: Agent, choose_action: ChooseAction
    ) -> tuple[Tensor, dict[str, Tensor]]:
        with torch.no_grad():
            next_dist = target.return_distribution(batch.next_obs)  # [B, A, N]
            next_action = choose_action(next_dist)
            next_probs = next_dist.gather_actions(next_action).probs  # [B, N]
            updated = batch.reward.unsqueeze(-1) + batch.discount.unsqueeze(-1) * self.atoms  # Tz
            target_probs = project_onto_atoms(updated, next_probs, self.atoms)
        logits = self.logits(batch.obs)
        index = batch.action[..., None, None].expand(*batch.action.shape, 1, self.config.n_atoms)
        log_probs = F.log_softmax(logits.gather(-2, index).squeeze(-2), dim=-1)  # [B, N]
        loss = -(target_probs * log_probs).sum(-1).mean(-1)  # one per member if stacked
        with torch.no_grad():
            mean_return = (log_probs.exp() * self.atoms).sum(-1).mean(-1)
        return loss, {"return_mean": mean_return}
