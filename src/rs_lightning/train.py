"""Compose the objects a config describes and run training, evaluation and the outputs.

``run(cfg)`` is what ``python train.py ...`` calls (through :func:`rs_lightning.jobs.run_job`,
which skips finished jobs and resumes interrupted ones). It writes into the run directory:
``eval.json`` (the final Monte Carlo evaluation, written last: it marks a finished run),
``eval_history.jsonl`` (the periodic evaluations), ``policy.json`` (grid worlds: the greedy
action of every cell), ``config.yaml`` (the resolved config), ``attempts.jsonl`` (one line per
start of training), ``checkpoints/`` and the logger's files (``wandb/`` or ``csv/``).

Nothing is written before every input has been checked, and every file a later step relies on
is written atomically (checkpoints included), so a kill at any moment leaves the previous
complete version.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import sys
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.plugins.io import TorchCheckpointIO

from rs_lightning.agents import AGENTS
from rs_lightning.callbacks import CheckpointOnSigterm, PeriodicEvaluation, TrainingProgress
from rs_lightning.data.datamodule import EnvDataModule
from rs_lightning.data.vector_collection import batched_exploration
from rs_lightning.evaluation import evaluate_run
from rs_lightning.files import append_jsonl, atomic_write, truncate_jsonl, write_text_atomic
from rs_lightning.jobs import check_inputs, output_key, run_directory
from rs_lightning.module import RiskSensitiveQLearning
from rs_lightning.schema import ValidatedConfig
from rs_lightning.wandb_support import wandb_online_problem

log = logging.getLogger("rs_lightning")


def _quiet_lightning() -> None:
    # An environment stream is one endless epoch: these notices do not apply to it.
    for pattern in (
        ".*does not have many workers.*",
        ".*IterableDataset.*__len__.*",
        ".*Your `IterableDataset` has `__len__` defined.*",
        ".*The number of training batches.*",
        ".*GPU available but not used.*",
        ".*LightningModule.log.*",
        ".*module\\(s\\) in eval mode.*",  # the target network is frozen on purpose
        ".*no pre-optimization state was saved.*",
        ".*`dataloader_iter` step flavor.*",  # we fetch exactly one batch per step
        ".*Found `dataloader_iter` argument.*",
        ".*isinstance\\(treespec, LeafSpec\\).*",
        ".*Checkpoint directory .* exists and is not empty.*",  # a resumed job's own folder
        ".*The dirpath has changed from.*",  # resuming into a new folder: nothing to reload
    ):
        warnings.filterwarnings("ignore", message=pattern)
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, through a temporary file, fsync and a rename.

    Lightning writes checkpoints in place, so a kill mid-write leaves a truncated
    ``last.ckpt`` where a good one was; here the old file stays until the new one is whole.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        with atomic_write(path, "wb") as f:
            torch.save(checkpoint, f)


def _sweep_group() -> str | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return Path(HydraConfig.get().sweep.dir).name
    return None


def make_loggers(settings: ValidatedConfig, run_dir: Path, resolved: dict[str, Any],
                 group: str | None = None) -> list:
    """The configured loggers. W&B online falls back to offline when it cannot connect.

    ``group``: the W&B group when neither ``logger.group`` nor a multirun names one.
    """
    cfg = settings.train.logger
    if cfg.backend == "none":
        return []
    if cfg.backend == "csv":
        from pytorch_lightning.loggers import CSVLogger

        return [CSVLogger(save_dir=str(run_dir), name="csv", version="")]
    from pytorch_lightning.loggers import WandbLogger

    os.environ.setdefault("WANDB_SILENT", "true")
    train = settings.train
    name = f"{settings.agent.name}-{train.env.id.split('/')[-1]}-seed{train.seed}"

    def wandb_logger(offline: bool, **init) -> WandbLogger:
        logger = WandbLogger(
            project=cfg.project,
            entity=cfg.entity,
            name=name,
            group=cfg.group or _sweep_group() or group,
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


def _log_run_media(loggers, summary, module, settings, run_dir, steps, env_steps) -> None:
    """W&B runs also get the evaluation as a Table and, on a grid world, the distribution
    figure of the decision state (written into the run folder as ``distributions.png``)."""
    wandb_loggers = [logger for logger in loggers if type(logger).__name__ == "WandbLogger"]
    if not wandb_loggers:
        return
    from rs_lightning.report import DECISION_CELLS, START_CELL, log_run_media

    figure = None
    env = settings.train.env
    if env.grid_size:
        from rs_lightning.plots import plot_return_distributions
        from rs_lightning.runs import TrainedRun

        figure = run_dir / "distributions.png"
        trained = TrainedRun(settings, module, run_dir, steps, env_steps)
        plot_return_distributions(trained, DECISION_CELLS.get(env.id, START_CELL), figure)
    for logger in wandb_loggers:
        log_run_media(logger.experiment, summary, figure)


def build(settings: ValidatedConfig) -> tuple[EnvDataModule, RiskSensitiveQLearning]:
    """The datamodule and the LightningModule a validated config describes."""
    train = settings.train
    datamodule = EnvDataModule(
        train.env,
        batch_size=train.learning.batch_size,
        replay_capacity=train.learning.replay_capacity,
        warmup_steps=train.learning.warmup_steps,
        seed=train.seed,
    )
    agent_class, _ = AGENTS[settings.agent.name]
    agent = agent_class(settings.agent, datamodule.problem)
    module = RiskSensitiveQLearning(
        agent,
        settings.utility,
        train.learning,
        seed=train.seed,
        log_every_n_steps=train.trainer.log_every_n_steps,
        fault_injection=train.fault_injection,
    )
    datamodule.attach_policy(module.explore, batch_policy=batched_exploration(module))
    if train.hardware.compile:
        compile_agent(module.agent)
    return datamodule, module


def compile_agent(agent) -> None:
    """``hardware.compile``: torch.compile what runs every step, the agent's loss (its update)
    and its return distribution (acting). Compiling the module itself would only compile
    ``forward``, which agents do not use. Data-dependent steps (e.g. UMDQN-C's distinct
    states) split the graph; the parts around them are compiled."""
    agent.loss = torch.compile(agent.loss)
    agent.return_distribution = torch.compile(agent.return_distribution)


def checkpoint_callbacks(train, checkpoint_dir: Path) -> list[pl.Callback]:
    """Lightning's periodic checkpoints, if ``trainer.checkpoint_every_n_steps`` asks, and a
    checkpoint when the run is stopped by SIGTERM (always)."""
    stop = CheckpointOnSigterm(checkpoint_dir / "last.ckpt")
    if train.trainer.checkpoint_every_n_steps <= 0:
        return [stop]
    from pytorch_lightning.callbacks import ModelCheckpoint

    return [stop, ModelCheckpoint(
        dirpath=checkpoint_dir,
        filename="step{step:07d}",
        auto_insert_metric_name=False,
        every_n_train_steps=train.trainer.checkpoint_every_n_steps,
        save_top_k=-1,
        save_last=True,
    )]  # fmt: skip


def make_trainer(train, run_dir: Path, callbacks: list[pl.Callback], loggers: list) -> pl.Trainer:
    """The Trainer of a run: ``trainer.max_steps`` updates in one endless epoch."""
    return pl.Trainer(
        max_steps=train.trainer.max_steps,
        max_epochs=-1,
        accelerator=train.hardware.accelerator,
        devices=train.hardware.devices,
        precision=train.hardware.precision,
        logger=loggers or False,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=train.trainer.checkpoint_every_n_steps > 0,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        default_root_dir=str(run_dir),
        log_every_n_steps=train.trainer.log_every_n_steps,
        plugins=[AtomicCheckpointIO()],
    )


def run(cfg: DictConfig, run_dir: Path | None = None) -> dict[str, Any]:
    """Train, evaluate and write the run's outputs; returns the evaluation summary.

    ``run_dir`` defaults to Hydra's output directory (the working directory outside Hydra).
    """
    _quiet_lightning()
    run_dir = Path(run_dir) if run_dir is not None else run_directory()
    # Every input is checked before the first write: bad input leaves the folder untouched.
    settings, start_step = check_inputs(cfg, run_dir, output_key())
    train = settings.train
    run_dir.mkdir(parents=True, exist_ok=True)
    # Temporary files of writes a kill interrupted (one job writes into a folder at a time).
    for stale in [*run_dir.glob(".*.tmp"), *run_dir.glob("checkpoints/.*.tmp")]:
        stale.unlink(missing_ok=True)

    torch.set_num_threads(train.hardware.torch_threads)
    pl.seed_everything(train.seed, workers=True, verbose=False)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    write_text_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    # Evaluations an interrupted attempt made after its checkpoint are made again.
    truncate_jsonl(run_dir / "eval_history.jsonl", lambda r: r.get("step", 0) <= start_step)
    append_jsonl(run_dir / "attempts.jsonl", {
        "start_step": start_step, "ckpt_path": train.ckpt_path, "pid": os.getpid(),
        "host": socket.gethostname(), "time": datetime.datetime.now().isoformat(timespec="seconds"),
    })

    if train.parallel_seeds > 1:
        from rs_lightning.stacked import run_stacked

        return run_stacked(cfg, settings, run_dir, start_step)

    datamodule, module = build(settings)

    checkpoint_dir = run_dir / "checkpoints"
    callbacks = checkpoint_callbacks(train, checkpoint_dir)
    callbacks.append(
        PeriodicEvaluation(
            train.env,
            train.rho,
            train.evaluation.every_n_steps,
            train.evaluation.episodes_during_training,
            seed=train.seed,
            batch_envs=train.evaluation.batch_envs,
            history_path=run_dir / "eval_history.jsonl",
        )
    )
    if train.callbacks.progress_bar:
        callbacks.append(TrainingProgress(train.callbacks.progress_refresh_seconds))

    loggers = make_loggers(settings, run_dir, resolved)
    trainer = make_trainer(train, run_dir, callbacks, loggers)
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=train.ckpt_path)
        trainer.save_checkpoint(checkpoint_dir / "last.ckpt")

        summary = evaluate_run(
            module, settings, run_dir, steps=trainer.global_step,
            env_steps=datamodule.collector.env_steps,
        )
        final = {f"eval/final_{k}": v for k, v in summary.items() if isinstance(v, (int, float))}
        final["train/skipped_updates"] = float(module.skipped_updates)
        _log_run_media(loggers, summary, module, settings, run_dir, trainer.global_step,
                       datamodule.collector.env_steps)
        for logger in loggers:
            logger.log_metrics(final, step=trainer.global_step)
    except BaseException:
        close_loggers(loggers, failed=True)
        raise
    close_loggers(loggers, failed=False)
    if module.skipped_updates:
        print(f"[rs_lightning] {module.skipped_updates} updates with a non-finite loss or "
              "gradient were skipped (learning.on_non_finite=skip)", file=sys.stderr)
    log.info("eval: %s", {k: summary[k] for k in ("expectation", "var", "cvar", "utility")})
    print(
        f"[rs_lightning] {settings.agent.name} on {train.env.id}: "
        f"E={summary['expectation']:.3f} VaR={summary['var']:.3f} "
        f"CVaR={summary['cvar']:.3f} U={summary['utility']:.3f}"
        + (f" R_s={summary['risk_outcome']:.3f}" if "risk_outcome" in summary else "")
        + f"  -> {run_dir}",
        file=sys.stderr,
    )
    return summary
