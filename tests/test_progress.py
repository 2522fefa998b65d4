"""The training progress display (rs_lightning.engine.callbacks.TrainingProgress): fitted to an
80-column terminal without cutting R_s, the rate shown once, the last evaluation kept until the
next one, and plain lines where there is no terminal size."""

from __future__ import annotations

import io
import os
import re
from types import SimpleNamespace

import pytest

from rs_lightning.engine.callbacks import (
    TrainingProgress,
    compact_number,
    progress_legend,
    progress_line,
    terminal_width,
)

# A long-episode environment's values, the widest the line meets.
METRICS = {
    "train/epsilon": 0.5512, "train/episode_return": -487.25, "train/risk_outcome": -0.1043,
    "eval/utility": -412.3, "eval/expectation": -500.0, "eval/risk_outcome": 0.2,
    "eval/w1_greedy": 0.03112,
}


def test_compact_numbers():
    assert [compact_number(v) for v in (0.55, -0.104, 12345.6, 1e-5, 0.0, -500.0)] == [
        ".55", "-.104", "1.23e4", "1e-5", "0", "-500"]


@pytest.mark.parametrize("width", [79, 60, 45])
def test_a_narrow_line_leaves_fields_out_and_never_cuts_r_s(width):
    wide = progress_line(150, 30000, 14.62, 10.3, METRICS, None)
    assert len(wide) > 79  # everything does not fit in 80 columns
    line = progress_line(150, 30000, 14.62, 10.3, METRICS, width)
    assert len(line) <= width
    assert re.search(r"^150/30000 14\.6/s .*R_s -\.104 \| eval .*R_s \.2\b", line), line
    # What is shown is whole: every label has its value.
    assert set(line.split()) <= set(wide.split())
    assert line.count("/s") == 1


def test_an_80_column_line_keeps_the_evaluation_and_the_rate_once():
    grid_world = {**METRICS, "train/episode_return": 0.43, "eval/utility": -0.41,
                  "eval/expectation": 0.3}
    line = progress_line(150, 300, 14.62, 10.3, grid_world, 79)
    assert line == "150/300 14.6/s 0:10<0:10 ret .43 R_s -.104 | eval U -.41 E .3 R_s .2 W1 .0311"


def module_and_trainer(step: int, metrics: dict):
    return (SimpleNamespace(global_step=step, max_steps=300),
            SimpleNamespace(live_metrics=dict(metrics), log_every_n_steps=50))


def test_on_a_terminal_the_line_is_redrawn_in_place_within_the_width():
    stream = io.StringIO()
    progress = TrainingProgress(refresh_seconds=0.0, stream=stream, width=80)
    trainer, module = module_and_trainer(0, {})
    progress.on_train_start(trainer, module)
    for step in (50, 100, 150):
        trainer.global_step = step
        module.live_metrics.update(METRICS if step == 150 else {"train/risk_outcome": 0.5})
        progress.on_train_batch_end(trainer, module, None, None, step)
    progress.on_train_end(trainer, module)
    frames = stream.getvalue().rstrip("\n").split("\r")[1:]
    assert len(frames) == 3 and stream.getvalue().endswith("\n")
    assert all(len(frame) == 79 for frame in frames)  # padded over the previous frame
    assert "R_s .5" in frames[0] and "| eval" in frames[2] and "R_s .2" in frames[2]


def test_without_a_terminal_size_plain_lines_keep_the_last_evaluation(compose, tmp_path, capfd):
    """A real run (stderr is no terminal under pytest): a line after the evaluation at step
    100, and the final line at 150 still shows that evaluation's values."""
    from rs_lightning.app.train import run

    cfg = compose(["agent=dqn", "debug=quick", "logger=none", "trainer.max_steps=150",
                   "evaluation.every_n_steps=100", "evaluation.episodes=20",
                   "evaluation.episodes_during_training=20"])
    run(cfg, tmp_path)
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if re.match(r"\[rs_lightning\] \d+/150 ", line)]
    # The legend first, once; the final evaluation once, on one line.
    assert err.count("[rs_lightning] progress: ") == 1
    assert err.index("[rs_lightning] progress: ") < err.index(lines[0])
    assert "eps random-action share" in err and "W1 " in err
    final = [line for line in err.splitlines() if "E=" in line or "expectation" in line]
    assert len(final) == 1 and final[0].startswith(
        "[rs_lightning] final evaluation of dqn on rs_lightning/RiskyRewards-v0, 20 episodes: E=")
    assert [line.split()[1] for line in lines] == ["100/150", "150/150"], lines
    evaluated = lines[0].split("| eval ")[1]
    assert evaluated.startswith("U ") and "R_s" in evaluated
    assert lines[1].split("| eval ")[1] == evaluated
    assert all(line.count("/s ") == 1 for line in lines)
    assert (tmp_path / "policy.png").is_file()  # a grid world's policy, drawn at the end


def test_the_legend_names_epsilon_only_for_an_agent_that_explores_by_it():
    assert progress_legend(True).startswith("progress: updates/total, updates/s, ")
    assert "eps " in progress_legend(True) and "eps " not in progress_legend(False)
    # Every label of the line is in the legend.
    line = progress_line(150, 300, 14.62, 10.3, METRICS, None)
    labels = {word for word in line.split() if word[0].isalpha() and word != "eval"}
    assert labels <= set(progress_legend(True).replace(",", " ").split())


def test_an_actor_critic_run_shows_no_epsilon(compose, tmp_path, capfd):
    """Actor-critics act on their own sample, not epsilon-greedy: no eps in their line or
    legend."""
    from rs_lightning.app.train import run

    cfg = compose(["agent=dsac", "env=pendulum", "debug=quick", "logger=none",
                   "trainer.max_steps=60", "learning.warmup_steps=20",
                   "evaluation.episodes=2", "evaluation.episodes_during_training=2"])
    run(cfg, tmp_path)
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if re.match(r"\[rs_lightning\] \d+/60 ", line)]
    assert lines and not any(" eps " in line for line in lines), lines
    assert "[rs_lightning] progress: " in err and "random-action share" not in err


def test_terminal_width_is_known_only_on_a_terminal(monkeypatch):
    assert terminal_width(io.StringIO()) is None
    parent, child = os.openpty()
    with open(child, "w") as terminal:
        monkeypatch.setenv("COLUMNS", "80")
        assert terminal_width(terminal) == 80
        monkeypatch.delenv("COLUMNS")
        os.set_blocking(parent, True)
        # A fresh pseudo-terminal has no size (0 columns): no width, so plain lines.
        assert terminal_width(terminal) in (None, os.get_terminal_size(child).columns)
    os.close(parent)


def test_the_evaluation_bar_writes_nothing_where_stderr_is_no_terminal(capsys):
    """A log file or a pipe gets no carriage-return frames of the bar and no line of its
    own: the caller prints the figures once."""
    import torch
    from omegaconf import OmegaConf

    from rs_lightning.analysis.evaluation import evaluate_policy
    from rs_lightning.risk import Utility

    env = OmegaConf.create({"id": "rs_lightning/RiskyRewards-v0", "kwargs": {"max_steps": 10},
                            "gamma": 0.9, "grid_size": 3})
    right = lambda obs: torch.zeros(len(obs), dtype=torch.long)  # noqa: E731
    evaluate_policy(right, env, Utility(1.0), 0.1, 1200, seed=0, batch_envs=100, progress=True)
    assert capsys.readouterr().err == ""
