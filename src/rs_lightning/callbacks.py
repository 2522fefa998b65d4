"""Training callbacks: a live progress bar and the periodic evaluation of the greedy policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytorch_lightning as pl
from tqdm.auto import tqdm

from rs_lightning.evaluation import evaluate_policy
from rs_lightning.ground_truth import exact_policy_metrics, start_state_distances


class CheckpointOnSigterm(pl.Callback):
    """Save ``path`` when SIGTERM stops the run (a scheduler's time limit or preemption,
    ``kill``, ``scancel``), so that no update is lost: the same command resumes from it.

    Lightning turns SIGTERM into ``SIGTERMException`` at the end of a training step, after
    that step's callbacks, so the saved state is the one a periodic checkpoint of that step
    holds."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        from pytorch_lightning.utilities.exceptions import SIGTERMException

        if isinstance(exception, SIGTERMException):
            trainer.save_checkpoint(self.path)


class TrainingProgress(pl.Callback):
    """A tqdm bar over gradient updates showing steps/s, epsilon, recent return and R_s."""

    _SHOWN = {
        "train/steps_per_second": "it/s",
        "train/epsilon": "eps",
        "train/episode_return": "return",
        "train/risk_outcome": "R_s",
        "eval/utility": "eval U",
        "eval/w1_greedy": "W1",
    }

    def __init__(self, refresh_seconds: float = 1.0) -> None:
        self.refresh_seconds = refresh_seconds
        self.bar: tqdm | None = None
        self._shown_step = 0

    def on_train_start(self, trainer, pl_module) -> None:
        self.bar = tqdm(
            total=trainer.max_steps,
            initial=trainer.global_step,
            desc="training",
            unit="step",
            mininterval=self.refresh_seconds,
            dynamic_ncols=True,
        )
        self._shown_step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step % pl_module.log_every_n_steps:
            return
        self.bar.update(step - self._shown_step)
        self._shown_step = step
        shown = {
            label: f"{pl_module.live_metrics[key]:.3g}"
            for key, label in self._SHOWN.items()
            if key in pl_module.live_metrics
        }
        self.bar.set_postfix(shown, refresh=False)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.bar is not None:
            self.bar.update(trainer.global_step - self._shown_step)
            self.bar.close()


class PeriodicEvaluation(pl.Callback):
    """Every ``every_n_steps`` updates, a Monte Carlo evaluation of the greedy policy.

    On the grid worlds it adds the exact E, VaR, CVaR, U and R_s of that policy and the
    Wasserstein-1 distance between the learned and the exact return distribution of every
    action at the start state (``w1_*``), so that learning the distribution can be watched.
    """

    def __init__(self, env_config, rho: float, every_n_steps: int, episodes: int, seed: int,
                 batch_envs: int, history_path: Path | None = None) -> None:
        self.history_path = history_path
        self.env_config = env_config
        self.rho = rho
        self.every_n_steps = every_n_steps
        self.episodes = episodes
        self.seed = seed
        self.batch_envs = batch_envs

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.every_n_steps <= 0 or step % self.every_n_steps:
            return
        metrics = evaluate_during_training(
            pl_module, self.env_config, self.rho, self.episodes, self.seed, self.batch_envs,
            step, batch.env_steps, self.history_path, pl_module.clock.seconds(),
        )
        pl_module.live_metrics.update(metrics)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)


def evaluate_during_training(module, env_config, rho: float, episodes: int, seed: int,
                             batch_envs: int, step: int, env_steps: int,
                             history_path: Path | None, train_seconds: float | None = None,
                             ) -> dict[str, float]:
    """One periodic evaluation of ``module``'s greedy policy: appended to ``history_path``
    (one JSON line, learning curves that need no logger to survive) and returned as
    ``eval/*`` metrics. ``train_seconds``: wall seconds of training so far (the run's
    :class:`~rs_lightning.module.TrainingClock`), recorded as ``train_seconds``."""
    summary = evaluate_policy(
        module.greedy, env_config, module.utility, rho, episodes, seed, batch_envs,
    )
    summary.update(exact_policy_metrics(module.greedy, env_config, module.utility, rho) or {})
    summary.update(start_state_distances(module, env_config) or {})
    metrics = {f"eval/{k}": v for k, v in summary.items() if isinstance(v, (int, float))}
    metrics["eval/env_steps"] = float(env_steps)
    if history_path is not None:
        record = {"step": step, "env_steps": env_steps, **summary}
        if train_seconds is not None:
            record["train_seconds"] = round(train_seconds, 3)
        with open(history_path, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
    return metrics
