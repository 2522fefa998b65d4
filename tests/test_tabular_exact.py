"""The exact references of the finite-horizon tabular worlds (references/tabular_exact.py,
through references/tabular_references.py) against independent computations written from the
environments' models: trajectories enumerated one by one, and brute force over every
deterministic policy of the decision tree (tests/test_benchmark_worlds.py's helpers). Every
figure must agree to 1e-9; every upper bound must hold against the best policy found."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rs_lightning.envs  # noqa: F401  (registers the rs_lightning/ environments)
from rs_lightning.references import tabular_exact as te
from rs_lightning.references import tabular_references as tr
from rs_lightning.risk import Utility
from tests.test_benchmark_worlds import (
    GAMMA,
    INSTANCES,
    decision_tree,
    law_utility,
    policy_law,
    tree_static_optima,
    utilities,
)
from tests.test_gym_envs import preset

EXACT = 1e-9
UTILITIES = {"E": Utility(1.0), "CVaR": Utility(0.5, "cvar", {"rho": 0.1}),
             "VaR": Utility(0.5, "var", {"rho": 0.1})}


def random_policy_law(transitions, state: int, gamma: float, horizon: int):
    """The law of the discounted return when every action is drawn uniformly at random,
    trajectory by trajectory."""
    values, probs = [], []
    n_actions = len(transitions[state])

    def walk(s, t, so_far, discount, prob):
        for action in range(n_actions):
            for p, s2, reward, terminated in transitions[s][action]:
                if p == 0:
                    continue
                value, q = so_far + discount * reward, prob * p / n_actions
                if terminated or t + 1 == horizon:
                    values.append(value), probs.append(q)
                else:
                    walk(s2, t + 1, value, discount * gamma, q)

    walk(state, 0, 0.0, 1.0, 1.0)
    return np.array(values), np.array(probs)


def preset_model(name: str):
    section = preset(name)
    kwargs = dict(section.kwargs)
    env = gym.make(section.id, **kwargs)
    return env, tr.tabular_model(env, horizon=kwargs["periods"]), kwargs["periods"]


def reachable_states(transitions, start: int, horizon: int) -> set[int]:
    seen, frontier = {start}, [start]
    for _ in range(horizon):
        nxt = []
        for s in frontier:
            for outcomes in transitions[s].values():
                for p, s2, _, done in outcomes:
                    if p > 0 and not done and s2 not in seen:
                        seen.add(s2), nxt.append(s2)
        frontier = nxt
    return seen


def check_fixed_point(env, model, horizon: int, utility: Utility) -> float:
    """The engine's per-decision fixed point is greedy, ties aside, on its laws enumerated
    trajectory by trajectory in every reachable state, and its static utility is the
    enumerated one's: returns that utility."""
    fixed_point = tr.per_decision_fixed_point(model, utility, GAMMA)
    assert fixed_point.converged
    policy = np.array(fixed_point.policy)
    transitions = env.unwrapped.P
    start = int(np.argmax(model.start))
    for s in reachable_states(transitions, start, horizon):
        values = [law_utility(*policy_law(transitions, policy, s, a, GAMMA, horizon), utility)
                  for a in range(model.n_actions)]
        assert values[policy[s]] >= max(values) - EXACT, (s, values)
    own = law_utility(*policy_law(transitions, policy, start, int(policy[start]), GAMMA,
                                  horizon), utility)
    assert fixed_point.static_utility == pytest.approx(own, abs=EXACT)
    return own


def check_per_decision_and_random(env, model, horizon: int, utility: Utility) -> float:
    assert tr.is_exact(model)
    own = check_fixed_point(env, model, horizon, utility)
    start = int(np.argmax(model.start))
    random = law_utility(*random_policy_law(env.unwrapped.P, start, GAMMA, horizon), utility)
    assert tr.uniform_random_utility(model, utility, GAMMA) == pytest.approx(random, abs=EXACT)
    return own


