"""Run folders: where a job writes, whether its inputs and folder allow it to, and what a
folder holds (a finished run, checkpoints to resume from, a failure, a sweep's jobs).

Nothing here imports Lightning or W&B, so bad input is reported within seconds.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from rs_lightning.agents import AGENTS
from rs_lightning.agents.members import make_members
from rs_lightning.engine.checkpoints import (
    check_compatible,
    checkpoint_step,
    newest_checkpoint,
    read_checkpoint,
)
from rs_lightning.engine.resources import check_resources
from rs_lightning.envs.factory import env_problem
from rs_lightning.errors import ConfigError
from rs_lightning.schema import ValidatedConfig, validate
from rs_lightning.types import Problem
from rs_lightning.wandb_support import check_wandb_environment

FAILED = "failed.json"
# Keys that do not change what a run computes: a folder's run may be continued with others.
UNCOMPARED_KEYS = ("ckpt_path", "logger", "callbacks", "limits", "search_objective")


# ----------------------------------------------------------------------------- where
def run_directory() -> Path:
    """Hydra's output directory for this job, or the working directory outside Hydra."""

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path.cwd()


def in_multirun() -> bool:

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def output_key() -> str:
    """The config key that chose this job's folder, for error messages."""

    if not HydraConfig.initialized():
        return "run_dir"
    return "hydra.sweep.dir" if in_multirun() else "hydra.run.dir"


# ----------------------------------------------------------------------------- checks
def check_output_folder(path: Path | str, key: str) -> None:
    """ConfigError unless ``path`` exists as a writable folder or can be created as one.

    Nothing is created: the nearest existing folder on the way is probed with a temporary
    file that disappears when closed.
    """
    path = Path(path).absolute()
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(
            key, f"cannot create the output folder {path}: {existing} is a file, not a folder"
        )
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise ConfigError(
            key, f"cannot write into {existing} ({error.strerror or error}); "
            "choose a writable output folder"
        ) from None


def check_inputs(cfg: DictConfig, run_dir: Path | None = None,
                 run_dir_key: str = "run_dir") -> tuple[ValidatedConfig, int]:
    """Check everything a run needs before it writes anything; returns the settings (the one
    validation of the job) and the number of updates of the checkpoint it resumes from (0
    for a fresh start).

    Raises ConfigError for: a value out of range (schema), an environment gymnasium does not
    know, a run past its budgets of lattice or memory (engine.resources), a missing,
    unreadable or incompatible checkpoint, an output folder that cannot be written.
    """
    settings = validate(cfg)
    # The environment can be made, with spaces we support (and its problem fits a checkpoint).
    problem = env_problem(settings.train.env)
    check_resources(settings, problem)  # before anything of that size is allocated
    if settings.train.logger.backend == "wandb":
        check_wandb_environment()
    start_step = checkpoint_start(settings, problem) if settings.train.ckpt_path is not None else 0
    if run_dir is not None:
        check_output_folder(run_dir, run_dir_key)
    return settings, start_step


def checkpoint_start(settings: ValidatedConfig, problem: Problem | None = None) -> int:
    """The update ``train.ckpt_path`` resumes from, after checking that it fits the run
    (ConfigError otherwise)."""
    train = settings.train
    state = read_checkpoint(train.ckpt_path)
    problem = problem or env_problem(train.env)
    problem = settings.agent_problem(problem)
    members = make_members([AGENTS[settings.agent.name][0](settings.agent, problem)
                            for _ in range(train.parallel_seeds)])
    check_compatible(state, train.ckpt_path, settings.agent.name, members, train.env.id,
                     num_envs=train.env.num_envs, parallel_seeds=train.parallel_seeds,
                     n_step=train.learning.n_step,
                     updates_per_step=train.learning.updates_per_step)
    return checkpoint_step(state)


