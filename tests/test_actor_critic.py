"""The continuous-action actor-critics (agents/actor_critic.py, dsac.py, tqc.py) against hand
values: the squashed Gaussian's density, the temperature loss, the critics' target with the
actor's next action, TQC's truncation, DSAC's pessimistic law, and the actor's risk
objective on a critic whose law is known."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from torch import nn

from rs_lightning.agents.actor_critic import (
    LOG_STD_MIN,
    critic_targets,
    pessimistic_quantiles,
    squashed_gaussian,
    temperature_loss,
    truncated_mixture,
)
from rs_lightning.agents.dsac import DSAC, DSACConfig
from rs_lightning.agents.tqc import TQC, TQCConfig
from rs_lightning.risk import Utility
from rs_lightning.types import Problem, Transitions
from tests.conftest import run_and_resume_from_step_100

PROBLEM = Problem(obs_dim=1, n_actions=1, gamma=0.9, return_min=-10.0, return_max=10.0,
                  action_dim=1)


def tqc(**changes) -> TQC:
    settings = {"name": "tqc", "hidden_sizes": [16], "risk_conditioned": False, "n_critics": 2,
                "n_quantiles": 4, "kappa": 1.0, "initial_temperature": 1.0, "target_entropy": None,
                "dropped_quantiles": 1}
    settings.update(changes)
    return TQC(TQCConfig(**settings), PROBLEM)


def dsac(**changes) -> DSAC:
    settings = {"name": "dsac", "hidden_sizes": [16], "risk_conditioned": False, "n_critics": 2,
                "n_quantiles": 4, "kappa": 1.0, "initial_temperature": 1.0, "target_entropy": None,
                "actor_law": "pessimistic"}
    settings.update(changes)
    return DSAC(DSACConfig(**settings), PROBLEM)


def test_the_squashed_gaussian_log_density_is_the_change_of_variables():
    # u = 0.3 + 0.5 * 0.4 = 0.5; log N(0.5; 0.3, 0.5) = -0.08 - log 0.5 - log(2 pi) / 2;
    # the density of a = tanh(u) divides by da/du = 1 - tanh(u)^2.
    action, log_prob = squashed_gaussian(torch.tensor([0.3]), torch.tensor([math.log(0.5)]),
                                         torch.tensor([0.4]))
    gaussian = -0.08 - math.log(0.5) - 0.5 * math.log(2 * math.pi)
    assert action.item() == pytest.approx(math.tanh(0.5), abs=1e-7)
    assert log_prob.item() == pytest.approx(gaussian - math.log(1 - math.tanh(0.5) ** 2), abs=1e-6)


def test_the_squashed_density_integrates_to_one_and_stays_finite_where_tanh_saturates():
    mean, log_std = torch.tensor([0.7], dtype=torch.float64), torch.tensor([-0.3], dtype=torch.float64)
    # Integrate over a in (-1, 1) through u (da = (1 - tanh^2 u) du): the density of a at
    # tanh(u) times da/du is the Gaussian's density of u, so the sum is its mass.
    u = torch.linspace(-12, 12, 200001, dtype=torch.float64)
    noise = ((u - mean) / log_std.exp()).unsqueeze(-1)
    _, log_prob = squashed_gaussian(mean, log_std, noise)
    density_of_a = log_prob.exp()
    jacobian = 1 - torch.tanh(u) ** 2
    mass = torch.trapezoid(density_of_a * jacobian, u)
    assert mass.item() == pytest.approx(1.0, abs=1e-6)
    # Two coordinates, one far in the saturated tail: the log-density stays finite.
    _, far = squashed_gaussian(torch.zeros(2), torch.zeros(2), torch.tensor([30.0, -40.0]))
    assert torch.isfinite(far)
    # log(1 - tanh(u)^2) = 2 (log 2 - |u| - log(1 + e^{-2|u|})) ~ 2 log 2 - 2|u| far out.
    gaussian = -0.5 * (30.0**2 + 40.0**2) - math.log(2 * math.pi)
    assert far.item() == pytest.approx(gaussian - (2 * math.log(2) - 60) - (2 * math.log(2) - 80),
                                       rel=1e-6)


def test_the_temperature_loss_and_its_direction():
    log_temperature = torch.tensor(math.log(0.2), requires_grad=True)
    log_prob = torch.tensor([-1.0, -3.0])  # entropy estimate 2, above the target -2
    loss = temperature_loss(log_temperature, log_prob, target_entropy=-2.0)
    assert loss.item() == pytest.approx(math.log(0.2) * 4.0)  # -(log 0.2) * mean(-3, -5)
    loss.backward()
    assert log_temperature.grad.item() == pytest.approx(4.0)  # descent lowers the temperature
    high = torch.tensor(0.0, requires_grad=True)
    temperature_loss(high, torch.tensor([3.0]), target_entropy=-1.0).backward()
    assert high.grad.item() == pytest.approx(-2.0)  # entropy -3 below -1: it rises


def test_the_critic_targets_are_the_soft_distributional_bellman_samples():
    targets = critic_targets(reward=torch.tensor([1.0, 0.5]), discount=torch.tensor([0.9, 0.0]),
                             atoms=torch.tensor([[0.0, 1.0], [2.0, 3.0]]),
                             next_log_prob=torch.tensor([-1.0, 5.0]), temperature=0.1)
    expected = torch.tensor([[1.0 + 0.9 * 0.1, 1.0 + 0.9 * 1.1], [0.5, 0.5]])
    torch.testing.assert_close(targets, expected)


def test_truncation_and_the_pessimistic_law():
    quantiles = torch.tensor([[1.0, 5.0, 3.0], [2.0, 6.0, 4.0]])  # C = 2 critics, M = 3
    torch.testing.assert_close(truncated_mixture(quantiles, 1), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    torch.testing.assert_close(truncated_mixture(quantiles, 0), torch.arange(1.0, 7.0))
    twins = torch.tensor([[3.0, 1.0, 5.0], [2.0, 6.0, 4.0]])
    torch.testing.assert_close(pessimistic_quantiles(twins), torch.tensor([1.0, 3.0, 5.0]))


def test_dsac_s_actor_law_is_the_pessimistic_one_or_the_critics_mixture():
    """The target is the twin critics' pessimistic law either way; ``actor_law`` picks what
    the actor maximises U of (with twins that disagree, the mixture's mean is the critics'
    mean, the pessimistic law's lower)."""
    twins = torch.tensor([[3.0, 1.0, 5.0], [2.0, 6.0, 4.0]])
    pessimistic, mixture = dsac(), dsac(actor_law="mixture")
    for agent in (pessimistic, mixture):
        torch.testing.assert_close(agent.target_atoms(twins), torch.tensor([1.0, 3.0, 5.0]))
    torch.testing.assert_close(pessimistic.actor_atoms(twins), torch.tensor([1.0, 3.0, 5.0]))
    torch.testing.assert_close(mixture.actor_atoms(twins).sort().values, torch.arange(1.0, 7.0))
    with pytest.raises(ValueError, match="agent.actor_law: must be one of pessimistic, "
                                         "mixture, got 'min'"):
        DSACConfig(**{**vars(pessimistic.config), "actor_law": "min"}).check()


class KnownCritic(nn.Module):
    """C critics whose M quantiles at action a are mu(a) + sigma(a) z_i: z_i the standard
    normal quantiles at the midpoints, mu(a) = a, sigma(a) = exp(1.5 a) (a larger action
    has a higher mean and a wider lower tail)."""

    def __init__(self, critics: int, quantiles: int) -> None:
        super().__init__()
        taus = (torch.arange(quantiles) + 0.5) / quantiles
        self.register_buffer("z", torch.distributions.Normal(0.0, 1.0).icdf(taus))
        self.critics = critics

    def forward(self, obs, action):
        a = action[..., :1]
        one = a + torch.exp(1.5 * a) * self.z
        return one.unsqueeze(-2).expand(*one.shape[:-1], self.critics, one.shape[-1])


def batch_of(size: int) -> Transitions:
    zeros = torch.zeros(size)
    return Transitions(obs=torch.zeros(size, 1), action=torch.zeros(size, 1), reward=zeros,
                       next_obs=torch.zeros(size, 1), terminated=zeros, discount=zeros)


def deterministic_actor(agent, mean: float) -> None:
    """The actor's output: the mean ``mean`` before tanh, the smallest sigma, whatever s."""
    last = agent.actor[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.tensor([mean, LOG_STD_MIN]))


def test_the_critics_target_uses_the_actors_next_action_and_the_truncation(monkeypatch):
    agent = tqc(initial_temperature=1e-12)
    deterministic_actor(agent, 0.4)  # next action tanh(0.4), its density immaterial here

    class Recorder(nn.Module):
        def __init__(self):
            super().__init__()
            self.seen = []

        def forward(self, obs, action):
            self.seen.append(action.detach().clone())
            # Quantiles that show the action: critic c gives c + [a, 2a, 3a, 4a].
            base = action[..., :1] * torch.arange(1.0, 5.0)
            return torch.stack([base, base + 1.0], dim=-2)

    target = tqc()
    target.critics = Recorder()
    batch = batch_of(3)._replace(reward=torch.tensor([0.0, 1.0, 2.0]),
                                 discount=torch.tensor([0.9, 0.9, 0.0]))
    captured = {}
    import rs_lightning.agents.actor_critic as module
    real = module.quantile_huber_loss

    def spy(quantiles, fractions, targets, kappa, targets_sorted=False):
        captured["targets"] = targets
        return real(quantiles, fractions, targets, kappa, targets_sorted)

    monkeypatch.setattr(module, "quantile_huber_loss", spy)
    agent.loss(batch, target, Utility(1.0, "expectation").greedy)
    a = math.tanh(0.4)
    torch.testing.assert_close(target.critics.seen[0], torch.full((3, 1), a))
    # Pooled atoms a, 2a, 3a, 4a, 1 + a, ..., 1 + 4a (8), less the C * d = 2 largest.
    atoms = torch.tensor(sorted([k * a for k in range(1, 5)] + [1 + k * a for k in range(1, 5)])[:6])
    expected = torch.stack([0.0 + 0.9 * atoms, 1.0 + 0.9 * atoms, torch.full((6,), 2.0)])
    # [B, C, n]: both critics regress on the same target.
    torch.testing.assert_close(captured["targets"][:, 0], expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(captured["targets"][:, 1], expected, atol=1e-5, rtol=0)


MEASURES = [
    Utility(1.0, "expectation"),
    Utility(0.0, "var", {"rho": 0.1}),
    Utility(0.0, "cvar", {"rho": 0.1}),
    Utility(0.0, "wang", {"eta": -0.75}),
    Utility(0.0, "cpw", {"eta": 0.71}),
    Utility(0.0, "power", {"eta": -2.0}),
    Utility(0.0, "mean_variance", {"lam": 0.5}),
    Utility(0.0, "entropic", {"beta": 1.0}),
    Utility(0.5, "cvar", {"rho": 0.25}),
]


@pytest.mark.parametrize("make", [tqc, dsac, functools.partial(dsac, actor_law="mixture")],
                         ids=["tqc", "dsac", "dsac-mixture"])
@pytest.mark.parametrize("utility", MEASURES, ids=lambda u: f"{u.risk}-alpha{u.alpha}")
def test_the_actor_moves_its_action_toward_the_higher_utility(make, utility):
    """On the known critic, each measure's U(a) has a slope at a = 0 whose sign the risk
    decides (E rises with a; the risk-averse measures fall, the tail widening faster than
    the mean grows); the actor's gradient steps move tanh(mu) that way and raise U."""
    torch.manual_seed(0)
    agent = make(initial_temperature=1e-8, n_quantiles=64)
    agent.critics = KnownCritic(agent.config.n_critics, 64)
    deterministic_actor(agent, 0.0)

    def u_at(action: float) -> float:
        obs = torch.zeros(1, 1)
        law = agent.action_law(obs, torch.tensor([[action]]))
        return utility(law).item()

    slope = (u_at(0.01) - u_at(-0.01)) / 0.02
    assert abs(slope) > 0.05, "the toy critic must make the measure choose a side"
    optimizer = torch.optim.SGD(agent.actor.parameters(), lr=0.05)
    before = u_at(0.0)
    for _ in range(5):
        optimizer.zero_grad()
        loss, _ = agent.loss(batch_of(64), agent, utility.greedy)
        loss.backward()
        optimizer.step()
    moved = agent.greedy_action(torch.zeros(1, 1), utility.greedy).item()
    assert np.sign(moved) == np.sign(slope), (moved, slope)
    assert u_at(moved) > before


def test_the_agent_shows_the_law_of_its_mean_action_as_one_action():
    agent = tqc()
    obs = torch.randn(5, 1)
    law = agent.return_distribution(obs)
    assert law.values.shape == (5, 1, 8)  # one action, C * M atoms
    assert torch.all(law.values[..., 1:] >= law.values[..., :-1])
    action = agent.greedy_action(obs, Utility(1.0, "expectation").greedy)
    assert action.shape == (5, 1) and torch.all(action.abs() < 1)
    noise = torch.zeros(5, 1)
    torch.testing.assert_close(agent.sample_action(obs, noise), action)  # noise 0: the mean


def test_the_loss_noise_is_the_agents_own_and_an_older_checkpoint_without_it_loads():
    """The loss's draws come from the agent's generator, not torch's global one; its state
    travels in the state dict, and a state dict without it (written before the agents kept
    it) still loads, the weights with it and the generator left as it was."""
    torch.manual_seed(0)
    agent, twin = tqc(), tqc()
    twin.load_state_dict(agent.state_dict())
    obs = torch.randn(6, 1)
    torch.manual_seed(1)
    first = agent._noise(obs)
    torch.manual_seed(2)  # another global state: the same draw
    torch.testing.assert_close(twin._noise(obs), first)
    older = {key: value for key, value in agent.state_dict().items()
             if not key.endswith("_extra_state")}
    fresh = tqc()
    state = fresh.get_extra_state().clone()
    fresh.load_state_dict(older)  # strict
    assert torch.equal(fresh.get_extra_state(), state)
    for key, value in older.items():
        assert torch.equal(fresh.state_dict()[key], value), key


# ------------------------------------------------------------------ runs end to end
def quick(compose, *overrides):
    return compose(["debug=quick", "logger=none", "callbacks.progress_bar=false",
                    "experiment=risky_navigation", "evaluation.episodes=50",
                    "evaluation.every_n_steps=100", *overrides])


@pytest.mark.parametrize("agent", ["tqc", pytest.param("dsac", marks=pytest.mark.slow)])
def test_members_copies_and_n_step_returns_train_and_resume_exactly(compose, tmp_path, agent):
    """Two members, two copies each, 3-step returns, an update every other step:
    the run from its step-100 checkpoint ends exactly as the uninterrupted one."""
    overrides = [f"agent={agent}", "agent.hidden_sizes=[32]", "parallel_seeds=2",
                 "env.num_envs=2", "learning.n_step=3", "learning.updates_per_step=0.5",
                 "learning.warmup_steps=64", "trainer.max_steps=200",
                 "trainer.checkpoint_every_n_steps=100"]
    run_and_resume_from_step_100(lambda *more: quick(compose, *overrides, *more), tmp_path,
                                 seeds=2)
