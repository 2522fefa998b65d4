"""Train a risk-sensitive distributional agent: ``python train.py env=risky_transitions risk=cvar``.

Configuration lives in conf/ (Hydra); each job is run by rs_lightning.app.jobs.run_job (skip a
finished job, resume an interrupted one, record a failure) and rs_lightning.app.train.run. Bad
input is reported as one line, ``Error in config: <key>: ...``, with exit status 2. Each job
returns its value (``search_objective.metric``, conf/train.yaml) to the sweeper: what
``hydra/sweeper=optuna`` maximises.
"""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from rs_lightning.app.run_names import register_resolvers as register_folder_resolvers
from rs_lightning.config.derived_defaults import register_resolvers

register_resolvers()  # conf/ derives some defaults from the environment (${rs.*})
register_folder_resolvers()  # run folder names: ${folder_label:...}, ${resume_marker:...}


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from rs_lightning.app.jobs import job_objective, run_job

    return job_objective(cfg, run_job(cfg))


if __name__ == "__main__":
    from rs_lightning.app.cli import run_command

    sys.exit(run_command(main, config_dir=Path(__file__).resolve().parent / "conf"))
