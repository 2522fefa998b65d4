"""Risk-conditioned agents: per-row utilities, the setting draws, training, resume, the
frontier command and the evaluation at a setting."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import torch

from rs_lightning.agents import AGENTS
from rs_lightning.analysis.runs import load_run
from rs_lightning.app.commands.report import main as report
from rs_lightning.app.train import run
from rs_lightning.risk import (
    RISK_MEASURES,
    ReturnDistribution,
    RowUtility,
    Utility,
    declared_parameter,
)
from rs_lightning.risk.conditioning import RiskConditioning, widen
from tests.conftest import ROOT, replay_agents, run_and_resume_from_step_100
from tests.warm_python import command as python_command

QUICK = ["debug=quick", "logger=none", "callbacks.progress_bar=false",
         "evaluation.every_n_steps=0", "evaluation.episodes=100"]
PER_ROW = sorted(name for name, fn in RISK_MEASURES.items() if getattr(fn, "per_row", False))
# Rows of parameters each measure accepts.
PARAMETERS = {"var": [0.05, 0.25, 0.5, 1.0], "cvar": [0.05, 0.25, 0.5, 1.0],
              "wang": [-1.0, -0.3, 0.0, 0.8], "power": [-1.0, -0.3, 0.0, 0.8],
              "mean_variance": [0.0, 0.5, 1.0, 2.0], "entropic": [-0.5, 0.3, 1.0, 2.0]}


def test_every_measure_with_a_declared_parameter_takes_it_per_row():
    assert PER_ROW == sorted(PARAMETERS)
    assert declared_parameter("expectation") is None
    assert not getattr(RISK_MEASURES["cpw"], "per_row", False)


@pytest.mark.parametrize("risk", sorted(PARAMETERS))
def test_row_utility_is_the_scalar_utility_row_by_row(risk):
    """Each row of a [4, 3, 10] batch at its own (alpha, parameter) equals the scalar Utility
    of that setting on that row, the ends alpha 0 and 1 included."""
    generator = torch.Generator().manual_seed(3)
    values = torch.randn(4, 3, 10, generator=generator).sort(-1).values
    probs = torch.rand(4, 3, 10, generator=generator)
    dist = ReturnDistribution(values, probs / probs.sum(-1, keepdim=True))
    alphas = [0.0, 0.3, 1.0, 0.75]
    rows = RowUtility(torch.tensor(alphas), risk, torch.tensor(PARAMETERS[risk]))(dist)
    name = declared_parameter(risk)
    for i, (alpha, parameter) in enumerate(zip(alphas, PARAMETERS[risk])):
        scalar = Utility(alpha, risk, {name: parameter})(dist.select(i))
        torch.testing.assert_close(rows[i], scalar, rtol=0, atol=1e-6)


def test_row_utility_of_var_and_cvar_in_closed_form():
    """Two atoms -1 (probability 0.2) and 1 (0.8): VaR_rho = -1 for rho <= 0.2, else 1;
    CVaR_0.1 = -1, CVaR_0.5 = (0.2 * -1 + 0.3 * 1) / 0.5 = 0.2; E = 0.6."""
    dist = ReturnDistribution(torch.tensor([[[-1.0, 1.0]]]).expand(3, 1, 2),
                              torch.tensor([[[0.2, 0.8]]]).expand(3, 1, 2))
    alpha, rho = torch.tensor([0.0, 0.5, 0.0]), torch.tensor([0.1, 0.5, 0.5])
    var = RowUtility(alpha, "var", rho)(dist)[:, 0]
    cvar = RowUtility(alpha, "cvar", rho)(dist)[:, 0]
    torch.testing.assert_close(var, torch.tensor([-1.0, 0.5 * 0.6 + 0.5 * 1.0, 1.0]))
    torch.testing.assert_close(cvar, torch.tensor([-1.0, 0.5 * 0.6 + 0.5 * 0.2, 0.2]))


def test_settings_are_drawn_from_their_ranges_and_features_tell_them_apart():
    uniform = RiskConditioning("var", (0.2, 0.6), (0.05, 0.5))
    alpha, rho = uniform.sample(np.random.default_rng(0), 1000)
    assert 0.2 <= alpha.min() and alpha.max() <= 0.6 and 0.05 <= rho.min() and rho.max() <= 0.5
    listed = RiskConditioning("cvar", (0.0, 0.5, 1.0), (0.1,), draw="values")
    alpha, rho = listed.sample(np.random.default_rng(0), 300)
    assert set(alpha) == {0.0, 0.5, 1.0} and set(rho) == {0.1}
    features = uniform.features(torch.tensor([0.2, 0.6]), torch.tensor([0.1, 0.1]))
    assert features.shape == (2, 16) and not torch.equal(features[0], features[1])
    assert widen(torch.zeros(5, 2), features[0]).shape == (5, 18)
    with pytest.raises(ValueError, match="rho=0.7 lies outside"):
        uniform.check_setting(0.3, 0.7)


def test_settings_per_batch_share_each_setting_over_a_block_of_rows():
    every = RiskConditioning("var", (0.0, 1.0), (0.05, 0.5))
    assert len(set(every.sample_batch(np.random.default_rng(0), 32)[0])) == 32
    blocks = RiskConditioning("var", (0.0, 1.0), (0.05, 0.5), settings_per_batch=4)
    alpha, rho = blocks.sample_batch(np.random.default_rng(0), 32)
    assert [len(set(alpha[i:i + 8])) for i in range(0, 32, 8)] == [1, 1, 1, 1]
    assert len(set(alpha)) == 4 and len(set(zip(alpha, rho))) == 4
    one = RiskConditioning("var", (0.0, 1.0), (0.05, 0.5), settings_per_batch=1)
    assert len(set(one.sample_batch(np.random.default_rng(0), 32)[1])) == 1


def test_one_setting_per_batch_is_drawn_by_each_member(compose):
    """settings_per_batch=1: each member's batch shares one setting; members draw their own."""
    from rs_lightning.config.schema import validate
    from rs_lightning.engine.build import build
    from rs_lightning.types import Transitions

    settings = validate(conditioned(compose, "agent=rs_umdqn_c", "parallel_seeds=2",
                                    "risk_conditioning.settings_per_batch=1"))
    _, module = build(settings)
    obs = torch.zeros(2, 16, 9)
    transitions = Transitions(obs, torch.zeros(2, 16, dtype=torch.long), torch.zeros(2, 16),
                              obs.clone(), torch.zeros(2, 16),
                              torch.full((2, 16), 0.9))
    widened, _ = module.objective.prepare_batch(transitions, module.batch_state)
    features = widened.obs[..., 9:]
    assert [len(torch.unique(features[k], dim=0)) for k in range(2)] == [1, 1]
    assert not torch.equal(features[0, 0], features[1, 0])
    assert torch.equal(widened.next_obs[..., 9:], features)


