"""Image observations: the convolutional torso (network=cnn) for every agent and K stacked
members, images through the environment adapter, and short runs on an image environment
(MinAtar's only where the minatar extra is installed)."""

from __future__ import annotations

import dataclasses
import json
import math
import sys

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from rs_lightning.agents import AGENTS, Problem, Transitions
from rs_lightning.agents.members import make_members, member_state
from rs_lightning.agents.networks import ConvTorso, NetworkConfig, conv2d
from rs_lightning.app.train import run
from rs_lightning.envs.factory import env_problem, make_env
from rs_lightning.errors import ConfigError
from rs_lightning.risk import Utility
from tests.conftest import CONF, agents_by_actions

IMAGE = (6, 5, 3)  # [H, W, C]: height and width differ, so a wrong layout cannot pass
PROBLEM = Problem(obs_dim=math.prod(IMAGE), n_actions=3, gamma=0.9, return_min=0.0,
                  return_max=2.0, obs_shape=IMAGE)
CNN = NetworkConfig(name="cnn", channels=[4, 8], kernel_size=3, stride=1, layout="channels_last")
# The value-based agents read images; the actor-critics refuse network=cnn (tested below).
DISCRETE = agents_by_actions(continuous=False)
STACKABLE = sorted(name for name in DISCRETE if AGENTS[name][0].supports_members)


def cnn_agent(name: str, seed: int, problem: Problem = PROBLEM, network: NetworkConfig = CNN):
    cls, config_class = AGENTS[name]
    node = OmegaConf.merge(OmegaConf.structured(config_class),
                           OmegaConf.load(CONF / "agent" / f"{name}.yaml"))
    config = OmegaConf.to_object(node)
    config.network = network
    torch.manual_seed(seed)
    return cls(config, problem)


