"""The extension promise: a new agent is one module and one config, a new risk measure one
function and one config, a new objective one module; nothing else is edited. Both are defined here, registered, checked
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
from rs_lightning.agents.base import (
    AGENTS,
    Agent,
    AgentConfig,
    ChooseAction,
    mlp,
    register_agent,
)
from rs_lightning.app.train import run
from rs_lightning.objectives import OBJECTIVES, register_objective
from rs_lightning.objectives.static import AccumulatedReturns, Static, start_input
from rs_lightning.risk import (
    RISK_MEASURES,
    ReturnDistribution,
    expectation,
    from_quantiles,
    risk_measure,
)
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
        "name: gaussian\nhidden_sizes: [32, 32]\nrisk_conditioned: false\nn_quantiles: 21\n")
    (tmp_path / "risk" / "mean_minus_std.yaml").write_text("name: mean_minus_std\nlam: 0.5\n")
    monkeypatch.setattr(agent_tests, "agent_config",
                        lambda name, **o: GaussianConfig(name="gaussian", hidden_sizes=[32, 32],
                                                         risk_conditioned=False, n_quantiles=21))
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


# ------------------------------------------------------------------ a new objective
class FixedThresholdReturns(AccumulatedReturns):
    """Every episode starts with the same threshold b: no draws, no search."""

    def __init__(self, threshold: float, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fixed = threshold

    def resolve(self, obs, best) -> None:
        self.threshold[self.pending] = self.fixed
        self.pending[:] = False


class FixedThreshold(Static):
    """The static CVaR rule at one threshold b for every episode, the middle of the return
    support: Rockafellar and Uryasev's inner problem at a fixed b, a lower bound of the
    static objective."""

    @property
    def threshold(self) -> float:
        return 0.5 * (self.static.return_min + self.static.return_max)

    def episode_state(self, seeds, copies, gamma, training=True):
        return FixedThresholdReturns(self.threshold, self.static, seeds, copies, gamma)

    def start_rule(self, obs, network):
        thresholds = torch.full(obs.shape[:-1], self.threshold, dtype=torch.float64)
        return self.acting_rule(start_input(self.static, obs, thresholds), None, network)


@pytest.fixture
def fixed_threshold():
    register_objective("fixed_threshold")(FixedThreshold)
    yield
    OBJECTIVES.pop("fixed_threshold")


def test_a_new_objective_trains_and_resumes_exactly(fixed_threshold, compose, tmp_path):
    """An objective defined here, registered with one call, runs through the one engine:
    its episode state is stored and checkpointed, it acts and prepares the batches, the
    evaluation plays it, and a run resumed from a checkpoint ends as the uninterrupted one,
    with one seed and with two members on two copies each."""
    overrides = ["objective=fixed_threshold", "agent=c51", "env=two_stage", "risk=cvar",
                 "alpha=0.5", "debug=quick", "logger=none", "callbacks.progress_bar=false",
                 "trainer.max_steps=120", "trainer.checkpoint_every_n_steps=60",
                 "evaluation.every_n_steps=60", "evaluation.episodes=200",
                 "evaluation.episodes_during_training=50"]
    for extra, name in (([], "single"), (["parallel_seeds=2", "env.num_envs=2"], "members")):
        full = run(compose([*overrides, *extra]), run_dir=tmp_path / name)
        checkpoint = tmp_path / name / "checkpoints" / "step0000060.ckpt"
        resumed = run(compose([*overrides, *extra, f"ckpt_path={checkpoint}"]),
                      run_dir=tmp_path / f"{name}_resumed")
        assert resumed == full
        summaries = [full] if name == "single" else list(full["members"].values())
        for summary in summaries:
            # Every evaluation episode started at the fixed threshold: 0, the middle of the
            # two-stage world's support.
            assert summary["objective"] == "static" and summary["static_threshold"] == 0.0
            assert math.isfinite(summary["mc_static_utility"])
        state = torch.load(checkpoint, weights_only=True)
        thresholds = state["ExperienceDataModule"]["collector"]["accumulated"]["threshold"]
        assert {b for row in thresholds for b in row} <= {0.0}  # [copies, levels]


def test_an_unknown_objective_is_refused_in_one_line_naming_the_registered_ones(compose):
    from rs_lightning.config.schema import validate
    from rs_lightning.errors import ConfigError

    with pytest.raises(ConfigError) as error:
        validate(compose(["objective=fixed_threshold"]))
    assert str(error.value) == "objective: must be one of per_decision, static, got 'fixed_threshold'"
