"""Defaults of ``env=gym`` derived from what gymnasium declares (rs_lightning.config.derived_defaults),
and ``debug=quick``'s episode counts on long-episode environments."""

from __future__ import annotations

import gymnasium as gym
import pytest
from omegaconf import OmegaConf

import tests.gym_test_envs  # noqa: F401  (registers ShiftedCounter-v0)
from rs_lightning.config.schema import validate
from rs_lightning.envs.gym_support import (
    declared_reward_bounds,
    discounted_return_bounds,
    scaled_reward_bounds,
    unit_reward_scale,
)
from tests.warm_python import command as python_command


def env_of(compose, *overrides):
    return validate(compose(["env=gym", *overrides])).train


@pytest.mark.parametrize("env_id, scale, support", [
    # +1 every step: returns up to 1 / (1 - 0.99) = 100 unscaled, scaled by 0.01.
    ("CartPole-v1", 0.01, (0.01, 1.0)),
    # -1 per step, 0 at the goal.
    ("Acrobot-v1", 0.01, (-1.0, 0.0)),
    # -1 every step, the last included.
    ("MountainCar-v0", 0.01, (-1.0, -0.01)),
    # FrozenLake declares reward_range (0, 1) itself.
    ("FrozenLake-v1", 0.01, (0.0, 1.0)),
])
def test_the_return_support_of_a_gymnasium_env_is_derived_from_its_rewards(compose, env_id, scale,
                                                                          support):
    train = env_of(compose, f"env.id={env_id}")
    assert train.env.reward_scale == scale
    assert (train.env.return_min, train.env.return_max) == pytest.approx(support)


def test_explicit_values_win_over_derived_ones(compose):
    # The support follows an explicit reward scale, and explicit bounds stay as given.
    train = env_of(compose, "env.id=CartPole-v1", "env.reward_scale=1")
    assert (train.env.return_min, train.env.return_max) == pytest.approx((1.0, 100.0))
    train = env_of(compose, "env.id=CartPole-v1", "env.return_min=-3", "env.reward_clip=0.005")
    assert train.env.return_min == -3.0 and train.env.reward_scale == 0.01
    assert train.env.return_max == pytest.approx(0.5)  # clipped rewards 0.005 per step
    train = env_of(compose, "env.id=Acrobot-v1", "env.gamma=0.9")
    assert train.env.reward_scale == 0.1 and train.env.return_min == pytest.approx(-1.0)


def test_the_resolved_config_records_the_numbers_used(compose):
    cfg = compose(["env=gym", "env.id=Acrobot-v1", "debug=quick"])
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert resolved["env"]["reward_scale"] == 0.01 and resolved["env"]["return_min"] == -1.0
    assert resolved["evaluation"]["episodes"] == 20


def test_an_env_declaring_no_rewards_warns_and_names_the_keys(compose, capsys):
    import rs_lightning.config.derived_defaults as derived

    derived._warned.discard("ShiftedCounter-v0")
    train = env_of(compose, "env.id=ShiftedCounter-v0")
    assert (train.env.reward_scale, train.env.return_min, train.env.return_max) == (1.0, -100.0, 100.0)
    warning = capsys.readouterr().err
    assert "declares no reward bounds for 'ShiftedCounter-v0'" in warning
    for key in ("env.reward_scale", "env.return_min", "env.return_max"):
        assert key in warning


def test_quick_evaluations_are_shorter_only_on_long_episodes(compose):
    quick = validate(compose(["debug=quick"])).train.evaluation  # the paper's grid world
    assert (quick.episodes, quick.episodes_during_training) == (500, 100)
    for env_id, episodes in (("Acrobot-v1", 20), ("CartPole-v1", 20), ("MountainCar-v0", 50)):
        evaluation = env_of(compose, f"env.id={env_id}", "debug=quick").evaluation
        assert evaluation.episodes == episodes  # 10,000 steps of 500- or 200-step episodes
        assert evaluation.episodes_during_training == episodes // 5
    # A time limit given in the config counts, and explicit counts win.
    evaluation = env_of(compose, "env.id=Acrobot-v1", "env.max_episode_steps=100",
                        "debug=quick").evaluation
    assert evaluation.episodes == 100
    evaluation = env_of(compose, "env.id=Acrobot-v1", "debug=quick",
                        "evaluation.episodes=7").evaluation
    assert evaluation.episodes == 7


def test_declared_reward_bounds_and_the_unit_scale():
    env = gym.make("CartPole-v1")
    assert declared_reward_bounds(env, "CartPole-v1") == (1.0, 1.0)
    # Arguments may change the rewards: nothing is assumed then.
    assert declared_reward_bounds(env, "CartPole-v1", {"sutton_barto_reward": True}) is None
    env.close()
    env = gym.make("FrozenLake-v1", reward_schedule=(2, -1, 0))
    assert declared_reward_bounds(env, "FrozenLake-v1", {"reward_schedule": (2, -1, 0)}) == (-1, 2)
    env.close()
    assert unit_reward_scale(*discounted_return_bounds(1.0, 1.0, 0.99, None)) == 0.01
    assert unit_reward_scale(-0.5, 0.2) == 1.0 and unit_reward_scale(-3.0, 0.0) == 0.1
    assert unit_reward_scale(0.0, 0.0) is None
    assert scaled_reward_bounds(-100.0, 1.0, 0.1, 2.0) == (-2.0, 0.1)


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["dqn", "c51", "qr_dqn", "iqn", "umdqn_kl", "umdqn_w", "rs_umdqn_c"])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "MountainCar-v0"])
def test_debug_quick_stays_quick_on_classic_control(tmp_path, agent, env_id):
    """``env=gym env.id=<id> debug=quick``, nothing else set but the logger: under a minute of
    CPU time (wall time on a shared machine says little; measured 7-18 s)."""
    import os
    import resource
    import subprocess

    from tests.conftest import ROOT

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run(
        [*python_command(), str(ROOT / "train.py"), "env=gym", f"env.id={env_id}", f"agent={agent}",
         "debug=quick", "logger=csv", f"hydra.run.dir={tmp_path}"],
        cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True,
        timeout=600, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert result.returncode == 0, result.stderr[-2000:]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 60, f"{cpu:.1f} s of CPU time"
    assert (tmp_path / "eval.json").is_file()
