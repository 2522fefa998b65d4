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
    if utility.alpha < 1.0:
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


# ----------------------------------------------------------------- the small instances

GAMMA = 0.99
UTILITIES = {
    "E": Utility(1.0),
    "CVaR a=0": Utility(0.0, "cvar", {"rho": RHO}),
    "CVaR a=0.5": Utility(0.5, "cvar", {"rho": RHO}),
    "VaR a=0": Utility(0.0, "var", {"rho": RHO}),
    "VaR a=0.5": Utility(0.5, "var", {"rho": RHO}),
}


@dataclass
class Instance:
    name: str
    env: gym.Env
    horizon: int
    # True where a policy of the time-folded state sees all a policy of (state, step,
    # return so far) does, so that brute force over the former gives the static optimum.
    markov_is_enough: bool

    @property
    def transitions(self):
        return self.env.unwrapped.P

    @property
    def start(self) -> int:
        return int(np.argmax(self.env.unwrapped.initial_state_distrib))

    def model(self) -> tr.TabularModel:
        return tr.tabular_model(self.env, horizon=self.horizon)


def small_instances() -> list[Instance]:
    return [
        # Two periods: the state after the first (price, position) tells the return so far.
        Instance("trading", Trading(periods=2, price_levels=3, reversion=0.7, cost=0.25),
                 2, markov_is_enough=True),
        # The put pays only when the episode ends: the return so far is always 0.
        Instance("american_put", AmericanPut(periods=4, initial_price=10.0, strike=11.0),
                 4, markov_is_enough=True),
        # gymnasium's cliff walking (slipping, falls -5), two steps: after one, the start cell
        # is reached either by bumping into the wall (-1) or by a fall (-5).
        Instance("cliff_walking",
                 gym.make("rs_lightning/SlipperyCliffWalking-v0", slip_probability=0.2,
                          cliff_reward=-5), 2, markov_is_enough=False),
        # gymnasium's FrozenLake on a 2 x 2 map, slippery, three steps.
        Instance("frozen_lake", gym.make("FrozenLake-v1", desc=["SF", "HG"], is_slippery=True),
                 3, markov_is_enough=True),
    ]


INSTANCES = {instance.name: instance for instance in small_instances()}


@pytest.fixture(scope="module")
def brute_force():
    """For every small instance: the best U over every deterministic policy of its decision
    tree whose nodes are (step, state, return so far)."""
    out = {}
    for name, instance in INSTANCES.items():
        tree = decision_tree(instance.transitions, instance.start, instance.horizon, GAMMA,
                             history=True)
        weights = tree.laws(tree.policies())
        out[name] = {key: float(utilities(tree.returns, weights, u).max())
                     for key, u in UTILITIES.items()}
        out[name]["policies"] = len(weights)
    return out


def test_the_small_instances_have_few_enough_policies_to_enumerate(brute_force):
    counts = {name: best["policies"] for name, best in brute_force.items()}
    assert counts == {"trading": 3 ** 10, "american_put": 2 ** 10, "cliff_walking": 4 ** 4,
                      "frozen_lake": 4 ** 5}


@pytest.mark.parametrize("name", ["trading", "american_put", "frozen_lake"])
def test_policies_of_the_state_see_the_whole_history_on_the_small_instances(name):
    """Where ``markov_is_enough``, the (step, state) nodes and the (step, state, return so
    far) nodes are the same: the brute force of the time-folded state's policies is the
    static optimum's."""
    instance = INSTANCES[name]
    args = (instance.transitions, instance.start, instance.horizon, GAMMA)
    assert len(decision_tree(*args, history=True).nodes) == len(
        decision_tree(*args, history=False).nodes)


def threshold_spacing(model: tr.TabularModel, points: int) -> float:
    low, high = tr.return_bounds(model, GAMMA)
    start_value, _ = tr.optimal_expectation(model, GAMMA)
    return float(np.diff(tr.threshold_grid(low, high, start_value, points)).max())


def static_cvar_bound(model: tr.TabularModel, utility: Utility) -> float:
    """The static CVaR programme's error bound (tabular_references' docstring: W is
    kappa-Lipschitz in the threshold and interpolated linearly, an error of at most
    kappa delta_y / 2 a step, discounted): over the model's horizon H,
    kappa delta_y / 2 x sum_{t <= H} gamma^t, and the search over the start threshold's
    grid adds ((1 - alpha) + kappa) delta_y / 2."""
    kappa = (1.0 - utility.alpha) / float(utility.params["rho"])
    spacing = threshold_spacing(model, tr.THRESHOLDS)
    steps = sum(GAMMA ** t for t in range(model.horizon + 1))
    return kappa * spacing / 2 * steps + ((1.0 - utility.alpha) + kappa) * spacing / 2


