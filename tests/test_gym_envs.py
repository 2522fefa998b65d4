"""Any gymnasium environment: spaces, refusals, presets, reward scaling, vector collection,
the cliff-walking preset's risk property (exact dynamic programming) and evaluation."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import tests.gym_test_envs  # noqa: F401  (registers TinyImage-v0, ShiftedCounter-v0)
from rs_lightning.app.train import run
from rs_lightning.config.schema import EnvSection
from rs_lightning.engine.behaviour import Draw
from rs_lightning.engine.experience import Collector
from rs_lightning.engine.replay import ReplayBuffer, ReplayMemory
from rs_lightning.engine.rollout import Rollout, learning_reward
from rs_lightning.envs.cliff_walking import (
    COLUMNS,
    START_STATE,
    SlipperyCliffWalking,
    cell_of,
    exact_return_distribution,
    lane_policy,
    lower_quantile,
    nominal_path,
    optimal_expected_values,
)
from rs_lightning.envs.copies import make_copies
from rs_lightning.envs.factory import make_env
from rs_lightning.envs.gym_support import bounds_normalization, discounted_return_bounds
from rs_lightning.errors import ConfigError
from rs_lightning.objectives import EpisodeState
from tests.conftest import CONF, ROOT
from tests.warm_python import command as python_command

PRESETS = ("cartpole", "cliff_walking", "frozen_lake", "lunar_lander")


def env_section(**fields) -> EnvSection:
    base = dict(id="CartPole-v1", kwargs={}, gamma=0.99, reward_clip=None, return_min=0.0,
                return_max=1.0, reward_scale=1.0, max_episode_steps=None,
                observation_normalization="none", num_envs=1, backend="gymnasium")
    return EnvSection(**{**base, **fields})


def preset(name: str) -> EnvSection:
    node = OmegaConf.merge(OmegaConf.structured(EnvSection), OmegaConf.load(CONF / "env" / f"{name}.yaml"))
    return OmegaConf.to_object(node)


def box2d_installed() -> bool:
    try:
        import Box2D  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------ observation spaces
@pytest.mark.parametrize("env_id, kwargs, cells", [
    ("FrozenLake-v1", {"map_name": "8x8"}, 64),
    ("CliffWalking-v1", {}, 48),
    ("rs_lightning/SlipperyCliffWalking-v0", {"slip_probability": 0.1}, 48),
])
def test_discrete_observations_are_one_hot(env_id, kwargs, cells):
    env = make_env(env_section(id=env_id, kwargs=kwargs))
    assert env.observation_space.shape == (cells,)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float32 and obs.sum() == 1.0
    start = int(np.argmax(obs))
    assert start == env.unwrapped.s  # the hot index is the state
    obs, *_ = env.step(1)
    assert obs.sum() == 1.0 and int(np.argmax(obs)) == env.unwrapped.s


def test_discrete_spaces_with_a_start_are_shifted():
    env = make_env(env_section(id="tests.gym_test_envs:ShiftedCounter-v0"))
    assert env.action_space == gym.spaces.Discrete(3)
    obs, _ = env.reset(seed=0)
    assert obs.tolist() == [0, 0, 1, 0, 0]  # observation 12 of Discrete(5, start=10)
    obs, reward, *_ = env.step(2)  # the agent's action 2 is the env's +1
    assert obs.tolist() == [0, 0, 0, 1, 0] and reward == 3.0


def test_box_observations_are_fed_as_they_are():
    raw = gym.make("CartPole-v1")
    env = make_env(env_section(observation_normalization="none"))
    assert env.observation_space == raw.observation_space
    assert np.array_equal(env.reset(seed=3)[0], raw.reset(seed=3)[0])


def test_bounds_normalisation_maps_finite_bounds_onto_minus_one_one():
    centre, half, bounded = bounds_normalization(np.array([-4.8, -np.inf, 0.0, -3.4e38]),
                                                 np.array([4.8, np.inf, 2.0, 3.4e38]))
    assert centre.tolist() == [0.0, 0.0, 1.0, 0.0]
    assert half.tolist() == pytest.approx([4.8, 1.0, 1.0, 1.0])
    assert bounded.tolist() == [True, False, True, False]

    raw = gym.make("CartPole-v1")
    env = make_env(env_section(observation_normalization="bounds"))
    obs, raw_obs = env.reset(seed=5)[0], raw.reset(seed=5)[0]
    assert obs[0] == pytest.approx(raw_obs[0] / 4.8) and obs[2] == pytest.approx(raw_obs[2] / 0.41887903)
    assert obs[1] == raw_obs[1] and obs[3] == raw_obs[3]  # unbounded velocities unchanged
    assert env.observation_space.low[0] == -1.0 and env.observation_space.high[2] == 1.0


def test_bounds_normalisation_needs_a_bounded_dimension():
    make_env(env_section(id="tests.gym_test_envs:Unbounded-v0"))  # fed as it is: fine
    with pytest.raises(ConfigError) as error:
        make_env(env_section(id="tests.gym_test_envs:Unbounded-v0", observation_normalization="bounds"))
    assert error.value.key == "env.observation_normalization" and "use none" in str(error.value)


# ------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("env_id, kwargs, words", [
    ("tests.gym_test_envs:UnboundedActions-v0", {},
     "Box(-inf, inf, (1,), float32); supported: Discrete actions, or a 1-D Box with finite"),
    ("tests.gym_test_envs:Video-v0", {}, "(2, 4, 4, 3), uint8); supported: a 1-D Box"),
    ("Blackjack-v1", {}, "Tuple(Discrete(32), Discrete(11), Discrete(2)); supported: a 1-D Box"),
])
def test_unsupported_spaces_are_refused_saying_what_is_supported(env_id, kwargs, words):
    with pytest.raises(ConfigError) as error:
        make_env(env_section(id=env_id, kwargs=kwargs))
    assert error.value.key == "env.id"
    assert str(error.value).startswith(f"env.id: {env_id!r} has ") and words in str(error.value)
    assert "\n" not in str(error.value)


def train_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, WANDB_MODE="offline")
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([*python_command(), str(ROOT / "train.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args, line", [
    (["env=pendulum"],
     "Error in config: agent: rs_umdqn_c picks among discrete actions, and 'Pendulum-v1' has "
     "continuous ones (a Box); allowed: dsac, ppo, tqc"),
    (["env=gym", "env.id=tests.gym_test_envs:Video-v0"],
     "Error in config: env.id: 'tests.gym_test_envs:Video-v0' has observation space "
     "Box(0, 255, (2, 4, 4, 3), uint8); supported: a 1-D Box"),
    (["env=gym"], "Error in config: env.id: a value is required here"),
], ids=["continuous actions", "video observations", "no id"])
def test_unsupported_environment_on_the_command_line(tmp_path, args, line):
    result = train_cli(*args, f"hydra.run.dir={tmp_path / 'run'}")
    lines = [text for text in result.stderr.splitlines() if text.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(line), result.stderr[-2000:]
    assert not (tmp_path / "run").exists()


def test_missing_box2d_names_the_extra_to_install(monkeypatch):
    # As on a machine without Box2D: its import fails and gymnasium's module is not loaded yet.
    monkeypatch.setitem(sys.modules, "Box2D", None)
    for name in [m for m in sys.modules if m.startswith("gymnasium.envs.box2d")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ConfigError) as error:
        make_env(preset("lunar_lander"))
    assert error.value.key == "env.id"
    assert "'LunarLander-v3' needs the optional extra 'box2d': pip install -e \".[box2d]\"" in str(error.value)


@pytest.mark.parametrize("key, value, allowed", [
    ("reward_scale", 0.0, "must be positive"),
    ("num_envs", 0, "must be a positive integer"),
    ("max_episode_steps", 0, "must be a positive integer or null"),
    ("observation_normalization", "zscore", "must be one of none, bounds"),
])
def test_bad_env_settings_name_the_key(compose, key, value, allowed):
    from rs_lightning.config.schema import validate

    with pytest.raises(ConfigError) as error:
        validate(compose(["env=cartpole", f"env.{key}={value}"]))
    assert error.value.key == f"env.{key}" and allowed in str(error.value)


# ------------------------------------------------------------------------ settings
def test_discounted_return_bounds():
    assert discounted_return_bounds(0.01, 0.01, 0.99, 500) == pytest.approx((0.01, 0.01 * (1 - 0.99**500) / 0.01))
    low, high = discounted_return_bounds(-1.0, 1.0, 0.9, None)
    assert low == pytest.approx(-10.0) and high == pytest.approx(10.0)
    with pytest.raises(ValueError):
        discounted_return_bounds(0, 1, 1.0, 10)


@pytest.mark.parametrize("name", PRESETS)
def test_presets_cover_the_returns_of_their_rewards(name):
    section = preset(name)
    if name == "lunar_lander" and not box2d_installed():
        pytest.skip("the box2d extra (pip install -e '.[box2d]')")
    env = make_env(section)
    assert isinstance(env.action_space, gym.spaces.Discrete)
    assert env.spec.max_episode_steps == section.max_episode_steps
    assert section.return_min < section.return_max and 0 < section.gamma < 1


def test_reward_scale_is_applied_for_learning_and_returns_stay_unscaled():
    assert learning_reward(-10.0, 0.1, None) == -1.0 and learning_reward(-10.0, 0.1, 0.5) == -0.5
    collector = one_member_collector(
        env_section(id="CartPole-v1"), ActionsOf(lambda obs, step: np.zeros(obs.shape[:2], np.int64)),
        copies=1, capacity=600, reward_scale=0.01)
    while not collector.ended_returns[0]:
        collector.collect()
    steps = collector.env_steps
    assert torch.allclose(collector.replay.reward[0, :steps], torch.full((steps,), 0.01))
    assert collector.ended_returns == [[float(steps)]]


# ------------------------------------------------------------------------ cliff walking
def test_slip_probability_zero_is_gymnasiums_cliff_walking():
    ours = SlipperyCliffWalking(slip_probability=0.0, cliff_reward=-100)
    theirs = gym.make("CliffWalking-v1").unwrapped
    assert {s: {a: [(p, s2, float(r), d) for p, s2, r, d in o] for a, o in acts.items()}
            for s, acts in theirs.P.items()} == ours.P


def test_slips_go_sideways_with_the_chosen_probability():
    env = SlipperyCliffWalking(slip_probability=0.2, cliff_reward=-10)
    outcomes = env.P[2 * COLUMNS + 5][1]  # moving right next to the cliff
    assert [(p, cell_of(s), r) for p, s, r, _ in outcomes] == [
        (0.8, (2, 6), -1.0), (0.1, (1, 5), -1.0), (pytest.approx(0.1), (3, 0), -10.0),
    ]
    assert all(sum(p for p, *_ in o) == pytest.approx(1.0) for acts in env.P.values() for o in acts.values())


def test_cliff_walking_reports_falls_as_the_risk_outcome():
    env = gym.make("rs_lightning/SlipperyCliffWalking-v0", slip_probability=0.0, cliff_reward=-10)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(1)  # right from the start: into the cliff
    assert reward == -10.0 and info["risk_outcome"] == -1.0
    env.reset(seed=0)
    for action in [0] + [1] * 11:
        *_, info = env.step(action)
        assert info["risk_outcome"] == 0.0
    _, _, terminated, _, info = env.step(2)
    assert terminated and info["risk_outcome"] == 1.0


def test_cliff_walking_preset_expectation_path_hugs_the_cliff_and_var_averse_path_keeps_away():
    """By exact dynamic programming on the preset's tabular model (its slip probability, cliff
    reward and time limit): the expectation-optimal policy walks the row next to the cliff,
    while VaR_rho (rho of conf/train.yaml) and the default utility U = 0.5 E + 0.5 VaR_rho
    prefer a path one row away from it."""
    section = preset("cliff_walking")
    rho = float(OmegaConf.load(CONF / "train.yaml").rho)
    env = SlipperyCliffWalking(**section.kwargs)
    horizon = section.max_episode_steps
    values, policy = optimal_expected_values(env.P, 48, 4, horizon)
    path = [cell_of(s) for s in nominal_path(env.P, policy)]
    assert path == [(3, 0)] + [(2, c) for c in range(COLUMNS)] + [(3, COLUMNS - 1)]

    laws = {row: exact_return_distribution(env.P, lane_policy(row), horizon) for row in (0, 1, 2)}
    for values_, probs in laws.values():
        assert probs.sum() == pytest.approx(1.0)
    mean = {row: float((v * p).sum()) for row, (v, p) in laws.items()}
    var = {row: lower_quantile(v, p, rho) for row, (v, p) in laws.items()}
    assert mean[2] > mean[1] > mean[0]  # along the cliff is best on average
    # The optimum differs from the lane only off the path (after a slip): it stays closer to
    # the lane by the cliff than to the next one.
    best = values[horizon, START_STATE]
    assert best >= mean[2] and best - mean[2] < mean[2] - mean[1]
    assert var[2] < var[1] and max(var, key=var.get) != 2  # and worst in its lower tail
    utility = {row: 0.5 * mean[row] + 0.5 * var[row] for row in laws}
    assert max(utility, key=utility.get) == 1
    assert (round(mean[2], 1), round(mean[1], 1), var[2], var[1]) == (-15.5, -15.9, -24.0, -17.0)

    # The exact law agrees with the environment itself (Monte Carlo, lane by the cliff).
    sim = gym.make("rs_lightning/SlipperyCliffWalking-v0", max_episode_steps=horizon, **section.kwargs)
    returns = []
    for episode in range(3000):
        state, _ = sim.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            state, reward, terminated, truncated, _ = sim.step(int(lane_policy(2)[state]))
            total += reward
            done = terminated or truncated
        returns.append(total)
    assert np.mean(returns) == pytest.approx(mean[2], abs=4 * np.std(returns) / np.sqrt(len(returns)))


# ------------------------------------------------------------------------ env copies
class ActionsOf:
    """A rollout policy whose actions ``[K, N]`` come from ``choose(obs, env_step)``."""

    device = torch.device("cpu")

    def __init__(self, choose) -> None:
        self.choose = choose

    def network(self, obs):
        raise AssertionError("no episode state here asks for a return distribution")

    def act(self, obs, env_step, state):
        return self.choose(obs, env_step)

    def draw(self, obs, env_step, state):
        return Draw(self.act(obs, env_step, state))


def one_member_collector(section, policy, copies: int, capacity: int,
                         reward_scale: float = 1.0, **schedule):
    """The engine's collector for one member (seed 0) on ``copies`` env copies, acting with
    ``policy``; ``schedule``: ``n_step``, ``updates_per_step``, ``batch_size``,
    ``warmup_steps``."""
    env = make_env(section)
    replay = ReplayMemory(capacity, env.observation_space.shape, seeds=[1])
    rollout = Rollout(make_copies(section, list(range(copies))), EpisodeState(), 1, copies,
                      reward_scale, None)
    return Collector(rollout, ReplayBuffer(replay, copies, section.gamma, **schedule), policy)


def test_env_copies_store_each_copy_with_its_own_final_state():
    section = env_section(id="rs_lightning/SlipperyCliffWalking-v0",
                          kwargs={"slip_probability": 0.0, "cliff_reward": -10},
                          max_episode_steps=5)
    seen_steps = []

    def policy(obs, step):  # up, up, ...
        seen_steps.append(step)
        return np.zeros(obs.shape[:2], dtype=np.int64)

    collector = one_member_collector(section, ActionsOf(policy), copies=3, capacity=100,
                                     reward_scale=0.5)
    for _ in range(5):
        assert collector.collect() == 3
    assert seen_steps == [0, 3, 6, 9, 12] and collector.env_steps == 15
    replay = collector.replay
    assert len(replay) == 15
    # Up from the start, then against the top wall: after 5 steps every copy is truncated at
    # (0, 0); the stored next state is that cell, not the reset start.
    last = replay.next_obs[0, 12:15].argmax(1).tolist()
    assert last == [0, 0, 0] and replay.terminated[0, 12:15].sum() == 0
    assert torch.equal(replay.reward[0, :15], torch.full((15,), -0.5))
    assert collector.pop_ended_episodes() == (((-5.0,) * 3,), ((0.0,) * 3,))
    assert collector.copies.obs().argmax(1).tolist() == [START_STATE] * 3


def test_env_copies_make_one_update_per_environment_step():
    policy = ActionsOf(lambda obs, step: np.full(obs.shape[:2], step % 2))
    collector = one_member_collector(env_section(id="CartPole-v1"), policy, copies=4,
                                     capacity=1000, batch_size=8, warmup_steps=10)
    batches = [collector.experience() for _ in range(9)]
    # Warm-up: 3 steps of the copies (12 transitions); updates then follow transition 11, 12, ...
    assert [b.env_steps for b in batches] == list(range(11, 20))
    assert collector.env_steps == 20 and collector.buffer.update_credit == 1


def test_copies_act_as_one_environment_row_by_row(compose):
    """Copy i of a member acts with the epsilon of step t + i and draws from the member's
    generator in copy order: N copies act as N steps of one environment."""
    from rs_lightning.config.schema import validate
    from rs_lightning.engine.build import build

    settings = validate(compose(["env=cartpole", "agent=dqn", "learning.epsilon_decay=20"]))
    rows_data, row_module = build(settings)
    batch_data, batch_module = build(settings)
    batch_module.load_state_dict(row_module.state_dict())
    row_policy, batch_policy = rows_data.policy, batch_data.policy  # what the collectors act with
    obs = np.random.default_rng(0).normal(size=(1, 6, 4)).astype(np.float32)
    for start in (0, 6, 12, 40):
        rows = [int(row_policy.act(obs[:, i:i + 1], start + i, EpisodeState())[0, 0])
                for i in range(6)]
        assert batch_policy.act(obs, start, EpisodeState())[0].tolist() == rows
    assert batch_module.epsilon == row_module.epsilon


VECTOR_RUN = ["env=cartpole", "env.num_envs=3", "agent=dqn", "logger=none",
              "callbacks.progress_bar=false", "trainer.max_steps=120", "learning.warmup_steps=20",
              "trainer.checkpoint_every_n_steps=50", "evaluation.every_n_steps=60",
              "evaluation.episodes=30", "evaluation.episodes_during_training=10"]


def test_vector_collection_resumes_to_the_same_run(compose, tmp_path):
    full = run(compose(VECTOR_RUN), run_dir=tmp_path / "full")
    # Update 50 is transition 70 of a vector step that collected 70-72: two updates pending.
    checkpoint = tmp_path / "full" / "checkpoints" / "step0000050.ckpt"
    state = torch.load(checkpoint, weights_only=True)
    assert state["ExperienceDataModule"]["collector"]["update_credit"] == 2
    resumed = run(compose([*VECTOR_RUN, f"ckpt_path={checkpoint}"]), run_dir=tmp_path / "resumed")
    assert resumed == full and full["env_steps"] == 141  # transitions collected (1 pending)
    assert (tmp_path / "resumed" / "eval.json").read_text() == (tmp_path / "full" / "eval.json").read_text()

    # A checkpoint of another number of copies is refused before anything is written.
    from rs_lightning.app.run_folders import check_inputs

    with pytest.raises(ConfigError) as error:
        check_inputs(compose([*VECTOR_RUN, "env.num_envs=1", f"ckpt_path={checkpoint}"]))
    assert error.value.key == "ckpt_path" and "written with env.num_envs=3" in str(error.value)


# ------------------------------------------------------------------------ presets and evaluation
# The two tabular presets spend most of such a run on their exact references at the end (the
# 8x8 FrozenLake's about 20 s, cliff walking's about 10 s): they run with -m slow. The default
# suite trains the cliff walking preset end to end and checks its references
# (test_tabular_references.py), and FrozenLake's references on the 4x4 map.
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow)
                                  if name in ("cliff_walking", "frozen_lake") else name
                                  for name in PRESETS])
def test_every_preset_trains_and_is_evaluated(compose, tmp_path, name):
    if name == "lunar_lander" and not box2d_installed():
        pytest.skip("the box2d extra (pip install -e '.[box2d]')")
    summary = run(compose([f"env={name}", "agent=dqn", "logger=none", "callbacks.progress_bar=false",
                           "trainer.max_steps=40", "learning.warmup_steps=16",
                           "trainer.checkpoint_every_n_steps=0", "evaluation.every_n_steps=20",
                           "evaluation.episodes=20", "evaluation.episodes_during_training=5"]),
                  run_dir=tmp_path / name)
    saved = json.loads((tmp_path / name / "eval.json").read_text())
    assert saved == json.loads(json.dumps(summary))
    assert {"expectation", "var", "cvar", "utility"} <= set(saved) and saved["episodes"] == 20
    histogram = saved["return_histogram"]
    assert sum(histogram["counts"]) == 20 and len(histogram["edges"]) == len(histogram["counts"]) + 1
    assert histogram["edges"][0] <= saved["var"] <= saved["expectation"] <= histogram["edges"][-1]
    history = [json.loads(line) for line in (tmp_path / name / "eval_history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [20, 40]


# The continuous-action presets (the actor-critics) and the extra each needs.
CONTINUOUS_PRESETS = {"pendulum": None, "mountain_car_continuous": None,
                      "risky_navigation": None, "lunar_lander_continuous": "box2d",
                      "lunar_lander_windy": "box2d", "half_cheetah": "mujoco",
                      "hopper": "mujoco"}


def test_every_preset_of_conf_env_is_tested():
    presets = {p.stem for p in (CONF / "env").glob("*.yaml")}
    covered = set(PRESETS) | set(CONTINUOUS_PRESETS) | {"gym"}
    grid = {"risky_rewards", "risky_transitions", "risky_grid_world", "two_stage"}
    minatar = {p for p in presets if p.startswith("minatar_")}
    benchmarks = {"trading", "american_put"}  # tests/test_benchmark_worlds.py
    assert presets - covered - grid - minatar - benchmarks == set()


@pytest.mark.parametrize("name", sorted(CONTINUOUS_PRESETS))
def test_every_continuous_preset_trains_an_actor_critic(compose, tmp_path, name):
    """A short TQC run on each continuous preset (episodes cut to 50 steps: the bodies of
    MuJoCo and Box2D, not their long episodes, are what is checked here)."""
    extra = CONTINUOUS_PRESETS[name]
    if extra == "box2d" and not box2d_installed():
        pytest.skip("the box2d extra (pip install -e '.[box2d]')")
    if extra == "mujoco":
        pytest.importorskip("mujoco", reason="the mujoco extra (pip install -e '.[mujoco]')")
    summary = run(compose([f"env={name}", "agent=tqc", "agent.hidden_sizes=[32]",
                           "env.max_episode_steps=50", "logger=none",
                           "callbacks.progress_bar=false", "trainer.max_steps=30",
                           "learning.warmup_steps=60", "trainer.checkpoint_every_n_steps=0",
                           "evaluation.every_n_steps=0", "evaluation.episodes=4",
                           "evaluation.batch_envs=4"]),
                  run_dir=tmp_path / name)
    assert summary["episodes"] == 4 and math.isfinite(summary["expectation"])
    assert summary["env_steps"] == 90  # 60 of warm-up, then one per update


@pytest.mark.slow
@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_trains_from_the_command_line(tmp_path, name):
    if name == "lunar_lander" and not box2d_installed():
        pytest.skip("the box2d extra (pip install -e '.[box2d]')")
    result = train_cli(f"env={name}", "debug=quick", "logger=none", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "return_histogram" in json.loads((tmp_path / "run" / "eval.json").read_text())


def test_return_histogram_figure(tmp_path):
    from rs_lightning.analysis.evaluation import return_histogram
    from rs_lightning.analysis.return_histograms import plot_return_histograms

    rng = np.random.default_rng(0)
    rows = [{"env": "CartPole-v1", "agent": "dqn", "alpha": 1.0, "risk": "var", "rho": 0.1,
             "seed": seed, "expectation": 50.0, "var": 20.0,
             "return_histogram": return_histogram(rng.normal(50, 20, 500).round())}
            for seed in range(2)]
    assert plot_return_histograms(rows, tmp_path / "h.png") == 1
    assert (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"
    assert plot_return_histograms([{"env": "x"}], tmp_path / "none.png") == 0


def test_result_tools_pure_functions():
    from rs_lightning.analysis.gym_results import (
        first_reaching,
        tradeoff_points,
        visit_counts,
    )

    history = [{"step": 200, "expectation": 480.0}, {"step": 100, "expectation": 475.0},
               {"step": 50, "expectation": 20.0}]
    assert first_reaching(history, 475)["step"] == 100 and first_reaching(history, 500) is None
    rows = [{"alpha": a, "expectation": e, "var": v}
            for a, e, v in ((1.0, -15.0, -24.0), (1.0, -16.0, -26.0), (0.5, -16.0, -17.0))]
    points = tradeoff_points(rows)
    assert [p["alpha"] for p in points] == [0.5, 1.0]
    assert points[1]["expectation"] == -15.5 and points[1]["var_std"] == pytest.approx(np.sqrt(2))
    assert points[1]["var_quartiles"] == [-25.5, -25.0, -24.5]
    assert points[0]["runs"] == [(-17.0, -16.0)]
    assert visit_counts([0, 0, 5], (2, 3)).tolist() == [[2, 0, 0], [0, 0, 1]]


def test_reach_prints_the_update_and_the_training_time(tmp_path, capsys):
    from rs_lightning.app.commands.gym_results import main

    for name, clock in (("timed", ', "train_seconds": 61.5'), ("old", "")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "eval_history.jsonl").write_text(
            '{"step": 100, "env_steps": 132, "expectation": 20.0%s}\n'
            '{"step": 200, "env_steps": 232, "expectation": 480.0%s}\n' % (clock, clock)
        )
    assert main(["reach", str(tmp_path / "timed"), str(tmp_path / "old")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == f"{tmp_path / 'timed'} | 200 | 232 | 480.0 | 62"
    assert lines[2] == f"{tmp_path / 'old'} | 200 | 232 | 480.0 | (not recorded)"


@pytest.mark.slow  # about 45 s, mostly cliff walking's references at the final evaluation
def test_heatmap_pools_the_seeds_of_a_parallel_seeds_run(compose, tmp_path):
    from rs_lightning.analysis.gym_results import greedy_visits, heatmap_panel
    from rs_lightning.app.commands.gym_results import main

    run_dir = tmp_path / "stacked"
    run(compose(["env=cliff_walking", "agent=dqn", "parallel_seeds=2", "debug=quick",
                 "logger=none", "callbacks.progress_bar=false", "trainer.max_steps=60",
                 "evaluation.every_n_steps=0", "evaluation.episodes=5"]), run_dir=run_dir)
    label, counts = heatmap_panel(run_dir, episodes=2)
    assert "2 seeds" in label and "falls in" in label
    singles = [greedy_visits(run_dir / f"seed_{seed}", 2) for seed in (0, 1)]
    assert np.array_equal(counts, singles[0] + singles[1])
    assert main(["heatmap", str(run_dir), "--episodes", "2", "--out", str(tmp_path / "h.png")]) == 0
    assert (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(FileNotFoundError, match="no finished run"):
        heatmap_panel(tmp_path, episodes=1)
