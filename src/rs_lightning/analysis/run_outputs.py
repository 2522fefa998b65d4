"""What a member of a finished run writes after training: the final evaluation
(``eval.json``, ``policy.json``), the grid policy's arrows (``policy.png``) and, for its W&B
and TensorBoard runs, the evaluation as a table, the return distributions of the decision state
(``distributions.png``) and a video of one episode of the greedy policy (``episode.gif``,
``logger.video``), then the final metrics to every logger."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rs_lightning.analysis.evaluation import evaluate_run
from rs_lightning.analysis.plots import plot_policy, plot_return_distributions
from rs_lightning.analysis.report import DECISION_CELLS, START_CELL, log_run_media
from rs_lightning.analysis.runs import TrainedRun

# The most steps of the episode in the W&B video: a clip to watch, not a whole long episode
# (CartPole's 500 steps would make a GIF of tens of megabytes).
VIDEO_STEPS = 300
VIDEO_NAME = "episode.gif"


def write_member_outputs(policy, run_config, folder: Path, loggers: list, steps: int,
                         env_steps: int, skipped_updates: int) -> dict[str, Any]:
    """The final outputs of one member (``policy``: its
    :class:`~rs_lightning.engine.learner.MemberPolicy`; ``run_config``: the validated config
    of the single-seed run it is) into ``folder``; returns its evaluation summary."""
    summary = evaluate_run(policy, run_config, folder, steps=steps, env_steps=env_steps)
    if (folder / "policy.json").is_file():  # grid worlds: arrows on the grid
        plot_policy(json.loads((folder / "policy.json").read_text()),
                    run_config.train.env.id, folder / "policy.png")
    log_media(loggers, summary, policy, run_config, folder, steps, env_steps)
    final = {f"eval/final_{key}": v for key, v in summary.items() if isinstance(v, (int, float))}
    final["train/skipped_updates"] = float(skipped_updates)
    for logger in loggers:
        logger.log_metrics(final, step=steps)
    return summary


def log_media(loggers, summary, policy, run_config, folder: Path, steps: int,
              env_steps: int) -> None:
    """W&B and TensorBoard runs also get the evaluation as a table and, on a grid world, the
    distribution figure of the decision state for an agent with a law per action (written
    into the run folder as ``distributions.png``); TensorBoard the final evaluation's returns as a histogram."""
    wandb_loggers = [logger for logger in loggers if type(logger).__name__ == "WandbLogger"]
    board_loggers = [logger for logger in loggers if type(logger).__name__ == "TensorBoardLogger"]
    if not wandb_loggers and not board_loggers:
        return
    figure = None
    env = run_config.train.env
    trained = TrainedRun(run_config, policy, folder, steps, env_steps)
    agent = policy.agent
    if env.grid_size and not (agent.continuous_actions or agent.on_policy):  # a law per action
        figure = folder / "distributions.png"
        plot_return_distributions(trained, DECISION_CELLS.get(env.id, START_CELL), figure)
    video = episode_video(trained, folder / VIDEO_NAME) if run_config.train.logger.video else None
    for logger in wandb_loggers:
        log_run_media(logger.experiment, summary, figure, video)
    for logger in board_loggers:
        log_board_media(logger.experiment, summary, figure, steps, video)


def episode_video(run: TrainedRun, out: Path) -> Path | None:
    """One episode of the greedy policy of ``run`` (at most ``VIDEO_STEPS`` steps) as the
    GIF ``out``, drawn as ``rs-lightning record`` draws it; None, with a note of one line on
    stderr, where it cannot be: an environment that draws no pictures, a policy of the
    return so far, a renderer that fails (the run's outputs are complete without it)."""
    from rs_lightning.analysis.api import TrainedAgent
    from rs_lightning.analysis.recording import (
        env_metadata,
        headless_rendering,
        record_episodes,
        render_mode,
        write_video,
    )

    train = run.run_config.train
    if not run.module.objective.observation_markov:
        print(f"note: logger.video: objective={train.objective} acts on the return so far; "
              "the episode video plays policies of the observation alone, so none is logged",
              file=sys.stderr)
        return None
    try:
        render_mode(train.env.id)
    except ValueError as error:
        print(f"note: logger.video: {error}; no episode video is logged", file=sys.stderr)
        return None
    headless_rendering()
    try:
        frames = record_episodes(TrainedAgent(run.module, run), 1, max_steps=VIDEO_STEPS)
        write_video(frames, out, int(env_metadata(train.env.id).get("render_fps") or 30))
    except Exception as error:  # a renderer's own failure (no OpenGL, a missing display)
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        print(f"warning: logger.video: the episode could not be drawn ({type(error).__name__}: "
              f"{first}); no episode video is logged", file=sys.stderr)
        return None
    return out


def log_board_media(writer, summary: dict[str, Any], figure: Path | None, step: int,
                    video: Path | None = None) -> None:
    """The final evaluation in a TensorBoard ``SummaryWriter``: its episode returns as a
    histogram (eval.json's bins; the sums from its mean and standard deviation, exact),
    its figures as a text table, the distribution figure as an image and the episode
    video (a GIF) as the animated image ``eval/episode``."""
    histogram, n = summary["return_histogram"], summary["episodes"]
    mean, std = summary["expectation"], summary["return_std"]
    writer.add_histogram_raw(
        "eval/final_returns", min=histogram["edges"][0], max=histogram["edges"][-1], num=n,
        sum=mean * n, sum_squares=n * (std ** 2 + mean ** 2),
        bucket_limits=histogram["edges"][1:], bucket_counts=histogram["counts"],
        global_step=step)
    rows = [f"| {key} | {value} |" for key, value in sorted(summary.items())
            if isinstance(value, (int, float, str))]
    writer.add_text("eval/summary", "\n".join(["| metric | value |", "|---|---|", *rows]), step)
    if figure is not None and Path(figure).is_file():
        from PIL import Image

        with Image.open(figure) as image:
            writer.add_image("figures/distributions", np.asarray(image.convert("RGB")), step,
                             dataformats="HWC")
    if video is not None and Path(video).is_file():
        writer._get_file_writer().add_summary(gif_summary("eval/episode", Path(video)), step)
    writer.flush()


def gif_summary(tag: str, gif: Path):
    """A TensorBoard image summary holding the GIF's own bytes, which TensorBoard's images
    tab plays (what ``SummaryWriter.add_video`` writes, without re-encoding the frames,
    which would need moviepy)."""
    from PIL import Image
    from tensorboard.compat.proto.summary_pb2 import Summary

    with Image.open(gif) as image:
        width, height = image.size
    picture = Summary.Image(height=height, width=width, colorspace=3,
                            encoded_image_string=gif.read_bytes())
    return Summary(value=[Summary.Value(tag=tag, image=picture)])
