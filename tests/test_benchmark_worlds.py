"""The finite-horizon tabular worlds (envs/trading.py, envs/american_put.py): their models
against hand-computed cases and against simulation, the exact-reference engine
(references/tabular_references.py) against brute force over every policy of small
instances of every tabular world, and the presets' exact references and runs."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest

import rs_lightning.envs  # noqa: F401  (registers the rs_lightning/ environments)
from rs_lightning.envs.american_put import EXERCISE, HOLD, AmericanPut
from rs_lightning.envs.trading import Trading
from rs_lightning.references import tabular_references as tr
from rs_lightning.risk import Utility
from tests.conftest import play_tabular_policy
from tests.test_gym_envs import preset

RHO = 0.1
LEVEL_TOLERANCE = 1e-6  # as the risk module's VaR (risk/measures.py)


# ----------------------------------------------------------------- brute force


def lower_quantile(values: np.ndarray, weights: np.ndarray, rho: float) -> np.ndarray:
    """VaR_rho of laws ``weights[P, n]`` on the sorted ``values[n]`` -> ``[P]``."""
    cumulative = weights.cumsum(1)
    return values[(cumulative < rho - LEVEL_TOLERANCE).sum(1)]


def lower_tail_mean(values: np.ndarray, weights: np.ndarray, rho: float) -> np.ndarray:
    """CVaR_rho, the mean of the worst rho of each law -> ``[P]``."""
    cumulative = weights.cumsum(1)
    tail = np.clip(np.minimum(cumulative, rho) - (cumulative - weights), 0.0, None)
    return tail @ values / rho


def utilities(values: np.ndarray, weights: np.ndarray, utility: Utility) -> np.ndarray:
    """U = alpha E + (1 - alpha) R of laws ``weights[P, n]`` on ``values[n]`` (any order)."""
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[:, order]
    out = utility.alpha * (weights @ values)
    if utility.alpha < 1.0 and utility.risk == "spectral":
        levels, shares = utility.params["levels"], utility.params["weights"]
        risk = sum(w * lower_tail_mean(values, weights, rho) for rho, w in zip(levels, shares))
        out = out + (1.0 - utility.alpha) * risk
    elif utility.alpha < 1.0:
        rho = float(utility.params["rho"])
        risk = (lower_quantile if utility.risk == "var" else lower_tail_mean)(values, weights, rho)
        out = out + (1.0 - utility.alpha) * risk
    return out


@dataclass
class DecisionTree:
    """Every path of an episode from the start: the decisions it takes (node index, action),
    its probability and its discounted return. A policy of the nodes follows a path iff it
    takes all of the path's decisions."""

    nodes: list
    decisions: list[tuple[tuple[int, int], ...]]
    probs: np.ndarray
    returns: np.ndarray
    n_actions: int

    def policies(self) -> np.ndarray:
        """Every deterministic policy of the nodes -> ``[n_actions ** nodes, nodes]``."""
        return np.array(list(itertools.product(range(self.n_actions), repeat=len(self.nodes))),
                        dtype=np.int64).reshape(-1, len(self.nodes))

    def laws(self, policies: np.ndarray) -> np.ndarray:
        """Each policy's law on the paths: ``weights[P, paths]``."""
        followed = np.ones((len(policies), len(self.decisions)), dtype=bool)
        for j, path in enumerate(self.decisions):
            for node, action in path:
                followed[:, j] &= policies[:, node] == action
        return followed * self.probs


def decision_tree(transitions, start: int, horizon: int, gamma: float, history: bool
                  ) -> DecisionTree:
    """The decision tree of an episode of at most ``horizon`` steps from ``start``; a node is
    (step, state, return so far) with ``history`` (what the static optimum's policies see),
    else (step, state)."""
    n_actions = len(transitions[start])
    nodes: dict = {}
    decisions, probs, returns = [], [], []

    def walk(state, t, so_far, discount, prob, taken):
        if t == horizon:  # the time limit
            decisions.append(taken), probs.append(prob), returns.append(so_far)
            return
        key = (t, state, round(so_far, 9)) if history else (t, state)
        node = nodes.setdefault(key, len(nodes))
        for action in range(n_actions):
            for p, next_state, reward, terminated in transitions[state][action]:
                if p == 0:
                    continue
                step = (*taken, (node, action))
                value = so_far + discount * reward
                if terminated:
                    decisions.append(step), probs.append(prob * p), returns.append(value)
                else:
                    walk(next_state, t + 1, value, discount * gamma, prob * p, step)

    walk(start, 0, 0.0, 1.0, 1.0, ())
    return DecisionTree(list(nodes), decisions, np.array(probs), np.array(returns), n_actions)


