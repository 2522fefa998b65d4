"""Compose the objects a config describes and run training, evaluation and the outputs.

``run(cfg)`` is what ``python train.py ...`` calls (through :func:`rs_lightning.app.jobs.run_job`,
which skips finished jobs and resumes interrupted ones). It writes into the run directory:
``eval.json`` (the final Monte Carlo evaluation, written last: it marks a finished run),
``eval_history.jsonl`` (the periodic evaluations), ``policy.json`` and ``policy.png`` (grid
worlds: the greedy action of every cell, and as arrows), ``config.yaml`` (the resolved config), ``attempts.jsonl`` (one line per
start of training), ``checkpoints/`` and the logger's files (``wandb/`` or ``csv/``).

Nothing is written before every input has been checked, and every file a later step relies on
is written atomically (checkpoints included), so a kill at any moment leaves the previous
complete version.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import datetime
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from pytorch_lightning.utilities.exceptions import SIGTERMException

from rs_lightning.analysis.periodic_evaluation import PeriodicEvaluation
from rs_lightning.analysis.run_outputs import write_member_outputs
from rs_lightning.app.loggers import close_loggers, make_loggers
from rs_lightning.app.run_folders import (
    RunFolderLock,
    check_inputs,
    folder_state,
    output_key,
    run_directory,
)
from rs_lightning.config.migrations import run_config_yaml
from rs_lightning.config.schema import ValidatedConfig
from rs_lightning.engine.build import (
    build,
    checkpoint_callbacks,
    make_trainer,
    member_checkpoint,
    quiet_lightning,
)
from rs_lightning.engine.callbacks import RewardOutsideSupport, TrainingProgress
from rs_lightning.engine.checkpoints import save_checkpoint_file
from rs_lightning.engine.experience import member_seeds
from rs_lightning.files import (
    append_jsonl,
    read_jsonl,
    truncate_jsonl,
    write_json_atomic,
    write_text_atomic,
)


def lost_updates_line(run_dir: Path, train, start_step: int) -> str | None:
    """What an earlier attempt in ``run_dir`` trained that no checkpoint kept (None if
    nothing or no earlier attempt): its last recorded step, from its evaluations
    (``eval_history.jsonl``) and CSV metrics, against the step this attempt starts from."""
    if not (run_dir / "attempts.jsonl").is_file():
        return None
    reached = [record.get("step", 0) for path in run_dir.glob("**/eval_history.jsonl")
               for record in read_jsonl(path, warn=False)]
    for path in run_dir.glob("**/csv/metrics.csv"):
        try:
            with open(path, newline="") as file:
                reached += [float(row["step"]) for row in csv.DictReader(file) if row.get("step")]
        except (OSError, ValueError, csv.Error):  # a row cut by the kill
            pass
    last = int(max([0, *[s for s in reached if isinstance(s, (int, float))]]))
    if start_step == 0:
        trainer = train.trainer
        periods = [f"{key}={value:g}" for key, value in (
            ("trainer.checkpoint_every_n_steps", trainer.checkpoint_every_n_steps),
            ("trainer.checkpoint_every_minutes", trainer.checkpoint_every_minutes)) if value]
        trained = (f"its {last} updates (its last record) are lost" if last
                   else "the updates it made are lost (it recorded none)")
        return (f"[rs_lightning] an earlier attempt in {run_dir} stopped before its first "
                f"checkpoint: training starts over from step 0 and {trained}; checkpoints: "
                + (", ".join(periods) or "only at the end"))
    if last > start_step:
        return (f"[rs_lightning] {last - start_step} updates of the earlier attempt (to step "
                f"{last}, its last record) came after its last checkpoint (step {start_step}) "
                "and are trained again")
    return None


def member_folder(run_dir: Path, seed: int) -> Path:
    """Where the outputs of the member of seed ``seed`` of a several-seed run go."""
    return Path(run_dir) / f"seed_{seed}"


def member_configs(cfg: DictConfig, seeds: list[int]) -> list[DictConfig]:
    """The config of the single-seed run each member is: its seed, one seed per process."""
    if len(seeds) == 1:
        return [cfg]
    configs = []
    for seed in seeds:
        member_cfg = copy.deepcopy(cfg)
        with open_dict(member_cfg):
            member_cfg.seed = seed
            member_cfg.parallel_seeds = 1
            member_cfg.ckpt_path = None
        configs.append(member_cfg)
    return configs


def member_run_config(run_config: ValidatedConfig, seed: int) -> ValidatedConfig:
    """The validated config of the single-seed run of ``seed`` (as :func:`member_configs`)."""
    train = dataclasses.replace(run_config.train, seed=seed, parallel_seeds=1, ckpt_path=None)
    return dataclasses.replace(run_config, train=train)


def _report_early_end(train, periodic: PeriodicEvaluation, steps: int, seconds: float) -> None:
    """Say why a run ended before ``trainer.max_steps`` updates."""
    if periodic.stopped_at is not None:
        print(f"[rs_lightning] trainer.stop_at_return={train.trainer.stop_at_return} reached by "
              f"the evaluation after update {steps} ({seconds:.1f} s of training)", file=sys.stderr)
    elif steps < train.trainer.max_steps and train.trainer.max_time is not None:
        print(f"[rs_lightning] trainer.max_time={train.trainer.max_time} spent after update "
              f"{steps} of {train.trainer.max_steps}", file=sys.stderr)

class StopOnSignal:
    """The SIGTERM and SIGINT (Ctrl-C) handler of a run: outside Lightning's training loop
    (building the run, the final evaluation, writing the outputs) it stops the run at once
    with SIGTERMException, which the job reports in one line; inside it, Lightning stops at
    the end of the update (CheckpointOnSigterm), for SIGINT too: the handler passes it on as
    SIGTERM, which Lightning watches. ``received`` is the first signal."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.fitting = False
        self.received: int | None = None

    def __call__(self, signum, frame) -> None:
        if self.received is None:
            self.received = signum
        if not self.fitting:
            raise SIGTERMException()
        if signum == signal.SIGINT:
            os.kill(os.getpid(), signal.SIGTERM)  # Lightning's handler, then this one

    def install(self) -> dict:
        """Install it (main thread only, where Python runs signal handlers); returns the
        handlers to restore."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {signum: signal.signal(signum, self) for signum in self.SIGNALS}


def run(cfg: DictConfig, run_dir: Path | None = None,
        checked: tuple[ValidatedConfig, int] | None = None) -> dict[str, Any]:
    """Train, evaluate and write the run's outputs (see :func:`run_phases`), stopping with
    SIGTERMException on SIGTERM or SIGINT in any phase (its ``signal_name`` says which)."""
    on_signal = StopOnSignal()
    previous = on_signal.install()
    try:
        return run_phases(cfg, run_dir, checked, on_signal)
    except SIGTERMException as stop:
        stop.signal_name = signal.Signals(on_signal.received or signal.SIGTERM).name
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_phases(cfg: DictConfig, run_dir: Path | None = None,
               checked: tuple[ValidatedConfig, int] | None = None,
               on_signal: StopOnSignal | None = None) -> dict[str, Any]:
    """Train, evaluate and write the run's outputs; returns the evaluation summary (with
    several seeds: ``{"seeds": [...], "members": {seed: summary}}``).

    ``run_dir`` defaults to Hydra's output directory (the working directory outside Hydra).
    ``checked``: what :func:`rs_lightning.app.run_folders.check_inputs` returned for ``cfg``
    (the job checked it already), else it is checked here, with the folder (never one of
    another config's run). The run holds the folder's lock
    (:class:`~rs_lightning.app.run_folders.RunFolderLock`) while it writes. A run of one seed
    writes its outputs into ``run_dir``; a run of K seeds
    (``parallel_seeds=K``) writes each seed's into ``run_dir/seed_<s>/`` (the outputs of the
    single-seed run of that seed, its config and a checkpoint it resumes from) and, last,
    ``run_dir/members.json``.
    """
    quiet_lightning()
    run_dir = Path(run_dir) if run_dir is not None else run_directory()
    # Every input is checked before the first write: bad input leaves the folder untouched.
    if checked is None:
        checked = check_inputs(cfg, run_dir, output_key())
        folder_state(cfg, run_dir, output_key())  # refuses a folder of another config's run
    # One process writes into a run folder at a time (released however this one ends).
    with RunFolderLock(run_dir, output_key()):
        return _run_locked(cfg, run_dir, *checked, on_signal)


@dataclasses.dataclass
class RunFolder:
    """Where a run writes: the run folder and each member's (the run folder itself for one
    seed, ``seed_<s>/`` for each of several), with each member's config as the single-seed
    run it is."""

    run_dir: Path
    seeds: list[int]
    folders: list[Path]
    configs: list[DictConfig]  # each member's composed config (its config.yaml)
    run_configs: list[ValidatedConfig]  # each member's validated config

    @property
    def single(self) -> bool:
        return len(self.seeds) == 1


def _run_locked(cfg: DictConfig, run_dir: Path, run_config: ValidatedConfig, start_step: int,
                on_signal: StopOnSignal | None) -> dict[str, Any]:
    """The run's steps, in order: its folder, the objects it trains, the fit, the outputs."""
    folder = prepare_folder(cfg, run_dir, run_config, start_step)
    loggers: list[list] = []
    try:
        loggers = open_loggers(folder, run_config.train, start_step)
        datamodule, module = build(run_config, loggers)
        trainer, periodic = make_run_trainer(run_config.train, folder)
        fit(trainer, module, datamodule, run_config.train, folder, on_signal)
        _report_early_end(run_config.train, periodic, trainer.global_step, module.clock.seconds())
        summaries = write_outputs(folder, trainer, module, datamodule, loggers)
    except BaseException:
        for member_loggers in loggers:
            close_loggers(member_loggers, failed=True)
        raise
    for member_loggers in loggers:
        close_loggers(member_loggers, failed=False)
    return finish(folder, run_config, module, summaries)


