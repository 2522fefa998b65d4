"""The risky navigation world (envs/risky_navigation.py): its two routes' exact laws, played
in the environment, and (slow) the actor-critics' route at each end of the risk."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

import rs_lightning.envs  # noqa: F401  (registers the ids)
from rs_lightning.envs.risky_navigation import SPEED, in_region, route_laws, route_paths
from rs_lightning.risk import ReturnDistribution, Utility


def play(path, episodes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The undiscounted returns of a scripted path, and the final risk outcomes."""
    env = gym.make("rs_lightning/RiskyNavigation-v0", max_episode_steps=100)
    returns, outcomes = [], []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        total, previous, terminated = 0.0, (0.0, 0.0), False
        for point in path:
            action = np.array([(point[0] - previous[0]) / SPEED, (point[1] - previous[1]) / SPEED],
                              dtype=np.float32)
            _, reward, terminated, _, info = env.step(action)
            total += reward
            previous = point
        assert terminated, "a route must end on the goal"
        returns.append(total)
        outcomes.append(info["risk_outcome"])
    return np.array(returns), np.array(outcomes)


def brute_force_least_cost(region_cost: float) -> float:
    """The least cost of reaching the goal (0.1 a step, ``region_cost`` more a step in the
    region) by value iteration over the whole lattice: the check of Dijkstra's path."""
    from rs_lightning.envs.risky_navigation import ARENA, on_goal

    xs = np.arange(round(ARENA[0][0] / SPEED), round(ARENA[0][1] / SPEED) + 1)
    ys = np.arange(round(ARENA[1][0] / SPEED), round(ARENA[1][1] / SPEED) + 1)
    cost = {(i, j): (0.0 if on_goal(i * SPEED, j * SPEED) else np.inf) for i in xs for j in ys}
    for _ in range(200):
        changed = False
        for (i, j), value in cost.items():
            if on_goal(i * SPEED, j * SPEED):
                continue
            best = value
            for di in (-1, 0, 1):
                for dj in (-1, 0, 1):
                    nxt = (i + di, j + dj)
                    if nxt == (i, j) or nxt not in cost:
                        continue
                    step = 0.1 + (region_cost if in_region(nxt[0] * SPEED, nxt[1] * SPEED) else 0)
                    best = min(best, step + cost[nxt])
            if best < value - 1e-12:
                cost[(i, j)], changed = best, True
        if not changed:
            break
    return cost[(0, 0)]


def test_the_paths_are_the_least_cost_ones_and_have_the_exact_laws():
    paths = route_paths()
    assert (len(paths["crossing"]), len(paths["around"])) == (19, 31)
    assert sum(in_region(*p) for p in paths["crossing"]) == 12
    assert not any(in_region(*p) for p in paths["around"])
    # Dijkstra's costs against value iteration over the lattice (expected cost 0.1 a step,
    # 0.08 more in the region; around: the region forbidden, a prohibitive cost).
    assert 1.9 + 12 * 0.08 == pytest.approx(brute_force_least_cost(0.08))
    assert 3.1 == pytest.approx(brute_force_least_cost(1e6))
    laws = route_laws()
    episodes = 3000
    for route, path in paths.items():
        returns, outcomes = play(path, episodes)
        atoms, probabilities = laws[route]
        values, counts = np.unique(returns.round(9), return_counts=True)
        frequency = dict(zip(values, counts / episodes))
        assert set(frequency) <= set(atoms.round(9))
        # Each atom's frequency within 5 standard errors of its binomial probability.
        for atom, probability in zip(atoms.round(9), probabilities):
            se = np.sqrt(probability * (1 - probability) / episodes)
            assert abs(frequency.get(atom, 0.0) - probability) <= 5 * se + 1e-9, (route, atom)
        assert (outcomes == -1).mean() == pytest.approx(
            0.0 if route == "around" else 1 - 0.9**12, abs=0.03)


def test_the_risk_neutral_optimum_crosses_and_cvar_goes_around():
    laws = {route: ReturnDistribution(torch.tensor(a), torch.tensor(p))
            for route, (a, p) in route_laws().items()}
    mean = Utility(1.0, "expectation")
    cvar = Utility(0.0, "cvar", {"rho": 0.1})
    assert mean(laws["crossing"]).item() == pytest.approx(-0.05 - 12 * 0.08)
    assert mean(laws["around"]).item() == pytest.approx(-1.25)
    assert cvar(laws["crossing"]).item() == pytest.approx(-2.6944944842, abs=1e-9)
    assert cvar(laws["around"]).item() == pytest.approx(-1.25)
    assert mean(laws["crossing"]) > mean(laws["around"])
    assert cvar(laws["crossing"]) < cvar(laws["around"])


