"""``rs-lightning train [overrides]``: train, with Hydra's command line over the installed
configuration (``conf/``, the package ``rs_lightning.conf``), from any folder.

    rs-lightning train env=risky_transitions risk=cvar alpha=0.3
    rs-lightning train -m seed=0,1,2                     # a multirun: one job per seed
    rs-lightning train --config-dir conf experiment=mine # presets of your own folder too

The outputs go under the current folder's ``outputs/`` (``hydra.run.dir`` /
``hydra.sweep.dir``). Each job is run by :func:`rs_lightning.app.jobs.run_job` (skip a
finished job, resume an interrupted one, record a failure); bad input is one line, ``Error
in config: <key>: ...``, with exit status 2. Each job returns its value
(``search_objective.metric``, conf/train.yaml) to the sweeper: what
``hydra/sweeper=optuna`` maximises. ``python train.py`` in the repository runs this same
command.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from rs_lightning.app.cli import run_command
from rs_lightning.app.run_names import register_resolvers as register_folder_resolvers
from rs_lightning.config import CONF_DIR, CONF_SOURCE
from rs_lightning.config.derived_defaults import register_resolvers


@hydra.main(version_base="1.3", config_path=CONF_SOURCE, config_name="train")
def train_jobs(cfg: DictConfig) -> float | None:
    from rs_lightning.app.jobs import job_objective, run_job

    return job_objective(cfg, run_job(cfg))


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: this process's); returns the exit status."""
    register_resolvers()  # conf/ derives some defaults from the environment (${rs.*})
    register_folder_resolvers()  # run folder names: ${folder_label:...}, ${resume_marker:...}
    argv = list(sys.argv[1:] if argv is None else argv)
    program = sys.argv
    sys.argv = [program[0], *argv]  # Hydra reads its arguments from sys.argv
    try:
        return run_command(train_jobs, argv, config_dir=CONF_DIR)
    finally:
        sys.argv = program


if __name__ == "__main__":
    raise SystemExit(main())
