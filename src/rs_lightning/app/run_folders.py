"""Run folders: where a job writes, whether its inputs and folder allow it to, and what a
folder holds (a finished run, checkpoints to resume from, a failure, a sweep's jobs).

One process writes into a run folder at a time: :class:`RunFolderLock` holds ``run.lock``
there (an exclusive ``flock``, with the holder's PID, host and start time for the message a
second process gets). The operating system releases the lock when its process ends, however
it ends, so a lock file left by a killed process is recognised as stale and taken over.

Nothing here imports Lightning or W&B, so bad input is reported within seconds.
"""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import json
import os
import shlex
import socket
import sys
import tempfile
from pathlib import Path, PurePath
from typing import Any

import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from rs_lightning.agents import AGENTS
from rs_lightning.agents.members import make_members
from rs_lightning.analysis.wandb_support import check_wandb_environment
from rs_lightning.config.migrations import migrate_checkpoint, migrate_config
from rs_lightning.config.schema import ValidatedConfig, validate
from rs_lightning.engine.checkpoints import (
    check_compatible,
    checkpoint_step,
    newest_checkpoint,
    read_checkpoint,
)
from rs_lightning.engine.resources import check_resources
from rs_lightning.envs.device_worlds import check_backend
from rs_lightning.envs.factory import check_training_env, env_problem
from rs_lightning.errors import ConfigError
from rs_lightning.types import Problem

FAILED = "failed.json"
LOCK = "run.lock"
# What a run's (or a sweep job's) own folder holds, and a sweep's folder never does.
RUN_FOLDER_FILES = (".hydra", "config.yaml", FAILED, "eval.json", "checkpoints")
# Keys that do not change what a run computes: a folder's run may be continued with others.
UNCOMPARED_KEYS = ("ckpt_path", "logger", "callbacks", "limits", "search_objective",
                   # a wall-clock period: a resumed run may save more or less often
                   "trainer.checkpoint_every_minutes")


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


def hydra_quoted(value: str) -> str:
    """``value`` as one quoted value of Hydra's override grammar: a folder's name holding ``=``
    or ``,`` (``<date>_alpha=0.3,risk=cvar``) is otherwise read as more than one value.
    A quote is escaped, and so are the backslashes before a quote or at the end."""
    out, backslashes = [], 0
    for char in value:
        if char == "\\":
            backslashes += 1
            continue
        out.append("\\" * (2 * backslashes if char == '"' else backslashes))
        backslashes = 0
        out.append('\\"' if char == '"' else char)
    return '"' + "".join(out) + "\\" * (2 * backslashes) + '"'


def resume_command() -> str | None:
    """The command that resumes this job, shell-quoted, where the same command would not: a
    folder Hydra named by the date (``outputs/runs/<date>_<overrides>``) is new at every
    start, so the command gives it as ``hydra.run.dir`` (``hydra.sweep.dir``), quoted for
    Hydra and for the shell. None where the command line gave the folder."""
    if not HydraConfig.initialized():
        return None
    hydra = HydraConfig.get()
    key = "hydra.sweep.dir" if in_multirun() else "hydra.run.dir"
    given = [o.lstrip("+~").split("=", 1)[0] for o in hydra.overrides.hydra]
    if key in given:
        return None
    folder = hydra.sweep.dir if in_multirun() else hydra.run.dir
    program = sys.argv[0]
    program = (["python", program] if program.endswith(".py") else program.split()
               if program.startswith("rs-lightning") else ["rs-lightning", "train"])
    if in_multirun():  # the sweep's own command line: this process's
        arguments = [a for a in sys.argv[1:] if not a.lstrip("+").startswith(key + "=")]
    else:
        arguments = [*hydra.overrides.task, *(o for o in hydra.overrides.hydra
                                              if o.split("=", 1)[0] != "hydra.mode")]
    return shlex.join([*program, *arguments, f"{key}={hydra_quoted(str(folder))}"])