def conditioned(compose, *overrides):
    return compose([*QUICK, "agent.risk_conditioned=true", *overrides])


# Replay agents: an on-policy agent learns at the run's own setting and is refused
# (tests/test_on_policy.py).
@pytest.mark.parametrize("agent", [name for name in replay_agents() if name != "dqn"])
def test_every_distributional_agent_trains_risk_conditioned(compose, tmp_path, agent):
    """A short run of each agent (one seed: the looped path, with UMDQN's bootstrapped rows);
    the trained network's Z(s, a | setting) depends on the setting. (That its greedy action
    then differs is the chain test below.)"""
    continuous = AGENTS[agent][0].continuous_actions  # the actor-critics: their own world
    summary = run(conditioned(compose, f"agent={agent}", "trainer.max_steps=120",
                              "env=risky_navigation" if continuous else "env=risky_grid_world"),
                  run_dir=tmp_path)
    assert np.isfinite(summary["expectation"])
    trained = load_run(tmp_path)
    cells = torch.tensor([(x, y) for x in range(3) for y in range(3)], dtype=torch.float32)
    if continuous:
        cells = cells * 0.5  # positions of the navigation world
    torch.manual_seed(0)  # IQN samples its fractions: the same ones at both settings
    low = trained.module.at(0.0, 0.05).return_distribution(cells)
    torch.manual_seed(0)
    high = trained.module.at(1.0, 0.5).return_distribution(cells)
    assert not torch.allclose(low.values * low.probs, high.values * high.probs)


