"""The exact reference policies (envs/exact_policies.py): the per-decision fixed point of the
paper's method, its alpha switch points, and the static objective's optimum, against the
paper's table, closed forms and brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from rs_lightning.envs import RiskyGridWorld
from rs_lightning.envs.grid_worlds import CELLS, RIGHT, START, UP
from rs_lightning.references.exact import PAPER_PATHS, GaussianMixture, exact_return
from rs_lightning.references.exact_policies import (
    CYCLE,
    action_laws,
    episode_report,
    improve,
    mixture_utility,
    path_of,
    per_decision_fixed_point,
    per_decision_switch_points,
    policy_key,
    policy_of,
    reachable_policies,
    static_gap,
    static_optimum,
    static_switch_points,
    static_utility,
)
from rs_lightning.risk import Utility

RHO, GAMMA = 0.1, 0.9  # the paper's risk level and discount (conf/env/*.yaml)
PAPER_WORLDS = sorted(PAPER_PATHS)
# The paper's table (appendix A): (E[S], VaR_0.1[S], U[S] at alpha 0.5) of
# the DQN (orange) and RS-UMDQN-C (green) policies; Monte Carlo figures, hence abs=0.03
# (tests/test_exact.py).
PAPER = {
    "risky_rewards": {"orange": (0.3, -1.246, -0.474), "green": (0.1, -0.126, -0.013)},
    "risky_transitions": {"orange": (0.703, 0.118, 0.411), "green": (0.625, 0.346, 0.485)},
    "risky_grid_world": {"orange": (0.347, -1.03, -0.342), "green": (0.333, 0.018, 0.175)},
}
# Per-decision switch points from RIGHT everywhere, gamma 0.9, rho 0.1 (computed here to
# 1e-4 and pinned): world -> risk -> [(alpha, path below, path above)].
PER_DECISION_SWITCHES = {
    "risky_rewards": {"var": [(0.8462, "green", "orange")],
                      "cvar": [(0.8515, "green", "orange")]},
    "risky_transitions": {"var": [(0.6692, "green", "orange")],
                          "cvar": [(0.7838, "green", CYCLE), (0.8136, CYCLE, "orange")]},
    "risky_grid_world": {"var": [(0.9115, "green", "orange")],
                         "cvar": [(0.9154, "green", "orange")]},
}


def utility(alpha: float, risk: str = "var") -> Utility:
    return Utility(alpha, risk, {"rho": RHO})


def same_law(policy_a, policy_b, name, gamma=1.0) -> bool:
    """Two policies behave alike from the start: the same mixture, component by component."""
    a, b = (exact_return(name, p, gamma=gamma).mixture for p in (policy_a, policy_b))
    return (len(a) == len(b) and np.allclose(a.means, b.means, atol=1e-12)
            and np.allclose(a.weights, b.weights, atol=1e-12))


# --------------------------------------------------------------------------- per-decision


@pytest.mark.parametrize("name", PAPER_WORLDS)
@pytest.mark.parametrize("risk", ["var", "cvar"])
def test_paper_paths_at_alpha_half_and_one(name, risk):
    """The paper's result: alpha 0.5 takes the green path, alpha 1 (expectation) the orange
    one, with the exact numbers of the paper's paths, and the paper's table within its
    Monte Carlo error (the table is for VaR, so CVaR is checked on the paths alone)."""
    for alpha, path in ((0.5, "green"), (1.0, "orange")):
        fixed = per_decision_fixed_point(name, utility(alpha, risk), gamma=GAMMA)
        assert fixed.converged and fixed.path == path
        reference = exact_return(name, PAPER_PATHS[name][path])
        report = fixed.undiscounted
        assert report.expectation == pytest.approx(reference.mean(), abs=1e-12)
        assert report.value_at_risk == pytest.approx(reference.value_at_risk(RHO), abs=1e-12)
        assert report.conditional_value_at_risk == pytest.approx(
            reference.conditional_value_at_risk(RHO), abs=1e-12)
        assert report.risk_outcome_probs[+1 if path == "green" else -1] > 0.99
        e, var, u = PAPER[name][path]
        assert report.expectation == pytest.approx(e, abs=0.03)
        assert report.value_at_risk == pytest.approx(var, abs=0.03)
        assert reference.utility(0.5, RHO) == pytest.approx(u, abs=0.03)
        if alpha == 0.5 and risk == "var":
            assert report.utility == pytest.approx(u, abs=0.03)
        # The discounted report is the law of Z(start, pi(start)) the agent learns.
        z_start = action_laws(name, fixed.policy, gamma=GAMMA)[(START, fixed.policy[START])]
        assert fixed.discounted.expectation == pytest.approx(z_start.mean(), abs=1e-12)
        assert fixed.discounted.value_at_risk == pytest.approx(z_start.value_at_risk(RHO))


@pytest.mark.parametrize("name", PAPER_WORLDS)
@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.9, 1.0])
def test_the_fixed_point_is_a_fixed_point(name, alpha):
    """One more improvement step on the exact laws changes no cell's action, and each
    action is the argmax of U over its cell's exact laws."""
    u = utility(alpha)
    fixed = per_decision_fixed_point(name, u, gamma=GAMMA)
    assert fixed.converged
    assert improve(name, fixed.policy, u, gamma=GAMMA) == fixed.policy
    laws = action_laws(name, fixed.policy, gamma=GAMMA)
    for cell in CELLS:
        values = [mixture_utility(laws[(cell, a)].mixture, u) for a in range(4)]
        assert values[fixed.policy[cell]] >= max(values) - 1e-12


