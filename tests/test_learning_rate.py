"""learning.lr_schedule: the learning rate of each update, constant or linear to 0 at
trainer.max_steps, in the optimizer a run checkpoints, and a run with it resumes exactly."""

from __future__ import annotations

import pytest
import torch

from rs_lightning.engine.learner import learning_rate
from tests.conftest import run_and_resume_from_step_100


def test_the_linear_schedule_goes_from_lr_toward_zero_over_the_run():
    assert [learning_rate(0.01, "linear", u, 4) for u in (1, 2, 3, 4, 5)] \
        == pytest.approx([0.01, 0.0075, 0.005, 0.0025, 0.0])
    assert learning_rate(0.01, "constant", 4, 4) == 0.01


def test_a_linear_schedules_run_steps_with_it_and_resumes_exactly(compose, tmp_path):
    def config(*more):
        return compose(["agent=qr_dqn", "debug=quick", "logger=none",
                        "callbacks.progress_bar=false", "trainer.max_steps=200",
                        "trainer.checkpoint_every_n_steps=100", "evaluation.every_n_steps=0",
                        "evaluation.episodes=20", "learning.lr=1e-3",
                        "learning.lr_schedule=linear", *more])

    run_and_resume_from_step_100(config, tmp_path, seeds=0)  # the same results
    assert ((tmp_path / "full" / "eval.json").read_text()
            == (tmp_path / "resumed" / "eval.json").read_text())
    for step, folder in ((100, "full"), (200, "full"), (200, "resumed")):
        name = f"step{step:07d}.ckpt"
        state = torch.load(tmp_path / folder / "checkpoints" / name, weights_only=True)
        (group,) = state["optimizer_states"][0]["param_groups"]
        assert group["lr"] == pytest.approx(learning_rate(1e-3, "linear", step, 200)), folder


def test_an_unknown_schedule_is_refused_naming_the_allowed_ones(compose):
    from rs_lightning.config.schema import validate
    from rs_lightning.errors import ConfigError

    with pytest.raises(ConfigError, match=r"learning\.lr_schedule.*constant, linear"):
        validate(compose(["learning.lr_schedule=cosine"]))
