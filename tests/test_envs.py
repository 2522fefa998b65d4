"""The grid worlds against the rules of the paper's appendix A.

The spec is restated here independently of the implementation (SPEC below), so that a
change to the environments' rules fails a test rather than silently moving both sides.
Statistical checks use fixed seeds and 5-sigma tolerances: they are deterministic, and
would pass for essentially any seed.
"""

from __future__ import annotations

import copy
import importlib
import math
import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rs_lightning.envs as envs_pkg
from rs_lightning.envs import (
    GRID_WORLDS,
    OTHER_GRID_WORLDS,
    RiskyGridWorld,
    RiskyRewards,
    RiskyTransitions,
    TwoStage,
)

CELLS = [(x, y) for x in range(3) for y in range(3)]
RIGHT, DOWN, LEFT, UP = 0, 1, 2, 3
MOVES = {RIGHT: (1, 0), DOWN: (0, -1), LEFT: (-1, 0), UP: (0, 1)}

# name -> (class, wind probability, {cell: (reward components, terminal)}, step reward)
SPEC = {
    "risky_rewards": (
        RiskyRewards,
        0.0,
        {(0, 2): (((1.0, 0.3),), True), (2, 2): (((0.75, 1.0), (0.25, -1.0)), True)},
        -0.1,
    ),
    "risky_transitions": (
        RiskyTransitions,
        0.5,
        {(0, 2): (((1.0, 1.0),), True), (2, 0): (((1.0, 1.0),), True)},
        -0.3,
    ),
    "risky_grid_world": (
        RiskyGridWorld,
        0.25,
        {(1, 2): (((1.0, 1.0),), True), (1, 1): (((0.75, -0.2), (0.25, -2.0)), False)},
        -0.2,
    ),
    # Not the paper's: the two-stage gamble of envs/grid_worlds.py (issue 21). The wind
    # blows on moves aimed at the coin cell (1, 1) only (WIND_TARGETS).
    "two_stage": (
        TwoStage,
        0.4,
        {
            (0, 2): (((1.0, 0.5),), True),
            (2, 1): (((1.0, 0.5),), True),
            (1, 2): (((0.75, 2.0), (0.25, -1.0)), True),
            (0, 0): (((1.0, -2.0),), False),
            (0, 1): (((1.0, -2.0),), False),
            (1, 0): (((1.0, -2.0),), False),
            (2, 0): (((1.0, -2.0),), False),
        },
        -0.1,
    ),
}
WIND_TARGETS = {"two_stage": {(1, 1)}}  # the others: every cell
ALL_WORLDS = {**GRID_WORLDS, **OTHER_GRID_WORLDS}


def clamp(x, y):
    return (min(max(x, 0), 2), min(max(y, 0), 2))


def spec_branches(name, cell, action):
    """{next cell: probability} from the spec: move, clamp, then wind one cell left."""
    _, wind, _, _ = SPEC[name]
    dx, dy = MOVES[action]
    target = clamp(cell[0] + dx, cell[1] + dy)
    if target not in WIND_TARGETS.get(name, {target}):
        wind = 0.0
    pushed = clamp(target[0] - 1, target[1])
    branches = {target: 1.0 - wind}
    branches[pushed] = branches.get(pushed, 0.0) + wind
    return target, {c: p for c, p in branches.items() if p > 0}


def spec_cell_rule(name, cell):
    _, _, special, step = SPEC[name]
    return special.get(cell, (((1.0, step),), False))


def run(env, actions):
    """Step through ``actions`` (stopping at the episode's end); returns the step tuples."""
    out = []
    for a in actions:
        out.append(env.step(a))
        if out[-1][2] or out[-1][3]:
            break
    return out


# --------------------------------------------------------------------------- registration


@pytest.mark.parametrize("name", sorted(ALL_WORLDS))
def test_check_env_passes_without_warnings(name):
    for kwargs in ({}, {"timeout_is_terminal": False, "max_steps": 3}, {"render_mode": "ansi"}):
        env = gym.make(ALL_WORLDS[name], **kwargs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env.unwrapped)
        assert not caught, [str(w.message) for w in caught]
        assert isinstance(env.unwrapped, SPEC[name][0])