def test_two_fixed_points_and_a_cycle_on_risky_transitions():
    """U is not additive, so utility-greedy policy iteration has no uniqueness or
    convergence guarantee: with VaR at alpha 0.7 the green and the orange paths are both
    fixed points (the start follows the continuation it was given), and with CVaR at
    alpha 0.8 the iteration alternates between a green and an orange policy."""
    u = utility(0.7)
    for path in ("green", "orange"):
        fixed = per_decision_fixed_point(
            "risky_transitions", u, gamma=GAMMA,
            initial_policy=PAPER_PATHS["risky_transitions"][path])
        assert fixed.converged and fixed.path == path
        assert improve("risky_transitions", fixed.policy, u, gamma=GAMMA) == fixed.policy

    u = utility(0.8, "cvar")
    cycling = per_decision_fixed_point("risky_transitions", u, gamma=GAMMA)
    assert not cycling.converged and cycling.path == CYCLE
    first, second = cycling.cycle
    assert cycling.policy == first
    assert improve("risky_transitions", first, u, gamma=GAMMA) == second
    assert improve("risky_transitions", second, u, gamma=GAMMA) == first
    paths = {path_of(exact_return("risky_transitions", p).risk_outcome_probs)
             for p in (first, second)}
    assert paths == {"green", "orange"}


@pytest.mark.parametrize("name", PAPER_WORLDS)
@pytest.mark.parametrize("risk", ["var", "cvar"])
def test_per_decision_switch_points(name, risk):
    """Green below, orange above, every switch strictly between alpha 0.5 and 1, and where
    the sweep put it (to 1e-4)."""
    points = per_decision_switch_points(name, utility(0.5, risk), gamma=GAMMA)
    expected = PER_DECISION_SWITCHES[name][risk]
    assert [(p.path_below, p.path_above) for p in points] == [e[1:] for e in expected]
    for point, (alpha, _, _) in zip(points, expected):
        assert 0.5 < point.alpha_below < point.alpha_above < 1.0
        assert point.alpha_above - point.alpha_below <= 1e-4
        assert point.alpha == pytest.approx(alpha, abs=1e-4)


