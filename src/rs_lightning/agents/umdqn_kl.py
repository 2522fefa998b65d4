"""UMDQN-KL (Théate et al., 2021): the return density of a monotone network, trained with KL.

Interpretation. The paper's model family (its reference Théate et al., 2021, "Distributional
RL with unconstrained monotonic neural networks") learns one of three representations with
the same unconstrained monotonic network (UMNN): the CDF (UMDQN-C, Cramér distance), the PDF
(UMDQN-KL, Kullback-Leibler divergence) and the quantile function (UMDQN-W, Wasserstein
distance). For the PDF, the UMNN is used as a one-dimensional normalising flow, as in the
authors' code: with the monotone map

    h(z | s, a) = exp(c_a(s)) * integral_0^z f(t, h(s))_a dt + b_a(s)            (as UMDQN-C)

and a standard Gaussian base, the CDF is F(z) = Phi(h(z)) and the density

    p(z | s, a) = phi(h(z)) * exp(c_a(s)) * f(z, h(s))_a,

a valid density by construction (positive, integrating to one). UMDQN-C squashes the same h
with a sigmoid and fits F; here the density is fitted.

Learning, for every sampled transition i on the N_z returns z of [z_min, z_max]:

    target p_i(z) = N(z; r_i, terminal_std)                      if s'_i is terminal,
    target p_i(z) = p_target((z - r_i) / gamma | s'_i, a*_i) / gamma   otherwise,

with a*_i = choose_action(target distribution at s'_i) (the utility-greedy action of the
target network), and the loss is KL(target || p(. | s_i, a_i)) = integral p_i log(p_i / p),
evaluated as a Riemann sum on the returns, averaged over the batch. A terminal return is a
Dirac, which has no density: the authors replace it with a Gaussian as narrow as the return
grid's step (``terminal_std``), so the learnt law is the true one smoothed by that much.

Evaluation is the UMNN's fast path (:mod:`rs_lightning.agents.umnn`, as UMDQN-C): the integrand
is evaluated once per distinct state on a lattice, integrated by a cumulative rule, and h and
its derivative read anywhere by the exact interpolant of the table (the density is the
derivative of the CDF actually used for acting, not a separate approximation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from rs_lightning.agents.base import (
    ATOMS_WHY,
    MAX_ATOMS,
    check_count,
    MISSING,
    Agent,
    ChooseAction,
    Problem,
    Transitions,
    register_agent,
    rows_of,
)
from rs_lightning.agents.umnn import (
    EAGER_UNDER_COMPILE,
    MonotoneNetwork,
    StateCurves,
    UMNNConfig,
    next_states_of_members,
    shifted_return_range,
    umnn_curves_covering,
)
from rs_lightning.risk import ReturnDistribution, from_cdf

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass
class UMDQNKLConfig(UMNNConfig):
    """UMDQN-KL settings (values in ``conf/agent/umdqn_kl.yaml``)."""

    n_returns: int = MISSING  # N_z: evenly spaced returns of the loss and the acting grid
    terminal_std: float = MISSING  # std of the Gaussian target of a terminal transition

    def check(self) -> None:
        super().check()
        check_count("n_returns", self.n_returns, 2, MAX_ATOMS, ATOMS_WHY)
        if not self.terminal_std > 0:
            raise ValueError(
                f"agent.terminal_std: must be a positive float, got {self.terminal_std}"
            )


def gaussian_log_density(z: Tensor, mean: Tensor, std: float) -> Tensor:
    """log N(z; mean, std^2)."""
    return -0.5 * ((z - mean) / std).square() - math.log(std) - _LOG_SQRT_2PI


def flow_log_density(h: Tensor, slope: Tensor) -> Tensor:
    """log p(z) = log phi(h(z)) + log h'(z) for the flow z -> h(z) with a Gaussian base."""
    tiny = torch.finfo(slope.dtype).tiny
    return -0.5 * h.square() - _LOG_SQRT_2PI + slope.clamp_min(tiny).log()


def kl_on_grid(target: Tensor, log_density: Tensor, step: float) -> Tensor:
    """KL(target || p) = integral target log(target / p) by a Riemann sum on an evenly spaced
    grid: ``target[B, N]`` (densities), ``log_density[B, N]`` -> ``[B]``."""
    return step * (torch.xlogy(target, target) - target * log_density).sum(-1)


