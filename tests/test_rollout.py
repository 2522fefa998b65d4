"""The rollout path's pure parts: generalised advantage estimation against hand-computed
values (termination, truncation, the rollout's end) and its closed forms at lambda 0 and 1,
and the categorical draw of an on-policy agent."""

from __future__ import annotations

import pytest
import torch

from rs_lightning.agents.on_policy import (
    OnPolicyConfig,
    categorical_sample,
    gaussian_log_prob,
    generalized_advantages,
)


def test_advantages_stop_at_episode_ends_and_bootstrap_truncations_from_their_last_state():
    # Step 0 goes on; step 1 is cut by a time limit (its last state is worth 7, not the next
    # episode's start); step 2 terminates (its next value, 5, must be ignored); step 3 is the
    # rollout's last step, bootstrapped from the state it stopped in (worth 3).
    reward = torch.tensor([1.0, 2.0, 3.0, 4.0])
    value = torch.tensor([0.5, 1.0, 1.5, 2.0])
    next_value = torch.tensor([1.0, 7.0, 5.0, 3.0])
    terminated = torch.tensor([0.0, 0.0, 1.0, 0.0])
    ended = torch.tensor([0.0, 1.0, 1.0, 0.0])
    advantage, returns = generalized_advantages(reward, value, next_value, terminated, ended,
                                                gamma=0.9, lam=0.8)
    # delta = (1 + .9 - .5, 2 + 6.3 - 1, 3 - 1.5, 4 + 2.7 - 2); A_0 = delta_0 + .72 delta_1
    expected = torch.tensor([1.4 + 0.72 * 7.3, 7.3, 1.5, 4.7])
    torch.testing.assert_close(advantage, expected)
    torch.testing.assert_close(returns, expected + value)


@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_advantages_at_lambda_zero_and_one_are_td_errors_and_bootstrapped_returns(lam):
    generator = torch.Generator().manual_seed(0)
    steps, copies, gamma = 6, 3, 0.95
    reward = torch.randn(steps, copies, generator=generator, dtype=torch.float64)
    value = torch.randn(steps, copies, generator=generator, dtype=torch.float64)
    last = torch.randn(copies, generator=generator, dtype=torch.float64)
    next_value = torch.cat([value[1:], last[None]])
    zeros = torch.zeros(steps, copies, dtype=torch.float64)
    advantage, returns = generalized_advantages(reward, value, next_value, zeros, zeros,
                                                gamma, lam)
    if lam == 0.0:
        torch.testing.assert_close(advantage, reward + gamma * next_value - value)
    else:  # sum_k gamma^k r_{t+k} + gamma^(T-t) V(s_T)
        for t in range(steps):
            powers = gamma ** torch.arange(steps - t, dtype=torch.float64)
            expected = (powers[:, None] * reward[t:]).sum(0) + gamma ** (steps - t) * last
            torch.testing.assert_close(returns[t], expected)


def test_a_categorical_draw_inverts_the_distribution_function():
    logits = torch.log(torch.tensor([[0.2, 0.5, 0.3]] * 4))
    uniform = torch.tensor([[0.0], [0.19], [0.69], [0.999]])
    action, log_prob = categorical_sample(logits, uniform)
    assert action.tolist() == [0, 0, 1, 2]
    torch.testing.assert_close(log_prob, torch.log(torch.tensor([0.2, 0.2, 0.5, 0.3])))


def test_a_gaussian_log_density_sums_over_the_action_dimensions():
    mean, log_std = torch.tensor([0.0, 1.0]), torch.tensor([0.0, 0.5])
    action = torch.tensor([0.3, -0.2])
    expected = torch.distributions.Normal(mean, log_std.exp()).log_prob(action).sum()
    torch.testing.assert_close(gaussian_log_prob(action, mean, log_std), expected)


