"""agent=ppo: its maths against closed forms, the static objective's advantage, the exact
entropic optimum against a brute force over history-dependent policies, the refusals, and
learning on the two-stage world from the command line's config."""

from __future__ import annotations

import itertools
import json
import math
import re

import numpy as np
import pytest
import torch

from rs_lightning.agents.ppo import (
    categorical_entropy,
    clipped_surrogate,
    gaussian_entropy,
    normalised,
)
from rs_lightning.references.tabular_references import (
    model_from_transitions,
    static_entropic_optimum,
)
from rs_lightning.risk import Utility
from rs_lightning.risk.static import StaticObjective, static_advantage


# ------------------------------------------------------------------ the pure maths
def test_the_clipped_surrogate_is_the_pessimistic_bound():
    old = torch.zeros(6)
    # ratios 1.5, 0.5, 1.1 with A = +1 and A = -1
    log_prob = torch.log(torch.tensor([1.5, 0.5, 1.1, 1.5, 0.5, 1.1]))
    advantage = torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0, -1.0])
    loss = clipped_surrogate(log_prob, old, advantage, 0.2)
    # A > 0: min(r, clip(r)) = 1.2, 0.5, 1.1; A < 0: min(-r, -clip(r)) = -1.5, -0.8, -1.1
    assert torch.allclose(loss, torch.tensor([-1.2, -0.5, -1.1, 1.5, 0.8, 1.1]))
    # Its gradient vanishes where the clip binds in the direction A pushes.
    log_prob.requires_grad_(True)
    clipped_surrogate(log_prob, old, advantage, 0.2).sum().backward()
    assert log_prob.grad[0] == 0 and log_prob.grad[4] == 0
    assert log_prob.grad[1] == pytest.approx(-0.5) and log_prob.grad[3] == pytest.approx(1.5)


def test_advantages_are_normalised_over_each_members_minibatch():
    advantage = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 10.0, 10.0, 50.0]])
    out = normalised(advantage)
    assert torch.allclose(out.mean(-1), torch.zeros(2), atol=1e-6)
    assert torch.allclose(out.std(-1), torch.ones(2), atol=1e-6)
    assert torch.equal(normalised(torch.tensor([[3.0]])), torch.tensor([[0.0]]))


def test_entropies_have_their_closed_forms():
    assert categorical_entropy(torch.zeros(3, 4)) == pytest.approx(torch.full((3,), math.log(4)))
    peaked = categorical_entropy(torch.tensor([0.0, -1e4]))
    assert peaked == pytest.approx(0.0, abs=1e-6)
    log_std = torch.log(torch.tensor([0.5, 2.0]))
    expected = sum(math.log(s * math.sqrt(2 * math.pi * math.e)) for s in (0.5, 2.0))
    assert gaussian_entropy(log_std).item() == pytest.approx(expected)


# ------------------------------------------------------------------ the static advantage
def _static(risk: str, alpha: float, **params) -> StaticObjective:
    return StaticObjective(Utility(alpha=alpha, risk=risk, params=params), -2.0, 2.0)


@pytest.mark.parametrize("static", [
    _static("cvar", 0.5, rho=0.25), _static("cvar", 0.0, rho=0.1),
    _static("spectral", 0.3, levels=(0.1, 0.5), weights=(0.5, 0.5)),
    _static("var", 0.5, rho=0.25), _static("entropic", 0.0, beta=2.0),
    _static("expectation", 0.2),
], ids=["cvar", "cvar0", "spectral", "var", "entropic", "expectation"])
def test_the_static_advantage_has_zero_mean_under_the_critics_law(static):
    """Sampled from the law the critic holds, the advantage of a state is zero on average:
    a baseline that does not bias the score-function gradient."""
    generator = torch.Generator().manual_seed(0)
    atoms = torch.randn(5, 8, generator=generator, dtype=torch.float64)  # 5 states' laws
    c = torch.tensor([0.0, 0.3, -0.5, 1.0, 0.2], dtype=torch.float64)
    g = torch.tensor([1.0, 0.9, 0.81, 0.5, 0.3], dtype=torch.float64)
    b = torch.tensor([[-0.5, 0.0], [0.2, 0.4], [-1.0, -1.0], [0.5, 1.0], [0.0, 0.3]],
                     dtype=torch.float64)[:, :static.n_thresholds]
    # every atom of each state's law as the sampled return
    rows = static_advantage(static, atoms.T, atoms.expand(8, 5, 8), c.expand(8, 5),
                            g.expand(8, 5), b.expand(8, *b.shape))
    assert torch.allclose(rows.mean(0), torch.zeros(5, dtype=torch.float64), atol=1e-12)


