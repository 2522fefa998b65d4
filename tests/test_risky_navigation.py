"""The risky navigation world (envs/risky_navigation.py): its two routes' exact laws, played
in the environment, and (slow) the actor-critics' route at each end of the risk."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import rs_lightning.envs  # noqa: F401  (registers the ids)
from rs_lightning.envs.risky_navigation import SPEED, in_region, route_laws, route_paths
from rs_lightning.risk import ReturnDistribution, Utility


def play(path, episodes: int, seed: int = 0, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """The undiscounted returns of a scripted path, and the final risk outcomes."""
    env = gym.make("rs_lightning/RiskyNavigation-v0", max_episode_steps=100, **kwargs)
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


def brute_force_least_cost(region_cost: float, gate: float | None = None) -> float:
    """The least cost of reaching the goal (0.1 a step, ``region_cost`` more a step in the
    region) by value iteration over the whole lattice: the check of Dijkstra's path (with a
    ``gate``, the moves that cross a fence are left out, by the environment's own rule)."""
    from rs_lightning.envs.risky_navigation import ARENA, fenced, on_goal

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
                    target = (nxt[0] * SPEED, nxt[1] * SPEED)
                    if gate is not None and fenced((i * SPEED, j * SPEED), target, gate) != target:
                        continue
                    step = 0.1 + (region_cost if in_region(nxt[0] * SPEED, nxt[1] * SPEED) else 0)
                    best = min(best, step + cost[nxt])
            if best < value - 1e-12:
                cost[(i, j)], changed = best, True
        if not changed:
            break
    return cost[(0, 0)]


@pytest.mark.parametrize("gate, crossing_in_region", [
    (None, 12), pytest.param(0.25, 13, marks=pytest.mark.slow)])  # the gated one: -m slow
def test_the_paths_are_the_least_cost_ones_and_have_the_exact_laws(gate, crossing_in_region):
    paths = route_paths(gate=gate)
    assert (len(paths["crossing"]), len(paths["around"])) == (19, 31)
    assert sum(in_region(*p) for p in paths["crossing"]) == crossing_in_region
    assert not any(in_region(*p) for p in paths["around"])
    # Dijkstra's costs against value iteration over the lattice (expected cost 0.1 a step,
    # 0.08 more in the region; around: the region forbidden, a prohibitive cost). Unfenced,
    # the crossing steps out of the region once to save a region step; fenced, it cannot.
    assert 1.9 + crossing_in_region * 0.08 == pytest.approx(brute_force_least_cost(0.08, gate))
    assert 3.1 == pytest.approx(brute_force_least_cost(1e6, gate))
    laws = route_laws(gate=gate)
    episodes = 3000
    for route, path in paths.items():
        returns, outcomes = play(path, episodes, gate=gate)
        atoms, probabilities = laws[route]
        values, counts = np.unique(returns.round(9), return_counts=True)
        frequency = dict(zip(values, counts / episodes))
        assert set(frequency) <= set(atoms.round(9))
        # Each atom's frequency within 5 standard errors of its binomial probability.
        for atom, probability in zip(atoms.round(9), probabilities):
            se = np.sqrt(probability * (1 - probability) / episodes)
            assert abs(frequency.get(atom, 0.0) - probability) <= 5 * se + 1e-9, (route, atom)
        assert (outcomes == -1).mean() == pytest.approx(
            0.0 if route == "around" else 1 - 0.9**crossing_in_region, abs=0.03)