@pytest.mark.parametrize("name", ["trading", "trading_3", "american_put"])
@pytest.mark.parametrize("key", list(UTILITIES))
def test_per_decision_and_random_figures_equal_the_enumerated_laws(name, key):
    instance = INSTANCES[name]
    utility = UTILITIES[key]
    if key != "E":
        utility = Utility(utility.alpha, utility.risk, {"rho": instance.rho})
    check_per_decision_and_random(instance.env, instance.model(), instance.horizon, utility)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["trading", "american_put"])
@pytest.mark.parametrize("key", list(UTILITIES))
def test_presets_per_decision_and_random_figures_equal_the_enumerated_laws(name, key):
    env, model, horizon = preset_model(name)
    own = check_per_decision_and_random(env, model, horizon, UTILITIES[key])
    if name == "american_put" and key != "E":  # exercising at once: a sure 1 (not a grid atom)
        assert own == pytest.approx(1.0, abs=EXACT)


@pytest.mark.slow
def test_trading_figures_the_grid_got_wrong():
    """Figures an independent implementation computed from the environment's definition
    (CVaR_0.1 and VaR_0.1 at alpha 0.5): the per-decision fixed points (from the
    expectation-optimal policy: VaR's holding/flat tie at period 4 is kept, not decided by
    rounding), the static CVaR optimum and the random policy."""
    _, model, _ = preset_model("trading")
    cvar, var = UTILITIES["CVaR"], UTILITIES["VaR"]
    assert tr.per_decision_fixed_point(model, cvar, GAMMA).static_utility == pytest.approx(
        -0.467512, abs=1e-6)
    assert tr.per_decision_fixed_point(model, var, GAMMA).static_utility == pytest.approx(
        -0.203211, abs=1e-6)
    assert tr.static_optimum(model, cvar, GAMMA).utility == pytest.approx(-0.449094, abs=1e-6)
    assert tr.uniform_random_utility(model, cvar, GAMMA) == pytest.approx(-3.944247, abs=1e-6)
    assert tr.uniform_random_utility(model, var, GAMMA) == pytest.approx(-3.545233, abs=1e-6)


@pytest.mark.parametrize("name", ["trading", "trading_3", "american_put"])
def test_static_optima_equal_the_decision_tree_programme(name):
    """E and CVaR (alpha 0 and 0.5) exactly; VaR's bounds hold the tree's optimum (alpha 0:
    the least shortfall probability, exact) and meet at alpha 0."""
    instance = INSTANCES[name]
    model = instance.model()
    assert tr.is_exact(model)
    best = tree_static_optima(instance.transitions, instance.start, instance.horizon, GAMMA,
                              instance.rho)
    assert tr.static_optimum(model, Utility(1.0), GAMMA).utility == pytest.approx(
        best["E"], abs=EXACT)
    for alpha in (0.0, 0.5):
        utility = Utility(alpha, "cvar", {"rho": instance.rho})
        assert tr.static_optimum(model, utility, GAMMA).utility == pytest.approx(
            best[f"CVaR a={alpha:g}"], abs=EXACT)
    bounds = tr.static_optimum(model, Utility(0.0, "var", {"rho": instance.rho}), GAMMA)
    assert bounds.utility == pytest.approx(best["VaR a=0"], abs=EXACT)
    assert bounds.upper == pytest.approx(best["VaR a=0"], abs=EXACT)


@pytest.mark.parametrize("name", ["trading", "american_put"])
def test_static_var_bounds_hold_the_best_of_every_policy(name):
    """Every deterministic policy of the (step, state, return so far) nodes listed (there
    they see the whole history): the lower bound is at most the best one's utility (it is
    a policy's), the upper bound at least; where the search closed the gap, both are it."""
    instance = INSTANCES[name]
    tree = decision_tree(instance.transitions, instance.start, instance.horizon, GAMMA, True)
    laws = tree.laws(tree.policies())
    for alpha in (0.25, 0.5, 0.75):
        utility = Utility(alpha, "var", {"rho": instance.rho})
        best = float(utilities(tree.returns, laws, utility).max())
        bounds = tr.static_optimum(instance.model(), utility, GAMMA)
        assert bounds.utility <= best + EXACT and bounds.upper >= best - EXACT, (alpha, bounds)
        if bounds.upper - bounds.utility <= EXACT:
            assert bounds.utility == pytest.approx(best, abs=EXACT)


