"""One job as ``python train.py`` runs it: check the inputs, skip, resume or run, report.

Running a command again must never redo or lose finished work, so a job first looks at its
folder:

- ``eval.json`` complete (and no ``failed.json``): the job finished; it is skipped and its
  summary returned ("skipping finished job").
- checkpoints there: the job was interrupted; it resumes from the newest readable one.
- otherwise it starts from scratch (or from ``ckpt_path=``).

A folder holding results of a *different* config is never written into, and one process
writes into a folder at a time (:class:`~rs_lightning.app.run_folders.RunFolderLock`): a second
one stops at once, naming the first. Every check runs here, in the job, whatever Hydra
callbacks are configured. In a multirun a failing job writes ``failed.json`` (error and
traceback) into its folder and the sweep goes on, except that a job folder it may not write
into stops the sweep with one line (exit status 2) and gets no ``failed.json``, and a job
another process is running is skipped; a single run prints one line and exits non-zero
(2: bad input, 3: a numerical fault, 4: a write that failed, 143: SIGTERM, 130: SIGINT),
naming the last good checkpoint.

This module imports neither Lightning nor W&B, so bad input is reported within seconds.
"""

from __future__ import annotations

import datetime
import errno
import sys
import traceback
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rs_lightning.app.run_folders import (
    FAILED,
    FolderInUse,
    FolderRefused,
    RunFolderLock,
    check_inputs,
    check_job_folder,
    folder_state,
    in_multirun,
    output_key,
    record_hydra_config,
    resume_command,
    resuming_from,
    run_directory,
)
from rs_lightning.engine.checkpoints import newest_checkpoint
from rs_lightning.errors import (
    EXIT_BAD_INPUT,
    EXIT_ENVIRONMENT_FAULT,
    EXIT_NUMERICAL_FAULT,
    EXIT_OUTPUT_FAULT,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    ConfigError,
    EnvironmentFault,
    NumericalFault,
)
from rs_lightning.files import write_json_atomic


