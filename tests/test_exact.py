"""The exact return distribution against Monte Carlo of the real environments, against
closed forms, and against the paper's table (appendix A)."""

from __future__ import annotations

import math
import time
import zlib

import gymnasium as gym
import numpy as np
import pytest
from scipy import integrate, optimize, stats

from rs_lightning.envs import (
    GRID_WORLDS,
    RiskyGridWorld,
    RiskyRewards,
    RiskyTransitions,
    TwoStage,
)
from rs_lightning.references.exact import PAPER_PATHS, GaussianMixture, exact_return

RHO, ALPHA = 0.1, 0.5
CLASSES = {"risky_rewards": RiskyRewards, "risky_transitions": RiskyTransitions,
           "risky_grid_world": RiskyGridWorld}

# Paper table: (E, VaR_0.1, U) for DQN (orange path) and RS-UMDQN-C (green path).
PAPER = {
    "risky_rewards": {"orange": (0.3, -1.246, -0.474), "green": (0.1, -0.126, -0.013)},
    "risky_transitions": {"orange": (0.703, 0.118, 0.411), "green": (0.625, 0.346, 0.485)},
    "risky_grid_world": {"orange": (0.347, -1.03, -0.342), "green": (0.333, 0.018, 0.175)},
}


def monte_carlo(env, policy, episodes, seed, gamma=1.0, first_action=None):
    """Returns and R_s of ``episodes`` episodes of the real environment."""
    returns = np.empty(episodes)
    outcomes = np.empty(episodes, dtype=int)
    env.reset(seed=seed)
    for i in range(episodes):
        _, info = env.reset()
        total, discount, action = 0.0, 1.0, first_action
        while True:
            if action is None:
                action = policy[info["cell"]]
            _, reward, terminated, truncated, info = env.step(action)
            action = None
            total += discount * reward
            discount *= gamma
            if terminated or truncated:
                break
        returns[i], outcomes[i] = total, info["risk_outcome"]
    return returns, outcomes


def empirical_var(samples, rho):
    """Lower rho-quantile: the ceil(rho n)-th smallest sample."""
    return np.sort(samples)[math.ceil(rho * len(samples)) - 1]


