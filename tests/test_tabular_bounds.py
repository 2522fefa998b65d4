"""Sound bounds of references/tabular_bounds.py (worlds whose episodes can revisit states:
cliff walking) against independent computations: laws enumerated trajectory by trajectory,
and the static optima of the decision tree over every history (tests/test_benchmark_worlds.py's
helpers). Every lower end must be at most the true figure and every upper end at least."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rs_lightning.envs  # noqa: F401  (registers the rs_lightning/ environments)
from rs_lightning.references import tabular_bounds as tb
from rs_lightning.references import tabular_references as tr
from rs_lightning.risk import Utility
from tests.test_benchmark_worlds import (
    GAMMA,
    INSTANCES,
    decision_tree,
    law_utility,
    policy_law,
    spectral_of,
    tree_static_optima,
    tree_static_spectral_optimum,
    utilities,
)
from tests.test_gym_envs import preset
from tests.test_tabular_exact import random_policy_law

SOUND = 1e-9


def long_cliff() -> tuple[gym.Env, tr.TabularModel, int]:
    """Cliff walking (slipping 0.2, falls -5) from its start, 5 steps: falls at any step,
    several in one episode."""
    env = gym.make("rs_lightning/SlipperyCliffWalking-v0", slip_probability=0.2, cliff_reward=-5)
    return env, tr.tabular_model(env, horizon=5), 5


def measures(rho: float) -> list[Utility]:
    return [Utility(1.0), Utility(0.5, "cvar", {"rho": rho}), Utility(0.5, "var", {"rho": rho}),
            Utility(0.0, "var", {"rho": rho}),
            Utility(0.5, "spectral", {"levels": (rho / 2, rho), "weights": (0.5, 0.5)})]


def check_law_bounds(env, model, horizon: int, rho: float) -> None:
    transitions = env.unwrapped.P
    start = int(np.argmax(model.start))
    rng = np.random.default_rng(0)
    policies = [tr.expectation_optimal_policy(model, GAMMA),
                rng.integers(model.n_actions, size=model.n_states)]
    for policy in policies:
        law = policy_law(transitions, policy, start, int(policy[start]), GAMMA, horizon)
        bounds = tb.episode_law_bounds(model, policy, GAMMA)
        for utility in measures(rho):
            low, high = tb.utility_bounds(bounds, utility)
            assert low - SOUND <= law_utility(*law, utility) <= high + SOUND, utility
    random_model, only = tr._uniform_random_model(model)
    law = random_policy_law(transitions, start, GAMMA, horizon)
    bounds = tb.episode_law_bounds(random_model, only, GAMMA)
    for utility in measures(rho):
        low, high = tb.utility_bounds(bounds, utility)
        assert low - SOUND <= law_utility(*law, utility) <= high + SOUND, utility


@pytest.mark.parametrize("name", ["cliff_walking", "frozen_lake", "trading_3"])
def test_law_bounds_hold_the_enumerated_laws(name):
    """Trading rounds at every step (its rewards vary), cliff walking at falls."""
    instance = INSTANCES[name]
    check_law_bounds(instance.env, instance.model(), instance.horizon, instance.rho)


def test_law_bounds_hold_on_a_cliff_with_several_falls():
    env, model, horizon = long_cliff()
    check_law_bounds(env, model, horizon, 0.1)


def test_law_bounds_are_tight_where_rewards_are_the_baseline():
    """No fall, no rounding: a policy that never risks one has equal bounds."""
    env = gym.make("rs_lightning/SlipperyCliffWalking-v0", slip_probability=0.0, cliff_reward=-5)
    model = tr.tabular_model(env, horizon=20)
    bounds = tb.episode_law_bounds(model, tr.expectation_optimal_policy(model, GAMMA), GAMMA)
    low, high = tb.utility_bounds(bounds, Utility(0.5, "cvar", {"rho": 0.1}))
    assert low == pytest.approx(high, abs=1e-12)
    assert low == pytest.approx(-(1 - GAMMA ** 13) / (1 - GAMMA), abs=1e-9)  # 13 steps


@pytest.mark.parametrize("name", [
    pytest.param("cliff_walking", marks=pytest.mark.slow), "frozen_lake",
    pytest.param("trading", marks=pytest.mark.slow), "american_put"])
def test_static_bounds_hold_the_decision_tree_optimum(name):
    """CVaR (alpha 0 and 0.5), VaR at alpha 0 and the spectral measure: the tree's exact
    optima over every history; VaR at alpha 0.5 where every policy can be listed."""
    instance = INSTANCES[name]
    model = instance.model()
    best = tree_static_optima(instance.transitions, instance.start, instance.horizon, GAMMA,
                              instance.rho)
    for alpha in (0.0, 0.5):
        low, high = tb.static_cvar_bounds(model, alpha, instance.rho, GAMMA, -np.inf)
        assert low - SOUND <= best[f"CVaR a={alpha:g}"] <= high + SOUND, (alpha, low, high)
        utility = spectral_of(instance, alpha)
        exact = tree_static_spectral_optimum(instance, utility)
        low, high = tb.static_spectral_bounds(model, alpha, (instance.rho / 2, instance.rho),
                                              (0.5, 0.5), GAMMA, -np.inf)
        assert low - SOUND <= exact <= high + SOUND, (alpha, low, high, exact)
    low, high = tb.static_var_bounds(model, 0.0, instance.rho, GAMMA, -np.inf)
    assert low - SOUND <= best["VaR a=0"] <= high + SOUND, (low, high)
    if instance.listed:
        tree = decision_tree(instance.transitions, instance.start, instance.horizon, GAMMA, True)
        utility = Utility(0.5, "var", {"rho": instance.rho})
        listed = float(utilities(tree.returns, tree.laws(tree.policies()), utility).max())
        low, high = tb.static_var_bounds(model, 0.5, instance.rho, GAMMA, -np.inf)
        assert low - SOUND <= listed <= high + SOUND, (low, high, listed)


def test_cliff_walking_figures_are_intervals_in_eval_json():
    """Every figure of a world with a time limit and revisited states is labelled an
    interval (or exact where its ends meet), with a lower end no higher than its upper."""
    instance = INSTANCES["cliff_walking"]
    model = instance.model()
    for risk in ("cvar", "var"):
        utility = Utility(0.5, risk, {"rho": instance.rho})
        found = tr.references(model, tr.expectation_optimal_policy(model, GAMMA), utility, GAMMA)
        for key in ("exact_static_utility", "per_decision_static_utility", "static_optimum"):
            assert found[f"{key}_kind"] in ("interval", "exact"), key
            assert found[key] <= found.get(f"{key}_upper", found[key])
        value, low, high, kind = tr.uniform_random_reference(model, utility, GAMMA)
        assert kind in ("interval", "exact") and value == low <= high


@pytest.mark.slow
def test_cliff_walking_preset_intervals_hold_independent_figures():
    """The preset (slip 0.03, falls -5, 100 steps; alpha 0.5, rho 0.1): an implementation
    written apart from this package's found the per-decision fixed points' static utilities
    -15.999496 (CVaR) and -15.166527 (VaR), the random policy's VaR in [-97.807182,
    -97.801682] and the static CVaR optimum in [-15.890038, -15.882901]."""
    section = preset("cliff_walking")
    env = gym.make(section.id, **dict(section.kwargs))
    model = tr.tabular_model(env, horizon=section.max_episode_steps)
    gamma = section.gamma
    cvar = Utility(0.5, "cvar", {"rho": 0.1})
    var = Utility(0.5, "var", {"rho": 0.1})
    found = tr.policy_free_references(model, cvar, gamma)
    assert found["per_decision_static_utility"] <= -15.999496 <= found[
        "per_decision_static_utility_upper"]
    assert found["static_optimum"] <= -15.882901 and found["static_optimum_upper"] >= -15.890038
    assert found["static_optimum_upper"] - found["static_optimum"] < 0.01
    found = tr.policy_free_references(model, var, gamma)
    assert found["per_decision_static_utility"] <= -15.166527 <= found[
        "per_decision_static_utility_upper"]
    assert found["static_optimum"] >= found["per_decision_static_utility"]
    _, low, high, kind = tr.uniform_random_reference(model, var, gamma)
    assert kind == "interval" and low <= -97.801682 and high >= -97.807182
