"""The two-stage gamble's references (references/exact_policies.py through ground_truth.py)
against a computation written from the environment's one-step model alone: every path of an
episode enumerated, its return a Gaussian (the rewards' N(mean, 0.1) summed with discounts),
VaR by bisection on the mixture's CDF and CVaR in closed form (scipy). The per-decision
fixed point, the static optimum over cell-Markov policies (every behaviour listed) and the
uniform-random policy must agree to 1e-9."""

from __future__ import annotations

import math

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy.stats import norm

from rs_lightning.config import CONF_DIR
from rs_lightning.envs.grid_worlds import REWARD_STD, START, TwoStage
from rs_lightning.references import exact_policies
from rs_lightning.references.ground_truth import exact_references
from rs_lightning.risk import Utility

EXACT = 1e-9
GAMMA = 0.9
STEPS = 10
UTILITIES = [Utility(0.5, "cvar", {"rho": 0.1}), Utility(0.5, "var", {"rho": 0.1}),
             Utility(0.0, "cvar", {"rho": 0.1}), Utility(1.0)]


def mixture_law(world: TwoStage, act, start=START, first_action=None):
    """The law of sum_{t < STEPS} gamma^t r_t: {(mean, variance): probability}, where
    ``act(cell)`` lists (probability, action) pairs."""
    law: dict[tuple[float, float], float] = {}
    frontier = {(start, 0.0): 1.0}
    for t in range(STEPS):
        variance = REWARD_STD ** 2 * sum(GAMMA ** (2 * u) for u in range(t + 1))
        following: dict = {}
        for (cell, mean), prob in frontier.items():
            choices = [(1.0, first_action)] if t == 0 and first_action is not None else act(cell)
            for p_action, action in choices:
                for out in world.outcomes(cell, action):
                    for p_reward, reward in out.reward_components:
                        p = prob * p_action * out.probability * p_reward
                        value = mean + GAMMA ** t * reward
                        if out.terminal or t + 1 == STEPS:
                            key = (round(value, 13), variance)
                            law[key] = law.get(key, 0.0) + p
                        else:
                            key = (out.next_cell, round(value, 13))
                            following[key] = following.get(key, 0.0) + p
        frontier = following
    return law


def mixture_utility(law, utility: Utility) -> float:
    weights = np.array(list(law.values()))
    means = np.array([m for m, _ in law])
    sigmas = np.sqrt(np.array([v for _, v in law]))
    expectation = float(weights @ means)
    if utility.alpha == 1.0:
        return expectation
    rho = float(utility.params["rho"])
    low, high = means.min() - 20 * sigmas.max(), means.max() + 20 * sigmas.max()
    for _ in range(200):  # F(v) = rho
        middle = 0.5 * (low + high)
        if weights @ norm.cdf((middle - means) / sigmas) < rho:
            low = middle
        else:
            high = middle
    var = 0.5 * (low + high)
    z = (var - means) / sigmas
    cvar = float(weights @ (means * norm.cdf(z) - sigmas * norm.pdf(z))) / rho
    risk = var if utility.risk == "var" else cvar
    return utility.alpha * expectation + (1.0 - utility.alpha) * risk


def behaviours(world: TwoStage):
    """Every deterministic cell-Markov behaviour from the start: actions only on the cells
    an episode can reach before its last step."""
    found = []

    def reached(policy):
        cells, frontier = set(), {START}
        for _ in range(STEPS):
            cells |= frontier
            following = set()
            for cell in frontier:
                if cell not in policy:
                    return cell
                for out in world.outcomes(cell, policy[cell]):
                    if not out.terminal:
                        following.add(out.next_cell)
            frontier = following
        return None

    def explore(policy):
        missing = reached(policy)
        if missing is None:
            found.append(dict(policy))
            return
        for action in range(4):
            explore({**policy, missing: action})

    explore({})
    return found


@pytest.fixture(scope="module")
def world():
    return TwoStage(max_steps=STEPS)


@pytest.mark.parametrize("utility", UTILITIES, ids=lambda u: f"{u.risk}-{u.alpha:g}")
def test_per_decision_fixed_point_is_greedy_and_its_utility_exact(world, utility):
    fixed_point = exact_policies.per_decision_fixed_point(world, utility, gamma=GAMMA)
    assert fixed_point.converged if hasattr(fixed_point, "converged") else not fixed_point.cycle
    policy = fixed_point.policy
    own = mixture_utility(mixture_law(world, lambda c: [(1.0, policy[c])]), utility)
    assert fixed_point.discounted.utility == pytest.approx(own, abs=EXACT)
    for cell in policy:
        if cell in world.goals:
            continue
        values = [mixture_utility(mixture_law(world, lambda c: [(1.0, policy[c])], cell, a),
                                  utility) for a in range(4)]
        assert values[policy[cell]] >= max(values) - EXACT, (cell, values)


@pytest.mark.parametrize("utility", UTILITIES, ids=lambda u: f"{u.risk}-{u.alpha:g}")
def test_static_optimum_is_the_best_behaviour(world, utility):
    every = behaviours(world)
    best = max(mixture_utility(mixture_law(world, lambda c, p=p: [(1.0, p[c])]), utility)
               for p in every)
    found = exact_policies.static_optimum(world, utility, gamma=GAMMA)
    assert found.utility == pytest.approx(best, abs=EXACT)
    assert found.policies_searched == len(every)


@pytest.mark.parametrize("utility", UTILITIES, ids=lambda u: f"{u.risk}-{u.alpha:g}")
def test_uniform_random_utility_is_exact(utility):
    env = OmegaConf.load(CONF_DIR / "env" / "two_stage.yaml")
    references = exact_references(env, float(utility.params.get("rho", 0.1)))
    law = mixture_law(TwoStage(max_steps=STEPS), lambda c: [(0.25, a) for a in range(4)])
    assert math.isclose(references.uniform_random_utility(utility),
                        mixture_utility(law, utility), abs_tol=EXACT)