def test_the_network_learns_the_law_of_each_setting():
    """A two-step chain: at s0 'stop' ends with 0.1, 'go' leads to s1, where 'safe' ends with
    0 and 'risky' with +1 (0.8) or -2 (0.2). Greedy on U_alpha (VaR_0.1) at s1 is safe for
    alpha < 2/3 and risky above, so Z(s0, go | alpha) is the law of 0 or of the gamble: the
    conditioned C51 learns both from one network, and its greedy action at s0 is stop at
    alpha 0 and go at alpha 1."""
    from rs_lightning.agents.base import Problem, Transitions

    torch.manual_seed(0)
    gamma = 0.9
    conditioning = RiskConditioning("var", (0.0, 1.0), (0.1, 0.1))
    wide = Problem(2 + conditioning.n_features, 2, gamma, -2.5, 1.5)
    agent_class, config_class = AGENTS["c51"]
    config = config_class(name="c51", hidden_sizes=[64, 64], risk_conditioned=False, n_atoms=41)
    agent, target = agent_class(config, wide), agent_class(config, wide)
    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    s0, s1 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    for update in range(600):
        if update % 50 == 0:
            target.load_state_dict(agent.state_dict())
        batch = 64
        at_s0 = torch.as_tensor(rng.random(batch) < 0.5)
        action = torch.as_tensor(rng.integers(2, size=batch))
        gamble = torch.where(torch.as_tensor(rng.random(batch) < 0.8), 1.0, -2.0)
        # s0: action 0 stop (0.1, terminal), 1 go (0, to s1); s1: 0 safe (0), 1 risky.
        reward = torch.where(at_s0, torch.where(action == 0, 0.1, 0.0),
                             torch.where(action == 0, 0.0, gamble))
        terminated = torch.where(at_s0 & (action == 1), 0.0, 1.0)
        obs = torch.where(at_s0.unsqueeze(1), s0, s1)
        next_obs = s1.expand(batch, 2)
        alpha, rho = (torch.as_tensor(x, dtype=torch.float32)
                      for x in conditioning.sample(rng, batch))
        features = conditioning.features(alpha, rho)
        transitions = Transitions(widen(obs, features), action, reward.float(),
                                  widen(next_obs, features), terminated,
                                  agent.problem.gamma * (1.0 - terminated))
        loss, _ = agent.loss(transitions, target, conditioning.choose_action(alpha, rho))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        def greedy(state, alpha):
            features = conditioning.features(torch.tensor([alpha]), torch.tensor([0.1]))[0]
            return int(agent.greedy_action(widen(state.unsqueeze(0), features),
                                           conditioning.utility(alpha, 0.1).greedy)[0])

        assert [greedy(s1, 0.0), greedy(s1, 1.0)] == [0, 1]
        assert [greedy(s0, 0.0), greedy(s0, 1.0)] == [0, 1]


def test_conditioned_run_with_members_and_copies_resumes_exactly(compose, tmp_path):
    """K = 2 stacked members on N = 2 env copies, resumed from the checkpoint of update 100:
    the same eval.json and the same final weights as the uninterrupted run (the setting
    draws of acting and learning are in the checkpoint)."""
    overrides = ["agent=c51", "parallel_seeds=2", "env.num_envs=2",
                 "trainer.checkpoint_every_n_steps=100"]
    run_and_resume_from_step_100(lambda *more: conditioned(compose, *overrides, *more),
                                 tmp_path, seeds=2)
    checkpoint = tmp_path / "full" / "checkpoints" / "step0000100.ckpt"
    weights = [torch.load(tmp_path / name / "checkpoints" / "last.ckpt", weights_only=True)
               ["state_dict"] for name in ("full", "resumed")]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    state = torch.load(checkpoint, weights_only=True)
    assert len(state["rs_lightning"]["setting_generators"]) == 2
    assert "settings" in state["ExperienceDataModule"]["collector"]


def test_the_default_run_is_unchanged_by_the_conditioning_keys(compose, tmp_path):
    """risk_conditioning is read only by a conditioned agent: a plain run's config changes
    in nothing else, and it acts at its own utility (no settings in its checkpoint)."""
    run(compose([*QUICK, "agent=c51", "trainer.max_steps=60"]), run_dir=tmp_path)
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert "setting_generators" not in state["rs_lightning"]
    assert "settings" not in state["ExperienceDataModule"]["collector"]


def test_frontier_and_evaluation_at_a_setting_write_their_files(compose, tmp_path):
    from rs_lightning.app.commands import evaluation, frontier

    run(conditioned(compose, "agent=c51", "parallel_seeds=2", "trainer.max_steps=60",
                    "env=risky_grid_world"), run_dir=tmp_path / "run")
    assert frontier.main([str(tmp_path / "run"), "--alpha", "0:1:3", "--rho", "0.1,0.3",
                          "--episodes", "20", "--out", str(tmp_path / "front")]) == 0
    result = json.loads((tmp_path / "front" / "frontier.json").read_text())
    assert result["risk_conditioned"] and len(result["rows"]) == 2 * 2 * 3
    assert {r["alpha"] for r in result["rows"]} == {0.0, 0.5, 1.0}
    assert all(r["path"] in ("green", "orange", "neither") and len(r["policy"]) == 9
               for r in result["rows"])
    assert len(result["summary"]) == 6 and all(s["seeds"] == 2 for s in result["summary"])
    lines = (tmp_path / "front" / "frontier.csv").read_text().splitlines()
    assert len(lines) == 13 and lines[0].startswith("seed,alpha,parameter")
    assert (tmp_path / "front" / "frontier.png").stat().st_size > 10_000
    (wandb_run,) = (tmp_path / "front" / "wandb").glob("offline-run-*")  # table and figure
    assert any(wandb_run.rglob("*.wandb"))

    seed_run = tmp_path / "run" / "seed_0"
    before = (seed_run / "eval.json").read_text()
    assert evaluation.main([str(seed_run), "alpha=0.3", "rho=0.2", "--episodes", "20"]) == 0
    at = json.loads((seed_run / "eval_alpha=0.3,rho=0.2.json").read_text())
    assert at["alpha"] == 0.3 and at["rho"] == 0.2 and "exact_expectation" in at
    assert (seed_run / "eval.json").read_text() == before
    # Outside the ranges the network was trained on: one line, status 2.
    assert evaluation.main([str(seed_run), "rho=0.9", "--episodes", "20"]) == 2


