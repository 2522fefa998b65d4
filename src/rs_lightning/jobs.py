"""One job as ``python train.py`` runs it: check the inputs, skip, resume or run, report.

Running a command again must never redo or lose finished work, so a job first looks at its
folder:

- ``eval.json`` complete (and no ``failed.json``): the job finished; it is skipped and its
  summary returned ("skipping finished job").
- checkpoints there: the job was interrupted; it resumes from the newest readable one.
- otherwise it starts from scratch (or from ``ckpt_path=``).

A folder holding results of a *different* config is never written into. In a multirun a
failing job writes ``failed.json`` (error and traceback) into its folder and the sweep goes on;
a single run prints one line and exits non-zero (2: bad input, 3: a numerical fault).

This module imports neither Lightning nor W&B, so bad input is reported within seconds.
"""

from __future__ import annotations

import datetime
import json
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from rs_lightning.agents import AGENTS, Problem
from rs_lightning.checkpoints import (
    check_compatible,
    checkpoint_step,
    newest_checkpoint,
    read_checkpoint,
)
from rs_lightning.envs.factory import make_env, observation_size
from rs_lightning.errors import (
    EXIT_BAD_INPUT, EXIT_NUMERICAL_FAULT, EXIT_TERMINATED, ConfigError, NumericalFault,
)
from rs_lightning.files import write_json_atomic
from rs_lightning.schema import ValidatedConfig, validate

FAILED = "failed.json"
# Keys that do not change what a run computes: a folder's run may be continued with others.
UNCOMPARED_KEYS = ("ckpt_path", "logger", "callbacks")


# ----------------------------------------------------------------------------- where
def run_directory() -> Path:
    """Hydra's output directory for this job, or the working directory outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path.cwd()


def in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def output_key() -> str:
    """The config key that chose this job's folder, for error messages."""
    from hydra.core.hydra_config import HydraConfig

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


def problem_of(env, env_config) -> Problem:
    return Problem(
        obs_dim=observation_size(env),
        n_actions=int(env.action_space.n),
        gamma=env_config.gamma,
        return_min=env_config.return_min,
        return_max=env_config.return_max,
    )


def check_inputs(cfg: DictConfig, run_dir: Path | None = None,
                 run_dir_key: str = "run_dir") -> tuple[ValidatedConfig, int]:
    """Check everything a run needs before it writes anything; returns the settings and the
    number of updates of the checkpoint it resumes from (0 for a fresh start).

    Raises ConfigError for: a value out of range (schema), an environment gymnasium does not
    know, a missing, unreadable or incompatible checkpoint, an output folder that cannot be
    written.
    """
    settings = validate(cfg)
    train = settings.train
    env = make_env(train.env)
    try:
        problem = problem_of(env, train.env)
    finally:
        env.close()
    start_step = 0
    if train.ckpt_path is not None:
        state = read_checkpoint(train.ckpt_path)
        agent_class, _ = AGENTS[settings.agent.name]
        agent = agent_class(settings.agent, problem)
        check_compatible(state, train.ckpt_path, settings.agent.name, agent, train.env.id,
                         num_envs=train.env.num_envs, parallel_seeds=train.parallel_seeds)
        start_step = checkpoint_step(state)
    if run_dir is not None:
        check_output_folder(run_dir, run_dir_key)
    return settings, start_step


# ----------------------------------------------------------------------------- folder state
def finished_summary(run_dir: Path) -> dict[str, Any] | None:
    """The content of ``eval.json`` if the run in ``run_dir`` finished, else None.

    ``eval.json`` is written last and atomically, so a complete one marks a finished run;
    ``failed.json`` beside it (a failure after the evaluation) makes the job run again.
    """
    for name, key in (("eval.json", "expectation"), ("members.json", "members")):
        path = Path(run_dir) / name  # members.json: a parallel_seeds run (rs_lightning.stacked)
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
    before = _flatten(OmegaConf.to_container(OmegaConf.load(path), resolve=True))
    now = _flatten(OmegaConf.to_container(cfg, resolve=True))
    return [
        f"{key}: {before[key]} there, {now[key]} now"
        for key in sorted(before.keys() & now.keys())
        if key.split(".")[0] not in UNCOMPARED_KEYS and before[key] != now[key]
    ]