@pytest.mark.slow
def test_static_var_on_the_put_is_exact_and_trading_an_interval():
    """The put's tree of histories is small: the search closes the gap at a sure exercise's
    1. Trading's is not: the interval holds the policy an independent search found
    (-0.178187) and the per-decision fixed point (-0.203211)."""
    _, put, _ = preset_model("american_put")
    found = tr.policy_free_references(put, UTILITIES["VaR"], GAMMA)
    assert found["static_optimum_kind"] == "exact" and found["static_optimum"] == 1.0
    _, trading, _ = preset_model("trading")
    found = tr.policy_free_references(trading, UTILITIES["VaR"], GAMMA)
    assert found["static_optimum_kind"] == "interval"
    assert found["static_optimum"] >= -0.178187 and found["static_optimum_upper"] >= -0.178187


def test_piecewise_linear_maximum_has_the_crossings():
    f = te.hinge(0.0, 0.0, -2.0)  # 0 then -2y
    g = te.PiecewiseLinear(np.array([-1.0, 1.0]), np.array([-1.0, -1.0]), 0.0, 0.0)
    h = te.maximum([f, g])
    ys = np.linspace(-3.0, 3.0, 61)
    assert h(ys) == pytest.approx(np.maximum(f(ys), g(ys)), abs=1e-12)
    assert 0.5 in h.knots.tolist()


def test_merged_joins_only_float_equal_atoms():
    values, probs = te.merged(np.array([0.3, 0.1 + 0.2, 0.30001]), np.array([0.2, 0.3, 0.5]))
    assert values.tolist() == [0.3, 0.30001] and probs == pytest.approx([0.5, 0.5])


@pytest.mark.parametrize("name", ["cliff_walking", "frozen_lake"])
def test_static_cvar_bounds_hold_the_decision_tree_optimum_where_laws_are_not_finite(name):
    """Where a state can follow itself the static CVaR optimum is an interval from two
    threshold programmes (one reading each next threshold at the grid point above, one
    below): it holds the tree programme's exact optimum, on a coarse grid as on a fine one."""
    instance = INSTANCES[name]
    model = instance.model()
    assert not tr.is_exact(model)
    best = tree_static_optima(instance.transitions, instance.start, instance.horizon, GAMMA,
                              instance.rho)
    for alpha in (0.0, 0.5):
        for points in (201, 2001):
            low, high = tr.static_cvar_bounds(model, alpha, instance.rho, GAMMA, points)
            assert low - EXACT <= best[f"CVaR a={alpha:g}"] <= high + EXACT, (alpha, points)
    found = tr.policy_free_references(model, Utility(0.5, "cvar", {"rho": instance.rho}),
                                      GAMMA)
    assert found["static_optimum_kind"] == "interval"
    assert found["static_optimum"] <= best["CVaR a=0.5"] + EXACT <= found[
        "static_optimum_upper"] + 2 * EXACT


@pytest.mark.slow
def test_cliff_walking_static_cvar_interval_holds_an_independent_computation():
    """The preset (slip 0.03, falls -5, 100 steps, alpha 0.5, CVaR_0.1): an implementation
    written apart from this package's put the optimum in [-15.890038, -15.882901]."""
    section = preset("cliff_walking")
    env = gym.make(section.id, **dict(section.kwargs))
    model = tr.tabular_model(env, horizon=section.max_episode_steps)
    found = tr.policy_free_references(model, UTILITIES["CVaR"], section.gamma)
    assert found["static_optimum_kind"] == "interval"
    assert found["static_optimum"] <= -15.890038 and -15.882901 <= found["static_optimum_upper"]
    assert found["static_optimum_upper"] - found["static_optimum"] < 0.1
