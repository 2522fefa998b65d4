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


def play(path, episodes: int, seed: int = 0) -> tuple[np.ndarray, list[bool]]:
    """The undiscounted returns of a scripted path, and whether each entered the region."""
    env = gym.make("rs_lightning/RiskyNavigation-v0", max_episode_steps=100)
    returns, entered = [], []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        total, previous, terminated = 0.0, (0.0, 0.0), False
        for point in path:
            action = np.array([(point[0] - previous[0]) / SPEED, (point[1] - previous[1]) / SPEED],
                              dtype=np.float32)
            obs, reward, terminated, _, _ = env.step(action)
            total += reward
            previous = point
        assert terminated, "a route must end on the goal"
        returns.append(total)
        entered.append(bool(obs[2]))
    return np.array(returns), entered


def test_the_routes_played_in_the_world_have_the_exact_laws():
    paths = route_paths()
    assert (len(paths["straight"]), len(paths["around"])) == (19, 25)
    assert not any(in_region(*p) for p in paths["around"])
    assert any(in_region(*p) for p in paths["straight"])
    laws = route_laws()
    episodes = 4000
    for route, path in paths.items():
        returns, entered = play(path, episodes)
        assert all(entered) == (route == "straight")
        atoms, probabilities = laws[route]
        values, counts = np.unique(returns.round(9), return_counts=True)
        np.testing.assert_allclose(values, atoms, atol=1e-9)
        # Binomial frequencies within 5 standard errors of the exact probabilities.
        se = np.sqrt(probabilities * (1 - probabilities) / episodes)
        assert np.all(np.abs(counts / episodes - probabilities) <= 5 * se + 1e-12)


def test_the_risk_neutral_optimum_crosses_and_cvar_goes_around():
    laws = {route: ReturnDistribution(torch.tensor(a), torch.tensor(p))
            for route, (a, p) in route_laws().items()}
    mean = Utility(1.0, "expectation")
    cvar = Utility(0.0, "cvar", {"rho": 0.1})
    assert mean(laws["straight"]).item() == pytest.approx(-0.45)
    assert mean(laws["around"]).item() == pytest.approx(-0.65)
    assert cvar(laws["straight"]).item() == pytest.approx(-2.05)
    assert cvar(laws["around"]).item() == pytest.approx(-0.65)


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["tqc", "dsac"])
@pytest.mark.parametrize("setting, route", [(["alpha=1"], "straight"),
                                            (["risk=cvar", "rho=0.1", "alpha=0"], "around")])
def test_five_of_five_seeds_take_the_expected_route(compose, tmp_path, agent, setting, route):
    """The preset (experiment=risky_navigation), 5 seeds: every greedy policy crosses at
    alpha 1 and goes around at alpha 0 with CVaR_0.1, and reaches the goal; its evaluation's
    E is the route's within 0.1 (a path a step longer costs 0.1)."""
    from rs_lightning.app.train import run

    run(compose(["experiment=risky_navigation", f"agent={agent}", *setting, "seed=0",
                 "parallel_seeds=5", "logger=none", "callbacks.progress_bar=false"]),
        run_dir=tmp_path)
    atoms, probabilities = route_laws()[route]
    for seed in range(5):
        summary = json.loads((tmp_path / f"seed_{seed}" / "eval.json").read_text())
        assert summary["expectation"] == pytest.approx(float(atoms @ probabilities), abs=0.1), seed
        # R_s: -1 where the penalty struck, +1 on the goal without it.
        assert summary["risk_outcome"] == pytest.approx(0.6 if route == "straight" else 1.0,
                                                        abs=0.1), seed
