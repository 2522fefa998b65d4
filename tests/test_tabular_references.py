"""Exact references of the two objectives on tabular environments
(rs_lightning.references.tabular_references): the projected return laws against a closed form and
against Monte Carlo of the real cliff walking, the per-decision fixed points and static
optima of the cliff-walking preset, and the keys a run writes into eval.json."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import rs_lightning.envs  # noqa: F401  (registers rs_lightning/SlipperyCliffWalking-v0)
from rs_lightning.envs.cliff_walking import (
    COLUMNS,
    START_STATE,
    lane_policy,
    lower_quantile,
    lower_tail_mean,
    optimal_expected_values,
)
from rs_lightning.references import tabular_references as tr
from rs_lightning.risk import (
    Utility,
    conditional_value_at_risk,
    expectation,
    value_at_risk,
)
from tests.conftest import play_tabular_policy

GAMMA = 0.99
RHO = 0.1


def cliff_env(max_episode_steps: int = 100):
    # conf/env/cliff_walking.yaml
    return gym.make("rs_lightning/SlipperyCliffWalking-v0", slip_probability=0.03,
                    cliff_reward=-5, max_episode_steps=max_episode_steps)


@pytest.fixture(scope="module")
def cliff():
    return tr.tabular_model(cliff_env())


def statistics(law) -> tuple[float, float, float]:
    return (float(expectation(law)), float(value_at_risk(law, RHO)),
            float(conditional_value_at_risk(law, RHO)))


# ----------------------------------------------------------------- a law in closed form


def geometric_chain(stop: float) -> tr.TabularModel:
    """One state, reward -1 a step, the episode ends after each step with probability
    ``stop``: the return after T ~ Geometric(stop) steps is -(1 - gamma^T) / (1 - gamma),
    whose lower tail (long episodes) spreads over many values."""
    transitions = {0: {0: [(1.0 - stop, 0, -1.0, False), (stop, 0, -1.0, True)]}}
    return tr.model_from_transitions(transitions, np.array([1.0]), horizon=None)


def geometric_law(stop: float, gamma: float, horizon: int | None = None):
    steps = np.arange(1, 20_001)
    probs = (1.0 - stop) ** (steps - 1) * stop
    if horizon is not None:  # the time limit ends the longer episodes at `horizon` steps
        probs[horizon - 1] = probs[horizon - 1:].sum()
        steps, probs = steps[:horizon], probs[:horizon]
    values = -(1.0 - gamma ** steps) / (1.0 - gamma)
    order = np.argsort(values)
    return values[order], probs[order]


@pytest.mark.parametrize("gamma,atoms", [(0.9, 201), (0.9, 2001), (0.99, 1001)])
def test_learner_law_of_a_geometric_chain_is_within_the_grid_bound(gamma, atoms):
    stop = 0.2
    model = geometric_chain(stop)
    grid = tr.model_grid(model, gamma, atoms)
    assert (grid.low, grid.high) == pytest.approx((-1.0 / (1.0 - gamma), 0.0))
    laws = tr.learner_laws(model, np.array([0]), gamma, grid)
    law = laws.distribution().select((0, 0))
    values, probs = geometric_law(stop, gamma)
    exact = (float(values @ probs), lower_quantile(values, probs, RHO),
             lower_tail_mean(values, probs, RHO))
    bounds = tr.grid_error_bounds(grid, gamma, RHO)
    mean, var, cvar = statistics(law)
    assert mean == pytest.approx(exact[0], abs=1e-8)  # the projection keeps the mean
    assert abs(var - exact[1]) <= bounds["var"]
    assert abs(cvar - exact[2]) <= bounds["cvar"]
    # The bound is not idle: the error shrinks with the spacing.
    assert abs(cvar - exact[2]) <= 2 * grid.delta / RHO


def test_episode_law_of_a_geometric_chain_under_a_time_limit():
    stop, gamma, horizon = 0.1, 0.95, 12
    model = dataclasses_replace_horizon(geometric_chain(stop), horizon)
    grid = tr.model_grid(model, gamma, 4001)
    law = tr.episode_law(model, np.array([0]), gamma, grid)
    values, probs = geometric_law(stop, gamma, horizon)
    bounds = tr.grid_error_bounds(grid, gamma, RHO, horizon)
    mean, var, cvar = statistics(law)
    assert mean == pytest.approx(float(values @ probs), abs=1e-9)
    assert abs(var - lower_quantile(values, probs, RHO)) <= bounds["var"]
    assert abs(cvar - lower_tail_mean(values, probs, RHO)) <= bounds["cvar"]


def dataclasses_replace_horizon(model: tr.TabularModel, horizon: int) -> tr.TabularModel:
    import dataclasses

    return dataclasses.replace(model, horizon=horizon)


# ----------------------------------------------------------------- the real cliff walking


def monte_carlo_returns(row: int, episodes: int, seed: int = 0) -> np.ndarray:
    """Discounted returns of lane_policy(row) on the real environment (time limit 100)."""
    return play_tabular_policy(cliff_env(), lane_policy(row), episodes, GAMMA, seed)[0]


@pytest.mark.parametrize("row", [0, 1, 2])
def test_cliff_lane_laws_agree_with_monte_carlo_of_the_environment(cliff, row):
    episodes = 1000
    returns = np.sort(monte_carlo_returns(row, episodes))
    grid = tr.model_grid(cliff, GAMMA)
    law = tr.episode_law(cliff, lane_policy(row), GAMMA, grid)
    mean, var, cvar = statistics(law)
    bound = tr.grid_error_bounds(grid, GAMMA, RHO, cliff.horizon)
    assert abs(mean - returns.mean()) < 4.5 * returns.std() / np.sqrt(episodes)
    # DKW: the empirical CDF is within eps of the true one with probability 1 - 2 exp(-2 n eps^2)
    eps = np.sqrt(np.log(2 / 1e-4) / (2 * episodes))
    low = returns[int(np.floor((RHO - eps) * episodes))]
    high = returns[int(np.ceil((RHO + eps) * episodes))]
    assert low - bound["var"] <= var <= high + bound["var"]
    tail = returns[: int(RHO * episodes)]
    assert abs(cvar - tail.mean()) < 5 * tail.std() / np.sqrt(len(tail)) + bound["cvar"]
    # Bootstrapping through the time limit barely changes these terminating policies' laws.
    learned = tr.learner_laws(cliff, lane_policy(row), GAMMA, grid)
    start = learned.distribution().select((START_STATE, int(lane_policy(row)[START_STATE])))
    assert statistics(start) == pytest.approx((mean, var, cvar), abs=1e-3)


def test_optimal_expectation_matches_the_cliff_walking_value_iteration(cliff):
    best, _ = tr.optimal_expectation(cliff, GAMMA)
    transitions = cliff_env().unwrapped.P
    values, _ = optimal_expected_values(transitions, 48, 4, horizon=100, gamma=GAMMA)
    assert best == pytest.approx(values[100, START_STATE], abs=1e-9)


def lane_rows(path: str) -> set[int]:
    """The rows a nominal path ("row,column" cells) walks along, the first two and the last
    columns left out (a path may climb to its row in the second column)."""
    cells = [tuple(int(x) for x in cell.split(",")) for cell in path.split()]
    return {r for r, c in cells if 1 < c < COLUMNS - 1}


@pytest.fixture(scope="module")
def coarse(cliff):
    # A coarser grid than the references' (spacing 0.25): the paths are clear-cut.
    return tr.model_grid(cliff, GAMMA, 2001)


def test_per_decision_fixed_point_walks_by_the_cliff_for_the_expectation(cliff, coarse):
    fixed_point = tr.per_decision_fixed_point(cliff, Utility(1.0), GAMMA, grid=coarse)
    assert fixed_point.converged
    assert lane_rows(fixed_point.path) == {2}
    best, _ = tr.optimal_expectation(cliff, GAMMA)
    assert fixed_point.static_utility == pytest.approx(best, abs=1e-6)


@pytest.mark.parametrize("risk", ["var", "cvar"])
def test_per_decision_fixed_point_keeps_a_row_away_from_the_cliff_with_risk(cliff, coarse, risk):
    utility = Utility(0.5, risk, {"rho": RHO})
    fixed_point = tr.per_decision_fixed_point(cliff, utility, GAMMA, grid=coarse)
    assert fixed_point.converged
    assert lane_rows(fixed_point.path) == {1}
    lanes = {row: tr.static_utility(cliff, lane_policy(row), utility, GAMMA, coarse)
             for row in (0, 1, 2)}
    assert lanes[1] > lanes[0] and lanes[1] > lanes[2]


@pytest.mark.parametrize("utility", [Utility(1.0), Utility(0.5, "cvar", {"rho": RHO})],
                         ids=["expectation", "cvar"])
def test_static_optimum_dominates_every_lane_and_the_per_decision_policy(cliff, coarse, utility):
    best = tr.static_optimum(cliff, utility, GAMMA)
    fixed_point = tr.per_decision_fixed_point(cliff, utility, GAMMA, grid=coarse)
    for row in (0, 1, 2):
        assert best.utility >= tr.static_utility(cliff, lane_policy(row), utility, GAMMA, coarse)
    assert best.utility >= fixed_point.static_utility - 1e-9


def test_static_cvar_optimum_converges_with_the_threshold_grid(cliff):
    values = [tr.static_cvar_optimum(cliff, 0.5, RHO, GAMMA, n).utility for n in (501, 2001)]
    assert abs(values[1] - values[0]) < 0.1


def test_alpha_zero_static_cvar_optimum_matches_the_exact_cvar_of_a_deterministic_chain():
    """A single chain: the only policy's CVaR is the static optimum, exactly."""
    model = dataclasses_replace_horizon(geometric_chain(0.3), 20)
    best = tr.static_cvar_optimum(model, 0.0, RHO, 0.9, 4001)
    values, probs = geometric_law(0.3, 0.9, 20)
    assert best.utility == pytest.approx(lower_tail_mean(values, probs, RHO), abs=2e-3)