def test_the_fences_stop_a_move_and_leave_the_gates_open():
    from rs_lightning.envs.risky_navigation import fenced, lattice_moves

    gate = 0.25
    assert fenced((0.3, 0.1), (0.4, 0.2), gate) == (0.4, 0.2)  # in through the west gate
    x, y = fenced((0.3, 0.5), (0.4, 0.6), gate)  # the west end beside the gate: stopped
    assert (x, y) == (pytest.approx(0.35), 0.6) and not in_region(x, y)
    assert fenced((0.5, 1.0), (0.6, 0.9), gate) == (0.6, 0.95)  # over the long side: on it
    x, y = fenced((0.5, 0.9), (0.6, 1.0), gate)  # out through the long side: a hair inside
    assert x == 0.6 and y == pytest.approx(0.95) and in_region(x, y)
    x, y = fenced((1.6, 0.5), (1.7, 0.4), gate)  # out through the east end beside its gate
    assert x == 1.65 and in_region(x, y)
    assert fenced((1.6, 0.1), (1.7, 0.0), gate) == (1.7, 0.0)  # out through the east gate
    assert fenced((0.3, 0.9), (0.4, 1.0), gate) == (0.4, 1.0)  # past the corner itself
    # The environment applies the same rule: pushing down onto the long side from above
    # slides along it and never enters.
    env = gym.make("rs_lightning/RiskyNavigation-v0", gate=gate, start="origin")
    env.reset(seed=0)
    for action in [(0, 1)] * 10 + [(1, 0)] * 5 + [(1, -1)] * 5:
        env.step(np.array(action, dtype=np.float32))
        assert not in_region(*env.unwrapped.position)
    assert tuple(env.unwrapped.position) == (pytest.approx(1.0), 0.95)
    # the lattice's moves are the environment's: none of them crosses a fence
    moves = {cell for cell, *_ in lattice_moves((3, 5), gate)}
    assert (4, 5) not in moves and (4, 6) not in moves and (2, 5) in moves
    assert {cell for cell, *_ in lattice_moves((3, 0), gate)} >= {(4, 0), (4, 1), (4, -1)}


def test_a_lower_south_edge_makes_the_north_way_the_shorter_one_off_the_start(compose):
    """With the south edge at -1.35 the shortest way around from every start on the y axis
    within 0.3 of the origin goes by the north, and from (0, -0.5) by the south: the boundary
    between the two lies between, off the start. With the preset's symmetric region the start
    is on it (the way around from (0, +-0.1) goes by that side). The routes' laws are the
    same; the fences follow the edge."""
    from rs_lightning.envs.risky_navigation import (
        REGION_HALF_HEIGHT,
        fenced,
        least_cost_path,
    )

    kwargs = compose(["experiment=risky_navigation"]).env.kwargs
    south = -1.35

    def side(j: int, south_edge: float) -> str:
        path = least_cost_path(0.1, None, kwargs.gate, south_edge, start=(0, j))
        over = [y for x, y in path if 0.35 <= x <= 1.65]
        assert over and all(y >= REGION_HALF_HEIGHT or y <= south_edge for y in over)
        return "north" if over[0] > 0 else "south"

    assert kwargs.south_edge == -REGION_HALF_HEIGHT
    assert [side(j, south) for j in range(-3, 4)] == ["north"] * 7
    assert side(-5, south) == "south"
    assert (side(-1, kwargs.south_edge), side(1, kwargs.south_edge)) == ("south", "north")
    assert len(least_cost_path(0.1, None, kwargs.gate, south)) == 31  # from the origin
    lopsided = route_laws(gate=kwargs.gate, south_edge=south)
    for route, (atoms, probabilities) in route_laws(gate=kwargs.gate).items():
        assert np.allclose(lopsided[route][0], atoms)
        assert np.allclose(lopsided[route][1], probabilities)
    assert fenced((0.5, -1.4), (0.6, -1.3), kwargs.gate, south) == (0.6, south)
    x, y = fenced((0.3, -1.1), (0.4, -1.1), kwargs.gate, south)
    assert (x, y) == (pytest.approx(0.35), -1.1) and not in_region(x, y, south)
    assert in_region(1.0, -1.1, south) and not in_region(1.0, -1.1)
    with pytest.raises(ValueError, match=r"south_edge must be in \[-2.5, -0.25\]"):
        gym.make("rs_lightning/RiskyNavigation-v0", south_edge=-0.2)
    with pytest.raises(ValueError, match=r"gate must be in \(0, 0.5\]"):
        gym.make("rs_lightning/RiskyNavigation-v0", south_edge=-0.5, gate=0.6)


