"""Hydra callbacks: checks before a run writes anything, and work done once a multirun ends."""

from __future__ import annotations

import contextlib
import copy
import io
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from rs_lightning.analysis.results import write_results
from rs_lightning.analysis.study import OPTUNA_RESULTS_FILE, write_study_history
from rs_lightning.app.run_folders import (
    check_inputs,
    check_output_dir_given,
    check_output_folder,
    check_sweep_folder,
    check_sweep_subdir,
    folder_state,
    sweep_jobs,
)
from rs_lightning.errors import EXIT_BAD_INPUT, ConfigError


class _WriteAfterSweep(Callback):
    """After a multirun, write a summary of all its jobs into the sweep folder: ``write``
    (sweep folder -> Markdown) makes ``file``; a sweep without a finished run gets a line
    saying so."""

    file: str
    what: str

    def write(self, sweep_dir: Path) -> str:
        raise NotImplementedError

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            table = self.write(sweep_dir)
        except FileNotFoundError as error:
            print(f"[rs_lightning] no {self.what}: {error}", file=sys.stderr)
            return
        print(f"[rs_lightning] {self.what} ({sweep_dir / self.file}):\n{table}", file=sys.stderr)


class WriteResultsTable(_WriteAfterSweep):
    """After a multirun, write results.md / results.csv of all its jobs into the sweep folder."""

    file, what = "results.md", "results table"

    def write(self, sweep_dir: Path) -> str:
        return write_results(sweep_dir)


class WriteLeaderboard(_WriteAfterSweep):
    """After a benchmark multirun, its leaderboard (scores against the exact references,
    :mod:`rs_lightning.analysis.benchmark`) into the sweep folder."""

    file, what = "leaderboard.md", "leaderboard"

    def write(self, sweep_dir: Path) -> str:
        from rs_lightning.analysis.benchmark import write_leaderboard

        return write_leaderboard(sweep_dir)


def _task_config(config: DictConfig) -> DictConfig:
    """The job's config as the task function receives it: without the ``hydra`` node."""


    task = copy.deepcopy(config)
    with read_write(task), open_dict(task):
        del task["hydra"]
    return task


