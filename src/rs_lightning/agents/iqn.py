"""IQN (Dabney et al., 2018b): a quantile function of the return, Z_tau(s, a) for any tau.

Network: a state embedding psi(s) (the MLP ``hidden_sizes``, as DQN's torso), a cosine
embedding of the fraction phi(tau)_j = ReLU(sum_{i < 64} cos(pi i tau) w_ij + b_j) of the same
width, their elementwise product, and a head to one value per action:
Z_tau(s, a) = f(psi(s) * phi(tau))_a. The head is linear by default (``head_hidden_sizes: []``):
the torso runs once per state and only phi and the head once per (state, fraction) pair,
which keeps a 32 + 64-fraction update within a small multiple of a DQN update; the IQN
paper's Atari network has one hidden layer there (``head_hidden_sizes: [512]``).

Acting (and the target action): K = 32 fractions tau_k ~ U(0, 1); the distribution handed to
the utility is the K values Z_tau_k(s, a), equally weighted and sorted (:func:`from_quantiles`).
Learning: N = 32 fractions per transition for Z(s, a), N' = 32 fresh ones for the target
r + gamma Z_tau'_j(s', a*) with a* the utility-greedy action of the TARGET network on its own
K fractions at s', and the quantile Huber loss (kappa = 1) of QR-DQN (for N x N' = 32 x 32
pairs evaluated pair by pair, value and gradient in one pass:
:class:`~rs_lightning.agents.quantile_loss.PairwiseQuantileHuberLoss`).

Sampling. The N fractions of the trained Z(s, a) are drawn per transition, as in the paper.
The fractions of acting and of the target network (the K for the action, the N' for the
target values) are drawn once per call and shared by its states: each state's estimate is
still an unbiased sample, and the fraction embedding then runs for K + N' fractions instead of
B (K + N') (the update stays within a small multiple of a DQN update; see benchmarks/).

Speed. The online pass computes only the taken action's values, phi(tau) . (psi(s) W_a) + c_a
(:meth:`IQN.chosen_quantiles`): the per-transition fractions make phi a ``[B, N, H]`` tensor,
whose product with the head is the largest cost after the cosine embedding itself. The
random draws are the same, in the same order, as computing every action's values and
gathering the taken one.

``acting_fractions``: ``sampled`` (default, the paper) draws the K fractions afresh at every
call, so the greedy policy itself is random where two actions' utilities are close (its
Monte Carlo evaluation averages over the draws, while ``policy.json`` and the exact metrics
describe one draw); ``midpoints`` uses the fixed fractions (k + 1/2) / K, k < K: a
deterministic greedy policy and target action (a midpoint rule for the utility's integral
of the quantile function). The N and N' fractions of the loss are sampled either way.

``risk_route``: how a distortion risk measure (VaR, CVaR, Wang, CPW, power) enters the utility.

- ``common`` (default): like every agent, the K sampled values go to the risk module, which
  evaluates the measure on that empirical distribution;
- ``native``: IQN evaluates the measure itself, the IQN-paper way: R = mean_k Z_beta(tau_k)
  with tau_k ~ U(0, 1) and beta the measure's fraction map (``Utility.fraction_map``) of the
  utility ``choose_action.utility``, next to E = mean_k Z_tau_k, so U = alpha E + (1 - alpha)
  R. Both routes estimate the same integral of the quantile function; the native one spends
  its K samples where the measure puts its weight (all of them at tau = rho for VaR). A
  measure that is not a distortion (mean-variance, entropic), or a ``choose_action`` without a
  utility (``choose_action.utility`` None), takes the common route.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional

import torch
from torch import Tensor, nn

from rs_lightning.agents.base import (
    ATOMS_WHY,
    MAX_ATOMS,
    MAX_LAYER_WIDTH,
    check_count,
    check_layer_sizes,
    MISSING,
    Agent,
    AgentConfig,
    ChooseAction,
    Problem,
    Transitions,
    mlp,
    register_agent,
)
from rs_lightning.agents.networks import state_network
from rs_lightning.agents.quantile_loss import (
    PairwiseQuantileHuberLoss,
    check_kappa,
    huber_threshold,
    midpoint_fractions,
)
from rs_lightning.risk import (
    ReturnDistribution,
    Utility,
    combine_utility,
    from_quantiles,
)

RISK_ROUTES = ("common", "native")
ACTING_FRACTIONS = ("sampled", "midpoints")


@dataclass
class IQNConfig(AgentConfig):
    """IQN settings (values in ``conf/agent/iqn.yaml``). ``hidden_sizes``: the state embedding
    psi(s), obs_dim -> hidden_sizes (ReLU); the cosine embedding has the last one's width."""

    NETWORK_SIZES = ("hidden_sizes", "head_hidden_sizes")
    head_hidden_sizes: List[int] = MISSING  # psi * phi -> head_hidden_sizes (ReLU) -> n_actions
    n_cosines: int = MISSING  # cosine features of tau
    n_fractions: int = MISSING  # N: fractions of Z(s, a) in the loss
    n_target_fractions: int = MISSING  # N': fractions of the target
    n_acting_fractions: int = MISSING  # K: fractions of the distribution handed to the utility
    kappa: Optional[float] = MISSING  # Huber threshold (null: share of the return support)
    risk_route: str = MISSING  # common | native (module docstring)
    acting_fractions: str = MISSING  # sampled | midpoints (module docstring)

    def check(self) -> None:
        super().check()
        check_layer_sizes("head_hidden_sizes", self.head_hidden_sizes, allow_empty=True)
        for key in ("n_fractions", "n_target_fractions"):  # the loss's pairs
            check_count(key, getattr(self, key), 1, MAX_ATOMS, ATOMS_WHY)
        check_count("n_cosines", self.n_cosines, 1, MAX_LAYER_WIDTH, "the cosine features "
                    "feed a layer")
        check_count("n_acting_fractions", self.n_acting_fractions, 1, MAX_LAYER_WIDTH,
                    "quantiles of every action at every step")
        check_kappa(self.kappa)
        if self.risk_route not in RISK_ROUTES:
            raise ValueError(
                f"agent.risk_route: must be one of {', '.join(RISK_ROUTES)}, "
                f"got {self.risk_route!r}"
            )
        if self.acting_fractions not in ACTING_FRACTIONS:
            raise ValueError(
                f"agent.acting_fractions: must be one of {', '.join(ACTING_FRACTIONS)}, "
                f"got {self.acting_fractions!r}"
            )


