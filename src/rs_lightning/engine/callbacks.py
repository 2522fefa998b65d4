"""Training callbacks of the engine: the progress display and the checkpoint on SIGTERM."""

from __future__ import annotations

import sys
from pathlib import Path

import pytorch_lightning as pl
from pytorch_lightning.utilities.exceptions import SIGTERMException
from tqdm.auto import tqdm


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

        if isinstance(exception, SIGTERMException):
            trainer.save_checkpoint(self.path)


class RewardOutsideSupport(pl.Callback):
    """Warn once per run when a learnt reward (scaled and clipped) lies far outside the
    declared return support [return_min, return_max], more than its width beyond either end:
    the return distributions cannot represent such returns, and the support or
    ``env.reward_scale`` is probably wrong. The replay memory's rewards are checked every
    ``period`` updates (a min and a max, nothing per step)."""

    def __init__(self, return_min: float, return_max: float, period: int = 500) -> None:
        width = return_max - return_min
        self.support = (return_min, return_max)
        self.low, self.high = return_min - width, return_max + width
        self.period = period
        self.warned = False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.warned or trainer.global_step % self.period not in (0, 1):
            return
        collector = getattr(trainer.datamodule, "collector", None)
        if collector is None or not len(collector.replay):
            return
        rewards = collector.replay.reward[:, :len(collector.replay)]
        low, high = float(rewards.min()), float(rewards.max())
        if low >= self.low and high <= self.high:
            return
        self.warned = True
        far = low if low < self.low else high
        print(f"warning: a learnt reward of {far:g} lies far outside the return support "
              f"[{self.support[0]:g}, {self.support[1]:g}] (env.return_min, env.return_max): "
              "widen the support or scale the rewards (env.reward_scale)", file=sys.stderr)


class TrainingProgress(pl.Callback):
    """A tqdm bar over gradient updates showing steps/s, epsilon, recent return and R_s and
    the last evaluation's U and W1 (kept until the next evaluation)."""

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