@register_agent("umdqn_kl", UMDQNKLConfig)
class UMDQNKL(Agent):
    """UMDQN-KL: the density of a UMNN normalising flow, fitted by KL (module docstring)."""

    config: UMDQNKLConfig
    supports_members = True
    fixed_support = True
    compiled_methods = ()
    eager_reason = EAGER_UNDER_COMPILE

    def __init__(self, config: UMDQNKLConfig, problem: Problem) -> None:
        super().__init__(config, problem)
        problem.check_return_support()
        self.network = MonotoneNetwork(problem, config)
        grid = torch.linspace(problem.return_min, problem.return_max, config.n_returns)
        self.register_buffer("return_grid", grid, persistent=False)
        self.grid_step = (problem.return_max - problem.return_min) / (config.n_returns - 1)

    def state_curves(self, obs: Tensor, low: float, high: float) -> StateCurves:
        """The integral table of every distinct state of ``obs``, covering [low, high] and 0."""
        return umnn_curves_covering(self.network, self.config, self.problem, obs, low, high)

    def distribution(self, grid: Tensor, h: Tensor) -> ReturnDistribution:
        """The common form: the CDF Phi(h) on the return grid (:func:`from_cdf`)."""
        return from_cdf(grid, torch.special.ndtr(h))

    def return_distribution(self, obs: Tensor) -> ReturnDistribution:
        """Phi(h) on the grid of N_z returns -> ``[B, A, N_z + 1]``."""
        problem, grid = self.problem, self.return_grid
        curves = self.state_curves(obs, problem.return_min, problem.return_max)
        return self.distribution(grid, curves.monotone_of_all(grid))

    def density(self, obs: Tensor, z: Tensor) -> Tensor:
        """p(z | s, a) for every state, action and return of ``z[N]`` -> ``[B, A, N]``."""
        low, high = torch.stack(torch.aminmax(z)).tolist()
        curves = self.state_curves(obs, low, high)
        actions = torch.arange(self.problem.n_actions, device=obs.device)
        curve = (curves.inverse.unsqueeze(1) * self.problem.n_actions + actions).flatten()
        h, slope = curves.monotone(curve, z.unsqueeze(0))
        return flow_log_density(h, slope).exp().view(obs.shape[0], -1, z.shape[-1])

    @torch.no_grad()
    def target_density(self, batch: Transitions, z: Tensor, choose_action: ChooseAction) -> Tensor:
        """The target density p_i(z) of every transition at the returns ``z[N]`` -> ``[B, N]``
        (``[M, B, N]`` for stacked members). Called on the target network; terminal
        transitions need no network work."""
        problem = self.problem
        target = gaussian_log_density(
            z, batch.reward.unsqueeze(-1), self.config.terminal_std
        ).exp()
        if self.members is not None:
            bootstrap, next_obs = next_states_of_members(batch)
            if not bool(bootstrap.any()):
                return target
            reward, rows = batch.reward, None
            # Terminal rows get a stand-in discount of 1 (their densities are not used).
            discount = torch.where(bootstrap, batch.discount, 1.0)
            low, high = shifted_return_range(problem, reward[bootstrap], batch.discount[bootstrap])
        else:
            rows = (batch.terminated == 0).nonzero().squeeze(1)
            if rows.numel() == 0:
                return target
            reward, next_obs = batch.reward.index_select(0, rows), batch.next_obs.index_select(0, rows)
            discount = batch.discount.index_select(0, rows)
            low, high = shifted_return_range(problem, reward, discount)
        discount = discount.unsqueeze(-1)
        shifted = (z - reward.unsqueeze(-1)) / discount  # [(M,) B', N]
        curves = self.state_curves(next_obs, low, high)
        grid = self.return_grid
        choose = choose_action if rows is None else rows_of(choose_action, rows)
        action = choose(self.distribution(grid, curves.monotone_of_all(grid)))
        curve = curves.inverse * problem.n_actions + action
        h, slope = curves.monotone(curve.flatten(), shifted.flatten(0, -2))
        density = flow_log_density(h, slope).exp().view(shifted.shape) / discount
        density = density.to(target.dtype)
        if rows is None:
            return torch.where(bootstrap.unsqueeze(-1), density, target)
        target[rows] = density
        return target

    def loss(
        self, batch: Transitions, target: Agent, choose_action: ChooseAction
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """KL(target density || p(. | s_i, a_i)) on the return grid, mean over the batch (one
        per member if stacked)."""
        problem, z = self.problem, self.return_grid
        y = target.target_density(batch, z, choose_action)  # type: ignore[attr-defined]
        curves = self.state_curves(batch.obs, problem.return_min, problem.return_max)
        rows = curves.inverse * problem.n_actions + batch.action
        h, slope = curves.monotone(rows.flatten(), z.unsqueeze(0))
        h, slope = h.view(*rows.shape, -1), slope.view(*rows.shape, -1)
        loss = kl_on_grid(y, flow_log_density(h, slope), self.grid_step).mean(-1)
        with torch.no_grad():  # E[Z(s_i, a_i)] as the acting distribution gives it
            dist = self.distribution(z, h)
            mean_return = (dist.values * dist.probs).sum(-1).mean(-1)
        return loss, {"return_mean": mean_return}
