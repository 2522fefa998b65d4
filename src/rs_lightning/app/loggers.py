"""The loggers of a run's members: W&B (offline by default, online with a fallback), CSV,
TensorBoard or none."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger, WandbLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter

from rs_lightning.analysis.wandb_support import quiet_wandb_environment, wandb_online_problem
from rs_lightning.app.run_names import hydra_setting_label, wandb_run_names
from rs_lightning.config.schema import ValidatedConfig


class _ResumingCSVWriter(ExperimentWriter):
    """Lightning's CSV writer, except that the ``metrics.csv`` of the run being resumed is kept
    (Lightning's deletes it): its rows up to the checkpoint's step (``resume_step``) stay, and
    those after it give way to the resumed run's. (A periodic evaluation that a signal gave up
    is logged at the checkpoint's own step, beside the rows logged there before.)"""

    def __init__(self, log_dir: str, resume_step: int) -> None:
        self.resume_step = resume_step
        super().__init__(log_dir=log_dir)

    def _check_log_dir_exists(self) -> None:
        self._earlier: list[dict[str, str]] = []
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as file:
                reader = csv.DictReader(file)
                self._earlier = list(reader)
                self.metrics_keys = sorted(reader.fieldnames or [])
            os.remove(self.metrics_file_path)

    def save(self) -> None:
        if self._earlier and self.metrics:
            kept = [row for row in self._earlier
                    if row.get("step") and float(row["step"]) <= self.resume_step]
            with open(self.metrics_file_path, "w", newline="") as file:
                writer = csv.DictWriter(file, fieldnames=self.metrics_keys)
                writer.writeheader()
                writer.writerows(kept)
            self._earlier = []
        super().save()


class ResumingCSVLogger(CSVLogger):
    """A CSVLogger whose resumed run appends to the metrics it logged before (see above);
    ``resume_step``: the step of the checkpoint it resumes from."""

    def __init__(self, *args, resume_step: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.resume_step = resume_step

    @property
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            os.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ResumingCSVWriter(log_dir=self.log_dir,
                                                  resume_step=self.resume_step)
        return self._experiment


def _sweep_group() -> str | None:

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return Path(HydraConfig.get().sweep.dir).name
    return None


def make_loggers(run_config: ValidatedConfig, run_dir: Path, resolved: dict[str, Any],
                 ckpt_path: str | None = None, resume_step: int = 0) -> list:
    """The configured loggers. W&B online falls back to offline when it cannot connect.

    The W&B run is named by the job's overrides and seed, its group is ``logger.group``, the
    sweep or the setting (rs_lightning.app.run_names); ``ckpt_path``: the checkpoint the run
    resumes from, marked in the name; ``resume_step``: its step (0 for a fresh start).
    """
    cfg = run_config.train.logger
    if cfg.backend == "none":
        return []
    if cfg.backend == "csv":

        return [ResumingCSVLogger(save_dir=str(run_dir), name="csv", version="",
                                  resume_step=resume_step)]
    if cfg.backend == "tensorboard":
        # A resumed run's events replace those the earlier attempt logged after its
        # checkpoint (TensorBoard's purge_step), as its CSV rows do.
        return [TensorBoardLogger(save_dir=str(run_dir), name="tensorboard", version="",
                                  default_hp_metric=False,
                                  purge_step=resume_step + 1 if resume_step else None)]

    quiet_wandb_environment()
    train = run_config.train
    name, group = wandb_run_names(run_config.agent.name, train.env.id, train.seed, ckpt_path,
                                  hydra_setting_label(), _sweep_group())

    def wandb_logger(offline: bool, **init) -> WandbLogger:
        logger = WandbLogger(
            project=cfg.project,
            entity=cfg.entity,
            name=name,
            group=cfg.group or group,
            tags=list(cfg.tags),
            save_dir=str(run_dir),
            offline=offline,
            config=resolved,
            job_type="train",
            reinit="create_new",  # parallel_seeds: one W&B run per seed, open side by side
            **init,
        )
        # Lightning always passes W&B's deprecated `anonymous` setting, which makes every run
        # print a warning; W&B ignores the setting, so leaving it out changes nothing else.
        logger._wandb_init.pop("anonymous", None)
        _start_wandb_run(logger)
        return logger

    # WANDB_MODE=offline or disabled in the environment is the user's; Lightning itself sets
    # "dryrun" for every offline logger of the process, which must not stop a later online one.
    if not cfg.offline and os.environ.get("WANDB_MODE") not in ("offline", "disabled"):
        problem = wandb_online_problem(cfg.online_timeout)
        if problem is None:
            import wandb

            try:  # connects now, while logging offline instead is still possible
                return [wandb_logger(False, mode="online",
                                     settings=wandb.Settings(init_timeout=cfg.online_timeout))]
            except Exception as error:  # W&B raises its own errors and network ones
                text = str(error).strip()
                problem = (text.splitlines()[0] if text else repr(error))[:160]
        print(f"[rs_lightning] W&B online logging is not possible ({problem}); logging offline "
              f"to {run_dir / 'wandb'} instead (`wandb sync` uploads it later)", file=sys.stderr)
    # The mode is passed, not set in the environment: after a failed online attempt W&B keeps
    # its online settings for the process, and the next job of a sweep may log online.
    return [wandb_logger(True, mode="offline")]


def _start_wandb_run(logger) -> None:
    """Start the logger's own W&B run now. Lightning's logger would attach to any run already
    open in the process; with ``parallel_seeds`` each seed has a run of its own."""
    import wandb

    run = wandb.init(**logger._wandb_init)
    run.define_metric("trainer/global_step")
    run.define_metric("*", step_metric="trainer/global_step", step_sync=True)
    logger._experiment = run


def close_loggers(loggers: list, failed: bool) -> None:
    """Finish the loggers; a failed run is marked failed in W&B (exit code 1)."""
    for logger in loggers:
        logger.finalize("failed" if failed else "success")
        if type(logger).__name__ == "WandbLogger" and logger._experiment is not None:
            logger.experiment.finish(exit_code=1 if failed else 0)