def test_exploring_starts_cover_the_arena_off_the_goal_and_a_bad_start_is_named():
    from rs_lightning.envs.risky_navigation import ARENA, on_goal

    env = gym.make("rs_lightning/RiskyNavigation-v0", start="anywhere")
    starts = np.array([env.reset(seed=seed)[0] for seed in range(2000)])
    assert not any(on_goal(x, y) for x, y in starts)
    # Uniform over the arena: each coordinate's mean and quartiles within a few percent.
    for axis, (low, high) in enumerate(ARENA):
        width = high - low
        assert starts[:, axis].min() >= low and starts[:, axis].max() <= high
        assert np.quantile(starts[:, axis], [0.25, 0.5, 0.75]) == pytest.approx(
            [low + width / 4, low + width / 2, low + 3 * width / 4], abs=0.04 * width)
    assert np.array_equal(gym.make("rs_lightning/RiskyNavigation-v0").reset(seed=3)[0], [0, 0])
    with pytest.raises(ValueError, match="start must be one of origin, anywhere"):
        gym.make("rs_lightning/RiskyNavigation-v0", start="corner")


def test_training_kwargs_reach_the_collecting_copies_and_never_an_evaluation(compose):
    """``env.training_kwargs`` change the copies that fill the replay (here: exploring
    starts); the evaluation's copies are made from ``env.kwargs`` alone and start at (0, 0)."""
    from rs_lightning.analysis.evaluation import play_episodes, rollout_policy
    from rs_lightning.config.schema import validate
    from rs_lightning.engine.build import build
    from rs_lightning.risk import Utility

    config = validate(compose(["experiment=risky_navigation", "env.num_envs=8", "debug=quick",
                               "+env.training_kwargs.start=anywhere", "logger=none"]))
    datamodule, _ = build(config)
    datamodule.setup()
    starts = datamodule.collector.rollout.copies.obs()
    assert starts.shape == (8, 2) and len(np.unique(starts.round(6), axis=0)) == 8
    # Full speed along +x: from (0, 0), 19 steps to the goal, 12 of them in the region, so
    # every return is -0.05 less 0.8 a strike; from anywhere else, hardly ever.
    east = lambda rows: torch.tensor([[1.0, 0.0]]).expand(len(rows), 2)  # noqa: E731
    played = play_episodes(rollout_policy(east, Utility(1.0, "expectation")),
                           config.train.env, episodes=50, seed=0, batch_envs=10)
    strikes = (-0.05 - played.returns) / 0.8
    assert np.allclose(strikes, strikes.round(), atol=1e-6) and strikes.min() >= -1e-6


# Measured with TQC on seed 0 (20,000 updates): at alpha 1 the greedy policy crosses with
# E = -1.27 (the optimum -1.01: two steps and two region steps more); at alpha 0 with CVaR_0.1
# it stays out of the region but never finds the way around to the goal (E = -10.4, every
# episode cut at 100 steps), also with 3-step returns, a higher target entropy and a longer
# warm-up, or a weaker shaping (30,000 updates). Without the risk the same CVaR agent goes
# straight to the goal (E = -0.05, the optimum): what is missing is the exploration of the
# way around once the region is known to be risky. With exploring starts in training
# (+env.training_kwargs.start=anywhere) it reaches the goal on every episode but cuts a corner
# of the region (E = -1.36, 42 % of the episodes struck; 20,000 updates).
NOT_YET = pytest.mark.xfail(reason="the actor-critics do not yet reach these routes (above)",
                            strict=False)


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["tqc", "dsac"])
@pytest.mark.parametrize("setting, route", [
    pytest.param(["alpha=1"], "crossing", marks=NOT_YET),
    pytest.param(["risk=cvar", "rho=0.1", "alpha=0"], "around", marks=NOT_YET),
])
def test_five_of_five_seeds_take_the_expected_route(compose, tmp_path, agent, setting, route):
    """The preset (experiment=risky_navigation), 5 seeds: every greedy policy crosses the
    region at alpha 1 (a share of its episodes struck) and goes around it at alpha 0 with
    CVaR_0.1 (none struck), reaching the goal; its E is the route's within 0.2 (two steps
    more cost 0.2)."""
    from rs_lightning.app.train import run

    run(compose(["experiment=risky_navigation", f"agent={agent}", *setting, "seed=0",
                 "parallel_seeds=5", "logger=none", "callbacks.progress_bar=false"]),
        run_dir=tmp_path)
    atoms, probabilities = route_laws()[route]
    for seed in range(5):
        summary = json.loads((tmp_path / f"seed_{seed}" / "eval.json").read_text())
        assert summary["expectation"] == pytest.approx(float(atoms @ probabilities), abs=0.2), seed
        # R_s: the share of episodes on the goal without a strike, less the share struck.
        unstruck = 1.0 if route == "around" else 0.9**12
        assert summary["risk_outcome"] == pytest.approx(2 * unstruck - 1, abs=0.1), seed