class FolderRefused(ConfigError):
    """The run folder may not be written into (another process holds it, or it holds a run of
    another config): the job writes nothing there, not even ``failed.json``."""


class FolderInUse(FolderRefused):
    """Another process holds the run folder (:class:`RunFolderLock`)."""


def check_output_dir_given(value: Any, key: str) -> None:
    """FolderRefused for an empty ``hydra.run.dir`` / ``hydra.sweep.dir`` (which would put the
    run's files into the current directory)."""
    if value is None or not str(value).strip():
        raise FolderRefused(key, "is empty; give the folder for the outputs, or leave the "
                                 "default (outputs/runs/... or outputs/multirun/...)")


def check_sweep_subdir(subdir: Any) -> None:
    """FolderRefused for a ``hydra.sweep.subdir`` (as written, before interpolation) that
    would put a job's folder outside its sweep folder: an absolute path or a ``..``."""
    parts = PurePath(str(subdir)).parts
    if PurePath(str(subdir)).is_absolute() or ".." in parts:
        raise FolderRefused("hydra.sweep.subdir", "must name a folder inside hydra.sweep.dir "
                            f"(a relative path without '..'), got {str(subdir)!r}")


def check_job_folder() -> None:
    """Under Hydra: FolderRefused if the run or sweep folder this job was given is empty, if
    the sweep's folder is a run's, or if a sweep job's folder lies outside its sweep folder."""
    if not HydraConfig.initialized():
        return
    hydra = HydraConfig.get()
    if in_multirun():
        check_output_dir_given(hydra.sweep.dir, "hydra.sweep.dir")
        check_sweep_folder(hydra.sweep.dir, "hydra.sweep.dir")
        sweep = Path(hydra.sweep.dir).resolve()
        job = Path(hydra.runtime.output_dir).resolve()
        if sweep not in job.parents:
            raise FolderRefused("hydra.sweep.subdir", f"puts this job's folder {job} outside "
                                f"its sweep folder {sweep}: give a folder name inside it")
    else:
        check_output_dir_given(hydra.run.dir, "hydra.run.dir")


def record_hydra_config(cfg: DictConfig, run_dir: Path) -> None:
    """Write Hydra's record of the job (``.hydra/config.yaml``, ``hydra.yaml``,
    ``overrides.yaml``), once the job's checks have passed and it holds the folder.

    conf/train.yaml sets ``hydra.output_subdir: null`` so that Hydra itself, which writes them
    before any check of the job can run, never writes over another run's record.
    """
    if not HydraConfig.initialized():
        return
    hydra_cfg = HydraConfig.instance().cfg
    if hydra_cfg.hydra.output_subdir is not None:
        return  # the user asked Hydra to write them (already done)
    from rs_lightning.files import write_text_atomic

    folder = Path(run_dir) / ".hydra"
    write_text_atomic(folder / "config.yaml", OmegaConf.to_yaml(cfg))
    write_text_atomic(folder / "hydra.yaml", OmegaConf.to_yaml(hydra_cfg))
    write_text_atomic(folder / "overrides.yaml", OmegaConf.to_yaml(hydra_cfg.hydra.overrides.task))


# Folders this process holds: path -> (the lock file's descriptor, nesting depth).
_HELD: dict[Path, list[int]] = {}


def _lock_holder(fd: int) -> dict[str, Any] | None:
    try:
        record = json.loads(os.pread(fd, 4096, 0).decode() or "null")
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) else None


def _describe_holder(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "another process"
    return (f"process {holder.get('pid', '?')} on {holder.get('host', '?')} "
            f"(started {holder.get('started', '?')})")


def _process_alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError, OverflowError):
        return True  # someone else's process, or a record we cannot read: assume it runs
    return True


