"""GridWorldCopies: K grid worlds stepped as tensors give each copy's gymnasium transitions."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rs_lightning.envs  # noqa: F401
from rs_lightning.envs import GRID_WORLDS, OTHER_GRID_WORLDS
from rs_lightning.envs.grid_world_copies import (
    _FEW,
    GridWorldCopies,
    unwrapped_grid_world,
)
from rs_lightning.envs.gym_support import BoundsNormalizedObservation


def make(env_id: str, **kwargs) -> gym.Env:
    return gym.make(env_id, disable_env_checker=True, **kwargs)


@pytest.mark.parametrize("copies_k", [4, 20])  # stepped copy by copy / as arrays (_FEW)
@pytest.mark.parametrize("kwargs", [{}, {"timeout_is_terminal": False}, {"max_steps": 3}])
@pytest.mark.parametrize("name", sorted({**GRID_WORLDS, **OTHER_GRID_WORLDS}))
def test_each_copy_steps_as_its_own_environment(name, kwargs, copies_k):
    """The same actions in K gymnasium environments and in K tensor copies seeded alike:
    the same observations, rewards (to the bit), terminations, R_s and generator states."""
    env_id = {**GRID_WORLDS, **OTHER_GRID_WORLDS}[name]
    assert (copies_k <= _FEW) == (copies_k == 4)  # each route is tested
    alone = [make(env_id, **kwargs) for _ in range(copies_k)]
    together = [make(env_id, **kwargs) for _ in range(copies_k)]
    for k, (a, b) in enumerate(zip(alone, together)):
        a.reset(seed=7 + k)
        b.reset(seed=7 + k)
    copies = GridWorldCopies(together)
    actions = np.random.default_rng(0).integers(4, size=(2000, copies_k))
    ended_episodes = 0
    for step_actions in actions:
        step = copies.step(step_actions)
        for k, env in enumerate(alone):
            obs, reward, terminated, truncated, info = env.step(int(step_actions[k]))
            assert np.array_equal(obs, step.next_obs[k])
            assert reward == float(step.reward[k])
            assert terminated == bool(step.terminated[k])
            assert (terminated or truncated) == bool(step.ended[k])
            if terminated or truncated:
                assert info["risk_outcome"] == float(step.risk_outcome[k])
                env.reset()
                ended_episodes += 1
        current = np.stack([env.unwrapped._observations[env.unwrapped.cell] for env in alone])
        assert np.array_equal(current, copies.obs())
    assert ended_episodes > 100
    copies.write_back()
    for a, b in zip(alone, together):
        ua, ub = a.unwrapped, b.unwrapped
        assert (ua.cell, ua.steps, ua.shortcut_flag) == (ub.cell, ub.steps, ub.shortcut_flag)
        assert ua.np_random.bit_generator.state == ub.np_random.bit_generator.state
        b.step(0)  # the written-back environment goes on by itself


def test_only_plain_grid_worlds_are_stepped_as_tensors():
    env_id = GRID_WORLDS["risky_rewards"]
    assert unwrapped_grid_world(make(env_id)) is not None
    assert unwrapped_grid_world(BoundsNormalizedObservation(make(env_id))) is None
    assert unwrapped_grid_world(make("CartPole-v1")) is None
    fresh = make(env_id)
    with pytest.raises(ValueError, match="reset"):
        GridWorldCopies([fresh])
    a, b = make(env_id), make(env_id, max_steps=5)
    a.reset(seed=0)
    b.reset(seed=1)
    with pytest.raises(ValueError, match="one set of arguments"):
        GridWorldCopies([a, b])


@pytest.mark.parametrize("name", sorted(GRID_WORLDS))
def test_tensor_copies_step_as_gymnasiums_vector_api(name, compose):
    """The engine's two kinds of env copies on one grid world: the tensor copies and
    gymnasium's SyncVectorEnv give the same transitions, also across seeded restarts and a
    state round trip through a weights-only checkpoint."""
    import io

    from rs_lightning.config.schema import validate
    from rs_lightning.envs.copies import GymCopies, make_copies

    env = validate(compose([f"env={name}"])).train.env
    seeds = [11, 12, 13, 14, 15, 16]
    tensors, vector = make_copies(env, seeds), GymCopies(env, seeds, groups=2)
    assert isinstance(tensors, GridWorldCopies)
    actions = np.random.default_rng(1).integers(4, size=(600, 6))
    for t, step_actions in enumerate(actions):
        a, b = tensors.step(step_actions), vector.step(step_actions)
        for field in a._fields:
            if field == "risk_outcome":  # meaningful where an episode ended
                assert np.array_equal(a.risk_outcome[a.ended], b.risk_outcome[b.ended])
            else:
                assert np.array_equal(getattr(a, field), getattr(b, field)), field
        assert np.array_equal(tensors.obs(), vector.obs())
        if t == 300:
            tensors.reseed([1, 3], [99, 98])
            vector.reseed([1, 3], [99, 98])
            buffer = io.BytesIO()
            torch.save(tensors.state_dict(), buffer)
            buffer.seek(0)
            restored = make_copies(env, [0] * 6)
            restored.load_state_dict(torch.load(buffer, weights_only=True))
            tensors = restored