def test_switch_point_of_the_two_stage_coin_cell_in_closed_form():
    """On TwoStage the path switches where the coin cell's two one-step laws tie:
    U[N(0.5, s^2)] = U[0.75 N(2, s^2) + 0.25 N(-1, s^2)], s = 0.1. The low rho = 0.1 tail
    of the gamble is the lower 0.4 of its N(-1) part (the N(2) part is 30 sigma away):
    VaR = -1 + s z_0.4 and CVaR = -1 - s phi(z_0.4) / 0.4; the safe goal's are
    0.5 + s z_0.1 and 0.5 - s phi(z_0.1) / 0.1. alpha* solves alpha dE = (1 - alpha) dR."""
    s, z = 0.1, stats.norm.ppf
    risks = {
        "var": (0.5 + s * z(RHO), -1.0 + s * z(0.4)),
        "cvar": (0.5 - s * stats.norm.pdf(z(RHO)) / RHO, -1.0 - s * stats.norm.pdf(z(0.4)) / 0.4),
    }
    for risk, (safe, gamble) in risks.items():
        expected = (safe - gamble) / ((1.25 - 0.5) + (safe - gamble))
        (point,) = per_decision_switch_points("two_stage", utility(0.5, risk), gamma=GAMMA)
        assert (point.path_below, point.path_above) == ("green", "orange")
        assert point.alpha_below <= expected + 1e-12 and expected <= point.alpha_above + 1e-12


# --------------------------------------------------------------------------- static objective


def test_reachable_policies_are_every_behaviour():
    """The search space: one policy per behaviour from the start (counts pinned), and no
    random full policy does better on the static objective than the search's optimum."""
    counts = {name: len(reachable_policies(name)) for name in ("risky_rewards",
                                                                "risky_transitions", "two_stage")}
    assert counts == {"risky_rewards": 58, "risky_transitions": 301, "two_stage": 43}
    rng = np.random.default_rng(0)
    for name in ("risky_transitions", "two_stage"):
        u = utility(0.5)
        best = static_optimum(name, u, gamma=1.0).utility
        for _ in range(100):
            policy = {cell: int(rng.integers(4)) for cell in CELLS}
            assert static_utility(name, policy, u, gamma=1.0) <= best + 1e-12


@pytest.mark.parametrize("name", ["risky_rewards", "risky_transitions", "two_stage"])
@pytest.mark.parametrize("gamma", [1.0, GAMMA])
def test_static_optimum_dominates_the_per_decision_policy(name, gamma):
    """U[return] of the static optimum >= that of the per-decision fixed point (a
    cell-Markov policy, so inside the search), with equality where both behave alike."""
    for alpha in (0.3, 0.5, 0.7, 0.8, 1.0):  # 0.7: risky transitions' paths differ on S
        u = utility(alpha)
        fixed = per_decision_fixed_point(name, u, gamma=GAMMA)
        best = static_optimum(name, u, gamma=gamma)
        gap = static_gap(name, fixed.policy, u, gamma=gamma)
        assert gap >= -1e-12
        own = static_utility(name, fixed.policy, u, gamma=gamma)
        assert gap == pytest.approx(best.utility - own)
        if same_law(fixed.policy, best.policy, name, gamma):
            assert gap == pytest.approx(0.0, abs=1e-12)
        else:
            assert gap > 0.0


def test_static_objective_on_the_paper_worlds():
    """At alpha 0.5 the static optimum of S also takes the green path (and the same
    behaviour as the per-decision policy), at alpha 1 the orange one; the switch of the
    static objective of S comes later than the per-decision one on risky rewards, as S
    has no discount to shrink the risky goal's loss."""
    for name in ("risky_rewards", "risky_transitions"):
        for alpha, path in ((0.5, "green"), (1.0, "orange")):
            best = static_optimum(name, utility(alpha), gamma=1.0)
            assert best.path == path
            assert same_law(best.policy, PAPER_PATHS[name][path], name)
    (point,) = static_switch_points("risky_rewards", utility(0.5), gamma=1.0)
    assert (point.path_below, point.path_above) == ("green", "orange")
    assert point.alpha == pytest.approx(0.8487, abs=1e-4)