@pytest.mark.parametrize("name", list(INSTANCES))
def test_static_optimum_is_the_best_policy_of_the_decision_tree(brute_force, name):
    instance = INSTANCES[name]
    model = instance.model()
    best = brute_force[name]
    assert tr.static_optimum(model, UTILITIES["E"], GAMMA).utility == pytest.approx(
        best["E"], abs=1e-9)
    for key in ("CVaR a=0", "CVaR a=0.5"):
        utility = UTILITIES[key]
        found = tr.static_optimum(model, utility, GAMMA).utility
        assert abs(found - best[key]) <= static_cvar_bound(model, utility), (key, found, best[key])
    # VaR: bounds from both sides, each within about the threshold grid's spacing; with
    # alpha 0 they meet.
    spacing = threshold_spacing(model, tr.VAR_THRESHOLDS)
    for key in ("VaR a=0", "VaR a=0.5"):
        utility = UTILITIES[key]
        bounds = tr.static_optimum(model, utility, GAMMA)
        slack = (1.0 - utility.alpha) * spacing
        assert bounds.utility <= best[key] + 1e-9 + slack, key  # attained by a policy
        assert bounds.utility >= best[key] - 2 * slack, key
        assert bounds.upper >= best[key] - slack, key
    pure = tr.static_optimum(model, UTILITIES["VaR a=0"], GAMMA)
    assert pure.upper == pytest.approx(pure.utility, abs=1e-9)


@pytest.mark.parametrize("name", ["trading", "american_put"])
@pytest.mark.parametrize("key", ["E", "CVaR a=0", "CVaR a=0.5", "VaR a=0", "VaR a=0.5"])
def test_per_decision_fixed_point_is_greedy_on_its_enumerated_laws(name, key):
    """On the time-folded worlds every episode ends within the horizon, so the learner's
    laws Z^pi(s, a) are finite: enumerate them and check that the engine's fixed point takes,
    in every reachable state, an action within the grid's error of the best."""
    instance = INSTANCES[name]
    model, utility = instance.model(), UTILITIES[key]
    grid = tr.model_grid(model, GAMMA)
    fixed_point = tr.per_decision_fixed_point(model, utility, GAMMA, grid=grid)
    assert fixed_point.converged
    policy = np.array(fixed_point.policy)
    risk = "expectation" if utility.alpha == 1.0 else utility.risk
    bound = (1.0 - utility.alpha) * tr.grid_error_bounds(grid, GAMMA, RHO, instance.horizon)[risk]
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
    env = gym.make(env_id, **kwargs)
    returns, outcomes = np.empty(episodes), np.empty(episodes)
    for i in range(episodes):
        state, _ = env.reset(seed=seed + i)
        total, discount, done = 0.0, 1.0, False
        while not done:
            state, reward, terminated, truncated, info = env.step(int(policy[state]))
            total += discount * reward
            discount *= GAMMA
            done = terminated or truncated
        returns[i], outcomes[i] = total, info["risk_outcome"]
    return returns, outcomes


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
    episodes = 3000
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
        rows = {}
        for key, utility in (("E", Utility(1.0)), ("CVaR", cvar)):
            fixed_point = tr.per_decision_fixed_point(model, utility, section.gamma, grid=grid)
            policy = np.array(fixed_point.policy)
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


@pytest.mark.parametrize("name", ["trading", "american_put"])
def test_a_quick_run_of_the_preset_writes_its_exact_references(compose, tmp_path, name):
    from rs_lightning.app.train import run

    run_dir = tmp_path / name
    run(compose([f"env={name}", "debug=quick", "logger=none", "callbacks.progress_bar=false",
                 "trainer.max_steps=60", "evaluation.every_n_steps=0",
                 "evaluation.episodes=20"]), run_dir=run_dir)
    summary = json.loads((run_dir / "eval.json").read_text())
    assert summary["episodes"] == 20 and np.isfinite(summary["exact_static_utility"])
    # The default utility, alpha 0.5 with VaR_0.1: bounds on the static optimum.
    assert (summary["exact_static_utility"] <= summary["static_optimum"] + 1e-9
            <= summary["static_optimum_upper"] + 2e-9)
    assert np.isfinite(summary["per_decision_static_utility"])
