"""Replay memory, exploration schedule and the environment stream."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rs_lightning.engine.behaviour import exploration_rate
from rs_lightning.engine.replay import ReplayMemory
from rs_lightning.types import Transitions


def add(replay, obs, action, reward, next_obs, terminated):
    """One transition of a one-member memory."""
    replay.add(torch.tensor([[obs]], dtype=torch.float32), torch.tensor([[action]]),
               torch.tensor([[reward]]), torch.tensor([[next_obs]], dtype=torch.float32),
               torch.tensor([[float(terminated)]]), torch.tensor([[0.0 if terminated else 0.9]]))


def test_replay_ring_overwrites_the_oldest_and_samples_only_stored_rows():
    replay = ReplayMemory(capacity=5, obs_shape=2, seeds=[0])
    for i in range(8):
        add(replay, [i, i], i % 4, float(i), [i + 1, i + 1], i == 7)
    assert len(replay) == 5
    stored = set(replay.reward[0].tolist())
    assert stored == {3.0, 4.0, 5.0, 6.0, 7.0}
    batch = Transitions(*(field[0] for field in replay.sample(64)))
    assert set(batch.reward.tolist()) <= stored
    # Every field of a sampled row belongs to the same transition.
    assert torch.equal(batch.obs[:, 0], batch.reward)
    assert torch.equal(batch.next_obs[:, 0], batch.reward + 1)
    assert torch.equal(batch.terminated, (batch.reward == 7).float())


def test_replay_state_round_trip_resumes_the_same_samples():
    replay = ReplayMemory(capacity=10, obs_shape=2, seeds=[3])
    for i in range(7):
        add(replay, [i, 0], 0, float(i), [i, 0], False)
    state = replay.state_dict()
    expected = replay.sample(16).reward
    clone = ReplayMemory(capacity=10, obs_shape=2, seeds=[99])
    clone.load_state_dict(state)
    assert torch.equal(clone.sample(16).reward, expected)
    assert (clone.size, clone.position) == (7, 7)


def test_replay_rejects_a_non_positive_capacity():
    with pytest.raises(ValueError, match="capacity"):
        ReplayMemory(capacity=0, obs_shape=2, seeds=[0])


def test_exponential_schedule_is_the_authors_formula():
    for t in (0, 1, 5_000, 10_000, 50_000):
        expected = 0.01 + 0.99 * math.exp(-t / 1e4)
        assert exploration_rate(t, 1.0, 0.01, 1e4, "exponential") == pytest.approx(expected)


def test_linear_schedule_reaches_the_end_and_stays():
    assert exploration_rate(0, 1.0, 0.1, 100, "linear") == pytest.approx(1.0)
    assert exploration_rate(50, 1.0, 0.1, 100, "linear") == pytest.approx(0.55)
    assert exploration_rate(100, 1.0, 0.1, 100, "linear") == pytest.approx(0.1)
    assert exploration_rate(10_000, 1.0, 0.1, 100, "linear") == pytest.approx(0.1)


def test_the_collector_warms_up_then_gives_one_batch_per_env_step(compose):
    from rs_lightning.config.schema import validate
    from rs_lightning.engine.build import build

    settings = validate(compose(["learning.warmup_steps=40", "logger=none"]))
    datamodule, module = build(settings)
    collector = next(iter(datamodule.train_dataloader()))  # what each training step gets
    assert collector.policy.members is module.members  # it acts with the learner's weights
    first = collector.experience()
    assert first.env_steps == 41
    assert first.batch.obs.shape == (1, 32, 2)
    second = collector.experience()
    assert second.env_steps == 42
    assert len(datamodule.collector.replay) == 42
    # Rewards in the memory are clipped to the env's reward_clip.
    assert datamodule.collector.replay.reward[0, :42].abs().max() <= 2.0
    # Every ended episode reports its return and R_s.
    assert np.isfinite(datamodule.collector.episodes[0])


def test_members_sample_as_their_own_memories_and_copies_land_in_order():
    """Member k of a K-member memory draws the batches a memory of its seed alone draws; the
    N transitions of a step of the copies are written in copy order, wrapping the ring."""
    together = ReplayMemory(capacity=6, obs_shape=2, seeds=[5, 6])
    alone = [ReplayMemory(capacity=6, obs_shape=2, seeds=[seed]) for seed in (5, 6)]
    for step in range(4):  # 4 steps of 3 copies: 12 transitions into 6 rows
        values = torch.arange(3, dtype=torch.float32) + 3 * step
        obs = torch.stack([values, -values], dim=-1)  # [N, 2]
        for k, memory in enumerate(alone):
            memory.add(obs[None] + k, torch.zeros(1, 3, dtype=torch.long), values[None] + k,
                       obs[None] + k, torch.zeros(1, 3), torch.full((1, 3), 0.9))
        together.add(torch.stack([obs, obs + 1]), torch.zeros(2, 3, dtype=torch.long),
                     torch.stack([values, values + 1]), torch.stack([obs, obs + 1]),
                     torch.zeros(2, 3), torch.full((2, 3), 0.9))
    assert together.reward[0].tolist() == [6.0, 7.0, 8.0, 9.0, 10.0, 11.0]
    assert (together.size, together.position) == (6, 0)
    batch = together.sample(32)
    for k, memory in enumerate(alone):
        assert torch.equal(batch.reward[k], memory.sample(32).reward[0])