def test_hand_computed_static_utility_of_risky_rewards_green():
    """S = -0.1 - 0.1 + 0.3 + three N(0, 0.1^2): VaR_0.1 = 0.1 + 0.1 sqrt(3) z_0.1."""
    var = 0.1 + 0.1 * math.sqrt(3) * stats.norm.ppf(RHO)
    green = PAPER_PATHS["risky_rewards"]["green"]
    assert static_utility("risky_rewards", green, utility(0.3), gamma=1.0) == pytest.approx(
        0.3 * 0.1 + 0.7 * var, abs=1e-12)


# --------------------------------------------------------------------------- TwoStage


def test_two_stage_per_decision_and_static_disagree():
    """alpha 0.5, VaR_0.1: the per-decision policy takes the safe goal after a lucky coin,
    the static optimum of S the risky one.

    Why: the per-decision criterion judges Z(coin, a) alone. Its risky law
    0.75 N(2) + 0.25 N(-1) has VaR_0.1 = -1.025 (U = 0.112), the safe N(0.5) has
    VaR_0.1 = 0.372 (U = 0.436), so it goes safe. The static objective judges S of the
    whole episode: with probability 0.4 the coin fails, S = -2 + 0.5 ~ N(-1.5, 2 s^2), and
    that alone fills the 10 % tail of S (VaR_0.1[S] = -1.5 + s sqrt(2) z_0.25 = -1.5954 for
    the safe policy), while the risky goal's loss after the lucky coin, S ~ N(-1.1), lies
    2.8 sigma above it: going risky adds 0.45 to E[S] and costs VaR only 4e-5."""
    u = utility(0.5)
    fixed = per_decision_fixed_point("two_stage", u, gamma=GAMMA)
    best = static_optimum("two_stage", u, gamma=1.0)
    assert fixed.converged
    assert (fixed.policy[START], fixed.policy[(1, 1)], fixed.policy[(0, 1)]) == (UP, RIGHT, UP)
    assert (best.policy[START], best.policy[(1, 1)], best.policy[(0, 1)]) == (UP, UP, UP)
    assert (fixed.path, best.path) == ("green", "orange")

    s = 0.1
    var_unlucky = -1.5 + s * math.sqrt(2) * stats.norm.ppf(RHO / 0.4)
    safe, risky = fixed.undiscounted, best.report
    assert safe.expectation == pytest.approx(0.6 * 0.4 + 0.4 * -1.5, abs=1e-12)  # -0.36
    assert risky.expectation == pytest.approx(
        0.6 * (0.75 * 1.9 + 0.25 * -1.1) + 0.4 * -1.5, abs=1e-12)  # 0.09
    assert safe.value_at_risk == pytest.approx(var_unlucky, abs=1e-9)  # -1.59539
    assert risky.value_at_risk == pytest.approx(var_unlucky, abs=1e-4)
    assert risky.value_at_risk < safe.value_at_risk
    assert safe.utility == pytest.approx(0.5 * -0.36 + 0.5 * var_unlucky, abs=1e-9)  # -0.9777
    assert risky.utility == pytest.approx(0.5 * 0.09 + 0.5 * var_unlucky, abs=1e-4)  # -0.7527
    assert static_gap("two_stage", fixed.policy, u, gamma=1.0) == pytest.approx(0.225, abs=1e-4)
    assert risky.risk_outcome_probs == pytest.approx({+1: 0.4, -1: 0.6, 0: 0.0})
    # The coin cell's one-step laws, as the per-decision criterion sees them.
    laws = action_laws("two_stage", fixed.policy, gamma=GAMMA)
    assert mixture_utility(laws[((1, 1), UP)].mixture, u) == pytest.approx(
        0.5 * 1.25 + 0.5 * (-1.0 + s * stats.norm.ppf(0.4)), abs=1e-9)
    assert mixture_utility(laws[((1, 1), RIGHT)].mixture, u) == pytest.approx(
        0.5 * 0.5 + 0.5 * (0.5 + s * stats.norm.ppf(RHO)), abs=1e-9)