def resuming_from(cfg: DictConfig, settings: ValidatedConfig, path: Path
                  ) -> tuple[DictConfig, ValidatedConfig, int]:
    """The config and settings of a run resumed from the checkpoint ``path`` (checked), and
    its step."""
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.ckpt_path = str(path)
    settings = dataclasses.replace(settings, train=dataclasses.replace(settings.train,
                                                                      ckpt_path=str(path)))
    return cfg, settings, checkpoint_start(settings)


def finished_summary(run_dir: Path) -> dict[str, Any] | None:
    """The content of ``eval.json`` if the run in ``run_dir`` finished, else None.

    ``eval.json`` is written last and atomically, so a complete one marks a finished run;
    ``failed.json`` beside it (a failure after the evaluation) makes the job run again.
    """
    for name, key in (("eval.json", "expectation"), ("members.json", "members")):
        path = Path(run_dir) / name  # members.json: a run of several seeds (rs_lightning.train)
        if not path.is_file() or (Path(run_dir) / FAILED).exists():
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and key in data else None
    return None


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: node}


def config_differences(run_dir: Path, cfg: DictConfig) -> list[str]:
    """The keys whose value differs between ``run_dir/config.yaml`` and ``cfg``.

    Only keys both have are compared: a key added to the config since the folder's run was
    made (its default keeps the old behaviour) does not make it another config.
    """
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return []
    try:
        recorded = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except (OSError, ValueError, yaml.YAMLError, OmegaConfBaseException) as error:
        # the YAML, decoding (a ValueError) or interpolation errors of a damaged file
        recorded = f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
    if not isinstance(recorded, dict):
        raise ConfigError(
            str(path), f"is damaged ({str(recorded)[:120]}): the run in that folder cannot "
            "be compared with this config, so nothing is written there; restore the file, "
            "delete the folder to start over, or choose another folder")
    before = _flatten(recorded)
    now = _flatten(OmegaConf.to_container(cfg, resolve=True))
    return [
        f"{key}: {before[key]} there, {now[key]} now"
        for key in sorted(before.keys() & now.keys())
        if key.split(".")[0] not in UNCOMPARED_KEYS and before[key] != now[key]
    ]


def folder_state(cfg: DictConfig, run_dir: Path, key: str = "run_dir"
                 ) -> tuple[dict[str, Any] | None, tuple[Path, int] | None]:
    """(eval.json of a finished run, newest readable checkpoint) found in ``run_dir``.

    ConfigError if the folder holds results or checkpoints of another config: they are
    never written over.
    """
    finished = finished_summary(run_dir)
    newest = None if finished else newest_checkpoint(run_dir)
    if finished or newest:
        differences = config_differences(run_dir, cfg)
        if differences:
            raise ConfigError(
                key, f"{run_dir} holds a run of another config ({'; '.join(differences[:3])}); "
                "choose another folder, or delete that one to start over"
            )
    return finished, newest


def read_failure(run_dir: Path) -> dict[str, Any] | None:
    """The content of a job's ``failed.json`` (None if the job did not fail)."""
    path = Path(run_dir) / FAILED
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {"error": "unknown", "message": f"{path} is unreadable"}


def sweep_jobs(sweep_dir: Path) -> dict[str, list]:
    """The job folders of a sweep by state: ``finished`` (names), ``failed`` ((name, the
    failed.json record)) and ``incomplete`` (names: neither, e.g. killed)."""
    state: dict[str, list] = {"finished": [], "failed": [], "incomplete": []}
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        return state

    def number(path: Path):
        head = path.name.split("_", 1)[0]
        return (int(head) if head.isdigit() else float("inf"), path.name)

    for job in sorted((p for p in sweep_dir.iterdir() if p.is_dir()), key=number):
        if not any((job / name).exists() for name in (".hydra", "config.yaml", FAILED)):
            continue  # not a job folder
        failure = read_failure(job)
        if failure is not None:
            state["failed"].append((job.name, failure))
        elif finished_summary(job) is not None:
            state["finished"].append(job.name)
        else:
            state["incomplete"].append(job.name)
    return state
