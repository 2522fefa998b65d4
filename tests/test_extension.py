"""The extension promise: a new agent is one module and one config, a new risk measure one
function and one config; nothing else is edited. Both are defined here, registered, checked
by the same contract and conformance code as the built-in ones, and trained end to end from
a composed config, with one seed and with two seeds as members."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest
import torch
from omegaconf import MISSING

import tests.test_agents as agent_tests
from rs_lightning.agents.base import AGENTS, Agent, AgentConfig, ChooseAction, mlp, register_agent
from rs_lightning.risk import RISK_MEASURES, ReturnDistribution, expectation, from_quantiles, risk_measure
from rs_lightning.train import run
from rs_lightning.types import Transitions


@dataclass
class GaussianConfig(AgentConfig):
    n_quantiles: int = MISSING  # quantiles of the Gaussian handed to the utility


class GaussianAgent(Agent):
    """Z(s, a) ~ N(mu, sigma^2) from one MLP; trained by the Gaussian negative log-likelihood
    of r + gamma z', z' a quantile of the target's law at the utility-greedy action."""

    def __init__(self, config: GaussianConfig, problem) -> None:
        super().__init__(config, problem)
        self.net = mlp([problem.obs_dim, *config.hidden_sizes, 2 * problem.n_actions])
        levels = (torch.arange(config.n_quantiles) + 0.5) / config.n_quantiles
        self.register_buffer("normal_quantiles", math.sqrt(2) * torch.erfinv(2 * levels - 1))

    def moments(self, obs):
        mu, log_sigma = self.net(obs).view(*obs.shape[:-1], self.problem.n_actions, 2).unbind(-1)
        return mu, log_sigma.clamp(-5, 2).exp()

    def return_distribution(self, obs) -> ReturnDistribution:
        mu, sigma = self.moments(obs)
        return from_quantiles(mu.unsqueeze(-1) + sigma.unsqueeze(-1) * self.normal_quantiles)

    def loss(self, batch: Transitions, target: Agent, choose_action: ChooseAction):
        with torch.no_grad():
            next_law = target.return_distribution(batch.next_obs)
            next_values = next_law.gather_actions(choose_action(next_law)).values  # [B, n]
            pick = torch.randint(next_values.shape[-1], (next_values.shape[0], 1))
            future = next_values.gather(-1, pick).squeeze(-1)
            y = batch.reward + self.problem.gamma * (1.0 - batch.terminated) * future
        mu, sigma = self.moments(batch.obs)
        index = batch.action.unsqueeze(-1)
        mu, sigma = mu.gather(-1, index).squeeze(-1), sigma.gather(-1, index).squeeze(-1)
        nll = torch.log(sigma) + 0.5 * ((y - mu) / sigma) ** 2
        return nll.mean(), {"sigma": sigma.detach().mean()}


def mean_minus_std(dist: ReturnDistribution, lam: float):
    """E[Z] - lam * std[Z]."""
    if lam < 0:
        raise ValueError(f"risk.lam: must be >= 0, got {lam}")
    mean = expectation(dist)
    spread = (dist.probs * (dist.values - mean.unsqueeze(-1)) ** 2).sum(-1).clamp_min(0).sqrt()
    return mean - lam * spread


@pytest.fixture
def extension(tmp_path, monkeypatch):
    """Register the agent and the measure (one call each) and write their configs into a
    folder on Hydra's search path; both are unregistered afterwards."""
    register_agent("gaussian", GaussianConfig)(GaussianAgent)
    risk_measure("mean_minus_std")(mean_minus_std)
    (tmp_path / "agent").mkdir()
    (tmp_path / "risk").mkdir()
    (tmp_path / "agent" / "gaussian.yaml").write_text(
        "name: gaussian\nhidden_sizes: [32, 32]\nn_quantiles: 21\n")
    (tmp_path / "risk" / "mean_minus_std.yaml").write_text("name: mean_minus_std\nlam: 0.5\n")
    monkeypatch.setattr(agent_tests, "agent_config",
                        lambda name, **o: GaussianConfig(name="gaussian", hidden_sizes=[32, 32],
                                                         n_quantiles=21))
    yield tmp_path
    AGENTS.pop("gaussian")
    RISK_MEASURES.pop("mean_minus_std")


def test_a_new_agent_passes_the_contract_and_the_conformance_checks(extension):
    agent_tests.test_return_distribution_is_sorted_and_sums_to_one("gaussian")
    agent_tests.test_loss_is_finite_and_backpropagates("gaussian", 0.3, "var")
    agent_tests.test_greedy_action_is_what_choose_action_returns("gaussian")
    for law in agent_tests.LAWS:
        agent_tests.test_every_representation_of_a_known_law_gives_its_risk("gaussian", law, None)


def test_a_new_agent_and_risk_measure_train_end_to_end(extension, compose, tmp_path):
    overrides = [f"hydra.searchpath=[file://{extension}]", "agent=gaussian", "risk=mean_minus_std",
                 "debug=quick", "logger=csv", "callbacks.progress_bar=false",
                 "trainer.max_steps=80", "evaluation.every_n_steps=40", "evaluation.episodes=50"]
    single = run(compose(overrides), run_dir=tmp_path / "single")
    assert single["risk"] == "mean_minus_std" and single["steps"] == 80
    assert math.isfinite(single["utility"])
    members = run(compose([*overrides, "parallel_seeds=2"]), run_dir=tmp_path / "members")
    assert sorted(members["members"]) == ["0", "1"]
    history = (tmp_path / "members" / "seed_1" / "eval_history.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in history] == [40, 80]