def test_two_stage_disagreement_spans_alpha():
    """The static optimum (of S and of the discounted return) goes risky after the coin
    from alpha about 1e-4 on; the per-decision policy only from 0.6507 (VaR) / 0.6545 (CVaR)."""
    for risk, per_decision in (("var", 0.6507), ("cvar", 0.6545)):
        (point,) = per_decision_switch_points("two_stage", utility(0.5, risk), gamma=GAMMA)
        assert point.alpha == pytest.approx(per_decision, abs=1e-4)
        for gamma in (1.0, GAMMA):
            (static_point,) = static_switch_points("two_stage", utility(0.5, risk), gamma=gamma)
            assert (static_point.path_below, static_point.path_above) == ("green", "orange")
            assert static_point.alpha < 2e-4


# --------------------------------------------------------------------------- utility of a law


def test_utility_of_a_law_for_other_risk_measures():
    """A measure without a closed form goes through the registered function on a fine
    grid: Wang's transform of N(mu, sigma) is mu + eta sigma."""
    law = GaussianMixture([1.0], [0.2], [0.3])
    u = Utility(0.4, "wang", {"eta": -0.5})
    assert mixture_utility(law, u) == pytest.approx(0.4 * 0.2 + 0.6 * (0.2 - 0.5 * 0.3), abs=1e-3)
    assert mixture_utility(law, Utility(1.0, "var")) == pytest.approx(0.2)  # no rho needed
    report = episode_report(exact_return("risky_rewards", PAPER_PATHS["risky_rewards"]["green"]),
                            utility(0.5))
    assert report.path == "green"
    green = PAPER_PATHS["risky_rewards"]["green"]
    assert policy_of(policy_key(green)) == green


@pytest.mark.slow
@pytest.mark.parametrize("name", PAPER_WORLDS)
@pytest.mark.parametrize("risk", ["var", "cvar"])
def test_static_switch_points_of_the_paper_worlds(name, risk):
    """The static objective's switches (about 5 s a world): of the discounted return they
    coincide with the per-decision ones (the last switch, past a cycle); of S they come
    later, and also lie strictly between 0.5 and 1."""
    discounted = static_switch_points(name, utility(0.5, risk), gamma=GAMMA)
    (last,) = discounted
    assert last.alpha == pytest.approx(PER_DECISION_SWITCHES[name][risk][-1][0], abs=1e-4)
    (score,) = static_switch_points(name, utility(0.5, risk), gamma=1.0)
    assert (score.path_below, score.path_above) == ("green", "orange")
    assert last.alpha < score.alpha < 1.0


def test_an_instance_brings_its_flags():
    """RiskyGridWorld(trap_terminal=True) (the paper's text): the trap ends the episode, so
    the orange path's law changes; the fixed point still takes the green path at 0.5."""
    world = RiskyGridWorld(trap_terminal=True)
    u = utility(0.5)
    fixed = per_decision_fixed_point(world, u, gamma=GAMMA)
    assert fixed.converged and fixed.path == "green"
    assert improve(world, fixed.policy, u, gamma=GAMMA) == fixed.policy
    orange = PAPER_PATHS["risky_grid_world"]["orange"]
    assert static_utility(world, orange, u, gamma=1.0) == pytest.approx(
        mixture_utility(exact_return("risky_grid_world", orange, trap_terminal=True).mixture, u))
    assert static_utility(world, orange, u, gamma=1.0) != pytest.approx(
        static_utility("risky_grid_world", orange, u, gamma=1.0))


def test_alpha_one_needs_no_risk_level():
    """At alpha = 1 the utility is E: no rho is needed, and the answer is the expectation's."""
    for name in ("risky_rewards", "two_stage"):
        fixed = per_decision_fixed_point(name, Utility(1.0, "var"), gamma=GAMMA)
        with_rho = per_decision_fixed_point(name, utility(1.0, "cvar"), gamma=GAMMA)
        assert fixed.policy == with_rho.policy
        assert static_optimum(name, Utility(1.0, "var"), gamma=1.0).path == "orange"