class RunFolderLock:
    """Hold ``run_dir`` for this process (module docstring): FolderRefused naming the holder
    if another process holds it. Re-entrant within a process; released on exit from the
    ``with`` block (normal, error, or SIGTERM, which Lightning turns into an exception) and
    by the operating system when the process ends."""

    def __init__(self, run_dir: Path | str, key: str = "run_dir") -> None:
        self.folder = Path(run_dir).absolute()
        self.key = key

    def __enter__(self) -> RunFolderLock:  # noqa: PYI034 (Python 3.10 has no Self)
        if self.folder in _HELD:
            _HELD[self.folder][1] += 1
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / LOCK
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                self._lock(fd)
            except BaseException:
                os.close(fd)
                raise
            # A holder that released (and removed the file) between our open and our lock
            # left us locking a removed file: lock the one at the path now.
            try:
                if os.fstat(fd).st_ino == os.stat(path).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        stale = _lock_holder(fd)
        if stale:
            print(f"[rs_lightning] {path} was left by {_describe_holder(stale)}, which has "
                  "ended; taking it over", file=sys.stderr)
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": datetime.datetime.now().isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        os.fsync(fd)
        _HELD[self.folder] = [fd, 1]
        return self

    def _lock(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = _lock_holder(fd)
        except OSError:
            # A file system without flock: trust the record, stale if its PID is dead here.
            holder = _lock_holder(fd)
            if not holder or (holder.get("host") == socket.gethostname()
                              and not _process_alive(holder.get("pid"))):
                return
        raise FolderInUse(
            self.key, f"{self.folder} is in use by {_describe_holder(holder)}: one process "
            "writes into a run folder at a time; wait for it to end (or stop it) and run the "
            "same command again"
        )

    def __exit__(self, *exc_info: object) -> None:
        held = _HELD[self.folder]
        held[1] -= 1
        if held[1]:
            return
        del _HELD[self.folder]
        try:
            os.unlink(self.folder / LOCK)  # while still holding it: no one can take it meanwhile
        except OSError:
            pass
        os.close(held[0])


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


def run_folder_file(path: Path | str) -> str | None:
    """The first of :data:`RUN_FOLDER_FILES` in ``path``: it is a run's folder; else None."""
    return next((name for name in RUN_FOLDER_FILES if (Path(path) / name).exists()), None)


def check_sweep_folder(path: Path | str, key: str) -> None:
    """FolderRefused when ``path`` is a run's own folder: a sweep would write its jobs'
    folders among that run's files."""
    found = run_folder_file(path)
    if found is not None:
        raise FolderRefused(key, f"{path} is the folder of a run (it holds {found}); a sweep "
                               "writes a folder per job into a folder of its own: give a new "
                               "folder, or the sweep's")


def check_inputs(cfg: DictConfig, run_dir: Path | None = None,
                 run_dir_key: str = "run_dir") -> tuple[ValidatedConfig, int]:
    """Check everything a run needs before it writes anything; returns the validated config (the one
    validation of the job) and the number of updates of the checkpoint it resumes from (0
    for a fresh start).

    Raises ConfigError for: a value out of range (schema), an environment gymnasium does not
    know, a run past its budgets of lattice or memory (engine.resources), a missing,
    unreadable or incompatible checkpoint, an output folder that cannot be written.
    """
    run_config = validate(cfg)
    # The environment can be made, with spaces we support (and its problem fits a checkpoint).
    problem = env_problem(run_config.train.env)
    check_training_env(run_config.train.env)
    check_backend(run_config.train.env)  # env.backend=torch steps this world
    run_config.agent_problem(problem)  # its observations suit the network (network=cnn: images)
    check_resources(run_config, problem)  # before anything of that size is allocated
    if run_config.train.logger.backend == "wandb":
        check_wandb_environment()
    start_step = checkpoint_start(run_config, problem) if run_config.train.ckpt_path is not None else 0
    if run_dir is not None:
        check_output_folder(run_dir, run_dir_key)
    return run_config, start_step


def checkpoint_start(run_config: ValidatedConfig, problem: Problem | None = None) -> int:
    """The update ``train.ckpt_path`` resumes from, after checking that it fits the run
    (ConfigError otherwise)."""
    train = run_config.train
    state = migrate_checkpoint(read_checkpoint(train.ckpt_path), train.env.gamma,
                               str(train.ckpt_path))
    problem = problem or env_problem(train.env)
    problem = run_config.agent_problem(problem)
    members = make_members([AGENTS[run_config.agent.name][0](run_config.agent, problem)
                            for _ in range(train.parallel_seeds)])
    check_compatible(state, train.ckpt_path, run_config.agent.name, members, train.env.id,
                     num_envs=train.env.num_envs, parallel_seeds=train.parallel_seeds,
                     n_step=train.learning.n_step,
                     updates_per_step=train.learning.updates_per_step)
    return checkpoint_step(state)


def resuming_from(cfg: DictConfig, run_config: ValidatedConfig, path: Path
                  ) -> tuple[DictConfig, ValidatedConfig, int]:
    """The config and validated config of a run resumed from the checkpoint ``path`` (checked), and
    its step."""
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.ckpt_path = str(path)
    run_config = dataclasses.replace(run_config, train=dataclasses.replace(run_config.train,
                                                                      ckpt_path=str(path)))
    return cfg, run_config, checkpoint_start(run_config)


def finished_summary(run_dir: Path) -> dict[str, Any] | None:
    """The content of ``eval.json`` if the run in ``run_dir`` finished, else None.

    ``eval.json`` is written last and atomically, so a complete one marks a finished run;
    ``failed.json`` beside it (a failure after the evaluation) makes the job run again.
    """
    for name, key in (("eval.json", "expectation"), ("members.json", "members")):
        path = Path(run_dir) / name  # members.json: a run of several seeds (rs_lightning.app.train)
        if not path.is_file() or (Path(run_dir) / FAILED).exists():
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):  # nested past the parser: damaged too
            return None
        return data if _complete(data, key) else None
    return None


