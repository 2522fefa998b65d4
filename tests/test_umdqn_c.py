"""UMDQN-C: the monotone CDF, its fast evaluation, the Cramer loss, the Bellman target, learning."""

from __future__ import annotations

import copy
import math
import pickle
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from torch import Tensor

from rs_lightning.agents import AGENTS, Problem, Transitions
from rs_lightning.agents.umdqn_c import (
    UMDQNC,
    UMDQNCConfig,
    cramer_loss,
    mse_loss,
    step_cdf,
)
from rs_lightning.agents.umnn import clenshaw_curtis, covering_lattice
from rs_lightning.risk import Utility

CONFIG_FILE = Path(__file__).resolve().parents[1] / "conf" / "agent" / "rs_umdqn_c.yaml"
GRID = Problem(obs_dim=2, n_actions=4, gamma=0.9, return_min=-2.0, return_max=2.0)
CELLS = torch.tensor([[x, y] for x in range(3) for y in range(3)], dtype=torch.float32)


def make_config(**overrides) -> UMDQNCConfig:
    values = OmegaConf.to_container(OmegaConf.load(CONFIG_FILE))
    values.update(overrides)
    return UMDQNCConfig(**values)


def make_agent(seed: int = 0, problem: Problem = GRID, **overrides) -> UMDQNC:
    torch.manual_seed(seed)
    return UMDQNC(make_config(**overrides), problem)


