"""Replay memory, exploration schedule and the environment stream."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rs_lightning.data.replay import ReplayBuffer
from rs_lightning.module import exploration_rate


def test_replay_ring_overwrites_the_oldest_and_samples_only_stored_rows():
    replay = ReplayBuffer(capacity=5, obs_dim=2, seed=0)
    for i in range(8):
        replay.add([i, i], i % 4, float(i), [i + 1, i + 1], i == 7)
    assert len(replay) == 5
    stored = set(replay.reward.tolist())
    assert stored == {3.0, 4.0, 5.0, 6.0, 7.0}
    batch = replay.sample(64)
    assert set(batch.reward.tolist()) <= stored
    # Every field of a sampled row belongs to the same transition.
    assert torch.equal(batch.obs[:, 0], batch.reward)
    assert torch.equal(batch.next_obs[:, 0], batch.reward + 1)
    assert torch.equal(batch.terminated, (batch.reward == 7).float())


def test_replay_state_round_trip_resumes_the_same_samples():
    replay = ReplayBuffer(capacity=10, obs_dim=2, seed=3)
    for i in range(7):
        replay.add([i, 0], 0, float(i), [i, 0], False)
    state = replay.state_dict()
    expected = replay.sample(16).reward
    clone = ReplayBuffer(capacity=10, obs_dim=2, seed=99)
    clone.load_state_dict(state)
    assert torch.equal(clone.sample(16).reward, expected)
    assert (clone.size, clone.position) == (7, 7)


def test_replay_rejects_a_non_positive_capacity():
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(capacity=0, obs_dim=2, seed=0)


def test_exponential_schedule_is_the_authors_formula():
    for t in (0, 1, 5_000, 10_000, 50_000):
        expected = 0.01 + 0.99 * math.exp(-t / 1e4)
        assert exploration_rate(t, 1.0, 0.01, 1e4, "exponential") == pytest.approx(expected)


def test_linear_schedule_reaches_the_end_and_stays():
    assert exploration_rate(0, 1.0, 0.1, 100, "linear") == pytest.approx(1.0)
    assert exploration_rate(50, 1.0, 0.1, 100, "linear") == pytest.approx(0.55)
    assert exploration_rate(100, 1.0, 0.1, 100, "linear") == pytest.approx(0.1)
    assert exploration_rate(10_000, 1.0, 0.1, 100, "linear") == pytest.approx(0.1)


def test_stream_warms_up_then_yields_one_batch_per_env_step(compose):
    from rs_lightning.schema import validate
    from rs_lightning.train import build

    settings = validate(compose(["learning.warmup_steps=40", "logger=none"]))
    datamodule, module = build(settings)
    stream = iter(datamodule.train_dataloader())
    first = next(stream)
    assert first.env_steps == 41
    assert first.transitions.obs.shape == (32, 2)
    second = next(stream)
    assert second.env_steps == 42
    assert len(datamodule.collector.replay) == 42
    # Rewards in the memory are clipped to the env's reward_clip.
    assert datamodule.collector.replay.reward[:42].abs().max() <= 2.0
    # Every ended episode reports its return and R_s.
    assert np.isfinite(datamodule.collector.episodes)
