"""n-step returns, the update ratio and the early ends of a run (learning.n_step,
learning.updates_per_step, trainer.stop_at_return, trainer.max_time): hand-computed
transitions and targets for every representation, exact update schedules, exact resume."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from rs_lightning.agents import Transitions
from rs_lightning.app.train import run
from rs_lightning.engine.replay import NStepReturns, update_ratio
from rs_lightning.errors import ConfigError
from rs_lightning.risk import Utility
from tests.test_agents import CELLS, make_agent
from tests.test_gym_envs import ActionsOf, env_section, one_member_collector


# ------------------------------------------------------------------- the n-step window
def push(window, obs, reward, next_obs, terminated=False, truncated=False, action=0):
    """One step of a one-copy window; obs are scalars."""
    return window.push(np.array([[obs]], np.float32), np.array([action]), np.array([reward]),
                       np.array([[next_obs]], np.float32), np.array([terminated]),
                       np.array([terminated or truncated]))


def test_n_step_transitions_by_hand():
    """n = 3, gamma = 1/2: a termination inside the window stops bootstrapping for every
    start before it, a truncation keeps it from the last state reached."""
    window = NStepReturns(3, 0.5, copies=1, obs_shape=(1,))
    steps = [  # (obs, reward, next obs, terminated, truncated)
        (0, 1.0, 1, False, False), (1, 2.0, 2, False, False), (2, 4.0, 3, False, False),
        (3, 8.0, 4, True, False),  # the episode terminates
        (10, 1.0, 11, False, False), (11, 2.0, 12, False, True),  # the next one is truncated
        (20, 1.0, 21, False, False), (21, 1.0, 22, False, False),
    ]
    rows = []
    for obs, reward, next_obs, terminated, truncated in steps:
        leaving = push(window, obs, reward, next_obs, terminated, truncated, action=obs)
        rows.append(None if leaving is None else (
            int(leaving[0][0, 0]), int(leaving[1][0]), float(leaving[2][0]),
            int(leaving[3][0, 0]), bool(leaving[4][0]), float(leaving[5][0])))
    # (s_t, a_t, R, s_{t+m}, terminated, discount)
    assert rows == [
        None, None,  # the first n - 1 steps fill the window
        (0, 0, 1 + 0.5 * 2 + 0.25 * 4, 3, False, 0.125),
        (1, 1, 2 + 0.5 * 4 + 0.25 * 8, 4, True, 0.0),  # terminated at its third step
        (2, 2, 4 + 0.5 * 8, 4, True, 0.0),  # two steps, terminated
        (3, 3, 8.0, 4, True, 0.0),  # one step, terminated
        (10, 10, 1 + 0.5 * 2, 12, False, 0.25),  # two steps, truncated: bootstraps from 12
        (11, 11, 2.0, 12, False, 0.5),
    ]


def test_copies_keep_their_own_windows_and_one_step_is_the_plain_transition():
    rng = np.random.default_rng(0)
    one = NStepReturns(1, 0.9, copies=4, obs_shape=(2,))
    three = NStepReturns(3, 0.9, copies=4, obs_shape=(2,))
    alone = [NStepReturns(3, 0.9, copies=1, obs_shape=(2,)) for _ in range(4)]
    for _ in range(30):
        obs, next_obs = rng.normal(size=(2, 4, 2)).astype(np.float32)
        action, reward = rng.integers(3, size=4), rng.normal(size=4)
        terminated = rng.random(4) < 0.2
        ended = terminated | (rng.random(4) < 0.2)
        plain = one.push(obs, action, reward, next_obs, terminated, ended)
        for got, want in zip(plain, (obs, action, reward, next_obs, terminated,
                                     np.where(terminated, 0.0, 0.9))):
            np.testing.assert_array_equal(got, np.asarray(want, dtype=got.dtype))
        together = three.push(obs, action, reward, next_obs, terminated, ended)
        for j, window in enumerate(alone):
            own = window.push(obs[j:j + 1], action[j:j + 1], reward[j:j + 1], next_obs[j:j + 1],
                              terminated[j:j + 1], ended[j:j + 1])
            assert (own is None) == (together is None)
            if own is not None:
                for a, b in zip(own, together):
                    np.testing.assert_array_equal(a[0], b[j])


# ------------------------------------------------------------ targets of every representation
def dirac_agent(name: str, values: list[float]):
    """An agent whose Z(s, a) is a Dirac at ``values[a]`` in every state: its last layer's
    weights are zero and its bias holds the values (or, for C51, peaked logits)."""
    agent = make_agent(name)
    with torch.no_grad():
        if name == "iqn":
            last = [m for m in agent.head if isinstance(m, torch.nn.Linear)][-1]
            last.weight.zero_()
            last.bias.copy_(torch.tensor(values))
        else:
            network = agent.q_network if name == "dqn" else agent.network
            last = [m for m in network if isinstance(m, torch.nn.Linear)][-1]
            last.weight.zero_()
            per_action = last.bias.numel() // len(values)
            last.bias.copy_(torch.tensor(values).repeat_interleave(per_action))
    return agent


# Rows: 3 steps that go on (discount gamma^3), 2 steps truncated (gamma^2), terminated (0).
DISCOUNTS = [0.9 ** 3, 0.9 ** 2, 0.0]


def n_step_batch(reward, discounts=DISCOUNTS, action=(0, 0, 0)) -> Transitions:
    return Transitions(CELLS[[0, 1, 2]], torch.tensor(action), torch.tensor(reward, dtype=torch.float32),
                       CELLS[[3, 4, 5]], torch.tensor([0.0, 0.0, 1.0]),
                       torch.tensor(discounts, dtype=torch.float32))


@pytest.mark.parametrize("name", ["dqn", "qr_dqn", "iqn"])
def test_n_step_target_of_point_estimates(name):
    """Z = Dirac(0.5) for action 0, Dirac(1.5) for action 1 (the target action a*): the
    target R + gamma^m * 1.5 equals Z(s, 0) when R = 0.5 - gamma^m * 1.5, so the loss is 0;
    the same rewards with the discounts swapped are not a fixed point."""
    agent = dirac_agent(name, [0.5, 1.5, -1.0, 0.0])
    choose = Utility(1.0, "expectation", {}).greedy
    fixed = [0.5 - d * 1.5 for d in DISCOUNTS]
    loss, _ = agent.loss(n_step_batch(fixed), agent, choose)
    assert float(loss.detach()) == pytest.approx(0.0, abs=1e-6)
    loss, _ = agent.loss(n_step_batch(fixed, discounts=DISCOUNTS[::-1]), agent, choose)
    assert float(loss.detach()) > 0.1


def test_n_step_target_of_c51_by_hand():
    """C51: the target projects R + gamma^m z_i (R alone when terminated) onto the atoms,
    written here as the classic floor / ceil split."""
    agent = make_agent("c51")
    choose = Utility(1.0, "expectation", {}).greedy
    reward = [0.13, -0.4, 0.77]
    batch = n_step_batch(reward, action=(0, 1, 2))
    loss, _ = agent.loss(batch, agent, choose)
    atoms = agent.atoms.double().numpy()
    step = atoms[1] - atoms[0]
    with torch.no_grad():
        next_dist = agent.return_distribution(batch.next_obs)
        probs = next_dist.probs.double().numpy()
        log_probs = torch.log_softmax(agent.logits(batch.obs), -1).double().numpy()
    expected = 0.0
    for i, (r, d) in enumerate(zip(reward, DISCOUNTS)):
        means = (probs[i] * atoms).sum(-1)
        best = int(np.argmax(means))
        target = np.zeros_like(atoms)
        for p, z in zip(probs[i, best], atoms):
            tz = min(max(r + d * z, atoms[0]), atoms[-1])
            position = (tz - atoms[0]) / step
            low, high = math.floor(position), math.ceil(position)
            if low == high:
                target[low] += p
            else:
                target[low] += p * (high - position)
                target[high] += p * (position - low)
        expected -= (target * log_probs[i, batch.action[i]]).sum() / 3
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-4)


def test_n_step_target_of_umdqn_c_kl_w():
    """The UMNN agents' targets: F'((z - R) / gamma^m | s', a*), p'((z - R) / gamma^m) /
    gamma^m and R + gamma^m Q'(tau | s', a*), from each target network's own law at s'."""
    choose = Utility(1.0, "expectation", {}).greedy
    reward = [0.3, -0.2, 0.5]
    batch = n_step_batch(reward)
    d = torch.tensor(DISCOUNTS)

    def best(agent):
        return choose(agent.return_distribution(batch.next_obs))

    agent = make_agent("rs_umdqn_c")
    z = agent.return_grid
    target = agent.bellman_target(batch, z, choose)
    for i in range(2):
        shifted = (z - reward[i]) / d[i]
        want = agent.cdf(batch.next_obs[i:i + 1], shifted)[0, best(agent)[i]]
        torch.testing.assert_close(target[i], want, atol=1e-5, rtol=0)
    torch.testing.assert_close(target[2], (z >= reward[2]).to(target.dtype))

    agent = make_agent("umdqn_kl")
    z = agent.return_grid
    density = agent.target_density(batch, z, choose)
    for i in range(2):
        shifted = (z - reward[i]) / d[i]
        want = agent.density(batch.next_obs[i:i + 1], shifted)[0, best(agent)[i]] / d[i]
        torch.testing.assert_close(density[i], want, rtol=1e-4, atol=1e-5)

    agent = make_agent("umdqn_w")
    targets = agent.bellman_targets(batch, agent, choose)
    quantiles = agent.quantiles(batch.next_obs)
    for i in range(2):
        want = reward[i] + d[i] * quantiles[i, best(agent)[i]]
        torch.testing.assert_close(targets[i], want, atol=1e-5, rtol=0)
    assert torch.all(targets[2] == reward[2])


# ------------------------------------------------------------------ the update ratio
@pytest.mark.parametrize("ratio, copies", [(Fraction(1, 8), 3), (Fraction(2), 3), (Fraction(3, 4), 1)])
def test_updates_follow_the_ratio_exactly(ratio, copies):
    """Update u follows transition warmup + ceil(u / ratio): 0.125 = one update every 8
    transitions, 2 = two per transition, whatever the number of copies."""
    policy = ActionsOf(lambda obs, step: np.zeros(obs.shape[:2], np.int64))
    collector = one_member_collector(env_section(id="CartPole-v1"), policy, copies=copies,
                                     capacity=1000, updates_per_step=ratio, batch_size=4,
                                     warmup_steps=10)
    followed = [collector.experience().env_steps for _ in range(40)]
    assert followed == [10 + math.ceil(u / ratio) for u in range(1, 41)]
    assert collector.env_steps - math.ceil(40 / ratio) - 10 < copies


def test_update_ratio_reads_decimals_as_fractions():
    assert update_ratio(0.125) == Fraction(1, 8)
    assert update_ratio(1 / 3) == Fraction(1, 3)
    assert update_ratio(2) == 2 and update_ratio(0.1) == Fraction(1, 10)


# ------------------------------------------------------------------ runs and resume
N_STEP_RUN = ["env=cartpole", "env.num_envs=3", "agent=qr_dqn", "agent.hidden_sizes=[32]",
              "agent.n_quantiles=8", "logger=none", "callbacks.progress_bar=false",
              "trainer.max_steps=60", "learning.warmup_steps=20", "learning.n_step=3",
              "learning.updates_per_step=0.4", "trainer.checkpoint_every_n_steps=25",
              "evaluation.every_n_steps=30", "evaluation.episodes=20",
              "evaluation.episodes_during_training=5"]


def test_n_step_run_resumes_to_the_same_run(compose, tmp_path):
    full = run(compose(N_STEP_RUN), run_dir=tmp_path / "full")
    # 20 warm-up transitions + 60 updates at 0.4 per transition: 170 transitions and more.
    assert 170 <= full["env_steps"] < 173
    checkpoint = tmp_path / "full" / "checkpoints" / "step0000025.ckpt"
    state = torch.load(checkpoint, weights_only=True)  # plain tensors and numbers
    collector = state["ExperienceDataModule"]["collector"]
    assert collector["n_step"] == 3 and collector["updates_per_step"] == [2, 5]
    window = collector["n_step_window"]
    assert window["obs"].shape == (3, 3, 4) and window["started"] == collector["env_steps"] // 3
    # Update 25 follows transition 20 + 25 / 0.4 = 82.5: the step of the copies that
    # collected transitions 82-84 left (84 - 82.5) * 2 fifths of an update.
    assert collector["update_credit"] == 3 and collector["env_steps"] == 84
    resumed = run(compose([*N_STEP_RUN, f"ckpt_path={checkpoint}"]), run_dir=tmp_path / "resumed")
    assert resumed == full
    assert (tmp_path / "resumed" / "eval.json").read_text() == (tmp_path / "full" / "eval.json").read_text()

    from rs_lightning.app.run_folders import check_inputs

    for override, message in (("learning.n_step=2", "written with learning.n_step=3"),
                              ("learning.updates_per_step=1", "learning.updates_per_step=0.4")):
        with pytest.raises(ConfigError) as error:
            check_inputs(compose([*N_STEP_RUN, override, f"ckpt_path={checkpoint}"]))
        assert error.value.key == "ckpt_path" and message in str(error.value)


def test_stop_at_return_ends_the_run_with_its_outputs(compose, tmp_path):
    """A target every policy reaches (0) stops the run at the first evaluation; it still
    ends with a checkpoint, eval.json and a history line with the training seconds."""
    overrides = ["env=cartpole", "agent=dqn", "agent.hidden_sizes=[16]", "logger=none",
                 "callbacks.progress_bar=false", "trainer.max_steps=500",
                 "learning.warmup_steps=10", "evaluation.every_n_steps=20",
                 "evaluation.episodes=10", "evaluation.episodes_during_training=3",
                 "trainer.stop_at_return=0", "parallel_seeds=2"]
    result = run(compose(overrides), run_dir=tmp_path)
    for seed in ("0", "1"):
        summary = result["members"][seed]
        assert summary["steps"] == 20
        history = [json.loads(line) for line in (tmp_path / f"seed_{seed}" / "eval_history.jsonl").open()]
        assert [r["step"] for r in history] == [20] and history[0]["train_seconds"] > 0
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["global_step"] == 20


def test_max_time_ends_the_run_with_its_outputs(compose, tmp_path):
    overrides = ["env=cartpole", "agent=dqn", "agent.hidden_sizes=[16]", "logger=none",
                 "callbacks.progress_bar=false", "trainer.max_steps=10000000",
                 "learning.warmup_steps=10", "evaluation.every_n_steps=0",
                 "evaluation.episodes=5", "trainer.max_time=00:00:01"]
    summary = run(compose(overrides), run_dir=tmp_path)
    assert 0 < summary["steps"] < 10000000 and (tmp_path / "eval.json").is_file()


def test_members_checkpoint_keeps_its_own_window(compose, tmp_path):
    """A two-member n-step run's member checkpoint holds that member's copies of the window."""
    overrides = [*N_STEP_RUN, "parallel_seeds=2", "trainer.max_steps=30",
                 "evaluation.every_n_steps=0"]
    run(compose(overrides), run_dir=tmp_path)
    whole = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    own = torch.load(tmp_path / "seed_1" / "checkpoints" / "last.ckpt", weights_only=True)
    both = whole["ExperienceDataModule"]["collector"]["n_step_window"]
    mine = own["ExperienceDataModule"]["collector"]["n_step_window"]
    assert torch.equal(mine["obs"], both["obs"][:, 3:]) and mine["started"] == both["started"]


def test_checkpoint_of_the_one_step_engine_still_resumes(compose, tmp_path):
    """A checkpoint written before these settings (no discounts in the replay memory, the
    transitions not yet matched by an update as ``pending_updates``) resumes to the same run."""
    overrides = ["env=cartpole", "env.num_envs=3", "agent=dqn", "agent.hidden_sizes=[16]",
                 "logger=none", "callbacks.progress_bar=false", "trainer.max_steps=60",
                 "learning.warmup_steps=20", "trainer.checkpoint_every_n_steps=26",
                 "evaluation.every_n_steps=0", "evaluation.episodes=10"]
    run(compose(overrides), run_dir=tmp_path / "full")
    state = torch.load(tmp_path / "full" / "checkpoints" / "step0000026.ckpt", weights_only=True)
    collector = state["ExperienceDataModule"]["collector"]
    assert collector["update_credit"] == 2  # update 26 follows transition 46 of 46-48
    collector["pending_updates"] = collector.pop("update_credit")
    for key in ("updates_per_step", "n_step"):
        del collector[key]
    del collector["replay"]["discount"]
    del state["rs_lightning"]["format_version"]  # as checkpoints of that engine: no format
    old = tmp_path / "old.ckpt"
    torch.save(state, old)
    run(compose([*overrides, f"ckpt_path={old}"]), run_dir=tmp_path / "resumed")
    assert (tmp_path / "resumed" / "eval.json").read_text() == (tmp_path / "full" / "eval.json").read_text()
