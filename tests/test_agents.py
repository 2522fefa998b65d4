"""One contract for every agent, and every agent x risk measure pair through a real run.

- Contract (parametrised over every registered agent): the config file holds every field;
  ``return_distribution`` is a ``[B, A, K]`` distribution in the common form (probabilities
  summing to one, sorted values); the loss is finite and backpropagates; acting and the target
  action go through ``choose_action``.
- Conformance: the same known law (a Gaussian and the risky-rewards "orange" mixture) through
  each agent's representation, built as that representation's ideal output and turned into the
  common form by the agent's own code; E, VaR and CVaR must match the closed forms within the
  representation's resolution, and every representation must rank two laws the same way.
- IQN's native distortion route against the common route on a known quantile function.
- Every agent x risk pair trains in-process for a few updates and writes its evaluation
  (the same pairs through the command line with ``debug=quick``: ``-m slow``).
"""

from __future__ import annotations

import copy
import functools
import json
import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from scipy import special

from rs_lightning.agents import AGENTS, Problem, Transitions
from rs_lightning.agents.c51 import project_onto_atoms
from rs_lightning.agents.umdqn_kl import flow_log_density
from rs_lightning.app.train import run
from rs_lightning.config.schema import agent_config_from
from rs_lightning.risk import (
    RISK_MEASURES,
    ReturnDistribution,
    Utility,
    conditional_value_at_risk,
    expectation,
    from_cdf,
    value_at_risk,
)
from tests.conftest import CONF, agents_by_actions, replay_agents
from tests.test_risk import Mixture

NAMES = replay_agents()
# The value-based agents pick among actions by choose_action; the actor-critics act in a box
# (their own contract: tests/test_actor_critic.py).
DISCRETE = agents_by_actions(continuous=False)
RISKS = sorted(p.stem for p in (CONF / "risk").glob("*.yaml"))
GRID = Problem(obs_dim=2, n_actions=4, gamma=0.9, return_min=-2.0, return_max=2.0)
BOX = Problem(obs_dim=2, n_actions=1, gamma=0.9, return_min=-2.0, return_max=2.0, action_dim=2)
CELLS = torch.tensor([[x, y] for x in range(3) for y in range(3)], dtype=torch.float32)


def agent_config(name: str, **overrides):
    node = OmegaConf.load(CONF / "agent" / f"{name}.yaml")
    for key, value in overrides.items():
        node[key] = value
    return agent_config_from(node)