def lucky_first_stage(risky_win: float = 0.7) -> tr.TabularModel:
    """Two steps: a fair coin pays 1 or 0, then the same state offers 0 (safe) or a gamble
    of +2 / -2 (win with ``risky_win``). No policy of the state alone tells the two first
    stages apart; the static optimum plays safe after the lucky one."""
    transitions = {
        0: {a: [(0.5, 1, 1.0, False), (0.5, 1, 0.0, False)] for a in (0, 1)},
        1: {0: [(1.0, 1, 0.0, True)],
            1: [(risky_win, 1, 2.0, True), (1.0 - risky_win, 1, -2.0, True)]},
    }
    return tr.model_from_transitions(transitions, np.array([1.0, 0.0]), horizon=2)


def brute_force_static_var(model_win: float, alpha: float, rho: float, gamma: float
                           ) -> tuple[float, float]:
    """The best U over the four policies of the first stage's outcome, and the best over
    the two that ignore it (of the state alone)."""
    utilities = {}
    for after_one, after_zero in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        values, probs = [], []
        for first, choice in ((1.0, after_one), (0.0, after_zero)):
            outcomes = [(0.0, 1.0)] if choice == 0 else [(2.0, model_win), (-2.0, 1 - model_win)]
            for second, p in outcomes:
                values.append(first + gamma * second)
                probs.append(0.5 * p)
        order = np.argsort(values)
        mean = float(np.dot(values, probs))
        var = lower_quantile(np.array(values)[order], np.array(probs)[order], rho)
        utilities[after_one, after_zero] = alpha * mean + (1 - alpha) * var
    return max(utilities.values()), max(utilities[0, 0], utilities[1, 1])


