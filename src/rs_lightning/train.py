"""Compose the objects a config describes and run training, evaluation and the outputs.

``run(cfg)`` is what ``python train.py ...`` calls. It writes into the run directory:
``eval.json`` (the final Monte Carlo evaluation), ``eval_history.jsonl`` (the periodic
evaluations), ``policy.json`` (grid worlds: the greedy action of every cell), ``config.yaml``
(the resolved config), ``checkpoints/`` and the logger's files (``wandb/`` or ``csv/``).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf

from rs_lightning.agents import AGENTS
from rs_lightning.callbacks import PeriodicEvaluation, TrainingProgress
from rs_lightning.data.datamodule import EnvDataModule
from rs_lightning.errors import ConfigError
from rs_lightning.evaluation import evaluate_run
from rs_lightning.module import RiskSensitiveQLearning
from rs_lightning.schema import ValidatedConfig, validate

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
    ):
        warnings.filterwarnings("ignore", message=pattern)
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)


def run_directory() -> Path:
    """Hydra's output directory for this job, or the working directory outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path.cwd()


def _sweep_group() -> str | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return Path(HydraConfig.get().sweep.dir).name
    return None


def make_loggers(settings: ValidatedConfig, run_dir: Path, resolved: dict[str, Any]) -> list:
    cfg = settings.train.logger
    if cfg.backend == "none":
        return []
    if cfg.backend == "csv":
        from pytorch_lightning.loggers import CSVLogger

        return [CSVLogger(save_dir=str(run_dir), name="csv", version="")]
    from pytorch_lightning.loggers import WandbLogger

    if cfg.offline:
        os.environ["WANDB_MODE"] = "offline"
    os.environ.setdefault("WANDB_SILENT", "true")
    train = settings.train
    name = f"{settings.agent.name}-{train.env.id.split('/')[-1]}-seed{train.seed}"
    logger = WandbLogger(
        project=cfg.project,
        entity=cfg.entity,
        name=name,
        group=cfg.group or _sweep_group(),
        tags=list(cfg.tags),
        save_dir=str(run_dir),
        offline=cfg.offline,
        config=resolved,
        job_type="train",
    )
    # Lightning always passes W&B's deprecated `anonymous` setting, which makes every run
    # print a warning; W&B ignores the setting, so leaving it out changes nothing else.
    logger._wandb_init.pop("anonymous", None)
    return [logger]


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
    )
    datamodule.attach_policy(module.explore)
    return datamodule, module


def run(cfg: DictConfig, run_dir: Path | None = None) -> dict[str, Any]:
    """Train, evaluate and write the run's outputs; returns the evaluation summary.

    ``run_dir`` defaults to Hydra's output directory (the working directory outside Hydra).
    """
    _quiet_lightning()
    settings = validate(cfg)
    train = settings.train
    run_dir = Path(run_dir) if run_dir is not None else run_directory()
    run_dir.mkdir(parents=True, exist_ok=True)
    if train.ckpt_path is not None and not Path(train.ckpt_path).is_file():
        raise ConfigError("ckpt_path", f"no checkpoint file at {train.ckpt_path}")

    torch.set_num_threads(train.hardware.torch_threads)
    pl.seed_everything(train.seed, workers=True, verbose=False)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)

    datamodule, module = build(settings)
    if train.hardware.compile:
        module.agent = torch.compile(module.agent)

    callbacks: list[pl.Callback] = []
    checkpoint_dir = run_dir / "checkpoints"
    if train.trainer.checkpoint_every_n_steps > 0:
        from pytorch_lightning.callbacks import ModelCheckpoint

        callbacks.append(
            ModelCheckpoint(
                dirpath=checkpoint_dir,
                filename="step{step:07d}",
                auto_insert_metric_name=False,
                every_n_train_steps=train.trainer.checkpoint_every_n_steps,
                save_top_k=-1,
                save_last=True,
            )
        )
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
    trainer = pl.Trainer(
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
    )
    trainer.fit(module, datamodule=datamodule, ckpt_path=train.ckpt_path)
    trainer.save_checkpoint(checkpoint_dir / "last.ckpt")

    summary = evaluate_run(
        module, settings, run_dir, steps=trainer.global_step,
        env_steps=datamodule.collector.env_steps,
    )
    final = {f"eval/final_{k}": v for k, v in summary.items() if isinstance(v, (int, float))}
    for logger in loggers:
        logger.log_metrics(final, step=trainer.global_step)
        logger.finalize("success")
    if any(type(logger).__name__ == "WandbLogger" for logger in loggers):
        import wandb

        wandb.finish()
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
