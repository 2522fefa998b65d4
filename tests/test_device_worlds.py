"""The worlds on the device (env.backend=torch) against their gymnasium versions: the same
one-step laws exactly on the tabular worlds, the same episodes where a world is
deterministic, the same laws by statistical tests where it is not, per-copy seeding."""

from __future__ import annotations

import json
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from gymnasium.envs.toy_text.utils import categorical_sample
from scipy import stats

from rs_lightning.envs.cliff_walking import exact_return_distribution, lane_policy
from rs_lightning.envs.copies import make_copies
from rs_lightning.envs.device_worlds import (
    NavigationCopies,
    TabularCopies,
    choose,
    device_copies,
    host_answer,
    uniforms,
)
from rs_lightning.envs.factory import make_env
from rs_lightning.envs.grid_worlds import CELLS, GRID_SIZE, GridWorld
from rs_lightning.envs.risky_navigation import path_law
from rs_lightning.errors import ConfigError
from tests.conftest import ROOT, run_and_resume_from_step_100
from tests.warm_python import command as python_command

# A statistical test below fails a correct implementation with probability at most this
# (each draws from fixed seeds, so a run that passes passes every time).
FALSE_ALARM = 1e-3


def env_config(env_id: str, max_episode_steps=None, backend: str = "torch", **kwargs):
    return SimpleNamespace(id=f"rs_lightning/{env_id}", kwargs=kwargs,
                           max_episode_steps=max_episode_steps,
                           observation_normalization="none", backend=backend)


TABULAR = {
    "risky_rewards": env_config("RiskyRewards-v0"),
    "risky_transitions": env_config("RiskyTransitions-v0", timeout_is_terminal=False),
    "risky_grid_world": env_config("RiskyGridWorld-v0"),
    "risky_grid_world_trap_terminal": env_config("RiskyGridWorld-v0", trap_terminal=True),
    "two_stage": env_config("TwoStage-v0"),
    "cliff_walking": env_config("SlipperyCliffWalking-v0", 100, slip_probability=0.03,
                                cliff_reward=-5),
    "trading": env_config("Trading-v0", 5),
    "american_put": env_config("AmericanPut-v0", 8),
}