def binomial_cvar(base: float, steps_in_region: int, rho: float = 0.1) -> float:
    """CVaR_rho of base - 0.8 K, K ~ Binomial(steps_in_region, 0.1), by hand: the mean of
    the worst rho of the mass, the most strikes first."""
    left, total = rho, 0.0
    for k in range(steps_in_region, -1, -1):
        mass = min(left, math.comb(steps_in_region, k) * 0.1**k * 0.9 ** (steps_in_region - k))
        total += mass * (base - 0.8 * k)
        left -= mass
    return total / rho


@pytest.mark.parametrize("gate, in_region_steps", [(None, 12), (0.25, 13)])
def test_the_risk_neutral_optimum_crosses_and_cvar_goes_around(gate, in_region_steps):
    laws = {route: ReturnDistribution(torch.tensor(a), torch.tensor(p))
            for route, (a, p) in route_laws(gate=gate).items()}
    mean = Utility(1.0, "expectation")
    cvar = Utility(0.0, "cvar", {"rho": 0.1})
    assert mean(laws["crossing"]).item() == pytest.approx(-0.05 - in_region_steps * 0.08)
    assert mean(laws["around"]).item() == pytest.approx(-1.25)
    assert cvar(laws["crossing"]).item() == pytest.approx(binomial_cvar(-0.05, in_region_steps))
    assert cvar(laws["crossing"]).item() == pytest.approx(
        {12: -2.6944944842, 13: -2.7831904664}[in_region_steps], abs=1e-9)
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
    with pytest.raises(ValueError, match="start must be one of origin, anywhere, mixed"):
        gym.make("rs_lightning/RiskyNavigation-v0", start="corner")
    # mixed: half the episodes from the origin, half from anywhere
    mixed = gym.make("rs_lightning/RiskyNavigation-v0", start="mixed")
    at_origin = [not np.any(mixed.reset(seed=seed)[0]) for seed in range(2000)]
    assert np.mean(at_origin) == pytest.approx(0.5, abs=0.04)


def test_training_kwargs_reach_the_collecting_copies_and_never_an_evaluation(compose):
    """``env.training_kwargs`` change the copies that fill the replay (here: exploring
    starts); the evaluation's copies are made from ``env.kwargs`` alone and start at (0, 0)."""
    from rs_lightning.analysis.evaluation import play_episodes, rollout_policy
    from rs_lightning.config.schema import validate
    from rs_lightning.engine.build import build
    from rs_lightning.risk import Utility

    config = validate(compose(["experiment=risky_navigation", "env.num_envs=8", "debug=quick",
                               "logger=none"]))  # the preset's exploring starts
    datamodule, _ = build(config)
    datamodule.setup()
    starts = datamodule.collector.rollout.copies.obs()
    assert starts.shape == (8, 2) and len(np.unique(starts.round(6), axis=0)) == 8
    # Full speed along +x: from (0, 0), 19 steps to the goal, 13 of them in the region, so
    # every return is -0.05 less 0.8 a strike; from anywhere else, hardly ever.
    east = lambda rows: torch.tensor([[1.0, 0.0]]).expand(len(rows), 2)
    played = play_episodes(rollout_policy(east, Utility(1.0, "expectation")),
                           config.train.env, episodes=50, seed=0, batch_envs=10)
    strikes = (-0.05 - played.returns) / 0.8
    assert np.allclose(strikes, strikes.round(), atol=1e-6) and strikes.min() >= -1e-6