def test_the_static_cvar_advantage_is_the_terminal_shortfall_of_the_dual_form():
    """alpha (R - E Z) - (1 - alpha) ((b~ - R)^+ - E (b~ - Z)^+) / rho, b~ = (b - c) / g."""
    static = _static("cvar", 0.5, rho=0.1)
    atoms = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    c, g, b = torch.tensor([0.4]), torch.tensor([0.5]), torch.tensor([[0.2]])
    # b~ = (0.2 - 0.4) / 0.5 = -0.4: nothing below it in the law; R = -1 is 0.6 below
    out = static_advantage(static, torch.tensor([-1.0]), atoms, c, g, b)
    assert out.item() == pytest.approx(0.5 * (-1.0 - 0.5) - 0.5 * 0.6 / 0.1)


def test_the_entropic_advantage_weighs_an_episode_by_exp_minus_beta_s():
    """(1 - exp(-beta g (R - CE))) / (beta g): the exponential utility's gradient weight,
    relative to the certainty equivalent of g Z, in units of the return from the state."""
    static = _static("entropic", 0.0, beta=1.5)
    atoms = torch.tensor([[0.0, 1.0, 2.0]], dtype=torch.float64)
    g = 0.8
    ce = -math.log(np.mean(np.exp(-1.5 * g * np.array([0.0, 1.0, 2.0])))) / (1.5 * g)
    out = static_advantage(static, torch.tensor([0.5]), atoms, torch.tensor([3.0]),
                           torch.tensor([g]), torch.zeros(1, 1))
    assert out.item() == pytest.approx((1 - math.exp(-1.5 * g * (0.5 - ce))) / (1.5 * g))


# ------------------------------------------------------------------ the entropic optimum
def _small_world():
    """Two states, two actions, a time limit of 4: a safe action (reward 0.2 for sure) and
    a gamble (+1.5 or -1 with equal chances) that moves to a state whose gamble is worse."""
    transitions = {
        0: {0: [(1.0, 0, 0.2, False)], 1: [(0.5, 1, 1.5, False), (0.5, 0, -1.0, False)]},
        1: {0: [(1.0, 0, 0.1, False)], 1: [(0.5, 1, 2.0, False), (0.5, 1, -1.5, True)]},
    }
    return model_from_transitions(transitions, np.array([1.0, 0.0]), horizon=4)


def _laws(model, state: int, t: int, discount: float, gamma: float):
    """Every return law [(probability, return), ...] a deterministic history-dependent
    policy can give from ``state`` at step ``t``: a policy choosing its action at each
    history, enumerated in full (each branch's sub-policy chosen independently)."""
    if t == model.horizon:
        return [[(1.0, 0.0)]]
    laws = []
    for a in range(model.n_actions):
        branches = []
        for k in range(model.probs.shape[2]):
            p = model.probs[state, a, k]
            if p == 0:
                continue
            r = discount * model.rewards[state, a, k]
            if model.terminal[state, a, k]:
                branches.append([[(p, r)]])
            else:
                branches.append([[(p * q, r + s) for q, s in law] for law in
                                 _laws(model, int(model.next_states[state, a, k]), t + 1,
                                       discount * gamma, gamma)])
        for choice in itertools.product(*branches):
            laws.append([atom for part in choice for atom in part])
    return laws


@pytest.mark.parametrize("beta", [2.0, 0.5, -1.0])
def test_the_entropic_optimum_is_the_best_history_dependent_policy(beta):
    model = _small_world()
    gamma = 0.9
    laws = _laws(model, 0, 0, 1.0, gamma)
    assert len(laws) == 330  # every deterministic policy of the history (its behaviours)
    brute = max(-math.log(sum(p * math.exp(-beta * s) for p, s in law)) / beta for law in laws)
    best = static_entropic_optimum(model, beta, gamma)
    assert best.kind == "exact"
    assert best.utility == pytest.approx(brute, abs=1e-12)


