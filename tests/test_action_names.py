"""Action names: each environment's names say what its actions do (checked by stepping it),
they reach the problem an agent is built for, and a user's environment that misnames its
actions is refused in one line naming env.id."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rs_lightning.envs  # noqa: F401  (registers the rs_lightning/ ids)
from rs_lightning.envs.action_names import action_names
from rs_lightning.envs.factory import env_problem
from rs_lightning.errors import ConfigError
from tests.gym_test_envs import Unbounded

MOVES = {"right": (1, 0), "left": (-1, 0), "up": (0, 1), "down": (0, -1)}


@pytest.mark.parametrize("env_id", ["rs_lightning/RiskyRewards-v0", "rs_lightning/TwoStage-v0"])
def test_a_grid_worlds_names_are_its_moves(env_id):
    env = gym.make(env_id)
    names = action_names(env)
    assert names == ("right", "down", "left", "up")
    for action, name in enumerate(names):
        env.reset(seed=0, options={"cell": (1, 1)})
        _, _, _, _, info = env.step(action)
        dx, dy = MOVES[name]
        assert info["cell"] == (1 + dx, 1 + dy), name  # no wind in risky rewards nor here


def test_cliff_walkings_names_are_its_moves_rows_counting_down():
    env = gym.make("rs_lightning/SlipperyCliffWalking-v0")  # gymnasium's class's names
    names = action_names(env)
    assert names == action_names(gym.make("CliffWalking-v1")) == ("up", "right", "down", "left")
    start = env.reset(seed=0)[0]  # row 3, column 0
    row, column = divmod(int(start), 12)
    state = env.step(names.index("up"))[0]
    assert divmod(int(state), 12) == (row - 1, column)
    state = env.step(names.index("right"))[0]
    assert divmod(int(state), 12) == (row - 1, column + 1)


def test_trading_names_the_position_each_action_holds():
    env = gym.make("rs_lightning/Trading-v0", positions=(-2, 0, 1))
    assert action_names(env) == ("short 2", "flat", "long")
    assert action_names(gym.make("rs_lightning/Trading-v0")) == ("short", "flat", "long")
    assert action_names(gym.make("rs_lightning/AmericanPut-v0")) == ("hold", "exercise")
    put = gym.make("rs_lightning/AmericanPut-v0")
    put.reset(seed=0)
    assert put.step(action_names(put).index("exercise"))[2]  # exercising ends the episode


def test_cartpoles_left_pushes_the_cart_left():
    env = gym.make("CartPole-v1")
    names = action_names(env)
    assert names == ("left", "right")
    velocities = []
    for name in names:
        env.reset(seed=3)
        velocities.append(env.step(names.index(name))[0][1])
    assert velocities[0] < 0 < velocities[1]


def test_lunar_landers_main_engine_slows_the_fall():
    env = gym.make("LunarLander-v3")
    names = action_names(env)
    assert names == ("nothing", "left engine", "main engine", "right engine")
    fall = {}
    for name in ("nothing", "main engine"):
        env.reset(seed=0)
        for _ in range(5):
            obs = env.step(names.index(name))[0]
        fall[name] = obs[3]  # vertical velocity
    assert fall["main engine"] > fall["nothing"]


def test_continuous_and_unnamed_worlds_keep_numbers():
    assert action_names(gym.make("Pendulum-v1")) is None
    assert action_names(gym.make("LunarLander-v3", continuous=True)) is None
    assert action_names(gym.make("rs_lightning/RiskyNavigation-v0")) is None


class _Misnamed(Unbounded):
    """Three actions and two names."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(3)
    action_names = ("stay", "go")


def test_names_reach_the_problem_and_a_misnamed_world_is_refused(compose):
    problem = env_problem(compose(["env=american_put"]).env)
    assert problem.action_names == ("hold", "exercise")
    assert env_problem(compose(["env=pendulum"]).env).action_names == ()
    gym.register("test_names/Misnamed-v0", entry_point=_Misnamed)
    config = compose(["env=gym", "env.id=test_names/Misnamed-v0", "env.return_min=-1",
                      "env.return_max=1"]).env
    with pytest.raises(ConfigError) as error:
        env_problem(config)
    assert str(error.value).splitlines() == [
        "env.id: 'test_names/Misnamed-v0': _Misnamed.action_names must be 3 non-empty "
        "strings, one per action, got ('stay', 'go')"]