def preset_laws(compose) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The exact route laws of the world ``experiment=risky_navigation`` trains on."""
    kwargs = compose(["experiment=risky_navigation"]).env.kwargs
    return route_laws(kwargs.strike_probability, kwargs.penalty, kwargs.step_cost,
                      kwargs.shaping, kwargs.gate, kwargs.south_edge)


def test_the_preset_world_crosses_for_the_expectation_and_goes_around_for_cvar(compose):
    laws = {route: ReturnDistribution(torch.tensor(a), torch.tensor(p))
            for route, (a, p) in preset_laws(compose).items()}
    mean, cvar = Utility(1.0, "expectation"), Utility(0.0, "cvar", {"rho": 0.1})
    # E: the crossing by 0.16, a step and a half; CVaR_0.1: the way around by 1.53
    assert mean(laws["crossing"]).item() - mean(laws["around"]).item() == pytest.approx(0.16)
    assert cvar(laws["around"]).item() - cvar(laws["crossing"]).item() == pytest.approx(
        -1.25 - binomial_cvar(-0.05, 13))


def test_the_frontier_marks_the_routes_exact_points_and_where_the_best_changes(compose):
    from types import SimpleNamespace

    from rs_lightning.analysis.frontier import exact_routes, route_switch_points

    env = compose(["experiment=risky_navigation"]).env  # its kwargs: the fences; start: none
    run_config = SimpleNamespace(train=SimpleNamespace(env=env),
                                 utility=Utility(0.0, "cvar", {"rho": 0.1}))
    routes = exact_routes(run_config, 0.1)
    crossing, around = (next(r for r in routes if r["route"] == name)
                        for name in ("crossing", "around"))
    worst = binomial_cvar(-0.05, 13)
    assert crossing["expectation"] == pytest.approx(-1.09)
    assert crossing["cvar"] == crossing["risk"] == pytest.approx(worst)
    # VaR_0.1: P(K >= 4) = 0.034 and P(K >= 3) = 0.134 for K ~ Binomial(13, 0.1), so the
    # 10 % quantile is three strikes.
    assert crossing["var"] == pytest.approx(-0.05 - 3 * 0.8)
    assert around["expectation"] == around["var"] == around["cvar"] == pytest.approx(-1.25)
    # alpha (-1.09) + (1 - alpha) worst = -1.25: crossing pays from alpha = 0.906 on.
    (switch,) = route_switch_points(routes)
    assert switch == pytest.approx((-1.25 - worst) / (-1.09 - worst))
    assert 0.90 < switch < 0.91
    # The expectation alone has no switch; a grid world has no reference routes.
    neutral = SimpleNamespace(train=run_config.train, utility=Utility(1.0, "expectation"))
    assert route_switch_points(exact_routes(neutral, 0.1)) == []
    grid = SimpleNamespace(train=SimpleNamespace(env=compose(["env=risky_rewards"]).env),
                           utility=run_config.utility)
    assert exact_routes(grid, 0.1) == []


# Measured (docs/guides/continuous.md, "A risky world with a known answer"): with the
# preset's exploring starts TQC goes around at alpha 0 on 5 of 5 seeds, and DSAC too when its
# actor maximises U of the twin critics' pooled atoms (agent.actor_law=mixture; 10 of 10
# seeds; 3 of 5 with the pessimistic law); at alpha 1, where both crossed on 4 of 5 with
# exploring starts alone, half the training episodes start at the origin (start=mixed: the
# choice between the routes is made there) and both cross on 5 of 5.
MIXED_STARTS = "env.training_kwargs.start=mixed"
DSAC_MIXTURE = "agent.actor_law=mixture"


@pytest.mark.slow
@pytest.mark.parametrize("agent, setting, route", [
    ("tqc", ["alpha=1", MIXED_STARTS], "crossing"),
    ("tqc", ["risk=cvar", "rho=0.1", "alpha=0"], "around"),
    ("dsac", [DSAC_MIXTURE, "alpha=1", MIXED_STARTS], "crossing"),
    ("dsac", [DSAC_MIXTURE, "risk=cvar", "rho=0.1", "alpha=0"], "around"),
])
def test_five_of_five_seeds_take_the_expected_route(compose, tmp_path, agent, setting, route):
    """The preset (experiment=risky_navigation; at alpha 1 with half its training episodes
    from the origin), 5 seeds as the members of one run, against the exact laws of its
    world's two routes. At alpha 1 every greedy policy crosses: its E
    and its share of episodes struck are the crossing's (within 0.2, two steps, and 0.1). At
    alpha 0 with CVaR_0.1 every one goes around: every episode reaches the goal without a
    strike, by a way at most 5 steps longer than the shortest one (E within 0.5)."""
    from rs_lightning.app.train import run

    run(compose(["experiment=risky_navigation", f"agent={agent}", *setting, "seed=0",
                 "parallel_seeds=5", "logger=none", "callbacks.progress_bar=false"]),
        run_dir=tmp_path)
    atoms, probabilities = preset_laws(compose)[route]
    exact_mean = float(atoms @ probabilities)
    for seed in range(5):
        summary = json.loads((tmp_path / f"seed_{seed}" / "eval.json").read_text())
        if route == "crossing":
            assert summary["expectation"] == pytest.approx(exact_mean, abs=0.2), seed
            # R_s: the share of episodes on the goal without a strike, less the share struck.
            unstruck = float(probabilities[-1])
            assert summary["risk_outcome"] == pytest.approx(2 * unstruck - 1, abs=0.1), seed
        else:
            assert summary["risk_outcome_green"] == 1.0, seed
            assert exact_mean - 0.5 - 1e-9 <= summary["expectation"] <= exact_mean + 1e-9, seed


def test_the_frontier_says_where_it_is_on_a_world_of_long_episodes(compose, tmp_path, capsys):
    """Off the grid worlds each point can take minutes (LunarLander): the frontier prints a
    line per seed and setting as it goes, with the point's E."""
    from rs_lightning.app.commands import frontier
    from rs_lightning.app.train import run

    # Risk-conditioned: a frontier of an actor that is not is refused (one policy throughout).
    run(compose(["experiment=risky_navigation", "agent.risk_conditioned=true", "debug=quick",
                 "logger=none", "callbacks.progress_bar=false", "trainer.max_steps=20",
                 "learning.warmup_steps=10", "learning.batch_size=8", "evaluation.episodes=4",
                 "evaluation.every_n_steps=0", "evaluation.batch_envs=4"]),
        run_dir=tmp_path / "run")
    capsys.readouterr()
    assert frontier.main([str(tmp_path / "run"), "--alpha", "0,1", "--episodes", "4",
                          "--wandb", "off", "--out", str(tmp_path / "front")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines()
             if line.startswith("[rs_lightning] frontier: ") and " seed " in line]
    assert [line.split(" seed ")[0][-3:] for line in lines] == ["1/2", "2/2"]
    assert "alpha=0: E=" in lines[0] and "alpha=1: E=" in lines[1]


def test_the_sweep_script_trains_each_setting_and_seed_and_reports_their_routes(tmp_path):
    """benchmarks/navigation_sweep.sh (the many-core screen of the continuous guide): one
    process per setting and seed, each run's route at every evaluation in routes.txt."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    quick = ("trainer.max_steps=120 learning.warmup_steps=40 learning.batch_size=8 "
             "evaluation.every_n_steps=60 evaluation.episodes=4 "
             "evaluation.episodes_during_training=4 evaluation.batch_envs=4")
    env = dict(os.environ, OUT=str(tmp_path / "out"), RUNS=str(tmp_path / "runs"),
               PYTHON=sys.executable, SEEDS="0 1", STACKED="", SECONDS_EACH="300",
               SETTINGS="three_step:learning.n_step=3 agent.n_critics=1;plain:",
               EXTRA=quick)
    subprocess.run(["bash", "benchmarks/navigation_sweep.sh"], cwd=root, env=env, check=True,
                   capture_output=True, timeout=600)
    exits = (tmp_path / "out" / "exits.txt").read_text().split("\n")
    names = [f"{name}_{seed}" for name in ("plain", "three_step") for seed in (0, 1)]
    assert sorted(line for line in exits if line) == [f"{name} exit 0" for name in names]
    routes = (tmp_path / "out" / "routes.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in routes] == [f"{name}/{name}" for name in names]
    for line in routes:  # the final evaluation, then one per 60 updates
        assert " final " in line and line.count("k:") == 2, line
    config = (tmp_path / "runs" / "three_step_1" / "config.yaml").read_text()
    assert "n_step: 3" in config and "n_critics: 1" in config and "\nalpha: 0\n" in config
    assert "n_step: 1" in (tmp_path / "runs" / "plain_0" / "config.yaml").read_text()
    assert (tmp_path / "out" / "runs.tgz").stat().st_size > 0
