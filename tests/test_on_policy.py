"""The on-policy promise: an actor-critic learned from rollouts is one module and one config,
nothing else edited. A small A2C with a quantile critic is defined here, registered with one
call, and trained from a composed config through the rollout path: it learns, resumes
exactly from a checkpoint taken in the middle of a rollout's minibatches, and its stacked
members are the runs of their seeds alone."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest
import torch
from omegaconf import MISSING

from rs_lightning.agents.base import AGENTS, mlp, register_agent
from rs_lightning.agents.on_policy import OnPolicyAgent, OnPolicyConfig, categorical_sample
from rs_lightning.app.train import run
from rs_lightning.risk import ReturnDistribution, from_quantiles
from rs_lightning.types import PolicySample, RolloutBatch


@dataclass
class A2CConfig(OnPolicyConfig):
    n_quantiles: int = MISSING  # the critic's atoms
    entropy_bonus: float = MISSING


class A2C(OnPolicyAgent):
    """A softmax actor and a quantile critic, each an MLP: the policy gradient weighted by
    the GAE advantage, the critic's quantiles regressed on the lambda-returns (the pinball
    loss), an entropy bonus."""

    supports_members = True  # the layers of agents/base.py, reductions over the batch only

    def __init__(self, config: A2CConfig, problem) -> None:
        super().__init__(config, problem)
        self.actor = mlp([problem.obs_dim, *config.hidden_sizes, problem.n_actions])
        self.critic = mlp([problem.obs_dim, *config.hidden_sizes, config.n_quantiles])
        n = config.n_quantiles
        self.register_buffer("fractions", (torch.arange(n) + 0.5) / n, persistent=False)

    def sample(self, obs, noise) -> PolicySample:
        action, log_prob = categorical_sample(self.actor(obs), noise)
        return PolicySample(action, log_prob, self.critic(obs))

    @torch.no_grad()
    def greedy_action(self, obs, choose_action):
        return self.actor(obs).argmax(-1)

    def return_distribution(self, obs) -> ReturnDistribution:
        law = from_quantiles(self.critic(obs).sort(-1).values)
        return ReturnDistribution(law.values.unsqueeze(-2), law.probs.unsqueeze(-2))

    def loss(self, batch: RolloutBatch, target, choose_action):
        assert target is None  # no target networks on the rollout path
        log_probs = torch.log_softmax(self.actor(batch.obs), dim=-1)
        log_prob = log_probs.gather(-1, batch.action.unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1).mean(-1)
        policy_loss = -(batch.advantage * log_prob).mean(-1)
        error = batch.returns.unsqueeze(-1) - self.critic(batch.obs)
        critic_loss = (error * (self.fractions - (error < 0).float())).mean(-1).mean(-1)
        loss = policy_loss + critic_loss - self.config.entropy_bonus * entropy
        return loss, {"critic_loss": critic_loss.detach(), "entropy": entropy.detach()}


@pytest.fixture
def a2c(tmp_path):
    """Registered with one call, its config in a folder on Hydra's search path."""
    register_agent("a2c_test", A2CConfig)(A2C)
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "a2c_test.yaml").write_text(
        "name: a2c_test\nhidden_sizes: [32]\nrisk_conditioned: false\nn_quantiles: 8\n"
        "entropy_bonus: 0.01\nrollout_steps: 16\nepochs: 2\nminibatches: 4\ngae_lambda: 0.9\n")
    yield tmp_path
    AGENTS.pop("a2c_test")


def overrides(folder, *extra: str, logger: str = "csv") -> list[str]:
    # 2 copies x 16 steps = 32 steps a rollout, 2 epochs of 4 minibatches: 8 updates each.
    return [f"hydra.searchpath=[file://{folder}]", "agent=a2c_test", "env=two_stage",
            "env.num_envs=2", "debug=quick", f"logger={logger}", "callbacks.progress_bar=false",
            "learning.lr=3e-3", "trainer.max_steps=400", "trainer.checkpoint_every_n_steps=100",
            "evaluation.every_n_steps=100", "evaluation.episodes=200",
            "evaluation.episodes_during_training=50", *extra]