def policy_law(transitions, policy, state: int, first_action: int, gamma: float,
               horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """The law of the discounted return of ``first_action`` in ``state`` and ``policy[s]``
    after, by enumerating the trajectories (``horizon`` steps at most) -> values, probs."""
    values, probs = [], []

    def walk(s, action, t, so_far, discount, prob):
        for p, next_state, reward, terminated in transitions[s][action]:
            if p == 0:
                continue
            value = so_far + discount * reward
            if terminated or t + 1 == horizon:
                values.append(value), probs.append(prob * p)
            else:
                walk(next_state, int(policy[next_state]), t + 1, value, discount * gamma, prob * p)

    walk(state, first_action, 0, 0.0, 1.0, 1.0)
    return np.array(values), np.array(probs)


def law_utility(values, probs, utility: Utility) -> float:
    return float(utilities(values, probs[None, :], utility)[0])


def tree_optimum(transitions, start: int, horizon: int, gamma: float, leaf) -> np.ndarray:
    """max over the policies of the full decision tree (every history its own node) of
    E[leaf(S)], S the episode's discounted return, for a ``leaf`` that maps S to an array
    (one value per setting: each setting gets its own best policy), by backward induction
    on the tree (exact for an expected utility)."""
    n_actions = len(transitions[start])

    def node(state, t, so_far, discount):
        best = None
        for action in range(n_actions):
            total = 0.0
            for p, next_state, reward, terminated in transitions[state][action]:
                if p == 0:
                    continue
                value = so_far + discount * reward
                if terminated or t + 1 == horizon:
                    total = total + p * leaf(value)
                else:
                    total = total + p * node(next_state, t + 1, value, discount * gamma)
            best = total if best is None else np.maximum(best, total)
        return best

    return node(start, 0, 0.0, 1.0)


def tree_static_optima(transitions, start: int, horizon: int, gamma: float, rho: float
                       ) -> dict[str, float]:
    """The static optima over every history-dependent policy, exactly, where an expected
    utility gives them: E; alpha E + (1 - alpha) CVaR_rho = max_b (1 - alpha) b +
    E[alpha S - kappa (b - S)^+] (kappa = (1 - alpha) / rho), the best b one of the
    episode's returns; VaR_rho >= y iff P(S < y) < rho, so the best VaR_rho is the largest
    return y whose least P(S < y) is below rho."""
    returns = np.unique(np.round(decision_tree(transitions, start, horizon, gamma, True).returns,
                                 12))
    out = {"E": float(tree_optimum(transitions, start, horizon, gamma, lambda s: s))}
    for alpha in (0.0, 0.5):
        kappa = (1.0 - alpha) / rho
        values = (1.0 - alpha) * returns + tree_optimum(
            transitions, start, horizon, gamma,
            lambda s, alpha=alpha, kappa=kappa: alpha * s - kappa * np.maximum(returns - s, 0.0))
        out[f"CVaR a={alpha:g}"] = float(values.max())
    least_short = -tree_optimum(transitions, start, horizon, gamma,
                                lambda s: -(s < returns - 1e-9).astype(float))
    out["VaR a=0"] = float(returns[least_short < rho - LEVEL_TOLERANCE].max())
    return out


# ----------------------------------------------------------------- the small instances

GAMMA = 0.99
RISK_KEYS = ("E", "CVaR a=0", "CVaR a=0.5", "VaR a=0", "VaR a=0.5")


def utility_of(key: str, rho: float) -> Utility:
    if key == "E":
        return Utility(1.0)
    risk, alpha = key.split(" a=")
    return Utility(float(alpha), risk.lower(), {"rho": rho})


@dataclass
class Instance:
    name: str
    env: gym.Env
    horizon: int
    rho: float
    # Whether every deterministic policy of the decision tree can be listed (policies of
    # (step, state, return so far), at most about 10^5 of them): then VaR with alpha 0.5,
    # which has no dynamic programme, is checked too.
    listed: bool

    @property
    def transitions(self):
        return self.env.unwrapped.P

    @property
    def start(self) -> int:
        return int(np.argmax(self.env.unwrapped.initial_state_distrib))

    def model(self) -> tr.TabularModel:
        return tr.tabular_model(self.env, horizon=self.horizon)


def cliff_next_to_the_goal() -> gym.Env:
    """gymnasium's cliff walking (slipping 0.2, falls -5) started two cells left of the goal
    over the cliff, three steps: right then down reaches the goal in two steps but risks a
    slip into the cliff (0.1), up, right and down is safe and takes the three."""
    from rs_lightning.envs.cliff_walking import state_of

    env = gym.make("rs_lightning/SlipperyCliffWalking-v0", slip_probability=0.2, cliff_reward=-5)
    start = np.zeros(env.observation_space.n)
    start[state_of(2, 10)] = 1.0
    env.unwrapped.initial_state_distrib = start
    return env


def small_instances() -> list[Instance]:
    return [
        # Two periods: the state after the first (price, position) tells the return so far.
        # Selling the long at once costs 0.5; the CVaR_0.1-optimal policy keeps it (-0.41).
        Instance("trading", Trading(periods=2, price_levels=3, reversion=1.5, volatility=0.5,
                                    cost=0.5), 2, 0.1, listed=True),
        # Three periods: the return so far is no longer a function of the state.
        Instance("trading_3", Trading(periods=3, price_levels=3, reversion=1.5, volatility=0.5,
                                      cost=0.5), 3, 0.1, listed=False),
        # The put pays only when the episode ends: the return so far is always 0. Falling
        # prices (up 0.3): E-optimal E 2.32, CVaR_0.25 0.65; CVaR_0.25-optimal 1.68, 1.06.
        Instance("american_put", AmericanPut(periods=4, strike=11.0, up_probability=0.3), 4,
                 0.25, listed=True),
        Instance("cliff_walking", cliff_next_to_the_goal(), 3, 0.1, listed=False),
        # gymnasium's FrozenLake on a 2 x 2 map, slippery, three steps (rho 0.5: the goal is
        # missed more often than 10 %).
        Instance("frozen_lake", gym.make("FrozenLake-v1", desc=["SF", "HG"], is_slippery=True),
                 3, 0.5, listed=True),
    ]


INSTANCES = {instance.name: instance for instance in small_instances()}


@pytest.fixture(scope="module")
def brute_force():
    """For every small instance, the static optima over every deterministic policy of its
    decision tree: by the exact tree programme (E, CVaR at alpha 0 and 0.5, VaR at alpha 0)
    and, where they can be listed, by evaluating every policy of the (step, state, return so
    far) nodes (``listed``, with VaR at alpha 0.5 too)."""
    out = {}
    for name, instance in INSTANCES.items():
        args = (instance.transitions, instance.start, instance.horizon, GAMMA)
        found = {"tree": tree_static_optima(*args, instance.rho)}
        if instance.listed:
            tree = decision_tree(*args, history=True)
            weights = tree.laws(tree.policies())
            found["listed"] = {key: float(utilities(tree.returns, weights,
                                                    utility_of(key, instance.rho)).max())
                               for key in RISK_KEYS}
            found["policies"] = len(weights)
        out[name] = found
    return out


def test_listing_every_policy_and_the_tree_programme_agree(brute_force):
    assert {name: found.get("policies") for name, found in brute_force.items()} == {
        "trading": 3 ** 10, "trading_3": None, "american_put": 2 ** 10,
        "cliff_walking": None, "frozen_lake": 4 ** 5}
    for name, found in brute_force.items():
        if "listed" in found:
            for key, value in found["tree"].items():
                assert found["listed"][key] == pytest.approx(value, abs=1e-9), (name, key)


def test_the_small_instances_tell_the_objectives_apart(brute_force):
    """The small instances are not degenerate: on the trading one the CVaR_0.1 optimum keeps
    a risky position (a sure sale gets -0.5), on the put the CVaR_0.25 optimum beats a sure
    exercise (1) and is not the expectation's, and on cliff walking the expectation takes
    the short cut along the cliff that CVaR_0.1 and VaR_0.1 avoid."""
    trading = brute_force["trading"]["tree"]
    assert trading["CVaR a=0"] == pytest.approx(-0.410, abs=1e-3)  # above selling's -0.5
    put = brute_force["american_put"]["tree"]
    assert put["CVaR a=0"] == pytest.approx(1.061, abs=1e-3) and put["E"] > 2.3
    cliff = brute_force["cliff_walking"]["tree"]
    safe = -(1 + GAMMA + GAMMA ** 2)
    assert cliff["E"] == pytest.approx(-2.743, abs=1e-3)  # the short cut, falls and all
    assert cliff["CVaR a=0"] == pytest.approx(safe) == cliff["VaR a=0"]


@pytest.mark.parametrize("name", ["trading", "american_put", "frozen_lake"])
def test_policies_of_the_state_see_the_whole_history_on_the_listed_instances(name):
    """There the (step, state) nodes and the (step, state, return so far) nodes are the
    same: the time-folded state's policies reach the static optimum."""
    instance = INSTANCES[name]
    args = (instance.transitions, instance.start, instance.horizon, GAMMA)
    assert len(decision_tree(*args, history=True).nodes) == len(
        decision_tree(*args, history=False).nodes)


def threshold_step(model: tr.TabularModel, points: int, returns: np.ndarray) -> float:
    """The widest spacing of the static programmes' threshold grid over the episode's
    returns (where the optimal threshold b lies)."""
    low, high = tr.return_bounds(model, GAMMA)
    start_value, _ = tr.optimal_expectation(model, GAMMA)
    ys = tr.threshold_grid(low, high, start_value, points)
    inside = ys[(ys >= returns.min() - 1e-9) & (ys <= returns.max() + 1e-9)]
    edges = np.concatenate([ys[ys < returns.min()][-1:], inside, ys[ys > returns.max()][:1]])
    return float(np.diff(edges).max())


@pytest.mark.parametrize("name", list(INSTANCES))
def test_static_optimum_is_the_best_policy_of_the_decision_tree(brute_force, name):
    """The engine's static optima against the brute force: E exactly; CVaR within a step of
    its threshold grid (about 0.005 here) times the utility's slope in the threshold,
    (1 - alpha) + kappa (the optimum's b and the thresholds the programme interpolates
    between lie on that grid); VaR's two bounds within its grid's step (about 0.02)."""
    instance = INSTANCES[name]
    model = instance.model()
    found = brute_force[name]
    best = {**found["tree"], **found.get("listed", {})}
    returns = decision_tree(instance.transitions, instance.start, instance.horizon, GAMMA,
                            history=True).returns
    assert tr.static_optimum(model, Utility(1.0), GAMMA).utility == pytest.approx(
        best["E"], abs=1e-9)
    step = threshold_step(model, tr.THRESHOLDS, returns)
    for key in ("CVaR a=0", "CVaR a=0.5"):
        utility = utility_of(key, instance.rho)
        slope = (1.0 - utility.alpha) * (1.0 + 1.0 / instance.rho)
        engine = tr.static_optimum(model, utility, GAMMA).utility
        assert abs(engine - best[key]) <= slope * step, (key, engine, best[key], slope * step)
    step = threshold_step(model, tr.VAR_THRESHOLDS, returns)
    for key in ("VaR a=0", "VaR a=0.5"):
        if key not in best:
            continue
        bounds = tr.static_optimum(model, utility_of(key, instance.rho), GAMMA)
        slack = step
        assert best[key] - slack <= bounds.utility <= best[key] + 1e-9, (key, bounds, best[key])
        assert bounds.upper >= best[key] - slack, (key, bounds, best[key])
        if key == "VaR a=0" and not tr.is_bounded(model, utility_of(key, instance.rho)):
            assert bounds.upper == pytest.approx(bounds.utility, abs=1e-9)  # the bounds meet
        elif key == "VaR a=0":  # a sound interval (tabular_bounds) about the best policy
            assert bounds.utility <= best[key] + 1e-9 <= bounds.upper + 2e-9
            assert bounds.upper - bounds.utility <= step


def spectral_of(instance: Instance, alpha: float) -> Utility:
    """Half CVaR at half the instance's level, half CVaR at its level."""
    return Utility(alpha, "spectral", {"levels": (instance.rho / 2, instance.rho),
                                       "weights": (0.5, 0.5)})


def tree_static_spectral_optimum(instance: Instance, utility: Utility) -> float:
    """max over every history-dependent policy of alpha E + (1 - alpha) sum_i w_i CVaR_rho_i,
    exactly: max over b_1 <= b_2, each one of the episode's returns, of (1 - alpha)
    sum_i w_i b_i + max_pi E[alpha S - sum_i kappa_i (b_i - S)^+] (kappa_i = (1 - alpha)
    w_i / rho_i), the inner maximum by backward induction on the tree."""
    args = (instance.transitions, instance.start, instance.horizon, GAMMA)
    returns = np.unique(np.round(decision_tree(*args, history=True).returns, 12))
    first, second = np.triu_indices(len(returns))
    b = np.stack([returns[first], returns[second]])  # [2, pairs], b_1 <= b_2
    levels = np.array(utility.params["levels"])[:, None]
    shares = np.array(utility.params["weights"])[:, None]
    kappa = (1.0 - utility.alpha) * shares / levels
    inner = tree_optimum(*args, lambda s: utility.alpha * s - (
        kappa * np.maximum(b - s, 0.0)).sum(0))
    return float(((1.0 - utility.alpha) * (shares * b).sum(0) + inner).max())


@pytest.mark.parametrize("name", list(INSTANCES))
@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_static_spectral_optimum_is_the_best_policy_of_the_decision_tree(brute_force, name,
                                                                         alpha):
    """The engine's static spectral optimum (two thresholds: the offset searched, the upper
    one on the grid) against the tree's exact one; where every policy can be listed, that
    too. Within the threshold grid's step times the utility's slope in the thresholds,
    (1 - alpha) (1 + sum_i w_i / rho_i), and never above the optimum by more."""
    instance = INSTANCES[name]
    utility = spectral_of(instance, alpha)
    best = tree_static_spectral_optimum(instance, utility)
    if "policies" in brute_force[name]:
        tree = decision_tree(instance.transitions, instance.start, instance.horizon, GAMMA,
                             history=True)
        listed = utilities(tree.returns, tree.laws(tree.policies()), utility).max()
        assert listed == pytest.approx(best, abs=1e-9)
    returns = decision_tree(instance.transitions, instance.start, instance.horizon, GAMMA,
                            history=True).returns
    step = threshold_step(instance.model(), tr.SPECTRAL_THRESHOLDS, returns)
    slope = (1.0 - alpha) * (1.0 + 0.5 / (instance.rho / 2) + 0.5 / instance.rho)
    engine = tr.static_optimum(instance.model(), utility, GAMMA).utility
    assert best - slope * step <= engine <= best + slope * step, (engine, best, slope * step)


@pytest.mark.parametrize("name", ["trading", "american_put"])
@pytest.mark.parametrize("key", RISK_KEYS)
def test_per_decision_fixed_point_is_greedy_on_its_enumerated_laws(name, key):
    """On the time-folded worlds every episode ends within the horizon, so the learner's
    laws Z^pi(s, a) are finite: enumerate them and check that the engine's fixed point takes,
    in every reachable state, an action within the grid's error of the best."""
    instance = INSTANCES[name]
    model, utility = instance.model(), utility_of(key, instance.rho)
    grid = tr.model_grid(model, GAMMA)
    fixed_point = tr.per_decision_fixed_point(model, utility, GAMMA, grid=grid)
    assert fixed_point.converged
    policy = np.array(fixed_point.policy)
    risk = "expectation" if utility.alpha == 1.0 else utility.risk
    bound = (1.0 - utility.alpha) * tr.grid_error_bounds(grid, GAMMA, instance.rho,
                                                         instance.horizon)[risk]
    tree = decision_tree(instance.transitions, instance.start, instance.horizon, GAMMA, False)
    for t, state in tree.nodes:
        left = instance.horizon - t
        values = [law_utility(*policy_law(instance.transitions, policy, state, a, GAMMA, left),
                              utility) for a in range(model.n_actions)]
        assert values[policy[state]] >= max(values) - 2 * bound - 1e-9, (t, state, values)
    own = law_utility(*policy_law(instance.transitions, policy, instance.start,
                                  int(policy[instance.start]), GAMMA, instance.horizon), utility)
    assert fixed_point.static_utility == pytest.approx(own, abs=bound + 1e-9)
    if key == "E":
        best, _ = tr.optimal_expectation(model, GAMMA)
        assert own == pytest.approx(best, abs=1e-9)


# ----------------------------------------------------------------- the models


@pytest.mark.parametrize("env", [Trading(), AmericanPut(), Trading(periods=3, price_levels=7),
                                 AmericanPut(periods=3, up_probability=0.3)],
                         ids=["trading", "american_put", "trading_small", "put_small"])
def test_every_outcome_list_is_a_law_and_leads_into_the_state_space(env):
    n = env.observation_space.n
    assert sorted(env.P) == list(range(n)) and env.initial_state_distrib.sum() == 1.0
    for s in range(n):
        assert sorted(env.P[s]) == list(range(env.action_space.n))
        for outcomes in env.P[s].values():
            assert sum(p for p, *_ in outcomes) == pytest.approx(1.0, abs=1e-12)
            assert all(0 <= s2 < n for _, s2, _, _ in outcomes)
    assert n <= tr.MAX_STATES


def test_trading_rewards_and_probabilities_by_hand():
    env = Trading()  # the preset: 5 periods, 5 prices, positions -1 0 1, cost 0.5
    start = int(np.argmax(env.initial_state_distrib))
    assert env.decode(start) == (0, 2, 2)  # period 0, the mean price, long one unit
    std = math.sqrt((1 - math.exp(-1.0)) / 1.0)  # sigma^2 (1 - e^-2theta) / (2 theta)

    def phi(z):
        return 0.5 * (1 + math.erf(z / math.sqrt(2)))

    # Sell the long and go short (2 units traded: cost 1.0); the price rises one tick.
    outcomes = {s2: (p, r, done) for p, s2, r, done in env.P[start][0]}
    p, r, done = outcomes[env.encode(1, 3, 0)]
    assert p == pytest.approx(phi(1.5 / std) - phi(0.5 / std), abs=1e-12)  # 0.235
    assert r == pytest.approx(-1.0 * 1.0 - 0.5 * 2) and not done
    # The lattice reverts to the mean as the process does, e^-theta of the deviation kept a
    # period: within 0.01 tick one tick from the mean; at the ends, whose cells take the
    # Gaussian's tail, a little faster (2 ticks below: 0.842 back up rather than 0.787).
    expected = env.price_transitions @ env.offsets
    assert expected[1:4] == pytest.approx(math.exp(-0.5) * env.offsets[1:4], abs=0.01)
    assert expected[0] - env.offsets[0] == pytest.approx(0.842, abs=1e-3)
    # The last period ends the episode; its rows end again with 0.
    last = env.encode(4, 1, 1)
    assert all(done for *_, done in env.P[last][2])
    p, r, done = {s2: (p, r, d) for p, s2, r, d in env.P[last][2]}[env.encode(5, 0, 2)]
    assert r == pytest.approx(1 * (-1.0) - 0.5) and done
    assert env.P[env.encode(5, 0, 2)][1] == [(1.0, env.encode(5, 0, 2), 0.0, True)]


def test_american_put_rewards_by_hand():
    env = AmericanPut()  # the preset: 8 periods, price 10, strike 11, up 1.1
    assert env.P[0][EXERCISE] == [(1.0, 0, pytest.approx(1.0), True)]
    down = env.encode(1, 0)
    assert env.P[0][HOLD] == [(0.5, env.encode(1, 1), 0.0, False), (0.5, down, 0.0, False)]
    assert env.P[down][EXERCISE][0][2] == pytest.approx(11 - 10 / 1.1)
    # The last hold pays at maturity: 7 periods in, 3 up moves (price 10 / 1.1) -> 4 or 3 ups.
    node = env.encode(7, 3)
    assert env.P[node][HOLD] == [
        (0.5, env.encode(8, 4), 1.0, True),  # back to 10: 11 - 10
        (0.5, env.encode(8, 3), pytest.approx(11 - 10 / 1.1 ** 2), True)]
    assert env.P[env.encode(8, 8)][HOLD][0][2] == 0.0  # out of the money: nothing
    for s in range(env.observation_space.n):
        assert env.encode(*env.decode(s)) == s


def simulate(env_id: str, kwargs: dict, policy, episodes: int, seed: int = 0):
    returns, outcomes = play_tabular_policy(gym.make(env_id, **kwargs), policy, episodes,
                                            GAMMA, seed)
    return returns, np.array(outcomes, dtype=float)


@pytest.mark.parametrize("name, env_id", [("trading", "rs_lightning/Trading-v0"),
                                          ("american_put", "rs_lightning/AmericanPut-v0")])
def test_simulated_episodes_follow_the_exact_law(name, env_id):
    """Episodes of the registered environment, stepped with seeded generators, against the
    enumerated law of the expectation-optimal policy: the mean and the whole CDF (DKW)."""
    kwargs = dict(preset(name).kwargs)
    env = gym.make(env_id, **kwargs)
    model = tr.tabular_model(env, horizon=kwargs["periods"])
    policy = tr.expectation_optimal_policy(model, GAMMA)
    start = int(np.argmax(model.start))
    values, probs = policy_law(env.unwrapped.P, policy, start, int(policy[start]), GAMMA,
                               kwargs["periods"])
    episodes = 2000
    returns, outcomes = simulate(env_id, kwargs, policy, episodes)
    mean = float(values @ probs)
    std = math.sqrt(float(((values - mean) ** 2) @ probs))
    assert abs(returns.mean() - mean) < 4.5 * std / math.sqrt(episodes)
    points = np.unique(values)
    exact_cdf = np.array([probs[values <= z + 1e-9].sum() for z in points])
    empirical = np.array([(returns <= z + 1e-9).mean() for z in points])
    eps = math.sqrt(math.log(2 / 1e-4) / (2 * episodes))
    assert np.abs(exact_cdf - empirical).max() < eps
    # The risk outcome is the sign of the episode's result (undiscounted; a put's payoff
    # is its only reward, so its sign is the discounted return's).
    assert set(np.unique(outcomes)) <= {-1.0, 0.0, 1.0}
    if name == "american_put":
        assert np.array_equal(outcomes, np.where(returns > 0, 1.0, -1.0))


# ----------------------------------------------------------------- the presets' references


@pytest.fixture(scope="module")
def preset_references():
    """E- and CVaR_0.1-optimal (alpha 0) policies of both presets, by the exact engine."""
    out = {}
    for name in ("trading", "american_put"):
        section = preset(name)
        kwargs = dict(section.kwargs)
        env = gym.make(section.id, **kwargs)
        model = tr.tabular_model(env, horizon=kwargs["periods"])
        assert model is not None and model.n_states <= tr.MAX_STATES
        grid = tr.model_grid(model, section.gamma)
        cvar = Utility(0.0, "cvar", {"rho": RHO})
        # The CVaR policy: the per-decision fixed point, found on a coarser grid (faster; the
        # policy's figures below are on the references' grid).
        coarse = tr.model_grid(model, section.gamma, 501)
        fixed_point = tr.per_decision_fixed_point(model, cvar, section.gamma, grid=coarse)
        assert fixed_point.converged
        rows = {}
        for key, utility, policy in (
                ("E", Utility(1.0), tr.expectation_optimal_policy(model, section.gamma)),
                ("CVaR", cvar, np.array(fixed_point.policy))):
            rows[key] = {
                "policy": policy,
                "first_action": int(policy[int(np.argmax(model.start))]),
                "E": tr.static_utility(model, policy, Utility(1.0), section.gamma, grid),
                "CVaR": tr.static_utility(model, policy, cvar, section.gamma, grid),
                "optimum": tr.static_optimum(model, utility, section.gamma).utility,
            }
        out[name] = (rows, grid, section.gamma)
    return out


def test_trading_expectation_keeps_the_long_and_cvar_sells_it(preset_references):
    rows, grid, gamma = preset_references["trading"]
    bound = tr.grid_error_bounds(grid, gamma, RHO, 5)["cvar"]
    positions = Trading().positions
    assert positions[rows["E"]["first_action"]] == 1  # keeps the long
    assert positions[rows["CVaR"]["first_action"]] == 0  # sells it at once
    assert rows["E"]["E"] == pytest.approx(0.4314, abs=1e-4) == rows["E"]["optimum"]
    assert rows["E"]["CVaR"] == pytest.approx(-1.451, abs=bound)
    # Flat after paying 0.5 for the sale: -0.5 for sure, the static CVaR optimum.
    assert rows["CVaR"]["E"] == pytest.approx(-0.5, abs=1e-9)
    assert rows["CVaR"]["CVaR"] == pytest.approx(-0.5, abs=bound)
    assert rows["CVaR"]["optimum"] == pytest.approx(-0.5, abs=0.02)
    assert rows["CVaR"]["CVaR"] > rows["E"]["CVaR"] + 0.9


def test_american_put_expectation_waits_and_cvar_exercises_at_once(preset_references):
    rows, grid, gamma = preset_references["american_put"]
    bound = tr.grid_error_bounds(grid, gamma, RHO, 8)["cvar"]
    assert rows["E"]["first_action"] == HOLD and rows["CVaR"]["first_action"] == EXERCISE
    assert rows["E"]["E"] == pytest.approx(1.4965, abs=1e-4) == rows["E"]["optimum"]
    assert rows["E"]["CVaR"] == pytest.approx(0.0, abs=bound)  # often expires worthless
    assert rows["CVaR"]["E"] == pytest.approx(1.0, abs=1e-9)  # 11 - 10 now, for sure
    assert rows["CVaR"]["optimum"] == pytest.approx(1.0, abs=0.01)
    # The expectation-optimal rule exercises only deep in the money: after 2 periods at
    # the lowest node (10 / 1.21), not one up move above it.
    put = AmericanPut()
    policy = rows["E"]["policy"]
    assert policy[put.encode(2, 0)] == EXERCISE and policy[put.encode(2, 1)] == HOLD


# One quick run a preset: the put with the defaults (the UMNN agent; alpha 0.5 and VaR_0.1:
# bounds on the static optimum), trading with DQN and CVaR_0.1 (whose references take a
# third of the time of VaR's on its 90 states).
@pytest.mark.parametrize("name, overrides", [("trading", ["agent=dqn", "risk=cvar"]),
                                             ("american_put", [])])
def test_a_quick_run_of_the_preset_writes_its_exact_references(compose, tmp_path, name,
                                                               overrides):
    from rs_lightning.app.train import run

    run_dir = tmp_path / name
    risk = "cvar" if "risk=cvar" in overrides else "var"
    run(compose([f"env={name}", *overrides, "debug=quick", "logger=none",
                 "callbacks.progress_bar=false", "trainer.max_steps=60",
                 "evaluation.every_n_steps=0", "evaluation.episodes=20"]), run_dir=run_dir)
    summary = json.loads((run_dir / "eval.json").read_text())
    assert summary["episodes"] == 20 and np.isfinite(summary["per_decision_static_utility"])
    assert summary["exact_static_utility"] <= summary["static_optimum"] + 1e-9
    if risk == "var":
        assert summary["static_optimum"] <= summary["static_optimum_upper"] + 1e-9
    assert summary["risk_outcome"] == pytest.approx(
        summary["risk_outcome_green"] - summary["risk_outcome_orange"])


def test_copies_of_a_setting_share_its_model_and_another_setting_has_its_own():
    """An evaluation makes 1,000 copies of a world: they share the model of their setting,
    built once and equal to the one built anew, and another setting has its own."""
    from rs_lightning.envs.cliff_walking import SlipperyCliffWalking
    from rs_lightning.envs.finite_horizon import PublishedModelEnv

    worlds = ((Trading, lambda: Trading(cost=0.25)),
              (AmericanPut, lambda: AmericanPut(strike=12.0)),
              (SlipperyCliffWalking, lambda: SlipperyCliffWalking(0.2)))
    shared = {make: (make(), make()) for make, _ in worlds}
    for make, other in worlds:
        first, second = shared[make]
        if make is SlipperyCliffWalking:  # gymnasium's constructor fills P from the table
            assert first.P == second.P and first.falls == second.falls
        else:
            assert first.P is second.P, make.__name__
        assert other().P != first.P, make.__name__
    PublishedModelEnv._models.clear()
    SlipperyCliffWalking._outcomes.clear()
    for make, _ in worlds:  # built anew
        assert make().P == shared[make][0].P, make.__name__


def test_the_worlds_draw_their_outcomes_as_gymnasium_does():
    """``sample_outcome`` (the published-model worlds' and cliff walking's draw) picks the
    outcome gymnasium's ``categorical_sample`` picks from the same generator state, for laws
    of one to five outcomes, whose sums may round below one (then the first outcome)."""
    from gymnasium.envs.toy_text.utils import categorical_sample

    from rs_lightning.envs.finite_horizon import sample_outcome

    laws = np.random.default_rng(0)
    for _ in range(2000):
        probabilities = laws.dirichlet(np.ones(laws.integers(1, 6)))
        if laws.random() < 0.2:
            probabilities = probabilities * (1.0 - 1e-12)  # sums short of one
        outcomes = [(float(p), i, 0.0, False) for i, p in enumerate(probabilities)]
        seed = int(laws.integers(2**31))
        ours, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
        for _ in range(5):
            assert sample_outcome(outcomes, ours) == categorical_sample(probabilities, theirs)
    # A uniform at or above every cumulative probability gives the first outcome, as argmax.
    class Fixed:
        def random(self):
            return 0.9999999999999

    short = [(0.5, 0, 0.0, False), (0.4999999, 1, 0.0, False)]
    assert sample_outcome(short, Fixed()) == categorical_sample([0.5, 0.4999999], Fixed()) == 0
