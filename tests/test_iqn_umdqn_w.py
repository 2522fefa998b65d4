"""IQN's fast update against its plain definition, and UMDQN-W's initial quantile function.

- IQN: the one-pass pairwise quantile Huber loss equals the reference (value and gradient);
  the taken action's values equal every action's values gathered; the whole loss equals the
  plain computation (every action's quantiles, gather, the reference loss) with the same
  random draws.
- UMDQN-W: every state and action starts from the same quantile function, centred on the
  return support and ``initial_spread`` times its width wide (the spread of a random
  initialisation, several times the support, dominated VaR for thousands of updates).
"""

from __future__ import annotations

import copy

import pytest
import torch

from rs_lightning.agents.quantile_loss import (
    PairwiseQuantileHuberLoss,
    midpoint_fractions,
    quantile_huber_loss,
    quantile_huber_loss_pairwise,
)
from rs_lightning.risk import Utility, from_quantiles
from tests.test_agents import CELLS, GRID, make_agent, make_batch


@pytest.mark.parametrize("kappa", [1.0, 0.3, 0.01])
def test_pairwise_quantile_huber_loss_matches_the_reference(kappa):
    generator = torch.Generator().manual_seed(0)
    quantiles = (torch.randn(16, 32, generator=generator) * 0.8).double().requires_grad_()
    fractions = torch.rand(16, 32, generator=generator).double()
    targets = (torch.randn(16, 24, generator=generator) * 0.8).double()
    value = PairwiseQuantileHuberLoss.apply(quantiles, fractions, targets, kappa)
    (gradient,) = torch.autograd.grad(value, quantiles)
    reference = quantile_huber_loss_pairwise(quantiles, fractions, targets, kappa).mean()
    (expected,) = torch.autograd.grad(reference, quantiles)
    assert torch.allclose(value, reference, rtol=1e-12, atol=1e-12)
    assert torch.allclose(gradient, expected, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("kappa", [1.0, 0.3, 0.01])
@pytest.mark.parametrize("targets_sorted", [True, False])
def test_prefix_sum_quantile_huber_loss_matches_the_reference(kappa, targets_sorted):
    """QR-DQN's O((N + M) log M) loss = the pairwise formula, value and gradient, including
    targets tied with a quantile +- kappa and quantiles out of order."""
    generator = torch.Generator().manual_seed(1)
    quantiles = (torch.randn(8, 40, generator=generator) * 1.5).double()
    targets = (torch.randn(8, 30, generator=generator) * 1.5).double()
    targets[:, :3] = quantiles[:, :3] + torch.tensor([kappa, -kappa, 0.0], dtype=torch.float64)
    if targets_sorted:
        targets = targets.sort(-1).values
    fractions = midpoint_fractions(40).double()
    quantiles.requires_grad_()
    value = quantile_huber_loss(quantiles, fractions, targets, kappa, targets_sorted)
    (gradient,) = torch.autograd.grad(value.sum(), quantiles)
    reference = quantile_huber_loss_pairwise(quantiles, fractions, targets, kappa)
    (expected,) = torch.autograd.grad(reference.sum(), quantiles)
    assert value.shape == (8,)
    assert torch.allclose(value, reference, rtol=1e-10, atol=1e-12)
    assert torch.allclose(gradient, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("head", [[], [64]])
def test_iqn_chosen_quantiles_are_the_gathered_quantiles(head):
    agent = make_agent("iqn", head_hidden_sizes=head)
    batch = make_batch()
    fractions = torch.rand(32, 7)
    every = agent.quantiles(batch.obs, fractions)  # [B, A, T]
    expected = every.gather(1, batch.action.view(-1, 1, 1).expand(-1, 1, 7)).squeeze(1)
    chosen = agent.chosen_quantiles(batch.obs, batch.action, fractions)
    assert torch.allclose(chosen, expected, atol=1e-6)
    # Shared fractions give the same values as the same row repeated for every state.
    shared = agent.quantiles(batch.obs, fractions[:1])
    assert torch.allclose(shared, agent.quantiles(batch.obs, fractions[:1].expand(32, -1)),
                          atol=1e-6)  # fmt: skip


def plain_iqn_loss(agent, batch, target, choose_action):
    """IQN's loss written out plainly: every action's values, gather, the reference loss."""
    config = agent.config
    with torch.no_grad():
        target_fractions = torch.rand(1, config.n_target_fractions)
        acting = torch.rand(1, config.n_acting_fractions)
        next_values = target.quantiles(batch.next_obs, target_fractions)
        next_action = choose_action(from_quantiles(target.quantiles(batch.next_obs, acting)))
        next_values = next_values[torch.arange(32), next_action]
        discount = agent.problem.gamma * (1.0 - batch.terminated)
        targets = batch.reward.unsqueeze(1) + discount.unsqueeze(1) * next_values
    fractions = torch.rand(32, config.n_fractions)
    quantiles = agent.quantiles(batch.obs, fractions)[torch.arange(32), batch.action]
    return quantile_huber_loss(quantiles, fractions, targets, agent.kappa).mean()


def test_iqn_loss_is_the_plain_loss_with_the_same_draws():
    agent = make_agent("iqn")
    target = make_agent("iqn", seed=1)
    batch = make_batch(terminal=0.3)
    utility = Utility(0.5, "var", {"rho": 0.1})
    torch.manual_seed(3)
    loss, _ = agent.loss(batch, target, utility.greedy)
    gradients = torch.autograd.grad(loss, list(agent.parameters()))
    torch.manual_seed(3)
    reference = plain_iqn_loss(agent, batch, target, utility.greedy)
    expected = torch.autograd.grad(reference, list(agent.parameters()))
    assert torch.allclose(loss, reference, rtol=1e-5)
    for got, want in zip(gradients, expected):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("route", ["common", "native"])
def test_iqn_midpoint_acting_is_deterministic_and_reads_the_midpoint_quantiles(route):
    """acting_fractions=midpoints: the same greedy actions at every call, and the acting
    distribution is Z at (k + 1/2) / K; sampled acting draws afresh (and differs somewhere)."""
    agent = make_agent("iqn", acting_fractions="midpoints", risk_route=route)
    obs = CELLS.float()
    utility = Utility(0.5, "cvar", {"rho": 0.25})
    torch.manual_seed(0)
    first = agent.greedy_action(obs, utility.greedy)
    assert all(torch.equal(agent.greedy_action(obs, utility.greedy), first) for _ in range(5))
    expected = agent.quantiles(obs, midpoint_fractions(32).unsqueeze(0))
    assert torch.allclose(agent.return_distribution(obs).values, expected.sort(-1).values)
    sampled = make_agent("iqn", acting_fractions="sampled", risk_route=route)
    draws = [sampled.return_distribution(obs).values for _ in range(2)]
    assert not torch.equal(draws[0], draws[1])
    with pytest.raises(ValueError, match="agent.acting_fractions: must be one of sampled, midpoints"):
        make_agent("iqn", acting_fractions="grid")


@pytest.mark.parametrize("spread", [1.0, 0.25])
def test_umdqn_w_starts_from_one_quantile_function_on_the_support(spread):
    for seed in range(3):
        agent = make_agent("umdqn_w", seed, initial_spread=spread)
        with torch.no_grad():
            curves = agent.quantile_curves(CELLS)
            quantiles = agent.quantiles(CELLS)  # [9, A, N]
        centre = 0.5 * (GRID.return_min + GRID.return_max)
        width = spread * (GRID.return_max - GRID.return_min)
        # Offset (the median) and scale: the same for every state and action.
        assert torch.allclose(curves.offset, torch.full_like(curves.offset, centre))
        assert torch.allclose(curves.log_scale, curves.log_scale[:1].expand_as(curves.log_scale))
        # The integrand is about 1 at initialisation: the range is about the wanted width.
        ranges = quantiles[..., -1] - quantiles[..., 0]
        assert ((ranges > 0.5 * width) & (ranges < 2.0 * width)).all(), ranges
        assert (quantiles[..., 100] - centre).abs().max() < 0.1 * width


def test_umdqn_w_initialisation_keeps_a_trainable_conditioner():
    """The zeroed last conditioner layer still learns: one update makes the offset depend on
    the state and action again."""
    agent = make_agent("umdqn_w")
    target = copy.deepcopy(agent)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    loss, _ = agent.loss(make_batch(terminal=0.5), target, Utility(0.5, "var", {"rho": 0.1}).greedy)
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        offset = agent.quantile_curves(CELLS).offset
    assert offset.std() > 0



@pytest.mark.parametrize("name", ["qr_dqn", "iqn"])
def test_the_default_huber_threshold_is_a_share_of_the_return_support(name):
    """kappa null: 2.5 % of the support's width (0.1 on the grid worlds' [-2, 2], where
    docs/qr_dqn_kappa.py finds the loss's fixed points at the quantiles); a number wins."""
    from rs_lightning.agents.quantile_loss import KAPPA_SHARE_OF_SUPPORT

    default = make_agent(name)
    assert default.config.kappa is None
    assert default.kappa == pytest.approx(0.1)
    assert KAPPA_SHARE_OF_SUPPORT * (default.problem.return_max - default.problem.return_min) \
        == pytest.approx(default.kappa)
    assert make_agent(name, kappa=1.0).kappa == 1.0