def test_minibatches_must_divide_the_rollout_naming_the_key():
    config = OnPolicyConfig(name="a2c", hidden_sizes=[8], risk_conditioned=False,
                            rollout_steps=5, epochs=1, minibatches=3, gae_lambda=0.95)
    with pytest.raises(ValueError, match=r"^agent\.minibatches: must divide .* 2 x 5 = 10 "):
        config.minibatch_size(2)
    assert config.minibatch_size(3) == 5
    with pytest.raises(ValueError, match=r"^agent\.gae_lambda: must be a number in \[0, 1\]"):
        OnPolicyConfig(name="a2c", hidden_sizes=[8], risk_conditioned=False, rollout_steps=5,
                       epochs=1, minibatches=1, gae_lambda=1.5).check()


# ------------------------------------------------------------------ the rollout buffer
def test_a_rollout_bootstraps_truncations_and_its_end_from_the_states_reached():
    """Two copies, three steps: copy 0 goes on, is cut by a time limit, goes on; copy 1
    terminates, goes on, terminates. The critic values the states reached (10 x their
    number) where a return is bootstrapped; elsewhere a step's next value is the next step's
    own. One pass of two minibatches serves every step once, in the order of the member's
    generator (seed + 1), then the buffer asks for a new rollout."""
    import numpy as np

    from rs_lightning.engine.behaviour import Draw
    from rs_lightning.engine.rollout import RolloutStep
    from rs_lightning.engine.rollout_buffer import RolloutBuffer
    from rs_lightning.envs.grid_world_copies import CopiesStep
    from rs_lightning.types import PolicySample

    critic = lambda reached: torch.as_tensor(reached[..., :1] * 10.0)  # noqa: E731
    buffer = RolloutBuffer([7], copies=2, steps=3, epochs=1, minibatches=2, gamma=0.9,
                           gae_lambda=0.8, critic=critic)
    terminated = [[False, True], [False, False], [False, True]]
    truncated = [[False, False], [True, False], [False, False]]
    for t in range(3):
        obs = np.array([[t], [t + 10]], dtype=np.float32)  # [M, 1]: copy i shows t + 10 i
        reached = obs + 100
        ended = np.array(terminated[t]) | np.array(truncated[t])
        step = RolloutStep(obs, None, np.zeros(2, np.int64),
                           CopiesStep(reached, np.ones(2), np.array(terminated[t]), ended,
                                      np.zeros(2)),
                           np.ones(2), reached)
        inputs = torch.from_numpy(obs)[None]  # [K, N, 1]
        sample = PolicySample(torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 2), inputs)
        assert buffer.needs_steps(0)
        buffer.store(step, Draw(np.zeros((1, 2), np.int64), inputs, sample), t * 2)
    assert not buffer.needs_steps(6)
    value = torch.tensor([[0.0, 10.0], [1.0, 11.0], [2.0, 12.0]])
    next_value = torch.tensor([[1.0, 1000.0],  # copy 1 terminated: ignored
                               [1010.0, 12.0],  # copy 0 cut by a time limit
                               [1020.0, 1120.0]])  # the rollout's end
    ended = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    advantage, returns = generalized_advantages(torch.ones(3, 2), value, next_value,
                                                torch.tensor(terminated, dtype=torch.float32),
                                                ended, 0.9, 0.8)
    served = [buffer.next_batch(6)[0] for _ in range(2)]
    assert buffer.needs_steps(6)  # the pass is done: a new rollout next
    order = torch.randperm(6, generator=torch.Generator().manual_seed(8))
    rows = torch.cat([batch.obs[0, :, 0] for batch in served])  # [6] what each row saw
    flat_obs = torch.tensor([0.0, 10.0, 1.0, 11.0, 2.0, 12.0])  # time first: step t, copy i
    assert torch.equal(rows, flat_obs[order])
    got = torch.cat([batch.advantage[0] for batch in served])
    torch.testing.assert_close(got, advantage.reshape(-1)[order])
    torch.testing.assert_close(torch.cat([b.returns[0] for b in served]), returns.reshape(-1)[order])
    truncations = torch.cat([b.truncated[0] for b in served])
    assert truncations.tolist() == torch.tensor(truncated, dtype=torch.float32).reshape(-1)[order].tolist()