# ----------------------------------------------------------------------------- the job
def run_job(cfg: DictConfig) -> dict[str, Any] | None:
    """What ``python train.py`` runs for each job; returns the evaluation summary.

    Single run: bad input exits 2 and a numerical fault 3, each with one line on stderr. In a
    multirun every failure is written to the job's ``failed.json`` and the sweep goes on (the
    sweep's summary lists the failures and its exit status is non-zero); a folder the job may
    not write into stops the sweep (exit 2), one another process holds skips the job.
    """
    run_dir = run_directory()
    try:
        check_job_folder()
        return skip_resume_or_run(cfg, run_dir, output_key())
    except SystemExit as error:
        # Lightning turns SIGTERM into its SIGTERMException (a SystemExit); a job stopped
        # before training never imported Lightning, and need not import it here.
        lightning = sys.modules.get("pytorch_lightning.utilities.exceptions")
        if lightning is None or not isinstance(error, lightning.SIGTERMException):
            raise
        # Stopped from outside: not a failure of the job, and a sweep stops here too.
        saved = newest_checkpoint(run_dir)
        where = f"{saved[0]} (update {saved[1]})" if saved else "no checkpoint"
        name = getattr(error, "signal_name", "SIGTERM")
        again = resume_command()
        resume = f"resume it with: {again}" if again else "the same command resumes it"
        print(f"Stopped by {name}: the run's state is in {where}; {resume}", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED if name == "SIGINT" else EXIT_TERMINATED) from None
    except Exception as error:
        if in_multirun() and isinstance(error, FolderInUse):
            # Another process runs this job (two copies of one sweep): the sweep goes on.
            print(f"[rs_lightning] job {run_dir.name} skipped: {error}", file=sys.stderr)
            return None
        if in_multirun() and not isinstance(error, FolderRefused):
            record_failure(run_dir, error)
            return None
        if isinstance(error, ConfigError):
            print(f"Error in config: {error}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_INPUT) from None
        if isinstance(error, NumericalFault):
            print(f"Error in training: {describe_fault(error, run_dir)}", file=sys.stderr)
            raise SystemExit(EXIT_NUMERICAL_FAULT) from None
        if isinstance(error, OSError):
            print(f"Error writing the run: {describe_os_error(error, run_dir)}", file=sys.stderr)
            raise SystemExit(EXIT_OUTPUT_FAULT) from None
        if isinstance(error, EnvironmentFault):
            print(f"Error in the environment: {error}", file=sys.stderr)
            raise SystemExit(EXIT_ENVIRONMENT_FAULT) from None
        # Anything else is a bug: its whole traceback, and no exception left for Hydra (the
        # command line wrapper treats what reaches it as bad input).
        traceback.print_exc()
        raise SystemExit(1) from None


def skip_resume_or_run(cfg: DictConfig, run_dir: Path, key: str = "run_dir") -> dict[str, Any]:
    """Skip a finished job, resume an interrupted one, or run it (see the module docstring)."""
    # Bad input first, whatever the folder holds; the job's one validation.
    run_config, start_step = check_inputs(cfg, run_dir, key)
    finished, newest = folder_state(cfg, run_dir, key)
    if finished:
        print(f"[rs_lightning] skipping finished job {run_dir} (its eval.json is complete; "
              "delete it to run the job again)", file=sys.stderr)
        return finished
    with RunFolderLock(run_dir, key):
        record_hydra_config(cfg, run_dir)
        if newest:
            path, step = newest
            print(f"[rs_lightning] resuming {run_dir} from {path.name} (step {step})",
                  file=sys.stderr)
            cfg, run_config, start_step = resuming_from(cfg, run_config, path)
        (Path(run_dir) / FAILED).unlink(missing_ok=True)
        from rs_lightning.app.train import (
            run,  # Lightning is imported only for a job that trains
        )

        return run(cfg, run_dir, checked=(run_config, start_step))


def job_objective(cfg: DictConfig, summary: dict[str, Any] | None) -> float | None:
    """What a job returns to a sweeper: ``search_objective.metric`` of its evaluation (final or
    best; rs_lightning.analysis.study). None for a job that failed, which Optuna counts as a
    failed trial."""
    if summary is None:
        return None
    from rs_lightning.analysis.study import run_objective

    try:
        return run_objective(run_directory(), cfg.search_objective.metric, cfg.search_objective.evaluation)
    except (KeyError, OSError, ValueError) as error:
        print(f"[rs_lightning] no objective for this job: {error}", file=sys.stderr)
        return None


# ----------------------------------------------------------------------------- failures
def describe_fault(error: NumericalFault, run_dir: Path) -> str:
    newest = newest_checkpoint(run_dir)
    kept = (f"its last good checkpoint is {newest[0]} (step {newest[1]})" if newest
            else "no checkpoint had been written yet")
    return (f"{error}; the run stopped and {kept}. learning.on_non_finite=skip drops "
            "updates with a non-finite loss or gradient instead")


# What to do about a failed write, by errno.
_WRITE_ADVICE = {
    errno.ENOSPC: "free some disk space", errno.EDQUOT: "free some of your disk quota",
    errno.EACCES: "make the run folder writable", errno.EPERM: "make the run folder writable",
    errno.EROFS: "make the run folder writable (its file system is read-only)",
}


def describe_os_error(error: OSError, run_dir: Path) -> str:
    """One line for a write (or read) of the run that failed: what, where, the last good
    checkpoint, and how to go on (the same command resumes from that checkpoint)."""
    try:
        newest = newest_checkpoint(run_dir)
    except OSError:  # the folder itself cannot be read
        newest = None
    kept = (f"its last good checkpoint is {newest[0]} (step {newest[1]})" if newest
            else "no checkpoint had been written yet")
    where = f": {error.filename}" if error.filename else ""
    advice = _WRITE_ADVICE.get(error.errno, "fix the cause")
    again = resume_command()
    resume = f"resume it with: {again}" if again else "run the same command: it resumes from there"
    return (f"{error.strerror or error}{where}; the run stopped and {kept}. {advice[0].upper()}"
            f"{advice[1:]}, then {resume}")


def record_failure(run_dir: Path, error: BaseException) -> None:
    """Write ``failed.json`` (what failed, why, the traceback) and say so on stderr."""
    if isinstance(error, NumericalFault):
        message = describe_fault(error, run_dir)
    elif isinstance(error, OSError):
        message = describe_os_error(error, run_dir)
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