def _complete(data: Any, key: str) -> bool:
    """Whether a record is what a finished run writes: ``eval.json`` with a numeric
    expectation, ``members.json`` with a summary of every seed it names."""
    if not isinstance(data, dict) or key not in data:
        return False
    if key == "expectation":
        return isinstance(data[key], (int, float)) and not isinstance(data[key], bool)
    members, seeds = data[key], data.get("seeds")
    return (isinstance(members, dict) and isinstance(seeds, list) and len(seeds) > 0
            and all(isinstance(members.get(str(seed)), dict)
                    and _complete(members[str(seed)], "expectation") for seed in seeds))


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        flat: dict[str, Any] = {}
        for key, value in node.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: node}


def config_differences(run_dir: Path, cfg: DictConfig) -> list[str]:
    """The keys whose value differs between ``run_dir/config.yaml`` (in the current format:
    :mod:`rs_lightning.config.migrations`) and ``cfg``; :class:`NewerFormat` for a folder
    written by a newer version. Only keys both have are compared."""
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
    before = _flatten(migrate_config(recorded, str(path)))
    now = _flatten(OmegaConf.to_container(cfg, resolve=True))
    return [
        f"{key}: {before[key]} there, {now[key]} now"
        for key in sorted(before.keys() & now.keys())
        if key.split(".")[0] not in UNCOMPARED_KEYS and key not in UNCOMPARED_KEYS
        and before[key] != now[key]
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
            raise FolderRefused(
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
    except (OSError, ValueError, RecursionError):
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
        if run_folder_file(job) is None:
            continue  # not a job folder
        failure = read_failure(job)
        if failure is not None:
            state["failed"].append((job.name, failure))
        elif finished_summary(job) is not None:
            state["finished"].append(job.name)
        else:
            state["incomplete"].append(job.name)
    return state
