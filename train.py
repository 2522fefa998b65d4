"""Train a risk-sensitive distributional agent: ``python train.py env=risky_transitions risk=cvar``.

Configuration lives in conf/ (Hydra); each job is run by rs_lightning.jobs.run_job (skip a
finished job, resume an interrupted one, record a failure) and rs_lightning.train.run. Bad
input is reported as one line, ``Error in config: <key>: ...``, with exit status 2. Each job
returns its objective (``objective.metric``, conf/train.yaml) to the sweeper: what
``hydra/sweeper=optuna`` maximises.
"""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from rs_lightning.envs.derived_defaults import register_resolvers

register_resolvers()  # conf/ derives some defaults from the environment (${rs.*})


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from rs_lightning.jobs import job_objective, run_job

    return job_objective(cfg, run_job(cfg))


if __name__ == "__main__":
    from rs_lightning.cli import run_command

    sys.exit(run_command(main, config_dir=Path(__file__).resolve().parent / "conf"))