def assert_matches_monte_carlo(exact, returns, outcomes):
    n = len(returns)
    mix = exact.mixture
    # 5-sigma tolerances built from the exact law itself.
    assert abs(returns.mean() - exact.mean()) <= 5 * mix.std() / math.sqrt(n)
    var = exact.value_at_risk(RHO)
    var_se = math.sqrt(RHO * (1 - RHO) / n) / mix.pdf(var)
    assert abs(empirical_var(returns, RHO) - var) <= 5 * var_se + 1e-3
    tail = np.sort(returns)[: math.ceil(RHO * n)]
    cvar_se = math.sqrt(np.var(tail) / len(tail) + (var - tail.mean()) ** 2 * (1 - RHO) / len(tail))
    assert abs(tail.mean() - exact.conditional_value_at_risk(RHO)) <= 5 * cvar_se + 1e-3
    for k in (-1, 0, 1):
        p = exact.risk_outcome_probs[k]
        assert abs(np.mean(outcomes == k) - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-12
    # The whole law: Kolmogorov-Smirnov against the exact CDF.
    assert stats.kstest(returns, mix.cdf).pvalue > 1e-4


# --------------------------------------------------------------------------- Monte Carlo


@pytest.mark.parametrize("name", sorted(PAPER_PATHS))
@pytest.mark.parametrize("path", ["green", "orange"])
def test_paper_paths_match_monte_carlo(name, path):
    policy = PAPER_PATHS[name][path]
    seed = zlib.crc32(f"{name}/{path}".encode())
    returns, outcomes = monte_carlo(CLASSES[name](), policy, 20000, seed=seed)
    assert_matches_monte_carlo(exact_return(name, policy), returns, outcomes)


def wandering_policy(digits):
    """A 9-cell policy written as the actions of (0,0), (0,1), (0,2), (1,0), ..., (2,2)."""
    cells = [(x, y) for x in range(3) for y in range(3)]
    return {cell: int(d) for cell, d in zip(cells, digits)}


# Policies picked (by a search over random ones) for loops, timeouts and mixed R_s.
@pytest.mark.parametrize(
    "name, kwargs, digits",
    [
        ("risky_rewards", {}, "322110000"),  # loops until the timeout
        ("risky_rewards", {}, "303330320"),  # a detour to the risky goal
        ("risky_transitions", {"max_steps": 6}, "033302113"),  # R_s: 0.59 / 0.25 / 0.16
        ("risky_transitions", {"max_steps": 6}, "221013020"),
        ("risky_grid_world", {}, "131003332"),  # 46 components, mixed R_s
        ("risky_grid_world", {}, "203303133"),  # 55 components, repeated trap visits
        ("risky_grid_world", {"trap_terminal": True, "max_steps": 7}, "202000331"),
    ],
)
def test_arbitrary_policies_and_flags_match_monte_carlo(name, kwargs, digits):
    """Policies that loop and time out, with trap / flag / timeout branches all exercised."""
    policy = wandering_policy(digits)
    env = gym.make(GRID_WORLDS[name], **kwargs).unwrapped
    exact = exact_return(env, policy)  # flags taken from the instance
    assert exact.mixture.weights.sum() == pytest.approx(1.0)
    assert sum(exact.risk_outcome_probs.values()) == pytest.approx(1.0)
    returns, outcomes = monte_carlo(env, policy, 5000, seed=zlib.crc32(digits.encode()))
    assert_matches_monte_carlo(exact, returns, outcomes)


@pytest.mark.parametrize(
    "digits",
    [
        "330330300",  # UP at the start, UP from (0, 1) to a safe goal, UP from the coin cell
        "330300300",  # the same but RIGHT from the coin cell to the other safe goal
        "011333003",  # the coin tried again and again from (0, 1): penalties, timeouts
    ],
)
def test_two_stage_matches_monte_carlo(digits):
    """The two-stage gamble (not the paper's): the coin, the penalty, the risky goal."""
    policy = wandering_policy(digits)
    exact = exact_return("two_stage", policy)
    returns, outcomes = monte_carlo(TwoStage(), policy, 8000, seed=zlib.crc32(digits.encode()))
    assert_matches_monte_carlo(exact, returns, outcomes)


def test_trap_terminal_orange_path_matches_monte_carlo():
    policy = PAPER_PATHS["risky_grid_world"]["orange"]
    exact = exact_return("risky_grid_world", policy, trap_terminal=True)
    assert exact.risk_outcome_probs[-1] == pytest.approx(1.0)
    returns, outcomes = monte_carlo(RiskyGridWorld(trap_terminal=True), policy, 4000, seed=3)
    assert_matches_monte_carlo(exact, returns, outcomes)


def test_discounted_return_and_first_action_match_monte_carlo():
    policy = PAPER_PATHS["risky_grid_world"]["orange"]
    exact = exact_return("risky_grid_world", policy, gamma=0.9, first_action=2)
    returns, outcomes = monte_carlo(
        RiskyGridWorld(), policy, 4000, seed=4, gamma=0.9, first_action=2
    )
    assert_matches_monte_carlo(exact, returns, outcomes)
    # Z(s0, pi(s0)) is the law of the policy itself.
    same = exact_return("risky_grid_world", policy, first_action=policy[(1, 0)])
    plain = exact_return("risky_grid_world", policy)
    assert np.array_equal(same.mixture.means, plain.mixture.means)
    assert np.array_equal(same.mixture.weights, plain.mixture.weights)


def test_discounted_mean_equals_bellman_value():
    """E of the discounted return = V^pi(s0) from a backward recursion on the tabular model
    (no branch merging), over a finite horizon."""
    env = RiskyGridWorld()
    policy = wandering_policy("131003332")
    gamma, horizon = 0.9, 10
    value = {(c, f): 0.0 for c in policy for f in (False, True)}
    for _ in range(horizon):
        value = {
            (c, f): sum(
                o.probability * (
                    sum(p * m for p, m in o.reward_components)
                    + (0.0 if o.terminal else gamma * value[(o.next_cell, o.new_flag)])
                )
                for o in env.outcomes(c, policy[c], f)
            )
            for (c, f) in value
        }
    exact = exact_return(env, policy, gamma=gamma)
    assert exact.mean() == pytest.approx(value[((1, 0), False)], abs=1e-12)


# --------------------------------------------------------------------------- closed forms


def test_gaussian_mixture_against_scipy():
    single = GaussianMixture([1.0], [0.1], [0.3])
    z = stats.norm.ppf(RHO)
    assert single.value_at_risk(RHO) == pytest.approx(0.1 + 0.3 * z, abs=1e-10)
    assert single.conditional_value_at_risk(RHO) == pytest.approx(
        0.1 - 0.3 * stats.norm.pdf(z) / RHO, abs=1e-10)

    mix = GaussianMixture([0.2, 0.5, 0.3], [-1.0, 0.2, 0.9], [0.1, 0.25, 0.2])
    cdf = lambda x: float(np.dot(mix.weights, stats.norm.cdf(x, mix.means, mix.stds)))
    for rho in (0.01, 0.1, 0.2, 0.5, 0.9):
        var = mix.value_at_risk(rho)
        root = optimize.brentq(lambda x: cdf(x) - rho, -5, 5, xtol=1e-14)
        assert var == pytest.approx(root, abs=1e-9)
        assert mix.cdf(var) == pytest.approx(rho, abs=1e-12)
        pdf = lambda x: float(np.dot(mix.weights, stats.norm.pdf(x, mix.means, mix.stds)))
        tail = integrate.quad(lambda x: x * pdf(x), -np.inf, var, epsabs=1e-12)[0] / rho
        assert mix.conditional_value_at_risk(rho) == pytest.approx(tail, abs=1e-8)
    assert mix.mean() == pytest.approx(0.2 * -1 + 0.5 * 0.2 + 0.3 * 0.9)
    assert mix.utility(ALPHA, RHO, "cvar") == pytest.approx(
        0.5 * mix.mean() + 0.5 * mix.conditional_value_at_risk(RHO))
    with pytest.raises(ValueError):
        mix.value_at_risk(0.0)
    with pytest.raises(ValueError):
        mix.utility(0.5, 0.1, risk="entropic")


def test_closed_forms_of_simple_paths():
    # Risky rewards, green: three Gaussian rewards, -0.1 - 0.1 + 0.3.
    green = exact_return("risky_rewards", PAPER_PATHS["risky_rewards"]["green"])
    assert len(green.mixture) == 1
    assert green.value_at_risk(RHO) == pytest.approx(0.1 + 0.1 * math.sqrt(3) * stats.norm.ppf(RHO))
    # Risky transitions, orange: k failed attempts (prob 0.5^(k+1)) then the goal, or ten
    # failures (prob 0.5^10, S ~ -3).
    orange = exact_return("risky_transitions", PAPER_PATHS["risky_transitions"]["orange"])
    mean = sum(0.5 ** (k + 1) * (1 - 0.3 * k) for k in range(10)) + 0.5**10 * -3.0
    assert orange.mean() == pytest.approx(mean, abs=1e-12)
    assert orange.risk_outcome_probs == pytest.approx({-1: 1 - 0.5**10, 0: 0.5**10, 1: 0.0})
    assert np.allclose(np.sort(orange.mixture.stds), 0.1 * np.sqrt([*range(1, 11), 10]))


def test_env_flags_are_honoured():
    policy = PAPER_PATHS["risky_grid_world"]["orange"]
    wrapped = gym.make(GRID_WORLDS["risky_grid_world"], max_steps=5, trap_terminal=True)
    assert exact_return(wrapped, policy).mean() == pytest.approx(
        exact_return("risky_grid_world", policy, max_steps=5, trap_terminal=True).mean())
    assert exact_return(wrapped, policy).mean() != pytest.approx(
        exact_return("risky_grid_world", policy).mean())
    with pytest.raises(ValueError):
        exact_return("risky_rewards", policy, trap_terminal=True)


def test_enumeration_is_fast():
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for name in PAPER_PATHS:
        for _ in range(20):
            policy = {(x, y): int(rng.integers(4)) for x in range(3) for y in range(3)}
            exact_return(name, policy, gamma=float(rng.choice([1.0, 0.9])))
    per_policy = (time.perf_counter() - start) / 60
    assert per_policy < 0.1  # measured: about 1 ms


# --------------------------------------------------------------------------- paper table


@pytest.mark.parametrize("name", sorted(PAPER))
@pytest.mark.parametrize("path", ["green", "orange"])
def test_paper_table_is_reproduced(name, path):
    """Green = RS-UMDQN-C column, orange = DQN column; the paper's numbers are Monte Carlo /
    histogram estimates, hence the 0.03 tolerance (the largest gap found is 0.0044)."""
    exact = exact_return(name, PAPER_PATHS[name][path])
    e, var, u = PAPER[name][path]
    assert exact.mean() == pytest.approx(e, abs=0.03)
    assert exact.value_at_risk(RHO) == pytest.approx(var, abs=0.03)
    assert exact.utility(ALPHA, RHO) == pytest.approx(u, abs=0.03)
    assert exact.risk_outcome_probs[+1 if path == "green" else -1] > 0.99


def test_green_path_has_the_better_utility_and_orange_the_better_mean():
    for name in PAPER:
        green = exact_return(name, PAPER_PATHS[name]["green"])
        orange = exact_return(name, PAPER_PATHS[name]["orange"])
        assert orange.mean() > green.mean()
        assert green.utility(ALPHA, RHO) > orange.utility(ALPHA, RHO)
        assert green.utility(ALPHA, RHO, "cvar") > orange.utility(ALPHA, RHO, "cvar")