def sharpen(agent: UMDQNC, seed: int, gain: float = 3.0, log_scale: float = 1.5) -> UMDQNC:
    """Random weights with a steep, rugged integrand, like a trained network's."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in agent.network.integrand:
            if isinstance(layer, torch.nn.Linear):
                layer.weight.mul_(gain)
                layer.bias.normal_(0.0, 0.5, generator=generator)
        last = agent.network.conditioner[-1]
        last.bias[GRID.n_actions :] = log_scale
    return agent


def reference_cdf(agent: UMDQNC, obs: Tensor, z: Tensor) -> Tensor:
    """F by a separate, accurate quadrature for every return, in float64 (16-point
    Gauss-Legendre on 16 panels of [0, z], through the unsplit network)."""
    exact = copy.deepcopy(agent).double()
    with torch.no_grad():
        return exact.cdf_by_quadrature(
            obs.double(), z.double(), n_nodes=16, panels=16, rule="gauss_legendre"
        )


# ------------------------------------------------------------------------------- config


def test_yaml_holds_every_field_and_validates():
    from rs_lightning.config.schema import agent_config_from

    node = OmegaConf.load(CONFIG_FILE)
    assert set(node.keys()) == UMDQNCConfig.yaml_fields()
    config = agent_config_from(node)
    assert isinstance(config, UMDQNCConfig)
    assert AGENTS["rs_umdqn_c"] == (UMDQNC, UMDQNCConfig)


@pytest.mark.parametrize(
    "key, value",
    [
        ("n_returns", 1),
        ("return_grid", "random"),
        ("loss", "wasserstein"),
        ("integration_rule", "gauss"),
        ("integration_step", 0.0),
        ("hidden_sizes", [128, 0]),
        ("integrand_hidden_sizes", []),
        ("conditioner_hidden_sizes", [-1]),
    ],
)
def test_check_names_the_bad_key(key, value):
    with pytest.raises(ValueError, match=f"^agent.{key}: .*got"):
        make_config(**{key: value}).check()


# ------------------------------------------------------------------------------- the CDF


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cdf_is_monotone_and_within_unit_interval(seed):
    agent = make_agent(seed)
    if seed:
        sharpen(agent, seed, gain=1.0 + 2.0 * seed, log_scale=float(seed))
    generator = torch.Generator().manual_seed(seed)
    obs = torch.cat([CELLS, 5.0 * torch.randn(7, 2, generator=generator)])
    near = torch.linspace(-6.0, 6.0, 1201)
    far = torch.tensor([-1e6, -1e3, -50.0, -20.0, 20.0, 50.0, 1e3, 1e6])
    z = torch.cat([near, far]).sort().values
    with torch.no_grad():
        cdf = agent.cdf(obs, z)
    assert cdf.shape == (16, GRID.n_actions, z.numel())
    assert torch.isfinite(cdf).all()
    assert (cdf >= 0).all() and (cdf <= 1).all()
    assert (cdf.diff(dim=-1) >= 0).all()


def test_return_distribution_is_a_distribution_on_the_grid():
    agent = make_agent()
    with torch.no_grad():
        dist = agent.return_distribution(CELLS)
    assert dist.values.shape == dist.probs.shape == (9, GRID.n_actions, 201)
    assert (dist.probs >= 0).all()
    assert torch.allclose(dist.probs.sum(-1), torch.ones(9, GRID.n_actions))
    assert dist.values[0, 0, 0] == GRID.return_min and dist.values[0, 0, -1] == GRID.return_max


@pytest.mark.parametrize("sharp", [False, True])
def test_fast_cdf_matches_an_accurate_quadrature(sharp):
    agent = make_agent(3)
    if sharp:
        sharpen(agent, 3)
    obs = CELLS[[0, 4, 8]]
    # The acting grid, and points of the whole Bellman-target reach (z - r) / gamma.
    z = torch.cat([agent.return_grid[::5], torch.linspace(-4.45, 4.45, 37)]).sort().values
    with torch.no_grad():
        fast = agent.cdf(obs, z).double()
    exact = reference_cdf(agent, obs, z)
    with torch.no_grad():  # the reference has converged: 32 panels change nothing
        finer = copy.deepcopy(agent).double().cdf_by_quadrature(
            obs.double(), z.double(), n_nodes=16, panels=32, rule="gauss_legendre"
        )
    assert (finer - exact).abs().max() < 1e-5
    assert (fast - exact).abs().max() < 1e-3


def test_clenshaw_curtis_integrates_polynomials_exactly():
    nodes, weights = clenshaw_curtis(51)
    assert abs(weights.sum() - 2.0) < 1e-12
    for power in (2, 10, 30):
        assert abs((weights * nodes**power).sum() - 2.0 / (power + 1)) < 1e-12


def test_lattice_covers_the_range_and_zero():
    lattice = covering_lattice(1.03, 2.0, 0.02, even=True)
    assert lattice.first == 0 and lattice.origin == 0  # 0 is always a node
    nodes = lattice.nodes(torch.zeros(()))
    assert nodes[-1] >= 2.0 - 1e-6 and (lattice.size - 1) % 2 == 0
    lattice = covering_lattice(-4.45, -0.5, 0.02, even=True)
    nodes = lattice.nodes(torch.zeros(()))
    assert nodes[0] <= -4.45 and nodes[lattice.origin] == 0 and lattice.origin % 2 == 0


# ------------------------------------------------------------------------------- the loss


def test_cramer_loss_matches_closed_forms():
    z = torch.linspace(-2.0, 2.0, 201)  # step 0.02
    # Two step functions: the squared difference counts the grid points between them.
    a, b = z[[50, 125, 150]], z[[100, 125, 75]]  # -1, 0.5, 1 and 0, 0.5, -0.5
    counts = torch.tensor([50.0, 0.0, 75.0])
    expected = counts.sqrt().sum()
    assert torch.allclose(cramer_loss(step_cdf(b, z), step_cdf(a, z)), expected)
    # A constant CDF 1/2 against any step: sqrt(N / 4) per sample.
    half = torch.full((3, 201), 0.5)
    assert torch.allclose(cramer_loss(step_cdf(a, z), half), torch.tensor(3 * math.sqrt(201) / 2))
    # A linear CDF j / (N - 1) against 0: sum_j j^2 / (N - 1)^2 = N (2N - 1) / (6 (N - 1)).
    n = 201
    ramp = torch.arange(n, dtype=torch.float64) / (n - 1)
    exact = math.sqrt(n * (2 * n - 1) / (6 * (n - 1)))
    assert abs(cramer_loss(torch.zeros(1, n, dtype=torch.float64), ramp[None]) - exact) < 1e-12
    # The authors' variant: the mean over every (sample, return).
    assert torch.allclose(mse_loss(step_cdf(b, z), step_cdf(a, z)), counts.sum() / (3 * 201))


def test_cramer_loss_gradient_is_finite_at_zero_residual():
    cdf = torch.rand(4, 10, requires_grad=True)
    target = cdf.detach().clone()
    target[1] += 0.1
    cramer_loss(target, cdf).backward()
    assert torch.isfinite(cdf.grad).all()
    assert (cdf.grad[0] == 0).all()


# ------------------------------------------------------------------------------- the target


def transitions(obs, action, reward, next_obs, terminated) -> Transitions:
    return Transitions(
        torch.as_tensor(obs, dtype=torch.float32),
        torch.as_tensor(action, dtype=torch.int64),
        torch.as_tensor(reward, dtype=torch.float32),
        torch.as_tensor(next_obs, dtype=torch.float32),
        torch.as_tensor(terminated, dtype=torch.float32),
        GRID.gamma * (1.0 - torch.as_tensor(terminated, dtype=torch.float32)),
    )


def test_terminal_target_is_the_step_at_the_reward_without_network_work(monkeypatch):
    target = make_agent()

    def forbidden(*args, **kwargs):
        raise AssertionError("a terminal transition needs no target network")

    monkeypatch.setattr(target, "state_curves", forbidden)
    z = target.return_grid
    reward = torch.tensor([z[37].item(), -0.31, 1.5])  # the first one is exactly a grid point
    batch = transitions(CELLS[:3], [0, 1, 2], reward, CELLS[3:6], [1, 1, 1])
    y = target.bellman_target(batch, z, Utility(0.5, "var", {"rho": 0.1}).greedy)
    assert torch.equal(y, (z[None] >= reward[:, None]).float())
    assert y[0, 37] == 1 and y[0, 36] == 0


def test_bootstrapped_target_is_the_target_cdf_at_the_shifted_returns():
    target = sharpen(make_agent(5), 5)
    seen = {}

    def choose_action(dist):
        seen["dist"] = dist
        seen["action"] = Utility(0.5, "var", {"rho": 0.1}).greedy(dist)
        return seen["action"]

    next_obs = CELLS[[4, 2, 4, 7]]
    reward = torch.tensor([-0.1, 2.0, -2.0, 0.3])
    batch = transitions(CELLS[[0, 1, 2, 3]], [0, 1, 2, 3], reward, next_obs, [0, 0, 0, 1])
    z = target.return_grid
    y = target.bellman_target(batch, z, choose_action)
    # choose_action saw the target's distributions at the 3 bootstrapped next states.
    assert seen["dist"].values.shape == (3, GRID.n_actions, 201)
    expected_dist = target.return_distribution(next_obs[:3])
    assert (seen["dist"].probs - expected_dist.probs).abs().max() < 1e-5
    # Rows 0-2: F_target((z - r) / gamma | s', a*) against an accurate quadrature.
    for i in range(3):
        shifted = (z - reward[i]) / GRID.gamma
        exact = reference_cdf(target, next_obs[i : i + 1], shifted)[0, seen["action"][i]]
        assert (y[i].double() - exact).abs().max() < 1e-3
    # Row 3 is terminal.
    assert torch.equal(y[3], (z >= reward[3]).float())


def logistic_target(locations, scales) -> UMDQNC:
    """A target network whose F(. | s, a) is the logistic CDF sigmoid((z - mu_a) / s_a) in
    every state: integrand 1, log-scale -log s_a, offset -mu_a / s_a."""
    agent = make_agent()
    locations, scales = torch.tensor(locations), torch.tensor(scales)
    with torch.no_grad():
        last = agent.network.integrand[-1]
        last.weight.zero_()
        last.bias.zero_()  # ELU(0) + 1 = 1
        head = agent.network.conditioner[-1]
        head.weight.zero_()
        head.bias.copy_(torch.cat([-locations / scales, -scales.log()]))
    return agent


def test_risk_averse_target_action_avoids_the_fat_lower_tail():
    # Action 0: mean 0.5 with a fat lower tail (VaR_0.1 ~ -0.38); action 1: mean 0.3, narrow
    # (VaR_0.1 ~ 0.19); actions 2, 3 are bad.
    locations, scales = [0.5, 0.3, -1.0, -1.5], [0.4, 0.05, 0.05, 0.05]
    target = logistic_target(locations, scales)
    z = target.return_grid
    batch = transitions(CELLS[:2], [0, 0], [0.2, -0.1], CELLS[[4, 8]], [0, 0])
    for utility, action in [(Utility(0.0, "var", {"rho": 0.1}), 1), (Utility(1.0), 0)]:
        y = target.bellman_target(batch, z, utility.greedy)
        mu, s = locations[action], scales[action]
        for i, r in enumerate([0.2, -0.1]):
            exact = torch.sigmoid(((z - r) / GRID.gamma - mu) / s)
            assert (y[i] - exact).abs().max() < 1e-5, (utility, i)


# ------------------------------------------------------------------------------- learning


def test_loss_gradients_are_finite_and_metrics_detached():
    agent = sharpen(make_agent(7), 7)
    target = copy.deepcopy(agent).requires_grad_(False).eval()
    generator = torch.Generator().manual_seed(0)
    index = torch.randint(9, (32,), generator=generator)
    batch = transitions(
        CELLS[index],
        torch.randint(4, (32,), generator=generator),
        (torch.randn(32, generator=generator) * 1.5).clamp(-2, 2),
        CELLS[index.flip(0)],
        (torch.rand(32, generator=generator) < 0.3).float(),
    )
    for loss_name, grid in [("cramer", "fixed"), ("mse", "fixed"), ("mse", "uniform")]:
        agent.config = make_config(loss=loss_name, return_grid=grid)
        agent.zero_grad()
        loss, metrics = agent.loss(batch, target, Utility(0.5, "var", {"rho": 0.1}).greedy)
        loss.backward()
        assert torch.isfinite(loss)
        grads = [p.grad for p in agent.parameters()]
        assert all(g is not None and torch.isfinite(g).all() for g in grads)
        assert sum(g.abs().sum() for g in grads) > 0
        assert all(not v.requires_grad and v.dim() == 0 for v in metrics.values())
        assert -2.0 <= metrics["return_mean"] <= 2.0


def test_uniform_returns_are_sorted_draws_in_the_range():
    agent = make_agent(return_grid="uniform")
    z = agent.training_returns()
    assert z.shape == (200,) and (z.diff() >= 0).all()
    assert z.min() >= -2.0 and z.max() <= 2.0
    assert not torch.equal(z, agent.training_returns())
    assert torch.equal(agent.return_distribution(CELLS[:1]).values[0, 0, 1:-1],
                       0.5 * (agent.return_grid[1:] + agent.return_grid[:-1]))


def test_agent_pickles_and_deepcopies():
    agent = sharpen(make_agent(9), 9)
    obs = CELLS[[1, 5]]
    with torch.no_grad():
        expected = agent.cdf(obs, agent.return_grid)
        for clone in (pickle.loads(pickle.dumps(agent)), copy.deepcopy(agent)):
            assert torch.equal(clone.cdf(obs, clone.return_grid), expected)


def bimodal_cdf(z: Tensor) -> Tensor:
    """0.75 N(1, 0.1^2) + 0.25 N(-1, 0.1^2)."""
    normal = lambda mean: 0.5 * (1 + torch.erf((z - mean) / (0.1 * math.sqrt(2))))  # noqa: E731
    return 0.75 * normal(1.0) + 0.25 * normal(-1.0)


def learn_bandit(loss: str, phases: list[tuple[int, float]], seed: int = 0) -> float:
    """Learn the bimodal reward of a one-state bandit (terminal transitions) with the real loss,
    Adam and gradient clipping, for ``(steps, learning rate)`` phases; return the
    Wasserstein-1 distance integral |F - F_true| dz to the true distribution."""
    problem = Problem(obs_dim=1, n_actions=1, gamma=0.9, return_min=-2.0, return_max=2.0)
    agent = make_agent(seed, problem, loss=loss)
    target = copy.deepcopy(agent).requires_grad_(False)
    optimizer = torch.optim.Adam(agent.parameters(), lr=phases[0][1], eps=1e-5)
    choose_action = Utility(0.5, "var", {"rho": 0.1}).greedy
    generator = torch.Generator().manual_seed(seed)
    obs, action = torch.zeros(32, 1), torch.zeros(32, dtype=torch.int64)
    for steps, lr in phases:
        for group in optimizer.param_groups:
            group["lr"] = lr
        for _ in range(steps):
            mode = torch.where(torch.rand(32, generator=generator) < 0.75, 1.0, -1.0)
            reward = mode + 0.1 * torch.randn(32, generator=generator)
            batch = Transitions(obs, action, reward, obs, torch.ones(32), torch.zeros(32))
            loss_value, _ = agent.loss(batch, target, choose_action)
            optimizer.zero_grad()
            loss_value.backward()
            torch.nn.utils.clip_grad_norm_(agent.parameters(), 1.0)
            optimizer.step()
    z = torch.linspace(-3.0, 3.0, 6001)
    with torch.no_grad():
        learned = agent.cdf(obs[:1], z)[0, 0]
    return float((learned - bimodal_cdf(z)).abs().sum() * (z[1] - z[0]))


def test_bandit_learns_a_bimodal_reward():
    # 0.022-0.041 over seeds 0-3; dropping the -1 mode would give 0.5.
    assert learn_bandit("mse", [(500, 1e-3), (300, 1e-4)]) < 0.06


@pytest.mark.slow
def test_bandit_with_the_paper_learning_rate():
    assert learn_bandit("mse", [(3000, 1e-4)]) < 0.06


@pytest.mark.slow
def test_per_sample_cramer_loss_misses_the_minority_mode():
    """sum_i sqrt(sum_z ...) is minimised by a geometric median of the per-sample targets, not
    by their mean: it drops the 25% mode at -1 (W1 ~ 0.5 = 0.25 * 2)."""
    assert learn_bandit("cramer", [(1500, 1e-3)]) > 0.3


@pytest.mark.parametrize("rows", [1, 32, 64, 300])
@pytest.mark.parametrize("columns", [1, 3, 8, 12])
def test_unique_rows_is_torch_unique(rows, columns):
    """The column-sorted distinct rows (and the fallback) agree with torch.unique(dim=0):
    repeated grid cells, continuous states, signed zeros."""
    from rs_lightning.agents.umnn import unique_rows

    gen = torch.Generator().manual_seed(rows * 100 + columns)
    cells = torch.randint(-2, 3, (rows, columns), generator=gen).float() * 0.5
    cells[cells == 0] = torch.where(torch.rand((cells == 0).sum(), generator=gen) < 0.5, -0.0, 0.0)
    for x in (cells, torch.randn(rows, columns, generator=gen)):
        expected, expected_inverse = torch.unique(x, dim=0, return_inverse=True)
        distinct, inverse = unique_rows(x)
        assert torch.equal(distinct, expected) and torch.equal(inverse, expected_inverse)
        assert torch.equal(distinct[inverse], x)