@pytest.mark.parametrize("alpha, randomised", [(0.0, 1.0), (0.5, 0.99)])
def test_static_var_bounds_enclose_the_history_dependent_optimum(alpha, randomised):
    """Safe after the lucky coin, the gamble after the other: U 0.93 at alpha 0.5 (VaR_0.2
    1.0), where a policy of the state alone gets at most 0.25. The upper bound is the
    optimum over randomised policies, which spend the shortfall budget left (0.2 - 0.15) on
    the gamble after the lucky coin one time in three: E 0.86 + 0.5 x 1/3 x 0.9 x 0.8 = 0.98,
    U 0.99; with alpha 0 there is nothing to gain by it and the bounds meet at VaR 1.0.
    Every episode is finite here, so the laws are exact and the search over the tree of
    histories closes the gap: both ends are the optimum."""
    from rs_lightning.references import tabular_exact

    gamma, rho = 0.9, 0.2
    best, markov = brute_force_static_var(0.7, alpha, rho, gamma)
    assert best > markov + 0.5
    model = lucky_first_stage(0.7)
    bounds = tr.static_var_optimum(model, alpha, rho, gamma)
    assert bounds.utility == pytest.approx(best, abs=1e-9)  # found the best policy
    assert bounds.upper == pytest.approx(best, abs=1e-9) and bounds.kind == "exact"
    assert bounds.threshold == pytest.approx(1.0, abs=1e-9)  # its VaR_0.2 level
    dual = tabular_exact.static_var_bounds(model, alpha, rho, gamma, 4.0)
    assert dual.upper == pytest.approx(randomised, abs=0.01)  # the Lagrangian alone