def test_a_test_defined_a2c_learns_and_resumes_exactly_from_the_middle_of_a_rollout(
        a2c, compose, tmp_path):
    full = run(compose(overrides(a2c)), run_dir=tmp_path / "full")
    assert full["steps"] == 400 and math.isfinite(full["utility"])
    # 400 updates of 8 per rollout: 50 rollouts of 32 steps each.
    assert full["env_steps"] == 50 * 32
    history = [json.loads(line) for line in
               (tmp_path / "full" / "eval_history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in history] == [100, 200, 300, 400]
    # Update 100 is the 4th minibatch of the 13th rollout's first epoch: the rollout, the
    # pass's order and the generators are all in the checkpoint.
    checkpoint = tmp_path / "full" / "checkpoints" / "step0000100.ckpt"
    state = torch.load(checkpoint, weights_only=True)
    rollout = state["ExperienceDataModule"]["collector"]["rollout"]
    assert (rollout["served"], rollout["ready"]) == (4, True)
    assert set(state["state_dict"]) == {k for k in state["state_dict"] if k.startswith("members.")}
    resumed = run(compose(overrides(a2c, f"ckpt_path={checkpoint}")),
                  run_dir=tmp_path / "resumed")
    assert resumed == full
    # It learned: its initial greedy policy (seed 0) goes down everywhere, into the penalty
    # row; trained, it takes the gamble and then the risky goal, the greedy policy of the
    # largest expected return there is (0.6 (2 x 0.75 - 0.25 - 0.1) - 0.4 x 1.5, exactly).
    assert full["exact_expectation"] == pytest.approx(0.09, abs=1e-9)


def test_stacked_a2c_members_are_the_runs_of_their_seeds(a2c, compose, tmp_path):
    quick = ["trainer.max_steps=48", "evaluation.every_n_steps=0", "evaluation.episodes=50"]
    stacked = run(compose(overrides(a2c, *quick, "seed=3", "parallel_seeds=2",
                                    logger="tensorboard")), run_dir=tmp_path / "stacked")
    # The grid world's figure of every action's law is not drawn: the critic's law is the
    # state's; the distributions tool refuses such a run in one line.
    from rs_lightning.analysis.plots import check_distribution_state
    from rs_lightning.analysis.runs import load_run

    assert not (tmp_path / "stacked" / "seed_3" / "distributions.png").exists()
    with pytest.raises(ValueError, match=r"^distributions: .* whose critic learns the law of a "
                                         r"state's return, not one of each action"):
        check_distribution_state(load_run(tmp_path / "stacked" / "seed_3"), (1, 0))
    for seed in (3, 4):
        single = run(compose(overrides(a2c, *quick, f"seed={seed}")),
                     run_dir=tmp_path / f"single{seed}")
        assert stacked["members"][str(seed)] == single
        a, b = (torch.load(folder / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
                for folder in (tmp_path / "stacked" / f"seed_{seed}", tmp_path / f"single{seed}"))
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), key


def test_rollouts_that_minibatches_do_not_divide_are_refused_in_one_line(a2c, compose):
    from rs_lightning.config.schema import validate
    from rs_lightning.errors import ConfigError

    with pytest.raises(ConfigError) as error:
        validate(compose(overrides(a2c, "env.num_envs=3", "agent.minibatches=5")))
    assert str(error.value) == ("agent.minibatches: must divide a rollout's env.num_envs x "
                                "agent.rollout_steps = 3 x 16 = 48 steps, got 5")
    with pytest.raises(ConfigError, match=r"^agent\.risk_conditioned: agent=a2c_test learns "):
        validate(compose(overrides(a2c, "agent.risk_conditioned=true")))


def test_a_checkpoint_of_other_rollouts_is_refused_naming_the_key(a2c, compose, tmp_path):
    from rs_lightning.errors import ConfigError

    quick = ["trainer.max_steps=16", "trainer.checkpoint_every_n_steps=8",
             "evaluation.every_n_steps=0", "evaluation.episodes=10"]
    run(compose(overrides(a2c, *quick)), run_dir=tmp_path / "first")
    checkpoint = tmp_path / "first" / "checkpoints" / "step0000008.ckpt"
    with pytest.raises(ConfigError, match=r"written with agent\.rollout_steps=16, this run has "
                                          r"agent\.rollout_steps=8; resume with"):
        run(compose(overrides(a2c, *quick, "agent.rollout_steps=8", f"ckpt_path={checkpoint}")),
            run_dir=tmp_path / "second")
    assert not (tmp_path / "second").exists()


def test_the_memory_estimate_counts_rollouts_not_a_replay_memory(a2c, compose):
    from rs_lightning.config.schema import validate
    from rs_lightning.engine.resources import check_memory
    from rs_lightning.envs.factory import env_problem
    from rs_lightning.errors import ConfigError

    # 4 copies x 250,000 steps of 2 observations of 2 floats, an action and 7 numbers (48
    # bytes a step): 48 MB; the replay capacity's 100 million transitions are no memory here.
    settings = validate(compose(overrides(a2c, "env.num_envs=4", "agent.rollout_steps=250000",
                                          "learning.replay_capacity=100000000")))
    problem = env_problem(settings.train.env)
    check_memory(settings, problem, host=(10**9, "a test figure"))  # no replay memory counted
    with pytest.raises(ConfigError) as error:
        check_memory(settings, problem, host=(40 * 10**6, "a test figure"))
    assert error.value.key == "agent.rollout_steps"
    assert "(the rollouts: 48 MB)" in str(error.value)


def test_a_rollout_stopped_half_collected_resumes_to_the_same_minibatch(a2c, compose):
    """A SIGTERM between two steps of a rollout's collection: the checkpoint holds the half
    rollout (and the draws' generators), and the resumed collection serves the minibatch the
    uninterrupted one serves."""
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    from rs_lightning.config.schema import validate
    from rs_lightning.engine.build import build

    settings = validate(compose(overrides(a2c)))

    def collector_of(built):
        return next(iter(built[0].train_dataloader()))

    uninterrupted = collector_of(build(settings)).experience()
    stopped_data, stopped_module = stopped = build(settings)
    asked = iter(range(100))
    with pytest.raises(SIGTERMException):
        collector_of(stopped).experience(stop=lambda: next(asked) == 5)  # after 5 steps
    assert collector_of(stopped).buffer.stored == 5
    data_state, weights = stopped_data.state_dict(), stopped_module.state_dict()
    exploration = stopped_module.exploration.state_dict()
    resumed_data, resumed_module = resumed = build(settings)
    resumed_module.load_state_dict(weights)
    resumed_module.exploration.load_state_dict(exploration)
    resumed_data.load_state_dict(data_state)
    batch = collector_of(resumed).experience()
    for name, value in uninterrupted.batch._asdict().items():
        assert torch.equal(getattr(batch.batch, name), value), name
    assert batch.env_steps == uninterrupted.env_steps == 32