def test_registration_ids_kwargs_and_reimport():
    assert GRID_WORLDS == {
        "risky_rewards": "rs_lightning/RiskyRewards-v0",
        "risky_transitions": "rs_lightning/RiskyTransitions-v0",
        "risky_grid_world": "rs_lightning/RiskyGridWorld-v0",
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.reload(envs_pkg)
    assert OTHER_GRID_WORLDS == {"two_stage": "rs_lightning/TwoStage-v0"}
    for env_id in ALL_WORLDS.values():
        assert gym.spec(env_id).max_episode_steps is None  # the env owns its time limit
    env = gym.make(GRID_WORLDS["risky_grid_world"], max_steps=7, trap_terminal=True,
                   timeout_is_terminal=False)
    assert (env.unwrapped.max_steps, env.unwrapped.trap_terminal) == (7, True)
    assert env.unwrapped.timeout_is_terminal is False


def test_spaces_and_reset():
    for name in GRID_WORLDS:
        env = SPEC[name][0]()
        assert env.action_space == gym.spaces.Discrete(4)
        assert env.observation_space == gym.spaces.Box(0.0, 2.0, (2,), np.float32)
        obs, info = env.reset(seed=0)
        assert obs.dtype == np.float32 and obs.tolist() == [1.0, 0.0]
        assert info == {"cell": (1, 0)}
        with pytest.raises(ValueError):
            env.step(4)


def test_step_before_reset_and_after_end_raise():
    env = RiskyRewards()
    with pytest.raises(RuntimeError):
        env.step(0)
    env.reset(seed=0)
    run(env, [LEFT, UP, UP])
    with pytest.raises(RuntimeError):
        env.step(0)


# --------------------------------------------------------------------------- dynamics


@pytest.mark.parametrize("name", sorted(SPEC))
def test_tabular_model_matches_spec_for_every_cell_and_action(name):
    env = SPEC[name][0]()
    for cell in CELLS:
        for action in range(4):
            target, branches = spec_branches(name, cell, action)
            for flag in (False, True):
                outs = env.outcomes(cell, action, flag)
                assert {o.next_cell: o.probability for o in outs} == pytest.approx(branches)
                assert math.isclose(sum(o.probability for o in outs), 1.0)
                for o in outs:
                    components, terminal = spec_cell_rule(name, o.next_cell)
                    assert np.allclose(o.reward_components, components, rtol=0, atol=1e-12)
                    assert len(o.reward_components) == len(components)
                    assert o.terminal == terminal
                    if name == "risky_grid_world":
                        expected = flag or target == (1, 1) or o.next_cell == (1, 1)
                    else:
                        expected = flag
                    assert o.new_flag == expected


@pytest.mark.parametrize("name", sorted(SPEC))
def test_step_reaches_exactly_the_spec_cells(name):
    """The real step() from every cell and action, with the wind's branches all seen."""
    env = SPEC[name][0]()
    env.reset(seed=123)
    for cell in CELLS:
        for action in range(4):
            _, branches = spec_branches(name, cell, action)
            seen = set()
            for _ in range(60):  # a branch of p >= 0.25 is missed with prob. < 4e-8
                env.reset(options={"cell": cell})
                obs, _, terminated, _, info = env.step(action)
                assert info["cell"] in branches
                assert obs.tolist() == list(map(float, info["cell"]))
                assert terminated == spec_cell_rule(name, info["cell"])[1]
                seen.add(info["cell"])
            assert seen == set(branches)


def test_wind_pushes_left_after_the_move():
    env = RiskyTransitions()
    env.reset(seed=0)
    cells = set()
    for _ in range(50):
        env.reset(options={"cell": (1, 1)})
        cells.add(env.step(RIGHT)[4]["cell"])  # move to (2, 1), maybe pushed back to (1, 1)
    assert cells == {(2, 1), (1, 1)}
    # The wind acts after a move into a goal, and can push the agent onto the other goal.
    branches = {o.next_cell: o.probability for o in env.outcomes((1, 0), RIGHT)}
    assert branches == {(2, 0): 0.5, (1, 0): 0.5}
    assert {o.next_cell for o in env.outcomes((2, 1), UP)} == {(2, 2), (1, 2)}
    assert [o.terminal for o in env.outcomes((1, 1), UP)] == [False, True]  # (1,2) | (0,2)


@pytest.mark.parametrize("name", sorted(SPEC))
def test_reward_distributions(name):
    """Every (cell, action): branch frequencies and each reward component's weight, mean
    and standard deviation against the spec. Components are >= 1.8 apart (18 sigma), so
    a reward is attributed to the nearest component mean without error."""
    env = SPEC[name][0]()
    env.reset(seed=2024)
    n = 400
    for cell in CELLS:
        for action in range(4):
            _, branches = spec_branches(name, cell, action)
            by_cell: dict = {c: [] for c in branches}
            for _ in range(n):
                env.reset(options={"cell": cell})
                _, reward, _, _, info = env.step(action)
                by_cell[info["cell"]].append(reward)
            for nxt, p in branches.items():
                rewards = np.array(by_cell[nxt])
                assert abs(len(rewards) / n - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-12
                components = spec_cell_rule(name, nxt)[0]
                means = np.array([m for _, m in components])
                nearest = np.abs(rewards[:, None] - means).argmin(1)
                for k, (w, mu) in enumerate(components):
                    part = rewards[nearest == k]
                    m = len(rewards)
                    assert abs(len(part) / m - w) <= 5 * math.sqrt(w * (1 - w) / m) + 1e-12
                    if len(part) >= 20:
                        assert abs(part.mean() - mu) <= 5 * 0.1 / math.sqrt(len(part))
                        assert abs(part.std() - 0.1) <= 5 * 0.1 / math.sqrt(2 * len(part))


def test_pooled_reward_moments():
    """Larger samples of the three mixtures that matter most."""
    n = 20000
    cases = [
        (RiskyRewards(), (1, 2), RIGHT, (2, 2), [(0.75, 1.0), (0.25, -1.0)]),
        (RiskyRewards(), (1, 2), LEFT, (0, 2), [(1.0, 0.3)]),
        (RiskyGridWorld(), (1, 0), UP, (1, 1), [(0.75, -0.2), (0.25, -2.0)]),
    ]
    for env, start, action, landing, mix in cases:
        env.reset(seed=7)
        rewards = []
        while len(rewards) < n:
            env.reset(options={"cell": start})
            _, r, _, _, info = env.step(action)
            if info["cell"] == landing:
                rewards.append(r)
        rewards = np.array(rewards)
        mean = sum(w * m for w, m in mix)
        var = sum(w * (0.01 + m * m) for w, m in mix) - mean**2
        assert abs(rewards.mean() - mean) <= 5 * math.sqrt(var / n)
        assert abs(rewards.var() - var) <= 0.05 * var + 5 * 0.01 * math.sqrt(2 / n)


# --------------------------------------------------------------------------- time limit


@pytest.mark.parametrize("timeout_is_terminal", [True, False])
def test_time_limit_conventions(timeout_is_terminal):
    env = RiskyRewards(timeout_is_terminal=timeout_is_terminal)
    env.reset(seed=0)
    for t in range(1, 10):
        _, _, terminated, truncated, info = env.step(DOWN)
        assert not terminated and not truncated and "risk_outcome" not in info, t
    _, _, terminated, truncated, info = env.step(DOWN)
    assert (terminated, truncated) == (timeout_is_terminal, not timeout_is_terminal)
    assert info["risk_outcome"] == 0 and info["timeout"] is True and env.steps == 10

    # A goal reached on the last allowed step is a real termination either way.
    env = RiskyRewards(max_steps=3, timeout_is_terminal=timeout_is_terminal)
    env.reset(seed=0)
    steps = run(env, [LEFT, UP, UP])
    assert [s[2:4] for s in steps] == [(False, False), (False, False), (True, False)]
    assert steps[-1][4]["risk_outcome"] == 1 and steps[-1][4]["timeout"] is False

    env = RiskyGridWorld(max_steps=4, timeout_is_terminal=timeout_is_terminal)
    env.reset(seed=0)
    assert len(run(env, [DOWN] * 10)) == 4


# --------------------------------------------------------------------------- R_s


def final_info(env, actions, seed):
    env.reset(seed=seed)
    steps = run(env, actions)
    assert steps[-1][2] or steps[-1][3]
    return steps[-1][4]


def test_risk_outcome_risky_rewards():
    env = RiskyRewards()
    assert final_info(env, [LEFT, UP, UP], 0)["risk_outcome"] == 1
    assert final_info(env, [RIGHT, UP, UP], 0)["risk_outcome"] == -1
    assert final_info(env, [UP, UP] + [DOWN] * 8, 0)["risk_outcome"] == 0


def test_risk_outcome_two_stage():
    env = TwoStage()
    # The coin: UP from the start lands on (1, 1) or, pushed by the wind, on (0, 1).
    assert {o.next_cell: o.probability for o in env.outcomes((1, 0), UP)} == pytest.approx({
        (1, 1): 0.6, (0, 1): 0.4})
    outcomes = set()
    for seed in range(40):  # both sides of the coin with prob. 1 - 2^-39
        env.reset(seed=seed)
        (_, _, _, _, info), = run(env, [UP])
        second = RIGHT if info["cell"] == (1, 1) else UP  # a safe goal either way
        info = run(env, [second])[-1][4]
        assert info["cell"] in {(2, 1), (0, 2)} and info["risk_outcome"] == 1
        env.reset(options={"cell": (1, 1)})
        info = run(env, [UP])[-1][4]
        outcomes.add(info["risk_outcome"])
    assert outcomes == {-1}
    assert final_info(env, [DOWN] * 10, 0)["risk_outcome"] == 0


def test_risk_outcome_risky_transitions():
    env = RiskyTransitions()
    # The left column is out of the wind's reach: deterministic green path.
    info = final_info(env, [LEFT, UP, UP], 0)
    assert (info["cell"], info["risk_outcome"]) == ((0, 2), 1)
    outcomes = set()
    for seed in range(40):
        info = final_info(env, [RIGHT] * 10, seed)
        expected = -1 if info["cell"] == (2, 0) else 0
        assert info["risk_outcome"] == expected and info["timeout"] == (expected == 0)
        outcomes.add(info["risk_outcome"])
    assert -1 in outcomes
    assert final_info(env, [DOWN] * 10, 0)["risk_outcome"] == 0


def test_risk_outcome_risky_grid_world_sticky_flag():
    env = RiskyGridWorld()
    # Green: around the trap on the left; the flag is never set.
    for seed in range(20):
        info = final_info(env, [LEFT, UP, UP] + [RIGHT] * 7, seed)
        assert info["risk_outcome"] == (1 if info["cell"] == (1, 2) else 0)
    # Aiming at the trap sets the flag for good, even if the objective is reached later
    # via the left column (UP lands in (1,1) or, pushed, (0,1); LEFT -> (0,1) either way).
    reached = 0
    for seed in range(20):
        env.reset(seed=seed)
        steps = run(env, [UP, LEFT, UP] + [RIGHT] * 7)
        assert [s[4]["cell"] for s in steps[1:3]] == [(0, 1), (0, 2)]
        assert steps[-1][4]["risk_outcome"] == -1
        reached += steps[-1][4]["cell"] == (1, 2)
    assert reached
    # ... and through a timeout.
    assert final_info(env, [UP] + [DOWN] * 9, 0)["risk_outcome"] == -1
    # Objective through the trap: -1.
    assert final_info(env, [UP] * 10, 3)["risk_outcome"] == -1


def test_grid_world_flag_attempt_pushed_aside_and_pushed_into_trap():
    env = RiskyGridWorld()
    env.reset(seed=0)
    pushed_aside = pushed_in = missed = 0
    for _ in range(200):
        env.reset(options={"cell": (1, 0)})
        info = env.step(UP)[4]
        assert env.shortcut_flag  # aimed at the trap, wherever the wind left the agent
        pushed_aside += info["cell"] == (0, 1)
        env.reset(options={"cell": (2, 0)})
        info = env.step(UP)[4]  # aims at (2, 1); the wind may push it into the trap
        assert env.shortcut_flag == (info["cell"] == (1, 1))
        pushed_in += info["cell"] == (1, 1)
        missed += info["cell"] == (2, 1)
    assert pushed_aside and pushed_in and missed
    # Leaving the trap keeps the flag; a fresh episode clears it.
    env.reset(options={"cell": (1, 0)})
    run(env, [UP, DOWN, DOWN, LEFT])
    assert env.shortcut_flag
    env.reset()
    assert not env.shortcut_flag


def test_grid_world_trap_terminal_flag():
    default, paper = RiskyGridWorld(), RiskyGridWorld(trap_terminal=True)
    for env, terminal in ((default, False), (paper, True)):
        env.reset(seed=1)
        for _ in range(100):
            env.reset(options={"cell": (1, 0)})
            _, _, terminated, _, info = env.step(UP)
            if info["cell"] == (1, 1):
                assert terminated == terminal
                if terminal:
                    assert info["risk_outcome"] == -1 and info["timeout"] is False
                break
        else:
            pytest.fail("the trap was never entered")


# --------------------------------------------------------------------------- determinism


def trajectory(env, seed, actions):
    obs, _ = env.reset(seed=seed)
    out = [obs.tolist()]
    for _ in range(3):  # several episodes: reset() without a seed continues the stream
        for a in actions:
            obs, r, term, trunc, info = env.step(a)
            out.append((obs.tolist(), r, term, trunc, sorted(info.items())))
            if term or trunc:
                break
        env.reset()
    return out


@pytest.mark.parametrize("name", sorted(GRID_WORLDS))
def test_seeding_repeats_exactly(name):
    actions = list(np.random.default_rng(0).integers(0, 4, size=10))
    a = trajectory(gym.make(GRID_WORLDS[name]), 11, actions)
    b = trajectory(gym.make(GRID_WORLDS[name]), 11, actions)
    c = trajectory(gym.make(GRID_WORLDS[name]), 12, actions)
    assert a == b
    assert a != c


@pytest.mark.parametrize("name", sorted(GRID_WORLDS))
@pytest.mark.parametrize("clone", ["pickle", "deepcopy"])
def test_clone_mid_episode_continues_identically(name, clone):
    env = gym.make(GRID_WORLDS[name], max_steps=50)
    env.reset(seed=5)
    for a in (LEFT, UP, RIGHT):
        if any(env.step(a)[2:4]):
            env.reset()
    twin = pickle.loads(pickle.dumps(env)) if clone == "pickle" else copy.deepcopy(env)
    assert twin.unwrapped.cell == env.unwrapped.cell
    assert twin.unwrapped.steps == env.unwrapped.steps
    actions = np.random.default_rng(1).integers(0, 4, size=60)

    def continue_(e):
        out = []
        for a in actions:
            obs, r, term, trunc, info = e.step(a)
            out.append((obs.tolist(), r, term, trunc, sorted(info.items())))
            if term or trunc:
                e.reset()
        return out

    assert continue_(env) == continue_(twin)


def test_step_is_cheap():
    """A loose guard only (shared machine): the measured cost is a few microseconds."""
    import timeit

    env = RiskyGridWorld(max_steps=10**9)
    env.reset(seed=0)
    per_step = min(timeit.repeat(lambda: env.step(DOWN), number=2000, repeat=5)) / 2000
    assert per_step < 50e-6


def test_the_tables_are_made_once_per_class_and_settings():
    """An evaluation makes hundreds of copies: those of one class and settings share one
    model (read-only); other settings get their own."""
    first, second = (RiskyGridWorld(max_steps=10) for _ in range(2))
    assert first._model is second._model and first._sampler is second._sampler
    assert RiskyGridWorld(max_steps=11)._model is not first._model
    assert RiskyGridWorld(trap_terminal=True)._model is not first._model
    assert RiskyRewards()._model is not first._model