def prepare_folder(cfg: DictConfig, run_dir: Path, run_config: ValidatedConfig,
                   start_step: int) -> RunFolder:
    """The run folder made ready: stale temporary files removed, the global generators
    seeded, ``config.yaml`` and a line of ``attempts.jsonl`` written, each member's folder
    and config, and the evaluations an interrupted attempt made after its checkpoint
    dropped (they are made again)."""
    train = run_config.train
    run_dir.mkdir(parents=True, exist_ok=True)
    # Temporary files of writes a kill interrupted (one job writes into a folder at a time).
    for stale in [*run_dir.glob(".*.tmp"), *run_dir.glob("checkpoints/.*.tmp")]:
        stale.unlink(missing_ok=True)

    torch.set_num_threads(train.hardware.torch_threads)
    pl.seed_everything(train.seed, workers=True, verbose=False)
    write_text_atomic(run_dir / "config.yaml", run_config_yaml(cfg))
    # A record cut by a kill is dropped, as from eval_history.jsonl below.
    truncate_jsonl(run_dir / "attempts.jsonl", lambda record: True)
    lost = lost_updates_line(run_dir, train, start_step)
    if lost:
        print(lost, file=sys.stderr)
    append_jsonl(run_dir / "attempts.jsonl", {
        "start_step": start_step, "ckpt_path": train.ckpt_path, "pid": os.getpid(),
        "host": socket.gethostname(), "time": datetime.datetime.now().isoformat(timespec="seconds"),
    })
    seeds = member_seeds(train.seed, train.parallel_seeds)
    single = len(seeds) == 1
    folders = [run_dir] if single else [member_folder(run_dir, seed) for seed in seeds]
    configs = member_configs(cfg, seeds)
    for folder, member_cfg in zip(folders, configs):
        folder.mkdir(parents=True, exist_ok=True)
        if not single:
            write_text_atomic(folder / "config.yaml", run_config_yaml(member_cfg))
        # Evaluations an interrupted attempt made after its checkpoint are made again.
        truncate_jsonl(folder / "eval_history.jsonl", lambda r: r.get("step", 0) <= start_step)
    run_configs = ([run_config] if single
                   else [member_run_config(run_config, seed) for seed in seeds])
    return RunFolder(run_dir, seeds, folders, configs, run_configs)


