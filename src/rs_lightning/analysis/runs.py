"""Load a finished run (its resolved config and a checkpoint) for evaluation and figures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rs_lightning.config.migrations import migrate_checkpoint, read_run_config
from rs_lightning.config.schema import ValidatedConfig, validate
from rs_lightning.engine.build import build
from rs_lightning.engine.checkpoints import (
    DATAMODULE,
    read_checkpoint,
)
from rs_lightning.engine.learner import MemberPolicy


@dataclass
class TrainedRun:
    run_config: ValidatedConfig
    module: MemberPolicy  # the run's agent, utility and greedy policy
    run_dir: Path
    steps: int  # gradient updates the checkpoint had made
    env_steps: int


def load_run(run_dir: Path, checkpoint: str = "checkpoints/last.ckpt") -> TrainedRun:
    """Rebuild a single-seed run's agent from its ``config.yaml`` and load its checkpoint
    (each seed of a several-seed run is one: ``<run>/seed_<s>/``)."""
    run_dir = Path(run_dir)
    for needed in ("config.yaml", checkpoint):
        if not (run_dir / needed).is_file():
            raise FileNotFoundError(f"{run_dir / needed} not found: is this a run folder?")
    run_config = validate(read_run_config(run_dir))
    _, module = build(run_config)
    state = migrate_checkpoint(read_checkpoint(run_dir / checkpoint, "checkpoint"),
                               run_config.train.env.gamma, str(run_dir / checkpoint))
    module.load_state_dict(state["state_dict"])
    module.eval()
    env_steps = state[DATAMODULE]["collector"]["env_steps"]
    return TrainedRun(run_config, module.member(0), run_dir, int(state["global_step"]),
                      int(env_steps))