def test_static_var_bounds_on_cliff_walking(cliff, coarse):
    utility = Utility(0.5, "var", {"rho": RHO})
    bounds = tr.static_var_optimum(cliff, 0.5, RHO, GAMMA)
    fixed_point = tr.per_decision_fixed_point(cliff, utility, GAMMA, grid=coarse)
    lanes = [tr.static_utility(cliff, lane_policy(row), utility, GAMMA, coarse) for row in (0, 1, 2)]
    # Every policy evaluated on its own stays below the upper bound, and the bounds are close.
    assert max(*lanes, fixed_point.static_utility, bounds.utility) <= bounds.upper + 1e-6
    assert bounds.upper - max(fixed_point.static_utility, bounds.utility) < 0.1
    pure = tr.static_var_optimum(cliff, 0.0, RHO, GAMMA)  # alpha 0: the bounds meet
    assert pure.upper == pytest.approx(pure.utility, abs=1e-9)
    assert pure.utility >= max(tr.static_utility(cliff, lane_policy(row), Utility(0.0, "var", {"rho": RHO}),
                                                 GAMMA, coarse) for row in (0, 1, 2)) - 0.1


# ----------------------------------------------------------------- which environments


def test_tabular_models_of_gymnasium_toy_text():
    frozen = tr.tabular_model(gym.make("FrozenLake-v1", map_name="4x4"))
    assert (frozen.n_states, frozen.n_actions, frozen.horizon, frozen.shape) == (16, 4, 100, (4, 4))
    taxi = tr.tabular_model(gym.make("Taxi-v4"), max_states=500)
    assert (taxi.n_states, taxi.horizon) == (500, 200)
    assert tr.tabular_model(gym.make("Taxi-v4")) is None  # more than MAX_STATES
    assert tr.tabular_model(gym.make("CartPole-v1")) is None
    # The grid's spacing: 1/20 of a step's reward on cliff walking, 1/2000 of [0, 1] on
    # FrozenLake.
    cliff = tr.tabular_model(cliff_env())
    assert tr.model_grid(cliff, GAMMA).delta == pytest.approx(0.05)
    assert tr.model_grid(frozen, GAMMA).delta == pytest.approx(0.0005)


def test_references_on_frozen_lake():
    model = tr.tabular_model(gym.make("FrozenLake-v1", map_name="4x4"))
    policy = tr.expectation_optimal_policy(model, 0.99)
    out = tr.references(model, policy, Utility(0.5, "cvar", {"rho": RHO}), 0.99)
    # A time limit and repeated states: every figure an interval (tabular_bounds), which the
    # goal's reward alone moves off the baseline, so its ends are close.
    bounded = {"exact_static_utility_kind", "exact_static_utility_upper",
               "per_decision_static_utility_kind", "per_decision_static_utility_upper",
               "static_optimum_kind", "greedy_actions", "per_decision_start"}
    assert set(out) == {"exact_static_utility", "per_decision_path",
                        "per_decision_static_utility", "static_optimum", "static_gap",
                        "static_optimum_upper", "static_gap_upper", *bounded}
    assert out["exact_static_utility_kind"] == out["per_decision_static_utility_kind"] == (
        "interval") == out["static_optimum_kind"]
    assert out["static_optimum"] <= out["static_optimum_upper"] < out["static_optimum"] + 0.01
    assert 0.0 <= out["exact_static_utility"] <= out["static_optimum"] + 1e-3
    assert out["exact_static_utility_upper"] - out["exact_static_utility"] < 1e-3
    # a measure outside tr.MONOTONE_RISKS: the grid's estimate, no bound
    wang = tr.references(model, policy, Utility(0.5, "wang", {"eta": -0.75}), 0.99)
    assert set(wang) == {"exact_static_utility", "exact_static_utility_kind", "greedy_actions"}
    estimated = bounded
    var = tr.references(model, policy, Utility(0.5, "var", {"rho": RHO}), 0.99)
    assert set(var) == {"exact_static_utility", "per_decision_path",
                        "per_decision_static_utility", "static_optimum", "static_gap",
                        "static_optimum_upper", "static_gap_upper", *estimated}
    assert var["exact_static_utility"] <= var["static_optimum"] <= var["static_optimum_upper"]
    assert 0.0 <= var["static_gap"] <= var["static_gap_upper"]