def test_frontier_plays_each_distinct_grid_policy_once_with_the_same_figures(
        compose, tmp_path, monkeypatch):
    """On a grid world a policy of the cell plays the same episodes whatever setting chose
    it: the frontier plays each distinct policy once a seed (5.5x faster on a 5-seed,
    21-alpha frontier), and every row is what playing it again gives."""
    import rs_lightning.analysis.frontier as frontier_module
    from rs_lightning.analysis.runs import load_run

    run(conditioned(compose, "agent=c51", "trainer.max_steps=60"), run_dir=tmp_path / "run")
    trained = load_run(tmp_path / "run")
    plays = []
    original = frontier_module.play_episodes
    monkeypatch.setattr(frontier_module, "play_episodes",
                        lambda *args, **kwargs: plays.append(1) or original(*args, **kwargs))
    alphas = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    played = {}
    cached = [frontier_module.evaluate_setting(trained, a, None, 30, played=played)
              for a in alphas]
    assert len(plays) == len(played) == len({json.dumps(r["policy"], sort_keys=True)
                                             for r in cached})
    fresh = [frontier_module.evaluate_setting(trained, a, None, 30) for a in alphas]
    assert cached == fresh and len(plays) == len(played) + len(alphas)


def test_frontier_of_a_plain_run_reweighs_its_one_law(compose, tmp_path):
    from rs_lightning.analysis import frontier

    run(compose([*QUICK, "agent=qr_dqn", "trainer.max_steps=60"]), run_dir=tmp_path / "run")
    result = frontier.frontier([tmp_path / "run"], [0.0, 1.0], None, 20, tmp_path / "front",
                               exact_only=True, figure=False)
    assert not result["risk_conditioned"] and "re-weighed" in result["meaning"]
    assert [r["alpha"] for r in result["rows"]] == [0.0, 1.0]
    assert "expectation" not in result["rows"][0] and "exact_var" in result["rows"][0]


def test_the_support_check_reads_a_conditioned_member_at_its_setting(tmp_path):
    """The once-per-run check of the mass at the support's ends (half the budget and ten
    target copies past) hands the replay batch to each member with its setting's features."""
    from tests.test_train import train_cli

    result = train_cli("agent=c51", "agent.risk_conditioned=true", "debug=quick", "logger=csv",
                       "learning.target_update_period=10", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "run" / "eval.json").is_file()


def test_a_conditioned_multirun_and_its_report(tmp_path):
    """A conditioned sweep through the CLI (two jobs, two stacked seeds each), then the sweep
    report: its table names the agent as risk-conditioned and says what its rows are."""
    sweep = tmp_path / "sweep"
    subprocess.run(
        [*python_command(), "train.py", "-m", "agent=c51", "agent.risk_conditioned=true",
         "alpha=0.25,0.75", "parallel_seeds=2", *QUICK, "trainer.max_steps=60",
         f"hydra.sweep.dir={sweep}"],
        cwd=ROOT, check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=300,
    )
    assert len(list(sweep.glob("*/seed_*/eval.json"))) == 4
    assert report([str(sweep), "--wandb", "off"]) == 0
    markdown = (sweep / "report" / "results.md").read_text()
    rows = [line for line in markdown.splitlines() if line.startswith("| RiskyRewards-v0")]
    assert len(rows) == 6  # Monte Carlo, IQM and exact, per alpha
    assert all(row.startswith("| RiskyRewards-v0 | c51 (risk-conditioned) | 0.") for row in rows)
    assert "learned one network for a range of settings" in markdown
    assert (sweep / "report" / "report.html").is_file()