def make_agent(name: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    cls, _ = AGENTS[name]
    return cls(agent_config(name, **overrides), BOX if cls.continuous_actions else GRID)


def make_batch(seed: int = 0, terminal: float = 0.3, size: int = 32,
               continuous: bool = False) -> Transitions:
    generator = torch.Generator().manual_seed(seed)
    states = torch.randint(9, (size,), generator=generator)
    next_states = torch.randint(9, (size,), generator=generator)
    terminated = (torch.rand(size, generator=generator) < terminal).float()
    actions = (torch.rand(size, BOX.action_dim, generator=generator) * 2 - 1 if continuous
               else torch.randint(4, (size,), generator=generator))
    return Transitions(
        CELLS[states],
        actions,
        (torch.randn(size, generator=generator) * 0.7).clamp(-2, 2),
        CELLS[next_states],
        terminated,
        GRID.gamma * (1.0 - terminated),
    )


def risk_utility(risk: str, alpha: float = 0.5) -> Utility:
    params = OmegaConf.to_container(OmegaConf.load(CONF / "risk" / f"{risk}.yaml"))
    params.pop("name")
    params = {k: (0.1 if v == "${rho}" else v) for k, v in params.items()}
    return Utility(alpha, risk, params)


class Spy:
    """A choose_action that records what it sees and returns fixed actions."""

    utility = None  # a rule of its own, not a utility's argmax

    def __init__(self, action: int | None = None):
        self.action = action
        self.seen: list[ReturnDistribution] = []

    def __call__(self, dist: ReturnDistribution) -> torch.Tensor:
        self.seen.append(dist)
        rows = dist.values.shape[0]
        if self.action is None:
            return torch.arange(rows) % dist.values.shape[1]
        return torch.full((rows,), self.action, dtype=torch.long)


# ============================================================================ contract


def test_every_agent_has_a_config_file_and_the_new_ones_are_registered():
    assert {p.stem for p in (CONF / "agent").glob("*.yaml")} == set(AGENTS)
    assert {"dqn", "rs_umdqn_c", "c51", "qr_dqn", "iqn", "umdqn_kl", "umdqn_w"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_yaml_holds_every_field_and_validates(name):
    node = OmegaConf.load(CONF / "agent" / f"{name}.yaml")
    _, config_class = AGENTS[name]
    assert set(node.keys()) == config_class.yaml_fields()
    assert isinstance(agent_config_from(node), config_class)


BAD_VALUES = {
    "c51": [("n_atoms", 1)],
    "qr_dqn": [("n_quantiles", 0), ("kappa", 0.0)],
    "iqn": [("n_cosines", 0), ("n_fractions", 0), ("n_acting_fractions", -1),
            ("kappa", -1.0), ("risk_route", "fast"), ("head_hidden_sizes", [0])],
    "umdqn_kl": [("n_returns", 1), ("terminal_std", 0.0), ("integration_step", 0.0)],
    "umdqn_w": [("n_quantiles", 0), ("kappa", 0.0), ("integration_step", 4.5),
                ("fraction_scale", 0.0), ("integration_rule", "gauss"), ("initial_spread", 0.0)],
}  # fmt: skip


@pytest.mark.parametrize(
    "name, key, value", [(n, k, v) for n, cases in BAD_VALUES.items() for k, v in cases]
)
def test_check_names_the_bad_key(name, key, value):
    from rs_lightning.errors import ConfigError

    node = OmegaConf.load(CONF / "agent" / f"{name}.yaml")
    node[key] = value
    with pytest.raises(ConfigError) as error:
        agent_config_from(node)
    assert error.value.key == f"agent.{key}" and "got" in str(error.value)


@pytest.mark.parametrize("name", NAMES)
def test_return_distribution_is_sorted_and_sums_to_one(name):
    agent = make_agent(name)
    with torch.no_grad():
        dist = agent.return_distribution(CELLS)
        single = agent.return_distribution(CELLS[:1])
    n_actions = agent.problem.n_actions
    assert dist.values.dim() == 3 and dist.values.shape[:2] == (9, n_actions)
    assert dist.values.shape == dist.probs.shape
    assert single.values.shape[1:] == dist.values.shape[1:]
    assert dist.values.dtype == dist.probs.dtype == torch.float32
    assert torch.isfinite(dist.values).all() and torch.isfinite(dist.probs).all()
    assert (dist.probs >= 0).all()
    assert torch.allclose(dist.probs.sum(-1), torch.ones(9, n_actions), atol=1e-5)
    assert (dist.values.diff(dim=-1) >= 0).all()


@pytest.mark.parametrize("risk", ["var", "entropic"])
@pytest.mark.parametrize("terminal", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("name", NAMES)
def test_loss_is_finite_and_backpropagates(name, terminal, risk):
    agent, target = make_agent(name, 0), make_agent(name, 1)
    batch = make_batch(terminal=terminal, continuous=agent.continuous_actions)
    loss, metrics = agent.loss(batch, target, risk_utility(risk).greedy)
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert all(v.dim() == 0 and not v.requires_grad for v in metrics.values())
    loss.backward()
    grads = [p.grad for p in agent.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0
    assert all(p.grad is None for p in target.parameters())  # the target is not trained


@pytest.mark.parametrize("name", DISCRETE)
def test_greedy_action_is_what_choose_action_returns(name):
    agent = make_agent(name)
    spy = Spy()
    actions = agent.greedy_action(CELLS, spy)
    assert actions.tolist() == [i % GRID.n_actions for i in range(9)]
    assert len(spy.seen) == 1
    assert spy.seen[0].values.shape[:2] == (9, GRID.n_actions)


@pytest.mark.parametrize("name", DISCRETE)
def test_target_action_is_what_choose_action_returns(name):
    """The target of the loss follows the action choose_action picks at s'."""
    agent, target = make_agent(name, 0), make_agent(name, 1)
    batch = make_batch(terminal=0.2)
    losses = []
    for action in range(GRID.n_actions):
        spy = Spy(action)
        torch.manual_seed(7)  # IQN samples fractions: the same ones for every action
        losses.append(agent.loss(batch, target, spy)[0].item())
        assert len(spy.seen) == 1
        rows = spy.seen[0].values.shape[0]
        assert int((batch.terminated == 0).sum()) <= rows <= batch.obs.shape[0]
        assert spy.seen[0].values.shape[1] == GRID.n_actions
    assert len(set(losses)) == GRID.n_actions, losses
    # Terminal transitions only: the next state does not matter.
    batch = make_batch(terminal=1.0)
    torch.manual_seed(7)
    first = agent.loss(batch, target, Spy(0))[0].item()
    torch.manual_seed(7)
    assert agent.loss(batch, target, Spy(3))[0].item() == pytest.approx(first, rel=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_copy_and_state_dict_give_the_same_distribution(name):
    agent = make_agent(name, 0)
    clone = copy.deepcopy(agent)
    other = make_agent(name, 1)
    other.load_state_dict(agent.state_dict())
    outputs = []
    for model in (agent, clone, other):
        torch.manual_seed(3)
        with torch.no_grad():
            outputs.append(model.return_distribution(CELLS))
    for dist in outputs[1:]:
        assert torch.equal(dist.values, outputs[0].values)
        assert torch.equal(dist.probs, outputs[0].probs)


# ============================================================================ conformance

# Laws inside the support [-2, 2] of the grid worlds (the orange tail below -2 has ~5e-7).
LAWS = {
    "gauss": Mixture([1.0], [0.2], [0.4]),
    "orange": Mixture([0.75, 0.25], [0.8, -1.2], [0.173, 0.173]),
}
# Four actions with known laws for IQN's two risk routes: a sure-ish small gain, the orange
# gamble, a wide Gaussian, a narrow loss.
IQN_LAWS = {
    "safe": Mixture([1.0], [0.1], [0.1]),
    "orange": LAWS["orange"],
    "wide": Mixture([1.0], [0.05], [0.8]),
    "loss": Mixture([1.0], [-0.5], [0.05]),
}
ALL_LAWS = {**LAWS, **IQN_LAWS}
LEVELS = [0.05, 0.1, 0.5]  # away from the orange law's flat stretch around 0.25


@functools.lru_cache(maxsize=None)
def fine_quantiles(law: str, n: int = 20_000) -> np.ndarray:
    """The law's quantiles at (i + 1/2) / n by inverting its CDF on a fine grid."""
    m = ALL_LAWS[law]
    z = np.linspace(m.lo, m.hi, 200_001)
    cdf = m.cdf(z)
    return np.interp((np.arange(n) + 0.5) / n, cdf, z)


@functools.lru_cache(maxsize=None)
def quantile_function(law: str):
    """tau -> VaR_tau of the law, as a torch function (interpolation of a fine table)."""
    m = ALL_LAWS[law]
    z = np.linspace(m.lo, m.hi, 400_001)
    table_u = torch.tensor(m.cdf(z), dtype=torch.float64)
    table_z = torch.tensor(z, dtype=torch.float64)

    def q(tau: torch.Tensor) -> torch.Tensor:
        t = tau.double().clamp(1e-12, 1 - 1e-12)
        index = torch.searchsorted(table_u, t).clamp(1, z.size - 1)
        u0, u1 = table_u[index - 1], table_u[index]
        w = ((t - u0) / (u1 - u0).clamp_min(1e-300)).clamp(0, 1)
        return (table_z[index - 1] + w * (table_z[index] - table_z[index - 1])).float()

    return q


def all_actions(values: torch.Tensor) -> torch.Tensor:
    """[K] -> [1, A, K]: the same law for every action."""
    return values.expand(1, GRID.n_actions, -1).contiguous()


def ideal_distribution(name: str, law: str, monkeypatch) -> ReturnDistribution:
    """The law as agent ``name`` represents it at best, through the agent's own code."""
    m = LAWS[law]
    obs = CELLS[:1]
    if name == "dqn":
        agent = make_agent(name)
        monkeypatch.setattr(agent, "q_values", lambda o: torch.full((1, GRID.n_actions), m.mean))
        return agent.return_distribution(obs)
    if name == "c51":  # the categorical projection of the law onto the 51 atoms
        agent = make_agent(name)
        fine = torch.tensor(fine_quantiles(law), dtype=torch.float64)
        weights = torch.full_like(fine, 1 / fine.numel())
        probs = project_onto_atoms(fine, weights, agent.atoms.double())
        logits = all_actions(probs.clamp_min(1e-30).log().float())
        monkeypatch.setattr(agent, "logits", lambda o: logits)
        return agent.return_distribution(obs)
    if name in ("qr_dqn", "umdqn_w"):  # the true quantiles at the N midpoint fractions
        agent = make_agent(name)
        quantiles = all_actions(quantile_function(law)(agent.fractions))
        monkeypatch.setattr(agent, "quantiles", lambda o: quantiles)
        return agent.return_distribution(obs)
    if name == "iqn":  # the true quantile function at K sampled fractions
        agent = make_agent(name, n_acting_fractions=5000)
        q = quantile_function(law)
        monkeypatch.setattr(agent, "quantiles", lambda o, tau: all_actions(q(tau[0])))
        torch.manual_seed(11)
        return agent.return_distribution(obs)
    if name == "rs_umdqn_c":  # the true CDF on the return grid, as return_distribution reads it
        agent = make_agent(name)
        grid = agent.return_grid
        return from_cdf(grid, all_actions(torch.tensor(m.cdf(grid.numpy()), dtype=torch.float32)))
    if name == "umdqn_kl":  # the flow h = Phi^-1(F) on the return grid
        agent = make_agent(name)
        grid = agent.return_grid
        h = torch.tensor(special.ndtri(m.cdf(grid.numpy())), dtype=torch.float32)
        return agent.distribution(grid, all_actions(h))
    return fitted_distribution(name, law)


# The agents whose ideal representation of a law is built above; any other agent (a new one)
# is fitted to the law instead, and only its expectation is checked (every representation
# recovers the mean of terminal rewards at its fixed point).
IDEAL = {"dqn", "c51", "qr_dqn", "umdqn_w", "iqn", "rs_umdqn_c", "umdqn_kl"}


def fitted_distribution(name: str, law: str, updates: int = 800) -> ReturnDistribution:
    """The law as agent ``name`` learns it: its own loss on terminal transitions from one
    state whose rewards are drawn from the law."""
    agent = make_agent(name)
    target = copy.deepcopy(agent).requires_grad_(False)
    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-3)
    generator = np.random.default_rng(5)
    choose = Utility(1.0, "var", {"rho": 0.1}).greedy
    draw = quantile_function(law)  # inverse-CDF sampling, one table for every batch
    with torch.enable_grad():
        for _ in range(updates):
            rewards = draw(torch.as_tensor(generator.uniform(0.001, 0.999, 64)))
            batch = Transitions(CELLS[:1].expand(64, -1), torch.as_tensor(generator.integers(4, size=64)),
                                rewards, CELLS[:1].expand(64, -1), torch.ones(64), torch.zeros(64))
            loss, _ = agent.loss(batch, target, choose)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return agent.return_distribution(CELLS[:1])


def quantile_tolerances(m: Mixture, n: int, rho: float) -> tuple[float, float, float]:
    """(E, VaR, CVaR) error bounds of n quantiles at midpoint fractions: VaR is the true
    quantile at a level within 1/(2n) of rho; E and CVaR err by at most the L1 distance of the
    step quantile function to the true one (end cells exactly, inner cells by their rise)."""
    var = max(m.quantile(min(rho + 0.5 / n, 1 - 1e-12)) - m.var(rho),
              m.var(rho) - m.quantile(max(rho - 0.5 / n - 1e-6, 1e-12)))  # fmt: skip
    cell0 = m.partial_expectation(1 / n) - 2 * m.partial_expectation(0.5 / n)
    j = math.ceil(rho * n) - 1
    rest = (m.quantile(min((j + 1) / n, 1 - 1e-12)) - m.quantile(1 / n)) / n
    inner = (m.quantile(1 - 1 / n) - m.quantile(1 / n)) / n
    top = m.mean - 2 * m.partial_expectation(1 - 0.5 / n) + m.partial_expectation(1 - 1 / n)
    return cell0 + inner + top, var, (cell0 + rest) / rho


def tolerances(name: str, law: str, rho: float) -> tuple[float, float, float]:
    """(E, VaR, CVaR) tolerances of agent ``name``'s representation (module docstring)."""
    m = LAWS[law]
    if name == "c51":  # the projection moves no mass further than one atom spacing
        spacing = (GRID.return_max - GRID.return_min) / 50
        return 1e-3, spacing + 1e-3, spacing + 1e-3
    if name in ("qr_dqn", "umdqn_w"):
        e, var, cvar = quantile_tolerances(m, 200, rho)
        return e + 1e-5, var + 1e-5, cvar + 1e-5
    if name == "iqn":  # K = 5000 samples of the quantile function: 5 standard errors
        k = 5000
        se_level = math.sqrt(rho * (1 - rho) / k)
        var = max(m.quantile(rho + 5 * se_level) - m.var(rho),
                  m.var(rho) - m.quantile(rho - 5 * se_level))  # fmt: skip
        x = fine_quantiles(law)
        se_cvar = np.std(np.minimum(x - m.var(rho), 0.0) / rho) / math.sqrt(k)
        return 5 * m.scale / math.sqrt(k), var, 5 * se_cvar
    if name in ("rs_umdqn_c", "umdqn_kl"):  # a CDF on a grid of step h: VaR within h / 2
        h = (GRID.return_max - GRID.return_min) / 199
        return h**2 / 6 * m.tv + 1e-5, h / 2 + 1e-5, h / 2 + 1e-5
    raise AssertionError(name)


@pytest.mark.parametrize("law", list(LAWS))
@pytest.mark.parametrize("name", DISCRETE)
def test_every_representation_of_a_known_law_gives_its_risk(name, law, monkeypatch):
    m = LAWS[law]
    with torch.no_grad():
        dist = ideal_distribution(name, law, monkeypatch)
    assert dist.values.shape[:2] == (1, GRID.n_actions)
    mean = expectation(dist)[0]
    if name == "dqn":  # a Dirac at Q: only the expectation is represented
        assert torch.allclose(mean, torch.tensor(m.mean, dtype=mean.dtype), atol=1e-6)
        return
    if name not in IDEAL:  # fitted by its own loss: 4 standard errors of 64-sample batches
        assert (mean - m.mean).abs().max() <= 4 * m.scale / 8, (mean, m.mean)
        return
    for rho in LEVELS:
        e_tol, var_tol, cvar_tol = tolerances(name, law, rho)
        assert (mean - m.mean).abs().max() <= e_tol, (rho, mean, m.mean)
        var = value_at_risk(dist, rho)[0]
        assert (var - m.var(rho)).abs().max() <= var_tol, (rho, var, m.var(rho))
        cvar = conditional_value_at_risk(dist, rho)[0]
        assert (cvar - m.cvar(rho)).abs().max() <= cvar_tol, (rho, cvar, m.cvar(rho))


def test_umdqn_kl_flow_density_is_the_law_density():
    """With h = Phi^-1(F), the flow's density phi(h) h' is the law's density f."""
    m = LAWS["orange"]
    z = np.linspace(-1.9, 1.9, 381)
    h = special.ndtri(m.cdf(z))
    slope = m.pdf(z) / np.exp(-0.5 * h**2) * math.sqrt(2 * math.pi)  # h' = f / phi(h)
    log_p = flow_log_density(torch.tensor(h), torch.tensor(slope))
    assert torch.allclose(log_p.exp(), torch.tensor(m.pdf(z)), rtol=1e-9, atol=1e-12)


def test_umdqn_kl_density_is_the_derivative_of_its_cdf():
    """The density the KL loss fits is exactly the derivative of the CDF used for acting:
    its integral between two returns is the CDF's increase (up to the quadrature of the
    check)."""
    agent = make_agent("umdqn_kl", 3).double()
    with torch.no_grad():
        for layer in agent.network.integrand:  # a steeper, rugged integrand
            if isinstance(layer, torch.nn.Linear):
                layer.weight.mul_(2.0)
        z = torch.linspace(-9.9, 9.9, 19_801, dtype=torch.float64)  # step 0.001
        obs = CELLS[[0, 4, 8]].double()
        density = agent.density(obs, z)  # [3, A, N]
        cdf = torch.special.ndtr(agent.state_curves(obs, -9.9, 9.9).monotone_of_all(z))
    increase = torch.cumulative_trapezoid(density, z, dim=-1)
    assert (density >= 0).all()
    assert (increase - (cdf[..., 1:] - cdf[..., :1])).abs().max() < 1e-4
    assert increase[..., -1].max() > 0.5  # a real test: much of the mass lies in the range


@pytest.mark.parametrize(
    "alpha, risk, params, action",
    [(0.5, "var", {"rho": 0.1}, 0), (0.5, "cvar", {"rho": 0.1}, 0), (1.0, "var", {"rho": 0.1}, 1),
     (0.0, "wang", {"eta": -0.75}, 0), (0.0, "entropic", {"beta": 1.0}, 0),
     (0.0, "mean_variance", {"lam": 0.1}, 1)],
)  # fmt: skip
@pytest.mark.parametrize("name", [n for n in NAMES if n in IDEAL - {"dqn"}])
def test_every_representation_ranks_two_laws_alike(name, alpha, risk, params, action, monkeypatch):
    """Action 0: the Gaussian N(0.2, 0.4); action 1: the orange mixture (mean 0.3, a fat low
    tail). Every representation must pick the action the exact laws give."""
    with torch.no_grad():
        dists = [ideal_distribution(name, law, monkeypatch) for law in ("gauss", "orange")]
    both = ReturnDistribution(
        torch.stack([dists[0].values[0, 0], dists[1].values[0, 0]])[None],
        torch.stack([dists[0].probs[0, 0], dists[1].probs[0, 0]])[None],
    )
    assert Utility(alpha, risk, params).greedy(both).tolist() == [action]


# ============================================================================ IQN native route


def patched_iqn(monkeypatch, **overrides):
    agent = make_agent("iqn", **overrides)
    functions = [quantile_function(law) for law in IQN_LAWS]
    calls = []

    def quantiles(obs, fractions):
        calls.append(fractions)
        rows = fractions.expand(obs.shape[0], -1)
        return torch.stack([q(rows) for q in functions], dim=1)  # [B, A, T]

    monkeypatch.setattr(agent, "quantiles", quantiles)
    return agent, calls


def exact_utility(law: str, utility: Utility) -> float:
    m = IQN_LAWS[law]
    z = np.linspace(m.lo, m.hi, 40_001)
    dist = from_cdf(torch.tensor(z), torch.tensor(m.cdf(z)))
    return float(utility(dist))


@pytest.mark.parametrize(
    "risk, params",
    [("var", {"rho": 0.1}), ("cvar", {"rho": 0.1}), ("wang", {"eta": -0.75}),
     ("power", {"eta": -2.0}), ("cpw", {"eta": 0.71}), ("expectation", {})],
)  # fmt: skip
@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_iqn_native_and_common_routes_agree(alpha, risk, params, monkeypatch):
    """Both routes estimate U from the same quantile function: the values agree within Monte
    Carlo error of K = 4000 fractions, and both pick the exact utility's action."""
    utility = Utility(alpha, risk, params)
    exact = [exact_utility(law, utility) for law in IQN_LAWS]
    common_agent, _ = patched_iqn(monkeypatch, n_acting_fractions=4000)
    native_agent, calls = patched_iqn(monkeypatch, n_acting_fractions=4000, risk_route="native")
    torch.manual_seed(0)
    common = utility(common_agent.return_distribution(CELLS[:1]))[0]
    fractions = native_agent.native_fractions(utility, 1, CELLS)
    native = native_agent.native_values(utility, native_agent.quantiles(CELLS[:1], fractions))[0]
    # Monte Carlo error of 4000 fractions: at most ~0.03 here (3 to 5 standard errors of
    # each law's weighted quantiles); the native VaR has none (every fraction is rho).
    target = torch.tensor(exact, dtype=torch.float64)
    assert torch.allclose(common.double(), target, atol=0.06), (common, exact)
    assert torch.allclose(native.double(), target, atol=0.06), (native, exact)
    best = int(np.argmax(exact))
    assert sorted(exact)[-1] - sorted(exact)[-2] > 0.07  # a clear winner for both routes
    assert common_agent.greedy_action(CELLS[:2], utility.greedy).tolist() == [best, best]
    calls.clear()
    assert native_agent.greedy_action(CELLS[:2], utility.greedy).tolist() == [best, best]
    # The native route sampled the distortion's fractions itself.
    (used,) = calls
    if risk == "var" and alpha == 0.0:
        assert torch.allclose(used, torch.full_like(used, 0.1))
    if risk == "cvar" and alpha == 0.0:
        assert used.max() <= 0.1


def test_iqn_native_route_reaches_the_target_action(monkeypatch):
    """In the loss, the native route picks the target action from the distortion's fractions
    (VaR: all at rho), and a measure that is not a distortion takes the common route."""
    agent = make_agent("iqn", risk_route="native")
    target, calls = patched_iqn(monkeypatch, risk_route="native")
    batch = make_batch(terminal=0.0)
    agent.loss(batch, target, Utility(0.0, "var", {"rho": 0.1}).greedy)
    (used,) = calls
    n_target = agent.config.n_target_fractions
    assert torch.allclose(used[:, n_target:], torch.full_like(used[:, n_target:], 0.1))
    calls.clear()
    spy_utility = Utility(0.0, "mean_variance", {"lam": 0.5})
    assert agent.native_utility(spy_utility.greedy) is None
    assert target.native_utility(Spy()) is None  # not a utility: the common route
    agent.loss(batch, target, spy_utility.greedy)
    (used,) = calls
    assert used.shape[-1] == n_target + agent.config.n_acting_fractions


# ============================================================================ learning


def train_two_state_chain(name: str, updates: int, lr: float = 1e-3):
    """s0 -> s1 with reward 0, then s1 -> end with reward 0.75 N(1, 0.1) + 0.25 N(-1, 0.1),
    whatever the action (so every action's law is learnt): Z(s1) is the mixture, Z(s0) is
    0.9 Z(s1). Returns the learnt distributions of action 0 at s1 and s0."""
    agent = make_agent(name)
    target = copy.deepcopy(agent)
    optimizer = torch.optim.Adam(agent.parameters(), lr=lr, eps=1e-5)
    utility = Utility(0.5, "var", {"rho": 0.1})
    generator = torch.Generator().manual_seed(1)
    s0, s1 = CELLS[0], CELLS[3]
    for update in range(updates):
        first = torch.rand(32, generator=generator) < 0.5
        good = torch.rand(32, generator=generator) < 0.75
        outcome = torch.where(good, 1.0, -1.0) + 0.1 * torch.randn(32, generator=generator)
        batch = Transitions(
            torch.where(first[:, None], s0, s1),
            torch.randint(4, (32,), generator=generator),
            torch.where(first, 0.0, outcome.clamp(-2, 2)),
            s1.expand(32, 2),
            (~first).float(),
            GRID.gamma * first.float(),
        )
        loss, _ = agent.loss(batch, target, utility.greedy)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(agent.parameters(), 1.0)
        optimizer.step()
        if (update + 1) % 100 == 0:
            target.load_state_dict(agent.state_dict())
    torch.manual_seed(0)
    with torch.no_grad():
        dist = agent.return_distribution(torch.stack([s1, s0]))
    return ReturnDistribution(dist.values[:, 0], dist.probs[:, 0])


@functools.lru_cache(maxsize=None)
def huber_quantile_fixed_point(kappa: float) -> tuple[float, float]:
    """E and VaR_0.1 of the minimisers of the quantile Huber loss at the 200 midpoint
    fractions for the chain's terminal law: with kappa = 1 on modes 2 apart they are not its
    quantiles (E 0.41 instead of 0.5, VaR_0.1 -0.68 instead of -1.03)."""
    from scipy import optimize

    rng = np.random.default_rng(0)
    x = np.where(rng.random(200_000) < 0.75, 1.0, -1.0) + 0.1 * rng.standard_normal(200_000)

    def minimiser(tau: float) -> float:
        def gradient(theta: float) -> float:
            u = x - theta
            return float(np.mean(np.abs(tau - (u < 0)) * np.clip(u, -kappa, kappa)))

        return optimize.brentq(gradient, -3.0, 3.0)

    values = np.sort([minimiser((i + 0.5) / 200) for i in range(200)])
    return float(values.mean()), float(values[19])


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in DISCRETE if n != "dqn"])
def test_every_distributional_agent_learns_a_bimodal_law_and_its_bootstrap(name):
    """After 2,000 updates the law at s1 is the representation's fixed point (the law itself;
    for the quantile Huber agents the Huber quantiles) within 0.1 in E and 0.25 in VaR_0.1,
    and E at s0 is gamma E at s1 within 0.1."""
    dist = train_two_state_chain(name, 2000)
    mean, var = expectation(dist), value_at_risk(dist, 0.1)
    agent = make_agent(name)
    kappa = getattr(agent, "kappa", getattr(agent.config, "kappa", None))
    expected_mean, expected_var = huber_quantile_fixed_point(kappa) if kappa else (0.5, -1.025)
    assert abs(float(mean[0]) - expected_mean) < 0.1, (mean, expected_mean)
    assert abs(float(var[0]) - expected_var) < 0.25, (var, expected_var)
    assert abs(float(mean[1]) - 0.9 * float(mean[0])) < 0.1, mean


# ============================================================================ runs


@functools.lru_cache(maxsize=None)
def composed(agent: str):
    from hydra import compose, initialize_config_dir

    # An actor-critic on the continuous world whose answer is known.
    world = ["env=risky_navigation"] if AGENTS[agent][0].continuous_actions else []
    overrides = [
        *world, f"agent={agent}", "logger=none", "callbacks.progress_bar=false",
        "trainer.max_steps=12", "trainer.log_every_n_steps=6", "trainer.checkpoint_every_n_steps=0",
        "learning.warmup_steps=32", "learning.target_update_period=5",
        "evaluation.episodes=16", "evaluation.every_n_steps=0", "evaluation.batch_envs=16",
    ]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def with_risk(cfg, risk: str):
    """``risk=<risk>`` on a composed config (the group file swapped in, as Hydra does)."""
    cfg = copy.deepcopy(cfg)
    OmegaConf.set_struct(cfg, False)
    cfg.risk = OmegaConf.load(CONF / "risk" / f"{risk}.yaml")
    OmegaConf.set_struct(cfg, True)
    return cfg


@pytest.mark.parametrize("risk", RISKS)
@pytest.mark.parametrize("name", NAMES)
def test_every_agent_and_risk_pair_trains_and_evaluates(name, risk, tmp_path):
    summary = run(with_risk(composed(name), risk), run_dir=tmp_path)
    assert (summary["agent"], summary["risk"], summary["steps"]) == (name, risk, 12)
    written = json.loads((tmp_path / "eval.json").read_text())
    for key in ("expectation", "var", "cvar", "utility"):
        assert math.isfinite(written[key])
    # The grid world's policy table (the actor-critics run on a continuous world: none).
    assert (tmp_path / "policy.json").is_file() != AGENTS[name][0].continuous_actions


@pytest.mark.slow
@pytest.mark.parametrize("risk", RISKS)
@pytest.mark.parametrize("name", NAMES)
def test_every_agent_and_risk_pair_from_the_command_line(name, risk, tmp_path):
    from tests.test_train import train_cli

    world = ["env=risky_navigation"] if AGENTS[name][0].continuous_actions else []
    result = train_cli(
        *world, f"agent={name}", f"risk={risk}", "debug=quick", "logger=none",
        f"hydra.run.dir={tmp_path / 'run'}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert (summary["agent"], summary["risk"], summary["steps"]) == (name, risk, 300)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["c51", "qr_dqn", "iqn", "umdqn_kl", "umdqn_w"])
def test_resume_from_a_checkpoint_ends_like_the_uninterrupted_run(name, compose, tmp_path):
    """IQN draws fractions from torch's generator, which the checkpoint restores."""
    quick = ["debug=quick", "logger=none", "callbacks.progress_bar=false", f"agent={name}"]
    full = run(compose(quick), run_dir=tmp_path / "full")
    checkpoint = tmp_path / "full" / "checkpoints" / "step0000100.ckpt"
    resumed = run(compose([*quick, f"ckpt_path={checkpoint}"]), run_dir=tmp_path / "resumed")
    assert resumed == full


def sweep_jobs(experiment: str, *command_line: str) -> list[dict[str, str]]:
    """The jobs Hydra's basic sweeper makes of a preset's sweep and command-line overrides."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.load(CONF / "experiment" / f"{experiment}.yaml").hydra.sweeper.params
    arguments = [f"{k}={v}" for k, v in params.items()] + list(command_line)
    overrides = OverridesParser.create().parse_overrides(arguments)
    (jobs,) = BasicSweeper.split_arguments(overrides, None)
    return [dict(o.split("=", 1) for o in job) for job in jobs]


def test_paper_table_takes_any_list_of_agents():
    jobs = sweep_jobs("paper_table", "agent=dqn,c51,qr_dqn,iqn")
    assert {job["agent"] for job in jobs} == {"dqn", "c51", "qr_dqn", "iqn"}
    assert len(jobs) == 3 * 4 * 5
    assert {job["agent"] for job in sweep_jobs("paper_table")} == {"dqn", "rs_umdqn_c"}


def test_agents_table_preset(compose):
    from rs_lightning.config.schema import validate

    jobs = sweep_jobs("agents_table")
    agents = {job["agent"] for job in jobs}
    assert agents == {"c51", "qr_dqn", "iqn", "umdqn_kl", "umdqn_w", "rs_umdqn_c"} <= set(AGENTS)
    assert {job["alpha"] for job in jobs} == {"0.5", "1.0"} and len(jobs) == 2 * 6 * 2 * 5
    for agent in agents:  # each job composes and validates (VaR at rho 0.1 by default)
        settings = validate(compose(["experiment=agents_table", f"agent={agent}"]))
        assert (settings.utility.risk, settings.utility.params) == ("var", {"rho": 0.1})


def test_risk_files_match_the_registry():
    assert set(RISKS) == set(RISK_MEASURES)


@pytest.mark.parametrize("name", NAMES)
def test_an_agent_with_a_fixed_support_keeps_its_laws_on_it(name):
    """The support-ends warning judges only the agents that say their laws live on
    [return_min, return_max]: theirs never leave it, even from untrained weights and
    states far from any seen."""
    agent = make_agent(name)
    problem = agent.problem
    far = torch.randn(64, problem.obs_dim) * 50.0
    law = agent.return_distribution(far)
    if agent.fixed_support:
        assert law.values.min() >= problem.return_min - 1e-5
        assert law.values.max() <= problem.return_max + 1e-5
    assert agent.fixed_support == (name in {"c51", "umdqn_c", "umdqn_kl", "rs_umdqn_c"})
