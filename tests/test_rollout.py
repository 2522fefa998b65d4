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
