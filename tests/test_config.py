"""Every config group option composes and validates; bad values give one clear error."""

from __future__ import annotations

import pytest

from rs_lightning.config.schema import validate
from rs_lightning.errors import ConfigError
from tests.conftest import CONF

GROUPS = ["agent", "risk", "env", "logger", "trainer", "callbacks", "debug", "network", "experiment"]


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "override", [f"{g}={o}" for g in GROUPS for o in options(g)] + ["hardware=cpu"]
)
def test_every_group_option_composes_and_validates(compose, override):
    # env=gym is any gymnasium environment: it needs the id (tests/test_gym_envs.py).
    # PPO follows a risk through the static objective only (per_decision at the default
    # risk is refused in one line: tests/test_ppo.py).
    extra = {"env=gym": ["env.id=CartPole-v1"], "agent=ppo": ["objective=static"]}
    settings = validate(compose([override, *extra.get(override, [])]))
    assert 0.0 <= settings.train.alpha <= 1.0


@pytest.mark.parametrize("option", [o for o in options("hardware") if o != "cpu"])
def test_gpu_hardware_options_compose(compose, option):
    import torch

    cfg = compose([f"hardware={option}"])
    if torch.cuda.is_available():
        validate(cfg)
    else:
        with pytest.raises(ConfigError, match="no CUDA device"):
            validate(cfg)


def test_defaults_are_the_papers_hyperparameters(compose):
    train = validate(compose()).train
    learning = train.learning
    assert (learning.batch_size, learning.replay_capacity) == (32, 10_000)
    assert (learning.lr, learning.adam_eps, learning.grad_clip_norm) == (1e-4, 1e-5, 1.0)
    assert learning.target_update_period == 1000
    assert (learning.epsilon_start, learning.epsilon_end, learning.epsilon_decay) == (1.0, 0.01, 1e4)
    assert (train.alpha, train.rho, train.env.gamma) == (0.5, 0.1, 0.9)
    assert (train.env.return_min, train.env.return_max) == (-2.0, 2.0)
    assert train.logger.backend == "wandb" and train.logger.offline is True
    assert validate(compose()).agent.name == "rs_umdqn_c"  # the risk-sensitive agent by default


def test_used_by_overrides_reach_the_utility(compose):
    settings = validate(compose(["env=risky_transitions", "risk=cvar", "alpha=0.3"]))
    assert settings.utility.alpha == 0.3
    assert settings.utility.risk == "cvar"
    assert settings.utility.params == {"rho": 0.1}
    assert settings.train.env.id == "rs_lightning/RiskyTransitions-v0"


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["alpha=1.5"], "alpha"),
        (["alpha=-0.1"], "alpha"),
        (["rho=0"], "rho"),
        (["rho=1"], "rho"),
        (["alpha=abc"], "alpha"),
        (["learning.batch_size=-1"], "learning.batch_size"),
        (["learning.batch_size=0"], "learning.batch_size"),
        (["learning.replay_capacity=0"], "learning.replay_capacity"),
        (["learning.lr=0"], "learning.lr"),
        (["learning.epsilon_schedule=cosine"], "learning.epsilon_schedule"),
        (["trainer.max_steps=0"], "trainer.max_steps"),
        (["env.gamma=1.0"], "env.gamma"),
        (["env.return_min=3"], "env.return_min"),
        (["agent.name=nope"], "agent"),
        (["risk.name=nope"], "risk"),
        (["agent.hidden_sizes=[]"], "agent.hidden_sizes"),
        (["agent.loss=l1"], "agent.loss"),
        (["logger.backend=mlflow"], "logger.backend"),
        (["hardware.accelerator=tpu"], "hardware.accelerator"),
        (["+risk.beta=2"], "risk"),
        (["learning.n_step=1000000"], "learning.n_step"),
        (["learning.n_step=64", "learning.replay_capacity=32", "learning.batch_size=32"],
         "learning.n_step"),
        (["learning.warmup_steps=2000000"], "learning.warmup_steps"),
    ],
)
def test_bad_values_name_the_key(compose, overrides, key):
    with pytest.raises(ConfigError) as error:
        validate(compose(overrides))
    assert error.value.key == key
    message = str(error.value)
    assert "\n" not in message and message.startswith(key)