def open_loggers(folder: RunFolder, train, start_step: int) -> list[list]:
    """Each member's loggers, in its own folder (those opened are closed if one fails)."""
    opened: list[list] = []
    try:
        for member, path, member_cfg in zip(folder.run_configs, folder.folders, folder.configs):
            opened.append(make_loggers(member, path, OmegaConf.to_container(member_cfg, resolve=True),
                                       ckpt_path=train.ckpt_path, resume_step=start_step))
    except BaseException:
        for member_loggers in opened:
            close_loggers(member_loggers, failed=True)
        raise
    return opened


def make_run_trainer(train, folder: RunFolder) -> tuple[pl.Trainer, PeriodicEvaluation]:
    """The Trainer with the run's callbacks: checkpoints, the periodic evaluations (returned
    too: the run reports why it stopped early), the reward-support check and progress."""
    callbacks = checkpoint_callbacks(train, folder.run_dir / "checkpoints")
    periodic = PeriodicEvaluation(
        train.env, train.rho, train.evaluation.every_n_steps,
        train.evaluation.episodes_during_training, folder.seeds, train.evaluation.batch_envs,
        [path / "eval_history.jsonl" for path in folder.folders], train.trainer.stop_at_return,
    )
    callbacks.append(periodic)
    callbacks.append(RewardOutsideSupport(train.env.return_min, train.env.return_max))
    if train.callbacks.progress_bar:
        callbacks.append(TrainingProgress(train.callbacks.progress_refresh_seconds))
    return make_trainer(train, folder.run_dir, callbacks), periodic


