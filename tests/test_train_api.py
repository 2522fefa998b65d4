"""``rs_lightning.train``: training from Python, checked and written as the command line does,
returning the agent of the Python API."""

from __future__ import annotations

import json

import numpy as np
import pytest

import rs_lightning
from rs_lightning.errors import ConfigError

QUICK = {"debug": "quick", "logger": "none", "callbacks.progress_bar": False,
         "trainer.max_steps": 120, "evaluation.every_n_steps": 60, "evaluation.episodes": 50,
         "evaluation.episodes_during_training": 20}


def test_a_discrete_agent_trains_from_a_mapping_and_acts(tmp_path):
    run = tmp_path / "c51"
    agent = rs_lightning.train({**QUICK, "agent": "c51", "env": "two_stage", "alpha": 0.3},
                               run_dir=run)
    assert isinstance(agent, rs_lightning.TrainedAgent)
    summary = json.loads((run / "eval.json").read_text())  # the command line's run folder
    assert summary["agent"] == "c51" and summary["alpha"] == 0.3 and summary["steps"] == 120
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    cells = np.array([[0, 0], [1, 1], [2, 2]], dtype=np.float32)
    actions = agent.act(cells)
    assert actions.shape == (3,) and set(actions.tolist()) <= set(range(agent.n_actions))
    laws = agent.distribution(cells)
    assert laws.expectation.shape == (3, agent.n_actions)
    assert np.isfinite(agent.evaluate(episodes=20, seed=0)["utility"])
    # Run again: the finished run is not trained again, and the same agent comes back.
    again = rs_lightning.train({**QUICK, "agent": "c51", "env": "two_stage", "alpha": 0.3},
                               run_dir=run)
    np.testing.assert_array_equal(again.act(cells), actions)


def test_a_continuous_agent_trains_from_overrides(tmp_path):
    agent = rs_lightning.train([f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                                for k, v in QUICK.items()]
                               + ["agent=tqc", "env=pendulum", "agent.hidden_sizes=[16]",
                                  "learning.batch_size=16"], run_dir=tmp_path / "tqc")
    assert agent.continuous
    actions = agent.act(np.zeros((2, 3), dtype=np.float32))
    assert actions.shape[0] == 2 and np.all(np.isfinite(actions))


@pytest.mark.parametrize("overrides, message", [
    ({"alpha": 2}, "alpha: must be in [0, 1], got 2.0"),
    (["agent=nope"], "agent: no option 'nope'; allowed: c51, dqn, "),
    (["alpha==1"], "override 'alpha==1': is malformed"),
    ("alpha=1", "overrides: a list of key=value strings or a mapping, got the string"),
])
def test_bad_input_raises_the_command_lines_one_line_and_writes_nothing(tmp_path, overrides,
                                                                      message):
    with pytest.raises(ConfigError) as error:
        rs_lightning.train(overrides, run_dir=tmp_path / "run")
    assert str(error.value).startswith(message)
    assert not (tmp_path / "run").exists()
