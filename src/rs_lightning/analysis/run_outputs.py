"""What a member of a finished run writes after training: the final evaluation
(``eval.json``, ``policy.json``), the grid policy's arrows (``policy.png``) and, for its W&B
runs, the evaluation as a Table and the return distributions of the decision state
(``distributions.png``), then the final metrics to every logger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rs_lightning.analysis.evaluation import evaluate_run
from rs_lightning.analysis.plots import plot_policy, plot_return_distributions
from rs_lightning.analysis.report import DECISION_CELLS, START_CELL, log_run_media
from rs_lightning.analysis.runs import TrainedRun


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
    """W&B runs also get the evaluation as a Table and, on a grid world, the distribution
    figure of the decision state (written into the run folder as ``distributions.png``)."""
    wandb_loggers = [logger for logger in loggers if type(logger).__name__ == "WandbLogger"]
    if not wandb_loggers:
        return
    figure = None
    env = run_config.train.env
    if env.grid_size:
        figure = folder / "distributions.png"
        trained = TrainedRun(run_config, policy, folder, steps, env_steps)
        plot_return_distributions(trained, DECISION_CELLS.get(env.id, START_CELL), figure)
    for logger in wandb_loggers:
        log_run_media(logger.experiment, summary, figure)