def test_a_cliff_walking_run_writes_the_references_into_eval_json(compose, tmp_path):
    from rs_lightning.app.train import run

    run_dir = tmp_path / "cliff"
    run(compose(["env=cliff_walking", "agent=dqn", "debug=quick", "logger=none",
                 "callbacks.progress_bar=false", "trainer.max_steps=60",
                 "evaluation.every_n_steps=0", "evaluation.episodes=5"]), run_dir=run_dir)
    summary = json.loads((run_dir / "eval.json").read_text())
    assert lane_rows(summary["per_decision_path"]) == {1}  # alpha 0.5 with VaR_0.1
    assert summary["per_decision_static_utility"] == pytest.approx(-15.1665, abs=1e-4)
    assert np.isfinite(summary["exact_static_utility"])
    # VaR: a sound interval (tabular_bounds): a penalised policy of the threshold attains
    # -15.141, above the per-decision one's -15.1665; weak duality puts the optimum below -15.047.
    assert summary["per_decision_static_utility_kind"] == summary["static_optimum_kind"] == (
        "interval")
    assert summary["static_optimum"] == pytest.approx(-15.141, abs=0.005)
    assert summary["static_optimum_upper"] == pytest.approx(-15.047, abs=0.005)
    assert summary["static_gap"] <= summary["static_gap_upper"]
    # The results' exact table shows the references beside empty exact E, VaR, CVaR cells.
    from rs_lightning.analysis.results import (
        collect,
        summarize,
        table_columns,
        table_rows,
    )

    table = summarize(collect(tmp_path))
    (cells,) = table_rows(table, "exact")
    shown = dict(zip(table_columns(table, "exact"), cells))
    assert shown["static U"] == f"{summary['exact_static_utility']:.3f}"
    assert shown["E[S]"] == "" and shown["static optimum"] == f"{summary['static_optimum']:.3f}"


def test_a_static_run_gets_the_references_that_need_no_policy(compose):
    """A static policy is not one of the states alone: its eval.json gets the per-decision
    fixed point and the static optimum, the same numbers a per-decision run gets."""
    from rs_lightning.config.schema import validate
    from rs_lightning.references.ground_truth import static_references

    settings = validate(compose(["env=cliff_walking", "risk=cvar", "agent=c51",
                                 "objective=static"]))
    out = static_references(settings.train.env, settings.utility)
    assert {"per_decision_path", "per_decision_static_utility", "static_optimum",
            "per_decision_static_utility_kind", "static_optimum_kind"} <= set(out)
    assert lane_rows(out["per_decision_path"]) == {1}
    # a sound interval (the threshold programmes, read at the grid points above and below)
    # that meets [-15.890038, -15.882901], where an independent implementation put it: both
    # hold the true value
    assert out["static_optimum_kind"] == "interval"
    assert out["static_optimum"] <= -15.882901 and -15.890038 <= out["static_optimum_upper"]
    assert out["static_optimum_upper"] - out["static_optimum"] < 0.01
    assert out["static_optimum_upper"] >= out["per_decision_static_utility"]


def test_models_of_one_setting_share_their_references_and_another_setting_has_its_own():
    """Each run builds its world's model anew: the references are cached by the model's
    content, so a second job of the setting in the same process reads them (a benchmark
    worker computes cliff walking's per-decision fixed point once), and a model that differs
    in one probability or in its time limit gets its own."""
    first, second = tr.tabular_model(cliff_env()), tr.tabular_model(cliff_env())
    assert first is not second
    assert tr._model_key(first) == tr._model_key(second)
    assert tr._model_key(tr.tabular_model(cliff_env(max_episode_steps=50))) != tr._model_key(first)
    slipperier = gym.make("rs_lightning/SlipperyCliffWalking-v0", slip_probability=0.04,
                          cliff_reward=-5, max_episode_steps=100)
    assert tr._model_key(tr.tabular_model(slipperier)) != tr._model_key(first)

    utility = Utility(0.5, "cvar", {"rho": RHO})
    gamma = 0.9  # a discount no other test asks of this model: computed here
    computed = tr.policy_free_references(first, utility, gamma)
    misses = tr._cached_fixed_point.cache_info().misses
    read = tr.policy_free_references(second, utility, gamma)
    assert read == computed
    assert tr._cached_fixed_point.cache_info().misses == misses  # read, not computed again