def _with_checkpoint(cfg: DictConfig, path: Path) -> DictConfig:
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.ckpt_path = str(path)
    return cfg


# ----------------------------------------------------------------------------- the job
def run_job(cfg: DictConfig) -> dict[str, Any] | None:
    """What ``python train.py`` runs for each job; returns the evaluation summary.

    Single run: bad input exits 2 and a numerical fault 3, each with one line on stderr. In a
    multirun every failure is written to the job's ``failed.json`` and the sweep goes on (the
    sweep's summary lists the failures and its exit status is non-zero).
    """
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    run_dir = run_directory()
    try:
        return skip_resume_or_run(cfg, run_dir, output_key())
    except SIGTERMException:
        # Stopped from outside: not a failure of the job, and a sweep stops here too.
        saved = newest_checkpoint(run_dir)
        where = f"{saved[0]} (update {saved[1]})" if saved else "no checkpoint"
        print(f"Stopped by SIGTERM: the run's state is in {where}; the same command resumes it",
              file=sys.stderr)
        raise SystemExit(EXIT_TERMINATED) from None
    except Exception as error:
        if in_multirun():
            record_failure(run_dir, error)
            return None
        if isinstance(error, ConfigError):
            print(f"Error in config: {error}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_INPUT) from None
        if isinstance(error, NumericalFault):
            print(f"Error in training: {describe_fault(error, run_dir)}", file=sys.stderr)
            raise SystemExit(EXIT_NUMERICAL_FAULT) from None
        # Anything else is a bug: its whole traceback, and no exception left for Hydra (the
        # command line wrapper treats what reaches it as bad input).
        traceback.print_exc()
        raise SystemExit(1) from None


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


def skip_resume_or_run(cfg: DictConfig, run_dir: Path, key: str = "run_dir") -> dict[str, Any]:
    """Skip a finished job, resume an interrupted one, or run it (see the module docstring)."""
    check_inputs(cfg, run_dir, key)  # bad input first, whatever the folder holds
    finished, newest = folder_state(cfg, run_dir, key)
    if finished:
        print(f"[rs_lightning] skipping finished job {run_dir} (its eval.json is complete; "
              "delete it to run the job again)", file=sys.stderr)
        return finished
    if newest:
        path, step = newest
        print(f"[rs_lightning] resuming {run_dir} from {path.name} (step {step})",
              file=sys.stderr)
        cfg = _with_checkpoint(cfg, path)
    (Path(run_dir) / FAILED).unlink(missing_ok=True)
    from rs_lightning.train import run  # Lightning is imported only for a job that trains

    return run(cfg, run_dir)


# ----------------------------------------------------------------------------- failures
def describe_fault(error: NumericalFault, run_dir: Path) -> str:
    newest = newest_checkpoint(run_dir)
    kept = (f"its last good checkpoint is {newest[0]} (step {newest[1]})" if newest
            else "no checkpoint had been written yet")
    return (f"{error}; the run stopped and {kept}. learning.on_non_finite=skip drops "
            "updates with a non-finite loss or gradient instead")


def record_failure(run_dir: Path, error: BaseException) -> None:
    """Write ``failed.json`` (what failed, why, the traceback) and say so on stderr."""
    if isinstance(error, NumericalFault):
        message = describe_fault(error, run_dir)
    else:
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    record = {
        "error": type(error).__name__,
        "message": message,
        "traceback": "".join(traceback.format_exception(error)),
        "time": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    if isinstance(error, ConfigError):
        record["key"] = error.key
    if isinstance(error, NumericalFault):
        record["step"] = error.step
    where = ""
    try:
        write_json_atomic(Path(run_dir) / FAILED, record)
        where = f" (details: {Path(run_dir) / FAILED})"
    except OSError:
        pass  # an unwritable folder is itself the failure; stderr still has it
    print(f"[rs_lightning] job {Path(run_dir).name} failed: {type(error).__name__}: "
          f"{message}{where}", file=sys.stderr)


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