def _stop_on_bad_input(check) -> None:
    """Run ``check``; on bad input print one line and exit 2.

    Hydra turns an exception of a callback into a warning and goes on, so the run is stopped
    with SystemExit, which it lets through.
    """

    try:
        check()
    except ConfigError as error:
        print(f"Error in config: {error}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None


class CheckInputs(Callback):
    """Check a run's inputs before Hydra creates or writes its folder.

    Hydra creates the run folder before the task starts; a bad value, checkpoint or folder
    reported here, before that, leaves no empty folder behind. In a multirun, the sweep folder
    and the config of every job of a grid sweep are checked at the start, before the sweep
    writes its folder: one bad job stops the sweep before any job runs (Optuna draws its
    trials as it goes: each is checked as it starts). The job repeats every check itself
    (rs_lightning.app.jobs), so a command line without this callback is no less safe: there
    a bad job fails alone, with its failed.json.
    """

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:

        def check() -> None:
            check_output_dir_given(config.hydra.run.dir, "hydra.run.dir")
            task = _task_config(config)
            run_dir = Path(config.hydra.run.dir)
            check_inputs(task, run_dir, "hydra.run.dir")
            if run_dir.is_dir():
                folder_state(task, run_dir, "hydra.run.dir")

        _stop_on_bad_input(check)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:

        def check() -> None:
            check_output_dir_given(config.hydra.sweep.dir, "hydra.sweep.dir")
            check_output_folder(config.hydra.sweep.dir, "hydra.sweep.dir")
            check_sweep_folder(config.hydra.sweep.dir, "hydra.sweep.dir")
            check_sweep_subdir(OmegaConf.to_container(config.hydra.sweep, resolve=False)
                               .get("subdir"))
            check_sweep_jobs(config)

        _stop_on_bad_input(check)


MANY_JOBS = 20  # a sweep of this many jobs says that it checks them first


def grid_jobs(config: DictConfig) -> tuple[list[list[str]], str] | None:
    """The overrides of every job a grid sweeper (Hydra's basic sweeper, or one built on it
    such as the benchmark's) launches, in its order, and what it said while making them;
    None for a sweeper that draws its jobs as it goes (Optuna)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import HydraContext
    from hydra.utils import get_class

    try:
        sweeper = get_class(str(config.hydra.sweeper.get("_target_")))
        if not issubclass(sweeper, BasicSweeper):
            return None
        # Its own settings (the benchmark's run_last orders the jobs), one batch.
        settings = {key: value for key, value in
                    OmegaConf.to_container(config.hydra.sweeper, resolve=True).items()
                    if key not in ("_target_", "max_batch_size")}
        sweeper = sweeper(max_batch_size=None, **settings)
    except Exception:  # a sweeper that cannot be made so: Hydra's own errors say why
        return None
    # What Hydra's setup gives a sweeper, less the launcher: the benchmark's composes each
    # job with them to apply the rules that depend on the risk setting.
    sweeper.config = config
    sweeper.hydra_context = HydraContext(config_loader=GlobalHydra.instance().config_loader(),
                                         callbacks=None)
    params = [f"{key}={value}" for key, value in (config.hydra.sweeper.get("params") or {}).items()]
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    overrides = parser.parse_overrides([*params, *config.hydra.overrides.task])
    with contextlib.redirect_stderr(io.StringIO()) as said:  # the sweeper says it again
        batches = sweeper.split_arguments(overrides, None)
    return [list(job) for batch in batches for job in batch], said.getvalue().strip()


def check_sweep_jobs(config: DictConfig) -> None:
    """ConfigError naming the first job of a grid sweep whose config is refused (its values,
    environment, budgets, checkpoint: what each job checks first), and the job; or a sweep
    left without a job. Before the sweep writes its folder, so that one bad value of one job
    writes nothing."""
    from hydra.core.global_hydra import GlobalHydra

    from rs_lightning.app.cli import describe_hydra_error

    found = grid_jobs(config)
    if found is None:
        return
    jobs, said = found
    if not jobs:
        raise ConfigError("hydra.sweeper.params", "the sweep has no job left"
                          + (f" ({said.replace(chr(10), '; ')})" if said else ""))
    varying = {o.split("=", 1)[0] for o in {o for job in jobs for o in job}
               if sum(o in job for job in jobs) < len(jobs)}
    if len(jobs) >= MANY_JOBS:  # a second or so each: say why the sweep has not started
        print(f"[rs_lightning] sweep: checking the config of each of its {len(jobs)} jobs "
              "before the first starts", file=sys.stderr)
    loader = GlobalHydra.instance().config_loader()
    for number, job in enumerate(jobs):
        try:
            check_inputs(_task_config(loader.load_sweep_config(config, job)))
        except Exception as error:
            problem = error if isinstance(error, ConfigError) else describe_hydra_error(error)
            named = " ".join(o for o in job if o.split("=", 1)[0] in varying)
            raise ConfigError(problem.key, f"{problem.message} (job #{number} of "
                              f"{len(jobs)}{': ' + named if named else ''}); no job ran"
                              ) from None


class WriteStudyHistory(Callback):
    """After an Optuna study (hydra/sweeper=optuna): every trial's parameters and objective
    in ``optimization_history.csv`` beside Optuna's ``optimization_results.yaml``."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:

        if "optuna" not in str(config.hydra.sweeper.get("_target_", "")).lower():
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        path = write_study_history(sweep_dir)
        if path is not None:
            print(f"[rs_lightning] study of {config.search_objective.metric} "
                  f"({config.search_objective.evaluation} evaluation): best trial in "
                  f"{sweep_dir / OPTUNA_RESULTS_FILE}, every trial in {path}; "
                  f"rs-lightning report {sweep_dir} reports it", file=sys.stderr)


class SweepSummary(Callback):
    """After a multirun: which jobs finished, which failed and why; exit status 1 on failures.

    Each job records its own failure in ``failed.json`` (rs_lightning.app.jobs), so this also
    works when the jobs ran in other processes (hydra/launcher=joblib).
    """

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:

        sweep_dir = Path(config.hydra.sweep.dir)
        jobs = sweep_jobs(sweep_dir)
        finished, failed, incomplete = jobs["finished"], jobs["failed"], jobs["incomplete"]
        lines = [f"[rs_lightning] sweep {sweep_dir}: jobs {len(finished)} finished, "
                 f"{len(failed)} failed, {len(incomplete)} incomplete"]
        for name, failure in failed:
            lines.append(f"  FAILED {name}: {failure.get('error')}: {failure.get('message')}")
        for name in incomplete:
            lines.append(f"  INCOMPLETE {name}: no eval.json (interrupted?)")
        if failed or incomplete:
            lines.append("  (each failed job's failed.json has the traceback; the same command "
                         "again retries the failed jobs, resumes the incomplete ones and skips "
                         "the finished ones)")
        if finished:
            lines.append(f"  the results table and figures of the sweep: rs-lightning report "
                         f"{sweep_dir}")
        print("\n".join(lines), file=sys.stderr)
        if failed:
            # The last callback to run at the end of a multirun (Hydra calls them in reverse
            # order, and this one comes first in conf/train.yaml): nothing is skipped by it.
            raise SystemExit(1)