def images(*lead: int, seed: int = 0) -> torch.Tensor:
    """Random 0 / 1 images, flat as the environment adapter gives them."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(*lead, PROBLEM.obs_dim, generator=gen) < 0.3).float()


def transitions(lead: tuple[int, ...], seed: int) -> Transitions:
    gen = torch.Generator().manual_seed(seed + 100)
    terminated = (torch.rand(*lead, generator=gen) < 0.3).float()
    return Transitions(images(*lead, seed=seed), torch.randint(0, 3, lead, generator=gen),
                       torch.rand(*lead, generator=gen) * 0.2, images(*lead, seed=seed + 1),
                       terminated, PROBLEM.gamma * (1.0 - terminated))


def test_an_actor_critic_refuses_the_convolutions_in_one_line():
    import dataclasses

    image_box = dataclasses.replace(PROBLEM, n_actions=1, action_dim=2)
    with pytest.raises(ConfigError) as error:
        cnn_agent("tqc", 0, problem=image_box)
    assert error.value.key == "network.name"
    assert "agent=tqc reads flat observations (network=mlp), got 'cnn'" in str(error.value)


@pytest.mark.parametrize("name", DISCRETE)
def test_every_agent_reads_images_through_the_convolutions(name):
    agent = cnn_agent(name, 0)
    convs = [m for m in agent.modules() if isinstance(m, ConvTorso)]
    assert len(convs) == 1 and convs[0].chw == (3, 6, 5)
    dist = agent.return_distribution(images(7))
    assert dist.values.shape[:2] == (7, 3) and torch.isfinite(dist.values).all()
    assert torch.allclose(dist.probs.sum(-1), torch.ones(7, 3), atol=1e-5)
    loss, _ = agent.loss(transitions((16,), 0), agent, Utility(0.5, "cvar", {"rho": 0.1}).greedy)
    loss.backward()
    first = convs[0].convs[0].weight
    assert first.grad is not None and first.grad.abs().sum() > 0
    # The image matters: another image, another distribution.
    other = agent.return_distribution(images(7, seed=5))
    assert not (torch.allclose(other.values, dist.values) and torch.allclose(other.probs, dist.probs))


@pytest.mark.parametrize("name", STACKABLE)
def test_stacked_members_with_convolutions_are_the_separate_networks(name):
    agents = [cnn_agent(name, seed) for seed in (0, 1)]
    members = make_members([cnn_agent(name, seed) for seed in (0, 1)])
    assert type(members).__name__ == "StackedMembers"
    for k, agent in enumerate(agents):
        assert all(torch.equal(v, agent.state_dict()[key])
                   for key, v in member_state(members.network, k).items())
    obs = images(2, 9, seed=3)
    dist = members.return_distribution(obs)
    batch = transitions((2, 16), 4)
    utility = Utility(1.0, "var", {"rho": 0.1})
    torch.manual_seed(7)
    losses, _ = members.loss(batch, members, utility.greedy)
    losses.sum().backward()
    for k, agent in enumerate(agents):
        single = agent.return_distribution(obs[k])
        assert torch.allclose(dist.values[k], single.values, atol=1e-5)
        assert torch.allclose(dist.probs[k], single.probs, atol=1e-5)
        if name != "iqn":  # IQN draws its fractions: the losses of one draw differ
            loss, _ = agent.loss(Transitions(*(f[k] for f in batch)), agent, utility.greedy)
            assert torch.allclose(losses[k], loss, rtol=1e-4, atol=1e-6)
    grads = [p.grad for p in members.network.parameters()]
    assert all(g is not None and g.shape[0] == 2 for g in grads)


def test_grouped_convolution_is_each_members_convolution():
    gen = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(3, 5, 2, 3, 3, generator=gen), torch.randn(3, 5, generator=gen)
    x = torch.randn(3, 4, 2, 7, 6, generator=gen)
    out = conv2d(x, weight, bias, stride=2)
    assert out.shape == (3, 4, 5, 3, 2)
    for k in range(3):
        expected = torch.nn.functional.conv2d(x[k], weight[k], bias[k], stride=2)
        assert torch.allclose(out[k], expected, atol=1e-5)


def test_channels_first_and_channels_last_read_the_same_image():
    last = ConvTorso(PROBLEM, CNN)
    first_problem = dataclasses.replace(PROBLEM, obs_shape=(3, 6, 5))
    first = ConvTorso(first_problem, dataclasses.replace(CNN, layout="channels_first"))
    first.load_state_dict(last.state_dict())
    hwc = images(4).view(4, *IMAGE)
    chw = hwc.permute(0, 3, 1, 2).reshape(4, -1)
    assert torch.allclose(last(hwc.reshape(4, -1)), first(chw), atol=1e-6)
    assert last.features == 8 * 2 * 1  # two 3x3 convolutions: 6x5 -> 4x3 -> 2x1


def test_features_after_the_image_join_the_convolutions_output():
    """A risk-conditioned agent's setting features come after the image: they skip the
    convolutions and reach the layers after them."""
    problem = dataclasses.replace(PROBLEM, obs_dim=PROBLEM.obs_dim + 4)
    torso = ConvTorso(problem, CNN)
    obs = torch.cat([images(3), torch.rand(3, 4)], dim=-1)
    out = torso(obs)
    assert out.shape == (3, 16 + 4) and torch.equal(out[:, 16:], obs[:, -4:])
    agent = cnn_agent("c51", 0, problem)
    changed = obs.clone()
    changed[:, -1] += 1.0
    assert not torch.allclose(agent.return_distribution(obs).probs,
                              agent.return_distribution(changed).probs)


def test_images_reach_the_agents_flat_with_their_shape():
    section = OmegaConf.create({"id": "tests.gym_test_envs:TinyImage-v0", "kwargs": {},
                                "gamma": 0.9, "return_min": 0.0, "return_max": 1.0,
                                "observation_normalization": "none"})
    env = make_env(section)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (192,) and obs.dtype == np.float32
    problem = env_problem(section)
    assert problem.obs_shape == (8, 8, 3) and problem.obs_dim == 192


# ------------------------------------------------------------------------ runs
QUICK = ["debug=quick", "logger=none", "callbacks.progress_bar=false",
         "trainer.checkpoint_every_n_steps=0", "evaluation.episodes=20",
         "evaluation.episodes_during_training=10"]


def test_a_cnn_run_on_an_image_environment_with_two_members(compose, tmp_path):
    summary = run(compose(["env=gym", "env.id=tests.gym_test_envs:ImageCorridor-v0",
                           "network=cnn", "network.layout=channels_first", "network.channels=[8]",
                           "agent=c51", "risk=cvar", "alpha=0.5", "parallel_seeds=2",
                           "env.num_envs=2", *QUICK]),
                  run_dir=tmp_path)
    for seed in (0, 1):
        saved = json.loads((tmp_path / f"seed_{seed}" / "eval.json").read_text())
        assert saved["episodes"] == 20 and 0.0 <= saved["expectation"] <= 1.0
    config = OmegaConf.load(tmp_path / "config.yaml")
    assert config.network.name == "cnn" and summary is not None


def test_minatar_ids_without_the_extra_name_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "minatar.gym", None)  # as where minatar is not installed
    section = OmegaConf.create({"id": "MinAtar/NotAGame-v1", "kwargs": {}})
    with pytest.raises(ConfigError) as error:
        make_env(section)
    assert error.value.key == "env.id" and "\n" not in str(error.value)
    assert "needs the optional extra 'minatar': pip install -e \".[minatar]\"" in str(error.value)


def test_a_minatar_run(compose, tmp_path):
    pytest.importorskip("minatar", reason="the minatar extra (pip install -e '.[minatar]')")
    summary = run(compose(["experiment=minatar", "agent=qr_dqn", "alpha=0.5", "risk=cvar",
                           "env.num_envs=2", "learning.replay_capacity=500",
                           "learning.warmup_steps=64", "trainer.max_steps=60",
                           "evaluation.every_n_steps=30", *QUICK]),
                  run_dir=tmp_path)
    assert summary["env"] == "MinAtar/Breakout-v1" and summary["episodes"] == 20
    history = [json.loads(line) for line in
               (tmp_path / "eval_history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [30, 60]
    assert history[-1]["env_steps"] == 64 + 4 * 60  # one update every 4 transitions


def test_a_byte_replay_memory_samples_what_a_float_one_does():
    from rs_lightning.engine.replay import ReplayMemory

    memories = [ReplayMemory(50, (12,), seeds=[3, 4], obs_dtype=dtype)
                for dtype in (torch.float32, torch.uint8)]
    gen = np.random.default_rng(0)
    for _ in range(8):
        obs = (gen.random((2, 5, 12)) < 0.5).astype(np.float32)
        fields = (obs, gen.integers(0, 3, (2, 5)), gen.random((2, 5)), 1.0 - obs,
                  np.zeros((2, 5)), np.full((2, 5), 0.9))
        for memory in memories:
            memory.add(*fields)
    floats, nbytes = (memory.sample(16) for memory in memories)
    assert nbytes.obs.dtype == torch.float32 and memories[1].obs.dtype == torch.uint8
    assert all(torch.equal(a, b) for a, b in zip(floats, nbytes))
    restored = ReplayMemory(50, (12,), seeds=[0, 0], obs_dtype=torch.uint8)
    restored.load_state_dict(memories[1].state_dict())
    assert all(torch.equal(a, b) for a, b in zip(restored.sample(16), memories[0].sample(16)))


# A small CNN on the byte-image corridor, checkpointed at update 50.
CORRIDOR_CNN = ["env=gym", "env.id=tests.gym_test_envs:ImageCorridor-v0", "network=cnn",
                "network.layout=channels_first", "network.channels=[4]", "logger=none",
                "callbacks.progress_bar=false", "learning.warmup_steps=20",
                "trainer.checkpoint_every_n_steps=50"]


def test_a_cnn_run_resumes_exactly(compose, tmp_path):
    overrides = [*CORRIDOR_CNN, "agent=qr_dqn", "trainer.max_steps=120",
                 "evaluation.every_n_steps=60", "evaluation.episodes=30",
                 "evaluation.episodes_during_training=10"]
    full = run(compose(overrides), run_dir=tmp_path / "full")
    checkpoint = tmp_path / "full" / "checkpoints" / "step0000050.ckpt"
    replay = torch.load(checkpoint, weights_only=True)["ExperienceDataModule"]["collector"]
    assert replay["replay"]["obs"].dtype == torch.uint8  # bool images held in bytes
    resumed = run(compose([*overrides, f"ckpt_path={checkpoint}"]), run_dir=tmp_path / "resumed")
    assert resumed == full
    assert ((tmp_path / "resumed" / "eval.json").read_text()
            == (tmp_path / "full" / "eval.json").read_text())


def test_a_static_cnn_run_keeps_its_return_features_exact(compose, tmp_path):
    """objective=static appends (c, gamma^t, b) to a byte image: the replay then holds floats."""
    overrides = [*CORRIDOR_CNN, "agent=c51", "objective=static", "trainer.max_steps=60",
                 "evaluation.every_n_steps=0", "evaluation.episodes=10"]
    run(compose(overrides), run_dir=tmp_path / "static")
    checkpoint = tmp_path / "static" / "checkpoints" / "step0000050.ckpt"
    replay = torch.load(checkpoint, weights_only=True)["ExperienceDataModule"]["collector"]["replay"]
    assert replay["obs"].dtype == torch.float32
    gamma_t = replay["next_obs"][..., -2]  # (c, gamma^t, b) follow the image
    filled = gamma_t[gamma_t != 0]
    assert len(filled) and ((filled > 0) & (filled < 1)).all()