def test_the_entropic_optimum_depends_on_the_step():
    """With discounting the exponent shrinks with gamma^t: on the two-stage world the best
    action of some cell changes with the step (a policy of the cell alone can be beaten)."""
    from rs_lightning.references.exact_policies import static_entropic_optimum as grid_optimum

    best = grid_optimum("risky_rewards", 1.0, gamma=0.5)
    assert (best.policy != best.policy[:1]).any()


# ------------------------------------------------------------------ config refusals
@pytest.mark.parametrize("overrides, message", [
    (["risk=cvar", "objective=per_decision"],
     r"^objective: agent=ppo maximises the expected return under per_decision .*allowed: "
     r"static, or per_decision with risk=expectation or alpha=1\)$"),
    (["risk=wang", "objective=static"],
     r"^objective: risk=wang has no expected-utility form a policy gradient can follow; "
     r"allowed: expectation, cvar, var, spectral, entropic$"),
    (["risk=entropic", "alpha=0.5", "objective=static"],
     r"^objective: risk=entropic is followed through the exponential criterion at alpha 0"),
])
def test_objectives_ppo_cannot_follow_are_refused_in_one_line(compose, overrides, message):
    from rs_lightning.config.schema import validate
    from rs_lightning.errors import ConfigError

    with pytest.raises(ConfigError) as error:
        validate(compose(["agent=ppo", "env=two_stage", *overrides]))
    assert "\n" not in str(error.value)
    assert re.match(message, f"{error.value.key}: {error.value.message}")


def test_ppo_takes_either_kind_of_action(compose):
    from rs_lightning.config.schema import validate

    for env in ("two_stage", "pendulum"):
        validated = validate(compose(["agent=ppo", f"env={env}", "risk=expectation"]))
        assert validated.agent.name == "ppo"


# ------------------------------------------------------------------ learning
def test_ppo_learns_the_two_stage_worlds_expectation_optimum(compose, tmp_path):
    """120 updates from the command line's config: the greedy policy takes the gamble, then
    the risky goal, the largest expected return there is (0.09, exactly); untrained, the
    policy of seed 0 walks until the time limit (-20)."""
    from rs_lightning.app.train import run

    cfg = compose(["agent=ppo", "env=two_stage", "risk=expectation", "debug=quick",
                   "logger=csv", "callbacks.progress_bar=false", "trainer.max_steps=120",
                   "evaluation.every_n_steps=0", "evaluation.episodes=100", "learning.lr=5e-3",
                   "env.num_envs=4", "agent.rollout_steps=32", "agent.minibatches=4",
                   "agent.epochs=4"])
    result = run(cfg, run_dir=tmp_path / "run")
    assert result["exact_expectation"] == pytest.approx(0.09, abs=1e-9)
    metrics = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert metrics["agent"] == "ppo"


@pytest.mark.slow  # six short runs; the engine's stacking is tested by default (test_on_policy)
@pytest.mark.parametrize("env, tolerance", [("two_stage", 0.0), ("pendulum", 1e-6)])
def test_stacked_members_are_the_runs_of_their_seeds(compose, tmp_path, env, tolerance):
    """Two stacked members end with the weights of their seeds' runs alone: bit for bit with
    discrete actions; with continuous ones (the Gaussian's log standard deviation a
    parameter of each member) to rounding, the stacked products of the one-unit mean head
    summing in another order."""
    from rs_lightning.app.train import run

    quick = ["agent=ppo", f"env={env}", "risk=expectation", "debug=quick", "logger=csv",
             "callbacks.progress_bar=false", "trainer.max_steps=8",
             "evaluation.every_n_steps=0", "evaluation.episodes=2", "env.num_envs=2",
             "agent.rollout_steps=8", "agent.minibatches=2", "agent.epochs=2"]
    run(compose([*quick, "seed=3", "parallel_seeds=2"]), run_dir=tmp_path / "stacked")
    for seed in (3, 4):
        run(compose([*quick, f"seed={seed}"]), run_dir=tmp_path / f"single{seed}")
        a, b = (torch.load(folder / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
                for folder in (tmp_path / "stacked" / f"seed_{seed}", tmp_path / f"single{seed}"))
        assert a.keys() == b.keys()
        assert any(key.endswith("log_std") for key in a) == (env == "pendulum")
        for key in a:
            assert torch.allclose(a[key], b[key], rtol=0.0, atol=tolerance), key