def gymnasium_law(env, state: int, action: int) -> dict:
    """The gymnasium world's own one-step law from the device state index ``state``:
    {(next observation, reward mean, terminal, R_s if it ends there): probability}."""
    base = env.unwrapped
    law = defaultdict(float)
    if isinstance(base, GridWorld):
        cell, flag = CELLS[state // 2], bool(state % 2)
        for out in base.outcomes(cell, action, flag):
            obs = tuple(base._observations[out.next_cell].tolist())
            outcome = base.risk_outcome(out.next_cell, out.terminal, out.new_flag)
            for p, mean in out.reward_components:
                law[obs, round(mean, 12), out.terminal, outcome] += out.probability * p
        return law
    falls = hasattr(base, "falls")
    s, flag = (state // 2, bool(state % 2)) if falls else (state, False)
    for i, (p, s2, r, done) in enumerate(base.P[s][action]):
        obs = tuple(env.observation(s2).tolist())
        outcome = (base.risk_outcome(flag or base.falls[(s, action)][i], done) if falls
                   else None)
        law[obs, round(r, 12), done, outcome] += p
    return law


def device_law(copies: TabularCopies, state: int, action: int, with_outcome: bool) -> dict:
    law = defaultdict(float)
    for p, nxt, mean, terminal in copies.law.branches(state, action):
        obs = tuple(copies.law.observations[nxt].tolist())
        outcome = float(copies.law.outcome[nxt, int(terminal)]) if with_outcome else None
        law[obs, round(mean, 12), terminal, outcome] += p
    return law


@pytest.mark.parametrize("name", TABULAR)
def test_every_state_and_action_has_the_gymnasium_worlds_one_step_law(name):
    env = make_env(TABULAR[name])
    copies = device_copies(env, [0])
    n_states = copies.law.observations.shape[0]
    if copies.law.outcome is None:  # the finite-horizon worlds: R_s of the total reward
        totals = torch.tensor([-1.0, -1e-12, 0.0, 1e-12, 0.3])
        assert copies.law.outcome_of_total(totals).tolist() == [
            env.unwrapped.risk_outcome(float(t)) for t in totals]
    for state in range(n_states):
        for action in range(copies.law.n_actions):
            expected = gymnasium_law(env, state, action)
            got = device_law(copies, state, action, copies.law.outcome is not None)
            assert got.keys() == expected.keys(), (state, action)
            for key, p in expected.items():
                assert got[key] == pytest.approx(p, abs=1e-12), (state, action, key)
    if isinstance(env.unwrapped, GridWorld):
        assert copies.law.reward_std == 0.1 and copies.law.time_limit == 10
        assert copies.law.timeout_is_terminal == env.unwrapped.timeout_is_terminal
    else:
        assert copies.law.reward_std == 0.0
        assert copies.law.time_limit == TABULAR[name].max_episode_steps


def test_a_branch_is_chosen_as_gymnasium_chooses_it():
    probabilities = [0.25, 0.5, 0.125, 0.125]
    cumulative = np.cumsum(probabilities)
    for u in (0.0, 0.25 - 1e-17, 0.25, 0.5, 0.75, 0.875, 0.999999):
        class Fixed:
            def random(self):
                return u
        table = torch.tensor(cumulative[:-1].tolist() + [np.inf], dtype=torch.float64)
        assert int(choose(table, torch.tensor(u, dtype=torch.float64))) == \
            categorical_sample(probabilities, Fixed())


def test_the_random_streams_are_uniform_and_each_copys_own():
    keys = torch.tensor([[1, 2], [3, 4]], dtype=torch.int64)
    draws = uniforms(keys.repeat(5000, 1), torch.arange(10000), 4)
    assert draws.shape == (10000, 4) and 0.0 <= float(draws.min()) and float(draws.max()) < 1.0
    for column in draws.T:
        assert stats.kstest(column.numpy(), "uniform").pvalue > FALSE_ALARM
    assert abs(float(torch.corrcoef(draws.T)[0, 1])) < 0.05


def run(copies, actions: np.ndarray):
    """Every step's answer of ``copies`` to ``actions[T, M, ...]``."""
    steps = [copies.step(a) for a in actions]
    return {field: np.stack([getattr(s, field) for s in steps])
            for field in ("next_obs", "reward", "terminated", "ended", "risk_outcome")}


@pytest.mark.parametrize("config, exact_rewards", [
    (env_config("SlipperyCliffWalking-v0", 100, slip_probability=0.0), True),
    (env_config("RiskyRewards-v0"), False),  # deterministic moves, Gaussian rewards
    (env_config("RiskyRewards-v0", timeout_is_terminal=False), False),
])
def test_deterministic_worlds_play_the_same_episodes_as_gymnasium(config, exact_rewards):
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 4, (400, 8))
    if exact_rewards:  # mostly right: some episodes reach the goal, some fall
        actions = rng.choice([0, 1, 1, 1, 2, 3], (400, 8))
    seeds = list(range(8))
    gym_run = run(make_copies(SimpleNamespace(**{**vars(config), "backend": "gymnasium"}),
                              seeds), actions)
    device_run = run(make_copies(config, seeds), actions)
    for field in ("next_obs", "terminated", "ended"):
        np.testing.assert_array_equal(device_run[field], gym_run[field], err_msg=field)
    ended = gym_run["ended"]
    assert ended.sum() > 30 and (gym_run["terminated"] != ended).any() == (
        not getattr(config, "kwargs").get("timeout_is_terminal", True)
        or config.max_episode_steps is not None)
    np.testing.assert_array_equal(device_run["risk_outcome"][ended], gym_run["risk_outcome"][ended])
    if exact_rewards:
        np.testing.assert_array_equal(device_run["reward"], gym_run["reward"])
    else:  # the same step cost off the goals (the moves are deterministic), other noise
        noise = (device_run["reward"] - gym_run["reward"])[~ended]
        assert abs(noise.mean()) < 0.02 and 0.12 < noise.std() < 0.16  # sqrt(2) x 0.1


def test_a_copys_episodes_depend_on_its_seed_alone_and_resume_exactly():
    config = TABULAR["risky_transitions"]
    actions = np.random.default_rng(1).integers(0, 4, (60, 3))
    together = run(make_copies(config, [5, 6, 7]), actions)
    alone = run(make_copies(config, [7]), actions[:, 2:])
    for field in together:
        np.testing.assert_array_equal(together[field][:, 2], alone[field][:, 0])
    assert not np.array_equal(together["reward"][:, 0], together["reward"][:, 1])
    copies = make_copies(config, [5, 6, 7])
    run(copies, actions[:30])
    resumed = make_copies(config, [0, 0, 0])
    resumed.load_state_dict(copies.state_dict())
    rest = run(resumed, actions[30:])
    for field in together:
        np.testing.assert_array_equal(rest[field], together[field][30:])
    with pytest.raises(ConfigError, match="env.backend"):
        make_copies(SimpleNamespace(**{**vars(config), "backend": "gymnasium"}),
                    [5, 6, 7]).load_state_dict(copies.state_dict())


def test_an_accelerators_answer_comes_to_the_host_whole_in_one_copy():
    copies = make_copies(TABULAR["risky_grid_world"], list(range(6)))
    out = copies.step_tensors(torch.tensor([0, 1, 2, 3, 3, 3]))
    answer, obs = host_answer(out, copies.obs_tensor())
    for field, value in zip(answer._fields, answer):
        expected = getattr(out, field).numpy()
        assert value.dtype == expected.dtype, field
        np.testing.assert_array_equal(value, expected, err_msg=field)
    np.testing.assert_array_equal(obs, copies.obs())


def test_reseeding_restarts_a_copy_on_its_new_stream():
    config = TABULAR["trading"]
    actions = np.random.default_rng(2).integers(0, 3, (12, 2))
    copies = make_copies(config, [1, 2])
    run(copies, actions[:3])
    copies.reseed([1], [9])
    fresh = run(make_copies(config, [9]), actions[3:, 1:])
    again = run(copies, actions[3:])
    np.testing.assert_array_equal(again["reward"][:, 1], fresh["reward"][:, 0])


def chi_square_pvalue(counts: dict, probabilities: dict, n: int) -> float:
    """Pearson's test of observed ``counts`` against the law ``probabilities``, the cells
    expected fewer than 5 times pooled."""
    observed, expected, pooled_o, pooled_e = [], [], 0.0, 0.0
    assert set(counts) <= set(probabilities), set(counts) - set(probabilities)
    for key, p in probabilities.items():
        if n * p < 5:
            pooled_o, pooled_e = pooled_o + counts.get(key, 0), pooled_e + n * p
        else:
            observed.append(counts.get(key, 0))
            expected.append(n * p)
    if pooled_e > 0:
        observed.append(pooled_o)
        expected.append(pooled_e)
    expected = np.array(expected) * sum(observed) / sum(expected)
    return stats.chisquare(observed, expected).pvalue


def first_episode_returns(copies, policy) -> np.ndarray:
    """The undiscounted return of each copy's first episode under ``policy(obs) -> actions``."""
    total = np.zeros(len(copies))
    done = np.zeros(len(copies), dtype=bool)
    while not done.all():
        step = copies.step(policy(copies.obs()))
        total += np.where(done, 0.0, step.reward)
        done |= step.ended
    return total


def test_cliff_walking_episodes_follow_the_exact_return_law():
    config = TABULAR["cliff_walking"]
    env = make_env(config)
    policy = lane_policy(2)  # along the cliff: the falls make a spread law
    values, probs = exact_return_distribution(env.unwrapped.P, policy, 100)
    copies = make_copies(config, list(range(4000)))
    returns = first_episode_returns(copies, lambda obs: policy[obs.argmax(1)])
    counts = dict(zip(*np.unique(returns.round().astype(int), return_counts=True)))
    assert chi_square_pvalue(counts, dict(zip(values.tolist(), probs)), 4000) > FALSE_ALARM


def test_one_step_from_a_state_samples_its_table():
    copies = make_copies(TABULAR["risky_grid_world"], list(range(20000)))
    state = (1 * GRID_SIZE + 0) * 2  # the start, no flag
    step = copies.step(np.full(20000, 3))  # up, into the trap's column with the wind
    expected = defaultdict(float)
    for p, nxt, _, _ in copies.law.branches(state, 3):
        expected[tuple(copies.law.observations[nxt].tolist())] += p
    counts = defaultdict(int)
    for row in step.next_obs:
        counts[tuple(row.tolist())] += 1
    assert chi_square_pvalue(counts, expected, 20000) > FALSE_ALARM


# ------------------------------------------------------------------------ risky navigation
NAVIGATION = env_config("RiskyNavigation-v0", 100, gate=0.25)


def test_navigation_without_strikes_moves_exactly_as_gymnasium():
    config = env_config("RiskyNavigation-v0", 100, gate=0.25, strike_probability=0.0)
    rng = np.random.default_rng(3)
    # Eastward on average, with wide swings: fences, gates, the goal, the time limit.
    actions = np.clip(rng.normal([0.5, 0.0], 0.9, (400, 12, 2)), -1, 1).astype(np.float32)
    seeds = list(range(12))
    gym_run = run(make_copies(SimpleNamespace(**{**vars(config), "backend": "gymnasium"}),
                              seeds), actions)
    device_run = run(make_copies(config, seeds), actions)
    for field in ("terminated", "ended"):
        np.testing.assert_array_equal(device_run[field], gym_run[field], err_msg=field)
    ended = gym_run["ended"]
    np.testing.assert_array_equal(device_run["risk_outcome"][ended], gym_run["risk_outcome"][ended])
    np.testing.assert_allclose(device_run["next_obs"], gym_run["next_obs"], atol=1e-6)
    np.testing.assert_allclose(device_run["reward"], gym_run["reward"], atol=1e-9)
    assert gym_run["terminated"].sum() > 5 and (gym_run["ended"] & ~gym_run["terminated"]).any()


def test_navigation_returns_of_a_path_follow_its_exact_law():
    copies = make_copies(NAVIGATION, list(range(5000)))
    returns = first_episode_returns(copies, lambda obs: np.tile([1.0, 0.0], (len(obs), 1)))
    path = [(0.1 * i, 0.0) for i in range(1, 20)]  # straight east: 19 steps, 13 in the region
    atoms, probs = path_law(path)
    atom_of = {round(float(a), 6): p for a, p in zip(atoms, probs)}
    counts = dict(zip(*np.unique(returns.round(6), return_counts=True)))
    assert chi_square_pvalue(counts, atom_of, 5000) > FALSE_ALARM


def test_navigation_exploring_starts_have_the_gymnasium_law():
    config = env_config("RiskyNavigation-v0", 100, gate=0.25, start="anywhere")
    device_starts = make_copies(config, list(range(1000))).obs()
    gym_starts = make_copies(SimpleNamespace(**{**vars(config), "backend": "gymnasium"}),
                             list(range(1000))).obs()
    for axis in (0, 1):
        assert stats.ks_2samp(device_starts[:, axis], gym_starts[:, axis]).pvalue > FALSE_ALARM
    mixed = make_copies(env_config("RiskyNavigation-v0", 100, start="mixed"),
                        list(range(1000))).obs()
    at_origin = (mixed == 0).all(1).mean()
    assert stats.binomtest(int(at_origin * 1000), 1000, 0.5).pvalue > FALSE_ALARM
    assert isinstance(device_copies(make_env(config), [0]), NavigationCopies)


# ------------------------------------------------------------------------ from the command line
def test_training_and_evaluation_run_on_the_device_worlds(tmp_path):
    import subprocess

    out = tmp_path / "run"
    result = subprocess.run(
        [*python_command(), str(ROOT / "train.py"), "env=risky_transitions", "env.backend=torch",
         "env.num_envs=4", "agent=dqn", "agent.hidden_sizes=[16]", "trainer.max_steps=60",
         "evaluation.episodes=64", "evaluation.every_n_steps=0", "logger=none",
         "callbacks.progress_bar=false", f"hydra.run.dir={out}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "backend: torch" in (out / "config.yaml").read_text()
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation["episodes"] == 64


def test_members_on_device_worlds_resume_exactly_from_a_checkpoint(compose, tmp_path):
    """Two members of two copies each: the run from its step-100 checkpoint (in the middle
    of a block of draws) ends exactly as the uninterrupted one."""
    def make_config(*more):
        return compose(["env=risky_transitions", "env.backend=torch", "agent=dqn",
                        "agent.hidden_sizes=[16]", "parallel_seeds=2", "env.num_envs=2",
                        "debug=quick", "logger=none", "callbacks.progress_bar=false",
                        "learning.warmup_steps=32", "trainer.max_steps=200",
                        "trainer.checkpoint_every_n_steps=100", "evaluation.episodes=20",
                        "evaluation.every_n_steps=0", *more])

    run_and_resume_from_step_100(make_config, tmp_path, seeds=2)