def fit(trainer: pl.Trainer, module, datamodule, train, folder: RunFolder,
        on_signal: StopOnSignal | None) -> None:
    """Train from the checkpoint ``ckpt_path`` names (or from scratch), then save
    ``checkpoints/last.ckpt``; a SIGTERM (or SIGINT) stops it at the end of an update, saved."""
    if on_signal is not None:
        on_signal.fitting = True
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=train.ckpt_path, weights_only=True)
    finally:
        if on_signal is not None:
            on_signal.fitting = False
    trainer.save_checkpoint(folder.run_dir / "checkpoints" / "last.ckpt")
    if trainer.received_sigterm:  # came after the last update's check: stop here
        raise SIGTERMException()


def write_outputs(folder: RunFolder, trainer: pl.Trainer, module, datamodule,
                  loggers: list[list]) -> list[dict[str, Any]]:
    """Each member's outputs (the final evaluation, ``eval.json`` last) into its folder,
    with, for several seeds, the checkpoint of the single-seed run it is; their summaries."""
    steps, env_steps = trainer.global_step, datamodule.env_steps
    last = folder.run_dir / "checkpoints" / "last.ckpt"
    saved = None if folder.single else torch.load(last, map_location="cpu", weights_only=True)
    summaries = []
    for k, (member, path) in enumerate(zip(folder.run_configs, folder.folders)):
        if saved is not None:
            (path / "checkpoints").mkdir(exist_ok=True)
            save_checkpoint_file(member_checkpoint(saved, module, datamodule, k),
                                 path / "checkpoints" / "last.ckpt")
        summaries.append(write_member_outputs(module.member(k), member, path, loggers[k],
                                              steps, env_steps, module.skipped_updates))
    return summaries


def finish(folder: RunFolder, run_config: ValidatedConfig, module,
           summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Say what was skipped and what each seed's final evaluation found; for several
    seeds write ``members.json`` (last: it marks the run finished). Returns the summary."""
    train = run_config.train
    if module.skipped_updates:
        print(f"[rs_lightning] {module.skipped_updates} updates with a non-finite loss or "
              "gradient were skipped (learning.on_non_finite=skip)", file=sys.stderr)
    # The final evaluation, once per seed (eval.json keeps every figure and digit).
    for seed, summary, path in zip(folder.seeds, summaries, folder.folders):
        print(
            f"[rs_lightning] final evaluation of {run_config.agent.name} on {train.env.id}"
            + ("" if folder.single else f" seed {seed}") + f", {summary['episodes']} episodes: "
            f"E={summary['expectation']:.3f} VaR={summary['var']:.3f} "
            f"CVaR={summary['cvar']:.3f}"
            + ("" if run_config.utility.risk in ("var", "cvar") or "risk_value" not in summary
               else f" R[{run_config.utility.risk}]={summary['risk_value']:.3f}")
            + f" U={summary['utility']:.3f}"
            + (f" R_s={summary['risk_outcome']:.3f}" if "risk_outcome" in summary else "")
            + f"  -> {path}",
            file=sys.stderr,
        )
    if folder.single:
        return summaries[0]
    result = {"seeds": folder.seeds,
              "members": {str(seed): s for seed, s in zip(folder.seeds, summaries)}}
    # Last: a complete members.json marks a several-seed run finished (rs_lightning.app.jobs).
    write_json_atomic(folder.run_dir / "members.json", result)
    return result