@register_agent("iqn", IQNConfig)
class IQN(Agent):
    """Implicit quantile network with the utility-greedy target action (module docstring)."""

    config: IQNConfig

    def __init__(self, config: IQNConfig, problem: Problem) -> None:
        super().__init__(config, problem)
        width = config.hidden_sizes[-1]
        self.state_embedding = state_network(problem, config.network, config.hidden_sizes,
                                             activate_last=True)
        self.fraction_embedding = nn.Linear(config.n_cosines, width)
        self.head = mlp([width, *config.head_hidden_sizes, problem.n_actions])
        self.register_buffer(
            "frequencies", math.pi * torch.arange(config.n_cosines, dtype=torch.float32),
            persistent=False,
        )
        self.kappa = huber_threshold(config.kappa, problem)

    # -- the quantile function ------------------------------------------------------------------

    def fraction_features(self, fractions: Tensor) -> Tensor:
        """phi(tau) = ReLU(cos(pi i tau) W + b) for ``fractions[R, T]`` -> ``[R * T, H]``.

        The Linear runs on a 2-D input: its output is then a plain tensor, not a view, so the
        in-place ReLU costs no extra copy in the backward pass (on a view it would)."""
        cosines = torch.cos(fractions.reshape(-1, 1) * self.frequencies)  # [R * T, n_cosines]
        return self.fraction_embedding(cosines).relu_()

    def quantiles(self, obs: Tensor, fractions: Tensor) -> Tensor:
        """Z_tau(s, a) for every state of ``obs[B, D]``, every action and every fraction of
        ``fractions[B, T]`` (a row of fractions per state) or ``fractions[1, T]`` (the same
        fractions for every state) -> ``[B, A, T]``."""
        psi = self.state_embedding(obs)  # [B, H]
        rows, n = fractions.shape
        phi = self.fraction_features(fractions)  # [rows * T, H]
        if len(self.head) > 1:
            return self.head(psi.unsqueeze(1) * phi.view(rows, n, -1)).transpose(1, 2)
        # A linear head: Z[b, a, t] = sum_h (psi[b, h] W[a, h]) phi[b, t, h] + c_a, one
        # matrix product straight into the [B, A, T] layout, without the [B, T, H] product.
        head = self.head[0]
        mixed = psi.unsqueeze(1) * head.weight  # [B, A, H]
        if rows == 1:  # shared fractions: one plain product [B * A, H] x [H, T]
            values = torch.matmul(mixed, phi.t())
        else:
            values = torch.bmm(mixed, phi.view(rows, n, -1).transpose(1, 2))
        return values.add_(head.bias.view(1, -1, 1))  # [B, A, T]

    def chosen_quantiles(self, obs: Tensor, action: Tensor, fractions: Tensor) -> Tensor:
        """Z_tau(s_b, a_b) for one action per state and a row of fractions per state
        (``fractions[B, T]``) -> ``[B, T]``: the values the loss trains. With a linear head only
        the chosen action's row of the head is used, Z = phi(tau) . (psi(s) * W[a]) + c_a."""
        if len(self.head) > 1:
            quantiles = self.quantiles(obs, fractions)
            index = action.view(-1, 1, 1).expand(-1, 1, fractions.shape[-1])
            return quantiles.gather(1, index).squeeze(1)
        head = self.head[0]
        psi = self.state_embedding(obs)  # [B, H]
        rows, n = fractions.shape
        phi = self.fraction_features(fractions).view(rows, n, -1)  # [B, T, H]
        mixed = psi * head.weight.index_select(0, action)  # [B, H]
        # A broadcast product and a sum: batched matrix-vector products (bmm with a unit
        # dimension) are several times slower on a CPU, forward and backward.
        values = (phi * mixed.unsqueeze(1)).sum(-1)  # [B, T]
        return values + head.bias.index_select(0, action).unsqueeze(1)

    def sample_fractions(self, batch: int, n: int, like: Tensor) -> Tensor:
        """``[batch, n]`` fractions tau ~ U(0, 1)."""
        return torch.rand(batch, n, device=like.device)

    def acting_fractions(self, like: Tensor) -> Tensor:
        """The K fractions of acting and of the target action, shared by the states of a call
        -> ``[1, K]``: fresh draws, or the fixed midpoints (``acting_fractions``)."""
        k = self.config.n_acting_fractions
        if self.config.acting_fractions == "midpoints":
            return midpoint_fractions(k, like).unsqueeze(0)
        return self.sample_fractions(1, k, like)

    def distribution(self, quantiles: Tensor) -> ReturnDistribution:
        """The common form: the sampled quantile values, equally weighted (sorted)."""
        return from_quantiles(quantiles)

    def return_distribution(self, obs: Tensor) -> ReturnDistribution:
        """K sampled quantile values per action -> ``[B, A, K]``. The states of one call share
        their K fractions (each state's decision compares its actions on common fractions
        anyway), so the fraction embedding runs K times, not B * K times."""
        return self.distribution(self.quantiles(obs, self.acting_fractions(obs)))

    # -- the native risk route ----------------------------------------------------------------

    def native_utility(self, choose_action: ChooseAction) -> Utility | None:
        """The utility to evaluate natively, or None for the common route."""
        if self.config.risk_route != "native":
            return None
        utility = choose_action.utility
        if utility is None or (utility.uses_risk and utility.fraction_map() is None):
            return None
        return utility

    def native_fractions(self, utility: Utility, batch: int, like: Tensor) -> Tensor:
        """The K acting fractions tau_k for E, then K distorted ones beta(tau'_k) for R (only
        the parts U depends on) -> ``[B, T]``."""
        parts = []
        if utility.uses_expectation:
            parts.append(self.acting_fractions(like).expand(batch, -1))
        if utility.uses_risk:
            parts.append(utility.fraction_map()(self.acting_fractions(like).expand(batch, -1)))
        return torch.cat(parts, dim=-1)

    def native_values(self, utility: Utility, quantiles: Tensor) -> Tensor:
        """U(s, a) from the values at :meth:`native_fractions` -> ``[B, A]``: E and R are the
        means of their parts' K values."""
        parts = iter(quantiles.split(self.config.n_acting_fractions, dim=-1))
        mean = next(parts).mean(-1) if utility.uses_expectation else None
        risk = next(parts).mean(-1) if utility.uses_risk else None
        return combine_utility(utility.alpha, mean, risk)

    @torch.no_grad()
    def greedy_action(self, obs: Tensor, choose_action: ChooseAction) -> Tensor:
        utility = self.native_utility(choose_action)
        if utility is None:
            return choose_action(self.return_distribution(obs))
        fractions = self.native_fractions(utility, 1, obs)
        return self.native_values(utility, self.quantiles(obs, fractions)).argmax(-1)

    # -- learning -----------------------------------------------------------------------------

    def loss(
        self, batch: Transitions, target: Agent, choose_action: ChooseAction
    ) -> tuple[Tensor, dict[str, Tensor]]:
        config, size = self.config, batch.obs.shape[0]
        with torch.no_grad():
            # One pass of the target network: N' fractions for the target values, then the
            # fractions that choose the target action, shared by the batch's next states
            # (as in acting). The online pass below draws its own N fractions per transition.
            utility = self.native_utility(choose_action)
            target_fractions = self.sample_fractions(1, config.n_target_fractions, batch.obs)
            if utility is None:
                acting = self.acting_fractions(batch.obs)
            else:
                acting = self.native_fractions(utility, 1, batch.obs)
            next_quantiles = target.quantiles(  # type: ignore[attr-defined]
                batch.next_obs, torch.cat([target_fractions, acting], dim=-1)
            )
            n_target = config.n_target_fractions
            if utility is None:
                next_action = choose_action(self.distribution(next_quantiles[..., n_target:]))
            else:
                next_action = self.native_values(utility, next_quantiles[..., n_target:]).argmax(-1)
            index = next_action.view(-1, 1, 1).expand(-1, 1, n_target)
            next_values = next_quantiles[..., :n_target].gather(1, index).squeeze(1)  # [B, N']
            targets = batch.reward.unsqueeze(1) + batch.discount.unsqueeze(1) * next_values
        fractions = self.sample_fractions(size, config.n_fractions, batch.obs)  # per transition
        chosen = self.chosen_quantiles(batch.obs, batch.action, fractions)  # [B, N]
        loss = PairwiseQuantileHuberLoss.apply(chosen, fractions, targets, self.kappa)
        return loss, {"return_mean": chosen.detach().mean()}
